"""Happens-before analysis for programs whose orders do not depend on the interleaving.

A program is *deterministic* when what every wait, sync and queue orders against is fixed by
program order alone: no flag events, no notifies, and no stream, event, hardware queue or
legacy-stream device shared by two threads (collectives match by position, so comms may be
shared). Then the executions are exactly the linearizations of one partial order over steps
(docs/semantics.md), and:

* a race is a conflicting pair whose steps are unordered,
* a deadlock is a cycle, or a collective group that can never form,
* a use-after-free is a free that need not follow the access, with no alloc forced between.

Steps are nodes numbered densely; every node lies on one or more *chains* (a stream's task
steps, a thread's steps), and vector clocks over chains answer "does a happen before b" in
O(1) (see ../shared notes: vector clocks build 10,000 tasks in 10 ms where a transitive
closure takes minutes). Every finding comes with a witness: a topological prefix of the order.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from checker.findings import Finding, FindingKind, Stuck
from checker.ir import Op, Program, Statement, StreamMode, SyncKind
from checker.witness import Step, StepKind, Witness, task_steps, thread_steps
from checker.determinism import nondeterminism  # noqa: F401  (re-exported)

RACE_SCAN_BUDGET = 50_000_000
_KIND_CODE = {StepKind.ISSUE: 0, StepKind.RETURN: 1, StepKind.START: 2, StepKind.END: 3, StepKind.COMPLETE: 4}


def _key(kind: StepKind, statement: int) -> int:
    """Dense integer key of a step (hashing `Step` objects costs more than the analysis)."""
    return statement * 5 + _KIND_CODE[kind]


def _step_key(step: Step) -> int:
    return step.statement * 5 + _KIND_CODE[step.kind]
MAX_WITNESSES = 200


@dataclass(frozen=True, slots=True)
class _Graph:
    """Steps as dense integer nodes with predecessor lists."""

    steps: tuple[Step, ...]
    predecessors: tuple[tuple[int, ...], ...]
    chains: tuple[tuple[int, ...], ...]
    """The chain ids of each node."""
    chain_count: int
    node_of: dict
    """Step key (`_key`) -> node."""
    blocked: frozenset[int]
    """Nodes that can never happen (collective groups with a member missing)."""


class _Builder:
    def __init__(self, program: Program):
        self.program = program
        self.steps: list[Step] = []
        self.predecessors: list[list[int]] = []
        self.chains: list[tuple[int, ...]] = []
        self.node_of: dict[int, int] = {}

    def node(self, step: Step, chains: tuple[int, ...]) -> int:
        node = len(self.steps)
        self.steps.append(step)
        self.predecessors.append([])
        self.chains.append(chains)
        self.node_of[_step_key(step)] = node
        return node

    def build(self) -> _Graph:
        program = self.program
        stream_chain = {s.index: s.index for s in program.streams}
        thread_chain = {t.index: len(program.streams) + t.index for t in program.threads}
        group_node: dict[int, int] = {}
        blocked: set[int] = set()
        # Nodes for every step; a collective group's starts share one node on every member chain.
        for s in program.statements:
            for kind in thread_steps(s):
                self.node(Step(kind, s.index), (thread_chain[s.thread],))
            for kind in task_steps(s):
                step = Step(kind, s.index)
                if kind is StepKind.START and s.group is not None:
                    group = program.groups[s.group]
                    if s.group in group_node:
                        self.node_of[_step_key(step)] = group_node[s.group]
                        continue
                    chains = tuple(stream_chain[program.statements[m].stream] for m in group.members)
                    group_node[s.group] = self.node(Step(kind, group.members[0]), chains)
                    self.node_of[_step_key(step)] = group_node[s.group]
                    if not group.complete:
                        blocked.add(group_node[s.group])
                    continue
                self.node(step, (stream_chain[s.stream],))
        self.edges(program)
        return _Graph(tuple(self.steps), tuple(tuple(dict.fromkeys(p)) for p in self.predecessors),
                      tuple(self.chains), len(program.streams) + len(program.threads), self.node_of,
                      frozenset(blocked))

    def edge(self, before: int, after: int) -> None:
        if before != after:
            self.predecessors[after].append(before)

    def first(self, s: Statement) -> int:
        return self.node_of[_key(task_steps(s)[0], s.index)]

    def done(self, s: Statement) -> int:
        return self.node_of[_key(task_steps(s)[-1], s.index)]

    def begin(self, s: Statement) -> int:
        """The step at which a task has begun: a running task's start, an instant task's completion."""
        return self.first(s)

    def edges(self, program: Program) -> None:
        node_of = self.node_of
        last_on_stream: dict[int, Statement] = {}
        last_in_queue: dict[tuple[int, int], Statement] = {}
        last_record: dict[int, Statement] = {}
        legacy_of = {s.device: s.index for s in program.streams if s.mode is StreamMode.LEGACY}
        last_blocking: dict[int, dict[int, Statement]] = defaultdict(dict)
        for thread in program.threads:
            previous_step = None
            for i in thread.statements:
                s = program.statements[i]
                for kind in thread_steps(s):
                    node = node_of[_key(kind, i)]
                    if previous_step is not None:
                        self.edge(previous_step, node)
                    previous_step = node
                issue = node_of[_key(StepKind.ISSUE, i)]
                if s.stream is not None:
                    self.task_edges(s, issue, last_on_stream, last_in_queue, last_record, legacy_of, last_blocking)
                elif s.op is Op.SYNC:
                    done = node_of[_key(StepKind.RETURN, i)]
                    if s.sync is SyncKind.EVENT:
                        record = last_record.get(s.target)
                        if record is not None:
                            self.edge(self.done(record), done)
                    else:
                        for stream in program.streams:
                            covered = (s.sync is SyncKind.ALL or (s.sync is SyncKind.STREAM and stream.index == s.target)
                                       or (s.sync is SyncKind.DEVICE and stream.device == s.target))
                            if covered and stream.index in last_on_stream:
                                self.edge(self.done(last_on_stream[stream.index]), done)

    def task_edges(self, s, issue, last_on_stream, last_in_queue, last_record, legacy_of, last_blocking) -> None:
        program = self.program
        stream = program.streams[s.stream]
        first = self.first(s)
        self.edge(issue, first)
        steps = task_steps(s)
        if len(steps) == 2:
            self.edge(first, self.node_of[_key(StepKind.END, s.index)])
        previous = last_on_stream.get(s.stream)
        if previous is not None:
            self.edge(self.done(previous), first)
        last_on_stream[s.stream] = s
        if stream.queue is not None:
            key = (stream.device, stream.queue)
            if key in last_in_queue:
                self.edge(self.begin(last_in_queue[key]), self.begin(s))
            last_in_queue[key] = s
        if stream.device in legacy_of:
            if stream.mode is StreamMode.LEGACY:
                for other in last_blocking[stream.device].values():
                    self.edge(self.done(other), self.begin(s))
            elif stream.mode is StreamMode.BLOCKING:
                legacy = last_on_stream.get(legacy_of[stream.device])
                if legacy is not None:
                    self.edge(self.done(legacy), self.begin(s))
                last_blocking[stream.device][s.stream] = s
        if s.op is Op.RECORD:
            last_record[s.event] = s
        elif s.op is Op.WAIT and s.event in last_record:
            self.edge(self.done(last_record[s.event]), self.done(s))
        if s.blocking:
            self.edge(self.done(s), self.node_of[_key(StepKind.RETURN, s.index)])


@dataclass(frozen=True, slots=True)
class HappensBefore:
    """The order of a deterministic program: executable nodes, their order, vector clocks."""

    program: Program
    graph: _Graph
    order: tuple[int, ...]
    """Every node that can happen, in a topological order."""
    position: dict
    """node -> its position in each of its chains: {chain: pos}."""
    clocks: dict
    """node -> vector clock (list indexed by chain)."""

    def happened(self, step: Step) -> bool:
        return self.graph.node_of[_step_key(step)] in self.clocks

    def before(self, a: Step, b: Step) -> bool:
        """Whether step a happens before step b in every execution (both must happen)."""
        node_a, node_b = self.graph.node_of[_step_key(a)], self.graph.node_of[_step_key(b)]
        if node_a == node_b:
            return False
        clock = self.clocks[node_b]
        return any(clock[c] >= p for c, p in self.position[node_a].items())

    def prefix(self, targets: list[int], last: int | None = None, early: int | None = None) -> Witness:
        """A legal execution prefix holding the targets and all they depend on, in order.

        `early` goes as late as possible among the nodes that do not depend on it (so that
        nothing unordered with it slips in after it); `last` goes last.
        """
        needed = _ancestors(self.graph, targets)
        index = {node: i for i, node in enumerate(self.order)}
        ordered = sorted(needed, key=index.__getitem__)
        if early is not None:
            after = _descendants_within(self.graph, early, needed)
            ordered = ([n for n in ordered if n not in after] + [early]
                       + [n for n in ordered if n in after and n != early])
        if last is not None:
            ordered.remove(last)
            ordered.append(last)
        return Witness(tuple(self.graph.steps[n] for n in ordered))


def _ancestors(graph: _Graph, targets: list[int]) -> set[int]:
    seen = set(targets)
    stack = list(targets)
    while stack:
        node = stack.pop()
        for p in graph.predecessors[node]:
            if p not in seen:
                seen.add(p)
                stack.append(p)
    return seen


def _descendants_within(graph: _Graph, root: int, within: set[int]) -> set[int]:
    successors = defaultdict(list)
    for node in within:
        for p in graph.predecessors[node]:
            if p in within:
                successors[p].append(node)
    seen = {root}
    stack = [root]
    while stack:
        node = stack.pop()
        for n in successors[node]:
            if n not in seen:
                seen.add(n)
                stack.append(n)
    return seen


def build(program: Program) -> HappensBefore:
    """Build the order; nodes on a cycle or behind a group that never forms are left out."""
    from checker.frontend import paused_gc

    with paused_gc():
        return _build(program)


def _build(program: Program) -> HappensBefore:
    graph = _Builder(program).build()
    count = len(graph.steps)
    successors: list[list[int]] = [[] for _ in range(count)]
    waiting = [0] * count
    for node, preds in enumerate(graph.predecessors):
        waiting[node] = len(preds)
        for p in preds:
            successors[p].append(node)
    ready = [n for n in range(count) if waiting[n] == 0 and n not in graph.blocked]
    order: list[int] = []
    position: dict[int, dict[int, int]] = {}
    clocks: dict[int, list[int]] = {}
    chain_length = [0] * graph.chain_count
    zero = [-1] * graph.chain_count
    while ready:
        node = ready.pop()
        order.append(node)
        preds = graph.predecessors[node]
        if not preds:
            clock = list(zero)
        else:
            clock = list(clocks[preds[0]])
            for p in preds[1:]:
                other = clocks[p]
                clock = [a if a >= b else b for a, b in zip(clock, other)]
        own = {}
        for chain in graph.chains[node]:
            own[chain] = chain_length[chain]
            clock[chain] = chain_length[chain]
            chain_length[chain] += 1
        position[node] = own
        clocks[node] = clock
        for n in successors[node]:
            waiting[n] -= 1
            if waiting[n] == 0 and n not in graph.blocked:
                ready.append(n)
    return HappensBefore(program, graph, tuple(order), position, clocks)


# -- findings ------------------------------------------------------------------------------


def analyze(program: Program, budget: int = RACE_SCAN_BUDGET) -> tuple[tuple[Finding, ...], bool]:
    """Races, use-after-free and deadlock of a deterministic program.

    Returns the findings and whether the analysis was complete (a huge number of unordered
    accesses can exhaust the scan budget; the caller must then not call the program clean).
    """
    order = build(program)
    findings: list[Finding] = []
    complete = _races(order, findings, budget)
    _lifetimes(order, findings)
    deadlock = _deadlock(order)
    if deadlock is not None:
        findings.append(deadlock)
    return tuple(findings), complete


def _access_steps(s: Statement) -> tuple[Step, Step]:
    if s.stream is None:
        return Step(StepKind.ISSUE, s.index), Step(StepKind.RETURN, s.index)
    return Step(StepKind.START, s.index), Step(StepKind.END, s.index)


def _races(order: HappensBefore, findings: list[Finding], budget: int) -> bool:
    program = order.program
    graph = order.graph
    index_in_order = {node: i for i, node in enumerate(order.order)}
    accessors = []
    for s in program.statements:
        if not s.accesses:
            continue
        start, end = _access_steps(s)
        start_node = graph.node_of[_step_key(start)]
        if start_node not in order.clocks:
            continue  # never runs
        end_node = graph.node_of[_step_key(end)]
        accessors.append((index_in_order[start_node], s, start_node, end_node))
    accessors.sort(key=lambda item: item[0])
    # (memory, is_write) -> chain -> list of (end position on chain, statement, access)
    history: dict[tuple[int, bool], dict[int, list]] = defaultdict(lambda: defaultdict(list))
    pairs: dict[tuple[int, int], list] = {}
    scanned = 0
    complete = True
    for _, s, start_node, end_node in accessors:
        clock = order.clocks[start_node]
        end_chain, end_position = next(iter(order.position[end_node].items()))
        for access in s.accesses:
            kinds = (True, False) if access.write else (True,)
            for write in kinds:
                for chain, entries in history[(access.memory, write)].items():
                    seen_position = clock[chain]
                    for j in range(len(entries) - 1, -1, -1):
                        position, other, other_access = entries[j]
                        if position <= seen_position:
                            break
                        scanned += 1
                        if other.index != s.index and access.conflicts(other_access):
                            key = (min(other.origin, s.origin), max(other.origin, s.origin))
                            pair = pairs.setdefault(key, [0, other, s, access])
                            pair[0] += 1
                    if scanned > budget:
                        complete = False
                        break
        for access in s.accesses:
            history[(access.memory, access.write)][end_chain].append((end_position, s, access))
    for count, first, second, access in pairs.values():
        a, b = sorted((first, second), key=lambda st: st.index)
        memory = program.memories[access.memory]
        witness = order.prefix([graph.node_of[_step_key(_access_steps(a)[0])], graph.node_of[_step_key(_access_steps(b)[0])]])
        findings.append(Finding(
            FindingKind.RACE,
            f"race on `{memory.name}`: {program.describe(a)} and {program.describe(b)} can run at the same time",
            (a.index, b.index), memory.buffer, memory.name, count, witness,
            help="order them with an event (record on one stream, wait on the other) or a sync",
        ))
    return complete


def _lifetimes(order: HappensBefore, findings: list[Finding]) -> None:
    program = order.program
    graph = order.graph
    allocs: dict[int, list[int]] = defaultdict(list)
    frees: dict[int, list[tuple[Statement, int]]] = defaultdict(list)
    for s in program.statements:
        if s.op is Op.ALLOC:
            node = graph.node_of[_key(task_steps(s)[-1] if s.stream is not None else StepKind.ISSUE, s.index)]
            allocs[s.memory].append(node)
        elif s.op is Op.FREE:
            node = graph.node_of[_step_key(_access_steps(s)[1])]
            frees[s.memory].append((s, node))
    reported: set[tuple[int, FindingKind]] = set()
    for s in program.statements:
        for access in s.accesses:
            memory = access.memory
            if memory not in allocs and memory not in frees:
                continue
            start = graph.node_of[_step_key(_access_steps(s)[0])]
            if start not in order.clocks:
                continue
            start_step = graph.steps[start]
            live_allocs = [g for g in allocs.get(memory, ()) if g in order.clocks]
            # Before alloc: no alloc completion is forced before the access starts.
            if memory in allocs and not any(order.before(graph.steps[g], start_step) for g in live_allocs):
                key = (s.origin, FindingKind.USE_BEFORE_ALLOC)
                if key not in reported:
                    reported.add(key)
                    findings.append(Finding(
                        FindingKind.USE_BEFORE_ALLOC,
                        f"{program.describe(s)} can touch `{program.memories[memory].name}` before it is allocated",
                        (s.index,), program.memories[memory].buffer, program.memories[memory].name, 1,
                        order.prefix([start], last=start),
                        help="order the alloc before every use (same stream, an event, or a sync)",
                    ))
            for free, free_end in frees.get(memory, ()):
                if free.index == s.index or free_end not in order.clocks:
                    continue
                free_step = graph.steps[free_end]
                if order.before(start_step, free_step):
                    continue
                if any(order.before(free_step, graph.steps[g]) and order.before(graph.steps[g], start_step)
                       for g in live_allocs):
                    continue
                key = (s.origin, FindingKind.USE_AFTER_FREE)
                if key in reported:
                    continue
                reported.add(key)
                findings.append(Finding(
                    FindingKind.USE_AFTER_FREE,
                    f"{program.describe(s)} can touch `{program.memories[memory].name}` after {program.describe(free)} freed it",
                    (s.index, free.index), program.memories[memory].buffer, program.memories[memory].name, 1,
                    order.prefix([start, free_end], last=start, early=free_end),
                    help="make the free wait for every use (record an event after the use and wait on it before the free)",
                ))


def _deadlock(order: HappensBefore) -> Finding | None:
    program = order.program
    graph = order.graph
    if len(order.order) == len(graph.steps):
        return None
    happened = set(order.order)
    stuck: list[Stuck] = []
    seen_statements = set()
    for node, step in enumerate(graph.steps):
        if node in happened or step.statement in seen_statements:
            continue
        preds = graph.predecessors[node]
        missing = [p for p in preds if p not in happened]
        if not missing and node not in graph.blocked:
            continue
        # Report only the frontier: nodes all of whose missing predecessors are on other statements.
        if any(graph.steps[p].statement == step.statement for p in missing):
            continue
        statement = program.statements[step.statement]
        if node in graph.blocked:
            group = program.groups[statement.group]
            reason = f"collective group {group.position} of comm `{program.comms[group.comm].name}` is missing a member"
        else:
            waited = {program.statements[graph.steps[p].statement] for p in missing}
            reason = "; ".join(sorted(f"waits for {program.describe(s)} (line {s.span.line})" for s in waited))
        seen_statements.add(step.statement)
        stuck.append(Stuck(step.statement, reason))
    stuck.sort(key=lambda item: item.statement)
    witness = Witness(tuple(graph.steps[n] for n in order.order))
    lines = ", ".join(str(program.statements[item.statement].span.line) for item in stuck[:6])
    return Finding(
        FindingKind.DEADLOCK,
        f"deadlock: {len(stuck)} statement(s) can never complete (lines {lines})",
        tuple(item.statement for item in stuck), witness=witness, stuck=tuple(stuck),
        help="every wait, sync and collective needs a partner that can still arrive",
    )
