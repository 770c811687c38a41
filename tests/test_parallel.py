"""Checking in parallel: worker processes (`-j N`) and a Dask cluster (`--cluster`) give the
same reports as checking the files one by one, in input order."""

from __future__ import annotations

import json

import pytest

from conftest import CONFORMANCE, SPECS
from checker import smt
from checker.analyze import Options
from checker.inputs import expand
from checker.parallel import FileEvent, check_all, default_jobs
from checker.report.json import report_json

SUITES = (SPECS, CONFORMANCE)


def test_default_jobs_is_every_core():
    assert default_jobs() >= 1


def test_jobs_2_gives_the_same_json_as_jobs_1(run):
    status1, one, _ = run("check", "-j", "1", "--format", "json", *SUITES)
    status2, two, _ = run("check", "-j", "2", "--format", "json", *SUITES)
    assert status1 == status2 == 2  # the conformance suite holds invalid specs on purpose
    assert one == two
    paths = [f["path"] for f in json.loads(one)["files"]]
    assert paths == [s.path for s in expand([str(p) for p in SUITES])]


def test_jobs_2_gives_the_same_text_as_jobs_1(run):
    assert run("check", "-j", "2", SPECS) == run("check", "-j", "1", SPECS)


def test_files_are_announced_and_finished_once_each():
    events: list[FileEvent] = []
    sources = expand([str(SPECS)])
    reports = check_all(sources, Options(), jobs=2, on_file=events.append)
    started = sorted(e.index for e in events if e.report is None)
    finished = sorted(e.index for e in events if e.report is not None)
    assert started == finished == list(range(len(sources)))
    assert [r.path for r in reports] == [s.path for s in sources]


def test_a_report_does_not_depend_on_the_specs_checked_before_it():
    """Workers check other subsets of the files than -j 1 does: each spec is checked as a fresh
    process would check it (these two specs give other witnesses when the solver's state is
    carried over from the first to the second)."""
    fixtures = CONFORMANCE.parent / "fixtures"
    before, after = (str(fixtures / name) for name in ("solver_before.sched", "solver_after.sched"))
    alone = check_all(expand([after]), Options(), jobs=1)
    in_turn = check_all(expand([before, after]), Options(), jobs=1)
    assert report_json(in_turn[1]) == report_json(alone[0])
    assert any(f["witness"] for f in report_json(alone[0])["findings"])


def test_one_spec_hands_the_jobs_to_the_solver(monkeypatch):
    """One spec with -j N lets the solver answer its questions in N workers."""
    seen = {}

    def analyze(program, timeout, rlimit=None, total=None, workers=1, progress=None, shortcut=None, symmetry=True):
        seen["workers"] = workers
        return ()

    monkeypatch.setattr(smt, "analyze", analyze)
    (report,) = check_all(expand([str(CONFORMANCE / "c12_notify_handshake.sched")]), Options(), jobs=3)
    assert seen == {"workers": 3} and report.passed


# -- Dask -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dask_cluster():
    distributed = pytest.importorskip("distributed")
    cluster = distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                       dashboard_address=None)
    try:
        yield cluster.scheduler_address
    finally:
        cluster.close()


def test_cluster_gives_the_same_json_as_jobs_1(run, dask_cluster):
    status, here, _ = run("check", "-j", "1", "--format", "json", *SUITES)
    status_cluster, there, _ = run("check", "--cluster", dask_cluster, "--format", "json", *SUITES)
    assert status == status_cluster == 2
    assert here == there


def test_cluster_without_dask_is_a_usage_error(run, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_dask(name, *args, **kwargs):
        if name == "distributed" or name.startswith("distributed."):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_dask)
    status, out, err = run("check", "--cluster", "tcp://127.0.0.1:8786", SPECS)
    assert status == 2 and "streamproof[cluster]" in err and "Traceback" not in err


@pytest.mark.parametrize("address", ["not an address", "tcp://host", "host:port", "tls://:8786", "tcp://h:0",
                                     "  tcp://host"])
def test_cluster_address_that_is_not_one_is_a_usage_error(capsys, address):
    """Told by the argument parser, before Dask is loaded (it need not be installed for the
    address to be wrong)."""
    from checker.cli import main

    with pytest.raises(SystemExit) as stopped:
        main(["check", "--cluster", address, str(SPECS / "copy_compute_sync.sched")])
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and "is not a scheduler address" in err and "Traceback" not in err


def test_cluster_nobody_listens_at_fails_at_once(run):
    pytest.importorskip("distributed")
    import gc

    status, out, err = run("check", "--cluster", "tcp://127.0.0.1:1", SPECS / "copy_compute_sync.sched")
    assert status == 2 and "cannot reach the Dask scheduler at tcp://127.0.0.1:1" in err
    assert "Traceback" not in err
    import distributed

    gc.collect()  # no half-made Dask client is left to time out as it closes
    assert not [o for o in gc.get_objects() if isinstance(o, distributed.Client)]


def test_cluster_address_that_answers_garbage_fails_without_a_traceback(run):
    pytest.importorskip("distributed")
    import socket
    import threading

    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def answer_garbage():
        for _ in range(4):
            try:
                connection, _ = server.accept()
            except OSError:
                return
            connection.sendall(b"\xff" * 64 + b"HTTP/1.1 400 Bad Request\r\n\r\n")
            connection.close()

    threading.Thread(target=answer_garbage, daemon=True).start()
    try:
        status, out, err = run("check", "--cluster", f"tcp://127.0.0.1:{port}", SPECS / "copy_compute_sync.sched")
    finally:
        server.close()
    assert status == 2 and f"cannot reach the Dask scheduler at tcp://127.0.0.1:{port}" in err
    assert "Traceback" not in err and "EiB" not in err


def test_empty_cluster_address_is_a_usage_error(run, capsys):
    with pytest.raises(SystemExit) as exit_status:
        run("check", "--cluster", "", SPECS / "copy_compute_sync.sched")
    assert exit_status.value.code == 2 and "an empty address" in capsys.readouterr().err


@pytest.mark.skipif(not __import__("sys").platform.startswith("linux") or not __import__("shutil").which("pgrep"),
                    reason="reads /proc, lists children with pgrep")
def test_sigterm_stops_the_workers_and_exits_143():
    """A cancelled CI job sends SIGTERM: the `-j` workers stop with the command, not after
    their specs (two slow fixtures keep them busy)."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    fixtures = Path(__file__).parent / "fixtures"
    process = subprocess.Popen([sys.executable, "-m", "checker", "check", "-j", "2", "--format", "json",
                                str(fixtures / "rand3x100_3.sched"), str(fixtures / "hang_4x40.sched")],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    children: list[str] = []
    for _ in range(100):  # (until both workers run)
        time.sleep(0.1)
        children = subprocess.run(["pgrep", "-P", str(process.pid)], capture_output=True, text=True).stdout.split()
        if len(children) >= 2:
            break
    time.sleep(1)
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=30)
    assert (process.returncode, err) == (143, "streamproof: terminated\n")
    time.sleep(1)
    assert [c for c in children if os.path.exists(f"/proc/{c}") and
            "checker" in Path(f"/proc/{c}/cmdline").read_text(errors="replace")] == []


def _die(*args) -> None:
    import os

    os._exit(9)  # (as the kernel's out-of-memory killer ends a process: no exception, no message)


def test_a_solver_worker_that_dies_is_out_of_memory_not_an_internal_error(monkeypatch):
    """A killed `-j` solver worker used to surface as BrokenProcessPool, "internal error ...
    this is a bug", exit 2. It is the machine's memory: a MemoryError, which the engines turn
    into an unknown answer (SP301, exit 1) and the command line into "out of memory"."""
    from checker.smt import jobs

    monkeypatch.setattr(jobs, "_answer_in_worker", _die)
    with pytest.raises(MemoryError, match="a solver worker process died"):
        jobs.answer_all(None, None, [1, 2], None, None, workers=2)
