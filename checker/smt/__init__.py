"""The SMT backend: races, use-after-free / use-before-alloc and deadlocks, decided by Z3.

`analyze` is the whole public surface. It computes the program's must-happen-before order
once (`order.py`, no Z3), opens a first session (`queries.py`) that reads the answers off a
few concrete runs (`runs.py`) and asks the few questions left itself, or splits many into
jobs (`jobs.py`) answered one after another or in worker processes, and merges the answers
into findings whose witnesses are step sequences in `checker.witness` terms. Where threads
are the same program (`checker.symmetry`), one race question per orbit is asked, and its
answer carried to the rest of the orbit. No Z3 object
leaves this package.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Callable, Sequence

import z3

from checker.findings import Finding, FindingKind
from checker.ir import Program
from checker.smt import queries, stats
from checker.smt.jobs import AIM_SPLIT, INLINE, answer_all, fresh_context, split, split_aims
from checker.smt.layout import Layout
from checker.smt.order import compute
from checker.smt.answers import Parts, assemble, spread
from checker.smt.queries import Analysis
from checker.smt.rules import MAX_OPEN, TooLarge
from checker.smt.encode import Encoding
from checker.smt.solve import Budget, Sat, Session, Unsat
from checker.symmetry import Orbits, statement_orbits, symmetries
from checker.symmetry import orbits as compute_orbits
from checker.witness import StepKind

__all__ = ["analyze"]


MAX_STATEMENTS = 50_000
"""Programs larger than this are not encoded: the encoding grows with the open windows of
the interleaving, and the answer would be an unknown after a long wait anyway."""


def _one_thread_help(program: Program) -> str:
    """What leaves orderings open in a program of one thread: its streams, which run apart
    (not threads), and flag events, whose waits pass on any record."""
    flags = any(event.flag for event in program.events)
    return ("the open orderings grow with the square of the loop iterations that the streams may run apart"
            + (" (a flag wait passes on any record, so its stream is held by none in particular)" if flags else "")
            + f"; check a shorter unrolling (the bug usually shows in two or three iterations), or hold the "
              f"streams in step with snapshot events, each wait after the record it needs (at most "
              f"{MAX_OPEN:,} open orderings are checked)")


def analyze(program: Program, timeout: float = 10.0, rlimit: int | None = None,
            total: float | None = None, workers: int = 1, progress=None,
            shortcut: Callable[[float | None], Sequence[Finding] | None] | None = None,
            symmetry: bool = True) -> tuple[Finding, ...]:
    """Every race, use-after-free / use-before-alloc and deadlock of `program`.

    `timeout` (seconds) and `rlimit` (Z3 resource units, None for none) bound each query.
    A query the solver cannot decide within them is reported as a FindingKind.UNKNOWN
    finding (SP301) naming the question, so an undecided program never looks clean.
    Races are grouped per pair of source statements (`instances` counts the racing
    instance pairs); every finding but an unknown carries a witness. `total` bounds the
    seconds of all queries together; questions left when it runs out become one unknown.
    `workers` > 1 answers independent questions in that many worker processes; the
    findings are the same as with one. `progress` hears how many jobs are done.
    `shortcut`, when given, is called (at most once) when the concrete runs leave
    `SHORTCUT_FROM` questions or more for Z3, with the seconds it may take (None: its own
    limit): findings it returns are the answer for the whole program (the caller's
    exhaustive search that covered every interleaving), None lets Z3 go on. `symmetry`:
    one race question per orbit of the thread symmetries (`checker.symmetry`), unless False
    (or the module's `SYMMETRY` is).
    """
    if len(program.statements) > MAX_STATEMENTS:
        return (Finding(
            FindingKind.UNKNOWN,
            f"the program has {len(program.statements):,} statements whose order depends on the "
            f"interleaving; the solver checks at most {MAX_STATEMENTS:,}",
            (),
            help="check a shorter unrolling of the loops (the bug usually shows in two or three "
                 "iterations), or split the threads",
            detail={"query": "all", "reason": "too large", "refused": True},
        ),)
    try:
        return _analyze(program, Budget(timeout, rlimit, total), max(1, workers), progress, shortcut, symmetry)
    except TooLarge as error:
        return (Finding(
            FindingKind.UNKNOWN,
            f"the solver does not check this program: {error}",
            (),
            help=(_one_thread_help(program) if type(error) is TooLarge and len(program.threads) == 1
                  else error.help),
            detail={"query": "all", "reason": "too large", "refused": True,
                    # (the open orderings counted; the subclasses count other things)
                    **({"open": error.count} if type(error) is TooLarge else {})},
        ),)
    except (RecursionError, MemoryError, z3.Z3Exception) as error:
        # Resource exhaustion while building formulas is an undecided answer, not a crash.
        return (Finding(
            FindingKind.UNKNOWN,
            f"the solver could not analyse this program ({type(error).__name__}: {error})",
            (),
            help="make the spec smaller, or check it with --exhaustive",
            detail={"query": "all", "reason": type(error).__name__},
        ),)


def completes(program: Program, timeout: float = 10.0,
              rlimit: int | None = None) -> tuple[bool | None, tuple[int, ...]]:
    """Whether some execution of `program` finishes every statement and task (None: the
    solver could not tell in `timeout` seconds), and if so the statements in the order that
    execution issues them. A program none of whose executions finish has no makespan,
    whichever run `simulate` or `expect makespan` would pick."""
    if len(program.statements) > MAX_STATEMENTS:
        return None, ()
    try:
        with fresh_context():
            encoding = Encoding(program)
            verdict = Session(encoding, Budget(timeout, rlimit)).ask(encoding.finished())
    except (TooLarge, RecursionError, MemoryError, z3.Z3Exception):
        return None, ()
    if isinstance(verdict, Sat):
        return True, tuple(step.statement for step in verdict.witness.steps if step.kind is StepKind.ISSUE)
    return (False if isinstance(verdict, Unsat) else None), ()


def _tell(progress, asked: int, decided: int, total: int | None, current: str) -> None:
    if progress is None:
        return
    from checker.analyze import Progress

    progress(Progress("solver", asked, decided, total, current))


COUNTING = 0.1
"""The share of the total budget (`--budget`) that race questions which only count instances
(`Analysis.deciding`) may take once every other question is answered. A loop's races number
in the square of its iterations: a 100-iteration producer-consumer handshake whose two race
findings were known within seconds took 88 s, most of it counting their instance pairs."""

COUNTING_PACE = (5.0, 1.0)
"""Counting also stops after the larger of these: seconds, and the share of the time the
spec's other questions took. Counts only say how often a race found repeats, and are
reported as lower bounds when cut short: three threads making two collectives on one
buffer in a loop of four (72 steps) had their race in 2.3 s and then spent 30 s counting it
(Z3 took up to 10 s per instance pair, and left 21 undecided anyway)."""


def _counting_deadline(deadline: float | None, budget: Budget, started: float) -> float | None:
    """When questions that only count instances stop (`COUNTING`, `COUNTING_PACE`)."""
    now = time.time()
    floor, share = COUNTING_PACE
    cap = now + max(floor, share * (now - started))
    if budget.total is not None:
        cap = min(cap, now + COUNTING * budget.total)
    return cap if deadline is None else min(deadline, cap)


def _class_key(race) -> tuple:
    """Race questions sorted by class (the pair of source statements), then by instance."""
    a, b, _ = race
    return (sorted((a.origin, b.origin)), a.index, b.index)


SHORTCUT_FROM = 16
"""Questions left for Z3 after the concrete runs from which `analyze` asks its `shortcut`
first (after the random runs already, when none of them shows a race: then the aimed runs
are unlikely to answer the candidates either). Fewer take Z3 seconds at most; more are often race candidates that Z3 must prove
absent one at a time (two producers sharing one notify, 10 rounds: 80 of them, 52 s), or
instance pairs of races found that runs and Z3 must count one at a time (`COUNTING`: two
producers recording one event, 15 rounds, 142 pairs in 9 s)."""

SHORTCUT_MAX_RACING = 1_000
"""Racing instance pairs the runs have found, past which the shortcut is not asked: accesses
that race leave the search's partial-order reduction little to reduce (three threads of 100
random statements, 2,700-3,600 racing pairs: 20,000 states in 7-26 s, far from all)."""

SHORTCUT_COUNTING_SECONDS = 1.0
"""What the shortcut may take when only instance pairs of races already found are left to
count: the findings are known by then, only their counts are at stake, and the runs and Z3
count them within a few seconds in most programs (the search would rarely finish: racing
accesses leave its reduction little to reduce)."""


def _aimed(first: Analysis, races: list, budget: Budget, deadline: float | None, workers: int,
           progress) -> list:
    """The race questions left after runs aimed at them (`Analysis.aim_at_races`, pairs that
    only count instances get none yet): in the first session, or in `aims` jobs where
    `AIM_SPLIT` pairs or more get them (the split depends on the questions alone)."""
    aims = first.aims(races, aim_counting=False)
    if not aims or len(aims) < AIM_SPLIT or not queries.EAGERNESS:
        return first.aim_at_races(races, aim_counting=False)
    questions = {(a.index, b.index): (a.index, b.index, m) for a, b, m in races}
    aimed = set(aims)
    jobs = split_aims([questions[pair] for pair in aims],
                      [race for pair, race in questions.items() if pair not in aimed], *first.leads())
    _tell(progress, len(jobs), 0, len(jobs), f"runs aimed at {len(aims):,} pairs")
    finished: list[int] = []

    def done(k: int) -> None:
        finished.append(k)
        _tell(progress, len(jobs), len(finished), len(jobs), f"{len(finished)} of {len(jobs)} sets of aimed runs")

    for result in answer_all(first.program, first.order, jobs, budget, deadline, workers, done):
        first.parts.merge(result)
        stats.add(result.stats)
    return [race for race in races if (race[0].index, race[1].index) not in first.parts.races]


class _Shortcut:
    """The caller's `shortcut`, asked at most once, when enough questions are left."""

    def __init__(self, call, progress) -> None:
        self.call = call
        self.progress = progress

    def __call__(self, left: int, what: str, racing: int,
                 seconds: float | None = None) -> tuple[Finding, ...] | None:
        if self.call is None or left < SHORTCUT_FROM or racing > SHORTCUT_MAX_RACING:
            return None
        call, self.call = self.call, None
        _tell(self.progress, 0, 0, None, f"{left:,} {what}: the exhaustive search first")
        decided = call(seconds)
        return None if decided is None else tuple(decided)


SHORTCUT_MAX_COPIES = 4
"""Threads that are the same program from which the exhaustive search is not tried first:
it does not use the symmetries, and the interleavings of that many copies are beyond its
states (16 copies of a worker: 1-3 s spent, nothing decided)."""


def _copies(program: Program, roots: list[int]) -> int:
    """The most threads that symmetries join into one set of copies: threads whose first
    statements share an orbit (`symmetry.statement_orbits`; a symmetry maps statement k of a
    thread to statement k of another)."""
    return max(Counter(roots[thread.statements[0]] for thread in program.threads if thread.statements).values(),
               default=1)


SYMMETRY = True
"""Race questions are asked once per orbit of the program's thread symmetries
(`checker.symmetry`), and each answer carried to the rest of its orbit (`answers.spread`)."""


def _orbits(first: Analysis, symmetry: bool = True) -> tuple[list, Orbits | None, list[int] | None]:
    """The race candidates to ask about, their orbits under the program's thread symmetries,
    and each statement's orbit (its smallest statement: `symmetry.statement_orbits`); None
    for both when there is no symmetry (or `symmetry` or `SYMMETRY` is off). With symmetries,
    only pairs that can be an orbit's representative are listed, the orbits are followed from
    them, and only the representatives are returned."""
    program = first.program
    found = symmetries(program) if symmetry and SYMMETRY and len(program.threads) > 1 else ()
    if not found:
        return first.race_candidates(), None, None
    roots = statement_orbits(found, len(program.statements))
    listed = first.race_candidates(keep=[root == x for x, root in enumerate(roots)])
    orbits = compute_orbits([(a.index, b.index) for a, b, _ in listed], found, ORBIT_PAIRS)
    candidates = [race for race in listed if orbits.representative[race[0].index, race[1].index]
                  == (race[0].index, race[1].index)]
    first.stats["symmetric"] = len(orbits.representative) - len(candidates)
    first.orbits = orbits
    return candidates, orbits, roots


def _held_back(questions: list, roots: list[int] | None) -> tuple[list, list]:
    """The dead-use questions to ask first, and those held back until then: a statement's
    question whose orbit's smallest statement asks the same one. When that one's answer is
    no, so is theirs (`_still_open`); otherwise they are asked in turn (a dead use found is
    worded from an execution of its own)."""
    if roots is None:
        return questions, []
    asked = {(s.index, kind) for s, kind, _ in questions}
    first, held = [], []
    for question in questions:
        statement, kind, _ = question
        root = roots[statement.index]
        (held if root != statement.index and (root, kind) in asked else first).append(question)
    return first, held


def _still_open(held: list, roots: list[int] | None, parts: Parts) -> list:
    """The questions held back whose orbit's smallest statement was not proved free of the
    same dead use."""
    return [(s, kind, when) for s, kind, when in held if (roots[s.index], kind) not in parts.dead_absent]


ORBIT_PAIRS = 10 * queries.MAX_RACE_CANDIDATES
"""Statement pairs the orbits of the race candidates may hold in all: each pair carried a
race keeps an entry (its witness is renamed only when read). Past it the rest is left out,
and reported so (SP301), as past `MAX_RACE_CANDIDATES` without symmetries."""


def _analyze(program: Program, budget: Budget, workers: int, progress, shortcut=None,
             symmetry: bool = True) -> tuple[Finding, ...]:
    shortcut = _Shortcut(shortcut, progress)
    started = time.time()
    deadline = None if budget.total is None else started + budget.total
    stats.reset()
    began = time.process_time()
    order = compute(Layout(program))
    order_seconds = time.process_time() - began
    _tell(progress, 0, 0, None, "concrete runs")
    split_up = False
    with fresh_context():
        first = Analysis(program, budget, order, deadline)
        first.stats["setup"] += order_seconds
        candidates, orbits, roots = _orbits(first, symmetry)
        if roots is not None and _copies(program, roots) >= SHORTCUT_MAX_COPIES:
            shortcut.call = None
        races = first.harvest_races(candidates, aim=False)
        if not first.parts.races:
            # No random run shows a race: the candidates are likely no races, which only Z3
            # proves, one at a time, after aimed runs that cannot answer them either.
            decided = shortcut(len(races), "race candidates and no race in the runs", 0)
            if decided is not None:
                return decided
        races, counting = first.deciding(_aimed(first, races, budget, deadline, workers, progress))
        lifetimes, held = _held_back(first.harvest_lifetimes(first.lifetime_questions()), roots)
        taken = first.deadlock_question()
        if taken is not None and first.deadlock_from_runs():
            taken = None
        first.mismatches()
        decided = shortcut(len(races) + len(lifetimes) + (taken is not None), "questions left",
                           len(first.parts.races))
        if decided is not None:
            return decided
        if len(races) + len(lifetimes) <= INLINE:
            _tell(progress, 1, 0, 1, f"{len(races) + len(lifetimes)} questions")
            first.races(races, runs=False)
            first.lifetimes(lifetimes, runs=False)
            first.lifetimes(_still_open(held, roots, first.parts), runs=False)
            if taken is not None:
                first.deadlock(taken, runs=False)
            counting = [race for race in counting if (race[0].index, race[1].index) not in first.parts.races]
            if counting:
                # They race like their statements' other instances: runs first, repaired
                # where the aimed one misses, then the solver.
                decided = shortcut(len(counting), "instance pairs left to count", len(first.parts.races),
                                   SHORTCUT_COUNTING_SECONDS)
                if decided is not None:
                    return decided
                first.narrow(_counting_deadline(deadline, budget, started))
                first.races(first.repair_all(counting) if queries.EAGERNESS else counting, runs=False, repair=False)
            counting = []
        else:
            split_up = True
            races.sort(key=_class_key)
            # The first PROBE_ASKS classes are answered here first: repaired runs for their
            # pairs until one stays open, then the solver, whose speed says whether every
            # other pair gets repaired runs first (`Analysis.races`). What a slow solver
            # leaves open of them joins the rest.
            probed = list(dict.fromkeys(tuple(_class_key(race)[0]) for race in races))[:queries.PROBE_ASKS]
            probe = [race for race in races if tuple(_class_key(race)[0]) in probed]
            left = first.races(probe, runs=False, probe=True)
            races = [(a.index, b.index, m) for a, b, m in left + races[len(probe):]]
            repairing = bool(races) and bool(queries.EAGERNESS) and first.solver_slow()
            lifetimes = [(s.index, kind.value, when) for s, kind, when in lifetimes]
        parts = first.parts
    stats.add(parts.stats)
    if split_up:
        merged = Parts()
        merged.merge(parts)

        def settle(races: list, lifetimes: list, taken, deadline: float | None, repairing: bool) -> None:
            """Repaired runs (`repairing`: the solver is slow), then the solver, for the questions."""
            if repairing:
                repairs = split(races, [], None, kind="repairs")
                repaired: list[int] = []

                def repaired_one(k: int) -> None:
                    repaired.append(k)
                    _tell(progress, len(repairs), len(repaired), len(repairs),
                          f"{len(repaired)} of {len(repairs)} sets of repaired runs")

                _tell(progress, len(repairs), 0, len(repairs), f"repaired runs for {len(races)} pairs")
                for result in answer_all(program, order, repairs, budget, deadline, workers, repaired_one):
                    merged.merge(result)
                    stats.add(result.stats)
                # Each job watched the others' pairs: what is left is what no job answered.
                races = [race for race in races if race[:2] not in merged.races]
            jobs = split(races, lifetimes, taken, slow=repairing,
                         racing=queries.racing_classes(program, merged.races))
            finished = []

            def done(k: int) -> None:
                finished.append(k)
                _tell(progress, len(jobs), len(finished), len(jobs), f"{len(finished)} of {len(jobs)} question sets")

            _tell(progress, len(jobs), 0, len(jobs), f"{len(jobs)} question sets")
            for result in answer_all(program, order, jobs, budget, deadline, workers, done):
                merged.merge(result)
                stats.add(result.stats)

        settle(races, lifetimes, taken, deadline, repairing)
        later = [(s.index, kind.value, when) for s, kind, when in _still_open(held, roots, merged)]
        if later:
            settle([], later, None, deadline, False)
        counting = [(a.index, b.index, m) for a, b, m in sorted(counting, key=_class_key)
                    if (a.index, b.index) not in merged.races]
        if counting:
            settle(counting, [], None, _counting_deadline(deadline, budget, started), bool(queries.EAGERNESS))
        parts = merged
    if orbits is not None:
        spread(program, parts, orbits, roots)
    return assemble(program, parts, budget.total)
