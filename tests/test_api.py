"""The Python API: a builder that yields the same program as the text, and typed results."""

from __future__ import annotations

import dataclasses
import enum
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

from checker import api as sp
from checker.frontend import load_text
from checker.ir import Op

ROOT = Path(__file__).parent.parent
DOC = ROOT / "docs" / "api.md"

SKIPPED_FIELDS = {"span", "source", "path", "buffer_spans", "written_as", "origin", "bindings"}
"""Where and how the source spelled things: a loop's instances share an origin and bindings."""


def shape(value):
    """A program with source positions dropped: what two equal programs have in common."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return (type(value).__name__,) + tuple(
            (f.name, shape(getattr(value, f.name))) for f in dataclasses.fields(value)
            if f.name not in SKIPPED_FIELDS)
    if isinstance(value, (list, tuple)):
        return tuple(shape(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, shape(v)) for k, v in value.items()))
    if isinstance(value, enum.Enum):
        return value.value
    return value


HAND_WRITTEN = """\
spec "pipeline"

device gpu0 { compute 2 copy 1 launch 5us }
buffer staged[2] 4MiB on host pinned
buffer act[2] 4MiB on gpu0
buffer w 1MiB on gpu0
alias head = w[0:1KiB]
stream loader on gpu0
stream worker[2] on gpu0 priority high
event ready[2]
notify go

thread main {
  for i in 0..2 {
    loader: copy act[i] <- staged[i] 2ms
    loader: record ready[i]
    worker[i]: wait ready[i]
    worker[i]: kernel step reads act[i][0:1MiB], head writes w[(i + 1) * 1KiB:(i + 2) * 1KiB] 1.5ms
  }
  notify go
  sync all
}

thread helper {
  await go
  host log reads staged[0] 10us
}

expect no race
expect no deadlock
"""


def pipeline() -> sp.Program:
    p = sp.Program("pipeline")
    gpu = p.device("gpu0", compute=2, copy=1, launch="5us")
    staged = p.buffer("staged", "4MiB", on="host", pinned=True, count=2)
    act = p.buffer("act", 4 << 20, on=gpu, count=2)
    w = p.buffer("w", "1MiB", on=gpu)
    head = p.alias("head", w[0:"1KiB"])
    loader = p.stream("loader", gpu)
    worker = p.stream("worker", gpu, priority="high", count=2)
    ready = p.event("ready", count=2)
    go = p.notify("go")
    main = p.thread("main")
    for i in range(2):
        main.copy(loader, act[i], staged[i], "2ms")
        main.record(loader, ready[i])
        main.wait(worker[i], ready[i])
        main.kernel(worker[i], "step", reads=[act[i][0:"1MiB"], head], writes=w[(i + 1) * 1024:(i + 2) * 1024],
                    duration=1_500_000)
    main.notify(go)
    main.sync("all")
    helper = p.thread("helper")
    helper.await_(go)
    helper.host("log", reads=[staged[0]], duration="10us")
    p.expect("no race").expect("no deadlock")
    return p


def test_builder_yields_the_program_the_text_describes():
    built = pipeline()
    by_hand = load_text(HAND_WRITTEN, "<hand>")
    assert by_hand.program is not None and built.load().diagnostics == ()
    assert shape(built.program) == shape(by_hand.program)


def test_to_sched_round_trips_through_the_parser():
    built = pipeline()
    again = load_text(built.to_sched(), built.path)
    assert again.program == built.program  # the very same program, spans included
    assert shape(load_text(again.program.source).program) == shape(built.program)


def test_check_simulate_optimize_return_typed_results():
    from checker.executor.simulate import Simulation
    from checker.optimize import OptimizeResult

    p = pipeline()
    result = p.check()
    assert isinstance(result, sp.CheckResult)
    assert result.status == "clean" and result.passed and result.clean and result.races == ()
    sim = p.simulate()
    assert isinstance(sim, Simulation) and not sim.deadlocked
    # two loads in series on one copy engine, the second step ends 1.5 ms after the second load
    # (plus the launches of the statements before it on the thread)
    assert sim.makespan >= 4_000_000 + 1_500_000
    best = p.optimize(timeout=5)
    assert isinstance(best, OptimizeResult)
    assert best.bound <= best.program <= sim.makespan


def test_a_missing_wait_is_a_race_with_its_statements():
    p = sp.Program()
    gpu = p.device("gpu0")
    x = p.buffer("x", 64, on=gpu)
    a, b = p.stream("a", gpu), p.stream("b", gpu)
    e = p.event("e")
    t = p.thread("main")
    t.kernel(a, "produce", writes=[x], duration=1000)
    t.kernel(b, "consume", reads=[x], duration=1000)
    result = p.check()
    assert result.status == "findings" and not result.passed
    (race,) = result.races
    assert race.buffer == "x"
    ops = [p.program.statements[i].name for i in race.statements]
    assert sorted(ops) == ["consume", "produce"]
    # the fix: order them; the builder's cached program follows the change
    fixed = sp.Program()
    gpu = fixed.device("gpu0")
    x = fixed.buffer("x", 64, on=gpu)
    a, b = fixed.stream("a", gpu), fixed.stream("b", gpu)
    e = fixed.event("e")
    t = fixed.thread("main")
    t.kernel(a, "produce", writes=[x], duration=1000).record(a, e).wait(b, e)
    t.kernel(b, "consume", reads=[x], duration=1000)
    assert fixed.check().clean


def test_changes_after_loading_are_seen():
    p = sp.Program()
    gpu = p.device("gpu0")
    s = p.stream("s", gpu)
    t = p.thread("main")
    t.kernel(s, "k", duration="1ms")
    assert p.simulate().makespan == 1_000_000
    t.kernel(s, "k2", duration="2ms")
    assert p.simulate().makespan == 3_000_000
    assert [st.name for st in p.program.statements if st.op is Op.KERNEL] == ["k", "k2"]


def test_expect_lines_decide_passed():
    p = sp.Program()
    gpu = p.device("gpu0")
    x = p.buffer("x", 64, on=gpu)
    a, b = p.stream("a", gpu), p.stream("b", gpu)
    t = p.thread("main")
    t.kernel(a, "w1", writes=[x]).kernel(b, "w2", writes=[x])
    p.expect("race on x")
    result = p.check()
    assert result.passed and result.status == "findings"
    assert all(f.expected for f in result.races)


@pytest.mark.parametrize("call, error", [
    (lambda p, g: p.stream("for", g), ValueError),            # reserved
    (lambda p, g: p.stream("2fast", g), ValueError),           # not a name
    (lambda p, g: p.buffer("gpu0", 64, on=g), ValueError),     # declared twice (shared namespace)
    (lambda p, g: p.buffer("b", "4 MiB", on=g), ValueError),   # not a size
    (lambda p, g: p.buffer("b", 64, on="disk"), TypeError),
    (lambda p, g: p.buffer("b", 64, on=g, pinned=True), ValueError),
    (lambda p, g: p.device("d2", compute=0), ValueError),
    (lambda p, g: p.thread("main").kernel(p.stream("s", g), "k", duration="3 ms"), ValueError),
    (lambda p, g: p.thread("main").kernel("s", "k"), TypeError),
    (lambda p, g: p.thread("main").sync(p.stream("s", g, count=2)), ValueError),  # name an element
    (lambda p, g: p.buffer("arr", 64, on=g, count=2)[0:8], ValueError),  # index the element first
    (lambda p, g: p.buffer("one", 64, on=g)[0], ValueError),  # not an array
    (lambda p, g: p.stream("s", g, count=2)[2], IndexError),
    (lambda p, g: sp.Program('say "hi"'), ValueError),     # a title is one line, no double quote
    (lambda p, g: sp.Program("two\nlines"), ValueError),
    (lambda p, g: p.check(timeout=0), ValueError),          # limits are positive, as on the command line
    (lambda p, g: p.check(budget=float("inf")), ValueError),
    (lambda p, g: p.optimize(timeout=-1), ValueError),
])
def test_the_builder_refuses_what_the_language_would(call, error):
    p = sp.Program()
    gpu = p.device("gpu0")
    with pytest.raises(error):
        call(p, gpu)


def test_front_end_errors_raise_spec_invalid_with_diagnostics():
    p = sp.Program()
    gpu = p.device("gpu0")
    s = p.stream("s", gpu)
    x = p.buffer("x", 64, on=gpu)
    p.thread("main").copy(s, x[0:128], x)  # past the end of x
    with pytest.raises(sp.SpecInvalid) as caught:
        p.simulate()
    assert caught.value.diagnostics[0].code.value == "SP014"
    assert "line" in str(caught.value)
    assert p.load().program is None


def test_the_examples_in_api_md_run(monkeypatch):
    """Every ```python block of docs/api.md, in order, in one namespace."""
    if importlib.util.find_spec("streamproof") is None:
        import checker._streamproof as shim

        monkeypatch.setitem(sys.modules, "streamproof", shim)
    monkeypatch.chdir(ROOT)
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert len(blocks) >= 5
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), namespace)


def test_import_streamproof_when_installed():
    if importlib.util.find_spec("streamproof") is None:
        pytest.skip("streamproof is not installed (pip install .)")
    import streamproof

    assert streamproof.Program is sp.Program or streamproof.Program.__name__ == "Program"
    assert callable(streamproof.import_kineto_file)
    out = subprocess.run([sys.executable, "-m", "streamproof", "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.startswith("streamproof ")


def test_check_without_symmetries_finds_the_same():
    # Two copies of one worker whose kernels write one buffer: the same race either way.
    p = sp.Program("twins")
    gpu = p.device("gpu0", compute=2)
    stats = p.buffer("stats", "1MiB", on=gpu)
    work = p.stream("work", gpu, count=2)
    for k in range(2):
        twin = p.thread(f"twin{k}")
        twin.kernel(work[k], "tally", writes=[stats], duration="1ms")
        twin.sync(work[k])
    with_symmetry, without = p.check(), p.check(symmetry=False)
    assert [(f.kind, f.statements) for f in with_symmetry.races] == [(f.kind, f.statements) for f in without.races]
    assert len(with_symmetry.races) == 1


def test_a_one_in_flight_comm_races_on_two_calls_of_a_rank():
    def build(one_in_flight: bool) -> sp.Program:
        p = sp.Program()
        gpu = p.device("gpu0")
        x, y = p.buffer("x", 64, on=gpu), p.buffer("y", 64, on=gpu)
        main, side = p.stream("main", gpu), p.stream("side", gpu)
        car = p.comm("car", [main], one_in_flight=one_in_flight)
        p.thread("t").allreduce(main, car, x).allreduce(side, car, y)
        return p

    assert "comm car = { main } one_in_flight" in build(True).to_sched()
    (race,) = build(True).check().races
    assert race.buffer == "car"
    with pytest.raises(sp.SpecInvalid):  # an ordinary comm: a call off its member stream is refused
        build(False).check()


def test_checks_from_several_threads_give_the_answers_of_one_at_a_time():
    """Z3's context is one per process: calls from threads take turns instead of corrupting
    each other's answers (a use-after-free and a deadlock read as unknown, or a crash)."""
    from concurrent.futures import ThreadPoolExecutor

    def build():
        p = sp.Program("threads")
        d = p.device("gpu0")
        b0 = p.buffer("b0", "1KiB", on=d)
        s0, s1, s2 = p.stream("s0", d), p.stream("s1", d), p.stream("s2", d)
        e0, n0, w = p.event("e0"), p.notify("n0"), p.comm("w", [s0, s1])
        p.thread("t0").free(b0).allreduce(s1, w, b0, "1us").wait(s2, e0).await_(n0).sync("all")
        return p

    def outcome(_):
        result = build().check(allow_unknown=True)
        return result.status, result.passed, tuple(sorted(f.code.value for f in result.findings))

    alone = outcome(0)
    assert alone[0] == "findings"
    with ThreadPoolExecutor(4) as pool:
        assert set(pool.map(outcome, range(8))) == {alone}


def test_optimize_of_a_program_that_can_get_stuck_reports_the_deadlock_as_the_command_does():
    p = sp.Program("stuck")
    d = p.device("gpu0")
    b0, b1 = p.buffer("b0", "1KiB", on=d), p.buffer("b1", "1KiB", on=d)
    s0, s1 = p.stream("s0", d), p.stream("s1", d)
    w = p.comm("w", [s0, s1])
    p.thread("t0").allreduce(s1, w, b1, "1us")
    p.thread("t1").sync("all").allreduce(s0, w, b0, "1us")
    assert p.simulate().deadlocked
    result = p.optimize()
    assert result.deadlock and (result.program, result.bound, result.optimal_program) == (None, None, False)


def test_ipc_marks_a_buffer_and_an_event_shared_between_processes_on_purpose():
    p = sp.Program("ipc")
    gpu = p.device("gpu0")
    p.buffer("shared", "1MiB", on=gpu, ipc=True)
    p.buffer("pin", "1MiB", on="host", pinned=True, ipc=True)
    p.event("done", flag=True, ipc=True)
    p.event("plain")
    assert "buffer shared 1MiB on gpu0 ipc\n" in p.to_sched() and "buffer pin 1MiB on host pinned ipc\n" in p.to_sched()
    assert "event done flag ipc\n" in p.to_sched()
    program = p.load().program
    assert [(m.name, m.ipc) for m in program.memories] == [("shared", True), ("pin", True)]
    assert [(e.name, e.ipc) for e in program.events] == [("done", True), ("plain", False)]
