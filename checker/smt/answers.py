"""What the SMT engine's sessions answer, and how the answers become findings.

A session (`queries.Analysis`) keeps its answers as `Parts`: raw and ungrouped, plain data
that worker processes (`jobs.py`) send back and merge, so that several sessions' answers make
the same findings as one session's (`assemble`). Answers about one pair of an orbit of the
thread symmetries are carried to the rest of it here too (`spread`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from checker import messages
from checker.collectives import severity
from checker.findings import Finding, FindingKind
from checker.ir import Program, Statement, conflicting
from checker.smt.solve import OUT_OF_TIME
from checker.symmetry import Orbits, carries_classes
from checker.symmetry import orbits as compute_orbits
from checker.witness import Step, Witness


def statement_class(statement: Statement) -> tuple:
    """A statement's half of an `instance_class`: its source statement and accesses."""
    return (statement.origin, statement.accesses)


def instance_class(a: Statement, b: Statement) -> tuple:
    """The class of a pair of statements: their source statements and accesses (a loop's
    instances repeat it). A class whose race is found on each buffer of its accesses makes
    the same findings whatever its other instances' answers are (`counts_only`)."""
    return (statement_class(a), statement_class(b))


@dataclass
class Parts:
    """Answers of one session, before grouping (plain data: workers send them back)."""

    races: dict = field(default_factory=dict)
    """(a, b) statement pair -> (memory, witness, length) for every racing pair found: the
    witness's first `length` steps show the race. Every pair that one execution shows shares
    its witness: a loop's races number in the square of its iterations, and a prefix of its
    own for each took gigabytes at 300 iterations."""
    race_unknowns: list = field(default_factory=list)
    dead: dict = field(default_factory=dict)
    """(statement, FindingKind) -> the finding of that dead use (instances 1)."""
    dead_unknowns: list = field(default_factory=list)
    dead_absent: set = field(default_factory=set)
    """(statement, FindingKind) of every dead-use question the solver proved no (a symmetric
    statement's question then has that answer too: `smt._analyze`)."""
    deadlock: list = field(default_factory=list)
    """The deadlock finding, or the unknown about it."""
    not_asked: int = 0
    """Questions skipped because the total budget ran out (reported as one unknown)."""
    races_not_asked: list = field(default_factory=list)
    """The race questions among them, as (a, b) statement pairs: one whose source statements
    race on its buffers in some other loop instance only counts instances (`assemble`)."""
    unlisted: str = ""
    """Why some pairs that may race were never asked about, nor counted (empty: none was), as
    the SP301 says it: the listing stopped at a cap (`queries.MAX_PAIRS_READ`), or the
    orbits did (`smt.ORBIT_PAIRS`)."""
    overflow: dict = field(default_factory=dict)
    """`instance_class` -> (pairs, one of them, pairs of the class in all) of the race
    candidates past the cap on questions (`cap`) that were not asked about
    (`Analysis.race_candidates`)."""
    cap: int = 0
    """The cap on race questions the classes of `overflow` shared (`queries.MAX_RACE_CANDIDATES`)."""
    mismatches: dict = field(default_factory=dict)
    """Where calls of an interleaved comm met (`collectives.met_position`) -> the mismatch
    (SP202) of calls that met there in some execution, an error rather than a warning where
    executions differ; or the unknown about it."""
    stats: dict = field(default_factory=dict)

    def witness(self, pair: tuple[int, int]) -> Witness:
        """The execution that shows the race of `pair`, up to its two starts."""
        _, witness, length = self.races[pair]
        if isinstance(witness, Carried):
            return witness.renamed(length)
        return Witness(witness.steps[:length]) if length < len(witness.steps) else witness

    def merge(self, other: "Parts") -> None:
        self.races.update(other.races)
        self.race_unknowns += other.race_unknowns
        self.dead.update(other.dead)
        self.dead_unknowns += other.dead_unknowns
        self.dead_absent |= other.dead_absent
        self.deadlock += other.deadlock
        self.not_asked += other.not_asked
        self.races_not_asked += other.races_not_asked
        self.unlisted = self.unlisted or other.unlisted
        self.overflow.update(other.overflow)
        self.cap = max(self.cap, other.cap)
        for where, finding in other.mismatches.items():
            keep_mismatch(self.mismatches, where, finding)


def keep_mismatch(found: dict, where: tuple, finding: Finding) -> None:
    """One mismatch per place calls met, as the exhaustive search keeps them: the most
    severe (`collectives.severity`), the first found among equals."""
    known = found.get(where)
    if known is None or severity(finding) > severity(known):
        found[where] = finding


@dataclass(frozen=True, slots=True)
class Carried:
    """The witness of an orbit's representative, carried to another pair of the orbit by the
    symmetries `path` (`spread`): renamed only when a finding reads it, as few do (one per
    finding), where renaming each pair's would cost the racing pairs times the steps."""

    witness: Witness
    orbits: Orbits
    path: tuple[int, ...]

    def renamed(self, length: int) -> Witness:
        """The first `length` steps, each statement carried along the path."""
        carry, path = self.orbits.carry, self.path
        return Witness(tuple(Step(step.kind, carry(step.statement, path)) for step in self.witness.steps[:length]))


def racing_buffers(program: Program, races) -> set[tuple[tuple[int, int], str]]:
    """(pair of source statements, buffer) of every race finding the racing instance pairs
    `races` make (`assemble` groups them so)."""
    statements = program.statements
    found: set[tuple[tuple[int, int], str]] = set()
    seen: set[tuple] = set()
    for a, b in races:
        sa, sb = statements[a], statements[b]
        shape = instance_class(sa, sb)  # loop instances mostly repeat it
        if shape in seen:
            continue
        seen.add(shape)
        key = tuple(sorted((sa.origin, sb.origin)))
        found.update((key, memory.buffer) for _, memory, _, _ in messages.race_buffers(program, [(sa, sb)]))
    return found


def counts_only(program: Program, racing: set, a: Statement, b: Statement) -> list | None:
    """The findings' keys (as `racing_buffers`) an undecided race question (a, b) would add an
    instance to, when its source statements already race on each of its buffers: whatever its
    answer, the findings are the same. None when it could make a finding of its own."""
    key = tuple(sorted((a.origin, b.origin)))
    keys = [(key, memory.buffer) for _, memory, _, _ in messages.race_buffers(program, [(a, b)])]
    return keys if keys and all(k in racing for k in keys) else None


def described(program: Program, statement: Statement) -> str:
    """A statement as SP301 messages name it: what it is and its line."""
    return f"{program.describe(statement)} (line {statement.span.line})"


def race_question(program: Program, a: Statement, b: Statement) -> str:
    """The race question about a and b, as its SP301 words it."""
    return f"whether {described(program, a)} and {described(program, b)} race"


def assemble(program: Program, parts: Parts, total: float | None) -> tuple[Finding, ...]:
    """The findings of merged answers: races grouped per pair of source statements, dead
    uses per source statement, then the deadlock; an unknown per race question the budget left
    unasked (so that a report says which statements are undecided), and one that counts the
    other questions it left.

    A race question left undecided (unknown, or not asked) whose source statements race on
    each of its buffers in another loop instance changes no finding, only how many instances
    one has: it is counted on that finding (`Finding.undecided`), not reported unknown. So
    are the pairs past the cap on questions (`Parts.overflow`), a class at a time."""
    statements = program.statements
    groups: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for pair in sorted(parts.races):
        a, b = (statements[i] for i in pair)
        groups.setdefault(tuple(sorted((a.origin, b.origin))), []).append(pair)
    racing = racing_buffers(program, parts.races)
    undecided: dict[tuple[tuple[int, int], str], int] = {}

    def counted(pair: tuple[int, ...]) -> bool:
        """Whether an undecided pair only counts instances, and if so, counts it."""
        keys = counts_only(program, racing, statements[pair[0]], statements[pair[1]])
        for key in keys or ():
            undecided[key] = undecided.get(key, 0) + 1
        return keys is not None

    findings: list[Finding] = [f for f in parts.race_unknowns if not counted(f.statements)]
    for count, pair, _ in parts.overflow.values():
        keys = counts_only(program, racing, statements[pair[0]], statements[pair[1]])
        if keys is None:
            a, b = (statements[i] for i in pair)
            findings.append(messages.unknown(
                f"{race_question(program, a, b)} was not asked"
                + (f", nor {count - 1:,} more instance pair(s) of the same statements" if count > 1 else "")
                + f": more than {parts.cap:,} pairs of accesses may run at the same time, and "
                "the solver asked about that many only",
                "order the threads more, or check a shorter unrolling of the loops",
                pair, {"query": race_question(program, a, b), "reason": "too large", "about": "race",
                       "pairs": count}))
            continue
        for key in keys:
            undecided[key] = undecided.get(key, 0) + count
    unasked = [pair for pair in parts.races_not_asked if not counted(pair)]
    not_asked = parts.not_asked - len(parts.races_not_asked)
    for pair in unasked:
        query = race_question(program, *(statements[i] for i in pair))
        findings.append(messages.unknown(
            f"{query} was not asked: the total budget of {total:g} s per spec ran out",
            "raise --budget, or check a smaller unrolling of the spec",
            pair, {"query": query, "reason": OUT_OF_TIME, "about": "race"},
        ))
    for key, instances in groups.items():
        pairs = [(statements[i], statements[j]) for i, j in instances]
        for k, memory, count, elements in messages.race_buffers(program, pairs):
            finding = messages.race(program, *pairs[k], memory, count, parts.witness(instances[k]), elements)
            findings.append(replace(finding, undecided=undecided.get((key, memory.buffer), 0)))
    findings += parts.dead_unknowns
    grouped: dict[tuple[FindingKind, int], tuple[Finding, int, dict[str, None]]] = {}
    for index, kind in sorted(parts.dead, key=lambda item: (item[0], item[1] is FindingKind.USE_BEFORE_ALLOC)):
        group = (kind, program.statements[index].origin)
        found = parts.dead[(index, kind)]
        if group in grouped:
            finding, count, memories = grouped[group]
            grouped[group] = (finding, count + 1, memories)
        else:
            memories = {}
            grouped[group] = (found, 1, memories)
        memories.update(dict.fromkeys((found.memory, *found.elements)))
    findings += [replace(finding, instances=count, elements=tuple(memories) if len(memories) > 1 else ())
                 for finding, count, memories in grouped.values()]
    findings += parts.deadlock
    findings += [parts.mismatches[where] for where in sorted(parts.mismatches)]
    if parts.unlisted:
        findings.append(messages.unknown(
            "some pairs of accesses that may run at the same time were neither asked about nor "
            f"counted ({parts.unlisted}), so other races may be missing",
            "order the threads more (most of these pairs race: the races reported show how), "
            "or check a shorter unrolling of the loops",
            detail={"query": "all", "reason": "too large"},
        ))
    if not_asked:
        findings.append(messages.unknown(
            f"{not_asked} {'other ' if unasked else ''}solver question(s) were not asked: the total budget of "
            f"{total:g} s per spec ran out",
            "raise --budget, or check a smaller unrolling of the spec",
            detail={"query": "remaining questions", "reason": OUT_OF_TIME},
        ))
    return tuple(findings)


def conflict_memory(a: Statement, b: Statement) -> int | None:
    """The memory a race candidate is listed with: the first one the two statements'
    accesses conflict on (None: they do not conflict)."""
    return next((x.memory for x, _ in conflicting(a.accesses, b.accesses)), None)


def solver_unknown(query: str, statements: tuple[int, ...], reason: str, about: str) -> Finding:
    """The SP301 of a question the solver could not decide."""
    return messages.unknown(f"the solver could not decide {query} ({reason})",
                            "raise the solver budget (timeout / rlimit) or make the spec smaller",
                            statements, {"query": query, "reason": reason, "about": about})


def spread(program: Program, parts: Parts, orbits: Orbits, roots: list[int]) -> None:
    """Carries each orbit representative's answer to the other pairs of its orbit
    (`checker.symmetry`): a race with its witness renamed by the symmetries that carry the
    representative to the pair (`Carried`; the executor replays it like any other), an undecided or
    unasked question as the same about the pair; no race stays no race. A program whose
    orbits were cut (`Orbits.complete`) is reported as listing too many pairs. `roots`: each
    statement's orbit (`symmetry.statement_orbits`)."""
    statements = program.statements
    unknowns = {finding.statements: finding for finding in parts.race_unknowns}
    unasked = set(parts.races_not_asked)
    for representative, members in orbits.members().items():
        race = parts.races.get(representative)
        unknown = unknowns.get(representative)
        for pair in members:
            path = orbits.path[pair]
            if race is not None:
                _, witness, length = race
                a, b = (statements[i] for i in pair)
                parts.races[pair] = (conflict_memory(a, b), Carried(witness, orbits, path), length)
            elif unknown is not None:
                parts.race_unknowns.append(solver_unknown(race_question(program, *(statements[i] for i in pair)),
                                                          pair, unknown.detail["reason"], "race"))
            elif representative in unasked:
                parts.races_not_asked.append(pair)
                parts.not_asked += 1
    if not orbits.complete:
        parts.unlisted = parts.unlisted or ("past the pairs the solver follows between threads that are "
                                            "the same program")
    if parts.overflow:
        _spread_overflow(program, parts, orbits, roots)


def _spread_overflow(program: Program, parts: Parts, orbits: Orbits, roots: list[int]) -> None:
    """Carries the classes of pairs not asked about (`Parts.overflow`) to their images: a
    pair whose smaller statement is not its orbit's smallest was never listed. The count is
    exact when the symmetries map classes to classes and each class was listed whole or not
    at all (a statement's class and its being its orbit's smallest go together: not so where
    copies of a thread array share a statement's accesses); otherwise the images are
    reported unlisted instead (one SP301)."""
    statements = program.statements
    listed = {}  # a statement's half of a class -> whether its pairs were listed (`race_candidates`' `keep`)
    in_part = any(listed.setdefault(statement_class(s), roots[s.index] == s.index) != (roots[s.index] == s.index)
                  for s in statements if s.accesses)
    if in_part or not carries_classes(program, orbits.symmetries, statement_class):
        parts.unlisted = parts.unlisted or ("past the questions asked, in threads that are the same program "
                                            "but do not map those pairs to one another")
        return
    # The symmetries map classes one to one: a class's image has as many pairs, of which the
    # orbits of the pairs asked about reach some (from any class, its own too), and the rest
    # were neither asked about nor carried.
    reached: dict[tuple, int] = {}
    for a, b in orbits.representative:
        key = instance_class(statements[a], statements[b])
        reached[key] = reached.get(key, 0) + 1
    left: dict[tuple, tuple[int, tuple[int, int], int]] = {}
    for _, pair, size in parts.overflow.values():
        for image in compute_orbits([pair], orbits.symmetries).representative:
            key = instance_class(statements[image[0]], statements[image[1]])
            if key not in left and size > reached.get(key, 0):
                left[key] = (size - reached.get(key, 0), image, size)
    parts.overflow = left
