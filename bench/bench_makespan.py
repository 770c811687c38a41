"""`expect makespan` on racing threads: how many bounds `check` decides, and at what cost.

Random programs of 2-3 threads sharing streams and events (bench_smt.py's generator; every
other one with launch costs and host time, a third with flags and notifies), each with a
bound where the question is hard: just below the lower bound every execution keeps, at it,
halfway to the shortest of 100 shuffled runs in time, and just below that run. Each bound is
checked in-process (`check_loaded`) twice: with every run in time explored
(`checker/executor/timed.py`) and without (the shuffled runs, the lower bounds and the solver
alone, as before). Printed: the verdicts (met, not met: SP401, unknown: SP301) and CPU
seconds of each, and the share left unknown (target 0).

    python bench/bench_makespan.py [--seeds 0 300]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_smt import make_spec  # noqa: E402

import checker.analyze as analyze  # noqa: E402
import checker.executor.timed as timed  # noqa: E402
from checker.crosscheck import must_chain  # noqa: E402
from checker.determinism import nondeterminism  # noqa: E402
from checker.executor.simulate import simulate  # noqa: E402
from checker.frontend import load_text  # noqa: E402
from checker.optimize import _stream_loads  # noqa: E402


def cases(first: int, last: int):
    """(seed, spec text with one `expect makespan` bound), four bounds per racing program."""
    for seed in range(first, last):
        text = make_spec(seed, 2 + seed % 2, 3 + seed % 5, signals=seed % 3 != 0)
        if seed % 2:
            text = text.replace("compute 2 copy 2", "compute 2 copy 2 launch 2us").replace(
                "host consume reads host_out", "host consume reads host_out 3us")
        program = load_text(text).program
        if program is None or nondeterminism(program) is None:
            continue
        finished = [run.makespan for run in (simulate(program, shuffle=s, interleave=s % 2 == 1)
                                             for s in range(100)) if not run.deadlocked]
        if not finished:
            continue
        shortest, bound = min(finished), max(must_chain(program), _stream_loads(program))
        for limit in sorted({bound - 1, bound, (bound + shortest) // 2, shortest - 1}):
            if limit > 0:
                yield seed, text + f"\nexpect makespan <= {limit}ns\n"


def verdict(text: str) -> str:
    report = analyze.check_loaded(load_text(text, "bench.sched"), analyze.Options())
    line = text.rstrip("\n").count("\n") + 1
    if any(d.code.value == "SP401" and d.annotations[0].span.line == line for d in report.diagnostics):
        return "not met"
    if any(f.code.value == "SP301" and f.detail.get("about") == "makespan" for f in report.findings):
        return "unknown"
    return "met"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs=2, default=[0, 300], metavar=("FIRST", "LAST"))
    args = parser.parse_args()
    texts = [text for _, text in cases(*args.seeds)]
    print(f"{len(texts)} bounds on racing programs (seeds {args.seeds[0]}-{args.seeds[1] - 1})")
    print("| search | met | not met | unknown | CPU s | CPU s per bound | unknown share (target 0) |")
    print("|---|---|---|---|---|---|---|")
    explore_up_to = timed.STATEMENTS_UP_TO
    for label, up_to in (("every run in time", explore_up_to), ("without it", -1)):
        timed.STATEMENTS_UP_TO = up_to
        began = time.process_time()
        counts = Counter(verdict(text) for text in texts)
        spent = time.process_time() - began
        print(f"| {label} | {counts['met']} | {counts['not met']} | {counts['unknown']} | {spent:.1f} "
              f"| {spent / max(len(texts), 1):.3f} | {counts['unknown'] / max(len(texts), 1):.3f} |")
    timed.STATEMENTS_UP_TO = explore_up_to


if __name__ == "__main__":
    main()
