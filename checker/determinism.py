"""Whether a program's orders depend on how its host threads interleave.

A program is *deterministic* when what every wait, sync and queue orders against is fixed by
program order alone: no flag events, no notifies, and no stream, event, hardware queue or
legacy-stream device shared by two threads (collectives match by position, so comms may be
shared). Such a program has one partial order of steps (`checker/order.py`); the fast path
and the optimizer's exact model both need it, and the SMT engine takes the rest.
"""

from __future__ import annotations

from checker.ir import Op, Program, StreamMode, SyncKind


def nondeterminism(program: Program) -> str | None:
    """Why the order of this program depends on the interleaving, or None if it does not.

    The optimizer asks the same question before building its exact timing model.
    """
    owner_stream: dict[int, int] = {}
    owner_event: dict[int, int] = {}
    for st in program.statements:
        if st.op in (Op.NOTIFY, Op.AWAIT):
            return "it uses notifies"
        flagged = st.event if st.event is not None else (
            st.target if st.op is Op.SYNC and st.sync is SyncKind.EVENT else None)
        if flagged is not None and program.events[flagged].flag:
            return f"it uses flag events (`{program.events[flagged].name}`)"
        if st.stream is not None and owner_stream.setdefault(st.stream, st.thread) != st.thread:
            return f"threads share stream `{program.streams[st.stream].name}`"
        if st.event is not None and owner_event.setdefault(st.event, st.thread) != st.thread:
            return f"threads share event `{program.events[st.event].name}`"
    for st in program.statements:
        if st.op is not Op.SYNC:
            continue
        if st.sync is SyncKind.EVENT and owner_event.get(st.target, st.thread) != st.thread:
            return f"threads share event `{program.events[st.target].name}`"
        if st.sync is SyncKind.EVENT:
            continue
        for stream in program.synced_streams(st):  # a stream, a device's, all, or a set
            if owner_stream.get(stream, st.thread) != st.thread:
                how = {SyncKind.STREAM: "it", SyncKind.DEVICE: "its device"}.get(st.sync, "it with others")
                return f"threads share stream `{program.streams[stream].name}` (one syncs {how})"
    used_on: dict[int, list] = {}
    for s in program.streams:
        if s.index in owner_stream:
            used_on.setdefault(s.device, []).append(s)
    for device in program.devices:
        used = used_on.get(device.index, [])
        if device.queues is not None:  # (hardware queues and the legacy stream are per process)
            by_queue: dict[tuple, set[int]] = {}
            for s in used:
                by_queue.setdefault((s.context, s.queue or 0), set()).add(owner_stream[s.index])
            if any(len(owners) > 1 for owners in by_queue.values()):
                return f"threads share a hardware queue of `{device.name}`"
        for context in {s.context for s in used if s.mode is StreamMode.LEGACY}:
            owners = {owner_stream[s.index] for s in used
                      if s.context == context and s.mode is not StreamMode.NONBLOCKING}
            if len(owners) > 1:
                return f"threads share the legacy stream of `{device.name}`"
    return None
