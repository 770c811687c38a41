"""The must-happen-before order: what every execution does in the same order, found without Z3.

An edge x -> y says: every execution that takes y took x strictly before it. The edges are the
`Need` items of `rules.py`: the unconditional parts of the step conditions (program order,
enqueue, stream order within a thread, host syncs on the thread's own tasks, pageable copy
returns, end after start) and what the order itself proves (docs/encoding.md, "Pruning"):

* a task another thread enqueued before x in every execution is waited for like one of x's
  own thread (stream order, hardware queues, legacy stream, syncs);
* a snapshot wait whose latest earlier record is the same in every execution waits for it,
  and so does one whose every other candidate record is on the stream of a record surely
  enqueued before it (`Rules._behind_on_its_stream`);
* an await that follows c other awaits of its notify needs c + 1 notifies before it; on a
  chain of notifies, that is a fixed one (and the first record, for a flag wait; a flag wait
  after c rounds of a wait and a reset of its flag on its own chain needs c + 1 records);
* a step with an impossible condition, on a cycle of edges, or after such a step, never
  happens.

Facts feed each other, so the order is a fixpoint: rounds of a topological pass that keeps,
per step, a vector clock over the chains of `layout.py` (for each chain, the latest step of it
known to precede), and adds the edges the rules find. A round learns edges from steps it has
already passed at once, and the rest in the next round. Every edge is a fact of every
execution, so the order is sound at every round; the rounds only make it stronger.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from checker.smt.layout import Layout
from checker.smt.rules import BIG, Need, Never, Rules, SetState, TooLarge

MAX_ROUNDS = 12

MAX_CLOCK_ENTRIES = 50_000_000
"""Steps x chains of the clocks, of which a round keeps two sets (its own and the last
round's): 2 threads of 10,000 kernels on 20,000 streams (60,000 steps on 20,002 chains) took
94 s, then ran out of memory. Beyond this the program is refused (its random executions are run instead)."""


class TooWide(TooLarge):
    """Too many steps on too many chains for the clocks of the order."""

    help = "use fewer streams (or threads), or split the spec"

    def __init__(self, steps: int, chains: int):
        Exception.__init__(self, steps, chains)  # the arguments, so that it pickles out of a worker
        self.steps, self.chains = steps, chains
        self.step, self.count = 0, steps * chains

    def __str__(self) -> str:
        return (f"it is too wide to order: {self.steps:,} steps on {self.chains:,} threads and "
                f"streams (at most {MAX_CLOCK_ENTRIES:,} of the two multiplied)")


@dataclass(slots=True)
class MustOrder:
    layout: Layout
    clocks: list
    """Per step: for each chain, the index of the latest step of it that precedes the step
    or is the step itself (-1: none)."""
    impossible: frozenset[int]
    """Steps that no execution takes."""
    rounds: int = 0

    def prec(self, first: int, second: int) -> bool:
        """Every execution that takes `second` took `first` strictly before it."""
        if first == second:
            return False
        if second in self.impossible:
            return True
        chain, index = self.layout.on_chain[first][0]
        return self.clocks[second][chain] >= index

    precedes = prec

    def frontier(self, step: int, chain: int) -> int:
        if step in self.impossible:
            return BIG
        return self.clocks[step][chain]


class _Knowing:
    """The oracle while the order is computed: this round's clocks for the steps passed,
    the last round's for the others (both sound)."""

    def __init__(self, layout: Layout):
        self.layout = layout
        self.clocks: list = [None] * len(layout.steps)
        self.previous: list = [None] * len(layout.steps)
        self.impossible: set[int] = set()

    def _clock(self, step: int):
        clock = self.clocks[step]
        return self.previous[step] if clock is None else clock

    def prec(self, first: int, second: int) -> bool:
        if first == second:
            return False
        if second in self.impossible:
            return True
        clock = self._clock(second)
        if clock is None:
            return False
        chain, index = self.layout.on_chain[first][0]
        return clock[chain] >= index

    def frontier(self, step: int, chain: int) -> int:
        if step in self.impossible:
            return BIG
        clock = self._clock(step)
        return -1 if clock is None else clock[chain]


def compute(layout: Layout, max_rounds: int = MAX_ROUNDS) -> MustOrder:
    count = len(layout.steps)
    chains = len(layout.chains)
    if count * chains > MAX_CLOCK_ENTRIES:
        raise TooWide(count, chains)
    knowing = _Knowing(layout)
    rules = Rules(layout, knowing, edges_only=True)
    preds: list[set[int]] = [set() for _ in range(count)]
    on_chain = layout.on_chain
    empty = [-1] * chains
    quiet = 0
    rounds = 0
    for rounds in range(1, max_rounds + 1):
        succs: list[list[int]] = [[] for _ in range(count)]
        indegree = [0] * count
        for step in range(count):
            for p in preds[step]:
                succs[p].append(step)
            indegree[step] = len(preds[step])
        queue = deque(step for step in range(count) if indegree[step] == 0)
        clocks: list = [None] * count
        knowing.clocks = clocks
        impossible = set(knowing.impossible)
        knowing.impossible = impossible
        added = 0
        while queue:
            step = queue.popleft()
            clock = list(empty)
            dead = step in impossible
            for p in preds[step]:
                clock = list(map(max, clock, clocks[p]))
                if p in impossible:
                    dead = True
            for chain, index in on_chain[step]:
                if clock[chain] < index:
                    clock[chain] = index
            clocks[step] = clock
            again = True
            while again:
                again = False
                for item in rules.items(step):
                    if isinstance(item, Never) or (isinstance(item, SetState) and not item.terms):
                        dead = True
                    elif isinstance(item, Need):
                        p = item.step
                        if p in preds[step] or p == step:
                            if p == step:
                                dead = True
                            continue
                        preds[step].add(p)
                        added += 1
                        if clocks[p] is not None:
                            clock = list(map(max, clock, clocks[p]))
                            clocks[step] = clock
                            if p in impossible:
                                dead = True
                            again = True
            if dead:
                impossible.add(step)
            for s in succs[step]:
                indegree[s] -= 1
                if indegree[s] == 0:
                    queue.append(s)
        for step in range(count):
            if clocks[step] is None:  # on a cycle of edges, or after one
                impossible.add(step)
                clocks[step] = knowing.previous[step] or list(empty)
        knowing.previous = clocks
        quiet = quiet + 1 if added == 0 else 0
        if quiet >= 2:
            break
    return MustOrder(layout, knowing.previous, frozenset(knowing.impossible), rounds)


def must_order(source) -> MustOrder:
    """The must-happen-before order of an `Encoding` (built with it) or of a `Layout`."""
    order = getattr(source, "order", None)
    if isinstance(order, MustOrder):
        return order
    layout = source if isinstance(source, Layout) else Layout(source.program)
    return compute(layout)
