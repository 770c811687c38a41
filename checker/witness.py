"""The step vocabulary that executions are written in.

An execution is a sequence of atomic steps. Both backends speak it: the SMT engine decodes a
model into a step sequence, and the executor replays a step sequence, checking each step is
legal. This module only names the steps; what makes a step legal is each backend's business.

Every statement contributes a fixed set of steps:

* a task with a running interval (`Operation.interval` in `checker.ir.OPERATIONS`: kernel,
  memset, copy, callback, collectives, send, recv, free on a stream): `start` and `end`.
  Each member of a collective group starts on its own, and ends on its own once every member
  has started.
* a task that takes no time (record, wait, reset, notify, await, alloc on a stream): `complete`.
* every host-thread statement: `issue` (the thread executes it: enqueue a task, start a host
  function, call sync, notify, await, alloc, start a host free).
* a host statement that holds its thread (host function, host free, sync, a copy to or from
  pageable memory): `return` as well, when the thread moves on.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import NamedTuple

from checker.ir import Op, Statement


class StepKind(str, enum.Enum):
    ISSUE = "issue"
    RETURN = "return"
    START = "start"
    END = "end"
    COMPLETE = "complete"


class Step(NamedTuple):
    """One atomic step of one statement. A named tuple rather than a dataclass: the
    exhaustive search hashes millions of them, and a tuple's hash is computed in C."""

    kind: StepKind
    statement: int

    def to_json(self) -> list:
        return [self.kind.value, self.statement]

    @staticmethod
    def from_json(value: object) -> "Step":
        if (
            not isinstance(value, (list, tuple))
            or len(value) != 2
            or type(value[1]) is not int  # (not a JSON true or false)
            or not isinstance(value[0], str)
            or value[0] not in _KIND_OF
        ):
            raise ValueError(f"not a step: {str(value)[:80]}")
        return Step(_KIND_OF[value[0]], value[1])


_KIND_OF = {kind.value: kind for kind in StepKind}
"""Each step kind by its name in JSON (a witness file of millions of steps reads them all)."""


def holds_thread(statement: Statement) -> bool:
    """Whether the host statement keeps its thread busy until a `return` step."""
    if statement.stream is not None:
        return statement.blocking
    return statement.op in (Op.HOST, Op.FREE, Op.SYNC)


def task_steps(statement: Statement) -> tuple[StepKind, ...]:
    """The steps of the task a stream statement enqueues (empty for host statements)."""
    if statement.stream is None:
        return ()
    if statement.running:
        return (StepKind.START, StepKind.END)
    return (StepKind.COMPLETE,)


def thread_steps(statement: Statement) -> tuple[StepKind, ...]:
    """The steps the calling thread takes for a statement."""
    if holds_thread(statement):
        return (StepKind.ISSUE, StepKind.RETURN)
    return (StepKind.ISSUE,)


@dataclass(frozen=True, slots=True)
class Witness:
    """A concrete execution prefix that exhibits a finding."""

    steps: tuple[Step, ...]

    def to_json(self) -> dict:
        return {"steps": [step.to_json() for step in self.steps]}

    @staticmethod
    def from_json(value: object) -> "Witness":
        if not isinstance(value, dict) or not isinstance(value.get("steps"), list):
            raise ValueError("a witness is an object with a list under 'steps'")
        return Witness(tuple(Step.from_json(item) for item in value["steps"]))
