"""Shorter programs: each thread issues only its first statements, and statements that order
nothing are left out.

An execution of a program cut short is the start of an execution of the whole one, in which
the threads have not yet gone further: every rule looks only at what was issued before (the
tasks a stream runs first, the record a wait is bound to, the setters of a flag), and a
thread that has not issued its later statements yet cannot have made them matter. A
collective whose members are not all kept never starts in the shorter program, which only
drops executions. So a race or a dead use shown in the shorter program is one of the whole
program; "no" in it says nothing.

A *transparent* statement (`transparent`) orders nothing but the tasks behind it on its
stream: a kernel, memset, callback or asynchronous copy on a stream with no hardware-queue
or legacy-stream peers and no batched tasks, or host code. Left out (`prefix`'s `clear`), it
comes back in the whole program's execution as soon as it can (`Prefix.whole_order`): issued
just before its thread's next statement (at the end when none follows), run and ended the
moment every task enqueued before it on its stream has completed, which is no later than any
task behind it starts. The other way, leaving transparent statements out of an execution of
the whole program leaves an execution of the shorter one: what a step waits for in it (the
latest kept task on a stream, a sync's tasks, a thread's previous statement) has happened
whenever what it waited for in the whole program has. So whether two kept accesses race is
the same question with them or without them, and "no" in a program that keeps every thread
whole, with only transparent statements left out, answers the question
(`Analysis._ask_prefix`).

The shorter program's formulas are much smaller, and the solver finds executions in it that
it does not find in the whole program within seconds (bench/README.md). Each execution it
gives is mapped back to the whole program's steps (`Prefix.whole_order`) and checked there like
any other (`Analysis._ask_prefix`, `Session.admits`).
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, replace

from checker.collectives import program_order_groups
from checker.ir import OPERATIONS, Op, Program, StreamMode
from checker.smt.encode import Encoding
from checker.witness import StepKind

TRANSPARENT_TASKS = frozenset({Op.KERNEL, Op.MEMSET, Op.CALLBACK, Op.COPY})
"""Operations whose task orders nothing but the tasks behind it on its stream (when its
stream has no peers that wait for it, `transparent`)."""


@dataclass(frozen=True, slots=True)
class Prefix:
    program: Program
    """The shorter program."""
    original: tuple[int, ...]
    """Per statement of the shorter program, its index in the whole one."""
    left_out: frozenset[int] = frozenset()
    """Transparent statements of the whole program within the cuts that it does not keep."""

    def whole_order(self, order, shorter: Encoding, whole: Encoding) -> list[int]:
        """`order`, steps of the shorter program's encoding, as the same steps of the whole
        program's encoding, with the left-out statements put back as early as they can run."""
        steps = shorter.steps
        mapped = [whole.step(steps[step].kind, self.original[steps[step].statement]) for step in order]
        if not self.left_out:
            return mapped
        return _put_back(mapped, self.left_out, whole)


def _put_back(mapped: list[int], left_out: frozenset[int], whole: Encoding) -> list[int]:
    """`mapped` (whole-program steps) with every left-out statement issued just before its
    thread's next issued statement (those after its last kept one at the end, once that one
    has finished), and each left-out task started and ended right after the
    task enqueued before it on its stream has completed (its stream runs no batches, so
    that one completed after every earlier one)."""
    program, layout = whole.program, whole.layout
    statements = program.statements
    out: list[int] = []
    issued = [0] * len(program.threads)
    """Per thread, the position of its first statement not issued yet."""
    tail: dict[int, int] = {}
    """Per stream, the task enqueued last."""
    ahead: dict[int, int | None] = {}
    """Per left-out task, the task enqueued just before it on its stream."""
    done: set[int] = set()
    waiting: dict[int, deque[int]] = {}
    """Per stream, left-out tasks enqueued and not yet run, in enqueue order."""

    def enqueue(index: int) -> None:
        stream = statements[index].stream
        if index in left_out:
            ahead[index] = tail.get(stream)
            waiting.setdefault(stream, deque()).append(index)
        tail[stream] = index

    def run_ready(stream: int) -> None:
        queue = waiting.get(stream)
        while queue and (ahead[queue[0]] is None or ahead[queue[0]] in done):
            task = queue.popleft()
            out.extend((layout.step(StepKind.START, task), layout.step(StepKind.END, task)))
            done.add(task)

    def put_back_issue(index: int) -> None:
        statement = statements[index]
        out.append(layout.issue(statement))
        if statement.stream is None:
            out.append(layout.step(StepKind.RETURN, index))  # host code: returns at once
            return
        enqueue(index)
        run_ready(statement.stream)

    for step in mapped:
        kind, index = layout.steps[step].kind, layout.steps[step].statement
        statement = statements[index]
        if kind is StepKind.ISSUE:
            thread = program.threads[statement.thread]
            position = layout.position[index]
            for earlier in thread.statements[issued[statement.thread]:position]:
                if earlier in left_out:  # (a kept one is never skipped: the thread issues in order)
                    put_back_issue(earlier)
            issued[statement.thread] = position + 1
        out.append(step)
        if kind is StepKind.ISSUE and statement.is_task:
            enqueue(index)
        elif kind in (StepKind.END, StepKind.COMPLETE):
            done.add(index)
            run_ready(statement.stream)
    # Left-out statements after a thread's last kept one: issued at the end, once that one
    # has finished (a sync that never returned holds them back, as it holds the thread).
    taken = set(out)
    for thread, at in zip(program.threads, issued):
        if at and layout.thread_done(statements[thread.statements[at - 1]]) not in taken:
            continue
        for index in thread.statements[at:]:
            if index not in left_out:
                break
            put_back_issue(index)
    return out


def transparent(program: Program) -> frozenset[int]:
    """The statements that order nothing but the tasks behind them on their streams (see the
    module docstring): host code, and kernels, memsets, callbacks and asynchronous copies on
    streams that no other stream waits for (no hardware queue shared, no legacy default
    stream on the device) and that run no batched tasks."""
    streams = program.streams
    legacy = {(s.device, s.context) for s in streams if s.mode is StreamMode.LEGACY}
    batched = {s.stream for s in program.statements if s.batch is not None}
    sharing = Counter((s.device, s.context, s.queue) for s in streams if s.queue is not None)
    quiet = {s.index for s in streams if (s.device, s.context) not in legacy and s.index not in batched
             and sharing.get((s.device, s.context, s.queue), 0) <= 1}
    found = set()
    for s in program.statements:
        if s.stream is None:
            if s.op is Op.HOST:
                found.add(s.index)
        elif (s.op in TRANSPARENT_TASKS and OPERATIONS[s.op].interval and not s.blocking
              and s.batch is None and s.stream in quiet):
            found.add(s.index)
    return frozenset(found)


def prefix(program: Program, cuts: tuple[int, ...], keep: frozenset[int] = frozenset(),
           clear: frozenset[int] = frozenset()) -> Prefix:
    """`program` whose thread t issues only its first `cuts[t]` statements, and the
    statements of `clear` (transparent ones, `transparent`) but those of `keep` left out."""
    within = [index for thread, cut in zip(program.threads, cuts) for index in thread.statements[:cut]]
    left_out = frozenset(i for i in within if i in clear and i not in keep)
    kept = sorted(i for i in within if i not in left_out)
    renumber = {old: new for new, old in enumerate(kept)}
    statements = [replace(program.statements[old], index=new, group=None) for new, old in enumerate(kept)]
    threads = tuple(replace(thread, statements=tuple(renumber[s] for s in thread.statements if s in renumber))
                    for thread in program.threads)
    # The groups matched again among the calls kept: each thread keeps a prefix of its calls,
    # so a comm's k-th calls are the whole program's where they are kept; and a comm whose
    # calls two threads enqueued onto one stream may be one thread's alone once cut, and then
    # meets by the program order of what is kept.
    groups, group_of = program_order_groups(statements, program.comms)
    for index, group in group_of.items():
        statements[index] = replace(statements[index], group=group)
    shorter = replace(program, statements=tuple(statements), threads=threads, groups=groups)
    return Prefix(shorter, tuple(kept), left_out)


def cuts_for(program: Program, position: list[int], statements: tuple[int, ...], extra: int,
             step: int) -> tuple[int, ...]:
    """Per thread, how many statements a shorter program asked about `statements` keeps: each
    thread its own of them and `extra` more, rounded up to a multiple of `step` (so that
    questions about nearby statements share one shorter program), at most all. `position`:
    per statement, its place in its thread."""
    count = [0] * len(program.threads)
    for index in statements:
        thread = program.statements[index].thread
        count[thread] = max(count[thread], position[index] + 1)
    return tuple(min(len(thread.statements), -(-(count[thread.index] + extra) // step) * step)
                 for thread in program.threads)
