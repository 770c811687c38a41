"""The optimizer: exact minimum makespans, the overlap bound, schedules, and invariants."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from checker.frontend import load_text
from checker.crosscheck import optimize_as_written as optimize
from checker.optimize import check_makespan
from checker.optimize import core
from checker.optimize.model import Unsupported, bound_model, program_model
from checker.optimize.search import feasible, minimize

MS = 1_000_000


def load(text: str):
    loaded = load_text(text)
    assert loaded.program is not None, loaded.diagnostics
    return loaded.program


def random_spec(seed: int, tasks: int = 6, threads: int = 1) -> str:
    """A small random deterministic spec: streams, events, syncs, host code, launch costs."""
    rng = random.Random(seed)
    compute = rng.choice([1, 1, 2])
    launch = rng.choice(["", "", " launch 1ms"])
    lines = [f"device d {{ compute {compute} copy 1{launch} }}",
             "buffer h[3] 1MiB on host pinned", "buffer p 1MiB on host",
             "buffer b[4] 1MiB on d"]
    streams_per_thread = 2
    for t in range(threads):
        for s in range(streams_per_thread):
            lines.append(f"stream s{t}_{s} on d")
        lines.append(f"event e{t}[3]")
    for t in range(threads):
        body = []
        recorded: list[int] = []
        for _ in range(tasks // threads):
            s = f"s{t}_{rng.randrange(streams_per_thread)}"
            kind = rng.random()
            dur = rng.choice([1, 2, 3, 5])
            if kind < 0.45:
                r, w = rng.randrange(4), rng.randrange(4)
                body.append(f"{s}: kernel k reads b[{r}] writes b[{w}] {dur}ms")
            elif kind < 0.6:
                body.append(f"{s}: copy b[{rng.randrange(4)}] <- h[{rng.randrange(3)}] {dur}ms")
            elif kind < 0.65:
                body.append(f"{s}: copy p <- b[{rng.randrange(4)}] {dur}ms")
            elif kind < 0.75:
                e = rng.randrange(3)
                body.append(f"{s}: record e{t}[{e}]")
                recorded.append(e)
            elif kind < 0.85 and recorded:
                body.append(f"{s}: wait e{t}[{rng.choice(recorded)}]")
            elif kind < 0.92:
                body.append(f"sync {s}")
            else:
                body.append(f"host f reads h[{rng.randrange(3)}] {dur}ms")
        lines.append(f"thread t{t} {{")
        lines.extend("  " + b for b in body)
        lines.append("}")
    return "\n".join(lines) + "\n"


def brute_force(model) -> int:
    """Minimum makespan by serial list scheduling over every order of the engine tasks."""
    g = core.graph(model)
    jobs = [n.index for n in model.nodes if n.uses]
    best = None
    for perm in itertools.permutations(jobs):
        priority = [1e9] * len(model.nodes)
        for rank, v in enumerate(perm):
            priority[v] = -rank
        times = core.serial_schedule(model, g, priority)
        assert core.validate(model, times) is None
        span = max(times, default=0)
        best = span if best is None else min(best, span)
    return best


COPY_COMPUTE = """
device npu0 { compute 1 copy 1 }
buffer x_host 4MiB on host pinned
buffer x_dev 4MiB on npu0
buffer y_dev 4MiB on npu0
stream s_copy on npu0
stream s_comp on npu0 priority high
event loaded
thread main {
  s_copy: copy x_dev <- x_host 8.2ms
  s_copy: record loaded
  s_comp: wait loaded
  s_comp: kernel conv reads x_dev writes y_dev 3.5ms
  sync s_comp
}
expect makespan <= 11ms
"""


def test_copy_then_compute():
    program = load(COPY_COMPUTE)
    result = optimize(program, timeout=10)
    assert result.program == 11_700_000 and result.optimal_program
    assert result.bound == 11_700_000 and result.optimal_bound
    assert result.lower == 11_700_000
    verdicts = check_makespan(program, result)
    assert [v.status for v in verdicts] == ["violated"]


def test_makespan_verdict_keeps_every_digit():
    program = load(COPY_COMPUTE.replace("<= 11ms", "<= 11.699999ms"))
    (verdict,) = check_makespan(program, optimize(program, timeout=10))
    assert verdict.status == "violated"
    assert verdict.message == "minimum makespan 11.7 ms exceeds 11.699999 ms"


def test_makespan_expectation_met():
    program = load(COPY_COMPUTE.replace("<= 11ms", "<= 12ms"))
    result = optimize(program, timeout=10)
    assert [v.status for v in check_makespan(program, result)] == ["met"]


def test_race_has_no_order_to_keep():
    program = load("""
device d { compute 2 }
buffer b 1MiB on d
stream a on d
stream c on d
thread t {
  a: kernel k1 writes b 2ms
  a: kernel k2 writes b 2ms
  c: kernel k3 writes b 3ms
}
""")
    result = optimize(program, timeout=10)
    assert result.program == 4 * MS
    # k1 -> k2 conflict keeps its order; k3 races with both and has no order to keep
    assert result.bound == 4 * MS


def test_bound_drops_stream_order():
    program = load("""
device d { compute 2 }
buffer x 1MiB on d
buffer y 1MiB on d
stream a on d
thread t {
  a: kernel k1 writes x 2ms
  a: kernel k2 writes y 2ms
  sync a
}
""")
    result = optimize(program, timeout=10)
    assert result.program == 4 * MS
    assert result.bound == 2 * MS
    assert result.lower == 2 * MS


def test_bound_keeps_collective_order_but_not_within_a_group():
    exchange = """
device d0 { comm 2 }
device d1 { comm 2 }
buffer x0 1MiB on d0
buffer y0 1MiB on d0
buffer x1 1MiB on d1
buffer y1 1MiB on d1
stream s0 on d0
stream s1 on d1
comm c = { s0, s1 }
thread t {
  group {
    s0: send c to s1 x0 1ms
    s0: recv c from s1 y0 1ms
    s1: send c to s0 x1 1ms
    s1: recv c from s0 y1 1ms
  }
  s0: send c to s1 x0 2ms
  s1: recv c from s0 y1 2ms
}
"""
    # batch_isend_irecv: the two pairs run at once, then the last pair
    result = optimize(load(exchange), timeout=10)
    assert (result.program, result.bound) == (3 * MS, 3 * MS)
    assert result.optimal_program and result.optimal_bound


def test_host_launch_cost():
    program = load("""
device d { compute 1 launch 1ms }
buffer x 1MiB on d
stream a on d
thread t {
  a: kernel k1 writes x 0.5ms
  a: kernel k2 writes x 0.5ms
  a: kernel k3 writes x 0.5ms
}
""")
    result = optimize(program, timeout=10)
    # the third kernel is enqueued by 3ms and runs 0.5ms
    assert result.program == 3_500_000
    assert result.report.classification.kind == "host-bound"


@pytest.mark.parametrize("seed", range(12))
def test_no_run_ends_before_the_orders_every_execution_keeps(seed):
    # `crosscheck.must_chain` (and `_stream_loads`) bound every finishing execution of a program
    # without an exact model:
    # random programs of racing threads (shared streams, events, a flag, a notify), launch
    # costs and host time; each shuffled, interleaved run in time is an execution
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
    from bench_smt import make_spec
    from checker.executor.simulate import simulate
    from checker.crosscheck import must_chain
    from checker.optimize import _own_chains, _stream_loads

    text = make_spec(seed, 2 + seed % 2, 10, signals=seed % 3 != 0)
    text = text.replace("compute 2 copy 2", "compute 2 copy 2 launch 2us").replace(
        "host consume reads host_out", "host consume reads host_out 3us")
    program = load(text)
    bound = must_chain(program)
    assert bound == 0 or bound >= _own_chains(program)  # (0: a step no execution takes, no makespan)
    bound = max(bound, _stream_loads(program), _own_chains(program))
    for shuffle in range(10):
        for interleave in (False, True):
            run = simulate(program, shuffle=shuffle, interleave=interleave)
            assert run.deadlocked or run.makespan >= bound


RACING_FOR_A_STREAM = """
device d { compute 2 }
buffer x 1MiB on d
stream a on d
thread t1 { a: kernel k1 writes x 1ms }
thread t2 { a: kernel k2 writes x 1ms
            sync a
            host h 1ms }
"""


def test_racing_threads_report_the_run_in_time_that_ends_first():
    # The simulated run takes t1's kernel first (3 ms); t2's first ends at 2 ms, which meets
    # t2's own chain: with every run in time searched (`optimize` on the command line and in
    # the API), that is the minimum, proven.
    from checker.crosscheck import best_run_in_time

    program = load(RACING_FOR_A_STREAM)
    assert optimize(program, timeout=5).program == 3_000_000
    result = optimize(program, runs_in_time=True, timeout=5)
    assert result.simulated == 3_000_000 and result.program == 2_000_000 and result.optimal_program
    assert any("the run in time that ends first" in note for note in result.notes)
    assert best_run_in_time(program, seconds=5) == (2_000_000, True)


def test_nondeterministic_program_is_not_claimed_optimal():
    # No exact model (the threads race for the stream): the run (t1's kernel first, 3 ms) is
    # above every bound that needs no model (the engines' work, 1 ms; the stream's, t2's
    # chain and the orders every execution keeps, 2 ms), so nothing is proven; t2's kernel
    # first would end in 2 ms.
    program = load(RACING_FOR_A_STREAM)
    result = optimize(program, timeout=5)
    assert result.program == 3_000_000 and result.proven_lower_program == 2_000_000
    assert not result.optimal_program and not result.optimal_bound
    assert any("share stream" in note for note in result.notes)
    # Where the stream's work is the run, it is optimal, though the threads still race.
    result = optimize(load("device d { compute 2 }\nbuffer x 1MiB on d\nstream a on d\n"
                           "thread t1 { a: kernel k1 writes x 1ms }\nthread t2 { host h 500us\n"
                           "  a: kernel k2 writes x 1ms }\n"), timeout=5)
    assert result.program == result.proven_lower_program == 2_000_000 and result.optimal_program
    # With one unit the engine's work is the run: optimal, though the threads still race.
    result = optimize(load("device d { compute 1 }\nbuffer x 1MiB on d\nstream a on d\n"
                           "thread t1 { a: kernel k1 writes x 1ms }\nthread t2 { a: kernel k2 writes x 1ms }\n"),
                      timeout=5)
    assert result.program == result.proven_lower_program == 2_000_000 and result.optimal_program


@pytest.mark.parametrize("seed", range(40))
def test_random_invariants_and_brute_force(seed):
    program = load(random_spec(seed, tasks=6, threads=1 + seed % 2))
    exact = program_model(program)
    assert not isinstance(exact, Unsupported), exact
    relaxed = bound_model(program, exact)
    result = optimize(program, timeout=20)
    assert result.optimal_program and result.optimal_bound
    assert result.program >= result.bound >= result.lower
    if result.simulated is not None:
        assert result.simulated >= result.program
    assert result.program == brute_force(exact)
    assert result.bound == brute_force(relaxed)
    for model, best in ((exact, result.program), (relaxed, result.bound)):
        # the encoding itself, without the heuristics that usually settle these at once
        assert feasible(model, best) is True
        assert feasible(model, best - 1) is False
    assert core.validate(exact, _times(exact, result.program_schedule)) is None


def _times(model, schedule):
    at = {}
    for slot in schedule.slots:
        at[slot.statement] = slot
    out = []
    from checker.witness import StepKind

    for node in model.nodes:
        slot = at[node.statement]
        out.append({StepKind.ISSUE: slot.issue, StepKind.RETURN: slot.released,
                    StepKind.START: slot.start, StepKind.COMPLETE: slot.start,
                    StepKind.END: slot.end}[node.kind])
    return out


def test_timeout_reports_no_false_proof():
    program = load(random_spec(7, tasks=60, threads=1))
    exact = program_model(program)
    import time

    result = minimize(exact, "program", time.monotonic() + 0.01)
    assert result.lower <= result.makespan
    if not result.optimal:
        assert result.reason in ("timeout",) or result.reason.startswith("z3")


EMIT_CASES = {
    # grouped sends and receives stay one `group`: written apart, each rank's send waited for
    # a recv queued behind the other's send (a deadlock)
    "group": ("device gpu[2] { compute 1 comm 1 }\nbuffer x[2] 4MiB on gpu\nbuffer y[2] 4MiB on gpu\n"
              "stream c[2] on gpu\nstream k[2] on gpu\ncomm ring = { c }\nevent e[2]\nthread r[2] {\n"
              "  for it in 0..2 {\n    group {\n      c[r]: send ring to c[1 - r] x[r] 1ms\n"
              "      c[r]: recv ring from c[1 - r] y[r] 1ms\n    }\n    c[r]: record e[r]\n    k[r]: wait e[r]\n"
              "    k[r]: kernel use reads y[r] writes x[r] 2ms\n    c[r]: wait_stream k[r]\n  }\n  sync gpu[r]\n}\n"),
    # a `memcpy` of pinned memory blocks its thread: written as a plain copy, the host's refill raced it
    "memcpy": ("device gpu0 { compute 1 copy 1 }\nbuffer h 4MiB on host pinned\nbuffer d 4MiB on gpu0\n"
               "buffer o 4MiB on gpu0\nstream s on gpu0\nthread main {\n  memcpy d <- h 1ms\n"
               "  host refill writes h 0.5ms\n  s: kernel k reads d writes o 2ms\n  sync s\n}\n"),
    # a tensor's alloc and free do nothing at run time: written as a buffer's, the free raced its use
    # a host sync nothing after it needs: the bound drops it (the program keeps it), and the
    # emitted spec syncs only before the host statement that reads the kernel's output
    "needless sync": ("device d { compute 2 }\nbuffer a 1MiB on d\nbuffer b 1MiB on d\nbuffer h 1MiB on host pinned\n"
                      "stream s1 on d\nstream s2 on d\nthread main {\n  s1: kernel k1 writes a 2ms\n  sync s1\n"
                      "  s2: kernel k2 writes b 2ms\n  s2: copy h <- b 1ms\n  sync s2\n  host read reads h 1ms\n}\n"),
    "tensors": ("device gpu0 { compute 2 }\ntensor t1 4MiB on gpu0\ntensor t2 4MiB on gpu0\nbuffer o 4MiB on gpu0\n"
                "stream s1 on gpu0\nstream s2 on gpu0\nevent e\nthread main {\n  s1: alloc t1\n"
                "  s1: kernel make writes t1 1ms\n  s1: record e\n  s2: wait e\n  s2: kernel use reads t1 writes o 3ms\n"
                "  s2: record_stream t1\n  free t1\n  s1: alloc t2\n  s1: kernel make2 writes t2 1ms\n  sync all\n}\n"),
}


@pytest.mark.parametrize("name", sorted(EMIT_CASES))
def test_the_emitted_spec_is_as_safe_as_the_original_and_reaches_the_bound(name):
    from checker.analyze import check_loaded
    from checker.optimize import emit

    loaded = load_text(EMIT_CASES[name])
    assert not check_loaded(loaded).findings
    result = optimize(loaded.program, timeout=20)
    text = emit(loaded.program, result)
    again = load_text(text)
    assert again.program is not None, again.diagnostics
    assert not check_loaded(again).findings, text
    assert optimize(again.program, timeout=20).program == result.bound, text
    if name == "needless sync":
        assert (result.program, result.bound) == (6_000_000, 4_000_000)  # k1 beside k2, then the copy and the read


@pytest.mark.parametrize("seed", range(40))
def test_random_schedules_replay_and_synthesis_reaches_the_bound(seed):
    from checker import hb
    from checker.optimize import emit
    from checker.crosscheck import replays

    program = load(random_spec(seed, tasks=8, threads=1 + seed % 2))
    result = optimize(program, timeout=20)
    ok, why = replays(program, result.program_schedule)
    assert ok, why
    loaded = load_text(emit(program, result))
    assert loaded.program is not None, loaded.diagnostics
    again = optimize(loaded.program, timeout=20)
    assert again.optimal_program
    if all(d.launch == 0 for d in program.devices):
        assert again.program == result.bound
    else:
        # added event operations cost launch time on the host
        assert again.program >= result.bound
    if not hb.analyze(program)[0]:
        assert not hb.analyze(loaded.program)[0]


def test_synthesis_declares_array_elements_by_themselves():
    """A device, buffer, stream or thread array becomes one name per element (`gpu_0`): its
    elements may sit on different devices, and `gpu[0]` is no name to declare."""
    from checker.optimize import emit

    program = load("""device gpu[2] { compute 1 comm 1 }
buffer x[2] 1MiB on gpu
stream s[2] on gpu
comm w = { s }
thread t[2] {
  s[t]: kernel k writes x[t] 1ms
  s[t]: allreduce w x[t] 1ms
}
""")
    result = optimize(program, timeout=20)
    text = emit(program, result)
    loaded = load_text(text)
    assert loaded.program is not None, (loaded.diagnostics, text)
    assert [m.device for m in loaded.program.memories] == [0, 1]
    assert optimize(loaded.program, timeout=20).program == result.bound == 2 * MS


SYNTH_COLLECTIVES = {
    # the kernel after the long member waits for it, not only for the short one
    "long member": """device gpu0 { compute 1 comm 1 launch 0us }
device gpu1 { compute 1 comm 1 launch 0us }
buffer x0 1MiB on gpu0
buffer x1 1MiB on gpu1
buffer y 1MiB on gpu1
stream c0 on gpu0
stream c1 on gpu1
stream k0 on gpu0
stream k1 on gpu1
comm world = { c0, c1 }
event e0
event e1
thread main {
  group {
    c0: allreduce world x0 1ms
    c1: allreduce world x1 4ms
  }
  c0: record e0
  k0: wait e0
  k0: kernel m reads x0 writes y 1ms
  k0: record e1
  c1: record e0
  k1: wait e1
  k1: wait e0
  k1: kernel k reads x1, y 1ms
}
""",
    # the member whose buffer the kernel writes waits for it (each member starts on its own)
    "touched member": """device gpu0 { compute 1 comm 1 launch 0us }
device gpu1 { compute 1 comm 1 launch 0us }
buffer x0 1MiB on gpu0
buffer x1 1MiB on gpu1
stream c0 on gpu0
stream c1 on gpu1
stream k1 on gpu1
comm world = { c0, c1 }
event e
thread main {
  k1: kernel a writes x1 3ms
  k1: record e
  c1: wait e
  group {
    c0: allreduce world x0 1ms
    c1: allreduce world x1 1ms
  }
}
""",
    # a wait before one member orders only that member: c1's, which writes x1, needs its own
    "other member": """device gpu0 { compute 1 comm 1 launch 0us }
device gpu1 { compute 1 comm 1 launch 0us }
device gpu2 { compute 1 comm 1 launch 0us }
buffer p0 1MiB on gpu0
buffer q0 1MiB on gpu0
buffer x1 1MiB on gpu1
buffer s2 1MiB on gpu2
stream k0 on gpu0
stream c0 on gpu0
stream c1 on gpu1
stream c2 on gpu2
comm v = { c0, c2 }
comm w = { c0, c1 }
event e
thread main {
  k0: kernel a writes p0, x1 3ms
  k0: record e
  c0: wait e
  c1: wait e
  group {
    c0: allreduce v p0 1ms
    c2: allreduce v s2 1ms
  }
  group {
    c0: allreduce w q0 1ms
    c1: allreduce w x1 1ms
  }
}
""",
}


@pytest.mark.parametrize("name", sorted(SYNTH_COLLECTIVES))
def test_synthesis_orders_each_collective_member_by_itself(name):
    from checker import hb
    from checker.optimize import emit

    program = load(SYNTH_COLLECTIVES[name])
    assert not hb.analyze(program)[0]
    result = optimize(program, timeout=20)
    loaded = load_text(emit(program, result))
    assert loaded.program is not None, loaded.diagnostics
    assert not hb.analyze(loaded.program)[0], [f.message for f in hb.analyze(loaded.program)[0]]
    assert optimize(loaded.program, timeout=20).program == result.bound


BENCH = __import__("pathlib").Path(__file__).resolve().parent.parent / "bench" / "data"


@pytest.mark.parametrize("timeout", [0.05, 0.5, 2.0])
def test_time_limit_never_gives_a_false_proof(timeout):
    from checker.frontend import load_file

    path = BENCH / "opt_50_0.sched"
    if not path.exists():
        pytest.skip("benchmark data not generated")
    result = optimize(load_file(path).program, timeout=timeout)
    optimum = 17_400_000  # proved by both the Z3 search (given time) and CP-SAT's schedule
    assert result.proven_lower_program <= optimum <= result.program
    assert result.optimal_program == (result.program == result.proven_lower_program)
    assert result.proven_lower_bound <= result.bound
    assert result.program >= result.bound >= result.lower


@pytest.mark.parametrize("seed", range(10))
def test_interleaving_dependent_programs_fall_back_honestly(seed):
    text = random_spec(seed, tasks=6, threads=2)
    # make both threads use one stream: enqueue order now depends on the interleaving
    text = text.replace("s1_0:", "s0_0:").replace("s1_1:", "s0_1:")
    program = load(text)
    from checker.optimize.model import nondeterminism

    if nondeterminism(program) is None:
        pytest.skip("the threads do not share anything after all")
    result = optimize(program, timeout=5)
    # no exact model: the simulated run is optimal only where it meets a bound that needs none
    assert result.optimal_program is (result.program is not None and result.program <= result.proven_lower_program)
    assert result.optimal_bound is (result.program is not None and result.program <= result.proven_lower_bound)
    assert result.proven_lower_bound <= result.proven_lower_program
    assert result.program_schedule is None
    if result.program is not None:
        assert result.program == result.simulated
        assert result.program >= result.lower


def test_a_member_on_a_shared_hardware_queue_begins_at_its_own_start():
    # Under `runtime cuda` and `queues 1` the kernel on s0 may begin once c0's member has
    # begun, which it does on its own (it spins), before c1's member (which waits for the
    # kernel) arrives. Were that begin the group's joint start, the timed model would be a
    # cycle (a false "deadlock"). Under the contract's rule 8 it is that cycle: a deadlock.
    from checker.analyze import check_loaded

    text = """device gpu0 { compute 1 comm 1 launch 0us queues 1 runtime cuda }
device gpu1 { compute 1 comm 1 launch 0us runtime cuda }
buffer x0 1MiB on gpu0
buffer x1 1MiB on gpu1
buffer y 1MiB on gpu0
event e
stream c0 on gpu0
stream s0 on gpu0
stream c1 on gpu1
comm world = { c0, c1 }
thread main {
  group {
    c0: allreduce world x0 1ms
  }
  s0: kernel k writes y 1ms
  s0: record e
  c1: wait e
  group {
    c1: allreduce world x1 1ms
  }
}
expect no deadlock
expect makespan <= 2ms
"""
    result = optimize(load(text), timeout=10)
    assert not result.deadlock and result.simulated == 2 * MS
    assert result.optimal_program and result.program == 2 * MS
    report = check_loaded(load_text(text))
    assert report.findings == () and not [d for d in report.diagnostics if d.code.value == "SP401"]
    contract = text.replace(" runtime cuda", "")
    assert optimize(load(contract), timeout=10).deadlock
    assert [f.kind.value for f in check_loaded(load_text(contract)).findings] == ["deadlock"]


@pytest.mark.parametrize("chained", [False, True])
def test_past_the_model_limit_a_run_that_meets_a_bound_needing_no_model_is_optimal(monkeypatch, chained):
    """Too large for an exact model: two kernels on two units run side by side, as fast as
    their work allows; chained by a sync they take twice that, which the chain of orders
    proves optimal for the program, but not for the overlap bound, which drops the sync."""
    import checker.optimize as optimize_package

    monkeypatch.setattr(optimize_package, "MAX_STATEMENTS", 1)
    body = "s0: kernel a 10us\n  " + ("sync s0\n  " if chained else "") + "s1: kernel b 10us\n"
    result = optimize(load("device npu { compute 2 }\nstream s0 on npu\nstream s1 on npu\n"
                           f"thread main {{\n  {body}}}\n"))
    assert "no exact model" in result.notes[0]
    assert result.program == result.bound == (20_000 if chained else 10_000)
    assert result.lower == result.proven_lower_bound == 10_000
    assert result.proven_lower_program == result.program
    assert result.optimal_program and result.optimal_bound is (not chained)
    assert ("not proven for the bound" in result.notes[0]) is chained


def test_synthesis_refuses_threads_that_hand_off_to_each_other():
    # The hand-off orders the free after the alloc on the other thread: a spec keeping each
    # thread's own orders only would free before it allocates.
    from checker.optimize import EmitError, emit

    program = load("""device d { compute 1 }
buffer h 1MiB on host
stream s on d
notify n
thread a {
  alloc h
  s: kernel k 1ms
  notify n
}
thread b {
  await n
  free h
}
""")
    result = optimize(program, timeout=20)
    with pytest.raises(EmitError, match="hand off"):
        emit(program, result)


# `optimize --emit`: the written spec is as safe as the original, loads, and says what it takes.

GROUP_WAITS_THROUGH_A_LATER_MEMBER = """device gpu0 { compute 1 comm 1 }
device gpu1 { compute 1 comm 1 }
buffer g0 1MiB on gpu0
buffer g1 1MiB on gpu1
stream comm0 on gpu0
stream comp0 on gpu0
stream comm1 on gpu1
comm world = { comm0, comm1 }
event filled
thread driver {
  comm0: allreduce world g0 1ms
  comp0: kernel fill writes g0 2ms
  comp0: record filled
  comm1: wait filled
  comm1: allreduce world g1 1ms
}
"""


def test_emit_waits_for_a_task_issued_after_a_group_member_through_a_later_member():
    """The group starts once both members are at their heads, so the allreduce on comm0,
    issued before the fill, runs after it: the emitted wait goes before the later member, not
    before comm0's (a wait issued before its record binds to none, and races)."""
    from checker.analyze import check_loaded
    from checker.optimize import emit

    loaded = load_text(GROUP_WAITS_THROUGH_A_LATER_MEMBER)
    result = optimize(loaded.program, timeout=20)
    text = emit(loaded.program, result)
    lines = [line.strip() for line in text.splitlines()]
    assert lines.index("comm1: wait dep[0]") > lines.index("gpu0_lane[0]: record dep[0]"), text
    again = load_text(text)
    assert not check_loaded(again).findings, text
    assert optimize(again.program, timeout=20).program == result.bound


RACY_SPEC = """device d { compute 2 }
buffer x 1MiB on d
stream a on d
stream b on d
thread main {
  a: kernel p writes x 1ms
  b: kernel q writes x 1ms
}
"""


@pytest.mark.parametrize("written, refused", [(RACY_SPEC, "findings the original lacks \\(race\\)"),
                                              ("device d { compute 1 }\nbuffer x 1MiB on d\nbuffer x 1MiB on d\n",
                                               "does not load")])
def test_emit_as_run_refuses_a_spec_with_new_findings_or_one_that_does_not_load(monkeypatch, written, refused):
    """The safety net: whatever the synthesis wrote, a spec `check` would fault is an emit error."""
    from checker import crosscheck
    from checker.optimize import EmitError

    program = load("device d { compute 2 }\nbuffer x 1MiB on d\nstream a on d\nthread main {\n"
                   "  a: kernel p writes x 1ms\n}\n")
    result = optimize(program, timeout=20)
    monkeypatch.setattr(crosscheck, "emit", lambda program, result: written)
    with pytest.raises(EmitError, match=refused):
        crosscheck.emit_as_run(program, result)


def test_emit_as_run_expects_the_makespan_of_the_slowest_program():
    """Under `runtime cuda` a `cudaMalloc` may synchronize the device: `check` holds the
    emitted spec to its slowest program, 6 ms, not the 5 ms of the one that does not."""
    from checker.analyze import check_loaded
    from checker.crosscheck import emit_as_run

    program = load("device d { compute 2 runtime cuda }\nbuffer x 1MiB on d\nbuffer y 1MiB on d\nstream s on d\n"
                   "stream t on d\nthread main {\n  s: kernel A writes x 5ms\n  alloc y\n  t: kernel B writes y 1ms\n}\n")
    text = emit_as_run(program, optimize(program, timeout=20))
    assert "expect makespan <= 6ms" in text and "slowest program), it takes 6 ms" in text, text
    assert check_loaded(load_text(text)).passed, text


def test_emit_header_claims_the_bound_only_when_the_spec_reaches_it():
    """A free waits for the device under `runtime cuda`: the emitted spec takes 6 ms where the
    bound is 5 ms, and its header says so rather than that its minimum is the bound."""
    from checker.crosscheck import emit_as_run

    program = load("device d { compute 2 runtime cuda }\nbuffer x 1MiB on d\nbuffer y 1MiB on d\nstream s on d\n"
                   "stream t on d\nthread main {\n  s: kernel A writes x 5ms\n  t: kernel B writes y 1ms\n"
                   "  sync t\n  free y\n  host H 1ms\n}\n")
    result = optimize(program, timeout=20)
    text = emit_as_run(program, result)
    assert result.bound == 5 * MS
    assert "Its minimum makespan is the bound" not in text and "reaches the overlap bound" not in text, text
    assert "it does not reach the overlap bound" in text and "it takes 6 ms" in text
    assert optimize(load(text), timeout=20).program == 6 * MS


def test_emitted_names_avoid_every_name_the_spec_uses():
    """`x[0]` flattens to `x_0`, which the spec already declares; the event array `dep` and the
    lane array `d_lane` are names it uses too: each gets a fresh suffix, and the spec loads
    with every buffer its own."""
    from checker.analyze import check_loaded
    from checker.optimize import emit

    program = load("""device d { compute 2 copy 1 }
buffer dep 1MiB on d
buffer x[2] 1MiB on d
buffer x_0 1MiB on d
buffer h 1MiB on host pinned
stream s on d
stream d_lane on d
event e
thread main {
  s: kernel A writes dep 2ms
  s: record e
  d_lane: kernel B writes x_0 3ms
  d_lane: wait e
  d_lane: copy h <- dep 1ms
  s: kernel C reads dep writes x[0] 1ms
  sync d_lane
}
""")
    result = optimize(program, timeout=20)
    text = emit(program, result)
    again = load_text(text)
    assert again.program is not None, (again.diagnostics, text)
    assert len({m.name for m in again.program.memories}) == len(program.memories) == 5
    assert "event dep_1[" in text and "stream d_lane_1[" in text and "buffer x_0_1 " in text, text
    assert not check_loaded(again).findings, text


def test_the_bound_keeps_the_launch_cost_of_a_graph_launch():
    """Each `launch` of a graph costs its thread the device's launch time, in any order: ten
    launches of 10 us hold the host 100 us however the graphs' kernels overlap."""
    program = load("""device d { compute 4 launch 10us }
buffer x[10] 1MiB on d
stream s on d
stream m on d
graph G[10] {
  s: kernel a writes x[G] 1us
}
thread main {
  for i in 0..10 {
    m: launch G[i]
  }
  sync m
}
""")
    result = optimize(program, timeout=20)
    assert result.bound == result.program == 101_000


def test_the_relaxation_pairs_every_conflicting_pair_of_statements() -> None:
    """`_sharing_pairs` lists the candidate pairs per memory; it must hold every pair of
    access lists that conflict (random lists, checked against every pair)."""
    from checker.ir import NO_SPAN, Access, accesses_conflict
    from checker.optimize.model import _sharing_pairs

    rng = random.Random(7)
    for _ in range(200):
        lists = [tuple(Access(rng.randrange(4), start, start + rng.randrange(1, 8), rng.random() < 0.4,
                              NO_SPAN, "m")
                       for start in (rng.randrange(16) for _ in range(rng.randrange(3))))
                 for _ in range(rng.randrange(2, 9))]
        listed = _sharing_pairs(lists)
        assert listed == sorted(set(listed))
        wanted = {(i, j) for i, j in itertools.combinations(range(len(lists)), 2)
                  if accesses_conflict(lists[i], lists[j])}
        assert wanted <= set(listed)


def test_own_chains_follow_a_thread_s_waits_on_events_only_it_records():
    # each rank's kernel waits for its previous allreduce through `r_done`, recorded by the
    # rank alone: 3 iterations of 2 ms + 1 ms, whatever the ranks do between them
    from checker.optimize import _own_chains

    program = load("""device gpu[2] { compute 1 comm 1 }
buffer grad[2] 4MiB on gpu
stream cp[2] on gpu
stream cm[2] on gpu
event g_done[2]
event r_done[2]
event shared
comm world = { cm }
thread rank[2] {
  for i in 0..3 {
    cp[rank]: wait r_done[rank]
    cp[rank]: kernel bwd writes grad[rank] 2ms
    cp[rank]: record g_done[rank]
    cm[rank]: wait g_done[rank]
    cm[rank]: allreduce world grad[rank] 1ms
    cm[rank]: record r_done[rank]
  }
  sync all
}
""")
    assert _own_chains(program) == 9_000_000
    shared = load(program.source.replace("record r_done[rank]", "record shared").replace(
        "wait r_done[rank]", "wait shared"))
    assert _own_chains(shared) == 7_000_000  # (both ranks record it: which record a wait takes is open)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 11), st.integers(0, 11)), max_size=40))
def test_emit_s_descendants_are_what_a_search_reaches(pairs):
    # `optimize --emit` drops a dependency when another successor of its tail reaches its head,
    # reading every node's descendants off one pass in topological order
    from checker.optimize.synthesis import _descendants

    succ: dict = {}
    for a, b in pairs:
        if a < b:  # (a DAG, as a schedule's orders are)
            succ.setdefault(a, set()).add(b)
    index, reach = _descendants(succ)

    def search(a):
        seen, stack = set(), [a]
        while stack:
            for y in succ.get(stack.pop(), ()):
                if y not in seen:
                    seen.add(y)
                    stack.append(y)
        return seen

    for node, k in index.items():
        assert {other for other, j in index.items() if reach[k] >> j & 1} == search(node)
    assert _descendants({1: {2}, 2: {1}}) is None  # (a cycle: the caller searches per edge)
