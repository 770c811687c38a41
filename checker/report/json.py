"""Machine-readable output. The shape is a public contract, documented in the README."""

from __future__ import annotations

import json
import re

from checker.diagnostics import Diagnostic
from checker.findings import FileReport, Finding, FindingKind, expectation_span
from checker.ir import Program


PRETTY_UP_TO = 1 << 20
"""Output up to this many characters (compact) is written indented, for people; larger output
stays compact. Indenting makes Python's json module use its pure-Python encoder, which took
20 s for the 100 MB report of a 300-statement program with 1,600 races (the C encoder: 1 s)."""


def json_text(value) -> str:
    """`value` as JSON text: indented when small, compact when large (`PRETTY_UP_TO`)."""
    text = json.dumps(value)
    return json.dumps(value, indent=1) if len(text) <= PRETTY_UP_TO else text


def diagnostic_json(diagnostic: Diagnostic) -> dict:
    span = diagnostic.primary_span
    out = {
        "code": diagnostic.code.value,
        "severity": diagnostic.severity.value,
        "message": diagnostic.message,
        "help": diagnostic.help or None,
    }
    if diagnostic.notes:
        out["notes"] = list(diagnostic.notes)
    out.update(span.to_json() if span else {"line": None, "column": None, "end_line": None, "end_column": None})
    out["labels"] = [
        {**a.span.to_json(), "label": a.label, "primary": a.primary} for a in diagnostic.annotations
    ]
    return out


TIMELINE_STEPS = 1_000
"""Steps of a witness that its `timeline` describes, at most: the last ones (`timeline_from`
says where they begin; `steps` keeps every step, for `replay`). A loop with a bug in each of
its 50 iterations had 296 findings whose witnesses of thousands of steps each made 315 MB of
JSON, six sevenths of it timelines."""


def witness_json(program: Program, finding: Finding, names: dict[int, tuple[int, str, dict]] | None = None) -> dict | None:
    """The witness and its timeline. `names`: statement -> (line, description, loop), filled as
    it goes and shared by the findings of one program (3,600 witnesses of 330 steps each
    described the same 300 statements a million times)."""
    if finding.witness is None:
        return None
    names = {} if names is None else names
    out = finding.witness.to_json()
    timeline = out["timeline"] = []
    steps = finding.witness.steps
    if len(steps) > TIMELINE_STEPS:
        out["timeline_from"] = len(steps) - TIMELINE_STEPS
        steps = steps[-TIMELINE_STEPS:]
    for step in steps:
        named = names.get(step.statement)
        if named is None:
            statement = program.statements[step.statement]
            named = names[step.statement] = (statement.span.line, program.describe(statement),
                                              dict(statement.bindings))
        line = {"step": step.kind.value, "statement": step.statement, "line": named[0], "what": named[1]}
        if named[2]:  # (which iteration: the steps of two iterations of a line read alike otherwise)
            line["loop"] = named[2]
        timeline.append(line)
    return out


def _natural(name: str) -> list:
    """A sort key that puts `x[2]` before `x[10]` (each engine finds elements in its own order)."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def finding_json(program: Program, finding: Finding, names: dict[int, tuple[int, str, dict]] | None = None) -> dict:
    statements = [program.statements[i] for i in finding.statements]
    out = {
        "kind": finding.kind.value,
        "code": finding.code.value,
        "message": finding.message,
        "buffer": finding.buffer,
        "memory": finding.memory,
        "elements": sorted(finding.elements, key=_natural) or ([finding.memory] if finding.memory is not None else []),
        "instances": finding.instances,
        "undecided_instances": finding.undecided,
        "expected": finding.expected,
        "advisory": finding.advisory,
        "locations": [s.span.to_json() for s in statements] or [
            span.to_json() for span in (expectation_span(program, finding),) if span is not None],
        "statements": list(finding.statements),
        "help": finding.help or None,
        "witness": witness_json(program, finding, names),
    }
    launches = [program.launch_of(s) for s in statements]
    if any(launches):  # (a graph's work: the launch that ran it)
        out["launches"] = launches
    if finding.stuck:
        out["stuck"] = [
            {"statement": item.statement, "line": program.statements[item.statement].span.line,
             "what": program.describe(program.statements[item.statement]), "waits_for": item.waits_for}
            for item in finding.stuck
        ]
    if finding.variant or "variant" in finding.detail:  # (found in some branch combinations only)
        out["variant"] = program.variant
    if finding.detail:
        out["detail"] = {k: v for k, v in finding.detail.items() if _plain(v)}
    return out


def _plain(value) -> bool:
    return isinstance(value, (str, int, float, bool, list, dict, type(None)))


def verdict_json(report: FileReport) -> dict | None:
    """The findings in the shape of a conformance verdict (`tests/conformance/README.md`): the
    racing pairs of source lines, the declared buffers they race on, the lines that touch memory
    outside its lifetime, and whether some execution deadlocks. None for a spec with errors."""
    if report.program is None:
        return None
    races: set[tuple[int, ...]] = set()
    buffers: set[str] = set()
    dead: set[int] = set()
    deadlock = False
    for finding in report.findings:
        lines = [report.program_of(finding).statements[i].span.line for i in finding.statements]
        if finding.kind is FindingKind.RACE:
            races.add(tuple(sorted(lines[:2])))
            buffers.add(finding.buffer)
        elif finding.kind in (FindingKind.USE_AFTER_FREE, FindingKind.USE_BEFORE_ALLOC):
            dead.add(lines[0])
        elif finding.kind is FindingKind.DEADLOCK:
            deadlock = True
    return {"races": [list(pair) for pair in sorted(races)], "race_buffers": sorted(buffers),
            "uaf_lines": sorted(dead), "deadlock": deadlock}


def report_json(report: FileReport) -> dict:
    # Per program (by identity: a report's variants are programs of their own), its
    # statements' lines and descriptions (`witness_json`).
    names: dict[int, dict[int, tuple[int, str, dict]]] = {}
    return {
        "path": report.path,
        "status": report.status.value,
        "passed": report.passed,
        "verdict": verdict_json(report),
        "findings": [finding_json(report.program_of(f), f, names.setdefault(id(report.program_of(f)), {}))
                     for f in report.findings],
        "diagnostics": [diagnostic_json(d) for d in report.diagnostics],
        "undecided_expectations": [report.program.expectations[k].span.line for k in report.undecided],
    }
