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
from dataclasses import dataclass, replace

from checker import collectives, messages
from checker.findings import Finding, Stuck
from checker.ir import Memory, Op, Program, Statement
from checker.executor.machine import (
    ENQUEUED_AFTER_FREE, PRECOMPUTE_CONFLICTS, USE_AFTER_FREE, USE_BEFORE_ALLOC, Machine, State,
)
from checker.executor import explain
from checker.executor.state import bits
from checker.executor.stubborn import StubbornSets
from checker.witness import Step, StepKind, Witness


MAX_STUBBORN_PAIRS = 200_000
"""Conflicting pairs of accesses up to which exploration builds stubborn sets (two threads of
2,000 kernels writing one buffer have 8 million: 54 s and 880 MB before the first state)."""


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
    """USE_AFTER_FREE, ENQUEUED_AFTER_FREE or USE_BEFORE_ALLOC (see the machine)."""
    witness: Witness
    free: int | None = None
    """For a use after free: the free that (last) killed the bytes."""
    frees: tuple[int, ...] = ()
    """Every free that killed bytes it touches, where known (the memories its finding names)."""


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
    """False when a limit stopped the search: absence of findings proves nothing."""
    seconds: float
    stopped: str = ""
    """Which limit stopped it: "states", "memory" or "time" ("" when complete)."""
    mismatches: tuple[Finding, ...] = ()
    """SP202 of the groups that calls of an interleaved comm formed (`collectives.met_mismatch`),
    each with the run that formed it; the other comms' are decided from the text."""

    @property
    def clean(self) -> bool:
        return self.complete and not (self.races or self.dead_uses or self.deadlocks or self.mismatches)

    def race_pairs(self) -> tuple[tuple[int, int], ...]:
        return tuple((r.a, r.b) for r in self.races)

    def findings(self, program: Program, shortened: bool = True) -> tuple[Finding, ...]:
        """The exploration as findings, one per statement pair / statement / deadlock, their
        witnesses shortened (`shorten`) unless told not to (many findings: it is quadratic)."""
        return _to_findings(program, self, shortened)

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
                {"stuck": [{"statement": i, "line": line(i), "waits_for": w,
                            "what": program.describe(program.statements[i]) if program else None}
                           for i, w in d.stuck],
                 "witness": d.witness.to_json()}
                for d in self.deadlocks
            ],
        }


MEMORY_CAP = 1 << 30
"""Bytes the visited states and witnesses may take (estimated): a program of thousands of
statements has states of kilobytes, so a state count alone does not bound memory."""

CLOCK_EVERY = 4096
"""Transitions between two looks at the clock, for a program of up to 64 statements; a larger
program looks proportionally more often (a transition costs time in its number of threads and
streams: 16,000 threads sharing a stream overran a 1 s budget by a minute)."""


def _state_bytes(program: Program) -> int:
    """An estimate of one visited state: the status bytes of every statement, the queued
    tasks (8 bytes a reference), the per-stream, per-event and thread tuples. (Measured: nearly
    twice the real size for small programs, a little under it for programs of 20,000
    statements, whose queues are long.)"""
    tasks = sum(1 for s in program.statements if s.stream is not None)
    return 400 + len(program.statements) + 8 * (tasks + 2 * len(program.streams) + len(program.events)
                                                 + len(program.threads))


def explore(program: Program, max_states: int = 1_000_000, max_deadlocks: int = 8,
            reduce: bool = True, budget: float | None = None, memory: int = MEMORY_CAP) -> Exploration:
    """Enumerate the reachable states of `program` (up to `max_states`, about `memory`
    bytes and `budget` seconds: past any of them the result is incomplete).

    With `reduce` (the default), a step that is invisible to every finding and independent
    of all other threads and streams is taken alone (`Machine.reducible`), otherwise the
    enabled steps of a stubborn set (`stubborn.py`), and states that differ only in spent
    captures are one (`Machine.forget`); the verdicts are the same (docs/semantics.md,
    "Partial-order reduction"), with far fewer states when threads, streams or ranks work
    independently. `reduce=False` is the plain search the tests compare it with.
    """
    # Millions of visited states are long-lived tuples without cycles: rescanning them in
    # the cyclic collector would dominate the run.
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _Explorer(program, max_states, max_deadlocks, reduce, budget, memory).run()
    finally:
        if enabled:
            gc.enable()


class _Explorer:
    def __init__(self, program: Program, max_states: int, max_deadlocks: int, reduce: bool,
                 budget: float | None = None, memory: int = MEMORY_CAP) -> None:
        self.machine = Machine(program)
        self.max_states = max_states
        self.max_deadlocks = max_deadlocks
        self.reduce = reduce
        self.budget = budget
        self.memory = memory
        self.state_bytes = _state_bytes(program)

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
        mismatched: dict[tuple, Finding] = {}
        meets_by_enqueue = bool(m.class_calls)  # an interleaved comm: groups form as calls are enqueued
        path: list[Step] = []
        stack: list[tuple[State, tuple[Step, ...], int]] = []
        transitions = 0
        stopped = ""
        deadline = None if self.budget is None else began + self.budget
        held = self.state_bytes  # estimated bytes of the visited states and the witnesses kept
        state_bytes = self.state_bytes

        def witness(steps: tuple[Step, ...]) -> Witness:
            nonlocal held
            held += 8 * len(steps) + 64
            return Witness(steps)

        reduce = self.reduce
        reducible = m.reducible
        # Stubborn sets read the precomputed conflict masks, which very large programs skip
        # (they could not be explored exhaustively anyway), and list every conflicting pair of
        # accesses: past `MAX_STUBBORN_PAIRS` building them would cost more than it saves, and
        # such programs keep the static singletons.
        stubborn = (reduce and m.n <= PRECOMPUTE_CONFLICTS
                    and sum(mask.bit_count() for mask in m.conflicts) <= MAX_STUBBORN_PAIRS)
        sets = StubbornSets(m) if stubborn else None
        choose = sets.choose if stubborn else None
        forget = m.forget
        # A transition may cost a stubborn-set choice of up to `CHOOSE_WORK` steps: then the
        # clock is read at every one.
        clock_every = 1 if stubborn else max(1, CLOCK_EVERY * 64 // max(64, m.n))

        def push(state: State) -> None:
            steps = enabled(state)
            if reduce and len(steps) > 1:
                for step in steps:
                    if reducible(step):
                        steps = (step,)
                        break
                else:
                    if stubborn:
                        steps = choose(state, steps)
            if not steps and not m.finished(state):
                stuck = m.stuck(state)
                key = frozenset(i for i, _ in stuck)
                if key not in deadlocks and len(deadlocks) < self.max_deadlocks:
                    deadlocks[key] = DeadlockFound(witness(tuple(path)), stuck)
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
            if meets_by_enqueue and step.kind is StepKind.END and m.call_class[step.statement] >= 0:
                met = m.group(state, step.statement)
                where = collectives.met_position(m.program, met)
                known = mismatched.get(where)
                if known is None or collectives.severity(known) < collectives.WORST:  # one per
                    # position, the most severe where executions disagree differently
                    found = collectives.met_mismatch(m.program, met.members, met.position)
                    if found is not None and (known is None or collectives.severity(found) > collectives.severity(known)):
                        mismatched[where] = replace(found, witness=witness(tuple(path) + (step,)))
            tr = fire(state, step)
            transitions += 1
            if deadline is not None and transitions % clock_every == 0 and time.perf_counter() > deadline:
                stopped = "time"
                break
            if tr.races:
                for a, b in tr.races:
                    key = (a, b) if a <= b else (b, a)
                    if key not in races:
                        races[key] = RaceFound(key[0], key[1], witness(tuple(path) + (step,)))
                        if stubborn:
                            sets.race_found(a, b)
            if tr.dead_uses:
                for i, kind in tr.dead_uses:
                    if (i, kind) not in uses:
                        free = killing_free(m, state, step, i, kind)
                        frees = () if kind == USE_BEFORE_ALLOC else tuple(explain.killers(m, state, i, kind))
                        uses[(i, kind)] = DeadUseFound(i, kind, witness(tuple(path) + (step,)), free, frees)
            nxt = tr.state
            key = forget(nxt) if reduce else nxt
            if key in visited:
                continue
            if len(visited) >= self.max_states:
                stopped = stopped or "states"
                continue
            if held > self.memory:
                stopped = "memory"
                break
            visited.add(key)
            held += state_bytes
            path.append(step)
            push(nxt)
        return Exploration(
            races=tuple(races[k] for k in sorted(races)),
            dead_uses=tuple(uses[k] for k in sorted(uses)),
            deadlocks=tuple(deadlocks.values()),
            states=len(visited),
            transitions=transitions,
            complete=not stopped,
            seconds=time.perf_counter() - began,
            stopped=stopped,
            mismatches=tuple(mismatched[where] for where in sorted(mismatched)),
        )


def _enqueued_after(machine: Machine, steps, i: int):
    """(free, memory) of a launch-order use after free, read off its execution: the latest free
    issued before statement i was whose bytes i touches and that no alloc issued since made live
    again. (The state where the use shows, at i's start, may have issued later frees.)"""
    dead = 0
    killed: dict[int, tuple[int, int]] = {}  # segment -> (position, free) that made it dead
    for position, step in enumerate(steps):
        if step.kind is not StepKind.ISSUE:
            continue
        if step.statement == i:
            bad = dead & machine.launch_touch[i]
            if not bad:
                return None
            segment = max(bits(bad), key=lambda g: killed[g])
            return (machine.program.statements[killed[segment][1]],
                    machine.program.memories[machine.layout.owner[segment]])
        life = machine.launch_life[step.statement]
        if life and machine.program.statements[step.statement].op is Op.FREE:
            dead |= life
            for g in bits(life):
                killed[g] = (position, step.statement)
        elif life:
            dead &= ~life
    return None


def killing_free(machine: Machine, state: State, step: Step, i: int, kind: str) -> int | None:
    """The free a dead use that `step` (taken in `state`) shows is reported against."""
    if kind == USE_BEFORE_ALLOC:
        return None
    if step.kind in (StepKind.END, StepKind.RETURN) and machine.kill_watch[step.statement] >> i & 1:
        return step.statement  # the free took effect while i ran
    return machine.killer(state, i, kind)


SHORTEN_LIMIT = 200
"""Witnesses longer than this are reported as found (shortening is quadratic)."""


def shorten(machine: Machine, steps: tuple[Step, ...], shows) -> tuple[Step, ...]:
    """Drop the steps the witness does not need: greedy passes from the back (so a step's
    later steps go before it), each removal kept when the rest is still a legal run for
    which `shows(final_state, transitions)` holds; repeated until nothing more goes."""
    if len(steps) > SHORTEN_LIMIT:
        return steps
    current = list(steps)
    changed = True
    while changed:
        changed = False
        for k in range(len(current) - 1, -1, -1):
            candidate = current[:k] + current[k + 1:]
            if _still_shows(machine, candidate, shows):
                current = candidate
                changed = True
    return tuple(current)


def _still_shows(machine: Machine, steps, shows) -> bool:
    state = machine.initial()
    transitions = []
    for step in steps:
        if machine.blocker(state, step) is not None:
            return False
        tr = machine.advance(state, step)
        transitions.append(tr)
        state = tr.state
    return shows(state, transitions)


def _freed_memory(program: Program, use: Statement, free: int | None) -> Memory:
    """The memory a dead use touches that `free` freed (its first access's, without one)."""
    if free is None:
        return program.memories[use.accesses[0].memory]
    freed = program.statements[free].lifetime_memories
    return program.memories[next((a.memory for a in use.accesses if a.memory in freed),
                                 program.statements[free].memory)]


def _with_elements(finding: Finding, memories: list[Memory]) -> Finding:
    """A dead use's finding naming every memory its loop instances touch (`Finding.elements`)."""
    names = tuple(dict.fromkeys(m.name for m in memories))
    return replace(finding, elements=names) if len(names) > 1 else finding


def _to_findings(program: Program, result: Exploration, shortened: bool = True) -> tuple[Finding, ...]:
    """Findings in the shape every backend reports: one per source statement (pair), with
    `instances` counting the loop instances the exploration found, and shortened witnesses."""
    machine = Machine(program)
    cut = shorten if shortened else (lambda machine, steps, shows: steps)
    out: list[Finding] = []
    st = program.statements
    races: dict[tuple[int, int], list] = {}
    for r in result.races:
        key = (min(st[r.a].origin, st[r.b].origin), max(st[r.a].origin, st[r.b].origin))
        races.setdefault(key, []).append(r)
    for group in races.values():
        for k, memory, count, elements in messages.race_buffers(program, [(st[x.a], st[x.b]) for x in group]):
            r = group[k]
            both = (1 << r.a) | (1 << r.b)
            witness = Witness(cut(machine, r.witness.steps,
                                  lambda state, _, both=both: state.running & both == both))
            out.append(messages.race(program, st[r.a], st[r.b], memory, count, witness, elements))
    uses: dict[tuple[int, str], list] = {}
    for u in result.dead_uses:
        uses.setdefault((st[u.statement].origin, u.kind), []).append(u)
    for (_, kind_name), group in uses.items():
        u = group[0]
        s = st[u.statement]
        want = (u.statement, kind_name)
        witness = Witness(cut(machine, u.witness.steps, lambda _, trs, want=want: any(
            want in tr.dead_uses for tr in trs)))
        if kind_name in (USE_AFTER_FREE, ENQUEUED_AFTER_FREE):
            free = st[u.free] if u.free is not None else None
            memory = _freed_memory(program, s, u.free)
            if kind_name == ENQUEUED_AFTER_FREE:
                free, memory = _enqueued_after(machine, u.witness.steps, u.statement) or (free, memory)
            last = witness.steps[-1] if witness.steps else None
            running = (free is not None and last is not None and last.statement == free.index
                       and last.kind in (StepKind.END, StepKind.RETURN))  # found as the free took effect
            finding = messages.use_after_free(program, s, free, memory, len(group), witness,
                                              launch_order=kind_name == ENQUEUED_AFTER_FREE,
                                              while_running=running)
            out.append(_with_elements(finding, [_freed_memory(program, st[x.statement], f)
                                                 for x in group for f in (x.free, *x.frees)]))
        else:
            managed = {x.memory for x in st if x.op is Op.ALLOC and not x.launch_only}
            managed |= {m for a in s.tensor_allocs for m in st[a].lifetime_memories}
            memories = [next((program.memories[a.memory] for a in st[x.statement].accesses if a.memory in managed),
                             program.memories[st[x.statement].accesses[0].memory]) for x in group]
            out.append(_with_elements(messages.use_before_alloc(program, s, memories[0], len(group), witness),
                                      memories))
    if result.deadlocks:
        # One deadlock finding per program (as the other backends report it): the one with
        # the shortest witness; `Exploration.deadlocks` keeps the other stuck sets.
        d = min(result.deadlocks, key=lambda d: len(d.witness.steps))
        steps = cut(machine, d.witness.steps, lambda state, _: (
            not machine.enabled(state) and not machine.finished(state)))
        state = machine.initial()
        for step in steps:
            state = machine.apply(state, step)
        stuck = machine.stuck(state)
        out.append(messages.deadlock(program, tuple(Stuck(i, w) for i, w in stuck), Witness(steps)))
    out.extend(result.mismatches)
    return tuple(out)
