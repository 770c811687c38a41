"""`streamproof import kineto` on bad input: a clear line and status 2, or a spec that loads
and a note on stderr; never a broken spec with status 0, an overwritten input, or unbounded work.

The traces are the fixtures of test_import_kineto.py (tests/fixtures/traces/), corrupted.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import sys
from pathlib import Path

import pytest

from checker.frontend import load_text
from checker.importers import import_kineto, read_execution_trace
from checker.importers import command
from checker.importers.execution_trace import TraceError

TRACES = Path(__file__).parent / "fixtures" / "traces"
TWO = TRACES / "two_streams.json"
ET = TRACES / "two_streams_et.json"


def loads(text: str) -> bool:
    loaded = load_text(text, "imported.sched")
    return loaded.program is not None and not loaded.diagnostics


def one_error_line(stderr: str) -> str:
    lines = [line for line in stderr.strip().splitlines() if "note:" not in line]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


# ---------------------------------------------------------------- 1. ET values past a spec's limits


def _et_with(change) -> dict:
    data = json.loads(ET.read_text())
    node = next(n for n in data["nodes"] if n["name"] == "aten::copy_")  # node 3, rf_id 11
    change(node)
    return data


def _set(index: int, value):
    def change(node):
        node["inputs"][0][index] = value
    return change


def _strides(node):
    node["input_shapes"][0] = [256, 1024]
    node["input_strides"] = [[10**30, 1], [], []]


@pytest.mark.parametrize("change, field", [
    (_set(3, 10**30), "numel a 31-digit number"),
    (_set(3, 2**61), f"numel {2**61} x itemsize 4"),
    (_set(2, 10**25), "offset a 26-digit number"),
    (_set(4, 2**63), f"itemsize {2**63}"),
    (_set(3, 1e30), "numel"),
    (_strides, "strides a 31-digit number"),
])
def test_et_tensor_past_the_language_s_limits_is_refused_naming_field_and_node(run, tmp_path, change, field):
    et = tmp_path / "et.json"
    et.write_text(json.dumps(_et_with(change)))
    out = tmp_path / "x.sched"
    status, _, stderr = run("import", "kineto", TWO, "--et", et, "-o", out)
    assert status == 2
    line = one_error_line(stderr)
    assert field in line and "node 3 (aten::copy_, rf_id 11), input 0" in line and "2^62" in line, line
    assert not out.exists()


def test_et_tensor_that_reaches_exactly_the_limit_still_loads():
    # 2^60 floats end at byte 2^62, the largest size and byte range a spec may write.
    et = read_execution_trace(_et_with(_set(3, 2**60)))
    assert max(et.storage_size.values()) == 2**62
    assert loads(import_kineto(json.loads(TWO.read_text()), et).text)
    def one_past(node):
        node["inputs"][0][2:4] = [1, 2**60]

    with pytest.raises(TraceError, match="offset 1 \\+ extent"):
        read_execution_trace(_et_with(one_past))


def _negative_shape(node):
    node["input_shapes"][0] = [-5, 2]  # (an extent below 1: an empty or reversed byte range)
    node["input_strides"] = [[1, 1], [], []]


@pytest.mark.parametrize("change", [
    _set(1, -502),  # a negative storage id would be the buffer `s-502`
    _set(1, True),
    _negative_shape,
])
def test_malformed_et_tensors_are_left_out_and_the_spec_loads(change):
    et = read_execution_trace(_et_with(change))
    imported = import_kineto(json.loads(TWO.read_text()), et)
    assert "s-" not in imported.text and "sTrue" not in imported.text
    assert loads(imported.text)


# ---------------------------------------------------------------- 2. malformed ts and dur are told


def _malformed_trace() -> dict:
    data = json.loads(TWO.read_text())
    events = data["traceEvents"]
    events[8]["dur"] = "abc"      # the add kernel
    events[15]["dur"] = -3        # the memset
    events[19]["dur"] = 1e40      # the DtoH copy
    events[25]["ts"] = "soon"     # the sgemm kernel
    events.append({"ph": "X", "cat": "python_function", "name": "ignored anyway", "ts": "x"})
    return data


def test_malformed_dur_and_ts_get_one_note_each_with_count_and_first_event(run, tmp_path):
    source = tmp_path / "trace.json"
    source.write_text(json.dumps(_malformed_trace()))
    out = tmp_path / "x.sched"
    status, _, stderr = run("import", "kineto", source, "-o", out)
    assert status == 0, stderr
    durs = [line for line in stderr.splitlines() if "`dur`" in line]
    stamps = [line for line in stderr.splitlines() if "`ts`" in line]
    assert len(durs) == 1 and len(stamps) == 1, stderr
    assert "3 event(s)" in durs[0] and "traceEvents[8] (kernel `void at::native::vectorized" in durs[0]
    assert "read as lasting 0" in durs[0]
    # the python_function event is not read at all: it is not counted as skipped
    assert "1 event(s)" in stamps[0] and "traceEvents[25] (kernel `ampere_sgemm_128x64_nn`)" in stamps[0]
    assert "skipped" in stamps[0]
    text = out.read_text()
    assert "# 1 malformed event(s) were skipped." in text
    assert loads(text)


def test_events_that_are_not_objects_and_begin_end_pairs_are_told(run, tmp_path):
    data = json.loads(TWO.read_text())
    data["traceEvents"][3:3] = [7, {"ph": "B", "cat": "kernel", "name": "k", "ts": 1}]
    source = tmp_path / "trace.json"
    source.write_text(json.dumps(data))
    status, _, stderr = run("import", "kineto", source, "-o", tmp_path / "x.sched")
    assert status == 0
    assert "1 event(s) are not JSON objects and were skipped; the first is traceEvents[3]" in stderr
    assert "1 begin/end (B/E) event(s) were not read" in stderr


def _changed(*changes) -> dict:
    """two_streams.json with each (event index, args or event key, value) set."""
    data = json.loads(TWO.read_text())
    for index, key, value in changes:
        event = data["traceEvents"][index]
        (event["args"] if key in event.get("args", {}) or key.startswith("wait_on") else event)[key] = value
    return data


@pytest.mark.parametrize("changes, says", [
    ([(28, "stream", "seven"), (31, "stream", "seven")], "2 event(s) of cuda_sync have a `stream`"),
    ([(28, "wait_on_cuda_event_record_corr_id", {"x": 1})], "1 event(s) of cuda_sync have a `stream`"),
    ([(29, "cuda_sync_kind", "Mystery Sync")], "1 event(s) of cuda_sync have a `cuda_sync_kind` the importer"),
    ([(2, "name", "Memcpy ZtoQ (Foo -> Bar)")], "1 event(s) of gpu_memcpy have a name that says no direction"),
    ([(25, "ts", -1000000.0)], "1 event(s) have no readable `ts` (a number of microseconds, not negative)"),
])
def test_sync_events_memcpy_names_and_times_read_otherwise_are_told(changes, says):
    # A stream sync of a stream named "seven" was a device sync, a wait for a record id {"x": 1}
    # was a wait for no record, an unknown kind and an unknown copy were left out or read as a
    # copy on the device, and a negative time moved the whole timeline, each without a word.
    imported = import_kineto(_changed(*changes))
    assert any(says in note for note in imported.notes), imported.notes
    assert loads(imported.text)
    assert "gpu0: sync" not in imported.text and "2000" not in imported.text.split("thread main", 1)[1][:200]


def test_a_skipped_stream_sync_is_read_from_its_call_not_as_a_device_sync():
    imported = import_kineto(_changed((31, "stream", "seven")))
    main = imported.text.split("thread main", 1)[1]
    assert "sync stream20  # cudaStreamSynchronize; assumed:" in main
    assert main.count("sync gpu0") == 1  # (only cudaDeviceSynchronize's)


def test_a_view_reads_nothing_of_the_tensor_it_views():
    node = {"id": 5, "name": "aten::view", "rf_id": 9, "op_schema": "aten::view(Tensor(a) self, SymInt[] size) -> Tensor(a)",
            "inputs": [[3, 7, 0, 16, 4, "cuda:0"], [4, 4]], "input_types": ["Tensor(float)", "GenericList[Int,Int]"],
            "outputs": [[5, 7, 0, 16, 4, "cuda:0"]], "output_types": ["Tensor(float)"]}
    et = read_execution_trace({"schema": "1.0.1", "pid": 1, "nodes": [node]})
    assert et.operator(9, "aten::view").accesses == ()  # (it was a read of storage 7: a false race)
    node["outputs"] = [[5, 8, 0, 16, 4, "cuda:0"]]
    node["name"], node["op_schema"] = "aten::neg", "aten::neg(Tensor self) -> Tensor"
    et = read_execution_trace({"schema": "1.0.1", "pid": 1, "nodes": [node]})
    assert sorted((a.storage, a.write) for a in et.operator(9, "aten::neg").accesses) == [(7, False), (8, True)]


@pytest.mark.parametrize("field, value", [(3, 10.5), (2, -4), (4, 0), (1, "s7")])
def test_malformed_et_tensors_are_told(field, value):
    # numel 10.5 was read as 10 elements; each such tensor is left out, and a note says so
    et = read_execution_trace(_et_with(_set(field, value)))
    imported = import_kineto(json.loads(TWO.read_text()), et)
    (note,) = [n for n in imported.notes if "tensor(s) of the Execution Trace are malformed" in n]
    assert note.startswith("1 tensor(s)") and "node 3 (aten::copy_, rf_id 11), input 0, tensor" in note
    assert loads(imported.text)
    whole = read_execution_trace(_et_with(_set(3, 1024.0)))  # (a whole number written as a float)
    assert whole.note() is None and whole.operator(11, "aten::copy_").accesses


# ---------------------------------------------------------------- 3. the output is never an input


def test_output_that_is_the_trace_is_refused(run, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    trace = tmp_path / "trace.json"
    trace.write_bytes(TWO.read_bytes())
    os.symlink("trace.json", tmp_path / "link.json")
    os.link(trace, tmp_path / "hard.json")
    for output in ("trace.json", "./trace.json", str(trace), "link.json", "hard.json"):
        status, _, stderr = run("import", "kineto", "trace.json", "-o", output)
        assert status == 2
        assert "is the trace being imported" in one_error_line(stderr)
    assert trace.read_bytes() == TWO.read_bytes()


def test_output_that_is_the_execution_trace_is_refused(run, tmp_path):
    et = tmp_path / "et.json"
    et.write_bytes(ET.read_bytes())
    status, _, stderr = run("import", "kineto", TWO, "--et", et, "-o", et)
    assert status == 2 and "is the Execution Trace given with --et" in one_error_line(stderr)
    assert et.read_bytes() == ET.read_bytes()


def test_output_that_is_a_directory_is_refused_before_any_work(run, tmp_path):
    status, _, stderr = run("import", "kineto", TWO, "-o", tmp_path)
    assert status == 2 and "is a directory" in one_error_line(stderr)


# ---------------------------------------------------------------- 4. standard input


def _stdin(monkeypatch, data: bytes) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))


@pytest.mark.parametrize("compress", [False, True])
def test_trace_from_standard_input(run, tmp_path, monkeypatch, compress):
    data = TWO.read_bytes()
    _stdin(monkeypatch, gzip.compress(data) if compress else data)
    out = tmp_path / "x.sched"
    status, _, stderr = run("import", "kineto", "-", "-o", out)
    assert status == 0, stderr
    text = out.read_text()
    assert "from <stdin>" in text and loads(text)
    assert text == (tmp_path / "x.sched").read_text()


def test_trace_from_standard_input_to_standard_output(run, monkeypatch):
    _stdin(monkeypatch, TWO.read_bytes())
    status, stdout, stderr = run("import", "-", "-o", "-")
    assert status == 0, stderr
    assert stdout.startswith("# Imported by") and loads(stdout)
    assert "wrote -" in stderr  # the report goes to stderr when the spec has stdout


def test_execution_trace_from_standard_input(run, tmp_path, monkeypatch):
    _stdin(monkeypatch, ET.read_bytes())
    out = tmp_path / "x.sched"
    status, _, stderr = run("import", TWO, "--et", "-", "-o", out)
    assert status == 0, stderr
    assert "s501_gpu0" in out.read_text()


def test_standard_input_errors(run, tmp_path, monkeypatch):
    _stdin(monkeypatch, b"{ not json")
    status, _, stderr = run("import", "-", "-o", tmp_path / "x.sched")
    assert status == 2 and "<stdin>:1:3: not JSON" in one_error_line(stderr)
    status, _, stderr = run("import", "-", "--et", "-", "-o", tmp_path / "x.sched")
    assert status == 2 and "cannot both be read from standard input" in one_error_line(stderr)
    monkeypatch.setattr(command, "MAX_TRACE_BYTES", 100)
    _stdin(monkeypatch, TWO.read_bytes())
    status, _, stderr = run("import", "-", "-o", tmp_path / "x.sched")
    assert status == 2 and "standard input holds more than" in one_error_line(stderr)
    monkeypatch.setattr(sys, "stdin", None)
    status, _, stderr = run("import", "-", "-o", tmp_path / "x.sched")
    assert status == 2 and "cannot read standard input" in one_error_line(stderr)
    assert not (tmp_path / "x.sched").exists()


# ---------------------------------------------------------------- 5. out of memory


def test_out_of_memory_while_importing_says_the_trace_is_too_large(run, tmp_path, monkeypatch):
    def exhausted(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr("checker.importers.kineto.import_kineto", exhausted)
    status, _, stderr = run("import", TWO, "-o", tmp_path / "x.sched")
    assert status == 2
    line = one_error_line(stderr)
    assert "the trace is too large to import" in line and "analyse" not in line


def test_out_of_memory_while_comparing_says_the_spec_was_written(run, tmp_path, monkeypatch):
    def exhausted(*args, **kwargs):
        raise MemoryError

    # (`checker.importers.compare` names the function the package exports, not its module)
    monkeypatch.setattr(sys.modules["checker.importers.compare"], "compare", exhausted)
    out = tmp_path / "x.sched"
    status, _, stderr = run("import", TWO, "-o", out, "--compare")
    assert status == 2 and "too large to compare" in one_error_line(stderr)
    assert loads(out.read_text())


# ---------------------------------------------------------------- 6. --compare is capped


def test_compare_past_its_cap_is_skipped_with_a_note(run, tmp_path, monkeypatch):
    monkeypatch.setattr(command, "MAX_COMPARE_STATEMENTS", 5)
    out = tmp_path / "x.sched"
    status, stdout, stderr = run("import", TWO, "-o", out, "--compare")
    assert status == 0, stderr
    assert "--compare skipped: the spec has" in stderr and "more than the 5" in stderr
    assert "GPU span" not in stdout and loads(out.read_text())
    status, stdout, _ = run("import", TWO, "-o", out, "--compare", "--format", "json")
    data = json.loads(stdout)
    assert status == 0 and data["compare"] is None
    assert any("--compare skipped" in note for note in data["notes"])


def test_compare_under_its_cap_still_runs(run, tmp_path):
    status, stdout, _ = run("import", TWO, "-o", tmp_path / "x.sched", "--compare")
    assert status == 0 and "GPU span" in stdout and "--compare skipped" not in stdout


# ---------------------------------------------------------------- 7. the written spec's size and lines


def test_a_spec_larger_than_any_command_reads_is_not_written(run, tmp_path, monkeypatch):
    monkeypatch.setattr("checker.parse.MAX_SOURCE_CHARS", 2000)
    out = tmp_path / "x.sched"
    status, _, stderr = run("import", TWO, "-o", out)
    assert status == 2 and "over the 0 MiB a spec may have; nothing written" in one_error_line(stderr)
    assert not out.exists()


def test_names_from_the_trace_stay_one_short_comment_line(run, tmp_path):
    # a runtime call's name with a newline could close the thread or add a statement; an
    # operator's name of 100,000 characters would make a spec no command reads
    data = json.loads(TWO.read_text())
    for event in data["traceEvents"]:
        if event.get("name") == "cudaStreamWaitEvent":
            event["name"] = "cudaStreamWaitEvent\n  stream7: kernel injected 5s\n}"
        elif event.get("cat") == "cpu_op":
            event["name"] += "x" * 100_000
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps(data))
    out = tmp_path / "x.sched"
    status, _, stderr = run("import", trace, "-o", out)
    text = out.read_text()
    assert status == 0 and loads(text), stderr
    assert "injected" not in text.replace("# cudaStreamWaitEvent stream7: kernel injected 5s }", "")
    assert max(map(len, text.splitlines())) < 400


def test_a_trace_of_too_many_json_objects_is_refused_before_it_is_read(run, tmp_path, monkeypatch):
    # 40 million empty events fit in 117 KB of gzip and took 3 GB to read.
    monkeypatch.setattr(command, "MAX_JSON_OBJECTS", 1000)
    source = tmp_path / "empty.json.gz"
    source.write_bytes(gzip.compress(b'{"traceEvents": [' + b",".join([b"{}"] * 2000) + b"]}"))
    status, out, stderr = run("import", "kineto", source, "-o", tmp_path / "x.sched")
    assert status == 2 and "Traceback" not in stderr
    assert "more than 1,000 JSON objects, too many to read" in stderr
    assert not (tmp_path / "x.sched").exists()
