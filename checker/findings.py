"""What the analyses conclude about a program, independent of how it is printed."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from checker.codes import Code
from checker.diagnostics import Diagnostic
from checker.ir import ExpectKind
from checker.witness import Witness


class FindingKind(str, enum.Enum):
    RACE = "race"
    USE_AFTER_FREE = "use-after-free"
    USE_BEFORE_ALLOC = "use-before-alloc"
    DEADLOCK = "deadlock"
    COLLECTIVE_MISMATCH = "collective-mismatch"
    UNKNOWN = "unknown"


CODE_OF = {
    FindingKind.RACE: Code.SP101,
    FindingKind.USE_AFTER_FREE: Code.SP102,
    FindingKind.USE_BEFORE_ALLOC: Code.SP103,
    FindingKind.DEADLOCK: Code.SP201,
    FindingKind.COLLECTIVE_MISMATCH: Code.SP202,
    FindingKind.UNKNOWN: Code.SP301,
}


@dataclass(frozen=True, slots=True)
class Stuck:
    """One participant of a deadlock and what it waits for."""

    statement: int
    waits_for: str


@dataclass(frozen=True, slots=True)
class Finding:
    kind: FindingKind
    message: str
    statements: tuple[int, ...]
    """Statement indices of one instance; for a race, the two racing statements."""
    buffer: str | None = None
    """The declared buffer (behind an alias, the buffer it aliases)."""
    memory: str | None = None
    """The memory element (`x[1]`) when the buffer is an array."""
    instances: int = 1
    """How many instances of this statement pair (or statement) loops repeat it for."""
    witness: Witness | None = None
    stuck: tuple[Stuck, ...] = ()
    help: str = ""
    expected: bool = False
    """An `expect` line of the spec asks for exactly this finding."""
    advisory: bool = False
    """Reported as a warning, and not failing `check` on its own: a finding the language
    contract does not count as a bug (calls of different sizes that it lets meet, SP202).
    `expect mismatch` still covers it and `expect no mismatch` still fails on it."""
    detail: dict = field(default_factory=dict, compare=False, hash=False)
    """Extra facts for reporters (corrupted bytes of a replay, an unknown's reason; for an
    unknown about one kind of question, `about`: race, use-after-free, deadlock or makespan,
    with the `line` of the makespan expectation)."""
    variant: int = 0
    """Which program of the spec (`FileReport.variants`: one per combination of `choose`
    branches) the statement indices and the witness refer to."""
    elements: tuple[str, ...] = ()
    """Every memory (element, `x[1]`) that some instance races on or uses dead, in the order the
    engine found them, when the instances cover more than `memory` (a loop over `x[i]`): an
    `expect race on x[1]` is met by any of them, and the finding is expected once every one of
    them is (`analyze.covered_memories`). Empty: `memory` alone."""
    undecided: int = 0
    """A race's further instance pairs that were left undecided (the solver's budget ran
    out): `instances` is then a lower bound. The finding itself stands."""

    @property
    def code(self) -> Code:
        return CODE_OF[self.kind]

    def fails(self, allow_unknown: bool = False) -> bool:
        """Whether this finding makes its file fail: not asked for by `expect`, not advisory,
        and not an unknown that `--allow-unknown` lets pass."""
        return not self.expected and not self.advisory and not (self.kind is FindingKind.UNKNOWN and allow_unknown)


def unknown_concerns(finding: Finding, about: str, line: int | None = None) -> bool:
    """Whether an unknown finding may hide an answer about `about` (race, use-after-free,
    deadlock, makespan); an unknown about every question (a budget spent, a search stopped)
    concerns all but makespans, which the simulation decides on its own."""
    if finding.kind is not FindingKind.UNKNOWN:
        return False
    concerns = finding.detail.get("about")
    if concerns is None:
        return about != "makespan"
    return concerns == about and (about != "makespan" or finding.detail.get("line") == line)


def expectation_span(program, finding: Finding):
    """The span of the `expect makespan` line an unknown about it names (None for any other
    finding): it has no statement to point at."""
    if finding.kind is not FindingKind.UNKNOWN or finding.detail.get("about") != "makespan":
        return None
    line = finding.detail.get("line")
    return next((e.span for e in program.expectations if e.kind is ExpectKind.MAKESPAN and e.span.line == line),
                None)


QUESTION_OF = {
    ExpectKind.RACE: "race", ExpectKind.NO_RACE: "race",
    ExpectKind.USE_AFTER_FREE: "use-after-free", ExpectKind.NO_USE_AFTER_FREE: "use-after-free",
    ExpectKind.DEADLOCK: "deadlock", ExpectKind.NO_DEADLOCK: "deadlock",
    ExpectKind.MISMATCH: "mismatch", ExpectKind.NO_MISMATCH: "mismatch",
    ExpectKind.MAKESPAN: "makespan",
}
"""The question each kind of `expect` line rests on; an unknown answer about it (or about
every question) leaves the line undecided (`unknown_concerns`)."""


class Status(str, enum.Enum):
    CLEAN = "clean"
    FINDINGS = "findings"
    UNKNOWN = "unknown"
    ERROR = "error"


@dataclass(frozen=True, slots=True)
class FileReport:
    path: str
    status: Status
    findings: tuple[Finding, ...] = ()
    diagnostics: tuple[Diagnostic, ...] = ()
    passed: bool = True
    """Whether the file meets its expectations (what the exit status reflects)."""
    source: str = ""
    program: object = None
    """The lowered Program when the spec was valid (for reporters that show statements)."""
    variants: tuple = ()
    """Every program of the spec when it has several (`choose`, runtime behaviours left open);
    empty when it has one."""
    undecided: tuple[int, ...] = ()
    """The `expect` lines (indices into the program's expectations) that unknown answers
    leave open: neither met nor shown unmet."""
    file: str | None = None
    """The name of the file read, when `path` shows it otherwise (`Loaded.file`)."""

    def program_of(self, finding: Finding):
        """The program a finding's statements and witness refer to."""
        if self.variants:
            return self.variants[finding.variant]
        return self.program
