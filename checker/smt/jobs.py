"""The questions of one program, split into jobs that worker processes can answer side by side.

A job is a list of questions (race pairs, dead uses, or the deadlock question) answered by a
session of its own: a fresh Z3 context, the program's encoding built again from the
`Program` (Z3 objects do not cross processes; the program and its must-happen-before order
do). What a job answers, and with which witness, depends only on the program and the job, so
the split is made from the program alone and the answers are merged in job order: the
findings are the same whether the jobs run here one after the other (`workers=1`) or in
worker processes (`workers=N`). Only a spent total budget (`--budget`, wall clock, shared by
every job through one deadline) can make them differ, as it can between two runs.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import z3

from checker.findings import FindingKind
from checker.ir import Program
from checker.smt.order import MustOrder
from checker.smt.answers import Parts
from checker.smt.queries import Analysis
from checker.resources import process_pool, worker_context
from checker.smt.solve import Budget

INLINE = 64
"""Questions left after the concrete runs that the first session answers itself; more are
split into jobs."""
CHUNK = 100
"""Questions per job (about), when split."""
MAX_JOBS = 8
REPAIR_JOBS = 2
"""At most this many `repairs` jobs. A run repaired for one pair often answers others (its
predictions), so each job watches every pair of the split (`Job.watch`) and the answers are
merged: jobs that each answered only their own pairs left more questions to the solver
(rand3x100-0, 2 workers, 60 s: one job left 47 undecided, two 68, six 107)."""
REPAIR_CHUNK = 25
"""Repair questions per `repairs` job (about), when split: repaired runs take about 0.1 s
per pair, so a second worker pays off from a few dozen pairs."""

AIM_SPLIT = 200
"""Pairs to aim runs at (`Analysis.aims`) from which the aimed runs are split into `aims`
jobs, so that both workers run them: on rand3x100 seeds 1 and 5 (888 and 1,710 pairs) two
halves took 5.2 / 3.9 s and 6.5 / 6.5 s against 8.1 and 12.2 s in one session, and left 180
and 658 questions against 184 and 660. Fewer pairs take a second or two in one session."""
AIM_JOBS = 2

SLOW_JOBS = 2
"""At least this many `races` jobs where the solver was found slow: each asks shorter
programs about its pairs, which takes seconds per pair, and two workers share them. Each
takes every k-th pair (rand3x100-2, 2 workers: decided in 49 s wall instead of 56 s with
contiguous slices). Four jobs left more questions open (rand3x100 seeds 1 / 0: 2 / 17
against 2 / 11): a model answers only the pairs of its own job."""


@dataclass(frozen=True, slots=True)
class Job:
    kind: str
    """`races`, `repairs`, `aims`, `lifetimes` or `deadlock`."""
    questions: tuple
    """races and repairs: (a, b, memory) statement indices; lifetimes: (statement, kind
    value, wording); deadlock: the guaranteed steps to assert."""
    slow: bool = False
    """The first session found the solver slow on this program: a `races` job asks shorter
    programs first (`Analysis.races`'s `shorter`)."""
    watch: tuple = ()
    """repairs and aims: the other jobs' questions. The job's runs answer them too where they
    show or predict their races, but are not aimed at them."""
    leads: tuple = ()
    """aims: the first session's runs that aimed runs lead in from (`Analysis.leads`)."""
    rare: frozenset = frozenset()
    """aims: the steps only the first session's covering runs took (`Analysis.leads`)."""
    racing: frozenset = frozenset()
    """lifetimes: the pairs of source statements known to race when the job was made
    (`queries.racing_classes`): a use that races with a free of its bytes gets runs aimed at
    the use after free before the solver is asked (`Analysis.lifetimes`)."""


@contextlib.contextmanager
def fresh_context():
    """Build and solve in a new Z3 context, so that answers do not depend on what this process
    did with Z3 before (the same reason `checker/parallel.py` starts each spec afresh)."""
    module = z3.z3
    saved = getattr(module, "_main_ctx", None)
    module._main_ctx = None
    try:
        yield
    finally:
        module._main_ctx = saved


def split(races: list, lifetimes: list, deadlock: frozenset[int] | None, kind: str = "races",
          slow: bool = False, racing: frozenset = frozenset()) -> list[Job]:
    """Jobs for the questions left: contiguous slices of the race pairs (in the order
    given: the caller lists the pairs of the same source statements together, so that they
    share a session, its models and its queries about any of them), the dead uses, the
    deadlock. The split depends on the questions alone. `kind`: `repairs` makes the race
    jobs repair runs only (`Analysis.repair_all`), leaving the solver's questions; each
    watches the others' pairs (`Job.watch`). `slow`: as `Job.slow`, for the race jobs.
    `repairs` jobs and the race jobs of a slow program take every k-th pair instead of a
    slice: their pairs each take seconds, not a query shared with the pairs beside them."""
    jobs = []
    if races:
        if kind == "races":
            count = min(MAX_JOBS, max(1, math.ceil(len(races) / CHUNK)))
            if slow:
                count = min(len(races), max(count, SLOW_JOBS))
        else:
            count = min(REPAIR_JOBS, max(1, math.ceil(len(races) / REPAIR_CHUNK)))
        if kind == "repairs" or slow:
            # Every k-th pair: the pairs of one class tend to be alike (all answered at
            # once, or all needing many repaired runs or the longest shorter programs), and
            # contiguous slices left one worker idle while the other took the hard ones.
            for k in range(count):
                own = tuple(races[k::count])
                mine = set(own)
                watch = tuple(race for race in races if race not in mine) if kind == "repairs" else ()
                jobs.append(Job(kind, own, slow, watch))
        else:
            size = math.ceil(len(races) / count)
            for k in range(0, len(races), size):
                jobs.append(Job(kind, tuple(races[k:k + size])))
    if lifetimes:
        jobs.append(Job("lifetimes", tuple(lifetimes), racing=racing))
    if deadlock is not None:
        jobs.append(Job("deadlock", tuple(sorted(deadlock))))
    return jobs


def split_aims(aims: list, watch: list, leads: tuple, rare: frozenset) -> list[Job]:
    """`AIM_JOBS` jobs of aimed runs for the race questions `aims` (deepest first, as
    `Analysis.aims` lists them; each job takes every k-th), each watching the others' pairs
    and `watch` (the questions that get no aimed runs: they only count instances)."""
    jobs = []
    for k in range(AIM_JOBS):
        own = tuple(aims[k::AIM_JOBS])
        mine = set(own)
        others = tuple(race for race in aims if race not in mine) + tuple(watch)
        jobs.append(Job("aims", own, watch=others, leads=leads, rare=rare))
    return jobs


def answer(program: Program, order: MustOrder, job: Job, budget: Budget, deadline: float | None) -> Parts:
    """Answers one job on a session of its own (its questions are the ones the concrete
    runs of the first session left, so it does not run them again; a `races` job does not
    repair runs either: `repairs` jobs did, when the solver was found slow)."""
    with fresh_context():
        analysis = Analysis(program, budget, order, deadline)
        statements = program.statements
        if job.kind == "races":
            analysis.races([(statements[a], statements[b], m) for a, b, m in job.questions],
                           runs=False, repair=False, shorter=job.slow)
        elif job.kind == "repairs":
            # What is left is read off the merged answers (`smt._analyze`): another job may
            # have answered this job's pairs.
            analysis.repair_all([(statements[a], statements[b], m) for a, b, m in job.questions],
                                [(statements[a], statements[b], m) for a, b, m in job.watch])
        elif job.kind == "aims":
            analysis.aim_all([(statements[a], statements[b], m) for a, b, m in job.questions],
                             [(statements[a], statements[b], m) for a, b, m in job.watch],
                             job.leads, job.rare)
        elif job.kind == "lifetimes":
            analysis.lifetimes([(statements[i], FindingKind(kind), when) for i, kind, when in job.questions],
                               runs=False, racing=job.racing)
        else:
            analysis.deadlock(frozenset(job.questions), runs=False)
        return analysis.parts


_SHARED: tuple | None = None
"""(program, order) for workers forked from this process (they need not be sent)."""


def _answer_in_worker(program, order, job, budget, deadline) -> Parts:
    if program is None:
        program, order = _SHARED
    return answer(program, order, job, budget, deadline)


def answer_all(program: Program, order: MustOrder, jobs: list[Job], budget: Budget,
               deadline: float | None, workers: int, done=None) -> list[Parts]:
    """The parts of every job, in job order; `workers` > 1 answers them in worker processes.
    `done(k)` hears of each job answered."""
    if workers <= 1 or len(jobs) <= 1:
        results = []
        for k, job in enumerate(jobs):
            results.append(answer(program, order, job, budget, deadline))
            if done is not None:
                done(k)
        return results
    global _SHARED
    from concurrent.futures import FIRST_COMPLETED, wait
    from concurrent.futures.process import BrokenProcessPool

    context = worker_context()
    forked = context.get_start_method() == "fork"
    _SHARED = (program, order)
    sent = (None, None) if forked else (program, order)
    results: list[Parts | None] = [None] * len(jobs)
    try:
        with process_pool(min(workers, len(jobs)), context) as executor:
            pending = {executor.submit(_answer_in_worker, *sent, job, budget, deadline): k
                       for k, job in enumerate(jobs)}
            while pending:
                finished, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in sorted(finished, key=pending.get):
                    k = pending.pop(future)
                    try:
                        results[k] = future.result()
                    except BrokenProcessPool:  # (the kernel's out-of-memory killer, most likely)
                        raise MemoryError("a solver worker process died while checking the spec") from None
                    if done is not None:
                        done(k)
    finally:
        _SHARED = None
    return results  # type: ignore[return-value]
