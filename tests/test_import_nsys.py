"""`streamproof import report.sqlite`: Nsight Systems SQLite exports (`nsys export --type sqlite`).

The exports are built here from SQL text in the schema NVIDIA documents for the SQLite export
(tables `StringIds`, `CUPTI_ACTIVITY_KIND_RUNTIME`, `_KERNEL`, `_MEMCPY`, `_SYNCHRONIZATION`,
`_CUDA_EVENT`, `NVTX_EVENTS`, `ThreadNames`, `ENUM_CUPTI_SYNC_TYPE`; times in ns; `globalTid` =
pid << 24 | tid). `program()` is one process (pid 100) with two host threads:

    main (tid 100), inside the NVTX range "step":
      t=1    cudaMemcpyAsync corr 1: HtoD pinned -> device on stream 20, runs 10..50
      t=51   cudaEventRecord corr 2: event 5 recorded on stream 20
      t=53   cudaStreamWaitEvent corr 3: stream 7 waits for event 5   (left out by wait=False)
      t=55   cudaLaunchKernel corr 4: add_kernel on stream 7, runs 61..91
      t=92   cudaEventRecord corr 5: event 6 recorded on stream 7
      t=94   cudaEventSynchronize corr 6 on event 6
    worker (tid 101):
      t=100  cudaMemcpy corr 7: DtoH device -> pageable on stream 20, runs 105..135
      t=141  cudaStreamSynchronize corr 8 on stream 20

(times in us from T). Without an Execution Trace the spec's kernels access no memory, so the
race tests say what the kernel reads in the spec, as a user would, and check it.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from checker.frontend import load_text
from checker.importers.execution_trace import TraceError
from checker.importers.nsys import as_kineto, is_sqlite
from checker.importers.kineto import import_kineto
from checker.ir import Op, SyncKind

ROOT = Path(__file__).resolve().parents[1]

SCHEMA = """
CREATE TABLE StringIds(id INTEGER PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE ThreadNames(nameId INTEGER NOT NULL, priority INTEGER, globalTid INTEGER);
CREATE TABLE ENUM_CUPTI_SYNC_TYPE(id INTEGER NOT NULL PRIMARY KEY, name TEXT NOT NULL, label TEXT NOT NULL);
CREATE TABLE NVTX_EVENTS(start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, rangeId INTEGER,
 category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER, textId INTEGER,
 domainId INTEGER, jsonText TEXT);
CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME(start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER NOT NULL,
 globalTid INTEGER, correlationId INTEGER, nameId INTEGER NOT NULL, returnValue INTEGER NOT NULL,
 callchainId INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL(start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,
 contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER,
 demangledName INTEGER NOT NULL, shortName INTEGER NOT NULL, mangledName INTEGER, gridX INTEGER, blockX INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY(start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,
 contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER,
 bytes INTEGER NOT NULL, copyKind INTEGER NOT NULL, srcKind INTEGER, dstKind INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET(start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,
 contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER,
 value INTEGER NOT NULL, bytes INTEGER NOT NULL, memKind INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_SYNCHRONIZATION(start INTEGER NOT NULL, end INTEGER NOT NULL,
 deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId INTEGER,
 globalPid INTEGER, syncType INTEGER NOT NULL, eventId INTEGER NOT NULL, eventSyncId INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_CUDA_EVENT(deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL,
 streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER, eventId INTEGER NOT NULL,
 eventSyncId INTEGER);
INSERT INTO ENUM_CUPTI_SYNC_TYPE VALUES
 (0, 'CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_UNKNOWN', 'Unknown'),
 (1, 'CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE', 'Event sync'),
 (2, 'CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT', 'Stream wait event'),
 (3, 'CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE', 'Stream sync'),
 (4, 'CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE', 'Context sync');
"""

T = 1_000_000_000
PID = 100
GPID = PID << 24
MAIN, SIDE = GPID | 100, GPID | 101
INVALID = 4294967295  # CUPTI_SYNCHRONIZATION_INVALID_VALUE
NAMES = {1: "cudaMemcpyAsync_v3020", 2: "cudaEventRecord_v3020", 3: "cudaStreamWaitEvent_v3020",
         4: "cudaLaunchKernel_v7000", 5: "cudaEventSynchronize_v3020", 6: "cudaStreamSynchronize_v3020",
         7: "void at::native::add_kernel<float>(float*, int)", 8: "add_kernel", 9: "cudaMemcpy_v3020",
         10: "step", 11: "python3", 12: "worker", 13: "cuLaunchKernel", 14: "cudaLaunchKernel_ptsz_v7000"}


def program(*, wait: bool = True, extra: str = "") -> str:
    """The SQL text of the export described above (see the module's docstring)."""
    sql = [SCHEMA]
    sql += [f"INSERT INTO StringIds VALUES ({k}, '{v}');" for k, v in NAMES.items()]
    sql += [f"INSERT INTO ThreadNames VALUES (11, 10, {MAIN});", f"INSERT INTO ThreadNames VALUES (12, 10, {SIDE});"]
    calls = [(1_000, 9_000, MAIN, 1, 1), (51_000, 52_000, MAIN, 2, 2), (55_000, 60_000, MAIN, 4, 4),
             (92_000, 93_000, MAIN, 5, 2), (94_000, 95_000, MAIN, 6, 5), (100_000, 140_000, SIDE, 7, 9),
             (141_000, 142_000, SIDE, 8, 6)]
    if wait:
        calls.append((53_000, 54_000, MAIN, 3, 3))
    sql += [f"INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES ({T + a}, {T + b}, 0, {g}, {c}, {n}, 0, NULL);"
            for a, b, g, c, n in calls]
    sql += [
        f"INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES ({T + 10_000}, {T + 50_000}, 0, 1, 20, 1, {GPID}, 1048576, 1, 2, 3);",
        f"INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES ({T + 105_000}, {T + 135_000}, 0, 1, 20, 7, {GPID}, 4096, 2, 3, 1);",
        f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES ({T + 61_000}, {T + 91_000}, 0, 1, 7, 4, {GPID}, 7, 8, NULL, 1, 1);",
        f"INSERT INTO CUPTI_ACTIVITY_KIND_CUDA_EVENT VALUES (0, 1, 20, 2, {GPID}, 5, NULL);",
        f"INSERT INTO CUPTI_ACTIVITY_KIND_CUDA_EVENT VALUES (0, 1, 7, 5, {GPID}, 6, NULL);",
        f"INSERT INTO CUPTI_ACTIVITY_KIND_SYNCHRONIZATION VALUES ({T + 94_100}, {T + 94_900}, 0, 1, {INVALID}, 6, "
        f"{GPID}, 1, 6, NULL);",
        f"INSERT INTO CUPTI_ACTIVITY_KIND_SYNCHRONIZATION VALUES ({T + 141_100}, {T + 141_900}, 0, 1, 20, 8, {GPID}, 3, "
        f"{INVALID}, NULL);",
        f"INSERT INTO NVTX_EVENTS VALUES ({T + 500}, {T + 96_000}, 59, NULL, NULL, NULL, 'step', {MAIN}, NULL, NULL, "
        "NULL, NULL);",
    ]
    if wait:
        sql.append(f"INSERT INTO CUPTI_ACTIVITY_KIND_SYNCHRONIZATION VALUES ({T + 53_100}, {T + 53_900}, 0, 1, 7, 3, "
                   f"{GPID}, 2, 5, NULL);")
    sql.append(extra)
    return "\n".join(sql)


def export(path: Path, sql: str | None = None) -> Path:
    """An export file at `path` built from `sql` (the full program by default)."""
    connection = sqlite3.connect(path)
    connection.executescript(program() if sql is None else sql)
    connection.commit()
    connection.close()
    return path


def load(text: str):
    loaded = load_text(text, "imported.sched")
    assert loaded.program is not None, [d.message for d in loaded.diagnostics]
    return loaded.program


def imported(sql: str | None = None):
    connection = sqlite3.connect(":memory:")
    connection.executescript(program() if sql is None else sql)
    return import_kineto(as_kineto(connection), source="report.sqlite")


def statements(program, op: Op):
    return [s for s in program.statements if s.op is op]


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ---------------------------------------------------------------- the program, end to end


def test_an_export_imports_without_a_format_word_and_checks_clean(run, tmp_path):
    report = export(tmp_path / "report.sqlite")
    out = tmp_path / "run.sched"
    status, stdout, stderr = run("import", report, "-o", out, "--compare")
    assert status == 0, stderr
    assert "1 kernels, 2 copies" in stdout and "1 waits, 2 syncs" in stdout and "GPU span" in stdout
    text = out.read_text()
    for line in ("stream20: copy gpu0_mem[0] <- pinned_mem[0] 40us",  # cudaMemcpyAsync from pinned memory
                 "stream20: record e2  # cudaEventRecord",
                 "stream7: wait e2  # cudaStreamWaitEvent",
                 "stream7: kernel add_kernel 30us",
                 "stream7: record e5  # cudaEventRecord",
                 "sync e5  # cudaEventSynchronize",
                 "stream20: copy pageable_mem[0] <- gpu0_mem[1] 30us",  # cudaMemcpy to pageable memory
                 "sync stream20  # cudaMemcpy returns when the copy is done",
                 "sync stream20  # cudaStreamSynchronize",
                 "# step",  # the NVTX range
                 "thread main {  # python3", "thread t101 {  # worker",
                 "await handoff[0]"):  # the worker enqueues onto stream 20 after main's record
        assert line in text, line
    assert "Waits and syncs are exact" in text and "assumed" not in text
    assert run("check", out)[0] == 0
    assert run("import", "kineto", report, "-o", tmp_path / "named.sched")[0] == 0  # the format word still works
    assert (tmp_path / "named.sched").read_text() == text


def test_the_spec_binds_waits_and_syncs_as_the_export_says():
    program = load(imported().text)
    (wait,) = statements(program, Op.WAIT)
    assert program.streams[wait.stream].name == "stream7"
    records = {program.events[s.event].name: program.streams[s.stream].name for s in statements(program, Op.RECORD)}
    assert records == {"e2": "stream20", "e5": "stream7"}
    assert program.events[wait.event].name == "e2"
    syncs = [(s.sync, s.target) for s in statements(program, Op.SYNC)]
    e5 = next(e.index for e in program.events if e.name == "e5")
    stream20 = next(s.index for s in program.streams if s.name == "stream20")
    assert syncs == [(SyncKind.EVENT, e5), (SyncKind.STREAM, stream20), (SyncKind.STREAM, stream20)]
    copies = statements(program, Op.COPY)
    assert [(c.copy.value, c.blocking) for c in copies] == [("h2d", False), ("d2h", True)]


def test_a_wait_binds_to_the_latest_record_of_its_event_before_it():
    # event 5 recorded again on stream 7 after the wait (corr 9): the wait keeps the earlier record
    later = (f"INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES ({T + 96_000}, {T + 97_000}, 0, {MAIN}, 9, 2, 0, NULL);"
             f"INSERT INTO CUPTI_ACTIVITY_KIND_CUDA_EVENT VALUES (0, 1, 7, 9, {GPID}, 5, NULL);")
    spec = load(imported(program(extra=later)).text)
    (wait,) = statements(spec, Op.WAIT)
    assert spec.events[wait.event].name == "e2"


def test_event_sync_ids_bind_a_wait_to_the_record_they_name():
    # CUPTI 12.8+: eventSyncId ties the wait to its record, here an earlier record of event 5 (corr 9)
    # than the latest one (corr 2)
    extra = (f"INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES ({T + 48_000}, {T + 48_500}, 0, {MAIN}, 9, 2, 0, NULL);"
             f"INSERT INTO CUPTI_ACTIVITY_KIND_CUDA_EVENT VALUES (0, 1, 20, 9, {GPID}, 5, 77);"
             "UPDATE CUPTI_ACTIVITY_KIND_CUDA_EVENT SET eventSyncId = 78 WHERE correlationId = 2;"
             "UPDATE CUPTI_ACTIVITY_KIND_SYNCHRONIZATION SET eventSyncId = 77 WHERE correlationId = 3;")
    spec = load(imported(program(extra=extra)).text)
    (wait,) = statements(spec, Op.WAIT)
    assert spec.events[wait.event].name == "e9"


def test_times_stay_whole_nanoseconds_far_from_zero():
    # a session clock near 1.7e18 ns: a float of microseconds would lose the last digits
    base = 1_700_000_000_123_456_789
    sql = program().replace(f"{T + 61_000}, {T + 91_000}", f"{T + 61_000}, {T + 91_007}")
    shifted = sqlite3.connect(":memory:")
    shifted.executescript(sql)
    for table in ("CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
                  "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "NVTX_EVENTS"):
        shifted.execute(f"UPDATE {table} SET start = start + {base - T}, end = end + {base - T}")
    program_ = load(import_kineto(as_kineto(shifted)).text)
    (kernel,) = statements(program_, Op.KERNEL)
    assert kernel.duration == 30_007
    assert [c.duration for c in statements(program_, Op.COPY)] == [40_000, 30_000]


# ---------------------------------------------------------------- a missing wait is a race


def _import_and_check(tmp_path: Path, sql: str) -> tuple[subprocess.CompletedProcess, str]:
    """`python -m checker import report.sqlite -o run.sched`, then `check` the spec with the
    kernel reading what the first copy wrote (the export names no addresses)."""
    report = export(tmp_path / "report.sqlite", sql)
    out = tmp_path / "run.sched"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "checker", "import", str(report), "-o", str(out)],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    text = out.read_text()
    assert "stream20: copy gpu0_mem[0] <- pinned_mem[0] 40us" in text
    out.write_text(text.replace("kernel add_kernel 30us", "kernel add_kernel reads gpu0_mem[0] 30us"))
    checked = subprocess.run([sys.executable, "-m", "checker", "check", str(out)],
                             capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    return checked, text


def test_without_the_wait_the_kernel_races_the_copy(tmp_path):
    checked, text = _import_and_check(tmp_path, program(wait=False))
    assert ": wait " not in text and "1 kernels" in text
    assert checked.returncode == 1, checked.stdout + checked.stderr
    output = checked.stdout + checked.stderr
    assert "race on `gpu0_mem[0]`" in output and "SP101" in output


def test_with_the_wait_the_same_program_is_clean(tmp_path):
    checked, text = _import_and_check(tmp_path, program())
    assert "stream7: wait e2" in text
    assert checked.returncode == 0, checked.stdout + checked.stderr


# ---------------------------------------------------------------- versions and variants


def test_an_export_without_cuda_event_records_binds_waits_by_assumption():
    sql = program().replace("CREATE TABLE CUPTI_ACTIVITY_KIND_CUDA_EVENT", "CREATE TABLE UNUSED_EVENT")
    sql = sql.replace("INSERT INTO CUPTI_ACTIVITY_KIND_CUDA_EVENT", "INSERT INTO UNUSED_EVENT")
    result = imported(sql)
    assert any("no CUPTI_ACTIVITY_KIND_CUDA_EVENT table" in note for note in result.notes)
    program_ = load(result.text)
    (wait,) = statements(program_, Op.WAIT)
    assert program_.events[wait.event].name == "e2"  # the latest record before it
    assert "assumed" in result.text


def test_an_export_without_synchronization_records_infers_them_and_says_how_to_record_them():
    sql = program().replace("CREATE TABLE CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "CREATE TABLE UNUSED_SYNC")
    sql = sql.replace("INSERT INTO CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "INSERT INTO UNUSED_SYNC")
    result = imported(sql)
    note = next(note for note in result.notes if "no cuda_sync events" in note)
    assert "Nsight Systems" in note and "enable_cuda_sync_events" not in note
    assert len(statements(load(result.text), Op.WAIT)) == 1  # still inferred


def test_an_older_export_without_memory_kinds_or_sync_enum_still_imports():
    sql = program()
    sql = sql.replace(" bytes INTEGER NOT NULL, copyKind INTEGER NOT NULL, srcKind INTEGER, dstKind INTEGER);",
                      " bytes INTEGER NOT NULL, copyKind INTEGER NOT NULL);")
    sql = sql.replace(", 1048576, 1, 2, 3);", ", 1048576, 1);").replace(", 4096, 2, 3, 1);", ", 4096, 2);")
    sql = sql.replace("INSERT INTO ENUM_CUPTI_SYNC_TYPE", "CREATE TABLE UNUSED(id, name, label); INSERT INTO UNUSED")
    result = imported(sql)
    assert any("name no host memory kind" in note for note in result.notes)
    program_ = load(result.text)
    assert [c.copy.value for c in statements(program_, Op.COPY)] == ["h2d", "d2h"]
    assert len(statements(program_, Op.WAIT)) == 1  # syncType read by CUPTI's numbering


def test_driver_calls_made_by_runtime_calls_are_read_once_and_api_suffixes_stripped():
    extra = ("CREATE TABLE CUPTI_ACTIVITY_KIND_DRIVER(start INTEGER NOT NULL, end INTEGER NOT NULL, "
             "globalTid INTEGER, correlationId INTEGER, nameId INTEGER NOT NULL, returnValue INTEGER NOT NULL);"
             f"INSERT INTO CUPTI_ACTIVITY_KIND_DRIVER VALUES ({T + 56_000}, {T + 59_000}, {MAIN}, 4, 13, 0);"
             "UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET nameId = 14 WHERE correlationId = 4;")
    result = imported(program(extra=extra))
    assert any("1 driver call(s)" in note for note in result.notes)
    trace = as_kineto(_connection(program(extra=extra)))
    names = [e["name"] for e in trace["traceEvents"] if e.get("cat") in ("cuda_runtime", "cuda_driver")]
    assert "cudaLaunchKernel" in names and "cuLaunchKernel" not in names
    assert not any("_v" in name for name in names)
    assert len(statements(load(result.text), Op.KERNEL)) == 1


def _connection(sql: str) -> sqlite3.Connection:
    connection = sqlite3.connect(":memory:")
    connection.executescript(sql)
    return connection


# ---------------------------------------------------------------- inputs: read-only, malformed


def test_the_export_is_never_written(run, tmp_path):
    report = export(tmp_path / "report.sqlite")
    before, mtime = digest(report), report.stat().st_mtime_ns
    report.chmod(0o444)
    try:
        status, _, stderr = run("import", report, "-o", tmp_path / "run.sched")
        assert status == 0, stderr
        status, _, stderr = run("import", report, "-o", report)  # the output may not be the input
        assert status == 2 and "would overwrite it" in stderr
    finally:
        report.chmod(0o644)
    assert digest(report) == before and report.stat().st_mtime_ns == mtime
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.sqlite", "run.sched"]  # no journal left


def test_an_export_reads_from_standard_input_and_gzip(run, tmp_path, monkeypatch):
    report = export(tmp_path / "report.sqlite")
    expected_out = tmp_path / "file.sched"
    assert run("import", report, "-o", expected_out)[0] == 0
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(report.read_bytes())))
    status, _, stderr = run("import", "-", "-o", tmp_path / "stdin.sched")
    assert status == 0, stderr
    compressed = tmp_path / "report.sqlite.gz"
    compressed.write_bytes(gzip.compress(report.read_bytes()))
    status, _, stderr = run("import", compressed, "-o", tmp_path / "gz.sched")
    assert status == 0, stderr
    body = expected_out.read_text().split("\ndevice ", 1)[1]
    assert (tmp_path / "stdin.sched").read_text().split("\ndevice ", 1)[1] == body
    assert (tmp_path / "gz.sched").read_text().split("\ndevice ", 1)[1] == body


def test_several_processes_in_one_export_are_refused(run, tmp_path):
    other = (200 << 24) | 200
    extra = (f"INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES ({T + 2_000}, {T + 3_000}, 0, {other}, 1, 4, 0, NULL);"
             f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES ({T + 4_000}, {T + 5_000}, 0, 1, 7, 1, {200 << 24}, 7, 8, "
             "NULL, 1, 1);")
    report = export(tmp_path / "report.sqlite", program(extra=extra))
    status, _, stderr = run("import", report, "-o", tmp_path / "run.sched")
    assert status == 2
    assert "2 processes that used CUDA (pids 100, 200)" in stderr and "its own report" in stderr
    assert len(stderr.strip().splitlines()) == 1 and "Traceback" not in stderr
    assert not (tmp_path / "run.sched").exists()


def test_calls_of_a_process_that_ran_no_gpu_work_are_left_out():
    launcher = (300 << 24) | 300
    extra = f"INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES ({T + 2_000}, {T + 3_000}, 0, {launcher}, 1, 4, 0, NULL);"
    result = imported(program(extra=extra))
    assert any("1 CUDA call(s) of 1 other process(es)" in note for note in result.notes)
    assert len(statements(load(result.text), Op.KERNEL)) == 1


def _truncated(tmp_path: Path) -> Path:
    whole = export(tmp_path / "whole.sqlite").read_bytes()
    path = tmp_path / "report.sqlite"
    path.write_bytes(whole[: len(whole) // 3])
    return path


def _garbage(tmp_path: Path) -> Path:
    path = tmp_path / "report.sqlite"
    path.write_bytes(b"SQLite format 3\x00" + b"\xff" * 5000)
    return path


def _plain_database(tmp_path: Path) -> Path:
    return export(tmp_path / "report.sqlite", "CREATE TABLE notes(x); INSERT INTO notes VALUES (1);")


def _no_cuda(tmp_path: Path) -> Path:
    return export(tmp_path / "report.sqlite", "CREATE TABLE StringIds(id INTEGER PRIMARY KEY, value TEXT);"
                  "CREATE TABLE NVTX_EVENTS(start INTEGER, end INTEGER);")


def _empty_tables(tmp_path: Path) -> Path:
    return export(tmp_path / "report.sqlite", SCHEMA)


@pytest.mark.parametrize("make, message", [
    (_truncated, "not a readable SQLite database"),
    (_garbage, "not a readable SQLite database"),
    (_plain_database, "not an Nsight Systems export"),
    (_no_cuda, "no CUDA activity"),
    (_empty_tables, "no CUDA calls or GPU work"),
])
def test_a_malformed_export_is_one_line_and_status_2(run, tmp_path, make, message):
    path = make(tmp_path)
    status, _, stderr = run("import", path, "-o", tmp_path / "run.sched")
    assert status == 2, stderr
    assert message in stderr and str(path) in stderr
    assert len(stderr.strip().splitlines()) == 1 and "Traceback" not in stderr
    assert not (tmp_path / "run.sched").exists()


def test_a_locked_export_is_one_line_and_status_2(run, tmp_path):
    report = export(tmp_path / "report.sqlite")
    holder = sqlite3.connect(report)
    holder.execute("BEGIN EXCLUSIVE")  # another process writing the database
    try:
        status, _, stderr = run("import", report, "-o", tmp_path / "run.sched")
    finally:
        holder.rollback()
        holder.close()
    assert status == 2 and "locked" in stderr
    assert len(stderr.strip().splitlines()) == 1 and "Traceback" not in stderr


def test_malformed_rows_are_read_as_far_as_they_go_and_told(run, tmp_path):
    extra = (
        # NULL and negative starts, an end before its start, a huge end, a NULL name, text for a number
        f"INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (-5, 10, 0, {MAIN}, 50, 4, 0, NULL);"
        f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES ({T + 150_000}, {T + 149_000}, 0, 1, 7, NULL, {GPID}, 7, 8, "
        "NULL, 1, 1);"
        f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES ({T + 151_000}, 99999999999999999999, 0, 1, 7, NULL, {GPID}, "
        "7, 8, NULL, 1, 1);"
        f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES ('soon', {T}, 0, 1, 7, NULL, {GPID}, 7, 8, NULL, 1, 1);"
        f"INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES ({T + 143_000}, {T + 144_000}, 0, {SIDE}, 51, 999, 0, NULL);"
        f"INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES ({T + 152_000}, {T + 153_000}, 0, 1, -3, 52, {GPID}, 8, 1, 2, 3);"
        f"INSERT INTO CUPTI_ACTIVITY_KIND_SYNCHRONIZATION VALUES ({T + 154_000}, {T + 155_000}, 0, 1, 7, 53, {GPID}, "
        "42, 0, NULL);"
        "UPDATE StringIds SET value = CAST(X'616464ff5f6b65726e656c' AS TEXT) WHERE id = 7;"  # not UTF-8
    )
    report = export(tmp_path / "report.sqlite", program(extra=extra))
    status, _, stderr = run("import", report, "-o", tmp_path / "run.sched")
    assert status == 0, stderr
    assert "Traceback" not in stderr
    for said in ("2 row(s) have no readable start", "2 row(s) have no readable end",
                 "name a string id that is not in StringIds", "no valid device or stream",
                 "a syncType the importer does not know"):
        assert said in stderr, said
    assert run("check", tmp_path / "run.sched")[0] == 0


def test_a_corrupt_time_far_from_the_others_is_one_line_and_status_2(run, tmp_path):
    extra = (f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES ({1 << 61}, {(1 << 61) + 10}, 0, 1, 7, NULL, {GPID}, 7, 8, "
             "NULL, 1, 1);")
    report = export(tmp_path / "report.sqlite", program(extra=extra))
    status, _, stderr = run("import", report, "-o", tmp_path / "run.sched")
    assert status == 2 and "looks corrupt" in stderr
    assert len(stderr.strip().splitlines()) == 1


def test_an_execution_trace_cannot_be_given_with_an_export(run, tmp_path):
    report = export(tmp_path / "report.sqlite")
    et = ROOT / "tests" / "fixtures" / "traces" / "two_streams_et.json"
    status, _, stderr = run("import", report, "--et", et, "-o", tmp_path / "run.sched")
    assert status == 2 and "--et cannot be used with an Nsight Systems export" in stderr
    assert len(stderr.strip().splitlines()) == 1


def test_several_exports_import_as_ranks(run, tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir(), second.mkdir()
    status, stdout, stderr = run("import", export(first / "report.sqlite"), export(second / "report.sqlite"),
                                 "-o", tmp_path / "ranks.sched")
    assert status == 0, stderr
    text = (tmp_path / "ranks.sched").read_text()
    assert "r0_stream7: wait r0_e2" in text and "r1_stream7: wait r1_e2" in text
    assert run("check", tmp_path / "ranks.sched")[0] == 0


def test_detection_is_by_content_and_json_traces_are_unaffected(tmp_path):
    report = export(tmp_path / "trace.json")  # an export under a JSON name is still an export
    assert is_sqlite(str(report))
    assert not is_sqlite(str(ROOT / "tests" / "fixtures" / "traces" / "two_streams.json"))
    assert not is_sqlite(str(tmp_path / "missing"))
    from checker.importers.command import read_json
    assert read_json(str(report))["streamproofFlavour"] == "nsys"
    assert "traceEvents" in json.loads(json.dumps(read_json(str(report))))


def test_a_view_that_never_ends_is_refused_not_read_into_memory(tmp_path, monkeypatch):
    # A table that is a recursive view with no end: reading stops at the row limit (the
    # export took 8.5 GB before it was killed).
    from checker.importers import nsys

    monkeypatch.setattr(nsys, "MAX_ROWS", 1000)
    sql = program().replace("CUPTI_ACTIVITY_KIND_KERNEL", "unused_kernels")
    sql += ("\nCREATE VIEW CUPTI_ACTIVITY_KIND_KERNEL AS WITH RECURSIVE n(start) AS "
            "(SELECT 1 UNION ALL SELECT start + 1 FROM n) SELECT start, start + 1 AS \"end\" FROM n;")
    path = export(tmp_path / "endless.sqlite", sql)
    with pytest.raises(TraceError, match="table CUPTI_ACTIVITY_KIND_KERNEL has more than 1,000 rows"):
        as_kineto(path)
