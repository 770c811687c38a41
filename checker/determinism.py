"""Whether a program's orders depend on how its host threads interleave.

A program is *deterministic* when what every wait, sync and queue orders against is fixed:
no flag events, no notifies but one-shot hand-offs between host threads (a notify that one
statement sets and at most one statement awaits), no hardware queue or legacy-stream device
shared by two threads, and every stream and event that two threads use is used in an order
the threads' hand-offs fix: each enqueue onto the stream (record of the event) happens before
the next use on another thread in every execution, and each use before the next enqueue
(record) on another (collectives match by position, so comms may be shared). Such a program has one partial order
of steps (`checker/order.py`); the fast path and the optimizer's exact model both need it, and
the SMT engine takes the rest.

Most imported traces of several threads are such programs: where two threads use one stream,
or one waits for another's record, the importer keeps the trace's order with hand-offs.
"""

from __future__ import annotations

from collections import deque

from checker.collectives import interleaved_comms
from checker.ir import Op, Program, StreamMode, SyncKind

MAX_CLOCK_ENTRIES = 5_000_000
"""Uses of shared streams and events x threads whose hand-off clocks are compared; beyond
this the program is left to the solver."""


def nondeterminism(program: Program) -> str | None:
    """Why the order of this program depends on the interleaving, or None if it does not.

    The optimizer asks the same question before building its exact timing model.
    """
    problem = _handoff_problem(program)
    if problem is not None:
        return problem
    shared_calls = interleaved_comms(program)
    if shared_calls:
        # (a rank's calls enqueued by two threads on streams of their own, as a `one_in_flight`
        # comm allows: which of them meet depends on the enqueue order, which `Program.groups`
        # does not follow; two threads on one stream are caught below, as a shared stream)
        return f"two threads issue one rank's calls of comm `{program.comms[min(shared_calls)].name}`"
    order = _order(program)
    if order is None:
        return "its threads hand off to each other in a circle"
    users_stream: dict[int, set[int]] = {}
    users_event: dict[int, set[int]] = {}
    for st in program.statements:
        flagged = st.event if st.event is not None else (
            st.target if st.op is Op.SYNC and st.sync is SyncKind.EVENT else None)
        if flagged is not None and program.events[flagged].flag:
            return f"it uses flag events (`{program.events[flagged].name}`)"
        if st.stream is not None:
            users_stream.setdefault(st.stream, set()).add(st.thread)
        if st.event is not None:
            users_event.setdefault(st.event, set()).add(st.thread)
    enqueuers = {stream: set(users) for stream, users in users_stream.items()}  # (before the syncs count)
    for st in program.statements:
        if st.op is not Op.SYNC:
            continue
        if st.sync is SyncKind.EVENT:
            users_event.setdefault(st.target, set()).add(st.thread)
            continue
        for stream in program.synced_streams(st):  # a stream, a device's, all, or a set
            if stream in users_stream:
                users_stream[stream].add(st.thread)
    shared_streams = {stream for stream, users in users_stream.items() if len(users) > 1}
    shared_events = {event for event, users in users_event.items() if len(users) > 1}
    used_on: dict[int, list] = {}
    for s in program.streams:
        if s.index in users_stream:
            used_on.setdefault(s.device, []).append(s)
    for device in program.devices:
        used = used_on.get(device.index, [])
        if device.queues is not None:  # (hardware queues and the legacy stream are per process)
            by_queue: dict[tuple, set[int]] = {}
            for s in used:
                if s.queue is not None:  # (a graph exec's streams take no hardware queue)
                    by_queue.setdefault((s.context, s.queue), set()).update(users_stream[s.index])
            if any(len(users) > 1 for users in by_queue.values()):
                return f"threads share a hardware queue of `{device.name}`"
        for context in {s.context for s in used if s.mode is StreamMode.LEGACY}:
            users = set().union(*(users_stream[s.index] for s in used
                                  if s.context == context and s.mode is not StreamMode.NONBLOCKING))
            if len(users) > 1:
                return f"threads share the legacy stream of `{device.name}`"
    if not shared_streams and not shared_events:
        return None
    for st in program.statements:
        if st.stream in shared_streams and (st.group is not None or st.batch is not None):
            stream = program.streams[st.stream].name
            syncing = users_stream[st.stream] - enqueuers[st.stream]
            if len(enqueuers[st.stream]) == 1 and syncing:  # (one thread enqueues; another's sync waits for it)
                other = program.threads[min(syncing)].name
                return (f"threads share stream `{stream}` (`{other}` syncs it, and `{program.threads[st.thread].name}` "
                        "enqueues collective or batched calls on it)")
            return f"threads share stream `{stream}` (with collective or batched calls on it)"
    return _unordered_use(program, order, shared_streams, shared_events)


def _handoff_problem(program: Program) -> str | None:
    """Why the program's notifies are not one-shot hand-offs between host threads (each notified
    by one host statement and awaited by at most one), or None."""
    setters: dict[int, list[int]] = {}
    awaiters: dict[int, list[int]] = {}
    for st in program.statements:
        if st.op in (Op.NOTIFY, Op.AWAIT):
            if st.stream is not None:
                return "it uses notifies on streams"
            (setters if st.op is Op.NOTIFY else awaiters).setdefault(st.notify, []).append(st.index)
    for notify, found in awaiters.items():
        if len(found) > 1 or len(setters.get(notify, ())) != 1:
            return "it uses notifies (other than one notify and one await of each)"
    for notify, found in setters.items():
        if len(found) > 1:
            return "it uses notifies (other than one notify and one await of each)"
    return None


def host_order(program: Program) -> list[int] | None:
    """Every statement, in an order each thread's program order and each one-shot hand-off
    (its notify before its await) agree with; None where the hand-offs wait in a circle (or
    the notifies are no hand-offs). Each thread runs until an await whose notify has not come,
    and runs on once it comes: linear in the statements."""
    return None if _handoff_problem(program) is not None else _order(program)


def _order(program: Program) -> list[int] | None:
    """`host_order` of a program whose notifies are one-shot hand-offs."""
    statements = program.statements
    cursor = [0] * len(program.threads)
    notified: set[int] = set()
    blocked: dict[int, int] = {}
    """notify -> the thread waiting for it."""
    ready = deque(thread.index for thread in program.threads)
    out: list[int] = []
    while ready:
        thread = ready.popleft()
        mine = program.threads[thread].statements
        k = cursor[thread]
        while k < len(mine):
            st = statements[mine[k]]
            if st.op is Op.AWAIT and st.notify not in notified:
                blocked[st.notify] = thread
                break
            out.append(st.index)
            if st.op is Op.NOTIFY:
                notified.add(st.notify)
                if st.notify in blocked:
                    ready.append(blocked.pop(st.notify))
            k += 1
        cursor[thread] = k
    return out if len(out) == len(statements) else None


def _unordered_use(program: Program, order: list[int], streams: set[int], events: set[int]) -> str | None:
    """Why a stream or event two threads use is not used in one order fixed by the hand-offs,
    or None: in a hand-off order of the statements, each use that changes it (an enqueue onto
    the stream, a record of the event) happens before every later use on another thread, and
    every use happens before the next change on another thread; uses that only read it (syncs,
    waits) need not be ordered among themselves. Happens-before is a vector clock of the
    threads' positions, joined at each await with its notify's."""
    threads = len(program.threads)
    statements = program.statements
    uses = 0
    for st in statements:
        if st.stream in streams or st.event in events or (st.op is Op.SYNC and (
                (st.sync is SyncKind.EVENT and st.target in events)
                or (st.sync is not SyncKind.EVENT and streams.intersection(program.synced_streams(st))))):
            uses += 1
    if max(uses, threads) * threads > MAX_CLOCK_ENTRIES:
        return f"threads share streams or events in {uses:,} uses, too many to order ({threads} threads)"
    clock = {t.index: [-1] * threads for t in program.threads}
    position = [0] * len(statements)
    at_notify: dict[int, list[int]] = {}
    last_write: dict[tuple, tuple[int, int, str]] = {}
    """("stream" | "event", index) -> the thread and position of the latest use that changed it
    (an enqueue onto the stream, a record of the event)."""
    reads: dict[tuple, list[tuple[int, int, str]]] = {}
    """The uses since then that only read it (a sync of the stream; a wait for or sync of the
    event), with how a sync read it: they need not be ordered among themselves."""
    for i in order:
        st = statements[i]
        mine = clock[st.thread]
        if st.op is Op.AWAIT:
            mine[:] = [a if a >= b else b for a, b in zip(mine, at_notify[st.notify])]
        mine[st.thread] += 1
        position[i] = mine[st.thread]
        if st.op is Op.NOTIFY:
            at_notify[st.notify] = list(mine)
        used: list[tuple[str, int, bool, str]] = []
        if st.stream in streams:
            used.append(("stream", st.stream, True, ""))
        if st.event in events:
            used.append(("event", st.event, st.op is not Op.WAIT, ""))
        if st.op is Op.SYNC:
            if st.sync is SyncKind.EVENT:
                if st.target in events:
                    used.append(("event", st.target, False, ""))
            else:
                how = {SyncKind.STREAM: "it", SyncKind.DEVICE: "its device"}.get(st.sync, "it with others")
                used += [("stream", s, False, f" (one syncs {how})") for s in program.synced_streams(st) if s in streams]
        for kind, index, writes, how in used:
            key = (kind, index)
            earlier = [last_write[key]] if key in last_write else []
            if writes:
                earlier += reads.pop(key, [])
            for thread, at, used_how in earlier:
                if thread != st.thread and mine[thread] < at:
                    name = program.streams[index].name if kind == "stream" else program.events[index].name
                    return f"threads share {kind} `{name}`{how or used_how}"
            if writes:
                last_write[key] = (st.thread, position[i], how)
            else:
                reads.setdefault(key, []).append((st.thread, position[i], how))
    return None
