"""Text for `simulate` and `optimize`, rendered from their JSON objects (one model, two views)."""

from __future__ import annotations


def _ms(value) -> str:
    return "n/a" if value is None else f"{value:.3f} ms"


def simulate_text(path: str, data: dict) -> list[str]:
    out = [f"{path}: simulated makespan {_ms(data.get('makespan'))}"]
    if data.get("deadlock"):
        out.append(f"  the simulation got stuck: {data.get('deadlock')}")
    engines = data.get("engines") or {}
    if engines:
        out.append("  engines:")
        for name, info in engines.items():
            if isinstance(info, dict):
                util = info.get("utilisation")
                busy = info.get("busy")
                count = info.get("count")
                out.append(f"    {name:<24} x{count if count is not None else '?'}  busy {_ms(busy)}"
                           + (f"  utilisation {util:.0%}" if isinstance(util, (int, float)) else ""))
    for key, label in (("host_busy", "host busy"), ("device_busy", "device busy")):
        if key in data:
            out.append(f"  {label}: {_ms(data[key])}")
    chain = data.get("critical_path") or []
    if chain:
        out.append("  critical path:")
        for item in chain[:12]:
            if isinstance(item, dict):
                out.append(f"    line {item.get('line', '?'):<4} {item.get('what', '')}  "
                           f"{_ms(item.get('start'))} -> {_ms(item.get('end'))}")
        if len(chain) > 12:
            out.append(f"    ... {len(chain) - 12} more")
    return out


def optimize_text(path: str, data: dict) -> list[str]:
    span = data["makespan"]
    optimal = data["optimal"]
    proven = data["proven_lower"]

    def tagged(kind: str) -> str:
        value = span.get(kind)
        if value is None:
            return "n/a"
        if optimal.get(kind):
            return f"{value:.3f} ms (optimal)"
        lower = proven.get(kind)
        return f"{value:.3f} ms (best found; proven >= {lower:.3f} ms)" if lower is not None else f"{value:.3f} ms"

    out = [f"{path}:"]
    out.append(f"  as written (simulated)   {_ms(span.get('simulated'))}")
    out.append(f"  best execution (program) {tagged('program')}")
    out.append(f"  overlap bound (bound)    {tagged('bound')}")
    out.append(f"  instant lower bound      {_ms(span.get('lower'))}")
    report = data.get("report") or {}
    gap = report.get("gap") or {}
    for key, label in (("simulated_vs_program", "simulated - program"), ("program_vs_bound", "program - bound")):
        item = gap.get(key)
        if item:
            out.append(f"  {label}: {item['ms']:.3f} ms ({item['percent']:.1f}%)")
    engines = report.get("engines") or []
    if engines:
        out.append("  engines (in the best execution):")
        for e in engines:
            out.append(f"    {e['name']:<24} x{e['count']}  busy {_ms(e['busy'])}  utilisation {e['utilisation']:.0%}")
    c = report.get("classification")
    if c:
        out.append(f"  {c['kind']}: {c['summary']}")
    for note in list(report.get("notes") or []) + list(data.get("notes") or []):
        out.append(f"  note: {note}")
    return out
