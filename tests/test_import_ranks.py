"""`streamproof import kineto RANK0 RANK1 ...`: one spec in which the ranks' collectives meet.

The traces are written here in the shape PyTorch's profiler gives a DDP step on each rank: a
host thread launches a backward kernel on stream 7, records an event, makes the NCCL stream
(20) wait for it and launches the collective there; each NCCL kernel carries what
`record_param_comms` says about it (`Collective name`, `Process Group Name`, `Process Group
Ranks`), and the trace its `distributedInfo.rank`.
"""

from __future__ import annotations

import json

import pytest

from checker.analyze import check_loaded
from checker.codes import Code
from checker.frontend import load_text
from checker.importers.execution_trace import read_execution_trace
from checker.importers.kineto import import_kineto
from checker.importers.ranks import collective_kind, group_ranks, import_ranks
from checker.executor.simulate import simulate
from checker.ir import Op


def _event(cat, name, pid, tid, ts, dur, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def rank_trace(rank: int, steps, *, group="0", ranks="[0, 1]", wait=True, meta_on_kernel=True,
               late=0.0, world=2, seqs=None, root=None, nccl_stream=20) -> dict:
    """One rank's trace: per step (collective name, measured us), a backward kernel of 20 us on
    stream 7 and the collective on stream `nccl_stream`, which waits for the kernel (unless
    `wait` is False: the bug of a missing `cudaStreamWaitEvent`). `late` delays the rank's host
    thread; `seqs` gives each collective its `Seq`, `root` its `Rank` (a rooted one's root)."""
    events, corr, ts = [], 1, 100.0 + late
    pid = 1000 + rank
    for step, (name, measured) in enumerate(steps):
        # (the operators carry record function ids for an Execution Trace: `execution_trace`)
        events.append(_event("cpu_op", "aten::mul_", pid, pid, ts - 0.5, 5, **{"Record function id": 100 + 2 * step}))
        events.append(_event("cuda_runtime", "cudaLaunchKernel", pid, pid, ts, 4, correlation=corr))
        events.append(_event("kernel", "backward_kernel", 0, 7, ts + 5, 20, stream=7, device=0, correlation=corr))
        kernel_end, corr, ts = ts + 25, corr + 1, ts + 6
        if wait:
            events.append(_event("cuda_runtime", "cudaEventRecord", pid, pid, ts, 1, correlation=corr))
            events.append(_event("cuda_runtime", "cudaStreamWaitEvent", pid, pid, ts + 2, 1, correlation=corr + 1))
            events.append(_event("cuda_sync", "Stream Wait Event", 0, 20, ts + 3, 1, cuda_sync_kind="Stream Wait Event",
                                 stream=20, correlation=corr + 1, device=0, wait_on_stream=7,
                                 wait_on_cuda_event_record_corr_id=corr))
            corr, ts = corr + 2, ts + 4
        meta = {"Collective name": name, "Process Group Name": group, "Process Group Description": "default_pg",
                "Process Group Ranks": ranks, "Group size": world, "In msg nelems": 1024, "Out msg nelems": 1024,
                "dtype": "Float"}
        if seqs is not None:
            meta["Seq"] = seqs[step]
        if root is not None:
            meta["Rank"] = root
        events.append(_event("cpu_op", "record_param_comms", pid, pid, ts, 6,
                             **meta, **{"Record function id": 101 + 2 * step}))
        events.append(_event("cuda_runtime", "cudaLaunchKernel", pid, pid, ts + 1, 4, correlation=corr))
        start = max(ts + 6, kernel_end) if wait else ts + 6
        events.append(_event("kernel", "ncclDevKernel_Generic", 0, nccl_stream, start, measured, stream=nccl_stream,
                             device=0, correlation=corr, **(meta if meta_on_kernel else {})))
        corr, ts = corr + 1, max(ts + 10, start + measured) + 2
    events.append(_event("cuda_runtime", "cudaDeviceSynchronize", pid, pid, ts, 2, correlation=corr))
    return {"distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world}, "traceEvents": events}


def execution_trace(steps: int) -> dict:
    """The Execution Trace of a `rank_trace`: each step's `aten::mul_` writes the gradient
    (storage 7) in place and its `record_param_comms` allreduces it in place."""
    grad = [3, 7, 0, 1024, 4, "cuda:0"]
    nodes = []
    for step in range(steps):
        nodes.append({"id": 10 + 2 * step, "name": "aten::mul_", "ctrl_deps": 1,
                      "op_schema": "aten::mul_.Tensor(Tensor(a!) self, Tensor other) -> Tensor(a!)",
                      "inputs": {"values": [grad, grad], "shapes": [[1024], [1024]],
                                 "types": ["Tensor(float)", "Tensor(float)"]},
                      "outputs": {"values": [grad], "shapes": [[1024]], "types": ["Tensor(float)"]},
                      "attrs": [{"name": "rf_id", "type": "uint64", "value": 100 + 2 * step}]})
        nodes.append({"id": 11 + 2 * step, "name": "record_param_comms", "ctrl_deps": 1,
                      "inputs": {"values": [[grad], 0], "shapes": [[[1024]], []],
                                 "types": ["GenericList[Tensor(float)]", "Int"]},
                      "outputs": {"values": [[grad]], "shapes": [[[1024]]], "types": ["GenericList[Tensor(float)]"]},
                      "attrs": [{"name": "rf_id", "type": "uint64", "value": 101 + 2 * step}]})
    return {"schema": "1.1.1-chakra.0.0.4", "pid": 1, "nodes": nodes}


def two_ranks(steps0, steps1=None, **kwargs):
    steps1 = steps0 if steps1 is None else steps1
    return import_ranks([(rank_trace(0, steps0, **kwargs), "rank0.json"), (rank_trace(1, steps1, **kwargs),
                                                                           "rank1.json")])


def load(imported):
    loaded = load_text(imported.text, "ranks.sched")
    assert loaded.program is not None, [d.message for d in loaded.diagnostics]
    return loaded


def test_the_kth_collective_of_each_rank_is_one_group_on_one_comm():
    imported = two_ranks([("allreduce", 30), ("allreduce", 50)])
    program = load(imported).program
    assert [c.name for c in program.comms] == ["pg_0"]
    assert [program.streams[s].name for s in program.comms[0].members] == ["r0_stream20", "r1_stream20"]
    collectives = [s for s in program.statements if s.op is Op.ALLREDUCE]
    assert len(collectives) == 4
    assert {program.threads[s.thread].name for s in collectives} == {"r0_main", "r1_main"}
    assert imported.counts["collective"] == 4 and imported.counts["comms"] == 1
    findings = check_loaded(load(imported)).findings
    assert not [f for f in findings if f.code in (Code.SP101, Code.SP201, Code.SP202)]


def test_each_member_takes_the_shortest_time_measured_in_its_group():
    # rank 0 arrived first and waited 70 us inside its kernel; rank 1's 30 us is the transfer
    imported = two_ranks([("allreduce", 100)], [("allreduce", 30)])
    assert imported.text.count("allreduce pg_0") == 2
    assert all(" 30us" in line for line in imported.text.splitlines() if "allreduce pg_0" in line)
    program = load(imported).program
    assert [s.duration for s in program.statements if s.op is Op.ALLREDUCE] == [30_000, 30_000]


def test_ranks_that_disagree_on_the_kind_at_one_position_are_a_mismatch():
    imported = two_ranks([("allreduce", 30), ("_allgather_base", 30)], [("allreduce", 30), ("reduce_scatter", 30)])
    findings = check_loaded(load(imported)).findings
    assert [f.code for f in findings if f.code is Code.SP202]


def test_the_group_waits_for_the_late_rank_in_the_simulation():
    early = rank_trace(0, [("allreduce", 30)])
    late = rank_trace(1, [("allreduce", 30)], late=500.0)
    # each rank's timeline starts at its own first event: the lateness is the trace's host gap
    late["traceEvents"].insert(0, _event("cuda_runtime", "cudaGetDevice", 1001, 1001, 100.0, 1, correlation=999))
    imported = import_ranks([(early, "rank0.json"), (late, "rank1.json")])
    program = load(imported).program
    result = simulate(program)
    allreduces = {s.index for s in program.statements if s.op is Op.ALLREDUCE}
    starts = [task.start for task in result.tasks if task.statement in allreduces]
    assert len(starts) == 2 and min(starts) >= 500_000 and max(starts) == min(starts)


def test_ranks_come_from_the_traces_not_their_order():
    imported = import_ranks([(rank_trace(1, [("allreduce", 30)]), "b.json"),
                             (rank_trace(0, [("allreduce", 30)]), "a.json")])
    program = load(imported).program
    assert [program.streams[s].name for s in program.comms[0].members] == ["r0_stream20", "r1_stream20"]


def test_metadata_is_read_off_the_launching_operator_when_the_kernel_has_none():
    imported = two_ranks([("allreduce", 30)], meta_on_kernel=False)
    assert imported.counts["collective"] == 2


@pytest.mark.parametrize("kwargs, says", [
    ({"ranks": "[0, 1, 2, 3]", "world": 4}, "rank(s) 2, 3, whose traces were not given"),
])
def test_a_group_that_cannot_be_matched_stays_kernels_and_says_why(kwargs, says):
    imported = two_ranks([("allreduce", 30)], **kwargs)
    assert imported.counts.get("collective", 0) == 0
    assert any(says in note for note in imported.notes), imported.notes
    load(imported)


def test_unequal_counts_stay_kernels_and_say_the_windows_differ():
    imported = two_ranks([("allreduce", 30), ("allreduce", 30)], [("allreduce", 30)])
    assert imported.counts.get("collective", 0) == 0
    assert any("profiling windows do not line up" in note for note in imported.notes)
    load(imported)


def test_broadcast_roots_at_the_first_rank_and_says_it_assumed_so():
    imported = two_ranks([("broadcast", 30)])
    program = load(imported).program
    broadcasts = [s for s in program.statements if s.op is Op.BROADCAST]
    assert len(broadcasts) == 2
    assert "root r0_stream20" in imported.text
    assert any("root" in a for a in imported.assumptions)


def test_two_traces_of_one_rank_are_refused():
    from checker.importers.execution_trace import TraceError
    with pytest.raises(TraceError, match="both rank 0"):
        import_ranks([(rank_trace(0, [("allreduce", 30)]), "a.json"), (rank_trace(0, [("allreduce", 30)]), "b.json")])


def test_one_trace_alone_keeps_its_names_and_its_kernels():
    imported = import_kineto(rank_trace(0, [("allreduce", 30)]))
    assert "r0_" not in imported.text and "comm " not in imported.text
    assert "kernel ncclDevKernel_Generic" in imported.text


@pytest.mark.parametrize("name, kind", [
    ("allreduce", "allreduce"), ("allreduce_coalesced", "allreduce"), ("barrier", "allreduce"),
    ("_allgather_base", "allgather"), ("all_gather_into_tensor_coalesced", "allgather"),
    ("reduce_scatter_tensor", "reducescatter"), ("_reduce_scatter_base", "reducescatter"),
    ("all_to_allv", "alltoall"), ("alltoall_base", "alltoall"), ("broadcast", "broadcast"),
    ("reduce", "reduce"), ("send", None), ("recv", None), ("gather", "reduce"), ("scatter", "broadcast"),
    ("wait", None),
])
def test_collective_names_as_pytorch_writes_them(name, kind):
    assert collective_kind(name) == kind


def test_group_ranks_read_as_text_or_list():
    assert group_ranks({"Process Group Ranks": "[0, 1]"}) == (0, 1)
    assert group_ranks({"Process Group Ranks": [2, 3]}) == (2, 3)
    for bad in ("[0, 0]", "[", "[-1]", "[true]", "[]", 7):
        assert group_ranks({"Process Group Ranks": bad}) is None


def test_cli_imports_several_ranks_into_one_spec(run, tmp_path):
    paths = []
    for rank in (0, 1):
        path = tmp_path / f"rank{rank}.json"
        path.write_text(json.dumps(rank_trace(rank, [("allreduce", 30), ("allreduce", 40)])))
        paths.append(str(path))
    out = tmp_path / "ranks.sched"
    status, stdout, stderr = run("import", "kineto", *paths, "-o", out, "--compare")
    assert status == 0, stderr
    assert "4 collectives on 1 comm(s)" in stdout
    assert "r0_stream20" in stdout and "r1_stream20" in stdout
    status, stdout, stderr = run("check", out)
    assert status == 0, stdout + stderr
    status, _, stderr = run("import", "kineto", *paths, "--et", paths[0], "-o", tmp_path / "x.sched")
    assert status == 2 and "1 --et file(s) for 2 trace(s)" in stderr


def test_cli_imports_several_ranks_without_the_format_word(run, tmp_path):
    # `kineto` may be left out with several traces too (argparse took the first for the word)
    paths = []
    for rank in (0, 1):
        path = tmp_path / f"rank{rank}.json"
        path.write_text(json.dumps(rank_trace(rank, [("allreduce", 30)])))
        paths.append(str(path))
    named, bare = tmp_path / "named.sched", tmp_path / "bare.sched"
    assert run("import", "kineto", *paths, "-o", named)[0] == 0
    status, stdout, stderr = run("import", *paths, "-o", bare)
    assert status == 0, stderr
    assert bare.read_text() == named.read_text()
    with pytest.raises(SystemExit) as exit_status:  # the word alone names no trace
        run("import", "kineto", "-o", bare)
    assert exit_status.value.code == 2


def test_with_each_rank_s_execution_trace_a_missing_wait_before_the_allreduce_races(run, tmp_path):
    # DDP's bug class: the gradient's allreduce on the NCCL stream does not wait for the kernel
    # that writes the gradient on the compute stream, on one rank
    paths = []
    for rank in (0, 1):
        trace, et = tmp_path / f"rank{rank}.json", tmp_path / f"et{rank}.json"
        trace.write_text(json.dumps(rank_trace(rank, [("allreduce", 30)], wait=rank == 0)))
        et.write_text(json.dumps(execution_trace(1)))
        paths.append((str(trace), str(et)))
    out = tmp_path / "ranks.sched"
    status, stdout, stderr = run("import", "kineto", paths[0][0], paths[1][0], "--et", paths[0][1],
                                 "--et", paths[1][1], "-o", out)
    assert status == 0, stderr
    text = out.read_text()
    assert "r0_stream20: allreduce pg_0 r0_s7_gpu0" in text and "r1_stream20: allreduce pg_0 r1_s7_gpu0" in text
    loaded = load_text(text, "ranks.sched")
    findings = check_loaded(loaded).findings
    races = [f for f in findings if f.code is Code.SP101]
    assert races and {f.buffer for f in races} == {"r1_s7_gpu0"}


def test_point_to_point_kernels_of_a_group_stay_kernels_and_the_collectives_still_meet():
    traces = []
    for rank in (0, 1):
        trace = rank_trace(rank, [("allreduce", 30), ("allreduce", 30)])
        pid = 1000 + rank
        meta = {"Collective name": "send" if rank == 0 else "recv", "Process Group Name": "0",
                "Process Group Ranks": "[0, 1]", "Group size": 2}
        trace["traceEvents"].append(_event("cuda_runtime", "cudaLaunchKernel", pid, pid, 150.0, 2, correlation=500))
        trace["traceEvents"].append(_event("kernel", "ncclDevKernel_SendRecv", 0, 21, 153.0, 9, stream=21, device=0,
                                           correlation=500, **meta))
        traces.append((trace, f"rank{rank}.json"))
    imported = import_ranks(traces)
    assert imported.counts["collective"] == 4
    assert "kernel ncclDevKernel_SendRecv" in imported.text
    assert any("2 communication kernel(s) of operations the spec does not match" in note for note in imported.notes)
    load(imported)


def pipeline_trace(rank: int, order: str, *, peer_keys=True) -> dict:
    """A pipeline stage: its sends to the other rank and recvs from it (`order`: "s" and "r"
    in the order it calls them), on stream 30 (each pair of ranks has an NCCL communicator
    and a stream of its own)."""
    pid, events, ts, corr = 1000 + rank, [], 100.0, 1
    other = 1 - rank
    for kind in ("send" if c == "s" else "recv" for c in order):
        meta = {"Collective name": kind, "Process Group Name": "0", "Process Group Ranks": "[0, 1]",
                "Group size": 2, "In msg nelems": 64, "Out msg nelems": 64, "dtype": "Float", "Rank": other}
        if peer_keys:
            meta["Dst Rank" if kind == "send" else "Src Rank"] = other
        events.append(_event("cuda_runtime", "cudaLaunchKernel", pid, pid, ts, 2, correlation=corr))
        events.append(_event("kernel", "ncclDevKernel_SendRecv", 0, 30, ts + 3, 10 + rank, stream=30, device=0,
                             correlation=corr, **meta))
        ts, corr = ts + 20, corr + 1
    return {"distributedInfo": {"rank": rank, "world_size": 2}, "traceEvents": events}


@pytest.mark.parametrize("peer_keys", [True, False])  # (without Dst/Src Rank: `Rank` in the group)
def test_sends_and_recvs_between_two_ranks_pair_on_a_comm_of_their_own(peer_keys):
    # (1F1B-like: stage 0 sends two activations, then receives a gradient)
    imported = import_ranks([(pipeline_trace(0, "ssr", peer_keys=peer_keys), "stage0.json"),
                             (pipeline_trace(1, "rrs", peer_keys=peer_keys), "stage1.json")])
    assert imported.counts["collective"] == 6, imported.notes
    assert "comm pg_0_p2p_0_1 = { r0_stream30, r1_stream30 }" in imported.text
    assert "r0_stream30: send pg_0_p2p_0_1 to r1_stream30" in imported.text
    assert "r1_stream30: recv pg_0_p2p_0_1 from r0_stream30" in imported.text
    assert imported.text.count(" 10us  # ncclDevKernel_SendRecv, 11us measured") == 3  # (the pair's shortest)
    findings = check_loaded(load(imported)).findings
    assert not [f for f in findings if f.code in (Code.SP201, Code.SP202)]
    # the same calls in an order that waits in a circle: stage 1 sends before it receives
    imported = import_ranks([(pipeline_trace(0, "ssr"), "stage0.json"), (pipeline_trace(1, "srr"), "stage1.json")])
    findings = check_loaded(load(imported)).findings
    assert [f for f in findings if f.code is Code.SP201]


def test_a_send_whose_recv_is_outside_the_window_stays_a_kernel():
    # stage 1's trace misses one of the recvs: a send with no recv would hang the spec
    imported = import_ranks([(pipeline_trace(0, "ss"), "stage0.json"), (pipeline_trace(1, "r"), "stage1.json")])
    assert imported.counts.get("collective", 0) == 0
    assert any("2 send(s) from 0 against 1 recv(s) on 1" in note for note in imported.notes)
    findings = check_loaded(load(imported)).findings
    assert not [f for f in findings if f.code is Code.SP201]


def test_a_trace_s_names_cannot_break_the_spec():
    # (operator names reach the spec's comments as they are)
    traces = []
    for rank in (0, 1):
        trace = rank_trace(rank, [("broadcast", 30)])
        trace["traceEvents"].append(_event("user_annotation", "step{root:x} }{", 1000 + rank, 1000 + rank, 90.0, 200))
        traces.append((trace, f"rank{rank}.json"))
    imported = import_ranks(traces)
    assert "step{root:x} }{" in imported.text
    load(imported)


def test_an_execution_trace_in_pyproject_still_goes_with_one_trace(run, tmp_path, monkeypatch):
    from pathlib import Path
    fixtures = Path(__file__).parent / "fixtures" / "traces"
    (tmp_path / "pyproject.toml").write_text('[tool.streamproof.import]\net = "et.json"\n')
    (tmp_path / "et.json").write_text((fixtures / "two_streams_et.json").read_text())
    (tmp_path / "t.json").write_text((fixtures / "two_streams.json").read_text())
    monkeypatch.chdir(tmp_path)
    from checker.cli import main
    status = main(["import", "kineto", "t.json", "-o", "a.sched"])
    assert status == 0
    # one on the command line replaces the configured one, and does not add to it
    status = main(["import", "kineto", "t.json", "--et", "et.json", "-o", "b.sched"])
    assert status == 0
    assert (tmp_path / "a.sched").read_text() == (tmp_path / "b.sched").read_text()
    assert "writes s" in (tmp_path / "a.sched").read_text()


def test_a_kernel_another_operator_launches_inside_a_collective_is_no_collective():
    # ProcessGroupNCCL's barrier fills a tensor with zeros (a kernel on the compute stream)
    # inside its record_param_comms, before the allreduce
    traces = []
    for rank in (0, 1):
        trace = rank_trace(rank, [("barrier", 30), ("allreduce", 30)], meta_on_kernel=False)
        pid = 1000 + rank
        comm_op = next(e for e in trace["traceEvents"] if e["name"] == "record_param_comms")
        at = comm_op["ts"] + 0.2
        trace["traceEvents"] += [
            _event("cpu_op", "aten::zeros", pid, pid, at, 0.7),
            _event("cuda_runtime", "cudaLaunchKernel", pid, pid, at + 0.1, 0.5, correlation=700),
            _event("kernel", "fill_kernel", 0, 7, at + 1, 2, stream=7, device=0, correlation=700)]
        traces.append((trace, f"rank{rank}.json"))
    imported = import_ranks(traces)
    assert imported.counts["collective"] == 4, imported.notes
    assert "kernel fill_kernel" in imported.text
    load(imported)


def test_sequence_numbers_line_up_windows_that_start_apart():
    # rank 0's profiler started one collective earlier than rank 1's
    imported = import_ranks([(rank_trace(0, [("allreduce", 30)] * 3, seqs=[5, 6, 7]), "rank0.json"),
                             (rank_trace(1, [("allreduce", 30)] * 3, seqs=[6, 7, 8]), "rank1.json")])
    assert imported.counts["collective"] == 4  # seq 6 and 7 on both ranks
    assert any("2 collective(s) whose sequence number" in note for note in imported.notes)
    program = load(imported).program
    thread0 = [program.statements[i] for i in program.threads[0].statements]
    assert [s.op for s in thread0 if s.op in (Op.KERNEL, Op.ALLREDUCE) and program.streams[s.stream].name == "r0_stream20"] \
        == [Op.KERNEL, Op.ALLREDUCE, Op.ALLREDUCE]


def test_the_root_the_trace_names_is_the_root():
    imported = two_ranks([("broadcast", 30)], root=1)
    assert "root r1_stream20" in imported.text and "root r0_stream20" not in imported.text
    assert not imported.assumptions


def test_collectives_of_two_groups_that_overlapped_keep_overlapping():
    traces = []
    for rank in (0, 1):
        first = rank_trace(rank, [("allreduce", 100)], group="dp")
        second = rank_trace(rank, [("allreduce", 100)], group="tp", nccl_stream=21)
        for event in second["traceEvents"]:
            if "correlation" in event["args"]:
                event["args"]["correlation"] += 100
            if "wait_on_cuda_event_record_corr_id" in event["args"]:
                event["args"]["wait_on_cuda_event_record_corr_id"] += 100
        first["traceEvents"] += second["traceEvents"]
        traces.append((first, f"rank{rank}.json"))
    imported = import_ranks(traces)
    assert imported.counts["comms"] == 2 and "comm 2" in imported.text
    program = load(imported).program
    allreduces = {s.index for s in program.statements if s.op is Op.ALLREDUCE}
    spans = [(t.start, t.end) for t in simulate(program).tasks if t.statement in allreduces]
    assert len(spans) == 4 and max(start for start, _ in spans) < min(end for _, end in spans)


def test_ranks_are_numbered_from_the_traces_first_and_in_order_after():
    named = rank_trace(1, [("allreduce", 30)])
    unnamed = rank_trace(0, [("allreduce", 30)])
    del unnamed["distributedInfo"]
    imported = import_ranks([(named, "a.json"), (unnamed, "b.json")])
    assert "b.json is rank 0" in imported.text and "r1_main" in imported.text
    garbage = rank_trace(1, [("allreduce", 30)])
    garbage["distributedInfo"]["rank"] = "stream 1"
    imported = import_ranks([(garbage, "a.json"), (unnamed, "b.json")])
    assert "a.json is rank 0" in imported.text and "b.json is rank 1" in imported.text


def test_no_traces_and_a_member_that_measured_nothing():
    from checker.importers.execution_trace import TraceError
    with pytest.raises(TraceError, match="no traces"):
        import_ranks([])
    imported = two_ranks([("allreduce", 0)], [("allreduce", 30)])
    assert all(" 30us" in line for line in imported.text.splitlines() if "allreduce pg_0" in line)


def test_a_group_a_rank_ran_on_two_streams_meets_on_a_stream_of_its_own():
    # recent PyTorch: the DDP bucket's allreduce (asynchronous) on the NCCL stream 20, the
    # loss allreduce (synchronous) on the caller's stream 7; NCCL runs them in order
    traces = []
    for rank in (0, 1):
        trace = rank_trace(rank, [("allreduce", 30), ("allreduce", 40)], wait=False)
        second = [e for e in trace["traceEvents"] if e["name"] == "ncclDevKernel_Generic"][1]
        second["tid"] = second["args"]["stream"] = 7
        traces.append((trace, f"rank{rank}.json"))
    imported = import_ranks(traces)
    assert imported.counts["collective"] == 4, imported.notes
    assert "comm pg_0 = { r0_pg_0, r1_pg_0 }" in imported.text
    lines = [line.split("#")[0].strip() for line in imported.text.splitlines()]
    assert lines[lines.index("r0_stream7: record r0_pg_0_in[1]") + 1:][:4] == [
        "r0_pg_0: wait r0_pg_0_in[1]", "r0_pg_0: allreduce pg_0 r0_gpu0_comm[1] 40us",
        "r0_pg_0: record r0_pg_0_out[1]", "r0_stream7: wait r0_pg_0_out[1]"]
    program = load(imported).program
    findings = check_loaded(load(imported)).findings
    assert not [f for f in findings if f.code in (Code.SP201, Code.SP202, Code.SP101)]
    # the second allreduce waits for the first (one communicator), though on other streams
    result = simulate(program)
    allreduces = [s.index for s in program.statements if s.op is Op.ALLREDUCE and s.thread == 0]
    spans = {task.statement: (task.start, task.end) for task in result.tasks}
    assert spans[allreduces[1]][0] >= spans[allreduces[0]][1]


def test_the_python_api_imports_rank_files(tmp_path):
    import streamproof as sp

    paths = []
    for rank in (0, 1):
        path = tmp_path / f"rank{rank}.json"
        path.write_text(json.dumps(rank_trace(rank, [("allreduce", 30)])))
        paths.append(path)
    imported = sp.import_ranks_files(paths)
    assert imported.counts["collective"] == 2 and sp.load_text(imported.text).program is not None


def test_a_directory_stands_for_the_traces_in_it(run, tmp_path):
    folder = tmp_path / "profile"
    folder.mkdir()
    for rank in (0, 1):  # (tensorboard_trace_handler's names; the Execution Trace beside them is left alone)
        (folder / f"worker{rank}.1700000000.pt.trace.json").write_text(json.dumps(rank_trace(rank, [("allreduce", 30)])))
    (folder / "execution_trace.json").write_text(json.dumps(execution_trace(1)))
    out = tmp_path / "step.sched"
    status, stdout, stderr = run("import", "kineto", folder, "-o", out)
    assert status == 0, stderr
    assert "2 collectives on 1 comm(s)" in stdout
    (tmp_path / "empty").mkdir()
    status, _, stderr = run("import", "kineto", tmp_path / "empty", "-o", out)
    assert status == 2 and "no .json or .json.gz trace in it" in stderr


def test_a_bridged_group_launched_from_two_threads_keeps_the_trace_s_order():
    # rank 0: the autograd thread's bucket allreduce on the NCCL stream, then the main thread's
    # allgather on its own stream; nothing else orders the two threads' enqueues onto the
    # comm's member stream, so the trace's order is kept by a hand-off (else the swapped order
    # is a mismatch that did not happen)
    def trace(rank, layout):
        pid, events = 1000 + rank, []
        for corr, (tid, ts, name, stream) in enumerate(layout, start=1):
            meta = {"Collective name": name, "Process Group Name": "0", "Process Group Ranks": "[0, 1]",
                    "Group size": 2}
            events.append(_event("cpu_op", "record_param_comms", pid, tid, ts, 6, **meta))
            events.append(_event("cuda_runtime", "cudaLaunchKernel", pid, tid, ts + 1, 4, correlation=corr))
            events.append(_event("kernel", "ncclDevKernel_Generic", 0, stream, ts + 6, 30, stream=stream, device=0,
                                 correlation=corr, **meta))
        return {"distributedInfo": {"rank": rank, "world_size": 2}, "traceEvents": events}

    imported = import_ranks([
        (trace(0, [(2000, 100, "allreduce", 20), (1000, 300, "_allgather_base", 7)]), "rank0.json"),
        (trace(1, [(1001, 100, "allreduce", 20), (1001, 300, "_allgather_base", 20)]), "rank1.json")])
    assert "comm pg_0 = { r0_pg_0, r1_stream20 }" in imported.text
    assert "await r0_handoff[0]" in imported.text
    findings = check_loaded(load(imported)).findings
    assert not [f for f in findings if f.code in (Code.SP202, Code.SP201)]


def test_a_send_that_ended_before_its_recv_began_is_noted():
    # stage 0's send kernel ends (the data buffered) before stage 1's recv starts
    early, late = pipeline_trace(0, "s"), pipeline_trace(1, "r")
    for event in late["traceEvents"]:
        event["ts"] += 50
    imported = import_ranks([(early, "stage0.json"), (late, "stage1.json")])
    assert imported.counts["collective"] == 2
    assert any("in 1 send/recv pair(s) one side ended before the other began" in n for n in imported.notes)
    aligned = import_ranks([(pipeline_trace(0, "s"), "stage0.json"), (pipeline_trace(1, "r"), "stage1.json")])
    assert not any("ended before" in n for n in aligned.notes)


# -- gather and scatter, roots, batched sends and recvs


def test_gather_and_scatter_are_the_rooted_collectives_of_the_same_memory():
    # (NCCL runs them as grouped sends to and from the root: every rank reads its input and the
    # root writes in a gather, as in a reduce; the root reads and every rank writes in a scatter)
    imported = two_ranks([("gather", 30), ("scatter", 40)], root=1)
    program = load(imported).program
    assert [s.op for s in program.statements if s.op in (Op.REDUCE, Op.BROADCAST)] == \
        [Op.REDUCE, Op.BROADCAST, Op.REDUCE, Op.BROADCAST]
    assert imported.text.count("root r1_stream20") == 4 and not imported.assumptions
    assert "  # gather: ncclDevKernel_Generic" in imported.text and "  # scatter: ncclDevKernel_Generic" in imported.text
    assert imported.counts["collective"] == 4
    findings = check_loaded(load(imported)).findings
    assert not [f for f in findings if f.code in (Code.SP201, Code.SP202)]


def test_ranks_that_each_name_themselves_as_the_root_say_nothing_of_the_root():
    # PyTorch before about 2.4 wrote each caller's own rank as a broadcast's `Rank`
    traces = [(rank_trace(rank, [("broadcast", 30)], root=rank), f"rank{rank}.json") for rank in (0, 1)]
    imported = import_ranks(traces)
    assert imported.text.count("root r0_stream20") == 2
    assert any("names itself" in a for a in imported.assumptions)
    findings = check_loaded(load(imported)).findings
    assert not [f for f in findings if f.code is Code.SP202]
    # ranks that name each other as the root did call different roots: a mismatch
    traces = [(rank_trace(rank, [("broadcast", 30)], root=1 - rank), f"rank{rank}.json") for rank in (0, 1)]
    imported = import_ranks(traces)
    assert "root r1_stream20" in imported.text and "root r0_stream20" in imported.text
    findings = check_loaded(load(imported)).findings
    assert [f for f in findings if f.code is Code.SP202]


def batch_trace(rank: int, batches, *, world=2, peer_keys=True, stream=20) -> dict:
    """A pipeline stage that calls `batch_isend_irecv`: per batch, one `record_param_comms` per
    send or recv (`batches`: lists of ("send" | "recv", peer)), none of which launches anything,
    then `nccl:coalesced` around the launch of the one kernel that runs them all, which carries
    no collective args (PyTorch launches it when the group ends)."""
    pid, events, ts, corr = 1000 + rank, [], 100.0, 1
    ranks = str(list(range(world)))
    for number, calls in enumerate(batches):
        for kind, peer in calls:
            meta = {"Collective name": kind, "Process Group Name": "0", "Process Group Ranks": ranks,
                    "Group size": world, "In msg nelems": 64, "Out msg nelems": 64, "dtype": "Float",
                    "Rank": peer, "Seq": number + 1, "Record function id": 200 + int(ts)}
            if peer_keys:
                meta["Dst Rank" if kind == "send" else "Src Rank"] = peer
            events.append(_event("cpu_op", "record_param_comms", pid, pid, ts, 2, **meta))
            ts += 3
        events.append(_event("user_annotation", "nccl:coalesced", pid, pid, ts, 1))
        events.append(_event("cuda_runtime", "cudaLaunchKernel", pid, pid, ts + 0.2, 0.5, correlation=corr))
        events.append(_event("kernel", "ncclDevKernel_SendRecv", 0, stream, ts + 2, 12 + rank, stream=stream,
                             device=0, correlation=corr))
        ts, corr = ts + 20, corr + 1
    return {"distributedInfo": {"rank": rank, "world_size": world}, "traceEvents": events}


def test_a_batch_of_sends_and_recvs_is_one_group_on_the_process_group_s_comm():
    # (1F1B's steady state: each stage sends its activation and receives a gradient at once,
    # which unbatched would wait in a circle)
    imported = import_ranks([(batch_trace(0, [[("send", 1), ("recv", 1)]] * 2), "stage0.json"),
                             (batch_trace(1, [[("send", 0), ("recv", 0)]] * 2), "stage1.json")])
    assert imported.counts["collective"] == 8, imported.notes
    assert "comm pg_0_batched = { r0_stream20, r1_stream20 }" in imported.text
    assert imported.text.count("group {  # ncclDevKernel_SendRecv") == 4
    # (each call takes the kernel's time, the shorter side's, and a comm unit of its own)
    assert "  r0_stream20: send pg_0_batched to r1_stream20 r0_gpu0_comm[0] 12us" in imported.text
    assert "  r1_stream20: recv pg_0_batched from r0_stream20 r1_gpu0_comm[1] 12us" in imported.text
    assert "device r0_gpu0 { compute 1 h2d 1 d2h 1 d2d 1 comm 2 }" in imported.text
    program = load(imported).program
    assert len([s for s in program.statements if s.op is Op.SEND]) == 4
    findings = check_loaded(load(imported)).findings
    assert not [f for f in findings if f.code in (Code.SP101, Code.SP201, Code.SP202)]
    assert not any("stay kernels" in note for note in imported.notes)


def test_a_batch_takes_the_time_its_kernel_took_whatever_the_comm_units():
    # a two-call batch of 100 us takes 100 us: its calls run at once, each on a comm unit of
    # its own (not one after the other on one unit, nor two halves side by side on two)
    traces = []
    for rank in (0, 1):
        trace = batch_trace(rank, [[("send", 1 - rank), ("recv", 1 - rank)]])
        kernel = next(e for e in trace["traceEvents"] if e["cat"] == "kernel")
        kernel["dur"] = 100.0
        traces.append((trace, f"stage{rank}.json"))
    imported = import_ranks(traces)
    program = load(imported).program
    assert imported.text.count("] 100us\n") == 4
    assert "comm 2 }" in imported.text
    assert 100_000 <= simulate(program).makespan <= 110_000


def test_a_single_send_on_the_batches_stream_meets_its_peer_in_call_order():
    # rank 0 sends A alone, then B in a batch; rank 1 receives A in a batch, then B alone, all
    # on each rank's NCCL stream: one communicator, so NCCL pairs A with A and B with B
    trace0 = pipeline_trace(0, "s")
    trace1 = batch_trace(1, [[("recv", 0)]])
    late0 = batch_trace(0, [[("send", 1)]], stream=30)
    late1 = pipeline_trace(1, "r")
    for trace, late in ((trace0, late0), (trace1, late1)):
        shift = 1000.0
        for event in late["traceEvents"]:
            event = dict(event, ts=event["ts"] + shift)
            if "correlation" in event["args"]:
                event["args"] = dict(event["args"], correlation=event["args"]["correlation"] + 100)
            trace["traceEvents"].append(event)
    # (both ranks' single and batched calls on stream 30, as pipeline_trace puts them)
    for trace in (trace1,):
        for event in trace["traceEvents"]:
            if event["cat"] == "kernel" and event["ts"] < 1000:
                event["tid"] = event["args"]["stream"] = 30
    imported = import_ranks([(trace0, "stage0.json"), (trace1, "stage1.json")])
    assert imported.counts["collective"] == 4, imported.notes
    assert "comm pg_0_batched = { r0_stream30, r1_stream30 }" in imported.text
    assert "p2p" not in imported.text
    findings = check_loaded(load(imported)).findings
    assert not [f for f in findings if f.code in (Code.SP201, Code.SP202)]


def test_a_batch_whose_record_names_no_peer_stays_a_kernel_and_says_so():
    traces = []
    for rank in (0, 1):
        trace = batch_trace(rank, [[("send", 1 - rank), ("recv", 1 - rank)]], peer_keys=False)
        record = next(e for e in trace["traceEvents"] if e["name"] == "record_param_comms")
        del record["args"]["Rank"]
        traces.append((trace, f"stage{rank}.json"))
    imported = import_ranks(traces)
    assert imported.counts.get("collective", 0) == 0
    assert any("whose calls' records do not all name their peer" in note for note in imported.notes)
    load(imported)


def test_records_of_another_sequence_number_are_left_out_and_counted():
    stage0 = batch_trace(0, [[("send", 1), ("recv", 1)]])
    record = next(e for e in stage0["traceEvents"] if e["name"] == "record_param_comms")
    record["args"]["Seq"] = 99  # (a stale record of an earlier batch whose kernel is not in the trace)
    imported = import_ranks([(stage0, "stage0.json"), (batch_trace(1, [[("send", 0)]]), "stage1.json")])
    assert imported.counts["collective"] == 2, imported.notes
    assert "r0_stream20: recv pg_0_batched from r1_stream20" in imported.text
    assert any("1 send or recv record(s) that launched nothing belong to no batch" in note
               for note in imported.notes)


@pytest.mark.parametrize("value", ["\u00b9", "\u0663", "-1", "1.5"])
def test_numbers_written_in_other_scripts_are_unreadable_not_a_crash(value):
    traces = [(rank_trace(rank, [("allreduce", 30)], seqs=[value]), f"rank{rank}.json") for rank in (0, 1)]
    imported = import_ranks(traces)
    load(imported)
    imported = import_ranks([(batch_trace(rank, [[("send", 1 - rank)] if rank == 0 else [("recv", 0)]]),
                              f"s{rank}.json") for rank in (0, 1)])
    load(imported)


def test_batched_calls_of_three_stages_pair_by_peer():
    # stage 1 receives from stage 0 and sends to stage 2 in one batch
    imported = import_ranks([(batch_trace(0, [[("send", 1)]], world=3), "s0.json"),
                             (batch_trace(1, [[("recv", 0), ("send", 2)]], world=3), "s1.json"),
                             (batch_trace(2, [[("recv", 1)]], world=3), "s2.json")])
    assert imported.counts["collective"] == 4, imported.notes
    assert "comm pg_0_batched = { r0_stream20, r1_stream20, r2_stream20 }" in imported.text
    assert "r1_stream20: recv pg_0_batched from r0_stream20" in imported.text
    assert "r1_stream20: send pg_0_batched to r2_stream20" in imported.text
    findings = check_loaded(load(imported)).findings
    assert not [f for f in findings if f.code in (Code.SP201, Code.SP202)]


@pytest.mark.parametrize("peer_keys", [True, False])
def test_batches_whose_calls_do_not_number_the_same_stay_kernels(peer_keys):
    imported = import_ranks([(batch_trace(0, [[("send", 1)], [("send", 1)]], peer_keys=peer_keys), "a.json"),
                             (batch_trace(1, [[("recv", 0)]], peer_keys=peer_keys), "b.json")])
    assert imported.counts.get("collective", 0) == 0
    assert any("2 batched send(s) from 0 against 1 recv(s) on 1" in note for note in imported.notes)
    assert "kernel ncclDevKernel_SendRecv" in imported.text
    load(imported)


def test_a_batch_with_a_rank_not_imported_stays_kernels():
    imported = import_ranks([(batch_trace(0, [[("send", 1), ("recv", 2)]], world=3), "a.json"),
                             (batch_trace(1, [[("recv", 0)]], world=3), "b.json")])
    assert imported.counts.get("collective", 0) == 0
    assert any("rank 2, whose trace was not given" in note for note in imported.notes)


def test_the_peer_s_global_rank_on_the_kernel_is_read():
    # Kineto copies `Dst Rank` and `Src Rank` onto the kernel, never `Rank`: a send whose
    # record is not the launching operator still finds its peer
    traces = []
    for rank in (0, 1):
        trace = pipeline_trace(rank, "s" if rank == 0 else "r")
        for event in trace["traceEvents"]:
            event["args"].pop("Rank", None)
        traces.append((trace, f"stage{rank}.json"))
    imported = import_ranks(traces)
    assert imported.counts["collective"] == 2, imported.notes
    assert "r0_stream30: send pg_0_p2p_0_1 to r1_stream30" in imported.text


def test_a_batched_send_uses_its_own_record_s_tensors():
    traces, ets = [], []
    for rank in (0, 1):
        trace = batch_trace(rank, [[("send", 1 - rank), ("recv", 1 - rank)]])
        records = [e for e in trace["traceEvents"] if e["name"] == "record_param_comms"]
        nodes = []
        for k, (record, storage) in enumerate(zip(records, (11, 12))):
            tensor = [5 + k, storage, 0, 64, 4, "cuda:0"]
            nodes.append({"id": 20 + k, "name": "record_param_comms", "ctrl_deps": 1,
                          "inputs": {"values": [[tensor], 0], "shapes": [[[64]], []],
                                     "types": ["GenericList[Tensor(float)]", "Int"]},
                          "outputs": {"values": [[tensor]], "shapes": [[[64]]],
                                      "types": ["GenericList[Tensor(float)]"]},
                          "attrs": [{"name": "rf_id", "type": "uint64",
                                     "value": record["args"]["Record function id"]}]})
        traces.append((trace, f"stage{rank}.json"))
        ets.append(read_execution_trace({"schema": "1.1.1-chakra.0.0.4", "pid": 1, "nodes": nodes}))
    imported = import_ranks(traces, ets)
    assert "r0_stream20: send pg_0_batched to r1_stream20 r0_s11_gpu0" in imported.text, imported.text
    assert "r0_stream20: recv pg_0_batched from r1_stream20 r0_s12_gpu0" in imported.text
    findings = check_loaded(load(imported)).findings
    assert not [f for f in findings if f.code in (Code.SP101, Code.SP201, Code.SP202)]


def test_collective_placeholders_divide_among_the_comm_s_members():
    # an in-place allgather or reducescatter on a placeholder of 1 byte got SP070 on a buffer
    # the user never wrote
    imported = two_ranks([("_allgather_base", 30), ("reduce_scatter_tensor", 30), ("all_to_all", 30)])
    loaded = load(imported)
    assert "2B on" in imported.text
    assert [d.message for d in loaded.diagnostics if d.code.value == "SP070"] == []
