"""Machine-readable output. The shape is a public contract, documented in the README."""

from __future__ import annotations

import json

from checker.diagnostics import Diagnostic
from checker.findings import FileReport, Finding
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
    out.update(span.to_json() if span else {"line": None, "column": None, "end_line": None, "end_column": None})
    out["labels"] = [
        {**a.span.to_json(), "label": a.label, "primary": a.primary} for a in diagnostic.annotations
    ]
    return out


def witness_json(program: Program, finding: Finding) -> dict | None:
    if finding.witness is None:
        return None
    out = finding.witness.to_json()
    out["timeline"] = [
        {"step": step.kind.value, "statement": step.statement,
         "line": program.statements[step.statement].span.line,
         "what": program.describe(program.statements[step.statement])}
        for step in finding.witness.steps
    ]
    return out


def finding_json(program: Program, finding: Finding) -> dict:
    statements = [program.statements[i] for i in finding.statements]
    out = {
        "kind": finding.kind.value,
        "code": finding.code.value,
        "message": finding.message,
        "buffer": finding.buffer,
        "memory": finding.memory,
        "instances": finding.instances,
        "expected": finding.expected,
        "locations": [s.span.to_json() for s in statements],
        "statements": list(finding.statements),
        "help": finding.help or None,
        "witness": witness_json(program, finding),
    }
    if finding.stuck:
        out["stuck"] = [
            {"statement": item.statement, "line": program.statements[item.statement].span.line,
             "what": program.describe(program.statements[item.statement]), "waits_for": item.waits_for}
            for item in finding.stuck
        ]
    if finding.variant:
        out["variant"] = program.variant
    if finding.detail:
        out["detail"] = {k: v for k, v in finding.detail.items() if _plain(v)}
    return out


def _plain(value) -> bool:
    return isinstance(value, (str, int, float, bool, list, dict, type(None)))


def report_json(report: FileReport) -> dict:
    return {
        "path": report.path,
        "status": report.status.value,
        "passed": report.passed,
        "findings": [finding_json(report.program_of(f), f) for f in report.findings],
        "diagnostics": [diagnostic_json(d) for d in report.diagnostics],
    }
