"""The exceptions that cross module boundaries, in one place.

Each subclasses the builtin it matches, says when it is raised, and keeps its data as
fields. The modules that raise them re-export them, so `checker.diagnostics.SpecError`,
`checker.executor.IllegalStep`, `checker.inputs.InputError` and the like keep working.
Problems in the user's spec are diagnostics, not exceptions: `SpecError` only carries one
out of the front end, where it becomes part of the load result.

Not here yet: the optimizer's `EmitError` and `SolverUnavailable` (`checker/optimize/`), and
`checker.importers.command.InputError` (an unreadable trace file, a different class from
`InputError` below despite the name).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from checker.diagnostics import Diagnostic


class SpecError(Exception):
    """Raised inside the front end (decoding, parsing, lowering) to abandon a spec; carries
    the diagnostic to report. `checker.frontend` turns it into a load result."""

    def __init__(self, diagnostic: "Diagnostic") -> None:
        super().__init__(diagnostic.message)
        self.diagnostic = diagnostic


class IllegalStep(ValueError):
    """Raised by the executor (`Machine.apply`, `advance`, `advance_into`) when a step may
    not happen in the given state; `reason` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class InputError(ValueError):
    """A command line or configuration that names its inputs wrongly (`checker.inputs`);
    the message is for the user."""


class TraceError(ValueError):
    """A profiler trace that cannot be read (`checker.importers`); the message is one line
    for the user."""


class ClusterError(RuntimeError):
    """The cluster cannot be used (`checker.parallel`: dask missing, scheduler unreachable);
    the message is for the user."""


class SpecInvalid(ValueError):
    """Raised by the Python API (`checker.api`) when a built program does not load: keeps
    the spec text and the front end's diagnostics; the message names the first one."""

    def __init__(self, text: str, diagnostics: tuple) -> None:
        first = diagnostics[0] if diagnostics else None
        where = ""
        if first is not None and first.primary_span is not None:
            span = first.primary_span
            lines = text.split("\n")
            line = lines[span.line - 1] if 0 < span.line <= len(lines) else ""
            where = f" (line {span.line}: {line.strip()})"
        message = first.message if first is not None else "the spec does not load"
        super().__init__(f"{message}{where}")
        self.text = text
        self.diagnostics = diagnostics
