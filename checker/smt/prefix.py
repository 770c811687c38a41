"""Programs cut short: each thread issues only the first statements of its own.

An execution of such a program is the start of an execution of the whole one, in which the
threads have not yet gone further: every rule looks only at what was issued before (the
tasks a stream runs first, the record a wait is bound to, the setters of a flag), and a
thread that has not issued its later statements yet cannot have made them matter. A
collective whose members are not all kept never starts in the shorter program, which only
drops executions. So a race or a dead use shown in the shorter program is one of the whole
program; "no" in it says nothing.

The shorter program's formulas are much smaller, and the solver finds executions in it that
it does not find in the whole program within seconds (bench/README.md). Each execution it
gives is mapped back to the whole program's steps (`Prefix.whole_order`) and checked there like
any other (`Analysis._ask_prefix`, `Session.admits`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from checker.ir import Program
from checker.smt.encode import Encoding


@dataclass(frozen=True, slots=True)
class Prefix:
    program: Program
    """The shorter program."""
    original: tuple[int, ...]
    """Per statement of the shorter program, its index in the whole one."""

    def whole_order(self, order, shorter: Encoding, whole: Encoding) -> list[int]:
        """`order`, steps of the shorter program's encoding, as the same steps of the whole
        program's encoding."""
        steps = shorter.steps
        return [whole.step(steps[step].kind, self.original[steps[step].statement]) for step in order]


def prefix(program: Program, cuts: tuple[int, ...]) -> Prefix:
    """`program` whose thread t issues only its first `cuts[t]` statements."""
    kept = sorted(index for thread, cut in zip(program.threads, cuts) for index in thread.statements[:cut])
    renumber = {old: new for new, old in enumerate(kept)}
    statements = tuple(replace(program.statements[old], index=new) for new, old in enumerate(kept))
    threads = tuple(replace(thread, statements=tuple(renumber[s] for s in thread.statements if s in renumber))
                    for thread in program.threads)
    groups = []
    for group in program.groups:
        members = tuple(renumber[m] for m in group.members if m in renumber)
        groups.append(replace(group, members=members, complete=group.complete and len(members) == len(group.members)))
    shorter = replace(program, statements=statements, threads=threads, groups=tuple(groups))
    return Prefix(shorter, tuple(kept))


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
