"""What a person reads about a schedule: gaps, engine utilisation, and what bounds it."""

from __future__ import annotations

from dataclasses import dataclass

from checker.ir import NS_PER_MS, Program
from checker.messages import ms_text
from checker.optimize import core
from checker.optimize.model import TimedModel
from checker.witness import StepKind

ENGINE_BOUND = 0.9
"""Utilisation from which an engine counts as saturated."""
HOST_BOUND = 0.5
"""Share of the critical chain spent in host launches and host code that makes it host-bound."""


@dataclass(frozen=True, slots=True)
class EngineUse:
    name: str
    capacity: int
    busy: int
    """Work on the engine (ns, summed over units)."""
    utilisation: float
    """busy / (capacity * makespan), 0..1."""


@dataclass(frozen=True, slots=True)
class Classification:
    kind: str
    """`host-bound`, `engine-bound` or `dependency-bound`."""
    engine: str | None
    """The saturated engine (engine-bound)."""
    chain: tuple[int, ...]
    """Statements of the critical chain, first to last."""
    host_share: float
    """Share of the makespan the chain spends in host launches and host code."""
    summary: str
    """What bounds the makespan, in words (without the kind)."""


def _ms(ns: int | None) -> float | None:
    return None if ns is None else ns / NS_PER_MS


def engine_use(model: TimedModel, times, makespan: int) -> tuple[EngineUse, ...]:
    busy = [0] * len(model.resources)
    for node in model.nodes:
        for r, d in node.uses:
            busy[r] += d
    out = []
    for res, work in zip(model.resources, busy):
        util = work / (res.capacity * makespan) if makespan > 0 else 0.0
        out.append(EngineUse(res.name, res.capacity, work, util))
    return tuple(out)


def critical_chain(model: TimedModel, times) -> tuple[list[int], int]:
    """Nodes of a chain of tight constraints ending at the makespan, and the host time on it."""
    g = core.graph(model)
    jobs = core.resource_jobs(model)
    ends_on: dict[int, list[int]] = {}
    for r, js in enumerate(jobs):
        ends_on[r] = [(times[v] + d) for v, d in js]
    if not times:
        return [], 0  # nothing runs: no chain
    v = max(range(len(times)), key=lambda i: (times[i], model.nodes[i].kind is StepKind.END))
    chain, host = [v], 0
    while times[v] > 0:
        node = model.nodes[v]
        step = None
        for u, w in g.preds[v]:
            if times[u] + w == times[v]:
                if step is None or w > step[1]:
                    step = (u, w)
        if step is None and node.uses:
            # waited for an engine unit: continue through the job that freed it
            for r, _ in node.uses:
                for (u, d) in jobs[r]:
                    if u != v and times[u] + d == times[v]:
                        step = (u, d)
                        break
                if step:
                    break
        if step is None:
            break
        u, w = step
        if model.nodes[u].kind in (StepKind.ISSUE, StepKind.RETURN) and model.nodes[v].anchor is None:
            host += w
        chain.append(u)
        v = u
    chain.reverse()
    return chain, host


def classify(model: TimedModel, times, makespan: int) -> Classification:
    program = model.program
    uses = engine_use(model, times, makespan)
    chain_nodes, host = critical_chain(model, times)
    statements: list[int] = []
    for v in chain_nodes:
        node = model.nodes[v]
        for s in node.members or (node.statement,):
            if s not in statements:
                statements.append(s)
    share = host / makespan if makespan > 0 else 0.0
    busiest = max(uses, key=lambda u: u.utilisation, default=None)
    if busiest is not None and busiest.utilisation >= ENGINE_BOUND:
        names = _heaviest(model, busiest.name)
        return Classification(
            "engine-bound", busiest.name, tuple(statements), share,
            f"{busiest.name} is busy {busiest.utilisation:.0%} of the time"
            + (f" (mostly {names})" if names else ""),
        )
    if share >= HOST_BOUND:
        return Classification(
            "host-bound", None, tuple(statements), share,
            f"the critical chain spends {share:.0%} of the makespan in host launches "
            "and host code while the device waits",
        )
    work = [s for s in statements
            if program.statements[s].stream is not None and program.statements[s].duration > 0]
    shown = work or statements
    described = " -> ".join(_describe(program, program.statements[s]) for s in shown[:8])
    if len(shown) > 8:
        described += f" -> ... ({len(shown) - 8} more)"
    return Classification("dependency-bound", None, tuple(statements), share,
                          f"critical chain {described}")


def _describe(program: Program, st) -> str:
    """`s: copy batch_dev <- batch_host (line 23, step=2)`."""
    text = program.describe(st)  # (a copy with its operands)
    where = [f"line {st.span.line}"] + [f"{name}={value}" for name, value in st.bindings]
    return f"{text} ({', '.join(where)})"


def _heaviest(model: TimedModel, resource_name: str) -> str:
    """The statement names that make up most of an engine's work."""
    program = model.program
    work: dict[str, int] = {}
    for node in model.nodes:
        for r, d in node.uses:
            if model.resources[r].name == resource_name:
                st = program.statements[node.statement]
                if st.name:
                    key = f"{st.op.value} {st.name}"
                elif st.op.value == "copy" and len(st.accesses) == 2:
                    source, destination = st.accesses
                    key = (f"copy {program.memories[destination.memory].buffer} <- "
                           f"{program.memories[source.memory].buffer}")
                else:
                    key = st.op.value
                work[key] = work.get(key, 0) + d
    top = sorted(work.items(), key=lambda kv: -kv[1])[:3]
    return ", ".join(name for name, _ in top)


@dataclass(frozen=True, slots=True)
class Report:
    """Numbers and words for the text renderer (all times ns)."""

    simulated: int | None
    program: int | None
    bound: int | None
    lower: int
    engines: tuple[EngineUse, ...]
    classification: Classification | None
    notes: tuple[str, ...]

    def gap(self, a: int | None, b: int | None) -> tuple[float, float] | None:
        """(ms, % of a) by which a exceeds b."""
        if a is None or b is None:
            return None
        return (a - b) / NS_PER_MS, (100.0 * (a - b) / a) if a else 0.0

    @property
    def gap_to_bound(self) -> tuple[float, float] | None:
        return self.gap(self.program, self.bound)

    @property
    def gap_to_program(self) -> tuple[float, float] | None:
        return self.gap(self.simulated, self.program)

    def to_json(self) -> dict:
        c = self.classification
        to_bound, to_program = self.gap_to_bound, self.gap_to_program
        return {
            "gap": {
                "simulated_vs_program": None if to_program is None
                else {"ms": to_program[0], "percent": to_program[1]},
                "program_vs_bound": None if to_bound is None
                else {"ms": to_bound[0], "percent": to_bound[1]},
            },
            "engines": [{"name": e.name, "count": e.capacity, "busy": _ms(e.busy),
                         "utilisation": e.utilisation} for e in self.engines],
            "classification": None if c is None else {
                "kind": c.kind, "engine": c.engine, "chain": list(c.chain),
                "host_share": c.host_share, "summary": c.summary},
        }

    def lines(self, program: Program) -> tuple[str, ...]:
        """A plain-text rendering (the CLI may render its own from the fields)."""
        f = lambda ns: "n/a" if ns is None else ms_text(ns / NS_PER_MS)  # noqa: E731
        out = [f"simulated {f(self.simulated)}   program {f(self.program)}   "
               f"bound {f(self.bound)}   lower {f(self.lower)}"]
        if self.gap_to_program:
            out.append(f"simulated - program: {ms_text(self.gap_to_program[0])} ({self.gap_to_program[1]:.1f}%)")
        if self.gap_to_bound:
            out.append(f"program - bound: {ms_text(self.gap_to_bound[0])} ({self.gap_to_bound[1]:.1f}%)")
        for e in self.engines:
            out.append(f"  {e.name} x{e.capacity}: busy {ms_text(e.busy / NS_PER_MS)}, "
                       f"utilisation {e.utilisation:.0%}")
        if self.classification:
            out.append(f"{self.classification.kind}: {self.classification.summary}")
        out.extend(f"note: {n}" for n in self.notes)
        return tuple(out)
