"""Exhaustive exploration agrees with every conformance verdict, and never calls a cut-off search clean."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from checker.executor.explore import explore
from checker.executor.machine import Machine
from checker.frontend import load_file, load_text

CONFORMANCE = Path(__file__).parent / "conformance"
VALID = sorted(CONFORMANCE.glob("c*.sched"))


def _lines(program, result):
    line = lambda i: program.statements[i].span.line  # noqa: E731
    races = sorted({tuple(sorted((line(r.a), line(r.b)))) for r in result.races})
    uaf = sorted({line(u.statement) for u in result.dead_uses})
    return races, uaf


def test_conformance_specs_present():
    assert len(VALID) >= 21


@pytest.mark.parametrize("path", VALID, ids=lambda p: p.stem)
def test_conformance_verdict(path):
    expected = json.loads(path.with_suffix(".expected.json").read_text())
    loaded = load_file(path)
    assert loaded.program is not None, loaded.diagnostics
    program = loaded.program
    result = explore(program)
    assert result.complete
    races, uaf = _lines(program, result)
    assert races == [tuple(pair) for pair in expected["races"]]
    assert uaf == expected["uaf_lines"]
    assert bool(result.deadlocks) == expected["deadlock"]
    buffers = sorted({f.buffer for f in result.findings(program) if f.kind.value == "race"})
    assert buffers == sorted(expected["race_buffers"])


@pytest.mark.parametrize("path", VALID, ids=lambda p: p.stem)
def test_witnesses_replay_to_their_finding(path):
    program = load_file(path).program
    result = explore(program)
    machine = Machine(program)
    for race in result.races:
        state = machine.initial()
        for step in race.witness.steps:
            state = machine.apply(state, step)
        assert state.running >> race.a & 1 and state.running >> race.b & 1
    for dl in result.deadlocks:
        state = machine.initial()
        for step in dl.witness.steps:
            state = machine.apply(state, step)
        assert not machine.enabled(state) and not machine.finished(state)


def test_cut_off_search_is_not_clean():
    text = "\n".join(
        ["device d { compute 4 copy 1 }", "buffer x 1MiB on d"]
        + [f"stream s{i} on d" for i in range(4)]
        + ["thread main {"]
        + [f"  s{i}: kernel k{i} reads x" for i in range(4)]
        + ["}"]
    )
    program = load_text(text).program
    full = explore(program)
    assert full.complete and full.clean
    cut = explore(program, max_states=5)
    assert not cut.complete and not cut.clean
    assert cut.states <= 5


def test_search_stops_at_its_memory_and_time_limits():
    from checker.executor.explore import _state_bytes

    text = "\n".join(
        ["device d { compute 4 copy 1 }", "buffer x 1MiB on d"]
        + [f"stream s{i} on d" for i in range(4)]
        + [f"thread t{i} {{\n" + "".join(f"  s{i}: kernel k reads x\n" for _ in range(3)) + "}" for i in range(3)]
    )
    program = load_text(text).program
    full = explore(program, reduce=False)
    assert full.complete and full.transitions > 10_000
    # a state count does not bound memory when states are large: the estimate of bytes does
    small = explore(program, reduce=False, memory=_state_bytes(program) * 50)
    assert (small.complete, small.stopped, small.clean) == (False, "memory", False)
    assert small.states <= 51
    late = explore(program, reduce=False, budget=0.0)
    assert (late.complete, late.stopped) == (False, "time") and late.states < full.states
    assert (full.stopped, explore(program, max_states=5).stopped) == ("", "states")


def test_deadlock_lists_what_each_participant_waits_for():
    program = load_file(CONFORMANCE / "c11_flag_event_never_recorded.sched").program
    result = explore(program)
    (dl,) = result.deadlocks
    texts = [f"{program.describe(program.statements[i])}: {w}" for i, w in dl.stuck]
    assert any(t.startswith("sync s1: waiting for s1: wait ready") for t in texts)
    assert any(t == "s1: wait ready: flag ready not set" for t in texts)


def test_a_collective_member_stuck_before_its_start_names_the_member_it_waits_for():
    """c0's member starts with its group (rule 8), and c1's is behind a wait for a record
    behind c0's: the member waits for c1's, not (as it said) for itself to start."""
    from checker.frontend import load_text

    program = load_text("device d0 { compute 1 }\ndevice d1 { compute 1 }\nbuffer g0 1MiB on d0\n"
                        "buffer g1 1MiB on d1\nstream c0 on d0\nstream c1 on d1\ncomm w = { c0, c1 }\n"
                        "event e\nthread main {\n  c0: allreduce w g0\n  c0: record e\n  c1: wait e\n"
                        "  c1: allreduce w g1\n}\n").program
    (dl,) = explore(program).deadlocks
    (why,) = [w for i, w in dl.stuck if i == 0]
    assert "starts together" in why and "(line 13) cannot start yet" in why and "(line 10)" not in why


@pytest.mark.parametrize("path", VALID, ids=lambda p: p.stem)
def test_pairwise_conflicts_give_the_same_verdict(path, monkeypatch):
    """Large programs test conflicts pairwise instead of precomputing masks: same answers."""
    import checker.executor.machine as machine_module

    program = load_file(path).program
    expected = explore(program)
    monkeypatch.setattr(machine_module, "PRECOMPUTE_CONFLICTS", 0)
    pairwise = explore(program)
    assert pairwise.race_pairs() == expected.race_pairs()
    assert [(u.statement, u.kind) for u in pairwise.dead_uses] == [
        (u.statement, u.kind) for u in expected.dead_uses]
    assert bool(pairwise.deadlocks) == bool(expected.deadlocks)


def test_a_statement_stuck_as_task_and_thread_counts_once():
    # The pageable copy waits behind a collective whose other member is never enqueued: the
    # copy is stuck as a task, and its thread is stuck in it.
    program = load_text(
        "device d0\ndevice d1\nbuffer x0 64B on d0\nbuffer x1 64B on d1\nbuffer h 64B on host\n"
        "stream s0 on d0\nstream s1 on d1\ncomm w = { s0, s1 }\n"
        "thread main {\n  s0: allreduce w x0\n  s0: copy x0 <- h\n  s1: allreduce w x1\n}\n",
        "k.sched").program
    from checker import messages
    from checker.findings import Stuck

    (dl,) = explore(program).deadlocks
    assert [i for i, _ in dl.stuck].count(1) == 2
    finding = messages.deadlock(program, tuple(Stuck(i, w) for i, w in dl.stuck), None)
    assert finding.statements == (0, 1)
    assert finding.message == "deadlock: 2 statements can never complete (lines 10, 11)"
    one = load_text("device d\nstream s on d\nevent f flag\nthread main {\n  s: wait f\n}\n").program
    (dl,) = explore(one).deadlocks
    finding = messages.deadlock(one, tuple(Stuck(i, w) for i, w in dl.stuck), None)
    assert finding.message == "deadlock: 1 statement can never complete (line 5)"
