"""Checking many specs at once: in this process, in a pool of worker processes (`-j N`), or on
a Dask distributed cluster (`--cluster ADDRESS`, the optional extra `streamproof[cluster]`).

Whatever runs the work, `check_all` returns one `FileReport` per source in input order, the
same reports as checking them one by one here: every worker runs the same `check_one`, which
checks each spec as a fresh process would (the solver's state is not carried from one spec to
the next).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, replace
from typing import Callable, Sequence

from checker.analyze import Options, ProgressCallback, check_loaded
from checker.errors import ClusterError
from checker.findings import FileReport
from checker.inputs import Source, load
from checker.resources import SOLVER_LOCK, process_pool, worker_context


@dataclass(frozen=True, slots=True)
class FileEvent:
    """Progress of a whole run: a file started (`report` None) or finished."""

    index: int
    path: str
    report: FileReport | None = None


FileCallback = Callable[[FileEvent], None]


def default_jobs() -> int:
    """Every core this process may use."""
    if hasattr(os, "process_cpu_count"):  # Python >= 3.13
        return max(1, os.process_cpu_count() or 1)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)




def _fresh_solver_state() -> None:
    """Drop Z3's global context, so that a spec's answers (which model, which witness) do not
    depend on the specs this process checked before it: a worker checks a different subset
    of the files than `-j 1` does, and must give the same reports."""
    z3 = sys.modules.get("z3")
    module = getattr(z3, "z3", None)
    if module is not None and hasattr(module, "_main_ctx"):
        module._main_ctx = None


def check_one(source: Source, options: Options, max_statements: int | None = None,
              progress: ProgressCallback | None = None) -> FileReport:
    """Load and check one source (what every worker runs), as a fresh process would."""
    with SOLVER_LOCK:  # (Z3 is not thread-safe: one spec at a time per process)
        _fresh_solver_state()
        return check_loaded(load(source, max_statements), options, progress)


def check_all(sources: Sequence[Source], options: Options, *, max_statements: int | None = None,
              jobs: int = 1, cluster: str | None = None, on_file: FileCallback | None = None,
              progress: ProgressCallback | None = None) -> list[FileReport]:
    """Reports of `sources` in their order.

    `jobs` worker processes check files side by side; one spec alone gets them for its own
    solver questions (`Options.workers`). `cluster` sends the files to a Dask scheduler
    instead. `on_file` hears of each file started and finished; `progress` hears the analysis
    of each spec, but only of specs checked in this process.
    """
    sources = list(sources)
    if cluster:
        return _on_cluster(sources, options, max_statements, cluster, on_file)
    jobs = max(1, jobs)
    if jobs == 1 or len(sources) <= 1:
        inner = replace(options, workers=max(options.workers, jobs)) if len(sources) == 1 else options
        return _here(sources, inner, max_statements, on_file, progress)
    return _in_pool(sources, options, max_statements, min(jobs, len(sources)), on_file)


def _tell(on_file: FileCallback | None, index: int, path: str, report: FileReport | None = None) -> None:
    if on_file is not None:
        on_file(FileEvent(index, path, report))


def _here(sources, options, max_statements, on_file, progress) -> list[FileReport]:
    reports = []
    for index, source in enumerate(sources):
        _tell(on_file, index, source.path)
        report = check_one(source, options, max_statements, progress)
        reports.append(report)
        _tell(on_file, index, source.path, report)
    return reports


def _import_engines() -> None:
    """Load the engines before forking: the workers then start with them instead of each
    importing them again (the analysis imports them lazily)."""
    import importlib

    for name in ("checker.smt", "checker.executor.replay", "checker.executor.explore", "checker.optimize"):
        try:
            importlib.import_module(name)
        except ImportError:  # pragma: no cover - an engine this installation lacks is loaded where used
            pass


def _in_pool(sources, options, max_statements, jobs, on_file) -> list[FileReport]:
    from concurrent.futures import FIRST_COMPLETED, wait
    from concurrent.futures.process import BrokenProcessPool

    context = worker_context()
    if context.get_start_method() == "fork":
        _import_engines()
    reports: list[FileReport | None] = [None] * len(sources)
    # An interrupt, or a failed spec, stops the workers now, not after their specs.
    with process_pool(jobs, context) as executor:
        pending = {}
        for index, source in enumerate(sources):
            pending[executor.submit(check_one, source, options, max_statements)] = index
        for index in range(min(jobs, len(sources))):
            _tell(on_file, index, sources[index].path)
        started = min(jobs, len(sources))
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in sorted(done, key=pending.get):
                index = pending.pop(future)
                try:
                    reports[index] = future.result()
                except BrokenProcessPool:
                    raise MemoryError("a worker process died while checking " + sources[index].path) from None
                _tell(on_file, index, sources[index].path, reports[index])
                if started < len(sources):
                    _tell(on_file, started, sources[started].path)
                    started += 1
    return reports  # type: ignore[return-value]


CONNECT_SECONDS = 5.0


def _reachable(address: str) -> None:
    """Fail fast, before Dask: a client that cannot connect takes 10 s to fail and 20 s more
    to close, and prints a traceback while it does."""
    import socket

    from distributed.comm.addressing import parse_address, parse_host_port

    try:
        scheme, location = parse_address(address)
        if scheme not in ("tcp", "tls"):
            return  # (inproc, ucx, ...: left to Dask)
        host, port = parse_host_port(location)
    except (ValueError, TypeError) as exc:
        raise ClusterError(f"{address!r} is not a scheduler address ({exc}): write e.g. tcp://host:8786") from None
    try:
        socket.create_connection((host, port), timeout=CONNECT_SECONDS).close()
    except OSError as exc:
        raise ClusterError(f"cannot reach the Dask scheduler at {address}: {exc.strerror or exc}") from None


def _on_cluster(sources, options, max_statements, address, on_file) -> list[FileReport]:
    try:
        from distributed import Client, as_completed
    except ImportError:
        raise ClusterError("--cluster needs Dask distributed: pip install 'streamproof[cluster]'") from None
    _reachable(address)

    class _Client(Client):
        def __del__(self) -> None:
            """A client whose connection failed is not closed again at collection: that
            waits 20 s for a scheduler that never answered, and prints a traceback."""

    try:
        client = _Client(address, timeout="10s", set_as_default=False)
    except Exception as exc:  # unreachable, refused, or not an address at all
        why = str(exc) if isinstance(exc, OSError) else "no Dask scheduler answered there"  # (timeouts too)
        raise ClusterError(f"cannot reach the Dask scheduler at {address}: {why}") from None
    try:
        futures = [client.submit(check_one, source, options, max_statements, pure=False) for source in sources]
        index_of = {future.key: index for index, future in enumerate(futures)}
        reports: list[FileReport | None] = [None] * len(sources)
        for index, source in enumerate(sources):
            _tell(on_file, index, source.path)
        for future in as_completed(futures, loop=client.loop):
            index = index_of[future.key]
            try:
                reports[index] = future.result()
            except ImportError as exc:
                raise ClusterError(f"the Dask workers cannot run streamproof ({exc}): install the same "
                                   "streamproof on every worker") from None
            _tell(on_file, index, sources[index].path, reports[index])
        return reports  # type: ignore[return-value]
    finally:
        client.close()
