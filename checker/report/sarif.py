"""SARIF 2.1.0 output (`check --format sarif`), as GitHub code scanning reads it.

One run; one rule per diagnostic code (`SP001` ... `SP402`); one result per finding and per
diagnostic. A race's first access is the result's location and its second access a related
location; a witness becomes a code flow, the execution step by step. Findings an `expect`
line asks for are reported as suppressed in source, so code scanning does not raise them.
Columns count Unicode code points and end columns are exclusive, as in the JSON output.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from urllib.parse import quote

from checker import __version__
from checker.codes import Code, Severity
from checker.diagnostics import Diagnostic
from checker.findings import FileReport, Finding, FindingKind, expectation_span
from checker.ir import Program, Span, loop_text

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
MAX_FLOW_STEPS = 200
"""Longer witnesses keep their last steps (where the finding happens)."""
MAX_FLOW_TOTAL = 100_000
"""Thread-flow locations in one log. Once the results before have used them up, each later
result's flow keeps its last SHORT_FLOW_STEPS steps. GitHub code scanning refuses a SARIF
file of over 10 MB once gzip-compressed: the 3,598 races of three threads of 100 random
statements, 200 steps each, made 196 MB (10.6 MB compressed); now 40.5 MB (2.0 MB)."""
SHORT_FLOW_STEPS = 10
STDIN = "stdin"
"""The artifact of a spec read from standard input (with no `--stdin-filename`)."""
MAX_RESULTS = 25_000
"""Results in one log, at most: code scanning refuses a run with more. The rest are left
out, counted in a notification of the invocation (JSON lists every one)."""

FIXES: dict[str, str] = {
    "SP001": "Pass the right path; save the file as UTF-8.",
    "SP002": "Write the statement as the message says; docs/language.md gives the exact form of each statement.",
    "SP003": "Declare at least a device, or check that the right file was passed.",
    "SP004": "Generate smaller specs, or use `for` loops instead of writing every step out.",
    "SP010": "Declare the name at the top level, or correct its spelling.",
    "SP011": "Rename one of them. A device has at most one legacy default stream.",
    "SP012": "Use a name of the right kind (`record`/`wait`/`reset` take events, `notify`/`await` take notifies).",
    "SP013": "Correct the loop bounds or the array size.",
    "SP014": "Correct the bounds: `0 <= lo < hi <= size`, the upper bound excluded.",
    "SP015": "Pick an element (`x[i]`), write byte ranges as `[lo:hi]`, and `alloc`/`free` whole buffers.",
    "SP016": "Model it as host code: `host memcpy reads b writes a`.",
    "SP017": "Declare the event with `flag` if it is a flag event, or drop the `reset`.",
    "SP018": "Model fewer iterations (races and deadlocks usually show in two or three), or raise --max-statements.",
    "SP019": "Guard the divisor, or start the loop at 1.",
    "SP020": "Use a value in range.",
    "SP021": "Issue the collective on the member stream of this rank, or add the stream to the comm.",
    "SP022": "Pick another name.",
    "SP023": "Make one of the aliases name a buffer.",
    "SP024": "List each engine once, with a count from 1 to 4096.",
    "SP050": "Add the missing `record`, or remove the wait.",
    "SP051": "Remove the declaration, or use it where it was meant to be used.",
    "SP052": "Add the `notify`, or remove the `await`.",
    "SP101": "Order the two accesses: record an event after the first and wait for it before the second, "
             "or put both on one stream, or sync in between.",
    "SP102": "Order every use before the free: record an event after the last use and wait for it before the free.",
    "SP103": "Order the `alloc` before every use (same stream, an event, or a sync).",
    "SP201": "Break the cycle of waits the finding lists; issue collectives in the same order on every rank.",
    "SP202": "Make every rank issue the same sequence of collectives with the same sizes.",
    "SP301": "Raise --timeout, --budget or --max-states, shrink loops, or drop --exhaustive. "
             "An unknown answer is never reported as safe.",
    "SP401": "If the bug was fixed, drop the expectation; otherwise the spec no longer models what it should.",
    "SP402": "This is a bug in streamproof: please report it with the spec.",
}


def _level(code: Code) -> str:
    """SP050-SP099 are the warnings about a spec (docs/codes.md). SP301, an unknown answer,
    is an error: it fails the run (a warning under `--allow-unknown`, `_finding_result`)."""
    if 50 <= int(code.value[2:]) < 100:
        return "warning"
    return "error"


def _name(code: Code) -> str:
    words = "".join(c if c.isalnum() else " " for c in code.summary).split()
    return "".join(w[:1].upper() + w[1:] for w in words)


def rules() -> list[dict]:
    """One reporting descriptor per code, in code order (`ruleIndex` is the position)."""
    out = []
    for code in Code:
        summary = code.summary
        fix = FIXES.get(code.value, "See docs/codes.md.")
        text = f"{code.value}: {summary}. {fix}"
        out.append({
            "id": code.value,
            "name": _name(code),
            "shortDescription": {"text": summary[:1].upper() + summary[1:]},
            "fullDescription": {"text": text},
            "help": {"text": text, "markdown": f"**{code.value}: {summary}**\n\n{fix}\n\n"
                                              f"Every code is explained in docs/codes.md."},
            "defaultConfiguration": {"level": _level(code)},
            "properties": {"tags": ["concurrency" if code.value.startswith(("SP1", "SP2")) else
                                    "correctness" if code.value.startswith(("SP3", "SP4")) else "spec"]},
        })
    return out


def checkout_relative(path: str, base: Path) -> Path | None:
    """`path` relative to `base` (an absolute directory) when it lies below it, else None:
    SARIF and JUnit name a file by it, or by its absolute path."""
    try:
        return Path(os.path.abspath(path)).relative_to(base)
    except ValueError:
        return None


def _uri(path: str, base: Path) -> str:
    """A path relative to `base` when it lies below it (as code scanning wants), else a file URI.
    Either holds the bytes of the file's name, percent-encoded (`FileReport.file`: it may hold
    bytes that are not UTF-8)."""
    relative = checkout_relative(path, base)
    if relative is None:
        return Path(os.path.abspath(path)).as_uri()
    return quote(os.fsencode(relative.as_posix()))


def _region(span: Span) -> dict:
    region = {"startLine": max(span.line, 1), "startColumn": max(span.column, 1),
              "endLine": max(span.end_line, span.line, 1)}
    end_column = span.end_column
    if region["endLine"] == region["startLine"]:
        end_column = max(end_column, region["startColumn"])  # (equal: an insertion point, SARIF 3.30.2)
    region["endColumn"] = max(end_column, 1)
    return region


def _artifact(uri: str) -> dict:
    """A relative URI is relative to the checkout (%SRCROOT%); an absolute one (a file outside
    it) stands alone, as SARIF 3.4.4 requires, and so does standard input, no file there."""
    return {"uri": uri} if uri.startswith("file:") or uri == STDIN else {"uri": uri, "uriBaseId": "%SRCROOT%"}


def _location(uri: str, span: Span | None, message: str = "", identifier: int | None = None) -> dict:
    """Where a result is; one about the whole file (an unknown answer with no statement) is on
    its first line, since code scanning places every result on a line."""
    physical: dict = {"artifactLocation": _artifact(uri),
                      "region": _region(span) if span is not None else {"startLine": 1}}
    location: dict = {"physicalLocation": physical}
    if identifier is not None:
        location["id"] = identifier
    if message:
        location["message"] = {"text": message}
    return location


def _fingerprint(*parts: object) -> str:
    return hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).hexdigest()[:32]


_NUMBER = re.compile(r"\d[\d,.]*")


def _words(message: str) -> str:
    """A message without its numbers, for a fingerprint: the lines it names move when lines
    are added above, and the counts of a run cut short by its budget change from run to run."""
    return _NUMBER.sub("#", message)


def _source_text(source: str, span: Span | None) -> str:
    if span is None or not source:
        return ""
    return " ".join(source[span.start:span.end].split())


def _finding_labels(finding: Finding) -> list[str]:
    labels = []
    for position in range(len(finding.statements)):
        if finding.kind is FindingKind.RACE:
            labels.append("first access" if position == 0 else "second access")
        elif finding.kind is FindingKind.DEADLOCK:
            labels.append("stuck here")
        elif finding.kind in (FindingKind.USE_AFTER_FREE, FindingKind.USE_BEFORE_ALLOC):
            labels.append("this access" if position == 0 else "the free")
        else:
            labels.append("involved")
    return labels


def _code_flow(program: Program, finding: Finding, uri: str, most: int = MAX_FLOW_STEPS) -> list[dict]:
    """The witness as a thread flow of its last `most` steps at most."""
    steps = finding.witness.steps if finding.witness else ()
    if not steps:
        return []
    involved = set(finding.statements)
    shown = steps[-most:]
    first = len(steps) - len(shown)
    locations = []
    for offset, step in enumerate(shown):
        statement = program.statements[step.statement]
        locations.append({
            "location": _location(uri, statement.span, f"{first + offset + 1}. {step.kind.value}: "
                                                       f"{program.describe(statement)}"
                                                       + (f" {loop_text(statement.bindings)}" if statement.bindings else "")),
            "executionOrder": first + offset + 1,
            "importance": "essential" if step.statement in involved else "unimportant",
        })
    text = f"an execution of {len(steps)} steps" + (f"; the last {len(shown)}" if first else "")
    return [{"message": {"text": text}, "threadFlows": [{"locations": locations}]}]


def _finding_result(report: FileReport, finding: Finding, uri: str, flow_steps: int = MAX_FLOW_STEPS,
                    allow_unknown: bool = False) -> dict:
    program: Program = report.program_of(finding)
    statements = [program.statements[i] for i in finding.statements if 0 <= i < len(program.statements)]
    labels = _finding_labels(finding)
    message = finding.message
    if finding.undecided:
        message += (f" (at least {finding.instances} instance(s) from loops or thread arrays; "
                    f"{finding.undecided} more left undecided)")
    elif finding.instances > 1:
        message += f" ({finding.instances} instances from loops or thread arrays)"
    if finding.help:
        message += f". Help: {finding.help}"
    result: dict = {
        "ruleId": finding.code.value,
        "ruleIndex": list(Code).index(finding.code),
        "level": ("warning" if finding.advisory or (finding.kind is FindingKind.UNKNOWN and allow_unknown)
                  else _level(finding.code)),  # (an expected one keeps its level; its suppression says why)
        "message": {"text": message},
        "locations": [_location(uri, statements[0].span if statements else expectation_span(program, finding),
                                f"{labels[0]}: {program.describe(statements[0])}" if statements else "")],
    }
    related, seen = [], set()
    # A deadlock's statements are its stuck ones: they are listed once, with what each waits for.
    for position, statement in enumerate(statements[1:] if not finding.stuck else [], start=1):
        key = (statement.span.start, statement.span.end, labels[position])
        if key in seen:
            continue
        seen.add(key)
        related.append(_location(uri, statement.span, f"{labels[position]}: {program.describe(statement)}",
                                 identifier=len(related) + 1))
    for item in finding.stuck:
        if not 0 <= item.statement < len(program.statements):
            continue
        statement = program.statements[item.statement]
        key = (statement.span.start, statement.span.end, item.waits_for)
        if key in seen:
            continue
        seen.add(key)
        related.append(_location(uri, statement.span, f"stuck: {program.describe(statement)}: {item.waits_for}",
                                 identifier=len(related) + 1))
    for statement in statements:  # (a graph's work: the launch that runs it, as the text report marks it)
        if statement.launch is None:
            continue
        launch = program.statements[statement.launch]
        key = (launch.span.start, launch.span.end, "launch")
        if key not in seen:
            seen.add(key)
            related.append(_location(uri, launch.span, f"the graph launch that runs {program.describe(statement)}",
                                     identifier=len(related) + 1))
    if related:
        result["relatedLocations"] = related
    flows = _code_flow(program, finding, uri, flow_steps)
    if flows:
        result["codeFlows"] = flows
    result["partialFingerprints"] = {"streamproof/v1": _fingerprint(
        finding.code.value, uri, finding.buffer, *(_source_text(report.source, s.span) for s in statements),
        # (a graph's work: the launch that ran it tells two launches' findings apart)
        *(_source_text(report.source, program.statements[s.launch].span) for s in statements if s.launch is not None),
        *(() if statements else (_words(finding.message),)))}  # (one about no statement: its words)
    if finding.instances > 1:
        result["occurrenceCount"] = finding.instances
    if finding.expected:
        result["suppressions"] = [{"kind": "inSource", "justification": "an `expect` line of the spec asks for it"}]
    properties = {"kind": finding.kind.value}
    if finding.buffer:
        properties["buffer"] = finding.buffer
    if finding.memory:
        properties["memory"] = finding.memory
    result["properties"] = properties
    return result


def _diagnostic_result(report: FileReport, diagnostic: Diagnostic, uri: str) -> dict:
    span = diagnostic.primary_span
    primary = next((a for a in diagnostic.annotations if a.primary), None)
    message = diagnostic.message + (f". Help: {diagnostic.help}" if diagnostic.help else "")
    result: dict = {
        "ruleId": diagnostic.code.value,
        "ruleIndex": list(Code).index(diagnostic.code),
        "level": "warning" if diagnostic.severity is Severity.WARNING else "error",
        "message": {"text": message},
        "locations": [_location(uri, span, primary.label if primary is not None else "")],
    }
    related, seen = [], set()
    for annotation in diagnostic.annotations:
        if annotation is primary:
            continue
        key = (annotation.span.start, annotation.span.end, annotation.label)
        if key in seen:
            continue
        seen.add(key)
        related.append(_location(uri, annotation.span, annotation.label, identifier=len(related) + 1))
    if related:
        result["relatedLocations"] = related
    result["partialFingerprints"] = {"streamproof/v1": _fingerprint(
        diagnostic.code.value, uri, _words(diagnostic.message), _source_text(report.source, span))}
    return result


def _cut_last(result: dict) -> int:
    """Which results a log cut to `MAX_RESULTS` leaves out first: suppressed ones (2), then
    warnings (1); errors (0) stay, so code scanning shows what failed the run."""
    return 2 if result.get("suppressions") else 0 if result["level"] == "error" else 1


def _number_repeated_fingerprints(results: list[dict]) -> None:
    """Two results whose fingerprint parts are the same (two races between statements of the
    same text on other lines) would be one alert to code scanning (SARIF 3.27.17: the
    fingerprint is the result's identity): the second and later get their occurrence number,
    in report order, as code scanning's own line hashes do."""
    seen: dict[str, int] = {}
    for result in results:
        fingerprints = result["partialFingerprints"]
        value = fingerprints["streamproof/v1"]
        count = seen[value] = seen.get(value, 0) + 1
        if count > 1:
            fingerprints["streamproof/v1"] = f"{value}:{count}"


def sarif_log(reports: list[FileReport], base: Path | None = None, exit_code: int | None = None,
              allow_unknown: bool = False) -> dict:
    """The SARIF log of a `check` run; paths are made relative to `base` (default: the working
    directory, where a CI job checks the repository out)."""
    base = Path(os.path.abspath(base or os.getcwd()))
    results = []
    artifacts: dict[str, int] = {}
    flows_left = MAX_FLOW_TOTAL
    for report in reports:
        uri = _uri(report.file or report.path, base) if report.path != "<stdin>" else STDIN
        artifacts.setdefault(uri, len(artifacts))
        for diagnostic in report.diagnostics:
            results.append(_diagnostic_result(report, diagnostic, uri))
        for finding in report.findings:
            result = _finding_result(report, finding, uri, MAX_FLOW_STEPS if flows_left > 0 else SHORT_FLOW_STEPS,
                                     allow_unknown)
            flows_left -= sum(len(flow["threadFlows"][0]["locations"]) for flow in result.get("codeFlows", ()))
            results.append(result)
    _number_repeated_fingerprints(results)
    for result in results:
        for location in result["locations"] + result.get("relatedLocations", []):
            artifact = location["physicalLocation"]["artifactLocation"]
            artifact["index"] = artifacts[artifact["uri"]]
    invocation: dict = {"executionSuccessful": not any(
        d.code is Code.SP402 for r in reports for d in r.diagnostics)}
    if len(results) > MAX_RESULTS:
        left = len(results) - MAX_RESULTS
        # (what fails the run first, then warnings, then what `expect` asked for; in report order)
        kept = sorted(sorted(range(len(results)), key=lambda i: _cut_last(results[i]))[:MAX_RESULTS])
        results[:] = [results[i] for i in kept]
        invocation["toolExecutionNotifications"] = [{"level": "warning", "message": {"text": (
            f"{left:,} more results were left out: code scanning takes at most {MAX_RESULTS:,} per run "
            "(`--format json` lists every one)")}}]
    if exit_code is not None:
        invocation["exitCode"] = exit_code
    return {
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {"name": "streamproof", "version": __version__, "semanticVersion": __version__,
                                "rules": rules()}},
            "originalUriBaseIds": {"%SRCROOT%": {"uri": base.as_uri().removesuffix("/") + "/"}},
            "artifacts": [{"location": _artifact(uri), "sourceLanguage": "sched",
                           "roles": ["analysisTarget"]} for uri in artifacts],
            "invocations": [invocation],
            "columnKind": "unicodeCodePoints",
            "results": results,
        }],
    }
