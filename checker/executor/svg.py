"""A Gantt chart of a timeline as standalone SVG, readable without any viewer.

One row per stream and per host thread; bars coloured by engine kind (host work, syncs and
launch costs have their own colours); instant tasks are thin ticks; statements in
`highlight` (racing or stuck ones) are outlined in red. A time axis in milliseconds (or in
steps, for a replayed witness) runs along the bottom; hovering a bar shows its statement,
line and times.
"""

from __future__ import annotations

from xml.sax.saxutils import escape

from checker.ir import Program
from checker.executor.timeline import Timeline, short_label

COLOURS = {
    "compute": "#4c78a8",
    "copy": "#f58518",
    "h2d": "#f58518",
    "d2h": "#e45756",
    "d2d": "#ff9da6",
    "comm": "#54a24b",
    "callback": "#b279a2",
    "host": "#72b7b2",
    "sync": "#d8d4d0",
    "launch": "#eeca3b",
    "instant": "#333333",
}
LEGEND = ("compute", "copy", "d2h", "comm", "callback", "host", "sync", "launch")

ROW = 26
BAR = 18
LEFT = 150
RIGHT = 30
TOP = 46
WIDTH = 1200


def _nice_step(span: float, target: int = 10) -> float:
    """A round tick interval giving about `target` ticks over `span`."""
    if span <= 0:
        return 1.0
    raw = span / target
    power = 10 ** len(str(int(raw))) / 10 if raw >= 1 else 1.0
    while power > raw:
        power /= 10
    for mult in (1, 2, 5, 10):
        if power * mult >= raw:
            return power * mult
    return power * 10


def gantt_svg(program: Program, timeline: Timeline, highlight: frozenset[int] = frozenset(),
              title: str | None = None) -> str:
    """The timeline as an SVG document (a string)."""
    lanes = [lane for lane in timeline.lanes if lane.kind in ("stream", "thread")]
    row_of = {lane.key: k for k, lane in enumerate(lanes)}
    # Room for the longest row name: "stream " in grey at the edge, the name right-aligned.
    left = max(LEFT, 64 + 8 * max((len(lane.label) for lane in lanes), default=0))
    plot = WIDTH - left - RIGHT
    end = max(timeline.end, 1)
    scale = plot / end
    height = TOP + ROW * len(lanes) + 92
    unit = "ms" if timeline.unit == "ns" else "steps"
    out: list[str] = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12">',
        '<rect width="100%" height="100%" fill="white"/>',
    ]
    heading = title or program.title or program.path
    makespan = timeline.to_ms(timeline.end)
    out.append(f'<text x="{left}" y="20" font-size="15" font-weight="bold">'
               f'{escape(str(heading))}</text>')
    out.append(f'<text x="{WIDTH - RIGHT}" y="20" text-anchor="end">'
               f'end: {makespan:g} {unit}</text>')
    # Rows and their labels.
    for k, lane in enumerate(lanes):
        y = TOP + k * ROW
        if k % 2 == 0:
            out.append(f'<rect x="0" y="{y}" width="{WIDTH}" height="{ROW}" fill="#f6f6f6"/>')
        kind = "stream" if lane.kind == "stream" else "thread"
        out.append(f'<text x="8" y="{y + ROW / 2 + 4}" fill="#888">{kind}</text>')
        out.append(f'<text x="{left - 8}" y="{y + ROW / 2 + 4}" text-anchor="end">'
                   f'{escape(lane.label)}</text>')
    # Time axis.
    axis_y = TOP + ROW * len(lanes)
    out.append(f'<line x1="{left}" y1="{axis_y}" x2="{left + plot}" y2="{axis_y}" stroke="#444"/>')
    total = timeline.to_ms(end)
    step = _nice_step(total)
    t = 0.0
    while t <= total + 1e-9:
        x = left + (t / total) * plot if total else left
        out.append(f'<line x1="{x:.1f}" y1="{TOP}" x2="{x:.1f}" y2="{axis_y + 5}" stroke="#ddd"/>')
        out.append(f'<text x="{x:.1f}" y="{axis_y + 18}" text-anchor="middle">{t:g}</text>')
        t += step
    out.append(f'<text x="{left + plot / 2}" y="{axis_y + 36}" text-anchor="middle">'
               f'time ({unit})</text>')
    # Bars.
    for s in timeline.slices:
        if s.lane not in row_of:
            continue
        y = TOP + row_of[s.lane] * ROW + (ROW - BAR) / 2
        x = left + s.start * scale
        w = (s.end - s.start) * scale
        colour = COLOURS.get(s.category, "#999999")
        hot = s.statement in highlight
        stroke = ' stroke="#d62728" stroke-width="2.5"' if hot else ' stroke="white" stroke-width="0.5"'
        tip = (f"{s.label} (line {s.line}): {timeline.to_ms(s.start):g}-"
               f"{timeline.to_ms(s.end):g} {unit}")
        if w < 1.5:
            # An instant (or too short to see): a tick.
            tick = "#d62728" if hot else colour
            out.append(f'<rect x="{x - 1:.2f}" y="{y:.1f}" width="2" height="{BAR}" fill="{tick}">'
                       f'<title>{escape(tip)}</title></rect>')
            continue
        out.append(f'<rect x="{x:.2f}" y="{y:.1f}" width="{w:.2f}" height="{BAR}" rx="2" '
                   f'fill="{colour}"{stroke}><title>{escape(tip)}</title></rect>')
        text = short_label(s.label)
        if w <= 7 * len(text) + 6:
            text = text.split(" ")[0]  # `copy x <- h` does not fit: `copy`
        if w > 7 * len(text) + 6:
            fg = "#222" if s.category in ("sync", "launch", "host") else "white"
            out.append(f'<text x="{x + 4:.2f}" y="{y + BAR - 5:.1f}" fill="{fg}" '
                       f'pointer-events="none">{escape(text)}</text>')
    # Legend.
    lx = left
    ly = height - 12
    for name in LEGEND:
        out.append(f'<rect x="{lx}" y="{ly - 10}" width="12" height="12" fill="{COLOURS[name]}"/>')
        out.append(f'<text x="{lx + 16}" y="{ly}">{name}</text>')
        lx += 34 + 8 * len(name)
    if highlight:
        out.append(f'<rect x="{lx}" y="{ly - 10}" width="12" height="12" fill="none" '
                   f'stroke="#d62728" stroke-width="2.5"/>')
        out.append(f'<text x="{lx + 16}" y="{ly}">racing / stuck</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"
