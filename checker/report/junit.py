"""JUnit XML output (`check --format junit`), as Jenkins, GitLab and other CI servers read it.

One `<testsuite>` per run. Each file gives one `<testcase>` per `expect` line, plus one for
everything no expectation covers: "no findings" for a file without `expect` lines, "no
unexpected findings" otherwise. A file that cannot be loaded is one testcase with an
`<error>`. Failures carry the file's text report. An `expect` line that unknown answers leave
open is an `<error>` (under --allow-unknown, `<skipped>`), and so is the testcase for
everything else when unknown answers no expectation speaks for are all that stands in its way.
Every testcase passes or is skipped exactly when the file passes (exit status 0).
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from pathlib import Path

from checker.codes import Code, Severity
from checker.findings import QUESTION_OF, FileReport, FindingKind, Status, unknown_concerns
from checker.ir import ExpectKind
from checker.report.frames import xml_text
from checker.report.sarif import checkout_relative
from checker.report.text import plain_report

SUITE = "streamproof"
NO_FINDINGS = "no findings"
NO_OTHER_FINDINGS = "no unexpected findings"

_COVERS = {
    ExpectKind.NO_RACE: (FindingKind.RACE,),
    ExpectKind.NO_DEADLOCK: (FindingKind.DEADLOCK,),
    ExpectKind.NO_USE_AFTER_FREE: (FindingKind.USE_AFTER_FREE, FindingKind.USE_BEFORE_ALLOC),
    ExpectKind.NO_MISMATCH: (FindingKind.COLLECTIVE_MISMATCH,),
}


def _classname(path: str) -> str:
    """`specs/a.sched` -> `specs.a` (CI servers show the part after the last dot as the class).
    The path is normalised first, as SARIF's: relative to the working directory when inside
    it (`./specs/`, `specs//` and an absolute path there give `specs.a` too), else absolute,
    since CI servers keep a test's history by its class and name."""
    if "\\" not in path:  # (a Windows path stays as written)
        relative = checkout_relative(path, Path(os.path.abspath(os.getcwd())))
        path = os.path.abspath(path) if relative is None else relative.as_posix()
    stem = path[: -len(".sched")] if path.endswith(".sched") else path
    return xml_text(stem.replace("\\", "/").strip("/").replace(".", "_").replace("/", "."))


def _expectation_text(report: FileReport, expectation) -> str:
    span = expectation.span
    text = " ".join(report.source[span.start:span.end].split()) if report.source else ""
    if text.startswith("expect"):
        return text
    what = expectation.kind.value + (f" on {expectation.buffer}" if getattr(expectation, "buffer", None) else "")
    return f"expect {what}"


Case = tuple[str, "str | None", "str | None", "str | None", "int | None"]


def testcases(report: FileReport, allow_unknown: bool = False) -> list[Case]:
    """(name, outcome, code, message, line) per testcase of one file; outcome None (passed),
    `failure`, `error`, or `skipped` (an `expect` line unknown answers leave open, under
    --allow-unknown; otherwise that is an error)."""
    if report.program is None:
        first = report.diagnostics[0] if report.diagnostics else None
        return [(NO_FINDINGS, "error", first.code.value if first else Code.SP001.value,
                 first.message if first else "the spec cannot be loaded", None)]
    program = report.program
    cases = []
    names: dict[str, int] = {}
    unmet = {d.primary_span: d for d in report.diagnostics if d.code is Code.SP401 and d.primary_span}
    covered: set[FindingKind] = set()
    for number, expectation in enumerate(program.expectations):
        name = _expectation_text(report, expectation)
        names[name] = names.get(name, 0) + 1
        if names[name] > 1:
            name = f"{name} (line {expectation.span.line})"
        diagnostic = unmet.get(expectation.span)
        if diagnostic is None and number in report.undecided:
            unknown = next((f for f in report.findings if unknown_concerns(
                f, QUESTION_OF[expectation.kind], expectation.span.line)), None)
            cases.append((name, "skipped" if allow_unknown else "error", Code.SP301.value,
                          "undecided: " + (unknown.message if unknown else "an answer it rests on is unknown"),
                          expectation.span.line))
            continue
        cases.append((name, "failure" if diagnostic else None, Code.SP401.value if diagnostic else None,
                      diagnostic.message if diagnostic else None, expectation.span.line))
        covered.update(_COVERS.get(expectation.kind, ()))
    others = [f for f in report.findings
              if f.fails(allow_unknown) and f.kind not in covered and f.kind is not FindingKind.UNKNOWN]
    # Unknown answers that no undecided `expect` line reports leave "no (unexpected) findings"
    # undecided, as they leave an `expect` line: an error, or skipped under --allow-unknown.
    undecided = [e for number, e in enumerate(program.expectations) if number in report.undecided]
    claimed = {kind for e in program.expectations for kind in _COVERS.get(e.kind, ())}  # (decided or not)
    open_questions = [f for f in report.findings if f.kind is FindingKind.UNKNOWN
                      and not _answered_elsewhere(f, undecided, claimed)]
    errors = [d for d in report.diagnostics if d.severity is Severity.ERROR and d.code is not Code.SP401]
    name = NO_OTHER_FINDINGS if program.expectations else NO_FINDINGS
    if errors:
        cases.append((name, "error" if report.status is Status.ERROR else "failure", errors[0].code.value,
                      errors[0].message, None))
    elif others:
        count = len(others)
        cases.append((name, "failure", others[0].code.value,
                      f"{count} finding{'s' * (count != 1)}: {others[0].message}", None))
    elif open_questions:
        count = len(open_questions)
        cases.append((name, "skipped" if allow_unknown else "error", Code.SP301.value,
                      f"undecided ({count} unknown answer{'s' * (count != 1)}): {open_questions[0].message}",
                      None))
    else:
        cases.append((name, None, None, None, None))
    return cases


_KINDS_OF_QUESTION = {QUESTION_OF[kind]: covers for kind, covers in _COVERS.items()}
"""The finding kinds each question (race, use-after-free, ...) can give: what the `expect no`
line on it covers."""


def _answered_elsewhere(unknown, undecided: list, covered: set[FindingKind]) -> bool:
    """Whether an unknown answer leaves only `expect` lines open, not "no (unexpected)
    findings": one about a single question that an undecided `expect` line on it reports,
    or whose findings `expect no ...` lines cover. One about every question (a search
    stopped, a budget spent) also leaves the questions no line covers open."""
    about = unknown.detail.get("about")
    if about == "makespan":
        return True  # (no finding of "no unexpected findings" rests on a makespan)
    questions = [about] if about is not None else list(_KINDS_OF_QUESTION)
    if about is not None and any(unknown_concerns(unknown, QUESTION_OF[e.kind], e.span.line) for e in undecided):
        return True
    return all(set(_KINDS_OF_QUESTION[q]) <= covered for q in questions)


def junit_xml(reports: list[FileReport], allow_unknown: bool = False) -> str:
    """The JUnit XML document of a `check` run."""
    suite = ET.Element("testsuite", name=SUITE)
    counts = {"tests": 0, "failure": 0, "error": 0, "skipped": 0}
    for report in reports:
        details = None
        for name, outcome, code, message, line in testcases(report, allow_unknown):
            counts["tests"] += 1
            case = ET.SubElement(suite, "testcase", classname=_classname(report.path), name=xml_text(name),
                                 file=xml_text(report.path))
            if line is not None:
                case.set("line", str(line))
            if outcome is not None:
                counts[outcome] += 1
                if details is None:
                    details = xml_text(plain_report(report))
                element = ET.SubElement(case, outcome, message=xml_text(f"{code}: {message}"), type=code or outcome)
                element.text = details
    for key, value in (("tests", counts["tests"]), ("failures", counts["failure"]),
                       ("errors", counts["error"]), ("skipped", counts["skipped"])):
        suite.set(key, str(value))
    root = ET.Element("testsuites", name=SUITE, tests=suite.get("tests"), failures=suite.get("failures"),
                      errors=suite.get("errors"))
    root.append(suite)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=False).join(
        ('<?xml version="1.0" encoding="UTF-8"?>\n', "\n"))
