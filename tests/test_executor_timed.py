"""Every run in time (`timed_search`): what `expect makespan` on racing threads rests on."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings

from checker.analyze import in_exact_time
from checker.crosscheck import must_chain
from checker.determinism import nondeterminism
from checker.executor.replay import replay
from checker.executor.simulate import simulate
from checker.executor.timed import Outcome, timed_search
from checker.frontend import load_text
from checker.ir import NS_PER_MS

from strategies import specs
from test_analyze import check

SHARED_STREAM = """device d { compute 2 }
buffer x 1MiB on d
buffer y 1MiB on d
stream a on d
thread t0 { a: kernel long writes x 2ms }
thread t1 { a: kernel short writes y 1ms
            sync a
            host after reads y 2ms }
"""

ENGINE_TIE = """device d { compute 1 }
buffer x 1MiB on d
buffer y 1MiB on d
stream a on d
stream b on d
thread t0 { a: kernel long writes x 2ms }
thread t1 { b: kernel short writes y 1ms
            sync b
            host after reads y 2ms }
"""

FORCED_BY_TIME = """device d { compute 2 launch 2us }
buffer x 1MiB on d
buffer y 1MiB on d
stream a on d
stream b on d
thread producer { a: kernel k writes x 1ms }
thread consumer {
  host prepare 3us
  sync a
  b: kernel j writes y 1ms
}
"""


def load(text: str):
    loaded = load_text(text, "spec.sched")
    assert loaded.program is not None, loaded.diagnostics
    return loaded.program


def test_a_run_the_first_order_misses_is_found_and_replayed():
    # Both threads enqueue on stream a at 0: t0 first (the simulated run) ends at 5 ms (t1's
    # sync waits for both kernels); t1 first at 3 ms, which only the other order shows.
    program = load(SHARED_STREAM)
    assert simulate(program).makespan == 5 * NS_PER_MS
    search = timed_search(program, 3 * NS_PER_MS, seconds=10)
    assert search.outcome is Outcome.MET and search.run.makespan == 3 * NS_PER_MS
    checked = replay(program, search.run.steps)
    assert checked.ok and checked.finished
    assert timed_search(program, 3 * NS_PER_MS - 1, seconds=10).outcome is Outcome.NOT_MET


class _Scripted:
    """A chooser that takes the given options in turn and keeps the state key at each choice."""

    def __init__(self, picks):
        self.picks, self.keys = list(picks), []

    def pick(self, simulator, options):
        self.keys.append(simulator.state_key())
        return self.picks.pop(0) if self.picks else 0

    def goes_on(self, simulator):
        return True


def test_engine_ties_go_to_the_thread_declared_first_whatever_order_the_steps_took():
    # Both kernels want the one compute unit at 0, on streams of their own: the tie goes to
    # t0's (declared first) even when t1 steps first, so the program has one run in time.
    from checker.executor.simulate import _Simulator

    program = load(ENGINE_TIE)
    assert simulate(program).makespan == 5 * NS_PER_MS
    assert _Simulator(program).run_choosing(_Scripted([1])).makespan == 5 * NS_PER_MS
    assert timed_search(program, 5 * NS_PER_MS - 1, seconds=10).outcome is Outcome.NOT_MET
    report = check(ENGINE_TIE + "expect makespan <= 3ms\n")
    assert [d for d in report.diagnostics if d.code.value == "SP401"]


def test_a_bound_only_time_rules_out_fails_the_check():
    # The consumer's sync comes at 3 us, after the producer's kernel is enqueued (2 us of
    # launch): every run in time waits for it and ends at 2.004 ms. An execution where the
    # producer is slower would end by 2 ms, so no bound over every execution rules 2 ms out.
    report = check(FORCED_BY_TIME + "expect makespan <= 2ms\n")
    assert not [f for f in report.findings if f.code.value == "SP301"]
    (diagnostic,) = [d for d in report.diagnostics if d.code.value == "SP401"]
    assert "no run in time ends by 2 ms" in diagnostic.message
    report = check(FORCED_BY_TIME + "expect makespan <= 2.004ms\n")
    assert report.passed, (report.diagnostics, report.findings)


def test_out_of_runs_is_unknown():
    # (the first run, t0 first, cannot end by 3 ms; the other order is left to try)
    search = timed_search(load(SHARED_STREAM), 3 * NS_PER_MS, seconds=10, max_runs=1)
    assert search.outcome is Outcome.UNKNOWN and search.runs == 1


def _minimum(program, start: int, **options) -> int | None | str:
    """The least makespan of any run in time (None: none finishes; "unknown")."""
    best, limit = None, start
    while limit >= 0:
        search = timed_search(program, limit, seconds=10, max_runs=1500, **options)
        if search.outcome is Outcome.UNKNOWN:
            return "unknown"
        if search.outcome is Outcome.NOT_MET:
            break
        best = search.run.makespan
        limit = best - 1
    return best


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(specs(max_statements=6, shared_comms=True))
def test_the_reduced_search_agrees_with_every_order(text):
    # Quiet heads acting without a choice and states remembered change how many runs are
    # tried, never the least makespan; it is at most every shuffled run's, and at least the
    # chain of orders every execution keeps; `least` finds it in one search.
    program = load(text)
    timed = in_exact_time(program)
    if nondeterminism(program) is None or timed is None:
        return
    program = timed[0]
    runs = [simulate(program, shuffle=seed, interleave=seed % 2 == 1) for seed in range(20)]
    finished = [run.makespan for run in runs if not run.deadlocked]
    start = min(finished, default=10**15)
    reduced = _minimum(program, start)
    full = _minimum(program, start, reduce=False, remember=False)
    if "unknown" in (reduced, full):
        return
    assert reduced == full
    # (one branch-and-bound search finds the same least run)
    least = timed_search(program, start, seconds=10, max_runs=1500, least=True)
    if least.least or least.outcome is Outcome.NOT_MET:
        assert (least.run.makespan if least.run else None) == reduced
    if finished:
        assert reduced is not None and reduced <= min(finished)
    bound = must_chain(program)
    if reduced is not None and bound:
        assert reduced >= bound


def test_a_record_and_a_reset_of_one_flag_at_one_instant_go_in_either_order():
    # Enqueued record then reset, on two streams: record then reset leaves the flag clear
    # and the wait (at 1 us) blocks forever; reset then record lets it through. The search
    # must try both (neither head acts without a choice).
    program = load("""device d { compute 1 }
buffer x 1MiB on d
event f flag
stream a on d
stream b on d
stream c on d
thread t0 { a: record f
            b: reset f }
thread t2 { host h 1us
            c: wait f
            c: kernel k writes x 1ms }
""")
    assert simulate(program).deadlocked
    search = timed_search(program, 1_001_000, seconds=10)
    assert search.outcome is Outcome.MET and search.run.makespan == 1_001_000
    assert timed_search(program, 1_000_999, seconds=10).outcome is Outcome.NOT_MET


TWO_COMM_DEVICES = """device d0 { comm 1 }
device d1 { comm 1 }
buffer a 4KiB on d0
buffer a2 4KiB on d0
buffer b 4KiB on d1
buffer b2 4KiB on d1
"""


def test_gathered_groups_go_by_their_members_declared_order_at_one_instant():
    # Groups c and g both gather by 5 us (h holds d1's comm unit until then); their members
    # were enqueued at 1 us, c's first by declaration order (tA before tB and tC), whatever
    # order the threads' steps took: c takes the unit first in every run, 17 us (g first
    # would end at 16 us).
    program = load(TWO_COMM_DEVICES + """buffer b3 4KiB on d1
stream s0 on d0
stream s2 on d0
stream s1 on d1
stream s3 on d1
stream s5 on d1
comm c = { s0, s1 }
comm g = { s2, s3 }
comm h = { s5 }
notify n
thread tH {
  s5: allreduce h b3 5us
  notify n
}
thread tA {
  host x 1us
  s0: allreduce c a
}
thread tB {
  host y 1us
  s2: allreduce g a2
}
thread tC {
  host z 1us
  s3: allreduce g b2 1us
  s1: allreduce c b 1us
  s3: kernel k writes b2 10us
}
""")
    assert simulate(program).makespan == 17_000
    assert timed_search(program, 16_999, seconds=20).outcome is Outcome.NOT_MET


def test_groups_that_gather_at_one_instant_take_units_by_priority():
    # Both groups gather at 0, the low-priority one first in stream order; units go out once
    # the instant has settled, to the higher priority: c, then g, then the kernel behind g.
    program = load(TWO_COMM_DEVICES + """stream s0 on d0 priority low
stream s1 on d1 priority low
stream s2 on d0 priority high
stream s3 on d1 priority high
comm g = { s0, s1 }
comm c = { s2, s3 }
thread t {
  group {
    s2: allreduce c a2 1us
    s3: allreduce c b2 1us
  }
  group {
    s0: allreduce g a 1us
    s1: allreduce g b 1us
  }
  s1: kernel k writes b 10us
}
""")
    run = simulate(program)
    starts = {program.statements[task.statement].span.line: task.start for task in run.tasks}
    assert starts[15] == starts[16] == 0 and starts[19] == starts[20] == 1_000
    assert run.makespan == 12_000


def test_a_run_that_does_not_replay_is_an_internal_error_never_a_verdict(monkeypatch):
    # (the executor made to refuse every run of the search, and no shuffled run tried: the
    # 3 ms run is no verdict, and SP402 says why)
    import checker.crosscheck as crosscheck
    import checker.executor.timed as timed
    from types import SimpleNamespace

    monkeypatch.setattr(timed, "replay", lambda program, steps: SimpleNamespace(
        ok=False, finished=False, reason="step 3 is illegal"))
    monkeypatch.setattr(crosscheck, "shortest_shuffled_run", lambda *args, **options: None)
    search = timed_search(load(SHARED_STREAM), 3 * NS_PER_MS, seconds=10)
    assert search.outcome is Outcome.UNKNOWN and search.unreplayed == "step 3 is illegal"
    report = check(SHARED_STREAM + "expect makespan <= 3ms\n")
    assert not report.passed
    assert [d for d in report.diagnostics if d.code.value == "SP402" and "did not replay" in d.message]


def test_the_group_with_the_most_urgent_member_takes_the_units_first():
    # w's first member was enqueued first, but v has a high-priority member: v goes first
    # (1 us), then w (2 us), then the kernel behind w on s1 (5 us); w first would end at 4 us.
    program = load("""device d0 { compute 1 comm 1 }
device d1 { compute 1 comm 1 }
buffer x[2] 1MiB on d0
buffer y[2] 1MiB on d1
stream s0 on d0
stream s1 on d1
stream s2 on d1 priority high
stream s3 on d0
comm w = { s0, s1 }
comm v = { s2, s3 }
thread t {
  group {
    s0: allreduce w x[0] 1us
    s3: allreduce v x[1] 1us
    s1: allreduce w y[0] 1us
    s2: allreduce v y[1] 1us
  }
  s1: kernel k writes y[0] 3us
}
""")
    assert simulate(program).makespan == 5_000


def test_a_task_a_start_lets_begin_waits_for_the_next_round_of_the_instant():
    # b (high priority) is queued behind a in hardware queue 0 (s0 and s2 share it): it may
    # begin only once a has, so at 0 the second unit goes to c (low priority), and b waits
    # for a unit until 1 us: 3 us, not 2.
    program = load("""device d0 { compute 2 copy 1 queues 2 }
buffer x[3] 1MiB on d0
stream s0 on d0
stream s1 on d0 priority low
stream s2 on d0 priority high
thread t {
  s0: kernel a writes x[0] 1us
  s2: kernel b writes x[1] 2us
  s1: kernel c writes x[2] 1us
}
""")
    assert simulate(program).makespan == 3_000
