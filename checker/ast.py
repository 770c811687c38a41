"""Syntax tree of a `.sched` file, exactly as written: names unresolved, loops not unrolled.

Every node carries the `Span` it was parsed from, so later stages can point at it. Each kind
of statement has its own node class (`KernelTask`, `CopyTask`, `Sync`, ...); the lowering
dispatches on the class.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from checker.ir import Span


@dataclass(frozen=True, slots=True)
class Name:
    text: str
    span: Span


# Expressions -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Number:
    """An integer literal, or a size literal already converted to bytes."""

    value: int
    span: Span


@dataclass(frozen=True, slots=True)
class Variable:
    name: str
    span: Span


@dataclass(frozen=True, slots=True)
class BinaryOp:
    operator: str
    left: "Expr"
    right: "Expr"
    span: Span


@dataclass(frozen=True, slots=True)
class Negate:
    operand: "Expr"
    span: Span


Expr = Number | Variable | BinaryOp | Negate


# References ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Ref:
    """A reference to a declared stream, event, notify, comm or device: `s` or `s[i]`; or
    `gpu0.default`, a device's default stream (`member` is the name after the dot)."""

    name: Name
    index: Expr | None
    span: Span
    member: Name | None = None


@dataclass(frozen=True, slots=True)
class Index:
    expr: Expr
    span: Span


@dataclass(frozen=True, slots=True)
class Slice:
    low: Expr | None
    high: Expr | None
    span: Span


@dataclass(frozen=True, slots=True)
class AccessRef:
    """`x`, `x[i]`, `x[lo:hi]` or `x[i][lo:hi]`."""

    name: Name
    subscripts: tuple[Index | Slice, ...]
    span: Span


@dataclass(frozen=True, slots=True)
class Duration:
    nanoseconds: int
    span: Span
    exact: Fraction | None = None
    """The value in ns where `nanoseconds` rounds it (`1.5ns`): kept for `expect makespan`."""


# Declarations ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SpecTitle:
    title: str
    span: Span


@dataclass(frozen=True, slots=True)
class EngineItem:
    engine: str
    count: int
    span: Span


@dataclass(frozen=True, slots=True)
class LaunchItem:
    duration: Duration
    span: Span


@dataclass(frozen=True, slots=True)
class QueuesItem:
    count: int
    span: Span


@dataclass(frozen=True, slots=True)
class RuntimeItem:
    """`runtime cuda` or `runtime cann`."""

    runtime: Name
    span: Span


@dataclass(frozen=True, slots=True)
class DeviceDecl:
    name: Name
    items: tuple[EngineItem | LaunchItem | QueuesItem | RuntimeItem, ...]
    span: Span
    count: Expr | None = None
    """`device NAME[N]`: N devices alike (one per rank)."""


@dataclass(frozen=True, slots=True)
class BufferDecl:
    name: Name
    count: Expr | None
    size: Number
    place: Name | None
    """None for host memory."""
    pinned: bool
    span: Span
    place_index: Expr | None = None
    """`on DEVICE[i]`: one device of a device array."""
    ipc: bool = False
    """`ipc`: shared between processes on purpose (an IPC handle, shared host memory)."""


@dataclass(frozen=True, slots=True)
class AliasDecl:
    name: Name
    target: AccessRef
    span: Span


@dataclass(frozen=True, slots=True)
class StreamDecl:
    name: Name
    count: Expr | None
    device: Name
    priority: tuple[int, Span] | None
    mode: str
    """"blocking", "legacy" or "nonblocking"."""
    span: Span
    device_index: Expr | None = None
    """`on DEVICE[i]`: one device of a device array."""


@dataclass(frozen=True, slots=True)
class EventDecl:
    name: Name
    count: Expr | None
    flag: bool
    span: Span
    ipc: bool = False
    """`ipc`: shared between processes on purpose (an interprocess event handle)."""


@dataclass(frozen=True, slots=True)
class NotifyDecl:
    name: Name
    count: Expr | None
    span: Span


@dataclass(frozen=True, slots=True)
class CommDecl:
    name: Name
    count: Expr | None
    """`comm NAME[N] = {...}`: N comms; NAME is the index variable inside the braces."""
    members: tuple[Ref, ...]
    span: Span
    one_in_flight: bool = False
    """`comm NAME = {...} one_in_flight`: a library that allows one call in flight per rank."""


@dataclass(frozen=True, slots=True)
class TensorDecl:
    """`tensor NAME[N]? SIZE on DEVICE`: memory of a caching allocator."""

    name: Name
    count: Expr | None
    size: Number
    device: Name
    span: Span
    device_index: Expr | None = None
    """`on DEVICE[i]`: one device of a device array."""


@dataclass(frozen=True, slots=True)
class ThreadDecl:
    name: Name
    count: Expr | None
    """`thread NAME[N] {...}`: N threads; NAME is the index variable inside the body."""
    body: tuple["Statement", ...]
    span: Span
    process: bool = False
    """`thread NAME process {...}`: each thread is a process of its own (a rank of a
    multi-process job), whose device-wide waits cover only the devices it has used."""


@dataclass(frozen=True, slots=True)
class GraphDecl:
    """`graph NAME[N] { ... }`: a captured graph (an extension). The body is the stream work as
    it was captured; each element is one instantiated exec, launched by `STREAM: launch NAME`."""

    name: Name
    count: Expr | None
    """`graph NAME[N]`: N graphs; NAME is the index variable inside the body."""
    body: tuple["Statement", ...]
    span: Span


@dataclass(frozen=True, slots=True)
class ExpectDecl:
    kind: str
    """One of ir.ExpectKind's values."""
    buffer: Ref | None
    """`x`, or an element of a buffer array, `x[1]`."""
    limit: Duration | None
    span: Span


Declaration = (
    SpecTitle | DeviceDecl | BufferDecl | AliasDecl | StreamDecl | EventDecl | NotifyDecl
    | CommDecl | TensorDecl | ThreadDecl | GraphDecl | ExpectDecl
)


# Statements ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class For:
    variable: Name
    low: Expr
    high: Expr
    body: tuple["Statement", ...]
    span: Span


@dataclass(frozen=True, slots=True)
class Let:
    variable: Name
    value: Expr
    span: Span


# Stream statements (`STREAM: ...`): one node per operation. Each has the stream first and its
# span last.


@dataclass(frozen=True, slots=True)
class KernelTask:
    stream: Ref
    name: Name
    reads: tuple[AccessRef, ...]
    writes: tuple[AccessRef, ...]
    duration: Duration | None
    span: Span


@dataclass(frozen=True, slots=True)
class CallbackTask:
    stream: Ref
    name: Name
    reads: tuple[AccessRef, ...]
    writes: tuple[AccessRef, ...]
    duration: Duration | None
    span: Span


@dataclass(frozen=True, slots=True)
class CopyTask:
    stream: Ref
    destination: AccessRef
    source: AccessRef
    duration: Duration | None
    span: Span


@dataclass(frozen=True, slots=True)
class RecordTask:
    stream: Ref
    event: Ref
    span: Span
    external: bool = False
    """`external` (in a graph's body): an event record node on the declared event
    (cudaEventRecordExternal), not on the graph's own copy."""


@dataclass(frozen=True, slots=True)
class WaitTask:
    stream: Ref
    event: Ref
    span: Span
    external: bool = False
    """`external` (in a graph's body): an event wait node on the declared event
    (cudaEventWaitExternal), not on the graph's own copy."""


@dataclass(frozen=True, slots=True)
class ResetTask:
    stream: Ref
    event: Ref
    span: Span
    external: bool = False
    """`external` (in a graph's body): a reset node of the declared flag event."""


@dataclass(frozen=True, slots=True)
class NotifyTask:
    stream: Ref
    notify: Ref
    span: Span


@dataclass(frozen=True, slots=True)
class AwaitTask:
    stream: Ref
    notify: Ref
    span: Span


@dataclass(frozen=True, slots=True)
class MemsetTask:
    stream: Ref
    access: AccessRef
    duration: Duration | None
    span: Span


@dataclass(frozen=True, slots=True)
class CollectiveTask:
    """`STREAM: KIND COMM [root STREAM] ACCESS [<- SOURCE]`: a collective call of every member
    of COMM."""

    stream: Ref
    kind: str
    """The ir.Op value: allreduce, allgather, reducescatter, alltoall, broadcast, reduce."""
    comm: Ref
    root: Ref | None
    """broadcast and reduce: the root member stream."""
    access: AccessRef
    """In place: the buffer; out of place: the destination."""
    source: AccessRef | None
    """Out of place: the source (`DST <- SRC`); None in place."""
    duration: Duration | None
    span: Span


@dataclass(frozen=True, slots=True)
class SendTask:
    stream: Ref
    comm: Ref
    peer: Ref
    access: AccessRef
    duration: Duration | None
    span: Span


@dataclass(frozen=True, slots=True)
class RecvTask:
    stream: Ref
    comm: Ref
    peer: Ref
    access: AccessRef
    duration: Duration | None
    span: Span


@dataclass(frozen=True, slots=True)
class AllocTask:
    stream: Ref
    access: AccessRef
    span: Span


@dataclass(frozen=True, slots=True)
class FreeTask:
    stream: Ref
    access: AccessRef
    span: Span


@dataclass(frozen=True, slots=True)
class WaitStreamTask:
    """`S2: wait_stream S1` (PyTorch `wait_stream`)."""

    stream: Ref
    source: Ref
    span: Span


@dataclass(frozen=True, slots=True)
class RecordStreamTask:
    """`S2: record_stream T` (PyTorch `record_stream`)."""

    stream: Ref
    tensor: AccessRef
    span: Span


@dataclass(frozen=True, slots=True)
class LaunchTask:
    """`S: launch G`: one launch of a captured graph on S (`cudaGraphLaunch`)."""

    stream: Ref
    graph: Ref
    span: Span


@dataclass(frozen=True, slots=True)
class ItemTask:
    """`S: item ACCESS`: a `.item()`-style read of device memory into the host."""

    stream: Ref
    access: AccessRef
    duration: Duration | None
    span: Span


Task = (
    KernelTask | CallbackTask | CopyTask | MemsetTask | RecordTask | WaitTask | ResetTask
    | NotifyTask | AwaitTask | CollectiveTask | SendTask | RecvTask | AllocTask | FreeTask
    | WaitStreamTask | RecordStreamTask | ItemTask | LaunchTask
)


# Host statements.


@dataclass(frozen=True, slots=True)
class HostCall:
    name: Name
    reads: tuple[AccessRef, ...]
    writes: tuple[AccessRef, ...]
    duration: Duration | None
    span: Span


@dataclass(frozen=True, slots=True)
class Sync:
    target: Ref | None
    """None for `sync all`."""
    span: Span


@dataclass(frozen=True, slots=True)
class HostNotify:
    notify: Ref
    span: Span


@dataclass(frozen=True, slots=True)
class HostAwait:
    notify: Ref
    span: Span


@dataclass(frozen=True, slots=True)
class HostAlloc:
    access: AccessRef
    span: Span
    nosync: bool = False
    """`alloc X nosync`: a hand-out that waits for nothing (a pool allocator's, as CuPy's or
    RMM's, or a mapping of reserved memory), where a plain `alloc` under `runtime cuda` is
    cudaMalloc."""


@dataclass(frozen=True, slots=True)
class HostFree:
    access: AccessRef
    span: Span
    nosync: bool = False
    """`free X nosync`: a release that waits for nothing (cuMemUnmap/cuMemRelease, a VMM or
    pool allocator's host-side release), where a plain `free` under `runtime cuda` is cudaFree."""


@dataclass(frozen=True, slots=True)
class Query:
    """`query E` / `query S`: polling until done, which waits as `sync` does."""

    target: Ref
    span: Span


@dataclass(frozen=True, slots=True)
class Memcpy:
    """Host `memcpy DST <- SRC`: a copy on the device's default stream that blocks the thread."""

    destination: AccessRef
    source: AccessRef
    duration: Duration | None
    span: Span


@dataclass(frozen=True, slots=True)
class HostMemset:
    """Host `memset DST`: a memset on the device's default stream that blocks the thread."""

    access: AccessRef
    duration: Duration | None
    span: Span


@dataclass(frozen=True, slots=True)
class Group:
    """`group { ... }`: collective calls launched together (`ncclGroupStart/End`)."""

    body: tuple["Statement", ...]
    span: Span


@dataclass(frozen=True, slots=True)
class Choose:
    """`choose { ... } or { ... }`: one branch runs; every combination is checked."""

    branches: tuple[tuple["Statement", ...], ...]
    span: Span


@dataclass(frozen=True, slots=True)
class Compare:
    """`A < B` and the like, between integer expressions."""

    operator: str
    """One of `==`, `!=`, `<`, `<=`, `>`, `>=`."""
    left: Expr
    right: Expr
    span: Span


@dataclass(frozen=True, slots=True)
class Logical:
    """`C and D`, `C or D`."""

    operator: str
    left: "Condition"
    right: "Condition"
    span: Span


Condition = Compare | Logical


@dataclass(frozen=True, slots=True)
class If:
    """`if C { ... } else if D { ... } else { ... }`: decided while unrolling, from the values of
    `for`, `let` and thread-index variables, so that one loop can treat its first or last
    iteration, or one rank of a thread array, differently."""

    branches: tuple[tuple[Condition, tuple["Statement", ...]], ...]
    otherwise: tuple["Statement", ...]
    """The `else` block; empty without one."""
    span: Span

    def bodies(self) -> tuple[tuple["Statement", ...], ...]:
        return tuple(body for _, body in self.branches) + (self.otherwise,)


Statement = (
    For | Let | Task | HostCall | Sync | Query | HostNotify | HostAwait | HostAlloc | HostFree
    | Memcpy | HostMemset | Group | Choose | If
)


def nested_statements(body):
    """Every statement of a block and of the blocks inside it (`for`, `group`, `if`, `choose`),
    in source order, for questions about what a program may do before it is unrolled."""
    for statement in body:
        yield statement
        if isinstance(statement, Choose):
            blocks = statement.branches
        elif isinstance(statement, If):
            blocks = statement.bodies()
        elif isinstance(statement, (For, Group)):
            blocks = (statement.body,)
        else:
            continue
        for block in blocks:
            yield from nested_statements(block)


@dataclass(frozen=True, slots=True)
class SpecFile:
    declarations: tuple[Declaration, ...]
    span: Span
