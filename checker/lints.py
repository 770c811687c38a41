"""Warnings read off a lowered program: what it declares and never uses, waits that nothing
can satisfy, and calls that real runtimes may block on where the language says they return.

Pure functions of a `Program` (lowering adds the streams its statements name without running
on them); lowering keeps one warning per source line and code.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import replace

import networkx

from checker import hb
from checker.codes import Code
from checker.determinism import nondeterminism
from checker.diagnostics import Diagnostic, warning
from checker.witness import Step, StepKind
from checker.ir import CopyKind, Op, Program, Runtime, Statement, Stream, StreamMode, SyncKind, Thread


ORDER_LIMIT = 20_000
"""Statements up to which SP064 builds the program's order (about 1 s per 28,000 statements
and program variant, where loading alone takes about as long)."""


def program_warnings(program: Program, named_streams: set[int] | frozenset[int] = frozenset()) -> list[Diagnostic]:
    """Every warning of `program`. `named_streams`: streams some statement names without a
    task on them (an `alloc` from a stream's pool, a `record_stream`), which count as used."""
    found = unused_streams(program, named_streams)
    found += never_recorded(program)
    found += ranks_called_by_one_thread(program)
    found += sync_all_of_a_rank(program)
    found += never_notified(program)
    found += events_on_two_devices(program)
    found += streams_of_two_processes(program)
    found += buffers_of_two_processes(program)
    found += events_of_two_processes(program)
    found += legacy_streams_of_one_process(program)
    found += frees_waiting_through_cuda_free(program)
    found += uses_waiting_through_a_pageable_copy(program)
    found += comms_in_opposite_orders(program)
    found += rank_called_by_unordered_threads(program)
    found += flag_events_on_cuda(program)
    found += comms_across_runtimes(program)
    return found


def comms_across_runtimes(program: Program) -> list[Diagnostic]:
    """SP074: a comm with members on a CUDA device and on a CANN device. NCCL's communicators
    hold CUDA devices and HCCL's Ascend ones, so no library creates this comm; the spec is
    checked as written."""
    found = []
    for comm in program.comms:
        devices = [program.devices[program.streams[m].device] for m in comm.members]
        runtimes = {device.runtime for device in devices}
        if len(runtimes) < 2:
            continue
        cuda = next(d for d in devices if d.runtime is Runtime.CUDA)
        cann = next(d for d in devices if d.runtime is not Runtime.CUDA)
        found.append(warning(
            Code.SP074, f"comm `{comm.name}` has members on a CUDA device (`{cuda.name}`) and on a CANN device "
                        f"(`{cann.name}`)",
            comm.span, "members of both runtimes",
            help="NCCL forms communicators of CUDA devices and HCCL of Ascend devices, and neither of both: declare "
                 "every member's device with the same runtime (a device without `runtime` is `runtime cann`)"))
    return found


def _order_without(program: Program, rewritten: dict[int, Statement]) -> hb.HappensBefore | None:
    """The happens-before order of `program` with some statements rewritten (a wait the
    warning asks about taken out); None where that order depends on the interleaving, or is
    too wide to build."""
    without = replace(program, statements=tuple(rewritten.get(s.index, s) for s in program.statements))
    if nondeterminism(without) is not None:
        return None
    try:
        return hb.build(without)
    except hb.TooWide:
        return None


def frees_waiting_through_cuda_free(program: Program) -> list[Diagnostic]:
    """SP064: a host `free` of device memory whose earlier use in the same lifetime (a task
    the same thread enqueued) is ordered before it only by the device synchronization that
    `cudaFree` implies. CUDA says cudaFree "may" synchronize (and it does not for
    stream-ordered memory); code that relied on it broke (kokkos/kokkos#9307). The spec is
    still checked with the synchronization, as drivers have run it: this is a warning. Read
    off the happens-before order of the program (each variant: lowering warns once per line)
    without those synchronizations, so only for programs whose order does not depend on the
    interleaving. A free of pinned host memory (`cudaFreeHost`, checked as synchronizing every
    device) is asked about too: CUDA's reference documents no synchronization for it at all,
    and a driver was seen freeing while a stream still wrote the memory (openxla/xla#47040)."""
    frees: list[tuple[Statement, Statement, list[Statement]]] = []  # (its sync, the free, earlier uses)
    for thread in program.threads:
        uses: dict[int, list[Statement]] = {}  # memory -> the thread's tasks that use it
        statements = [program.statements[i] for i in thread.statements]
        for s, after in zip(statements, statements[1:] + [None]):
            if s.stream is not None:
                for access in s.accesses:
                    uses.setdefault(access.memory, []).append(s)
            elif s.op is Op.FREE:  # (a lifetime ends: later uses are the next one's)
                uses.pop(s.memory, None)
            elif s.op is Op.SYNC and after is not None and after.op is Op.FREE and after.span == s.span:
                waited = [t for t in uses.get(after.memory, ()) if t.stream in program.synced_streams(s)]
                if waited:  # (the uses that synchronization waits for)
                    frees.append((s, after, waited))
    if not frees or len(program.statements) > ORDER_LIMIT:
        return []
    implied = {sync.index for sync, _, _ in frees}
    order = _order_without(program, {i: replace(program.statements[i], op=Op.HOST, sync=None, target=None,
                                                streams=()) for i in implied})
    if order is None:
        return []
    found = []
    for _, free, tasks in frees:
        issued = Step(StepKind.ISSUE, free.index)
        if not order.happened(issued):
            continue
        task = next((t for t in reversed(tasks) if order.happened(Step(StepKind.END, t.index))
                     and not order.before(Step(StepKind.END, t.index), issued)), None)
        if task is None:
            continue
        # (a graph's work runs on the graph's own streams: the spec names its launch stream)
        issuer = task if task.launch is None else program.statements[task.launch]
        stream = program.streams[issuer.stream].name
        secondary = ((task.span, "may still be running"),)
        if task.launch is not None:
            secondary += ((issuer.span, "the graph launch that runs it"),)
        if program.memories[free.memory].device is None:  # (pinned host memory)
            call = "cudaFreeHost"
            help = (f"CUDA documents no synchronization for cudaFreeHost: wait for the work first "
                    f"(`sync {stream}`)")
        elif _partner_issued_later(program, task, free):
            # (a sync would wait for a collective whose peer this thread issues only after it: a hang)
            call = "cudaFree"
            help = (f"CUDA says cudaFree may synchronize the device, not that it does: free on its stream "
                    f"(`{stream}: {program.describe(free)}`), which waits for the collective without blocking "
                    f"the thread; a `sync {stream}` here would wait for a collective whose peer this thread "
                    f"issues only later")
        else:
            call = "cudaFree"
            help = (f"CUDA says cudaFree may synchronize the device, not that it does: wait for the work "
                    f"first (`sync {stream}`), or free on its stream (`{stream}: {program.describe(free)}`); "
                    f"memory released by a call that synchronizes nothing (cuMemUnmap) is freed with "
                    f"`{program.describe(free)} nosync`")
        found.append(warning(
            Code.SP064, f"`{program.describe(free)}` waits for `{program.describe(task)}` only through "
            f"{call}'s implicit synchronization", free.span, "the free",
            secondary=secondary, help=help))
    return found


def _partner_issued_later(program: Program, task: Statement, free: Statement) -> bool:
    """`task` is a collective member whose group has a member the free's thread issues after
    the free: a host wait for `task` there never returns (one thread driving two ranks)."""
    if task.group is None:
        return False
    return any(program.statements[m].thread == free.thread and m > free.index
               for m in program.groups[task.group].members)


def uses_waiting_through_a_pageable_copy(program: Program) -> list[Diagnostic]:
    """SP066: under `runtime cuda`, a use of pageable host memory that a `copy` from the device
    (`cudaMemcpyAsync`) wrote, by the same thread later, ordered after the copy only because the
    call blocks until the copy is done. CUDA's "API synchronization behavior" says such a call
    "might be synchronous with respect to host", and promises the wait only for `cudaMemcpy`;
    drivers do block (the bytes reach pageable memory through a staging buffer), so the spec is
    checked that way and this is a warning (onnxruntime#26512 asks where the promise is).
    Read off the happens-before order of the program with those copies returning at once, so
    only for programs whose order does not depend on the interleaving."""
    copies = {s.index: s for s in program.statements
              if s.op is Op.COPY and s.copy is CopyKind.D2H and s.blocking and s.stream is not None
              and not s.form.startswith(("memcpy", "item"))
              and program.devices[program.streams[s.stream].device].runtime is Runtime.CUDA}
    if not copies or len(program.statements) > ORDER_LIMIT:
        return []
    uses = {copy.index: found for copy in copies.values() if (found := _later_uses(program, copy, copies))}
    if not uses:  # (the order is built only for a use that a sync of the copy's stream does not precede)
        return []
    order = _order_without(program, {i: replace(copy, blocking=False) for i, copy in copies.items()})
    if order is None:
        return []
    found = []
    for k, later in uses.items():
        copy = copies[k]
        use, task = next(((u, t) for u, t in later if order.happened(_begins(u)) and order.happened(
            Step(StepKind.END, t.index)) and not order.before(Step(StepKind.END, t.index), _begins(u))), (None, None))
        if use is None:
            continue
        stream = program.streams[copy.stream].name
        if task is copy:
            label = "overwrites what the copy reads" if _overwrites_source(copy, use) else "uses what the copy wrote"
            secondary = ((copy.span, "a copy from the device to pageable host memory"),)
            message = f"`{program.describe(use)}` waits for `{program.describe(copy)}` only because the copy"
        else:  # (work the copy's stream ran before it: the copy's return is the only wait for it too)
            label = f"touches what `{program.describe(task)}` uses"
            secondary = ((task.span, "enqueued before the copy on its stream"),
                         (copy.span, "a copy from the device to pageable host memory"))
            message = (f"`{program.describe(use)}` waits for `{program.describe(task)}` only because "
                       f"`{program.describe(copy)}`, behind it on `{stream}`,")
        found.append(warning(
            Code.SP066, f"{message} to pageable memory blocks the thread", use.span, label, secondary=secondary,
            help=f"CUDA says such a cudaMemcpyAsync \"might be synchronous\", not that it is: wait for it "
                 + (f"(`sync {stream}`) before the use" if use.stream is None else
                    f"(`record E` on `{stream}` after the copy, `wait E` on "
                    f"`{program.streams[use.stream].name}` before the use)")
                 + ", or copy into pinned memory and sync"))
    return found


MAX_USES = 64
"""Later uses of one copy's bytes that SP066 looks at."""


def _begins(statement: Statement) -> Step:
    """The step at which a statement's accesses begin."""
    return Step(StepKind.ISSUE if statement.stream is None else StepKind.START, statement.index)


def _overwrites_source(copy: Statement, statement: Statement) -> bool:
    """`statement` writes bytes that `copy` reads."""
    source = next((x for x in copy.accesses if not x.write), None)
    return source is not None and any(x.write and x.conflicts(source) for x in statement.accesses)


def _later_uses(program: Program, copy: Statement, copies: dict[int, Statement]) -> list[tuple[Statement, Statement]]:
    """The later statements of the copy's thread that touch the bytes it wrote or overwrite the
    bytes it reads, each with the copy, and the later host statements that conflict with a task
    the thread enqueued on the copy's stream before it (its source's writer: the copy's return
    waits for that too), each with that task; up to a sync of its stream, its device or every device (the uses after it
    wait for the copy that way) or another such copy over those bytes (the uses after it read
    that one's)."""
    written = next(x for x in copy.accesses if x.write)
    statements = program.threads[copy.thread].statements
    at = bisect_right(statements, copy.index)
    before = [program.statements[i] for i in statements[max(0, at - 1 - MAX_USES):at - 1]]
    before = [t for t in before if t.stream == copy.stream and t.accesses]
    found: list[tuple[Statement, Statement]] = []
    for i in statements[at:]:
        s = program.statements[i]
        if (s.op is Op.SYNC and copy.stream in program.synced_streams(s)) or len(found) == MAX_USES:
            break
        if any(written.conflicts(x) for x in s.accesses) or _overwrites_source(copy, s) \
                or (s.op is Op.FREE and written.memory in s.lifetime_memories):
            if i in copies:
                break
            found.append((s, copy))
        elif s.stream is None and s.accesses:
            task = next((t for t in reversed(before) if any(x.conflicts(y) for x in t.accesses for y in s.accesses)),
                        None)
            if task is not None:
                found.append((s, task))
    return found


def legacy_streams_of_one_process(program: Program) -> list[Diagnostic]:
    """SP060: two legacy streams on one device, in one process. The contract allows it (rule
    11 then orders each with the blocking streams, not with each other); CUDA has one legacy
    stream per device and context, so two `process` threads may each have their own."""
    first: dict[tuple, Stream] = {}  # (device, process) -> its first legacy stream
    warned: set[tuple] = set()  # (one warning per device and process)
    found = []
    for stream in program.streams:
        if stream.mode is not StreamMode.LEGACY:
            continue
        key = (stream.device, stream.context)
        if key not in first:
            first[key] = stream
            continue
        if key in warned:
            continue
        warned.add(key)
        other = first[key]
        found.append(warning(
            Code.SP060, f"device `{program.devices[stream.device].name}` has two legacy streams", stream.span,
            "a second legacy stream",
            secondary=((other.span, "the first legacy stream"),) if other.span != stream.span else (),
            help="CUDA has one legacy default stream per device (in each process): declare one. It is "
                 "checked as written: each legacy stream is ordered with the blocking streams of its "
                 "device (and process), and the legacy streams are not ordered with each other"))
    return found


def _two_processes(program: Program, first: dict, key, statement: Statement) -> tuple[Statement, Thread, Thread] | None:
    """Notes the first statement that uses `key`; where it and `statement` are threads of two
    processes (one of them a `process` thread), that statement and the two threads."""
    earlier = first.setdefault(key, statement)
    before, now = program.threads[earlier.thread], program.threads[statement.thread]
    return None if before is now or not (before.process or now.process) else (earlier, before, now)


def streams_of_two_processes(program: Program) -> list[Diagnostic]:
    """SP062: a stream that a `process` thread and another thread both enqueue work on. A
    stream belongs to the process that created it, so no runtime shares one between
    processes; the spec is checked as written (the work is ordered on the one stream)."""
    first: dict[int, Statement] = {}  # stream -> the first task enqueued on it
    found = []
    warned: set[int] = set()
    for s in program.statements:
        # (a `sync S` or `query S` uses the stream too: a handle only its own process can pass)
        stream = s.target if s.op is Op.SYNC and s.sync in (SyncKind.STREAM, SyncKind.STREAMS) else s.stream
        if stream is None or stream in warned:
            continue
        met = _two_processes(program, first, stream, s)
        if met is None:
            continue
        earlier, before, now = met
        warned.add(stream)
        process, other = (before, now) if before.process else (now, before)
        synced = s.stream is None
        found.append(warning(
            Code.SP062, f"stream `{program.streams[stream].name}` is used by process `{process.name}` and by "
                        f"{'process' if other.process else 'thread'} `{other.name}`", s.span,
            "a sync of it by another process" if synced else "another thread's work on this stream",
            secondary=((earlier.span, "first used here"),),
            help=("a stream belongs to one process, and another process cannot sync it: have the stream's "
                  "own process sync it before it signals (`notify N`), or record an event shared through an "
                  "IPC handle after the work and `sync E` here" if synced else
                  "a stream belongs to one process: give each process streams of its own")))
    # A call off its member stream (`Statement.member`) is a use of its rank by its thread's process.
    ranks: dict[tuple[int, int], Statement] = {}  # (comm, member stream) -> its first call
    warned_ranks: set[tuple[int, int]] = set()
    for s in program.statements:
        key = (s.comm, s.rank_stream)
        if s.comm is None or s.stream is None or key in warned_ranks:
            continue
        met = _two_processes(program, ranks, key, s)
        if met is None or (met[0].member is None and s.member is None):  # (one stream: warned above)
            continue
        earlier, before, now = met
        warned_ranks.add(key)
        process, other = (before, now) if before.process else (now, before)
        found.append(warning(
            Code.SP062, f"the rank of `{program.streams[s.rank_stream].name}` in comm `{program.comms[s.comm].name}` "
                        f"is called by process `{process.name}` and by {'process' if other.process else 'thread'} "
                        f"`{other.name}`", s.span, "another thread's call for this rank",
            secondary=((earlier.span, "first called here"),),
            help="a communicator's rank belongs to one process: call it from that process's threads"))
    return found


def buffers_of_two_processes(program: Program) -> list[Diagnostic]:
    """SP063: a declared buffer that two processes (a `process` thread and any other thread)
    both access. Processes have address spaces of their own, so they share memory only on
    purpose (CUDA IPC handles, shared host memory); more often each rank meant a buffer of its
    own. Checked as written: one memory, whose accesses may race. (Caching-allocator tensors
    are per process already.)"""
    first: dict[int, Statement] = {}  # memory -> the first statement that uses it
    found = []
    warned: set[str] = set()  # (declared buffers: one warning for every element of an array)
    for s in program.statements:
        # (an alloc or free uses the memory it names too: one process freeing what another uses)
        uses = [(access.memory, access.span) for access in s.accesses]
        if s.op in (Op.ALLOC, Op.FREE):
            uses += [(memory, s.span) for memory in s.lifetime_memories]
        for index, span in uses:
            if index < 0:
                continue  # (a tensor left unplaced by an error the allocator reported)
            memory = program.memories[index]
            if memory.owners or memory.buffer in warned or memory.ipc:
                continue
            met = _two_processes(program, first, memory.index, s)
            if met is None:
                continue
            earlier, before, now = met
            warned.add(memory.buffer)
            found.append(warning(
                Code.SP063, f"buffer `{memory.name}` is used by {'process' if before.process else 'thread'} "
                            f"`{before.name}` and by {'process' if now.process else 'thread'} `{now.name}`",
                span, "another process's use",
                secondary=((earlier.span, "first used here"),),
                help="each process has memory of its own: give each "
                     + _own_per_process(before, now, memory.buffer, memory.name == memory.buffer, "buffer")
                     + ", unless the memory is shared on purpose (CUDA IPC, CANN's `aclrtIpcMemGetExportKey`, or "
                       "shared host memory): then declare it `ipc`; it is checked "
                       "as written, as one memory"))
    return found


def _own_per_process(before: Thread, now: Thread, declared: str, whole: bool, kind: str) -> str:
    """What each process should have of a declared `kind` two of them share: an element per
    rank, named by the thread array's index, where both are ranks of one array; one declared
    per process otherwise (there is no index to name)."""
    arrays = {thread.name.split("[")[0] for thread in (before, now)}
    if len(arrays) != 1 or "[" not in before.name or "[" not in now.name:
        return f"process its own {kind}, one declared per process"
    index = arrays.pop()
    declaration = f"{kind} {declared}[N]" + (" ..." if kind == "buffer" else "")
    return (f"rank its own {kind} (`{declaration}`, `{declared}[{index}]`)" if whole
            else f"rank its own element (`{declared}[{index}]`)")


def events_of_two_processes(program: Program) -> list[Diagnostic]:
    """SP075: an event that a `process` thread and another thread (another process, or a
    thread of the main one) both record, wait on, reset or sync. An event belongs to the
    process that created it; another process reaches it only through an interprocess handle
    (`cudaIpcGetEventHandle`), and more often each rank meant an event of its own. Checked as
    written: one event, whose latest record a wait of either process binds to."""
    first: dict[int, Statement] = {}  # event -> the first statement that uses it
    found = []
    warned: set[str] = set()  # (one warning for every element of an array)
    for s in program.statements:
        event = s.event if s.event is not None else (s.target if s.sync is SyncKind.EVENT else None)
        if event is None or "#" in program.events[event].name or program.events[event].ipc:
            continue  # (the lowering's own, `wait_stream#1`; or one declared shared on purpose)
        declared = program.events[event].name.split("[")[0]
        if declared in warned:
            continue
        met = _two_processes(program, first, event, s)
        if met is None:
            continue
        earlier, before, now = met
        warned.add(declared)
        name = program.events[event].name
        found.append(warning(
            Code.SP075, f"event `{name}` is used by {'process' if before.process else 'thread'} `{before.name}` "
                        f"and by {'process' if now.process else 'thread'} `{now.name}`",
            s.span, "another process's use",
            secondary=((earlier.span, "first used here"),),
            help=_shared_event_help(program, event, (s, earlier),
                                    _own_per_process(before, now, declared, name == declared, "event"))))
    return found


def _shared_event_help(program: Program, event: int, uses: tuple[Statement, ...], own: str) -> str:
    """How an event is shared between processes in the runtime of the streams that use it,
    and what one shared event means as written. CANN shares only snapshot events created
    with `ACL_EVENT_IPC` (`aclrtIpcGetEventHandle`), so a flag event cannot be."""
    devices = {program.streams[u.stream].device for u in uses if u.stream is not None}
    cuda = any(program.devices[d].runtime is Runtime.CUDA for d in devices) or not devices
    flag = program.events[event].flag
    if flag and not cuda:
        return (f"an event belongs to the process that created it, and CANN shares only a snapshot event "
                f"created with `ACL_EVENT_IPC` (`aclrtIpcGetEventHandle`): give each {own}, and hand over with "
                "an interprocess notify (`aclrtNotifyGetExportKey`); it is checked as written, as one flag that "
                "a record of either process sets")
    shared = ("a flag in memory both processes map" if flag else "`cudaIpcGetEventHandle`" if cuda else
              "`aclrtIpcGetEventHandle`, for an event created with `ACL_EVENT_IPC`")
    meaning = ("one flag that a record of either process sets" if flag else
               "one event whose latest record a wait of either process binds to")
    return (f"an event belongs to the process that created it: give each {own}, unless it is shared on purpose "
            f"({shared}): then declare it `ipc`; it is checked as written, as {meaning}")


def unused_streams(program: Program, named_streams: set[int] | frozenset[int]) -> list[Diagnostic]:
    """SP051: a stream (or a whole stream array) that no statement uses."""
    if not program.threads:
        return []
    used = {s.stream for s in program.statements if s.stream is not None}
    used |= {s.target for s in program.statements if s.sync in (SyncKind.STREAM, SyncKind.STREAMS)}
    used |= named_streams
    used_declarations = {program.streams[i].span for i in used if i is not None}
    found = []
    for stream in program.streams:
        if stream.index in used:
            continue
        if stream.name.endswith("]") and stream.span in used_declarations:
            continue  # (another element of its array is used)
        name = stream.name.split("[")[0] if stream.name.endswith("]") else stream.name
        what = "stream array" if name != stream.name else "stream"
        found.append(warning(Code.SP051, f"{what} `{name}` is never used", stream.span, "declared here"))
    return found


def never_recorded(program: Program) -> list[Diagnostic]:
    """SP050: a wait for an event that no statement records."""
    recorded = {s.event for s in program.statements if s.op is Op.RECORD}

    def label(wait: Statement) -> str:
        if program.events[wait.event].flag:
            return "this wait blocks forever"
        if program.streams[wait.stream].mode is StreamMode.LEGACY:
            # (on CUDA's legacy stream the wait is still a legacy-stream call, which orders the
            # device's blocking streams around it)
            return "this wait waits for no record (the legacy stream still orders the blocking streams around it)"
        return "this wait does nothing"

    return [warning(Code.SP050, f"event `{program.events[s.event].name}` is waited on but never recorded", s.span,
                    label(s)) for s in program.statements if s.op is Op.WAIT and s.event not in recorded]


def flag_events_on_cuda(program: Program) -> list[Diagnostic]:
    """SP072: a flag event recorded, waited on or reset on a stream of a `runtime cuda`
    device. A CUDA event cannot be one: `cudaStreamWaitEvent` binds to the latest record
    enqueued before it. What CUDA has that waits for a later set is a flag in memory
    (`cuStreamWriteValue32`, `cuStreamWaitValue32`, or a kernel spinning on it), so the spec
    should mean that. One warning per event, at its first such statement."""
    found = []
    warned: set[int] = set()
    for s in program.statements:
        if (s.event is None or s.stream is None or s.event in warned or not program.events[s.event].flag
                or s.op not in (Op.RECORD, Op.WAIT, Op.RESET)
                or program.devices[program.streams[s.stream].device].runtime is not Runtime.CUDA):
            continue
        warned.add(s.event)
        event = program.events[s.event]
        found.append(warning(
            Code.SP072, f"`{event.name}` is a flag event, which no CUDA event is: under CUDA it stands for a "
                        f"flag in memory", s.span,
            "on a `runtime cuda` device", secondary=((event.span, "declared `flag`"),),
            help=(f"if the program sets and waits for a flag in memory (`cuStreamWriteValue32` to record, "
                  f"`cuStreamWaitValue32` or a kernel spinning on it to wait, a write of the cleared value "
                  f"to reset), the spec says so and is checked as written; if it uses a cudaEvent_t, whose "
                  f"wait binds to the latest record enqueued before it, declare `event "
                  f"{event.name.split('[')[0]}` instead (then a wait enqueued before its record waits for "
                  f"nothing, so hand the record over first)")))
    return found


def events_on_two_devices(program: Program) -> list[Diagnostic]:
    """SP061: one event recorded on streams of two CUDA devices. `cudaEventRecord` needs the
    event and the stream on the same device (an event belongs to the device current when it
    was created), so one of the records fails at run time; the spec is checked as written.
    Records by two `process` threads (or one and the main process) are not compared: each
    process opens an interprocess event in its own context (`cudaIpcOpenEventHandle`)."""
    first: dict[tuple, dict[int, Statement]] = {}  # (event, process) -> device -> its first record there
    found = []
    for s in program.statements:
        if s.op is not Op.RECORD or program.devices[s.device].runtime is not Runtime.CUDA \
                or "#" in program.events[s.event].name:  # (the lowering's own: `wait_stream#1`)
            continue
        process = s.thread if s.thread is not None and program.threads[s.thread].process else None
        devices = first.setdefault((s.event, process), {})
        if s.device in devices:
            continue
        devices[s.device] = s
        if len(devices) == 2:
            earlier = next(iter(devices.values()))
            event = program.events[s.event].name
            found.append(warning(
                Code.SP061, f"event `{event}` is recorded on streams of two CUDA devices, "
                            f"`{program.devices[earlier.device].name}` and `{program.devices[s.device].name}`",
                s.span, "recorded on a second device",
                secondary=((earlier.span, "recorded on the first device here"),),
                help="CUDA records an event only on a stream of the device it was created on: declare an "
                     "event per device"))
    return found


def never_notified(program: Program) -> list[Diagnostic]:
    """SP052: an await of a notify that no statement notifies."""
    notified = {s.notify for s in program.statements if s.op is Op.NOTIFY}
    return [warning(Code.SP052, f"notify `{program.notifies[s.notify].name}` is awaited but never notified",
                    s.span, "this await blocks forever")
            for s in program.statements if s.op is Op.AWAIT and s.notify not in notified]


def ranks_called_by_one_thread(program: Program) -> list[Diagnostic]:
    """SP054: one thread calls collectives (or sends, recvs) of two members of a comm
    outside a `group`. Each call here returns at once, as the language says; NCCL and HCCL
    may block a call until every rank has made it, so such a program can hang there."""
    found = []
    first: dict[tuple[int, int], int] = {}  # (thread, comm) -> the member stream it called first
    for s in program.statements:
        if s.group is None or s.batch is not None or s.stream is None:
            continue
        key = (s.thread, s.comm)
        member = first.setdefault(key, s.rank_stream)
        if member != s.rank_stream and member >= 0:
            first[key] = -1  # once per thread and comm
            comm = program.comms[key[1]].name
            found.append(warning(
                Code.SP054, f"thread `{program.threads[s.thread].name}` calls comm `{comm}` for two of its "
                f"ranks (`{program.streams[member].name}`, `{program.streams[s.rank_stream].name}`) outside a `group`",
                s.span, "a second rank's call",
                help="NCCL and HCCL may block such a call until every rank has called (one thread driving "
                     "several ranks then hangs); streamproof takes each call as returning at once. Put the "
                     "calls of one position in `group { ... }` (ncclGroupStart/End)"))
    return found


OPPOSITE_ORDER_THREADS = 64
"""Threads (those that call two comms or more) up to which SP069 compares every pair."""


def comms_in_opposite_orders(program: Program) -> list[Diagnostic]:
    """SP069: two threads, each driving a rank of comms `A` and `B`, call them in opposite
    orders, on streams of their own. The language lets the two comms' kernels run side by
    side, so the spec is clean; NCCL does not promise that ("Using multiple NCCL
    communicators concurrently": NCCL kernels are blocking, and operations should be
    submitted in the same order across ranks), and HCCL asks every device to issue the
    operations of all its comms in one order. (Calls ordered on both ranks, on one stream or
    by events or syncs, make the crossed wait a deadlock the check reports, SP201. A `group`
    launches its comms one after another, in the order written, so it counts as that order.)"""
    if len(program.comms) < 2:
        return []
    calls: dict[int, dict[int, Statement]] = {}  # thread -> group -> its call there, in program order
    for s in program.statements:
        if s.comm is not None and s.stream is not None and s.group is not None:
            calls.setdefault(s.thread, {}).setdefault(s.group, s)
    threads = [t for t, made in calls.items() if len({s.comm for s in made.values()}) > 1][:OPPOSITE_ORDER_THREADS]
    found = []
    warned: set[frozenset[int]] = set()
    orders: list[hb.HappensBefore | None] = []  # (built once, where a crossing is found)

    def ordered(first: Statement, then: Statement) -> bool:
        """Whether `then` starts only after `first` ended in every execution, or never starts
        (a deterministic program's order): the crossing is then the check's own deadlock."""
        if not orders:
            orders.append(_order_without(program, {}) if len(program.statements) <= ORDER_LIMIT else None)
        order = orders[0]
        if order is None:
            return False
        start = Step(StepKind.START, then.index)
        return not order.happened(start) or (order.happened(Step(StepKind.END, first.index))
                                             and order.before(Step(StepKind.END, first.index), start))

    for k, first in enumerate(threads):
        for second in threads[k + 1:]:
            latest: dict[int, tuple[Statement, Statement]] = {}  # comm -> its calls here whose second comes last
            for group, one in calls[first].items():
                other = calls[second].get(group)
                if other is None:
                    continue
                for comm, (before, crossed) in latest.items():
                    pair = frozenset((comm, one.comm))
                    if (comm != one.comm and crossed.index > other.index and pair not in warned
                            and not (before.stream == one.stream and crossed.stream == other.stream)
                            and not (ordered(before, one) and ordered(other, crossed))):
                        warned.add(pair)
                        found.append(_opposite_orders(program, before, one, other, crossed))
                kept = latest.get(one.comm)
                if kept is None or kept[1].index < other.index:
                    latest[one.comm] = (one, other)
    if not found:
        cycle = _comm_cycle(program, calls, threads, ordered)
        if cycle is not None:
            found.append(cycle)
    return found


def _comm_cycle(program: Program, calls: dict[int, dict[int, Statement]], threads: list[int],
                ordered) -> Diagnostic | None:
    """SP069 over three comms or more: each thread calls one comm before the next, and the
    orders close a cycle (r0 calls A before C, r2 C before B, r1 B before A), so no order of
    the comms is kept by every rank, though no two threads call the same two comms crossed.
    Not where every step of the cycle is ordered on its rank (the check's own deadlock)."""
    graph = networkx.DiGraph()
    for thread in threads:
        made = list(calls[thread].values())
        for before, after in zip(made, made[1:]):
            if before.comm != after.comm:
                graph.add_edge(before.group, after.group, calls=(before, after))
    try:
        edges = networkx.find_cycle(graph)
    except networkx.NetworkXNoCycle:
        return None
    steps = [graph.edges[u, v]["calls"] for u, v in edges[:2 * OPPOSITE_ORDER_THREADS]]
    if len(steps) < 3 or all(before.stream == after.stream or ordered(before, after) for before, after in steps):
        return None
    name = lambda s: f"`{program.comms[s.comm].name}`"  # noqa: E731
    said = ", ".join(f"`{program.threads[before.thread].name}` calls {name(before)} before {name(after)} "
                     f"(line {after.span.line})" for before, after in steps)
    return warning(
        Code.SP069, f"comms {', '.join(name(before) for before, _ in steps)} are called in a cycle of orders: "
        f"{said}", steps[0][1].span, f"{name(steps[0][1])} after {name(steps[0][0])}",
        help="NCCL does not promise that communicators make progress at once (each rank's kernel of one can "
             "hold the GPU while it waits for a peer that waits on the next), and HCCL wants every device to "
             "issue the calls of all its comms in one order; streamproof lets them run side by side. Call the "
             "comms in one global order on every rank",
        secondary=tuple((after.span, f"{name(after)} after {name(before)}") for before, after in steps[1:]))


RELAY_THREADS = 200
"""Threads up to which SP071 follows hand-offs through threads that call no comm (pairs of
threads are compared: beyond this, only the callers' direct links count)."""


def rank_called_by_unordered_threads(program: Program) -> list[Diagnostic]:
    """SP071: two threads call one comm for the same rank, and nothing the threads do can order
    their calls (they share no notify, and neither waits on the host for an event, a stream or
    a device the other's work is on). Which calls meet then depends on the interleaving, and
    the check explores every one; NCCL forbids the program outright ("Thread Safety": "it is
    not allowed to issue NCCL operations to a single communicator in parallel with multiple
    threads"), and HCCL wants a rank's operators issued one by one. Threads that hand over
    through a notify or a host wait are not flagged: they may well be ordered."""
    callers: dict[tuple[int, int], dict[int, Statement]] = {}  # (comm, rank) -> thread -> its first call
    on_device: dict[int, dict[int, Statement]] = {}  # CANN device -> thread -> its first call of any comm there
    sets: dict[int, set[int]] = {}      # thread -> notifies it (or its work) sets
    awaits: dict[int, set[int]] = {}    # thread -> notifies it awaits on the host
    touches: dict[int, set[tuple]] = {}  # thread -> events it records, streams and devices its work is on
    waits: dict[int, set[tuple]] = {}   # thread -> events, streams and devices it waits for on the host
    for s in program.statements:
        thread = s.thread
        if s.comm is not None and s.stream is not None and s.group is not None:
            callers.setdefault((s.comm, s.rank_stream), {}).setdefault(thread, s)
            device = program.streams[s.rank_stream].device
            if program.devices[device].runtime is Runtime.CANN:
                on_device.setdefault(device, {}).setdefault(thread, s)
        if s.op is Op.NOTIFY and s.notify is not None:
            sets.setdefault(thread, set()).add(s.notify)
        elif s.op is Op.AWAIT and s.notify is not None and s.stream is None:
            awaits.setdefault(thread, set()).add(s.notify)
        if s.stream is not None:
            mine = touches.setdefault(thread, set())
            mine.update((("stream", s.stream), ("device", program.streams[s.stream].device)))
            if s.op is Op.RECORD and s.event is not None:
                mine.add(("event", s.event))
        elif s.op is Op.SYNC or s.blocking:
            waited = waits.setdefault(thread, set())
            if s.sync is SyncKind.EVENT and s.target is not None:
                waited.add(("event", s.target))
            elif s.sync is SyncKind.ALL:
                waited.add(("all",))
            elif s.sync is SyncKind.DEVICE and s.target is not None:
                waited.add(("device", s.target))
            waited.update(("stream", t) for t in s.streams)

    def linked(a: int, b: int) -> bool:
        if awaits.get(a, set()) & sets.get(b, set()) or awaits.get(b, set()) & sets.get(a, set()):
            return True
        return any(("all",) in waits.get(x, ()) or waits.get(x, set()) & touches.get(y, set())
                   for x, y in ((a, b), (b, a)))

    # (linked through other threads too: a hand-off through a relay thread orders the two)
    links = networkx.Graph()
    every = list(dict.fromkeys(s.thread for s in program.statements))
    links.add_nodes_from(every)
    if any(len(threads) > 1 for threads in (*callers.values(), *on_device.values())):
        among = every if len(every) <= RELAY_THREADS else list({t for ts in (*callers.values(), *on_device.values())
                                                                for t in ts})
        links.add_edges_from((x, y) for i, x in enumerate(among) for y in among[i + 1:] if linked(x, y))
    component = {t: k for k, part in enumerate(networkx.connected_components(links)) for t in part}
    found = []

    def unordered(threads: dict[int, Statement], apart=lambda first, second: True):
        """The first calls of two threads that nothing links (and that `apart` tells apart),
        and the threads' names."""
        pairs = [(x, y) for i, x in enumerate(threads) for y in list(threads)[i + 1:]
                 if component[x] != component[y] and apart(threads[x], threads[y])]
        if not pairs:
            return None
        first, second = (threads[t] for t in pairs[0])
        return first, second, [program.threads[t].name for t in pairs[0]]

    def warn(first: Statement, second: Statement, names: list[str], message: str, help: str) -> None:
        found.append(warning(Code.SP071, message, second.span, f"`{names[1]}`'s call",
                             secondary=((first.span, f"`{names[0]}`'s call"),), help=help))

    for (comm, rank), threads in callers.items():
        met = unordered(threads) if len(threads) > 1 else None
        if met is None:
            continue
        first, second, names = met
        warn(first, second, names,
             f"threads `{names[0]}` and `{names[1]}` both call comm `{program.comms[comm].name}` for rank "
             f"`{program.streams[rank].name}`, and nothing orders their calls",
             "NCCL does not allow one communicator's operations to be issued by several threads at once "
             "(\"Thread Safety\"), and HCCL wants a rank's operators issued one by one; which calls meet "
             "here depends on the interleaving: issue a rank's calls from one thread, or hand over between "
             "the threads (`notify N` after one's calls, `await N` before the other's)")
    warned = {frozenset((d.primary_span.line, d.annotations[1].span.line)) for d in found}
    for device, threads in on_device.items():
        met = unordered(threads, lambda first, second: first.comm != second.comm)
        if met is None or frozenset((met[0].span.line, met[1].span.line)) in warned:
            continue
        first, second, names = met
        comms = [program.comms[c.comm].name for c in (first, second)]
        warn(first, second, names,
             f"threads `{names[0]}` and `{names[1]}` call comms `{comms[0]}` and `{comms[1]}` on device "
             f"`{program.devices[device].name}`, and nothing orders their calls",
             "HCCL wants the operators of all comms on a device issued one after another, in one order, "
             "never from several threads at once (HCCL user guide, communicator management); which calls "
             "meet here depends on the interleaving: issue a device's calls from one thread, or hand over "
             "between the threads (`notify N` after one's calls, `await N` before the other's)")
    return found


def _opposite_orders(program: Program, before: Statement, after: Statement, early: Statement,
                     late: Statement) -> Diagnostic:
    """SP069 where one thread calls `before` (comm A), then `after` (comm B), and another
    thread calls `early` (B's call of that group) before `late` (A's)."""
    comm_a, comm_b = (program.comms[s.comm].name for s in (before, after))
    first, second = (program.threads[s.thread].name for s in (before, early))
    return warning(
        Code.SP069, f"comms `{comm_a}` and `{comm_b}` are called in opposite orders: thread `{first}` "
        f"calls `{comm_a}` first (line {before.span.line}), thread `{second}` calls `{comm_b}` first "
        f"(line {early.span.line})", early.span, f"`{comm_b}` before `{comm_a}` (line {late.span.line})",
        help="NCCL does not promise that two communicators make progress at once (a rank's kernel of one "
             "can hold the GPU while it waits for a peer that waits on the other), and HCCL wants every "
             "device to issue the calls of all its comms in one order; streamproof lets them run side by "
             "side. Call the comms in the same order on every rank",
        secondary=((before.span, f"`{comm_a}` before `{comm_b}` (line {after.span.line})"),))


def _device_of_each_rank(program: Program, member_device: dict[int, int], base: str) -> str | None:
    """`D[base]` when every thread `base[i]` drives the rank on device `D[i]`, as a thread
    array's one body writes it; None otherwise."""
    names = set()
    for thread, device in member_device.items():
        thread_name, device_name = program.threads[thread].name, program.devices[device].name if device >= 0 else ""
        if not thread_name.startswith(base + "[") or "[" not in device_name:
            continue
        if thread_name.removeprefix(base) != device_name[device_name.index("["):]:
            return None
        names.add(device_name[:device_name.index("[")])
    return f"{names.pop()}[{base}]" if len(names) == 1 else None


def sync_all_of_a_rank(program: Program) -> list[Diagnostic]:
    """SP058: `sync all` (or `sync` of another rank's device) in a thread that drives one
    rank of a comm, while other threads drive the others. It waits for the other ranks'
    devices, which no process can do (`torch.cuda.synchronize()`, `cudaDeviceSynchronize`
    wait for the caller's device): the spec then orders ranks that the program does not, or
    hangs where it does not."""
    if not program.comms:
        return []
    member_device: dict[int, int] = {}  # thread -> the one device of its comm calls
    for s in program.statements:
        if s.comm is not None and s.stream is not None:
            device = program.streams[s.stream].device
            member_device[s.thread] = device if member_device.get(s.thread, device) == device else -1
    if len({d for d in member_device.values() if d >= 0}) < 2:
        return []
    found = []
    warned: set[int] = set()
    rank_devices = {d for d in member_device.values() if d >= 0}
    for s in program.statements:
        own = member_device.get(s.thread, -1)
        explicit = not s.form or s.form.startswith("sync")  # (not a `free`'s implicit sync of its memory's device)
        if s.op is Op.SYNC and s.sync is SyncKind.DEVICE and own >= 0 and s.target != own and explicit \
                and s.target in rank_devices and s.thread not in warned:
            warned.add(s.thread)
            name = program.threads[s.thread].name
            written = program.devices[own].name
            if "[" in name:
                written = _device_of_each_rank(program, member_device, name.split("[")[0]) or written
            found.append(warning(
                Code.SP058, f"`sync {program.devices[s.target].name}` in thread `{name}`, which drives the rank on "
                f"`{program.devices[own].name}`, waits for another rank's device", s.span, "another rank's device",
                help=f"a rank's process synchronizes its own device (`torch.cuda.synchronize()`): write "
                     f"`sync {written}`"))
            continue
        if s.op is Op.SYNC and s.sync is SyncKind.ALL and own >= 0 \
                and s.thread not in warned:
            warned.add(s.thread)
            device = program.devices[member_device[s.thread]].name
            name = program.threads[s.thread].name
            thread = name.split("[")[0] + ("[N]" if "[" in name else "")  # (as declared)
            written = device  # (one body for every rank of a thread array: the device as it names it)
            if "[" in name:
                written = _device_of_each_rank(program, member_device, name.split("[")[0]) or device
            implicit = s.form and not s.form.startswith("sync")  # (e.g. cudaFreeHost's)
            found.append(warning(
                Code.SP058, f"{'`' + s.form.split(' (')[0] + '`' if implicit else '`sync all`'} in thread "
                f"`{name}`, which drives the rank on `{device}`, also waits for the other ranks' devices",
                s.span, "every device",
                help=(f"if the thread stands for a process of its own, declare it `thread {thread} process`: "
                      "a process waits for the devices it uses" if implicit else
                      f"a rank's process synchronizes its own device (`torch.cuda.synchronize()`): write "
                      f"`sync {written}`, or declare the thread `thread {thread} process`")))
    return found
