"""Differential testing: the SMT engine against the executor's exhaustive explorer.

Both backends implement `docs/semantics.md` independently. On random small specs they must
agree on every racing statement pair, every use-after-free / use-before-alloc, and whether
some execution deadlocks; every SMT witness must replay in the executor and show its
finding. A disagreement is saved under `tests/regressions/` (one spec per file, named by a
hash of its text) and replayed by `test_regressions` from then on.
"""

from __future__ import annotations

import hashlib
import os
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings

from checker.executor.explore import explore
from checker.executor.machine import ENQUEUED_AFTER_FREE, USE_AFTER_FREE, USE_BEFORE_ALLOC
from checker.executor.replay import confirm
from checker.findings import FindingKind
from checker.frontend import load_text
from checker.smt.queries import Analysis
from checker.smt.solve import Budget
from strategies import specs, tensor_specs
from test_smt_scale import FREEING_LOOP, RANK_LOOP

REGRESSIONS = Path(__file__).parent / "regressions"
EXAMPLES = int(os.environ.get("STREAMPROOF_DIFF_EXAMPLES", "300"))
MAX_STATES = 200_000

DEAD_KIND = {  # run order and launch order are both a use after free
    USE_AFTER_FREE: FindingKind.USE_AFTER_FREE,
    ENQUEUED_AFTER_FREE: FindingKind.USE_AFTER_FREE,
    USE_BEFORE_ALLOC: FindingKind.USE_BEFORE_ALLOC,
}


def compare(text: str) -> list[str]:
    """Disagreements between the two backends on every program of one spec (empty: they
    agree); a program the explorer cannot finish is skipped (nothing to compare)."""
    loaded = load_text(text, "<random>")
    assert loaded.program is not None, "the strategy must produce valid specs"
    problems = []
    for program in loaded.variants or (loaded.program,):
        problems += [f"[{program.variant}] {p}" if program.variant else p for p in _compare(program)]
    return problems


def _compare(program) -> list[str]:
    exploration = explore(program, max_states=MAX_STATES)
    if not exploration.complete:
        return []
    analysis = Analysis(program, Budget(timeout=60.0))
    findings = analysis.run()
    problems = []
    unknown = [f.message for f in findings if f.kind is FindingKind.UNKNOWN]
    if unknown:
        problems.append(f"solver unknowns: {unknown}")
    explored_races = set(exploration.race_pairs())
    if analysis.racing != explored_races:
        line = lambda i: program.statements[i].span.line  # noqa: E731
        only_smt = sorted(analysis.racing - explored_races)
        only_exec = sorted(explored_races - analysis.racing)
        problems.append(
            f"races differ: only smt {only_smt} (lines {[(line(a), line(b)) for a, b in only_smt]}), "
            f"only executor {only_exec} (lines {[(line(a), line(b)) for a, b in only_exec]})"
        )
    explored_dead = {(u.statement, DEAD_KIND[u.kind]) for u in exploration.dead_uses}
    if analysis.dead_uses != explored_dead:
        problems.append(f"dead uses differ: smt {sorted(analysis.dead_uses)}, "
                        f"executor {sorted(explored_dead)}")
    smt_deadlock = any(f.kind is FindingKind.DEADLOCK for f in findings)
    if smt_deadlock != bool(exploration.deadlocks):
        problems.append(f"deadlock differs: smt {smt_deadlock}, executor {bool(exploration.deadlocks)}")
    explored_mismatches = Counter(_mismatch_key(f) for f in exploration.mismatches)
    smt_mismatches = Counter(_mismatch_key(f) for f in findings if f.kind is FindingKind.COLLECTIVE_MISMATCH)
    if smt_mismatches != explored_mismatches:
        problems.append(f"mismatches differ: smt {sorted(smt_mismatches.items())}, "
                        f"executor {sorted(explored_mismatches.items())}")
    for finding in findings:
        if finding.kind is FindingKind.UNKNOWN:
            continue
        confirmation = confirm(program, finding)
        if not confirmation.ok:
            problems.append(f"{finding.kind.value} witness of {finding.statements} does not "
                            f"replay: {confirmation.reason}")
    return problems


def _mismatch_key(finding) -> tuple[str, bool]:
    """Where a mismatch of calls met by enqueue order is (a collective's position; a
    send/recv pair's message names no position), and whether it is only a warning."""
    where = finding.message.split(":")[0] if finding.message.startswith("collective mismatch at") else "a pair"
    return where, finding.advisory


def save_regression(text: str, problems: list[str]) -> Path:
    REGRESSIONS.mkdir(exist_ok=True)
    name = hashlib.sha256(text.encode()).hexdigest()[:12]
    path = REGRESSIONS / f"r_{name}.sched"
    header = "".join(f"# {line}\n" for line in problems)
    path.write_text(header + text)
    return path


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(specs())
def test_smt_agrees_with_explorer(text: str) -> None:
    _agree_or_save(text)


def _agree_or_save(text: str) -> None:
    """The backends agree on a random spec; a disagreement is saved as a regression."""
    program = load_text(text, "<random>").program
    assume(program is not None)
    problems = compare(text)
    if problems:
        path = save_regression(text, problems)
        pytest.fail(f"backends disagree (saved as {path}):\n" + "\n".join(problems) + "\n" + text)


@settings(max_examples=EXAMPLES // 3, deadline=None, suppress_health_check=list(HealthCheck))
@given(tensor_specs())
def test_caching_allocator_tensors_agree_with_explorer(text: str) -> None:
    """Blocks that split and merge: the pieces they share, and their launch-order
    lifetimes, mean the same in both backends."""
    _agree_or_save(text)


@settings(max_examples=EXAMPLES // 2, deadline=None, suppress_health_check=list(HealthCheck))
@given(specs(shared_comms=True, comm_heavy=True))
def test_groups_formed_by_enqueue_order_agree_with_explorer(text: str) -> None:
    """Comm calls that several threads enqueue onto one stream meet by enqueue order: the
    solver's `Meet` rules against the explorer's groups formed as calls are enqueued, on
    races, dead uses, deadlocks and the mismatches of the groups that meet."""
    _agree_or_save(text)


@settings(max_examples=EXAMPLES // 2, deadline=None, suppress_health_check=list(HealthCheck))
@given(specs(shared_comms=True, comm_heavy=True, in_flight=True))
def test_one_in_flight_calls_on_streams_of_their_own_agree_with_explorer(text: str) -> None:
    """A `one_in_flight` comm's calls go on any stream of the rank's device, so two threads'
    calls of one rank meet by enqueue order without sharing a stream: the explorer's
    reduction, the fast path's groups and the solver's must all follow that order."""
    _agree_or_save(text)


LOOPS = {
    # each iteration's kernel on b reads a buffer that a frees and allocates again
    "freeing": FREEING_LOOP.replace("..N", "..3"),
    # each iteration's allreduce against the kernels of later iterations (one shared event)
    "ranks": RANK_LOOP.replace("..N", "..3"),
    # notifies set on one stream and cleared on another, some lost
    "handshake": """\
device d { compute 2 }
buffer x 1MiB on d
stream s on d
stream t on d
notify go
thread producer {
  for i in 0..3 {
    s: kernel fill writes x 1ms
    s: notify go
  }
}
thread consumer {
  for i in 0..2 {
    t: await go
    t: kernel use reads x 1ms
  }
  sync t
}
""",
}


@pytest.mark.parametrize("name", sorted(LOOPS))
def test_loops_agree_with_explorer(name: str) -> None:
    """Loops whose instances share events, notifies, frees and allocs: many predicted pairs
    share a statement (one execution each, its start moved first) and each setter of a set
    state has several later clearers on one chain (only the first is listed)."""
    text = LOOPS[name]
    assert explore(load_text(text, name).program, max_states=MAX_STATES).complete
    assert compare(text) == []


@pytest.mark.parametrize(
    "path", sorted(REGRESSIONS.glob("*.sched")) if REGRESSIONS.exists() else [],
    ids=lambda p: p.stem,
)
def test_regressions(path: Path) -> None:
    problems = compare(path.read_text())
    assert not problems, "\n".join(problems)


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(specs())
def test_linear_snapshot_binding_agrees_with_explorer(text: str) -> None:
    """Large specs bind waits through one integer per wait instead of pairwise clauses; force
    that encoding on small specs so the explorer can check it."""
    _agree_with_the_large_form("SMALL_BINDING", text)


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(specs(shared_comms=True, comm_heavy=True))
def test_partner_rules_read_through_their_latest_step_agree_with_explorer(text: str) -> None:
    """Large groups read a partner's own rules through the latest step they require
    (`Encoding.ready`) instead of spelling them out; force that on small specs so the explorer
    can check it."""
    _agree_with_the_large_form("SMALL_READY", text)


def _agree_with_the_large_form(threshold: str, text: str) -> None:
    """The backends agree with the encoding's `threshold` set to 0, so that the form meant
    for large programs is used on every one."""
    from checker.smt import encode

    saved = getattr(encode, threshold)
    setattr(encode, threshold, 0)
    try:
        problems = compare(text)
    finally:
        setattr(encode, threshold, saved)
    assert not problems, "\n".join(problems) + "\n" + text
