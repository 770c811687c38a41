"""Timelines, Gantt charts, traces and replay text: one builder over every backend's timing,
well-formed output that names every lane, carries source lines and loop indices, picks a time
unit that fits, and draws a legend of what is drawn only."""

from __future__ import annotations

import json
import xml.dom.minidom
from pathlib import Path

import pytest

from checker.executor.explore import explore
from checker.executor.replay import confirm, replay
from checker.executor.simulate import simulate
from checker.frontend import load_file, load_text
from checker.crosscheck import optimize_as_written as optimize
from checker.report.chrome_trace import chrome_trace
from checker.report.replay_text import replay_text
from checker.report.svg import Chart, axis_unit, charts_svg, gantt_svg, nice_step
from checker.report.timeline import LaneKind, build
from checker.timing import Interval, Part, Timing, TimeUnit

CONFORMANCE = Path(__file__).parent / "conformance"
SPECS = Path(__file__).resolve().parent.parent / "specs"

SHORT = """spec "short kernels"
device d { compute 2 copy 1 }
buffer a[4] 1MiB on d
buffer h 1MiB on host pinned
stream s1 on d
stream s2 on d
thread main {
  for i in 0..4 {
    s1: kernel k1 writes a[i] 40us
    s2: kernel k2 reads h 25us
    s2: copy a[i] <- h 30us
  }
  sync all
}
"""


def _c20():
    program = load_file(CONFORMANCE / "c20_double_buffering.sched").program
    return program, simulate(program)


def _lane(timeline, s):
    return timeline.lanes[s.lane]


def test_simulation_lanes_are_typed_and_tasks_sit_on_stream_and_engine():
    program, sim = _c20()
    timeline = build(program, sim.timing)
    kinds = [lane.kind for lane in timeline.lanes]
    assert kinds == [LaneKind.STREAM, LaneKind.STREAM, LaneKind.THREAD, LaneKind.ENGINE,
                     LaneKind.ENGINE]
    assert [lane.label for lane in timeline.lanes] == ["loader", "worker", "main",
                                                       "npu0 compute #0", "npu0 copy #0"]
    infer = [s for s in timeline.slices if s.label == "worker: kernel infer"]
    assert sorted(_lane(timeline, s).kind.value for s in infer) == ["engine"] * 6 + ["stream"] * 6
    assert {s.bindings for s in infer} == {(("slot", k % 2), ("step", k)) for k in range(6)}
    assert timeline.end == sim.makespan == 52_700_000
    assert list(timeline.slices) == sorted(timeline.slices, key=lambda s: (s.start, s.end, s.statement))


def test_one_builder_for_every_backend():
    """Simulation, replay and schedules hand over the same `Timing` shape; the bound, which
    has no stream order, is drawn on engine units."""
    program, sim = _c20()
    result = optimize(program, timeout=20)
    for timing in (sim.timing, result.program_schedule.timing(program),
                   result.bound_schedule.timing(program), replay(program, sim.steps).timing):
        assert isinstance(timing, Timing)
        assert all(isinstance(i, Interval) and isinstance(i.part, Part) for i in timing.intervals)
        timeline = build(program, timing)
        assert timeline.end == timing.end
    bound = build(program, result.bound_schedule.timing(program))
    assert {lane.kind for lane in bound.lanes} == {LaneKind.THREAD, LaneKind.ENGINE}
    assert any(_lane(bound, s).kind is LaneKind.ENGINE for s in bound.slices)
    stepped = build(program, replay(program, sim.steps).timing)
    assert stepped.unit is TimeUnit.STEP and stepped.end == len(sim.steps)


def test_chrome_trace_has_named_tracks_and_complete_events():
    program, sim = _c20()
    trace = json.loads(json.dumps(chrome_trace(program, build(program, sim.timing))))
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
    assert {e["args"]["loop"] for e in copies} == {f"slot={k % 2} step={k}" for k in range(6)}
    end = max(e["ts"] + e["dur"] for e in complete)
    assert abs(end - 52_700.0) < 1e-6
    tids = {(e["pid"], e["tid"]) for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert all((e["pid"], e["tid"]) in tids for e in complete)
    processes = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert processes == {1: "host threads", 2: "npu0"}


def test_gantt_svg_is_wellformed_and_highlights():
    program, sim = _c20()
    kernel = next(s.index for s in program.statements if s.name == "infer")
    svg = gantt_svg(program, build(program, sim.timing), frozenset({kernel}))
    xml.dom.minidom.parseString(svg)
    assert "loader" in svg and "worker" in svg and "main" in svg
    assert 'stroke="#d62728"' in svg and "in the finding" in svg
    assert "time (ms)" in svg
    assert "end: 52.7 ms" in svg
    assert "worker: kernel infer [slot=1 step=3] (line 16): 32.8-36.3 ms" in svg


def _legend(svg: str) -> list[str]:
    return [line.split(">")[1].split("<")[0] for line in svg.splitlines()
            if line.startswith("<text") and 'y="' in line and line.split('y="')[1].split('"')[0]
            == _legend_y(svg)]


def _legend_y(svg: str) -> str:
    last = [line for line in svg.splitlines() if line.startswith("<rect") and 'width="12"' in line]
    return str(int(float(last[-1].split('y="')[1].split('"')[0])) + 10)


def test_legend_lists_only_what_is_drawn():
    program, sim = _c20()
    svg = gantt_svg(program, build(program, sim.timing))
    assert _legend(svg) == ["compute", "copy", "sync", "instant"]
    assert "in the finding" not in svg


def test_time_axis_unit_fits_the_span_and_labels_carry_loop_indices():
    program = load_text(SHORT).program
    sim = simulate(program)
    svg = gantt_svg(program, build(program, sim.timing))
    xml.dom.minidom.parseString(svg)
    assert "time (&#181;s)" in svg and "end: 220 &#181;s" in svg
    assert ">k1 [i=2]</text>" in svg  # a bar wide enough for its loop index
    assert ">200</text>" in svg and ">0</text>" in svg  # round ticks, no stray decimals
    assert axis_unit(TimeUnit.NS, 500) == ("ns", 1)
    assert axis_unit(TimeUnit.NS, 220_000) == ("us", 1_000)
    assert axis_unit(TimeUnit.NS, 52_700_000) == ("ms", 1_000_000)
    assert axis_unit(TimeUnit.NS, 2_500_000_000) == ("s", 1_000_000_000)
    assert axis_unit(TimeUnit.STEP, 12) == ("steps", 1)


@pytest.mark.parametrize("span, step", [(52.7, 10), (220, 50), (3.87, 0.5), (1, 0.1),
                                        (0.3, 0.05), (2500, 500), (11, 2), (10, 1)])
def test_nice_step(span, step):
    """At most about ten ticks, each 1, 2 or 5 times a power of ten."""
    assert nice_step(span) == pytest.approx(step)


def test_charts_stack_on_one_time_scale():
    program = load_file(SPECS / "copy_compute_double_buffered.sched").program
    result = optimize(program, timeout=20)
    charts = [Chart(build(program, schedule.timing(program)), title)
              for title, schedule in (("best execution (program)", result.program_schedule),
                                      ("overlap bound (bound)", result.bound_schedule))]
    svg = charts_svg(program, charts)
    xml.dom.minidom.parseString(svg)
    assert "best execution (program)" in svg and "overlap bound (bound)" in svg
    assert svg.count("end: 52.7 ms") == 2
    assert ">npu0 copy #0</text>" in svg  # the bound's rows are engine units
    assert svg.count("time (ms)") == 1


def test_replayed_witness_draws_in_steps():
    program = load_file(CONFORMANCE / "c03_wait_binds_latest_record.sched").program
    finding = explore(program).findings(program)[0]
    run = replay(program, finding.witness)
    timeline = build(program, run.timing)
    assert timeline.unit is TimeUnit.STEP
    assert timeline.end == len(finding.witness.steps)
    svg = gantt_svg(program, timeline, frozenset(finding.statements))
    xml.dom.minidom.parseString(svg)
    assert "time (steps)" in svg
    trace = chrome_trace(program, timeline)
    assert any(e["ph"] == "X" for e in trace["traceEvents"])
    assert trace["otherData"] == {"spec": program.path, "unit": "step", "ts_unit": "us"}


def test_replay_text_from_its_json():
    program = load_file(CONFORMANCE / "c03_wait_binds_latest_record.sched").program
    finding = explore(program).findings(program)[0]
    run = replay(program, finding.witness)
    confirmation = confirm(program, finding)
    data = {"replay": run.to_json(), "finding": {"statements": list(finding.statements)},
            "confirmation": confirmation.to_json()}
    lines = replay_text(program, finding.witness.steps, data)
    steps = finding.witness.steps
    assert len(lines) >= len(steps) + 2
    assert lines[len(steps)] == f"replayed {len(steps)} steps: every step is legal"
    assert lines[len(steps) + 1].startswith("reproduced: ")
    assert any(line.endswith("  *") for line in lines[:len(steps)])
    bad = {"replay": {**run.to_json(), "ok": False, "applied": 1, "failed_at": 1,
                      "reason": "step 2 is not legal here: why"},
           "finding": None, "confirmation": None}
    lines = replay_text(program, steps, bad)
    assert lines[1].endswith("  <- illegal")
    assert lines[-1] == "step 2 is not legal here: why"


def test_gantt_svg_stays_wellformed_with_control_characters_in_names():
    text = 'spec "t \x01 \x1b[31m"\ndevice d\nbuffer x 1MiB on d\nstream s on d\nthread main {\n  s: kernel k writes x 1ms\n}\n'
    program = load_text(text, "odd\x02.sched").program
    sim = simulate(program)
    svg = gantt_svg(program, build(program, sim.timing))
    xml.dom.minidom.parseString(svg)
    assert "\x01" not in svg and "\N{REPLACEMENT CHARACTER}" in svg


def test_a_copy_bar_names_its_direction_once():
    from checker.report.timeline import label_of

    program = load_text("device d { compute 1 copy 1 }\nbuffer h 1MiB on host pinned\nbuffer b 1MiB on d\n"
                        "stream lo on d\nthread t {\n  lo: copy h <- b 1ms\n  lo: copy b[0:4] <- h[0:4]\n}\n").program
    assert [label_of(program, s) for s in program.statements] == ["lo: copy h <- b", "lo: copy b[0:4] <- h[0:4]"]
