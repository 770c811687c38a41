"""Shared test helpers: run the CLI in-process and load conformance specs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from checker.cli import main
from checker.executor.replay import confirm
from checker.findings import FindingKind

HERE = Path(__file__).parent

# The streamproof pytest plugin collects every .sched file it meets as a test; the specs under
# tests/ include deliberately broken ones, which the test modules check themselves.
collect_ignore_glob = ["*.sched"]
CONFORMANCE = HERE / "conformance"
SPECS = HERE.parent / "specs"


def expected_of(path: Path) -> dict:
    return json.loads(path.with_suffix(".expected.json").read_text())


@pytest.fixture
def run(capsys):
    """Run `streamproof ARGS...`; returns (exit status, stdout, stderr)."""

    def runner(*args: str):
        status = main([str(a) for a in args])
        captured = capsys.readouterr()
        return status, captured.out, captured.err

    return runner


def verdict_of(file_json: dict) -> dict:
    """Reduce one file of `check --format json` to the conformance verdict shape (each racing
    pair of lines once: a pair that races on two buffers is two findings), and check that the
    report's own `verdict` says the same."""
    races = sorted(map(list, {tuple(sorted([f["locations"][0]["line"], f["locations"][1]["line"]]))
                              for f in file_json["findings"] if f["kind"] == "race"}))
    verdict = {
        "races": races,
        "race_buffers": sorted({f["buffer"] for f in file_json["findings"] if f["kind"] == "race"}),
        "uaf_lines": sorted({f["locations"][0]["line"] for f in file_json["findings"]
                             if f["kind"] in ("use-after-free", "use-before-alloc")}),
        "deadlock": any(f["kind"] == "deadlock" for f in file_json["findings"]),
    }
    assert file_json["verdict"] == verdict
    return verdict


def findings_verdict(programs_and_findings) -> dict:
    """The conformance verdict of findings over every variant of a spec; every witness must
    replay."""
    races, buffers, dead, deadlock = set(), set(), set(), False
    for program, findings in programs_and_findings:
        line = lambda i: program.statements[i].span.line  # noqa: E731
        for f in findings:
            assert f.kind is not FindingKind.UNKNOWN, f.message
            if f.kind is FindingKind.RACE:
                races.add(tuple(sorted((line(f.statements[0]), line(f.statements[1])))))
                buffers.add(f.buffer)
            elif f.kind in (FindingKind.USE_AFTER_FREE, FindingKind.USE_BEFORE_ALLOC):
                dead.add(line(f.statements[0]))
            elif f.kind is FindingKind.DEADLOCK:
                deadlock = True
            if f.witness is not None:
                assert confirm(program, f).ok, (f.message, confirm(program, f).reason)
    return {"races": [list(r) for r in sorted(races)], "race_buffers": sorted(buffers),
            "uaf_lines": sorted(dead), "deadlock": deadlock}
