"""Executor speed: simulating 100,000 tasks, exhaustive exploration of 1,000,000 states,
partial-order reduction on a DDP-like program, and confirming the witnesses of many race
findings.

Targets (issue: executor): simulate 100,000 tasks in under 5 s; explore 1,000,000 states in
under 60 s. Printed as measured CPU seconds / target (below 1.0 meets it); wall seconds in
brackets, since other load on the machine inflates them. Confirmation has no target: it
prints `confirm_all` (one replay shared by the races read off one run) against `confirm`
one finding at a time, as a ratio. `--many` also confirms the 3,000-3,600 races of a
program of three threads of 100 random statements (bench_smt_scale.py's rand3x100-4, decided
first with a 60 s budget on two workers, untimed): one by one, in one process, and in two
worker processes (wall seconds, as `check` waits for them).

    python bench/bench_executor.py [--many]
"""

from __future__ import annotations

import pathlib
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests"))

from checker import smt  # noqa: E402
from checker.executor.explore import explore  # noqa: E402
from checker.executor.replay import confirm, confirm_all  # noqa: E402
from checker.executor.simulate import simulate  # noqa: E402
from checker.frontend import load_text  # noqa: E402
from test_executor_simulate import _many_tasks  # noqa: E402  (the spec the simulation test runs)
from test_executor_reduction import DDP  # noqa: E402  (two ranks x {main, hook}: an interleaved comm)

# Four host threads, each on its own stream with its own buffer: no step disables another,
# so the number of reachable states grows as the product of the threads' progress.
INTERLEAVINGS = "device d { compute 4 }\n" + "".join(
    f"buffer x{t} 1KiB on d\nstream s{t} on d\n" for t in range(4)
) + "".join(
    f"thread t{t} {{\n" + "".join(f"  s{t}: kernel k writes x{t}\n  host h{t}\n" for _ in range(6)) + "}\n"
    for t in range(4)
)

# One thread enqueues kernels on four streams over four buffers with no event between them:
# nearly every conflicting pair races, and the races are read off a few runs.
RACY = "device d { compute 4 }\n" + "".join(f"buffer b{k} 1KiB on d\n" for k in range(4)) + (
    "stream s[4] on d\nthread t {\n" + "".join(
        f"  s[{k % 4}]: kernel k{k} reads b{(k * 3) % 4} writes b{(k * 5 + 1) % 4}\n" for k in range(60)
    ) + "}\n")


def timed(work):
    wall, cpu = time.perf_counter(), time.process_time()
    result = work()
    return result, time.process_time() - cpu, time.perf_counter() - wall


def main() -> None:
    program = load_text(_many_tasks(100_000), "pipeline.sched", max_statements=200_000).program
    sim, cpu, wall = timed(lambda: simulate(program))
    print(f"simulate {len(program.tasks):,} tasks: {cpu:.2f} s [{wall:.2f}]  target 5 s: ratio {cpu / 5:.2f}"
          f"  (makespan {sim.makespan / 1e6:.1f} ms)")
    program = load_text(INTERLEAVINGS, "interleavings.sched").program
    result, cpu, wall = timed(lambda: explore(program, max_states=1_000_000, reduce=False))
    print(f"explore {result.states:,} states (complete: {result.complete}): {cpu:.2f} s [{wall:.2f}]"
          f"  target 60 s: ratio {cpu / 60:.2f}")
    for iterations in (1, 2, 3, 4):
        program = load_text(DDP.replace("ITERATIONS", str(iterations)), f"ddp{iterations}.sched").program
        result, cpu, wall = timed(lambda: explore(program))
        print(f"explore ddp{iterations} (reduced): {result.states:,} states, complete: {result.complete}, "
              f"{len(result.races)} races, {len(result.mismatches)} mismatches: {cpu:.2f} s [{wall:.2f}]")
    program = load_text(RACY, "racy.sched").program
    findings = [f for f in smt.analyze(program, workers=1) if f.witness is not None]
    single, one_cpu, one_wall = timed(lambda: [confirm(program, f) for f in findings])
    shared, all_cpu, all_wall = timed(lambda: list(confirm_all(program, findings)))
    same = [(c.ok, c.reason, c.detail) for c in single] == [(c.ok, c.reason, c.detail) for c in shared]
    print(f"confirm {len(findings):,} findings: one by one {one_cpu:.2f} s [{one_wall:.2f}], "
          f"shared replays {all_cpu:.2f} s [{all_wall:.2f}]: ratio {all_cpu / one_cpu:.2f}"
          f"  (same verdicts and details: {same})")
    if "--many" in sys.argv[1:]:
        confirm_many()


def confirm_many() -> None:
    """The confirmation of rand3x100-4's findings: one by one, `confirm_all` in this process,
    and `confirm_all` in two workers."""
    from bench_smt import make_spec

    program = load_text(make_spec(4, 3, 100, signals=True), "rand3x100-4.sched").program
    findings = [f for f in smt.analyze(program, total=60.0, workers=2) if f.witness is not None]
    steps = sum(len(f.witness.steps) for f in findings)
    single, one_cpu, one_wall = timed(lambda: [confirm(program, f) for f in findings])
    here, here_cpu, here_wall = timed(lambda: list(confirm_all(program, findings)))
    split, _, split_wall = timed(lambda: list(confirm_all(program, findings, workers=2)))
    same = [(c.ok, c.reason, c.detail) for c in single]
    print(f"confirm rand3x100-4's {len(findings):,} findings ({steps:,} witness steps): one by one "
          f"{one_cpu:.2f} s [{one_wall:.2f}], confirm_all {here_cpu:.2f} s [{here_wall:.2f}] (ratio "
          f"{here_cpu / one_cpu:.2f}), in two workers [{split_wall:.2f}] wall (ratio {split_wall / one_wall:.2f}); "
          f"same verdicts and details: {same == [(c.ok, c.reason, c.detail) for c in here]}, "
          f"{same == [(c.ok, c.reason, c.detail) for c in split]}")


if __name__ == "__main__":
    main()
