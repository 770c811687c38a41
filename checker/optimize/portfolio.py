"""The makespan portfolio: Z3 and CP-SAT on the same timed model at once, sharing bounds.

`minimize(model, ..., solver=...)` picks the engine:

* `z3`: the Z3 search alone (`search.py`);
* `cpsat`: CP-SAT alone (`cpsat.py`; needs OR-Tools, the extra `streamproof[cpsat]`);
* `auto`: both at once when OR-Tools is installed (`portfolio`), Z3 alone otherwise.

Both start from the same bounds (the best instant lower bound, a greedy list schedule) in a
`Shared` (`shared.py`). A schedule either finds is validated and kept if it is better: Z3 takes
it as its upper bound before its next probe, and a probe it made moot is interrupted; CP-SAT,
which cannot take a new bound mid-search, restarts from it when it beats everything CP-SAT
found. A lower bound either proves is the other's as well. When the best schedule meets the
best lower bound, both stop. The result says what found the schedule and what proved the bound.

Two cores, measured (bench/bench_optimize.py): CP-SAT searches with two workers, one per core,
and proves what Z3 proves, mostly sooner. So on Linux Z3 runs in a forked child process at a
lower priority (`Z3_NICE`): it takes the cores whenever CP-SAT leaves one (OR-Tools' import,
model building, presolve), and costs CP-SAT little when both of its workers are busy. A thread
at a lower priority would not do: it holds the GIL while descheduled and stalls CP-SAT's
callbacks. Bounds cross between the processes by two pipes. Elsewhere (no `fork`), Z3 runs in
a thread, started once CP-SAT has built its model.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Callable

from checker.optimize import core, cpsat
from checker.optimize.model import TimedModel
from checker.optimize.search import (
    Progress, SearchResult, Z3Search, _scale, initial, result_of,
)
from checker.optimize.shared import Shared

SOLVERS = ("auto", "z3", "cpsat")
"""What `--solver` accepts."""
FORK = True
"""Run Z3 in a forked child process (Linux); False: in a thread of this process."""
Z3_NICE = 10
"""Niceness added to the Z3 child: CP-SAT's two workers keep both cores while they search."""
FORK_WAIT = 2.0
"""Seconds the Z3 child waits, at most, for CP-SAT to build its model before it is forked."""
HEAD_START = 0.1
"""Seconds CP-SAT searches alone before the Z3 child is forked (forking costs about 40 ms)."""


class SolverUnavailable(RuntimeError):
    """`cpsat` was asked for but OR-Tools cannot be imported."""


def engine(solver: str = "auto") -> str:
    """What `solver` runs here: `z3`, `cpsat` or `portfolio` (both)."""
    if solver not in SOLVERS:
        raise ValueError(f"unknown solver {solver!r} (one of {', '.join(SOLVERS)})")
    if solver == "z3":
        return "z3"
    if cpsat.available():
        return "portfolio" if solver == "auto" else "cpsat"
    if solver == "cpsat":
        raise SolverUnavailable("the cpsat solver needs OR-Tools: pip install 'streamproof[cpsat]'")
    return "z3"


def minimize(model: TimedModel, phase: str, deadline: float,
             progress: Callable[[Progress], None] | None = None,
             rlimit: int | None = None, extra_lower: int = 0,
             seed_times: tuple[int, ...] | None = None, solver: str = "auto",
             extra_lower_by: str = "bounds", workers: int | None = None) -> SearchResult:
    """The minimum makespan of `model`, or the best schedule found and the best lower bound
    proven by `deadline`, with the engine `solver` names (see `engine`)."""
    which = engine(solver)
    g = core.graph(model)
    shared = initial(model, g, deadline, extra_lower, seed_times, extra_lower_by)
    if which == "z3":
        search = Z3Search(model, phase, deadline, progress, rlimit, shared, g)
        return _stoppable(search.run, search.stop)
    tell = _teller(shared, phase, progress)
    tell()
    if shared.optimal:
        return result_of(shared, "bounds met")
    unit = _scale(model)
    run = cpsat.Run(model, shared, unit, workers=workers or cpsat.WORKERS, g=g)
    if which == "cpsat":
        shared.listen(tell)
        try:
            outcome = _stoppable(lambda: run.solve(deadline), run.stop)
        finally:
            shared.unlisten(tell)
        return result_of(shared, outcome.reason)
    return _portfolio(model, phase, deadline, progress, rlimit, shared, g, run, tell)


def _stoppable(work: Callable[[], object], stop: Callable[[], None]):
    """`work()` in a thread while this one waits, so that a ^C or a SIGTERM (which Python
    delivers to this thread alone, between bytecodes, never inside a solver's call) acts at
    once: on ^C `stop` ends the search and the interrupt goes on up; SIGTERM's handler
    (`checker.cli`) exits the process from here."""
    done: dict[str, object] = {}

    def run() -> None:
        try:
            done["value"] = work()
        except BaseException as exc:  # raised here, in the thread the caller waits in
            done["error"] = exc

    thread = threading.Thread(target=run, name="streamproof-search", daemon=True)
    thread.start()
    try:
        while thread.is_alive():
            thread.join(0.1)
    finally:
        if thread.is_alive():
            stop()
            thread.join()
    if "error" in done:
        raise done["error"]
    return done["value"]


def _teller(shared, phase: str, progress) -> Callable[[], None]:
    lock = threading.Lock()

    def tell() -> None:
        if progress is None:
            return
        _, span, lower = shared.snapshot()
        with lock:
            progress(Progress(phase, span, min(lower, span)))

    return tell


def _portfolio(model, phase, deadline, progress, rlimit, shared, g, run, tell) -> SearchResult:
    """CP-SAT in a thread of this process, Z3 in a child process (threads where processes
    cannot be forked); this thread watches both and stops them when the bounds meet or time
    is up."""
    if _forkable():
        return _with_process(model, phase, deadline, rlimit, shared, g, run, tell)
    return _with_thread(model, phase, deadline, rlimit, shared, g, run, tell)


def _forkable() -> bool:
    import multiprocessing
    import sys

    return (FORK and sys.platform.startswith("linux")
            and "fork" in multiprocessing.get_all_start_methods()
            and not multiprocessing.current_process().daemon)  # daemons may not have children


def _reasons(z3_reason: str | None, outcome, failures: dict[str, BaseException]) -> str:
    reasons = []
    if z3_reason is not None:
        reasons.append(z3_reason)
    if isinstance(outcome, cpsat.Outcome):
        reasons.append(outcome.reason)
    for name, exc in failures.items():
        reasons.append(f"{name} failed ({type(exc).__name__}: {exc})")
    given_up = [why for why in reasons
                if why not in ("timeout", "stopped", "bounds met") and not why.startswith("proved")]
    return "timeout" + (f" ({'; '.join(given_up)})" if given_up else "")


def _start_cpsat(run, deadline, outcomes, failures, wake=None) -> threading.Thread:
    def work() -> None:
        try:
            outcomes["cpsat"] = run.solve(deadline)
        except BaseException as exc:  # reported with the result; Z3's result stands
            failures["cpsat"] = exc
        finally:
            if wake is not None:
                wake.set()

    thread = threading.Thread(target=work, name="streamproof-cpsat", daemon=True)
    thread.start()
    return thread


def _with_process(model, phase, deadline, rlimit, shared, g, run, tell) -> SearchResult:
    """Z3 in a forked child: no GIL shared with CP-SAT's callbacks, and a lower priority
    (`Z3_NICE`) so that CP-SAT's workers keep the cores while Z3 takes what they leave.
    Bounds cross two pipes: the child sends what Z3 finds; a sender thread here passes on the
    latest bounds (never blocking CP-SAT's callbacks) and the order to stop."""
    import multiprocessing
    import warnings

    outcomes: dict[str, object] = {}
    failures: dict[str, BaseException] = {}
    wake = threading.Event()
    mail = threading.Condition()
    state = {"dirty": False, "stop": False, "sent": None}
    ctx = multiprocessing.get_context("fork")
    to_child_r, to_child_w = ctx.Pipe(duplex=False)
    from_child_r, from_child_w = ctx.Pipe(duplex=False)

    def news() -> None:
        if shared.done.is_set():
            run.stop()
            wake.set()
        with mail:
            state["dirty"] = True
            mail.notify()
        tell()

    def sender() -> None:
        while True:
            with mail:
                while not state["dirty"] and not state["stop"]:
                    mail.wait()
                state["dirty"] = False
                stop = state["stop"]
            times, span, low = shared.snapshot()
            sent_span, sent_low = state["sent"]
            message = None
            if span < sent_span and shared.times_by != "z3":
                message = ("bounds", times, shared.times_by, low, shared.lower_by)
            elif low > sent_low and shared.lower_by != "z3":
                message = ("bounds", None, None, low, shared.lower_by)
            state["sent"] = (min(span, sent_span), max(low, sent_low))
            try:
                if message is not None:
                    to_child_w.send(message)
                if stop:
                    to_child_w.send(("stop",))
                    return
            except (OSError, ValueError):  # the child is gone
                return

    def reader() -> None:
        try:
            read()
        finally:
            wake.set()

    def read() -> None:
        while True:
            try:
                message = from_child_r.recv()
            except (EOFError, OSError):
                return
            if message[0] == "offer":
                shared.offer(message[1], "z3")
            elif message[0] == "prove":
                shared.prove(message[1], "z3")
            elif message[0] == "result":
                outcomes["z3"] = message[1]
                return
            elif message[0] == "failed":
                failures["z3"] = RuntimeError(message[1])
                return

    def stop_child() -> None:
        with mail:
            state["stop"] = True
            mail.notify()

    shared.listen(news)
    cp = _start_cpsat(run, deadline, outcomes, failures, wake)
    # Fork once CP-SAT has built its model (the Python objects that building touches would
    # otherwise be copied page by page after the fork) and searched for HEAD_START seconds:
    # what it settles that soon needs no second process.
    run.searching.wait(max(0.0, min(FORK_WAIT, deadline - time.monotonic())))
    wake.wait(max(0.0, min(HEAD_START, deadline - time.monotonic())))
    child = None
    if not shared.done.is_set() and time.monotonic() < deadline - 0.01:
        times, span, lower = shared.snapshot()
        state["sent"] = (span, lower)
        start = (times, shared.times_by, lower, shared.lower_by)
        child = ctx.Process(target=_z3_child, name="streamproof-z3", daemon=True,
                            args=(model, phase, deadline, rlimit, g, start, to_child_r,
                                  from_child_w, Z3_NICE))
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads alive
                child.start()
        except (OSError, AssertionError) as exc:  # no process to be had: CP-SAT alone
            failures["z3"] = exc
            child = None
    to_child_r.close()
    from_child_w.close()
    threads = [threading.Thread(target=sender, name="streamproof-z3-send", daemon=True),
               threading.Thread(target=reader, name="streamproof-z3-read", daemon=True)]
    if child is not None:
        for thread in threads:
            thread.start()
    interrupted = False
    try:
        while True:
            wake.clear()  # before looking: a wake-up from now on ends the wait below at once
            if shared.done.is_set() or not (cp.is_alive() or threads[1].is_alive()):
                break
            if time.monotonic() > deadline + 0.5:
                break
            wake.wait(0.25)
    except BaseException:  # (^C, SIGTERM: stop both at once, wait for no reason, leave no child)
        interrupted = True
        raise
    finally:
        shared.unlisten(news)
        run.stop()
        stop_child()
        cp.join()
        stopped = False
        if child is not None:
            if not shared.done.is_set() and not interrupted:  # Z3's reason is wanted: it stops at its deadline
                threads[1].join(max(0.0, deadline + 0.5 - time.monotonic()))
            # what Z3 found is in the Shared already: do not wait for it to wind down
            stopped = child.is_alive()
            if stopped:
                child.terminate()
                if interrupted:
                    child.join(1.0)
                else:
                    threading.Thread(target=child.join, name="streamproof-z3-reap", daemon=True).start()
            else:
                child.join()
            for thread in threads:
                thread.join(1.0)
        to_child_w.close()
        from_child_r.close()
    z3_reason = outcomes.get("z3")
    if (child is not None and z3_reason is None and "z3" not in failures and not stopped
            and child.exitcode):
        failures["z3"] = RuntimeError(f"the Z3 process ended with exit code {child.exitcode}")
    return result_of(shared, _reasons(z3_reason if isinstance(z3_reason, str) else None,
                                      outcomes.get("cpsat"), failures))


def _z3_child(model, phase, deadline, rlimit, g, start, inbox, outbox, nice) -> None:
    """The Z3 search in the child process, against a `Shared` of its own that the parent's
    bounds update (and which Z3's news leave by the outbox)."""
    import signal

    import z3

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles ^C and stops us
    z3.set_param("ctrl_c", False)  # (and Z3 must not take it either, for its own handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # (how it stops us: not the command line's handler, forked)
    if nice:
        try:
            os.nice(nice)
        except OSError:
            pass
    times, times_by, lower, lower_by = start
    local = Shared(model, times, lower, times_by, lower_by)
    search = Z3Search(model, phase, deadline, None, rlimit, local, g)
    lock = threading.Lock()
    sent = [local.span, local.lower]

    def forward() -> None:
        with lock:
            times, span, low = local.snapshot()
            try:
                if span < sent[0] and local.times_by == "z3":
                    sent[0] = span
                    outbox.send(("offer", times))
                if low > sent[1] and local.lower_by == "z3":
                    sent[1] = low
                    outbox.send(("prove", low))
            except (OSError, ValueError):  # the parent is gone
                search.stop()

    def read() -> None:
        while True:
            try:
                message = inbox.recv()
            except (EOFError, OSError):
                search.stop()
                return
            if message[0] == "stop":
                search.stop()
                return
            _, times, times_by, low, low_by = message
            if times is not None:
                local.offer(times, times_by)
            local.prove(low, low_by)

    local.listen(forward)
    local.listen(search.nudge)
    threading.Thread(target=read, daemon=True).start()
    try:
        result = search.run()
        forward()
        outbox.send(("result", result.reason))
    except Exception as exc:  # reported by the parent; CP-SAT's result stands
        try:
            outbox.send(("failed", f"{type(exc).__name__}: {exc}"))
        except (OSError, ValueError):
            pass


def _with_thread(model, phase, deadline, rlimit, shared, g, run, tell) -> SearchResult:
    """Z3 in a thread of this process (where no child process can be forked)."""
    search = Z3Search(model, phase, deadline, None, rlimit, shared, g)
    outcomes: dict[str, object] = {}
    failures: dict[str, BaseException] = {}

    def z3_work() -> None:
        # building a model is Python work that holds the GIL: let CP-SAT build first
        run.searching.wait(max(0.0, min(2.0, deadline - time.monotonic())))
        try:
            outcomes["z3"] = search.run()
        except BaseException as exc:  # reported with the result; CP-SAT's result stands
            failures["z3"] = exc

    def news() -> None:
        search.nudge()
        if shared.done.is_set():
            run.stop()
        tell()

    shared.listen(news)
    z3_thread = threading.Thread(target=z3_work, name="streamproof-z3", daemon=True)
    cp = _start_cpsat(run, deadline, outcomes, failures)
    z3_thread.start()
    try:
        while cp.is_alive() or z3_thread.is_alive():
            cp.join(0.05)
            search.nudge()  # a probe may have started just after the news that made it moot
            if shared.done.is_set() or time.monotonic() > deadline + 0.5:
                run.stop()
                search.stop()
    finally:
        shared.unlisten(news)
        run.stop()
        search.stop()
        cp.join()
        z3_thread.join()
    if len(failures) == 2:
        raise failures["z3"]
    z3 = outcomes.get("z3")
    return result_of(shared, _reasons(z3.reason if isinstance(z3, SearchResult) and not z3.optimal
                                      else None, outcomes.get("cpsat"), failures), search.probes)
