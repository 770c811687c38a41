"""Bounds shared by the solvers working on one timed model.

A `Shared` holds the best schedule found so far (validated before it is kept: a bad schedule
is discarded, never reported) and the best proven lower bound, each with the name of what
produced it (`greedy`, `seed`, `bounds`, `z3`, `cpsat`). Solvers offer what they find and read
what the others found; listeners hear of every improvement (a solver uses this to stop work
that another solver's result made moot). The two meet when the best makespan is at most the
lower bound: the schedule is then optimal and `done` is set.

Thread-safe: solvers may run concurrently.
"""

from __future__ import annotations

import threading
from typing import Callable

from checker.optimize import core
from checker.optimize.model import TimedModel


class Shared:
    """The best schedule and the best proven lower bound of one model (ns)."""

    def __init__(self, model: TimedModel, times, lower: int,
                 times_by: str = "greedy", lower_by: str = "bounds"):
        assert core.validate(model, times) is None, "the first schedule must be valid"
        self.model = model
        self._lock = threading.Lock()
        self.times: tuple[int, ...] = tuple(times)
        self.span: int = max(self.times, default=0)
        self.times_by = times_by
        self.lower: int = lower
        self.lower_by = lower_by
        self.done = threading.Event()
        self.rejected = 0
        """Schedules offered and discarded as invalid."""
        self._listeners: list[Callable[[], None]] = []
        if self.lower >= self.span:
            self.done.set()

    def listen(self, listener: Callable[[], None]) -> None:
        """Call `listener()` after every improvement (from the improving solver's thread)."""
        with self._lock:
            self._listeners.append(listener)

    def unlisten(self, listener: Callable[[], None]) -> None:
        with self._lock:
            if listener in self._listeners:
                self._listeners.remove(listener)

    def offer(self, times, who: str) -> bool:
        """Keep `times` if it is a valid schedule better than the best; True if kept."""
        times = tuple(times)
        span = max(times, default=0)
        if span >= self.span:
            return False
        if core.validate(self.model, times) is not None:
            with self._lock:
                self.rejected += 1
            return False
        with self._lock:
            if span >= self.span:
                return False
            self.times, self.span, self.times_by = times, span, who
            if self.lower >= self.span:
                self.done.set()
            listeners = list(self._listeners)
        for listener in listeners:
            listener()
        return True

    def prove(self, lower: int, who: str) -> bool:
        """Raise the proven lower bound to `lower`; True if it rose."""
        with self._lock:
            if lower <= self.lower:
                return False
            self.lower, self.lower_by = lower, who
            if self.lower >= self.span:
                self.done.set()
            listeners = list(self._listeners)
        for listener in listeners:
            listener()
        return True

    def snapshot(self) -> tuple[tuple[int, ...], int, int]:
        """(times, span, lower) read together."""
        with self._lock:
            return self.times, self.span, self.lower

    @property
    def optimal(self) -> bool:
        return self.lower >= self.span

    @property
    def proved_by(self) -> str | None:
        """What proved the best schedule optimal (the source of the lower bound), or None."""
        if not self.optimal:
            return None
        return self.lower_by
