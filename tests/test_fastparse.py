"""The hand-written parser against lark: wherever `checker.fastparse` returns a tree, it is the
tree lark and its transformer build (every node and span), and wherever lark refuses the text,
the hand-written parser leaves it to lark. Inputs: every spec in the repository and in the
documentation, the syntax-error examples, random valid specs (with every statement form and
expression shape), and random mutations of real specs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import CONFORMANCE, SPECS
from strategies import specs
from checker import fastparse
from checker.diagnostics import SpecError
from checker.frontend import load_text
from checker.parse import SYNTAX_EXAMPLES, parse, parse_with_lark

ROOT = Path(__file__).resolve().parent.parent
FILES = sorted(SPECS.glob("*.sched")) + sorted(CONFORMANCE.glob("*.sched")) + sorted(
    (ROOT / "tests" / "regressions").glob("*.sched"))
DOC_BLOCKS = [block for doc in ("language.md", "codes.md")
              for block in re.findall(r"```(?:sched)?\n(.*?)```", (ROOT / "docs" / doc).read_text(), re.S)]


def agree(text: str) -> str:
    """'fast' when the hand-written parser built the tree (and it equals lark's), 'lark' when it
    left the text to lark (which then parsed it or refused it)."""
    text = text if text.endswith("\n") else text + "\n"
    try:
        fast = fastparse.parse(text)
    except fastparse.Unhandled:
        fast = None
    try:
        slow = parse_with_lark(text)
    except SpecError as exc:
        assert fast is None, f"lark refuses ({exc.diagnostic.message}) what the fast parser accepts:\n{text}"
        return "lark"
    except RecursionError:
        assert fast is None
        return "lark"
    if fast is None:
        return "lark"
    assert fast == slow, text
    # the bulk tokenizer and the exact one agree
    if "\\" not in text:
        assert fastparse._tokenize_bulk(text) == fastparse._tokenize(text)
    return "fast"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_repository_specs(path):
    text = path.read_text()
    result = agree(text)
    if not path.name.startswith("e0"):  # the conformance error specs
        assert result == "fast", "a valid spec should not need lark"


@pytest.mark.parametrize("index", range(len(DOC_BLOCKS)))
def test_documentation_examples(index):
    agree(DOC_BLOCKS[index])


@pytest.mark.parametrize("use", ["s: allreduce c from", "s: send c to s to", "s: recv c from s from",
                                 "s: broadcast c root s external", "s: allgather c to <- from"])
def test_soft_keywords_as_buffer_names_parse_alike(use):
    """`to`, `from` and `external` are names wherever a name goes, for lark too: its merged
    LALR states had the lexer read them as keywords after a comm's stream."""
    head = ("device g\nbuffer from 1MiB on g\nbuffer to 1MiB on g\nbuffer external 1MiB on g\nstream s on g\n"
            "comm c = { s }\n")
    assert agree(head + f"thread t {{\n  {use}\n}}\n") == "fast"
    # (an `if` leaves the file to lark, which reads the line outside it too)
    assert agree(head + f"thread t {{\n  {use}\n  if 1 == 1 {{\n    {use}\n  }}\n}}\n") == "lark"
    assert load_text(head + f"thread t {{\n  if 1 == 1 {{\n    {use}\n  }}\n}}\n").program is not None


def test_syntax_examples_go_to_lark():
    for examples in SYNTAX_EXAMPLES.values():
        for example in examples:
            assert agree(example) == "lark", example


@pytest.mark.parametrize("text", [
    "device d\nstream s on d\nthread t {\n  let v = (1 + 2) * -(3 % x) - ((y))\n  s[(v)]: kernel k reads a[(1):(2)]\n}\n",
    "device d\nthread t { s: kernel k }\n",
    "device d\nthread t {}\nthread u {\n}\n",
    "  # leading comment\n\ndevice d # trailing\n\n# between\nstream s on d\n\n\n",
    "device d {\n  compute 1\n  copy 2 launch 3.25us\n}\n",
    "device d\r\nstream s on d\r\nthread t {\r\n\ts: kernel k\t1ms\r\n}",
    "stream s on d priority -3 nonblocking\nstream t on d legacy priority low\n",
    'spec "a # b"\nexpect makespan <= 2.5ms\nexpect no use-after-free\nexpect use-after-free on x\n',
    "expect mismatch\nexpect no mismatch\n",
    "thread t {\n  s: kernel k \\\n    reads x 1ms\n}\n",
    "thread t {\n  group {\n  }\n  choose { } or {\n  } or { s: kernel k }\n  query e[1]\n  memcpy a <- b[0][1KiB:]\n}\n",
    "thread t {\n  group: kernel k\n  query : kernel k\n  memset x 1ms\n  memset: kernel k\n}\n",
    "comm c[2] = {\n  s[c],\n  t[2 * c + 1]\n}\ntensor a[2] 4MiB on d\nthread r[2] {\n}\n",
    "thread t {\n  s: broadcast w root r[1] y <- x 1us\n  s: alltoall w x\n  s: item x[:4B]\n"
    "  s: wait_stream r\n  s: record_stream a[0]\n  s: send c to r x\n}\n",
    "buffer b 99999999999999999999B on host\n",
    "thread t {\n  s: kernel k 0.5ns\n}\n",
    "thread t {\n  let v = 1.5ms\n}\n",
    "buffer process 1MiB on g\nthread process process {\n  s: kernel k writes process\n}\nthread r[2] process {}\n",
    "device d { runtime cuda }\nthread t {\n  for i in 0..n+1 {\n    s[i % 2]: copy x[i*1MiB:(i+1)*1MiB] <- y\n  }\n}\n",
])
def test_tricky_forms(text):
    agree(text)


@pytest.mark.parametrize("digit", ["\u0663", "\uff13", "\u0969"])  # Arabic-Indic, fullwidth, Devanagari three
@pytest.mark.parametrize("template", ["buffer y[{d}] 1B on d\n", "buffer y {d}B on d\n",
                                      "thread t {{\n  s: kernel k writes y[{d}] {d}ms\n}}\n"])
def test_numbers_are_ascii_digits(template, digit):
    """The contract's numbers are ASCII digits. Python's `\\d` and `int()` take any Unicode
    digit, which once made `buffer y[\u0663]` three buffers: both parsers refuse it, where it is."""
    text = "device d\nstream s on d\n" + template.format(d=digit)
    assert agree(text) == "lark"
    with pytest.raises(SpecError) as caught:
        parse(text)
    span = caught.value.diagnostic.primary_span
    line, column = span.line, span.column
    assert text.splitlines()[line - 1][column - 1] == digit


def test_deep_expressions_go_to_lark():
    from checker.parse import MAX_OPERATORS_DEEP as deep
    from checker.resources import deep_recursion

    assert agree("thread t {\n  let v = " + "-" * (deep + 1) + "1\n}\n") == "lark"
    assert agree("thread t {\n  let v = " + "+".join(["1"] * (deep + 2)) + "\n}\n") == "lark"
    with deep_recursion():  # (comparing the two trees recurses as deep as they go, as the front end does)
        assert agree("thread t {\n  let v = " + "+".join(["1"] * (deep + 1)) + "\n}\n") == "fast"


def test_parse_uses_the_fast_parser_and_keeps_lark_diagnostics():
    with pytest.raises(SpecError) as caught:
        parse("device d\nstream s on d\nthread t {\n  s: kernel k reads\n}\n")
    assert caught.value.diagnostic.message == "`reads` and `writes` need at least one buffer"


# -- random text -----------------------------------------------------------------------------

NAMES = st.sampled_from(["s", "x", "e", "c", "kernel", "reads", "all", "host", "group", "query", "i", "_v2", "for",
                         "sync", "free", "root", "or", "memset"])
LEAF = st.one_of(st.integers(0, 99).map(str), st.sampled_from(["4KiB", "1MiB", "2MB"]), NAMES)


@st.composite
def expressions(draw, depth: int = 0) -> str:
    if depth > 2 or draw(st.booleans()):
        return draw(LEAF)
    kind = draw(st.sampled_from(["op", "neg", "paren"]))
    if kind == "neg":
        return "-" + draw(expressions(depth + 1))
    if kind == "paren":
        return "(" + draw(expressions(depth + 1)) + ")"
    operator = draw(st.sampled_from(["+", "-", "*", "/", "%", " + ", " * "]))
    return draw(expressions(depth + 1)) + operator + draw(expressions(depth + 1))


@st.composite
def accesses(draw) -> str:
    text = draw(NAMES)
    for _ in range(draw(st.integers(0, 2))):
        if draw(st.booleans()):
            text += f"[{draw(expressions())}]"
        else:
            low = draw(st.one_of(st.just(""), expressions()))
            high = draw(st.one_of(st.just(""), expressions()))
            text += f"[{low}:{high}]"
    return text


@st.composite
def statements(draw, depth: int = 0) -> str:
    ref = lambda: draw(NAMES) + draw(st.sampled_from(["", "[0]", "[i + 1]", "[ (k) ]"]))  # noqa: E731
    duration = lambda: draw(st.sampled_from(["", " 1ms", " 2.5us", " 3s", " 0ns"]))  # noqa: E731
    access = lambda: draw(accesses())  # noqa: E731

    def rw() -> str:
        return "".join(f" {draw(st.sampled_from(['reads', 'writes']))} "
                       + ", ".join(access() for _ in range(draw(st.integers(1, 3))))
                       for _ in range(draw(st.integers(0, 2))))

    def body() -> str:
        return "\n".join(draw(statements(depth + 1)) for _ in range(draw(st.integers(0, 2))))

    forms = [
        lambda: f"{ref()}: kernel {draw(NAMES)}{rw()}{duration()}",
        lambda: f"{ref()}: callback {draw(NAMES)}{rw()}{duration()}",
        lambda: f"{ref()}: copy {access()} <- {access()}{duration()}",
        lambda: f"{ref()}: memset {access()}{duration()}",
        lambda: f"{ref()}: item {access()}{duration()}",
        lambda: f"{ref()}: {draw(st.sampled_from(['record', 'wait', 'reset', 'notify', 'await']))} {ref()}",
        lambda: f"{ref()}: {draw(st.sampled_from(['allreduce', 'allgather', 'reducescatter', 'alltoall']))} c "
                f"{access()}" + draw(st.sampled_from(["", " <- y[1:]"])) + duration(),
        lambda: f"{ref()}: {draw(st.sampled_from(['broadcast', 'reduce']))} c root {ref()} {access()}{duration()}",
        lambda: f"{ref()}: send c to {ref()} {access()}{duration()}",
        lambda: f"{ref()}: recv c from {ref()} {access()}",
        lambda: f"{ref()}: {draw(st.sampled_from(['alloc', 'free', 'record_stream']))} {access()}",
        lambda: f"{ref()}: wait_stream {ref()}",
        lambda: f"host {draw(NAMES)}{rw()}{duration()}",
        lambda: f"sync {draw(st.sampled_from(['all', 's[1]', 'e']))}",
        lambda: f"query {ref()}",
        lambda: f"{draw(st.sampled_from(['notify', 'await']))} {ref()}",
        lambda: f"{draw(st.sampled_from(['alloc', 'free']))} {access()}",
        lambda: f"memcpy {access()} <- {access()}{duration()}",
        lambda: f"memset {access()}{duration()}",
        lambda: f"let {draw(NAMES)} = {draw(expressions())}",
    ]
    if depth < 2:
        forms += [
            lambda: f"for i in {draw(expressions())}..{draw(expressions())} {{\n{body()}\n}}",
            lambda: f"group {{\n{body()}\n}}",
            lambda: f"choose {{\n{body()}\n}} or {{ }}" + draw(st.sampled_from(["", " or {\n}"])),
        ]
    form = draw(st.integers(0, len(forms) - 1))
    return forms[form]() + draw(st.sampled_from(["", "  # note", " \t"]))


@st.composite
def texts(draw) -> str:
    declarations = [
        "device d { compute 2 copy 1 runtime cuda }",
        f"buffer {draw(NAMES)}[{draw(expressions())}] 4MiB on host pinned",
        f"stream {draw(NAMES)} on d priority {draw(st.sampled_from(['high', 'low', '3', '-2']))}",
        f"alias a = {draw(accesses())}",
        "event e[2] flag",
        f"comm c[2] = {{ {draw(NAMES)}, s[c] }}",
        "tensor t 1MiB on d",
        "expect race on x",
    ]
    body = "\n".join("  " + draw(statements()) for _ in range(draw(st.integers(0, 6))))
    chosen = [draw(st.sampled_from(declarations)) for _ in range(draw(st.integers(0, 4)))]
    return "\n".join(chosen) + f"\nthread t{draw(st.sampled_from(['', '[2]']))} {{\n{body}\n}}\n"


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(texts())
def test_random_texts(text):
    agree(text)


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(specs())
def test_random_valid_specs_take_the_fast_path(text):
    assert agree(text) == "fast"


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_mutations(data):
    from test_frontend_fuzz import mutated

    raw = data.draw(mutated())
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return
    if "\0" in text:
        return
    agree(text)
