"""What ran when: the one shape in which every backend hands out the times of an execution.

The simulation (nanoseconds), the replay of a witness (one unit per step) and the optimizer's
schedules (nanoseconds) each return a `Timing`: a flat tuple of `Interval`s that say which
part of which statement occupied its stream, engine unit or host thread from when to when.
They name no rows and format no labels; `checker/report/timeline.py` turns a `Timing` into the
lanes and slices that the chart and trace writers draw.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import NamedTuple


class Part(str, enum.Enum):
    """Which side of a statement an interval times."""

    TASK = "task"
    """A task on its stream (and on `Interval.unit` of its engine, when it took one)."""
    HOST = "host"
    """A host statement holding its thread: host work, a sync, a host free, an instant one."""
    LAUNCH = "launch"
    """The thread paying its device's launch cost to enqueue a task."""
    BLOCKED = "blocked"
    """The thread held until its pageable copy completes."""
    ENQUEUE = "enqueue"
    """The thread enqueueing a task, where that has no cost (an instant)."""


class TimeUnit(str, enum.Enum):
    NS = "ns"
    """Simulated or scheduled time in nanoseconds."""
    STEP = "step"
    """A replayed witness: step k happens at time k."""


class Interval(NamedTuple):
    """One part of one statement, from `start` to `end` (equal for an instant).

    A NamedTuple rather than a frozen dataclass: a simulation makes hundreds of thousands of
    these, and a tuple is several times cheaper to build.
    """

    statement: int
    part: Part
    start: int
    end: int
    unit: int | None = None
    """TASK: which unit of its engine it ran on; None when it took none."""


@dataclass(frozen=True, slots=True)
class Timing:
    """The times of one execution."""

    intervals: tuple[Interval, ...]
    unit: TimeUnit
    end: int
    """When the execution ends (the makespan, or the number of steps)."""
    streams: bool = True
    """Tasks ran in their streams' order. False for the overlap bound, which drops stream
    order: its tasks belong on the engine units they ran on, not on stream rows."""
