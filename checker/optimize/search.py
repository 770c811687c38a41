"""The minimum makespan of a timed model: a Z3 search between a lower and an upper bound.

The one place in the optimizer that calls `check()`. The search starts from a greedy list
schedule (upper bound) and the best instant lower bound, and stops as soon as they meet.
Otherwise it asks Z3, under an assumption literal, for a schedule of makespan at most M:
`sat` gives a better schedule (validated before it is kept), `unsat` raises the proven lower
bound to M + 1, and a spent budget ends the search with what it has. Times are divided by
the greatest common divisor of all durations first: optimal schedules are made of them.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable

import z3

from checker.optimize import core
from checker.optimize.model import TimedModel, ancestors


@dataclass(frozen=True, slots=True)
class Progress:
    """What the search knows now (ns): shown while it runs."""

    phase: str
    incumbent: int
    lower: int


@dataclass(frozen=True, slots=True)
class SearchResult:
    """The best schedule found and the best proven lower bound (ns)."""

    times: tuple[int, ...]
    makespan: int
    lower: int
    optimal: bool
    reason: str
    """`bounds met`, `proved by z3`, `timeout`, `z3 gave up: ...`."""
    probes: int = 0


def _scale(model: TimedModel) -> int:
    g = 0
    for _, _, w in model.edges:
        g = math.gcd(g, w)
    for node in model.nodes:
        g = math.gcd(g, node.offset)
        for _, d in node.uses:
            g = math.gcd(g, d)
    return g or 1


class _Encoding:
    """Z3 variables and constraints for 'a schedule of makespan <= M exists'."""

    def __init__(self, model: TimedModel, g: core.Graph, unit: int, head: list[int]):
        self.model = model
        self.unit = unit
        self.solver = z3.SolverFor("QF_LIA")
        nodes = model.nodes
        self.var: dict[int, z3.ArithRef] = {}
        for node in nodes:
            if node.anchor is None:
                self.var[node.index] = z3.Int(f"t{node.index}")

        def at(v: int):
            node = nodes[v]
            if node.anchor is not None:
                return self.var[node.anchor] + node.offset // unit
            return self.var[v]

        self.at = at
        s = self.solver
        self.makespan = z3.Int("makespan")
        for v, x in self.var.items():
            s.add(x >= head[v] // unit)
        for u, v, w in model.edges:
            s.add(at(v) >= at(u) + w // unit)
        for v in range(len(nodes)):
            if not g.succs[v]:
                s.add(self.makespan >= at(v))
        anc = ancestors(model)
        ends_of: dict[int, list[tuple[int, int]]] = {}
        for node in nodes:
            if node.anchor is not None:
                ends_of.setdefault(node.anchor, []).append((node.index, node.offset))

        def ordered(a: int, da: int, b: int) -> bool:
            return any(off >= da and anc[b] >> e & 1 for e, off in ends_of.get(a, ()))

        for res, jobs in zip(model.resources, core.resource_jobs(model)):
            if res.capacity == 1:
                for i, (a, da) in enumerate(jobs):
                    for b, db in jobs[i + 1:]:
                        if a == b or ordered(a, da, b) or ordered(b, db, a):
                            continue
                        s.add(z3.Or(self.var[b] >= self.var[a] + da // unit,
                                    self.var[a] >= self.var[b] + db // unit))
            else:
                for i, (a, da) in enumerate(jobs):
                    overlaps = []
                    for j, (b, db) in enumerate(jobs):
                        if i == j or a == b or ordered(a, da, b) or ordered(b, db, a):
                            continue
                        o = z3.Bool(f"o{i}_{j}_{res.index}")
                        s.add(z3.Implies(z3.And(self.var[b] <= self.var[a],
                                                self.var[a] < self.var[b] + db // unit), o))
                        overlaps.append(o)
                    same = sum(1 for b, _ in jobs if b == a) - 1
                    room = res.capacity - 1 - same
                    if len(overlaps) > room:
                        s.add(z3.AtMost(*overlaps, room))

    def times(self, m: z3.ModelRef) -> tuple[int, ...]:
        out = []
        for node in self.model.nodes:
            if node.anchor is None:
                out.append(m.eval(self.var[node.index], model_completion=True).as_long() * self.unit)
            else:
                out.append(None)
        for node in self.model.nodes:
            if node.anchor is not None:
                out[node.index] = out[node.anchor] + node.offset
        return tuple(out)


def _hint(enc: _Encoding, times) -> None:
    """Start Z3's search from a known schedule (initial values guide its phase choices)."""
    for v, x in enc.var.items():
        enc.solver.set_initial_value(x, times[v] // enc.unit)


def minimize(model: TimedModel, phase: str, deadline: float,
             progress: Callable[[Progress], None] | None = None,
             rlimit: int | None = None, extra_lower: int = 0,
             seed_times: tuple[int, ...] | None = None) -> SearchResult:
    """The minimum makespan of `model`, or the best found and proven by `deadline`."""
    g = core.graph(model)
    bound = core.lower_bound(model, g)
    lower = max(bound.best, extra_lower)
    budget = max(0.0, min(1.0, (deadline - time.monotonic()) / 20))
    best = core.greedy(model, g, budget=budget, target=lower)
    if seed_times is not None and core.validate(model, seed_times) is None:
        if max(seed_times, default=0) < max(best, default=0):
            best = tuple(seed_times)
    best_span = max(best, default=0)

    def tell() -> None:
        if progress is not None:
            progress(Progress(phase, best_span, lower))

    tell()
    if lower >= best_span:
        return SearchResult(best, best_span, best_span, True, "bounds met")
    unit = _scale(model)
    head = core.heads(g)
    try:
        enc = _Encoding(model, g, unit, head)
    except z3.Z3Exception as exc:  # pragma: no cover - defensive
        return SearchResult(best, best_span, lower, False, f"z3 gave up: {exc}")
    _hint(enc, best)
    lo = -(-lower // unit)
    hi = best_span // unit
    probes = 0
    reason = "timeout"
    first = True
    while lo < hi:
        remaining = deadline - time.monotonic()
        if remaining <= 0.01:
            reason = "timeout"
            break
        probe = lo if first else (lo + hi) // 2
        cap = remaining * 0.25 if first and hi - lo > 1 else remaining
        first = False
        lit = z3.Bool(f"at_most_{probe}")
        enc.solver.add(z3.Implies(lit, enc.makespan <= probe))
        enc.solver.set("timeout", max(1, int(cap * 1000)))
        if rlimit is not None:
            enc.solver.set("rlimit", rlimit)
        probes += 1
        verdict = enc.solver.check(lit)
        if verdict == z3.sat:
            times = enc.times(enc.solver.model())
            if core.validate(model, times) is not None:
                reason = "z3 gave an invalid schedule"
                break
            span = max(times, default=0)
            if span < best_span:
                best, best_span = times, span
                _hint(enc, best)
            hi = min(hi, span // unit, probe)
        elif verdict == z3.unsat:
            lo = probe + 1
            lower = max(lower, lo * unit)
        else:
            why = enc.solver.reason_unknown()
            if probe == lo and lo + 1 < hi and why in ("timeout", "canceled") and cap < remaining:
                tell()
                continue  # the first, optimistic probe only had a share of the budget
            reason = "timeout" if why in ("timeout", "canceled") else f"z3 gave up: {why}"
            break
        tell()
    if lo >= hi:
        return SearchResult(best, best_span, best_span, True, "proved by z3", probes)
    return SearchResult(best, best_span, min(lower, best_span), False, reason, probes)


def feasible(model: TimedModel, limit: int, timeout: float = 10.0) -> bool | None:
    """Whether the Z3 encoding admits a schedule of makespan <= limit (None: unknown).
    Bypasses every heuristic; tests compare it against brute force."""
    g = core.graph(model)
    unit = _scale(model)
    enc = _Encoding(model, g, unit, core.heads(g))
    enc.solver.add(enc.makespan <= limit // unit)
    enc.solver.set("timeout", int(timeout * 1000))
    verdict = enc.solver.check()
    if verdict == z3.sat:
        return core.validate(model, enc.times(enc.solver.model())) is None and True
    if verdict == z3.unsat:
        return False
    return None
