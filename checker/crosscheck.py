"""One backend's output checked by another, here rather than in either (backends never import
each other): an optimizer schedule replayed step by step by the executor."""

from __future__ import annotations

from checker.executor.replay import replay
from checker.ir import Program
from checker.optimize.schedule import Schedule


def replays(program: Program, schedule: Schedule) -> tuple[bool, str]:
    """Whether the executor accepts the schedule's steps as a legal, complete execution."""
    run = replay(program, schedule.witness)
    if not run.ok:
        return False, f"step {run.failed_at}: {run.reason}"
    if not run.finished:
        return False, "the replay left work unfinished"
    return True, "ok"
