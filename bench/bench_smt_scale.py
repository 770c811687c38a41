"""Scaling of the SMT engine: the program classes of its targets, with where the time goes.

Usage: python bench/bench_smt_scale.py [--only NAME ...] [--workers N] [--timeout 10] [--budget 300]
                                       [--end-to-end]
       python bench/bench_smt_scale.py --emit NAME   (print one generated spec)
       python bench/bench_smt_scale.py --scaling     (six loops at 1 to 1,000 iterations)

Targets (each printed with its measurement and the ratio measured / target; below 1 meets it):

* `loop4x10`: 4 host threads x 10 loop iterations sharing streams, events, flags and notifies,
  decided fully (no SP301) in under 30 s. Two kinds: the training loop below, and loops whose
  bodies are drawn at random (races, deadlocks, lost notifies on purpose).
* `rand3x100`: 3 host threads x 100 statements (bench_smt.py's random specs with flags and
  notifies, seeds 0-6), decided fully in under 60 s.
* `train10k`: a 10,000-statement two-thread training loop (a data loader and a trainer),
  decided within the default budget (300 s).

Not a target of the issue, a class it names: `workers16x10`, 16 copies of one worker thread
x 10 iterations (1,280 statements) whose tallies race, where the SMT engine asks one
race question per orbit of the thread symmetries (`--no-symmetry` asks every one, to compare,
also end to end), against 30 s. Likewise `ddp8`: two ranks, each a main thread and an
autograd hook thread calling one comm on one stream, 8 iterations, whose groups form by
enqueue order, against 30 s.

Not targets, the frontier around them: `rand3x50`, the same random specs at 3 x 50
statements, and `rand2x150`, the same 300 statements in two threads, both measured against
the same 60 s (where full decision ends today).

The training loop is what a data-loader thread, a compute thread and a communication thread
hand each other in a real step: loaders read batches into pinned staging buffers and copy
them onto the device on one shared copy stream (the two loaders alternate), the compute
stream waits for them with notifies and frees the slot with another, hands the gradients to
the communication thread with a snapshot event and a host notify, and waits for the reduced
gradients with a stream notify before the optimizer step; a flag event marks the weights
initialized. `--bug` variants drop one hand-off to show races being found.

Each spec is decided as `check` decides it: when the concrete runs leave many questions for
Z3, the exhaustive search tries first (`--explore-first`, default 20,000 states or 3 s, as
`check`), and Z3 goes on when it does not finish; `--explore-first 0` measures the SMT engine
alone.

For every spec it prints: statements, steps, the must-happen-before rounds, the race
candidates left for Z3, the questions asked (sat / unsat / unknown), CPU seconds per phase
(order + encoding, races, lifetimes, deadlock), the slowest query, and the total in CPU and
wall seconds. CPU seconds are those of this process and its workers (`--workers`), so other
load on the machine does not inflate them; wall seconds are shown in brackets.
"""

from __future__ import annotations

import argparse
import random
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from bench_smt import declarations, make_spec, random_statement  # noqa: E402
from checker.findings import FindingKind  # noqa: E402
from checker.frontend import load_text  # noqa: E402
from test_executor_reduction import DDP  # noqa: E402  (two ranks x {main, hook}: an interleaved comm)


def training_loop(iterations: int = 10, loaders: int = 2, comm_thread: bool = True,
                  bug: str | None = None) -> str:
    """A training step per iteration: `loaders` data-loader threads, a compute thread and,
    with `comm_thread`, a communication thread (else the compute thread reduces itself).
    `bug`: `consumed` (a loader refills a batch before compute read it), `reduced` (the
    optimizer step does not wait for the reduction)."""
    n = iterations
    lines = [
        'spec "training loop"',
        "device npu0 { compute 2 copy 2 comm 1 }",
        f"buffer staged[{loaders}] 4MiB on host pinned",
        f"buffer batch[{loaders}] 4MiB on npu0",
        "buffer act 8MiB on npu0",
        "buffer grad 8MiB on npu0",
        "buffer weights 16MiB on npu0",
        "stream h2d on npu0",
        "stream fwd on npu0",
        "stream comm on npu0",
        "event ready flag",
        "event grads_ev",
        "event reduced_ev",
        f"notify loaded[{loaders}]",
        f"notify consumed[{loaders}]",
        "notify grads_posted",
        "notify taken",
        "notify reduced",
    ]
    refill = "    h2d: copy batch[loader] <- staged[loader] 2ms"
    lines += [f"thread loader[{loaders}] {{", f"  for step in 0..{n} {{"]
    lines += ["    await consumed[loader]"] if bug != "consumed" else []
    lines += ["    host read_batch writes staged[loader] 1ms", refill,
              "    h2d: notify loaded[loader]", "  }", "}"]
    lines += ["thread compute {", "  fwd: kernel init writes weights 1ms", "  fwd: record ready"]
    lines += [f"  notify consumed[{w}]" for w in range(loaders)]
    lines += [f"  for step in 0..{n} {{", f"    for mb in 0..{loaders} {{",
              "      fwd: await loaded[mb]",
              "      fwd: kernel forward_backward reads batch[mb], weights, grad writes act, grad 4ms",
              "      fwd: notify consumed[mb]",
              "    }"]
    if comm_thread:
        lines += ["    fwd: record grads_ev", "    notify grads_posted", "    await taken"]
        lines += ["    fwd: await reduced"] if bug != "reduced" else []
    else:
        lines += ["    fwd: record grads_ev", "    comm: wait ready", "    comm: wait grads_ev",
                  "    comm: kernel allreduce reads grad writes grad 3ms", "    comm: record reduced_ev"]
        lines += ["    fwd: wait reduced_ev"] if bug != "reduced" else []
    lines += ["    fwd: kernel sgd reads grad writes weights 1ms", "  }", "}"]
    if comm_thread:
        lines += ["thread comm {", "  comm: wait ready", f"  for step in 0..{n} {{",
                  "    await grads_posted",
                  "    comm: wait grads_ev",
                  "    notify taken",
                  "    comm: kernel allreduce reads grad writes grad 3ms",
                  "    comm: notify reduced",
                  "  }", "}"]
    return "\n".join(lines) + "\n"


def random_loops(seed: int, threads: int = 4, iterations: int = 10, body: int = 4) -> str:
    """`threads` host threads, each a loop of `iterations` over a random body of `body`
    statements on shared streams, buffers, events (snapshot and flag) and a notify. Bodies
    index buffers and events by the loop variable sometimes, as double-buffered loops do."""
    rng = random.Random(seed)
    lines = declarations(events=2)
    kinds = ["kernel", "record", "wait", "sync", "host", "copy", "record_flag", "wait_flag", "notify", "await"]
    weights = [10, 4, 4, 1, 1, 1, 1, 1, 1, 1]

    def slot() -> str:
        return rng.choice(["i % 2", "(i + 1) % 2", "0", "1"])

    for t in range(threads):
        lines.append(f"thread worker{t} {{")
        lines.append(f"  for i in 0..{iterations} {{")
        for _ in range(body):
            kind = rng.choices(kinds, weights=weights)[0]
            lines.append("    " + random_statement(rng, kind, slot))
        lines.append("  }")
        lines.append("}")
    return "\n".join(lines) + "\n"


def ranks_loop(iterations: int = 10) -> str:
    """Two ranks, each a host thread driving its own device: a loader copy, a forward-backward
    kernel and an allreduce per iteration, double-buffered inputs. The allreduce waits for the
    kernel through an event the next iteration records again, so each iteration's allreduce
    races with the kernels of every later one (n(n-1)/2 instance pairs per rank), and both
    threads end with `sync all`, whose meaning depends on how far the other thread got: the
    program is nondeterministic and goes to the solver's pipeline, where every pair is
    answered from concrete runs and the executions they predict."""
    lines = ['spec "two ranks"']
    for r in range(2):
        lines += [f"device gpu{r} {{ compute 1 copy 1 comm 1 }}", f"buffer act{r}[2] 4MiB on gpu{r}",
                  f"buffer grad{r} 4MiB on gpu{r}", f"buffer host{r}[2] 4MiB on host pinned",
                  f"stream load{r} on gpu{r}", f"stream comp{r} on gpu{r}", f"stream nccl{r} on gpu{r}",
                  f"event loaded{r}[2]", f"event done{r}[2]", f"event posted{r}"]
    lines.append("comm world = { nccl0, nccl1 }")
    for r in range(2):
        lines += [f"thread rank{r} {{", f"  for i in 0..{iterations} {{", "    let b = i % 2",
                  f"    load{r}: wait done{r}[b]", f"    load{r}: copy act{r}[b] <- host{r}[b] 1ms",
                  f"    load{r}: record loaded{r}[b]", f"    comp{r}: wait loaded{r}[b]",
                  f"    comp{r}: kernel forward_backward reads act{r}[b] writes grad{r} 3ms",
                  f"    comp{r}: record done{r}[b]", f"    comp{r}: record posted{r}",
                  f"    nccl{r}: wait posted{r}", f"    nccl{r}: allreduce world grad{r} 2ms",
                  "  }", "  sync all", "}"]
    return "\n".join(lines) + "\n"


def freeing_loop(iterations: int = 10) -> str:
    """Two threads, each driving its own device; on the first, every iteration allocates a
    buffer, writes it, hands it to a kernel of another stream through an event and frees it
    with no wait for that kernel: each kernel races with the frees of its own and every later
    iteration and can still be running when its iteration's free takes effect (a use after
    free per iteration). `sync all` at the end makes the program nondeterministic."""
    lines = ['spec "freeing loop"']
    for r in range(2):
        lines += [f"device gpu{r} {{ compute 2 copy 1 }}", f"buffer tmp{r} 4MiB on gpu{r}",
                  f"stream a{r} on gpu{r}"]
    lines += ["buffer out0 4MiB on gpu0", "stream b0 on gpu0", "event e0"]
    lines += ["thread r0 {", f"  for i in 0..{iterations} {{", "    a0: alloc tmp0",
              "    a0: kernel produce writes tmp0 1ms", "    a0: record e0", "    b0: wait e0",
              "    b0: kernel consume reads tmp0 writes out0 1ms", "    a0: free tmp0", "  }",
              "  sync all", "}"]
    lines += ["thread r1 {", f"  for i in 0..{iterations} {{", "    a1: alloc tmp1",
              "    a1: kernel produce writes tmp1 1ms", "    a1: free tmp1", "  }", "  sync all", "}"]
    return "\n".join(lines) + "\n"


def workspace_loop(iterations: int = 10) -> str:
    """A loader thread fills two batch slots and a trainer thread takes them in turn
    (notifies both ways); each iteration the trainer allocates a workspace on its main
    stream, hands it to a loss kernel on a side stream through an event and frees it on the
    main stream without waiting for that kernel: a use after free per iteration, which the
    frees and allocs of every other iteration could hide from a slow lifetime check."""
    lines = ['spec "loader and trainer, workspace freed under a side stream"',
             "device d { compute 2 copy 1 }", "buffer host_batch[2] 4MiB on host pinned",
             "buffer batch[2] 4MiB on d", "buffer ws 8MiB on d", "buffer stats 1MiB on d",
             "stream load on d", "stream main on d", "stream side on d",
             "event loaded[2]", "event produced", "notify filled[2]", "notify emptied[2]"]
    lines += ["thread loader {", f"  for i in 0..{iterations} {{", "    let b = i % 2", "    await emptied[b]",
              "    load: copy batch[b] <- host_batch[b] 1ms", "    load: record loaded[b]",
              "    notify filled[b]", "  }", "}"]
    lines += ["thread trainer {", "  notify emptied[0]", "  notify emptied[1]", f"  for i in 0..{iterations} {{",
              "    let b = i % 2", "    await filled[b]", "    main: wait loaded[b]", "    main: alloc ws",
              "    main: kernel forward reads batch[b] writes ws 2ms", "    main: record produced",
              "    side: wait produced", "    side: kernel loss reads ws writes stats 1ms", "    main: free ws",
              "    sync main", "    notify emptied[b]", "  }", "  sync all", "}"]
    return "\n".join(lines) + "\n"


def handshake_loop(iterations: int = 10) -> str:
    """A producer and a consumer thread hand two slots back and forth with notifies; the
    consumer gives a slot back as soon as it has enqueued its kernel (not once the kernel has
    run), so the producer's next fill races with it, and a slot given back twice before the
    producer takes it loses a notify (a deadlock)."""
    lines = ['spec "handshake loop"', "device d { compute 2 copy 1 }", "buffer x[2] 1MiB on d",
             "buffer y 1MiB on d", "buffer h 1MiB on host pinned", "stream s on d", "stream t on d",
             "stream c on d", "notify ready[2]", "notify slot[2]", "event done"]
    lines += ["thread producer {", "  notify slot[0]", "  notify slot[1]", f"  for i in 0..{iterations} {{",
              "    let b = i % 2", "    await slot[b]", "    s: kernel fill writes x[b] 1ms",
              "    s: notify ready[b]", "  }", "}"]
    lines += ["thread consumer {", f"  for i in 0..{iterations} {{", "    let b = i % 2",
              "    t: await ready[b]", "    t: kernel use reads x[b] writes y 1ms", "    t: record done",
              "    c: wait done", "    c: copy h <- y 1ms", "    notify slot[b]", "  }", "  sync c", "}"]
    return "\n".join(lines) + "\n"


def shared_records(threads: int = 3, iterations: int = 10) -> str:
    """Threads that each write a slot on one shared stream, record one shared snapshot event
    after it, and wait for the event on a stream of their own before reading the slot: each
    thread's read follows its own write whichever record its wait binds to, and races with
    the other threads' writes of the slot."""
    lines = ["device d { compute 4 copy 1 }", f"buffer x[{iterations}] 4KiB on d", "stream s on d",
             f"stream t[{threads}] on d", "event e"]
    for t in range(threads):
        lines += [f"thread worker{t} {{", f"  for j in 0..{iterations} {{", f"    s: kernel w{t} writes x[j]",
                  "    s: record e", f"    t[{t}]: wait e", f"    t[{t}]: kernel r{t} reads x[j]", "  }", "}"]
    return "\n".join(lines) + "\n"


def flag_ping_pong(iterations: int = 15) -> str:
    """A producer and a consumer handing two flag events back and forth as semaphores (wait,
    reset, work, record the other side's flag): every round is ordered, no race."""
    return f"""device d {{ compute 2 }}
buffer x 1MiB on d
buffer y 1MiB on d
stream sp on d
stream sc on d
event full flag
event empty flag
thread prod {{
  sp: record empty
  for j in 0..{iterations} {{
    sp: wait empty
    sp: reset empty
    sp: kernel produce writes x 1ms
    sp: record full
  }}
  sync sp
}}
thread cons {{
  for j in 0..{iterations} {{
    sc: wait full
    sc: reset full
    sc: kernel consume reads x writes y 1ms
    sc: record empty
  }}
  sync sc
}}
"""


def two_producers(iterations: int = 10) -> str:
    """Two producer threads share one notify to the consumer and one back: one producer can
    take both acknowledgements of a round, and the other then waits forever (a lost notify).
    Few interleavings, many race candidates that the solver proves absent one at a time."""
    lines = ["device d { compute 3 }", "buffer a 1MiB on d", "buffer b 1MiB on d", "buffer c 1MiB on d",
             "stream sa on d", "stream sb on d", "stream sc on d", "notify ready", "notify ack"]
    for name, buffer, stream in (("pa", "a", "sa"), ("pb", "b", "sb")):
        lines += [f"thread {name} {{", f"  for j in 0..{iterations} {{", f"    {stream}: kernel w{buffer} writes {buffer} 1ms",
                  f"    {stream}: notify ready", f"    {stream}: await ack", "  }", f"  sync {stream}", "}"]
    lines += ["thread consumer {", f"  for j in 0..{iterations} {{", "    sc: await ready", "    sc: await ready",
              "    sc: kernel use reads a, b writes c 1ms", "    sc: notify ack", "    sc: notify ack", "  }",
              "  sync sc", "}"]
    return "\n".join(lines) + "\n"


def identical_workers(workers: int = 16, rounds: int = 10, bug: bool = True) -> str:
    """`workers` copies of one host thread (an inference worker: stage a batch, copy it in on
    the one shared copy stream, run it on its own stream, wait for it); with `bug`, every
    worker's tally kernel writes one shared statistics buffer, so each races with every
    other worker's. Any two workers are the same program with their buffers, streams and
    events swapped, so the SMT engine asks one question per orbit (`checker/symmetry.py`)."""
    n = workers
    tally = "writes stats" if bug else "reads stats"
    return "\n".join([
        'spec "identical workers"', "device npu0 { compute 4 copy 2 }",
        f"buffer staged[{n}] 4MiB on host pinned", f"buffer batch[{n}] 4MiB on npu0",
        f"buffer out[{n}] 4MiB on npu0", "buffer stats 1MiB on npu0", "buffer weights 16MiB on npu0",
        "stream h2d on npu0", f"stream work[{n}] on npu0", f"event copied[{n}]", f"event done[{n}]",
        f"thread worker[{n}] {{", f"  for step in 0..{rounds} {{",
        "    host read_batch writes staged[worker] 1ms",
        "    h2d: copy batch[worker] <- staged[worker] 2ms",
        "    h2d: record copied[worker]",
        "    work[worker]: wait copied[worker]",
        "    work[worker]: kernel infer reads batch[worker], weights writes out[worker] 3ms",
        f"    work[worker]: kernel tally reads out[worker] {tally} 1ms",
        "    work[worker]: record done[worker]",
        "    sync done[worker]", "  }", "}"]) + "\n"


def freeing_workers(workers: int = 16, rounds: int = 5, bug: bool = True) -> str:
    """`workers` copies of a host thread that allocates a batch each iteration, copies it in
    on the shared copy stream, runs a kernel on it on its own stream and frees it; with
    `bug`, the free does not wait for the kernel (a use after free per iteration, found by
    the runs and read off them: `Analysis.harvest_lifetimes`)."""
    n = workers
    lines = ['spec "freeing workers"', "device npu0 { compute 4 copy 2 }",
             f"buffer staged[{n}] 4MiB on host pinned", f"buffer batch[{n}] 4MiB on npu0", "buffer stats 1MiB on npu0",
             "stream h2d on npu0", f"stream work[{n}] on npu0", f"event copied[{n}]", f"event done[{n}]",
             f"thread worker[{n}] {{", f"  for step in 0..{rounds} {{", "    h2d: alloc batch[worker]",
             "    h2d: copy batch[worker] <- staged[worker] 2ms", "    h2d: record copied[worker]",
             "    work[worker]: wait copied[worker]",
             "    work[worker]: kernel infer reads batch[worker] writes stats 3ms",
             "    work[worker]: record done[worker]"]
    lines += [] if bug else ["    h2d: wait done[worker]"]
    return "\n".join(lines + ["    h2d: free batch[worker]", "  }", "}"]) + "\n"


def ddp_loop(iterations: int = 8) -> str:
    """Two ranks, each a main thread and an autograd hook thread calling one comm on one
    stream (`DDP` of tests/test_executor_reduction.py): which calls meet depends on the
    interleaving, decided by the solver's groups formed by enqueue order."""
    return DDP.replace("ITERATIONS", str(iterations))


def train10k() -> str:
    """Two threads (one loader, a trainer that also reduces): 770 steps of 13 statements."""
    return training_loop(770, loaders=1, comm_thread=False)


CASES = {
    "loop4x10-train": (lambda: training_loop(10), "loop4x10", 30.0),
    "loop4x10-train-bug": (lambda: training_loop(10, bug="consumed"), "loop4x10", 30.0),
    **{f"loop4x10-random{seed}": ((lambda seed=seed: random_loops(seed)), "loop4x10", 30.0)
       for seed in range(3)},
    "loop4x10-shared-records": (lambda: shared_records(4, 10), "loop4x10", 30.0),
    "loop4x10-flag-ping-pong": (lambda: flag_ping_pong(15), "loop4x10", 30.0),
    "loop4x10-two-producers": (lambda: two_producers(10), "loop4x10", 30.0),
    **{f"rand3x100-{seed}": ((lambda seed=seed: make_spec(seed, 3, 100, signals=True)), "rand3x100", 60.0)
       for seed in range(7)},
    "train10k": (train10k, "train10k", 300.0),
    **{f"rand3x50-{seed}": ((lambda seed=seed: make_spec(seed, 3, 50, signals=True)), "rand3x50", 60.0)
       for seed in range(4)},
    **{f"rand2x150-{seed}": ((lambda seed=seed: make_spec(seed, 2, 150, signals=True)), "rand2x150", 60.0)
       for seed in range(3)},
    "workers16x10": (identical_workers, "workers", 30.0),
    "freeing16x5": (freeing_workers, "workers", 30.0),
    "ddp8": (ddp_loop, "ddp", 30.0),
}


SCALING = {
    "train": (training_loop, 1, (1, 10, 100, 1000)),
    "ranks": (ranks_loop, 10, (1, 10, 100, 1000)),
    "freeing": (freeing_loop, 10, (1, 10, 100, 300, 1000)),
    "workspace": (workspace_loop, 10, (1, 10, 100, 300, 1000)),
    "handshake": (handshake_loop, 10, (1, 10, 60, 100)),
    "ddp": (ddp_loop, 1, (1, 8, 20, 50)),
}
"""The loops `--scaling` measures: name -> (spec of n iterations, the iterations whose cost
per iteration is "one iteration", the iterations measured). Only the training loop's single
iteration takes measurable time; the others' is read at 10 iterations."""


def scaling(timeout: float, budget: float, workers: int, only: list[str] | None = None) -> None:
    """Each loop at each of its SCALING iterations: CPU seconds, and the ratio to n times the
    cost of one iteration (below 1: the cost grows slower than the loop). The loops other
    than the training loop have racing instance pairs that grow with n * n, and so does their
    cost."""
    for name, (make, base, sizes) in SCALING.items():
        if only and name not in only:
            continue
        one = None
        for n in sizes:
            r = run_case(f"{name}-iter{n}", make(n), 0.0, timeout, budget, workers)
            one = r["cpu"] / n if n == base else one
            decided = "decided" if r["unknown"] == 0 else f"{r['unknown']} UNDECIDED"
            ratio = f"{r['cpu'] / (n * one):.3f}" if one else "-"
            print(f"{name}-iter{n}: {r['statements']} statements, {r['steps']} steps | findings "
                  f"{r['findings'] or 'none'} ({r['instances']} instance pairs"
                  f"{', ' + str(r['uncounted']) + ' more uncounted' if r['uncounted'] else ''}), {decided} | cpu: setup "
                  f"{r['setup']:.2f}s, total {r['cpu']:.2f}s [{r['wall']:.2f}s wall] | "
                  f"cpu / ({n} x one iteration) = {ratio}", flush=True)


def cpu_seconds() -> float:
    """CPU seconds of this process and of its finished workers."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def run_case(name: str, text: str, target: float, timeout: float, budget: float, workers: int,
             explore_first: int = 0) -> dict:
    """One spec as `check` decides it: the SMT engine, whose `shortcut` is the exhaustive
    search (`checker.analyze.search_first`) when `explore_first` > 0."""
    from checker import smt
    from checker.analyze import Options, search_first
    from checker.smt import stats

    program = load_text(text, name).program
    stats.reset()
    searched: list = []

    def shortcut(seconds):
        began = cpu_seconds()
        found = search_first(program, Options(budget=budget, explore_first=explore_first), seconds=seconds)
        searched.append((found is not None, cpu_seconds() - began))
        return found

    cpu, wall = cpu_seconds(), time.perf_counter()
    findings = smt.analyze(program, timeout=timeout, total=budget, workers=workers,
                           shortcut=shortcut if explore_first > 0 else None)
    cpu, wall = cpu_seconds() - cpu, time.perf_counter() - wall
    unknown = sum(f.instances for f in findings if f.kind is FindingKind.UNKNOWN)
    instances = sum(f.instances for f in findings if f.kind is FindingKind.RACE)
    # Instance pairs of races found that the budget left uncounted (not unknowns).
    uncounted = sum(f.undecided for f in findings if f.kind is FindingKind.RACE)
    # Questions left undecided: each unknown finding names one; "N were not asked" names N.
    undecided = sum(int(f.message.split()[0]) if (f.detail or {}).get("query") == "remaining questions"
                    else f.instances for f in findings if f.kind is FindingKind.UNKNOWN)
    kinds = {}
    for f in findings:
        kinds[f.kind.value] = kinds.get(f.kind.value, 0) + 1
    record = stats.snapshot()
    return {"name": name, "statements": len(program.statements), "cpu": cpu, "wall": wall,
            "engine": "search" if searched and searched[0][0] else "solver",
            "search": sum(seconds for _, seconds in searched),
            "target": target, "unknown": unknown, "instances": instances, "uncounted": uncounted, "undecided": undecided, "findings": kinds, **record}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="case names or prefixes (default: every case)")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=10.0)
    parser.add_argument("--budget", type=float, default=300.0)
    parser.add_argument("--emit", help="print the spec of one case and stop")
    parser.add_argument("--explore-first", type=int, default=20_000, metavar="N",
                        help="states of the exhaustive search before Z3, as `check --explore-first` "
                             "(default 20,000, as `check`; 0: the solver alone)")
    parser.add_argument("--end-to-end", action="store_true",
                        help="also time `streamproof check` on each case as a user runs it (a fresh process: "
                             "parse, decide, replay every witness, print the text report)")
    parser.add_argument("--no-symmetry", action="store_true",
                        help="ask every race question, also where threads are the same program "
                             "(`checker.smt.SYMMETRY` off; `check --no-symmetry` end to end), to compare")
    parser.add_argument("--scaling", action="store_true",
                        help="measure six loops (training, ranks, freeing, workspace, handshake, ddp; --only picks some) at growing "
                             "iterations and stop")
    args = parser.parse_args()
    if args.emit:
        print(CASES[args.emit][0](), end="")
        return
    if args.no_symmetry:
        from checker import smt

        smt.SYMMETRY = False
    if args.scaling:
        scaling(args.timeout, args.budget, args.workers, args.only)
        return
    chosen = [name for name in CASES
              if not args.only or any(name.startswith(prefix) for prefix in args.only)]
    worst: dict[str, tuple[float, str]] = {}
    for name in chosen:
        make, group, target = CASES[name]
        r = run_case(name, make(), target, args.timeout, args.budget, args.workers, args.explore_first)
        decided = "decided" if r["unknown"] == 0 else f"{r['undecided']} questions UNDECIDED"
        if r["engine"] == "search":
            print(f"{name}: {r['statements']} statements | runs, then the exhaustive search decided "
                  f"({r['search']:.2f}s cpu) | findings {r['findings'] or 'none'} | total {r['cpu']:.2f}s cpu [{r['wall']:.2f}s wall] -> ratio "
                  f"{r['cpu'] / target:.3f} (wall {r['wall'] / target:.3f})", flush=True)
        else:
            print(f"{name}: {r['statements']} statements, {r['steps']} steps, order {r['rounds']} rounds | "
                  f"{r['candidates']} race candidates ({r['symmetric']} more carried by symmetry), asked {r['sat']} sat + {r['unsat']} unsat + "
                  f"{r['unknowns']} unknown, slowest {r['slowest']:.2f}s | "
                  f"cpu: search {r['search']:.2f}s, setup {r['setup']:.2f}s, races {r['races']:.2f}s, "
                  f"lifetimes {r['lifetimes']:.2f}s, deadlock {r['deadlock']:.2f}s ({r['deadlock_how']}) | "
                  f"findings {r['findings'] or 'none'}, {decided} | "
                  f"total {r['cpu']:.2f}s cpu [{r['wall']:.2f}s wall] -> ratio {r['cpu'] / target:.3f} "
                  f"(wall {r['wall'] / target:.3f})",
                  flush=True)
        ratio = r["cpu"] / target if r["unknown"] == 0 else float("inf")
        wall = r["wall"] / target if r["unknown"] == 0 else float("inf")
        whole = None
        if args.end_to_end:
            seconds, status = end_to_end(make(), args)
            whole = seconds / target if r["unknown"] == 0 else float("inf")
            print(f"{name}: end to end, `streamproof check -j {args.workers}`: {seconds:.2f}s wall "
                  f"(exit status {status}) -> ratio {seconds / target:.3f}", flush=True)
        if ratio > worst.get(group, (-1.0, "", 0.0, None))[0]:
            worst[group] = (ratio, name, wall, whole)
    print()
    extra = " end to end / target |" if args.end_to_end else ""
    print(f"| target | worst case | ratio (cpu / target; inf: undecided) | wall / target ({args.workers} workers) |{extra}")
    print("|---|---|---|---|" + ("---|" if args.end_to_end else ""))
    for group, (ratio, name, wall, whole) in worst.items():
        print(f"| {group} | {name} | {ratio:.3f} | {wall:.3f} |" + (f" {whole:.3f} |" if whole is not None else ""))


def end_to_end(text: str, args) -> tuple[float, int]:
    """Wall seconds and exit status of `streamproof check` on the spec `text` in a fresh
    process, with the benchmark's timeout, budget, workers and search states, its text report
    written to a file: what a user waits for, where the table above counts the decision."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        spec = Path(folder) / "case.sched"
        spec.write_text(text)
        command = [sys.executable, "-m", "checker", "check", "--timeout", str(args.timeout), "--budget",
                   str(args.budget), "-j", str(args.workers), "--explore-first", str(args.explore_first),
                   *(["--no-symmetry"] if args.no_symmetry else []),
                   "-o", str(Path(folder) / "report.txt"), str(spec)]
        began = time.perf_counter()
        status = subprocess.run(command, cwd=Path(__file__).resolve().parent.parent).returncode
        return time.perf_counter() - began, status


if __name__ == "__main__":
    main()
