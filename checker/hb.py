"""Happens-before analysis for programs whose orders do not depend on the interleaving.

For a deterministic program (`checker/determinism.py`) the executions are exactly the
linearizations of one partial order over steps (`checker/order.py`), and:

* a race is a conflicting pair whose accesses are unordered,
* a deadlock is a cycle, or a collective group that can never complete,
* a use-after-free is a free that need not follow the access, with no alloc forced between,
  or a free whose enqueue need not follow the access's enqueue (stream-ordered frees count
  by launch order: work enqueued after the free uses freed memory).

Vector clocks over the order's chains answer "does a happen before b" in O(1) (vector clocks
build 10,000 tasks in 10 ms where a transitive closure takes minutes). Every finding comes
with a witness: a topological prefix of the order.
"""

from __future__ import annotations

import time
from bisect import bisect_left, bisect_right
from collections import defaultdict
from dataclasses import dataclass, replace

from checker import collectives, messages, order as partial_order
from checker.findings import Finding, FindingKind, Stuck
from checker.ir import Op, Program, Statement
from checker.order import PartialOrder, step_key as _step_key
from checker.resources import paused_gc
from checker.witness import Step, StepKind, Witness

RACE_SCAN_BUDGET = 50_000_000
"""Runs (`_Run`: a statement's instances on one chain) the race scan reads, all accesses together."""
MAX_WITNESSES = 200
MAX_CLOCK_ENTRIES = 100_000_000
"""Steps x chains (threads and streams) of the vector clocks: about 8 bytes each. 20,000
streams of one kernel each took 9.5 GB; beyond this the order is not built."""


MAX_JOIN_ENTRIES = 300_000_000
"""Clock entries compared where steps join their predecessors' clocks (predecessors beyond
the first, times chains): a collective of 1,000 members on 1,000 streams joins 1,000 starts
for each end, 2 billion comparisons, past a minute with no budget. Beyond this the order is
not built."""
SHARED_JOIN = 8
"""Past this many predecessors, a step's join is kept for the steps with the same ones (every
member's end of one collective call joins the same starts)."""


class TooWide(Exception):
    """The program has too many steps on too many chains for vector clocks, or joins too
    many clocks (`joins`: the clocks joined beyond each step's first), or its groups that
    start together would need too many edges (`gates`, `order.MAX_GATE_EDGES`)."""

    def __init__(self, steps: int, chains: int, joins: int = 0, gates: int = 0):
        super().__init__(steps, chains, joins, gates)
        self.steps, self.chains, self.joins, self.gates = steps, chains, joins, gates


@dataclass(frozen=True, slots=True)
class HappensBefore:
    """The order of a deterministic program: executable nodes, their order, vector clocks."""

    program: Program
    graph: PartialOrder
    predecessors: list
    """Node -> its predecessor nodes."""
    order: tuple[int, ...]
    """Every node that can happen, in a topological order."""
    position: dict
    """node -> its position in each of its chains: ((chain, pos), ...), most often one pair."""
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
        return any(clock[c] >= p for c, p in self.position[node_a])

    def prefix(self, targets: list[int], last: int | None = None, early: int | None = None,
               then: int | None = None) -> Witness:
        """A legal execution prefix holding the targets and all they depend on, in order.

        `early` goes as late as possible among the nodes that do not depend on it (so that
        nothing unordered with it slips in after it); `last` goes last; `then` and what it
        depends on beyond that come after all of it.
        """
        needed = _ancestors(self.predecessors, targets)
        index = {node: i for i, node in enumerate(self.order)}
        ordered = sorted(needed, key=index.__getitem__)
        if early is not None:
            after = _descendants_within(self.predecessors, early, needed)
            ordered = ([n for n in ordered if n not in after] + [early]
                       + [n for n in ordered if n in after and n != early])
        if last is not None:
            ordered.remove(last)
            ordered.append(last)
        if then is not None:
            ordered += sorted(_ancestors(self.predecessors, [then]) - needed, key=index.__getitem__)
        return Witness(tuple(self.graph.steps[n] for n in ordered))


def _ancestors(predecessors, targets: list[int]) -> set[int]:
    seen = set(targets)
    stack = list(targets)
    while stack:
        node = stack.pop()
        for p in predecessors[node]:
            if p not in seen:
                seen.add(p)
                stack.append(p)
    return seen


def _descendants_within(predecessors, root: int, within: set[int]) -> set[int]:
    successors = defaultdict(list)
    for node in within:
        for p in predecessors[node]:
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
    """Build the order; nodes on a cycle or behind a group that never completes are left out."""
    with paused_gc():
        return _build(program)


def _build(program: Program) -> HappensBefore:
    try:
        graph = partial_order.build(program)
    except partial_order.TooManyEdges as many:  # (a group of thousands that start together)
        raise TooWide(many.steps, many.chains, gates=many.edges) from None
    if len(graph.steps) * graph.chain_count > MAX_CLOCK_ENTRIES:
        raise TooWide(len(graph.steps), graph.chain_count)
    predecessors = [list(dict.fromkeys(p)) for p in graph.predecessors()]
    count = len(graph.steps)
    successors: list[list[int]] = [[] for _ in range(count)]
    waiting = [0] * count
    for node, preds in enumerate(predecessors):
        waiting[node] = len(preds)
        for p in preds:
            successors[p].append(node)
    keys = [frozenset(preds) if len(preds) > SHARED_JOIN else None for preds in predecessors]
    work = sum(len(preds) - 1 for preds in set(keys) - {None})
    work += sum(len(preds) - 1 for preds in predecessors if 1 < len(preds) <= SHARED_JOIN)
    if work * graph.chain_count > MAX_JOIN_ENTRIES:
        raise TooWide(len(graph.steps), graph.chain_count, work)
    ready = [n for n in range(count) if waiting[n] == 0 and n not in graph.never]
    order: list[int] = []
    position: dict[int, tuple[tuple[int, int], ...]] = {}
    clocks: dict[int, list[int]] = {}
    joined: dict[frozenset[int], list[int]] = {}
    chain_length = [0] * graph.chain_count
    zero = [-1] * graph.chain_count
    while ready:
        node = ready.pop()
        order.append(node)
        preds = predecessors[node]
        if not preds:
            clock = list(zero)
        else:
            key = keys[node]
            shared = joined.get(key) if key is not None else None
            if shared is not None:
                clock = list(shared)
            else:
                clock = list(clocks[preds[0]])
                for p in preds[1:]:
                    other = clocks[p]
                    clock = [a if a >= b else b for a, b in zip(clock, other)]
                if key is not None:
                    joined[key] = list(clock)
        own = []
        for chain in graph.chains[node]:
            own.append((chain, chain_length[chain]))
            clock[chain] = chain_length[chain]
            chain_length[chain] += 1
        position[node] = tuple(own)
        clocks[node] = clock
        for n in successors[node]:
            waiting[n] -= 1
            if waiting[n] == 0 and n not in graph.never:
                ready.append(n)
    return HappensBefore(program, graph, predecessors, tuple(order), position, clocks)


# -- findings ------------------------------------------------------------------------------


def analyze(program: Program, budget: int = RACE_SCAN_BUDGET,
            seconds: float | None = None) -> tuple[tuple[Finding, ...], bool]:
    """Races, use-after-free and deadlock of a deterministic program.

    Returns the findings and whether the analysis was complete (a huge number of unordered
    accesses can exhaust the scan budget; the caller must then not call the program clean).
    """
    order = build(program)
    findings: list[Finding] = []
    complete = _races(order, findings, budget, None if seconds is None else time.monotonic() + seconds)
    _lifetimes(order, findings)
    deadlock = _deadlock(order)
    if deadlock is not None:
        findings.append(deadlock)
    return tuple(findings), complete


def _access_steps(s: Statement) -> tuple[Step, Step]:
    if s.stream is None:
        return Step(StepKind.ISSUE, s.index), Step(StepKind.RETURN, s.index)
    return Step(StepKind.START, s.index), Step(StepKind.END, s.index)


class _Run:
    """The instances of one statement (one origin, the same accesses of one buffer) that end
    on one chain, in the order they end. A loop's thousand launches of a kernel are one run,
    and the scan counts those unordered with an access by bisection instead of reading each
    (a race in a loop of 10,000 iterations read 50 million pairs, past a minute). Every
    instance is in one run per buffer, so counting each run once counts each pair once."""

    __slots__ = ("by_memory", "positions", "statements")

    def __init__(self, by_memory: dict[int, tuple]) -> None:
        self.by_memory = by_memory
        """The accesses of each memory of the buffer (a run is listed under each)."""
        self.positions: list[int] = []
        self.statements: list[Statement] = []


SAME_ITERATION_SCAN = 64
"""Statements of a run `_races` looks through for the partner of an access's own iteration."""


def _races(order: HappensBefore, findings: list[Finding], budget: int, deadline: float | None = None) -> bool:
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
    history: dict[tuple[int, bool], dict[int, dict[tuple, _Run]]] = defaultdict(dict)
    """(memory, whether the run writes it) -> chain -> the runs listed under that memory,
    the one that ended last at the end."""
    runs: dict[tuple, _Run] = {}
    """(chain, (origin, buffer, the number `signatures` gives its accesses of the buffer)) -> its run."""
    signatures: dict[tuple, int] = {}
    """The accesses of one buffer by a statement -> a number (a whole array's are 100,000)."""
    pairs: dict[tuple[int, int], dict[str, list]] = {}
    """Per pair of source statements, per buffer: [racing instance pairs, first pair's statements, memory,
    the elements raced on (a dict for its order)]."""
    scanned = 0
    complete = True
    forever: dict[tuple[int, bool], list] = defaultdict(list)
    """Accesses that start and never end (a collective member whose group never completes)."""

    def record(other: Statement, s: Statement, memory: int, count: int) -> dict[str, None]:
        buffer = program.memories[memory].buffer
        key = (min(other.origin, s.origin), max(other.origin, s.origin))
        group = pairs.setdefault(key, {})
        if buffer in group:
            entry = group[buffer]
            entry[0] += count
            if entry[1].bindings != entry[2].bindings and other.bindings == s.bindings:
                # (shown first: a pair of one loop iteration, whose cause is within the iteration,
                # rather than one across iterations, which may race only through what the first does)
                entry[1], entry[2], entry[3] = other, s, memory
        else:
            group[buffer] = [count, other, s, memory, {}]
        group[buffer][4][program.memories[memory].name] = None
        return group[buffer][4]

    def partner(run: _Run, s: Statement, first: int) -> Statement:
        """The run's statement to show with s: one of s's loop iteration among the last
        SAME_ITERATION_SCAN counted, else the first of the run that s is not ordered after
        (the nearest: a ring buffer's first wrap, whose witness is short, not its last)."""
        for other in reversed(run.statements[max(first, len(run.statements) - SAME_ITERATION_SCAN):]):
            if other.bindings == s.bindings:
                return other
        return run.statements[first]

    def by_memory(s: Statement) -> dict[int, list]:
        grouped: dict[int, list] = {}
        for access in s.accesses:
            grouped.setdefault(access.memory, []).append(access)
        return grouped

    def scan(s: Statement, clock, memories: dict[int, list]) -> bool:
        """Counts the races of s with every earlier access it is not ordered after; False once
        the budget (runs read, or the deadline) is spent: the whole scan stops there."""
        nonlocal scanned
        counted: set = set()
        """Runs counted against s (and, of accesses that never end, (buffer, statement))."""
        for memory, accesses in memories.items():
            writes = any(a.write for a in accesses)
            for write in ((True, False) if writes else (True,)):
                for other, other_access in forever[(memory, write)]:
                    key = (program.memories[memory].buffer, other.index)
                    if other.index != s.index and key not in counted \
                            and any(a.conflicts(other_access) for a in accesses):
                        counted.add(key)
                        record(other, s, memory, 1)
                for chain, listed in history[(memory, write)].items():
                    seen_position = clock[chain]
                    for run in reversed(listed.values()):
                        if run.positions[-1] <= seen_position:
                            break
                        scanned += 1
                        if id(run) in counted or not any(a.conflicts(b) for a in accesses
                                                         for b in run.by_memory[memory]):
                            continue
                        counted.add(id(run))
                        first = bisect_right(run.positions, seen_position)
                        elements = record(partner(run, s, first), s, memory, len(run.positions) - first)
                        # (the run is counted once, at its first element: the others of the
                        # buffer it conflicts on are named with it, `writes t` against `writes t`)
                        for element, theirs in run.by_memory.items():
                            if element != memory and element in memories and \
                                    any(a.conflicts(b) for a in memories[element] for b in theirs):
                                elements[program.memories[element].name] = None
                    if scanned > budget or (deadline is not None and time.monotonic() > deadline):
                        return False
        return True

    for _, s, start_node, end_node in accessors:
        memories = by_memory(s)
        if not scan(s, order.clocks[start_node], memories):
            complete = False  # what is found so far is reported, with an unknown
            break
        if end_node not in order.position:
            for access in s.accesses:
                forever[(access.memory, access.write)].append((s, access))
            continue
        end_chain, end_position = order.position[end_node][0]
        buffers: dict[str, dict[int, tuple]] = {}
        for memory, accesses in memories.items():
            buffers.setdefault(program.memories[memory].buffer, {})[memory] = tuple(accesses)
        for buffer, accessed in buffers.items():
            signature = tuple((a.memory, a.start, a.end, a.write) for accesses in accessed.values() for a in accesses)
            key = (s.origin, buffer, signatures.setdefault(signature, len(signatures)))  # (hashed once)
            run = runs.get((end_chain, key))
            if run is None:
                run = runs[(end_chain, key)] = _Run(accessed)
            run.positions.append(end_position)
            run.statements.append(s)
            for memory, accesses in accessed.items():
                listed = history[(memory, any(a.write for a in accesses))].setdefault(end_chain, {})
                listed.pop(key, None)
                listed[key] = run  # (last: the run that ended last)
    for group in pairs.values():
        for count, a, b, memory, elements in group.values():  # each buffer with its own first pair
            witness = order.prefix([graph.node_of[_step_key(_access_steps(a)[0])],
                                    graph.node_of[_step_key(_access_steps(b)[0])]])
            findings.append(messages.race(program, a, b, program.memories[memory], count, witness,
                                          tuple(elements)))
    return complete


def _lifetimes(order: HappensBefore, findings: list[Finding]) -> None:
    """Use before alloc and use after free, by run order and (frees) by launch order."""
    program = order.program
    graph = order.graph
    allocs: dict[int, list[int]] = defaultdict(list)
    """memory -> nodes at which a run-time alloc makes it live"""
    frees: dict[int, list[tuple[Statement, int]]] = defaultdict(list)
    """memory -> (free, node at which it makes the memory dead)"""
    launch_allocs: dict[int, list[int]] = defaultdict(list)
    launch_frees: dict[int, list[tuple[Statement, int]]] = defaultdict(list)
    """memory -> issue nodes of every alloc / launch-ordered free (launch order)"""
    for s in program.statements:
        if s.op is Op.ALLOC:
            for memory in s.lifetime_memories:
                launch_allocs[memory].append(graph.node(StepKind.ISSUE, s.index))
            if not s.launch_only:
                allocs[s.memory].append(graph.completion(s) if s.stream is not None
                                        else graph.node(StepKind.ISSUE, s.index))
        elif s.op is Op.FREE:
            if s.launch_ordered:
                for memory in s.lifetime_memories:
                    launch_frees[memory].append((s, graph.node(StepKind.ISSUE, s.index)))
            if not s.launch_only:
                frees[s.memory].append((s, graph.node_of[_step_key(_access_steps(s)[1])]))
    reported: dict[tuple[int, FindingKind], int] = {}
    """(source statement, kind) -> the index of its finding; later instances add their memory."""
    elements: dict[int, dict[str, None]] = defaultdict(dict)
    instances: dict[int, set[int]] = defaultdict(set)
    """finding index -> the statements (loop instances of one source statement) it stands for"""

    shown: set[tuple[int, int, FindingKind]] = set()
    """(statement, memory, kind) already counted: its other frees add nothing."""

    def report(kind: FindingKind, s: Statement, memory: int, make) -> None:
        """Counts the instance s; builds the finding (`make()`, its witness a prefix of the
        order: linear in the program) only for the first instance of its source statement:
        a loop freeing a buffer under another stream's kernel has n^2 (use, free) pairs."""
        shown.add((s.index, memory, kind))
        key = (s.origin, kind)
        if key not in reported:
            reported[key] = len(findings)
            findings.append(make())
        elements[reported[key]][program.memories[memory].name] = None
        instances[reported[key]].add(s.index)

    rank = {node: k for k, node in enumerate(order.order)}
    latest: dict[tuple, list[int]] = {}
    for listed in frees.values():  # (of several frees a use may follow, the first to happen is named)
        listed.sort(key=lambda entry: rank.get(entry[1], len(rank)))

    on_chains: dict[tuple, tuple[dict[int, tuple[list[int], list[int]]], list[int]]] = {}

    def chains_of(nodes: list[int], table: tuple) -> tuple[dict[int, tuple[list[int], list[int]]], list[int]]:
        """`nodes` (the allocs or frees of one memory: `table` names them) by the first chain
        each is on: chain -> (positions, indices into `nodes`), in position order; and the
        indices of the nodes that never happen."""
        known = on_chains.get(table)
        if known is None:
            index: dict[int, tuple[list[int], list[int]]] = {}
            unplaced = []
            for k, node in enumerate(nodes):
                if node in order.position:
                    chain, at = order.position[node][0]
                    index.setdefault(chain, ([], []))[0].append(at)
                    index[chain][1].append(k)
                else:
                    unplaced.append(k)
            for chain, (positions, members) in index.items():
                paired = sorted(zip(positions, members))
                index[chain] = ([at for at, _ in paired], [k for _, k in paired])
            known = on_chains[table] = (index, unplaced)
        return known

    def latest_before(last: int, nodes: list[int], table: tuple) -> list[int]:
        """The latest nodes of `nodes` (the allocs of one memory: `table` names them) that come
        before last in every execution: none of them before another. Found once per last: on
        each chain, the last node its clock reaches (the ones before it on the chain are
        before it), then the latest of those."""
        tops = latest.get((last, table))
        if tops is None:
            clock = order.clocks[last]
            below = []
            for chain, (positions, members) in chains_of(nodes, table)[0].items():
                k = bisect_right(positions, clock[chain]) - 1
                if k >= 0 and nodes[members[k]] == last:
                    k -= 1
                if k >= 0:
                    below.append(nodes[members[k]])
            below.sort(key=rank.__getitem__, reverse=True)
            tops = []
            for g in below:  # (later ones first: a node before a kept one is not kept)
                if not any(order.before(graph.steps[g], graph.steps[t]) for t in tops):
                    tops.append(g)
            latest[(last, table)] = tops
        return tops

    def forced_between(first: int, last: int, nodes: list[int], table: tuple) -> bool:
        """Whether some node of `nodes` comes between first and last in every execution. Only
        the latest of those before last matter (one after first is before one of them): a
        loop that frees a buffer each iteration asked about every alloc for each (use, free)
        pair."""
        return any(order.before(graph.steps[first], graph.steps[t]) for t in latest_before(last, nodes, table))

    def unforced(entries: list, last: int, nodes: list[int], table: tuple, after: int | None = None) -> list:
        """The frees of `entries` ((free, node), in order) that no alloc of `nodes` before last
        surely follows, nor surely come after the node `after` (a use's end: such a free
        takes effect once the use is over): each free sits on a chain (its first), and one
        at a position that a latest alloc's clock reaches on that chain is before that alloc;
        the ones after `after` are the chain's last ones, found by bisection. The others are
        left for `forced_between` to decide, so that a use in a loop reads its own
        iteration's frees, not every earlier one nor every later one."""
        tops = latest_before(last, nodes, table)
        if len(entries) < 8 or not tops and after is None:
            return entries
        key = ("frees", *table)
        index, unplaced = on_chains.get(key) or chains_of([node for _, node in entries], key)
        kept = list(unplaced)  # (frees that never happen: the loop skips them itself)
        after_step = graph.steps[after] if after is not None else None
        for chain, (positions, members) in index.items():
            lo = bisect_right(positions, max(order.clocks[t][chain] for t in tops)) if tops else 0
            hi = len(members) if after_step is None else bisect_left(
                range(len(members)), True, lo=lo,
                key=lambda k: order.before(after_step, graph.steps[entries[members[k]][1]]))
            kept += members[lo:hi]
        return [entries[k] for k in sorted(kept)]

    def freed_again(s: Statement) -> None:
        """A tensor's free issued after another free of its lifetime: a double free, whoever
        had the block in between (a tensor free is no access, so the loop below skips it)."""
        issue = graph.node(StepKind.ISSUE, s.index)
        if issue not in order.clocks or s.memory is None:
            return
        mem = program.memories[s.memory]
        for f in s.tensor_frees:
            free, free_issue = program.statements[f], graph.node(StepKind.ISSUE, f)
            if free_issue in order.clocks and not order.before(graph.steps[issue], graph.steps[free_issue]):
                report(FindingKind.USE_AFTER_FREE, s, s.memory, lambda: messages.use_after_free(
                    program, s, free, mem, 1, order.prefix([issue, free_issue], last=issue, early=free_issue),
                    launch_order=True))
                return

    live: dict[int, list[int]] = {}
    """memory -> the nodes of its run-time allocs that happen"""
    for s in program.statements:
        if s.op is Op.FREE and s.launch_only and s.tensor_frees:
            freed_again(s)
        for access in s.accesses:
            memory = access.memory
            if not any(memory in table for table in (allocs, frees, launch_frees, launch_allocs)):
                continue
            mem = program.memories[memory]
            start = graph.node_of[_step_key(_access_steps(s)[0])]
            if start in order.clocks:  # run order: the access starts on dead bytes
                start_step = graph.steps[start]
                live_allocs = live.get(memory)
                if live_allocs is None:
                    live_allocs = live[memory] = [g for g in allocs.get(memory, ()) if g in order.clocks]
                # Before alloc: no alloc completion is forced before the access starts.
                if memory in allocs and not latest_before(start, live_allocs, ("run", memory)):
                    report(FindingKind.USE_BEFORE_ALLOC, s, memory, lambda: messages.use_before_alloc(
                        program, s, mem, 1, order.prefix([start], last=start)))
                end = graph.node_of[_step_key(_access_steps(s)[1])]
                for free, free_end in unforced(frees.get(memory, []), start, live_allocs, ("run", memory),
                                               end if end in order.clocks else None):
                    if (s.index, memory, FindingKind.USE_AFTER_FREE) in shown:
                        break
                    if free.index == s.index or free_end not in order.clocks:
                        continue
                    free_step = graph.steps[free_end]
                    if not (order.before(start_step, free_step)
                            or forced_between(free_end, start, live_allocs, ("run", memory))):
                        report(FindingKind.USE_AFTER_FREE, s, memory, lambda: messages.use_after_free(
                            program, s, free, mem, 1, order.prefix([start, free_end], last=start, early=free_end)))
                    elif not order.before(free_step, start_step) and (
                            end not in order.clocks or not order.before(graph.steps[end], free_step)):
                        # the free can take effect while the access runs
                        report(FindingKind.USE_AFTER_FREE, s, memory, lambda: messages.use_after_free(
                            program, s, free, mem, 1, order.prefix([start, free_end], last=free_end),
                            while_running=True))
            # Launch order: work enqueued after a free uses freed memory, whenever it runs
            # (and even if it never starts). A host statement is not enqueued work.
            issue = graph.node(StepKind.ISSUE, s.index)
            if issue not in order.clocks:
                continue
            for free, free_issue in unforced(launch_frees.get(memory, []), issue, launch_allocs.get(memory, []),
                                             ("launch", memory), issue) if start in order.clocks else ():
                # (a use whenever it runs: work that never starts uses nothing)
                if (s.index, memory, FindingKind.USE_AFTER_FREE) in shown:
                    break
                if free.index == s.index or free_issue not in order.clocks:
                    continue
                if not (s.is_task or free.launch_only):
                    continue  # a host statement runs when issued: run order only
                if order.before(graph.steps[issue], graph.steps[free_issue]):
                    continue
                if forced_between(free_issue, issue, launch_allocs.get(memory, []), ("launch", memory)):
                    continue
                report(FindingKind.USE_AFTER_FREE, s, memory, lambda: messages.use_after_free(
                    program, s, free, mem, 1, order.prefix([issue, free_issue], last=issue, early=free_issue,
                                                           then=start), launch_order=True))
            # Launch order: a tensor used after its own free is issued (whoever has its bytes now:
            # another tensor's alloc of the block in between does not make it live again).
            for f in s.tensor_frees if start in order.clocks else ():
                if (s.index, memory, FindingKind.USE_AFTER_FREE) in shown:
                    break
                free = program.statements[f]
                free_issue = graph.node(StepKind.ISSUE, f)
                if (memory in free.lifetime_memories and free_issue in order.clocks
                        and not order.before(graph.steps[issue], graph.steps[free_issue])):
                    report(FindingKind.USE_AFTER_FREE, s, memory, lambda: messages.use_after_free(
                        program, s, free, mem, 1, order.prefix([issue, free_issue], last=issue, early=free_issue,
                                                               then=start), launch_order=True))
            # Launch order: a tensor used before its own alloc is issued (whoever had its bytes).
            block_allocs = [graph.node(StepKind.ISSUE, a) for a in s.tensor_allocs] if mem.owners else []
            if (block_allocs and memory not in allocs
                    and not all(order.before(graph.steps[g], graph.steps[issue]) for g in block_allocs
                                if g in order.clocks)):
                report(FindingKind.USE_BEFORE_ALLOC, s, memory, lambda: messages.use_before_alloc(
                    program, s, mem, 1, order.prefix([issue], last=issue)))
    for k, names in elements.items():
        if len(names) > 1:
            findings[k] = replace(findings[k], elements=tuple(names))
    for k, statements in instances.items():
        if len(statements) > 1:  # (counted as the solver and the exhaustive search count them)
            findings[k] = replace(findings[k], instances=len(statements))


def _deadlock(order: HappensBefore) -> Finding | None:
    program = order.program
    graph = order.graph
    if len(order.order) == len(graph.steps):
        return None
    happened = set(order.order)
    stuck: dict[int, str] = {}

    def describe(statement: Statement) -> str:
        return f"{program.describe(statement)} (line {statement.span.line})"

    for node, step in enumerate(graph.steps):
        if node in happened:
            continue
        missing = [p for p in order.predecessors[node] if p not in happened]
        if not missing and node not in graph.never:
            continue
        statement = program.statements[step.statement]
        if step.kind is StepKind.END and statement.group is not None:
            # A member's end: if it started, it is stuck on the others.
            if graph.node(StepKind.START, statement.index) in happened:
                group = program.groups[statement.group]
                comm = program.comms[group.comm].name
                if not group.complete:
                    reason = collectives.missing_member(program, statement, group.position)
                else:
                    absent = [program.statements[m] for m in group.members
                              if graph.node(StepKind.START, m) not in happened]
                    reason = (f"its collective group on comm `{comm}` waits for "
                              + ", ".join(describe(m) for m in absent) + " to start")
                stuck.setdefault(statement.index, reason)
            continue
        if node in graph.never and step.kind is StepKind.START:  # (a member that starts with its group)
            group = program.groups[statement.group]
            comm = program.comms[group.comm].name
            stuck.setdefault(statement.index, (
                collectives.missing_member(program, statement, group.position) if not group.complete
                else f"its collective group on comm `{comm}` starts together, and a member waits in a "
                     "hardware queue for another member to begin"))
            continue
        # Report only the frontier: nodes all of whose missing predecessors are on other statements.
        if step.statement in stuck or any(graph.steps[p].statement == step.statement for p in missing):
            continue
        waited = {program.statements[graph.steps[p].statement] for p in missing}
        stuck[step.statement] = "; ".join(sorted(f"waits for {describe(s)}" for s in waited))
    # A member whose start waits for its own end (its group starts together, and another
    # member is held behind it in a hardware queue) has no step on the frontier above: each
    # waits for another of its own. It is stuck all the same, on the other members.
    waiting_on: dict[int, set[int]] = {}
    for node, step in enumerate(graph.steps):
        if node not in happened and step.statement not in stuck:
            waiting_on.setdefault(step.statement, set()).update(
                graph.steps[p].statement for p in order.predecessors[node]
                if p not in happened and graph.steps[p].statement != step.statement)
    for index, others in waiting_on.items():
        statement = program.statements[index]
        waits = "; ".join(sorted(f"waits for {describe(program.statements[i])}" for i in others))
        if statement.group is not None:
            comm = program.comms[program.groups[statement.group].comm].name
            waits = f"its collective group on comm `{comm}` starts together" + (f"; {waits}" if waits else "")
        stuck[index] = waits or "waits for a step of its own that cannot happen"
    first = [i for i in _wait_chain(order, happened) if i in stuck]
    chosen = set(first)
    rest = [i for i in sorted(stuck) if i not in chosen]
    items = tuple(Stuck(statement, stuck[statement]) for statement in first + rest)
    return messages.deadlock(program, items, Witness(tuple(graph.steps[n] for n in order.order)))


def _wait_chain(order: HappensBefore, happened: set[int]) -> list[int]:
    """The statements of one wait-for cycle among the steps that never happen (else of the
    chain that ends at a step that can never happen), so that a report of hundreds of stuck
    statements can name the few that hold the rest. Each walk follows one missing
    predecessor per step; a step that an earlier walk went through is not walked again."""
    graph = order.graph
    pending = [n for n in range(len(graph.steps)) if n not in happened]
    walked: set[int] = set()
    first_path: list[int] = []
    for start in pending:
        if start in walked:
            continue
        position: dict[int, int] = {}
        path: list[int] = []
        node = start
        while node is not None and node not in position and node not in walked:
            position[node] = len(path)
            path.append(node)
            missing = [q for q in order.predecessors[node] if q not in happened]
            node = max(missing) if missing else None
        walked.update(path)
        if node is not None and node in position:  # a cycle
            return list(dict.fromkeys(graph.steps[n].statement for n in reversed(path[position[node]:])))
        if not first_path:
            first_path = path
    return list(dict.fromkeys(graph.steps[n].statement for n in reversed(first_path[-8:])))
