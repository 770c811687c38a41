"""Collective mismatch (SP202) over every collective kind: at each position of a comm, the
members must call the same collective with the same size and the same root."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, assume, given, settings

from checker.analyze import check_loaded
from checker.collectives import mismatches
from checker.findings import FindingKind
from checker.frontend import load_text
from strategies import specs

HEADER = """device d0 { compute 1 comm 1 }
device d1 { compute 1 comm 1 }
buffer a0 1MiB on d0
buffer b0 2MiB on d0
buffer a1 1MiB on d1
buffer b1 2MiB on d1
stream c0 on d0
stream c1 on d1
comm world = { c0, c1 }
"""


def _mismatches(rank0: str, rank1: str):
    loaded = load_text(HEADER + f"thread r0 {{\n  {rank0}\n}}\nthread r1 {{\n  {rank1}\n}}\n")
    assert loaded.program is not None, loaded.diagnostics
    return loaded.program, mismatches(loaded.program)


@pytest.mark.parametrize("rank0, rank1", [
    ("c0: allgather world b0 <- a0", "c1: allgather world b1 <- a1"),
    # In place an allgather sends its share of the buffer: 2 MiB over 2 ranks meets 1 MiB.
    ("c0: allgather world b0", "c1: allgather world b1 <- a1"),
    ("c0: allgather world b0", "c1: allgather world b1"),
    ("c0: reducescatter world a0 <- b0", "c1: reducescatter world a1 <- b1"),
    ("c0: alltoall world a0", "c1: alltoall world a1"),
    ("c0: broadcast world root c0 a0", "c1: broadcast world root c0 a1"),
    ("c0: reduce world root c1 a0", "c1: reduce world root c1 b1 <- a1"),
])
def test_matching_calls_are_no_mismatch(rank0, rank1):
    _, found = _mismatches(rank0, rank1)
    assert found == ()


@pytest.mark.parametrize("rank0, rank1, words", [
    ("c0: allgather world b0 <- a0", "c1: allreduce world a1", ("allgather", "allreduce")),
    ("c0: allreduce world a0", "c1: allreduce world b1", ("1048576 bytes", "2097152 bytes")),
    ("c0: allgather world a0", "c1: allgather world b1 <- a1", ("524288 bytes", "1048576 bytes")),
    ("c0: broadcast world root c0 a0", "c1: broadcast world root c1 a1", ("rooted at `c0`", "rooted at `c1`")),
    ("c0: reduce world root c0 a0", "c1: allreduce world a1", ("reduce", "allreduce")),
    ("c0: alltoall world b0 <- a0", "c1: allgather world b1 <- a1", ("alltoall", "allgather")),
    ("c0: alltoall world b0 <- a0", "c1: alltoall world a1 <- b1", ("2097152 bytes", "1048576 bytes")),
])
def test_disagreeing_calls_are_sp202(rank0, rank1, words):
    program, found = _mismatches(rank0, rank1)
    assert len(found) == 1
    (finding,) = found
    assert finding.kind is FindingKind.COLLECTIVE_MISMATCH and finding.code.value == "SP202"
    assert {program.statements[i].span.line for i in finding.statements} == {11, 14}
    for word in words:
        assert word in finding.message


def test_mismatch_help_names_a_swapped_order_and_the_odd_call_out():
    _, found = _mismatches("c0: allgather world b0 <- a0\n  c0: allreduce world b0",
                           "c1: allreduce world b1\n  c1: allgather world b1 <- a1")
    assert [f.help for f in found] == [
        "`c1` issues the call that matches `c0`'s (line 11) later, at line 16, and allreduce of 2097152 bytes "
        "(line 15) here: issue the collectives in the same order on every member",
        "`c1` issues the call that matches `c0`'s (line 12) earlier, at line 15, and allgather of 1048576 bytes "
        "(line 16) here: issue the collectives in the same order on every member"]
    _, (odd,) = _mismatches("c0: broadcast world root c0 a0", "c1: broadcast world root c1 a1")
    assert odd.help.startswith("`c1` issues broadcast of 1048576 bytes rooted at `c1` (line 14) where `c0` issues "
                               "broadcast of 1048576 bytes rooted at `c0` (line 11), and none like it anywhere else")


def test_a_mismatch_fails_check_and_names_both_lines():
    loaded = load_text(HEADER + "thread r0 {\n  c0: allgather world b0 <- a0\n}\n"
                                "thread r1 {\n  c1: allreduce world a1\n}\n")
    report = check_loaded(loaded)
    assert not report.passed
    assert any(f.kind is FindingKind.COLLECTIVE_MISMATCH for f in report.findings)


def test_broadcast_accesses_follow_the_root():
    """The root reads its source; a non-root member only receives (writes)."""
    program, _ = _mismatches("c0: broadcast world root c0 a0", "c1: broadcast world root c0 a1")
    root, other = (s for s in program.statements if s.comm is not None)
    assert [a.write for a in root.accesses] == [False]
    assert [a.write for a in other.accesses] == [True]


# -- calls that two threads enqueue onto one stream meet in enqueue order --------------------

CROSSED = """device d0
device d1
buffer x 256B on d0
buffer y 256B on d1
buffer z 256B on d0
stream s0 on d0
stream s1 on d1
stream o on d0
comm w = { s0, s1 }
thread t0 {
  s1: CALL1 1ms
  s0: CALL0 1ms
}
thread t1 {
  s0: CALL0 1ms
  s1: CALL1 1ms
}
"""


@pytest.mark.parametrize("call0,call1", [("allreduce w x", "allreduce w y"),
                                         ("send w to s1 x", "recv w from s0 y")])
def test_calls_of_two_threads_on_one_stream_meet_in_enqueue_order(call0, call1):
    # whichever thread enqueues first on s0 and on s1, the heads of s0 and s1 meet: no execution
    # deadlocks (matching by program order paired t0's two calls, and hung)
    from checker.collectives import interleaved_comms
    from checker.executor.explore import explore
    from checker.executor.simulate import simulate

    loaded = load_text(CROSSED.replace("CALL0", call0).replace("CALL1", call1))
    program = loaded.program
    assert interleaved_comms(program) == frozenset({0})
    result = explore(program)
    assert result.complete and not result.deadlocks and not result.races
    report = check_loaded(loaded)
    assert not [f for f in report.findings if f.kind is not FindingKind.UNKNOWN], report.findings
    assert report.findings == ()
    timed = simulate(program)
    assert not timed.deadlocked and timed.makespan == 2_000_000


INTERLEAVED_ENDS = """device gpu0
device gpu1
buffer a0 1MiB on gpu0
buffer b0 1MiB on gpu0
buffer a1 1MiB on gpu1
buffer b1 1MiB on gpu1
stream c0 on gpu0
stream c1 on gpu1
comm world = { c0, c1 }
thread main0 {
  c0: allreduce world a0 1ms
  c0: kernel peek reads a1 1ms
}
thread hook0 {
  c0: allreduce world b0 1ms
}
thread rank1 {
  c1: allreduce world a1 3ms
  c1: allreduce world b1 3ms
}
"""


def test_members_of_calls_that_meet_in_enqueue_order_end_on_their_own():
    # main0's call may meet rank1's first one (on a1); it ends on its own, so the kernel behind
    # it may read a1 while rank1's member still writes it. Each position is kept until every
    # call at it has ended: no run hangs with a member that forgot its group.
    from checker.executor.explore import explore

    program = load_text(INTERLEAVED_ENDS).program
    result = explore(program)
    assert result.complete and not result.deadlocks
    lines = {tuple(sorted(program.statements[i].span.line for i in (r.a, r.b))) for r in result.races}
    assert lines == {(12, 18)}
    report = check_loaded(load_text(INTERLEAVED_ENDS))
    (race,) = report.findings
    assert race.kind is FindingKind.RACE and race.buffer == "a1"


def test_interleaved_calls_are_decided_by_the_solver_where_the_search_is_cut():
    # Groups formed by enqueue order are encoded (`Meet`), so the search's state cap does not
    # leave the program undecided; the search alone (--exhaustive) still says where it stopped.
    from checker.analyze import Options

    loaded = load_text(CROSSED.replace("CALL0", "allreduce w x").replace("CALL1", "allreduce w y"))
    assert check_loaded(loaded, Options(max_states=5, explore_first=0)).findings == ()
    report = check_loaded(loaded, Options(max_states=5, exhaustive=True))
    (unknown,) = report.findings
    assert unknown.kind is FindingKind.UNKNOWN and "exploration stopped at 5 states" in unknown.message


def test_interleaved_comms_leave_the_mismatch_check_to_the_run():
    from checker.collectives import interleaved_comms

    text = CROSSED.replace("CALL0", "allreduce w x").replace("CALL1", "send w to s0 y").replace(
        "thread t1 {\n  s0: allreduce w x 1ms\n  s1: send w to s0 y 1ms", "thread t1 {\n  s0: allreduce w z 1ms\n  s1: allreduce w y 1ms")
    loaded = load_text(text)
    assert loaded.program is not None, loaded.diagnostics
    assert interleaved_comms(loaded.program) == frozenset({0})
    assert mismatches(loaded.program) == ()


def test_a_mismatch_of_calls_that_meet_in_enqueue_order_is_found_by_the_run_that_forms_it():
    text = CROSSED.replace("CALL0", "allreduce w x").replace("CALL1", "allreduce w y").replace(
        "buffer y 256B on d1", "buffer y 512B on d1")
    report = check_loaded(load_text(text))
    found = [f for f in report.findings if f.kind is FindingKind.COLLECTIVE_MISMATCH]
    assert [f.message.split(":")[0] for f in found] == [
        "collective mismatch at call 1 of comm `w`", "collective mismatch at call 2 of comm `w`"]
    assert all(f.witness is not None and f.witness.steps[-1].kind.value == "end" for f in found)
    assert not [d for d in report.diagnostics if d.code.value == "SP402"]
    # the same sizes meet without a mismatch, whichever calls meet
    same = check_loaded(load_text(CROSSED.replace("CALL0", "allreduce w x").replace("CALL1", "allreduce w y")))
    assert same.findings == ()


def test_a_pair_and_a_collective_at_the_same_position_are_two_mismatches():
    # Calls that meet in enqueue order: the first collective position of comm w and the first
    # send from c0 to c1 count apart, so both mismatches are reported.
    text = """device d0
device d1
buffer x 256B on d0
buffer y 256B on d0
buffer a 128B on d1
buffer b 128B on d1
stream c0 on d0
stream c1 on d1
comm w = { c0, c1 }
thread t0 {
  c0: allreduce w x
}
thread hook {
  c0: allreduce w x
  c0: send w to c1 y
}
thread t1 {
  c1: allreduce w a
  c1: allreduce w a
  c1: recv w from c0 b
}
"""
    report = check_loaded(load_text(text))
    found = sorted(f.message.split(":")[0] for f in report.findings if f.kind is FindingKind.COLLECTIVE_MISMATCH)
    assert found == ["collective mismatch at call 1 of comm `w`", "collective mismatch at call 2 of comm `w`",
                     "send of 256 bytes (line 15) meets a recv of 128 bytes (line 20) on comm `w`"]


def test_sends_and_recvs_pair_apart_from_the_collectives():
    # A send and its recv take no collective position: rank 0 sends to rank 1, then all three
    # ranks allreduce, and nothing disagrees. A send whose peer issues an allreduce instead of a
    # recv is no mismatch either: the send never meets a recv, and the program hangs.
    three = """device d0
device d1
device d2
buffer g0 256B on d0
buffer g1 256B on d1
buffer g2 256B on d2
buffer o0 256B on d0
buffer o1 256B on d1
stream c0 on d0
stream c1 on d1
stream c2 on d2
comm w = { c0, c1, c2 }
thread t0 {
  c0: send w to c1 o0
  c0: allreduce w g0
}
thread t1 {
  c1: recv w from c0 o1
  c1: allreduce w g1
}
thread t2 {
  c2: allreduce w g2
}
"""
    loaded = load_text(three)
    assert mismatches(loaded.program) == ()
    assert check_loaded(loaded).findings == ()
    program, found = _mismatches("c0: send world to c1 a0", "c1: allreduce world a1")
    assert found == ()
    kinds = [f.kind for f in check_loaded(load_text(HEADER + "thread r0 {\n  c0: send world to c1 a0\n}\n"
                                                    "thread r1 {\n  c1: allreduce world a1\n}\n")).findings]
    assert kinds == [FindingKind.DEADLOCK]


@pytest.mark.parametrize("first, second", [("t1", "hook"), ("hook", "t1")])
def test_a_kind_mismatch_some_run_forms_outweighs_a_size_mismatch_another_forms(first, second):
    # c0's call meets either c1's allreduce (sizes differ: a warning) or its reducescatter
    # (kinds differ: an error), as the threads interleave; whichever the search meets first,
    # the error is what is reported.
    threads = {"t1": "thread t1 {\n  c1: allreduce w g1\n}\n",
               "hook": "thread hook {\n  c1: reducescatter w g1[0:128]\n}\n"}
    text = ("device d0\ndevice d1\nstream c0 on d0\nstream c1 on d1\nbuffer g0 256B on d0\n"
            "buffer g1 256B on d1\ncomm w = { c0, c1 }\nthread t0 {\n  c0: allreduce w g0[0:128]\n}\n"
            + threads[first] + threads[second])
    report = check_loaded(load_text(text))
    found = [f for f in report.findings if f.kind is FindingKind.COLLECTIVE_MISMATCH]
    assert any(not f.advisory and "reducescatter" in f.message for f in found), [f.message for f in found]


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(specs(shared_comms=True))
def test_the_contracts_executions_are_some_of_the_spinning_ones(text):
    # Rule 8 (members start together) and run-order frees only take executions away from
    # spinning members and launch-order frees (`runtime cuda`): every step a started-together
    # group takes is also legal for members that may start alone. So the contract's races and
    # dead uses are a subset of the runtime's (deadlocks may differ: a group held back can
    # hang where spinning members would not), for the explorer and the solver alike.
    from dataclasses import replace

    from checker.collectives import interleaved_comms
    from checker.executor.explore import explore
    from checker.executor.state import USE_BEFORE_ALLOC
    from checker.ir import Op
    from checker.smt.queries import Analysis
    from checker.smt.solve import Budget

    program = load_text(text, "<random>").program
    assume(program is not None and program.groups)
    spinning = replace(program, statements=tuple(
        replace(s, spins=s.operation.collective, launch_ordered=s.launch_ordered or (s.op is Op.FREE and s.is_task))
        for s in program.statements))
    contract, runtime = explore(program, max_states=100_000), explore(spinning, max_states=100_000)
    assume(contract.complete and runtime.complete)
    assert set(contract.race_pairs()) <= set(runtime.race_pairs())
    after_free = lambda e: {u.statement for u in e.dead_uses if u.kind != USE_BEFORE_ALLOC}  # noqa: E731
    assert after_free(contract) <= after_free(runtime)
    if not interleaved_comms(program):
        analysis = Analysis(program, Budget(timeout=60.0))
        analysis.run()
        assert analysis.racing == set(contract.race_pairs())


def test_a_ddp_loop_past_the_exhaustive_search_is_decided_by_the_solver():
    # Two ranks x {main, autograd hook} calling one comm on one stream: five iterations are past
    # what the search covers within its limits (4: 495,579 states). The solver decides it: the
    # race of each rank's kernel with its hook's allreduce, and a mismatch at every position
    # (whether main's 1 MiB call or the hook's 4 MiB one is k-th differs between the ranks in
    # some execution), each witness replayed; no deadlock (every group is proved to meet).
    from checker.analyze import Options, find
    from test_executor_reduction import DDP

    loaded = load_text(DDP.replace("ITERATIONS", "5"))
    findings, internal = find(loaded.program, Options(explore_first=0))
    assert not internal  # every witness replayed
    kinds = [f.kind for f in findings]
    assert FindingKind.UNKNOWN not in kinds and FindingKind.DEADLOCK not in kinds
    races = [f for f in findings if f.kind is FindingKind.RACE]
    assert {f.buffer for f in races} == {"grad"}  # (the array; both ranks are instances)
    found = [f for f in findings if f.kind is FindingKind.COLLECTIVE_MISMATCH]
    assert sorted(int(f.message.split("at call ")[1].split()[0]) for f in found) == list(range(1, 11))
    assert all(f.advisory and f.witness is not None for f in found)
    # The report keeps one finding per pair of source lines: one race, one mismatch warning.
    report = check_loaded(loaded, Options(explore_first=0))
    assert sorted(f.kind.value for f in report.findings) == ["collective-mismatch", "race"]
    assert not [d for d in report.diagnostics if d.code.value == "SP402"]


TWO_THREADS_BOTH_RANKS = """device d0
device d1
buffer x 1KiB on d0
buffer y 1KiB on d1
stream a on d0
stream b on d1
comm w = { a, b }
thread T0 {
  a: allreduce w x
  b: broadcast w root a y
}
thread T1 {
  a: allreduce w x
  b: allreduce w y
}
"""


@pytest.mark.parametrize("engine", ["solver", "exhaustive"])
def test_the_same_calls_mismatching_at_two_positions_are_two_findings(engine):
    # T0 first: its allreduce meets its broadcast at position 0. T1 first: an allreduce meets
    # a broadcast at position 1 (each thread's first call on `a`, T1's first on `b`). Each
    # engine finds both positions (the report then keeps one finding per pair of lines).
    from checker.analyze import Options, find

    options = Options(exhaustive=True) if engine == "exhaustive" else Options(explore_first=0)
    findings, _ = find(load_text(TWO_THREADS_BOTH_RANKS).program, options)
    found = [f for f in findings if f.kind is FindingKind.COLLECTIVE_MISMATCH]
    assert [f.message.split(":")[0] for f in found] == [
        "collective mismatch at call 1 of comm `w`", "collective mismatch at call 2 of comm `w`"]
    assert all("allreduce" in f.message and "broadcast" in f.message for f in found)


KIND_OVER_SIZE = """device d0
device d1
device d2
buffer g0 1KiB on d0
buffer g1 1KiB on d1
buffer g2 1KiB on d2
stream s0 on d0
stream s1 on d1
stream s2 on d2
comm w = { s0, s2, s1 }
thread T0 {
  s0: allreduce w g0
  s2: broadcast w root s1 g2
  s0: broadcast w root s1 g0
}
thread T1 {
  s1: allreduce w g1
  s1: broadcast w root s1 g1[0:512]
}
thread T2 {
  s2: allreduce w g2
}
"""


@pytest.mark.parametrize("engine", ["solver", "exhaustive"])
def test_where_executions_disagree_differently_the_kinds_that_differ_are_reported(engine):
    # Position 1 can hold three broadcasts of different sizes (T0 enqueues on s2 first) or an
    # allreduce among broadcasts (T2 first): both engines report the one whose kinds differ.
    from checker.analyze import Options, find
    from checker.collectives import severity

    options = Options(exhaustive=True) if engine == "exhaustive" else Options(explore_first=0)
    findings, _ = find(load_text(KIND_OVER_SIZE).program, options)
    found = {f.message.split(":")[0][-len("call 1 of comm `w`"):]: f for f in findings
             if f.kind is FindingKind.COLLECTIVE_MISMATCH}
    assert sorted(found) == ["call 1 of comm `w`", "call 2 of comm `w`"]
    second = found["call 2 of comm `w`"]
    assert "allreduce" in second.message and "broadcast" in second.message
    assert severity(second) == 3 and "kind" in second.detail["differ"]


# -- in place: a rank's share; buffers sized against the comm (SP070) ------------------------

SHARES = """device gpu[2]
buffer x[2] 4MiB on gpu
buffer o 1MiB on gpu[0]
stream peek on gpu[0]
stream c[2] on gpu
comm w = { c }
thread r[2] {
  c[r]: CALL 1ms
  if r == 0 {
    peek: kernel k reads x[0][READ] writes o 1ms
  }
}
"""


@pytest.mark.parametrize("call, read, races", [
    # ncclAllGather(data + rank * count, data): rank 0 sends its share and writes rank 1's
    ("allgather w x[r]", "0:2MiB", False),
    ("allgather w x[r]", "2MiB:4MiB", True),
    # ncclReduceScatter(data, data + rank * count): reads everything, writes its share
    ("reducescatter w x[r]", "2MiB:4MiB", False),
    ("reducescatter w x[r]", "1MiB:3MiB", True),
    ("allreduce w x[r]", "0:2MiB", True),
])
def test_in_place_calls_touch_the_rank_s_share_as_nccl_defines_them(call, read, races):
    loaded = load_text(SHARES.replace("CALL", call).replace("READ", read))
    report = check_loaded(loaded)
    assert [f.buffer for f in report.findings if f.kind is FindingKind.RACE] == (["x"] if races else [])
    first = next(s for s in loaded.program.statements if s.comm is not None)
    if call.startswith("allgather"):
        assert [(a.start, a.end, a.write) for a in first.accesses] == [(0, 2 << 20, False), (2 << 20, 4 << 20, True)]


@pytest.mark.parametrize("call, sizes, fits", [
    ("allgather world b0 <- a0", "", True),
    ("allgather world a0 <- a0", "", False),
    ("reducescatter world a0 <- b0", "", True),
    ("reducescatter world b0 <- b0", "", False),
    ("alltoall world a0 <- b0", "", True),  # (alltoallv: each member sends and receives its own counts)
    ("alltoall world odd", "buffer odd 1001B on d0\n", True),
    ("allreduce world b0 <- a0", "", False),
    ("allreduce world a0", "", True),
    ("allgather world a0", "buffer odd 1000B on d0\n", True),
    ("allgather world odd", "buffer odd 1000B on d0\n", True),  # 1000 bytes over 2 members divide
    ("broadcast world root c1 b0 <- a0", "", True),  # a non-root's source goes unused
    ("broadcast world root c0 b0 <- a0", "", False),
])
def test_buffers_that_do_not_fit_the_comm_are_sp070(call, sizes, fits):
    loaded = load_text(HEADER + sizes + f"thread r0 {{\n  c0: {call}\n}}\n")
    assert loaded.program is not None, loaded.diagnostics
    warned = [d for d in loaded.diagnostics if d.code.value == "SP070"]
    assert (warned == []) == fits, warned
    three = load_text(HEADER.replace("comm world = { c0, c1 }", "stream c2 on d1\ncomm world = { c0, c1, c2 }")
                      + "thread r0 {\n  c0: allgather world a0\n}\n")
    (warning,) = [d for d in three.diagnostics if d.code.value == "SP070"]
    assert "does not divide among the comm's 3 members" in warning.message


@pytest.mark.parametrize("memory", ["tensor", "buffer"])
def test_a_side_stream_call_on_a_tensor_races_as_on_a_buffer(memory):
    # under runtime cuda a call off the member stream is the rank's call, after a wait for the
    # rank's previous one: the tensor it uses was placed on that wait, and the call touched nothing
    text = (f"device gpu {{ runtime cuda }}\n{memory} x 4MiB on gpu\nstream c on gpu\nstream side on gpu\n"
            "stream k on gpu\ncomm w = { c }\nthread r {\n  k: alloc x\n  side: allreduce w x 2ms\n"
            "  k: kernel rd reads x 1ms\n}\nexpect race on x\n")
    for options in ({}, {"exhaustive": True}):
        from checker.analyze import Options

        report = check_loaded(load_text(text), Options(**options))
        assert [f.buffer for f in report.findings if f.kind is FindingKind.RACE] == ["x"], report.findings


# -- one rank's calls of a `one_in_flight` comm from two threads -----------------------------

ONE_RANK_TWO_THREADS = """device gpu[2] { RUNTIME }
buffer g[2] 4MiB on gpu
buffer h[2] 8MiB on gpu
stream main[2] on gpu
stream side[2] on gpu
comm world = { main } one_in_flight
notify n
thread a {
  AWAIT
  main[0]: allreduce world g[0] 1us
}
thread b {
  side[0]: allgather world h[0] <- g[0] 1us
  notify n
}
thread r1 {
  main[1]: allreduce world g[1] 1us
  main[1]: allgather world h[1] <- g[1] 1us
}
"""


@pytest.mark.parametrize("engine", [{}, {"explore_first": 0}, {"exhaustive": True}],
                         ids=["default", "solver", "exhaustive"])
@pytest.mark.parametrize("runtime", ["runtime cuda", "runtime cann"])
@pytest.mark.parametrize("handed", [True, False], ids=["b first", "unordered"])
def test_one_rank_s_calls_from_two_threads_meet_by_enqueue_order_in_every_engine(engine, runtime, handed):
    """Thread b's allgather is rank 0's first call when b goes first (always, after the
    hand-off): it meets rank 1's allreduce, a mismatch. The fast path took the calls in
    program order (a's first) and the exhaustive search's reduction took a's enqueue alone,
    so both missed it; the solver's witness did not replay under CANN (SP402)."""
    from checker.analyze import Options

    spec = ONE_RANK_TWO_THREADS.replace("RUNTIME", runtime).replace("AWAIT", "await n" if handed else "")
    report = check_loaded(load_text(spec, "spec.sched"), Options(**engine))
    codes = {f.code.value for f in report.findings}
    assert "SP202" in codes and "SP101" in codes, (codes, report.diagnostics)
    assert not [d for d in report.diagnostics if d.code.value == "SP402"], report.diagnostics


def test_a_rank_s_calls_issued_by_two_threads_make_the_program_nondeterministic():
    from checker.determinism import nondeterminism

    program = load_text(ONE_RANK_TWO_THREADS.replace("RUNTIME", "runtime cuda").replace("AWAIT", "await n"),
                        "spec.sched").program
    assert nondeterminism(program) == "two threads issue one rank's calls of comm `world`"


def test_alltoalls_of_different_sizes_are_an_advisory_mismatch():
    # an alltoall stands for alltoallv too: a warning that `expect mismatch` covers, no failure
    _, (found,) = _mismatches("c0: alltoall world b0 <- a0", "c1: alltoall world a1 <- b1")
    assert found.advisory and "alltoallv" in found.help
    _, (kinds,) = _mismatches("c0: alltoall world b0 <- a0", "c1: allgather world b1 <- a1")
    assert not kinds.advisory


@pytest.mark.parametrize("condition, words", [
    # rank 1 swaps a reduce and an allreduce: the later call is named with its iteration
    ("r == 1 and i == 1 or r == 0 and i == 2",
     "issues the call that matches `s[0]`'s (line 10) later, at line 10 [i=2 r=1], and reduce"),
    # rank 1 issues a reduce rank 0 never issues: the odd one out, not a swapped order
    ("r == 1 and i == 1", "and none like it anywhere else"),
])
def test_a_mismatch_in_a_loop_is_told_as_a_swap_only_where_it_is_one(condition, words):
    loaded = load_text("device gpu[2]\nbuffer a[2] 1MiB on gpu\nstream s[2] on gpu\ncomm w = { s }\n"
                       f"thread r[2] {{\n  for i in 0..3 {{\n    if {condition} {{\n"
                       "      s[r]: reduce w root s[0] a[r]\n    } else {\n      s[r]: allreduce w a[r]\n    }\n"
                       "  }\n}\n")
    found = mismatches(loaded.program)
    assert found and words in found[0].help, [f.help for f in found]
