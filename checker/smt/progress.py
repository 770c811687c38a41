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
* a step the order proves impossible is never guaranteed.

Uses: if every step is guaranteed, no execution deadlocks (the query is skipped); otherwise
the guaranteed steps are asserted to have happened in the deadlock query's final state,
which is sound (a stuck state has taken them) and prunes the search.
"""

from __future__ import annotations

from checker.smt.encode import Encoding
from checker.smt.order import MustOrder
from checker.smt.rules import Bind, Need, NeedIf, Never, SetState


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
            elif isinstance(item, Never):
                hopeless = True
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

    def settle(ready: list[int]) -> None:
        while ready:
            step = ready.pop()
            if step in done:
                continue
            done.add(step)
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
    known: set[int] = set()
    waiting: dict[int, tuple[int, int | None]] = {}
    tasks = [(x.index, layout.first_step(x), layout.completion(x)) for x in statements
             if x.is_task and x.group is None and layout.first_step(x) not in order.impossible]
    while True:
        woken = _earliest_pending(encoding, order, done, known, waiting, tasks)
        if not woken:
            break
        settle(woken)
    return frozenset(done)


def _still_waiting(waiting: dict[int, tuple[int, int | None]], done: set[int]) -> set[int]:
    """The tasks of `waiting` whose failure stands: their step, and the steps of the tasks
    they wait on, down to one that no task provides, are all not guaranteed."""
    verdict: dict[int, bool] = {}
    for start in waiting:
        chain: dict[int, None] = {}
        index, result = start, False
        while True:
            if index in verdict:
                result = verdict[index]
                break
            entry = waiting.get(index)
            if entry is None or entry[0] in done or index in chain:
                break
            chain[index] = None
            if entry[1] is None:
                result = True
                break
            index = entry[1]
        for index in chain:
            verdict[index] = result
    return {index for index, stands in verdict.items() if stands}


def _earliest_pending(encoding: Encoding, order: MustOrder, done: set[int], known: set[int],
                      waiting: dict[int, tuple[int, int | None]], tasks: list[tuple[int, int, int]]) -> list[int]:
    """Tasks that wait for one another only through the order they were enqueued in.

    The largest set W of tasks (not collective members) whose first step needs, besides its
    own enqueue, only guaranteed steps or steps of W tasks enqueued before it (stream order,
    hardware queues, legacy stream, the bound record): in a stuck state the earliest-enqueued
    unfinished task of W that was enqueued would have everything it needs and could move, so
    every enqueued task of W has finished. Returns the first and last steps, not yet known to
    be taken, of W's tasks whose enqueue is guaranteed.

    `known` carries W from one call to the next (updated here): with more steps guaranteed,
    every condition that held still holds (a task that started has ended: its end needs its
    start alone), so W only grows and its members need not be read again. `waiting` carries
    the tasks that failed for a step not guaranteed yet, as (step, None) when no task of W
    can provide it (-1: never), or (step, u) when task u provides it and failed so itself:
    such a task fails again, without being read, while its step and every step down its
    chain are not guaranteed (`_still_waiting`). `tasks` lists
    (statement, first step, completion step) of every task that may belong to W."""
    layout = encoding.layout
    statements = encoding.program.statements
    task_of: dict[int, int] = {}
    candidates: dict[int, list] = {}
    for index, first, completion in tasks:
        if first in done:
            continue
        candidates[index] = encoding.items(first)
        task_of[first] = index
        task_of[completion] = index
    alive = set(candidates)

    def holds(index: int) -> tuple[bool, set[int]]:
        """Whether task `index`'s first step is satisfied given W = alive, and the W tasks it
        leans on (a failure for a step that only its being guaranteed can satisfy is noted
        in `waiting`)."""
        x = statements[index]
        issue = layout.issue(x)
        leans: set[int] = set()
        for item in candidates[index]:
            if isinstance(item, Need):
                if item.step in done or item.step == issue:
                    continue
                u = task_of.get(item.step)
                if u is None or not order.prec(layout.issue(statements[u]), layout.issue(x)):
                    waiting[index] = (item.step, None)
                    return False, leans
                if u not in alive:
                    if u in waiting:
                        waiting[index] = (item.step, u)
                    return False, leans
                leans.add(u)
            elif isinstance(item, NeedIf):
                if item.step in done:
                    continue
                u = task_of.get(item.step)
                if u is None:
                    waiting[index] = (item.step, None)
                    return False, leans
                if u not in alive:
                    if u in waiting:
                        waiting[index] = (item.step, u)
                    return False, leans
                leans.add(u)
            elif isinstance(item, Bind):
                for r, _ in item.candidates:
                    if layout.completion(statements[r]) in done:
                        continue
                    if r not in alive:
                        return False, leans
                    leans.add(r)
            elif isinstance(item, SetState):
                if not any(not between and s in done for s, _, between in item.terms):
                    return False, leans
            elif isinstance(item, Never):
                waiting[index] = (-1, None)
                return False, leans
        return True, leans

    still = _still_waiting(waiting, done)
    leaning: dict[int, set[int]] = {}
    work = [index for index in alive if index not in known]
    while work:
        index = work.pop()
        if index not in alive:
            continue
        if index in still:
            ok, leans = False, ()
        else:
            waiting.pop(index, None)
            ok, leans = holds(index)
        if ok:
            for u in leans:
                leaning.setdefault(u, set()).add(index)
            continue
        alive.discard(index)
        work.extend(leaning.pop(index, ()))
    known.clear()
    known.update(alive)
    woken = []
    for index, first, completion in tasks:
        if index in alive and layout.issue(statements[index]) in done:
            woken += [step for step in (first, completion) if step not in done]
    return woken
