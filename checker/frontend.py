"""The front end as one call: bytes or text in, a `Program` or diagnostics out."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from checker.codes import Code
from checker.resources import deep_recursion, paused_gc, read_prefix
from checker.diagnostics import Diagnostic, SpecError, error
from checker.ir import Program
from checker.lower import DEFAULT_MAX_STATEMENTS, lower
from checker.parse import MAX_ERRORS, MAX_SOURCE_CHARS, SpecErrors, decode, parse_recovering


MAX_SHOWN_BYTES = 32 * 2**20


@dataclass(frozen=True, slots=True)
class Loaded:
    path: str
    source: str
    program: Program | None
    """None when the spec has an error; the error is among `diagnostics`."""
    diagnostics: tuple[Diagnostic, ...]
    variants: tuple[Program, ...] = ()
    """Every program the spec lowers to, one per combination of `choose` branches (and runtime
    alternative); `variants[0] is program`. Empty when there is no program."""
    file: str | None = None
    """The name of the file read, when `path` shows it otherwise (`inputs.shown`: bytes that
    are not UTF-8, control characters); a SARIF location holds the file's own name."""


def load_text(text: str, path: str = "<spec>", max_statements: int = DEFAULT_MAX_STATEMENTS) -> Loaded:
    """Parse and lower; every input error of the file (up to `MAX_ERRORS`) is reported, in
    source order: the parser goes on after a syntax error, and the lowering after an error in
    a declaration or statement."""
    errors: list[Diagnostic] = []
    parsed = None
    try:
        with paused_gc(), deep_recursion():
            parsed = parse_recovering(text)
            errors += parsed.errors
            if parsed.spec is not None and len(errors) < MAX_ERRORS:
                try:
                    lowered = lower(parsed.spec, path, text, max_statements, parsed.skipped,
                                    MAX_ERRORS - len(errors))
                except SpecErrors as exc:
                    errors += exc.diagnostics
                except SpecError as exc:
                    errors.append(exc.diagnostic)
    except RecursionError:
        errors.append(error(Code.SP004, "spec is nested too deeply to analyse", None))
    if errors or parsed is None or parsed.spec is None:
        errors.sort(key=lambda d: d.sort_key())
        if len(errors) >= MAX_ERRORS:  # say that there may be more
            errors[-1] = replace(errors[-1], notes=errors[-1].notes + (
                f"streamproof stops after {MAX_ERRORS} errors: fix these and check again",))
        return Loaded(path, text, None, tuple(errors))
    return Loaded(path, text, lowered.program, lowered.warnings, lowered.variants)


def load_bytes(data: bytes, path: str, max_statements: int = DEFAULT_MAX_STATEMENTS) -> Loaded:
    try:
        text = decode(data)
    except SpecError as exc:
        # Keep a printable copy of the text, so that the report can show the offending line.
        shown = data.removeprefix(b"\xef\xbb\xbf").decode("utf-8", "replace").replace("\0", "\N{REPLACEMENT CHARACTER}")
        return Loaded(path, shown if len(data) <= MAX_SHOWN_BYTES else "", None, (exc.diagnostic,))
    return load_text(text, path, max_statements)


def load_file(path: str | Path, max_statements: int = DEFAULT_MAX_STATEMENTS,
              shown: str | None = None) -> Loaded:
    """`shown`: the name reports give the file when it is not its own (`inputs.shown`: bytes
    that are not UTF-8, control characters); the result keeps the real one as `file`."""
    name = str(path) if shown is None else shown
    file = None if shown is None else str(path)
    try:
        data = read_prefix(path, MAX_SOURCE_CHARS)  # (never more: /dev/zero is a file too)
    except OSError as exc:
        return Loaded(name, "", None, (error(Code.SP001, f"cannot read {name}: {exc.strerror or 'cannot be read'}",
                                             None),), file=file)
    return replace(load_bytes(data, name, max_statements), file=file)
