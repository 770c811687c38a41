"""Memory cut into segments, so that liveness and overlap are bit operations.

Every boundary any access or lifetime statement uses cuts its memory; each piece is one
global segment, and a byte range becomes a bitmask of segments. The machine keeps dead and
freed bytes as such masks; the replay's byte model (`data.py`) keeps one value per segment.
"""

from __future__ import annotations

from bisect import bisect_left

from checker.ir import Program


class Layout:
    """The segments of one program's memories: every access and lifetime range is a bitmask."""

    def __init__(self, program: Program) -> None:
        cuts: list[set[int]] = [{0, m.size} for m in program.memories]
        for st in program.statements:
            for acc in st.accesses:
                cuts[acc.memory].update((acc.start, acc.end))
        self.cuts: tuple[tuple[int, ...], ...] = tuple(tuple(sorted(c)) for c in cuts)
        first: list[int] = []
        total = 0
        for c in self.cuts:
            first.append(total)
            total += len(c) - 1
        self.first = tuple(first)
        """Global index of each memory's first segment."""
        self.count = total
        self.owner = tuple(m for m, c in enumerate(self.cuts) for _ in range(len(c) - 1))
        """Memory of each global segment."""

    def mask(self, memory: int, start: int, end: int) -> int:
        """Bitmask of the segments covering [start, end) of `memory`."""
        segments = self.segments(memory, start, end)
        return ((1 << len(segments)) - 1) << segments.start

    def segments(self, memory: int, start: int, end: int) -> range:
        """The global indices of the segments covering [start, end) of `memory` (the bits of
        `mask`)."""
        c = self.cuts[memory]
        lo = bisect_left(c, start)
        hi = bisect_left(c, end)
        base = self.first[memory]
        return range(base + lo, base + max(lo, hi))

    def segment_range(self, segment: int) -> tuple[int, int, int]:
        """(memory, start byte, end byte) of a global segment."""
        m = self.owner[segment]
        k = segment - self.first[m]
        return m, self.cuts[m][k], self.cuts[m][k + 1]
