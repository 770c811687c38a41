"""Steps that every maximal execution takes: a cheap proof of progress before the deadlock query.

A least fixpoint over steps. A step is *guaranteed* when the things it waits for are
guaranteed and its condition, once true, stays true (monotone): then in any state where
nothing can move, it has happened. Monotone conditions: program order, enqueue, stream
order, hardware-queue and legacy order, a snapshot wait's record (fixed at enqueue), the
tasks a sync waits for (fixed at its issue), a flag event that nothing resets (once set,
set for good), a collective group whose members are all present. An `await` is never
assumed to progress (another await can take its notify), nor a flag with a `reset`.

Tasks of other threads that *may* have been enqueued earlier count as waited for; "may"
is answered by the must-happen-before relation.

Uses: if every step is guaranteed, no execution deadlocks (the query is skipped);
otherwise the guaranteed steps are asserted to have happened in the deadlock query's final
state, which is sound (a stuck state has taken them) and prunes the search.
"""

from __future__ import annotations

from checker.ir import Op, Statement, StreamMode, SyncKind
from checker.smt.encode import Encoding
from checker.smt.order import MustOrder
from checker.witness import StepKind


class _Progress:
    def __init__(self, encoding: Encoding, order: MustOrder):
        self.encoding = encoding
        self.order = order
        self.program = encoding.program
        self.done: set[int] = set()
        program = self.program
        self.reset_events = {s.event for s in program.statements if s.op is Op.RESET}
        self.records = {}
        for s in program.statements:
            if s.op is Op.RECORD:
                self.records.setdefault(s.event, []).append(s)
        self.position = {}
        for thread in program.threads:
            for k, index in enumerate(thread.statements):
                self.position[index] = k

    def _issue(self, s: Statement) -> int:
        return self.encoding.step(StepKind.ISSUE, s.index)

    def may_precede(self, u: Statement, x: Statement) -> bool:
        """u's issue may come before x's issue in some execution."""
        if u.index == x.index:
            return False
        if u.thread == x.thread:
            return self.position[u.index] < self.position[x.index]
        return not self.order.precedes(self._issue(x), self._issue(u))

    def _all(self, steps) -> bool:
        return all(step in self.done for step in steps)

    def _flag_comes(self, event: int) -> bool:
        """The flag will be set for good: no reset, and some record surely completes."""
        if event in self.reset_events:
            return False
        return any(self.encoding.completion(r) in self.done for r in self.records.get(event, []))

    def _records_done(self, x: Statement, event: int) -> bool:
        return all(self.encoding.completion(r) in self.done
                   for r in self.records.get(event, []) if self.may_precede(r, x))

    def _task_ready(self, x: Statement) -> bool:
        """Enqueue, stream order, hardware queue and legacy order will all hold."""
        encoding, program = self.encoding, self.program
        if self._issue(x) not in self.done:
            return False
        stream = program.streams[x.stream]
        for u in program.statements:
            if u.stream is None or u.index == x.index or not self.may_precede(u, x):
                continue
            other = program.streams[u.stream]
            if u.stream == x.stream:
                need = encoding.completion(u)
            elif (other.device == stream.device and stream.queue is not None
                  and other.queue == stream.queue):
                need = encoding.begin(u)
            elif other.device == stream.device and {stream.mode, other.mode} == {
                    StreamMode.LEGACY, StreamMode.BLOCKING}:
                need = encoding.completion(u)
            else:
                continue
            if need not in self.done:
                return False
        return True

    def _first_step(self, x: Statement) -> bool:
        if not self._task_ready(x):
            return False
        if x.op is Op.AWAIT:
            return False
        if x.op is Op.WAIT:
            if self.program.events[x.event].flag:
                return self._flag_comes(x.event)
            return self._records_done(x, x.event)
        return True

    def _sync(self, sync: Statement) -> bool:
        encoding, program = self.encoding, self.program
        if sync.sync is SyncKind.EVENT:
            if program.events[sync.target].flag:
                return self._flag_comes(sync.target)
            return self._records_done(sync, sync.target)
        if sync.sync is SyncKind.STREAM:
            streams = {sync.target}
        elif sync.sync is SyncKind.DEVICE:
            streams = {s.index for s in program.streams if s.device == sync.target}
        else:
            streams = {s.index for s in program.streams}
        return all(encoding.completion(u) in self.done for u in program.statements
                   if u.stream in streams and self.may_precede(u, sync))

    def guaranteed(self, step: int) -> bool:
        encoding, program = self.encoding, self.program
        kind = encoding.steps[step].kind
        statement = program.statements[encoding.steps[step].statement]
        if kind is StepKind.ISSUE:
            previous = encoding.previous(statement)
            if previous is not None and encoding.thread_done(previous) not in self.done:
                return False
            return not (statement.stream is None and statement.op is Op.AWAIT)
        if kind is StepKind.RETURN:
            if self._issue(statement) not in self.done:
                return False
            if statement.op is Op.SYNC:
                return self._sync(statement)
            if statement.is_task:
                return encoding.completion(statement) in self.done
            return True
        if kind is StepKind.END:
            return encoding.step(StepKind.START, statement.index) in self.done
        if kind is StepKind.START and statement.group is not None:
            group = program.groups[statement.group]
            return group.complete and all(
                self._first_step(program.statements[m]) for m in group.members)
        return self._first_step(statement)

    def run(self) -> frozenset[int]:
        pending = list(range(len(self.encoding.steps)))
        changed = True
        while changed:
            changed = False
            still = []
            for step in pending:
                if self.guaranteed(step):
                    self.done.add(step)
                    changed = True
                else:
                    still.append(step)
            pending = still
        return frozenset(self.done)


def guaranteed_steps(encoding: Encoding, order: MustOrder) -> frozenset[int]:
    """Steps that every execution ending with nothing able to move has taken."""
    return _Progress(encoding, order).run()
