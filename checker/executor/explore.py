"""Exhaustive exploration: every interleaving of a program, as the executor's verdict.

Depth-first search over `Machine` states with a visited set. Every transition out of every
reachable state is examined exactly once, which is what the operational definitions in
`docs/semantics.md` need: a race is two conflicting accesses running together in some
reachable state (seen at the step that starts the second), a use-after-free is an access
starting on dead bytes, a deadlock a reachable state with unfinished work and no step.

The search keeps the current path as its stack, so every finding carries the step sequence
from the initial state that exhibits it. When `max_states` is reached the result says
`complete=False` and must never be reported as clean.
"""

from __future__ import annotations

import gc
import time
from dataclasses import dataclass

from checker.findings import Finding, FindingKind, Stuck
from checker.ir import Program
from checker.executor.machine import Machine, State
from checker.witness import Step, Witness


@dataclass(frozen=True, slots=True)
class RaceFound:
    """Statements a and b (a <= b) both running in one reachable state."""

    a: int
    b: int
    witness: Witness


@dataclass(frozen=True, slots=True)
class DeadUseFound:
    statement: int
    kind: str
    """"use-after-free" or "use-before-alloc"."""
    witness: Witness


@dataclass(frozen=True, slots=True)
class DeadlockFound:
    witness: Witness
    stuck: tuple[tuple[int, str], ...]
    """Each unfinished statement and what it waits for."""


@dataclass(frozen=True, slots=True)
class Exploration:
    races: tuple[RaceFound, ...]
    dead_uses: tuple[DeadUseFound, ...]
    deadlocks: tuple[DeadlockFound, ...]
    """At most one per distinct set of stuck statements (the first found)."""
    states: int
    transitions: int
    complete: bool
    """False when `max_states` stopped the search: absence of findings proves nothing."""
    seconds: float

    @property
    def clean(self) -> bool:
        return self.complete and not (self.races or self.dead_uses or self.deadlocks)

    def race_pairs(self) -> tuple[tuple[int, int], ...]:
        return tuple((r.a, r.b) for r in self.races)

    def findings(self, program: Program) -> tuple[Finding, ...]:
        """The exploration as findings, one per statement pair / statement / deadlock."""
        return _to_findings(program, self)

    def to_json(self, program: Program | None = None) -> dict:
        def line(i: int) -> int | None:
            return program.statements[i].span.line if program is not None else None

        return {
            "complete": self.complete,
            "states": self.states,
            "transitions": self.transitions,
            "seconds": round(self.seconds, 3),
            "races": [
                {"statements": [r.a, r.b], "lines": [line(r.a), line(r.b)],
                 "witness": r.witness.to_json()}
                for r in self.races
            ],
            "dead_uses": [
                {"statement": u.statement, "line": line(u.statement), "kind": u.kind,
                 "witness": u.witness.to_json()}
                for u in self.dead_uses
            ],
            "deadlocks": [
                {"stuck": [{"statement": i, "line": line(i), "waits_for": w} for i, w in d.stuck],
                 "witness": d.witness.to_json()}
                for d in self.deadlocks
            ],
        }


def explore(program: Program, max_states: int = 1_000_000, max_deadlocks: int = 8,
            reduce: bool = True) -> Exploration:
    """Enumerate the reachable states of `program` (up to `max_states`).

    With `reduce` (the default), a step that is invisible to every finding and independent
    of all other threads and streams is taken alone (`Machine.reducible`); the verdicts are
    the same, with far fewer states when threads or streams work independently.
    """
    # Millions of visited states are long-lived tuples without cycles: rescanning them in
    # the cyclic collector would dominate the run.
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _Explorer(program, max_states, max_deadlocks, reduce).run()
    finally:
        if enabled:
            gc.enable()


class _Explorer:
    def __init__(self, program: Program, max_states: int, max_deadlocks: int, reduce: bool) -> None:
        self.machine = Machine(program)
        self.max_states = max_states
        self.max_deadlocks = max_deadlocks
        self.reduce = reduce

    def run(self) -> Exploration:
        m = self.machine
        began = time.perf_counter()
        enabled = m.enabled
        fire = m.fire
        init = m.initial()
        visited: set[State] = {init}
        races: dict[tuple[int, int], RaceFound] = {}
        uses: dict[tuple[int, str], DeadUseFound] = {}
        deadlocks: dict[frozenset, DeadlockFound] = {}
        path: list[Step] = []
        stack: list[tuple[State, tuple[Step, ...], int]] = []
        transitions = 0
        complete = True

        reduce = self.reduce
        reducible = m.reducible

        def push(state: State) -> None:
            steps = enabled(state)
            if reduce and len(steps) > 1:
                for step in steps:
                    if reducible(step):
                        steps = (step,)
                        break
            if not steps and not m.finished(state):
                stuck = m.stuck(state)
                key = frozenset(i for i, _ in stuck)
                if key not in deadlocks and len(deadlocks) < self.max_deadlocks:
                    deadlocks[key] = DeadlockFound(Witness(tuple(path)), stuck)
            stack.append((state, steps, 0))

        push(init)
        while stack:
            state, steps, k = stack[-1]
            if k >= len(steps):
                stack.pop()
                if path:
                    path.pop()
                continue
            stack[-1] = (state, steps, k + 1)
            step = steps[k]
            tr = fire(state, step)
            transitions += 1
            if tr.races:
                for a, b in tr.races:
                    key = (a, b) if a <= b else (b, a)
                    if key not in races:
                        races[key] = RaceFound(key[0], key[1], Witness(tuple(path) + (step,)))
            if tr.dead_uses:
                for i, kind in tr.dead_uses:
                    if (i, kind) not in uses:
                        uses[(i, kind)] = DeadUseFound(i, kind, Witness(tuple(path) + (step,)))
            nxt = tr.state
            if nxt in visited:
                continue
            if len(visited) >= self.max_states:
                complete = False
                continue
            visited.add(nxt)
            path.append(step)
            push(nxt)
        return Exploration(
            races=tuple(races[k] for k in sorted(races)),
            dead_uses=tuple(uses[k] for k in sorted(uses)),
            deadlocks=tuple(deadlocks.values()),
            states=len(visited),
            transitions=transitions,
            complete=complete,
            seconds=time.perf_counter() - began,
        )


def _buffer_names(program: Program, i: int, j: int | None) -> tuple[str | None, str | None]:
    """The declared buffer and memory element two statements conflict on (or one touches)."""
    a = program.statements[i]
    if j is None:
        for acc in a.accesses:
            mem = program.memories[acc.memory]
            return mem.buffer, mem.name
        return None, None
    b = program.statements[j]
    for x in a.accesses:
        for y in b.accesses:
            if x.conflicts(y):
                mem = program.memories[x.memory]
                return mem.buffer, mem.name
    return None, None


def _to_findings(program: Program, result: Exploration) -> tuple[Finding, ...]:
    out: list[Finding] = []
    for r in result.races:
        buffer, memory = _buffer_names(program, r.a, r.b)
        sa, sb = program.statements[r.a], program.statements[r.b]
        out.append(Finding(
            kind=FindingKind.RACE,
            message=(f"`{program.describe(sa)}` (line {sa.span.line}) and `{program.describe(sb)}` "
                     f"(line {sb.span.line}) can run at the same time on {memory}"),
            statements=(r.a, r.b),
            buffer=buffer,
            memory=memory,
            witness=r.witness,
        ))
    for u in result.dead_uses:
        buffer, memory = _buffer_names(program, u.statement, None)
        st = program.statements[u.statement]
        kind = FindingKind.USE_AFTER_FREE if u.kind == "use-after-free" else FindingKind.USE_BEFORE_ALLOC
        when = "after it is freed" if kind is FindingKind.USE_AFTER_FREE else "before it is allocated"
        out.append(Finding(
            kind=kind,
            message=f"`{program.describe(st)}` (line {st.span.line}) can touch {memory} {when}",
            statements=(u.statement,),
            buffer=buffer,
            memory=memory,
            witness=u.witness,
        ))
    for d in result.deadlocks:
        out.append(Finding(
            kind=FindingKind.DEADLOCK,
            message="some execution stops with work left that can never progress",
            statements=tuple(i for i, _ in d.stuck),
            witness=d.witness,
            stuck=tuple(Stuck(i, w) for i, w in d.stuck),
        ))
    return tuple(out)
