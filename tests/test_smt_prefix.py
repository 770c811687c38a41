"""Shorter programs (`checker/smt/prefix.py`): each thread cut after its first statements.

Their executions must be starts of executions of the whole program (checked against the whole
program's encoding and replayed by the executor), and the races the solver finds in them must
be races of the whole program.
"""

from __future__ import annotations

from itertools import combinations
from unittest import mock

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from checker.frontend import load_text
from checker.smt.encode import Encoding
from checker.smt.jobs import SLOW_JOBS, split
from checker.smt.prefix import cuts_for, prefix, transparent
from checker.smt.queries import Analysis
from checker.smt.rules import MAX_OPEN, TooLarge
from checker.smt.runs import Runner
from checker.smt.solve import Budget, Session, Sat, Unknown, Unsat
from checker.witness import StepKind
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


TWO_RANKS = """\
device d0 { compute 1 comm 1 }
device d1 { compute 1 comm 1 }
buffer a 1KiB on d0
buffer b 1KiB on d1
stream s0 on d0
stream s1 on d1
comm world = { s0, s1 }
"""
"""Two devices, a stream on each, and a comm of the two streams."""


def test_a_collective_with_a_member_cut_off_never_starts() -> None:
    program = load_text(TWO_RANKS + """\
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


def test_a_comm_cut_to_one_thread_per_stream_meets_by_what_is_kept() -> None:
    # t0 and t1 both call on s0, so the whole program's calls meet by enqueue order. Cut t0
    # off and t1's call is the first on s0: it meets t2's first call on s1 (the whole
    # program's program-order groups would pair it with t2's second, behind a first that
    # never meets, and the shorter program would hang where the whole one runs).
    program = load_text(TWO_RANKS + """\
thread t0 { s0: allreduce world a 1ms }
thread t1 { s0: allreduce world a 1ms }
thread t2 {
  s1: allreduce world b 1ms
  s1: allreduce world b 1ms
}
""").program
    shorter = prefix(program, (0, 1, 2))
    first = [g for g in shorter.program.groups if 0 in g.members]
    assert [(g.members, g.complete) for g in first] == [((0, 1), True)]
    encoding = Encoding(shorter.program)
    order, stuck = Runner(encoding).run(0, 0.05)
    assert stuck  # t2's second call has no partner in the shorter program
    whole = Encoding(program)
    full = shorter.whole_order(order, encoding, whole)
    verdict = Session(whole, Budget(timeout=60.0)).admits(full)
    assert verdict is not None
    assert whole.layout.step(StepKind.END, 1) in full  # t1's call met t2's first and ended
    replays(program, verdict.witness)


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(specs(max_statements=14, shared_comms=True, comm_heavy=True), st.data())
def test_a_shorter_program_of_calls_met_by_enqueue_order_starts_one_of_the_whole(text: str, data) -> None:
    """The same, with comm calls that threads share streams for: the shorter program's groups
    are matched again among the calls kept (a comm that two threads called on one stream may
    be one thread's alone once cut, and then meets by program order)."""
    test_an_execution_of_a_shorter_program_starts_one_of_the_whole.hypothesis.inner_test(text, data)


@settings(max_examples=50, deadline=None, suppress_health_check=list(HealthCheck))
@given(specs(max_statements=14))
def test_races_found_in_shorter_programs_are_races(text: str) -> None:
    """Every pair the shorter programs answer (cut one statement past the pair and more, then
    whole with the transparent statements left out) is answered as the whole program's
    solver answers it: a race it confirms, with a witness that replays, or no race."""
    program = load_text(text, "<random>").program
    assume(program is not None)
    analysis = Analysis(program, Budget(timeout=60.0))
    pending = {(a.index, b.index): (a, b, m) for a, b, m in analysis.race_candidates()}
    asked = dict(pending)
    with mock.patch("checker.smt.queries.PREFIX_EXTRA", (0, 1, 3)), mock.patch("checker.smt.queries.PREFIX_ROUND", 1):
        analysis._settle_prefix(list(pending), pending)
    assert analysis.stats.get("prefix_rejected", 0) == 0, text
    statements = program.statements
    for a, b in analysis.parts.races:
        replays(program, analysis.parts.witness((a, b)))
        verdict = analysis.session.ask(analysis.encoding.race(statements[a], statements[b]))
        assert type(verdict).__name__ == "Sat", text
    for a, b in set(asked) - set(pending) - set(analysis.parts.races):
        verdict = analysis.session.ask(analysis.encoding.race(statements[a], statements[b]))
        assert isinstance(verdict, Unsat), (text, a, b)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(specs(max_statements=14), st.data())
def test_an_execution_without_the_transparent_statements_starts_one_of_the_whole(text: str, data) -> None:
    """A run of a shorter program with transparent statements left out (any cuts, any
    statements kept), mapped back with them put in again, is an execution the whole
    program's encoding admits, and the executor replays it."""
    program = load_text(text, "<random>").program
    assume(program is not None)
    clear = transparent(program)
    assume(clear)
    cuts = tuple(data.draw(st.integers(0, len(t.statements))) for t in program.threads)
    keep = frozenset(data.draw(st.sets(st.sampled_from(sorted(clear)), max_size=3)))
    shorter = prefix(program, cuts, keep, clear)
    assert not keep & shorter.left_out and shorter.left_out <= clear
    encoding = Encoding(shorter.program)
    order, stuck = Runner(encoding).run(data.draw(st.integers(0, 1000)), data.draw(st.sampled_from([0.05, 0.5])))
    whole = Encoding(program)
    full = shorter.whole_order(order, encoding, whole)
    verdict = Session(whole, Budget(timeout=60.0)).admits(full)
    assert verdict is not None, (text, cuts, sorted(keep))
    replays(program, verdict.witness)
    if not stuck:  # every statement within the cuts comes back, also those after the last kept one
        within = {index for thread, cut in zip(program.threads, cuts) for index in thread.statements[:cut]}
        assert set(full) == {k for k, step in enumerate(whole.steps) if step.statement in within}, (text, cuts)


def _race_without_transparent(program, a, b, clear: frozenset[int]):
    """Whether a and b race in `program` with every thread whole and the statements of
    `clear` but a and b left out: the verdict, and what was left out."""
    full = tuple(len(t.statements) for t in program.threads)
    shorter = prefix(program, full, frozenset((a.index, b.index)), clear)
    back = {old: new for new, old in enumerate(shorter.original)}
    encoding = Encoding(shorter.program)
    statements = shorter.program.statements
    verdict = Session(encoding, Budget(timeout=60.0)).ask(
        encoding.race(statements[back[a.index]], statements[back[b.index]]))
    return verdict, shorter.left_out


@st.composite
def shared_streams(draw) -> str:
    """Two or three threads sharing three streams, events, a flag and a notify, most of
    their statements kernels and copies that race (the shapes of `bench/bench_smt.py`),
    sometimes on a device with a legacy stream or a hardware queue."""
    device = draw(st.sampled_from(["", " queues 2"]))
    lines = [f"device d {{ compute 2 copy 2{device} }}", "buffer x[2] 1MiB on d",
             "buffer h 1MiB on host pinned", "stream s[3] on d", "event ev", "event ready flag",
             "notify go"]
    if draw(st.booleans()):
        lines.append("stream main on d legacy")
    streams = ["s[0]", "s[1]", "s[2]"] + (["main"] if lines[-1].startswith("stream main") else [])
    kinds = ["kernel"] * 4 + ["copy", "host", "record", "record", "wait", "wait", "record_flag",
                              "wait_flag", "notify", "await", "sync"]
    for t in range(draw(st.integers(2, 3))):
        lines.append(f"thread t{t} {{")
        for _ in range(draw(st.integers(3, 8))):
            kind, stream = draw(st.sampled_from(kinds)), draw(st.sampled_from(streams))
            buffer = f"x[{draw(st.integers(0, 1))}]"
            lines.append("  " + {
                "kernel": f"{stream}: kernel k reads {buffer} writes x[{draw(st.integers(0, 1))}] 1ms",
                "copy": f"{stream}: copy h <- {buffer} 1ms",
                "host": "host f reads h 1ms",
                "record": f"{stream}: record ev",
                "wait": f"{stream}: wait ev",
                "record_flag": f"{stream}: record ready",
                "wait_flag": f"{stream}: wait ready",
                "notify": f"{stream}: notify go",
                "await": f"{stream}: await go",
                "sync": f"sync {stream}",
            }[kind])
        lines.append("}")
    return "\n".join(lines) + "\n"


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.one_of(shared_streams(), shared_streams(), specs(max_statements=14)))
def test_leaving_transparent_statements_out_changes_no_race_answer(text: str) -> None:
    """Whether two accesses race is the same question in the whole program and in the
    whole program without the transparent statements but theirs: the solver answers both
    alike, sat or unsat, for every pair of conflicting accesses (also those the
    must-happen-before order rules out, which are no race candidates)."""
    program = load_text(text, "<random>").program
    assume(program is not None)
    clear = transparent(program)
    analysis = Analysis(program, Budget(timeout=60.0))
    conflicting = [(a, b) for a, b in combinations(program.statements, 2)
                   if any(x.memory == y.memory and (x.write or y.write) for x in a.accesses for y in b.accesses)]
    for a, b in conflicting[:15]:
        sliced, left_out = _race_without_transparent(program, a, b, clear)
        verdict = analysis.session.ask(analysis.encoding.race(a, b))
        assert type(sliced) is type(verdict), (text, a.index, b.index, sorted(left_out))
        assert isinstance(verdict, (Sat, Unsat))


ORDERED_ONLY_BY = {
    "an event": "s[0]: kernel a writes x 1ms\n  s[0]: kernel k writes y 1ms\n  s[0]: record ev\n"
                "  s[1]: wait ev\n  s[1]: kernel b writes x 1ms",
    "a flag": "s[0]: kernel a writes x 1ms\n  s[0]: record ready\n  s[1]: wait ready\n"
              "  s[1]: kernel b writes x 1ms",
    "a notify": "s[0]: kernel a writes x 1ms\n  s[0]: notify go\n  s[1]: await go\n  s[1]: kernel b writes x 1ms",
    "a hardware queue": "q[0]: kernel a writes x 1ms\n  q[0]: kernel k writes y 1ms\n  q[1]: kernel b writes x 1ms",
    "the legacy stream": "s[0]: kernel a writes x 1ms\n  main: kernel k writes y 1ms\n  s[1]: kernel b writes x 1ms",
}


@pytest.mark.parametrize("how", sorted(ORDERED_ONLY_BY))
def test_a_pair_ordered_through_other_statements_stays_ordered_without_the_transparent_ones(how: str) -> None:
    """Kernels a and b are ordered only through the statements between them: whatever is
    left out as transparent, the whole program and the shorter one both answer "no race"."""
    program = load_text(f"""\
device d {{ compute 2 }}
device e {{ compute 2 queues 1 }}
buffer x 1MiB on {'e' if how == 'a hardware queue' else 'd'}
buffer y 1MiB on {'e' if how == 'a hardware queue' else 'd'}
stream s[2] on d
{'stream main on d legacy' if how == 'the legacy stream' else ''}
stream q[2] on e
event ev
event ready flag
notify go
thread t {{
  {ORDERED_ONLY_BY[how]}
}}
""").program
    a, b = (s for s in program.statements if s.name in ("a", "b"))
    sliced, left_out = _race_without_transparent(program, a, b, transparent(program))
    whole = Encoding(program)
    assert isinstance(Session(whole, Budget(timeout=60.0)).ask(whole.race(a, b)), Unsat)
    assert isinstance(sliced, Unsat), sorted(left_out)
    if how == "an event":
        assert [program.statements[i].name for i in left_out] == ["k"]


def test_transparent_statements_order_nothing_but_their_streams_tasks() -> None:
    program = load_text("""\
device d { compute 4 copy 2 queues 1 }
device e { compute 4 copy 2 }
device f { compute 4 copy 2 }
buffer x 1MiB on d
buffer y 1MiB on e
buffer z 1MiB on f
buffer h 1MiB on host
buffer p 1MiB on host pinned
stream q[2] on d
stream plain on e
stream legacy on e legacy
stream other on f
event ev
thread t {
  host f reads p 1ms
  q[0]: kernel k1 writes x 1ms
  q[1]: kernel k2 writes x 1ms
  other: kernel k3 writes z 1ms
  plain: kernel k4 writes y 1ms
  other: copy p <- z 1ms
  other: copy h <- z 1ms
  other: record ev
  sync other
}
""").program
    lines = {program.statements[i].span.line for i in transparent(program)}
    # Host code and other's kernel and pinned copy; not the hardware queue's tasks, not a
    # task on a device with a legacy stream, not the pageable copy (its thread waits).
    assert lines == {15, 18, 20}


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
    # k1 and k4 race in thread a alone; k3 and k4 only with thread a whole (k3 needs the
    # await served): in the whole program with k1 and k2 left out, which orders nothing.
    assert lines == {(7, 10), (10, 16)}


def test_the_smallest_shorter_program_waiting_is_asked_first() -> None:
    """Each pair is asked of longer and longer shorter programs until one would be the whole
    program, then of the whole program without its transparent statements, and of all the
    programs pairs wait for, the smallest goes first."""
    text = "device d { compute 4 }\nbuffer x 1MiB on d\nstream s[2] on d\nevent ev\n" + "".join(
        f"thread t{t} {{\n" + "".join(f"  s[{t}]: record ev\n" for k in range(8)) + "}\n"
        for t in range(2))
    text += "thread t2 {\n  s[0]: kernel a writes x 1ms\n  s[1]: kernel b writes x 1ms\n}\n"
    program = load_text(text).program
    analysis = Analysis(program, Budget(timeout=60.0))
    pairs = [(0, 9), (2, 12), (6, 15)]  # early in both threads; a little later; late in both
    asked: list = []

    def record(self, cuts, pairs, pending, timeout, clear):
        asked.append((cuts, tuple(pairs)))

    with mock.patch.object(Analysis, "_ask_prefix", record), \
            mock.patch("checker.smt.queries.PREFIX_EXTRA", (1, 2, 4)):
        analysis._settle_prefix(pairs, {pair: None for pair in pairs})
    # Level by level would ask (2, 3, 1), (4, 6, 2), (3, 4, 1), (5, 7, 2), ...: smallest
    # first instead (by the statements kept, then by the cuts). Last, every thread whole:
    # the program that only leaves out the two kernels (transparent), for all three.
    assert asked == [((2, 3, 1), ((0, 9),)), ((3, 4, 2), ((0, 9),)), ((4, 6, 1), ((2, 12),)),
                     ((5, 6, 2), ((0, 9),)), ((5, 7, 2), ((2, 12),)), ((7, 8, 2), ((2, 12),)),
                     ((8, 8, 1), ((6, 15),)), ((8, 8, 2), ((0, 9), (2, 12), (6, 15)))]


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
