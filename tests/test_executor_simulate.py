"""Simulated timelines obey the contract: stream order, event edges, engine counts, and the
documented double-buffering numbers; the simulated run is itself a legal execution."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checker.executor.explore import explore
from checker.executor.replay import replay
from checker.executor.simulate import simulate
from checker.frontend import load_file, load_text
from checker.ir import NS_PER_MS, Op

from strategies import specs
from test_executor_strategies import programs as rich_programs

CONFORMANCE = Path(__file__).parent / "conformance"
VALID = sorted(CONFORMANCE.glob("c*.sched"))

SYNCHRONOUS = """device npu0 { compute 1 copy 1 }
buffer staged[2] 4MiB on host pinned
buffer input[2] 4MiB on npu0
buffer output 4MiB on npu0
stream loader on npu0
stream worker on npu0
thread main {
  for step in 0..6 {
    let slot = step % 2
    loader: copy input[slot] <- staged[slot] 8.2ms
    sync loader
    worker: kernel infer reads input[slot] writes output 3.5ms
    sync worker
  }
}
"""


def validate(program, sim) -> None:
    """Check a simulation of a single-enqueuer-per-stream program against the contract."""
    times = {t.statement: t for t in sim.tasks}
    stmts = program.statements
    # Every task ran, for exactly its duration (instant tasks take no time).
    if not sim.deadlocked:
        assert set(times) == {s.index for s in stmts if s.stream is not None}
    for i, t in times.items():
        assert t.end - t.start == stmts[i].duration
    # Stream order: a task begins only after its predecessor on the stream completed.
    for stream in program.streams:
        tasks = [times[s.index] for s in program.stream_tasks(stream.index) if s.index in times]
        for before, after in zip(tasks, tasks[1:]):
            assert after.start >= before.end, (before, after)
    # Event edges: a snapshot wait completes after the latest record issued before it.
    latest: dict[int, int] = {}
    for s in sorted(stmts, key=lambda s: s.index):
        if s.op is Op.RECORD:
            latest[s.event] = s.index
        elif s.op is Op.WAIT and s.index in times and s.event in latest:
            rec = latest[s.event]
            assert times[s.index].start >= times[rec].end
    # Engine counts: never more tasks on an engine than it has units; a unit runs one task.
    by_engine: dict[tuple, list] = {}
    for i, t in times.items():
        if t.engine is not None and t.end > t.start:
            by_engine.setdefault((stmts[i].device, t.engine), []).append(t)
    for (device, engine), tasks in by_engine.items():
        limit = program.devices[device].count(stmts[tasks[0].statement].engine)
        points = sorted([(t.start, 1) for t in tasks] + [(t.end, -1) for t in tasks],
                        key=lambda p: (p[0], p[1]))
        load = 0
        for _, delta in points:
            load += delta
            assert load <= limit
        per_unit: dict[int, list] = {}
        for t in tasks:
            per_unit.setdefault(t.unit, []).append(t)
        for unit_tasks in per_unit.values():
            unit_tasks.sort(key=lambda t: t.start)
            for a, b in zip(unit_tasks, unit_tasks[1:]):
                assert b.start >= a.end
    # Makespan covers everything.
    assert all(t.end <= sim.makespan for t in sim.tasks)


def test_double_buffering_overlaps_copy_and_compute():
    program = load_file(CONFORMANCE / "c20_double_buffering.sched").program
    sim = simulate(program)
    assert not sim.deadlocked
    assert sim.makespan == 52_700_000  # 6 x 8.2 ms + 3.5 ms
    assert sim.to_json()["makespan"] == pytest.approx(52.7)
    validate(program, sim)


def test_synchronous_version_serialises():
    program = load_text(SYNCHRONOUS).program
    sim = simulate(program)
    assert sim.makespan == 70_200_000  # 6 x (8.2 + 3.5) ms
    validate(program, sim)
    engines = sim.to_json()["engines"]
    assert engines["npu0/copy"]["busy"] == pytest.approx(49.2)
    assert engines["npu0/compute"]["busy"] == pytest.approx(21.0)


def test_to_json_shape():
    program = load_file(CONFORMANCE / "c20_double_buffering.sched").program
    data = json.loads(json.dumps(simulate(program).to_json()))
    assert set(data) >= {"makespan", "engines", "tasks"}
    assert all(set(t) == {"statement", "line", "stream", "engine", "start", "end"} for t in data["tasks"])
    assert all(program.statements[t["statement"]].span.line == t["line"] for t in data["tasks"])
    assert len({t["statement"] for t in data["tasks"]}) == len(data["tasks"])  # (each loop instance its own)
    first_copy = next(t for t in data["tasks"] if t["engine"] == "copy")
    assert first_copy["line"] == 13 and first_copy["end"] == pytest.approx(8.2)


def test_critical_path_of_double_buffering_is_the_copy_chain():
    program = load_file(CONFORMANCE / "c20_double_buffering.sched").program
    sim = simulate(program)
    path = [n for n in sim.critical_path if n.part == "task" and n.end > n.start]
    lines = [program.statements[n.statement].span.line for n in path]
    assert lines == [13] * 6 + [16]
    assert path[-1].end == sim.makespan


@pytest.mark.parametrize("path", VALID, ids=lambda p: p.stem)
def test_conformance_simulations_are_legal_runs(path):
    expected = json.loads(path.with_suffix(".expected.json").read_text())
    program = load_file(path).program
    sim = simulate(program)
    validate(program, sim)
    run = replay(program, sim.steps)
    assert run.ok, run.reason
    if sim.deadlocked:
        assert expected["deadlock"]
        assert sim.stuck and run.stuck
    else:
        assert run.finished


def test_priority_decides_contended_engine():
    text = """device d { compute 1 }
stream lo on d priority low
stream hi on d priority high
stream first on d
thread main {
  first: kernel warm 1ms
  lo: kernel a 1ms
  hi: kernel b 1ms
}
"""
    program = load_text(text).program
    sim = simulate(program)
    start = {program.statements[t.statement].name: t.start for t in sim.tasks}
    # All three are enqueued at time 0 and want the one compute unit: high, default, low.
    assert start["b"] == 0
    assert start["warm"] == NS_PER_MS
    assert start["a"] == 2 * NS_PER_MS


@pytest.mark.parametrize("runtime, order", [("", [14, 12, 13]), (" runtime cuda", [12, 13, 14])])
def test_cuda_stream_priorities_rank_kernels_not_copies(runtime, order):
    # Under `runtime cuda` a copy takes the contended copy unit in enqueue order whatever its
    # stream's priority (cuStreamCreateWithPriority: "no effect on host-to-device and
    # device-to-host memory operations"); a kernel is still ranked.
    text = (f"device d {{ compute 1 copy 1{runtime} }}\nbuffer h 1MiB on host pinned\nbuffer x 1MiB on d\n"
            "buffer y 1MiB on d\nstream warm on d\nstream lo on d priority low\nstream hi on d priority high\n"
            "stream k on d\nstream klo on d priority low\nstream khi on d priority high\n"
            "thread main {\n  warm: copy x <- h 1ms\n  lo: copy y <- h 1ms\n  hi: copy x <- h 1ms\n"
            "  k: kernel k0 1ms\n  klo: kernel k1 1ms\n  khi: kernel k2 1ms\n}\n")
    program = load_text(text).program
    sim = simulate(program)
    copies = sorted((t.start, program.statements[t.statement].span.line) for t in sim.tasks
                    if program.statements[t.statement].op is Op.COPY)
    assert [line for _, line in copies] == order
    kernels = {program.statements[t.statement].name: t.start for t in sim.tasks
               if program.statements[t.statement].op is Op.KERNEL}
    assert kernels["k2"] < kernels["k0"] < kernels["k1"]  # (kernels: high, default, low either way)


@pytest.mark.parametrize("runtime, first", [("", "kb"), (" runtime cuda", "ka")])
@pytest.mark.parametrize("low", ["low", "1", "7"])
def test_under_cuda_a_low_or_positive_priority_is_the_default_one(runtime, first, low):
    # CUDA's least priority is 0, its default: `low` (or 1, clamped) ties with a stream that
    # names none, and the tie goes to the task enqueued first
    text = (f"device d {{ compute 1{runtime} }}\nstream s_a on d priority {low}\nstream s_b on d\n"
            "thread main {\n  s_a: kernel ka 1ms\n  s_b: kernel kb 1ms\n}\n")
    program = load_text(text).program
    sim = simulate(program)
    assert min(sim.tasks, key=lambda t: t.start).statement == next(
        s.index for s in program.statements if s.name == first)


def test_a_task_without_a_duration_needs_no_engine_unit():
    # `z` takes no time, so it does not wait for the compute unit `k` holds: the callback
    # after it runs at once (docs/semantics.md, "Time").
    text = """device d { }
stream a on d
stream b on d
thread t {
  a: kernel k 5us
  b: kernel z
  b: callback cb 1us
}
"""
    program = load_text(text).program
    sim = simulate(program)
    start = {program.statements[t.statement].name: t.start for t in sim.tasks}
    assert start["z"] == 0 and start["cb"] == 0
    assert sim.makespan == 5_000
    engine = {program.statements[t.statement].name: t.engine for t in sim.tasks}
    assert engine == {"k": "compute", "z": None, "cb": "callback"}  # (`simulate --format json` shows these)


def test_launch_cost_and_host_time():
    text = """device d { compute 1 launch 10us }
buffer x 1MiB on d
stream s on d
thread main {
  s: kernel a writes x 1ms
  host prep 2ms
  s: kernel b writes x 1ms
  sync s
}
"""
    program = load_text(text).program
    sim = simulate(program)
    start = {program.statements[t.statement].name: t.start for t in sim.tasks}
    assert start["a"] == 10_000
    assert start["b"] == 10_000 + 2 * NS_PER_MS + 10_000
    assert sim.makespan == start["b"] + NS_PER_MS
    assert sim.host_busy == 2 * NS_PER_MS + 20_000


@pytest.mark.parametrize("text", [
    # a `memcpy` between two devices' memories: one call, however lowering orders it with
    # the other device's legacy stream
    """device gpu0 { runtime cuda launch 10us }
device gpu1 { runtime cuda launch 10us }
buffer a 1MiB on gpu0
buffer b 1MiB on gpu1
thread main {
  memcpy b <- a 1us
  memcpy b <- a 1us
}
""",
    # NCCL calls of one comm on two streams of a rank: one call each, however lowering
    # chains them
    """device gpu[2] { runtime cuda launch 10us }
buffer x[2] 1MiB on gpu
stream m[2] on gpu
stream side[2] on gpu
comm world = { m }
thread r[2] process {
  m[r]: allreduce world x[r] 1us
  side[r]: allreduce world x[r] 1us
}
"""])
def test_one_call_costs_one_launch_whatever_lowering_adds_around_it(text):
    program = load_text(text).program
    assert len(program.statements) > 4  # (the implicit records and waits are there)
    sim = simulate(program)
    threads = len(program.threads)
    assert sim.host_busy == threads * 2 * 10_000
    assert sim.makespan == 2 * 10_000 + 1_000


def test_a_group_of_one_comm_on_a_stream_is_one_launch_paid_once():
    # ncclGroupEnd launches the group's calls of a comm as one fused kernel: its thread pays
    # the launch time once, and the calls start together once it is paid
    text = ("device d[2] { compute 1 comm 2 launch 10us }\nbuffer x[2] 1MiB on d\nbuffer y[2] 1MiB on d\n"
            "stream a[2] on d\ncomm A = { a }\nthread r[2] {\n  group {\n    a[r]: allreduce A x[r] 100us\n"
            "    a[r]: allreduce A y[r] 100us\n  }\n}\n")
    program = load_text(text).program
    sim = simulate(program)
    assert sim.host_busy == 2 * 10_000
    assert {t.start for t in sim.tasks} == {10_000} and sim.makespan == 110_000


def test_deadlock_is_reported_not_hung():
    program = load_file(CONFORMANCE / "c13_host_blocks_before_notify.sched").program
    sim = simulate(program)
    assert sim.deadlocked
    assert any("notify go not set" in why for _, why in sim.stuck)
    assert sim.to_json()["deadlocked"] is True


@st.composite
def programs(draw):
    """Random single-thread programs: kernels/copies on a few streams with record/wait edges."""
    compute = draw(st.integers(1, 2))
    copy = draw(st.integers(1, 2))
    n_streams = draw(st.integers(1, 3))
    lines = [f"device d {{ compute {compute} copy {copy} }}", "buffer h 1MiB on host pinned",
             "buffer x[4] 1MiB on d", "event e[3]"]
    lines += [f"stream s{k} on d priority {draw(st.integers(0, 2))}" for k in range(n_streams)]
    lines.append("thread main {")
    for _ in range(draw(st.integers(1, 14))):
        s = draw(st.integers(0, n_streams - 1))
        kind = draw(st.sampled_from(["kernel", "copy", "record", "wait", "host", "sync"]))
        dur = draw(st.integers(0, 5))
        if kind == "kernel":
            lines.append(f"  s{s}: kernel k writes x[{draw(st.integers(0, 3))}] {dur}ms")
        elif kind == "copy":
            lines.append(f"  s{s}: copy x[{draw(st.integers(0, 3))}] <- h {dur}ms")
        elif kind in ("record", "wait"):
            lines.append(f"  s{s}: {kind} e[{draw(st.integers(0, 2))}]")
        elif kind == "host":
            lines.append(f"  host h {dur}ms")
        else:
            lines.append(f"  sync s{s}")
    lines.append("}")
    return "\n".join(lines)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_random_simulations_respect_the_contract(text):
    loaded = load_text(text)
    assert loaded.program is not None, loaded.diagnostics
    program = loaded.program
    sim = simulate(program)
    assert not sim.deadlocked
    validate(program, sim)
    run = replay(program, sim.steps)
    assert run.ok and run.finished, run.reason


def _many_tasks(n_tasks: int) -> str:
    per = n_tasks // 5
    return f"""device npu0 {{ compute 2 copy 1 launch 5us }}
buffer h[2] 4MiB on host pinned
buffer d[2] 4MiB on npu0
buffer o 4MiB on npu0
stream a on npu0
stream b on npu0
stream c on npu0 priority high
event ev[2]
thread main {{
  for i in 0..{per} {{
    let s = i % 2
    a: copy d[s] <- h[s] 1ms
    a: record ev[s]
    b: wait ev[s]
    b: kernel k reads d[s] writes o 2ms
    c: kernel z reads d[s] 0.5ms
  }}
  sync all
}}
"""


def test_simulating_100k_tasks_times_every_task():
    """The speed target (under 5 s) is measured by bench/bench_executor.py."""
    program = load_text(_many_tasks(100_000), max_statements=200_000).program
    assert len(program.tasks) == 100_000
    sim = simulate(program)
    assert not sim.deadlocked
    assert len(sim.tasks) == 100_000
    assert all(t.end >= t.start for t in sim.tasks)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rich_programs())
def test_any_program_simulates_to_a_legal_run(text):
    """Every statement kind, several threads: the simulated run replays step by step, and a
    simulation that gets stuck is a deadlock the explorer also finds."""
    program = load_text(text).program
    sim = simulate(program)
    run = replay(program, sim.steps)
    assert run.ok, (run.reason, text)
    if sim.deadlocked:
        assert run.stuck and not run.finished
        exploration = explore(program, max_states=200_000)
        assert exploration.deadlocks or not exploration.complete, text
    else:
        assert run.finished, text


@st.composite
def timed_programs(draw):
    """One thread, plenty of engine units: no contention, so times follow the orders alone."""
    lines = ["device d { compute 16 copy 16 }", "buffer h 1MiB on host pinned",
             "buffer pg 1MiB on host", "buffer x[3] 1MiB on d", "event e[2]"]
    lines += [f"stream s{k} on d" for k in range(3)]
    lines.append("thread main {")
    for _ in range(draw(st.integers(1, 14))):
        s = f"s{draw(st.integers(0, 2))}"
        a = draw(st.integers(0, 2))
        dur = f"{draw(st.integers(0, 9))}ms"
        lines.append(draw(st.sampled_from([
            f"  {s}: kernel k writes x[{a}] {dur}",
            f"  {s}: copy x[{a}] <- h {dur}",
            f"  {s}: copy pg <- x[{a}] {dur}",
            f"  {s}: record e[{a % 2}]",
            f"  {s}: wait e[{a % 2}]",
            f"  host f {dur}",
            f"  sync {s}",
            f"  sync e[{a % 2}]",
        ])))
    lines.append("}")
    return "\n".join(lines)


def asap_makespan(program) -> int:
    """Earliest finish of a single-thread program with unlimited engines, from the contract."""
    now = 0
    end: dict[int, int] = {}
    last_on: dict[int, int] = {}
    last_record: dict[int, int] = {}
    finish = 0
    for i in program.threads[0].statements:
        s = program.statements[i]
        if s.stream is not None:
            start = now
            if s.stream in last_on:
                start = max(start, end[last_on[s.stream]])
            if s.op is Op.WAIT and s.event in last_record:
                start = max(start, end[last_record[s.event]])
            end[i] = start + s.duration
            last_on[s.stream] = i
            if s.op is Op.RECORD:
                last_record[s.event] = i
            if s.blocking:
                now = end[i]
            finish = max(finish, end[i])
        elif s.op is Op.HOST:
            now += s.duration
        elif s.op is Op.SYNC:
            if s.sync.value == "stream" and s.target in last_on:
                now = max(now, end[last_on[s.target]])
            if s.sync.value == "event" and s.target in last_record:
                now = max(now, end[last_record[s.target]])
    return max(finish, now)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(timed_programs())
def test_uncontended_makespan_is_the_longest_chain(text):
    program = load_text(text).program
    sim = simulate(program)
    assert not sim.deadlocked
    assert sim.makespan == asap_makespan(program), text
    path = [n for n in sim.critical_path]
    assert path and max(n.end for n in path) == sim.makespan


CROSSED_GROUPS = """device d0 { comm 1 }
device d1 { comm 1 }
buffer x0 1MiB on d0
buffer y0 1MiB on d0
buffer x1 1MiB on d1
buffer y1 1MiB on d1
stream a1 on d0
stream a2 on d0
stream b1 on d1
stream b2 on d1
comm w = { a1, b1 }
comm v = { a2, b2 }
thread main {
  a1: allreduce w x0 1ms
  b2: allreduce v y1 1ms
  a2: allreduce v y0 1ms
  b1: allreduce w x1 1ms
}
"""


def test_collective_members_wait_for_peers_without_holding_an_engine():
    # a1 and b2 start first; were each to hold its device's only comm unit while waiting,
    # neither group could ever start. `check` finds no deadlock, and neither does the run:
    # the groups take their units together, one after the other.
    sim = simulate(load_text(CROSSED_GROUPS).program)
    assert not sim.deadlocked
    assert sim.makespan == 2 * NS_PER_MS
    spans = sorted((t.start, t.end) for t in sim.tasks)
    assert spans == [(0, NS_PER_MS)] * 2 + [(NS_PER_MS, 2 * NS_PER_MS)] * 2


def test_a_group_waiting_for_a_late_member_leaves_the_engine_to_another():
    program = load_text("""device d0
device d1 { comm 1 }
device d2
buffer g0 1MiB on d0
buffer g1 1MiB on d1
buffer h1 1MiB on d1
buffer h2 1MiB on d2
stream a on d0
stream b on d1
stream c on d1
stream e on d2
comm w = { a, b }
comm v = { c, e }
thread main {
  a: kernel k 3ms
  a: allreduce w g0 1ms
  b: allreduce w g1 1ms
  c: allreduce v h1 1ms
  e: allreduce v h2 1ms
}
""").program
    sim = simulate(program)
    times = {program.statements[t.statement].span.line: (t.start, t.end) for t in sim.tasks}
    assert times[18] == times[19] == (0, NS_PER_MS)            # group v runs while w waits
    assert times[16] == times[17] == (3 * NS_PER_MS, 4 * NS_PER_MS)
    assert sim.makespan == 4 * NS_PER_MS


def test_a_batched_exchange_on_one_comm_unit_runs():
    sim = simulate(load_text("""device d0
device d1
buffer x0 1MiB on d0
buffer y0 1MiB on d0
buffer x1 1MiB on d1
buffer y1 1MiB on d1
stream s0 on d0
stream s1 on d1
comm c = { s0, s1 }
thread r0 {
  group {
    s0: send c to s1 x0 1ms
    s0: recv c from s1 y0 1ms
  }
}
thread r1 {
  group {
    s1: send c to s0 x1 1ms
    s1: recv c from s0 y1 1ms
  }
}
""").program)
    assert not sim.deadlocked and sim.makespan == 2 * NS_PER_MS


def test_a_thread_freed_by_a_later_thread_in_the_same_instant_goes_on():
    # thread a is tried first at 1 ms, before b's notify: the instant is not over until a
    # round of every thread changes nothing
    sim = simulate(load_text("""device d
notify done
thread a {
  await done
}
thread b {
  host work 1ms
  notify done
}
""").program)
    assert not sim.deadlocked and sim.makespan == NS_PER_MS


def _count_calls(monkeypatch, blocker: str) -> list[int]:
    """The statements a `Machine` blocker is asked about, in order, from now on."""
    from checker.executor.machine import Machine

    asked: list[int] = []
    original = getattr(Machine, blocker)
    monkeypatch.setattr(Machine, blocker, lambda self, store, i: asked.append(i) or original(self, store, i))
    return asked


def test_thousands_of_streams_and_threads_cost_what_they_use(monkeypatch):
    # Per-stream relations were built by scanning every stream for each; every instant of a
    # run read every thread, finished or not, and asked again of every task waiting for an
    # engine unit whether it may start. A task is now asked once it heads its stream.
    asked = _count_calls(monkeypatch, "first_step_blocker")
    program = load_text("device d\nstream s[20000] on d\nthread t[3000] {\n  s[t]: kernel k 1ms\n}\n").program
    sim = simulate(program)
    assert sim.makespan == 3000 * NS_PER_MS
    assert len(asked) <= 2 * 3000  # (was 9,000,000: every waiting task at each of 3,000 instants)


def test_threads_blocked_in_syncs_are_asked_again_only_when_what_they_wait_for_happens(monkeypatch):
    # Each instant used to visit every live thread: 10,000 threads each syncing on its own
    # kernel, all on one stream, took 36 s. A blocked thread is now parked on the steps its
    # blocker names (`Blocked.needs`) and a thread whose clock is ahead on a timer.
    asked = _count_calls(monkeypatch, "return_blocker")
    program = load_text("device d\nstream s on d\nthread t[1000] {\n  s: kernel k 1ms\n  sync s\n}\n").program
    sim = simulate(program)
    assert sim.makespan == 1000 * NS_PER_MS and not sim.deadlocked
    # Each sync waits for the kernels enqueued before it: one ask, then one per kernel ahead
    # that it was parked on, as long as the wake-ups stay in order.
    assert len(asked) <= 3 * 1000  # (a pass over every blocked thread per completion: 500,000)


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(specs(shared_comms=True))
def test_comms_called_from_several_threads_simulate_to_a_legal_run(text):
    """Calls of a comm that two threads enqueue onto one stream meet in enqueue order: the
    simulated run replays step by step, and its deadlock is one the explorer finds too."""
    for program in load_text(text).variants:
        sim = simulate(program)
        run = replay(program, sim.steps)
        assert run.ok, (run.reason, text)
        if sim.deadlocked:
            exploration = explore(program, max_states=100_000)
            assert exploration.deadlocks or not exploration.complete, text


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(specs(shared_comms=True), st.integers(0, 1000))
def test_shuffled_simulations_are_legal_runs_the_explorer_agrees_with(text, seed):
    """Threads and stream heads taken in a random order at each instant: still an execution
    (it replays step by step), and one that finishes only if the greedy order's program
    can finish at all (a deadlock it reaches is one the explorer finds)."""
    for program in load_text(text).variants:
        sim = simulate(program, shuffle=seed)
        run = replay(program, sim.steps)
        assert run.ok, (run.reason, text)
        assert run.finished is not sim.deadlocked
        if sim.deadlocked:
            found = explore(program, max_states=100_000)
            if found.complete:
                assert found.deadlocks, text


@st.composite
def uncontended_collective_programs(draw):
    """One thread over two ranks, with collectives and send/recv pairs whose members take
    different times, and plenty of engine units: times follow the orders alone (and, under
    `queues N`, the hardware queues: a member begins at its own start)."""
    queues = draw(st.sampled_from(["", " queues 1", " queues 2"]))
    lines = [f"device d0 {{ compute 16 comm 16{queues} }}", "device d1 { compute 16 comm 16 }",
             "buffer x0 1MiB on d0", "buffer x1 1MiB on d1", "event e[2]",
             "stream a0 on d0", "stream a1 on d0", "stream b0 on d1", "stream b1 on d1",
             "comm w = { a0, b0 }", "comm v = { a1, b1 }", "thread main {"]
    rank = {"a0": "x0", "a1": "x0", "b0": "x1", "b1": "x1"}
    peer = {"a0": ("w", "b0"), "b0": ("w", "a0"), "a1": ("v", "b1"), "b1": ("v", "a1")}
    for _ in range(draw(st.integers(1, 12))):
        s = draw(st.sampled_from(sorted(rank)))
        comm, other = peer[s]
        dur, dur2 = (f"{draw(st.integers(0, 9))}ms" for _ in range(2))
        lines.append(draw(st.sampled_from([
            f"  {s}: kernel k writes {rank[s]} {dur}",
            f"  {s}: allreduce {comm} {rank[s]} {dur}",
            f"  {s}: allreduce {comm} {rank[s]} {dur}\n  {other}: allreduce {comm} {rank[other]} {dur2}",
            f"  {s}: send {comm} to {other} {rank[s]} {dur}\n  {other}: recv {comm} from {s} {rank[other]} {dur2}",
            f"  {s}: record e[{len(lines) % 2}]",
            f"  {s}: wait e[{len(lines) % 2}]",
            f"  host f {dur}",
            f"  sync {s}",
        ])))
    lines.append("}")
    return "\n".join(lines)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(uncontended_collective_programs())
def test_collective_members_end_apart_in_simulation_and_in_the_timed_order(text):
    # Two implementations of "each member ends its own duration after the group starts": the
    # machine's steps in time order (simulate), and the timed partial order the optimizer
    # reads (its longest path, which no engine limit stretches here).
    from checker.optimize import core
    from checker.optimize.model import Unsupported, program_model

    program = load_text(text).program
    sim = simulate(program)
    model = program_model(program)
    if isinstance(model, Unsupported):
        assert model.deadlock and sim.deadlocked, (model.reason, text)
        return
    assert not sim.deadlocked, text
    assert sim.makespan == core.lower_bound(model).critical_path, text


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(specs(max_statements=16, shared_comms=True), st.sampled_from([None, 1, 2]))
def test_blocked_heads_that_sleep_change_nothing_the_simulation_does(monkeypatch, text, shuffle):
    """A stream head found blocked sleeps until a step its blocker names happens
    (`_park_head`), and one woken during a scan is read in that scan when its stream comes
    later. The simulation must be the one a scan of every stream at every round gives (no
    head ever asleep): the same steps in the same order, times, engines and stuck list."""
    simulate_module = importlib.import_module("checker.executor.simulate")
    program = load_text(text, "<random>").program
    asleep = simulate(program, shuffle)
    with monkeypatch.context() as patched:
        patched.setattr(simulate_module._Simulator, "_park_head", lambda self, h, blocked: None)
        awake = simulate(program, shuffle)
    assert (asleep.steps, asleep.tasks, asleep.engines, asleep.makespan, asleep.deadlocked, asleep.stuck) == (
        awake.steps, awake.tasks, awake.engines, awake.makespan, awake.deadlocked, awake.stuck)


def test_a_task_ready_behind_an_instant_one_competes_for_the_unit_by_priority():
    # At 1 us `k0` ends: the record and the wait complete at that instant, so `k2` (priority 0,
    # the higher) wants the one compute unit together with `k1` and gets it; then the copy
    # overlaps `k1`: 6 us. Handing the unit out before the instant steps settled gave it to
    # `k1` and 10 us.
    program = load_text(
        "device d0 { compute 1 copy 1 }\nbuffer x 1KiB on d0\nbuffer y 1KiB on d0\n"
        "stream a on d0 priority 1\nstream b on d0 priority 0\nstream c on d0 priority 0\nevent e\n"
        "thread t0 {\n  c: kernel k0 1us\n  c: record e\n  a: kernel k1 4us\n  b: wait e\n"
        "  b: kernel k2 1us\n  b: copy y <- x 4us\n}\n").program
    result = simulate(program)
    assert result.makespan == 6_000
    start = {task.line: task.start for task in result.tasks}
    assert start[13] == 1_000 and start[11] == 2_000  # k2 first, then k1


def test_interleaved_runs_take_turns_at_one_instant_and_every_one_replays():
    # Two threads hand a notify back and forth on one stream: only turns at one instant finish.
    program = load_text("device d\nstream s on d\nnotify n\nthread a {\n  s: notify n\n  s: await n\n}\n"
                        "thread b {\n  s: await n\n  s: notify n\n}\n").program
    assert all(simulate(program, shuffle=seed).deadlocked for seed in range(20))
    finished = 0
    for seed in range(20):
        run = simulate(program, shuffle=seed, interleave=True)
        checked = replay(program, run.steps)
        assert checked.ok and checked.finished is not run.deadlocked
        finished += not run.deadlocked
    assert finished
    # a guide: the order a finishing execution issues the statements in (a, b, b, a)
    a_notify, a_await, b_await, b_notify = range(4)
    run = simulate(program, guide=(a_notify, b_await, b_notify, a_await))
    assert not run.deadlocked and replay(program, run.steps).finished


@pytest.mark.parametrize("launch, first", [("hi", "gk"), ("lo", "mk")])
def test_a_graph_runs_at_its_launch_stream_s_priority(launch, first):
    # cudaGraphInstantiateWithFlags: without UseNodePriority a graph's kernels take "the
    # priority of the launch stream", not of the streams the body was captured on
    captured = "lo" if launch == "hi" else "hi"
    text = (f"device gpu {{ compute 1 runtime cuda }}\nbuffer a 1MiB on gpu\nbuffer b 1MiB on gpu\nstream p on gpu\n"
            f"stream lo on gpu priority 0\nstream hi on gpu priority -5\nstream mid on gpu priority -2\nevent e\n"
            f"graph g {{\n  {captured}: kernel gk writes a 100us\n}}\n"
            f"thread t {{\n  p: kernel pre 10us\n  p: record e\n  {launch}: wait e\n  {launch}: launch g\n"
            f"  mid: wait e\n  mid: kernel mk writes b 100us\n}}\n")
    program = load_text(text).program
    sim = simulate(program)
    start = {program.statements[t.statement].name: t.start for t in sim.tasks}
    assert min(("gk", "mk"), key=lambda name: start[name]) == first, start


def test_critical_path_goes_through_a_group_to_what_its_calls_waited_for():
    # a group's fused calls are not ordered among themselves: the send on pc[1] waits for
    # the 5 ms kernel (through the wait), not for its group mate
    program = load_text("""device gpu[2] { compute 1 comm 2 }
stream comp[2] on gpu
stream pc[2] on gpu
comm pp = { pc }
buffer a[2] 1MiB on gpu
buffer b[2] 1MiB on gpu
event e[2]
thread rank0 process {
  comp[0]: kernel short writes a[0] 1ms
  comp[0]: record e[0]
  pc[0]: wait e[0]
  group {
    pc[0]: send pp to pc[1] a[0] 1ms
    pc[0]: recv pp from pc[1] b[0] 1ms
  }
  pc[0]: kernel after0 reads b[0] 1ms
}
thread rank1 process {
  comp[1]: kernel long writes b[1] 5ms
  comp[1]: record e[1]
  pc[1]: wait e[1]
  group {
    pc[1]: recv pp from pc[0] a[1] 1ms
    pc[1]: send pp to pc[0] b[1] 1ms
  }
}
""").program
    sim = simulate(program)
    path = [n for n in sim.critical_path if n.part == "task" and n.end > n.start]
    names = [program.statements[n.statement].span.line for n in path]
    assert sim.makespan == 7 * NS_PER_MS
    assert names[0] == 19 and names[-1] == 16, names
