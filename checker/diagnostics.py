"""One model for everything the tool tells a user about a spec; reporters render it."""

from __future__ import annotations

from dataclasses import dataclass

from checker.codes import Code, Severity
from checker.errors import SpecError
from checker.ir import Span

__all__ = ["Annotation", "Diagnostic", "SpecError", "error", "warning"]
"""(`SpecError` is defined in `checker.errors` with the other exceptions.)"""


@dataclass(frozen=True, slots=True)
class Annotation:
    span: Span
    label: str = ""
    primary: bool = True


@dataclass(frozen=True, slots=True)
class Diagnostic:
    code: Code
    severity: Severity
    message: str
    annotations: tuple[Annotation, ...] = ()
    help: str = ""
    notes: tuple[str, ...] = ()

    @property
    def primary_span(self) -> Span | None:
        for annotation in self.annotations:
            if annotation.primary:
                return annotation.span
        return self.annotations[0].span if self.annotations else None

    def sort_key(self) -> tuple:
        span = self.primary_span
        return (span.start if span else -1, self.severity != Severity.ERROR, self.code.value)


def error(code: Code, message: str, span: Span | None, label: str = "", help: str = "",
          secondary: tuple[tuple[Span, str], ...] = (), notes: tuple[str, ...] = ()) -> Diagnostic:
    annotations = () if span is None else (Annotation(span, label, True),)
    annotations += tuple(Annotation(s, text, False) for s, text in secondary)
    return Diagnostic(code, Severity.ERROR, message, annotations, help, notes)


def warning(code: Code, message: str, span: Span | None, label: str = "", help: str = "",
            secondary: tuple[tuple[Span, str], ...] = ()) -> Diagnostic:
    annotations = () if span is None else (Annotation(span, label, True),)
    annotations += tuple(Annotation(s, text, False) for s, text in secondary)
    return Diagnostic(code, Severity.WARNING, message, annotations, help)
