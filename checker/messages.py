"""The one place that words findings: every engine reports typed facts through these.

The fast path, the SMT engine and the executor's explorer each find races, dead uses and
deadlocks. They hand the facts (which statements, which memory, how many loop instances, the
witness, who is stuck) to the functions here, so that the same race reads the same whichever
engine found it, and the help line fits the case (a host access is fixed with a `sync`, two
streams with an event, two threads with a notify).
"""

from __future__ import annotations

import math
import re
from bisect import bisect_left, bisect_right
from fractions import Fraction

import networkx

from checker.findings import Finding, FindingKind, Stuck
from checker.ir import (NS_PER_MS, GroupKind, Memory, Op, Program, Runtime, Statement, SyncKind, conflicting,
                        loop_text)
from checker.witness import StepKind, Witness


def _where(program: Program, statement: Statement) -> str:
    if statement.launch is not None:  # (a graph's work: which of the graph's launches ran it)
        launch = program.statements[statement.launch].span.line
        return f"{program.describe(statement)} (line {statement.span.line}, launched at line {launch})"
    return f"{program.describe(statement)} (line {statement.span.line})"


_PROCESS_ORDER = ("where an (interprocess) event orders them only once its record is known to be enqueued: "
                  "order them with a signal")
"""How helps order two processes' work: an IPC event's wait binds only to a record already
enqueued, which the other process cannot know without a signal."""


def _quoted(program: Program, statement: Statement) -> str:
    return f"`{program.describe(statement)}` (line {statement.span.line})"


def race(program: Program, a: Statement, b: Statement, memory: Memory, instances: int,
         witness: Witness | None, elements: tuple[str, ...] = ()) -> Finding:
    """Two accesses to overlapping bytes, one a write, that some execution runs at once."""
    a, b = sorted((a, b), key=lambda s: s.index)
    name = f"`{_overlap_name(a, b, memory)}`"
    help = _race_help(program, a, b, witness)
    if help.startswith("order them with an event") and _replicas(program, a, b) and "[" not in memory.name:
        help += (f"; or, where the {'iterations' if a.thread == b.thread else 'threads'} are meant to run at once, "
                 f"give each its own `{memory.name}` (an array indexed as its stream is)")
    several = len(memory.owners) > 1 or len(memory.tensors) > 1  # (a block that several tensors had)
    lifetimes = not _one_lifetime(program, a, b, memory)  # (the two accesses in two lifetimes of the memory)
    if several or (memory.pool is not None and lifetimes):
        held = memory.tensors if len(memory.tensors) > 1 else memory.owners
        name += (f" (caching-allocator memory, handed to {', '.join(f'`{o}`' for o in held)} in turn)" if several else
                 " (caching-allocator memory, its block handed on again at each free)")
        if lifetimes:
            help = _block_help(program, a, b, memory)
    elif memory.comm is not None:
        comm = program.comms[memory.comm]
        rank = comm.in_flight.index(memory.index)
        name += f" (the state of comm `{comm.name}`'s rank {rank}, which allows one call in flight)"
        order = ("issue both on one stream, or make the second's stream wait for an event recorded after the first"
                 if a.launch is None and b.launch is None else _graph_help(program, a, b))
        help = (f"`{comm.name}` is declared `one_in_flight`: its library keeps one signal pad or staging buffer "
                f"per rank, and two calls of a rank in flight at once hang or corrupt each other. Order them: "
                f"{order}")
    return Finding(
        FindingKind.RACE,
        f"race on {name}: {_where(program, a)} and {_where(program, b)} can run at the same time",
        (a.index, b.index), memory.buffer, memory.name, instances, witness, help=help,
        elements=elements if len(elements) > 1 else (),
    )


def _overlap_name(a: Statement, b: Statement, memory: Memory) -> str:
    """The memory, with the bytes the two accesses share when they are not all of it
    (`b[256:512]`): two ranges that overlap in part race only there."""
    pairs = [(x, y) for x, y in conflicting(a.accesses, b.accesses) if x.memory == memory.index]
    if not pairs:
        return memory.name
    low, high = None, None
    for start, end in sorted((max(x.start, y.start), min(x.end, y.end)) for x, y in pairs):
        if high is not None and start > high:
            return memory.name  # (several pieces: the memory's name alone does not claim the gaps)
        low, high = (start if low is None else low), max(end, high or end)
    return memory.name if (low, high) == (0, memory.size) else f"{memory.name}[{low}:{high}]"


def _replicas(program: Program, a: Statement, b: Statement) -> bool:
    """Two loop iterations (or copies of one thread) that put their work on streams of their
    own, `s[i]`: a pipeline replicated to overlap, for which sharing one buffer is the bug
    as much as a missing order."""
    if a.stream is None or b.stream is None or a.stream == b.stream or a.bindings == b.bindings:
        return False
    written = program.streams[a.stream].written, program.streams[b.stream].written
    return all("[" in name for name in written) and written[0].split("[")[0] == written[1].split("[")[0]


def _one_lifetime(program: Program, a: Statement, b: Statement, memory: Memory) -> bool:
    """Two uses of a block by one thread, with no alloc or free of it enqueued between them,
    or of a block no statement frees (its one lifetime): they race as any two uses of one
    buffer do, whatever the block held before or after."""
    if memory.index not in _freed_memories(program):
        return True
    if a.thread != b.thread or a.index > b.index or b.index - a.index > 20 * STALE_SCAN:
        return False
    return not any(s.op in (Op.ALLOC, Op.FREE) and memory.index in s.lifetime_memories
                   for s in program.statements[a.index + 1:b.index])


def _block_help(program: Program, a: Statement, b: Statement, memory: Memory) -> str:
    """A race on a reused caching-allocator block: when one access is a use, on a stream
    other than the block's own, of a tensor freed after it, name the free, that stream and the
    `record_stream` it lacks."""
    general = ("the allocator hands a freed block to the next allocation on its stream at once: record "
               "every other stream's use before the free (`S: record_stream T`), or order that use "
               "before the free with an event")
    for use in (a, b):
        if use.stream is None or use.stream == memory.pool:
            continue
        written = next((x.written_as for x in use.accesses if x.memory == memory.index), "")
        owner = next((o for o in memory.owners if written == o or written.startswith(o + "[")), None)
        later = program.statements[use.index + 1:use.index + 1 + 20 * STALE_SCAN]
        free = next((s for s in later if s.op is Op.FREE and memory.index in s.lifetime_memories and s.launch_only), None)
        stream, after = _nameable(program, use)
        element = re.match(r"[^\[]+\[[^\]:]*\]", written)  # (as written, `x[step]`, without a byte range)
        tensor = element.group(0) if element and owner and written.startswith(owner + "[") else owner
        if free is not None and owner is not None and use.span.end <= free.span.start and re.search(
                rf"(?m)^\s*{re.escape(stream)}\s*:\s*record_stream\s+{re.escape(tensor)}\s*(#.*)?$",
                program.source[use.span.end:free.span.start]):
            free = None  # (recorded already: the block's next owner is what did not wait)
        if owner is not None and free is not None:
            written_free = program.source[free.span.start:free.span.end]
            if not written_free.startswith("free ") or "\n" in written_free:
                written_free = f"free {tensor}"
            return (f"`{written_free}` (line {free.span.line}) hands its block to the next allocation on its "
                    f"stream at once, while `{stream}` may still use it: write `{stream}: record_stream "
                    f"{tensor}` after {after} and before the free, or order the use before the free with "
                    "an event")
        earlier = program.statements[max(0, use.index - 20 * STALE_SCAN):use.index]
        for s in reversed(earlier):  # (a use its thread enqueued after the tensor's own free)
            if s.thread == use.thread and memory.index in s.lifetime_memories and s.op in (Op.ALLOC, Op.FREE):
                if s.op is Op.FREE:
                    return (f"{_quoted(program, use)} is enqueued after {_quoted(program, s)}, which hands the block "
                            f"on: enqueue the use before the free")
                break
        if owner is not None and free is None and memory.pool is not None:
            # A use of the block's next owner on another stream, with no wait after its alloc.
            alloc = next((s for s in reversed(earlier) if s.op is Op.ALLOC and s.thread == use.thread
                          and memory.index in s.lifetime_memories and s.form.startswith((f"alloc {owner} ", f"alloc {owner}["))), None)
            if alloc is not None:
                pool = program.streams[memory.pool].written
                return (f"`{owner}` takes its block from `{pool}`'s pool (line {alloc.span.line}), where work "
                        f"enqueued before may still use it, and `{stream}` uses it without waiting for `{pool}`: "
                        f"record an event on `{pool}` after the alloc and wait for it on `{stream}` before the use")
    return general


def _nameable(program: Program, use: Statement) -> tuple[str, str]:
    """The stream a spec can name for a task's use, and what to put an order after: the task's
    own (`that use`), or for a graph's work its launch stream and the launch."""
    if use.launch is None:
        return _stream_as_written(program, use), "that use"
    names = _Launches(program)
    return names.stream(use), f"`launch {names.graph(use)}` (line {names.launch(use).span.line})"


def _stream_as_written(program: Program, task: Statement) -> str:
    """The stream of a task as its line names it (`nccl[rank]`), where a loop or a thread
    array indexed it: a fix to paste into that line's block must index it the same way as
    the tensor beside it, not name one instance (`nccl[1]`)."""
    written = program.streams[task.stream].written
    if not task.bindings or "[" not in written:
        return written
    prefix = re.match(r"\s*([A-Za-z_]\w*\[[^\]\n]*\])\s*:", program.source[task.span.start:task.span.end])
    if prefix is None or prefix.group(1).split("[")[0] != written.split("[")[0]:
        return written
    return prefix.group(1)


def race_buffers(program: Program, pairs: list[tuple[Statement, Statement]]
                 ) -> list[tuple[int, Memory, int, tuple[str, ...]]]:
    """The declared buffers that the racing instance pairs of one pair of source statements
    conflict on, each as (the pair to show for it, the first that touches it unless a later
    one belongs to one loop iteration and the first does not, its memory there, how many pairs
    do, the elements of it they conflict on). Running at once is a property of the pair, so
    every buffer on which one writes what the other touches races, and each is reported on
    its own (an `expect race on B` must see each), with a pair and a witness of its own."""
    found: dict[str, list] = {}
    for k, (a, b) in enumerate(pairs):
        seen: set[str] = set()
        for x, _ in conflicting(a.accesses, b.accesses):
            memory = program.memories[x.memory]
            entry = found.setdefault(memory.buffer, [k, memory, 0, {}])
            if entry[0] != k and a.bindings == b.bindings and memory.buffer not in seen:
                shown = pairs[entry[0]]
                if shown[0].bindings != shown[1].bindings:
                    # (shown instead: a pair of one loop iteration, whose cause lies within it)
                    entry[0], entry[1] = k, memory
            entry[3][memory.name] = None
            if memory.buffer not in seen:
                seen.add(memory.buffer)
                entry[2] += 1
    return [(k, memory, count, tuple(elements)) for k, memory, count, elements in found.values()]


def _race_help(program: Program, a: Statement, b: Statement, witness: Witness | None = None) -> str:
    if a.thread == b.thread and a.bindings == b.bindings:  # (one instance: name streams as its lines do)
        stream = lambda s: _stream_as_written(program, s)  # noqa: E731
    else:
        stream = lambda s: program.streams[s.stream].written  # noqa: E731
    if a.stream is None and b.stream is None:
        if a.thread == b.thread:
            return "the two host statements overlap: one must return before the other starts"
        return ("two host threads touch the bytes at once: order them with a notify "
                "(`notify N` after the first, `await N` before the second)" + _one_body(program, a, b))
    captured = _graph_help(program, a, b)
    if captured is not None:
        return captured
    host_calls = lambda s: s.stream is not None and program.streams[s.stream].host_calls  # noqa: E731
    calls = [s for s in (a, b) if host_calls(s)]
    if calls:  # (CANN's memcpy/memset: on no stream a spec can name; the call blocks its thread)
        call = calls[0]
        other = b if call is a else a
        if other.stream is None or host_calls(other) or other.thread != call.thread:
            return (f"`{program.describe(call)}` (line {call.span.line}) waits for no stream (CANN's aclrtMemcpy and aclrtMemset make no "
                    "implicit stream synchronization) and blocks its thread until done: order the two threads "
                    "with a notify (`notify N` after the first, `await N` before the second)"
                    + ("" if other.stream is None or host_calls(other) else
                       f", with the other thread waiting for `{stream(other)}` first (`sync {stream(other)}`)"))
        return (f"`{program.describe(call)}` (line {call.span.line}) waits for no stream (CANN's aclrtMemcpy and "
                f"aclrtMemset make no implicit stream synchronization): make the host wait for `{stream(other)}` "
                f"before the call (`sync {stream(other)}`)")
    if a.stream is None or b.stream is None:
        task, host = (a, b) if b.stream is None else (b, a)
        return _early_sync(program, host, task) or _across_threads(program, host, task) \
            or _sync_bound_elsewhere(program, host, task) or (
            f"make the host wait for the task before its access: `sync {stream(task)}` (or `sync E` "
            f"on an event recorded after the task)")
    if a.stream == b.stream or a.batch is not None and a.batch == b.batch:
        return ("the two tasks are launched together by one `group`: take one out of the group "
                "or give them separate buffers")
    if _one_group(program, a, b):
        return ("the two calls are in one `group`, which enqueues all its calls at its end: a record and a wait "
                "go before or after all of them, so no event orders one after the other; take one out of the "
                "group and order it after the group with an event (`record E` on the other's stream after the "
                "group, `wait E` before it), or give them separate buffers")
    for task, other in ((a, b), (b, a)):
        # A host `memcpy`/`memset`: its task runs on the device's default stream (`gpu0.default`).
        if task.form.startswith(("memcpy", "memset")) and "." in stream(task) and "." not in stream(other):
            if not task.blocking and task.thread != other.thread:  # (another thread's work uses the memory)
                return (f"{_where(program, task)} runs on the device's default stream (`{stream(task)}`) and "
                        f"returns before it is done, and `{program.threads[other.thread].name}` enqueues "
                        f"{_quoted(program, other)}: have `{program.threads[task.thread].name}` wait for the call "
                        f"(`sync {stream(task)}`) and then hand over (`notify N`, with `await N` before the other "
                        f"thread's use)")
            if task.index < other.index and not task.blocking:  # (the call returned before its task was done)
                return (f"{_where(program, task)} runs on the device's default stream (`{stream(task)}`) and "
                        f"returns before it is done: wait for that stream before `{stream(other)}` uses the "
                        f"memory (`sync {stream(task)}`, or an event recorded on it after the call)")
            blocks = (": work its thread enqueues after it is already ordered, since the call blocks until done"
                      if task.blocking else "")
            return (f"{_where(program, task)} runs on the device's default stream (`{stream(task)}`): make the "
                    f"host wait for `{stream(other)}` before the call (`sync {stream(other)}`){blocks}")
    for task, other in ((a, b), (b, a)):
        inside = _record_inside_group(program, task, other)
        if inside is not None:
            also = (f", and with it what is written after it in the group, through {_quoted(program, other)}: "
                    "those statements too run before the group's calls are enqueued"
                    if _written_after_in_group(task, other) else "")
            return (f"{_quoted(program, inside)} is inside the `group` that holds {_quoted(program, task)}: a group "
                    f"enqueues its calls when it ends, so the record comes before the call and waits for none of "
                    f"it; move the record after the group{also}")
    for task, other in ((a, b), (b, a)):
        if _written_after_in_group(task, other):
            return (f"{_quoted(program, other)} is written after {_quoted(program, task)} inside its `group`, but a "
                    f"group enqueues its calls when it ends, so it comes first (and a `sync` inside the group "
                    f"waits for none of the calls): move it after the group")
    for task in (b, a):
        stale = _stale_flag_wait(program, task)
        if stale is not None:
            event = program.events[stale.event].name
            if stream(task) != program.streams[task.stream].written:  # (named as the lines write them)
                waited = re.match(r"[^:]*:\s*wait\s+([A-Za-z_]\w*(?:\[[^\]\n]*\])?)",
                                  program.source[stale.span.start:stale.span.end])
                event = waited.group(1) if waited and waited.group(1).split("[")[0] == event.split("[")[0] else event
            return (f"`{stream(task)}: wait {event}` (line {stale.span.line}) can pass on an earlier "
                    f"`record {event}`: a flag event stays set until it is reset, so reset it once the wait "
                    f"is through (`{stream(task)}: reset {event}`){_RESET_THEN}, or record a fresh event each time")
    for task, other in ((b, a), (a, b)):
        early = _flag_passes_early(program, task, other)
        if early is not None:
            return early
    for reader, writer in ((a, b), (b, a)):
        # (the reader waits for an earlier write: the race is the overwrite, which goes after the read)
        producer = _earlier_producer(program, reader, writer)
        if producer is None:
            continue
        if witness is not None:
            why = (_unused_record_help(program, writer, reader, witness)
                   or _binding_help(program, writer, reader, witness))
            if why is not None:
                return why
        early = _early_wait(program, writer, reader)
        if early is not None:
            return _early_wait_text(program, writer, *early, stream)
        return _overwrite_help(program, reader, writer, *producer)
    if witness is not None:
        for task, other in ((b, a), (a, b)):
            unused = _unused_record_help(program, task, other, witness)
            if unused is not None:
                return unused
        for task, other in ((b, a), (a, b)):
            bound = _binding_help(program, task, other, witness)
            if bound is not None:
                return bound
    for task, other in ((a, b), (b, a)):
        early = _early_wait(program, task, other)
        if early is not None:
            return _early_wait_text(program, task, *early, stream)
    # (a call in a `group` is enqueued when the group ends: the order goes around the group)
    first, second, which = a, b, ("the first", "the second")
    if a.op is Op.FREE and b.op is not Op.FREE:  # (a free ends the memory: every use goes before it)
        if a.thread == b.thread and _alloc_between(program, a, b, a.memory) is not None:  # (a new lifetime's use)
            return _free_after_help(program, b, a)
        if a.thread == b.thread and a.stream is not None and b.stream is not None:  # (the use enqueued later)
            return (f"{_quoted(program, b)} is enqueued after {_quoted(program, a)}, which ends the memory: move "
                    f"the use before the free, and make the free wait for it (`record E` on `{stream(b)}` after "
                    f"the use, `wait E` on `{stream(a)}` before the free)")
        first, second, which = b, a, (_quoted(program, b), _quoted(program, a))
    elif _handed_off(program, b, a) and not _handed_off(program, a, b):
        first, second, which = b, a, (_quoted(program, b), _quoted(program, a))
    elif _earlier_iteration(program, b, a):  # (two threads' loops: the earlier iteration's access goes first)
        iteration = lambda s: " [" + ", ".join(f"{k}={v}" for k, v in s.bindings) + "]"  # noqa: E731
        first, second, which = b, a, (_quoted(program, b) + iteration(b), _quoted(program, a) + iteration(a))
    after = f"after the `group` that holds {which[0]}" if first.batch is not None else f"after {which[0]}"
    before = f"before the `group` that holds {which[1]}" if second.batch is not None else f"before {which[1]}"
    a, b = first, second
    if _two_processes(program, a, b):
        if program.devices[program.streams[a.stream].device].runtime is Runtime.CUDA:
            return _interprocess_event(program, a, b, after, before)
        return (f"they run in two processes, {_PROCESS_ORDER}, `{stream(a)}: notify N` {after} and "
                f"`{stream(b)}: await N` {before} (a barrier of stream signals)")
    exchange = _exchange(program, a, b, after, before)
    if exchange is not None:
        return exchange
    thread_name = program.threads[a.thread].name
    event, per_rank = "E", ""
    if a.thread == b.thread and "[" in thread_name:  # (a thread array: an event of each rank's own)
        event = f"E[{thread_name.split('[')[0]}]"
        per_rank = " of each rank's own (`event E[N]`)"
    # (each half is written beside its own statement: its stream as that line names it)
    beside = (lambda s: _stream_as_written(program, s)) if a.launch is None and b.launch is None else stream
    help = (f"order them with an event{per_rank}: `record {event}` on `{beside(a)}` {after}, "
            f"`wait {event}` on `{beside(b)}` {before} (or put both on one stream)")
    if a.launch is None and b.launch is None:
        help += _two_threads(program, a, b)
        arrays = [program.threads[s.thread].name for s in (a, b)]
        if a.thread != b.thread and all("[" in name for name in arrays):
            help += ("; in thread arrays, give each rank an event and a notify of its own (`event E[R]`, "
                     "`notify N[R]` for R ranks), indexed on both sides so that they name the same rank's: one "
                     "shared by every rank is set by all of them")
    member = a if a.group is not None else b
    if (a.group is None) != (b.group is None) and member.spins:
        help += ("; a collective's task starts as soon as its own stream reaches it and waits there for "
                 "its peers (NCCL, `runtime cuda`), so its buffer is in use from then on, whenever the peers arrive")
    return help


def _exchange(program: Program, first: Statement, second: Statement, after: str, before: str) -> str | None:
    """Two ranks of one thread array where the first uses its own element (`x[rank]`) and the
    second another rank's (`x[1 - rank]`): every rank runs both halves, so the fix is one
    event and notify per rank, the second side naming its peer's with the same index."""
    names = [program.threads[s.thread].name for s in (first, second)]
    if (first.thread == second.thread or not all("[" in name for name in names)
            or len({name.split("[")[0] for name in names}) != 1 or first.launch is not None
            or second.launch is not None or first.stream is None or second.stream is None):
        return None
    rank = names[0].split("[")[0]
    for x, y in conflicting(first.accesses, second.accesses):
        own = re.fullmatch(r"(\w+)\[\s*(\w+)\s*\]", x.written_as)
        peer = re.fullmatch(r"(\w+)\[(.+)\]", y.written_as)
        if (own is None or peer is None or own.group(1) != peer.group(1) or own.group(2) != rank
                or not re.search(rf"\b{rank}\b", peer.group(2)) or peer.group(2).strip() == rank):
            continue
        index = peer.group(2).strip()
        ranks = sum(thread.name.split("[")[0] == rank for thread in program.threads)
        return (f"give each rank an event and a notify of its own (`event E[{ranks}]`, `notify N[{ranks}]`): "
                f"`record E[{rank}]` on `{_stream_as_written(program, first)}` {after}, then `notify N[{rank}]`; "
                f"`await N[{index}]`, then `wait E[{index}]` on `{_stream_as_written(program, second)}` {before}. "
                f"Every rank runs both halves, and `[{index}]` names the rank whose `{x.written_as}` the second "
                f"{'writes' if y.write else 'reads'}")
    return None


def _early_wait_text(program: Program, task: Statement, wait: Statement, record: Statement, stream) -> str:
    event = program.events[wait.event].name
    return (f"`{stream(task)}: wait {event}` (line {wait.span.line}) can be enqueued before "
            f"`{stream(record)}: record {event}` (line {record.span.line}), and then waits for nothing: "
            "a wait binds to the latest record enqueued before it. Enqueue the record first (have "
            f"the waiting thread `await` a notify set after it){_flag_event_option(program, wait)}")


def _earlier_producer(program: Program, reader: Statement, writer: Statement) -> tuple[Statement, Statement] | None:
    """Where `reader` only reads what `writer` writes, and the wait just before it on its
    stream names an event whose latest record on `writer`'s stream before `writer` follows an
    earlier write of those bytes (with no record of it after `writer` before the wait): that
    write and the wait. The reader was meant to see the earlier write, so `writer` is an
    overwrite that must wait for the read; ordering the read after `writer` instead would make
    it read the wrong data (a pipeline's next round in one buffer)."""
    if (writer.stream is None or reader.stream is None or writer.stream == reader.stream
            or Op.FREE in (writer.op, reader.op) or Op.ALLOC in (writer.op, reader.op)):
        return None  # (a free ends the memory: it goes last, `_race_help` says so)
    pairs = [(x, y) for x in reader.accesses for y in writer.accesses if x.conflicts(y)]
    if not pairs or any(x.write for x, _ in pairs) or not all(y.write for _, y in pairs):
        return None
    wait = _last_wait(program, reader)
    if wait is None:
        return None
    thread = program.threads[writer.thread].statements
    at = bisect_left(thread, writer.index)
    statements = program.statements
    for i in thread[at + 1:at + 1 + STALE_SCAN]:  # (a record of the event after the overwrite: not this case)
        if i >= wait.index and wait.thread == writer.thread:
            break
        if statements[i].op is Op.RECORD and statements[i].event == wait.event:
            return None
    record = None
    for i in reversed(thread[max(0, at - STALE_SCAN):at]):
        statement = statements[i]
        if record is None:
            if statement.op is Op.RECORD and statement.event == wait.event and statement.stream == writer.stream:
                record = statement
            continue
        if statement.stream == writer.stream and any(
                y.write and x.conflicts(y) for x, _ in pairs for y in statement.accesses):
            # (one line's rounds, a loop's buffer refilled: the order of rounds says it already)
            return (statement, wait) if statement.span.line != writer.span.line else None
    return None


def _overwrite_help(program: Program, reader: Statement, writer: Statement, producer: Statement,
                    wait: Statement) -> str:
    """The overwrite of bytes a reader waits to read from an earlier write."""
    event = program.events[wait.event].name
    move = (f"move it after {_quoted(program, reader)} and make it wait for an event recorded after the read"
            if writer.thread == reader.thread and writer.index < reader.index else
            f"make it wait for the read: `record E` on `{_stream_as_written(program, reader)}` after "
            f"{_quoted(program, reader)}, `wait E` on `{_stream_as_written(program, writer)}` before "
            f"{_quoted(program, writer)}{_two_threads(program, reader, writer)}")
    return (f"{_quoted(program, reader)} waits for {_quoted(program, producer)} (`wait {event}`, line "
            f"{wait.span.line}), and {_quoted(program, writer)} overwrites those bytes before it reads them: "
            f"{move}, or give the later write a buffer of its own (double buffering). Waiting for the "
            f"overwrite instead would make the read see the later data")


def _one_group(program: Program, a: Statement, b: Statement) -> bool:
    """Two calls of one run of a `group` (of different comms, so different batches): a group's
    calls are enqueued together at its end, one after another in the thread's order."""
    if a.batch is None or b.batch is None or a.thread != b.thread:
        return False
    first, last = sorted((a.index, b.index))
    thread = program.threads[a.thread].statements
    between = thread[bisect_left(thread, first):bisect_left(thread, last) + 1]
    return all(program.statements[i].batch is not None for i in between)


def _earlier_iteration(program: Program, first: Statement, second: Statement) -> bool:
    """Two threads' statements of loops with a variable of one name, `first` in an earlier
    iteration of it than `second`: a race across iterations (a buffer reused each round), whose
    fix orders the earlier round's access before the later round's. (A thread array's own
    index, `rank` of `thread rank[2]`, is no iteration.)"""
    if first.thread == second.thread:
        return False
    arrays = {program.threads[s.thread].name.split("[")[0] for s in (first, second)}
    theirs = dict(second.bindings)
    return next(((value < theirs[name]) for name, value in first.bindings
                 if name in theirs and name not in arrays and value != theirs[name]), False)


def _handed_off(program: Program, first: Statement, second: Statement) -> bool:
    """`second`'s thread awaits, before `second`, a notify that `first`'s thread can only have
    set after enqueueing `first` (counting each notify's sets and awaits in order, as a
    hand-off back and forth between two threads uses them): `first` is enqueued first, so an
    order between the two can only go from `first` to `second`."""
    if first.thread == second.thread:
        return False
    statements = program.statements
    set_before: dict[int, int] = {}  # notify -> how many times `first`'s thread sets it before `first`
    set_after: set[int] = set()
    for i in program.threads[first.thread].statements:
        st = statements[i]
        if st.op is Op.NOTIFY and st.stream is None and st.notify is not None:
            if i < first.index:
                set_before[st.notify] = set_before.get(st.notify, 0) + 1
            else:
                set_after.add(st.notify)
    awaited: dict[int, int] = {}
    for i in program.threads[second.thread].statements:
        st = statements[i]
        if i >= second.index:
            break
        if st.op is Op.AWAIT and st.stream is None and st.notify in set_after:
            k = awaited[st.notify] = awaited.get(st.notify, 0) + 1
            if k > set_before.get(st.notify, 0):
                return True
    return False


def _event_sync_before(program: Program, host: Statement) -> Statement | None:
    """The host's thread's latest `sync` before `host` (within STALE_SCAN statements), if it
    syncs a snapshot event: the one meant to wait for the task the host then touches."""
    thread = program.threads[host.thread].statements
    end = bisect_left(thread, host.index)
    sync = next((program.statements[i] for i in reversed(thread[max(0, end - STALE_SCAN):end])
                 if program.statements[i].op is Op.SYNC), None)
    if sync is None or sync.sync is not SyncKind.EVENT or sync.target is None or program.events[sync.target].flag:
        return None
    return sync


def _sync_bound_elsewhere(program: Program, host: Statement, task: Statement) -> str | None:
    """The host syncs on a snapshot event its own thread records after the task, but another
    thread records that event too (one event written for every rank of a thread array): the
    sync binds to the latest record, which can be the other thread's."""
    if task.stream is None or task.thread != host.thread:
        return None
    sync = _event_sync_before(program, host)
    if sync is None:
        return None
    records = _records(program).get(sync.target, ())
    own = next((r for r in records if r.thread == host.thread and r.stream == task.stream
                and task.index < r.index < sync.index), None)
    other = next((r for r in records if r.thread != host.thread), None)
    if own is None or other is None:
        return None
    event = program.events[sync.target].name
    name = program.threads[host.thread].name
    index = name.split("[")[0] if "[" in name else None
    own_event = (f"`{event.split('[')[0]}[{index}]`, declared `event {event.split('[')[0]}[N]`" if index
                 else "one declared per thread")
    mine = "its own thread" if own.span.line == other.span.line else f"line {own.span.line}"
    return (f"`sync {event}` (line {sync.span.line}) waits for the latest `record {event}` enqueued before it, "
            f"and `{program.threads[other.thread].name}` records the event too ({_quoted(program, other)}), so the "
            f"sync can wait for that record rather than {mine}'s: give each thread an event of its own ({own_event})")


def _early_sync(program: Program, host: Statement, task: Statement) -> str | None:
    """The host's thread syncs on a snapshot event before its access, and the task's thread
    records that event after the task, but the sync can be issued before the record (a sync
    binds to the latest record enqueued before it: an older one, or none). Where the
    host's thread awaits a notify that the other thread sets before the record, the fix is to
    set it after the record."""
    if host.thread == task.thread or task.stream is None:
        return None
    thread = program.threads[host.thread].statements
    window = thread[max(0, bisect_left(thread, host.index) - STALE_SCAN):bisect_left(thread, host.index)]
    sync = _event_sync_before(program, host)
    if sync is None:
        return None
    record = next((r for r in _records(program).get(sync.target, ())
                   if r.thread == task.thread and r.stream == task.stream and r.index > task.index), None)
    if record is None:
        return None
    event = program.events[sync.target].name
    awaited = {program.statements[i].notify for i in window
               if program.statements[i].op is Op.AWAIT and program.statements[i].stream is None
               and program.statements[i].index < sync.index}
    setters = [i for i in program.threads[task.thread].statements if task.index < i < record.index
               and program.statements[i].op is Op.NOTIFY and program.statements[i].stream is None
               and program.statements[i].notify in awaited]
    said = (f"`sync {event}` (line {sync.span.line}) can be issued before `{program.describe(record)}` (line "
            f"{record.span.line}), and then waits for an older record or none (a sync binds to the latest "
            "record enqueued before it)")
    if setters:
        setter = program.statements[setters[-1]]
        return (f"{said}: {_quoted(program, setter)} is set before that record, so move it after the record")
    later = (f"have `{program.threads[task.thread].name}` set a notify after the record (`notify N`) and "
             f"`{program.threads[host.thread].name}` `await N` before the sync")
    own = program.threads[task.thread].statements
    handed = [i for i in own[max(0, bisect_left(own, task.index) - STALE_SCAN):bisect_left(own, task.index)]
              if program.statements[i].op is Op.NOTIFY and program.statements[i].stream is None
              and program.statements[i].notify in awaited]
    if not handed:
        return f"{said}: {later}"
    # The host awaits a notify set before the task: its sync is meant for an earlier record,
    # and the task reuses the memory too early (a staging buffer overwritten before it is read).
    host_thread, task_thread = program.threads[host.thread], program.threads[task.thread]
    def after(thread, statement: Statement, op: Op) -> list[Statement]:
        start = bisect_right(thread.statements, statement.index)
        following = thread.statements[start:start + STALE_SCAN]
        return [s for s in map(program.statements.__getitem__, following) if s.op is op and s.stream is None]
    freed = {s.notify for s in after(host_thread, host, Op.NOTIFY)}  # (what the host's thread sets after its access)
    late = next((s for s in after(task_thread, task, Op.AWAIT) if s.notify in freed), None)
    reuse = (f"{_quoted(program, late)} comes after it: move it before {_quoted(program, task)}" if late is not None else
             f"have `{host_thread.name}` set a notify after it (`notify N`) and `{task_thread.name}` `await N` "
             f"before enqueueing {_quoted(program, task)}")
    return (f"{said}. If {_quoted(program, host)} is meant to see the work before "
            f"{_quoted(program, program.statements[handed[-1]])}, {_quoted(program, task)} overwrites it too early: "
            f"{reuse}. If it is meant to see the later work, {later}")


def _across_threads(program: Program, host: Statement, task: Statement) -> str | None:
    """A host access and a task another thread enqueues: a sync waits only for work enqueued
    before it, so the host's thread must first learn that the task is enqueued; or the other
    thread waits for the host's access before enqueueing the task. A free goes last. A process
    cannot sync another's stream: there the task's own thread syncs before it hands over."""
    if host.thread == task.thread or task.launch is not None:
        return None
    stream = program.streams[task.stream].written
    thread = lambda s: f"`{program.threads[s.thread].name}`"  # noqa: E731
    processes = _two_processes(program, host, task)
    handed = _hand_off(program, task, host)
    if handed is not None:  # (the threads are ordered task first already: only the wait for the task is missing)
        notify, awaited = handed
        name = program.notifies[notify.notify].name
        said = (f"{thread(host)} awaits `{name}` (line {awaited.span.line}), which {thread(task)} sets after "
                f"enqueueing {_quoted(program, task)}, but the task may still run")
        if processes:
            return (f"{said}, and a process cannot sync another's stream: have {thread(task)} `sync {stream}` "
                    f"before `notify {name}` (line {notify.span.line}), or record an event shared through an IPC "
                    f"handle on `{stream}` after the task, before the notify, and `sync E` after line "
                    f"{awaited.span.line}")
        return (f"{said}: add `sync {stream}` (or a sync of an event recorded after the task) after line "
                f"{awaited.span.line}, before {_quoted(program, host)}")
    if processes:
        task_first = (f"have {thread(task)} `sync {stream}` after enqueueing {_quoted(program, task)} and then set "
                      f"a notify (`notify N`), and {thread(host)} `await N` before {_quoted(program, host)} (a "
                      f"process cannot sync another's stream)")
    else:
        task_first = (f"have {thread(task)} set a notify after enqueueing {_quoted(program, task)} (`notify N`) "
                      f"and {thread(host)} `await N`, then `sync {stream}` (or an event recorded after the task), "
                      f"before {_quoted(program, host)}: a sync waits only for work enqueued before it")
    host_first = (f"have {thread(host)} set a notify after {_quoted(program, host)} (`notify N`) and "
                  f"{thread(task)} `await N` before enqueueing {_quoted(program, task)}")
    if host.op is Op.FREE or host.form.startswith("free "):
        return f"order the two threads: {task_first}"
    if task.op is Op.FREE:
        return f"order the two threads: {host_first}"
    return f"order the two threads: either {task_first}; or {host_first}"


def _hand_off(program: Program, first: Statement, second: Statement) -> tuple[Statement, Statement] | None:
    """A host `notify` that `first`'s thread sets after enqueueing `first`, and the host
    `await` of it that `second`'s thread does before `second` (within STALE_SCAN statements
    each): the threads are ordered already, the streams not."""
    def scan(statements, op):  # (notify -> its nearest statement of `op` in scan order)
        found: dict[int, Statement] = {}
        for i in statements:
            if program.statements[i].op is op and program.statements[i].stream is None:
                found.setdefault(program.statements[i].notify, program.statements[i])
        return found
    own = program.threads[first.thread].statements
    start = bisect_right(own, first.index)
    notified = scan(own[start:start + STALE_SCAN], Op.NOTIFY)
    theirs = program.threads[second.thread].statements
    end = bisect_left(theirs, second.index)
    for notify, awaited in scan(reversed(theirs[max(0, end - STALE_SCAN):end]), Op.AWAIT).items():
        if notify in notified:
            return notified[notify], awaited
    return None


class _Launches:
    """How help names a graph's work: by what the spec can name (the launch, its graph, the
    launch stream, the declared stream it was captured on), never by the exec's own streams."""

    def __init__(self, program: Program) -> None:
        self.program = program

    def launch(self, s: Statement) -> Statement:
        return self.program.statements[s.launch]

    def graph(self, s: Statement) -> str:
        return self.launch(s).form.removeprefix("launch ").removesuffix(" (begins)")

    def stream(self, s: Statement) -> str:
        return self.program.streams[self.launch(s).stream].written

    def captured(self, s: Statement) -> str:
        return self.program.streams[self.program.streams[s.stream].captured].written


def _graph_help(program: Program, a: Statement, b: Statement) -> str | None:
    """A race with a graph's work: its streams cannot be named, so the order to add is around
    its launch (`S: launch G`), or inside its body, on the streams it was captured on."""
    if a.launch is None and b.launch is None:
        return None
    names = _Launches(program)
    launch, graph, where, captured = names.launch, names.graph, names.stream, names.captured
    if a.launch is not None and a.launch == b.launch:
        return (f"order them inside graph `{graph(a)}`: `record E` on `{captured(a)}` after the first, `wait E` on "
                f"`{captured(b)}` before the second (or capture both on one stream)")
    if a.launch is not None and b.launch is not None:
        first, second = launch(a), launch(b)
        if first.span == second.span:  # (one launch statement, run by two threads)
            threads = " and ".join(f"`{program.threads[s.thread].name}`" for s in (first, second))
            launches = f"the launches of `{graph(a)}` at line {first.span.line} by {threads}"
        else:
            launches = (f"the launches of `{graph(a)}` (line {first.span.line}) and `{graph(b)}` (line "
                        f"{second.span.line})")
        if _two_processes(program, first, second):
            return (f"{launches} are not ordered, and they run in two processes, {_PROCESS_ORDER}, "
                    f"`{where(a)}: notify N` after `launch {graph(a)}` and `{where(b)}: await N` before "
                    f"`launch {graph(b)}`")
        return (f"{launches} are not ordered: record an event on `{where(a)}` after `launch {graph(a)}` "
                f"and wait on it on `{where(b)}` before `launch {graph(b)}`{_two_threads(program, first, second)}")
    task, other = (a, b) if a.launch is not None else (b, a)
    if other.stream is None:
        return (f"make the host wait for graph `{graph(task)}` before its access: `sync {where(task)}` after "
                f"`launch {graph(task)}` (line {launch(task).span.line}), or `sync E` on an event recorded there")
    other_stream = program.streams[other.stream].written
    if _two_processes(program, task, other):
        after, before = ((f"`{where(task)}: notify N` after `launch {graph(task)}` (line {launch(task).span.line})",
                          f"`{other_stream}: await N` before the second") if task is a else
                         (f"`{other_stream}: notify N` after the first",
                          f"`{where(task)}: await N` before `launch {graph(task)}` (line {launch(task).span.line})"))
        return f"they run in two processes, {_PROCESS_ORDER}, {after} and {before}"
    if task is a:
        return (f"order them with an event: `record E` on `{where(task)}` after `launch {graph(task)}` (line "
                f"{launch(task).span.line}), `wait E` on `{other_stream}` before the second"
                f"{_two_threads(program, launch(task), other)}")
    return (f"order them with an event: `record E` on `{other_stream}` after the first, `wait E` on "
            f"`{where(task)}` before `launch {graph(task)}` (line {launch(task).span.line})"
            f"{_two_threads(program, other, launch(task))}")


def _interprocess_event(program: Program, first: Statement, second: Statement, after: str, before: str) -> str:
    """Two CUDA processes' tasks: an event shared through an IPC handle, whose wait binds only
    to a record already enqueued, so a host signal hands the record over (the one the
    threads already exchange, where one follows the first task and precedes the second)."""
    shared = ("they run in two processes: share an event through an IPC handle (`event E ipc`: "
              "`cudaIpcGetEventHandle`, `cudaIpcOpenEventHandle`), whose wait binds only to a record already "
              "enqueued: ")
    threads = program.threads
    handed = _hand_off(program, first, second)
    if handed is not None:
        notify, awaited = handed
        name = program.notifies[notify.notify].name
        return (shared + f"`record E` on `{_stream_as_written(program, first)}` {after}, before `notify {name}` "
                         f"(line {notify.span.line}), and `wait E` on `{_stream_as_written(program, second)}` after "
                         f"`await {name}` (line {awaited.span.line}), {before}")
    return (shared + f"`record E` on `{_stream_as_written(program, first)}` {after}, then `notify N`; in "
                     f"`{threads[second.thread].name}`, `await N`, then `wait E` on "
                     f"`{_stream_as_written(program, second)}` {before}")


def _two_processes(program: Program, first: Statement, second: Statement) -> bool:
    threads = program.threads
    return first.thread != second.thread and (threads[first.thread].process or threads[second.thread].process)


def _two_threads(program: Program, first: Statement, second: Statement) -> str:
    """Where two threads of one process enqueue the two sides: an event's wait binds to the
    record enqueued before it, so the threads must hand over too."""
    if first.thread == second.thread:
        return ""
    threads = program.threads
    return (f"; they are enqueued by two threads, and a wait binds to the latest record enqueued before it: "
            f"have `{threads[first.thread].name}` set a notify after the record (`notify N`) and "
            f"`{threads[second.thread].name}` `await N` before the wait" + _one_body(program, first, second))


def _one_body(program: Program, first: Statement, second: Statement) -> str:
    """Where two ranks of one thread array are the two sides: one body runs both, so what
    one rank is to do and the other not goes under an `if` on the rank (a `notify` that every
    rank sets and every rank awaits is lost or hangs)."""
    names = [program.threads[s.thread].name for s in (first, second)]
    arrays = {name.split("[")[0] for name in names if "[" in name}
    if len(arrays) != 1 or not all("[" in name for name in names) or first.thread == second.thread:
        return ""
    rank = arrays.pop()
    one, two = (name[name.index("[") + 1:-1] for name in names)
    return (f"; both are ranks of `{rank}`, whose one body runs both sides: put each under an `if` on the rank "
            f"(`if {rank} == {one} {{ ... notify N }}`, `if {rank} == {two} {{ await N ... }}`)")


STALE_SCAN = 500
"""Statements `_stale_flag_wait` looks back over."""


def _ordering(program: Program, wait: Statement) -> bool:
    """A wait of the lowering's own (a comm's order, `comm_call`; a `wait_stream`'s or a
    peer copy's implicit event, named with `#`), which no help should ask the user to move."""
    return wait.form.endswith("(NCCL)") or (wait.event is not None and "#" in program.events[wait.event].name)


def _meant_for(wait: Statement, task: Statement, other: Statement, bound: bool) -> bool:
    """Whether `wait` (before `task` on its stream) can have been meant to order `task` after
    `other`. Where its own thread enqueues it before `other`, only if it binds to no record
    (`bound` false: it did nothing, the mark of a wait put before its record) and `task` reads
    or overwrites what `other` writes; not where it served an earlier access (an earlier
    iteration's record), nor where `task` overwrites what `other` only reads (a back-pressure
    wait for an earlier reader)."""
    if other.thread != wait.thread or other.index < wait.index:
        return True
    return not bound and any(x.write and x.conflicts(y) for x in other.accesses for y in task.accesses)


def _last_wait(program: Program, task: Statement) -> Statement | None:
    """The latest snapshot-event wait before `task` on its stream and thread (within
    STALE_SCAN statements): the one that was to order `task` after another stream's work."""
    thread = program.threads[task.thread].statements
    end = bisect_left(thread, task.index)
    for i in reversed(thread[max(0, end - STALE_SCAN):end]):
        wait = program.statements[i]
        if wait.op is Op.WAIT and wait.stream == task.stream and wait.event is not None \
                and not _ordering(program, wait):
            return None if program.events[wait.event].flag else wait
    return None


def _unused_record_help(program: Program, task: Statement, other: Statement, witness: Witness) -> str | None:
    """Where `other`'s thread already records an event on `other`'s stream after it, and the
    witness enqueues that record before `task`, but no wait on it comes before `task` on its
    stream: the fix is that wait, or moving the one that comes after `task` (a pipeline
    stage that copies before it waits). Not where a wait before `task` names one of those
    records that the witness enqueues before `task`: why that one did not order them is
    `_binding_help`'s to say. Of several records, one of an event nobody waits on."""
    if other.stream is None or task.stream is None:
        return None
    statements = program.statements
    recorded: dict[int, Statement] = {}  # event -> its first record on other's stream after other
    thread = program.threads[other.thread].statements
    start = bisect_left(thread, other.index) + 1
    for i in thread[start:start + STALE_SCAN]:
        record = statements[i]
        if (record.op is Op.RECORD and record.stream == other.stream and record.event is not None
                and not program.events[record.event].flag and "#" not in program.events[record.event].name):
            recorded.setdefault(record.event, record)
    if not recorded:
        return None
    thread = program.threads[task.thread].statements
    at = bisect_left(thread, task.index)
    before = []
    for i in reversed(thread[max(0, at - STALE_SCAN):at]):  # the waits just before task
        wait = statements[i]
        if wait.stream != task.stream:
            continue
        if wait.op is not Op.WAIT:
            break
        before.append(wait)
    issued: dict[int, int] = {}
    for k, step in enumerate(witness.steps):
        if step.kind is StepKind.ISSUE:
            issued.setdefault(step.statement, k)
    if task.index not in issued:
        return None
    enqueued_first = [r for r in recorded.values() if issued.get(r.index, len(witness.steps)) < issued[task.index]]
    if any(wait.event in recorded and recorded[wait.event] in enqueued_first for wait in before):
        return None
    # (a wait before `task` on an event recorded only after `task`, such as a ring slot's
    # guard, was not meant for this order: waiting on a record already there is the fix)
    waited = _waited_events(program)
    if not enqueued_first and other.thread != task.thread and not any(w.event in recorded for w in before) \
            and not _handed_off(program, task, other):
        # (another thread's record the witness enqueues late: the wait, after a hand-off; not
        # where a hand-off already puts `task` first, whose order goes the other way)
        enqueued_first = [r for r in recorded.values() if r.thread == other.thread]
    record = min(enqueued_first, key=lambda r: (r.event in waited, r.index), default=None)
    if record is None:
        return None
    event = program.events[record.event].name
    stream = program.streams[task.stream].written
    array = event.split("[")[0] if "[" in event else None
    for wait in before if array is not None else ():  # a wait just before task on another element of its array
        waited = program.events[wait.event].name if wait.event is not None else ""
        if waited.split("[")[0] == array:
            written = _event_as_written(program, record, task) or event
            return (f"{_quoted(program, wait)} waits on `{waited}`, but the record after "
                    f"{_quoted(program, other)} is {_quoted(program, record)}: the wait's index names another "
                    f"element of `{array}`. Wait on `{written}` there, or record the element the wait names")
    for i in thread[at + 1:at + 1 + STALE_SCAN]:  # a wait on it just after task
        late = statements[i]
        if late.stream != task.stream:
            continue
        if late.op is not Op.WAIT and late.accesses:
            break
        if late.op is Op.WAIT and late.event == record.event and late.span.line > task.span.line:
            # (a wait written before task is a later iteration's: moving it would change nothing)
            return (f"`{stream}: wait {event}` (line {late.span.line}) comes after {_quoted(program, task)} on "
                    f"`{stream}`, so it does not order it: a wait orders only the work enqueued after it on its "
                    f"stream. Move the wait before line {task.span.line}")
    follows = f"{_quoted(program, record)} follows {_quoted(program, other)} on `{program.streams[other.stream].written}`"
    where = f"before line {task.span.line}" + (_other_iteration(program, record, task) if array is not None else "")
    skipped = _skipped_wait(program, task, record)
    if skipped is not None:
        return (f"{_quoted(program, skipped)} would order it, but iteration {loop_text(task.bindings)} does not run "
                f"that line (a condition around it skips it there): wait in every iteration, or order this one "
                f"another way")
    written = _event_as_written(program, record, task)
    if written is not None:  # (the wait goes into the same block: named as its lines name them)
        stream, event, where = _stream_as_written(program, task), written, f"before line {task.span.line}"
    if record.thread == task.thread:  # (enqueued first in every execution)
        return (f"{follows}, and is enqueued before {_quoted(program, task)}: wait on it there "
                f"(`{stream}: wait {event}` {where})")
    if issued.get(record.index, len(witness.steps)) > issued[task.index]:
        return (f"{follows}, and `{program.threads[record.thread].name}` enqueues it: wait on it before "
                f"{_quoted(program, task)} (`{stream}: wait {event}` {where}), after a hand-off that makes the "
                f"record come first: `{program.threads[record.thread].name}` sets a notify after it (`notify N`) "
                f"and `{program.threads[task.thread].name}` `await N` before the wait")
    return (f"{follows}, and the execution shown enqueues it before {_quoted(program, task)}: wait on it there "
            f"(`{stream}: wait {event}` {where}; if the record is not always enqueued "
            "first, have the thread `await` a notify set after it)")


def _skipped_wait(program: Program, task: Statement, record: Statement) -> Statement | None:
    """A wait on `record`'s event, on `task`'s stream and written above it, that other
    iterations of `task`'s loop run but `task`'s does not (an `if` around it): the missing wait
    is there already, and adding it again would not say why it is missing."""
    if not task.bindings:
        return None
    thread = program.threads[task.thread].statements
    at = bisect_left(thread, task.index)
    window = [program.statements[i] for i in thread[max(0, at - 20 * STALE_SCAN):at + 20 * STALE_SCAN]]
    mine = dict(task.bindings)
    same = lambda x: all(mine.get(k, v) == v for k, v in x.bindings)  # noqa: E731  (task's iteration)
    ran = {x.span.start for x in window if same(x)}
    for wait in window:
        if wait.op is Op.WAIT and wait.stream == task.stream and wait.event == record.event \
                and wait.span.line < task.span.line and wait.span.start not in ran:
            return wait
    return None


def _event_as_written(program: Program, record: Statement, task: Statement) -> str | None:
    """The event of `record` as its line names it (`done[s]`, `e[rank]`), where that text
    names the same element at `task`'s line: every variable its index reads has the same value
    at `task` (a ring's slot `s`, though the iterations differ). A wait pasted there then fixes
    every iteration and rank, not only the one the witness shows. None otherwise."""
    event = program.events[record.event].name
    if "[" not in event or not record.bindings:
        return None
    written = re.match(r"[^:]*:\s*record\s+([A-Za-z_]\w*)\[([^\]\n]*)\]", program.source[record.span.start:record.span.end])
    if written is None or written.group(1) != event.split("[")[0]:
        return None
    mine, theirs = dict(record.bindings), dict(task.bindings)
    used = set(re.findall(r"[A-Za-z_]\w*", written.group(2)))  # (the variables the index reads)
    if not used or any(name not in mine or theirs.get(name) != mine[name] for name in used):
        return None
    return f"{written.group(1)}[{written.group(2)}]"


def _repeats(program: Program, statement: Statement) -> bool:
    """Whether `statement`'s line runs more than once in its thread (a loop's body), looking
    within 20 x STALE_SCAN statements either side."""
    thread = program.threads[statement.thread].statements
    at = bisect_left(thread, statement.index)
    return any(program.statements[i].span.start == statement.span.start and i != statement.index
               for i in thread[max(0, at - 20 * STALE_SCAN):at + 20 * STALE_SCAN])


def _other_iteration(program: Program, record: Statement, task: Statement) -> str:
    """Where a wait to add is in another loop iteration than its record, on an element of an
    event array: the element named is the record's, which the wait's line must reach from its
    own iteration. (A plain event needs no note: a wait binds to its latest record, which
    follows the earlier ones on their stream.) Iterations differ where a variable both lines
    have takes two values: a `let` outside the loop, or one the loop adds, makes none."""
    ranks = {program.threads[s.thread].name.split("[")[0] for s in (record, task)}  # (a thread array's index)
    theirs = dict(record.bindings)
    if not any(name in theirs and theirs[name] != value and name not in ranks for name, value in task.bindings):
        return ""
    return (f", in iteration {loop_text(task.bindings)}, for the record of iteration "
            f"{loop_text(record.bindings) or '(outside the loop)'}: index the event so that it names that record "
            "from there")


def _binding_help(program: Program, task: Statement, other: Statement, witness: Witness) -> str | None:
    """Why the wait before `task` did not order it after `other`, read off the witness: it
    bound to no record, to one enqueued on `other`'s stream before `other` (a stale one), or to
    a record on another stream that replaced the one on `other`'s stream."""
    wait = _last_wait(program, task)
    if wait is None or other.stream is None or _earlier_iteration(program, task, other):
        return None  # (a wait before an earlier round's access was not meant for a later round's)
    issued: dict[int, int] = {}
    issued_records: list[Statement] = []  # of the wait's event, as the witness issues them
    statements = program.statements
    for k, step in enumerate(witness.steps):
        if step.kind is StepKind.ISSUE and step.statement not in issued:
            issued[step.statement] = k
            statement = statements[step.statement]
            if statement.op is Op.RECORD and statement.event == wait.event:
                issued_records.append(statement)
    at, other_at = issued.get(wait.index), issued.get(other.index)
    if at is None or other_at is None:
        return None
    # Read off the records the witness issues, not every record of the event: a program of
    # 200,000 statements has tens of thousands, and a report hundreds of findings.
    before = sorted((r for r in issued_records if issued[r.index] < at), key=lambda r: r.index)
    bound = max(before, key=lambda r: issued[r.index]) if before else None
    if not _meant_for(wait, task, other, bound is not None):
        return None
    later = [r for r in issued_records if r.stream == other.stream and issued[r.index] > other_at]
    if later:
        after_other = min(later, key=lambda r: issued[r.index])
    else:  # a record the witness does not issue comes after all of it: the first such one
        after_other = next((r for r in _records(program).get(wait.event, [])
                            if r.stream == other.stream and r.index not in issued), None)
    stream = lambda s: program.streams[s.stream].written  # noqa: E731
    event = program.events[wait.event].name
    waits = f"`{stream(wait)}: wait {event}` (line {wait.span.line})"
    if bound is None:
        if after_other is None:
            return None
        record = f"`{stream(after_other)}: record {event}` (line {after_other.span.line})"
        if after_other.thread == wait.thread and after_other.index > wait.index:
            nothing = "it waits for nothing"
            if _repeats(program, wait):  # (a loop's line: later rounds bind to an earlier round's record)
                array = program.threads[wait.thread].name.split("[")[0]
                iteration = loop_text(tuple((k, v) for k, v in wait.bindings if k != array))
                nothing = (f"in iteration {iteration} it waits for nothing (in a later one, for an earlier "
                           "iteration's record, not this one's)")
            return (f"{waits} is enqueued before {record} by the same thread, so {nothing}: "
                    f"a wait binds to the latest record enqueued before it. Enqueue the record, after the work it "
                    f"marks, before the wait (move the wait, and what it orders, after line {after_other.span.line})")
        return (f"{waits} can be enqueued before {record}, and then waits for nothing: a wait binds to "
                "the latest record enqueued before it. Enqueue the record first (have the waiting thread "
                f"`await` a notify set after it){_flag_event_option(program, wait)}")
    if (bound.stream == other.stream and bound.thread == other.thread and bound.bindings == other.bindings
            and bound.index < other.index and bound.span.line < other.span.line and other.op is not Op.FREE
            and any(x.write and x.conflicts(y) for x in other.accesses for y in task.accesses)):
        # (the record of this very round, written just before the access it was to mark)
        between = [program.statements[i] for i in program.threads[other.thread].statements
                   if bound.index < i < other.index]
        if all(x.stream != other.stream or not x.accesses for x in between):
            return (f"{waits} binds to `{stream(bound)}: record {event}` (line {bound.span.line}), which is "
                    f"enqueued before {_quoted(program, other)} on `{stream(bound)}`, so it marks the work before "
                    f"it, not it: move the record after line {other.span.line}")
    if bound.stream == other.stream and issued[bound.index] < other_at and after_other is not None:
        # (with no record after `other`, the wait was never meant to cover it)
        instead = (f", not to the one after it (line {after_other.span.line})"
                   if after_other.span.line != bound.span.line else "")
        if wait.thread == other.thread:  # (one thread: no notify to add; the wait names the wrong event)
            thread = program.threads[other.thread].statements
            at = bisect_left(thread, other.index)
            marks = next((program.statements[i] for i in thread[at + 1:at + 1 + STALE_SCAN]
                          if program.statements[i].op is Op.RECORD and program.statements[i].stream == other.stream),
                         None)
            if marks is not None and marks.event != wait.event and marks.index < wait.index:
                return (f"{waits} can bind to an older `{stream(bound)}: record {event}` (line {bound.span.line}), "
                        f"enqueued before {_quoted(program, other)}: the record that follows that access on this "
                        f"thread is `{stream(marks)}: record {program.events[marks.event].name}` (line "
                        f"{marks.span.line}), of another event. Wait for the event recorded after the access "
                        "(check the index the wait names), or give each use its own event")
        return (f"{waits} can bind to an older `{stream(bound)}: record {event}` (line {bound.span.line}), "
                f"enqueued before {_quoted(program, other)}{instead}: a wait binds to the latest record "
                "enqueued before it. Make the wait come after the record that follows the first access "
                "(have the waiting thread `await` a notify set after it), or give each use its own event")
    if bound.stream != other.stream:
        replaced = [r for r in before if r.stream == other.stream and issued[r.index] > other_at]
        if replaced:
            return (f"{waits} binds to the latest `record {event}`, `{stream(bound)}: record {event}` "
                    f"(line {bound.span.line}), which replaced `{stream(replaced[-1])}: record {event}` "
                    f"(line {replaced[-1].span.line}): an event holds only its latest record. Record one "
                    f"event per stream and wait on each")
    return None


def _flag_event_option(program: Program, wait: Statement) -> str:
    """The flag-event alternative to enqueueing the record first, where the waiting stream's
    runtime has flag events (CANN's `ACL_EVENT_SYNC`); CUDA's `cudaStreamWaitEvent` always
    binds to the latest record, so under `runtime cuda` there is none to offer."""
    if program.devices[wait.device].runtime is Runtime.CUDA:
        return ""
    return ", or use a flag event (`event E flag`)"


def _early_wait(program: Program, task: Statement, other: Statement) -> tuple[Statement, Statement] | None:
    """The latest snapshot wait before `task` on its stream and thread (within STALE_SCAN
    statements), with a record of its event on `other`'s stream that another thread enqueues,
    or that this thread enqueues after the wait: the wait may bind to no record, or an older one."""
    thread = program.threads[task.thread].statements
    end = bisect_left(thread, task.index)
    for i in reversed(thread[max(0, end - STALE_SCAN):end]):
        wait = program.statements[i]
        if wait.op is not Op.WAIT or wait.stream != task.stream or wait.event is None or _ordering(program, wait):
            continue
        bound = any(r.thread == wait.thread and r.index < wait.index for r in _records(program).get(wait.event, ()))
        if program.events[wait.event].flag or not _meant_for(wait, task, other, bound) \
                or _earlier_iteration(program, task, other):
            return None
        for record in _records(program).get(wait.event, ()):
            if record.stream == other.stream and (record.thread != wait.thread or record.index > wait.index) \
                    and not (record.thread == other.thread and record.index < other.index):
                # (a record `other`'s thread enqueued before `other` on its stream orders nothing after it)
                return wait, record
        return None
    return None


_LAST_PROGRAM: dict[str, tuple[Program, object]] = {}
"""Per table, the one built for the last program asked about (findings come per program)."""


def _per_program(table: str, program: Program, build):
    """`build(program)`, kept until another program is asked about."""
    known = _LAST_PROGRAM.get(table)
    if known is None or known[0] is not program:
        known = _LAST_PROGRAM[table] = (program, build(program))
    return known[1]


def _records(program: Program) -> dict[int, list[Statement]]:
    """The records of each event."""
    def build(program: Program) -> dict[int, list[Statement]]:
        by_event: dict[int, list[Statement]] = {}
        for statement in program.statements:
            if statement.op is Op.RECORD and statement.event is not None:
                by_event.setdefault(statement.event, []).append(statement)
        return by_event
    return _per_program("records", program, build)


def _freed_memories(program: Program) -> frozenset[int]:
    """The memories some statement frees."""
    return _per_program("freed", program, lambda program: frozenset(
        m for s in program.statements if s.op is Op.FREE for m in s.lifetime_memories))


def _waited_events(program: Program) -> frozenset[int]:
    """Events that some `wait` names: a record of an event nobody waits on is the mark of a
    wait left out, so a help that adds one prefers it."""
    return _per_program("waited", program, lambda program: frozenset(
        s.event for s in program.statements if s.op is Op.WAIT and s.event is not None))


def _written_after_in_group(call: Statement, other: Statement) -> bool:
    """`other` is written after a group's call in the group: enqueued before the call by the
    same thread, yet written after it (work after the group comes after its calls, but for
    that of an earlier round of a loop around the group: other `bindings`)."""
    return (call.batch is not None and other.thread == call.thread and other.index < call.index
            and other.batch is None and other.bindings == call.bindings
            and (other.span.line, other.span.column) > (call.span.line, call.span.column))


def _record_inside_group(program: Program, task: Statement, other: Statement) -> Statement | None:
    """A record written after a group's call on its stream, inside the group (so enqueued
    before the call: `_written_after_in_group`), of an event that `other`'s stream waits on
    before `other`."""
    if task.batch is None or task.stream is None or other.stream is None:
        return None
    thread = program.threads[task.thread].statements
    end = bisect_left(thread, task.index)
    for i in reversed(thread[max(0, end - STALE_SCAN):end]):
        record = program.statements[i]
        if record.op is not Op.RECORD or record.stream != task.stream or record.event is None \
                or not _written_after_in_group(task, record):
            continue
        later = program.statements[record.index + 1:min(other.index, record.index + 1 + 20 * STALE_SCAN)]
        if any(w.op is Op.WAIT and w.stream == other.stream and w.event == record.event for w in later):
            return record
    return None


_RESET_THEN = (" and have the next record come after that reset (a flag holds one record: a second one made "
               "before the reset is lost, and the wait meant for it never passes)")


def _flag_passes_early(program: Program, task: Statement, other: Statement) -> str | None:
    """The flag wait before `task` (on its stream and thread) can pass on a record of its event
    other than the one after `other`: another stream's or thread's record, or (another thread's
    loop) an earlier one that nothing resets. A flag wait passes on any record, whenever made."""
    if task.stream is None or other.stream is None:
        return None
    thread = program.threads[task.thread].statements
    end = bisect_left(thread, task.index)
    wait = next((program.statements[i] for i in reversed(thread[max(0, end - STALE_SCAN):end])
                 if program.statements[i].op is Op.WAIT and program.statements[i].stream == task.stream), None)
    if wait is None or wait.event is None or not program.events[wait.event].flag:
        return None
    records = _records(program).get(wait.event, ())
    mine = lambda r: r.thread == other.thread and r.stream == other.stream  # noqa: E731
    if not any(mine(r) and r.index > other.index for r in records):
        return None  # (no record marks the access: the general help says to add one)
    event = program.events[wait.event].name
    waits = f"`{program.streams[task.stream].written}: wait {event}` (line {wait.span.line})"
    foreign = next((r for r in records if not mine(r)), None)
    if foreign is not None:
        return (f"{waits} passes once flag `{event}` is set, and {_quoted(program, foreign)} of "
                f"`{program.threads[foreign.thread].name}` can set it before {_quoted(program, other)} is done: a "
                f"flag wait passes on any record of its event. Give this hand-off an event of its own, or order "
                f"that record after the access")
    resets = any(s.op is Op.RESET and s.event == wait.event for s in program.statements)
    earlier = next((r for r in records if mine(r) and r.index < other.index), None)
    if earlier is None or resets or task.thread == other.thread:  # (one thread: `_stale_flag_wait`'s)
        return None
    return (f"{waits} can pass on an earlier {_quoted(program, earlier)}: a flag event stays set until it is "
            f"reset, so reset it once the wait is through (`{program.streams[task.stream].written}: reset "
            f"{event}`){_RESET_THEN}, or record a fresh event each time")


def _stale_flag_wait(program: Program, task: Statement) -> Statement | None:
    """The latest wait on a flag event before `task` on its stream and thread, if its thread
    records that event more than once and never resets it (within the last STALE_SCAN
    statements and up to `task`), and an earlier wait took an earlier record: the wait may
    pass on that stale record."""
    thread = program.threads[task.thread].statements
    end = bisect_left(thread, task.index)  # a thread's statements are in index order
    window = thread[max(0, end - STALE_SCAN):end + 1]
    for i in reversed(window):
        wait = program.statements[i]
        if wait.op is not Op.WAIT or wait.stream != task.stream or wait.event is None:
            continue
        if not program.events[wait.event].flag:
            return None
        uses = [program.statements[j].op for j in window
                if program.statements[j].event == wait.event and program.statements[j].sync is None]
        if uses.count(Op.RECORD) < 2 or Op.RESET in uses:
            return None
        # A reset after a wait clears a record that wait took (a loop's last round); a record
        # that no earlier wait took, a reset after the waits does not clear.
        before = [program.statements[j].op for j in window if j < wait.index
                  and program.statements[j].event == wait.event and program.statements[j].sync is None]
        if Op.RECORD not in before:
            return None
        first, last = before.index(Op.RECORD), len(before) - 1 - before[::-1].index(Op.RECORD)
        return wait if Op.WAIT in before[first + 1:last] else None  # (a record, a wait that took it, a record)
    return None


def use_after_free(program: Program, use: Statement, free: Statement | None, memory: Memory,
                   instances: int, witness: Witness | None, launch_order: bool = False,
                   while_running: bool = False) -> Finding:
    """An access that runs after (or, for stream-ordered frees, is enqueued after) a free."""
    double = use.op is Op.FREE and free is not None
    if double:
        by = lambda s: (f" of `{program.threads[s.thread].name}`"  # noqa: E731  (two threads of one line)
                        if use.thread != free.thread and use.span.line == free.span.line else "")
        message = (f"{_where(program, use)}{by(use)} frees `{memory.name}` again: {_where(program, free)}{by(free)} "
                   "frees it too")
        help = "free each allocation once, or `alloc` the buffer again between the two frees to start a new lifetime"
        alloc = (_alloc_between(program, free, use, memory.index) if use.thread == free.thread
                 and use.index > free.index else None)
        if alloc is not None and alloc.stream is not None and alloc.stream != use.stream:
            where = program.streams[alloc.stream].written
            help = (f"{_quoted(program, alloc)} allocates it again between the two frees, but only on `{where}`: "
                    f"the second free can run before that alloc does" + (
                        f" (`sync {where}` before it)" if use.stream is None else
                        f" (record an event on `{where}` after the alloc and wait on it on "
                        f"`{program.streams[use.stream].written}` before the free)"))
        if free.launch is not None and use.launch != free.launch and use.span == free.span:
            # (one free node, two launches: it ran before its own launch's alloc node)
            names = _Launches(program)
            help = (f"graph `{names.graph(free)}` frees `{memory.name}` at every launch (line {free.span.line}), and "
                    f"this free node can run before its launch's own alloc, freeing again what the last launch "
                    f"freed: order the free node after the graph's alloc and uses of `{memory.name}` (capture it "
                    f"on the stream that uses it last, or `record E` there and `wait E` before it)")
        elif free.launch is not None and use.launch != free.launch:  # (a graph frees it at every launch)
            names = _Launches(program)
            help = (f"`launch {names.graph(free)}` (line {names.launch(free).span.line}) already frees "
                    f"`{memory.name}` at every launch (line {free.span.line}): drop one of the two frees "
                    "(without the graph's free node, the allocation outlives the launch until this free)")
    elif while_running and free is not None:
        message = (f"{_where(program, use)} can still be running on `{memory.name}` when "
                   f"{_where(program, free)} frees it")
        help = _free_after_help(program, use, free, "to complete ")
    elif launch_order and free is not None and free.stream is None and not free.launch_only:
        message = f"{_where(program, use)} is enqueued after {_where(program, free)} began freeing `{memory.name}`"
        help = ("a host free may return at any time after it is called: make every use complete before "
                "the free is called (sync the streams that use it), and enqueue none after it")
    elif launch_order and free is not None:
        message = (f"{_where(program, use)} is enqueued after {_where(program, free)}, which frees "
                   f"`{memory.name}` for all work enqueued after it")
        help = ("enqueue every use before the free: a stream-ordered free invalidates the memory "
                "for all work enqueued after it, whenever that work runs")
        if free is not None and free.stream is None:  # (a tensor's `del`: the caching allocator's free)
            help = ("enqueue every use before the free: a tensor's free (PyTorch's `del`) hands its block back to "
                    "the caching allocator for all work enqueued after it, whenever that work runs")
    else:
        by = f"after {_where(program, free)} freed it" if free is not None else "after it is freed"
        message = f"{_where(program, use)} can touch `{memory.name}` {by}"
        help = _free_after_help(program, use, free)
    graph_help = None if double else _graph_lifetime_help(program, use, free, memory, launch_order)
    if graph_help is not None:
        help = graph_help
    statements = (use.index,) + ((free.index,) if free is not None else ())
    return Finding(FindingKind.USE_AFTER_FREE, message, statements, memory.buffer, memory.name,
                   instances, witness, help=help,
                   detail={"order": "launch"} if launch_order else {})


def _free_after_help(program: Program, use: Statement, free: Statement | None, complete: str = "") -> str:
    """How to make a free wait for a use, in the words each side can act on: a host free
    syncs (a host cannot `wait`), a stream free waits on an event, another thread's task is
    first handed over (`_across_threads`)."""
    general = (f"make the free wait for every use {complete}(record an event after the use and wait on it "
               "before the free)")
    if free is None or use.launch is not None:
        return general
    if use.thread == free.thread and use.index > free.index:
        alloc = _alloc_between(program, free, use, free.memory)
        if alloc is not None and alloc.stream is not None and alloc.stream == use.stream \
                and free.stream is not None and free.stream != alloc.stream:
            # (the use follows its alloc on one stream: the free, on another, may come after both)
            freeing, allocating = (program.streams[s.stream].written for s in (free, alloc))
            return (f"{_quoted(program, free)} is not ordered before {_quoted(program, alloc)}, so it can end the "
                    f"memory after the alloc made it live again: record an event on `{freeing}` after the free and "
                    f"wait on it on `{allocating}` before the alloc")
        if alloc is not None:
            return _after_alloc_help(program, use, alloc)
        return (f"{_quoted(program, use)} is {'enqueued' if use.stream is not None else 'issued'} after "
                f"{_quoted(program, free)}: move the use before the free (and make the free wait for it), or "
                "`alloc` the buffer again before the use")
    if use.stream is None:  # (a host statement records no event: the freeing side waits for the thread)
        if use.thread == free.thread:
            return general
        return (f"order the free after {_quoted(program, use)}: have `{program.threads[use.thread].name}` set a "
                f"notify after the use (`notify N`) and `{program.threads[free.thread].name}` `await N` before "
                f"{_quoted(program, free)}")
    same = use.thread == free.thread and use.bindings == free.bindings  # (one block: named as its lines are)
    stream = _stream_as_written(program, use) if same else program.streams[use.stream].written
    if free.stream is None:
        return _across_threads(program, free, use) or (
            f"make the host wait for the use before the free: `sync {stream}` (or `sync E` on an event "
            f"recorded after the use) before {_quoted(program, free)}")
    if free.stream != use.stream and free.thread != use.thread and not program.streams[free.stream].host_calls:
        named = program.threads[use.thread].name, program.threads[free.thread].name
        return (f"make the free wait for the use across the threads: `record E` on `{stream}` after it, "
                f"`{named[0]}` sets a notify after that (`notify N`), and `{named[1]}` `await N` and "
                f"`{program.streams[free.stream].written}: wait E` before {_quoted(program, free)}")
    if free.stream != use.stream and free.thread == use.thread and not program.streams[free.stream].host_calls:
        freeing = _stream_as_written(program, free) if same else program.streams[free.stream].written
        thread = program.threads[use.thread].statements
        between = thread[bisect_right(thread, use.index):bisect_left(thread, free.index)][:STALE_SCAN]
        record = next((r for r in map(program.statements.__getitem__, between)
                       if r.op is Op.RECORD and r.stream == use.stream and not program.events[r.event].flag), None)
        if record is not None and all(r.thread == use.thread and (r.index <= record.index or r.index > free.index)
                                      for r in _records(program).get(record.event, ())):
            # (a wait before the free binds to that record: the race help names the same wait)
            event = _event_as_written(program, record, free) or program.events[record.event].name
            return (f"{_quoted(program, record)} follows the use on `{stream}`: make the free wait on it "
                    f"(`{freeing}: wait {event}` before line {free.span.line})")
        return (f"make the free wait for the use: `record E` on `{stream}` after it, `wait E` on "
                f"`{freeing}` before {_quoted(program, free)}")
    return general


def _graph_lifetime_help(program: Program, use: Statement, free: Statement | None, memory: Memory,
                         launch_order: bool) -> str | None:
    """A dead use with a graph's work on either side: the order to add is inside the graph
    (a use and a free node of one launch) or around a launch, which the program can name."""
    if use.launch is None and (free is None or free.launch is None):
        return None
    names = _Launches(program)
    launch, where, captured = names.launch, names.stream, names.captured
    graph = lambda s: f"launch {names.graph(s)}"  # noqa: E731  (the call, as the spec writes it)
    if free is not None and free.launch is not None and free.launch == use.launch:
        if launch_order or free.index < use.index:
            return (f"in graph `{names.graph(use)}` the use is captured after the free node "
                    f"(line {free.span.line}): capture every use of `{memory.name}` before its free")
        return (f"order them inside graph `{names.graph(use)}`: `record E` on `{captured(use)}` "
                f"after the use, `wait E` on `{captured(free)}` before the free (or capture both on one stream)")
    if free is not None and free.launch is not None:  # (the graph frees what other work uses)
        if launch_order or (use.thread == launch(free).thread and use.index > launch(free).index):
            allocates = any(s.op is Op.ALLOC and s.launch == free.launch and s.memory == free.memory
                            for s in program.statements[free.launch:free.index])
            before = "" if allocates else "enqueue its uses before that launch, or "  # (else they run before its alloc)
            return (f"`{graph(free)}` (line {launch(free).span.line}) frees `{memory.name}` at every launch (line "
                    f"{free.span.line}): {before}free it outside the graph after them")
        if use.stream is None:
            return (f"make the launch wait for the host: do `{program.describe(use)}` before "
                    f"`{graph(free)}` (line {launch(free).span.line})")
        after = (f"`{program.streams[use.stream].written}` after it" if use.launch is None else
                 f"`{where(use)}` after `{graph(use)}` (line {launch(use).span.line})")  # (no graph's own stream)
        return (f"make the launch wait for the use: `record E` on {after}, "
                f"`wait E` on `{where(free)}` before `{graph(free)}` (line {launch(free).span.line})")
    stream = where(use)
    if free is not None and (launch_order or (launch(use).thread == free.thread and launch(use).index > free.index)):
        return (f"`{graph(use)}` (line {launch(use).span.line}) is enqueued after the free: launch every graph "
                f"that uses `{memory.name}` before freeing it (and make the free wait for those launches)")
    return (f"make the free wait for the graph: `sync {stream}` after `{graph(use)}` (line {launch(use).span.line}), "
            f"or record an event on `{stream}` there and wait on it before the free")


def _alloc_between(program: Program, first: Statement | None, use: Statement,
                   memory: int | None = None) -> Statement | None:
    """The latest `alloc` of `memory` (or of any memory `use` touches) that `use`'s thread
    enqueues after `first` (if given) and before `use` (within STALE_SCAN statements), if any:
    a use of two buffers is not ordered after the alloc of the one that is not the finding's."""
    memories = {memory} if memory is not None else {a.memory for a in use.accesses}
    thread = program.threads[use.thread].statements
    end = bisect_left(thread, use.index)
    for i in reversed(thread[max(0, end - STALE_SCAN):end]):
        if first is not None and i <= first.index:
            return None
        statement = program.statements[i]
        if statement.op is Op.ALLOC and statement.memory in memories:
            return statement
    return None


def _after_alloc_help(program: Program, use: Statement, alloc: Statement, again: bool = True) -> str:
    """How to order a use after the `alloc` its thread enqueued before it, by the words each
    side can act on: a stream alloc takes an event, a host alloc has returned already."""
    allocates = f"{_quoted(program, alloc)} allocates it{' again' if again else ''} before the use"
    if alloc.stream is None:
        return f"{allocates}: order the use after it"
    same = alloc.thread == use.thread and alloc.bindings == use.bindings  # (one block: named as its lines are)
    where = _stream_as_written(program, alloc) if same else program.streams[alloc.stream].written
    if alloc.launch is not None:  # (a graph's own stream: the order goes around its launch)
        where, launch = _nameable(program, alloc)
        if use.stream is None:
            return f"{allocates}, in the graph {launch} runs: `sync {where}` before the use"
        return (f"{allocates}, in the graph {launch} runs: record an event on `{where}` after the launch and "
                f"wait on it on `{program.streams[use.stream].written}` before the use")
    if use.stream is None:
        return f"{allocates}, on `{where}`: `sync {where}` before the use"
    if use.launch is not None:  # (a graph's work: the wait goes before its launch, on the launch stream)
        using, before = _before_use(program, use)
        return f"{allocates}, but only on `{where}`: record an event on `{where}` after it and wait on it on `{using}` {before}"
    using = _stream_as_written(program, use) if same else program.streams[use.stream].written
    return (f"{allocates}, but only on `{where}`: record an event on `{where}` after it and wait on it on "
            f"`{using}` before the use (or use it on `{where}`)")


def _before_use(program: Program, use: Statement) -> tuple[str, str]:
    """The stream a wait for `use` goes on, and where: before the use, or, for a graph's work,
    on its launch stream before its launch (the exec's own streams cannot be named)."""
    if use.launch is None:
        return program.streams[use.stream].written, "before the use"
    launches = _Launches(program)
    launch = launches.launch(use)
    return launches.stream(use), f"before `launch {launches.graph(use)}` (line {launch.span.line})"


def use_before_alloc(program: Program, use: Statement, memory: Memory, instances: int,
                     witness: Witness | None) -> Finding:
    help = "order the alloc before every use (same stream, an event, or a sync)"
    alloc = _alloc_between(program, None, use, memory.index)
    if alloc is None and use.stream is not None:  # (another thread's alloc: hand it over)
        other = next((s for s in program.statements if s.op is Op.ALLOC and s.thread != use.thread
                      and memory.index in s.lifetime_memories), None)
        if other is not None:
            named = program.threads[other.thread].name, program.threads[use.thread].name
            where = (f"`record E` on `{program.streams[other.stream].written}` after it, " if other.stream is not None
                     else "")
            using, before = _before_use(program, use)
            help = (f"{_quoted(program, other)} of `{named[0]}` allocates it, and `{named[1]}`'s use can come first: "
                    f"{where}have `{named[0]}` set a notify after that (`notify N`), and `{named[1]}` "
                    f"`await N`{' and `' + using + ': wait E`' if where else ''} {before}")
    if alloc is not None and alloc.stream != use.stream:
        again = any(program.statements[i].op is Op.FREE and program.statements[i].memory == alloc.memory
                    for i in program.threads[use.thread].statements if i < alloc.index)
        help = _after_alloc_help(program, use, alloc, again)
    return Finding(
        FindingKind.USE_BEFORE_ALLOC,
        f"{_where(program, use)} can touch `{memory.name}` before it is allocated",
        (use.index,), memory.buffer, memory.name, instances, witness, help=help,
    )


def _only_queued(item: Stuck) -> bool:
    """Whether a stuck task waits only for the task ahead of it on its stream (the words of
    `Machine.head_blocker`; a group member held by another member's queue says more)."""
    return item.waits_for.startswith("waiting for ") and " ahead of it on " in item.waits_for


def deadlock(program: Program, stuck: tuple[Stuck, ...], witness: Witness | None) -> Finding:
    """A reachable state with unfinished work and no step that can happen. `stuck` comes in
    the engine's order (`hb.py` puts a wait-for cycle first; the executor's machine lists by
    statement). Here one instance of every line goes before the loop instances of any, so that a short
    listing shows every place, and within each part, tasks that only queue behind another
    task of their stream go after the rest."""
    lines: set[int] = set()
    first, again = [], []
    for item in sorted(stuck, key=_only_queued):  # (stable: the engine's order within each)
        line = program.statements[item.statement].span.line
        (again if line in lines else first).append(item)
        lines.add(line)
    stuck = tuple(first + again)
    # One source statement can be lowered to parts (`free` under `runtime cuda`: a device
    # sync, then the free): a later part stuck behind an earlier one is one statement stuck.
    seen_parts: set = set()
    whole = []
    for item in stuck:
        statement = program.statements[item.statement]
        key = (statement.thread, statement.span.start, statement.bindings)
        if key in seen_parts and item.statement not in {kept.statement for kept in whole}:
            continue
        seen_parts.add(key)
        whole.append(item)
    stuck = tuple(whole)
    # A statement can be stuck twice over (a blocking copy: its task and its thread).
    statements = tuple(dict.fromkeys(item.statement for item in stuck))
    all_lines = list(dict.fromkeys(program.statements[i].span.line for i in statements))
    lines = ", ".join(str(line) for line in all_lines[:6])
    more = ", ..." if len(all_lines) > 6 else ""
    return Finding(
        FindingKind.DEADLOCK,
        f"deadlock: {len(statements)} {'statement' if len(statements) == 1 else 'statements'} can never "
        f"complete ({'line' if len(all_lines) == 1 else 'lines'} {lines}{more})",
        statements, witness=witness, stuck=stuck,
        help=_later_round_binding(program, statements, witness) or _deadlock_help(program, stuck),
    )


def _later_round_binding(program: Program, stuck: tuple[int, ...], witness: Witness | None) -> str | None:
    """A stuck `sync E` (or wait) that the witness binds to another thread's record of a later
    round of a loop: that thread ran ahead and recorded the event again before the sync was
    issued, and the new record waits for what this thread does after the sync. Moving the
    notify that releases it would only trade the hang for a race: the event is reused."""
    if witness is None:
        return None
    stuck_set = set(stuck)
    issued: dict[int, int] = {}
    for k, step in enumerate(witness.steps):
        if step.kind is StepKind.ISSUE:
            issued.setdefault(step.statement, k)
    for index in stuck:
        waiter = program.statements[index]
        event = (waiter.target if waiter.op is Op.SYNC and waiter.sync is SyncKind.EVENT
                 else waiter.event if waiter.op is Op.WAIT else None)
        if event is None or program.events[event].flag or index not in issued:
            continue
        records = [r for r in _records(program).get(event, ()) if issued.get(r.index, len(witness.steps)) < issued[index]]
        if not records:
            continue
        bound = max(records, key=lambda r: issued[r.index])
        mine, theirs = dict(waiter.bindings), dict(bound.bindings)
        later = [name for name in mine if name in theirs and theirs[name] > mine[name]]
        if bound.thread == waiter.thread or bound.index not in stuck_set or not later:
            continue
        name = program.events[event].name
        return (f"{_quoted(program, waiter)} {loop_text(waiter.bindings)} binds to {_quoted(program, bound)} of round "
                f"{loop_text(bound.bindings)}, which `{program.threads[bound.thread].name}` enqueued before the "
                f"{'sync' if waiter.op is Op.SYNC else 'wait'} was issued (it binds to the latest record enqueued "
                f"before it), and that record waits for what this thread does later: the event `{name}` is reused "
                f"too soon. Give each round its own event, or keep `{program.threads[bound.thread].name}` from "
                "recording it again until this thread has waited")


def _deadlock_help(program: Program, stuck: tuple[Stuck, ...]) -> str:
    """Advice for the commonest shapes of hang: a hardware queue, collectives or sends and
    recvs reached in crossed orders, a notify set only after a call that waits for it."""
    if any("hardware queue" in item.waits_for for item in stuck):
        devices = {program.streams[program.statements[item.statement].stream].device for item in stuck
                   if program.statements[item.statement].stream is not None}
        single = sorted(program.devices[d].name for d in devices if program.devices[d].queues == 1)
        move = (f" (under `queues 1` a device's streams all feed its one queue: {', '.join(f'`{n}`' for n in single)})"
                if devices and len(single) == len(devices)
                else ", or move one stream to another queue (declare the streams in another order)")
        return ("tasks of streams that share a hardware queue begin in the order they were enqueued "
                "(`queues N`: the i-th stream declared on a device feeds queue i mod N): a task that "
                f"waits for one enqueued after it into the same queue hangs; enqueue the partner first{move}")
    statements = [program.statements[i] for i in dict.fromkeys(item.statement for item in stuck)]
    meets = [s for s in statements if s.group is not None]
    if _crossed(program, meets):
        comms = list(dict.fromkeys(program.comms[s.comm].name for s in meets if s.comm is not None))
        pairs = any(s.op in (Op.SEND, Op.RECV) for s in meets)
        if len(comms) > 1:  # (the cycle goes through several comms: no one comm is out of order)
            named = ", ".join(f"`{c}`" for c in comms[:-1]) + f" and `{comms[-1]}`"
            return ((("a send completes only once its recv has started, and a collective once all its members "
                      "have") if pairs and any(s.op not in (Op.SEND, Op.RECV) for s in meets) else
                     "a send completes only once its recv has started" if pairs else
                     "a collective completes only once all its members have started")
                    + ", and here each waits for a partner queued behind a call of another comm"
                    + (" on its stream or its device's hardware queue (`queues N`)"
                       if any(program.streams[s.stream].queue is not None for s in meets) else "") + ": "
                    f"the ranks issue the calls of comms {named} in crossed orders. Issue every rank's calls of "
                    "these comms in one order (inside a `group`, they launch in the order the comms first "
                    "appear)" + (", or launch a rank's sends and recvs together (`group { ... }`)" if pairs else ""))
        if pairs:
            return ("a send and its matching recv complete only once both have started, and here each waits for a partner "
                    "that its stream queues behind another send or recv: launch a rank's sends and recvs "
                    "together (`group { ... }`, as ncclGroupStart/End do), or reverse the order on one side "
                    "(even ranks send first, odd ranks receive first)")
        queued = ("behind another collective on its stream or its device's hardware queue (`queues N`)"
                  if any(program.streams[s.stream].queue is not None for s in meets)
                  else "behind another collective")
        return (f"the members of a comm reach their collectives in different orders, so each waits for a "
                f"partner queued {queued}: issue the collectives in the same order on every member")
    held = [s for s in statements if s.stream is None or s.blocking]  # at most one per thread
    later: dict[int, dict[tuple, list[Statement]]] = {}  # per held call: what its thread sets after it
    for call in held:
        thread = program.threads[call.thread].statements
        at = bisect_left(thread, call.index)
        for i in thread[at + 1:at + 1 + STALE_SCAN]:
            t = program.statements[i]
            if t.op is Op.NOTIFY and t.notify is not None:
                later.setdefault(call.index, {}).setdefault(("notify", t.notify), []).append(t)
            elif t.op is Op.RECORD and t.event is not None and program.events[t.event].flag:
                later.setdefault(call.index, {}).setdefault(("flag", t.event), []).append(t)
    for s in statements:
        flag_wait = s.op is Op.WAIT and s.event is not None and program.events[s.event].flag
        if not flag_wait and (s.op is not Op.AWAIT or s.notify is None):
            continue
        key = ("flag", s.event) if flag_wait else ("notify", s.notify)
        for call in held:
            if call.index == s.index:
                continue  # (the await itself: what holds it is the question, not the answer)
            # (a notify queued behind the await on its own stream can never release it)
            setter = next((t for t in later.get(call.index, {}).get(key, ())
                           if s.stream is None or t.stream != s.stream), None)
            if setter is not None and flag_wait:
                return (f"{_quoted(program, setter)}, which would set the flag {_quoted(program, s)} waits for, "
                        f"comes after {_quoted(program, call)} on its thread, which is stuck too: record "
                        f"`{program.events[s.event].name}` before that call")
            if setter is not None:
                # (cudaFreeAsync frees device memory only: not the pinned memory of cudaFreeHost)
                freeing = call.stream is None and (call.op is Op.FREE or call.form.startswith("free ")) \
                    and "cudaFreeHost" not in call.form
                also = (", or free on a stream (`S: free`, as cudaFreeAsync does), which does not wait for "
                        "the device" if freeing else "")
                return (f"{_quoted(program, setter)}, which would release {_quoted(program, s)}, comes "
                        f"after {_quoted(program, call)} on its thread, which is stuck too: set "
                        f"`{program.notifies[s.notify].name}` before that call{also}{_too_few_sets(program, s.notify)}")
    blocked = _member_behind_a_call(program, statements, held)
    if blocked is not None:
        return blocked
    for s in meets:
        group = program.groups[s.group]
        if group.kind is GroupKind.SENDRECV and not group.complete and s.peer is not None:
            comm = program.comms[group.comm]
            here, peer = program.streams[s.rank_stream].written, program.streams[s.peer].written
            send = s.op is Op.SEND
            partner = f"recv {comm.name} from {here}" if send else f"send {comm.name} to {here}"
            return (f"{_quoted(program, s)} is {'send' if send else 'recv'} {group.position + 1} "
                    f"{'from' if send else 'on'} `{here}` {'to' if send else 'from'} `{peer}` on comm "
                    f"`{comm.name}`, and `{peer}` never issues a matching {'recv' if send else 'send'} "
                    f"{group.position + 1} (`{partner}`): every send needs a recv on its peer, as many each way "
                    "(one a rank skips, under a condition or in a loop of another count, hangs the other)")
        if group.kind is GroupKind.COLLECTIVE and not group.complete:
            comm = program.comms[group.comm]
            present = {program.statements[m].rank_stream for m in group.members}
            missing = [program.streams[m].written for m in comm.members if m not in present]
            other_kind = next((m for m in meets if m.comm == group.comm and m.op in (Op.SEND, Op.RECV)
                               and m.rank_stream not in present), None)
            if missing and other_kind is not None:  # (a point-to-point call where the collective should be)
                return (f"{_quoted(program, s)} is call {group.position + 1} of comm `{comm.name}`, a collective, and "
                        f"`{program.streams[other_kind.rank_stream].written}` issues {_quoted(program, other_kind)} "
                        f"there, a point-to-point call, which no collective matches (NCCL and HCCL hang): issue the "
                        f"same collective on every member, or a send and a recv on both sides")
            if missing:
                return (f"{_quoted(program, s)} is call {group.position + 1} of comm `{comm.name}` on its member, and "
                        f"{', '.join(f'`{m}`' for m in missing)} never issue{'s' if len(missing) == 1 else ''} a call "
                        f"{group.position + 1}: every member must issue the same collectives (a collective one rank "
                        "skips, under a condition or in a loop of another count, hangs the others)")
    never = _never_set_help(program, statements)
    if never is not None:
        return never
    if _crossed_by_threads(program, meets):
        return ("the ranks issue these collectives in different orders, and each waits (through the events and "
                "streams between them) for work behind a collective that another rank issues later: issue the "
                "collectives of every comm in the same order on every rank")
    return "every wait, await, sync and collective needs a partner that can still arrive"


def _too_few_sets(program: Program, notify: int) -> str:
    """The count a deadlock's first fix leaves, where a notify is set fewer times than it is
    awaited: fixing the order alone would leave an await that waits forever."""
    sets = sum(1 for t in program.statements if t.op is Op.NOTIFY and t.notify == notify)
    awaits = sum(1 for t in program.statements if t.op is Op.AWAIT and t.notify == notify)
    if sets >= awaits:
        return ""
    return (f"; and `{program.notifies[notify].name}` is set {sets} time{'s' * (sets != 1)} but awaited {awaits} "
            "times: set it once per await too")


def _never_set_help(program: Program, stuck: list[Statement]) -> str | None:
    """A stuck flag wait or await whose flag or notify nothing left can set: none is ever
    set, the only records are queued behind the wait on its own stream, the notify is set
    fewer times than it is awaited, or (a flag) a reset cleared the record it needed."""
    records: dict[int, Statement] = {}  # event -> its first stuck record
    notifies: dict[int, Statement] = {}  # notify -> its first stuck set
    for t in stuck:
        if t.op is Op.RECORD and t.event is not None:
            records.setdefault(t.event, t)
        elif t.op is Op.NOTIFY and t.notify is not None:
            notifies.setdefault(t.notify, t)
    for s in stuck:
        flag_wait = s.op is Op.WAIT and s.event is not None and program.events[s.event].flag
        if not flag_wait and not (s.op is Op.AWAIT and s.notify is not None):
            continue
        setter = records.get(s.event) if flag_wait else notifies.get(s.notify)
        if flag_wait and setter is not None:
            # (a record before the wait that a reset then cleared: the reset is the cause, not the
            # later round's record stuck behind the wait)
            earlier = [r for r in _records(program).get(s.event, ()) if r.index < s.index]
            thread = program.threads[s.thread].statements
            if earlier and any(program.statements[i].op is Op.RESET and program.statements[i].event == s.event
                               for i in thread[bisect_left(thread, earlier[-1].index):bisect_left(thread, s.index)]):
                setter = None
        if setter is not None:
            return (f"{_quoted(program, setter)}, which would release {_quoted(program, s)}, is stuck too, behind "
                    "what the wait holds up: enqueue it where nothing waits for the wait (another stream, or "
                    "before the wait)")
        if flag_wait:
            event = program.events[s.event].name
            recorded = _records(program).get(s.event, [])
            if not recorded:
                return (f"{_quoted(program, s)} waits for flag event `{event}`, which no statement records: a flag "
                        f"wait blocks until a record sets the flag; record `{event}` where the work it waits for ends")
            if all(r.stream == s.stream and r.thread == s.thread and r.index > s.index for r in recorded):
                return (f"{_quoted(program, s)} waits for flag event `{event}`, whose records are all queued behind "
                        f"it on `{program.streams[s.stream].written}`: record it on the stream that does the work, "
                        "before the wait")
            return (f"{_quoted(program, s)} waits for flag event `{event}`, and no record is left to set it: a flag "
                    "stays set from a record until a `reset`, so a reset (or a record that lands before an earlier "
                    "wait's reset) can clear the record a later wait needs; reset only once that wait is through, "
                    "or give each round its own event")
        else:
            notify = program.notifies[s.notify].name
            sets = sum(1 for t in program.statements if t.op is Op.NOTIFY and t.notify == s.notify)
            awaits = sum(1 for t in program.statements if t.op is Op.AWAIT and t.notify == s.notify)
            if sets == 0:
                return f"{_quoted(program, s)} waits for `{notify}`, which no statement sets (`notify {notify}`)"
            if sets < awaits:
                return (f"`{notify}` is set {sets} time{'s' * (sets != 1)} and awaited {awaits} times: each "
                        f"`notify` releases one `await`, so {_quoted(program, s)} waits forever; set it once per "
                        f"await, each set after the await before it took the last one (a `notify` that finds "
                        f"`{notify}` already set is lost: an await on the setting side, or a notify handed back)")
            return (f"{_quoted(program, s)} waits for `{notify}`, and no set of it is left: a `notify` that finds "
                    f"`{notify}` already set is lost, and each await takes one; set it only once the last one was "
                    "taken (an await before it, or one notify per waiter)")
    return None


def _crossed_by_threads(program: Program, meets: list[Statement]) -> bool:
    """Two stuck groups whose members two threads issue in opposite orders (a hang through
    events or blocking calls between the calls, where no one stream queues them)."""
    return _cyclic(program, meets, lambda s: s.thread)


def _member_behind_a_call(program: Program, stuck: list[Statement], held: list[Statement]) -> str | None:
    """A stuck collective whose partner a blocking call holds back: the call's thread issues
    the partner only after the call, and the call waits (for the device, or a stream) on
    work that the collective holds up."""
    groups = {s.group: s for s in stuck if s.group is not None}
    pending = {s.notify for s in stuck if s.op is Op.NOTIFY}
    for call in held:
        if call.op is Op.AWAIT and call.notify not in pending:
            continue  # (held by a notify no stuck work would set: lost, or never set; not by work)
        thread = program.threads[call.thread].statements
        at = bisect_left(thread, call.index)
        for i in thread[at + 1:at + 1 + STALE_SCAN]:
            partner = program.statements[i]
            waiting = groups.get(partner.group) if partner.group is not None else None
            if waiting is not None and waiting.index != partner.index:
                told = (f"{_quoted(program, call)} blocks `{program.threads[call.thread].name}` before it issues "
                        f"{_quoted(program, partner)}, the partner {_quoted(program, waiting)} waits for, while "
                        f"the call waits for work behind that collective")
                synced = next((m for m in stuck if m.group is not None and m.thread == call.thread
                               and m.index < call.index and m.comm is not None and m.comm != partner.comm
                               and call.sync is SyncKind.STREAM and m.stream == call.target), None)
                if synced is not None:  # (a sync of one comm's collective before the other's: crossed comms)
                    return (f"{told}, {_quoted(program, synced)}: the ranks call comms "
                            f"`{program.comms[synced.comm].name}` and `{program.comms[partner.comm].name}` in "
                            "opposite orders; issue the collectives of every comm in the same order on every rank")
                if call.sync in (SyncKind.DEVICE, SyncKind.ALL):
                    return f"{told}: issue the collective before the call, or sync the streams it needs, not the device"
                return f"{told}: issue the collective before the call"
    return None


CROSSED_GROUPS = 200
"""Stuck groups `_crossed` looks for a cycle among (the first ones: the engines list the cycle first)."""


def _queue_of(program: Program, stream: int) -> object:
    """What a task waits its turn in: its device's hardware queue under `queues N` (tasks of
    the queue's streams begin in enqueue order), else its stream."""
    s = program.streams[stream]
    return (s.device, s.context, s.queue) if s.queue is not None else stream


def _crossed(program: Program, meets: list[Statement]) -> bool:
    """Stuck groups that wait for one another around a cycle: on some stream (or hardware
    queue) a member of one group is queued behind a member of the next (two groups that two
    streams hold in opposite orders, or a ring of sends each queued behind the send of the
    rank it receives from), rather than a partner that never comes."""
    return _cyclic(program, meets, lambda s: _queue_of(program, s.stream))


def _cyclic(program: Program, meets: list[Statement], line) -> bool:
    """Whether the stuck groups (the first CROSSED_GROUPS complete ones), each ordered after
    the one before it along every `line` (a stream, a queue, a thread) that holds both, form
    a cycle."""
    along: dict[object, dict[int, int]] = {}  # line -> group -> its first stuck member there
    groups: dict[int, None] = {}
    for s in meets:
        if program.groups[s.group].complete and (s.group in groups or len(groups) < CROSSED_GROUPS):
            groups[s.group] = None
            along.setdefault(line(s), {}).setdefault(s.group, s.index)
    after = networkx.DiGraph()  # group -> the group just before it along some line
    for members in along.values():
        order = sorted(members, key=members.__getitem__)
        after.add_edges_from(zip(order[1:], order))
    try:
        networkx.find_cycle(after)
    except networkx.NetworkXNoCycle:
        return False
    return True


def unknown(message: str, help: str, statements: tuple[int, ...] = (), detail: dict | None = None) -> Finding:
    """A question left undecided: never reported as safe."""
    return Finding(FindingKind.UNKNOWN, message, statements, help=help, detail=detail or {})


def ms_text(ms: float) -> str:
    """Milliseconds for reading: 3 decimals, or 3 significant digits (down to the nanosecond)
    under 0.1 ms, so a sub-microsecond task does not read as `0.000 ms`."""
    if ms == 0 or abs(ms) >= 0.1:
        return f"{ms:.3f} ms"
    decimals = min(6, 2 - math.floor(math.log10(abs(ms))))
    return f"{ms:.{decimals}f} ms"


def exact_ms(ns: int | Fraction) -> str:
    """Nanoseconds as milliseconds, every digit kept (`4.999999`, `5`; `0.0000015` for 1.5 ns):
    a verdict must not round a limit and a makespan that differ by 1 ns to the same number."""
    value = Fraction(ns) / NS_PER_MS
    whole, rest = divmod(value.numerator, value.denominator)
    digits = []
    while rest and len(digits) < 40:  # (durations are decimals: their digits end)
        digit, rest = divmod(rest * 10, value.denominator)
        digits.append(str(digit))
    return f"{whole}.{''.join(digits)}" if digits else str(whole)
