"""Run a program forward in time, as a runtime would, to predict its makespan.

The simulator fires the machine's own steps (`Machine.blocker` decides legality,
`Machine.effects` what a step changes) over a mutable copy of the state, in time order:

* each stream statement costs its thread the device's `launch` time before its `issue`;
  `host F D` holds the thread for D; a `sync` or pageable copy holds it until it may return;
* a task whose first step is legal and that needs an engine takes a free unit of that engine
  on its device (`Device.count`), contended units going to the lower `Stream.priority`, then
  to the earlier enqueue; it ends `duration` later. Instant tasks and tasks without an engine
  or duration take none;
* a collective member starts (its buffers are in use, as `check` sees it) when its stream
  reaches it, and waits there for its peers without an engine; once every member has started,
  the group takes one unit on each member's device at once, when all are free, and each member
  ends its own duration later, releasing its unit (the contract: a group's members "all start
  together", and a task holds its engine while it runs). Holding units while spinning would hang two groups
  that each hold one device's last unit, a hang `check` rightly does not report;
* at one instant, finished tasks release first, then threads step in index order, then
  stream heads, repeatedly until nothing more can happen; then the free units go to the tasks
  that want them, and if that let anything more happen, the rounds go on; then time jumps to
  the next event.

If nothing can happen and work is left, the simulation stops and reports the deadlock.
"""

from __future__ import annotations

import gc
import heapq
from contextlib import contextmanager
from itertools import islice
from dataclasses import dataclass
from typing import NamedTuple, Protocol, Sequence

from checker import collectives
from checker.ir import NS_PER_MS, Engine, Op, Program, Runtime
from checker.timing import Interval, Part, Timing, TimeUnit
from checker.witness import StepKind
from checker.executor.machine import NEED_BEGUN, Machine
from checker.executor.state import DONE, QUEUED, RUNNING, Store


class TaskTime(NamedTuple):
    """When one task ran (a NamedTuple: there can be 100,000 of them)."""

    statement: int
    line: int
    stream: str
    engine: str | None
    unit: int | None
    """Which unit of its engine it ran on (None: it took none)."""
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class EngineUse:
    device: str
    engine: str
    units: int
    busy: int
    """Summed task time on this engine, ns."""
    utilisation: float
    """busy / (units * makespan)."""


@dataclass(frozen=True, slots=True)
class PathNode:
    statement: int
    part: str
    """"task" (on its stream) or "thread" (the host side of the statement)."""
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class Simulation:
    makespan: int
    """ns until the last statement or task completes (until the stop, when deadlocked)."""
    tasks: tuple[TaskTime, ...]
    engines: tuple[EngineUse, ...]
    host_busy: int
    """ns the host threads spend launching and running host functions (summed)."""
    device_busy: int
    """ns of task time on the devices (summed)."""
    critical_path: tuple[PathNode, ...]
    """The chain of statements that determined the makespan, earliest first."""
    timing: Timing
    """When each task, launch, host statement and blocked copy ran (for `--trace`/`--svg`)."""
    deadlocked: bool
    stuck: tuple[tuple[int, str], ...]
    """When deadlocked: each unfinished statement and what it waits for."""
    program: Program | None = None
    steps: tuple = ()
    """The simulated execution as machine steps, in order (a witness `replay` accepts)."""

    def to_json(self) -> dict:
        p = self.program

        def ms(t: int) -> float:
            return round(t / NS_PER_MS, 6)

        def line(i: int) -> int | None:
            return p.statements[i].span.line if p is not None else None

        return {
            "makespan": ms(self.makespan),
            "deadlocked": self.deadlocked,
            "engines": {
                f"{e.device}/{e.engine}": {"units": e.units, "busy": ms(e.busy),
                                           "utilisation": round(e.utilisation, 4)}
                for e in self.engines
            },
            "host_busy": ms(self.host_busy),
            "device_busy": ms(self.device_busy),
            "tasks": [
                {"statement": t.statement, "line": t.line, "stream": t.stream, "engine": t.engine, "start": ms(t.start),
                 "end": ms(t.end)}
                for t in self.tasks
            ],
            "critical_path": [
                {"statement": n.statement, "line": line(n.statement), "part": n.part, "start": ms(n.start),
                 "end": ms(n.end)}
                for n in self.critical_path
            ],
            "stuck": [{"line": line(i), "statement": i,
                       "what": p.describe(p.statements[i]) if p is not None else None,
                       "waits_for": w} for i, w in self.stuck],
        }


def simulate(program: Program, shuffle: int | None = None, interleave: bool = False,
             guide: Sequence[int] | None = None) -> Simulation:
    """Simulate `program` in time; never hangs (a deadlock ends the run and is reported).

    At each instant the threads move in index order and the stream heads are taken in index
    order. With `shuffle` (a seed), both orders are random permutations instead: another legal
    execution, where threads race for a stream, an event or a flag. With `interleave` too, each
    round one thread (at random, among those that can move) takes one statement, with the
    stream heads between rounds: what threads that move at one instant do in between (one
    enqueues, another's task completes, the first enqueues again) is another execution in
    time, which threads that each go as far as they can never show. With `guide` (statement
    indices in the order some execution issued them), the rounds go the same way, each to the
    thread whose next statement comes first in that order: a run in time that follows an
    execution the solver found, as far as time lets it."""
    with _no_cyclic_collector():
        return _Simulator(program, shuffle, interleave, guide).run()


def simulate_choosing(program: Program, chooser: "Chooser", reduce: bool = True,
                      machine: Machine | None = None) -> Simulation | None:
    """`simulate`, with `chooser` deciding the order of what may happen at one instant
    (`_Simulator.run_choosing`); None when it abandons the run. `machine`: the program's, if
    already built (`timed_search` runs a program many times)."""
    with _no_cyclic_collector():
        return _Simulator(program, machine=machine).run_choosing(chooser, reduce)


@contextmanager
def _no_cyclic_collector():
    """A run allocates many small long-lived objects; the cyclic collector would rescan them
    over and over (quadratic time) and there are no cycles to find."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class Chooser(Protocol):
    """What `_Simulator.run_choosing` asks at each choice (`timed_search` explores them all)."""

    def pick(self, simulator: "_Simulator", options: int) -> int | None:
        """Which of `options` (> 1) instant steps goes next; None abandons the run."""

    def goes_on(self, simulator: "_Simulator") -> bool:
        """Time has just moved on: whether the run is worth going on with."""


class _Simulator:
    """One simulation run. `run` repeats its phases until nothing is left to happen: at each
    instant, tasks due end (`_end_due_tasks`); then threads step (`_run_threads`), stream heads
    start (`_start_stream_heads`) and engine units are handed out (`_hand_out_units`) until a
    round changes nothing; then time jumps (`_next_event_time`)."""

    def __init__(self, program: Program, shuffle: int | None = None, interleave: bool = False,
                 guide: Sequence[int] | None = None, machine: Machine | None = None) -> None:
        p = self.p = program
        m = self.m = machine if machine is not None else Machine(program)
        order = list(range(len(p.threads)))
        self.stream_rank = list(range(len(p.streams)))
        """Per stream: its place in the order stream heads are taken in at an instant."""
        self.chance = None
        """With `interleave`: the random source of each round's order of the threads."""
        self.one_step = interleave or guide is not None
        """One step of one thread a round (`interleave`, `guide`)."""
        self.guide = None if guide is None else {statement: k for k, statement in enumerate(guide)}
        if shuffle is not None:
            import random

            chance = random.Random(shuffle)
            chance.shuffle(order)
            chance.shuffle(self.stream_rank)
            if interleave:
                self.chance = chance
        self.rank = [0] * len(order)
        """Per thread: its place in the order threads move in at an instant."""
        self.order = order
        self._rank_threads()
        n = len(p.statements)
        engine_names = {e: e.value for e in Engine}
        # Per statement: what the run needs to know of it.
        self.launch_of = [p.launch_time(st) for st in p.statements]
        self.ekey = [(st.device, engine_names[st.engine]) if st.engine is not None else None
                     for st in p.statements]
        """The engine pool a task takes a unit of: (device, engine name)."""
        unranked = {Engine.COPY, Engine.H2D, Engine.D2H, Engine.D2D, Engine.CALLBACK}
        self.prio = [p.streams[st.stream].priority if st.stream is not None and not (
                         st.engine in unranked and p.devices[st.device].runtime is Runtime.CUDA) else 0
                     for st in p.statements]
        """A task's priority for a contended unit: its stream's, but for copies and host
        functions under `runtime cuda` (stream priorities rank compute kernels only)."""
        self.needs_engine = [st.engine is not None and st.duration > 0 for st in p.statements]
        self.host_time = [0] * n
        """A host function: how long it holds its thread."""
        for i in m.of_op.get(Op.HOST, ()):
            self.host_time[i] = p.statements[i].duration
        self.notifies = [-1] * n
        """A notify (host or stream): the notify it sets."""
        for i in m.of_op.get(Op.NOTIFY, ()):
            self.notifies[i] = p.statements[i].notify
        self.raises_flag = [-1] * n
        """A record of a flag event: the flag it sets when it completes."""
        for i in m.of_op.get(Op.RECORD, ()):
            if m.flag_event[p.statements[i].event]:
                self.raises_flag[i] = p.statements[i].event
        self.store = Store(m.initial())
        self.store.running = 0  # not tracked: the simulator does not look for races
        self.now = 0
        self.clock = [0] * len(p.threads)
        # Threads are visited only when they may move (thousands of threads blocked in syncs
        # made each instant cost every thread): `ready` ones, in `order`; a thread whose
        # clock is ahead sleeps in `timers` until then; a blocked one is parked on the steps
        # its blocker names (`Blocked.needs`), one of which must happen before it can move.
        self.ready: set[int] = set(range(len(p.threads)))
        self.timers: list[tuple[int, int]] = []  # (time, thread): a heap
        self.parked: dict = {}  # step -> threads that wait for it
        self.round: list[int] | None = None  # the threads still to visit in this round (a heap)
        self.in_round: set[int] = set()
        self.blocked = None  # why the last `_issue` or `_return` could not happen
        self.visiting = -1  # the place (in `order`) of the thread being visited
        self.active: set[int] = set()
        """Streams whose head may have something to do: an enqueue or an end adds its stream;
        one leaves when it is empty or its heads are running, queued for a unit or asleep
        (20,000 streams whose heads waited for two units made each instant cost every stream)."""
        self.asleep: set[int] = set()
        """Stream heads found blocked, parked on the steps their blocker names (`heads_parked`)
        until one of them happens: until then their stream has nothing to do (178,579 of
        327,005 scans of 100,000 tasks read only heads waiting for an event)."""
        self.heads_parked: dict = {}  # step -> heads that wait for it
        self.scan: list[tuple[int, int]] | None = None  # the streams still to read in this scan (a heap)
        self.in_scan: set[int] = set()
        self.scanning = -1  # the rank of the stream being read
        self.wanting: dict[tuple[int, str], list[tuple[int, int, int]]] = {}
        """Per engine pool, a heap of (priority, enqueue order, task) of tasks ready for a unit."""
        self.waiting: set[int] = set()
        """The tasks in `wanting`."""
        """The threads with statements left, in index order."""
        """Per thread: when it is free to take its next step (before any launch cost)."""
        self.begin = [-1] * n  # task begin / host issue time
        self.finish = [-1] * n  # task end / host return (or issue) time
        self.issued = [-1] * n  # issue time of the thread side
        self.tdone = [-1] * n  # when the thread moved past the statement
        self.unit_of: list = [None] * n
        self.cause: list[tuple | None] = [None] * n  # what the task part waited for last
        self.tcause: list[tuple | None] = [None] * n  # what the thread part waited for last
        self.seq: list[tuple[int, int, int]] = [(0, 0, 0)] * n
        """Per task, when it was enqueued, as (time, thread, position in the thread): which of
        two tasks was "enqueued first" where they want the last unit at one priority. Threads
        that enqueue at one instant go in declaration order, whatever order their steps took
        (an order only a race for a stream, an event, a flag or a notify makes a run of its
        own: `run_choosing` then need not try the others for the units' sake)."""
        self.prev_on_stream = [-1] * n
        """Per task, the task before it on its stream that it waits for: a `group`'s fused
        calls are not ordered among themselves, so theirs is what comes before the group."""
        self.last_on_stream = [-1] * len(p.streams)
        self.open_batch: dict[int, list[int]] = {}  # stream -> the fused calls last enqueued on it
        self.batch_before: dict[int, tuple[int, ...]] = {}  # task -> the fused calls just before it
        self.flag_setter = [-1] * len(p.events)
        self.note_setter = [-1] * len(p.notifies)
        self.ends: list[tuple[int, tuple, int]] = []  # (time, seq, task): a heap
        self.gathered: list = []
        """Collective groups whose members have all started and that wait for engine units."""
        # Engine units: free unit ids per (device, engine), and who released each last.
        self.free_units: dict[tuple[int, str], list[int]] = {}
        self.released_by: dict[tuple[int, str, int], int] = {}
        self.busy: dict[tuple[int, str], int] = {}
        self.host_busy = 0
        self.device_busy = 0
        self.trail: list = []
        """Every step fired so far, in order."""
        self.quiet: list[bool] | None = None
        """Per statement: a head `run_choosing` lets act without a choice (`_quiet_heads`)."""
        self.stream_tasks: list[list[int]] | None = None
        """Per stream, its tasks outside `group` batches (`earliest_end`, made on first use)."""
        self._effects = m.effects
        self._update = self.store.update
        self.issue_steps, self.return_steps, self.start_steps, self.end_steps, self.complete_steps = (
            m.steps[kind] for kind in (StepKind.ISSUE, StepKind.RETURN, StepKind.START, StepKind.END,
                                       StepKind.COMPLETE))
        """Per kind of step, the machine's step object of each statement."""

    def run(self) -> Simulation:
        end_due_tasks, run_threads = self._end_due_tasks, self._run_threads
        start_stream_heads, hand_out_units = self._start_stream_heads, self._hand_out_units
        next_event_time = self._next_event_time
        trail = self.trail
        while True:
            end_due_tasks()
            while True:  # until handing out units changes nothing
                while True:  # until a round of threads and heads changes nothing
                    before = len(trail)
                    run_threads()
                    start_stream_heads()
                    if len(trail) == before:
                        break  # (a thread may be freed by a later thread's step of this round)
                # Units go out once the instant's instant steps have settled: a task that an
                # instant record or wait lets start now competes for them too (by priority).
                before = len(trail)
                hand_out_units()
                if len(trail) == before:
                    break
            upcoming = next_event_time()
            if upcoming is None:
                break
            self.now = upcoming
        finished = self.m.finished(self.store)
        makespan = max(max(self.finish, default=0), max(self.clock, default=0), 0)
        stuck = () if finished else self.m.stuck(self.store)
        return self._result(makespan, not finished, stuck)

    def run_choosing(self, chooser: "Chooser", reduce: bool = True) -> Simulation | None:
        """Run as `run` does, but let `chooser` order what may happen at one instant: each
        time more than one thread step or stream head could go next, it picks one (any
        order is an execution in time: threads that race for a stream, an event, a flag or
        a notify). With `reduce`, heads whose order changes nothing act without a choice
        (`_quiet_heads`). None when the chooser abandons the run."""
        trail = self.trail
        if self.quiet is None:
            self.quiet = self._quiet_heads() if reduce else [False] * len(self.p.statements)
        while True:
            self._end_due_tasks()
            while True:  # until handing out units changes nothing
                while True:  # one instant step at a time, until none is left
                    options = self._instant_options()
                    if not options:
                        break
                    quiet = next((o for o in options if o[0] == 1 and self.quiet[o[1]]), None)
                    if quiet is not None:  # (no other order to try: see `quiet`)
                        self._act(quiet)
                        continue
                    pick = chooser.pick(self, len(options)) if len(options) > 1 else 0
                    if pick is None:
                        return None
                    self._act(options[pick])
                before = len(trail)
                self._hand_out_units()
                if len(trail) == before:
                    break
            upcoming = self._next_due()
            if upcoming is None:
                break
            self.now = upcoming
            if not chooser.goes_on(self):
                return None
        finished = self.m.finished(self.store)
        makespan = max(max(self.finish, default=0), max(self.clock, default=0), 0)
        stuck = () if finished else self.m.stuck(self.store)
        return self._result(makespan, not finished, stuck)

    def _instant_options(self) -> list[tuple[int, int]]:
        """What could happen next at this instant: (0, thread) for a thread whose next step
        (issue or return) is due and legal, (1, task) for a stream head (or a task of the
        batch at a head) whose first step is legal and that has not yet acted."""
        m, store, now, clock = self.m, self.store, self.now, self.clock
        options = []
        for t, stmts in enumerate(m.thread_stmts):
            v = store.threads[t]
            k = v >> 1
            if k >= len(stmts):
                continue
            i = stmts[k]
            if not v & 1:
                if clock[t] + self.launch_of[i] > now or (
                        m.issue_note[i] >= 0 and m.blocker(store, self.issue_steps[i]) is not None):
                    continue
            elif clock[t] > now or m.return_blocker(store, i) is not None:
                continue
            options.append((0, t))
        status = store.status
        for q in store.queues:
            if not q:
                continue
            for h in self._heads(q):
                if status[h] == QUEUED and h not in self.waiting and m.first_step_blocker(store, h) is None:
                    options.append((1, h))
        return options

    def _quiet_heads(self) -> list[bool]:
        """Per statement: a stream head whose action no other order needs to be tried for.
        Joining an engine pool fires no step, and units go out only once the instant has
        settled, by priority and enqueue order, whoever joined first; an instant task that
        only completes (a record or wait of a snapshot event, an alloc, a free, a task of no
        duration) can only let other steps go, never stop one, and none can stop it. What
        sets or clears a flag or a notify, or reads one, and a collective member (its group
        takes units at once) keep their orders."""
        m, p = self.m, self.p
        touchy = {Op.RESET, Op.NOTIFY, Op.AWAIT}
        quiet = []
        for st in p.statements:
            i = st.index
            if st.stream is None or m.in_group[i] or st.op in touchy:
                quiet.append(False)
            elif st.op in (Op.RECORD, Op.WAIT):
                quiet.append(not m.flag_event[st.event])
            else:
                quiet.append(not m.interval[i] or self.needs_engine[i])
        return quiet

    def _act(self, option: tuple[int, int]) -> None:
        """Take one of `_instant_options`."""
        kind, x = option
        if kind == 1:
            self._take_head(x)
            return
        stmts = self.m.thread_stmts[x]
        v = self.store.threads[x]
        i = stmts[v >> 1]
        taken = self._issue(x, i, v >> 1) if not v & 1 else self._return(x, i)
        assert taken, "an instant option must be legal"

    def _next_due(self) -> int | None:
        """When something can happen next (`run_choosing`): a task ends or a thread is due."""
        m, store, now = self.m, self.store, self.now
        upcoming = [self.ends[0][0]] if self.ends else []
        for t, stmts in enumerate(m.thread_stmts):
            v = store.threads[t]
            if v >> 1 < len(stmts):
                due = self.clock[t] + (0 if v & 1 else self.launch_of[stmts[v >> 1]])
                if due > now:
                    upcoming.append(due)
        return min(upcoming) if upcoming else None

    def state_key(self) -> tuple:
        """Everything that decides what can still happen from here, and when: equal keys have
        the same runs ahead (`timed_search` remembers the ones it has explored). What only
        reports a run (causes, unit numbers, busy time) is left out."""
        seq, now, store = self.seq, self.now, self.store
        # Enqueue order decides only which of the tasks that want one engine pool, at one
        # priority, gets a unit first, and which gathered group does (by its members'
        # priority and enqueue order, those of no duration too).
        ending = {x for _, _, x in self.ends}
        in_group = self.m.in_group
        pending = sorted((self.ekey[x], self.prio[x], seq[x], x) for q in store.queues for x in q
                         if self.needs_engine[x] and not in_group[x] and x not in ending)
        members = sorted((self.prio[x], seq[x], x) for q in store.queues for x in q
                         if in_group[x] and x not in ending)
        clocks = []  # (a clock in the past matters only as far as it says when a thread is due)
        for t, stmts in enumerate(self.m.thread_stmts):
            v = store.threads[t]
            if v >> 1 >= len(stmts):
                clocks.append(max(self.clock[t], now))
            else:
                clocks.append(max(self.clock[t], now - (0 if v & 1 else self.launch_of[stmts[v >> 1]])))
        return (now, store.freeze(), tuple(clocks),
                tuple((end, x) for end, _, x in sorted(self.ends)),
                tuple(sorted((key, len(units)) for key, units in self.free_units.items())),
                tuple(sorted(self.waiting)), tuple((key, priority, x) for key, priority, _, x in pending),
                tuple(sorted(tuple(sorted(g.members)) for g in self.gathered)),
                tuple(x for _, _, x in members))

    def earliest_end(self) -> int:
        """A lower bound on the makespan of every run from here: each thread still has its
        launches and host functions to go through, one after another, each stream its tasks
        (those outside `group` batches) one after another, and each engine its tasks' work
        (those outside collectives) shared among its units."""
        m, store, now = self.m, self.store, self.now
        bound = now
        for t, stmts in enumerate(m.thread_stmts):
            v = store.threads[t]
            rest = stmts[(v >> 1) + (v & 1):]
            bound = max(bound, self.clock[t] + sum(self.launch_of[i] + self.host_time[i] for i in rest))
        ending = {x: end for end, _, x in self.ends}
        status = store.status
        if self.stream_tasks is None:
            self.stream_tasks = [[] for _ in self.p.streams]
            for st in self.p.statements:
                if st.stream is not None and m.batch[st.index] is None:
                    self.stream_tasks[st.stream].append(st.index)
        work: dict[tuple[int, str], int] = {}
        for tasks in self.stream_tasks:
            start, left = now, 0
            for x in tasks:
                if status[x] == RUNNING:
                    start = max(start, ending.get(x, now + m.duration[x]))
                    if x in ending and self.unit_of[x] is not None and not m.in_group[x]:
                        work[self.ekey[x]] = work.get(self.ekey[x], 0) + ending[x] - now
                elif self.begin[x] < 0 and status[x] != DONE:
                    left += m.duration[x]
                    if self.needs_engine[x] and not m.in_group[x]:
                        work[self.ekey[x]] = work.get(self.ekey[x], 0) + m.duration[x]
            bound = max(bound, start + left)
        for (device, engine), busy in work.items():
            units = self.p.devices[device].count(Engine(engine))
            bound = max(bound, now + -(-busy // units))
        return bound

    # ------------------------------------------------------------------ phases

    def _end_due_tasks(self) -> None:
        """1. Tasks that end by now complete and release their units."""
        ends, now = self.ends, self.now
        end_steps = self.end_steps
        while ends and ends[0][0] <= now:
            _, _, i = heapq.heappop(ends)
            self._fire(end_steps[i])
            self._end_task(i)

    def _run_threads(self) -> None:
        """2. Threads, in order (by index, or shuffled), each as far as it can go at this
        instant."""
        m, store, clock, now = self.m, self.store, self.clock, self.now
        launch_of = self.launch_of
        timers, ready = self.timers, self.ready
        while timers and timers[0][0] <= now:
            ready.add(heapq.heappop(timers)[1])
        if not ready:
            return  # (the round that ends an instant mostly finds nothing to do)
        if self.guide is not None:  # (the thread whose next statement the guide has first)
            stmts, position, threads = m.thread_stmts, self.guide, store.threads
            self.order.sort(key=lambda t: position.get(stmts[t][threads[t] >> 1], len(position))
                            if threads[t] >> 1 < len(stmts[t]) else len(position))
            self._rank_threads()
        elif self.chance is not None:  # (`interleave`: a new order each round)
            self.chance.shuffle(self.order)
            self._rank_threads()
        rank = self.rank
        self.round = sorted(rank[t] for t in ready)  # places in the order (a sorted list is a heap)
        self.in_round = set(ready)
        ready.clear()
        while self.round:
            self.visiting = heapq.heappop(self.round)
            t = self.order[self.visiting]
            stmts = m.thread_stmts[t]
            while True:
                v = store.threads[t]
                k = v >> 1
                if k >= len(stmts):
                    break  # finished: not visited again
                i = stmts[k]
                if not v & 1:
                    due = clock[t] + launch_of[i]
                    if due > now:
                        heapq.heappush(timers, (due, t))
                        break
                    if not self._issue(t, i, k):
                        self._park(t, self.blocked)
                        break
                elif clock[t] > now:
                    heapq.heappush(timers, (clock[t], t))
                    break
                elif not self._return(t, i):
                    self._park(t, self.blocked)
                    break
                if self.one_step:
                    # (`interleave`, `guide`: one step of one thread a round; the others'
                    # turn comes in later rounds of the same instant)
                    ready.add(t)
                    ready.update(self.order[place] for place in self.round)
                    self.round.clear()
                    break
        self.round = None
        self.visiting = -1

    def _rank_threads(self) -> None:
        """`rank` from `order` (each thread's place in it)."""
        for place, t in enumerate(self.order):
            self.rank[t] = place

    def _park(self, t: int, blocked) -> None:
        """Thread t waits until one of the steps that could unblock it happens (an entry left
        behind once another woke it only costs a spurious visit)."""
        for step in blocked.needs:  # (none: it never moves again)
            self.parked.setdefault(step, []).append(t)

    def _wake(self, threads: list[int]) -> None:
        """Threads whose blocker may have gone: later in the order, still in this round
        (as a pass over every thread would reach them); otherwise in the next round."""
        for t in threads:
            if self.round is not None and self.rank[t] > self.visiting:
                if t not in self.in_round:
                    self.in_round.add(t)
                    heapq.heappush(self.round, self.rank[t])
            else:
                self.ready.add(t)

    def _issue(self, t: int, i: int, k: int) -> bool:
        """Thread t issues statement i (its k-th) if it may; False when it is blocked."""
        m, p = self.m, self.p
        step = self.issue_steps[i]
        now = self.now
        # Issue is legal at the thread's statement unless it is a host await.
        n = m.issue_note[i]
        if n >= 0:
            self.blocked = m.blocker(self.store, step)
            if self.blocked is not None:
                return False
        tdone, finish, issued = self.tdone, self.finish, self.issued
        prevs = m.thread_stmts[t][k - 1] if k else -1
        self.tcause[i] = (tdone[prevs], prevs, "thread") if prevs >= 0 else None
        if n >= 0 and self.note_setter[n] >= 0:
            r = self.note_setter[n]
            self.tcause[i] = max(self.tcause[i] or (-1, -1, ""), (
                finish[r] if p.statements[r].stream is not None else issued[r],
                r, "task" if p.statements[r].stream is not None else "thread"))
        s = m.stream_of[i]
        if s is not None:
            self.active.add(s)
            last, batch = self.last_on_stream[s], m.batch[i]
            if last >= 0 and batch is not None and m.batch[last] == batch:  # (a fused call's mate)
                self.prev_on_stream[i] = self.prev_on_stream[last]
                if last in self.batch_before:
                    self.batch_before[i] = self.batch_before[last]
                self.open_batch[s].append(i)
            else:
                self.prev_on_stream[i] = last
                if last >= 0 and m.batch[last] is not None:  # (after a group: it waits for all its calls)
                    self.batch_before[i] = tuple(self.open_batch[s])
                self.open_batch[s] = [i] if batch is not None else []
            self.last_on_stream[s] = i
            self.seq[i] = (now, t, k)
            self.host_busy += self.launch_of[i]
        elif self.notifies[i] >= 0:
            self.note_setter[self.notifies[i]] = i
        self._fire(step)
        issued[i] = now
        if s is None:
            self.begin[i] = now
        self.clock[t] = now + self.host_time[i]
        self.host_busy += self.host_time[i]
        if not m.holds[i]:
            tdone[i] = now
            if s is None:
                finish[i] = now
        return True

    def _return(self, t: int, i: int) -> bool:
        """Thread t returns from statement i if it may; False when it is blocked."""
        m, store = self.m, self.store
        self.blocked = m.return_blocker(store, i)
        if self.blocked is not None:
            return False
        now = self.now
        finish = self.finish
        if m.stream_of[i] is not None:
            self.tcause[i] = (finish[i], i, "task")
        else:  # a sync: what it waited for
            slot = m.wslot[i]
            waited = store.bind[slot] if slot >= 0 else ()
            best = max(((finish[x], x, "task") for x in waited), default=None)
            if best is not None and best[0] >= self.issued[i]:
                self.tcause[i] = best
        self._fire(self.return_steps[i])
        self.clock[t] = now
        self.tdone[i] = now
        if m.stream_of[i] is None:
            finish[i] = now
        return True

    def _start_stream_heads(self) -> None:
        """3. Stream heads (or every task of the batch at a head), stream by stream in order:
        instant tasks complete, engine-free tasks start; the others join their engine pool's
        queue for a unit (where they stay until they get one: what allows a running task to
        start stays true). A head found blocked sleeps (`_park_head`); one woken by a step of
        this scan is read in it when its stream comes later in the order, as a scan of every
        stream would reach it."""
        m, store = self.m, self.store
        status = store.status
        first_step_blocker = m.first_step_blocker
        waiting, asleep, active = self.waiting, self.asleep, self.active
        if not active:
            return
        rank = self.stream_rank
        scan = self.scan = sorted((rank[stream], stream) for stream in active)  # (a sorted list is a heap)
        self.in_scan = {stream for _, stream in scan}
        while scan:
            self.scanning, stream = heapq.heappop(scan)
            q = store.queues[stream]
            if not q:
                active.discard(stream)
                continue
            heads = self._heads(q)
            if all(status[h] != QUEUED or h in waiting or h in asleep for h in heads):
                # Running, queued for a unit or blocked: nothing to do here until one of them
                # ends or what blocks it happens.
                active.discard(stream)
                continue
            for h in heads:
                if status[h] != QUEUED or h in waiting or h in asleep:
                    continue
                blocked = first_step_blocker(store, h)
                if blocked is not None:
                    self._park_head(h, blocked)
                    continue
                self._take_head(h)
            if q and q[0] == heads[0] and all(status[h] != QUEUED or h in waiting or h in asleep for h in heads):
                active.discard(stream)  # (as the next scan would find: one scan less per instant)
        self.scan = None

    def _heads(self, queue) -> list[int]:
        """The head of a stream's (non-empty) queue, or every task of the batch at its head."""
        batch = self.m.batch
        heads = [queue[0]]
        if batch[queue[0]] is not None:
            for h in islice(queue, 1, None):
                if batch[h] != batch[queue[0]]:
                    break
                heads.append(h)
        return heads

    def _take_head(self, h: int) -> None:
        """Stream head h, whose first step is legal, acts: an instant task completes, a
        collective member starts spinning, an engine-free task starts, the others join their
        engine pool's queue for a unit."""
        if not self.m.interval[h]:
            self._begin_task(h, None, None)
            self._fire(self.complete_steps[h])
            self._end_task(h)
        elif self.m.in_group[h]:
            self._spin(h)
        elif not self.needs_engine[h]:
            self._begin_task(h, None, None)
            self._fire(self.start_steps[h])
            self._started(h)
        else:
            key = self.ekey[h]
            if key not in self.free_units:
                self._pool(h)
            heapq.heappush(self.wanting.setdefault(key, []), (self.prio[h], self.seq[h], h))
            self.waiting.add(h)

    def _hand_out_units(self) -> None:
        """4. Engine units to the gathered collective groups (each takes all its units at once,
        earliest enqueued first), then to the waiting tasks: lower priority value first, then
        enqueue order."""
        start_steps = self.start_steps
        if not self.gathered and not self.waiting:
            return  # (every task that wants a unit is waiting for one)
        if self.gathered:
            self.gathered.sort(key=lambda g: min((self.prio[x], self.seq[x]) for x in g.members))
            self.gathered = [g for g in self.gathered if not self._start_group(g)]
        for key, cands in self.wanting.items():
            units = self.free_units[key]
            while cands and units:
                h = heapq.heappop(cands)[2]
                self.waiting.discard(h)
                unit = heapq.heappop(units)
                self._begin_task(h, unit, key)
                self._fire(start_steps[h])
                self._started(h)

    def _next_event_time(self) -> int | None:
        """5. When something can happen next: a task ends or a thread is free again (None:
        nothing ever can)."""
        upcoming = []
        if self.ends:
            upcoming.append(self.ends[0][0])
        if self.timers:
            upcoming.append(self.timers[0][0])  # (every timer is due after now: run_threads took the rest)
        return min(upcoming) if upcoming else None

    # ------------------------------------------------------------------ steps and bookkeeping

    def _fire(self, step) -> None:
        self.trail.append(step)
        self._update(self._effects(self.store, step, False)[0])
        waiting = self.parked.pop(step, None)
        if waiting:
            self._wake(waiting)
        heads = self.heads_parked.pop(step, None)
        if heads:
            stream_of, rank = self.m.stream_of, self.stream_rank
            for h in heads:
                if h in self.asleep:
                    self.asleep.discard(h)
                    stream = stream_of[h]
                    self.active.add(stream)
                    if self.scan is not None and rank[stream] > self.scanning and stream not in self.in_scan:
                        self.in_scan.add(stream)
                        heapq.heappush(self.scan, (rank[stream], stream))

    def _park_head(self, h: int, blocked) -> None:
        """Stream head h is blocked: its stream has nothing to do until one of the steps its
        blocker names happens (`Blocked.needs`: every run that lets h start takes one of them
        first; none: h never starts)."""
        self.asleep.add(h)
        for step in blocked.needs:
            self.heads_parked.setdefault(step, []).append(h)

    def _pool(self, task: int) -> list[int]:
        """The free units of the engine pool `task` needs (a heap), made on first use."""
        key = self.ekey[task]
        units = self.free_units.get(key)
        if units is None:
            st = self.p.statements[task]
            units = self.free_units[key] = list(range(self.p.devices[st.device].count(st.engine)))
        return units

    def _task_preds(self, i: int) -> list[tuple[int, int, str]]:
        """(time, statement, part) of what task i could have waited for."""
        m, finish = self.m, self.finish
        out = [(self.tdone[i] if self.tdone[i] >= 0 else self.issued[i], i, "thread")]
        prev = self.prev_on_stream[i]
        if prev >= 0:
            out.append((finish[prev], prev, "task"))
        out.extend((finish[x], x, "task") for x in self.batch_before.get(i, ()))
        r = -1
        if m.wait_flag[i] >= 0:
            r = self.flag_setter[m.wait_flag[i]]
        elif m.wslot[i] >= 0:
            r = self.store.bind[m.wslot[i]]
        elif m.await_note[i] >= 0:
            r = self.note_setter[m.await_note[i]]
            if r >= 0 and m.stream_of[r] is None:
                out.append((self.issued[r], r, "thread"))
                r = -1
        if r >= 0:
            out.append((finish[r], r, "task"))
        slot = m.dslot[i]
        if slot >= 0:
            for dep, need in self.store.bind[slot]:
                out.append((self.begin[dep] if need == NEED_BEGUN else finish[dep], dep, "task"))
        return out

    def _begin_task(self, i: int, unit: int | None, engine_key) -> None:
        self.begin[i] = self.now
        preds = self._task_preds(i)
        if unit is not None:
            r = self.released_by.get((*engine_key, unit), -1)
            if r >= 0:
                preds.append((self.finish[r], r, "task"))
        self.cause[i] = max(preds) if preds else None
        self.unit_of[i] = (engine_key, unit) if unit is not None else None

    def _end_task(self, i: int) -> None:
        now = self.now
        self.finish[i] = now
        if self.m.stream_of[i] is not None:
            self.active.add(self.m.stream_of[i])  # (its stream has a new head, or none)
        self.device_busy += now - self.begin[i]
        if self.unit_of[i] is not None:
            key, unit = self.unit_of[i]
            heapq.heappush(self.free_units[key], unit)
            self.released_by[(*key, unit)] = i
            self.busy[key] = self.busy.get(key, 0) + now - self.begin[i]
        if self.raises_flag[i] >= 0:
            self.flag_setter[self.raises_flag[i]] = i
        elif self.notifies[i] >= 0:
            self.note_setter[self.notifies[i]] = i

    def _started(self, h: int) -> None:
        """After task h (not a collective member) starts: schedule its end."""
        m, now = self.m, self.now
        if m.duration[h] == 0:
            self._fire(self.end_steps[h])
            self._end_task(h)
        else:
            heapq.heappush(self.ends, (now + m.duration[h], self.seq[h], h))

    def _spin(self, h: int) -> None:
        """Collective member h starts and waits for its peers, holding no engine; the last
        to start gathers the group, which then waits for its units: they go out once the
        instant has settled, as every task's do (`_hand_out_units`, `_start_group`)."""
        self.begin[h] = self.now
        self._fire(self.start_steps[h])
        g = self.m.group(self.store, h)
        if g.complete and all(self.store.status[x] == RUNNING for x in g.members):
            self.gathered.append(g)

    def _start_group(self, g) -> bool:
        """Start a gathered group if one unit of each engine its members need is free (False:
        not yet); each member ends its own duration later."""
        m, now = self.m, self.now
        holders = collectives.unit_holders(self.p, g.members)
        need: dict[tuple[int, str], int] = {}
        for x in holders:
            need[self.ekey[x]] = need.get(self.ekey[x], 0) + 1
        if any(len(self._pool(x)) < need[self.ekey[x]] for x in holders):
            return False
        preds = [p for x in g.members for p in self._task_preds(x)]
        for x in g.members:
            unit = heapq.heappop(self.free_units[self.ekey[x]]) if x in holders else None
            self._begin_task(x, unit, self.ekey[x] if unit is not None else None)
            if preds:
                self.cause[x] = max(self.cause[x] or (-1, -1, ""), max(preds))
        for x in g.members:
            if m.duration[x] == 0:
                self._fire(self.end_steps[x])
                self._end_task(x)
            else:
                heapq.heappush(self.ends, (now + m.duration[x], self.seq[x], x))
        return True

    # ------------------------------------------------------------------ results

    def _result(self, makespan: int, deadlocked: bool, stuck) -> Simulation:
        p = self.p
        ekey = self.ekey
        begin, finish, issued, unit_of = self.begin, self.finish, self.issued, self.unit_of
        tasks = []
        intervals: list[Interval] = []
        add = intervals.append
        for st in p.statements:
            i = st.index
            if st.stream is not None and begin[i] >= 0:
                end = finish[i] if finish[i] >= 0 else makespan
                unit = unit_of[i][1] if unit_of[i] is not None else None
                engine = ekey[i][1] if ekey[i] is not None and self.needs_engine[i] else None
                tasks.append(TaskTime(i, st.span.line, p.streams[st.stream].name, engine, unit,
                                      begin[i], end))
                add(Interval(i, Part.TASK, begin[i], end, unit))
            if issued[i] >= 0:
                if st.stream is not None:
                    launch = p.launch_time(st)
                    if launch:
                        add(Interval(i, Part.LAUNCH, issued[i] - launch, issued[i]))
                    if st.blocking:
                        add(Interval(i, Part.BLOCKED, issued[i],
                                     finish[i] if finish[i] >= 0 else makespan))
                else:
                    add(Interval(i, Part.HOST, issued[i], finish[i] if finish[i] >= 0 else makespan))
        engines = []
        used: dict[int, set] = {}
        for st in p.statements:
            if st.device is not None and st.engine is not None and st.duration > 0:
                used.setdefault(st.device, set()).add(st.engine)
        for d in p.devices:
            kinds = sorted(used.get(d.index, ()), key=lambda e: e.value)
            for e in kinds:
                units = d.count(e)
                b = self.busy.get((d.index, e.value), 0)
                engines.append(EngineUse(d.name, e.value, units, b,
                                         b / (units * makespan) if makespan else 0.0))
        timing = Timing(tuple(intervals), TimeUnit.NS, makespan)
        return Simulation(makespan, tuple(tasks), tuple(engines), self.host_busy, self.device_busy,
                          self._critical_path(), timing, deadlocked, stuck, p, tuple(self.trail))

    def _critical_path(self) -> tuple[PathNode, ...]:
        """Walk back from whatever ended last along the predecessor that ended last."""
        p = self.p
        begin, finish, issued, tdone = self.begin, self.finish, self.issued, self.tdone
        cause, tcause = self.cause, self.tcause
        best = None
        for st in p.statements:
            i = st.index
            if st.stream is not None and finish[i] >= 0:
                best = max(best or (-1, -1, ""), (finish[i], i, "task"))
            if tdone[i] >= 0:
                best = max(best or (-1, -1, ""), (tdone[i], i, "thread"))
        path: list[PathNode] = []
        seen = set()
        node = best
        while node is not None and node[1] >= 0 and (node[1], node[2]) not in seen:
            _, i, part = node
            seen.add((i, part))
            st = p.statements[i]
            if part == "task":
                path.append(PathNode(i, "task", begin[i], finish[i]))
                node = cause[i]
            else:
                start = issued[i] - p.launch_time(st)
                end = tdone[i] if tdone[i] >= 0 else issued[i]
                path.append(PathNode(i, "thread", start, end))
                node = tcause[i]
            if node is not None and node[0] < 0:
                node = None
        path.reverse()
        return tuple(path)
