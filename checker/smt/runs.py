"""Concrete runs of the step rules: executions found without search, confirmed by Z3.

Most questions about a program whose threads share streams and events are answered "yes" by
many of its executions: two kernels race in most interleavings, a lost notify deadlocks most
of them. Searching for each such execution with Z3 costs a query each, and on programs of a
few hundred steps whose order is mostly open, Z3 needs seconds to find even one.

A run takes, one at a time, a step whose condition holds at the end of the prefix so far
(the items of `rules.py`, read on concrete positions: a `Need` happened, a `NeedIf` holds
unless u was enqueued before x and its step has not happened, the bound record is the
latest candidate enqueued before the wait, a set state is read off the positions), chosen at
random but holding intervals open (starts before ends), until no step can move. Each step
taken is enabled at its place, so the run is an execution; before its answers are used, the
executor's machine replays it (`Analysis.admits`), and a run that got stuck is explained by
the machine in the state it ends in. Runs only ever answer "yes" (a race, a dead use, a
deadlock shown by a concrete execution); every "no" is still proved by Z3.

A run can be told which way to make some choices (`run`'s `after`), and it can be read for
the choices by which a step relied on another (`relied`) or waits for one (`waits_for`): a
run that missed a race is repaired that way (`Analysis._repair`).
"""

from __future__ import annotations

import random
import time
from itertools import permutations
from math import factorial
from typing import NamedTuple, Sequence

from checker.smt.encode import Encoding
from checker.smt.rules import Bind, Meet, Need, NeedIf, SetState
from checker.witness import StepKind

RECHECK = -1
"""`Runner.blocker`: the step waits for a set state, which any step taken can change."""
NEVER = -2
"""`Runner.blocker`: the step never happens (no step has this id)."""

READERS_FIRST = True
"""A run aimed at a pair takes a step that reads a set state (an await, a flag wait), when one
may be taken, before any other: a notify left set is consumed before a second one is lost on
it, so fewer awaits stay stuck and the run reaches further."""
SETTERS_FIRST = True
"""A run aimed at a pair enqueues a task that sets a flag or notify (a `record` of a flag
event, a `notify`) before any other task it may enqueue: enqueued behind a wait for that
flag on the same stream, it would never run."""
AVOID_STUCK = True
"""A run aimed at a pair enqueues nothing on a stream whose pending task waits for a set state
while it can do anything else: a task enqueued behind an await that no notify may ever reach
is stuck with it."""

PRIORITY_ORDERS = 6
"""Runs that give the threads a fixed priority (`thread_orders`, `Runner.prioritized`), at
most: every order of up to three threads, else each thread first once."""

STICKINESS = (None, 0.02, 0.1, 0.3)
"""`covering_runs`: how likely an attempt switches threads at each statement it enqueues (None:
it chooses among every thread's statements, as the random runs do)."""
EAGER_CHOICES = (0.05, 0.3)
"""`covering_runs`: the eagerness of an attempt (`Runner.run`'s `eager`), drawn from these."""
NEWEST = 0.5
"""`covering_runs` starts an attempt from the k-th newest run kept with probability about
e^(-k/2) (k = 0, 1, ...): the newest went furthest. Drawn uniformly from every kept run
instead, rand3x100-3 took 415-2,502 attempts to take every step (four seeds of the draws),
against 49-1,538 (eight seeds)."""
STALE_ATTEMPTS = 700
"""`covering_runs` stops after this many attempts in a row that took no new step. The longest
such gap before a step was taken on rand3x100-3 was 29-645 attempts (eight seeds of the draws);
where some steps are never taken, the gap before stopping costs 3-4 s on programs of 300
statements."""
COVERING_WORK = 1_500_000
"""`covering_runs` stops after its attempts took this many steps in all (a few seconds)."""

CLOSING = (StepKind.END, StepKind.RETURN)
"""Steps that end an access interval: a run takes them late, so that intervals overlap."""


class Compiled(NamedTuple):
    """The items of one step in the plain form a run reads many times (`Runner._compiled`)."""

    never: bool
    needs: tuple
    """The `Need` steps."""
    windows: tuple
    """(step, u's issue, x's issue) per `NeedIf`."""
    bindings: tuple
    """(w's issue, ((record's issue, its completion), ...)) per `Bind`."""
    states: tuple
    """The terms of each `SetState`."""
    setters: frozenset
    """The setter steps of those terms, and the issues of the calls of a `Meet`'s classes:
    only they can make a failing set state or meeting hold."""
    items: tuple
    """Every item in its order (`Runner._plain`), for reading why a step waits."""
    meets: tuple = ()
    """The `Meet` items, as `Runner._plain` gives them."""


class Runner:
    def __init__(self, encoding: Encoding):
        self.encoding = encoding
        self.layout = encoding.layout
        self.program = encoding.program
        layout = self.layout
        self.issue_of_statement = [layout.issue(s) for s in self.program.statements]
        self.thread_chains = [layout.chains[c] for c in layout.thread_chain]
        self.starts_task = {}
        """issue step -> the first step of the task it enqueues."""
        for s in self.program.statements:
            if s.is_task:
                self.starts_task[layout.issue(s)] = layout.first_step(s)
        self._compiled_items: dict[int, Compiled] = {}
        self._partners: dict[int, tuple] = {}
        self._setters: frozenset[int] | None = None
        self.end_of_start = {}
        for s in self.program.statements:
            if s.running:
                self.end_of_start[layout.step(StepKind.START, s.index)] = layout.completion(s)

    def _compiled(self, step: int) -> Compiled:
        """The items of `step`, compiled once."""
        compiled = self._compiled_items.get(step)
        if compiled is None:
            plain = tuple(self._plain(item) for item in self.encoding.items(step))
            compiled = self._compiled_items[step] = Compiled(
                any(item[0] == "never" for item in plain),
                tuple(item[1] for item in plain if item[0] == "need"),
                tuple(item[1:] for item in plain if item[0] == "window"),
                tuple(item[1:] for item in plain if item[0] == "bind"),
                tuple(item[1] for item in plain if item[0] == "state"),
                frozenset([*(term[0] for item in plain if item[0] == "state" for term in item[1]),
                           *(issue for item in plain if item[0] == "meet"
                             for issues, _ in item[3] for issue in issues)]),
                plain,
                tuple(item for item in plain if item[0] == "meet"))
        return compiled

    def _plain(self, item) -> tuple:
        """One item as ("need", step), ("window", step, u's issue, x's issue), ("bind", w's
        issue, candidates as in `Compiled.bindings`), ("state", terms) or ("never",)."""
        issue, statements = self.issue_of_statement, self.program.statements
        if isinstance(item, Need):
            return ("need", item.step)
        if isinstance(item, NeedIf):
            return ("window", item.step, issue[item.u], issue[item.x])
        if isinstance(item, Bind):
            return ("bind", issue[item.w], tuple((issue[r], self.layout.completion(statements[r]))
                                                 for r, _ in item.candidates))
        if isinstance(item, SetState):
            return ("state", item.terms)
        if isinstance(item, Meet):
            layout = self.layout
            return ("meet", issue[item.call], tuple(issue[c] for c in layout.class_of[item.call]), tuple(
                (tuple(issue[c] for c in layout.class_of[candidates[0][0]]),
                 tuple((issue[d], self._plain_items(items)) for d, items in candidates))
                for candidates in item.partners))
        return ("never",)

    def _plain_items(self, items: tuple) -> tuple:
        """A group partner's items in plain form, made once for every call that meets it
        (`Rules.meet_items` hands each call the same tuple)."""
        found = self._partners.get(id(items))
        if found is None or found[0] is not items:
            found = self._partners[id(items)] = (items, tuple(self._plain(i) for i in items))
        return found[1]

    @staticmethod
    def _position(issue: int, issues: tuple, position: dict[int, int]) -> int:
        """How many calls of a class (their `issues`) were enqueued before the call issued at
        `issue`, in the prefix whose positions are given."""
        at = position[issue]
        return sum(1 for other in issues if position.get(other, at) < at)

    @staticmethod
    def _kth(issues: tuple, k: int, position: dict[int, int]) -> int | None:
        """The issue of the call a class enqueued k-th in the prefix (None: fewer so far)."""
        enqueued = sorted((position[issue], issue) for issue in issues if issue in position)
        return enqueued[k][1] if k < len(enqueued) else None

    def _met(self, item: tuple, position: dict[int, int]):
        """What a `Meet` that held relied on, as `relied` yields it: the calls of each class
        enqueued before the call and before its partner (a subsequence keeps their positions
        only with all of them), each partner's issue, and what its items relied on."""
        _, call, own, partners = item
        at = position[call]
        yield from ((issue, None) for issue in own if position.get(issue, at) < at)
        k = self._position(call, own, position)
        for issues, candidates in partners:
            d = self._kth(issues, k, position)
            items = next((items for other, items in candidates if other == d), None)
            if items is None:
                yield None, None
                continue
            yield d, None
            yield from ((issue, None) for issue in issues if position.get(issue, position[d]) < position[d])
            for sub in items:
                if sub[0] == "need":
                    yield sub[1], None
                else:
                    _, need, u, x = sub
                    if u in position and position[u] < position.get(x, -1):
                        yield need, (x, u)

    def _meet_blocker(self, item: tuple, position: dict[int, int]) -> int | None:
        """`blocker` of one `Meet` (its call enqueued): None when every meeting class has
        enqueued a call at the call's position whose items hold; else a step to take first,
        RECHECK while a class may still enqueue its call there, NEVER when none can."""
        _, call, own, partners = item
        if call not in position:
            return call
        k = self._position(call, own, position)
        for issues, candidates in partners:
            d = self._kth(issues, k, position)
            items = next((items for other, items in candidates if other == d), None) if d is not None else None
            if items is None:
                enqueued = sum(1 for other in issues if other in position)
                return RECHECK if enqueued <= k < len(issues) else NEVER
            for sub in items:
                if sub[0] == "need":
                    if sub[1] not in position:
                        return sub[1]
                else:  # a window
                    _, need, u, x = sub
                    at = position.get(u)
                    if at is not None and need not in position and at < position.get(x, -1):
                        return need
        return None

    def blocker(self, step: int, position: dict[int, int]) -> int | None:
        """None when `step` may be taken next after the prefix whose positions are given;
        else a step that must be taken first (NEVER: no step helps), or RECHECK when only a
        set state fails (it can hold again later). Every requirement but a set state only
        ever waits for one step that has not happened, so a run skips `step` until then."""
        never, needs, windows, bindings, states, _, _, meets = self._compiled(step)
        if never:
            return NEVER
        for need in needs:
            if need not in position:
                return need
        for need, u, x in windows:
            at = position.get(u)
            if at is not None and need not in position and at < position.get(x, -1):
                return need
        for w, candidates in bindings:
            bound = self._bound(candidates, position.get(w, -1), position)
            if bound is not None and bound[1] not in position:
                return bound[1]
        for terms in states:
            if not any(self._term(term, position) for term in terms):
                return RECHECK
        for meet in meets:
            found = self._meet_blocker(meet, position)
            if found is not None:
                return found
        return None

    @staticmethod
    def _bound(candidates: tuple, w_at: int, position: dict[int, int]) -> tuple[int, int] | None:
        """The record a wait enqueued at `w_at` is bound to: (its issue, its completion) for
        the latest candidate enqueued before the wait, None if none was."""
        best, bound = -1, None
        for candidate in candidates:
            at = position.get(candidate[0], -1)
            if best < at < w_at:
                best, bound = at, candidate
        return bound

    def frontier(self) -> Frontier:
        """An empty `Frontier` over this runner's rules."""
        return Frontier(self)

    def _leads_to(self, step: int, targets: list[int]) -> bool:
        """Whether `step` is one of `targets` or must happen before one of them."""
        prec = self.encoding.order.prec
        return any(step == t or prec(step, t) for t in targets)

    def needs(self, order: list[int]) -> dict[int, int]:
        """Per step of the execution `order`: the steps it relied on, transitively, itself
        included, as a bit set (bit i: step i). What a step relied on is read off its items
        at its place (`relied`): each `Need`, a `NeedIf` whose task was enqueued before x,
        the record the wait was bound to, the setter that left its flag or notify set.

        Any subsequence of `order` that contains, with each step, every step it relied on,
        is an execution too (the prediction of `Analysis._predict`): each `Need` is still
        before it, a bound record is still the latest candidate enqueued before the wait
        (a later one would have been the latest in `order` too), and a setter still has no
        clearer after it (the subsequence keeps `order`'s order). So two accesses whose
        starts rely on neither's end run at once in some execution, also when they never
        overlap in `order`. The encoding still checks each such execution (`admits`)."""
        position = {step: k for k, step in enumerate(order)}
        needs: dict[int, int] = {}
        for here, step in enumerate(order):
            mask = 1 << step
            for relied, _ in self.relied(step, here, order, position):
                # None: not a step of a run (it cannot be read); -1 relies on everything.
                mask |= -1 if relied is None else needs[relied]
            needs[step] = mask
        return needs

    def relied(self, step: int, here: int, order: list[int], position: dict[int, int]):
        """The steps `step`, taken at position `here` of `order`, relied on directly, each
        with what would have spared it: (x, y), "had x come before y" (None: every
        execution relies on it). A `NeedIf` is spared by enqueueing x before u, a bound
        record by enqueueing the wait before it or another record between (`_rebind`), a
        setter by taking the step before it.
        None for the step relied on: the set state cannot be read off `order`."""
        for item in self._compiled(step).items:
            kind = item[0]
            if kind == "need":
                yield item[1], None
            elif kind == "window":
                _, need, u, x = item
                at = position.get(u)
                if at is not None and at < position[x]:
                    yield need, (x, u)
            elif kind == "bind":
                _, w, candidates = item
                bound = self._bound(candidates, position[w], position)
                if bound is not None:
                    yield bound[1], self._rebind(w, bound[0], candidates, position)
            elif kind == "state":
                setter = max((position[term[0]] for term in item[1] if self._term_at(term, position, here)),
                             default=None)
                if setter is None:
                    yield None, None
                else:
                    yield order[setter], (step, order[setter])
            elif kind == "meet":
                yield from self._met(item, position)

    def _rebind(self, w: int, record: int, candidates: tuple, position: dict[int, int]) -> tuple[int, int] | None:
        """The choice that would have bound the wait issued at `w` to another record than the
        one issued at `record`: (w, record), enqueue the wait first; or, when every execution
        enqueues that record first (program order), a record of another thread enqueued in
        between: (r, w) for the nearest r enqueued after the wait (or not at all), else
        (record, r) for the nearest r enqueued before the bound one. None if there is none."""
        prec = self.encoding.order.prec
        if not prec(record, w):
            return (w, record)
        later, earlier = [], []
        for issue, _ in candidates:
            if issue == record or prec(w, issue) or prec(issue, record):
                continue
            at = position.get(issue, len(position))
            if at > position.get(w, len(position)) or issue not in position:
                later.append((at, issue))
            elif at < position[record]:
                earlier.append((at, issue))
        if later:
            return (min(later)[1], w)
        if earlier:
            return (record, max(earlier)[1])
        return None

    def waits_for(self, step: int, position: dict[int, int]):
        """Why `step` cannot be taken after the prefix whose positions are given: per failing
        item, the step it waits for (None: none) and the choice that would have spared it,
        as in `relied` (None: none). A set state that fails waits for each setter not taken
        yet, and would have held had the step come before the clearer after a setter."""
        for item in self._compiled(step).items:
            kind = item[0]
            if kind == "need":
                if item[1] not in position:
                    yield item[1], None
            elif kind == "window":
                _, need, u, x = item
                at = position.get(u)
                if at is not None and need not in position and at < position.get(x, -1):
                    yield need, (x, u)
            elif kind == "bind":
                _, w, candidates = item
                bound = self._bound(candidates, position.get(w, -1), position)
                if bound is not None and bound[1] not in position:
                    yield bound[1], self._rebind(w, bound[0], candidates, position)
            elif kind == "state":
                if any(self._term(term, position) for term in item[1]):
                    continue
                for setter, _, clearers in item[1]:
                    at = position.get(setter)
                    if at is None:
                        yield setter, None
                        continue
                    for c, _ in clearers:
                        if position.get(c, -1) > at:
                            yield None, (step, c)
            elif kind == "meet":
                found = self._meet_blocker(item, position)
                if found is not None:
                    yield (found if found >= 0 else None), None

    @staticmethod
    def _term_at(term, position: dict[int, int], here: int) -> bool:
        """Whether the set state `term` held just before position `here`."""
        setter, _, clearers = term
        at = position.get(setter, here)
        return at < here and not any(at < position.get(c, -1) < here for c, _ in clearers)

    @staticmethod
    def _term(term, position: dict[int, int]) -> bool:
        setter, _, clearers = term
        at = position.get(setter)
        if at is None:
            return False
        return not any(position.get(c, -1) > at for c, _ in clearers)

    def _setter_statements(self) -> frozenset[int]:
        """The statements whose completion sets some step's set state."""
        if self._setters is None:
            steps = self.layout.steps
            self._setters = frozenset(steps[term[0]].statement for step in range(len(steps))
                                      for terms in self._compiled(step).states for term in terms)
        return self._setters

    def _choose(self, rng: random.Random, ready: list[int], position: dict[int, int], held: frozenset,
                starts: list[int], eager: float, after: dict[int, set[int]] | None,
                frontier: Frontier) -> int:
        """The next step of a run (`run`), at random within its preferences."""
        steps = self.layout.steps
        if after:
            ready = [y for y in ready if all(x in position for x in after.get(y, ()))] or ready
        if READERS_FIRST and starts:
            ready = [y for y in ready if self._compiled(y).states] or ready
        if SETTERS_FIRST and starts:
            setters = self._setter_statements()
            ready = [y for y in ready if steps[y].kind is StepKind.ISSUE and steps[y].statement in setters] or ready
        if AVOID_STUCK and starts and frontier.unset:
            statements = self.program.statements
            stuck = {statements[steps[y].statement].stream for y in frontier.unset} - {None}
            ready = [y for y in ready if steps[y].kind is not StepKind.ISSUE
                     or statements[steps[y].statement].stream not in stuck] or ready
        waiting = [t for t in starts if t not in position]
        if waiting:
            ready = [y for y in ready if y not in held] or ready
            ready = ([y for y in ready if self._leads_to(y, waiting)]
                     or [y for y in ready if steps[y].kind is not StepKind.ISSUE] or ready)
        return self._open_or_close(rng, ready, eager)

    def _open_or_close(self, rng: random.Random, ready: list[int], eager: float) -> int:
        """One of `ready` at random, a step that ends an interval only with probability
        `eager` while another could move: intervals are held open so that they overlap."""
        steps = self.layout.steps
        opening = [y for y in ready if steps[y].kind not in CLOSING]
        closing = [y for y in ready if steps[y].kind in CLOSING]
        if opening and (not closing or rng.random() >= eager):
            return rng.choice(opening)
        return rng.choice(closing)

    def _stick(self, rng: random.Random, ready: list[int], eager: float, current: int) -> int:
        """The next step of a run that sticks to thread `current` (`run`'s `stick`): as often
        as not a step of a task already enqueued (intervals held open as `_choose` holds
        them), else a statement of `current`, or of any thread when `current` cannot move."""
        steps, statements = self.layout.steps, self.program.statements
        issues = [y for y in ready if steps[y].kind is StepKind.ISSUE]
        if not issues or (len(issues) < len(ready) and rng.random() < 0.5):
            return self._open_or_close(rng, [y for y in ready if steps[y].kind is not StepKind.ISSUE], eager)
        own = [y for y in issues if statements[steps[y].statement].thread == current]
        return rng.choice(own or issues)

    def prioritized(self, threads: tuple[int, ...]) -> tuple[list[int], bool]:
        """A run that always takes a step of the first thread of `threads` that can move
        (its own steps and its tasks' steps, in program order), else of the next: threads
        that share streams, events and notifies get stuck early when they interleave at
        random (an await takes the notify another thread's await needed, a task is enqueued
        behind a stuck one), and a thread that runs ahead reaches statements no random run
        does (three threads of 100 random statements: 52 statements started in six random
        runs, 246 in the six orders of the threads)."""
        priority = {thread: k for k, thread in enumerate(threads)}
        statements, steps = self.program.statements, self.layout.steps
        owner = [priority.get(statements[step.statement].thread, len(threads)) for step in steps]
        ranked = sorted(range(len(steps)), key=lambda i: (owner[i], i))
        return self.run(0, 0.0, guide={step: k for k, step in enumerate(ranked)})

    def run(self, seed: int, eager: float, target: tuple[tuple[int, int], ...] = (),
            after: dict[int, set[int]] | None = None,
            guide: dict[int, int] | None = None, prefix: Sequence[int] = (),
            stick: float | None = None, lazy: bool = False, stop: bool = False) -> tuple[list[int], bool]:
        """One run: the steps taken, in order, and whether it got stuck with steps left.
        `eager`: how likely a step that ends an interval is taken while others could move.
        `target`: (first, last) steps of intervals to bring about together: until every
        first step has happened, the run takes the steps that must precede them first, then
        the steps of tasks already enqueued, and enqueues other tasks (which may block a
        shared stream) last; the last steps wait while any other step can move. So a run
        aimed at one pair shows it racing whenever the pair can overlap that way.
        `guide`: step -> rank; the run takes, of the steps that may be taken (the last
        steps still held until every first step has happened), the one ranked first
        (steps without a rank last), and nothing at random: it follows an order that need
        not be an execution (a relaxed model) as closely as the rules let it.
        `prefix`: steps of an earlier run to take first, in its order, each where it may be
        taken (`covering_runs`, `Analysis._lead_in`).
        `stick`: how likely the run switches to another thread at each step it enqueues;
        until it does, it enqueues only the current thread's statements while that thread
        can move (a thread that runs on alone gets past what random interleavings block).
        `lazy`: a step that reads a set state (an await, a flag wait) is taken only when no
        other step may be: notifies meet a notify already set and are lost, and records that
        flag waits need are enqueued behind them, as in the executions that hang (a run
        looking for a deadlock, `Analysis.deadlock_from_runs`).
        `stop`: end the run once every first step of `target` has happened (a caller that
        reads no further; the steps taken are those of the whole run up to there)."""
        rng = random.Random(seed)
        current = rng.randrange(len(self.thread_chains)) if stick is not None else 0
        held = frozenset(last for _, last in target)
        starts = [first for first, _ in target]
        layout = self.layout
        steps = layout.steps
        position: dict[int, int] = {}
        order: list[int] = []
        cursor = [0] * len(self.thread_chains)
        frontier = self.frontier()
        for thread, chain in enumerate(self.thread_chains):
            if chain:
                frontier.add(chain[0], (0, thread))
        while not (stop and all(t in position for t in starts)):
            # The prefix is replayed step by step, each checked on its own; the frontier
            # reads what its steps woke only once the prefix is over (a third of the time of
            # covering runs went to reading it after each step).
            replayed = prefix[len(order)] if len(order) < len(prefix) else None
            if replayed is not None and replayed in frontier.rank and self.blocker(replayed, position) is None:
                step = replayed
            elif not (ready := frontier.ready(position)):
                break
            else:
                if lazy:
                    ready = [y for y in ready if not self._compiled(y).states] or ready
                if guide is not None:
                    if any(t not in position for t in starts):
                        ready = [y for y in ready if y not in held] or ready
                    step = min(ready, key=lambda y: (guide.get(y, len(steps)), y))
                elif stick is not None:
                    if rng.random() < stick:
                        current = rng.randrange(len(self.thread_chains))
                    step = self._stick(rng, ready, eager, current)
                else:
                    step = self._choose(rng, ready, position, held, starts, eager, after, frontier)
            position[step] = len(order)
            order.append(step)
            frontier.take(step)
            kind = steps[step].kind
            if kind in (StepKind.ISSUE, StepKind.RETURN):
                statement = self.program.statements[steps[step].statement]
                chain = self.thread_chains[statement.thread]
                if cursor[statement.thread] < len(chain) and chain[cursor[statement.thread]] == step:
                    cursor[statement.thread] += 1
                    if cursor[statement.thread] < len(chain):
                        frontier.add(chain[cursor[statement.thread]], (0, statement.thread))
                first = self.starts_task.get(step)
                if first is not None:
                    frontier.add(first, (1, first))
            elif kind is StepKind.START:
                end = self.end_of_start[step]
                if end not in position:
                    frontier.add(end, (1, end))
        return order, len(order) < len(steps)


def covering_runs(runner: Runner, orders: list[list[int]], impossible: frozenset[int],
                  enough=None, deadline: float | None = None) -> list[tuple[list[int], bool]]:
    """Runs that take steps no run of `orders` took, found as a fuzzer finds new coverage:
    each attempt replays a random prefix of a run kept so far, most often one of the newest
    (`NEWEST`), and goes on at random from there (`Runner.run`'s `prefix`), sticking to one
    thread or not (`STICKINESS`); an attempt that takes a step no kept run took is kept. A
    statement that only a rare interleaving reaches (three threads whose awaits on shared
    streams take each other's notifies: about one random run in a thousand gets one thread
    past its sync) is reached in steps, each kept run a little further than the last. Stops
    once every step but the `impossible` ones was taken, once `enough(covered)` says the steps
    taken so far are enough (when given), after `STALE_ATTEMPTS` attempts in a row kept
    nothing, after `COVERING_WORK` steps taken in all (prefixes included), or at `deadline`
    (`time.time()`, the total budget's); the seeds are fixed, so the runs depend on the
    program alone (and the budget)."""
    covered: set[int] = set()
    corpus: list[list[int]] = []
    for order in orders:
        if not covered.issuperset(order):
            covered.update(order)
            corpus.append(order)
    wanted = len(runner.layout.steps) - len(impossible)
    if not corpus:
        return []
    rng = random.Random(0)
    kept: list[tuple[list[int], bool]] = []
    stale = work = attempt = 0
    while len(covered) < wanted and stale < STALE_ATTEMPTS and work < COVERING_WORK:
        if deadline is not None and time.time() > deadline:
            break
        parent = corpus[-1 - min(len(corpus) - 1, int(rng.expovariate(NEWEST)))]
        prefix = parent[:rng.randrange(len(parent))]
        attempt += 1
        order, stuck = runner.run(attempt, rng.choice(EAGER_CHOICES), prefix=prefix,
                                  stick=rng.choice(STICKINESS))
        work += len(order)
        if covered.issuperset(order):
            stale += 1
            continue
        stale = 0
        covered.update(order)
        corpus.append(order)
        kept.append((order, stuck))
        if enough is not None and enough(covered):
            break
    return kept


def thread_orders(threads: int) -> list[tuple[int, ...]]:
    """Priorities of `threads` threads for `Runner.prioritized`, at most `PRIORITY_ORDERS`:
    every order of the threads where that many cover them all (up to three threads), else
    each thread first once, the others after it in turn."""
    most = PRIORITY_ORDERS
    if threads < 2 or most < 1:
        return []
    if threads <= most and factorial(threads) <= most:
        return list(permutations(range(threads)))
    return [tuple((first + k) % threads for k in range(threads)) for first in range(min(threads, most))]


class Frontier:
    """The steps a run may take next (`Runner.run`), kept as steps are taken rather than read
    again each time: the pending steps are each thread's next step and the steps of tasks
    enqueued (ranked in that order: threads in order, then tasks by step id, which is the
    order a run chooses among them). A step found waiting for another is read again only
    once that one is taken, and a step waiting only for a set state only once one of its
    setters is (a clearer cannot set it); a step found ready stays ready, since every item
    but a set state, once it holds, holds for good, and a ready step that reads a set state
    is read again each time."""

    def __init__(self, runner: Runner):
        self.runner = runner
        self.impossible = runner.encoding.order.impossible
        self.rank: dict[int, tuple[int, int]] = {}
        """Pending step -> its rank."""
        self.ready_steps: set[int] = set()
        self.stateful: set[int] = set()
        """Ready steps that read a set state."""
        self.waiters: dict[int, list[int]] = {}
        """Step not taken yet -> pending steps to read again once it is."""
        self.dirty: set[int] = set()
        """Pending steps to read before the next choice."""
        self.unset: set[int] = set()
        """Pending steps last found waiting only for a set state."""

    def add(self, step: int, rank: tuple[int, int]) -> None:
        """`step` is pending from now on (steps the order proves impossible never are)."""
        if step not in self.impossible:
            self.rank[step] = rank
            self.dirty.add(step)

    def take(self, step: int) -> None:
        """`step` was taken: it is no longer pending, and what waited for it is read again."""
        del self.rank[step]
        self.unset.discard(step)
        self.ready_steps.discard(step)
        self.stateful.discard(step)
        self.dirty.discard(step)
        self.dirty.update(self.waiters.pop(step, ()))

    def ready(self, position: dict[int, int]) -> list[int]:
        """The pending steps that may be taken after the prefix whose positions are given,
        in rank order."""
        runner = self.runner
        for y in self.dirty | self.stateful:
            if y not in self.rank:
                continue  # taken since it was woken
            found = runner.blocker(y, position)
            self.unset.discard(y)
            if found is None:
                self.ready_steps.add(y)
                if runner._compiled(y).states:
                    self.stateful.add(y)
                continue
            self.ready_steps.discard(y)
            self.stateful.discard(y)
            if found == RECHECK:
                self.unset.add(y)
                for setter in runner._compiled(y).setters:
                    if setter not in position:
                        self.waiters.setdefault(setter, []).append(y)
            elif found != NEVER:
                self.waiters.setdefault(found, []).append(y)
        self.dirty.clear()
        return sorted(self.ready_steps, key=self.rank.__getitem__)
