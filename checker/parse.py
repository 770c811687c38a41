"""Source text to syntax tree: decoding, the lark LALR parser, and syntax diagnostics.

Everything that can go wrong before names are resolved is turned into a `Diagnostic` here,
once: undecodable bytes, oversized or too deeply nested input, syntax errors, and literals
out of range.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from functools import lru_cache
from importlib import resources
from pathlib import Path

from lark import Lark, Token, Transformer, v_args
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken, VisitError

from checker import ast
from checker.codes import Code
from checker.diagnostics import SpecError, error
from checker.ir import Span

MAX_SOURCE_CHARS = 32 * 1024 * 1024
MAX_NESTING = 200
MAX_LITERAL = 2**62
MAX_DURATION_NS = 10**15  # about 11.5 days
PRIORITY_HIGH = -(10**6)
PRIORITY_LOW = 10**6

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


@lru_cache(maxsize=1)
def _parser() -> Lark:
    return Lark(_grammar_text(), parser="lalr", propagate_positions=True, maybe_placeholders=True)


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
    if len(text) > 18:
        raise SpecError(error(Code.SP020, "number too large", span_of(token), "this number",
                              help="integers must stay below 2^62"))
    return int(str(token))


def size_bytes(token: Token) -> int:
    text = str(token)
    digits = text.rstrip("BKMGTiB")
    unit = text[len(digits):]
    value = _int_literal(Token("INT", digits, token.start_pos, token.line, token.column)) * SIZE_UNITS[unit]
    if value > MAX_LITERAL:
        raise SpecError(error(Code.SP020, "size too large", span_of(token), "this size"))
    return value


def duration_ns(token: Token) -> int:
    text = str(token)
    number = text.rstrip("nsum")
    unit = text[len(number):]
    span = span_of(token)
    if len(number) > 24:
        raise SpecError(error(Code.SP020, "duration too long", span, "this duration"))
    try:
        value = Decimal(number) * DURATION_UNITS[unit]
    except InvalidOperation:  # pragma: no cover - the lexer only passes decimals
        raise SpecError(error(Code.SP020, "not a duration", span)) from None
    if value != value.to_integral_value():
        raise SpecError(error(Code.SP020, "duration finer than a nanosecond", span, "this duration",
                              help="durations are kept in whole nanoseconds"))
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
class _ToAst(Transformer):
    """Builds `checker.ast` nodes with spans from the lark parse tree."""

    # -- top level
    def start(self, meta, *items):
        return ast.SpecFile(tuple(items), span_of(meta))

    def spec_decl(self, meta, title):
        return ast.SpecTitle(str(title)[1:-1], span_of(meta))

    def device_decl(self, meta, name, *items):
        return ast.DeviceDecl(_name(name), tuple(items), span_of(meta))

    def engine(self, meta, engine, count):
        return ast.EngineItem(str(engine), _int_literal(count), span_of(meta))

    def launch(self, meta, duration):
        return ast.LaunchItem(ast.Duration(duration_ns(duration), span_of(duration)), span_of(meta))

    def queues(self, meta, count):
        return ast.QueuesItem(_int_literal(count), span_of(meta))

    def array(self, meta, expr):
        return _Marker("array", expr, span_of(meta))

    def host_place(self, meta):
        return _Marker("host", None, span_of(meta))

    def device_place(self, meta, name):
        return _Marker("device", _name(name), span_of(meta))

    def pinned(self, meta):
        return _Marker("pinned", True, span_of(meta))

    def flag(self, meta):
        return _Marker("flag", True, span_of(meta))

    def buffer_decl(self, meta, name, *rest):
        parts = {m.tag: m for m in rest if isinstance(m, _Marker)}
        size = next(r for r in rest if isinstance(r, Token))
        place = parts.get("device")
        return ast.BufferDecl(
            _name(name),
            parts["array"].value if "array" in parts else None,
            ast.Number(size_bytes(size), span_of(size)),
            place.value if place else None,
            "pinned" in parts,
            span_of(meta),
        )

    def alias_decl(self, meta, name, target):
        return ast.AliasDecl(_name(name), target, span_of(meta))

    def stream_decl(self, meta, name, *rest):
        count = None
        device = None
        priority = None
        mode = "blocking"
        for part in rest:
            if isinstance(part, Token):
                device = _name(part)
            elif part.tag == "array":
                count = part.value
            elif part.tag == "priority":
                priority = (part.value, part.span)
            else:
                mode = part.tag
        return ast.StreamDecl(_name(name), count, device, priority, mode, span_of(meta))

    def priority(self, meta, level):
        return _Marker("priority", level, span_of(meta))

    def high(self, meta):
        return PRIORITY_HIGH

    def low(self, meta):
        return PRIORITY_LOW

    def level(self, meta, token):
        return _int_literal(token)

    def legacy(self, meta):
        return _Marker("legacy")

    def nonblocking(self, meta):
        return _Marker("nonblocking")

    def event_decl(self, meta, name, *rest):
        tags = {m.tag: m for m in rest}
        return ast.EventDecl(_name(name), tags["array"].value if "array" in tags else None,
                             "flag" in tags, span_of(meta))

    def notify_decl(self, meta, name, *rest):
        return ast.NotifyDecl(_name(name), rest[0].value if rest else None, span_of(meta))

    def comm_decl(self, meta, name, *members):
        return ast.CommDecl(_name(name), tuple(members), span_of(meta))

    def thread_decl(self, meta, name, body):
        return ast.ThreadDecl(_name(name), body, span_of(meta))

    def block(self, meta, *statements):
        return tuple(statements)

    def expect_decl(self, meta, prop):
        kind, buffer, limit = prop
        return ast.ExpectDecl(kind, buffer, limit, span_of(meta))

    def no_race(self, meta):
        return ("no race", None, None)

    def race(self, meta, buffer=None):
        return ("race", _name(buffer) if buffer else None, None)

    def no_deadlock(self, meta):
        return ("no deadlock", None, None)

    def deadlock(self, meta):
        return ("deadlock", None, None)

    def no_uaf(self, meta, _token):
        return ("no use-after-free", None, None)

    def uaf(self, meta, _token, buffer=None):
        return ("use-after-free", _name(buffer) if buffer else None, None)

    def makespan(self, meta, limit):
        return ("makespan", None, ast.Duration(duration_ns(limit), span_of(limit)))

    # -- statements
    def for_stmt(self, meta, variable, low, high, body):
        return ast.For(_name(variable), low, high, body, span_of(meta))

    def let_stmt(self, meta, variable, value):
        return ast.Let(_name(variable), value, span_of(meta))

    def task_stmt(self, meta, stream, fields):
        op = fields.pop("op")
        return ast.Task(stream, op, span_of(meta), **fields)

    @staticmethod
    def _with_rw(op: str, name, rest) -> dict:
        fields = {"op": op, "name": _name(name)}
        reads: list = []
        writes: list = []
        for part in rest:
            if isinstance(part, ast.Duration):
                fields["duration"] = part
            elif part.tag == "reads":
                reads.extend(part.value)
            else:
                writes.extend(part.value)
        fields["reads"], fields["writes"] = tuple(reads), tuple(writes)
        return fields

    def kernel(self, meta, name, *rest):
        return self._with_rw("kernel", name, rest)

    def callback(self, meta, name, *rest):
        return self._with_rw("callback", name, rest)

    def copy(self, meta, destination, source, duration=None):
        return {"op": "copy", "access": destination, "source": source, "duration": duration}

    def _targeted(op):  # noqa: N805 - builds methods
        def method(self, meta, target):
            return {"op": op, "target": target}
        return method

    record = _targeted("record")
    wait = _targeted("wait")
    reset = _targeted("reset")
    notify = _targeted("notify")
    await_ = _targeted("await")

    def allreduce(self, meta, comm, access, duration=None):
        return {"op": "allreduce", "target": comm, "access": access, "duration": duration}

    def send(self, meta, comm, peer, access, duration=None):
        return {"op": "send", "target": comm, "peer": peer, "access": access, "duration": duration}

    def recv(self, meta, comm, peer, access, duration=None):
        return {"op": "recv", "target": comm, "peer": peer, "access": access, "duration": duration}

    def alloc(self, meta, access):
        return {"op": "alloc", "access": access}

    def free(self, meta, access):
        return {"op": "free", "access": access}

    def host_stmt(self, meta, name, *rest):
        fields = self._with_rw("host", name, rest)
        return ast.HostCall(fields["name"], fields["reads"], fields["writes"],
                            fields.get("duration"), span_of(meta))

    def sync_stmt(self, meta, target):
        return ast.Sync(None if isinstance(target, Token) else target, span_of(meta))

    def host_notify(self, meta, target):
        return ast.HostOp("notify", target, None, span_of(meta))

    def host_await(self, meta, target):
        return ast.HostOp("await", target, None, span_of(meta))

    def host_alloc(self, meta, access):
        return ast.HostOp("alloc", None, access, span_of(meta))

    def host_free(self, meta, access):
        return ast.HostOp("free", None, access, span_of(meta))

    def reads(self, meta, *accesses):
        return _Marker("reads", tuple(accesses), span_of(meta))

    def writes(self, meta, *accesses):
        return _Marker("writes", tuple(accesses), span_of(meta))

    def duration(self, meta, token):
        return ast.Duration(duration_ns(token), span_of(token))

    def ref(self, meta, name, index=None):
        return ast.Ref(_name(name), index, span_of(meta))

    def access(self, meta, name, *subscripts):
        return ast.AccessRef(_name(name), tuple(subscripts), span_of(meta))

    def index(self, meta, expr):
        return ast.Index(expr, span_of(meta))

    def slice(self, meta, low, high):
        return ast.Slice(low, high, span_of(meta))

    # -- expressions
    def _binary(operator):  # noqa: N805 - builds methods
        def method(self, meta, left, right):
            return ast.BinaryOp(operator, left, right, span_of(meta))
        return method

    add = _binary("+")
    sub = _binary("-")
    mul = _binary("*")
    div = _binary("/")
    mod = _binary("%")

    def neg(self, meta, operand):
        return ast.Negate(operand, span_of(meta))

    def int_literal(self, meta, token):
        return ast.Number(_int_literal(token), span_of(token))

    def size_literal(self, meta, token):
        return ast.Number(size_bytes(token), span_of(token))

    def variable(self, meta, token):
        return ast.Variable(str(token), span_of(token))


# -- syntax errors ------------------------------------------------------------------------

# Example inputs per message, matched against the parser state of an error (lark's
# `match_examples`). LALR only matches at the same stack depth, so each example appears at
# the top level, inside a thread, and after a statement.
_THREAD = "device d { compute 1 }\nstream s on d\nthread t {\n"
SYNTAX_EXAMPLES: dict[str, list[str]] = {
    "`reads` and `writes` need at least one buffer": [
        _THREAD + "s: kernel k reads\n}", _THREAD + "s: kernel k writes\n}",
        _THREAD + "s: kernel a\ns: kernel k reads\n}", _THREAD + "host h reads\n}",
        _THREAD + "s: kernel k reads x writes\n}",
    ],
    "a stream statement is `STREAM: OPERATION ...`": [
        _THREAD + "s kernel k\n}", _THREAD + "s: kernel a\ns kernel k\n}",
    ],
    "unknown operation after `STREAM:`": [
        _THREAD + "s: launch k\n}", _THREAD + "s: kernel a\ns: launch k\n}",
    ],
    "a kernel needs a name: `STREAM: kernel NAME ...`": [
        _THREAD + "s: kernel\n}", _THREAD + "s: kernel reads x\n}",
        _THREAD + "s: kernel a\ns: kernel\n}",
    ],
    "a copy is written `STREAM: copy DESTINATION <- SOURCE`": [
        _THREAD + "s: copy a b\n}", _THREAD + "s: copy a -> b\n}", _THREAD + "s: copy a\n}",
        _THREAD + "s: kernel a\ns: copy a b\n}",
    ],
    "a duration needs a unit (`ns`, `us`, `ms` or `s`)": [
        _THREAD + "s: kernel k 3\n}", _THREAD + "s: kernel k reads x 3\n}",
        _THREAD + "s: kernel a\ns: kernel k 3\n}", _THREAD + "host h 3\n}",
    ],
    "a size needs a unit (`B`, `KiB`, `MiB`, `GiB`, `KB`, `MB`, `GB`)": [
        "buffer x 4 on host\n", "device d { compute 1 }\nbuffer x 4 on host\n",
    ],
    "a buffer is declared `buffer NAME SIZE on (host | DEVICE) [pinned]`": [
        "buffer x 4MiB\n", "buffer x on host\n", "device d { compute 1 }\nbuffer x 4MiB\n",
    ],
    "a stream is declared `stream NAME on DEVICE`": [
        "stream s\n", "stream s d\n", "device d { compute 1 }\nstream s\n",
    ],
    "statements belong inside a `thread NAME { ... }` block": [
        "s: kernel k\n", "host h\n", "sync all\n", "for i in 0..2 {\n}\n",
        "device d { compute 1 }\ns: kernel k\n",
    ],
    "a `for` loop is written `for VAR in LOW..HIGH { ... }`": [
        _THREAD + "for i in 0 { \n}\n}", _THREAD + "for i 0..2 {\n}\n}",
        _THREAD + "for i in 0..2\n}",
    ],
    "missing `}`: a block is still open at the end of the file": [
        _THREAD, _THREAD + "s: kernel k\n", "device d { compute 1\n",
    ],
}


@lru_cache(maxsize=1)
def _compiled_examples() -> tuple:
    return tuple(SYNTAX_EXAMPLES.items())


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
                "ENGINE": "an engine (compute, copy, h2d, d2h, d2d, comm)",
            }.get(terminal, terminal.lower()))
    unique = list(dict.fromkeys(names))
    if len(unique) > 8:
        unique = unique[:8] + ["..."]
    return ", ".join(unique)


def _syntax_diagnostic(parser: Lark, text: str, exc: UnexpectedInput):
    if isinstance(exc, UnexpectedCharacters):
        pos = exc.pos_in_stream
        char = text[pos] if pos < len(text) else ""
        span = _span_at(text, pos, 1)
        shown = repr(char) if char.isprintable() else f"U+{ord(char):04X}" if char else "end of file"
        return error(Code.SP002, f"unexpected character {shown}", span, "not valid here",
                     help="names are letters, digits and `_`; comments start with `#`")
    message = None
    try:
        message = exc.match_examples(parser.parse, _compiled_examples(), use_accepts=True)
    except Exception:  # match_examples re-parses examples; never let it mask the real error
        message = None
    token = getattr(exc, "token", None)
    if isinstance(exc, UnexpectedEOF) or token is None or token.type == "$END":
        span = _span_at(text, len(text.rstrip()), 0)
        found = "end of file"
    else:
        span = span_of(token)
        found = "end of line" if token.type == "_NL" else f"`{token}`"
        if token.type == "_NL":
            span = _span_at(text, token.start_pos, 1)
    expected = _describe_expected(parser, set(getattr(exc, "accepts", None) or exc.expected or ()))
    headline = message or f"unexpected {found}"
    help_text = f"expected {expected}" if expected else ""
    return error(Code.SP002, headline, span, f"unexpected {found}", help=help_text)


def _span_at(text: str, offset: int, length: int) -> Span:
    offset = max(0, min(offset, len(text)))
    line = text.count("\n", 0, offset) + 1
    column = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return Span(line, column, line, column + length, offset, offset + length)


def decode(data: bytes) -> str:
    """Bytes to text, or a diagnostic at the first byte that is not UTF-8 text."""
    if len(data) > MAX_SOURCE_CHARS:
        raise SpecError(error(Code.SP004, f"spec is too large ({len(data)} bytes)", None,
                              help=f"specs are limited to {MAX_SOURCE_CHARS // 2**20} MiB"))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        prefix = data[: exc.start].decode("utf-8", "replace")
        raise SpecError(error(Code.SP001, "spec is not UTF-8 text", _span_at(prefix, len(prefix), 1),
                              f"byte 0x{data[exc.start]:02x} is not valid UTF-8",
                              help="a .sched file is UTF-8 text")) from None
    nul = text.find("\0")
    if nul >= 0:
        raise SpecError(error(Code.SP001, "spec contains a NUL byte: it looks like a binary file",
                              _span_at(text, nul, 1), "NUL byte"))
    return text


def _check_nesting(text: str) -> None:
    depth = 0
    for offset, char in enumerate(text):
        if char in "([{":
            depth += 1
            if depth > MAX_NESTING:
                raise SpecError(error(Code.SP004, "brackets nested too deeply", _span_at(text, offset, 1),
                                      f"nesting depth {depth}",
                                      help=f"brackets may nest at most {MAX_NESTING} deep"))
        elif char in ")]}":
            depth = max(0, depth - 1)


def parse(text: str) -> ast.SpecFile:
    """Parse source text; raises `SpecError` with a diagnostic on bad input."""
    if len(text) > MAX_SOURCE_CHARS:
        raise SpecError(error(Code.SP004, "spec is too large", None,
                              help=f"specs are limited to {MAX_SOURCE_CHARS // 2**20} MiB"))
    _check_nesting(text)
    parser = _parser()
    try:
        tree = parser.parse(text if text.endswith("\n") else text + "\n")
    except UnexpectedInput as exc:
        raise SpecError(_syntax_diagnostic(parser, text, exc)) from None
    try:
        spec = _ToAst().transform(tree)
    except VisitError as exc:
        if isinstance(exc.orig_exc, SpecError):
            raise exc.orig_exc from None
        raise
    if not spec.declarations:
        raise SpecError(error(Code.SP003, "the spec is empty", _span_at(text, 0, 0),
                              help="declare devices, streams and threads; see `streamproof --help`"))
    return spec
