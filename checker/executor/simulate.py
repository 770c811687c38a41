"""Run a program forward in time, as a runtime would, to predict its makespan.

The simulator fires the machine's own steps (`Machine.blocker` decides legality,
`Machine.effects` what a step changes) over a mutable copy of the state, in time order:

* each stream statement costs its thread the device's `launch` time before its `issue`;
  `host F D` holds the thread for D; a `sync` or pageable copy holds it until it may return;
* a task whose first step is legal and that needs an engine takes a free unit of that engine
  on its device (`Device.count`), contended units going to the lower `Stream.priority`, then
  to the earlier enqueue; it ends `duration` later. Instant tasks and tasks without an engine
  or duration take none;
* at one instant, finished tasks release first, then threads step in index order, then
  stream heads, repeatedly until nothing more can happen; then time jumps to the next event.

If nothing can happen and work is left, the simulation stops and reports the deadlock.
"""

from __future__ import annotations

import gc
import heapq
from dataclasses import dataclass
from typing import NamedTuple

from checker.ir import NS_PER_MS, Engine, Program
from checker.timing import Interval, Part, Timing, TimeUnit
from checker.executor.machine import (  # bound enum members: member lookups are slow
    _COMPLETE, _END, _ISSUE, _OP_AWAIT, _OP_HOST, _OP_NOTIFY, _OP_RECORD, _OP_SYNC, _OP_WAIT,
    _RETURN, _START, QUEUED, RUNNING,
    Machine, Store,
)


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
                {"line": t.line, "stream": t.stream, "engine": t.engine, "start": ms(t.start),
                 "end": ms(t.end)}
                for t in self.tasks
            ],
            "critical_path": [
                {"line": line(n.statement), "part": n.part, "start": ms(n.start), "end": ms(n.end)}
                for n in self.critical_path
            ],
            "stuck": [{"line": line(i), "statement": i,
                       "what": p.describe(p.statements[i]) if p is not None else None,
                       "waits_for": w} for i, w in self.stuck],
        }


def simulate(program: Program) -> Simulation:
    """Simulate `program` in time; never hangs (a deadlock ends the run and is reported)."""
    # The run allocates many small long-lived objects; the cyclic collector would rescan them
    # over and over (quadratic time) and there are no cycles to find.
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _Simulator(program).run()
    finally:
        if enabled:
            gc.enable()


class _Simulator:
    def __init__(self, program: Program) -> None:
        self.p = program
        self.m = Machine(program)

    def run(self) -> Simulation:
        p, m = self.p, self.m
        launch_of = [p.devices[st.device].launch if st.stream is not None else 0
                     for st in p.statements]
        engine_names = {e: e.value for e in Engine}
        ekey = [(st.device, engine_names[st.engine]) if st.engine is not None else None
                for st in p.statements]
        prio = [p.streams[st.stream].priority if st.stream is not None else 0 for st in p.statements]
        store = Store(m.initial())
        store.running = 0  # not tracked: the simulator does not look for races
        n = len(p.statements)
        steps = m.steps
        nthreads = len(p.threads)
        clock = [0] * nthreads
        """Per thread: when it is free to take its next step (before any launch cost)."""
        begin = [-1] * n  # task begin / host issue time
        finish = [-1] * n  # task end / host return (or issue) time
        issued = [-1] * n  # issue time of the thread side
        tdone = [-1] * n  # when the thread moved past the statement
        unit_of = [None] * n
        cause: list[tuple | None] = [None] * n  # what the task part waited for last
        tcause: list[tuple | None] = [None] * n  # what the thread part waited for last
        seq = [0] * n
        enq_counter = 0
        prev_on_stream = [-1] * n
        last_on_stream = [-1] * len(p.streams)
        flag_setter = [-1] * len(p.events)
        note_setter = [-1] * len(p.notifies)
        ends: list[tuple[int, int, int]] = []  # (time, seq, task)
        # Engine units: free unit ids per (device, engine), and who released each last.
        free_units: dict[tuple[int, str], list[int]] = {}
        released_by: dict[tuple[int, str, int], int] = {}
        busy: dict[tuple[int, str], int] = {}
        host_busy = 0
        device_busy = 0

        def pool(dev: int, engine) -> list[int]:
            key = (dev, engine_names[engine])
            if key not in free_units:
                free_units[key] = list(range(p.devices[dev].count(engine)))  # a heap
            return free_units[key]

        fired = [0]
        effects = m.effects
        update = store.update

        trail: list = []
        self._trail = trail

        def fire(step) -> None:
            fired[0] += 1
            trail.append(step)
            update(effects(store, step, False)[0])

        def needs_engine(i: int) -> bool:
            st = p.statements[i]
            return st.engine is not None and st.duration > 0

        def task_preds(i: int) -> list[tuple[int, int, str]]:
            """(time, statement, part) of what task i could have waited for."""
            st = p.statements[i]
            out = [(tdone[i] if tdone[i] >= 0 else issued[i], i, "thread")]
            prev = prev_on_stream[i]
            if prev >= 0:
                out.append((finish[prev], prev, "task"))
            if st.op is _OP_WAIT:
                if p.events[st.event].flag:
                    r = flag_setter[st.event]
                else:
                    slot = m.wslot[i]
                    r = store.bind[slot] if slot >= 0 else -1
                if r >= 0:
                    out.append((finish[r], r, "task"))
            elif st.op is _OP_AWAIT:
                r = note_setter[st.notify]
                if r >= 0:
                    out.append((finish[r] if p.statements[r].stream is not None else issued[r], r,
                                "task" if p.statements[r].stream is not None else "thread"))
            slot = m.dslot[i]
            if slot >= 0:
                for dep, _need in store.bind[slot]:
                    t = begin[dep] if _need == 1 else finish[dep]
                    out.append((t, dep, "task"))
            return out

        def begin_task(i: int, now: int, unit: int | None, engine_key) -> None:
            begin[i] = now
            preds = task_preds(i)
            if unit is not None:
                r = released_by.get((*engine_key, unit), -1)
                if r >= 0:
                    preds.append((finish[r], r, "task"))
            cause[i] = max(preds) if preds else None
            unit_of[i] = (engine_key, unit) if unit is not None else None

        def end_task(i: int, now: int) -> None:
            nonlocal device_busy
            st = p.statements[i]
            finish[i] = now
            device_busy += now - begin[i]
            if unit_of[i] is not None:
                key, unit = unit_of[i]
                heapq.heappush(free_units[key], unit)
                released_by[(*key, unit)] = i
                busy[key] = busy.get(key, 0) + now - begin[i]
            if st.op is _OP_RECORD and p.events[st.event].flag:
                flag_setter[st.event] = i
            elif st.op is _OP_NOTIFY:
                note_setter[st.notify] = i

        now = 0
        finished = False
        while True:
            # 1. Tasks that end by now release their units.
            while ends and ends[0][0] <= now:
                _, _, i = heapq.heappop(ends)
                fire(steps[_END][i])
                end_task(i, now)
            while True:  # until a scan of the heads changes nothing
                # 2. Threads, in index order, as far as each can go at this instant.
                for t in range(nthreads):
                    stmts = m.thread_stmts[t]
                    while True:
                        v = store.threads[t]
                        k = v >> 1
                        if k >= len(stmts):
                            break
                        i = stmts[k]
                        st = p.statements[i]
                        if not v & 1:
                            launch = launch_of[i]
                            if clock[t] + launch > now:
                                break
                            step = steps[_ISSUE][i]
                            # Issue is legal at the thread's statement unless it is a host await.
                            if st.op is _OP_AWAIT and st.stream is None and m.blocker(store, step):
                                break
                            prevs = stmts[k - 1] if k else -1
                            tcause[i] = (tdone[prevs], prevs, "thread") if prevs >= 0 else None
                            if st.op is _OP_AWAIT and st.stream is None and note_setter[st.notify] >= 0:
                                r = note_setter[st.notify]
                                tcause[i] = max(tcause[i] or (-1, -1, ""), (
                                    finish[r] if p.statements[r].stream is not None else issued[r],
                                    r, "task" if p.statements[r].stream is not None else "thread"))
                            if st.stream is not None:
                                s = st.stream
                                prev_on_stream[i] = last_on_stream[s]
                                last_on_stream[s] = i
                                enq_counter += 1
                                seq[i] = enq_counter
                                host_busy += launch
                            elif st.op is _OP_NOTIFY:
                                note_setter[st.notify] = i
                            fire(step)
                            issued[i] = now
                            begin[i] = now if st.stream is None else begin[i]
                            if st.stream is None and st.op is _OP_HOST:
                                clock[t] = now + st.duration
                                host_busy += st.duration
                            else:
                                clock[t] = now
                            if not m.holds[i]:
                                tdone[i] = now
                                if st.stream is None:
                                    finish[i] = now
                        else:
                            if clock[t] > now:
                                break
                            step = steps[_RETURN][i]
                            if m._return_blocker(store, i) is not None:
                                break
                            if st.stream is not None:
                                tcause[i] = (finish[i], i, "task")
                            elif st.op is _OP_SYNC:
                                slot = m.wslot[i]
                                waited = store.bind[slot] if slot >= 0 else ()
                                if slot < 0 and flag_setter[st.target] >= 0:
                                    waited = (flag_setter[st.target],)
                                best = max(((finish[x], x, "task") for x in waited), default=None)
                                if best is not None and best[0] >= issued[i]:
                                    tcause[i] = best
                            fire(step)
                            clock[t] = now
                            tdone[i] = now
                            if st.stream is None:
                                finish[i] = now
                before_heads = fired[0]
                # 3. Stream heads: instant tasks complete, engine-free tasks run, others queue.
                wanting: dict[tuple[int, str], list[tuple[int, int, int]]] = {}
                group_wanting: list[tuple[int, int, object]] = []
                for q in store.queues:
                    if not q:
                        continue
                    h = q[0]
                    status = store.status[h]
                    if status == RUNNING:
                        if m.duration[h] == 0 and m._end_blocker(store, h) is None:
                            fire(steps[_END][h])
                            end_task(h, now)
                        continue
                    if status != QUEUED:
                        continue
                    if not m.interval[h]:
                        step = steps[_COMPLETE][h]
                        if m._first_step_blocker(store, h) is None:
                            begin_task(h, now, None, None)
                            fire(step)
                            end_task(h, now)
                        continue
                    g = m.group_of[h]
                    if g is not None:
                        if g.members[0] == h and m._group_blocker(store, g) is None:
                            first_prio = min(prio[x] for x in g.members)
                            group_wanting.append((first_prio, seq[h], g))
                        continue
                    step = steps[_START][h]
                    if m._first_step_blocker(store, h) is not None:
                        continue
                    if not needs_engine(h):
                        begin_task(h, now, None, None)
                        fire(step)
                        if m.duration[h] == 0:
                            fire(steps[_END][h])
                            end_task(h, now)
                        else:
                            heapq.heappush(ends, (now + m.duration[h], seq[h], h))
                        continue
                    st = p.statements[h]
                    key = ekey[h]
                    pool(st.device, st.engine)
                    wanting.setdefault(key, []).append((prio[h], seq[h], h))
                # 4. Hand out engine units: lower priority value first, then enqueue order.
                for key, cands in wanting.items():
                    units = free_units[key]
                    if len(cands) > 1:
                        cands.sort()
                    for _, _, h in cands:
                        if not units:
                            break
                        unit = heapq.heappop(units)
                        begin_task(h, now, unit, key)
                        fire(steps[_START][h])
                        heapq.heappush(ends, (now + m.duration[h], seq[h], h))
                group_wanting.sort(key=lambda x: (x[0], x[1]))
                for _, _, g in group_wanting:
                    members = g.members
                    need: dict[tuple[int, str], int] = {}
                    for x in members:
                        st = p.statements[x]
                        if needs_engine(x):
                            pool(st.device, st.engine)
                            key = ekey[x]
                            need[key] = need.get(key, 0) + 1
                    if any(len(free_units[key]) < c for key, c in need.items()):
                        continue
                    for x in members:
                        st = p.statements[x]
                        if needs_engine(x):
                            key = ekey[x]
                            begin_task(x, now, heapq.heappop(free_units[key]), key)
                        else:
                            begin_task(x, now, None, None)
                    fire(steps[_START][members[0]])
                    for x in members:
                        if m.duration[x] == 0:
                            fire(steps[_END][x])
                            end_task(x, now)
                        else:
                            heapq.heappush(ends, (now + m.duration[x], seq[x], x))
                if fired[0] == before_heads:
                    break  # threads ran before this scan and nothing changed since
            # 5. Jump to the next event.
            upcoming = []
            if ends:
                upcoming.append(ends[0][0])
            for t in range(nthreads):
                stmts = m.thread_stmts[t]
                v = store.threads[t]
                k = v >> 1
                if k >= len(stmts):
                    continue
                st = p.statements[stmts[k]]
                due = clock[t]
                if not v & 1 and st.stream is not None:
                    due += launch_of[stmts[k]]
                if due > now:
                    upcoming.append(due)
            if not upcoming:
                finished = m.finished(store)
                break
            now = min(upcoming)

        makespan = max(max(finish, default=0), max(clock, default=0), 0)
        stuck = () if finished else m.stuck(store)
        self._ekey = ekey
        return self._result(makespan, begin, finish, issued, tdone, unit_of, cause, tcause, busy,
                            host_busy, device_busy, not finished, stuck)

    # ------------------------------------------------------------------ results

    def _result(self, makespan, begin, finish, issued, tdone, unit_of, cause, tcause, busy, host_busy,
                device_busy, deadlocked, stuck) -> Simulation:
        p = self.p
        ekey = self._ekey
        tasks = []
        intervals: list[Interval] = []
        add = intervals.append
        for st in p.statements:
            i = st.index
            if st.stream is not None and begin[i] >= 0:
                end = finish[i] if finish[i] >= 0 else makespan
                unit = unit_of[i][1] if unit_of[i] is not None else None
                engine = ekey[i][1] if ekey[i] is not None else None
                tasks.append(TaskTime(i, st.span.line, p.streams[st.stream].name, engine, unit,
                                      begin[i], end))
                add(Interval(i, Part.TASK, begin[i], end, unit))
            if issued[i] >= 0:
                if st.stream is not None:
                    launch = p.devices[st.device].launch
                    if launch:
                        add(Interval(i, Part.LAUNCH, issued[i] - launch, issued[i]))
                    if st.blocking:
                        add(Interval(i, Part.BLOCKED, issued[i],
                                     finish[i] if finish[i] >= 0 else makespan))
                else:
                    add(Interval(i, Part.HOST, issued[i], finish[i] if finish[i] >= 0 else makespan))
        engines = []
        for d in p.devices:
            kinds = sorted({st.engine for st in p.statements
                            if st.device == d.index and st.engine is not None and st.duration > 0},
                           key=lambda e: e.value)
            for e in kinds:
                units = d.count(e)
                b = busy.get((d.index, e.value), 0)
                engines.append(EngineUse(d.name, e.value, units, b,
                                         b / (units * makespan) if makespan else 0.0))
        timing = Timing(tuple(intervals), TimeUnit.NS, makespan)
        path = self._critical_path(begin, finish, issued, tdone, cause, tcause)
        return Simulation(makespan, tuple(tasks), tuple(engines), host_busy, device_busy, path,
                          timing, deadlocked, stuck, p, tuple(self._trail))

    def _critical_path(self, begin, finish, issued, tdone, cause, tcause) -> tuple[PathNode, ...]:
        """Walk back from whatever ended last along the predecessor that ended last."""
        p = self.p
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
                start = issued[i] - (p.devices[st.device].launch if st.stream is not None else 0)
                end = tdone[i] if tdone[i] >= 0 else issued[i]
                path.append(PathNode(i, "thread", start, end))
                node = tcause[i]
            if node is not None and node[0] < 0:
                node = None
        path.reverse()
        return tuple(path)
