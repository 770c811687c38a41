"""Abstract bytes: what each memory segment holds along an execution.

A finding is easier to believe when the corruption is visible. The executor therefore keeps
the contents of every memory segment (`layout.Layout`) as a 64-bit digest. Each access
samples what it reads when it starts; while a write runs, the bytes it writes hold a distinct
*in-flight* value; when it ends, they hold a deterministic digest of the writer's identity and
of what it read (a collective digests what every member of its group read). Two orders of
the same accesses therefore leave different, reproducible values behind.
"""

from __future__ import annotations

import copy
import hashlib
import weakref

from checker.ir import Op
from checker.executor.machine import Machine
from checker.executor.state import bits
from checker.witness import Step, StepKind


def digest(*parts: object) -> int:
    """A stable 64-bit digest (Python's own hash is salted per process)."""
    return int.from_bytes(hashlib.blake2b(repr(parts).encode(), digest_size=8).digest(), "big")


class InFlight(str):
    """The value of bytes a write is in the middle of writing."""


def show(value: object) -> str:
    """A value as people read it: 16 hex digits, or the in-flight marker."""
    if isinstance(value, int):
        return f"{value:016x}"
    return str(value)


_PER_PROGRAM: "weakref.WeakKeyDictionary[Machine, tuple]" = weakref.WeakKeyDictionary()
"""Per machine: what `_per_program` makes, once (every witness confirmed starts a ByteModel)."""

MANY_ACCESSES = 64
"""A statement with more accesses than this has its masks set bit by bit in a byte array."""


def _per_program(machine: Machine) -> tuple[tuple, list[int], list[int]]:
    """The segments' initial values, and per statement the segments it reads and writes as
    bitmasks. Made once per machine: a kernel that writes a whole array of 100,000 buffers
    has 100,000 accesses, and OR-ing their masks one by one into one mask rewrote it each
    time (8.5 s for ten witnesses)."""
    found = _PER_PROGRAM.get(machine)
    if found is not None:
        return found
    program = machine.program
    lay = machine.layout
    initial = []
    for g in range(lay.count):
        m, lo, hi = lay.segment_range(g)
        initial.append(digest("initial", program.memories[m].name, lo, hi))
    reads, writes = [], []
    for st in program.statements:
        both = st.op is Op.ALLREDUCE  # (a collective reads what it writes)
        if len(st.accesses) > MANY_ACCESSES:
            read_bits, write_bits = bytearray(lay.count // 8 + 1), bytearray(lay.count // 8 + 1)
            for acc in st.accesses:
                for g in lay.segments(acc.memory, acc.start, acc.end):
                    for target in ((write_bits, read_bits) if acc.write and both else
                                   (write_bits,) if acc.write else (read_bits,)):
                        target[g >> 3] |= 1 << (g & 7)
            reads.append(int.from_bytes(read_bits, "little"))
            writes.append(int.from_bytes(write_bits, "little"))
            continue
        r = w = 0
        for acc in st.accesses:
            mask = lay.mask(acc.memory, acc.start, acc.end)
            if acc.write:
                w |= mask
            else:
                r |= mask
            if both:
                r |= mask
        reads.append(r)
        writes.append(w)
    found = _PER_PROGRAM[machine] = (tuple(initial), reads, writes)
    return found


class ByteModel:
    """Segment contents along one execution; feed it every step with `observe`."""

    def __init__(self, machine: Machine) -> None:
        self.machine = machine
        initial, self.read_masks, self.write_masks = _per_program(machine)
        self.values: list[object] = list(initial)
        self.sampled: dict[int, tuple[tuple[int, object], ...]] = {}
        """Per started statement: (segment, value) it read when it started."""
        self.before: dict[int, tuple[tuple[int, object], ...]] = {}
        """Per started writer: what its written segments held just before it started."""
        self.outputs: dict[int, int] = {}

    def copy(self) -> "ByteModel":
        """An independent copy: the per-program masks are shared, what changes along an
        execution (values held, what each started statement read and wrote) is copied."""
        other = copy.copy(self)
        other.values = list(self.values)
        other.sampled, other.before, other.outputs = dict(self.sampled), dict(self.before), dict(self.outputs)
        return other

    def observe(self, step: Step) -> None:
        """Update contents for a step that the machine has just accepted."""
        m = self.machine
        st = m.program.statements[step.statement]
        kind = step.kind
        if st.stream is None:
            if st.op in (Op.HOST, Op.FREE):
                if kind is StepKind.ISSUE:
                    self._start(st.index)
                elif kind is StepKind.RETURN:
                    self._end(st.index)
            elif st.op is Op.ALLOC and kind is StepKind.ISSUE:
                self._fresh(st.index)
            return
        if kind is StepKind.START:
            g = m.group_of[st.index]
            for member in (g.members if g is not None else (st.index,)):
                self._start(member)
        elif kind is StepKind.END:
            self._end(st.index)
        elif kind is StepKind.COMPLETE and st.op is Op.ALLOC:
            self._fresh(st.index)

    def output(self, i: int) -> int:
        """What writer i leaves behind (computable once it has started)."""
        if i not in self.outputs:
            g = self.machine.group_of[i]
            members = g.members if g is not None else (i,)
            reads = tuple(self.sampled.get(x, ()) for x in members)
            st = self.machine.program.statements[i]
            self.outputs[i] = digest("write", i, st.op.value, st.name, reads)
        return self.outputs[i]

    def written_value(self, i: int, segment: int) -> int:
        return digest(self.output(i), segment)

    def _start(self, i: int) -> None:
        values = self.values
        self.sampled[i] = tuple((g, values[g]) for g in bits(self.read_masks[i]))
        w = self.write_masks[i]
        if w:
            self.before[i] = tuple((g, values[g]) for g in bits(w))
            marker = InFlight(f"in-flight(line {self.machine.program.statements[i].span.line})")
            for g in bits(w):
                values[g] = marker

    def _end(self, i: int) -> None:
        for g in bits(self.write_masks[i]):
            self.values[g] = self.written_value(i, g)

    def _fresh(self, i: int) -> None:
        for g in bits(self.machine.life[i]):
            self.values[g] = digest("allocated", i, g)

    def combined(self, pairs) -> str:
        """One display value for several segments: in-flight wins, else a digest of all."""
        vals = [v for _, v in pairs]
        for v in vals:
            if isinstance(v, InFlight):
                return str(v)
        if len(vals) == 1:
            return show(vals[0])
        return show(digest(*vals))
