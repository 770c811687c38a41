"""The parser: lexical rules, every declaration and statement form, syntax diagnostics and
the example table, input that is not text, and limits. Spans are 1-based, end exclusive."""

from __future__ import annotations

import pytest

from checker import ast
from checker.codes import Code, Severity
from checker.diagnostics import SpecError
from checker.frontend import load_bytes, load_text
from checker.parse import (
    MAX_NESTING, MAX_OPERATORS_DEEP, PRIORITY_HIGH, PRIORITY_LOW, SYNTAX_EXAMPLES, _example_table, parse,
)

HEAD = "device d { compute 1 }\nstream s on d\nbuffer x 1MiB on d\n"


def thread(*lines: str) -> str:
    return HEAD + "thread t {\n" + "".join(f"  {line}\n" for line in lines) + "}\n"


def errors_of(source: str | bytes, **kwargs):
    loaded = load_bytes(source, "t.sched", **kwargs) if isinstance(source, bytes) else load_text(source, "t.sched", **kwargs)
    assert loaded.program is None, "expected an error"
    return [d for d in loaded.diagnostics if d.severity is Severity.ERROR]


def first_error(source: str | bytes, **kwargs):
    return errors_of(source, **kwargs)[0]


def only_error(source: str | bytes, **kwargs):
    loaded = load_bytes(source, "t.sched", **kwargs) if isinstance(source, bytes) else load_text(source, "t.sched", **kwargs)
    assert loaded.program is None, "expected an error"
    errors = [d for d in loaded.diagnostics if d.severity is Severity.ERROR]
    assert len(errors) == 1, errors
    return errors[0]


def assert_error(source, code: Code, line: int | None, column: int | None, end_column: int | None = None,
                 message: str | None = None):
    diagnostic = only_error(source)
    assert diagnostic.code is code, (diagnostic.code, diagnostic.message)
    span = diagnostic.primary_span
    if line is None:
        assert span is None
    else:
        assert (span.line, span.column) == (line, column), (span, diagnostic.message)
        if end_column is not None:
            assert span.end_column == end_column, (span, diagnostic.message)
    if message is not None:
        assert message in diagnostic.message, diagnostic.message
    return diagnostic


def decls(source: str):
    return parse(source).declarations


# -- lexical rules ------------------------------------------------------------------------


def test_comments_everywhere():
    source = (
        "# a comment on the first line\n"
        "\n"
        "device d { compute 1 }   # after a declaration\n"
        "# own line\n"
        "\n"
        "# between blank lines\n"
        "\n"
        "stream s on d # trailing\n"
        "thread t { # after the brace\n"
        "  # inside a thread\n"
        "  s: kernel k # after a statement\n"
        "\n"
        "  # before the closing brace\n"
        "} # after the closing brace\n"
        "# at the end, without a newline"
    )
    loaded = load_text(source)
    assert loaded.program is not None, loaded.diagnostics
    assert [s.name for s in loaded.program.statements] == ["k"]
    assert loaded.program.statements[0].span.line == 11


def test_crlf_tabs_and_no_trailing_newline():
    source = "device d {\tcompute 1 }\r\nstream s on d\r\n\r\nthread t {\r\n\ts: kernel k\t1ms\r\n\tsync\ts\r\n}"
    loaded = load_text(source)
    assert loaded.program is not None, loaded.diagnostics
    first, second = loaded.program.statements
    assert first.duration == 1_000_000 and first.span.line == 5 and first.span.column == 2
    assert second.op.value == "sync"


def test_crlf_error_position():
    source = "device d\r\nstream s on d\r\nthread t {\r\n  s: kernel k reads\r\n}\r\n"
    assert_error(source, Code.SP002, 4, 20, message="`reads` and `writes` need at least one buffer")


def test_empty_thread_body_in_every_form():
    for body in ("thread t {}", "thread t {\n}", "thread t {\n\n\n}", "thread t { # c\n}"):
        loaded = load_text("device d\n" + body)
        assert loaded.program is not None, (body, loaded.diagnostics)
        assert loaded.program.threads[0].statements == ()


def test_statement_on_the_brace_line():
    loaded = load_text("device d\nstream s on d\nthread t { s: kernel k }\n")
    assert [s.name for s in loaded.program.statements] == ["k"]


def test_line_continuation():
    loaded = load_text("device d\nstream s on d\nbuffer x 1MiB on d\nthread t {\n  s: kernel k \\\n    reads x 1ms\n}\n")
    assert loaded.program.statements[0].accesses[0].written_as == "x"


@pytest.mark.parametrize("text,value", [
    ("64B", 64), ("4KiB", 4096), ("4MiB", 4 << 20), ("2GiB", 2 << 30), ("1TiB", 1 << 40),
    ("4KB", 4000), ("4MB", 4_000_000), ("2GB", 2_000_000_000), ("1TB", 10**12),
])
def test_size_units(text, value):
    (buffer,) = decls(f"buffer b {text} on host\n")
    assert buffer.size.value == value


@pytest.mark.parametrize("text,value", [
    ("7ns", 7), ("10us", 10_000), ("3.5ms", 3_500_000), ("2s", 2_000_000_000), ("0.5us", 500),
    ("0ms", 0), ("1.25s", 1_250_000_000), (".5ms", 500_000), ("5.ms", 5_000_000), ("007.50us", 7_500),
])
def test_duration_units(text, value):
    loaded = load_text(thread(f"s: kernel k {text}"))
    assert loaded.program.statements[0].duration == value


def test_keywords_usable_as_names_where_unambiguous():
    source = (
        "device compute { compute 1 }\n"
        "buffer copy 1MiB on compute\n"
        "buffer reads 1MiB on compute\n"
        "stream comm on compute\n"
        "stream kernel on compute\n"
        "event flag flag\n"
        "thread main {\n"
        "  kernel: kernel kernel reads reads writes copy\n"
        "  comm: record flag\n"
        "}\n"
    )
    loaded = load_text(source)
    assert loaded.program is not None, loaded.diagnostics
    statement = loaded.program.statements[0]
    assert statement.name == "kernel"
    assert [a.written_as for a in statement.accesses] == ["reads", "copy"]
    assert loaded.program.events[0].flag


def test_names_that_start_with_a_keyword():
    source = (
        "device d\nstream hostile on d\nstream syncer on d\nstream free_runner on d\n"
        "thread t {\n  hostile: kernel k\n  syncer: kernel k\n  free_runner: kernel k\n  sync allx\n}\n"
    )
    assert_error(source, Code.SP010, 9, 8, 12, "`allx` is not declared")


@pytest.mark.parametrize("source,column,word", [
    ("s: kernelx a", 6, "kernelx"),
    ("s: recordev", 6, "recordev"),
    ("s: copyx <- x", 6, "copyx"),
])
def test_keyword_prefix_is_not_a_keyword(source, column, word):
    diagnostic = assert_error(thread(source), Code.SP002, 5, column)
    assert diagnostic.annotations[0].label == f"unexpected `{word}`"


def test_keyword_prefix_in_declarations():
    assert_error("event e flagged\n", Code.SP002, 1, 9, 16, "an event is declared")
    assert_error("device d { h2d2 }\n", Code.SP002, 1, 12, 16)
    assert_error("expect no races\n", Code.SP002, 1, 11, 16, "unknown word `races`: did you mean `race`?")


# -- declarations -------------------------------------------------------------------------


def test_every_declaration_parses_to_its_node():
    source = (
        'spec "title here"\n'
        "device d { compute 2 copy 1 h2d 1 d2h 1 d2d 1 comm 1 launch 2us queues 4 }\n"
        "device e\n"
        "buffer h[2] 4MiB on host pinned\n"
        "buffer x 1MiB on d\n"
        "alias a = x[0:512KiB]\n"
        "stream s[3] on d priority high legacy\n"
        "stream t on d priority low nonblocking\n"
        "stream u on e priority -3\n"
        "event ev[2] flag\n"
        "event plain\n"
        "notify n[4]\n"
        "comm c = {\n  s[0],\n  u\n}\n"
        "thread main {\n}\n"
        "expect no race\nexpect race\nexpect race on x\nexpect no deadlock\nexpect deadlock\n"
        "expect no use-after-free\nexpect use-after-free\nexpect use-after-free on a\n"
        "expect makespan <= 1.5ms\n"
        "expect no mismatch\nexpect mismatch\n"
    )
    title, d, e, h, x, a, s, t, u, ev, plain, n, c, main, *expects = decls(source)
    assert isinstance(title, ast.SpecTitle) and title.title == "title here"
    assert [(i.engine, i.count) for i in d.items if isinstance(i, ast.EngineItem)] == [
        ("compute", 2), ("copy", 1), ("h2d", 1), ("d2h", 1), ("d2d", 1), ("comm", 1)]
    assert [i.duration.nanoseconds for i in d.items if isinstance(i, ast.LaunchItem)] == [2000]
    assert [i.count for i in d.items if isinstance(i, ast.QueuesItem)] == [4]
    assert e.items == ()
    assert h.count.value == 2 and h.place is None and h.pinned and h.size.value == 4 << 20
    assert x.place.text == "d" and not x.pinned
    assert isinstance(a, ast.AliasDecl) and a.target.name.text == "x"
    assert s.count.value == 3 and s.priority[0] == PRIORITY_HIGH and s.mode == "legacy"
    assert t.priority[0] == PRIORITY_LOW and t.mode == "nonblocking"
    assert u.priority[0] == -3 and u.mode == "blocking"
    assert ev.flag and ev.count.value == 2 and not plain.flag
    assert n.count.value == 4
    assert [m.name.text for m in c.members] == ["s", "u"]
    assert isinstance(main, ast.ThreadDecl) and main.body == ()
    assert [(x.kind, x.buffer.name.text if x.buffer else None) for x in expects] == [
        ("no race", None), ("race", None), ("race", "x"), ("no deadlock", None), ("deadlock", None),
        ("no use-after-free", None), ("use-after-free", None), ("use-after-free", "a"), ("makespan", None),
        ("no mismatch", None), ("mismatch", None)]
    assert expects[-3].limit.nanoseconds == 1_500_000


def test_every_statement_parses_to_its_node():
    body = parse(
        "thread t {\n"
        "  for i in 0..2 {\n    let j = i\n  }\n"
        "  let k = 1\n"
        "  s: kernel f reads a, b[0] writes c[1:2] 1ms\n"
        "  s: copy a <- b 2us\n"
        "  s: callback cb reads a\n"
        "  s: record e\n  s: wait e\n  s: reset e\n  s: notify n\n  s: await n\n"
        "  s: allreduce c a 1ms\n  s: send c to r a\n  s: recv c from r a 3ms\n"
        "  s: alloc a\n  s: free a\n"
        "  host h reads a writes b 1ms\n"
        "  sync s\n  sync all\n  notify n\n  await n\n  alloc a\n  free a\n"
        "}\n"
    ).declarations[0].body
    kinds = [type(node).__name__ for node in body]
    assert kinds == [
        "For", "Let", "KernelTask", "CopyTask", "CallbackTask", "RecordTask", "WaitTask", "ResetTask",
        "NotifyTask", "AwaitTask", "CollectiveTask", "SendTask", "RecvTask", "AllocTask", "FreeTask",
        "HostCall", "Sync", "Sync", "HostNotify", "HostAwait", "HostAlloc", "HostFree",
    ]
    assert body[10].kind == "allreduce" and body[10].comm.name.text == "c"
    assert body[5].event.name.text == "e" and body[8].notify.name.text == "n"
    kernel = body[2]
    assert [r.name.text for r in kernel.reads] == ["a", "b"] and kernel.duration.nanoseconds == 10**6
    assert isinstance(kernel.writes[0].subscripts[0], ast.Slice)
    copy = body[3]
    assert copy.destination.name.text == "a" and copy.source.name.text == "b"
    send = body[11]
    assert send.comm.name.text == "c" and send.peer.name.text == "r"
    assert body[16].target.name.text == "s" and body[17].target is None


def test_open_slices():
    body = parse("thread t {\n  s: kernel k reads x[1KiB:], x[:2KiB], x[:]\n}\n").declarations[0].body
    lows_highs = [(sub.low, sub.high) for access in body[0].reads for sub in access.subscripts]
    assert lows_highs[0][0].value == 1024 and lows_highs[0][1] is None
    assert lows_highs[1][0] is None and lows_highs[1][1].value == 2048
    assert lows_highs[2] == (None, None)


def test_expression_precedence_in_the_tree():
    (let,) = parse("thread t {\n  let v = 1 + 2 * 3 - -4 % (5 / 2)\n}\n").declarations[0].body
    assert isinstance(let.value, ast.BinaryOp) and let.value.operator == "-"
    assert let.value.left.operator == "+" and let.value.left.right.operator == "*"
    assert let.value.right.operator == "%" and isinstance(let.value.right.left, ast.Negate)


# -- input that is not a spec -------------------------------------------------------------


def test_empty_file():
    assert_error("", Code.SP003, 1, 1)
    assert_error("\n\n  \n", Code.SP003, 1, 1)
    assert_error("# only a comment", Code.SP003, 1, 1)


def test_not_utf8():
    diagnostic = assert_error(b"device d\n\xff\xfe", Code.SP001, 2, 1)
    assert "0xff" in diagnostic.annotations[0].label


def test_not_utf8_shows_the_line():
    loaded = load_bytes(b"device d\n  buffer \xc3\x28 1MiB on d\n", "t.sched")
    assert loaded.diagnostics[0].code is Code.SP001
    assert loaded.diagnostics[0].primary_span.line == 2
    assert "buffer" in loaded.source.splitlines()[1]


def test_nul_byte():
    assert_error(b"device d\nstream s\x00 on d\n", Code.SP001, 2, 9, message="NUL")
    # the first byte that is not text, whichever kind comes first
    assert_error(b"\x7fELF\x02\x01\x01\x00\x00\xff\xfe", Code.SP001, 1, 8, message="NUL")
    assert_error(b"\x7fELF\xff\x00", Code.SP001, 1, 5, message="not UTF-8")


def test_binary_input():
    diagnostic = only_error(bytes(range(256)) * 8)
    assert diagnostic.code is Code.SP001


def test_unexpected_character():
    assert_error(thread("s: kernel k reads x; "), Code.SP002, 5, 22, 23, "unexpected character ';'")
    assert_error("device d\n\u00e9t\u00e9\n", Code.SP002, 2, 1)


def test_nesting_limit():
    assert_error("(" * (MAX_NESTING + 1), Code.SP004, 1, MAX_NESTING + 1)
    # the thread's `{` counts: the 200th `(` is one level too deep
    assert_error(thread("let v = " + "(" * 200 + "1" + ")" * 200), Code.SP004, 5, 11 + 199)
    deep = thread("let v = " + "(" * 199 + "1" + ")" * 199)
    assert load_text(deep).program is not None


def test_brackets_in_comments_and_titles_do_not_nest():
    # a comment runs to the end of its line and a title is text: their brackets are no syntax
    source = 'spec "' + "[" * 250 + '"\n' + "# see (figure\n" * 250 + "device d  # " + "(" * 250 + "\n"
    loaded = load_text(source)
    assert loaded.program is not None, loaded.diagnostics
    assert load_text("device d\n" + "(" * (MAX_NESTING + 1) + "  # ))))\n").program is None


@pytest.mark.parametrize("size, fix", [("1.5MiB", "1536KiB"), ("2.5KB", "2500B"), ("0.75GiB", "768MiB"),
                                       ("0.3B", None)])
def test_a_decimal_size_says_how_to_write_it_whole(size, fix):
    (diagnostic,) = errors_of(f"device d\nbuffer x {size} on d\n")
    assert diagnostic.message == f"a size cannot have a decimal point: `{size}`"
    assert (diagnostic.primary_span.line, diagnostic.primary_span.column) == (2, 10)
    assert diagnostic.help.endswith(f"write `{fix}`" if fix else "whole numbers of a unit")


@pytest.mark.parametrize("slower_parser", [False, True])
def test_expression_depth_limit(slower_parser):
    """A sum of 2,001 terms nests 2,000 operators deep: the most allowed, by either parser (a
    duration finer than a nanosecond is left to lark's)."""
    tail = ("s: kernel k 0.5ns",) if slower_parser else ()
    deep = MAX_OPERATORS_DEEP
    assert only_error(thread("let v = " + "-" * (deep + 1) + "1", *tail)).code is Code.SP004
    assert_error(thread("let v = " + "+".join(["1"] * (deep + 2)), *tail), Code.SP004, 5, 11,
                 message="nested too deeply")
    loaded = load_text(thread("let v = " + "+".join(["1"] * (deep + 1)), "let w = " + "-" * deep + "7",
                              "s: kernel q writes x[0:v + w]", *tail))
    assert loaded.program is not None and loaded.program.statements[0].accesses[0].end == deep + 1 + 7


def test_an_expression_of_too_many_operators_is_refused_before_it_is_parsed():
    """However it nests (balanced parentheses keep it shallow), an expression of more than
    MAX_OPERATORS operators is refused at the first one past the limit; as many operators
    spread over lines and statements are not one expression."""
    from checker.parse import MAX_OPERATORS

    group = "(1+1)"  # two terms per group, one operator inside and one between groups
    wide = "+".join([group] * (MAX_OPERATORS // 2 + 1))
    source = thread(f"let v = {wide}")
    (diagnostic,) = errors_of(source)
    assert diagnostic.code is Code.SP004 and "more than 20,000 operators" in diagnostic.message
    assert diagnostic.primary_span.line == 5 and source.splitlines()[4][diagnostic.primary_span.column - 1] == "+"
    spread = [f"let v{k} = (1+1)*(2-1)" for k in range(MAX_OPERATORS // 3 + 10)]
    assert load_text(thread(*spread, "s: kernel k")).program is not None


def test_deeply_nested_loops():
    source = HEAD + "thread t {\n" + "for i in 0..1 {\n" * 250 + "}\n" * 250 + "}\n"
    assert_error(source, Code.SP004, 204, 15, message="nested too deeply")


@pytest.mark.parametrize("opening", ["if 1 >= 0 {", "for i in 0..1 {", "if 0 < 1 { choose {"])
def test_blocks_nested_as_deep_as_the_brackets_allow_are_analysed(opening):
    """199 nested blocks (the thread's brace is the 200th bracket): the front end's walks of
    them ran out of Python frames (an SP004 with no location), at 199 nested `if`s."""
    depth = 199 // opening.count("{")
    closing = "} or { s: kernel k2 } }" if "choose" in opening else "}"
    source = HEAD + "thread t {\n" + (opening + "\n") * depth + "s: kernel k writes x\n" + (closing + "\n") * depth + "}\n"
    if "choose" in opening:  # 2^99 branch combinations: refused, at the first `choose`
        assert only_error(source).code is Code.SP026
    else:
        assert load_text(source).program is not None


def test_megabytes_of_junk():
    junk = ("x = y; " * 200_000).encode()
    diagnostic = only_error(junk)
    assert diagnostic.code is Code.SP002
    assert diagnostic.primary_span.line == 1


def test_too_large(monkeypatch):
    import checker.parse as parse_module

    monkeypatch.setattr(parse_module, "MAX_SOURCE_CHARS", 100)
    diagnostic = only_error(b"device d\n" * 20)
    assert diagnostic.code is Code.SP004 and diagnostic.primary_span is None


# -- literals out of range ----------------------------------------------------------------


@pytest.mark.parametrize("source,line,column,message", [
    ("buffer b 9999999999999999999B on host\n", 1, 10, "number too large"),
    ("buffer b 99999999TiB on host\n", 1, 10, "size too large"),
    (thread("s: kernel k 2000000s"), 5, 15, "duration too long"),
    (thread("s: kernel k 1" + "0" * 25 + ".5s"), 5, 15, "duration too long"),
    (thread("s: kernel k 1." + "0" * 1000 + "1s"), 5, 15, "more than 1,000 digits"),
    ("device d { compute 99999999999999999999 }\n", 1, 20, "number too large"),
    (thread("let v = 99999999999999999999"), 5, 11, "number too large"),
    ("stream s on d priority -99999999999999999999\n", 1, 24, "number too large"),
    ("expect makespan <= 9999999s\n", 1, 20, "duration too long"),
])
def test_literals_out_of_range(source, line, column, message):
    assert_error(source, Code.SP020, line, column, message=message)


def test_durations_finer_than_a_nanosecond_round_up():
    # The contract's durations are any decimal with a unit; a positive one stays positive.
    from checker.parse import duration_ns

    class Token(str):
        line = column = end_line = end_column = start_pos = end_pos = 1

    assert [duration_ns(Token(t)) for t in ("0.5ns", "1.25ns", "0.0000001ms", "2ns", "0.0ns")] == [1, 2, 1, 2, 0]
    # many digits after the point are no long duration (the integer part is what is capped)
    assert [duration_ns(Token(t)) for t in ("0.0000000000000000000000001ns", "0.1" + "0" * 30 + "ms",
                                            "0" * 30 + "3us")] == [1, 100_000, 3_000]


def test_times_finer_than_a_nanosecond_keep_their_exact_value():
    """Whole nanoseconds round a duration up and a makespan bound down; the exact values stay
    with them, for checking `expect makespan` at the resolution the spec writes."""
    from fractions import Fraction

    loaded = load_text("device d { launch 0.25ns }\nstream s on d\nthread t {\n  s: kernel k 2ns\n"
                       "  s: kernel k2 .0015us\n}\nexpect makespan <= 1.5ns\n")
    (expectation,) = loaded.program.expectations
    assert (expectation.limit, expectation.exact_limit) == (1, Fraction(3, 2))
    assert [s.duration for s in loaded.program.statements] == [2, 2]
    assert loaded.program.exact_durations == ((1, Fraction(3, 2)),)
    assert loaded.program.exact_launches == ((0, Fraction(1, 4)),)


def test_integer_literals_up_to_2_to_the_62():
    program = load_text(thread("let a = 1000000000000000000", "let b = 4611686018427387904",
                               "s: kernel k reads x[b - b:a / a]")).program
    assert program is not None and program.statements[0].accesses[0].end == 1
    assert_error(thread("let b = 4611686018427387905"), Code.SP020, 5, 11, message="number too large")


# -- syntax errors ------------------------------------------------------------------------


def test_a_huge_unexpected_token_is_quoted_cut_short():
    (diagnostic,) = errors_of(thread("s: kernel k reads x " + "a" * 100_000))
    label = diagnostic.annotations[0].label
    assert label == "unexpected `" + "a" * 40 + "...`", label


def test_a_line_ending_the_lexer_does_not_count_reports_once():
    errors = errors_of(b"device d\rstream s on d\r")
    assert [(d.code, d.primary_span.line, d.primary_span.column) for d in errors] == [(Code.SP002, 1, 9)]


def test_syntax_error_position_and_help():
    diagnostic = assert_error(thread("s: kernel k reads"), Code.SP002, 5, 20, 21)
    assert diagnostic.message == "`reads` and `writes` need at least one buffer"
    assert diagnostic.annotations[0].label == "unexpected end of line"
    assert diagnostic.help == "expected a name"


def test_unexpected_end_of_file():
    # the caret goes under the brace that is never closed; the end of the file is noted
    diagnostic = assert_error(HEAD + "thread t {\n  s: kernel k\n", Code.SP002, 4, 10, 11)
    assert diagnostic.message.startswith("missing `}`")
    assert diagnostic.annotations[0].label == "this `{` is never closed"
    (end,) = [a for a in diagnostic.annotations if not a.primary]
    assert (end.span.line, end.span.column, end.label) == (5, 14, "the file ends here")


def test_the_file_ends_where_it_ends_when_its_last_statement_is_in_error_too():
    # the last statement's own error blanks it before the unclosed brace is found
    brace, last = errors_of("device d\nstream s on d\nthread t {\n  s: kernel k reads\n")
    assert brace.message.startswith("missing `}`") and last.primary_span.line == 4
    (end,) = [a for a in brace.annotations if not a.primary]
    assert (end.span.line, end.span.column) == (4, 20)


def test_a_file_ending_in_a_continuation_is_missing_its_brace_not_a_kernel_name():
    (found,) = errors_of("device d\nstream s on d\nthread main {\n  s: kernel k \\")
    assert found.message == "missing `}`: a block is still open at the end of the file"


def test_a_byte_order_mark_is_not_a_column():
    bom = b"\xef\xbb\xbf"
    for data, column in [(b"device d \xff\n", 10), (b"ab\x00c\n", 3), (b"ab\x00c\xff", 3)]:
        (found,) = errors_of(bom + data)
        assert (found.code, found.primary_span.line, found.primary_span.column) == (Code.SP001, 1, column)
    assert load_bytes(bom + b"ab\x00c\n", "t.sched").source.startswith("ab")  # (the frame's line)


def test_every_example_produces_its_message():
    for message, examples in SYNTAX_EXAMPLES.items():
        for example in examples:
            with pytest.raises(SpecError) as caught:
                parse(example)
            got = caught.value.diagnostic
            assert got.code is Code.SP002, example
            # a misspelled keyword says so, and the form goes into the help
            assert got.message == message or (got.message.startswith("unknown word") and got.help == message), (
                example, got.message)


def test_example_table_has_no_dead_entries():
    exact, _ = _example_table()
    used = set(exact.values())
    assert {m for m, examples in SYNTAX_EXAMPLES.items() if examples} <= used


# The same mistakes in other contexts than the table's examples: at any depth, after other
# statements, in a second thread, inside nested loops.
CONTEXTS = [
    lambda line: thread(line),
    lambda line: thread("s: kernel a", "s: kernel b", line),
    lambda line: thread("for i in 0..2 {", line, "}"),
    lambda line: thread("for i in 0..2 {", "for j in 0..2 {", "s: kernel a", line, "}", "}"),
    lambda line: HEAD + "thread u {\n  s: kernel a\n}\nthread t {\n  " + line + "\n}\n",
]


@pytest.mark.parametrize("line,message", [
    ("s: kernel k reads", "`reads` and `writes` need at least one buffer"),
    ("s: kernel k reads x writes", "`reads` and `writes` need at least one buffer"),
    ("s: kernel k reads x,", "a buffer is missing after `,`"),
    ("s: kernel k reads x y", "separate the buffers of `reads` or `writes` with `,`"),
    ("s: kernel k reads x, writes y", "no `,` before `writes`: write `reads a, b writes c`"),
    ("s kernel k", "a stream statement is `STREAM: OPERATION ...`"),
    ("s: start k", "unknown operation after `STREAM:`"),
    ("s: kernel", "a kernel needs a name: `STREAM: kernel NAME ...`"),
    ("s: kernel k(x)", "arguments are written `reads A, B writes C`, not in parentheses"),
    ("s: copy x x", "a copy is written `STREAM: copy DESTINATION <- SOURCE [DURATION]`"),
    ("s: copy x[0:1KiB] x", "a copy is written `STREAM: copy DESTINATION <- SOURCE [DURATION]`"),
    ("s: copy x -> x", "a copy is written `STREAM: copy DESTINATION <- SOURCE [DURATION]`"),
    ("s: kernel k 3", "a duration needs a unit"),
    ("s: kernel k reads x 3", "a duration needs a unit"),
    ("s: kernel k writes x[0:1KiB] 3", "a duration needs a unit"),
    ("s: kernel k 3 ms", "no space between a number and its unit: write `3ms`"),
    ("s: kernel k reads x[0:1.5KiB]", "a size cannot have a decimal point: `1.5KiB`"),
    ("s: kernel k -3ms", "a duration cannot be negative"),
    ("host h reads x -1us", "a duration cannot be negative"),
    ("if 1 < 2 {", "missing `}`"),
    ("host h 3", "a duration needs a unit"),
    ("s: record", "`record`, `wait` and `reset` name an event"),
    ("s: wait 3", "`record`, `wait` and `reset` name an event"),
    ("sync", "`sync` needs a stream, an event, a device or `all`"),
    ("host", "a host call needs a name"),
    ("for i in 0..2", "a `for` loop is written `for VAR in LOW..HIGH { ... }`"),
    ("for i in 0...2 {", "a `for` loop is written `for VAR in LOW..HIGH { ... }`"),
    ("let i 3", "a `let` is written `let VAR = EXPRESSION`"),
    ("s: send c s x", "a send is written"),
    ("s: recv c s x", "a recv is written"),
    ("s: kernel k reads x[0:1KiB", "missing `]`"),
])
@pytest.mark.parametrize("context", range(len(CONTEXTS)))
def test_syntax_messages_in_any_context(line, message, context):
    # a `for` header in error leaves its thread without a `}` too: that is reported as well
    found = errors_of(CONTEXTS[context](line))
    assert all(d.code is Code.SP002 for d in found)
    assert any(d.message.startswith(message) for d in found), [d.message for d in found]
    assert len(found) == 1 or line.startswith("for ")


@pytest.mark.parametrize("source,message", [
    ("s: kernel k\n", "statements belong inside a `thread NAME { ... }` block"),
    ("device d\ndevice e\nhost h\n", "statements belong inside a `thread NAME { ... }` block"),
    ("device d\nthread t {\n}\nsync all\n", "statements belong inside a `thread NAME { ... }` block"),
    ("device d\nthread t {\n}\n}\n", "`}` without a matching `{`"),
    ("thread t\n{\n}\n", "a thread is declared `thread NAME {`, with the `{` on the same line"),
    ("buffer x 4 on host\n", "a size needs a unit"),
    ("device d\nbuffer x 4MiB\n", "a buffer is declared"),
    ("device d\nstream s\n", "a stream is declared"),
    ("stream s on d priority medium\n", "a priority is `high`, `low` or an integer"),
    ("device d { gpu 1 }\n", "a device is declared"),
    ("device d { compute }\n", "a device is declared"),
    ("comm c = s\n", "a comm is declared"),
    ("alias a x\n", "an alias is declared"),
    ("spec title\n", "a title is a quoted string"),
    ("expect nothing\n", "expect one of"),
    ("expect race x\n", "expect one of"),
    ("expect makespan < 3ms\n", "expect one of"),
    ("expect makespan <= 3\n", "a duration needs a unit"),
    ("device d { compute 1\n", "missing `}`"),
    ("device d\nstream s on d\nthread t {\n  for i in 0..3 {\n    s: kernel k\n  }\n", "missing `}`"),
])
def test_declaration_syntax_messages(source, message):
    diagnostic = only_error(source)
    assert diagnostic.code is Code.SP002
    assert diagnostic.message.startswith(message), diagnostic.message


def test_unknown_mistake_falls_back_to_the_token():
    diagnostic = only_error(thread("for i in range(3) {", "}"))
    assert diagnostic.message == "unexpected `(`"
    assert diagnostic.help.startswith("expected ")


@pytest.mark.parametrize("options,column,message", [
    ("legacy nonblocking", 22, "a stream is either `legacy` or `nonblocking`, once"),
    ("legacy legacy", 22, "a stream is either `legacy` or `nonblocking`, once"),
    ("priority high legacy priority 3", 36, "`priority` is given twice"),
])
def test_stream_options_given_twice(options, column, message):
    diagnostic = assert_error(f"device d\nstream s on d {options}\n", Code.SP002, 2, column, message=message)
    assert diagnostic.annotations[1].primary is False


def test_stream_options_in_any_order():
    (_, stream) = decls("device d\nstream s on d nonblocking priority low\n")
    assert stream.mode == "nonblocking" and stream.priority[0] == PRIORITY_LOW


def test_comment_sign_inside_a_title():
    (title,) = decls('spec "a # not a comment" # a comment\n')
    assert title.title == "a # not a comment"


def test_missing_brace_points_at_the_open_one():
    source = "device d\nstream s on d\nthread t {\n  for i in 0..2 { # {\n    s: kernel k\n"
    diagnostic = assert_error(source, Code.SP002, 4, 17, 18, message="missing `}`")
    assert diagnostic.annotations[0].label == "this `{` is never closed"
    (end,) = [a for a in diagnostic.annotations if not a.primary]
    assert (end.span.line, end.span.column, end.label) == (5, 16, "the file ends here")


def test_missing_brace_is_the_one_the_indentation_says():
    # the `}` at the thread's indentation closed the loop: the loop's `}` is the one missing
    source = "device d\nstream s on d\nthread t {\n  for i in 0..2 {\n    s: kernel k\n  s: kernel j\n}\n"
    diagnostic = assert_error(source, Code.SP002, 4, 17, 18, message="missing `}`")
    assert diagnostic.help == "close it with `}` on a line of its own"


def test_byte_order_mark_is_skipped():
    loaded = load_bytes("\ufeffdevice d\nstream s on d\nthread t {\n  s9: kernel k\n}\n".encode(), "t.sched")
    assert loaded.diagnostics[0].code is Code.SP010
    assert (loaded.diagnostics[0].primary_span.line, loaded.diagnostics[0].primary_span.column) == (4, 3)


@pytest.mark.parametrize("source,line,column,end_column", [
    (thread("s: kernel k 3.5"), 5, 15, 18),
    (thread("s: kernel k 3 ms"), 5, 15, 19),
    (thread("s: kernel k 3", "s: kernel k"), 5, 15, 16),
    ("buffer b 4 MiB on host\n", 1, 10, 15),
])
def test_missing_unit_underlines_the_number(source, line, column, end_column):
    diagnostic = assert_error(source, Code.SP002, line, column, end_column)
    assert "needs a unit" in diagnostic.message or "no space between a number and its unit" in diagnostic.message


@pytest.mark.parametrize("written,plain", [("1_000", "`1000`"), ("0x10", "`16`"), ("1e3", "`1000`"),
                                           ("2_0x", "decimal digits"), ("1e999", "decimal digits")])
def test_numbers_of_other_languages_are_named_so(written, plain):
    diagnostic = assert_error(f"buffer y[{written}] 1B on host\n", Code.SP002, 1, 10, 10 + len(written),
                              message=f"`{written}` is not a number")
    assert plain in diagnostic.help


@pytest.mark.parametrize("source,message", [
    (thread("s: wait e1, e2"), "one event or notify per statement"),
    (thread("for i in 0..2 {", "  s: record e1 e2", "}"), "one event or notify per statement"),
    (thread("sync s, s"), "`sync` needs a stream, an event, a device or `all`"),
    (thread("for (i = 0; i < 2; i++) {", "}"), "a `for` loop is written"),
    (thread("for i in 0 to 2 {", "}"), "a `for` loop is written"),
    ("device d\nbuffer x 4MiB on device d\n", "a buffer is declared"),
    ("device d\nstream s on device d\n", "a stream is declared"),
    ("device d\nthread t(x) {\n}\n", "a thread is declared"),
])
def test_more_common_mistakes(source, message):
    diagnostic = only_error(source)
    assert diagnostic.code is Code.SP002 and diagnostic.message.startswith(message), diagnostic.message


# -- extensions: collectives, group, choose, runtimes, tensors, implicit synchronization, arrays


def test_extension_declarations_parse_to_their_nodes():
    device, tensor, tensors, comm, comms, rank = decls(
        "device g { compute 1 runtime cuda }\n"
        "tensor act 4MiB on g\n"
        "tensor grads[3] 1MiB on g\n"
        "comm world = { s }\n"
        "comm tp[2] = { s[2*tp], s[2*tp + 1] }\n"
        "thread rank[4] {\n}\n"
    )
    (_, runtime) = device.items
    assert isinstance(runtime, ast.RuntimeItem) and runtime.runtime.text == "cuda"
    assert isinstance(tensor, ast.TensorDecl) and tensor.count is None and tensor.size.value == 4 << 20
    assert tensor.device.text == "g" and tensors.count.value == 3
    assert comm.count is None and [m.name.text for m in comm.members] == ["s"]
    assert comms.count.value == 2 and isinstance(comms.members[1].index, ast.BinaryOp)
    assert isinstance(rank, ast.ThreadDecl) and rank.count.value == 4 and rank.body == ()


def test_collective_forms_parse_to_their_nodes():
    body = parse(
        "thread t {\n"
        "  s: allreduce w x\n"
        "  s: allgather w y <- x[0:1KiB] 2ms\n"
        "  s: reducescatter w y <- x\n"
        "  s: alltoall w x 1us\n"
        "  s: broadcast w root r x\n"
        "  s: reduce w root r[1] y <- x 3ms\n"
        "}\n"
    ).declarations[0].body
    rows = [(n.kind, n.comm.name.text, n.root.name.text if n.root else None, n.access.name.text,
             n.source.name.text if n.source else None, n.duration.nanoseconds if n.duration else None)
            for n in body]
    assert rows == [
        ("allreduce", "w", None, "x", None, None),
        ("allgather", "w", None, "y", "x", 2_000_000),
        ("reducescatter", "w", None, "y", "x", None),
        ("alltoall", "w", None, "x", None, 1000),
        ("broadcast", "w", "r", "x", None, None),
        ("reduce", "w", "r", "y", "x", 3_000_000),
    ]
    assert all(isinstance(n, ast.CollectiveTask) for n in body)
    assert body[5].root.index.value == 1


def test_extension_statements_parse_to_their_nodes():
    body = parse(
        "thread t {\n"
        "  group {\n    s: send c to r x\n    group {\n      s: recv c from r x\n    }\n  }\n"
        "  choose { s: kernel a } or {\n    s: kernel b\n  } or { }\n"
        "  query e\n"
        "  memcpy h <- x[0:1KiB] 2us\n"
        "  memset x\n"
        "  s: memset x[1] 1ms\n"
        "  s: item x\n"
        "  s: wait_stream r\n"
        "  s: record_stream act\n"
        "}\n"
    ).declarations[0].body
    assert [type(n).__name__ for n in body] == [
        "Group", "Choose", "Query", "Memcpy", "HostMemset", "MemsetTask", "ItemTask", "WaitStreamTask",
        "RecordStreamTask"]
    group, choose, query, memcpy, memset, stream_memset, item, wait_stream, record_stream = body
    assert isinstance(group.body[0], ast.SendTask) and isinstance(group.body[1], ast.Group)
    assert [len(b) for b in choose.branches] == [1, 1, 0]
    assert query.target.name.text == "e"
    assert memcpy.destination.name.text == "h" and memcpy.source.subscripts and memcpy.duration.nanoseconds == 2000
    assert memset.access.name.text == "x" and memset.duration is None
    assert stream_memset.duration.nanoseconds == 10**6 and item.access.name.text == "x"
    assert wait_stream.source.name.text == "r" and record_stream.tensor.name.text == "act"
    assert (group.span.line, group.span.end_line) == (2, 7)


@pytest.mark.parametrize("word", ["group", "choose", "query", "memcpy", "memset", "tensor", "runtime", "root",
                                  "item", "wait_stream", "record_stream", "allgather", "or"])
def test_new_words_stay_names(word):
    source = (
        f"device d\nstream {word} on d\nstream {word}s[2] on d\nbuffer b 1MiB on d\nevent e\n"
        f"thread t {{\n  {word}: kernel k reads b\n  {word}s[1]: record e\n  sync {word}\n"
        f"  {word} : kernel k\n}}\n"
    )
    loaded = load_text(source)
    assert loaded.program is not None, loaded.diagnostics
    assert [loaded.program.streams[s.stream].name for s in loaded.program.statements if s.stream is not None] == [
        word, f"{word}s[1]", word]


def test_soft_keywords_read_as_statements_only_before_their_arguments():
    body = parse("thread t {\n  group \\\n  {\n  }\n  query \\\n e\n  group[0]: kernel k\n}\n").declarations[0].body
    assert [type(n).__name__ for n in body] == ["Group", "Query", "KernelTask"]


@pytest.mark.parametrize("source,message", [
    (thread("memcpy x"), "a host memcpy is written"),
    (thread("memcpy"), "a host memcpy is written"),
    (thread("group"), "a `group` is written"),
    (thread("choose {", "}"), "a `choose` has two or more branches"),
    (thread("choose {", "}", "or {", "}"), "a `choose` has two or more branches"),
    (thread("s: broadcast w x"), "`broadcast` and `reduce` name their root"),
    (thread("s: allgather w x y"), "a collective is written"),
    (thread("s: wait_stream"), "`wait_stream` names the stream"),
    ("tensor t 4MiB\n", "a tensor is declared"),
    ("device d { runtime }\n", "a runtime is"),
])
def test_extension_syntax_messages(source, message):
    diagnostic = only_error(source)
    assert diagnostic.code is Code.SP002 and diagnostic.message.startswith(message), diagnostic.message


# -- every error of a file, and messages that teach ---------------------------------------------


def test_caret_stays_under_its_token_after_wide_characters(run, tmp_path):
    """Columns count characters, but a terminal gives a CJK character two cells and a
    combining accent none: the underline is padded by cells, so it still marks `oops`."""
    spec = tmp_path / "wide.sched"
    spec.write_text('spec "漢字漢字" oops\n', encoding="utf-8")
    status, out, _ = run("check", spec)
    assert status == 2 and f"{spec}:1:13: error[SP002]: unexpected `oops`" in out
    source, underline = [line for line in out.splitlines() if line.startswith(("1 |", "  |")) and line != "  |"]
    assert source == '1 | spec "漢字漢字" oops'
    assert underline.index("^") == len('1 | spec "') + 8 + len('" ') and underline.endswith("^^^^ unexpected `oops`")
    spec.write_text('spec "e\u0301e\u0301" oops\n', encoding="utf-8")
    _, out, _ = run("check", spec)
    underline = [line for line in out.splitlines() if "^" in line][0]
    assert underline.index("^") == len('1 | spec "ee" ')
    spec.write_text('spec "กิน" oops\n', encoding="utf-8")  # (a Thai vowel sign of class 0)
    _, out, _ = run("check", spec)
    underline = [line for line in out.splitlines() if "^" in line][0]
    assert underline.index("^") == len('1 | spec "ab" ')


def test_every_error_of_a_file_in_order(run, tmp_path):
    spec = tmp_path / "typos.sched"
    spec.write_text(
        "device d\n"                      # 1
        "strem s0 on d\n"                 # 2
        "stream s1 on d\n"                # 3
        "stream s2 on d\n"                # 4
        "buffer x 4mb on d\n"             # 5
        "buffer y 1MiB on d\n"            # 6
        "thread t {\n"                    # 7
        "  s1: kernal k\n"                # 8
        "  s1: kernel k raeds y\n"        # 9
        "  s3: kernel k writes y\n"       # 10
        "  s2: kernel k writes y 2 ms\n"  # 11
        "}\n"
    )
    status, out, _ = run("check", spec)
    assert status == 2
    heads = [line for line in out.splitlines() if ": error[" in line]
    assert heads == [
        f"{spec}:2:1: error[SP002]: unknown word `strem`: did you mean `stream`?",
        f"{spec}:5:11: error[SP002]: `mb` is not a unit of size",
        f"{spec}:8:7: error[SP002]: unknown word `kernal`: did you mean `kernel`?",
        f"{spec}:9:16: error[SP002]: unknown word `raeds`: did you mean `reads`?",
        f"{spec}:10:3: error[SP010]: `s3` is not declared",
        f"{spec}:11:25: error[SP002]: no space between a number and its unit: write `2ms`",
    ]
    assert (
        f"{spec}:8:7: error[SP002]: unknown word `kernal`: did you mean `kernel`?\n"
        "  |\n"
        "8 |   s1: kernal k\n"
        "  |       ^^^^^^ unexpected `kernal`\n"
        "  |\n"
        "  = help: unknown operation after `STREAM:`"
    ) in out
    assert (
        f"{spec}:9:16: error[SP002]: unknown word `raeds`: did you mean `reads`?\n"
        "  |\n"
        "9 |   s1: kernel k raeds y\n"
        "  |                ^^^^^ unexpected `raeds`\n"
        "  |\n"
        "  = help: expected a duration (3.5ms), `}`, `reads`, `writes`, end of line\n"
    ) in out
    assert (
        f"{spec}:2:1: error[SP002]: unknown word `strem`: did you mean `stream`?\n"
        "  |\n"
        "2 | strem s0 on d\n"
        "  | ^^^^^ unexpected `strem`\n"
        "  |\n"
        "  = help: a declaration starts with `spec`, `device`, `buffer`, `alias`, `stream`, `event`, `notify`, "
        "`comm`, `tensor`, `thread` or `expect`\n"
    ) in out
    assert (
        f"{spec}:10:3: error[SP010]: `s3` is not declared\n"
        "   |\n"
        "10 |   s3: kernel k writes y\n"
        "   |   ^^ not declared\n"
        "   |\n"
        "   = help: did you mean `s1` or `s2`?\n"
    ) in out
    assert (
        f"{spec}:5:11: error[SP002]: `mb` is not a unit of size\n"
        "  |\n"
        "5 | buffer x 4mb on d\n"
        "  |           ^^ unknown unit\n"
        "  |\n"
        "  = help: sizes take `B`, `KiB`, `MiB`, `GiB`, `TiB` (powers of 1024) or `KB`, `MB`, `GB`, `TB` "
        "(powers of 1000): write `4MB` or `4MiB`\n"
    ) in out
    assert (
        f"{spec}:11:25: error[SP002]: no space between a number and its unit: write `2ms`\n"
        "   |\n"
        "11 |   s2: kernel k writes y 2 ms\n"
        "   |                         ^^^^ space before the unit\n"
        "   |\n"
        "   = help: durations take `ns`, `us`, `ms` or `s`\n"
    ) in out


def test_unclosed_brace_points_at_the_brace(run, tmp_path):
    spec = tmp_path / "open.sched"
    spec.write_text("device d\nstream s on d\nthread t {\n  for i in 0..2 {\n    s: kernel k\n  s: kernel j\n}\n")
    status, out, _ = run("check", spec)
    assert status == 2
    assert out.startswith(
        f"{spec}:4:17: error[SP002]: missing `}}`: a block is still open at the end of the file\n"
        "  |\n"
        "4 |   for i in 0..2 {\n"
        "  |                 ^ this `{` is never closed\n"
    )
    assert "  = help: close it with `}` on a line of its own" in out


@pytest.mark.parametrize("line,message,help_text", [
    ("s: kernel k 2 ms", "no space between a number and its unit: write `2ms`", "durations take"),
    ("s: kernel k reads x[0:4 KiB]", "no space between a number and its unit: write `4KiB`", "sizes take"),
    ("s: kernel k 3MS", "`MS` is not a unit of time", "write `3ms`"),
    ("s: kernel k 3sec", "`sec` is not a unit of time", "write `3s`"),
    ("s: kernel k reads x[0:4mb]", "`mb` is not a unit of size", "write `4MB` or `4MiB`"),
    ("s: kernel k reads x[0:1kib]", "`kib` is not a unit of size", "write `1KiB`"),
])
def test_units_say_what_is_wrong(line, message, help_text):
    diagnostic = only_error(thread(line))
    assert diagnostic.message == message
    assert help_text in diagnostic.help


@pytest.mark.parametrize("source,message", [
    ("buffer b 4mb on host\n", "`mb` is not a unit of size"),
    ("buffer b 4 MiB on host\n", "no space between a number and its unit: write `4MiB`"),
    ("device d { launch 3 us }\n", "no space between a number and its unit: write `3us`"),
    ("expect makespan <= 2 ms\n", "no space between a number and its unit: write `2ms`"),
    ("expect makespan <= 2msec\n", "`msec` is not a unit of time"),
])
def test_units_in_declarations(source, message):
    assert only_error(source).message == message


@pytest.mark.parametrize("line,word,suggestion", [
    ("s: kernal k", "kernal", "kernel"),
    ("s: kernel k raeds x", "raeds", "reads"),
    ("s: kernel k reads x wrtes x", "wrtes", "writes"),
    ("s: recrod e", "recrod", "record"),
    ("s: allreduc w x", "allreduc", "allreduce"),
    ("sycn s", "sycn", "sync"),
    ("hots h", "hots", "host"),
])
def test_misspelled_keywords(line, word, suggestion):
    diagnostic = only_error(thread(line))
    assert diagnostic.message == f"unknown word `{word}`: did you mean `{suggestion}`?"
    assert diagnostic.annotations[0].label == f"unexpected `{word}`"


@pytest.mark.parametrize("source,word,suggestion", [
    ("strem s on d\n", "strem", "stream"),
    ("devise d\n", "devise", "device"),
    ("device d { compte 1 }\n", "compte", "compute"),
    ("stream s on d nonblockng\n", "nonblockng", "nonblocking"),
    ("expect no dedlock\n", "dedlock", "deadlock"),
])
def test_misspelled_declaration_keywords(source, word, suggestion):
    diagnostic = only_error(source)
    assert diagnostic.message == f"unknown word `{word}`: did you mean `{suggestion}`?"


def test_no_suggestion_for_unrelated_words():
    assert "did you mean" not in only_error(thread("s: start k")).message
    assert only_error(thread("s: start k")).message.startswith("unknown operation after `STREAM:`")


def test_recovery_goes_on_after_each_statement_and_block():
    found = errors_of(
        "device d\nstream s on d\n"
        "thread t {\n"
        "  for i in 0...2 {\n"           # 4: the whole loop is skipped
        "    s: kernal inside\n"
        "  }\n"
        "  s: kernel k reads\n"          # 7
        "  choose {\n  }\n"              # 8: `choose` without `or`
        "  s: copy a b\n"                # 10
        "}\n"
        "thread u(x) {\n"                # 12: the whole thread is skipped
        "  s: kernel k\n"
        "}\n"
        "stream q on d blocking\n"       # 15
    )
    assert [(d.primary_span.line, d.message.split(":")[0]) for d in found] == [
        (4, "a `for` loop is written `for VAR in LOW..HIGH { ... }`"),
        (7, "`reads` and `writes` need at least one buffer"),
        (9, "a `choose` has two or more branches, each `or` on the line of the `}` before it"),
        (10, "a copy is written `STREAM"),
        (12, "a thread is declared `thread NAME {`, with the `{` on the same line"),
        (15, "a stream is declared `stream NAME[N]? on DEVICE [priority P] [legacy | nonblocking]`"),
    ]


def test_names_on_skipped_lines_are_not_reported_again():
    # `q` is declared on a line in error: its uses are not "not declared" errors
    found = errors_of("device d\nstream q on d blocking\nthread t {\n  q: kernel k\n  sync q\n}\n")
    assert [d.primary_span.line for d in found] == [2]


def test_error_cap(monkeypatch):
    found = errors_of("device d\nstream s on d\nthread t {\n" + "  s: kernel k reads\n" * 30 + "}\n")
    from checker.parse import MAX_ERRORS

    assert len(found) == MAX_ERRORS
    assert [d.primary_span.line for d in found] == list(range(4, 4 + MAX_ERRORS))
    assert found[-1].notes == (f"streamproof stops after {MAX_ERRORS} errors: fix these and check again",)
    assert not any(d.notes for d in found[:-1])


def test_large_file_with_errors_answers_quickly():
    import time

    body = "  s: kernel k reads x\n" * 20_000
    source = "device d\nstream s on d\nbuffer x 1MiB on d\nthread t {\n" + body + "  s: kernel k reads\n" * 3 + body + "}\n"
    started = time.process_time()
    found = errors_of(source)
    assert time.process_time() - started < 60
    assert 1 <= len(found) <= 3 and found[0].primary_span.line == 20_005


def test_a_missing_thread_brace_is_one_error_not_one_per_declaration():
    found = errors_of("device d\nstream s on d\nthread t {\n  s: kernel k\n\nbuffer x 1MiB on d\nstream q on d\n"
                      "thread u {\n  s: kernel j\n}\n")
    (diagnostic,) = found
    assert (diagnostic.primary_span.line, diagnostic.primary_span.column) == (6, 1)
    assert diagnostic.message == "missing `}` before this declaration: a block is still open"
    (opening,) = [a for a in diagnostic.annotations if not a.primary]
    assert (opening.span.line, opening.span.column, opening.label) == (3, 10, "this block is still open")


def test_a_stray_closing_brace_at_the_top_level_is_skipped_with_its_line():
    found = errors_of("device d\nthread t2 {\n}\nst2 }\nst2 }\nstream s on d\n")
    assert [(d.primary_span.line, d.message) for d in found] == [
        (4, "statements belong inside a `thread NAME { ... }` block"),
        (5, "statements belong inside a `thread NAME { ... }` block"),
    ]


def test_lone_carriage_returns_are_named_as_line_endings():
    (found,) = errors_of("device d\rstream s on d\r")
    assert found.message == "a line ends with a carriage return alone (CR line endings)"
    assert (found.primary_span.line, found.primary_span.column) == (1, 9)
    # in a comment or a title too, where an editor starts a line and streamproof would not
    for text, column in [("device d # one\rtwo\nstream s on d\n", 15), ('spec "a\rb"\ndevice d\n', 8)]:
        (found,) = errors_of(text)
        assert found.message.startswith("a line ends with a carriage return alone")
        assert (found.primary_span.line, found.primary_span.column) == (1, column)
    assert load_text("device d # one\r\nstream s on d\r\n").program is not None  # (CRLF is fine)


@pytest.mark.parametrize("statement, message, column", [
    ("s: kernel naïve_attn writes x", "`naïve_attn` is not a name: names are ASCII letters, digits and `_`", 13),
    ("host hé", "`hé` is not a name", 8),
    ("s: kernel a\u00a0writes x", "an invisible character, U+00A0 (no-break space), where a space or a name goes", 14),
    ("s: kernel ab\u200b", "an invisible character, U+200B (zero width space)", 15),
    # a stray character after the kernel's name is stray: the state's "needs a name" is not it
    ("s: kernel a @", "unexpected character '@'", 15),
    ("s: kernel @", "a kernel needs a name", 13),
    # a message about another statement's form that one parser state shares is left out
    ("s: free x x", "unexpected `x`", 13),
    ("let q = 3 junk", "unexpected `junk`", 13),
    ("s: kernel k reads x x", "separate the buffers of `reads` or `writes` with `,`", 23),
])
def test_a_character_the_language_has_no_use_for_is_named_as_it_is(statement, message, column):
    found = first_error(thread(statement))
    assert found.message.startswith(message), found.message
    assert (found.primary_span.line, found.primary_span.column) == (5, column)


def test_a_string_never_closed_is_said_to_be_so():
    found = first_error('spec "unterminated\ndevice d\n')
    assert found.message == 'a string is never closed: it needs its `"` on the same line'
    assert (found.primary_span.line, found.primary_span.column) == (1, 6)


def test_comma_before_writes_points_at_the_comma():
    (found,) = errors_of(thread("s: kernel k reads x, writes y"))
    line = thread("s: kernel k reads x, writes y").splitlines()[found.primary_span.line - 1]
    assert line[found.primary_span.column - 1] == ","
    assert "drop the `,`" in found.help and "expected" not in found.help


def test_a_spec_of_too_many_words_is_refused_where_it_passes_the_limit(monkeypatch):
    """Each word costs memory until lowering (32 MiB of `b, b, ...` took 4.9 GB), so large
    specs are counted first."""
    import checker.parse as parse_module

    monkeypatch.setattr(parse_module, "MAX_TOKENS", 1000)
    monkeypatch.setattr(parse_module, "_COUNTED_FROM", 100)
    source = thread("s: kernel k writes " + ", ".join(["x"] * 600))  # 1,199 words and signs in the line
    diagnostic = only_error(source)
    assert diagnostic.code is Code.SP004 and "more than 1,000 words and signs" in diagnostic.message
    assert diagnostic.primary_span.line == 5
    monkeypatch.setattr(parse_module, "MAX_TOKENS", 2000)
    assert load_text(source).program is not None
    monkeypatch.setattr(parse_module, "MAX_TOKENS", 1000)
    commented = thread("s: kernel k writes x") + ("# " + "a " * 600 + "\n") * 5  # a comment counts once
    assert load_text(commented).program is not None


@pytest.mark.parametrize("line, column", [("  s: kernel k /* x */ writes x\n", 15), ("  s: kernel k writes x // x\n", 24)])
def test_a_c_comment_is_told_comments_start_with_a_hash(line, column):
    diagnostic = assert_error(HEAD + "thread t {\n" + line + "}\n", Code.SP002, 5, column, column + 2)
    assert diagnostic.message == "comments start with `#`"
    assert assert_error("// a spec\ndevice d\n", Code.SP002, 1, 1, 3).message == "comments start with `#`"


@pytest.mark.parametrize("source, message, column", [
    (thread("wait x"), "`wait` is a stream statement: a thread waits with `sync`", 3),
    (thread("syncall"), "unknown word `syncall`: did you mean `sync all`?", 3),
    (thread("s.sync()"), "a statement is not a call", 9),
    ("device d\nstream copy-stream on d\n", "a name cannot hold `-`: write `copy_stream`", 8),
])
def test_habits_of_cuda_and_pytorch_programmers_get_the_statement_to_write(source, message, column):
    diagnostic = only_error(source)
    assert (diagnostic.code, diagnostic.message, diagnostic.primary_span.column) == (Code.SP002, message, column)


@pytest.mark.parametrize("statement, message", [
    ("s: sync", "`sync` is a host statement, not a stream operation"),
    ("s: memcpy x <- x", "`memcpy` is a host statement, not a stream operation"),
    ("s: allreduce x 3ms", "a collective is written `STREAM: KIND COMM BUFFER [DURATION]` or "
                           "`STREAM: KIND COMM DESTINATION <- SOURCE [DURATION]`"),
])
def test_a_host_statement_after_a_stream_or_a_collective_without_its_comm_is_named(statement, message):
    assert only_error(thread(statement)).message == message


@pytest.mark.parametrize("line, message", [
    ("expect no race on x", "expect one of:"),
    ("expect race on x[1][0:64]", "with no byte range"),
    ("expect mismatch on x", "`no mismatch`, `mismatch`"),
])
def test_an_expectation_of_no_form_lists_every_form(line, message):
    loaded = load_text("device d\nbuffer x[2] 1MiB on d\nstream s on d\nthread t {\n  s: kernel k writes x[0]\n}\n"
                       + line + "\n", "t.sched")
    (diagnostic,) = loaded.diagnostics
    assert diagnostic.code is Code.SP002 and message in diagnostic.message, diagnostic.message


def test_an_expectation_inside_a_thread_is_told_to_go_to_the_top_level():
    loaded = load_text("device d\nbuffer x 1MiB on d\nstream s on d\nthread t {\n  s: kernel k writes x\n"
                       "  expect no race\n}\n", "t.sched")
    (diagnostic,) = loaded.diagnostics
    assert diagnostic.message == "`expect` lines go at the top level, outside every `thread` block"
    assert (diagnostic.primary_span.line, diagnostic.primary_span.column) == (6, 3)


def test_an_else_on_a_line_of_its_own_is_underlined():
    # the caret goes under the `else`, which the message is about, not under the `{` after it
    diagnostic = assert_error(thread("if 1 < 2 {", "  s: kernel a", "}", "else {", "  s: kernel b", "}"),
                              Code.SP002, 8, 3, 7, "`else` goes on the line of the `}` before it")
    assert diagnostic.annotations[0].label == "`else` on a line of its own"
