"""Syntax tree to IR: bind names, expand arrays, resolve aliases, unroll loops, validate.

Besides what is written, lowering spells out what some statements do implicitly: a `memcpy`
is a blocking copy on the device's default stream, `wait_stream` a record and a wait,
`query` a sync, a CUDA `free` a device sync first (see `docs/language.md`). A caching-allocator
tensor is placed in a block by simulating the allocator. A spec with `choose` (or, under
`runtime cuda`, with copies from pageable memory or a host `alloc`, calls the driver may or
may not synchronize) lowers to one program per combination of branches, and two per
combination for the driver (`Lowered.variants`).

Lowering goes on after an error: a declaration in error is skipped (and its name quietly
stands for nothing, so that its uses are not reported again), a statement in error is
skipped in every loop iteration; at the end every error found (at most `MAX_ERRORS`) is
raised together as `SpecErrors`. Warnings are collected and returned beside the programs.
"""

from __future__ import annotations

import operator
from collections import Counter, defaultdict
from contextlib import contextmanager
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field, fields, is_dataclass, replace
from fractions import Fraction
from itertools import islice

from checker import ast
from checker.collectives import program_order_groups
from checker.allocator import Slot, Tensor, TensorEvent, place, placeholder, pool_of, slot_of
from checker.codes import Code
from checker.diagnostics import Diagnostic, SpecError, error, warning
from checker.ir import (
    OPERATIONS, Access, Comm, CopyKind, Device, Engine, Event, Expectation, ExpectKind, Group,
    Memory, Notify, Op, Program, Runtime, Span, Statement, Stream, StreamMode, SyncKind,
    Thread,
)
from checker.lints import program_warnings
from checker.parse import KEYWORDS, MAX_ERRORS, MAX_LITERAL, SpecErrors, close_words, did_you_mean

DEFAULT_MAX_STATEMENTS = 250_000
"""The default unrolling limit (`--max-statements`): a loop of a million kernels took 30 s and
3.3 GB to check, one of a million racing ones 97 s and 3.9 GB."""
ITERATIONS_PER_STATEMENT = 4
"""Loop iterations and other steps that lower nothing (`let`, `for`, `if`, `group`, `choose`)
allowed per statement of the limit: nested loops run more iterations than they lower statements
(an outer trip and an inner one per statement), and a spec within the statement limit must not
be refused for that. The other steps count too: a million iterations of a hundred `let`s (or of
empty `group`s, of `if`s never taken, of loops of no trips) lowered nothing and ran for minutes."""
EXPRESSION_STEPS_PER_STATEMENT = 32
"""Operators, numbers and variables evaluated, per statement of the limit, in all: a loop of
190,000 iterations of twenty `let`s of 126 operators each lowered nothing and ran for minutes."""
MAX_SEGMENT_BYTES = 1 << 30
"""The bytes of the per-statement masks over memory segments (the pieces every byte range
cuts a buffer into, every buffer at least one) a program may need, about a third of what the
executor then holds: overlapping ranges that all differ cut a buffer into as many pieces as
they have ends, and each statement's mask reaches its own highest piece (SP018; 100,000 such
statements took 2.8 GB, 250,000 over 14 GB; an array of 100,000 buffers, one statement each,
needs 0.6 GB here and passes)."""
MAX_ARRAY = 100_000
MAX_COMM_MEMBERS = 1_000_000
"""Members of every comm together: a comm array over a stream array has the square of their
length (10,000 x 10,000 ran out of memory before checking anything)."""
MAX_DECLARED = 1_000_000
"""Elements of every declared array together (110 event arrays of 100,000 took 2.4 GB)."""
MAX_ENGINE_UNITS = 4096
MAX_VARIANTS = 64
"""Most programs one spec may lower to (branch combinations times runtime alternatives)."""
MAX_RELEASES = 4
"""Most blocks recorded on other streams whose return to the pool (once that work is done)
one thread of a program gets variants for (`_Lowerer.release_candidates`)."""
MAX_RETURNS = 3
"""Of the allocations at which such a block may come back, how many get a program each (the
block comes back at the first at which the recorded work is done: any of them, by timing)."""
MAX_TOGETHER = 2
"""Allocations per thread at which held blocks coming back all together get a program (a
loop's are alike: the first ones stand for the rest, which SP065 names)."""
NEARBY = 64
"""Held blocks freed last before an allocation that `release_candidates` looks at (a loop's
blocks, each against every earlier one, would be quadratic); past them no block comes back alone."""
DEFAULT_ENGINES = ((Engine.COMPUTE, 1), (Engine.COPY, 1), (Engine.COMM, 1))

CUDA_STAGED = "cuda pageable copies return once staged"
CUDA_SYNCED = "cuda pageable copies synchronize the stream first"
CUDA_MALLOC_FREE = "cudaMalloc does not synchronize"
CUDA_MALLOC_SYNCED = "cudaMalloc synchronizes the device"
CUDA_HOST_ALLOC_FREE = "cudaMallocHost does not synchronize"
CUDA_HOST_ALLOC_SYNCED = "cudaMallocHost synchronizes every device"
CUDA_FREE_ASYNC = "cudaFree finds cudaMallocAsync memory"
CUDA_FREE_SYNCED = "cudaFree finds cudaMalloc memory"
PAGEABLE, MALLOC, HOST_ALLOC, FREE = "pageable", "malloc", "host alloc", "free"
"""What made a spec lower to two programs under `runtime cuda` (`_Lowerer.driver_choices`):
calls the driver may or may not synchronize (a copy from pageable memory, `cudaMalloc`,
`cudaMallocHost`, and a `cudaFree` of memory that other threads allocate both ways, whose
live allocation depends on the interleaving)."""


def cuda_variant(choices: frozenset[str], synced: bool) -> str:
    """The label of the program in which the CUDA driver synchronizes at every call that may
    (`synced`), or at none, for the calls of `choices`."""
    labels = {PAGEABLE: (CUDA_STAGED, CUDA_SYNCED), MALLOC: (CUDA_MALLOC_FREE, CUDA_MALLOC_SYNCED),
              HOST_ALLOC: (CUDA_HOST_ALLOC_FREE, CUDA_HOST_ALLOC_SYNCED), FREE: (CUDA_FREE_ASYNC, CUDA_FREE_SYNCED)}
    return ", ".join(labels[choice][synced] for choice in labels if choice in choices)

DECLARATION_FORMS = {
    "event": "event NAME", "notify": "notify NAME", "stream": "stream NAME on DEVICE",
    "buffer": "buffer NAME SIZE on DEVICE", "tensor": "tensor NAME SIZE on DEVICE", "device": "device NAME",
    "comm": "comm NAME = { STREAM, ... }",
}
"""What to write to declare a name of each kind, for the help of SP010."""


def _wrong_kind_help(name: str, kind: str, wanted: tuple[str, ...]) -> str:
    """The statement a name of this kind goes with, where a statement took one of another kind."""
    if kind == "event" and "notify" in wanted:
        return (f"a thread waits for an event with `sync {name}`, a stream with `STREAM: wait {name}`; "
                "`await` and `notify` take a notify (`notify N`)")
    if kind == "notify" and "event" in wanted:
        return f"`await {name}` waits for a notify (on the thread, or `STREAM: await {name}`); `wait` takes an event; `sync` an event, a stream or a device"
    if kind in ("buffer", "tensor") and "stream" in wanted:
        return "name the stream whose work uses the memory (`sync S`, `STREAM: ...`)"
    return ""


def _statement_kind_help(statement: str, name: str, kind: str) -> str:
    """The statement that takes a name of this kind, where `statement` (`record`, `wait`,
    `reset`, `notify`, `await`, `wait_stream` on a stream) was given one of another kind:
    the general `_wrong_kind_help` would point a `record` of a notify at `await`."""
    if kind == "notify":
        return {"record": f"`STREAM: notify {name}` signals a notify; `record` takes an event",
                "wait": f"`STREAM: await {name}` waits for a notify; `wait` takes an event",
                "reset": "`reset` takes a flag event (`event NAME flag`); a notify is consumed by its `await`",
                }.get(statement, "")
    if kind == "event":
        return {"notify": f"`STREAM: record {name}` records an event; `notify` takes a notify",
                "await": f"`STREAM: wait {name}` waits for an event; `await` takes a notify",
                "wait_stream": f"`STREAM: wait {name}` waits for an event; `wait_stream` takes a stream",
                }.get(statement, "")
    if kind == "stream" and statement == "wait":
        return (f"`STREAM: wait_stream {name}` waits for the work enqueued on `{name}` so far "
                "(a record on it and a wait); `wait` takes an event")
    return ""


IN_PLACE_KINDS = ("allreduce", "allgather", "reducescatter", "alltoall")
ROOTED_KINDS = ("broadcast", "reduce")


def _first_per_thread(items, thread_of, limit: int) -> list:
    """The first `limit` of `items` of each thread (`thread_of(item)`), in their order."""
    counts: dict[int, int] = {}
    kept = []
    for item in items:
        thread = thread_of(item)
        if counts.get(thread, 0) < limit:
            counts[thread] = counts.get(thread, 0) + 1
            kept.append(item)
    return kept


def _index_hint(env: dict[str, int]) -> str:
    """An index to suggest for an array named without one: the variable bound last in scope
    (the loop's, or the thread array's `rank`), which a help pasted there evaluates; `0` where
    none is."""
    return next(reversed(env), "0") if env else "0"


@dataclass(slots=True)
class _Capture:
    """The graph being lowered at one launch (`_Lowerer.launch`): which declared streams of
    its body have joined the capture, and what each one's work is known to come after (a
    vector clock per stream, counted in body statements), so that an unjoined capture or a
    wait on outside work is reported where CUDA's and CANN's capture would fail."""

    name: str
    """The graph, as written at the launch (`g`, `g[1]`)."""
    key: tuple
    """The exec the launch runs: (graph element, process thread or None)."""
    span: Span
    """The graph's declaration."""
    start: int
    """The launch's event recorded on the launch stream before the graph."""
    device: int
    """The launch stream's device, which every stream of the body must be on."""
    node: object
    """The launch statement."""
    bindings: tuple
    """The launch's variables."""
    begins: int
    """The launch's first statement (its record on the launch stream)."""
    origin: int | None = None
    """The declared stream the capture began on: its first statement's."""
    clocks: dict = field(default_factory=dict)
    """Declared stream -> {declared stream: body statements of it known to come before}."""
    last: dict = field(default_factory=dict)
    """Declared stream -> the span of its latest statement in the body."""
    recorded: dict = field(default_factory=dict)
    """Event -> the clock its latest record in the body captured."""
    recorded_external: set = field(default_factory=set)
    """Events the body records as external record nodes only (`record E external`)."""


@dataclass(frozen=True, slots=True)
class _Entity:
    """A declared name: what kind it is, its declaration, and the IR indices it stands for
    (tensors: indices into `_Lowerer.tensors`)."""

    kind: str  # device, buffer, alias, stream, event, notify, comm, tensor, graph
    decl: object
    indices: tuple[int, ...]
    array: bool
    broken: bool = False
    """Its declaration was in error: a use of it is skipped without a second report."""


@dataclass(frozen=True, slots=True)
class _Region:
    """What an alias or access names: one memory and a byte range, or a whole buffer array.
    For a tensor, `memories` are tensor element indices."""

    memories: tuple[int, ...]
    start: int
    end: int
    array: bool
    buffer: str
    tensor: bool = False


class _SizeUnknown(Exception):
    """`_Lowerer.check_size` cannot tell the size without lowering."""


class _Skip(Exception):
    """A statement or declaration that depends on one already reported as an error: skipped
    without a report of its own."""


_BROKEN = object()
"""The value of a `let` variable whose expression was in error."""

_FATAL = frozenset({Code.SP018, Code.SP026})
_EVENT_OPS = {ast.RecordTask: Op.RECORD, ast.WaitTask: Op.WAIT, ast.ResetTask: Op.RESET}
_BLOCKS = frozenset({ast.Let, ast.For, ast.Group, ast.Choose, ast.If})
"""Statements that bind a variable or hold other statements (lowered by `_Lowerer.one`)."""
_CAPTURABLE = (ast.KernelTask, ast.CallbackTask, ast.CopyTask, ast.MemsetTask, ast.RecordTask, ast.WaitTask,
               ast.WaitStreamTask, ast.CollectiveTask, ast.SendTask, ast.RecvTask, ast.AllocTask, ast.FreeTask)
"""What a graph's body may hold besides `for`, `let`, `if` and `group` (`_Lowerer.capture_step`)."""
_UNCAPTURABLE = {
    ast.Sync: "a host `sync` cannot be captured into a graph: synchronizing a capturing stream ends the capture "
              "with an error",
    ast.Query: "a `query` cannot be captured into a graph: querying a capturing stream ends the capture with an error",
    ast.HostCall: "a `host` statement cannot be captured into a graph: the host runs it once, during the capture "
                  "(a `callback` runs at every launch)",
    ast.Memcpy: "a synchronous `memcpy` cannot be captured into a graph",
    ast.HostMemset: "a synchronous `memset` cannot be captured into a graph",
    ast.LaunchTask: "a graph launch inside a graph is not modelled",
    **{kind: f"{what} cannot be captured into a graph" for kind, what in (
        (ast.HostNotify, "a host `notify`"), (ast.HostAwait, "a host `await`"), (ast.HostAlloc, "a host `alloc`"),
        (ast.HostFree, "a host `free`"), (ast.NotifyTask, "a stream `notify`"), (ast.AwaitTask, "a stream `await`"),
        (ast.ResetTask, "a `reset`"), (ast.RecordStreamTask, "a `record_stream`"), (ast.ItemTask, "an `item`"))},
}
"""Why each statement that a graph's body may not hold cannot be captured."""


def _variables(node):
    """The variables an expression or condition reads."""
    if isinstance(node, ast.Variable):
        yield node
    elif isinstance(node, (ast.BinaryOp, ast.Compare, ast.Logical)):
        yield from _variables(node.left)
        yield from _variables(node.right)
    elif isinstance(node, ast.Negate):
        yield from _variables(node.operand)


_COMPARE = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
            ">": operator.gt, ">=": operator.ge}
def _default_ref(statement) -> ast.Ref | None:
    """The `DEVICE.default` a statement enqueues onto (None: it names no default stream)."""
    ref = getattr(statement, "stream", None)
    return ref if isinstance(ref, ast.Ref) and ref.member is not None and ref.member.text == "default" else None


def _chain_text(names: list[str]) -> str:
    """`a -> b -> a`, with the middle of a long chain left out."""
    if len(names) > 12:
        names = names[:5] + [f"... ({len(names) - 10:,} more)"] + names[-5:]
    return " -> ".join(names)


_MEMORY_KINDS = ("buffer", "alias", "tensor")
_BUFFER_KINDS = ("buffer", "alias")
"""Errors after which lowering stops: nothing after them would be meaningful (or quick)."""


def _kind_phrase(kind: str) -> str:
    return {"alias": "an alias", "event": "an event", "thread": "a thread"}.get(kind, f"a {kind}")


def _kinds_phrase(kinds: tuple[str, ...]) -> str:
    """`a stream`, `a stream or an event`, `a stream, an event or a device`."""
    phrases = [_kind_phrase(k) for k in kinds]
    return phrases[0] if len(phrases) == 1 else ", ".join(phrases[:-1]) + " or " + phrases[-1]


class _Lowerer:
    def __init__(self, spec: ast.SpecFile, path: str, source: str, max_statements: int,
                 skipped: frozenset[str] = frozenset(), max_errors: int = MAX_ERRORS):
        self.spec = spec
        self.skipped = skipped
        """Names declared on lines the parser skipped after a syntax error."""
        self.errors: list[Diagnostic] = []
        self.error_keys: set = set()
        self.max_errors = max_errors
        self.failed: set[int] = set()
        """Statements (by node id) in error: their further loop instances are skipped."""
        self.path = path
        self.source = source
        self.max_statements = max_statements
        self.budget = 0
        """Statements lowered so far (SP018 past `max_statements`)."""
        self.expanded = False
        """Whether a whole array named counted once per element, before unrolling
        (`more_elements`) or while lowering (`spend_elements`, `lower_statement`): SP018 says so."""
        self.comm_member_count = 0
        """Members of the comms declared so far (MAX_COMM_MEMBERS)."""
        self.declared_elements = 0
        """Elements of the arrays declared so far (MAX_DECLARED)."""
        self.iterations = 0
        """Loop iterations run and other steps that lower nothing taken so far: capped at
        ITERATIONS_PER_STATEMENT times the statement limit, so that loops with little or
        nothing in them cannot run unbounded either."""
        self.evaluated = 0
        """Expression nodes evaluated so far: capped at EXPRESSION_STEPS_PER_STATEMENT times the
        statement limit."""
        self.condition_variables: dict[int, tuple] = {}
        """Per `if` (by node id), the variables its conditions read: a loop asks each time."""
        self.entities: dict[str, _Entity] = {}
        self.devices: list[Device] = []
        self.exact_launches: list[tuple[int, Fraction]] = []
        self.memories: list[Memory] = []
        self.streams: list[Stream] = []
        self.events: list[Event] = []
        self.notifies: list[Notify] = []
        self.comms: list[Comm] = []
        self.tensors: list[Tensor] = []
        self.threads: list[Thread] = []
        self.statements: list[Statement] = []
        self.warnings: list[Diagnostic] = []
        self.names_checked: set[int] = set()
        """Blocks `check_names` has walked (by id: the syntax tree lives as long as this)."""
        self.warned: list[set] = []
        """Per program lowered: the (code, span) of its usage warnings. A spec with several
        programs gets a usage warning only when every program has it (a stream one branch
        of a `choose` does not use is not unused)."""
        self.alias_regions: dict[str, _Region] = {}
        self._allocated_by: dict[bool, dict[int, set[tuple[int, bool]]]] | None = None
        """Per memory some stream `alloc` (True) or host `alloc` (False) names, by buffer: the
        thread declarations that do (their position, and whether one is an array)."""
        self.resolving: list[str] = []
        self.origin_ids: dict = {}
        """Origin of each source statement (by node id; (id, part) for the further statements
        one source statement lowers to)."""
        self.buffer_spans: list[tuple[str, Span]] = []
        self.thread_names: dict[str, ast.ThreadDecl] = {}
        self.process_streams: set[int] | None = None
        self.comm_members: list[frozenset[int]] = []
        self.chained: set[tuple[int, int]] = set()
        """(comm, member stream) of the ranks that some call of the comm reaches from another
        stream of the member's device: every call of the comm there then waits for the one before
        (`comm_call`), so lowering runs again when a run adds one."""
        self.claimed_defaults: set[int] = set()
        """Default streams a comm declares that a `process` thread took as its own."""
        self.streams_on: dict[int, int] = {}
        """Streams declared so far per device (the next one's hardware queue position)."""
        self.default_streams: dict = {}
        """Device (for a `process` thread, (device, thread)) -> its default stream, once
        something uses it (`default_stream`)."""
        self.graph_elements: list[tuple[ast.GraphDecl, dict[str, int], str]] = []
        """Each declared graph (each element of a graph array): its declaration, the variables
        its body starts with, and its name (`g`, `g[1]`)."""
        self.capture: _Capture | None = None
        """The graph whose body is being lowered at a launch, if any."""
        self.broken_graphs: set[int] = set()
        """Graphs whose body had an error at a launch: their other launches are skipped."""
        self.graph_labels: dict[int, int] = {}
        self.events_captured: dict[int, tuple[str, Span]] = {}
        self.events_outside: dict[int, Span] = {}
        self.event_nodes: dict[Span, str] = {}
        self.named_streams: set[int] = set()
        """Streams that statements name without enqueuing on them (a tensor `alloc`'s pool,
        `record_stream`): used, for the never-used warning."""

    # -- errors ---------------------------------------------------------------------------

    def record(self, diagnostic: Diagnostic) -> None:
        key = (diagnostic.code, diagnostic.primary_span)
        if key in self.error_keys:
            return
        self.error_keys.add(key)
        self.errors.append(diagnostic)
        if len(self.errors) >= self.max_errors:
            raise _Stop

    def attempt(self, method, decl, kind: str | None = None) -> None:
        """Lower one declaration; on an error, report it and let the name stand for nothing."""
        try:
            method(decl)
        except _Skip:
            pass
        except SpecError as exc:
            if exc.diagnostic.code in _FATAL:
                raise
            self.record(exc.diagnostic)
        else:
            return
        self.resolving = []
        name = getattr(decl, "name", None)
        if not isinstance(name, ast.Name):
            return
        entity = self.entities.get(name.text)
        if entity is None and kind is not None:
            self.entities[name.text] = _Entity(kind, decl, (), False, broken=True)
        elif entity is not None and entity.decl is decl:
            self.entities[name.text] = replace(entity, broken=True)

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
        if what != "thread":  # (thread arrays are sized again for each program; statements cap them)
            self.declared_elements += n
            if self.declared_elements > MAX_DECLARED:
                raise SpecError(error(
                    Code.SP020, f"the arrays declare more than {MAX_DECLARED:,} elements in all", count.span,
                    "one array too many", help=f"each array holds up to {MAX_ARRAY:,} elements, and all of them "
                                               f"together up to {MAX_DECLARED:,}: declare fewer or smaller arrays"))
        return n

    def lower(self) -> tuple[Program, ...]:
        try:
            programs = self.lower_all()
        except _Stop:
            programs = ()
        except SpecError as exc:  # an error after which nothing more is looked at
            if (exc.diagnostic.code, exc.diagnostic.primary_span) not in self.error_keys:
                self.errors.append(exc.diagnostic)
        if self.errors:
            raise SpecErrors(tuple(self.errors)) if len(self.errors) > 1 else SpecError(self.errors[0])
        return programs

    def lower_all(self) -> tuple[Program, ...]:
        decls = self.spec.declarations
        self.title = None
        for decl in decls:
            if isinstance(decl, ast.SpecTitle):
                if self.title is not None:
                    self.record(error(Code.SP011, "the spec has two titles", decl.span, "second `spec`"))
                self.title = decl.title
        for decl in decls:
            if isinstance(decl, ast.DeviceDecl):
                self.attempt(self.device, decl, "device")
        for decl in decls:
            if isinstance(decl, ast.BufferDecl):
                self.attempt(self.buffer, decl, "buffer")
            elif isinstance(decl, ast.StreamDecl):
                self.attempt(self.stream, decl, "stream")
            elif isinstance(decl, ast.EventDecl):
                self.attempt(lambda d: self.simple(d, "event"), decl, "event")
            elif isinstance(decl, ast.NotifyDecl):
                self.attempt(lambda d: self.simple(d, "notify"), decl, "notify")
            elif isinstance(decl, ast.TensorDecl):
                self.attempt(self.tensor, decl, "tensor")
            elif isinstance(decl, ast.GraphDecl):
                self.attempt(self.graph, decl, "graph")
            elif isinstance(decl, (ast.AliasDecl, ast.CommDecl)):
                kind = "alias" if isinstance(decl, ast.AliasDecl) else "comm"
                self.attempt(lambda d: self.declare(d.name, kind, d), decl)
        for decl in decls:
            if not isinstance(decl, (ast.AliasDecl, ast.CommDecl)):
                continue
            entity = self.entities.get(decl.name.text)
            if entity is None or entity.decl is not decl or entity.broken:
                continue  # its declaration was refused: already reported
            if isinstance(decl, ast.AliasDecl):
                self.attempt(lambda d: self.alias_region(d.name.text, d.name.span), decl, "alias")
            else:
                self.attempt(self.comm, decl, "comm")
        self.thread_decls = []
        for decl in decls:
            if isinstance(decl, ast.ThreadDecl):
                before = len(self.errors)
                self.attempt(self.declare_thread, decl)
                if len(self.errors) == before:
                    self.thread_decls.append(decl)
        expectations = []
        for decl in decls:
            if isinstance(decl, ast.ExpectDecl):
                self.attempt(lambda d: expectations.append(self.expectation(d)), decl)
        self.expectations = tuple(expectations)
        self.warnings += expectation_conflicts(self.expectations)
        for decl in decls:  # (a graph no thread launches is still checked for undeclared names)
            if isinstance(decl, ast.GraphDecl) and self.entities.get(decl.name.text, _Entity("", None, (), False)).decl is decl:
                self.attempt(lambda d: self.check_names(d.body), decl)
        self.main_process_defaults = self.find_main_process_defaults()
        self.check_size()
        return self.variants()

    def device(self, decl: ast.DeviceDecl) -> None:
        engines: dict[Engine, int] = {}
        launch, launch_given = 0, False
        exact_launch = None
        queues = None
        runtime = None
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
                exact_launch = item.duration.exact
            elif isinstance(item, ast.RuntimeItem):
                if runtime is not None:
                    raise SpecError(error(Code.SP024, "`runtime` is given twice", item.span))
                if item.runtime.text not in ("cuda", "cann"):
                    raise SpecError(error(Code.SP024, f"unknown runtime `{item.runtime.text}`", item.runtime.span,
                                          "not a runtime", help="write `runtime cuda` or `runtime cann`"))
                runtime = Runtime(item.runtime.text)
            else:
                if queues is not None:
                    raise SpecError(error(Code.SP024, "`queues` is given twice", item.span))
                if not 1 <= item.count <= MAX_ENGINE_UNITS:
                    raise SpecError(error(Code.SP024, f"`queues {item.count}` is out of range", item.span,
                                          help=f"a device has 1 to {MAX_ENGINE_UNITS} hardware queues"))
                queues = item.count
        count = self.array_count(decl.count, "device")
        names = [decl.name.text] if count is None else [f"{decl.name.text}[{i}]" for i in range(count)]
        first = len(self.devices)
        declared = tuple(engines.items()) if engines else DEFAULT_ENGINES
        self.declare(decl.name, "device", decl, range(first, first + len(names)), count is not None)
        for offset, name in enumerate(names):
            if exact_launch is not None:
                self.exact_launches.append((first + offset, exact_launch))
            self.devices.append(Device(first + offset, name, declared, launch, queues, decl.span,
                                       runtime or Runtime.CANN))

    def placement(self, device: ast.Name, index: ast.Expr | None, count: int | None, what: str) -> list[int]:
        """The device of each element of a declaration `on DEVICE` or `on DEVICE[i]`: a whole
        device array places element i of an array of the same length on device i."""
        entity = self.lookup(device, "device")
        if index is not None:
            if not entity.array:
                raise SpecError(error(Code.SP015, f"`{device.text}` is one device, not an array", index.span,
                                      "no index here", help=f"write `on {device.text}`"))
            i = self.evaluate(index, {})
            if not 0 <= i < len(entity.indices):
                raise SpecError(error(Code.SP013, f"device index {i} is out of range for `{device.text}` "
                                      f"({len(entity.indices)} devices)", index.span, "out of range"))
            return [entity.indices[i]] * (count or 1)
        if not entity.array:
            return [entity.indices[0]] * (count or 1)
        if count != len(entity.indices):
            raise SpecError(error(Code.SP015, f"`{device.text}` is an array of {len(entity.indices)} devices; "
                                  f"a {what} on it needs one element per device", device.span,
                                  "an array of devices",
                                  help=f"declare `{what} NAME[{len(entity.indices)}] ... on {device.text}` (element i "
                                       f"on `{device.text}[i]`), or pick one: `on {device.text}[i]`"))
        return list(entity.indices)

    def lookup(self, name: ast.Name, *kinds: str, indexed: bool = False) -> _Entity:
        """The declared entity `name` names, of one of `kinds`; `indexed`: written with an
        index (`q[1]`), so an undeclared name's help declares an array."""
        entity = self.entities.get(name.text)
        if entity is None:
            if name.text in self.skipped:
                raise _Skip  # declared on a line with a syntax error
            thread = self.thread_names.get(name.text)
            if thread is not None and kinds and "thread" not in kinds:  # (threads are named apart)
                wanted = _kinds_phrase(kinds)
                raise SpecError(error(Code.SP012, f"`{name.text}` is a thread, not {wanted}", name.span,
                                      f"expected {wanted}", secondary=((thread.name.span, "declared here"),)))
            raise SpecError(error(Code.SP010, f"`{name.text}` is not declared", name.span,
                                  "not declared", help=self.suggest(name.text, kinds, indexed)))
        if entity.broken:
            raise _Skip
        if kinds and entity.kind not in kinds:
            wanted = _kinds_phrase(kinds)
            raise SpecError(error(Code.SP012, f"`{name.text}` is {_kind_phrase(entity.kind)}, not {wanted}",
                                  name.span, f"expected {wanted}",
                                  secondary=((entity.decl.name.span, "declared here"),),
                                  help=_wrong_kind_help(name.text, entity.kind, kinds)))
        return entity

    def suggest(self, text: str, kinds: tuple[str, ...], indexed: bool = False) -> str:
        import difflib

        candidates = [n for n, e in self.entities.items() if not kinds or e.kind in kinds]
        close = close_words(text, candidates) or difflib.get_close_matches(text, candidates, n=1)
        if close:
            return did_you_mean(close)
        what = " or ".join(kinds) if kinds else "name"
        declared = f"{text}[N]" if indexed else text
        forms = [DECLARATION_FORMS[k].replace("NAME", declared) for k in kinds if k in DECLARATION_FORMS]
        written = f": {' or '.join(f'`{form}`' for form in forms[:3])}" if forms else ""
        return f"declare the {what} at the top level{written} (declarations may come in any order)"

    def buffer(self, decl: ast.BufferDecl) -> None:
        count = self.array_count(decl.count, "buffer")
        if decl.size.value <= 0:
            raise SpecError(error(Code.SP020, "a buffer needs a positive size", decl.size.span))
        places = [None] * (count or 1)
        if decl.place is not None:
            places = self.placement(decl.place, decl.place_index, count, "buffer")
        names = [decl.name.text] if count is None else [f"{decl.name.text}[{i}]" for i in range(count)]
        first = len(self.memories)
        for offset, name in enumerate(names):
            self.memories.append(Memory(first + offset, name, decl.name.text, decl.size.value, places[offset],
                                        decl.pinned, decl.span, ipc=decl.ipc))
        self.declare(decl.name, "buffer", decl, range(first, first + len(names)), count is not None)
        self.buffer_spans.append((decl.name.text, decl.span))

    def tensor(self, decl: ast.TensorDecl) -> None:
        count = self.array_count(decl.count, "tensor")
        if decl.size.value <= 0:
            raise SpecError(error(Code.SP020, "a tensor needs a positive size", decl.size.span))
        if decl.device.text == "host" and "host" not in self.entities:
            raise SpecError(error(Code.SP012, "a tensor lives on a device, not on the host", decl.device.span,
                                  "not a device", help="host memory is a `buffer NAME SIZE on host [pinned]`; "
                                                       "the caching allocator here is the device's"))
        places = self.placement(decl.device, decl.device_index, count, "tensor")
        names = [decl.name.text] if count is None else [f"{decl.name.text}[{i}]" for i in range(count)]
        first = len(self.tensors)
        for offset, name in enumerate(names):
            self.tensors.append(Tensor(name, decl.name.text, decl.size.value, places[offset], decl.span))
        self.declare(decl.name, "tensor", decl, range(first, first + len(names)), count is not None)
        self.buffer_spans.append((decl.name.text, decl.span))

    def stream(self, decl: ast.StreamDecl) -> None:
        count = self.array_count(decl.count, "stream")
        places = self.placement(decl.device, decl.device_index, count, "stream")
        mode = StreamMode(decl.mode)
        names = [decl.name.text] if count is None else [f"{decl.name.text}[{i}]" for i in range(count)]
        first = len(self.streams)
        for offset, name in enumerate(names):
            device = places[offset]
            queues = self.devices[device].queues
            position = self.streams_on.get(device, 0)
            self.streams_on[device] = position + 1
            priority = decl.priority[0] if decl.priority else 0
            if self.devices[device].runtime is Runtime.CUDA:
                # CUDA's least priority is 0, and the default: `low` and positive values are
                # clamped to it (`cudaStreamCreateWithPriority`, `cudaDeviceGetStreamPriorityRange`)
                priority = min(priority, 0)
            self.streams.append(Stream(
                first + offset, name, device, priority, mode,
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
                table.append(Event(first + offset, name, decl.flag, decl.span, decl.ipc))
            else:
                table.append(Notify(first + offset, name, decl.span))
        self.declare(decl.name, kind, decl, range(first, first + len(names)), count is not None)

    def graph(self, decl: ast.GraphDecl) -> None:
        count = self.array_count(decl.count, "graph")
        first = len(self.graph_elements)
        for i in range(count or 1):
            env = {} if count is None else {decl.name.text: i}
            self.graph_elements.append((decl, env, decl.name.text if count is None else f"{decl.name.text}[{i}]"))
        self.declare(decl.name, "graph", decl, range(first, len(self.graph_elements)), count is not None)

    def comm(self, decl: ast.CommDecl) -> None:
        count = self.array_count(decl.count, "comm")
        first = len(self.comms)
        warned_device = False  # (once per declaration, not per element of a comm array)
        for i in range(count or 1):
            env = {} if count is None else {decl.name.text: i}
            members: list[int] = []
            written: dict[int, ast.Ref] = {}
            on_device: dict[int, int] = {}
            skipped = False
            for ref in decl.members:
                entity = self.entities.get(ref.name.text)
                if entity is not None and entity.kind != "stream" and ref.member is None:
                    raise SpecError(error(Code.SP021, f"comm member `{ref.name.text}` is {_kind_phrase(entity.kind)}, not a stream",
                                          ref.span, "not a stream", help="a comm lists one stream per rank"))
                try:
                    streams = self.resolve_all(ref, env, "stream")
                except _Skip:  # a member whose declaration failed: the others are still checked
                    skipped = True
                    continue
                for stream in streams:
                    self.comm_member_count += 1
                    if self.comm_member_count > MAX_COMM_MEMBERS:
                        raise SpecError(error(
                            Code.SP020, f"the comms have more than {MAX_COMM_MEMBERS:,} members in all",
                            decl.span, "too many members",
                            help="a comm array over a stream array has the square of their length in "
                                 "members: give each comm its own few streams"))
                    name = self.streams[stream].name
                    comm_name = decl.name.text if count is None else f"{decl.name.text}[{i}]"
                    if stream in written:
                        raise SpecError(error(Code.SP011, f"stream `{name}` is in comm `{comm_name}` twice", ref.span))
                    device = self.streams[stream].device
                    if device in on_device and not warned_device:
                        # The contract allows it; the runtimes do not. Checked as written.
                        warned_device = True
                        other = on_device[device]
                        self.warnings.append(warning(
                            Code.SP059,
                            f"comm `{comm_name}` has two members on device `{self.devices[device].name}`: "
                            f"`{self.streams[other].name}` and `{name}`",
                            ref.span, "second member on this device",
                            secondary=((written[other].span, "first member on this device"),),
                            help="NCCL and HCCL run one rank per device and refuse a second one: put each "
                                 "member stream on its own device. It is checked as written; in time, the "
                                 "members on one device share its comm units when they are fewer"))
                    members.append(stream)
                    written[stream] = ref
                    on_device.setdefault(device, stream)
            if skipped:
                raise _Skip
            name = decl.name.text if count is None else f"{decl.name.text}[{i}]"
            in_flight = ()
            if decl.one_in_flight:  # (the library's state of each rank, which every call of it writes)
                first_memory = len(self.memories)
                in_flight = tuple(range(first_memory, first_memory + len(members)))
                self.memories.extend(
                    Memory(first_memory + rank, f"{name}.in_flight[{rank}]", decl.name.text, 1,
                           self.streams[stream].device, False, decl.span, comm=len(self.comms))
                    for rank, stream in enumerate(members))
            self.comms.append(Comm(len(self.comms), name, tuple(members), decl.span, in_flight))
            self.comm_members.append(frozenset(members))
        self.entities[decl.name.text] = _Entity("comm", decl, tuple(range(first, len(self.comms))), count is not None)

    def declare_thread(self, decl: ast.ThreadDecl) -> None:
        # Threads are never referenced, so their names live apart from everything else
        # (`thread main` beside `stream main` is fine).
        other = self.thread_names.get(decl.name.text)
        if other is not None:
            raise SpecError(error(Code.SP011, f"thread `{decl.name.text}` is declared twice", decl.name.span,
                                  "declared again here", secondary=((other.span, "first declared here"),)))
        if decl.name.text in KEYWORDS:
            raise SpecError(error(Code.SP022, f"`{decl.name.text}` is a keyword and cannot name a thread",
                                  decl.name.span, "keyword"))
        self.thread_names[decl.name.text] = decl
        self.array_count(decl.count, "thread")

    # -- expressions and references --------------------------------------------------------

    def holds(self, condition: ast.Condition, env: dict[str, int]) -> bool:
        """The truth of an `if` condition (`and` and `or` read their right side only when needed)."""
        if isinstance(condition, ast.Logical):
            left = self.holds(condition.left, env)
            if left == (condition.operator == "or"):
                return left
            return self.holds(condition.right, env)
        left = self.evaluate(condition.left, env)
        right = self.evaluate(condition.right, env)
        return _COMPARE[condition.operator](left, right)

    def taken(self, node: ast.If, env: dict[str, int]) -> tuple:
        """The block an `if` runs with the variables in `env`. Every variable its conditions
        name must exist, even where `and`/`or` or an earlier branch leaves it unread (a typo
        there would pass unnoticed)."""
        read = self.condition_variables.get(id(node))
        if read is None:
            read = self.condition_variables[id(node)] = tuple(
                variable for condition, _ in node.branches for variable in _variables(condition))
        for variable in read:
            if variable.name not in env:
                self.evaluate(variable, env)  # reports it
        for condition, body in node.branches:
            if self.holds(condition, env):
                return body
        return node.otherwise

    def evaluate(self, expr: ast.Expr, env: dict[str, int]) -> int:
        self.evaluated += 1
        if self.evaluated > EXPRESSION_STEPS_PER_STATEMENT * self.max_statements:
            raise SpecError(error(
                Code.SP018, f"evaluating expressions while unrolling takes more than "
                f"{EXPRESSION_STEPS_PER_STATEMENT * self.max_statements:,} steps in all, past the limit of lowered "
                "statements", expr.span, "evaluated too often",
                help="shorten the expression, or the loop that evaluates it, or raise the limit with "
                     "--max-statements N"))
        if isinstance(expr, ast.Number):
            return expr.value
        if isinstance(expr, ast.Variable):
            if expr.name in env:
                value = env[expr.name]
                if value is _BROKEN:
                    raise _Skip
                return value
            if expr.name in self.skipped:
                raise _Skip
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
                raise SpecError(error(Code.SP019, "division by zero" + self.values_at(env, expr.right),
                                      expr.right.span, "this is 0"))
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
                                  help="values may be at most 2^62 in size"))
        return value

    def resolve(self, ref: ast.Ref, env: dict[str, int], *kinds: str) -> int:
        """A reference to one element of a declared stream/event/notify/comm/device/graph. In a
        graph's body at a launch, a stream stands for the stream its captured work runs on, and
        an event for the graph's own copy of it (`captured`)."""
        index = self.resolve_declared(ref, env, *kinds)
        if ref.member is not None:
            if self.capture is not None:
                raise SpecError(error(Code.SP029, "a graph cannot capture work on a device's default stream",
                                      ref.span, "the default stream", secondary=((self.capture.span, "graph declared here"),),
                                      help="capture on a stream you declare (CUDA cannot capture the legacy stream, "
                                           "CANN the default stream)"))
            return index
        kind = self.entities[ref.name.text].kind
        if kind == "stream":
            index = self.own_legacy_stream(index)
        if kind == "event" and self.capture is not None:
            self.events_captured.setdefault(index, (self.capture.name, ref.span))
        elif kind == "event":
            self.events_outside.setdefault(index, ref.span)
        if self.capture is not None and kind in ("stream", "event"):
            return self.captured(kind, index, ref)
        return index

    @staticmethod
    def values_at(env: dict[str, int], *expressions) -> str:
        """` (when i = 3)`: the values the variables the expressions read had where an index
        went out of range (a loop's last iteration, say), then the other variables in scope (a
        `let` read there holds a value the loops around it made), or nothing outside loops."""
        names = dict.fromkeys(v.name for e in expressions if e is not None for v in _variables(e))
        if names:
            names.update(dict.fromkeys(env))
        known = [f"{name} = {env[name]}" for name in names if isinstance(env.get(name), int)][:6]
        return f" (when {', '.join(known)})" if known else ""

    def resolve_declared(self, ref: ast.Ref, env: dict[str, int], *kinds: str) -> int:
        """`resolve` of the declared element itself."""
        if ref.member is not None:
            return self.default_stream_ref(ref, env, kinds)
        entity = self.lookup(ref.name, *kinds, indexed=ref.index is not None)
        if entity.array:
            if ref.index is None:
                raise SpecError(error(Code.SP015, f"`{ref.name.text}` is an array of {len(entity.indices)}; pick one element",
                                      ref.span, "needs an index", help=f"write `{ref.name.text}[{_index_hint(env)}]`"))
            i = self.evaluate(ref.index, env)
            if not 0 <= i < len(entity.indices):
                raise SpecError(error(Code.SP013, f"index {i} is out of range for `{ref.name.text}[{len(entity.indices)}]`"
                                      + self.values_at(env, ref.index), ref.index.span, f"valid indices are 0..{len(entity.indices) - 1}"))
            return entity.indices[i]
        if ref.index is not None:
            raise SpecError(error(Code.SP015, f"`{ref.name.text}` is not an array", ref.index.span,
                                  "cannot index this"))
        return entity.indices[0]

    def default_stream_ref(self, ref: ast.Ref, env: dict[str, int], kinds: tuple[str, ...]) -> int:
        """`DEVICE.default`: the device's default stream (`default_stream`), the stream work
        goes to when a program names none (CUDA's stream 0, CANN's default stream)."""
        member = ref.member
        assert member is not None
        # (the device part alone, for a caret under `gpu` of `gpu.default`)
        device_ref = ast.Ref(ref.name, ref.index, ref.name.span if ref.index is None else ref.span)
        named = self.entities.get(ref.name.text)
        if named is not None and named.kind == "graph":
            raise SpecError(error(Code.SP012, f"`{self.text(ref.span)}` is a graph's own stream, which only reports show",
                                  ref.span, "not a name in the spec",
                                  help=f"order with the graph on its launch stream: `sync STREAM` or an event recorded "
                                       f"there after `launch {ref.name.text}`"))
        entity = self.lookup(ref.name, "device")
        if member.text != "default":
            raise SpecError(error(Code.SP010, f"a device has no `{member.text}`", member.span, "unknown member",
                                  help=f"`{self.text(ref.name.span)}.default` names the device's default stream"))
        if kinds and "stream" not in kinds:
            wanted = _kinds_phrase(kinds)
            raise SpecError(error(Code.SP012, f"`{self.text(ref.span)}` is a stream, not {wanted}", ref.span,
                                  f"expected {wanted}", secondary=((entity.decl.name.span, "device declared here"),)))
        return self.default_stream(self.resolve(device_ref, env, "device"))

    def resolve_all(self, ref: ast.Ref, env: dict[str, int], *kinds: str) -> tuple[int, ...]:
        """Like `resolve`, but a whole array (no index) stands for every element in order."""
        if ref.member is not None:
            return (self.resolve(ref, env, *kinds),)
        entity = self.lookup(ref.name, *kinds, indexed=ref.index is not None)
        if entity.array and ref.index is None:
            return entity.indices
        return (self.resolve(ref, env, *kinds),)

    def alias_region(self, name: str, span: Span) -> _Region:
        if name in self.alias_regions:
            return self.alias_regions[name]
        if not self.resolving:
            # Resolve a chain of aliases of aliases from its far end, so that each alias below
            # finds the next one resolved: a chain thousands deep is no deeper a recursion.
            chain, again = self._alias_chain(name)
            if again is not None:
                self._break(chain)
                raise SpecError(error(Code.SP023, f"alias `{again}` refers to itself",
                                      self.entities[chain[-1]].decl.target.name.span,
                                      help=_chain_text(chain + [again])))
            try:
                for referrer, link in reversed(list(zip(chain, chain[1:]))):
                    if link not in self.alias_regions:
                        self._resolve_alias(link, self.entities[referrer].decl.target.name.span)
            except (SpecError, _Skip):
                self._break(chain[1:])
                raise
        return self._resolve_alias(name, span)

    def _break(self, chain: list[str]) -> None:
        """Marks the aliases of `chain` as standing for nothing (the error that says why is
        reported once): each would otherwise walk the same chain again, as long as it is."""
        for name in chain:
            self.entities[name] = replace(self.entities[name], broken=True)

    def _resolve_alias(self, name: str, span: Span) -> _Region:
        if name in self.alias_regions:
            return self.alias_regions[name]
        if name in self.resolving:
            raise SpecError(error(Code.SP023, f"alias `{name}` refers to itself", span,
                                  help=_chain_text(self.resolving + [name])))
        if self.entities[name].broken:
            raise _Skip
        self.resolving.append(name)
        decl = self.entities[name].decl
        region = self.region(decl.target, {}, ("buffer", "alias"))
        self.resolving.pop()
        self.alias_regions[name] = region
        return region

    def _alias_chain(self, name: str) -> tuple[list[str], str | None]:
        """`name`, the alias it names, the alias that one names, ... up to one resolved or not
        an alias; and the alias named again if the chain runs into a cycle."""
        chain: list[str] = []
        seen: set[str] = set()
        while True:
            entity = self.entities.get(name)
            if entity is None or entity.kind != "alias" or entity.broken or name in self.alias_regions:
                return chain, None
            if name in seen:
                return chain, name
            seen.add(name)
            chain.append(name)
            name = entity.decl.target.name.text

    def memory_kinds(self) -> tuple[str, ...]:
        """What an access may name (tensors only once the spec declares one, so that messages
        about specs without them do not mention them)."""
        return ("buffer", "alias", "tensor") if self.tensors else ("buffer", "alias")

    def region(self, access: ast.AccessRef, env: dict[str, int], kinds: tuple[str, ...] | None = None,
               whole_arrays: bool = False) -> _Region:
        """The bytes an access names. With `whole_arrays`, an unindexed array stands for all of
        its elements (the region keeps `array` set)."""
        entity = self.lookup(access.name, *(kinds or (_MEMORY_KINDS if self.tensors else _BUFFER_KINDS)),
                             indexed=bool(access.subscripts) and isinstance(access.subscripts[0], ast.Index))
        if entity.kind == "alias":
            region = self.alias_region(access.name.text, access.name.span)
        elif entity.kind == "tensor":
            first = self.tensors[entity.indices[0]]
            region = _Region(entity.indices, 0, first.size, entity.array, first.decl, True)
        else:
            first = self.memories[entity.indices[0]]
            region = _Region(entity.indices, 0, first.size, entity.array, first.buffer)
        for subscript in access.subscripts:
            what = "tensors" if region.tensor else "buffers"
            if isinstance(subscript, ast.Index):
                if not region.array:
                    raise SpecError(error(Code.SP015, f"`{access.name.text}` is not an array of {what}",
                                          subscript.span, "cannot index this",
                                          help="byte ranges are written [lo:hi]"))
                i = self.evaluate(subscript.expr, env)
                if not 0 <= i < len(region.memories):
                    raise SpecError(error(Code.SP013, f"index {i} is out of range for `{access.name.text}[{len(region.memories)}]`"
                                          + self.values_at(env, subscript.expr), subscript.expr.span, f"valid indices are 0..{len(region.memories) - 1}"))
                region = _Region((region.memories[i],), region.start, region.end, False, region.buffer, region.tensor)
            else:
                if region.array:
                    raise SpecError(error(Code.SP015, f"`{access.name.text}` is an array of {what}; index it before slicing",
                                          subscript.span, help=f"write `{access.name.text}[{_index_hint(env)}][lo:hi]`"))
                length = region.end - region.start
                sliced = self.source[access.span.start:subscript.span.start].strip()  # `x`, `x[1][0:64]`
                low = 0 if subscript.low is None else self.evaluate(subscript.low, env)
                high = length if subscript.high is None else self.evaluate(subscript.high, env)
                if low >= high and 0 <= low and high <= length:
                    raise SpecError(error(Code.SP014, f"byte range [{low}:{high}] of `{sliced}` is empty"
                                          + self.values_at(env, subscript.low, subscript.high), subscript.span, "empty range",
                                          help="a range [lo:hi] needs 0 <= lo < hi <= size"))
                if not 0 <= low < high <= length:
                    raise SpecError(error(Code.SP014, f"byte range [{low}:{high}] is outside `{sliced}` ({length} bytes)"
                                          + self.values_at(env, subscript.low, subscript.high), subscript.span, "out of range",
                                          help="a range [lo:hi] needs 0 <= lo < hi <= size"))
                region = _Region(region.memories, region.start + low, region.start + high, False, region.buffer,
                                 region.tensor)
        if region.array and not whole_arrays:
            what = "tensors" if region.tensor else "buffers"
            raise SpecError(error(Code.SP015, f"`{access.name.text}` is an array of {len(region.memories)} {what}; pick one",
                                  access.span, "needs an index", help=f"write `{access.name.text}[{_index_hint(env)}]`"))
        return region

    def text(self, span: Span) -> str:
        return self.source[span.start:span.end]

    def access(self, access: ast.AccessRef, env: dict[str, int], write: bool) -> Access:
        region = self.region(access, env)
        return self.region_access(region, region.memories[0], access, write, self.text(access.span))

    def accesses(self, access: ast.AccessRef, env: dict[str, int], write: bool) -> tuple[Access, ...]:
        """`reads`/`writes`: an unindexed buffer array means every element, whole."""
        region = self.region(access, env, whole_arrays=True)
        if not region.array:
            if region.tensor:
                return (self.region_access(region, region.memories[0], access, write, self.text(access.span)),)
            span = access.span
            return (Access(region.memories[0], region.start, region.end, write, span,
                           self.source[span.start:span.end]),)
        self.spend_elements(len(region.memories), access)
        return tuple(self.region_access(region, element, access, write, self.element_name(region, element))
                     for element in region.memories)

    def spend_elements(self, count: int, access: ast.AccessRef) -> None:
        """An access to every element of an array is `count` accesses, each as much work for
        the checks as a statement: they count on the limit of lowered statements (a loop of a
        thousand reads of a 100,000-element array, eight lines, took 4 GB before it did)."""
        self.budget += count - 1
        self.expanded = self.expanded or count > 1
        if self.budget > self.max_statements:
            name = access.name.text
            raise SpecError(error(
                Code.SP018, f"`{name}` names {count:,} elements, and accessing each of them takes the spec past "
                f"the limit of {self.max_statements:,} lowered statements (each element accessed counts as one)",
                access.span, "every element", help=f"access fewer elements (`{name}[i]`), or raise the limit "
                "with --max-statements N"))

    def element_name(self, region: _Region, element: int) -> str:
        return self.tensors[element].name if region.tensor else self.memories[element].name

    def region_access(self, region: _Region, element: int, access: ast.AccessRef, write: bool, text: str) -> Access:
        memory = self.tensor_use(element, access.span) if region.tensor else element
        return Access(memory, region.start, region.end, write, access.span, text)

    def mem(self, index: int) -> Memory:
        """The memory an access names; for a tensor not yet placed, a stand-in with its size
        and device."""
        if index >= 0:
            return self.memories[index]
        tensor = self.tensors[self.slots[slot_of(index)].tensor]
        return Memory(index, tensor.name, tensor.decl, tensor.size, tensor.device, False, tensor.span)

    # -- variants --------------------------------------------------------------------------

    def variants(self) -> tuple[Program, ...]:
        """One program per combination of `choose` branches (and, under `runtime cuda`, per
        behaviour of the calls the driver may synchronize); the first takes every first branch.
        Each may be followed by programs of the allocator's timing (`release_candidates`),
        which count on no limit of their own: past `MAX_VARIANTS` of them, or past the
        statement limit together, the base program says how many were left out."""
        combinations = self.count_combinations()
        if combinations > MAX_VARIANTS:
            self.too_many(combinations)
        programs: list[Program] = []
        prefix: list[int] = []
        lowered = timed = 0
        timings_left = past_size = 0
        while True:
            program = self.run(prefix, cuda_sync_first=False)
            if self.errors:
                return (program,)  # the other variants would repeat the same errors
            candidates, certain, left = self.release_candidates()
            timings_left += left
            if certain:  # (the recorded work is surely done there: the block comes back in every execution)
                program = self.run(prefix, cuda_sync_first=False, released=certain)
                if self.errors:
                    return (program,)
            # (what the limit counts: statements, and a whole array named once per element)
            lowered += max(self.budget, len(program.statements)) * (2 if self.driver_choices else 1)
            if lowered > self.max_statements and combinations > 1:
                self.too_large_together(combinations)
            decisions = self.decisions
            labels = [label for _, _, label in decisions]
            cuda = []
            if self.driver_choices:
                choices = frozenset(self.driver_choices)
                cuda = [cuda_variant(choices, False)]
                programs.append(replace(program, variant="; ".join(labels + cuda)))
                synced = self.run(prefix, cuda_sync_first=True, released=certain)
                programs.append(replace(synced, variant="; ".join(labels + [cuda_variant(choices, True)])))
            else:
                programs.append(replace(program, variant="; ".join(labels)))
            for timing in candidates:
                label = self.timing_label(program, timing)
                errors = len(self.errors)
                try:
                    reused = self.run(prefix, cuda_sync_first=False, released={**certain, **timing})
                except SpecError:  # (its synthetic statements took a thread past the limit)
                    reused = None
                if reused is None or len(self.errors) > errors or timed + len(reused.statements) > self.max_statements \
                        or sum(p.races_only for p in programs) >= MAX_VARIANTS:
                    del self.errors[errors:]  # (an extra program the limits leave out: said, not an error)
                    timings_left += 1
                    past_size += 1
                    continue
                timed += len(reused.statements)
                programs.append(replace(reused, variant="; ".join(labels + cuda + [label]), races_only=True))
            last = next((i for i in range(len(decisions) - 1, -1, -1) if decisions[i][0] + 1 < decisions[i][1]), None)
            if last is None:
                break
            prefix = [taken for taken, _, _ in decisions[:last]] + [decisions[last][0] + 1]
        base = sum(not program.races_only for program in programs)
        if base > MAX_VARIANTS:
            self.too_many(base)
        if timings_left:
            programs[0] = replace(programs[0], timings_left=timings_left, timings_past_size=past_size)
        return tuple(programs)

    def timing_label(self, program: Program, timing: dict[int, tuple[int, tuple[int, ...]]]) -> str:
        """How a program of the allocator's timing is named in findings: which blocks come back
        at which allocation (each line once), and the work done by then."""
        at: dict[int, list[str]] = {}  # line of the alloc -> the tensors whose blocks come back there
        for free, (alloc, _) in timing.items():
            line = self.statements[self.slots[self.tensor_events[alloc].slot].statement].span.line
            name = self.tensors[self.slots[self.tensor_events[free].slot].owner.tensor].name
            at.setdefault(line, []).append(f"`{name}`'s")
        parts = [f"{' and '.join(names)} block{'s' if len(names) > 1 else ''} back at line {line}"
                 for line, names in at.items()]
        streams = dict.fromkeys(k for _, recorded_on in timing.values() for k in recorded_on)
        return (f"the allocator hands {', '.join(parts)}, the work on "
                f"{', '.join(f'`{program.streams[k].name}`' for k in streams)} done by then")

    def release_candidates(self) -> tuple[list[dict[int, tuple[int, tuple[int, ...]]]],
                                          dict[int, tuple[int, tuple[int, ...]]], int]:
        """Of the program just lowered: frees of tensors recorded on other streams
        (`record_stream` before the free, on the thread that allocated and frees them), each
        with the later allocs of that thread from the same pool, at the first of which PyTorch
        hands the block back once the work on those streams is done (`process_events` at each
        `malloc`). Where other blocks of the pool held out of it may come back at that alloc
        too, which one it takes depends on all: this thread's blocks are tried each alone and
        all together there (SP065 says the other combinations are not), another thread's not at
        all (SP065); past the first MAX_RETURNS allocs, SP065 too. Returns the timings left open,
        each free event -> (alloc event, recorded streams) of the blocks that come back (for the
        first `MAX_RELEASES` frees in program order, and `MAX_TOGETHER` allocs with blocks back
        together); the frees whose recorded work is surely done by an alloc (the thread syncs
        those streams in between), in the same shape; and how many timings the limits left out."""
        events, slots, statements = self.tensor_events, self.slots, self.statements
        setters = self._setters()
        owner = lambda k: slots[k].owner  # noqa: E731
        pool = lambda slot: pool_of(slot, self.tensors)  # noqa: E731
        recorded: dict[int, list[tuple[int, int, int]]] = {}  # id(slot) -> (event, thread, stream)
        frees: dict[int, list[tuple[int, int]]] = {}  # id(slot) -> (event, thread)
        allocs: dict[tuple, list[int]] = {}  # pool -> alloc events
        for k, event in enumerate(events):
            slot = owner(event.slot)
            if event.kind == "record" and event.stream != slot.stream:
                recorded.setdefault(id(slot), []).append((k, event.thread, event.stream))
            elif event.kind == "free":
                frees.setdefault(id(slot), []).append((k, event.thread))
            elif event.kind == "alloc":
                allocs.setdefault(pool(slot), []).append(k)
        held: dict[tuple, list[Slot]] = {}  # pool -> its blocks held out of it
        for slot in slots:
            if slot.kind == "alloc" and slot.stream is not None and (
                    id(slot) in recorded or any(thread != slot.thread for _, thread in frees.get(id(slot), ()))):
                held.setdefault(pool(slot), []).append(slot)
        # Per pool, to find at once the held blocks that may come back at an alloc too: the first
        # free event of each held block (sorted, with its place in `held`), the threads that free
        # them, and the blocks another thread frees.
        first_frees: dict[tuple, list[tuple[int, int]]] = {}
        freeing: dict[tuple, set[int]] = {}
        foreign: dict[tuple, list[tuple[Slot, set[int]]]] = {}
        for key, blocks in held.items():
            firsts = first_frees[key] = []
            for n, block in enumerate(blocks):
                freed = frees.get(id(block), ())
                if freed:
                    firsts.append((min(k for k, _ in freed), n))
                freeing.setdefault(key, set()).update(thread for _, thread in freed)
                if any(thread != block.thread for _, thread in freed):
                    foreign.setdefault(key, []).append((block, {thread for _, thread in freed}))
            firsts.sort()
        said: set = set()  # the spans of the allocs said SP065 of (one warning per line is kept)
        candidates: dict[int, list[tuple[int, tuple[int, ...]]]] = {}
        together: set[int] = set()  # alloc events at which this thread's held blocks may come back together
        unmodelled: dict[int, tuple[str, list[str]]] = {}  # alloc event -> (what it depends on, blocks tried alone)
        certain: dict[int, tuple[int, tuple[int, ...]]] = {}
        # Each block of this thread's, with the allocs it may come back at and the first by
        # which the thread surely waited for its recorded work (then it is back there for good).
        blocks: list[tuple[Slot, int, tuple[int, ...], list[int]]] = []
        back_by: dict[int, int] = {}  # id(slot) -> the alloc event by which it is surely back
        for slot in (s for blocks_ in held.values() for s in blocks_):
            records, freed = recorded.get(id(slot), []), frees.get(id(slot), [])
            if not freed or slot.block is None or any(thread != slot.thread for _, thread in freed) \
                    or any(thread != slot.thread for _, thread, _ in records):
                # (a block another thread frees or records stays out of the pool: said at the
                # thread's next alloc from it, which the block may come back at unseen)
                later = allocs.get(pool(slot), [])
                nxt = next((k for k in islice(later, bisect_right(later, freed[0][0]), None)
                            if events[k].thread == slot.thread), None) if freed and slot.block is not None else None
                if nxt is not None:
                    unmodelled.setdefault(nxt, (f"`{self.tensors[slot.tensor].name}`'s block coming back (another "
                                                "thread records or frees it)", []))
                continue
            free = freed[0][0]
            streams = tuple(dict.fromkeys(stream for at, _, stream in records if at < free))
            later = allocs.get(pool(slot), [])
            at = bisect_right(later, free)
            if not streams or at == len(later):
                continue
            # (the first MAX_RETURNS + 1: past them SP065 says the rest are not checked)
            takes = [later[at]] + list(islice((k for k in islice(later, at + 1, None)
                                               if events[k].thread == slot.thread), MAX_RETURNS))
            blocks.append((slot, free, streams, takes))
            back_by[id(slot)] = next((take for take in takes if self._waited(free, take, streams, setters)), -1)
        for slot, free, streams, takes in blocks:
            # The block comes back at the first of the thread's later allocs from the pool at which
            # the recorded work is done: each of the first MAX_RETURNS is a timing of its own, up
            # to the one by which the thread surely waited for that work (then certain).
            opened: list[int] = []
            for take in takes:
                if take == back_by[id(slot)]:
                    certain[free] = (take, streams)
                    break
                # Other blocks held out of the pool at this alloc: freed by another thread, or
                # freed before it and not surely back by then (a loop's blocks, each against
                # every earlier one).
                key = pool(slot)
                firsts = first_frees[key]
                end = bisect_left(firsts, (take, -1))
                others = [held[key][n] for _, n in firsts[max(0, end - NEARBY):end]]
                others += islice((b for b, threads in foreign.get(key, ()) if threads - {slot.thread}), NEARBY)
                others = [other for other in {id(b): b for b in others}.values() if other is not slot
                          and not 0 <= back_by.get(id(other), -1) <= take]
                if others:
                    counted = Counter(self.tensors[b.tensor].name for b in [slot] + others)
                    names = ", ".join(f"`{name}`" if n == 1 else f"{n} blocks of `{name}`" for name, n in counted.items())
                    # This thread's blocks come back together there in some timing; this one alone
                    # only where no other shares a stream it was recorded on (whose work, done
                    # for one, would be done for the other) or was recorded by another thread.
                    alone = end <= NEARBY and not freeing[pool(slot)] - {slot.thread} and not any(
                        thread != slot.thread or stream in streams
                        for other in others for _, thread, stream in recorded.get(id(other), ()))
                    if not freeing[pool(slot)] - {slot.thread}:
                        together.add(take)
                    if alone and len(opened) < MAX_RETURNS:
                        opened.append(take)
                    entry = unmodelled.setdefault(take, (f"blocks held out of its pool ({names}) coming back", []))
                    if alone and len(opened) and opened[-1] == take:
                        entry[1].append(f"`{self.tensors[slot.tensor].name}` alone")
                    break
                if len(opened) == MAX_RETURNS:
                    self._not_modelled(said, take, f"`{self.tensors[slot.tensor].name}`'s block coming back this "
                                                   f"late ({MAX_RETURNS} earlier allocations are checked)")
                    break
                opened.append(take)
            if opened:
                candidates[free] = [(take, streams) for take in opened]
        # (each thread's first frees: every process has an allocator of its own, and a thread
        # array's ranks would share the count otherwise, so that more ranks checked fewer)
        kept = _first_per_thread(sorted(candidates.items()), lambda item: events[item[0]].thread, MAX_RELEASES)
        timings = [{free: (take, streams)} for free, takes in kept for take, streams in takes]
        # All of this thread's held blocks of the pool freed before the alloc, back together there.
        together_checked: set[int] = set()
        # (each thread's first allocs: an allocator each, as for MAX_RELEASES)
        for take in _first_per_thread(sorted(together), lambda take: events[take].thread, MAX_TOGETHER):
            key = pool(slots[events[take].slot])
            back = {free: (take, streams) for slot, free, streams, _ in blocks
                    if pool(slot) == key and free < take and free not in certain}
            if len(back) > 1:
                timings.append(back)
                together_checked.add(take)
        # Each of this thread's held blocks of a pool back at the first allocation after its free
        # (the device keeping pace, the steady state of a training loop): a block that took an
        # earlier one's bytes may then come back alone, though both were recorded on one stream.
        paced: set[int] = set()  # alloc events at which a block comes back in that timing
        for key in dict.fromkeys(pool(slot) for slot, _, _, _ in blocks):
            mine = [(slot, free, streams, takes) for slot, free, streams, takes in blocks if pool(slot) == key]
            if freeing[key] - {mine[0][0].thread}:  # (as for all together: one thread frees the pool's blocks)
                continue
            pace = {free: (takes[0], streams) for _, free, streams, takes in mine if free not in certain}
            if len(set(take for take, _ in pace.values())) > 1 and pace not in timings:
                timings.append(pace)
                paced.update(take for take, _ in pace.values())
        for take, (what, tried_alone) in sorted(unmodelled.items()):
            tried = tried_alone + (["all together"] if take in together_checked else [])
            if take in paced:
                tried.append("each at the first allocation after its free")
            self._not_modelled(said, take, what
                               + (f" other than {', '.join(tried[:-1])}{' or ' if len(tried) > 1 else ''}{tried[-1]}"
                                  if tried else ""))
        # (allocs past MAX_TOGETHER keep SP065's "not modelled", a warning, as a loop's would)
        return timings, certain, len(candidates) - len(kept)

    def _waited(self, free: int, take: int, streams: tuple[int, ...],
                setters: tuple[dict[int, set[int]], dict[int, list[int]]]) -> bool:
        """Whether the thread surely waits, between a free and an alloc, for the work enqueued on
        each of `streams` by the free (the allocator's event there). Read in program order from
        the free: a stream's later work comes after another stream's work where it waits on an
        event whose latest record, after the free, is on that stream (`wait E`, `wait_stream`);
        the thread has waited for a stream, and what that stream's work comes after, at a sync
        of it (or of its device, or all), a sync or query of such an event, a blocking copy on
        it, or an `await` of a notify the stream sets (and nothing else does). Also through one
        other host thread: the thread notifies it after the free, and awaits a notify it sets
        after awaiting that one and syncing (`_handed_back`). Events another thread records too
        count for nothing (which record a wait binds to would depend on the interleaving).
        `setters`: `_setters()` of the program."""
        begin, end = self.free_statements.get(free), self.slots[self.tensor_events[take].slot].statement
        if begin is None or end is None:
            return False
        statements = self.statements
        thread = statements[begin].thread
        recorders, sets = setters
        after: dict[int, set[int]] = {}  # stream -> the streams whose work (since the free) it comes after
        latest: dict[int, int] = {}  # event -> the stream of its latest record since the free
        notified: dict[int, int] = {}  # notify -> the stream that last set it since the free
        handed: dict[int, dict[int, set[int]]] = {}  # notify the thread set since the free -> `after` then
        done: set[int] = set()

        def behind(stream: int) -> set[int]:
            return {stream} | after.get(stream, set())

        def flag(event: int) -> bool:  # (the events a `wait_stream` records are made after the declared ones)
            return event < len(self.events) and self.events[event].flag

        for j in range(begin + 1, end):
            st = statements[j]
            if st.thread != thread:
                continue
            if st.op is Op.RECORD and st.event is not None and st.stream is not None:
                if recorders[st.event] - {thread}:
                    continue
                latest[st.event] = st.stream
            elif st.op is Op.WAIT and st.event is not None and st.stream is not None and st.event in latest \
                    and not flag(st.event):
                after.setdefault(st.stream, set()).update(behind(latest[st.event]))
            elif st.op is Op.NOTIFY and st.stream is not None and st.notify is not None \
                    and len(sets[st.notify]) == 1:  # (nothing else sets it)
                notified[st.notify] = st.stream
            elif st.op is Op.NOTIFY and st.stream is None and st.notify is not None and len(sets[st.notify]) == 1:
                handed[st.notify] = {stream: set(streams) for stream, streams in after.items()}
            elif st.op is Op.AWAIT and st.stream is None and st.notify in notified:
                done |= behind(notified[st.notify])
            elif st.op is Op.AWAIT and st.stream is None and st.notify is not None and len(sets[st.notify]) == 1:
                done |= self._handed_back(thread, self.statements[sets[st.notify][0]], handed)
            elif st.op is Op.SYNC:
                for stream in st.streams:
                    done |= behind(stream)
                if st.sync is SyncKind.EVENT and st.target in latest and not flag(st.target):
                    done |= behind(latest[st.target])
            elif st.blocking and st.stream is not None:
                done |= behind(st.stream)
        return all(stream in done for stream in streams)

    def _handed_back(self, thread: int, setter: Statement, handed: dict[int, dict[int, set[int]]]) -> set[int]:
        """The streams `thread` has surely waited for on awaiting the notify `setter` alone sets,
        where another host thread sets it: that thread's syncs (of streams, devices or all) and
        blocking copies between its first await of a notify `thread` set once since the free
        (`handed`, with the stream waits `thread` had enqueued by then) and `setter`. The work
        they wait for includes all `thread` enqueued before it handed off."""
        if setter.stream is not None or setter.thread == thread:
            return set()
        since: dict[int, set[int]] | None = None
        done: set[int] = set()
        for j in self.threads[setter.thread].statements if setter.thread < len(self.threads) else ():
            if j >= setter.index:
                break
            st = self.statements[j]
            if since is None:
                if st.op is Op.AWAIT and st.stream is None and st.notify in handed:
                    since = handed[st.notify]
            elif st.op is Op.SYNC:
                done.update(*({stream} | since.get(stream, set()) for stream in st.streams))
            elif st.blocking and st.stream is not None:
                done |= {st.stream} | since.get(st.stream, set())
        return done

    def _setters(self) -> tuple[dict[int, set[int]], dict[int, list[int]]]:
        """Of the program just lowered: the threads that record each event, and the statements
        that set each notify (`_waited` trusts only what one thread records, and a notify only
        one statement sets)."""
        recorders: dict[int, set[int]] = defaultdict(set)
        sets: dict[int, list[int]] = defaultdict(list)
        for index, st in enumerate(self.statements):
            if st.op is Op.RECORD and st.event is not None:
                recorders[st.event].add(st.thread)
            elif st.op is Op.NOTIFY and st.notify is not None:
                sets[st.notify].append(index)
        return recorders, sets

    def _not_modelled(self, said: set, take: int, what: str) -> None:
        """SP065 at an allocation whose block depends on a timing of the allocator's that no
        program checks (one warning per line)."""
        statement = self.statements[self.slots[self.tensor_events[take].slot].statement]
        if statement.span in said:
            return
        said.add(statement.span)
        self.warnings.append(warning(
            Code.SP065, f"which block this allocation takes depends on {what}, which is not modelled",
            statement.span, "this allocation",
            help="a use of those blocks on a stream they were not recorded on may race with this tensor "
                 "unseen: sync the recorded streams before the allocation (the blocks then come back in "
                 "every execution), or allocate from another stream's pool"))

    def too_many(self, count: int) -> None:
        first = self.first_choose()
        number = f"{count:,}" if count <= _COUNT_CAP else f"more than {_COUNT_CAP:,}"
        raise SpecError(error(
            Code.SP026, f"{number} branch combinations exceed the limit of {MAX_VARIANTS}",
            first.span if first is not None else None, "the first `choose`" if first is not None else "",
            help="every combination of `choose` branches is checked as its own program; "
                 "fewer `choose`s, fewer branches, or fewer loop iterations around them keep it small"))

    def too_large_together(self, combinations: int) -> None:
        """Each program is within the limit, but all of them together are not: every one is
        checked, so together they are the work."""
        first = self.first_choose()
        raise SpecError(error(
            Code.SP018, f"its {combinations:,} programs (branch combinations) together unroll past the "
                        f"limit of {self.max_statements:,} lowered statements",
            first.span if first is not None else None, "the first `choose`" if first is not None else "",
            help="every combination of `choose` branches is its own program; fewer combinations or "
                 "fewer loop iterations keep it small, or raise the limit with --max-statements N"))

    def first_choose(self) -> ast.Choose | None:
        return next((statement for decl in self.thread_decls for statement in ast.nested_statements(decl.body)
                     if isinstance(statement, ast.Choose)), None)

    def freed_without_sync(self, memory: int) -> bool:
        """Whether a host `free` of `memory` here is `cudaFree` of `cudaMallocAsync` memory,
        which does not synchronize: this thread's latest `alloc` of it so far is a stream one,
        or, with none yet, only stream `alloc`s name its buffer. Where other threads allocate
        it the other way too, the live allocation depends on the interleaving: both readings
        are checked, as a driver choice (`FREE`)."""
        if self._allocated_by is None:
            found: dict[bool, dict[int, set[tuple[int, bool]]]] = {True: defaultdict(set), False: defaultdict(set)}
            for position, decl in enumerate(self.thread_decls):
                for statement in ast.nested_statements(decl.body):
                    if isinstance(statement, (ast.AllocTask, ast.HostAlloc)):
                        whole = ast.AccessRef(statement.access.name, (), statement.access.span)
                        try:
                            region = self.region(whole, {}, whole_arrays=True)
                        except (SpecError, _Skip):
                            continue  # reported where the statement is lowered
                        if not region.tensor:
                            for element in region.memories:
                                found[isinstance(statement, ast.AllocTask)][element].add((position, decl.count is not None))
            self._allocated_by = found
        own = self.latest_alloc_on_stream.get((self.current_thread, memory))
        here = self.current_decl_position
        elsewhere = {on_stream for on_stream in (True, False)
                     if any(position != here or array for position, array in self._allocated_by[on_stream][memory])}
        kinds = elsewhere | ({own} if own is not None else set())
        if own is None and not kinds:
            return False  # (never allocated: declared memory, cudaMalloc'd before the program)
        if len(kinds) == 1:
            return True in kinds
        self.driver_choices.add(FREE)
        return not self.cuda_sync_first

    def count_combinations(self) -> int:
        """How many combinations of branches the `choose`s of every thread make (capped)."""
        self.choosy: dict[int, bool] = {}
        self.count_steps = 0
        total = 1
        for decl in self.thread_decls:
            count = self.array_count(decl.count, "thread")
            for i in range(count or 1):
                total *= self.count_block(decl.body, {} if count is None else {decl.name.text: i})
                if total > _COUNT_CAP:
                    return total
        return total

    def has_choose(self, body) -> bool:
        key = id(body)
        found = self.choosy.get(key)
        if found is None:  # (plain loops: one frame per level of nesting, which may be 200 deep)
            found = False
            for s in body:
                if isinstance(s, ast.Choose):
                    found = True
                elif isinstance(s, (ast.For, ast.Group)):
                    found = self.has_choose(s.body)
                elif isinstance(s, ast.If):
                    for block in s.bodies():
                        found = found or self.has_choose(block)
                if found:
                    break
            self.choosy[key] = found
        return found

    def count_block(self, body, env: dict[str, int]) -> int:
        if not self.has_choose(body):
            return 1
        env = dict(env)
        total = 1
        for statement in body:
            self.count_steps += 1
            if total > _COUNT_CAP or self.count_steps > self.max_statements:
                return total
            try:
                if isinstance(statement, ast.Let):
                    env[statement.variable.text] = self.evaluate(statement.value, env)
                elif isinstance(statement, ast.For):
                    if not self.has_choose(statement.body):
                        continue
                    low, high = self.evaluate(statement.low, env), self.evaluate(statement.high, env)
                    for value in range(low, high):
                        total *= self.count_block(statement.body, {**env, statement.variable.text: value})
                        self.count_steps += 1
                        if total > _COUNT_CAP or self.count_steps > self.max_statements:
                            return total
                elif isinstance(statement, ast.Group):
                    total *= self.count_block(statement.body, env)
                elif isinstance(statement, ast.Choose):
                    total *= sum(self.count_block(branch, env) for branch in statement.branches)
                elif isinstance(statement, ast.If):
                    total *= self.count_block(self.taken(statement, env), env)
            except (SpecError, _Skip):
                return total  # the lowering itself reports it
        return total

    def decide(self, node: ast.Choose, env: dict[str, int], loops: tuple[ast.For, ...]) -> int:
        """Which branch this instance of a `choose` takes in the program being lowered."""
        position = len(self.decisions)
        taken = self.prefix[position] if position < len(self.prefix) else 0
        names = ([self.thread_var] if self.thread_var else []) + [loop.variable.text for loop in loops]
        bound = ", ".join(f"{name}={env[name]}" for name in dict.fromkeys(names) if name in env)
        where = f"line {node.span.line}" + (f" ({bound})" if bound else "")
        self.decisions.append((taken, len(node.branches), f"{where}: branch {taken + 1} of {len(node.branches)}"))
        return taken

    # -- one program -----------------------------------------------------------------------

    def run(self, prefix: list[int], cuda_sync_first: bool, released: dict | None = None) -> Program:
        """Lower every thread taking the branches in `prefix` (then every first branch).
        `released` (`release_candidates`): free tensor event -> (the alloc event that takes the
        recorded block back, the streams it was recorded on). Runs again when it found a rank
        whose comm calls are on several streams (`comm_call`): the calls before the first one
        off its member stream wait and record too."""
        chained, warnings, warned = len(self.chained), len(self.warnings), len(self.warned)
        program = self.run_once(prefix, cuda_sync_first, released)
        if len(self.chained) > chained and not self.errors:
            del self.warnings[warnings:], self.warned[warned:]
            program = self.run_once(prefix, cuda_sync_first, released)
        return program

    def run_once(self, prefix: list[int], cuda_sync_first: bool, released: dict | None) -> Program:
        self.prefix = prefix
        self.chain_events: dict[tuple[int, int], int] = {}
        """Chained (comm, member stream) -> the event its calls record after each call."""
        self.group_records: list[tuple] = []
        """`comm_call`'s records inside a `group`, emitted after its launch."""
        self.claimed_defaults = set()
        self.released: dict[int, tuple[int, tuple[int, ...]]] = released or {}
        self.release_syncs: dict[int, list[int]] = {}
        """Alloc tensor event -> the allocator's events it stands behind (`released`)."""
        self.free_statements: dict[int, int | None] = {}
        """Free tensor event -> its statement."""
        self.decisions: list[tuple[int, int, str]] = []
        self.cuda_sync_first = cuda_sync_first
        self.driver_choices: set[str] = set()
        """Calls lowered so far that the CUDA driver may or may not synchronize (`cuda_variant`):
        each spec with one is checked both ways, `cuda_sync_first` saying which."""
        self.budget = self.iterations = self.evaluated = 0
        # Each variant starts from the declarations (a comm may already name a default stream).
        declared = (list(self.memories), list(self.streams), list(self.events), dict(self.streams_on),
                    dict(self.default_streams))
        self.threads = []
        self.statements = []
        self.in_group = False
        """Inside a `group`: its collectives wait in `deferred` for its end."""
        self.next_batch = 0
        self.deferred: list[tuple] = []
        self.staged = 0
        self.items = 0
        self.implicit_events: dict[tuple, int] = {}
        self.graph_streams: dict[tuple, int] = {}
        """(exec, declared stream) -> the stream its captured work runs on at a launch."""
        self.graph_events: dict[tuple, int] = {}
        """(exec, declared event) -> the graph's own copy of the event."""
        self.graph_launchers: dict[tuple, tuple[int, Span]] = {}
        """Exec -> the thread that launched it first, and where."""
        self.graph_launches: list[tuple[int, tuple, Span, str]] = []
        """Every launch in the order lowered: the statement that began it, its exec, where, the
        graph's name (`graph_memory`)."""
        self.graph_labels: dict[int, int] = {}
        """The stream of a graph's captured work -> the declared stream it was captured on."""
        self.events_captured: dict[int, tuple[str, Span]] = {}
        self.events_outside: dict[int, Span] = {}
        """Declared event -> where a graph body (which graph) or a statement outside every graph
        first named it: an event that both name is reported (`shared_events`)."""
        self.event_nodes: dict[Span, str] = {}
        """Of those outside, the ones that an event node (`wait E external`) named, and its graph."""
        self.capture = None
        self.call_streams: dict[tuple[int, int], int] = {}
        """(device, thread) -> the stream of its host `memcpy`/`memset` under CANN (`call_stream`)."""
        self.slots: list[Slot] = []
        self.tensor_events: list[TensorEvent] = []
        self.placed: list[int] = []
        self.stream_sets: list[int] = []
        self.legacy_markers: list[int | None] = []
        """Syncs that wait for a legacy stream and the blocking streams of its device
        (`assign_contexts` keeps those of its process)."""
        self.blocking_syncs: list[tuple[int, str]] = []
        """Syncs of a blocking CUDA stream, and the form each takes as a marker
        (`fill_legacy_streams`)."""
        self.exact_durations: list[tuple[int, Fraction]] = []
        self.latest_alloc_on_stream: dict[tuple[int, int], bool] = {}
        """Per thread and memory: whether the thread's latest `alloc` of it so far was a stream one."""
        try:
            for decl in self.thread_decls:
                self.thread(decl)
            self.shared_events()
            self.graph_memory()
            blocks = self.place_tensors({free: alloc for free, (alloc, _) in self.released.items()})
            self.fill_stream_sets()
            self.fill_legacy_streams()
            self.assign_contexts()
            groups = self.groups()
            program = Program(
                self.path, self.source, self.title, tuple(self.devices), tuple(self.memories) + blocks,
                tuple(self.streams), tuple(self.events), tuple(self.notifies), tuple(self.comms),
                tuple(self.threads), tuple(self.statements), groups, self.expectations,
                tuple(self.buffer_spans), exact_durations=tuple(self.exact_durations),
                exact_launches=tuple(self.exact_launches),
            )
        finally:
            self.memories, self.streams, self.events, self.streams_on, self.default_streams = declared
        found = program_warnings(program, self.named_streams | self.unlaunched_graph_streams()) + self.unlaunched_graphs()
        self.warnings += found
        self.warned.append({(w.code, w.primary_span) for w in found})
        return program

    def thread(self, decl: ast.ThreadDecl) -> None:
        count = self.array_count(decl.count, "thread")
        self.current_decl_position = next(k for k, d in enumerate(self.thread_decls) if d is decl)
        """The thread declaration being lowered, by position (`freed_without_sync`)."""
        for i in range(count or 1):
            index = len(self.threads)
            self.current_thread = index
            self.thread_var = decl.name.text if count is not None else None
            self.thread_statements: list[int] = []
            self.process_streams: set[int] | None = set() if decl.process else None
            """A `process` thread: the streams it has enqueued work on (or allocated a tensor
            from) so far. Its device-wide waits cover its own work alone, all of it on them
            (`process_sync`)."""
            self.tensor_slot: dict[int, int] = {}
            """The slot each tensor is in on this thread: its latest `alloc` here, or a shared use."""
            self.thread_name = decl.name.text if count is None else f"{decl.name.text}[{i}]"
            if decl.process:
                self.claim_defaults(decl, {} if count is None else {decl.name.text: i})
            self.block(decl.body, {} if count is None else {decl.name.text: i}, ())
            self.threads.append(Thread(index, self.thread_name, tuple(self.thread_statements), decl.span,
                                       decl.process))

    # -- the size of the threads, before unrolling them -----------------------------------------

    def check_size(self) -> None:
        """SP018 before anything is unrolled, when the threads would lower to more than
        `max_statements` statements. Lowering counts as it goes too (`spend`), but nested
        loops multiply: a 1 KB spec of 30 nested two-trip loops built a million statements
        (6-42 s, 1-2 GB) before that count stopped it. Here a loop body whose size does not
        depend on the loop's variable is counted once. Where the size cannot be told without
        lowering (an error that lowering reports, a bound too large, too much work), this
        says nothing and lowering's own count decides."""
        limit = self.max_statements
        self.sizes_known: dict[tuple, int] = {}
        self.sizing: set[int] = set()
        self.names_used: dict[int, frozenset[str]] = {}
        self.size_work = 0
        total = 0
        try:
            for decl in self.thread_decls:
                count = self.array_count(decl.count, "thread")
                for i in range(count or 1):
                    env = {} if count is None else {decl.name.text: i}
                    for statement, size in self.sizes(decl.body, env):
                        total += size
                        if total > limit:
                            what = "loop" if isinstance(statement, ast.For) else "thread"
                            raise self.unrolls_too_far(statement.span, what, total)
        except (_SizeUnknown, _Skip):
            return
        except SpecError as exc:
            if exc.diagnostic.code is Code.SP018:
                raise
            return  # lowering reports it where it belongs

    def sizes(self, body, env: dict[str, int]):
        """(statement, how many statements it lowers to) for each statement of `body`."""
        env = dict(env)
        for statement in body:
            self.size_work += 1  # every statement read: a loop of many `if`s lowers nothing either
            if self.size_work > self.max_statements:
                raise _SizeUnknown
            if isinstance(statement, ast.Let):
                env[statement.variable.text] = self.evaluate(statement.value, env)
                yield statement, 0
            elif isinstance(statement, ast.For):
                low, high = self.evaluate(statement.low, env), self.evaluate(statement.high, env)
                trips = max(0, high - low)
                if trips > self.max_statements:
                    raise _SizeUnknown  # lowering reports the loop itself
                variable = statement.variable.text
                if variable not in self.names_in(statement.body):
                    # (its `let`s may still read it: evaluated at the first trip, as any will do)
                    yield statement, trips * self.size(statement.body, {**env, variable: low}) if trips else 0
                    continue
                size = 0
                for value in range(low, high):
                    self.size_work += 1
                    if self.size_work > self.max_statements:
                        raise _SizeUnknown
                    size += self.size(statement.body, {**env, variable: value})
                    if size > self.max_statements:
                        break
                yield statement, size
            elif isinstance(statement, ast.Group):
                yield statement, self.size(statement.body, env)
            elif isinstance(statement, ast.Choose):
                yield statement, max(self.size(branch, env) for branch in statement.branches)
            elif isinstance(statement, ast.If):
                yield statement, self.size(self.taken(statement, env), env)
            elif isinstance(statement, ast.LaunchTask):
                yield statement, 3 + self.launched_size(statement, env)
            else:
                yield statement, 1 + self.more_elements(statement)

    def launched_size(self, statement: ast.LaunchTask, env: dict[str, int]) -> int:
        """How many statements the body of the graph a launch names lowers to."""
        try:
            element = self.resolve(statement.graph, env, "graph")
        except SpecError:
            raise _SizeUnknown from None
        decl, graph_env, _ = self.graph_elements[element]
        if element in self.sizing:  # (a graph that launches itself: lowering reports it)
            raise _SizeUnknown
        self.sizing.add(element)
        try:
            return self.size(decl.body, graph_env)
        finally:
            self.sizing.discard(element)

    def more_elements(self, statement) -> int:
        """Accesses beyond one per statement that `reads`/`writes` of whole arrays add (they
        count on the limit as statements: `spend_elements`), and statements beyond one that an
        `alloc`/`free` (or `record_stream`) of a whole array lowers to (`lower_statement`).
        Names that do not resolve add none: lowering reports them."""
        extra = 0
        named = [*getattr(statement, "reads", ()), *getattr(statement, "writes", ())]
        if isinstance(statement, (ast.AllocTask, ast.FreeTask, ast.HostAlloc, ast.HostFree)):
            named.append(statement.access)
        elif isinstance(statement, ast.RecordStreamTask):
            named.append(statement.tensor)
        for access in named:
            if access.subscripts:
                continue
            try:
                entity = self.lookup(access.name, *(_MEMORY_KINDS if self.tensors else _BUFFER_KINDS))
            except SpecError:
                continue
            if entity.kind != "alias" and entity.array:
                extra += len(entity.indices) - 1
        self.expanded = self.expanded or extra > 0
        return extra

    def size(self, body, env: dict[str, int]) -> int:
        """How many statements `body` lowers to from `env` (each variant: its largest)."""
        names = self.names_in(body)
        key = (id(body), tuple(sorted((name, env[name]) for name in names if name in env)))
        known = self.sizes_known.get(key)
        if known is None:
            known = self.sizes_known[key] = sum(size for _, size in self.sizes(body, env))
        return known

    def names_in(self, body) -> frozenset[str]:
        """The variables that the size of `body` depends on (at any depth): what its loop
        bounds, `if` conditions and launched graphs' indices read, and what the `let`s they
        read read in turn (a `let` nothing of that reads, `let k = i % 2` for an index, leaves
        the size alone)."""
        names = self.names_used.get(id(body))
        if names is None:
            found: set[str] = set()
            lets: list[tuple[str, frozenset[str]]] = []

            def read(expr) -> None:
                if isinstance(expr, ast.Variable):
                    found.add(expr.name)
                elif isinstance(expr, ast.Negate):
                    read(expr.operand)
                elif isinstance(expr, ast.BinaryOp):
                    read(expr.left)
                    read(expr.right)

            def read_condition(condition) -> None:
                if isinstance(condition, ast.Logical):
                    read_condition(condition.left)
                    read_condition(condition.right)
                else:
                    read(condition.left)
                    read(condition.right)

            for statement in body:
                if isinstance(statement, ast.Let):
                    lets.append((statement.variable.text, frozenset(v.name for v in _variables(statement.value))))
                elif isinstance(statement, ast.LaunchTask):
                    if statement.graph.index is not None:
                        found.update(v.name for v in _variables(statement.graph.index))
                elif isinstance(statement, ast.For):
                    read(statement.low)
                    read(statement.high)
                    found.update(self.names_in(statement.body))
                elif isinstance(statement, ast.Group):
                    found.update(self.names_in(statement.body))
                elif isinstance(statement, ast.Choose):
                    for branch in statement.branches:
                        found.update(self.names_in(branch))
                elif isinstance(statement, ast.If):
                    for condition, _ in statement.branches:
                        read_condition(condition)
                    for branch in statement.bodies():
                        found.update(self.names_in(branch))
            grew = True
            while grew:  # (the lets that what the size reads reads, in turn)
                grew = False
                for variable, reads in lets:
                    if variable in found and not reads <= found:
                        found.update(reads)
                        grew = True
            names = self.names_used[id(body)] = frozenset(found)
        return names

    def unrolls_too_far(self, span: Span, what: str, needed: int | None = None) -> SpecError:
        """SP018 at a loop or thread, counted before unrolling (`check_size`, which knows how
        many statements the threads need up to the end of it: `needed`) or while (`spend`)."""
        note = " (a whole array named counts once per element)" * self.expanded
        counted = f"; the threads need at least {needed:,} by its end" if needed is not None else ""
        return SpecError(error(Code.SP018, f"this {what} unrolls past the limit of {self.max_statements:,} lowered "
                                           f"statements{note}{counted}", span, "unrolls too far",
                               help="shrink the loop, or raise the limit with --max-statements N"
                                    + (f" (N of at least {needed:,})" if needed is not None else "")))

    def spend(self, span: Span, what: str, count: int = 1) -> None:
        self.budget += count
        if self.budget > self.max_statements:
            raise self.unrolls_too_far(span, what)

    def lower_statement(self, statement, env: dict[str, int], loops: tuple[ast.For, ...]) -> None:
        """Lower a statement that is no block, counted on the limit as every statement it lowers
        to (`free y` of an array: one per element; a loop of such frees ran for minutes)."""
        where, what = (loops[0].span, "loop") if loops else (statement.span, "thread")
        self.spend(where, what)
        before = len(self.statements)
        if self.capture is not None:
            self.capture_step(statement, env)
        self.LOWER[type(statement)](self, statement, env, tuple(sorted(env.items())))
        emitted = len(self.statements) - before
        if emitted > 1:
            self.expanded = True
            self.spend(where, what, emitted - 1)

    def block(self, body, env: dict[str, int], loops: tuple[ast.For, ...]) -> None:
        env = dict(env)
        failed = self.failed
        for statement in body:
            if failed and id(statement) in failed:
                if isinstance(statement, ast.Let):
                    env[statement.variable.text] = _BROKEN
                continue
            try:
                if type(statement) in _BLOCKS:
                    self.one(statement, env, loops)
                else:
                    self.lower_statement(statement, env, loops)
            except _Skip:
                failed.add(id(statement))
                if isinstance(statement, ast.Let):
                    env[statement.variable.text] = _BROKEN
            except SpecError as exc:
                if exc.diagnostic.code in _FATAL:
                    raise
                self.record(exc.diagnostic)
                failed.add(id(statement))
                if isinstance(statement, ast.Let):
                    env[statement.variable.text] = _BROKEN

    def one(self, statement, env: dict[str, int], loops: tuple[ast.For, ...]) -> None:
        """Lower one statement of a block (a `let` binds in `env`)."""
        if isinstance(statement, (ast.Let, ast.For, ast.Group, ast.Choose, ast.If)):
            self.count_work(loops, statement)
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
            if not trips:
                self.check_names(statement.body)
            for value in range(low, high):
                self.count_work(loops, statement)
                inner = dict(env)
                inner[statement.variable.text] = value
                self.block(statement.body, inner, loops + (statement,))
        elif isinstance(statement, ast.Group):
            outermost = not self.in_group
            if outermost:
                self.in_group = True
                self.deferred = []
            try:
                self.block(statement.body, env, loops)
            finally:
                if outermost:
                    self.in_group = False
            if outermost:
                self.launch_group()
        elif isinstance(statement, ast.Choose):
            if self.capture is not None:  # (a graph is captured once: every launch runs the same work)
                raise SpecError(error(Code.SP029, "a `choose` cannot be captured into a graph", statement.span,
                                      "not capturable", secondary=((self.capture.span, "graph declared here"),),
                                      help="declare a graph per branch and `choose` between their launches"))
            self.block(statement.branches[self.decide(statement, env, loops)], env, loops)
        elif isinstance(statement, ast.If):
            taken = self.taken(statement, env)
            for body in statement.bodies():
                if body is not taken:
                    self.check_names(body)
            self.block(taken, env, loops)
        else:
            self.lower_statement(statement, env, loops)

    def count_work(self, loops: tuple[ast.For, ...], statement) -> None:
        """Counts one loop iteration or other step that lowers nothing (SP018 at the outermost
        loop past ITERATIONS_PER_STATEMENT times the statement limit)."""
        self.iterations += 1
        if self.iterations > ITERATIONS_PER_STATEMENT * self.max_statements:
            raise SpecError(error(
                Code.SP018, f"this loop runs more than {ITERATIONS_PER_STATEMENT * self.max_statements:,} "
                "iterations and steps that lower nothing in all, past the limit of lowered statements",
                (loops[0] if loops else statement).span,
                "unrolls too far", help="shrink the loop, or raise the limit with --max-statements N"))

    def check_names(self, body) -> None:
        """Every name a block refers to is declared, though the block never runs (a loop of
        no iterations, a branch not taken): an undeclared name is an error wherever it is
        written. (Once per block: a branch inside a loop is not walked again.)"""
        if id(body) in self.names_checked:
            return
        self.names_checked.add(id(body))
        work = list(reversed(body))  # (a stack: the first name in the source is looked up first)
        while work:
            node = work.pop()
            if isinstance(node, (ast.Ref, ast.AccessRef)):
                self.lookup(node.name)
            elif isinstance(node, tuple):
                work.extend(reversed(node))
            elif is_dataclass(node) and not isinstance(node, (ast.Name, ast.Span)):
                work.extend(reversed([getattr(node, f.name) for f in fields(node)]))

    def origin(self, statement, part: int = 0) -> int:
        """The source statement's identity. A graph's work is one per body line and launch
        line: launches at two lines are two places to fix, and are reported apart."""
        key = id(statement) if part == 0 else (id(statement), part)
        if self.capture is not None:
            key = (key, id(self.capture.node))
        return self.origin_ids.setdefault(key, len(self.origin_ids))

    def emit(self, statement, part: int = 0, **fields) -> int | None:
        """Append a statement to the program; a collective inside a `group` waits for the
        group's end (`launch_group`), and then there is no index to return."""
        if self.in_group and OPERATIONS[fields["op"]].collective:
            placed = bool(self.placed) and self.placed[-1] == len(self.statements)
            if placed:  # noted by `touch` for this statement: noted again when it is emitted
                self.placed.pop()
            self.deferred.append((statement, part, fields, placed))
            return None
        return self.append(statement, part, **fields)

    def launch_group(self) -> None:
        """Emit the collectives of the group that just ended. NCCL enqueues them at
        `ncclGroupEnd` (user guide, "Group Calls": inside a group, calls "can return without
        having enqueued the operation on the stream"), one kernel per comm, comm after comm in
        the order the comms joined the group (`ncclGroupCommJoin` keeps program order): the
        calls of one comm are one fused launch (a batch); those of two comms on one stream are
        ordered by it."""
        deferred, self.deferred = self.deferred, []
        rank: dict[int, int] = {}
        for _, _, call, _ in deferred:
            rank.setdefault(call["comm"], len(rank))
        first = self.next_batch
        self.next_batch += len(rank)
        launched: set[tuple[int, int]] = set()
        for statement, part, call, placed in sorted(deferred, key=lambda item: rank[item[2]["comm"]]):
            if (call["comm"], call["stream"]) in launched:
                # (one fused launch: its thread pays the `launch` time once, at the first call,
                # and all of it is enqueued then)
                call = {**call, "costs_launch": False}
            if self.comms[call["comm"]].in_flight and (call["comm"], call["stream"]) in launched:
                # (a `one_in_flight` comm's calls of one rank in one group are one launch: one call)
                call = {**call, "accesses": tuple(a for a in call["accesses"] if self.memories[a.memory].comm is None)}
            launched.add((call["comm"], call["stream"]))
            if placed:
                self.placed.append(len(self.statements))
            self.append(statement, part, batch=first + rank[call["comm"]], **call)
        records, self.group_records = self.group_records, []
        for statement, record in records:  # (`comm_call`: after the launch)
            self.append(statement, 2, **record)

    def append(self, statement, part: int = 0, **fields) -> int:
        index = len(self.statements)
        duration = getattr(statement, "duration", None)
        if isinstance(duration, ast.Duration) and duration.exact is not None and \
                fields.get("duration") == duration.nanoseconds:
            self.exact_durations.append((index, duration.exact))
        operation = OPERATIONS[fields["op"]]
        stream = fields.get("stream")
        if stream is not None and self.process_streams is not None:
            self.process_streams.add(stream)
        if stream is not None and self.devices[self.streams[stream].device].runtime is Runtime.CUDA:
            # NCCL's members spin on their own streams; cudaFreeAsync counts by launch order.
            if operation.collective:
                fields["spins"] = True
            elif fields["op"] is Op.FREE:
                fields["launch_ordered"] = True
        if fields.get("launch_only") and fields["op"] is Op.FREE:
            fields["launch_ordered"] = True
        if self.capture is not None:  # (the launch's call paid for it all: `launch`)
            fields["launch"] = self.capture.begins
            fields["costs_launch"] = False
            # the launch's loop variables too, which tell one launch's work from another's
            fields["bindings"] = tuple(sorted({**dict(self.capture.bindings), **dict(fields.get("bindings", ()))}.items()))
        self.statements.append(Statement(index=index, thread=self.current_thread, span=statement.span,
                                         origin=self.origin(statement, part), **fields))
        self.thread_statements.append(index)
        return index

    # -- host statements

    def host_call(self, node: ast.HostCall, env, bindings) -> None:
        found: list[Access] = []
        for read in node.reads:
            found += self.accesses(read, env, False)
        for written in node.writes:
            found += self.accesses(written, env, True)
        self.emit(node, op=Op.HOST, stream=None, name=node.name.text, accesses=self.touch(tuple(found)),
                  duration=node.duration.nanoseconds if node.duration else 0, bindings=bindings)

    def sync(self, node: ast.Sync | ast.Query, env, bindings) -> None:
        form = f"query {self.text(node.target.span)}" if isinstance(node, ast.Query) else ""
        if node.target is None and self.process_streams is not None:
            self.process_sync(node, "sync all", None, bindings)
            return
        if node.target is None:
            index = self.emit(node, op=Op.SYNC, stream=None, sync=SyncKind.ALL, bindings=bindings)
            self.stream_sets.append(index)
            return
        kinds = ("stream", "event") if isinstance(node, ast.Query) else ("stream", "event", "device")
        kind = "stream" if node.target.member is not None else self.lookup(node.target.name, *kinds).kind
        target = self.resolve(node.target, env, kind)
        if kind == "event":
            self.emit(node, op=Op.SYNC, stream=None, sync=SyncKind.EVENT, target=target, form=form, bindings=bindings)
        elif kind == "device" and self.process_streams is not None:
            self.process_sync(node, f"sync {self.text(node.target.span)}", {target}, bindings)
        elif kind == "device":
            index = self.emit(node, op=Op.SYNC, stream=None, sync=SyncKind.DEVICE, target=target, bindings=bindings)
            self.stream_sets.append(index)
        else:
            blocking = self.blocking_streams(target)
            if blocking:
                # A marker on the legacy stream waits for earlier work of the blocking streams too.
                self.legacy_markers.append(self.emit(
                    node, op=Op.SYNC, stream=None, sync=SyncKind.STREAMS, target=target,
                    streams=(target,) + blocking, form=form or f"sync {self.text(node.target.span)}",
                    bindings=bindings))
            else:
                index = self.emit(node, op=Op.SYNC, stream=None, sync=SyncKind.STREAM, target=target,
                                  streams=(target,), form=form, bindings=bindings)
                if self.waits_for_legacy(target) and not isinstance(node, ast.Query):
                    # (a poll of `cudaStreamQuery` reports the stream's own operations only)
                    self.blocking_syncs.append((index, form or f"sync {self.text(node.target.span)}"))

    def process_sync(self, node, what: str, devices: set[int] | None, bindings, part: int = 0) -> None:
        """A device-wide wait (`sync all`, or the one a call implies on `devices`, None: every
        device) by a `process` thread: it waits for its own work, which is on the streams it
        has used; none yet, and it waits for nothing (no statement)."""
        streams = tuple(sorted(s for s in self.process_streams
                               if devices is None or self.streams[s].device in devices))
        if streams:
            self.emit(node, part=part, op=Op.SYNC, stream=None, sync=SyncKind.STREAMS, target=streams[0],
                      streams=streams, form=f"{what} (the streams this process used)", bindings=bindings)

    def fill_stream_sets(self) -> None:
        """`sync DEVICE` and `sync all` wait for every stream, including implicit ones: every
        one that some task is enqueued on (a stream no task uses is always empty, and waiting
        for it does nothing), one tuple shared by every sync of the same kind and target.
        Listing every declared stream made 2,000 `sync all` over 100,000 streams 1.6 GB."""
        tasked = used = {s.stream for s in self.statements if s.stream is not None}
        # Work that `process` threads enqueue is another process's: no one else waits for it.
        processes = self.process_threads()
        if processes:
            used = {s.stream for s in self.statements if s.stream is not None and s.thread not in processes}
        shared: dict[tuple, tuple[int, ...]] = {}
        for index in self.stream_sets:
            s = self.statements[index]
            key = (s.sync, s.target)
            streams = shared.get(key)
            if streams is None:
                waited = [t.index for t in self.streams if s.sync is SyncKind.ALL or t.device == s.target]
                # (an empty tuple would mean "every stream": `Program.synced_streams`; a stream
                # without tasks waits for nothing)
                streams = shared[key] = (tuple(t for t in waited if t in used)
                                         or tuple([t for t in waited if t not in tasked][:1]))
            if streams:
                self.statements[index] = replace(s, streams=streams)
            else:  # (every stream it would wait for holds only other processes' work)
                self.statements[index] = replace(
                    s, op=Op.HOST, sync=None, target=None, streams=(),
                    form=(s.form or ("sync all" if s.sync is SyncKind.ALL else f"sync {self.devices[s.target].name}"))
                    + " (only other processes' work to wait for)")

    def process_threads(self) -> frozenset[int]:
        """The threads lowered so far that are declared `process`."""
        return frozenset(t.index for t in self.threads if t.process)

    def assign_contexts(self) -> None:
        """Each stream a `process` thread enqueues work on belongs to that process (the first
        one, where SP062 warns of two), and a marker on a legacy stream waits only for the
        blocking streams of its own process (`Stream.context`). Under `queues N` each
        process's streams take its own N queues in turn, in the order they are declared; so
        do the main process's (the streams no `process` thread uses)."""
        processes = self.process_threads()
        if not processes:
            return
        context: dict[int, int] = {}
        for s in self.statements:
            if s.stream is not None and s.thread in processes:
                context.setdefault(s.stream, s.thread)
        for key, stream in self.default_streams.items():  # (a process's own default stream, even if only synced)
            if isinstance(key, tuple) and key[1] in processes:
                context.setdefault(stream, key[1])
        taken: dict[tuple[int, int | None], int] = {}  # (device, process) -> its streams numbered so far
        for old in list(self.streams):
            thread = context.get(old.index, old.context)  # (None: the main process)
            queues = self.devices[old.device].queues
            position = taken.get((old.device, thread), 0)
            taken[(old.device, thread)] = position + 1
            self.streams[old.index] = replace(old, context=thread, queue=position % queues if queues else old.queue)
        streams = self.streams
        for k in self.legacy_markers:
            if k is None:
                continue
            s = self.statements[k]
            # (a stream no process enqueued on yet, synced by a process: that process's)
            own = streams[s.target].context
            if own is None and s.thread in processes:
                own = s.thread
            kept = tuple(t for t in s.streams if t == s.target or streams[t].context == own)
            if kept != s.streams:
                self.statements[k] = replace(s, streams=kept)

    def host_notify(self, node: ast.HostNotify | ast.HostAwait, env, bindings) -> None:
        op = Op.NOTIFY if isinstance(node, ast.HostNotify) else Op.AWAIT
        self.emit(node, op=op, stream=None, notify=self.resolve(node.notify, env, "notify"), bindings=bindings)

    def host_lifetime(self, node: ast.HostAlloc | ast.HostFree, env, bindings) -> None:
        free = isinstance(node, ast.HostFree)
        region = self.region(node.access, env, whole_arrays=True)
        if region.tensor:
            if not free:
                raise SpecError(error(Code.SP027, "a tensor is allocated from a stream's pool", node.span,
                                      "no stream", help=f"write `STREAM: alloc {self.text(node.access.span)}`"))
            if node.nosync:
                raise SpecError(error(Code.SP012, f"`{node.access.name.text}` is a tensor, not a buffer", node.access.span,
                                      "`free ... nosync` takes a buffer", help=(
                                          f"write `free {self.text(node.access.span)}`: a tensor's free is PyTorch's `del`, "
                                          "which returns it to the caching allocator and never synchronizes")))
            self.whole_tensor(node.access, region)
            for element in region.memories:
                self.free_tensor(node, element, bindings)
            return
        for access in self.lifetimes(node.access, region):
            memory = self.memories[access.memory]
            if not free:
                self.latest_alloc_on_stream[self.current_thread, access.memory] = False
            cuda = memory.device is not None and self.devices[memory.device].runtime is Runtime.CUDA
            nosync = node.nosync  # (`free X nosync`: cuMemUnmap/cuMemRelease; `alloc X nosync`: a pool's hand-out)
            if cuda and not free and not nosync:
                # CUDA programming guide, "Implicit Synchronization": commands issued before and
                # after a device memory allocation do not run concurrently. Drivers do not keep
                # to it (the copy after cudaMalloc overlaps the kernel before it in CuSan's
                # test pass/16_cuda_malloc_implicit_sync, marked XFAIL), so both are checked.
                self.driver_choices.add(MALLOC)
            if cuda and not nosync and (self.cuda_sync_first if not free else not self.freed_without_sync(access.memory)):
                # cudaFree synchronizes the device (the same list: a device memory
                # deallocation), but not for stream-ordered memory: it "will not perform any
                # implicit synchronization when the pointer was allocated with cudaMallocAsync".
                call = "cudaFree" if free else "cudaMalloc"
                what = f"{'free' if free else 'alloc'} {access.written_as} ({call} synchronizes the device)"
                if self.process_streams is not None:
                    self.process_sync(node, what, {memory.device}, bindings, part=1)
                else:
                    index = self.emit(node, part=1, op=Op.SYNC, stream=None, sync=SyncKind.DEVICE,
                                      target=memory.device, form=what, bindings=bindings)
                    self.stream_sets.append(index)
            if memory.on_host and memory.pinned and not nosync:
                self.pinned_lifetime(node, access, free, bindings)
            self.emit(node, op=Op.FREE if free else Op.ALLOC, stream=None, memory=access.memory,
                      accesses=(access,) if free else (), bindings=bindings,
                      form=f"{'free' if free else 'alloc'} {access.written_as} nosync" if nosync else "")

    def pinned_lifetime(self, node: ast.HostAlloc | ast.HostFree, access: Access, free: bool, bindings) -> None:
        """With CUDA devices, `free` of pinned host memory (`cudaFreeHost`) synchronizes every
        CUDA device, as drivers do (NVIDIA/nccl#48: a thread in cuFreeHost hangs against the
        other devices' spinning NCCL kernels; tudasc/cusan-tests' _cudafreeHost test finds the
        kernels before and after it apart). Its `alloc` (`cudaMallocHost`) is on the
        programming guide's "Implicit Synchronization" list, but drivers do not keep to it
        (cusan-tests' _cudaHostAlloc test finds the kernels overlapping): checked both ways,
        as `cudaMalloc`. The synchronization is a `sync all`, or a `sync DEVICE` per CUDA
        device when other devices are declared."""
        cuda = [d.index for d in self.devices if d.runtime is Runtime.CUDA]
        if not cuda:
            return
        if not free:
            self.driver_choices.add(HOST_ALLOC)
            if not self.cuda_sync_first:
                return
        call = "cudaFreeHost" if free else "cudaMallocHost"
        form = f"{'free' if free else 'alloc'} {access.written_as} ({call} synchronizes every device)"
        if self.process_streams is not None:
            self.process_sync(node, f"{'free' if free else 'alloc'} {access.written_as} ({call} synchronizes "
                                    "the devices)", set(cuda), bindings, part=1)
            return
        if len(cuda) == len(self.devices):
            self.stream_sets.append(self.emit(node, part=1, op=Op.SYNC, stream=None, sync=SyncKind.ALL,
                                              form=form, bindings=bindings))
            return
        for device in cuda:
            self.stream_sets.append(self.emit(node, part=3 + device, op=Op.SYNC, stream=None, sync=SyncKind.DEVICE,
                                              target=device, form=form, bindings=bindings))

    def said_at(self, code: Code, span) -> bool:
        """Whether `code` was said at `span` already: once per line, however often a loop runs it."""
        return any(w.code is code and w.primary_span == span for w in self.warnings)

    def whole_lifetime(self, access_ref: ast.AccessRef, region: _Region, name: str, size: int, what: str) -> None:
        """SP053, once per line, for an `alloc` or `free` that names a byte range: it acts on the
        whole buffer (the contract: `alloc` starts and `free` ends a buffer's lifetime, and a free
        writes the whole buffer, whatever range it names), and on the whole tensor, which the
        allocator takes or hands back."""
        if (region.start != 0 or region.end != size) and not self.said_at(Code.SP053, access_ref.span):
            self.warnings.append(warning(
                Code.SP053, f"`alloc` and `free` act on the whole of `{name}`", access_ref.span,
                f"{region.end - region.start} of {size} bytes named, all {size} taken",
                help=f"name the {what} itself: `{name}`, or declare the part as a {what} of its own"))

    def whole_tensor(self, access_ref: ast.AccessRef, region: _Region) -> None:
        if not region.array:
            tensor = self.tensors[region.memories[0]]
            self.whole_lifetime(access_ref, region, tensor.name, tensor.size, "tensor")

    def lifetimes(self, access_ref: ast.AccessRef, region: _Region) -> tuple[Access, ...]:
        """`alloc`/`free` of a whole buffer, or of every element of a whole array."""
        if region.array:
            return tuple(Access(m, 0, self.memories[m].size, True, access_ref.span, self.memories[m].name)
                         for m in region.memories)
        memory = self.memories[region.memories[0]]
        self.whole_lifetime(access_ref, region, memory.name, memory.size, "buffer")
        entity = self.entities.get(access_ref.name.text)
        written = self.text(access_ref.span) if entity is not None and entity.kind == "alias" else memory.name
        return (Access(memory.index, 0, memory.size, True, access_ref.span, written),)

    def claim_defaults(self, decl: ast.ThreadDecl, env: dict[str, int]) -> None:
        """A comm that lists `DEVICE.default` (declarations belong to no process) names the
        default stream of the process that writes `DEVICE.default:` for that device first (NCCL
        on each rank's default stream): it becomes that process's default stream there, for its
        kernels, calls, memsets and copies alike, unless a thread of the main process may use
        that device's default stream (`main_process_defaults`). Read off the thread's statements
        before lowering them (a reference whose device depends on a loop variable claims
        nothing; an `if` that the thread's index already decides claims for its branch only)."""
        for statement in self.reachable_statements(decl.body, env, into_choose=False):
            legacy = self.quiet_legacy_stream(statement, env)
            key = None if legacy is None else (self.streams[legacy].device, self.current_thread)
            if key is not None and key not in self.default_streams and legacy not in self.claimed_defaults:
                # (the process's default stream on that device, from its first statement)
                self.default_streams[key] = legacy
                self.claimed_defaults.add(legacy)
        for statement in self.reachable_statements(decl.body, env):
            ref = _default_ref(statement)
            device = None if ref is None else self.quiet_device(ref, env)
            if device is None:
                continue
            if self.main_process_defaults is None or device in self.main_process_defaults:
                continue  # (the main process's threads use that device's default stream: it stays theirs)
            shared = self.default_streams.get(device)
            if (shared is not None and shared not in self.claimed_defaults and (device, self.current_thread)
                    not in self.default_streams and any(shared in members for members in self.comm_members)):
                self.default_streams[(device, self.current_thread)] = shared
                self.claimed_defaults.add(shared)

    def quiet_legacy_stream(self, statement, env: dict[str, int]) -> int | None:
        """The declared legacy stream of a CUDA device that `statement` enqueues onto, read
        before it is lowered; None for any other (or one that does not resolve yet)."""
        ref = getattr(statement, "stream", None)
        if not isinstance(ref, ast.Ref) or ref.member is not None:
            return None
        entity = self.entities.get(ref.name.text)
        if entity is None or entity.broken or entity.kind != "stream" or (ref.index is not None and any(
                v.name not in env for v in _variables(ref.index))):
            return None
        try:
            stream = self.resolve(ref, env, "stream")
        except (SpecError, _Skip):  # (lowering the statement reports it)
            return None
        s = self.streams[stream]
        return stream if s.mode is StreamMode.LEGACY and self.devices[s.device].runtime is Runtime.CUDA else None

    def reachable_statements(self, body, env: dict[str, int], into_choose: bool = True):
        """`ast.nested_statements`, but of an `if` whose conditions read only variables of
        `env` (a thread array's index), only the branch it takes (and, `into_choose` false,
        no branch of a `choose`: each program takes one). A `for` or `let` that binds one of
        those names again takes it out of `env` where it does."""
        for statement in body:
            yield statement
            if isinstance(statement, ast.Let) and statement.variable.text in env:
                env = {name: value for name, value in env.items() if name != statement.variable.text}
            if isinstance(statement, ast.If):
                blocks = statement.bodies()
                if all(v.name in env for condition, _ in statement.branches for v in _variables(condition)):
                    try:
                        blocks = (self.taken(statement, env),)
                    except (SpecError, _Skip):  # (lowering the statement reports it)
                        pass
            elif isinstance(statement, ast.Choose):
                blocks = statement.branches if into_choose else ()
            elif isinstance(statement, ast.For):
                inner = {name: value for name, value in env.items() if name != statement.variable.text}
                yield from self.reachable_statements(statement.body, inner, into_choose)
                continue
            elif isinstance(statement, ast.Group):
                blocks = (statement.body,)
            else:
                continue
            for block in blocks:
                yield from self.reachable_statements(block, env, into_choose)

    def find_main_process_defaults(self) -> frozenset[int] | None:
        """The devices whose default stream a thread of the main process (one not declared
        `process`) may use, read off its statements before any is lowered: `DEVICE.default:`,
        and a `memcpy` or host `memset` (which run there); None for every device, where one
        names a device through a loop variable or uses a call whose device is not read here."""
        devices: set[int] = set()
        for decl in self.thread_decls:
            if decl.process:
                continue
            for statement in ast.nested_statements(decl.body):
                if isinstance(statement, (ast.Memcpy, ast.HostMemset)):
                    accesses = ((statement.destination, statement.source) if isinstance(statement, ast.Memcpy)
                                else (statement.access,))
                    for access in accesses:
                        found = self.quiet_memory_devices(access)
                        if found is None:
                            return None
                        # (under CANN the call runs on no stream: `call_stream`)
                        devices |= {d for d in found if self.devices[d].runtime is Runtime.CUDA}
                    continue
                ref = _default_ref(statement)
                if ref is None:
                    continue
                if ref.index is not None and next(_variables(ref.index), None) is not None:
                    return None
                device = self.quiet_device(ref, {})
                if device is not None:
                    devices.add(device)
        return frozenset(devices)

    def quiet_memory_devices(self, access: ast.AccessRef) -> set[int] | None:
        """The devices whose memory an access may name, read before its statement is lowered:
        every element's of a buffer or tensor array (host memory names none); None for an
        alias or a name that is not declared memory."""
        entity = self.entities.get(access.name.text)
        if entity is None or entity.broken or entity.kind not in ("buffer", "tensor"):
            return None
        if entity.kind == "tensor":
            return {self.tensors[i].device for i in entity.indices}
        return {self.memories[i].device for i in entity.indices if self.memories[i].device is not None}

    def quiet_device(self, ref: ast.Ref, env: dict[str, int]) -> int | None:
        """The device of a `DEVICE.default` read before its statement is lowered; None where it
        does not resolve (lowering the statement reports what is wrong with it)."""
        errors = len(self.errors)
        try:
            return self.resolve(ast.Ref(ref.name, ref.index, ref.span), env, "device")
        except (SpecError, _Skip):
            return None
        finally:
            del self.errors[errors:]

    def own_legacy_stream(self, stream: int) -> int:
        """A declared legacy stream names the legacy stream of the process that uses it: a
        `process` thread naming one that another process took as its default gets one of its
        own (CUDA's driver API, "Stream synchronization behavior": the legacy stream
        "synchronizes with all other streams in the same CUcontext", and each process has its
        own context), as `DEVICE.default` does."""
        declared = self.streams[stream]
        if (self.process_streams is None or declared.mode is not StreamMode.LEGACY
                or stream not in self.claimed_defaults or self.devices[declared.device].runtime is not Runtime.CUDA):
            return stream
        key = (declared.device, self.current_thread)
        if key not in self.default_streams:
            self.default_streams[key] = self.new_default_stream(declared.device, f"{declared.name}@{self.thread_name}")
        return self.default_streams[key]

    def new_default_stream(self, device: int, name: str) -> int:
        """An implicit default stream, on the device's next hardware queue."""
        dev = self.devices[device]
        cuda = dev.runtime is Runtime.CUDA
        position = self.streams_on.get(device, 0)
        self.streams_on[device] = position + 1
        stream = len(self.streams)
        self.streams.append(Stream(stream, name, device, 0, StreamMode.LEGACY if cuda else StreamMode.NONBLOCKING,
                                   position % dev.queues if dev.queues else None, dev.span))
        return stream

    def default_stream(self, device: int) -> int:
        """The stream a synchronous call runs on: CUDA's legacy default stream (declared, or an
        implicit one), CANN's implicit default stream (which the legacy rules do not touch).
        A `process` thread has its own (a default stream per context): a declared legacy
        stream it enqueues work on (`claim_defaults`), or an implicit one of its own."""
        process = self.current_thread if self.process_streams is not None else None
        key = device if process is None else (device, process)
        if key in self.default_streams:
            return self.default_streams[key]
        dev = self.devices[device]
        cuda = dev.runtime is Runtime.CUDA
        stream = None
        if cuda:  # (a declared legacy stream; another process's implicit one is not the main process's)
            own = {value for k, value in self.default_streams.items() if isinstance(k, tuple)}
            stream = next((s.index for s in self.streams if s.device == device and s.mode is StreamMode.LEGACY
                           and (s.index in self.process_streams if process is not None else s.index not in own
                                or s.span != dev.span)), None)
        if stream is None:
            stream = self.new_default_stream(
                device, f"{dev.name}.default" if process is None else f"{dev.name}.default@{self.thread_name}")
        self.default_streams[key] = stream
        return stream

    def call_stream(self, device: int) -> int:
        """The stream a host `memcpy` or `memset` runs on. Under `runtime cuda` the device's
        default stream (the legacy rules order it with the blocking streams). Under `runtime
        cann` an implicit stream of the thread's own on that device: CANN's reference says
        aclrtMemcpy and aclrtMemset run at once, "with no implicit device or stream
        synchronization", so the call is ordered only by the thread's wait for it to finish."""
        if self.devices[device].runtime is Runtime.CUDA:
            return self.default_stream(device)
        key = (device, self.current_thread)
        stream = self.call_streams.get(key)
        if stream is None:  # (on no hardware queue: it waits behind nothing)
            dev = self.devices[device]
            stream = self.call_streams[key] = len(self.streams)
            self.streams.append(Stream(stream, f"{dev.name}.calls@{self.thread_name}", device, 0,
                                       StreamMode.NONBLOCKING, None, dev.span, host_calls=True))
        return stream

    def copy_engine(self, device: int, kind: CopyKind) -> Engine:
        return Engine(kind.value) if self.devices[device].declares(Engine(kind.value)) else Engine.COPY

    def copy_shape(self, node, destination: Access, source: Access) -> None:
        """SP073, once per line: a copy moves one count of bytes between areas that may not
        overlap (`cudaMemcpyAsync`: "The memory areas may not overlap"; `aclrtMemcpyAsync`
        takes one count too). It is checked as written: the destination's bytes written,
        the source's read."""
        into, out_of = destination.end - destination.start, source.end - source.start
        overlap = (destination.memory == source.memory and destination.start < source.end
                   and source.start < destination.end)
        # (sizes only where a side names a byte range: a copy between two whole buffers, as an
        # import writes one into a larger storage, means the smaller one)
        ranged = any(isinstance(subscript, ast.Slice)
                     for side in (node.destination, node.source) for subscript in side.subscripts)
        if (not (into != out_of and ranged) and not overlap) or self.said_at(Code.SP073, node.span):
            return
        if overlap:
            message = f"the copy's source `{source.written_as}` and destination `{destination.written_as}` overlap"
            help = "copy through a buffer of its own: the memory areas of one copy may not overlap"
        else:
            message = f"the copy moves {out_of:,} bytes of `{source.written_as}` into {into:,} of `{destination.written_as}`"
            help = "a copy moves one count of bytes: name ranges of one size (it is checked as written)"
        self.warnings.append(warning(Code.SP073, message, node.span, "one copy", help=help))

    def memcpy(self, node: ast.Memcpy, env, bindings) -> None:
        destination = self.access(node.destination, env, True)
        source = self.access(node.source, env, False)
        self.copy_shape(node, destination, source)
        dst, src = self.mem(destination.memory), self.mem(source.memory)
        if dst.on_host and src.on_host:
            raise SpecError(error(Code.SP016, "a `memcpy` between two host buffers involves no device",
                                  node.span, "both sides are host memory",
                                  help="use a `host` statement for host-to-host copies"))
        kind = CopyKind.H2D if src.on_host else CopyKind.D2H if dst.on_host else CopyKind.D2D
        device = dst.device if dst.device is not None else src.device
        stream = self.call_stream(device)
        if kind is CopyKind.H2D and not src.pinned and self.devices[device].runtime is Runtime.CUDA:
            # CUDA, "API synchronization behavior": from pageable memory "a stream sync is performed
            # before the copy is initiated", and the call "will return once the pageable buffer has
            # been copied to the staging memory", the DMA possibly still running.
            common = dict(stream=stream, device=device, bindings=bindings)
            written = f"memcpy {destination.written_as} <- {source.written_as}"
            self.staged_copy(node, source, destination, src, node.duration.nanoseconds if node.duration else 0,
                             self.copy_engine(device, kind), common, written,
                             sync=(stream,) + self.blocking_streams(stream))
            return
        # CUDA, "API synchronization behavior": "For transfers from device memory to device
        # memory, no host-side synchronization is performed": the call returns once enqueued.
        returns_at_once = kind is CopyKind.D2D and self.devices[device].runtime is Runtime.CUDA
        written = f"memcpy {destination.written_as} <- {source.written_as}"
        self.peer_serialized(node, stream, (src, dst), written, bindings, lambda: self.emit(
            node, op=Op.COPY, stream=stream, device=device, accesses=self.touch((source, destination)),
            duration=node.duration.nanoseconds if node.duration else 0, engine=self.copy_engine(device, kind),
            copy=kind, blocking=not returns_at_once, bindings=bindings, form=written))

    def peer_serialized(self, node, stream: int, memories: tuple[Memory, ...], written: str, bindings,
                        emit_copy) -> None:
        """Emit a copy (`emit_copy`) on `stream`; when that is CUDA's legacy stream and the copy
        is between the memories of two devices, one another CUDA device, also order it with
        that device's legacy stream both ways, by records and waits of implicit events (part of
        the one call: they cost no launch of their own). The programming guide, "Peer-to-Peer
        Memory Copy": a copy in the NULL stream between two devices "does not start until all
        commands previously issued to either device have completed and runs to completion
        before any commands ... issued after the copy to either device can start"."""
        own = self.streams[stream]
        # (only a copy between the memories of two devices: CUDA documents no such ordering for
        # a copy between the host and another device's memory, nor for an `item`)
        between_devices = all(m.device is not None for m in memories) and len({m.device for m in memories}) == 2
        others = []
        if own.mode is StreamMode.LEGACY and self.devices[own.device].runtime is Runtime.CUDA and between_devices:
            others = sorted({m.device for m in memories if m.device != own.device
                             and self.devices[m.device].runtime is Runtime.CUDA})
        for position, device in enumerate(others):
            other = self.default_stream(device)
            event = self.implicit_event(node, "peer_copy", device, "before")
            self.emit(node, part=20 + 4 * position, op=Op.RECORD, stream=other, device=device, event=event,
                      bindings=bindings, form=f"record (before {own.name}: {written})", costs_launch=False)
            self.emit(node, part=21 + 4 * position, op=Op.WAIT, stream=stream, device=own.device, event=event,
                      bindings=bindings, form=f"wait (for {self.streams[other].name}, before {written})",
                      costs_launch=False)
        emit_copy()
        for position, device in enumerate(others):
            other = self.default_stream(device)
            event = self.implicit_event(node, "peer_copy", device, "after")
            self.emit(node, part=22 + 4 * position, op=Op.RECORD, stream=stream, device=own.device, event=event,
                      bindings=bindings, form=f"record (after {written})", costs_launch=False)
            self.emit(node, part=23 + 4 * position, op=Op.WAIT, stream=other, device=device, event=event,
                      bindings=bindings, form=f"wait (for {own.name}: {written})", costs_launch=False)

    def device_memory(self, access: Access, node, what: str, pinned_too: bool = False) -> Memory:
        """The memory of `access`, which must live on a device (a `memset` takes pinned host
        memory too, before it gets here: `pinned_too` says so in the message)."""
        memory = self.mem(access.memory)
        if memory.on_host:
            needs = "device or pinned host memory" if pinned_too else "device memory"
            raise SpecError(error(Code.SP012, f"`{access.written_as}` is host memory; `{what}` needs {needs}",
                                  access.span, "host memory", help="name a buffer or tensor that lives on a device"
                                  + (", or declare the host buffer `pinned`" if pinned_too else "")))
        return memory

    def host_memset(self, node: ast.HostMemset, env, bindings) -> None:
        access = self.access(node.access, env, True)
        cuda = [d.index for d in self.devices if d.runtime is Runtime.CUDA]
        if self.mem(access.memory).on_host and self.mem(access.memory).pinned and len(cuda) == 1:
            # CUDA, "API synchronization behavior": the synchronous memsets are "fully
            # synchronous" when the target is pinned host memory. cudaMemset is a call on the
            # legacy stream: it runs after the work the legacy rules order before it, and the
            # thread waits for it (cusan-tests send_ms_pinned_*: the call waited for a kernel).
            # The device is the program's one CUDA device (the current device is not modelled).
            self.emit(node, op=Op.MEMSET, stream=self.call_stream(cuda[0]), device=cuda[0],
                      accesses=self.touch((access,)), duration=node.duration.nanoseconds if node.duration else 0,
                      engine=Engine.COMPUTE, blocking=True, bindings=bindings, form=f"memset {access.written_as}")
            return
        if self.mem(access.memory).on_host and self.mem(access.memory).pinned:
            # aclrtMemset takes host memory as well (and CUDA, where the device is not one):
            # the thread writes it and returns when done (ordered with no stream: a race the
            # legacy stream's order would hide is reported).
            self.emit(node, op=Op.HOST, stream=None, name="memset", accesses=self.touch((access,)),
                      duration=node.duration.nanoseconds if node.duration else 0, bindings=bindings,
                      form=f"memset {access.written_as}")
            return
        device = self.device_memory(access, node, "memset", pinned_too=True).device
        # CUDA, "API synchronization behavior": "The synchronous memset functions are
        # asynchronous with respect to the host except when the target is pinned host memory or
        # a Unified Memory region" (device memory here): the call returns once enqueued.
        cuda = self.devices[device].runtime is Runtime.CUDA
        self.emit(node, op=Op.MEMSET, stream=self.call_stream(device), device=device,
                  accesses=self.touch((access,)), duration=node.duration.nanoseconds if node.duration else 0,
                  engine=Engine.COMPUTE, blocking=not cuda, bindings=bindings, form=f"memset {access.written_as}")

    # -- stream statements

    def on_stream(self, node, env, bindings) -> tuple[int, dict]:
        """The stream index of a `STREAM:` statement and the fields every task has."""
        stream_index = self.resolve(node.stream, env, "stream")
        return stream_index, dict(stream=stream_index, device=self.streams[stream_index].device, bindings=bindings)

    def kernel(self, node: ast.KernelTask | ast.CallbackTask, env, bindings) -> None:
        _, common = self.on_stream(node, env, bindings)
        found: list[Access] = []
        for read in node.reads:
            found += self.accesses(read, env, False)
        for written in node.writes:
            found += self.accesses(written, env, True)
        accesses = tuple(found)
        kernel = isinstance(node, ast.KernelTask)
        self.emit(node, op=Op.KERNEL if kernel else Op.CALLBACK, name=node.name.text, accesses=self.touch(accesses),
                  duration=node.duration.nanoseconds if node.duration else 0,
                  engine=Engine.COMPUTE if kernel else Engine.CALLBACK, **common)

    def copy(self, node: ast.CopyTask, env, bindings) -> None:
        stream_index, common = self.on_stream(node, env, bindings)
        device = self.streams[stream_index].device
        destination = self.access(node.destination, env, True)
        source = self.access(node.source, env, False)
        self.copy_shape(node, destination, source)
        dst_memory = self.mem(destination.memory)
        src_memory = self.mem(source.memory)
        if dst_memory.on_host and src_memory.on_host:
            raise SpecError(error(Code.SP016, "a copy between two host buffers is not a stream operation",
                                  node.span, "both sides are host memory",
                                  help="use a `host` statement for host-to-host copies"))
        kind = CopyKind.H2D if src_memory.on_host else CopyKind.D2H if dst_memory.on_host else CopyKind.D2D
        engine = self.copy_engine(device, kind)
        duration = node.duration.nanoseconds if node.duration else 0
        pageable = (src_memory.on_host and not src_memory.pinned) or (dst_memory.on_host and not dst_memory.pinned)
        written = f"copy {destination.written_as} <- {source.written_as}"
        if pageable and self.capture is not None:
            raise SpecError(error(Code.SP029, "a copy to or from pageable host memory cannot be captured into a graph",
                                  node.span, "pageable host memory", secondary=((self.capture.span, "graph declared here"),),
                                  help="declare the host buffer `pinned` (CANN refuses an asynchronous copy of "
                                       "unpinned memory in a capture, and CUDA's is synchronous, which a graph is not)"))
        if pageable and kind is CopyKind.H2D and self.devices[device].runtime is Runtime.CUDA:
            self.staged_copy(node, source, destination, src_memory, duration, engine, common, around=lambda task: (
                self.peer_serialized(node, stream_index, (src_memory, dst_memory), written, bindings, task)))
            return
        self.peer_serialized(node, stream_index, (src_memory, dst_memory), written, bindings, lambda: self.emit(
                                 node, op=Op.COPY, accesses=self.touch((source, destination)), duration=duration,
                                 engine=engine, copy=kind, blocking=pageable, **common))

    def blocking_streams(self, stream: int) -> tuple[int, ...]:
        """For CUDA's legacy stream: the device's blocking streams, whose earlier work a marker
        on it waits for; none for any other stream."""
        s = self.streams[stream]
        if s.mode is not StreamMode.LEGACY or self.devices[s.device].runtime is not Runtime.CUDA:
            return ()
        return tuple(t.index for t in self.streams if t.device == s.device and t.mode is StreamMode.BLOCKING)

    def waits_for_legacy(self, stream: int) -> bool:
        """Whether a marker on `stream` waits for the earlier work of its device's legacy
        streams: a blocking CUDA stream's does (CUDA: after an action on the legacy stream,
        "all blocking streams wait on the legacy stream")."""
        s = self.streams[stream]
        return s.mode is StreamMode.BLOCKING and self.devices[s.device].runtime is Runtime.CUDA

    def fill_legacy_streams(self) -> None:
        """A sync of a blocking stream also waits for the earlier work of its device's legacy
        streams, declared or implicit (a marker on the stream would), found once every thread
        is lowered: an implicit default stream may appear in a thread lowered later. It then
        becomes a marker (`legacy_markers`), kept to its process by `assign_contexts`."""
        on_device: dict[int, list[int]] = defaultdict(list)  # device -> its legacy streams
        for t in self.streams:
            if t.mode is StreamMode.LEGACY:
                on_device[t.device].append(t.index)
        for k, form in self.blocking_syncs:
            s = self.statements[k]
            legacy = on_device.get(self.streams[s.target].device)
            if legacy:
                self.statements[k] = replace(s, sync=SyncKind.STREAMS, streams=s.streams + tuple(legacy),
                                             form=form or s.form)
                self.legacy_markers.append(k)

    def staged_copy(self, node: ast.CopyTask | ast.Memcpy, source: Access, destination: Access, src_memory: Memory,
                    duration: int, engine: Engine, common: dict, written: str | None = None,
                    sync: tuple[int, ...] | None = None, around=None) -> None:
        """CUDA: a copy from pageable memory stages the source into a pinned driver buffer and
        may return before the transfer is done; the driver may first synchronize the stream
        (`copy`: one program variant each way; `memcpy`: always, the streams in `sync`).
        `around` emits the copy's task given a function that emits it (`peer_serialized`)."""
        written = written or f"copy {destination.written_as} <- {source.written_as}"
        if sync is None:
            self.driver_choices.add(PAGEABLE)
            if self.cuda_sync_first:
                sync = (common["stream"],)
        if sync:
            marker = self.emit(node, part=2, op=Op.SYNC, stream=None,
                               sync=SyncKind.STREAMS if len(sync) > 1 else SyncKind.STREAM,
                               target=common["stream"], streams=sync,
                               form=f"{written} (the driver synchronizes the stream)", bindings=common["bindings"])
            if len(sync) > 1:
                self.legacy_markers.append(marker)
            elif self.waits_for_legacy(common["stream"]):
                self.blocking_syncs.append((marker, ""))
        self.staged += 1
        size = source.end - source.start
        staging = Memory(len(self.memories), f"{src_memory.name}.staged#{self.staged}", f"{src_memory.name}.staged#{self.staged}",
                         size, None, True, node.span)
        self.memories.append(staging)
        self.emit(node, part=1, op=Op.HOST, stream=None, name="stage", accesses=(source,), duration=0,
                  form=f"{written} (staging the pageable source)", bindings=common["bindings"])
        staged = Access(staging.index, 0, size, False, source.span, staging.name)

        def task() -> None:
            self.emit(node, op=Op.COPY, accesses=self.touch((staged, destination)), duration=duration,
                      engine=engine, copy=CopyKind.H2D, blocking=False, form=written, **common)

        if around is None:
            task()
        else:
            around(task)

    def memset(self, node: ast.MemsetTask, env, bindings) -> None:
        _, common = self.on_stream(node, env, bindings)
        access = self.access(node.access, env, True)
        memory = self.mem(access.memory)
        if not (memory.on_host and memory.pinned):  # the device reaches pinned host memory too
            self.device_memory(access, node, "memset", pinned_too=True)
        self.emit(node, op=Op.MEMSET, accesses=self.touch((access,)),
                  duration=node.duration.nanoseconds if node.duration else 0, engine=Engine.COMPUTE, **common)

    def item(self, node: ast.ItemTask, env, bindings) -> None:
        stream_index, common = self.on_stream(node, env, bindings)
        source = self.access(node.access, env, False)
        self.device_memory(source, node, "item")
        self.items += 1
        size = source.end - source.start
        host = Memory(len(self.memories), f"item#{self.items}", f"item#{self.items}", size, None, False, node.span)
        self.memories.append(host)
        destination = Access(host.index, 0, size, True, node.span, host.name)
        written = f"item {source.written_as}"
        self.peer_serialized(node, stream_index, (self.mem(source.memory),), written, bindings, lambda: self.emit(
            node, op=Op.COPY, accesses=self.touch((source, destination)),
            duration=node.duration.nanoseconds if node.duration else 0,
            engine=self.copy_engine(self.streams[stream_index].device, CopyKind.D2H), copy=CopyKind.D2H,
            blocking=True, form=written, **common))

    def event_task(self, node: ast.RecordTask | ast.WaitTask | ast.ResetTask, env, bindings) -> None:
        _, common = self.on_stream(node, env, bindings)
        if node.external:
            event = self.external_event(node, env)
            common["form"] = f"{_EVENT_OPS[type(node)].value} {self.events[event].name} external"
        else:
            with self.kind_help(_EVENT_OPS[type(node)].value, node.stream, node.event):
                event = self.resolve(node.event, env, "event")
        if isinstance(node, ast.ResetTask) and not self.events[event].flag:
            raise SpecError(error(Code.SP017, f"`reset` needs a flag event; `{self.events[event].name}` is a snapshot event",
                                  node.span, "not a flag event",
                                  secondary=((self.events[event].span, "declared without `flag`"),),
                                  help=f"declare it `{self.text(self.events[event].span).strip()} flag`"))
        self.emit(node, op=_EVENT_OPS[type(node)], event=event, **common)

    def external_event(self, node: ast.RecordTask | ast.WaitTask | ast.ResetTask, env) -> int:
        """The event of `record E external`, `wait E external`, `reset E external` in a graph's
        body: an event record, wait or reset node on the declared event, which work outside the
        graph shares (CUDA's cudaEventRecordExternal and cudaEventWaitExternal on snapshot
        events; CANN's external events, torch_npu's `ExternalEvent`, on flag events). At each
        launch it acts as that statement at its place in the body, enqueued by the launch call:
        a wait outside binds to the latest such record enqueued before it, and a snapshot wait
        node to the latest record of E enqueued before it (before the launch, or a record node
        earlier in the body)."""
        if self.capture is None:
            what = _EVENT_OPS[type(node)].value
            raise SpecError(error(
                Code.SP030, f"`{what} ... external` is an event {what} node of a captured graph", node.span,
                "outside every graph", help=f"outside a graph, write `{what} {self.text(node.event.span)}` (the "
                                            f"external flag applies only to captured work)"))
        event = self.resolve_declared(node.event, env, "event")
        if event not in self.events_outside:  # (the declared event, which work outside shares: `shared_events`)
            self.events_outside[event] = node.event.span
            self.event_nodes[node.event.span] = self.capture.name
        return event

    def implicit_event(self, node, label: str, *key) -> int:
        """A snapshot event of the lowering's own (`wait_stream`, a peer `memcpy`): one per
        statement, thread and `key`, reused by every iteration of a loop around it (each
        wait binds to the record its thread enqueued just before)."""
        full = (id(node), self.current_thread, *key)
        event = self.implicit_events.get(full)
        if event is None:
            event = len(self.events)
            self.events.append(Event(event, f"{label}#{len(self.implicit_events) + 1}", False, node.span))
            self.implicit_events[full] = event
        return event

    def wait_stream(self, node: ast.WaitStreamTask, env, bindings) -> None:
        """`S2: wait_stream S1` is `S1: record E` then `S2: wait E` with an implicit event."""
        _, common = self.on_stream(node, env, bindings)
        with self.kind_help("wait_stream", node.stream, node.source):
            source = self.resolve(node.source, env, "stream")
        event = self.implicit_event(node, "wait_stream")
        written = f"wait_stream {self.streams[source].name}"  # resolved: `p[2]`, not `p[rank]`
        waiter = self.streams[common["stream"]].name
        # described on the source stream, so it reads `s1: record (for s2: wait_stream s1)`
        self.emit(node, part=1, op=Op.RECORD, stream=source, device=self.streams[source].device, event=event,
                  bindings=bindings, form=f"record (for {waiter}: {written})")
        self.emit(node, op=Op.WAIT, event=event, form=written, **common)

    def notify_task(self, node: ast.NotifyTask | ast.AwaitTask, env, bindings) -> None:
        _, common = self.on_stream(node, env, bindings)
        op = Op.NOTIFY if isinstance(node, ast.NotifyTask) else Op.AWAIT
        with self.kind_help(op.value, node.stream, node.notify):
            notify = self.resolve(node.notify, env, "notify")
        self.emit(node, op=op, notify=notify, **common)

    @contextmanager
    def kind_help(self, statement: str, stream: ast.Ref, ref: ast.Ref):
        """Give an SP012 on `ref` the help of the statement on `stream` that named the wrong kind."""
        try:
            yield
        except SpecError as exc:
            entity = self.entities.get(ref.name.text)
            help = _statement_kind_help(statement, ref.name.text, entity.kind) if entity else ""
            help = help.replace("STREAM", self.text(stream.span))
            if exc.diagnostic.code is Code.SP012 and help:
                raise SpecError(replace(exc.diagnostic, help=help)) from None
            raise

    def comm_stream(self, comm_index: int, ref: ast.Ref, env: dict[str, int]) -> int:
        """A root or peer: the stream `ref` names. `DEVICE.default` there names the comm's
        member on that device, whichever process owns it (in a `process` thread it would
        otherwise be the thread's own default stream, not another rank's member)."""
        if ref.member is not None and ref.member.text == "default":
            device = self.resolve(ast.Ref(ref.name, ref.index, ref.span), env, "device")
            defaults = set(self.default_streams.values())
            members = [m for m in self.comm_members[comm_index] if self.streams[m].device == device
                       and (m in defaults or self.streams[m].mode is StreamMode.LEGACY)]
            if len(members) == 1:
                return members[0]
        return self.resolve_declared(ref, env, "stream")  # (in a graph too: a rank, not captured work)

    def member(self, comm_index: int, ref: ast.Ref, stream: int, call: bool = True) -> int:
        """The comm's member stream whose rank `stream` (written as `ref`) calls for: itself, or
        for the stream a call is on (`call`), under `runtime cuda`, the one member on its device
        (NCCL takes the stream per call, and orders a comm's calls on one rank: `comm_call`).
        SP021 otherwise: a root or a peer names a rank by its member stream. A call captured
        in a graph is the rank's of the stream it was captured on."""
        stream = self.graph_labels.get(stream, stream)
        members = self.comm_members[comm_index]
        if stream in members:
            return stream
        device = self.streams[stream].device
        on_device = [m for m in members if self.streams[m].device == device]
        comm = self.comms[comm_index]
        cuda = self.devices[device].runtime is Runtime.CUDA
        help = None
        if (self.process_streams is not None and ref.member is not None
                and self.default_streams.get(device) in members):
            help = (f"the comm's `{self.devices[device].name}.default` stays the main process's: a thread not "
                    "declared `process` uses that device's default stream (or, under `runtime cuda`, a `memcpy` "
                    "or a `memset`, or names a device through a variable); declare that thread `process` too, or "
                    "give the comm a stream of its own")
        elif call and comm.in_flight and len(on_device) == 1 and not self.in_group:
            return on_device[0]  # (the library takes the stream per call and orders nothing)
        elif call and cuda and len(on_device) == 1 and not self.in_group:
            self.chained.add((comm_index, on_device[0]))
            return on_device[0]
        elif on_device and call and comm.in_flight:
            help = (f"a call of comm `{comm.name}` on another stream of a member's device is that rank's, but not "
                    "inside a `group` or where several members share the device: call it on the member stream there")
        elif on_device and cuda and call:
            help = (f"a call of comm `{comm.name}` on another stream of a member's device is that rank's (NCCL "
                    "takes the stream per call), but not inside a `group` or where several members share the "
                    "device: call it on the member stream there")
        elif on_device and call:
            help = (f"HCCL needs the operators of a comm on one device issued one after another: call it on "
                    f"`{self._as_written_like(ref, stream, on_device[0])}`, or, as HCCL takes the stream per call, "
                    f"declare the comm `one_in_flight` (`comm {comm.name.split('[')[0]} = {{ ... }} one_in_flight`), "
                    "which checks that each rank's calls on several streams run one at a time")
        raise SpecError(error(Code.SP021, f"stream `{self.streams[stream].name}` is not a member of comm `{comm.name}`",
                              ref.span, "not in the comm", secondary=((comm.span, "comm declared here"),),
                              help=help))

    def _as_written_like(self, ref: ast.Ref, stream: int, other: int) -> str:
        """Stream `other` named the way `ref` names `stream` (`c[r]` for `k[r]`), where both are
        the same element of their arrays: a fix pasted into a thread array's block then names each
        rank's own; its instance name otherwise."""
        name, written = self.streams[other].name, self.streams[stream].name
        if ref.index is None or "[" not in name or "[" not in written \
                or name[name.index("["):] != written[written.index("["):]:
            return name
        return f"{name.split('[')[0]}[{self.text(ref.index.span)}]"

    def collective(self, node: ast.CollectiveTask, env, bindings) -> None:
        stream_index, common = self.on_stream(node, env, bindings)
        comm_index = self.resolve(node.comm, env, "comm")
        member = self.member(comm_index, node.stream, stream_index)
        root = None
        if node.root is not None:
            root = self.comm_stream(comm_index, node.root, env)
            root = self.member(comm_index, node.root, root, call=False)
        read_buffer = self.access(node.access, env, False)
        write_buffer = self.access(node.access, env, True)
        source = self.access(node.source, env, False) if node.source is not None else read_buffer
        is_root = member == root
        if node.kind not in ROOTED_KINDS or is_root:  # (a non-root's other buffer goes unused)
            self.check_fit(node, comm_index, source, write_buffer)
        if node.kind in ("allgather", "reducescatter") and node.source is None:
            accesses = self.in_place_share(node, comm_index, member, write_buffer)
        elif node.kind in IN_PLACE_KINDS:
            accesses = (source, write_buffer)
        elif node.kind == "broadcast":
            # The root sends its source (and, out of place, fills its destination too);
            # every other member only receives.
            if not is_root:
                accesses = (write_buffer,)
            else:
                accesses = (source,) if node.source is None else (source, write_buffer)
        else:  # reduce: every member contributes its source; the root receives the result
            accesses = (source, write_buffer) if is_root else (source,)
        accesses += self.in_flight(comm_index, member, node)
        self.comm_call(node, member, op=Op(node.kind), comm=comm_index, root=root, accesses=self.touch(accesses),
                       duration=node.duration.nanoseconds if node.duration else 0, engine=Engine.COMM, **common)

    def in_place_share(self, node, comm_index: int, member: int, buffer: Access) -> tuple[Access, ...]:
        """An in-place `allgather` or `reducescatter` touches its rank's share of the buffer as
        NCCL defines them ("In-place Operations"): `ncclAllGather(data + rank * count, data, ...)`
        sends the rank's share and writes the others' (its own is already there);
        `ncclReduceScatter(data, data + rank * count, ...)` reads the whole buffer and writes its
        share. A buffer that does not divide among the members (SP070) is read and written whole."""
        members = len(self.comms[comm_index].members)
        size = buffer.end - buffer.start
        if size % members:
            return (replace(buffer, write=False), buffer)
        share = size // members
        low = buffer.start + self.comms[comm_index].members.index(member) * share
        high = low + share
        if node.kind == "reducescatter":
            return (replace(buffer, write=False), replace(buffer, start=low, end=high))
        others = tuple(replace(buffer, start=start, end=end)
                       for start, end in ((buffer.start, low), (high, buffer.end)) if start < end)
        return (replace(buffer, start=low, end=high, write=False), *others)

    def check_fit(self, node, comm_index: int, source: Access, destination: Access) -> None:
        """SP070: buffers whose sizes do not fit the call on this comm. NCCL sizes a call by
        one count ("NCCL and MPI": for AllGather and ReduceScatter "the other count [is] equal
        to nranks*count"): a buffer of another size is read or written past its end, or in
        part, by the real call, which a spec cannot show. An `alltoall` has no such rule: it
        stands for alltoallv too (HCCL's HcclAlltoAllV, PyTorch's all_to_all_single with split
        sizes), whose members each send and receive the counts they pass."""
        if node.kind == "alltoall":
            return
        members = len(self.comms[comm_index].members)
        counted = f"{members} member{'s' if members != 1 else ''}"
        sent, received = source.end - source.start, destination.end - destination.start
        kind, in_place = node.kind, node.source is None
        if in_place:
            if kind in ("allgather", "reducescatter") and received % members:
                problem = f"`{destination.written_as}` ({received:,} bytes) does not divide among the comm's {counted}"
            else:
                return
        elif kind == "allgather" and received != members * sent:
            problem = (f"`{destination.written_as}` ({received:,} bytes) is not {counted} x "
                       f"`{source.written_as}` ({sent:,} bytes)")
        elif kind == "reducescatter" and sent != members * received:
            problem = (f"`{source.written_as}` ({sent:,} bytes) is not {counted} x "
                       f"`{destination.written_as}` ({received:,} bytes)")
        elif kind not in ("allgather", "reducescatter") and sent != received:
            problem = f"`{destination.written_as}` ({received:,} bytes) and `{source.written_as}` ({sent:,} bytes) differ"
        else:
            return
        if self.said_at(Code.SP070, node.span):
            return
        counts = {"allgather": "the destination holds every member's source (recvcount = nranks x sendcount)",
                  "reducescatter": "the source holds every member's share (sendcount = nranks x recvcount)"}.get(
            kind, "the source and the destination have one count")
        self.warnings.append(warning(
            Code.SP070, f"the buffers of this `{kind}` do not fit its comm: {problem}", node.span,
            "sized so the call would touch bytes past a buffer, or only part of one",
            help=f"NCCL and HCCL size a call by one count: {counts}; size the buffers so (the check "
                 f"reads and writes them as written)"))

    def in_flight(self, comm_index: int, member: int, node) -> tuple[Access, ...]:
        """For a call of a `one_in_flight` comm, its write of its rank's state (`Comm.in_flight`):
        custom all-reduce and symmetric-memory collectives keep one signal pad or staging
        buffer per rank, so two calls of a rank in flight at once hang or corrupt each other."""
        comm = self.comms[comm_index]
        if not comm.in_flight:
            return ()
        memory = comm.in_flight[comm.members.index(member)]
        return (Access(memory, 0, 1, True, node.span, self.memories[memory].name),)

    def comm_call(self, node, member: int, **fields) -> None:
        """Emit a collective or send/recv call of `member`'s rank. NCCL orders the calls of one
        comm on one rank whatever streams they are on: each launch makes its stream wait for the
        comm's previous launch to finish (`ncclLaunchPrepare` and `ncclLaunchFinish` in NCCL's
        src/enqueue.cc, through the comm's device stream). Where a rank's calls use more than
        one stream (`chained`), each waits for an event recorded after the rank's call before
        it, which binds in the order the calls are issued."""
        stream = fields["stream"]
        if member != stream:
            fields["member"] = member
        key = (fields["comm"], member)
        if key not in self.chained:
            self.emit(node, **fields)
            return
        event = self.chain_events.get(key)
        if event is None:
            event = self.chain_events[key] = len(self.events)
            self.events.append(Event(event, f"{self.comms[fields['comm']].name}.order#{len(self.chain_events)}",
                                     False, node.span))
        comm = f"comm `{self.comms[fields['comm']].name}`'s call of `{self.streams[member].name}`'s rank"
        # (the library's own ordering inside the one call, which costs the call's launch alone)
        common = dict(stream=stream, device=fields["device"], bindings=fields["bindings"], costs_launch=False)
        if not self.in_group and self.placed and self.placed[-1] == len(self.statements):
            self.placed[-1] += 1  # (`touch` noted the call for its tensor's placement: it comes after the wait)
        self.emit(node, part=1, op=Op.WAIT, event=event, form=f"wait for the {comm} before it (NCCL)", **common)
        self.emit(node, **fields)
        record = (node, dict(op=Op.RECORD, event=event, form=f"record after the {comm} (NCCL)", **common))
        if self.in_group:  # (after the group's launch, which `launch_group` emits)
            self.group_records.append(record)
        else:
            self.emit(record[0], part=2, **record[1])

    def point_to_point(self, node: ast.SendTask | ast.RecvTask, env, bindings) -> None:
        stream_index, common = self.on_stream(node, env, bindings)
        comm_index = self.resolve(node.comm, env, "comm")
        member = self.member(comm_index, node.stream, stream_index)
        peer = self.comm_stream(comm_index, node.peer, env)
        peer = self.member(comm_index, node.peer, peer, call=False)
        send = isinstance(node, ast.SendTask)
        if peer == member and not self.in_group:
            # Meaningful (the pair can never meet outside a `group`: a deadlock the engines
            # find), but rarely what was meant.
            self.warnings.append(warning(
                Code.SP057, f"`{'send' if send else 'recv'}` names its own stream as the peer", node.peer.span,
                "its own stream",
                help="a send and a recv on one stream meet only inside one `group { ... }` (ncclGroupStart/End); "
                     "outside one, the second waits behind the first forever"))
        self.comm_call(node, member, op=Op.SEND if send else Op.RECV, comm=comm_index, peer=peer,
                       accesses=self.touch((self.access(node.access, env, not send),
                                            *self.in_flight(comm_index, member, node))),
                       duration=node.duration.nanoseconds if node.duration else 0, engine=Engine.COMM, **common)

    def stream_lifetime(self, node: ast.AllocTask | ast.FreeTask, env, bindings) -> None:
        stream_index, common = self.on_stream(node, env, bindings)
        free = isinstance(node, ast.FreeTask)
        region = self.region(node.access, env, whole_arrays=True)
        if region.tensor and self.capture is not None:
            raise SpecError(error(Code.SP029, f"a graph cannot capture a tensor's {'free' if free else 'allocation'}",
                                  node.span, "a tensor", secondary=((self.capture.span, "graph declared here"),),
                                  help="allocate the tensor outside the graph, before `launch` (PyTorch gives a "
                                       "captured graph a memory pool of its own), or use a `buffer`, which a graph "
                                       "allocates and frees with memory nodes"))
        if region.tensor:
            if free:
                raise SpecError(error(Code.SP027, "a tensor goes back to its pool when the host frees it",
                                      node.span, "freed on a stream",
                                      help=f"write `free {self.text(node.access.span)}` (the host's `del`)"))
            self.whole_tensor(node.access, region)
            for element in region.memories:
                self.alloc_tensor(node, element, stream_index, bindings)
            return
        if self.memories[region.memories[0]].on_host and \
                self.devices[self.streams[stream_index].device].runtime is Runtime.CUDA:
            self.host_memory_on_stream(node, region, free)
        for access in self.lifetimes(node.access, region):
            if not free:
                self.latest_alloc_on_stream[self.current_thread, access.memory] = True
            self.emit(node, op=Op.FREE if free else Op.ALLOC, memory=access.memory,
                      accesses=(access,) if free else (), **common)

    def host_memory_on_stream(self, node: ast.AllocTask | ast.FreeTask, region: _Region, free: bool) -> None:
        """SP068: `cudaMallocAsync` and `cudaFreeAsync` (and a graph's memory nodes) allocate and
        free device memory only; host memory comes from `cudaMallocHost` or `malloc` on the host.
        The spec is checked as written: a lifetime that its stream orders."""
        if self.said_at(Code.SP068, node.span):
            return
        memory = self.memories[region.memories[0]]
        call, host = ("cudaFreeAsync", "free") if free else ("cudaMallocAsync", "alloc")
        kind = "pinned" if memory.pinned else "pageable"
        self.warnings.append(warning(
            Code.SP068, f"`{self.text(node.span)}` {'frees' if free else 'allocates'} {kind} host memory on a "
            f"stream, which CUDA cannot do", node.span, f"{call} takes device memory only",
            help=f"{'free' if free else 'allocate'} `{memory.name.partition('[')[0]}` on the host (`{host} "
                 f"{self.text(node.access.span)}`: {'cudaFreeHost' if free else 'cudaMallocHost'} for pinned "
                 f"memory), or declare it on the device"))

    # -- caching-allocator tensors -----------------------------------------------------------

    def touch(self, accesses: tuple[Access, ...]) -> tuple[Access, ...]:
        """The accesses of the next statement, each range once (`reads x, x` is `reads x`: the
        engines compare accesses pairwise); notes the statement for placement if it accesses
        a tensor not yet placed."""
        if len(accesses) > 1:
            seen: set[tuple[int, int, int, bool]] = set()
            kept = []
            for a in accesses:
                key = (a.memory, a.start, a.end, a.write)
                if key not in seen:
                    seen.add(key)
                    kept.append(a)
            accesses = tuple(kept)
        if self.slots and any(a.memory < 0 for a in accesses):
            self.placed.append(len(self.statements))
        return accesses

    def tensor_use(self, tensor: int, span: Span) -> int:
        """The placeholder memory for a use of a tensor on the current thread."""
        slot = self.tensor_slot.get(tensor)
        if slot is None:
            # Not allocated on this thread (yet): it must be the tensor's only allocation.
            slot = len(self.slots)
            self.slots.append(Slot("shared", tensor, self.current_thread, span))
            self.tensor_slot[tensor] = slot
        return placeholder(slot)

    def alloc_tensor(self, node: ast.AllocTask, tensor: int, stream: int, bindings) -> None:
        info = self.tensors[tensor]
        if self.streams[stream].device != info.device:
            raise SpecError(error(Code.SP027, f"tensor `{info.name}` lives on `{self.devices[info.device].name}`, "
                                              f"but `{self.streams[stream].name}` is a stream of "
                                              f"`{self.devices[self.streams[stream].device].name}`",
                                  node.stream.span, "another device",
                                  help="allocate it from a stream of its own device"))
        for event in self.release_syncs.get(len(self.tensor_events), ()):
            self.emit(node, part=2 + event, op=Op.SYNC, stream=None, sync=SyncKind.EVENT, target=event,
                      bindings=bindings, form=f"sync {self.events[event].name} (this variant's timing: the "
                                              "recorded work is done when the allocator looks)")
        slot = len(self.slots)
        if self.process_streams is not None:
            self.process_streams.add(stream)
        self.slots.append(Slot("alloc", tensor, self.current_thread, node.span, stream))
        self.tensor_slot[tensor] = slot
        self.named_streams.add(stream)
        self.tensor_events.append(TensorEvent("alloc", self.current_thread, slot))
        self.placed.append(len(self.statements))
        self.slots[slot].statement = self.emit(
            node, op=Op.ALLOC, stream=None, memory=placeholder(slot), launch_only=True, bindings=bindings,
            form=f"alloc {info.name} on {self.streams[stream].name}")

    def free_tensor(self, node: ast.HostFree, tensor: int, bindings) -> None:
        memory = self.tensor_use(tensor, node.access.span)
        release = self.released.get(len(self.tensor_events))
        for stream in release[1] if release is not None else ():
            # PyTorch's `insert_events`: an event on each stream the block was recorded on
            event = len(self.events)
            self.events.append(Event(event, f"allocator#{event}", False, node.span))
            self.emit(node, part=2 + event, op=Op.RECORD, stream=stream, device=self.streams[stream].device,
                      event=event, bindings=bindings,
                      form=f"record {self.events[event].name} (the allocator's, at `free {self.tensors[tensor].name}`)")
            self.release_syncs.setdefault(release[0], []).append(event)
        self.tensor_events.append(TensorEvent("free", self.current_thread, slot_of(memory), node.span))
        self.placed.append(len(self.statements))
        self.free_statements[len(self.tensor_events) - 1] = self.emit(
            node, op=Op.FREE, stream=None, memory=memory, launch_only=True, bindings=bindings,
            form=f"free {self.tensors[tensor].name}")

    def record_stream(self, node: ast.RecordStreamTask, env, bindings) -> None:
        stream, _ = self.on_stream(node, env, bindings)
        region = self.region(node.tensor, env, ("tensor",), whole_arrays=True)
        if region.start != 0 or region.end != self.tensors[region.memories[0]].size:
            raise SpecError(error(Code.SP015, "`record_stream` takes a whole tensor", node.tensor.span,
                                  help="name the tensor itself"))
        self.named_streams.add(stream)
        for tensor in region.memories:
            slot = slot_of(self.tensor_use(tensor, node.tensor.span))
            self.tensor_events.append(TensorEvent("record", self.current_thread, slot, node.span, stream))

    def place_tensors(self, released: dict[int, int]) -> tuple[Memory, ...]:
        """Run the allocator simulation (`allocator.place`) and rewrite every tensor
        placeholder to the memory of the block the tensor got."""
        if not self.slots:
            return ()
        placement = place(self.slots, self.tensor_events, self.tensors, [s.name for s in self.streams],
                          [t.name for t in self.threads], len(self.memories),
                          self.process_threads(), released)
        for diagnostic in placement.errors:
            self.record(diagnostic)
        if self.errors:
            return ()
        self.warnings += placement.warnings
        pieces_of_slot = placement.pieces_of_slot

        def placed(access: Access) -> list[Access]:
            if access.memory >= 0:
                return [access]
            return [replace(access, memory=piece.memory, start=max(access.start, piece.start) - piece.start,
                            end=min(access.end, piece.end) - piece.start)
                    for piece in pieces_of_slot[slot_of(access.memory)] or ()
                    if piece.start < access.end and access.start < piece.end]

        frees_of: dict[int, list[int]] = defaultdict(list)  # alloc statement -> the frees of that lifetime
        for k, event in enumerate(self.tensor_events):
            alloc, free = self.slots[event.slot].owner.statement, self.free_statements.get(k)
            if event.kind == "free" and alloc is not None and free is not None:
                frees_of[alloc].append(free)
        for index in self.placed:
            s = self.statements[index]
            memory, pieces = s.memory, ()
            if memory is not None and memory < 0:
                found = pieces_of_slot[slot_of(memory)]
                memory = found[0].memory if found else None
                pieces = tuple(piece.memory for piece in found) if found and len(found) > 1 else ()
            accesses = tuple(placed_access for a in s.accesses for placed_access in placed(a))
            lifetimes = (self.slots[slot_of(a.memory)] for a in s.accesses if a.memory < 0)
            tensor_allocs = tuple(sorted({slot.owner.statement for slot in lifetimes} - {None}))
            freed = tensor_allocs
            if s.op is Op.FREE and s.launch_only and s.memory is not None and s.memory < 0:
                # (a tensor freed twice: the second free comes after the first, as a use would)
                freed = (self.slots[slot_of(s.memory)].owner.statement,)
            tensor_frees = tuple(sorted({f for a in freed for f in frees_of.get(a, ())} - {index}))
            self.budget += max(0, len(accesses) - len(s.accesses))
            if self.budget > self.max_statements:
                raise SpecError(error(
                    Code.SP018, "the caching allocator cut these tensors' blocks into so many pieces that "
                    f"accessing them takes the spec past the limit of {self.max_statements:,} lowered statements "
                    "(each piece accessed counts as one)", s.span, "touches many pieces",
                    help="allocate fewer, larger tensors, or raise the limit with --max-statements N"))
            self.statements[index] = replace(s, memory=memory, pieces=pieces, accesses=accesses,
                                             tensor_allocs=tensor_allocs, tensor_frees=tensor_frees)
        return placement.memories

    # -- program-wide ----------------------------------------------------------------------

    def expectation(self, decl: ast.ExpectDecl) -> Expectation:
        kind = ExpectKind(decl.kind)
        buffer = None
        ref = decl.buffer
        in_flight = ref is not None and any(  # (a `one_in_flight` comm: races on its ranks' state)
            memory.comm is not None and memory.buffer == ref.name.text for memory in self.memories)
        whole = ref is not None and ref.index is None and ref.member is None
        if in_flight and whole:  # (two calls of a rank at once)
            buffer = ref.name.text
        elif in_flight:
            raise SpecError(error(Code.SP012, f"`{ref.name.text}` is a `one_in_flight` comm: an expectation names "
                                              "it whole, not one rank or one element of it", ref.span, "one part",
                                  help=f"write `expect race on {ref.name.text}`: it is met by a race on any rank's "
                                       "state"))
        elif ref is not None:
            entity = self.lookup(ref.name, *self.memory_kinds())
            if ref.index is not None or ref.member is not None:  # one element of an array
                self.resolve(ref, {}, "buffer", "tensor")  # (an element that exists)
                buffer = f"{ref.name.text}[{self.evaluate(ref.index, {})}]"
            elif entity.kind == "alias":  # (the buffer behind it: one element of an array, where it names one)
                region = self.alias_regions[ref.name.text]
                buffer = region.buffer
                if len(region.memories) == 1 and not region.array:
                    buffer = (self.tensors if region.tensor else self.memories)[region.memories[0]].name
            else:
                buffer = ref.name.text
        limit = decl.limit.nanoseconds if decl.limit else None
        return Expectation(kind, decl.span, buffer, limit, decl.limit.exact if decl.limit else None)

    def groups(self) -> tuple[Group, ...]:
        """Match collectives by position (`collectives.program_order_groups`), and tell each
        member its group."""
        groups, group_of = program_order_groups(self.statements, self.comms)
        for index, group in group_of.items():
            self.statements[index] = replace(self.statements[index], group=group)
        return groups

    # -- captured graphs (an extension)

    def launch(self, node: ast.LaunchTask, env, bindings) -> None:
        """`S: launch G` (`cudaGraphLaunch`, CANN `aclmdlRIExecuteAsync`), one call: the thread pays
        its device's `launch` time once, for the first statement, whatever the graph holds. The graph's work runs
        on streams of the exec's own, one per declared stream of its body, which stand for the
        capture's dependencies: stream order and the body's records and waits. The launch
        begins after the work enqueued on S before it (a record on S that the body's first
        stream waits for), and S's next work waits for every node (the body is joined into its
        first stream, which records when it is done). Launches of one exec are ordered one
        after another, as CUDA's reference for cudaGraphLaunch says ("each launch is ordered
        behind both any previous work in stream and any previous launches of graphExec"): the
        exec's streams carry every launch in turn, and a launch's side streams fork from its
        first stream, which waits for the previous launch to be joined."""
        stream, common = self.on_stream(node, env, bindings)
        element = self.resolve(node.graph, env, "graph")
        decl, graph_env, name = self.graph_elements[element]
        if element in self.broken_graphs:
            raise _Skip  # (its body's errors are reported at its first launch)
        if self.in_group:
            raise SpecError(error(Code.SP031, f"a launch of graph `{name}` inside a `group` is not modelled", node.span,
                                  "launch in a group", help="launch it before or after the `group { ... }`"))
        process = self.current_thread if self.process_streams is not None else None
        key = (element, process)
        first_thread, first_span = self.graph_launchers.setdefault(key, (self.current_thread, node.span))
        if first_thread != self.current_thread:
            raise SpecError(error(
                Code.SP031, f"graph `{name}` is launched by two threads of one process", node.span,
                "launched here too", secondary=((first_span, "and launched here by another thread"),),
                help="the launches of one exec run one after another in the order they are called, which two "
                     "threads leave open (and a launch is one call, which this model cannot yet keep whole "
                     "between two threads): give each thread its own graph (`graph NAME[N]` declares N) and, "
                     "where their work must not overlap, order the launches with an event as for any two "
                     "streams (two execs do not order each other), or declare the threads `process`"))
        device = self.streams[stream].device
        start = self.implicit_event(node, "launch", "start")
        done = self.implicit_event(node, "launch", "done")
        begins = self.emit(node, part=1, op=Op.RECORD, event=start, form=f"launch {name} (begins)", **common)
        capture = _Capture(name, key, decl.span, start, device, node, bindings, begins)
        self.capture = capture
        errors = len(self.errors)
        try:
            self.block(decl.body, dict(graph_env), ())
        finally:
            self.capture = None
        if len(self.errors) > errors:
            self.broken_graphs.add(element)
            raise _Skip
        if capture.origin is None:
            return  # (an empty graph)
        origin = capture.clocks[capture.origin]
        for label, clock in capture.clocks.items():
            if clock[label] > origin.get(label, 0):
                raise SpecError(error(
                    Code.SP030, f"graph `{name}`: the work captured on `{self.streams[label].name}` is not joined "
                    f"back into `{self.streams[capture.origin].name}`, where the capture began", capture.last[label],
                    "its last captured work", secondary=((decl.span, "graph declared here"),),
                    help=f"record an event on `{self.streams[label].name}` after it and wait on it on "
                         f"`{self.streams[capture.origin].name}` before the graph ends (CUDA's end of capture "
                         "fails with cudaErrorStreamCaptureUnjoined; CANN's with an unjoined stream error)"))
        self.graph_launches.append((begins, key, node.span, name))
        first = self.graph_streams[(key, capture.origin)]
        self.emit(node, part=2, op=Op.RECORD, stream=first, device=device, event=done, bindings=bindings,
                  form=f"record (graph {name} done)", costs_launch=False)
        self.emit(node, op=Op.WAIT, event=done, form=f"launch {name} (its end)", costs_launch=False, **common)

    def captured(self, kind: str, index: int, ref: ast.Ref) -> int:
        """In a graph's body: the exec's stream for a declared stream, or the graph's copy of a
        declared event (both made at first use)."""
        capture = self.capture
        assert capture is not None
        secondary = ((capture.span, "graph declared here"),)
        if kind == "event":
            event = self.events[index]
            if event.flag:
                raise SpecError(error(Code.SP029, f"a graph cannot capture a flag event (`{event.name}`)", ref.span,
                                      "a flag event", secondary=secondary,
                                      help=f"a graph uses a flag event only through event nodes on the declared "
                                           f"event, which work outside the graph shares (`wait {event.name} external`, "
                                           f"`record ...`, `reset ...`: CANN's external events); or use a snapshot "
                                           f"event (declared without `flag`)"))
            copy = self.graph_events.get((capture.key, index))
            if copy is None:
                copy = self.graph_events[(capture.key, index)] = len(self.events)
                self.events.append(Event(copy, f"{capture.name}.{event.name}", False, event.span))
            return copy
        stream = self.streams[index]
        if stream.mode is StreamMode.LEGACY:
            raise SpecError(error(Code.SP029, f"a graph cannot capture work on the legacy stream `{stream.name}`",
                                  ref.span, "a legacy stream", secondary=secondary,
                                  help="capture on a stream that is not legacy"))
        if stream.device != capture.device:
            raise SpecError(error(
                Code.SP031, f"graph `{capture.name}` is launched on a stream of "
                f"`{self.devices[capture.device].name}`, but captures work on `{stream.name}` of "
                f"`{self.devices[stream.device].name}`", capture.node.span, "launched here",
                secondary=((ref.span, "captured on this stream"),),
                help="a graph runs on the device it was captured on: launch it on a stream of that device"))
        copy = self.graph_streams.get((capture.key, index))
        if copy is None:
            process = capture.key[1]
            name = f"{capture.name}.{stream.name}" + ("" if process is None else f"@{self.thread_name}")
            copy = self.graph_streams[(capture.key, index)] = len(self.streams)
            # A graph's kernels run at the priority of the stream it is launched on, not of the
            # ones it was captured on (cudaGraphInstantiateWithFlags: only with UseNodePriority do
            # "the per-node attributes" count "rather than the priority of the launch stream");
            # the exec's streams are shared by its launches: its first launch's stream decides.
            launched = self.statements[capture.begins].stream if capture.begins < len(self.statements) else None
            priority = self.streams[launched].priority if launched is not None else stream.priority
            self.streams.append(Stream(copy, name, stream.device, priority, StreamMode.NONBLOCKING, None,
                                       stream.span, captured=index))
            self.graph_labels[copy] = index
            self.named_streams.add(index)
        return copy

    def capture_step(self, statement, env: dict[str, int]) -> None:
        """Check that a statement of a graph's body can be captured where it stands, and note
        what its stream's work now comes after. A stream joins the capture by waiting on an
        event recorded in it (or `wait_stream` of a stream in it); the body's first stream is
        where the capture began."""
        capture = self.capture
        assert capture is not None
        secondary = ((capture.span, "graph declared here"),)
        if not isinstance(statement, _CAPTURABLE) and not (isinstance(statement, ast.ResetTask) and statement.external):
            help = ("a graph holds kernels, copies, memsets, callbacks, collectives and the records and waits "
                    "that order them; do the rest in a thread, around `launch`")
            if isinstance(statement, ast.ResetTask):
                help = "a flag event's reset in a graph is a reset node on the declared event: `reset EVENT external`"
            raise SpecError(error(Code.SP029, _UNCAPTURABLE[type(statement)], statement.span,
                                  "not capturable", secondary=secondary, help=help))
        label = self.resolve_declared(statement.stream, env, "stream")
        if statement.stream.member is not None:
            self.resolve(statement.stream, env, "stream")  # (SP029: the default stream)
        joins = None
        external = isinstance(statement, (ast.RecordTask, ast.WaitTask, ast.ResetTask)) and statement.external
        if isinstance(statement, (ast.WaitTask, ast.WaitStreamTask)) and not external:
            # (a wait node on an outside event, `wait E external`, joins no stream to the capture)
            if isinstance(statement, ast.WaitTask):
                event = self.resolve_declared(statement.event, env, "event")
                joins, span = capture.recorded.get(event), statement.span
                what = (f"graph `{capture.name}` waits on `{self.events[event].name}`, which it has not recorded "
                        "before this wait")
                if joins is None and event in capture.recorded_external:
                    what = (f"graph `{capture.name}` waits on `{self.events[event].name}`, which it records only as an "
                            "external record node (`record E external`), and that joins no work to the capture")
            else:
                source = self.resolve_declared(statement.source, env, "stream")
                joins, span = capture.clocks.get(source), statement.source.span
                what = f"`{self.streams[source].name}` has captured nothing for graph `{capture.name}` here"
                if source == label:  # (a stream's wait for itself orders nothing, in a capture too)
                    joins, what = None, ""
            if joins is None and what:
                # (a wait node joins no stream: it helps only a stream already in the capture)
                in_capture = label in capture.clocks or capture.origin is None
                capture.clocks.setdefault(label, {})  # (reported once: its later work is no second error)
                raise SpecError(error(
                    Code.SP030, f"{what}: a capture cannot wait on work outside it", span, "outside the capture",
                    secondary=secondary, help=f"wait on it on the launch stream before `launch {capture.name}` "
                                              "(CUDA fails the capture with cudaErrorStreamCaptureIsolation)" + (
                                              ", or, for an event, make the wait a wait node (`wait EVENT external`)"
                                              if isinstance(statement, ast.WaitTask) and in_capture else "")))
        clock = capture.clocks.get(label)
        if clock is None and capture.origin is None:
            capture.origin = label
            clock = capture.clocks[label] = {}
            first = self.captured("stream", label, statement.stream)
            self.emit(capture.node, part=3, op=Op.WAIT, stream=first, device=capture.device, event=capture.start,
                      bindings=capture.bindings, form=f"wait (graph {capture.name} begins)")
        elif clock is None:
            if joins is None and self.streams[label].mode is StreamMode.LEGACY:  # (joining would not help)
                raise SpecError(error(Code.SP029, f"a graph cannot capture work on the legacy stream "
                                                  f"`{self.streams[label].name}`", statement.stream.span,
                                      "a legacy stream", secondary=secondary,
                                      help="capture on a stream that is not legacy"))
            if joins is None:
                origin = self.streams[capture.origin].name
                capture.clocks[label] = {}  # (reported once: its later work is no second error)
                raise SpecError(error(
                    Code.SP030, f"`{self.streams[label].name}` is not part of graph `{capture.name}`'s capture here",
                    statement.stream.span, "not capturing", secondary=secondary,
                    help=f"a stream joins the capture by waiting on an event recorded in it: `{origin}: record E`, "
                         f"then `{self.streams[label].name}: wait E` (otherwise its work would run at once, "
                         "outside the graph)"))
            clock = capture.clocks[label] = {}
        for other, count in (joins or {}).items():
            clock[other] = max(clock.get(other, 0), count)
        clock[label] = clock.get(label, 0) + 1
        capture.last[label] = statement.span
        if isinstance(statement, ast.RecordTask):
            recorded = self.resolve_declared(statement.event, env, "event")
            if external:
                capture.recorded_external.add(recorded)
            else:
                capture.recorded[recorded] = dict(clock)

    def graph_memory(self) -> None:
        """SP032 for what CUDA refuses of a graph's memory nodes: a free node of memory that no
        graph allocates (a capture of `cudaFreeAsync` "must be passed the address of a graph
        allocation"), and a launch while memory the exec's previous launch allocated and did
        not free is still live (`cudaGraphLaunch` "will fail with cudaErrorInvalidValue"). A
        free by another thread counts as made in between, wherever it comes: the launching
        thread's own order decides it here, not the interleaving (nor a free node whose graph
        frees memory that a graph allocates only at another time)."""
        statements = self.statements
        allocated = {s.memory for s in statements if s.launch is not None and s.op is Op.ALLOC}
        for s in statements:
            if s.launch is not None and s.op is Op.FREE and s.memory not in allocated:
                memory = self.memories[s.memory].name
                self.record(error(
                    Code.SP032, f"the free node of `{memory}` frees memory that no graph allocates", s.span,
                    "a free node", secondary=((statements[s.launch].span, "launched here"),),
                    help=f"a graph frees only what a graph's alloc node allocated: allocate `{memory}` in a "
                         f"graph too (`STREAM: alloc {memory}` in its body), or free it outside the graph, "
                         f"on the launch stream after the launch (`{self.streams[statements[s.launch].stream].name}: "
                         f"free {memory}`; a host `free` would not wait for the graph's work)"))
        body: dict[int, list[Statement]] = defaultdict(list)
        frees: dict[int, list[Statement]] = defaultdict(list)
        for s in statements:
            if s.launch is not None:
                body[s.launch].append(s)
            if s.op is Op.FREE:
                frees[s.memory].append(s)
        previous: dict[tuple, tuple[int, dict[int, Span]]] = {}
        for begins, key, span, name in self.graph_launches:
            thread = statements[begins].thread
            if key in previous:
                before, live = previous[key]
                left = [(memory, alloc) for memory, alloc in live.items()
                        if not any(s.launch != before and (s.thread != thread or before < s.index < begins)
                                   for s in frees[memory])]
                if left:
                    names = [self.memories[memory].name for memory, _ in left]
                    shown = [f"`{n}`" for n in names[:4]] + ([f"{len(names) - 4} more"] if len(names) > 4 else [])
                    listed = shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " and " + shown[-1]
                    access = names[0] if len(names) == 1 else self.memories[left[0][0]].buffer
                    stream = self.streams[statements[begins].stream].name
                    loop = statements[before].span == span  # (one launch line, in a loop)
                    self.record(error(
                        Code.SP032, f"graph `{name}` is launched again while {listed}, which its last launch "
                        f"allocated, {'is' if len(names) == 1 else 'are'} still live", span,
                        "launched again at the next iteration" if loop else "launched again",
                        secondary=(() if loop else ((statements[before].span, "allocated by this launch"),))
                        + ((left[0][1], "the alloc node"),),
                        help=f"free {'it' if len(names) == 1 else 'them'} between the two launches on the launch "
                             f"stream (`{stream}: free {access}` after `launch {name}`), or in the graph's body after "
                             f"its last use; CUDA frees a graph's "
                             "allocations itself only for an exec instantiated with "
                             "cudaGraphInstantiateFlagAutoFreeOnLaunch",
                        notes=(f"when {', '.join(label for _, _, label in self.decisions)}",)
                        if self.decisions else ()))
            live = {}
            for s in body.get(begins, ()):  # (in body order: a free node ends what an alloc node before it began)
                if s.op is Op.ALLOC:
                    live[s.memory] = s.span
                elif s.op is Op.FREE:
                    live.pop(s.memory, None)
            previous[key] = (begins, live)

    def unlaunched_graph_streams(self) -> set[int]:
        """The streams named in the bodies of graphs no thread launches: used, as any stream
        a graph's body names is (SP051 says the graph is never launched, not the streams)."""
        found: set[int] = set()
        pending = [decl.body for decl in self.unlaunched_graph_decls()]
        while pending:
            node = pending.pop()
            if isinstance(node, (list, tuple)):
                pending.extend(node)
                continue
            stream = getattr(node, "stream", None)
            if isinstance(stream, ast.Ref):
                entity = self.entities.get(stream.name.text)
                if entity is not None and entity.kind == "stream":
                    found.update(entity.indices)
            pending.extend(value for name in ("body", "branches", "then", "otherwise")
                           if isinstance(value := getattr(node, name, None), (list, tuple)))
        return found

    def unlaunched_graph_decls(self) -> list[ast.GraphDecl]:
        """The graph declarations (a whole graph array each) that no thread launches."""
        launched = {self.graph_elements[element][0].span for element, _ in self.graph_launchers}
        return [decl for decl in dict.fromkeys(decl for decl, _, _ in self.graph_elements) if decl.span not in launched]

    def unlaunched_graphs(self) -> list[Diagnostic]:
        """SP051 for a graph (a whole graph array) that no thread launches."""
        found = []
        for decl in self.unlaunched_graph_decls():
            what = "graph array" if decl.count is not None else "graph"
            found.append(warning(Code.SP051, f"{what} `{decl.name.text}` is never launched", decl.name.span,
                                 "declared here", help=f"launch it on a stream (`STREAM: launch {decl.name.text}`), "
                                                       "or remove it"))
        return found

    def shared_events(self) -> None:
        """An event that a graph's body records or waits on is the graph's own: a record inside
        a capture records nothing at run time (CUDA: waiting on or synchronizing with it is
        cudaErrorCapturedEvent or reads a stale record), so a use outside every graph is an
        error; so is an event node on it (`wait E external`, in any graph), which acts on the
        declared event that work outside shares."""
        for event, span in self.events_outside.items():
            if event in self.events_captured:
                graph, inside = self.events_captured[event]
                name = self.events[event].name
                node = self.event_nodes.get(span)
                if node is not None:
                    where = "the same graph" if node == graph else f"graph `{node}`"
                    self.record(error(
                        Code.SP030, f"event `{name}` is used both inside graph `{graph}` and by an event node of "
                        f"{where}, which acts on the declared event", span, "an event node on the declared event",
                        secondary=((inside, f"used inside graph `{graph}`"),),
                        help=f"inside graph `{graph}`, `{name}` is the capture's own and is never recorded at run "
                             f"time: for the node to see that record, make it a record node (`record {name} "
                             f"external`); if the graph orders its own streams with `{name}`, use another "
                             f"declared event for one of the two"))
                    continue
                self.record(error(
                    Code.SP030, f"event `{name}` is used both inside graph `{graph}` and outside it",
                    span, "used outside the graph",
                    secondary=((inside, "used inside the graph"),),
                    help=f"to wait for the graph, record another event on the launch stream after `launch {graph}`; "
                         f"to wait for part of it, make the record an event record node (`record "
                         f"{self.events[event].name} external`), which work outside the graph shares"))

    LOWER = {
        ast.HostCall: host_call,
        ast.Sync: sync,
        ast.Query: sync,
        ast.HostNotify: host_notify,
        ast.HostAwait: host_notify,
        ast.HostAlloc: host_lifetime,
        ast.HostFree: host_lifetime,
        ast.Memcpy: memcpy,
        ast.HostMemset: host_memset,
        ast.KernelTask: kernel,
        ast.CallbackTask: kernel,
        ast.CopyTask: copy,
        ast.MemsetTask: memset,
        ast.ItemTask: item,
        ast.RecordTask: event_task,
        ast.WaitTask: event_task,
        ast.ResetTask: event_task,
        ast.WaitStreamTask: wait_stream,
        ast.RecordStreamTask: record_stream,
        ast.NotifyTask: notify_task,
        ast.AwaitTask: notify_task,
        ast.CollectiveTask: collective,
        ast.SendTask: point_to_point,
        ast.RecvTask: point_to_point,
        ast.AllocTask: stream_lifetime,
        ast.FreeTask: stream_lifetime,
        ast.LaunchTask: launch,
    }
    """How each kind of statement node is lowered."""


_OPPOSITE = {ExpectKind.NO_RACE: ExpectKind.RACE, ExpectKind.NO_DEADLOCK: ExpectKind.DEADLOCK,
             ExpectKind.NO_USE_AFTER_FREE: ExpectKind.USE_AFTER_FREE, ExpectKind.NO_MISMATCH: ExpectKind.MISMATCH}
_OPPOSITE.update({kind: negated for negated, kind in list(_OPPOSITE.items())})


def expectation_conflicts(expectations: tuple[Expectation, ...]) -> list[Diagnostic]:
    """SP067: an `expect` line that repeats an earlier one, or that cannot be met together
    with an earlier one (`no race` and `race on B`): one of them was usually left behind."""
    found = []
    for k, later in enumerate(expectations):
        for earlier in expectations[:k]:
            same = (later.kind, later.buffer, later.limit, later.exact_limit) == (
                earlier.kind, earlier.buffer, earlier.limit, earlier.exact_limit)
            opposite = _OPPOSITE.get(later.kind) is earlier.kind and None in (later.buffer, earlier.buffer)
            if same or opposite:
                found.append(warning(
                    Code.SP067, "this expectation repeats an earlier one" if same else
                    "this expectation and an earlier one cannot both be met", later.span,
                    "repeated" if same else "contradicts", secondary=((earlier.span, "the earlier one"),),
                    help="remove the repeated line" if same else "keep the line that says what the program should do"))
                break
    return found


class _Stop(Exception):
    """Enough errors: stop lowering."""


_COUNT_CAP = 1_000_000
"""Counting branch combinations stops past this."""


@dataclass(frozen=True, slots=True)
class Lowered:
    program: Program
    warnings: tuple[Diagnostic, ...]
    variants: tuple[Program, ...] = ()
    """Every program the spec lowers to (`variants[0] is program`): one per combination of
    `choose` branches, times two under `runtime cuda` when pageable memory is copied to a device
    or device memory allocated on the host (`cuda_variant`)."""


USAGE_WARNINGS = frozenset({Code.SP050, Code.SP051, Code.SP052})
"""Warnings about what a program uses (unused streams, never-recorded events, ...)."""


def _refuse_fine_cuts(program: Program) -> None:
    """SP018 where the byte ranges cut memory so finely that the engines' per-statement masks
    (`executor.layout`) would take more than `MAX_SEGMENT_BYTES`: each is as wide as the
    number of the highest piece it touches, across all memories."""
    cuts = [{0, m.size} for m in program.memories]
    for st in program.statements:
        for a in st.accesses:
            cuts[a.memory].update((a.start, a.end))
    if sum(len(c) for c in cuts) // 8 * len(program.statements) <= MAX_SEGMENT_BYTES:
        return  # (no mask is wider than all the pieces: within the limit whatever they touch)
    ordered = [sorted(c) for c in cuts]
    first, total = [], 0
    for c in ordered:
        first.append(total)
        total += len(c) - 1
    need = sum(max((first[a.memory] + bisect_left(ordered[a.memory], a.end) for a in st.accesses), default=0) // 8
               for st in program.statements)
    if need > MAX_SEGMENT_BYTES:
        widest = max(range(len(ordered)), key=lambda m: len(ordered[m]))
        memory = program.memories[widest]
        cut = len(ordered[widest]) - 1
        where = (f"`{memory.name}` into {cut:,}" if cut > 1 else f"{len(program.memories):,} buffers, none cut")
        raise SpecError(error(
            Code.SP018, f"this program's accesses name {total:,} pieces of memory ({where}): checking its "
            f"{len(program.statements):,} statements over them would take about {need * 3 / (1 << 30):.1f} GB",
            memory.span, "cut this finely" if cut > 1 else "one of them",
            help="name fewer distinct byte ranges (a range per statement cuts a buffer at both its ends) or "
                 "fewer buffer elements, or check fewer iterations"))


def lower(spec: ast.SpecFile, path: str, source: str,
          max_statements: int = DEFAULT_MAX_STATEMENTS, skipped: frozenset[str] = frozenset(),
          max_errors: int = MAX_ERRORS) -> Lowered:
    """Lower a syntax tree to its programs; raises `SpecError` on an error (`SpecErrors`, with
    all of them, when there are several). `skipped` names what lines the parser skipped
    declared: their uses are not errors of their own."""
    lowerer = _Lowerer(spec, path, source, max_statements, skipped, max_errors)
    programs = lowerer.lower()
    _refuse_fine_cuts(programs[0])
    seen = set()
    warnings = []
    everywhere = set.intersection(*lowerer.warned) if lowerer.warned else set()
    for w in lowerer.warnings:  # one warning per source line and code, not per loop instance or variant
        key = (w.code, w.primary_span)
        if w.code in USAGE_WARNINGS and key not in everywhere:
            continue
        if key not in seen:
            seen.add(key)
            warnings.append(w)
    return Lowered(programs[0], tuple(warnings), programs)
