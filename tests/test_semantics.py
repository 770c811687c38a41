"""Specs for the rules docs/semantics.md adds to the contract (collectives that start member by
member, launch-order frees, groups, choose, runtime dialects, the caching allocator, ...).

Some specs pin a contract rule an engine once got wrong (s33/s34: one pair of statements racing
on two buffers). Each spec in tests/semantics/ comes as a bug and its fix, with the verdict in the same shape
as the conformance specs. Every engine must reach it on its own: the fast path (when the
program is deterministic), the SMT engine (asked directly, whatever the program), the
exhaustive explorer, and `check` as users run it; every witness replays.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from checker import hb, smt
from checker.determinism import nondeterminism
from checker.executor.explore import explore
from checker.frontend import load_file
from conftest import expected_of, findings_verdict as verdict, verdict_of

SEMANTICS = Path(__file__).parent / "semantics"
SPECS = sorted(SEMANTICS.glob("s*.sched"))


def _variants(spec: Path):
    loaded = load_file(spec)
    assert loaded.program is not None, loaded.diagnostics
    return loaded.variants or (loaded.program,)


@pytest.mark.parametrize("spec", SPECS, ids=lambda p: p.stem)
def test_smt_engine(spec):
    programs = _variants(spec)
    assert verdict([(p, smt.analyze(p, timeout=60)) for p in programs]) == expected_of(spec)


@pytest.mark.parametrize("spec", SPECS, ids=lambda p: p.stem)
def test_fast_path(spec):
    programs = _variants(spec)
    if any(nondeterminism(p) is not None for p in programs):
        pytest.skip("the order of this program depends on the interleaving")
    results = []
    for program in programs:
        findings, complete = hb.analyze(program)
        assert complete
        results.append((program, findings))
    assert verdict(results) == expected_of(spec)


@pytest.mark.parametrize("spec", SPECS, ids=lambda p: p.stem)
def test_exhaustive_explorer(spec):
    results = []
    for program in _variants(spec):
        exploration = explore(program, max_states=500_000)
        assert exploration.complete
        results.append((program, exploration.findings(program)))
    assert verdict(results) == expected_of(spec)


@pytest.mark.parametrize("spec", SPECS, ids=lambda p: p.stem)
def test_check_command(run, spec):
    status, out, _ = run("check", "--format", "json", spec)
    result = json.loads(out)["files"][0]
    assert result["status"] != "error", result["diagnostics"]
    assert verdict_of(result) == expected_of(spec)
    assert status == (1 if any(not f["expected"] for f in result["findings"]) else 0)
