"""Process-level resource helpers shared by every stage (no stage imports another for these)."""

from __future__ import annotations

import gc
import os
import sys
import threading
from contextlib import contextmanager


@contextmanager
def paused_gc():
    """Lowering and the order builders allocate hundreds of thousands of long-lived objects
    and no cycles; the cyclic collector would rescan them again and again (a third of the
    time on 100,000 tasks)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@contextmanager
def deep_recursion(limit: int = 10_000):
    """Room for the front end's recursive walks of a spec nested as deep as the parser allows
    (200 brackets, a few frames per level): Python's default of 1,000 frames ran out at 199
    nested `if`s or `choose`s. Python calls do not use the C stack since 3.11."""
    before = sys.getrecursionlimit()
    sys.setrecursionlimit(max(before, limit))
    try:
        yield
    finally:
        sys.setrecursionlimit(before)


SOLVER_LOCK = threading.RLock()
"""Held while a spec is checked or optimized: Z3's default context is one per process and
not thread-safe, so checks from several threads (Dask workers, the Python API) take turns;
`check -j N` runs processes, each with its own."""

def worker_context():
    """How worker processes start: forked when this process runs no other thread (cheap:
    nothing to import again), else fresh interpreters (forking a threaded process can deadlock
    the child). `STREAMPROOF_START_METHOD` overrides it."""
    import multiprocessing

    methods = multiprocessing.get_all_start_methods()
    wanted = os.environ.get("STREAMPROOF_START_METHOD")
    if wanted in methods:
        return multiprocessing.get_context(wanted)
    if sys.platform == "linux" and "fork" in methods and threading.active_count() == 1:
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")


def _worker_start() -> None:
    """A forked worker dies of SIGTERM, as processes do by default: the handler it inherits
    (`checker.cli`'s, which stops the workers and the command) is the parent's."""
    import signal

    signal.signal(signal.SIGTERM, signal.SIG_DFL)


@contextmanager
def process_pool(workers: int, context):
    """A process pool of `workers` started by `context` (`worker_context`). Left normally, it
    waits for its workers; left by an exception (an interrupt, a failed job), it stops them at
    once instead of after their current jobs."""
    from concurrent.futures import ProcessPoolExecutor

    executor = ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=_worker_start)
    try:
        yield executor
    except BaseException:
        for process in list((getattr(executor, "_processes", None) or {}).values()):
            process.terminate()
        executor.shutdown(wait=False, cancel_futures=True)
        raise
    executor.shutdown(wait=True)


class TooLarge(ValueError):
    """A file longer than a reader accepts (`read_at_most`)."""


WRITER_WAIT_SECONDS = 10
"""How long a named pipe given as an input may stay without a writer before it is refused."""


def read_prefix(path: str | os.PathLike, limit: int) -> bytes:
    """At most `limit` + 1 bytes of a file (one more than a reader accepts, to notice a longer
    one). A named pipe that no program has opened for writing within WRITER_WAIT_SECONDS is an
    OSError, not a wait forever; one that a program writes to (`<(generate)`) is read as a file."""
    import errno
    import select
    import stat

    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # (a plain open of a pipe waits for a writer)
    with os.fdopen(descriptor, "rb") as file:
        if stat.S_ISFIFO(os.fstat(descriptor).st_mode):
            poller = select.poll()
            poller.register(descriptor, select.POLLIN)
            waited = 0
            while True:
                try:
                    first = os.read(descriptor, 1 << 16)
                except BlockingIOError:  # (a writer is there, with nothing written yet)
                    first = None
                if first or first is None:
                    break
                if waited >= WRITER_WAIT_SECONDS * 1000:  # (EOF again and again: no writer)
                    raise OSError(errno.ETIMEDOUT, f"a named pipe that nothing wrote to in {WRITER_WAIT_SECONDS} s")
                poller.poll(200)
                waited += 200
            os.set_blocking(descriptor, True)
            first = first or b""
            return first + file.read(max(0, limit + 1 - len(first)))
        os.set_blocking(descriptor, True)
        return file.read(limit + 1)


def read_at_most(path: str, limit: int) -> bytes:
    """A file's bytes, refusing one longer than `limit` (a device such as /dev/zero, or a
    gzip file, has no size to check first), so no input can fill the memory."""
    data = read_prefix(path, limit)
    if len(data) > limit:
        raise TooLarge(f"{path} is larger than {limit >> 20:,} MiB")
    return gunzip_at_most(data, path, limit)


def read_stdin_at_most(limit: int, name: str) -> bytes:
    """Standard input's bytes as `read_at_most` reads a file (`name` says whose in messages)."""
    stream = getattr(sys.stdin, "buffer", None) or sys.stdin
    data = stream.read(limit + 1)
    if isinstance(data, str):  # (a text stream without a buffer, as tests give)
        data = data.encode("utf-8", "surrogateescape")
    if len(data) > limit:
        raise TooLarge(f"{name} holds more than {limit >> 20:,} MiB")
    return gunzip_at_most(data, name, limit)


def gunzip_at_most(data: bytes, name: str, limit: int) -> bytes:
    """`data` decompressed when it is gzip (else as it is), refusing more than `limit` bytes
    (`name` says whose in the message): for what `read_at_most` read, and for standard input."""
    if data[:2] == b"\x1f\x8b":  # (from memory: a pipe cannot seek back)
        import gzip
        import io

        with gzip.GzipFile(fileobj=io.BytesIO(data)) as unzipped:
            data = unzipped.read(limit + 1)
        if len(data) > limit:
            raise TooLarge(f"{name} holds more than {limit >> 20:,} MiB once decompressed")
    return data
