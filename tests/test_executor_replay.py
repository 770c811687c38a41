"""Replay accepts exactly the legal step sequences, and confirm checks findings against them."""

from __future__ import annotations

import importlib
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings

from checker.executor.explore import explore
from checker.executor.machine import IllegalStep, Machine
from checker.executor.replay import _longest_witnesses, confirm, confirm_all, replay
from checker.findings import Finding, FindingKind
from checker.frontend import load_file, load_text
from checker.smt.queries import Analysis
from checker.smt.solve import Budget
from checker.witness import Step, StepKind, Witness
from strategies import specs

replay_module = importlib.import_module("checker.executor.replay")
"""The module (the package's `replay` attribute is the function)."""

CONFORMANCE = Path(__file__).parent / "conformance"
VALID = sorted(CONFORMANCE.glob("c*.sched"))


def _program(name):
    return load_file(CONFORMANCE / name).program


@pytest.mark.parametrize("path", VALID, ids=lambda p: p.stem)
def test_every_explored_finding_is_confirmed(path):
    program = load_file(path).program
    for finding in explore(program).findings(program):
        result = confirm(program, finding)
        assert result.ok, (finding, result.reason)


def test_race_detail_shows_the_corruption():
    program = _program("c03_wait_binds_latest_record.sched")
    (finding,) = [f for f in explore(program).findings(program) if f.kind is FindingKind.RACE]
    detail = confirm(program, finding).detail
    assert detail["kind"] == "read/write"
    assert detail["memory"] == "a"
    # The reader sees three different things depending on the order.
    seen = {detail["reader_saw"], detail["writer_first"], detail["reader_first"]}
    assert len(seen) == 3
    assert detail["reader_saw"].startswith("in-flight")


def test_race_detail_never_offers_the_value_read_as_an_alternative():
    # The allreduce's write cannot be finished first from the witness, and the read-first
    # value is the value read: the explanation says so instead of repeating it.
    program = load_file(Path(__file__).parent.parent / "specs" / "bug_missing_wait.sched").program
    (finding,) = [f for f in explore(program).findings(program) if f.kind is FindingKind.RACE]
    detail = confirm(program, finding).detail
    assert detail["writer_first"] is None and detail["reader_first"] == detail["reader_saw"]
    assert detail["explanation"].endswith("it read the old value this time, as it would had the read "
                                          "completed first, but nothing orders the two")
    assert detail["explanation"].count(detail["reader_saw"]) == 1


def test_a_pair_racing_on_two_buffers_replays_each_finding_on_its_own_buffer():
    program = load_text("""
device d { compute 2 copy 1 }
stream a on d
stream b on d
buffer x[2] 1KiB on d
buffer y 1KiB on d
alias low = y[0:512]
thread main {
  a: kernel k1 writes x[1], low 10us
  b: kernel k2 reads x[1], y 10us
}
""").program
    races = [f for f in explore(program).findings(program) if f.kind is FindingKind.RACE]
    assert sorted((f.memory or f.buffer) for f in races) == ["x[1]", "y"]
    for finding in races:
        detail = confirm(program, finding).detail
        assert detail["memory"] == (finding.memory or finding.buffer)
        where = "x[1]" if finding.memory == "x[1]" else "y[0:512]"
        assert f"read {where} " in detail["explanation"], detail["explanation"]


def test_deadlock_detail_lists_stuck_participants():
    program = _program("c16_single_hw_queue_deadlock.sched")
    (finding,) = [f for f in explore(program).findings(program) if f.kind is FindingKind.DEADLOCK]
    result = confirm(program, finding)
    assert result.ok
    assert any("notify go not set" in s for s in result.detail["stuck"])
    assert any("same hardware queue" in s for s in result.detail["stuck"])


def test_a_use_after_free_confirmation_names_the_step_as_listed_and_how_the_bytes_died():
    program = load_text("device d0 { compute 1 }\nbuffer x 1MiB on d0\nstream s on d0\nstream s2 on d0\n"
                        "thread t {\n  s: alloc x\n  s: kernel k writes x 1ms\n  s: free x\n"
                        "  s2: kernel late reads x 1ms\n}\n").program
    late = 3
    before = [Step(StepKind.ISSUE, i) for i in range(4)] + [
        Step(StepKind.COMPLETE, 0), Step(StepKind.START, 1), Step(StepKind.END, 1), Step(StepKind.START, 2)]
    # the free ends, then the kernel starts: it starts on dead bytes at step 10 (counted from 1)
    after = confirm(program, Finding(FindingKind.USE_AFTER_FREE, "", (late, 2), witness=Witness(
        tuple(before + [Step(StepKind.END, 2), Step(StepKind.START, late)]))))
    assert after.ok and after.reason == "s2: kernel late (line 9) starts at step 10 while bytes it touches are dead"
    # the kernel starts first and the free takes effect while it runs: not a start on dead bytes
    during = confirm(program, Finding(FindingKind.USE_AFTER_FREE, "", (late, 2), witness=Witness(
        tuple(before + [Step(StepKind.START, late), Step(StepKind.END, 2)]))))
    assert during.ok and during.reason == ("s2: kernel late (line 9) is running when step 10 "
                                           "(end s: free x (line 8)) frees bytes it touches")


def test_tampered_witnesses_are_rejected():
    program = _program("c02_event_orders_writers.sched")
    machine = Machine(program)
    # A complete legal run: always take the first enabled step.
    state, steps = machine.initial(), []
    while machine.enabled(state):
        step = machine.enabled(state)[0]
        steps.append(step)
        state = machine.apply(state, step)
    assert machine.finished(state)
    good = replay(program, Witness(tuple(steps)))
    assert good.ok and good.finished and not good.races
    # Start the second writer before the record it waits for has completed.
    clear = next(s for s in steps if s.kind is StepKind.START and s.statement == 3)
    bad = list(steps)
    bad.remove(clear)
    bad.insert(bad.index(Step(StepKind.ISSUE, 3)) + 1, clear)
    result = replay(program, Witness(tuple(bad)))
    assert not result.ok
    assert result.failed_at == bad.index(clear)
    assert "waiting for" in result.reason
    # Swap two steps of one thread; an unknown statement; a duplicated step.
    swapped = list(steps)
    swapped[0], swapped[1] = swapped[1], swapped[0]
    assert replay(program, Witness(tuple(swapped))).failed_at == 0
    assert not replay(program, Witness((Step(StepKind.ISSUE, 99),))).ok
    dup = replay(program, Witness((steps[0], steps[0])))
    assert not dup.ok and dup.failed_at == 1


def test_apply_raises_illegal_step_with_reason():
    program = _program("c11_flag_event_never_recorded.sched")
    machine = Machine(program)
    state = machine.apply(machine.initial(), Step(StepKind.ISSUE, 0))
    with pytest.raises(IllegalStep) as info:
        machine.apply(state, Step(StepKind.COMPLETE, 0))
    assert "flag ready not set" in info.value.reason
    with pytest.raises(ValueError):
        machine.apply(state, Step(StepKind.END, 0))


def test_confirm_rejects_a_race_whose_witness_orders_the_pair():
    program = _program("c02_event_orders_writers.sched")
    machine = Machine(program)
    state, steps = machine.initial(), []
    while machine.enabled(state):
        step = machine.enabled(state)[0]
        steps.append(step)
        state = machine.apply(state, step)
    fake = Finding(FindingKind.RACE, "fake", (0, 3), witness=Witness(tuple(steps)))
    assert not confirm(program, fake).ok
    fake_deadlock = Finding(FindingKind.DEADLOCK, "fake", (0,), witness=Witness(tuple(steps)))
    assert not confirm(program, fake_deadlock).ok
    assert not confirm(program, Finding(FindingKind.RACE, "no witness", (0, 3))).ok


def _confirmations_agree(program, findings) -> None:
    """`confirm_all` with a checkpoint every 1, 3 and 32 steps, and with at most 2 per
    replay (spaced by the witness's length), gives what `confirm` does."""
    one_by_one = [(c.ok, c.reason, c.detail) for c in (confirm(program, f) for f in findings)]
    saved = replay_module.CHECKPOINT_EVERY, replay_module.MAX_CHECKPOINTS
    try:
        for every, most in ((1, 64), (3, 64), (32, 64), (1, 2)):
            replay_module.CHECKPOINT_EVERY, replay_module.MAX_CHECKPOINTS = every, most
            shared = [(c.ok, c.reason, c.detail) for c in confirm_all(program, findings)]
            assert shared == one_by_one, f"checkpoint every {every} steps, at most {most}"
    finally:
        replay_module.CHECKPOINT_EVERY, replay_module.MAX_CHECKPOINTS = saved


def test_a_shared_replay_keeps_a_bounded_number_of_states():
    program = load_text(RACY, "racy").program
    findings = [f for f in Analysis(program, Budget(timeout=60.0)).run() if f.witness is not None]
    steps = max((f.witness.steps for f in findings), key=len)
    assert len(steps) > 3, "the longest witness must be longer than the smaller limit"
    saved = replay_module.CHECKPOINT_EVERY, replay_module.MAX_CHECKPOINTS
    try:
        for every, most in ((1, 64), (1, 3)):
            replay_module.CHECKPOINT_EVERY, replay_module.MAX_CHECKPOINTS = every, most
            pairs = {f.statements for f in findings if len(f.statements) == 2}
            trace = replay_module._Trace.spaced(len(steps), pairs)
            assert replay_module._traced(Machine(program), steps, trace)
            for a, b in pairs:  # where each pair first runs together, as a replay watching it alone
                _, _, alone = replay_module._run(Machine(program), steps, watch=(1 << a) | (1 << b))
                assert trace.together.get((a, b)) == alone
            assert len(trace.checkpoints) <= most
            assert len(trace.checkpoints) == -(-len(steps) // trace.every)  # one per `every` steps
    finally:
        replay_module.CHECKPOINT_EVERY, replay_module.MAX_CHECKPOINTS = saved


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(specs())
def test_shared_replays_confirm_exactly_what_single_replays_do(text):
    """`confirm_all` replays a long witness once for the races whose witnesses are its
    prefixes. With every real finding, and with forged races cut short of their second
    start (each a prefix of a real witness, so it shares that replay), every verdict, reason
    and detail must equal `confirm`'s one by one."""
    program = load_text(text, "<random>").program
    assume(program is not None)
    findings = list(Analysis(program, Budget(timeout=60.0)).run())
    forged = []
    for f in findings:
        if f.kind is FindingKind.RACE and f.witness is not None and len(f.witness.steps) > 1:
            steps = f.witness.steps
            forged.append(replace(f, witness=Witness(steps[:-1])))
            forged.append(replace(f, statements=f.statements[::-1], witness=Witness(steps[:-1])))
    everything = [f for f in findings if f.witness is not None] + forged
    _confirmations_agree(program, everything)
    if forged:
        assert _longest_witnesses(program, everything), "forged prefixes must share a replay"
        # A race witness ends with the later of the two starts: cut short, it shows no race.
        assert not any(c.ok for c in confirm_all(program, forged))


def test_shared_replays_on_a_spec_with_many_races():
    program = load_text(RACY, "racy").program
    findings = [f for f in Analysis(program, Budget(timeout=60.0)).run() if f.witness is not None]
    assert len(findings) >= 6
    assert _longest_witnesses(program, findings), "races read off one run share a replay"
    _confirmations_agree(program, findings)
    assert all(c.ok for c in confirm_all(program, findings))


def test_shared_replays_when_a_later_member_start_samples_its_group_again():
    """A collective's members here start in separate steps, and each member's start samples
    what the whole group reads again: the bytes after a longer witness are not those after
    its prefix, so each prefix's bytes are rebuilt (found by a random campaign)."""
    program = load_text(GROUPED, "grouped").program
    findings = [f for f in Analysis(program, Budget(timeout=60.0)).run() if f.witness is not None]
    forged = [replace(f, witness=Witness(f.witness.steps[:-1])) for f in findings
              if f.kind is FindingKind.RACE and len(f.witness.steps) > 1]
    assert _longest_witnesses(program, findings + forged)
    _confirmations_agree(program, findings + forged)


GROUPED = """\
device d0 { compute 2 copy 2 comm 1 }
device d1 { compute 2 copy 2 comm 1 }
stream s0 on d0
stream s1 on d1
buffer a 4096B on d0
comm c = { s0, s1 }
thread t0 {
  group {
    s0: allreduce c a
    s0: allreduce c a
  }
  for i in 0..2 {
    s0: kernel k writes a
  }
  group {
    s0: allreduce c a
    s1: allreduce c a
  }
}
"""

RACY = """\
spec "many races off one run"
device gpu0 { compute 4 copy 2 }
buffer x 1KiB on gpu0
buffer y 1KiB on gpu0
stream s[3] on gpu0
thread main {
  s[0]: kernel a writes x 1ms
  s[1]: kernel b reads x writes y 1ms
  s[2]: kernel c reads x reads y 1ms
  s[0]: kernel d writes y 1ms
  s[1]: kernel e writes x 1ms
}
"""


def test_worker_processes_confirm_exactly_what_one_process_does(monkeypatch):
    """`confirm_all` with two workers (every finding split into chunks, from one finding on)
    gives each finding the confirmation one process gives it, in the findings' order; forged
    races cut short of their second start share replays with real ones and are refused the
    same way in a worker."""
    program = load_text(RACY, "racy").program
    findings = [f for f in Analysis(program, Budget(timeout=60.0)).run() if f.witness is not None]
    forged = [replace(f, witness=Witness(f.witness.steps[:-1])) for f in findings
              if f.kind is FindingKind.RACE and len(f.witness.steps) > 1]
    everything = findings + forged
    alone = [(c.ok, c.reason, c.detail) for c in confirm_all(program, everything)]
    monkeypatch.setattr(replay_module, "CONFIRM_SPLIT", 1)
    for method in ("fork", "spawn"):
        monkeypatch.setenv("STREAMPROOF_START_METHOD", method)
        split = [(c.ok, c.reason, c.detail) for c in confirm_all(program, everything, workers=2)]
        assert split == alone, method
    assert any(ok for ok, _, _ in alone) and not all(ok for ok, _, _ in alone)


def test_confirmation_chunks_keep_each_shared_replay_whole():
    """Every finding is in exactly one chunk, each chunk in finding order, and the findings
    that share one replay (`_longest_witnesses`) in the same chunk."""
    program = load_text(RACY, "racy").program
    findings = [f for f in Analysis(program, Budget(timeout=60.0)).run() if f.witness is not None]
    findings += [replace(f, witness=Witness(f.witness.steps[:-1])) for f in findings
                 if f.kind is FindingKind.RACE and len(f.witness.steps) > 1]
    owners = _longest_witnesses(program, findings)
    assert owners
    for count in (1, 2, 3, 8):
        chunks = replay_module._chunks(program, findings, count)
        assert sorted(k for chunk in chunks for k in chunk) == list(range(len(findings)))
        assert all(chunk == sorted(chunk) for chunk in chunks) and len(chunks) <= count
        chunk_of = {k: c for c, chunk in enumerate(chunks) for k in chunk}
        assert all(chunk_of[k] == chunk_of[owner] for k, owner in owners.items())


def test_a_replay_that_starts_from_another_confirms_what_a_whole_replay_does(monkeypatch):
    """Two witnesses that differ only in their last step (two steps enabled there): the
    second replay starts from the first's checkpoint, and the races whose witnesses are
    prefixes of it ran together before that point. Each confirmation, with a checkpoint
    after every step, must be `confirm`'s, whichever of the two holds those races."""
    program = load_text(RACY, "racy").program
    findings = [f for f in Analysis(program, Budget(timeout=60.0)).run() if f.witness is not None]
    longest = max((f for f in findings if f.kind is FindingKind.RACE), key=lambda f: len(f.witness.steps))
    machine = Machine(program)
    steps, state = list(longest.witness.steps), machine.initial()
    for step in steps[:-1]:
        state = machine.apply(state, step)
    enabled = machine.enabled(state)
    assert len(enabled) >= 2, "the spec must leave a choice before the longest witness's last step"
    racing = [f for f in findings if f.kind is FindingKind.RACE and len(f.witness.steps) < len(steps) - 1]
    assert racing
    monkeypatch.setattr(replay_module, "CHECKPOINT_EVERY", 1)
    for x, y in ((enabled[0], enabled[1]), (enabled[1], enabled[0])):
        ends = [replace(longest, witness=Witness(tuple(steps[:-1]) + (last,))) for last in (x, y)]
        everything = racing + ends
        owners = replay_module._longest_witnesses(program, everything, alone=True)
        ends_at = {len(racing), len(racing) + 1}
        assert {owners[k] for k in ends_at} == ends_at and any(owners[k] in ends_at for k in range(len(racing)))
        shared = [(c.ok, c.reason, c.detail) for c in confirm_all(program, everything)]
        assert shared == [(c.ok, c.reason, c.detail) for c in (confirm(program, f) for f in everything)]
        assert all(ok for ok, _, _ in shared[:len(racing)])
