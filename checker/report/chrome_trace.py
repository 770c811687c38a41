"""Chrome Trace Event output, so a simulated, scheduled or replayed run opens in Perfetto.

One process per device (its streams and engine units) plus one for the host threads; one
track (tid) per stream, host thread and engine unit, each named by "M" metadata events. Every
slice becomes a complete ("X") event with `ts`/`dur` in microseconds and the source line in
`args.line` (and the loop variables in `args.loop`). A replayed witness has no times; each of
its steps is drawn as one millisecond.
"""

from __future__ import annotations

from checker.ir import Program, loop_text
from checker.report.timeline import LaneKind, Timeline
from checker.timing import TimeUnit

STEP_US = 1000.0
"""Width of one witness step in a trace (a replay has steps, not times)."""

_PREFIX = {LaneKind.STREAM: "stream ", LaneKind.THREAD: "thread ", LaneKind.ENGINE: ""}


def _ns_to_us(t: int) -> float:
    return t / 1000.0


def _step_to_us(t: int) -> float:
    return t * STEP_US


def chrome_trace(program: Program, timeline: Timeline) -> dict:
    """The timeline as a Chrome Trace Event JSON object (`{"traceEvents": [...]}`)."""
    if timeline.unit is TimeUnit.NS:
        us = _ns_to_us
    else:
        us = _step_to_us
    host = 1
    device_pid = {d.index: d.index + 2 for d in program.devices}
    events: list[dict] = [{"name": "process_name", "ph": "M", "pid": host, "tid": 0,
                           "args": {"name": "host threads"}}]
    for d in program.devices:
        events.append({"name": "process_name", "ph": "M", "pid": device_pid[d.index], "tid": 0,
                       "args": {"name": d.name}})
    tracks: list[tuple[int, int]] = []
    for k, lane in enumerate(timeline.lanes, start=1):
        pid = device_pid.get(lane.device, host) if lane.device is not None else host
        tracks.append((pid, k))
        events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": k,
                       "args": {"name": _PREFIX[lane.kind] + lane.label}})
        events.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": k,
                       "args": {"sort_index": k}})
    for s in timeline.slices:
        pid, tid = tracks[s.lane]
        args: dict = {"line": s.line, "statement": s.statement}
        if s.bindings:
            args["loop"] = loop_text(s.bindings)[1:-1]
        events.append({
            "name": s.label,
            "cat": s.category,
            "ph": "X",
            "ts": us(s.start),
            "dur": us(s.end - s.start),
            "pid": pid,
            "tid": tid,
            "args": args,
        })
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {"spec": program.path, "unit": timeline.unit.value, "ts_unit": "us"},
    }
