"""How faithful an imported spec is: its simulation next to the trace it came from.

Per stream, the busy span (first start to last end of its GPU work) observed in the trace
and simulated from the spec; overall, the GPU span. Then what bounds the simulated run: the
share of the critical path spent in host code versus on the devices, and how much shorter
it could be if host and devices overlapped perfectly (the larger of the busiest engine's
work and the busiest thread's host time).
"""

from __future__ import annotations

from dataclasses import dataclass

from checker.importers.kineto import Imported
from checker.ir import Op, Program

HOST_BOUND = 0.5
"""Share of the critical path in host code from which a run counts as host-bound."""


@dataclass(frozen=True, slots=True)
class StreamComparison:
    stream: str
    observed_span: int
    simulated_span: int
    observed_busy: int
    simulated_busy: int
    operations: int

    @property
    def ratio(self) -> float | None:
        return self.simulated_span / self.observed_span if self.observed_span else None


@dataclass(frozen=True, slots=True)
class Comparison:
    """Times in ns."""

    streams: tuple[StreamComparison, ...]
    observed_gpu_span: int
    simulated_gpu_span: int
    simulated_makespan: int
    deadlocked: bool
    host_path: int
    """Time the simulated critical path spends in host code (host gaps, launches)."""
    device_path: int
    """Time the simulated critical path spends in GPU work."""
    device_work: int
    """The busiest engine's work divided by its units (ns)."""
    host_work: int
    """The busiest host thread's own time (host gaps), ns."""

    @property
    def ratio(self) -> float | None:
        return self.simulated_gpu_span / self.observed_gpu_span if self.observed_gpu_span else None

    @property
    def bound(self) -> str:
        """`host-bound`, `device-bound` or `dependency-bound` (the simulated critical path)."""
        total = self.host_path + self.device_path
        if not total:
            return "dependency-bound"
        if self.host_path / total >= HOST_BOUND:
            return "host-bound"
        if self.device_path / total >= HOST_BOUND:
            return "device-bound"
        return "dependency-bound"

    @property
    def overlap_floor(self) -> int:
        """No schedule of this work is shorter than this (ns)."""
        return max(self.device_work, self.host_work)

    def to_json(self) -> dict:
        us = lambda ns: round(ns / 1000, 3)  # noqa: E731
        return {
            "streams": [{"stream": s.stream, "operations": s.operations,
                         "observed_span_us": us(s.observed_span), "simulated_span_us": us(s.simulated_span),
                         "observed_busy_us": us(s.observed_busy), "simulated_busy_us": us(s.simulated_busy),
                         "ratio": None if s.ratio is None else round(s.ratio, 4)} for s in self.streams],
            "gpu_span": {"observed_us": us(self.observed_gpu_span), "simulated_us": us(self.simulated_gpu_span),
                         "ratio": None if self.ratio is None else round(self.ratio, 4)},
            "simulated_makespan_us": us(self.simulated_makespan),
            "deadlocked": self.deadlocked,
            "critical_path": {"host_us": us(self.host_path), "device_us": us(self.device_path),
                              "bound": self.bound},
            "overlap": {"device_work_us": us(self.device_work), "host_work_us": us(self.host_work),
                        "floor_us": us(self.overlap_floor)},
        }

    def lines(self) -> list[str]:
        ms = lambda ns: f"{ns / 1e6:.3f} ms"  # noqa: E731
        pct = lambda r: "n/a" if r is None else f"{(r - 1) * 100:+.1f}%"  # noqa: E731
        width = max([len("stream")] + [len(s.stream) for s in self.streams])
        out = [f"{'stream':<{width}}  {'ops':>7}  {'observed span':>14}  {'simulated span':>14}  {'diff':>7}"]
        for s in self.streams:
            out.append(f"{s.stream:<{width}}  {s.operations:>7}  {ms(s.observed_span):>14}  "
                       f"{ms(s.simulated_span):>14}  {pct(s.ratio):>7}")
        out.append(f"{'GPU span':<{width}}  {'':>7}  {ms(self.observed_gpu_span):>14}  "
                   f"{ms(self.simulated_gpu_span):>14}  {pct(self.ratio):>7}")
        if self.deadlocked:
            out.append("the simulation deadlocked: the spec's waits cannot all be met")
        total = self.host_path + self.device_path
        if total:
            out.append(f"{self.bound}: the simulated critical path spends {self.host_path / total:.0%} in host "
                       f"code and {self.device_path / total:.0%} on the GPU")
        floor = self.overlap_floor
        span = self.simulated_makespan
        if span:
            left = max(0, span - floor)
            out.append(f"overlap left: at most {ms(left)} ({left / span:.0%} of the simulated {ms(span)}); "
                       f"busiest engine {ms(self.device_work)}, busiest host thread {ms(self.host_work)}")
        return out


def compare(imported: Imported, program: Program) -> Comparison:
    """Simulate the imported spec and set it next to what the trace observed."""
    from checker.executor.simulate import simulate

    sim = simulate(program)
    statements = program.statements
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    busy: dict[str, int] = {}
    gpu_first, gpu_last = -1, 0
    for task in sim.tasks:
        st = statements[task.statement]
        if st.op not in (Op.KERNEL, Op.COPY) and not (st.duration and st.engine is not None):
            continue
        name = task.stream
        if name not in first or task.start < first[name]:
            first[name] = task.start
        last[name] = max(last.get(name, 0), task.end)
        busy[name] = busy.get(name, 0) + task.end - task.start
        if gpu_first < 0 or task.start < gpu_first:
            gpu_first = task.start
        gpu_last = max(gpu_last, task.end)
    streams = []
    for name, observed in imported.streams.items():
        simulated_span = last[name] - first[name] if name in first else 0
        streams.append(StreamComparison(name, observed.span, simulated_span, observed.busy,
                                        busy.get(name, 0), observed.ops))
    host_path = device_path = 0
    for node in sim.critical_path:
        st = statements[node.statement]
        length = max(0, node.end - node.start)
        if node.part == "task":
            if st.duration:
                device_path += length
        elif st.op is Op.HOST or (st.stream is not None and not st.blocking):
            host_path += length
    units: dict[tuple[str, str], int] = {(e.device, e.engine): e.units for e in sim.engines}
    device_work = max((-(-e.busy // max(1, units[(e.device, e.engine)])) for e in sim.engines), default=0)
    host_work = 0
    for thread in program.threads:
        own = sum(statements[i].duration for i in thread.statements if statements[i].op is Op.HOST)
        own += sum(program.launch_time(statements[i]) for i in thread.statements)
        host_work = max(host_work, own)
    return Comparison(tuple(streams), imported.gpu_span, max(0, gpu_last - max(gpu_first, 0)),
                      sim.makespan, sim.deadlocked, host_path, device_path, device_work, host_work)
