"""Fast facts about a timed model: heads and tails, lower bounds, greedy schedules, validation.

Times are per-node tuples aligned with `TimedModel.nodes`. An `end` node's time is its
anchor's time plus its offset. Nothing here calls a solver.
"""

from __future__ import annotations

import bisect
import random
import time
from dataclasses import dataclass

from checker.optimize.model import TimedModel
from checker.witness import StepKind


@dataclass(frozen=True, slots=True)
class Graph:
    """Adjacency of a model with `end` nodes wired to their anchors."""

    preds: tuple[tuple[tuple[int, int], ...], ...]
    succs: tuple[tuple[tuple[int, int], ...], ...]
    order: tuple[int, ...]


def graph(model: TimedModel) -> Graph:
    preds: list[list[tuple[int, int]]] = [[] for _ in model.nodes]
    succs: list[list[tuple[int, int]]] = [[] for _ in model.nodes]
    for u, v, w in model.edges:
        preds[v].append((u, w))
        succs[u].append((v, w))
    for node in model.nodes:
        if node.anchor is not None:
            preds[node.index].append((node.anchor, node.offset))
            succs[node.anchor].append((node.index, node.offset))
    from checker.optimize.model import topological

    order = topological(len(model.nodes), [(u, v, 0) for v, ps in enumerate(preds) for u, _ in ps])
    assert order is not None
    return Graph(tuple(map(tuple, preds)), tuple(map(tuple, succs)), tuple(order))


def heads(g: Graph) -> list[int]:
    """Earliest time of each node ignoring engines (longest path from the start)."""
    head = [0] * len(g.order)
    for v in g.order:
        for u, w in g.preds[v]:
            head[v] = max(head[v], head[u] + w)
    return head


def tails(g: Graph) -> list[int]:
    """Least time from each node to the makespan ignoring engines."""
    tail = [0] * len(g.order)
    for v in reversed(g.order):
        for u, w in g.succs[v]:
            tail[v] = max(tail[v], w + tail[u])
    return tail


@dataclass(frozen=True, slots=True)
class LowerBound:
    """`lower` as the report defines it, and the strongest bound known without search."""

    critical_path: int
    engine_load: int
    busiest: str | None
    energetic: int

    @property
    def reported(self) -> int:
        return max(self.critical_path, self.engine_load)

    @property
    def best(self) -> int:
        return max(self.critical_path, self.engine_load, self.energetic)


def resource_jobs(model: TimedModel) -> list[list[tuple[int, int]]]:
    """For each resource, the (start node, duration) pairs that occupy it."""
    jobs: list[list[tuple[int, int]]] = [[] for _ in model.resources]
    for node in model.nodes:
        for r, d in node.uses:
            jobs[r].append((node.index, d))
    return jobs


def lower_bound(model: TimedModel, g: Graph | None = None) -> LowerBound:
    g = g or graph(model)
    head, tail = heads(g), tails(g)
    critical = max((head[v] + tail[v] for v in g.order), default=0)
    load, busiest, energetic = 0, None, 0
    for res, jobs in zip(model.resources, resource_jobs(model)):
        if not jobs:
            continue
        work = sum(d for _, d in jobs)
        per_unit = -(-work // res.capacity)
        if per_unit > load:
            load, busiest = per_unit, res.name
        ends_tail = min(tail[v] - d for v, d in jobs)
        energetic = max(energetic, min(head[v] for v, _ in jobs) + per_unit + max(0, ends_tail))
    energetic = max(energetic, window_bound(model, head, tail))
    return LowerBound(critical, load, busiest, energetic)


def window_bound(model: TimedModel, head: list[int], tail: list[int]) -> int:
    """Engine energy in time windows: for jobs released by h that still need q after they
    end, the makespan is at least h + ceil(work / units) + q. The best h and q per engine."""
    best = 0
    for res, jobs in zip(model.resources, resource_jobs(model)):
        if not jobs:
            continue
        rows = [(head[v], max(0, tail[v] - d), d) for v, d in jobs]
        for h in sorted({r[0] for r in rows}):
            later = sorted((r for r in rows if r[0] >= h), key=lambda r: -r[1])
            work = 0
            for _, q, d in later:
                work += d
                best = max(best, h + -(-work // res.capacity) + q)
    return best


def makespan_of(model: TimedModel, times) -> int:
    return max(times, default=0)


def validate(model: TimedModel, times) -> str | None:
    """Why `times` is not a legal schedule of the model, or None."""
    if len(times) != len(model.nodes):
        return "wrong number of times"
    if any(t < 0 for t in times):
        return "negative time"
    for node in model.nodes:
        if node.anchor is not None and times[node.index] != times[node.anchor] + node.offset:
            return f"end of statement {node.statement} is not its start plus its duration"
    for u, v, w in model.edges:
        if times[v] < times[u] + w:
            return f"edge {u}->{v} (+{w}) violated"
    usage: list[list[tuple[int, int]]] = [[] for _ in model.resources]
    for node in model.nodes:
        for r, d in node.uses:
            usage[r].append((times[node.index] + d, -1))
            usage[r].append((times[node.index], 1))
    for res, points in zip(model.resources, usage):
        level = 0
        for _, delta in sorted(points):
            level += delta
            if level > res.capacity:
                return f"{res.name} over capacity"
    return None


class _Profile:
    """Busy intervals of each unit of one resource; finds the earliest gap."""

    def __init__(self, capacity: int):
        self.units: list[list[tuple[int, int]]] = [[] for _ in range(capacity)]

    def _free_for(self, unit: list[tuple[int, int]], t: int) -> int:
        """How long the unit stays free from t (0 if busy at t)."""
        i = bisect.bisect_right(unit, (t, float("inf")))
        if i > 0 and unit[i - 1][1] > t:
            return 0
        return unit[i][0] - t if i < len(unit) else 1 << 62

    def fit(self, t: int, durations: list[int]) -> list[int] | None:
        """Distinct units free for each duration from t (longest first), or None."""
        free = sorted(((self._free_for(u, t), k) for k, u in enumerate(self.units)), reverse=True)
        chosen = []
        for j, d in enumerate(sorted(durations, reverse=True)):
            if j >= len(free) or free[j][0] < d:
                return None
            chosen.append(free[j][1])
        return chosen

    def next_change(self, t: int) -> int:
        """The first interval end after t (where more units may become free). A unit's
        intervals do not overlap, so their ends are sorted as their starts are: only the one
        holding t, or else the first after it, can end first."""
        best = None
        for unit in self.units:
            i = bisect.bisect_right(unit, (t, float("inf")))
            if i > 0 and unit[i - 1][1] > t:
                end = unit[i - 1][1]
            elif i < len(unit):
                end = unit[i][1]
            else:
                continue
            if best is None or end < best:
                best = end
        return t + 1 if best is None else best

    def take(self, units: list[int], t: int, durations: list[int]) -> None:
        """Mark the units busy; an interval that touches its neighbours merges with them, so
        that work packed back to back is one interval to step over, not hundreds."""
        for k, d in zip(units, sorted(durations, reverse=True)):
            if d <= 0:
                continue
            unit = self.units[k]
            start, end = t, t + d
            i = bisect.bisect_left(unit, (start, end))
            if i < len(unit) and unit[i][0] == end:
                end = unit.pop(i)[1]
            if i > 0 and unit[i - 1][1] == start:
                i -= 1
                start = unit.pop(i)[0]
            unit.insert(i, (start, end))


def serial_schedule(model: TimedModel, g: Graph, priority: list[float]) -> list[int]:
    """Serial list scheduling: repeatedly place the ready node of highest priority at its
    earliest time with free engine units (insertion into gaps allowed)."""
    import heapq

    profiles = [_Profile(r.capacity) for r in model.resources]
    times = [0] * len(model.nodes)
    missing = [len(p) for p in g.preds]
    ready = [(-priority[v], v) for v in range(len(model.nodes)) if missing[v] == 0]
    heapq.heapify(ready)
    while ready:
        _, v = heapq.heappop(ready)
        node = model.nodes[v]
        t = 0
        for u, w in g.preds[v]:
            t = max(t, times[u] + w)
        if node.anchor is None and node.uses:
            demand: dict[int, list[int]] = {}
            for r, d in node.uses:
                demand.setdefault(r, []).append(d)
            while True:
                fits = {r: profiles[r].fit(t, ds) for r, ds in demand.items()}
                blocked = [r for r, f in fits.items() if f is None]
                if not blocked:
                    break
                t = min(profiles[r].next_change(t) for r in blocked)
            for r, ds in demand.items():
                profiles[r].take(fits[r], t, ds)
        times[v] = t
        for u, _ in g.succs[v]:
            missing[u] -= 1
            if missing[u] == 0:
                heapq.heappush(ready, (-priority[u], u))
    return times


def reversed_model(model: TimedModel) -> TimedModel | None:
    """The model run backwards in time (for justification), or None when its shape does not
    allow it (a collective with several ends, or a start step that others wait on)."""
    from dataclasses import replace

    ends: dict[int, list[int]] = {}
    for node in model.nodes:
        if node.anchor is not None:
            ends.setdefault(node.anchor, []).append(node.index)
    for node in model.nodes:
        if node.anchor is None and node.uses and len(ends.get(node.index, ())) != 1:
            return None
    for u, _, _ in model.edges:
        if model.nodes[u].kind is StepKind.START:
            return None
    nodes = list(model.nodes)
    for start, es in ends.items():
        if len(es) != 1:
            return None
        (end,) = es
        s, e = model.nodes[start], model.nodes[end]
        nodes[end] = replace(e, anchor=None, offset=0, uses=s.uses)
        nodes[start] = replace(s, anchor=end, offset=e.offset, uses=())
    edges = tuple((v, u, w) for u, v, w in model.edges)
    return replace(model, nodes=tuple(nodes), edges=edges)


def justify(model: TimedModel, g: Graph, back: TimedModel, gb: Graph, times) -> list[int]:
    """One forward-backward improvement pass: right-justify, then left-justify again."""
    mirrored = serial_schedule(back, gb, [float(t) for t in times])
    if not mirrored:
        return list(times)
    span_b = max(mirrored, default=0)
    right = [span_b - t for t in mirrored]
    return serial_schedule(model, g, [-float(t) for t in right]) or list(times)


GREEDY_SECONDS = 0.05
"""Default time for the randomized list schedules after the fixed rules."""
JITTER = (0.85, 0.3)
"""A randomized priority is the tail times (low + spread * a random number in [0, 1))."""
JUSTIFY_ROUNDS = 4
"""Left/right justification passes per list schedule (each keeps only an improvement)."""


def greedy(model: TimedModel, g: Graph | None = None, budget: float = GREEDY_SECONDS,
           seed: int = 0, target: int = 0) -> tuple[int, ...]:
    """The best of a few list schedules (longest tail first, then randomized), validated."""
    g = g or graph(model)
    tail = tails(g)
    head = heads(g)
    rng = random.Random(seed)
    best: list[int] | None = None
    deadline = time.monotonic() + budget
    rules = [
        [float(t) for t in tail],
        [float(t) - 1e-9 * h for t, h in zip(tail, head)],
        [-float(h) for h in head],
    ]
    back = reversed_model(model)
    gb = graph(back) if back is not None else None
    attempt = 0
    while True:
        if attempt < len(rules):
            priority = rules[attempt]
        else:
            priority = [t * (JITTER[0] + JITTER[1] * rng.random()) for t in tail]
        attempt += 1
        times = serial_schedule(model, g, priority)
        if back is not None and times:
            for _ in range(JUSTIFY_ROUNDS):
                improved = justify(model, g, back, gb, times)
                if max(improved, default=0) >= max(times, default=0):
                    break
                times = improved
        if validate(model, times) is None:  # an empty model has the empty schedule
            if best is None or max(times, default=0) < max(best, default=0):
                best = times
        if best is not None and max(best, default=0) <= target:
            break
        if attempt >= len(rules) and time.monotonic() > deadline:
            break
        if attempt > 400:
            break
    assert best is not None, "list scheduling always finds a schedule of an acyclic model"
    return tuple(best)


def step_order(model: TimedModel, times) -> list[int]:
    """Nodes in an order that respects time and every edge; at equal times, `end` steps
    (which free engine units) come first."""
    import heapq

    g = graph(model)
    missing = [len(p) for p in g.preds]
    ready = [(times[v], model.nodes[v].kind is not StepKind.END, v)
             for v in range(len(model.nodes)) if missing[v] == 0]
    heapq.heapify(ready)
    out = []
    while ready:
        _, _, v = heapq.heappop(ready)
        out.append(v)
        for u, _ in g.succs[v]:
            missing[u] -= 1
            if missing[u] == 0:
                heapq.heappush(ready, (times[u], model.nodes[u].kind is not StepKind.END, u))
    return out
