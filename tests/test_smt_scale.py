"""The SMT engine's means of scale (bench/bench_smt_scale.py) answer as the plain ones do.

* One query per class of loop instances (`Analysis._settle`) finds exactly the racing
  instance pairs that one query per pair finds.
* Runs aimed at a pair (`Runner.run` with a target) are executions: the encoding admits them,
  and the races read off them replay in the executor. The steps a run may take next, kept up
  to date as it goes (`Frontier`), are the pending steps whose rules hold, read afresh.
* Repaired runs (`Analysis._repair`) name the choice by which a start relied on an end, run
  with the other choice, and the races they answer are races the solver confirms.
* The relaxed session (`relaxed.py`: the stream order across threads left out until a model
  breaks it) finds exactly the racing pairs the full session finds, and its witnesses replay.
* `Session.admits` (the encoding's check of an execution) agrees with `Session.confirm` (the
  solver with every time fixed), also with the snapshot binding in linear size, and rejects
  orders that are no execution. `Analysis.admits`, which checks runs with the executor's
  step rules instead, agrees with it on runs, shuffled, sorted and reversed runs and their
  prefixes.
"""

from __future__ import annotations

import contextlib
import random
import time
from pathlib import Path
from unittest import mock

from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from checker.frontend import load_text
from checker.smt import encode
from checker.smt.queries import Analysis
from checker.smt.runs import Frontier, Runner
from checker.smt.solve import Budget
from checker.witness import StepKind
from strategies import specs
from test_smt import replays

LOOPED = """\
device d { compute 4 }
buffer x[2] 1MiB on d
stream s[3] on d
event ev
thread a {
  for i in 0..4 {
    s[0]: kernel k1 writes x[i % 2] 1ms
    s[0]: record ev
  }
}
thread b {
  for i in 0..4 {
    s[1]: wait ev
    s[1]: kernel k2 reads x[0] 1ms
  }
}
thread c {
  for i in 0..3 {
    s[2]: kernel k3 writes x[1] 1ms
  }
}
"""


def solver_races(program, per_pair: bool, relaxed: bool = True) -> tuple[set, int, int]:
    """The racing pairs found by the solver alone (no concrete runs), the unknowns, and the
    queries asked; `per_pair` asks one query per candidate pair; `relaxed`: programs with
    several threads ask the relaxed session first."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch("checker.smt.queries.EAGERNESS", ()))
        stack.enter_context(mock.patch("checker.smt.queries.RELAXED", relaxed))
        if per_pair:
            stack.enter_context(mock.patch.object(
                Analysis, "_classes", lambda self, pending: {pair: [pair] for pair in pending}))
        analysis = Analysis(program, Budget(timeout=60.0))
        analysis.races()
    asked = analysis.stats["sat"] + analysis.stats["unsat"] + analysis.stats["unknowns"]
    return analysis.racing, len(analysis.parts.race_unknowns), asked


def test_class_queries_ask_fewer_questions_for_the_same_races() -> None:
    program = load_text(LOOPED).program
    by_class, unknown, class_queries = solver_races(program, per_pair=False)
    by_pair, unknown_pairs, pair_queries = solver_races(program, per_pair=True)
    assert by_class == by_pair and by_class
    assert unknown == unknown_pairs == 0
    assert class_queries < pair_queries


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(specs())
def test_class_queries_find_the_races_of_pair_queries(text: str) -> None:
    program = load_text(text, "<random>").program
    assume(program is not None)
    by_class, unknown, _ = solver_races(program, per_pair=False)
    by_pair, unknown_pairs, _ = solver_races(program, per_pair=True)
    assert unknown == unknown_pairs == 0
    assert by_class == by_pair, text


SHARED_STREAM = """\
device d { compute 2 }
buffer x 1MiB on d
stream s[2] on d
thread a {
  s[0]: kernel k1 writes x 1ms
  s[0]: kernel k2 writes x 1ms
}
thread b {
  s[0]: kernel k3 reads x 1ms
  s[1]: kernel k4 reads x 1ms
}
"""


def test_the_relaxed_session_adds_back_the_stream_order_a_model_breaks() -> None:
    """k1 and k3 share a stream, so they never overlap; only the stream order across the two
    threads (which one enqueued first is open) says so. The relaxed base lets them overlap;
    each such model breaks an implication among what their starts relied on, and once those
    are added back the answer is no, as on the full base."""
    program = load_text(SHARED_STREAM).program
    analysis = Analysis(program, Budget(timeout=60.0))
    encoding, relaxed = analysis.encoding, analysis.relaxed
    k1, k3 = program.statements[0], program.statements[2]
    question = encoding.race(k1, k3)
    for _ in range(len(relaxed.windows) + 1):
        verdict = relaxed.ask(question)
        if type(verdict).__name__ != "Sat":
            break
        broken, _ = relaxed.broken(list(verdict.order), [encoding.first_step(k1), encoding.first_step(k3)])
        assert broken, "a model where they overlap must break the stream order"
        relaxed.add(broken)
    assert type(verdict).__name__ == "Unsat"
    assert relaxed.added and relaxed.left_out == len(relaxed.windows) - len(relaxed.added)
    assert type(analysis.session.ask(question)).__name__ == "Unsat"


def test_the_relaxed_session_answers_the_races_of_a_shared_stream() -> None:
    """k4, on its own stream, races with both writers; the relaxed session answers both
    (from its models, or from runs that follow them), with witnesses that replay."""
    program = load_text(SHARED_STREAM).program
    with mock.patch("checker.smt.queries.EAGERNESS", ()):
        analysis = Analysis(program, Budget(timeout=60.0))
        analysis.races()
    assert analysis.racing == {(0, 3), (1, 3)}
    assert not analysis.parts.race_unknowns and analysis.stats["relaxed_rounds"] >= 1
    for witness in map(analysis.parts.witness, analysis.parts.races):
        replays(program, witness)
    full, _, _ = solver_races(program, per_pair=False, relaxed=False)
    assert full == analysis.racing


def test_broken_names_the_stream_order_a_relaxed_model_breaks() -> None:
    """An order where k3 (enqueued after k1 on the shared stream) starts before k1 ends
    breaks one implication (added back once); the same order with k1 ending first breaks
    none, and what k3's start relied on is then an execution."""
    program = load_text(SHARED_STREAM).program
    analysis = Analysis(program, Budget(timeout=60.0))
    encoding, relaxed = analysis.encoding, analysis.relaxed
    k1, k3 = program.statements[0], program.statements[2]
    issue1, issue3 = encoding.layout.issue(k1), encoding.layout.issue(k3)
    start1, end1 = encoding.first_step(k1), encoding.last_step(k1)
    start3 = encoding.first_step(k3)
    broken, execution = relaxed.broken([issue1, issue3, start1, start3], [start3])
    assert broken == {(start3, end1, issue1, issue3)} and execution == [issue3, start3]
    assert relaxed.add(broken) == 1 and relaxed.add(broken) == 0
    broken, execution = relaxed.broken([issue1, issue3, start1, end1, start3], [start3])
    assert broken == set() and execution == [issue1, issue3, start1, end1, start3]
    assert analysis.session.admits(execution) is not None


def _unfollowed(run):
    """`Runner.run` with no runs that follow a model (a guided run shows nothing), so that
    every answer of the relaxed session comes from its own models."""
    def run_unless_guided(self, *args, guide=None, **kwargs):
        return ([], True) if guide is not None else run(self, *args, **kwargs)
    return run_unless_guided


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(specs(max_statements=14), st.booleans())
def test_the_relaxed_session_finds_the_races_of_the_full_one(text: str, follow: bool) -> None:
    program = load_text(text, "<random>").program
    assume(program is not None)
    assume(len({s.thread for s in program.statements}) > 1)
    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch("checker.smt.queries.EAGERNESS", ()))
        if not follow:
            stack.enter_context(mock.patch.object(Runner, "run", _unfollowed(Runner.run)))
        analysis = Analysis(program, Budget(timeout=60.0))
        analysis.races()
    full, unknown, _ = solver_races(program, per_pair=False, relaxed=False)
    assert not analysis.parts.race_unknowns and unknown == 0
    assert analysis.racing == full, text
    for witness in map(analysis.parts.witness, analysis.parts.races):
        replays(program, witness)


FOLLOWED = """\
device d { compute 2 copy 2 }
buffer x[4] 1MiB on d
stream s[4] on d
event ev[3]
event ready flag
notify go
thread a {
  s[3]: record ready
  s[3]: kernel k reads x[3] writes x[2] 1ms
  s[2]: await go
  s[1]: wait ev[2]
}
thread b {
  s[1]: kernel k reads x[0] writes x[2] 1ms
  s[1]: await go
  s[0]: kernel k reads x[2] writes x[3] 1ms
  s[2]: record ev[1]
}
"""


def test_runs_that_follow_a_model_show_the_races_it_stops_short_of() -> None:
    """A model of "do statements 1 and 4 race?" ends once both have started; the kernel
    after b's await (statement 6) races with both, which neither the model nor what it
    predicts shows. Runs that follow the model go on past it and show both races, with
    witnesses that replay; with following off, or while the solver is fast, the pairs stay
    open."""
    program = load_text(FOLLOWED).program
    analysis = Analysis(program, Budget(timeout=60.0))
    layout = analysis.encoding.layout
    model = [layout.step(kind, statement) for kind, statement in (
        (StepKind.ISSUE, 0), (StepKind.COMPLETE, 0), (StepKind.ISSUE, 1), (StepKind.START, 1),
        (StepKind.ISSUE, 4), (StepKind.START, 4))]
    assert analysis.admits(model) is not None
    pending = {(a.index, b.index): (a, b, memory) for a, b, memory in analysis.race_candidates()}
    assert {(1, 4), (1, 6), (4, 6)} <= set(pending)
    analysis._take(analysis._harvest(analysis.admits(model), pending), pending)
    analysis._predict(model, pending)
    assert (1, 4) not in pending and {(1, 6), (4, 6)} <= set(pending)
    with mock.patch("checker.smt.queries.FOLLOW", False):
        analysis._follow(model, pending)
    assert {(1, 6), (4, 6)} <= set(pending)
    with mock.patch.object(analysis, "solver_slow", return_value=False):  # asking is cheaper
        analysis._follow(model, pending)
    assert {(1, 6), (4, 6)} <= set(pending) and "followed" not in analysis.stats
    with mock.patch("checker.smt.queries.FOLLOW_STEPS", 1):  # one run, whatever its length
        analysis._follow(model, dict(pending))
    assert analysis.stats["followed"] == 1
    analysis._follow(model, pending)
    assert not {(1, 6), (4, 6)} & set(pending)
    assert {(1, 6), (4, 6)} <= analysis.racing
    for pair in ((1, 6), (4, 6)):
        replays(program, analysis.parts.witness(pair))


def test_aimed_runs_answer_races_with_replaying_witnesses() -> None:
    program = load_text(LOOPED).program
    analysis = Analysis(program, Budget(timeout=60.0))
    candidates = analysis.race_candidates()
    with mock.patch("checker.smt.queries.EAGERNESS", (0.05,)):
        left = analysis.harvest_races(candidates)
    assert len(left) < len(candidates)
    assert analysis.stats["runs"] > 1
    for pair in analysis.parts.races:
        witness = analysis.parts.witness(pair)
        replays(program, witness)
        started = {step.statement for step in witness.steps}
        assert set(pair) <= started


def test_a_pair_no_aimed_run_answers_gets_every_hold_of_its_starts_and_ends() -> None:
    """`_aimed_runs`: ends held open, starts held back, and each start held back with the other
    statement's end held open, the last for races where one statement waits in its queue
    until the other has begun. Two kernels a sync orders are no race: no run answers them."""
    program = load_text("""\
device d
buffer x 1MiB on d
stream s1 on d
stream s2 on d
thread t {
  s1: kernel a writes x
  sync s1
  s2: kernel b writes x
}
thread u {
  s1: kernel c reads x
}
""").program
    analysis = Analysis(program, Budget(timeout=60.0))
    a, b = (s.index for s in program.statements if s.name in ("a", "b"))
    first, last = analysis._first_last()
    targets = []
    real = Runner.run

    def run(self, seed, eager, target=(), **options):
        targets.append(target)
        return real(self, seed, eager, target, **options)

    pending = {(a, b): (program.statements[a], program.statements[b], None)}
    with mock.patch.object(Runner, "run", run):
        analysis._aimed_runs(pending, [(a, b)])
    assert (a, b) in pending
    held = {tuple(hold for _, hold in target) for target in targets}
    assert held == {(last[a], last[b]), (first[a], first[b]), (first[a], last[b]), (last[a], first[b])}
    assert all(tuple(start for start, _ in target) == (first[a], first[b]) for target in targets)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(specs())
def test_admits_agrees_with_confirm_also_with_linear_binding(text: str) -> None:
    program = load_text(text, "<random>").program
    assume(program is not None)
    for small in (encode.SMALL_BINDING, 0):
        with mock.patch.object(encode, "SMALL_BINDING", small):
            analysis = Analysis(program, Budget(timeout=60.0))
            runner, session = analysis.runner(), analysis.session
            steps = len(analysis.encoding.steps)
            for seed in range(3):
                order, _ = runner.run(seed, 0.3)
                admitted = session.admits(order)
                assert admitted is not None, text
                assert session.confirm(order) is not None, text
                assert list(admitted.order) == order
                shuffled = list(order)
                random.Random(seed).shuffle(shuffled)
                if shuffled != order and steps:
                    assert (session.admits(shuffled) is None) == (session.confirm(shuffled) is None), text
                # The executor's step rules, which the pipeline checks executions with, agree.
                for other in (order, shuffled, order[: len(order) // 2], shuffled[: len(shuffled) // 2]):
                    assert (analysis.admits(other) is None) == (session.admits(other) is None), text



@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(specs())
def test_dead_use_questions_read_off_runs_agree_with_the_model(text: str) -> None:
    """`_dead_from_run` reads the dead-use questions a run answers off the executor's replay
    of it (`_dead_shown`) instead of evaluating each question's formula in the model the
    solver confirms the run with: the same answer for every question, on every run and on
    the first half of each."""
    program = load_text(text, "<random>").program
    assume(program is not None)
    analysis = Analysis(program, Budget(timeout=60.0))
    session = analysis.session
    questions = [(s, kind, analysis._lifetime_query(s, kind)) for s, kind, _ in analysis.lifetime_questions()]
    assume(questions)
    asked = {(s.index, kind) for s, kind, _ in questions}
    for seed in range(3):
        run, _ = analysis.runner().run(seed, 0.3)
        for order in (run, run[: len(run) // 2]):
            confirmed = session.confirm(order)
            assert confirmed is not None, text
            in_model = {(s.index, kind) for s, kind, formula in questions if session.holds(confirmed, formula)}
            assert analysis._dead_shown(confirmed) & asked == in_model, text


@st.composite
def tensor_specs(draw) -> str:
    """Threads that allocate caching-allocator tensors on streams, use them in kernels and
    memsets, record them on other streams and free them on the host: the dead uses of
    blocks (launch order) that `specs()` does not make."""
    tensors = draw(st.integers(1, 3))
    runtime = draw(st.sampled_from(["", " runtime cuda"]))
    lines = [f"device d {{ compute 2{runtime} }}", "stream s[3] on d"]
    lines += [f"tensor t{k} {draw(st.sampled_from([1, 2, 4]))}MiB on d" for k in range(tensors)]
    for thread in range(draw(st.integers(1, 3))):
        lines.append(f"thread h{thread} {{")
        lines.append(f"  s[{draw(st.integers(0, 2))}]: alloc t{thread % tensors}")
        for _ in range(draw(st.integers(2, 8))):
            tensor = f"t{draw(st.integers(0, tensors - 1))}"
            stream = f"s[{draw(st.integers(0, 2))}]"
            lines.append(draw(st.sampled_from([
                f"  {stream}: alloc {tensor}", f"  free {tensor}", f"  {stream}: kernel k reads {tensor}",
                f"  {stream}: kernel k writes {tensor}", f"  {stream}: record_stream {tensor}",
                f"  memset {tensor} 1us"])))
        lines.append("}")
    return "\n".join(lines) + "\n"


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(tensor_specs())
def test_dead_uses_of_tensor_blocks_read_off_runs_agree_with_the_model(text: str) -> None:
    """The same as for `specs()`, on caching-allocator tensors: a block used before any
    tensor was given it, or after a free in launch order, is read off the executor's
    replay as the question's formula says in the model."""
    test_dead_use_questions_read_off_runs_agree_with_the_model.hypothesis.inner_test(text)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(specs())
def test_the_executor_admits_the_orders_the_encoding_admits(text: str) -> None:
    """Runs in their order, sorted by step id, reversed, and cut in half: the executor's step
    rules (what the pipeline checks runs with) and the encoding's base agree on each, also
    with every wait bound in linear size."""
    program = load_text(text, "<random>").program
    assume(program is not None)
    for small in (encode.SMALL_BINDING, 0):
        with mock.patch.object(encode, "SMALL_BINDING", small):
            analysis = Analysis(program, Budget(timeout=60.0))
            session = analysis.session
            for seed in range(3):
                run, _ = analysis.runner().run(seed, 0.3)
                for order in (run, sorted(run), run[::-1], run[: len(run) // 2]):
                    assert (analysis.admits(order) is None) == (session.admits(order) is None), text


HANDOFF = """\
device d { compute 2 }
buffer x 1MiB on d
stream s[2] on d
event ev
notify go
thread a {
  s[0]: kernel k1 writes x 1ms
  s[0]: record ev
  notify go
  s[0]: kernel k3 writes x 1ms
  s[0]: record ev
}
thread b {
  await go
  s[1]: wait ev
  s[1]: kernel k2 reads x 1ms
}
"""



class CheckedFrontier(Frontier):
    """A frontier that reads every pending step afresh at each choice and compares."""

    def ready(self, position: dict[int, int]) -> list[int]:
        kept = super().ready(position)
        fresh = [y for y in self.rank if self.runner.blocker(y, position) is None]
        assert kept == sorted(fresh, key=self.rank.__getitem__)
        return kept


TWO_AWAITS = """\
device d { compute 3 }
stream s[3] on d
notify go
event f flag
thread a {
  s[0]: notify go
  s[0]: record f
  s[0]: reset f
}
thread b {
  s[1]: await go
  s[1]: wait f
}
thread c {
  s[2]: await go
  s[2]: wait f
}
"""
"""Two steps that read one set state are ready at once; taking one unreadies the other."""


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(specs(), st.randoms(use_true_random=False))
@example(TWO_AWAITS, random.Random(0))
def test_a_run_may_take_exactly_the_pending_steps_whose_rules_hold(text: str, rng: random.Random) -> None:
    program = load_text(text, "<random>").program
    assume(program is not None)
    analysis = Analysis(program, Budget(timeout=60.0))
    runner = analysis.runner()
    first, last = analysis._first_last()
    accessing = [s.index for s in program.statements if s.accesses]
    with mock.patch.object(Runner, "frontier", lambda self: CheckedFrontier(self)):
        for seed in range(4):
            order, _ = runner.run(seed, rng.random())
            target = ()
            if accessing:
                a, b = rng.choice(accessing), rng.choice(accessing)
                target = ((first[a], last[a]), (first[b], last[b]))
            runner.run(seed, 0.1, target)
            shuffled = list(order)
            rng.shuffle(shuffled)
            runner.run(seed, 0.0, target, guide={step: k for k, step in enumerate(shuffled)})
            if len(order) > 1:
                runner.run(seed, 0.3, after={order[0]: {order[-1]}})
            cut = rng.randrange(len(order) + 1)
            resumed, _ = runner.run(seed + 1, 0.05, prefix=order[:cut], stick=rng.choice((None, 0.0, 0.3)))
            assert resumed[:cut] == order[:cut]

def test_what_a_step_relied_on_keeps_the_bound_record() -> None:
    """The wait is bound to a record whose enqueue thread b also relies on (through the
    notify): what k2 relied on must include that record's completion."""
    relied_on_is_an_execution(HANDOFF)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(specs())
def test_what_a_step_relied_on_is_an_execution(text: str) -> None:
    program = load_text(text, "<random>").program
    assume(program is not None)
    relied_on_is_an_execution(text)


def relied_on_is_an_execution(text: str) -> None:
    """`Runner.needs`: the steps a step relied on, kept in run order, are an execution the
    encoding admits (and the solver accepts with every time fixed), and races predicted
    from them replay."""
    program = load_text(text, "<random>").program
    analysis = Analysis(program, Budget(timeout=60.0))
    runner, session = analysis.runner(), analysis.session
    for seed in range(4):
        order, _ = runner.run(seed, 0.3)
        needs = runner.needs(order)
        assert set(needs) == set(order)
        for k, step in enumerate(order):
            kept = [s for s in order if needs[step] >> s & 1]
            assert kept[-1] == step
            assert session.admits(kept) is not None, text
            if k % 16 == 0:
                assert session.confirm(kept) is not None, text
    pending = {(a.index, b.index): (a, b, m) for a, b, m in analysis.race_candidates()}
    for seed in range(2):
        analysis._predict(runner.run(seed, 0.05)[0], pending)
    for pair in analysis.parts.races:
        replays(program, analysis.parts.witness(pair))


def test_a_race_is_predicted_from_a_run_that_ran_the_pair_apart() -> None:
    """The two kernels race, but a run that ends the first before the second starts shows
    no overlap; what the second's start relied on excludes the first's end, so the race
    is predicted, and its witness replays."""
    program = load_text("""\
device d { compute 2 }
buffer x 1MiB on d
stream s[2] on d
thread a {
  s[0]: kernel k1 writes x 1ms
}
thread b {
  s[1]: kernel k2 writes x 1ms
}
""").program
    analysis = Analysis(program, Budget(timeout=60.0))
    encoding = analysis.encoding
    first, second = program.statements
    apart = []
    for s in (first, second):
        apart += [encoding.step(kind, s.index) for kind in (StepKind.ISSUE, StepKind.START, StepKind.END)]
    assert analysis.session.admits(apart) is not None
    pending = {(first.index, second.index): (first, second, 0)}
    analysis._predict(apart, pending)
    assert not pending
    witness, = map(analysis.parts.witness, analysis.parts.races)
    replays(program, witness)
    assert StepKind.END not in {step.kind for step in witness.steps}


RANK_LOOP = """\
device gpu0 { compute 1 comm 1 }
device gpu1 { compute 1 comm 1 }
buffer grad0 4MiB on gpu0
buffer grad1 4MiB on gpu1
stream comp0 on gpu0
stream nccl0 on gpu0
stream comp1 on gpu1
stream nccl1 on gpu1
event g0
event g1
comm world = { nccl0, nccl1 }
thread rank0 {
  for i in 0..N {
    comp0: kernel step writes grad0 3ms
    comp0: record g0
    nccl0: wait g0
    nccl0: allreduce world grad0 2ms
  }
  sync all
}
thread rank1 {
  for i in 0..N {
    comp1: kernel step writes grad1 3ms
    comp1: record g1
    nccl1: wait g1
    nccl1: allreduce world grad1 2ms
  }
  sync all
}
"""


def test_a_loop_of_races_is_predicted_with_one_execution_per_shared_statement() -> None:
    """Each iteration's allreduce races with the kernels of every later iteration (n(n-1)/2
    pairs per rank), and each kernel's start relies on the previous kernel's end, so no two
    of these pairs fit one subsequence of a run. One execution per allreduce, its start
    moved first, shows all of its pairs: about n executions, not n * n / 2."""
    n = 12
    program = load_text(RANK_LOOP.replace("..N", f"..{n}")).program
    analysis = Analysis(program, Budget(timeout=60.0))
    pending = {(a.index, b.index): (a, b, m) for a, b, m in analysis.race_candidates()}
    racing = {pair for pair, (a, b, _) in pending.items() if {a.op.value, b.op.value} == {"kernel", "allreduce"}}
    assert len(racing) == 2 * n * (n - 1) // 2
    order, _ = analysis.runner().run(0, 0.05)
    analysis._predict(order, pending)
    assert racing <= set(analysis.parts.races)
    assert analysis.stats["predicted"] <= 2 * n
    for pair in racing:
        replays(program, analysis.parts.witness(pair))


FREEING_LOOP = """\
device d { compute 2 }
buffer tmp 1MiB on d
stream a on d
stream b on d
event e
thread main {
  for i in 0..N {
    a: alloc tmp
    a: kernel produce writes tmp 1ms
    a: record e
    b: wait e
    b: kernel consume reads tmp 1ms
    a: free tmp
  }
}
"""


def test_a_set_state_lists_only_the_first_clearer_that_must_follow_each_setter() -> None:
    """The frees and allocs of a loop on one stream: a kernel of another stream may start
    after any later iteration's free, but of the allocs after a free only the first matters
    (a later one done means it was done too), so each free comes with one clearer."""
    n = 5
    program = load_text(FREEING_LOOP.replace("..N", f"..{n}")).program
    encoding = encode.Encoding(program)
    first_consume = next(s for s in program.statements if s.op.value == "kernel" and s.stream == 1)
    segment, = encoding.touched_segments(first_consume)
    state = encoding.rules.lifetime_state([encoding.lifetime_step(i) for i in segment.frees],
                                          [encoding.lifetime_step(i) for i in segment.allocs],
                                          encoding.first_step(first_consume))
    assert len(state.terms) == n
    assert [len(clearers) for _, _, clearers in state.terms] == [1] * (n - 1) + [0]


def test_a_race_with_a_free_answers_the_use_after_free_it_implies() -> None:
    """Each iteration's kernel on b races with the free on a; the free may then take effect
    while the kernel still runs, so the kernel's use after free is answered from the race's
    execution (with the free's effect after it), and the finding replays in the executor."""
    from checker.executor.replay import confirm
    from checker.findings import FindingKind

    program = load_text(FREEING_LOOP.replace("..N", "..4")).program
    analysis = Analysis(program, Budget(timeout=60.0))
    analysis.harvest_races(analysis.race_candidates())
    consumes = [s.index for s in program.statements if s.op.value == "kernel" and s.stream == 1]
    assert len(consumes) == 4
    pending = {(s.index, kind): (s, kind, when) for s, kind, when in analysis.lifetime_questions()}
    analysis._dead_from_races(pending)
    for index in consumes:
        assert (index, FindingKind.USE_AFTER_FREE) not in pending
        finding = analysis.parts.dead[(index, FindingKind.USE_AFTER_FREE)]
        assert "can still be running" in finding.message
        assert confirm(program, finding).ok


def test_a_use_after_free_the_solver_leaves_open_is_answered_by_a_run_aimed_at_it(monkeypatch) -> None:
    """When the solver cannot decide whether a use runs after a free (300 iterations of the
    freeing loop: one question in 300, whose race was among the pairs counted, not asked),
    a run aimed at the use and its nearest free shows it, checked by the executor's rules."""
    from checker.executor.replay import confirm
    from checker.findings import FindingKind
    from checker.smt.solve import Unknown

    program = load_text(FREEING_LOOP.replace("..N", "..4")).program
    analysis = Analysis(program, Budget(timeout=60.0))
    asked = []

    def undecided(query, cut=(), relaxed=False):
        asked.append(query)
        return Unknown("no answer within 10 s")

    monkeypatch.setattr(analysis, "ask", undecided)
    consumes = [s.index for s in program.statements if s.op.value == "kernel" and s.stream == 1]
    questions = [q for q in analysis.lifetime_questions()
                 if q[0].index in consumes and q[1] is FindingKind.USE_AFTER_FREE]
    assert len(questions) == 4
    analysis.lifetimes(questions, runs=False)  # (no runs, no races: only the solver, which says nothing)
    assert len(asked) == 4 and not analysis.parts.dead_unknowns
    for index in consumes:
        finding = analysis.parts.dead[(index, FindingKind.USE_AFTER_FREE)]
        assert confirm(program, finding).ok
    # and a use that no free can overlap stays unknown: no run shows what cannot happen
    produce = next(s for s in program.statements if s.op.value == "kernel" and s.stream == 0)
    analysis.lifetimes([(produce, FindingKind.USE_AFTER_FREE, "after it was freed")], runs=False)
    assert (produce.index, FindingKind.USE_AFTER_FREE) not in analysis.parts.dead
    assert len(analysis.parts.dead_unknowns) == 1


def test_a_use_that_races_with_a_free_gets_aimed_runs_before_the_solver(monkeypatch) -> None:
    """A use after free whose use races with a free of its bytes in another instance (here,
    as the first session found it: `racing`) is most likely one: a run aimed at it answers
    it without a solver question (at 300 iterations of the freeing loop, 13 questions of
    0.5-10 s each)."""
    from checker.executor.replay import confirm
    from checker.findings import FindingKind
    from checker.smt.queries import racing_classes

    program = load_text(FREEING_LOOP.replace("..N", "..4")).program
    analysis = Analysis(program, Budget(timeout=60.0))
    asked = []
    monkeypatch.setattr(analysis, "ask", lambda query, cut=(), relaxed=False: asked.append(query))
    consumes = [s.index for s in program.statements if s.op.value == "kernel" and s.stream == 1]
    frees = [s.index for s in program.statements if s.op.value == "free"]
    questions = [q for q in analysis.lifetime_questions()
                 if q[0].index in consumes and q[1] is FindingKind.USE_AFTER_FREE]
    analysis.lifetimes(questions, runs=False, racing=racing_classes(program, {(consumes[0], frees[0]): None}))
    assert asked == []
    for index in consumes:
        assert confirm(program, analysis.parts.dead[(index, FindingKind.USE_AFTER_FREE)]).ok


def test_repairs_stop_after_pairs_that_answered_nothing() -> None:
    """Repaired runs for a pair that never races answer nothing and count as fruitless; once
    FRUITLESS pairs in a row were, a session repairs no more, and a racing pair is left to
    the solver; an answered pair resets the count."""
    from checker.smt import queries

    program = load_text("""\
device d { compute 2 }
buffer x 1MiB on d
stream s[2] on d
event e
thread a {
  s[0]: kernel k1 writes x 1ms
  s[0]: record e
  s[1]: wait e
  s[1]: kernel k2 writes x 1ms
}
thread b {
  s[1]: kernel k3 writes x 1ms
}
""").program
    k1, _, _, k2, k3 = program.statements
    analysis = Analysis(program, Budget(timeout=60.0))
    ordered = {(k1.index, k2.index): (k1, k2, 0)}
    analysis._repair(k1.index, k2.index, ordered)
    assert ordered and analysis._fruitless == 1
    racing = {(k1.index, k3.index): (k1, k3, 0)}
    analysis._fruitless = queries.FRUITLESS
    analysis._repair(k1.index, k3.index, racing)
    assert racing
    analysis._fruitless = queries.FRUITLESS - 1
    analysis._repair(k1.index, k3.index, racing)
    assert not racing and analysis._fruitless == 0


def test_a_deadlock_on_a_step_that_never_happens_is_explained_with_linear_binding() -> None:
    """The stuck waits' conditions are read after the base was built; a wait the order
    proves impossible still had its binding integers defined with the base."""
    from checker import smt
    from checker.findings import FindingKind

    program = load_text("""\
device d0 { compute 2 }
device d1 { compute 2 }
stream s0 on d0
stream s1 on d1
buffer a 4096B on d0
event e
comm c = { s0, s1 }
thread t0 {
  s0: allreduce c a
  s0: record e
  s0: wait e
}
thread t1 {
  s0: record e
  s0: wait e
}
""").program
    with mock.patch.object(encode, "SMALL_BINDING", 0):
        findings = smt.analyze(program)
    assert [f.kind for f in findings] == [FindingKind.DEADLOCK]


HANDED_OVER = """\
device d { compute 2 }
buffer x 1MiB on d
stream s[2] on d
event e
thread a {
  s[1]: kernel reader reads x 1ms
}
thread b {
  s[0]: kernel writer writes x 1ms
  s[0]: record e
  s[1]: wait e
}
"""


def test_a_run_is_repaired_where_a_start_relied_on_an_end_through_a_choice() -> None:
    """The reader races the writer only when thread a enqueues it before thread b's wait.
    In a run where the wait came first, the reader's start relied on the writer's end
    through that choice; `_spoilers` names it, a run told to make the other choice
    predicts the race, and its witness replays."""
    program = load_text(HANDED_OVER).program
    analysis = Analysis(program, Budget(timeout=60.0))
    encoding, runner = analysis.encoding, analysis.runner()
    reader, writer, record, wait = program.statements
    issue = {s.index: encoding.step(StepKind.ISSUE, s.index) for s in program.statements}
    late = [issue[writer.index], issue[record.index], issue[wait.index],
            encoding.step(StepKind.START, writer.index), encoding.step(StepKind.END, writer.index),
            encoding.completion(record), encoding.completion(wait), issue[reader.index],
            encoding.step(StepKind.START, reader.index), encoding.step(StepKind.END, reader.index)]
    assert analysis.session.admits(late) is not None
    start, end = encoding.first_step(reader), encoding.last_step(writer)
    assert runner.needs(late)[start] >> end & 1
    assert analysis._spoilers(late, start, end) == [(issue[reader.index], issue[wait.index])]
    target = ((start, encoding.last_step(reader)), (encoding.first_step(writer), end))
    for seed in range(8):
        # A random run enqueues the reader first most of the time; `after` says otherwise.
        order, _ = runner.run(seed, 0.1, (), {issue[reader.index]: {issue[wait.index]}})
        assert order.index(issue[wait.index]) < order.index(issue[reader.index])
        order, _ = runner.run(seed, 0.1, target, {issue[wait.index]: {issue[reader.index]}})
        assert not runner.needs(order)[start] >> end & 1
    repairs_to_a_race(analysis, reader, writer)


def repairs_to_a_race(analysis: Analysis, a, b) -> None:
    """Repaired runs for the pair (a, b) answer it: a race whose witness replays."""
    pending = {(a.index, b.index): (a, b, 0)}
    analysis._repair(a.index, b.index, pending)
    assert not pending
    witness, = map(analysis.parts.witness, analysis.parts.races)
    replays(analysis.program, witness)


INTERCEPTED = """\
device d { compute 3 }
buffer x 1MiB on d
stream s[3] on d
event e
thread a {
  s[0]: kernel writer writes x 1ms
  s[0]: record e
  s[1]: wait e
  s[1]: kernel reader reads x 1ms
}
thread b {
  s[2]: record e
}
"""


def test_a_wait_bound_in_program_order_is_repaired_by_another_record_between() -> None:
    """Thread a's wait binds to its own record whatever the interleaving, unless thread b's
    record is enqueued between the two: then the reader races the writer. In a run where b
    came last, the choice named is b's record before a's wait (not a's wait before its own
    record, which no execution can make), and the repaired runs find the race."""
    program = load_text(INTERCEPTED).program
    analysis = Analysis(program, Budget(timeout=60.0))
    encoding = analysis.encoding
    writer, record, wait, reader, other = program.statements
    issue = {s.index: encoding.step(StepKind.ISSUE, s.index) for s in program.statements}
    late = [issue[writer.index], issue[record.index], issue[wait.index], issue[reader.index],
            encoding.step(StepKind.START, writer.index), encoding.step(StepKind.END, writer.index),
            encoding.completion(record), encoding.completion(wait),
            encoding.step(StepKind.START, reader.index), encoding.step(StepKind.END, reader.index),
            issue[other.index], encoding.completion(other)]
    assert analysis.session.admits(late) is not None
    start, end = encoding.first_step(reader), encoding.last_step(writer)
    assert analysis._spoilers(late, start, end) == [(issue[other.index], issue[wait.index])]
    early = late[:1] + late[-2:-1] + late[1:-2] + late[-1:]  # b's record before a's record
    assert analysis._spoilers(early, start, end) == [(issue[record.index], issue[other.index])]
    repairs_to_a_race(analysis, writer, reader)


FLAG_FIRST = """\
device d { compute 2 }
buffer x 1MiB on d
stream s[2] on d
event ready flag
thread a {
  s[0]: wait ready
  s[0]: kernel writer writes x 1ms
}
thread b {
  s[0]: record ready
}
thread c {
  s[1]: kernel reader reads x 1ms
}
"""


def test_an_aimed_run_enqueues_the_flag_record_before_a_wait_for_it() -> None:
    """If thread a's wait is enqueued on s[0] before thread b's record, s[0] waits for a flag
    that only a task behind the wait can set, and the writer never starts. Runs aimed at
    the writer and the reader enqueue the record first, and show the race."""
    program = load_text(FLAG_FIRST).program
    analysis = Analysis(program, Budget(timeout=60.0))
    runner, (first, last) = analysis.runner(), analysis._first_last()
    wait, writer, record, reader = program.statements
    target = ((first[writer.index], last[writer.index]), (first[reader.index], last[reader.index]))
    for seed in range(12):
        order, _ = runner.run(seed, 0.1, target)
        assert first[writer.index] in order and first[reader.index] in order, seed
        assert runner.needs(order)[first[reader.index]] >> last[writer.index] & 1 == 0


def test_a_start_that_never_came_names_the_choices_it_waits_on() -> None:
    """A run that stopped before the reader started (its wait was enqueued first and the
    writer's end is held) names the same choice by what the start waits for."""
    program = load_text(HANDED_OVER).program
    analysis = Analysis(program, Budget(timeout=60.0))
    encoding = analysis.encoding
    reader, writer, record, wait = program.statements
    issue = {s.index: encoding.step(StepKind.ISSUE, s.index) for s in program.statements}
    stopped = [issue[writer.index], issue[record.index], issue[wait.index],
               encoding.step(StepKind.START, writer.index), issue[reader.index]]
    position = {step: k for k, step in enumerate(stopped)}
    choices = analysis._blockers(position, encoding.first_step(reader))
    assert (issue[reader.index], issue[wait.index]) in choices


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(specs())
def test_races_found_by_repaired_runs_are_races(text: str) -> None:
    """Every pair a repaired run answers (`Analysis._repair`, on every candidate, aimed
    runs skipped) is a race the solver confirms, and its witness replays."""
    program = load_text(text, "<random>").program
    assume(program is not None)
    analysis = Analysis(program, Budget(timeout=60.0))
    pending = {(a.index, b.index): (a, b, m) for a, b, m in analysis.race_candidates()}
    for pair in list(pending):
        if pair in pending:
            analysis._repair(*pair, pending)
    statements = program.statements
    for a, b in analysis.parts.races:
        replays(program, analysis.parts.witness((a, b)))
        verdict = analysis.session.ask(analysis.encoding.race(statements[a], statements[b]))
        assert type(verdict).__name__ == "Sat", text


def test_a_relaxed_question_that_only_adds_implications_goes_to_the_full_session() -> None:
    """Two threads of the double-buffered example: 36 pairs that do not race took 47 relaxed
    rounds (17 s); after RELAXED_STALL rounds that answer nothing the full session proves them."""
    text = (Path(__file__).parent.parent / "specs" / "copy_compute_double_buffered.sched").read_text()
    program = load_text(text.replace("thread main {", "thread main[2] {")).program
    analysis = Analysis(program, Budget(timeout=60.0))
    analysis.races()
    assert analysis.stats["relaxed_rounds"] <= 10  # RELAXED_STALL is 8
    assert not analysis.parts.race_unknowns and len(analysis.racing) == 36


HANDSHAKE_LOOP = """\
device d { compute 2 copy 1 }
buffer x[2] 1MiB on d
buffer y 1MiB on d
buffer h 1MiB on host pinned
stream s on d
stream t on d
stream c on d
notify ready[2]
notify slot[2]
event done
thread producer {
  notify slot[0]
  notify slot[1]
  for i in 0..N {
    let b = i % 2
    await slot[b]
    s: kernel fill writes x[b] 1ms
    s: notify ready[b]
  }
}
thread consumer {
  for i in 0..N {
    let b = i % 2
    t: await ready[b]
    t: kernel use reads x[b] writes y 1ms
    t: record done
    c: wait done
    c: copy h <- y 1ms
    notify slot[b]
  }
  sync c
}
"""


def test_race_questions_that_only_count_instances_are_not_unknowns() -> None:
    """A producer and a consumer hand slots back and forth; each iteration's kernels race
    with later ones. With no time left for the questions that only count instances (their
    statements race in another instance already), the findings are the same, each counts its
    undecided instance pairs instead of an SP301, and found + undecided is the full count."""
    from checker import smt
    from checker.findings import FindingKind

    program = load_text(HANDSHAKE_LOOP.replace("..N", "..40")).program
    # Without the prioritized runs: they show every instance pair of this loop at once.
    with mock.patch("checker.smt.runs.PRIORITY_ORDERS", 0):
        with mock.patch.object(smt, "COUNTING_PACE", (300.0, 1.0)):
            full = smt.analyze(program, timeout=60.0, total=300.0)
        with mock.patch.object(smt, "COUNTING", 0.0):
            counted = smt.analyze(program, timeout=60.0, total=300.0)
    key = lambda f: (f.kind, f.message)  # noqa: E731
    assert sorted(map(key, full)) == sorted(map(key, counted))
    assert not any(f.kind is FindingKind.UNKNOWN for f in full + counted)
    races = {f.message: f for f in full if f.kind is FindingKind.RACE}
    assert len(races) == 2 and all(f.undecided == 0 for f in full)
    undecided = 0
    for f in counted:
        if f.kind is FindingKind.RACE:
            assert f.instances + f.undecided == races[f.message].instances
            undecided += f.undecided
    assert undecided > 0


def test_counting_instances_stops_at_its_pace_or_its_share_of_the_budget() -> None:
    """Questions that only count instances get the larger of `COUNTING_PACE`'s seconds and
    the time the other questions took, never more than `COUNTING` of the budget nor past the
    spec's deadline."""
    from checker import smt
    from checker.smt.solve import Budget

    now = time.time()
    budget = Budget(timeout=10.0, total=300.0)
    floor, share = smt.COUNTING_PACE
    quick = smt._counting_deadline(None, budget, now - 1.0) - now
    assert floor <= quick < floor + 1.0  # a spec decided in a second counts for the floor
    slow = smt._counting_deadline(None, budget, now - 20.0) - now
    assert 20.0 * share <= slow < 20.0 * share + 1.0 and slow > floor
    capped = smt._counting_deadline(None, budget, now - 200.0) - now
    assert smt.COUNTING * 300.0 <= capped < smt.COUNTING * 300.0 + 1.0
    assert smt._counting_deadline(now + 2.0, budget, now - 20.0) == now + 2.0
    unbounded = smt._counting_deadline(None, Budget(timeout=10.0), now - 1000.0) - now
    assert 1000.0 * share <= unbounded < 1000.0 * share + 1.0


def test_an_undecided_race_question_is_unknown_unless_its_statements_race_already() -> None:
    """`assemble`: an unasked question about the instance of a racing pair of statements is
    counted on that finding; one about statements not known to race is an SP301 of its own,
    with both statements; the other questions not asked are counted in one more SP301."""
    from checker.findings import FindingKind
    from checker.smt.answers import Parts, assemble
    from checker.witness import Witness

    program = load_text(HANDSHAKE_LOOP.replace("..N", "..6")).program
    statements = program.statements
    fills = [s.index for s in statements if s.name == "fill"]
    uses = [s.index for s in statements if s.name == "use"]
    parts = Parts()
    parts.races[(fills[2], uses[0])] = (statements[fills[2]].accesses[0].memory, Witness(()), 0)
    parts.races_not_asked += [(fills[4], uses[2]), (fills[4], uses[0])]
    parts.not_asked = 3  # and one lifetime question
    findings = assemble(program, parts, 60.0)
    (race,) = [f for f in findings if f.kind is FindingKind.RACE]
    assert race.instances == 1 and race.undecided == 2
    (unknown,) = [f for f in findings if f.kind is FindingKind.UNKNOWN]
    assert unknown.message.startswith("1 solver question(s) were not asked")
    parts.races_not_asked.append((uses[0], uses[1]))  # a write and a write of y: no finding yet
    parts.not_asked += 1
    pair, rest = [f for f in assemble(program, parts, 60.0) if f.kind is FindingKind.UNKNOWN]
    assert pair.statements == (uses[0], uses[1]) and pair.detail["about"] == "race"
    line = statements[uses[0]].span.line
    assert f"(line {line}) and" in pair.message and pair.message.endswith("ran out")
    assert rest.message.startswith("1 other solver question(s) were not asked")


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(specs(), st.randoms(use_true_random=False))
def test_replays_from_a_kept_state_end_where_replays_from_the_start_do(text: str, rng: random.Random) -> None:
    """`Analysis._replayed` starts from the latest state it kept of the execution before that
    the two share (every 3 steps here): runs, their prefixes, runs with a step dropped and
    shuffled runs, one after another, end in the state (or are refused where) a replay from
    the initial state does."""
    from checker.executor.machine import IllegalStep
    from checker.executor.state import Store
    from checker.smt import queries

    program = load_text(text, "<random>").program
    assume(program is not None)
    analysis = Analysis(program, Budget(timeout=60.0))
    machine, encoding = analysis.machine, analysis.encoding
    orders = []
    for seed in range(3):
        run, _ = analysis.runner().run(seed, 0.3)
        dropped = list(run)
        if dropped:
            del dropped[rng.randrange(len(dropped))]
        shuffled = list(run)
        rng.shuffle(shuffled)
        orders += [run, run[: rng.randint(0, len(run))], dropped, shuffled, run]
    with mock.patch.object(queries, "CHECKPOINT", 3):
        for order in orders:
            witness = encoding.witness(order)
            store = Store(machine.initial())
            try:
                for step in witness.steps:
                    machine.advance_into(store, step, track=False)
                expected = store.freeze()
            except IllegalStep:
                expected = None
            replayed = analysis._replayed(witness)
            assert (None if replayed is None else replayed.freeze()) == expected, text
