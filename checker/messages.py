"""The one place that words findings: every engine reports typed facts through these.

The fast path, the SMT engine and the executor's explorer each find races, dead uses and
deadlocks. They hand the facts (which statements, which memory, how many loop instances, the
witness, who is stuck) to the functions here, so that the same race reads the same whichever
engine found it, and the help line fits the case (a host access is fixed with a `sync`, two
streams with an event, two threads with a notify).
"""

from __future__ import annotations

from bisect import bisect_left

from checker.findings import Finding, FindingKind, Stuck
from checker.ir import Memory, Op, Program, Statement
from checker.witness import Witness


def _where(program: Program, statement: Statement) -> str:
    return f"{program.describe(statement)} (line {statement.span.line})"


def race(program: Program, a: Statement, b: Statement, memory: Memory, instances: int,
         witness: Witness | None) -> Finding:
    """Two accesses to overlapping bytes, one a write, that some execution runs at once."""
    a, b = sorted((a, b), key=lambda s: s.index)
    name = f"`{memory.name}`"
    help = _race_help(program, a, b)
    if len(memory.owners) > 1:
        name += f" (one caching-allocator block, handed to {', '.join(f'`{o}`' for o in memory.owners)} in turn)"
        help = ("the allocator hands a freed block to the next allocation on its stream at once: record "
                "every other stream's use before the free (`S: record_stream T`), or order that use "
                "before the free with an event")
    return Finding(
        FindingKind.RACE,
        f"race on {name}: {_where(program, a)} and {_where(program, b)} can run at the same time",
        (a.index, b.index), memory.buffer, memory.name, instances, witness, help=help,
    )


def race_buffers(program: Program, pairs: list[tuple[Statement, Statement]]) -> list[tuple[int, Memory, int]]:
    """The declared buffers that the racing instance pairs of one pair of source statements
    conflict on, each as (the first pair that touches it, its memory there, how many pairs
    do). Running at once is a property of the pair, so every buffer on which one writes what
    the other touches races, and each is reported on its own (an `expect race on B` must see
    each), with a pair and a witness of its own."""
    found: dict[str, list] = {}
    for k, (a, b) in enumerate(pairs):
        seen: set[str] = set()
        for x in a.accesses:
            for y in b.accesses:
                if x.conflicts(y):
                    memory = program.memories[x.memory]
                    if memory.buffer not in seen:
                        seen.add(memory.buffer)
                        entry = found.setdefault(memory.buffer, [k, memory, 0])
                        entry[2] += 1
    return [(k, memory, count) for k, memory, count in found.values()]


def _race_help(program: Program, a: Statement, b: Statement) -> str:
    stream = lambda s: program.streams[s.stream].name  # noqa: E731
    if a.stream is None and b.stream is None:
        if a.thread == b.thread:
            return "the two host statements overlap: one must return before the other starts"
        return ("two host threads touch the bytes at once: order them with a notify "
                "(`notify N` after the first, `await N` before the second)")
    if a.stream is None or b.stream is None:
        task = a if b.stream is None else b
        return (f"make the host wait for the task before its access: `sync {stream(task)}` (or `sync E` "
                f"on an event recorded after the task)")
    if a.stream == b.stream:
        return ("the two tasks are launched together by one `group`: take one out of the group "
                "or give them separate buffers")
    for task, other in ((a, b), (b, a)):
        if "." in stream(task) and "." not in stream(other):  # an implicit default stream (`gpu0.default`)
            return (f"{_where(program, task)} runs on the device's default stream, which a spec cannot name: "
                    f"make the host wait for `{stream(other)}` before it (`sync {stream(other)}`); work its "
                    "thread enqueues after it is already ordered, since the call blocks until done")
    for task in (b, a):
        stale = _stale_flag_wait(program, task)
        if stale is not None:
            event = program.events[stale.event].name
            return (f"`{stream(task)}: wait {event}` (line {stale.span.line}) can pass on an earlier "
                    f"`record {event}`: a flag event stays set until it is reset, so reset it once the wait "
                    f"is through (`{stream(task)}: reset {event}`)")
    for task, other in ((a, b), (b, a)):
        early = _early_wait(program, task, other)
        if early is not None:
            wait, record = early
            event = program.events[wait.event].name
            return (f"`{stream(task)}: wait {event}` (line {wait.span.line}) can be enqueued before "
                    f"`{stream(record)}: record {event}` (line {record.span.line}), and then waits for nothing: "
                    "a wait binds to the latest record enqueued before it. Enqueue the record first (have "
                    "the waiting thread `await` a notify set after it), or use a flag event (`event E flag`)")
    return (f"order them with an event: `record E` on `{stream(a)}` after the first, "
            f"`wait E` on `{stream(b)}` before the second (or put both on one stream)")


STALE_SCAN = 500
"""Statements `_stale_flag_wait` looks back over."""


def _early_wait(program: Program, task: Statement, other: Statement) -> tuple[Statement, Statement] | None:
    """The latest snapshot wait before `task` on its stream and thread (within STALE_SCAN
    statements), with a record of its event on `other`'s stream that another thread enqueues,
    or that this thread enqueues after the wait: the wait may bind to no record, or an older one."""
    thread = program.threads[task.thread].statements
    end = bisect_left(thread, task.index)
    for i in reversed(thread[max(0, end - STALE_SCAN):end]):
        wait = program.statements[i]
        if wait.op is not Op.WAIT or wait.stream != task.stream or wait.event is None:
            continue
        if program.events[wait.event].flag:
            return None
        for record in _records(program).get(wait.event, ()):
            if record.stream == other.stream and (record.thread != wait.thread or record.index > wait.index):
                return wait, record
        return None
    return None


_RECORDS: dict[int, tuple[Program, dict[int, list[Statement]]]] = {}
"""The records of each event of the last program asked about (findings come per program)."""


def _records(program: Program) -> dict[int, list[Statement]]:
    known = _RECORDS.get(id(program))
    if known is None or known[0] is not program:
        _RECORDS.clear()
        by_event: dict[int, list[Statement]] = {}
        for statement in program.statements:
            if statement.op is Op.RECORD and statement.event is not None:
                by_event.setdefault(statement.event, []).append(statement)
        known = _RECORDS[id(program)] = (program, by_event)
    return known[1]


def _stale_flag_wait(program: Program, task: Statement) -> Statement | None:
    """The latest wait on a flag event before `task` on its stream and thread, if its thread
    records that event more than once and never resets it (within the last STALE_SCAN
    statements and up to `task`): the wait may pass on a stale record."""
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
        return wait if uses.count(Op.RECORD) > 1 and Op.RESET not in uses else None
    return None


def use_after_free(program: Program, use: Statement, free: Statement | None, memory: Memory,
                   instances: int, witness: Witness | None, launch_order: bool = False) -> Finding:
    """An access that runs after (or, for stream-ordered frees, is enqueued after) a free."""
    if launch_order and free is not None and free.stream is None and not free.launch_only:
        message = f"{_where(program, use)} is enqueued after {_where(program, free)} began freeing `{memory.name}`"
        help = ("a host free may return at any time after it is called: make every use complete before "
                "the free is called (sync the streams that use it), and enqueue none after it")
    elif launch_order and free is not None:
        message = f"{_where(program, use)} is enqueued after {_where(program, free)} freed `{memory.name}`"
        help = ("enqueue every use before the free: a stream-ordered free invalidates the memory "
                "for all work enqueued after it, whenever that work runs")
    else:
        by = f"after {_where(program, free)} freed it" if free is not None else "after it is freed"
        message = f"{_where(program, use)} can touch `{memory.name}` {by}"
        help = ("make the free wait for every use (record an event after the use and wait on it "
                "before the free)")
    statements = (use.index,) + ((free.index,) if free is not None else ())
    return Finding(FindingKind.USE_AFTER_FREE, message, statements, memory.buffer, memory.name,
                   instances, witness, help=help,
                   detail={"order": "launch"} if launch_order else {})


def use_before_alloc(program: Program, use: Statement, memory: Memory, instances: int,
                     witness: Witness | None) -> Finding:
    return Finding(
        FindingKind.USE_BEFORE_ALLOC,
        f"{_where(program, use)} can touch `{memory.name}` before it is allocated",
        (use.index,), memory.buffer, memory.name, instances, witness,
        help="order the alloc before every use (same stream, an event, or a sync)",
    )


def deadlock(program: Program, stuck: tuple[Stuck, ...], witness: Witness | None) -> Finding:
    """A reachable state with unfinished work and no step that can happen. `stuck` comes in
    the order to report it: the engine puts first what holds the rest (a wait-for cycle);
    tasks that only queue behind another task of their stream go last, and loop instances of
    a statement after one instance of every other (so that a short listing shows every place)."""
    leading = [item for item in stuck if " ahead of it on " not in item.waits_for]
    lines: set[int] = set()
    first, again = [], []
    for item in leading:
        line = program.statements[item.statement].span.line
        (again if line in lines else first).append(item)
        lines.add(line)
    stuck = tuple(first + again + [item for item in stuck if " ahead of it on " in item.waits_for])
    # A statement can be stuck twice over (a blocking copy: its task and its thread).
    statements = tuple(dict.fromkeys(item.statement for item in stuck))
    all_lines = list(dict.fromkeys(program.statements[i].span.line for i in statements))
    lines = ", ".join(str(line) for line in all_lines[:6])
    more = ", ..." if len(all_lines) > 6 else ""
    return Finding(
        FindingKind.DEADLOCK,
        f"deadlock: {len(statements)} {'statement' if len(statements) == 1 else 'statements'} can never "
        f"complete (lines {lines}{more})",
        statements, witness=witness, stuck=stuck,
        help=("tasks of streams that share a hardware queue begin in the order they were enqueued "
              "(`queues N`: the i-th stream declared on a device feeds queue i mod N): a task that "
              "waits for one enqueued after it into the same queue hangs; enqueue the partner first, "
              "or move one stream to another queue (declare the streams in another order)")
        if any("hardware queue" in item.waits_for for item in stuck) else
        "every wait, await, sync and collective needs a partner that can still arrive",
    )


def unknown(message: str, help: str, statements: tuple[int, ...] = (), detail: dict | None = None) -> Finding:
    """A question left undecided: never reported as safe."""
    return Finding(FindingKind.UNKNOWN, message, statements, help=help, detail=detail or {})
