"""Benchmark: streamproof's minimum-makespan search against OR-Tools CP-SAT on the same model.

    python bench/bench_optimize.py [--sizes 50 100 200] [--per-size 3] [--limit 30]
                                    [--out bench/results_optimize.json]

Generates random single-thread specs (N tasks on 4-8 streams of one device with a 2-unit
compute engine and single h2d/d2h copy engines, cross-stream events, host syncs) under
`bench/data/`, lowers each with the front end, builds the optimizer's exact timed model, and
solves it twice with the same time limit: with `checker.optimize.search.minimize` (Z3) and with
an equivalent CP-SAT model (interval variables, precedences, NoOverlap / Cumulative). Reports
for each: the best makespan, the best proven lower bound, whether optimality was proved, and
the time; then the ratios. OR-Tools is a benchmark-only dependency (`pip install ortools`).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from checker.frontend import load_file  # noqa: E402
from checker.optimize import core  # noqa: E402
from checker.optimize.model import Unsupported, program_model  # noqa: E402
from checker.optimize.search import _scale, minimize  # noqa: E402

DATA = ROOT / "bench" / "data"


def generate(tasks: int, seed: int) -> str:
    """A random spec of `tasks` engine tasks on 4-8 streams of one device."""
    rng = random.Random(seed * 7919 + tasks)
    streams = rng.randint(4, 8)
    buffers = max(4, tasks // 6)
    lines = [
        f'spec "bench {tasks} tasks, seed {seed}"',
        "device npu { compute 2 h2d 1 d2h 1 }",
        f"buffer host_in[{buffers}] 1MiB on host pinned",
        f"buffer host_out[{buffers}] 1MiB on host pinned",
        f"buffer dev[{buffers}] 1MiB on npu",
    ]
    lines += [f"stream s{i} on npu" for i in range(streams)]
    lines.append(f"event ev[{tasks}]")
    body = []
    recorded: list[int] = []
    events = 0
    for i in range(tasks):
        s = rng.randrange(streams)
        if recorded and rng.random() < 0.3:
            body.append(f"s{s}: wait ev[{rng.choice(recorded[-6:])}]")
        kind = rng.random()
        dur = f"{rng.randint(1, 20) * 0.1:.1f}ms"
        b = rng.randrange(buffers)
        if kind < 0.6:
            b2 = rng.randrange(buffers)
            body.append(f"s{s}: kernel k{i} reads dev[{b}] writes dev[{b2}] {dur}")
        elif kind < 0.8:
            body.append(f"s{s}: copy dev[{b}] <- host_in[{rng.randrange(buffers)}] {dur}")
        else:
            body.append(f"s{s}: copy host_out[{rng.randrange(buffers)}] <- dev[{b}] {dur}")
        if rng.random() < 0.25:
            body.append(f"s{s}: record ev[{events}]")
            recorded.append(events)
            events += 1
        if rng.random() < 0.02:
            body.append(f"sync s{s}")
    body.append("sync all")
    lines.append("thread main {")
    lines += ["  " + b for b in body]
    lines.append("}")
    return "\n".join(lines) + "\n"


def solve_cpsat(model, limit: float) -> dict:
    """The same timed model in CP-SAT: minimize the makespan."""
    from ortools.sat.python import cp_model

    unit = _scale(model)
    g = core.graph(model)
    horizon = max(core.greedy(model, g, budget=0.0), default=0) // unit + 1
    m = cp_model.CpModel()
    var = {}
    for node in model.nodes:
        if node.anchor is None:
            var[node.index] = m.NewIntVar(0, horizon, f"t{node.index}")

    def at(v):
        node = model.nodes[v]
        return var[node.anchor] + node.offset // unit if node.anchor is not None else var[v]

    for u, v, w in model.edges:
        m.Add(at(v) >= at(u) + w // unit)
    makespan = m.NewIntVar(0, horizon, "makespan")
    for v in range(len(model.nodes)):
        if not g.succs[v]:
            m.Add(makespan >= at(v))
    intervals: list[list] = [[] for _ in model.resources]
    for node in model.nodes:
        for r, d in node.uses:
            intervals[r].append(m.NewFixedSizeIntervalVar(var[node.index], d // unit, f"i{node.index}_{r}"))
    for res, items in zip(model.resources, intervals):
        if not items:
            continue
        if res.capacity == 1:
            m.AddNoOverlap(items)
        else:
            m.AddCumulative(items, [1] * len(items), res.capacity)
    m.Minimize(makespan)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = limit
    solver.parameters.num_workers = 2
    start = time.monotonic()
    status = solver.Solve(m)
    elapsed = time.monotonic() - start
    found = status in (cp_model.OPTIMAL, cp_model.FEASIBLE)
    return {
        "optimal": status == cp_model.OPTIMAL,
        "makespan": int(solver.ObjectiveValue()) * unit if found else None,
        "lower": int(math.ceil(solver.BestObjectiveBound())) * unit,
        "seconds": elapsed,
    }


def solve_z3(model, limit: float) -> dict:
    start = time.monotonic()
    result = minimize(model, "program", start + limit)
    return {"optimal": result.optimal, "makespan": result.makespan, "lower": result.lower,
            "seconds": time.monotonic() - start, "reason": result.reason, "probes": result.probes}


def gap(entry: dict) -> float | None:
    if entry["makespan"] is None:
        return None
    return 100.0 * (entry["makespan"] - entry["lower"]) / entry["makespan"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[50, 100, 200])
    parser.add_argument("--per-size", type=int, default=3)
    parser.add_argument("--limit", type=float, default=30.0, help="seconds per solver per spec")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results_optimize.json"))
    parser.add_argument("--solvers", nargs="+", default=["z3", "cpsat"])
    args = parser.parse_args(argv)
    DATA.mkdir(parents=True, exist_ok=True)
    rows = []
    for size in args.sizes:
        for seed in range(args.per_size):
            path = DATA / f"opt_{size}_{seed}.sched"
            path.write_text(generate(size, seed))
            loaded = load_file(path)
            if loaded.program is None:
                print(f"{path}: does not load: {loaded.diagnostics}", file=sys.stderr)
                return 1
            model = program_model(loaded.program)
            if isinstance(model, Unsupported):
                print(f"{path}: {model.reason}", file=sys.stderr)
                return 1
            bound = core.lower_bound(model)
            row = {"spec": str(path.relative_to(ROOT)), "tasks": size,
                   "engine_tasks": sum(1 for n in model.nodes if n.uses),
                   "instant_lower": bound.best}
            for name in args.solvers:
                row[name] = (solve_z3 if name == "z3" else solve_cpsat)(model, args.limit)
            rows.append(row)
            print(json.dumps(row), flush=True)
    summary = summarize(rows, args.limit)
    Path(args.out).write_text(json.dumps({"limit": args.limit, "rows": rows, "summary": summary}, indent=1))
    print(json.dumps(summary, indent=1))
    return 0


def summarize(rows: list[dict], limit: float) -> dict:
    """Who proved what, time ratios where both proved optimality, gaps elsewhere."""
    both, ratios, only_cpsat, only_z3, gaps = 0, [], [], [], []
    for row in rows:
        z, c = row.get("z3"), row.get("cpsat")
        if not z or not c:
            continue
        if z["optimal"] and c["optimal"]:
            both += 1
            ratios.append(max(z["seconds"], 1e-3) / max(c["seconds"], 1e-3))
        elif c["optimal"]:
            only_cpsat.append(row["spec"])
        elif z["optimal"]:
            only_z3.append(row["spec"])
        if not (z["optimal"] and c["optimal"]):
            gaps.append({"spec": row["spec"], "z3_gap_percent": gap(z), "cpsat_gap_percent": gap(c),
                         "z3_best": z["makespan"], "cpsat_best": c["makespan"],
                         "z3_lower": z["lower"], "cpsat_lower": c["lower"]})
    return {
        "limit_seconds": limit,
        "both_optimal": both,
        "time_ratio_z3_over_cpsat": {
            "geomean": math.exp(statistics.fmean(math.log(r) for r in ratios)) if ratios else None,
            "max": max(ratios) if ratios else None,
            "each": ratios,
        },
        "cpsat_only_optimal": only_cpsat,
        "z3_only_optimal": only_z3,
        "open": gaps,
    }


if __name__ == "__main__":
    raise SystemExit(main())
