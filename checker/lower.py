"""Syntax tree to IR: bind names, expand arrays, resolve aliases, unroll loops, validate.

Lowering stops at the first error (a `SpecError` carrying its diagnostic); warnings are
collected and returned beside the program.
"""

from __future__ import annotations

from dataclasses import dataclass

from checker import ast
from checker.codes import Code
from checker.diagnostics import Diagnostic, SpecError, error, warning
from checker.ir import (
    Access, Comm, CopyKind, Device, Engine, Event, Expectation, ExpectKind, Group, GroupKind,
    Memory, Notify, Op, Program, Span, Statement, Stream, StreamMode, SyncKind, Thread,
)
from checker.parse import KEYWORDS, MAX_LITERAL

DEFAULT_MAX_STATEMENTS = 1_000_000
MAX_ARRAY = 100_000
MAX_ENGINE_UNITS = 4096
DEFAULT_ENGINES = ((Engine.COMPUTE, 1), (Engine.COPY, 1), (Engine.COMM, 1))


@dataclass(frozen=True, slots=True)
class _Entity:
    """A declared name: what kind it is, its declaration, and the IR indices it stands for."""

    kind: str  # device, buffer, alias, stream, event, notify, comm, thread
    decl: object
    indices: tuple[int, ...]
    array: bool


@dataclass(frozen=True, slots=True)
class _Region:
    """What an alias or access names: one memory and a byte range, or a whole buffer array."""

    memories: tuple[int, ...]
    start: int
    end: int
    array: bool
    buffer: str


def _kind_phrase(kind: str) -> str:
    return {"alias": "an alias", "event": "an event", "thread": "a thread"}.get(kind, f"a {kind}")


class _Lowerer:
    def __init__(self, spec: ast.SpecFile, path: str, source: str, max_statements: int):
        self.spec = spec
        self.path = path
        self.source = source
        self.max_statements = max_statements
        self.budget = 0
        self.entities: dict[str, _Entity] = {}
        self.devices: list[Device] = []
        self.memories: list[Memory] = []
        self.streams: list[Stream] = []
        self.events: list[Event] = []
        self.notifies: list[Notify] = []
        self.comms: list[Comm] = []
        self.threads: list[Thread] = []
        self.statements: list[Statement] = []
        self.warnings: list[Diagnostic] = []
        self.alias_regions: dict[str, _Region] = {}
        self.resolving: list[str] = []
        self.origin_ids: dict[int, int] = {}
        self.buffer_spans: list[tuple[str, Span]] = []
        self.thread_names: dict[str, Thread] = {}
        self.comm_members: list[frozenset[int]] = []
        self.streams_on: dict[int, int] = {}
        """Streams declared so far per device (the next one's hardware queue position)."""

    # -- declarations ---------------------------------------------------------------------

    def declare(self, name: ast.Name, kind: str, decl, indices=(), array=False) -> None:
        if name.text in KEYWORDS:
            raise SpecError(error(Code.SP022, f"`{name.text}` is a keyword and cannot name {_kind_phrase(kind)}",
                                  name.span, "keyword", help="pick another name"))
        if name.text in self.entities:
            first = self.entities[name.text]
            raise SpecError(error(Code.SP011, f"`{name.text}` is declared twice", name.span,
                                  "declared again here",
                                  secondary=((first.decl.name.span, "first declared here"),)))
        self.entities[name.text] = _Entity(kind, decl, tuple(indices), array)

    def array_count(self, count: ast.Expr | None, what: str) -> int | None:
        if count is None:
            return None
        n = self.evaluate(count, {})
        if not 1 <= n <= MAX_ARRAY:
            raise SpecError(error(Code.SP020, f"{what} array size {n} is out of range", count.span,
                                  "array size", help=f"arrays hold 1 to {MAX_ARRAY} elements"))
        return n

    def lower(self) -> Program:
        decls = self.spec.declarations
        title = None
        for decl in decls:
            if isinstance(decl, ast.SpecTitle):
                if title is not None:
                    raise SpecError(error(Code.SP011, "the spec has two titles", decl.span, "second `spec`"))
                title = decl.title
        for decl in decls:
            if isinstance(decl, ast.DeviceDecl):
                self.device(decl)
        for decl in decls:
            if isinstance(decl, ast.BufferDecl):
                self.buffer(decl)
            elif isinstance(decl, ast.StreamDecl):
                self.stream(decl)
            elif isinstance(decl, ast.EventDecl):
                self.simple(decl, "event")
            elif isinstance(decl, ast.NotifyDecl):
                self.simple(decl, "notify")
            elif isinstance(decl, (ast.AliasDecl, ast.CommDecl)):
                self.declare(decl.name, "alias" if isinstance(decl, ast.AliasDecl) else "comm", decl)
        for decl in decls:
            if isinstance(decl, ast.AliasDecl):
                self.alias_region(decl.name.text, decl.name.span)
            elif isinstance(decl, ast.CommDecl):
                self.comm(decl)
        for decl in decls:
            if isinstance(decl, ast.ThreadDecl):
                self.thread(decl)
        expectations = tuple(self.expectation(d) for d in decls if isinstance(d, ast.ExpectDecl))
        groups = self.groups()
        program = Program(
            self.path, self.source, title, tuple(self.devices), tuple(self.memories),
            tuple(self.streams), tuple(self.events), tuple(self.notifies), tuple(self.comms),
            tuple(self.threads), tuple(self.statements), groups, expectations,
            tuple(self.buffer_spans),
        )
        self.usage_warnings(program)
        return program

    def device(self, decl: ast.DeviceDecl) -> None:
        engines: dict[Engine, int] = {}
        launch, launch_given = 0, False
        queues = None
        for item in decl.items:
            if isinstance(item, ast.EngineItem):
                engine = Engine(item.engine)
                if engine in engines:
                    raise SpecError(error(Code.SP024, f"engine `{item.engine}` is given twice", item.span))
                if not 1 <= item.count <= MAX_ENGINE_UNITS:
                    raise SpecError(error(Code.SP024, f"engine count {item.count} is out of range", item.span,
                                          help=f"an engine has 1 to {MAX_ENGINE_UNITS} units"))
                engines[engine] = item.count
            elif isinstance(item, ast.LaunchItem):
                if launch_given:
                    raise SpecError(error(Code.SP024, "`launch` is given twice", item.span))
                launch, launch_given = item.duration.nanoseconds, True
            else:
                if queues is not None:
                    raise SpecError(error(Code.SP024, "`queues` is given twice", item.span))
                if not 1 <= item.count <= MAX_ENGINE_UNITS:
                    raise SpecError(error(Code.SP024, f"`queues {item.count}` is out of range", item.span,
                                          help=f"a device has 1 to {MAX_ENGINE_UNITS} hardware queues"))
                queues = item.count
        index = len(self.devices)
        declared = tuple(engines.items()) if engines else DEFAULT_ENGINES
        self.declare(decl.name, "device", decl, (index,))
        self.devices.append(Device(index, decl.name.text, declared, launch, queues, decl.span))

    def lookup(self, name: ast.Name, *kinds: str) -> _Entity:
        entity = self.entities.get(name.text)
        if entity is None:
            raise SpecError(error(Code.SP010, f"`{name.text}` is not declared", name.span,
                                  "not declared", help=self.suggest(name.text, kinds)))
        if kinds and entity.kind not in kinds:
            phrases = [_kind_phrase(k) for k in kinds]
            wanted = phrases[0] if len(phrases) == 1 else ", ".join(phrases[:-1]) + " or " + phrases[-1]
            raise SpecError(error(Code.SP012, f"`{name.text}` is {_kind_phrase(entity.kind)}, not {wanted}",
                                  name.span, f"expected {wanted}",
                                  secondary=((entity.decl.name.span, "declared here"),)))
        return entity

    def suggest(self, text: str, kinds: tuple[str, ...]) -> str:
        import difflib

        candidates = [n for n, e in self.entities.items() if not kinds or e.kind in kinds]
        close = difflib.get_close_matches(text, candidates, n=1)
        if close:
            return f"did you mean `{close[0]}`?"
        what = " or ".join(kinds) if kinds else "name"
        return f"declare the {what} at the top level before using it"

    def buffer(self, decl: ast.BufferDecl) -> None:
        count = self.array_count(decl.count, "buffer")
        if decl.size.value <= 0:
            raise SpecError(error(Code.SP020, "a buffer needs a positive size", decl.size.span))
        device = None
        if decl.place is not None:
            device = self.lookup(decl.place, "device").indices[0]
        names = [decl.name.text] if count is None else [f"{decl.name.text}[{i}]" for i in range(count)]
        first = len(self.memories)
        for offset, name in enumerate(names):
            self.memories.append(Memory(first + offset, name, decl.name.text, decl.size.value, device,
                                        decl.pinned, decl.span))
        self.declare(decl.name, "buffer", decl, range(first, first + len(names)), count is not None)
        self.buffer_spans.append((decl.name.text, decl.span))

    def stream(self, decl: ast.StreamDecl) -> None:
        count = self.array_count(decl.count, "stream")
        device = self.lookup(decl.device, "device").indices[0]
        mode = StreamMode(decl.mode)
        if mode is StreamMode.LEGACY and (count or 1) > 1:
            raise SpecError(error(Code.SP011, "a device has one legacy default stream", decl.span,
                                  help="declare a single `legacy` stream per device"))
        if mode is StreamMode.LEGACY:
            for other in self.streams:
                if other.device == device and other.mode is StreamMode.LEGACY:
                    raise SpecError(error(Code.SP011, f"device `{self.devices[device].name}` already has a legacy stream",
                                          decl.span, secondary=((other.span, "the legacy stream"),)))
        names = [decl.name.text] if count is None else [f"{decl.name.text}[{i}]" for i in range(count)]
        queues = self.devices[device].queues
        first = len(self.streams)
        for offset, name in enumerate(names):
            position = self.streams_on.get(device, 0)
            self.streams_on[device] = position + 1
            self.streams.append(Stream(
                first + offset, name, device, decl.priority[0] if decl.priority else 0, mode,
                position % queues if queues else None, decl.span,
            ))
        self.declare(decl.name, "stream", decl, range(first, first + len(names)), count is not None)

    def simple(self, decl, kind: str) -> None:
        count = self.array_count(decl.count, kind)
        names = [decl.name.text] if count is None else [f"{decl.name.text}[{i}]" for i in range(count)]
        table = self.events if kind == "event" else self.notifies
        first = len(table)
        for offset, name in enumerate(names):
            if kind == "event":
                table.append(Event(first + offset, name, decl.flag, decl.span))
            else:
                table.append(Notify(first + offset, name, decl.span))
        self.declare(decl.name, kind, decl, range(first, first + len(names)), count is not None)

    def comm(self, decl: ast.CommDecl) -> None:
        members: list[int] = []
        seen: set[int] = set()
        for ref in decl.members:
            entity = self.entities.get(ref.name.text)
            if entity is not None and entity.kind != "stream":
                raise SpecError(error(Code.SP021, f"comm member `{ref.name.text}` is {_kind_phrase(entity.kind)}, not a stream",
                                      ref.span, "not a stream", help="a comm lists one stream per rank"))
            stream = self.resolve(ref, {}, "stream")
            if stream in seen:
                raise SpecError(error(Code.SP011, f"stream `{self.streams[stream].name}` is in comm `{decl.name.text}` twice",
                                      ref.span))
            members.append(stream)
            seen.add(stream)
        index = len(self.comms)
        self.entities[decl.name.text] = _Entity("comm", decl, (index,), False)
        self.comms.append(Comm(index, decl.name.text, tuple(members), decl.span))
        self.comm_members.append(frozenset(members))

    # -- expressions and references --------------------------------------------------------

    def evaluate(self, expr: ast.Expr, env: dict[str, int]) -> int:
        if isinstance(expr, ast.Number):
            return expr.value
        if isinstance(expr, ast.Variable):
            if expr.name in env:
                return env[expr.name]
            entity = self.entities.get(expr.name)
            if entity is not None:
                raise SpecError(error(Code.SP012, f"`{expr.name}` is {_kind_phrase(entity.kind)}, not an integer variable",
                                      expr.span, "not a variable"))
            raise SpecError(error(Code.SP010, f"variable `{expr.name}` is not defined", expr.span,
                                  "not defined", help="variables come from `for` and `let`"))
        if isinstance(expr, ast.Negate):
            value = -self.evaluate(expr.operand, env)
        else:
            left = self.evaluate(expr.left, env)
            right = self.evaluate(expr.right, env)
            if expr.operator in "/%" and right == 0:
                raise SpecError(error(Code.SP019, "division by zero", expr.right.span, "this is 0"))
            operator = expr.operator
            if operator == "+":
                value = left + right
            elif operator == "-":
                value = left - right
            elif operator == "*":
                value = left * right
            elif operator == "/":
                value = left // right
            else:
                value = left % right
        if abs(value) > MAX_LITERAL:
            raise SpecError(error(Code.SP020, "integer overflow", expr.span, "value too large",
                                  help="values must stay below 2^62"))
        return value

    def resolve(self, ref: ast.Ref, env: dict[str, int], *kinds: str) -> int:
        """A reference to one element of a declared stream/event/notify/comm/device."""
        entity = self.lookup(ref.name, *kinds)
        if entity.array:
            if ref.index is None:
                raise SpecError(error(Code.SP015, f"`{ref.name.text}` is an array of {len(entity.indices)}; pick one element",
                                      ref.span, "needs an index", help=f"write `{ref.name.text}[i]`"))
            i = self.evaluate(ref.index, env)
            if not 0 <= i < len(entity.indices):
                raise SpecError(error(Code.SP013, f"index {i} is out of range for `{ref.name.text}[{len(entity.indices)}]`",
                                      ref.index.span, f"valid indices are 0..{len(entity.indices) - 1}"))
            return entity.indices[i]
        if ref.index is not None:
            raise SpecError(error(Code.SP015, f"`{ref.name.text}` is not an array", ref.index.span,
                                  "cannot index this"))
        return entity.indices[0]

    def alias_region(self, name: str, span: Span) -> _Region:
        if name in self.alias_regions:
            return self.alias_regions[name]
        if name in self.resolving:
            raise SpecError(error(Code.SP023, f"alias `{name}` refers to itself", span,
                                  help=" -> ".join(self.resolving + [name])))
        self.resolving.append(name)
        decl = self.entities[name].decl
        region = self.region(decl.target, {})
        self.resolving.pop()
        self.alias_regions[name] = region
        return region

    def region(self, access: ast.AccessRef, env: dict[str, int]) -> _Region:
        entity = self.lookup(access.name, "buffer", "alias")
        if entity.kind == "alias":
            region = self.alias_region(access.name.text, access.name.span)
        else:
            first = self.memories[entity.indices[0]]
            region = _Region(entity.indices, 0, first.size, entity.array, first.buffer)
        for subscript in access.subscripts:
            if isinstance(subscript, ast.Index):
                if not region.array:
                    raise SpecError(error(Code.SP015, f"`{access.name.text}` is not an array of buffers",
                                          subscript.span, "cannot index this",
                                          help="byte ranges are written [lo:hi]"))
                i = self.evaluate(subscript.expr, env)
                if not 0 <= i < len(region.memories):
                    raise SpecError(error(Code.SP013, f"index {i} is out of range for `{access.name.text}[{len(region.memories)}]`",
                                          subscript.expr.span, f"valid indices are 0..{len(region.memories) - 1}"))
                region = _Region((region.memories[i],), region.start, region.end, False, region.buffer)
            else:
                if region.array:
                    raise SpecError(error(Code.SP015, f"`{access.name.text}` is an array of buffers; index it before slicing",
                                          subscript.span, help=f"write `{access.name.text}[i][lo:hi]`"))
                length = region.end - region.start
                low = 0 if subscript.low is None else self.evaluate(subscript.low, env)
                high = length if subscript.high is None else self.evaluate(subscript.high, env)
                if low >= high and 0 <= low and high <= length:
                    raise SpecError(error(Code.SP014, f"byte range [{low}:{high}] of `{access.name.text}` is empty",
                                          subscript.span, "empty range",
                                          help="a range [lo:hi] needs 0 <= lo < hi <= size"))
                if not 0 <= low < high <= length:
                    raise SpecError(error(Code.SP014, f"byte range [{low}:{high}] is outside `{access.name.text}` ({length} bytes)",
                                          subscript.span, "out of range",
                                          help="a range [lo:hi] needs 0 <= lo < hi <= size"))
                region = _Region(region.memories, region.start + low, region.start + high, False, region.buffer)
        if region.array:
            raise SpecError(error(Code.SP015, f"`{access.name.text}` is an array of {len(region.memories)} buffers; pick one",
                                  access.span, "needs an index", help=f"write `{access.name.text}[i]`"))
        return region

    def access(self, access: ast.AccessRef, env: dict[str, int], write: bool) -> Access:
        region = self.region(access, env)
        text = self.source[access.span.start:access.span.end]
        return Access(region.memories[0], region.start, region.end, write, access.span, text)

    # -- threads and statements ------------------------------------------------------------

    def thread(self, decl: ast.ThreadDecl) -> None:
        # Threads are never referenced, so their names live apart from everything else
        # (`thread main` beside `stream main` is fine).
        other = self.thread_names.get(decl.name.text)
        if other is not None:
            raise SpecError(error(Code.SP011, f"thread `{decl.name.text}` is declared twice", decl.name.span,
                                  "declared again here", secondary=((other.span, "first declared here"),)))
        if decl.name.text in KEYWORDS:
            raise SpecError(error(Code.SP022, f"`{decl.name.text}` is a keyword and cannot name a thread",
                                  decl.name.span, "keyword"))
        index = len(self.threads)
        self.current_thread = index
        self.thread_statements: list[int] = []
        self.block(decl.body, {}, ())
        self.threads.append(Thread(index, decl.name.text, tuple(self.thread_statements), decl.span))
        self.thread_names[decl.name.text] = self.threads[-1]

    def spend(self, span: Span, what: str) -> None:
        self.budget += 1
        if self.budget > self.max_statements:
            raise SpecError(error(Code.SP018, f"this {what} unrolls past the limit of {self.max_statements:,} lowered statements",
                                  span, "unrolls too far",
                                  help="shrink the loop, or raise the limit with --max-statements N"))

    def block(self, body, env: dict[str, int], loops: tuple[ast.For, ...]) -> None:
        env = dict(env)
        for statement in body:
            if isinstance(statement, ast.Let):
                env[statement.variable.text] = self.evaluate(statement.value, env)
            elif isinstance(statement, ast.For):
                low = self.evaluate(statement.low, env)
                high = self.evaluate(statement.high, env)
                trips = max(0, high - low)
                if trips > self.max_statements:
                    raise SpecError(error(Code.SP018, f"this loop runs {trips:,} times, past the limit of {self.max_statements:,} lowered statements",
                                          statement.span, "unrolls too far",
                                          help="shrink the loop, or raise the limit with --max-statements N"))
                for value in range(low, high):
                    self.spend(loops[0].span if loops else statement.span, "loop")
                    inner = dict(env)
                    inner[statement.variable.text] = value
                    self.block(statement.body, inner, loops + (statement,))
            else:
                self.spend(loops[0].span if loops else statement.span, "loop" if loops else "thread")
                self.statement(statement, env)

    def origin(self, statement) -> int:
        return self.origin_ids.setdefault(id(statement), len(self.origin_ids))

    def emit(self, statement, **fields) -> None:
        index = len(self.statements)
        self.statements.append(Statement(index=index, thread=self.current_thread, span=statement.span,
                                         origin=self.origin(statement), **fields))
        self.thread_statements.append(index)

    def statement(self, node, env: dict[str, int]) -> None:
        self.LOWER[type(node)](self, node, env, tuple(sorted(env.items())))

    # -- host statements

    def host_call(self, node: ast.HostCall, env, bindings) -> None:
        accesses = tuple(self.access(a, env, False) for a in node.reads)
        accesses += tuple(self.access(a, env, True) for a in node.writes)
        self.emit(node, op=Op.HOST, stream=None, name=node.name.text, accesses=accesses,
                  duration=node.duration.nanoseconds if node.duration else 0, bindings=bindings)

    def sync(self, node: ast.Sync, env, bindings) -> None:
        if node.target is None:
            self.emit(node, op=Op.SYNC, stream=None, sync=SyncKind.ALL, bindings=bindings)
            return
        entity = self.lookup(node.target.name, "stream", "event", "device")
        target = self.resolve(node.target, env, entity.kind)
        kind = {"stream": SyncKind.STREAM, "event": SyncKind.EVENT, "device": SyncKind.DEVICE}[entity.kind]
        self.emit(node, op=Op.SYNC, stream=None, sync=kind, target=target, bindings=bindings)

    def host_notify(self, node: ast.HostNotify | ast.HostAwait, env, bindings) -> None:
        op = Op.NOTIFY if isinstance(node, ast.HostNotify) else Op.AWAIT
        self.emit(node, op=op, stream=None, notify=self.resolve(node.notify, env, "notify"), bindings=bindings)

    def host_lifetime(self, node: ast.HostAlloc | ast.HostFree, env, bindings) -> None:
        access, memory = self.lifetime(node.access, env)
        free = isinstance(node, ast.HostFree)
        self.emit(node, op=Op.FREE if free else Op.ALLOC, stream=None, memory=memory,
                  accesses=(access,) if free else (), bindings=bindings)

    def lifetime(self, access_ref: ast.AccessRef, env: dict[str, int]) -> tuple[Access, int]:
        access = self.access(access_ref, env, True)
        memory = self.memories[access.memory]
        if access.start != 0 or access.end != memory.size:
            raise SpecError(error(Code.SP015, "`alloc` and `free` take a whole buffer", access_ref.span,
                                  f"{access.end - access.start} of {memory.size} bytes",
                                  help=f"name the buffer itself: `{memory.name}`"))
        return access, access.memory

    # -- stream statements

    def on_stream(self, node, env, bindings) -> tuple[int, dict]:
        """The stream index of a `STREAM:` statement and the fields every task has."""
        stream_index = self.resolve(node.stream, env, "stream")
        return stream_index, dict(stream=stream_index, device=self.streams[stream_index].device, bindings=bindings)

    def kernel(self, node: ast.KernelTask | ast.CallbackTask, env, bindings) -> None:
        _, common = self.on_stream(node, env, bindings)
        accesses = tuple(self.access(a, env, False) for a in node.reads)
        accesses += tuple(self.access(a, env, True) for a in node.writes)
        kernel = isinstance(node, ast.KernelTask)
        self.emit(node, op=Op.KERNEL if kernel else Op.CALLBACK, name=node.name.text, accesses=accesses,
                  duration=node.duration.nanoseconds if node.duration else 0,
                  engine=Engine.COMPUTE if kernel else Engine.CALLBACK, **common)

    def copy(self, node: ast.CopyTask, env, bindings) -> None:
        stream_index, common = self.on_stream(node, env, bindings)
        device = self.devices[self.streams[stream_index].device]
        destination = self.access(node.destination, env, True)
        source = self.access(node.source, env, False)
        dst_memory = self.memories[destination.memory]
        src_memory = self.memories[source.memory]
        if dst_memory.on_host and src_memory.on_host:
            raise SpecError(error(Code.SP016, "a copy between two host buffers is not a stream operation",
                                  node.span, "both sides are host memory",
                                  help="use a `host` statement for host-to-host copies"))
        kind = CopyKind.H2D if src_memory.on_host else CopyKind.D2H if dst_memory.on_host else CopyKind.D2D
        engine = Engine(kind.value) if device.declares(Engine(kind.value)) else Engine.COPY
        pageable = (src_memory.on_host and not src_memory.pinned) or (dst_memory.on_host and not dst_memory.pinned)
        self.emit(node, op=Op.COPY, accesses=(source, destination),
                  duration=node.duration.nanoseconds if node.duration else 0, engine=engine,
                  copy=kind, blocking=pageable, **common)

    def event_task(self, node: ast.RecordTask | ast.WaitTask | ast.ResetTask, env, bindings) -> None:
        _, common = self.on_stream(node, env, bindings)
        event = self.resolve(node.event, env, "event")
        if isinstance(node, ast.ResetTask) and not self.events[event].flag:
            raise SpecError(error(Code.SP017, f"`reset` needs a flag event; `{self.events[event].name}` is a snapshot event",
                                  node.span, "not a flag event",
                                  secondary=((self.events[event].span, "declared without `flag`"),),
                                  help=f"declare it `event {node.event.name.text} flag`"))
        op = Op.RECORD if isinstance(node, ast.RecordTask) else Op.WAIT if isinstance(node, ast.WaitTask) else Op.RESET
        self.emit(node, op=op, event=event, **common)

    def notify_task(self, node: ast.NotifyTask | ast.AwaitTask, env, bindings) -> None:
        _, common = self.on_stream(node, env, bindings)
        notify = self.resolve(node.notify, env, "notify")
        self.emit(node, op=Op.NOTIFY if isinstance(node, ast.NotifyTask) else Op.AWAIT, notify=notify, **common)

    def member(self, comm_index: int, ref: ast.Ref, stream: int) -> None:
        """SP021 unless `stream` (written as `ref`) is a member of the comm."""
        if stream not in self.comm_members[comm_index]:
            comm = self.comms[comm_index]
            raise SpecError(error(Code.SP021, f"stream `{self.streams[stream].name}` is not a member of comm `{comm.name}`",
                                  ref.span, "not in the comm", secondary=((comm.span, "comm declared here"),)))

    def collective(self, node: ast.CollectiveTask, env, bindings) -> None:
        stream_index, common = self.on_stream(node, env, bindings)
        comm_index = self.resolve(node.comm, env, "comm")
        self.member(comm_index, node.stream, stream_index)
        accesses = (self.access(node.access, env, False), self.access(node.access, env, True))
        self.emit(node, op=Op(node.kind), comm=comm_index, accesses=accesses,
                  duration=node.duration.nanoseconds if node.duration else 0, engine=Engine.COMM, **common)

    def point_to_point(self, node: ast.SendTask | ast.RecvTask, env, bindings) -> None:
        stream_index, common = self.on_stream(node, env, bindings)
        comm_index = self.resolve(node.comm, env, "comm")
        self.member(comm_index, node.stream, stream_index)
        peer = self.resolve(node.peer, env, "stream")
        self.member(comm_index, node.peer, peer)
        send = isinstance(node, ast.SendTask)
        if peer == stream_index:
            raise SpecError(error(Code.SP021, f"`{'send' if send else 'recv'}` names its own stream as the peer",
                                  node.peer.span))
        self.emit(node, op=Op.SEND if send else Op.RECV, comm=comm_index, peer=peer,
                  accesses=(self.access(node.access, env, not send),),
                  duration=node.duration.nanoseconds if node.duration else 0, engine=Engine.COMM, **common)

    def stream_lifetime(self, node: ast.AllocTask | ast.FreeTask, env, bindings) -> None:
        _, common = self.on_stream(node, env, bindings)
        access, memory = self.lifetime(node.access, env)
        free = isinstance(node, ast.FreeTask)
        self.emit(node, op=Op.FREE if free else Op.ALLOC, memory=memory, accesses=(access,) if free else (),
                  **common)

    LOWER = {
        ast.HostCall: host_call,
        ast.Sync: sync,
        ast.HostNotify: host_notify,
        ast.HostAwait: host_notify,
        ast.HostAlloc: host_lifetime,
        ast.HostFree: host_lifetime,
        ast.KernelTask: kernel,
        ast.CallbackTask: kernel,
        ast.CopyTask: copy,
        ast.RecordTask: event_task,
        ast.WaitTask: event_task,
        ast.ResetTask: event_task,
        ast.NotifyTask: notify_task,
        ast.AwaitTask: notify_task,
        ast.CollectiveTask: collective,
        ast.SendTask: point_to_point,
        ast.RecvTask: point_to_point,
        ast.AllocTask: stream_lifetime,
        ast.FreeTask: stream_lifetime,
    }
    """How each kind of statement node is lowered."""

    # -- program-wide ----------------------------------------------------------------------

    def expectation(self, decl: ast.ExpectDecl) -> Expectation:
        kind = ExpectKind(decl.kind)
        buffer = None
        if decl.buffer is not None:
            entity = self.lookup(decl.buffer, "buffer", "alias")
            buffer = (self.alias_regions[decl.buffer.text].buffer if entity.kind == "alias"
                      else decl.buffer.text)
        limit = decl.limit.nanoseconds if decl.limit else None
        return Expectation(kind, decl.span, buffer, limit)

    def groups(self) -> tuple[Group, ...]:
        """Match collectives by position: the k-th allreduce of each member stream of a comm,
        and the k-th send A->B with the k-th recv on B from A."""
        groups: list[Group] = []
        statements = self.statements
        allreduces: dict[tuple[int, int], list[int]] = {}
        pairs: dict[tuple[int, int, int], tuple[list[int], list[int]]] = {}  # (comm, from, to)
        for s in statements:
            if s.comm is None:
                continue
            if s.op is Op.ALLREDUCE:
                allreduces.setdefault((s.comm, s.stream), []).append(s.index)
            elif s.op is Op.SEND:
                pairs.setdefault((s.comm, s.stream, s.peer), ([], []))[0].append(s.index)
            elif s.op is Op.RECV:
                pairs.setdefault((s.comm, s.peer, s.stream), ([], []))[1].append(s.index)
        for comm in self.comms:
            per_stream = [allreduces.get((comm.index, m), []) for m in comm.members]
            rounds = max((len(v) for v in per_stream), default=0)
            for k in range(rounds):
                members = tuple(v[k] for v in per_stream if k < len(v))
                groups.append(Group(len(groups), GroupKind.COLLECTIVE, comm.index, k, members,
                                    len(members) == len(comm.members)))
            rank = {m: i for i, m in enumerate(comm.members)}
            for key in sorted((key for key in pairs if key[0] == comm.index), key=lambda k: (rank[k[1]], rank[k[2]])):
                sends, recvs = pairs[key]
                for k in range(max(len(sends), len(recvs))):
                    members = tuple(x[k] for x in (sends, recvs) if k < len(x))
                    groups.append(Group(len(groups), GroupKind.SENDRECV, comm.index, k, members, len(members) == 2))
        if not groups:
            return ()
        member_of = {m: g.index for g in groups for m in g.members}
        self.statements[:] = [
            _replace_group(s, member_of[s.index]) if s.index in member_of else s for s in statements
        ]
        return tuple(groups)

    def usage_warnings(self, program: Program) -> None:
        used_streams = {s.stream for s in program.statements if s.stream is not None}
        used_streams |= {s.target for s in program.statements if s.sync is SyncKind.STREAM}
        used_declarations = {program.streams[i].span for i in used_streams if i is not None}
        for stream in program.streams:
            if stream.index not in used_streams and program.threads:
                if stream.name.endswith("]") and stream.span in used_declarations:
                    continue
                name = stream.name.split("[")[0] if stream.name.endswith("]") else stream.name
                what = "stream array" if name != stream.name else "stream"
                self.warnings.append(warning(Code.SP051, f"{what} `{name}` is never used", stream.span,
                                             "declared here"))
        recorded = {s.event for s in program.statements if s.op is Op.RECORD}
        for s in program.statements:
            if s.op is Op.WAIT and s.event not in recorded:
                self.warnings.append(warning(
                    Code.SP050, f"event `{program.events[s.event].name}` is waited on but never recorded", s.span,
                    "this wait" + (" blocks forever" if program.events[s.event].flag else " does nothing"),
                ))
        notified = {s.notify for s in program.statements if s.op is Op.NOTIFY}
        for s in program.statements:
            if s.op is Op.AWAIT and s.notify not in notified:
                self.warnings.append(warning(
                    Code.SP052, f"notify `{program.notifies[s.notify].name}` is awaited but never notified",
                    s.span, "this await blocks forever"))


def _replace_group(statement: Statement, group: int) -> Statement:
    from dataclasses import replace

    return replace(statement, group=group)


@dataclass(frozen=True, slots=True)
class Lowered:
    program: Program
    warnings: tuple[Diagnostic, ...]


def lower(spec: ast.SpecFile, path: str, source: str,
          max_statements: int = DEFAULT_MAX_STATEMENTS) -> Lowered:
    """Lower a syntax tree to a `Program`; raises `SpecError` on the first error."""
    lowerer = _Lowerer(spec, path, source, max_statements)
    program = lowerer.lower()
    seen = set()
    warnings = []
    for w in lowerer.warnings:  # one warning per source line and code, not per loop instance
        key = (w.code, w.primary_span)
        if key not in seen:
            seen.add(key)
            warnings.append(w)
    return Lowered(program, tuple(warnings))
