"""Chrome Trace Event output, so a simulated or replayed run opens in Perfetto.

One process per device (its streams and engine units) plus one for the host threads; one
track (tid) per stream, host thread and engine unit, each named by "M" metadata events. Every
slice becomes a complete ("X") event with `ts`/`dur` in microseconds and the source line in
`args.line`. A replayed witness has no times; each of its steps is drawn as one millisecond.
"""

from __future__ import annotations

from checker.ir import Program
from checker.executor.timeline import Timeline

STEP_US = 1000.0
"""Width of one witness step in a trace (a replay has steps, not times)."""


def _us(timeline: Timeline, t: int) -> float:
    if timeline.unit == "ns":
        return t / 1000.0
    return t * STEP_US


def chrome_trace(program: Program, timeline: Timeline) -> dict:
    """The timeline as a Chrome Trace Event JSON object (`{"traceEvents": [...]}`)."""
    device_of_stream = {s.name: program.devices[s.device].name for s in program.streams}
    pids: dict[str, int] = {"host": 1}
    for d in program.devices:
        pids[d.name] = len(pids) + 1

    def pid_of(key: str) -> int:
        kind, _, rest = key.partition(":")
        if kind == "stream":
            return pids.get(device_of_stream.get(rest, ""), 1)
        if kind == "engine":
            return pids.get(rest.split("/")[0], 1)
        return pids["host"]

    events: list[dict] = []
    for name, pid in pids.items():
        events.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
                       "args": {"name": name if name != "host" else "host threads"}})
    tids: dict[str, tuple[int, int]] = {}
    for k, lane in enumerate(timeline.lanes, start=1):
        pid = pid_of(lane.key)
        tids[lane.key] = (pid, k)
        prefix = {"stream": "stream ", "thread": "thread ", "engine": ""}.get(lane.kind, "")
        events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": k,
                       "args": {"name": prefix + lane.label}})
        events.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": k,
                       "args": {"sort_index": k}})
    for s in timeline.slices:
        pid, tid = tids.get(s.lane, (1, 0))
        events.append({
            "name": s.label,
            "cat": s.category,
            "ph": "X",
            "ts": _us(timeline, s.start),
            "dur": _us(timeline, s.end - s.start),
            "pid": pid,
            "tid": tid,
            "args": {"line": s.line, "statement": s.statement},
        })
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {"spec": program.path, "unit": timeline.unit},
    }
