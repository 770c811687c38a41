"""The steps of a program, the chains they lie on, and the lookups every rule needs: no Z3.

Steps are the ones of `checker/witness.py`, numbered densely (the SMT encoding gives each one
an integer time). Each member of a collective group has its own `start` and `end`.

*Chains* are sequences of steps that every execution takes in their order (docs/encoding.md,
"Pruning"):

* one per host thread: its `issue` and `return` steps in program order;
* per thread and stream, the steps of the tasks that thread enqueues on that stream, in
  program order. Tasks of one `group` batch are not ordered among themselves, so the k-th
  task of every batch run sits on sub-chain k (tasks outside batches on sub-chain 0).

Every step lies on at least one chain, so the must-happen-before relation (`order.py`) is
kept as one vector clock per step: for each chain, the latest step of the chain known to
precede it. The lists below are what the rules in `rules.py` walk: per thread and stream the
tasks in program order, records and resets per event, notifies and awaits per notify, the
alloc and free statements per memory.
"""

from __future__ import annotations

from bisect import bisect_right

from checker import collectives
from checker.ir import Op, Program, Statement
from checker.witness import Step, StepKind, holds_thread


class Layout:
    """Steps, chains and per-name statement lists of one program."""

    def __init__(self, program: Program):
        self.program = program
        statements = program.statements
        self.position: list[int] = [0] * len(statements)
        self.previous: list[int | None] = [None] * len(statements)
        for thread in program.threads:
            previous = None
            for position, index in enumerate(thread.statements):
                self.position[index] = position
                self.previous[index] = previous
                previous = index

        # Steps.
        self.steps: list[Step] = []
        self.step_id: dict[tuple[StepKind, int], int] = {}
        for statement in statements:
            kinds = [StepKind.ISSUE]
            if holds_thread(statement):
                kinds.append(StepKind.RETURN)
            if statement.is_task:
                kinds += [StepKind.START, StepKind.END] if statement.running else [StepKind.COMPLETE]
            for kind in kinds:
                self.step_id[(kind, statement.index)] = len(self.steps)
                self.steps.append(Step(kind, statement.index))
        self.group_members: dict[int, tuple[int, ...]] = {}
        """A collective member's `end` step -> the members of its group (each must start first)."""
        self.class_of: dict[int, tuple[int, ...]] = {}
        """A call of an interleaved comm (`collectives.interleaved_comms`) -> the calls of its
        class (`collectives.call_class`) in statement order: its position among them, and so
        its group, is how many of them were enqueued before it."""
        self.meets: dict[int, tuple[tuple[int, ...] | None, ...]] = {}
        """A call of an interleaved comm -> per other class whose call at its position meets
        it, that class's calls (None: a class with no call in the program)."""
        interleaved = collectives.interleaved_comms(program)
        if interleaved:
            classes: dict[tuple, list[int]] = {}
            for s in statements:
                key = collectives.call_class(s)
                if key is not None and s.comm in interleaved:
                    classes.setdefault(key, []).append(s.index)
            for key, calls in classes.items():
                others = tuple(tuple(classes[other]) if other in classes else None
                               for other in collectives.meeting_classes(program, key) if other != key)
                for index in calls:
                    self.class_of[index] = tuple(calls)
                    self.meets[index] = others
        self.meeting_sets: list[tuple[tuple[int, ...], ...]] = []
        """The sets of classes of an interleaved comm whose k-th calls meet, each sorted, in
        the order of their first call; none where a class has no call (no group of it starts)."""
        for index in sorted(self.class_of):
            if all(other is not None for other in self.meets[index]):
                found = tuple(sorted((self.class_of[index], *self.meets[index])))
                if found not in self.meeting_sets:
                    self.meeting_sets.append(found)
        never = []
        for group in program.groups:
            if group.comm in interleaved:
                continue  # met by enqueue order (`class_of`), not by the program-order groups
            for m in group.members:
                end = self.step_id.get((StepKind.END, m))
                if end is not None:
                    self.group_members[end] = group.members
                    if not group.complete:
                        never.append(end)
                        if not program.statements[m].spins:  # it starts with its group: never
                            never.append(self.step_id[(StepKind.START, m)])
        self.never: frozenset[int] = frozenset(never)

        # Per thread and stream: the tasks in program order; batch runs give sub-chains.
        self.runs: dict[tuple[int, int], list[Statement]] = {}
        self.threads_on_stream: dict[int, list[int]] = {}
        for thread in program.threads:
            for index in thread.statements:
                s = statements[index]
                if s.is_task:
                    run = self.runs.setdefault((s.thread, s.stream), [])
                    if not run:
                        self.threads_on_stream.setdefault(s.stream, []).append(s.thread)
                    run.append(s)
        self.run_positions = {key: [self.position[u.index] for u in run] for key, run in self.runs.items()}
        self.run_issue_index: dict[tuple[int, int], list[int]] = {}

        # Chains.
        self.chains: list[list[int]] = []
        self.on_chain: dict[int, list[tuple[int, int]]] = {}
        """step -> [(chain, index on it)]; the first entry is the step's primary chain."""
        self.thread_chain: list[int] = []
        for thread in program.threads:
            chain = self._new_chain()
            self.thread_chain.append(chain)
            for index in thread.statements:
                s = statements[index]
                self._append(chain, self.step(StepKind.ISSUE, index))
                if holds_thread(s):
                    self._append(chain, self.step(StepKind.RETURN, index))
        self.task_chain: dict[int, int] = {}
        """task statement -> the chain of its first step."""
        for (thread, stream), run in self.runs.items():
            subchains: list[int] = []
            members: dict[int, int] = {}
            for u in run:
                rank = 0
                if u.batch is not None:
                    rank = members.get(u.batch, 0)
                    members[u.batch] = rank + 1
                while len(subchains) <= rank:
                    subchains.append(self._new_chain())
                chain = subchains[rank]
                self.task_chain[u.index] = chain
                for kind in ((StepKind.START, StepKind.END) if u.running else (StepKind.COMPLETE,)):
                    self._append(chain, self.step(kind, u.index))
        for key, run in self.runs.items():
            chain = self.thread_chain[key[0]]
            self.run_issue_index[key] = [self.index_on(self.step(StepKind.ISSUE, u.index), chain)
                                         for u in run]

        # Per-name lists.
        self.records: dict[int, list[Statement]] = {}
        self.resets: dict[int, list[Statement]] = {}
        self.notifies: dict[int, list[Statement]] = {}
        self.awaits: dict[int, list[Statement]] = {}
        self.allocs: dict[int, list[Statement]] = {}
        self.frees: dict[int, list[Statement]] = {}
        self.accessing: dict[int, list[Statement]] = {}
        for s in statements:
            if s.op is Op.RECORD:
                self.records.setdefault(s.event, []).append(s)
            elif s.op is Op.RESET:
                self.resets.setdefault(s.event, []).append(s)
            elif s.op is Op.NOTIFY:
                self.notifies.setdefault(s.notify, []).append(s)
            elif s.op is Op.AWAIT:
                self.awaits.setdefault(s.notify, []).append(s)
            elif s.op is Op.ALLOC:
                for memory in s.lifetime_memories:
                    self.allocs.setdefault(memory, []).append(s)
            if s.op is Op.FREE:
                for memory in s.lifetime_memories:
                    self.frees.setdefault(memory, []).append(s)
            if s.operation.accesses and s.accesses:
                for memory in dict.fromkeys(a.memory for a in s.accesses):
                    self.accessing.setdefault(memory, []).append(s)

    # --- chains -----------------------------------------------------------------------------

    def _new_chain(self) -> int:
        self.chains.append([])
        return len(self.chains) - 1

    def _append(self, chain: int, step: int) -> None:
        self.on_chain.setdefault(step, []).append((chain, len(self.chains[chain])))
        self.chains[chain].append(step)

    def primary(self, step: int) -> tuple[int, int]:
        return self.on_chain[step][0]

    def index_on(self, step: int, chain: int) -> int:
        for c, i in self.on_chain[step]:
            if c == chain:
                return i
        raise KeyError((step, chain))

    def by_chain(self, steps) -> dict[int, list[tuple[int, int]]]:
        """Steps grouped by primary chain: chain -> [(index, step)] in chain order."""
        grouped: dict[int, list[tuple[int, int]]] = {}
        for step in dict.fromkeys(steps):
            chain, index = self.primary(step)
            grouped.setdefault(chain, []).append((index, step))
        for items in grouped.values():
            items.sort()
        return grouped

    # --- steps of a statement ------------------------------------------------------------------

    def step(self, kind: StepKind, statement: int) -> int:
        return self.step_id[(kind, statement)]

    def has_step(self, kind: StepKind, statement: int) -> bool:
        return (kind, statement) in self.step_id

    def issue(self, statement: Statement) -> int:
        return self.step_id[(StepKind.ISSUE, statement.index)]

    def first_step(self, statement: Statement) -> int:
        """Where the statement's work (or its access) begins: task start/complete, host issue."""
        if statement.is_task:
            kind = StepKind.START if statement.running else StepKind.COMPLETE
            return self.step_id[(kind, statement.index)]
        return self.step_id[(StepKind.ISSUE, statement.index)]

    def last_step(self, statement: Statement) -> int:
        """Where the statement's work (or its access) ends: task end/complete, host return."""
        if statement.is_task:
            return self.completion(statement)
        return self.thread_done(statement)

    def completion(self, statement: Statement) -> int:
        """The step at which a task has completed."""
        kind = StepKind.END if statement.running else StepKind.COMPLETE
        return self.step_id[(kind, statement.index)]

    def begin(self, statement: Statement) -> int:
        """The step at which a task has *begun*: a running task's start, an instant task's (or
        a zero-duration one's, `Statement.begins_when_done`) completion."""
        if statement.running and not statement.begins_when_done:
            return self.step_id[(StepKind.START, statement.index)]
        return self.completion(statement)

    def thread_done(self, statement: Statement) -> int:
        """The last thread step of a statement (what program order waits for)."""
        if holds_thread(statement):
            return self.step_id[(StepKind.RETURN, statement.index)]
        return self.step_id[(StepKind.ISSUE, statement.index)]

    def signal_step(self, statement: Statement) -> int:
        """When a notify sets / an await clears its notify: task completion or host issue."""
        if statement.is_task:
            return self.completion(statement)
        return self.step_id[(StepKind.ISSUE, statement.index)]

    def lifetime_step(self, statement: Statement) -> int:
        """When an alloc makes memory live / a free makes it dead."""
        if statement.is_task:
            return self.completion(statement)
        if statement.op is Op.FREE:
            return self.step_id[(StepKind.RETURN, statement.index)]
        return self.step_id[(StepKind.ISSUE, statement.index)]

    def earlier_in_run(self, thread: int, stream: int, position: int) -> list[Statement]:
        """Tasks `thread` enqueued on `stream` before its statement at `position`."""
        key = (thread, stream)
        run = self.runs.get(key)
        if not run:
            return []
        return run[: bisect_right(self.run_positions[key], position - 1)]


def latest(tasks: list[Statement]) -> list[Statement]:
    """Of one thread's tasks on one stream (in program order), those whose completion implies
    every other's: the last one, with its batch-mates when it is part of a batch."""
    if not tasks:
        return []
    last = tasks[-1]
    if last.batch is None:
        return [last]
    return [u for u in tasks if u.batch == last.batch]
