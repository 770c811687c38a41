"""Where two backends meet, here rather than in either (backends never import each other):
an optimizer schedule replayed step by step by the executor, the optimizer told the
executor's simulated makespan of the program as written, and a synthesized spec's makespan
bound set to what the executor's run of it reaches."""

from __future__ import annotations

from checker.executor.replay import replay
from checker.executor.simulate import Simulation, simulate
from checker.ir import Program
from checker.optimize import OptimizeResult, emit, optimize
from checker.optimize.schedule import Schedule


def simulated_makespan(simulation: Simulation) -> int | None:
    """What the optimizer takes as the program's makespan as written (None: it deadlocks)."""
    return None if simulation.deadlocked else int(simulation.makespan)


def optimize_as_written(program: Program, **options) -> OptimizeResult:
    """`optimize` with the simulated makespan of the program as written."""
    return optimize(program, simulated=simulated_makespan(simulate(program)), **options)


def replays(program: Program, schedule: Schedule) -> tuple[bool, str]:
    """Whether the executor accepts the schedule's steps as a legal, complete execution."""
    run = replay(program, schedule.witness)
    if not run.ok:
        return False, run.reason
    if not run.finished:
        return False, "the replay left work unfinished"
    return True, "ok"


SHUFFLED_UP_TO = 20_000
"""Statements past which no shuffled runs are tried: one run and its replay may then take
longer than the time they are given, which is read only between runs."""


def shortest_shuffled_run(program: Program, seconds: float, tries: int = 200) -> int | None:
    """The shortest makespan among simulations that take threads and stream heads in random
    orders (seeds 0, 1, ...; every other one interleaving the threads statement by statement),
    each one replayed by the executor as a complete execution; None
    when none finished. For `expect makespan` on a program with a choice the optimizer cannot
    model (threads racing for a stream, a flag, a notify): any execution that ends by the
    bound meets it."""
    import time

    if len(program.statements) > SHUFFLED_UP_TO:
        return None
    deadline = time.monotonic() + seconds
    best = None
    for seed in range(tries):
        if time.monotonic() > deadline:
            break
        run = simulate(program, shuffle=seed, interleave=seed % 2 == 1)
        if run.deadlocked or (best is not None and run.makespan >= best):
            continue
        checked = replay(program, run.steps)
        if checked.ok and checked.finished:
            best = int(run.makespan)
    return best


def guided_run(program: Program, issued: tuple[int, ...]) -> int | None:
    """The makespan of the run in time whose threads step in the order `issued` (statements
    in the order an execution issues them, `simulate`'s `guide`), replayed by the executor as
    a complete execution; None when it does not finish."""
    run = simulate(program, guide=issued)
    if run.deadlocked:
        return None
    checked = replay(program, run.steps)
    return int(run.makespan) if checked.ok and checked.finished else None


def emit_as_run(program: Program, result: OptimizeResult) -> str:
    """`emit`'s spec, its `expect makespan` bound the makespan of the spec run in time
    (`simulate`: contended engines to the higher priority, no engine left idle for a task
    about to become ready), where that exceeds the minimum its lanes allow: `check` holds the
    bound to that run. Raises what `emit` raises."""
    import re

    from checker.frontend import load_text
    from checker.spec_text import duration_text

    text = emit(program, result)
    loaded = load_text(text, "<emitted>")
    if loaded.program is None:
        return text
    run = simulate(loaded.program)
    bound = result.bound
    if run.deadlocked or bound is None or run.makespan <= bound:
        return text
    ran = duration_text(int(run.makespan))
    text = re.sub(r"^expect makespan <= \S+$", f"expect makespan <= {ran}", text, count=1, flags=re.M)
    return text.replace('spec "', f"# Run in time (`simulate`), it takes {run.makespan / 1e6:g} ms: a runtime holds "
                                   "no engine back for the order the minimum needs.\n" + 'spec "', 1)
