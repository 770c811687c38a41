"""The SMT engine's questions split into jobs (`checker/smt/jobs.py`) get the answers one
session gives, whether the jobs run here one after the other or in worker processes.

Small random programs have too few questions to be split, so the tests turn the concrete runs
off and lower the threshold (`INLINE`) and the job size (`CHUNK`) until every question is a
job of its own. Worker processes are forked, so that they see the same settings."""

from __future__ import annotations

import os
from unittest import mock

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from checker import smt
from checker.executor.replay import confirm
from checker.frontend import load_text
from checker.smt import jobs, queries
from checker.smt.solve import Budget
from strategies import specs


def verdicts(program, findings) -> list[tuple]:
    """What the findings say, without which execution shows them: sessions may find other
    executions, a deadlock's statements are those stuck in the one it shows, and a dead use
    names the free (or alloc) that it shows, one of several when several free the memory
    first. Statements by source line."""
    def lines(f) -> tuple:
        if f.kind.value == "deadlock":
            return ()
        if f.kind.value in ("use-after-free", "use-before-alloc"):
            return (program.statements[f.statements[0]].span.line,)
        return tuple(program.statements[i].span.line for i in f.statements)

    return sorted((f.kind.value, lines(f), f.instances) for f in findings)


def spying(seen: list | None):
    """`jobs.answer_all`, also collecting the jobs it is given into `seen`."""
    def spy(program, order, questions, *args, **kwargs):
        if seen is not None:
            seen.extend(questions)
        return jobs.answer_all(program, order, questions, *args, **kwargs)

    return spy


def assert_one_session_verdicts(program, split, text: str) -> None:
    """`split` says what one session's findings say, and every witness in it replays."""
    assert verdicts(program, split) == verdicts(program, smt.analyze(program, timeout=60.0)), text
    for finding in split:
        if finding.witness is not None:
            assert confirm(program, finding).ok, (finding.message, text)


def split_analysis(program, workers: int, seen: list | None = None):
    """`smt.analyze` with every question but the first class's a job; `seen` collects the
    jobs."""
    spy = spying(seen)
    with mock.patch.object(smt, "INLINE", 0), mock.patch.object(jobs, "CHUNK", 1), \
            mock.patch.object(smt, "answer_all", spy), mock.patch("checker.smt.queries.EAGERNESS", ()), \
            mock.patch("checker.smt.queries.PROBE_ASKS", 1), \
            mock.patch.dict(os.environ, {"STREAMPROOF_START_METHOD": "fork"}):
        return smt.analyze(program, timeout=60.0, workers=workers)


TWO_WRITERS = """\
device d { compute 2 }
buffer x 1MiB on d
buffer y 1MiB on d
stream s1 on d
stream s2 on d
notify go
thread a {
  s1: kernel k1 writes x 1ms
  s1: kernel k2 writes y 1ms
  notify go
}
thread b {
  s2: kernel k3 reads x writes y 1ms
  await go
  s2: kernel k4 writes x 1ms
}
"""


def test_a_split_program_gets_the_same_findings_in_worker_processes() -> None:
    program = load_text(TWO_WRITERS).program
    seen: list = []
    split = split_analysis(program, workers=2, seen=seen)
    assert sum(job.kind == "races" for job in seen) >= 2  # the first class is answered first, inline
    assert split == split_analysis(program, workers=1)
    assert verdicts(program, split) == verdicts(program, smt.analyze(program))
    assert {f.kind.value for f in split} == {"race"}


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(specs())
def test_jobs_answer_as_one_session_does(text: str) -> None:
    program = load_text(text, "<random>").program
    assume(program is not None)
    assert_one_session_verdicts(program, split_analysis(program, workers=1), text)


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(specs())
def test_worker_processes_give_the_findings_of_one_process(text: str) -> None:
    program = load_text(text, "<random>").program
    assume(program is not None)
    assert split_analysis(program, workers=2) == split_analysis(program, workers=1), text


def repaired_analysis(program, workers: int, seen: list | None = None):
    """`smt.analyze` with the concrete runs of the first session skipped and the solver
    taken as slow, so that every race question but the first class goes to `repairs` jobs
    first; `seen` collects the jobs."""
    from checker.smt.queries import Analysis

    spy = spying(seen)
    with mock.patch.object(smt, "INLINE", 0), mock.patch.object(jobs, "CHUNK", 1), \
            mock.patch.object(jobs, "REPAIR_CHUNK", 1), \
            mock.patch.object(jobs, "REPAIR_JOBS", jobs.MAX_JOBS), mock.patch.object(smt, "answer_all", spy), \
            mock.patch.object(Analysis, "harvest_races", lambda self, candidates, **_: list(candidates)), \
            mock.patch.object(Analysis, "aim_at_races", lambda self, questions, **_: list(questions)), \
            mock.patch.object(Analysis, "solver_slow", lambda self: True), \
            mock.patch("checker.smt.queries.PROBE_ASKS", 1), \
            mock.patch.dict(os.environ, {"STREAMPROOF_START_METHOD": "fork"}):
        return smt.analyze(program, timeout=60.0, workers=workers)


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(specs())
def test_repair_jobs_answer_as_one_session_does(text: str) -> None:
    """Races answered by `repairs` jobs, and the questions they leave to `races` jobs,
    give the verdicts of one session; every witness replays."""
    program = load_text(text, "<random>").program
    assume(program is not None)
    seen: list = []
    assert_one_session_verdicts(program, repaired_analysis(program, workers=1, seen=seen), text)
    repairs = [job for job in seen if job.kind == "repairs"]
    asked = {question for job in seen if job.kind == "races" for question in job.questions}
    assert asked <= {question for job in repairs for question in job.questions}


def test_repair_jobs_run_in_worker_processes() -> None:
    program = load_text(TWO_WRITERS).program
    seen: list = []
    split = repaired_analysis(program, workers=2, seen=seen)
    assert any(job.kind == "repairs" for job in seen)
    assert split == repaired_analysis(program, workers=1)
    assert verdicts(program, split) == verdicts(program, smt.analyze(program))


def test_a_repairs_job_answers_the_pairs_it_watches_without_repairing_them() -> None:
    """A run repaired for the job's own pair that shows a watched pair racing answers it;
    a watched pair is never returned as left, and gets no runs of its own."""
    from checker.smt.queries import Analysis
    from checker.smt.solve import Budget

    program = load_text(TWO_WRITERS).program
    analysis = Analysis(program, Budget(60.0))
    candidates = analysis.race_candidates()
    assert len(candidates) >= 2
    own, watched = candidates[:1], candidates[1:]
    repaired: list = []
    original = Analysis._repair

    def spy(self, a, b, pending):
        repaired.append((a, b))
        return original(self, a, b, pending)

    with mock.patch.object(Analysis, "_repair", spy):
        left = analysis.repair_all(own, watched)
    assert repaired == [(own[0][0].index, own[0][1].index)]
    assert all((a.index, b.index) == (own[0][0].index, own[0][1].index) for a, b, _ in left)
    answered = {pair for pair in analysis.racing}
    assert answered & {(a.index, b.index) for a, b, _ in watched}, "no watched pair answered"


def test_repairs_jobs_watch_each_others_pairs() -> None:
    races = [(k, k + 1, 0) for k in range(0, 120, 2)]
    split_up = jobs.split(races, [], None, kind="repairs")
    assert len(split_up) == min(jobs.REPAIR_JOBS, 3)
    for job in split_up:
        assert set(job.questions) | set(job.watch) == set(races)
        assert not set(job.questions) & set(job.watch)


def aimed_analysis(program, workers: int, seen: list | None = None, progress=None):
    """`smt.analyze` with one random run and no prioritized ones (so that pairs are left to
    aim at), and the runs aimed at them made in `aims` jobs (`AIM_SPLIT` 1); `seen`
    collects the jobs."""
    spy = spying(seen)
    with mock.patch.object(smt, "AIM_SPLIT", 1), mock.patch.object(smt, "answer_all", spy), \
            mock.patch("checker.smt.queries.EAGERNESS", (0.05,)), \
            mock.patch("checker.smt.runs.PRIORITY_ORDERS", 0), \
            mock.patch.dict(os.environ, {"STREAMPROOF_START_METHOD": "fork"}):
        return smt.analyze(program, timeout=60.0, workers=workers, progress=progress)


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(specs())
def test_aims_jobs_answer_as_one_session_does(text: str) -> None:
    """Races shown by runs aimed in `aims` jobs, and what they leave to the solver, give the
    verdicts of one session; every witness replays."""
    program = load_text(text, "<random>").program
    assume(program is not None)
    seen: list = []
    assert_one_session_verdicts(program, aimed_analysis(program, workers=1, seen=seen), text)
    aims = [job for job in seen if job.kind == "aims"]
    assert not aims or len(aims) == jobs.AIM_JOBS


def test_aims_jobs_run_in_worker_processes() -> None:
    """A lost notify under a lock: the one random run leaves the kernels' pair, which an
    `aims` job in a worker process aims runs at (they lead in from covering runs only where
    there are any: `test_analyze.test_an_aims_job_leads_in_as_the_first_session_does`)."""
    from test_analyze import LOST_NOTIFY_LOCK

    program = load_text(LOST_NOTIFY_LOCK).program
    seen: list = []
    heard: list = []
    split = aimed_analysis(program, workers=2, seen=seen, progress=heard.append)
    aims = [job for job in seen if job.kind == "aims"]
    assert len(aims) == jobs.AIM_JOBS and sum(len(job.questions) for job in aims) == 1
    sets = [(p.decided, p.total) for p in heard if "aimed runs" in p.current]
    assert sets[-1] == (jobs.AIM_JOBS, jobs.AIM_JOBS)
    assert split == aimed_analysis(program, workers=1)
    assert verdicts(program, split) == verdicts(program, smt.analyze(program))
    assert {f.kind.value for f in split} == {"race", "deadlock"}


def test_aims_jobs_share_the_pairs_and_watch_the_rest() -> None:
    aims = [(k, k + 1, 0) for k in range(0, 30, 2)]
    counting = [(100, 101, 0)]
    split_up = jobs.split_aims(aims, counting, ((1, 2, 3),), frozenset({2}))
    assert len(split_up) == jobs.AIM_JOBS
    assert sorted(q for job in split_up for q in job.questions) == sorted(aims)
    for job in split_up:
        assert set(job.questions) | set(job.watch) == set(aims) | set(counting)
        assert not set(job.questions) & set(job.watch)
        assert job.leads == ((1, 2, 3),) and job.rare == frozenset({2})


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(min_value=0.0, max_value=queries.PROBE_TIMEOUT), min_size=1, max_size=6))
def test_a_probe_ends_early_only_when_the_solver_is_slow_whatever_the_rest_take(seconds):
    """The probe (`races(probe=True)`) stops once `_probe_over` says so. Ending before
    PROBE_ASKS questions must give the verdict (`solver_slow`) that asking PROBE_ASKS
    questions would have given, however long the rest would have taken (none, or up to
    PROBE_TIMEOUT each); and after PROBE_ASKS questions it ends exactly when the solver
    is slow."""
    program = load_text("device d\nstream s on d\nthread t {\n  s: kernel k\n}\n", "one").program
    analysis = queries.Analysis(program, Budget(timeout=10.0))
    analysis._probing = True
    count, total = 0, 0.0
    for spent in seconds:
        count, total = count + 1, total + spent
        analysis._asked = (count, total)
        over = analysis._probe_over()
        slow = total / count > queries.REPAIR_WORTH
        if count >= queries.PROBE_ASKS:
            assert over == slow
        elif over:
            assert slow
            for rest in (0.0, queries.PROBE_TIMEOUT):  # the other questions, as fast or as slow as can be
                extra = queries.PROBE_ASKS - count
                assert (total + extra * rest) / queries.PROBE_ASKS > queries.REPAIR_WORTH
        if over:
            break
    analysis._probing = False
    assert not analysis._probe_over()
