"""The SMT engine alone against the conformance verdicts, plus budgets and witnesses."""

from __future__ import annotations

import json
from pathlib import Path
from unittest import mock

import pytest

from checker.findings import FindingKind
from checker.frontend import load_file, load_text
from checker.smt import analyze
from checker.witness import StepKind

CONFORMANCE = Path(__file__).parent / "conformance"
SPECS = sorted(CONFORMANCE.glob("c*.sched"))


def verdict(program, findings) -> dict:
    """The conformance summary of a set of findings (see tests/conformance/README.md)."""
    line = lambda i: program.statements[i].span.line  # noqa: E731
    races = sorted(sorted((line(f.statements[0]), line(f.statements[1])))
                   for f in findings if f.kind is FindingKind.RACE)
    return {
        "races": races,
        "race_buffers": sorted({f.buffer for f in findings if f.kind is FindingKind.RACE}),
        "uaf_lines": sorted({line(f.statements[0]) for f in findings
                             if f.kind in (FindingKind.USE_AFTER_FREE, FindingKind.USE_BEFORE_ALLOC)}),
        "deadlock": any(f.kind is FindingKind.DEADLOCK for f in findings),
    }


def replays(program, witness) -> None:
    """Every step of a witness is legal in order (the executor's machine judges)."""
    from checker.executor.machine import Machine

    machine = Machine(program)
    state = machine.initial()
    for step in witness.steps:
        state = machine.apply(state, step)


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.stem)
def test_conformance(path: Path) -> None:
    program = load_file(path).program
    assert program is not None
    findings = analyze(program)
    expected = json.loads(path.with_suffix("").with_suffix(".expected.json").read_text())
    assert verdict(program, findings) == {k: expected[k] for k in
                                          ("races", "race_buffers", "uaf_lines", "deadlock")}
    assert not any(f.kind is FindingKind.UNKNOWN for f in findings)
    for finding in findings:
        assert finding.witness is not None
        replays(program, finding.witness)


def test_race_instances_grouped_per_source_pair() -> None:
    program = load_text(
        "device d { compute 2 }\n"
        "buffer x 1MiB on d\n"
        "stream a on d\n"
        "stream b on d\n"
        "thread t {\n"
        "  for i in 0..3 {\n"
        "    a: kernel w writes x\n"
        "    b: kernel r reads x\n"
        "  }\n"
        "}\n"
    ).program
    findings = [f for f in analyze(program) if f.kind is FindingKind.RACE]
    by_lines = {tuple(sorted(program.statements[i].span.line for i in f.statements)): f
                for f in findings}
    # w with r: every instance pair except none (different streams, no order): 9 pairs.
    assert by_lines[(7, 8)].instances == 9
    # w with another instance of w: same stream, ordered: no race. r likewise.
    assert set(by_lines) == {(7, 8)}
    finding = by_lines[(7, 8)]
    assert finding.buffer == "x" and finding.memory == "x"
    assert finding.statements[0] < finding.statements[1]


def test_every_instance_of_a_loops_race_is_confirmed_by_the_executor(monkeypatch) -> None:
    """A two-stage pipeline whose copy comes before its wait races in every iteration, and
    each iteration's pair needs the previous pair's ends: the executions that confirm them
    go on one from another (`Analysis._predict`). Each is replayed by the executor, and
    every iteration's pair is counted once."""
    from checker.smt import queries

    admitted = []
    admits = queries.Analysis.admits
    monkeypatch.setattr(queries.Analysis, "admits",
                        lambda self, order: admitted.append(admits(self, order)) or admitted[-1])
    iterations = 30
    program = load_text(
        "device d { compute 1 copy 1 }\nbuffer act[2] 1MiB on d\nbuffer out[2] 1MiB on d\n"
        "stream comp on d\nstream p2p on d\nevent written[2]\nnotify ready[2]\nnotify freed[2]\n"
        "thread stage0 {\n"
        f"  for i in 0..{iterations} {{\n    let s = i % 2\n    await freed[s]\n"
        "    comp: kernel fwd writes act[s] 1ms\n    comp: record written[s]\n    notify ready[s]\n  }\n}\n"
        "thread stage1 {\n  notify freed[0]\n  notify freed[1]\n"
        f"  for i in 0..{iterations} {{\n    let s = i % 2\n    await ready[s]\n"
        "    p2p: copy out[s] <- act[s] 1ms\n    p2p: wait written[s]\n    sync p2p\n    notify freed[s]\n  }\n}\n"
    ).program
    races = [f for f in analyze(program, workers=1) if f.kind is FindingKind.RACE]
    assert [(f.buffer, f.instances, f.undecided) for f in races] == [("act", iterations, 0)]
    # the executions that go on from the last one were admitted (each pair needs the ends of
    # the one before, so no two are packed into one)
    chained = [a for a, b in zip(admitted, admitted[1:]) if a is not None and b is not None
               and len(b.order) > len(a.order) and b.order[:len(a.order)] == a.order]
    assert len(chained) >= iterations // 2


def test_tiny_rlimit_is_unknown_not_clean() -> None:
    program = load_file(CONFORMANCE / "c01_two_writers_race.sched").program
    # Without concrete runs (which show this race on their own), the solver must answer.
    with mock.patch("checker.smt.queries.EAGERNESS", ()):
        findings = analyze(program, rlimit=1)
    kinds = {f.kind for f in findings}
    assert FindingKind.UNKNOWN in kinds
    assert FindingKind.RACE not in kinds
    unknown = next(f for f in findings if f.kind is FindingKind.UNKNOWN)
    assert unknown.code.value == "SP301"
    assert "race" in unknown.message and unknown.detail["reason"]
    # (z3 says "canceled" for a spent rlimit and for a timeout alike: the message says what ran out)
    assert unknown.detail["reason"] == "no answer within 10 s or 1 resource units"


def test_deadlock_lists_every_stuck_participant() -> None:
    program = load_file(CONFORMANCE / "c11_flag_event_never_recorded.sched").program
    (deadlock,) = [f for f in analyze(program) if f.kind is FindingKind.DEADLOCK]
    lines = sorted(program.statements[s.statement].span.line for s in deadlock.stuck)
    assert lines == [5, 6]
    assert all(s.waits_for for s in deadlock.stuck)
    assert any("ready" in s.waits_for for s in deadlock.stuck)


def test_collective_members_start_on_their_own_and_end_once() -> None:
    program = load_file(CONFORMANCE / "c15_send_recv_paired.sched").program
    findings = analyze(program)
    assert findings == ()
    text = (
        "device d0 { comm 1 }\ndevice d1 { comm 1 }\n"
        "buffer a 1MiB on d0\nbuffer b 1MiB on d1\nbuffer h 1MiB on host pinned\n"
        "stream c0 on d0\nstream c1 on d1\ncomm w = { c0, c1 }\n"
        "thread t0 {\n  c0: allreduce w a\n  host peek reads h\n}\n"
        "thread t1 {\n  c1: allreduce w b\n  host poke writes h\n}\n"
    )
    program = load_text(text).program
    (race,) = [f for f in analyze(program) if f.kind is FindingKind.RACE]
    starts = [s.statement for s in race.witness.steps if s.kind is StepKind.START]
    assert len(starts) == len(set(starts))
    # The group's one `end` step is written with its first member.
    assert all(s.statement == 0 for s in race.witness.steps if s.kind is StepKind.END)
    replays(program, race.witness)


def test_a_statement_racing_with_another_instance_of_itself() -> None:
    program = load_text(
        "device d { compute 2 }\n"
        "buffer x 1MiB on d\n"
        "stream s[2] on d\n"
        "thread t {\n"
        "  for i in 0..2 {\n"
        "    s[i]: kernel k writes x\n"
        "  }\n"
        "}\n"
    ).program
    (race,) = analyze(program)
    assert race.kind is FindingKind.RACE
    a, b = (program.statements[i] for i in race.statements)
    assert a.index < b.index and a.origin == b.origin
    assert verdict(program, (race,))["races"] == [[6, 6]]
    assert race.instances == 1
    replays(program, race.witness)


def test_every_finding_confirms_in_the_executor() -> None:
    from checker.executor.replay import confirm

    for path in SPECS:
        program = load_file(path).program
        for finding in analyze(program):
            assert confirm(program, finding).ok, (path.name, finding.message)


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.stem)
def test_conformance_with_linear_binding(path: Path, monkeypatch) -> None:
    """The linear snapshot-binding encoding (used for waits with many candidate records)
    gives every conformance verdict too."""
    from checker.smt import encode

    monkeypatch.setattr(encode, "SMALL_BINDING", 0)
    program = load_file(path).program
    expected = json.loads(path.with_suffix("").with_suffix(".expected.json").read_text())
    findings = analyze(program)
    assert verdict(program, findings) == {k: expected[k] for k in
                                          ("races", "race_buffers", "uaf_lines", "deadlock")}
    for finding in findings:
        replays(program, finding.witness)


def test_once_the_budget_is_spent_no_race_formula_is_built(monkeypatch) -> None:
    """Questions left when the budget runs out are reported unasked, one by one, without
    building their formulas (the halving of a class's questions built them all, for nothing:
    8 threads of 80 rounds spent 20 s past a 20 s budget)."""
    from checker.smt.encode import Encoding
    from checker.smt.queries import Analysis
    from checker.smt.solve import Budget

    text = """\
device d { compute 2 }
buffer x[3] 1MiB on d
stream s[3] on d
thread t[3] {
  for i in 0..3 {
    s[t]: kernel k reads x[(t+1)%3] writes x[t] 1us
  }
}
"""
    analysis = Analysis(load_text(text).program, Budget())
    candidates = analysis.race_candidates()
    assert len(candidates) > 2
    monkeypatch.setattr(Analysis, "_spent", lambda self: True)
    monkeypatch.setattr(Encoding, "race", mock.Mock(side_effect=AssertionError("a formula was built")))
    assert analysis.races(candidates, runs=False, repair=False) == []
    assert sorted(analysis.parts.races_not_asked) == sorted((a.index, b.index) for a, b, _ in candidates)


def test_lazy_runs_find_a_hang_the_plain_runs_miss(monkeypatch) -> None:
    from checker.smt import queries
    from checker.smt.queries import Analysis
    from checker.smt.solve import Budget

    program = load_file(Path(__file__).parent / "fixtures" / "hang_4x40.sched").program
    runs = queries.DEADLOCK_RUNS

    def found(runs: int) -> list:
        monkeypatch.setattr(queries, "DEADLOCK_RUNS", runs)
        analysis = Analysis(program, Budget(10.0))
        assert analysis.deadlock_question() is not None  # (not proven free of deadlock)
        analysis.deadlock_from_runs()
        return analysis.parts.deadlock

    assert found(0) == []
    (deadlock,) = found(runs)
    assert deadlock.kind is FindingKind.DEADLOCK and deadlock.stuck
    replays(program, deadlock.witness)
