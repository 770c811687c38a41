"""Where two backends meet, here rather than in either (backends never import each other):
an optimizer schedule replayed step by step by the executor, and the optimizer told the
executor's simulated makespan of the program as written."""

from __future__ import annotations

from checker.executor.replay import replay
from checker.executor.simulate import Simulation, simulate
from checker.ir import Program
from checker.optimize import OptimizeResult, optimize
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
        return False, f"step {run.failed_at}: {run.reason}"
    if not run.finished:
        return False, "the replay left work unfinished"
    return True, "ok"
