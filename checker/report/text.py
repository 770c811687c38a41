"""Human-readable output: one block per diagnostic or finding, with code frames and help."""

from __future__ import annotations

from collections import Counter

from rich.markup import escape

from checker.codes import Code, Severity
from checker.diagnostics import Diagnostic
from checker.findings import FileReport, Finding, FindingKind, Status, expectation_span
from checker.ir import Program, loop_text
from checker.report.frames import Mark, frame, gutter_width

STYLES = {
    "error": "bold red", "warning": "bold yellow", "note": "bold cyan", "gutter": "bold blue",
    "primary": "bold red", "secondary": "bold blue", "help": "bold", "source": "", "ok": "bold green",
    "dim": "dim",
}


def _style(text: str, kind: str) -> str:
    # (always inside a tag: `escape` doubles a trailing backslash so that it cannot escape
    # what follows, which only a closing tag turns back into one: `s: kernel k \`)
    return f"[{STYLES.get(kind) or 'none'}]{escape(text)}[/]"


def _location(path: str, line: int, column: int) -> str:
    return f"{path}:{line}:{column}"


def _aligned(lines: list[str], source: str, marks: list[Mark]) -> list[str]:
    """The notes and helps with their `=` under the frame's `|`, as rustc writes them."""
    pad = " " * gutter_width(source, marks)
    return [pad + line[1:] if line.startswith("  = ") else line for line in lines]


def render_diagnostic(path: str, source: str, diagnostic: Diagnostic) -> list[str]:
    severity = diagnostic.severity.value
    span = diagnostic.primary_span
    where = _location(path, span.line, span.column) if span else path
    head = f"{escape(where)}: {_style(f'{severity}[{diagnostic.code.value}]', severity)}: {_style(diagnostic.message, 'help')}"
    marks = [Mark(a.span, a.label, a.primary) for a in diagnostic.annotations]
    framed = frame(source, marks, _style)
    out = [head] + framed
    for note in diagnostic.notes:
        out.append(f"  = {_style('note', 'help')}: {escape(note)}")
    if diagnostic.help:
        out.append(f"  = {_style('help', 'help')}: {escape(diagnostic.help)}")
    return _aligned(out, source, marks) if framed else out


STUCK_SHOWN = 12
"""A deadlock's text report lists this many stuck statements (the engines put first what holds
the rest); JSON and SARIF list every one."""


def _finding_marks(program: Program, finding: Finding) -> list[Mark]:
    marks = []
    statements = finding.statements
    if finding.kind is FindingKind.DEADLOCK:
        statements = tuple(dict.fromkeys(item.statement for item in finding.stuck))[:STUCK_SHOWN] or statements
    for position, index in enumerate(statements):
        statement = program.statements[index]
        if finding.kind is FindingKind.RACE:
            label = ("first access" if position == 0 else "second access") + f": {program.describe(statement)}"
        elif finding.kind is FindingKind.DEADLOCK:
            label = "stuck here"
        elif finding.kind in (FindingKind.USE_AFTER_FREE, FindingKind.USE_BEFORE_ALLOC):
            label = "this access" if position == 0 else "the free"
        else:
            label = program.describe(statement)
        mark = Mark(statement.span, label, position == 0 or finding.kind is FindingKind.DEADLOCK)
        if mark not in marks:  # statements lowered from one (a cudaFree's sync and free) share a span
            marks.append(mark)
        if statement.launch is not None and finding.kind is not FindingKind.DEADLOCK:
            launch = Mark(program.statements[statement.launch].span, "the graph launch that runs it", False)
            if all(m.span != launch.span for m in marks):
                marks.append(launch)
    expectation = expectation_span(program, finding)
    if expectation is not None:
        marks.append(Mark(expectation, "this expectation", True))
    return marks


def _timeline(program: Program, finding: Finding, limit: int = 10) -> list[str]:
    steps = finding.witness.steps if finding.witness else ()
    if not steps:
        return []
    involved = set(finding.statements)
    shown = steps[-limit:] if len(steps) > limit + 2 else steps  # (no "the last 10 of 11")
    out = [f"  = {_style('witness', 'help')}: an execution of {len(steps)} steps"
           + (f"; the last {len(shown)}:" if len(shown) < len(steps) else ":")]
    first = len(steps) - len(shown)
    for offset, step in enumerate(shown):
        statement = program.statements[step.statement]
        # the loop variables tell one iteration's step from another's on the same line
        loops = loop_text(statement.bindings)
        text = (f"{first + offset + 1:>6}. {step.kind.value:<8} line {statement.span.line:<4} "
                f"{program.describe(statement)}" + (f" {loops}" if loops else ""))
        out.append("      " + _style(text, "primary" if step.statement in involved else "dim"))
    return out


ELEMENTS_SHOWN = 8
"""Elements of one finding named in its note; JSON lists every one."""


def render_finding(report: FileReport, finding: Finding, frames: bool = True, allow_unknown: bool = False) -> list[str]:
    """A finding's block of lines; without `frames`, its first line alone. An unknown answer
    is an error, as it fails the file, unless `--allow-unknown` lets it pass."""
    program: Program = report.program_of(finding)
    severity = "note" if finding.expected else "error" if finding.fails(allow_unknown) else "warning"
    marks = _finding_marks(program, finding)
    where = _location(report.path, marks[0].span.line, marks[0].span.column) if marks else report.path
    tag = f"{severity}[{finding.code.value}]"
    suffix = " (expected)" if finding.expected else ""
    out = [f"{escape(where)}: {_style(tag, severity)}: {_style(finding.message + suffix, 'help')}"]
    if not frames:
        return out
    framed = frame(report.source, marks, _style)
    out += framed
    if finding.instances > 1 and finding.kind is FindingKind.UNKNOWN:
        out.append(f"  = {_style('note', 'help')}: {finding.instances} undecided questions like this one "
                   "(loop instances of the same statements), reported once")
    elif finding.undecided:
        out.append(f"  = {_style('note', 'help')}: at least {finding.instances:,} instance(s) of this pair (the same lines, "
                   f"repeated by loops or thread arrays); {finding.undecided:,} more instance pair(s) were left undecided (the solver's "
                   "budget ran out, it did not check the program, or they were past the most race questions it asks of one "
                   "program)")
    elif finding.instances > 1:
        what = "pair" if len(finding.statements) > 1 else "statement"
        lines = "lines" if len(finding.statements) > 1 else "line"
        out.append(f"  = {_style('note', 'help')}: {finding.instances} instances of this {what} "
                   f"(the same {lines}, repeated by loops or thread arrays)")
    if len(finding.elements) > 1:
        shown = ", ".join(f"`{escape(m)}`" for m in finding.elements[:ELEMENTS_SHOWN])
        more = f" and {len(finding.elements) - ELEMENTS_SHOWN:,} more" if len(finding.elements) > ELEMENTS_SHOWN else ""
        out.append(f"  = {_style('note', 'help')}: the memories it touches: {shown}{more} "
                   "(`elements` in `--format json`)")
    left = finding.detail.get("not_expected")
    if left:
        named = ", ".join(f"`{escape(m)}`" for m in left)
        out.append(f"  = {_style('note', 'help')}: no `expect` line asks for it on {named}, "
                   "so it fails the check there")
    for item in finding.stuck[:STUCK_SHOWN]:
        statement = program.statements[item.statement]
        loops = loop_text(statement.bindings)
        out.append(f"  = {_style('stuck', 'help')}: line {statement.span.line} {escape(program.describe(statement))}"
                   f"{' ' + escape(loops) if loops else ''}: {escape(item.waits_for)}")
    if len(finding.stuck) > STUCK_SHOWN:
        out.append(f"  = {_style('stuck', 'help')}: ... and {len(finding.stuck) - STUCK_SHOWN} more stuck "
                   "(`--format json` lists every one)")
    explanation = finding.detail.get("explanation")
    if explanation:
        out.append(f"  = {_style('replayed', 'help')}: {escape(str(explanation))}")
    out += _timeline(program, finding)
    if finding.help:
        out.append(f"  = {_style('help', 'help')}: {escape(finding.help)}")
    return _aligned(out, report.source, marks) if framed else out


def failing(report: FileReport, finding: Finding, allow_unknown: bool = False) -> bool:
    """Whether a finding makes its file fail (not asked for by `expect`, not an allowed unknown)."""
    return finding.fails(allow_unknown)


WARNINGS_SHOWN = 20
"""Warnings of one code framed per file; the rest are counted in one line (JSON lists all):
a spec that declares 10,000 streams and uses one printed 10,000 frames."""


def shown_diagnostics(diagnostics) -> tuple[list, dict[str, int]]:
    """The diagnostics to frame, in source order (every error; the first WARNINGS_SHOWN
    warnings of each code), and how many warnings of each code are left out."""
    shown, left, seen = [], {}, {}
    for diagnostic in sorted(diagnostics, key=lambda d: d.sort_key()):
        code = diagnostic.code.value
        if diagnostic.severity is Severity.WARNING:
            seen[code] = seen.get(code, 0) + 1
            if seen[code] > WARNINGS_SHOWN:
                left[code] = left.get(code, 0) + 1
                continue
        shown.append(diagnostic)
    return shown, left


def left_out(path: str, left: dict[str, int]) -> list[str]:
    return [f"{escape(path)}: {_style(f'warning[{code}]', 'warning')}: ... and {count:,} more like these "
            "(`--format json` lists every one)" for code, count in sorted(left.items())]


FINDINGS_FRAMED = 50
"""Findings of one file shown whole (code frame, replayed bytes, witness, help), in source
order; each one after them is one line (location, code, message), and JSON and SARIF list
every one whole. Three threads of 100 random statements have 3,000-3,600 races: framed,
that was 80,000 lines, which took longer to print (15 s) than the confirmation of every
witness (bench/README.md)."""


def _finding_line(report: FileReport, finding: Finding, allow_unknown: bool = False) -> str:
    """One finding in one line: where, its code and its message (`FINDINGS_FRAMED`)."""
    return render_finding(report, finding, frames=False, allow_unknown=allow_unknown)[0]


def render_report(report: FileReport, quiet: bool = False, allow_unknown: bool = False) -> list[str]:
    """Diagnostics and findings of one file in source order. `quiet` keeps only what makes the
    file fail: errors and failing findings (no warnings, no expected findings). Past
    `FINDINGS_FRAMED` findings, each is one line."""
    out: list[str] = []
    items: list[tuple[tuple, Diagnostic | Finding | list[str]]] = []
    shown, left = shown_diagnostics(report.diagnostics)
    for diagnostic in shown:
        if quiet and diagnostic.severity is not Severity.ERROR:
            continue
        items.append((diagnostic.sort_key(), diagnostic))
    if left and not quiet:
        items.append(((float("inf"),), left_out(report.path, left)))
    for finding in report.findings:
        if quiet and not failing(report, finding, allow_unknown):
            continue
        first = report.program_of(finding).statements[finding.statements[0]].span.start if finding.statements else -1
        items.append(((first, False, finding.code.value), finding))
    framed = 0
    concise: list[str] = []
    for _, item in sorted(items, key=lambda item: item[0]):
        if isinstance(item, Diagnostic):
            out.extend(render_diagnostic(report.path, report.source, item))
        elif isinstance(item, Finding) and framed >= FINDINGS_FRAMED:
            concise.append(_finding_line(report, item, allow_unknown))
            continue
        elif isinstance(item, Finding):
            framed += 1
            out.extend(render_finding(report, item, allow_unknown=allow_unknown))
        else:
            out.extend(item)
        out.append("")
    if concise:
        out.append(f"{escape(report.path)}: {_style('note', 'note')}: {len(concise):,} more finding"
                   f"{'s' * (len(concise) != 1)}, one line each (the first {FINDINGS_FRAMED} are shown whole; "
                   "`--format json` gives every one with its witness):")
        out.extend(concise)
        out.append("")
    return out


def summary(reports: list[FileReport]) -> str:
    errors = sum(1 for r in reports if r.status is Status.ERROR)
    failing = sum(1 for r in reports if not r.passed and r.status is not Status.ERROR)
    findings = sum(len(r.findings) for r in reports)
    warnings = sum(1 for r in reports for d in r.diagnostics if d.severity is Severity.WARNING)
    parts = [f"{len(reports)} file{'s' * (len(reports) != 1)} checked"]
    if findings:
        kinds = Counter(finding.kind for report in reports for finding in report.findings)
        # Of several kinds, each is counted: thousands of races beside a few undecided questions.
        each = ", ".join(f"{kind.value} {kinds[kind]:,}" for kind in FindingKind if kind in kinds)
        each = f" ({each})" if len(kinds) > 1 else ""
        parts.append(f"{findings:,} finding{'s' * (findings != 1)}{each}")
    unmet = sum(1 for r in reports for d in r.diagnostics if d.code is Code.SP401)
    if unmet:
        parts.append(f"{unmet} unmet expectation{'s' * (unmet != 1)}")
    if warnings:
        parts.append(f"{warnings} warning{'s' * (warnings != 1)}")
    if errors:
        parts.append(f"{errors} with errors")
    if not errors and not failing:
        return _style("ok", "ok") + ": " + ", ".join(parts)
    return _style("failed", "error") + ": " + ", ".join(parts)


def plain(line: str) -> str:
    """A rendered line without its style markup (for files, JUnit and pytest reports)."""
    from rich.text import Text

    return Text.from_markup(line, emoji=False).plain


def plain_report(report: FileReport) -> str:
    """The text report of one file as plain text, without colour."""
    return "\n".join(plain(line) for line in render_report(report)).rstrip() + "\n"
