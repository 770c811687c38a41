"""Trace and Gantt writers: well-formed output that names every lane and carries source lines."""

from __future__ import annotations

import json
import xml.dom.minidom
from pathlib import Path

from checker.executor.explore import explore
from checker.executor.replay import replay
from checker.executor.simulate import simulate
from checker.executor.svg import gantt_svg
from checker.executor.trace import chrome_trace
from checker.frontend import load_file

CONFORMANCE = Path(__file__).parent / "conformance"


def _c20():
    program = load_file(CONFORMANCE / "c20_double_buffering.sched").program
    return program, simulate(program)


def test_chrome_trace_has_named_tracks_and_complete_events():
    program, sim = _c20()
    trace = json.loads(json.dumps(chrome_trace(program, sim.timeline)))
    events = trace["traceEvents"]
    names = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {"stream loader", "stream worker", "thread main"} <= names
    assert any(n.startswith("npu0 copy") for n in names)
    complete = [e for e in events if e["ph"] == "X"]
    assert complete and all({"ts", "dur", "pid", "tid", "name"} <= set(e) for e in complete)
    copies = [e for e in complete if e["args"]["line"] == 13 and e["cat"] == "copy"]
    # Each copy appears on its stream's track and on the copy engine's track.
    assert len(copies) == 12
    assert min(e["dur"] for e in copies) == 8200.0  # microseconds
    end = max(e["ts"] + e["dur"] for e in complete)
    assert abs(end - 52_700.0) < 1e-6
    tids = {(e["pid"], e["tid"]) for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert all((e["pid"], e["tid"]) in tids for e in complete)


def test_gantt_svg_is_wellformed_and_highlights():
    program, sim = _c20()
    kernel = next(s.index for s in program.statements if s.name == "infer")
    svg = gantt_svg(program, sim.timeline, frozenset({kernel}))
    xml.dom.minidom.parseString(svg)
    assert "loader" in svg and "worker" in svg and "main" in svg
    assert 'stroke="#d62728"' in svg
    assert "time (ms)" in svg
    assert "52.7" in svg


def test_replayed_witness_draws_in_steps():
    program = load_file(CONFORMANCE / "c03_wait_binds_latest_record.sched").program
    finding = explore(program).findings(program)[0]
    run = replay(program, finding.witness)
    assert run.timeline.unit == "step"
    assert run.timeline.end == len(finding.witness.steps)
    svg = gantt_svg(program, run.timeline, frozenset(finding.statements))
    xml.dom.minidom.parseString(svg)
    assert "time (steps)" in svg
    trace = chrome_trace(program, run.timeline)
    assert any(e["ph"] == "X" for e in trace["traceEvents"])
