"""The happens-before fast path: which programs it may decide, and that it decides them right.

Its verdicts are compared with the executor's exhaustive explorer (an independent
implementation of the same semantics) on random deterministic specs, and every witness it
produces must replay in the executor.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from checker import hb
from checker.determinism import nondeterminism
from checker.executor.explore import explore
from checker.executor.replay import confirm
from checker.findings import FindingKind
from checker.frontend import load_text
from strategies import specs

HEADER = """device d { compute 2 copy 2 }
buffer x 1MiB on d
buffer y 1MiB on d
stream s1 on d
stream s2 on d
event e
"""


def program_of(text: str):
    loaded = load_text(text)
    assert loaded.program is not None, loaded.diagnostics
    return loaded.program


def lines(program, finding) -> tuple[int, ...]:
    return tuple(sorted(program.statements[i].span.line for i in finding.statements[:2]))


@pytest.mark.parametrize("body, reason", [
    ("thread t {\n s1: kernel k writes x\n}", None),
    ("event g flag\nthread t {\n s1: record g\n}", "flag events"),
    ("notify n\nthread t {\n s1: notify n\n}", "notifies"),
    ("thread a {\n s1: kernel k writes x\n}\nthread b {\n s1: kernel k writes y\n}", "stream `s1`"),
    ("thread a {\n s1: record e\n}\nthread b {\n s2: wait e\n}", "event `e`"),
    ("thread a {\n s1: kernel k writes x\n}\nthread b {\n s2: kernel k writes y\n}", None),
    ("thread a {\n s1: kernel k writes x\n}\nthread b {\n sync d\n}", "stream `s1` (one syncs its device)"),
])
def test_nondeterminism_classification(body, reason):
    found = nondeterminism(program_of(HEADER + body))
    if reason is None:
        assert found is None
    else:
        assert found is not None and reason in found


def race_loop(iterations: int, second: str):
    """Each iteration: a on s1 writes x, b on s2 `second`s it (lines 9 and 10)."""
    return program_of(HEADER + f"""thread t {{
  for i in 0..{iterations} {{
    s1: kernel a writes x
    s2: kernel b {second} x
  }}
}}""")


def test_loop_race_is_reported_once_with_instance_count():
    program = race_loop(4, "reads")
    findings, complete = hb.analyze(program)
    races = [f for f in findings if f.kind is FindingKind.RACE]
    assert complete
    # every a (stream s1) against every b (stream s2): one pair of source lines, 4 x 4 instances
    assert [lines(program, f) for f in races] == [(9, 10)]
    assert races[0].instances == 16


def test_self_race_across_iterations():
    program = program_of(HEADER + """stream s[3] on d
thread t {
  for i in 0..3 {
    s[i]: kernel k writes x
  }
}""")
    findings, _ = hb.analyze(program)
    races = [f for f in findings if f.kind is FindingKind.RACE]
    assert len(races) == 1
    assert lines(program, races[0]) == (10, 10)
    assert races[0].instances == 3


def test_event_orders_and_witness_replays():
    program = program_of(HEADER + """thread t {
  s1: kernel a writes x
  s2: kernel b writes x
  s1: record e
  s2: wait e
  s2: kernel c reads x
}""")
    findings, _ = hb.analyze(program)
    races = {lines(program, f) for f in findings if f.kind is FindingKind.RACE}
    # a/b race; c is ordered after a by the event and after b by stream order
    assert races == {(8, 9)}
    for finding in findings:
        assert confirm(program, finding).ok


def test_cycle_through_collectives_is_a_deadlock_with_stuck_set():
    program = program_of("""device d0 { comm 1 }
device d1 { comm 1 }
buffer a 1KiB on d0
buffer b 1KiB on d1
stream c0 on d0
stream c1 on d1
comm p = { c0, c1 }
comm q = { c0, c1 }
thread r0 {
  c0: allreduce p a
  c0: allreduce q a
}
thread r1 {
  c1: allreduce q b
  c1: allreduce p b
}""")
    assert nondeterminism(program) is None
    findings, _ = hb.analyze(program)
    deadlocks = [f for f in findings if f.kind is FindingKind.DEADLOCK]
    assert len(deadlocks) == 1
    assert {program.statements[s.statement].span.line for s in deadlocks[0].stuck} == {10, 11, 14, 15}
    assert confirm(program, deadlocks[0]).ok


def test_missing_collective_member_deadlocks():
    program = program_of("""device d0 { comm 1 }
device d1 { comm 1 }
buffer a 1KiB on d0
stream c0 on d0
stream c1 on d1
comm p = { c0, c1 }
thread r0 {
  c0: allreduce p a
  sync c0
}""")
    findings, _ = hb.analyze(program)
    assert any(f.kind is FindingKind.DEADLOCK for f in findings)


def test_a_call_missing_a_member_is_numbered_as_its_help_numbers_it():
    """The stuck line and the help both count a comm's calls from 1: rank 1 skips the
    second of two allreduces, so both speak of call 2."""
    program = program_of("""device d0 { comm 1 }
device d1 { comm 1 }
buffer a 1KiB on d0
buffer b 1KiB on d1
stream c0 on d0
stream c1 on d1
comm p = { c0, c1 }
thread r0 {
  c0: allreduce p a
  c0: allreduce p a
  sync c0
}
thread r1 {
  c1: allreduce p b
  sync c1
}""")
    findings, _ = hb.analyze(program)
    deadlock = next(f for f in findings if f.kind is FindingKind.DEADLOCK)
    reasons = [stuck.waits_for for stuck in deadlock.stuck]
    assert any("its collective call 2 on comm `p` is missing a member" in r for r in reasons), reasons
    assert "is call 2 of comm `p`" in deadlock.help and "never issues a call 2" in deadlock.help


def test_the_race_scan_stops_at_its_budget_of_pairs_and_of_seconds():
    """A loop whose every iteration races with every other: a spent scan (runs read, or
    wall seconds: `check --budget`) stops the whole scan, and says it is incomplete."""
    program = race_loop(40, "writes")
    findings, complete = hb.analyze(program)
    assert complete and [f.instances for f in findings if f.kind is FindingKind.RACE] == [1600]
    # Each b reads one run on s1 (every earlier a, counted at once): 40 runs read for the b's.
    assert hb.analyze(program, budget=80)[1]
    for limits in ({"budget": 20}, {"seconds": 0.0}):
        findings, complete = hb.analyze(program, **limits)
        assert not complete, limits
        assert sum(f.instances for f in findings if f.kind is FindingKind.RACE) < 1600, limits


def test_a_race_in_a_long_loop_is_counted_by_runs():
    """40,000 instance pairs counted reading one run per access, exactly as pair by pair."""
    program = race_loop(200, "reads")
    findings, complete = hb.analyze(program, budget=1_000)
    assert complete and [f.instances for f in findings if f.kind is FindingKind.RACE] == [200 * 200]


def _verdict_hb(program):
    findings, complete = hb.analyze(program)
    assert complete
    races = {lines(program, f) for f in findings if f.kind is FindingKind.RACE}
    dead = {(program.statements[f.statements[0]].span.line, f.kind.value) for f in findings
            if f.kind in (FindingKind.USE_AFTER_FREE, FindingKind.USE_BEFORE_ALLOC)}
    deadlock = any(f.kind is FindingKind.DEADLOCK for f in findings)
    return races, dead, deadlock, findings


def _verdict_explorer(program, exploration):
    races = {tuple(sorted((program.statements[r.a].span.line, program.statements[r.b].span.line)))
             for r in exploration.races}
    # launch order and run order are both a use after free
    dead = {(program.statements[u.statement].span.line, "use-after-free" if u.kind == "enqueued-after-free" else u.kind)
            for u in exploration.dead_uses}
    return races, dead, bool(exploration.deadlocks)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(specs())
def test_agrees_with_the_explorer_on_deterministic_specs(text):
    program = program_of(text)
    if nondeterminism(program) is None:
        _assert_agrees_with_the_explorer(text, program)


def _assert_agrees_with_the_explorer(text, program):
    """Same races, dead uses and deadlock verdict as exhaustive exploration; witnesses replay."""
    exploration = explore(program, max_states=300_000)
    if not exploration.complete:
        return
    races, dead, deadlock, findings = _verdict_hb(program)
    assert (races, dead, deadlock) == _verdict_explorer(program, exploration), text
    # and as many instances of each dead use (the loop instances of one source statement)
    searched: dict[tuple[int, str], set[int]] = {}
    for use in exploration.dead_uses:
        kind = "use-after-free" if use.kind == "enqueued-after-free" else use.kind
        searched.setdefault((program.statements[use.statement].origin, kind), set()).add(use.statement)
    counted = {(program.statements[f.statements[0]].origin, f.kind.value): f.instances for f in findings
               if f.kind in (FindingKind.USE_AFTER_FREE, FindingKind.USE_BEFORE_ALLOC)}
    assert counted == {key: len(uses) for key, uses in searched.items()}, text
    for finding in findings:
        confirmation = confirm(program, finding)
        assert confirmation.ok, (text, finding.kind, confirmation.reason)


@st.composite
def deterministic_specs(draw) -> str:
    """One host thread, snapshot events only: exactly the programs the fast path decides."""
    queues = draw(st.sampled_from(["", "", " queues 1", " queues 2"]))
    out = [f"device d {{ compute 2 copy 2{queues} }}",
           "buffer a 4KiB on d", "buffer t 4KiB on d",
           f"buffer h 4KiB on host{draw(st.sampled_from(['', ' pinned']))}",
           "event e[2]"]
    modes = [draw(st.sampled_from(["", "", " legacy", " nonblocking"])) for _ in range(3)]
    if modes.count(" legacy") > 1:
        modes = [m if m != " legacy" else "" for m in modes]
    out += [f"stream s{k} on d{mode}" for k, mode in enumerate(modes)]
    stream = st.sampled_from(["s0", "s1", "s2"])
    region = st.sampled_from(["a", "a[0:2KiB]", "a[1KiB:3KiB]", "a[2KiB:]", "t"])
    body = []
    if draw(st.booleans()):
        body.append("alloc t" if draw(st.booleans()) else f"{draw(stream)}: alloc t")
    for _ in range(draw(st.integers(2, 8))):
        kind = draw(st.sampled_from(["kernel", "kernel", "copy_in", "copy_out", "record", "wait",
                                     "sync", "host", "free", "callback"]))
        s = draw(stream)
        if kind == "kernel":
            mode = draw(st.sampled_from(["reads", "writes"]))
            body.append(f"{s}: kernel k {mode} {draw(region)}")
        elif kind == "copy_in":
            body.append(f"{s}: copy {draw(region)} <- h")
        elif kind == "copy_out":
            body.append(f"{s}: copy h <- {draw(region)}")
        elif kind in ("record", "wait"):
            body.append(f"{s}: {kind} e[{draw(st.integers(0, 1))}]")
        elif kind == "sync":
            body.append("sync " + draw(st.sampled_from(["s0", "s1", "s2", "e[0]", "d", "all"])))
        elif kind == "host":
            body.append(f"host f {draw(st.sampled_from(['reads', 'writes']))} h")
        elif kind == "free":
            body.append("free t" if draw(st.booleans()) else f"{s}: free t")
        else:
            body.append(f"{s}: callback cb writes h")
    return "\n".join(out) + "\nthread main {\n" + "\n".join("  " + b for b in body) + "\n}\n"


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(deterministic_specs())
@example(  # a double free racing an alloc: both kinds of dead use on the second free
    "device d { compute 2 copy 2 }\nbuffer a 4KiB on d\nbuffer t 4KiB on d\nbuffer h 4KiB on host\n"
    "event e[2]\nstream s0 on d\nstream s1 on d\nstream s2 on d\n"
    "thread main {\n  s1: alloc t\n  s0: free t\n  s0: free t\n}\n")
def test_agrees_with_the_explorer_on_single_thread_specs(text):
    program = program_of(text)
    assert nondeterminism(program) is None
    _assert_agrees_with_the_explorer(text, program)


def test_launch_order_use_after_free_of_work_that_never_starts():
    """Work enqueued after a free uses freed memory whenever it runs, and only then: here the
    second allreduce and the second free queue behind an allreduce whose peer never comes, so
    they never start and use nothing (docs/semantics.md; launch order counts under `runtime
    cuda`). The fast path agrees with exploration."""
    text = """device d0 { compute 2 comm 1 runtime cuda }
device d1 { compute 2 comm 1 runtime cuda }
stream s0 on d0
stream s1 on d1
buffer a 4096B on d0
comm c = { s0, s1 }
thread t1 {
  for i in 0..2 {
    s1: allreduce c a
    s1: free a
  }
}
"""
    program = program_of(text)
    assert nondeterminism(program) is None
    _assert_agrees_with_the_explorer(text, program)
    dead = {(program.statements[f.statements[0]].span.line, f.kind) for f in hb.analyze(program)[0]
            if f.kind is FindingKind.USE_AFTER_FREE}
    assert dead == set()
    # work that does start counts even when it runs before the free
    runs = program_of("""device d0 { compute 2 }
stream s0 on d0
stream s1 on d0
buffer a 4096B on d0
buffer b 4096B on d0
thread t1 {
  s0: kernel long writes b 1ms
  s0: free a
  s1: kernel k reads a
}
""")
    _assert_agrees_with_the_explorer(None, runs)
    dead = {runs.statements[f.statements[0]].span.line for f in hb.analyze(runs)[0]
            if f.kind is FindingKind.USE_AFTER_FREE}
    assert dead == {9}


def test_each_loop_instance_of_a_dead_use_is_counted():
    text = """device gpu
buffer x 1MiB on gpu
stream s on gpu
thread t {
  for i in 0..3 {
    s: kernel k reads x 1ms
  }
  free x
  sync s
}
"""
    program = program_of(text)
    _assert_agrees_with_the_explorer(text, program)
    (dead,) = [f for f in _verdict_hb(program)[3] if f.kind is FindingKind.USE_AFTER_FREE]
    assert dead.instances == 3


def test_one_hardware_queue_over_many_streams_is_ordered_with_linear_edges():
    # Rule 10 orders the begins of every task in the queue; one edge from the queue's latest
    # task says it (a task per stream: an edge from every other stream's latest task took
    # 33 s at 1,000 streams).
    from checker import order as partial_order
    from checker.witness import Step, StepKind

    n = 300
    program = load_text(f"device d {{ queues 1 }}\nstream s[{n}] on d\nbuffer x 1MiB on d\n"
                        f"thread t {{\n  for i in 0..{n} {{\n    s[i]: kernel k writes x 1us\n  }}\n}}\n",
                        "q.sched").program
    graph = partial_order.build(program)
    queue_edges = [e for e in graph.edges if e[3] is partial_order.EdgeKind.QUEUE]
    assert len(queue_edges) == n - 1
    happens = hb.build(program)
    starts = [Step(StepKind.START, i) for i in range(n)]
    assert all(happens.before(starts[i], starts[j]) for i, j in ((0, 1), (0, n - 1), (n // 2, n - 1)))
    assert not happens.before(starts[1], starts[0])
    found, complete = hb.analyze(program)
    # each kernel has begun before the next one starts, but may still run: consecutive ones race
    assert complete and len([f for f in found if f.kind is FindingKind.RACE]) > 0


def test_a_legacy_stream_beside_many_blocking_streams_is_ordered_with_linear_edges():
    # Rule 11: a legacy task waits for the blocking streams' latest tasks, but those its
    # stream's last task waited for it waits for through that task (an edge from every
    # blocking stream per legacy task took 88 s and all the memory at 10,000 streams).
    from checker import order as partial_order
    from checker.witness import Step, StepKind

    n = 200
    program = load_text(f"device d {{ runtime cuda }}\nstream legacy on d legacy\nstream s[{n}] on d\n"
                        f"buffer x[{n}] 1MiB on d\nthread t {{\n  for i in 0..{n} {{\n    s[i]: kernel k writes x[i] 1us\n"
                        f"    legacy: kernel l reads x[i] 1us\n  }}\n  legacy: kernel last reads x 1us\n}}\n",
                        "l.sched").program
    legacy_edges = [e for e in partial_order.build(program).edges if e[3] is partial_order.EdgeKind.LEGACY]
    assert len(legacy_edges) <= 2 * n  # (one each way per round)
    happens = hb.build(program)
    last = len(program.statements) - 1
    assert all(happens.before(Step(StepKind.END, 2 * i), Step(StepKind.START, last)) for i in range(n))
    assert all(happens.before(Step(StepKind.END, 2 * i - 1), Step(StepKind.START, 2 * i)) for i in range(1, n))
    found, complete = hb.analyze(program)
    assert complete and not found


def test_a_comm_of_too_many_ranks_that_start_together_is_walked_not_built(monkeypatch):
    # rule 8 orders each member's start after what every other one waits for: n^2 edges
    from checker import order as partial_order
    from checker.analyze import check_loaded
    from checker.optimize.model import Unsupported, program_model

    text = ("device d[40]\nstream s[40] on d\nbuffer x[40] 1KiB on d\ncomm c = { s }\n"
            "thread m[40] {\n  s[m]: allreduce c x[m]\n  s[m]: kernel k writes x[m]\n}\n")
    assert check_loaded(load_text(text, "c.sched")).findings == ()
    monkeypatch.setattr(partial_order, "MAX_GATE_EDGES", 40 * 39)
    (unknown,) = check_loaded(load_text(text, "c.sched")).findings
    assert unknown.kind is FindingKind.UNKNOWN and "members start together, which takes 1,600 orders" in unknown.message
    assert isinstance(program_model(load_text(text, "c.sched").program), Unsupported)


def test_a_program_too_wide_for_vector_clocks_is_unknown_not_clean(monkeypatch):
    from checker.analyze import Options, find

    text = ("device d\nstream s[30] on d\nbuffer x 1MiB on d\nthread t {\n"
            "  for i in 0..30 {\n    s[i]: kernel k writes x\n  }\n}\n")
    program = load_text(text, "wide.sched").program
    races = [f for f in find(program, Options())[0] if f.kind is FindingKind.RACE]
    assert races  # within the limit: every kernel races with every other
    monkeypatch.setattr(hb, "MAX_CLOCK_ENTRIES", 1000)  # 91 steps x 31 chains
    findings, internal = find(program, Options(budget=2))
    (finding,) = [f for f in findings if f.kind is FindingKind.UNKNOWN]
    assert "too wide to order" in finding.message and finding.detail["refused"]
    # What random executions show is reported beside it, every witness replayed.
    def origins(found):
        return {tuple(sorted(program.statements[i].origin for i in f.statements))
                for f in found if f.kind is FindingKind.RACE}

    assert origins(findings) and origins(findings) <= origins(races) and not internal


def test_shared_joins_give_the_clocks_each_join_gives(monkeypatch):
    """Every member's end of one collective joins the same starts: the join is kept for the
    others (`SHARED_JOIN`), and the clocks are those of joining each one anew."""
    text = ("device d[12]\nstream s[12] on d\nbuffer g[12] 1MiB on d\ncomm c = { s }\n"
            "thread r[12] {\n  s[r]: kernel k writes g[r]\n  s[r]: allreduce c g[r] 1ms\n"
            "  s[r]: kernel k2 reads g[(r + 1) % 12]\n}\n")
    program = load_text(text, "ranks.sched").program
    shared = hb.build(program)
    monkeypatch.setattr(hb, "SHARED_JOIN", 10**9)
    alone = hb.build(program)
    assert shared.order == alone.order and shared.clocks == alone.clocks


def test_a_program_joining_too_many_clocks_is_unknown_not_clean(monkeypatch):
    from checker.analyze import Options, find

    text = ("device d[12]\nstream s[12] on d\nbuffer g[12] 1MiB on d\ncomm c = { s }\n"
            "thread r[12] {\n  s[r]: allreduce c g[r] 1ms\n}\n")
    program = load_text(text, "ranks.sched").program
    assert not find(program, Options())[0]
    monkeypatch.setattr(hb, "MAX_JOIN_ENTRIES", 100)
    (finding,) = find(program, Options())[0]
    assert finding.kind is FindingKind.UNKNOWN and "join" in finding.message


def test_a_member_held_by_its_own_group_is_listed_as_stuck():
    """Two members of one group in one hardware queue: c1's waits for c0's to begin, and c0's
    starts with its group. Each of c0's steps waits for another of its own, so no step of it
    is on the frontier; it is stuck all the same, as the exhaustive search says."""
    from checker.executor.explore import explore

    text = ("device d0 { queues 1 }\nbuffer g0 1MiB on d0\nbuffer g1 1MiB on d0\nstream c0 on d0\n"
            "stream c1 on d0\ncomm w = { c0, c1 }\nthread main {\n  c0: allreduce w g0\n"
            "  c1: allreduce w g1\n  sync all\n}\n")
    program = load_text(text, "queue.sched").program
    found, _ = hb.analyze(program)
    (deadlock,) = [f for f in found if f.kind is FindingKind.DEADLOCK]
    (searched,) = explore(program).deadlocks
    assert set(deadlock.statements) == {i for i, _ in searched.stuck} == {0, 1, 2}
    (why,) = [item.waits_for for item in deadlock.stuck if item.statement == 0]
    assert "starts together" in why and "(line 9)" in why



@pytest.mark.parametrize("extra, words", [
    ("s[0]: send c to s[1] x[0]", "its send 2 to `s[1]` on comm `c` has no matching recv"),
    ("s[0]: recv c from s[1] x[0]", "its recv 1 from `s[1]` on comm `c` has no matching send"),
])
def test_a_send_or_recv_without_its_partner_is_stuck_in_its_own_words(extra, words):
    # the k-th send from A to B meets the k-th recv on B from A: no "collective call" in it
    program = load_text("device d[2]\nstream s[2] on d\ncomm c = { s }\nbuffer x[2] 1KiB on d\n"
                        f"thread t0 {{\n  s[0]: send c to s[1] x[0]\n  {extra}\n}}\n"
                        "thread t1 {\n  s[1]: recv c from s[0] x[1]\n}\n").program
    found, _ = hb.analyze(program)
    (deadlock,) = [f for f in found if f.kind is FindingKind.DEADLOCK]
    (searched,) = explore(program).deadlocks
    assert any(words in item.waits_for for item in deadlock.stuck), deadlock.stuck
    assert any(words in str(why) for _, why in searched.stuck), searched.stuck


# -- threads that hand off to each other (imported traces: the trace's order on a shared stream)


@pytest.mark.parametrize("body, reason", [
    # a shared stream used in the order the hand-off fixes
    ("notify h\nthread a {\n s1: kernel k writes x\n notify h\n}\nthread b {\n await h\n s1: kernel k reads x\n sync s1\n}",
     None),
    # a shared event: the wait binds to the record made before the hand-off
    ("notify h\nthread a {\n s1: record e\n notify h\n}\nthread b {\n await h\n s2: wait e\n}", None),
    # two threads that only sync a stream (wait for an event) after the hand-off need no order
    # between their syncs (waits)
    ("notify h\nthread a {\n s1: kernel k writes x\n s1: record e\n notify h\n sync s1\n s2: wait e\n}\n"
     "thread b {\n await h\n sync s1\n sync e\n}", None),
    # but a record after another thread's unordered wait changes what the wait binds to
    ("notify h\nthread a {\n s1: record e\n notify h\n s1: record e\n}\nthread b {\n await h\n s2: wait e\n}",
     "event `e`"),
    # the hand-off comes after the other thread's use: unordered
    ("notify h\nthread a {\n notify h\n s1: kernel k writes x\n}\nthread b {\n await h\n s1: kernel k reads x\n}",
     "stream `s1`"),
    ("notify h\nthread a {\n s1: kernel k writes x\n notify h\n}\nthread b {\n await h\n sync d\n}\n"
     "thread c {\n s1: kernel k reads x\n}", "stream `s1`"),
    # hand-offs in a circle; a notify awaited twice; one notified twice
    ("notify h[2]\nthread a {\n await h[1]\n notify h[0]\n}\nthread b {\n await h[0]\n notify h[1]\n}", "circle"),
    ("notify h\nthread a {\n notify h\n}\nthread b {\n await h\n await h\n}", "notifies"),
    ("notify h\nthread a {\n notify h\n notify h\n}\nthread b {\n await h\n}", "notifies"),
    # collective calls on a stream two threads share stay with the solver
    ("comm c = { s1, s2 }\nnotify h\nthread a {\n s1: allreduce c x\n notify h\n}\n"
     "thread b {\n await h\n s1: kernel k reads x\n s2: allreduce c y\n}", "collective"),
])
def test_hand_offs_that_order_shared_streams_and_events_keep_a_program_deterministic(body, reason):
    found = nondeterminism(program_of(HEADER + body))
    if reason is None:
        assert found is None
    else:
        assert found is not None and reason in found, found


@st.composite
def handoff_specs(draw) -> str:
    """Two or three threads on shared streams and events, each cross-thread step of one
    global script handed off (notify, then await) with some probability: the fast path takes
    those whose hand-offs order every shared use, the solver the rest."""
    threads = draw(st.integers(2, 3))
    out = ["device d { compute 2 copy 2 }", "buffer a 4KiB on d", "buffer t 4KiB on d",
           "buffer h 4KiB on host pinned", "event e[2]", "stream s0 on d", "stream s1 on d", "stream s2 on d"]
    stream = st.sampled_from(["s0", "s1", "s2"])
    region = st.sampled_from(["a", "a[0:2KiB]", "a[2KiB:]", "t"])
    bodies: list[list[str]] = [[] for _ in range(threads)]
    handoffs = 0
    previous = None
    for _ in range(draw(st.integers(3, 9))):
        thread = draw(st.integers(0, threads - 1))
        if previous is not None and previous != thread and draw(st.integers(0, 9)) < 8:
            bodies[previous].append(f"notify n[{handoffs}]")
            bodies[thread].append(f"await n[{handoffs}]")
            handoffs += 1
        previous = thread
        kind = draw(st.sampled_from(["kernel", "kernel", "copy", "record", "wait", "sync", "host"]))
        s = draw(stream)
        if kind == "kernel":
            bodies[thread].append(f"{s}: kernel k {draw(st.sampled_from(['reads', 'writes']))} {draw(region)}")
        elif kind == "copy":
            bodies[thread].append(f"{s}: copy {draw(region)} <- h")
        elif kind in ("record", "wait"):
            bodies[thread].append(f"{s}: {kind} e[{draw(st.integers(0, 1))}]")
        elif kind == "sync":
            bodies[thread].append("sync " + draw(st.sampled_from(["s0", "s1", "e[0]", "d"])))
        else:
            bodies[thread].append(f"host f {draw(st.sampled_from(['reads', 'writes']))} h")
    if handoffs:
        out.append(f"notify n[{handoffs}]")
    text = "\n".join(out) + "\n"
    for k, body in enumerate(bodies):
        text += f"thread w{k} {{\n" + "".join(f"  {line}\n" for line in body or ["host idle"]) + "}\n"
    return text


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(handoff_specs())
@example(  # a sync of a stream another thread enqueued onto before handing off
    "device d { compute 2 copy 2 }\nbuffer a 4KiB on d\nbuffer t 4KiB on d\nbuffer h 4KiB on host pinned\n"
    "event e[2]\nstream s0 on d\nstream s1 on d\nstream s2 on d\nnotify n[1]\n"
    "thread w0 {\n  s0: kernel k writes a\n  notify n[0]\n}\n"
    "thread w1 {\n  await n[0]\n  sync s0\n  host f reads h\n  s1: kernel k reads a\n}\n")
def test_agrees_with_the_explorer_on_threads_ordered_by_hand_offs(text):
    program = program_of(text)
    if nondeterminism(program) is None:
        _assert_agrees_with_the_explorer(text, program)


def test_the_hand_off_order_of_a_long_chain_written_backwards():
    # each thread awaits the next one's notify: the order runs the threads last to first
    from checker.determinism import host_order

    threads = 300
    program = program_of("device d { compute 1 }\nnotify h[300]\nthread w[300] {\n"
                         "  if w < 299 {\n    await h[w + 1]\n  }\n  notify h[w]\n}\n")
    order = host_order(program)
    assert order is not None and len(order) == len(program.statements)
    threads_in_order = list(dict.fromkeys(program.statements[i].thread for i in order))
    assert threads_in_order == list(range(threads - 1, -1, -1))
    assert nondeterminism(program) is None


def test_a_use_after_several_frees_names_the_one_that_happens_first():
    """Thread b frees z and hands over; thread a then uses z and frees it again. The use
    follows both frees, and the fast path names the first, as the exhaustive search does
    (it named a's own free, itself a double free)."""
    from checker.analyze import Options, check_loaded
    from checker.frontend import load_text

    text = """device d
buffer z 1MiB on d
stream s on d
notify n
thread a {
  await n
  s: kernel k reads z
  free z
}
thread b {
  free z
  notify n
}
"""
    for options in (Options(), Options(exhaustive=True)):
        report = check_loaded(load_text(text, "t.sched"), options)
        used = [f.message for f in report.findings if f.kind is FindingKind.USE_AFTER_FREE]
        assert "s: kernel k (line 7) can touch `z` after free z (line 11) freed it" in used, (options, used)


def test_a_ring_race_is_shown_at_its_first_wrap():
    # the kernel of iteration 0 races with the copy into its slot two iterations later: the
    # witness of that pair is short whatever the loop's length (it showed the last wrap once)
    text = ("device d { compute 1 copy 1 }\nbuffer host_in[2] 4MiB on host pinned\nbuffer slot[2] 4MiB on d\n"
            "buffer out 1MiB on d\nstream ld on d\nstream wk on d\nevent loaded[2]\nevent consumed[2]\n"
            "thread main {\n  for i in 0..N {\n    let s = i % 2\n    ld: copy slot[s] <- host_in[s] 1ms\n"
            "    ld: record loaded[s]\n    wk: wait loaded[s]\n    wk: kernel infer reads slot[s] writes out 2ms\n"
            "    wk: record consumed[s]\n  }\n}\n")
    lengths = []
    for n in (4, 40):
        program = load_text(text.replace("N", str(n))).program
        findings, _ = hb.analyze(program)
        (race,) = [f for f in findings if f.kind is FindingKind.RACE and f.memory == "slot[0]"]
        assert sorted(dict(program.statements[i].bindings)["i"] for i in race.statements) == [0, 2]
        assert "`ld: wait consumed[s]` before line 12" in race.help, race.help
        lengths.append(len(race.witness.steps))
    assert lengths[0] == lengths[1]
