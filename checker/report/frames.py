"""Code frames: the source lines around a span with a caret underline, as rustc and ruff print."""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from checker.ir import Span


@dataclass(frozen=True, slots=True)
class Mark:
    span: Span
    label: str
    primary: bool


MAX_SHOWN = 120


def _groups(text: str, marks: list[Mark]) -> list[list[Mark]]:
    """The marks of one line, in groups that each fit one window of a long line (`_window`):
    a mark past the first window's end is shown under the line shown again around it."""
    if len(text) <= MAX_SHOWN:
        return [marks]
    groups: list[list[Mark]] = []
    start = None
    for mark in sorted(marks, key=lambda m: m.span.column):
        column = max(mark.span.column - 1, 0)
        if start is None or column >= start + MAX_SHOWN:
            start = max(0, column - 20)
            groups.append([])
        groups[-1].append(mark)
    return groups


def _window(text: str, marks: list[Mark]) -> tuple[str, int]:
    """A long line cut down to the part around its marks; returns it and the columns cut."""
    if len(text) <= MAX_SHOWN:
        return text, 0
    first = min(max(m.span.column - 1, 0) for m in marks)
    start = max(0, first - 20)
    shown = text[start:start + MAX_SHOWN]
    prefix = "..." if start else ""
    suffix = "..." if start + MAX_SHOWN < len(text) else ""
    return prefix + shown + suffix, start - len(prefix)


_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def xml_text(text: str) -> str:
    """`text` with every character XML 1.0 cannot hold (controls, lone surrogates) as U+FFFD:
    a spec's title or names may hold them, and the SVG and JUnit files must stay well-formed."""
    return _NOT_XML.sub("\N{REPLACEMENT CHARACTER}", text)


def printable(line: str) -> str:
    """The line with every tab, control and format character (escape sequences, bidi
    overrides, form feeds) shown as one space: the caret stays under its column, and the
    terminal shows the source rather than obeying it."""
    if line.isprintable():
        return line
    return "".join(" " if ch == "\t" or unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp") else ch
                   for ch in line)


def source_lines(source: str) -> list[str]:
    """The lines of a spec as its parser counts them: only `\n` ends a line (a `\r` before
    it is dropped). `str.splitlines` also breaks at form feeds, U+2028 and lone `\r`, which
    would show the wrong line above a caret. The last source's lines are kept: every
    diagnostic of one file frames from them (10,000 warnings re-split a large file for 10 s)."""
    global _split
    if _split[0] is not source:
        lines = [line.removesuffix("\r") for line in source.split("\n")]
        _split = (source, lines[:-1] if lines and lines[-1] == "" else lines)
    return _split[1]


_split: tuple[str | None, list[str]] = (None, [])


def _cells(text: str) -> int:
    """Terminal cells `text` takes: wide (CJK) characters take two, combining marks none,
    so a caret after a comment or title in Chinese stays under its token."""
    if text.isascii():
        return len(text)
    # (marks by category: Thai vowel signs and variation selectors combine with class 0)
    return sum(0 if unicodedata.category(ch) in ("Mn", "Me") or unicodedata.combining(ch)
               else 2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def gutter_width(source: str, marks: list[Mark]) -> int:
    """Digits of the highest line number a frame of `marks` shows."""
    lines = len(source_lines(source))
    return len(str(max(min(max(mark.span.line, 1), lines) for mark in marks)))


def frame(source: str, marks: list[Mark], style) -> list[str]:
    """Lines of a code frame. `style(text, kind)` colours a piece (kind: gutter, primary, secondary)."""
    lines = source_lines(source)
    if not marks or not lines:
        return []
    by_line: dict[int, list[Mark]] = {}
    for mark in marks:
        line = min(max(mark.span.line, 1), len(lines))
        by_line.setdefault(line, []).append(mark)
    width = gutter_width(source, marks)
    gutter = style(" " * width + " |", "gutter")
    out = [gutter]
    previous = None
    for number in sorted(by_line):
        if previous is not None and number > previous + 1:
            out.append(style("." * (width + 1), "gutter"))
        line = printable(lines[number - 1])
        for group in _groups(line, by_line[number]):
            out += _framed_line(line, number, width, group, gutter, style)
        previous = number
    out.append(gutter)
    return out


def _framed_line(line: str, number: int, width: int, marks: list[Mark], gutter: str, style) -> list[str]:
    """One source line (cut to the window around `marks`) and the underline of each mark."""
    text, shift = _window(line, marks)
    out = [style(f"{number:>{width}} |", "gutter") + " " + style(text, "source")]
    for mark in marks:
        start = max(mark.span.column - 1 - shift, 0)
        if mark.span.end_line == mark.span.line:
            end = max(mark.span.end_column - 1 - shift, start + 1)
        else:
            end = max(len(text), start + 1)
        end = min(end, max(len(text), start + 1))
        char = "^" if mark.primary else "-"
        kind = "primary" if mark.primary else "secondary"
        pad, length = _cells(text[:start]), max(_cells(text[start:end]), 1)
        underline = " " * pad + char * length + (f" {mark.label}" if mark.label else "")
        out.append(gutter + " " + style(underline, kind))
    return out
