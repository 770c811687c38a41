"""Random executions of a program the solver does not take: findings with witnesses, no proof.

The solver refuses a program whose interleaving leaves too many orderings open (two threads of
a thousand random statements sharing four streams) or that has more statements than it checks,
and the fast path a program too wide for its vector clocks (thousands of streams). Such a
program used to get one SP301 and nothing else, although nearly any execution of it shows
races. `walk` runs it instead: random walks through the executor's machine, each step
drawn from the enabled ones (starts and issues preferred to ends, with a preference that varies
from walk to walk, so accesses overlap), and reports what they show: racing pairs, uses of dead
memory and a deadlock, each with the walk's prefix as its witness. It never concludes anything
from what the walks do not show: the caller keeps the SP301 for the rest.

A report of every racing pair would be unreadable and unbounded (two threads of 1,000 random
statements show over 14,000 pairs in 40 walks, each witness thousands of steps long), so at
most `MAX_RACES` races are kept, those seen earliest in their walks (the shortest witnesses),
and their witnesses hold at most `MAX_WITNESS_STEPS` steps together; `Walks` counts the rest.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

from checker.ir import Program
from checker.executor.explore import (
    CLOCK_EVERY, DeadlockFound, DeadUseFound, Exploration, RaceFound, killing_free,
)
from checker.executor.machine import Machine
from checker.witness import Step, StepKind, Witness

EAGERNESS = (0.95, 0.8, 0.5)
"""How likely a walk takes a step that is not an end when it may: one per walk, in turn. Ends
taken late keep more accesses running together (more races); taken early, the walk follows
the order the program was written in, which reaches what waits for completions. The first
walk is the most eager: in a program whose steps each cost a scan of thousands of streams it
may be the only one (20,000 streams of one kernel each: 3,000 steps in 5 s, 8,742 racing
pairs; starting at 0.5, none)."""

MAX_RACES = 1_000
"""Racing statement pairs reported from the walks, at most (the earliest seen in a walk)."""

MAX_WITNESS_STEPS = 2_000_000
"""Steps the kept witnesses may hold together: each is a prefix of a walk, replayed before it
is reported and written out in full in JSON."""

MAX_SEEN_PAIRS = 200_000
"""Distinct racing statement pairs counted, at most: a `group` of 10,000 calls of one buffer
races in 50 million pairs, and a walk through it would count them all in memory."""

STALE_WALKS = 16
STALE_SECONDS = 2.0
"""Walking stops before its time is up once `STALE_WALKS` walks in a row, over at least
`STALE_SECONDS`, showed nothing new (racing pairs past the first `MAX_RACES` seen count as
nothing new). Both: walks that get stuck after a hundred steps take milliseconds, and in a
program with notifies a new pair still turns up every few dozen of them."""


@dataclass(frozen=True, slots=True)
class Walks:
    """What the walks showed, as an incomplete `Exploration`, and how much they left out."""

    exploration: Exploration
    walks: int
    cut: bool
    """Whether the last walk was stopped by the time limit before it ended (in a program whose
    steps each scan thousands of enabled ones, the only walk may be)."""
    racing_pairs: int
    """Distinct racing statement pairs seen; `exploration.races` keeps at most `MAX_RACES`."""
    pairs_capped: bool
    """Whether counting stopped at `MAX_SEEN_PAIRS` (`racing_pairs` is then a lower bound)."""
    dead_uses: int
    """Distinct dead uses seen (`exploration.dead_uses` keeps those within the witness steps)."""


def walk(program: Program, seconds: float, max_walks: int = 10_000, seed: int = 0) -> Walks:
    """Random walks of `program` for about `seconds`, or until they stop showing anything
    new (`STALE_WALKS`); the same `seed` and `max_walks`, the same walks."""
    machine = Machine(program)
    began = time.perf_counter()
    deadline = began + seconds
    rng = random.Random(seed)
    paths: list[list[Step] | None] = []
    seen: dict[tuple[int, int], tuple[int, int]] = {}  # pair -> (walk, position of its step)
    uses: dict[tuple[int, str], tuple[int, int, int | None]] = {}  # -> (walk, position, free)
    stuck_sets: set[frozenset] = set()  # a deadlock is reported once, with its shortest witness
    deadlock: DeadlockFound | None = None
    # A step costs time in the threads and streams to scan: look at the clock more often
    # in larger programs (as `explore` does).
    clock_every = max(1, CLOCK_EVERY * 64 // max(64, machine.n))
    transitions = 0
    stale = 0
    walks = 0
    cut = False
    last_new = began
    while walks < max_walks and (walks == 0 or time.perf_counter() < deadline):
        if stale >= STALE_WALKS and time.perf_counter() - last_new >= STALE_SECONDS:
            break
        eager = EAGERNESS[walks % len(EAGERNESS)]
        path: list[Step] = []
        state = machine.initial()
        new = kept = False
        while True:
            steps = machine.enabled(state)
            if not steps:
                break
            if len(steps) > 1:
                opening = [step for step in steps if step.kind is not StepKind.END]
                pool = opening if opening and rng.random() < eager else steps
                step = pool[rng.randrange(len(pool))] if len(pool) > 1 else pool[0]
            else:
                step = steps[0]
            transition = machine.fire(state, step)
            path.append(step)
            transitions += 1
            for a, b in transition.races:
                key = (a, b) if a <= b else (b, a)
                if key not in seen and len(seen) < MAX_SEEN_PAIRS:
                    seen[key] = (walks, len(path))
                    new = new or len(seen) <= MAX_RACES
                    kept = True
            for i, kind in transition.dead_uses:
                if (i, kind) not in uses:
                    uses[(i, kind)] = (walks, len(path), killing_free(machine, state, step, i, kind))
                    new = kept = True
            state = transition.state
            if transitions % clock_every == 0 and time.perf_counter() > deadline:
                cut = bool(machine.enabled(state))  # (not when that step ended the walk)
                break
        if not machine.enabled(state) and not machine.finished(state):
            stuck = machine.stuck(state)
            key = frozenset(i for i, _ in stuck)
            if key not in stuck_sets:
                stuck_sets.add(key)
                new = True
                if deadlock is None or len(path) < len(deadlock.witness.steps):
                    deadlock = DeadlockFound(Witness(tuple(path)), stuck)
        paths.append(path if kept else None)  # (a walk that showed nothing new is not a witness)
        walks += 1
        if new:
            stale, last_new = 0, time.perf_counter()
        else:
            stale += 1
    held = 0 if deadlock is None else len(deadlock.witness.steps)
    dead_uses = []
    for (i, kind), (k, length, free) in sorted(uses.items(), key=lambda item: (item[1][1], item[0])):
        if held + length > MAX_WITNESS_STEPS:
            break
        dead_uses.append(DeadUseFound(i, kind, Witness(tuple(paths[k][:length])), free))
        held += length
    races = []
    for (a, b), (k, length) in sorted(seen.items(), key=lambda item: (item[1][1], item[0])):
        if len(races) >= MAX_RACES or held + length > MAX_WITNESS_STEPS:
            break
        races.append(RaceFound(a, b, Witness(tuple(paths[k][:length]))))
        held += length
    races.sort(key=lambda r: (r.a, r.b))
    dead_uses.sort(key=lambda u: (u.statement, u.kind))
    exploration = Exploration(
        races=tuple(races),
        dead_uses=tuple(dead_uses),
        deadlocks=() if deadlock is None else (deadlock,),
        states=transitions,
        transitions=transitions,
        complete=False,
        seconds=time.perf_counter() - began,
        stopped="walks",
    )
    return Walks(exploration, walks, cut, len(seen), len(seen) >= MAX_SEEN_PAIRS, len(uses))
