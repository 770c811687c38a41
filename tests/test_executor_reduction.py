"""Partial-order reduction changes how many states are explored, never the verdict.

Random programs with every kind of statement (shared streams and events across threads,
flag events with resets, notifies, syncs, pageable copies, alloc/free, hardware queues, the
legacy stream, caching-allocator blocks, comms called from several threads) are explored with
and without reduction (static singletons, stubborn sets, and forgetting spent captures:
`reduction.py`, `stubborn.py`, `Machine.forget`); races, dead uses, every set of deadlocked
statements and the positions of SP202 mismatches must agree exactly.
"""

from __future__ import annotations

from hypothesis import HealthCheck, assume, given, settings

from checker.executor.explore import explore
from checker.executor.machine import Machine
from checker.frontend import load_text

from strategies import specs
from test_executor_strategies import programs


def verdict(result):
    return (set(result.race_pairs()), {(u.statement, u.kind) for u in result.dead_uses},
            {frozenset(i for i, _ in d.stuck) for d in result.deadlocks},
            {f.message.split(":")[0] for f in result.mismatches})  # "... at call k of comm `c`"


def compare(program, max_states: int) -> None:
    """Explore `program` both ways (every deadlock kept); skip it when the full search is
    too big. The reduced search's witnesses must replay to what they show."""
    full = explore(program, max_states=max_states, reduce=False, max_deadlocks=10_000)
    assume(full.complete)
    reduced = explore(program, max_states=max_states, reduce=True, max_deadlocks=10_000)
    assert reduced.complete
    assert reduced.states <= full.states
    assert verdict(reduced) == verdict(full)
    check_witnesses(program, reduced)


def check_witnesses(program, result) -> None:
    """Each race, dead use and deadlock of `result` is shown by replaying its witness (the
    reduced search finds a race from whichever step of the pair starts second, and stops
    preserving a pair's race once reported: the witnesses must still be real runs)."""
    machine = Machine(program)

    def run(steps):
        state, last = machine.initial(), None
        for step in steps:
            last = machine.advance(state, step)  # raises IllegalStep on an illegal step
            state = last.state
        return state, last

    for race in result.races:
        _, last = run(race.witness.steps)
        assert any({a, b} == {race.a, race.b} for a, b in last.races)
    for use in result.dead_uses:
        _, last = run(use.witness.steps)
        assert (use.statement, use.kind) in last.dead_uses
    for deadlock in result.deadlocks:
        state, _ = run(deadlock.witness.steps)
        assert not machine.enabled(state) and not machine.finished(state)
        assert {i for i, _ in machine.stuck(state)} == {i for i, _ in deadlock.stuck}
    for mismatch in result.mismatches:
        run(mismatch.witness.steps)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_reduction_preserves_verdicts(text):
    loaded = load_text(text)
    assert loaded.program is not None, (text, loaded.diagnostics)
    compare(loaded.program, 100_000)


@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
@given(specs(shared_comms=True))
def test_reduction_preserves_verdicts_when_calls_meet_in_enqueue_order(text):
    """Comms called from several threads: which calls meet is captured at enqueue, so the
    steps reduction may take alone must still leave every meeting reachable."""
    loaded = load_text(text)
    assert loaded.program is not None, (text, loaded.diagnostics)
    for program in loaded.variants:
        compare(program, 60_000)


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(specs(max_statements=14))
def test_reduction_preserves_verdicts_of_larger_specs(text):
    """Every statement kind of the spec strategy (collectives, send/recv, groups, caching
    allocator blocks, host memcpy and query), in programs a little longer than above."""
    loaded = load_text(text)
    assert loaded.program is not None, (text, loaded.diagnostics)
    for program in loaded.variants:
        compare(program, 60_000)


DDP = """\
device gpu[2] { compute 1 comm 1 }
buffer grad[2] 4MiB on gpu
buffer bufs[2] 1MiB on gpu
buffer w[2] 4MiB on gpu
stream compute[2] on gpu
stream nccl[2] on gpu
comm pg = { nccl }
event computed[2]
notify backward_done[2]
thread main[2] {
  for it in 0..ITERATIONS {
    nccl[main]: allreduce pg bufs[main] 1ms
    compute[main]: kernel fwd reads w[main] writes grad[main] 2ms
    compute[main]: record computed[main]
    notify backward_done[main]
    await backward_done[main]
  }
}
thread hook[2] {
  for it in 0..ITERATIONS {
    nccl[hook]: wait computed[hook]
    nccl[hook]: allreduce pg grad[hook] 3ms
  }
}
"""
"""Two ranks, each with a main thread and an autograd hook thread calling one comm on one
stream (an interleaved comm): the ranks share only their collectives' ends."""


def test_stubborn_sets_explore_ranks_one_at_a_time():
    """The DDP-like program (one iteration): the same findings as the full search (77,333
    states) from a few hundred states; two iterations are in bench/bench_executor.py."""
    program = load_text(DDP.replace("ITERATIONS", "1")).program
    full = explore(program, reduce=False, max_deadlocks=10_000)
    reduced = explore(program, max_deadlocks=10_000)
    assert full.complete and reduced.complete
    assert verdict(reduced) == verdict(full)
    assert len(reduced.races) == 2 and len(reduced.mismatches) == 2
    assert reduced.states < 1_000 < full.states
    check_witnesses(program, reduced)


def test_reported_races_stop_keeping_both_orders():
    """Three iterations of the DDP-like program are decided within the default limits (over
    a million states while every race label was a conflict; about 43,000 now): the kernel
    starts that race with a collective stop pulling in the other rank's steps once their
    pair is reported."""
    program = load_text(DDP.replace("ITERATIONS", "3")).program
    reduced = explore(program)
    assert reduced.complete and reduced.states < 100_000
    assert len(reduced.races) == 18 and len(reduced.mismatches) == 6
    check_witnesses(program, reduced)


RACING_STARTS = """\
device gpu { compute 1 }
buffer a 4KiB on gpu
stream s[3] on gpu
thread t[3] {
  s[t]: kernel k writes a 1ms
  s[t]: kernel k2 reads a 1ms
}
"""


def test_racing_starts_need_not_be_taken_in_both_orders():
    """Kernels of three threads all writing one buffer: every pair of them races, and the
    reduced search, which takes conflicting starts in one order only, reports every pair."""
    program = load_text(RACING_STARTS).program
    full = explore(program, reduce=False, max_deadlocks=10_000)
    reduced = explore(program, max_deadlocks=10_000)
    assert full.complete and reduced.complete
    assert verdict(reduced) == verdict(full)
    assert len(full.race_pairs()) == 9  # 3 pairs of writers, 6 of a writer and a reader
    assert reduced.states < full.states
    check_witnesses(program, reduced)


def test_a_sync_on_a_flag_event_waits_for_its_latest_record_whatever_resets_do():
    # `sync f` binds to the latest `record f` enqueued before it (rule 6, as CANN's runtime
    # does): a reset that clears the flag first does not hold it, so no order deadlocks, and
    # the reduced search agrees with the full one.
    program = load_text("device d0 { compute 2 }\nstream s0 on d0\nstream s1 on d0\nevent f flag\n"
                        "thread th1 {\n  s0: reset f\n  sync f\n}\nthread th2 {\n  s1: record f\n}\n",
                        "flag_sync.sched").program
    full = explore(program, reduce=False, max_deadlocks=100)
    reduced = explore(program, max_deadlocks=100)
    assert full.complete and not full.deadlocks and verdict(reduced) == verdict(full)


def test_a_stubborn_set_choice_stops_at_its_work_cap_and_stays_sound():
    """200 threads enqueueing onto one stream: every seed's set holds every thread, and the
    choice for one state visited 40,000 steps (50 ms, so `--budget` was read too late)."""
    from checker.executor import stubborn

    text = "device d\nstream s on d\n" + "".join(f"thread t{i} {{\n  s: kernel k 1us\n}}\n" for i in range(200))
    machine = Machine(load_text(text).program)
    sets = stubborn.StubbornSets(machine)
    state = machine.initial()
    steps = machine.enabled(state)
    chosen = sets.choose(state, steps)
    assert sets.spent <= stubborn.CHOOSE_WORK + 1
    assert chosen == steps  # no smaller set was proved stubborn within the cap: all of them



@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(programs())
def test_stubborn_sets_cut_short_by_the_work_cap_still_find_everything(text):
    """With a cap of a few steps, most choices stop part way and keep the smallest set
    completed so far (or every enabled step): the verdicts must not change."""
    from unittest import mock

    loaded = load_text(text)
    with mock.patch("checker.executor.stubborn.CHOOSE_WORK", 4):
        compare(loaded.program, 100_000)
