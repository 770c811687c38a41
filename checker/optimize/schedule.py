"""Schedules: when every task and host statement runs, and the step sequence that replays it."""

from __future__ import annotations

from dataclasses import dataclass

from checker import collectives
from checker.ir import NS_PER_MS, Engine, Program
from checker.optimize import core
from checker.optimize.model import TimedModel, launch_of
from checker.timing import Interval, Part, Timing, TimeUnit
from checker.witness import Step, StepKind, Witness


@dataclass(frozen=True, slots=True)
class Slot:
    """One statement in a schedule (ns). For a stream statement `start`/`end` are its task's;
    `issue`/`released` are when its thread enqueued it and moved on."""

    statement: int
    start: int
    end: int
    issue: int
    released: int


@dataclass(frozen=True, slots=True)
class Schedule:
    """A schedule of a program (`kind` "program") or of its overlap relaxation ("bound")."""

    kind: str
    makespan: int
    slots: tuple[Slot, ...]
    steps: tuple[Step, ...]
    """Every step in an order that replays it (all equal-time ties resolved legally)."""

    @property
    def witness(self) -> Witness:
        return Witness(self.steps)

    def slot_of(self, statement: int) -> Slot | None:
        for slot in self.slots:
            if slot.statement == statement:
                return slot
        return None

    def timing(self, program: Program) -> Timing:
        """When each part of each statement runs, in the shape every backend reports times.

        A schedule does not say which unit of its engine a task takes: units are handed out
        in start order, each to the first one free (a valid schedule never runs more tasks
        of an engine at once than it has units). A bound schedule has no stream order."""
        free_at: dict[tuple[int, Engine], list[int]] = {}
        unit_of: dict[int, int] = {}
        riders = {m for g in program.groups for m in g.members} - {
            m for g in program.groups for m in collectives.unit_holders(program, g.members)}
        """Members of a group on one device that share its units and hold none (SP059)."""
        for slot in sorted(self.slots, key=lambda s: (s.start, s.end)):
            st = program.statements[slot.statement]
            if st.stream is None or st.engine is None or st.duration <= 0 or st.device is None:
                continue
            if slot.statement in riders:
                continue
            ends = free_at.setdefault((st.device, st.engine),
                                      [0] * program.devices[st.device].count(st.engine))
            u = next((k for k, t in enumerate(ends) if t <= slot.start), None)
            if u is None:  # cannot happen for a valid schedule; use an extra unit
                ends.append(0)
                u = len(ends) - 1
            ends[u] = slot.end
            unit_of[slot.statement] = u
        intervals = []
        for slot in self.slots:
            i = slot.statement
            st = program.statements[i]
            if st.stream is None:
                intervals.append(Interval(i, Part.HOST, slot.issue, slot.released))
                continue
            intervals.append(Interval(i, Part.TASK, slot.start, slot.end, unit_of.get(i)))
            launch = program.launch_time(st)
            if launch:
                intervals.append(Interval(i, Part.LAUNCH, slot.issue, slot.issue + launch))
            if st.blocking:
                intervals.append(Interval(i, Part.BLOCKED, slot.issue + launch, slot.released))
        return Timing(tuple(intervals), TimeUnit.NS, self.makespan, streams=self.kind == "program")

    def to_json(self, program: Program) -> dict:
        ms = lambda ns: ns / NS_PER_MS  # noqa: E731
        rows = []
        for slot in self.slots:
            st = program.statements[slot.statement]
            rows.append({
                "statement": slot.statement,
                "line": st.span.line,
                "what": program.describe(st),
                "thread": program.threads[st.thread].name,
                "stream": program.streams[st.stream].name if st.stream is not None else None,
                "start": ms(slot.start),
                "end": ms(slot.end),
                "issue": ms(slot.issue),
                "released": ms(slot.released),
            })
        return {"makespan": ms(self.makespan), "statements": rows,
                "steps": [step.to_json() for step in self.steps]}


def build(model: TimedModel, times, kind: str) -> Schedule:
    """The schedule behind per-node `times` of a model."""
    program = model.program
    by_step: dict[tuple[StepKind, int], int] = {}
    for node in model.nodes:
        by_step[(node.kind, node.statement)] = times[node.index]
        for member in node.members:
            by_step[(node.kind, member)] = times[node.index]
    first, completion = model.first_of(), model.completion_of()
    slots = []
    for index in model.statements:
        st = program.statements[index]
        issue = by_step[(StepKind.ISSUE, index)]
        released = by_step.get((StepKind.RETURN, index), issue + launch_of(program, st))
        slots.append(Slot(index, times[first[index]], times[completion[index]], issue, released))
    steps = []
    arrivals = {n.statement for n in model.nodes if n.kind is StepKind.START and not n.members}
    for v in core.step_order(model, times):
        node = model.nodes[v]
        if node.kind is StepKind.START and node.members:
            # a group's joint start: each member's own start is a node of its own (the exact
            # model), or starts with it (the relaxation)
            steps.extend(Step(StepKind.START, m) for m in node.members if m not in arrivals)
        else:
            steps.append(Step(node.kind, node.statement))
    return Schedule(kind, max(times, default=0), tuple(slots), tuple(steps))
