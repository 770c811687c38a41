"""The minimum makespan of a timed model: a Z3 search between a lower and an upper bound.

The one place in the optimizer that calls `check()`. The search starts from a greedy list
schedule (upper bound) and the best instant lower bound (critical path, engine energy in time
windows), and stops as soon as they meet. Otherwise it asks Z3, always under assumption
literals on one incremental solver, whether a schedule of makespan at most M exists:

1. M = the lower bound, with a small share of the budget (it is often the optimum);
2. large-neighbourhood search: M = incumbent - 1 with the engine orders of the incumbent kept
   as assumptions except among a window of jobs; the window grows when neighbourhoods are
   refuted and shrinks when they time out; a window of every job is a full proof;
3. binary search between the bounds with what is left.

`sat` gives a better schedule (validated before it is kept), `unsat` of a full probe raises the
proven lower bound, a spent budget ends the search with what it has. Times are divided by the
greatest common divisor of all durations first: optimal schedules are made of them. The
incumbent's times are given to Z3 as initial values.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable

import z3

from checker.optimize import core
from checker.optimize.model import TimedModel, ancestors
from checker.optimize.shared import Shared


@dataclass(frozen=True, slots=True)
class Progress:
    """What the search knows now (ns): shown while it runs."""

    phase: str
    incumbent: int
    lower: int

    def text(self) -> str:
        """One line for a progress display."""
        return (f"{self.phase}: best {self.incumbent / 1e6:.3f} ms, "
                f"proven >= {self.lower / 1e6:.3f} ms")


@dataclass(frozen=True, slots=True)
class SearchResult:
    """The best schedule found and the best proven lower bound (ns)."""

    times: tuple[int, ...]
    makespan: int
    lower: int
    optimal: bool
    reason: str
    """`bounds met`, `proved by z3`, `proved by cpsat`, `timeout`, `z3 gave up: ...`."""
    probes: int = 0
    schedule_by: str = ""
    """What found the schedule: `greedy`, `seed`, `z3` or `cpsat`."""
    lower_by: str = ""
    """What proved the lower bound (when optimal, what proved optimality): `bounds`, `z3`,
    `cpsat`."""


MAX_PAIRS = 250_000
GREEDY_SHARE = 1 / 50
"""Of the time left, the share the greedy list schedules may take (at most GREEDY_SECONDS)."""
GREEDY_SECONDS = 0.1
LOWER_BOUND_SHARE = 0.1
"""Of the time left, the share of the first probe, at the lower bound (often the optimum)."""
NEIGHBOURHOOD_SHARE = 0.9
"""Of the time left after that probe, the share of the neighbourhood search (the rest, and
whatever it leaves, goes to the binary search that proves optimality)."""
MIN_PROBE_SECONDS = 0.01
"""Less time than this left: no further probe."""
MIN_NEIGHBOURHOOD_SECONDS = 0.05
NEIGHBOURHOOD_PROBE_SECONDS = 1.0
"""At most this long per neighbourhood probe."""
NEIGHBOURHOOD_JOBS = 16
"""Engine jobs freed by the first neighbourhood probe; the window grows by NEIGHBOURHOOD_GROWTH
after NEIGHBOURHOOD_FAILURES probes that found nothing, and shrinks (down to
MIN_NEIGHBOURHOOD_JOBS) after a probe that timed out."""
MIN_NEIGHBOURHOOD_JOBS = 6
NEIGHBOURHOOD_GROWTH = 1.5
NEIGHBOURHOOD_FAILURES = 4
"""Engine-task pairs (squared jobs per engine) beyond which the Z3 encoding is not built:
memory grows with them (about 0.7 GB at 360,000)."""


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
        # Written as SMT-LIB text and parsed once: much faster than building terms one by one
        # through the Python API.
        self.model = model
        self.unit = unit
        self.solver = z3.SolverFor("QF_LIA")
        # (^C is Python's, for the command to stop with 130: Z3's own handler would only cancel
        # the probe, and the search would go on; `portfolio` runs the search where it can stop it)
        self.solver.set("ctrl_c", False)
        nodes = model.nodes
        self.var: dict[int, z3.ArithRef] = {}
        text: list[str] = []

        def at(v: int) -> str:
            node = nodes[v]
            if node.anchor is not None:
                return f"(+ t{node.anchor} {node.offset // unit})"
            return f"t{v}"

        for node in nodes:
            if node.anchor is None:
                self.var[node.index] = z3.Int(f"t{node.index}")
                text.append(f"(declare-const t{node.index} Int)")
                text.append(f"(assert (>= t{node.index} {head[node.index] // unit}))")
        text.append("(declare-const makespan Int)")
        self.makespan = z3.Int("makespan")
        for u, v, w in model.edges:
            text.append(f"(assert (>= {at(v)} (+ {at(u)} {w // unit})))")
        for v in range(len(nodes)):
            if not g.succs[v]:
                text.append(f"(assert (>= makespan {at(v)}))")
        anc = ancestors(model)
        ends_of: dict[int, list[tuple[int, int]]] = {}
        for node in nodes:
            if node.anchor is not None:
                ends_of.setdefault(node.anchor, []).append((node.index, node.offset))

        def ordered(a: int, da: int, b: int) -> bool:
            return any(off >= da and anc[b] >> e & 1 for e, off in ends_of.get(a, ()))

        self.pairs: list[tuple[int, int, int, int, int]] = []
        """(resource, a, da, b, db) for every engine pair no order already separates."""
        self.before: dict[tuple[int, int], z3.BoolRef] = {}
        """(a, b) -> a literal that, when true, runs a before b."""
        for res, jobs in zip(model.resources, core.resource_jobs(model)):
            mine = []
            for i, (a, da) in enumerate(jobs):
                for b, db in jobs[i + 1:]:
                    if a != b and not ordered(a, da, b) and not ordered(b, db, a):
                        mine.append((res.index, a, da, b, db))
            self.pairs += mine
            if res.capacity == 1:
                for _, a, da, b, db in mine:
                    name = f"x{a}_{b}"
                    text.append(f"(declare-const {name} Bool)")
                    text.append(f"(assert (=> {name} (>= t{b} (+ t{a} {da // unit}))))")
                    text.append(f"(assert (=> (not {name}) (>= t{a} (+ t{b} {db // unit}))))")
                    x = z3.Bool(name)
                    self.before[(a, b)] = x
                    self.before[(b, a)] = z3.Not(x)
                continue
            for i, (a, da) in enumerate(jobs):
                overlaps = []
                for j, (b, db) in enumerate(jobs):
                    if i == j or a == b or ordered(a, da, b) or ordered(b, db, a):
                        continue
                    name = f"o{i}_{j}_{res.index}"
                    text.append(f"(declare-const {name} Bool)")
                    text.append(f"(assert (=> (and (<= t{b} t{a}) (< t{a} (+ t{b} {db // unit}))) {name}))")
                    overlaps.append(name)
                same = sum(1 for b, _ in jobs if b == a) - 1
                room = res.capacity - 1 - same
                if len(overlaps) > room:
                    if room <= 0:
                        text.extend(f"(assert (not {o}))" for o in overlaps)
                    else:
                        text.append(f"(assert ((_ at-most {room}) {' '.join(overlaps)}))")
        self.solver.from_string("\n".join(text))

    def precedence(self, a: int, da: int, b: int) -> z3.BoolRef:
        """A literal that, when assumed, runs a before b (made on first use)."""
        lit = self.before.get((a, b))
        if lit is None:
            lit = self.before[(a, b)] = z3.Bool(f"p{a}_{b}")
            self.solver.add(z3.Implies(lit, self.var[b] >= self.var[a] + da // self.unit))
        return lit

    def keep_orders(self, times, free: set[int]) -> list[z3.BoolRef]:
        """Assumptions that keep the engine orders of `times` except among the `free` jobs."""
        out = []
        for _, a, da, b, db in self.pairs:
            if a in free and b in free:
                continue
            if times[a] + da <= times[b]:
                out.append(self.precedence(a, da, b))
            elif times[b] + db <= times[a]:
                out.append(self.precedence(b, db, a))
        return out

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


def initial(model: TimedModel, g: core.Graph, deadline: float, extra_lower: int = 0,
            seed_times: tuple[int, ...] | None = None, extra_lower_by: str = "bounds") -> Shared:
    """The bounds every search starts from: the best instant lower bound (with `extra_lower`,
    proven elsewhere) rounded up to the time unit, and the better of a greedy list schedule
    and `seed_times` (when valid)."""
    unit = _scale(model)
    instant = core.lower_bound(model, g).best
    lower, lower_by = (instant, "bounds") if instant >= extra_lower else (extra_lower, extra_lower_by)
    lower = -(-lower // unit) * unit
    budget = max(0.0, min(GREEDY_SECONDS, (deadline - time.monotonic()) * GREEDY_SHARE))
    best, best_by = core.greedy(model, g, budget=budget, target=lower), "greedy"
    if seed_times is not None and core.validate(model, seed_times) is None:
        if max(seed_times, default=0) % unit:
            # a schedule of another model: left-justify it so its times are multiples of the unit
            again = core.serial_schedule(model, g, [-float(t) for t in seed_times])
            if core.validate(model, again) is None and max(again) <= max(seed_times):
                seed_times = tuple(again)
        if max(seed_times, default=0) < max(best, default=0):
            best, best_by = tuple(seed_times), "seed"
    return Shared(model, best, lower, best_by, lower_by)


def result_of(shared: Shared, reason: str, probes: int = 0) -> SearchResult:
    """The search result a `Shared` holds now (the lower bound capped at the makespan)."""
    times, span, lower = shared.snapshot()
    if lower >= span:
        by = shared.lower_by
        why = "bounds met" if by == "bounds" else f"proved by {by}"
        return SearchResult(times, span, span, True, why, probes, shared.times_by, by)
    return SearchResult(times, span, lower, False, reason, probes, shared.times_by, shared.lower_by)


def minimize(model: TimedModel, phase: str, deadline: float,
             progress: Callable[[Progress], None] | None = None,
             rlimit: int | None = None, extra_lower: int = 0,
             seed_times: tuple[int, ...] | None = None) -> SearchResult:
    """The minimum makespan of `model` with Z3 alone, or the best found and proven by `deadline`."""
    g = core.graph(model)
    shared = initial(model, g, deadline, extra_lower, seed_times)
    return Z3Search(model, phase, deadline, progress, rlimit, shared, g).run()


class Z3Search:
    """Bounds first; then an optimistic probe at the lower bound, large-neighbourhood search
    for better schedules (engine orders of the incumbent kept outside a window of jobs,
    as assumptions), and a binary search that proves.

    Works against a `Shared`: what it finds goes there, and before each probe it takes the
    better schedule and the higher lower bound another solver may have put there. `nudge()`
    (from another thread) interrupts a probe that such news made moot."""

    def __init__(self, model: TimedModel, phase: str, deadline: float,
                 progress: Callable[[Progress], None] | None, rlimit: int | None,
                 shared: Shared, g: core.Graph | None = None):
        self.model, self.phase, self.deadline = model, phase, deadline
        self.progress, self.rlimit = progress, rlimit
        self.g = g or core.graph(model)
        self.shared = shared
        self.best, self.span, self.lower = shared.snapshot()
        self.probes = 0
        self.limits: dict[int, z3.BoolRef] = {}
        self.back = None
        self.gb = None
        self.enc: _Encoding | None = None
        self.unit = _scale(model)
        self.lo = -(-self.lower // self.unit)
        self.hi = self.span // self.unit
        self.probing: int | None = None
        """The makespan (units) the running probe asks about."""
        self.moot = False
        """The running probe was interrupted: another solver answered its question."""
        self.stopped = False

    def tell(self) -> None:
        if self.progress is not None:
            _, span, lower = self.shared.snapshot()
            self.progress(Progress(self.phase, span, min(lower, span)))

    def remaining(self) -> float:
        if self.shared.done.is_set() or self.stopped:
            return 0.0
        return self.deadline - time.monotonic()

    def stop(self) -> None:
        """End the search soon (any thread): the running probe is interrupted."""
        self.stopped = True
        if self.probing is not None and self.enc is not None:
            self.moot = True
            self.enc.solver.interrupt()

    def pull(self) -> None:
        """Take the better schedule and the higher lower bound from the `Shared`."""
        times, span, lower = self.shared.snapshot()
        if span < self.span:
            self.best, self.span = times, span
            if self.enc is not None:
                _hint(self.enc, times)
        self.hi = min(self.hi, self.span // self.unit)
        if lower > self.lower:
            self.lower = lower
        self.lo = max(self.lo, -(-self.lower // self.unit))

    def proved(self, lo: int) -> None:
        """Z3 refuted every makespan below `lo` units."""
        self.lo = max(self.lo, lo)
        self.shared.prove(self.lo * self.unit, "z3")
        self.pull()

    def nudge(self) -> None:
        """Interrupt the running probe if the `Shared` already answers it (any thread)."""
        units = self.probing
        if units is None or self.enc is None:
            return
        _, span, lower = self.shared.snapshot()
        if self.shared.done.is_set() or span <= units * self.unit or lower > units * self.unit:
            self.moot = True
            self.enc.solver.interrupt()

    def at_most(self, units: int) -> z3.BoolRef:
        if units not in self.limits:
            lit = self.limits[units] = z3.Bool(f"at_most_{units}")
            self.enc.solver.add(z3.Implies(lit, self.enc.makespan <= units))
        return self.limits[units]

    def check(self, units: int, assumptions: list, cap: float):
        """'sat' (keeping a better schedule), 'unsat', 'moot' (answered meanwhile by the
        `Shared`) or an unknown reason."""
        solver = self.enc.solver
        solver.set("timeout", max(1, int(cap * 1000)))
        if self.rlimit is not None:
            solver.set("rlimit", self.rlimit)
        lit = self.at_most(units)
        self.moot = False
        self.probing = units
        self.pull()
        if units >= self.hi or units < self.lo or self.shared.done.is_set() or self.stopped:
            self.probing = None
            return "moot"
        self.probes += 1
        verdict = solver.check(lit, *assumptions)
        self.probing = None
        if verdict == z3.sat:
            times = self.enc.times(solver.model())
            if core.validate(self.model, times) is not None:
                return "z3 gave an invalid schedule"
            times = self.compact(times)
            self.shared.offer(times, "z3")
            self.hi = min(self.hi, max(times, default=0) // self.unit)
            self.pull()
            return "sat"
        if verdict == z3.unsat:
            return "unsat"
        if self.moot:
            return "moot"
        why = solver.reason_unknown()
        return "timeout" if why in ("timeout", "canceled") else f"z3 gave up: {why}"

    def compact(self, times: tuple[int, ...]) -> tuple[int, ...]:
        """Left-justify a solver schedule (list scheduling in its start order), then try
        forward-backward improvement; keep whichever valid schedule is shortest."""
        if self.back is None:
            self.back = core.reversed_model(self.model) or False
            self.gb = core.graph(self.back) if self.back else None
        best = times
        again = core.serial_schedule(self.model, self.g, [-float(t) for t in times])
        if again and core.validate(self.model, again) is None and max(again) < max(best):
            best = tuple(again)
        if self.back:
            for _ in range(3):
                improved = core.justify(self.model, self.g, self.back, self.gb, list(best))
                if core.validate(self.model, improved) is not None or max(improved) >= max(best):
                    break
                best = tuple(improved)
        return best

    def run(self) -> SearchResult:
        self.tell()
        if self.shared.optimal:
            return result_of(self.shared, "bounds met")
        size = sum(len(jobs) ** 2 for jobs in core.resource_jobs(self.model))
        if size > MAX_PAIRS:
            return result_of(self.shared, "too many engine tasks for the solver: list schedule "
                                          "and bounds only")
        try:
            enc = _Encoding(self.model, self.g, self.unit, core.heads(self.g))
        except z3.Z3Exception as exc:  # pragma: no cover - defensive
            return result_of(self.shared, f"z3 gave up: {exc}")
        self.pull()
        _hint(enc, self.best)
        self.enc = enc
        reason = "timeout"
        # 1. The lower bound is often the optimum: try it with a share of the budget.
        if self.lo < self.hi and self.remaining() > MIN_PROBE_SECONDS:
            cap = self.remaining() * LOWER_BOUND_SHARE
            verdict = self.check(self.lo, [], cap)
            if verdict == "unsat":
                self.proved(self.lo + 1)
            elif verdict not in ("sat", "timeout", "moot"):
                reason = verdict
            self.tell()
        # 2. Better schedules from neighbourhoods of the incumbent.
        if self.lo < self.hi and self.remaining() > MIN_NEIGHBOURHOOD_SECONDS:
            self.neighbourhoods(time.monotonic() + self.remaining() * NEIGHBOURHOOD_SHARE)
        # 3. Binary search between the bounds: what proves optimality.
        while True:
            self.pull()
            if self.lo >= self.hi:
                break
            if self.remaining() <= MIN_PROBE_SECONDS:
                reason = "timeout"
                break
            mid = (self.lo + self.hi) // 2
            verdict = self.check(mid, [], self.remaining())
            if verdict == "sat":
                self.hi = min(self.hi, mid)
            elif verdict == "unsat":
                self.proved(mid + 1)
            elif verdict != "moot":
                reason = verdict
                break
            self.tell()
        if self.lo >= self.hi and not self.shared.optimal:
            # Z3 closed the gap in its own units: the schedule is optimal
            self.shared.prove(self.lo * self.unit, "z3")
        return result_of(self.shared, reason, self.probes)

    def neighbourhoods(self, until: float) -> None:
        """Improve the incumbent: free the jobs of a window, keep every other engine order."""
        import random

        rng = random.Random(len(self.model.nodes))
        jobs = sorted({a for _, a, _, _, _ in self.enc.pairs} | {b for _, _, _, b, _ in self.enc.pairs})
        if not jobs:
            return
        size = min(len(jobs), NEIGHBOURHOOD_JOBS)
        failures = 0
        while time.monotonic() < until:
            self.pull()
            if self.lo >= self.hi or self.remaining() <= MIN_PROBE_SECONDS:
                return
            ordered = sorted(jobs, key=lambda v: self.best[v])
            start = rng.randrange(max(1, len(ordered) - size + 1))
            free = set(ordered[start:start + size])
            whole = len(free) == len(jobs)
            cap = min(NEIGHBOURHOOD_PROBE_SECONDS, until - time.monotonic())
            if cap <= MIN_PROBE_SECONDS:
                break
            verdict = self.check(self.hi - 1, [] if whole else self.enc.keep_orders(self.best, free), cap)
            if verdict == "sat":
                failures = 0
                self.tell()
            elif verdict == "unsat":
                if whole:
                    self.proved(self.hi)
                    return
                failures += 1
                if failures >= NEIGHBOURHOOD_FAILURES:
                    size, failures = min(len(jobs), int(size * NEIGHBOURHOOD_GROWTH) + 1), 0
            elif verdict == "timeout":
                size = max(MIN_NEIGHBOURHOOD_JOBS, int(size / NEIGHBOURHOOD_GROWTH))
            elif verdict != "moot":
                return


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
