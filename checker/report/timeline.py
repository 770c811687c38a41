"""A drawable record of one execution: which row ran what, from when to when.

`build` is the one place that turns a backend's `Timing` (flat intervals, see
`checker/timing.py`) into rows and bars: one lane per stream, per host thread and per engine
unit that ran a task; one slice per interval on each lane it occupies (a task on its stream
and on its engine unit). The SVG and Chrome trace writers draw a `Timeline` and nothing else.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import NamedTuple

from checker.ir import Engine, Op, Program, Statement
from checker.timing import Part, Timing, TimeUnit


class LaneKind(str, enum.Enum):
    STREAM = "stream"
    THREAD = "thread"
    ENGINE = "engine"
    """One unit of one engine of one device."""


@dataclass(frozen=True, slots=True)
class Lane:
    """One row: a stream, a host thread, or an engine unit."""

    kind: LaneKind
    index: int
    """The stream's or thread's index; for an engine unit, its device's index."""
    label: str
    device: int | None = None
    """The device a stream or engine unit belongs to (None for a thread)."""
    engine: str | None = None
    unit: int | None = None


class Slice(NamedTuple):
    """One bar on one lane. An instant has start == end.

    A NamedTuple rather than a frozen dataclass: a simulation makes hundreds of thousands
    of these, and a tuple is several times cheaper to build.
    """

    statement: int
    lane: int
    """Index into `Timeline.lanes`."""
    start: int
    end: int
    label: str
    line: int
    category: str
    """Engine kind (`compute`, `copy`, ...) for a task; `host`, `sync`, `launch` or `instant`."""
    bindings: tuple[tuple[str, int], ...] = ()
    """Loop and let variables of the statement (`step=3`)."""


@dataclass(frozen=True, slots=True)
class Timeline:
    lanes: tuple[Lane, ...]
    slices: tuple[Slice, ...]
    """Sorted by start, end, statement."""
    unit: TimeUnit
    end: int
    """When the execution ends: the makespan, or the number of steps."""


def build(program: Program, timing: Timing) -> Timeline:
    """The lanes and slices of one execution's intervals."""
    return _Builder(program, timing).build()


# ---------------------------------------------------------------------- labels


def label_of(program: Program, statement: Statement) -> str:
    """What a bar is called: `program.describe`, with a copy's direction spelled out."""
    text = program.describe(statement)
    if statement.op is Op.COPY and len(statement.accesses) == 2 and " <- " not in text:  # (not twice)
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


# ---------------------------------------------------------------------- building

_HOST_CATEGORY = {Op.HOST: "host", Op.FREE: "host", Op.SYNC: "sync"}


class _Builder:
    def __init__(self, program: Program, timing: Timing) -> None:
        self.p = program
        self.timing = timing
        self._labels: dict[tuple, str] = {}

    def label(self, st: Statement) -> str:
        """`label_of`, cached per distinct description (describe is slow on enum members)."""
        if st.op is Op.COPY:
            return label_of(self.p, st)
        key = (st.op, st.stream, st.name, st.event, st.notify, st.memory, st.sync, st.target,
               st.comm, st.peer, st.form)
        text = self._labels.get(key)
        if text is None:
            text = self._labels[key] = label_of(self.p, st)
        return text

    def build(self) -> Timeline:
        p, timing = self.p, self.timing
        lanes: list[Lane] = []
        stream_lane: list[int | None] = [None] * len(p.streams)
        if timing.streams:
            for s in p.streams:
                stream_lane[s.index] = len(lanes)
                lanes.append(Lane(LaneKind.STREAM, s.index, s.name, s.device))
        thread_lane = []
        for t in p.threads:
            thread_lane.append(len(lanes))
            lanes.append(Lane(LaneKind.THREAD, t.index, t.name))
        # Engine units: as many rows as the device has units (more, should a task say so).
        units: dict[tuple[int, Engine], int] = {}
        for interval in timing.intervals:
            if interval.part is Part.TASK and interval.unit is not None:
                st = p.statements[interval.statement]
                key = (st.device, st.engine)
                units[key] = max(units.get(key, 0), interval.unit + 1)
        engine_lane: dict[tuple[int, Engine, int], int] = {}
        for dev, engine in sorted(units, key=lambda key: (key[0], key[1].value)):
            device = p.devices[dev]
            for u in range(max(units[(dev, engine)], device.count(engine))):
                engine_lane[(dev, engine, u)] = len(lanes)
                lanes.append(Lane(LaneKind.ENGINE, dev, f"{device.name} {engine.value} #{u}", dev,
                                  engine.value, u))

        slices: list[Slice] = []
        add = slices.append
        statements = p.statements
        for i, part, start, end, unit in timing.intervals:
            st = statements[i]
            line = st.span.line
            loops = st.bindings
            if part is Part.TASK:
                label = self.label(st)
                category = st.engine.value if st.engine is not None and st.running else "instant"
                lane = stream_lane[st.stream]
                if lane is not None:
                    add(Slice(i, lane, start, end, label, line, category, loops))
                if unit is not None:
                    add(Slice(i, engine_lane[(st.device, st.engine, unit)], start, end,
                              label, line, category, loops))
            elif part is Part.HOST:
                add(Slice(i, thread_lane[st.thread], start, end, self.label(st), line,
                          _HOST_CATEGORY.get(st.op, "instant"), loops))
            elif part is Part.LAUNCH:
                add(Slice(i, thread_lane[st.thread], start, end, f"launch {self.label(st)}", line,
                          "launch", loops))
            elif part is Part.BLOCKED:
                add(Slice(i, thread_lane[st.thread], start, end, f"blocked on {self.label(st)}",
                          line, "sync", loops))
            else:
                add(Slice(i, thread_lane[st.thread], start, end, f"enqueue {self.label(st)}",
                          line, "instant", loops))
        slices.sort(key=_order)
        return Timeline(tuple(lanes), tuple(slices), timing.unit, timing.end)


def _order(s: Slice) -> tuple[int, int, int]:
    return (s.start, s.end, s.statement)
