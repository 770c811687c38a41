"""The questions the SMT engine asks of one program, and how answers become findings.

Races: every pair of statements with conflicting accesses (same memory, overlapping bytes,
one a write) that the must-happen-before relation leaves unordered and that could overlap at
all is a question; instance pairs of the same two source statements are grouped into one
finding. Use-after-free and use-before-alloc: one question per accessing statement whose
bytes some free / alloc covers. Deadlock: one question, unless `progress.py` shows every
step is taken. Concrete runs (`runs.py`) answer the questions they show or predict first,
then runs repaired for each race question left (while the solver is slow), then shorter
programs (`prefix.py`, races only, where the solver was found slow); each model the solver
finds answers every other question it shows as well. A query the solver cannot
decide becomes an UNKNOWN finding naming what was asked.

An `Analysis` keeps its answers as `answers.Parts` (raw, ungrouped), so that answers from
several sessions (`jobs.py`) merge into the same findings as one session's
(`answers.assemble`).
"""

from __future__ import annotations

import heapq
import random
import time
from array import array
from bisect import bisect_left, bisect_right
from dataclasses import replace
from itertools import accumulate
from typing import Sequence

from checker import collectives, messages
from checker.executor.machine import IllegalStep, Machine
from checker.executor.state import USE_BEFORE_ALLOC, Store
from checker.findings import Finding, FindingKind, Stuck
from checker.ir import Op, Program, Statement, StreamMode
from checker.smt.answers import (Carried, Parts, assemble, conflict_memory, counts_only, described,
                                  instance_class, keep_mismatch, race_question, racing_buffers,
                                  solver_unknown, statement_class)
from checker.smt.encode import Encoding, any_of
from checker.smt.order import MustOrder
from checker.smt.prefix import cuts_for, prefix, transparent
from checker.smt.progress import guaranteed_steps
from checker.smt.relaxed import RelaxedSession, Window
from checker.smt.rules import TooLarge
from checker.smt.runs import Runner, covering_runs, thread_orders
from checker.smt.solve import OUT_OF_TIME, Budget, Sat, Session, Unknown, Unsat
from checker.symmetry import Orbits
from checker.witness import StepKind

OTHER_DEAD_QUESTIONS = 64
"""Questions `Analysis._other_dead_memories` asks of one program at most."""
DEAD_AIMS = 2
"""Runs aimed at a use and a free of its bytes (`_dead_from_aimed_runs`) per use-after-free
question that gets them (`Analysis.lifetimes`): one for each of its nearest frees."""

EAGERNESS = (0.05, 0.3, 0.05, 0.6, 0.15, 0.05)
"""One concrete run per entry: how likely a run ends an interval while other steps could move."""
COVER = True
"""After the random and prioritized runs, runs that take the steps none of them took
(`runs.covering_runs`), where enough questions wait on those steps (`Analysis._cover`)."""
COVER_WORTH = 100
"""Pending race pairs with a statement no run began, from which covering runs are made."""
LEAD_IN = 0.3
"""How far back before the pair a run aimed with a lead-in starts on its own (`_lead_in`), as
a share of the lead-in's length, on average."""
HOLDS = ((False, False), (True, True), (True, False), (False, True))
"""The passes of runs aimed at a pair (`_aimed_runs`): per statement of the pair, whether the
run holds back its start (True) or its end (False) while any other step can move. Holding one
start and the other's end finds races where one statement must wait in its queue until the
other has begun: rand3x100 (2 workers, 60 s) leaves 635 / 529 / 494 questions on seeds 3, 5
and 6 with the last two passes, against 676 / 562 / 526 without (605 / 476 / 461 against 661
in single runs of `check`); the decided seeds keep their findings and times."""

AIMED_EAGERNESS = 0.1
"""The same, for runs aimed at one pair (their own ends are held anyway)."""
DEADLOCK_RUNS = 64
"""Lazy runs (`Runner.run`'s `lazy`) that look for a deadlock before the solver is asked:
on random programs of 3-4 threads x 40 statements with notifies and flag events whose
deadlock Z3 took 78 s to find, about one lazy run in ten hangs, and no plain run of 200 did
(bench/README.md, "Runs that look for a hang")."""
DEADLOCK_RUN_WORK = 40_000
"""The lazy runs stop after taking this many steps in all (about a second)."""
DEADLOCK_STICKINESS = (None, 0.05)
"""The lazy runs alternate between these (`Runner.run`'s `stick`)."""
REPAIRS = 40
"""Repaired runs per pair that aimed runs leave pending (`Analysis._repair`)."""
NEAREST = 3
"""A repaired run is told one of this many choices nearest to the start (`Analysis._repair`)."""
FRUITLESS = 10
"""Pairs repaired in a row without any question answered, after which a session repairs no
more (`Analysis._repair`): on a 60-iteration handshake loop, 6,024 repaired runs for 151
pairs answered nothing in 84-97 s, where the solver then took 13 s for everything."""
REPAIR_WORTH = 0.5
"""Repaired runs come before the solver while its questions take this many seconds on
average (or none was asked yet): a few hundred runs cost about as much as one slow query."""
PROBE_TIMEOUT = 4 * REPAIR_WORTH
"""Seconds a question may take while the solver's speed is measured (`races(probe=True)`):
past it, the solver is slow, and the question goes back to repaired runs, unanswered."""
PROBE_ASKS = 2
"""Questions the probe asks before it may call the solver slow: one question's time says
little (the first class may be an easy or a hard one: rand3x50-3 took 40.5 CPU s with one,
26.5 with four). Two decide as well as four and cost less where the solver is slow:
rand3x100-1 in 52 CPU s instead of 61, rand3x50-3 in 20.9 instead of 19.7 (bench/README.md)."""
PREFIX_EXTRA = (10, 20, 30, 40, 50, 60, 80)
"""Shorter programs asked about a race pair in turn (`_settle_prefix`): each thread keeps its
own statements of the pair and this many more, until the race is found or the shorter program
would be the whole one. Of the 39 / 25 / 38 pairs repaired runs leave on rand3x100 seeds 0-2,
which the whole program's solver does not answer within 10 s, the first three lengths answer
19 / 17 / 37 (bench/README.md); some races need another thread 50 or 70 statements deep,
where it issues a notify they need."""
PREFIX_ROUND = 1
"""Threads are cut at multiples of this, so that nearby pairs share a shorter program. The
sharing saves less than the extra statements cost: on rand3x100-1 a pair whose race needs
thread 1 cut at 51 (sat in 5 s) got 60 with multiples of 10 (over 10 s), and seed 1 left one
question undecided at 60 s where exact cuts decide it in 42 s (bench/README.md)."""
PREFIX_TIMEOUT = 5.0
"""Seconds a question about a shorter program may take (at most the budget's timeout)."""
PREFIX_DEEP = 30
"""Questions about shorter programs keeping more than this many extra statements get the
budget's whole timeout (`--timeout`, 10 s by default) instead of PREFIX_TIMEOUT: they are
the last ones asked about a pair, and some take 10-13 s (bench/README.md)."""
ANCHORED = 3
"""Predicted pairs that share a statement before they get an execution of their own
(`Analysis._predict_anchored`)."""
CHECKPOINT = 256
"""Steps between the machine states kept from the last execution replayed (`_replayed`): the
next one is replayed from the latest state before the two part ways. Executions predicted
from a run are subsequences of it and often share a long prefix: eight threads of flag
events, `sync E` and callbacks replayed 2.6 million steps for 2,082 executions, 55% of them
the same as the execution before."""
FOLLOW = True
"""Each model the solver finds for a race question is followed by runs aimed at every pair
still pending (`Analysis._follow`). On rand3x100-3 the runs following Z3's model of one race
answered 0 to 72 (21 on average over ten models) of the 520 pairs the repaired runs leave,
beyond what the model itself showed or predicted; through the pipeline, 483 pairs
were left undecided at a 300 s budget instead of 500 (bench/README.md)."""
FOLLOW_STEPS = 300_000
"""Steps of the runs that follow one model, at most (`Analysis._follow`, deepest pairs first):
about 400 runs of rand3x100 (730 steps, 1.6 s), where a job holds about 300 pairs when its
questions begin; on a program of 20,000 steps, 15 runs."""
RELAXED = True
"""Race questions of programs with several threads go to the relaxed session first
(`relaxed.py`), and to the full one only for what it leaves."""
RELAXED_STALL = 8
"""A relaxed question repeated this many times without answering a pair (each round only
adds implications back) is left to the full session: on two threads of the double-buffered
example, 47 such rounds proved 36 pairs no race in 17 s, the full session in 2.5 s."""
MAX_RACE_CANDIDATES = 20_000
"""Pairs of accesses the solver is asked about, at most (the pairs the must order leaves
open; three threads of 100 random statements leave 3,000-5,000). Two threads whose 1,500
kernels each write one buffer, kept in step only at their end, leave 2.25 million: listing
them took 7 GB and 15 minutes before the first question."""
MAX_PAIRS_READ = 2_000_000
"""Pairs read in the windows while listing, at most. Past `MAX_RACE_CANDIDATES` the pairs
are only counted per class (`Parts.overflow`), 8 bytes each: a 1,000-iteration loop of two
ranks reads the 499,500 pairs of one rank in 2.2 s."""


MAX_CLASSES = 2_000
"""Classes of race candidates (`instance_class`) counted past `MAX_RACE_CANDIDATES`, at most:
a loop has a few; a program that repeats no statement has one per pair, and is cut at the
cap instead (`Parts.unlisted`)."""


def _shares(sizes: list[int], cap: int) -> list[int]:
    """How many of each class's pairs are asked about: all when they fit under `cap`;
    otherwise the classes share it evenly, a class smaller than its share leaving the rest to
    the others."""
    if sum(sizes) <= cap:
        return list(sizes)
    shares = [0] * len(sizes)
    by_size = sorted(range(len(sizes)), key=lambda k: sizes[k])
    left = cap
    for done, k in enumerate(by_size):
        open_classes = len(sizes) - done
        even = left // open_classes
        if sizes[k] > even:  # this one and every larger one take the even share (a few one more)
            for extra, k in enumerate(by_size[done:]):
                shares[k] = even + (extra < left - even * open_classes)
            break
        shares[k] = sizes[k]
        left -= sizes[k]
    return shares


def _in_mask(order: list[int], mask: int) -> list[int]:
    """The steps of `order` whose bit is set in `mask`, in order. The mask is read as bytes
    once: shifting a mask of thousands of bits for each step cost 3.5 s of predicting races
    on eight threads of flag events, `sync E` and callbacks."""
    bits = mask.to_bytes((mask.bit_length() + 7) // 8, "little")
    size = len(bits)
    return [step for step in order if step >> 3 < size and bits[step >> 3] >> (step & 7) & 1]


def _bits(mask: int) -> list[int]:
    """The steps whose bit is set in `mask` (few: the new steps of an execution that goes on
    from another, `Analysis._predict`)."""
    found = []
    while mask:
        low = mask & -mask
        found.append(low.bit_length() - 1)
        mask ^= low
    return found


def racing_classes(program: Program, races) -> frozenset:
    """The pairs of source statements (origins, unordered) that some racing pair of `races`
    (statement index pairs) is an instance of."""
    statements = program.statements
    return frozenset(frozenset((statements[a].origin, statements[b].origin)) for a, b in races)


class Analysis:
    """Asks the questions of one program on one solver session."""

    def __init__(self, program: Program, budget: Budget, order: MustOrder | None = None,
                 deadline: float | None = None):
        began = time.process_time()
        self.program = program
        self.budget = budget
        self.encoding = Encoding(program, order)
        self.orbits: Orbits | None = None
        """The race candidates' orbits under the program's symmetries, when the first session
        has them (`smt._orbits`): a race found shows its images' races too."""
        if deadline is None and budget.total is not None:
            deadline = time.time() + budget.total
        self._deadline = deadline
        self._session: Session | None = None
        self._relaxed: RelaxedSession | None = None
        self.order = self.encoding.order
        self.parts = Parts()
        self.parts.stats = self.stats = {
            "steps": len(self.encoding.steps), "rounds": self.order.rounds, "candidates": 0,
            "sat": 0, "unsat": 0, "unknowns": 0, "runs": 0, "run_answers": 0,
            "setup": time.process_time() - began, "races": 0.0, "lifetimes": 0.0, "deadlock": 0.0, "mismatches": 0.0,
            "slowest": 0.0, "relaxed_rounds": 0, "relaxed_added": 0, "deadlock_how": "not asked"}
        self._runs: list[tuple[Sat, bool]] | None = None
        self._rare: set[int] = set()
        """Steps that only covering runs took (`_cover`)."""
        self._leads: list[tuple[list[int], dict[int, int]]] = []
        """The runs (with each step's place in them) that a run aimed at a pair with a rare
        step may start from (`_lead_in`): every run, covering runs last (`_cover`)."""
        self._runner: Runner | None = None
        self._machine: Machine | None = None
        self._replay: tuple[tuple, list[tuple[int, object]]] = ((), [])
        """The steps of the execution replayed last, and (step count, machine state) taken
        every `CHECKPOINT` steps of it (`_replayed`)."""
        self._position_cache: tuple[object, dict[int, int]] = ((), {})
        """An execution order and each step's place in it (`_positions`)."""
        self._bounds: tuple[list[int], list[int]] | None = None
        self._interval_steps: tuple[dict[int, int], dict[int, int]] | None = None
        """Each statement's first step and last step, mapped back to the statement."""
        self._intervals_known: tuple[tuple[int, ...], dict[int, int], dict[int, int]] = ((), {}, {})
        """The execution `_intervals` read last, and what it found there."""
        self._asked = (0, 0.0)
        """Questions asked of the solver (either session), and their wall seconds."""
        self._fruitless = 0
        """Pairs repaired one after another without a question answered (`_repair`)."""
        self._probing = False
        """Set by `races(probe=True)`: questions get PROBE_TIMEOUT and stop once the solver
        is slow."""
        self._threads = len({statement.thread for statement in program.statements})

    @property
    def session(self) -> Session:
        """The solver session, made when a question first needs it: a program whose every
        question the order settles never builds its formulas."""
        if self._session is None:
            began = time.process_time()
            self._session = Session(self.encoding, self.budget, self._deadline)
            self.stats["setup"] += time.process_time() - began
        return self._session

    @property
    def relaxed(self) -> RelaxedSession:
        """The session without the stream order across threads (`relaxed.py`), made when a
        question first needs it."""
        if self._relaxed is None:
            began = time.process_time()
            self._relaxed = RelaxedSession(self.encoding, self.runner(), self.budget, self._deadline)
            self.stats["setup"] += time.process_time() - began
        return self._relaxed

    @property
    def racing(self) -> set[tuple[int, int]]:
        """Every racing instance pair found (lower statement index first)."""
        return set(self.parts.races)

    @property
    def dead_uses(self) -> set[tuple[int, FindingKind]]:
        """Every (statement, USE_AFTER_FREE | USE_BEFORE_ALLOC) found."""
        return set(self.parts.dead)

    def deciding(self, races: list) -> tuple[list, list]:
        """The race questions (a, b, memory) split in two: those that can change the findings,
        and those whose source statements race on each of their buffers in an instance found
        already (`counts_only`): they only count instances, and wait for the others."""
        racing = racing_buffers(self.program, self.parts.races)
        deciding, counting = [], []
        for race in races:
            (counting if counts_only(self.program, racing, race[0], race[1]) else deciding).append(race)
        return deciding, counting

    def _unknown(self, into: list, query: str, statements: tuple[int, ...], verdict: Unknown) -> None:
        if verdict.reason == OUT_OF_TIME:
            self.parts.not_asked += 1
            if into is self.parts.race_unknowns:
                self.parts.races_not_asked.append(statements)
            return
        about = ("race" if into is self.parts.race_unknowns else
                 "use-after-free" if into is self.parts.dead_unknowns else "deadlock")
        into.append(solver_unknown(query, statements, verdict.reason, about))

    def ask(self, query, cut: tuple[int, ...] = (), relaxed: bool = False):
        """One solver question (on the relaxed session when `relaxed`), counted for the
        statistics. Once the budget is spent the answer is unknown without building the
        session (its formulas can take minutes)."""
        began = time.perf_counter()
        if query is False:
            verdict = Unsat()  # (the must order settled it: no session is built for it)
        elif self._spent():
            verdict = Unknown(OUT_OF_TIME)
        else:
            timeout = PROBE_TIMEOUT if self._probing else None
            verdict = (self.relaxed if relaxed else self.session).ask(query, cut, timeout)
        spent = time.perf_counter() - began
        self.stats["slowest"] = max(self.stats["slowest"], spent)
        self._asked = (self._asked[0] + 1, self._asked[1] + spent)
        self.stats[{Sat: "sat", Unsat: "unsat"}.get(type(verdict), "unknowns")] += 1
        return verdict

    def runs(self) -> list[tuple[Sat, bool]]:
        """Concrete runs of the program (`runs.py`), each checked by the executor's step rules
        (`admits`): (the execution, whether it got stuck). Answers read off them need no
        query, and their verdicts carry no model. The random runs (one per `EAGERNESS`
        entry) are followed by runs that give the threads a fixed priority
        (`Runner.prioritized`), which reach further where threads share streams."""
        if self._runs is None:
            self.encoding.all_items()  # (a program past the cap on open orderings is refused before any run)
            runner = self.runner()
            self._runs = []
            made = [runner.run(seed, eager) for seed, eager in enumerate(EAGERNESS)]
            if EAGERNESS:
                made += [runner.prioritized(threads) for threads in thread_orders(len(self.program.threads))]
            for order, stuck in made:
                verdict = self.admits(order)
                self.stats["runs"] += 1
                if verdict is not None:
                    self._runs.append((verdict, stuck))
        return self._runs

    def admits(self, order: list[int]) -> Sat | None:
        """Whether `order` is an execution prefix, as the executor's step rules say (replayed
        on `Machine`, the independent semantics every witness is confirmed by): a Sat with
        no model, or None."""
        if not self.order.impossible.isdisjoint(order):
            return None  # (no execution takes one: refused before any replay)
        witness = self.encoding.witness(order)
        if self._replayed(witness) is None:
            return None
        return Sat(witness, tuple(order))

    @property
    def machine(self) -> Machine:
        """The executor's machine for this program, made when a run is first checked."""
        if self._machine is None:
            self._machine = Machine(self.program)
        return self._machine

    def _replayed(self, witness) -> Store | None:
        """The executor's state after the witness's steps, None if one of them is illegal
        where it is taken. Replayed from the latest state kept of the execution replayed
        before (`CHECKPOINT`) that the two share."""
        machine = self.machine
        steps = witness.steps
        before, kept = self._replay
        if len(before) <= len(steps) and steps[:len(before)] == before:
            shared = len(before)  # (an execution that goes on from the last one: `_predict`)
        else:
            shared = next((k for k, (old, new) in enumerate(zip(before, steps)) if old != new),
                          min(len(before), len(steps)))
        while kept and kept[-1][0] > shared:
            kept.pop()
        taken, state = kept[-1] if kept else (0, machine.initial())
        store = Store(state)
        try:
            for at in range(taken, len(steps)):
                if at % CHECKPOINT == 0 and (not kept or kept[-1][0] < at):
                    kept.append((at, store.freeze()))
                machine.advance_into(store, steps[at], track=False)
                taken = at + 1
        except IllegalStep:
            return None
        finally:  # (what was replayed, whatever stopped it, is what the kept states hold)
            self._replay = (steps[:taken], kept)
        return store

    def _cut(self, verdict: Sat, cut: tuple[int, ...]) -> Sat:
        """The same execution with its witness cut after the latest of the `cut` steps (read
        off the order alone: a run's verdict needs no solver session for it)."""
        position = self._positions(verdict.order)
        ends = [position[i] for i in cut if i in position]
        shown = verdict.order[: max(ends) + 1] if ends else verdict.order
        return Sat(self.encoding.witness(shown), verdict.order, verdict.model)

    def _positions(self, order: Sequence[int]) -> dict[int, int]:
        """step -> its place in `order`, kept for the latest order asked about: the dead uses
        read off one run (a thousand in a loop) each need it, and so do the executions
        `_predict` builds from one run."""
        known, position = self._position_cache
        if known is not order:
            position = {step: k for k, step in enumerate(order)}
            self._position_cache = (order, position)
        return position

    def runner(self) -> Runner:
        if self._runner is None:
            self._runner = Runner(self.encoding)
        return self._runner

    # --- races --------------------------------------------------------------------------

    def race_candidates(self, keep: list[bool] | None = None) -> list[tuple[Statement, Statement, int]]:
        """Statement pairs with a conflicting access, unordered by must-happen-before; with
        `keep` (per statement), only pairs whose smaller statement it keeps (the others are
        images of those under the program's symmetries: `checker.symmetry`).

        Pairs are formed per shared memory. The statements touching a memory are walked per
        chain (`layout.py`): along a chain, the ones that end before a starts form a prefix and
        the ones that start after a ends a suffix, so only the window between is paired.

        Past `MAX_RACE_CANDIDATES` pairs, each class of pairs (`instance_class`: a loop's
        instances of two source statements with the same accesses) keeps its first ones, the
        classes sharing the cap evenly, and the rest are counted per class
        (`Parts.overflow`): once a class's race is found they only count instances
        (`assemble`); otherwise they are reported undecided. Past `MAX_PAIRS_READ` pairs read,
        or past `MAX_CLASSES` classes once the cap is reached (statements that repeat no
        loop), the walk stops, and `Parts.unlisted` says so (one unknown: never a clean
        answer)."""
        order, layout = self.order, self.encoding.layout
        statements = self.program.statements
        size = len(statements)
        shapes: dict[tuple, int] = {}
        shape: list[int | None] = [None] * size
        classes: dict[tuple[int, int], array] = {}
        read = listed = 0

        def shape_of(s: Statement) -> int:
            known = shape[s.index]
            if known is None:
                known = shape[s.index] = shapes.setdefault(statement_class(s), len(shapes))
            return known

        def walk() -> str:
            """Lists the pairs; why it stopped at a cap before the end (empty: it did not)."""
            nonlocal read, listed
            prec, exclusive = order.prec, self._exclusive
            for memory, sharing in layout.accessing.items():
                if len(sharing) < 2 or not any(x.write for s in sharing for x in s.accesses
                                               if x.memory == memory):
                    continue
                on: dict[int, list[tuple[int, int, Statement]]] = {}
                for s in sharing:
                    chain = self._chain(s)
                    on.setdefault(chain, []).append(
                        (layout.index_on(layout.first_step(s), chain),
                         layout.index_on(layout.last_step(s), chain), s))
                walks = []
                for chain, items in on.items():
                    items.sort(key=lambda item: item[0])
                    walks.append((chain, [last for _, last, _ in items],
                                  [(s, layout.first_step(s), layout.last_step(s)) for _, _, s in items]))
                for a in sharing:
                    if keep is not None and not keep[a.index]:
                        continue  # (a is the smaller of each pair it lists: none is kept)
                    first_a, last_a = layout.first_step(a), layout.last_step(a)
                    for chain, lasts, on_chain in walks:
                        p = bisect_right(lasts, order.frontier(first_a, chain))
                        q = bisect_left(range(len(on_chain)), True, lo=p,
                                        key=lambda k: prec(last_a, on_chain[k][1]))
                        for b, first_b, last_b in on_chain[p:q]:
                            if b.index <= a.index:
                                continue
                            read += 1
                            # Each pair once: under the first memory the two conflict on.
                            if (conflict_memory(a, b) != memory or exclusive(a, b)
                                    or prec(last_a, first_b) or prec(last_b, first_a)):
                                continue
                            key = (shape_of(a), shape_of(b))
                            members = classes.get(key)
                            if members is None:
                                if len(classes) >= MAX_CLASSES and listed >= MAX_RACE_CANDIDATES:
                                    # (no loop: the pairs past the cap are not counted either)
                                    return (f"past {MAX_CLASSES:,} kinds of pairs once "
                                            f"{MAX_RACE_CANDIDATES:,} pairs were listed")
                                members = classes[key] = array("q")
                            members.append(a.index * size + b.index)
                            listed += 1
                        if read > MAX_PAIRS_READ:
                            return f"past {MAX_PAIRS_READ:,} pairs read"
            return ""

        self.parts.unlisted = self.parts.unlisted or walk()
        quota = _shares([len(members) for members in classes.values()], MAX_RACE_CANDIDATES)
        kept: list[int] = []
        for (key, members), share in zip(classes.items(), quota):
            if share < len(members):
                self.parts.cap = MAX_RACE_CANDIDATES
                members = array("q", sorted(members))
                first = divmod(members[share], size)
                self.parts.overflow[instance_class(statements[first[0]], statements[first[1]])] = (
                    len(members) - share, first, len(members))
            kept.extend(members[:share])
        kept.sort()
        return [(statements[i], statements[j], conflict_memory(statements[i], statements[j]))
                for i, j in (divmod(pair, size) for pair in kept)]

    def _exclusive(self, a: Statement, b: Statement) -> bool:
        """Two tasks that never run at once whatever their order: whichever was enqueued later
        starts only after the other completed (rule 1: one stream, outside a batch; rule 3:
        the legacy stream and a blocking stream of one device)."""
        if not (a.is_task and b.is_task):
            return False
        if a.stream == b.stream:
            return a.batch is None or a.batch != b.batch
        streams = self.program.streams
        sa, sb = streams[a.stream], streams[b.stream]
        return (sa.device == sb.device and sa.context == sb.context
                and {sa.mode, sb.mode} == {StreamMode.LEGACY, StreamMode.BLOCKING})

    def _chain(self, statement: Statement) -> int:
        layout = self.encoding.layout
        if statement.is_task:
            return layout.task_chain[statement.index]
        return layout.thread_chain[statement.thread]

    def _first_last(self) -> tuple[list[int], list[int]]:
        """Per statement: its first and last step (of its access interval)."""
        if self._bounds is None:
            encoding = self.encoding
            self._bounds = ([encoding.first_step(s) for s in self.program.statements],
                            [encoding.last_step(s) for s in self.program.statements])
        return self._bounds

    def _harvest(self, sat: Sat, pending: dict, witnesses: bool = True) -> dict:
        """Every pending candidate that also races in `sat`'s execution, with its witness
        and how much of it shows the race (`Parts.races`; None without `witnesses`): one
        model usually shows many races, and each needs no query of its own. (Pending pairs
        are keyed by their statements' indices: the execution is read once for where each
        statement's interval begins and ends, then each pair is two lookups.)"""
        begins, ends = self._intervals(sat.order)
        never = len(sat.order)
        found = {}
        whole = None
        for pair in pending:
            a, b = pair
            sa = begins.get(a)
            if sa is None:
                continue
            sb = begins.get(b)
            if sb is not None and sa < ends.get(b, never) and sb < ends.get(a, never):
                if witnesses and whole is None:
                    whole = self.encoding.witness(sat.order)
                found[pair] = (pending[pair][2], whole, max(sa, sb) + 1) if witnesses else None
        return found

    def _intervals(self, order) -> tuple[dict[int, int], dict[int, int]]:
        """Per statement whose access interval begins in the execution `order`: the position
        of its first step; and per statement whose interval ends there, of its last."""
        if self._interval_steps is None:
            first, last = self._first_last()
            self._interval_steps = ({step: s for s, step in enumerate(first)},
                                    {step: s for s, step in enumerate(last)})
        first_of, last_of = self._interval_steps
        order = tuple(order)
        known, begins, ends = self._intervals_known
        if known and len(order) >= len(known) and order[:len(known)] == known:
            # An execution that goes on from the last one read (`_predict`'s chained ones):
            # only its new steps are read.
            begins, ends, start = dict(begins), dict(ends), len(known)
        else:
            begins, ends, start = {}, {}, 0
        for k in range(start, len(order)):
            step = order[k]
            s = first_of.get(step)
            if s is not None:
                begins[s] = k
            s = last_of.get(step)
            if s is not None:
                ends[s] = k
        self._intervals_known = (order, begins, ends)
        return begins, ends

    def _predict(self, order: list[int], pending: dict) -> None:
        """Races the run `order` predicts (`Runner.needs`): pending pairs whose two starts
        rely on neither's end. Predicted pairs are packed into few executions, each checked
        by the executor's step rules (`admits`) before its answers are taken: first one per
        statement that many predicted pairs share (`_predict_anchored`), then the rest packed
        into subsequences of the run (the steps their starts rely on, in run order, with no
        packed pair's end among them)."""
        if not pending:
            return
        first, last = self._first_last()
        needs = self.runner().needs(order)
        predicted = []
        for a, b in pending:
            sa, sb = first[a], first[b]
            if sa not in needs or sb not in needs:
                continue
            ends = (1 << last[a]) | (1 << last[b])
            if not (needs[sa] & ends or needs[sb] & ends):
                predicted.append((a, b))
        if len(predicted) >= ANCHORED:
            self._predict_anchored(order, needs, predicted, pending)
        masks = [(needs[first[a]] | needs[first[b]], (1 << last[a]) | (1 << last[b]), (a, b))
                 for a, b in predicted if (a, b) in pending]
        before = (0, [])  # the mask of the last execution admitted, and that execution
        while masks and not self._spent():
            packed, closed, rest = 0, 0, []
            for item in masks:
                mask, ends, _ = item
                if (packed | mask) & (closed | ends):
                    rest.append(item)
                else:
                    packed, closed = packed | mask, closed | ends
            verdict = None
            if before[0] and not before[0] & ~packed:
                place = self._positions(order)
                # The last execution, then the rest of this one's steps in run order: a loop's
                # pairs each need the ends of the pair before (one execution per pair), and the
                # replay goes on from the last one's steps instead of starting over (n^2 steps
                # replayed for n pairs, 60 of 110 s at 1,000 iterations of a pipeline).
                verdict = self.admits(before[1] + sorted(
                    (step for step in _bits(packed & ~before[0]) if step in place), key=place.__getitem__))
            if verdict is None:
                verdict = self.admits(_in_mask(order, packed))
            if verdict is None:
                return
            before = (packed, list(verdict.order))
            self.stats["predicted"] = self.stats.get("predicted", 0) + 1
            self._take(self._harvest(verdict, pending), pending)
            masks = [item for item in rest if item[2] in pending]

    def _predict_anchored(self, order: list[int], needs: dict[int, int],
                          predicted: list[tuple[int, int]], pending: dict) -> None:
        """One execution per statement x that at least ANCHORED predicted pairs share, most
        shared first: what x's start relies on, then x's start, then what the partners'
        starts rely on, each part in run order, and x's end never. Every pair (x, y) runs at
        once there: y starts before x ends (it never does), and x starts before y ends
        (y's end is none of what x's start relies on, or the pair would not be predicted).
        Subsequences of the run cannot do this where the partners follow one another
        (the kernels of a loop, each against the collective of one iteration): each
        partner's start relies on the previous partner's end, so no two such pairs share
        one, and a loop of n iterations took one execution per pair, n * n / 2 in all.
        Moving x's part first may change what the run's steps mean (a wait's binding), so
        each execution is checked like the others; a refused one leaves its pairs to the
        packing that follows. Only x's own pairs are read off each execution: reading every
        pending pair off each of them would cost the square of the pairs."""
        first = self._first_last()[0]
        shared: dict[int, list[tuple[int, int]]] = {}
        for pair in predicted:
            shared.setdefault(pair[0], []).append(pair)
            shared.setdefault(pair[1], []).append(pair)
        for x in sorted(shared, key=lambda x: (-len(shared[x]), x)):
            if self._spent():
                return
            pairs = [pair for pair in shared[x] if pair in pending]
            if len(pairs) < ANCHORED:
                continue
            front = needs[first[x]]
            union = 0
            for a, b in pairs:
                union |= needs[first[b if a == x else a]]
            rest = union & ~front
            execution = _in_mask(order, front) + _in_mask(order, rest)
            verdict = self.admits(execution)
            if verdict is None:
                continue
            self.stats["predicted"] = self.stats.get("predicted", 0) + 1
            self._take(self._harvest(verdict, {pair: pending[pair] for pair in pairs}), pending)

    def _follow(self, order: list[int], pending: dict) -> None:
        """Runs that follow the execution `order`, which the solver found (`Runner.run`'s
        `guide`), one aimed at each pending pair in each direction, deepest first: a model
        is a deep execution that random runs rarely reach (the right enqueue orders, the
        right notify for each await), and most races the solver leaves for later differ from
        it by a few choices that a followed run makes by itself. A model also stops where
        its question is answered; a followed run goes on, and shows the races further on.

        Only while the solver is slow (`solver_slow`), as for repaired runs, and at most
        FOLLOW_STEPS steps per model: where questions take milliseconds, a run per pending
        pair after each of them would cost more than asking."""
        if not FOLLOW or not EAGERNESS or not self.solver_slow():  # EAGERNESS (): no runs at all
            return
        guide = {step: k for k, step in enumerate(order)}
        taken = 0
        for a, b in self._deepest_first(pending):
            for x, y in ((a, b), (b, a)):
                if (a, b) not in pending or taken >= FOLLOW_STEPS or self._spent():
                    break
                followed = self._followed_run(x, y, guide)
                taken += len(followed)
                self.stats["followed"] = self.stats.get("followed", 0) + 1
                self._predict(followed, pending)

    def _followed_run(self, a: int, b: int, guide: dict[int, int]) -> list[int]:
        """A run aimed at the pair (a, b) that follows `guide` (step -> rank, `Runner.run`'s
        `guide`), with its ends held until both starts have happened. It makes no random
        choice: seed and eagerness go unused."""
        first, last = self._first_last()
        order, _ = self.runner().run(0, 0.0, ((first[a], last[a]), (first[b], last[b])), guide=guide)
        return order

    def _deepest_first(self, pending) -> list[tuple[int, int]]:
        """The pairs of `pending`, deepest first (by the sum of the two statements' positions
        in their threads): a run that reaches far predicts the races of what it passed."""
        position = self.encoding.layout.position
        return sorted(pending, key=lambda pair: (-position[pair[0]] - position[pair[1]], pair))

    def harvest_races(self, candidates: list, aim_counting: bool = True, aim: bool = True) -> list:
        """The race questions (a, b, memory) that no concrete run answers; the others are
        answered from the runs. Without `aim_counting`, the pairs that only count instances
        (`deciding`) get no aimed runs here: they wait for the questions that can change the
        findings (`smt._analyze`). Without `aim`, none does (only the random runs are read)."""
        began = time.process_time()
        self.stats["candidates"] += len(candidates)
        pending = {(a.index, b.index): (a, b, m) for a, b, m in candidates}
        if pending:
            for verdict, _ in self.runs():
                if self._spent():
                    break  # what is left is reported unasked
                self._take(self._harvest(verdict, pending), pending)
                self._predict(list(verdict.order), pending)
            self._cover(pending)
            if aim:
                self._aim(pending, aim_counting)
        self.stats["races"] += time.process_time() - began
        return list(pending.values())

    def _cover(self, pending: dict) -> None:
        """Covering runs (`runs.covering_runs`), when at least COVER_WORTH pending pairs have
        a statement that no run began: they join the runs (read for races here, and later for
        dead uses and deadlocks), and runs aimed at a pair with a statement only they began
        start from them (`_lead_in`). Where fewer pairs wait on such statements, those are
        likely never reached (a loop's last iteration behind a deadlock) and the solver
        settles them sooner than runs would search for them."""
        if not COVER or not EAGERNESS or self._spent():
            return
        runs = self.runs()
        began: set[int] = set()
        for verdict, _ in runs:
            began.update(verdict.order)
        first = self._first_last()[0]

        def enough(taken: set[int]) -> bool:
            return sum(1 for a, b in pending if first[a] not in taken or first[b] not in taken) < COVER_WORTH

        if enough(began):
            return
        for order, stuck in covering_runs(self.runner(), [list(verdict.order) for verdict, _ in runs],
                                          self.order.impossible, enough, self._deadline):
            if self._spent():
                break
            verdict = self.admits(order)
            self.stats["runs"] += 1
            if verdict is None:
                continue
            runs.append((verdict, stuck))
            self._rare.update(step for step in order if step not in began)
            self._take(self._harvest(verdict, pending), pending)
            self._predict(order, pending)
        self._leads = [(list(verdict.order), {step: k for k, step in enumerate(verdict.order)})
                       for verdict, _ in runs]

    def aim_at_races(self, questions: list, aim_counting: bool = True) -> list:
        """The aimed runs of `harvest_races` for the questions its random runs left (it was
        called without `aim`): the race questions that no run answers."""
        began = time.process_time()
        pending = {(a.index, b.index): (a, b, m) for a, b, m in questions}
        self._aim(pending, aim_counting)
        self.stats["races"] += time.process_time() - began
        return list(pending.values())

    def _aim(self, pending: dict, aim_counting: bool) -> None:
        if not pending or not EAGERNESS:  # no concrete runs at all: none aimed either (tests ask every question)
            return
        self._aimed_runs(pending, self.aims(list(pending.values()), aim_counting))

    def aims(self, questions: list, aim_counting: bool) -> list[tuple[int, int]]:
        """The pairs of `questions` that get aimed runs, deepest first: all of them, or
        without `aim_counting` those that can change the findings (`deciding`)."""
        pairs = {(a.index, b.index): (a, b, m) for a, b, m in questions}
        if not aim_counting:
            racing = racing_buffers(self.program, self.parts.races)
            pairs = {pair: race for pair, race in pairs.items()
                     if counts_only(self.program, racing, *race[:2]) is None}
        return self._deepest_first(pairs)

    def leads(self) -> tuple[tuple[tuple[int, ...], ...], frozenset[int]]:
        """What runs aimed in a job of their own (`aim_all`) lead in from: the runs kept
        (covering runs last) and the steps only covering runs took (`_cover`)."""
        return tuple(tuple(order) for order, _ in self._leads), frozenset(self._rare)

    def aim_all(self, candidates: list, watch: list = (), leads: tuple = (), rare: frozenset = frozenset()) -> list:
        """Aimed runs (`_aimed_runs`) for every race question of `candidates`, as an `aims`
        job (`jobs.py`) does: `leads` and `rare` are the first session's (`leads`). The
        races the runs show or predict among `watch` (the other jobs' questions, which get
        no runs here) are answered too; the questions left."""
        began = time.process_time()
        self._leads = [(list(order), {step: k for k, step in enumerate(order)}) for order in leads]
        self._rare = set(rare)
        pending = {(a.index, b.index): (a, b, m) for a, b, m in candidates}
        own = list(pending)
        pending.update({(a.index, b.index): (a, b, m) for a, b, m in watch})
        self._aimed_runs(pending, own)
        self.stats["races"] += time.process_time() - began
        return [pending[pair] for pair in own if pair in pending]

    def _take(self, found: dict, pending: dict) -> None:
        """Records races a run showed and strikes them from `pending`."""
        for done in found:
            del pending[done]
        self.parts.races.update(found)
        self.stats["run_answers"] += len(found)

    def _aimed_runs(self, pending: dict, aims: list) -> None:
        """Runs aimed at each pair of `aims` still pending, deepest first (`Runner.run`'s `target`):
        the first moves the two statements' prerequisites first and holds their ends open;
        for pairs still pending, a second holds their starts back instead (what they wait
        for may need other work to pass first), and two more hold one start back and the
        other's end open (`HOLDS`). The races a run predicts (`_predict`, which
        includes those it shows) are checked against the encoding before they are taken;
        the seeds are the pair's, so the answers depend on the program alone."""
        runner = self.runner()
        first, last = self._first_last()
        count = len(self.program.statements)
        aims = self._deepest_first({pair: pending[pair] for pair in aims})
        for k, (hold_start_a, hold_start_b) in enumerate(HOLDS):
            for a, b in aims:
                if (a, b) not in pending:
                    continue
                if self._spent():
                    return  # what is left goes to the solver, which reports it unasked
                held = (first[a] if hold_start_a else last[a], first[b] if hold_start_b else last[b])
                seed = (a * count + b) * 2 + k
                prefix = self._lead_in(a, b, random.Random(seed)) if self._rare_pair(a, b) else ()
                order, _ = runner.run(seed, AIMED_EAGERNESS, ((first[a], held[0]), (first[b], held[1])),
                                      prefix=prefix)
                self.stats["runs"] += 1
                self._predict(order, pending)

    def _rare_pair(self, a: int, b: int) -> bool:
        """Whether statement a or b began only in covering runs (`_cover`)."""
        first = self._first_last()[0]
        return first[a] in self._rare or first[b] in self._rare

    def _lead_in(self, a: int, b: int, rng: random.Random) -> list[int]:
        """A prefix for a run aimed at the pair (a, b), one of which only covering runs began
        (`_cover`): the start of the last run kept (the covering runs come last) that began
        both statements (else either), cut a little before the first of them (LEAD_IN of the
        way back, on average). A run aimed at the pair from the start does not get there."""
        first = self._first_last()[0]
        wanted = (first[a], first[b])
        both = [lead for lead in self._leads if all(step in lead[1] for step in wanted)]
        either = both or [lead for lead in self._leads if any(step in lead[1] for step in wanted)]
        if not either:
            return []
        order, place = either[-1]
        cut = min(place.get(step, len(order)) for step in wanted)
        back = int(rng.expovariate(1 / max(1.0, LEAD_IN * cut)))
        return order[:max(0, cut - back)]

    def narrow(self, deadline: float | None) -> None:
        """Asks nothing past `deadline` from now on (sooner than the budget's, for the
        questions that only count instances: `smt._analyze`)."""
        self._deadline = deadline
        for session in (self._session, self._relaxed):
            if session is not None:
                session.deadline = deadline

    def _spent(self) -> bool:
        """Whether the total budget's deadline has passed."""
        return self._deadline is not None and time.time() > self._deadline

    def solver_slow(self) -> bool:
        """Whether this session's questions took REPAIR_WORTH seconds on average (or none
        was asked yet)."""
        count, seconds = self._asked
        return count == 0 or seconds / count > REPAIR_WORTH

    def _repair(self, a: int, b: int, pending: dict) -> None:
        """`_repair_runs` for the pair, unless the last FRUITLESS pairs' runs answered nothing
        at all (not their own question, nor any other they showed or predicted): then the
        pairs left are likely no races, which runs never answer, and go to the solver."""
        if self._fruitless >= FRUITLESS:
            return
        before = len(pending)
        self._repair_runs(a, b, pending)
        self._fruitless = self._fruitless + 1 if len(pending) == before else 0

    def _repair_runs(self, a: int, b: int, pending: dict) -> None:
        """Aimed runs for the pair (a, b), each repaired from the last: where a's start relied
        on b's end (or b's on a's) through a choice of the run (which task was enqueued
        first, which record a wait was bound to, which setter left a notify set), the next
        run is told to make one of the nearest such choices the other way (`Runner.run`'s
        `after`), keeping what earlier runs were told, until the pair is predicted,
        REPAIRS runs are spent or the total budget is; when every choice named was told
        already, a fresh run starts over."""
        runner = self.runner()
        first, last = self._first_last()
        count = len(self.program.statements)
        target = ((first[a], last[a]), (first[b], last[b]))
        seed = (a * count + b) * 2
        rng = random.Random(seed)
        after: dict[int, set[int]] = {}
        order, _ = runner.run(seed, AIMED_EAGERNESS, target)
        for attempt in range(REPAIRS):
            if self._spent():
                return
            sides = [[(x, y) for x, y in self._spoilers(order, start, end) if x not in after.get(y, ())]
                     for start, end in ((first[a], last[b]), (first[b], last[a]))]
            choices = rng.choice([side for side in sides if side] or [[]])[:NEAREST]
            if not choices:  # every choice is asked for already: start over
                after = {}
                order, _ = runner.run(seed + attempt + 1, AIMED_EAGERNESS, target)
                self._predict(order, pending)
                if (a, b) not in pending:
                    return
                continue
            x, y = rng.choice(choices)
            after.setdefault(y, set()).add(x)
            order, _ = runner.run(seed + attempt, AIMED_EAGERNESS, target, after)
            self.stats["repairs"] = self.stats.get("repairs", 0) + 1
            self._predict(order, pending)
            if (a, b) not in pending:
                return

    def _spoilers(self, order: list[int], start: int, end: int) -> list[tuple[int, int]]:
        """The choices (x, y), "x before y", on a chain by which `start` relied on `end` in
        `order` (`Runner.relied`), nearest to start first; when start did not happen, the
        choices it waits on (`_blockers`); empty when neither."""
        position = {step: k for k, step in enumerate(order)}
        runner = self.runner()
        if start not in position:
            return self._blockers(position, start)
        if end not in position:
            return []
        parent: dict[int, tuple[int, tuple | None]] = {start: (start, None)}
        frontier = [start]
        while frontier and end not in parent:
            step = frontier.pop()
            for relied, choice in runner.relied(step, position[step], order, position):
                if relied is not None and relied not in parent:
                    parent[relied] = (step, choice)
                    frontier.append(relied)
        if end not in parent:
            return []
        choices, step = [], end
        while step != start:
            step, choice = parent[step]
            if choice is not None:
                choices.append(choice)
        return choices[::-1]

    def _blockers(self, position: dict[int, int], start: int) -> list[tuple[int, int]]:
        """The choices (x, y) on the chains of steps by which `start`, not taken by the end
        of a run, waits (`Runner.waits_for`), nearest first."""
        runner = self.runner()
        choices, seen, frontier = [], {start}, [start]
        for step in frontier:  # breadth first: the nearest choices first
            for blocker, choice in runner.waits_for(step, position):
                if choice is not None:
                    choices.append(choice)
                if blocker is not None and blocker not in seen:
                    seen.add(blocker)
                    frontier.append(blocker)
        return choices

    def repair_all(self, candidates: list, watch: list = ()) -> list:
        """Runs repaired for every race question (`_repair`); the questions left. The races
        the runs show or predict among `watch` (questions of other jobs, which get no runs of
        their own here) are answered too."""
        began = time.process_time()
        pending = {(a.index, b.index): (a, b, m) for a, b, m in candidates}
        own = list(pending)
        pending.update({(a.index, b.index): (a, b, m) for a, b, m in watch})
        for pair in own:
            if pair in pending and not self._spent():
                self._repair(*pair, pending)
        self.stats["races"] += time.process_time() - began
        return [pending[pair] for pair in own if pair in pending]

    def races(self, candidates=None, runs: bool = True, repair: bool = True, probe: bool = False,
              shorter: bool = False) -> list:
        """Asks every race question (`candidates`: (a, b, memory) triples; default: all),
        first reading the concrete runs when `runs`, and repairing runs (`_repair`) while
        the solver is slow when `repair`. With `probe`, the solver is being measured
        (`solver_slow`): each question gets at most PROBE_TIMEOUT, and the questions still
        open once it has shown itself slow are returned unasked, for repaired runs first.
        With `shorter` (the solver was found slow on this program), every pair is asked of
        shorter programs first (`_settle_prefix`), which answer races much faster."""
        candidates = self.race_candidates() if candidates is None else candidates
        if runs:
            candidates = self.harvest_races(candidates)
        began = time.process_time()
        pending = {(a.index, b.index): (a, b, m) for a, b, m in candidates}
        classes = list(self._classes(pending).values())
        repaired: set[tuple[int, int]] = set()
        if shorter and self._threads > 1:
            self._settle_prefix(list(pending), pending)
            classes = [[pair for pair in members if pair in pending] for members in classes]
        self._probing = probe
        try:
            for k, members in enumerate(classes):
                if repair and EAGERNESS and self.solver_slow():
                    # Until the solver has answered, this class's pairs until one stays open;
                    # then every pair left.
                    known = self._asked[0] > 0
                    for pair in [pair for group in classes[k:] for pair in group] if known else members:
                        if pair in pending and pair not in repaired and not self._spent():
                            repaired.add(pair)
                            self._repair(*pair, pending)
                            if not known and pair in pending:
                                break
                if RELAXED and self._threads > 1:
                    self._settle_relaxed(members, pending)
                self._settle(members, pending)
                if self._probe_over():
                    break
        finally:
            self._probing = False
        self.stats["races"] += time.process_time() - began
        return list(pending.values())

    def _probe_over(self) -> bool:
        """While probing (`races(probe=True)`), whether the solver has shown itself slow
        over PROBE_ASKS questions, or has taken so long already (over REPAIR_WORTH seconds
        per question for PROBE_ASKS questions) that it will have whatever the others take:
        asking them would only keep the other cores idle longer (rand3x100 seeds 0 and 2:
        the first question ran out of its PROBE_TIMEOUT, and the second took 2 s more)."""
        count, seconds = self._asked
        if count < PROBE_ASKS:
            return self._probing and seconds > REPAIR_WORTH * PROBE_ASKS
        return self._probing and self.solver_slow()

    def _classes(self, pending: dict) -> dict:
        """The pending pairs per pair of source statements (the loop instances of one
        question), in order of their first pair."""
        classes: dict[tuple[int, int], list] = {}
        for pair, (a, b, _) in pending.items():
            classes.setdefault(tuple(sorted((a.origin, b.origin))), []).append(pair)
        return classes

    def _settle(self, group: list, pending: dict) -> None:
        """Decides every pair of `group` with as few queries as it can: one query asks
        whether any of them races; a model answers every pair it shows racing (and any
        other pending one), and the question is asked again of the rest; unsat answers
        them all. A group the solver cannot decide is halved, down to single pairs, whose
        unknowns are reported one by one as before."""
        group = [pair for pair in group if pair in pending]
        while len(group) > 1 and not self._probe_over():
            if self._spent():
                for pair in group:  # each one unasked, without its formula (8 threads of 80
                    self._ask_one(pair, pending)  # rounds: 35,000 halvings built them, 20 s)
                return
            verdict = self.ask(any_of([self.encoding.race(*pending[pair][:2]) for pair in group]))
            if isinstance(verdict, Unsat):
                for pair in group:
                    del pending[pair]
                return
            found = self._harvest(verdict, pending) if isinstance(verdict, Sat) else {}
            if not any(pair in found for pair in group):
                half = len(group) // 2
                self._settle(group[:half], pending)
                self._settle(group[half:], pending)
                return
            self._read_model(found, list(verdict.order), pending)
            group = [pair for pair in group if pair in pending]
        if group and not self._probe_over():
            self._ask_one(group[0], pending)

    def _settle_relaxed(self, group: list, pending: dict) -> None:
        """Decides the pairs of `group` on the relaxed session (`relaxed.py`) with one
        question: whether any of them races. Unsat answers every pair left. A model answers
        each pair it shows racing whose two starts relied on no stream order it breaks,
        once `admits` takes that execution (with every other pending pair it shows).
        For a pair whose starts did rely on a broken one, a run that follows the model as
        closely as the rules let it (`Runner.run`'s `guide`) often shows the race, and is
        predicted from; if it does not, the implications that pair broke are added back.
        Then the question is asked again. When the solver cannot answer, or a model neither
        answers nor adds anything, the rest is left to `_settle` on the full session."""
        first, _ = self._first_last()
        group = [pair for pair in group if pair in pending]
        stalled = 0
        while group and not self._probe_over():
            if stalled >= RELAXED_STALL or self._spent():
                # Only adding implications back: the full session may say "no" sooner (or,
                # once the budget is spent, `_settle` reports the rest unasked).
                return
            verdict = self.ask(any_of([self.encoding.race(*pending[pair][:2]) for pair in group]), relaxed=True)
            self.stats["relaxed_rounds"] += 1
            if isinstance(verdict, Unsat):
                for pair in group:
                    del pending[pair]
                return
            if not isinstance(verdict, Sat):
                return
            order = list(verdict.order)
            position = {step: k for k, step in enumerate(order)}
            windows: set[Window] = set()
            before = len(pending)
            shown = self._harvest(verdict, {pair: pending[pair] for pair in group}, witnesses=False)
            for a, b in shown:
                if (a, b) not in pending:  # answered by a run followed for an earlier pair
                    continue
                broken, execution = self.relaxed.broken(order, [first[a], first[b]])
                if broken:
                    followed = self._followed_run(a, b, position)
                    self.stats["runs"] += 1
                    self._predict(followed, pending)
                    if (a, b) in pending:
                        windows |= broken
                    continue
                admitted = self.admits(execution)
                found = self._harvest(admitted, pending) if admitted is not None else {}
                if found:
                    self._take_model(found, pending)
                    self._predict(execution, pending)
            if not windows and len(pending) == before:
                windows, _ = self.relaxed.broken(order, order)
                if not windows:
                    return
            self.stats["relaxed_added"] += self.relaxed.add(windows)
            stalled = stalled + 1 if len(pending) == before else 0
            group = [pair for pair in group if pair in pending]

    def _settle_prefix(self, group: list, pending: dict) -> None:
        """Asks about the pairs of `group` in shorter programs (`prefix.py`), keeping
        PREFIX_EXTRA statements past the pair's in turn for each pair, and last every thread
        whole with the transparent statements left out (when there are any), the smallest
        shorter program waiting first (its questions are the cheapest; pairs waiting for the
        same one share it). Each execution found is the start of one of this program; it is
        checked here (`admits`) and answers every pair it shows or predicts. "No" in a
        shorter program answers nothing but in the last one, which leaves out only
        statements that change no answer; a pair it does not answer is asked elsewhere."""
        position = self.encoding.layout.position
        clear = transparent(self.program)
        full = tuple(len(thread.statements) for thread in self.program.threads)
        waiting: dict[tuple[int, ...], list[tuple[tuple[int, int], int]]] = {}
        queue: list[tuple[int, int, tuple[int, ...]]] = []

        opaque = [list(accumulate((index not in clear for index in thread.statements), initial=0))
                  for thread in self.program.threads]
        """Per thread, how many of its first k statements are not transparent."""

        def size(cuts: tuple[int, ...]) -> int:
            """Statements the shorter program keeps (but those of the pairs asked)."""
            return sum(counts[cut] for counts, cut in zip(opaque, cuts))

        def place(pair: tuple[int, int], first: int, asked: tuple[int, ...] = ()) -> None:
            """Makes `pair` wait for its shorter program of length `first` or, where that is
            the program just `asked`, the next longer one."""
            for level in range(first, len(PREFIX_EXTRA) + 1):
                cuts = full
                if level < len(PREFIX_EXTRA):
                    cuts = cuts_for(self.program, position, pair, PREFIX_EXTRA[level], PREFIX_ROUND)
                if cuts == full and not clear:
                    return  # the whole program: asked elsewhere
                if cuts == asked:
                    if cuts == full:
                        return
                    continue
                if cuts not in waiting:
                    waiting[cuts] = []
                    heapq.heappush(queue, (size(cuts), sum(cuts), cuts))
                waiting[cuts].append((pair, level))
                return

        for pair in group:
            if pair in pending:
                place(pair, 0)
        while queue and not self._spent():
            _, _, cuts = heapq.heappop(queue)
            entries = [(pair, level) for pair, level in waiting.pop(cuts) if pair in pending]
            if not entries:
                continue
            deep = cuts == full or max(PREFIX_EXTRA[level] for _, level in entries) > PREFIX_DEEP
            self._ask_prefix(cuts, [pair for pair, _ in entries], pending,
                             self.budget.timeout if deep else PREFIX_TIMEOUT, clear)
            for pair, level in entries:
                if pair in pending:
                    place(pair, level + 1, cuts)

    def _ask_prefix(self, cuts: tuple[int, ...], pairs: list, pending: dict, timeout: float,
                    clear: frozenset[int]) -> None:
        """Asks whether any of `pairs` races in the program cut at `cuts`, with the
        statements of `clear` but the pairs' own left out (`prefix`), on a fresh solver
        (`Session`'s `fresh`) within `timeout` seconds (at most the budget's); an execution
        found answers each pair it shows or predicts, and the question is asked again of the
        rest. One question about all of them costs about what one about a single pair does
        when the answer is no (2.9 s against 11.3 s for eight pairs of rand3x100-0 that all
        wait for longer programs, bench/README.md); "no" or no answer sends them all on,
        but "no" where every thread is whole (`clear` only leaves out transparent statements)
        answers them all: they do not race."""
        keep = frozenset(index for pair in pairs for index in pair)
        shorter = prefix(self.program, cuts, keep, clear)
        whole = all(cut == len(thread.statements) for cut, thread in zip(cuts, self.program.threads))
        back = {old: new for new, old in enumerate(shorter.original)}
        timeout = min(timeout, self.budget.timeout)
        try:
            encoding = Encoding(shorter.program)
            session = Session(encoding, replace(self.budget, timeout=timeout), self._deadline, fresh=True)
        except TooLarge:  # not expected (it has fewer open choices), but it answers nothing
            return
        statements = shorter.program.statements
        group = [pair for pair in pairs if pair in pending]
        while group and not self._spent():
            began = time.perf_counter()
            verdict = session.ask(any_of([encoding.race(statements[back[a]], statements[back[b]])
                                          for a, b in group]))
            self.stats["prefix_asked"] = self.stats.get("prefix_asked", 0) + 1
            self.stats["slowest"] = max(self.stats["slowest"], time.perf_counter() - began)
            if isinstance(verdict, Unsat) and whole:
                self.stats["prefix_unsat"] = self.stats.get("prefix_unsat", 0) + 1
                for pair in group:
                    del pending[pair]
                return
            if not isinstance(verdict, Sat):
                return
            order = shorter.whole_order(verdict.order, encoding, self.encoding)
            admitted = self.admits(order)
            found = self._harvest(admitted, pending) if admitted is not None else {}
            if not any(pair in found for pair in group):  # never expected: it is an execution here too
                self.stats["prefix_rejected"] = self.stats.get("prefix_rejected", 0) + 1
                return
            self.stats["prefix_sat"] = self.stats.get("prefix_sat", 0) + 1
            self._read_model(found, order, pending)
            group = [pair for pair in group if pair in pending]

    def _read_model(self, found: dict, order: list[int], pending: dict) -> None:
        """What a model of the solver answers: the races it shows (`found`), those its
        execution `order` predicts (`_predict`), and those the runs that follow it show
        (`_follow`)."""
        self._take_model(found, pending)
        self._predict(order, pending)
        self._follow(order, pending)

    def _take_model(self, found: dict, pending: dict) -> None:
        for done in found:
            del pending[done]
        self.parts.races.update(found)

    def _ask_one(self, pair: tuple[int, int], pending: dict) -> None:
        a, b, memory = pending[pair]
        if self._spent() and not self._probing:
            verdict = Unknown(OUT_OF_TIME)  # (asked, its formula would be built for nothing)
            self.stats["unknowns"] += 1
        else:
            verdict = self.ask(self.encoding.race(a, b),
                               cut=(self.encoding.first_step(a), self.encoding.first_step(b)))
        if isinstance(verdict, Sat):
            found = self._harvest(verdict, pending)
            found[pair] = (memory, verdict.witness, len(verdict.witness.steps))
            self._read_model(found, list(verdict.order), pending)
            return
        if isinstance(verdict, Unknown) and self._probing:
            return  # left open for repaired runs (`races`)
        del pending[pair]
        if isinstance(verdict, Unknown):
            self._unknown(self.parts.race_unknowns, race_question(self.program, a, b),
                          (a.index, b.index), verdict)

    # --- lifetimes ----------------------------------------------------------------------

    def lifetime_questions(self) -> list[tuple[Statement, FindingKind, str]]:
        """(statement, kind, wording) of every use-after-free / use-before-alloc question."""
        encoding, layout = self.encoding, self.encoding.layout
        asks = []
        for statement in self.program.statements:
            if statement.op is Op.FREE and statement.launch_only and statement.tensor_frees:
                asks.append((statement, FindingKind.USE_AFTER_FREE, "after it was freed"))  # (freed twice)
                continue
            if not statement.operation.accesses or not statement.accesses:
                continue
            segments = encoding.touched_segments(statement)
            launch_frees = any(free.launch_ordered for a in statement.accesses
                               for free in layout.frees.get(a.memory, ()))
            if launch_frees or statement.tensor_frees or any(g.frees for g in segments):
                asks.append((statement, FindingKind.USE_AFTER_FREE, "after it was freed"))
            if any(g.allocs for g in segments) or encoding.block_allocs(statement):
                asks.append((statement, FindingKind.USE_BEFORE_ALLOC, "before it was allocated"))
        return asks

    def _lifetime_query(self, statement: Statement, kind: FindingKind):
        if kind is FindingKind.USE_AFTER_FREE:
            return self.encoding.use_after_free(statement)
        return self.encoding.use_before_alloc(statement)

    def _dead_from_run(self, verdict: Sat, pending: dict) -> None:
        """Every pending dead-use question a concrete execution answers, read off the
        executor's replay of it (`_dead_shown`): no formula is built."""
        shown = self._dead_shown(verdict)
        for key in [key for key in pending if key in shown]:
            statement, kind, _ = pending.pop(key)
            self.parts.dead[key] = self._dead_use(kind, statement, self._cut(verdict, self._dead_cut(statement)))

    def _dead_from_model(self, verdict: Sat, pending: dict, queries: dict) -> None:
        """Every pending dead-use question whose formula holds in the model the solver gave
        for another question, each formula built first (kept in `queries` for its own
        question), in time linear in the frees and allocs of the memory, as many as the
        budget allows."""
        for key, (s, k, _) in list(pending.items()):
            if self._spent():
                return
            formula = queries.get(key)
            if formula is None:
                formula = queries[key] = self._lifetime_query(s, k)
            if self.session.holds(verdict, formula):
                self.parts.dead[key] = self._dead_use(k, s, self._cut(verdict, self._dead_cut(s)))
                del pending[key]

    def _dead_shown(self, verdict: Sat) -> set[tuple[int, FindingKind]]:
        """(statement, USE_AFTER_FREE or USE_BEFORE_ALLOC) for every use of dead memory the
        executor's machine reports while it replays the execution: the answers of the
        dead-use questions there (a use after a free in launch order is one after free, as
        the question has it; the tests hold the two to the same answers)."""
        machine = self.machine
        store = Store(machine.initial())
        shown = set()
        for step in verdict.witness.steps:
            _, uses = machine.advance_into(store, step)
            for statement, kind in uses:
                shown.add((statement, FindingKind.USE_BEFORE_ALLOC if kind == USE_BEFORE_ALLOC
                           else FindingKind.USE_AFTER_FREE))
        return shown

    def harvest_lifetimes(self, questions: list) -> list:
        """The dead-use questions that no concrete run answers; the others are answered."""
        began = time.process_time()
        pending = {(s.index, kind): (s, kind, when) for s, kind, when in questions}
        if pending:
            before = len(self.parts.dead)
            self._dead_from_races(pending)
            for run, _ in self.runs():
                if self._spent():
                    break  # what is left is reported unasked
                self._dead_from_run(run, pending)
            self.stats["run_answers"] += len(self.parts.dead) - before
        self.stats["lifetimes"] += time.process_time() - began
        return list(pending.values())

    def _dead_from_races(self, pending: dict) -> None:
        """Uses after free that the races found show: where a free f of x's bytes runs at
        once with x (both started, neither ended), f's effect may come next, while x still
        runs. The race's execution with f's lifetime step after it is checked by the
        executor's step rules (`admits`) like any run, and answers x's question without a query: in a
        loop that frees a buffer each iteration under another stream's kernel, the solver
        took 0.5-10 s for each of the questions the runs left, at 300 iterations."""
        if not any(kind is FindingKind.USE_AFTER_FREE for _, kind in pending):
            return
        encoding, statements = self.encoding, self.program.statements
        frees: dict[int, dict[int, None]] = {}  # x -> the frees of its bytes
        for (a, b), witness in self._races_shown():
            for x, f in ((a, b), (b, a)):
                key = (x, FindingKind.USE_AFTER_FREE)
                if key not in pending:
                    continue
                if x not in frees:
                    frees[x] = encoding.frees_touching(statements[x])
                if f not in frees[x]:
                    continue
                order = [encoding.step(step.kind, step.statement) for step in witness().steps]
                if encoding.last_step(statements[x]) in order:
                    continue  # x took one step only: done before f's effect could come
                verdict = self.admits(order + [encoding.lifetime_step(f)])
                if verdict is not None:
                    self.parts.dead[key] = self._dead_use(FindingKind.USE_AFTER_FREE, statements[x], verdict)
                    del pending[key]

    def _dead_from_aimed_runs(self, pending: dict) -> None:
        """Uses after free the solver could not decide: a run aimed at the use x and a free f
        of its bytes (both started, their ends held open, as for a race pair: `Runner.run`'s
        `target`), cut once both have started, with f's effect next while x still runs; the
        executor's step rules (`admits`) check it like any run. In a loop that frees a buffer
        under another stream's kernel, 300 iterations make more race pairs than are asked
        (`MAX_RACE_CANDIDATES`), so `_dead_from_races` missed a use whose race went unasked,
        and the solver ran out of its 10 s on it. (Asked of every dead-use question, such
        runs answer few: most are no use after free, which the solver proves in hundredths.)"""
        uses = [key for key in pending if key[1] is FindingKind.USE_AFTER_FREE]
        if not uses:
            return
        encoding, statements = self.encoding, self.program.statements
        first, last = self._first_last()
        count = len(statements)
        for key in uses:
            x = key[0]
            nearest = sorted(encoding.frees_touching(statements[x]), key=lambda f: (f < x, abs(f - x)))
            for f in nearest[:DEAD_AIMS]:
                if key not in pending or self._spent():
                    break
                order, _ = self.runner().run((x * count + f) * 2, AIMED_EAGERNESS,
                                             ((first[x], last[x]), (first[f], last[f])), stop=True)
                self.stats["runs"] += 1
                position = {step: k for k, step in enumerate(order)}
                if first[x] not in position or first[f] not in position or first[x] == last[x]:
                    continue
                cut = order[:max(position[first[x]], position[first[f]]) + 1]
                effect = encoding.lifetime_step(f)
                if last[x] in cut or effect in cut:
                    continue  # x ended first, or f's effect came before x started: not this way
                verdict = self.admits(cut + [effect])
                if verdict is not None:
                    self.parts.dead[key] = self._dead_use(FindingKind.USE_AFTER_FREE, statements[x], verdict)
                    del pending[key]

    def _races_shown(self):
        """(pair, its witness when called) of each racing pair found, and of each pair its
        orbit carries it to under the program's symmetries (`orbits`; `spread` carries them
        for good at the end)."""
        races = self.parts.races
        for pair in list(races):
            yield pair, lambda pair=pair: self.parts.witness(pair)
        if self.orbits is None:
            return
        members = self.orbits.members()
        for representative in list(races):
            _, witness, length = races[representative]
            for pair in members.get(representative, ()):
                if pair not in races:
                    path = self.orbits.path[pair]
                    yield pair, lambda witness=witness, path=path, length=length: (
                        Carried(witness, self.orbits, path).renamed(length))

    def lifetimes(self, questions=None, runs: bool = True, racing: frozenset = frozenset()) -> None:
        """Asks every dead-use question (`questions`: (statement, kind, wording); default:
        all); a model that answers one is read for the others. A use after free whose use
        races with a free of its bytes in some instances (those of this session's races, and
        `racing`: `racing_classes`) gets runs aimed at it first."""
        questions = self.lifetime_questions() if questions is None else questions
        if runs:
            questions = self.harvest_lifetimes(questions)
        began = time.process_time()
        pending = {(s.index, kind): (s, kind, when) for s, kind, when in questions}
        queries: dict = {}
        statements = self.program.statements
        racing = racing | racing_classes(self.program, self.parts.races)
        aimed: set = set()  # (the runs are seeded by the question: asked once)
        while pending:
            key, (statement, kind, when) = next(iter(pending.items()))
            del pending[key]
            query = queries.pop(key, None)
            if query is None and not self._spent():
                query = self._lifetime_query(statement, kind)
            if (query is not None and query is not False and kind is FindingKind.USE_AFTER_FREE
                    and any(frozenset((statement.origin, statements[f].origin)) in racing
                            for f in self.encoding.frees_touching(statement))):
                # Another instance of the use races with an instance of a free of its bytes:
                # likely a use after free, which a run aimed at it shows sooner than the solver.
                aimed.add(key)
                self._dead_from_aimed_runs({key: (statement, kind, when)})
                if key in self.parts.dead:
                    continue
            verdict = self.ask(query, cut=self._dead_cut(statement)) if query is not None else Unknown(OUT_OF_TIME)
            if isinstance(verdict, Unknown) and kind is FindingKind.USE_AFTER_FREE and key not in aimed:
                self._dead_from_aimed_runs({key: (statement, kind, when)})
                if key in self.parts.dead:
                    continue
            if isinstance(verdict, Unknown):
                self._unknown(self.parts.dead_unknowns, f"whether {described(self.program, statement)} can run {when}",
                              (statement.index,), verdict)
                continue
            if isinstance(verdict, Unsat):
                self.parts.dead_absent.add(key)
                continue
            self.parts.dead[key] = self._dead_use(kind, statement, verdict)
            self._dead_from_model(verdict, pending, queries)
        self._other_dead_memories()
        self.stats["lifetimes"] += time.process_time() - began

    def _other_dead_memories(self) -> None:
        """For a use after free of a statement that touches several freed memories, the others
        some execution also uses dead, each asked on its own (`Finding.elements`): the
        execution found for the statement shows the ones dead in it only. At most
        OTHER_DEAD_QUESTIONS are asked (a loop over arrays has such a statement per iteration)."""
        asked = 0
        for (index, kind), finding in list(self.parts.dead.items()):
            statement = self.program.statements[index]
            if kind is not FindingKind.USE_AFTER_FREE or len({a.memory for a in statement.accesses}) < 2:
                continue
            named = {finding.memory, *finding.elements}
            found = [m for m in dict.fromkeys(a.memory for a in statement.accesses)
                     if self.program.memories[m].name in named]
            for memory in dict.fromkeys(a.memory for a in statement.accesses):
                name = self.program.memories[memory].name
                if name in named or self._spent() or asked >= OTHER_DEAD_QUESTIONS or not (
                        self.encoding.frees_touching(statement, memory) or self.encoding.launch_lifetimes(memory)[1]):
                    continue
                asked += 1
                if isinstance(self.ask(self.encoding.use_after_free(statement, memory)), Sat):
                    found.append(memory)
            names = tuple(dict.fromkeys(self.program.memories[m].name for m in found))
            if len(names) > 1:
                self.parts.dead[(index, kind)] = replace(finding, elements=names)

    def _dead_cut(self, statement: Statement) -> tuple[int, ...]:
        encoding = self.encoding
        return (encoding.step(StepKind.ISSUE, statement.index), encoding.first_step(statement))

    def _dead_use(self, kind: FindingKind, statement: Statement, verdict: Sat) -> Finding:
        """The finding for a dead use the solver found, worded from its execution."""
        encoding, program = self.encoding, self.program
        position = self._positions(verdict.order)
        memories = [program.memories[a.memory] for a in statement.accesses] or [program.memories[statement.memory]]
        if kind is FindingKind.USE_BEFORE_ALLOC:
            memory = next((program.memories[g.memory] for g in encoding.touched_segments(statement)
                           if g.allocs), memories[0])
            return messages.use_before_alloc(program, statement, memory, 1, verdict.witness)
        first = position.get(encoding.first_step(statement))
        issue = position[encoding.step(StepKind.ISSUE, statement.index)]
        # Run order: a segment whose latest alloc or free before the access started is a free.
        best = None
        dead: dict[str, None] = {}  # every memory dead when the access starts (`Finding.elements`)
        for g in encoding.touched_segments(statement):
            latest = None
            for step, f in encoding.segment_chains(g)[2].items():
                at = position.get(step)
                if first is not None and at is not None and at < first and (latest is None or at > latest[0]):
                    latest = (at, f)
            if (latest is not None and program.statements[latest[1]].op is Op.FREE
                    and latest[1] != statement.index):
                dead[program.memories[g.memory].name] = None
                if best is None or latest[0] > best[0]:
                    best = (latest[0], program.statements[latest[1]], program.memories[g.memory])
        if best is not None:
            finding = messages.use_after_free(program, statement, best[1], best[2], 1, verdict.witness)
            return replace(finding, elements=tuple(dead)) if len(dead) > 1 else finding
        # Run order: a free that took effect while the access ran (the witness ends there).
        last = position.get(encoding.last_step(statement))
        for g in encoding.touched_segments(statement):
            for f in sorted(f for step, f in encoding.segment_chains(g)[2].items()
                            if program.statements[f].op is Op.FREE and first is not None
                            and (at := position.get(step)) is not None and first < at
                            and (last is None or at < last)):
                if f != statement.index:
                    shown = self._cut(verdict, (encoding._lifetime_step(f),)).witness
                    return messages.use_after_free(program, statement, program.statements[f],
                                                   program.memories[g.memory], 1, shown, while_running=True)
        # Launch order: the latest free enqueued before the statement was.
        found = None
        for memory in memories:
            frees = encoding.launch_lifetimes(memory.index)[1] + [  # (its tensor's own free too, of its memory)
                program.statements[f] for f in statement.tensor_frees
                if memory.index in program.statements[f].lifetime_memories]
            enqueued = [(position[encoding.step(StepKind.ISSUE, f.index)], f) for f in frees
                        if f.index != statement.index
                        and position.get(encoding.step(StepKind.ISSUE, f.index), issue + 1) < issue]
            if enqueued:
                dead[memory.name] = None
                if found is None:
                    free = max(enqueued, key=lambda item: item[0])[1]
                    found = messages.use_after_free(program, statement, free, memory, 1, verdict.witness,
                                                    launch_order=True)
        if found is not None:
            return replace(found, elements=tuple(dead)) if len(dead) > 1 else found
        return messages.use_after_free(program, statement, None, memories[0], 1, verdict.witness)

    # --- deadlock -----------------------------------------------------------------------

    def deadlock_question(self) -> frozenset[int] | None:
        """The guaranteed steps to assert when the deadlock question must be asked, None
        when no execution can deadlock (nothing can block, or every step is guaranteed)."""
        if not self.encoding.can_block():
            self.stats["deadlock_how"] = "skipped: nothing can block"
            return None
        taken = guaranteed_steps(self.encoding, self.order)
        if len(taken) == len(self.encoding.steps):
            self.stats["deadlock_how"] = "skipped: every step guaranteed"
            return None
        return taken

    def deadlock_from_runs(self) -> bool:
        """Whether a concrete run got stuck (then that run is the deadlock's witness): one of
        the runs every question shares, else one of the lazy runs (`Runner.run`'s `lazy`),
        up to `DEADLOCK_RUNS` of them or `DEADLOCK_RUN_WORK` steps in all."""
        for verdict, stuck in self.runs():
            if stuck and self._stuck_run(verdict):
                return True
        runner, work = self.runner(), 0
        for seed in range(DEADLOCK_RUNS if EAGERNESS else 0):
            order, stuck = runner.run(seed, 0.3, stick=DEADLOCK_STICKINESS[seed % len(DEADLOCK_STICKINESS)],
                                      lazy=True)
            self.stats["runs"] += 1
            if stuck and (verdict := self.admits(order)) is not None and self._stuck_run(verdict):
                return True
            work += len(order)
            if work >= DEADLOCK_RUN_WORK:
                break
        return False

    def _stuck_run(self, verdict: Sat) -> bool:
        """Report the deadlock a run that got stuck shows, if the executor agrees it is one."""
        explained = self.stuck(verdict)
        if explained:
            self.stats["deadlock_how"] = "a run got stuck"
            self.stats["run_answers"] += 1
            self.parts.deadlock.append(messages.deadlock(self.program, explained, verdict.witness))
        return bool(explained)

    def deadlock(self, taken: frozenset[int] | None = None, runs: bool = True) -> None:
        """Asks whether the program can deadlock (`taken`: from `deadlock_question`)."""
        began = time.process_time()
        try:
            if taken is None:
                taken = self.deadlock_question()
                if taken is None:
                    return
            if runs and self.deadlock_from_runs():
                return
            self.stats["deadlock_how"] = "asked"
            verdict = self.ask(self.encoding.deadlock(taken))
            if isinstance(verdict, Unknown):
                self._unknown(self.parts.deadlock, "whether the program can deadlock", (), verdict)
            elif isinstance(verdict, Sat):
                self.parts.deadlock.append(messages.deadlock(self.program, self.stuck(verdict), verdict.witness))
        finally:
            self.stats["deadlock"] += time.process_time() - began

    # --- calls of an interleaved comm that disagree ------------------------------------------------

    def _meetings(self) -> list[tuple[tuple, tuple[tuple[int, ...], ...]]]:
        """Each set of classes whose k-th calls meet (`Layout.meeting_sets`), with where its
        groups meet (`collectives.met_position` without the position)."""
        statements = self.program.statements
        return [(collectives.meeting_place(statements[classes[0][0]]), classes)
                for classes in self.encoding.layout.meeting_sets]

    def _read_mismatches(self, order: list[int], meetings: list) -> None:
        """The mismatches of the groups that met in the execution `order`: the calls each
        class enqueued at one position, once one of them has ended (as the exhaustive search
        reads them, with the execution up to that end as the witness)."""
        layout, program = self.encoding.layout, self.program
        position = {step: k for k, step in enumerate(order)}
        for where, classes in meetings:
            enqueued = [sorted((c for c in calls if layout.issue(program.statements[c]) in position),
                               key=lambda c: position[layout.issue(program.statements[c])]) for calls in classes]
            for k in range(min(len(calls) for calls in enqueued)):
                members = tuple(sorted(calls[k] for calls in enqueued))
                ends = [position[step] for step in (layout.completion(program.statements[m]) for m in members)
                        if step in position]
                if not ends:
                    continue
                found = collectives.met_mismatch(program, members, k)
                if found is not None:
                    witness = self.encoding.witness(order[:min(ends) + 1])
                    keep_mismatch(self.parts.mismatches, where + (k,), replace(found, witness=witness))

    def mismatches(self) -> None:
        """Whether calls that disagree can meet at each position of an interleaved comm
        (SP202): read off the concrete runs, then asked of the solver for each position no
        run settles, errors (kinds or roots differ) before warnings (only sizes differ)."""
        meetings = self._meetings()
        if not meetings:
            return
        began = time.process_time()
        try:
            for verdict, _ in self.runs():
                self._read_mismatches(list(verdict.order), meetings)
            encoding, statements = self.encoding, self.program.statements
            for where, classes in meetings:
                for k in range(min(len(calls) for calls in classes)):
                    disagreeing = self._disagreeing(classes, k)
                    for tier in range(collectives.WORST, 0, -1):
                        known = self.parts.mismatches.get(where + (k,))
                        if known is not None and collectives.severity(known) >= tier:
                            break
                        pairs = disagreeing.get(tier)
                        if not pairs:
                            continue
                        query = any_of([encoding.meet_at(statements[x], statements[y], k) for x, y in pairs])
                        verdict = self.ask(query)
                        if isinstance(verdict, Sat):
                            self._read_mismatches(list(verdict.order), meetings)
                        elif isinstance(verdict, Unknown):
                            comm = self.program.comms[where[1]].name
                            question = f"whether calls of comm `{comm}` that disagree meet at its position {k}"
                            if verdict.reason == OUT_OF_TIME:
                                self.parts.not_asked += 1
                            else:
                                keep_mismatch(self.parts.mismatches, where + (k,), solver_unknown(
                                    question, tuple(sorted({i for pair in pairs for i in pair})), verdict.reason,
                                    "collective mismatch"))
                            break
        finally:
            self.stats["mismatches"] += time.process_time() - began

    def _disagreeing(self, classes: tuple, k: int) -> dict[int, list[tuple[int, int]]]:
        """Pairs of calls of two of `classes` that can both be at position k and disagree, by
        the severity of their disagreement (`collectives.severity`: kinds or roots, sizes
        only, a warning)."""
        rules, statements = self.encoding.rules, self.program.statements
        at_k = []
        for calls in classes:
            ranges = [(c, rules.position_range(statements[c])) for c in calls]
            at_k.append([c for c, (low, high) in ranges if low <= k <= high])
        pairs: dict[int, list[tuple[int, int]]] = {}
        for i, first in enumerate(at_k):
            for second in at_k[i + 1:]:
                for x in first:
                    for y in second:
                        found = collectives.met_mismatch(self.program, tuple(sorted((x, y))), k)
                        if found is not None:
                            pairs.setdefault(collectives.severity(found), []).append((x, y))
        return pairs

    def stuck(self, verdict: Sat) -> tuple[Stuck, ...]:
        """Every unfinished thread and task of a deadlocked execution, with what its next
        step waits for, as the executor's machine explains it in the state the execution
        ends in (`Machine.stuck`: the same words the exhaustive search uses). Empty when the
        machine does not replay it to a state where nothing can move, which only a
        disagreement of the two semantics can cause: a stuck run is then not taken for a
        deadlock (the solver is asked), and a solver's deadlock fails the replay of its
        witness, an internal error (SP402), never a finding."""
        machine = self.machine
        store = self._replayed(verdict.witness)
        if store is None or machine.finished(store) or machine.enabled(store):
            return ()
        return tuple(Stuck(i, why) for i, why in machine.stuck(store))

    def run(self) -> tuple[Finding, ...]:
        """Every question on this one session, as findings."""
        self.races()
        self.lifetimes()
        self.deadlock()
        self.mismatches()
        return assemble(self.program, self.parts, self.budget.total)
