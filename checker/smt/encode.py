"""Encode a program's executions as integer constraints over step times.

Every step of the program (see `checker.witness` and `docs/semantics.md`) gets one integer
time variable. With S steps and a horizon H = S, a step happens iff its time is below H.
The execution order is (time, step index) lexicographically, so every "x before y" is one
`<` or `<=` atom and the order is total without a `Distinct` constraint. The members of one
collective group share a single start variable (the group starts in one step).

For every step s, `Encoding.condition(s, now)` states when s is enabled, as a formula over
the steps ordered before `now` (a step, or HORIZON: the end of the prefix). The base
assertions say: if s happened, its condition held at its own place in the order. Then the
happened steps, in order, are a legal execution prefix, and every legal prefix is a model. Queries (race, use-after-free,
deadlock) are formulas over the same variables, asked on top of the base.

`docs/encoding.md` explains each rule; each rule in this module cites it by name.
No object of this module leaves `checker.smt`.
"""

from __future__ import annotations

from dataclasses import dataclass

import z3

from checker.ir import Op, Program, Statement, StreamMode, SyncKind
from checker.witness import Step, StepKind, Witness, holds_thread

SMALL_BINDING = 6
"""Up to this many candidate records, a wait's binding is spelled out pairwise (which also
lets static orders prune); beyond it, one integer per wait keeps the encoding linear."""

HORIZON = -1
"""`now` for a condition asked at the end of an execution prefix (deadlock)."""


# --- folding helpers: Python booleans are constants, so static facts vanish early ----------


def _and(*parts):
    kept = []
    for part in parts:
        if part is True:
            continue
        if part is False:
            return False
        kept.append(part)
    if not kept:
        return True
    return kept[0] if len(kept) == 1 else z3.And(*kept)


def _or(*parts):
    kept = []
    for part in parts:
        if part is False:
            continue
        if part is True:
            return True
        kept.append(part)
    if not kept:
        return False
    return kept[0] if len(kept) == 1 else z3.Or(*kept)


def _not(part):
    if part is True:
        return False
    if part is False:
        return True
    return z3.Not(part)


def _implies(cond, then):
    if cond is False or then is True:
        return True
    if cond is True:
        return then
    if then is False:
        return _not(cond)
    return z3.Implies(cond, then)


def _latest(tasks: list[Statement]) -> list[Statement]:
    """Of one thread's earlier tasks on a stream (in program order), those whose completion
    implies every other's: the last one, with its batch-mates when it is part of a batch."""
    if not tasks:
        return []
    last = tasks[-1]
    if last.batch is None:
        return [last]
    return [u for u in tasks if u.batch == last.batch]


def to_z3(part) -> z3.BoolRef:
    """A folded formula as a Z3 term (for assertions)."""
    if part is True:
        return z3.BoolVal(True)
    if part is False:
        return z3.BoolVal(False)
    return part


@dataclass(frozen=True, slots=True)
class Conjunct:
    """One labelled part of a step's enabling condition; labels explain deadlocks."""

    label: str
    formula: object
    after: int | None = None
    """When the conjunct is exactly 'step `after` happened before now': a static
    must-happen-before edge (used to prune race candidates)."""


@dataclass(frozen=True, slots=True)
class Segment:
    """A byte range of one memory that every alloc, free and access covers whole or not at all."""

    memory: int
    start: int
    end: int
    allocs: tuple[int, ...]
    """Statements whose alloc covers the segment."""
    frees: tuple[int, ...]
    """Statements whose free covers the segment."""


class Encoding:
    """The step variables of one program and every formula built over them."""

    def __init__(self, program: Program):
        self.program = program
        statements = program.statements
        self._position: dict[int, int] = {}
        self._previous: dict[int, int | None] = {}
        for thread in program.threads:
            previous = None
            for position, index in enumerate(thread.statements):
                self._position[index] = position
                self._previous[index] = previous
                previous = index

        # Steps. Each collective member starts on its own; a group completes in one `end`
        # step, shared by its members and written with its first member.
        self.steps: list[Step] = []
        self._step_id: dict[tuple[StepKind, int], int] = {}
        group_step: dict[int, int] = {}
        for statement in statements:
            kinds = [StepKind.ISSUE]
            if holds_thread(statement):
                kinds.append(StepKind.RETURN)
            if statement.is_task:
                if statement.running:
                    kinds += [StepKind.START, StepKind.END]
                else:
                    kinds.append(StepKind.COMPLETE)
            for kind in kinds:
                if kind is StepKind.END and statement.group is not None:
                    group = program.groups[statement.group]
                    if statement.group not in group_step:
                        group_step[statement.group] = len(self.steps)
                        self.steps.append(Step(StepKind.END, group.members[0]))
                    self._step_id[(kind, statement.index)] = group_step[statement.group]
                    continue
                self._step_id[(kind, statement.index)] = len(self.steps)
                self.steps.append(Step(kind, statement.index))

        self.horizon = len(self.steps)
        self.time = [z3.Int(f"t{i}_{s.kind.value}_{s.statement}") for i, s in enumerate(self.steps)]
        self._group_members: dict[int, tuple[int, ...]] = {
            group_step[g]: program.groups[g].members for g in group_step
        }
        self._never: set[int] = {
            group_step[g] for g in group_step if not program.groups[g].complete
        }
        self.segments: tuple[Segment, ...] = self._segments()
        self._own: dict[int, list[Conjunct]] = {}
        self._records_of: dict[int, list[Statement]] = {}
        self._bound_key: dict[int, z3.ArithRef] = {}
        self._binding_facts: list[z3.BoolRef] = []
        self._based = False

    # --- step lookup --------------------------------------------------------------------

    def previous(self, statement: Statement) -> Statement | None:
        """The statement before this one in its thread."""
        index = self._previous[statement.index]
        return None if index is None else self.program.statements[index]

    def witness(self, order) -> Witness:
        """The witness of an execution order given as step ids."""
        return Witness(tuple(self.steps[i] for i in order))

    def can_block(self) -> bool:
        """Whether any step can wait on something enqueued later or on nothing at all.

        Without flag waits or flag syncs, awaits and collectives, every task waits only for
        tasks enqueued before it (stream, hardware queue and legacy order, the bound record)
        and every blocked thread only for tasks it already saw enqueued: the earliest
        enqueued unfinished task can always move, so no execution deadlocks."""
        program = self.program
        for statement in program.statements:
            if statement.op is Op.AWAIT or statement.group is not None:
                return True
            if statement.op is Op.WAIT and program.events[statement.event].flag:
                return True
            if (statement.op is Op.SYNC and statement.sync is SyncKind.EVENT
                    and program.events[statement.target].flag):
                return True
        return bool(program.groups)

    def step(self, kind: StepKind, statement: int) -> int:
        return self._step_id[(kind, statement)]

    def has_step(self, kind: StepKind, statement: int) -> bool:
        return (kind, statement) in self._step_id

    def first_step(self, statement: Statement) -> int:
        """Where the statement's work (or its access) begins: task start/complete, host issue."""
        if statement.is_task:
            if statement.running:
                return self.step(StepKind.START, statement.index)
            return self.step(StepKind.COMPLETE, statement.index)
        return self.step(StepKind.ISSUE, statement.index)

    def last_step(self, statement: Statement) -> int:
        """Where the statement's work (or its access) ends: task end/complete, host return."""
        if statement.is_task:
            return self.completion(statement)
        if holds_thread(statement):
            return self.step(StepKind.RETURN, statement.index)
        return self.step(StepKind.ISSUE, statement.index)

    def completion(self, statement: Statement) -> int:
        """The step at which a task has completed."""
        if statement.running:
            return self.step(StepKind.END, statement.index)
        return self.step(StepKind.COMPLETE, statement.index)

    def begin(self, statement: Statement) -> int:
        """The step at which a task has *begun*: a running task's start (whatever its
        duration, as rules 2 and 3 are asked at the first step), an instant task's completion."""
        if statement.running:
            return self.step(StepKind.START, statement.index)
        return self.completion(statement)

    def thread_done(self, statement: Statement) -> int:
        """The last thread step of a statement (what program order waits for)."""
        if holds_thread(statement):
            return self.step(StepKind.RETURN, statement.index)
        return self.step(StepKind.ISSUE, statement.index)

    # --- atoms --------------------------------------------------------------------------

    def precedes(self, first: int, second: int):
        """first comes before second in the execution order: (t, index) lexicographically.

        Ties in time are broken by step index, so every comparison is a single `<` or `<=`
        and no `Distinct` is needed for the order to be total."""
        if first == second:
            return False
        if first < second:
            return self.time[first] <= self.time[second]
        return self.time[first] < self.time[second]

    def before(self, step: int, now: int):
        """Step `step` happened before `now`: a step id, or HORIZON (the end of the prefix)."""
        if now == HORIZON:
            return self.happened(step)
        return self.precedes(step, now)

    def happened(self, step: int):
        return self.time[step] < self.horizon

    def _between(self, first: int, second: int, now):
        """first < second < now: `second` happened after `first` and before `now`."""
        return _and(self.precedes(first, second), self.before(second, now))

    def enqueued_before(self, u: Statement, x: Statement):
        """u's issue precedes x's issue. Static within a thread (program order)."""
        if u.index == x.index:
            return False
        if u.thread == x.thread:
            return self._position[u.index] < self._position[x.index]
        return self.precedes(self.step(StepKind.ISSUE, u.index), self.step(StepKind.ISSUE, x.index))

    def _describe(self, statement: Statement) -> str:
        return f"{self.program.describe(statement)} (line {statement.span.line})"

    def _needs(self, label: str, step: int, now, when=True) -> Conjunct:
        """'If `when`, step happened before now', remembering static edges."""
        formula = _implies(when, self.before(step, now))
        return Conjunct(label, formula, step if when is True else None)

    # --- rule: stream order, hardware queues, legacy default stream ----------------------

    def stream_order(self, x: Statement, now) -> list[Conjunct]:
        """Rule 1: every task enqueued on x's stream before x has completed, but those of
        x's own batch (one `group` is one fused launch).

        Within one thread only the latest earlier task matters (it completes last, by FIFO),
        with its batch-mates when it is part of a batch."""
        parts = [self._needs(f"{self._describe(x)} to be enqueued",
                             self.step(StepKind.ISSUE, x.index), now)]
        own: list[Statement] = []
        for u in self.program.statements:
            if u.stream != x.stream or u.index == x.index:
                continue
            if x.batch is not None and u.batch == x.batch:
                continue
            if u.thread == x.thread:
                if self._position[u.index] < self._position[x.index]:
                    own.append(u)
                continue
            parts.append(self._needs(f"{self._describe(u)} to complete",
                                     self.completion(u), now, self.enqueued_before(u, x)))
        for u in _latest(own):
            parts.append(self._needs(f"{self._describe(u)} to complete", self.completion(u), now))
        return parts

    def hardware_queue(self, x: Statement, now) -> list[Conjunct]:
        """Rule 2: every task enqueued earlier into x's hardware queue has begun."""
        stream = self.program.streams[x.stream]
        if stream.queue is None:
            return []
        parts = []
        for u in self.program.statements:
            if u.stream is None or u.stream == x.stream:
                continue
            other = self.program.streams[u.stream]
            if other.device != stream.device or other.queue != stream.queue:
                continue
            parts.append(self._needs(f"{self._describe(u)} to begin (hardware queue {stream.queue})",
                                     self.begin(u), now, self.enqueued_before(u, x)))
        return parts

    def legacy(self, x: Statement, now) -> list[Conjunct]:
        """Rule 3: legacy-stream tasks wait for earlier blocking-stream tasks and vice versa."""
        stream = self.program.streams[x.stream]
        if stream.mode is StreamMode.LEGACY:
            other_mode = StreamMode.BLOCKING
        elif stream.mode is StreamMode.BLOCKING:
            other_mode = StreamMode.LEGACY
        else:
            return []
        parts = []
        for u in self.program.statements:
            if u.stream is None or u.stream == x.stream:
                continue
            other = self.program.streams[u.stream]
            if other.device != stream.device or other.mode is not other_mode:
                continue
            parts.append(self._needs(f"{self._describe(u)} to complete (legacy default stream)",
                                     self.completion(u), now, self.enqueued_before(u, x)))
        return parts

    def _begins(self, x: Statement, now) -> list[Conjunct]:
        return self.hardware_queue(x, now) + self.legacy(x, now)

    # --- rule: snapshot binding, flags, notifies ------------------------------------------

    def _records(self, event: int) -> list[Statement]:
        cached = self._records_of.get(event)
        if cached is None:
            cached = self._records_of[event] = [
                s for s in self.program.statements if s.op is Op.RECORD and s.event == event]
        return cached

    def _order_key(self, step: int):
        """An integer term ordered exactly as the execution order: (time, index) flattened."""
        return self.time[step] * (len(self.steps) + 1) + step

    def _resets(self, event: int) -> list[Statement]:
        return [s for s in self.program.statements if s.op is Op.RESET and s.event == event]

    def binding(self, w: Statement, event: int) -> list[tuple[Statement, object]]:
        """Snapshot binding: record r binds iff r is the latest record of the event whose
        issue precedes w's issue. Returns (record, 'r is the binding') for possible records."""
        records = self._records(event)
        candidates = [r for r in records if self.enqueued_before(r, w) is not False]
        if len(candidates) > SMALL_BINDING:
            return self._latest_by_key(w, candidates)
        result = []
        for r in records:
            earlier = self.enqueued_before(r, w)
            if earlier is False:
                continue
            latest = _and(earlier, *[
                _not(_and(self.enqueued_before(r, other), self.enqueued_before(other, w)))
                for other in records if other.index != r.index
            ])
            if latest is not False:
                result.append((r, latest))
        return result

    def _latest_by_key(self, w: Statement, candidates: list[Statement]) -> list[tuple[Statement, object]]:
        """Snapshot binding in linear size, for waits with many candidate records: one integer
        per wait holds the order key of the latest record issued before it (-1: none). Its
        definition joins the base assertions; each record binds iff its key equals it."""
        bound = self._bound_key.get(w.index)
        keys = {r.index: self._order_key(self.step(StepKind.ISSUE, r.index)) for r in candidates}
        if bound is None:
            assert not self._based, "a binding variable created after the base was taken"
            bound = self._bound_key[w.index] = z3.Int(f"bind_{w.index}")
            own = self._order_key(self.step(StepKind.ISSUE, w.index))
            self._binding_facts.append(bound < own)
            self._binding_facts.append(z3.Or(bound == -1, *[bound == k for k in keys.values()]))
            self._binding_facts.extend(z3.Implies(k < own, k <= bound) for k in keys.values())
        return [(r, bound == keys[r.index]) for r in candidates]

    def bound_record_done(self, w: Statement, event: int, now) -> list[Conjunct]:
        """Rule `wait`/`sync` on a snapshot event: the bound record (if any) has completed."""
        return [
            self._needs(f"{self._describe(r)} to complete", self.completion(r), now, bound)
            for r, bound in self.binding(w, event)
        ]

    def _latest_is_setter(self, setters: list[int], clearers: list[int], now):
        """Some setter step happened before now with no clearer step after it (before now)."""
        return _or(*[
            _and(self.before(s, now), *[
                _not(self._between(s, c, now)) for c in clearers if c != s
            ])
            for s in setters
        ])

    def flag_set(self, event: int, now):
        """Rule flag: the latest record/reset completion before now is a record."""
        setters = [self.completion(r) for r in self._records(event)]
        clearers = [self.completion(r) for r in self._resets(event)]
        return self._latest_is_setter(setters, clearers, now)

    def _notify_steps(self, notify: int) -> tuple[list[int], list[int]]:
        setters, clearers = [], []
        for s in self.program.statements:
            if s.notify != notify or s.op not in (Op.NOTIFY, Op.AWAIT):
                continue
            step = self.step(StepKind.COMPLETE if s.is_task else StepKind.ISSUE, s.index)
            (setters if s.op is Op.NOTIFY else clearers).append(step)
        return setters, clearers

    def notify_set(self, notify: int, now):
        """Rule notify: the latest notify/await step before now is a notify."""
        setters, clearers = self._notify_steps(notify)
        return self._latest_is_setter(setters, clearers, now)

    # --- rule: sync -----------------------------------------------------------------------

    def sync_done(self, sync: Statement, now) -> list[Conjunct]:
        """Rule sync: what a `sync`'s return waits for, fixed by the tasks enqueued before its issue."""
        if sync.sync is SyncKind.EVENT:
            if self.program.events[sync.target].flag:
                return [Conjunct(f"flag event {self.program.events[sync.target].name} to be set",
                                 self.flag_set(sync.target, now))]
            return self.bound_record_done(sync, sync.target, now)
        streams = set(self.program.synced_streams(sync))
        parts = []
        own: dict[int, list[Statement]] = {}
        for u in self.program.statements:
            if u.stream not in streams:
                continue
            if u.thread == sync.thread:
                if self._position[u.index] < self._position[sync.index]:
                    own.setdefault(u.stream, []).append(u)
                continue
            parts.append(self._needs(f"{self._describe(u)} to complete",
                                     self.completion(u), now, self.enqueued_before(u, sync)))
        for tasks in own.values():
            for u in _latest(tasks):
                parts.append(self._needs(f"{self._describe(u)} to complete", self.completion(u), now))
        return parts

    # --- the enabling condition of every step ---------------------------------------------

    def condition(self, step: int, now) -> list[Conjunct]:
        """When `step` may happen at time `now` (docs/encoding.md, section "conditions")."""
        if step in self._never:
            return [Conjunct("a member of its collective group that is not in the program", False)]
        kind = self.steps[step].kind
        statement = self.program.statements[self.steps[step].statement]
        if kind is StepKind.ISSUE:
            return self._issue(statement, now)
        if kind is StepKind.RETURN:
            return self._return(statement, now)
        if kind is StepKind.START:
            return self._start(statement, now)
        if kind is StepKind.END:
            members = self._group_members.get(step, (statement.index,))
            return [self._needs(f"{self._describe(self.program.statements[m])} to start",
                                self.step(StepKind.START, m), now) for m in members]
        return self._complete(statement, now)

    def _issue(self, statement: Statement, now) -> list[Conjunct]:
        parts = []
        previous = self._previous[statement.index]
        if previous is not None:
            prev = self.program.statements[previous]
            parts.append(self._needs(f"{self._describe(prev)} to finish",
                                     self.thread_done(prev), now))
        if statement.stream is None and statement.op is Op.AWAIT:
            parts.append(Conjunct(f"notify {self.program.notifies[statement.notify].name} to be set",
                                  self.notify_set(statement.notify, now)))
        return parts

    def _return(self, statement: Statement, now) -> list[Conjunct]:
        parts = [self._needs(f"{self._describe(statement)} to be called",
                             self.step(StepKind.ISSUE, statement.index), now)]
        if statement.op is Op.SYNC:
            parts += self.sync_done(statement, now)
        elif statement.is_task:
            parts.append(self._needs(f"{self._describe(statement)} to complete (pageable copy)",
                                     self.completion(statement), now))
        return parts

    def _start(self, statement: Statement, now) -> list[Conjunct]:
        # Rules 2 and 3 hold from the first step on, also for a running task of duration 0:
        # the contract's verdict for c17 needs them before its accesses start (docs/encoding.md).
        return self.stream_order(statement, now) + self._begins(statement, now)

    def _complete(self, statement: Statement, now) -> list[Conjunct]:
        parts = self.stream_order(statement, now) + self._begins(statement, now)
        if statement.op is Op.WAIT:
            event = self.program.events[statement.event]
            if event.flag:
                parts.append(Conjunct(f"flag event {event.name} to be set",
                                      self.flag_set(statement.event, now)))
            else:
                parts += self.bound_record_done(statement, statement.event, now)
        elif statement.op is Op.AWAIT:
            parts.append(Conjunct(f"notify {self.program.notifies[statement.notify].name} to be set",
                                  self.notify_set(statement.notify, now)))
        return parts

    def enabled(self, step: int, now):
        return _and(*[c.formula for c in self.condition(step, now)])

    def own_condition(self, step: int) -> list[Conjunct]:
        """The condition of a step at its own time (built once; the base and the
        must-happen-before pruning both read it)."""
        cached = self._own.get(step)
        if cached is None:
            cached = self._own[step] = self.condition(step, step)
        return cached

    # --- base assertions ------------------------------------------------------------------

    def base(self) -> list[z3.BoolRef]:
        """Domain, and 'a step that happened was enabled at its place in the order'."""
        horizon = self.horizon
        facts = []
        for i, t in enumerate(self.time):
            if i in self._never:
                facts.append(t >= horizon)
                continue
            facts.append(t >= 0)
            enabled = _and(*[c.formula for c in self.own_condition(i)])
            if enabled is not True:
                facts.append(z3.Implies(t < horizon, to_z3(enabled)))
        self._based = True
        return facts + self._binding_facts

    # --- memory lifetime ------------------------------------------------------------------

    def _lifetime_range(self, statement: Statement) -> tuple[int, int]:
        memory = self.program.memories[statement.memory]
        for access in statement.accesses:
            if access.memory == statement.memory:
                return access.start, access.end
        return 0, memory.size

    def _segments(self) -> tuple[Segment, ...]:
        program = self.program
        cuts: dict[int, set[int]] = {}
        ranges: dict[int, list[tuple[Statement, int, int]]] = {}
        for statement in program.statements:
            if (statement.op in (Op.ALLOC, Op.FREE) and statement.memory is not None
                    and not statement.launch_only):
                lo, hi = self._lifetime_range(statement)
                ranges.setdefault(statement.memory, []).append((statement, lo, hi))
        for memory, items in ranges.items():
            points = {0, program.memories[memory].size}
            for _, lo, hi in items:
                points |= {lo, hi}
            for statement in program.statements:
                if statement.operation.accesses:
                    for access in statement.accesses:
                        if access.memory == memory:
                            points |= {access.start, access.end}
            cuts[memory] = points
        segments = []
        for memory, points in sorted(cuts.items()):
            ordered = sorted(points)
            for lo, hi in zip(ordered, ordered[1:]):
                covering = [(s, a, b) for s, a, b in ranges[memory] if a <= lo and hi <= b]
                segments.append(Segment(
                    memory, lo, hi,
                    tuple(s.index for s, _, _ in covering if s.op is Op.ALLOC),
                    tuple(s.index for s, _, _ in covering if s.op is Op.FREE),
                ))
        return tuple(segments)

    def _lifetime_step(self, index: int) -> int:
        """When an alloc makes memory live / a free makes it dead."""
        statement = self.program.statements[index]
        if statement.is_task:
            return self.completion(statement)
        if statement.op is Op.FREE:
            return self.step(StepKind.RETURN, index)
        return self.step(StepKind.ISSUE, index)

    def touched_segments(self, statement: Statement) -> list[Segment]:
        result = []
        for segment in self.segments:
            for access in statement.accesses:
                if (access.memory == segment.memory and access.start < segment.end
                        and segment.start < access.end):
                    result.append(segment)
                    break
        return result

    def dead_after_free(self, segment: Segment, now):
        """The latest alloc/free of the segment completed before now is a free (SP102)."""
        frees = [self._lifetime_step(i) for i in segment.frees]
        allocs = [self._lifetime_step(i) for i in segment.allocs]
        return self._latest_is_setter(frees, allocs, now)

    def never_allocated(self, segment: Segment, now):
        """The segment is covered by some alloc and none has completed before now (SP103).
        A segment freed before its first alloc is dead both ways (SP102 and SP103)."""
        if not segment.allocs:
            return False
        return _and(*[_not(self.before(self._lifetime_step(i), now)) for i in segment.allocs])

    # --- queries --------------------------------------------------------------------------

    def race(self, a: Statement, b: Statement):
        """Both accesses running at once: both started, neither ended before the other started."""
        sa, ea = self.first_step(a), self.last_step(a)
        sb, eb = self.first_step(b), self.last_step(b)
        return _and(self.happened(sa), self.happened(sb),
                    self.precedes(sa, eb), self.precedes(sb, ea))

    def use_after_free(self, statement: Statement):
        """Run order: some byte is dead by a free when the access starts. Launch order: the
        statement is enqueued after a free of its memory with no alloc enqueued between."""
        first = self.first_step(statement)
        return _or(
            _and(self.happened(first), _or(*[
                self.dead_after_free(g, first) for g in self.touched_segments(statement)
            ])),
            self.enqueued_after_free(statement),
        )

    def launch_lifetimes(self, memory: int) -> tuple[list[Statement], list[Statement]]:
        """Every alloc and every free of a memory (launch order counts them all)."""
        allocs = [s for s in self.program.statements if s.op is Op.ALLOC and s.memory == memory]
        frees = [s for s in self.program.statements if s.op is Op.FREE and s.memory == memory]
        return allocs, frees

    def enqueued_after_free(self, statement: Statement):
        issue = self.step(StepKind.ISSUE, statement.index)
        cases = []
        for memory in dict.fromkeys(a.memory for a in statement.accesses):
            allocs, frees = self.launch_lifetimes(memory)
            for free in frees:
                if free.index == statement.index:
                    continue
                after = self.enqueued_before(free, statement)
                if after is False:
                    continue
                cases.append(_and(self.happened(issue), after, *[
                    _not(_and(self.enqueued_before(free, alloc), self.enqueued_before(alloc, statement)))
                    for alloc in allocs
                ]))
        return _or(*cases)

    def use_before_alloc(self, statement: Statement):
        first = self.first_step(statement)
        return _and(self.happened(first), _or(*[
            self.never_allocated(g, first) for g in self.touched_segments(statement)
        ]))

    def earliest_pending_blocks(self):
        """A fact of every stuck state, asserted to guide the deadlock search.

        Either no enqueued task is unfinished, or the earliest-enqueued unfinished task is one
        that can wait for something enqueued later (an await, a flag wait, a collective):
        every other task waits only for earlier-enqueued tasks, which are finished, so it
        could move. Z3 proves deadlock freedom far faster with this case split spelled out."""
        tasks = [s for s in self.program.statements if s.is_task]
        issued = lambda u: self.happened(self.step(StepKind.ISSUE, u.index))  # noqa: E731
        done = lambda u: self.happened(self.completion(u))  # noqa: E731
        cases = [_and(*[_or(_not(issued(u)), done(u)) for u in tasks])]
        for b in tasks:
            waits_for_later = (
                b.op in (Op.AWAIT, Op.ALLREDUCE, Op.SEND, Op.RECV) or b.group is not None
                or (b.op is Op.WAIT and self.program.events[b.event].flag)
            )
            if waits_for_later:
                cases.append(_and(issued(b), _not(done(b)), *[
                    _or(done(u), _not(self.enqueued_before(u, b)))
                    for u in tasks if u.index != b.index
                ]))
        return _or(*cases)

    def deadlock(self, taken: frozenset[int] = frozenset()):
        """Some step has not happened, and no step that has not happened is enabled at H.
        `taken`: steps known to have happened in every such state (`progress.py`)."""
        stuck = _and(_or(*[_not(self.happened(i)) for i in range(len(self.steps))
                           if i not in taken]),
                     *[self.happened(i) for i in sorted(taken)],
                     self.earliest_pending_blocks())
        blocked = [
            _or(self.happened(i), _not(self.enabled(i, HORIZON)))
            for i in range(len(self.steps)) if i not in self._never
        ]
        return _and(stuck, *blocked)
