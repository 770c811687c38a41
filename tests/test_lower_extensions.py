"""Lowering of the language extensions: collectives beyond allreduce, `group` batches,
`choose` variants, the CUDA runtime dialect, sync stream sets, caching-allocator tensors,
implicitly synchronizing calls, and thread/comm/whole-array forms. Each test asserts the IR
fields the engines read."""

from __future__ import annotations

from dataclasses import replace

import pytest

from checker.codes import Code, Severity
from checker.frontend import load_text
from checker.ir import CopyKind, Engine, GroupKind, Op, Runtime, StreamMode, SyncKind
from checker.lower import (
    CUDA_HOST_ALLOC_FREE, CUDA_HOST_ALLOC_SYNCED, CUDA_MALLOC_FREE, CUDA_MALLOC_SYNCED, CUDA_STAGED, CUDA_SYNCED,
    MAX_VARIANTS,
)

MiB = 1 << 20


def loaded(source: str, **kwargs):
    result = load_text(source, "t.sched", **kwargs)
    errors = [d for d in result.diagnostics if d.severity is Severity.ERROR]
    assert result.program is not None and not errors, errors
    return result


def program(source: str, **kwargs):
    return loaded(source, **kwargs).program


def error_of(source: str, code: Code, line: int, column: int, message: str | None = None):
    result = load_text(source, "t.sched")
    assert result.program is None, "expected an error"
    (diagnostic,) = result.diagnostics
    assert diagnostic.code is code, (diagnostic.code, diagnostic.message)
    span = diagnostic.primary_span
    assert (span.line, span.column) == (line, column), (span, diagnostic.message)
    if message is not None:
        assert message in diagnostic.message, diagnostic.message
    return diagnostic


def rw(program, statement):
    """(memory name, start, end, write) of each access."""
    return [(program.memories[a.memory].name, a.start, a.end, a.write) for a in statement.accesses]


# -- collectives ----------------------------------------------------------------------------

RANKS = (
    "device d0\ndevice d1\ndevice d2\n"                      # 1-3
    "buffer x0 1MiB on d0\nbuffer y0 2MiB on d0\n"           # 4-5
    "buffer x1 1MiB on d1\nbuffer y1 2MiB on d1\n"           # 6-7
    "stream c0 on d0\nstream c1 on d1\nstream c2 on d2\n"    # 8-10
    "comm w = { c0, c1 }\n"                                  # 11
)


@pytest.mark.parametrize("kind", ["allreduce", "allgather", "reducescatter", "alltoall"])
def test_symmetric_collectives_in_and_out_of_place(kind):
    p = program(RANKS + f"thread t {{\n  c0: {kind} w x0 1ms\n  c0: {kind} w y0 <- x0[0:512KiB]\n}}\n")
    in_place, out_of_place = p.statements
    assert (in_place.op, in_place.engine, in_place.comm, in_place.root, in_place.duration) == (
        Op(kind), Engine.COMM, 0, None, 10**6)
    # in place, c0 is rank 0 of two: an allgather sends its share and writes the other's; a
    # reducescatter reads everything and writes its share (NCCL, "In-place Operations")
    assert rw(p, in_place) == {
        "allgather": [("x0", 0, MiB // 2, False), ("x0", MiB // 2, MiB, True)],
        "reducescatter": [("x0", 0, MiB, False), ("x0", 0, MiB // 2, True)],
    }.get(kind, [("x0", 0, MiB, False), ("x0", 0, MiB, True)])
    assert rw(p, out_of_place) == [("x0", 0, 512 * 1024, False), ("y0", 0, 2 * MiB, True)]


def test_broadcast_root_reads_members_write():
    p = program(RANKS + "thread t {\n"
                "  c0: broadcast w root c0 x0\n  c1: broadcast w root c0 x1\n"
                "  c0: broadcast w root c0 y0 <- x0\n  c1: broadcast w root c0 y1 <- x1\n}\n")
    root_in, member_in, root_out, member_out = p.statements
    assert [s.root for s in p.statements] == [0, 0, 0, 0]
    assert rw(p, root_in) == [("x0", 0, MiB, False)]
    assert rw(p, member_in) == [("x1", 0, MiB, True)]
    assert rw(p, root_out) == [("x0", 0, MiB, False), ("y0", 0, 2 * MiB, True)]
    assert rw(p, member_out) == [("y1", 0, 2 * MiB, True)]


def test_reduce_members_read_root_writes():
    p = program(RANKS + "thread t {\n"
                "  c0: reduce w root c1 x0\n  c1: reduce w root c1 x1\n"
                "  c0: reduce w root c1 y0 <- x0\n  c1: reduce w root c1 y1 <- x1\n}\n")
    member_in, root_in, member_out, root_out = p.statements
    assert [s.root for s in p.statements] == [1, 1, 1, 1]
    assert rw(p, member_in) == [("x0", 0, MiB, False)]
    assert rw(p, root_in) == [("x1", 0, MiB, False), ("x1", 0, MiB, True)]
    assert rw(p, member_out) == [("x0", 0, MiB, False)]
    assert rw(p, root_out) == [("x1", 0, MiB, False), ("y1", 0, 2 * MiB, True)]


def test_root_must_be_a_member():
    diagnostic = error_of(RANKS + "thread t {\n  c0: broadcast w root c2 x0\n}\n", Code.SP021, 13, 24,
                          "stream `c2` is not a member of comm `w`")
    assert diagnostic.annotations[1].label == "comm declared here"


def test_kth_call_of_any_kind_forms_group_k():
    p = program(RANKS + "thread r0 {\n  c0: allreduce w x0\n  c0: broadcast w root c0 x0\n  c0: send w to c1 x0\n}\n"
                "thread r1 {\n  c1: allgather w x1\n  c1: reduce w root c1 x1\n  c1: recv w from c0 x1\n"
                "  c1: alltoall w x1\n}\n")
    assert [(g.kind, g.position, g.members, g.complete) for g in p.groups] == [
        (GroupKind.COLLECTIVE, 0, (0, 3), True),
        (GroupKind.COLLECTIVE, 1, (1, 4), True),
        (GroupKind.COLLECTIVE, 2, (6,), False),
        (GroupKind.SENDRECV, 0, (2, 5), True),
    ]
    assert [s.group for s in p.statements] == [0, 1, 3, 0, 1, 3, 2]


# -- comms on one device ----------------------------------------------------------------------


def warning_of(source: str, code: Code, line: int, column: int, message: str):
    result = loaded(source)
    (diagnostic,) = [d for d in result.diagnostics if d.code is code]
    assert diagnostic.severity is Severity.WARNING
    span = diagnostic.primary_span
    assert (span.line, span.column) == (line, column), (span, diagnostic.message)
    assert message in diagnostic.message, diagnostic.message
    return result, diagnostic


def test_two_members_on_one_device_are_checked_as_written_with_a_warning():
    # The contract allows it (one member stream per rank); NCCL and HCCL refuse it.
    source = "device d0\ndevice d1\nstream a on d0\nstream b on d1\nstream c on d0\ncomm w = { a, b,\n  c }\n"
    result, diagnostic = warning_of(source, Code.SP059, 7, 3, "comm `w` has two members on device `d0`: `a` and `c`")
    (first,) = [a for a in diagnostic.annotations if not a.primary]
    assert (first.span.line, first.span.column, first.label) == (6, 12, "first member on this device")
    assert "one rank per device" in diagnostic.help
    assert result.program.comms[0].members == (0, 1, 2)


def test_two_members_on_one_device_through_an_array():
    warning_of("device d0\nstream s[2] on d0\ncomm w = { s }\n", Code.SP059, 3, 12, "`s[0]` and `s[1]`")


def test_members_on_one_device_share_its_comm_unit_in_time():
    # Both members start together at 0 on a device with one comm unit: the longer one holds
    # it, so neither the simulation nor the optimizer waits for a second unit that never comes.
    from checker.executor.simulate import simulate
    from checker.optimize import optimize

    source = ("device d { compute 1 comm 1 launch 0us }\nbuffer x 1MiB on d\nbuffer y 1MiB on d\n"
              "stream a on d\nstream b on d\ncomm w = { a, b }\nthread t {\n"
              "  a: allreduce w x 2ms\n  b: allreduce w y 3ms\n  a: kernel k reads x 2ms\n}\n")
    p = program(source)
    sim = simulate(p)
    assert not sim.deadlocked and sim.makespan == 4_000_000
    result = optimize(p, timeout=10)
    assert result.optimal_program and result.program == 4_000_000


# -- expectations on one element of a buffer array --------------------------------------------

ARRAY_RACE = """device d
buffer x[2] 1MiB on d
stream a on d
stream b on d
thread t {
  a: kernel k writes x[1]
  b: kernel j writes x[1]
}
expect race on ELEMENT
"""


@pytest.mark.parametrize("element, met", [("x[1]", True), ("x[0]", False), ("x", True)])
def test_expect_race_on_an_element_of_a_buffer_array(element, met):
    from checker.analyze import check_loaded
    from checker.findings import FindingKind

    report = check_loaded(loaded(ARRAY_RACE.replace("ELEMENT", element)))
    assert [f.kind for f in report.findings] == [FindingKind.RACE]
    unmet = [d for d in report.diagnostics if d.code is Code.SP401]
    assert (not unmet) is met, report.diagnostics


ELEMENT_SPECS = {
    "loop": ("device d\nbuffer y[2] 1MiB on d\nstream a on d\nstream b on d\nthread t {\n  for i in 0..2 {\n"
             "    a: kernel w writes y[i]\n    b: kernel r reads y[i]\n  }\n}\n"),
    "thread array": ("device d\nbuffer y[2] 1MiB on d\nstream a[2] on d\nstream b[2] on d\nthread t[2] {\n"
                     "  a[t]: kernel w writes y[t]\n  b[t]: kernel r reads y[t]\n}\n"),
    "freed in a loop": ("device d\nbuffer y[2] 1MiB on d\nstream a on d\nthread t {\n  for i in 0..2 {\n"
                        "    alloc y[i]\n    a: kernel w writes y[i]\n    free y[i]\n  }\n}\nexpect race\n"),
    "two freed buffers": ("device d\nbuffer y[2] 1MiB on d\nstream a on d\nthread t {\n"
                          "  a: kernel k reads y[0] writes y[1]\n  free y[0]\n  free y[1]\n}\nexpect race\n"),
    "two freed buffers, two threads": ("device d\nbuffer y[2] 1MiB on d\nstream s on d\nstream u on d\n"
                                       "stream t on d\nevent z\nthread a {\n  s: record z\n  s: free y[0]\n"
                                       "  u: free y[1]\n}\nthread b {\n  t: wait z\n  t: kernel r reads y[0], y[1]\n"
                                       "}\nexpect race\n"),
}


@pytest.mark.parametrize("engine", [(), ("--explore-first", "0"), ("--exhaustive",)], ids=["default", "solver", "exhaustive"])
@pytest.mark.parametrize("case", sorted(ELEMENT_SPECS))
def test_expect_on_each_element_that_instances_of_one_finding_cover(run, tmp_path, case, engine):
    """One finding stands for every loop or thread-array instance of its statements; an
    expectation on any element one of them races on (or uses dead) is met, in every engine,
    but the finding passes only once every element it touches is expected, as the unrolled
    program's findings would each need their own line; one on an element none touches is
    not met."""
    import json

    kind = "use-after-free" if "freed" in case else "race"
    spec = tmp_path / "t.sched"
    for element, other in (("y[0]", "y[1]"), ("y[1]", "y[0]")):
        spec.write_text(ELEMENT_SPECS[case] + f"expect {kind} on {element}\n")
        status, out, _ = run("check", *engine, "--format", "json", spec)
        result = json.loads(out)["files"][0]
        assert status == 1 and not [d for d in result["diagnostics"] if d["code"] == "SP401"], result
        (failing,) = [f for f in result["findings"] if not f["expected"]]
        assert failing["detail"]["not_expected"] == [other], failing
    spec.write_text(ELEMENT_SPECS[case] + f"expect {kind} on y[0]\nexpect {kind} on y[1]\n")
    status, out, _ = run("check", *engine, "--format", "json", spec)
    assert status == 0, json.loads(out)["files"][0]["findings"]
    if case == "loop":  # an element no instance touches
        spec.write_text(ELEMENT_SPECS[case].replace("y[2]", "y[3]") + "expect race on y[2]\nexpect race on y[0]\n")
        assert run("check", *engine, spec)[0] == 1


CHOSEN_IN_A_LOOP = """device d
buffer x[2] 4KiB on d
stream s1 on d
stream s2 on d
event ev
thread main {
  for i in 0..2 {
    s1: kernel a writes x[i]
    choose {
      s1: record ev
      s2: wait ev
    } or {
      host skip
    }
    s2: kernel b reads x[i]
    sync all
  }
}
"""


@pytest.mark.parametrize("engine", [(), ("--exhaustive",)], ids=["default", "exhaustive"])
def test_a_finding_in_several_branch_combinations_names_every_element_they_race_on(run, tmp_path, engine):
    """Each iteration races where it skips the wait: the combinations race on x[0], on x[1]
    or on both, and the finding kept from the first names both elements."""
    import json

    spec = tmp_path / "t.sched"
    for expected, status in (("x[0]", 1), ("x[1]", 1), ("x[0]\nexpect race on x[1]", 0), ("x", 0)):
        spec.write_text(CHOSEN_IN_A_LOOP + f"expect race on {expected}\n")
        code, out, _ = run("check", *engine, "--format", "json", spec)
        result = json.loads(out)["files"][0]
        (race,) = result["findings"]
        assert sorted(race["elements"]) == ["x[0]", "x[1]"] and code == status, result
        assert not [d for d in result["diagnostics"] if d["code"] == "SP401"]


TENSORS_SHARING_A_BLOCK = """device gpu { runtime cuda }
tensor a 32MiB on gpu
tensor b 32MiB on gpu
stream s on gpu
stream s2 on gpu
thread main {
  s: alloc a
  s: kernel ka writes a
  sync s
  free a
  s: alloc b
  s: kernel kb writes b
  s2: kernel kb2 reads b
  sync all
}
"""


@pytest.mark.parametrize("tensor, met", [("b", True), ("a", False)])
def test_an_expectation_on_a_tensor_is_not_met_by_a_race_of_the_tensor_after_it_in_its_block(tensor, met):
    """`b` gets the block `a` had; the race is between two uses of `b`, which `expect race on
    a` does not ask for."""
    from checker.analyze import check_loaded

    report = check_loaded(loaded(TENSORS_SHARING_A_BLOCK + f"expect race on {tensor}\n"))
    unmet = [d for d in report.diagnostics if d.code is Code.SP401]
    assert report.passed is met and (not unmet) is met, (report.findings, report.diagnostics)


def test_an_element_only_undecided_instances_may_race_on_is_undecided_not_unmet():
    """A race finding names the elements of the instance pairs it decided; where the budget left
    some of the array's pairs undecided, `expect race on y[1]` is neither met nor refuted."""
    from checker.analyze import _left_undecided
    from checker.findings import Finding, FindingKind
    from checker.ir import Expectation, ExpectKind, Span

    span = Span(1, 1, 1, 2, 0, 1)
    race = Finding(FindingKind.RACE, "race", (0, 1), "y", "y[0]", 3, None, undecided=2)

    def on(buffer: str) -> Expectation:
        return Expectation(ExpectKind.RACE, span, buffer)

    assert _left_undecided(on("y[1]"), [race])
    assert not _left_undecided(on("y[1]"), [replace(race, undecided=0)])  # all decided: y[1] is not raced on
    assert not _left_undecided(on("z[1]"), [race]) and not _left_undecided(on("y"), [race])


def test_expect_race_on_an_element_out_of_range():
    error_of(ARRAY_RACE.replace("ELEMENT", "x[2]"), Code.SP013, 9, 18, "out of range")


# -- a comm's calls on several streams of a rank (NCCL) -----------------------------------------

SIDE = """device gpu[2] { runtime cuda }
buffer g[2] 4MiB on gpu
buffer h[2] 4MiB on gpu
stream main[2] on gpu
stream side[2] on gpu
comm world = { main }
thread rank[2] process {
  main[rank]: kernel fwd writes g[rank]
  main[rank]: allreduce world g[rank]
  side[rank]: allgather world h[rank] <- g[rank]
  side[rank]: kernel use reads h[rank]
  SYNC
  main[rank]: kernel next writes g[rank]
  sync all
}
"""


def test_a_call_on_another_stream_of_a_members_device_is_that_ranks():
    p = program(SIDE.replace("SYNC", "sync side[rank]"))
    calls = [s for s in p.statements if s.comm is not None]
    assert [(p.streams[s.stream].name, p.streams[s.rank_stream].name) for s in calls] == [
        ("main[0]", "main[0]"), ("side[0]", "main[0]"), ("main[1]", "main[1]"), ("side[1]", "main[1]")]
    # matched by each rank's issue order: the allreduces meet, then the allgathers
    assert sorted(sorted(p.groups[g].members) for g in {s.group for s in calls}) == [
        [calls[0].index, calls[2].index], [calls[1].index, calls[3].index]]
    # each call of the rank waits for the one before it (an implicit event), whatever its stream
    waits = [s for s in p.statements if s.op is Op.WAIT]
    records = [s for s in p.statements if s.op is Op.RECORD]
    assert len(waits) == len(records) == 4 and {s.event for s in waits} == {s.event for s in records}
    assert all(p.statements[w.index + 1].comm is not None and p.statements[w.index + 1].stream == w.stream
               for w in waits)


@pytest.mark.parametrize("engine", [(), ("--explore-first", "0"), ("--exhaustive",)], ids=["default", "solver", "exhaustive"])
def test_a_side_stream_call_waits_for_the_ranks_call_before_it(run, tmp_path, engine):
    """The allgather on `side` reads the allreduce's output with no event of the user's: NCCL
    orders the rank's calls. The kernel on `main` after the allreduce is not ordered with the
    allgather unless the host waits for `side` first."""
    import json

    spec = tmp_path / "t.sched"
    for sync, races in (("sync side[rank]", []), ("host nothing", [(10, 13)])):
        spec.write_text(SIDE.replace("SYNC", sync))
        status, out, _ = run("check", *engine, "--format", "json", spec)
        result = json.loads(out)["files"][0]
        assert result["status"] != "error", result["diagnostics"]
        found = sorted({tuple(sorted(loc["line"] for loc in f["locations"][:2])) for f in result["findings"]
                        if f["kind"] == "race"})
        assert found == races, result["findings"]
        assert not any("order#" in (f["help"] or "") for f in result["findings"])  # (no advice on implicit events)


def test_nccl_orders_the_calls_of_one_comm_not_of_two():
    """Two comms with the same members: the calls of A on a side stream are not ordered with
    those of B on the member stream, so they race (and cannot deadlock each other)."""
    from checker.analyze import check_loaded

    two = ("device d[2] { runtime cuda }\nstream m[2] on d\nstream sd[2] on d\ncomm A = { m }\ncomm B = { m }\n"
           "buffer x[2] 4KiB on d\nthread rank[2] process {\n  sd[rank]: allreduce A x[rank]\n"
           "  m[rank]: allreduce B x[rank]\n}\n")
    assert [f.kind.value for f in check_loaded(loaded(two)).findings] == ["race"]
    crossed = two.replace("thread rank[2] process {\n  sd[rank]: allreduce A x[rank]\n  m[rank]: allreduce B x[rank]\n}\n",
                          "thread r0 process {\n  sd[0]: allreduce A x[0]\n  m[0]: allreduce B x[0]\n}\n"
                          "thread r1 process {\n  m[1]: allreduce B x[1]\n  sd[1]: allreduce A x[1]\n}\n")
    assert "deadlock" not in [f.kind.value for f in check_loaded(loaded(crossed)).findings]


def test_a_rank_called_off_its_member_stream_by_another_process_is_warned():
    found = load_text(SIDE.replace("SYNC", "") + "thread other process {\n  side[0]: allreduce world h[0]\n}\n",
                      "t.sched").diagnostics
    assert [(d.code, d.primary_span.line) for d in found if d.code is Code.SP062] == [(Code.SP062, 17)]


def test_a_call_off_the_member_stream_is_refused_where_the_rank_is_unclear():
    inside = SIDE.replace("  side[rank]: allgather world h[rank] <- g[rank]",
                          "  group {\n    side[rank]: allgather world h[rank] <- g[rank]\n  }").replace("SYNC", "")
    error_of(inside, Code.SP021, 11, 5, "is not a member of comm `world`")
    cann = SIDE.replace(" { runtime cuda }", "").replace("SYNC", "")
    diagnostic = error_of(cann, Code.SP021, 10, 3, "is not a member of comm `world`")
    assert "HCCL" in diagnostic.help
    shared = SIDE.replace("comm world = { main }", "stream extra on gpu[1]\ncomm world = { main[0], main[1], side[1] }")
    error_of(shared.replace("side[rank]: allgather", "extra: allgather").replace("SYNC", ""), Code.SP021, 11, 3)
    # a root names a rank by its member stream
    rooted = SIDE.replace("side[rank]: allgather world h[rank] <- g[rank]",
                          "main[rank]: broadcast world root side[0] g[rank]").replace("SYNC", "")
    error_of(rooted, Code.SP021, 10, 36)


# -- a comm that allows one call in flight per rank (custom all-reduce, symmetric memory) -------

ONE = """device gpu[2]RUNTIME
buffer g[2] 4MiB on gpu
buffer h[2] 4MiB on gpu
stream main[2] on gpu
stream side[2] on gpu
event done[2]
comm car = { main } one_in_flight
thread rank[2] process {
  main[rank]: allreduce car g[rank] 1ms
  ORDER
  side[rank]: allreduce car h[rank] 1ms
  sync all
}
expect EXPECTATION
"""


@pytest.mark.parametrize("runtime", ["", " { runtime cuda }", " { runtime cann }"])
def test_a_one_in_flight_comm_is_called_on_any_stream_of_a_rank_and_orders_nothing(runtime):
    p = program(ONE.replace("RUNTIME", runtime).replace("ORDER", "").replace("EXPECTATION", "race on car"))
    (comm,) = p.comms
    assert [p.memories[m].name for m in comm.in_flight] == ["car.in_flight[0]", "car.in_flight[1]"]
    assert [(p.memories[m].device, p.memories[m].comm) for m in comm.in_flight] == [(0, 0), (1, 0)]
    calls = [s for s in p.statements if s.comm is not None]
    assert [(p.streams[s.stream].name, p.streams[s.rank_stream].name) for s in calls] == [
        ("main[0]", "main[0]"), ("side[0]", "main[0]"), ("main[1]", "main[1]"), ("side[1]", "main[1]")]
    # every call of a rank writes its rank's state; no implicit wait or record (NCCL's) is added
    assert [rw(p, s)[-1] for s in calls] == [("car.in_flight[0]", 0, 1, True)] * 2 + [("car.in_flight[1]", 0, 1, True)] * 2
    assert not any(s.op in (Op.WAIT, Op.RECORD) for s in p.statements)
    assert sorted(sorted(p.groups[g].members) for g in {s.group for s in calls}) == [
        [calls[0].index, calls[2].index], [calls[1].index, calls[3].index]]


@pytest.mark.parametrize("engine", [(), ("--explore-first", "0"), ("--exhaustive",)], ids=["default", "solver", "exhaustive"])
def test_two_calls_of_a_rank_in_flight_at_once_race_on_its_state(run, tmp_path, engine):
    import json

    spec = tmp_path / "t.sched"
    cases = (("", "race on car", 1), ("main[rank]: record done[rank]\n  side[rank]: wait done[rank]", "no race", 0))
    for order, expectation, raced in cases:
        spec.write_text(ONE.replace("RUNTIME", " { runtime cuda }").replace("ORDER", order)
                        .replace("EXPECTATION", expectation))
        status, out, _ = run("check", *engine, "--format", "json", spec)
        result = json.loads(out)["files"][0]
        assert result["passed"] and status == 0, result
        races = [f for f in result["findings"] if f["kind"] == "race"]
        # (one finding for the two ranks' instances of the pair)
        assert len(races) == raced and all(f["memory"] in ("car.in_flight[0]", "car.in_flight[1]") for f in races)
        assert all(f["buffer"] == "car" and "one_in_flight" in f["help"] for f in races)


def test_a_one_in_flight_comm_keeps_the_rank_clear():
    inside = ONE.replace("RUNTIME", "").replace("ORDER", "").replace("EXPECTATION", "no race").replace(
        "  side[rank]: allreduce car h[rank] 1ms", "  group {\n    side[rank]: allreduce car h[rank] 1ms\n  }")
    diagnostic = error_of(inside, Code.SP021, 12, 5, "is not a member of comm `car`")
    assert "one after another" not in diagnostic.help and "NCCL" not in diagnostic.help
    elsewhere = ONE.replace("RUNTIME", "").replace("ORDER", "").replace("EXPECTATION", "no race").replace(
        "stream side[2] on gpu", "device other\nstream side[2] on other")
    error_of(elsewhere, Code.SP021, 12, 3, "is not a member of comm `car`")
    # without the word it is an ordinary comm: HCCL's rule, a call off the member stream is refused
    error_of(ONE.replace(" one_in_flight", "").replace("RUNTIME", "").replace("ORDER", "")
             .replace("EXPECTATION", "no race"), Code.SP021, 11, 3)


def test_one_in_flight_parses_alike_in_both_parsers_and_round_trips_through_emit(tmp_path, run):
    from checker import ast, fastparse
    from checker.parse import parse_with_lark

    source = ONE.replace("RUNTIME", "").replace("ORDER", "").replace("EXPECTATION", "race on car")
    tree = parse_with_lark(source)
    assert fastparse.parse(source) == tree
    (comm,) = [d for d in tree.declarations if isinstance(d, ast.CommDecl)]
    assert comm.one_in_flight and (comm.span.end_line, comm.span.end_column) == (7, 34)
    assert program(source).comms[0].in_flight
    spec, out = tmp_path / "t.sched", tmp_path / "out.sched"
    spec.write_text(source)
    status, _, _ = run("optimize", spec, "--emit", out)
    emitted = out.read_text()
    assert status == 0 and "comm car = { main_0, main_1 } one_in_flight" in emitted and "buffer car_in_flight" not in emitted


# -- group ------------------------------------------------------------------------------------


def test_group_gives_each_execution_a_batch():
    p = program(RANKS + "thread t {\n"
                "  for i in 0..2 {\n"
                "    group {\n"
                "      c0: send w to c1 x0\n"
                "      c0: kernel k writes y0\n"
                "      group {\n        c0: recv w from c1 x0\n      }\n"
                "      c0: allreduce w x0\n"
                "    }\n"
                "  }\n"
                "  c0: allreduce w x0\n"
                "  group {\n    c0: kernel lone\n  }\n"
                "}\n")
    # The collectives of a group are enqueued at its end (ncclGroupEnd), the kernel where it stands.
    assert [(s.op.value, s.batch, s.span.line) for s in p.statements] == [
        ("kernel", None, 16), ("send", 0, 15), ("recv", 0, 18), ("allreduce", 0, 20),
        ("kernel", None, 16), ("send", 1, 15), ("recv", 1, 18), ("allreduce", 1, 20),
        ("allreduce", None, 23), ("kernel", None, 25),
    ]


def test_group_launches_comm_after_comm_in_the_order_they_joined():
    p = program(RANKS + "comm v = { c0, c1 }\nevent e\n"   # 12-13
                "thread t {\n"
                "  group {\n"
                "    c0: allreduce v x0\n"                  # 16
                "    c0: allreduce w y0\n"
                "    c0: record e\n"
                "    c0: allgather v y0 <- x0\n"            # 19
                "  }\n"
                "}\n")
    # The record is enqueued where it stands; comm v's calls (one batch) before comm w's.
    assert [(s.op.value, s.batch, s.span.line) for s in p.statements] == [
        ("record", None, 18), ("allreduce", 0, 16), ("allgather", 0, 19), ("allreduce", 1, 17),
    ]


# -- choose -----------------------------------------------------------------------------------

CHOICE = "device d\nstream s on d\nbuffer x 1MiB on d\n"


def test_no_choose_one_program():
    result = loaded(CHOICE + "thread t {\n  s: kernel k\n}\n")
    assert result.variants == (result.program,) and result.program.variant == ""


def test_choose_lowers_every_combination():
    result = loaded(CHOICE + "thread t {\n"                          # 4
                    "  for step in 0..2 {\n"                         # 5
                    "    choose { s: kernel a } or { s: kernel b } or { }\n"   # 6
                    "  }\n"
                    "  choose {\n    s: kernel c\n  } or {\n    s: kernel d\n  }\n"  # 8
                    "}\n")
    assert len(result.variants) == 3 * 3 * 2
    assert result.variants[0] is result.program
    assert result.program.variant == "line 6 (step=0): branch 1 of 3; line 6 (step=1): branch 1 of 3; line 8: branch 1 of 2"
    assert result.variants[-1].variant == "line 6 (step=0): branch 3 of 3; line 6 (step=1): branch 3 of 3; line 8: branch 2 of 2"
    names = [tuple(s.name for s in p.statements) for p in result.variants]
    assert names[:4] == [("a", "a", "c"), ("a", "a", "d"), ("a", "b", "c"), ("a", "b", "d")]
    assert names[-1] == ("d",) and names.count(("b", "d")) == 2


def test_nested_choose_and_thread_arrays():
    result = loaded(CHOICE + "thread r[2] {\n"
                    "  choose {\n    choose { s: kernel a } or { s: kernel b }\n  } or {\n    s: kernel c\n  }\n"
                    "}\n")
    # per thread: a, b or c; two threads
    assert len(result.variants) == 9
    assert result.variants[1].variant == "line 5 (r=0): branch 1 of 2; line 6 (r=0): branch 1 of 2; line 5 (r=1): branch 1 of 2; line 6 (r=1): branch 2 of 2"
    assert result.variants[2].variant == "line 5 (r=0): branch 1 of 2; line 6 (r=0): branch 1 of 2; line 5 (r=1): branch 2 of 2"


def test_too_many_combinations():
    diagnostic = error_of(CHOICE + "thread t {\n  s: kernel k\n  for i in 0..7 {\n"
                          "    choose { s: kernel a } or { s: kernel b }\n  }\n}\n",
                          Code.SP026, 7, 5, f"128 branch combinations exceed the limit of {MAX_VARIANTS}")
    assert diagnostic.annotations[0].label == "the first `choose`"


def test_huge_number_of_combinations_is_refused_quickly():
    error_of(CHOICE + "thread t {\n  for i in 0..100000 {\n    choose { s: kernel a } or { }\n  }\n}\n",
             Code.SP026, 6, 5, "more than 1,000,000 branch combinations")


def test_combinations_are_limited_together():
    """Each of the 4 programs has 302 statements: within a limit of 1,000 alone, not together (1,208)."""
    source = CHOICE + ("thread t {\n  choose { s: kernel a } or { s: kernel b }\n"
                       "  choose { s: kernel c } or { s: kernel d }\n"
                       "  for i in 0..300 {\n    s: kernel k writes x\n  }\n}\n")
    assert len(loaded(source, max_statements=1_300).variants) == 4
    result = load_text(source, "t.sched", max_statements=1_000)
    (diagnostic,) = result.diagnostics
    assert diagnostic.code is Code.SP018 and (diagnostic.primary_span.line, diagnostic.primary_span.column) == (5, 3)
    assert "its 4 programs (branch combinations) together unroll past the limit of 1,000" in diagnostic.message


def test_variants_reach_the_frontend():
    result = load_text(CHOICE + "thread t {\n  choose { } or { }\n}\n")
    assert len(result.variants) == 2 and result.variants[0] is result.program
    assert load_text("device d\nstream q on nowhere\n").variants == ()


# -- runtime dialect ----------------------------------------------------------------------------

CUDA = (
    "device g { runtime cuda }\n"            # 1
    "device n { runtime cann }\n"            # 2
    "buffer page 1MiB on host\n"             # 3
    "buffer pin 1MiB on host pinned\n"       # 4
    "buffer x 1MiB on g\n"                   # 5
    "buffer y 1MiB on n\n"                   # 6
    "stream s on g\n"                        # 7
    "stream side on g nonblocking\n"         # 8
    "stream null on g legacy\n"              # 9
    "stream t on n\n"                        # 10
    "stream lt on n legacy\n"                # 11
)


def test_runtime_of_devices():
    p = program(CUDA + "device plain\n")
    assert [d.runtime for d in p.devices] == [Runtime.CUDA, Runtime.CANN, Runtime.CANN]


@pytest.mark.parametrize("items,column,message", [
    ("runtime rocm", 20, "unknown runtime `rocm`"),
    ("runtime cuda runtime cann", 25, "`runtime` is given twice"),
])
def test_runtime_errors(items, column, message):
    error_of(f"device g {{ {items} }}\n", Code.SP024, 1, column, message)


def test_cuda_pageable_copy_lowers_to_two_variants():
    result = loaded(CUDA + "thread main {\n  s: copy x <- page[0:4KiB] 1ms\n  s: copy page <- x\n}\n")
    staged, synced = result.variants
    assert (staged.variant, synced.variant) == (CUDA_STAGED, CUDA_SYNCED) and staged is result.program
    stage, copy, back = staged.statements
    assert (stage.op, stage.stream, stage.name, stage.duration) == (Op.HOST, None, "stage", 0)
    assert stage.form == "copy x <- page[0:4KiB] (staging the pageable source)"
    assert rw(staged, stage) == [("page", 0, 4096, False)]
    assert (copy.op, copy.stream, copy.blocking, copy.copy, copy.duration, copy.form) == (
        Op.COPY, 0, False, CopyKind.H2D, 10**6, "copy x <- page[0:4KiB]")
    staging = staged.memories[copy.accesses[0].memory]
    assert (staging.name, staging.size, staging.on_host, staging.pinned) == ("page.staged#1", 4096, True, True)
    assert rw(staged, copy) == [("page.staged#1", 0, 4096, False), ("x", 0, MiB, True)]
    # device to pageable host: still blocking, as under cann
    assert (back.op, back.blocking, back.copy, back.form) == (Op.COPY, True, CopyKind.D2H, "")
    sync, stage2, copy2, back2 = synced.statements
    # (blocking `s`: the driver's sync of it waits for the legacy stream's earlier work too, as `sync s`)
    assert (sync.op, sync.sync, sync.target, sync.streams) == (Op.SYNC, SyncKind.STREAMS, 0, (0, 2))
    assert sync.form == "copy x <- page[0:4KiB] (the driver synchronizes the stream)"
    assert (stage2.form, copy2.blocking, back2.blocking) == (stage.form, False, True)
    assert stage.origin != copy.origin


def test_pageable_copies_stay_blocking_under_cann_and_variants_multiply():
    result = loaded(CUDA + "thread main {\n  t: copy y <- page\n  s: copy x <- pin\n"
                    "  choose { s: copy x <- page } or { }\n}\n")
    assert [p.variant for p in result.variants] == [
        f"line 15: branch 1 of 2; {CUDA_STAGED}", f"line 15: branch 1 of 2; {CUDA_SYNCED}", "line 15: branch 2 of 2"]
    first, pinned = result.variants[2].statements
    assert (first.blocking, first.stream, pinned.blocking) == (True, 3, False)


def test_sync_stream_sets():
    p = program(CUDA + "thread main {\n  sync s\n  sync null\n  sync lt\n  query null\n  sync g\n"
                "  sync all\n  s: record e\n  sync e\n}\nevent e\n")
    rows = [(s.sync, s.target, s.streams, s.form) for s in p.statements if s.op is Op.SYNC]
    assert rows == [
        (SyncKind.STREAMS, 0, (0, 2), "sync s"),        # the blocking `s` and the legacy stream
        (SyncKind.STREAMS, 2, (2, 0), "sync null"),     # the legacy stream and the blocking `s`
        (SyncKind.STREAM, 4, (4,), ""),                 # legacy under cann: the contract's rule
        (SyncKind.STREAMS, 2, (2, 0), "query null"),
        (SyncKind.DEVICE, 0, (0,), ""),  # (the streams some task is on: the others are always empty)
        (SyncKind.ALL, None, (0,), ""),
        (SyncKind.EVENT, 0, (), ""),
    ]
    used = program(CUDA + "thread main {\n  sync g\n  sync all\n  lt: kernel k\n  null: kernel k\n"
                   "  s: kernel k\n}\n")
    assert [s.streams for s in used.statements if s.op is Op.SYNC] == [(0, 2), (0, 2, 4)]
    # No stream used: one of them stands for all (an empty tuple means every stream).
    idle = program(CUDA + "thread main {\n  sync g\n  sync all\n}\n")
    assert [idle.synced_streams(s) for s in idle.statements] == [(0,), (0,)]


def test_cuda_free_synchronizes_the_device_and_malloc_is_checked_both_ways():
    result = loaded(CUDA.replace("buffer y", "buffer z 1MiB on g\nbuffer y") + "thread main {\n  s: free x\n  free x\n"
                    "  free y\n  free page\n  alloc x\n  alloc y\n  s: alloc z\n  free z\n}\n")
    free, synced = result.variants
    assert (free.variant, synced.variant) == (CUDA_MALLOC_FREE, CUDA_MALLOC_SYNCED) and free is result.program
    rows = [(s.op, s.stream, s.sync, s.target, s.memory, s.form) for s in synced.statements]
    assert rows == [
        (Op.FREE, 0, None, None, 2, ""),
        (Op.SYNC, None, SyncKind.DEVICE, 0, None, "free x (cudaFree synchronizes the device)"),
        (Op.FREE, None, None, None, 2, ""),
        (Op.FREE, None, None, None, 4, ""),     # cann: no implicit synchronization
        (Op.FREE, None, None, None, 0, ""),     # host memory
        (Op.SYNC, None, SyncKind.DEVICE, 0, None, "alloc x (cudaMalloc synchronizes the device)"),
        (Op.ALLOC, None, None, None, 2, ""),
        (Op.ALLOC, None, None, None, 4, ""),
        (Op.ALLOC, 0, None, None, 3, ""),       # cudaMallocAsync is stream-ordered
        (Op.FREE, None, None, None, 3, ""),     # and cudaFree of its memory does not synchronize
    ]
    assert synced.statements[1].streams == (0,)  # (the device's streams some task is on)
    assert synced.statements[5].streams == (0,)
    # The other program: the same, but cudaMalloc waits for nothing (the free still syncs).
    assert [(s.op, s.form) for s in free.statements] == [row[::5] for row in rows[:5] + rows[6:]]


def test_a_free_marked_nosync_waits_for_nothing_in_both_parsers():
    # cuMemUnmap/cuMemRelease: the contract's free under every runtime, device or pinned memory
    from checker import fastparse
    from checker.parse import parse_with_lark

    source = CUDA + "thread main {\n  s: kernel k writes x, pin\n  free x nosync\n  free pin nosync\n  free y nosync\n}\n"
    assert fastparse.parse(source) == parse_with_lark(source)
    assert [(s.op, s.memory) for s in program(source).statements] == [(Op.KERNEL, None), (Op.FREE, 2), (Op.FREE, 1),
                                                                      (Op.FREE, 3)]
    from checker.analyze import check_loaded

    report = check_loaded(loaded(source.replace("  free pin nosync\n", "")))
    assert {(f.kind.value, f.buffer) for f in report.findings} >= {("race", "x"), ("use-after-free", "x")}
    assert [s.op for s in program(source.replace(" nosync", "")).statements][:2] == [Op.KERNEL, Op.SYNC]


def test_an_alloc_marked_nosync_is_a_pool_hand_out_that_waits_for_nothing_in_both_parsers():
    # CuPy's or RMM's pool: no cudaMalloc, so no device sync and no "when cudaMalloc synchronizes" variant
    from checker import fastparse
    from checker.frontend import load_text as load
    from checker.parse import parse_with_lark

    source = CUDA + "thread main {\n  s: kernel k writes x\n  alloc x nosync\n  alloc pin nosync\n}\n"
    assert fastparse.parse(source) == parse_with_lark(source)
    result = load(source, "t.sched")
    assert not [d for d in result.diagnostics if d.severity.value == "error"] and len(result.variants) == 1
    assert [(s.op, s.memory, s.form) for s in result.program.statements] == [
        (Op.KERNEL, None, ""), (Op.ALLOC, 2, "alloc x nosync"), (Op.ALLOC, 1, "alloc pin nosync")]
    plain = load(source.replace(" nosync", ""), "t.sched")
    assert len(plain.variants) > 1 and any(Op.SYNC in {s.op for s in v.statements} for v in plain.variants)


def test_nosync_on_a_tensor_free_is_sp012_since_del_never_synchronizes():
    source = ("device d\nstream s on d\ntensor t 1MiB on d\n"
              "thread main {\n  s: alloc t\n  s: kernel k writes t\n  free t nosync\n}\n")
    (diagnostic,) = load_text(source, "t.sched").diagnostics
    assert (diagnostic.code, diagnostic.primary_span.line, diagnostic.primary_span.column) == (Code.SP012, 7, 8)
    assert diagnostic.help.startswith("write `free t`: a tensor's free is PyTorch's `del`")
    assert not load_text(source.replace(" nosync", ""), "t.sched").diagnostics


def test_the_driver_variants_cover_pageable_copies_and_malloc_together():
    """One pair of programs, the driver synchronizing at every call that may or at none; a
    cann device's allocation, or a stream `alloc`, makes no variant."""
    both = loaded(CUDA + "thread main {\n  s: copy x <- page\n  alloc x\n}\n")
    assert [p.variant for p in both.variants] == [f"{CUDA_STAGED}, {CUDA_MALLOC_FREE}",
                                                  f"{CUDA_SYNCED}, {CUDA_MALLOC_SYNCED}"]
    assert [s.op for s in both.variants[0].statements] == [Op.HOST, Op.COPY, Op.ALLOC]
    assert [s.op for s in both.variants[1].statements] == [Op.SYNC, Op.HOST, Op.COPY, Op.SYNC, Op.ALLOC]
    assert len(loaded(CUDA + "thread main {\n  alloc y\n  s: alloc x\n}\n").variants) == 1


def test_pinned_host_memory_under_cuda_free_synchronizes_and_alloc_is_checked_both_ways():
    """cudaFreeHost waits for every CUDA device (one `sync DEVICE` each when a cann device is
    declared too, a `sync all` otherwise); cudaMallocHost only in the synchronizing program."""
    mixed = loaded(CUDA + "thread main {\n  alloc pin\n  free pin\n  free page\n}\n")
    free, synced = mixed.variants
    assert (free.variant, synced.variant) == (CUDA_HOST_ALLOC_FREE, CUDA_HOST_ALLOC_SYNCED)
    device_sync = (Op.SYNC, SyncKind.DEVICE, 0, "free pin (cudaFreeHost synchronizes every device)")
    rows = [(s.op, s.sync, s.target, s.form) for s in free.statements]
    assert rows == [(Op.ALLOC, None, None, ""), device_sync, (Op.FREE, None, None, ""), (Op.FREE, None, None, "")]
    rows = [(s.op, s.sync, s.target, s.form) for s in synced.statements]
    assert rows[0] == (Op.SYNC, SyncKind.DEVICE, 0, "alloc pin (cudaMallocHost synchronizes every device)")
    assert rows[1:] == [(Op.ALLOC, None, None, ""), device_sync, (Op.FREE, None, None, ""), (Op.FREE, None, None, "")]
    only_cuda = program("device g[2] { runtime cuda }\nbuffer pin 1MiB on host pinned\nstream s[2] on g\n"
                        "thread main {\n  s[0]: kernel k\n  s[1]: kernel k\n  free pin\n}\n")
    sync = only_cuda.statements[2]
    assert (sync.op, sync.sync, sync.streams) == (Op.SYNC, SyncKind.ALL, (0, 1))
    cann = loaded("device n\nbuffer pin 1MiB on host pinned\nthread main {\n  alloc pin\n  free pin\n}\n")
    assert [s.op for s in cann.program.statements] == [Op.ALLOC, Op.FREE] and len(cann.variants) == 1


def test_whether_a_cuda_free_synchronizes_follows_the_allocation_it_frees():
    """cudaFree synchronizes for cudaMalloc memory, not for cudaMallocAsync memory: decided by
    the latest `alloc` of that memory before the free, element by element."""
    p = program(CUDA + "buffer z[2] 1MiB on g\nthread main {\n  s: alloc z[0]\n  alloc z[1]\n  free z[1]\n"
                "  free z[0]\n  alloc x\n  free x\n  s: alloc x\n  free x\n}\n")
    frees = [(s.memory, p.statements[s.index - 1].op is Op.SYNC) for s in p.statements
             if s.op is Op.FREE]
    z0, z1, x = (next(m.index for m in p.memories if m.name == name) for name in ("z[0]", "z[1]", "x"))
    assert frees == [(z1, True), (z0, False), (x, True), (x, False)]


def test_default_stream_by_name():
    p = program(CUDA + "device gs[2] { runtime cuda }\ncomm c = { gs[0].default, gs[1].default }\n"
                "thread main {\n  g.default: kernel k\n  n.default: kernel k\n  sync n.default\n"
                "  sync g.default\n  gs[1].default: allreduce c x\n  gs[0].default: allreduce c x\n}\n")
    names = [p.streams[s.stream].name if s.stream is not None else None for s in p.statements]
    # `g` declares a legacy stream (`null`): that is its default stream; `n` (cann) gets an
    # implicit one that the legacy rules do not touch, as `memcpy` uses.
    assert names == ["null", "n.default", None, None, "gs[1].default", "gs[0].default"]
    sync_n, sync_g = p.statements[2:4]
    assert (sync_n.sync, p.streams[sync_n.target].name, sync_n.streams) == (SyncKind.STREAM, "n.default", (sync_n.target,))
    assert (sync_g.sync, sync_g.streams) == (SyncKind.STREAMS, (2, 0))   # the legacy marker covers `s`
    n_default = next(s for s in p.streams if s.name == "n.default")
    assert n_default.mode is StreamMode.NONBLOCKING
    assert [p.streams[m].name for m in p.comms[0].members] == ["gs[0].default", "gs[1].default"]


@pytest.mark.parametrize("statement, code, column, message", [
    ("sync g.defaults", Code.SP010, 10, "a device has no `defaults`"),
    ("sync s.default", Code.SP012, 8, "`s` is a stream, not a device"),
    ("s: record g.default", Code.SP012, 13, "`g.default` is a stream, not an event"),
    ("sync nowhere.default", Code.SP010, 8, "`nowhere` is not declared"),
])
def test_default_stream_errors(statement, code, column, message):
    error_of(CUDA + f"event e\nthread main {{\n  {statement}\n}}\n", code, 14, column, message)


# -- implicitly synchronizing calls ------------------------------------------------------------


def test_memcpy_runs_on_the_default_stream_under_cuda_and_on_its_own_under_cann():
    p = program(CUDA + "device bare { runtime cuda queues 2 }\nbuffer z 1MiB on bare\n"
                "thread main {\n  memcpy x <- page 1ms\n  memcpy page <- y\n  memcpy y <- x\n"
                "  memcpy z <- pin\n  memcpy y <- pin\n}\n")
    # CUDA, pageable to device: a sync of the default stream (a legacy-stream marker: the
    # blocking stream `s` too), the source staged on the host, then a copy that may still run.
    sync, stage = p.statements[:2]
    assert (sync.op, sync.sync, sync.streams, sync.form) == (
        Op.SYNC, SyncKind.STREAMS, (2, 0), "memcpy x <- page (the driver synchronizes the stream)")
    assert (stage.op, stage.stream, rw(p, stage)) == (Op.HOST, None, [("page", 0, MiB, False)])
    rows = [(s.op, p.streams[s.stream].name, s.device, s.copy, s.blocking, s.form) for s in p.statements[2:]]
    assert rows == [
        (Op.COPY, "null", 0, CopyKind.H2D, False, "memcpy x <- page"),
        # CANN: aclrtMemcpy copies "at once, with no implicit device or stream synchronization"
        (Op.COPY, "n.calls@main", 1, CopyKind.D2H, True, "memcpy page <- y"),
        (Op.COPY, "n.calls@main", 1, CopyKind.D2D, True, "memcpy y <- x"),
        (Op.COPY, "bare.default", 2, CopyKind.H2D, True, "memcpy z <- pin"),
        (Op.COPY, "n.calls@main", 1, CopyKind.H2D, True, "memcpy y <- pin"),
    ]
    n_calls, bare_default = p.streams[5], p.streams[6]
    assert (n_calls.mode, n_calls.device, n_calls.queue) == (StreamMode.NONBLOCKING, 1, None)
    assert (bare_default.mode, bare_default.queue) == (StreamMode.LEGACY, 0)
    assert p.statements[2].duration == 10**6 and rw(p, p.statements[2]) == [("page.staged#1", 0, MiB, False), ("x", 0, MiB, True)]


def test_cuda_memcpy_device_to_device_and_memset_return_at_once():
    # CUDA, "API synchronization behavior": no host-side synchronization device to device, and
    # memsets of device memory are asynchronous with respect to the host; cann keeps blocking.
    p = program(CUDA + "buffer x2 1MiB on g\nthread main {\n  memcpy x2 <- x\n  memset x\n  memcpy page <- x\n"
                "  memcpy x <- pin\n  memcpy y <- y\n  memset y\n}\n")
    rows = [(s.op, p.streams[s.stream].name, s.copy, s.blocking) for s in p.statements]
    assert rows == [
        (Op.COPY, "null", CopyKind.D2D, False),
        (Op.MEMSET, "null", None, False),
        (Op.COPY, "null", CopyKind.D2H, True),
        (Op.COPY, "null", CopyKind.H2D, True),
        (Op.COPY, "n.calls@main", CopyKind.D2D, True),
        (Op.MEMSET, "n.calls@main", None, True),
    ]


def test_memcpy_between_host_buffers():
    error_of(CUDA + "thread main {\n  memcpy page <- pin\n}\n", Code.SP016, 13, 3, "two host buffers")


def test_memsets():
    p = program(CUDA + "thread main {\n  memset y 2us\n  s: memset x[0:1KiB] 1ms\n}\n")
    host, task = p.statements
    assert (host.op, p.streams[host.stream].name, host.blocking, host.engine, host.form, host.duration) == (
        Op.MEMSET, "n.calls@main", True, Engine.COMPUTE, "memset y", 2000)
    assert rw(p, host) == [("y", 0, MiB, True)]
    assert (task.op, task.stream, task.blocking, task.engine, task.duration) == (Op.MEMSET, 0, False, Engine.COMPUTE, 10**6)
    assert rw(p, task) == [("x", 0, 1024, True)]
    error_of(CUDA + "thread main {\n  s: memset page\n}\n", Code.SP012, 13, 13, "`page` is host memory")
    # on the host, pinned host memory: with one CUDA device, a call on its default stream that
    # the thread waits for ("fully synchronous"); with none (CANN) or several (the current
    # device is not known), the thread writes it itself, ordered with no stream. Pageable
    # memory is no memset target
    call = program(CUDA + "thread main {\n  memset pin 1us\n}\n")
    task = call.statements[0]
    assert (task.op, call.streams[task.stream].name, task.blocking, task.form, task.duration) == (
        Op.MEMSET, "null", True, "memset pin", 1000)  # (g's legacy stream, declared `null`)
    for devices in ("device g { runtime cann }\n", "device g { runtime cuda }\ndevice h { runtime cuda }\n"):
        host = program(devices + "buffer pin 1MiB on host pinned\nthread main {\n  memset pin 1us\n}\n").statements[0]
        assert (host.op, host.stream, host.form, host.duration) == (Op.HOST, None, "memset pin", 1000)
    error_of(CUDA + "thread main {\n  memset page\n}\n", Code.SP012, 13, 10, "`page` is host memory; `memset` needs device or pinned host memory")
    stream_form = error_of(CUDA + "thread main {\n  s: memset page\n}\n", Code.SP012, 13, 13,
                           "`page` is host memory; `memset` needs device or pinned host memory")
    assert "declare the host buffer `pinned`" in stream_form.help  # (as `s: memset pin` below is accepted)
    pinned = program(CUDA + "thread main {\n  s: memset pin 1us\n}\n").statements[0]  # reached through the device
    assert (pinned.op, pinned.stream, pinned.blocking) == (Op.MEMSET, 0, False)


def test_sync_of_a_notify_is_told_what_sync_takes():
    wrong = error_of("device d\nstream s on d\nnotify n\nthread t {\n  sync n\n}\n", Code.SP012, 5, 8)
    assert wrong.help.endswith("`wait` takes an event; `sync` an event, a stream or a device"), wrong.help


def test_item_reads_into_fresh_host_memory():
    p = program(CUDA + "thread main {\n  for i in 0..2 {\n    s: item x[0:8B]\n  }\n}\n")
    first, second = p.statements
    assert (first.op, first.copy, first.blocking, first.form) == (Op.COPY, CopyKind.D2H, True, "item x[0:8B]")
    assert rw(p, first) == [("x", 0, 8, False), ("item#1", 0, 8, True)]
    assert rw(p, second)[1] == ("item#2", 0, 8, True)
    assert not p.memories[first.accesses[1].memory].pinned


def test_query_is_a_sync():
    p = program(CUDA + "event e\nthread main {\n  query e\n  query t\n}\n")
    rows = [(s.op, s.sync, s.target, s.form) for s in p.statements]
    assert rows == [(Op.SYNC, SyncKind.EVENT, 0, "query e"), (Op.SYNC, SyncKind.STREAM, 3, "query t")]
    error_of(CUDA + "thread main {\n  query g\n}\n", Code.SP012, 13, 9, "not a stream or an event")


def test_wait_stream_is_a_record_and_a_wait():
    p = program(CUDA + "thread main {\n  for i in 0..2 {\n    side: wait_stream s\n  }\n}\nthread other {\n"
                "  side: wait_stream s\n}\n")
    rows = [(s.op, s.stream, s.event, s.thread, s.form) for s in p.statements]
    assert rows == [
        (Op.RECORD, 0, 0, 0, "record (for side: wait_stream s)"), (Op.WAIT, 1, 0, 0, "wait_stream s"),
        (Op.RECORD, 0, 0, 0, "record (for side: wait_stream s)"), (Op.WAIT, 1, 0, 0, "wait_stream s"),
        (Op.RECORD, 0, 1, 1, "record (for side: wait_stream s)"), (Op.WAIT, 1, 1, 1, "wait_stream s"),
    ]
    assert [(e.name, e.flag) for e in p.events] == [("wait_stream#1", False), ("wait_stream#2", False)]


# -- caching-allocator tensors -------------------------------------------------------------------

TENSORS = (
    "device g\n"                       # 1
    "device h\n"                       # 2
    "stream s on g\n"                  # 3
    "stream side on g\n"               # 4
    "stream other on h\n"              # 5
    "tensor a 4MiB on g\n"             # 6
    "tensor b 2MiB on g\n"             # 7
    "tensor c 1MiB on g\n"             # 8
    "tensor acts[2] 1MiB on g\n"       # 9
)


def tensor_program(*lines, threads: str = ""):
    return program(TENSORS + "thread main {\n" + "".join(f"  {line}\n" for line in lines) + "}\n" + threads)


def test_alloc_and_free_are_launch_order_host_statements():
    p = tensor_program("s: alloc a", "s: kernel k writes a[1MiB:2MiB]", "free a")
    alloc, kernel, free = p.statements
    assert (alloc.op, alloc.stream, alloc.accesses, alloc.launch_only, alloc.form) == (
        Op.ALLOC, None, (), True, "alloc a on s")
    assert (free.op, free.stream, free.accesses, free.launch_only, free.memory) == (Op.FREE, None, (), True, alloc.memory)
    block = p.memories[alloc.memory]
    assert (block.name, block.buffer, block.size, block.device, block.owners) == ("a", "a", 4 * MiB, 0, ("a",))
    assert rw(p, kernel) == [("a", MiB, 2 * MiB, True)]


def test_best_fit_reuse_most_recent_first_and_fresh_blocks():
    p = tensor_program(
        "s: alloc a", "s: alloc b", "s: alloc a",
        "free b", "free a",
        "s: alloc b",        # fits b's block (2 MiB) and the second a's (4 MiB): the smaller
        "s: alloc a",        # the second a's block is all that is left
        "s: alloc b",        # nothing left: a fresh block `b#2`
    )
    allocs = [s for s in p.statements if s.op is Op.ALLOC]
    names = [p.memories[s.memory].name for s in allocs]
    assert names == ["a", "b", "a#2", "b", "a#2", "b#2"]


def test_small_and_large_requests_have_separate_pools():
    # c and acts are 1 MiB (PyTorch's small pool: at most 1 MiB), a and b larger.
    p = tensor_program(
        "s: alloc a", "s: alloc b", "s: alloc c",
        "free b", "free a",
        "s: alloc c",        # the large pool has b's and a's blocks, the small pool nothing
        "free c",            # frees the second c: the small pool has its block
        "s: alloc acts[0]",  # the second c's block
        "s: alloc acts[1]",  # the small pool is empty again
        "s: alloc a",        # a's block, not b's (too small)
    )
    allocs = [s for s in p.statements if s.op is Op.ALLOC]
    names = [p.memories[s.memory].name for s in allocs]
    assert names == ["a", "b", "c", "c#2", "c#2", "acts[1]", "a"]
    owners = {m.name: m.owners for m in p.memories}
    assert owners == {"a": ("a",), "b": ("b",), "c": ("c",), "c#2": ("c", "acts"), "acts[1]": ("acts",)}


def test_requests_are_rounded_up_to_512_bytes():
    p = program("device g\nstream s on g\ntensor odd 1000B on g\ntensor kib 1KiB on g\n"
                "tensor more 1025B on g\nthread main {\n  s: alloc odd\n  free odd\n  s: alloc kib\n"
                "  free kib\n  s: alloc more\n}\n")
    allocs = [s for s in p.statements if s.op is Op.ALLOC]
    # 1000 bytes take a 1 KiB block, which serves `kib` whole and the first KiB of `more`'s 1.5 KiB
    assert [[p.memories[m].name for m in s.lifetime_memories] for s in allocs] == [
        ["odd"], ["odd"], ["odd", "more[1KiB:1536]"]]
    assert [m.size for m in p.memories] == [1024, 512]


def test_ties_go_to_the_lowest_address():
    p = program("device g\nstream s on g\ntensor t[4] 512B on g\ntensor x 512B on g\nthread main {\n"
                "  s: alloc t\n  free t[0]\n  free t[2]\n  s: alloc x\n}\n")
    # t[0] and t[2] are free 512-byte blocks apart (t[1] between them): x takes the lower one
    assert p.memories[p.statements[-1].memory].name == "t[0]"


def test_a_freed_block_is_split_between_later_tensors():
    p = tensor_program("s: alloc a", "free a", "s: alloc b", "s: alloc b", "s: kernel k reads a")
    first, second = p.statements[2], p.statements[3]
    assert [p.memories[m].name for m in first.lifetime_memories] == ["a[0:2MiB]"]
    assert [p.memories[m].name for m in second.lifetime_memories] == ["a[2MiB:4MiB]"]
    assert rw(p, p.statements[-1]) == [("a[0:2MiB]", 0, 2 * MiB, False), ("a[2MiB:4MiB]", 0, 2 * MiB, False)]


def test_freed_neighbours_merge_for_a_larger_tensor():
    p = tensor_program("s: alloc c", "s: alloc c", "free c", "s: alloc b")
    # c's two 1 MiB blocks fill one small segment; `free c` frees the second only, so b (2 MiB,
    # large pool) gets a segment of its own
    assert [p.memories[m].name for m in p.statements[-1].lifetime_memories] == ["b"]
    p = program("device g\nstream s on g\ntensor h[2] 1KiB on g\ntensor w 2KiB on g\nthread main {\n"
                "  s: alloc h\n  free h\n  s: alloc w\n  s: kernel k writes w\n}\n")
    alloc = p.statements[-2]
    assert [p.memories[m].name for m in alloc.lifetime_memories] == ["h[0]", "h[1]"]
    assert alloc.pieces == alloc.lifetime_memories and alloc.memory == alloc.pieces[0]
    assert rw(p, p.statements[-1]) == [("h[0]", 0, 1024, True), ("h[1]", 0, 1024, True)]
    assert [p.memories[m].owners for m in alloc.pieces] == [("h", "w"), ("h", "w")]


def test_pools_are_per_stream():
    p = tensor_program("s: alloc a", "free a", "side: alloc a")
    assert [p.memories[s.memory].name for s in p.statements if s.op is Op.ALLOC] == ["a", "a#2"]


def test_record_stream_keeps_a_block_out_of_the_pool():
    p = tensor_program("s: alloc a", "side: record_stream a", "free a", "s: alloc a")
    assert [p.memories[s.memory].name for s in p.statements if s.op is Op.ALLOC] == ["a", "a#2"]
    assert [s.op for s in p.statements] == [Op.ALLOC, Op.FREE, Op.ALLOC]
    # record_stream on the allocation stream itself changes nothing (as in PyTorch)
    p = tensor_program("s: alloc a", "s: record_stream a", "free a", "s: alloc a")
    assert [p.memories[s.memory].name for s in p.statements if s.op is Op.ALLOC] == ["a", "a"]


def test_uses_after_free_name_the_freed_block():
    p = tensor_program("s: alloc a", "free a", "s: alloc b", "s: kernel late reads a")
    assert rw(p, p.statements[-1]) == [("a[0:2MiB]", 0, 2 * MiB, False), ("a[2MiB:4MiB]", 0, 2 * MiB, False)]
    assert p.memories[p.statements[2].memory].name == "a[0:2MiB]"  # b reuses the first half of a's block


def test_whole_tensor_arrays():
    p = tensor_program("s: alloc acts", "s: kernel k reads acts", "free acts")
    assert [(s.op, p.memories[s.memory].name if s.memory is not None else None) for s in p.statements] == [
        (Op.ALLOC, "acts[0]"), (Op.ALLOC, "acts[1]"), (Op.KERNEL, None), (Op.FREE, "acts[0]"), (Op.FREE, "acts[1]")]
    assert rw(p, p.statements[2]) == [("acts[0]", 0, MiB, False), ("acts[1]", 0, MiB, False)]


def test_a_tensor_allocated_once_is_shared():
    p = tensor_program("s: alloc a", threads="thread reader {\n  s: kernel k reads a\n  free a\n}\n"
                       "thread third {\n  s: alloc c\n}\n")
    assert rw(p, p.statements[1]) == [("a", 0, 4 * MiB, False)]
    assert p.statements[2].memory == p.statements[0].memory


def test_freed_by_another_thread_is_never_reused():
    p = tensor_program("s: alloc c", "s: alloc b", threads="thread t2 {\n  free c\n}\n")
    assert p.memories[p.statements[1].memory].name == "b"
    p = program(TENSORS + "thread t1 {\n  free c\n}\nthread t2 {\n  s: alloc c\n  s: alloc acts[0]\n}\n")
    assert [p.memories[s.memory].name for s in p.statements] == ["c", "c", "acts[0]"]


def test_tensor_ranges_are_relative_to_the_tensor():
    p = tensor_program("s: alloc a", "free a", "s: alloc b", "s: kernel k writes b[512KiB:]")
    assert rw(p, p.statements[-1]) == [("a[0:2MiB]", 512 * 1024, 2 * MiB, True)]
    error_of(TENSORS + "thread main {\n  s: alloc a\n  free a\n  s: alloc b\n  s: kernel k writes b[0:4MiB]\n}\n",
             Code.SP014, 14, 23, "outside `b` (2097152 bytes)")


def test_expect_race_on_a_tensor():
    p = program(TENSORS + "thread t {\n  s: alloc a\n}\nexpect race on a\n")
    assert p.expectations[0].buffer == "a"


def test_a_free_by_another_thread_warns_where_an_alloc_could_take_the_block():
    spec = ("device gpu0 { compute 2 }\ntensor a 1KiB on gpu0\ntensor b 1KiB on gpu0\nstream main on gpu0\n"
            "stream side on gpu0\nnotify n\nthread t {\n  main: alloc a\n  notify n\n}\n"
            "thread u {\n  await n\n  side: kernel use reads a\n  free a\n%s}\n")
    loaded = load_text(spec % "  main: alloc b\n")
    (warned,) = [w for w in loaded.diagnostics if w.code is Code.SP056]
    assert (warned.primary_span.line, warned.message) == (14, "thread `u` frees `a`, which thread `t` allocated, "
                                                          "back into the pool of `main`, from which `b` is allocated")
    assert not [w for w in load_text(spec % "").diagnostics if w.code is Code.SP056]  # nothing draws from it


def test_expect_race_on_a_tensor_element_matches_a_piece_of_its_block():
    from checker.analyze import check_loaded

    spec = ("device gpu0 { compute 2 }\ntensor g[2] 1KiB on gpu0\ntensor h 512B on gpu0\nstream main on gpu0\n"
            "stream side on gpu0\nthread t {\n  main: alloc g\n  main: kernel fill writes g 1ms\n"
            "  side: wait_stream main\n  side: kernel consume reads g[1] 5ms\n  free g[1]\n  main: alloc h\n"
            "  main: kernel produce writes h 1ms\n}\nexpect race on g[1]\n")
    report = check_loaded(load_text(spec))
    assert [f.memory for f in report.findings] == ["g[1][0:512]"]  # h takes half of g[1]'s block
    assert report.passed


@pytest.mark.parametrize("body,line,column,code,message", [
    ("  s: kernel k reads a\n", 11, 21, Code.SP027, "tensor `a` is used but never allocated"),
    ("  other: alloc a\n", 11, 3, Code.SP027, "tensor `a` lives on `g`, but `other` is a stream of `h`"),
    ("  alloc a\n", 11, 3, Code.SP027, "a tensor is allocated from a stream's pool"),
    ("  s: alloc a\n  s: free a\n", 12, 3, Code.SP027, "a tensor goes back to its pool when the host frees it"),
    ("  s: record_stream c\n", 11, 20, Code.SP027, "never allocated"),
    ("  s: alloc a\n  s: record_stream a[0:1KiB]\n", 12, 20, Code.SP015, "takes a whole tensor"),
    ("  free a\n  s: alloc a\n", 11, 3, Code.SP027, "tensor `a` is freed before it is allocated"),
])
def test_tensor_errors(body, line, column, code, message):
    error_of(TENSORS + "thread main {\n" + body + "}\n", code, line, column, message)


def test_record_stream_after_the_free_warns_and_keeps_nothing():
    loaded = load_text(TENSORS + "thread main {\n  s: alloc a\n  free a\n  side: record_stream a\n  s: alloc b\n}\n")
    (warned,) = [d for d in loaded.diagnostics if d.code is Code.SP055]
    assert warned.message == "`record_stream` of `a` after its `free` does nothing"
    p = loaded.program
    assert p.memories[p.statements[-1].memory].name == "a[0:2MiB]"  # b still takes a's bytes


RECORDED = ("device gpu0 { compute 2 }\ntensor a 1KiB on gpu0\ntensor b 1KiB on gpu0\ntensor c 1KiB on gpu0\n"
            "stream main on gpu0\nstream side on gpu0\nevent f flag\nthread t {\n%s}\n")


def test_a_recorded_block_comes_back_in_a_variant_of_its_own():
    from checker.analyze import check_loaded, find, Options

    # side waits for a flag the thread sets only after `alloc b`: the variant's sync (the
    # recorded work done by then) hangs, where the allocator would just keep the block
    loaded = load_text(RECORDED % ("  main: alloc a\n  side: wait f\n  side: kernel use reads a 1ms\n"
                                   "  side: record_stream a\n  free a\n  main: alloc b\n"
                                   "  main: kernel fill writes b 1ms\n  main: record f\n  sync all\n"))
    base, reused = loaded.variants
    assert (base.races_only, reused.races_only) == (False, True)
    assert reused.variant == "the allocator hands `a`'s block back at line 14, the work on `side` done by then"
    assert [s.form.split(" (")[0] for s in reused.statements if s.form.startswith(("record allocator", "sync alloc"))] \
        == ["record allocator#1", "sync allocator#1"]
    assert [f.kind.value for f in find(reused, Options())[0]] == ["deadlock"]
    assert check_loaded(loaded).findings == ()  # that deadlock is no finding: only races and dead uses count


def test_two_recorded_blocks_that_could_come_back_at_one_alloc_come_back_together():
    # Both recorded on `side`: b's work done means a's is, so neither comes back alone (b
    # alone cannot; a alone is not told apart), but both may, in one program of its own.
    body = ("  main: alloc a\n  main: alloc b\n  side: kernel use reads a, b 1ms\n  side: record_stream a\n"
            "  side: record_stream b\n  free a\n%s  main: alloc c\n  sync all\n")
    variants = load_text(RECORDED % (body % "  free b\n")).variants
    assert [v.variant.split(" back at")[0] for v in variants[1:]] == ["the allocator hands `a`'s and `b`'s blocks"]
    assert len(load_text(RECORDED % (body % "")).variants) == 2  # b is never freed: only a comes back


def test_recorded_blocks_on_streams_of_their_own_come_back_alone_and_together():
    from checker.analyze import check_loaded

    # A and B recorded on streams of their own: either's work may be done first, so each comes
    # back alone at U's allocation, and both together; only A back gives U A's bytes, which r
    # (unrecorded) may still read.
    loaded = load_text("device g { runtime cuda }\ntensor A 512KiB on g\ntensor B 512KiB on g\ntensor U 512KiB on g\n"
                       "stream s on g\nstream o on g\nstream q on g\nstream p on g\nthread t {\n  s: alloc A\n"
                       "  s: alloc B\n  p: kernel r reads A\n  o: record_stream A\n  q: record_stream B\n  free A\n"
                       "  free B\n  s: alloc U\n  s: kernel w writes U\n}\n")
    assert [v.variant.split(" back at")[0] for v in loaded.variants[1:]] == [
        "the allocator hands `A`'s block", "the allocator hands `B`'s block",
        "the allocator hands `A`'s and `B`'s blocks"]
    (warning,) = [d for d in loaded.diagnostics if d.code.value == "SP065"]
    assert "other than `A` alone, `B` alone or all together" in warning.message
    (race,) = check_loaded(loaded).findings
    assert race.kind.value == "race" and race.buffer == "A"


def test_a_loop_recording_every_iteration_gets_a_few_timings_and_no_unknown():
    from checker.lower import MAX_RELEASES, MAX_RETURNS, MAX_TOGETHER

    # Each iteration's block may come back together with the last one's at the next alloc: the
    # first allocations stand for the rest (SP065 says so), none is counted as left undecided.
    loaded = load_text("device g\ntensor T[2] 1MiB on g\nstream s on g\nstream side on g\nthread t {\n"
                       "  for i in 0..200 {\n    s: alloc T[i % 2]\n    side: wait_stream s\n"
                       "    side: kernel use reads T[i % 2] 1us\n    side: record_stream T[i % 2]\n"
                       "    free T[i % 2]\n  }\n}\n")
    assert 1 < len(loaded.variants) <= 1 + MAX_RELEASES * MAX_RETURNS + MAX_TOGETHER
    assert loaded.program.timings_left == 0
    assert [d.code.value for d in loaded.diagnostics] == ["SP065"]


def test_a_block_surely_back_is_not_held_in_another_blocks_timing():
    from checker.analyze import check_loaded

    # `sync o1` makes A's return at U certain: B back alone must not keep A held, or U would take
    # B's bytes, which p may still read: a race that cannot happen (U takes A's, lower, either way).
    loaded = load_text("device g { compute 4 }\ntensor A 512KiB on g\ntensor B 512KiB on g\ntensor U 512KiB on g\n"
                       "stream s on g\nstream o1 on g\nstream o2 on g\nstream p on g\nthread t {\n  s: alloc A\n"
                       "  s: alloc B\n  s: kernel fill writes A, B\n  o1: wait_stream s\n  o2: wait_stream s\n"
                       "  p: wait_stream s\n  o1: kernel ra reads A 1ms\n  o1: record_stream A\n  free A\n"
                       "  sync o1\n  p: kernel rb reads B 5ms\n  o2: record_stream B\n  free B\n  s: alloc U\n"
                       "  s: kernel w writes U\n  sync all\n}\n")
    assert check_loaded(loaded).findings == ()
    assert not [d for d in loaded.diagnostics if d.code.value == "SP065"]


HAND_OFF = ("device g { compute 4 }\ntensor x 1KiB on g\ntensor w 1KiB on g\ntensor z 1KiB on g\n"
            "stream s2 on g\nstream side on g\nstream s3 on g\nnotify freed\nnotify synced\nthread t {\n"
            "  s2: alloc x\n  s2: alloc w\n  s2: kernel fill writes x, w 1ms\n  side: wait_stream s2\n"
            "  s3: wait_stream s2\n  side: kernel c1 reads x 1ms\n  side: record_stream x\n  free x\n"
            "  s3: kernel c2 reads w 5ms\n  free w\n  notify freed\n  await synced\n  s2: alloc z\n"
            "  s2: kernel produce writes z 1ms\n  sync all\n}\nthread u {\n  await freed\n  sync side\n"
            "  notify synced\n}\n")


@pytest.mark.parametrize("change, races", [
    ((), False),                                                        # u syncs side after t's free
    (("  await freed\n  sync side\n", "  sync side\n  await freed\n"), True),  # before it: not after the free
    (("  sync side\n", "  sync s2\n"), True),                           # another stream
    (("thread u {", "thread v {\n  notify synced\n}\nthread u {"), True),  # a second setter of `synced`
])
def test_a_wait_through_another_thread_makes_a_recorded_block_surely_back(change, races):
    from checker.analyze import check_loaded

    # s93: z takes x's bytes where x is surely back (u synced side after the free and said so),
    # w's where it may still be held, and s3 may still read w.
    report = check_loaded(load_text(HAND_OFF.replace(*change) if change else HAND_OFF))
    assert bool([f for f in report.findings if f.kind.value == "race"]) is races


@pytest.mark.parametrize("body, freed_again", [
    ("thread t {\n  s: alloc a\n  s: kernel w writes a\n  free a\n  free a\n}\n", 10),
    ("thread t {\n  s: alloc a\n  free a\n  s: alloc b\n  s: kernel w writes b\n  free a\n}\n", 11),
    ("thread t {\n  s: alloc a\n  s: kernel w writes a\n  free a\n  notify n\n}\n"
     "thread u {\n  await n\n  free a\n}\n", 14),                      # another thread's, after a hand-off
    ("thread t {\n  s: alloc a\n  free a\n  s: alloc a\n  free a\n}\n", None),  # a lifetime each
])
def test_a_tensor_freed_twice_is_a_double_free(body, freed_again):
    from checker.analyze import Options, check_loaded

    # A tensor's free is no access, but a second free of one lifetime is a use after free (a
    # double free, SP102), whoever got the block in between; every engine says so.
    text = "device gpu { runtime cuda }\nstream s on gpu\ntensor a 1MiB on gpu\ntensor b 1MiB on gpu\nnotify n\n" + body
    for options in ({}, {"exhaustive": True}):
        loaded = load_text(text)
        report = check_loaded(loaded, Options(**options))
        lines = [loaded.program.statements[f.statements[0]].span.line
                 for f in report.findings if f.kind.value == "use-after-free"]
        assert lines == ([freed_again] if freed_again else []), (options, report.findings)


def test_a_block_another_thread_records_is_said_at_the_next_allocation():
    # t frees T after u recorded it: its return at U is not modelled, and SP065 says so there.
    loaded = load_text("device g { compute 4 }\ntensor T 512KiB on g\ntensor U 512KiB on g\nstream s on g\n"
                       "stream o on g\nstream p on g\nnotify a\nnotify b\nthread t {\n  s: alloc T\n"
                       "  s: kernel fill writes T 1ms\n  notify a\n  await b\n  free T\n  s: alloc U\n"
                       "  s: kernel w writes U 1ms\n  sync all\n}\nthread u {\n  await a\n  o: wait_stream s\n"
                       "  p: wait_stream s\n  o: kernel r1 reads T 1ms\n  p: kernel r2 reads T 5ms\n"
                       "  o: record_stream T\n  notify b\n}\n")
    (warning,) = [d for d in loaded.diagnostics if d.code.value == "SP065"]
    assert warning.primary_span.line == 15 and "`T`'s block coming back (another thread records" in warning.message


def test_a_block_recorded_on_the_default_stream_comes_back_in_a_variant_named_after_it():
    from checker.analyze import check_loaded

    # the default stream exists only once a run uses it: the variant still names it
    loaded = load_text("device g\ntensor a 1MiB on g\ntensor b 1MiB on g\nstream s on g\nstream t on g\n"
                       "thread main {\n  t: alloc a\n  s: kernel r reads a 1us\n  g.default: record_stream a\n"
                       "  free a\n  t: alloc b\n  t: kernel w writes b 1us\n}\n")
    assert loaded.program is not None, loaded.diagnostics
    assert [v.variant for v in loaded.variants][1:] == [
        "the allocator hands `a`'s block back at line 11, the work on `g.default` done by then"]
    (race,) = check_loaded(loaded).findings  # s's read is not recorded: the block comes back under it
    assert race.kind.value == "race" and race.buffer == "a"


HIDDEN = ("device gpu0 { compute 3 }\ntensor a 1KiB on gpu0\ntensor b 1KiB on gpu0\nbuffer x 1KiB on gpu0\n"
          "stream main on gpu0\nstream side on gpu0\nthread t {\n  main: alloc a\n  main: kernel fill writes a 1ms\n"
          "  side: wait_stream main\n  side: kernel c1 reads a, x 1ms\n  side: record_stream a\n  free a\n"
          "  main: alloc b\n  main: kernel produce writes b, x 1ms\n  sync all\n}\n")


def test_a_finding_of_every_program_as_written_needs_no_timing():
    # the race on x is in the program as written; the timing program's sync orders it away
    from checker.analyze import check_loaded

    loaded = load_text(HIDDEN)
    assert len(loaded.variants) == 2
    (race,) = check_loaded(loaded).findings
    assert race.buffer == "x" and "(when" not in race.message and "variant" not in race.detail


def test_timing_programs_past_the_limit_are_an_unknown():
    from checker.analyze import check_loaded

    loaded = load_text(HIDDEN, max_statements=10)  # the program as written fits, with its sync it does not
    assert [p.timings_left for p in loaded.variants] == [1]
    unknown = [f for f in check_loaded(loaded).findings if f.kind.value == "unknown"]
    assert [f.detail["reason"] for f in unknown] == ["limit"]
    assert unknown[0].message.startswith("1 program of the caching allocator's timing")
    assert loaded.variants[0].timings_past_size == 1 and "raise --max-statements" in unknown[0].help


def test_a_timing_program_is_no_run_and_its_races_meet_expectations():
    from pathlib import Path

    from checker.analyze import check_loaded
    from checker.cli import _slowest

    spec = (Path(__file__).parent / "semantics" / "s84_tensor_recorded_on_one_of_two_streams.sched").read_text()
    loaded = load_text(spec + "expect race on b\n")  # (the race is on a's block, which b gets)
    assert check_loaded(loaded).passed
    program, simulation = _slowest(loaded)
    assert not program.races_only and not simulation.deadlocked


def test_tensor_used_before_its_alloc_when_allocated_twice():
    diagnostic = error_of(TENSORS + "thread a1 {\n  s: alloc a\n  free a\n  s: alloc a\n}\n"
                          "thread user {\n  s: kernel k reads a\n}\n",
                          Code.SP027, 16, 21, "tensor `a` is used before any `alloc` of it in thread `user`")
    assert "allocated 2 times in thread `a1`" in diagnostic.help


def test_tensor_allocated_in_two_threads_used_in_a_third():
    diagnostic = error_of(TENSORS + "thread a1 {\n  s: alloc a\n}\nthread a2 {\n  s: alloc a\n}\n"
                          "thread user {\n  s: kernel k reads a\n}\n",
                          Code.SP028, 17, 21, "tensor `a` is allocated in threads `a1` and `a2` and used in thread `user`")
    assert "interleave" in diagnostic.help


# -- arrays ------------------------------------------------------------------------------------------

ARRAYS = (
    "device d0\ndevice d1\ndevice d2\ndevice d3\n"                          # 1-4
    "stream s0 on d0\nstream s1 on d1\nstream s2 on d2\nstream s3 on d3\n"  # 5-8
    "stream lanes[2] on d0\n"                                                # 9
    "buffer grad[3] 1MiB on d0\nbuffer x 1MiB on d0\n"                        # 10-11
)


def test_thread_arrays_bind_their_index():
    p = program(ARRAYS + "thread rank[2] {\n  lanes[rank]: kernel k\n}\n")
    assert [t.name for t in p.threads] == ["rank[0]", "rank[1]"]
    assert [(s.thread, s.stream, s.bindings) for s in p.statements] == [(0, 4, (("rank", 0),)), (1, 5, (("rank", 1),))]


def test_comm_arrays_and_whole_stream_arrays():
    p = program("device d0\ndevice d1\nstream a[2] on d0\nstream b[2] on d1\nstream one[1] on d0\n"
                "buffer x 1MiB on d0\n"
                "comm tp[2] = { a[tp], b[1 - tp] }\n"
                "comm w = { one, b[0] }\n"
                "thread t {\n  a[1]: allreduce tp[1] x\n}\n")
    assert [(c.name, c.members) for c in p.comms] == [("tp[0]", (0, 3)), ("tp[1]", (1, 2)), ("w", (4, 2))]
    assert p.statements[0].comm == 1
    error_of("device d0\nstream a[2] on d0\ncomm tp[2] = { a[tp + 1] }\n", Code.SP013, 3, 18, "index 2")
    error_of("device d0\nstream a[2] on d0\ncomm w = { a[tp] }\n", Code.SP010, 3, 14, "variable `tp`")


def test_whole_buffer_arrays_in_accesses_and_lifetimes():
    p = program(ARRAYS + "thread t {\n  lanes[0]: kernel k reads grad writes x\n  host h writes grad\n"
                "  lanes[0]: alloc grad\n  free grad\n}\n")
    kernel, host, *lifetimes = p.statements
    assert rw(p, kernel) == [("grad[0]", 0, MiB, False), ("grad[1]", 0, MiB, False), ("grad[2]", 0, MiB, False),
                             ("x", 0, MiB, True)]
    assert [a.written_as for a in kernel.accesses] == ["grad[0]", "grad[1]", "grad[2]", "x"]
    assert [a.write for a in host.accesses] == [True, True, True]
    assert [(s.op, s.stream, s.memory) for s in lifetimes] == [
        (Op.ALLOC, 4, 0), (Op.ALLOC, 4, 1), (Op.ALLOC, 4, 2), (Op.FREE, None, 0), (Op.FREE, None, 1), (Op.FREE, None, 2)]
    assert len({s.origin for s in lifetimes[:3]}) == 1


def test_whole_array_copy_stays_an_error():
    error_of(ARRAYS + "thread t {\n  lanes[0]: copy grad <- x\n}\n", Code.SP015, 13, 18,
             "`grad` is an array of 3 buffers; pick one")


def test_usage_warnings_need_every_branch_combination():
    """A stream only one branch of a `choose` uses is not unused; one no branch uses is."""
    result = load_text("device d\nbuffer x 1MiB on d\nstream used on d\nstream sometimes on d\n"
                       "stream never on d\nthread t {\n  used: kernel k writes x\n  choose {\n"
                       "    sometimes: kernel k writes x\n  } or {\n    host skip\n  }\n}\n")
    assert result.program is not None and len(result.variants) == 2
    warned = {(d.code, d.primary_span.line) for d in result.diagnostics}
    assert warned == {(Code.SP051, 5)}


def test_device_arrays_place_one_element_per_device():
    p = program("device gpu[3] { compute 1 comm 1 }\nbuffer g[3] 1MiB on gpu\nbuffer h 1MiB on gpu[2]\n"
                "stream s[3] on gpu\nstream side on gpu[1]\ntensor t[3] 1MiB on gpu\ncomm world = { s }\n"
                "thread rank[3] {\n  s[rank]: allreduce world g[rank]\n  sync gpu[rank]\n}\n")
    assert [d.name for d in p.devices] == ["gpu[0]", "gpu[1]", "gpu[2]"]
    assert [(m.name, m.device) for m in p.memories] == [("g[0]", 0), ("g[1]", 1), ("g[2]", 2), ("h", 2)]
    assert [(s.name, s.device) for s in p.streams] == [("s[0]", 0), ("s[1]", 1), ("s[2]", 2), ("side", 1)]
    assert [s.device for s in p.statements if s.op is Op.ALLREDUCE] == [0, 1, 2]
    assert [s.target for s in p.statements if s.op is Op.SYNC] == [0, 1, 2]
    assert len(p.groups) == 1 and len(p.groups[0].members) == 3 and p.groups[0].complete


@pytest.mark.parametrize("source, code, line, column, words", [
    ("device gpu[2]\nbuffer g[3] 1MiB on gpu\n", Code.SP015, 2, 21, "array of 2 devices"),
    ("device gpu[2]\nstream s on gpu\n", Code.SP015, 2, 13, "one element per device"),
    ("device gpu[2]\nstream s on gpu[2]\n", Code.SP013, 2, 17, "out of range"),
    ("device gpu\nbuffer g 1MiB on gpu[0]\n", Code.SP015, 2, 22, "one device, not an array"),
])
def test_device_array_errors(source, code, line, column, words):
    error_of(source, code, line, column, words)


def test_a_tensor_on_the_host_is_refused_with_a_reason():
    loaded = load_text("device d\ntensor t 4MiB on host\n", "t.sched")
    (diagnostic,) = [d for d in loaded.diagnostics if d.severity is Severity.ERROR]
    assert diagnostic.code is Code.SP012 and "not on the host" in diagnostic.message
    assert (diagnostic.primary_span.line, diagnostic.primary_span.column) == (2, 18)


IF_SPEC = """device d
buffer x[4] 4KiB on d
stream s[4] on d
stream if on d
stream else on d
event done[4]
thread rank[4] {
  if rank > 0 {
    let previous = rank - 1
    s[rank]: wait done[previous]
  }
  s[rank]: kernel k writes x[rank]
  if rank < 2 and rank != 1 {
    s[rank]: record done[rank]
  } else if rank == 1 or rank == 7 {
    if: kernel one reads x[rank]
  } else {
    else: kernel other reads x[rank]
  }
}
"""


def describe(program):
    return [(program.threads[s.thread].name, s.op.value, s.name or "") for s in program.statements]


def test_if_takes_the_first_branch_whose_condition_holds():
    p = program(IF_SPEC)
    assert describe(p) == [
        ("rank[0]", "kernel", "k"), ("rank[0]", "record", ""),
        ("rank[1]", "wait", ""), ("rank[1]", "kernel", "k"), ("rank[1]", "kernel", "one"),
        ("rank[2]", "wait", ""), ("rank[2]", "kernel", "k"), ("rank[2]", "kernel", "other"),
        ("rank[3]", "wait", ""), ("rank[3]", "kernel", "k"), ("rank[3]", "kernel", "other"),
    ]
    # `if` and `else` still name streams: `if: kernel one` ran on the stream called `if`
    assert p.streams[p.statements[4].stream].name == "if"


def test_if_reads_loop_variables_and_short_circuits():
    p = program("""device d
stream s on d
thread t {
  for i in 0..4 {
    if i > 0 and 12 / i >= 6 {
      s: kernel early
    }
    if i == 0 or 12 % i == 1 {
      s: kernel other
    }
  }
}
""")
    assert [s.name for s in p.statements] == ["other", "early", "early"]


def test_a_let_inside_an_if_is_local_to_it():
    error_of("""device d
stream s[2] on d
thread t {
  if 1 < 2 {
    let j = 1
  }
  s[j]: kernel k
}
""", Code.SP010, 7, 5, "`j`")


def test_if_condition_errors_point_at_the_expression():
    error_of("device d\nthread t {\n  if q < 2 {\n  }\n}\n", Code.SP010, 3, 6, "`q`")
    error_of("device d\nthread t {\n  if 1 / 0 < 2 {\n  }\n}\n", Code.SP019, 3, 10)


def test_a_large_branch_that_is_never_taken_is_not_counted():
    p = program("""device d
stream s on d
thread t {
  for i in 0..3 {
    if i == 5 {
      for j in 0..100000000 {
        s: kernel never
      }
    } else {
      s: kernel k
    }
  }
}
""")
    assert len(p.statements) == 3
    error_of("""device d
stream s on d
thread t {
  if 1 == 1 {
    for j in 0..100000000 {
      s: kernel k
    }
  }
}
""", Code.SP018, 5, 5)


def test_choose_inside_if_counts_only_where_taken():
    text = """device d
stream s on d
thread t[2] {
  if t == 1 {
    choose { s: kernel a } or { s: kernel b }
  }
}
"""
    assert len(loaded(text).variants) == 2


@pytest.mark.parametrize("source, line, column, message", [
    ("  if 1 < 2 {\n  }\n  else {\n  }\n", 6, 3, "`else` goes on the line of the `}` before it"),
    ("  if 1 {\n  }\n", 4, 8, "an `if` is written"),
    ("  if 1 < 2 && 2 < 3 {\n  }\n", 4, 12, "an `if` is written"),
    ("  if 1 < 2 {\n  } elif 2 < 3 {\n  }\n", 5, 5, "an `if` is written"),
])
def test_if_syntax_errors(source, line, column, message):
    error_of("device d\nstream s on d\nthread t {\n" + source + "}\n", Code.SP002, line, column, message)


def test_a_condition_names_only_defined_variables_even_where_unread():
    error_of("device d\nstream s on d\nthread t {\n  let x = 0\n  if x == 1 and typo == 1 {\n  }\n}\n",
             Code.SP010, 5, 17, "`typo`")
    error_of("device d\nstream s on d\nthread t {\n  if 1 == 1 {\n  } else if typo > 0 {\n  }\n}\n",
             Code.SP010, 5, 13, "`typo`")


def test_a_loop_that_never_runs_still_names_declared_things_only():
    # The contract: any reference to an undeclared name is an error, run or not.
    source = ("device d\nstream s on d\nbuffer x 1MiB on d\nthread t {\n  for i in 0..0 {\n"
              "    s: kernel k writes x[0:i]\n    nosuch: kernel k writes x\n  }\n}\n")
    error_of(source, Code.SP010, 7, 5, "`nosuch` is not declared")
    # indices are not evaluated: the loop binds no value
    assert program(source.replace("    nosuch: kernel k writes x\n", "")).statements == ()


def test_a_lower_bound_counts_the_shared_comm_unit_once():
    # Without an exact model (threads share an event) the bound adds up engine work; the two
    # members on gpu0 share its one comm unit, so they count as the longer one (3ms), and the
    # bound may not pass the true minimum, 4ms (the short kernel first, the copy after it).
    from pathlib import Path

    from checker.frontend import load_file
    from checker.optimize import optimize

    p = load_file(Path(__file__).parent / "fixtures" / "sp059_shared_unit_lower_bound.sched").program
    result = optimize(p, timeout=10)
    assert not result.optimal_program and result.lower <= 4_000_000


def test_a_branch_not_taken_still_names_declared_things_only():
    # the same answer whether the loop around it runs or not
    for trips in ("0..0", "0..2"):
        source = (f"device d\nstream s on d\nthread t {{\n  for i in {trips} {{\n    if i > 5 {{\n"
                  "      nosuch: kernel k\n    }\n  }\n}\n")
        error_of(source, Code.SP010, 6, 7, "`nosuch` is not declared")


def test_expect_race_on_an_element_of_a_tensor_array():
    from checker.analyze import check_loaded

    source = ("device gpu0\ntensor t[2] 1MiB on gpu0\nstream s[2] on gpu0\nthread th {\n"
              "  s[0]: alloc t[1]\n  s[0]: kernel a writes t[1] 1ms\n  s[1]: kernel b writes t[1] 1ms\n}\n"
              "expect race on t[1]\n")
    report = check_loaded(loaded(source))
    assert len(report.findings) == 1 and not [d for d in report.diagnostics if d.code is Code.SP401]


def test_a_member_sharing_the_comm_unit_is_drawn_on_no_unit_of_its_own():
    from checker.optimize import optimize

    source = ("device gpu0 { compute 1 comm 1 launch 0us }\nbuffer x 1MiB on gpu0\nbuffer y 1MiB on gpu0\n"
              "stream a on gpu0\nstream b on gpu0\ncomm w = { a, b }\nthread t0 {\n  group {\n"
              "    a: allreduce w x 1ms\n    b: allreduce w y 3ms\n  }\n}\n")
    p = program(source)
    timing = optimize(p, timeout=10).program_schedule.timing(p)
    units = {(iv.statement, iv.unit) for iv in timing.intervals if iv.part.value == "task"}
    assert units == {(0, None), (1, 0)}


def test_a_process_thread_waits_for_its_own_streams():
    p = program("device g[3] { runtime cuda }\nbuffer pin 1MiB on host pinned\nstream s[3] on g\n"
                "stream t on g[1]\nthread rank process {\n  sync all\n  s[1]: kernel k\n  free pin\n"
                "  s[2]: kernel k\n  sync all\n}\nthread other {\n  s[0]: kernel k\n  t: kernel k\n  sync all\n"
                "  sync g[1]\n}\n")
    rank, other = p.threads
    assert rank.process and not other.process
    syncs = [(p.statements[i].sync, p.statements[i].streams) for i in rank.statements if p.statements[i].op is Op.SYNC]
    # the first `sync all` waits for nothing (no statement), cudaFreeHost for s[1], the last
    # `sync all` for s[1] and s[2]; never s[0] or t, which only the other thread uses
    assert syncs == [(SyncKind.STREAMS, (1,)), (SyncKind.STREAMS, (1, 2))]
    assert [p.statements[i].span.line for i in rank.statements] == [7, 8, 8, 9, 10]
    # the other thread's waits leave out s[1] and s[2], which only the process uses
    waits = [p.statements[i].streams for i in other.statements if p.statements[i].op is Op.SYNC]
    assert waits == [(0, 3), (3,)]


def test_a_process_thread_s_device_sync_waits_for_its_own_streams_on_that_device():
    # `sync g[1]` in a process waits for what the process enqueued on g[1] before it (s[1]),
    # not for its stream on another device (s[0]) nor for the other thread's t; it was left
    # waiting for nothing, as if all of g[1]'s work were another process's
    p = program("device g[2] { runtime cuda }\nstream s[2] on g\nstream t on g[1]\n"
                "thread rank process {\n  sync g[1]\n  s[0]: kernel k\n  s[1]: kernel k\n  sync g[1]\n}\n"
                "thread other {\n  t: kernel k\n}\n")
    rank = p.threads[0]
    syncs = [(p.statements[i].sync, p.statements[i].streams, p.describe(p.statements[i]))
             for i in rank.statements if p.statements[i].op is Op.SYNC]
    assert syncs == [(SyncKind.STREAMS, (1,), "sync g[1] (the streams this process used)")]


@pytest.mark.parametrize("sync, races", [("sync gpu[0]", False), ("sync gpu[1]", True), ("", True)])
def test_a_rank_s_device_sync_orders_its_copy_before_its_host_read(sync, races):
    from checker.analyze import check_loaded
    from checker.findings import FindingKind

    report = check_loaded(loaded("device gpu[2] { runtime cuda }\nbuffer x 1MiB on gpu[0]\nbuffer h 1MiB on host pinned\n"
                        f"stream s on gpu[0]\nthread r0 process {{\n  s: copy h <- x\n  {sync}\n"
                        "  host read_h reads h\n}\n"))
    assert any(f.kind is FindingKind.RACE for f in report.findings) is races


@pytest.mark.parametrize("order", ["sync first", "copy first"])
def test_a_blocking_stream_s_sync_waits_for_an_implicit_default_stream_of_a_thread_lowered_later(order):
    # the implicit gpu0.default appears when thread b is lowered, after thread a's `sync s`:
    # which thread is written first must not matter
    a = "thread a {\n  await go\n  sync s\n  host check reads h\n}\n"
    b = "thread b {\n  gpu0.default: copy h <- d\n  notify go\n}\n"
    text = ("device gpu0 { runtime cuda }\nbuffer d 1MiB on gpu0\nbuffer h 1MiB on host pinned\nstream s on gpu0\n"
            "notify go\n" + (a + b if order == "sync first" else b + a))
    p = program(text)
    (sync,) = [s for s in p.statements if s.op is Op.SYNC]
    assert [p.streams[i].name for i in sync.streams] == ["s", "gpu0.default"]


def test_a_process_s_sync_of_a_blocking_stream_it_has_not_used_waits_for_its_own_legacy_stream():
    p = program("device gpu0 { runtime cuda }\nbuffer d 1MiB on gpu0\nbuffer h 1MiB on host pinned\n"
                "stream s[2] on gpu0\nthread q process {\n  gpu0.default: copy h <- d\n  sync s[1]\n"
                "  host check reads h\n}\n")
    (sync,) = [s for s in p.statements if s.op is Op.SYNC]
    assert [p.streams[i].name for i in sync.streams] == ["s[1]", "gpu0.default@q"]


@pytest.mark.parametrize("process", [" process", ""])
def test_a_process_s_memset_goes_to_the_legacy_stream_it_uses_later(process):
    # one legacy stream per process: the memset before the first `L:` runs on L, as it does
    # in a thread of the main process (it went to an implicit default stream of the process's
    # own, unordered with L: a race, and SP060)
    from checker.analyze import check_loaded

    loaded = load_text("device gpu0 { compute 2 runtime cuda }\nbuffer x 1MiB on gpu0\nstream L on gpu0 legacy\n"
                       f"thread p{process} {{\n  memset x 1ms\n  L: kernel k2 reads x 1ms\n}}\n")
    assert [s.name for s in loaded.program.streams] == ["L"] and not loaded.diagnostics
    assert check_loaded(loaded).findings == ()


@pytest.mark.parametrize("process_first", [True, False])
def test_the_main_process_s_default_stream_is_not_a_process_s_whatever_the_thread_order(process_first):
    from checker.analyze import check_loaded
    from checker.findings import FindingKind

    p = "thread p process {\n  g0.default: kernel k1 writes d\n}\n"
    m = "thread m {\n  g0.default: kernel k2 writes d\n}\n"
    loaded = load_text("device g0 { runtime cuda }\nbuffer d 1MiB on g0\n" + (p + m if process_first else m + p))
    assert sorted(s.name for s in loaded.program.streams) == ["g0.default", "g0.default@p"]
    assert [f.kind for f in check_loaded(loaded).findings] == [FindingKind.RACE]


def test_a_process_naming_a_stream_declared_in_error_gets_the_diagnostics_not_a_crash():
    # the look ahead for a process's legacy stream met the broken declaration (an internal error)
    result = load_text("device gpu0 { runtime cuda }\nstream L on gpux legacy\nthread p process {\n"
                       "  memset x\n  L: kernel k\n}\n")
    assert result.program is None
    assert [(d.code, d.primary_span.line) for d in result.diagnostics] == [(Code.SP010, 2), (Code.SP010, 4)]


def test_process_is_a_name_everywhere_else():
    p = program("device g\nbuffer process 1MiB on g\nstream s on g\nthread process process {\n"
                "  s: kernel k writes process\n}\nthread t {\n  s: kernel k reads process\n}\n")
    assert [t.name for t in p.threads] == ["process", "t"] and [t.process for t in p.threads] == [True, False]
    assert p.memories[0].name == "process"


def test_a_wait_for_only_other_processes_work_waits_for_nothing():
    p = program("device g\nstream s on g\nthread p process {\n  s: kernel k 1ms\n}\n"
                "thread main {\n  sync all\n  sync g\n}\n")
    syncs = [p.statements[i] for i in p.threads[1].statements]
    assert [(s.op, s.streams) for s in syncs] == [(Op.HOST, ()), (Op.HOST, ())]
    assert [p.describe(s) for s in syncs] == ["sync all (only other processes' work to wait for)",
                                              "sync g (only other processes' work to wait for)"]


def test_streams_belong_to_the_process_that_uses_them():
    # rank0's `sync` of its legacy stream waits for its own blocking stream, not for rank1's,
    # nor for the main thread's (CUDA: a legacy stream per context, a context per process)
    p = program("device g { runtime cuda }\nstream legacy0 on g legacy\nstream s[3] on g\nthread rank[2] process {\n"
                "  s[rank]: kernel k\n  if rank == 0 {\n    legacy0: kernel k\n    sync legacy0\n  }\n}\n"
                "thread main {\n  s[2]: kernel k\n}\n")
    assert [s.context for s in p.streams] == [0, 0, 1, None]
    (marker,) = [s for s in p.statements if s.op is Op.SYNC]
    assert marker.sync is SyncKind.STREAMS and marker.streams == (0, 1)
    without = program("device g { runtime cuda }\nstream legacy0 on g legacy\nstream s[3] on g\nthread rank[2] {\n"
                      "  s[rank]: kernel k\n  if rank == 0 {\n    legacy0: kernel k\n    sync legacy0\n  }\n}\n"
                      "thread main {\n  s[2]: kernel k\n}\n")
    assert [s.context for s in without.streams] == [None] * 4
    (marker,) = [s for s in without.statements if s.op is Op.SYNC]
    assert marker.streams == (0, 1, 2, 3)


@pytest.mark.parametrize("process, races", [(" process", True), ("", False)])
def test_each_process_has_its_own_default_stream(process, races):
    # CUDA: a legacy default stream per context. Two processes' memsets run on two streams
    # and race; two threads of one process share one stream. A process's memset after its
    # kernel waits for it on its own legacy stream (rule 11), not for the other's.
    from checker.analyze import check_loaded

    spec = (f"device gpu0 {{ compute 2 runtime cuda }}\nbuffer x 1MiB on gpu0\nbuffer y[2] 1MiB on gpu0\n"
            f"stream s[2] on gpu0\nthread rank[2]{process} {{\n  s[rank]: kernel k writes y[rank] 1ms\n"
            "  memset y[rank] 1ms\n  memset x 1ms\n}\n")
    loaded = load_text(spec)
    names = {loaded.program.streams[s.stream].name for s in loaded.program.statements if s.op is Op.MEMSET}
    assert names == ({"gpu0.default@rank[0]", "gpu0.default@rank[1]"} if process else {"gpu0.default"})
    report = check_loaded(loaded)
    assert {(f.kind.value, f.buffer) for f in report.findings} == ({("race", "x")} if races else set())


@pytest.mark.parametrize("runtime", ["", " { runtime cuda }"])
def test_a_process_takes_the_default_stream_a_comm_declares(runtime):
    # NCCL on each rank's default stream: the comm names `gpu[r].default` (declarations belong
    # to no process); each rank's process owns its device's, so its kernels and its calls share
    # one stream (before, the calls were refused: SP021, not a member)
    from checker.analyze import check_loaded

    spec = (f"device gpu[2]{runtime}\nbuffer x[2] 4KiB on gpu\ncomm c = {{ gpu[0].default, gpu[1].default }}\n"
            "thread rank[2] process {\n  gpu[rank].default: kernel k writes x[rank] 1ms\n"
            "  gpu[rank].default: allreduce c x[rank] 1ms\n  memset x[rank] 1ms\n  sync all\n}\n")
    loaded = load_text(spec)
    p = loaded.program
    if runtime:
        assert [(s.name, s.context) for s in p.streams] == [("gpu[0].default", 0), ("gpu[1].default", 1)]
        assert {s.stream for s in p.statements if s.thread == 0 and s.stream is not None} == {0}
        assert check_loaded(loaded).findings == ()
    else:  # (CANN's aclrtMemset runs at once, on no stream: not after the rank's kernel)
        assert [(s.name, s.context) for s in p.streams] == [
            ("gpu[0].default", 0), ("gpu[1].default", 1), ("gpu[0].calls@rank[0]", 0), ("gpu[1].calls@rank[1]", 1)]
        assert {s.stream for s in p.statements if s.thread == 0 and s.op is not Op.MEMSET and s.stream is not None} == {0}
        assert {(f.kind.value, f.buffer) for f in check_loaded(loaded).findings} == {("race", "x")}


@pytest.mark.parametrize("body", [
    "  gpu[rank].default: broadcast c root gpu[0].default w[rank] 1ms\n",
    "  if rank == 0 {\n    gpu[0].default: send c to gpu[1].default w[0] 1ms\n  } else {\n"
    "    gpu[1].default: recv c from gpu[0].default w[1] 1ms\n  }\n",
])
def test_a_process_names_another_rank_s_default_stream_member_as_root_or_peer(body):
    # `gpu[0].default` as a root or peer is the comm's member there (rank 0's), not rank 1's
    # own default stream on gpu[0] (SP021, not a member); and a branch that rank 0 does not
    # take (the recv on gpu[1]) does not make rank 0 the owner of gpu[1]'s member
    from checker.analyze import check_loaded

    loaded = load_text("device gpu[2] { runtime cuda }\nbuffer w[2] 1MiB on gpu\n"
                       "comm c = { gpu[0].default, gpu[1].default }\nthread rank[2] process {\n" + body + "}\n")
    p = loaded.program
    assert p is not None, loaded.diagnostics
    assert [(s.name, s.context) for s in p.streams] == [("gpu[0].default", 0), ("gpu[1].default", 1)]
    tasks = [s for s in p.statements if s.stream is not None]
    assert [(s.thread, s.stream, s.root if s.root is not None else s.peer) for s in tasks] == [(0, 0, 0 if "root" in body else 1), (1, 1, 0)]
    assert check_loaded(loaded).findings == ()


@pytest.mark.parametrize("threads, warned", [
    ("thread rank[2] process {\n  s[rank]: kernel k reads w\n}\n", True),
    ("thread rank[2] process {\n  s[rank]: kernel k reads w[rank]\n}\n", False),
    ("thread rank[2] {\n  s[rank]: kernel k reads w\n}\n", False),
    ("thread main process {\n  s[0]: kernel k reads w[0]\n}\nthread helper {\n  host h reads w[0]\n}\n", True),
    # a free (or alloc) by one process of memory another uses
    ("thread a process {\n  s[0]: kernel k reads w[0]\n}\nthread b process {\n  s[1]: free w[0]\n}\n", True),
    ("thread a process {\n  alloc w[1]\n}\nthread b process {\n  s[1]: kernel k writes w[1]\n}\n", True),
    ("thread a process {\n  alloc w[0]\n  s[0]: kernel k writes w[0]\n  free w[0]\n}\n"
     "thread b process {\n  s[1]: kernel k writes w[1]\n}\n", False),
])
def test_a_buffer_two_processes_use_warns(threads, warned):
    size = "" if "w[" not in threads else "[2]"
    loaded = load_text(f"device gpu0\nbuffer w{size} 1KiB on gpu0\nstream s[2] on gpu0\n{threads}")
    assert bool([d for d in loaded.diagnostics if d.code is Code.SP063]) == warned


def test_the_default_stream_a_comm_declares_in_every_program_and_only_where_named():
    head = "device gpu[2]\nbuffer x[2] 4KiB on gpu\nbuffer z 4KiB on gpu[1]\ncomm c = { gpu[0].default, gpu[1].default }\n"
    # every program of a `choose` (each lowered anew) gives each rank the comm's member
    loaded = load_text(head + "thread rank[2] process {\n  choose {\n    gpu[rank].default: kernel a writes x[rank]\n"
                       "  } or {\n    gpu[rank].default: kernel b reads x[rank]\n  }\n"
                       "  gpu[rank].default: allreduce c x[rank] 1ms\n}\n")
    assert loaded.program is not None and len(loaded.variants) == 4  # (a choice per rank)
    # a memset of the other rank's device does not take that rank's member
    loaded = load_text(head + "thread rank[2] process {\n  if rank == 0 {\n    memset z 1ms\n  }\n"
                       "  gpu[rank].default: allreduce c x[rank] 1ms\n}\n")
    assert loaded.program is not None
    assert [s.name for s in loaded.program.streams] == ["gpu[0].default", "gpu[1].default", "gpu[1].calls@rank[0]"]
    # with a thread of the main process, the members stay the main process's; a memset (CANN:
    # on no stream) takes none of them
    loaded = load_text(head + "thread main {\n  memset x[0] 1ms\n}\nthread p process {\n  memset x[0] 1ms\n}\n")
    assert {s.name for s in loaded.program.streams} == {"gpu[0].default", "gpu[1].default", "gpu[0].calls@main",
                                                        "gpu[0].calls@p"}
    loaded = load_text(head.replace("device gpu[2]", "device gpu[2] { runtime cuda }")
                       + "thread main {\n  memset x[0] 1ms\n}\nthread p process {\n  memset x[0] 1ms\n}\n")
    assert {s.name for s in loaded.program.streams} == {"gpu[0].default", "gpu[1].default", "gpu[0].default@p"}


def test_processes_take_the_comm_s_default_streams_beside_a_main_process_thread_that_leaves_them():
    from checker.analyze import check_loaded

    head = ("device gpu[2]\nbuffer x[2] 4KiB on gpu\nbuffer h 4KiB on host pinned\n"
            "comm c = { gpu[0].default, gpu[1].default }\n"
            "thread rank[2] process {\n  gpu[rank].default: kernel k writes x[rank] 1ms\n"
            "  gpu[rank].default: allreduce c x[rank] 1ms\n}\n")
    # a logger thread of the main process uses no default stream: the ranks claim theirs
    loaded = load_text(head + "thread logger {\n  host log reads h\n}\n")
    assert loaded.program is not None, [d.message for d in loaded.diagnostics]
    assert [(s.name, s.context) for s in loaded.program.streams] == [("gpu[0].default", 0), ("gpu[1].default", 1)]
    assert check_loaded(loaded).findings == ()
    # one that uses gpu[0]'s keeps it: rank 0's own default stream is not the member, and the
    # error says why
    loaded = load_text(head + "thread watcher {\n  gpu[0].default: kernel peek reads x[0]\n}\n")
    assert loaded.program is None
    [error] = [d for d in loaded.diagnostics if d.code is Code.SP021]
    assert "gpu[0].default@rank[0]" in error.message and "stays the main process's" in error.help
    # (rank 1 claimed gpu[1]'s: only rank 0's call is refused)
    assert len([d for d in loaded.diagnostics if d.code is Code.SP021]) == 1


def test_a_main_process_memset_keeps_only_its_own_devices_default_stream():
    """A `memset` or `memcpy` of the main process runs on the default stream of the device of
    its memory: only that device's stays the main process's; the ranks claim the others."""
    head = ("device g0 { runtime cuda }\ndevice g1 { runtime cuda }\nbuffer x0 1MiB on g0\nbuffer x1 1MiB on g1\n"
            "comm c = { g0.default, g1.default }\nthread m {\n  memset x0\n}\n")
    loaded = load_text(head + "thread p1 process {\n  g1.default: allreduce c x1\n}\n"
                              "thread p0 process {\n  g0.default: allreduce c x0\n}\n")
    assert [d.message for d in loaded.diagnostics if d.code is Code.SP021] == [
        "stream `g0.default@p0` is not a member of comm `c`"]


@pytest.mark.parametrize("statement, ordered", [
    ("L0: copy x1 <- x0", True), ("L0: copy x1 <- pageable", False), ("L0: copy x1 <- pinned", False),
    ("L0: item x1", False)])
def test_only_a_legacy_stream_copy_between_two_devices_is_peer_ordered(statement, ordered):
    """A copy on a CUDA legacy stream between the memories of two devices waits for both
    devices' earlier work (the programming guide's peer copies in the NULL stream); one
    between the host and another device's memory, or an `item` of it, is documented to order
    nothing on the other device, so it races with that device's work."""
    from checker.analyze import check_loaded

    spec = ("device g0 { runtime cuda }\ndevice g1 { runtime cuda }\nbuffer x0 1MiB on g0\nbuffer x1 1MiB on g1\n"
            "buffer pageable 1MiB on host\nbuffer pinned 1MiB on host pinned\nstream L0 on g0 legacy\n"
            f"stream s1 on g1\nthread t {{\n  s1: kernel w writes x1\n  {statement}\n  s1: kernel after writes x1\n"
            "  sync all\n}\n")
    report = check_loaded(loaded(spec))
    assert ("race" in [f.kind.value for f in report.findings]) is not ordered, [f.message for f in report.findings]
    unordered = spec.replace("stream L0 on g0 legacy", "stream L0 on g0")
    assert "race" in [f.kind.value for f in check_loaded(loaded(unordered)).findings]


def test_a_process_takes_its_hardware_queues_in_turn():
    p = program("device g { queues 2 }\nstream s[4] on g\nthread rank[2] process {\n  s[rank]: kernel k\n"
                "  s[rank + 2]: kernel k\n}\n")
    assert [(s.context, s.queue) for s in p.streams] == [(0, 0), (1, 0), (0, 1), (1, 1)]
    plain = program("device g { queues 2 }\nstream s[4] on g\nthread rank[2] {\n  s[rank]: kernel k\n"
                    "  s[rank + 2]: kernel k\n}\n")
    assert [(s.context, s.queue) for s in plain.streams] == [(None, 0), (None, 1), (None, 0), (None, 1)]


@pytest.mark.parametrize("process, deadlock", [(" process", False), ("", True)])
def test_the_main_process_takes_its_hardware_queues_in_turn_beside_a_process(process, deadlock):
    # a and c are the main process's first and second streams (b is p's): queues 0 and 1, so
    # the wait on a does not hold c's record behind it; without `process`, c is the device's
    # third stream, on a's queue (the contract's rule 10), and the two deadlock
    from checker.analyze import check_loaded
    from checker.findings import FindingKind

    loaded = load_text("device g { queues 2 }\nstream a on g\nstream b on g\nstream c on g\n"
                       "event f flag\nthread main {\n  a: wait f\n  c: record f\n}\n"
                       f"thread p{process} {{\n  b: kernel k\n}}\n")
    assert [s.queue for s in loaded.program.streams] == ([0, 0, 1] if process else [0, 1, 0])
    assert any(f.kind is FindingKind.DEADLOCK for f in check_loaded(loaded).findings) is deadlock


TWO_HELD = """device g
tensor A 1MiB on g
tensor B 1MiB on g
tensor C 1MiB on g
stream s0 on g
stream s1 on g
stream s2 on g
thread t {
  s0: alloc A
  s0: alloc B
  s1: kernel k reads B 1us
  s2: kernel r reads A 1us
  s1: record_stream A
  s1: record_stream B
  free A
  free B
  s0: alloc C
  s0: kernel w writes C 1us
}
"""


def test_sp065_an_allocation_two_held_blocks_could_come_back_at_is_said():
    # which block C takes depends on A's and B's recorded work both: not modelled, so the race of
    # r (A read on s2, not recorded) with w is not looked for; the allocation says so
    result = loaded(TWO_HELD)
    assert [(w.code, w.primary_span.line) for w in result.diagnostics] == [(Code.SP065, 17)]
    assert "`A`, `B`" in result.diagnostics[0].message
    # with B not recorded, A alone may come back there: that timing is checked, and r races with w
    from checker.analyze import check_loaded
    from checker.findings import FindingKind

    one = loaded(TWO_HELD.replace("  s1: record_stream B\n", ""))
    assert not one.diagnostics
    assert FindingKind.RACE in {f.kind for f in check_loaded(one).findings}


def test_allocator_timings_past_four_per_thread_are_reported_unknown():
    from checker.analyze import check_loaded
    from checker.findings import FindingKind

    lines = ["device g"] + [f"tensor a{i} 1MiB on g\ntensor b{i} 1MiB on g" for i in range(5)]
    lines += [f"stream p{i} on g" for i in range(5)] + ["stream side on g", "thread t {"]
    for i in range(5):
        lines.append(f"  p{i}: alloc a{i}\n  side: kernel r{i} reads a{i}\n  side: record_stream a{i}\n  free a{i}\n"
                     f"  p{i}: alloc b{i}\n  p{i}: kernel u{i} writes b{i}")
    result = loaded("\n".join(lines + ["}"]) + "\n")
    assert result.program.timings_left == 1 and sum(p.races_only for p in result.variants) == 4
    unknown = [f for f in check_loaded(result).findings if f.kind is FindingKind.UNKNOWN]
    assert len(unknown) == 1 and "1 program of the caching allocator's timing" in unknown[0].message
    # (past the frees one program gets timings for: no statement limit to raise)
    assert result.program.timings_past_size == 0 and "--max-statements" not in unknown[0].help
    assert "first 4 frees" in unknown[0].message and "`sync STREAM`" in unknown[0].help
    # the same five frees split over two threads: each has its first four (an allocator each)
    two = "\n".join(lines[:lines.index("thread t {")] + ["thread t {"] + lines[-5:-2] + ["}", "thread u {"]
                    + lines[-2:] + ["}"]) + "\n"
    split = loaded(two)
    assert split.program.timings_left == 0 and sum(p.races_only for p in split.variants) == 5


@pytest.mark.parametrize("text, codes, race", [
    # DEVICE.default as a root names the comm's member only where that member is a default stream
    ("device g[2] { runtime cuda }\nbuffer x[2] 1MiB on g\nstream s[2] on g\ncomm c = { s[0], s[1] }\n"
     "thread r[2] {\n  s[r]: broadcast c root g[0].default x[r] 1ms\n}\n", [Code.SP021], None),
    # a process that takes the declared legacy stream claims the comm's member there too
    ("device g0 { compute 2 runtime cuda }\nbuffer x 1MiB on g0\nstream L on g0 legacy\ncomm c = { g0.default }\n"
     "thread t process {\n  L: kernel k1 writes x 1ms\n  g0.default: kernel k3 1ms\n}\n"
     "thread u process {\n  g0.default: kernel k2 writes x 1ms\n}\n", [Code.SP063], True),
    # a legacy stream named in one branch of a `choose` is not the process's default in the other
    ("device g0 { compute 2 runtime cuda }\nbuffer x 1MiB on g0\nstream L on g0 legacy\n"
     "thread m {\n  L: kernel km writes x 1ms\n}\nthread p process {\n  memset x 1ms\n"
     "  choose {\n    L: kernel kp 1ms\n  } or {\n    host h\n  }\n}\n", None, True),
    # cudaFree syncs its own device: no SP064 for a use on another device's stream
    ("device g0 { runtime cuda }\ndevice g1 { runtime cuda }\nbuffer a 1MiB on g0\nbuffer b 1MiB on g0\n"
     "stream s0 on g0\nstream s1 on g1\nthread t {\n  s0: kernel j writes b 1ms\n  s1: kernel k writes a 1ms\n"
     "  free a\n}\n", [], True),
    # a process's default stream that it only syncs is its own, not a second legacy stream of the main process
    ("device g0 { runtime cuda }\nbuffer x 1MiB on g0\nthread p process {\n  sync g0.default\n}\n"
     "thread m {\n  g0.default: kernel k writes x 1ms\n}\n", [], False),
])
def test_regressions_the_lowering_review_found(text, codes, race):
    from checker.analyze import check_loaded
    from checker.findings import FindingKind

    result = load_text(text)
    if race is None:  # an error
        assert result.program is None and [d.code for d in result.diagnostics] == codes
        return
    assert codes is None or sorted(d.code for d in result.diagnostics) == codes, result.diagnostics
    assert (FindingKind.RACE in {f.kind for f in check_loaded(result).findings}) is race


def test_cann_call_streams_take_no_hardware_queue_and_leave_comm_defaults_to_processes():
    from checker.analyze import check_loaded

    # a memcpy first: `d.default` still takes the queue after `s`, not the memcpy's
    queued = ("device d { queues 2 }\nstream s on d\nbuffer a 1MiB on d\nbuffer b 1MiB on d\nbuffer h 1MiB on host pinned\n"
              "notify n\nthread t {\n  memcpy h <- a\n  s: await n\n  d.default: kernel k writes b\n"
              "  sync d.default\n  notify n\n  sync all\n}\n")
    result = load_text(queued, "t.sched")
    assert [(s.name, s.queue) for s in result.program.streams] == [("s", 0), ("d.calls@t", None), ("d.default", 1)]
    assert not [f for f in check_loaded(result).findings if f.kind.value == "deadlock"]
    # a main-process memcpy under CANN runs on no stream: the processes keep the comm's default members
    ranks = ("device d[2]\nbuffer a[2] 1MiB on d\nbuffer h 1MiB on host pinned\ncomm c = { d[0].default, d[1].default }\n"
             "thread main {\n  memcpy a[0] <- h\n}\nthread r[2] process {\n  d[r].default: allreduce c a[r]\n"
             "  sync d[r].default\n}\n")
    assert not [d for d in load_text(ranks, "t.sched").diagnostics if d.code is Code.SP021]
    assert [d.code for d in load_text(ranks.replace("device d[2]", "device d[2] { runtime cuda }"), "t.sched").diagnostics
            if d.code is Code.SP021] == [Code.SP021]


def test_a_group_of_one_in_flight_calls_of_a_rank_is_one_call():
    from checker.analyze import check_loaded

    spec = ("device g0 { runtime cuda }\ndevice g1 { runtime cuda }\nstream m0 on g0\nstream m1 on g1\n"
            "buffer x 1MiB on g0\nbuffer x2 1MiB on g0\nbuffer y 1MiB on g1\nbuffer y2 1MiB on g1\n"
            "comm c = { m0, m1 } one_in_flight\nthread r0 {\n  group {\n    m0: send c to m1 x\n"
            "    m0: recv c from m1 x2\n  }\n  m0: allreduce c x\n}\nthread r1 {\n  group {\n    m1: send c to m0 y\n"
            "    m1: recv c from m0 y2\n  }\n  m1: allreduce c y\n}\n")
    p = program(spec)
    writes = [s.op.value for s in p.statements if any(p.memories[a.memory].comm is not None for a in s.accesses)]
    assert writes == ["send", "allreduce", "send", "allreduce"]  # (the group's first call of the rank)
    assert check_loaded(loaded(spec)).findings == ()


def test_a_cuda_free_of_memory_other_threads_allocate_both_ways_is_checked_both_ways():
    """Which allocation `free x` finds live depends on the interleaving when another thread
    allocates x the other way: a cudaMallocAsync allocation there makes cudaFree wait for
    nothing, and the kernel writing it can still run (a variant says which)."""
    from checker.analyze import check_loaded
    from checker.lower import CUDA_FREE_ASYNC, CUDA_FREE_SYNCED

    spec = ("device gpu0 { runtime cuda }\nbuffer x 1MiB on gpu0\nstream s on gpu0 nonblocking\nnotify m\nnotify n\n"
            "thread freer {\n  alloc x\n  free x\n  notify m\n  await n\n  free x\n}\n"
            "thread user {\n  await m\n  s: alloc x\n  s: kernel k writes x 1ms\n  notify n\n}\n")
    result = loaded(spec)
    assert [CUDA_FREE_ASYNC in p.variant for p in result.variants] == [True, False]
    assert CUDA_FREE_SYNCED in result.variants[1].variant
    report = check_loaded(result)
    assert {(f.kind.value, f.variant) for f in report.findings if f.kind.value == "race"} == {("race", 0)}
    # one thread allocating it one way alone decides, as before
    alone = spec.replace("  s: alloc x\n", "")
    assert not any("cudaFree" in p.variant for p in loaded(alone).variants)


def test_an_expectation_on_one_rank_of_a_one_in_flight_comm_says_to_name_the_comm():
    text = ("device d\nbuffer x 1MiB on d\nstream s[2] on d\ncomm car = { s } one_in_flight\nthread t {\n"
            "  s[0]: allreduce car x\n}\nexpect race on car[0]\n")
    (diagnostic,) = [d for d in load_text(text, "t.sched").diagnostics if d.code is Code.SP012]
    assert diagnostic.message.startswith("`car` is a `one_in_flight` comm: an expectation names it whole")
    assert "`expect race on car`" in diagnostic.help


def test_allocator_timings_all_together_are_had_by_every_thread():
    # three threads, an allocator each: the third's blocks come back together in a program
    # of their own, as the first two's do (the limit counted every thread's once)
    body = ("  for l in 0..3 {{\n    ag[{r}]: alloc {t}[l]\n    ag[{r}]: kernel gather writes {t}[l] 1ms\n"
            "    ag[{r}]: record e[{r}]\n    k[{r}]: wait e[{r}]\n    k[{r}]: kernel use reads {t}[l] writes o[{r}] 2ms\n"
            "    k[{r}]: record_stream {t}[l]\n    free {t}[l]\n  }}\n")
    text = ("device gpu[3] { compute 1 comm 1 }\ntensor t[3] 4MiB on gpu[0]\ntensor u[3] 4MiB on gpu[1]\n"
            "tensor v[3] 4MiB on gpu[2]\nbuffer o[3] 4MiB on gpu\nstream ag[3] on gpu\nstream k[3] on gpu\n"
            "event e[3]\n" + "".join(f"thread r{r} {{\n" + body.format(r=r, t=t) + "}\n"
                                     for r, t in enumerate(("t", "u", "v"))))
    result = loaded(text)
    said = [w.message for w in result.diagnostics if w.code is Code.SP065]
    assert len(said) == 3 and all("other than all together or each" in m for m in said), said


def test_sp066_also_warns_of_a_task_that_overwrites_a_pageable_copy_s_source():
    # the snapshot copy reads W; the next optimizer step waits for that read only through the
    # copy's blocking return (pinned staging makes it a race)
    text = ("device gpu { compute 1 d2h 1 runtime cuda }\nbuffer W 64MiB on gpu\nbuffer Wst 64MiB on host\n"
            "stream comp on gpu\nstream ck on gpu\nevent stepped\nthread main {\n  comp: kernel adam writes W 2ms\n"
            "  comp: record stepped\n  ck: wait stepped\n  ck: copy Wst <- W 3ms\n  comp: kernel adam2 writes W 2ms\n}\n")
    result = loaded(text)
    (found,) = [w for w in result.diagnostics if w.code is Code.SP066]
    assert found.primary_span.line == 12 and found.annotations[0].label == "overwrites what the copy reads"
    assert "`wait E` on `comp` before the use" in found.help
