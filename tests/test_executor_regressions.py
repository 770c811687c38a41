"""Saved executor cases (tests/regressions/executor_*.sched): verdicts that once went wrong or
pin down a reading of docs/semantics.md. Each is explored with and without reduction, its
findings confirmed by replay, and simulated."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from checker.executor.explore import explore
from checker.executor.replay import confirm, replay
from checker.executor.simulate import simulate
from checker.frontend import load_file

CASES = sorted((Path(__file__).parent / "regressions").glob("executor_*.sched"))


def test_cases_present():
    assert len(CASES) >= 5


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem)
def test_saved_verdict(path):
    expected = json.loads(path.with_suffix(".expected.json").read_text())
    program = load_file(path).program
    assert program is not None
    line = lambda i: program.statements[i].span.line  # noqa: E731
    for reduce in (True, False):
        result = explore(program, reduce=reduce)
        assert result.complete
        races = sorted({tuple(sorted((line(r.a), line(r.b)))) for r in result.races})
        assert races == [tuple(pair) for pair in expected["races"]]
        assert sorted({line(u.statement) for u in result.dead_uses}) == expected["uaf_lines"]
        assert bool(result.deadlocks) == expected["deadlock"]
    for finding in explore(program).findings(program):
        assert confirm(program, finding).ok
    sim = simulate(program)
    assert replay(program, sim.steps).ok


def test_a_launch_order_use_after_free_names_the_free_issued_before_it():
    # `free b` is issued after k, and b's alloc between them reuses a's block: the state where
    # k's start shows the use has issued both frees, but k was enqueued after `free a` alone
    from checker.frontend import load_text

    program = load_text("device gpu0 { compute 2 }\ntensor a 1KiB on gpu0\ntensor b 1KiB on gpu0\n"
                        "stream main on gpu0\nstream side on gpu0\nthread t {\n  main: alloc a\n  free a\n"
                        "  side: kernel k reads a 2ms\n  main: alloc b\n  free b\n}\n").program
    (finding,) = explore(program).findings(program)
    assert "enqueued after free a (line 8)" in finding.message
