"""Benchmark the SMT engine on specs with several host threads sharing events and streams.

Usage: python bench/bench_smt.py [--threads 3] [--statements 30] [--seeds 3] [--timeout 10] [--signals]

For each seed it builds one spec (every thread enqueues kernels on shared streams that read
and write shared buffers, records and waits on shared events, syncs, and runs host code),
then prints: lowered statements and steps, encoding time, how many race candidates the
must-happen-before pruning left for Z3, the slowest and the mean race query, and the total.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from checker.findings import FindingKind  # noqa: E402
from checker.frontend import load_text  # noqa: E402
from checker.smt.encode import Encoding  # noqa: E402
from checker.smt.answers import assemble  # noqa: E402
from checker.smt.queries import Analysis  # noqa: E402
from checker.smt.solve import Budget, Unknown  # noqa: E402


def declarations(events: int) -> list[str]:
    """What `random_statement` uses: streams s[4], buffers x[4] and host_out, `events`
    snapshot events ev[...], the flag event `ready` and the notify `go`."""
    return [
        "device npu0 { compute 2 copy 2 }",
        "buffer x[4] 1MiB on npu0",
        "buffer host_out 1MiB on host pinned",
        "stream s[4] on npu0",
        f"event ev[{events}]",
        "event ready flag",
        "notify go",
    ]

def random_statement(rng: random.Random, kind: str, event) -> str:
    """One statement of `kind` on the random specs' streams s[4], buffers x[4] and host_out,
    events ev[...] (`event()` draws the index), flag `ready` and notify `go`."""
    s = rng.randrange(4)
    if kind == "kernel":
        r, w = rng.randrange(4), rng.randrange(4)
        return f"s[{s}]: kernel k reads x[{r}] writes x[{w}] 1ms"
    if kind in ("record", "wait"):
        return f"s[{s}]: {kind} ev[{event()}]"
    if kind == "sync":
        return f"sync s[{s}]"
    if kind in ("record_flag", "wait_flag"):
        return f"s[{s}]: {kind.split('_')[0]} ready"
    if kind in ("notify", "await"):
        return f"s[{s}]: {kind} go"
    if kind == "host":
        return "host consume reads host_out"
    return f"s[{s}]: copy host_out <- x[{rng.randrange(4)}] 1ms"


def make_spec(seed: int, threads: int, statements: int, signals: bool = False) -> str:
    """Kernels, records, waits, syncs, host code and copies; with `signals`, also flag
    events and notify/await hand-offs (which make the deadlock question a real one)."""
    rng = random.Random(seed)
    lines = declarations(events=3)
    kinds = ["kernel", "record", "wait", "sync", "host", "copy"]
    weights = [10, 4, 4, 1, 1, 1]
    if signals:
        kinds += ["record_flag", "wait_flag", "notify", "await"]
        weights += [1, 1, 1, 1]
    for t in range(threads):
        lines.append(f"thread worker{t} {{")
        for _ in range(statements):
            kind = rng.choices(kinds, weights=weights)[0]
            lines.append("  " + random_statement(rng, kind, lambda: str(rng.randrange(3))))
        lines.append("}")
    return "\n".join(lines) + "\n"


class TimedAnalysis(Analysis):
    """Analysis that records the wall time of every solver question (either session)."""

    def __init__(self, program, budget):
        super().__init__(program, budget)
        self.times: list[tuple[str, float]] = []

    def ask(self, query, cut=(), relaxed=False):
        began = time.perf_counter()
        verdict = super().ask(query, cut, relaxed)
        self.times.append((type(verdict).__name__, time.perf_counter() - began))
        return verdict


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=3)
    parser.add_argument("--statements", type=int, default=30)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=10.0)
    parser.add_argument("--signals", action="store_true",
                        help="add flag events and notifies (asks the deadlock question)")
    args = parser.parse_args()
    for seed in range(args.seeds):
        text = make_spec(seed, args.threads, args.statements, args.signals)
        program = load_text(text, f"bench-{seed}").program
        began = time.perf_counter()
        Encoding(program).base()
        encode_s = time.perf_counter() - began
        began = time.perf_counter()
        analysis = TimedAnalysis(program, Budget(args.timeout))
        setup_s = time.perf_counter() - began
        candidates = len(analysis.race_candidates())
        accessing = sum(1 for s in program.statements if s.accesses)
        began = time.perf_counter()
        analysis.races(runs=False, repair=False)  # the solver alone: what this measures
        race_s = time.perf_counter() - began
        race_times = [t for _, t in analysis.times]
        race_kinds = [k for k, _ in analysis.times]
        began = time.perf_counter()
        analysis.lifetimes(runs=False)
        began = time.perf_counter()
        analysis.deadlock(runs=False)
        deadlock_s = time.perf_counter() - began
        findings = assemble(program, analysis.parts, None)
        deadlocks = sum(1 for f in findings if f.kind is FindingKind.DEADLOCK)
        unknown = sum(1 for kind, _ in analysis.times if kind == Unknown.__name__)
        races = sum(1 for f in findings if f.kind is FindingKind.RACE)
        print(
            f"seed {seed}: {len(program.statements)} statements, {len(analysis.encoding.steps)} steps, "
            f"{accessing * (accessing - 1) // 2} access pairs -> {candidates} candidates after pruning | "
            f"encode {encode_s:.2f}s, session+pruning {setup_s:.2f}s | "
            f"race queries: {race_kinds.count('Sat')} sat + {race_kinds.count('Unsat')} unsat, "
            f"total {race_s:.2f}s, mean {sum(race_times) / max(1, len(race_times)):.3f}s, "
            f"max {max(race_times, default=0):.3f}s | deadlock query {deadlock_s:.2f}s "
            f"({'deadlock' if deadlocks else 'none or skipped'}) | "
            f"{races} race findings, {unknown} unknown"
        )


if __name__ == "__main__":
    main()
