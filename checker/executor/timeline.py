"""A drawable record of one execution: who ran what, where, from when to when.

Both the simulator (times in nanoseconds) and the replay of a witness (no times: each step
takes one unit) produce a `Timeline`, so the trace and Gantt writers work for both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from checker.ir import NS_PER_MS, Op, Program, Statement


def label_of(program: Program, statement: Statement) -> str:
    """What a bar is called: `program.describe`, with a copy's direction spelled out."""
    text = program.describe(statement)
    if statement.op is Op.COPY and len(statement.accesses) == 2:
        source, destination = statement.accesses
        text += f" {access_text(program, destination)} <- {access_text(program, source)}"
    return text


def access_text(program: Program, access) -> str:
    """`input[1]`, or `kv[0:4194304]` for part of a memory (loop variables resolved)."""
    memory = program.memories[access.memory]
    if access.start == 0 and access.end == memory.size:
        return memory.name
    return f"{memory.name}[{access.start}:{access.end}]"


def short_label(label: str) -> str:
    """The part of a label worth printing inside a narrow bar (`infer`, not `w: kernel infer`)."""
    text = label.split(": ", 1)[-1]
    for keyword in ("kernel ", "callback ", "host "):
        if text.startswith(keyword):
            return text[len(keyword):]
    return text


@dataclass(frozen=True, slots=True)
class Lane:
    """One row of the drawing: a stream, a host thread, or an engine unit."""

    key: str
    """Stable id: `stream:s1`, `thread:main`, `engine:npu0/compute/0`."""
    label: str
    kind: str
    """"stream", "thread" or "engine"."""


class Slice(NamedTuple):
    """One interval on one lane. An instant task has start == end.

    A NamedTuple rather than a frozen dataclass: a simulation makes hundreds of thousands
    of these, and a tuple is several times cheaper to build.
    """

    statement: int
    lane: str
    """`Lane.key` of the row it is drawn on."""
    start: int
    end: int
    label: str
    line: int
    category: str
    """Engine kind (`compute`, `copy`, ...) for a task, `host`, `sync`, `launch` or `instant`."""


@dataclass(frozen=True, slots=True)
class Timeline:
    lanes: tuple[Lane, ...]
    slices: tuple[Slice, ...]
    unit: str
    """"ns" (simulated time) or "step" (a replayed witness, one unit per step)."""
    end: int
    """The last time any slice ends."""

    def to_ms(self, t: int) -> float:
        return t / NS_PER_MS if self.unit == "ns" else float(t)

    def to_json(self) -> dict:
        return {
            "unit": self.unit,
            "end": self.end,
            "lanes": [{"key": l.key, "label": l.label, "kind": l.kind} for l in self.lanes],
            "slices": [
                {"statement": s.statement, "lane": s.lane, "start": s.start, "end": s.end,
                 "label": s.label, "line": s.line, "category": s.category}
                for s in self.slices
            ],
        }
