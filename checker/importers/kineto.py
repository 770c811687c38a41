"""PyTorch profiler (Kineto) Chrome traces -> a `.sched` spec that reproduces the run.

What maps to what (docs/import.md has the user's version):

* each CUDA stream (`args.stream` of the GPU activities) becomes `stream streamN on gpuD`;
* each host thread that issues runtime calls becomes a `thread`; its statements follow the
  calls in time order;
* kernels, memcpys and memsets become `kernel` / `copy` statements with their measured
  durations; a memcpy's direction and pageable/pinned host side come from its name
  (`Memcpy HtoD (Pageable -> Device)`);
* the host time between the calls becomes `host cpu D` statements, so the host timeline of
  the spec is the trace's (the devices declare no `launch` cost: it is in the gaps);
* `cuda_sync` events are exact: `Stream Wait Event` is a `wait` bound, through
  `wait_on_cuda_event_record_corr_id`, to a `record` placed where its `cudaEventRecord` was
  called (one `event` per record); `Event Sync` is `sync EVENT`, `Stream Sync` is
  `sync STREAM` and `Context Sync` is `sync gpuD`. Without them, the bindings are inferred
  from the order of the calls and every inference is written down as an assumption;
* with an Execution Trace, reads and writes come from each operator's schema and tensor
  storages become buffers with byte ranges.

Everything is linear in the number of events apart from per-thread sorts.
"""

from __future__ import annotations

import bisect
import math
import re
import unicodedata
from collections import defaultdict, deque
from dataclasses import dataclass, field, replace
from collections.abc import Iterable
from typing import ClassVar

from checker.parse import MAX_DURATION_NS
from checker.importers.ascend import as_kineto, is_ascend, trace_key
from checker.importers.execution_trace import ExecutionTrace, TraceError
from checker.spec_text import (
    SpecText, ThreadText, access_text, comment_text, duration_text, rw_text, safe_name, size_text,
    title_text,
)

GPU_CATEGORIES = {"kernel": "kernel", "concurrent_kernel": "kernel", "gpu_memcpy": "memcpy",
                  "memcpy": "memcpy", "gpu_memset": "memset", "memset": "memset"}
CALL_CATEGORIES = frozenset({"cuda_runtime", "cuda_driver", "runtime", "driver", "xpu_runtime", "xpu_driver",
                             "privateuse1_runtime", "privateuse1_driver"})
RECORDER_LOOKBACK = 4096
"""How many of a recording thread's calls before a record `_Trace._launched_by_recorder` reads."""
PRIVATE_CALLS = frozenset({"privateuse1_runtime", "privateuse1_driver"})
"""A PrivateUse1 backend's calls (torch_npu's Kineto-style export): named after the kernel they
launched, at its start, with no correlation id (`_Trace._link_private`)."""
OP_CATEGORIES = frozenset({"cpu_op", "operator", "user_annotation"})

RECORD_CALLS = frozenset({"cudaEventRecord", "cudaEventRecordWithFlags", "cuEventRecord",
                          "cuEventRecordWithFlags", "hipEventRecord", "aclrtRecordEvent"})
WAIT_CALLS = frozenset({"cudaStreamWaitEvent", "cuStreamWaitEvent", "hipStreamWaitEvent", "aclrtStreamWaitEvent"})
STREAM_SYNC_CALLS = frozenset({"cudaStreamSynchronize", "cuStreamSynchronize", "hipStreamSynchronize",
                               "aclrtSynchronizeStream", "aclrtSynchronizeStreamWithTimeout"})
STREAM_QUERY_CALLS = frozenset({"cudaStreamQuery", "cuStreamQuery", "hipStreamQuery", "aclrtStreamQuery"})
"""Calls that return at once, done or not (`cudaErrorNotReady`), with no `cuda_sync` event:
one that returned after the work on its stream was done saw it done (`query S`)."""
EVENT_SYNC_CALLS = frozenset({"cudaEventSynchronize", "cuEventSynchronize", "hipEventSynchronize",
                              "aclrtSynchronizeEvent", "aclrtSynchronizeEventWithTimeout"})
EVENT_QUERY_CALLS = frozenset({"cudaEventQuery", "cuEventQuery", "hipEventQuery", "aclrtQueryEvent",
                              "aclrtQueryEventStatus"})
"""Calls that return at once, done or not: CUPTI reports them as an `Event Sync`, but only a
query that found the recorded work done orders anything (CUDA runtime API, `cudaEventQuery`:
`cudaErrorNotReady` "if all captured work has not yet been completed")."""
DEVICE_SYNC_CALLS = frozenset({"cudaDeviceSynchronize", "cuCtxSynchronize", "hipDeviceSynchronize",
                               "cudaThreadSynchronize", "aclrtSynchronizeDevice", "aclrtSynchronizeDeviceWithTimeout"})
FREE_CALLS = frozenset({"cudaFree", "cudaFreeHost", "cuMemFree", "cuMemFree_v2", "cuMemFreeHost",
                        "hipFree", "hipHostFree"})
"""Calls that synchronize the device before they return (CUDA documents frees as synchronizing)."""
SYNC_COPY_CALLS = frozenset({"cudaMemcpy", "cudaMemcpy2D", "cudaMemcpy3D", "cudaMemcpyToSymbol",
                             "cudaMemcpyFromSymbol", "cudaMemcpyPeer", "cuMemcpyHtoD", "cuMemcpyHtoD_v2",
                             "cuMemcpyDtoH", "cuMemcpyDtoH_v2", "cuMemcpyDtoD", "cuMemcpyDtoD_v2",
                             "hipMemcpy", "aclrtMemcpy", "aclrtMemcpy2d"})
"""Copies the host waits for whatever the memory (the non-`Async` API)."""

MEMCPY_NAME = re.compile(r"Memcpy (\w+) \(([^)]*?) -> ([^)]*?)\)")
HOST_KINDS = frozenset({"Pageable", "Pinned"})
ORPHAN_CALL = "(launched outside the profiled calls)"
"""The call written for GPU work that has no runtime call in the trace."""


# ---------------------------------------------------------------- the trace, read


@dataclass(slots=True)
class GpuOp:
    kind: str
    """`kernel`, `memcpy` or `memset`."""
    name: str
    device: int
    stream: int
    start: int
    dur: int
    correlation: int | None
    comm: dict | None = None
    """The collective a communication kernel ran (`COMM_KEYS` of its args, or of the
    `record_param_comms` operator that launched it), for `ranks.py`."""


@dataclass(frozen=True, slots=True)
class Collective:
    """What a communication kernel stands for in a spec of several ranks (`ranks.py`)."""

    kind: str
    """`allreduce`, `allgather`, `reducescatter`, `alltoall`, `broadcast`, `reduce`, `send`
    or `recv`."""
    comm: str
    peer: str | None
    """The root's stream (`broadcast`, `reduce`), the peer's (`send`, `recv`), None otherwise."""
    duration: int
    """ns: the shortest time measured in its group."""
    via: str | None = None
    """The comm's member stream where the rank ran the group's collectives on several streams
    (`ranks.py`): the collective runs there, between a record and a wait on its own stream."""
    position: int = 0
    """Its place among the rank's collectives through `via` (the events that bridge to it)."""
    called: str | None = None
    """What PyTorch called it, where the statement is another collective of the same shape
    (`gather` is written as a `reduce`, `scatter` as a `broadcast`)."""
    operator: CpuOp | None = None
    """The `record_param_comms` of a batched send or recv, whose tensors it uses (the batch's
    kernel is launched after every such record has closed)."""


@dataclass(frozen=True, slots=True)
class Batch:
    """One communication kernel that ran several sends and recvs (`batch_isend_irecv`: NCCL
    fuses the calls of one group into one kernel), written as a `group` of them."""

    members: tuple[Collective, ...]
    """In the order the rank called them."""
    via: ClassVar[None] = None
    """(batches run on the stream that launched them: see `Collective.via`)"""


@dataclass(slots=True)
class Call:
    """One runtime (or driver) call on a host thread."""

    thread: tuple
    name: str
    start: int
    end: int
    correlation: int | None


@dataclass(slots=True)
class SyncEvent:
    kind: str
    """`Stream Wait Event`, `Event Sync`, `Stream Sync` or `Context Sync`."""
    stream: int
    device: int
    wait_on_stream: int
    record: int
    """Correlation id of the `cudaEventRecord` call; -1 for none."""
    event: int = -1
    """`wait_on_cuda_event_id`: older Kineto names the event but not its record (-1: not given)."""
    assumed: str = ""
    """Why the binding is a guess, where the trace it came from did not say (`ascend.py`)."""
    flag: bool = False
    """A wait for a record made after it, which its task waited for: the event is a flag event
    (CANN's `aclrtCreateEventWithFlag`; `ascend.py`)."""


@dataclass(slots=True)
class CpuOp:
    start: int
    end: int
    name: str
    rf_id: int | None
    external_id: int | None
    annotation: bool


@dataclass(slots=True)
class StreamStats:
    """What one stream did in the trace (times in ns from the trace's origin)."""

    name: str
    device: int
    first: int = -1
    last: int = 0
    busy: int = 0
    ops: int = 0

    @property
    def span(self) -> int:
        return max(0, self.last - self.first) if self.ops else 0


@dataclass(slots=True)
class Imported:
    """A spec written from a trace, with what the comparison needs."""

    text: str
    streams: dict[str, StreamStats]
    """Observed per stream, by the spec's stream name."""
    gpu_first: int
    gpu_last: int
    notes: list[str]
    """What the user should know (shown on stderr): missing `cuda_sync` events, ..."""
    assumptions: list[str]
    counts: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # (names from the trace reach the spec, the notes and the assumptions: every spec and
        # every line the importer prints is made printable here, whatever wrote it)
        self.text = printable_text(self.text)
        self.notes = [printable_text(note) for note in self.notes]
        self.assumptions = [printable_text(assumption) for assumption in self.assumptions]

    @property
    def gpu_span(self) -> int:
        return max(0, self.gpu_last - self.gpu_first)


UNPRINTABLE_CATEGORIES = frozenset({"Cc", "Cf", "Cs"})
"""Unicode's control and format characters, and lone surrogates (which UTF-8 cannot write)."""
MAYBE_UNPRINTABLE = re.compile(r"[^\n\x20-\x7e]")
"""The characters whose category `printable_text` looks up (a spec is mostly printable ASCII)."""


def printable_text(text: str) -> str:
    """`text` with every control or format character (Unicode category Cc or Cf) but the line
    breaks between lines, and every lone surrogate, replaced by `?`. Names from a trace reach
    comments: a NUL made the spec binary to `check`, an ESC would reach the terminal that shows
    the spec or a note, and a bidi override (U+202E) would make a comment display as other code."""
    return MAYBE_UNPRINTABLE.sub(_printable_character, text)


def _printable_character(match: re.Match) -> str:
    character = match.group()
    return "?" if unicodedata.category(character) in UNPRINTABLE_CATEGORIES else character


READ_CATEGORIES = frozenset(GPU_CATEGORIES) | CALL_CATEGORIES | OP_CATEGORIES | {"cuda_sync", "cuda_event"}
"""The categories of complete events the importer reads (others are left alone)."""
TIMED_CATEGORIES = frozenset(GPU_CATEGORIES) | CALL_CATEGORIES | OP_CATEGORIES
"""The categories whose `dur` is read."""

MALFORMED = {
    "object": "are not JSON objects and were skipped",
    "ts": "have no readable `ts` (a number of microseconds, not negative) and were skipped",
    "dur": "have no valid `dur` (missing, not a number, negative, or over 1e18 us) and were read as lasting 0",
    "lane": "of GPU work name no valid stream or device and were skipped",
    "device": "of cuda_sync name no valid device and were skipped",
    "sync_kind": "of cuda_sync have a `cuda_sync_kind` the importer does not know and were skipped (their calls "
                 "are read as in a trace without cuda_sync events)",
    "sync_field": "of cuda_sync have a `stream`, `wait_on_stream` or record id that is not a number and were "
                  "skipped (their calls are read as in a trace without cuda_sync events)",
    "memcpy": "of gpu_memcpy have a name that says no direction the importer knows (as `Memcpy HtoD (Pinned -> "
              "Device)` does) and were read as copies on the device",
}
"""What the importer does with each kind of malformed event (the note on stderr says so)."""

SYNC_KINDS = frozenset({"Stream Wait Event", "Event Sync", "Stream Sync", "Context Sync"})
SYNC_FIELDS = ("stream", "wait_on_stream", "wait_on_cuda_event_record_corr_id", "wait_on_cuda_event_id", "correlation")
"""The fields of a `cuda_sync` event the importer reads as numbers (-1: none)."""

COMM_KEYS = ("Collective name", "Process Group Name", "Process Group Description", "Process Group Ranks",
             "Group size", "In msg nelems", "Out msg nelems", "dtype", "Seq", "Rank", "Dst Rank", "Src Rank")
"""What PyTorch's `record_param_comms` writes about a collective, on the operator and on the
communication kernel it launched: the kind, the process group, its ranks, the sizes, its
sequence number in the group, (on the operator only) `Rank`: for a rooted one the root's rank
in the group, for a send or recv the peer's, and (on both) a send's or recv's peer's global
rank (`Dst Rank`, `Src Rank`)."""
COMM_OPERATOR = "record_param_comms"


def _collective_text(collective: Collective, memory: str) -> str:
    """A collective's statement after its stream: the call, its memory and its duration."""
    kind, comm, peer = collective.kind, collective.comm, collective.peer
    call = (f"send {comm} to {peer}" if kind == "send" else f"recv {comm} from {peer}" if kind == "recv"
            else f"{kind} {comm} root {peer}" if peer is not None else f"{kind} {comm}")
    took = f" {duration_text(collective.duration)}" if collective.duration > 0 else ""
    return f"{call} {memory}{took}"


def _link_private(raw_calls: list[tuple], raw_gpu: list[tuple]) -> tuple[list[tuple], list[tuple]]:
    """A PrivateUse1 backend's calls and GPU work with correlation ids where the trace has none:
    a call and a kernel of the same name at the same time are one launch (torch_npu writes the
    call named after the kernel it launched, at the kernel's start)."""
    unlinked: dict[tuple, list[int]] = defaultdict(list)
    for k, (_, name, ts, _, corr) in enumerate(raw_calls):
        if corr is None:
            unlinked[(name, ts)].append(k)
    if not unlinked:
        return raw_calls, raw_gpu
    calls, gpu = list(raw_calls), list(raw_gpu)
    fresh = 1 << 40  # (beyond the ids a trace writes)
    for k, (kind, name, device, stream, ts, dur, corr, meta) in enumerate(gpu):
        found = unlinked.get((name, ts)) if corr is None else None
        if found:
            fresh += 1
            i = found.pop(0)
            calls[i] = calls[i][:4] + (fresh,)
            gpu[k] = (kind, name, device, stream, ts, dur, fresh, meta)
    return calls, gpu


def _in_issue_order(calls: list[Call]) -> None:
    """Sort one thread's calls in the order it made them: by start, and among calls that start
    at the same microsecond (the profiler's resolution) by correlation id, which the runtime
    numbers in the order the calls were made (an enclosing call, made first, has the smaller).
    Without ids the longer goes first, as an enclosing call does: the longest-first rule alone
    put a `cudaStreamWaitEvent` (1 us) before the `cudaEventRecord` (0 us) called just before it
    at the same microsecond, and the wait then bound to no record."""
    calls.sort(key=lambda c: (c.start, -c.end))
    i = 0
    while i < len(calls):
        j = i + 1
        while j < len(calls) and calls[j].start == calls[i].start:
            j += 1
        tied = calls[i:j]
        if j - i > 1 and all(c.correlation is not None for c in tied):
            calls[i:j] = sorted(tied, key=lambda c: c.correlation)
        i = j


def _comm_args(args: dict) -> dict | None:
    if "Collective name" not in args:
        return None
    return {key: args[key] for key in COMM_KEYS if key in args}


MAX_MICROSECONDS = 1e18
"""A timestamp or duration beyond this (about 31,000 years; timestamps since 1970 are near
2e15) is corrupt: read as missing, it cannot overflow the nanoseconds computed from it."""


def _number(value) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        try:
            number = float(value)
        except OverflowError:  # an integer too large for a float
            return None
    elif isinstance(value, str):  # some writers quote their timestamps
        try:
            number = float(value)
        except ValueError:
            return None
    else:
        return None
    return number if math.isfinite(number) and abs(number) <= MAX_MICROSECONDS else None


def _int(value, default: int = -1) -> int:
    if isinstance(value, bool):
        return default
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            # a GPU lane named like "stream 7"
            match = re.fullmatch(r"\s*stream\s+(\d+)\s*", value, re.IGNORECASE)
            return int(match.group(1)) if match else default
    return default


def correlation_id(value) -> int | None:
    """A correlation id (or a record's, in a cuda_sync) as an int: an integer, an integral float
    or a string of digits (`24.0`, `"24"`: pandas and HTA write them so when they round-trip a
    trace), not negative; None for anything else (missing: -1, a bool, `"stream 7"`). Every
    event kind reads its ids through this, so a launch, its work and the waits and records that
    name it agree on them."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float):  # (past 2^53 a float no longer tells one id from the next)
        value = int(value) if value.is_integer() and abs(value) <= 2 ** 53 else None
    elif isinstance(value, str):
        text = value.strip()
        value = int(text) if text.isascii() and text.isdigit() else None
    return value if isinstance(value, int) and value >= 0 else None


def _sync_correlation(value) -> int:
    """`correlation_id`, -1 for none (the cuda_sync fields' convention)."""
    found = correlation_id(value)
    return -1 if found is None else found


def _readable_int(value) -> bool:
    """Whether `_int` reads `value` as a number (rather than falling back to its default)."""
    return _int(value, -2) != -2 or _int(value, -3) != -3


def whole(value) -> int | None:
    """A non-negative integer written as a number or as digits; None otherwise (a rank, a
    sequence number: unlike `_int`, no lane names, and nothing negative)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
        return int(value)
    return None


def trace_events(data) -> list:
    """The event list of a Chrome trace (object or bare array form); TraceError otherwise."""
    if isinstance(data, dict):
        events = data.get("traceEvents")
        if not isinstance(events, list):
            if isinstance(data.get("nodes"), list):
                raise TraceError("this is a PyTorch Execution Trace, not a Kineto trace: give it with --et "
                                 "next to the Kineto trace of the same run")
            raise TraceError("not a Chrome trace (expected an object with a `traceEvents` list)")
        return events
    if isinstance(data, list):
        return data
    raise TraceError("not a Chrome trace (expected a JSON object or array)")


class _LaunchedLanes:
    """Per stream, the GPU work whose launch call is in the trace, by the call's start: when the
    work launched before a time was done, and when the first work launched after it started.
    Built from `(lane, call start, work start, work end)`: by the trace's first pass from the
    correlation ids (`_Trace._allowed_devices`), and by the builder from the calls it matched
    each work to (`_Builder._lanes`)."""

    def __init__(self, launched: Iterable[tuple[tuple[int, int], int, int, int]]) -> None:
        found: dict[tuple[int, int], list[tuple[int, int, int]]] = defaultdict(list)
        for lane, called, start, end in launched:
            found[lane].append((called, start, end))
        self.lanes: dict[tuple[int, int], tuple[list[int], list[int], list[float]]] = {}
        for lane, ops in found.items():
            ops.sort()
            done, latest = [], 0
            for _, _, end in ops:
                latest = max(latest, end)
                done.append(latest)
            first, earliest = [0.0] * len(ops), math.inf
            for i in range(len(ops) - 1, -1, -1):
                earliest = min(earliest, ops[i][1])
                first[i] = earliest
            self.lanes[lane] = ([called for called, _, _ in ops], done, first)

    @classmethod
    def of_trace(cls, trace: _Trace) -> _LaunchedLanes:
        """The lanes of the work whose correlation id names a call of the trace."""
        return cls(((op.device, op.stream), call.start, op.start, op.start + op.dur)
                   for op in trace.gpu
                   if op.correlation is not None
                   and (call := trace.call_by_corr.get(op.correlation)) is not None)

    def done_before(self, lane: tuple[int, int], at: int) -> int:
        """When the work launched onto `lane` by calls begun before `at` was done (0: none)."""
        called, done, _ = self.lanes.get(lane, ([], [], []))
        i = bisect.bisect_left(called, at)
        return done[i - 1] if i > 0 else 0

    def first_start_after(self, lane: tuple[int, int], at: int) -> float:
        """When the first work launched onto `lane` by calls begun after `at` started (inf: none)."""
        called, _, first = self.lanes.get(lane, ([], [], []))
        i = bisect.bisect_right(called, at)
        return first[i] if i < len(called) else math.inf


class _Trace:
    """One pass over the events: calls, GPU work, sync events, operators, thread names."""

    def __init__(self, data) -> None:
        if is_ascend(data):
            data = as_kineto(data)
        self.ascend = isinstance(data, dict) and data.get("streamproofFlavour") == "ascend"
        """Read from an Ascend profiler trace (`ascend.py`): its devices are NPUs."""
        queues = data.get("streamproofQueueThreads") if self.ascend else None
        self.nsys = isinstance(data, dict) and data.get("streamproofFlavour") == "nsys"
        """Read from an Nsight Systems SQLite export (`nsys.py`)."""
        self.adapter_notes: list[str] = ([str(n) for n in data.get("streamproofNotes") or ()]
                                         if self.ascend or self.nsys else [])
        """What reading the Ascend trace or the Nsight Systems export left out (`ascend.py`, `nsys.py`)."""
        self.queue_threads: set[tuple] = {(trace_key(q[0]), trace_key(q[1])) for q in queues or ()
                                          if isinstance(q, list) and len(q) == 2}
        """The threads of torch_npu's task queue that make other threads' runtime calls."""
        events = trace_events(data)
        info = data.get("distributedInfo") if isinstance(data, dict) else None
        rank = whole(info.get("rank")) if isinstance(info, dict) else None
        self.rank = -1 if rank is None else rank
        """`distributedInfo.rank` (-1: not given): which rank of a distributed run this is."""
        self.comm_ops: dict[tuple, list[tuple[int, int, dict]]] = defaultdict(list)
        """Per host thread, the `record_param_comms` operators: (start, end, `COMM_KEYS`)."""
        raw_comm_ops: list[tuple] = []
        raw_calls: list[tuple] = []
        private = False
        raw_gpu: list[tuple] = []
        raw_ops: list[tuple] = []
        self.syncs: dict[int, SyncEvent] = {}
        self.record_streams: dict[int, tuple[int, int]] = {}
        waited_on: dict[int, list[tuple[int, int, int]]] = defaultdict(list)
        """Record -> (device of the waiting stream, recorded stream, the cuda_sync's correlation)
        of each cuda_sync event bound to it."""
        self.thread_names: dict[tuple, str] = {}
        self.has_cuda_sync = False
        self.skipped = 0
        self.unpaired = 0
        """Begin/end (`B`/`E`) events: the profiler writes complete (`X`) events only."""
        self.malformed: dict[str, list] = {}
        """Per kind of malformed event (`MALFORMED`): [count, first event's description]."""
        self.total = len(events)
        origin = None
        flag = self._malformed
        for index, ev in enumerate(events):
            if not isinstance(ev, dict):
                self.skipped += 1
                flag("object", index, None)
                continue
            ph = ev.get("ph")
            if ph == "M":
                if ev.get("name") == "thread_name" and isinstance(ev.get("args"), dict):
                    self.thread_names[(trace_key(ev.get("pid")), trace_key(ev.get("tid")))] = str(ev["args"].get("name", ""))
                continue
            if ph != "X":
                if ph in ("B", "E"):
                    self.unpaired += 1
                continue
            cat = ev.get("cat")
            if not isinstance(cat, str):
                continue
            cat = cat.lower()
            if cat not in READ_CATEGORIES:
                continue
            ts = _number(ev.get("ts"))
            if ts is None or ts < 0:  # (a profiler's times are never negative: corrupt)
                self.skipped += 1
                flag("ts", index, ev)
                continue
            dur = 0.0
            if cat in TIMED_CATEGORIES:
                dur = _number(ev.get("dur"))
                if dur is None or dur < 0:
                    flag("dur", index, ev)
                    dur = 0.0
            args = ev.get("args")
            if not isinstance(args, dict):
                args = {}
            if cat in GPU_CATEGORIES:
                stream = _int(args.get("stream"), _int(ev.get("tid")))
                device = _int(args.get("device"), _int(ev.get("pid"), 0))
                if stream < 0 or device < 0:
                    self.skipped += 1
                    flag("lane", index, ev)
                    continue
                if GPU_CATEGORIES[cat] == "memcpy" and not _memcpy_known(str(ev.get("name", ""))):
                    flag("memcpy", index, ev)
                raw_gpu.append((GPU_CATEGORIES[cat], str(ev.get("name", "")), device, stream, ts, dur,
                                correlation_id(args.get("correlation")), _comm_args(args)))
            elif cat in CALL_CATEGORIES:
                raw_calls.append(((trace_key(ev.get("pid")), trace_key(ev.get("tid"))), comment_text(ev.get("name", "")), ts, dur,
                                  correlation_id(args.get("correlation"))))
                if cat in PRIVATE_CALLS:
                    private = True
            elif cat in OP_CATEGORIES:
                rf = args.get("Record function id")
                if ev.get("name") == COMM_OPERATOR and (meta := _comm_args(args)) is not None:
                    raw_comm_ops.append(((trace_key(ev.get("pid")), trace_key(ev.get("tid"))), ts, dur, meta))
                raw_ops.append(((trace_key(ev.get("pid")), trace_key(ev.get("tid"))), ts, dur, str(ev.get("name", "")),
                                rf if isinstance(rf, int) and rf > 0 else None,
                                args.get("External id"), cat == "user_annotation"))
                continue  # operators do not move the origin: they may start before any call
            elif cat == "cuda_sync":
                self.has_cuda_sync = True
                corr = _sync_correlation(args.get("correlation"))
                kind = str(args.get("cuda_sync_kind") or ev.get("name") or "")
                device = _int(args.get("device"), _int(ev.get("pid"), 0))
                if device < 0:  # (a corrupt id: device names are built from it)
                    self.skipped += 1
                    flag("device", index, ev)
                    continue
                if kind not in SYNC_KINDS:
                    self.skipped += 1
                    flag("sync_kind", index, ev)
                    continue
                if any(args.get(key) is not None and not _readable_int(args[key]) for key in SYNC_FIELDS):
                    self.skipped += 1
                    flag("sync_field", index, ev)
                    continue
                sync = SyncEvent(kind, _int(args.get("stream")), device,
                                 _int(args.get("wait_on_stream")),
                                 _sync_correlation(args.get("wait_on_cuda_event_record_corr_id")),
                                 # (older Kineto: the event without its record; a trace that names
                                 # the record, -1 for none, has nothing to infer)
                                 -1 if "wait_on_cuda_event_record_corr_id" in args
                                 else _int(args.get("wait_on_cuda_event_id")),
                                 comment_text(args["assumed"]) if self.ascend and isinstance(args.get("assumed"), str)
                                 else "", self.ascend and args.get("streamproofFlag") is True)
                if corr >= 0:
                    self.syncs[corr] = sync
                if sync.record >= 0 and sync.wait_on_stream >= 0:
                    waited_on[sync.record].append((device, sync.wait_on_stream, corr))
                continue
            elif cat == "cuda_event":
                corr = _sync_correlation(args.get("correlation"))
                stream = _int(args.get("stream"))
                device = _int(args.get("device"), _int(ev.get("pid"), 0))
                if corr >= 0 and stream >= 0 and device >= 0:
                    self.record_streams[corr] = (device, stream)
                continue
            else:
                continue
            if origin is None or ts < origin:
                origin = ts
        self.origin = origin if origin is not None else 0.0
        o = self.origin
        self.private = private
        """A PrivateUse1 backend's trace (torch_npu's Kineto-style export): its devices are NPUs."""
        if private:
            raw_calls, raw_gpu = _link_private(raw_calls, raw_gpu)
        self.gpu: list[GpuOp] = []
        self.gpu_by_corr: dict[int, list[GpuOp]] = defaultdict(list)
        for kind, name, device, stream, ts, dur, corr, meta in raw_gpu:
            op = GpuOp(kind, name, device, stream, round((ts - o) * 1000), max(0, round(dur * 1000)), corr,
                       meta if kind == "kernel" else None)
            self.gpu.append(op)
            if corr is not None:
                self.gpu_by_corr[corr].append(op)
        for ops in self.gpu_by_corr.values():
            if len(ops) > 1:
                ops.sort(key=lambda g: g.start)
        self.calls: dict[tuple, list[Call]] = defaultdict(list)
        self.call_by_corr: dict[int, Call] = {}
        for thread, name, ts, dur, corr in raw_calls:
            start = round((ts - o) * 1000)
            call = Call(thread, name, start, start + max(0, round(dur * 1000)), corr)
            self.calls[thread].append(call)
            if call.correlation is not None:
                first = self.call_by_corr.setdefault(call.correlation, call)
                if first.thread[0] != thread[0]:
                    # CUPTI numbers correlations per process: a trace that merges several
                    # processes (ranks) cannot tell whose kernel a launch started.
                    raise TraceError(
                        f"correlation id {call.correlation} appears in two processes (pid {first.thread[0]} "
                        f"and pid {thread[0]}): the trace merges several processes; import each "
                        "process's (rank's) trace on its own")
        for calls in self.calls.values():
            _in_issue_order(calls)
        self._record_devices(waited_on)
        self.ops: dict[tuple, list[CpuOp]] = defaultdict(list)
        for thread, ts, dur, name, rf, ext, annotation in raw_ops:
            start = round((ts - o) * 1000)
            self.ops[thread].append(CpuOp(start, start + max(0, round(dur * 1000)), name, rf,
                                          ext if isinstance(ext, int) else None, annotation))
        for ops in self.ops.values():
            ops.sort(key=lambda op: (op.start, -op.end))
        for thread, ts, dur, meta in raw_comm_ops:
            start = round((ts - o) * 1000)
            self.comm_ops[thread].append((start, start + max(0, round(dur * 1000)), meta))

    def _record_devices(self, waited_on: dict[int, list[tuple[int, int, int]]]) -> None:
        """The stream of each record a cuda_sync names without a `cuda_event` entry for it. The
        cuda_sync names the waiting stream's device and the recorded stream's id, which each
        device numbers on its own: the record may be on another device (a cross-device wait).
        Where the id ran on one device, it is that one's; where on several, one that the trace's
        times allow (`_allowed_devices`): the device of the recording thread's latest launch onto
        that id before the record, else the waiting stream's, else the one whose work ended last
        (it released the waits); the choice is an assumption where the times allow several."""
        self.record_device_guesses: dict[int, str] = {}
        """Records whose device is a choice among several that the times allow: why."""
        devices_of_stream: dict[int, set[int]] = defaultdict(set)
        for op in self.gpu:
            devices_of_stream[op.stream].add(op.device)
        lanes = _LaunchedLanes.of_trace(self) if any(len(found) > 1 for found in devices_of_stream.values()) else None
        for record, waiters in waited_on.items():
            if record in self.record_streams:
                continue
            device, stream, _ = waiters[0]
            devices = devices_of_stream.get(stream, set())
            if device not in devices and len(devices) == 1:
                device = next(iter(devices))
            elif lanes is not None and len(devices | {device}) > 1:
                allowed = self._allowed_devices(lanes, record, stream, sorted(devices | {device}), waiters)
                if len(allowed) > 1:
                    launched = self._launched_by_recorder(record, stream, allowed)
                    device = launched if launched is not None else device if device in allowed else allowed[-1]
                    self.record_device_guesses[record] = (
                        f"records stream {stream} of device {device} (the trace's times allow devices "
                        + ", ".join(str(d) for d in sorted(allowed)) + "; this is "
                        + ("its thread's latest launch onto that stream id" if launched is not None
                           else "the waiting stream's device" if device == waiters[0][0]
                           else "the one whose work ended last") + ")")
                elif allowed:
                    device = allowed[0]
            self.record_streams[record] = (device, stream)

    def _allowed_devices(self, lanes: _LaunchedLanes, record: int, stream: int, devices: list[int],
                         waiters: list[tuple[int, int, int]]) -> list[int]:
        """Of the devices that ran stream id `stream`, those whose record the trace's times
        allow, by when the work launched there before the record was done (the last released
        the waits): the record completed once that work was, and no work enqueued on a waiting
        stream after its wait started before that (no event sync returned before it). All of
        them where the times allow none (a corrupt trace)."""
        recorded = self.call_by_corr.get(record)
        if recorded is None:
            return devices
        released = math.inf
        for _, _, waiter in waiters:
            sync, waiting = self.syncs.get(waiter), self.call_by_corr.get(waiter)
            if sync is None or waiting is None:
                continue
            if sync.kind == "Stream Wait Event":
                released = min(released, lanes.first_start_after((sync.device, sync.stream), waiting.start))
            elif sync.kind == "Event Sync" and waiting.name not in EVENT_QUERY_CALLS:
                released = min(released, waiting.end)
        done = {d: lanes.done_before((d, stream), recorded.start) for d in devices}
        allowed = sorted((d for d in devices if done[d] <= released), key=lambda d: (done[d], -d))
        return allowed or devices

    def _launched_by_recorder(self, record: int, stream: int, devices: list[int]) -> int | None:
        """The device of the recording thread's latest launch onto stream id `stream` before
        the record, if one of `devices` (a program records the stream it launched onto)."""
        recorded = self.call_by_corr.get(record)
        if recorded is None:
            return None
        calls = self.calls.get(recorded.thread, [])
        last = bisect.bisect_right(calls, recorded.start, key=lambda c: c.start)
        for call in reversed(calls[max(0, last - RECORDER_LOOKBACK):last]):
            if call.correlation is None:
                continue
            for op in self.gpu_by_corr.get(call.correlation, ()):
                if op.stream == stream and op.device in devices:
                    return op.device
        return None

    def _malformed(self, kind: str, index: int, ev) -> None:
        seen = self.malformed.get(kind)
        if seen is not None:
            seen[0] += 1
            return
        where = f"traceEvents[{index}]"
        if isinstance(ev, dict):
            name = comment_text(ev.get("name", ""))
            where += f" ({comment_text(ev.get('cat', ''))[:40]} `{name[:60]}{'...' if len(name) > 60 else ''}`)"
        self.malformed[kind] = [1, where]

    def malformed_notes(self) -> list[str]:
        """One line per kind of malformed event: how many, what was done, the first of them."""
        out = list(self.adapter_notes)
        for kind, (count, first) in self.malformed.items():
            out.append(f"{count:,} event(s) {MALFORMED[kind]}; the first is {first}")
        if self.unpaired:
            out.append(f"{self.unpaired:,} begin/end (B/E) event(s) were not read: only complete (X) events are")
        return out


# ---------------------------------------------------------------- the spec, written


@dataclass(slots=True)
class _Action:
    """What one call contributes to its thread, decided before any text is written."""

    kind: str
    """`launch`, `record`, `wait`, `sync_stream`, `sync_event`, `sync_device`, `note`."""
    stream: tuple[int, int] | None = None
    record: int | None = None
    device: int | None = None
    assumed: str = ""
    """Why this is a guess (inferred without `cuda_sync` events); empty when exact."""
    note: str = ""
    handoff: int | None = None
    """A wait or event sync bound to another thread's record: the `handoff[k]` it awaits first."""
    drained: tuple[int, ...] = ()
    """A sync on a thread whose runtime calls a task queue makes: the hand-offs the queue's
    threads give after the last item they issued before it (`_queue_handoffs`)."""


class _Builder:
    def __init__(self, trace: _Trace, et: ExecutionTrace | None, source: str, min_gap: int,
                 prefix: str = "", collectives: dict[int, Collective] | None = None) -> None:
        self.t = trace
        self.prefix = prefix
        """Put before every name the spec declares: one rank's names among others' (`ranks.py`)."""
        self.collectives = collectives or {}
        """id(kernel) -> the collective that stands for it."""
        self.et = et
        self.source = source
        self.min_gap = min_gap
        self.notes: list[str] = []
        self.assumptions: list[str] = []
        self.assumed = 0
        self.et_linked: set[int] = set()
        self.et_unlinked: set[int] = set()
        """Operators looked up in the Execution Trace, found or not (by id)."""
        self.repeated_ids = 0
        self.ops_of_call: dict[int, list[GpuOp]] = {}
        """id(call) -> the GPU work it launched (by correlation id; `ops_of`)."""
        self.sync_points = 0
        """Fresh events recorded where a sync is issued (`_sync_lines`)."""
        self.handoffs = 0
        """Host hand-offs between threads (`notify handoff[N]`): one per wait or event sync bound
        to another thread's record, one per change of thread among a stream's users (launches,
        records, waits, syncs: `_stream_handoffs`), and those of torch_npu's task queue
        (`_queue_handoffs`)."""
        self.notify_after: dict[tuple, list[int]] = defaultdict(list)
        """("record", id(call)), ("gpu", id(op)), ("wait", id(action)), ("sync", id(action)) or
        ("returned", id(action)) -> the hand-offs given right after it is written (a sync's after
        it returns; a record by its call: a correlation id may come again)."""
        self.handoff_why: dict[int, str] = {}
        """Hand-offs awaited for another reason than their item's kind says (`_queue_handoffs`)."""
        self.await_before: dict[tuple, list[int]] = defaultdict(list)
        """("gpu", id(op)), ("record", id(call)), ("wait", id(action)) or ("sync", id(action)) ->
        the hand-offs awaited right before it is written."""
        self._launched_ops: dict[tuple[int, int], list[tuple[int, int, int]]] | None = None
        self._lanes: _LaunchedLanes | None = None
        """The lanes of `_launched` (`_ended_before`)."""
        """Per stream, launches in call order with the latest end of the work so far (`_not_ready`)."""
        self.stream_keys: set[tuple[int, int]] = set()
        self.devices: set[int] = set()
        self.events: set[int] = set()
        self.flag_events: set[int] = set()
        """Records whose event is a flag event: a wait made before them waited for them."""
        self.placeholders: dict[str, tuple[int, str]] = {}
        self.comm_placeholder_bytes = 1
        """Size of each collective's placeholder element: one that divides among every comm's
        members (`import_ranks` sets it), so an in-place allgather or reducescatter on it fits."""
        """Placeholder memory arrays: name -> (elements used, place)."""
        self.storages: dict[tuple[int, int | None], bool] = {}
        """ET storages used -> pinned."""
        self.memory_devices: set[int] = set()
        """Devices whose tensors the spec uses: declared too where the trace ran no work there
        (a peer copy's source on an otherwise idle GPU), or its buffers would name no device."""
        self.kernel_names: dict[str, str] = {}
        self.stream_owner: dict[tuple[int, int], tuple] = {}
        self.counts: dict[str, int] = defaultdict(int)
        self.no_sync_note = False
        self._busy: dict[int, tuple[list[int], list[int]]] = {}
        self._ends: dict[tuple, list[int]] = {}
        self._waits: dict[tuple[int, int], tuple[list[int], list[int]]] | None = None
        """Per stream, its waits and when what they waited for was done (`_wait_lanes`)."""
        self._records_done: dict[int, int] = {}
        self._pageable_syncs: list[tuple[list, int, list]] = []
        """Explicit syncs after pageable copies of ET host memory: (lines, index, storages);
        dropped at the end for memory declared pageable (its copies block by themselves)."""

    # -- names

    def stream_name(self, key: tuple[int, int]) -> str:
        return self._stream_names[key]

    def _name_streams(self) -> None:
        by_id: dict[int, list[int]] = defaultdict(list)
        for device, stream in self.stream_keys:
            by_id[stream].append(device)
        self._stream_names = {}
        for device, stream in self.stream_keys:
            self._stream_names[(device, stream)] = self.prefix + (f"stream{stream}" if len(by_id[stream]) == 1
                                                                   else f"stream{stream}_{self.device_word}{device}")

    def device_name(self, device: int) -> str:
        return f"{self.prefix}{self.device_word}{device}"

    @property
    def device_word(self) -> str:
        return "npu" if self.t.ascend or self.t.private else "gpu"

    def event_name(self, record: int) -> str:
        return f"{self.prefix}e{record}"

    def kernel_name(self, raw: str) -> str:
        name = self.kernel_names.get(raw)
        if name is None:
            name = self.kernel_names[raw] = safe_name(_short_kernel_name(raw), "kernel")
        return name

    def thread_names(self, threads: list[tuple]) -> dict[tuple, str]:
        out = {}
        used = set()
        for key in threads:
            pid, tid = key
            name = "main" if tid == pid and "main" not in used else safe_name(f"t{tid}".replace("-", "m"), "t")
            name = self.prefix + name
            while name in used:
                name += "_"
            used.add(name)
            out[key] = name
        return out

    # -- actions

    def plan(self) -> dict[tuple, list[tuple[Call, list[_Action]]]]:
        """Each thread's calls with what they do; also decides which records are needed."""
        t = self.t
        for op in t.gpu:
            self.stream_keys.add((op.device, op.stream))
            self.devices.add(op.device)
        plans: dict[tuple, list[tuple[Call, list[_Action]]]] = {}
        # Per thread: the stream each call launched onto, for inferring streams of records,
        # waits and stream syncs that have no cuda_sync event.
        launched: dict[tuple, list[tuple[int, int] | None]] = {}
        calls_of_corr: dict[int, list[Call]] = defaultdict(list)
        for calls in t.calls.values():
            for call in calls:
                if call.correlation is not None:
                    calls_of_corr[call.correlation].append(call)
        for corr, calls in calls_of_corr.items():
            ops = t.gpu_by_corr.get(corr)
            if not ops:
                continue
            if len(calls) > 1:
                # A correlation id used again (ids restart per process; a trace merged from
                # processes under one pid): each operation is the latest such call's before it.
                self.repeated_ids += len(calls) - 1
                calls.sort(key=lambda c: c.start)
                starts = [c.start for c in calls]
                for op in ops:
                    owner = calls[max(0, bisect.bisect_right(starts, op.start) - 1)]
                    self.ops_of_call.setdefault(id(owner), []).append(op)
            else:
                self.ops_of_call[id(calls[0])] = ops
        for thread, calls in t.calls.items():
            out = []
            for call in calls:
                ops = self.ops_of_call.get(id(call))
                out.append((ops[-1].device, ops[-1].stream) if ops else None)
            launched[thread] = out
        # Every record call, in time order: of all threads, and of each thread.
        records: list[tuple[int, int]] = []
        own: dict[tuple, tuple[list[int], list[int]]] = {}
        for thread, calls in t.calls.items():
            mine = [(c.start, c.correlation) for c in calls if c.name in RECORD_CALLS and c.correlation is not None]
            own[thread] = (sorted(mine), [r[1] for r in sorted(mine)])
            records.extend(mine)
        records.sort()
        record_stream = dict(t.record_streams)
        inferred_record_stream: dict[int, tuple[int, int]] = {}
        earlier_streams: dict[int, list[tuple[int, int]]] = {}
        """Per inferred record: its thread's launch streams before it, the latest first."""
        for thread, calls in t.calls.items():
            recent: list[tuple[int, int]] = []
            for call, stream in zip(calls, launched[thread]):
                if stream is not None:
                    if stream in recent:
                        recent.remove(stream)
                    recent.insert(0, stream)
                if call.name in RECORD_CALLS and call.correlation is not None and recent:
                    inferred_record_stream[call.correlation] = recent[0]
                    earlier_streams[call.correlation] = recent[:8]

        def record_for_wait(corr: int, waiting: tuple[int, int]) -> None:
            """A wait for a record on its own stream orders nothing, so programs wait for another
            stream's record (`wait_stream`, `wait_event`): if the guess is the waiting stream,
            take the latest other stream the recording thread launched onto."""
            if corr in record_stream or inferred_record_stream.get(corr) != waiting:
                return
            other = next((st for st in earlier_streams.get(corr, ()) if st != waiting), None)
            if other is not None:
                inferred_record_stream[corr] = other
        needed: set[int] = set()
        if t.private and not t.has_cuda_sync:
            self.no_sync_note = True
            self.notes.append("the trace is a PrivateUse1 backend's (torch_npu's Kineto-style export): it records no "
                              "event records, waits or synchronizations, so the spec has none; torch_npu.profiler's "
                              "own trace (ASCEND_PROFILER_OUTPUT/trace_view.json) records them")
        elif not t.has_cuda_sync and not t.ascend:
            self.no_sync_note = True
            self.notes.append("the trace has no cuda_sync events (profile with "
                              + ("CUDA synchronization traced, see docs/import.md \"Nsight Systems\"," if t.nsys else
                                 "experimental_config=_ExperimentalConfig(enable_cuda_sync_events=True)")
                              + " for exact ones): event bindings and synchronized streams are inferred from the "
                              "order of the calls, see the assumptions in the spec's header")

        def latest_record(thread, call: Call) -> int | None:
            """The record a wait made by `call` is taken to bind to: the thread's own latest, else
            anyone's (at the same microsecond, those with a smaller correlation id: made before)."""
            before = (call.start, call.correlation if call.correlation is not None else math.inf)
            times, corrs = own.get(thread, ((), ()))
            i = bisect.bisect_left(times, before) - 1
            if i >= 0:
                return corrs[i]
            i = bisect.bisect_left(records, before) - 1
            return records[i][1] if i >= 0 else None

        queued = sorted((call.start, stream) for queue in t.queue_threads
                        for call, stream in zip(t.calls.get(queue, ()), launched.get(queue, ())) if stream is not None)
        """The task queue's launches, (call start, stream), in time order."""
        for thread, calls in t.calls.items():
            streams = launched[thread]
            nxt: list[tuple[int, int] | None] = [None] * len(calls)
            upcoming = None
            for i in range(len(calls) - 1, -1, -1):
                nxt[i] = upcoming
                if streams[i] is not None:
                    upcoming = streams[i]
            last = None
            last_device = None
            thread_streams: list[tuple[int, int]] = []
            plan = []
            for i, call in enumerate(calls):
                actions: list[_Action] = []
                if streams[i] is not None:
                    actions.append(_Action("launch"))
                sync = t.syncs.get(call.correlation) if call.correlation is not None else None
                name = call.name
                if sync is not None and sync.record < 0 and sync.event >= 0 and sync.stream >= 0 \
                        and sync.kind in ("Stream Wait Event", "Event Sync"):
                    # Older Kineto names the event, not its record: take the latest record before it.
                    corr = latest_record(thread, call)
                    if corr is None:
                        actions.append(_Action("note", note=f"{name}: no cudaEventRecord before it in the trace; "
                                                            "left out"))
                    else:
                        if sync.wait_on_stream >= 0 and corr not in t.record_streams:
                            record_stream.setdefault(corr, (sync.device, sync.wait_on_stream))
                        assumed = (f"{name} (event {sync.event}) binds to the latest record call before it "
                                   f"(corr {corr}): the trace names the event but not its record")
                        actions.extend(replace(action, assumed=assumed) if action.kind != "note" else action
                                       for action in self._exact(replace(sync, record=corr), call, needed))
                elif sync is not None:
                    found = self._exact(sync, call, needed)
                    actions.extend(replace(action, assumed=sync.assumed) if sync.assumed and action.kind != "note"
                                   else action for action in found)
                elif name in RECORD_CALLS:
                    if call.correlation is not None:
                        actions.append(_Action("record", record=call.correlation))
                elif name in WAIT_CALLS:
                    target, corr = nxt[i], latest_record(thread, call)
                    if target is None:
                        actions.append(_Action("note", note=f"{name}: no later launch on this thread tells its stream; left out"))
                    elif corr is None:
                        actions.append(_Action("note", note=f"{name}: no cudaEventRecord before it; a wait with no record does nothing"))
                    else:
                        needed.add(corr)
                        record_for_wait(corr, target)
                        actions.append(_Action("wait", stream=target, record=corr,
                                               assumed=f"{name} waits on the stream of the next launch on this thread "
                                                       f"and binds to the latest record call before it (corr {corr})",
                                               handoff=self._bound(corr, call)))
                elif name in EVENT_SYNC_CALLS:
                    corr = latest_record(thread, call)
                    if corr is not None:
                        needed.add(corr)
                        actions.append(_Action("sync_event", record=corr,
                                               assumed=f"{name} waits for the latest record call before it (corr {corr})",
                                               handoff=self._bound(corr, call)))
                elif name in STREAM_SYNC_CALLS:
                    if last is not None:
                        stream, how = self._synced_stream(thread_streams, last, call)
                        actions.append(_Action("sync_stream", stream=stream, assumed=f"{name} synchronizes {how}"))
                    elif queued:  # (a thread whose launches the task queue made)
                        before = [stream for start, stream in queued if start < call.start]
                        if before:
                            recent = list(dict.fromkeys(reversed(before)))
                            stream, how = self._synced_stream(recent, recent[0], call)
                            actions.append(_Action("sync_stream", stream=stream,
                                                   assumed=f"{name} synchronizes {how} (made by the task queue)"))
                elif name in STREAM_QUERY_CALLS and last is not None:
                    if self._done_by(last, call):
                        actions.append(_Action("sync_stream", stream=last, note=f"{name} found it done",
                                               assumed=f"{name} queries the stream of the thread's last launch"))
                    else:
                        actions.append(_Action("note", note=f"{name} returned before the work on the stream of the "
                                                            "thread's last launch was done: not ready, it orders nothing"))
                elif name in DEVICE_SYNC_CALLS or (name in FREE_CALLS and self.devices):
                    # The current device is not in the trace: with several, take the thread's last.
                    several = len(self.devices) > 1
                    guess = (f"{name} synchronizes the device of the thread's last launch (the current "
                             "device is not in the trace)") if several and last_device is not None else ""
                    device = last_device if several else (next(iter(self.devices)) if self.devices else None)
                    if name in FREE_CALLS and self._returned_while_busy(device, call):
                        actions.append(_Action("note", note=f"{name} returned while work enqueued on the device "
                                                            "before it was still running: it did not synchronize "
                                                            "the device (CUDA: a free \"may\" synchronize)"))
                    else:
                        actions.append(_Action("sync_device", device=device, assumed=guess,
                                               note=f"{name} synchronizes the device" if name in FREE_CALLS else ""))
                if streams[i] is not None:
                    last = streams[i]
                    last_device = last[0]
                    if last not in thread_streams:
                        thread_streams.append(last)
                if actions:
                    plan.append((call, actions))
            plans[thread] = plan
        # Records: exact ones on the stream cuda_sync names, inferred ones on the stream of the
        # recording thread's previous launch.
        self.record_stream: dict[int, tuple[int, int]] = {}
        self.inferred_records: set[int] = set()
        """Records whose stream is a guess (no `cuda_sync` or `cuda_event` entry names it)."""
        for corr in needed:
            where = record_stream.get(corr)
            if where is None:
                where = inferred_record_stream.get(corr)
                if where is not None:
                    self.inferred_records.add(corr)
            if where is not None:
                self.record_stream[corr] = where
                self.stream_keys.add(where)
                self.devices.add(where[0])
        return plans

    def _exact(self, sync: SyncEvent, call: Call, needed: set[int]) -> list[_Action]:
        kind = sync.kind
        if kind == "Stream Wait Event":
            if sync.stream < 0:
                return [_Action("note", note=f"{call.name}: Stream Wait Event without a stream; left out")]
            key = (sync.device, sync.stream)
            self.stream_keys.add(key)
            self.devices.add(sync.device)
            if sync.record < 0:
                return [_Action("note", note=f"{call.name} on {self._stream_label(key)}: the event was never "
                                             "recorded, so the wait does nothing")]
            if sync.record not in self.t.call_by_corr:
                return [_Action("note", note=f"{call.name} on {self._stream_label(key)}: its record (corr "
                                             f"{sync.record}) is outside the trace; the wait is left out")]
            if self.t.call_by_corr[sync.record].name not in RECORD_CALLS:
                return [_Action("note", note=f"{call.name} on {self._stream_label(key)}: the trace binds it to "
                                             f"corr {sync.record}, a {self.t.call_by_corr[sync.record].name} call, "
                                             "not an event record; the wait is left out")]
            recorded = self.t.call_by_corr[sync.record]
            if recorded.thread == call.thread and recorded.start > call.start and not sync.flag:
                # (no run binds a wait to a record its own thread makes later: a corrupt trace)
                return [_Action("note", note=f"{call.name} on {self._stream_label(key)}: the trace binds it to "
                                             f"the record of corr {sync.record}, which this thread made after it; "
                                             "the wait is left out")]
            needed.add(sync.record)
            if sync.flag:  # (a flag event's wait waits for a record to come: no hand-off after it)
                self.flag_events.add(sync.record)
                return [_Action("wait", stream=key, record=sync.record,
                                note="waits for a record made after it: the event is a flag event")]
            return [_Action("wait", stream=key, record=sync.record, handoff=self._bound(sync.record, call))]
        if kind == "Event Sync":
            if call.name in EVENT_QUERY_CALLS and sync.record >= 0 and self._not_ready(sync.record, call):
                return [_Action("note", note=f"{call.name} returned before the work its record (corr "
                                             f"{sync.record}) follows had finished, so it found the event "
                                             "not ready: it orders nothing")]
            if sync.record < 0:
                return [_Action("note", note=f"{call.name}: the event was never recorded; nothing to wait for")]
            if sync.record not in self.t.call_by_corr:
                return [_Action("note", note=f"{call.name}: its record (corr {sync.record}) is outside the "
                                             "trace; left out")]
            if self.t.call_by_corr[sync.record].name not in RECORD_CALLS:
                return [_Action("note", note=f"{call.name}: the trace binds it to corr {sync.record}, a "
                                             f"{self.t.call_by_corr[sync.record].name} call, not an event record; "
                                             "left out")]
            needed.add(sync.record)
            return [_Action("sync_event", record=sync.record, handoff=self._bound(sync.record, call))]
        if kind == "Stream Sync":
            if sync.stream < 0:
                return [_Action("sync_device", device=sync.device)]
            key = (sync.device, sync.stream)
            self.stream_keys.add(key)
            self.devices.add(sync.device)
            return [_Action("sync_stream", stream=key)]
        if kind == "Context Sync":
            self.devices.add(sync.device)
            return [_Action("sync_device", device=sync.device)]
        return [_Action("note", note=f"{call.name}: unknown cuda_sync kind {kind!r}; left out")]

    def _stream_label(self, key: tuple[int, int]) -> str:
        return f"stream {key[1]} of {self.device_word}{key[0]}"

    def _bound(self, record: int, call: Call) -> int | None:
        """A wait or event sync bound to `record`: when another thread made the record, it was
        called after the record (or it could not have bound to it), which the threads' own
        synchronization (a queue, a lock) ensured and the trace does not show. The spec keeps
        that order: the recording thread gives a hand-off right after its record and this
        thread takes it right before (a flag event here instead held a wait written before the
        record forever, a deadlock the run did not have). Returns the hand-off, if any."""
        recorded = self.t.call_by_corr.get(record)
        if recorded is None or recorded.thread == call.thread:
            return None
        return self._handoff(("record", id(recorded)))

    def _awaits(self, key: tuple, why: str) -> list[str]:
        return [f"await {self.prefix}handoff[{k}]  # {self.handoff_why.get(k, why)}"
                for k in self.await_before.get(key, ())]

    def _notifies(self, key: tuple, why: str) -> list[str]:
        return [f"notify {self.prefix}handoff[{k}]  # {why}" for k in self.notify_after.get(key, ())]

    def _handoff(self, after: tuple) -> int:
        k = self.handoffs
        self.handoffs += 1
        self.notify_after[after].append(k)
        return k

    def ops_of(self, call: Call) -> list[GpuOp]:
        """The GPU work `call` launched (work with no call gets a call of its own in `build`)."""
        return self.ops_of_call.get(id(call)) or self.t.gpu_by_corr.get(call.correlation, [])

    def _stream_handoffs(self, plans) -> None:
        """Where two threads use one stream (launches, records, waits, syncs), their work keeps
        the trace's order on it (the GPU's order of its work, else when the calls took effect:
        `_effective_times`): the thread of each item that follows another thread's awaits a
        hand-off given right after that item (`_order_stream`). Otherwise every
        interleaving of the threads would be checked, with later work enqueued ahead of earlier
        (a record of the main thread ahead of the backward kernels an autograd thread launched
        before it, so what waits for the record reads what they still write)."""
        by_stream: dict[tuple, list[tuple[int, int, tuple, tuple]]] = defaultdict(list)
        syncs: list[tuple[int, int, tuple, _Action]] = []
        ran: dict[tuple, int] = {}
        """The GPU start of each launch's work (`("gpu", id(op))`)."""
        for thread, position, call, action, key, op in self._stream_items(plans):
            item = (self._took_effect(call, op), position, thread, key)
            if op is not None:
                ran[key] = op.start
                by_stream[(op.device, op.stream)].append(item)
                collective = self.collectives.get(id(op))
                if collective is not None and collective.via is not None:
                    by_stream[("via", collective.via)].append(item)  # (its comm's own stream too)
            elif key[0] == "record" and action.record in self.record_stream:
                by_stream[self.record_stream[action.record]].append(item)
            elif key[0] == "wait" and action.record in self.record_stream:
                by_stream[action.stream].append(item)
            elif key[0] == "sync":
                syncs.append((item[0], position, thread, action))
        # A sync is a use of the streams it waits for: what it waits for is what was enqueued
        # there before it, so it keeps the trace's order with the other threads' work there too.
        for start, position, thread, action in syncs:
            if action.kind == "sync_stream":
                synced = [action.stream]
            else:
                synced = [key for key in by_stream if key[0] != "via" and (action.device is None or key[0] == action.device)]
            for key in synced:
                if key in by_stream:
                    by_stream[key].append((start, position, thread, ("sync", id(action))))
        # Each item goes by the time it took effect (`_effective_times`): no sooner than its
        # thread's earlier items and, for a wait bound to another thread's record, just after
        # that record (a wait called while another thread's record call ran, or at the same
        # microsecond, took effect after it, or it could not have bound to it), and a stream's
        # GPU work in the order the GPU ran it (`_in_gpu_order` keeps that where the times
        # settle on none, in a corrupt trace).
        effective = self._effective_times(plans)
        for lane, items in by_stream.items():
            if len({thread for _, _, thread, _ in items}) < 2:
                continue
            items.sort(key=lambda item: (effective.get(item[3], 2 * item[0]), str(item[2]), item[1]))
            if lane[0] != "via":  # (a comm's own stream: its collectives ran on several streams)
                items = _in_gpu_order(items, ran)
            self._order_stream([(thread, key) for _, _, thread, key in items])

    def _order_stream(self, items: list[tuple[tuple, tuple]]) -> None:
        """Hand-offs that keep one stream's items (thread, key), in the trace's order, in that
        order across threads: each item of a thread after another thread's awaits a hand-off
        given right after that item. A sync's is given once it is issued, not once it returns
        (`_sync_lines`): a thread blocked in it could not have given one while another thread
        enqueued, and what the other thread did next would be ordered after all that the sync
        waited for, which the trace does not show."""
        for (before, earlier), (after, later) in zip(items, items[1:]):
            if before != after:
                self.await_before[later].append(self._handoff(earlier))

    def _stream_items(self, plans):
        """Each thread's uses of streams in program order, as (thread, position in its plan,
        call, action, key, the GPU operation or None): each operation a launch enqueued
        (`("gpu", id(op))`), each record (`("record", id(call))`), wait (`("wait", id(action))`)
        and stream or device sync (`("sync", id(action))`). The keys are those of
        `notify_after` and `await_before`."""
        for thread, plan in plans.items():
            for position, (call, actions) in enumerate(plan):
                for action in actions:
                    if action.kind == "launch":
                        for op in self.ops_of(call):
                            yield thread, position, call, action, ("gpu", id(op)), op
                    elif action.kind == "record":
                        yield thread, position, call, action, ("record", id(call)), None
                    elif action.kind == "wait":
                        yield thread, position, call, action, ("wait", id(action)), None
                    elif action.kind in ("sync_stream", "sync_device"):
                        yield thread, position, call, action, ("sync", id(action)), None

    def _effective_times(self, plans) -> dict[tuple, int]:
        """Per stream item (`("gpu" | "record" | "wait" | "sync", id)`), twice the time it took
        effect by: when its call did (`_took_effect`; a sync's `_sync_time`), no sooner than its
        thread's earlier items, a wait bound to a record another thread made one half-nanosecond
        after that record, and a stream's GPU work a half-nanosecond after the work the GPU ran
        before it there (a longest path over those orders, so that every stream's order comes
        from one time and hand-offs along them wait for each other in no circle; empty where the
        orders do, in a corrupt trace: each item then goes by its call's time)."""
        base: dict[tuple, int] = {}
        after: dict[tuple, list[tuple[tuple, int]]] = defaultdict(list)
        """item -> the items that come after it, and by how much."""
        ends: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
        """Per stream, its launched work's (end, 2 x the time its launch took effect) (`_sync_time`)."""
        ran: dict[tuple[int, int], list[tuple[int, int, int, tuple, int]]] = defaultdict(list)
        """Per stream, its launched work: (GPU start, thread, place in the thread, key, GPU end)."""
        syncs: list[tuple[tuple, Call, _Action]] = []
        previous: dict[tuple, tuple] = {}
        threads: dict[tuple, int] = {}
        for n, (thread, _, call, action, key, op) in enumerate(self._stream_items(plans)):
            base[key] = 2 * self._took_effect(call, op)
            if thread in previous:
                after[previous[thread]].append((key, 0))
            previous[thread] = key
            if key[0] == "wait" and action.record not in self.flag_events:
                recorded = self.t.call_by_corr.get(action.record)
                if recorded is not None and recorded.thread != thread:
                    after[("record", id(recorded))].append((key, 1))
            elif op is not None:
                ends[(op.device, op.stream)].append((op.start + op.dur, base[key]))
                ran[(op.device, op.stream)].append((op.start, threads.setdefault(thread, len(threads)), n, key,
                                                    op.start + op.dur))
            elif key[0] == "sync":
                syncs.append((key, call, action))
        lanes = {lane: _Ends(found) for lane, found in ends.items()}
        shown: list[tuple[tuple, tuple]] = []
        """Orders of items the trace's timing shows (earlier, later)."""
        for found in ran.values():
            found.sort()
            for (_, _, _, earlier, _), (_, _, _, later, _) in zip(found, found[1:]):
                after[earlier].append((later, 1))
        work = {lane: [(start, end, key) for start, _, _, key, end in found] for lane, found in ran.items()}
        """Per stream, its launched work in the GPU's order: (start, end, key)."""
        for key, call, action in syncs:
            base[key] = _sync_time(lanes, call, action, base[key])
            # ... and that launch comes after it, though the sync's thread's earlier items (a
            # record, a wait) took effect later than the launch's call: the sync did not wait
            # for its work, so its stream's order puts it after the sync.
            if action.kind == "sync_stream":
                synced = [action.stream]
            else:
                synced = [lane for lane in work if action.device is None or lane[0] == action.device]
            for lane in synced:
                first = next((later for _, end, later in work.get(lane, ()) if end > call.end), None)
                if first is not None:
                    shown.append((key, first))
        shown.extend(self._released_records(plans, work, base))
        # (orders the trace's timing shows, left out where they make a circle: a corrupt trace,
        # or a guessed sync or binding that is wrong)
        with_shown = defaultdict(list, {node: list(found) for node, found in after.items()})
        for earlier, later in shown:
            with_shown[earlier].append((later, 1))
        return _longest_paths(base, with_shown) or _longest_paths(base, after)

    def _released_records(self, plans, work: dict[tuple[int, int], list[tuple[int, int, tuple]]],
                          base: dict[tuple, int]) -> list[tuple[tuple, tuple]]:
        """An event sync that blocked until work on its record's stream ended (`_released`: the
        last end there by its return, after its call began) shows the record completed only
        then: that work, and what the stream ran before it, was enqueued before the record,
        though its launch call took effect later (a record made while another thread's launch
        call ran). Returns those orders, (work, record) (`_effective_times`). Not for a wait:
        when the work it held began says too little (a launch's work often begins microseconds
        after its call returns, so work that ended in between seems to have held it)."""
        out = []
        for plan in plans.values():
            for call, actions in plan:
                for action in actions:
                    if action.kind != "sync_event" or action.record not in self.record_stream:
                        continue
                    recorded = self.t.call_by_corr.get(action.record)
                    lane = work.get(self.record_stream[action.record])
                    if recorded is None or not lane:
                        continue
                    released = self._released_on(call, action)
                    if released <= max(call.start, recorded.end):
                        continue  # (it did not block for that work, or it ended before the record)
                    last = None
                    for _, end, key in lane:
                        if end == released:
                            last = key
                    if last is not None and ("record", id(recorded)) in base:
                        out.append((last, ("record", id(recorded))))
        return out

    def _took_effect(self, call: Call, op: GpuOp | None) -> int:
        """When a stream item took effect, for the order of several threads' items on a stream
        where the GPU's order does not say (`_in_gpu_order`): its call's start (the trace's order
        of the calls), but a launch no sooner than its device became idle before its work began
        (work enqueued before then would have started then; within its call: by its end it was
        enqueued). By the calls' starts alone, a launch whose call began first but enqueued after
        another thread's record (its work ran after what waited for the record) went before it."""
        if op is None:
            return call.start
        idle = self._idle_since(op)
        return call.start if idle is None else max(call.start, min(call.end, idle))

    def _idle_since(self, op: GpuOp) -> int | None:
        """When the device became idle before `op` began, where it was idle just before (None:
        it was running other work then, or had run nothing yet)."""
        self._idle(op.device, 0, 0)  # (fills the device's busy periods)
        starts, ends = self._busy[op.device]
        i = bisect.bisect_left(starts, op.start)
        return ends[i - 1] if 0 < i < len(starts) and starts[i] == op.start else None

    def _queue_handoffs(self, plans) -> None:
        """torch_npu's task queue: the runtime calls of the threads that queue operators are made
        by its dequeue thread, in the order they were queued, and a synchronization first waits
        for the queue to drain, then calls the runtime on its own thread (`ascend.py`). So what
        the dequeue thread issued before a sync's call was issued before the sync in every
        execution: it gives a hand-off right after its last item before the call, which the
        sync awaits."""
        queues = [q for q in self.t.queue_threads if q in plans]
        if not queues:
            return
        items: dict[tuple, list[tuple[int, tuple]]] = {queue: [] for queue in queues}
        for thread, _, call, action, key, op in self._stream_items({queue: plans[queue] for queue in queues}):
            if (op is not None and op is self.ops_of(call)[-1]) or (
                    key[0] in ("record", "wait") and action.record in self.record_stream):
                items[thread].append((call.start, key))
        starts = {queue: [start for start, _ in found] for queue, found in items.items()}
        for thread, plan in plans.items():
            if thread in self.t.queue_threads:
                continue
            for call, actions in plan:
                for action in actions:
                    if action.kind not in ("sync_stream", "sync_event", "sync_device"):
                        continue
                    if action.kind == "sync_event" and action.record not in self.record_stream:
                        continue  # (left out of the spec: nothing to order it with)
                    drained = []
                    for queue in queues:
                        i = bisect.bisect_left(starts[queue], call.start) - 1
                        if i >= 0:
                            drained.append(self._handoff(items[queue][i][1]))
                    action.drained = tuple(drained)
                    # (and what the thread queues after the sync returns is issued after it)
                    for queue in queues:
                        j = bisect.bisect_left(starts[queue], call.end)
                        if j < len(items[queue]):
                            handoff = self._handoff(("returned", id(action)))
                            self.handoff_why[handoff] = "queued after another thread's sync returned"
                            self.await_before[items[queue][j][1]].append(handoff)

    def _launched(self) -> dict[tuple[int, int], list[tuple[int, int, int]]]:
        """Per stream, the GPU work whose launch call is in the trace: (start, end, call start),
        sorted (read once, by `_not_ready` and by the placement of work without a call)."""
        if self._launched_ops is None:
            t = self.t
            out: dict[tuple[int, int], list[tuple[int, int, int]]] = defaultdict(list)
            for calls in t.calls.values():
                for launch in calls:
                    for op in self.ops_of_call.get(id(launch), ()):
                        out[(op.device, op.stream)].append((op.start, op.start + op.dur, launch.start))
            for ops in out.values():
                ops.sort()
            self._launched_ops = dict(out)
        return self._launched_ops

    def _not_ready(self, record: int, query: Call) -> bool:
        """Whether the GPU work enqueued on the record's stream before the record was still
        running when `query` returned (the trace's own timing), so the query saw it not done."""
        t = self.t
        recorded = t.call_by_corr.get(record)
        where = t.record_streams.get(record)
        if recorded is None or where is None:
            return False
        return self._ended_before(where, recorded.start) > query.end

    def _ended_before(self, stream: tuple[int, int], at: int) -> int:
        """When the work launched onto `stream` by calls begun before `at` was all done (0: none)."""
        if self._lanes is None:
            self._lanes = _LaunchedLanes((key, called, start, end)
                                         for key, ops in self._launched().items()
                                         for start, end, called in ops)
        return self._lanes.done_before(stream, at)

    def _returned_while_busy(self, device: int | None, call: Call) -> bool:
        """Whether `call` returned before the work launched on `device` (any device: None) by
        calls begun before it was done, by the trace's own times: a `cudaFree` that did so did
        not synchronize the device (CUDA documents that frees "may" synchronize, not that they do)."""
        return any(self._ended_before(key, call.start) > call.end
                   for key in self._launched() if device is None or key[0] == device)

    def _done_by(self, stream: tuple[int, int], call: Call) -> bool:
        return self._ended_before(stream, call.start) <= call.end

    def _synced_stream(self, streams: list[tuple[int, int]], last: tuple[int, int],
                       call: Call) -> tuple[tuple[int, int], str]:
        """The stream a `cudaStreamSynchronize` without a `cuda_sync` event waited for: of the
        streams the thread launched onto, the one whose earlier work ended last while the
        call blocked (the one that released it); else the stream of the thread's last launch."""
        best, best_end = None, call.start
        for stream in streams:
            end = self._ended_before(stream, call.start)
            if best_end < end <= call.end:
                best, best_end = stream, end
        if best is None or best == last:
            return last, "the stream of the thread's last launch"
        return best, ("the stream whose work ended last while it blocked (the thread's last launch was "
                      "on another)")

    def _assume(self, text: str) -> None:
        self.assumed += 1
        if len(self.assumptions) < 200:
            self.assumptions.append(text)

    def _released(self, call: Call, action: _Action) -> int:
        """When the trace's blocking call was released: the last end, by the call's return, of
        the work it waited for (0: none), that is of the work on what it syncs (`_released_on`)
        and of the work the waits enqueued there before it waited for (`_waited_for`): a stream
        whose last item is a wait is done once the recorded work is. The host time from there
        to the return is in the next gap, so the spec's host resumes when its own simulated
        work is done plus that time. Not the call's start: a gap shorter than `--min-gap`
        carried up to the call (not written) stays carried when the call did not block past it."""
        waited = self._waited_for(call, action)
        return max(self._released_on(call, action), waited if waited <= call.end else 0)

    def _waited_for(self, call: Call, action: _Action) -> int:
        """When the work that the waits enqueued before `call` on what `action` syncs waited for
        was done (for an event sync, the waits before its record on the recorded stream); 0: none."""
        if action.kind == "sync_event":
            return self._record_done().get(action.record, 0)
        if action.kind == "sync_stream":
            synced = [action.stream]
        else:
            synced = [key for key in self.stream_keys if action.device is None or key[0] == action.device]
        return max((self._waits_done_before(key, call.start) for key in synced), default=0)

    def _waits_done_before(self, stream: tuple[int, int], at: int) -> int:
        """When the work waited for by the waits enqueued onto `stream` by calls begun before
        `at` was done (0: none)."""
        starts, done = self._wait_lanes().get(stream, ((), ()))
        i = bisect.bisect_left(starts, at)
        return done[i - 1] if i > 0 else 0

    def _record_done(self) -> dict[int, int]:
        """Record -> when what it follows was done: the work launched onto its stream before
        its call, and the work that stream's earlier waits waited for (`_wait_lanes`)."""
        self._wait_lanes()
        return self._records_done

    def _wait_lanes(self) -> dict[tuple[int, int], tuple[list[int], list[int]]]:
        """Per stream, its bound waits by call start, with the latest time the work any of them
        (or an earlier one) waited for was done: each record is done when the work before it
        on its stream is, including what that stream waited for, so the records and waits are
        read in the order of their calls (a record before a wait at the same time: the wait
        bound to it was made after it). Built once, after the plans (`prepare`)."""
        if self._waits is not None:
            return self._waits
        items: list[tuple[int, int, int, tuple[int, int], int]] = []
        """(call start, 0 for a record / 1 for a wait, correlation, stream, record)."""
        for record, stream in self.record_stream.items():
            recorded = self.t.call_by_corr.get(record)
            if recorded is not None:
                items.append((recorded.start, 0, record, stream, record))
        for plan in self._plans.values():
            for call, actions in plan:
                for action in actions:
                    if action.kind == "wait" and action.record in self.record_stream:
                        items.append((call.start, 1, call.correlation or 0, action.stream, action.record))
        items.sort()
        self._records_done = {}
        lanes: dict[tuple[int, int], tuple[list[int], list[int]]] = defaultdict(lambda: ([], []))
        for start, is_wait, _, stream, record in items:
            starts, done = lanes[stream]
            if is_wait:
                starts.append(start)
                done.append(max(done[-1] if done else 0, self._records_done.get(record, 0)))
            else:
                waited = done[bisect.bisect_left(starts, start) - 1] if starts and starts[0] < start else 0
                self._records_done[record] = max(self._ended_before(stream, start), waited)
        self._waits = dict(lanes)
        return self._waits

    def _released_on(self, call: Call, action: _Action) -> int:
        """The last end, by the call's return, of the GPU work on what a blocking call syncs
        itself (a stream, the record's stream, a device; 0: none)."""
        if action.kind == "sync_stream":
            key = action.stream
        elif action.kind == "sync_event":
            key = self.record_stream[action.record]
        else:
            key = ("device", action.device)
        ends = self._ends.get(key)
        if ends is None:
            if key[0] == "device":
                ends = sorted(op.start + op.dur for op in self.t.gpu if key[1] is None or op.device == key[1])
            else:
                ends = sorted(op.start + op.dur for op in self.t.gpu if (op.device, op.stream) == key)
            self._ends[key] = ends
        i = bisect.bisect_right(ends, call.end) - 1
        return ends[i] if i >= 0 else 0

    def _launch_issue(self, call: Call, gpu: GpuOp) -> int:
        """When a launch's statement is issued: when its call enqueued the work (its end, or the
        GPU start when that came earlier). Work that started later while its device was idle
        was held by latency the model has no cause for (lazy module loading): it is issued that
        much later, so the simulation keeps the delay. A wait enqueued on its stream before it,
        for work on another device, explains the delay up to when that work was done."""
        issue = max(call.start, min(call.end, gpu.start))
        if gpu.start <= call.end or not self._idle(gpu.device, call.end, gpu.start):
            return issue
        held = self._waits_done_before((gpu.device, gpu.stream), call.start)
        if held <= call.end:
            return gpu.start
        return call.end + max(0, gpu.start - held)

    def _idle(self, device: int, start: int, end: int) -> bool:
        """Whether no GPU work ran on the device at any time in (start, end)."""
        busy = self._busy.get(device)
        if busy is None:
            intervals = sorted((op.start, op.start + op.dur) for op in self.t.gpu if op.device == device)
            merged: list[list[int]] = []
            for a, b in intervals:
                if merged and a <= merged[-1][1]:
                    merged[-1][1] = max(merged[-1][1], b)
                else:
                    merged.append([a, b])
            busy = self._busy[device] = ([m[0] for m in merged], [m[1] for m in merged])
        starts, ends = busy
        i = bisect.bisect_left(ends, start + 1)  # the first interval ending after `start`
        return i >= len(starts) or starts[i] >= end

    # -- ET

    def _et_operator(self, op: CpuOp):
        et = self.et
        if et is None:
            return None
        found = et.operator(op.rf_id, op.name) if op.rf_id is not None else None
        if found is None and op.external_id is not None:
            found = et.operator(op.external_id, op.name)
        (self.et_linked if found is not None else self.et_unlinked).add(id(op))
        return found

    def _storage(self, access, pinned: bool = False) -> str:
        key = (access.storage, access.device)
        self.storages[key] = self.storages.get(key, False) or pinned
        if access.device is not None:
            self.memory_devices.add(access.device)
        size = self.et.storage_size.get(key, access.end)
        return access_text(self.prefix + _storage_name(key), size, access.start, access.end)

    # -- threads

    def thread_text(self, thread: tuple, name: str, plan) -> ThreadText:
        t = self.t
        ops = t.ops.get(thread, [])
        label = t.thread_names.get(thread) or f"host thread {thread[1]}"
        text = ThreadText(name, comment_text(label))
        lines = text.lines
        cursor = 0
        early: dict[int, int] = {}
        """GPU end -> how early this thread issued the work that ended then (the gap carried to
        its launch; the least of several): the simulation ran it, and a sync's return, that early."""
        stack: list[list] = []  # [end, CpuOp, launched, et operator (lazy: False = not looked up)]
        oi = 0
        pending_reads: dict[str, None] = {}
        pending_writes: dict[str, None] = {}
        last_source = None
        et = self.et

        def pop() -> None:
            end, op, launched, found = stack.pop()
            if launched:
                if stack:
                    stack[-1][2] = True
                return
            if et is None or op.annotation:
                return
            found = self._et_operator(op) if found is False else found
            if found is None:
                return
            for a in found.accesses:
                if a.device is None:
                    (pending_writes if a.write else pending_reads)[self._storage(a)] = None

        def advance(to: int) -> None:
            nonlocal oi
            while True:
                if oi < len(ops) and ops[oi].start <= to:
                    nxt = ops[oi]
                    while stack and stack[-1][0] <= nxt.start:
                        pop()
                    stack.append([nxt.end, nxt, False, False])
                    oi += 1
                    continue
                while stack and stack[-1][0] <= to:
                    pop()
                return

        def gap_to(at: int, force: bool = False) -> None:
            nonlocal cursor
            gap = at - cursor
            if gap >= max(1, self.min_gap) or ((pending_reads or pending_writes) and (force or gap >= 0)):
                writes = list(pending_writes)
                reads = [r for r in pending_reads if r not in pending_writes]
                lines.append(f"host cpu{rw_text(reads, writes)}"
                             + (f" {duration_text(gap)}" if gap > 0 else ""))
                self.counts["host"] += 1
                pending_reads.clear()
                pending_writes.clear()
                cursor = max(cursor, at)

        def source_comment() -> None:
            nonlocal last_source
            source = None
            for entry in reversed(stack):
                if not entry[1].annotation:
                    source = entry[1]
                    break
            if source is None and stack:
                source = stack[-1][1]
            if source is not last_source:
                last_source = source
                if source is not None:
                    lines.append(f"# {comment_text(source.name)}")

        for call, actions in plan:
            advance(call.start)
            for action in actions:
                if action.kind == "launch":
                    if stack:
                        stack[-1][2] = True
                    for gpu in self.ops_of(call):
                        issue = self._launch_issue(call, gpu)
                        carried = max(0, issue - cursor)
                        gap_to(issue)
                        carried = min(carried, max(0, issue - cursor))  # (0 where the gap was written)
                        end = gpu.start + gpu.dur
                        early[end] = min(early.get(end, carried), carried)
                        source_comment()
                        lines.extend(self._awaits(("gpu", id(gpu)), "the trace's launch order on this stream"))
                        after = self._notifies(("gpu", id(gpu)), "another thread enqueues onto this stream next, "
                                                                 "or syncs after it")
                        blocking = self._launch(lines, call, gpu, stack, after)
                        if blocking:  # the host resumed when the copy was done (plus the call's return)
                            # (issued early by a gap carried to it, the copy is done as early)
                            cursor = max(cursor, min(call.end, gpu.start + gpu.dur) - carried)
                    continue
                if action.kind == "note":
                    gap_to(call.start)
                    lines.append(f"# {comment_text(action.note)}")
                    continue
                if action.kind in ("record", "wait"):
                    if action.record not in self.record_stream:
                        if action.kind == "wait":
                            gap_to(call.start)
                            lines.append(f"# {call.name}: the stream of its record (corr {action.record}) "
                                         "is unknown; the wait is left out")
                        continue
                    if action.kind == "record" and action.record not in self.events:
                        continue
                    gap_to(call.end)
                    source_comment()
                    if action.kind == "record":
                        stream = self.stream_name(self.record_stream[action.record])
                        why = f"  # {call.name}"
                        if action.record in self.inferred_records:
                            guess = "records the stream of the thread's latest launch (other than the waiting stream's)"
                            why += f"; assumed: {guess}"
                            self._assume(f"the record of corr {action.record} {guess}")
                        elif action.record in self.t.record_device_guesses:
                            guess = self.t.record_device_guesses[action.record]
                            why += f"; assumed: {guess}"
                            self._assume(f"the record of corr {action.record} {guess}")
                        lines.extend(self._awaits(("record", id(call)), "the trace's order on this stream"))
                        lines.append(f"{stream}: record {self.event_name(action.record)}{why}")
                        self.counts["record"] += 1
                        lines.extend(self._notifies(("record", id(call)), "another thread waits for this record, "
                                                                          "or enqueues onto its stream next"))
                    else:
                        stream = self.stream_name(action.stream)
                        why = (f"  # {call.name}" + (f": {action.note}" if action.note else "")
                               + (f"; assumed: {action.assumed}" if action.assumed else ""))
                        if action.handoff is not None:
                            lines.append(f"await {self.prefix}handoff[{action.handoff}]  "
                                         "# called after the record it binds to")
                        lines.extend(self._awaits(("wait", id(action)), "the trace's order on this stream"))
                        lines.append(f"{stream}: wait {self.event_name(action.record)}{why}")
                        lines.extend(self._notifies(("wait", id(action)),
                                                    "another thread enqueues onto this stream next"))
                        self.counts["wait"] += 1
                    if action.assumed:
                        self._assume(action.assumed)
                    continue
                # syncs block the thread from the call's start until its return
                gap_to(call.start)
                source_comment()
                if action.kind == "sync_stream":
                    target = self.stream_name(action.stream)
                elif action.kind == "sync_event":
                    if action.record not in self.record_stream:
                        lines.append(f"# {call.name}: the stream of its record (corr {action.record}) "
                                     "is unknown; the sync is left out")
                        continue
                    target = self.event_name(action.record)
                    if action.handoff is not None:
                        lines.append(f"await {self.prefix}handoff[{action.handoff}]  # called after the record it binds to")
                else:
                    target = self.device_name(action.device) if action.device is not None else "all"
                why = action.note or call.name
                if action.assumed:
                    why += f"; assumed: {action.assumed}"
                    self._assume(action.assumed)
                lines.extend(f"await {self.prefix}handoff[{k}]  # the task queue issued what was queued before "
                             "this sync" for k in action.drained)
                lines.extend(self._awaits(("sync", id(action)), "the trace's order on the stream it syncs"))
                lines.extend(self._sync_lines(action, target, why))
                lines.extend(self._notifies(("returned", id(action)), "the task queue issues what is queued after "
                                                                      "this sync returns"))
                self.counts["sync"] += 1
                # (released by work issued early by a carried gap, the simulated sync returns as
                # early: the carried time is not lost to the jump)
                released = self._released(call, action)
                cursor = max(cursor, released - early.get(released, 0))
        end = max((c.end for c in t.calls.get(thread, ())), default=0)
        advance(max(end, max((op.end for op in ops), default=0)))
        while stack:
            pop()
        gap_to(max(end, cursor), force=True)
        return text

    def _sync_lines(self, action: _Action, target: str, why: str) -> list[str]:
        """A stream or device sync. Where another thread enqueues onto what it syncs next, that
        thread's hand-off is given once the sync is issued, not once it returns (the other
        thread enqueued while this one was blocked in it): each synced stream records a fresh
        event, the hand-off follows, and the thread syncs the events, which wait for exactly
        the work enqueued before the records, as the sync waits for the work enqueued before it."""
        issued = self._notifies(("sync", id(action)), "another thread enqueues onto (or syncs) a stream this "
                                                      "syncs next, after it was issued")
        if not issued:
            # (in a spec of several ranks, one rank's `all` is its own devices)
            targets = ([self.device_name(d) for d in sorted(self.devices)] if target == "all" and self.prefix
                       else [target])
            return [f"sync {target}  # {comment_text(why)}" for target in targets]
        if action.kind == "sync_stream":
            synced = [action.stream]
        else:  # (a collective's own member stream is bridged back to the stream that launched it)
            synced = sorted(key for key in self.stream_keys if action.device is None or key[0] == action.device)
        points = []
        for key in synced:
            points.append(f"{self.prefix}sync_point[{self.sync_points}]")
            self.sync_points += 1
        out = [f"{self.stream_name(key)}: record {point}  # what the sync below waits for"
               for key, point in zip(synced, points)]
        out.extend(issued)
        out.extend(f"sync {point}  # {comment_text(why)}" for point in points)
        return out

    def _launch(self, lines: list[str], call: Call, gpu: GpuOp, stack, after: list[str]) -> bool:
        """Write one GPU operation, then `after` (hand-offs: right after the enqueue, before a
        blocking copy's sync); True when the host waits for it."""
        stream = self.stream_name((gpu.device, gpu.stream))
        dur = f" {duration_text(gpu.dur)}" if gpu.dur > 0 else ""
        collective = self.collectives.get(id(gpu))
        measured = f"{self.kernel_name(gpu.name)}, {duration_text(gpu.dur) if gpu.dur else '0'} measured"
        if isinstance(collective, Batch):
            # (NCCL runs the sends and recvs of one group as one kernel: a `group` of them)
            calls = len(collective.members)
            lines.append(f"group {{  # {measured}, {calls} call{'s' if calls > 1 else ''} in one kernel")
            for member in collective.members:
                self.counts["collective"] += 1
                memory = self._collective_memory(gpu, stack, member.kind, member.operator)
                lines.append(f"  {stream}: {_collective_text(member, memory)}")
            lines.append("}")
            lines.extend(after)
            return False
        if collective is not None:
            self.counts["collective"] += 1
            measured = f"  # {collective.called + ': ' if collective.called else ''}{measured}"
            statement = _collective_text(collective, self._collective_memory(gpu, stack, collective.kind))
            via, k = collective.via, collective.position
            if via is None:
                lines.append(f"{stream}: {statement}{measured}")
            else:  # (NCCL orders a communicator's kernels whatever streams they are launched on)
                lines += [f"{stream}: record {via}_in[{k}]  # the collective after this stream's earlier work",
                          f"{via}: wait {via}_in[{k}]", f"{via}: {statement}{measured}",
                          f"{via}: record {via}_out[{k}]",
                          f"{stream}: wait {via}_out[{k}]  # this stream's later work after the collective"]
            lines.extend(after)
            return False
        self.counts[gpu.kind] += 1
        if gpu.kind != "memcpy":
            reads, writes = self._device_accesses(gpu, stack)
            name = "memset" if gpu.kind == "memset" else self.kernel_name(gpu.name)
            lines.append(f"{stream}: kernel {name}{rw_text(reads, writes)}{dur}")
            lines.extend(after)
            return False
        direction, src_kind, dst_kind = _memcpy_kind(gpu.name)
        # CUDA, "API synchronization behavior": "For transfers from device memory to device
        # memory, no host-side synchronization is performed", even by cudaMemcpy.
        device_to_device = src_kind not in HOST_KINDS and dst_kind not in HOST_KINDS
        sync_api = call.name in SYNC_COPY_CALLS and not device_to_device
        if src_kind in HOST_KINDS and dst_kind in HOST_KINDS:
            lines.append(f"{stream}: kernel memcpy_{direction}{dur}  # host to host")
            lines.extend(self._copy_sync((gpu.device, gpu.stream), call, after) if sync_api else after)
            return sync_api
        src, dst, storages = self._copy_ends(gpu, src_kind, dst_kind, stack)
        if src_kind == "Pageable" and dst_kind not in HOST_KINDS and call.end < gpu.start + gpu.dur:
            # CUDA, "API synchronization behavior": from pageable memory the call returns once
            # the source is staged (the synchronous cudaMemcpy first syncs the stream), and the
            # trace shows it returning before the copy ended: the thread reads the source, the
            # stream copies from a pinned staging buffer.
            staging = self._placeholder("Pinned", gpu.device)
            if sync_api:
                lines.append(f"sync {stream}  # {call.name} synchronizes the stream before staging")
            lines.append(f"host stage reads {src}  # {call.name} staged the pageable source and returned")
            lines.append(f"{stream}: copy {dst} <- {staging}{dur}")
            lines.extend(after)
            return False
        lines.append(f"{stream}: copy {dst} <- {src}{dur}")
        pageable = "Pageable" in (src_kind, dst_kind)
        if sync_api:
            lines.extend(self._copy_sync((gpu.device, gpu.stream), call, after))
            return True
        if storages:
            self._pageable_syncs.append((lines, len(lines), storages))
            lines.append(f"sync {stream}  # {call.name} returns when the copy is done")
        lines.extend(after)  # (after the copy: it blocks the thread, a pageable one by itself)
        return pageable

    def _copy_sync(self, stream: tuple[int, int], call: Call, after: list[str]) -> list[str]:
        """The sync of a synchronous copy (`cudaMemcpy`), then `after`, the hand-offs to the
        threads that enqueue onto its stream next. Those were given once the copy was enqueued,
        not once it was done: a thread blocked in the call could not have given them while the
        other thread enqueued (it may have, during the copy). So the copy's stream records a
        fresh event, the hand-offs follow, and the thread syncs the event: it waits for the copy
        and the work before it, as the call did. (A copy of pageable memory blocks by itself:
        its hand-offs still come after it.)"""
        name = self.stream_name(stream)
        why = f"{call.name} returns when the copy is done"
        if not after:
            return [f"sync {name}  # {why}"]
        point = f"{self.prefix}sync_point[{self.sync_points}]"
        self.sync_points += 1
        return [f"{name}: record {point}  # what the sync below waits for", *after, f"sync {point}  # {why}"]

    def _collective_memory(self, gpu: GpuOp, stack, kind: str, operator: CpuOp | None = None) -> str:
        """A collective's buffer (`DST <- SRC` where it reads one tensor and writes another; a
        send's is what it reads, a recv's what it writes): the operator's tensors where the
        Execution Trace has them (a batched send's or recv's own `record_param_comms`, else the
        operators around the launch), a placeholder otherwise."""
        if operator is not None:
            reads, writes = self._device_accesses(gpu, [[operator.end, operator, True, False]])
        else:
            reads, writes = self._device_accesses(gpu, stack)
        if kind in ("send", "recv"):
            found = reads + writes if kind == "send" else writes + reads
            return found[0] if found else self._placeholder("comm", gpu.device)
        if writes and reads and reads[0] != writes[0]:
            return f"{writes[0]} <- {reads[0]}"
        if writes or reads:
            return (writes or reads)[0]
        return self._placeholder("comm", gpu.device)

    def _device_accesses(self, gpu: GpuOp, stack) -> tuple[list[str], list[str]]:
        if self.et is None:
            return [], []
        for entry in reversed(stack):
            if entry[3] is False:
                entry[3] = self._et_operator(entry[1]) if not entry[1].annotation else None
            found = entry[3]
            if found is None:
                continue
            # Its device's tensors, and another GPU's where the operator names one (a kernel
            # reading a peer's memory): PyTorch's operators take one device's tensors, but
            # for copies and peer access.
            mine = [a for a in found.accesses if a.device is not None]
            if mine:
                writes = list(dict.fromkeys(self._storage(a) for a in mine if a.write))
                reads = list(dict.fromkeys(self._storage(a) for a in mine if not a.write))
                return [r for r in reads if r not in writes], writes
        return [], []

    def _copy_ends(self, gpu: GpuOp, src_kind: str, dst_kind: str, stack) -> tuple[str, str, bool]:
        """Source and destination accesses: the operator's tensors where the ET has them,
        placeholder memory otherwise; and the ET host storages a pageable copy uses (declared
        pinned when another copy uses them pinned, the copy then needs an explicit sync)."""
        src = dst = None
        explicit: list = []
        if self.et is not None:
            for entry in reversed(stack):
                if entry[3] is False:
                    entry[3] = self._et_operator(entry[1]) if not entry[1].annotation else None
                found = entry[3]
                if found is None:
                    continue
                want_src = None if src_kind in HOST_KINDS else gpu.device
                want_dst = None if dst_kind in HOST_KINDS else gpu.device
                s = _end(found.accesses, False, want_src)
                d = _end(found.accesses, True, want_dst)
                if s is None and d is None:
                    continue
                if s is not None:
                    src = self._storage(s, pinned=src_kind == "Pinned")
                    if src_kind == "Pageable":
                        explicit.append((s.storage, s.device))
                if d is not None:
                    dst = self._storage(d, pinned=dst_kind == "Pinned")
                    if dst_kind == "Pageable":
                        explicit.append((d.storage, d.device))
                break
        if src is None:
            src = self._placeholder(src_kind, gpu.device)
        if dst is None:
            dst = self._placeholder(dst_kind, gpu.device)
        return src, dst, explicit

    def _placeholder(self, kind: str, device: int) -> str:
        if kind == "Pinned":
            name, place = f"{self.prefix}pinned_mem", "host pinned"
        elif kind == "Pageable":
            name, place = f"{self.prefix}pageable_mem", "host"
        elif kind == "comm":
            name, place = f"{self.device_name(device)}_comm", self.device_name(device)
        else:
            name, place = f"{self.device_name(device)}_mem", self.device_name(device)
        used, _ = self.placeholders.get(name, (0, place))
        self.placeholders[name] = (used + 1, place)
        return f"{name}[{used}]"

    # -- the whole spec

    def build(self) -> Imported:
        self.prepare()
        spec, observed, first, last = self.assemble()
        counts = dict(self.counts)
        counts.update(threads=len(spec.threads), streams=len(self.stream_keys), events=len(self.events),
                      assumptions=self.assumed, trace_events=self.t.total)
        return Imported(spec.render(), observed, first, last, self.notes, self.assumptions, counts)

    def prepare(self) -> None:
        """What each thread does, and the names of the streams (which a spec of several ranks
        reads before any rank is written: a collective's root or peer is another rank's stream)."""
        t = self.t
        plans = self.plan()
        self._stream_handoffs(plans)
        self._queue_handoffs(plans)
        self.notes.extend(t.malformed_notes())
        if self.et is not None:
            self.notes.extend(self.et.notes())
        if self.repeated_ids:
            self.notes.append(f"{self.repeated_ids} runtime call(s) repeat the correlation id of an earlier call "
                              "(a trace merged from processes with one pid?): each GPU operation with that id is "
                              "taken as launched by the latest such call before it")
        self.events = set(self.record_stream)
        # GPU work without a call in the trace is issued, at its start, by the thread that
        # launched the most onto its stream (the first thread when no thread did).
        owners: dict[tuple[int, int], dict[tuple, int]] = defaultdict(lambda: defaultdict(int))
        for thread, calls in t.calls.items():
            for call in calls:
                if call.correlation is not None:
                    for op in self.ops_of_call.get(id(call), ()):
                        owners[(op.device, op.stream)][thread] += 1
        orphans = [op for op in t.gpu if op.correlation is None or op.correlation not in t.call_by_corr]
        graphed = [op for op in t.gpu if op.correlation is not None and "GraphLaunch" in getattr(
            t.call_by_corr.get(op.correlation), "name", "")]
        if graphed:  # (docs/import.md: what an import makes of a graph launch's work)
            launches = len({op.correlation for op in graphed})
            streams = len({(op.device, op.stream) for op in graphed})
            self.notes.append(f"{launches} CUDA graph launch(es) ran {len(graphed)} GPU operation(s) on {streams} "
                              "stream(s): each is imported in stream order on the stream the trace reports; the "
                              "graph's edges, and its order with the launch stream, are not in the trace")
        overlapped = self._overlap_note()
        if overlapped:
            self.notes.append(overlapped)
        threads = sorted(t.calls, key=lambda k: (-len(t.calls[k]), str(k)))
        if orphans:
            fallback = threads[0] if threads else ("device", "device")
            extra: dict[tuple, list] = defaultdict(list)
            # Work that ran on a stream before work launched in the trace was enqueued before
            # that launch (work launched before the profiling window, most often).
            # Per stream: the starts of launched work in order, with the earliest launch call
            # among the work that started at or after each (suffix minima, for a bisection).
            earliest: dict[tuple[int, int], tuple[list[int], list[int]]] = {}
            for key, ops in self._launched().items():
                suffix, low = [], None
                for _, _, called in reversed(ops):
                    low = called if low is None else min(low, called)
                    suffix.append(low)
                earliest[key] = ([start for start, _, _ in ops], suffix[::-1])
            for n, op in enumerate(orphans):
                key = (op.device, op.stream)
                owner = max(owners[key].items(), key=lambda kv: kv[1])[0] if owners.get(key) else fallback
                corr = -(n + 1)
                op.correlation = corr
                t.gpu_by_corr[corr].append(op)
                starts, suffix = earliest.get(key, ([], []))
                later = bisect.bisect_right(starts, op.start)
                issue = min(op.start, suffix[later]) if later < len(starts) else op.start
                call = Call(owner, ORPHAN_CALL, issue, issue, corr)
                extra[owner].append((call, [_Action("launch")]))
            for owner, items in extra.items():
                merged = list(plans.get(owner, ())) + items
                merged.sort(key=lambda item: (item[0].start, item[0].name != ORPHAN_CALL, -item[0].end))
                plans[owner] = merged
                if owner not in threads:
                    threads.append(owner)
            self.notes.append(f"{len(orphans)} GPU operation(s) have no runtime call in the trace; "
                              "each is issued at its start by the thread that launched most onto its stream")
        self._name_streams()
        self._plans, self._threads = plans, threads

    def _overlap_note(self) -> str:
        """A note where GPU work began before the work ahead of it on its stream had ended
        (by more than the nanosecond the trace's times round to): a stream runs its work one
        after another, so the trace is inconsistent, or the kernels used programmatic dependent
        launch; the spec runs them one after another, and its engine counts include the overlap
        (`compute 2` for one stream). Empty where there is none."""
        by_stream: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
        for op in self.t.gpu:
            by_stream[(op.device, op.stream)].append((op.start, op.start + op.dur))
        overlaps, first = 0, None
        for key, spans in by_stream.items():
            spans.sort()
            ended = spans[0][1]
            for start, end in spans[1:]:
                if start + 1 < ended:
                    overlaps += 1
                    first = min(first or (start, key), (start, key))
                ended = max(ended, end)
        if first is None:
            return ""
        start, key = first
        return (f"{overlaps:,} GPU operation(s) began before the work ahead of them on their stream ended (the first "
                f"on {self._stream_label(key)}, {start / 1000:,.3f} us in): the trace is inconsistent, or they used "
                "programmatic dependent launch; the spec runs each stream's work in turn, and its engine counts "
                "include the overlap")

    def assemble(self) -> tuple[SpecText, dict[str, StreamStats], int, int]:
        """The spec's parts, and the trace's own span per stream and in all (`prepare` first)."""
        plans, threads = self._plans, self._threads
        names = self.thread_names(threads)
        bodies = [self.thread_text(thread, names[thread], plans.get(thread, ())) for thread in threads]
        if self.et is not None and self.et_unlinked and not self.et_linked:
            self.notes.append(f"none of the {len(self.et_unlinked):,} operators looked up is in the Execution "
                              "Trace (is it from another run or iteration?): kernels access no memory")
        dropped = False
        for lines, index, storages in self._pageable_syncs:
            if not any(self.storages.get(key) for key in storages):
                lines[index] = None
                dropped = True
        if dropped:
            for body in bodies:
                body.lines[:] = [line for line in body.lines if line is not None]
        observed, first, last = self._observed()
        spec = SpecText(title_text(f"imported from {self.source}"))
        spec.header = self._header(observed, first, last)
        spec.declarations = self._declarations()
        spec.threads = bodies
        return spec, observed, first, last

    def _observed(self) -> tuple[dict[str, StreamStats], int, int]:
        stats: dict[str, StreamStats] = {}
        first, last = -1, 0
        for op in self.t.gpu:
            collective = self.collectives.get(id(op))
            # (a collective the spec runs on its comm's own member stream is observed there)
            name = collective.via if collective is not None and collective.via else self.stream_name((op.device, op.stream))
            s = stats.get(name)
            if s is None:
                s = stats[name] = StreamStats(name, op.device)
            end = op.start + op.dur
            if s.first < 0 or op.start < s.first:
                s.first = op.start
            s.last = max(s.last, end)
            s.busy += op.dur
            s.ops += 1
            if first < 0 or op.start < first:
                first = op.start
            last = max(last, end)
        return dict(sorted(stats.items())), max(first, 0), last

    def _header(self, observed, first, last) -> list[str]:
        t = self.t
        c = self.counts
        out = [f"Imported by `streamproof import kineto` from {self.source}.",
               f"{t.total:,} trace events: {c.get('kernel', 0):,} kernels, {c.get('memcpy', 0):,} memcpys, "
               f"{c.get('memset', 0):,} memsets on {len(self.stream_keys)} stream(s); "
               f"{c.get('record', 0):,} records, {c.get('wait', 0):,} waits, {c.get('sync', 0):,} syncs.",
               f"Observed {'NPU' if self.device_word == 'npu' else 'GPU'} span {(last - first) / 1e6:.3f} ms; "
               "host gaps between runtime calls are "
               "`host cpu` statements; the devices declare no launch cost (it is in the gaps).",
               "Engine counts are the most operations the trace ran at once on each engine."]
        if not (t.ascend or t.private):
            out.append("Streams are independent: the legacy default stream's implicit synchronization is not modelled.")
        out.append("Comments name the operator that issued the statements below them.")
        if self.handoffs:
            out.append("Threads hand off to each other (`handoff`) where the trace orders them: a wait or event "
                       "sync after the other thread's record it binds to, and the launches, records and waits of "
                       "several threads on one stream in the order the GPU ran their work, else of their calls (a "
                       "bound wait after its record), with each sync after what was enqueued there before it and "
                       "before what was enqueued after it was issued (a `sync_point` recorded there)"
                       + (", and torch_npu's task queue around the syncs of other threads"
                          if t.queue_threads else "") + ". Otherwise threads interleave freely.")
        if t.ascend:
            out.append("Read from an Ascend profiler trace (torch_npu's trace_view.json, msprof's timeline): "
                       "tasks are tied to the runtime calls that launched them by connection id; records and "
                       "waits are the record and wait tasks on their streams, and the calls name neither the "
                       "stream a sync waits for nor (but in the newest builds) a wait's event: those are "
                       "inferred, marked `assumed:`.")
        elif t.has_cuda_sync:
            out.append("Waits and syncs are exact: they come from the trace's cuda_sync events"
                       + (" (but those marked `assumed:`)." if self.assumed else "."))
        elif t.private:
            out.append("A PrivateUse1 backend's trace (torch_npu's Kineto-style export): calls are tied to the "
                       "kernels of their name at their start; it records no event records, waits or syncs.")
        else:
            out.append("The trace has no cuda_sync events: event bindings and synchronized streams are inferred.")
        if self.et is not None:
            linked, looked_up = len(self.et_linked), len(self.et_linked | self.et_unlinked)
            out.append(f"Reads and writes come from the Execution Trace: buffers are tensor storages (sN); "
                       f"{linked:,} of the {looked_up:,} operators looked up were found in it.")
        else:
            out.append("Without an Execution Trace kernels access no memory; copies use placeholder memory, "
                       "one element per copy, so they never conflict.")
        if self.assumed:
            out.append(f"Assumptions ({self.assumed}):")
            out.extend(f"  - {a}" for a in self.assumptions)
            if self.assumed > len(self.assumptions):
                out.append(f"  - ... and {self.assumed - len(self.assumptions)} more, marked `assumed:` below")
        for note in self.notes[1 if self.no_sync_note else 0:]:
            out.append(f"Note: {note}")
        if t.skipped:
            out.append(f"{t.skipped} malformed event(s) were skipped.")
        return out

    def _declarations(self) -> list[str]:
        t = self.t
        out = []
        compute: dict[int, list[tuple[int, int]]] = defaultdict(list)
        comm: dict[int, list[tuple[int, int]]] = defaultdict(list)
        copies: dict[tuple[int, str], list[tuple[int, int]]] = defaultdict(list)
        for op in t.gpu:
            if op.kind == "memcpy":
                copies[(op.device, _memcpy_engine(op.name))].append((op.start, op.start + op.dur))
            elif id(op) in self.collectives:  # (a collective takes a unit of the comm engine)
                found = self.collectives[id(op)]
                calls = len(found.members) if isinstance(found, Batch) else 1  # (a batch's calls run at once)
                comm[op.device].extend([(op.start, op.start + op.dur)] * calls)
            else:
                compute[op.device].append((op.start, op.start + op.dur))
        for device in sorted(self.devices | self.memory_devices):
            items = [f"compute {_concurrency(compute.get(device, ()))}"]
            for engine in ("h2d", "d2h", "d2d"):
                items.append(f"{engine} {_concurrency(copies.get((device, engine), ()))}")
            if device in comm:
                items.append(f"comm {_concurrency(comm[device])}")
            idle = "" if device in self.devices else "  # ran no work in the trace: holds tensors the spec uses"
            out.append(f"device {self.device_name(device)} {{ {' '.join(items)} }}{idle}")
        for key in sorted(self.stream_keys):
            out.append(f"stream {self.stream_name(key)} on {self.device_name(key[0])}")
        for corr in sorted(self.events):
            out.append(f"event {self.event_name(corr)}" + (" flag  # a wait made before its record waited for it"
                                                           if corr in self.flag_events else ""))
        if self.sync_points:
            out.append(f"event {self.prefix}sync_point[{self.sync_points}]  # recorded where a sync another "
                       "thread's later work follows was issued")
        if self.handoffs:
            out.append(f"notify {self.prefix}handoff[{self.handoffs}]  # host hand-offs between threads that the "
                       "trace implies")
        for name, (count, place) in sorted(self.placeholders.items()):
            pinned = " pinned" if place.endswith("pinned") else ""
            where = place.split()[0]
            size = self.comm_placeholder_bytes if name.endswith("_comm") else 1
            out.append(f"buffer {name}[{count}] {size}B on {where}{pinned}  # placeholder: one element per "
                       + ("collective" if name.endswith("_comm") else "copy"))
        if self.et is not None:
            for key, pinned in sorted(self.storages.items(), key=lambda kv: (kv[0][0], kv[0][1] or -1)):
                storage, device = key
                size = self.et.storage_size.get(key, 1)
                where = "host" + (" pinned" if pinned else "") if device is None else self.device_name(device)
                out.append(f"buffer {self.prefix}{_storage_name(key)} {size_text(size)} on {where}")
        return out


def _longest_paths(base: dict[tuple, int], after: dict[tuple, list[tuple[tuple, int]]]) -> dict[tuple, int]:
    """Each node's time: its `base`, no sooner than each node before it (`after`: node -> the
    nodes after it, by how much) plus that much; {} where the order has a circle."""
    waiting: dict[tuple, int] = defaultdict(int)
    for node, found in after.items():
        if node in base:
            for later, _ in found:
                waiting[later] += 1
    time = dict(base)
    ready = [node for node in base if not waiting[node]]
    done = 0
    while ready:
        node = ready.pop()
        done += 1
        for later, by in after.get(node, ()):
            time[later] = max(time[later], time[node] + by)
            waiting[later] -= 1
            if not waiting[later]:
                ready.append(later)
    return time if done == len(base) else {}


class _Ends:
    """One stream's launched work by end: (end, 2 x the time its launch took effect), sorted, and
    from each on the earliest such time of the work ending there or later (`_sync_time`)."""

    def __init__(self, found: list[tuple[int, int]]) -> None:
        found.sort()
        self.ends = found
        self.earliest = [0] * len(found)
        low = math.inf
        for i in range(len(found) - 1, -1, -1):
            low = min(low, found[i][1])
            self.earliest[i] = low

    def launched_first_after(self, at: int) -> float:
        """2 x the earliest time a launch took effect of the work that ended after `at` (inf: none)."""
        i = bisect.bisect_right(self.ends, (at, math.inf))
        return self.earliest[i] if i < len(self.ends) else math.inf


def _sync_time(lanes: dict[tuple[int, int], _Ends], call: Call, action: _Action, time: int) -> int:
    """Twice the time a stream or device sync took its place among the other threads' work on
    the streams it syncs (`time`: its call's start), but before any launch whose work ended after
    the sync returned: it did not wait for that work, so it was enqueued after the sync (the
    launch's call, begun first, enqueued once the sync had begun)."""
    if action.kind == "sync_stream":
        synced = [lanes[action.stream]] if action.stream in lanes else []
    else:
        synced = [found for lane, found in lanes.items() if action.device is None or lane[0] == action.device]
    after = min((found.launched_first_after(call.end) for found in synced), default=math.inf)
    return int(min(time, after - 1))


def _in_gpu_order(items: list[tuple], ran: dict[tuple, int]) -> list[tuple]:
    """One stream's items (time, position, thread, key), sorted by preference, reordered so
    that its GPU work comes in the order the GPU ran it (a stream runs its work in the order it
    was enqueued, whatever the calls' times say) and each thread's items stay in its order;
    otherwise by preference. A corrupt trace whose GPU order contradicts a thread's own is
    taken by preference where they disagree."""
    queues: dict[tuple, deque] = defaultdict(deque)
    for n, item in sorted(enumerate(items), key=lambda found: (found[1][1], found[0])):  # (program order)
        queues[item[2]].append((n, item))
    gpu = [key for _, _, key in sorted((ran[item[3]], n, item[3]) for n, item in enumerate(items) if item[3] in ran)]
    placed: set[tuple] = set()
    out: list[tuple] = []
    g = 0
    while len(out) < len(items):
        while g < len(gpu) and gpu[g] in placed:
            g += 1
        heads = [queue[0] for queue in queues.values() if queue]
        ready = [head for head in heads if head[1][3] not in ran or head[1][3] == gpu[g]]
        n, item = min(ready or heads)
        queues[item[2]].popleft()
        placed.add(item[3])
        out.append(item)
    return out


def _storage_name(key: tuple[int, int | None]) -> str:
    storage, device = key
    return f"s{storage}" if device is None else f"s{storage}_gpu{device}"


def _concurrency(intervals) -> int:
    """The most intervals that overlap at any instant (at least 1)."""
    points = []
    for start, end in intervals:
        if end > start:
            points.append((start, 1))
            points.append((end, -1))
    points.sort()
    best = level = 0
    for _, delta in points:
        level += delta
        best = max(best, level)
    return max(1, best)


def _memcpy_kind(name: str) -> tuple[str, str, str]:
    """(direction, source kind, destination kind) from `Memcpy HtoD (Pinned -> Device)`."""
    m = MEMCPY_NAME.search(name)
    if m:
        return m.group(1), m.group(2).strip(), m.group(3).strip()
    for direction, src, dst in (("HtoD", "Pageable", "Device"), ("DtoH", "Device", "Pageable"),
                                ("DtoD", "Device", "Device"), ("PtoP", "Device", "Device")):
        if direction in name:
            return direction, src, dst
    return "DtoD", "Device", "Device"


MEMCPY_DIRECTIONS = frozenset({"HtoD", "DtoH", "HtoA", "AtoH", "AtoA", "AtoD", "DtoA", "DtoD", "HtoH", "PtoP"})
MEMORY_KINDS = frozenset({"Pageable", "Pinned", "Device", "Array", "Managed", "Device Static", "Managed Static"})
"""The copy directions and memory kinds CUPTI names (Kineto writes them in a memcpy's name)."""


def _memcpy_known(name: str) -> bool:
    """Whether a memcpy's name says its direction (`_memcpy_kind` reads every other as a copy on
    the device): `Memcpy HtoD (Pinned -> Device)`, or a direction CUPTI names within it."""
    m = MEMCPY_NAME.search(name)
    if m:
        return m.group(1) in MEMCPY_DIRECTIONS and {m.group(2).strip(), m.group(3).strip()} <= MEMORY_KINDS
    return any(direction in name for direction in ("HtoD", "DtoH", "DtoD", "PtoP"))


def _memcpy_engine(name: str) -> str:
    direction, src, dst = _memcpy_kind(name)
    if src in HOST_KINDS and dst not in HOST_KINDS:
        return "h2d"
    if dst in HOST_KINDS and src not in HOST_KINDS:
        return "d2h"
    return "d2d"


def _short_kernel_name(name: str) -> str:
    """`void at::native::foo<float, 4>(Args...)` -> `foo`: the function name without its
    namespace, template arguments, parameters and return type."""
    out = []
    depth = 0
    for ch in name:
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth = max(0, depth - 1)
        elif depth == 0:
            out.append(ch)
    flat = "".join(out).strip()
    words = flat.split()
    last = words[-1] if words else flat
    parts = [p for p in last.split("::") if p]
    return parts[-1] if parts else name


def import_kineto(trace, et: ExecutionTrace | None = None, *, source: str = "trace",
                  min_gap: int = 0) -> Imported:
    """A spec from a Kineto trace (the parsed JSON), optionally with an Execution Trace.

    `min_gap` (ns): host gaps shorter than this are carried into the next one instead of
    being written as their own statement (the timeline stays exact to within `min_gap`).
    Raises TraceError when the document is not a Kineto trace.
    """
    parsed = _Trace(trace)
    check_trace(parsed)
    return _Builder(parsed, et, source, min_gap).build()


def check_trace(parsed: _Trace) -> None:
    """TraceError when a trace has nothing to import, or times that no spec can hold."""
    if not parsed.gpu and not parsed.calls:
        unread = []
        if parsed.skipped:
            unread.append(f"{parsed.skipped:,} event(s) were unreadable (no timestamp, stream or device)")
        if parsed.unpaired:
            unread.append(f"{parsed.unpaired:,} begin/end (B/E) event(s) are not read: only complete (X) events are")
        device, asked = ("NPU", "ProfilerActivity.NPU") if parsed.ascend else ("GPU", "ProfilerActivity.CUDA")
        raise TraceError(f"the trace has no {device} activity and no runtime calls (is it a PyTorch profiler trace "
                         f"recorded with {asked}?)" + "".join(f"; {u}" for u in unread))
    last = max([op.start + op.dur for op in parsed.gpu]
               + [call.end for calls in parsed.calls.values() for call in calls])
    if last > MAX_DURATION_NS:
        raise TraceError(f"the trace runs for {last / 1e9:,.0f} s, longer than a spec's times may be "
                         f"({MAX_DURATION_NS / 86_400e9:.1f} days): a timestamp or duration in it looks corrupt")


def _end(accesses, write: bool, device: int | None):
    """A copy's source (or destination) among an operator's accesses: the one on `device`
    (None: host memory); for device memory, another GPU's where none is on this one (a peer
    or cross-device copy, which the copy's own device issues)."""
    found = next((a for a in accesses if a.write == write and a.device == device), None)
    if found is None and device is not None:
        found = next((a for a in accesses if a.write == write and a.device is not None), None)
    return found
