"""`streamproof import kineto trace_view.json`: Ascend profiler traces (torch_npu, msprof).

The traces are written here in the shape CANN's msprof timeline and torch_npu's profiler give
them: a JSON array; processes named by metadata ("Python", "CANN", "Ascend Hardware",
"Communication") with msprof's packed pids (`os_pid << 10 | layer << 5 | device`, device 31 for
the host); times as strings of microseconds since 1970 with three decimals; device tasks on
`Stream N` threads tied to the CANN call that launched them by `connection_id`; event records
and waits as tasks of their own; collectives as a Communication slice and stream tasks.
"""

from __future__ import annotations

import json

import pytest

from checker.analyze import check_loaded
from checker.codes import Code
from checker.executor.simulate import simulate
from checker.frontend import load_text
from checker.importers.ascend import as_kineto, is_ascend
from checker.importers.kineto import import_kineto
from checker.importers.ranks import import_ranks

BASE = 1_742_490_378_000_000_000  # ns since 1970


class Trace:
    """One rank's Ascend trace, built call by call (times in ns from BASE)."""

    def __init__(self, pid: int = 4321, device: int = 0, *, event_ids: bool = True, queue: bool = False,
                 communication: str = "Communication") -> None:
        self.pid, self.device, self.event_ids, self.queue = pid, device, event_ids, queue
        self.cann = (pid << 10) | (7 << 5) | 31
        self.hardware = (pid << 10) | (14 << 5) | device
        self.communication = (pid << 10) | (17 << 5) | device
        self.main, self.dequeue = pid, pid + 50
        self.events: list[dict] = [
            {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": "Python"}},
            {"ph": "M", "name": "process_name", "pid": self.cann, "tid": 0, "args": {"name": "CANN"}},
            {"ph": "M", "name": "process_name", "pid": self.hardware, "tid": 0, "args": {"name": "Ascend Hardware"}},
            {"ph": "M", "name": "process_labels", "pid": self.hardware, "tid": 0, "args": {"labels": f"NPU {device}"}},
            {"ph": "M", "name": "process_name", "pid": self.communication, "tid": 0, "args": {"name": communication}},
        ]
        self.streams: set[int] = set()
        self.connection = 1000
        self.now = 0

    @staticmethod
    def ts(ns: int) -> str:
        us, frac = divmod(BASE + ns, 1000)
        return f"{us}.{frac:03d}"

    def _stream(self, stream: int) -> None:
        if stream not in self.streams:
            self.streams.add(stream)
            self.events.append({"ph": "M", "name": "thread_name", "pid": self.hardware, "tid": stream,
                                "args": {"name": f"Stream {stream}"}})

    def call(self, name: str, dur: int = 2_000, *, thread=None, **args) -> int:
        """A CANN call at the current time on the calling thread; returns its connection id."""
        self.connection += 1
        thread = thread if thread is not None else (self.dequeue if self.queue else self.main)
        self.events.append({"name": name, "pid": self.cann, "tid": thread, "ts": self.ts(self.now), "dur": dur / 1000,
                            "ph": "X", "args": {"Thread Id": thread, "Mode": "ACL_RTS", "level": "acl", "id": "0",
                                                "item_id": args.pop("item_id", "0"),
                                                "connection_id": self.connection, **args}})
        self.now += dur + 1_000
        return self.connection

    def task(self, connection: int, stream: int, name: str, start: int, dur: int, task_type: str, **args) -> None:
        self._stream(stream)
        self.events.append({"name": name, "pid": self.hardware, "tid": stream, "ts": self.ts(start), "dur": dur / 1000,
                            "ph": "X", "args": {"Model Id": 4294967295, "Task Type": task_type,
                                                "Physic Stream Id": stream, "Task Id": len(self.events),
                                                "Batch Id": 0, "Subtask Id": 4294967295,
                                                "connection_id": connection, **args}})

    def op(self, name: str, dur: int) -> None:
        """A torch operator around the next calls (on the main thread; with the task queue, its
        Dequeue on the dequeue thread)."""
        at = (BASE + self.now) / 1000  # (torch_npu writes its own times as floats)
        self.events.append({"ph": "X", "name": name, "pid": self.pid, "tid": self.main, "ts": at,
                            "dur": dur / 1000, "cat": "cpu_op", "args": {}})
        if self.queue:
            self.events.append({"ph": "X", "name": f"Dequeue@{name}", "pid": self.pid, "tid": self.dequeue,
                                "ts": at, "dur": dur / 1000, "cat": "dequeue",
                                "args": {"correlation_id": len(self.events)}})

    def kernel(self, name: str, stream: int, start: int, dur: int) -> int:
        self.op(f"aten::{name}", 3_000)
        connection = self.call("Node@launch", item_id=name)
        self.task(connection, stream, name, start, dur, "AI_VECTOR_CORE")
        return connection

    def record(self, stream: int, at: int, event: int = 3) -> int:
        extra = {"event_id": event} if self.event_ids else {}
        connection = self.call("AscendCL@aclrtRecordEvent", **extra)
        self.task(connection, stream, "EVENT_RECORD", at, 20, "EVENT_RECORD_SQE")
        return connection

    def wait(self, stream: int, start: int, end: int, event: int = 3) -> int:
        extra = {"event_id": event} if self.event_ids else {}
        connection = self.call("AscendCL@aclrtStreamWaitEvent", **extra)
        self.task(connection, stream, "EVENT_WAIT", start, end - start, "EVENT_WAIT_SQE")
        return connection

    def sync_stream(self, until: int) -> None:
        start = self.now
        self.call("AscendCL@aclrtSynchronizeStream", dur=until - start + 1_000, thread=self.main)

    def allreduce(self, stream: int, start: int, dur: int, group: str = "9350434047717501483", size: int = 2) -> None:
        connection = self.call("Node@launch", item_id="hcom_allReduce_")
        self.events.append({"ph": "M", "name": "thread_name", "pid": self.communication, "tid": 0,
                            "args": {"name": f"Group {group} Communication"}})
        self.events.append({"name": "hcom_allReduce__483_2_1", "pid": self.communication, "tid": 0,
                            "ts": self.ts(start), "dur": dur / 1000, "ph": "X",
                            "args": {"rank_size": size, "connection_id": connection, "model id": 4294967295,
                                     "data_type": "FP32", "alg_type": "MESH", "count": 1024, "relay": "no",
                                     "retry": "no"}})
        # (a collective's steps on its stream: notify waits and copies, all of one launch)
        self.task(connection, stream, "hcom_allReduce__483_2_1", start, dur // 3, "NOTIFY_WAIT_SQE")
        self.task(connection, stream, "hcom_allReduce__483_2_1", start + dur // 3, dur - dur // 3, "SDMA_SQE")

    def json(self) -> list:
        return self.events


def load(imported):
    loaded = load_text(imported.text, "npu.sched")
    assert loaded.program is not None, [d.message for d in loaded.diagnostics]
    return loaded


def two_streams(**kwargs) -> Trace:
    """A kernel on stream 2, a record after it, stream 5 waiting for it, a kernel on stream 5."""
    t = Trace(**kwargs)
    t.kernel("add", 2, 20_000, 12_000)       # runs 20-32 us
    t.record(2, 32_000)
    t.wait(5, 24_000, 32_010)
    t.kernel("mul", 5, 32_100, 9_000)        # runs after the record
    t.sync_stream(42_000)
    return t


def test_an_ascend_trace_is_recognised_by_its_hardware_process():
    assert is_ascend(two_streams().json())
    assert not is_ascend({"traceEvents": [{"ph": "X", "cat": "kernel"}]})
    assert not is_ascend([1, "x", None])


def test_tasks_become_kernels_on_their_streams_and_the_wait_binds_to_its_event_s_record():
    imported = import_kineto(two_streams().json(), source="trace_view.json")
    text = imported.text
    assert "device npu0 {" in text
    assert "stream2: kernel add 12us" in text and "stream5: kernel mul 9us" in text
    assert "stream2: record e1002  # aclrtRecordEvent" in text
    assert "stream5: wait e1002  # aclrtStreamWaitEvent" in text
    assert "assumed" not in text.split("thread ", 1)[1].split("sync", 1)[0]  # (the wait names its event)
    assert "Read from an Ascend profiler trace" in text
    program = load(imported).program
    findings = check_loaded(load(imported)).findings
    assert not [f for f in findings if f.code in (Code.SP101, Code.SP201)]
    # the simulation keeps the wait: mul after add
    assert simulate(program).makespan >= 41_000


def test_without_event_ids_the_wait_binds_to_the_latest_record_and_says_it_assumed_so():
    imported = import_kineto(two_streams(event_ids=False).json())
    assert "stream5: wait e1002  # aclrtStreamWaitEvent; assumed: aclrtStreamWaitEvent (connection 1003) binds " \
           "to the aclrtRecordEvent on another stream whose task ended last before the wait's task did " \
           "(connection 1002)" in imported.text
    load(imported)


def test_a_wait_binds_to_the_record_of_its_own_event_not_the_latest():
    t = Trace()
    t.kernel("a", 2, 10_000, 5_000)
    first = t.record(2, 15_000, event=7)
    t.kernel("b", 3, 16_000, 5_000)
    t.record(3, 21_000, event=8)
    t.wait(5, 15_000, 15_030, event=7)
    t.kernel("c", 5, 16_000, 2_000)
    imported = import_kineto(t.json())
    assert f"stream5: wait e{first}  # aclrtStreamWaitEvent" in imported.text
    load(imported)


def test_times_keep_the_nanosecond_that_msprof_writes():
    t = Trace()
    t.kernel("tiny", 2, 10_000, 1_234)
    imported = import_kineto(t.json())
    assert "stream2: kernel tiny 1234ns" in imported.text


def test_with_the_task_queue_a_sync_after_it_drained_is_written_on_the_dequeue_thread():
    # torch_npu's task queue: the dequeue thread makes the runtime calls; the main thread's
    # synchronize drains the queue first, then waits for the stream while the queue is idle:
    # the same order in a program of one thread
    t = two_streams(queue=True)
    t.kernel("after", 2, 60_000, 3_000)
    imported = import_kineto(t.json())
    text = imported.text
    assert "thread main {" not in text
    dequeue = text.split(f"thread t{t.dequeue} {{", 1)[1].split("\n}", 1)[0]
    assert dequeue.index("stream5: kernel mul") < dequeue.index("sync stream5") < dequeue.index("kernel after")
    assert "# Dequeue@aten::add" in dequeue
    assert any("1 blocking call(s)" in note for note in imported.notes)
    program = load(imported).program
    assert len(program.threads) == 1
    findings = check_loaded(load(imported)).findings
    assert not [f for f in findings if f.code in (Code.SP201, Code.SP301)]


def test_a_sync_that_overlaps_the_queue_s_calls_keeps_its_thread_and_the_queue_s_order():
    t = two_streams(queue=True)
    t.now -= 3_000  # (the sync starts while the dequeue thread's last call runs)
    t.kernel("after", 2, 60_000, 3_000)
    sync = next(e for e in t.events if e["name"] == "AscendCL@aclrtSynchronizeStream")
    launch = [e for e in t.events if e["name"] == "Node@launch"][-1]
    launch["ts"] = sync["ts"]  # (a launch on the dequeue thread during the sync)
    imported = import_kineto(t.json())
    text = imported.text
    main = text.split("thread main {", 1)[1]
    assert "await handoff[" in main and "sync stream" in main
    assert main.index("await handoff[") < main.index("sync stream")
    assert "(made by the task queue)" in main
    dequeue = text.split(f"thread t{t.dequeue} {{", 1)[1].split("\n}", 1)[0]
    assert "notify handoff[" in dequeue
    findings = check_loaded(load(imported)).findings
    assert not [f for f in findings if f.code is Code.SP201]


@pytest.mark.parametrize("communication", ["Communication", "HCCL"])  # (older traces: "HCCL")
def test_a_collective_s_steps_are_one_collective_that_two_ranks_meet_on(communication):
    traces = []
    for rank in (0, 1):
        t = Trace(pid=4000 + rank, communication=communication)
        t.kernel("grad", 2, 10_000, 20_000)
        t.record(2, 30_000)
        t.wait(7, 12_000, 30_010)
        t.allreduce(7, 31_000 + 2_000 * rank, 60_000)
        t.sync_stream(95_000)
        traces.append((as_kineto(t.json(), rank=rank), f"rank{rank}/trace_view.json"))
    imported = import_ranks(traces)
    text = imported.text
    assert "comm pg_9350434047717501483 = { r0_stream7, r1_stream7 }" in text, imported.notes
    assert "r0_stream7: allreduce pg_9350434047717501483 r0_npu0_comm[0] 60us" in text
    assert "# hcom_allReduce, 60us measured" in text
    findings = check_loaded(load(imported)).findings
    assert not [f for f in findings if f.code in (Code.SP201, Code.SP202)]


def test_copies_take_their_direction_from_the_task():
    t = Trace()
    connection = t.call("AscendCL@aclrtMemcpyAsync")
    t.task(connection, 2, "MEMCPY_ASYNC", 5_000, 4_000, "PCIE_DMA_SQE", **{"size(B)": 4096, "operation": "host to device"})
    imported = import_kineto(t.json())
    assert "stream2: copy " in imported.text and "h2d 1" in imported.text
    load(imported)


def test_subtasks_of_one_launch_on_a_stream_are_one_kernel():
    t = Trace()
    t.op("aten::matmul", 3_000)
    connection = t.call("Node@launch", item_id="MatMul")
    for k in range(3):  # (FFTS+ subtasks, overlapping)
        t.task(connection, 2, "MatMul", 10_000 + 500 * k, 4_000, "MIX_AIC")
    imported = import_kineto(t.json())
    assert imported.text.count("stream2: kernel MatMul 5us") == 1


@pytest.mark.parametrize("junk", [
    [{"ph": "X", "name": "k", "pid": "x", "tid": [1], "ts": "abc", "dur": "?"}],
    [{"ph": "X", "name": "launch", "pid": None, "tid": 1, "ts": "1e400", "args": {"connection_id": "1001"}}],
    [7, None, "text", {"ph": "M", "name": "process_name", "pid": 5, "args": {"name": "Ascend Hardware"}}],
    [{"ph": "M", "name": "process_name", "pid": [1], "tid": {"a": 1}, "args": {"name": "CANN"}},
     {"ph": "X", "name": "Node@launch", "pid": [1], "tid": {"a": 1}, "ts": "5.0", "dur": 1,
      "args": {"connection_id": 1001}},
     {"ph": "M", "name": "process_labels", "pid": 5, "args": {"labels": "NPU 99999999999999"}}],
    [{"ph": "X", "name": "EVENT_WAIT", "pid": 1, "tid": 2, "ts": "1.5", "dur": 1,
      "args": {"Task Type": "EVENT_WAIT_SQE", "connection_id": 99999}}],
])
def test_junk_in_an_ascend_trace_is_told_not_a_crash(junk):
    t = two_streams()
    from checker.importers.execution_trace import TraceError
    try:
        imported = import_kineto(t.json() + junk)
    except TraceError:
        return
    load(imported)


def test_the_cli_reads_a_profiler_folder_and_the_rank_beside_the_trace(run, tmp_path):
    for rank in (0, 1):
        t = Trace(pid=4000 + rank)
        t.kernel("grad", 2, 10_000, 20_000)
        t.allreduce(7, 31_000, 60_000)
        folder = tmp_path / "run" / f"worker_{4000 + rank}_2026_ascend_pt"
        (folder / "ASCEND_PROFILER_OUTPUT").mkdir(parents=True)
        (folder / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").write_text(json.dumps(t.json()))
        # (ranks named by the profiler's own file, in the opposite order of the folders' names)
        (folder / f"profiler_info_{1 - rank}.json").write_text(json.dumps({"rank_id": 1 - rank}))
    out = tmp_path / "step.sched"
    status, stdout, stderr = run("import", "kineto", tmp_path / "run", "-o", out)
    assert status == 0, stderr
    text = out.read_text()
    assert "rank 1 (trace_view.json" in text or "rank 1 (" in text
    assert "comm pg_9350434047717501483 = { r0_stream7, r1_stream7 }" in text
    # the folder of pid 4000 is rank 1
    assert "r1_main" in text and "host thread 4000" in text.split("thread r1_main", 1)[1].split("\n", 1)[0]
    status, stdout, stderr = run("check", out)
    assert status == 0, stdout + stderr


def test_tasks_msprof_could_not_tie_to_a_call_are_operations_of_their_own():
    # msprof writes connection_id -1 on tasks it could not tie to their launch: two such tasks
    # far apart must not become one kernel around the launched one between them
    t = Trace()
    t.task(-1, 2, "AI_CORE", 10_000, 2_000, "AI_CORE")
    t.kernel("add", 2, 200_000, 5_000)
    t.task(-1, 2, "AI_CORE", 500_000, 2_000, "AI_CORE")
    imported = import_kineto(t.json())
    assert imported.text.count("stream2: kernel AI_CORE 2us") == 2
    assert "compute 1 " in imported.text


def test_a_wait_without_event_ids_does_not_bind_to_its_own_stream_s_record():
    t = Trace(event_ids=False)
    t.kernel("a", 2, 10_000, 20_000)
    first = t.record(2, 30_000)
    t.kernel("x", 5, 12_000, 1_000)
    t.record(5, 13_000)  # (a record on the waiting stream, made last)
    t.wait(5, 14_000, 30_010)
    t.kernel("c", 5, 30_100, 2_000)
    imported = import_kineto(t.json())
    assert f"stream5: wait e{first}  # aclrtStreamWaitEvent; assumed:" in imported.text
    load(imported)


def test_a_launch_that_also_records_keeps_its_kernel():
    t = Trace()
    t.op("aten::fused", 3_000)
    connection = t.call("Node@launch", item_id="MatmulAllReduce")
    t.task(connection, 2, "MatmulAllReduce", 10_000, 20_000, "MIX_AIC")
    t.task(connection, 2, "EVENT_RECORD", 30_000, 20, "EVENT_RECORD_SQE")
    t.wait(5, 12_000, 30_030)
    t.kernel("after", 5, 30_100, 2_000)
    imported = import_kineto(t.json())
    assert "stream2: kernel MatmulAllReduce 20us" in imported.text
    assert f"stream5: wait e{connection}" in imported.text
    load(imported)


def test_a_wait_task_with_no_call_is_counted_in_a_note():
    t = Trace()
    t.kernel("a", 2, 10_000, 20_000)
    t.task(-1, 5, "EVENT_WAIT", 12_000, 18_000, "EVENT_WAIT_SQE")
    t.kernel("c", 5, 30_100, 2_000)
    imported = import_kineto(t.json())
    assert any("1 wait task(s) (EVENT_WAIT) have no aclrtStreamWaitEvent call" in note for note in imported.notes)


@pytest.mark.parametrize("operation, copy", [
    ("host to device", "npu0_mem[0] <- pinned_mem[0]"), ("host to device ex", "npu0_mem[0] <- pinned_mem[0]"),
    ("device to host ex", "pinned_mem[0] <- npu0_mem[0]"), ("addr device to device", "npu0_mem[1] <- npu0_mem[0]"),
    ("managed memory", "npu0_mem[1] <- npu0_mem[0]"),
])
def test_copies_read_every_direction_msprof_writes(operation, copy):
    t = Trace()
    connection = t.call("AscendCL@aclrtMemcpyAsync")
    t.task(connection, 2, "MEMCPY_ASYNC", 5_000, 4_000, "SDMA_SQE", operation=operation)
    imported = import_kineto(t.json())
    assert f"stream2: copy {copy} 4us" in imported.text


def test_a_collective_whose_steps_ran_on_two_streams_is_one_collective():
    traces = []
    for rank in (0, 1):
        t = Trace(pid=4000 + rank)
        t.allreduce(7, 31_000, 60_000)
        connection = t.connection
        t.task(connection, 8, "hcom_allReduce__483_2_1", 35_000, 50_000, "SDMA_SQE")  # (a secondary stream)
        traces.append((as_kineto(t.json(), rank=rank), f"rank{rank}.json"))
    imported = import_ranks(traces)
    assert imported.counts["collective"] == 2, imported.notes
    assert "stream8" not in imported.text
    assert any("HCCL's secondary streams" in note for note in imported.notes)


def test_connection_ids_written_as_whole_floats_are_read():
    t = two_streams()
    for event in t.events:
        if isinstance(event.get("args"), dict) and "connection_id" in event["args"]:
            event["args"]["connection_id"] = float(event["args"]["connection_id"])
    imported = import_kineto(t.json())
    assert "stream5: wait e1002" in imported.text


def test_the_cli_reads_the_profiler_output_folder_itself(run, tmp_path):
    folder = tmp_path / "worker_1_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    folder.mkdir(parents=True)
    (folder / "trace_view.json").write_text(json.dumps(two_streams().json()))
    (folder / "communication.json").write_text("{}")
    out = tmp_path / "one.sched"
    status, stdout, stderr = run("import", "kineto", folder, "-o", out)
    assert status == 0, stderr
    assert "stream5: wait" in out.read_text()


def test_a_group_of_some_of_the_ranks_is_the_ranks_that_ran_its_collectives():
    # four ranks, two tensor-parallel groups of two: HCCL names each group, not its ranks
    traces = []
    for rank in range(4):
        t = Trace(pid=4000 + rank)
        t.allreduce(7, 31_000, 60_000, group=f"{1000 + rank // 2}", size=2)
        traces.append((as_kineto(t.json(), rank=rank), f"rank{rank}.json"))
    imported = import_ranks(traces)
    assert "comm pg_1000 = { r0_stream7, r1_stream7 }" in imported.text, imported.notes
    assert "comm pg_1001 = { r2_stream7, r3_stream7 }" in imported.text
    assert any("the 2 imported ranks that ran its collectives (2, 3)" in a for a in imported.assumptions)
    # a group that only some of its ranks' traces show stays kernels
    imported = import_ranks(traces[:3])
    assert "comm pg_1001" not in imported.text
    assert any("1 of the imported ranks ran its collectives where it has 2" in note for note in imported.notes)


def test_the_profiler_s_own_marker_tasks_are_no_work():
    t = Trace()
    t.task(-1, 2, "PROFILING_ENABLE", 1_000, 500, "STARS_COMMON")
    t.kernel("add", 2, 10_000, 5_000)
    t.task(-1, 2, "PROFILING_DISABLE", 90_000, 500, "STARS_COMMON")
    imported = import_kineto(t.json())
    assert "PROFILING" not in imported.text.split("spec ", 1)[1]
    assert "stream2: kernel add 5us" in imported.text


def test_a_thread_that_launches_itself_keeps_its_syncs():
    # (a sync moved away from its own thread's launch would no longer wait for it)
    t = two_streams(queue=True)
    t.kernel("own", 7, 45_000, 2_000)
    launch = next(e for e in reversed(t.events) if e["name"] == "Node@launch")
    launch["tid"] = t.main  # (the main thread launches this one itself)
    t.sync_stream(50_000)
    imported = import_kineto(t.json())
    main = imported.text.split("thread main {", 1)[1].split("\n}", 1)[0]
    assert "stream7: kernel own" in main and main.count("sync stream") == 2
    load(imported)


def test_the_python_api_reads_the_rank_beside_each_ascend_trace(tmp_path):
    from checker.importers import import_ranks_files

    paths = []
    for rank in (0, 1):
        t = Trace(pid=4000 + rank)
        t.allreduce(7, 31_000, 60_000)
        folder = tmp_path / f"w{rank}_ascend_pt"
        (folder / "ASCEND_PROFILER_OUTPUT").mkdir(parents=True)
        (folder / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").write_text(json.dumps(t.json()))
        (folder / f"profiler_info_{1 - rank}.json").write_text(json.dumps({"rank_id": 1 - rank}))
        paths.append(folder / "ASCEND_PROFILER_OUTPUT" / "trace_view.json")
    imported = import_ranks_files(paths)
    assert "host thread 4000" in imported.text.split("thread r1_main", 1)[1].split("\n", 1)[0]


def test_a_private_use_backend_s_kineto_trace_ties_calls_to_kernels_by_name_and_time():
    # the plain PyTorch profiler on torch_npu: `privateuse1_runtime` calls named after the
    # kernel, at its start, and kernels with no correlation id
    events = [
        {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "NPU"}},
        {"ph": "M", "name": "thread_name", "pid": 47, "tid": 47, "args": {"name": "NPU stream 47"}},
        {"ph": "X", "cat": "privateuse1_runtime", "name": "MatMulV2_1", "pid": 900, "tid": 901,
         "ts": 4307764842639.312, "dur": 0.0},
        {"ph": "X", "cat": "kernel", "name": "MatMulV2_1", "pid": 0, "tid": 47, "ts": 4307764842639.312,
         "dur": 8.84, "args": {"streamId": 47, "type": "KERNEL_AICORE"}},
        {"ph": "X", "cat": "privateuse1_runtime", "name": "Relu_2", "pid": 900, "tid": 901,
         "ts": 4307764842650.0, "dur": 0.0},
        {"ph": "X", "cat": "kernel", "name": "Relu_2", "pid": 0, "tid": 47, "ts": 4307764842650.0, "dur": 2.0,
         "args": {"streamId": 47, "type": "KERNEL_AIVEC"}},
    ]
    imported = import_kineto({"traceEvents": events})
    assert "device npu0 {" in imported.text
    body = imported.text.split("thread t901 {", 1)[1]
    assert "stream47: kernel MatMulV2_1 8840ns" in body and "stream47: kernel Relu_2 2us" in body
    assert not any("no runtime call" in note for note in imported.notes)
    assert any("records no event records, waits or synchronizations" in note for note in imported.notes)
    load(imported)


def test_an_event_sync_left_out_leaves_no_hand_off_behind():
    # an event sync on the main thread (kept there: it overlaps a call of the dequeue thread)
    # whose record has no task in the trace is left out: the queue must not await it
    t = Trace(queue=True)
    t.call("AscendCL@aclrtRecordEvent", event_id=3)  # (a record with no task)
    t.kernel("a", 2, 20_000, 5_000)
    start = t.now
    t.call("AscendCL@aclrtSynchronizeEvent", dur=10_000, thread=t.main)
    t.now = start + 2_000
    t.kernel("b", 2, 40_000, 5_000)
    t.now = start + 20_000
    t.kernel("c", 2, 60_000, 5_000)
    imported = import_kineto(t.json())
    loaded = load(imported)
    assert not [d for d in loaded.diagnostics if "never notified" in d.message]
    findings = check_loaded(loaded).findings
    assert not [f for f in findings if f.code is Code.SP201], imported.text


@pytest.mark.parametrize("connection", ["--5", "5-", " 7 ", "\u0663", "1e3"])
def test_a_connection_id_that_is_no_number_is_told_not_a_crash(connection):
    t = two_streams()
    launch = next(e for e in t.events if e["name"] == "Node@launch")
    launch["args"]["connection_id"] = connection
    load(import_kineto(t.json()))


@pytest.mark.parametrize("event_ids", [True, False])
def test_a_wait_that_blocked_until_a_record_made_after_it_waits_for_that_record(event_ids):
    # The wait is called before the record; its task blocks from 8 to 45 us, when the record
    # (after kernel a, 5..45 us) completes: a flag event, whose wait waits for a record to come.
    t = Trace(event_ids=event_ids)
    t.kernel("a", 2, 5_000, 40_000)
    t.wait(5, 8_000, 45_010)
    record = t.record(2, 45_000)
    t.kernel("c", 5, 45_100, 5_000)
    t.sync_stream(51_000)
    imported = import_kineto(t.json())
    text = imported.text
    assert f"event e{record} flag" in text
    assert f"stream5: wait e{record}" in text and "never recorded" not in text
    assert ("assumed: aclrtStreamWaitEvent" in text) is not event_ids
    program = load(imported).program
    assert simulate(program).makespan >= 50_000  # (c after a, as the wait kept it)
    assert not [f for f in check_loaded(load(imported)).findings if f.code in (Code.SP101, Code.SP201)]


def test_a_wait_that_did_not_block_names_the_npu_it_is_on():
    t = Trace()
    t.kernel("a", 2, 5_000, 40_000)
    t.wait(5, 8_000, 8_010)
    t.record(2, 45_000)
    imported = import_kineto(t.json())
    assert "aclrtStreamWaitEvent on stream 5 of npu0: the event was never recorded" in imported.text
