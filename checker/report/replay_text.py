"""Text for `replay`, rendered from its JSON object (one model, two views)."""

from __future__ import annotations

from checker.ir import Program, Statement, loop_text
from checker.witness import Step


def _described(program: Program, statement: Statement) -> str:
    """What the statement does, with its loop iteration (`[step=1 s=0]`), as `check`'s witness
    shows it: one line's steps in several iterations are told apart."""
    loops = loop_text(statement.bindings)
    return program.describe(statement) + (f" {loops}" if loops else "")


def replay_text(program: Program, steps: tuple[Step, ...], data: dict) -> list[str]:
    """The steps walked (the finding's statements starred, an illegal step marked), then
    whether the finding was reproduced and how. `data` is the file's object in
    `replay --format json`: its `replay`, `finding` and `confirmation`."""
    run = data["replay"]
    finding = data.get("finding")
    confirmation = data.get("confirmation")
    ok, applied = run["ok"], run["applied"]
    out = []
    involved = set(finding.get("statements", ())) if finding else set()
    for number, step in enumerate(steps[: applied + (0 if ok else 1)], start=1):
        statement = program.statements[step.statement]
        marker = ("  <- illegal" if not ok and number == applied + 1
                  else ("  *" if step.statement in involved else ""))
        out.append(f"{number:>5}. {step.kind.value:<8} line {statement.span.line:<4} "
                   f"{_described(program, statement)}{marker}")
    if not ok:
        out.append(run["reason"])  # ("step N is not legal here: why", N counted as listed)
        return out
    out.append(f"replayed {len(steps)} steps: every step is legal")
    if confirmation is not None:
        out.append(("reproduced: " if confirmation["ok"] else "NOT reproduced: ") + confirmation["reason"])
        detail = confirmation.get("detail") or {}
        if detail.get("explanation"):
            out.append(f"  {detail['explanation']}")
        for key in ("reader_saw", "writer_first", "reader_first", "a_last", "b_last"):
            if key in detail:
                value = detail[key] if detail[key] is not None else "(that order cannot be reached from this execution)"
                out.append(f"  {key.replace('_', ' ')}: {value}")
        for item in detail.get("participants", ()):
            what = _described(program, program.statements[item["statement"]])
            out.append(f"  stuck: line {item['line']} {what}: {item['waits_for']}")
    else:
        for item in run.get("stuck") or ():
            statement = program.statements[item["statement"]]
            out.append(f"  stuck: line {statement.span.line} {_described(program, statement)}: "
                       f"{item['waits_for']}")
    return out
