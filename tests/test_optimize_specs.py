"""The seed scenarios' numbers, replay of every schedule, and synthesis reaching the bound."""

from __future__ import annotations

from pathlib import Path

import pytest

from checker import hb
from checker.crosscheck import replays
from checker.frontend import load_file, load_text
from checker.crosscheck import optimize_as_written as optimize
from checker.optimize import check_makespan, emit

SPECS = Path(__file__).resolve().parent.parent / "specs"
MS = 1_000_000

# spec: (simulated, program, bound, lower, classification, named engine)
EXPECTED = {
    "copy_compute_sync.sched": (70.2, 70.2, 70.2, 70.2, "dependency-bound", None),
    "copy_compute_double_buffered.sched": (52.7, 52.7, 52.7, 49.2, None, None),
    "pipeline_three_stage.sched": (43.5, 43.5, 43.5, 40.0, "engine-bound", "npu.compute"),
    "host_bound_dynamic_shape.sched": (3.87, 3.87, 3.87, 3.87, "host-bound", None),
    "host_pipeline_three_threads.sched": (1.52, 1.52, 1.52, 1.44, "engine-bound", "npu.compute"),
    "comm_overlap_priorities.sched": (12.5, 12.5, 12.5, 11.0, None, None),
}


def _ms(ns):
    return round(ns / MS, 6)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_seed_scenario(name):
    path = SPECS / name
    if not path.exists():
        pytest.skip(f"{name} is not in specs/ yet")
    program = load_file(path).program
    result = optimize(program, timeout=20)
    simulated, best, bound, lower, kind, engine = EXPECTED[name]
    assert result.optimal_program and result.optimal_bound
    if result.simulated is not None:
        assert _ms(result.simulated) == simulated
    assert (_ms(result.program), _ms(result.bound), _ms(result.lower)) == (best, bound, lower)
    if kind is not None:
        assert result.report.classification.kind == kind
        assert result.report.classification.engine == engine
    verdicts = check_makespan(program, result)
    assert all(v.status == "met" for v in verdicts)
    ok, why = replays(program, result.program_schedule)
    assert ok, why


def test_pipeline_names_its_bottleneck_stage():
    result = optimize(load_file(SPECS / "pipeline_three_stage.sched").program, timeout=20)
    assert "kernel encode" in result.report.classification.summary


def test_three_threads_beat_one():
    one = optimize(load_file(SPECS / "host_bound_dynamic_shape.sched").program, timeout=20)
    three = optimize(load_file(SPECS / "host_pipeline_three_threads.sched").program, timeout=20)
    assert one.report.classification.kind == "host-bound"
    assert three.program * 2 < one.program


def test_priorities_matter_to_the_simulation_only():
    text = (SPECS / "comm_overlap_priorities.sched").read_text()
    swapped = text.replace("priority high", "priority X").replace("priority low", "priority high") \
        .replace("priority X", "priority low")
    result = optimize(load_text(swapped).program, timeout=20)
    if result.simulated is not None:
        assert _ms(result.simulated) == 17.0
    assert _ms(result.program) == 12.5


@pytest.mark.parametrize("name", sorted(p.name for p in SPECS.glob("*.sched")))
def test_every_spec_synthesizes_a_spec_that_reaches_the_bound(name):
    program = load_file(SPECS / name).program
    result = optimize(program, timeout=20)
    if result.deadlock or result.bound_schedule is None:
        pytest.skip("no bound: " + "; ".join(result.notes))
    text = emit(program, result)
    loaded = load_text(text)
    assert loaded.program is not None, loaded.diagnostics
    again = optimize(loaded.program, timeout=20)
    assert again.optimal_program and again.program == result.bound
    findings, _ = hb.analyze(loaded.program)
    original, _ = hb.analyze(program)
    if not original:
        assert not findings, [f.message for f in findings]
    ok, why = replays(loaded.program, again.program_schedule)
    assert ok, why


def test_exports():
    program = load_file(SPECS / "copy_compute_double_buffered.sched").program
    result = optimize(program, timeout=20)
    for schedule in (result.program_schedule, result.bound_schedule):
        timing = schedule.timing(program)
        assert timing.end == schedule.makespan and timing.streams == (schedule.kind == "program")
    data = result.to_json()
    assert set(data) >= {"path", "makespan", "optimal", "proven_lower", "schedules"}
    assert data["makespan"] == {"simulated": 52.7, "program": 52.7, "bound": 52.7, "lower": 49.2}
