"""When each step may happen, as structured items: the one statement of the rules.

`Rules.items(step)` lists what a step needs (docs/encoding.md, "Conditions"), already
simplified by what is known of the must-happen-before order (an *oracle*: `order.py` while it
computes the order, the final `MustOrder` for the encoding):

* `Need(step)`: the step happened before now, unconditionally. Program order, enqueue,
  stream order within a thread, and every fact the order proves (a task enqueued earlier by
  another thread for sure, a snapshot wait whose record is fixed, the k-th notify an await
  needs, the first record a flag wait needs).
* `NeedIf(step, u, x)`: if task u was enqueued before x, the step happened before now (the
  open window of another thread's tasks: enqueued before or after x, depending on the run).
* `Bind(w, candidates)`: the snapshot binding of a wait (or event sync) among the records
  that can be its latest earlier record; a candidate flagged static is enqueued before w in
  every execution.
* `SetState(terms)`: "the latest setter / clearer step before now is a setter" (flags,
  notifies) over the setters that can be that latest one, each with the clearers that can
  come between it and now.
* `Never`: the step never happens.

Every simplification is justified by a fact of the order that holds in every execution in
which the step happens; the `Need` items include every order fact about the step's own
ancestors, so the same items are exact also at the end of a prefix (the deadlock query,
docs/encoding.md "Pruning").

Tasks of another thread on one stream are walked as *runs* (its tasks on that stream in
program order): the ones enqueued before x for sure form a prefix of the run, the ones
enqueued after x for sure a suffix, found by bisection; only the latest of the prefix is
needed (stream order makes it complete last) and only the window in between stays open.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass

from checker.ir import Op, Statement, StreamMode, SyncKind
from checker.smt.layout import Layout
from checker.witness import StepKind


@dataclass(frozen=True, slots=True)
class Need:
    step: int


@dataclass(frozen=True, slots=True)
class NeedIf:
    step: int
    u: int
    """Statement: the condition is `u` enqueued before `x`."""
    x: int


@dataclass(frozen=True, slots=True)
class Bind:
    w: int
    """The wait (or event sync) statement."""
    candidates: tuple[tuple[int, bool], ...]
    """(record statement, enqueued before w in every execution)."""


@dataclass(frozen=True, slots=True)
class SetState:
    terms: tuple[tuple[int, bool, tuple[tuple[int, bool], ...]], ...]
    """(setter step, before now for sure, ((clearer step, before now for sure), ...))."""


@dataclass(frozen=True, slots=True)
class Never:
    """The step never happens (its condition is false)."""


@dataclass(frozen=True, slots=True)
class Meet:
    """Rule 8 for a call of an interleaved comm, whose group is not known before it runs: the
    calls of each meeting class enqueued at its position. For each such class, some call of it
    is at `call`'s position (as many calls of its class enqueued before it) and its `items`
    hold: at the call's start, that it can start by its own rules (or has started); at its end,
    that it has started."""

    call: int
    partners: tuple[tuple[tuple[int, tuple], ...], ...]
    """Per other meeting class: (a call that can be at `call`'s position, its items: `Need`
    and `NeedIf` only), for each such call. An empty tuple: no call can be (`Never` instead)."""


Item = Need | NeedIf | Bind | SetState | Never | Meet

BIG = 1 << 62

MAX_OPEN = 400_000
"""Open choices (window tasks, binding candidates, set-state terms and the clearers between)
the items of one program may list. They grow with the square of the tasks the order leaves
unordered (a loop whose threads are not held in step): 300 iterations of a training loop
without its hand-back notify list 720,000, about 1 KB each, and the solver, which takes every
one as a formula, gives up long before. Beyond this the program is too large to check."""


MAX_PEERS = 2_000_000
"""Pairs (a task, another thread's tasks it may wait for: on its stream, its hardware queue, a
legacy stream) that the rules read per round of the must order. Each costs a bisection even
where the order closes the window, so a stream shared by thousands of threads costs minutes
before any open choice is counted (3,000 threads of one kernel on one stream: 73 s; 160
threads of 310 kernels on the streams of one hardware queue: 61 s). Beyond this the program
is too large to check."""


class TooLarge(Exception):
    """The items of a program list more open choices than `MAX_OPEN`."""

    help = ("the open orderings grow with the square of the loop iterations that threads may run "
            "apart; check a shorter unrolling (the bug usually shows in two or three iterations), "
            f"or hold the threads in step (at most {MAX_OPEN:,} open orderings are checked)")

    def __init__(self, step: int, count: int):
        super().__init__(step, count)  # the arguments, so that it pickles out of a worker
        self.step, self.count = step, count

    def __str__(self) -> str:
        return (f"more than {MAX_OPEN:,} orderings are left open by the interleaving "
                f"(at least {self.count:,} by step {self.step})")


class TooShared(TooLarge):
    """Streams (or the hardware queues and legacy streams they share) used by so many threads
    that the rules would read more than `MAX_PEERS` pairs."""

    help = ("check fewer threads on each shared stream, hardware queue or legacy stream (a bug "
            "between threads shows with two or three)")

    def __str__(self) -> str:
        return (f"its streams are shared by so many threads that {self.count:,} pairs of a task and "
                f"another thread's tasks it may wait for (on its stream, its hardware queue or a "
                f"legacy stream) would be ordered (at most {MAX_PEERS:,})")


class Rules:
    """The items of every step, given an order oracle with `prec(x, y)`, `frontier(y, chain)`.

    With `edges_only`, items that give no edge (windows, bindings, set states) are built only
    as far as needed to tell that a step can never happen."""

    def __init__(self, layout: Layout, oracle, edges_only: bool = False):
        self.layout = layout
        self.program = layout.program
        self.oracle = oracle
        self.edges_only = edges_only
        self.queue_peers, self.legacy_peers = self._shared_queues(layout)
        # Records of each event per thread: (records, positions, issue indices on the thread
        # chain, and for each record the end of the run of records from it on its stream, none
        # of them in a batch: `_behind_on_its_stream` reads a window of them at once).
        self.records_by_thread: dict[int, dict[int, tuple[list[Statement], list[int], list[int], list[int]]]] = {}
        for event, records in layout.records.items():
            per: dict[int, tuple[list, list, list, list]] = {}
            for r in records:
                recs, positions, issues, _ = per.setdefault(r.thread, ([], [], [], []))
                recs.append(r)
                positions.append(layout.position[r.index])
                issues.append(layout.index_on(layout.issue(r), layout.thread_chain[r.thread]))
            for recs, _, _, run_end in per.values():
                run_end.extend([0] * len(recs))
                for k in range(len(recs) - 1, -1, -1):
                    r = recs[k]
                    if r.batch is not None:
                        run_end[k] = k
                    elif k + 1 < len(recs) and recs[k + 1].stream == r.stream and recs[k + 1].batch is None:
                        run_end[k] = run_end[k + 1]
                    else:
                        run_end[k] = k + 1
            self.records_by_thread[event] = per
        self._signals: dict[tuple[str, int], tuple[dict, dict]] = {}
        self._ranges: dict[int, tuple[int, int]] = {}
        self._partner_items: dict[tuple[str, int], tuple] = {}
        self._rounds: dict[tuple[int, int], tuple[list[int], list[int]]] = {}
        self.open = 0
        """Open choices listed so far (`MAX_OPEN`)."""

    def _shared_queues(self, layout: Layout) -> tuple[dict[int, list[int]], dict[int, list[int]]]:
        """Per stream that has tasks: the other streams with tasks in its hardware queue, and
        the streams with tasks its legacy (or blocking) stream waits for. Refused (`TooShared`)
        when the rules would read more than MAX_PEERS pairs of a task and another thread's
        tasks, on its own stream or these (160 threads of 310 kernels, each on a stream of
        one hardware queue: 61 s of the must order and 1.8 GB before any question), counted
        from the groups' totals before any list is made."""
        streams = self.program.streams
        threads_on = layout.threads_on_stream
        used = sorted(threads_on)
        queues: dict[tuple, list[int]] = {}
        modes: dict[tuple, list[int]] = {}
        for index in used:
            stream = streams[index]
            if stream.queue is not None:
                queues.setdefault((stream.device, stream.context, stream.queue), []).append(index)
            modes.setdefault((stream.device, stream.context, stream.mode), []).append(index)
        waits_for = {StreamMode.LEGACY: StreamMode.BLOCKING, StreamMode.BLOCKING: StreamMode.LEGACY}
        threads_in = {key: sum(len(threads_on[o]) for o in group) for key, group in {**queues, **modes}.items()}
        pairs = 0
        for index in used:
            stream = streams[index]
            tasks = sum(len(layout.runs[(thread, index)]) for thread in threads_on[index])
            others = len(threads_on[index]) - 1  # (its own stream's other threads)
            if stream.queue is not None:
                others += threads_in[(stream.device, stream.context, stream.queue)] - len(threads_on[index])
            if stream.mode in waits_for:
                others += threads_in.get((stream.device, stream.context, waits_for[stream.mode]), 0)
            pairs += tasks * others
        if pairs > MAX_PEERS:
            raise TooShared(0, pairs)
        queue_peers, legacy_peers = {}, {}
        for index in used:
            stream = streams[index]
            group = queues[(stream.device, stream.context, stream.queue)] if stream.queue is not None else []
            queue_peers[index] = [o for o in group if o != index]
            legacy_peers[index] = modes.get((stream.device, stream.context, waits_for.get(stream.mode)), [])
        return queue_peers, legacy_peers

    def _grow(self, count: int, step: int) -> None:
        self.open += count
        if self.open > MAX_OPEN:
            raise TooLarge(step, self.open)

    # --- order helpers ------------------------------------------------------------------------

    def window(self, key: tuple[int, int], x_issue: int, upper: bool = True) -> tuple[int, int]:
        """For the run `key` of another thread than x's: (p, q) such that run[:p] is enqueued
        before x for sure and run[q:] after x for sure (q = len(run) without `upper`)."""
        layout, oracle = self.layout, self.oracle
        run = layout.runs[key]
        frontier = oracle.frontier(x_issue, layout.thread_chain[key[0]])
        p = bisect_right(layout.run_issue_index[key], frontier)
        if not upper or self.edges_only:
            return p, len(run)
        q = bisect_left(range(len(run)), True, lo=p,
                        key=lambda k: oracle.prec(x_issue, layout.issue(run[k])))
        return p, q

    def _latest_of(self, run: list[Statement], end: int, skip_batch: int | None = None) -> list[Statement]:
        """`latest(run[:end])`, skipping trailing tasks of `skip_batch` (x's own batch)."""
        k = end - 1
        if skip_batch is not None:
            while k >= 0 and run[k].batch == skip_batch:
                k -= 1
        if k < 0:
            return []
        last = run[k]
        if last.batch is None:
            return [last]
        mates = []
        while k >= 0 and run[k].batch == last.batch:
            mates.append(run[k])
            k -= 1
        return mates[::-1]

    def _peers(self, x: Statement, streams, need, skip_own_batch: bool = False) -> list:
        """Tasks on `streams` that x (a task or a sync) waits for when they were enqueued
        before it: `need(u)` is the step of u that must have happened."""
        layout = self.layout
        x_issue = layout.issue(x)
        position = layout.position[x.index]
        items: list = []
        for stream in streams:
            for thread in layout.threads_on_stream.get(stream, ()):
                key = (thread, stream)
                run = layout.runs[key]
                if thread == x.thread:
                    end = bisect_right(layout.run_positions[key], position - 1)
                    skip = x.batch if skip_own_batch and x.batch is not None else None
                    for u in self._latest_of(run, end, skip):
                        items.append(Need(need(u)))
                    continue
                p, q = self.window(key, x_issue)
                for u in self._latest_of(run, p):
                    items.append(Need(need(u)))
                if not self.edges_only:
                    self._grow(q - p, x_issue)
                    for u in run[p:q]:
                        items.append(NeedIf(need(u), u.index, x.index))
        return items

    # --- the items of a step ------------------------------------------------------------------

    def items(self, step: int) -> list:
        layout = self.layout
        if step in layout.never:
            return [Never()]
        kind = layout.steps[step].kind
        s = self.program.statements[layout.steps[step].statement]
        if kind is StepKind.ISSUE:
            items = []
            previous = layout.previous[s.index]
            if previous is not None:
                prev = self.program.statements[previous]
                items.append(Need(layout.thread_done(prev)))
            if s.stream is None and s.op is Op.AWAIT:
                items += self.notify_items(s, step)
            return items
        if kind is StepKind.RETURN:
            items = [Need(layout.issue(s))]
            if s.op is Op.SYNC:
                items += self.sync_items(s, step)
            elif s.is_task:
                items.append(Need(layout.completion(s)))
            return items
        if kind is StepKind.START:
            items = self.task_items(s)
            if s.index in layout.class_of:
                if not s.spins:  # rule 8: every member can start, at the position it was enqueued at
                    items += self.meet_items(s, lambda d: tuple(self.task_items(d)), "can start")
                return items
            if s.group is not None and not s.spins:
                # Rule 8: the members start together, once every one of them can.
                for m in self.program.groups[s.group].members:
                    if m != s.index:
                        items += self.task_items(self.program.statements[m])
            return items
        if kind is StepKind.END:
            if s.index in layout.class_of:
                return [Need(layout.step(StepKind.START, s.index)),
                        *self.meet_items(s, lambda d: (Need(layout.step(StepKind.START, d.index)),), "has started")]
            members = layout.group_members.get(step, (s.index,))
            return [Need(layout.step(StepKind.START, m)) for m in members]
        items = self.task_items(s)
        if s.op is Op.WAIT:
            event = self.program.events[s.event]
            if event.flag:
                items += self.flag_items(s.event, step)
            else:
                items += self.binding_items(s, s.event)
        elif s.op is Op.AWAIT:
            items += self.notify_items(s, step)
        return items

    def task_items(self, x: Statement) -> list:
        """Rules 1-3 at a task's first step: enqueued, stream order, hardware queue, legacy."""
        layout = self.layout
        items = [Need(layout.issue(x))]
        items += self._peers(x, (x.stream,), layout.completion, skip_own_batch=True)
        if self.queue_peers[x.stream]:
            items += self._peers(x, self.queue_peers[x.stream], layout.begin)
        if self.legacy_peers[x.stream]:
            items += self._peers(x, self.legacy_peers[x.stream], layout.completion)
        return items

    # --- calls of an interleaved comm ------------------------------------------------------------

    def position_range(self, call: Statement) -> tuple[int, int]:
        """The positions a call of an interleaved comm can be enqueued at: the calls of its
        class enqueued before it for sure, and those not surely enqueued after it (kept once
        the order is final: not while `edges_only` rounds still strengthen it)."""
        found = self._ranges.get(call.index)
        if found is None:
            found = self._position_range(call)
            if not self.edges_only:
                self._ranges[call.index] = found
        return found

    def _position_range(self, call: Statement) -> tuple[int, int]:
        layout, oracle = self.layout, self.oracle
        issue = layout.issue(call)
        low = high = 0
        for other in layout.class_of[call.index]:
            if other == call.index:
                continue
            o = self.program.statements[other]
            if o.thread == call.thread:
                before = layout.position[other] < layout.position[call.index]
                low += before
                high += before
                continue
            o_issue = layout.issue(o)
            if oracle.prec(o_issue, issue):
                low += 1
                high += 1
            elif not oracle.prec(issue, o_issue):
                high += 1
        return low, high

    def meet_items(self, call: Statement, items_of, what: str) -> list:
        """`Meet` for a call of an interleaved comm: per meeting class, the calls whose
        positions can equal the call's, each with its items (`items_of`, made once per call
        and `what`). `Never` when some class has none, or no call at all."""
        statements = self.program.statements
        if any(calls is None for calls in self.layout.meets[call.index]):
            return [Never()]
        if self.edges_only:
            return []  # (no edge; the positions are read once the order is final)
        low, high = self.position_range(call)
        partners = []
        for calls in self.layout.meets[call.index]:
            candidates = []
            for other in calls:
                d = statements[other]
                d_low, d_high = self.position_range(d)
                if d_low <= high and low <= d_high:
                    key = (what, other)
                    if key not in self._partner_items:  # (the same for every call that meets it)
                        self._partner_items[key] = items_of(d)
                    candidates.append((other, self._partner_items[key]))
            if not candidates:
                return [Never()]
            partners.append(tuple(candidates))
        if not partners:
            return []
        self._grow(sum(len(c) for c in partners), self.layout.issue(call))
        return [Meet(call.index, tuple(partners))]

    def sync_items(self, sync: Statement, step: int) -> list:
        if sync.sync is SyncKind.EVENT:  # a flag event's too: the latest record before it
            return self.binding_items(sync, sync.target)
        return self._peers(sync, self.program.synced_streams(sync), self.layout.completion)

    # --- snapshot binding ---------------------------------------------------------------------

    def binding_items(self, w: Statement, event: int) -> list:
        """The record a snapshot wait (or event sync) `w` is bound to has completed."""
        layout, oracle = self.layout, self.oracle
        w_issue = layout.issue(w)
        position = layout.position[w.index]
        static: list[Statement] = []
        windows: list[tuple[list[Statement], int, int, list[int]]] = []
        for thread, (records, positions, issues, run_end) in self.records_by_thread.get(event, {}).items():
            if thread == w.thread:
                k = bisect_right(positions, position - 1)
                if k:
                    static.append(records[k - 1])
                continue
            p = bisect_right(issues, oracle.frontier(w_issue, layout.thread_chain[thread]))
            q = bisect_left(range(len(records)), True, lo=p,
                            key=lambda k: oracle.prec(w_issue, layout.issue(records[k])))
            if p:
                static.append(records[p - 1])
            windows.append((records, p, q, run_end))

        def overtaken(r: Statement) -> bool:
            """A record enqueued before some record that is surely enqueued before w."""
            return any(o.index != r.index and oracle.prec(layout.issue(r), layout.issue(o)) for o in static)

        fixed = [r for r in static if not overtaken(r)]
        spans = []
        for records, p, q, run_end in windows:
            # The overtaken records of a window are a prefix of it (one thread's records
            # are enqueued in program order).
            first = bisect_left(range(len(records)), True, lo=p, hi=q, key=lambda k: not overtaken(records[k]))
            if first < q:
                spans.append((records, first, q, run_end))
        if not fixed and not spans:
            return []
        if len(fixed) == 1 and not spans:
            r = fixed[0]
            return [Need(layout.completion(r))]
        needs = [Need(layout.completion(r))
                 for r in fixed if self._behind_on_its_stream(r, fixed, spans)]
        if self.edges_only:
            return needs
        kept = [(r, True) for r in fixed]
        for records, first, q, _ in spans:
            kept += [(r, False) for r in records[first:q]]
        kept.sort(key=lambda item: item[0].index)
        self._grow(len(kept), w_issue)
        return needs + [Bind(w.index, tuple((r.index, surely) for r, surely in kept))]

    @staticmethod
    def _behind_on_its_stream(r: Statement, fixed: list[Statement], spans: list) -> bool:
        """Whether a record `r` surely enqueued before the wait is waited for whichever
        candidate the wait binds to (the others `fixed` and the records of the `spans` of
        other threads, (records, first, end, run ends)): the bound record is `r` or one
        enqueued after it (the latest before the wait), and when every other candidate is on
        `r`'s stream, one enqueued after `r` completes after it (rule 1). Threads that each
        record the event after their own work on one shared stream, and wait for it on
        streams of their own, are ordered that way: with the binding left open, the solver
        took 6-9 s to prove each of them no race (3 threads x 7 iterations; 274 s at 10)."""
        stream = r.stream
        return (r.batch is None and all(o.stream == stream and o.batch is None for o in fixed)
                and all(records[first].stream == stream and run_end[first] >= end
                        for records, first, end, run_end in spans))

    # --- flags, notifies, lifetimes: the latest setter or clearer -------------------------------

    def _grouped(self, name: str, key: int, setters, clearers) -> tuple[dict, dict]:
        """The setter and clearer steps of one flag or notify per chain, listed once
        (`setters` and `clearers` make the lists when they are first needed)."""
        cached = self._signals.get((name, key))
        if cached is None:
            cached = self._signals[(name, key)] = (self.layout.by_chain(setters()),
                                                   self.layout.by_chain(clearers()))
        return cached

    def flag_items(self, event: int, step: int) -> list:
        layout = self.layout
        setters, clearers = self._grouped(
            "flag", event, lambda: [layout.completion(r) for r in layout.records.get(event, ())],
            lambda: [layout.completion(r) for r in layout.resets.get(event, ())])
        cleared = self._consumed(event, step, clearers)
        return self.counting(setters, cleared, step) + [self.set_state(setters, clearers, step)]

    def _consumed(self, event: int, step: int, clearers: dict) -> int:
        """How many times a flag was set and cleared again before `step` for sure: on the
        step's own chain, each `reset` of the flag that follows a `wait` for it (after the
        previous such reset). The wait needed a record completed after that previous reset,
        and the reset cleared it, so each such pair used a record of its own, completed after
        the last: the step needs one more (`counting`). A flag used as a semaphore (wait,
        reset, work, record the other side's flag) is ordered that way, iteration by
        iteration, as notifies are (a producer and a consumer handing two flags back and
        forth 15 times took 75 s, the solver proving every later iteration no race)."""
        chain, here = self.layout.primary(step)
        key = (event, chain)
        rounds = self._rounds.get(key)
        if rounds is None:
            readers = self._flag_readers(event).get(chain, ())
            rounds = self._rounds[key] = self._flag_rounds(clearers.get(chain, ()), readers)
        indices, counts = rounds
        k = bisect_left(indices, here)
        return counts[k - 1] if k else 0

    @staticmethod
    def _flag_rounds(resets: list, readers: list) -> tuple[list[int], list[int]]:
        """One chain's waits and resets of a flag in chain order, and after each, how many
        rounds (a wait, then a reset) have ended (`_consumed`)."""
        indices, counts = [], []
        count, waited = 0, False
        for index, kind in sorted([(r, 0) for r, _ in readers] + [(c, 1) for c, _ in resets]):
            if kind == 0:
                waited = True
            elif waited:
                count, waited = count + 1, False
            indices.append(index)
            counts.append(count)
        return indices, counts

    def _flag_readers(self, event: int) -> dict:
        """The completions of the stream `wait`s of one flag event, per chain (`_grouped`)."""
        layout = self.layout
        return self._grouped("flag readers", event, lambda: [
            layout.completion(s) for s in self.program.statements
            if s.op is Op.WAIT and s.stream is not None and s.event == event], lambda: [])[0]

    def notify_items(self, x: Statement, step: int) -> list:
        layout = self.layout
        setters, clearers = self._grouped(
            "notify", x.notify, lambda: [layout.signal_step(n) for n in layout.notifies.get(x.notify, ())],
            lambda: [layout.signal_step(a) for a in layout.awaits.get(x.notify, ())])
        cleared = sum(self._count_before(items, step) for items in clearers.values())
        return self.counting(setters, cleared, step) + [self.set_state(setters, clearers, step)]

    def _count_before(self, items: list[tuple[int, int]], step: int) -> int:
        """How many of one chain's steps (in chain order) precede `step` for sure (not itself)."""
        if not items:
            return 0
        chain = self.layout.primary(items[0][1])[0]
        frontier = self.oracle.frontier(step, chain)
        k = bisect_right(items, (frontier, BIG))
        if k and items[k - 1][1] == step:
            k -= 1
        return k

    def _count_not_after(self, items: list[tuple[int, int]], step: int) -> int:
        """How many of one chain's steps (a prefix) are not after `step` for sure (nor it)."""
        oracle = self.oracle
        k = bisect_left(range(len(items)), True, key=lambda j: oracle.prec(step, items[j][1]))
        while k and items[k - 1][1] == step:
            k -= 1
        return k

    def counting(self, setters: dict, cleared: int, step: int) -> list:
        """A step that needs the flag set after `cleared` clearers that precede it needs at
        least cleared + 1 setter steps before it. On a chain of setters, setters happen in
        chain order, so: every setter that cannot be spared must precede the step."""
        possible = {chain: self._count_not_after(items, step) for chain, items in setters.items()}
        total = sum(possible.values())
        if total < cleared + 1:
            return [Never()]
        items = []
        for chain, count in possible.items():
            need = cleared + 1 - (total - count)
            if need >= 1:
                items.append(Need(setters[chain][need - 1][1]))
        return items

    def set_state(self, setters: dict, clearers: dict, now: int) -> SetState:
        """The latest setter/clearer step before `now` is a setter, over the setters that can be
        that one (not after now, not followed by a clearer that precedes now for sure), each
        with the clearers that can fall between it and now: per chain of clearers, up to the
        first that surely follows the setter (a loop's frees and allocs on one stream: one
        clearer per setter, not every later one)."""
        oracle = self.oracle
        last_cleared = []
        for items in clearers.values():
            k = self._count_before(items, now)
            if k:
                last_cleared.append(items[k - 1][1])
        terms = []
        # With no clearer at all, the flag is set once any setter is, and on a chain the first
        # setter not after now says it for the rest (a flag never reset, waited for in a loop:
        # a term per earlier record for every wait, n^2 in all, past MAX_OPEN at 300 rounds).
        never_cleared = not any(clearers.values())
        for items in setters.values():
            possible = self._count_not_after(items, now)
            first = bisect_left(range(possible), True, key=lambda j: not any(
                oracle.prec(items[j][1], c) for c in last_cleared))
            if self.edges_only:
                if first < possible:
                    return SetState(((items[first][1], False, ()),))
                continue
            for _, s in items[first:min(possible, first + 1) if never_cleared else possible]:
                between = []
                for citems in clearers.values():
                    lo = self._count_before(citems, s)
                    hi = self._count_not_after(citems, now)
                    for _, c in citems[lo:hi]:
                        if c != now and c != s:
                            between.append((c, oracle.prec(c, now)))
                            if oracle.prec(s, c):
                                # A later clearer of this chain before now means this
                                # one was too, and it surely follows s: it says all.
                                break
                terms.append((s, oracle.prec(s, now), tuple(between)))
                self._grow(1 + len(between), now)
        return SetState(tuple(terms))

    def lifetime_state(self, setters: list[int], clearers: list[int], now: int) -> SetState:
        """Dead after free at `now`: the latest free/alloc step before now is a free."""
        return self.set_state(self.layout.by_chain(setters), self.layout.by_chain(clearers), now)
