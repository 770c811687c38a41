"""Stubborn sets: per state, a subset of the enabled steps that exploration may take alone.

The static singletons of `reduction.py` fire only when a step touches nothing shared. Two
ranks of a DDP program (main and hook threads on each) share nothing but their collectives
(a member ends once every member has started), yet each rank's steps touch its own buffers
and events, so no step is a singleton and the explorer walks the product of the ranks' state
spaces. A stubborn set is computed from the state instead (Valmari's closure): start from one
enabled step, and repeatedly add

* for an enabled step in the set: every step that *conflicts* with it (`conflicts`), and
* for a disabled step in the set: a *necessary enabling set* (`necessary`): steps of which any
  run that enables it must take one first.

Two steps conflict when, both enabled, one could disable the other, their effects do not
commute, or one changes what the other reports (a race, a dead use). The relation is static
and read off which shared resources a step writes and reads (`_footprint`). Reads that can only
become true and stay true (a task has been enqueued, begun, completed; the task ahead of it left
the stream) are not conflicts: they are enabling conditions, which the necessary enabling sets
cover.

Why nothing is lost (the state graph is finite and acyclic: every step is progress):

* deadlocks: a stubborn set built this way is a strong stubborn set, which keeps every reachable
  state with no enabled step (Valmari 1991);
* races, dead uses, SP202 mismatches are reported on a step, from the state it is taken in (its
  *label*). The resources a label reads are part of the step's footprint, so a step outside the
  set keeps its label while the set's steps fire; with the acyclic graph, every label some run
  shows is shown by a reduced run (the proof is in `docs/semantics.md`, "Partial-order
  reduction").
* race labels are finer (`race_conflicts`): two steps that start conflicting accesses do not
  conflict (whichever comes second reports the pair), and a pair the search has already
  reported is no conflict at all. Without that, every kernel start racing with a collective
  of the other rank kept both orders of the ranks' steps: the DDP program of
  tests/test_executor_reduction.py took over a million states at 3 iterations; with it, 43,000.
"""

from __future__ import annotations

from checker.executor.machine import Machine
from checker.executor.state import U_DEAD, U_FLAGS, U_NOTES, bits
from checker.ir import Op, SyncKind
from checker.witness import Step, StepKind, task_steps, thread_steps

_ISSUE, _RETURN, _START, _END, _COMPLETE = (
    StepKind.ISSUE, StepKind.RETURN, StepKind.START, StepKind.END, StepKind.COMPLETE)


CHOOSE_WORK = 20_000
"""Steps a state's stubborn sets may visit, over all seeds: 200 threads enqueueing onto one
stream made every seed's set hold every thread (40,000 steps, 50 ms a state). Past it, the
smallest set found so far is taken, or every enabled step."""


class StubbornSets:
    """The steps to explore from a state: a stubborn set's enabled steps (`choose`)."""

    def __init__(self, machine: Machine) -> None:
        self.machine = machine
        self.steps = machine.steps
        self._writers: dict[tuple, list[Step]] = {}
        self._readers: dict[tuple, list[Step]] = {}
        self._footprints: dict[Step, tuple[tuple, tuple]] = {}
        for i in range(machine.n):
            st = machine.program.statements[i]
            for kind in thread_steps(st) + task_steps(st):
                step = self.steps[kind][i]
                writes, reads = self._footprint(kind, i)
                self._footprints[step] = (writes, reads)
                for resource in writes:
                    self._writers.setdefault(resource, []).append(step)
                for resource in reads:
                    self._readers.setdefault(resource, []).append(step)
        self._conflicts: dict[Step, frozenset[Step]] = {}
        m = machine
        self._watched: dict[Step, tuple[int, ...]] = {}
        """Per step that starts accesses: the statements whose running it reports a race with."""
        self._stoppers: dict[int, list[Step]] = {}
        """Per statement: the steps that end its accesses (its `end` or `return`)."""
        self._watchers: dict[int, list[Step]] = {}
        """Per statement: the steps that start accesses reporting a race with it."""
        for i in range(machine.n):
            if not m.touch[i]:
                continue
            if m.stream_of[i] is not None:
                start, stop = (self.steps[_START][i], self.steps[_END][i]) if m.interval[i] else (None, None)
            elif m.host_access[i]:
                start, stop = self.steps[_ISSUE][i], self.steps[_RETURN][i]
            else:
                start = stop = None
            if start is None:
                continue
            self._stoppers.setdefault(i, []).append(stop)
            watched = tuple(j for j in bits(m.conflicts[i]) if not self._never_together(i, j))
            self._watched[start] = watched
            for j in watched:
                self._watchers.setdefault(j, []).append(start)
        self.spent = 0
        """Steps visited by the closures of the state at hand (`CHOOSE_WORK`)."""
        self.found = [0] * machine.n
        """Per statement: bitmask of the statements a race with it has already been reported
        with (`race_found`). Such a pair need not be shown again, so its race label stops
        being a conflict (see `race_conflicts`)."""

    # ------------------------------------------------------------------ static conflicts

    def _footprint(self, kind: StepKind, i: int) -> tuple[tuple, tuple]:
        """(resources the step writes, resources its effect, label or a falsifiable enabling
        condition reads). Resources: ("tail", stream), ("last", event), ("class", class of an
        interleaved comm), ("flag", event), ("note", notify), ("dead", segment), ("running",
        segment: a free's effect reports the accesses to it still running, which their ends
        change), ("launch", segment), ("issued", block alloc). What runs, read by a race label,
        is apart: `race_conflicts`."""
        m = self.machine
        st = m.program.statements[i]
        s = m.stream_of[i]
        writes: list[tuple] = []
        reads: list[tuple] = []

        def segments(name: str, mask: int) -> list[tuple]:
            return [(name, g) for g in bits(mask)]

        def accesses() -> None:  # the dead-use label of a step that starts accesses
            # (its race label, which reads what runs, is `race_conflicts`)
            if m.touch[i]:
                reads.extend(segments("dead", m.touch[i]))

        if kind is _ISSUE:
            writes.extend(segments("launch", m.launch_life[i]))
            reads.extend(segments("launch", m.launch_touch[i]))
            for allocs in m.block_allocs[i]:
                reads.extend(("issued", a) for a in allocs)
            reads.extend(("issued", f) for f in m.tensor_frees[i])
            if st.launch_only:  # (a tensor's alloc or free: tested by the uses' issues)
                writes.append(("issued", i))
            if s is not None:
                writes.append(("tail", s))
                if m.records[i] >= 0:
                    writes.append(("last", m.records[i]))
                if m.wslot[i] >= 0:
                    reads.append(("last", st.event))
                if m.dslot[i] >= 0:
                    reads.extend(("tail", o) for o in m.queue_peers[s] if o != s)
                    reads.extend(("tail", o) for o in m.legacy_peers[s])
                c = m.call_class[i]
                if c >= 0:
                    writes.append(("class", c))
                    reads.append(("class", c))
            else:
                if m.wslot[i] >= 0:  # a sync captures what it waits for
                    if st.sync is SyncKind.EVENT:
                        reads.append(("last", st.target))
                    else:
                        reads.extend(("tail", o) for o in m.sync_streams[i])
                if m.issue_note[i] >= 0:
                    reads.append(("note", m.issue_note[i]))
                if m.host_access[i]:
                    accesses()
                if not m.holds[i]:  # host notify, await, alloc take effect now
                    writes.extend(self._signal_resources(i, segments))
        elif kind is _RETURN:
            if s is None:
                writes.extend(segments("dead", m.kill[i]))
                writes.extend(segments("running", m.kill[i]))
                if m.host_access[i]:
                    reads.extend(segments("running", m.touch[i]))
        elif kind is _START:
            accesses()
        elif kind is _END:
            writes.extend(segments("dead", m.kill[i]))
            writes.extend(segments("running", m.kill[i]))
            reads.extend(segments("running", m.touch[i]))
        else:  # COMPLETE
            writes.extend(self._signal_resources(i, segments))
            if m.wait_flag[i] >= 0:
                reads.append(("flag", m.wait_flag[i]))
            if m.await_note[i] >= 0:
                reads.append(("note", m.await_note[i]))
        return tuple(writes), tuple(reads)

    def _never_together(self, i: int, j: int) -> bool:
        """Statements that can never run at the same time, so that one starting cannot see
        the other running: two tasks of one stream outside a common batch (the later one
        starts after the earlier one completed), two host statements of one thread."""
        m = self.machine
        s = m.stream_of[i]
        if s is not None:
            return s == m.stream_of[j] and (m.batch[i] is None or m.batch[i] != m.batch[j])
        return m.stream_of[j] is None and m.thread_of[i] == m.thread_of[j]

    def _signal_resources(self, i: int, segments) -> list[tuple]:
        """What an instant statement's `signal` updates write (flags, notifies, liveness)."""
        m = self.machine
        out: list[tuple] = []
        for code, on, off in m.signal[i]:
            name = {U_FLAGS: "flag", U_NOTES: "note", U_DEAD: "dead"}[code]
            out.extend(segments(name, on | off))
        return out

    def conflicts(self, step: Step) -> frozenset[Step]:
        """Steps that conflict with `step` when both are enabled (static, cached)."""
        found = self._conflicts.get(step)
        if found is None:
            writes, reads = self._footprints[step]
            out: set[Step] = set()
            for resource in writes:
                out.update(self._writers.get(resource, ()))
                out.update(self._readers.get(resource, ()))
            for resource in reads:
                out.update(self._writers.get(resource, ()))
            out.discard(step)
            found = self._conflicts[step] = frozenset(out)
        return found

    def race_found(self, a: int, b: int) -> None:
        """The search has reported the race of statements a and b (with a witness)."""
        self.found[a] |= 1 << b
        self.found[b] |= 1 << a

    def race_conflicts(self, step: Step) -> list[Step]:
        """The conflicts of `step` through race labels whose pair is not reported yet.

        A step starting accesses reports a race with each conflicting statement running, so
        it conflicts with the step that ends that statement's accesses (taken first, the race
        is not seen). Two steps starting accesses do not conflict: in either order the later
        one reports the pair, and their effects commute. A pair already reported needs no
        other run to show it, so its label is no conflict any more ("Partial-order reduction"
        in docs/semantics.md).
        """
        out: list[Step] = []
        i = step.statement
        found = self.found[i]
        watched = self._watched.get(step)
        if watched:
            for j in watched:
                if not found >> j & 1:
                    out.extend(self._stoppers[j])
        if self._stoppers.get(i) and step in self._stoppers[i]:
            for w in self._watchers.get(i, ()):
                if not found >> w.statement & 1:
                    out.append(w)
        return out

    # ------------------------------------------------------------------ enabling

    def necessary(self, state, step: Step) -> tuple[Step, ...]:
        """A necessary enabling set of a step disabled in `state`: every run from `state` in
        which the step becomes enabled takes one of these first (empty: it never will). The
        machine's own blocker names them (`Blocked.needs`)."""
        why = self.machine.blocker(state, step)
        if why is None:
            raise AssertionError(f"{step} is legal but was not listed as enabled")
        return why.needs

    # ------------------------------------------------------------------ the set

    def _step_conflicts(self, step: Step):
        """Conflicts of an enabled step: static ones and race labels not yet reported."""
        more = self.race_conflicts(step)
        return self.conflicts(step).union(more) if more else self.conflicts(step)

    def closure(self, state, seed: Step, enabled: frozenset[Step], limit: int,
                successors: dict) -> list[Step] | None:
        """The enabled steps of the stubborn set grown from `seed`, or None once it has
        `limit` of them (no better than what the caller has) or the state's work runs out.
        `successors` keeps each step's conflicts or enabling set for the other seeds of the
        same state."""
        seen = {seed}
        work = [seed]
        found: list[Step] = []
        while work:
            self.spent += 1
            if self.spent > CHOOSE_WORK:
                return None
            step = work.pop()
            is_enabled = step in enabled
            if is_enabled:
                found.append(step)
                if len(found) >= limit:
                    return None
            more = successors.get(step)
            if more is None:
                more = successors[step] = (self._step_conflicts(step) if is_enabled
                                           else self.necessary(state, step))
            for other in more:
                if other not in seen:
                    seen.add(other)
                    work.append(other)
        return found

    def choose(self, state, steps: tuple[Step, ...]) -> tuple[Step, ...]:
        """The enabled steps of the smallest stubborn set grown from one of `steps` (all
        enabled in `state`), in the order of `steps`."""
        enabled = frozenset(steps)
        best = None
        limit = len(steps)
        self.spent = 0
        successors: dict = {}
        for seed in steps:
            if self.spent > CHOOSE_WORK:
                break  # (taking every enabled step is always sound)
            found = self.closure(state, seed, enabled, limit, successors)
            if found is not None:
                best = found
                limit = len(found)
                if limit == 1:
                    break
        if best is None:
            return steps
        keep = set(best)
        return tuple(step for step in steps if step in keep)

