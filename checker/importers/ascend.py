"""Ascend profiler traces -> the shape of trace `kineto.py` reads.

The Ascend PyTorch profiler (torch_npu, `ASCEND_PROFILER_OUTPUT/trace_view.json`) writes CANN's
msprof timeline (`msprof_*.json`) with its own Python operators added: a JSON array of Chrome
trace events whose roles come from the process they are in, not from a category.

* "Ascend Hardware": one thread per stream (`Stream N`, tid N); each task carries a
  `connection_id`, the id of the host call that launched it. Event records and waits are tasks
  too (`EVENT_RECORD`, `EVENT_WAIT`, or their `_SQE` spellings), and so are copies
  (`MEMCPY_ASYNC`, with `operation` "host to device", ...).
* "CANN": the host's runtime calls, one thread per OS thread (`AscendCL@aclrtRecordEvent`,
  `Node@launch`, `AscendCL@aclrtSynchronizeStream`, ...), with the same `connection_id`; the
  newest builds also name a record's or wait's event (`event_id`).
* "Communication": one thread per HCCL group (`Group G Communication`), one slice per
  collective (`hcom_allReduce_...`, with `rank_size`, `count`, `data_type`), tied to its launch
  and its stream tasks by `connection_id`.
* "Python": torch_npu's operators (`cpu_op`) on the OS pid and thread ids the CANN calls use;
  with the task queue on, the runtime calls are made by its dequeue thread (`Dequeue@OP`).

`as_kineto` rewrites such a trace as a Kineto one: tasks become kernels and copies (the tasks of
one launch on one stream are one, as an operator's subtasks or a collective's steps are),
CANN calls become runtime calls whose correlation id is their `connection_id`, a record task
says which stream the record was on (`cuda_event`), a wait task which stream waited, and for
which record (`cuda_sync`): the record of the same `event_id` made last before the wait's call
where the trace names events, else one on another stream chosen by the device's timing (marked
as an assumption). A collective's tasks carry what its Communication slice says (`Collective
name`, its group, `Group size`). A blocking call another thread made while the task queue was
idle is written on the queue's dequeue thread (`_drain_into_queue`). Times become whole
nanoseconds from the trace's first event (msprof writes them as strings of microseconds since
1970, which a float cannot hold to the nanosecond). What is left out is said in notes.
"""

from __future__ import annotations

import bisect
import json
import os
import re
from collections import defaultdict
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from checker.resources import read_prefix

HARDWARE = "Ascend Hardware"
HOST = "CANN"
PYTHON = "Python"
COMMUNICATION = frozenset({"Communication", "HCCL"})
"""(older traces name the process "HCCL"; its threads are still `Group G Communication`)"""
MARKER_TASKS = frozenset({"PROFILING_ENABLE", "PROFILING_DISABLE"})
"""Tasks the profiler itself puts on a stream: no work of the program's."""

RECORD_TASKS = frozenset({"EVENT_RECORD", "EVENT_RECORD_SQE"})
WAIT_TASKS = frozenset({"EVENT_WAIT", "EVENT_WAIT_SQE"})
COPY_TASKS = frozenset({"MEMCPY_ASYNC"})
COPY_KINDS = (("host to device", "Memcpy HtoD (Pinned -> Device)"), ("device to host", "Memcpy DtoH (Device -> Pinned)"),
              ("host to host", "Memcpy HtoH (Pinned -> Pinned)"))
"""A copy task's `operation` ("host to device", "host to device ex", ...) -> the Kineto name of
such a copy (`aclrtMemcpyAsync` takes host memory that `aclrtMallocHost` gave: pinned); any
other (device to device, managed memory, none said) is a copy on the device."""
BLOCKING_CALLS = frozenset({
    "aclrtSynchronizeStream", "aclrtSynchronizeStreamWithTimeout", "aclrtSynchronizeDevice",
    "aclrtSynchronizeDeviceWithTimeout", "aclrtSynchronizeEvent", "aclrtSynchronizeEventWithTimeout",
    "aclrtMemcpy", "aclrtMemcpy2d",
})
"""Calls that block their thread until work on the device is done."""

ACL_RECORD_CALLS = frozenset({"aclrtRecordEvent"})
ACL_WAIT_CALLS = frozenset({"aclrtStreamWaitEvent"})
SPECIAL_CALLS = ACL_RECORD_CALLS | ACL_WAIT_CALLS | BLOCKING_CALLS | frozenset({
    "aclrtQueryEvent", "aclrtQueryEventStatus", "aclrtStreamQuery", "aclrtMemcpyAsync", "aclrtMemsetAsync",
    "aclrtMemset",
})
"""Runtime calls read by their name (`kineto.py` has them beside the CUDA ones): kept even
where they launch nothing, and kept over the calls inside them."""

COLLECTIVES = {"allreduce": "allreduce", "allgather": "allgather", "reducescatter": "reduce_scatter",
               "broadcast": "broadcast", "reduce": "reduce", "alltoall": "alltoall", "alltoallv": "all_to_allv",
               "alltoallvc": "all_to_allv", "send": "send", "receive": "recv", "gather": "gather",
               "scatter": "scatter"}
"""HCCL's op name (`hcom_allReduce_...`, lowered, up to its first `_`) -> PyTorch's `Collective name`."""

GROUP_THREAD = re.compile(r"^Group (.+) Communication$")
PROFILER_INFO = re.compile(r"^profiler_info_(\d+)\.json$")


def _copy_kind(operation: str) -> str:
    return next((name for what, name in COPY_KINDS if what in operation), "Memcpy DtoD (Device -> Device)")


def _drain_into_queue(kept: list[_Call], queues: list[tuple], notes: list[str]) -> None:
    """torch_npu's task queue: one dequeue thread makes the runtime calls of the threads that
    run operators, and a blocking call (a sync, a synchronous copy) first waits for the queue to
    drain and then runs on the caller's thread while the dequeue thread has nothing to do. Such
    a call is written on the dequeue thread, at its time: the same order (after everything
    queued before it, before everything queued after it) in a program of one thread. A call
    that overlaps one of the dequeue thread's, or of a thread that makes other calls itself,
    stays where it was."""
    if len(queues) != 1:
        return
    queue = queues[0]
    mine = sorted((call.start, call.end) for call in kept if call.thread == queue)
    if not mine:
        return
    starts = [start for start, _ in mine]
    # (a thread that made other runtime calls itself keeps them all: its syncs are ordered with
    # its own launches, records and waits by its program order)
    launching = {call.thread for call in kept if call.name not in BLOCKING_CALLS}
    moved = 0
    for call in kept:
        if call.thread == queue or call.thread[0] != queue[0] or call.name not in BLOCKING_CALLS \
                or call.thread in launching:
            continue
        i = bisect.bisect_left(starts, call.end)
        if (i and mine[i - 1][1] > call.start) or (i < len(mine) and mine[i][0] < call.end):
            continue  # (it overlaps a call of the dequeue thread)
        call.thread = queue
        moved += 1
    if moved:
        notes.append(f"{moved:,} blocking call(s) (syncs, synchronous copies) made after torch_npu's task queue "
                     "drained are written on the queue's dequeue thread, which makes the runtime calls")


def _kinds(group: list[dict]) -> set[str]:
    """The names and task types of a launch's tasks on one stream."""
    found = set()
    for task in group:
        found.add(str(task.get("name", "")))
        if isinstance(task.get("args"), dict):
            found.add(str(task["args"].get("Task Type", "")))
    return found


def is_ascend(data) -> bool:
    """Whether a parsed trace is an Ascend one: it has an "Ascend Hardware" process."""
    events = data if isinstance(data, list) else data.get("traceEvents") if isinstance(data, dict) else None
    if not isinstance(events, list):
        return False
    return any(isinstance(ev, dict) and ev.get("ph") == "M" and ev.get("name") == "process_name"
               and isinstance(ev.get("args"), dict) and ev["args"].get("name") == HARDWARE for ev in events)


def _ns(value) -> int | None:
    """Microseconds, as a number or as digits (msprof writes "1742490378358140.950"), in whole ns."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, str):
        whole, _, fraction = value.strip().partition(".")
        digits = whole[1:] if whole[:1] == "-" else whole
        if digits.isascii() and digits.isdigit() and len(digits) <= 16 and (
                not fraction or (fraction.isascii() and fraction.isdigit())):
            ns = int(digits) * 1000 + int((fraction + "000")[:3])
            return -ns if whole[:1] == "-" else ns
    if isinstance(value, int):
        return value * 1000 if abs(value) <= 10**18 else None
    if isinstance(value, float) and abs(value) < 1e9:  # (a duration: exact enough as a float)
        return round(value * 1000)
    if not isinstance(value, (str, float)):
        return None
    try:
        number = Decimal(str(value))  # (a float time since 1970: its shortest digits, not its binary value)
    except (InvalidOperation, ValueError):
        return None
    if not number.is_finite() or abs(number) > Decimal("1e18"):
        return None
    return int(number * 1000)


def _int(value) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    if isinstance(value, str) and re.fullmatch(r"\s*-?[0-9]+\s*", value):
        return int(value)
    return None


def trace_key(value):
    """A process or thread id as a key (here and in the Kineto reader): numbers and strings as
    they are, anything else (a corrupt trace's list or object) as its text."""
    if value is None or isinstance(value, (int, float, str)):
        return value
    return json.dumps(value, sort_keys=True, default=str)


def _api(name: str) -> str:
    """`AscendCL@aclrtRecordEvent` -> `aclrtRecordEvent` (msprof writes `LEVEL@api`)."""
    return name.split("@", 1)[1] if "@" in name else name


def _collective(name: str) -> str | None:
    """`hcom_allReduce__483_2_1` -> `allreduce` (PyTorch's name for it); None for others."""
    text = name.lower()
    if not text.startswith("hcom_"):
        return None
    return COLLECTIVES.get(text[len("hcom_"):].split("_", 1)[0])


@dataclass
class _Call:
    """A CANN runtime call kept for the Kineto trace."""

    thread: tuple
    event: dict
    name: str
    connection: int | None
    start: int
    end: int
    special: bool
    dropped: bool = False

    @property
    def event_id(self) -> int | None:
        args = self.event.get("args")
        return _int(args.get("event_id")) if isinstance(args, dict) else None


class _Reader:
    """The roles of an Ascend trace's processes and threads, from its metadata."""

    def __init__(self, events: list) -> None:
        self.processes: dict[object, str] = {}
        self.labels: dict[object, str] = {}
        self.threads: dict[tuple, str] = {}
        for ev in events:
            if not isinstance(ev, dict) or ev.get("ph") != "M" or not isinstance(ev.get("args"), dict):
                continue
            if ev.get("name") == "process_name":
                self.processes[trace_key(ev.get("pid"))] = str(ev["args"].get("name", ""))
            elif ev.get("name") == "process_labels":
                self.labels[trace_key(ev.get("pid"))] = str(ev["args"].get("labels", ""))
            elif ev.get("name") == "thread_name":
                self.threads[(trace_key(ev.get("pid")), trace_key(ev.get("tid")))] = str(ev["args"].get("name", ""))
        self.devices: dict[object, int] = {}
        pythons = [pid for pid, name in self.processes.items() if name == PYTHON]
        self.python = pythons[0] if len(pythons) == 1 else None

    def role(self, pid) -> str:
        return self.processes.get(pid, "")

    def device(self, pid) -> int:
        """An Ascend Hardware process's device: its label ("NPU 0"), else the low five bits of
        its pid (msprof packs `os_pid << 10 | layer << 5 | device`)."""
        found = self.devices.get(pid)
        if found is None:
            match = re.search(r"(\d+)\s*$", self.labels.get(pid, ""))
            packed = isinstance(pid, int) and not isinstance(pid, bool) and pid >= 1 << 10
            found = int(match.group(1)) if match and len(match.group(1)) < 6 else pid & 31 if packed else 0
            self.devices[pid] = found
        return found

    def host_pid(self, pid):
        """The OS process a CANN thread belongs to, by the pid the Python process has (a trace
        is one process's): msprof packs the OS pid into the high bits of its own pids."""
        if self.python is not None:
            return self.python
        return pid >> 10 if isinstance(pid, int) and not isinstance(pid, bool) and pid >= 0 else pid


def as_kineto(data, rank: int | None = None) -> dict:
    """The Kineto-shaped trace (`traceEvents`, and `distributedInfo` for a known rank) of an
    Ascend one; `kineto.py` reads what it says the same way as a CUDA trace's."""
    events = data if isinstance(data, list) else data.get("traceEvents", [])
    converter = _Converter(events)
    converter.read()
    converter.operations()
    converter.choose_calls()
    converter.index_records()
    converter.write_tasks()
    converted: dict = {"traceEvents": converter.out, "streamproofFlavour": "ascend",
                       "streamproofNotes": converter.notes,
                       "streamproofQueueThreads": [list(q) for q in converter.queues]}
    if rank is not None:
        converted["distributedInfo"] = {"rank": rank}
    elif isinstance(data, dict) and isinstance(data.get("distributedInfo"), dict):
        converted["distributedInfo"] = data["distributedInfo"]
    return converted


class _Converter:
    """One Ascend trace rewritten as a Kineto one, stage by stage (`as_kineto`): read the
    events by process, group each stream's tasks into operations, choose the runtime calls,
    index the records, write the operations."""

    def __init__(self, events: list) -> None:
        self.events = events
        self.reader = _Reader(events)
        self.spans: dict[int, tuple[int | None, int]] = {
            id(ev): (_ns(ev.get("ts")), max(0, _ns(ev.get("dur")) or 0))
            for ev in events if isinstance(ev, dict) and ev.get("ph") == "X"}
        """id(event) -> its start and duration in ns (start None: unreadable), read once."""
        self.origin = min((start for start, _ in self.spans.values() if start is not None), default=0)
        self.out: list = []
        """The Kineto trace's events."""
        self.notes: list[str] = []
        self.counts: dict[str, int] = defaultdict(int)
        self.on_stream: dict[tuple, list[tuple[int, int, dict, int | None]]] = defaultdict(list)
        """(device, stream) -> its tasks: (start, index, event, connection id)."""
        self.calls: dict[tuple, list[dict]] = defaultdict(list)
        """host thread -> its CANN calls."""
        self.slices: dict[int, tuple[str, dict, str]] = {}
        """connection id -> a collective's Communication slice: (op name, args, group)."""
        self.tasks: dict[tuple, list[dict]] = {}
        """(device, stream, connection id or None, ordinal) -> the tasks of one operation there."""
        self.queues: list[tuple] = []
        self.calls_by_connection: dict[int, _Call] = {}

    def us(self, ev: dict):
        """An event's start from the trace's first event, in microseconds (None: unreadable)."""
        start = self.spans[id(ev)][0]
        return None if start is None else (start - self.origin) / 1000

    def span(self, tasks: list[dict]) -> tuple[float | None, float | None]:
        """The first start (from the trace's first event) and the span, in microseconds."""
        spans = self.spans
        begun = [s for t in tasks if (s := spans[id(t)][0]) is not None]
        if not begun:
            return None, tasks[0].get("dur")
        first = min(begun)
        last = max(s + spans[id(t)][1] for t in tasks if (s := spans[id(t)][0]) is not None)
        return (first - self.origin) / 1000, (last - first) / 1000

    def read(self) -> None:
        """Each event by its process: tasks per stream, calls per host thread, collectives'
        slices, and torch_npu's operators (passed on as operators)."""
        reader, out = self.reader, self.out
        for index, ev in enumerate(self.events):
            if not isinstance(ev, dict):
                out.append(ev)  # (kineto.py says what it skipped)
                continue
            ph, pid = ev.get("ph"), trace_key(ev.get("pid"))
            args = ev.get("args") if isinstance(ev.get("args"), dict) else {}
            role = reader.role(pid)
            if ph == "M":
                if ev.get("name") == "thread_name" and role in (PYTHON, HOST):
                    out.append({**ev, "pid": reader.host_pid(pid) if role == HOST else pid})
                continue
            if ph != "X":
                continue
            if role == HARDWARE:
                if str(ev.get("name", "")) in MARKER_TASKS:
                    continue
                stream = _int(trace_key(ev.get("tid")))
                if stream is None:
                    stream = _int(args.get("Physic Stream Id", args.get("Stream Id")))
                self.on_stream[(reader.device(pid), stream)].append(
                    (self.spans[id(ev)][0] or 0, index, ev, _int(args.get("connection_id"))))
            elif role == HOST:
                self.calls[(reader.host_pid(pid), trace_key(ev.get("tid")))].append(ev)
            elif role in COMMUNICATION:
                connection = _int(args.get("connection_id"))
                kind = _collective(str(ev.get("name", "")))
                if connection is not None and kind is not None:
                    match = GROUP_THREAD.match(reader.threads.get((pid, trace_key(ev.get("tid"))), ""))
                    self.slices.setdefault(connection, (kind, args, match.group(1) if match else ""))
            elif role == PYTHON and ev.get("cat") in ("cpu_op", "dequeue", "user_annotation"):
                out.append({**ev, "cat": "cpu_op" if ev.get("cat") != "user_annotation" else "user_annotation",
                            "ts": self.us(ev)})
        self.queues = sorted({(pid, trace_key(ev.get("tid"))) for ev in self.events
                              if isinstance(ev, dict) and ev.get("ph") == "X" and ev.get("cat") == "dequeue"
                              and reader.role(pid := trace_key(ev.get("pid"))) == PYTHON}, key=str)

    def operations(self) -> None:
        """A stream's tasks in time order; back-to-back tasks of one launch are one operation (an
        operator's subtasks, a collective's steps). A connection id no call in the trace has
        (msprof writes -1 for a task it could not tie to its launch) ties nothing: such a task is
        an operation of its own. A collective whose steps ran on several streams (HCCL's
        secondary streams) is one, on the stream of its first step."""
        slices, tasks = self.slices, self.tasks
        called = {c for mine in self.calls.values() for ev in mine
                  if isinstance(ev.get("args"), dict) and (c := _int(ev["args"].get("connection_id"))) is not None}
        for (device, stream), found in self.on_stream.items():
            found.sort(key=lambda item: (item[0], item[1]))
            previous = None
            for start, index, ev, connection in found:
                linked = connection if connection is not None and connection >= 0 and (
                    connection in called or connection in slices) else None
                if linked is not None and previous is not None and previous[2] == linked:
                    tasks[previous].append(ev)
                    continue
                previous = (device, stream, linked, index)
                tasks[previous] = [ev]
        first_stream: dict[int, tuple] = {}
        for key, group in tasks.items():
            if key[2] in slices:
                start = self.spans[id(group[0])][0] or 0
                if key[2] not in first_stream or start < first_stream[key[2]][0]:
                    first_stream[key[2]] = (start, key[:2])
        secondary = [key for key in tasks if key[2] in slices and key[:2] != first_stream[key[2]][1]]
        for key in secondary:
            del tasks[key]
        if secondary:
            self.notes.append(f"{len(secondary):,} step(s) of collectives on streams other than the one of their "
                              "first step (HCCL's secondary streams) are left out: each collective runs on its "
                              "first step's stream")

    def choose_calls(self) -> None:
        """The runtime calls that matter: those that launched a task or a collective, and those
        read by name (a record, a wait, a sync, a copy). Calls nest (`AscendCL@...` around
        `Node@launch` around `Runtime@...`): of nested ones, the outermost read by name, else
        the innermost. A record's or wait's call is named as such whatever its level."""
        spans = self.spans
        launched = {key[2] for key in self.tasks if key[2] is not None} | set(self.slices)
        marks: dict[int, str] = {}
        for key, group in self.tasks.items():
            kinds = _kinds(group)
            if key[2] is not None and kinds & RECORD_TASKS:
                marks[key[2]] = "aclrtRecordEvent"
            elif key[2] is not None and kinds & WAIT_TASKS:
                marks[key[2]] = "aclrtStreamWaitEvent"
        kept: list[_Call] = []
        for thread, mine in self.calls.items():
            open_calls: list[_Call] = []
            for ev in sorted(mine, key=lambda e: (spans[id(e)][0] or 0, -spans[id(e)][1])):
                start, dur = spans[id(ev)]
                args = ev.get("args") if isinstance(ev.get("args"), dict) else {}
                name, connection = _api(str(ev.get("name", ""))), _int(args.get("connection_id"))
                special = name in SPECIAL_CALLS or connection in marks
                if start is None or not (special or connection in launched):
                    continue
                call = _Call(thread, ev, marks.get(connection, name),
                             connection if connection in launched or special else None, start, start + dur, special)
                while open_calls and open_calls[-1].end < start:
                    open_calls.pop()
                outer = open_calls[-1] if open_calls and open_calls[-1].end >= call.end else None
                if outer is not None:
                    if outer.special:
                        if outer.connection not in launched and call.connection in launched:
                            outer.connection = call.connection  # (a copy's task, launched inside it)
                        continue
                    if call.special or outer.connection == call.connection or outer.connection not in launched:
                        outer.dropped = True
                open_calls.append(call)
                kept.append(call)
        kept = [call for call in kept if not call.dropped]
        _drain_into_queue(kept, self.queues, self.notes)
        for call in kept:
            self.out.append({"ph": "X", "cat": "runtime", "name": call.name, "pid": call.thread[0],
                             "tid": call.thread[1], "ts": self.us(call.event), "dur": call.event.get("dur"),
                             "args": {"correlation": call.connection} if call.connection is not None else {}})
            if call.connection is not None:
                self.calls_by_connection.setdefault(call.connection, call)

    def index_records(self) -> None:
        """Which stream each record was on and when its task ended; every record call in time
        order, of each event and of all (`bind`)."""
        spans = self.spans
        self.record_stream: dict[int, tuple[int, int]] = {}
        self.record_end: dict[int, int] = {}
        for (device, stream, connection, _), group in self.tasks.items():
            if connection is not None and stream is not None and _kinds(group) & RECORD_TASKS:
                self.record_stream[connection] = (device, stream)
                self.record_end[connection] = max((spans[id(t)][0] or 0) + spans[id(t)][1] for t in group)
        self.records = sorted((call for connection in self.record_stream
                               if (call := self.calls_by_connection.get(connection)) is not None
                               and call.name in ACL_RECORD_CALLS), key=lambda call: call.start)
        self.later_records: set[int] = set()
        """Records a wait made before them waited for (`_later_record`): flag events'."""
        self.by_event: dict[int, list[_Call]] = defaultdict(list)
        for call in self.records:
            if call.event_id is not None:
                self.by_event[call.event_id].append(call)
        self.starts = {id(found): [call.start for call in found] for found in (self.records, *self.by_event.values())}

    def _latest(self, found: list[_Call], at: int) -> int:
        """How many of `found` (in call order) were made at or before `at`."""
        return bisect.bisect_right(self.starts.get(id(found), ()), at)

    def bind(self, waiter: _Call, where: tuple, end: int, blocked: bool) -> tuple[_Call | None, str]:
        """The record a wait task waited for, and why that is a guess ("" when the trace says):
        the latest record of its event before its call, where the trace names events; else a
        record on another stream, by the device's timing; else, where none came before it, the
        later record its blocked task waited for (`_later_record`)."""
        if waiter.event_id is not None:
            same = self.by_event.get(waiter.event_id, [])
            n = self._latest(same, waiter.start)
            if n:
                return same[n - 1], ""
        records, record_end = self.records, self.record_end
        n = self._latest(records, waiter.start)
        others = [call for call in reversed(records[max(0, n - 64):n]) if self.record_stream[call.connection] != where]
        if not others:
            return self._later_record(waiter, where, end, blocked)
        why = "names no record of its event before it" if waiter.event_id is not None else "does not name the events"
        if blocked:  # (it waited: for the record that completed as it went on)
            ended = [call for call in others if record_end[call.connection] <= end + 1_000]
            if ended:
                bound = max(ended, key=lambda call: record_end[call.connection])
                return bound, (f"binds to the aclrtRecordEvent on another stream whose task ended last before the "
                               f"wait's task did (connection {bound.connection}): the trace {why}")
        own = [call for call in others if call.thread == waiter.thread]
        bound = (own or others)[0]
        return bound, (f"binds to the latest aclrtRecordEvent on another stream before it (connection "
                       f"{bound.connection}): the trace {why}")

    def _later_record(self, waiter: _Call, where: tuple, end: int, blocked: bool) -> tuple[_Call | None, str]:
        """A wait with no record before its call whose task blocked until a record made after
        its call completed: the event is a flag event (`aclrtCreateEventWithFlag`, whose wait
        waits for a record to come), and the wait is bound to that record (`later_records`): of
        its event's records (else, marked assumed, of the records on other streams) made after
        its call, the one whose task ended last by the time the wait's did. None where its task
        did not block: it found nothing to wait for."""
        if not blocked:
            return None, ""
        if waiter.event_id is not None:
            candidates, why = self.by_event.get(waiter.event_id, []), ""
        else:
            candidates, why = [call for call in self.records if self.record_stream[call.connection] != where], (
                "binds to the aclrtRecordEvent on another stream, made after it, whose task ended last before the "
                "wait's did: the trace does not name the events")
        first = bisect.bisect_right([call.start for call in candidates], waiter.start)
        ended = [call for call in candidates[first:first + 64] if self.record_end[call.connection] <= end + 1_000]
        if not ended:
            return None, ""
        bound = max(ended, key=lambda call: self.record_end[call.connection])
        self.later_records.add(bound.connection)
        return bound, why and f"{why} (connection {bound.connection})"

    def write_tasks(self) -> None:
        """Each operation: its record (`cuda_event`), its wait (`cuda_sync`, bound by `bind`), its
        copy (`gpu_memcpy`) and its work (a `kernel`, a collective's with the slice's facts)."""
        for (device, stream, connection, _), group in self.tasks.items():
            group.sort(key=lambda t: self.spans[id(t)][0] or 0)
            where = {"stream": stream, "device": device}
            recorded = [t for t in group if _kinds([t]) & RECORD_TASKS]
            waited = [t for t in group if _kinds([t]) & WAIT_TASKS]
            work = [t for t in group if not _kinds([t]) & (RECORD_TASKS | WAIT_TASKS)]
            if recorded:
                self._write_record(recorded, where, connection)
            if waited:
                self._write_wait(waited, where, connection)
            if work:
                self._write_work(work, where, connection)
        if self.counts["wait"]:
            self.notes.append(f"{self.counts['wait']:,} wait task(s) (EVENT_WAIT) have no aclrtStreamWaitEvent call "
                              "in the trace: nothing says which record they waited for, so the order they kept is lost")
        if self.counts["record"]:
            self.notes.append(f"{self.counts['record']:,} record task(s) (EVENT_RECORD) have no call in the trace "
                              "and are left out")

    def _write_record(self, tasks: list[dict], where: dict, connection: int | None) -> None:
        if connection is None or connection not in self.calls_by_connection:
            self.counts["record"] += 1
            return
        self.out.append({"ph": "X", "cat": "cuda_event", "name": "EVENT_RECORD", "pid": where["device"],
                         "tid": where["stream"], "ts": self.span(tasks)[0], "dur": 0,
                         "args": {**where, "correlation": connection}})

    def _write_wait(self, tasks: list[dict], where: dict, connection: int | None) -> None:
        waiter = self.calls_by_connection.get(connection) if connection is not None else None
        if waiter is None or waiter.name not in ACL_WAIT_CALLS:
            self.counts["wait"] += 1
            return
        ts, dur = self.span(tasks)
        end = max((self.spans[id(t)][0] or 0) + self.spans[id(t)][1] for t in tasks)
        bound, why = self.bind(waiter, (where["device"], where["stream"]), end, (dur or 0) > 1)
        sync = {**where, "correlation": connection, "cuda_sync_kind": "Stream Wait Event",
                "wait_on_cuda_event_record_corr_id": -1 if bound is None else bound.connection}
        if bound is not None and bound.connection in self.later_records:
            sync["streamproofFlag"] = True  # (a wait for a record made after it: `kineto.py` reads it)
        if bound is not None:
            sync["wait_on_stream"] = self.record_stream[bound.connection][1]
        if why:
            sync["assumed"] = f"aclrtStreamWaitEvent (connection {connection}) {why}"
        self.out.append({"ph": "X", "cat": "cuda_sync", "name": "Stream Wait Event", "pid": where["device"],
                         "tid": where["stream"], "ts": ts, "dur": 0, "args": sync})

    def _write_work(self, tasks: list[dict], where: dict, connection: int | None) -> None:
        kernel_args = {**where, "correlation": connection}
        copies = [t for t in tasks if _kinds([t]) & COPY_TASKS
                  or (isinstance(t.get("args"), dict) and "operation" in t["args"])]
        if copies:
            operation = next((str(t["args"]["operation"]).lower() for t in copies
                              if isinstance(t.get("args"), dict) and "operation" in t["args"]), "")
            ts, dur = self.span(copies)
            self.out.append({"ph": "X", "cat": "gpu_memcpy", "name": _copy_kind(operation), "pid": where["device"],
                             "tid": where["stream"], "ts": ts, "dur": dur, "args": kernel_args})
            tasks = [t for t in tasks if t not in copies]
            if not tasks:
                return
        name = str(tasks[0].get("name", ""))
        collective = self.slices.get(connection) if connection is not None else None
        if collective is not None:
            kind, facts, group_name = collective
            launch = self.calls_by_connection.get(connection)
            item = launch.event.get("args", {}).get("item_id") if launch is not None and \
                isinstance(launch.event.get("args"), dict) else None
            name = str(item) if item else name
            kernel_args.update({"Collective name": kind, "Process Group Name": group_name or "hccl",
                                "Group size": _int(facts.get("rank_size")), "In msg nelems": facts.get("count"),
                                "Out msg nelems": facts.get("count"), "dtype": facts.get("data_type")})
            kernel_args = {k: v for k, v in kernel_args.items() if v is not None}
        ts, dur = self.span(tasks)
        self.out.append({"ph": "X", "cat": "kernel", "name": name, "pid": where["device"], "tid": where["stream"],
                         "ts": ts, "dur": dur, "args": kernel_args})


def with_profiled_rank(data, path: str):
    """An Ascend trace read from `path`, with the rank its profiler folder names
    (`profiled_rank`) as a Kineto trace's `distributedInfo`; any other trace as it is."""
    # (the folder first: scanning the trace's events is the dearer look)
    if (rank := profiled_rank(path)) is None or not is_ascend(data):
        return data
    return {"traceEvents": data if isinstance(data, list) else data.get("traceEvents", []),
            "distributedInfo": {"rank": rank}}


def profiled_rank(path: str) -> int | None:
    """The rank of the trace at `path`, where the Ascend profiler wrote it: its output folder
    (`..._ascend_pt`, the trace's folder or the one above) holds `profiler_info_{N}.json`, whose
    `rank_id` is the rank (where it is -1, missing or unreadable, the N of the file's name)."""
    folder = os.path.dirname(os.path.abspath(path))
    for where in (folder, os.path.dirname(folder)):
        try:
            names = sorted(os.listdir(where))
        except OSError:
            continue
        for name in names:
            match = PROFILER_INFO.match(name)
            if match is None:
                continue
            try:
                info = json.loads(read_prefix(os.path.join(where, name), 1 << 20).decode("utf-8"))
            except (OSError, ValueError, RecursionError):
                info = None
            rank = _int(info.get("rank_id")) if isinstance(info, dict) else None
            return rank if rank is not None and rank >= 0 else int(match.group(1))
    return None
