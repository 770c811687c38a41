"""Importing a large Kineto trace, and what the written spec then costs.

Target (issue: real programs in): a 200,000-event trace imports in under 30 s and 1 GB, and
the spec it writes parses, checks and simulates. The trace is synthetic, in the schema of
PyTorch profiler traces: a training loop on one host thread with a copy stream, a compute
stream and a side stream, `cuda_sync` events for every wait and sync, operators around the
launches, flow events. Each stage runs in a fresh process so its peak memory (max RSS) is
its own; ratios below 1.0 meet the target.

    python bench/bench_import.py [--events 200000] [--keep DIR]
    python bench/bench_import.py --ranks 8 --steps 5000     (several ranks' traces, one spec)
    python bench/bench_import.py --ascend                   (an Ascend trace_view.json of as many events)
    python bench/bench_import.py --nsys                     (the Kineto run as an Nsight Systems SQLite export)

With `--ranks`, each rank's trace is a DDP-like loop (a backward kernel, an event the NCCL
stream waits for, an allreduce whose process-group metadata sits on the launching
`record_param_comms` only), imported into one spec with the collectives matched; the time per
collective is printed (no target: the measurement of bench/README.md's log).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PID = 4242
KERNELS = [
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
    "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)",
    "ampere_sgemm_128x64_nn",
    "void at::native::(anonymous namespace)::softmax_warp_forward<float, float, float, 10, false>"
    "(float*, float const*, int, int, int)",
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float>, "
    "unsigned int, float, 4> >(at::native::ReduceOp<float, at::native::MeanOps<float, float>, unsigned int, float, 4>)",
]


def synthetic_trace(events: int = 200_000, seed: int = 1) -> dict:
    """A Kineto trace with about `events` trace events (times in us, as Kineto writes them)."""
    import random

    rng = random.Random(seed)
    out: list[dict] = []
    ts = 1_700_000_000_000.0
    gpu_free = {7: ts, 20: ts, 24: ts}
    corr = 1
    ext = 1

    def call(name, start, dur, correlation, external):
        out.append({"ph": "X", "cat": "cuda_runtime", "name": name, "pid": PID, "tid": PID, "ts": start,
                    "dur": dur, "args": {"External id": external, "cbid": 211, "correlation": correlation}})

    def gpu(cat, name, stream, start, dur, correlation, external, extra=None):
        args = {"External id": external, "device": 0, "context": 1, "stream": stream, "correlation": correlation}
        args.update(extra or {})
        out.append({"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": stream, "ts": start, "dur": dur,
                    "args": args})
        out.append({"ph": "s", "id": correlation, "pid": PID, "tid": PID, "ts": start, "cat": "ac2g", "name": "ac2g"})
        out.append({"ph": "f", "id": correlation, "pid": 0, "tid": stream, "ts": start, "cat": "ac2g",
                    "name": "ac2g", "bp": "e"})

    def launch(kind, name, stream, dur, external, extra=None):
        nonlocal ts, corr
        c = corr
        corr += 1
        cdur = round(rng.uniform(4, 12), 3)
        call({"kernel": "cudaLaunchKernel", "gpu_memcpy": "cudaMemcpyAsync",
              "gpu_memset": "cudaMemsetAsync"}[kind], ts, cdur, c, external)
        start = max(ts + cdur + rng.uniform(1, 4), gpu_free[stream])
        gpu(kind, name, stream, round(start, 3), dur, c, external, extra)
        gpu_free[stream] = start + dur
        ts += cdur + rng.uniform(1, 6)
        return c

    def record(stream):
        nonlocal ts, corr
        c = corr
        corr += 1
        call("cudaEventRecord", ts, 2, c, 0)
        ts += 3
        return c

    def wait(stream, on_stream, record_corr):
        nonlocal ts, corr
        c = corr
        corr += 1
        call("cudaStreamWaitEvent", ts, 2, c, 0)
        out.append({"ph": "X", "cat": "cuda_sync", "name": "Stream Wait Event", "pid": 0, "tid": stream,
                    "ts": ts + 1, "dur": 1, "args": {"cuda_sync_kind": "Stream Wait Event", "wait_on_stream": on_stream,
                                                     "wait_on_cuda_event_record_corr_id": record_corr,
                                                     "wait_on_cuda_event_id": 3, "stream": stream,
                                                     "correlation": c, "device": 0}})
        gpu_free[stream] = max(gpu_free[stream], gpu_free[on_stream])
        ts += 3

    def sync_stream(stream):
        nonlocal ts, corr
        c = corr
        corr += 1
        end = max(ts + 2, gpu_free[stream] + 1)
        call("cudaStreamSynchronize", ts, round(end - ts, 3), c, 0)
        out.append({"ph": "X", "cat": "cuda_sync", "name": "Stream Sync", "pid": 0, "tid": stream, "ts": ts + 1,
                    "dur": round(end - ts - 1, 3), "args": {"cuda_sync_kind": "Stream Sync", "stream": stream,
                                                           "correlation": c, "device": 0}})
        ts = end + 2

    while len(out) < events:
        # one step: load a batch on the copy stream, compute, a side branch, read back a loss
        step_start = ts
        op_start = len(out)
        out.append({"ph": "X", "cat": "cpu_op", "name": "aten::copy_", "pid": PID, "tid": PID, "ts": ts,
                    "dur": 0, "args": {"External id": ext}})
        launch("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", 24, round(rng.uniform(20, 60), 3), ext,
               {"bytes": 4 << 20})
        out[op_start]["dur"] = round(ts - out[op_start]["ts"], 3)
        ext += 1
        loaded = record(24)
        wait(7, 24, loaded)
        for layer in range(24):
            op = {"ph": "X", "cat": "cpu_op", "name": "aten::linear" if layer % 3 else "aten::softmax",
                  "pid": PID, "tid": PID, "ts": ts, "dur": 0, "args": {"External id": ext}}
            out.append(op)
            if layer % 8 == 0:
                launch("gpu_memset", "Memset (Device)", 7, 1.0, ext, {"bytes": 512})
            launch("kernel", KERNELS[layer % len(KERNELS)], 7, round(rng.uniform(5, 40), 3), ext)
            op["dur"] = round(ts - op["ts"], 3)
            ext += 1
            ts += rng.uniform(2, 20)
        done = record(7)
        wait(20, 7, done)
        for _ in range(4):
            launch("kernel", KERNELS[0], 20, round(rng.uniform(5, 15), 3), ext)
        side = record(20)
        wait(7, 20, side)
        out.append({"ph": "X", "cat": "cpu_op", "name": "aten::item", "pid": PID, "tid": PID, "ts": ts,
                    "dur": 0, "args": {"External id": ext}})
        item = out[-1]
        launch("gpu_memcpy", "Memcpy DtoH (Device -> Pageable)", 7, 2.0, ext, {"bytes": 4})
        sync_stream(7)
        item["dur"] = round(ts - item["ts"], 3)
        ext += 1
        out.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{ext}", "pid": PID, "tid": PID,
                    "ts": step_start, "dur": round(ts - step_start, 3), "args": {"External id": ext}})
        ext += 1
        ts += rng.uniform(50, 200)
    out.append({"name": "thread_name", "ph": "M", "ts": 0, "pid": PID, "tid": PID,
                "args": {"name": "thread 4242 (python)"}})
    return {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "synthetic"}],
            "distributedInfo": {"rank": 0}, "traceEvents": out, "traceName": "synthetic"}


def rank_trace(rank: int, ranks: int, steps: int, seed: int = 1) -> dict:
    """One rank of a DDP-like run (`--ranks`): per step a backward kernel on stream 7, a record
    the NCCL stream 20 waits for, and an allreduce launched inside `record_param_comms`."""
    import random

    rng = random.Random(seed * 1000 + rank)
    pid, out, ts, corr = 5000 + rank, [], 1000.0, 1
    meta = {"Collective name": "allreduce", "Process Group Name": "0", "Process Group Ranks": str(list(range(ranks))),
            "Group size": ranks, "dtype": "Float", "In msg nelems": 1 << 20, "Out msg nelems": 1 << 20}

    def event(cat, name, tid, start, dur, **args):
        out.append({"ph": "X", "cat": cat, "name": name, "pid": pid if cat != "kernel" else 0, "tid": tid,
                    "ts": round(start, 3), "dur": round(dur, 3), "args": args})

    for step in range(steps):
        event("cuda_runtime", "cudaLaunchKernel", pid, ts, 4, correlation=corr)
        kernel_end = ts + 5 + rng.uniform(20, 40)
        event("kernel", KERNELS[1], 7, ts + 5, kernel_end - ts - 5, stream=7, device=0, correlation=corr)
        event("cuda_runtime", "cudaEventRecord", pid, ts + 6, 1, correlation=corr + 1)
        event("cuda_runtime", "cudaStreamWaitEvent", pid, ts + 8, 1, correlation=corr + 2)
        event("cuda_sync", "Stream Wait Event", 20, ts + 9, 1, cuda_sync_kind="Stream Wait Event", stream=20,
              correlation=corr + 2, device=0, wait_on_stream=7, wait_on_cuda_event_record_corr_id=corr + 1)
        event("cpu_op", "record_param_comms", pid, ts + 10, 6, Seq=step + 1, **meta)
        event("cuda_runtime", "cudaLaunchKernel", pid, ts + 11, 4, correlation=corr + 3)
        start = max(ts + 16, kernel_end)
        event("kernel", "ncclDevKernel_AllReduce_Sum_f32_RING_LL", 20, start, rng.uniform(30, 60), stream=20,
              device=0, correlation=corr + 3)
        corr, ts = corr + 4, ts + rng.uniform(60, 90)
    return {"distributedInfo": {"backend": "nccl", "rank": rank, "world_size": ranks}, "traceEvents": out}


RANKS_CHILD = textwrap.dedent("""
    import json, resource, sys, time
    sys.path.insert(0, {root!r})
    from checker.cli import main
    t0, c0 = time.perf_counter(), time.process_time()
    status = main(["import", "kineto", *{traces!r}, "-o", {spec!r}, "--format", "json"])
    result = {{"status": status, "import_s": time.perf_counter() - t0, "import_cpu_s": time.process_time() - c0,
              "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}}
    print("RESULT " + json.dumps(result))
""")

IMPORT_CHILD = textwrap.dedent("""
    import json, resource, sys, time
    sys.path.insert(0, {root!r})
    from checker.cli import main
    t0, c0 = time.perf_counter(), time.process_time()
    status = main(["import", "kineto", {trace!r}, "-o", {spec!r}, "--format", "json"])
    result = {{"status": status, "import_s": time.perf_counter() - t0, "import_cpu_s": time.process_time() - c0,
              "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}}
    print("RESULT " + json.dumps(result))
""")

SPEC_CHILD = textwrap.dedent("""
    import json, resource, sys, time
    sys.path.insert(0, {root!r})
    from checker.frontend import load_file
    from checker.analyze import Options, check_loaded
    from checker.executor.simulate import simulate
    t0 = time.process_time()
    loaded = load_file({spec!r}, max_statements=10_000_000)
    t1 = time.process_time()
    report = check_loaded(loaded, Options())
    t2 = time.process_time()
    sim = simulate(loaded.program)
    t3 = time.process_time()
    print("RESULT " + json.dumps({{"load_cpu_s": t1 - t0, "check_cpu_s": t2 - t1, "simulate_cpu_s": t3 - t2,
                                  "statements": len(loaded.program.statements), "status": report.status.value,
                                  "findings": len(report.findings), "deadlocked": sim.deadlocked,
                                  "makespan_ms": sim.makespan / 1e6,
                                  "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}}))
""")


def ascend_trace(events: int = 200_000, seed: int = 1) -> list:
    """An Ascend profiler trace (torch_npu's trace_view.json, msprof's timeline) of about
    `events` events: a training loop whose operators the task queue's dequeue thread launches
    onto a compute stream, with a copy stream whose records the compute stream waits for, and a
    stream sync from the main thread every 50 operators. Times are msprof's strings of
    microseconds since 1970; pids packed as msprof packs them."""
    import random

    rng = random.Random(seed)
    pid, device = 4242, 0
    cann, hardware = (pid << 10) | (7 << 5) | 31, (pid << 10) | (14 << 5) | device
    main, dequeue = pid, pid + 7
    out: list = [
        {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": "Python"}},
        {"ph": "M", "name": "process_name", "pid": cann, "tid": 0, "args": {"name": "CANN"}},
        {"ph": "M", "name": "process_name", "pid": hardware, "tid": 0, "args": {"name": "Ascend Hardware"}},
        {"ph": "M", "name": "process_labels", "pid": hardware, "tid": 0, "args": {"labels": "NPU 0"}},
    ] + [{"ph": "M", "name": "thread_name", "pid": hardware, "tid": s, "args": {"name": f"Stream {s}"}}
         for s in (2, 5)]
    base = 1_742_490_378_000_000_000
    now = 0
    free = {2: 0, 5: 0}
    connection = 1000

    def ts(ns: int) -> str:
        us, frac = divmod(base + ns, 1000)
        return f"{us}.{frac:03d}"

    def call(name: str, thread: int, dur: int, **args) -> int:
        nonlocal now, connection
        connection += 1
        out.append({"name": name, "pid": cann, "tid": thread, "ts": ts(now), "dur": dur / 1000, "ph": "X",
                    "args": {"Thread Id": thread, "Mode": "ACL_RTS", "level": "acl", "id": "0",
                             "connection_id": connection, **args}})
        now += dur + 500
        return connection

    def task(link: int, stream: int, name: str, dur: int, kind: str) -> None:
        start = max(free[stream], now + 2_000)
        free[stream] = start + dur
        out.append({"name": name, "pid": hardware, "tid": stream, "ts": ts(start), "dur": dur / 1000, "ph": "X",
                    "args": {"Task Type": kind, "Physic Stream Id": stream, "Task Id": len(out),
                             "Subtask Id": 4294967295, "connection_id": link}})

    step = 0
    while len(out) < events:
        step += 1
        name = rng.choice(["aclnnAdd", "aclnnMatmul", "aclnnSoftmax", "aclnnMul"])
        out.append({"ph": "X", "name": f"aten::{name[5:].lower()}", "pid": pid, "tid": main,
                    "ts": (base + now) / 1000, "dur": 3.0, "cat": "cpu_op", "args": {}})
        out.append({"ph": "X", "name": f"Dequeue@{name}", "pid": pid, "tid": dequeue,
                    "ts": (base + now) / 1000, "dur": 3.0, "cat": "dequeue", "args": {"correlation_id": step}})
        if step % 10 == 0:  # a copy on the side stream, then the compute stream waits for it
            link = call("AscendCL@aclrtMemcpyAsync", dequeue, 1_500)
            task(link, 5, "MEMCPY_ASYNC", rng.randint(5_000, 20_000), "PCIE_DMA_SQE")
            out[-1]["args"]["operation"] = "host to device"
            link = call("AscendCL@aclrtRecordEvent", dequeue, 800, event_id=step)
            task(link, 5, "EVENT_RECORD", 20, "EVENT_RECORD_SQE")
            link = call("AscendCL@aclrtStreamWaitEvent", dequeue, 800, event_id=step)
            task(link, 2, "EVENT_WAIT", 20, "EVENT_WAIT_SQE")
            free[2] = max(free[2], free[5])
        link = call("Node@launch", dequeue, 1_200, item_id=name)
        task(link, 2, f"{name}_AiCore", rng.randint(2_000, 30_000), "AI_CORE")
        if step % 50 == 0:
            call("AscendCL@aclrtSynchronizeStream", main, max(1_000, free[2] - now) + 1_000)
    return out


def _child(code: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise SystemExit(f"child failed ({proc.returncode}):\n{proc.stderr[-2000:]}")


def _written_spec(spec_path: str) -> None:
    """What the written spec then costs: parse and lower, check, simulate (a fresh process)."""
    spec = _child(SPEC_CHILD.format(root=ROOT, spec=spec_path))
    print(f"written spec: {spec['statements']:,} statements; parse+lower {spec['load_cpu_s']:.2f} s, "
          f"check {spec['check_cpu_s']:.2f} s ({spec['status']}, {spec['findings']} findings), "
          f"simulate {spec['simulate_cpu_s']:.2f} s (makespan {spec['makespan_ms']:.1f} ms"
          f"{', deadlocked' if spec['deadlocked'] else ''}); {spec['max_rss_mb']:.0f} MB max RSS")


NSYS_SCHEMA = """
CREATE TABLE StringIds(id INTEGER PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE NVTX_EVENTS(start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, text TEXT, globalTid INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME(start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER NOT NULL,
 globalTid INTEGER, correlationId INTEGER, nameId INTEGER NOT NULL, returnValue INTEGER NOT NULL);
CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL(start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,
 contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER,
 demangledName INTEGER NOT NULL, shortName INTEGER NOT NULL);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY(start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,
 contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER,
 bytes INTEGER NOT NULL, copyKind INTEGER NOT NULL, srcKind INTEGER, dstKind INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET(start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,
 contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER,
 value INTEGER NOT NULL, bytes INTEGER NOT NULL);
CREATE TABLE CUPTI_ACTIVITY_KIND_SYNCHRONIZATION(start INTEGER NOT NULL, end INTEGER NOT NULL,
 deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId INTEGER,
 globalPid INTEGER, syncType INTEGER NOT NULL, eventId INTEGER NOT NULL);
CREATE TABLE CUPTI_ACTIVITY_KIND_CUDA_EVENT(deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL,
 streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER, eventId INTEGER NOT NULL);
"""
"""The columns of Nsight Systems' SQLite export that `checker/importers/nsys.py` reads."""


def nsys_export(trace: dict, path: str) -> None:
    """The synthetic Kineto trace written as the Nsight Systems SQLite export of the same run:
    calls, kernels, copies, memsets, synchronization records, event records, NVTX ranges."""
    import sqlite3

    db = sqlite3.connect(path)
    db.executescript(NSYS_SCHEMA)
    names: dict[str, int] = {}

    def name(text: str) -> int:
        if text not in names:
            names[text] = len(names) + 1
            db.execute("INSERT INTO StringIds VALUES (?, ?)", (names[text], text))
        return names[text]

    ns = lambda us: round(us * 1000)  # noqa: E731
    tid, pid = (PID << 24) | PID, PID << 24
    kinds = {"Pinned": 2, "Device": 3, "Pageable": 1}
    for e in trace["traceEvents"]:
        cat, args = e.get("cat"), e.get("args") or {}
        if e.get("ph") != "X":
            continue
        start, end = ns(e["ts"]), ns(e["ts"] + e["dur"])
        lane = (start, end, 0, 1, args.get("stream"), args.get("correlation"), pid)
        if cat == "cuda_runtime":
            db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?,?,0,?,?,?,0)",
                       (start, end, tid, args["correlation"], name(e["name"] + "_v3020")))
        elif cat == "kernel":
            db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?,?,?,?,?,?,?,?,?)",
                       lane + (name(e["name"]), name(e["name"][:20])))
        elif cat == "gpu_memcpy":  # `Memcpy HtoD (Pinned -> Device)`
            words = e["name"].replace("(", "").replace(")", "").split()
            db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                       lane + (args.get("bytes", 0), 1 if words[1] == "HtoD" else 2, kinds[words[2]], kinds[words[4]]))
        elif cat == "gpu_memset":
            db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET VALUES (?,?,?,?,?,?,?,0,?)", lane + (args.get("bytes", 0),))
        elif cat == "cuda_sync":
            waits = args["cuda_sync_kind"] == "Stream Wait Event"
            db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_SYNCHRONIZATION VALUES (?,?,?,?,?,?,?,?,?)",
                       lane + (2 if waits else 3, 3 if waits else 0xFFFFFFFF))
            if waits:
                db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_CUDA_EVENT VALUES (0,1,?,?,?,3)",
                           (args["wait_on_stream"], args["wait_on_cuda_event_record_corr_id"], pid))
        elif cat == "user_annotation":
            db.execute("INSERT INTO NVTX_EVENTS VALUES (?,?,59,?,?)", (start, end, e["name"], tid))
    db.commit()
    db.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--keep", metavar="DIR", help="keep the trace and the spec in DIR")
    parser.add_argument("--ranks", type=int, help="import this many ranks' traces into one spec instead")
    parser.add_argument("--steps", type=int, default=1000, help="with --ranks: steps (allreduces) per rank")
    parser.add_argument("--ascend", action="store_true",
                        help="an Ascend profiler trace (trace_view.json) instead of a Kineto one")
    parser.add_argument("--nsys", action="store_true",
                        help="the same run as an Nsight Systems SQLite export instead of a Kineto trace")
    args = parser.parse_args()
    directory = args.keep or tempfile.mkdtemp(prefix="bench_import_")
    os.makedirs(directory, exist_ok=True)
    if args.ranks:
        return ranks_main(args, directory)
    trace_path = os.path.join(directory, "synthetic.sqlite" if args.nsys else "synthetic_trace.json.gz")
    spec_path = os.path.join(directory, "synthetic.sched")
    trace = ascend_trace(args.events) if args.ascend else synthetic_trace(args.events)
    count = len(trace) if args.ascend else len(trace["traceEvents"])
    if args.nsys:
        if os.path.exists(trace_path):
            os.remove(trace_path)
        nsys_export(trace, trace_path)
    else:
        with gzip.open(trace_path, "wt") as f:
            json.dump(trace, f)
    del trace
    size_mb = os.path.getsize(trace_path) / 2**20
    imported = _child(IMPORT_CHILD.format(root=ROOT, trace=trace_path, spec=spec_path))
    if imported["status"] != 0:
        raise SystemExit(f"import failed with status {imported['status']}")
    spec_mb = os.path.getsize(spec_path) / 2**20
    print(f"trace: {count:,} events ({size_mb:.1f} MB {'SQLite' if args.nsys else 'gzip'}); spec: {spec_mb:.1f} MB")
    print(f"import: {imported['import_cpu_s']:.2f} s CPU ({imported['import_s']:.2f} s wall), "
          f"{imported['max_rss_mb']:.0f} MB max RSS")
    print(f"  ratio to target (30 s, 1 GB): time {imported['import_cpu_s'] / 30:.2f}, "
          f"memory {imported['max_rss_mb'] / 1024:.2f}")
    _written_spec(spec_path)
    if not args.keep:
        for path in (trace_path, spec_path):
            os.remove(path)
        os.rmdir(directory)


def ranks_main(args, directory: str) -> None:
    traces = []
    for rank in range(args.ranks):
        path = os.path.join(directory, f"rank{rank}.pt.trace.json")
        with open(path, "w") as f:
            json.dump(rank_trace(rank, args.ranks, args.steps), f)
        traces.append(path)
    spec_path = os.path.join(directory, "ranks.sched")
    imported = _child(RANKS_CHILD.format(root=ROOT, traces=traces, spec=spec_path))
    if imported["status"] != 0:
        raise SystemExit(f"import failed with status {imported['status']}")
    collectives = args.ranks * args.steps
    print(f"{args.ranks} ranks x {args.steps:,} steps: import {imported['import_cpu_s']:.2f} s CPU "
          f"({imported['import_s']:.2f} s wall), {imported['max_rss_mb']:.0f} MB max RSS, "
          f"{imported['import_cpu_s'] / collectives * 1000:.3f} ms per collective; spec "
          f"{os.path.getsize(spec_path) / 2**20:.1f} MB")
    _written_spec(spec_path)
    if not args.keep:
        for path in [*traces, spec_path]:
            os.remove(path)
        os.rmdir(directory)


if __name__ == "__main__":
    main()
