"""Random executions of programs the solver refuses (`executor/walks.py`).

What the walks show must be real (every witness replays, every racing pair is one the solver
also finds on programs it decides), and a refused program must still say that the rest is
undecided: walks never make a program look clean.
"""

from __future__ import annotations

import random

from hypothesis import HealthCheck, assume, given, settings

from checker import smt
from checker.analyze import Options, check_loaded
from checker.executor.replay import confirm
from checker.executor import walks
from checker.executor.walks import MAX_RACES, walk
from checker.findings import FindingKind
from checker.frontend import load_text
from checker.smt import rules
from checker.smt.layout import Layout
from checker.smt.queries import Analysis
from checker.smt.solve import Budget
from strategies import specs


def random_threads(seed: int, threads: int, statements: int, signals: bool = True) -> str:
    """Threads of random kernels, records, waits and syncs on four shared streams, and with
    `signals` notifies and awaits (which leave many executions stuck early)."""
    rng = random.Random(seed)
    lines = ["device d { compute 2 copy 2 }", "buffer x[4] 1MiB on d", "stream s[4] on d", "event e[3]",
             "notify go"]
    for t in range(threads):
        lines.append(f"thread t{t} {{")
        for _ in range(statements):
            kind = rng.choices(["kernel", "record", "wait", "sync", "notify", "await"], [10, 3, 3, 1, signals, signals])[0]
            s = rng.randrange(4)
            if kind == "kernel":
                lines.append(f"  s[{s}]: kernel k reads x[{rng.randrange(4)}] writes x[{rng.randrange(4)}] 1ms")
            elif kind in ("record", "wait"):
                lines.append(f"  s[{s}]: {kind} e[{rng.randrange(3)}]")
            elif kind == "sync":
                lines.append(f"  sync s[{s}]")
            else:
                lines.append(f"  s[{s}]: {kind} go")
        lines.append("}")
    return "\n".join(lines) + "\n"


def test_a_program_the_solver_refuses_still_gets_the_races_its_executions_show(monkeypatch):
    monkeypatch.setattr(rules, "MAX_OPEN", 50)  # refuse a program small enough to test quickly
    report = check_loaded(load_text(random_threads(1, 2, 40), "big.sched"), Options(budget=5))
    assert not report.diagnostics  # every witness replayed (one that does not is an SP402)
    races = [f for f in report.findings if f.kind is FindingKind.RACE]
    assert races and all(f.witness is not None for f in races)
    unknown = [f for f in report.findings if f.kind is FindingKind.UNKNOWN]
    assert len(unknown) == 1 and "random executions" in unknown[0].message
    assert unknown[0].detail["racing_pairs_reported"] == len({tuple(sorted(f.statements)) for f in races})
    assert not report.passed


def test_a_program_with_more_statements_than_the_solver_checks_is_walked(monkeypatch):
    monkeypatch.setattr(smt, "MAX_STATEMENTS", 20)
    report = check_loaded(load_text(random_threads(2, 2, 30), "big.sched"), Options(budget=5))
    assert not report.diagnostics
    assert any(f.kind is FindingKind.RACE for f in report.findings)
    assert any(f.kind is FindingKind.UNKNOWN and "random executions" in f.message for f in report.findings)


def test_a_program_too_wide_for_the_solvers_order_is_walked(monkeypatch):
    """The must order keeps a clock per step and chain: past its cap the program is refused at
    once (before any clock is built) and walked, like one with too many statements."""
    from checker.smt import order

    text = random_threads(5, 2, 30)
    program = load_text(text, "wide.sched").program
    layout = Layout(program)
    monkeypatch.setattr(order, "MAX_CLOCK_ENTRIES", len(layout.steps) * len(layout.chains) - 1)
    report = check_loaded(load_text(text, "wide.sched"), Options(budget=5))
    assert not report.diagnostics
    unknown = [f for f in report.findings if f.kind is FindingKind.UNKNOWN]
    assert len(unknown) == 1 and "too wide to order" in unknown[0].message
    assert "random executions were run" in unknown[0].message and unknown[0].detail["refused"]
    assert "open" not in unknown[0].detail  # (it counts open orderings, which were not counted)
    assert any(f.kind is FindingKind.RACE for f in report.findings)


def test_a_walk_stopped_by_its_time_limit_says_so(monkeypatch):
    program = load_text(random_threads(3, 2, 300, signals=False), "long.sched").program
    monkeypatch.setattr(walks, "CLOCK_EVERY", 1)
    cut = walk(program, seconds=0.0, max_walks=3)
    assert cut.walks == 1 and cut.cut
    assert cut.exploration.transitions < len(program.statements)  # (a whole walk takes every issue)
    whole = walk(program, seconds=60.0, max_walks=1)
    assert whole.walks == 1 and not whole.cut


def test_walks_keep_at_most_max_races_the_earliest_seen(monkeypatch):
    program = load_text(random_threads(3, 2, 300, signals=False), "big.sched").program
    result = walk(program, seconds=60.0, max_walks=8)
    assert result.racing_pairs > MAX_RACES  # this program races far more than is reported
    races = result.exploration.races
    assert len(races) == MAX_RACES
    assert not result.exploration.complete
    for race in races[:: MAX_RACES // 10]:
        last = race.witness.steps[-1]
        assert last.statement in (race.a, race.b)  # the witness ends where the race is seen
    # Keeping fewer keeps those with the shortest witnesses: the same walks, the first seen.
    monkeypatch.setattr(walks, "MAX_RACES", 10)
    few = walk(program, seconds=60.0, max_walks=8).exploration.races
    assert sorted(len(r.witness.steps) for r in few) == sorted(len(r.witness.steps) for r in races)[:10]


def test_walks_count_racing_pairs_up_to_a_cap_and_say_so(monkeypatch):
    # a group of 300 calls of one buffer races in up to 44,850 pairs: counting stops at the cap
    program = load_text("device d\nbuffer x 1MiB on d\nstream s on d\ncomm c = { s }\nthread a {\n  group {\n"
                        "    for i in 0..300 {\n      s: allreduce c x\n    }\n  }\n}\n", "g.sched").program
    whole = walk(program, seconds=60.0, max_walks=1)
    assert whole.racing_pairs > 1_000 and not whole.pairs_capped
    monkeypatch.setattr(walks, "MAX_SEEN_PAIRS", 1_000)
    capped = walk(program, seconds=60.0, max_walks=1)
    assert capped.racing_pairs == 1_000 and capped.pairs_capped
    assert len(capped.exploration.races) == MAX_RACES  # (the earliest seen are still reported)


def test_the_same_seed_walks_the_same_way():
    program = load_text(random_threads(4, 2, 30), "w.sched").program
    first, second = walk(program, 1.0, max_walks=20), walk(program, 1.0, max_walks=20)
    assert first.exploration.races == second.exploration.races
    assert first.racing_pairs == second.racing_pairs


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(specs())
def test_walks_show_only_what_the_solver_finds(text: str) -> None:
    """The walks and the solver are independent: every racing pair, dead use and deadlock a
    walk shows, the solver finds too, and every witness replays with its finding."""
    program = load_text(text, "<random>").program
    assume(program is not None)
    analysis = Analysis(program, Budget(timeout=60.0))
    findings = analysis.run()
    assume(not any(f.kind is FindingKind.UNKNOWN for f in findings))
    shown = walk(program, seconds=1.0, max_walks=30).exploration
    assert set(shown.race_pairs()) <= analysis.racing
    assert {(u.statement, u.kind) for u in shown.dead_uses} <= {
        (i, kind) for i, kind in _executor_kinds(analysis.dead_uses)}
    if shown.deadlocks:
        assert any(f.kind is FindingKind.DEADLOCK for f in findings)
    for finding in shown.findings(program, shortened=False):
        confirmation = confirm(program, finding)
        assert confirmation.ok, confirmation.reason


def _executor_kinds(dead_uses):
    """The solver's dead uses in the executor's kinds (a use after free is seen either when
    the access runs or when it is enqueued)."""
    from checker.executor.machine import ENQUEUED_AFTER_FREE, USE_AFTER_FREE, USE_BEFORE_ALLOC

    for i, kind in dead_uses:
        if kind is FindingKind.USE_AFTER_FREE:
            yield i, USE_AFTER_FREE
            yield i, ENQUEUED_AFTER_FREE
        else:
            yield i, USE_BEFORE_ALLOC


def test_a_program_is_refused_before_any_formula_is_built(monkeypatch):
    """The open orderings are counted over every step first: the refusal of a program with
    notifies came after a minute of formulas when it waited for the base to reach the limit."""
    from checker.smt.encode import Encoding

    program = load_text(random_threads(0, 2, 40), "big.sched").program
    encoding = Encoding(program)
    for step in range(len(encoding.time)):
        encoding.items(step)
    assert encoding.rules.open > 10
    # The limit passed only by the last steps' items, which the runs (stuck early) never need.
    monkeypatch.setattr(rules, "MAX_OPEN", encoding.rules.open - 1)

    def no_base(self, windows):
        raise AssertionError("a formula was built for a program the solver refuses")

    monkeypatch.setattr(Encoding, "_base", no_base)
    findings = smt.analyze(program, total=5.0)
    assert [f.detail.get("reason") for f in findings] == ["too large"]


def test_a_program_the_solver_checks_in_part_is_not_walked(monkeypatch):
    """Past the cap on race candidates the solver still decides the pairs it asks about: its
    SP301 says others may be missing, and no walks add findings beside its own."""
    from checker.smt import queries

    monkeypatch.setattr(queries, "MAX_RACE_CANDIDATES", 5)
    report = check_loaded(load_text(random_threads(6, 2, 20, signals=False), "part.sched"), Options(budget=30))
    unknown = [f for f in report.findings if f.kind is FindingKind.UNKNOWN]
    assert unknown and all(f.detail["reason"] == "too large" and "was not asked" in f.message for f in unknown)
    assert not any("random executions" in f.message for f in unknown)
    pairs = [tuple(sorted(f.statements)) for f in report.findings if f.kind is FindingKind.RACE]
    assert len(pairs) == len(set(pairs))


QUEUED = """device d {{ queues 1 }}
buffer y[{threads}] 1KiB on d
stream s[{threads}] on d
stream L on d legacy
thread t[{threads}] {{
  for i in 0..{kernels} {{
    s[t]: kernel k writes y[t] 1us
  }}
  L: kernel l reads y[(t+1)%{threads}] 1us
}}
"""


def test_threads_sharing_a_hardware_queue_past_the_cap_are_walked(monkeypatch):
    """Each task waits for the tasks before it on every stream of its hardware queue (and of
    the legacy stream's kind): the pairs the rules would read are counted from the groups
    before any is listed, and past the cap the program is refused and walked."""
    from checker.smt import rules
    from checker.smt.layout import Layout

    threads, kernels = 6, 5
    text = QUEUED.format(threads=threads, kernels=kernels)
    program = load_text(text, "queued.sched").program
    # The queue holds every stream of the device, L too. A kernel stream's tasks are read
    # against the other 11 streams-and-threads of the queue (5 kernel streams, L's 6 threads)
    # and, being blocking, L's 6 threads again; a task of L against L's other 5 threads, the
    # queue's 6 kernel streams, and the 6 blocking streams again.
    pairs = threads * kernels * (2 * threads - 1 + threads) + threads * (threads - 1 + 2 * threads)
    rules.Rules(Layout(program), None, edges_only=True)  # (at the cap: checked)
    monkeypatch.setattr(rules, "MAX_PEERS", pairs - 1)
    report = check_loaded(load_text(text, "queued.sched"), Options(budget=5))
    unknown = [f for f in report.findings if f.kind is FindingKind.UNKNOWN]
    assert len(unknown) == 1 and f"{pairs:,} pairs" in unknown[0].message, unknown
    assert "hardware queue" in unknown[0].message and unknown[0].detail["refused"]


def test_races_the_walks_show_count_as_lower_bounds(monkeypatch):
    # the solver decided none of a refused program's instance pairs: a race the runs show is
    # reported with its other pairs of the same lines left undecided
    monkeypatch.setattr(smt, "MAX_STATEMENTS", 20)
    text = ("device d\nbuffer x 1MiB on d\nstream a on d\nstream b on d\nthread p {\n  for i in 0..12 {\n"
            "    a: kernel w writes x\n  }\n}\nthread q {\n  for i in 0..12 {\n    b: kernel r reads x\n  }\n}\n")
    report = check_loaded(load_text(text, "loop.sched"), Options(budget=5))
    races = [f for f in report.findings if f.kind is FindingKind.RACE]
    assert races and all(f.undecided == 12 * 12 - f.instances for f in races), [(f.instances, f.undecided) for f in races]


def test_a_refused_program_of_one_thread_is_told_about_its_streams_not_threads(monkeypatch):
    monkeypatch.setattr(rules, "MAX_OPEN", 50)
    text = ("device d\nbuffer slot 1MiB on d\nstream ld on d\nstream wk on d\nevent vacant flag\nevent full flag\n"
            "thread main {\n  wk: record vacant\n  for i in 0..30 {\n    ld: wait vacant\n    ld: kernel fill writes slot\n"
            "    ld: record full\n    wk: wait full\n    wk: reset full\n    wk: kernel use reads slot\n"
            "    wk: record vacant\n  }\n}\n")
    report = check_loaded(load_text(text, "flag.sched"), Options(budget=5, explore_first=0))
    (unknown,) = [f for f in report.findings if f.kind is FindingKind.UNKNOWN]
    assert "the streams may run apart" in unknown.help and "flag wait passes on any record" in unknown.help
    assert "threads" not in unknown.help, unknown.help
