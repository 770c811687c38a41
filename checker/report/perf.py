"""Text for `simulate` and `optimize`, rendered from their JSON objects (one model, two views)."""

from __future__ import annotations

from checker.messages import ms_text


def _ms(value) -> str:
    return "n/a" if value is None else ms_text(value)


def simulate_text(path: str, data: dict) -> list[str]:
    out = [f"{path}: simulated makespan {_ms(data.get('makespan'))}"]
    if data.get("variant"):
        out.append(f"  the slowest branch combination: {data['variant']}")
    if data.get("deadlocked"):
        out.append("  the simulation got stuck; unfinished work:")
        for item in data.get("stuck", ()):
            out.append(f"    line {item['line']}: {item['waits_for']}")
    engines = data.get("engines") or {}
    if engines:
        out.append("  engines:")
        for name, info in engines.items():
            out.append(f"    {name:<24} x{info['units']}  busy {_ms(info['busy'])}  utilisation {info['utilisation']:.0%}")
    out.append(f"  host busy {_ms(data.get('host_busy'))}, device busy {_ms(data.get('device_busy'))}")
    chain = [item for item in data.get("critical_path") or () if item["end"] > item["start"]]
    if chain:
        out.append("  critical path (the chain that sets the makespan):")
        for item in chain[:16]:
            what = f"{item.get('what', '')} ({item['part']})"
            out.append(f"    line {item['line']:<4} {what:<44} {_ms(item['start'])} -> {_ms(item['end'])}")
        if len(chain) > 16:
            out.append(f"    ... {len(chain) - 16} more")
    if data.get("threads_race"):
        out.append(f"  note: {data['threads_race']}, so this is one run in time of several (here the "
                   "threads step in declaration order at each instant); `check` tries every order for "
                   "`expect makespan`")
    return out


def _solver_text(solver: dict) -> str:
    """`portfolio (z3 + cpsat): program proved by cpsat, bound by the instant bounds`."""
    engine = solver["engine"]
    name = "portfolio (z3 + cpsat)" if engine == "portfolio" else engine
    parts = []
    for kind in ("program", "bound"):
        item = solver.get(kind)
        if not item:
            continue
        by = lambda who: "the instant bounds" if who == "bounds" else who  # noqa: E731
        if item.get("proved_by"):
            parts.append(f"{kind} proved by {by(item['proved_by'])}")
        else:
            parts.append(f"{kind} open (schedule from {item['schedule_by']}, "
                         f"lower bound from {by(item['lower_by'])})")
    return name + (": " + ", ".join(parts) if parts else "")


def optimize_text(path: str, data: dict) -> list[str]:
    span = data["makespan"]
    optimal = data["optimal"]
    proven = data["proven_lower"]

    def tagged(kind: str) -> str:
        value = span.get(kind)
        if value is None:
            return "n/a"
        if optimal.get(kind):
            return f"{_ms(value)} (optimal)"
        lower = proven.get(kind)
        return f"{_ms(value)} (best found; proven >= {_ms(lower)})" if lower is not None else _ms(value)

    out = [f"{path}:"]
    if data.get("variant"):
        out.append(f"  the slowest branch combination: {data['variant']}")
    out.append(f"  as written (simulated)   {_ms(span.get('simulated'))}")
    out.append(f"  best execution (program) {tagged('program')}")
    out.append(f"  overlap bound (bound)    {tagged('bound')}")
    out.append(f"  quick lower bound        {_ms(span.get('lower'))} (the overlap bound's longest chain "
               "or busiest engine, without stream order)")
    solver = data.get("solver") or {}
    if solver.get("engine") not in (None, "none"):
        out.append(f"  solver                   {_solver_text(solver)}")
    report = data.get("report") or {}
    gap = report.get("gap") or {}
    for key, label in (("simulated_vs_program", "simulated - program"), ("program_vs_bound", "program - bound")):
        item = gap.get(key)
        if item:
            out.append(f"  {label}: {_ms(item['ms'])} ({item['percent']:.1f}%)")
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
