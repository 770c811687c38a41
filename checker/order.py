"""The partial order of a deterministic program's steps, built once.

For a deterministic program (`checker/determinism.py`) the executions are exactly the
linearizations of one partial order over steps (docs/semantics.md). This module builds that
order from the rules, once, reading the statements in an order of their issues that every
execution agrees with (`determinism.host_order`: each thread's program order, and each
one-shot hand-off's notify before its await, which is an edge too); two consumers read it:

* the fast path (`checker/hb.py`) adds vector clocks to answer "does a happen before b",
* the optimizer (`checker/optimize/model.py`) reads each edge's `delay` (launch costs,
  host durations, task durations) as a timed constraint.

The SMT encoding and the executor do not use it: they are the two independent
implementations of the semantics that check each other (and this order against both).

Steps are dense integer nodes. A collective group's members each start on their own (their
own `start` step) and each ends on its own (its own `end`), once every member has started and
its own duration has passed. With `joint_starts` (the optimizer's view) a group also gets a
*joint start* node after every member's own start (when the group runs, written as the first
member's `start`, and in `joint` rather than `node_of`), and each member's end comes its own
duration after it: starting together as soon as all have arrived is always a legal, and never
a slower, way to run them. A member's own start stays its first step: under `queues N` the
tasks behind it in its hardware queue may begin from there, before its peers arrive.
Every node also lies on one or more *chains* (a thread's steps, a stream's task steps),
each totally ordered, for the vector clocks.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from checker.determinism import host_order
from checker.ir import Op, Program, Statement, StreamMode, SyncKind
from checker.witness import Step, StepKind, task_steps, thread_steps

_KIND_CODE = {StepKind.ISSUE: 0, StepKind.RETURN: 1, StepKind.START: 2, StepKind.END: 3, StepKind.COMPLETE: 4}


def key(kind: StepKind, statement: int) -> int:
    """Dense integer key of a step (hashing `Step` objects costs more than the analysis)."""
    return statement * 5 + _KIND_CODE[kind]


def step_key(step: Step) -> int:
    return step.statement * 5 + _KIND_CODE[step.kind]


class EdgeKind(str, enum.Enum):
    """Which rule an edge comes from (docs/semantics.md)."""

    PROGRAM = "program order"
    ENQUEUE = "enqueue"
    RUN = "run"
    STREAM = "stream order"
    QUEUE = "hardware queue"
    LEGACY = "legacy default stream"
    BINDING = "event binding"
    SYNC = "sync"
    RETURN = "blocking call"
    GROUP = "collective group"
    HANDOFF = "hand-off"


@dataclass(frozen=True, slots=True)
class PartialOrder:
    """Steps as nodes, edges `(before, after, delay, kind)`, chains and never-happening nodes."""

    program: Program
    steps: tuple[Step, ...]
    """Node -> the step it is (a joint start is written with the group's first member)."""
    node_of: dict
    """`key(kind, statement)` -> node, for every statement's steps (joint starts are in `joint`)."""
    edges: tuple[tuple[int, int, int, EdgeKind], ...]
    """`after` may happen only once `before` has, and at least `delay` ns later."""
    chains: tuple[tuple[int, ...], ...]
    """Node -> the chains it lies on."""
    chain_count: int
    never: frozenset[int]
    """Nodes that can never happen: the ends of a collective group missing a member."""
    joint_starts: bool
    joint: dict
    """Group index -> its joint start node (with `joint_starts` only)."""

    def node(self, kind: StepKind, statement: int) -> int:
        return self.node_of[statement * 5 + _KIND_CODE[kind]]

    def first(self, statement: Statement) -> int:
        """A task's first step (start or complete), a host statement's issue."""
        if statement.stream is None:
            return self.node(StepKind.ISSUE, statement.index)
        return self.node(task_steps(statement)[0], statement.index)

    def completion(self, statement: Statement) -> int:
        """The step at which a task has completed, or the last thread step of a host
        statement."""
        if statement.stream is None:
            return self.node(thread_steps(statement)[-1], statement.index)
        return self.node(task_steps(statement)[-1], statement.index)

    def predecessors(self) -> list[list[int]]:
        result: list[list[int]] = [[] for _ in self.steps]
        for before, after, _, _ in self.edges:
            if before != after:
                result[after].append(before)
        return result


def build(program: Program, joint_starts: bool = False) -> PartialOrder:
    """The order of a deterministic program (the caller checks determinism)."""
    return _Builder(program, joint_starts).build()


MAX_GATE_EDGES = 4_000_000
"""Edges rule 8 may add: each member of a group that starts together waits for what every
other member waits for, so a comm of 2,000 ranks takes 4 million (1.5 GB in all, decided in
11 s) and one of 5,000 would take 25 million (all the memory)."""


class TooManyEdges(Exception):
    """Rule 8 would add more than MAX_GATE_EDGES edges."""

    def __init__(self, steps: int, chains: int, edges: int):
        super().__init__(steps, chains, edges)
        self.steps, self.chains, self.edges = steps, chains, edges


class _Builder:
    def __init__(self, program: Program, joint_starts: bool):
        self.program = program
        self.joint = joint_starts
        self.steps: list[Step] = []
        self.chains: list[tuple[int, ...]] = []
        self.node_of: dict[int, int] = {}
        self.edges: list[tuple[int, int, int, EdgeKind]] = []
        self.never: set[int] = set()
        self.joint_of: dict[int, int] = {}
        # Per stream: the tasks the next task waits for (the last one, or every member of
        # the batch at the end of the stream), and the batch being filled with what it
        # waits for.
        self.frontier: dict[int, list[int]] = {}
        self.open_batch: dict[int, tuple[int, list[int]]] = {}
        # Per hardware queue (device, queue): tasks whose having begun means every task
        # enqueued into it so far has begun (the latest one, or the members of the batch
        # being filled with what was before them).
        self.queue_begun: dict[tuple[int, int], list[int]] = {}
        # Rule 11, per (device, process): the blocking streams in the order tasks were
        # enqueued onto them, and per legacy stream how much of that its last task read.
        self.blocking_log: dict[tuple, list[int]] = {}
        self.legacy_read: dict[int, int] = {}

    # -- nodes --------------------------------------------------------------------------

    def add(self, step: Step, chains: tuple[int, ...]) -> int:
        node = self.add_unnamed(step, chains)
        self.node_of[step_key(step)] = node
        return node

    def add_unnamed(self, step: Step, chains: tuple[int, ...]) -> int:
        """A node no `node_of` key names (a joint start, written as its first member's)."""
        node = len(self.steps)
        self.steps.append(step)
        self.chains.append(chains)
        return node

    def nodes(self) -> int:
        program = self.program
        streams = len(program.streams)
        thread_chain = {t.index: streams + t.index for t in program.threads}
        chain_count = streams + len(program.threads)
        # Batch members are unordered among themselves: each gets a chain of its own.
        task_chain: dict[int, int] = {}
        for s in program.statements:
            if s.stream is None:
                continue
            if s.batch is not None:
                task_chain[s.index] = chain_count
                chain_count += 1
            else:
                task_chain[s.index] = s.stream
        for s in program.statements:
            for kind in thread_steps(s):
                self.add(Step(kind, s.index), (thread_chain[s.thread],))
            group = program.groups[s.group] if s.group is not None else None
            for kind in task_steps(s):
                node = self.add(Step(kind, s.index), (task_chain[s.index],))
                if group is not None and not group.complete and kind is StepKind.END:
                    self.never.add(node)
            if group is not None and self.joint and group.index not in self.joint_of:
                chains = tuple(dict.fromkeys(task_chain[m] for m in group.members))
                node = self.joint_of[group.index] = self.add_unnamed(Step(StepKind.START, group.members[0]), chains)
                if not group.complete:
                    self.never.add(node)
        return chain_count

    # -- edges --------------------------------------------------------------------------

    def edge(self, before: int, after: int, kind: EdgeKind, delay: int = 0) -> None:
        if before != after:
            self.edges.append((before, after, delay, kind))

    def first(self, s: Statement) -> int:
        return self.node_of[key(task_steps(s)[0], s.index)]

    def done(self, s: Statement) -> int:
        return self.node_of[key(task_steps(s)[-1], s.index)]

    def launch(self, s: Statement) -> int:
        return self.program.launch_time(s)

    def build(self) -> PartialOrder:
        program = self.program
        chain_count = self.chain_count = self.nodes()
        last_record: dict[int, Statement] = {}
        legacy_of: dict[tuple, list[int]] = {}  # (device, process) -> its legacy streams
        for stream in program.streams:
            if stream.mode is StreamMode.LEGACY:
                legacy_of.setdefault((stream.device, stream.context), []).append(stream.index)
        # Statements in an order of their issues every execution agrees with (each thread's
        # program order, and each hand-off's notify before its await), so that what a task,
        # wait or sync finds enqueued before it is what it finds in every execution.
        order = host_order(program)
        if order is None:
            raise ValueError("the program's threads are not ordered by one-shot hand-offs")
        previous_of: dict[int, tuple[int, int]] = {}
        notified: dict[int, int] = {}
        for i in order:
            s = program.statements[i]
            issue = self.node_of[key(StepKind.ISSUE, i)]
            previous = previous_of.get(s.thread)
            if previous is not None:
                self.edge(previous[0], issue, EdgeKind.PROGRAM, previous[1])
            steps = thread_steps(s)
            if len(steps) == 2:
                ret = self.node_of[key(StepKind.RETURN, i)]
                self.edge(issue, ret, EdgeKind.PROGRAM, self.launch(s) if s.stream is not None else s.duration)
                previous_of[s.thread] = (ret, 0)
            else:
                previous_of[s.thread] = (issue, self.launch(s))
            if s.op is Op.NOTIFY:
                notified[s.notify] = issue
            elif s.op is Op.AWAIT:
                self.edge(notified[s.notify], issue, EdgeKind.HANDOFF)
            if s.stream is not None:
                self.task(s, issue, last_record, legacy_of)
            elif s.sync is not None:
                self.sync(s, last_record)
        self.groups()
        return PartialOrder(program, tuple(self.steps), self.node_of, tuple(self.edges),
                            tuple(self.chains), chain_count, frozenset(self.never), self.joint,
                            dict(self.joint_of))

    def stream_predecessors(self, s: Statement) -> list[int]:
        """Tasks on s's stream that s waits for: every earlier task but its batch-mates."""
        stream = s.stream
        frontier = self.frontier.get(stream, [])
        statements = self.program.statements
        if s.batch is None:
            self.open_batch.pop(stream, None)
            self.frontier[stream] = [s.index]
            return frontier
        batch = self.open_batch.get(stream)
        if batch is not None and batch[0] == s.batch and statements[frontier[-1]].batch == s.batch:
            # (the frontier holds the batch's members alone: any other task closed the batch)
            frontier.append(s.index)
            return batch[1]
        self.open_batch[stream] = (s.batch, frontier)
        self.frontier[stream] = [s.index]
        return frontier

    def task(self, s: Statement, issue: int, last_record, legacy_of) -> None:
        program = self.program
        statements = program.statements
        stream = program.streams[s.stream]
        first = self.first(s)
        self.edge(issue, first, EdgeKind.ENQUEUE, self.launch(s))
        if s.running and s.group is None:
            self.edge(first, self.done(s), EdgeKind.RUN, s.duration)
        for p in self.stream_predecessors(s):
            self.edge(self.done(statements[p]), first, EdgeKind.STREAM)
        # Rule 10: earlier tasks of the same hardware queue (on other streams) have begun.
        # Each task waits for the queue's latest one, which waited for those before it, so
        # one edge per task (or per batch member) orders them all; an earlier task on the
        # task's own stream is ordered by the stream already.
        if stream.queue is not None:
            queue = (stream.device, stream.context, stream.queue)
            begun = self.queue_begun.get(queue, [])
            for p in begun:
                u = statements[p]
                if u.stream != s.stream:
                    self.edge(self.done(u) if u.begins_when_done else self.first(u), first, EdgeKind.QUEUE)
            self.queue_begun[queue] = begun + [s.index] if s.batch is not None else [s.index]
        # Rule 11: the legacy default stream and the blocking streams of its device.
        legacy = legacy_of.get((stream.device, stream.context))
        if legacy and stream.mode is not StreamMode.NONBLOCKING:
            context = (stream.device, stream.context)
            if stream.mode is StreamMode.LEGACY:
                # Only the blocking streams enqueued onto since this stream's last task: the
                # frontiers before it, that task waited for, and this one waits for that task
                # (unless they are batch-mates, unordered: a batch member reads them all).
                log = self.blocking_log.setdefault(context, [])
                if s.batch is None:
                    others = dict.fromkeys(log[self.legacy_read.get(s.stream, 0):])
                else:
                    others = dict.fromkeys(log)
                self.legacy_read[s.stream] = len(log)
            else:
                others = legacy
                self.blocking_log.setdefault(context, []).append(s.stream)
            for other in others:
                for p in self.frontier.get(other, ()):
                    self.edge(self.done(statements[p]), first, EdgeKind.LEGACY)
        if s.event is not None and s.sync is None:
            if s.op is Op.RECORD:
                last_record[s.event] = s
            elif s.op is Op.WAIT and s.event in last_record:
                self.edge(self.done(last_record[s.event]), self.done(s), EdgeKind.BINDING)
        if s.blocking:
            self.edge(self.done(s), self.node_of[key(StepKind.RETURN, s.index)], EdgeKind.RETURN)

    def sync(self, s: Statement, last_record) -> None:
        ret = self.node_of[key(StepKind.RETURN, s.index)]
        statements = self.program.statements
        if s.sync is SyncKind.EVENT:
            record = last_record.get(s.target)
            if record is not None:
                self.edge(self.done(record), ret, EdgeKind.BINDING)
            return
        for stream in self.program.synced_streams(s):
            for p in self.frontier.get(stream, ()):
                self.edge(self.done(statements[p]), ret, EdgeKind.SYNC)

    def groups(self) -> None:
        """Rule 8: members that do not spin start together, once every one of them can: each
        member's start waits for what every other one's waits for. Each member ends once
        every member has started, its own duration after the last start (with joint starts:
        its duration after the joint start, which comes once every member has started)."""
        program = self.program
        gated = {m for group in program.groups for m in group.members if not program.statements[m].spins}
        if gated:
            firsts = {self.node_of[key(StepKind.START, m)]: m for group in program.groups for m in group.members}
            needs: dict[int, list[tuple[int, int, EdgeKind]]] = {}
            for before, after, delay, kind in self.edges:
                if after in firsts:
                    needs.setdefault(firsts[after], []).append((before, delay, kind))
            added = sum(sum(m in gated for m in group.members) * sum(len(needs.get(m, ())) for m in group.members)
                        for group in program.groups if group.complete)
            if added > MAX_GATE_EDGES:
                raise TooManyEdges(len(self.steps), self.chain_count, added)
            for group in program.groups:
                if not group.complete:
                    self.never.update(self.node_of[key(StepKind.START, m)] for m in group.members if m in gated)
                    continue
                for m in group.members:
                    if m not in gated:
                        continue
                    start = self.node_of[key(StepKind.START, m)]
                    for other in group.members:
                        if other != m:
                            for before, delay, kind in needs.get(other, ()):
                                if before == start:  # a peer waits for this member to begin: a cycle
                                    self.never.add(start)
                                self.edge(before, start, kind, delay)
        for group in program.groups:
            starts = [self.node_of[key(StepKind.START, m)] for m in group.members]
            joint = self.joint_of.get(group.index)
            if joint is not None:
                for start in starts:
                    self.edge(start, joint, EdgeKind.GROUP)
                starts = [joint]
            for m in group.members:
                end = self.node_of[key(StepKind.END, m)]
                for start in starts:
                    self.edge(start, end, EdgeKind.RUN, program.statements[m].duration)
