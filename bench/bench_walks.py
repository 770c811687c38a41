"""Programs the solver refuses: what `check` reports from random executions, and at what cost.

Two threads of random statements on four shared streams (bench_smt.py's generator) leave so
many orderings open that the solver refuses them from 1,000 statements a thread on. `check`
then walks them at random (`checker/executor/walks.py`) and reports the races, dead uses and
deadlock the walks show, each witness replayed, beside the SP301. Each case runs
`streamproof check -j 1 --format json` in a fresh process; printed: wall seconds, max RSS,
the findings by code, the walks and the racing pairs seen and reported, and the ratio of the
wall clock to the target (30 s: the default budget of one spec is 300 s, a refused program
should cost a user far less).

    python bench/bench_walks.py [--statements 1000 5000] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_smt import make_spec  # noqa: E402

TARGET = 30.0


def run(path: Path, out: Path) -> tuple[float, int, int]:
    """Wall seconds, max RSS (KiB) and exit status of `streamproof check` on `path`."""
    began = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-m", "checker", "check", "-j", "1", "--format", "json",
                              "-o", str(out), str(path)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    return time.perf_counter() - began, usage.ru_maxrss, child.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--statements", type=int, nargs="+", default=[1000, 5000])
    parser.add_argument("--keep", type=Path, help="keep the specs and reports here")
    args = parser.parse_args()
    where = args.keep or Path(tempfile.mkdtemp(prefix="bench_walks_"))
    where.mkdir(parents=True, exist_ok=True)
    os.environ["PYTHONPATH"] = str(Path(__file__).resolve().parent.parent)
    print(f"| case | statements | wall s | max RSS MB | findings | walks | racing pairs seen / reported "
          f"| JSON MB | ratio to {TARGET:g} s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for statements in args.statements:
        for signals in (False, True):
            name = f"two{statements}{'-signals' if signals else ''}"
            spec = where / f"{name}.sched"
            spec.write_text(make_spec(0, 2, statements, signals=signals))
            report = where / f"{name}.json"
            wall, rss, _ = run(spec, report)
            findings = json.loads(report.read_text())["files"][0]["findings"]
            codes = Counter(f["code"] for f in findings)
            refused = next((f for f in findings if f["code"] == "SP301"), {})
            detail = refused.get("detail", {})
            print(f"| {name} | {2 * statements:,} | {wall:.1f} | {rss / 1024:.0f} | "
                  f"{', '.join(f'{c} {n:,}' for c, n in sorted(codes.items()))} | {detail.get('walks', '-')} | "
                  f"{detail.get('racing_pairs_seen', '-')} / {detail.get('racing_pairs_reported', '-')} | "
                  f"{report.stat().st_size / 1e6:.0f} | {wall / TARGET:.2f} |", flush=True)


if __name__ == "__main__":
    main()
