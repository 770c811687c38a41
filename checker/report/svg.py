"""Gantt charts of timelines as standalone SVG, readable without any viewer.

One row per stream (per engine unit for the overlap bound, which has no stream order) and per
host thread; bars coloured by engine kind (host work, syncs and launch costs have their own
colours); instants are thin ticks; statements in `highlight` (a finding's) are outlined in
red. A bar is labelled with its statement and loop indices (`infer [step=3]`) when they fit;
hovering it shows the full label, source line and times. The time axis is in the unit that
fits the span (ns, µs, ms or s; steps for a replayed witness) with round tick steps, and the
legend lists only the kinds that are drawn. Several charts stack on one time scale, so that
their lengths compare (`optimize --svg`: the best execution above the overlap bound).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from xml.sax.saxutils import escape as _escape

from checker.ir import Program, loop_text
from checker.report.frames import xml_text
from checker.report.timeline import LaneKind, Timeline, short_label
from checker.timing import TimeUnit


def escape(text: str) -> str:
    """Text for the SVG: XML-escaped, with characters XML cannot hold replaced."""
    return _escape(xml_text(text))

COLOURS = {
    "compute": "#4c78a8",
    "copy": "#f58518",
    "h2d": "#fdae6b",
    "d2h": "#e45756",
    "d2d": "#ff9da6",
    "comm": "#54a24b",
    "callback": "#b279a2",
    "host": "#72b7b2",
    "sync": "#d8d4d0",
    "launch": "#eeca3b",
    "instant": "#333333",
}
"""Bar colour per slice category; the legend keeps this order."""
OTHER = "#999999"
HOT = "#d62728"
DARK_TEXT = frozenset({"sync", "launch", "host", "h2d", "d2d"})
"""Categories light enough to need dark text on their bars."""

ROW = 26
BAR = 18
LEFT = 150
RIGHT = 30
WIDTH = 1200
HEAD = 46
SUBTITLE = 24
AXIS = 30
CHAR = 6.5
"""Approximate width of one character of bar text, px."""

SCALES = (("s", 10**9), ("ms", 10**6), ("us", 10**3), ("ns", 1))
"""Time units for the axis, largest first: the largest one the span reaches is used."""
SHOWN = {"us": "&#181;s"}
"""Units spelled differently on the chart (markup, already escaped)."""


@dataclass(frozen=True, slots=True)
class Chart:
    """One timeline to draw, with a subtitle and the statements to outline."""

    timeline: Timeline
    title: str = ""
    highlight: frozenset[int] = frozenset()


def gantt_svg(program: Program, timeline: Timeline, highlight: frozenset[int] = frozenset(),
              title: str | None = None) -> str:
    """One timeline as an SVG document (a string)."""
    return charts_svg(program, (Chart(timeline, "", frozenset(highlight)),), title)


def charts_svg(program: Program, charts, title: str | None = None) -> str:
    """Timelines stacked top to bottom on one time scale, as one SVG document."""
    return _Drawing(program, tuple(charts), title).render()


def axis_unit(unit: TimeUnit, end: int) -> tuple[str, int]:
    """The axis unit for a span of `end` and how many timeline units make one of it."""
    if unit is TimeUnit.STEP:
        return "steps", 1
    for name, size in SCALES:
        if end >= size:
            return name, size
    return "ns", 1


def nice_step(span: float, target: int = 10) -> float:
    """A round tick interval (1, 2 or 5 times a power of ten) giving about `target` ticks."""
    if span <= 0:
        return 1.0
    raw = span / target
    power = 10.0 ** math.floor(math.log10(raw))
    for mult in (1, 2, 5):
        if mult * power >= raw * (1 - 1e-9):
            return mult * power
    return 10 * power


def _num(value: float) -> str:
    return f"{value:.6g}"


class _Drawing:
    def __init__(self, program: Program, charts: tuple[Chart, ...], title: str | None) -> None:
        self.p = program
        self.charts = charts
        self.title = title or program.title or program.path
        self.end = max([max(c.timeline.end, 1) for c in charts] or [1])
        unit = charts[0].timeline.unit if charts else TimeUnit.NS
        self.unit, self.size = axis_unit(unit, self.end)
        self.shown_unit = SHOWN.get(self.unit, self.unit)
        self.rows = [self._rows(c.timeline) for c in charts]
        labels = [len(c.timeline.lanes[k].label) for c, rows in zip(charts, self.rows) for k in rows]
        # Room for the longest row name: its kind in grey at the edge, the name right-aligned.
        self.left = max(LEFT, 64 + 8 * max(labels, default=0))
        self.plot = WIDTH - self.left - RIGHT
        self.px = self.plot / self.end
        self.drawn: set[str] = set()
        self.hot_drawn = False
        self.out: list[str] = []

    @staticmethod
    def _rows(timeline: Timeline) -> list[int]:
        """Device rows (streams; engine units when there are no streams), then threads."""
        lanes = timeline.lanes
        device = (LaneKind.STREAM if any(l.kind is LaneKind.STREAM for l in lanes)
                  else LaneKind.ENGINE)
        return ([k for k, l in enumerate(lanes) if l.kind is device]
                + [k for k, l in enumerate(lanes) if l.kind is LaneKind.THREAD])

    def time(self, t: int) -> str:
        return _num(t / self.size)

    def render(self) -> str:
        out = self.out
        out.append(f'<text x="{self.left}" y="20" font-size="15" font-weight="bold">'
                   f'{escape(str(self.title))}</text>')
        single = len(self.charts) == 1 and not self.charts[0].title
        if single:
            out.append(self._end_text(self.charts[0].timeline, 20))
        y = HEAD if single else HEAD - 10
        for chart, rows in zip(self.charts, self.rows):
            y = self._chart(chart, rows, y)
        out.append(f'<text x="{self.left + self.plot / 2}" y="{y + 8}" text-anchor="middle">'
                   f'time ({self.shown_unit})</text>')
        height = self._legend(y + 34)
        head = [
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
            f'viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12">',
            '<rect width="100%" height="100%" fill="white"/>',
        ]
        return "\n".join(head + out + ["</svg>"]) + "\n"

    def _end_text(self, timeline: Timeline, y: float) -> str:
        return (f'<text x="{WIDTH - RIGHT}" y="{y}" text-anchor="end">'
                f'end: {self.time(timeline.end)} {self.shown_unit}</text>')

    def _chart(self, chart: Chart, rows: list[int], y: float) -> float:
        """Draw one chart from `y` down; returns where the next one starts."""
        out, left, timeline = self.out, self.left, chart.timeline
        if chart.title:
            out.append(f'<text x="{left}" y="{y + 16}" font-size="13" font-weight="bold">'
                       f'{escape(chart.title)}</text>')
            out.append(self._end_text(timeline, y + 16))
            y += SUBTITLE
        top = y
        row_of = {lane: k for k, lane in enumerate(rows)}
        for k, lane_index in enumerate(rows):
            lane = timeline.lanes[lane_index]
            ry = top + k * ROW
            if k % 2 == 0:
                out.append(f'<rect x="0" y="{ry}" width="{WIDTH}" height="{ROW}" fill="#f6f6f6"/>')
            out.append(f'<text x="8" y="{ry + ROW / 2 + 4}" fill="#888">{lane.kind.value}</text>')
            out.append(f'<text x="{left - 8}" y="{ry + ROW / 2 + 4}" text-anchor="end">'
                       f'{escape(lane.label)}</text>')
        axis_y = top + ROW * len(rows)
        self._axis(top, axis_y)
        ticks = []
        for s in timeline.slices:
            k = row_of.get(s.lane)
            if k is None:
                continue
            y = top + k * ROW + (ROW - BAR) / 2
            if (s.end - s.start) * self.px < 1.5:
                ticks.append((s, y))  # drawn over the bars, so that none hides one
            else:
                self._bar(s, y, s.statement in chart.highlight)
        for s, y in ticks:
            self._bar(s, y, s.statement in chart.highlight)
        return axis_y + AXIS

    def _axis(self, top: float, axis_y: float) -> None:
        out, left = self.out, self.left
        out.append(f'<line x1="{left}" y1="{axis_y}" x2="{left + self.plot}" y2="{axis_y}" '
                   f'stroke="#444"/>')
        total = self.end / self.size
        step = nice_step(total)
        if self.unit == "steps":
            step = max(1.0, math.ceil(step))
        decimals = max(0, -math.floor(math.log10(step) + 1e-9))
        k = 0
        while k * step <= total * (1 + 1e-9):
            t = k * step
            x = left + t * self.size * self.px
            out.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{axis_y + 5}" stroke="#ddd"/>')
            out.append(f'<text x="{x:.1f}" y="{axis_y + 18}" text-anchor="middle">'
                       f'{t:.{decimals}f}</text>')
            k += 1

    def _bar(self, s, y: float, hot: bool) -> None:
        out = self.out
        x = self.left + s.start * self.px
        w = (s.end - s.start) * self.px
        colour = COLOURS.get(s.category, OTHER)
        self.drawn.add(s.category)
        self.hot_drawn |= hot
        loops = loop_text(s.bindings)
        when = f"{self.time(s.start)}-{self.time(s.end)} {self.shown_unit}"
        if self.unit == "steps":  # (the slots of steps numbered from 1, as the witness lists them)
            first, last = s.start // self.size + 1, max(s.start // self.size + 1, -(-s.end // self.size))
            when = f"step {first}" if first == last else f"steps {first}-{last}"
        tip = escape(f"{s.label}{' ' + loops if loops else ''} (line {s.line}): {when}")
        if w < 1.5:
            # An instant (or too short to see): a tick.
            tick = HOT if hot else colour
            out.append(f'<rect x="{x - 1:.2f}" y="{y:.1f}" width="2" height="{BAR}" fill="{tick}">'
                       f'<title>{tip}</title></rect>')
            return
        stroke = (f' stroke="{HOT}" stroke-width="2.5"' if hot
                  else ' stroke="white" stroke-width="0.5"')
        out.append(f'<rect x="{x:.2f}" y="{y:.1f}" width="{w:.2f}" height="{BAR}" rx="2" '
                   f'fill="{colour}"{stroke}><title>{tip}</title></rect>')
        short = short_label(s.label)
        candidates = []
        for name in (short, short.split(" ")[0]):  # `copy x <- h`, or just `copy`
            if loops:  # `infer [step=3]`, or just `infer [3]`
                values = ",".join(str(v) for _, v in s.bindings)
                candidates += [f"{name} {loops}", f"{name} [{values}]"]
            candidates.append(name)
        for text in candidates:
            if w > CHAR * len(text) + 6:
                fg = "#222" if s.category in DARK_TEXT else "white"
                out.append(f'<text x="{x + 4:.2f}" y="{y + BAR - 5:.1f}" fill="{fg}" '
                           f'pointer-events="none">{escape(text)}</text>')
                break

    def _legend(self, y: float) -> int:
        """The kinds drawn, in `COLOURS` order, wrapped to the width; returns the height."""
        out = self.out
        names = [n for n in COLOURS if n in self.drawn] + sorted(self.drawn - set(COLOURS))
        items = [(n, f'fill="{COLOURS.get(n, OTHER)}"') for n in names]
        if self.hot_drawn:
            items.append(("in the finding", f'fill="none" stroke="{HOT}" stroke-width="2.5"'))
        x = self.left
        for name, paint in items:
            width = 34 + CHAR * len(name)
            if x + width > WIDTH - RIGHT and x > self.left:
                x, y = self.left, y + 20
            out.append(f'<rect x="{x}" y="{y - 10}" width="12" height="12" {paint}/>')
            out.append(f'<text x="{x + 16}" y="{y}">{escape(name)}</text>')
            x += width
        return int(y + 14)
