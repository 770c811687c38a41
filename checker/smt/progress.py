"""Steps that every maximal execution takes: a cheap proof of progress before the deadlock query.

A least fixpoint over steps. A step is *guaranteed* when, in every state in which nothing can
move and every guaranteed step has happened, its condition holds: then it has happened too
(else it could move). Its condition is read off its items (`rules.py`):

* a `Need` or `NeedIf` holds once its step has happened (a `NeedIf` is counted as needed:
  the task may have been enqueued before);
* a snapshot binding holds once every candidate record has completed (the bound record is
  one of them);
* "the flag (notify) is set" holds once some setter s has happened such that every clearer
  other than the step itself precedes s or follows the step in the must-happen-before order
  (its term in the `SetState` item has no clearer in between): the clearers that happened
  in such a state all came before s. This covers a flag that nothing resets, and an await
  whose notify is set after the await before it, as in every alternating hand-off;
* a step the order proves impossible is never guaranteed, nor a call of an interleaved comm
  (its group is formed by enqueue order, `Meet`).

Uses: if every step is guaranteed, no execution deadlocks (the query is skipped); otherwise
the guaranteed steps are asserted to have happened in the deadlock query's final state,
which is sound (a stuck state has taken them) and prunes the search.
"""

from __future__ import annotations

from checker.smt.encode import Encoding
from checker.smt.order import MustOrder
from checker.smt.rules import Bind, Meet, Need, NeedIf, Never, SetState


def guaranteed_steps(encoding: Encoding, order: MustOrder | None = None) -> frozenset[int]:
    """Steps that every execution ending with nothing able to move has taken."""
    order = order if order is not None else encoding.order
    layout = encoding.layout
    statements = encoding.program.statements
    count = len(layout.steps)
    missing = [0] * count
    groups_left = [0] * count
    satisfied: list[list[bool]] = [[] for _ in range(count)]
    watch_all: list[list[int]] = [[] for _ in range(count)]
    watch_any: list[list[tuple[int, int]]] = [[] for _ in range(count)]
    ready = []
    hopeful: set[int] = set()
    for step in range(count):
        if step in order.impossible:
            continue
        required: set[int] = set()
        groups: list[set[int]] = []
        hopeless = False
        for item in encoding.items(step):
            if isinstance(item, (Need, NeedIf)):
                required.add(item.step)
            elif isinstance(item, Bind):
                required.update(layout.completion(statements[r]) for r, _ in item.candidates)
            elif isinstance(item, SetState):
                groups.append({s for s, _, between in item.terms if not between})
            elif isinstance(item, (Never, Meet)):
                hopeless = True  # a group met by enqueue order: not proved here
        if hopeless or step in required or any(not g for g in groups):
            continue
        hopeful.add(step)
        missing[step] = len(required)
        groups_left[step] = len(groups)
        satisfied[step] = [False] * len(groups)
        for p in required:
            watch_all[p].append(step)
        for g, setters in enumerate(groups):
            for s in setters:
                watch_any[s].append((step, g))
        if not required and not groups:
            ready.append(step)
    done: set[int] = set()
    log: list[int] = []
    """The steps of `done` in the order they were added (`_EarliestPending` reads what is new)."""

    def settle(ready: list[int]) -> None:
        while ready:
            step = ready.pop()
            if step in done:
                continue
            done.add(step)
            log.append(step)
            for y in watch_all[step]:
                missing[y] -= 1
                if missing[y] == 0 and groups_left[y] == 0 and y in hopeful:
                    ready.append(y)
            for y, g in watch_any[step]:
                if not satisfied[y][g]:
                    satisfied[y][g] = True
                    groups_left[y] -= 1
                    if missing[y] == 0 and groups_left[y] == 0 and y in hopeful:
                        ready.append(y)

    settle(ready)
    pending = _EarliestPending(encoding, order, done)
    meetings = _Meetings(encoding, order, done)
    while True:
        woken = pending.wake(log) or meetings.prove()
        if not woken:
            break
        settle(woken)
    return frozenset(done)


MEETING_WORK = 20_000
"""Tasks `_Meetings._starts` reads for one call, at most (each with a statement known to be
enqueued after it): past that, the call is not proved to start (sound, and never slow)."""


class _Meetings:
    """Calls of an interleaved comm whose every group meets and ends, by induction on the
    position (the calls of a class enqueued before a call: `Meet`).

    For a set of classes whose k-th calls meet (`Layout.meets`), with the same number N of
    calls each, every call's issue guaranteed: suppose a state in which nothing can move and
    every guaranteed step has happened, and in which the groups at positions below k have
    ended. Each class enqueued a call at position k. Each call c that can be there can start
    by its own rules when every item of its start is met by

    * a guaranteed step;
    * a step of a call of the set whose position is below k in every execution (its group
      ended), or of a call of c's own class enqueued before c (its position is below c's);
    * a step of a task outside the set whose start's items are met in turn so (then that task,
      which nothing else holds, has started and ended), where "enqueued before c" carries to
      the tasks an item says were enqueued before a task enqueued before c, and an item that
      binds only if a task known to come later came first is no condition (`_starts`).

    Then every member of the group at k can start: the group starts and ends, as nothing can
    move. So, by induction, every group of the set ends in such a state: the starts and ends
    of all the set's calls are guaranteed."""

    def __init__(self, encoding: Encoding, order: MustOrder, done: set[int]):
        self.encoding = encoding
        self.order = order
        self.layout = layout = encoding.layout
        self.statements = encoding.program.statements
        self.done = done
        self.waiting = [classes for classes in layout.meeting_sets if len({len(calls) for calls in classes}) == 1]
        """The sets of classes not proved yet (each class with as many calls as the others)."""

    def prove(self) -> list[int]:
        """The starts and ends of the calls of every set proved now (none: nothing new)."""
        layout, statements = self.layout, self.statements
        for classes in list(self.waiting):
            calls = [c for calls in classes for c in calls]
            if not all(layout.issue(statements[c]) in self.done for c in calls):
                continue
            if self._groups_start(classes):
                self.waiting.remove(classes)
                return [step for c in calls for step in (layout.first_step(statements[c]),
                                                         layout.completion(statements[c]))
                        if step not in self.done]
        return []

    def _groups_start(self, classes: tuple) -> bool:
        """Whether, at every position k, every call that can be there can start by its own
        rules once the groups below k have ended. A call that can start at its lowest
        possible position can at every later one (more groups have ended), so each call is
        read once, at its lowest."""
        members = {c for calls in classes for c in calls}
        for calls in classes:
            own = set(calls)
            for c in calls:
                low, _ = self.encoding.rules.position_range(self.statements[c])
                if not self._starts(c, low, own, members):
                    return False
        return True

    def _starts(self, call: int, k: int, own: set[int], members: set[int]) -> bool:
        """Whether the call can start by its own rules once the groups of its set (`members`)
        below position k have ended (`own`: the calls of its class).

        Each task is read with a statement known to be enqueued after it (`later`): a task
        reached through an item that binds only if it was enqueued before another (a
        `NeedIf`), or through a step it must have been enqueued before, was; so an item of its
        own that binds only if that statement (or one enqueued after it) came first is no
        condition (two threads' tasks on one stream need each other only in the order they
        were enqueued)."""
        statements, layout = self.statements, self.layout
        memo: dict[tuple[int, bool, int | None], bool] = {}
        work = [0]

        def before_c(task: int) -> bool:
            return self._enqueued_first(task, call)

        def reached(step: int, before: bool, later: int | None) -> bool:
            """Whether `step` has happened in such a state; `before`: its statement was
            enqueued before c; `later`: a statement enqueued after it (None: none known)."""
            if step in self.done:
                return True
            task = layout.steps[step].statement
            t = statements[task]
            if not t.is_task:
                return False
            if task in layout.class_of:  # (a call of another set, or of another comm: not proved here)
                if task in members and self.encoding.rules.position_range(t)[1] < k:
                    return True
                return task in own and (before or before_c(task))
            if t.group is not None:
                return False
            before = before or before_c(task)
            key = (task, before, later)
            if key not in memo:
                work[0] += 1
                if work[0] > MEETING_WORK:
                    return False  # (proving nothing is sound)
                memo[key] = False  # a cycle proves nothing
                memo[key] = meets(task, before, later)
            return memo[key]

        def meets(task: int, before: bool, later: int | None) -> bool:
            """Whether every item of the first step of `task` (c, or a task that nothing but
            its items holds; `before`: it was enqueued before c; `later`: a statement enqueued
            after it) is met."""
            first = layout.first_step(statements[task])
            if first in self.order.impossible:
                return False
            for item in self.encoding.items(first):
                if isinstance(item, Need):
                    u = layout.steps[item.step].statement
                    first_u = self._enqueued_first(u, task)
                    if not reached(item.step, before and first_u, task if first_u else None):
                        return False
                elif isinstance(item, NeedIf):
                    if later is not None and (item.u == later or self._enqueued_first(later, item.u)):
                        continue  # (it binds only if u was enqueued before this task: it was not)
                    if not reached(item.step, before, task):  # (the item binds only if u came before x)
                        return False
                elif isinstance(item, Bind):
                    # (a bound record was enqueued before the wait)
                    if not all(reached(layout.completion(statements[r]), False, task) for r, _ in item.candidates):
                        return False
                elif isinstance(item, SetState):
                    if not any(not between and setter in self.done for setter, _, between in item.terms):
                        return False
                elif isinstance(item, Meet):
                    if item.call != call:
                        return False
                else:
                    return False
            return True

        return meets(call, True, None)

    def _enqueued_first(self, first: int, second: int) -> bool:
        """Whether statement `first` is issued before statement `second` in every execution
        (program order, or the must order)."""
        statements, layout = self.statements, self.layout
        a, b = statements[first], statements[second]
        if a.thread == b.thread:
            return layout.position[first] < layout.position[second]
        return self.order.prec(layout.issue(a), layout.issue(b))


class _EarliestPending:
    """Tasks that wait for one another only through the order they were enqueued in.

    The largest set W of tasks (not collective members) whose first step needs, besides its
    own enqueue, only guaranteed steps or steps of W tasks enqueued before it (stream order,
    hardware queues, legacy stream, the bound record): in a stuck state the earliest-enqueued
    unfinished task of W that was enqueued would have everything it needs and could move, so
    every enqueued task of W has finished. `wake` returns the first and last steps, not yet
    known to be taken, of W's tasks whose enqueue is guaranteed.

    Called once per round of the least fixpoint, so each call reads only what changed (a
    long loop proves one more iteration per round; reading every task each round made the
    proof quadratic in the iterations):

    * W only grows as steps are guaranteed (every condition that held still holds: a task
      that started has ended, its end needs its start alone), so its members (`known`) are
      not read again;
    * a task that fails for a step not guaranteed yet is noted in `waiting` as (step, None)
      when no task of W can provide it (-1: never), or (step, u) when task u provides it and
      failed so itself. Its failure *stands* while its step and every step down its chain
      are not guaranteed; standing tasks are not read again until a step of their chain is
      guaranteed or a task of it joins W (`_unstand`). Every other task outside W is read
      again each round."""

    def __init__(self, encoding: Encoding, order: MustOrder, done: set[int]):
        self.order = order
        self.layout = layout = encoding.layout
        self.statements = statements = encoding.program.statements
        self.done = done
        self.read = len(done)
        """How much of the log of guaranteed steps (`wake`) has been read."""
        self.candidates: dict[int, list] = {}
        """Task -> its first step's items, for the tasks whose first step is not guaranteed."""
        self.task_of: dict[int, int] = {}
        """First and completion steps of the candidates -> task."""
        self.first_of: dict[int, int] = {}
        self.steps: dict[int, tuple[int, int]] = {}
        """Task -> (first step, completion step)."""
        self.issue: dict[int, int] = {}
        for x in statements:
            if not x.is_task or x.group is not None or layout.first_step(x) in order.impossible:
                continue
            first, completion = layout.first_step(x), layout.completion(x)
            self.issue[x.index] = layout.issue(x)
            self.first_of[first] = x.index
            self.steps[x.index] = (first, completion)
            if first in done:
                continue
            self.candidates[x.index] = encoding.items(first)
            self.task_of[first] = x.index
            self.task_of[completion] = x.index
        self.known: set[int] = set()
        self.waiting: dict[int, tuple[int, int | None]] = {}
        self.by_step: dict[int, set[int]] = {}
        self.by_provider: dict[int, set[int]] = {}
        self.standing: set[int] = set()
        self.reread: set[int] = set(self.candidates)
        self.on_issue: dict[int, list[int]] = {}
        """Issue step -> W tasks waiting for it to be guaranteed before they are woken."""

    def _untaken(self, index: int) -> list[int]:
        """The first and completion steps of a task that are not guaranteed yet."""
        return [step for step in self.steps[index] if step not in self.done]

    def _note(self, index: int, step: int, provider: int | None) -> None:
        self.waiting[index] = (step, provider)
        self.by_step.setdefault(step, set()).add(index)
        if provider is not None:
            self.by_provider.setdefault(provider, set()).add(index)

    def _forget(self, index: int) -> None:
        entry = self.waiting.pop(index, None)
        if entry is not None:
            self.by_step[entry[0]].discard(index)
            if entry[1] is not None:
                self.by_provider[entry[1]].discard(index)

    def _unstand(self, indices) -> None:
        """These tasks' failures may no longer stand, nor those of tasks down whose chain they
        lie: read them again."""
        work = list(indices)
        while work:
            index = work.pop()
            if index in self.standing:
                self.standing.discard(index)
                if index in self.candidates and index not in self.known:
                    self.reread.add(index)
                work.extend(self.by_provider.get(index, ()))

    def _stands(self, start: int, verdict: dict[int, bool]) -> bool:
        chain: dict[int, None] = {}
        index, result = start, False
        while True:
            if index in verdict:
                result = verdict[index]
                break
            entry = self.waiting.get(index)
            if entry is None or entry[0] in self.done or index in chain:
                break
            chain[index] = None
            if entry[1] is None:
                result = True
                break
            index = entry[1]
        for index in chain:
            verdict[index] = result
        return result

    def _holds(self, index: int, alive) -> tuple[bool, set[int]]:
        """Whether task `index`'s first step is satisfied given W = alive, and the W tasks it
        leans on (a failure for a step that only its being guaranteed can satisfy is noted
        in `waiting`)."""
        layout, statements, order, done = self.layout, self.statements, self.order, self.done
        task_of, waiting = self.task_of, self.waiting
        issue = self.issue[index]
        leans: set[int] = set()
        for item in self.candidates[index]:
            if isinstance(item, Need):
                if item.step in done or item.step == issue:
                    continue
                u = task_of.get(item.step)
                if u is None or not order.prec(self.issue[u], issue):
                    self._note(index, item.step, None)
                    return False, leans
                if not alive(u):
                    if u in waiting:
                        self._note(index, item.step, u)
                    return False, leans
                leans.add(u)
            elif isinstance(item, NeedIf):
                if item.step in done:
                    continue
                u = task_of.get(item.step)
                if u is None:
                    self._note(index, item.step, None)
                    return False, leans
                if not alive(u):
                    if u in waiting:
                        self._note(index, item.step, u)
                    return False, leans
                leans.add(u)
            elif isinstance(item, Bind):
                for r, _ in item.candidates:
                    if layout.completion(statements[r]) in done:
                        continue
                    if not alive(r):
                        return False, leans
                    leans.add(r)
            elif isinstance(item, SetState):
                if not any(not between and s in done for s, _, between in item.terms):
                    return False, leans
            elif isinstance(item, (Never, Meet)):
                self._note(index, -1, None)
                return False, leans
        return True, leans

    def wake(self, log: list[int]) -> list[int]:
        """W once the steps `log` lists after those read last time were guaranteed too; the
        steps of W to guarantee now."""
        woken: list[int] = []
        new, self.read = log[self.read:], len(log)
        for step in new:
            index = self.first_of.get(step)
            if index is not None and index in self.candidates:
                del self.candidates[index]
                del self.task_of[step]
                self.task_of.pop(self.steps[index][1], None)
                self.known.discard(index)
                self.reread.discard(index)
                self.standing.discard(index)
                self._forget(index)
                self._unstand(self.by_provider.get(index, ()))
            self._unstand(self.by_step.get(step, ()))
            for index in self.on_issue.pop(step, ()):
                if index in self.known:
                    woken += self._untaken(index)
        known, reread = self.known, self.reread
        removed: set[int] = set()

        def alive(u: int) -> bool:
            return (u in known or u in reread) and u not in removed

        leaning: dict[int, set[int]] = {}
        work = list(reread)
        while work:
            index = work.pop()
            if not alive(index) or index in known:
                continue
            self._forget(index)
            ok, leans = self._holds(index, alive)
            if ok:
                for u in leans:
                    leaning.setdefault(u, set()).add(index)
                continue
            removed.add(index)
            work.extend(leaning.pop(index, ()))
        verdict: dict[int, bool] = {}
        for index in list(reread):
            if index in removed:
                if self._stands(index, verdict):
                    self.standing.add(index)
                    reread.discard(index)
                continue
            reread.discard(index)
            known.add(index)
            self._unstand(self.by_provider.get(index, ()))
            issue = self.issue[index]
            if issue in self.done:
                woken += self._untaken(index)
            else:
                self.on_issue.setdefault(issue, []).append(index)
        return woken
