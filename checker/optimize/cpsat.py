"""The minimum makespan of a timed model with OR-Tools CP-SAT (optional: `streamproof[cpsat]`).

The same model as the Z3 search (`search.py`), written for a constraint solver with scheduling
propagators: one integer time per node (an `end` node is its start plus its duration), one
constraint per edge, a fixed-size interval per engine use, NoOverlap on single-unit engines and
Cumulative on the others, and the makespan (at least every last node) minimized. Times are
divided by the greatest common divisor of all durations first, as in the Z3 search.

Bounds come from a `Shared` (see `shared.py`): each node's domain is [head, best - tail] with
`best` the incumbent's makespan, the proven lower bound is a constraint on the makespan, and the
incumbent's times are given as a hint. Every schedule CP-SAT reports is offered to the `Shared`
(which validates it before keeping it) and every rise of its objective bound is offered as a
proven lower bound. The search stops when the bounds meet, whoever raised them.

`available()` tells whether OR-Tools is installed; nothing else here is used without it.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass

from checker.optimize import core
from checker.optimize.model import TimedModel
from checker.optimize.shared import Shared

WORKERS = 2
"""CP-SAT workers: one full search and one of neighbourhood searches. On 2 cores, 2 proved
more of bench/bench_optimize.py's specs, and sooner, than 1, 4 or 8 (see bench/README.md)."""
SEED = 0
"""CP-SAT's random seed: runs that finish are reproducible (a time limit is not)."""
RESTARTS = 3
"""Restarts from another solver's better schedule, at most, per run."""


def available() -> bool:
    """Whether OR-Tools is installed (found without importing it: the import takes a second,
    paid only when CP-SAT runs; a broken installation fails there and leaves Z3's result)."""
    import importlib.util

    try:
        return importlib.util.find_spec("ortools") is not None
    except (ImportError, ValueError):
        return False


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a CP-SAT run ended; what it found is in the `Shared`."""

    status: str
    """`OPTIMAL`, `FEASIBLE`, `INFEASIBLE`, `UNKNOWN`, `MODEL_INVALID`, or `SKIPPED`."""
    reason: str
    """`proved by cpsat`, `timeout`, `stopped`, `cpsat gave up: ...`."""
    seconds: float = 0.0


class Run:
    """CP-SAT against a `Shared` until the bounds meet, CP-SAT proves, or the deadline;
    `stop()` ends it from any thread.

    A better schedule from another solver cannot enter a running CP-SAT search: when one
    arrives that beats every schedule CP-SAT has found, the search restarts from it (the new
    makespan as its upper bound and hint, the current lower bound), at most `restarts` times.
    """

    def __init__(self, model: TimedModel, shared: Shared, unit: int,
                 workers: int = WORKERS, seed: int = SEED, g: core.Graph | None = None,
                 restarts: int | None = None):
        self.model, self.shared, self.unit = model, shared, unit
        self.workers, self.seed = workers, seed
        self.g = g or core.graph(model)
        self.restarts = RESTARTS if restarts is None else restarts
        self._solver = None
        self._lock = threading.Lock()
        self._stopped = False
        self._restart = False
        self._own = None
        """The best makespan this run's searches have found (or started from)."""
        self.solves = 0
        self.searching = threading.Event()
        """Set once CP-SAT searches (its model built: it no longer needs the GIL) or gave up."""

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            if self._solver is not None:
                self._solver.stop_search()

    def _news(self) -> None:
        if self.shared.done.is_set():
            self.stop()
            return
        own = self._own
        if own is not None and self.shared.span < own and self.solves <= self.restarts:
            with self._lock:
                if self._solver is not None and not self._restart:
                    self._restart = True
                    self._solver.stop_search()

    def solve(self, deadline: float) -> Outcome:
        started = time.monotonic()
        self.shared.listen(self._news)
        try:
            while True:
                status, reason = self._solve(deadline)
                if not self._restart or self._stopped or self.shared.done.is_set():
                    break
                self._restart = False
        finally:
            self.shared.unlisten(self._news)
            self.searching.set()
        return Outcome(status, reason, time.monotonic() - started)

    def _solve(self, deadline: float) -> tuple[str, str]:
        from ortools.sat.python import cp_model

        model, unit, shared = self.model, self.unit, self.shared
        times, span, lower = shared.snapshot()
        if lower >= span:
            return "SKIPPED", "bounds met"
        self._own = span
        hi = span // unit
        lo = -(-lower // unit)
        head, tail = core.heads(self.g), core.tails(self.g)
        m = cp_model.CpModel()
        var: dict[int, object] = {}
        for node in model.nodes:
            if node.anchor is None:
                v = node.index
                top = hi - tail[v] // unit
                var[v] = m.new_int_var(head[v] // unit, max(head[v] // unit, top), f"t{v}")

        def at(v: int):
            node = model.nodes[v]
            if node.anchor is not None:
                return var[node.anchor] + node.offset // unit
            return var[v]

        for u, v, w in model.edges:
            m.add(at(v) >= at(u) + w // unit)
        makespan = m.new_int_var(min(lo, hi), hi, "makespan")
        for v in range(len(model.nodes)):
            if not self.g.succs[v]:
                m.add(makespan >= at(v))
        intervals: list[list] = [[] for _ in model.resources]
        for node in model.nodes:
            for r, d in node.uses:
                intervals[r].append(m.new_fixed_size_interval_var(var[node.index], d // unit,
                                                                  f"i{node.index}_{r}"))
        for res, items in zip(model.resources, intervals):
            if not items:
                continue
            if res.capacity == 1:
                m.add_no_overlap(items)
            else:
                m.add_cumulative(items, [1] * len(items), res.capacity)
        m.minimize(makespan)
        for v, x in var.items():
            m.add_hint(x, times[v] // unit)
        m.add_hint(makespan, hi)

        solver = cp_model.CpSolver()
        params = solver.parameters
        params.num_workers = self.workers
        params.random_seed = self.seed
        params.log_search_progress = False
        params.catch_sigint_signal = False  # (^C is Python's: the command stops with 130, not CP-SAT's search alone)
        nodes = model.nodes
        order = [n.index for n in nodes if n.anchor is None]
        anchored = [(n.index, n.anchor, n.offset) for n in nodes if n.anchor is not None]
        variables = [var[v] for v in order]
        run = self

        def convert(values) -> tuple[int, ...]:
            out = [0] * len(nodes)
            for v, value in zip(order, values):
                out[v] = int(value) * unit
            for v, a, off in anchored:
                out[v] = out[a] + off
            return tuple(out)

        def found(times: tuple[int, ...]) -> None:
            span = max(times, default=0)
            if run._own is None or span < run._own:
                run._own = span
            shared.offer(times, "cpsat")

        class Found(cp_model.CpSolverSolutionCallback):
            def on_solution_callback(inner) -> None:  # noqa: N805 - CP-SAT's callback name
                found(convert([inner.value(x) for x in variables]))

        def bound(value: float) -> None:
            shared.prove(int(math.ceil(value - 1e-6)) * unit, "cpsat")

        solver.best_bound_callback = bound
        with self._lock:
            if self._stopped or shared.done.is_set():
                return "SKIPPED", "stopped"
            remaining = deadline - time.monotonic()
            if remaining <= 0.01:
                return "SKIPPED", "timeout"
            params.max_time_in_seconds = remaining
            self._solver = solver
            self.solves += 1
        self.searching.set()
        status = solver.solve(m, Found())
        with self._lock:
            self._solver = None
        name = solver.status_name(status)
        if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            found(convert([solver.value(x) for x in variables]))
            if status == cp_model.OPTIMAL:
                shared.prove(int(round(solver.objective_value)) * unit, "cpsat")
                return name, "proved by cpsat"
            shared.prove(int(math.ceil(solver.best_objective_bound - 1e-6)) * unit, "cpsat")
        if status == cp_model.INFEASIBLE:
            # the incumbent satisfies every constraint: only a bug gets here; trust nothing
            return name, "cpsat gave up: it found the incumbent's bounds infeasible"
        if status == cp_model.MODEL_INVALID:
            return name, f"cpsat gave up: {solver.solution_info() or 'invalid model'}"
        if self._stopped:
            return name, "stopped"
        return name, "timeout"
