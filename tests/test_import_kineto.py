"""`streamproof import kineto`: profiler traces in, specs that check and simulate like the run out.

The fixtures under tests/fixtures/traces/ are small traces written for these tests in the
schema of PyTorch profiler traces. `two_streams.json` is one host thread driving a copy
stream (20) and a compute stream (7):

    t=12  cudaMemcpyAsync  HtoD pinned on stream 20, runs 21..61   (aten::copy_, rf 11)
    t=41  cudaEventRecord  corr 102 (records stream 20)
    t=44  cudaStreamWaitEvent: stream 7 waits for corr 102
    t=50  cudaLaunchKernel on stream 7, runs 61..91                  (aten::add_, rf 12)
    t=71  cudaEventRecord  corr 105, t=73 cudaEventRecord corr 106 (both record stream 7)
    t=75  cudaStreamWaitEvent: stream 20 waits for corr 105 (not the later 106)
    t=78  cudaMemsetAsync on stream 20, runs 92..94                  (aten::zero_, rf 13)
    t=96  cudaMemcpyAsync  DtoH pageable on stream 20, runs 98..128  (aten::copy_, rf 14)
    t=131 cudaEventSynchronize on corr 106; t=134 cudaStreamSynchronize(stream 20)
    t=136.5 aten::fill_ on the host (rf 15) writes the pageable result
    t=140 cudaLaunchKernel on stream 7, runs 150..250; t=147 cudaDeviceSynchronize

`two_streams_no_sync.json` is the same run without its `cuda_sync` events;
`two_streams_et.json` is its Execution Trace.
"""

from __future__ import annotations

import copy
import gzip
import json
import re
from pathlib import Path

import pytest

from checker.analyze import Options, check_loaded
from checker.codes import Code
from checker.frontend import load_text
from checker.importers import compare, import_kineto, import_kineto_file, read_execution_trace
from checker.importers.execution_trace import TraceError, parse_schema
from checker.importers.kineto import _short_kernel_name
from checker.ir import Op, SyncKind

TRACES = Path(__file__).parent / "fixtures" / "traces"
TWO = TRACES / "two_streams.json"
NO_SYNC = TRACES / "two_streams_no_sync.json"
ET = TRACES / "two_streams_et.json"


def trace(path: Path = TWO) -> dict:
    return json.loads(path.read_text())


def load(imported):
    loaded = load_text(imported.text, "imported.sched")
    assert loaded.program is not None, [d.message for d in loaded.diagnostics]
    assert not loaded.diagnostics
    return loaded


def statements(program, op: Op):
    return [s for s in program.statements if s.op is op]


def named(program, statement) -> str:
    return program.describe(statement)


def record_of(program, event_index: int):
    """The one record statement of an event (the importer writes one event per record)."""
    records = [s for s in program.statements if s.op is Op.RECORD and s.event == event_index]
    assert len(records) == 1
    return records[0]


# ---------------------------------------------------------------- exact cuda_sync bindings


def test_streams_kernels_and_durations_come_from_the_trace():
    program = load(import_kineto(trace(), source="two_streams.json")).program
    assert sorted(s.name for s in program.streams) == ["stream20", "stream7"]
    assert [d.name for d in program.devices] == ["gpu0"]
    kernels = statements(program, Op.KERNEL)
    assert [(program.streams[k.stream].name, k.name, k.duration) for k in kernels] == [
        ("stream7", "vectorized_elementwise_kernel", 30_000),
        ("stream20", "memset", 2_000),
        ("stream7", "ampere_sgemm_128x64_nn", 100_000),
    ]
    copies = statements(program, Op.COPY)
    assert [(program.streams[c.stream].name, c.copy.value, c.duration, c.blocking) for c in copies] == [
        ("stream20", "h2d", 40_000, False),  # pinned: the host goes on
        ("stream20", "d2h", 30_000, True),  # pageable: the host waits for it
    ]


def test_waits_bind_to_the_records_the_trace_names():
    program = load(import_kineto(trace())).program
    waits = statements(program, Op.WAIT)
    assert len(waits) == 2
    first, second = waits
    # stream 7 waits for corr 102, recorded on stream 20 after the copy
    assert program.streams[first.stream].name == "stream7"
    assert program.events[first.event].name == "e102"
    assert program.streams[record_of(program, first.event).stream].name == "stream20"
    # stream 20 waits for corr 105, not the later record 106 of the same stream
    assert program.streams[second.stream].name == "stream20"
    assert program.events[second.event].name == "e105"
    record = record_of(program, second.event)
    assert program.streams[record.stream].name == "stream7"
    assert record.index < second.index
    # the records sit where their calls were: after the work they follow on their streams
    copy_in = statements(program, Op.COPY)[0]
    assert record_of(program, first.event).index > copy_in.index


def test_syncs_are_the_trace_s_event_stream_and_context_syncs():
    program = load(import_kineto(trace())).program
    syncs = [(s.sync, s.target) for s in statements(program, Op.SYNC)]
    event = next(e.index for e in program.events if e.name == "e106")
    stream20 = next(s.index for s in program.streams if s.name == "stream20")
    assert syncs == [(SyncKind.EVENT, event), (SyncKind.STREAM, stream20), (SyncKind.DEVICE, 0)]


def test_the_spec_checks_clean_and_names_the_source_operators():
    imported = import_kineto(trace(), read_execution_trace(json.loads(ET.read_text())))
    assert "# aten::add_" in imported.text and "# aten::copy_" in imported.text
    assert "cuda_sync" in imported.text  # the header says where the waits come from
    report = check_loaded(load(imported), Options())
    assert report.status.value == "clean" and report.passed


def test_simulation_reproduces_the_observed_spans():
    imported = import_kineto(trace())
    comparison = compare(imported, load(imported).program)
    assert imported.gpu_span == 229_000  # first GPU start 21 us, last end 250 us
    assert comparison.observed_gpu_span == imported.gpu_span
    assert abs(comparison.ratio - 1) <= 0.10
    for stream in comparison.streams:
        assert abs(stream.ratio - 1) <= 0.10, stream
        assert stream.simulated_busy == stream.observed_busy
    assert not comparison.deadlocked


def test_host_gaps_put_each_launch_where_the_trace_had_it():
    imported = import_kineto(trace())
    program = load(imported).program
    from checker.executor.simulate import simulate

    sim = simulate(program)
    starts = {program.statements[t.statement].name or program.statements[t.statement].op.value: t.start
              for t in sim.tasks if program.statements[t.statement].duration}
    origin = 12_000  # the first runtime call is the spec's time 0
    assert starts["ampere_sgemm_128x64_nn"] == 150_000 - origin
    assert starts["vectorized_elementwise_kernel"] == 61_000 - origin
    hosts = statements(program, Op.HOST)
    assert all(h.duration >= 0 for h in hosts)
    assert sum(h.duration for h in hosts) > 0


# ---------------------------------------------------------------- without cuda_sync events


def test_without_cuda_sync_events_bindings_are_inferred_and_said_to_be():
    imported = import_kineto(trace(NO_SYNC))
    assert any("cuda_sync" in note for note in imported.notes)
    assert imported.counts["assumptions"] > 0
    assert "Assumptions" in imported.text and "assumed:" in imported.text
    program = load(imported).program
    waits = statements(program, Op.WAIT)
    # stream 7's wait: the stream of the next launch, bound to the latest record before it
    assert program.streams[waits[0].stream].name == "stream7"
    assert program.events[waits[0].event].name == "e102"
    assert program.streams[record_of(program, waits[0].event).stream].name == "stream20"
    # stream 20's wait can only be inferred to bind to the latest record, 106 (same stream 7)
    assert program.streams[waits[1].stream].name == "stream20"
    assert program.events[waits[1].event].name == "e106"
    syncs = statements(program, Op.SYNC)
    assert [s.sync for s in syncs] == [SyncKind.EVENT, SyncKind.STREAM, SyncKind.DEVICE]
    assert program.streams[syncs[1].target].name == "stream20"  # the stream of the last launch
    assert check_loaded(load(imported), Options()).passed


# ---------------------------------------------------------------- Execution Trace


def test_execution_trace_gives_reads_writes_and_byte_ranges():
    imported = import_kineto(trace(), read_execution_trace(json.loads(ET.read_text())))
    program = load(imported).program
    memory = {m.index: m for m in program.memories}

    def accesses(statement):
        return sorted((memory[a.memory].name, a.start, a.end, a.write) for a in statement.accesses)

    add, memset, _ = statements(program, Op.KERNEL)
    # aten::add_(Tensor(a!) self, Tensor other): self written, other read (a slice: offset 1024 floats)
    assert accesses(add) == [("s501_gpu0", 4096, 8192, False), ("s503_gpu0", 0, 4096, True)]
    assert accesses(memset) == [("s504_gpu0", 0, 512, True)]
    copy_in, copy_out = statements(program, Op.COPY)
    assert accesses(copy_in) == [("s501_gpu0", 0, 1 << 20, True), ("s502", 0, 1 << 20, False)]
    assert accesses(copy_out) == [("s503_gpu0", 0, 4096, False), ("s505", 0, 4096, True)]
    host_memory = {m.name: m for m in program.memories if m.on_host}
    assert host_memory["s502"].pinned and not host_memory["s505"].pinned
    # aten::fill_ ran on the host: its write is a host statement's
    fills = [s for s in statements(program, Op.HOST) if s.accesses]
    assert [accesses(s) for s in fills] == [[("s505", 0, 4096, True)]]


def test_an_execution_trace_of_another_run_is_said_to_match_nothing():
    data = trace()
    for event in data["traceEvents"]:  # another run: other record function and external ids
        for key in ("Record function id", "External id"):
            if key in event.get("args", {}):
                event["args"][key] += 100_000
    imported = import_kineto(data, read_execution_trace(json.loads(ET.read_text())))
    assert any("none of the" in note and "is in the Execution Trace" in note for note in imported.notes)
    assert "0 of the" in imported.text
    matched = import_kineto(trace(), read_execution_trace(json.loads(ET.read_text())))
    assert not any("is in the Execution Trace" in note for note in matched.notes)


def test_execution_trace_finds_the_race_a_missing_wait_leaves():
    data = trace()
    # drop stream 7's wait for the copy: the kernel may read the copy's bytes while it runs
    data["traceEvents"] = [e for e in data["traceEvents"]
                           if e.get("args", {}).get("correlation") != 103]
    imported = import_kineto(data, read_execution_trace(json.loads(ET.read_text())))
    report = check_loaded(load(imported), Options())
    races = [f for f in report.findings if f.kind.value == "race"]
    assert [f.buffer for f in races] == ["s501_gpu0"]


def test_schema_says_what_is_written():
    written, returns = parse_schema(
        "aten::add_.Tensor(Tensor(a!) self, Tensor other, *, Scalar alpha=1) -> Tensor(a!)")
    assert written == [True, False, False] and returns == [True]
    written, returns = parse_schema("aten::view(Tensor(a) self, SymInt[] size) -> Tensor(a)")
    assert written == [False, False] and returns == [False]  # a view writes nothing
    written, returns = parse_schema(
        "aten::max.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)")
    assert written == [False, False, False] and returns == [True, True]
    written, _ = parse_schema("aten::mm.out(Tensor self, Tensor mat2, *, Tensor(a!) out) -> Tensor(a!)")
    assert written == [False, False, True]


def test_chakra_layout_of_the_execution_trace():
    node = {"id": 5, "name": "aten::add_", "ctrl_deps": 2,
            "inputs": {"values": [[3, 7, 0, 16, 4, "cuda:0"], [4, 8, 4, 8, 4, "cuda:0"], 1],
                       "shapes": [[16], [8], []], "types": ["Tensor(float)", "Tensor(float)", "Int"],
                       "strides": [[1], [2], []]},
            "outputs": {"values": [[3, 7, 0, 16, 4, "cuda:0"]], "shapes": [[16]], "types": ["Tensor(float)"],
                        "strides": [[1]]},
            "attrs": [{"name": "rf_id", "type": "uint64", "value": 9},
                      {"name": "op_schema", "type": "string",
                       "value": "aten::add_.Tensor(Tensor(a!) self, Tensor other, *, Scalar alpha=1) -> Tensor(a!)"}]}
    et = read_execution_trace({"schema": "1.1.1-chakra.0.0.4", "pid": 1, "nodes": [node]})
    op = et.operator(9, "aten::add_")
    got = sorted((a.storage, a.start, a.end, a.write) for a in op.accesses)
    # the strided read covers 1 + 7 * 2 = 15 elements from offset 4
    assert got == [(7, 0, 64, True), (8, 16, 76, False)]
    assert et.operator(9, "aten::mul") is None  # linked by rf_id and name


def test_the_record_of_an_in_place_collective_writes_its_buffer():
    # PyTorch's record_param_comms has no schema; its outputs are the collective's outputs,
    # the same tensors as its inputs for an in-place allreduce.
    def node(name: str) -> dict:
        grad = [3, 7, 0, 16, 4, "cuda:0"]
        return {"id": 5, "name": name, "ctrl_deps": 2,
                "inputs": {"values": [[grad], 0], "shapes": [[[16]], []],
                           "types": ["GenericList[Tensor(float)]", "Int"]},
                "outputs": {"values": [[grad]], "shapes": [[[16]]], "types": ["GenericList[Tensor(float)]"]},
                "attrs": [{"name": "rf_id", "type": "uint64", "value": 9}]}
    for name, written in (("record_param_comms", True), ("my::opaque_op", False)):
        et = read_execution_trace({"schema": "1.1.1-chakra.0.0.4", "pid": 1, "nodes": [node(name)]})
        assert [(a.storage, a.write) for a in et.operator(9, name).accesses] == [(7, written)]


# ---------------------------------------------------------------- shapes of real traces


def _event(cat, name, pid, tid, ts, dur, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def test_each_host_thread_is_a_thread_and_work_without_a_call_is_still_issued():
    events = [
        _event("cuda_runtime", "cudaLaunchKernel", 9, 9, 100.0, 5, correlation=1),
        _event("kernel", "k_main", 0, 7, 106.0, 10, stream=7, device=0, correlation=1),
        _event("cuda_runtime", "cudaLaunchKernel", 9, 11, 101.0, 5, correlation=2),
        _event("kernel", "k_side", 0, 13, 107.0, 20, stream=13, device=0, correlation=2),
        _event("kernel", "ncclKernel_AllReduce", 0, 13, 130.0, 30, stream=13, device=0, correlation=99),
    ]
    imported = import_kineto({"traceEvents": events})
    program = load(imported).program
    assert sorted(t.name for t in program.threads) == ["main", "t11"]
    by_thread = {t.name: [program.statements[i].name for i in t.statements if program.statements[i].name != "cpu"]
                 for t in program.threads}
    assert by_thread["main"] == ["k_main"]
    assert by_thread["t11"] == ["k_side", "ncclKernel_AllReduce"]  # issued by the thread that owns stream 13
    assert any("no runtime call" in note for note in imported.notes)
    comparison = compare(imported, program)
    assert abs(comparison.ratio - 1) <= 0.10


def test_overlapping_kernels_set_the_compute_count():
    events = [
        _event("cuda_runtime", "cudaLaunchKernel", 1, 1, 0.0, 2, correlation=1),
        _event("kernel", "a", 0, 7, 3.0, 50, stream=7, device=0, correlation=1),
        _event("cuda_runtime", "cudaLaunchKernel", 1, 1, 4.0, 2, correlation=2),
        _event("kernel", "b", 0, 8, 7.0, 50, stream=8, device=0, correlation=2),
    ]
    imported = import_kineto({"traceEvents": events})
    program = load(imported).program
    assert program.devices[0].count(program.statements[1].engine) == 2
    comparison = compare(imported, program)
    assert comparison.observed_gpu_span == 54_000
    assert comparison.simulated_gpu_span < 100_000  # they overlap in the simulation too
    assert abs(comparison.ratio - 1) <= 0.10


def test_kernel_names_are_short_valid_names():
    assert _short_kernel_name(
        "void at::native::(anonymous namespace)::distribution_elementwise_grid_stride_kernel<float, 4>"
        "(int, at::PhiloxCudaState)") == "distribution_elementwise_grid_stride_kernel"
    assert _short_kernel_name("ampere_sgemm_128x64_nn") == "ampere_sgemm_128x64_nn"
    events = [_event("cuda_runtime", "cudaLaunchKernel", 1, 1, 0.0, 2, correlation=1),
              _event("kernel", "free", 0, 7, 3.0, 1, stream=7, device=0, correlation=1)]
    assert "kernel free_ 1us" in import_kineto({"traceEvents": events}).text  # `free` is reserved


def test_an_unknown_record_leaves_the_wait_out_and_says_so():
    data = trace()
    for event in data["traceEvents"]:
        if event.get("args", {}).get("correlation") == 103 and event["cat"] == "cuda_sync":
            event["args"]["wait_on_cuda_event_record_corr_id"] = 424242
    imported = import_kineto(data)
    assert "outside the trace" in imported.text
    assert len(statements(load(imported).program, Op.WAIT)) == 1


def test_a_wait_bound_to_a_call_that_records_nothing_is_left_out_and_said():
    # The trace names a kernel launch's correlation id as the record: a wait on an event that
    # nothing records would do nothing, silently; it is left out with a comment instead.
    imported = import_kineto(json.loads((TRACES / "wait_bound_to_a_kernel_launch.json").read_text()))
    assert "a cudaLaunchKernel call, not an event record; the wait is left out" in imported.text
    assert statements(load(imported).program, Op.WAIT) == []


def test_a_wait_bound_to_a_record_its_thread_makes_later_is_left_out_and_said():
    # A trace that says so is corrupt: a wait binds to the latest record made before it.
    imported = import_kineto(json.loads((TRACES / "wait_bound_to_a_later_record.json").read_text()))
    assert "which this thread made after it; the wait is left out" in imported.text
    assert statements(load(imported).program, Op.WAIT) == []


@pytest.mark.parametrize("name, access", [("peer_p2p_nowait", "copy s2_gpu1 <- s1_gpu0"),
                                          ("peer_dev_nowait", "reads s1_gpu0 writes s2_gpu1")])
def test_another_gpu_s_tensors_are_kept_and_race(name, access):
    # A peer copy reads the other GPU's tensor, and a kernel reading peer memory reads it: both
    # were dropped (a placeholder, or no read), and the missing wait's race with them.
    data = json.loads((TRACES / f"{name}.json").read_text())
    et = read_execution_trace(json.loads((TRACES / f"{name}.et.json").read_text()))
    imported = import_kineto(data, et)
    assert access in imported.text
    races = [f for f in check_loaded(load(imported), Options()).findings if f.kind.value == "race"]
    assert [f.buffer for f in races] == ["s1_gpu0"]


def test_an_in_place_operator_with_a_schema_that_cannot_be_read_writes_its_first_argument():
    node = {"id": 5, "name": "aten::fill_", "rf_id": 9, "op_schema": "((((Tensor(a!)",
            "inputs": [[3, 7, 0, 16, 4, "cuda:0"]], "input_shapes": [[16]], "input_types": ["Tensor(float)"],
            "outputs": [], "output_shapes": [], "output_types": []}
    et = read_execution_trace({"schema": "1.0.1", "pid": 1, "nodes": [node]})
    assert [(a.storage, a.write) for a in et.operator(9, "aten::fill_").accesses] == [(7, True)]
    assert any("a schema that cannot be read" in note and "node 5 (aten::fill_)" in note for note in et.notes())


def test_min_gap_makes_the_spec_smaller_without_moving_time():
    imported = import_kineto(trace(), min_gap=5_000)
    program = load(imported).program
    full = load(import_kineto(trace())).program
    assert len(statements(program, Op.HOST)) < len(statements(full, Op.HOST))
    assert abs(compare(imported, program).ratio - 1) <= 0.10


# ---------------------------------------------------------------- the command


def test_cli_writes_the_spec_and_compares(run, tmp_path):
    out = tmp_path / "run.sched"
    status, stdout, stderr = run("import", "kineto", TWO, "--et", ET, "-o", out, "--compare")
    assert status == 0, stderr
    assert out.read_text().startswith("# Imported by")
    assert "GPU span" in stdout and "stream20" in stdout and "stream7" in stdout
    assert "bound" in stdout and "overlap left" in stdout
    status, _, _ = run("check", out)
    assert status == 0


def test_cli_says_which_max_statements_a_large_spec_needs(run, tmp_path, monkeypatch):
    # A spec past the statement limit is still written, with the option the other commands
    # then need (the limit lowered here: a real one takes a trace of 200,000 kernels).
    import checker.lower

    monkeypatch.setattr(checker.lower, "DEFAULT_MAX_STATEMENTS", 10)
    out = tmp_path / "run.sched"
    status, _, stderr = run("import", "kineto", TWO, "-o", out)
    assert status == 0 and out.exists()
    note = next(line for line in stderr.splitlines() if "statements, more than the 10 " in line)
    needed = int(re.search(r"--max-statements (\d+)", note).group(1))
    status, _, _ = run("check", "--max-statements", str(needed), out)
    assert status == 0


def test_cli_format_defaults_to_kineto(run, tmp_path):
    named, bare = tmp_path / "named.sched", tmp_path / "bare.sched"
    assert run("import", "kineto", TWO, "-o", named)[0] == 0
    status, _, stderr = run("import", TWO, "-o", bare)
    assert status == 0, stderr
    assert bare.read_text() == named.read_text()
    with pytest.raises(SystemExit) as exit_status:  # argparse: the usage line, then status 2
        run("import", "chrome", TWO, "-o", bare)
    assert exit_status.value.code == 2


def test_cli_reads_gzip_and_prints_json(run, tmp_path):
    gz = tmp_path / "trace.json.gz"
    gz.write_bytes(gzip.compress(TWO.read_bytes()))
    out = tmp_path / "run.sched"
    status, stdout, stderr = run("import", "kineto", gz, "-o", out, "--compare", "--format", "json")
    assert status == 0, stderr
    data = json.loads(stdout)
    assert data["counts"]["wait"] == 2
    assert data["compare"]["gpu_span"]["observed_us"] == 229.0
    assert abs(data["compare"]["gpu_span"]["ratio"] - 1) <= 0.10
    assert {s["stream"] for s in data["compare"]["streams"]} == {"stream7", "stream20"}


def test_cli_notes_missing_cuda_sync_events(run, tmp_path):
    status, _, stderr = run("import", "kineto", NO_SYNC, "-o", tmp_path / "x.sched")
    assert status == 0
    assert "no cuda_sync events" in stderr


@pytest.mark.parametrize("content, message", [
    (None, "cannot read"),
    (b"{ not json", "not JSON"),
    (b"\xff\xfe\x00garbage", "not JSON"),
    (b'{"schemaVersion": 1}', "not a Chrome trace"),
    (b'"a string"', "not a Chrome trace"),
    (b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "x", "ts": 1, "dur": 1}]}', "no GPU activity"),
    (b"\x1f\x8b\x08garbage", "not a readable gzip file"),
    (b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 0, "dur": 1, "args": {"stream": 7}},'
     b' {"ph": "X", "cat": "kernel", "name": "k", "ts": 2e12, "dur": 1, "args": {"stream": 7}}]}',
     "looks corrupt"),
    (b'{"traceEvents": [{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 0,'
     b' "dur": 1, "args": {"correlation": 5}}, {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel",'
     b' "pid": 2, "tid": 2, "ts": 0, "dur": 1, "args": {"correlation": 5}}]}',
     "correlation id 5 appears in two processes (pid 1 and pid 2)"),
    (b'{"traceEvents": [{"ph": "B", "cat": "kernel", "name": "k", "ts": 0}, {"ph": "E", "cat": "kernel", "ts": 1}]}',
     "2 begin/end (B/E) event(s) are not read"),
    (b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": "soon", "dur": 1, "args": {"stream": 7}}]}',
     "1 event(s) were unreadable"),
])
def test_cli_bad_trace_is_one_line_and_status_2(run, tmp_path, content, message):
    path = tmp_path / "trace.json"
    if content is not None:
        path.write_bytes(content)
    status, stdout, stderr = run("import", "kineto", path, "-o", tmp_path / "x.sched")
    assert status == 2
    assert message in stderr
    assert len(stderr.strip().splitlines()) == 1 and "Traceback" not in stderr
    assert not (tmp_path / "x.sched").exists()


@pytest.mark.parametrize("gap", ["1e400s", "infms", "nanus", "-1us", "2e9s"])
def test_cli_min_gap_must_be_a_duration_a_spec_can_hold(run, tmp_path, capsys, gap):
    with pytest.raises(SystemExit) as exit_status:  # argparse: the usage line, then status 2
        run("import", "kineto", TWO, "-o", tmp_path / "x.sched", f"--min-gap={gap}")
    stderr = capsys.readouterr().err
    assert exit_status.value.code == 2 and "not a duration" in stderr and "Traceback" not in stderr


def test_cli_min_gap_of_0_is_the_default_written_plainly(run, tmp_path):
    status, _, stderr = run("import", "kineto", TWO, "-o", tmp_path / "x.sched", "--min-gap=0")
    assert status == 0 and (tmp_path / "x.sched").exists(), stderr


def test_cli_bad_execution_trace_is_status_2(run, tmp_path):
    bad = tmp_path / "et.json"
    bad.write_text(json.dumps({"traceEvents": []}))
    status, _, stderr = run("import", "kineto", TWO, "--et", bad, "-o", tmp_path / "x.sched")
    assert status == 2 and "not a PyTorch Execution Trace" in stderr
    assert len(stderr.strip().splitlines()) == 1


def test_import_kineto_file_and_errors(tmp_path):
    imported = import_kineto_file(TWO, ET)
    assert "s501_gpu0" in imported.text
    with pytest.raises(TraceError):
        import_kineto({"nothing": []})
    with pytest.raises(TraceError):
        read_execution_trace([1, 2, 3])


def test_fixture_mutation_does_not_leak():
    # the importer must not modify the trace it is given (callers may reuse it)
    data = trace()
    before = copy.deepcopy(data)
    import_kineto(data)
    assert data == before


def test_record_streams_from_cuda_event_entries_and_streams_named_per_device():
    events = [
        _event("cuda_runtime", "cudaLaunchKernel", 5, 5, 0.0, 2, correlation=1),
        _event("kernel", "produce", 0, 7, 3.0, 10, stream=7, device=0, correlation=1),
        _event("cuda_runtime", "cudaEventRecord", 5, 5, 4.0, 1, correlation=2),
        _event("cuda_event", "cudaEventRecord", 0, 7, 4.5, 0, stream=7, device=0, correlation=2),
        _event("cuda_runtime", "cudaStreamWaitEvent", 5, 5, 6.0, 1, correlation=3),
        _event("cuda_sync", "Stream Wait Event", 1, 7, 6.5, 0, cuda_sync_kind="Stream Wait Event", stream=7,
               device=1, wait_on_stream=-1, wait_on_cuda_event_record_corr_id=2, correlation=3),
        _event("cuda_runtime", "cudaLaunchKernel", 5, 5, 8.0, 2, correlation=4),
        _event("kernel", "consume", 1, 7, 14.0, 10, stream=7, device=1, correlation=4),
    ]
    program = load(import_kineto({"traceEvents": events})).program
    assert sorted(s.name for s in program.streams) == ["stream7_gpu0", "stream7_gpu1"]
    (wait,) = statements(program, Op.WAIT)
    assert program.streams[wait.stream].name == "stream7_gpu1"
    assert program.streams[record_of(program, wait.event).stream].name == "stream7_gpu0"


def test_operators_link_by_external_id_without_a_record_function_id():
    data = trace()
    for event in data["traceEvents"]:
        event.get("args", {}).pop("Record function id", None)
    imported = import_kineto(data, read_execution_trace(json.loads(ET.read_text())))
    assert "reads s501_gpu0[4096:8192] writes s503_gpu0" in imported.text


def test_threads_sharing_a_stream_still_check_and_simulate():
    events = [
        _event("cuda_runtime", "cudaLaunchKernel", 3, 3, 0.0, 2, correlation=1),
        _event("kernel", "a", 0, 7, 3.0, 10, stream=7, device=0, correlation=1),
        _event("cuda_runtime", "cudaLaunchKernel", 3, 4, 1.0, 2, correlation=2),
        _event("kernel", "b", 0, 7, 13.0, 10, stream=7, device=0, correlation=2),
        _event("cuda_runtime", "cudaStreamSynchronize", 3, 4, 4.0, 20, correlation=3),
        _event("cuda_sync", "Stream Sync", 0, 7, 5.0, 18, cuda_sync_kind="Stream Sync", stream=7, device=0,
               correlation=3),
    ]
    imported = import_kineto({"traceEvents": events})
    loaded = load(imported)
    assert len(loaded.program.threads) == 2
    report = check_loaded(loaded, Options(timeout=5))
    assert report.status.value in ("clean", "unknown")
    assert abs(compare(imported, loaded.program).ratio - 1) <= 0.10


def test_an_execution_trace_given_as_the_trace_says_to_use_et(run, tmp_path):
    status, _, stderr = run("import", "kineto", ET, "-o", tmp_path / "x.sched")
    assert status == 2 and "--et" in stderr and len(stderr.strip().splitlines()) == 1


def _query_trace(query_at: float) -> dict:
    """A kernel of 1000 us on stream 20, a record after it, a cudaEventQuery of that record
    at `query_at`, then a kernel on stream 7."""
    return {"traceEvents": [
        _event("cuda_runtime", "cudaLaunchKernel", 1, 1, 1.0, 3, correlation=1),
        _event("kernel", "fill", 0, 20, 5.0, 1000, stream=20, device=0, correlation=1),
        _event("cuda_runtime", "cudaEventRecord", 1, 1, 10.0, 2, correlation=2),
        _event("cuda_runtime", "cudaEventQuery", 1, 1, query_at, 2, correlation=3),
        _event("cuda_sync", "Event Sync", 0, -1, query_at + 0.5, 1, cuda_sync_kind="Event Sync", stream=-1,
               device=0, wait_on_stream=20, wait_on_cuda_event_record_corr_id=2, correlation=3),
        _event("cuda_runtime", "cudaLaunchKernel", 1, 1, query_at + 10, 3, correlation=4),
        _event("kernel", "reduce", 0, 7, max(query_at + 20, 1010.0), 20, stream=7, device=0, correlation=4),
    ]}


def test_an_event_query_that_found_the_work_running_orders_nothing():
    # CUDA's cudaEventQuery returns cudaErrorNotReady at once while the recorded work runs;
    # CUPTI still reports it as an Event Sync.
    running = import_kineto(_query_trace(20.0))
    assert statements(load(running).program, Op.SYNC) == []
    assert "found the event not ready: it orders nothing" in running.text
    done = import_kineto(_query_trace(1100.0))  # after the kernel ended: it returned success
    (sync,) = statements(load(done).program, Op.SYNC)
    assert sync.sync is SyncKind.EVENT


def test_a_synchronous_device_to_device_copy_does_not_block_the_host():
    # CUDA, "API synchronization behavior": no host-side synchronization from device to device.
    def copy(name: str) -> dict:
        return {"traceEvents": [
            _event("cuda_runtime", "cudaMemcpy", 1, 1, 1.0, 3, correlation=1),
            _event("gpu_memcpy", name, 0, 7, 5.0, 300, stream=7, device=0, correlation=1),
        ]}
    assert statements(load(import_kineto(copy("Memcpy DtoD (Device -> Device)"))).program, Op.SYNC) == []
    (sync,) = statements(load(import_kineto(copy("Memcpy DtoH (Device -> Pinned)"))).program, Op.SYNC)
    assert sync.sync is SyncKind.STREAM


def test_without_cuda_sync_a_record_waited_on_by_its_own_stream_is_taken_as_another_stream_s():
    # main.wait_stream(side) after work on both: the record is on `side`, though the thread's
    # last launch was on `main` (a wait for a record on its own stream would order nothing).
    events = [
        _event("cuda_runtime", "cudaLaunchKernel", 1, 1, 0.0, 2, correlation=1),
        _event("kernel", "prefetch", 0, 20, 3.0, 50, stream=20, device=0, correlation=1),
        _event("cuda_runtime", "cudaLaunchKernel", 1, 1, 4.0, 2, correlation=2),
        _event("kernel", "compute", 0, 7, 7.0, 10, stream=7, device=0, correlation=2),
        _event("cuda_runtime", "cudaEventRecord", 1, 1, 8.0, 1, correlation=3),
        _event("cuda_runtime", "cudaStreamWaitEvent", 1, 1, 10.0, 1, correlation=4),
        _event("cuda_runtime", "cudaLaunchKernel", 1, 1, 12.0, 2, correlation=5),
        _event("kernel", "use", 0, 7, 54.0, 10, stream=7, device=0, correlation=5),
    ]
    imported = import_kineto({"traceEvents": events})
    program = load(imported).program
    (wait,) = statements(program, Op.WAIT)
    assert program.streams[wait.stream].name == "stream7"
    assert program.streams[record_of(program, wait.event).stream].name == "stream20"
    assert "assumed: records the stream of the thread's latest launch" in imported.text


def _record_then_wait(recorded: int, recorded_device: int, waiting: int, waiting_device: int,
                      waiting_thread: int = 1) -> list[dict]:
    """Thread 1 launches `produce` on stream `recorded` and records it; `waiting_thread` has
    stream `waiting` wait for that record (named by cuda_sync) and launches `consume` on it."""
    return [
        _event("cuda_runtime", "cudaLaunchKernel", 1, 1, 0.0, 2, correlation=1),
        _event("kernel", "produce", recorded_device, recorded, 3.0, 50, stream=recorded, device=recorded_device,
               correlation=1),
        _event("cuda_runtime", "cudaEventRecord", 1, 1, 4.0, 1, correlation=2),
        _event("cuda_runtime", "cudaStreamWaitEvent", 1, waiting_thread, 10.0, 1, correlation=3),
        _event("cuda_sync", "Stream Wait Event", waiting_device, -1, 10.5, 0, cuda_sync_kind="Stream Wait Event",
               stream=waiting, device=waiting_device, wait_on_stream=recorded, wait_on_cuda_event_record_corr_id=2,
               correlation=3),
        _event("cuda_runtime", "cudaLaunchKernel", 1, waiting_thread, 12.0, 2, correlation=4),
        _event("kernel", "consume", waiting_device, waiting, 54.0, 10, stream=waiting, device=waiting_device,
               correlation=4),
    ]


def test_a_wait_bound_to_another_thread_s_record_keeps_that_binding():
    # The trace names the record (`wait_on_cuda_event_record_corr_id`); the threads' own
    # synchronization is not in it, so the spec keeps the order: the recording thread hands
    # off to the waiting one right after its record.
    imported = import_kineto({"traceEvents": _record_then_wait(20, 0, 7, 0, waiting_thread=2)})
    program = load(imported).program
    (wait,) = statements(program, Op.WAIT)
    record = record_of(program, wait.event)
    assert not program.events[wait.event].flag
    assert program.threads[wait.thread].name != program.threads[record.thread].name
    (notify,) = statements(program, Op.NOTIFY)
    (await_,) = statements(program, Op.AWAIT)
    assert notify.thread == record.thread and notify.index == record.index + 1
    assert await_.thread == wait.thread and await_.index == wait.index - 1
    report = check_loaded(load(imported), Options(timeout=10))
    assert report.status.value == "clean"


def test_a_wait_written_before_another_thread_s_sync_does_not_deadlock():
    # Thread 2 syncs stream 24 and then records on stream 20; thread 1 later waits on stream
    # 24 for that record. A flag event let the wait be enqueued before the sync: a deadlock
    # the run did not have. The hand-off keeps the wait after the record.
    events = [
        _event("cuda_runtime", "cudaLaunchKernel", 1, 2, 10.0, 2, correlation=101),
        _event("kernel", "k1", 0, 20, 12.0, 10, stream=20, device=0, correlation=101),
        _event("cuda_runtime", "cudaStreamSynchronize", 1, 2, 15.0, 1, correlation=102),
        _event("cuda_sync", "Stream Sync", 0, 24, 15.0, 1, cuda_sync_kind="Stream Sync", stream=24, device=0,
               correlation=102),
        _event("cuda_runtime", "cudaEventRecord", 1, 2, 30.0, 2, correlation=103),
        _event("cuda_runtime", "cudaStreamWaitEvent", 1, 1, 40.0, 2, correlation=104),
        _event("cuda_sync", "Stream Wait Event", 0, 24, 41.0, 1, cuda_sync_kind="Stream Wait Event", stream=24,
               device=0, wait_on_stream=20, wait_on_cuda_event_record_corr_id=103, correlation=104),
        _event("cuda_runtime", "cudaLaunchKernel", 1, 1, 45.0, 2, correlation=105),
        _event("kernel", "k2", 0, 24, 48.0, 10, stream=24, device=0, correlation=105),
    ]
    report = check_loaded(load(import_kineto({"traceEvents": events})), Options(timeout=10))
    assert report.status.value == "clean", [f.message for f in report.findings]


def test_two_threads_enqueueing_onto_one_stream_keep_the_trace_s_order_on_it():
    # An autograd thread launches the backward kernel on stream 7; the main thread then records
    # on stream 7 and has stream 24 wait for it before a kernel that reads what backward wrote.
    events = [
        _event("cuda_runtime", "cudaLaunchKernel", 1, 2, 11.0, 3, correlation=101),
        _event("kernel", "k_backward", 0, 7, 15.0, 100, stream=7, device=0, correlation=101),
        _event("cuda_runtime", "cudaEventRecord", 1, 1, 50.0, 1, correlation=102),
        _event("cuda_runtime", "cudaStreamWaitEvent", 1, 1, 52.0, 1, correlation=103),
        _event("cuda_sync", "Stream Wait Event", 0, 24, 52.0, 1, cuda_sync_kind="Stream Wait Event", stream=24,
               device=0, wait_on_stream=7, wait_on_cuda_event_record_corr_id=102, correlation=103),
        _event("cuda_runtime", "cudaLaunchKernel", 1, 1, 56.0, 3, correlation=104),
        _event("kernel", "k_read", 0, 24, 115.0, 20, stream=24, device=0, correlation=104),
    ]
    imported = import_kineto({"traceEvents": events})
    program = load(imported).program
    (backward,) = [s for s in program.statements if s.name == "k_backward"]
    (notify,) = statements(program, Op.NOTIFY)
    (await_,) = statements(program, Op.AWAIT)
    assert notify.index == backward.index + 1
    assert program.statements[await_.index + 1].op is Op.RECORD
    assert "Threads hand off to each other" in imported.text
    # Both touch a buffer once it is there: the order keeps them apart.
    text = imported.text.replace("k_backward", "k_backward writes grad").replace("k_read", "k_read reads grad")
    text = text.replace("stream stream7 on gpu0", "stream stream7 on gpu0\nbuffer grad 1MiB on gpu0")
    report = check_loaded(load_text(text), Options(timeout=10))
    assert report.status.value == "clean", [f.message for f in report.findings]
    without = "\n".join(line for line in text.splitlines() if "handoff" not in line)
    report = check_loaded(load_text(without), Options(timeout=10))
    assert any(f.kind.value == "race" for f in report.findings)


def test_an_older_trace_s_wait_names_the_event_and_binds_to_the_latest_record():
    # Older Kineto: `wait_on_cuda_event_id` and `wait_on_stream`, no record correlation.
    events = _record_then_wait(20, 0, 24, 0)
    del events[4]["args"]["wait_on_cuda_event_record_corr_id"]
    events[4]["args"]["wait_on_cuda_event_id"] = 5
    imported = import_kineto({"traceEvents": events})
    program = load(imported).program
    (wait,) = statements(program, Op.WAIT)
    assert program.streams[wait.stream].name == "stream24"
    assert program.streams[record_of(program, wait.event).stream].name == "stream20"
    assert "the trace names the event but not its record" in imported.text


def test_a_repeated_correlation_id_launches_each_operation_once():
    events = [
        _event("cuda_runtime", "cudaLaunchKernel", 1, 1, 10.0, 5, correlation=500),
        _event("kernel", "kA", 0, 7, 20.0, 10, stream=7, device=0, correlation=500),
        _event("cuda_runtime", "cudaLaunchKernel", 1, 1, 40.0, 5, correlation=500),
        _event("kernel", "kB", 0, 7, 50.0, 10, stream=7, device=0, correlation=500),
    ]
    imported = import_kineto({"traceEvents": events})
    program = load(imported).program
    assert [s.name for s in program.statements if s.op is Op.KERNEL] == ["kA", "kB"]
    assert any("repeat the correlation id" in note for note in imported.notes)


def test_a_cross_device_wait_records_on_the_device_that_ran_the_recorded_stream():
    # cuda_sync names the waiting stream's device; stream 13 ran only on gpu0.
    program = load(import_kineto({"traceEvents": _record_then_wait(13, 0, 30, 1)})).program
    (wait,) = statements(program, Op.WAIT)
    assert program.streams[wait.stream].name == "stream30"
    assert program.streams[record_of(program, wait.event).stream].name == "stream13"
    assert sorted(s.name for s in program.streams) == ["stream13", "stream30"]


def test_a_pageable_copy_that_returned_before_it_ended_stages_its_source():
    # CUDA: cudaMemcpyAsync from pageable memory returns once the source is staged; the trace
    # shows the call ending at 50 us while the copy ran until 100 us.
    def copy(call_dur: float) -> dict:
        return {"traceEvents": [
            _event("cuda_runtime", "cudaMemcpyAsync", 1, 1, 0.0, call_dur, correlation=1),
            _event("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", 0, 7, 10.0, 90, stream=7, device=0,
                   correlation=1),
        ]}
    staged = import_kineto(copy(50)).text
    assert "host stage reads pageable_mem[0]" in staged and "stream7: copy gpu0_mem[0] <- pinned_mem[0] 90us" in staged
    synchronous = copy(50)
    synchronous["traceEvents"][0]["name"] = "cudaMemcpy"  # syncs the stream first, then stages
    text = import_kineto(synchronous).text
    assert text.index("sync stream7") < text.index("host stage reads pageable_mem[0]") < text.index("stream7: copy")
    blocked = import_kineto(copy(101)).text  # returned after the copy: as written
    assert "host stage" not in blocked and "stream7: copy gpu0_mem[0] <- pageable_mem[0] 90us" in blocked


def test_work_launched_before_the_window_is_enqueued_before_later_launches_on_its_stream():
    events = [
        _event("kernel", "old", 0, 7, 50.0, 40, stream=7, device=0, correlation=999),  # no call in the trace
        _event("cuda_runtime", "cudaLaunchKernel", 1, 1, 0.0, 2, correlation=1),
        _event("kernel", "new", 0, 7, 90.0, 10, stream=7, device=0, correlation=1),
        _event("cuda_runtime", "cudaStreamSynchronize", 1, 1, 5.0, 96, correlation=2),
        _event("cuda_sync", "Stream Sync", 0, 7, 5.5, 95, cuda_sync_kind="Stream Sync", stream=7, device=0,
               correlation=2),
    ]
    imported = import_kineto({"traceEvents": events})
    program = load(imported).program
    order = [s.name if s.op is Op.KERNEL else s.op.value for s in program.statements if s.op is not Op.HOST]
    assert order == ["old", "new", "sync"]
    assert abs(compare(imported, program).ratio - 1) <= 0.05


def test_quoted_timestamps_and_stream_lanes_named_in_the_thread_id():
    events = [
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": "0.5", "dur": "2",
         "args": {"correlation": 1}},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": "stream 7", "ts": "3", "dur": 10,
         "args": {"device": 0, "correlation": 1}},
    ]
    program = load(import_kineto({"traceEvents": events})).program
    (kernel,) = statements(program, Op.KERNEL)
    assert (program.streams[kernel.stream].name, kernel.duration) == ("stream7", 10_000)


def test_wrongly_typed_fields_of_a_corrupt_trace_are_read_as_far_as_they_go():
    events = [
        _event("cuda_runtime", "cudaLaunchKernel", {"odd": 1}, [1, 2], 0.0, 2, correlation=1),
        _event("kernel", "k", 0, 7, 3.0, 10, stream=7, device=0, correlation=1),
        _event("cpu_op", "aten::add_", {"odd": 1}, [1, 2], 0.0, 3, **{"Record function id": 9}),
    ]
    imported = import_kineto({"traceEvents": events})
    assert [s.name for s in statements(load(imported).program, Op.KERNEL)] == ["k"]
    bad = {"id": 5, "name": "aten::add_", "inputs": 1.5, "input_types": True, "outputs": {"values": 3},
           "attrs": [{"name": "rf_id", "type": "uint64", "value": 9}]}
    et = read_execution_trace({"schema": "1.1.1-chakra.0.0.4", "pid": 1, "nodes": [bad]})
    assert et.operator(9, "aten::add_").accesses == ()


def test_a_negative_device_id_is_skipped_not_written_as_a_name():
    """A corrupt trace's `device: -1` on a cuda_sync or cuda_event entry would make `gpu-1`,
    which no spec can declare: the entry is skipped and counted."""
    data = trace()
    for ev in data["traceEvents"]:
        if ev.get("cat") in ("cuda_sync", "cuda_event") and isinstance(ev.get("args"), dict):
            ev["args"]["device"] = -1
    imported = import_kineto(data)
    assert "gpu-" not in imported.text
    load(imported)


def test_corrupt_numbers_and_names_in_a_trace_make_a_spec_that_loads(run, tmp_path):
    """A cpu_op lasting 1e308 us is corrupt and read as having no duration; a lone surrogate
    and a NUL in names reach the spec's comments replaced; an integer of 5,000 digits is an
    input error. None is an internal error, and each written spec passes `check` as one."""
    data = trace()
    ops = [ev for ev in data["traceEvents"] if str(ev.get("cat", "")).lower() in ("cpu_op", "user_annotation")]
    assert ops
    ops[0]["dur"] = 1e308
    for ev in ops[1:]:
        ev["name"] = "op\ud800\0name"
    source = tmp_path / "corrupt.json"
    source.write_text(json.dumps(data))
    out = tmp_path / "out.sched"
    status, _, stderr = run("import", "kineto", source, "-o", out)
    assert status == 0, stderr
    assert "\0" not in out.read_text() and load_text(out.read_text(), "out.sched").program is not None
    source.write_text('{"traceEvents": [{"ts": ' + "9" * 5000 + "}]}")
    status, _, stderr = run("import", "kineto", source, "-o", out)
    assert status == 2 and "thousands of digits" in stderr


def _copy_then(calls: list[dict]) -> list[dict]:
    """A D2H copy on stream 20 (20-120 us) launched at 11 us, a kernel on stream 7, then `calls`."""
    return [
        _event("cuda_runtime", "cudaMemcpyAsync", 1, 1, 11.0, 5, correlation=101),
        _event("gpu_memcpy", "Memcpy DtoH (Device -> Pinned)", 0, 20, 20.0, 100, stream=20, device=0, correlation=101),
        _event("cuda_runtime", "cudaLaunchKernel", 1, 1, 27.0, 3, correlation=102),
        _event("kernel", "k_other", 0, 7, 30.0, 10, stream=7, device=0, correlation=102),
    ] + calls


def test_a_guessed_stream_sync_takes_the_stream_that_released_it():
    # No cuda_sync events: the sync blocked from 35 to 125 us, and stream 20's copy ended at
    # 120 us, though the thread's last launch was onto stream 7.
    imported = import_kineto({"traceEvents": _copy_then([
        _event("cuda_runtime", "cudaStreamSynchronize", 1, 1, 35.0, 90, correlation=103)])})
    (sync,) = statements(load(imported).program, Op.SYNC)
    assert sync.sync is SyncKind.STREAM and load(imported).program.streams[sync.target].name == "stream20"
    assert "the stream whose work ended last while it blocked" in imported.text


@pytest.mark.parametrize("returns, orders", [(125.0, True), (60.0, False)])
def test_a_stream_query_that_found_the_work_done_orders_it(returns, orders):
    imported = import_kineto({"traceEvents": _copy_then([
        _event("cuda_runtime", "cudaLaunchKernel", 1, 1, 31.0, 1, correlation=103),
        _event("kernel", "k_more", 0, 20, 121.0, 1, stream=20, device=0, correlation=103),
        _event("cuda_runtime", "cudaStreamQuery", 1, 1, returns - 1, 1, correlation=104)])})
    syncs = statements(load(imported).program, Op.SYNC)
    assert len(syncs) == (1 if orders else 0)
    assert ("found it done" if orders else "not ready, it orders nothing") in imported.text


def test_records_that_repeat_a_correlation_id_hand_off_each_on_its_own():
    # Two threads record on stream 7 under one correlation id (ids restart per process); a
    # hand-off keyed by the id made each record wait for the other's: a deadlock.
    events = [
        _event("cuda_runtime", "cudaLaunchKernel", 1, 2, 5.0, 1, correlation=1),
        _event("kernel", "k2", 0, 7, 6.0, 3, stream=7, device=0, correlation=1),
        _event("cuda_runtime", "cudaEventRecord", 1, 1, 10.0, 1, correlation=50),
        _event("cuda_runtime", "cudaEventRecord", 1, 2, 30.0, 1, correlation=50),
        _event("cuda_runtime", "cudaStreamWaitEvent", 1, 1, 40.0, 1, correlation=60),
        _event("cuda_sync", "Stream Wait Event", 0, 24, 40.5, 0, cuda_sync_kind="Stream Wait Event", stream=24,
               device=0, wait_on_stream=7, wait_on_cuda_event_record_corr_id=50, correlation=60),
        _event("cuda_runtime", "cudaLaunchKernel", 1, 1, 45.0, 1, correlation=61),
        _event("kernel", "k3", 0, 24, 46.0, 3, stream=24, device=0, correlation=61),
    ]
    report = check_loaded(load(import_kineto({"traceEvents": events})), Options(timeout=10))
    assert report.status.value == "clean", [f.message for f in report.findings]


def test_a_current_trace_s_wait_for_a_record_outside_it_is_still_left_out():
    # Current Kineto writes the record id (-1: none) beside the event id: nothing to infer.
    events = _record_then_wait(20, 0, 24, 0)
    events[4]["args"]["wait_on_cuda_event_record_corr_id"] = -1
    events[4]["args"]["wait_on_cuda_event_id"] = 9
    imported = import_kineto({"traceEvents": events})
    assert statements(load(imported).program, Op.WAIT) == []
    assert "the event was never recorded" in imported.text


def test_a_sync_of_a_stream_another_thread_launched_onto_keeps_the_trace_s_order():
    # The autograd thread launches backward on stream 7; the main thread then synchronizes the
    # device (its backward() returned first) and launches the optimizer step on stream 7.
    events = [
        _event("cuda_runtime", "cudaLaunchKernel", 1, 2, 11.0, 3, correlation=101),
        _event("kernel", "k_backward", 0, 7, 15.0, 100, stream=7, device=0, correlation=101),
        _event("cuda_runtime", "cudaDeviceSynchronize", 1, 1, 50.0, 70, correlation=102),
        _event("cuda_sync", "Context Sync", 0, 7, 50.0, 70, cuda_sync_kind="Context Sync", stream=-1, device=0,
               correlation=102),
        _event("cuda_runtime", "cudaLaunchKernel", 1, 1, 125.0, 3, correlation=103),
        _event("kernel", "k_step", 0, 7, 130.0, 20, stream=7, device=0, correlation=103),
        _event("cuda_runtime", "cudaLaunchKernel", 1, 2, 160.0, 3, correlation=104),
        _event("kernel", "k_next", 0, 7, 165.0, 20, stream=7, device=0, correlation=104),
    ]
    imported = import_kineto({"traceEvents": events})
    text = imported.text
    main = text.split("thread main {", 1)[1].split("\n}", 1)[0]
    assert main.index("await handoff[") < main.index("sync gpu0")
    program = load(imported).program
    from checker.determinism import nondeterminism
    assert nondeterminism(program) is None  # (the hand-offs fix every order on stream 7)
    report = check_loaded(load(imported), Options(timeout=10))
    assert report.status.value == "clean", [f.message for f in report.findings]


# -- runs of several threads that completed: never a deadlock (found by a fuzzing review)

COMPLETED_RUNS = {
    'wait_record_overlap_same_stream': {"traceEvents":[{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":100,"tid":101,"ts":1.0,"dur":3.0,"args":{"correlation":1}},{"ph":"X","cat":"kernel","name":"k_backward","pid":0,"tid":7,"ts":4.5,"dur":50.0,"args":{"stream":7,"device":0,"correlation":1}},{"ph":"X","cat":"cuda_runtime","name":"cudaStreamWaitEvent","pid":100,"tid":100,"ts":10.0,"dur":5.0,"args":{"correlation":3}},{"ph":"X","cat":"cuda_runtime","name":"cudaEventRecord","pid":100,"tid":101,"ts":10.5,"dur":2.0,"args":{"correlation":2}},{"ph":"X","cat":"cuda_sync","name":"Stream Wait Event","pid":0,"tid":7,"ts":14.0,"dur":0.2,"args":{"cuda_sync_kind":"Stream Wait Event","stream":7,"device":0,"wait_on_stream":7,"wait_on_cuda_event_record_corr_id":2,"correlation":3}},{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":100,"tid":100,"ts":16.0,"dur":3.0,"args":{"correlation":4}},{"ph":"X","cat":"kernel","name":"k_step","pid":0,"tid":7,"ts":54.5,"dur":10.0,"args":{"stream":7,"device":0,"correlation":4}}]},
    'wait_record_overlap_cross_stream': {"traceEvents":[{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":100,"tid":101,"ts":1.0,"dur":3.0,"args":{"correlation":1}},{"ph":"X","cat":"kernel","name":"k_backward","pid":0,"tid":7,"ts":4.5,"dur":50.0,"args":{"stream":7,"device":0,"correlation":1}},{"ph":"X","cat":"cuda_runtime","name":"cudaStreamWaitEvent","pid":100,"tid":100,"ts":10.0,"dur":4.0,"args":{"correlation":4}},{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":100,"tid":101,"ts":10.5,"dur":1.0,"args":{"correlation":2}},{"ph":"X","cat":"kernel","name":"k_grad","pid":0,"tid":24,"ts":12.0,"dur":20.0,"args":{"stream":24,"device":0,"correlation":2}},{"ph":"X","cat":"cuda_runtime","name":"cudaEventRecord","pid":100,"tid":101,"ts":11.6,"dur":1.0,"args":{"correlation":3}},{"ph":"X","cat":"cuda_sync","name":"Stream Wait Event","pid":0,"tid":24,"ts":13.0,"dur":0.2,"args":{"cuda_sync_kind":"Stream Wait Event","stream":24,"device":0,"wait_on_stream":7,"wait_on_cuda_event_record_corr_id":3,"correlation":4}},{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":100,"tid":100,"ts":15.0,"dur":3.0,"args":{"correlation":5}},{"ph":"X","cat":"kernel","name":"k_step","pid":0,"tid":24,"ts":54.5,"dur":10.0,"args":{"stream":24,"device":0,"correlation":5}}]},
    'wait_record_same_microsecond': {"traceEvents":[{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":100,"tid":101,"ts":1,"dur":3,"args":{"correlation":1}},{"ph":"X","cat":"kernel","name":"k_backward","pid":0,"tid":7,"ts":5,"dur":50,"args":{"stream":7,"device":0,"correlation":1}},{"ph":"X","cat":"cuda_runtime","name":"cudaEventRecord","pid":100,"tid":101,"ts":10,"dur":0,"args":{"correlation":2}},{"ph":"X","cat":"cuda_runtime","name":"cudaStreamWaitEvent","pid":100,"tid":100,"ts":10,"dur":0,"args":{"correlation":3}},{"ph":"X","cat":"cuda_sync","name":"Stream Wait Event","pid":0,"tid":7,"ts":10,"dur":0,"args":{"cuda_sync_kind":"Stream Wait Event","stream":7,"device":0,"wait_on_stream":7,"wait_on_cuda_event_record_corr_id":2,"correlation":3}},{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":100,"tid":100,"ts":12,"dur":3,"args":{"correlation":4}},{"ph":"X","cat":"kernel","name":"k_step","pid":0,"tid":7,"ts":55,"dur":10,"args":{"stream":7,"device":0,"correlation":4}}]},
    'dl_51251_no_cuda_sync': {"traceEvents":[{"ph":"M","name":"thread_name","pid":100,"tid":100,"args":{"name":"main"}},{"ph":"M","name":"thread_name","pid":100,"tid":101,"args":{"name":"thread 101"}},{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":100,"tid":100,"ts":22.0,"dur":2.0,"args":{"correlation":1001}},{"ph":"X","cat":"cuda_runtime","name":"cudaMemcpyAsync","pid":100,"tid":101,"ts":22.0,"dur":2.0,"args":{"correlation":1002}},{"ph":"X","cat":"cuda_runtime","name":"cudaStreamWaitEvent","pid":100,"tid":100,"ts":24.0,"dur":3.0,"args":{"correlation":1003}},{"ph":"X","cat":"cuda_runtime","name":"cudaEventRecord","pid":100,"tid":101,"ts":24.0,"dur":4.0,"args":{"correlation":1004}},{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":24.0,"dur":56.029,"args":{"stream":7,"device":0,"correlation":1001}},{"ph":"X","cat":"cuda_runtime","name":"cudaMemcpyAsync","pid":100,"tid":100,"ts":27.0,"dur":2.0,"args":{"correlation":1005}},{"ph":"X","cat":"gpu_memcpy","name":"Memcpy HtoD (Pinned -> Device)","pid":0,"tid":7,"ts":80.0,"dur":44.158,"args":{"stream":7,"device":0,"correlation":1002}},{"ph":"X","cat":"gpu_memcpy","name":"Memcpy HtoD (Pinned -> Device)","pid":0,"tid":7,"ts":124.0,"dur":21.813,"args":{"stream":7,"device":0,"correlation":1005}}]},
    'memcpy_sync_not_ordered': {"traceEvents":[{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":100,"tid":101,"ts":1.0,"dur":3.0,"args":{"correlation":1}},{"ph":"X","cat":"kernel","name":"k_backward","pid":0,"tid":7,"ts":4.5,"dur":20.0,"args":{"stream":7,"device":0,"correlation":1}},{"ph":"X","cat":"cuda_runtime","name":"cudaMemcpy","pid":100,"tid":100,"ts":10.0,"dur":30.0,"args":{"correlation":2}},{"ph":"X","cat":"gpu_memcpy","name":"Memcpy DtoH (Device -> Pageable)","pid":0,"tid":7,"ts":25.0,"dur":10.0,"args":{"stream":7,"device":0,"correlation":2}},{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":100,"tid":101,"ts":15.0,"dur":3.0,"args":{"correlation":3}},{"ph":"X","cat":"kernel","name":"k_next","pid":0,"tid":7,"ts":35.5,"dur":20.0,"args":{"stream":7,"device":0,"correlation":3}}]},
}


@pytest.mark.parametrize("name", sorted(COMPLETED_RUNS))
def test_a_run_of_several_threads_that_completed_does_not_deadlock(name):
    # wait_record_*: a wait called while (or at the microsecond) another thread's record call
    # ran, bound to that record, took effect after it: the order on the stream agrees;
    # memcpy_*: a blocking copy's sync is ordered with the other thread's next launch
    imported = import_kineto(json.loads(json.dumps(COMPLETED_RUNS[name])))
    loaded = load_text(imported.text, f"{name}.sched")
    assert loaded.program is not None
    report = check_loaded(loaded, Options(timeout=10))
    assert not [f for f in report.findings if f.code is Code.SP201], imported.text
    if name.startswith("memcpy"):
        from checker.determinism import nondeterminism
        assert nondeterminism(loaded.program) is None


def test_bindings_that_wait_for_each_other_in_a_circle_do_not_hang_the_import():
    # (a corrupt trace: each thread's wait is bound to the other thread's later record)
    events = [
        _event("cuda_runtime", "cudaStreamWaitEvent", 1, 1, 10.0, 1, correlation=1),
        _event("cuda_sync", "Stream Wait Event", 0, 7, 10.5, 0.1, cuda_sync_kind="Stream Wait Event", stream=7,
               device=0, wait_on_stream=7, wait_on_cuda_event_record_corr_id=4, correlation=1),
        _event("cuda_runtime", "cudaEventRecord", 1, 1, 20.0, 1, correlation=2),
        _event("cuda_runtime", "cudaStreamWaitEvent", 1, 2, 11.0, 1, correlation=3),
        _event("cuda_sync", "Stream Wait Event", 0, 7, 11.5, 0.1, cuda_sync_kind="Stream Wait Event", stream=7,
               device=0, wait_on_stream=7, wait_on_cuda_event_record_corr_id=2, correlation=3),
        _event("cuda_runtime", "cudaEventRecord", 1, 2, 21.0, 1, correlation=4),
        _event("cuda_runtime", "cudaLaunchKernel", 1, 1, 30.0, 1, correlation=5),
        _event("kernel", "k", 0, 7, 31.0, 5, stream=7, device=0, correlation=5),
    ]
    imported = import_kineto({"traceEvents": events})
    assert load_text(imported.text, "circle.sched").program is not None


# -- orderings the trace shows, and no more (found by an independent fidelity review)


def _et_of(*operators: tuple[int, str, list, list]) -> object:
    """An Execution Trace of (rf_id, name, tensors read, tensors written): tensors are storage
    ids of 4 KiB on cuda:0; each operator writes its written tensors in place."""
    nodes = []
    for rf_id, name, reads, writes in operators:
        tensors = [[n, storage, 0, 1024, 4, "cuda:0"] for n, storage in enumerate(writes + reads)]
        kinds = ["Tensor(a!) self" if n < len(writes) else "Tensor other" for n in range(len(tensors))]
        nodes.append({"name": name, "id": 10 + rf_id, "rf_id": rf_id, "op_schema": f"{name}({', '.join(kinds)})",
                      "inputs": tensors, "input_types": ["Tensor(float)"] * len(tensors),
                      "outputs": [], "output_types": []})
    return read_execution_trace({"schema": "1.0.1", "pid": 1, "nodes": nodes})


def _launch(thread: int, ts: float, corr: int, kernel: str, stream: int, start: float, dur: float,
            rf_id: int | None = None) -> list[dict]:
    """A launch of `kernel` onto `stream` by `thread` (inside operator `rf_id`, named like the kernel)."""
    events = [_event("cuda_runtime", "cudaLaunchKernel", 1, thread, ts, 2, correlation=corr),
              _event("kernel", kernel, 0, stream, start, dur, stream=stream, device=0, correlation=corr)]
    if rf_id is not None:
        events.append(_event("cpu_op", f"op::{kernel}", 1, thread, ts, 3, **{"Record function id": rf_id}))
    return events


def _sync(thread: int, ts: float, dur: float, corr: int, stream: int = -1) -> list[dict]:
    """A cudaStreamSynchronize of `stream` (-1: a cudaDeviceSynchronize) with its cuda_sync event."""
    kind, name = ("Stream Sync", "cudaStreamSynchronize") if stream >= 0 else ("Context Sync", "cudaDeviceSynchronize")
    return [_event("cuda_runtime", name, 1, thread, ts, dur, correlation=corr),
            _event("cuda_sync", kind, 0, max(stream, 0), ts, dur, cuda_sync_kind=kind, stream=stream, device=0,
                   correlation=corr)]


def _races(imported) -> list[str]:
    report = check_loaded(load(imported), Options(timeout=10))
    return sorted(f.buffer for f in report.findings if f.kind.value == "race")


def test_work_another_thread_enqueues_during_a_sync_is_not_ordered_after_its_return():
    # Thread 2 runs k1 (reads X) on stream 20 and syncs stream 20 from 10 to 101 us; thread 1
    # enqueues k2 on stream 20 at 20 us (it runs after k1), then k3 (writes X) on stream 7 at
    # 30 us, which runs while k1 does: a race the run had.
    events = (_launch(2, 0.0, 1, "k1", 20, 5.0, 95, rf_id=1) + _sync(2, 10.0, 91, 2, stream=20)
              + _launch(1, 20.0, 3, "k2", 20, 101.0, 10) + _launch(1, 30.0, 4, "k3", 7, 32.0, 10, rf_id=3)
              + _sync(1, 45.0, 70, 5, stream=20))
    imported = import_kineto({"traceEvents": events}, _et_of((1, "op::k1", [501], [502]), (3, "op::k3", [], [501])))
    assert _races(imported) == ["s501_gpu0"], imported.text
    # thread 1 enqueues k2 after thread 2 issued its sync, which does not wait for k2
    program = load(imported).program
    (sync,) = [s for s in statements(program, Op.SYNC) if program.threads[s.thread].name == "t2"]
    assert sync.sync is SyncKind.EVENT
    assert "stream20: record sync_point[0]" in imported.text
    from checker.determinism import nondeterminism
    assert nondeterminism(program) is None  # (decided on the fast path, as before)


def test_work_another_thread_enqueues_during_a_synchronous_copy_is_not_ordered_after_its_return():
    # Thread 2 runs k1 (reads X) on stream 20, then cudaMemcpy onto stream 20 from 10 to 60 us
    # (the copy runs 40..55); thread 1 enqueues k2 on stream 20 at 20 us and k3 (writes X) on
    # stream 7 at 30 us, which runs while k1 does.
    events = _launch(2, 0.0, 1, "k1", 20, 5.0, 35, rf_id=1) + [
        _event("cuda_runtime", "cudaMemcpy", 1, 2, 10.0, 50, correlation=2),
        _event("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", 0, 20, 40.0, 15, stream=20, device=0, correlation=2),
    ] + _launch(1, 20.0, 3, "k2", 20, 55.0, 5) + _launch(1, 30.0, 4, "k3", 7, 32.0, 10, rf_id=4)
    imported = import_kineto({"traceEvents": events}, _et_of((1, "op::k1", [501], [502]), (4, "op::k3", [], [501])))
    assert _races(imported) == ["s501_gpu0"], imported.text
    copier = imported.text.split("thread t2 {", 1)[1]
    assert copier.index("stream20: copy") < copier.index("notify handoff") < copier.index("sync sync_point[0]")


def test_threads_sharing_a_stream_keep_the_order_the_gpu_ran_their_work():
    # Thread 1's launch call (10..30 us) enqueued kA (writes Y), which ran at 32 us; thread 2's
    # kB (launched at 12) ran at 15, then it recorded, stream 20 waited, and kC (reads Y) ran
    # at 21 us, before kA: kA was enqueued after the record, and kC races with it.
    events = _launch(1, 10.0, 1, "kA", 7, 32.0, 10, rf_id=1)
    events[0]["dur"] = 20
    events += _launch(2, 12.0, 2, "kB", 7, 15.0, 5) + [
        _event("cuda_runtime", "cudaEventRecord", 1, 2, 15.0, 1, correlation=3),
        _event("cuda_runtime", "cudaStreamWaitEvent", 1, 2, 17.0, 1, correlation=4),
        _event("cuda_sync", "Stream Wait Event", 0, 20, 17.5, 0.1, cuda_sync_kind="Stream Wait Event", stream=20,
               device=0, wait_on_stream=7, wait_on_cuda_event_record_corr_id=3, correlation=4),
    ] + _launch(2, 19.0, 5, "kC", 20, 21.0, 5, rf_id=5) + _sync(2, 45.0, 2, 6)
    imported = import_kineto({"traceEvents": events}, _et_of((1, "op::kA", [], [601]), (5, "op::kC", [601], [602])))
    text = imported.text
    first, second = text.split("thread main {", 1)[1].split("\n}", 1)[0], text.split("thread t2 {", 1)[1]
    (handoff,) = re.findall(r"await (handoff\[\d+\])", first.split("stream7: kernel kA")[0])
    assert second.index("stream7: kernel kB") < second.index("stream7: record e3") < second.index(f"notify {handoff}")
    assert _races(imported) == ["s601_gpu0"], imported.text


def test_a_sync_after_another_thread_s_sync_follows_its_issue_not_its_return():
    # Thread 2 syncs the device from 1 to 101 us (k1, reading X on stream 7, ends at 100);
    # thread 1's own sync of the idle stream 20 at 10 us returned at once, and its k2 (writes
    # X, on stream 20) ran from 14 to 24 us, while k1 ran.
    events = (_launch(1, 0.0, 1, "k1", 7, 2.0, 98, rf_id=1) + _sync(2, 1.0, 100, 2)
              + _sync(1, 10.0, 1, 3, stream=20) + _launch(1, 12.0, 4, "k2", 20, 14.0, 10, rf_id=2)
              + _sync(1, 25.0, 1, 5, stream=20))
    imported = import_kineto({"traceEvents": events}, _et_of((1, "op::k1", [501], [502]), (2, "op::k2", [], [501])))
    assert _races(imported) == ["s501_gpu0"], imported.text
    text = imported.text
    main, other = text.split("thread main {", 1)[1].split("\n}", 1)[0], text.split("thread t2 {", 1)[1]
    (handoff,) = re.findall(r"await (handoff\[\d+\])", main.split("sync stream20")[0].split("stream7: kernel k1")[1])
    assert other.index("record sync_point") < other.index(f"notify {handoff}") < other.index("sync sync_point")
    from checker.determinism import nondeterminism
    assert nondeterminism(load(imported).program) is None  # (the hand-offs fix every order)

@pytest.mark.parametrize("cuda_sync", [True, False])
def test_a_sync_after_a_record_does_not_wait_for_another_thread_s_work_that_ended_after_it_returned(cuda_sync):
    # Thread 1 runs k1 on stream 7, records (12 us), has stream 20 wait (13 us) and syncs
    # stream 7 from 14 to 32 us; thread 2's kB (writes X), launched at 12 us, ran on stream 7
    # from 18 to 38 us, so the sync did not wait for it; thread 1's k3 (writes X) ran at 34 us,
    # while kB did: a race the run had. The record and the wait, which took effect after kB's
    # launch call began, put the sync after kB.
    events = _launch(1, 7.0, 1, "k1", 7, 13.0, 5) + [
        _event("cuda_runtime", "cudaEventRecord", 1, 1, 12.0, 1, correlation=10),
        _event("cuda_runtime", "cudaStreamWaitEvent", 1, 1, 13.0, 1, correlation=11),
    ] + _sync(1, 14.0, 18, 3, stream=7) + _launch(1, 33.0, 12, "k3", 20, 34.0, 3, rf_id=3) \
        + _launch(2, 12.0, 2, "kB", 7, 18.0, 20, rf_id=2) + _sync(2, 15.0, 25, 5, stream=7)
    if cuda_sync:
        events.append(_event("cuda_sync", "Stream Wait Event", 0, 20, 13.5, 0.1, cuda_sync_kind="Stream Wait Event",
                             stream=20, device=0, wait_on_stream=7, wait_on_cuda_event_record_corr_id=10,
                             correlation=11))
    else:
        events = [e for e in events if e["cat"] != "cuda_sync"]
    imported = import_kineto({"traceEvents": events}, _et_of((2, "op::kB", [], [501]), (3, "op::k3", [], [501])))
    assert _races(imported) == ["s501_gpu0"], imported.text
    main = imported.text.split("thread main {", 1)[1].split("\n}", 1)[0]
    assert "await" not in main, imported.text


def test_a_record_made_during_another_thread_s_launch_call_follows_the_work_its_event_sync_waited_for():
    # Thread 3's launch call (2..7 us) enqueued k2 (writes X), which ran on stream 20 from 9 to
    # 19 us (the device was idle from 8, after thread 2's k1); thread 1 recorded on stream 20
    # at 3 us, inside that call, and its cudaEventSynchronize of the record blocked from 8 to
    # 20 us: the record completed only after k2, so k2 was enqueued before it, and thread 1's
    # k5 (writes X) at 21 us does not race with k2.
    events = _launch(2, 0.0, 1, "k1", 24, 1.0, 7) + _launch(3, 2.0, 2, "k2", 20, 9.0, 10, rf_id=2) + [
        _event("cuda_runtime", "cudaEventRecord", 1, 1, 3.0, 1, correlation=3),
        _event("cuda_runtime", "cudaEventSynchronize", 1, 1, 8.0, 12, correlation=4),
        _event("cuda_sync", "Event Sync", 0, -1, 8.2, 11.6, cuda_sync_kind="Event Sync", stream=-1, device=0,
               wait_on_stream=20, wait_on_cuda_event_record_corr_id=3, correlation=4),
    ] + _launch(1, 21.0, 5, "k5", 7, 25.0, 5, rf_id=5)
    events[2]["dur"] = 5  # (k2's launch call)
    imported = import_kineto({"traceEvents": events}, _et_of((2, "op::k2", [], [501]), (5, "op::k5", [], [501])))
    assert _races(imported) == [], imported.text
    main = imported.text.split("thread main {", 1)[1].split("\n}", 1)[0]
    assert main.index("await handoff") < main.index("stream20: record e3"), imported.text



@pytest.mark.parametrize("cuda_sync", [True, False])
def test_a_record_and_a_wait_at_the_same_microsecond_keep_the_order_of_their_correlation_ids(cuda_sync):
    # cudaEventRecord (0 us) then cudaStreamWaitEvent (1 us), both at 10 us: longest first put
    # the wait before the record, which then bound to nothing, and consume raced with produce.
    events = _launch(1, 0.0, 1, "produce", 20, 2.0, 50, rf_id=1) + [
        _event("cuda_runtime", "cudaEventRecord", 1, 1, 10.0, 0, correlation=2),
        _event("cuda_runtime", "cudaStreamWaitEvent", 1, 1, 10.0, 1, correlation=3),
    ] + _launch(1, 11.0, 4, "consume", 7, 52.0, 5, rf_id=4) + _sync(1, 12.0, 46, 5, stream=7)
    if cuda_sync:
        events.append(_event("cuda_sync", "Stream Wait Event", 0, 7, 10.5, 0.1, cuda_sync_kind="Stream Wait Event",
                             stream=7, device=0, wait_on_stream=20, wait_on_cuda_event_record_corr_id=2, correlation=3))
    else:
        events = [e for e in events if e["cat"] != "cuda_sync"]
    imported = import_kineto({"traceEvents": events},
                             _et_of((1, "op::produce", [], [501]), (4, "op::consume", [501], [502])))
    program = load(imported).program
    (wait,) = statements(program, Op.WAIT)
    assert record_of(program, wait.event).index < wait.index
    assert _races(imported) == []


@pytest.mark.parametrize("returned, synchronizes", [(21.0, False), (103.0, True)])
def test_a_cudafree_that_returned_while_earlier_work_ran_did_not_synchronize(returned, synchronizes):
    # long (writes X) runs 2..102 us on stream 7; cudaFree at 20 us; reads_x (stream 20) after.
    # CUDA says a free "may" synchronize: one that returned at 21 us did not.
    events = (_launch(1, 0.0, 1, "long", 7, 2.0, 100, rf_id=1)
              + [_event("cuda_runtime", "cudaFree", 1, 1, 20.0, returned - 20.0, correlation=2)]
              + _launch(1, returned + 4, 3, "reads_x", 20, returned + 6, 10, rf_id=3)
              + _sync(1, returned + 20, 100, 4))
    imported = import_kineto({"traceEvents": events}, _et_of((1, "op::long", [], [501]), (3, "op::reads_x", [501], [502])))
    assert len(statements(load(imported).program, Op.SYNC)) == (2 if synchronizes else 1)
    assert ("it did not synchronize the device" in imported.text) is not synchronizes
    assert _races(imported) == ([] if synchronizes else ["s501_gpu0"])


@pytest.mark.parametrize("consumed, recorded", [(50.0, "stream7_gpu0"), (100.0, "stream7_gpu1")])
def test_a_record_on_a_stream_id_two_devices_use_goes_where_the_trace_s_times_allow(consumed, recorded):
    # Stream 7 of gpu0 runs prod (2..50 us), stream 7 of gpu1 runs long (5..100 us); the thread
    # records "stream 7" at 6 us and stream 20 of gpu1 waits for it. cons, enqueued after the
    # wait, started at 50 us: the record was gpu0's (gpu1's would have held it until 100 us).
    events = [
        _event("cuda_runtime", "cudaLaunchKernel", 1, 1, 0.0, 2, correlation=1),
        _event("kernel", "prod", 0, 7, 2.0, 48, stream=7, device=0, correlation=1),
        _event("cuda_runtime", "cudaLaunchKernel", 1, 1, 3.0, 2, correlation=2),
        _event("kernel", "long", 1, 7, 5.0, 95, stream=7, device=1, correlation=2),
        _event("cuda_runtime", "cudaEventRecord", 1, 1, 6.0, 1, correlation=3),
        _event("cuda_runtime", "cudaStreamWaitEvent", 1, 1, 8.0, 1, correlation=4),
        _event("cuda_sync", "Stream Wait Event", 1, 20, 8.5, 0.1, cuda_sync_kind="Stream Wait Event", stream=20,
               device=1, wait_on_stream=7, wait_on_cuda_event_record_corr_id=3, correlation=4),
        _event("cuda_runtime", "cudaLaunchKernel", 1, 1, 10.0, 2, correlation=5),
        _event("kernel", "cons", 1, 20, consumed, 10, stream=20, device=1, correlation=5),
    ]
    program = load(import_kineto({"traceEvents": events})).program
    (wait,) = statements(program, Op.WAIT)
    assert program.streams[record_of(program, wait.event).stream].name == recorded


def test_min_gap_carries_the_gaps_before_syncs_that_did_not_block():
    # Ten syncs of an idle stream 4 us apart, between two kernels 50 us apart, the run ending
    # at 58 us: with gaps under 5 (9) us carried, not dropped, the spec still ends then, to
    # within the gap.
    events = _launch(1, 0.0, 1, "first", 7, 2.0, 5)
    for k in range(10):
        events += _sync(1, 10.0 + 4 * k, 1, 10 + k, stream=20)
    events += _launch(1, 50.0, 30, "last", 7, 52.0, 5) + _sync(1, 53.0, 5, 31, stream=7)
    from checker.executor.simulate import simulate
    for gap in (0, 5_000, 9_000):
        program = load(import_kineto({"traceEvents": events}, min_gap=gap)).program
        assert 58_000 - gap <= simulate(program).makespan <= 58_000, gap


def test_a_graph_launchs_work_is_imported_where_the_trace_puts_it_and_said_to_lack_its_edges():
    """Kernels a `cudaGraphLaunch` ran share its correlation id and often sit on streams of the
    driver's own: they are imported as launched by that call, with a note on what is lost."""
    events = [
        _event("cuda_runtime", "cudaLaunchKernel", 9, 9, 0.0, 2, correlation=1),
        _event("kernel", "eager", 0, 7, 3.0, 5, stream=7, device=0, correlation=1),
        _event("cuda_runtime", "cudaGraphLaunch", 9, 9, 10.0, 9, correlation=2, cbid=311),
        _event("kernel", "node_a", 0, 23, 20.0, 3, stream=23, device=0, correlation=2,
               **{"graph id": 12, "graph node id": 51539607553}),
        _event("kernel", "node_b", 0, 27, 24.0, 12, stream=27, device=0, correlation=2,
               **{"graph id": 12, "graph node id": 51539607554}),
    ]
    imported = import_kineto({"traceEvents": events})
    program = load(imported).program
    assert {program.streams[s.stream].name for s in statements(program, Op.KERNEL)} == {
        "stream7", "stream23", "stream27"}
    assert [n for n in imported.notes if "graph launch" in n] == [
        "1 CUDA graph launch(es) ran 2 GPU operation(s) on 2 stream(s): each is imported in stream order on the "
        "stream the trace reports; the graph's edges, and its order with the launch stream, are not in the trace"]


# -- specs that load whatever the trace and its Execution Trace name (found by a probe of the importer)


def _errors(text: str) -> list[str]:
    """The error diagnostics of loading a written spec (`streamproof check`'s SP0xx)."""
    from checker.diagnostics import Severity
    loaded = load_text(text, "imported.sched")
    return [d.message for d in loaded.diagnostics if d.severity is Severity.ERROR]


@pytest.mark.parametrize("source", ["cuda:1", "cuda:7"])
def test_a_tensor_on_a_gpu_that_ran_no_work_declares_that_gpu(source):
    # A peer copy onto gpu0 reads a tensor of a GPU that ran nothing in the trace: its buffer
    # was declared `on gpu1`, a device the spec never declared (SP010).
    events = [
        _event("cpu_op", "aten::copy_", 1, 1, 10.0, 20, **{"Record function id": 1}),
        _event("cuda_runtime", "cudaMemcpyAsync", 1, 1, 12.0, 5, correlation=100),
        _event("gpu_memcpy", "Memcpy PtoP (Device -> Device)", 0, 7, 20.0, 30, stream=7, device=0, correlation=100),
        *_sync(1, 60.0, 5, 101),
    ]
    node = {"name": "aten::copy_", "id": 10, "rf_id": 1,
            "op_schema": "aten::copy_(Tensor(a!) self, Tensor src, bool non_blocking=False) -> Tensor(a!)",
            "inputs": [[2, 51, 0, 1024, 4, "cuda:0"], [1, 50, 0, 1024, 4, source], True],
            "input_types": ["Tensor(float)", "Tensor(float)", "Bool"], "outputs": [], "output_types": []}
    et = read_execution_trace({"schema": "1.0.1", "pid": 1, "nodes": [node]})
    imported = import_kineto({"traceEvents": events}, et)
    device = "gpu" + source.split(":")[1]
    assert f"buffer s50_{device} 4KiB on {device}" in imported.text
    assert _errors(imported.text) == [], imported.text
    assert f"device {device} " in imported.text


def _wait_then_block(sync: str) -> list[dict]:
    """K1 (1 ms) on stream 7 from 20 us; stream 8 waits for it (record 101 at 20 us, wait at 25
    us); the thread then blocks from 30 to 1022 us in `sync` of stream 8 (a stream sync, or an
    event sync of a record on stream 8 after the wait) and launches K2 on stream 7 at 1025 us."""
    events = _launch(1, 10.0, 100, "K1", 7, 20.0, 1000) + [
        _event("cuda_runtime", "cudaEventRecord", 1, 1, 20.0, 2, correlation=101),
        _event("cuda_runtime", "cudaStreamWaitEvent", 1, 1, 25.0, 2, correlation=102),
        _event("cuda_sync", "Stream Wait Event", 0, 8, 26.0, 1, cuda_sync_kind="Stream Wait Event", stream=8,
               device=0, wait_on_stream=7, wait_on_cuda_event_record_corr_id=101, correlation=102)]
    if sync == "stream":
        events += _sync(1, 30.0, 992, 103, stream=8)
    else:
        events += [_event("cuda_runtime", "cudaEventRecord", 1, 1, 28.0, 1, correlation=103),
                   _event("cuda_runtime", "cudaEventSynchronize", 1, 1, 30.0, 992, correlation=104),
                   _event("cuda_sync", "Event Sync", 0, 0, 31.0, 990, cuda_sync_kind="Event Sync", stream=-1,
                          device=0, wait_on_stream=8, wait_on_cuda_event_record_corr_id=103, correlation=104)]
    return events + _launch(1, 1025.0, 105, "K2", 7, 1031.0, 100) + _sync(1, 1040.0, 93, 106)


@pytest.mark.parametrize("sync", ["stream", "event"])
def test_a_sync_of_a_stream_whose_last_item_is_a_wait_resumes_when_the_waited_for_work_is_done(sync):
    # The synced stream 8 ran no work: the thread was released when K1, which its wait waited
    # for, was done (1020 us). Its blocked time was counted again in the gap after the sync,
    # which started K2 1 ms late (GPU span 1.111 -> 2.101 ms).
    imported = import_kineto({"traceEvents": _wait_then_block(sync)})
    comparison = compare(imported, load(imported).program)
    assert comparison.observed_gpu_span == 1_111_000
    assert abs(comparison.ratio - 1) <= 0.01, imported.text
    assert "host cpu 11us\n  stream7: kernel K2" in imported.text


def test_a_launch_held_by_a_wait_for_another_gpu_s_work_is_not_read_as_host_latency():
    # A (10 ms) on gpu0's stream 7; gpu1's stream 9 waits for it, so B, launched at 30 us,
    # starts at 10021 us while gpu1 is idle. Read as host latency, B was issued at 10021 us and
    # C (gpu0's stream 8, launched at 5100 us) 10 ms late: GPU span 10.101 -> 15.001 ms.
    events = _launch(1, 10.0, 100, "A", 7, 20.0, 10_000) + [
        _event("cuda_runtime", "cudaEventRecord", 1, 1, 20.0, 2, correlation=101),
        _event("cuda_runtime", "cudaStreamWaitEvent", 1, 1, 25.0, 3, correlation=102),
        _event("cuda_sync", "Stream Wait Event", 1, 9, 26.0, 1, cuda_sync_kind="Stream Wait Event", stream=9,
               device=1, wait_on_stream=7, wait_on_cuda_event_record_corr_id=101, correlation=102),
        _event("cuda_runtime", "cudaLaunchKernel", 1, 1, 30.0, 5, correlation=103),
        _event("kernel", "B", 1, 9, 10_021.0, 100, stream=9, device=1, correlation=103),
    ] + _launch(1, 5100.0, 104, "C", 8, 5106.0, 5000) + _sync(1, 5200.0, 4922, 105)
    imported = import_kineto({"traceEvents": events})
    comparison = compare(imported, load(imported).program)
    assert comparison.observed_gpu_span == 10_101_000
    assert abs(comparison.ratio - 1) <= 0.01, imported.text
    # (issued when its call returned, plus the 1 us its start came after A's end)
    assert "stream9: wait e101  # cudaStreamWaitEvent\n  host cpu 8us\n  stream9: kernel B" in imported.text


@pytest.mark.parametrize("written", [float, str])
def test_correlation_ids_written_as_floats_or_digits_link_every_event_kind(written):
    # pandas and HTA write a trace back with `24.0` (or `"24"`) for 24: such ids were read on
    # cuda_sync events only, so the launches kept no work, the record and the wait no call,
    # and the wait was dropped ("no later launch on this thread tells its stream").
    events = (_launch(1, 12.0, 100, "fill", 7, 20.0, 100) + [
        _event("cuda_runtime", "cudaEventRecord", 1, 1, 40.0, 2, correlation=101),
        _event("cuda_runtime", "cudaStreamWaitEvent", 1, 1, 50.0, 2, correlation=102),
        _event("cuda_sync", "Stream Wait Event", 0, 8, 51.0, 1, cuda_sync_kind="Stream Wait Event", stream=8,
               device=0, wait_on_stream=7, wait_on_cuda_event_record_corr_id=101, correlation=102),
    ] + _launch(1, 62.0, 103, "neg", 8, 121.0, 50) + _sync(1, 100.0, 200, 104))
    for event in events:
        event["args"] = {key: written(value) if "corr" in key else value for key, value in event["args"].items()}
    imported = import_kineto({"traceEvents": events})
    program = load(imported).program
    (wait,) = statements(program, Op.WAIT)
    assert program.events[wait.event].name == "e101"
    assert program.streams[record_of(program, wait.event).stream].name == "stream7"
    assert not any("no runtime call" in note for note in imported.notes)


@pytest.mark.parametrize("value", [True, 24.5, "24a", -3, "-3", 2.0 ** 60, float("nan")])
def test_a_correlation_id_that_is_no_whole_number_is_read_as_missing(value):
    from checker.importers.kineto import correlation_id
    assert correlation_id(value) is None
    assert correlation_id(24.0) == correlation_id("24") == correlation_id(" 24 ") == correlation_id(24) == 24


def test_control_and_format_characters_of_trace_names_are_replaced_in_the_spec_and_notes():
    # ESC would reach the terminal showing the spec (or a note), U+202E makes a comment display
    # reversed, as other code: like a NUL, every Cc and Cf character becomes `?`.
    import unicodedata
    hostile = "op\x1b[2J\u202eevil\u200b\x07\x7f\x9b\ufeff\u2066x\u00adname"
    events = _launch(1, 0.0, 1, "k", 7, 2.0, 5, rf_id=1) + [
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": hostile}},
        _event("kernel", hostile, 0, 7, 9.0, -1, stream=7, device=0, correlation=1),  # (a note names it)
    ]
    events[2]["name"] = hostile  # (the operator's comment)
    imported = import_kineto({"traceEvents": events}, source=f"trace{hostile}.json")
    for text in [imported.text, *imported.notes, *imported.assumptions]:
        found = {c for c in text if c != "\n" and unicodedata.category(c) in ("Cc", "Cf")}
        assert not found, (found, text)
    assert "# op?[2J?evil" in imported.text and any("op?[2J?evil" in note for note in imported.notes)
    load(imported)


def test_min_gap_keeps_the_carried_time_at_syncs_of_work_issued_early():
    # Eight rounds of five 1 us kernels launched 95 us apart, each round ending in a sync of
    # stream 7 after its work was done (3.9 ms in all). With gaps under 1 ms carried, each
    # sync set the host to the trace's end of the work it waited for, which the spec had run
    # early by the gap carried to its launch: the carried time was lost at every sync, and the
    # simulated GPU span came to 0.04 ms of 3.776.
    events, corr, at = [], 100, 10.0
    for _ in range(8):
        for _ in range(5):
            events += _launch(1, at, corr, f"k{corr}", 7, at + 3, 1)
            corr, at = corr + 1, at + 95
        events += _sync(1, at, 3, corr, stream=7)
        corr, at = corr + 1, at + 10
    for gap in (0, 100_000, 1_000_000):
        imported = import_kineto({"traceEvents": events}, min_gap=gap)
        comparison = compare(imported, load(imported).program)
        assert comparison.observed_gpu_span == 3_776_000
        assert abs(comparison.simulated_gpu_span - comparison.observed_gpu_span) < max(gap, 5_000), gap


def test_work_that_overlaps_on_one_stream_is_said_to():
    # A stream runs its work one after another: k2 beginning while k ran (an inconsistent trace,
    # or programmatic dependent launch) silently gave `compute 2` and a longer simulation.
    events = (_launch(1, 10.0, 100, "k", 7, 20.0, 100) + _launch(1, 16.0, 101, "k2", 7, 50.0, 100)
              + _launch(1, 30.0, 102, "k3", 8, 40.0, 5) + _launch(1, 40.0, 103, "k4", 8, 45.0, 5))
    imported = import_kineto({"traceEvents": events})
    (note,) = [n for n in imported.notes if "began before the work ahead of them" in n]
    # (at 50 us: 40 us after the trace's first call)
    assert note.startswith("1 GPU operation(s) ") and "stream 7 of gpu0, 40.000 us in" in note
    assert f"# Note: {note}" in imported.text
    load(imported)
    events = _launch(1, 10.0, 100, "k", 7, 20.0, 30) + _launch(1, 16.0, 101, "k2", 7, 50.0, 100)
    assert not any("began before" in n for n in import_kineto({"traceEvents": events}).notes)
