"""Where two backends meet, here rather than in either (backends never import each other):
an optimizer schedule replayed step by step by the executor, the optimizer told the
executor's simulated makespan of the program as written and the SMT backend's
must-happen-before order in time (`must_chain`), and a synthesized spec's makespan bound set
to what the executor's run of it reaches."""

from __future__ import annotations

from checker.executor.replay import replay
from checker.executor.simulate import Simulation, simulate
from checker.ir import Op, Program
from checker.optimize import EmitError, OptimizeResult, emit, optimize, stream_work
from checker.optimize.model import launch_of
from checker.optimize.schedule import Schedule
from checker.smt.layout import Layout
from checker.smt.order import compute
from checker.smt.rules import TooLarge
from checker.witness import StepKind


def simulated_makespan(simulation: Simulation) -> int | None:
    """What the optimizer takes as the program's makespan as written (None: it deadlocks)."""
    return None if simulation.deadlocked else int(simulation.makespan)


def optimize_as_written(program: Program, runs_in_time: bool = False, **options) -> OptimizeResult:
    """`optimize` with the simulated makespan of the program as written (and `must_chain`;
    with `runs_in_time`, `best_run_in_time` too)."""
    return optimize(program, simulated=simulated_makespan(simulate(program)), must_chain=must_chain,
                    best_run=best_run_in_time if runs_in_time else None, **options)


MUST_CHAIN_STATEMENTS = 4000
"""The largest program whose must-happen-before order the lower bound reads (the order costs
steps x chains)."""


def must_chain(program: Program) -> int:
    """The longest chain in time of the must-happen-before order (`checker/smt/order.py`):
    every step of a finishing execution comes no sooner than each step it surely follows, a
    task ends its duration after it starts (a collective member, after its group's last
    start), starts its launch cost after its enqueue, and a thread's next statement comes the
    enqueue's launch cost or its host function's duration later; and a stream's tasks end no
    sooner than the earliest of them may start plus all their time. A lower bound on every
    execution's makespan for `optimize` where it has no exact model: unlike the chains of each
    thread's own orders it reads there, it reads the orders between threads every execution
    keeps (a wait on a record another thread may also make, whose candidates are all behind
    the same task). The SMT backend's order, read for the optimizer: hence here."""
    if len(program.statements) > MUST_CHAIN_STATEMENTS:
        return 0
    try:
        layout = Layout(program)
        order = compute(layout)
    except TooLarge:
        return 0
    steps, statements, clocks = layout.steps, program.statements, order.clocks
    if order.impossible:
        return 0  # (no execution finishes: no makespan to bound)
    step_id = layout.step_id
    earliest = [0] * len(steps)
    # (a step's clock sums to more than the clock of every step it follows: a topological order)
    for s in sorted(range(len(steps)), key=lambda s: sum(clocks[s])):
        kind, index = steps[s]
        statement = statements[index]
        at = 0
        for chain, position in enumerate(clocks[s]):
            if position >= 0 and layout.chains[chain][position] == s:
                position -= 1  # (on its own chain: the step before it there)
            if position >= 0:
                at = max(at, earliest[layout.chains[chain][position]])
        if kind is StepKind.ISSUE:
            previous = layout.previous[index]
            if previous is not None and statements[previous].stream is not None:
                at = max(at, earliest[step_id[(StepKind.ISSUE, previous)]] + launch_of(program, statements[previous]))
        elif kind is StepKind.RETURN:
            issue = earliest[step_id[(StepKind.ISSUE, index)]]
            at = max(at, issue + (launch_of(program, statement) if statement.stream is not None
                                  else statement.duration if statement.op in (Op.HOST, Op.FREE) else 0))
        elif kind in (StepKind.START, StepKind.COMPLETE):
            at = max(at, earliest[step_id[(StepKind.ISSUE, index)]] + launch_of(program, statement))
        elif kind is StepKind.END:
            members = layout.group_members.get(s, (index,))
            at = max([at] + [earliest[step_id[(StepKind.START, m)]] for m in members
                             if (StepKind.START, m) in step_id]) if len(members) > 1 else at
            at = max(at, earliest[step_id[(StepKind.START, index)]]) + statement.duration
        earliest[s] = at
    # A stream's tasks run one after another, none before the earliest of them may start.
    first: dict[int, int] = {}
    for st in statements:
        if st.stream is not None and st.running:
            start = earliest[step_id[(StepKind.START, st.index)]]
            first[st.stream] = min(first.get(st.stream, start), start)
    work = stream_work(statements)
    return max([*earliest, *(first[s] + work[s] for s in work)], default=0)


def replays(program: Program, schedule: Schedule) -> tuple[bool, str]:
    """Whether the executor accepts the schedule's steps as a legal, complete execution."""
    run = replay(program, schedule.witness)
    if not run.ok:
        return False, run.reason
    if not run.finished:
        return False, "the replay left work unfinished"
    return True, "ok"


SHUFFLED_UP_TO = 20_000
"""Statements past which no shuffled runs are tried: one run and its replay may then take
longer than the time they are given, which is read only between runs."""


def shortest_shuffled_run(program: Program, seconds: float, tries: int = 2000,
                          enough: int | None = None) -> int | None:
    """The shortest makespan among simulations that take threads and stream heads in random
    orders (seeds 0, 1, ...; every other one interleaving the threads statement by statement),
    each one replayed by the executor as a complete execution; None
    when none finished. For `expect makespan` on a program with a choice the optimizer cannot
    model (threads racing for a stream, a flag, a notify): any execution that ends by the
    bound meets it, so the search stops at one that ends by `enough`. (200 tries missed a run
    that one specific enqueue order at the first instant gives, in a 2-thread program a timed
    brute force found; 2,000 found it in 0.6 s.)"""
    import time

    if len(program.statements) > SHUFFLED_UP_TO:
        return None
    deadline = time.monotonic() + seconds
    best = None
    for seed in range(tries):
        if time.monotonic() > deadline:
            break
        run = simulate(program, shuffle=seed, interleave=seed % 2 == 1)
        if run.deadlocked or (best is not None and run.makespan >= best):
            continue
        checked = replay(program, run.steps)
        if checked.ok and checked.finished:
            best = int(run.makespan)
            if enough is not None and best <= enough:
                break
    return best


def best_run_in_time(program: Program, seconds: float) -> tuple[int, bool] | None:
    """The makespan of the run in time that ends first, as far as `seconds` let the search
    go, and whether the search saw every run (`timed_search` with `least`; each run found is
    replayed by the executor); None when none finished, or the program is too large to search.
    For `optimize` where threads race: the simulated run is only one of their orders."""
    from checker.executor.timed import STATEMENTS_UP_TO, timed_search

    if len(program.statements) > STATEMENTS_UP_TO or seconds <= 0:
        return None
    search = timed_search(program, 1 << 62, seconds=seconds, least=True)
    return (int(search.run.makespan), search.least) if search.run is not None else None


def guided_run(program: Program, issued: tuple[int, ...]) -> int | None:
    """The makespan of the run in time whose threads step in the order `issued` (statements
    in the order an execution issues them, `simulate`'s `guide`), replayed by the executor as
    a complete execution; None when it does not finish."""
    run = simulate(program, guide=issued)
    if run.deadlocked:
        return None
    checked = replay(program, run.steps)
    return int(run.makespan) if checked.ok and checked.finished else None


def emit_as_run(program: Program, result: OptimizeResult) -> str:
    """`emit`'s spec, its `expect makespan` bound the makespan `check` will hold it to: that of
    the spec run in time (`simulate`: contended engines to the higher priority, no engine left
    idle for a task about to become ready) in its slowest program (a runtime's behaviours left
    open: `check` takes each), where that exceeds the minimum its lanes allow. Raises what
    `emit` raises, and EmitError when the spec does not load or `check` would find in it what
    it does not find in the original: a wrong spec is never written."""
    from checker.frontend import load_text

    text = emit(program, result)
    loaded = load_text(text, "<emitted>")
    if loaded.program is None:
        raise EmitError("the synthesized spec does not load (" + _first_error(loaded.diagnostics)
                        + "); nothing written")
    _refuse_new_findings(program, loaded)
    ran = slowest_run(loaded)
    bound = result.bound
    if ran is None or bound is None:
        return text
    return _state_makespan(text, bound, ran)


def _first_error(diagnostics) -> str:
    """The first error of a spec that does not load, for the user."""
    errors = [d for d in diagnostics if d.severity.value == "error"] or list(diagnostics)
    return f"{errors[0].code.value}: {errors[0].message}" if errors else "no program"


def _finding_kinds(variants) -> set:
    """The kinds of what `check` finds in a spec's programs (unknowns aside: they say nothing)."""
    from checker.analyze import Options, find_all
    from checker.findings import FindingKind

    findings, _ = find_all(tuple(variants), Options())
    return {f.kind for f in findings if f.kind is not FindingKind.UNKNOWN}


def _refuse_new_findings(program: Program, loaded) -> None:
    """The emitter's safety net: a synthesized spec with a race, use-after-free or deadlock the
    original lacks (an order the synthesis failed to keep) is an emit error, not a spec."""
    new = _finding_kinds(tuple(loaded.variants) or (loaded.program,)) - _finding_kinds((program,))
    if new:
        raise EmitError("the synthesized spec would have findings the original lacks ("
                        + ", ".join(sorted(k.value for k in new)) + "); nothing written")


def slowest_run(loaded) -> int | None:
    """The makespan `check` holds an `expect makespan` to: the slowest of the spec's programs
    run in time (None: one deadlocks)."""
    variants = [v for v in (tuple(loaded.variants) or (loaded.program,)) if not v.races_only]
    runs = [simulate(v) for v in variants or (loaded.program,)]
    if any(run.deadlocked for run in runs):
        return None
    return max(int(run.makespan) for run in runs)


def _state_makespan(text: str, bound: int, ran: int) -> str:
    """The header states the spec's own makespan run in time, and claims the bound only when
    that reaches it; the `expect makespan` line is set to what `check` will compute."""
    import re

    from checker.spec_text import duration_text

    if ran <= bound:
        note = (f"# Run in time (`simulate`, its slowest program), it takes {ran / 1e6:g} ms: "
                "it reaches the bound.\n")
    else:
        text = re.sub(r"^expect makespan <= \S+$", f"expect makespan <= {duration_text(ran)}", text,
                      count=1, flags=re.M)
        text = text.replace("# the overlap bound keeps. Its minimum makespan is the bound of the original program,",
                            "# the overlap bound keeps. Run in time, it does not reach the overlap bound of the original program,",
                            1)
        note = (f"# Run in time (`simulate`, its slowest program), it takes {ran / 1e6:g} ms: above the bound "
                "by the launch time the lines above name, because a runtime holds no engine back for the "
                "order the minimum needs, or because one of its runtime's behaviours synchronizes more.\n")
    if ran > bound:
        text = text.replace(' (reaches the overlap bound)"', ' (from the overlap bound)"', 1)
    return text.replace('spec "', note + 'spec "', 1)
