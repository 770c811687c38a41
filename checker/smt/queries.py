"""The questions the SMT engine asks of one program, and how answers become findings.

Races: every pair of statements with conflicting accesses (same memory, overlapping bytes,
one a write) that the must-happen-before relation leaves unordered is asked once; instance
pairs of the same two source statements are grouped into one finding. Use-after-free and
use-before-alloc: asked per accessing statement whose bytes some free / alloc covers.
Deadlock: asked once. A query the solver cannot decide becomes an UNKNOWN finding naming
what was asked.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from checker import messages
from checker.findings import Finding, FindingKind, Stuck
from checker.ir import Program, Statement
from checker.smt.encode import HORIZON, Encoding
from checker.smt.order import must_order
from checker.smt.progress import guaranteed_steps
from checker.smt.solve import OUT_OF_TIME, Budget, Sat, Session, Unknown, Unsat
from checker.witness import StepKind, Witness


@dataclass(frozen=True, slots=True)
class _RaceGroup:
    """Racing instance pairs of one pair of source statements."""

    first: tuple[int, int]
    instances: int
    memory: int
    witness: Witness


class Analysis:
    """Runs every query of one program on one solver session."""

    def __init__(self, program: Program, budget: Budget):
        self.program = program
        self.encoding = Encoding(program)
        self.session = Session(self.encoding, budget)
        self.order = must_order(self.encoding)
        self.findings: list[Finding] = []
        self.racing: set[tuple[int, int]] = set()
        """Every racing instance pair (lower statement index first), before grouping."""
        self.dead_uses: set[tuple[int, FindingKind]] = set()
        self.not_asked = 0
        """Questions skipped because the total budget ran out (reported as one unknown)."""
        """Every (statement, USE_AFTER_FREE | USE_BEFORE_ALLOC) found, before grouping."""

    def _line(self, statement: Statement) -> str:
        return f"{self.program.describe(statement)} (line {statement.span.line})"

    def _unknown(self, query: str, statements: tuple[int, ...], verdict: Unknown) -> None:
        if verdict.reason == OUT_OF_TIME:
            self.not_asked += 1
            return
        self.findings.append(messages.unknown(
            f"the solver could not decide {query} ({verdict.reason})",
            "raise the solver budget (timeout / rlimit) or make the spec smaller",
            statements, {"query": query, "reason": verdict.reason},
        ))

    # --- races --------------------------------------------------------------------------

    def race_candidates(self) -> list[tuple[Statement, Statement, int]]:
        """Statement pairs with a conflicting access, unordered by must-happen-before."""
        encoding, order = self.encoding, self.order
        # Only statements touching a common memory can conflict: pair them per memory.
        by_memory: dict[int, list[Statement]] = {}
        for s in self.program.statements:
            if s.operation.accesses and s.accesses:
                for memory in dict.fromkeys(x.memory for x in s.accesses):
                    by_memory.setdefault(memory, []).append(s)
        pairs: dict[tuple[int, int], tuple[Statement, Statement]] = {}
        for sharing in by_memory.values():
            for i, a in enumerate(sharing):
                for b in sharing[i + 1:]:
                    pairs.setdefault((a.index, b.index), (a, b))
        result = []
        for a, b in (pairs[key] for key in sorted(pairs)):
            memory = next((x.memory for x in a.accesses for y in b.accesses
                           if x.conflicts(y)), None)
            if memory is None:
                continue
            if order.precedes(encoding.last_step(a), encoding.first_step(b)):
                continue
            if order.precedes(encoding.last_step(b), encoding.first_step(a)):
                continue
            result.append((a, b, memory))
        return result

    def _harvest(self, sat: Sat, pending: dict) -> dict:
        """Every pending candidate that also races in `sat`'s execution, with its witness:
        one model usually shows many races, and each needs no query of its own."""
        encoding = self.encoding
        position = {step: k for k, step in enumerate(sat.order)}
        never = len(sat.order)
        found = {}
        for pair, (a, b, memory) in pending.items():
            sa, sb = position.get(encoding.first_step(a)), position.get(encoding.first_step(b))
            if sa is None or sb is None:
                continue
            if (sa < position.get(encoding.last_step(b), never)
                    and sb < position.get(encoding.last_step(a), never)):
                found[pair] = (memory, encoding.witness(sat.order[: max(sa, sb) + 1]))
        return found

    def races(self) -> None:
        pending = {(a.index, b.index): (a, b, m) for a, b, m in self.race_candidates()}
        racing: dict[tuple[int, int], tuple[int, object]] = {}
        while pending:
            pair, (a, b, memory) = next(iter(pending.items()))
            verdict = self.session.ask(
                self.encoding.race(a, b),
                cut=(self.encoding.first_step(a), self.encoding.first_step(b)),
            )
            if isinstance(verdict, Sat):
                found = self._harvest(verdict, pending)
                found[pair] = (memory, verdict.witness)
                for done in found:
                    del pending[done]
                racing.update(found)
                continue
            del pending[pair]
            if isinstance(verdict, Unknown):
                self._unknown(f"whether {self._line(a)} and {self._line(b)} race",
                              (a.index, b.index), verdict)
        groups: dict[tuple[int, int], _RaceGroup] = {}
        for pair in sorted(racing):
            memory, witness = racing[pair]
            a, b = (self.program.statements[i] for i in pair)
            self.racing.add(pair)
            key = tuple(sorted((a.origin, b.origin)))
            known = groups.get(key)
            if known is None:
                groups[key] = _RaceGroup(pair, 1, memory, witness)
            else:
                groups[key] = _RaceGroup(known.first, known.instances + 1, known.memory,
                                         known.witness)
        for group in groups.values():
            a, b = (self.program.statements[i] for i in group.first)
            self.findings.append(messages.race(self.program, a, b, self.program.memories[group.memory],
                                               group.instances, group.witness))

    # --- lifetimes ----------------------------------------------------------------------

    def lifetimes(self) -> None:
        encoding = self.encoding
        grouped: dict[tuple[FindingKind, int], tuple[Finding, int]] = {}
        for statement in self.program.statements:
            if not statement.operation.accesses or not statement.accesses:
                continue
            segments = encoding.touched_segments(statement)
            asks = []
            launch_frees = any(encoding.launch_lifetimes(a.memory)[1] for a in statement.accesses)
            if launch_frees or any(g.frees for g in segments):
                asks.append((FindingKind.USE_AFTER_FREE, encoding.use_after_free(statement),
                             "after it was freed"))
            if any(g.allocs for g in segments):
                asks.append((FindingKind.USE_BEFORE_ALLOC, encoding.use_before_alloc(statement),
                             "before it was allocated"))
            for kind, query, when in asks:
                verdict = self.session.ask(query, cut=(encoding.step(StepKind.ISSUE, statement.index),
                                                       encoding.first_step(statement)))
                if isinstance(verdict, Unknown):
                    self._unknown(f"whether {self._line(statement)} can run {when}",
                                  (statement.index,), verdict)
                    continue
                if isinstance(verdict, Unsat):
                    continue
                self.dead_uses.add((statement.index, kind))
                key = (kind, statement.origin)
                if key in grouped:
                    finding, count = grouped[key]
                    grouped[key] = (finding, count + 1)
                    continue
                grouped[key] = (self._dead_use(kind, statement, verdict), 1)
        for finding, count in grouped.values():
            self.findings.append(replace(finding, instances=count))

    def _dead_use(self, kind: FindingKind, statement: Statement, verdict: Sat) -> Finding:
        """The finding for a dead use the solver found, worded from its execution."""
        encoding, program = self.encoding, self.program
        position = {step: k for k, step in enumerate(verdict.order)}
        memories = [program.memories[a.memory] for a in statement.accesses]
        if kind is FindingKind.USE_BEFORE_ALLOC:
            memory = next((program.memories[g.memory] for g in encoding.touched_segments(statement)
                           if g.allocs), memories[0])
            return messages.use_before_alloc(program, statement, memory, 1, verdict.witness)
        first = position.get(encoding.first_step(statement))
        issue = position[encoding.step(StepKind.ISSUE, statement.index)]
        # Run order: the latest free whose effect came before the access started.
        best = None
        for g in encoding.touched_segments(statement):
            for f in g.frees:
                at = position.get(encoding._lifetime_step(f))
                if first is not None and at is not None and at < first and (best is None or at > best[0]):
                    best = (at, program.statements[f], program.memories[g.memory])
        if best is not None:
            return messages.use_after_free(program, statement, best[1], best[2], 1, verdict.witness)
        # Launch order: the latest free enqueued before the statement was.
        for memory in memories:
            frees = encoding.launch_lifetimes(memory.index)[1]
            enqueued = [(position[encoding.step(StepKind.ISSUE, f.index)], f) for f in frees
                        if f.index != statement.index
                        and position.get(encoding.step(StepKind.ISSUE, f.index), issue + 1) < issue]
            if enqueued:
                free = max(enqueued, key=lambda item: item[0])[1]
                return messages.use_after_free(program, statement, free, memory, 1, verdict.witness,
                                               launch_order=True)
        return messages.use_after_free(program, statement, None, memories[0], 1, verdict.witness)

    # --- deadlock -----------------------------------------------------------------------

    def deadlock(self) -> None:
        if not self.encoding.can_block():
            return
        taken = guaranteed_steps(self.encoding, self.order)
        if len(taken) == len(self.encoding.steps):
            return
        verdict = self.session.ask(self.encoding.deadlock(taken))
        if isinstance(verdict, Unknown):
            self._unknown("whether the program can deadlock", (), verdict)
            return
        if isinstance(verdict, Unsat):
            return
        self.findings.append(messages.deadlock(self.program, self.stuck(verdict), verdict.witness))

    def stuck(self, verdict: Sat) -> tuple[Stuck, ...]:
        """Every unfinished thread and task, with the parts of its next step's condition
        that fail in the deadlocked state."""
        encoding, session = self.encoding, self.session
        happened = set(verdict.order)
        result = []

        def waits(step: int) -> str:
            failing = [
                c.label for c in encoding.condition(step, HORIZON)
                if not session.holds(verdict, c.formula)
            ]
            if not failing:
                return "nothing (it can still run)"
            return "waits for " + "; and for ".join(dict.fromkeys(failing))

        for thread in self.program.threads:
            for index in thread.statements:
                statement = self.program.statements[index]
                steps = [encoding.step(StepKind.ISSUE, index)]
                if encoding.has_step(StepKind.RETURN, index):
                    steps.append(encoding.step(StepKind.RETURN, index))
                pending = [s for s in steps if s not in happened]
                if pending:
                    result.append(Stuck(index, waits(pending[0])))
                    break
        for statement in self.program.statements:
            if not statement.is_task:
                continue
            if encoding.step(StepKind.ISSUE, statement.index) not in happened:
                continue
            kinds = ([StepKind.START, StepKind.END] if encoding.has_step(StepKind.START, statement.index)
                     else [StepKind.COMPLETE])
            pending = [encoding.step(k, statement.index) for k in kinds
                       if encoding.step(k, statement.index) not in happened]
            if pending:
                result.append(Stuck(statement.index, waits(pending[0])))
        return tuple(sorted(result, key=lambda item: item.statement))

    def run(self) -> tuple[Finding, ...]:
        self.races()
        self.lifetimes()
        self.deadlock()
        if self.not_asked:
            self.findings.append(messages.unknown(
                f"{self.not_asked} solver question(s) were not asked: the total budget of "
                f"{self.session.budget.total:g} s per spec ran out",
                "raise --budget, or check a smaller unrolling of the spec",
                detail={"query": "remaining questions", "reason": OUT_OF_TIME},
            ))
        return tuple(self.findings)
