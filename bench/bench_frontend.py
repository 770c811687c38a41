"""Front end and happens-before fast path on large deterministic specs.

Run it on a quiet machine; it reports CPU time, which other processes do not inflate.

Targets (issue: foundation): lowering a spec that unrolls to 100,000 tasks on 8 streams in
under 3 s and 500 MB; the happens-before race check on it in under 5 s. Target (issue 12):
parsing 1 MB of flat spec (the shape an imported trace has: stream and host statements, no
loops) in under 1 s; the lark parser alone is measured beside it. Each measurement runs in a
fresh process so peak memory (max RSS) belongs to that stage alone; results are printed as
measured value / target ratios (below 1.0 meets the target).

    python bench/bench_frontend.py [--tasks 100000] [--megabytes 1] [--freeing 1000]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import textwrap

SPEC = """\
device npu0 {{ compute 4 copy 2 }}
buffer act[8] 1MiB on npu0
buffer shared 8MiB on npu0
stream s[8] on npu0
event done[8]
thread main {{
  for i in 0..{rounds} {{
    for k in 0..8 {{
      s[k]: wait done[(k + 7) % 8]
      s[k]: kernel layer reads act[(k + 7) % 8], shared[k * 1MiB:(k + 1) * 1MiB] writes act[k] 10us
      s[k]: record done[k]
    }}
  }}
  sync all
}}
"""

FREEING = """\
device d {{ compute 2 copy 1 }}
buffer workspace[2] 1MiB on d
buffer batch 1MiB on d
stream main on d
stream side on d
event produced
thread trainer {{
  for i in 0..{iterations} {{
    let w = i % 2
    main: alloc workspace[w]
    main: kernel forward reads batch writes workspace[w] 1ms
    main: record produced
    side: wait produced
    side: kernel loss reads workspace[w] 1ms
    main: free workspace[w]
  }}
  sync all
}}
"""
"""One thread that frees a buffer each iteration while another stream's kernel may still read
it: a use after free per iteration, n^2 (use, free) instance pairs for the lifetime check."""

TENSORS = """\
device gpu0 {{ compute 2 comm 1 }}
tensor grad 4MiB on gpu0
tensor act 4MiB on gpu0
stream main on gpu0
stream comm on gpu0
event computed
thread trainer {{
  for i in 0..{iterations} {{
    main: alloc grad
    main: kernel backward writes grad 2ms
    main: record computed
    comm: wait computed
    comm: kernel reduce reads grad 3ms
    {record}
    free grad
    main: alloc act
    main: kernel forward writes act 1ms
    free act
  }}
  sync all
}}
"""
"""Caching-allocator tensors in a loop: a gradient reduced on a side stream and freed, its
block handed to the next allocation. Without `record_stream` the reduce races with the
next tensors (a launch-ordered free per iteration for the lifetime check); with it, every
freed block is held out of the pool, each against every earlier one for the lowering."""

CHILD = """
import json, resource, sys, time
sys.path.insert(0, {root!r})
from checker.frontend import load_text
text = sys.stdin.read()
t0, c0 = time.perf_counter(), time.process_time()
loaded = load_text(text, "bench.sched", max_statements=10_000_000)
t1, c1 = time.perf_counter(), time.process_time()
result = {{"lower_s": t1 - t0, "lower_cpu_s": c1 - c0, "statements": len(loaded.program.statements),
          "tasks": sum(1 for s in loaded.program.statements if s.stream is not None)}}
if {analyze}:
    from checker import hb
    t2, c2 = time.perf_counter(), time.process_time()
    findings, complete = hb.analyze(loaded.program)
    result["hb_s"] = time.perf_counter() - t2
    result["hb_cpu_s"] = time.process_time() - c2
    result["findings"] = len(findings)
    result["complete"] = complete
result["max_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(result))
"""


def flat_spec(size: int) -> str:
    """About `size` bytes of statements in one thread, as an imported trace writes them:
    kernels with accesses and byte ranges, copies, records, waits, host calls and syncs."""
    import random

    rng = random.Random(12)
    lines = ["device npu0 { compute 4 copy 2 }", "buffer act[8] 1MiB on npu0",
             "buffer host_in[8] 1MiB on host pinned", "buffer shared 8MiB on npu0", "stream s[8] on npu0",
             "event done[8]", "thread main {"]
    total = sum(len(line) + 1 for line in lines)
    i = 0
    while total < size:
        k = i % 8
        r = rng.random()
        if r < 0.45:
            line = (f"  s[{k}]: kernel layer{i % 97} reads act[{(k + 7) % 8}], shared[{k}MiB:{k + 1}MiB] "
                    f"writes act[{k}] {rng.randint(1, 999)}us")
        elif r < 0.6:
            line = f"  s[{k}]: copy act[{k}] <- host_in[{k}] {rng.randint(1, 99)}.5us"
        elif r < 0.75:
            line = f"  s[{k}]: record done[{k}]"
        elif r < 0.9:
            line = f"  s[{k}]: wait done[{(k + 3) % 8}]"
        elif r < 0.95:
            line = f"  host step{i % 13} reads host_in[{k}] 2us"
        else:
            line = f"  sync s[{k}]"
        lines.append(line)
        total += len(line) + 1
        i += 1
    lines.append("}")
    return "\n".join(lines) + "\n"


PARSE_CHILD = """
import gc, json, sys, time
sys.path.insert(0, {root!r})
from checker import parse
from checker.resources import paused_gc
text = sys.stdin.read()
parse.parse(text)  # warm up (imports, grammar)
fast = []
for _ in range(3):
    spec = None
    gc.collect()
    with paused_gc():  # as the front end runs it: no collection of the new nodes on the way
        c0 = time.process_time()
        spec = parse.parse(text)
        fast.append(time.process_time() - c0)
gc.disable()
parse._parser()
c0 = time.process_time()
assert parse.parse_with_lark(text) == spec
lark = time.process_time() - c0
print(json.dumps({{"parse_cpu_s": min(fast), "lark_cpu_s": lark, "bytes": len(text.encode())}}))
"""


def measure_parse(text: str) -> dict:
    import pathlib

    root = str(pathlib.Path(__file__).resolve().parent.parent)
    code = textwrap.dedent(PARSE_CHILD.format(root=root))
    out = subprocess.run([sys.executable, "-c", code], input=text, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def measure(text: str, analyze: bool) -> dict:
    import pathlib

    root = str(pathlib.Path(__file__).resolve().parent.parent)
    code = textwrap.dedent(CHILD.format(root=root, analyze=analyze))
    out = subprocess.run([sys.executable, "-c", code], input=text, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--megabytes", type=float, default=1.0, help="size of the flat spec to parse")
    parser.add_argument("--freeing", type=int, default=1000, help="iterations of the one-thread freeing loop")
    parser.add_argument("--tensors", type=int, default=1000, help="iterations of the tensor loops")
    args = parser.parse_args()
    flat = flat_spec(int(args.megabytes * 1_000_000))
    parsed = measure_parse(flat)
    mb = parsed["bytes"] / 1_000_000
    per_mb, lark_per_mb = parsed["parse_cpu_s"] / mb, parsed["lark_cpu_s"] / mb
    print(f"parse a flat spec of {mb:.2f} MB ({flat.count(chr(10)):,} lines); CPU seconds, best of 3")
    print(f"parsing:    {per_mb:.2f} s per MB ({mb / parsed['parse_cpu_s']:.2f} MB/s)  "
          f"(target 1 s per MB: ratio {per_mb:.2f})")
    print(f"lark alone: {lark_per_mb:.2f} s per MB ({mb / parsed['lark_cpu_s']:.2f} MB/s), "
          f"{lark_per_mb / per_mb:.1f}x slower; the same syntax tree")
    rounds = max(1, args.tasks // 24)  # 3 tasks per stream per round, 8 streams
    text = SPEC.format(rounds=rounds)
    lowering = measure(text, analyze=False)
    full = measure(text, analyze=True)
    print(f"tasks: {lowering['tasks']:,} ({lowering['statements']:,} statements) on 8 streams")
    print("times are CPU seconds of the measuring process (wall seconds in brackets: other load inflates them)")
    print(f"lowering:   {lowering['lower_cpu_s']:.2f} s [{lowering['lower_s']:.2f}]  (target 3 s: ratio {lowering['lower_cpu_s'] / 3:.2f})"
          f"   peak memory {lowering['max_rss_mb']:.0f} MB (target 500 MB: ratio {lowering['max_rss_mb'] / 500:.2f})")
    print(f"hb check:   {full['hb_cpu_s']:.2f} s [{full['hb_s']:.2f}]  (target 5 s: ratio {full['hb_cpu_s'] / 5:.2f})"
          f"   findings {full['findings']}, complete {full['complete']}, peak memory {full['max_rss_mb']:.0f} MB")
    freeing = measure(FREEING.format(iterations=args.freeing), analyze=True)
    print(f"hb check of a one-thread freeing loop, {args.freeing:,} iterations ({freeing['statements']:,} statements): "
          f"{freeing['hb_cpu_s']:.2f} s [{freeing['hb_s']:.2f}]  (target 5 s: ratio {freeing['hb_cpu_s'] / 5:.2f})"
          f"   findings {freeing['findings']}, complete {freeing['complete']}")
    for record, what in (("", "without record_stream"), ("comm: record_stream grad", "with record_stream")):
        tensors = measure(TENSORS.format(iterations=args.tensors, record=record), analyze=True)
        total = tensors["lower_cpu_s"] + tensors["hb_cpu_s"]
        print(f"a tensor loop {what}, {args.tensors:,} iterations ({tensors['statements']:,} statements): "
              f"lowering {tensors['lower_cpu_s']:.2f} s + hb check {tensors['hb_cpu_s']:.2f} s = {total:.2f} s"
              f"  (target 5 s: ratio {total / 5:.2f})   findings {tensors['findings']}, complete {tensors['complete']}")


if __name__ == "__main__":
    main()
