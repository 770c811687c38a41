"""Shorter programs (`checker/smt/prefix.py`): each thread cut after its first statements.

Their executions must be starts of executions of the whole program (checked against the whole
program's encoding and replayed by the executor), and the races the solver finds in them must
be races of the whole program.
"""

from __future__ import annotations

from unittest import mock

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from checker.frontend import load_text
from checker.smt.encode import Encoding
from checker.smt.jobs import SLOW_JOBS, split
from checker.smt.prefix import cuts_for, prefix
from checker.smt.queries import Analysis
from checker.smt.rules import MAX_OPEN, TooLarge
from checker.smt.runs import Runner
from checker.smt.solve import Budget, Session, Unknown
from strategies import specs
from test_smt import replays

HANDOFF = """\
device d { compute 4 }
buffer x 1MiB on d
stream s[3] on d
event ev
notify go
thread a {
  s[0]: kernel k1 writes x 1ms
  s[0]: notify go
  s[0]: record ev
  s[2]: kernel k4 reads x 1ms
}
thread b {
  s[1]: await go
  s[1]: kernel k2 reads x 1ms
  s[1]: wait ev
  s[1]: kernel k3 writes x 1ms
}
"""


def test_a_shorter_program_keeps_the_first_statements_of_each_thread() -> None:
    program = load_text(HANDOFF).program
    shorter = prefix(program, (2, 1))
    kept = [program.statements[i] for i in shorter.original]
    assert [s.span.line for s in kept] == [7, 8, 13]
    assert [s.index for s in shorter.program.statements] == [0, 1, 2]
    assert [list(t.statements) for t in shorter.program.threads] == [[0, 1], [2]]
    assert [s.op for s in shorter.program.statements] == [s.op for s in kept]
    position = Encoding(program).layout.position
    # k2 (thread b's second) and k4 (thread a's fourth), one more each, rounded to 2.
    assert cuts_for(program, position, (7, 3), 1, 2) == (4, 4)
    assert cuts_for(program, position, (5,), 0, 1) == (0, 2)


def test_a_collective_with_a_member_cut_off_never_starts() -> None:
    program = load_text("""\
device d0 { compute 1 comm 1 }
device d1 { compute 1 comm 1 }
buffer a 1KiB on d0
buffer b 1KiB on d1
stream s0 on d0
stream s1 on d1
comm world = { s0, s1 }
thread t0 { s0: allreduce world a 1ms }
thread t1 { s1: allreduce world b 1ms }
""").program
    shorter = prefix(program, (1, 0))
    assert program.groups[0].complete
    assert not shorter.program.groups[0].complete
    assert shorter.program.groups[0].members == (0,)


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(specs(max_statements=14), st.data())
def test_an_execution_of_a_shorter_program_starts_one_of_the_whole(text: str, data) -> None:
    """A run of the shorter program (any cuts), mapped to the whole program's steps, is an
    execution the whole program's encoding admits, and the executor replays it."""
    program = load_text(text, "<random>").program
    assume(program is not None)
    cuts = tuple(data.draw(st.integers(0, len(t.statements))) for t in program.threads)
    shorter = prefix(program, cuts)
    encoding = Encoding(shorter.program)
    order, _ = Runner(encoding).run(data.draw(st.integers(0, 1000)), data.draw(st.sampled_from([0.05, 0.5])))
    whole = Encoding(program)
    full = shorter.whole_order(order, encoding, whole)
    verdict = Session(whole, Budget(timeout=60.0)).admits(full)
    assert verdict is not None, (text, cuts)
    replays(program, verdict.witness)


@settings(max_examples=50, deadline=None, suppress_health_check=list(HealthCheck))
@given(specs(max_statements=14))
def test_races_found_in_shorter_programs_are_races(text: str) -> None:
    """Every pair the shorter programs answer (cut one statement past the pair and more) is
    a race the whole program's solver confirms, with a witness that replays."""
    program = load_text(text, "<random>").program
    assume(program is not None)
    analysis = Analysis(program, Budget(timeout=60.0))
    pending = {(a.index, b.index): (a, b, m) for a, b, m in analysis.race_candidates()}
    with mock.patch("checker.smt.queries.PREFIX_EXTRA", (0, 1, 3)), mock.patch("checker.smt.queries.PREFIX_ROUND", 1):
        analysis._settle_prefix(list(pending), pending)
    assert analysis.stats.get("prefix_rejected", 0) == 0, text
    statements = program.statements
    for (a, b), (_, witness) in analysis.parts.races.items():
        replays(program, witness)
        verdict = analysis.session.ask(analysis.encoding.race(statements[a], statements[b]))
        assert type(verdict).__name__ == "Sat", text


def test_shorter_programs_answer_races_the_whole_program_leaves_open() -> None:
    """With the whole program's solver answering nothing (every question unknown), races
    asked with `shorter` are still found in shorter programs; without, they stay open."""
    program = load_text(HANDOFF).program

    def unknown(self, query, cut=(), relaxed=False):
        return Unknown("stubbed")

    found = {}
    for shorter in (False, True):
        analysis = Analysis(program, Budget(timeout=60.0))
        with mock.patch.object(Analysis, "ask", unknown), mock.patch("checker.smt.queries.PREFIX_EXTRA", (0, 1)):
            analysis.races(runs=False, repair=False, shorter=shorter)
        found[shorter] = analysis.racing
        if not shorter:
            assert analysis.parts.race_unknowns
    assert not found[False]
    lines = {tuple(sorted(program.statements[i].span.line for i in pair)) for pair in found[True]}
    # k1 and k4 race in thread a alone; k3 and k4 only in the whole program (k3 needs the
    # await served), which the stub leaves open.
    assert lines == {(7, 10)}


def test_the_smallest_shorter_program_waiting_is_asked_first() -> None:
    """Each pair is asked of longer and longer shorter programs until one would be the whole
    program, and of all the programs pairs wait for, the smallest goes first."""
    text = "device d { compute 4 }\nbuffer x 1MiB on d\nstream s[2] on d\n" + "".join(
        f"thread t{t} {{\n" + "".join(f"  s[{t}]: kernel k{t}_{k} writes x 1ms\n" for k in range(8)) + "}\n"
        for t in range(2))
    program = load_text(text).program
    analysis = Analysis(program, Budget(timeout=60.0))
    pairs = [(0, 9), (2, 12), (6, 15)]  # early in both threads; a little later; late in both
    asked: list = []

    def record(self, cuts, pairs, pending, timeout):
        asked.append((cuts, tuple(pairs)))

    with mock.patch.object(Analysis, "_ask_prefix", record), \
            mock.patch("checker.smt.queries.PREFIX_EXTRA", (1, 2, 4)):
        analysis._settle_prefix(pairs, {pair: None for pair in pairs})
    # Level by level would ask (2, 3), (4, 6), (3, 4), (5, 7), ...: smallest first instead.
    assert asked == [((2, 3), ((0, 9),)), ((3, 4), ((0, 9),)), ((4, 6), ((2, 12),)),
                     ((5, 6), ((0, 9),)), ((5, 7), ((2, 12),)), ((7, 8), ((2, 12),))]
    # (6, 15) keeps all 16 statements with one more each: the whole program, asked elsewhere.


def test_slow_programs_split_their_race_questions_over_at_least_two_jobs() -> None:
    races = [(0, 1, 0), (0, 2, 0), (1, 2, 0)]
    assert len(split(races, [], None)) == 1
    jobs = split(races, [], None, slow=True)
    assert len(jobs) == min(SLOW_JOBS, len(races)) and all(job.slow for job in jobs)
    assert sorted(q for job in jobs for q in job.questions) == sorted(races)
    # Every k-th pair per job, so that a run of hard pairs of one class is shared.
    many = [(k, k + 1, 0) for k in range(10)]
    jobs = split(many, [], None, slow=True)
    assert [list(job.questions) for job in jobs] == [many[k::len(jobs)] for k in range(len(jobs))]


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(specs(max_statements=12))
def test_a_fresh_session_answers_as_a_scoped_one(text: str) -> None:
    """`Session(fresh=True)` (a new solver per question, as the shorter programs are asked)
    says sat and unsat where the scoped session does, and its models are executions."""
    program = load_text(text, "<random>").program
    assume(program is not None)
    encoding = Encoding(program)
    scoped = Session(encoding, Budget(timeout=60.0))
    fresh = Session(encoding, Budget(timeout=60.0), fresh=True)
    analysis = Analysis(program, Budget(timeout=60.0))
    for a, b, _ in analysis.race_candidates()[:6]:
        query = encoding.race(a, b)
        one, other = scoped.ask(query), fresh.ask(query)
        assert type(one) is type(other), text
        if type(other).__name__ == "Sat":
            assert scoped.admits(list(other.order)) is not None
            replays(program, other.witness)


def test_a_shorter_program_too_large_to_encode_answers_nothing() -> None:
    program = load_text(HANDOFF).program
    analysis = Analysis(program, Budget(timeout=60.0))
    pending = {(a.index, b.index): (a, b, m) for a, b, m in analysis.race_candidates()}
    assert pending
    too_large = mock.Mock(side_effect=TooLarge(0, MAX_OPEN + 1))
    with mock.patch("checker.smt.queries.Encoding", too_large), mock.patch("checker.smt.queries.PREFIX_EXTRA", (0, 1)):
        analysis._settle_prefix(list(pending), pending)
    assert too_large.called
    assert not analysis.racing and len(pending) == len(analysis.race_candidates())
