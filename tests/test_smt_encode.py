"""Unit tests of the encoding's pieces: order, static shortcuts, pruning, budgets."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import z3
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from conftest import SPECS
from checker.findings import FindingKind
from checker.frontend import load_text
from checker.smt import analyze
from checker.smt.encode import Encoding, to_z3
from checker.smt.order import must_order
from checker.smt.progress import guaranteed_steps
from checker.smt.queries import Analysis
from checker.smt.runs import Runner
from checker.smt.solve import Budget, Sat, Session, Unsat
from checker.witness import StepKind, Witness
from strategies import specs, tensor_specs

HEADER = (
    "device d { compute 2 copy 2 }\n"
    "buffer x 1MiB on d\n"
    "stream s1 on d\n"
    "stream s2 on d\n"
    "event ev\n"
    "event fl flag\n"
    "notify go\n"
)


def program(body: str):
    loaded = load_text(HEADER + body)
    assert loaded.program is not None, loaded.diagnostics
    return loaded.program


def test_ties_in_time_are_broken_by_step_index() -> None:
    encoding = Encoding(program("thread t {\n  s1: kernel k writes x\n}\n"))
    solver = z3.Solver()
    for t in encoding.time:
        solver.add(t == 0)
    first, second = 0, 1
    assert solver.check() == z3.sat
    model = solver.model()
    assert z3.is_true(model.eval(to_z3(encoding.precedes(first, second))))
    assert z3.is_false(model.eval(to_z3(encoding.precedes(second, first))))
    assert encoding.precedes(first, first) is False


def test_every_model_is_an_execution_and_the_empty_prefix_is_one() -> None:
    encoding = Encoding(program("thread t {\n  s1: kernel k writes x\n  sync s1\n}\n"))
    session = Session(encoding, Budget())
    nothing = session.ask(z3.And(*[t >= encoding.horizon for t in encoding.time]))
    assert isinstance(nothing, Sat) and nothing.witness.steps == ()
    # The sync cannot return before the kernel ends.
    ret = encoding.step(StepKind.RETURN, 1)
    end = encoding.step(StepKind.END, 0)
    early = z3.And(to_z3(encoding.happened(ret)), to_z3(encoding.precedes(ret, end)))
    assert isinstance(session.ask(early), Unsat)


def test_snapshot_only_programs_skip_the_deadlock_query() -> None:
    p = program("thread t {\n  s1: record ev\n  s2: wait ev\n  sync all\n}\n")
    assert not Encoding(p).can_block()
    p = program("thread t {\n  s1: await go\n}\n")
    assert Encoding(p).can_block()


def test_guaranteed_steps_cover_handshakes_but_not_competing_awaits() -> None:
    p = program("thread t {\n  s2: wait fl\n  s1: record fl\n  sync all\n}\n")
    encoding = Encoding(p)
    assert guaranteed_steps(encoding, must_order(encoding)) == frozenset(range(len(encoding.steps)))
    # The only await of a notify that surely comes is guaranteed ...
    p = program("thread t {\n  s2: await go\n  s1: notify go\n  sync all\n}\n")
    encoding = Encoding(p)
    assert guaranteed_steps(encoding, must_order(encoding)) == frozenset(range(len(encoding.steps)))
    # ... two awaits of one notify in no fixed order are not: either may take it.
    p = program("thread a {\n  s2: await go\n}\nthread b {\n  s1: await go\n}\n"
                "thread c {\n  notify go\n}\n")
    encoding = Encoding(p)
    taken = guaranteed_steps(encoding, must_order(encoding))
    assert encoding.step(StepKind.COMPLETE, 0) not in taken
    assert encoding.step(StepKind.COMPLETE, 1) not in taken
    assert encoding.step(StepKind.ISSUE, 2) in taken
    # A reset that can come between the record and the wait keeps a flag wait open.
    p = program("thread a {\n  s1: record fl\n}\nthread b {\n  s2: reset fl\n}\n"
                "thread c {\n  s2: wait fl\n}\n")
    encoding = Encoding(p)
    taken = guaranteed_steps(encoding, must_order(encoding))
    assert encoding.step(StepKind.COMPLETE, 2) not in taken


def test_notify_await_handshake_is_deadlock_free_but_two_awaits_are_not() -> None:
    ok = program("thread a {\n  s1: await go\n  sync s1\n}\nthread b {\n  notify go\n}\n")
    assert not [f for f in analyze(ok) if f.kind is FindingKind.DEADLOCK]
    stuck = program("thread a {\n  s1: await go\n  s2: await go\n  sync all\n}\n"
                    "thread b {\n  notify go\n}\n")
    (deadlock,) = [f for f in analyze(stuck) if f.kind is FindingKind.DEADLOCK]
    assert deadlock.witness is not None
    assert {s.statement for s in deadlock.stuck} >= {2}
    assert all(s.waits_for for s in deadlock.stuck)


def test_must_order_prunes_same_thread_stream_order_and_syncs() -> None:
    p = program(
        "thread t {\n"
        "  s1: kernel a writes x\n"
        "  s1: kernel b writes x\n"
        "  sync s1\n"
        "  s2: kernel c writes x\n"
        "  host h reads x\n"
        "}\n"
    )
    analysis = Analysis(p, Budget())
    pairs = {(a.index, b.index) for a, b, _ in analysis.race_candidates()}
    # Only c (on s2, not synced) and the host read are unordered.
    assert pairs == {(3, 4)}


SHARED_RECORDS = """\
device d {{ compute 4 }}
buffer x[2] 4KiB on d
stream s on d
stream t[3] on d
stream other on d
event e
thread a {{
  for j in 0..2 {{
    s: kernel wa writes x[j]
    s: record e
    t[0]: wait e
    t[0]: kernel ra reads x[j]
  }}
}}
thread b {{
  for j in 0..2 {{
    s: kernel wb writes x[j]
    {stream}: record e
    t[1]: wait e
    t[1]: kernel rb reads x[j]
  }}
}}
"""


def _verdict_pairs(text: str) -> set[tuple[int, int]]:
    from checker.executor.explore import explore

    loaded = load_text(text).program
    lines = lambda pair: tuple(sorted(loaded.statements[i].span.line for i in pair))  # noqa: E731
    found = {lines(f.statements) for f in analyze(loaded) if f.kind is FindingKind.RACE}
    exploration = explore(loaded, max_states=500_000)
    assert exploration.complete
    assert found == {lines(pair) for pair in exploration.race_pairs()}
    return found


def test_a_wait_whose_every_candidate_record_follows_its_own_on_one_stream_waits_for_its_own() -> None:
    """Each thread records `e` on the shared stream after its write and waits for `e` before
    reading: whichever record the wait binds to, it is its own or one enqueued after it on the
    same stream, so the read follows the thread's own write in every execution. The must order
    knows it (no question left for the solver), and the races are the explorer's."""
    text = SHARED_RECORDS.format(stream="s")
    analysis = Analysis(load_text(text).program, Budget())
    statements = analysis.program.statements
    pairs = {tuple(sorted((statements[a.index].name, statements[b.index].name)))
             for a, b, _ in analysis.race_candidates()}
    assert ("ra", "wa") not in pairs and ("rb", "wb") not in pairs
    assert ("ra", "wb") in pairs and ("rb", "wa") in pairs  # another thread's write may come later
    assert _verdict_pairs(text) == {(9, 20), (12, 17)}  # wa-rb, wb-ra


def shared_event_threads(seed: int) -> str:
    """Two or three threads recording and waiting for one event on two shared streams."""
    import random

    rng = random.Random(seed)
    lines = ["device d { compute 2 }", "stream s[2] on d", "event e", "event f"]
    for t in range(rng.randint(2, 3)):
        lines.append(f"thread t{t} {{")
        for _ in range(rng.randint(3, 10)):
            kind = rng.choice(["record e", "record e", "wait e", "wait e", "record f", "wait f", "kernel k"])
            lines.append(f"  s[{rng.randrange(2)}]: {kind}" if rng.random() < 0.9 else "  sync e")
        lines.append("}")
    return "\n".join(lines) + "\n"


@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.one_of(specs(), st.integers(0, 10**6).map(shared_event_threads)))
def test_a_wait_needs_exactly_its_sure_records_that_every_candidate_follows_on_one_stream(text: str) -> None:
    """The rule read from every candidate of a binding (the records of other threads are read
    as runs, `Rules.records_by_thread`): a sure record is needed exactly when it is in no
    batch and every candidate is on its stream and in no batch; the order's rules (edges
    only) need the same records."""
    from checker.ir import Op, SyncKind
    from checker.smt.rules import Bind, Need, Rules

    loaded = load_text(text)
    if loaded.program is None:
        return
    encoding = Encoding(loaded.program)
    layout, statements = encoding.layout, loaded.program.statements
    full, edges = Rules(layout, encoding.order), Rules(layout, encoding.order, edges_only=True)
    for w in statements:
        event = w.event if w.op is Op.WAIT else w.target if w.op is Op.SYNC and w.sync is SyncKind.EVENT else None
        if event is None or loaded.program.events[event].flag:
            continue
        items = full.binding_items(w, event)
        needed = {item.step for item in items if isinstance(item, Need)}
        assert needed == {item.step for item in edges.binding_items(w, event) if isinstance(item, Need)}
        binds = [item for item in items if isinstance(item, Bind)]
        if not binds:
            continue
        candidates = [statements[r] for r, _ in binds[0].candidates]
        expected = {layout.completion(r) for r, (_, surely) in zip(candidates, binds[0].candidates)
                    if surely and r.batch is None
                    and all(o.stream == r.stream and o.batch is None for o in candidates)}
        assert needed == expected


def test_a_candidate_record_on_another_stream_leaves_the_wait_open() -> None:
    """With thread b's record on a stream of its own, thread a's wait may bind to it, and it
    can complete before a's write: then a's read races with a's own write, which the solver
    and the explorer both find."""
    text = SHARED_RECORDS.format(stream="other")
    assert (9, 12) in _verdict_pairs(text)


PING_PONG = """\
device d {{ compute 2 }}
buffer x 1MiB on d
stream sp on d
stream sc on d
event full flag
event empty flag
thread prod {{
  sp: record empty
  for j in 0..3 {{
    sp: wait empty
    {reset_empty}
    sp: kernel produce writes x 1ms
    sp: record full
  }}
}}
thread cons {{
  for j in 0..3 {{
    sc: wait full
    sc: reset full
    sc: kernel consume reads x 1ms
    sc: record empty
  }}
}}
"""


def test_a_flag_waited_for_and_reset_on_one_stream_needs_a_record_per_round() -> None:
    """Two flags handed back and forth as semaphores (wait, reset, work, record the other's):
    the j-th wait of each side needs the other side's j-th record, so the must order alone
    orders every produce before the consume of its round and after the one before: no race
    question is left, and the explorer finds none either."""
    text = PING_PONG.format(reset_empty="sp: reset empty")
    assert Analysis(load_text(text).program, Budget()).race_candidates() == []
    assert _verdict_pairs(text) == set()


def test_a_flag_never_reset_counts_no_rounds() -> None:
    """Without the producer's reset, `empty` stays set after the first record: the producer
    runs ahead and overwrites x while the consumer reads it, which both engines find."""
    text = PING_PONG.format(reset_empty="")
    assert _verdict_pairs(text) == {(12, 20)}


TWO_AWAITS_ONE_NOTIFY = ("thread a {\n  s1: await go\n}\nthread b {\n  s2: await go\n}\n"
                         "thread c {\n  s2: notify go\n}\n")


def test_tiny_rlimit_makes_the_deadlock_query_unknown() -> None:
    """Asked of the solver (no run consulted), the deadlock question runs out of resources."""
    analysis = Analysis(program(TWO_AWAITS_ONE_NOTIFY), Budget(rlimit=1))
    analysis.deadlock(runs=False)
    (unknown,) = analysis.parts.deadlock
    assert unknown.kind is FindingKind.UNKNOWN and "deadlock" in unknown.message


def test_a_run_that_gets_stuck_is_the_deadlock_without_the_solver() -> None:
    """One await takes the only notify and the other waits forever: a concrete run that gets
    stuck is the witness, explained by the executor's machine in the state it ends in, so no
    solver resource limit turns it into an unknown."""
    findings = analyze(program(TWO_AWAITS_ONE_NOTIFY), rlimit=1)
    (deadlock,) = findings
    assert deadlock.kind is FindingKind.DEADLOCK
    assert [(item.statement, item.waits_for) for item in deadlock.stuck][:2] == [
        (0, "notify go not set"), (1, "notify go not set")]
    (queued,) = deadlock.stuck[2:]
    assert queued.statement == 2 and queued.waits_for.startswith("waiting for s2: await go")


def test_three_threads_sharing_streams_and_events_decide_quickly() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
    from bench_smt import make_spec

    p = load_text(make_spec(0, 3, 12, signals=True)).program
    findings = analyze(p, timeout=10.0)
    assert not [f for f in findings if f.kind is FindingKind.UNKNOWN]
    assert all(f.witness is not None for f in findings)


def _bench_spec(seed: int, threads: int, statements: int) -> str:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
    from bench_smt import make_spec

    return make_spec(seed, threads, statements, signals=True)


def _guaranteed_are_taken(text: str, runs: int) -> None:
    loaded = load_text(text)
    if loaded.program is None:
        return
    encoding = Encoding(loaded.program)
    taken = guaranteed_steps(encoding)
    runner = Runner(encoding)
    for seed in range(runs):
        order, _ = runner.run(seed, eager=(seed % 3) / 2)
        assert taken <= set(order), f"run {seed} ended without guaranteed steps {sorted(taken - set(order))}"


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(specs())
def test_every_maximal_run_takes_the_guaranteed_steps(text: str) -> None:
    _guaranteed_are_taken(text, runs=6)


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.integers(0, 10_000), st.integers(2, 4), st.integers(6, 24))
def test_guaranteed_steps_of_threads_sharing_signals_are_taken(seed: int, threads: int, statements: int) -> None:
    # Flags, notifies and shared streams: the fixpoint goes through many rounds here.
    _guaranteed_are_taken(_bench_spec(seed, threads, statements), runs=4)


def test_a_long_training_loop_is_proved_to_progress_in_every_iteration() -> None:
    # Two loaders share a copy stream and hand batches over with notifies: each iteration is
    # guaranteed only once the one before is, one round of the fixpoint per iteration.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
    from bench_smt_scale import training_loop

    encoding = Encoding(load_text(training_loop(60)).program)
    assert guaranteed_steps(encoding) == frozenset(range(len(encoding.steps)))
    # Here a task fails a round for a step guaranteed later, and must be read again then.
    encoding = Encoding(load_text(_bench_spec(16, 3, 20)).program)
    assert guaranteed_steps(encoding) == frozenset(range(len(encoding.steps)))
    # Dropping one hand-off lets the loaders run ahead (and the loop can deadlock): what is
    # guaranteed then is still taken by every run.
    for bug in ("consumed", "reduced"):
        _guaranteed_are_taken(training_loop(12, bug=bug), runs=5)


def _two_threads_per_rank(seed: int) -> str:
    """DDP with a hook thread per rank (specs/bug_ddp_two_threads_one_comm.sched), each
    statement kept or dropped, now and then two swapped, and iteration counts that differ:
    two threads call the comm on one stream, with waits and notifies between the calls."""
    rng = random.Random(seed)
    lines = ["device gpu[2] { compute 1 comm 1" + (" queues 1" if rng.random() < 0.2 else "") + " }",
             "buffer w[2] 4MiB on gpu", "buffer grad[2] 4MiB on gpu", "buffer loss[2] 4KiB on gpu",
             "stream compute[2] on gpu", "stream nccl[2] on gpu", "comm pg = { nccl }",
             "event grads_ready[2]", "event loss_ready[2]", "event reduced[2]" + (" flag" if rng.random() < 0.2 else ""),
             "notify backward_done[2]", "notify bucket_reduced[2]"]

    def body(count: int, statements: list[str]) -> list[str]:
        out = []
        for _ in range(count):
            kept = [s for s in statements if rng.random() < 0.92]
            if len(kept) > 1 and rng.random() < 0.15:
                a, b = rng.sample(range(len(kept)), 2)
                kept[a], kept[b] = kept[b], kept[a]
            out += kept
        return out or ["sync all"]

    for k in range(2):
        iterations = rng.choice([1, 2, 3])
        main = body(iterations, [
            f"compute[{k}]: kernel fb reads w[{k}] writes grad[{k}] 2ms", f"compute[{k}]: record grads_ready[{k}]",
            f"notify backward_done[{k}]", f"compute[{k}]: kernel lv writes loss[{k}] 100us",
            f"compute[{k}]: record loss_ready[{k}]", f"nccl[{k}]: wait loss_ready[{k}]",
            f"nccl[{k}]: allreduce pg loss[{k}] 100us", f"await bucket_reduced[{k}]",
            f"compute[{k}]: wait reduced[{k}]", f"compute[{k}]: kernel opt reads grad[{k}] writes w[{k}] 1ms"])
        hook = body(iterations if rng.random() < 0.7 else rng.choice([1, 2, 3]), [
            f"await backward_done[{k}]", f"nccl[{k}]: wait grads_ready[{k}]", f"nccl[{k}]: allreduce pg grad[{k}] 3ms",
            f"nccl[{k}]: record reduced[{k}]", f"notify bucket_reduced[{k}]"])
        lines += [f"thread main{k} {{", *("  " + s for s in main + [f"sync gpu[{k}]"]), "}"]
        lines += [f"thread hook{k} {{", *("  " + s for s in hook), "}"]
    return "\n".join(lines) + "\n"


def test_two_threads_calling_one_comm_on_one_stream_are_proved_to_progress() -> None:
    # Each thread's tasks on the shared stream wait for the other's only if those were
    # enqueued first: read so, every step of the loop is guaranteed at any iteration count
    # (before, none past the first call, and the deadlock question went to Z3).
    text = (SPECS / "bug_ddp_two_threads_one_comm.sched").read_text()
    encoding = Encoding(load_text(text.replace("0..3", "0..12")).program)
    assert guaranteed_steps(encoding) == frozenset(range(len(encoding.steps)))


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.integers(0, 100_000))
def test_guaranteed_steps_of_threads_sharing_a_comm_stream_are_taken(seed: int) -> None:
    _guaranteed_are_taken(_two_threads_per_rank(seed), runs=6)


def test_a_program_with_too_many_open_orderings_is_unknown_at_once(monkeypatch) -> None:
    from checker.smt import rules

    text = _bench_spec(1, 3, 40)
    monkeypatch.setattr(rules, "MAX_OPEN", 50)
    (finding,) = analyze(load_text(text).program)
    assert finding.kind is FindingKind.UNKNOWN
    assert finding.detail["reason"] == "too large" and finding.detail["open"] > 50
    assert "open" in finding.message and finding.help
    monkeypatch.setattr(rules, "MAX_OPEN", 10_000_000)
    assert not [f for f in analyze(load_text(text).program, total=60.0) if f.detail.get("reason") == "too large"]


def test_past_the_candidate_cap_each_class_is_asked_and_the_rest_count_instances(monkeypatch) -> None:
    # Two threads of kernels writing x, then y, in step only at the end: every cross pair may
    # race, 144 instance pairs per buffer. Past MAX_RACE_CANDIDATES (at 2.25 million pairs the
    # listing took 7 GB) the two classes share the questions; once a class's race is found,
    # the pairs not asked about only count its instances, as undecided ones.
    from checker.smt import queries
    from checker.executor.replay import confirm

    text = HEADER + "buffer y 1MiB on d\n" + "".join(
        f"thread t{t} {{\n  for i in 0..12 {{\n    s{t + 1}: kernel k{t} writes x\n  }}\n"
        f"  for i in 0..12 {{\n    s{t + 1}: kernel m{t} writes y\n  }}\n"
        f"  {'notify go' if t == 0 else 'await go'}\n}}\n" for t in range(2))
    loaded = load_text(text).program
    whole = analyze(loaded, total=60.0)
    assert sorted((f.kind, f.instances, f.undecided) for f in whole) == [(FindingKind.RACE, 144, 0)] * 2
    monkeypatch.setattr(queries, "MAX_RACE_CANDIDATES", 40)
    capped = analyze(loaded, total=60.0)
    assert [f for f in capped if f.kind is not FindingKind.RACE] == []
    assert sorted(f.message for f in capped) == sorted(f.message for f in whole)
    for finding in capped:
        assert finding.instances <= 20 and finding.instances + finding.undecided == 144
        assert confirm(loaded, finding).ok


@given(st.lists(st.integers(0, 60), min_size=1, max_size=12), st.integers(0, 300))
def test_classes_share_the_cap_evenly(sizes: list[int], cap: int) -> None:
    from checker.smt.queries import _shares

    shares = _shares(sizes, cap)
    assert all(0 <= share <= size for share, size in zip(shares, sizes))
    assert sum(shares) == min(cap, sum(sizes))
    cut = [share for share, size in zip(shares, sizes) if share < size]
    # The classes cut short got the even share (some one more), and every class whole was
    # no larger than that (the one more may have made it whole).
    assert not cut or (max(cut) - min(cut) <= 1
                       and all(size <= min(cut) + 1 for share, size in zip(shares, sizes) if share == size))


def test_a_class_past_the_cap_with_no_race_found_is_undecided() -> None:
    """`assemble`: the pairs of a class that were never asked about, and whose statements race
    in no instance found, are one SP301 on the class; a class that races counts them."""
    from checker.smt.answers import Parts, assemble, instance_class

    text = HEADER + "buffer y 1MiB on d\n" + "".join(
        f"thread t{t} {{\n  s{t + 1}: kernel k{t} writes x\n  s{t + 1}: kernel m{t} writes y\n"
        f"  {'notify go' if t == 0 else 'await go'}\n}}\n" for t in range(2))
    loaded = program(text[len(HEADER):])
    statements = loaded.statements
    on_x, on_y = [(a.index, b.index) for a in statements for b in statements
                  if a.index < b.index and a.accesses and b.accesses
                  and a.accesses[0].memory == b.accesses[0].memory]
    parts = Parts()
    parts.overflow = {instance_class(*(statements[i] for i in pair)): (7, pair, 9) for pair in (on_x, on_y)}
    (unknown_x, unknown_y) = assemble(loaded, parts, 60.0)
    assert unknown_x.kind is FindingKind.UNKNOWN and unknown_x.statements == on_x
    assert unknown_x.detail["reason"] == "too large" and unknown_x.detail["pairs"] == 7
    assert "6 more instance pair(s)" in unknown_x.message
    parts.races = {on_x: (statements[on_x[0]].accesses[0].memory, Witness(()), 0)}
    findings = assemble(loaded, parts, 60.0)
    race = next(f for f in findings if f.kind is FindingKind.RACE)
    assert (race.instances, race.undecided) == (1, 7)
    assert [f.statements for f in findings if f.kind is FindingKind.UNKNOWN] == [on_y]


def test_a_stream_shared_by_thousands_of_threads_is_unknown_at_once() -> None:
    # Every task would read every other thread's tasks on the stream: 3,000 threads took 73 s
    # in the must order before anything was counted; MAX_PEERS refuses it before that.
    from checker.smt.rules import MAX_PEERS

    threads = 1500
    text = "device d\nstream s on d\nbuffer x 1MiB on d\n" + "".join(
        f"thread t{i} {{\n  s: kernel k reads x\n}}\n" for i in range(threads))
    assert threads * (threads - 1) > MAX_PEERS
    (finding,) = analyze(load_text(text).program)
    assert finding.kind is FindingKind.UNKNOWN and finding.detail["reason"] == "too large"
    assert f"{threads * (threads - 1):,} pairs" in finding.message


def test_solver_finds_an_execution_of_a_large_base_without_making_steps_happen() -> None:
    """Z3 tries an undecided atom false first: 'happened' is the atom `t <= H - 1`, so its
    search starts from steps that did not happen. Written `t < H` (kept by Z3 as the negation
    of `t >= H`), every step it had not decided on happened, and it found no execution of
    this base within 30 s (over 800 million resource units); now it takes about 6 million.
    The resource limit counts the same on every machine."""
    fixture = Path(__file__).parent / "fixtures" / "rand3x100_3.sched"
    loaded = load_text(fixture.read_text(), str(fixture))
    assert loaded.program is not None, loaded.diagnostics
    encoding = Encoding(loaded.program)
    solver = z3.Solver()
    solver.set("rlimit", 60_000_000)
    solver.add(*encoding.base())
    assert solver.check() == z3.sat, solver.reason_unknown()


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(specs(shared_comms=True, comm_heavy=True))
def test_guaranteed_calls_met_by_enqueue_order_are_taken(text: str) -> None:
    # The induction on positions (`progress._Meetings`) guarantees every call of a comm whose
    # groups form by enqueue order: every run that cannot move has taken them.
    _guaranteed_are_taken(text, runs=6)


def test_groups_formed_by_enqueue_order_are_proved_to_meet_in_every_iteration() -> None:
    # Two ranks, each with a main thread and a hook thread calling one comm on one stream: which
    # calls meet depends on the interleaving, yet every group meets, by induction on the
    # position, so the deadlock question is never asked (8 iterations: about 40 s before).
    from test_executor_reduction import DDP

    encoding = Encoding(load_text(DDP.replace("ITERATIONS", "8")).program)
    assert guaranteed_steps(encoding) == frozenset(range(len(encoding.steps)))
    # A rank with one call fewer leaves its peer's last call without a group: nothing of that
    # comm is proved, and what is proved is taken by every run.
    uneven = DDP.replace("ITERATIONS", "3").replace("thread hook[2] {\n  for it in 0..3",
                                                    "thread hook[2] {\n  for it in 0..3 - hook")
    loaded = load_text(uneven)
    assert loaded.program is not None, loaded.diagnostics
    encoding = Encoding(loaded.program)
    taken = guaranteed_steps(encoding)
    calls = [s for s in loaded.program.statements if s.comm is not None]
    assert not any(encoding.first_step(s) in taken for s in calls)
    _guaranteed_are_taken(uneven, runs=6)


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(specs())
def test_a_deadlock_the_solver_finds_replays_to_a_state_where_nothing_can_move(text: str) -> None:
    """The deadlock question asked of the solver (no run consulted): its model's execution,
    replayed on the executor's machine, ends where nothing can move and work is left, and
    the stuck list is what the machine says there (`Analysis.stuck`)."""
    from checker.executor.explore import explore

    program = load_text(text, "<random>").program
    assume(program is not None)
    exploration = explore(program, max_states=20_000)
    assume(exploration.complete and exploration.deadlocks)
    analysis = Analysis(program, Budget(timeout=60.0))
    analysis.deadlock(runs=False)
    (finding,) = analysis.parts.deadlock
    assert finding.kind is FindingKind.DEADLOCK, text
    assert finding.stuck, text
    machine = analysis.machine
    state = machine.initial()
    for step in finding.witness.steps:
        state = machine.apply(state, step)
    assert not machine.enabled(state) and not machine.finished(state), text
    assert {item.statement for item in finding.stuck} <= {i for i, _ in machine.stuck(state)}, text


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.one_of(specs(), tensor_specs(), st.integers(2, 6).map(lambda n: freeing_loop(n))))
def test_the_frees_open_around_a_use_are_those_the_must_order_puts_neither_before_nor_after(text: str) -> None:
    """`_frees_open_around` finds them by bisection on each chain; the definition asks the
    order about every free of the bytes, in the order `frees_touching` lists them."""
    loaded = load_text(text)
    assume(loaded.program is not None)
    encoding = Encoding(loaded.program)
    prec = encoding.order.prec
    for statement in loaded.program.statements:
        if not statement.accesses:
            continue
        first, last = encoding.first_step(statement), encoding.last_step(statement)
        for only in [None, *dict.fromkeys(a.memory for a in statement.accesses)]:
            expected = [f for f in encoding.frees_touching(statement, only)
                        if not (prec(encoding.lifetime_step(f), first) or prec(last, encoding.lifetime_step(f)))]
            assert list(encoding._frees_open_around(statement, only)) == expected


def freeing_loop(iterations: int) -> str:
    """A buffer allocated, written, read on another stream and freed each iteration; the
    free waits for the read only in even iterations."""
    body = "".join(
        f"  s1: alloc x\n  s1: kernel w writes x\n  s1: record ev\n  s2: wait ev\n  s2: kernel r reads x\n"
        + ("  s2: record ev\n  s1: wait ev\n" if i % 2 == 0 else "") + "  s1: free x\n"
        for i in range(iterations))
    return HEADER + "thread t {\n" + body + "}\nthread u {\n  s2: kernel k reads x\n}\n"


def test_dead_use_questions_the_must_order_settles_build_no_solver_session() -> None:
    """Every use of a buffer allocated and freed around it on one stream, with nothing else
    touching it: the order answers each question, and the base formulas are never built."""
    body = "".join("  s1: alloc x\n  s1: kernel w writes x\n  s1: kernel r reads x\n  s1: free x\n"
                   for _ in range(5))
    analysis = Analysis(program("thread t {\n" + body + "}\n"), Budget())
    analysis.lifetimes(runs=False)
    # Both questions (after free, before alloc) of both kernels and of the free (a write),
    # in each of the 5 rounds.
    assert analysis.parts.dead == {} and len(analysis.parts.dead_absent) == 2 * 3 * 5
    assert analysis._session is None


def test_waits_on_a_flag_never_reset_list_one_setter_per_chain() -> None:
    """Once any record of a flag nobody resets has completed, the flag stays set: of one
    stream's records, the first not after the wait says it. Before, each wait listed every
    record the other thread might have enqueued first, n^2 open orderings in all."""
    for rounds in (10, 40):
        encoding = Encoding(program(
            f"thread producer {{\n  for i in 0..{rounds} {{\n    s1: kernel fill writes x\n    s1: record fl\n  }}\n}}\n"
            f"thread consumer {{\n  for i in 0..{rounds} {{\n    s2: wait fl\n    s2: kernel use reads x\n  }}\n}}\n"))
        encoding.all_items()
        assert encoding.rules.open == rounds
