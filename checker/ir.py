"""The lowered program: the one input of every analysis backend.

Contract for backends (the happens-before fast path, the SMT encoder, the executor,
the optimizer):

* A `Program` is fully resolved. Loops are unrolled, `let`s evaluated, arrays expanded,
  aliases resolved. Every name is an index into one of the program's tuples.
* `Program.statements` holds every lowered statement; `Statement.index` is its position
  there. Each thread's statements appear in program order in `Thread.statements`.
* A statement with `stream is None` runs on its host thread (`host`, `sync`, host
  `notify`/`await`/`alloc`/`free`). Every other statement enqueues one *task* on its stream;
  `Statement.blocking` marks a copy to or from pageable host memory, which also blocks its
  thread until the copy completes.
* Accesses name a `Memory` (one declared buffer, or one element of a buffer array) and a
  half-open byte range. `free` carries a write access of the bytes it frees.
* Times are integer nanoseconds. Priorities: a lower `Stream.priority` goes first.
* `Program.groups` lists every collective group (the k-th collective of each member of a
  comm) and send/recv pair; a group whose `complete` is false can never complete.
* What each kind of statement does (running or instant task, accesses, synchronizes only,
  collective, lifetime, engine) is `OPERATIONS[op]`, the one table backends read.
* A spec with `choose` lowers to one `Program` per combination of branches (`variant`).
* Backends treat the IR as read-only and never import from each other.

The meaning of all of this is `docs/language.md` (from the language contract); the step
vocabulary that witnesses are written in is `checker/witness.py`.
"""

from __future__ import annotations

import enum
from fractions import Fraction
from dataclasses import dataclass, field

NS_PER_MS = 1_000_000
PRIORITY_HIGH = -(10**6)
"""`Stream.priority` of `priority high` (a lower value goes first)."""
PRIORITY_LOW = 10**6
"""`Stream.priority` of `priority low`."""


@dataclass(frozen=True, slots=True)
class Span:
    """A region of the source: 1-based line and column, plus character offsets."""

    line: int
    column: int
    end_line: int
    end_column: int
    start: int
    end: int

    def to_json(self) -> dict[str, int]:
        return {
            "line": self.line,
            "column": self.column,
            "end_line": self.end_line,
            "end_column": self.end_column,
        }


NO_SPAN = Span(1, 1, 1, 1, 0, 0)


class Engine(str, enum.Enum):
    """The kind of device unit a task occupies while it runs."""

    COMPUTE = "compute"
    COPY = "copy"
    H2D = "h2d"
    D2H = "d2h"
    D2D = "d2d"
    COMM = "comm"
    CALLBACK = "callback"


class CopyKind(str, enum.Enum):
    H2D = "h2d"
    D2H = "d2h"
    D2D = "d2d"


class StreamMode(str, enum.Enum):
    BLOCKING = "blocking"
    LEGACY = "legacy"
    NONBLOCKING = "nonblocking"


class Op(str, enum.Enum):
    KERNEL = "kernel"
    MEMSET = "memset"
    COPY = "copy"
    CALLBACK = "callback"
    RECORD = "record"
    WAIT = "wait"
    RESET = "reset"
    NOTIFY = "notify"
    AWAIT = "await"
    ALLREDUCE = "allreduce"
    ALLGATHER = "allgather"
    REDUCESCATTER = "reducescatter"
    BROADCAST = "broadcast"
    REDUCE = "reduce"
    ALLTOALL = "alltoall"
    SEND = "send"
    RECV = "recv"
    ALLOC = "alloc"
    FREE = "free"
    HOST = "host"
    SYNC = "sync"


@dataclass(frozen=True, slots=True)
class Operation:
    """What every backend needs to know about one kind of statement (the one table of it).

    Backends ask this table instead of keeping their own sets of ops, so that a new
    operation is described once: which steps its task takes, whether it synchronizes only,
    whether it is matched across a comm, which engine it occupies.
    """

    op: Op
    interval: bool
    """On a stream, a *running* task (`start` and `end` steps); otherwise an *instant* task
    (one `complete` step). Host-only operations have neither."""
    stream: bool
    """Can be enqueued on a stream (`S: op ...`)."""
    host: bool
    """Can run on a host thread (`op ...` without a stream)."""
    accesses: bool
    """Its accesses count for races (an `alloc` has none; `free` writes what it frees)."""
    synchronizes: bool = False
    """Only orders other work (record, wait, reset, notify, await): no data, no engine."""
    collective: bool = False
    """Matched by position with the same call of every other member of its comm."""
    pairwise: bool = False
    """Matched with one peer (send/recv) rather than with every member of the comm."""
    lifetime: bool = False
    """Starts or ends a memory's lifetime (alloc, free)."""
    engine: "Engine | None" = None
    """The engine a running task occupies (a copy's is chosen by direction at lowering)."""


class SyncKind(str, enum.Enum):
    STREAM = "stream"
    EVENT = "event"
    DEVICE = "device"
    ALL = "all"
    STREAMS = "streams"
    """A set of streams lowered from another construct (CUDA's legacy-stream sync)."""


class Runtime(str, enum.Enum):
    """Which runtime's documented behaviour a device follows where runtimes differ."""

    CANN = "cann"
    CUDA = "cuda"


def _operations() -> dict[Op, Operation]:
    E = Engine
    table = [
        Operation(Op.KERNEL, interval=True, stream=True, host=False, accesses=True, engine=E.COMPUTE),
        Operation(Op.MEMSET, interval=True, stream=True, host=False, accesses=True, engine=E.COMPUTE),
        Operation(Op.COPY, interval=True, stream=True, host=False, accesses=True, engine=E.COPY),
        Operation(Op.CALLBACK, interval=True, stream=True, host=False, accesses=True, engine=E.CALLBACK),
        Operation(Op.RECORD, interval=False, stream=True, host=False, accesses=False, synchronizes=True),
        Operation(Op.WAIT, interval=False, stream=True, host=False, accesses=False, synchronizes=True),
        Operation(Op.RESET, interval=False, stream=True, host=False, accesses=False, synchronizes=True),
        Operation(Op.NOTIFY, interval=False, stream=True, host=True, accesses=False, synchronizes=True),
        Operation(Op.AWAIT, interval=False, stream=True, host=True, accesses=False, synchronizes=True),
        Operation(Op.ALLREDUCE, interval=True, stream=True, host=False, accesses=True, collective=True, engine=E.COMM),
        Operation(Op.ALLGATHER, interval=True, stream=True, host=False, accesses=True, collective=True, engine=E.COMM),
        Operation(Op.REDUCESCATTER, interval=True, stream=True, host=False, accesses=True, collective=True, engine=E.COMM),
        Operation(Op.BROADCAST, interval=True, stream=True, host=False, accesses=True, collective=True, engine=E.COMM),
        Operation(Op.REDUCE, interval=True, stream=True, host=False, accesses=True, collective=True, engine=E.COMM),
        Operation(Op.ALLTOALL, interval=True, stream=True, host=False, accesses=True, collective=True, engine=E.COMM),
        Operation(Op.SEND, interval=True, stream=True, host=False, accesses=True, collective=True, pairwise=True, engine=E.COMM),
        Operation(Op.RECV, interval=True, stream=True, host=False, accesses=True, collective=True, pairwise=True, engine=E.COMM),
        Operation(Op.ALLOC, interval=False, stream=True, host=True, accesses=False, lifetime=True),
        Operation(Op.FREE, interval=True, stream=True, host=True, accesses=True, lifetime=True),
        Operation(Op.HOST, interval=False, stream=False, host=True, accesses=True),
        Operation(Op.SYNC, interval=False, stream=False, host=True, accesses=False),
    ]
    assert {o.op for o in table} == set(Op), "every Op needs a row"
    return {o.op: o for o in table}


OPERATIONS: dict[Op, Operation] = _operations()
"""The operation table: `OPERATIONS[statement.op]`."""


@dataclass(frozen=True, slots=True)
class Device:
    index: int
    name: str
    engines: tuple[tuple[Engine, int], ...]
    """Declared engine counts. Use `count` to ask for a unit kind."""
    launch: int
    """Host time (ns) each enqueue onto a stream of this device costs its thread."""
    queues: int | None
    span: Span
    runtime: Runtime = Runtime.CANN
    """Whose documented behaviour the device follows where CUDA and CANN differ."""

    def count(self, engine: Engine) -> int:
        """Units of `engine`; an engine the device does not declare has one unit."""
        for kind, n in self.engines:
            if kind == engine:
                return n
        if engine in (Engine.H2D, Engine.D2H, Engine.D2D):
            return self.count(Engine.COPY)
        return 1

    def declares(self, engine: Engine) -> bool:
        return any(kind == engine for kind, _ in self.engines)


@dataclass(frozen=True, slots=True)
class Memory:
    """One declared buffer, or one element `NAME[i]` of a buffer array."""

    index: int
    name: str
    """`x` or `x[3]`."""
    buffer: str
    """The declared buffer name (`x` for every element of `x[N]`)."""
    size: int
    device: int | None
    """None for host memory."""
    pinned: bool
    span: Span
    owners: tuple[str, ...] = ()
    """For a caching-allocator block: the declared tensors that the allocator placed in it,
    in order (one block can serve several tensors one after another). Empty for a buffer."""
    pool: int | None = None
    """For a caching-allocator block: the stream whose pool holds it (where its tensors are
    allocated, and where it is handed on at once after a free)."""
    tensors: tuple[str, ...] = ()
    """For a caching-allocator block: the tensors (array elements named, `g[1]`) whose blocks
    covered it, in order: an `expect race on g[1]` matches a race on it."""
    comm: int | None = None
    """For the state of a `one_in_flight` comm's rank (`Comm.in_flight`): that comm."""
    ipc: bool = False
    """Declared `ipc`: shared between processes on purpose (SP063 does not warn)."""

    @property
    def on_host(self) -> bool:
        return self.device is None


@dataclass(frozen=True, slots=True)
class Access:
    memory: int
    start: int
    end: int
    """Half-open byte range [start, end) of the memory."""
    write: bool
    span: Span
    written_as: str
    """The access as the user wrote it, for messages (`q`, `kv[0:4MiB]`)."""

    def conflicts(self, other: Access) -> bool:
        """Same memory, overlapping bytes, at least one write."""
        return (
            self.memory == other.memory
            and (self.write or other.write)
            and self.start < other.end
            and other.start < self.end
        )


def conflicting(first: tuple[Access, ...], second: tuple[Access, ...]):
    """Each pair (x of `first`, y of `second`) that conflicts, in the order of x, then of y.
    Many accesses are paired by memory: two statements naming a whole 100,000-element array
    compared 10^10 pairs."""
    if len(first) * len(second) <= 64:
        yield from ((x, y) for x in first for y in second if x.conflicts(y))
        return
    by_memory: dict[int, list[Access]] = {}
    for y in second:
        by_memory.setdefault(y.memory, []).append(y)
    for x in first:
        for y in by_memory.get(x.memory, ()):
            if x.conflicts(y):
                yield x, y


def accesses_conflict(a, b) -> bool:
    """Whether some access of `a` conflicts with some access of `b`."""
    return next(conflicting(a, b), None) is not None


@dataclass(frozen=True, slots=True)
class Stream:
    index: int
    name: str
    device: int
    priority: int
    """Lower goes first when an engine is contended; never orders anything."""
    mode: StreamMode
    queue: int | None
    """Hardware queue of the device this stream feeds, when the device declares `queues`."""
    span: Span
    context: int | None = None
    """The `process` thread whose work the stream carries (None: the program's one process).
    The legacy stream's implicit synchronization (rule 11) and hardware queues (rule 10) are
    per process, as CUDA contexts are: streams of two contexts never order each other."""
    host_calls: bool = False
    """The implicit stream of a thread's host `memcpy`/`memset` under CANN (`DEVICE.calls@THREAD`),
    which orders nothing and which no spec can name: reports show its calls without it."""
    captured: int | None = None
    """For the stream that a graph's work captured on a declared stream runs on at its launches
    (`GRAPH.STREAM`): that declared stream. Reports show it to say where to add an order."""

    @property
    def written(self) -> str:
        """The name as a spec writes it, for help that says what to write: reports mark a
        `process` thread's own streams (`gpu.default@worker`), which the spec names without."""
        return self.name.partition("@")[0]


@dataclass(frozen=True, slots=True)
class Event:
    index: int
    name: str
    flag: bool
    span: Span
    ipc: bool = False
    """Declared `ipc`: shared between processes on purpose (SP075 does not warn)."""


@dataclass(frozen=True, slots=True)
class Notify:
    index: int
    name: str
    span: Span


@dataclass(frozen=True, slots=True)
class Comm:
    index: int
    name: str
    members: tuple[int, ...]
    """Member streams, one per rank."""
    span: Span
    in_flight: tuple[int, ...] = ()
    """For a comm declared `one_in_flight`: per rank, the memory that stands for the state the
    library keeps per rank (a signal pad, a staging buffer), which every call of that rank writes;
    two calls of a rank that can run at once race on it. Empty for any other comm."""


@dataclass(frozen=True, slots=True)
class Thread:
    index: int
    name: str
    statements: tuple[int, ...]
    span: Span
    process: bool = False
    """Declared `process`: a process of its own (its `sync all` and the device-wide waits of
    its calls cover only the devices it has used)."""


def loop_text(bindings: tuple[tuple[str, int], ...]) -> str:
    """A statement's loop and let variables (`Statement.bindings`) as `show` prints them,
    `[step=3 slot=1]`; empty outside loops. Reports and messages tell one iteration of a
    line from another by it."""
    return "[" + " ".join(f"{k}={v}" for k, v in bindings) + "]" if bindings else ""


@dataclass(frozen=True, slots=True)
class Statement:
    """One lowered statement: a task on a stream, or a step of a host thread."""

    index: int
    thread: int
    op: Op
    stream: int | None
    span: Span
    origin: int
    """Identity of the source statement; every loop instance of one statement shares it."""
    name: str = ""
    """Kernel, callback or host-function name."""
    accesses: tuple[Access, ...] = ()
    duration: int = 0
    engine: Engine | None = None
    device: int | None = None
    """Device of the stream (tasks only)."""
    event: int | None = None
    notify: int | None = None
    comm: int | None = None
    peer: int | None = None
    """send: the receiving stream; recv: the sending stream."""
    group: int | None = None
    """Index into Program.groups for allreduce/send/recv."""
    sync: SyncKind | None = None
    target: int | None = None
    """sync: the stream, event or device index (None for `sync all`)."""
    copy: CopyKind | None = None
    blocking: bool = False
    """A copy to or from pageable host memory: the thread waits for it to complete."""
    memory: int | None = None
    """alloc/free: the memory whose lifetime this statement changes (the first, see `pieces`)."""
    pieces: tuple[int, ...] = ()
    """alloc/free of a caching-allocator tensor whose block spans several memories (pieces of
    a segment that other blocks cut): every one of them. Empty otherwise."""
    tensor_allocs: tuple[int, ...] = ()
    """The `alloc` statement of each caching-allocator tensor lifetime the statement uses: a
    use issued before it is a use before alloc, whoever had those bytes before."""
    tensor_frees: tuple[int, ...] = ()
    """The `free` statements of the caching-allocator tensor lifetimes the statement uses: a
    use issued after one is a use after free, whoever has those bytes by then (another
    tensor's `alloc` of the block in between does not make it live again)."""
    bindings: tuple[tuple[str, int], ...] = ()
    """Loop and let variables in scope, for messages (`step=3`)."""
    root: int | None = None
    """broadcast/reduce: the root member stream."""
    member: int | None = None
    """A comm call enqueued on a stream other than its rank's member (NCCL takes the stream
    per call): that member, which it meets and is matched as (`rank_stream`). None: its own
    stream is the member."""
    batch: int | None = None
    """Tasks lowered from one `group { ... }` (one fused launch, as `ncclGroupStart/End`):
    tasks of the same batch on one stream are not ordered among themselves by stream order;
    the tasks around the batch are ordered with all of it."""
    streams: tuple[int, ...] = ()
    """sync: every stream it waits for (one for `sync S`, a device's for `sync DEVICE`, ...)."""
    launch_only: bool = False
    """alloc/free of a caching-allocator tensor: only the launch order counts (work enqueued
    after the free uses freed memory); it is not an access and frees nothing at run time."""
    launch_ordered: bool = False
    """free: work enqueued after it uses freed memory whenever it runs, besides what runs
    after it (a tensor's free, and under `runtime cuda` a stream free: `cudaFreeAsync`).
    Other frees count by run order alone, as the contract says."""
    spins: bool = False
    """A collective or send/recv member that starts on its own when its stream reaches it
    and spins there until its peers come (NCCL, under `runtime cuda`). Other members start
    with their group, once every member can (the contract's rule 8)."""
    form: str = ""
    """How the user wrote it when lowering rewrote it (`wait_stream s1`, `query e`,
    `memcpy`, `item`), for messages; empty when the statement is what was written."""
    launch: int | None = None
    """Work of a graph's body: the statement that began its launch (`S: launch G`, a record on
    the launch stream), for messages."""
    costs_launch: bool = True
    """A task its thread pays its device's `launch` time to enqueue (`Program.launch_time`).
    False for what a graph launch runs beyond its first statement: `cudaGraphLaunch` is one
    call, however much work the graph holds; and for the records and waits lowering adds
    inside one call (a peer `memcpy`'s ordering with the other device, NCCL's ordering of a
    comm's calls), which the call's own launch pays for."""

    @property
    def is_task(self) -> bool:
        return self.stream is not None

    @property
    def lifetime_memories(self) -> tuple[int, ...]:
        """alloc/free: every memory whose lifetime this statement changes."""
        return self.pieces or (() if self.memory is None else (self.memory,))

    @property
    def rank_stream(self) -> int | None:
        """A comm call: the member stream of the comm whose rank it calls for."""
        return self.member if self.member is not None else self.stream

    @property
    def operation(self) -> Operation:
        return OPERATIONS[self.op]

    @property
    def running(self) -> bool:
        """A task with `start` and `end` steps (a kernel, copy, collective, stream free...)."""
        return self.stream is not None and OPERATIONS[self.op].interval

    @property
    def begins_when_done(self) -> bool:
        """Rule 10 (hardware queues): a task "begins" by starting, "or complete if it takes no
        time". So a running task of duration 0 has begun only once it completed. Not a
        member that spins (`spins`): it has begun from its own start until the peers come."""
        return self.running and self.duration == 0 and not self.spins


class GroupKind(str, enum.Enum):
    COLLECTIVE = "collective"
    """The k-th collective call (allreduce, allgather, ...) of every member of a comm."""
    SENDRECV = "sendrecv"


@dataclass(frozen=True, slots=True)
class Group:
    """Tasks that meet: the k-th collective of each member of a comm, or the k-th send from
    A to B with the k-th recv on B from A. The members start together once every one can
    (a member that `spins` starts on its own when its stream reaches it); each member
    completes on its own, once every member has started."""

    index: int
    kind: GroupKind
    comm: int
    position: int
    members: tuple[int, ...]
    """Statement indices of the member tasks present in the program."""
    complete: bool
    """False when some member task is missing: the group can never start."""


class ExpectKind(str, enum.Enum):
    NO_RACE = "no race"
    RACE = "race"
    NO_DEADLOCK = "no deadlock"
    DEADLOCK = "deadlock"
    NO_USE_AFTER_FREE = "no use-after-free"
    USE_AFTER_FREE = "use-after-free"
    NO_MISMATCH = "no mismatch"
    MISMATCH = "mismatch"
    """Collective mismatch (SP202): members of a comm call different collectives at one position."""
    MAKESPAN = "makespan"


@dataclass(frozen=True, slots=True)
class Expectation:
    kind: ExpectKind
    span: Span
    buffer: str | None = None
    """`expect race on BUFFER`: the declared buffer name."""
    limit: int | None = None
    """`expect makespan <= D`: D in ns (rounded down)."""
    exact_limit: Fraction | None = None
    """D where whole nanoseconds round it (`<= 1.5ns`)."""


@dataclass(frozen=True, slots=True)
class Program:
    path: str
    source: str
    title: str | None
    devices: tuple[Device, ...]
    memories: tuple[Memory, ...]
    streams: tuple[Stream, ...]
    events: tuple[Event, ...]
    notifies: tuple[Notify, ...]
    comms: tuple[Comm, ...]
    threads: tuple[Thread, ...]
    statements: tuple[Statement, ...]
    groups: tuple[Group, ...]
    expectations: tuple[Expectation, ...]
    buffer_spans: tuple[tuple[str, Span], ...] = field(default=())
    """Declared buffer names with their declaration spans."""
    variant: str = ""
    """Which branch of every `choose` (and which runtime behaviour, where a runtime leaves
    it open) this program is; empty when the spec has a single program."""
    races_only: bool = False
    """A program that assumes a timing: the caching allocator hands a block recorded on other
    streams back to its pool once their work is done, which a host `sync` of the allocator's
    events stands for. Only its races and dead uses are findings (that sync can hang or delay
    where the real allocator would just not hand the block back), and it is not timed."""
    timings_left: int = 0
    """Programs of the allocator's timing that the limits left out (on a spec's first
    program): their races are not checked, which the checker reports as unknown."""
    timings_past_size: int = 0
    """Of those, the ones left out for the statements they unroll to or past the spec's
    count of programs (the others: past the frees one program gets timings for)."""
    exact_durations: tuple[tuple[int, Fraction], ...] = ()
    """(statement, duration in ns) where the statement's whole nanoseconds round it up."""
    exact_launches: tuple[tuple[int, Fraction], ...] = ()
    """(device, launch time in ns) likewise."""

    @property
    def tasks(self) -> tuple[Statement, ...]:
        return tuple(s for s in self.statements if s.stream is not None)

    def synced_streams(self, statement: Statement) -> tuple[int, ...]:
        """The streams a `sync` waits for (none for `sync EVENT`)."""
        if statement.streams or statement.sync is SyncKind.EVENT:
            return statement.streams
        if statement.sync is SyncKind.STREAM:
            return (statement.target,)
        if statement.sync is SyncKind.DEVICE:
            return tuple(s.index for s in self.streams if s.device == statement.target)
        return tuple(s.index for s in self.streams)

    def launch_time(self, statement: Statement) -> int:
        """Host time (ns) that issuing `statement` costs its thread: its device's `launch` for
        an enqueue, nothing for a host statement."""
        if statement.stream is None or not statement.costs_launch:
            return 0
        return self.devices[self.streams[statement.stream].device].launch

    def stream_tasks(self, stream: int) -> tuple[Statement, ...]:
        return tuple(s for s in self.statements if s.stream == stream)

    def launch_of(self, statement: Statement) -> dict | None:
        """For a captured graph's work, the `launch` that ran it as reports give it (the
        statement, its line, its stream: what the spec can name); None for other statements."""
        if statement.launch is None:
            return None
        launch = self.statements[statement.launch]
        return {"statement": statement.launch, "line": launch.span.line, "stream": self.streams[launch.stream].name}

    def describe(self, statement: Statement) -> str:
        """A short human name: `s1: kernel fwd` or `host decode`."""
        stream = self.streams[statement.stream] if statement.stream is not None else None
        where = f"{stream.name}: " if stream is not None and not stream.host_calls else ""
        if statement.form:
            return where + statement.form
        what = statement.op.value
        if statement.op is Op.COPY and len(statement.accesses) == 2:
            source, destination = sorted(statement.accesses, key=lambda x: x.write)
            return f"{where}copy {destination.written_as} <- {source.written_as}"
        if statement.name:
            what += f" {statement.name}"
        elif statement.event is not None:
            what += f" {self.events[statement.event].name}"
        elif statement.notify is not None:
            what += f" {self.notifies[statement.notify].name}"
        elif statement.memory is not None:  # (a free as written: through an alias, `free q`)
            what += f" {statement.accesses[0].written_as if statement.accesses else self.memories[statement.memory].name}"
        elif statement.comm is not None:
            what += f" {self.comms[statement.comm].name}"
            if statement.peer is not None:
                what += f" {'to' if statement.op is Op.SEND else 'from'} {self.streams[statement.peer].name}"
        elif statement.op is Op.SYNC:
            if statement.sync is SyncKind.ALL:
                what += " all"
            elif statement.sync is SyncKind.STREAM:
                what += f" {self.streams[statement.target].name}"
            elif statement.sync is SyncKind.EVENT:
                what += f" {self.events[statement.target].name}"
            else:
                what += f" {self.devices[statement.target].name}"
        return where + what
