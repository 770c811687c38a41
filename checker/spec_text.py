"""Writing `.sched` text: names, durations, sizes and accesses as the language spells them.

The importers, the Python builder (`checker/api.py`) and the optimizer's spec synthesis all
produce spec text (the first two load it back through the front end, so that what they build
is exactly what the text says). This module is the one place that knows how to spell things.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
RESERVED = frozenset({"for", "let", "host", "sync", "notify", "await", "alloc", "free", "all"})
"""Words that can never be names: a statement could start with either meaning."""

DURATION = re.compile(r"[0-9]+(\.[0-9]+)?(ns|us|ms|s)\Z")
SIZE = re.compile(r"[0-9]+(B|KiB|MiB|GiB|TiB|KB|MB|GB|TB)\Z")
MAX_NAME = 64
MAX_DURATION_NS = 10**15  # about 11.5 days: the longest duration the language accepts

UNSAFE = re.compile(r"[^A-Za-z0-9_]+")
"""Runs of characters a name cannot hold."""


def is_name(text: str) -> bool:
    """A name the language accepts for a declaration or a kernel."""
    return bool(NAME.match(text)) and text not in RESERVED


def safe_name(text: str, fallback: str = "op") -> str:
    """`text` turned into a valid name: other characters become `_`, never reserved, short."""
    name = UNSAFE.sub("_", text).strip("_")[:MAX_NAME].rstrip("_")
    if not name:
        name = fallback
    if name[0].isdigit():
        name = f"{fallback}_{name}"
    if name in RESERVED:
        name += "_"
    return name


def duration_text(ns: int) -> str:
    """Whole nanoseconds as the shortest exact duration (`5us`, `1500ns`, `2ms`)."""
    if ns < 0:
        raise ValueError(f"negative duration: {ns} ns")
    for unit, scale in (("s", 10**9), ("ms", 10**6), ("us", 10**3)):
        if ns and ns % scale == 0:
            return f"{ns // scale}{unit}"
    return f"{ns}ns"


def size_text(size: int) -> str:
    """Bytes as the shortest exact size (`4MiB`, `1000B`)."""
    if size < 0:
        raise ValueError(f"negative size: {size}")
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size and size % scale == 0:
            return f"{size // scale}{unit}"
    return f"{size}B"


def access_text(name: str, size: int, start: int, end: int) -> str:
    """`name` for the whole buffer, `name[start:end]` for a byte range of it."""
    if start <= 0 and end >= size:
        return name
    return f"{name}[{start}:{end}]"


def rw_text(reads, writes) -> str:
    """` reads a, b writes c` (empty when there are none); the lists keep their order."""
    out = ""
    if reads:
        out += " reads " + ", ".join(reads)
    if writes:
        out += " writes " + ", ".join(writes)
    return out


MAX_COMMENT_CHARS = 300
"""A comment's length at most: a trace's names are not bounded (an operator's signature can
run to many kilobytes), and an imported spec must stay within the size every command reads."""


def comment_text(text: str) -> str:
    """A comment safe to put after `#`: one line, of at most MAX_COMMENT_CHARS characters."""
    line = " ".join(str(text).split())
    return line if len(line) <= MAX_COMMENT_CHARS else line[:MAX_COMMENT_CHARS - 3] + "..."


@dataclass(slots=True)
class ThreadText:
    name: str
    comment: str = ""
    lines: list[str] = field(default_factory=list)
    """Statement and comment lines, without indentation."""


@dataclass(slots=True)
class SpecText:
    """A spec assembled piece by piece, rendered once: header comments, declarations, threads."""

    title: str | None = None
    header: list[str] = field(default_factory=list)
    declarations: list[str] = field(default_factory=list)
    threads: list[ThreadText] = field(default_factory=list)
    expectations: list[str] = field(default_factory=list)

    def render(self) -> str:
        out: list[str] = []
        for line in self.header:
            out.append(f"# {comment_text(line)}" if line else "#")
        if self.title is not None:
            if out:
                out.append("")
            out.append(f'spec "{self.title}"')
        if self.declarations:
            out.append("")
            out.extend(self.declarations)
        for thread in self.threads:
            out.append("")
            opening = f"thread {thread.name} {{"
            if thread.comment:
                opening += f"  # {comment_text(thread.comment)}"
            out.append(opening)
            out.extend(f"  {line}" for line in thread.lines)
            out.append("}")
        if self.expectations:
            out.append("")
            out.extend(self.expectations)
        return "\n".join(out) + "\n"


def title_text(text: str) -> str:
    """A title the language accepts: one line, no double quotes."""
    return comment_text(text).replace('"', "'")
