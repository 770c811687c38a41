"""Explanations: the executor's state in words, for deadlocks and dead uses.

A deadlock is reported as every unfinished thread and task with what it waits for (the
reason the machine's blockers give for its next step); a use after free names the free that
made the memory dead. These read the machine and a state; they change nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from checker.ir import Program
from checker.witness import StepKind
from checker.executor.state import DONE, ENQUEUED_AFTER_FREE, NEW, RUNNING, USE_AFTER_FREE

if TYPE_CHECKING:
    from checker.executor.machine import Machine


def describe(program: Program, i: int) -> str:
    """`s1: wait ready (line 7)`."""
    st = program.statements[i]
    return f"{program.describe(st)} (line {st.span.line})"


def stuck(machine: "Machine", state) -> tuple[tuple[int, str], ...]:
    """For a state with unfinished work: each unfinished thread and task and what it waits
    for (`notify go not set`), in statement order."""
    m = machine
    out: list[tuple[int, str]] = []
    p = m.program
    for t in range(len(p.threads)):
        i = m.current(state, t)
        if i is None:
            continue
        kind = StepKind.RETURN if state.threads[t] & 1 else StepKind.ISSUE
        why = str(m.blocker(state, m.steps[kind][i]) or "can still move")
        out.append((i, why))
    for q in state.queues:
        for k, h in enumerate(q):
            if k:
                why = (f"waiting for {m.describe(q[0])} ahead of it on "
                       f"{p.streams[m.stream_of[h]].name}")
            elif state.status[h] == RUNNING:
                why = str(m.end_blocker(state, h) or "can still end")
            else:
                # Its own conditions and, for a member that starts with its group, the others'
                # (rule 8); then, for one that may start alone, what its group still lacks.
                blocked = m.first_step_blocker(state, h)
                if blocked is None and m.in_group[h] and m.group(state, h) is not None:
                    blocked = m.group_blocker(state, m.group(state, h))
                why = str(blocked or "can still move")
            out.append((h, why))
    out.sort()
    return tuple(out)


def killer(machine: "Machine", state, i: int, kind: str = USE_AFTER_FREE) -> int | None:
    """The latest free that made bytes statement i touches dead: completed (run order),
    or enqueued (launch order, for ENQUEUED_AFTER_FREE)."""
    found = killers(machine, state, i, kind)
    return found[-1] if found else None


def killers(machine: "Machine", state, i: int, kind: str = USE_AFTER_FREE) -> list[int]:
    """Every free (in program order) that made bytes statement i touches dead, as `killer`
    finds the latest: a use of two freed buffers names both."""
    m = machine
    if kind == ENQUEUED_AFTER_FREE:
        # (reported when the task starts: its memory may have been allocated again since)
        bad = state.launch_dead & m.launch_touch[i] or m.launch_touch[i]
        return [f for f in m.frees if state.status[f] != NEW
                and (m.launch_life[f] & bad or f in m.tensor_frees[i])]  # (or its tensor's own free)
    bad = state.dead & state.freed & m.touch[i]
    return [f for f in m.frees if state.status[f] == DONE and m.life[f] & bad]
