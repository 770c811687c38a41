"""The executor's state machine: the step semantics of `docs/semantics.md`, one step at a time.

This is the second, independent implementation of the semantics (the SMT encoder is the
first). Every executor mode goes through the same rules here: `replay` checks a witness step
by step, `explore` enumerates every interleaving, `simulate` fires steps in time order.

Representation, chosen so that a million states fit in a minute:

* `State` is a NamedTuple of small immutable pieces. Per-statement status is one `bytes`
  object (its hash is cached by CPython); sets of running statements and of dead memory
  segments are Python ints used as bitmasks.
* Facts that the contract fixes at enqueue time (which record a `wait` binds to, which tasks
  a `sync` waits for, which earlier tasks a hardware queue or the legacy stream orders a task
  after) are captured at the `issue` step into `State.bind`, a compact tuple with one slot
  per statement that needs one. Later steps only test those captured facts.
* Memory is cut into segments at every boundary any access or lifetime statement uses, so
  liveness and overlap are bit operations.

One step function: `blocker(view, step)` says whether a step may happen and `effects(view,
step)` what it changes, as a list of updates. Both read any object with the `State` field
names, so `apply` (a new immutable State, for replay and explore) and the simulator (its own
mutable copy, for 100,000-task runs) share every rule. `reducible` marks the steps that
exploration may take alone (partial-order reduction; see `_reduction_tables`).
"""

from __future__ import annotations

from bisect import bisect_left
from collections import deque
from dataclasses import dataclass
from typing import NamedTuple

from checker.ir import Op, Program, Statement, StreamMode, SyncKind
from checker.witness import Step, StepKind, holds_thread

_ISSUE, _RETURN, _START, _END, _COMPLETE = (
    StepKind.ISSUE, StepKind.RETURN, StepKind.START, StepKind.END, StepKind.COMPLETE)
# Enum member lookups are slow on the hot path; bind them once.
(_OP_KERNEL, _OP_COPY, _OP_CALLBACK, _OP_RECORD, _OP_WAIT, _OP_RESET, _OP_NOTIFY, _OP_AWAIT,
 _OP_ALLREDUCE, _OP_SEND, _OP_RECV, _OP_ALLOC, _OP_FREE, _OP_HOST, _OP_SYNC) = (
    Op.KERNEL, Op.COPY, Op.CALLBACK, Op.RECORD, Op.WAIT, Op.RESET, Op.NOTIFY, Op.AWAIT,
    Op.ALLREDUCE, Op.SEND, Op.RECV, Op.ALLOC, Op.FREE, Op.HOST, Op.SYNC)
_SYNC_STREAM, _SYNC_EVENT, _SYNC_DEVICE, _SYNC_ALL = (
    SyncKind.STREAM, SyncKind.EVENT, SyncKind.DEVICE, SyncKind.ALL)

NEW, QUEUED, RUNNING, DONE = 0, 1, 2, 3
"""Statement status codes. A host statement is RUNNING while its thread holds it."""

PRECOMPUTE_CONFLICTS = 4000
"""Up to this many statements, every statement's conflict set is one precomputed bitmask
(fast for exploration); above it, conflicts are tested pairwise against what is running."""

USE_AFTER_FREE, ENQUEUED_AFTER_FREE, USE_BEFORE_ALLOC = "use-after-free", "enqueued-after-free", "use-before-alloc"
"""Dead uses a step can show: an access starting on freed bytes, a statement enqueued after a
free of its memory (launch order), an access starting on bytes not allocated yet."""

NEED_BEGUN, NEED_DONE = 1, 2
"""What a captured ordering dependency asks of an earlier task."""

_BYTE = tuple(bytes([v]) for v in range(4))

(U_STATUS, U_THREAD, U_ENQUEUE, U_DEQUEUE, U_LAST, U_BIND, U_FLAGS, U_NOTES, U_DEAD, U_FREED,
 U_RUNNING, U_LAUNCH) = range(12)
"""(U_ENQUEUE also moves the stream's tail; U_DEQUEUE removes one given task from its queue.)"""
"""Update codes produced by `Machine.effects`: (code, index, value) or (code, value)."""


class IllegalStep(ValueError):
    """Raised by `Machine.apply` when a step may not happen in the given state."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class State(NamedTuple):
    """One reachable configuration. Immutable and hashable; equal states behave alike."""

    threads: tuple[int, ...]
    """Per thread: 2 * (position of the statement it is at) + 1 while that statement holds it."""
    status: bytes
    """Per statement: NEW, QUEUED, RUNNING or DONE."""
    queues: tuple[tuple[int, ...], ...]
    """Per stream: enqueued tasks that have not completed, in enqueue order."""
    tails: tuple[int, ...]
    """Per stream: the task enqueued last so far (-1: none), completed or not. Syncs and
    ordering dependencies capture this rather than the queue, so that capturing commutes
    with tasks completing (which keeps partial-order reduction simple)."""
    last_record: tuple[int, ...]
    """Per event: the latest `record` enqueued so far (-1: none)."""
    bind: tuple
    """Per binding slot: what an issued wait/sync/task captured when it was enqueued."""
    flags: int
    """Bit e set: flag event e is set."""
    notes: int
    """Bit n set: notify n is set."""
    dead: int
    """Bit g set: memory segment g is not alive."""
    freed: int
    """Bit g set: segment g has been freed at least once (dead by free, not never-allocated)."""
    running: int
    """Bit i set: statement i's accesses are running."""
    launch_dead: int
    """Bit g set: segment g is freed in launch order (a free of it was enqueued since it was
    last allocated): work enqueued now would use freed memory."""


@dataclass(frozen=True, slots=True)
class Transition:
    """The result of one step: the new state plus what the step started that is wrong."""

    state: State
    races: tuple[tuple[int, int], ...] = ()
    """(earlier-running statement, statement this step started) for each conflicting pair."""
    dead_uses: tuple[tuple[int, str], ...] = ()
    """(statement, USE_AFTER_FREE | ENQUEUED_AFTER_FREE | USE_BEFORE_ALLOC) for each dead use."""


class _StepTable(dict):
    """Step objects for one kind, made on first use and then shared (lookups stay in C)."""

    __slots__ = ("kind",)

    def __init__(self, kind: StepKind, n: int) -> None:
        super().__init__()
        self.kind = kind

    def __missing__(self, i: int) -> Step:
        step = self[i] = Step(self.kind, i)
        return step


def _bits(mask: int):
    """Indices of set bits, lowest first."""
    while mask:
        low = mask & -mask
        yield low.bit_length() - 1
        mask ^= low


class Layout:
    """Memory cut into segments: every access and lifetime range becomes a bitmask.

    Kept separate from the machine so the replay's byte model can use the same segments.
    """

    def __init__(self, program: Program) -> None:
        cuts: list[set[int]] = [{0, m.size} for m in program.memories]
        for st in program.statements:
            for acc in st.accesses:
                cuts[acc.memory].update((acc.start, acc.end))
        self.cuts: tuple[tuple[int, ...], ...] = tuple(tuple(sorted(c)) for c in cuts)
        first: list[int] = []
        total = 0
        for c in self.cuts:
            first.append(total)
            total += len(c) - 1
        self.first = tuple(first)
        """Global index of each memory's first segment."""
        self.count = total
        self.owner = tuple(m for m, c in enumerate(self.cuts) for _ in range(len(c) - 1))
        """Memory of each global segment."""

    def mask(self, memory: int, start: int, end: int) -> int:
        """Bitmask of the segments covering [start, end) of `memory`."""
        c = self.cuts[memory]
        lo = bisect_left(c, start)
        hi = bisect_left(c, end)
        if hi <= lo:
            return 0
        base = self.first[memory]
        return ((1 << (hi - lo)) - 1) << (base + lo)

    def segment_range(self, segment: int) -> tuple[int, int, int]:
        """(memory, start byte, end byte) of a global segment."""
        m = self.owner[segment]
        k = segment - self.first[m]
        return m, self.cuts[m][k], self.cuts[m][k + 1]


class Machine:
    """The step semantics of one program. Build once, then ask `enabled` and `apply`."""

    def __init__(self, program: Program) -> None:
        self.program = program
        p = program
        n = len(p.statements)
        self.n = n
        self.layout = Layout(p)
        lay = self.layout
        self.thread_of = tuple(st.thread for st in p.statements)
        self.thread_stmts = tuple(t.statements for t in p.threads)
        self.position = [0] * n
        for t in p.threads:
            for k, i in enumerate(t.statements):
                self.position[i] = k
        self.interval = tuple(
            st.running for st in p.statements
        )
        self.holds = tuple(holds_thread(st) for st in p.statements)
        self.duration = tuple(st.duration for st in p.statements)
        self.flag_event = tuple(e.flag for e in p.events)
        # Touched segments and lifetime masks.
        touch = []
        life = []
        for st in p.statements:
            m = 0
            for acc in st.accesses:
                m |= lay.mask(acc.memory, acc.start, acc.end)
            touch.append(m)
            if st.op in (_OP_ALLOC, _OP_FREE) and st.memory is not None and not st.launch_only:
                ranges = [a for a in st.accesses if a.memory == st.memory]
                if ranges:
                    lm = 0
                    for a in ranges:
                        lm |= lay.mask(a.memory, a.start, a.end)
                else:
                    mem = p.memories[st.memory]
                    lm = lay.mask(st.memory, 0, mem.size)
                life.append(lm)
            else:
                life.append(0)
        self.touch = tuple(touch)
        self.life = tuple(life)
        self.launch_life = tuple(
            lay.mask(st.memory, 0, p.memories[st.memory].size)
            if st.op in (_OP_ALLOC, _OP_FREE) and st.memory is not None else 0
            for st in p.statements
        )
        """alloc/free: the segments whose launch-order liveness the statement changes."""
        initially_dead = 0
        for st in p.statements:
            if st.op is _OP_ALLOC and not st.launch_only:
                initially_dead |= self.life[st.index]
        # Streams: hardware-queue and legacy relations, captured as dependencies at enqueue.
        self.queue_peers: list[tuple[int, ...]] = []
        self.legacy_peers: list[tuple[int, ...]] = []
        for s in p.streams:
            dev = p.devices[s.device]
            if dev.queues and s.queue is not None:
                peers = tuple(
                    o.index for o in p.streams
                    if o.index != s.index and o.device == s.device and o.queue == s.queue
                )
            else:
                peers = ()
            self.queue_peers.append(peers)
            if s.mode is StreamMode.LEGACY:
                lp = tuple(
                    o.index for o in p.streams
                    if o.device == s.device and o.index != s.index and o.mode is StreamMode.BLOCKING
                )
            elif s.mode is StreamMode.BLOCKING:
                lp = tuple(
                    o.index for o in p.streams
                    if o.device == s.device and o.index != s.index and o.mode is StreamMode.LEGACY
                )
            else:
                lp = ()
            self.legacy_peers.append(lp)
        self.device_streams = tuple(
            tuple(s.index for s in p.streams if s.device == d.index) for d in p.devices
        )
        self.sync_streams = tuple(
            p.synced_streams(st) if st.op is _OP_SYNC else () for st in p.statements
        )
        # Binding slots.
        wslot = [-1] * n
        dslot = [-1] * n
        slots = 0
        for st in p.statements:
            if st.op is _OP_WAIT and st.stream is not None and not p.events[st.event].flag:
                wslot[st.index] = slots
                slots += 1
            elif st.op is _OP_SYNC and not (
                st.sync is _SYNC_EVENT and p.events[st.target].flag
            ):
                wslot[st.index] = slots
                slots += 1
            if st.stream is not None and (
                self.queue_peers[st.stream] or self.legacy_peers[st.stream]
            ):
                dslot[st.index] = slots
                slots += 1
        self.wslot = tuple(wslot)
        self.dslot = tuple(dslot)
        self.group_of = [None] * n
        for g in p.groups:
            for m in g.members:
                self.group_of[m] = g
        self.batch = tuple(st.batch for st in p.statements)
        siblings: list[tuple[int, ...]] = [() for _ in range(n)]
        seen_batch: dict[tuple[int, int], list[int]] = {}
        for t in p.threads:
            for i in t.statements:
                st = p.statements[i]
                if st.batch is not None and st.stream is not None:
                    earlier = seen_batch.setdefault((st.stream, st.batch), [])
                    siblings[i] = tuple(earlier)
                    earlier.append(i)
        self.siblings = tuple(siblings)
        """Earlier tasks of the same batch on the same stream: waiting for a batch member that
        was enqueued last on its stream means waiting for these too."""
        self._conflicts: tuple[int, ...] | None = None
        self._pair_cache: dict[tuple[int, int], bool] = {}
        self._described: dict[int, str] = {}
        self._reduction_tables()
        self._init = State(
            threads=tuple(0 for _ in p.threads),
            status=bytes(n),
            queues=tuple(() for _ in p.streams),
            tails=tuple(-1 for _ in p.streams),
            last_record=tuple(-1 for _ in p.events),
            bind=tuple(-1 for _ in range(slots)),
            flags=0,
            notes=0,
            dead=initially_dead,
            freed=0,
            running=0,
            launch_dead=0,
        )
        self.initially_dead = initially_dead
        self.allocs = tuple(st.index for st in p.statements if st.op is _OP_ALLOC)
        # Cached step objects: enabled() hands out the same instances every time.
        self.steps = {kind: _StepTable(kind, n) for kind in StepKind}

    # ------------------------------------------------------------------ partial-order reduction

    def _reduction_tables(self) -> None:
        """Which steps are invisible and independent of every other thread's and stream's steps.

        Such a step can be taken alone from any state where it is enabled (a singleton ample
        set): its process cannot be overtaken by anything it conflicts with, it starts or ends
        no access and changes no liveness (so races and dead uses look the same), and the
        state graph has no cycles (every step makes irreversible progress). Deadlocks and the
        running/dead combinations that define races and dead uses are all still reached.
        The analysis is static and conservative: anything shared across threads disqualifies.
        """
        p = self.program
        n = self.n
        streams_of_device = self.device_streams
        plain_device = [
            not d.queues and not any(p.streams[s].mode is StreamMode.LEGACY
                                     for s in streams_of_device[d.index])
            for d in p.devices
        ]
        issuers: list[set[int]] = [set() for _ in p.streams]
        syncers: list[set[int]] = [set() for _ in p.streams]
        event_users: list[set[int]] = [set() for _ in p.events]
        reset_events: set[int] = set()
        for st in p.statements:
            if st.stream is not None:
                issuers[st.stream].add(st.thread)
            if st.event is not None:
                event_users[st.event].add(st.thread)
            if st.op is _OP_RESET:
                reset_events.add(st.event)
            if st.op is _OP_SYNC:
                if st.sync is _SYNC_EVENT:
                    event_users[st.target].add(st.thread)
                for s in p.synced_streams(st):
                    syncers[s].add(st.thread)
        freed = {st.memory for st in p.statements if st.op is _OP_FREE}
        self.safe_issue = [False] * n
        self.safe_return = [False] * n
        self.safe_complete = [False] * n
        self.safe_interval = [False] * n
        for st in p.statements:
            i = st.index
            if st.stream is None:
                self.safe_return[i] = st.op is _OP_SYNC
                continue
            s = st.stream
            t = st.thread
            self.safe_return[i] = st.blocking
            # An issue that changes or tests launch-order liveness is visible (it can show a
            # use of memory enqueued after its free), so it is never taken alone.
            launch_visible = st.op in (_OP_ALLOC, _OP_FREE) or any(
                a.memory in freed for a in st.accesses)
            if (plain_device[st.device] and issuers[s] == {t} and syncers[s] <= {t}
                    and (st.event is None or event_users[st.event] == {t}) and not launch_visible):
                self.safe_issue[i] = True
            if st.op is _OP_RECORD or st.op is _OP_WAIT:
                self.safe_complete[i] = not p.events[st.event].flag or st.event not in reset_events
            if (self.interval[i] and not self.touch[i] and st.op is not _OP_FREE
                    and self.group_of[i] is None):
                self.safe_interval[i] = True

    def reducible(self, step: Step) -> bool:
        """Whether `step` may be explored alone whenever it is enabled (see above)."""
        kind = step.kind
        i = step.statement
        if kind is _ISSUE:
            return self.safe_issue[i]
        if kind is _COMPLETE:
            return self.safe_complete[i]
        if kind is _RETURN:
            return self.safe_return[i]
        return self.safe_interval[i]

    # ------------------------------------------------------------------ static facts

    @property
    def conflicts(self) -> tuple[int, ...]:
        """Per statement: bitmask of the other statements whose accesses conflict with it."""
        if self._conflicts is None:
            by_memory: dict[int, list[tuple[int, object]]] = {}
            for st in self.program.statements:
                for acc in st.accesses:
                    by_memory.setdefault(acc.memory, []).append((st.index, acc))
            masks = [0] * self.n
            for items in by_memory.values():
                items.sort(key=lambda x: x[1].start)
                for k, (i, a) in enumerate(items):
                    for j, b in items[k + 1:]:
                        if b.start >= a.end:
                            break
                        if i != j and (a.write or b.write):
                            masks[i] |= 1 << j
                            masks[j] |= 1 << i
            self._conflicts = tuple(masks)
        return self._conflicts

    def conflict(self, i: int, j: int) -> bool:
        """Whether statements i and j (i != j) have conflicting accesses."""
        if i == j:
            return False
        key = (i, j) if i < j else (j, i)
        hit = self._pair_cache.get(key)
        if hit is None:
            a = self.program.statements[i].accesses
            b = self.program.statements[j].accesses
            hit = self._pair_cache[key] = any(x.conflicts(y) for x in a for y in b)
        return hit

    def initial(self) -> State:
        return self._init

    def finished(self, state: State) -> bool:
        """Every thread past its last statement and every enqueued task completed."""
        for t, v in enumerate(state.threads):
            if v >> 1 < len(self.thread_stmts[t]) or v & 1:
                return False
        return not any(state.queues)

    def current(self, state: State, thread: int) -> int | None:
        """The statement thread `thread` is at, or None when it is done."""
        stmts = self.thread_stmts[thread]
        k = state.threads[thread] >> 1
        return stmts[k] if k < len(stmts) else None

    # ------------------------------------------------------------------ legality

    def begun(self, state, task: int) -> bool:
        """A task has begun once it has taken its first step (`start` or `complete`)."""
        return state.status[task] >= RUNNING

    def _deps_blocker(self, state, task: int) -> str | None:
        slot = self.dslot[task]
        if slot < 0:
            return None
        for dep, need in state.bind[slot]:
            if need == NEED_DONE:
                if state.status[dep] != DONE:
                    return f"waiting for {self.describe(dep)} to complete (legacy default stream)"
            elif not self.begun(state, dep):
                return f"waiting for {self.describe(dep)} to begin (same hardware queue)"
        return None

    def _head_blocker(self, state, task: int) -> str | None:
        """Rule 1: every task ahead of it on its stream has completed (tasks of its own
        batch excepted: one `group` is one fused launch)."""
        st = self.program.statements[task]
        q = state.queues[st.stream]
        if not q or q[0] != task:
            if state.status[task] == NEW:
                return f"{self.describe(task)} has not been enqueued"
            batch = self.batch[task]
            for ahead in q:
                if ahead == task:
                    return None
                if batch is None or self.batch[ahead] != batch:
                    return (
                        f"waiting for {self.describe(ahead)} ahead of it on "
                        f"{self.program.streams[st.stream].name}"
                    )
        return None

    def _first_step_blocker(self, state, task: int) -> str | None:
        """Why the task cannot take its start/complete step (None: it can)."""
        status = state.status[task]
        if status == NEW:
            return "not enqueued yet"
        if status != QUEUED:
            return "already begun"
        why = self._head_blocker(state, task)
        if why:
            return why
        # Rules 2 and 3 (hardware queues, legacy stream) hold from the first step on.
        why = self._deps_blocker(state, task)
        if why:
            return why
        st = self.program.statements[task]
        op = st.op
        p = self.program
        if op is _OP_WAIT:
            if p.events[st.event].flag:
                if not state.flags >> st.event & 1:
                    return f"flag {p.events[st.event].name} not set"
            else:
                rec = state.bind[self.wslot[task]]
                if rec >= 0 and state.status[rec] != DONE:
                    return f"waiting for {self.describe(rec)}"
        elif op is _OP_AWAIT:
            if not state.notes >> st.notify & 1:
                return f"notify {p.notifies[st.notify].name} not set"
        return None

    def _group_blocker(self, state, group) -> str | None:
        """Why a collective group cannot complete: a member is missing or has not started."""
        if not group.complete:
            return "its collective group has a member missing from the program"
        for m in group.members:
            if state.status[m] != RUNNING:
                comm = self.program.comms[group.comm].name
                return f"its {comm} group waits for {self.describe(m)} to start"
        return None

    def _end_blocker(self, state, task: int) -> str | None:
        """`end` of a running task needs only that it has started; a collective's `end`
        (its whole group's) needs every member started."""
        if state.status[task] != RUNNING:
            return "not running"
        group = self.group_of[task]
        if group is not None:
            return self._group_blocker(state, group)
        return None

    def _return_blocker(self, state, stmt: int) -> str | None:
        st = self.program.statements[stmt]
        p = self.program
        if st.stream is not None:  # pageable copy
            if state.status[stmt] != DONE:
                return f"waiting for the copy {self.describe(stmt)} to complete"
            return None
        if st.op is _OP_SYNC:
            slot = self.wslot[stmt]
            if slot < 0:  # flag event
                if not state.flags >> st.target & 1:
                    return f"flag {p.events[st.target].name} not set"
                return None
            for task in state.bind[slot]:
                if state.status[task] != DONE:
                    return f"waiting for {self.describe(task)}"
        return None

    def blocker(self, state, step: Step) -> str | None:
        """Why `step` cannot happen in `state`; None when it is legal."""
        i = step.statement
        if not isinstance(i, int) or not 0 <= i < self.n:
            return f"no statement #{i}"
        st = self.program.statements[i]
        kind = step.kind
        if kind is _ISSUE or kind is _RETURN:
            t = st.thread
            v = state.threads[t]
            cur = self.current(state, t)
            if cur != i:
                if state.status[i] != NEW or self.position[i] < v >> 1:
                    return f"thread {self.program.threads[t].name} is already past it"
                return (
                    f"thread {self.program.threads[t].name} has not reached it "
                    f"(it is at {self.describe(cur)})"
                )
            if kind is _ISSUE:
                if v & 1:
                    return "already issued"
                if st.stream is None and st.op is _OP_AWAIT:
                    if not state.notes >> st.notify & 1:
                        return f"notify {self.program.notifies[st.notify].name} not set"
                return None
            if not v & 1:
                if not self.holds[i]:
                    return "this statement has no return step"
                return "not issued yet"
            return self._return_blocker(state, i)
        if st.stream is None:
            return f"a host statement has no {kind.value} step"
        if kind is _END:
            if not self.interval[i]:
                return "an instant task has no end step (it completes)"
            return self._end_blocker(state, i)
        if kind is _START:
            if not self.interval[i]:
                return "an instant task has no start step (it completes)"
            return self._first_step_blocker(state, i)
        if kind is _COMPLETE:
            if self.interval[i]:
                return "a running task has start and end steps, not complete"
            return self._first_step_blocker(state, i)
        return f"unknown step kind {kind!r}"

    # ------------------------------------------------------------------ enabled steps

    def enabled(self, state: State) -> tuple[Step, ...]:
        """Every step legal in `state`: threads first (by index), then stream heads."""
        out: list[Step] = []
        steps = self.steps
        for t, v in enumerate(state.threads):
            stmts = self.thread_stmts[t]
            k = v >> 1
            if k >= len(stmts):
                continue
            i = stmts[k]
            if v & 1:
                if self._return_blocker(state, i) is None:
                    out.append(steps[_RETURN][i])
            else:
                st = self.program.statements[i]
                if st.stream is None and st.op is _OP_AWAIT and not state.notes >> st.notify & 1:
                    continue
                out.append(steps[_ISSUE][i])
        batch = self.batch
        ended: set[int] = set()
        for q in state.queues:
            if not q:
                continue
            head_batch = batch[q[0]]
            for k, h in enumerate(q):
                if k and (head_batch is None or batch[h] != head_batch):
                    break  # only the head, or the batch at the head, can move
                s = state.status[h]
                if s == RUNNING:
                    g = self.group_of[h]
                    if g is None:
                        out.append(steps[_END][h])
                    elif g.index not in ended and self._group_blocker(state, g) is None:
                        ended.add(g.index)
                        out.append(steps[_END][g.members[0]])
                elif self.interval[h]:
                    if self._first_step_blocker(state, h) is None:
                        out.append(steps[_START][h])
                elif self._first_step_blocker(state, h) is None:
                    out.append(steps[_COMPLETE][h])
        return tuple(out)

    # ------------------------------------------------------------------ effects

    def apply(self, state: State, step: Step) -> State:
        """The state after `step`; raises IllegalStep when the step may not happen."""
        return self.advance(state, step).state

    def advance(self, state: State, step: Step) -> Transition:
        """Like `apply`, and also reports the races and dead-memory uses the step started."""
        why = self.blocker(state, step)
        if why is not None:
            raise IllegalStep(f"{step.kind.value} {self.describe_index(step.statement)}: {why}")
        if step.kind is _END and self.group_of[step.statement] is not None:
            step = self.steps[_END][self.group_of[step.statement].members[0]]
        return self.fire(state, step)

    def advance_into(self, store: "Store", step: Step, track: bool = True):
        """Check and apply `step` to a mutable `Store` in place; returns (races, dead uses).
        Raises IllegalStep, leaving the store unchanged, when the step may not happen."""
        why = self.blocker(store, step)
        if why is not None:
            raise IllegalStep(f"{step.kind.value} {self.describe_index(step.statement)}: {why}")
        if step.kind is _END and self.group_of[step.statement] is not None:
            step = self.steps[_END][self.group_of[step.statement].members[0]]
        updates, races, uses = self.effects(store, step, track)
        store.update(updates)
        return races, uses

    def fire(self, state: State, step: Step) -> Transition:
        """Apply a step already known to be legal (explore calls this on enabled steps)."""
        updates, races, uses = self.effects(state, step)
        return Transition(apply_updates(state, updates), races, uses)

    def effects(self, view, step: Step, track: bool = True):
        """The one step function: what a legal `step` changes, as a list of updates.

        `view` is a `State` or any object with the same fields (the simulator's mutable
        store). Returns (updates, races, dead uses); with `track=False` the access checks
        are skipped (the simulator does not look for races).
        """
        i = step.statement
        kind = step.kind
        st = self.program.statements[i]
        up: list[tuple] = []
        races: tuple = ()
        uses: tuple = ()
        if kind is _ISSUE:
            t = st.thread
            v = view.threads[t]
            launch_uses: tuple = ()
            if track and view.launch_dead & self.touch[i]:
                launch_uses = ((i, ENQUEUED_AFTER_FREE),)
            if self.launch_life[i]:
                if st.op is _OP_FREE:
                    up.append((U_LAUNCH, view.launch_dead | self.launch_life[i]))
                else:
                    up.append((U_LAUNCH, view.launch_dead & ~self.launch_life[i]))
            if st.stream is not None:
                s = st.stream
                wslot = self.wslot[i]
                if wslot >= 0:
                    up.append((U_BIND, wslot, view.last_record[st.event]))
                dslot = self.dslot[i]
                if dslot >= 0:
                    up.append((U_BIND, dslot, self._capture_deps(view.tails, s)))
                if st.op is _OP_RECORD:
                    up.append((U_LAST, st.event, i))
                up.append((U_ENQUEUE, s, i))
                up.append((U_STATUS, i, QUEUED))
                nv = v | 1 if st.blocking else v + 2
            else:
                op = st.op
                if op is _OP_HOST or op is _OP_FREE:
                    if track:
                        races, uses = self._start_access(i, view.running, view.dead, view.freed, view.status)
                    if track:
                        up.append((U_RUNNING, view.running | 1 << i))
                    up.append((U_STATUS, i, RUNNING))
                    nv = v | 1
                elif op is _OP_SYNC:
                    slot = self.wslot[i]
                    if slot >= 0:
                        up.append((U_BIND, slot, self._capture_sync(st, view.tails, view.last_record)))
                    up.append((U_STATUS, i, RUNNING))
                    nv = v | 1
                else:
                    if op is _OP_NOTIFY:
                        up.append((U_NOTES, view.notes | 1 << st.notify))
                    elif op is _OP_AWAIT:
                        up.append((U_NOTES, view.notes & ~(1 << st.notify)))
                    elif op is _OP_ALLOC:
                        up.append((U_DEAD, view.dead & ~self.life[i]))
                    up.append((U_STATUS, i, DONE))
                    nv = v + 2
            up.append((U_THREAD, t, nv))
            if launch_uses:
                uses = tuple(uses) + launch_uses
        elif kind is _RETURN:
            t = st.thread
            up.append((U_THREAD, t, (view.threads[t] & ~1) + 2))
            if st.stream is None:
                if st.op is _OP_FREE:
                    up.append((U_DEAD, view.dead | self.life[i]))
                    up.append((U_FREED, view.freed | self.life[i]))
                if track:
                    up.append((U_RUNNING, view.running & ~(1 << i)))
                up.append((U_STATUS, i, DONE))
        elif kind is _START:
            if track:
                races, uses = self._start_access(i, view.running, view.dead, view.freed, view.status)
                up.append((U_RUNNING, view.running | 1 << i))
            up.append((U_STATUS, i, RUNNING))
        elif kind is _END:
            g = self.group_of[i]
            members = g.members if g is not None else (i,)
            running = view.running
            for m in members:  # a collective group completes together
                up.append((U_DEQUEUE, self.program.statements[m].stream, m))
                up.append((U_STATUS, m, DONE))
                running &= ~(1 << m)
            if track:
                up.append((U_RUNNING, running))
            if st.op is _OP_FREE:
                up.append((U_DEAD, view.dead | self.life[i]))
                up.append((U_FREED, view.freed | self.life[i]))
        else:  # COMPLETE
            up.append((U_DEQUEUE, st.stream, i))
            up.append((U_STATUS, i, DONE))
            op = st.op
            if op is _OP_RECORD:
                if self.flag_event[st.event]:
                    up.append((U_FLAGS, view.flags | 1 << st.event))
            elif op is _OP_RESET:
                up.append((U_FLAGS, view.flags & ~(1 << st.event)))
            elif op is _OP_NOTIFY:
                up.append((U_NOTES, view.notes | 1 << st.notify))
            elif op is _OP_AWAIT:
                up.append((U_NOTES, view.notes & ~(1 << st.notify)))
            elif op is _OP_ALLOC:
                up.append((U_DEAD, view.dead & ~self.life[i]))
        return up, races, uses

    def _start_access(self, i: int, running: int, dead: int, freed: int, status):
        """Races and dead uses of statement i's accesses starting now.

        A dead byte is a use after free when a free has killed it since it was last made
        live, and a use before alloc when no alloc has made it live yet (a byte can be both:
        freed before it was ever allocated).
        """
        touch = self.touch[i]
        if not touch:
            return (), ()
        races = ()
        if self.n <= PRECOMPUTE_CONFLICTS:
            clash = running & self.conflicts[i]
        else:  # a large program: test the (few) running statements one by one
            clash = 0
            for j in _bits(running):
                if self.conflict(i, j):
                    clash |= 1 << j
        if clash:
            races = tuple((j, i) for j in _bits(clash))
        uses = ()
        bad = dead & touch
        if bad:
            u = []
            if bad & freed:
                u.append((i, USE_AFTER_FREE))
            if bad & self.never_allocated(status):
                u.append((i, USE_BEFORE_ALLOC))
            uses = tuple(u)
        return races, uses

    def never_allocated(self, status) -> int:
        """Segments covered by some alloc that no completed alloc has made live yet."""
        fresh = self.initially_dead
        for a in self.allocs:
            if status[a] == DONE:
                fresh &= ~self.life[a]
        return fresh

    def killer(self, state, i: int, kind: str = USE_AFTER_FREE) -> int | None:
        """The latest free that made bytes statement i touches dead: completed (run order),
        or enqueued (launch order, for ENQUEUED_AFTER_FREE)."""
        found = None
        if kind == ENQUEUED_AFTER_FREE:
            bad = state.launch_dead & self.touch[i]
            for st in self.program.statements:
                if st.op is _OP_FREE and state.status[st.index] != NEW and self.launch_life[st.index] & bad:
                    found = st.index
            return found
        bad = state.dead & state.freed & self.touch[i]
        for st in self.program.statements:
            if st.op is _OP_FREE and state.status[st.index] == DONE and self.life[st.index] & bad:
                found = st.index
        return found

    def _capture_deps(self, tails, stream: int) -> tuple[tuple[int, int], ...]:
        """Earlier tasks that a task enqueued now on `stream` must wait for (rules 2 and 3).

        Within a stream tasks begin and complete in order, so the last task enqueued on each
        peer stream stands for all earlier ones.
        """
        deps = []
        siblings = self.siblings
        for o in self.queue_peers[stream]:
            t = tails[o]
            if t >= 0:
                deps.append((t, NEED_BEGUN))
                deps.extend((b, NEED_BEGUN) for b in siblings[t])
        for o in self.legacy_peers[stream]:
            t = tails[o]
            if t >= 0:
                deps.append((t, NEED_DONE))
                deps.extend((b, NEED_DONE) for b in siblings[t])
        return tuple(deps)

    def _capture_sync(self, st: Statement, tails, last) -> tuple[int, ...]:
        """The tasks a sync issued now waits for: the last task enqueued on each stream."""
        if st.sync is _SYNC_EVENT:
            rec = last[st.target]
            return (rec,) if rec >= 0 else ()
        waited: list[int] = []
        for s in self.sync_streams[st.index]:
            t = tails[s]
            if t >= 0:
                waited.append(t)
                waited.extend(self.siblings[t])
        return tuple(waited)

    # ------------------------------------------------------------------ explanations

    def describe(self, i: int) -> str:
        """`s1: wait ready (line 7)` (cached: blocked steps are explained over and over)."""
        text = self._described.get(i)
        if text is None:
            st = self.program.statements[i]
            text = self._described[i] = f"{self.program.describe(st)} (line {st.span.line})"
        return text

    def describe_index(self, i: object) -> str:
        if isinstance(i, int) and 0 <= i < self.n:
            return self.describe(i)
        return f"#{i}"

    def stuck(self, state: State) -> tuple[tuple[int, str], ...]:
        """For a state with unfinished work: each unfinished thread and task and what it waits
        for (`notify go not set`), in statement order."""
        out: list[tuple[int, str]] = []
        p = self.program
        for t in range(len(p.threads)):
            i = self.current(state, t)
            if i is None:
                continue
            v = state.threads[t]
            kind = _RETURN if v & 1 else _ISSUE
            why = self.blocker(state, self.steps[kind][i]) or "can still move"
            out.append((i, why))
        for q in state.queues:
            for k, h in enumerate(q):
                st = p.statements[h]
                if k:
                    why = (f"waiting for {self.describe(q[0])} ahead of it on "
                           f"{p.streams[st.stream].name}")
                elif state.status[h] == RUNNING:
                    why = self._end_blocker(state, h) or "can still end"
                elif self.group_of[h] is not None:
                    why = self._group_blocker(state, self.group_of[h]) or "can still start"
                else:
                    why = self._first_step_blocker(state, h) or "can still move"
                out.append((h, why))
        out.sort()
        return tuple(out)


class Store:
    """A mutable state with the `State` field names: the machine's rules read it as they read
    a State, and `Machine.advance_into` changes it in place. Replay and simulation use it so
    that a step costs the same whatever the program's size."""

    __slots__ = ("threads", "status", "queues", "tails", "last_record", "bind", "flags", "notes",
                 "dead", "freed", "running", "launch_dead")

    def __init__(self, state: State) -> None:
        self.threads = list(state.threads)
        self.status = bytearray(state.status)
        self.queues = [deque(q) for q in state.queues]
        self.tails = list(state.tails)
        self.last_record = list(state.last_record)
        self.bind = list(state.bind)
        self.flags = state.flags
        self.notes = state.notes
        self.dead = state.dead
        self.freed = state.freed
        self.running = state.running
        self.launch_dead = state.launch_dead

    def freeze(self) -> State:
        """The immutable State this store holds now."""
        return State(tuple(self.threads), bytes(self.status), tuple(tuple(q) for q in self.queues),
                     tuple(self.tails), tuple(self.last_record), tuple(self.bind), self.flags,
                     self.notes, self.dead, self.freed, self.running, self.launch_dead)

    def update(self, updates) -> None:
        for u in updates:
            code = u[0]
            if code == U_STATUS:
                self.status[u[1]] = u[2]
            elif code == U_THREAD:
                self.threads[u[1]] = u[2]
            elif code == U_ENQUEUE:
                self.queues[u[1]].append(u[2])
                self.tails[u[1]] = u[2]
            elif code == U_DEQUEUE:
                queue = self.queues[u[1]]
                if queue[0] == u[2]:
                    queue.popleft()
                else:
                    queue.remove(u[2])
            elif code == U_LAST:
                self.last_record[u[1]] = u[2]
            elif code == U_BIND:
                self.bind[u[1]] = u[2]
            elif code == U_FLAGS:
                self.flags = u[1]
            elif code == U_NOTES:
                self.notes = u[1]
            elif code == U_DEAD:
                self.dead = u[1]
            elif code == U_FREED:
                self.freed = u[1]
            elif code == U_RUNNING:
                self.running = u[1]
            elif code == U_LAUNCH:
                self.launch_dead = u[1]


def apply_updates(state: State, updates) -> State:
    """The State with `updates` (from `Machine.effects`) applied; `state` is unchanged."""
    threads, status, queues, tails, last, bind, flags, notes, dead, freed, running, launch = state
    for u in updates:
        code = u[0]
        if code == U_STATUS:
            i = u[1]
            status = status[:i] + _BYTE[u[2]] + status[i + 1:]
        elif code == U_THREAD:
            t = u[1]
            threads = threads[:t] + (u[2],) + threads[t + 1:]
        elif code == U_ENQUEUE:
            s = u[1]
            queues = queues[:s] + (queues[s] + (u[2],),) + queues[s + 1:]
            tails = tails[:s] + (u[2],) + tails[s + 1:]
        elif code == U_DEQUEUE:
            s = u[1]
            queue = queues[s]
            rest = queue[1:] if queue[0] == u[2] else tuple(x for x in queue if x != u[2])
            queues = queues[:s] + (rest,) + queues[s + 1:]
        elif code == U_LAST:
            e = u[1]
            last = last[:e] + (u[2],) + last[e + 1:]
        elif code == U_BIND:
            k = u[1]
            bind = bind[:k] + (u[2],) + bind[k + 1:]
        elif code == U_RUNNING:
            running = u[1]
        elif code == U_FLAGS:
            flags = u[1]
        elif code == U_NOTES:
            notes = u[1]
        elif code == U_DEAD:
            dead = u[1]
        elif code == U_LAUNCH:
            launch = u[1]
        else:
            freed = u[1]
    return State(threads, status, queues, tails, last, bind, flags, notes, dead, freed, running, launch)
