"""Every conformance spec gets exactly the verdict its .expected.json gives, through the CLI."""

from __future__ import annotations

import json

import pytest

from conftest import CONFORMANCE, expected_of, verdict_of

VALID = sorted(CONFORMANCE.glob("c*.sched"))
INVALID = sorted(CONFORMANCE.glob("e*.sched"))


@pytest.mark.parametrize("engines", [(), ("--explore-first", "0")], ids=["default", "solver"])
@pytest.mark.parametrize("spec", VALID, ids=lambda p: p.stem)
def test_valid_spec_verdict(run, spec, engines):
    """By default (the exhaustive search first, then the solver) and by the solver alone."""
    status, out, _ = run("check", *engines, "--format", "json", spec)
    result = json.loads(out)["files"][0]
    assert result["status"] != "error", result["diagnostics"]
    assert not any(f["kind"] == "unknown" for f in result["findings"]), result["findings"]
    assert verdict_of(result) == expected_of(spec)
    has_findings = any(not f["expected"] for f in result["findings"])
    assert status == (1 if has_findings else 0)


@pytest.mark.parametrize("spec", INVALID, ids=lambda p: p.stem)
def test_invalid_spec_diagnostic(run, spec):
    expected = expected_of(spec)
    status, out, err = run("check", spec)
    assert status == expected["exit"]
    text = out + err
    first = text.splitlines()[0]
    assert first.startswith(f"{spec}:{expected['line']}:"), first
    assert "error[SP" in first
    assert "^" in text
    assert "Traceback" not in out + err


@pytest.mark.parametrize("spec", INVALID, ids=lambda p: p.stem)
def test_invalid_spec_json(run, spec):
    expected = expected_of(spec)
    status, out, _ = run("check", "--format", "json", spec)
    result = json.loads(out)["files"][0]
    assert status == 2
    assert result["status"] == "error"
    assert result["diagnostics"][0]["line"] == expected["line"]


@pytest.mark.parametrize("spec", VALID, ids=lambda p: p.stem)
def test_exhaustive_exploration_verdict(run, spec):
    """The executor's explorer, an independent implementation, reaches the same verdict."""
    status, out, _ = run("check", "--exhaustive", "--format", "json", spec)
    result = json.loads(out)["files"][0]
    assert not any(f["kind"] == "unknown" for f in result["findings"]), result["findings"]
    assert verdict_of(result) == expected_of(spec)
