"""Partial-order reduction for exploration: which steps may be explored alone.

A step can be taken alone from any state where it is enabled (a singleton ample set) when
it is invisible and independent of every other thread's and stream's steps: its process
cannot be overtaken by anything it conflicts with, it starts or ends no access and changes
no liveness (so races and dead uses look the same), and the state graph has no cycles
(every step makes irreversible progress). Deadlocks and the running/dead combinations that
define races and dead uses are all still reached. The analysis is static and conservative:
anything shared across threads disqualifies.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from checker.ir import Op, StreamMode, SyncKind
from checker.witness import Step, StepKind

if TYPE_CHECKING:
    from checker.executor.machine import Machine


class Reduction:
    """Per statement and kind of step: whether that step may be explored alone."""

    def __init__(self, machine: "Machine") -> None:
        p = machine.program
        n = machine.n
        streams_of_device = machine.device_streams
        plain_device = [
            not d.queues and not any(p.streams[s].mode is StreamMode.LEGACY
                                     for s in streams_of_device[d.index])
            for d in p.devices
        ]
        of_op = machine.of_op
        issuers: list[set[int]] = [set() for _ in p.streams]
        syncers: list[set[int]] = [set() for _ in p.streams]
        event_users: list[set[int]] = [set() for _ in p.events]
        for st in p.statements:
            if st.stream is not None:
                issuers[st.stream].add(st.thread)
            if st.event is not None:
                event_users[st.event].add(st.thread)
        reset_events = {p.statements[i].event for i in of_op.get(Op.RESET, ())}
        for i in of_op.get(Op.SYNC, ()):
            st = p.statements[i]
            if st.sync is SyncKind.EVENT:
                event_users[st.target].add(st.thread)
            for s in machine.sync_streams[i]:
                syncers[s].add(st.thread)
        frees = set(machine.frees)
        events = set(of_op.get(Op.RECORD, ())) | set(of_op.get(Op.WAIT, ()))
        syncs = set(of_op.get(Op.SYNC, ()))
        safe_issue = [False] * n
        safe_return = [False] * n
        safe_complete = [False] * n
        safe_interval = [False] * n
        for st in p.statements:
            i = st.index
            if st.stream is None:
                # A sync's return only waits for what stays true (tasks completed).
                safe_return[i] = i in syncs
                continue
            s = st.stream
            t = st.thread
            safe_return[i] = st.blocking
            # An issue that changes or tests launch-order liveness is visible (it can show a
            # use of memory enqueued after its free), so it is never taken alone.
            launch_visible = bool(machine.launch_life[i] or machine.launch_touch[i]
                                  or machine.block_allocs[i]  # (or before a block's alloc,
                                  or machine.tensor_frees[i])  # or after its own free)
            # A call of an interleaved comm takes the next position of its class when it is
            # enqueued: another thread's call of the class (on a stream of its own, as a
            # `one_in_flight` comm's off-member calls are) depends on which goes first.
            if (plain_device[st.device] and issuers[s] == {t} and syncers[s] <= {t}
                    and (st.event is None or event_users[st.event] == {t}) and not launch_visible
                    and machine.call_class[i] < 0):
                safe_issue[i] = True
            if i in events:
                safe_complete[i] = not p.events[st.event].flag or st.event not in reset_events
            if (machine.interval[i] and not machine.touch[i] and i not in frees
                    and not machine.in_group[i]):
                safe_interval[i] = True
        self.safe = {
            StepKind.ISSUE: tuple(safe_issue),
            StepKind.RETURN: tuple(safe_return),
            StepKind.COMPLETE: tuple(safe_complete),
            StepKind.START: tuple(safe_interval),
            StepKind.END: tuple(safe_interval),
        }
        """Per kind of step, per statement: whether it may be explored alone."""

    def reducible(self, step: Step) -> bool:
        """Whether `step` may be explored alone whenever it is enabled (see the module)."""
        return self.safe[step.kind][step.statement]
