"""The executor's rules: the step semantics of `docs/semantics.md`, one step at a time.

This is the second, independent implementation of the semantics (the SMT encoder is the
first). Every executor mode goes through the same rules here: `replay` checks a witness step
by step, `explore` enumerates every interleaving, `simulate` fires steps in time order.

One step function: `blocker(view, step)` says whether a step may happen and `effects(view,
step)` what it changes, as updates (`state.py`). Both read any object with the `State` field
names, so `apply` (a new immutable State, for replay and explore) and the simulator (a
mutable `Store`, for 100,000-task runs) share every rule. The parts of `blocker` are public
(`first_step_blocker`, `return_blocker`, `group_blocker`, `end_blocker`, ...) for the
simulator, which asks them directly in time order.

* Facts that the contract fixes at enqueue time (which record a `wait` binds to, which tasks
  a `sync` waits for, which earlier tasks a hardware queue or the legacy stream orders a task
  after) are captured at the `issue` step into `State.bind`, a compact tuple with one slot
  per statement that needs one. Later steps only test those captured facts.
* What each kind of statement does is read from the operation table (`checker.ir.OPERATIONS`)
  once, when the machine is built, into per-statement tuples (`interval`, `holds`, the
  conditions a step waits for, the updates a step makes); the hot paths index those.

The rest of the executor's machinery has a module each: `state.py` (State, Store, updates),
`layout.py` (memory segments), `reduction.py` (which steps exploration may take alone),
`explain.py` (what a blocked statement waits for, in words).
"""

from __future__ import annotations

import functools
import operator
import weakref
from bisect import bisect_left
from dataclasses import dataclass

from checker import collectives
from checker.errors import IllegalStep
from checker.ir import (
    OPERATIONS, Group, GroupKind, Op, Program, Statement, StreamMode, SyncKind, accesses_conflict,
)
from checker.witness import Step, StepKind, holds_thread
from checker.executor import explain
from checker.executor.layout import Layout
from checker.executor.reduction import Reduction
from checker.executor.state import (
    DONE, ENQUEUED_AFTER_FREE, NEW, QUEUED, RUNNING, U_BIND, U_DEAD, U_DEQUEUE, U_ENQUEUE,
    U_FLAGS, U_FREED, U_LAST, U_LAUNCH, U_MARK, U_NOTES, U_RUNNING, U_STATUS, U_THREAD, USE_AFTER_FREE,
    USE_BEFORE_ALLOC, State, Store, Transition, apply_updates, bits,
)

__all__ = [  # the machine, and what older code imported from here
    "DONE", "ENQUEUED_AFTER_FREE", "NEED_BEGUN", "NEED_DONE", "NEW", "PRECOMPUTE_CONFLICTS",
    "QUEUED", "RUNNING", "USE_AFTER_FREE", "USE_BEFORE_ALLOC", "IllegalStep", "Layout",
    "Machine", "State", "Store", "Transition", "apply_updates",
]

_ISSUE, _RETURN, _START, _END, _COMPLETE = (
    StepKind.ISSUE, StepKind.RETURN, StepKind.START, StepKind.END, StepKind.COMPLETE)

PRECOMPUTE_CONFLICTS = 4000
"""Up to this many statements, every statement's conflict set is one precomputed bitmask
(fast for exploration); above it, conflicts are tested pairwise against what is running."""

NEED_BEGUN, NEED_DONE = 1, 2
"""What a captured ordering dependency asks of an earlier task."""


@dataclass(frozen=True, slots=True)
class Met(Group):
    """The group a call of an interleaved comm met in, as far as the state shows it (`index`
    is negative, from its first member), with what it still waits for when not `complete`."""

    missing: str | None = None


class Blocked:
    """Why a step cannot happen, and what could change that: `needs` holds steps of which
    every run that enables the step takes one first (empty: no run will). The stubborn sets
    of exploration read `needs` (`stubborn.py`), so the rule that blocks a step and the steps
    that could unblock it are written in one place. The words (`str`) are built only when
    asked for: exploration asks for `needs` hundreds of thousands of times."""

    __slots__ = ("needs", "_say")

    def __init__(self, say, needs: tuple[Step, ...] = ()) -> None:
        self.needs = needs
        self._say = say
        """The words, or a function of no arguments that returns them."""

    def __str__(self) -> str:
        say = self._say
        return say if isinstance(say, str) else say()

    def __repr__(self) -> str:
        return f"Blocked({str(self)!r}, {self.needs!r})"


def _first(item) -> int:
    """The task of a captured dependency (task, need) or of a sync's task."""
    return item[0] if isinstance(item, tuple) else item


class _StepTable(dict):
    """Step objects for one kind, made on first use and then shared (lookups stay in C)."""

    __slots__ = ("kind",)

    def __init__(self, kind: StepKind) -> None:
        super().__init__()
        self.kind = kind

    def __missing__(self, i: int) -> Step:
        step = self[i] = Step(self.kind, i)
        return step


class _Lazy(dict):
    """Per statement: `make(i)`, computed on first use and then kept."""

    __slots__ = ("make",)

    def __init__(self, make) -> None:
        super().__init__()
        self.make = make

    def __missing__(self, i: int):
        value = self[i] = self.make(i)
        return value


class Machine:
    """The step semantics of one program. Build once, then ask `enabled` and `apply`."""

    def __init__(self, program: Program) -> None:
        self.program = program
        p = program
        n = len(p.statements)
        self.n = n
        self.layout = Layout(p)
        self._static_facts()
        self._stream_relations()
        self._binding_slots()
        self._conditions()
        self._conflicts: tuple[int, ...] | None = None
        self._pair_cache: dict[tuple[int, int], bool] = {}
        self._described: dict[int, str] = {}
        self._past = tuple(Blocked(f"thread {t.name} is already past it") for t in p.threads)
        self._waiting_thread: dict[tuple[int, int], Blocked] = {}
        reduction = Reduction(self)
        self.reducible = reduction.reducible
        """`reducible(step)`: whether exploration may take `step` alone (`reduction.py`)."""
        self._init = State(
            threads=tuple(0 for _ in p.threads),
            status=bytes(n),
            queues=tuple(() for _ in p.streams),
            tails=tuple(-1 for _ in p.streams),
            last_record=tuple(-1 for _ in p.events),
            bind=tuple(-1 for _ in range(self.slots)),
            flags=0,
            notes=0,
            dead=self.initially_dead,
            freed=0,
            running=0,
            launch_dead=0,
            launch_marked=0,
        )
        # Cached step objects: enabled() hands out the same instances every time.
        self.steps = {kind: _StepTable(kind) for kind in StepKind}
        # Per kind of step and statement: the updates it makes that do not depend on the state
        # (through a weak proxy: no reference cycle keeps a machine alive).
        me = weakref.proxy(self)
        self._fixed = {kind: _Lazy(lambda i, kind=kind: me._fixed_updates(kind, i, True))
                       for kind in StepKind}

    # ------------------------------------------------------------------ static facts

    def _static_facts(self) -> None:
        """Per statement: its thread and position, kind of task, accesses and lifetimes."""
        p = self.program
        n = self.n
        lay = self.layout
        statements = p.statements
        of_op: dict[Op, list[int]] = {}
        for st in statements:
            of_op.setdefault(st.op, []).append(st.index)
        self.of_op = {op: tuple(found) for op, found in of_op.items()}
        """Statement indices of each kind of statement, in order."""
        self.thread_of = tuple(st.thread for st in statements)
        self.thread_stmts = tuple(t.statements for t in p.threads)
        position = [0] * n
        for t in p.threads:
            for k, i in enumerate(t.statements):
                position[i] = k
        self.position = tuple(position)
        self.stream_of = tuple(st.stream for st in statements)
        rows = [OPERATIONS[st.op] for st in statements]
        self.interval = tuple(st.stream is not None and row.interval for st, row in zip(statements, rows))
        """A running task (`start` and `end` steps); otherwise an instant task or host statement."""
        self.holds = tuple(holds_thread(st) for st in statements)
        """The statement keeps its thread until a `return` step."""
        self.host_access = tuple(st.stream is None and row.accesses for st, row in zip(statements, rows))
        """A host statement whose accesses run from its `issue` to its `return`."""
        self.duration = tuple(st.duration for st in statements)
        self.flag_event = tuple(e.flag for e in p.events)
        touch = []
        for st in statements:
            m = 0
            for acc in st.accesses:
                m |= lay.mask(acc.memory, acc.start, acc.end)
            touch.append(m)
        self.touch = tuple(touch)
        """Segments the statement's accesses touch."""
        life = [0] * n
        launch_life = [0] * n
        launch_memories = {m for st in statements if st.op is Op.FREE and st.launch_ordered
                           for m in st.lifetime_memories}
        for st, row in zip(statements, rows):
            if not row.lifetime or st.memory is None:
                continue
            whole = lay.mask(st.memory, 0, p.memories[st.memory].size)
            if st.launch_ordered or st.op is Op.ALLOC:
                launch_life[st.index] = functools.reduce(operator.or_, (
                    lay.mask(m, 0, p.memories[m].size) for m in st.lifetime_memories
                    if st.launch_ordered or m in launch_memories), 0)
            if not st.launch_only:
                lm = 0
                for a in st.accesses:
                    if a.memory == st.memory:
                        lm |= lay.mask(a.memory, a.start, a.end)
                life[st.index] = lm if any(a.memory == st.memory for a in st.accesses) else whole
        self.life = tuple(life)
        """alloc/free: the segments it makes live or dead when it takes effect."""
        self.launch_life = tuple(launch_life)
        """alloc/free of memory that a launch-ordered free frees (`Statement.launch_ordered`):
        the segments whose launch-order liveness the statement changes."""
        launch_only = launch_ordered = 0
        for st in statements:
            launch_ordered |= launch_life[st.index]
            if st.launch_only:
                launch_only |= launch_life[st.index]
        self.begins_when_done = tuple(st.begins_when_done for st in statements)
        self.launch_touch = tuple(m & (launch_ordered if st.is_task else launch_only)
                                  for st, m in zip(statements, self.touch))
        """Segments whose launch-order death makes the statement a dead use when it is issued:
        for work enqueued on a stream, those a launch-ordered free frees; for a host statement,
        which runs when issued, only those of caching-allocator blocks (whose frees count by
        launch order alone): other memory it uses after a free only by run order."""
        self.block_allocs = tuple(tuple((a,) for a in st.tensor_allocs) for st in statements)
        """Per statement, for each caching-allocator tensor lifetime it uses, its `alloc` (as a
        one-element group): a statement issued while one of them has not been is a use before
        alloc (launch order: a tensor used before it was given its bytes)."""
        self.tensor_frees = tuple(st.tensor_frees for st in statements)
        """Per statement, the `free`s of the caching-allocator tensor lifetimes it uses: a
        statement issued once one of them has been is a use after free (launch order: the
        block may be another tensor's by then, which does not make this one live)."""
        self.allocs = self.of_op.get(Op.ALLOC, ())
        self.frees = self.of_op.get(Op.FREE, ())
        kill = [0] * n
        for i in self.frees:
            kill[i] = life[i]
        self.kill = tuple(kill)
        """A free: the segments it makes dead when it takes effect (its `end` or `return`)."""
        killed = functools.reduce(operator.or_, kill, 0)
        users: dict[int, int] = {}  # segment something frees -> statements touching it
        for j, m in enumerate(self.touch):
            for g in bits(m & killed):
                users[g] = users.get(g, 0) | 1 << j
        self.kill_watch = tuple(
            functools.reduce(operator.or_, (users.get(g, 0) for g in bits(kill[i])), 0) & ~(1 << i) if kill[i] else 0
            for i in range(n))
        """A free: the statements whose accesses touch what it kills. One of them still running
        when the free takes effect runs after the free: a use after free."""
        initially_dead = 0
        for i in self.allocs:
            initially_dead |= life[i]
        self.initially_dead = initially_dead
        self.group_of = [None] * n
        """The static group of each call of a comm whose calls meet by program order."""
        interleaved = collectives.interleaved_comms(p)
        classes: dict[tuple, list[int]] = {}
        for g in p.groups:
            for m in g.members:
                if g.comm in interleaved:
                    classes.setdefault(collectives.call_class(statements[m]), []).append(m)
                else:
                    self.group_of[m] = g
        keys = list(classes)
        number = {key: c for c, key in enumerate(keys)}
        self.class_calls = tuple(tuple(sorted(classes[key])) for key in keys)
        """Each class of calls of an interleaved comm (`collectives.call_class`), in statement order."""
        self.class_meets = tuple(tuple(number[k] for k in collectives.meeting_classes(p, key) if k in number)
                                 + tuple(-1 for k in collectives.meeting_classes(p, key) if k not in number)
                                 for key in keys)
        """The classes whose k-th calls meet the k-th of each class (-1: a class with no calls)."""
        call_class = [-1] * n
        for c, calls in enumerate(self.class_calls):
            for i in calls:
                call_class[i] = c
        self.call_class = tuple(call_class)
        """Per statement, its class if it is a call of an interleaved comm (its group is known
        only once the calls are enqueued: `group`), else -1."""
        self.in_group = tuple(g is not None or c >= 0 for g, c in zip(self.group_of, call_class))
        self.gated = tuple(g and not st.spins for g, st in zip(self.in_group, statements))
        """A member that starts with its group (rule 8), not on its own (`Statement.spins`)."""
        self.batch = tuple(st.batch for st in statements)

    def _stream_relations(self) -> None:
        """Hardware-queue and legacy relations (captured as dependencies at enqueue), the
        streams each sync waits for, and batch-mates."""
        p = self.program
        # Shared tuples per device (and queue): building them per stream was quadratic in
        # the streams (20,000 streams took minutes) where the relations themselves are not.
        # Both relations are per process (`Stream.context`).
        queues: dict[tuple, list[int]] = {}
        by_mode: dict[tuple, list[int]] = {}
        for s in p.streams:
            if p.devices[s.device].queues and s.queue is not None:
                queues.setdefault((s.device, s.context, s.queue), []).append(s.index)
            by_mode.setdefault((s.device, s.context, s.mode), []).append(s.index)
        members = {key: tuple(streams) for key, streams in queues.items()}
        modes = {key: tuple(streams) for key, streams in by_mode.items()}
        self.queue_peers: list[tuple[int, ...]] = []
        """The streams of each stream's hardware queue, itself included (`_capture_deps` skips it)."""
        self.legacy_peers: list[tuple[int, ...]] = []
        for s in p.streams:
            self.queue_peers.append(members.get((s.device, s.context, s.queue), ()))
            if s.mode is StreamMode.LEGACY:
                lp = modes.get((s.device, s.context, StreamMode.BLOCKING), ())
            elif s.mode is StreamMode.BLOCKING:
                lp = modes.get((s.device, s.context, StreamMode.LEGACY), ())
            else:
                lp = ()
            self.legacy_peers.append(lp)
        on_device: list[list[int]] = [[] for _ in p.devices]
        for s in p.streams:
            on_device[s.device].append(s.index)
        self.device_streams = tuple(tuple(streams) for streams in on_device)
        sync_streams: list[tuple[int, ...]] = [()] * self.n
        for i in self.of_op.get(Op.SYNC, ()):
            sync_streams[i] = p.synced_streams(p.statements[i])
        self.sync_streams = tuple(sync_streams)
        members: list[list[int]] = [[] for _ in range(self.n)]
        counts = [0] * self.n
        seen_batch: dict[tuple[int, int], list[int]] = {}
        for t in p.threads:
            for i in t.statements:
                st = p.statements[i]
                if st.batch is not None and st.stream is not None:
                    earlier = members[i] = seen_batch.setdefault((st.stream, st.batch), [])
                    counts[i] = len(earlier)
                    earlier.append(i)
        self._batch_members, self._earlier_members = tuple(members), tuple(counts)
        """Per task, its batch's members on its stream (one list for them all: a tuple each
        of those before it was quadratic in a group's calls) and how many come before it."""

    def _binding_slots(self) -> None:
        """A slot of `State.bind` for each statement that captures something at its issue:
        a `wait` on a snapshot event (the record it binds to), a `sync` other than of a flag
        event (the tasks it waits for), a task on a stream with hardware-queue or legacy
        peers (the earlier tasks rules 2 and 3 order it after). Slots go in statement order."""
        p = self.program
        events = p.events
        binds = set()
        for i in self.of_op.get(Op.WAIT, ()):
            st = p.statements[i]
            if st.stream is not None and not events[st.event].flag:
                binds.add(i)
        binds.update(self.of_op.get(Op.SYNC, ()))  # (`sync E` of a flag event binds too)
        peers = [len(q) > 1 or bool(lp) for q, lp in zip(self.queue_peers, self.legacy_peers)]
        wslot = [-1] * self.n
        dslot = [-1] * self.n
        pslot = [-1] * self.n
        slots = 0
        for i, s in enumerate(self.stream_of):
            if i in binds:
                wslot[i] = slots
                slots += 1
            if s is not None and peers[s]:
                dslot[i] = slots
                slots += 1
            if self.call_class[i] >= 0:
                pslot[i] = slots
                slots += 1
        self.wslot = tuple(wslot)
        self.dslot = tuple(dslot)
        self.pslot = tuple(pslot)
        """A call of an interleaved comm: its position in its class, counted when it is enqueued."""
        last: list[int] = []
        base: list[int] = []
        for calls in self.class_calls:
            last.append(slots)
            base.append(slots + 1)
            slots += 1 + len(calls)
        self.class_last = tuple(last)
        """Per class: the slot of the last position handed out (-1: none yet)."""
        self.class_base = tuple(base)
        """Per class: the first of its slots that hold the call at each position (-1: not yet)."""
        self.slots = slots
        self.captures = tuple(w >= 0 or d >= 0 or q >= 0 for w, d, q in zip(wslot, dslot, pslot))
        spent = []
        waits = []
        for i in range(self.n):
            if wslot[i] >= 0:  # a wait reads its record until it completes, a sync until it returns
                spent.append((wslot[i], i, DONE))
                waits.append((wslot[i], i, self.stream_of[i] is not None))
            if dslot[i] >= 0:  # rules 2 and 3 hold until the task's first step
                spent.append((dslot[i], i, RUNNING))
                waits.append((dslot[i], i, False))
            if pslot[i] >= 0:  # a call's group is looked up until it completes
                spent.append((pslot[i], i, DONE))
        self.spent_slots = tuple(spent)
        """(slot, statement, status from which no step reads the slot again)."""
        self.waiting_slots = tuple(waits)
        """(slot, statement, whether the slot holds one record rather than a tuple): what a
        wait, sync or task waits for, in which a completed task is as good as none."""
        self.call_slots = tuple(range(b, b + len(calls)) for b, calls in zip(base, self.class_calls))
        """Per class of an interleaved comm: the slots holding the call at each position."""

    def _conditions(self) -> None:
        """The flags and notifies statements wait for or change (-1 / (): none)."""
        p = self.program
        n = self.n
        statements = p.statements
        flag = self.flag_event
        of_op = self.of_op
        issue_note = [-1] * n
        await_note = [-1] * n
        wait_flag = [-1] * n
        records = [-1] * n
        signal: list[tuple] = [()] * n
        for i in of_op.get(Op.AWAIT, ()):
            st = statements[i]
            if st.stream is None:
                issue_note[i] = st.notify
            else:
                await_note[i] = st.notify
            signal[i] = ((U_NOTES, 0, 1 << st.notify),)
        for i in of_op.get(Op.NOTIFY, ()):
            signal[i] = ((U_NOTES, 1 << statements[i].notify, 0),)
        for i in of_op.get(Op.WAIT, ()):
            st = statements[i]
            if st.stream is not None and flag[st.event]:
                wait_flag[i] = st.event
        for i in of_op.get(Op.RECORD, ()):
            e = records[i] = statements[i].event
            if flag[e]:
                signal[i] = ((U_FLAGS, 1 << e, 0),)
        for i in of_op.get(Op.RESET, ()):
            signal[i] = ((U_FLAGS, 0, 1 << statements[i].event),)
        for i in self.allocs:
            if self.life[i]:
                signal[i] = ((U_DEAD, 0, self.life[i]),)
        self.issue_note = tuple(issue_note)
        """A host `await`: the notify its `issue` needs set."""
        self.await_note = tuple(await_note)
        """A stream `await`: the notify its `complete` needs set."""
        self.wait_flag = tuple(wait_flag)
        """A `wait` on a flag event: the flag its `complete` needs set."""
        self.records = tuple(records)
        """A `record`: the event whose latest record it becomes when enqueued."""
        self.signal = tuple(signal)
        """What an instant statement sets or clears when it takes effect (its `complete`, or
        the `issue` of a host statement)."""
        note_setters: dict[int, list[tuple[int, StepKind]]] = {}
        for i in of_op.get(Op.NOTIFY, ()):
            kind = _ISSUE if statements[i].stream is None else _COMPLETE
            note_setters.setdefault(statements[i].notify, []).append((i, kind))
        flag_setters: dict[int, list[tuple[int, StepKind]]] = {}  # (a record sets its flag at `complete`)
        for i in of_op.get(Op.RECORD, ()):
            if flag[records[i]]:
                flag_setters.setdefault(records[i], []).append((i, _COMPLETE))

        def lanes(found: list[tuple[int, StepKind]]) -> tuple[tuple[tuple[int, StepKind], ...], ...]:
            by_lane: dict[tuple, list] = {}
            for entry in found:
                st = statements[entry[0]]
                by_lane.setdefault((st.thread, st.stream), []).append(entry)
            return tuple(tuple(lane) for lane in by_lane.values())

        self.note_lanes = {note: lanes(found) for note, found in note_setters.items()}
        """The (statement, step kind) that set each notify (a stream notify's `complete`, a host
        notify's `issue`), by (thread, stream), in program order: a thread issues its
        host notifies in order and a stream completes its tasks in order, so in any state the
        done ones of a lane are a prefix of it, and only the first one not done can set the
        notify next (a blocker that named them all made a loop of n rounds cost n^2)."""
        self.flag_lanes = {e: lanes(found) for e, found in flag_setters.items()}
        """The records of each flag event by (thread, stream), as `note_lanes`."""

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
                writers = [(i, a) for i, a in items if a.write]
                if 2 * len(writers) < len(items):
                    # Mostly reads (one writer, a thousand readers): only pairs with a writer
                    # can conflict, and the readers' pairs among themselves are never looked at.
                    for i, a in writers:
                        for j, b in items:
                            if i != j and b.start < a.end and a.start < b.end:
                                masks[i] |= 1 << j
                                masks[j] |= 1 << i
                    continue
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
            hit = self._pair_cache[key] = accesses_conflict(a, b)
        return hit

    def initial(self) -> State:
        return self._init

    def forget(self, state: State) -> State:
        """`state` with the captured facts that no later step can read reset to their initial
        value (-1): the record a completed wait was bound to, what a returned sync or a begun
        task captured, the position of a completed call and which completed call held a
        position (positions are not given out again, and a member still running only needs
        its peers started, which a completed one is, whichever call it was); and completed
        tasks among what a wait, sync or task still waits for (done is as good as not waited
        for). States that differ only there behave alike, so exploration keeps one of them
        (it only compares the forgotten state: the run goes on from the full one)."""
        bind = state.bind
        status = state.status
        fresh = None
        for slot, owner, spent in self.spent_slots:
            if status[owner] >= spent and bind[slot] != -1:
                if fresh is None:
                    fresh = list(bind)
                fresh[slot] = -1
        for slot, owner, single in self.waiting_slots:
            held = bind[slot] if fresh is None else fresh[slot]
            if single:
                if held >= 0 and status[held] == DONE:
                    if fresh is None:
                        fresh = list(bind)
                    fresh[slot] = -1
            elif held != -1 and any(status[_first(x)] == DONE for x in held):
                if fresh is None:
                    fresh = list(bind)
                fresh[slot] = tuple(x for x in held if status[_first(x)] != DONE)
        for slots in self.call_slots:
            for slot in slots:
                call = bind[slot]
                if call >= 0 and status[call] == DONE:
                    if fresh is None:
                        fresh = list(bind)
                    fresh[slot] = -1
        return state if fresh is None else state._replace(bind=tuple(fresh))

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
        """A task has begun once it has taken its first step (`start` or `complete`); one
        that takes no time once it completed (`Statement.begins_when_done`)."""
        return state.status[task] >= (DONE if self.begins_when_done[task] else RUNNING)

    def completion_step(self, task: int) -> Step:
        """The step that completes a task: its `end`, or `complete` if it takes no time."""
        return self.steps[_END if self.interval[task] else _COMPLETE][task]

    def first_step(self, task: int) -> Step:
        """A task's first step: its `start`, or `complete` if it takes no time."""
        return self.steps[_START if self.interval[task] else _COMPLETE][task]

    def _begin_step(self, task: int) -> Step:
        """The step after which the task has `begun`."""
        return self.completion_step(task) if self.begins_when_done[task] else self.first_step(task)

    def _setters_of_note(self, state, note: int) -> tuple[Step, ...]:
        """The setters of a notify that can set it next."""
        return self._next_in_lanes(state, self.note_lanes.get(note, ()))

    def _setters_of_flag(self, state, event: int) -> tuple[Step, ...]:
        """The records of a flag event that can set it next."""
        return self._next_in_lanes(state, self.flag_lanes.get(event, ()))

    def _next_in_lanes(self, state, lanes) -> tuple[Step, ...]:
        """Each lane's first (statement, step kind) not done (`note_lanes`): the done ones are a
        prefix of it."""
        status = state.status
        out = []
        for lane in lanes:
            k = bisect_left(lane, True, key=lambda entry: status[entry[0]] != DONE)
            if k < len(lane):
                i, kind = lane[k]
                out.append(self.steps[kind][i])
        return tuple(out)

    def _not_reached(self, t: int, v: int) -> Blocked:
        """Thread t, at `v` (`State.threads`), has not reached a statement: it must first
        take its own next step. (Kept per position: exploration asks this most often.)"""
        found = self._waiting_thread.get((t, v))
        if found is None:
            cur = self.thread_stmts[t][v >> 1]
            found = self._waiting_thread[(t, v)] = Blocked(
                lambda: f"thread {self.program.threads[t].name} has not reached it "
                f"(it is at {self.describe(cur)})",
                (self.steps[_RETURN if v & 1 else _ISSUE][cur],),
            )
        return found

    def deps_blocker(self, state, task: int) -> Blocked | None:
        """Rules 2 and 3: the earlier tasks its hardware queue or the legacy stream orders it
        after (captured at its issue) have begun or completed."""
        slot = self.dslot[task]
        if slot < 0:
            return None
        for dep, need in state.bind[slot]:
            if need == NEED_DONE:
                if state.status[dep] != DONE:
                    return Blocked(lambda: f"waiting for {self.describe(dep)} to complete (legacy default stream)",
                                   (self.completion_step(dep),))
            elif not self.begun(state, dep):
                return Blocked(lambda: f"waiting for {self.describe(dep)} to begin (same hardware queue)",
                               (self._begin_step(dep),))
        return None

    def head_blocker(self, state, task: int) -> Blocked | None:
        """Rule 1: every task ahead of it on its stream has completed (tasks of its own
        batch excepted: one `group` is one fused launch)."""
        stream = self.stream_of[task]
        q = state.queues[stream]
        if not q or q[0] != task:
            if state.status[task] == NEW:
                return Blocked(lambda: f"{self.describe(task)} has not been enqueued",
                               (self.steps[_ISSUE][task],))
            batch = self.batch[task]
            for ahead in q:
                if ahead == task:
                    return None
                if batch is None or self.batch[ahead] != batch:
                    return Blocked(
                        lambda: f"waiting for {self.describe(ahead)} ahead of it on "
                        f"{self.program.streams[stream].name}",
                        (self.completion_step(ahead),),
                    )
        return None

    def first_step_blocker(self, state, task: int, peers: dict | None = None) -> Blocked | None:
        """Why the task cannot take its first step, `start` or `complete` (None: it can): its
        own conditions, and for a member that does not spin, every member of its group can
        start or has started (rule 8: they start together). `peers` keeps the latter per
        group for one state (`enabled`): it is the same for every member that can start by
        its own conditions, and a group of a thousand looked at every member from every one."""
        why = self.own_blocker(state, task)
        if why is None and self.gated[task]:
            group = self.group(state, task) if peers is not None else None
            if group is None:
                return self.peers_blocker(state, task)
            if group.index not in peers:
                peers[group.index] = self.peers_blocker(state, task)
            return peers[group.index]
        return why

    def peers_blocker(self, state, task: int) -> Blocked | None:
        """Rule 8: why the group of a member that does not spin cannot start yet (a member is
        missing, or cannot take its first step by its own conditions)."""
        group = self.group(state, task)
        if group is None:
            return None
        if not group.complete:
            return self.group_blocker(state, group)
        for m in group.members:
            if m == task or state.status[m] >= RUNNING:
                continue
            why = self.own_blocker(state, m)
            if why is not None:
                comm = self.program.comms[group.comm].name
                return Blocked(lambda: f"its {comm} group starts together, and {self.describe(m)} "
                               f"cannot start yet ({why})", why.needs)
        return None

    def own_blocker(self, state, task: int) -> Blocked | None:
        """Why the task cannot take its first step by its own conditions (rules 1-5, 10, 11)."""
        status = state.status[task]
        if status == NEW:
            return Blocked("not enqueued yet", (self.steps[_ISSUE][task],))
        if status != QUEUED:
            return Blocked("already begun")
        why = self.head_blocker(state, task)
        if why:
            return why
        # Rules 2 and 3 (hardware queues, legacy stream) hold from the first step on.
        why = self.deps_blocker(state, task)
        if why:
            return why
        # Its own condition: a wait's flag or bound record, an await's notify.
        e = self.wait_flag[task]
        if e >= 0:
            if not state.flags >> e & 1:
                return Blocked(lambda: f"flag {self.program.events[e].name} not set",
                               self._setters_of_flag(state, e))
            return None
        slot = self.wslot[task]
        if slot >= 0:
            rec = state.bind[slot]
            if rec >= 0 and state.status[rec] != DONE:
                return Blocked(lambda: f"waiting for {self.describe(rec)}", (self.steps[_COMPLETE][rec],))
            return None
        n = self.await_note[task]
        if n >= 0 and not state.notes >> n & 1:
            return Blocked(lambda: f"notify {self.program.notifies[n].name} not set",
                           self._setters_of_note(state, n))
        return None

    def group(self, state, task: int):
        """The group a call of a comm belongs to in `state` (None for other statements): its
        static group, or for a call of an interleaved comm the calls enqueued at its position
        of each meeting class (`Met`; known once it is enqueued)."""
        c = self.call_class[task]
        if c < 0:
            return self.group_of[task]
        if state.status[task] == NEW:
            return None
        k = state.bind[self.pslot[task]]
        members: list[int] = []
        missing = None
        for other in self.class_meets[c]:
            calls = self.class_calls[other] if other >= 0 else ()
            if k >= len(calls):
                missing = collectives.missing_member(self.program, self.program.statements[task], k)
                continue
            found = state.bind[self.class_base[other] + k]
            if found < 0:
                missing = missing or (f"its group waits for call {k + 1} of "
                                      f"{self.program.streams[self.stream_of[calls[0]]].name} "
                                      f"({self.describe(calls[0])}, ...) to be enqueued")
            else:
                members.append(found)
        members.sort()
        st = self.program.statements[task]
        kind = GroupKind.SENDRECV if st.op in (Op.SEND, Op.RECV) else GroupKind.COLLECTIVE
        return Met(-1 - members[0], kind, st.comm, k, tuple(members), missing is None, missing)

    def group_blocker(self, state, group) -> Blocked | None:
        """Why the members of a collective group cannot end: a member is missing or has not
        started."""
        if not group.complete:
            missing = collectives.missing_member(self.program, self.program.statements[group.members[0]],
                                                 group.position)
            if not isinstance(group, Met):  # never
                return Blocked(missing)
            # An interleaved comm's group meets once each meeting class has enqueued a call
            # at its position: any of their calls still to be enqueued may complete it.
            needs: list[Step] = []
            for other in self.class_meets[self.call_class[group.members[0]]]:
                if other < 0:
                    return Blocked(group.missing or missing)
                needs.extend(self.steps[_ISSUE][x] for x in self.class_calls[other]
                             if state.status[x] == NEW)
            return Blocked(group.missing or missing, tuple(needs))
        for m in group.members:
            if state.status[m] < RUNNING:
                comm = self.program.comms[group.comm].name
                return Blocked(lambda: f"its {comm} group waits for {self.describe(m)} to start",
                               (self.first_step(m),))
        return None

    def end_blocker(self, state, task: int) -> Blocked | None:
        """`end` of a running task needs only that it has started; a collective member's
        `end` needs every member of its group started."""
        if state.status[task] != RUNNING:
            return Blocked("not running", () if state.status[task] == DONE else (self.first_step(task),))
        group = self.group(state, task) if self.in_group[task] else None
        if group is not None:
            return self.group_blocker(state, group)
        return None

    def return_blocker(self, state, stmt: int) -> Blocked | None:
        """Why the thread holding `stmt` cannot take its `return` (None: it can): a pageable
        copy waits for its task, a sync for what it captured or for its flag."""
        if self.stream_of[stmt] is not None:  # pageable copy
            if state.status[stmt] != DONE:
                return Blocked(lambda: f"waiting for the copy {self.describe(stmt)} to complete",
                               (self.completion_step(stmt),))
            return None
        slot = self.wslot[stmt]
        if slot >= 0:
            for task in state.bind[slot]:
                if state.status[task] != DONE:
                    return Blocked(lambda: f"waiting for {self.describe(task)}", (self.completion_step(task),))
        return None

    def blocker(self, state, step: Step) -> Blocked | None:
        """Why `step` cannot happen in `state` (with the steps that could change that); None
        when it is legal."""
        i = step.statement
        if not isinstance(i, int) or not 0 <= i < self.n:
            return Blocked(lambda: f"no statement #{i}")
        kind = step.kind
        if kind is _ISSUE or kind is _RETURN:
            t = self.thread_of[i]
            v = state.threads[t]
            at = v >> 1
            if self.position[i] != at:
                if self.position[i] < at or state.status[i] != NEW:
                    return self._past[t]
                return self._not_reached(t, v)
            if kind is _ISSUE:
                if v & 1:
                    return Blocked("already issued")
                n = self.issue_note[i]
                if n >= 0 and not state.notes >> n & 1:
                    return Blocked(lambda: f"notify {self.program.notifies[n].name} not set",
                                   self._setters_of_note(state, n))
                return None
            if not v & 1:
                if not self.holds[i]:
                    return Blocked("this statement has no return step")
                return Blocked("not issued yet", (self.steps[_ISSUE][i],))
            return self.return_blocker(state, i)
        if self.stream_of[i] is None:
            return Blocked(lambda: f"a host statement has no {kind.value} step")
        if kind is _END:
            if not self.interval[i]:
                return Blocked("an instant task has no end step (it completes)")
            return self.end_blocker(state, i)
        if kind is _START:
            if not self.interval[i]:
                return Blocked("an instant task has no start step (it completes)")
            return self.first_step_blocker(state, i)
        if kind is _COMPLETE:
            if self.interval[i]:
                return Blocked("a running task has start and end steps, not complete")
            return self.first_step_blocker(state, i)
        return Blocked(lambda: f"unknown step kind {kind!r}")

    # ------------------------------------------------------------------ enabled steps

    def enabled(self, state: State) -> tuple[Step, ...]:
        """Every step legal in `state`: threads first (by index), then stream heads."""
        out: list[Step] = []
        steps = self.steps
        issue_note = self.issue_note
        for t, v in enumerate(state.threads):
            stmts = self.thread_stmts[t]
            k = v >> 1
            if k >= len(stmts):
                continue
            i = stmts[k]
            if v & 1:
                if self.return_blocker(state, i) is None:
                    out.append(steps[_RETURN][i])
            else:
                n = issue_note[i]
                if n >= 0 and not state.notes >> n & 1:
                    continue
                out.append(steps[_ISSUE][i])
        batch = self.batch
        met: dict[int, bool] = {}  # group index -> whether its members may end
        peers: dict[int, Blocked | None] = {}  # group index -> why its members may not start (rule 8)
        for q in filter(None, state.queues):  # (skipping the empty ones in C: wide programs have thousands)
            head_batch = batch[q[0]]
            for k, h in enumerate(q):
                if k and (head_batch is None or batch[h] != head_batch):
                    break  # only the head, or the batch at the head, can move
                s = state.status[h]
                if s == RUNNING:
                    g = self.group(state, h) if self.in_group[h] else None
                    if g is None:
                        out.append(steps[_END][h])
                    else:
                        free = met.get(g.index)
                        if free is None:
                            free = met[g.index] = self.group_blocker(state, g) is None
                        if free:
                            out.append(steps[_END][h])
                elif self.interval[h]:
                    if self.first_step_blocker(state, h, peers) is None:
                        out.append(steps[_START][h])
                elif self.first_step_blocker(state, h, peers) is None:
                    out.append(steps[_COMPLETE][h])
        return tuple(out)

    # ------------------------------------------------------------------ effects

    def apply(self, state: State, step: Step) -> State:
        """The state after `step`; raises IllegalStep when the step may not happen."""
        return self.advance(state, step).state

    def advance(self, state: State, step: Step) -> Transition:
        """Like `apply`, and also reports the races and dead-memory uses the step started."""
        return self.fire(state, self._checked(state, step))

    def advance_into(self, store: Store, step: Step, track: bool = True):
        """Check and apply `step` to a mutable `Store` in place; returns (races, dead uses).
        Raises IllegalStep, leaving the store unchanged, when the step may not happen."""
        updates, races, uses = self.effects(store, self._checked(store, step), track)
        store.update(updates)
        return races, uses

    def _checked(self, state, step: Step) -> Step:
        """`step` if legal, else IllegalStep."""
        why = self.blocker(state, step)
        if why is not None:
            raise IllegalStep(f"{step.kind.value} {self.describe_index(step.statement)}: {why}")
        return step

    def fire(self, state: State, step: Step) -> Transition:
        """Apply a step already known to be legal (explore calls this on enabled steps)."""
        updates, races, uses = self.effects(state, step)
        return Transition(apply_updates(state, updates), races, uses)

    def effects(self, view, step: Step, track: bool = True):
        """The one step function: what a legal `step` changes, as a tuple of updates.

        `view` is a `State` or any object with the same fields (the simulator's mutable
        store). Returns (updates, races, dead uses); with `track=False` the access checks
        and the running set are skipped (the simulator does not look for races).
        """
        i = step.statement
        kind = step.kind
        if not track:  # (the simulator: every step once, nothing to keep)
            updates = self._fixed_updates(kind, i, False)
            if kind is _ISSUE and self.captures[i]:
                updates = updates + self._captured(view, i)
            return updates, (), ()
        updates = self._fixed[kind][i]
        if kind is _ISSUE and self.captures[i]:
            updates = updates + self._captured(view, i)
        races = uses = ()
        if kind is _START or (kind is _ISSUE and self.host_access[i]):
            races, uses = self._start_access(i, view.running, view.dead, view.freed, view.status)
        elif (kind is _END or kind is _RETURN) and view.running & self.kill_watch[i]:
            uses = tuple((j, USE_AFTER_FREE) for j in bits(view.running & self.kill_watch[i]))
        if kind is _ISSUE and (view.launch_dead & self.launch_touch[i]
                               or any(view.status[f] != NEW for f in self.tensor_frees[i])):
            # launch order: a use after free whenever it runs (a host statement runs now)
            if self.stream_of[i] is None:
                uses = uses + ((i, ENQUEUED_AFTER_FREE),)
            else:
                updates = updates + ((U_MARK, 1 << i, 0),)
        elif kind is _START and view.launch_marked >> i & 1:
            uses = uses + ((i, ENQUEUED_AFTER_FREE),)
        if kind is _ISSUE and self.block_allocs[i] and any(
                all(view.status[a] == NEW for a in allocs) for allocs in self.block_allocs[i]):
            uses = uses + ((i, USE_BEFORE_ALLOC),)
        return updates, races, uses

    def _fixed_updates(self, kind: StepKind, i: int, track: bool) -> tuple:
        """The updates of step (kind, i) that do not depend on the state it is taken in
        (every one, except what an issue captures)."""
        t = self.thread_of[i]
        k = self.position[i]
        s = self.stream_of[i]
        up: list[tuple] = []
        if kind is _ISSUE:
            if self.launch_life[i]:
                if self.program.statements[i].op is Op.FREE:
                    up.append((U_LAUNCH, self.launch_life[i], 0))
                else:
                    up.append((U_LAUNCH, 0, self.launch_life[i]))
            if s is not None:  # enqueue
                if self.records[i] >= 0:
                    up.append((U_LAST, self.records[i], i))
                up.append((U_ENQUEUE, s, i))
                up.append((U_STATUS, i, QUEUED))
            elif self.holds[i]:  # a host function, host free or sync holds its thread
                if track and self.host_access[i]:
                    up.append((U_RUNNING, i, True))
                up.append((U_STATUS, i, RUNNING))
            else:  # host notify, await, alloc: done at once
                up.extend(self.signal[i])
                up.append((U_STATUS, i, DONE))
            up.append((U_THREAD, t, 2 * k + 1 if self.holds[i] else 2 * k + 2))
        elif kind is _RETURN:
            up.append((U_THREAD, t, 2 * k + 2))
            if s is None:
                if self.kill[i]:
                    up.append((U_DEAD, self.kill[i], 0))
                    up.append((U_FREED, self.kill[i], 0))
                if track:
                    up.append((U_RUNNING, i, False))
                up.append((U_STATUS, i, DONE))
        elif kind is _START:
            if track:
                up.append((U_RUNNING, i, True))
            up.append((U_STATUS, i, RUNNING))
        elif kind is _END:
            up.append((U_DEQUEUE, s, i))
            up.append((U_STATUS, i, DONE))
            if track:
                up.append((U_RUNNING, i, False))
            if self.kill[i]:
                up.append((U_DEAD, self.kill[i], 0))
                up.append((U_FREED, self.kill[i], 0))
        else:  # COMPLETE
            up.append((U_DEQUEUE, s, i))
            up.append((U_STATUS, i, DONE))
            up.extend(self.signal[i])
        return tuple(up)

    def _captured(self, view, i: int) -> tuple:
        """What an issue binds, read from the state it is taken in: the record a wait binds
        to, the tasks a sync waits for, the earlier tasks rules 2 and 3 order a task after."""
        st = self.program.statements[i]
        out = []
        slot = self.wslot[i]
        if slot >= 0:
            if st.stream is not None:
                out.append((U_BIND, slot, view.last_record[st.event]))
            else:
                out.append((U_BIND, slot, self._capture_sync(st, view.tails, view.last_record)))
        slot = self.dslot[i]
        if slot >= 0:
            out.append((U_BIND, slot, self._capture_deps(view.tails, st.stream)))
        slot = self.pslot[i]
        if slot >= 0:  # its position: the calls of its class enqueued before it
            c = self.call_class[i]
            k = view.bind[self.class_last[c]] + 1
            out.append((U_BIND, slot, k))
            out.append((U_BIND, self.class_last[c], k))
            out.append((U_BIND, self.class_base[c] + k, i))
        return tuple(out)

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
            for j in bits(running):
                if self.conflict(i, j):
                    clash |= 1 << j
        if clash:
            races = tuple((j, i) for j in bits(clash))
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

    def siblings(self, task: int) -> list[int]:
        """Earlier tasks of the same batch on the same stream: waiting for a batch member that
        was enqueued last on its stream means waiting for these too."""
        return self._batch_members[task][:self._earlier_members[task]]

    def _capture_deps(self, tails, stream: int) -> tuple[tuple[int, int], ...]:
        """Earlier tasks that a task enqueued now on `stream` must wait for (rules 2 and 3).

        Within a stream tasks begin and complete in order, so the last task enqueued on each
        peer stream stands for all earlier ones.
        """
        deps = []
        siblings = self.siblings
        for o in self.queue_peers[stream]:
            t = tails[o]
            if t >= 0 and o != stream:
                deps.append((t, NEED_BEGUN))
                deps.extend((b, NEED_BEGUN) for b in siblings(t))
        for o in self.legacy_peers[stream]:
            t = tails[o]
            if t >= 0:
                deps.append((t, NEED_DONE))
                deps.extend((b, NEED_DONE) for b in siblings(t))
        return tuple(deps)

    def _capture_sync(self, st: Statement, tails, last) -> tuple[int, ...]:
        """The tasks a sync issued now waits for: the last task enqueued on each stream."""
        if st.sync is SyncKind.EVENT:
            rec = last[st.target]
            return (rec,) if rec >= 0 else ()
        waited: list[int] = []
        for s in self.sync_streams[st.index]:
            t = tails[s]
            if t >= 0:
                waited.append(t)
                waited.extend(self.siblings(t))
        return tuple(waited)

    # ------------------------------------------------------------------ explanations

    def describe(self, i: int) -> str:
        """`s1: wait ready (line 7)` (cached: blocked steps are explained over and over)."""
        text = self._described.get(i)
        if text is None:
            text = self._described[i] = explain.describe(self.program, i)
        return text

    def describe_index(self, i: object) -> str:
        """`describe(i)` for a statement index, `#i` for anything else."""
        if isinstance(i, int) and 0 <= i < self.n:
            return self.describe(i)
        return f"#{i}"

    def stuck(self, state: State) -> tuple[tuple[int, str], ...]:
        """For a state with unfinished work: each unfinished thread and task and what it waits
        for (`notify go not set`), in statement order (`explain.stuck`)."""
        return explain.stuck(self, state)

    def killer(self, state, i: int, kind: str = USE_AFTER_FREE) -> int | None:
        """The latest free that made bytes statement i touches dead (`explain.killer`)."""
        return explain.killer(self, state, i, kind)
