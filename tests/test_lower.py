"""Lowering: every statement's IR fields, unrolling and expressions, collective groups,
and every name/range/kind error (SP010-SP024) and warning (SP050-SP056) with its span."""

from __future__ import annotations

import pytest

from checker.codes import Code, Severity
from checker.analyze import check_loaded
from checker.frontend import load_text
from checker.ir import (
    PRIORITY_HIGH, PRIORITY_LOW, CopyKind, Engine, ExpectKind, GroupKind, Op, StreamMode, SyncKind,
)

HEAD = (
    "device d { compute 1 }\n"        # 1
    "stream s on d\n"                  # 2
    "buffer x 1MiB on d\n"             # 3
    "buffer xs[2] 1MiB on d\n"         # 4
    "event e\n"                        # 5
    "notify n\n"                       # 6
)


def program(source: str, **kwargs):
    loaded = load_text(source, "t.sched", **kwargs)
    errors = [d for d in loaded.diagnostics if d.severity is Severity.ERROR]
    assert loaded.program is not None and not errors, errors
    return loaded.program


def warnings(source: str):
    loaded = load_text(source, "t.sched")
    assert loaded.program is not None, loaded.diagnostics
    return [d for d in loaded.diagnostics if d.severity is Severity.WARNING]


def thread(*lines: str, head: str = HEAD) -> str:
    return head + "thread t {\n" + "".join(f"  {line}\n" for line in lines) + "}\n"


def assert_error(source: str, code: Code, line: int, column: int, end_column: int | None = None,
                 message: str | None = None, **kwargs):
    loaded = load_text(source, "t.sched", **kwargs)
    assert loaded.program is None, "expected an error"
    (diagnostic,) = loaded.diagnostics
    assert diagnostic.code is code, (diagnostic.code, diagnostic.message)
    span = diagnostic.primary_span
    assert (span.line, span.column) == (line, column), (span, diagnostic.message)
    if end_column is not None:
        assert span.end_column == end_column, (span, diagnostic.message)
    if message is not None:
        assert message in diagnostic.message, diagnostic.message
    return diagnostic


# -- declarations -------------------------------------------------------------------------

DECLS = (
    'spec "all of it"\n'
    "device d { compute 2 h2d 1 d2h 3 launch 2us queues 2 }\n"
    "device e { copy 2 }\n"
    "device f { }\n"
    "device g\n"
    "buffer hp 4MiB on host pinned\n"
    "buffer hq 4MiB on host\n"
    "buffer x[3] 4MiB on d\n"
    "buffer y 4MiB on e\n"
    "alias a = x[1][1MiB:3MiB]\n"
    "alias b = a[1MiB:]\n"
    "alias c = a[:512KiB]\n"
    "stream s[3] on d priority high\n"
    "stream t on d priority -3 nonblocking\n"
    "stream u on d legacy\n"
    "stream v on e priority low\n"
    "stream w on e priority 7\n"
    "event ev[2] flag\n"
    "event plain\n"
    "notify n[2]\n"
    "comm world = { s[0], v }\n"
)


def test_devices_and_engines():
    p = program(DECLS)
    d, e, f, g = p.devices
    assert dict(d.engines) == {Engine.COMPUTE: 2, Engine.H2D: 1, Engine.D2H: 3}
    assert d.launch == 2000 and d.queues == 2
    assert d.count(Engine.D2D) == 1 and d.count(Engine.COPY) == 1
    assert dict(e.engines) == {Engine.COPY: 2} and e.count(Engine.H2D) == 2 and e.launch == 0
    default = {Engine.COMPUTE: 1, Engine.COPY: 1, Engine.COMM: 1}
    assert dict(f.engines) == default and dict(g.engines) == default and g.queues is None
    assert p.title == "all of it"


def test_buffers_arrays_and_places():
    p = program(DECLS)
    names = [m.name for m in p.memories]
    assert names == ["hp", "hq", "x[0]", "x[1]", "x[2]", "y"]
    hp, hq, x0, x1, x2, y = p.memories
    assert hp.on_host and hp.pinned and hq.on_host and not hq.pinned
    assert x1.buffer == "x" and x1.device == 0 and x1.size == 4 << 20 and y.device == 1
    assert [name for name, _ in p.buffer_spans] == ["hp", "hq", "x", "y"]


def test_streams_priority_mode_and_queues():
    p = program(DECLS)
    rows = [(s.name, s.device, s.priority, s.mode, s.queue) for s in p.streams]
    assert rows == [
        ("s[0]", 0, PRIORITY_HIGH, StreamMode.BLOCKING, 0),
        ("s[1]", 0, PRIORITY_HIGH, StreamMode.BLOCKING, 1),
        ("s[2]", 0, PRIORITY_HIGH, StreamMode.BLOCKING, 0),
        ("t", 0, -3, StreamMode.NONBLOCKING, 1),
        ("u", 0, 0, StreamMode.LEGACY, 0),
        ("v", 1, PRIORITY_LOW, StreamMode.BLOCKING, None),
        ("w", 1, 7, StreamMode.BLOCKING, None),
    ]


def test_queues_count_streams_per_device():
    p = program("device a { queues 3 }\ndevice b { queues 3 }\nstream p on a\nstream q on b\nstream r on a\n"
                "stream z[4] on b\n")
    assert [(s.name, s.queue) for s in p.streams] == [
        ("p", 0), ("q", 0), ("r", 1), ("z[0]", 1), ("z[1]", 2), ("z[2]", 0), ("z[3]", 1)]


def test_events_notifies_comms():
    p = program(DECLS)
    assert [(e.name, e.flag) for e in p.events] == [("ev[0]", True), ("ev[1]", True), ("plain", False)]
    assert [n.name for n in p.notifies] == ["n[0]", "n[1]"]
    (world,) = p.comms
    assert world.name == "world" and world.members == (0, 5)


def test_expectations():
    p = program(DECLS + "expect no race\nexpect race\nexpect race on b\nexpect no deadlock\nexpect deadlock\n"
                "expect no use-after-free\nexpect use-after-free\nexpect use-after-free on hp\n"
                "expect makespan <= 3.5ms\n")
    rows = [(x.kind, x.buffer, x.limit) for x in p.expectations]
    assert rows == [
        (ExpectKind.NO_RACE, None, None), (ExpectKind.RACE, None, None), (ExpectKind.RACE, "x[1]", None),  # (`b` is part of `x[1]`)
        (ExpectKind.NO_DEADLOCK, None, None), (ExpectKind.DEADLOCK, None, None),
        (ExpectKind.NO_USE_AFTER_FREE, None, None), (ExpectKind.USE_AFTER_FREE, None, None),
        (ExpectKind.USE_AFTER_FREE, "hp", None), (ExpectKind.MAKESPAN, None, 3_500_000),
    ]
    assert p.expectations[0].span.line == DECLS.count("\n") + 1


# -- statements ---------------------------------------------------------------------------


def statements(*lines: str):
    return program(thread(*lines, head=DECLS)).statements


def accesses(statement):
    return [(a.memory, a.start, a.end, a.write, a.written_as) for a in statement.accesses]


MiB = 1 << 20


def test_copy_directions_engines_and_blocking():
    h2d, d2h, d2h_pageable, d2d, cross, e_h2d = statements(
        "s[0]: copy x[0] <- hp 1ms",
        "s[1]: copy hp <- x[2][0:1KiB] 2.5us",
        "s[1]: copy hq <- x[2]",
        "s[2]: copy x[0] <- x[1]",
        "v: copy y <- x[0]",
        "v: copy y <- hq",
    )
    assert (h2d.op, h2d.copy, h2d.engine, h2d.blocking, h2d.duration) == (Op.COPY, CopyKind.H2D, Engine.H2D, False, 10**6)
    assert accesses(h2d) == [(0, 0, 4 * MiB, False, "hp"), (2, 0, 4 * MiB, True, "x[0]")]
    assert (d2h.copy, d2h.engine, d2h.blocking, d2h.duration) == (CopyKind.D2H, Engine.D2H, False, 2500)
    assert accesses(d2h) == [(4, 0, 1024, False, "x[2][0:1KiB]"), (0, 0, 4 * MiB, True, "hp")]
    assert d2h_pageable.blocking and d2h_pageable.copy is CopyKind.D2H
    # d declares no d2d engine: the copy engine
    assert (d2d.copy, d2d.engine, d2d.blocking) == (CopyKind.D2D, Engine.COPY, False)
    assert (cross.stream, cross.device, cross.copy) == (5, 1, CopyKind.D2D)
    # e declares `copy 2` only: an h2d copy uses the copy engine; pageable source blocks
    assert (e_h2d.engine, e_h2d.copy, e_h2d.blocking) == (Engine.COPY, CopyKind.H2D, True)


def test_kernel_callback_host_accesses_through_aliases():
    kernel, callback, host = statements(
        "s[0]: kernel k reads b, c writes a 10ns",
        "t: callback cb reads hq 1s",
        "host h reads hp writes hq, x[0][1KiB:2KiB] 3ms",
    )
    assert (kernel.op, kernel.name, kernel.engine, kernel.duration, kernel.stream, kernel.device) == (
        Op.KERNEL, "k", Engine.COMPUTE, 10, 0, 0)
    assert accesses(kernel) == [
        (3, 2 * MiB, 3 * MiB, False, "b"), (3, MiB, MiB + 512 * 1024, False, "c"), (3, MiB, 3 * MiB, True, "a")]
    assert (callback.op, callback.engine, callback.duration) == (Op.CALLBACK, Engine.CALLBACK, 10**9)
    assert (host.op, host.stream, host.name, host.duration, host.engine) == (Op.HOST, None, "h", 3 * 10**6, None)
    assert accesses(host) == [(0, 0, 4 * MiB, False, "hp"), (1, 0, 4 * MiB, True, "hq"),
                              (2, 1024, 2048, True, "x[0][1KiB:2KiB]")]


def test_events_notifies_lifetimes_and_syncs():
    rows = statements(
        "u: record ev[1]", "t: wait ev[1]", "t: reset ev[1]", "s[0]: notify n[0]", "s[1]: await n[1]",
        "notify n[1]", "await n[0]", "alloc hq", "free hq", "s[0]: alloc x[2]", "s[0]: free x[2]",
        "sync s[1]", "sync ev[0]", "sync d", "sync all",
    )
    summary = [(r.op, r.stream, r.event, r.notify, r.memory, r.sync, r.target) for r in rows]
    assert summary == [
        (Op.RECORD, 4, 1, None, None, None, None),
        (Op.WAIT, 3, 1, None, None, None, None),
        (Op.RESET, 3, 1, None, None, None, None),
        (Op.NOTIFY, 0, None, 0, None, None, None),
        (Op.AWAIT, 1, None, 1, None, None, None),
        (Op.NOTIFY, None, None, 1, None, None, None),
        (Op.AWAIT, None, None, 0, None, None, None),
        (Op.ALLOC, None, None, None, 1, None, None),
        (Op.FREE, None, None, None, 1, None, None),
        (Op.ALLOC, 0, None, None, 4, None, None),
        (Op.FREE, 0, None, None, 4, None, None),
        (Op.SYNC, None, None, None, None, SyncKind.STREAM, 1),
        (Op.SYNC, None, None, None, None, SyncKind.EVENT, 0),
        (Op.SYNC, None, None, None, None, SyncKind.DEVICE, 0),
        (Op.SYNC, None, None, None, None, SyncKind.ALL, None),
    ]
    # a free writes the whole buffer; an alloc is not an access
    assert rows[7].accesses == () and accesses(rows[8]) == [(1, 0, 4 * MiB, True, "hq")]
    assert accesses(rows[10]) == [(4, 0, 4 * MiB, True, "x[2]")]
    assert all(r.thread == 0 for r in rows) and [r.index for r in rows] == list(range(len(rows)))


def test_collectives_grouped_by_position():
    p = program(thread(
        "s[0]: allreduce world x[0] 1ms",
        "v: allreduce world y",
        "s[0]: allreduce world x[1]",
        "s[0]: send world to v x[1]",
        "v: recv world from s[0] y 2ms",
        "v: send world to s[0] y",
        head=DECLS,
    ))
    first, second, third, send, recv, lone_send = p.statements
    assert (first.op, first.engine, first.comm, first.duration) == (Op.ALLREDUCE, Engine.COMM, 0, 10**6)
    assert accesses(first) == [(2, 0, 4 * MiB, False, "x[0]"), (2, 0, 4 * MiB, True, "x[0]")]
    assert (send.peer, recv.peer) == (5, 0)
    assert accesses(send) == [(3, 0, 4 * MiB, False, "x[1]")] and accesses(recv) == [(5, 0, 4 * MiB, True, "y")]
    groups = [(g.kind, g.comm, g.position, g.members, g.complete) for g in p.groups]
    assert groups == [
        (GroupKind.COLLECTIVE, 0, 0, (0, 1), True),
        (GroupKind.COLLECTIVE, 0, 1, (2,), False),
        (GroupKind.SENDRECV, 0, 0, (3, 4), True),
        (GroupKind.SENDRECV, 0, 0, (5,), False),
    ]
    assert [s.group for s in p.statements] == [0, 0, 1, 2, 2, 3]


def test_collective_groups_across_threads_and_loops():
    source = (
        "device d0\ndevice d1\nbuffer g0 1MiB on d0\nbuffer g1 1MiB on d1\nstream c0 on d0\nstream c1 on d1\n"
        "comm w = { c0, c1 }\n"
        "thread r0 {\n  for i in 0..3 {\n    c0: allreduce w g0\n  }\n}\n"
        "thread r1 {\n  for i in 0..2 {\n    c1: allreduce w g1\n  }\n}\n"
    )
    p = program(source)
    assert [(g.position, len(g.members), g.complete) for g in p.groups] == [(0, 2, True), (1, 2, True), (2, 1, False)]


def test_no_collectives_no_groups():
    assert program(thread("s: kernel k")).groups == ()


# -- unrolling and expressions ------------------------------------------------------------


def test_for_let_unrolling_and_bindings():
    rows = statements(
        "for i in 0..3 {",
        "  let j = (i + 1) * 2 % 3 - 7 / 2",
        "  s[i]: kernel k reads x[i][i*1MiB:(i+1)*1MiB]",
        "}",
    )
    assert [r.stream for r in rows] == [0, 1, 2]
    assert [(a.memory, a.start, a.end) for r in rows for a in r.accesses] == [
        (2, 0, MiB), (3, MiB, 2 * MiB), (4, 2 * MiB, 3 * MiB)]
    # -7 / 2 is not in the source, but 7 / 2 = 3 and j = ((i+1)*2 % 3) - 3
    assert [r.bindings for r in rows] == [(("i", 0), ("j", -1)), (("i", 1), ("j", -2)), (("i", 2), ("j", -3))]
    assert len({r.origin for r in rows}) == 1 and all(r.span.line == rows[0].span.line for r in rows)


@pytest.mark.parametrize("expression,value", [
    ("1 + 2 * 3", 7), ("(1 + 2) * 3", 9), ("7 / 2", 3), ("-7 / 2", -4), ("7 % 3", 1), ("-7 % 3", 2),
    ("10 - 4 - 3", 3), ("2 * -3", -6), ("--4", 4), ("1KiB / 4", 256), ("8 / 2 / 2", 2), ("1MiB % 1000", 576),
])
def test_integer_expressions(expression, value):
    (row,) = statements(f"let v = {expression}", "s[0]: kernel k")
    assert dict(row.bindings)["v"] == value


def test_nested_loops_let_shadowing_and_empty_ranges():
    rows = statements(
        "let base = 1",
        "for i in 0..2 {",
        "  for j in base..3 {",
        "    let base = 5",
        "    s[j]: kernel k",
        "  }",
        "}",
        "for k in 3..1 {",
        "  s[0]: kernel never",
        "}",
        "s[base]: kernel after",
    )
    assert [(r.name, r.stream) for r in rows] == [("k", 1), ("k", 2), ("k", 1), ("k", 2), ("after", 1)]


def test_threads_and_program_order():
    p = program(HEAD + "thread main {\n  s: kernel a\n  s: kernel b\n}\nthread other {\n  s: kernel c\n}\n")
    assert [(t.name, t.statements) for t in p.threads] == [("main", (0, 1)), ("other", (2,))]
    assert [p.statements[i].thread for i in range(3)] == [0, 0, 1]


def test_thread_beside_stream_of_the_same_name():
    p = program("device d\nstream main on d\nthread main {\n  main: kernel k\n}\n")
    assert p.threads[0].name == "main" and p.statements[0].stream == 0


def test_max_statements_option():
    source = thread("for i in 0..10 {", "  s: kernel k", "}")
    assert len(program(source, max_statements=100).statements) == 10
    assert_error(source, Code.SP018, 8, 3, message="limit of 5", max_statements=5)
    nested = thread("for i in 0..3 {", "  for j in 0..3 {", "    s: kernel k", "  }", "}")
    assert_error(nested, Code.SP018, 8, 3, max_statements=8)
    flat = thread(*["s: kernel k"] * 4)
    assert_error(flat, Code.SP018, 11, 3, message="thread", max_statements=3)
    # a `let` that only an index reads leaves the body's size alone: counted before unrolling,
    # with what the threads need
    let = thread("for i in 0..10 {", "  let k = i % 2", "  s: kernel k reads xs[k]", "  s: kernel l", "}")
    diagnostic = assert_error(let, Code.SP018, 8, 3, message="the threads need at least 20", max_statements=15)
    assert diagnostic.help.endswith("(N of at least 20)")


def test_an_access_to_a_whole_array_counts_once_per_element():
    """`reads y` of `buffer y[50]` is 50 accesses, each as much work as a statement: a loop of
    a thousand of them over a 100,000-element array took 4 GB before they counted."""
    source = ("device d\nstream s on d\nbuffer y[50] 1B on d\nbuffer z 1B on d\n"
              "thread t {\n  for i in 0..3 {\n    s: kernel k reads y writes z\n  }\n}\n")
    assert len(program(source, max_statements=150).statements) == 3
    assert_error(source, Code.SP018, 6, 3, message="counts once per element", max_statements=149)
    # An indexed element is one access.
    assert len(program(source.replace("reads y", "reads y[1]"), max_statements=3).statements) == 3
    # `free y` is one statement per element (a thousand frees of a 100,000-element array ran
    # for minutes), counted before unrolling and while lowering (under CUDA each free also
    # synchronizes the device: two statements per element, which only lowering knows).
    frees = source.replace("    s: kernel k reads y writes z\n", "    free y\n")
    assert len(program(frees, max_statements=150).statements) == 150
    assert_error(frees, Code.SP018, 6, 3, message="counts once per element", max_statements=149)
    # The programs of a spec with `choose` share the limit, elements included.
    chosen = source.replace("    s: kernel k reads y writes z\n", "    choose {\n      s: kernel k reads y\n    } or {\n"
                            "      s: kernel k reads z\n    }\n")
    assert len(program(chosen, max_statements=8 * 150).statements) == 3
    assert_error(chosen, Code.SP018, 7, 5, message="programs (branch combinations) together", max_statements=400)
    cuda = frees.replace("device d\n", "device d { runtime cuda }\n")
    assert len(program(cuda, max_statements=300).statements) == 300
    assert_error(cuda, Code.SP018, 6, 3, message="counts once per element", max_statements=299)


def test_expressions_evaluated_while_unrolling_are_capped():
    """Each operator, number and variable evaluated counts: `let`s of long expressions in a
    loop lowered nothing and ran for minutes."""
    long = "+".join(["i * 3 % 7"] * 20)  # 99 nodes
    source = thread("for i in 0..100 {", f"  let v = {long}", "}")
    assert program(source, max_statements=1000).statements == ()
    loaded = load_text(source, "t.sched", max_statements=300)
    (diagnostic,) = loaded.diagnostics
    assert diagnostic.code is Code.SP018 and "evaluating expressions while unrolling" in diagnostic.message
    assert diagnostic.primary_span.line == 9  # (in the expression, where the count ran out)


def test_the_limit_counts_statements_not_loop_iterations():
    source = thread("for i in 0..10 {", "  s: kernel k", "}")
    assert len(program(source, max_statements=10).statements) == 10  # exactly at the limit
    assert_error(source, Code.SP018, 8, 3, max_statements=9)
    # A loop that lowers nothing still runs only so many iterations.
    empty = thread("for i in 0..100 {", "  for j in 0..100 {", "    let x = j", "  }", "}")
    assert_error(empty, Code.SP018, 8, 3, message="more than 4,000 iterations and steps that lower nothing in all", max_statements=1000)
    assert program(empty, max_statements=10_000).statements == ()
    # The `let`s count as well: few iterations of many of them are as much work.
    lets = thread("for i in 0..1000 {", *[f"  let v{k} = i * {k} + 7" for k in range(50)], "}")
    assert_error(lets, Code.SP018, 8, 3, message="steps that lower nothing", max_statements=1000)
    assert program(lets, max_statements=20_000).statements == ()
    for idle in ("group { }", "if i < 0 { s: kernel k }", "for j in 0..0 { s: kernel k }"):
        many = thread("for i in 0..1000 {", *[f"  {idle}"] * 50, "}")
        assert_error(many, Code.SP018, 8, 3, message="steps that lower nothing", max_statements=1000)
        assert program(many, max_statements=20_000).statements == ()


def test_nested_loops_are_sized_before_they_are_unrolled():
    # 2^40 statements from 40 nested two-trip loops: refused at the outermost loop at once,
    # where unrolling would have built the limit's worth of statements first.
    nested = ["for i%d in 0..2 {" % k for k in range(40)] + ["s: kernel k reads x[i0:i1 + 1]"] + ["}"] * 40
    assert_error(thread(*nested), Code.SP018, 8, 3, message="unrolls past the limit")
    # Bounds that depend on outer variables are summed: 0 + 1 + ... + 399 = 79,800.
    triangle = thread("for i in 0..400 {", "  for j in 0..i {", "    s: kernel k", "  }", "}")
    assert_error(triangle, Code.SP018, 8, 3, max_statements=79_799)
    assert len(program(triangle, max_statements=79_800).statements) == 79_800


def test_absurd_loop_is_refused_at_once():
    assert_error(thread("for i in 0..1000000000000 {", "  s: kernel k", "}"), Code.SP018, 8, 3,
                 message="1,000,000,000,000 times")


# -- errors -------------------------------------------------------------------------------


@pytest.mark.parametrize("lines,line,column,end_column,message", [
    (["s9: kernel k"], 8, 3, 5, "`s9` is not declared"),
    (["s: kernel k reads zz"], 8, 21, 23, "`zz` is not declared"),
    (["s: record zz"], 8, 13, 15, "`zz` is not declared"),
    (["sync zz"], 8, 8, 10, "`zz` is not declared"),
    (["s: kernel k reads x[i:1]"], 8, 23, 24, "variable `i` is not defined"),
])
def test_sp010_undeclared(lines, line, column, end_column, message):
    diagnostic = assert_error(thread(*lines), Code.SP010, line, column, end_column, message)
    assert diagnostic.help


def test_sp010_suggests_a_close_name():
    diagnostic = assert_error(thread("s: kernel k reads xx"), Code.SP010, 8, 21)
    assert diagnostic.help == "did you mean `x` or `xs`?"


def test_sp010_stream_on_unknown_device():
    assert_error("stream s on gpu9\n", Code.SP010, 1, 13, 17, "`gpu9` is not declared")


@pytest.mark.parametrize("extra,line", [("stream l1 on d legacy\nstream l2 on d legacy\n", 8),
                                        ("stream l[2] on d legacy\n", 7)])
def test_two_legacy_streams_on_one_device_are_a_warning(extra, line):
    # The contract allows it (rule 11 leaves the legacy streams unordered with each other).
    loaded = load_text(HEAD + extra, "two.sched")
    assert loaded.program is not None
    warnings = [d for d in loaded.diagnostics if d.code is Code.SP060]
    assert len(warnings) == 1 and warnings[0].annotations[0].span.line == line


def test_two_processes_each_with_its_legacy_stream_are_no_warning():
    spec = "device d\nstream l[2] on d legacy\nthread r[2] process {\n  l[r]: kernel k\n}\n"
    assert not [d for d in load_text(spec).diagnostics if d.code is Code.SP060]
    threads = load_text(spec.replace(" process", "")).diagnostics
    assert [d.code for d in threads] == [Code.SP060]


@pytest.mark.parametrize("runtime,second,warned", [
    ("runtime cuda", "b: record e", True),       # cudaEventRecord: the event's own device only
    ("runtime cuda", "b: wait e", False),        # waiting across devices is fine
    ("", "b: record e", False),                  # not CUDA: no such rule here
])
def test_an_event_recorded_on_two_cuda_devices_is_a_warning(runtime, second, warned):
    loaded = load_text(f"device g0 {{ {runtime} }}\ndevice g1 {{ {runtime} }}\n".replace("{  }", "")
                       + "stream a on g0\nstream b on g1\nevent e\n"
                       f"thread t {{\n  a: record e\n  {second}\n}}\n", "event.sched")
    assert loaded.program is not None
    warnings = [d for d in loaded.diagnostics if d.code is Code.SP061]
    assert [w.annotations[0].span.line for w in warnings] == ([8] if warned else [])


@pytest.mark.parametrize("threads, warned", [
    ("thread a process {\n  s: kernel k\n}\nthread b {\n  s: kernel j\n}\n", [(8, "process `a` and by thread `b`")]),
    ("thread a process {\n  s: kernel k\n}\nthread b process {\n  s: kernel j\n}\n", [(8, "process `a` and by process `b`")]),
    ("thread a {\n  s: kernel k\n}\nthread b {\n  s: kernel j\n}\n", []),  # one process: fine
    ("thread a process {\n  s: kernel k\n  s: kernel k2\n}\nthread b process {\n  t: kernel j\n}\n", []),
])
def test_sp062_a_stream_that_two_processes_use(threads, warned):
    loaded = load_text("device g\nstream s on g\nstream t on g\n" + threads, "procs.sched")
    assert loaded.program is not None
    found = [d for d in loaded.diagnostics if d.code is Code.SP062]
    assert [d.primary_span.line for d in found] == [line for line, _ in warned]
    assert all(text in d.message for d, (_, text) in zip(found, warned))


def test_an_interprocess_event_recorded_by_two_processes_is_not_sp061():
    """Each process opens an IPC event in its own context (cudaIpcOpenEventHandle), on its own
    device: records by two processes are compared each in its own process only."""
    head = "device g0 { runtime cuda }\ndevice g1 { runtime cuda }\nstream a on g0\nstream b on g1\nevent e\n"
    split = load_text(head + "thread p process {\n  a: record e\n}\nthread q process {\n  b: record e\n}\n", "ipc.sched")
    assert not [d for d in split.diagnostics if d.code is Code.SP061]
    one = load_text(head + "thread p process {\n  a: record e\n  b: record e\n}\n", "ipc.sched")
    assert [d.primary_span.line for d in one.diagnostics if d.code is Code.SP061] == [8]


def test_the_lowering_s_own_events_are_not_sp061():
    # One `wait_stream` in a loop records its implicit event on each device's stream in turn.
    loaded = load_text("device g[2] { runtime cuda }\nstream s on g[0]\nthread t {\n  for i in 0..2 {\n"
                       "    g[i].default: kernel k\n    s: wait_stream g[i].default\n  }\n}\n", "ws.sched")
    assert loaded.program is not None
    assert not [d for d in loaded.diagnostics if d.code is Code.SP061]


def test_sp010_comm_member_unknown():
    assert_error(HEAD + "comm c = { s, zz }\n", Code.SP010, 7, 15, 17)


@pytest.mark.parametrize("extra,line,column,message", [
    ("stream s on d\n", 7, 8, "`s` is declared twice"),
    ("event x\n", 7, 7, "`x` is declared twice"),
    ("alias xs = x\n", 7, 7, "`xs` is declared twice"),
    ("comm n = { s }\n", 7, 6, "`n` is declared twice"),
    ("device s\n", 1, 8, "`d` is declared twice"),
    ('spec "a"\nspec "b"\n', 8, 1, "two titles"),
    ("thread t {\n}\nthread t {\n}\n", 9, 8, "thread `t` is declared twice"),
    ("comm c = { s, s }\n", 7, 15, "in comm `c` twice"),
])
def test_sp011_duplicates(extra, line, column, message):
    if extra == "device s\n":
        source = "device d\ndevice d\n"
        assert_error(source, Code.SP011, 2, 8, 9, message)
        return
    diagnostic = assert_error(HEAD + extra, Code.SP011, line, column, message=message)
    if "declared twice" in message and "thread" not in message:
        assert diagnostic.annotations[1].label == "first declared here"


@pytest.mark.parametrize("lines,line,column,message", [
    (["x: kernel k"], 8, 3, "`x` is a buffer, not a stream"),
    (["e: record e"], 8, 3, "`e` is an event, not a stream"),
    (["s: record n"], 8, 13, "`n` is a notify, not an event"),
    (["s: await e"], 8, 12, "`e` is an event, not a notify"),
    (["sync x"], 8, 8, "`x` is a buffer, not a stream, an event or a device"),
    (["s: kernel k reads e"], 8, 21, "`e` is an event, not a buffer or an alias"),
    (["s: allreduce s x"], 8, 16, "`s` is a stream, not a comm"),
    (["s: kernel k reads xs[s]"], 8, 24, "`s` is a stream, not an integer variable"),
    (["notify e"], 8, 10, "`e` is an event, not a notify"),
])
def test_sp012_wrong_kind(lines, line, column, message):
    assert_error(thread(*lines), Code.SP012, line, column, message=message)


@pytest.mark.parametrize("line,help", [
    ("s: record n", "`s: notify n` signals a notify; `record` takes an event"),
    ("s: wait n", "`s: await n` waits for a notify; `wait` takes an event"),
    ("s: notify e", "`s: record e` records an event; `notify` takes a notify"),
    ("s: await e", "`s: wait e` waits for an event; `await` takes a notify"),
    ("s: wait_stream e", "`s: wait e` waits for an event; `wait_stream` takes a stream"),
    ("s: wait s", "`s: wait_stream s` waits for the work enqueued on `s` so far"),
    ("await e", "a thread waits for an event with `sync e`"),
])
def test_sp012_help_names_the_statement_for_the_kind(line, help):
    """The help offers the statement that takes the name's kind in the same role: a `record`
    of a notify is a `notify`, not an `await`."""
    diagnostic = assert_error(thread(line), Code.SP012, 8, line.rindex(line.split()[-1]) + 3)
    assert diagnostic.help.startswith(help)


def test_sp012_in_declarations():
    assert_error(HEAD + "buffer b 1MiB on s\n", Code.SP012, 7, 18, 19, "`s` is a stream, not a device")
    assert_error(HEAD + "stream s2 on x\n", Code.SP012, 7, 14, 15, "`x` is a buffer, not a device")
    assert_error(HEAD + "expect race on s\n", Code.SP012, 7, 16, 17, "not a buffer or an alias")
    assert_error(HEAD + "alias a = e\n", Code.SP012, 7, 11, 12)


@pytest.mark.parametrize("lines,line,column,end_column,message", [
    (["s: kernel k reads xs[2]"], 8, 24, 25, "index 2 is out of range for `xs[2]`"),
    (["s: kernel k reads xs[-1]"], 8, 24, 26, "index -1 is out of range"),
    (["for i in 0..3 {", "  s: kernel k writes xs[i]", "}"], 9, 27, 28, "index 2 is out of range for `xs[2]` (when i = 2)"),
    (["let a = 1", "s: kernel k reads xs[a + 1]"], 9, 24, 29, "index 2 is out of range for `xs[2]` (when a = 1)"),
])
def test_sp013_index_out_of_range(lines, line, column, end_column, message):
    assert_error(thread(*lines), Code.SP013, line, column, end_column, message)


def test_sp013_stream_and_event_arrays():
    head = HEAD + "stream ss[2] on d\nevent es[2]\n"
    assert_error(thread("ss[2]: kernel k", head=head), Code.SP013, 10, 6, 7, "out of range for `ss[2]`")
    assert_error(thread("s: record es[5]", head=head), Code.SP013, 10, 16, 17)
    assert_error(head + "comm c = { ss[3] }\n", Code.SP013, 9, 15, 16)


@pytest.mark.parametrize("lines,line,column,end_column,message", [
    (["s: kernel k reads x[0:2MiB]"], 8, 22, 30, "byte range [0:2097152] is outside `x` (1048576 bytes)"),
    (["s: kernel k reads x[1MiB:]", ], None, None, None, "is empty"),
    (["s: kernel k reads x[5:3]"], 8, 22, 27, "byte range [5:3] of `x` is empty"),
    (["s: kernel k reads x[-1:3]"], 8, 22, 28, "outside"),
    (["s: kernel k reads xs[1][512KiB:1MiB + 1]"], 8, 26, 43, "outside `xs[1]`"),
    (["for i in 0..2 {", "  s: kernel k reads x[i*1MiB:]", "}"], 9, 24, 33, "byte range [1048576:1048576] of `x` is "
     "empty (when i = 1)"),
])
def test_sp014_byte_range(lines, line, column, end_column, message):
    if line is None:
        line, column, end_column = 8, 22, 29
    assert_error(thread(*lines), Code.SP014, line, column, end_column, message)


def test_sp014_through_aliases():
    head = HEAD + "alias a = x[512KiB:]\n"
    assert_error(thread("s: kernel k reads a[0:512KiB]", head=head), Code.SP014, 9, 22) if False else None
    assert program(thread("s: kernel k reads a[0:512KiB]", head=head))
    assert_error(thread("s: kernel k reads a[0:512KiB + 1]", head=head), Code.SP014, 9, 22, message="outside `a` (524288 bytes)")
    assert_error(HEAD + "alias a = x[0:2MiB]\n", Code.SP014, 7, 12, 20)


@pytest.mark.parametrize("lines,line,column,message", [
    (["s: copy xs <- x"], 8, 11, "`xs` is an array of 2 buffers; pick one"),
    (["s: kernel k reads x[0]"], 8, 22, "`x` is not an array of buffers"),
    (["s: kernel k reads xs[0:1]"], 8, 23, "index it before slicing"),
    (["s[0]: kernel k"], 8, 5, "`s` is not an array"),
])
def test_sp015_indexing(lines, line, column, message):
    assert_error(thread(*lines), Code.SP015, line, column, message=message)


def test_sp015_array_without_index():
    head = HEAD + "stream ss[2] on d\n"
    diagnostic = assert_error(thread("ss: kernel k", head=head), Code.SP015, 9, 3, 5, "array of 2")
    assert diagnostic.help == "write `ss[0]`"  # (no variable in scope)
    in_array = assert_error(HEAD + "stream ss[2] on d\nthread r[2] {\n  for i in 0..2 {\n    ss: kernel k\n  }\n}\n",
                            Code.SP015, 10, 5, 7, "array of 2")
    assert in_array.help == "write `ss[i]`"  # (the variable bound last: pasted, it evaluates)
    reset = assert_error("device d\nstream a on d\nevent done[2]\nthread t {\n  a: reset done[0]\n}\n",
                         Code.SP017, 5, 3)
    assert reset.help == "declare it `event done[2] flag`"
    assert_error(HEAD + "alias a = xs\n", Code.SP015, 7, 11, 13)
    # `gpu.default` of a device array: the caret under the device, which needs the index
    assert_error("device gpu[2]\nthread t {\n  gpu.default: kernel k\n}\n", Code.SP015, 3, 3, 6, "array of 2")


def test_sp016_copy_between_host_buffers():
    head = HEAD + "buffer h1 1MiB on host\nbuffer h2 1MiB on host pinned\n"
    diagnostic = assert_error(thread("s: copy h1 <- h2", head=head), Code.SP016, 10, 3, 19)
    assert "host" in diagnostic.help


def test_sp017_reset_of_a_snapshot_event():
    diagnostic = assert_error(thread("s: reset e"), Code.SP017, 8, 3, 13, "`e` is a snapshot event")
    assert diagnostic.help == "declare it `event e flag`"
    assert program(thread("s: reset f", head=HEAD + "event f flag\n"))


def test_sp019_division_by_zero():
    assert_error(thread("let a = 1 / 0"), Code.SP019, 8, 15, 16)
    assert_error(thread("let a = 1 % (2 - 2)"), Code.SP019, 8, 16, 21)
    # in a loop: the iteration, and the loops around a `let` that the index reads
    looped = assert_error(thread("for e in 0..2 {", "  for i in 0..10 {", "    let q = 100 / (i - 5)", "  }", "}"),
                          Code.SP019, 10, 22, 27)
    assert looped.message == "division by zero (when i = 5, e = 0)"
    assert_error(thread("for i in 0..2 {", "  let a = 4 / i", "}"), Code.SP019, 9, 17, 18)


@pytest.mark.parametrize("source,line,column,message", [
    (HEAD + "buffer b 0B on d\n", 7, 10, "positive size"),
    (HEAD + "buffer b[0] 1MiB on d\n", 7, 10, "array size 0 is out of range"),
    (HEAD + "buffer b[200000] 1MiB on d\n", 7, 10, "array size 200000"),
    (HEAD + "stream ss[2 - 3] on d\n", 7, 11, "array size -1"),
    (thread("let a = 999999999999999999 * 10"), 8, 11, "integer overflow"),
])
def test_sp020_values_out_of_range(source, line, column, message):
    assert_error(source, Code.SP020, line, column, message=message)


def test_sp021_comms():
    head = HEAD + "device d2\ndevice d3\nstream s2 on d2\nstream s3 on d3\ncomm c = { s, s2 }\n"
    diagnostic = assert_error(thread("s3: allreduce c x", head=head), Code.SP021, 13, 3, 5,
                              "stream `s3` is not a member of comm `c`")
    assert diagnostic.annotations[1].label == "comm declared here"
    assert_error(thread("s: send c to s3 x", head=head), Code.SP021, 13, 16, 18, "`s3` is not a member")
    assert_error(thread("s: recv c from s3 x", head=head), Code.SP021, 13, 18, 20, "`s3` is not a member")
    assert_error(thread("s3: send c to s x", head=head), Code.SP021, 13, 3, 5)
    assert_error(HEAD + "comm c = { s, x }\n", Code.SP021, 7, 15, 16, "comm member `x` is a buffer, not a stream")


@pytest.mark.parametrize("decl,column", [
    ("buffer host 1MiB on d\n", 8), ("stream sync on d\n", 8), ("device host\n", 8), ("device all\n", 8),
    ("event for\n", 7), ("notify free\n", 8), ("alias await = x\n", 7), ("comm alloc = { s }\n", 6),
    ("buffer let 1MiB on d\n", 8),
])
def test_sp022_keywords_as_names(decl, column):
    assert_error(HEAD + decl, Code.SP022, 7, column, message="is a keyword")


def test_sp022_thread_named_by_a_keyword():
    assert_error(HEAD + "thread sync {\n}\n", Code.SP022, 7, 8, 12)


def test_sp023_alias_cycles():
    diagnostic = assert_error(HEAD + "alias a = b\nalias b = a\n", Code.SP023, 8, 11, 12, "refers to itself")
    assert diagnostic.help == "a -> b -> a"
    assert_error(HEAD + "alias a = a[0:1KiB]\n", Code.SP023, 7, 11, 12)
    cycle = "".join(f"alias a{i} = a{(i + 1) % 5000}\n" for i in range(5000))
    diagnostic = assert_error(HEAD + cycle, Code.SP023, 5006, 15, 17, "`a0` refers to itself")
    assert diagnostic.help == "a0 -> a1 -> a2 -> a3 -> a4 -> ... (4,991 more) -> a4996 -> a4997 -> a4998 -> a4999 -> a0"


def test_aliases_of_aliases_may_chain_thousands_deep():
    """Each alias names the next, declared after it: resolved from the far end, no deep recursion."""
    chain = "".join(f"alias a{i} = a{i + 1}\n" for i in range(5000)) + "alias a5000 = x[1KiB:2KiB]\n"
    lowered = program(HEAD + chain + "thread main {\n  s: kernel k writes a0[0:16B]\n}\n")
    (access,) = lowered.statements[0].accesses
    assert lowered.memories[access.memory].name == "x" and (access.start, access.end) == (1024, 1040)


@pytest.mark.parametrize("items,column,message", [
    ("compute 1 compute 2", 22, "engine `compute` is given twice"),
    ("compute 0", 12, "engine count 0 is out of range"),
    ("copy 5000", 12, "engine count 5000"),
    ("queues 0", 12, "`queues 0` is out of range"),
    ("launch 1us launch 2us", 23, "`launch` is given twice"),
    ("queues 1 queues 2", 21, "`queues` is given twice"),
])
def test_sp024_device(items, column, message):
    assert_error(f"device g {{ {items} }}\n", Code.SP024, 1, column, message=message)


# -- warnings -----------------------------------------------------------------------------


def test_sp050_wait_never_recorded():
    (w,) = warnings(thread("s: wait e", "s: kernel k reads x"))
    assert (w.code, w.primary_span.line, w.primary_span.column) == (Code.SP050, 8, 3)
    assert w.annotations[0].label == "this wait does nothing"
    (w,) = warnings(thread("s: wait f", head=HEAD + "event f flag\n"))
    assert w.annotations[0].label == "this wait blocks forever"


def test_sp051_stream_never_used():
    found = warnings(thread("s: kernel k", head=HEAD + "stream idle on d\nstream ss[3] on d\n"))
    assert [(w.code, w.primary_span.line, w.message) for w in found] == [
        (Code.SP051, 7, "stream `idle` is never used"),
        (Code.SP051, 8, "stream array `ss` is never used"),
    ]
    # one element used: the others of the array are not reported; a sync counts as use
    assert warnings(thread("s: kernel k", "sync idle", "ss[1]: kernel k",
                           head=HEAD + "stream idle on d\nstream ss[3] on d\n")) == []
    # no threads at all: nothing is unused yet
    assert warnings(HEAD) == []


def test_sp053_for_a_byte_range_of_a_tensor_too():
    source = ("device d\ntensor a 4KiB on d\nstream s on d\nthread t {\n  s: alloc a[0:512]\n  s: kernel k writes a\n"
              "  free a[0:10]\n}\n")
    found = [w for w in warnings(source) if w.code is Code.SP053]
    assert [(w.primary_span.line, w.message) for w in found] == [
        (5, "`alloc` and `free` act on the whole of `a`"), (7, "`alloc` and `free` act on the whole of `a`")]
    assert warnings(source.replace("a[0:512]", "a").replace("a[0:10]", "a")) == []


@pytest.mark.parametrize("statement, message", [
    ("s: copy x[0:512] <- x[256:768]", "the copy's source `x[256:768]` and destination `x[0:512]` overlap"),
    ("s: copy x[0:100] <- x[512:612]", None),
    ("s: copy x[0:100] <- x[512:1KiB]", "the copy moves 512 bytes of `x[512:1KiB]` into 100 of `x[0:100]`"),
    ("memcpy x[0:100] <- h", "the copy moves 1,024 bytes of `h` into 100 of `x[0:100]`"),
])
def test_sp073_a_copy_of_two_sizes_or_overlapping_ranges(statement, message):
    source = ("device d\nbuffer x 1KiB on d\nbuffer h 1KiB on host pinned\nstream s on d\nthread t {\n"
              f"  for i in 0..2 {{\n    {statement}\n  }}\n}}\n")
    found = [w for w in warnings(source) if w.code is Code.SP073]
    assert [w.message for w in found] == ([message] if message else [])  # (once per line, loops or not)


def test_sp052_await_never_notified():
    found = warnings(thread("s: await n", "await n"))
    assert [(w.code, w.primary_span.line, w.primary_span.column) for w in found] == [
        (Code.SP052, 8, 3), (Code.SP052, 9, 3)]


def test_sp053_alloc_or_free_of_part_of_a_buffer_takes_all_of_it():
    source = thread("s: alloc x[0:1KiB]", "for i in 0..3 {", "  free x[1KiB:2KiB]", "}", "s: kernel k reads x[4KiB:8KiB]")
    found = warnings(source)
    assert [(w.code, w.primary_span.line, w.primary_span.column) for w in found] == [
        (Code.SP053, 8, 12), (Code.SP053, 10, 10)]  # once per source line, loops or not
    assert found[0].annotations[0].label == "1024 of 1048576 bytes named, all 1048576 taken"
    statements = program(source).statements
    assert [(s.op, s.accesses[0].start, s.accesses[0].end) if s.accesses else (s.op,) for s in statements] == [
        (Op.ALLOC,), (Op.FREE, 0, 1 << 20), (Op.FREE, 0, 1 << 20), (Op.FREE, 0, 1 << 20),
        (Op.KERNEL, 4096, 8192)]


def test_warnings_once_per_source_line():
    found = warnings(thread("for i in 0..5 {", "  s: wait e", "}"))
    assert len(found) == 1


def test_warnings_do_not_block_the_program():
    loaded = load_text(thread("s: wait e"))
    assert loaded.program is not None and loaded.diagnostics[0].severity is Severity.WARNING


# -- every error, without cascades -------------------------------------------------------------


def all_errors(source: str, **kwargs):
    loaded = load_text(source, "t.sched", **kwargs)
    assert loaded.program is None, "expected errors"
    return [(d.code, d.primary_span.line, d.message) for d in loaded.diagnostics]


def test_lowering_reports_every_error_once():
    found = all_errors(
        "device d\n"                               # 1
        "stream s1 on d\nstream s2 on d\n"         # 2-3
        "buffer x 1MiB on gpu9\n"                  # 4: undeclared device; `x` is then skipped quietly
        "buffer y[0] 1MiB on d\n"                  # 5: array size; `y` too
        "event e\nbuffer w[2] 1MiB on d\n"          # 6
        "thread t {\n"                             # 7
        "  s3: kernel k\n"                         # 8
        "  s1: kernel k reads x, y[0]\n"           # 9: nothing new
        "  for i in 0..3 {\n"                      # 10
        "    s1: kernel k reads zz\n"              # 11: once, not three times
        "  }\n"
        "  let v = 1 / 0\n"                        # 13
        "  s1: kernel k reads w[v]\n"              # 14: `v` is broken: nothing new
        "  s1: reset e\n"                          # 15
        "}\n"
    )
    assert found == [
        (Code.SP010, 4, "`gpu9` is not declared"),
        (Code.SP020, 5, "buffer array size 0 is out of range"),
        (Code.SP010, 9, "`s3` is not declared"),
        (Code.SP010, 12, "`zz` is not declared"),
        (Code.SP019, 14, "division by zero"),
        (Code.SP017, 16, "`reset` needs a flag event; `e` is a snapshot event"),
    ]


def test_declaration_errors_do_not_cascade():
    found = all_errors(HEAD + "alias a = b\nalias b = a\nstream q on x\ncomm c = { q }\n"
                       "thread t {\n  q: kernel k reads a\n  s: allreduce c x\n}\n")
    assert [(code, line) for code, line, _ in found] == [(Code.SP023, 8), (Code.SP012, 9)]


def test_syntax_and_lowering_errors_together():
    found = all_errors(HEAD + "thread t {\n  s: kernal k\n  s9: kernel k\n}\n")
    assert [(code, line) for code, line, _ in found] == [(Code.SP002, 8), (Code.SP010, 9)]


def test_unrolling_limit_stops_lowering():
    found = all_errors(thread("s9: kernel k", "for i in 0..100 {", "  s: kernel k", "}"), max_statements=10)
    assert [code for code, _, _ in found] == [Code.SP010, Code.SP018]


def test_errors_in_one_choose_branch_are_found_in_the_first_variant_only():
    found = all_errors(thread("choose { s9: kernel a } or { s8: kernel b }"))
    assert found == [(Code.SP010, 8, "`s9` is not declared")]


def test_comm_members_are_capped_in_all(monkeypatch):
    import checker.lower as lowering

    monkeypatch.setattr(lowering, "MAX_COMM_MEMBERS", 50)
    source = "device g[8]\nstream c[8] on g\ncomm w[8] = { c }\n"  # 64 members
    assert_error(source, Code.SP020, 3, 1, message="more than 50 members in all")
    assert program("device g[7]\nstream c[7] on g\ncomm w[7] = { c }\n")  # 49


def test_a_range_of_a_range_is_relative_and_named_in_errors():
    from checker.frontend import load_text

    text = "device d\nbuffer x 1MiB on d\nstream s on d\nthread t {\n  s: kernel k writes x[100:200][%s]\n}\n"
    program = load_text(text % "10:30", "t.sched").program
    (access,) = program.statements[0].accesses
    assert (access.start, access.end) == (110, 130)
    (diagnostic,) = load_text(text % "0:300", "t.sched").diagnostics
    assert diagnostic.message == "byte range [0:300] is outside `x[100:200]` (100 bytes)"


def test_a_range_named_twice_is_one_access():
    from checker.frontend import load_text

    program = load_text("device d\nbuffer x 4KiB on d\nstream s on d\nthread t {\n"
                        "  s: kernel k reads x, x, x[0:1KiB] writes x[0:1KiB], x\n}\n", "t.sched").program
    assert [(a.start, a.end, a.write) for a in program.statements[0].accesses] == [
        (0, 4096, False), (0, 1024, False), (0, 1024, True), (0, 4096, True)]


def test_sp054_one_thread_calling_two_ranks_outside_a_group():
    head = "device g[2]\nbuffer x[2] 1MiB on g\nstream s[2] on g\ncomm w = { s }\n"
    loop = "thread t {\n  for i in 0..2 {\n    s[i]: allreduce w x[i]\n  }\n  s[0]: allreduce w x[0]\n}\n"
    found = warnings(head + loop)
    assert [(w.code, w.primary_span.line, w.primary_span.column) for w in found] == [(Code.SP054, 7, 5)]
    assert found[0].message == "thread `t` calls comm `w` for two of its ranks (`s[0]`, `s[1]`) outside a `group`"
    # grouped, or one thread per rank: nothing to say
    grouped = "thread t {\n  group {\n    s[0]: allreduce w x[0]\n    s[1]: allreduce w x[1]\n  }\n}\n"
    assert warnings(head + grouped) == []
    ranks = "thread r[2] {\n  s[r]: allreduce w x[r]\n  s[r]: send w to s[1 - r] x[r]\n}\n"
    assert [w.code for w in warnings(head + ranks)] == []


def test_a_comm_with_a_broken_member_still_reports_its_other_members():
    loaded = load_text("device d0\nstream s1 on d9\ncomm c = { s1, zz }\nthread t {\n  s1: kernel k\n}\n", "t.sched")
    found = [(d.code, d.primary_span.line, d.primary_span.column) for d in loaded.diagnostics]
    assert found == [(Code.SP010, 2, 14), (Code.SP010, 3, 16)]


def test_sp055_record_stream_on_the_allocation_stream_does_nothing():
    head = "device g { compute 2 }\ntensor act 1MiB on g\nstream main on g\nstream side on g\n"
    body = "thread t {\n  main: alloc act\n  side: kernel use reads act\n  RECORD\n  free act\n}\n"
    found = warnings(head + body.replace("RECORD", "main: record_stream act"))
    assert [(w.code, w.primary_span.line, w.primary_span.column) for w in found] == [(Code.SP055, 8, 3)]
    assert warnings(head + body.replace("RECORD", "side: record_stream act")) == []


def test_sp056_a_pool_that_two_threads_allocate_from_and_free_into():
    head = "device g { compute 2 }\ntensor a 1MiB on g\ntensor b 1MiB on g\nstream main on g\nstream side on g\n"
    loader = "thread loader {\n  main: alloc a\n  side: wait_stream main\n  side: kernel use reads a\n  FREE\n}\n"
    trainer = "thread trainer {\n  STREAM: alloc b\n}\n"
    found = warnings(head + loader.replace("FREE", "free a") + trainer.replace("STREAM", "main"))
    assert [(w.code, w.primary_span.line, w.primary_span.column) for w in found] == [(Code.SP056, 13, 3)]
    assert found[0].message == "thread `trainer` allocates `b` from the pool of `main`, into which thread `loader` frees `a`"
    assert [a.span.line for a in found[0].annotations] == [13, 10]
    # another stream's pool, or no free: nothing to say
    assert warnings(head + loader.replace("FREE", "free a") + trainer.replace("STREAM", "side")) == []
    assert warnings(head + loader.replace("FREE", "") + trainer.replace("STREAM", "main")) == []
    # a free whose reuse record_stream defers: the block comes back once side is done, to any thread
    deferred = loader.replace("FREE", "side: record_stream a\n  free a")
    assert [w.code for w in warnings(head + deferred + trainer.replace("STREAM", "main"))] == [Code.SP056]
    # a process has an allocator of its own: nothing is handed on between them
    assert warnings(head + loader.replace("FREE", "free a").replace("loader {", "loader process {")
                    + trainer.replace("STREAM", "main")) == []
    assert warnings(head + loader.replace("FREE", "free a")
                    + trainer.replace("STREAM", "main").replace("trainer {", "trainer process {")) == []
    # a process that frees into the pool first hides nothing between the other two threads
    three = ("device g\ntensor tp 1KiB on g\ntensor ta 1KiB on g\ntensor tc 1KiB on g\nstream s on g\n"
             "thread p process {\n  s: alloc tp\n  free tp\n}\nthread a {\n  s: alloc ta\n  free ta\n}\n"
             "thread c {\n  s: alloc tc\n  free tc\n}\n")
    assert [(w.code, w.primary_span.line) for w in warnings(three)] == [(Code.SP056, 11), (Code.SP056, 15)]


def test_sp064_a_free_that_waits_for_work_only_through_cuda_free():
    head = "device g { runtime cuda }\nbuffer x 1MiB on g\nbuffer h 1MiB on host\nstream t on g nonblocking\n"
    found = warnings(head + "thread main {\n  alloc x\n  t: kernel k writes x\n  free x\n}\n")
    assert [(w.code, w.primary_span.line, w.primary_span.column) for w in found] == [(Code.SP064, 8, 3)]
    assert found[0].message == "`free x` waits for `t: kernel k` only through cudaFree's implicit synchronization"
    assert "`sync t`" in found[0].help and "`t: free x`" in found[0].help
    assert [(a.span.line, a.primary) for a in found[0].annotations] == [(8, True), (7, False)]
    # waited for otherwise: a sync of its stream, of its event, a blocking copy after it on a
    # legacy stream (which waits for the blocking streams' work, not for nonblocking t's)
    for wait in ("sync t", "t: record e\n  sync e", "sync g", "sync all"):
        assert warnings(head + "event e\nthread main {\n  t: kernel k writes x\n  " + wait + "\n  free x\n}\n") == []
    legacy = "device g { runtime cuda }\nbuffer x 1MiB on g\nbuffer h 1MiB on host\nstream l on g legacy\n"
    for stream, warned in (("b on g", []), ("b on g nonblocking", [Code.SP064])):
        text = legacy + f"stream {stream}\nthread main {{\n  b: kernel k writes x\n  memcpy h <- x\n  free x\n}}\n"
        assert [w.code for w in warnings(text)] == warned
    # each lifetime on its own: a synced loop of alloc, kernel, free warns of nothing; an unsynced
    # first lifetime warns at its own free, not at the next one's
    loop = head + "thread main {\n  for i in 0..3 {\n    alloc x\n    t: kernel k writes x\n    sync t\n    free x\n  }\n}\n"
    assert warnings(loop) == []
    lives = head + ("stream m on g nonblocking\nthread main {\n  alloc x\n  t: kernel k1 writes x\n  free x\n"
                    "  alloc x\n  m: kernel k2 writes x\n  sync m\n  free x\n}\n")
    assert [(w.code, w.primary_span.line, w.message.split("`")[3]) for w in warnings(lives)] == [
        (Code.SP064, 9, "t: kernel k1")]
    # pinned host memory's cudaFreeHost too (CUDA documents no synchronization for it), on any
    # device's stream; not where the work is waited for
    pinned = head.replace("buffer h 1MiB on host", "buffer h 1MiB on host pinned")
    (found,) = warnings(pinned + "thread main {\n  t: copy h <- x\n  free h\n  sync all\n}\n")
    assert found.code is Code.SP064 and found.primary_span.line == 7
    assert found.message == "`free h` waits for `t: copy h <- x` only through cudaFreeHost's implicit synchronization"
    assert "`sync t`" in found.help and "free on its stream" not in found.help
    assert warnings(pinned + "thread main {\n  t: copy h <- x\n  sync t\n  free h\n}\n") == []
    # a collective whose peer the thread issues after the free: a sync would hang, so the help
    # offers the stream free alone
    ranks = ("device gpu[2] { runtime cuda }\nbuffer g[2] 4MiB on gpu\nstream c[2] on gpu\ncomm w = { c }\n"
             "thread main {\n  alloc g[0]\n  c[0]: allreduce w g[0] 2ms\n  free g[0]\n  c[1]: allreduce w g[1] 2ms\n}\n")
    (found,) = [w for w in warnings(ranks) if w.code is Code.SP064]
    assert "free on its stream (`c[0]: free g[0]`)" in found.help and "wait for the work first" not in found.help
    # stream-ordered memory is not synchronized by its free: the model reports the use after free
    assert warnings(head + "thread main {\n  t: alloc x\n  t: kernel k writes x\n  free x\n}\n") == []
    # not CUDA: a free is only a free
    assert warnings(head.replace(" { runtime cuda }", "") + "thread main {\n  t: kernel k writes x\n  free x\n}\n") == []


def test_sp066_a_use_that_waits_only_because_a_pageable_copy_blocks():
    head = "device g { runtime cuda }\nbuffer d 1MiB on g\nbuffer h 1MiB on host\nstream s on g\n"
    found = warnings(head + "thread main {\n  s: copy h <- d\n  host use reads h\n  sync s\n}\n")
    assert [(w.code, w.primary_span.line, w.primary_span.column) for w in found] == [(Code.SP066, 7, 3)]
    assert found[0].message == ("`host use` waits for `s: copy h <- d` only because the copy to pageable "
                                "memory blocks the thread")
    assert "`sync s`" in found[0].help
    assert [(a.span.line, a.primary) for a in found[0].annotations] == [(7, True), (6, False)]
    # a later task of the thread that uses the bytes (an upload from them is staged on the host)
    assert [w.code for w in warnings(head + "buffer e 1MiB on g\nthread main {\n  s: copy h <- d\n"
                                            "  s: kernel k writes d\n  host use writes h\n  sync s\n}\n")] == [Code.SP066]
    # waited for otherwise: a sync of the stream or of an event after the copy, or a use of other bytes
    for between in ("sync s", "s: record e\n  sync e", "sync g"):
        assert warnings(head + "event e\nthread main {\n  s: copy h <- d\n  " + between + "\n  host use reads h\n}\n") == []
    assert warnings(head + "buffer o 1MiB on host\nthread main {\n  s: copy h <- d\n  host use reads o\n  sync s\n}\n") == []
    # a later use past one that stream order covers
    assert [(w.code, w.primary_span.line) for w in warnings(
        head + "thread main {\n  s: copy h <- d\n  s: callback cb reads h\n  host use reads h\n  sync s\n}\n")] == [
        (Code.SP066, 8)]
    # a host use of the copy's source, written by a kernel before it on its stream (cusan-tests
    # send_mca_user_malloc_w_r_nok): the copy's return is the only wait for that kernel too
    (found,) = warnings(head + "thread main {\n  s: kernel k writes d\n  s: copy h <- d\n  host send reads d\n}\n")
    assert (found.code, found.primary_span.line) == (Code.SP066, 8)
    assert found.message == ("`host send` waits for `s: kernel k` only because `s: copy h <- d`, behind it on `s`, "
                             "to pageable memory blocks the thread")
    assert [(a.span.line, a.primary) for a in found.annotations] == [(8, True), (6, False), (7, False)]
    assert warnings(head + "thread main {\n  s: kernel k writes d\n  s: copy h <- d\n  sync s\n  host send reads d\n}\n") == []
    # pinned memory does not block; `memcpy` (cudaMemcpy) promises the wait; not CUDA: the contract's rule
    assert warnings(head.replace("on host", "on host pinned") + "thread main {\n  s: copy h <- d\n  sync s\n"
                    "  host use reads h\n}\n") == []
    assert warnings(head + "thread main {\n  memcpy h <- d\n  host use reads h\n  s: kernel k reads d\n  sync s\n}\n") == []
    assert warnings(head.replace(" { runtime cuda }", "") + "thread main {\n  s: copy h <- d\n  host use reads h\n"
                    "  sync s\n}\n") == []


def test_sp057_a_send_or_recv_to_its_own_stream():
    head = HEAD + "device d2\nstream s2 on d2\ncomm c = { s, s2 }\n"
    found = warnings(thread("s: send c to s x\n  s: recv c from s x\n  s2: kernel k", head=head))
    assert [(w.code, w.primary_span.line, w.primary_span.column) for w in found] == [
        (Code.SP057, 11, 16), (Code.SP057, 12, 18)]
    assert found[0].message == "`send` names its own stream as the peer"
    grouped = thread("group {\n    s: send c to s x\n    s: recv c from s x\n  }\n  s2: kernel k", head=head)
    assert warnings(grouped) == []


def test_sp058_sync_all_in_a_thread_that_drives_one_rank():
    head = "device gpu[2]\nbuffer x[2] 1MiB on gpu\nstream s[2] on gpu\ncomm world = { s }\n"
    found = warnings(head + "thread rank[2] {\n  s[rank]: allreduce world x[rank]\n  sync all\n}\n")
    assert [(w.code, w.primary_span.line, w.primary_span.column) for w in found] == [(Code.SP058, 7, 3)]
    assert found[0].message == ("`sync all` in thread `rank[0]`, which drives the rank on `gpu[0]`, also waits for "
                                "the other ranks' devices")
    # one body for every rank: the help names the device as that body writes it
    assert "write `sync gpu[rank]`" in found[0].help
    own = head + "thread rank[2] {\n  s[rank]: allreduce world x[rank]\n  sync gpu[rank]\n}\n"
    assert warnings(own) == []
    # the help's `gpu[0]` applied literally to the body: rank 1 then waits for rank 0's device
    other = warnings(own.replace("sync gpu[rank]", "sync gpu[0]"))
    assert [(w.code, w.primary_span.line) for w in other] == [(Code.SP058, 7)]
    assert other[0].message == ("`sync gpu[0]` in thread `rank[1]`, which drives the rank on `gpu[1]`, waits for "
                                "another rank's device")
    assert "write `sync gpu[rank]`" in other[0].help
    # threads that are not one array: the concrete device
    two = warnings(head + "thread a {\n  s[0]: allreduce world x[0]\n  sync all\n}\n"
                   "thread b {\n  s[1]: allreduce world x[1]\n}\n")
    assert [(w.code, w.primary_span.line) for w in two] == [(Code.SP058, 7)] and "write `sync gpu[0]`" in two[0].help
    one_thread = head + "thread t {\n  group {\n    s[0]: allreduce world x[0]\n    s[1]: allreduce world x[1]\n  }\n  sync all\n}\n"
    assert warnings(one_thread) == []


def test_a_thread_named_where_a_stream_goes_is_said_to_be_a_thread():
    loaded = load_text("device d\nbuffer x 1MiB on d\nthread t {\n  t: kernel k writes x\n}\n")
    (found,) = loaded.diagnostics
    assert (found.code, found.message) == (Code.SP012, "`t` is a thread, not a stream")
    assert found.primary_span.line == 4


def test_byte_ranges_that_cut_memory_too_finely_are_sp018(monkeypatch):
    # Every kernel writes a range of its own that overlaps its neighbours': each cut adds a
    # piece, and each statement's mask reaches its highest one (100,000 of them took 2.8 GB).
    import checker.lower

    monkeypatch.setattr(checker.lower, "MAX_SEGMENT_BYTES", 10_000)
    text = ("device d\nstream s[2] on d\nbuffer x 1TiB on d\nthread main {\n"
            "  for i in 0..40000 { s[i % 2]: kernel k writes x[i*7:i*7+13] }\n}\n")
    loaded = load_text(text)
    assert loaded.program is None
    (found,) = loaded.diagnostics
    assert found.code is Code.SP018 and found.primary_span.line == 3
    assert "name 80,000 pieces of memory (`x` into 80,000)" in found.message
    assert load_text(text.replace("0..40000", "0..100")).program is not None  # (a few pieces: not counted)
    # an array of buffers, one piece each, is said as such (its help: fewer elements)
    monkeypatch.setattr(checker.lower, "MAX_SEGMENT_BYTES", 100)
    array = load_text("device d\nstream s on d\nbuffer y[400] 1KiB on d\nthread main {\n"
                      "  for i in 0..400 { s: kernel k writes y[i] }\n}\n")
    (found,) = array.diagnostics
    assert "name 400 pieces of memory (400 buffers, none cut)" in found.message and "fewer buffer elements" in found.help


TWO_COMMS = ("device gpu[2]\nbuffer a[2] 1MiB on gpu\nbuffer b[2] 1MiB on gpu\nstream sa[2] on gpu\n"
             "stream sb[2] on gpu\ncomm c1 = { sa }\ncomm c2 = { sb }\nevent e0\nevent e1\n")


@pytest.mark.parametrize("r0, r1, warned", [
    (["sa[0]: allreduce c1 a[0]", "sb[0]: allreduce c2 b[0]"],
     ["sb[1]: allreduce c2 b[1]", "sa[1]: allreduce c1 a[1]"], [(Code.SP069, 16, 3)]),  # opposite orders
    (["sa[0]: allreduce c1 a[0]", "sb[0]: allreduce c2 b[0]"],
     ["sa[1]: allreduce c1 a[1]", "sb[1]: allreduce c2 b[1]"], []),                     # one order
    (["sa[0]: allreduce c1 a[0]", "sa[0]: allreduce c2 b[0]"],
     ["sa[1]: allreduce c2 b[1]", "sa[1]: allreduce c1 a[1]"], []),  # one stream on both: SP201 decides it
    (["sa[0]: allreduce c1 a[0]", "sa[0]: record e0", "sb[0]: wait e0", "sb[0]: allreduce c2 b[0]"],
     ["sb[1]: allreduce c2 b[1]", "sb[1]: record e1", "sa[1]: wait e1", "sa[1]: allreduce c1 a[1]"],
     []),  # ordered by events on both ranks: the crossed wait is SP201's
    (["group {\n    sa[0]: allreduce c1 a[0]\n    sb[0]: allreduce c2 b[0]\n  }"],
     ["group {\n    sb[1]: allreduce c2 b[1]\n    sa[1]: allreduce c1 a[1]\n  }"],
     [(Code.SP069, 19, 5)]),  # a group launches comm after comm, in the order written
])
def test_sp069_two_comms_called_in_opposite_orders(r0, r1, warned):
    head = TWO_COMMS.replace("comm c2 = { sb }", "comm c2 = { sa }") if "sa[0]: allreduce c2" in r0[-1] else TWO_COMMS
    text = head + "thread r0 process {\n  " + "\n  ".join(r0) + "\n  sync gpu[0]\n}\n" \
        + "thread r1 process {\n  " + "\n  ".join(r1) + "\n  sync gpu[1]\n}\n"
    found = [w for w in warnings(text) if w.code is Code.SP069]
    assert [(w.code, w.primary_span.line, w.primary_span.column) for w in found] == warned
    if warned:
        first = 11 if warned[0][1] == 16 else 12  # (inside the group)
        assert found[0].message == ("comms `c1` and `c2` are called in opposite orders: thread `r0` calls `c1` first "
                                    f"(line {first}), thread `r1` calls `c2` first (line {warned[0][1]})")


THREE_COMMS = ("device gpu[3]\nbuffer x[3] 1MiB on gpu\nbuffer y[3] 1MiB on gpu\n"
               "stream sab0 on gpu[0]\nstream sab1 on gpu[1]\nstream sbc1 on gpu[1]\nstream sbc2 on gpu[2]\n"
               "stream sca2 on gpu[2]\nstream sca0 on gpu[0]\n"
               "comm ab = { sab0, sab1 }\ncomm bc = { sbc1, sbc2 }\ncomm ca = { sca2, sca0 }\n"
               "thread r0 {\n  sab0: allreduce ab x[0]\n  sca0: allreduce ca y[0]\n}\n"
               "thread r1 {\n  sbc1: allreduce bc x[1]\n  sab1: allreduce ab y[1]\n}\n"
               "thread r2 {\n  CALLS\n}\n")


def test_sp069_three_comms_called_in_a_cycle():
    # no two threads call the same two comms crossed, but the three orders close a cycle
    crossed = THREE_COMMS.replace("CALLS", "sca2: allreduce ca x[2]\n  sbc2: allreduce bc y[2]")
    (found,) = [w for w in warnings(crossed) if w.code is Code.SP069]
    assert found.message.startswith("comms `ab`, `ca`, `bc` are called in a cycle of orders: `r0` calls `ab` "
                                    "before `ca` (line 15)"), found.message
    assert sorted(a.span.line for a in found.annotations) == [15, 19, 23]
    one_order = THREE_COMMS.replace("CALLS", "sbc2: allreduce bc y[2]\n  sca2: allreduce ca x[2]")
    assert [w for w in warnings(one_order) if w.code is Code.SP069] == []


ONE_RANK = ("device gpu[2]\nbuffer a[2] 1MiB on gpu\nbuffer b[2] 1MiB on gpu\nstream c[2] on gpu\ncomm w = { c }\n"
            "notify go\nevent e\nthread r1 {\n  c[1]: allreduce w a[1]\n  c[1]: allreduce w b[1]\n}\n")


@pytest.mark.parametrize("first, second, warned", [
    ("", "", True),                                   # nothing between the two threads
    ("\n  notify go", "await go\n  ", False),          # a hand-off
    ("\n  c[0]: record e", "sync e\n  ", False),       # a host wait on the other's event
    ("\n  c[0]: kernel k writes a[0]", "sync all\n  ", False),
    ("\n  notify go", "await relayed\n  ", False),     # a hand-off through a third thread
])
def test_sp071_one_rank_called_by_two_threads_that_nothing_orders(first, second, warned):
    text = ONE_RANK + "notify relayed\nthread relay {\n  await go\n  notify relayed\n}\n" * ("relayed" in second) + (
        f"thread ta {{\n  c[0]: allreduce w a[0]{first}\n}}\n"
                       f"thread tb {{\n  {second}c[0]: allreduce w b[0]\n}}\n")
    found = [w for w in warnings(text) if w.code is Code.SP071]
    assert bool(found) == warned, found
    if warned:
        assert found[0].message == ("threads `ta` and `tb` both call comm `w` for rank `c[0]`, and nothing orders "
                                    "their calls")
        assert [a.span.line for a in found[0].annotations] == [16, 13]


@pytest.mark.parametrize("runtime, handed_over, warned", [
    ("cann", False, True),    # HCCL: a device's calls of all comms in one order, from one thread at a time
    ("cann", True, False),
    ("cuda", False, False),   # NCCL asks that of one communicator only
])
def test_sp071_under_cann_two_threads_calling_two_comms_on_one_device(runtime, handed_over, warned):
    text = (f"device npu[2] {{ runtime {runtime} }}\nbuffer g[2] 4MiB on npu\nbuffer h[2] 4MiB on npu\n"
            "stream c[2] on npu\nstream d[2] on npu\ncomm a = { c }\ncomm b = { d }\nnotify go[2]\n"
            "thread ta[2] {\n  c[ta]: allreduce a g[ta]\n" + "  notify go[ta]\n" * handed_over + "}\n"
            "thread tb[2] {\n" + "  await go[tb]\n" * handed_over + "  d[tb]: allreduce b h[tb]\n}\n")
    found = [w for w in warnings(text) if w.code is Code.SP071]
    assert bool(found) == warned, found
    if warned:
        assert found[0].message == ("threads `ta[0]` and `tb[0]` call comms `a` and `b` on device `npu[0]`, and "
                                    "nothing orders their calls")


@pytest.mark.parametrize("lines, warned", [
    (["no race", "no race"], ["repeats"]),
    (["race on x", "race on x"], ["repeats"]),
    (["no race", "race on x"], ["cannot both"]),
    (["race", "no race"], ["cannot both"]),
    (["no deadlock", "deadlock"], ["cannot both"]),
    (["use-after-free on x", "no use-after-free"], ["cannot both"]),
    (["race on x", "race on y"], []),
    (["race on x", "use-after-free on x", "no deadlock", "no mismatch"], []),
    (["makespan <= 1ms", "makespan <= 2ms"], []),
    (["makespan <= 1ms", "makespan <= 1000us"], ["repeats"]),
])
def test_repeated_and_contradicting_expectations_are_sp067(lines, warned):
    text = ("device d\nbuffer x 1MiB on d\nbuffer y 1MiB on d\nstream s on d\n"
            "thread main {\n  s: kernel k writes x, y\n}\n") + "".join(f"expect {line}\n" for line in lines)
    loaded = load_text(text, "<expect>")
    found = [d for d in loaded.diagnostics if d.code is Code.SP067]
    assert ["repeats" if "repeats an earlier" in d.message else "cannot both" for d in found] == warned
    assert all(d.severity is Severity.WARNING and d.primary_span.line == 7 + len(lines) for d in found)


@pytest.mark.parametrize("statement, words", [
    ("await e", "a thread waits for an event with `sync e`"),
    ("s: wait n", "`s: await n` waits for a notify"),
    ("sync x", "name the stream whose work uses the memory"),
    ("sync q", "`stream q on DEVICE` or `event q` or `device q`"),
    ("q[1]: kernel k", "`stream q[N] on DEVICE`"),
    ("s: kernel k reads ys[0]", "`buffer ys[N] SIZE on DEVICE`"),
    ("s: kernel k reads ys[0:4]", "`buffer ys SIZE on DEVICE`"),
])
def test_a_name_of_the_wrong_kind_or_undeclared_is_told_what_to_write(statement, words):
    loaded = load_text("device d\nstream s on d\nevent e\nnotify n\nbuffer x 1MiB on d\n"
                       f"thread t {{\n  s: record e\n  {statement}\n}}\n")
    (diagnostic,) = [d for d in loaded.diagnostics if d.code in (Code.SP010, Code.SP012)]
    assert words in diagnostic.help, diagnostic.help


def test_a_comm_across_cuda_and_cann_devices_is_sp074_once_per_comm():
    source = ("device gpu { runtime cuda }\ndevice npu { runtime cann }\nbuffer a 1MiB on gpu\n"
              "buffer b 1MiB on npu\nstream g on gpu\nstream n on npu\ncomm c = { g, n }\nthread t {\n"
              "  group {\n    g: allreduce c a\n    n: allreduce c b\n  }\n  group {\n    g: allreduce c a\n"
              "    n: allreduce c b\n  }\n}\n")
    (found,) = [w for w in warnings(source) if w.code is Code.SP074]
    assert found.message == "comm `c` has members on a CUDA device (`gpu`) and on a CANN device (`npu`)"
    assert found.primary_span.line == 7
    for same in (source.replace("{ runtime cann }", "{ runtime cuda }"), source.replace(" { runtime cuda }", "")):
        assert not [w for w in warnings(same) if w.code is Code.SP074]


def test_a_flag_event_on_a_cuda_device_is_sp072_once_per_event():
    cuda = "device d { runtime cuda }\nstream s on d\nstream s2 on d\nbuffer x 1MiB on d\nevent f flag\n"
    body = "thread t {\n  s2: wait f\n  s: kernel k writes x\n  s: record f\n  s2: wait f\n}\n"
    found = [w for w in warnings(cuda + body) if w.code is Code.SP072]
    assert [(w.primary_span.line, w.message) for w in found] == [(7, "`f` is a flag event, which no CUDA event is: under CUDA it stands for a flag in memory")]
    assert "declare `event f`" in found[0].help
    assert not [w for w in warnings(cuda.replace(" { runtime cuda }", "") + body) if w.code is Code.SP072]
    assert not [w for w in warnings(cuda.replace("event f flag", "event f") + body) if w.code is Code.SP072]


def test_sp050_on_a_legacy_stream_says_the_wait_still_orders_the_blocking_streams():
    head = "device d { runtime cuda }\nstream s on d\nstream l on d legacy\nevent e\n"
    for stream, label in (("s", "this wait does nothing"), ("l", "the legacy stream still orders")):
        (found,) = [w for w in warnings(head + f"thread t {{\n  {stream}: wait e\n}}\n") if w.code is Code.SP050]
        assert label in found.annotations[0].label


def test_an_event_of_two_processes_is_sp075_once_per_event_array():
    source = ("device gpu[2]\nstream s[2] on gpu\nbuffer x[2] 1MiB on gpu\nevent done\nevent own[2]\n"
              "thread rank[2] process {\n  s[rank]: kernel k writes x[rank]\n  s[rank]: record done\n"
              "  s[rank]: record own[rank]\n  sync done\n  sync own[rank]\n}\n")
    (found,) = [w for w in warnings(source) if w.code is Code.SP075]
    assert found.message == "event `done` is used by process `rank[0]` and by process `rank[1]`"
    assert found.primary_span.line == 8 and "`done[rank]`" in found.help
    assert not [w for w in warnings(source.replace(" process {", " {")) if w.code is Code.SP075]
    shared = source.replace("own[rank]", "own[0]")
    (element,) = [w for w in warnings(shared) if w.code is Code.SP075 and "own" in w.message]
    assert "element (`own[rank]`)" in element.help


def test_a_sync_on_an_event_every_rank_records_is_told_to_give_each_its_own():
    from checker.analyze import check_loaded

    report = check_loaded(load_text("device gpu[2]\nstream s[2] on gpu\nbuffer x[2] 1MiB on gpu\nevent done\n"
                                    "thread rank[2] {\n  s[rank]: kernel k writes x[rank]\n  s[rank]: record done\n"
                                    "  sync done\n  host use reads x[rank]\n}\n"))
    (race,) = report.findings
    assert "`rank[1]` records the event too" in race.help and "(`done[rank]`, declared `event done[N]`)" in race.help


def test_sp021_names_the_member_stream_as_the_block_names_its_own():
    source = ("device gpu[2]\nbuffer g[2] 1MiB on gpu\nstream c[2] on gpu\nstream k[2] on gpu\ncomm w = { c }\n"
              "thread r[2] {\n  k[r]: allreduce w g[r]\n}\n")
    diagnostic = assert_error(source, Code.SP021, 7, 3)
    assert "call it on `c[r]`" in diagnostic.help
    diagnostic = assert_error(source.replace("k[r]: allreduce", "k[1 - r]: allreduce"), Code.SP021, 7, 3)
    assert "call it on `c[1 - r]`" in diagnostic.help


def test_sp075_between_two_processes_of_their_own_names_no_rank():
    source = ("device gpu\nstream s on gpu\nstream t on gpu\nevent done\nnotify go\n"
              "thread a process {\n  s: kernel k\n  s: record done\n  notify go\n}\n"
              "thread b process {\n  await go\n  t: wait done\n}\n")
    (found,) = [w for w in warnings(source) if w.code is Code.SP075]
    assert "give each process its own event, one declared per process" in found.help and "rank" not in found.help


def test_sp063_between_two_processes_of_their_own_names_no_rank():
    source = ("device gpu0\nbuffer staging 1MiB on host pinned\nbuffer w 1MiB on gpu0\nstream s on gpu0\n"
              "thread trainer process {\n  s: copy staging <- w\n}\nthread writer process {\n  host wr reads staging\n}\n")
    (found,) = [w for w in warnings(source) if w.code is Code.SP063]
    assert "give each process its own buffer, one declared per process" in found.help and "rank" not in found.help


def test_sp021_under_cann_offers_one_in_flight_which_takes_the_call_on_another_stream():
    # HCCL takes the stream per call and asks only that a rank's calls run one at a time
    source = ("device npu[2] { runtime cann }\nbuffer g[2] 4MiB on npu\nbuffer h[2] 8MiB on npu\n"
              "stream c[2] on npu\nstream side[2] on npu\ncomm w = { c }\nevent e[2]\n"
              "thread rank[2] process {\n  c[rank]: allreduce w g[rank]\n  c[rank]: record e[rank]\n"
              "  side[rank]: wait e[rank]\n  side[rank]: allgather w h[rank] <- g[rank]\n  sync all\n}\n")
    diagnostic = assert_error(source, Code.SP021, 12, 3, 13, "stream `side[0]` is not a member of comm `w`")
    assert "call it on `c[rank]`, or, as HCCL takes the stream per call, declare the comm `one_in_flight`" in diagnostic.help
    fixed = load_text(source.replace("comm w = { c }", "comm w = { c } one_in_flight"), "t.sched")
    assert not fixed.diagnostics and check_loaded(fixed).findings == ()
    unordered = load_text(source.replace("comm w = { c }", "comm w = { c } one_in_flight")
                          .replace("  side[rank]: wait e[rank]\n", ""), "t.sched")
    assert {f.buffer for f in check_loaded(unordered).findings} >= {"w"}  # (the comm's state of a rank)
