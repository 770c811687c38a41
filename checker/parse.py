"""Source text to syntax tree: decoding, the lark LALR parser, and syntax diagnostics.

Everything that can go wrong before names are resolved is turned into a `Diagnostic` here,
once: undecodable bytes, oversized or too deeply nested input, syntax errors, and literals
out of range.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal, InvalidOperation
from fractions import Fraction
import gc
import re
import threading
import unicodedata
from functools import lru_cache
from importlib import resources
from pathlib import Path

from lark import Lark, Token, Tree, v_args
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken, VisitError
from lark.visitors import Transformer_NonRecursive

from checker import ast, fastparse
from checker.codes import Code
from checker.diagnostics import Diagnostic, SpecError, error
from checker.ir import PRIORITY_HIGH, PRIORITY_LOW, Span  # noqa: F401  (re-exported)
from checker.spec_text import MAX_DURATION_NS  # noqa: F401  (re-exported)

MAX_SOURCE_CHARS = 32 * 1024 * 1024
MAX_NESTING = 200
MAX_OPERATORS_DEEP = 2_000
"""How deep operators may nest in one expression (a sum of 2,000 terms, `- - ... 1`):
evaluating it is a recursion, as deep as that."""
MAX_LITERAL = 2**62

SIZE_UNITS = {
    "B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40,
    "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
}
DURATION_UNITS = {"ns": 1, "us": 10**3, "ms": 10**6, "s": 10**9}

# Words that would be read as a keyword where a name can also stand (a statement that starts
# with a stream name, `sync NAME`, `on NAME`). Other keywords stay usable as names, since the
# parser only expects them where no name can be (`stream compute`, `stream comm` are fine).
KEYWORDS = frozenset({"for", "let", "host", "sync", "notify", "await", "alloc", "free", "all"})


def _grammar_text() -> str:
    try:
        return resources.files("checker.grammar").joinpath("sched.lark").read_text()
    except (ModuleNotFoundError, FileNotFoundError):
        return (Path(__file__).resolve().parent.parent / "grammar" / "sched.lark").read_text()


# Keywords are plain strings in the grammar. Where the parser accepts a keyword but no name,
# lark's contextual lexer would match a keyword that is only the start of a longer word
# (`kernelx` as `kernel x`, `flagged` as `flag ged`). The callback below turns such a token
# into the whole word as a NAME, which the parser then rejects with a proper syntax error.
_lexing = threading.local()
_NAME_AT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_WORD_CHAR = re.compile(r"[A-Za-z0-9_]")


def _whole_word(token: Token) -> Token:
    text = getattr(_lexing, "text", None)
    if text is None or token.end_pos >= len(text) or not _WORD_CHAR.match(text, token.end_pos):
        return token
    word = _NAME_AT.match(text, token.start_pos).group()
    return Token("NAME", word, token.start_pos, token.line, token.column, token.line,
                 token.column + len(word), token.start_pos + len(word))


def _keyword_terminals(grammar: str) -> list[str]:
    """Lark names an anonymous keyword `"kernel"` KERNEL; ENGINE, ALL, USE_AFTER_FREE are named."""
    words = re.findall(r'"([A-Za-z_]+)"', grammar)
    return sorted({word.upper() for word in words} | {"ENGINE", "ALL", "USE_AFTER_FREE"})


@lru_cache(maxsize=1)
def _parser() -> Lark:
    grammar = _grammar_text()
    callbacks = {name: _whole_word for name in _keyword_terminals(grammar)}
    return Lark(grammar, parser="lalr", propagate_positions=True, maybe_placeholders=True,
                lexer_callbacks=callbacks)


def _keyword_as_name(exc: UnexpectedInput) -> bool:
    """Feed a keyword again as the name it is where the parser takes a name and not the
    keyword: LALR merges the states after a stream in `send C to P` and elsewhere, so the
    contextual lexer reads `to`, `from` or `external` as the keyword even where only a name
    fits (`allreduce c from`, a buffer named `from`). Reserved words stay errors."""
    token = getattr(exc, "token", None)
    if (not isinstance(exc, UnexpectedToken) or not isinstance(token, Token) or token.type == "NAME"
            or "NAME" not in (exc.expected or ()) or str(token) in KEYWORDS
            or not _NAME_AT.fullmatch(str(token))):
        return False
    exc.interactive_parser.feed_token(Token.new_borrow_pos("NAME", str(token), token))
    return True


def _parse_tree(parser: Lark, text: str):
    _lexing.text = text
    try:
        return parser.parse(text, on_error=_keyword_as_name)
    finally:
        _lexing.text = None


def span_of(item) -> Span:
    """The span of a token or of a rule's `meta`."""
    if isinstance(item, Token):
        return Span(item.line, item.column, item.end_line, item.end_column, item.start_pos, item.end_pos)
    if getattr(item, "empty", True):
        return Span(1, 1, 1, 1, 0, 0)
    return Span(item.line, item.column, item.end_line, item.end_column, item.start_pos, item.end_pos)


def _name(token: Token) -> ast.Name:
    return ast.Name(str(token), span_of(token))


def _int_literal(token: Token) -> int:
    text = str(token).lstrip("-")
    # The length first: `int` of a long string costs time quadratic in its length.
    if len(text) > len(str(MAX_LITERAL)) or int(text) > MAX_LITERAL:
        raise SpecError(error(Code.SP020, "number too large", span_of(token), "this number",
                              help="integers may be at most 2^62"))
    return int(str(token))


def size_bytes(token: Token) -> int:
    text = str(token)
    digits = text.rstrip("BKMGTiB")
    unit = text[len(digits):]
    value = _int_literal(Token("INT", digits, token.start_pos, token.line, token.column)) * SIZE_UNITS[unit]
    if value > MAX_LITERAL:
        raise SpecError(error(Code.SP020, "size too large", span_of(token), "this size"))
    return value


def duration_node(token: Token, rounding: str = ROUND_CEILING) -> ast.Duration:
    """The duration of a token, with its exact value where whole nanoseconds round it."""
    nanoseconds = duration_ns(token, rounding)
    text = str(token)
    number = text.rstrip("nsum")
    exact = Fraction(Decimal(number)) * DURATION_UNITS[text[len(number):]]
    return ast.Duration(nanoseconds, span_of(token), None if exact == nanoseconds else exact)


def duration_ns(token: Token, rounding: str = ROUND_CEILING) -> int:
    """A duration in whole nanoseconds. A finer one is rounded up (`rounding`): a task that
    takes time (`0.5ns`) still does, which decides whether it holds a hardware queue while it
    runs. A makespan bound is rounded down instead, since makespans are whole nanoseconds:
    `makespan <= 1.5ns` holds exactly when `makespan <= 1ns` does."""
    text = str(token)
    number = text.rstrip("nsum")
    unit = text[len(number):]
    span = span_of(token)
    whole = number.partition(".")[0].lstrip("0")
    if len(whole) > 24:
        raise SpecError(error(Code.SP020, "duration too long", span, "this duration"))
    if len(number) > 1000:  # (digits after the point only refine what rounds to whole ns)
        raise SpecError(error(Code.SP020, "a duration of more than 1,000 digits", span, "this duration"))
    try:
        value = Decimal(number) * DURATION_UNITS[unit]
    except InvalidOperation:  # pragma: no cover - the lexer only passes decimals
        raise SpecError(error(Code.SP020, "not a duration", span)) from None
    if value != value.to_integral_value():
        value = value.to_integral_value(rounding=rounding)
    if value > MAX_DURATION_NS:
        raise SpecError(error(Code.SP020, "duration too long", span, "this duration",
                              help="durations are limited to 10^6 s"))
    return int(value)


class _Marker:
    """A tagged child of a declaration rule that has optional parts in any order."""

    __slots__ = ("tag", "value", "span")

    def __init__(self, tag: str, value=None, span: Span | None = None):
        self.tag, self.value, self.span = tag, value, span


@v_args(inline=True, meta=True)
class _ToAst(Transformer_NonRecursive):
    """Builds `checker.ast` nodes with spans from the lark parse tree."""

    # -- top level
    def start(self, meta, *items):
        return ast.SpecFile(tuple(items), span_of(meta))

    def spec_decl(self, meta, title):
        return ast.SpecTitle(str(title)[1:-1], span_of(meta))

    def device_decl(self, meta, name, *items):
        count = items[0].value if items and isinstance(items[0], _Marker) else None
        items = tuple(i for i in items if not isinstance(i, _Marker))
        return ast.DeviceDecl(_name(name), items, span_of(meta), count)

    def engine(self, meta, engine, count):
        return ast.EngineItem(str(engine), _int_literal(count), span_of(meta))

    def launch(self, meta, duration):
        return ast.LaunchItem(duration_node(duration), span_of(meta))

    def queues(self, meta, count):
        return ast.QueuesItem(_int_literal(count), span_of(meta))

    def runtime(self, meta, name):
        return ast.RuntimeItem(_name(name), span_of(meta))

    def array(self, meta, expr):
        return _Marker("array", expr, span_of(meta))

    def host_place(self, meta):
        return _Marker("host", None, span_of(meta))

    def device_place(self, meta, name, index=None):
        return _Marker("device", (_name(name), index.value if index is not None else None), span_of(meta))

    def device_index(self, meta, expr):
        return _Marker("device_index", expr, span_of(meta))

    def pinned(self, meta):
        return _Marker("pinned", True, span_of(meta))

    def flag(self, meta):
        return _Marker("flag", True, span_of(meta))

    def ipc(self, meta):
        return _Marker("ipc", True, span_of(meta))

    def buffer_decl(self, meta, name, *rest):
        parts = {m.tag: m for m in rest if isinstance(m, _Marker)}
        size = next(r for r in rest if isinstance(r, Token))
        place = parts.get("device")
        return ast.BufferDecl(
            _name(name),
            parts["array"].value if "array" in parts else None,
            ast.Number(size_bytes(size), span_of(size)),
            place.value[0] if place else None,
            "pinned" in parts,
            span_of(meta),
            place.value[1] if place else None,
            "ipc" in parts,
        )

    def alias_decl(self, meta, name, target):
        return ast.AliasDecl(_name(name), target, span_of(meta))

    def stream_decl(self, meta, name, *rest):
        count = None
        device = None
        priority = None
        mode = "blocking"
        mode_span = None
        device_index = None
        for part in rest:
            if isinstance(part, Token):
                device = _name(part)
            elif part.tag == "array":
                count = part.value
            elif part.tag == "device_index":
                device_index = part.value
            elif part.tag == "priority":
                if priority is not None:
                    raise SpecError(error(Code.SP002, "`priority` is given twice", part.span, "second priority",
                                          secondary=((priority[1], "first priority"),)))
                priority = (part.value, part.span)
            else:
                if mode_span is not None:
                    raise SpecError(error(Code.SP002, "a stream is either `legacy` or `nonblocking`, once",
                                          part.span, f"`{part.tag}` again" if part.tag == mode else "conflicting mode",
                                          secondary=((mode_span, "first given here"),)))
                mode, mode_span = part.tag, part.span
        return ast.StreamDecl(_name(name), count, device, priority, mode, span_of(meta), device_index)

    def priority(self, meta, level):
        return _Marker("priority", level, span_of(meta))

    def high(self, meta):
        return PRIORITY_HIGH

    def low(self, meta):
        return PRIORITY_LOW

    def level(self, meta, token):
        return _int_literal(token)

    def legacy(self, meta):
        return _Marker("legacy", None, span_of(meta))

    def nonblocking(self, meta):
        return _Marker("nonblocking", None, span_of(meta))

    def event_decl(self, meta, name, *rest):
        tags = {m.tag: m for m in rest}
        return ast.EventDecl(_name(name), tags["array"].value if "array" in tags else None,
                             "flag" in tags, span_of(meta), "ipc" in tags)

    def notify_decl(self, meta, name, *rest):
        return ast.NotifyDecl(_name(name), rest[0].value if rest else None, span_of(meta))

    def comm_decl(self, meta, name, *members):
        parts = {m.tag: m for m in members if isinstance(m, _Marker)}
        count = parts["array"].value if "array" in parts else None
        return ast.CommDecl(_name(name), count, tuple(m for m in members if not isinstance(m, _Marker)),
                            span_of(meta), "one_in_flight" in parts)

    def one_in_flight(self, meta):
        return _Marker("one_in_flight", True, span_of(meta))

    def tensor_decl(self, meta, name, *rest):
        count = rest[0].value if isinstance(rest[0], _Marker) and rest[0].tag == "array" else None
        index = rest[-1].value if isinstance(rest[-1], _Marker) and rest[-1].tag == "device_index" else None
        size, device = [r for r in rest if isinstance(r, Token)]
        return ast.TensorDecl(_name(name), count, ast.Number(size_bytes(size), span_of(size)), _name(device),
                              span_of(meta), index)

    def process(self, meta):
        return _Marker("process", True, span_of(meta))

    def thread_decl(self, meta, name, *rest):
        parts = {m.tag: m for m in rest if isinstance(m, _Marker)}
        count = parts["array"].value if "array" in parts else None
        return ast.ThreadDecl(_name(name), count, rest[-1], span_of(meta), "process" in parts)

    def graph_decl(self, meta, name, *rest):
        count = rest[0].value if isinstance(rest[0], _Marker) and rest[0].tag == "array" else None
        return ast.GraphDecl(_name(name), count, rest[-1], span_of(meta))

    def block(self, meta, *statements):
        return tuple(statements)

    def expect_decl(self, meta, prop):
        kind, buffer, limit = prop
        return ast.ExpectDecl(kind, buffer, limit, span_of(meta))

    def no_race(self, meta):
        return ("no race", None, None)

    def race(self, meta, buffer=None):
        return ("race", buffer, None)

    def no_deadlock(self, meta):
        return ("no deadlock", None, None)

    def deadlock(self, meta):
        return ("deadlock", None, None)

    def no_uaf(self, meta, _token):
        return ("no use-after-free", None, None)

    def uaf(self, meta, _token, buffer=None):
        return ("use-after-free", buffer, None)

    def no_mismatch(self, meta):
        return ("no mismatch", None, None)

    def mismatch(self, meta):
        return ("mismatch", None, None)

    def makespan(self, meta, limit):
        return ("makespan", None, duration_node(limit, ROUND_FLOOR))

    # -- statements
    def for_stmt(self, meta, variable, low, high, body):
        return ast.For(_name(variable), low, high, body, span_of(meta))

    def let_stmt(self, meta, variable, value):
        return ast.Let(_name(variable), value, span_of(meta))

    def task_stmt(self, meta, stream, pending):
        cls, fields, *options = pending
        return cls(stream, *fields, span_of(meta), **(options[0] if options else {}))

    @staticmethod
    def _rw(rest) -> tuple:
        """(reads, writes, duration) of `reads ... writes ... DURATION` in any order."""
        reads: list = []
        writes: list = []
        duration = None
        for part in rest:
            if isinstance(part, ast.Duration):
                duration = part
            elif part.tag == "reads":
                reads.extend(part.value)
            else:
                writes.extend(part.value)
        return tuple(reads), tuple(writes), duration

    # Each operation after `STREAM:` returns (node class, fields after the stream); the
    # statement adds the stream and the span.
    def kernel(self, meta, name, *rest):
        return ast.KernelTask, (_name(name), *self._rw(rest))

    def callback(self, meta, name, *rest):
        return ast.CallbackTask, (_name(name), *self._rw(rest))

    def copy(self, meta, destination, source, duration=None):
        return ast.CopyTask, (destination, source, duration)

    def _targeted(cls):  # noqa: N805 - builds methods
        def method(self, meta, target):
            return cls, (target,)
        return method

    def _event_node(cls):  # noqa: N805 - builds methods
        def method(self, meta, target, external=None):  # (`external`: an event node in a graph)
            return cls, (target,), {"external": external is not None}
        return method

    record = _event_node(ast.RecordTask)
    wait = _event_node(ast.WaitTask)
    reset = _event_node(ast.ResetTask)

    def external(self, meta):
        return True

    notify = _targeted(ast.NotifyTask)
    await_ = _targeted(ast.AwaitTask)

    def memset(self, meta, access, duration=None):
        return ast.MemsetTask, (access, duration)

    def _collective(kind):  # noqa: N805 - builds methods
        def method(self, meta, comm, access, source, duration=None):
            return ast.CollectiveTask, (kind, comm, None, access, source, duration)
        return method

    allreduce = _collective("allreduce")
    allgather = _collective("allgather")
    reducescatter = _collective("reducescatter")
    alltoall = _collective("alltoall")

    def _rooted(kind):  # noqa: N805 - builds methods
        def method(self, meta, comm, root, access, source, duration=None):
            return ast.CollectiveTask, (kind, comm, root, access, source, duration)
        return method

    broadcast = _rooted("broadcast")
    reduce = _rooted("reduce")

    def send(self, meta, comm, peer, access, duration=None):
        return ast.SendTask, (comm, peer, access, duration)

    def recv(self, meta, comm, peer, access, duration=None):
        return ast.RecvTask, (comm, peer, access, duration)

    def alloc(self, meta, access):
        return ast.AllocTask, (access,)

    def free(self, meta, access):
        return ast.FreeTask, (access,)

    def wait_stream(self, meta, source):
        return ast.WaitStreamTask, (source,)

    def record_stream(self, meta, tensor):
        return ast.RecordStreamTask, (tensor,)

    def launch_graph(self, meta, graph):
        return ast.LaunchTask, (graph,)

    def item(self, meta, access, duration=None):
        return ast.ItemTask, (access, duration)

    def host_stmt(self, meta, name, *rest):
        return ast.HostCall(_name(name), *self._rw(rest), span_of(meta))

    def sync_stmt(self, meta, target):
        return ast.Sync(None if isinstance(target, Token) else target, span_of(meta))

    def host_notify(self, meta, target):
        return ast.HostNotify(target, span_of(meta))

    def host_await(self, meta, target):
        return ast.HostAwait(target, span_of(meta))

    def host_alloc(self, meta, access, nosync=None):
        return ast.HostAlloc(access, span_of(meta), nosync is not None)

    def host_free(self, meta, access, nosync=None):
        return ast.HostFree(access, span_of(meta), nosync is not None)

    def nosync(self, meta):
        return True

    def group_stmt(self, meta, _keyword, body):
        return ast.Group(body, span_of(meta))

    def choose_stmt(self, meta, _keyword, *branches):
        return ast.Choose(tuple(branches), span_of(meta))

    def if_stmt(self, meta, *parts):
        # IF condition block, then (IF condition block)* and an optional else block.
        branches = []
        i = 0
        while i + 2 < len(parts) and isinstance(parts[i], Token):
            branches.append((parts[i + 1], parts[i + 2]))
            i += 3
        otherwise = parts[i] if i < len(parts) else ()
        return ast.If(tuple(branches), otherwise, span_of(meta))

    def comparison(self, meta, left, operator, right):
        return self._nested(ast.Compare(str(operator), left, right, span_of(meta)), left, right)

    def either(self, meta, left, right):
        return self._nested(ast.Logical("or", left, right, span_of(meta)), left, right)

    def both(self, meta, left, right):
        return self._nested(ast.Logical("and", left, right, span_of(meta)), left, right)

    def query_stmt(self, meta, _keyword, target):
        return ast.Query(target, span_of(meta))

    def memcpy_stmt(self, meta, _keyword, destination, source, duration=None):
        return ast.Memcpy(destination, source, duration, span_of(meta))

    def host_memset(self, meta, _keyword, access, duration=None):
        return ast.HostMemset(access, duration, span_of(meta))

    def reads(self, meta, *accesses):
        return _Marker("reads", tuple(accesses), span_of(meta))

    def writes(self, meta, *accesses):
        return _Marker("writes", tuple(accesses), span_of(meta))

    def duration(self, meta, token):
        return duration_node(token)

    def ref(self, meta, name, index=None, member=None):
        return ast.Ref(_name(name), index, span_of(meta), _name(member) if member is not None else None)

    def access(self, meta, name, *subscripts):
        return ast.AccessRef(_name(name), tuple(subscripts), span_of(meta))

    def index(self, meta, expr):
        return ast.Index(expr, span_of(meta))

    def slice(self, meta, low, high):
        return ast.Slice(low, high, span_of(meta))

    # -- expressions
    def _nested(self, node, *operands):
        """Bound expression depth, so that evaluating an expression never exhausts the stack."""
        depths = getattr(self, "_depths", None)
        if depths is None:
            depths = self._depths = {}
        depth = 1 + max(depths.get(id(o), 0) for o in operands)
        if depth > MAX_OPERATORS_DEEP:
            raise SpecError(error(Code.SP004, "expression nested too deeply", node.span, "this expression",
                                  help=f"an expression may nest at most {MAX_OPERATORS_DEEP:,} operators deep"))
        depths[id(node)] = depth
        return node

    def _binary(operator):  # noqa: N805 - builds methods
        def method(self, meta, left, right):
            return self._nested(ast.BinaryOp(operator, left, right, span_of(meta)), left, right)
        return method

    add = _binary("+")
    sub = _binary("-")
    mul = _binary("*")
    div = _binary("/")
    mod = _binary("%")

    def neg(self, meta, operand):
        return self._nested(ast.Negate(operand, span_of(meta)), operand)

    def int_literal(self, meta, token):
        return ast.Number(_int_literal(token), span_of(token))

    def size_literal(self, meta, token):
        return ast.Number(size_bytes(token), span_of(token))

    def variable(self, meta, token):
        return ast.Variable(str(token), span_of(token))


# -- syntax errors ------------------------------------------------------------------------

# Example inputs per message. An error gets the message of the first example that fails in
# the same parser state (the LALR state on top of the stack) on the same kind of token.
# Unlike lark's `match_examples`, which also compares the depth of the parser stack (so an
# example written at the top of a thread would not match the same mistake inside a `for`),
# only the state counts here: the state alone says what was being parsed. The messages in
# `_ANY_TOKEN` apply to every unexpected token in the states of their examples.
_THREAD = "device d { compute 1 }\nstream s on d\nthread t {\n"
# An access ends in a different parser state for each form of subscript.
_ACCESSES = ("x", "x[0]", "x[0:1]", "x[:1]", "x[1:]", "x[:]", "x[0][0:1]")
# The top level is in a different parser state at the start of the file, after the first
# declaration, and after later ones.
_TOP = ("", "device d\n", "device d\nstream s on d\n", "thread t {\n}\n", "device d\nthread t {\n}\n")
_IF_FORM = ("an `if` is written `if A < B { ... } else { ... }`: it compares integers "
            "(`==`, `!=`, `<`, `<=`, `>`, `>=`), joined by `and` and `or`")
_ELSE_FORM = ("`else` goes on the line of the `}` before it: `if A < B { ... } else { ... }` "
              "(a `choose` separates its branches with `or`)")
"""The messages of a misplaced `if` or `else`, for the examples and for the word itself."""
SYNTAX_EXAMPLES: dict[str, list[str]] = {
    "an array has one dimension: declare `NAME[N * M]` and index it `NAME[i * M + j]`": [
        top + decl for top in _TOP[:3] for decl in (
            "device d[2][3]\n", "event e[2][3]\n", "event e[2][3] flag\n", "notify n[2][3]\n",
            "buffer b[2][3] 1MiB on d\n", "tensor b[2][3] 1MiB on d\n", "stream s[2][3] on d\n",
            "thread t[2][3] {\n}\n")
    ],
    "`reads` and `writes` need at least one buffer": [
        _THREAD + "s: kernel k reads\n}", _THREAD + "s: kernel k writes\n}", _THREAD + "host h reads\n}",
        _THREAD + "s: kernel k reads x writes\n}", _THREAD + "s: callback c writes\n}",
    ],
    "a buffer is missing after `,`": [
        _THREAD + "s: kernel k reads x,\n}", _THREAD + "s: kernel k reads x, 3\n}",
        _THREAD + "host h writes x,\n}",
    ],
    "separate the buffers of `reads` or `writes` with `,`": [
        _THREAD + f"s: kernel k reads {access} y\n}}" for access in _ACCESSES
    ] + [_THREAD + "host h reads x y\n}"],
    "a stream statement is `STREAM: OPERATION ...`": [
        _THREAD + "s kernel k\n}", _THREAD + "s\n}", _THREAD + "s.kernel k\n}", _THREAD + "s[0] kernel k\n}",
        _THREAD + "kernel k\n}",
    ],
    "unknown operation after `STREAM:` (kernel, copy, memset, callback, record, wait, reset, notify, await, allreduce, allgather, reducescatter, alltoall, broadcast, reduce, send, recv, alloc, free, wait_stream, record_stream, item, launch)": [
        _THREAD + "s: start k\n}", _THREAD + "s:\n}", _THREAD + "s: launchh\n}",
    ],
    "a kernel needs a name: `STREAM: kernel NAME ...`": [
        _THREAD + "s: kernel\n}", _THREAD + "s: kernel reads x\n}",
    ],
    "a callback needs a name: `STREAM: callback NAME ...`": [
        _THREAD + "s: callback\n}", _THREAD + "s: callback reads x\n}",
    ],
    "a host call needs a name: `host NAME [reads ...] [writes ...] [DURATION]`": [
        _THREAD + "host\n}", _THREAD + "host reads x\n}",
    ],
    "arguments are written `reads A, B writes C`, not in parentheses": [
        _THREAD + "s: kernel k(x)\n}", _THREAD + "host h(x)\n}", _THREAD + "s: callback c(x)\n}",
    ],
    "a copy is written `STREAM: copy DESTINATION <- SOURCE [DURATION]`": [
        _THREAD + "s: copy a b\n}", _THREAD + "s: copy a -> b\n}", _THREAD + "s: copy a\n}",
        _THREAD + "s: copy a <-\n}", _THREAD + "s: copy <- b\n}", _THREAD + "s: copy\n}",
        _THREAD + "s: copy a <- b <- c\n}",
    ] + [_THREAD + f"s: copy {access} b\n}}" for access in _ACCESSES]
      + [_THREAD + f"s: copy a <- {access} b\n}}" for access in _ACCESSES],
    "`record`, `wait` and `reset` name an event: `STREAM: record EVENT`": [
        _THREAD + "s: record\n}", _THREAD + "s: wait\n}", _THREAD + "s: reset\n}",
    ],
    "one event or notify per statement: write one `record`, `wait`, `reset`, `notify` or `await` per line": [
        _THREAD + f"s: {op} a{sep}b\n}}" for op in ("record", "wait", "reset", "notify", "await") for sep in (", ", " ")
    ] + [_THREAD + f"{op} a{sep}b\n}}" for op in ("notify", "await") for sep in (", ", " ")],
    "`notify` and `await` name a notify: `notify NOTIFY`": [
        _THREAD + "s: notify\n}", _THREAD + "s: await\n}", _THREAD + "notify\n}", _THREAD + "await\n}",
    ],
    "a collective is written `STREAM: KIND COMM BUFFER [DURATION]` or `STREAM: KIND COMM DESTINATION <- SOURCE [DURATION]`": [
        _THREAD + f"s: {kind}{rest}\n}}" for kind in ("allreduce", "allgather", "reducescatter", "alltoall")
        for rest in ("", " c", " c x y", " c x <-", " c x <- y z", " c x -> y", " c x[0] y", " c x[0:1] y",
                     " c x <- y[0] z", " x 3ms", " x[0] 3ms", " x[0]")
    ],
    "`broadcast` and `reduce` name their root: `STREAM: broadcast COMM root STREAM BUFFER [DURATION]`": [
        _THREAD + f"s: {kind}{rest}\n}}" for kind in ("broadcast", "reduce")
        for rest in ("", " c", " c x", " c s x", " c root", " c root s", " c root s x y", " c root s x <-",
                     " c root s x <- y z", " c root s[0]", " c to s x")
    ],
    "`wait_stream` names the stream to wait for: `STREAM: wait_stream STREAM`": [
        _THREAD + "s: wait_stream\n}", _THREAD + "s: wait_stream s t\n}", _THREAD + "s: wait_stream s, t\n}",
    ],
    "`record_stream` names a tensor: `STREAM: record_stream TENSOR`": [
        _THREAD + "s: record_stream\n}", _THREAD + "s: record_stream t u\n}",
    ],
    "`item` and `memset` name the memory: `STREAM: item BUFFER [DURATION]`": [
        _THREAD + "s: item\n}", _THREAD + "s: memset\n}", _THREAD + "s: item x y\n}", _THREAD + "s: memset x y\n}",
    ],
    "a host memset is written `memset BUFFER [DURATION]`": [
        _THREAD + "memset x y\n}", _THREAD + "memset x[0] y\n}", _THREAD + "memset x <- y\n}",
    ],
    "a host memcpy is written `memcpy DESTINATION <- SOURCE [DURATION]`": [
        _THREAD + "memcpy a b\n}", _THREAD + "memcpy a\n}", _THREAD + "memcpy a <-\n}", _THREAD + "memcpy a -> b\n}",
        _THREAD + "memcpy a <- b c\n}", _THREAD + "memcpy a[0] b\n}", _THREAD + "memcpy a <- b[0] c\n}",
    ],
    "`query` names a stream or an event: `query STREAM`": [
        _THREAD + "query s t\n}", _THREAD + "query s, t\n}",
    ],
    "a `choose` has two or more branches, each `or` on the line of the `}` before it: `choose { ... } or { ... }`": [
        _THREAD + "choose {\n}\n}", _THREAD + "choose {\n}\nor {\n}\n}", _THREAD + "choose { s: kernel k }\n}",
        _THREAD + "choose { s: kernel k } or\n}", _THREAD + "choose {\n} or\n{\n}\n}",
        _THREAD + "choose {\n} or {\n}\nor {\n}\n}", 
    ],
    "a `group` is written `group {`, with the statements on the lines below": [
        _THREAD + "group {\n} or {\n}\n}", _THREAD + "group { s: kernel k } x\n}",
    ],
    "a send is written `STREAM: send COMM to STREAM BUFFER [DURATION]`": [
        _THREAD + "s: send c s x\n}", _THREAD + "s: send\n}", _THREAD + "s: send c to s\n}",
        _THREAD + "s: send c to\n}",
    ],
    "a recv is written `STREAM: recv COMM from STREAM BUFFER [DURATION]`": [
        _THREAD + "s: recv c s x\n}", _THREAD + "s: recv\n}", _THREAD + "s: recv c from s\n}",
        _THREAD + "s: recv c from\n}",
    ],
    "`nosync` belongs to the host's `alloc X nosync` and `free X nosync`; a stream's `alloc` and `free` (cudaMallocAsync, cudaFreeAsync) never wait, so leave it out": [
        _THREAD + f"s: {verb} {access} nosync\n}}" for access in _ACCESSES for verb in ("free", "alloc")
    ],
    "`alloc` and `free` name a buffer": [
        _THREAD + "s: alloc\n}", _THREAD + "s: free\n}", _THREAD + "alloc\n}", _THREAD + "free\n}",
    ],
    "`sync` needs a stream, an event, a device or `all`": [
        _THREAD + "sync\n}", _THREAD + "sync 3\n}", _THREAD + "sync s, s\n}", _THREAD + "sync s s\n}",
    ],
    "a duration needs a unit (`ns`, `us`, `ms` or `s`)": [
        _THREAD + "s: kernel k 3\n}", _THREAD + "s: kernel k reads x 3\n}", _THREAD + "host h 3\n}",
        _THREAD + "host h reads x 3\n}", _THREAD + "s: kernel k 3.5\n}", _THREAD + "s: copy a <- b 3\n}",
        _THREAD + "s: allreduce c x 3\n}", _THREAD + "s: kernel k reads x[0] 3\n}",
        _THREAD + "s: send c to s x 3\n}", _THREAD + "s: callback c 3\n}",
        "device d { launch 3 }\n", "expect makespan <= 3\n", "expect makespan <= 3.5\n",
    ] + [_THREAD + f"s: {op} {access} 3\n}}" for access in _ACCESSES
         for op in ("kernel k reads", "kernel k writes", "copy a <-", "allreduce c", "send c to s", "recv c from s")],
    "a size needs a unit (`B`, `KiB`, `MiB`, `GiB`, `TiB`, `KB`, `MB`, `GB`, `TB`)": [
        "buffer x 4 on host\n", "buffer x[2] 4 on host\n",
    ],
    "a buffer is declared `buffer NAME[N]? SIZE on (host | DEVICE) [pinned] [ipc]`": [
        "buffer x 4MiB\n", "buffer x on host\n", "buffer x 4MiB host\n", "buffer x 4MiB on\n",
        "buffer x 4MiB on host pageable\n", "buffer x[2] on host\n", "buffer\n",
        "buffer x 4MiB on device d\n", "buffer x 4MiB on d, e\n",
    ],
    "a stream is declared `stream NAME[N]? on DEVICE [priority P] [legacy | nonblocking]`": [
        "stream s\n", "stream s d\n", "stream s[2]\n", "stream s on\n", "stream s on d blocking\n",
        "stream\n",
        "stream s on device d\n", "stream s on d, e\n",
    ],
    "a priority is `high`, `low` or an integer": [
        "stream s on d priority medium\n", "stream s on d priority\n",
    ],
    "an event is declared `event NAME[N]? [flag] [ipc]`": [
        "event e flagged\n", "event e snapshot\n", "event\n",
    ],
    "a device is declared `device NAME { ENGINE COUNT ... [launch DURATION] [queues N] }`": [
        "device d compute 1\n", "device\n", "device d { gpu 1 }\n", "device d { compute }\n",
        "device d { queues }\n", "device d { compute 1, copy 1 }\n",
    ],
    "an alias is declared `alias NAME = BUFFER[lo:hi]`": [
        "alias a x\n", "alias a =\n", "alias\n",
    ],
    "a tensor is declared `tensor NAME[N]? SIZE on DEVICE`": [
        "tensor\n", "tensor t\n", "tensor t 4MiB\n", "tensor t 4MiB on\n", "tensor t 4MiB on host pinned\n",
        "tensor t[2]\n", "tensor t 4MiB d\n", "tensor t on d\n", "tensor t 4MiB on d e\n",
    ],
    "a runtime is `runtime cuda` or `runtime cann`": [
        "device d { runtime }\n", "device d { runtime cuda cann }\n", "device d { runtime 3 }\n",
    ],
    "a comm is declared `comm NAME = { STREAM, STREAM, ... }`": [
        "comm c = s\n", "comm c { s }\n", "comm c[2] { s }\n", "comm c[2] = s\n", "comm c = { }\n", "comm c = { s t }\n", "comm c = { s,\n",
        "comm c\n",
    ],
    "a title is a quoted string: `spec \"TITLE\"`": [
        "spec title\n", "spec\n",
    ],
    "expect one of: `no race`, `race [on BUFFER]`, `no deadlock`, `deadlock`, `no use-after-free`, `use-after-free [on BUFFER]`, `no mismatch`, `mismatch`, `makespan <= DURATION` (BUFFER: a buffer, an element `x[1]`, an alias or a tensor, with no byte range; the `no` forms take no `on`)": [
        "expect nothing\n", "expect\n", "expect no races\n", "expect no\n", "expect race x\n",
        "expect race on\n", "expect makespan < 3ms\n", "expect makespan\n", "expect use-after-free x\n",
        "expect deadlock on x\n", "expect makespan <= 3ms on x\n", "expect no race on x\n",
        "expect race on x[1][0:64]\n", "expect race on x[0:64]\n", "expect mismatch on x\n",
    ],
    "statements belong inside a `thread NAME { ... }` block": [
        prefix + statement for prefix in _TOP for statement in (
            "s: kernel k\n", "host h\n", "sync all\n", "for i in 0..2 {\n}\n", "let i = 1\n",
            "kernel k\n", "alloc x\n", "free x\n", "await n\n", "copy a <- b\n", "s[0]: kernel k\n",
        )
    ],
    "a thread is declared `thread NAME {`, with the `{` on the same line": [
        "thread t\n{\n}\n", "thread {\n}\n", "thread\n", "thread t s: kernel k\n", "thread t(x) {\n}\n", "thread t:\n",
        "thread t[2]\n{\n}\n", "thread t[2]\n",
    ],
    "`}` without a matching `{`": [prefix + "}\n" for prefix in _TOP],
    "a `for` loop is written `for VAR in LOW..HIGH { ... }`": [
        _THREAD + "for i in 0 {\n}\n}", _THREAD + "for i 0..2 {\n}\n}", _THREAD + "for i in 0..2\n}",
        _THREAD + "for i in 0..\n}", _THREAD + "for in 0..2 {\n}\n}", _THREAD + "for i in 0..2 s: kernel k\n}",
        _THREAD + "for i in 0...2 {\n}\n}", _THREAD + "for i in 0:2 {\n}\n}",
        _THREAD + "for i in 0..2\n{\n}\n}", _THREAD + "for\n}",
        _THREAD + "for (i = 0; i < 2; i++) {\n}\n}", _THREAD + "for i in 0 to 2 {\n}\n}",
        _THREAD + "for i in [0, 1] {\n}\n}", _THREAD + "for i = 0..2 {\n}\n}",
    ],
    _IF_FORM: [
        _THREAD + "if 1 {\n}\n}", _THREAD + "if i\n}", _THREAD + "if i {\n}\n}", _THREAD + "if 1 = 2 {\n}\n}", _THREAD + "if 1 < 2\n}",
        _THREAD + "if 1 < 2\n{\n}\n}", _THREAD + "if 1 < 2 t: kernel k\n}", _THREAD + "if 1 < 2 {\n} else\n}",
        _THREAD + "if 1 < 2 {\n} else if 2 < 3\n}", _THREAD + "if (1 < 2) {\n}\n}", _THREAD + "if 1 < 2 < 3 {\n}\n}",
        _THREAD + "if 1 < 2 && 2 < 3 {\n}\n}", _THREAD + "if 1 < 2 and {\n}\n}", _THREAD + "if 1 < 2 or\n}",
        _THREAD + "if 1 < 2 {\n} else s: kernel k\n}", _THREAD + "if 1 < 2 {\n} elif 2 < 3 {\n}\n}",
    ],
    _ELSE_FORM: [
        _THREAD + "if 1 < 2 {\n}\nelse {\n}\n}", _THREAD + "choose {\n} else {\n}\n}",
    ],
    "a `let` is written `let VAR = EXPRESSION`": [
        _THREAD + "let i 3\n}", _THREAD + "let i =\n}", _THREAD + "let\n}", _THREAD + "let 3 = i\n}",
    ],
    "missing `]`": [
        _THREAD + "s: kernel k reads x[0\n}", _THREAD + "s: kernel k reads x[0:1MiB\n}",
        _THREAD + "s: kernel k reads x[0:\n}", _THREAD + "s: kernel k reads x[:1MiB\n}",
        _THREAD + "s[0: kernel k\n}", "buffer x[2 4MiB on host\n",
    ],
    "one statement per line: end the statement before `}`, or put `}` on a line of its own": [],
    "missing `}`: a block is still open at the end of the file": [
        _THREAD, _THREAD + "s: kernel k\n", "device d { compute 1\n", _THREAD + "s: kernel k reads x\n",
        _THREAD + "for i in 0..2 {\n", "comm c = { s\n",
    ],
}

SOFT_KEYWORDS = {
    "group": "a `group` is written `group {`, with the statements on the lines below",
    "choose": "a `choose` has two or more branches, each `or` on the line of the `}` before it: `choose { ... } or { ... }`",
    "query": "`query` names a stream or an event: `query STREAM`",
    "memcpy": "a host memcpy is written `memcpy DESTINATION <- SOURCE [DURATION]`",
    "memset": "a host memset is written `memset BUFFER [DURATION]`",
    "else": _ELSE_FORM,
    "if": _IF_FORM,
    "graph": "a `graph` is declared at the top level, outside every thread (`graph NAME { ... }`), and "
             "launched in one with `STREAM: launch NAME`",
}
"""Words that start a host statement only where that statement can follow (elsewhere they are
names); when one is read as a name and the statement fails, its form is the likely fix."""

_ANY_TOKEN = frozenset({
    "a runtime is `runtime cuda` or `runtime cann`",
    "`reads` and `writes` need at least one buffer",
    "a buffer is missing after `,`",
    "a kernel needs a name: `STREAM: kernel NAME ...`",
    "a callback needs a name: `STREAM: callback NAME ...`",
    "a host call needs a name: `host NAME [reads ...] [writes ...] [DURATION]`",
    "unknown operation after `STREAM:` (kernel, copy, memset, callback, record, wait, reset, notify, await, allreduce, allgather, reducescatter, alltoall, broadcast, reduce, send, recv, alloc, free, wait_stream, record_stream, item, launch)",
    "`record`, `wait` and `reset` name an event: `STREAM: record EVENT`",
    "`notify` and `await` name a notify: `notify NOTIFY`",
    "`alloc` and `free` name a buffer",
    "`sync` needs a stream, an event, a device or `all`",
    "a priority is `high`, `low` or an integer",
    "an alias is declared `alias NAME = BUFFER[lo:hi]`",
    "a title is a quoted string: `spec \"TITLE\"`",
    "a `let` is written `let VAR = EXPRESSION`",
})


_CONTEXT_DEPTHS = tuple(range(12, 0, -1))


def _error_key(exc: UnexpectedInput, depth: int = 1) -> tuple:
    """What identifies a syntax error for the example table: the top `depth` parser states
    and the token (or, for a character no token starts with, the character)."""
    state = getattr(exc, "state", None)
    stack = tuple(getattr(state, "state_stack", ())[-depth:])
    token = getattr(exc, "token", None)
    if isinstance(exc, UnexpectedCharacters):
        return stack, "$CHAR", exc.char
    return stack, token.type if token is not None else "$END", None


@lru_cache(maxsize=1)
def _example_table() -> tuple[dict, dict]:
    """(exact: key -> message, by_state: top state -> message) from parsing every example.
    Exact keys are kept for the top 12 down to 1 states, so that the most specific wins
    (12 reaches past the longest access, `x[i][lo:hi]`, to the statement it is in)."""
    parser = _parser()
    exact: dict = {}
    by_state: dict = {}
    for message, examples in SYNTAX_EXAMPLES.items():
        for example in examples:
            try:
                _parse_tree(parser, example if example.endswith("\n") else example + "\n")
            except UnexpectedInput as exc:
                for depth in _CONTEXT_DEPTHS:
                    exact.setdefault(_error_key(exc, depth), message)
                if message in _ANY_TOKEN:
                    by_state.setdefault(_error_key(exc, 1)[0], message)
    return exact, by_state


def _example_message(exc: UnexpectedInput) -> str | None:
    exact, by_state = _example_table()
    for depth in _CONTEXT_DEPTHS:
        key = _error_key(exc, depth)
        if key in exact:
            return exact[key]
        if key[1] == "$CHAR" and (key[0], "$CHAR", None) in exact:
            return exact[(key[0], "$CHAR", None)]
    history = getattr(exc, "token_history", None) or ()
    if isinstance(exc, UnexpectedCharacters) and history and history[-1].type == "NAME":
        # (a state's message for any token names what goes after its keyword: `kernel @` lacks
        # the name, `kernel a @` has it, and the character is stray there)
        return None
    return by_state.get(_error_key(exc, 1)[0])


def _describe_expected(parser: Lark, expected: set[str]) -> str:
    names = []
    for terminal in sorted(expected):
        if terminal == "$END":
            names.append("end of file")
            continue
        if terminal == "_NL":
            names.append("end of line")
            continue
        try:
            pattern = parser.get_terminal(terminal).pattern
        except KeyError:
            names.append(terminal)
            continue
        if pattern.type == "str":
            names.append(f"`{pattern.value}`")
        else:
            names.append({
                "NAME": "a name", "INT": "an integer", "SIGNED_INT": "an integer",
                "SIZE": "a size (4MiB)", "DURATION": "a duration (3.5ms)", "STRING": 'a "string"',
                "ENGINE": "an engine (compute, copy, h2d, d2h, d2d, comm)", "_ROOT": "`root`",
                "GROUP": "`group`", "CHOOSE": "`choose`", "QUERY": "`query`", "MEMCPY": "`memcpy`",
                "HOST_MEMSET": "`memset`", "IF": "`if`",
                "COMPARE": "a comparison (`==`, `!=`, `<`, `<=`, `>`, `>=`)",
            }.get(terminal, terminal.lower()))
    unique = list(dict.fromkeys(names))
    if len(unique) > 8:
        unique = unique[:8] + ["..."]
    return ", ".join(unique)


_MESSAGE_WORDS = {
    "separate the buffers of `reads` or `writes`": ("reads", "writes"),
    "a copy is written": ("copy",),
    "a send is written": ("send",),
    "a recv is written": ("recv",),
    "a host memset is written": ("memset",),
    "a host memcpy is written": ("memcpy",),
    "`query` names": ("query",),
    "a `group` is written": ("group",),
    "a `for` loop is written": ("for",),
    "`broadcast` and `reduce` name": ("broadcast", "reduce"),
    "`wait_stream` names": ("wait_stream",),
    "`record_stream` names": ("record_stream",),
    "`item` and `memset` name": ("item", "memset"),
    "`nosync` belongs": ("nosync",),
}
"""Messages about the form of a one-line statement, and the words that show it is that
statement: one parser state can stand after several (the value of a `let` and the bound of a
`for`), and a message naming a keyword that is not there misleads."""


def _fitting(message: str | None, text: str, end: int) -> str | None:
    """`message`, unless it is about a keyword that its line (or the line before, where a
    block opened: `group {` then `} or {`) does not hold up to `end`."""
    if message is None:
        return None
    words = next((w for prefix, w in _MESSAGE_WORDS.items() if message.startswith(prefix)), None)
    if words is None:
        return message
    line_start = text.rfind("\n", 0, end)
    line = text[text.rfind("\n", 0, max(line_start, 0)) + 1:end]
    return message if any(re.search(rf"\b{word}\b", line) for word in words) else None


def _safe_example_message(exc: UnexpectedInput) -> str | None:
    try:
        return _example_message(exc)
    except Exception:  # the table re-parses examples; never let it mask the real error
        return None


SHOWN_TOKEN = 40
"""Characters of an unexpected token quoted in a diagnostic; a longer one is cut with `...`."""


def _quoted(word) -> str:
    word = str(word)
    return f"`{word[:SHOWN_TOKEN]}...`" if len(word) > SHOWN_TOKEN else f"`{word}`"


HOST_ONLY = {
    "sync": "the thread waits for the stream: write `sync STREAM` on a line of its own",
    "memcpy": "`memcpy DST <- SRC` is cudaMemcpy, on a line of its own; on a stream write `STREAM: copy DST <- SRC`",
    "host": "host code runs on the thread: `host NAME ...` on a line of its own; in stream order write "
            "`STREAM: callback NAME ...`",
    "query": "the thread polls the stream: write `query STREAM` on a line of its own",
}
"""Host statements written after `STREAM:`, and what to write instead."""
HOST_HABITS = {
    "wait": ("`wait` is a stream statement: a thread waits with `sync`",
             "a thread waits for an event with `sync E`, for a stream with `sync S`, for a notify with `await N`; "
             "a stream waits for an event with `STREAM: wait E`"),
    "syncall": ("unknown word `syncall`: did you mean `sync all`?", "a thread waits for every device with `sync all`"),
    "synchronize": ("unknown word `synchronize`: write `sync`", "`sync S` (a stream), `sync E` (an event), "
                    "`sync DEVICE` or `sync all`"),
}
"""Words a CUDA or PyTorch programmer starts a statement with, and what the language says."""
_NAME_START = re.compile(r"[A-Za-z_][A-Za-z0-9_]*$")
_DASHED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:-[A-Za-z0-9_]+)+")


def _c_comment(text: str, pos: int):
    """`//` or `/* */` where a C or C++ programmer writes a comment."""
    return error(Code.SP002, "comments start with `#`", _span_at(text, pos, 2), f"`{text[pos:pos + 2]}` is not a comment",
                 help="write `# ...`: a comment runs from `#` to the end of the line")


def _not_ascii(text: str, pos: int):
    """The diagnostic of a character outside ASCII where the parser stopped: a name that holds
    one (`naïve`), or an invisible space (a no-break or zero-width one pasted from a web page),
    whatever statement the parser was in; None for anything else."""
    char = text[pos] if pos < len(text) else ""
    if char.isascii():
        return None
    if unicodedata.category(char) in ("Zs", "Cf"):
        what = unicodedata.name(char, "").lower() or "a format character"
        return error(Code.SP002, f"an invisible character, U+{ord(char):04X} ({what}), where a space or a name goes",
                     _span_at(text, pos, 1), "invisible character", help="replace it with a plain space, or delete it")
    start, end = pos, pos + 1
    while start > 0 and (text[start - 1].isalnum() or text[start - 1] == "_"):
        start -= 1
    while end < len(text) and (text[end].isalnum() or text[end] == "_"):
        end += 1
    if char.isalnum() or start < pos:
        word = text[start:end]
        return error(Code.SP002, f"`{word}` is not a name: names are ASCII letters, digits and `_`",
                     _span_at(text, start, end - start), f"`{char}` is not ASCII",
                     help="spell the name in ASCII letters, digits and `_` (a comment or a title may hold any text)")
    return None


def _syntax_diagnostic(parser: Lark, text: str, exc: UnexpectedInput, text_end: int | None = None):
    """The diagnostic of a lark error. `text_end`: where the file's text ends, when `text` is
    the file with statements blanked after earlier errors (`parse_recovering`)."""
    if isinstance(exc, UnexpectedCharacters):
        pos = exc.pos_in_stream
        char = text[pos] if pos < len(text) else ""
        span = _span_at(text, pos, 1)
        shown = repr(char) if char.isprintable() else f"U+{ord(char):04X}" if char else "end of file"
        message = _fitting(_safe_example_message(exc), text, pos)
        word = _NAME_AT.match(text, pos)
        if word is not None:
            expected = set(getattr(exc, "allowed", None) or ())
            close = close_words(word.group(), _expected_words(parser, expected))
            if close:
                return error(Code.SP002, _did_you_mean(word.group(), close), _span_at(text, pos, len(word.group())),
                             f"unexpected {_quoted(word.group())}",
                             help=_form_help(message, close, f"expected {_describe_expected(parser, expected)}"))
        if text.startswith(("//", "/*"), pos):
            return _c_comment(text, pos)
        outside = _not_ascii(text, pos)
        if outside is not None:
            return outside
        if char == '"' and '"' not in text[pos + 1:].split("\n", 1)[0]:
            return error(Code.SP002, "a string is never closed: it needs its `\"` on the same line", span,
                         "this `\"` opens it", help='close it on its line, as in `spec "TITLE"`')
        if char == "\r":  # a lone carriage return: the file ends its lines the way classic Mac OS did
            return error(Code.SP002, "a line ends with a carriage return alone (CR line endings)", span,
                         "here", help="save the file with LF (or CRLF) line endings")
        return error(Code.SP002, message or f"unexpected character {shown}", span,
                     f"unexpected character {shown}" if message else "not valid here",
                     help="names are ASCII letters, digits and `_`; comments start with `#`")
    token = getattr(exc, "token", None)
    at = token.start_pos if isinstance(token, Token) and token.start_pos is not None else len(text)
    shown = len(token) if isinstance(token, Token) and token.type != "_NL" else 0
    message = _fitting(_safe_example_message(exc), text, at + shown)
    line_start = text.rfind("\n", 0, at) + 1
    if re.match(r"[ \t]*expect\b", text[line_start:at]) and _depth_at(text, line_start) > 0:
        column = line_start + len(text[line_start:at]) - len(text[line_start:at].lstrip())
        return error(Code.SP002, "`expect` lines go at the top level, outside every `thread` block",
                     _span_at(text, column, len("expect")), "inside a block",
                     help="move the line after the thread's closing `}`")
    if isinstance(token, Token) and str(token) == "/" and text.startswith(("//", "/*"), token.start_pos or 0):
        return _c_comment(text, token.start_pos)
    values = getattr(getattr(exc, "state", None), "value_stack", None) or [None]
    if isinstance(token, Token) and str(token) == "-" and token.start_pos:
        before = _NAME_START.search(text, max(0, token.start_pos - 200), token.start_pos)
        joined = _DASHED.match(text, before.start()) if before is not None else None
        if joined is not None and joined.end() > token.start_pos + 1:
            name = joined.group()
            return error(Code.SP002, f"a name cannot hold `-`: write `{name.replace('-', '_')}`",
                         _span_at(text, joined.start(), len(name)), f"unexpected `-` in {_quoted(name)}",
                         help="names are ASCII letters, digits and `_`")
    if (isinstance(token, Token) and str(token) in HOST_ONLY and isinstance(values[-1], Token)
            and values[-1].type == "COLON"):
        return error(Code.SP002, f"`{token}` is a host statement, not a stream operation", span_of(token),
                     f"unexpected {_quoted(token)}", help=HOST_ONLY[str(token)])
    if isinstance(token, Token) and str(token) == "(" and "COLON" in set(getattr(exc, "accepts", None) or exc.expected or ()):
        return error(Code.SP002, "a statement is not a call", span_of(token), "unexpected `(`",
                     help="write `STREAM: OPERATION ...` (`s: kernel k reads x`) or a host statement: `sync S`, "
                          "`host NAME ...`, `notify N`, `await N`")
    last = values[-1]
    before = values[-2] if len(values) > 1 else None
    word = last
    if isinstance(last, Tree) and last.data == "ref" and all(c is None for c in last.children[1:]):
        word = last.children[0]
    expected_terminals = set(getattr(exc, "accepts", None) or exc.expected or ())
    if (isinstance(word, Token) and word.type == "NAME" and str(word) in SOFT_KEYWORDS
            and isinstance(token, Token) and token.type not in ("COLON", "LSQB")
            and not (str(word) in DECLARATION_WORDS and word.column == 1)):
        # `memcpy` alone, `group` without `{`: the word was read as a stream name.
        message = SOFT_KEYWORDS[str(word)]
    elif (isinstance(word, Token) and word.type == "NAME" and str(word) in DECLARATION_WORDS and word.column == 1
          and isinstance(token, Token) and token.type not in ("COLON", "LSQB") and "COLON" in expected_terminals):
        # `buffer x ...` at the start of a line inside a thread: the thread's `}` is missing
        opening = _unclosed_brace(text[:word.start_pos])
        secondary = ((_span_at(text, opening, 1), "this block is still open"),) if opening is not None else ()
        return error(Code.SP002, "missing `}` before this declaration: a block is still open", span_of(word),
                     f"`{word}` declarations go at the top level", secondary=secondary,
                     help="close the block with `}` before the declarations that follow it")
    elif (isinstance(word, Token) and word.type == "NAME" and isinstance(token, Token)
          and token.type not in ("COLON", "LSQB") and "COLON" in expected_terminals):
        # `sycn s`: a misspelled statement keyword was read as the stream of `STREAM: ...`
        habit = HOST_HABITS.get(str(word))
        if habit is not None:
            return error(Code.SP002, habit[0], span_of(word), f"unexpected {_quoted(word)}", help=habit[1])
        close = close_words(str(word), STATEMENT_WORDS) if len(str(word)) >= 3 else []
        if close:
            return error(Code.SP002, _did_you_mean(str(word), close), span_of(word), f"unexpected {_quoted(word)}",
                         help="a statement starts with a stream (`STREAM: ...`) or a keyword")
    if (isinstance(last, Token) and last.type == "NAME" and str(last) in ("reads", "writes")
            and isinstance(before, Token) and before.type == "COMMA"
            and isinstance(token, Token) and token.type == "NAME"):
        # `reads a, writes b`: after a `,` the word `writes` is read as a buffer name.
        return error(Code.SP002, f"no `,` before `{last}`: write `reads a, b writes c`", span_of(before),
                     "this `,`", help=f"a `,` separates the buffers of one list, and `{last}` starts a list of "
                     "its own: drop the `,`")
    expected = _describe_expected(parser, expected_terminals)
    if isinstance(exc, UnexpectedEOF) or token is None or token.type == "$END":
        end = _span_at(text, len(text.rstrip()) if text_end is None else text_end, 0)
        opening = _unclosed_brace(text)
        if opening is not None:
            # point at the brace: that is where the fix goes
            # (not a state's message for any token: `s: kernel k \` at the end of the file stops
            # in a kernel's state, but what is missing is the `}`)
            if message in _ANY_TOKEN:
                message = None
            return error(Code.SP002, message or "missing `}`: a block is still open at the end of the file",
                         _span_at(text, opening, 1), "this `{` is never closed",
                         help="close it with `}` on a line of its own", secondary=((end, "the file ends here"),))
        return error(Code.SP002, message or "unexpected end of file", end, "unexpected end of file",
                     help=f"expected {expected}" if expected else "")
    span = span_of(token)
    found = "end of line" if token.type == "_NL" else _quoted(token)
    if token.type == "_NL":
        span = _span_at(text, token.start_pos, 1)
    unit = _unit_problem(text, token, message)
    if unit is not None:
        return unit
    glued = _glued_number(text, token)
    if glued is not None:
        return glued
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", str(token)):
        close = close_words(str(token), _expected_words(parser, expected_terminals))
        if close:
            return error(Code.SP002, _did_you_mean(str(token), close), span, f"unexpected {found}",
                         help=_form_help(message, close, f"expected {expected}" if expected else ""))
    number = re.compile(r"[0-9]+(\.[0-9]+)?[ \t]*[A-Za-z]*").match(text, token.start_pos) if token.type in ("INT", "SIGNED_INT") else None
    if number and number.end() > token.end_pos and message and "needs a unit" in message:
        # `3.5`: underline the whole number the unit is missing from
        span = _span_at(text, token.start_pos, len(number.group().rstrip()))
        found = f"`{number.group().rstrip()}`"
    headline = message or f"unexpected {found}"
    label = f"unexpected {found}"
    if message == _ELSE_FORM:  # (under the `else` that starts its line, not the `{` after it)
        line_start = text.rfind("\n", 0, token.start_pos) + 1
        alone = re.match(r"[ \t]*else\b", text[line_start:token.start_pos + 1])
        if alone is not None:
            span, label = _span_at(text, line_start + alone.end() - 4, 4), "`else` on a line of its own"
    if message in (_IF_FORM, _ELSE_FORM):  # what the parser expected next is no help here
        help = "for example `if rank > 0 {`, and `} else if rank == 0 {` or `} else {` on one line"
    else:
        help = f"expected {expected}" if expected else ""
    return error(Code.SP002, headline, span, label, help=help)


def _glued_number(text: str, token) -> Diagnostic | None:
    """SP002 for a name glued to the digits before it (`1_000`, `0x10`, `1e3`): another
    language's way of writing a number, not a number here."""
    start = token.start_pos
    if not (start and text[start - 1].isdigit() and re.match(r"[A-Za-z_]", str(token))):
        return None
    begin = start
    while begin and (text[begin - 1] in "0123456789."):
        begin -= 1
    written = text[begin:token.end_pos]
    try:
        value = int(written, 0) if not re.search(r"[eE]", written) or written.lower().startswith("0x") else float(written)
    except ValueError:
        value = None
    plain = (f"`{int(value)}`" if value is not None and abs(value) < 10**18 and value == int(value) else None)
    return error(Code.SP002, f"`{written}` is not a number: numbers are plain decimal digits", _span_at(text, begin, len(written)),
                 "not a number", help=f"write {plain}" if plain else "write the number in decimal digits")


DECLARATION_WORDS = frozenset({"spec", "device", "buffer", "alias", "stream", "event", "notify", "comm", "tensor",
                               "thread", "graph", "expect"})
"""The words a declaration starts with."""

STATEMENT_WORDS = ("for", "let", "host", "sync", "notify", "await", "alloc", "free", "group", "choose", "query",
                   "memcpy", "memset", "if")
"""The words a statement can start with besides a stream."""

_SOFT_TERMINALS = {"GROUP": "group", "CHOOSE": "choose", "QUERY": "query", "MEMCPY": "memcpy",
                   "HOST_MEMSET": "memset", "_ROOT": "root", "ALL": "all", "USE_AFTER_FREE": "use-after-free"}


def _expected_words(parser: Lark, expected: set[str]) -> list[str]:
    """The keywords among the terminals the parser would have accepted."""
    words: list[str] = []
    for terminal in sorted(expected):
        if terminal in _SOFT_TERMINALS:
            words.append(_SOFT_TERMINALS[terminal])
        elif terminal == "ENGINE":
            words += ["compute", "copy", "h2d", "d2h", "d2d", "comm"]
        else:
            try:
                pattern = parser.get_terminal(terminal).pattern
            except KeyError:
                continue
            if pattern.type == "str" and re.fullmatch(r"[A-Za-z_]+", pattern.value):
                words.append(pattern.value)
    return words


def edit_distance(a: str, b: str) -> int:
    """Edits (insert, delete, replace, swap two neighbours) that turn `a` into `b`."""
    previous2: list[int] = []
    previous = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        current = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            cost = 0 if a[i - 1] == b[j - 1] else 1
            current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                current[j] = min(current[j], previous2[j - 2] + 1)
        previous2, previous = previous, current
    return previous[len(b)]


MAX_CLOSE_COMPARED = 2_000
"""Names of about the right length `close_words` compares a word with, the first ones in the
given order: a suggestion is a help, and a spec of 200,000 event names spent 1.4 s on each
misspelled name."""


def close_words(word: str, candidates, limit: int = 3) -> list[str]:
    """The candidates a typo away from `word` (one edit for words of up to four letters, two
    for longer ones), nearest first, in the given order among equals; `word` itself is not a
    typo of anything."""
    if word in candidates:
        return []
    allowed = 1 if len(word) <= 4 else 2
    scored = []
    compared = 0
    for order, candidate in enumerate(dict.fromkeys(candidates)):
        if abs(len(candidate) - len(word)) > allowed:
            continue
        compared += 1
        if compared > MAX_CLOSE_COMPARED:
            break
        distance = edit_distance(word.lower(), candidate.lower())
        if distance <= allowed and distance < len(word):
            scored.append((distance, order, candidate))
    return [candidate for _, _, candidate in sorted(scored)[:limit]]


def did_you_mean(close: list[str]) -> str:
    """`did you mean `a`?` / `did you mean `a` or `b`?`"""
    quoted = [f"`{c}`" for c in close]
    return "did you mean " + (quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " or " + quoted[-1]) + "?"


def _form_help(message: str | None, close: list[str], expected: str) -> str:
    """The help under a misspelled keyword: the form of the statement when the example table's
    message is about the word suggested (`unknown operation after STREAM: (kernel, ...)`),
    the declarations at the top level, else what the parser expected."""
    if message and any(re.search(rf"\b{re.escape(c)}\b", message) for c in close):
        return message
    if "`device`" in expected and "end of file" in expected:
        return ("a declaration starts with `spec`, `device`, `buffer`, `alias`, `stream`, `event`, `notify`, "
                "`comm`, `tensor`, `thread` or `expect`")
    return expected


def _did_you_mean(word: str, close: list[str]) -> str:
    return f"unknown word `{word}`: {did_you_mean(close)}"


_UNITS_TEXT = {
    "size": "sizes take `B`, `KiB`, `MiB`, `GiB`, `TiB` (powers of 1024) or `KB`, `MB`, `GB`, `TB` (powers of 1000)",
    "duration": "durations take `ns`, `us`, `ms` or `s`",
}
_UNIT_ALIASES = {"sec": "s", "secs": "s", "msec": "ms", "usec": "us", "nsec": "ns", "µs": "us", "byte": "B",
                 "bytes": "B"}


def _unit_problem(text: str, token: Token, message: str | None):
    """`2 ms` (a space before the unit) and `4mb` (a unit that does not exist) say what is wrong."""
    if token.type in ("INT", "SIGNED_INT", "DURATION", "SIZE"):
        start = token.start_pos
    elif token.type == "NAME" or str(token) == ".":
        # `4mb` or `4 KiB` inside an expression: a number, then the unit read as a name; or
        # `1.5KiB` there: a number, then the point
        pattern = r"(?<![A-Za-z0-9_.])[0-9]+(?:\.[0-9]+)?[ \t]*$" if token.type == "NAME" else r"(?<![A-Za-z0-9_.])[0-9]+$"
        before = re.search(pattern, text[max(0, token.start_pos - 40):token.start_pos])
        if before is None:
            return None
        start = token.start_pos - len(before.group())
    else:
        return None
    match = re.compile(r"-?([0-9]+(?:\.[0-9]+)?)([ \t]*)([A-Za-z]+)?").match(text, start)
    if match is None or match.group(3) is None:
        return None
    number, gap, letters = match.groups()
    if text[start] == "-" and letters in DURATION_UNITS and not gap:
        return error(Code.SP002, "a duration cannot be negative", _span_at(text, start, match.end() - start),
                     "negative duration", help="durations are 0 or more: `0ns`, `3.5ms`")
    family = ("size" if message and "a size" in message else "duration" if message and "a duration" in message
              else None)
    if letters in SIZE_UNITS and not gap and "." in number:
        return _decimal_size(text, start, match.end() - start, number, letters)
    if letters in SIZE_UNITS or letters in DURATION_UNITS:
        if not gap:
            return None
        family = family or ("size" if letters in SIZE_UNITS else "duration")
        return error(Code.SP002, f"no space between a number and its unit: write `{number}{letters}`",
                     _span_at(text, start, match.end() - start), "space before the unit",
                     help=_UNITS_TEXT[family])
    if gap:
        return None  # a number and then a word: not a unit problem
    sizes = [u for u in SIZE_UNITS if u.lower() == letters.lower()]
    durations = [u for u in DURATION_UNITS if u.lower() == letters.lower()]
    alias = _UNIT_ALIASES.get(letters.lower())
    if alias:
        (sizes if alias in SIZE_UNITS else durations).append(alias)
    if letters.lower() in ("kb", "mb", "gb", "tb"):
        sizes.append(letters[0].upper() + "iB")
    if family is None:
        family = "size" if sizes and not durations else "duration" if durations else None
    if family is None:
        return None
    fixes = sizes if family == "size" else durations
    help_text = _UNITS_TEXT[family] + (f": write {' or '.join(f'`{number}{u}`' for u in fixes)}" if fixes else "")
    return error(Code.SP002, f"`{letters}` is not a unit" + (" of size" if family == "size" else " of time"),
                 _span_at(text, match.start(3), len(letters)), "unknown unit", help=help_text)


def _decimal_size(text: str, start: int, length: int, number: str, unit: str) -> Diagnostic:
    """`1.5MiB`: sizes are whole numbers; the help writes it in the largest unit of its kind
    that makes it whole (`1536KiB`)."""
    exact = Decimal(number) * SIZE_UNITS[unit]
    help = "sizes are whole numbers of a unit"
    if exact == exact.to_integral_value():
        binary = unit == "B" or unit.endswith("iB")
        units = [u for u in SIZE_UNITS if u == "B" or u.endswith("iB") == binary]
        fit = max((u for u in units if int(exact) % SIZE_UNITS[u] == 0), key=SIZE_UNITS.__getitem__)
        help += f": write `{int(exact) // SIZE_UNITS[fit]}{fit}`"
    return error(Code.SP002, f"a size cannot have a decimal point: `{number}{unit}`", _span_at(text, start, length),
                 "not a whole number", help=help)


def _unclosed_brace(text: str) -> int | None:
    """Offset of the `{` whose `}` is missing, when a block is still open at the end of the text
    (comments and titles skipped): the first `{` whose matching `}` is indented less than the
    line of the `{` (the `}` that closed it was meant for an outer block), else the innermost
    one left open."""
    opened: list[int] = []
    misplaced: list[int] = []
    for match in re.finditer(r'#[^\n]*|"[^"\n]*"|[{}]', text):
        token = match.group()
        if token == "{":
            opened.append(match.start())
        elif token == "}" and opened:
            opening = opened.pop()
            if _indent(text, match.start()) < _indent(text, opening):
                misplaced.append(opening)
    if not opened:
        return None
    return min(misplaced) if misplaced else opened[-1]


def _indent(text: str, offset: int) -> int:
    """Width of the blanks that start the line of `offset` (a tab counts as 8)."""
    start = text.rfind("\n", 0, offset) + 1
    blanks = re.match(r"[ \t]*", text[start:offset]).group()
    return len(blanks.expandtabs(8))


def _span_at(text: str, offset: int, length: int) -> Span:
    offset = max(0, min(offset, len(text)))
    line = text.count("\n", 0, offset) + 1
    column = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return Span(line, column, line, column + length, offset, offset + length)


def decode(data: bytes) -> str:
    """Bytes to text, or a diagnostic at the first byte that is not UTF-8 text."""
    if len(data) > MAX_SOURCE_CHARS:
        raise SpecError(error(Code.SP004, f"spec is too large (more than {MAX_SOURCE_CHARS:,} bytes)", None,
                              help=f"specs are limited to {MAX_SOURCE_CHARS // 2**20} MiB"))
    data = data.removeprefix(b"\xef\xbb\xbf")  # a byte order mark, as some Windows editors write: not a column
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        nul = data.find(b"\0", 0, exc.start)
        if nul >= 0:  # a NUL comes first: the byte that says "binary file" best
            prefix = data[:nul].decode("utf-8", "replace")
            raise SpecError(error(Code.SP001, "spec contains a NUL byte: it looks like a binary file",
                                  _span_at(prefix, len(prefix), 1), "NUL byte")) from None
        prefix = data[: exc.start].decode("utf-8", "replace")
        raise SpecError(error(Code.SP001, "spec is not UTF-8 text", _span_at(prefix, len(prefix), 1),
                              f"byte 0x{data[exc.start]:02x} is not valid UTF-8",
                              help="a .sched file is UTF-8 text")) from None
    nul = text.find("\0")
    if nul >= 0:
        raise SpecError(error(Code.SP001, "spec contains a NUL byte: it looks like a binary file",
                              _span_at(text, nul, 1), "NUL byte"))
    return text


_BRACKET = re.compile(r'#[^\n]*|"[^"\n]*"|[(\[{)\]}]')
"""Brackets, and the comments and strings whose brackets do not count."""


MAX_TOKENS = 4_000_000
"""Words and signs a spec may hold: each costs about 250 bytes until the spec is lowered, so
32 MiB of `b, b, b, ...` took 4.9 GB. Only specs over `_COUNTED_FROM` bytes are counted."""
_COUNTED_FROM = 2 * 1024 * 1024
_WORD_OR_SIGN = re.compile(r"#[^\n]*|[A-Za-z0-9_.]+|[^\s#A-Za-z0-9_.]")  # (a comment counts once)


def _check_token_count(text: str) -> None:
    if len(text) <= _COUNTED_FROM:
        return
    from collections import deque
    from itertools import islice

    found = _WORD_OR_SIGN.finditer(text)
    deque(islice(found, MAX_TOKENS), maxlen=0)  # (consumed at C speed)
    extra = next(found, None)
    if extra is not None:
        raise SpecError(error(Code.SP004, f"spec is too large (more than {MAX_TOKENS:,} words and signs)",
                              _span_at(text, extra.start(), len(extra.group())), "this one is past the limit",
                              help="split the spec, or write repeated work as a `for` loop"))


MAX_OPERATORS = 20_000
"""Operators one expression may hold, however it nests: a sum of 200,000 terms took the
parser 13 s and 430 MB before the transformer refused it as nested too deeply, and 2 million
terms (4 MB) over a minute and 2.6 GB."""
_OPERATOR_SIGNS = "+-*/%"
_EXPRESSION_TOKEN = re.compile(r'#[^\n]*|"[^"\n]*"|[A-Za-z0-9_.]+|\n|[^\s#A-Za-z0-9_.]')
"""Words, signs, line ends, comments and strings, for `_check_operators`."""


_LONE_CR = re.compile(r"\r(?!\n)")


def _check_line_ends(text: str) -> None:
    """A carriage return alone, even in a comment or a title: editors start a line there, so
    every line number after it would differ from theirs."""
    found = _LONE_CR.search(text)
    if found is not None:
        raise SpecError(error(Code.SP002, "a line ends with a carriage return alone (CR line endings)",
                              _span_at(text, found.start(), 1), "here",
                              help="save the file with LF (or CRLF) line endings"))


def _check_operators(text: str) -> None:
    """SP004 at the first operator past MAX_OPERATORS in one run of operands, operators and
    parentheses on one line (anything else ends an expression), before the parser spends
    time and memory on it. Most specs hold far fewer operators in all, and are not read."""
    if sum(text.count(sign) for sign in _OPERATOR_SIGNS) <= MAX_OPERATORS:
        return
    run = 0
    for match in _EXPRESSION_TOKEN.finditer(text):
        token = match.group()
        if token in _OPERATOR_SIGNS:
            run += 1
            if run > MAX_OPERATORS:
                raise SpecError(error(Code.SP004, f"expression too long (more than {MAX_OPERATORS:,} operators)",
                                      _span_at(text, match.start(), 1), "this operator is past the limit",
                                      help="compute the value with a `for` loop or a shorter formula"))
        elif token not in "()" and not (token[0].isalnum() or token[0] in "_."):
            run = 0


def _check_nesting(text: str) -> None:
    depth = 0
    for match in _BRACKET.finditer(text):
        if match.group()[0] in '#"':
            continue  # a comment or a string
        if match.group() in "([{":
            depth += 1
            if depth > MAX_NESTING:
                offset = match.start()
                raise SpecError(error(Code.SP004, "brackets nested too deeply", _span_at(text, offset, 1),
                                      f"nesting depth {depth}",
                                      help=f"brackets may nest at most {MAX_NESTING} deep"))
        elif depth:
            depth -= 1


def parse_with_lark(text: str, text_end: int | None = None) -> ast.SpecFile:
    """The syntax tree by the lark parser and its transformer alone (`text` ends with a
    newline); raises `SpecError`. `text_end` as `_syntax_diagnostic` takes it."""
    parser = _parser()
    try:
        tree = _parse_tree(parser, text)
    except UnexpectedInput as exc:
        problem = SpecError(_syntax_diagnostic(parser, text, exc, text_end))
        problem.statement_start = _statement_start(exc)
        raise problem from None
    try:
        return _ToAst().transform(tree)
    except VisitError as exc:
        if isinstance(exc.orig_exc, SpecError):
            raise exc.orig_exc from None
        raise


MAX_ERRORS = 20
"""Input errors reported per file at most; the front end stops looking after that many."""
RECOVERY_BUDGET = 4 * 2**20
"""Characters the lark parser may parse again to look for further syntax errors (each retry
parses the whole text), so that a large file with errors still answers in seconds."""


class SpecErrors(SpecError):
    """Raised by the front end when a spec has several input errors; `diagnostics` holds them
    all in source order (`diagnostic` is the first)."""

    def __init__(self, diagnostics: tuple[Diagnostic, ...]):
        super().__init__(diagnostics[0])
        self.diagnostics = diagnostics


@dataclass(frozen=True, slots=True)
class Parsed:
    """The tree of what parses, and the errors of what does not.

    After a syntax error the parser blanks the statement or declaration in error (a block it
    opens included) and parses again, so `spec` is the rest of the file and `errors` lists
    every syntax error found; `skipped` holds the names the blanked lines declared (the second
    word of each), so that the lowering does not report them as undeclared. `spec` is None when nothing could be
    recovered (too many errors, a file too large or too deeply nested, an unclosed block)."""

    spec: ast.SpecFile | None
    errors: tuple[Diagnostic, ...]
    skipped: frozenset[str] = frozenset()


def _same(first: Diagnostic, second: Diagnostic) -> bool:
    return (first.code, first.primary_span, first.message) == (second.code, second.primary_span, second.message)


def parse_recovering(text: str) -> Parsed:
    """Parse source text, reporting every syntax error rather than the first."""
    if len(text) > MAX_SOURCE_CHARS:
        return Parsed(None, (error(Code.SP004, "spec is too large", None,
                                   help=f"specs are limited to {MAX_SOURCE_CHARS // 2**20} MiB"),))
    try:
        _check_line_ends(text)
        _check_nesting(text)
        _check_token_count(text)
        _check_operators(text)
    except SpecError as exc:
        return Parsed(None, (exc.diagnostic,))
    current = text if text.endswith("\n") else text + "\n"
    errors: list[Diagnostic] = []
    skipped: set[str] = set()
    budget = RECOVERY_BUDGET + len(current)
    collecting = gc.isenabled()
    gc.disable()  # hundreds of thousands of new nodes and no cycles: rescanning them is wasted time
    try:
        while True:
            try:
                try:
                    spec = fastparse.parse(current)
                except fastparse.Unhandled:
                    budget -= len(current)
                    spec = parse_with_lark(current, len(text.rstrip()))
                break
            except SpecError as exc:
                diagnostic = exc.diagnostic
                if errors and _same(errors[-1], diagnostic):  # blanking did not get past it
                    return Parsed(None, tuple(errors), frozenset(skipped))
                errors.append(diagnostic)
                region = _recovery_region(current, diagnostic, getattr(exc, "statement_start", None))
                if region is None or len(errors) >= MAX_ERRORS or budget < len(current):
                    return Parsed(None, tuple(errors), frozenset(skipped))
                start, end, keep = region
                # the names declared (or bound) on the blanked lines: the second word of each
                skipped.update(re.findall(r"(?m)^[ \t\f]*[A-Za-z_][A-Za-z0-9_]*[ \t\f]+([A-Za-z_][A-Za-z0-9_]*)",
                                          current[start:end]))
                blanked = _blank(current, start, end, keep)
                if blanked == current:
                    return Parsed(None, tuple(errors), frozenset(skipped))
                current = blanked
        if not spec.declarations and not errors:
            return Parsed(None, (error(Code.SP003, "the spec is empty", _span_at(text, 0, 0),
                                       help="declare devices, streams and threads; see `streamproof --help`"),))
        return Parsed(spec, tuple(errors), frozenset(skipped))
    finally:
        if collecting:
            gc.enable()


def parse(text: str) -> ast.SpecFile:
    """Parse source text; raises `SpecError` with a diagnostic on bad input (`SpecErrors`
    when there are several).

    The hand-written parser in `checker.fastparse` goes first; whatever it leaves (every error
    among it) goes to lark, whose tree is the same wherever both succeed."""
    parsed = parse_recovering(text)
    if parsed.errors:
        if len(parsed.errors) == 1:
            raise SpecError(parsed.errors[0])
        raise SpecErrors(parsed.errors)
    return parsed.spec


_SKIPPED = re.compile(r'#[^\n]*|"[^"\n]*"|[{}]')


def _statement_start(exc: UnexpectedInput) -> int | None:
    """Where the statement or declaration the parser was in when it failed begins: the first
    value on its stack after the last complete statement or item (a line end, a completed
    list of them) or after the `{` of the block it is in; a comm's or device's `{` and the
    line ends inside its braces are part of the declaration."""
    values = getattr(getattr(exc, "state", None), "value_stack", None) or []

    def declaration_brace(k: int) -> bool:
        previous = values[k - 1] if k >= 1 else None
        return ((isinstance(previous, Token) and previous.type == "EQUAL")
                or (k >= 2 and isinstance(values[k - 2], Token) and values[k - 2].type == "DEVICE"))

    def inside_declaration(k: int) -> bool:
        for j in range(k - 1, -1, -1):
            value = values[j]
            if isinstance(value, Token) and value.type == "LBRACE":
                return declaration_brace(j)
            if isinstance(value, Tree) and str(value.data).startswith(("__block_star", "__start_star", "_item")):
                return False
        return False

    boundary = -1
    for k in range(len(values) - 1, -1, -1):
        value = values[k]
        if isinstance(value, Tree) and str(value.data).startswith(("__block_star", "__start_star")):
            boundary = k
            break
        if isinstance(value, Token) and value.type == "LBRACE" and not declaration_brace(k):
            boundary = k
            break
        if isinstance(value, Token) and value.type == "_NL" and not inside_declaration(k):
            boundary = k
            break
    for value in values[boundary + 1:]:
        if isinstance(value, Token):
            if value.type != "_NL":
                return value.start_pos
        elif isinstance(value, Tree) and not value.meta.empty:
            return value.meta.start_pos
    return None


def _block_end(text: str, at: int, depth: int) -> int:
    """Where the braces open at `at` (`depth` of them, plus those opened from `at` on) all
    close again: just past the closing `}`, or the end of the text."""
    for match in _SKIPPED.finditer(text, at):
        if match.group() == "{":
            depth += 1
        elif match.group() == "}":
            depth -= 1
            if depth == 0:
                return match.end()
    return len(text)


def _recovery_region(text: str, diagnostic: Diagnostic,
                     statement_start: int | None = None) -> tuple[int, int, frozenset[int]] | None:
    """What to blank after a syntax error: the statement or declaration in error (from its
    first line to the line of the error, and the lines that line continues onto), the whole of
    any block a `{` in it opens, and a block (or `or { ... }`) that follows it; braces in it
    that close an earlier block are kept (`keep`). None when there is nothing to recover (no
    position, the end of the file)."""
    span = diagnostic.primary_span
    if span is None or diagnostic.code is not Code.SP002 and diagnostic.code is not Code.SP020:
        return None
    if diagnostic.message.startswith("missing `}`"):
        return None
    offset = min(span.start, len(text) - 1)
    if statement_start is not None and statement_start < offset:
        offset_start = statement_start
    else:
        offset_start = offset
    start = text.rfind("\n", 0, offset_start) + 1
    end = text.find("\n", offset)
    end = len(text) if end < 0 else end
    while re.search(r"\\[\t \f]*\r?$", text[start:end]) and end < len(text):  # a continued line
        following = text.find("\n", end + 1)
        end = len(text) if following < 0 else following
    opened: list[int] = []
    closing: set[int] = set()
    for match in _SKIPPED.finditer(text, start, end):
        if match.group() == "{":
            opened.append(match.start())
        elif match.group() == "}":
            if opened:
                opened.pop()
            else:
                closing.add(match.start())
    if opened:
        # the block a `{` on this line opens goes with it
        end = _block_end(text, end, len(opened))
    while end < len(text):
        # `thread t` and then `{` on the next line, or `} or {` of a choose: the block goes too
        following = re.compile(r"[ \t\f\r\n]*(?:or[ \t\f]*)?\{").match(text, end)
        if following is None:
            break
        end = _block_end(text, following.end() - 1, 0)
    # keep only the braces that close a block open before the region
    depth = _depth_at(text, start)
    keep = frozenset(sorted(closing)[:depth])
    if all(text[i] in " \t\f\r\n" or i in keep for i in range(start, end)):
        keep = frozenset()  # the error is that brace itself
    return start, end, keep


def _depth_at(text: str, offset: int) -> int:
    """How many blocks are open at `offset` (comments and titles skipped)."""
    depth = 0
    for match in _SKIPPED.finditer(text, 0, offset):
        if match.group() == "{":
            depth += 1
        elif match.group() == "}" and depth:
            depth -= 1
    return depth


def _blank(text: str, start: int, end: int, keep: frozenset[int]) -> str:
    """`text` with [start, end) turned into spaces (line ends and kept braces stay), so that
    every position after it is unchanged."""
    middle = "".join(c if c in "\r\n" or start + i in keep else " " for i, c in enumerate(text[start:end]))
    return text[:start] + middle + text[end:]
