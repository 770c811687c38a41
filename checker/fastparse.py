"""A hand-written recursive-descent parser for the grammar in `grammar/sched.lark`.

`checker.parse` tries it first: it builds the same syntax tree as the lark parser plus its
transformer (the same nodes, the same spans), several times faster, which matters for the
megabytes of flat statements an imported trace produces. It never reports an error itself:
on anything it does not handle exactly as lark would (a syntax error, a literal out of range,
an unusual token), it gives up by raising `Unhandled`, and the lark parser parses the text
again and produces the result or the diagnostic. So it only has to be right where it
succeeds, which `tests/test_fastparse.py` checks against lark.

Spans follow lark's `propagate_positions`: a rule spans from its first token to its last
(keywords and brackets included); a parenthesized expression's own span leaves out its
parentheses, while the rule around it includes them.
"""

from __future__ import annotations

import dataclasses
import re

from checker import ast
from checker.ir import Span

__all__ = ["Unhandled", "parse"]


def _builder(cls):
    """A constructor for a frozen slotted dataclass that sets its slots directly: it builds the
    same object as `cls(...)` in half the time (the `__init__` of a frozen dataclass goes through
    `object.__setattr__` for every field), which counts at hundreds of thousands of nodes."""
    fields = [f.name for f in dataclasses.fields(cls)]
    defaults = {f.name: f.default for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING}
    namespace = {"new": object.__new__, "cls": cls, "defaults": defaults}
    namespace.update({f"set_{name}": cls.__dict__[name].__set__ for name in fields})
    body = "".join(f"    set_{name}(self, {name})\n" for name in fields)
    parameters = ", ".join(f"{name}=defaults[{name!r}]" if name in defaults else name for name in fields)
    exec(f"def make({parameters}):\n    self = new(cls)\n{body}    return self\n", namespace)
    return namespace["make"]


# `Name_(...)` builds an `ast.Name`, and so on.
Span_ = _builder(Span)
AccessRef_ = _builder(ast.AccessRef)
AliasDecl_ = _builder(ast.AliasDecl)
AllocTask_ = _builder(ast.AllocTask)
AwaitTask_ = _builder(ast.AwaitTask)
BinaryOp_ = _builder(ast.BinaryOp)
BufferDecl_ = _builder(ast.BufferDecl)
CallbackTask_ = _builder(ast.CallbackTask)
Choose_ = _builder(ast.Choose)
CollectiveTask_ = _builder(ast.CollectiveTask)
CommDecl_ = _builder(ast.CommDecl)
CopyTask_ = _builder(ast.CopyTask)
DeviceDecl_ = _builder(ast.DeviceDecl)
Duration_ = _builder(ast.Duration)
EngineItem_ = _builder(ast.EngineItem)
EventDecl_ = _builder(ast.EventDecl)
ExpectDecl_ = _builder(ast.ExpectDecl)
For_ = _builder(ast.For)
FreeTask_ = _builder(ast.FreeTask)
Group_ = _builder(ast.Group)
HostAlloc_ = _builder(ast.HostAlloc)
HostAwait_ = _builder(ast.HostAwait)
HostCall_ = _builder(ast.HostCall)
HostFree_ = _builder(ast.HostFree)
HostMemset_ = _builder(ast.HostMemset)
HostNotify_ = _builder(ast.HostNotify)
Index_ = _builder(ast.Index)
ItemTask_ = _builder(ast.ItemTask)
KernelTask_ = _builder(ast.KernelTask)
LaunchItem_ = _builder(ast.LaunchItem)
Let_ = _builder(ast.Let)
Memcpy_ = _builder(ast.Memcpy)
MemsetTask_ = _builder(ast.MemsetTask)
Name_ = _builder(ast.Name)
Negate_ = _builder(ast.Negate)
NotifyDecl_ = _builder(ast.NotifyDecl)
NotifyTask_ = _builder(ast.NotifyTask)
Number_ = _builder(ast.Number)
Query_ = _builder(ast.Query)
QueuesItem_ = _builder(ast.QueuesItem)
RecordStreamTask_ = _builder(ast.RecordStreamTask)
RecordTask_ = _builder(ast.RecordTask)
RecvTask_ = _builder(ast.RecvTask)
Ref_ = _builder(ast.Ref)
ResetTask_ = _builder(ast.ResetTask)
RuntimeItem_ = _builder(ast.RuntimeItem)
SendTask_ = _builder(ast.SendTask)
Slice_ = _builder(ast.Slice)
SpecFile_ = _builder(ast.SpecFile)
SpecTitle_ = _builder(ast.SpecTitle)
StreamDecl_ = _builder(ast.StreamDecl)
Sync_ = _builder(ast.Sync)
TensorDecl_ = _builder(ast.TensorDecl)
ThreadDecl_ = _builder(ast.ThreadDecl)
GraphDecl_ = _builder(ast.GraphDecl)
Variable_ = _builder(ast.Variable)
WaitStreamTask_ = _builder(ast.WaitStreamTask)
WaitTask_ = _builder(ast.WaitTask)


class Unhandled(Exception):
    """The text needs the lark parser (an error, or a form this parser leaves to it)."""


# Every match is one token after optional blanks; the group number says which kind.
_TOKEN = re.compile(r"""[\t \f]*(?:
    ((?:\r?\n[\t \f]*|\#[^\n]*)+)                                    # 1 newlines and comments
  | (\\[\t \f]*\r?\n)                                                # 2 line continuation
  | ([0-9]+(?:\.[0-9]+)?(?:ns|us|ms|s)(?![A-Za-z0-9_]))                      # 3 duration
  | ([0-9]+(?:B|KiB|MiB|GiB|TiB|KB|MB|GB|TB)(?![A-Za-z0-9_]))              # 4 size
  | ([0-9]+)                                                              # 5 integer
  | (use-after-free)                                                   # 6
  | ([A-Za-z_][A-Za-z0-9_]*(?:\[[0-9]+\])?)                               # 7 name, or name[integer]
  | ("[^"\n]*")                                                        # 8 string
  | (<-|\.\.|<=|[{}\[\]():,=+\-*/%])                                   # 9 punctuation
  | ($)                                                                # 10 end
)""", re.X)
_KINDS = (None, "nl", "cont", "d", "s", "i", "u", "n", "q", None, "$")

# The lookaheads of the grammar's soft keywords (GROUP, CHOOSE, QUERY, MEMCPY, HOST_MEMSET).
_GAP = r"(?:[\t \f]|\\[\t \f]*\r?\n)"
_BEFORE_BRACE = re.compile(_GAP + r"*\{")
_BEFORE_WORD = re.compile(_GAP + r"+[A-Za-z_]")
_SOFT = {"group": _BEFORE_BRACE, "choose": _BEFORE_BRACE, "query": _BEFORE_WORD, "memcpy": _BEFORE_WORD,
         "memset": _BEFORE_WORD}

_LEAVES = frozenset({"i", "n", "s"})
_OPERATORS = frozenset({"+", "-", "*", "/", "%"})
_ENGINES = frozenset({"compute", "copy", "h2d", "d2h", "d2d", "comm"})
_SYMMETRIC = frozenset({"allreduce", "allgather", "reducescatter", "alltoall"})
_ROOTED = frozenset({"broadcast", "reduce"})


# The same tokens for `re.findall`: (blanks before, token) pairs, with no end-of-text token; the
# commonest kinds come first, since alternatives are tried in order.
_TOKEN_PAIRS = re.compile(r"""([\t \f]*)(
    use-after-free
  | [A-Za-z_][A-Za-z0-9_]*(?:\[[0-9]+\])?
  | <-|\.\.|<=|[{}\[\]():,=+\-*/%]
  | (?:\r?\n[\t \f]*|\#[^\n]*)+
  | [0-9]+(?:(?:\.[0-9]+)?(?:ns|us|ms|s)|B|KiB|MiB|GiB|TiB|KB|MB|GB|TB)(?![A-Za-z0-9_])
  | [0-9]+
  | "[^"\n]*"
)""", re.X)
class _KindTable(dict):
    """Token kind by the token's first and last characters (a digit token ends in `s` for a
    duration, `B` for a size, a digit for an integer; a newline token starts with a newline or
    `#`); filled in as keys come up."""

    def __missing__(self, key: str) -> str:
        first, last = key[0], key[-1]
        if first in "\r\n#":
            kind = "nl"
        elif first.isdigit():
            kind = "d" if last == "s" else "s" if last == "B" else "i"
        elif first == '"':
            kind = "q"
        elif first.isalpha() or first == "_":
            kind = "x" if last == "]" else "n"  # `use-after-free` is settled by its whole text
        elif first in "<.":
            kind = key  # `<-`, `<=`, `..`: the key is the whole token
        else:
            kind = first
        self[key] = kind
        return kind


_KIND_OF = _KindTable()


def _tokenize_bulk(text: str):
    """`_tokenize` for texts without line continuations, with the scanning done by `re.findall`
    and the bookkeeping by `map` and `itertools` (no Python-level loop per token)."""
    from itertools import accumulate, chain
    from operator import add, itemgetter, sub

    pairs = _TOKEN_PAIRS.findall(text)
    offsets = list(accumulate(map(len, chain.from_iterable(pairs)), initial=0))
    if offsets[-1] != len(text):
        raise Unhandled  # something no token matches was skipped
    starts = offsets[1::2]
    values = list(map(itemgetter(1), pairs))
    kinds = list(map(_KIND_OF.__getitem__, map(add, map(itemgetter(0), values), map(itemgetter(-1), values))))
    if "use-after-free" in text:
        for i, token in enumerate(values):
            if token == "use-after-free":
                kinds[i] = "u"
    count = len(values)
    line_delta = [0] * count
    line_start = [-1] * count
    i = -1
    index = kinds.index
    try:
        while True:
            i = index("nl", i + 1)
            token = values[i]
            newlines = token.count("\n")
            if newlines and i + 1 < count:
                line_delta[i + 1] = newlines
                line_start[i + 1] = starts[i] + token.rindex("\n")  # one before the line's first column
    except ValueError:
        pass
    if count:
        line_delta[0] = 1
    lines = list(accumulate(line_delta))
    columns = list(map(sub, starts, accumulate(line_start, max)))
    kinds.append("$")
    values.append("")
    starts.append(len(text))
    lines.append(text.count("\n") + 1)
    columns.append(len(text) - text.rfind("\n"))
    return kinds, values, starts, lines, columns


def _tokenize(text: str):
    """Parallel lists: kind ('n' name, 'x' a name with an integer index as in `s[3]`, 'i' int,
    's' size, 'd' duration, 'q' string, 'u' use-after-free, 'nl' newline, '$' the end, or the
    punctuation itself), text, start offset, line, column. An indexed name is one token because
    it is so common (`s[3]: record done[3]`); the parser reads it as the name, `[`, the integer
    and `]` would be."""
    kinds: list[str] = []
    values: list[str] = []
    starts: list[int] = []
    lines: list[int] = []
    columns: list[int] = []
    add_kind, add_value, add_start = kinds.append, values.append, starts.append
    add_line, add_column = lines.append, columns.append
    line, line_start = 1, 0
    position = 0
    names = _KINDS
    token = _TOKEN.match
    while True:
        m = token(text, position)
        if m is None:
            raise Unhandled  # a character no token starts with
        number = m.lastindex
        value = m.group(number)
        position = m.end()
        start = position - len(value)
        if number == 9:
            kind = value
        elif number == 7 and value[-1] == "]":
            kind = "x"
        else:
            kind = names[number]
            if number <= 2:
                if number == 2:
                    line += 1
                    line_start = position
                    continue
                add_kind(kind)
                add_value(value)
                add_start(start)
                add_line(line)
                add_column(start - line_start + 1)
                newlines = value.count("\n")
                if newlines:
                    line += newlines
                    line_start = start + value.rindex("\n") + 1
                continue
        add_kind(kind)
        add_value(value)
        add_start(start)
        add_line(line)
        add_column(start - line_start + 1)
        if number == 10:
            return kinds, values, starts, lines, columns


class _Parser:
    def __init__(self, text: str):
        self.text = text
        tokenize = _tokenize if "\\" in text else _tokenize_bulk
        self.kinds, self.values, self.starts, self.lines, self.columns = tokenize(text)
        self.i = 0
        self.depths: dict[int, int] = {}

    # -- tokens and spans

    def span(self, first: int, last: int) -> Span:
        """From the start of token `first` to the end of token `last`."""
        values = self.values
        if self.kinds[last] != "nl":
            return Span_(self.lines[first], self.columns[first], self.lines[last],
                        self.columns[last] + len(values[last]), self.starts[first],
                        self.starts[last] + len(values[last]))
        value = values[last]  # a newline token: it ends on a later line
        newlines = value.count("\n")
        end_line = self.lines[last] + newlines
        end_column = len(value) - value.rindex("\n") if newlines else self.columns[last] + len(value)
        return Span_(self.lines[first], self.columns[first], end_line, end_column, self.starts[first],
                    self.starts[last] + len(values[last]))

    def token_span(self, i: int) -> Span:
        value = self.values[i]
        line = self.lines[i]
        column = self.columns[i]
        start = self.starts[i]
        return Span_(line, column, line, column + len(value), start, start + len(value))

    def expect(self, kind: str) -> int:
        i = self.i
        if self.kinds[i] != kind:
            raise Unhandled
        self.i = i + 1
        return i

    def keyword(self, word: str) -> int:
        i = self.i
        if self.kinds[i] != "n" or self.values[i] != word:
            raise Unhandled
        self.i = i + 1
        return i

    def at_keyword(self, word: str) -> bool:
        return self.kinds[self.i] == "n" and self.values[self.i] == word

    def name(self) -> ast.Name:
        i = self.expect("n")
        return Name_(self.values[i], self.token_span(i))

    def skip_newline(self) -> None:
        if self.kinds[self.i] == "nl":
            self.i += 1

    # -- literals (the same conversions, and the same refusals, as the lark transformer)

    def integer(self, i: int) -> int:
        text = self.values[i]
        if len(text) > 18:
            raise Unhandled  # SP020: left to the lark path, which reports it
        return int(text)

    def size(self, i: int) -> int:
        text = self.values[i]
        digits = text.rstrip("BKMGTiB")
        if len(digits) > 18:
            raise Unhandled
        value = int(digits) * _LIMITS.size_units[text[len(digits):]]
        if value > _LIMITS.max_literal:
            raise Unhandled
        return value

    def duration(self) -> ast.Duration:
        i = self.expect("d")
        text = self.values[i]
        line, column, start = self.lines[i], self.columns[i], self.starts[i]
        span = Span_(line, column, line, column + len(text), start, start + len(text))
        number = text.rstrip("nsum")
        if len(number) > 24:
            raise Unhandled
        unit = _LIMITS.duration_units[text[len(number):]]
        whole, _, fraction = number.partition(".")
        if fraction:
            # exactly, in integers: 3.25ms = 325 * 10^6 / 10^2 ns
            scaled, rest = divmod(int(whole + fraction) * unit, 10 ** len(fraction))
            if rest:
                raise Unhandled  # finer than a nanosecond: the lark path rounds it up
            value = scaled
        else:
            value = int(number) * unit
        if value > _LIMITS.max_duration:
            raise Unhandled
        return Duration_(value, span, None)

    def optional_duration(self) -> ast.Duration | None:
        return self.duration() if self.kinds[self.i] == "d" else None

    # -- expressions: (node, first token, last token); the tokens include parentheses

    def expr(self):
        i = self.i
        kinds = self.kinds
        kind = kinds[i]
        if kind in _LEAVES and kinds[i + 1] not in _OPERATORS:
            # the usual index: one number or variable
            self.i = i + 1
            text = self.values[i]
            line, column, start = self.lines[i], self.columns[i], self.starts[i]
            span = Span_(line, column, line, column + len(text), start, start + len(text))
            if kind == "i":
                if len(text) > 18:
                    raise Unhandled
                return Number_(int(text), span), i, i
            if kind == "n":
                return Variable_(text, span), i, i
            return Number_(self.size(i), span), i, i
        node, first, last = self.product()
        while kinds[self.i] in ("+", "-"):
            operator = kinds[self.i]
            self.i += 1
            right, _, last = self.product()
            node = self.binary(BinaryOp_(operator, node, right, self.span(first, last)), node, right)
        return node, first, last

    def product(self):
        node, first, last = self.unary()
        kinds = self.kinds
        while kinds[self.i] in ("*", "/", "%"):
            operator = kinds[self.i]
            self.i += 1
            right, _, last = self.unary()
            node = self.binary(BinaryOp_(operator, node, right, self.span(first, last)), node, right)
        return node, first, last

    def unary(self):
        i = self.i
        kind = self.kinds[i]
        if kind == "-":
            self.i += 1
            operand, _, last = self.unary()
            node = Negate_(operand, self.span(i, last))
            depth = 1 + self.depths.get(id(operand), 0)
            if depth > _LIMITS.max_operators:
                raise Unhandled
            self.depths[id(node)] = depth
            return node, i, last
        if kind == "i":
            self.i += 1
            return Number_(self.integer(i), self.token_span(i)), i, i
        if kind == "s":
            self.i += 1
            return Number_(self.size(i), self.token_span(i)), i, i
        if kind == "n":
            self.i += 1
            return Variable_(self.values[i], self.token_span(i)), i, i
        if kind == "(":
            self.i += 1
            node, _, _ = self.expr()
            last = self.expect(")")
            return node, i, last
        raise Unhandled

    def binary(self, node, left, right):
        depths = self.depths
        depth = 1 + max(depths.get(id(left), 0), depths.get(id(right), 0))
        if depth > _LIMITS.max_operators:
            raise Unhandled
        depths[id(node)] = depth
        return node

    # -- references

    def indexed(self, i: int):
        """The name, the index (a `Number`) and the `[...]` span of an indexed-name token."""
        text = self.values[i]
        bracket = text.index("[")
        end = len(text)
        if end - bracket > 20:
            raise Unhandled  # an index of more than 18 digits: SP020 from the lark path
        line, column, start = self.lines[i], self.columns[i], self.starts[i]
        at, offset = column + bracket, start + bracket
        return (Name_(text[:bracket], Span_(line, column, line, at, start, offset)),
                Number_(int(text[bracket + 1:-1]), Span_(line, at + 1, line, column + end - 1, offset + 1,
                                                         start + end - 1)),
                Span_(line, at, line, column + end, offset, start + end))

    def ref(self) -> ast.Ref:
        first = self.i
        kinds = self.kinds
        kind = kinds[first]
        if kind == "x":
            self.i = first + 1
            name, index, _ = self.indexed(first)
            return Ref_(name, index, self.token_span(first), None)
        if kind != "n":
            raise Unhandled
        text = self.values[first]
        line, column, start = self.lines[first], self.columns[first], self.starts[first]
        span = Span_(line, column, line, column + len(text), start, start + len(text))
        name = Name_(text, span)
        if kinds[first + 1] != "[":
            self.i = first + 1
            return Ref_(name, None, span, None)
        self.i = first + 2
        index, _, _ = self.expr()
        last = self.expect("]")
        return Ref_(name, index, self.span(first, last), None)

    def leaf(self, i: int):
        """The number or variable at token `i` (an integer, a size or a name)."""
        kind = self.kinds[i]
        text = self.values[i]
        line, column, start = self.lines[i], self.columns[i], self.starts[i]
        span = Span_(line, column, line, column + len(text), start, start + len(text))
        if kind == "i":
            if len(text) > 18:
                raise Unhandled
            return Number_(int(text), span)
        if kind == "n":
            return Variable_(text, span)
        return Number_(self.size(i), span)

    def access(self) -> ast.AccessRef:
        first = self.i
        kinds = self.kinds
        lines, columns, starts = self.lines, self.columns, self.starts
        line, column, start = lines[first], columns[first], starts[first]
        i = first + 1
        if kinds[first] == "x":
            name, index, brackets = self.indexed(first)
            if kinds[i] != "[":
                self.i = i
                return AccessRef_(name, (Index_(index, brackets),), self.token_span(first))
            subscripts = [Index_(index, brackets)]
        elif kinds[first] == "n":
            text = self.values[first]
            span = Span_(line, column, line, column + len(text), start, start + len(text))
            name = Name_(text, span)
            if kinds[i] != "[":
                self.i = i
                return AccessRef_(name, (), span)
            subscripts = []
        else:
            raise Unhandled
        leaves = _LEAVES
        while kinds[i] == "[":
            open_ = i
            # the usual forms first: `[leaf]` and `[leaf:leaf]`
            if kinds[i + 1] in leaves:
                if kinds[i + 2] == "]":
                    close = i + 2
                    subscripts.append(Index_(self.leaf(i + 1), Span_(
                        lines[open_], columns[open_], lines[close], columns[close] + 1, starts[open_],
                        starts[close] + 1)))
                    i = close + 1
                    continue
                if kinds[i + 2] == ":" and kinds[i + 3] in leaves and kinds[i + 4] == "]":
                    close = i + 4
                    subscripts.append(Slice_(self.leaf(i + 1), self.leaf(i + 3), Span_(
                        lines[open_], columns[open_], lines[close], columns[close] + 1, starts[open_],
                        starts[close] + 1)))
                    i = close + 1
                    continue
            self.i = i + 1
            low = None
            if kinds[self.i] != ":":
                low, _, _ = self.expr()
                if kinds[self.i] == "]":
                    close = self.i
                    i = close + 1
                    subscripts.append(Index_(low, self.span(open_, close)))
                    continue
            self.expect(":")
            high = None
            if kinds[self.i] != "]":
                high, _, _ = self.expr()
            close = self.expect("]")
            i = close + 1
            subscripts.append(Slice_(low, high, self.span(open_, close)))
        self.i = i
        last = i - 1
        return AccessRef_(name, tuple(subscripts), Span_(line, column, lines[last],
                                                         columns[last] + len(self.values[last]), start,
                                                         starts[last] + len(self.values[last])))

    def access_list(self) -> list[ast.AccessRef]:
        access = self.access
        accesses = [access()]
        kinds = self.kinds
        while kinds[self.i] == ",":
            self.i += 1
            accesses.append(access())
        return accesses

    def reads_writes(self):
        """`reads ... writes ...` in any order, then an optional duration."""
        reads: list = []
        writes: list = []
        while self.kinds[self.i] == "n":
            word = self.values[self.i]
            if word == "reads":
                self.i += 1
                reads.extend(self.access_list())
            elif word == "writes":
                self.i += 1
                writes.extend(self.access_list())
            else:
                raise Unhandled
        return tuple(reads), tuple(writes), self.optional_duration()

    # -- top level

    def spec(self) -> ast.SpecFile:
        kinds = self.kinds
        first = self.i
        self.skip_newline()
        items = []
        while kinds[self.i] != "$":
            items.append(self.item())
            if kinds[self.i] == "nl":
                self.i += 1
            elif kinds[self.i] != "$":
                raise Unhandled
        last = self.i - 1
        span = self.span(first, last) if last >= first else Span_(1, 1, 1, 1, 0, 0)
        return SpecFile_(tuple(items), span)

    def item(self):
        i = self.i
        if self.kinds[i] != "n":
            raise Unhandled
        method = self.ITEMS.get(self.values[i])
        if method is None:
            raise Unhandled
        self.i += 1
        return method(self, i)

    def spec_title(self, first):
        last = self.expect("q")
        return SpecTitle_(self.values[last][1:-1], self.span(first, last))

    def device(self, first):
        name, array = self.declared()
        kinds, values = self.kinds, self.values
        if kinds[self.i] != "{":
            return DeviceDecl_(name, (), self.span(first, self.i - 1), array)
        self.i += 1
        self.skip_newline()
        items = []
        while kinds[self.i] != "}":
            start = self.i
            word = values[start] if kinds[start] == "n" else None
            self.i += 1
            if word in _ENGINES:
                count = self.expect("i")
                items.append(EngineItem_(word, self.integer(count), self.span(start, count)))
            elif word == "launch":
                duration = self.duration()
                items.append(LaunchItem_(duration, self.span(start, self.i - 1)))
            elif word == "queues":
                count = self.expect("i")
                items.append(QueuesItem_(self.integer(count), self.span(start, count)))
            elif word == "runtime":
                runtime = self.name()
                items.append(RuntimeItem_(runtime, self.span(start, self.i - 1)))
            else:
                raise Unhandled
            self.skip_newline()
        self.i += 1
        return DeviceDecl_(name, tuple(items), self.span(first, self.i - 1), array)

    def declared(self):
        """A declared name and its array size: `NAME` (None) or `NAME[N]`."""
        i = self.i
        if self.kinds[i] == "x":
            self.i = i + 1
            name, count, _ = self.indexed(i)
            return name, count
        name = self.name()
        if self.kinds[self.i] != "[":
            return name, None
        self.i += 1
        count, _, _ = self.expr()
        self.expect("]")
        return name, count

    def buffer(self, first):
        name, count = self.declared()
        size = self.expect("s")
        self.keyword("on")
        place = None
        if self.at_keyword("host"):
            self.i += 1
        else:
            place = self.name()
        pinned = False
        if self.at_keyword("pinned"):
            self.i += 1
            pinned = True
        shared = self.at_keyword("ipc")
        if shared:
            self.i += 1
        return BufferDecl_(name, count, Number_(self.size(size), self.token_span(size)), place, pinned,
                              self.span(first, self.i - 1), None, shared)

    def alias(self, first):
        name = self.name()
        self.expect("=")
        target = self.access()
        return AliasDecl_(name, target, self.span(first, self.i - 1))

    def stream(self, first):
        name, count = self.declared()
        self.keyword("on")
        device = self.name()
        priority = None
        mode = "blocking"
        moded = False
        kinds, values = self.kinds, self.values
        while kinds[self.i] == "n":
            start = self.i
            word = values[start]
            self.i += 1
            if word == "priority":
                if priority is not None:
                    raise Unhandled
                i = self.i
                if kinds[i] == "n" and values[i] in ("high", "low"):
                    level = _LIMITS.priority_high if values[i] == "high" else _LIMITS.priority_low
                    self.i += 1
                elif kinds[i] == "i":
                    level = self.integer(i)
                    self.i += 1
                elif kinds[i] == "-" and kinds[i + 1] == "i" and self.starts[i + 1] == self.starts[i] + 1:
                    level = -self.integer(i + 1)
                    self.i += 2
                else:
                    raise Unhandled
                priority = (level, self.span(start, self.i - 1))
            elif word in ("legacy", "nonblocking"):
                if moded:
                    raise Unhandled
                mode, moded = word, True
            else:
                raise Unhandled
        return StreamDecl_(name, count, device, priority, mode, self.span(first, self.i - 1), None)

    def event(self, first):
        name, count = self.declared()
        flag = False
        if self.at_keyword("flag"):
            self.i += 1
            flag = True
        shared = self.at_keyword("ipc")
        if shared:
            self.i += 1
        return EventDecl_(name, count, flag, self.span(first, self.i - 1), shared)

    def notify(self, first):
        name, count = self.declared()
        return NotifyDecl_(name, count, self.span(first, self.i - 1))

    def comm(self, first):
        name, count = self.declared()
        self.expect("=")
        self.expect("{")
        self.skip_newline()
        members = [self.ref()]
        kinds = self.kinds
        while kinds[self.i] == ",":
            self.i += 1
            self.skip_newline()
            members.append(self.ref())
        self.skip_newline()
        last = self.expect("}")
        one_in_flight = self.at_keyword("one_in_flight")
        if one_in_flight:
            last = self.i
            self.i += 1
        return CommDecl_(name, count, tuple(members), self.span(first, last), one_in_flight)

    def tensor(self, first):
        name, count = self.declared()
        size = self.expect("s")
        self.keyword("on")
        device = self.name()
        return TensorDecl_(name, count, Number_(self.size(size), self.token_span(size)), device,
                              self.span(first, self.i - 1), None)

    def thread(self, first):
        name, count = self.declared()
        process = self.at_keyword("process")
        if process:
            self.i += 1
        body = self.block()
        return ThreadDecl_(name, count, body, self.span(first, self.i - 1), process)

    def graph(self, first):
        name, count = self.declared()
        body = self.block()
        return GraphDecl_(name, count, body, self.span(first, self.i - 1))

    def expect_decl(self, first):
        kinds, values = self.kinds, self.values
        buffer = None
        limit = None
        i = self.i
        word = values[i] if kinds[i] == "n" else None
        self.i += 1
        if kinds[i] == "u":
            kind = "use-after-free"
            if self.at_keyword("on"):
                self.i += 1
                buffer = self.ref()
        elif word == "no":
            j = self.i
            self.i += 1
            if kinds[j] == "u":
                kind = "no use-after-free"
            elif kinds[j] == "n" and values[j] in ("race", "deadlock", "mismatch"):
                kind = "no " + values[j]
            else:
                raise Unhandled
        elif word == "race":
            kind = "race"
            if self.at_keyword("on"):
                self.i += 1
                buffer = self.ref()
        elif word in ("deadlock", "mismatch"):
            kind = word
        elif word == "makespan":
            kind = "makespan"
            self.expect("<=")
            limit = self.duration()
        else:
            raise Unhandled
        return ExpectDecl_(kind, buffer, limit, self.span(first, self.i - 1))

    ITEMS = {
        "spec": spec_title, "device": device, "buffer": buffer, "alias": alias, "stream": stream,
        "event": event, "notify": notify, "comm": comm, "tensor": tensor, "thread": thread,
        "graph": graph, "expect": expect_decl,
    }

    # -- statements

    def block(self) -> tuple:
        self.expect("{")
        kinds = self.kinds
        self.skip_newline()
        statements = []
        statement = self.statement
        while kinds[self.i] != "}":
            statements.append(statement())
            if kinds[self.i] == "nl":
                self.i += 1
            elif kinds[self.i] != "}":
                raise Unhandled
        self.i += 1
        return tuple(statements)

    def statement(self):
        i = self.i
        kind = self.kinds[i]
        if kind == "x":
            if self.values[i].partition("[")[0] in self.STATEMENTS:
                raise Unhandled  # `host[0]:` is the keyword, then an error
            return self.task(i)
        if kind != "n":
            raise Unhandled
        word = self.values[i]
        method = self.STATEMENTS.get(word)
        if method is not None:
            self.i += 1
            return method(self, i)
        soft = _SOFT.get(word)
        if soft is not None and soft.match(self.text, self.starts[i] + len(word)):
            self.i += 1
            return self.SOFT_STATEMENTS[word](self, i)
        return self.task(i)

    def for_stmt(self, first):
        variable = self.name()
        self.keyword("in")
        low, _, _ = self.expr()
        self.expect("..")
        high, _, _ = self.expr()
        body = self.block()
        return For_(variable, low, high, body, self.span(first, self.i - 1))

    def let_stmt(self, first):
        variable = self.name()
        self.expect("=")
        value, _, last = self.expr()
        return Let_(variable, value, self.span(first, last))

    def host_stmt(self, first):
        name = self.name()
        reads, writes, duration = self.reads_writes()
        return HostCall_(name, reads, writes, duration, self.span(first, self.i - 1))

    def sync_stmt(self, first):
        if self.kinds[self.i] == "x" and self.values[self.i].startswith("all["):
            raise Unhandled  # `sync all[0]`: the keyword, then an error
        if self.at_keyword("all"):
            self.i += 1
            return Sync_(None, self.span(first, self.i - 1))
        target = self.ref()
        return Sync_(target, self.span(first, self.i - 1))

    def host_notify(self, first):
        target = self.ref()
        return HostNotify_(target, self.span(first, self.i - 1))

    def host_await(self, first):
        target = self.ref()
        return HostAwait_(target, self.span(first, self.i - 1))

    def host_alloc(self, first):
        access = self.access()
        nosync = self.at_keyword("nosync")
        if nosync:
            self.i += 1
        return HostAlloc_(access, self.span(first, self.i - 1), nosync)

    def host_free(self, first):
        access = self.access()
        nosync = self.at_keyword("nosync")
        if nosync:
            self.i += 1
        return HostFree_(access, self.span(first, self.i - 1), nosync)

    def group_stmt(self, first):
        body = self.block()
        return Group_(body, self.span(first, self.i - 1))

    def choose_stmt(self, first):
        branches = [self.block()]
        while self.at_keyword("or"):
            self.i += 1
            branches.append(self.block())
        if len(branches) < 2:
            raise Unhandled
        return Choose_(tuple(branches), self.span(first, self.i - 1))

    def query_stmt(self, first):
        target = self.ref()
        return Query_(target, self.span(first, self.i - 1))

    def memcpy_stmt(self, first):
        destination = self.access()
        self.expect("<-")
        source = self.access()
        duration = self.optional_duration()
        return Memcpy_(destination, source, duration, self.span(first, self.i - 1))

    def host_memset(self, first):
        access = self.access()
        duration = self.optional_duration()
        return HostMemset_(access, duration, self.span(first, self.i - 1))

    STATEMENTS = {
        "for": for_stmt, "let": let_stmt, "host": host_stmt, "sync": sync_stmt, "notify": host_notify,
        "await": host_await, "alloc": host_alloc, "free": host_free,
    }
    SOFT_STATEMENTS = {
        "group": group_stmt, "choose": choose_stmt, "query": query_stmt, "memcpy": memcpy_stmt,
        "memset": host_memset,
    }

    def task(self, first):
        stream = self.ref()
        i = self.i
        kinds, values = self.kinds, self.values
        if kinds[i] != ":" or kinds[i + 1] != "n":
            raise Unhandled
        op = values[i + 1]
        self.i = i = i + 2
        if op == "kernel" or op == "callback":
            if kinds[i] != "n":
                raise Unhandled
            text = values[i]
            line, column, start = self.lines[i], self.columns[i], self.starts[i]
            name = Name_(text, Span_(line, column, line, column + len(text), start, start + len(text)))
            self.i = i + 1
            reads, writes, duration = self.reads_writes()
            cls = KernelTask_ if op == "kernel" else CallbackTask_
            return cls(stream, name, reads, writes, duration, self.span(first, self.i - 1))
        if op == "copy":
            destination = self.access()
            self.expect("<-")
            source = self.access()
            duration = self.optional_duration()
            return CopyTask_(stream, destination, source, duration, self.span(first, self.i - 1))
        cls = _TARGETED.get(op)
        if cls is not None:
            target = self.ref()
            if op in ("record", "wait", "reset") and self.at_keyword("external"):
                self.i += 1
                return cls(stream, target, self.span(first, self.i - 1), True)
            return cls(stream, target, self.span(first, self.i - 1))
        if op in _SYMMETRIC or op in _ROOTED:
            comm = self.ref()
            root = None
            if op in _ROOTED:
                # `root` is a keyword only before a name (the grammar's _ROOT)
                if not (self.at_keyword("root") and _BEFORE_WORD.match(self.text, self.starts[self.i] + 4)):
                    raise Unhandled
                self.i += 1
                root = self.ref()
            access = self.access()
            source = None
            if self.kinds[self.i] == "<-":
                self.i += 1
                source = self.access()
            duration = self.optional_duration()
            return CollectiveTask_(stream, op, comm, root, access, source, duration, self.span(first, self.i - 1))
        if op in ("send", "recv"):
            comm = self.ref()
            self.keyword("to" if op == "send" else "from")
            peer = self.ref()
            access = self.access()
            duration = self.optional_duration()
            cls = SendTask_ if op == "send" else RecvTask_
            return cls(stream, comm, peer, access, duration, self.span(first, self.i - 1))
        if op in ("alloc", "free", "record_stream"):
            access = self.access()
            cls = {"alloc": AllocTask_, "free": FreeTask_, "record_stream": RecordStreamTask_}[op]
            return cls(stream, access, self.span(first, self.i - 1))
        if op in ("memset", "item"):
            access = self.access()
            duration = self.optional_duration()
            cls = MemsetTask_ if op == "memset" else ItemTask_
            return cls(stream, access, duration, self.span(first, self.i - 1))
        if op == "wait_stream":
            source = self.ref()
            return WaitStreamTask_(stream, source, self.span(first, self.i - 1))
        raise Unhandled


_TARGETED = {
    "record": RecordTask_, "wait": WaitTask_, "reset": ResetTask_, "notify": NotifyTask_, "await": AwaitTask_,
    "launch": _builder(ast.LaunchTask),
}


class _Limits:
    """The parser's constants, read from `checker.parse` (which imports this module) on first use."""

    def __getattr__(self, name: str):
        from checker import parse

        values = {
            "size_units": parse.SIZE_UNITS, "duration_units": parse.DURATION_UNITS,
            "max_literal": parse.MAX_LITERAL, "max_duration": parse.MAX_DURATION_NS,
            "max_nesting": parse.MAX_NESTING, "max_operators": parse.MAX_OPERATORS_DEEP,
            "priority_high": parse.PRIORITY_HIGH, "priority_low": parse.PRIORITY_LOW,
        }
        for key, value in values.items():
            setattr(self, key, value)
        return values[name]


_LIMITS = _Limits()


def _max_nesting() -> int:
    return _LIMITS.max_nesting


def parse(text: str) -> ast.SpecFile:
    """The syntax tree of `text` (which ends with a newline), exactly as the lark parser
    builds it; raises `Unhandled` where that parser must decide."""
    parser = _Parser(text)
    try:
        return parser.spec()
    except RecursionError:
        raise Unhandled from None
