"""Timed models: a program (or its overlap relaxation) as a graph of step-time constraints.

A `TimedModel` has one node per step of the execution (`issue`, `return`, `start`, `end`,
`complete`; a collective member's own `start` is when it arrives, on no engine, and its group
then runs from one joint `start` node, starting together being always legal and never slower
than spinning, each member holding its engine and ending its own duration after it) and edges
`(u, v, w)` meaning `t(v) >= t(u) + w`. An `end` node is pinned to its `start`:
`t(end) = t(start) + d`. The exact model reads the program's partial order
(`checker/order.py`), built once for the fast path and for it; the optimizer adds the times.
Running tasks of positive duration occupy one unit of an engine (a `Resource`) while they run.
The makespan is the latest node time.

This is exact for *deterministic* programs: orders that do not depend on how threads
interleave (each stream, event and hardware queue used by one thread, snapshot events only,
no notifies). `program_model` returns `None` with a reason for any other program.

`bound_model` is the overlap relaxation: the same work, host threads and engines, but stream
order, events, hardware queues, the legacy stream and host syncs dropped. Kept: the
happens-before order of each pair of conflicting accesses (an `alloc` counts as a write; a host
statement that reads what a task wrote still waits for it, as the sync before it made it),
thread order and launch costs, the blocking of pageable copies, the start of every task after
its enqueue, and the order of collectives on their streams (ranks match them by position).
Record, wait and reset statements are dropped with the events, their launch cost included
(but for the record that begins a graph's launch: the launch costs its thread in any order); a
`sync` stays in its thread's order but waits for nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from checker import collectives
from checker import order as partial_order
from checker.determinism import nondeterminism
from checker.ir import Engine, Op, Program, Statement, accesses_conflict
from checker.witness import StepKind, holds_thread

def _synchronizes(statement: Statement) -> bool:
    """Stream statements that only synchronize: dropped by the overlap relaxation."""
    return statement.operation.synchronizes


@dataclass(frozen=True, slots=True)
class Resource:
    """One engine of one device: `capacity` units."""

    index: int
    device: int
    engine: Engine
    capacity: int
    name: str
    """`npu0.compute`."""


@dataclass(frozen=True, slots=True)
class Node:
    """One step. `anchor` is the start node an `end` node is pinned to (`offset` later)."""

    index: int
    kind: StepKind
    statement: int
    anchor: int | None = None
    offset: int = 0
    uses: tuple[tuple[int, int], ...] = ()
    """(resource, duration) units a `start` node occupies from its time on."""
    members: tuple[int, ...] = ()
    """A collective's `start`: every member statement it starts."""


@dataclass(frozen=True, slots=True)
class TimedModel:
    """Nodes, edges `(u, v, w)` meaning `t(v) >= t(u) + w`, and the engines."""

    program: Program
    relaxed: bool
    nodes: tuple[Node, ...]
    edges: tuple[tuple[int, int, int], ...]
    resources: tuple[Resource, ...]
    order: tuple[int, ...]
    """A topological order of the nodes."""
    first: tuple[tuple[int, int], ...]
    """(statement, node): the first step of each statement in the model."""
    completion: tuple[tuple[int, int], ...]
    """(statement, node): the step at which each statement has completed."""
    statements: tuple[int, ...]
    """Statements the model schedules (the relaxation drops event operations)."""

    def first_of(self) -> dict[int, int]:
        return dict(self.first)

    def completion_of(self) -> dict[int, int]:
        return dict(self.completion)


@dataclass(frozen=True, slots=True)
class Unsupported:
    """Why no exact model exists for a program."""

    reason: str
    deadlock: bool = False


def launch_of(program: Program, statement: Statement) -> int:
    """Host time the statement costs its thread at `issue` (enqueues only)."""
    return program.launch_time(statement)


def is_running(statement: Statement) -> bool:
    return statement.running


class _Builder:
    """Accumulates nodes and edges; `finish` sorts them topologically."""

    def __init__(self, program: Program):
        self.program = program
        self.nodes: list[Node] = []
        self.edges: list[tuple[int, int, int]] = []
        self.resources: dict[tuple[int, Engine], Resource] = {}
        self.first: dict[int, int] = {}
        self.completion: dict[int, int] = {}
        self.issue: dict[int, int] = {}
        self.ret: dict[int, int] = {}

    def node(self, kind: StepKind, statement: int, **extra) -> int:
        index = len(self.nodes)
        self.nodes.append(Node(index, kind, statement, **extra))
        return index

    def edge(self, u: int, v: int, w: int = 0) -> None:
        self.edges.append((u, v, w))

    def resource(self, statement: Statement) -> int | None:
        if statement.engine is None or statement.device is None:
            return None
        key = (statement.device, statement.engine)
        if key not in self.resources:
            device = self.program.devices[statement.device]
            self.resources[key] = Resource(
                len(self.resources), device.index, statement.engine,
                max(1, device.count(statement.engine)), f"{device.name}.{statement.engine.value}",
            )
        return self.resources[key].index

    def add_tasks(self, statements: list[Statement]) -> None:
        """Task steps for the given stream statements; collective members share a start, and
        each ends its own duration after it."""
        group_start: dict[int, int] = {}
        for st in statements:
            if not is_running(st):
                self.first[st.index] = self.completion[st.index] = self.node(StepKind.COMPLETE, st.index)
                continue
            if st.group is not None:
                if st.group not in group_start:
                    group_start[st.group] = self.group_start(st.group)
                start = self.first[st.index] = group_start[st.group]
                self.completion[st.index] = self.node(StepKind.END, st.index, anchor=start, offset=st.duration)
                continue
            uses = self.uses(st, st.duration)
            start = self.node(StepKind.START, st.index, uses=uses)
            self.first[st.index] = start
            self.completion[st.index] = self.node(StepKind.END, st.index, anchor=start, offset=st.duration)

    def uses(self, statement: Statement, duration: int) -> tuple[tuple[int, int], ...]:
        r = self.resource(statement)
        return ((r, duration),) if r is not None and duration > 0 else ()

    def group_start(self, group_index: int) -> int:
        """The shared start node of a collective group: each member holds its engine for
        its own duration from there."""
        group = self.program.groups[group_index]
        return self.node(StepKind.START, group.members[0], uses=self.group_uses(group), members=group.members)

    def group_uses(self, group) -> tuple[tuple[int, int], ...]:
        """The engine units a group's start takes: each holder's for its own duration."""
        statements = self.program.statements
        return tuple(u for m in collectives.unit_holders(self.program, group.members)
                     for u in self.uses(statements[m], statements[m].duration))

    def add_thread(self, statements: list[Statement], launches: frozenset[int] = frozenset()) -> None:
        """Issue/return steps of one thread's kept statements, chained in program order. A
        statement of `launches` (a dropped graph launch) keeps only its issue and launch cost."""
        previous: list[tuple[int, int]] = []
        for st in statements:
            issue = self.issue[st.index] = self.node(StepKind.ISSUE, st.index)
            for u, w in previous:
                self.edge(u, issue, w)
            if st.index in launches:
                previous = [(issue, launch_of(self.program, st))]
                continue
            launch = launch_of(self.program, st)
            if st.stream is not None:
                self.edge(issue, self.first[st.index], launch)
            previous = [(issue, launch)]
            if holds_thread(st):
                ret = self.ret[st.index] = self.node(StepKind.RETURN, st.index)
                self.edge(issue, ret, launch if st.stream is not None else st.duration)
                if st.stream is not None:
                    self.edge(self.completion[st.index], ret)
                previous = [(ret, 0)]
            if st.stream is None:
                self.first[st.index] = issue
                self.completion[st.index] = self.ret.get(st.index, issue)

    def finish(self, relaxed: bool, statements: list[int]) -> TimedModel | Unsupported:
        anchored = [(n.anchor, n.index, n.offset) for n in self.nodes if n.anchor is not None]
        order = topological(len(self.nodes), self.edges + anchored)
        if order is None:
            return Unsupported("the program's orders form a cycle: it deadlocks", deadlock=True)
        return TimedModel(
            self.program, relaxed, tuple(self.nodes), tuple(self.edges),
            tuple(sorted(self.resources.values(), key=lambda r: r.index)), tuple(order),
            tuple(sorted(self.first.items())), tuple(sorted(self.completion.items())),
            tuple(statements),
        )


def topological(count: int, edges) -> list[int] | None:
    """Kahn's order (smallest index first among ready nodes), or None on a cycle."""
    import heapq

    succ: list[list[int]] = [[] for _ in range(count)]
    indeg = [0] * count
    for u, v, _ in edges:
        succ[u].append(v)
        indeg[v] += 1
    ready = [v for v in range(count) if indeg[v] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        u = heapq.heappop(ready)
        order.append(u)
        for v in succ[u]:
            indeg[v] -= 1
            if indeg[v] == 0:
                heapq.heappush(ready, v)
    return order if len(order) == count else None


def program_model(program: Program) -> TimedModel | Unsupported:
    """The exact timed model of a deterministic program: its partial order with times."""
    reason = nondeterminism(program)
    if reason is not None:
        return Unsupported(reason)
    for group in program.groups:
        if not group.complete:
            return Unsupported("a collective misses a member and never completes: it deadlocks", deadlock=True)
    try:
        order = partial_order.build(program, joint_starts=True)
    except partial_order.TooManyEdges as many:
        return Unsupported(f"its collectives' members start together: {many.edges:,} orders to build, more than the "
                           f"{partial_order.MAX_GATE_EDGES:,} the exact model takes")
    joint = {node: g for g, node in order.joint.items()}
    b = _Builder(program)
    for node, step in enumerate(order.steps):
        st = program.statements[step.statement]
        if node in joint:  # the group runs: each member holds its engine from here
            group = program.groups[joint[node]]
            b.nodes.append(Node(node, step.kind, step.statement, members=group.members, uses=b.group_uses(group)))
        elif step.kind is StepKind.START and st.group is None:
            b.nodes.append(Node(node, step.kind, step.statement, uses=b.uses(st, st.duration)))
        else:  # (a member's own start: it arrives and waits for its peers, on no engine)
            b.nodes.append(Node(node, step.kind, step.statement))
    for before, after, delay, kind in order.edges:
        if kind is partial_order.EdgeKind.RUN:  # an end is pinned to its start
            b.nodes[after] = Node(after, StepKind.END, b.nodes[after].statement, anchor=before, offset=delay)
        else:
            b.edge(before, after, delay)
    for st in program.statements:
        b.first[st.index] = order.first(st) if st.group is None else order.joint[st.group]
        b.completion[st.index] = order.completion(st)
    model = b.finish(False, [st.index for st in program.statements])
    if isinstance(model, TimedModel):
        problem = _overdemand(model)
        if problem:
            return Unsupported(problem, deadlock=True)
    return model


def _overdemand(model: TimedModel) -> str | None:
    for node in model.nodes:
        demand: dict[int, int] = {}
        for r, _ in node.uses:
            demand[r] = demand.get(r, 0) + 1
        for r, n in demand.items():
            if n > model.resources[r].capacity:
                return (f"a collective needs {n} units of {model.resources[r].name} at once "
                        f"but it has {model.resources[r].capacity}: it never starts")
    return None


def ancestors(model: TimedModel) -> list[int]:
    """For each node, a bitset (Python int) of the nodes that precede it."""
    preds: list[list[int]] = [[] for _ in model.nodes]
    for u, v, _ in model.edges:
        preds[v].append(u)
    for node in model.nodes:
        if node.anchor is not None:
            preds[node.index].append(node.anchor)
    anc = [0] * len(model.nodes)
    for v in _order_with_anchors(model):
        acc = 0
        for u in preds[v]:
            acc |= anc[u] | (1 << u)
        anc[v] = acc
    return anc


def _order_with_anchors(model: TimedModel) -> list[int]:
    edges = list(model.edges) + [(n.anchor, n.index, 0) for n in model.nodes if n.anchor is not None]
    order = topological(len(model.nodes), edges)
    assert order is not None
    return order


def happens_before(model: TimedModel) -> "HappensBefore":
    """Statement-level happens-before of a deterministic program's model."""
    return HappensBefore(model, ancestors(model))


class HappensBefore:
    """`before(a, b)`: statement a has completed before statement b's first step, always."""

    def __init__(self, model: TimedModel, anc: list[int]):
        self._first = model.first_of()
        self._completion = model.completion_of()
        self._anc = anc

    def before(self, a: int, b: int) -> bool:
        return bool(self._anc[self._first[b]] >> self._completion[a] & 1)

    def reaches_node(self, a: int, node: int) -> bool:
        return bool(self._anc[node] >> self._completion[a] & 1)


def _work_accesses(program: Program, st: Statement):
    """Accesses the relaxation orders by; an `alloc` counts as a write of what it allocates."""
    if st.op is Op.ALLOC and st.memory is not None:
        from checker.ir import Access, NO_SPAN

        return tuple(Access(m, 0, program.memories[m].size, True, NO_SPAN, program.memories[m].name)
                     for m in st.lifetime_memories)
    return st.accesses


def graph_launches(program: Program) -> frozenset[int]:
    """The records that begin a graph's launch (`S: launch G`): the relaxation drops them with
    the events, but the launch costs its thread its device's launch time in any order."""
    return frozenset(st.launch for st in program.statements
                     if st.launch is not None and program.launch_time(program.statements[st.launch]))


def _sharing_pairs(accesses: list[tuple]) -> list[tuple[int, int]]:
    """The pairs (i < j, in order) of access lists that share a memory one of them writes:
    the only ones that can conflict. Listed per memory, not over every pair of statements:
    2,000 tasks on 333 buffers had 2 million pairs to test, and 22,000 share one."""
    writers: dict[int, set[int]] = {}
    touching: dict[int, set[int]] = {}
    for i, listed in enumerate(accesses):
        for access in listed:
            touching.setdefault(access.memory, set()).add(i)
            if access.write:
                writers.setdefault(access.memory, set()).add(i)
    pairs: set[tuple[int, int]] = set()
    for memory, written in writers.items():
        for w in written:
            pairs.update((min(w, x), max(w, x)) for x in touching[memory] if x != w)
    return sorted(pairs)


def bound_model(program: Program, exact: TimedModel) -> TimedModel | Unsupported:
    """The overlap relaxation of a deterministic program (see the module docstring)."""
    hb = happens_before(exact)
    b = _Builder(program)
    kept = [st for st in program.statements if not _synchronizes(st)]
    b.add_tasks([st for st in kept if st.stream is not None])
    launches = graph_launches(program)
    for thread in program.threads:
        b.add_thread([program.statements[i] for i in thread.statements
                      if not _synchronizes(program.statements[i]) or i in launches], launches)
    accessing = [(st, _work_accesses(program, st)) for st in kept]
    accessing = [(st, acc) for st, acc in accessing if acc]
    for i, j in _sharing_pairs([acc for _, acc in accessing]):
        (a, acc_a), (c, acc_c) = accessing[i], accessing[j]
        if a.thread == c.thread and a.stream is None and c.stream is None:
            continue  # already in thread order
        if accesses_conflict(acc_a, acc_c):
            if hb.before(a.index, c.index):
                b.edge(b.completion[a.index], b.first[c.index])
            elif hb.before(c.index, a.index):
                b.edge(b.completion[c.index], b.first[a.index])
    # Collectives match by position on their streams: that order is part of the work. The
    # members of one `group` are one fused launch: each follows what came before the group,
    # none follows another.
    latest: dict[int, tuple[int | None, list[Statement], list[Statement]]] = {}
    """Per stream: the batch of its latest collective, that batch's members, and what they follow."""
    for thread in program.threads:
        for i in thread.statements:
            st = program.statements[i]
            if st.stream is None or st.group is None:
                continue
            batch, members, predecessors = latest.get(st.stream, (None, [], []))
            if st.batch is not None and st.batch == batch:
                members.append(st)
            else:
                predecessors = members
                latest[st.stream] = (st.batch, [st], predecessors)
            for prev in predecessors:
                b.edge(b.completion[prev.index], b.first[st.index])
    # A `sync` orders nothing of its own here: what the host must see done before it goes
    # on is in the conflicting accesses above (a host statement reading what a task wrote, a
    # host `free` of memory a task used), and a sync that waits for nothing the thread then
    # touches is overlap the program leaves.
    return b.finish(True, [st.index for st in kept])
