"""`streamproof optimize`: the minimum makespan of a program and its overlap bound.

Public API:

* `optimize(program, timeout=30.0, progress=None, solver="auto") -> OptimizeResult`: the
  simulated makespan, the program's minimum makespan (`program`), the overlap bound (`bound`)
  and the instant lower bound (`lower`), with the schedules behind them and a report.
  `solver`: `z3`, `cpsat` (OR-Tools, the optional extra `streamproof[cpsat]`) or `auto`
  (both at once sharing bounds when OR-Tools is installed, Z3 otherwise); see `portfolio.py`.
* `OptimizeResult.to_json()`: the per-file object of `optimize --format json` (ms).
* `emit(program, result) -> str`: a spec that reaches the bound (see `checker/optimize/synthesis.py`).
* `check_makespan(program, result) -> tuple[MakespanVerdict, ...]`: `expect makespan <= D`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from checker.ir import NS_PER_MS, ExpectKind, Expectation, Op, Program, SyncKind
from checker.messages import exact_ms
from checker.optimize import core
from checker.optimize.model import (
    TimedModel, Unsupported, bound_model, program_model,
)
from checker.optimize.report import Report, classify, engine_use
from checker.optimize.schedule import Schedule, Slot, build
from checker.optimize.portfolio import SOLVERS, SolverUnavailable, engine, minimize
from checker.optimize.search import Progress, SearchResult

__all__ = [
    "optimize", "OptimizeResult", "Progress", "Schedule", "Slot", "Report", "emit", "EmitError",
    "check_makespan", "MakespanVerdict", "SOLVERS", "SolverUnavailable",
]


MAX_STATEMENTS = 4000
"""Beyond this, happens-before bitsets and conflict pairs cost too much: results fall back to
the simulation, unproven."""
PROGRAM_SHARE = 0.5
"""The share of the time the program's own minimum gets first; the bound gets the rest, and
the program then whatever the bound leaves."""
RETRY_SLACK = 0.05
"""Seconds that must be left for the program's second search to be worth starting."""


@dataclass(frozen=True, slots=True)
class OptimizeResult:
    """Everything `optimize` found about one program (times in ns; None when unknown)."""

    path: str
    simulated: int | None
    program: int | None
    bound: int | None
    lower: int
    optimal_program: bool
    optimal_bound: bool
    proven_lower_program: int
    proven_lower_bound: int
    program_schedule: Schedule | None
    bound_schedule: Schedule | None
    report: Report
    notes: tuple[str, ...]
    deadlock: bool = False
    """The program can deadlock: it has no makespan."""
    ir: Program | None = field(default=None, compare=False, repr=False)
    """The program the result is about (for renderers)."""
    solver: str = "none"
    """The engine that searched: `z3`, `cpsat`, `portfolio` (both), or `none` (no model)."""
    found_by: tuple[tuple[str, str, str], ...] = ()
    """(`program` or `bound`, what found the schedule, what proved the lower bound): `greedy`,
    `seed`, `bounds`, `z3`, `cpsat`. When optimal, the second names what proved it."""

    def to_json(self) -> dict:
        ms = lambda ns: None if ns is None else ns / NS_PER_MS  # noqa: E731
        program = self.ir
        return {
            "path": self.path,
            "makespan": {"simulated": ms(self.simulated), "program": ms(self.program),
                         "bound": ms(self.bound), "lower": ms(self.lower)},
            "optimal": {"program": self.optimal_program, "bound": self.optimal_bound},
            "proven_lower": {"program": ms(self.proven_lower_program),
                             "bound": ms(self.proven_lower_bound)},
            "schedules": {
                "program": None if self.program_schedule is None or program is None
                else self.program_schedule.to_json(program),
                "bound": None if self.bound_schedule is None or program is None
                else self.bound_schedule.to_json(program),
            },
            "report": self.report.to_json(),
            "notes": list(self.notes),
            "solver": self.solver_json(),
        }

    def solver_json(self) -> dict:
        """`{"engine": ..., "program": {"schedule_by", "lower_by", "proved_by"}, "bound": ...}`."""
        out: dict = {"engine": self.solver}
        optimal = {"program": self.optimal_program, "bound": self.optimal_bound}
        for kind, schedule_by, lower_by in self.found_by:
            out[kind] = {"schedule_by": schedule_by, "lower_by": lower_by,
                         "proved_by": lower_by if optimal.get(kind) else None}
        return out


def _restrict(source: TimedModel, times, target: TimedModel) -> tuple[int, ...] | None:
    """Carry a schedule of the program over to its relaxation (same steps, fewer of them)."""
    at = {(n.kind, n.statement): times[n.index] for n in source.nodes}
    out = []
    for node in target.nodes:
        key = (node.kind, node.statement)
        if key not in at:
            return None
        out.append(at[key])
    return tuple(out)


def optimize(program: Program, timeout: float = 30.0,
             progress: Callable[[Progress], None] | None = None,
             rlimit: int | None = None, solver: str = "auto",
             simulated: int | None = None,
             must_chain: Callable[[Program], int] | None = None,
             best_run: Callable[[Program, float], tuple[int, bool] | None] | None = None) -> OptimizeResult:
    """Minimum makespans of a program and of its overlap relaxation within `timeout` seconds.

    Never claims optimality it has not proved: on a timeout the best schedules found are
    reported with `optimal` false and the best proven lower bounds. `simulated` is the
    executor's simulated makespan of the program as written (None: unknown, or it
    deadlocks); the caller runs the simulation, since no backend imports another. `must_chain`,
    where the program has no exact model: a lower bound on every execution's makespan from
    another backend (`crosscheck.must_chain`: the must-happen-before order in time); `best_run`,
    there too: the makespan of the shortest run in time found within the seconds given, and
    whether it is the least of them (`crosscheck.best_run_in_time`). Raises
    ValueError for an unknown `solver` and SolverUnavailable for `cpsat` without OR-Tools.
    """
    return _optimize(program, timeout, progress, rlimit, engine(solver), simulated, must_chain, best_run)


def _optimize(program: Program, timeout: float, progress, rlimit, which: str,
              simulated: int | None, must_chain=None, best_run=None) -> OptimizeResult:
    start = time.monotonic()
    deadline = start + max(0.0, timeout)
    notes: list[str] = []
    if simulated is None:
        notes.append("no simulated makespan: the simulation deadlocked or was not run")
    if len(program.statements) > MAX_STATEMENTS:
        return _unsupported(program, Unsupported(
            f"{len(program.statements)} statements is more than the optimizer's limit of "
            f"{MAX_STATEMENTS}"), simulated, notes, must_chain, best_run, deadline - time.monotonic())
    exact = program_model(program)
    if isinstance(exact, Unsupported):
        return _unsupported(program, exact, simulated, notes, must_chain, best_run, deadline - time.monotonic())
    relaxed = bound_model(program, exact)
    if isinstance(relaxed, Unsupported):  # pragma: no cover - a relaxation of an acyclic model
        return _unsupported(program, relaxed, simulated, notes, must_chain)
    lower = core.lower_bound(relaxed)
    half = start + (deadline - start) * PROGRAM_SHARE
    solver = "z3" if which == "z3" else "cpsat" if which == "cpsat" else "auto"
    prog = minimize(exact, "program", half, progress, rlimit, solver=solver)
    seed = _restrict(exact, prog.times, relaxed)
    bnd = minimize(relaxed, "bound", deadline, progress, rlimit, seed_times=seed, solver=solver)
    if not prog.optimal and bnd.lower > prog.lower:
        prog = SearchResult(prog.times, prog.makespan, min(prog.makespan, bnd.lower),
                            prog.makespan <= bnd.lower, prog.reason, prog.probes,
                            prog.schedule_by, bnd.lower_by)
    if not prog.optimal and time.monotonic() < deadline - RETRY_SLACK:
        prog = minimize(exact, "program", deadline, progress, rlimit,
                        extra_lower=prog.lower, seed_times=prog.times, solver=solver,
                        extra_lower_by=prog.lower_by)
    if not prog.optimal:
        notes.append(f"program: {prog.reason}; best found {prog.makespan / NS_PER_MS:g} ms, "
                     f"proven at least {prog.lower / NS_PER_MS:g} ms")
    if not bnd.optimal:
        notes.append(f"bound: {bnd.reason}; best found {bnd.makespan / NS_PER_MS:g} ms, "
                     f"proven at least {bnd.lower / NS_PER_MS:g} ms")
    program_schedule = build(exact, prog.times, "program")
    bound_schedule = build(relaxed, bnd.times, "bound")
    if simulated is not None and simulated < prog.makespan:
        notes.append("the simulation beat the optimizer's schedule: the two disagree on timing")
    report = Report(simulated, prog.makespan, bnd.makespan, lower.reported,
                    engine_use(exact, prog.times, prog.makespan),
                    classify(exact, prog.times, prog.makespan), tuple(notes))
    result = OptimizeResult(
        program.path, simulated, prog.makespan, bnd.makespan, lower.reported,
        prog.optimal, bnd.optimal, prog.lower, bnd.lower, program_schedule, bound_schedule,
        report, tuple(notes), ir=program, solver=which,
        found_by=(("program", prog.schedule_by, prog.lower_by),
                  ("bound", bnd.schedule_by, bnd.lower_by)),
    )
    return result


def _unsupported(program: Program, why: Unsupported, simulated: int | None,
                 notes: list[str], must_chain=None, best_run=None, seconds: float = 0.0) -> OptimizeResult:
    value = None if why.deadlock else simulated
    work, chains = (0, 0) if why.deadlock else _loose_lower(program)
    if must_chain is not None and not why.deadlock and (value is None or chains < value):
        chains = max(chains, must_chain(program))
    what = "the simulated makespan"
    if best_run is not None and not why.deadlock and (value is None or max(work, chains) < value):
        found = best_run(program, seconds)  # (another order of the threads' steps at one instant)
        if found is not None and (value is None or found[0] < value):
            value = found[0]
            what = ("the makespan of the run in time that ends first (every order of what the threads "
                    "and stream heads may do at one instant tried)" if found[1]
                    else "the makespan of the shortest run in time found")
    # Bounds that need no model: where the run meets one, that minimum is the run.
    program_met = value is not None and chains >= value
    bound_met = value is not None and work >= value
    notes.append(why.reason if why.deadlock else
                 f"no exact model: {why.reason}" if value is None else  # (the simulation deadlocked: no makespan)
                 f"no exact model: {why.reason}; `program` and `bound` are {what}, "
                 + ("optimal: it meets the busiest engine's work or host thread's time" if bound_met
                    else "optimal for the program (it meets the longest chain of orders every execution "
                         "keeps) but not proven for the bound" if program_met
                    else "not proven optimal"))
    report = Report(simulated, value, value, work, (), None, tuple(notes))
    return OptimizeResult(program.path, simulated, value, value, work, program_met, bound_met, chains, work,
                          None, None, report, tuple(notes), deadlock=why.deadlock, ir=program)


def _loose_lower(program: Program) -> tuple[int, int]:
    """Lower bounds that need no model: of the overlap bound, max(busiest engine's work / its
    count, busiest host thread's own time on what the relaxation keeps); of the program, also
    the longest chain of orders every execution keeps (the relaxation drops stream order and
    synchronization, so that chain does not bound it)."""
    from checker import collectives
    from checker.optimize.model import is_running, launch_of

    # Members of one group on one device (SP059) share its units: only the holders count,
    # and only where the groups are known before anything runs.
    sharing = {c.index for c in program.comms
               if len({program.streams[m].device for m in c.members}) < len(c.members)}
    interleaved = collectives.interleaved_comms(program)
    work: dict[tuple[int, object], int] = {}
    counted = [st for st in program.statements if st.comm not in sharing or st.group is None]
    for group in program.groups:
        if group.comm in sharing and group.comm not in interleaved:
            counted += [program.statements[m] for m in collectives.unit_holders(program, group.members)]
    for st in counted:
        if is_running(st) and st.engine is not None and st.device is not None:
            work[(st.device, st.engine)] = work.get((st.device, st.engine), 0) + st.duration
    load = max((-(-w // max(1, program.devices[d].count(e))) for (d, e), w in work.items()), default=0)
    host = 0
    for thread in program.threads:
        total = 0
        for i in thread.statements:
            st = program.statements[i]
            if not st.operation.synchronizes:
                total += launch_of(program, st) + (st.duration if st.stream is None else 0)
        host = max(host, total)
    work = max(load, host)
    return work, max(work, _own_chains(program), _stream_loads(program))


def stream_work(statements) -> dict[int, int]:
    """Per stream, the time its tasks take one after another: a stream runs its tasks in
    order, whichever thread enqueued them and in whatever order the threads did; the tasks of
    one `group` batch on it are not ordered among themselves, so a batch counts its longest."""
    work: dict[int, int] = {}
    batches: dict[tuple[int, int], int] = {}
    for st in statements:
        if st.stream is None or not st.running:
            continue
        if st.batch is None:
            work[st.stream] = work.get(st.stream, 0) + st.duration
        else:
            key = (st.stream, st.batch)
            longer = max(0, st.duration - batches.get(key, 0))
            batches[key] = batches.get(key, 0) + longer
            work[st.stream] = work.get(st.stream, 0) + longer
    return work


def _stream_loads(program: Program) -> int:
    """The most time one stream's tasks take one after another (`stream_work`)."""
    return max(stream_work(program.statements).values(), default=0)


def _own_chains(program: Program) -> int:
    """The longest chain of orders that every execution keeps, whatever the threads race for:
    each thread's program order with its launch costs and host durations, a task after its
    enqueue and running its duration, the task a thread enqueued earlier on the same stream
    first (stream order holds whoever enqueues in between), and a sync or a blocking copy
    after the thread's own tasks it waits for, and a wait or `sync` on a snapshot event only
    its own thread records after that thread's latest record of it. A lower bound for programs
    the exact model cannot take (a makespan counts only executions that finish)."""
    from checker.optimize.model import launch_of

    statements = program.statements
    # Snapshot events that one thread alone records: its wait (or `sync E`) binds to the latest
    # of its own records before it, whatever the other threads do.
    recorder: dict[int, int | None] = {}
    for st in statements:
        if st.op is Op.RECORD and st.event is not None:
            recorder[st.event] = st.thread if recorder.get(st.event, st.thread) == st.thread else None
    own = {event for event, thread in recorder.items() if thread is not None and not program.events[event].flag}
    longest = 0
    for thread in program.threads:
        clock = 0
        tail: dict[int, int] = {}  # stream -> when this thread's latest task on it is done
        recorded: dict[int, int] = {}  # event of its own -> when its latest record so far is done
        for i in thread.statements:
            st = statements[i]
            if st.stream is not None:
                launch = launch_of(program, st)
                first = clock + launch
                if st.batch is None:  # (tasks of one `group` are not ordered among themselves)
                    first = max(first, tail.get(st.stream, 0))
                if st.op is Op.WAIT and st.event in own:
                    first = max(first, recorded.get(st.event, 0))
                done = first + (st.duration if st.running else 0)
                tail[st.stream] = max(tail.get(st.stream, 0), done)
                if st.op is Op.RECORD and st.event in own:
                    recorded[st.event] = done
                longest = max(longest, done)
                clock = max(clock + launch, done) if st.blocking else clock + launch
            elif st.sync is SyncKind.EVENT and st.target in own:
                clock = max(clock, recorded.get(st.target, 0))
            elif st.sync is not None and st.sync is not SyncKind.EVENT:
                clock = max([clock] + [tail.get(stream, 0) for stream in st.streams])
            elif st.op in (Op.HOST, Op.FREE):
                clock += st.duration
            longest = max(longest, clock)
    return longest


@dataclass(frozen=True, slots=True)
class MakespanVerdict:
    """`expect makespan <= D` against the program optimum: `met`, `violated` or `unknown`."""

    expectation: Expectation
    status: str
    message: str


def check_makespan(program: Program, result: OptimizeResult, scale: int = 1) -> tuple[MakespanVerdict, ...]:
    """Verdicts of the spec's `expect makespan <= D` lines (fails when the optimum exceeds D);
    the program's times are in 1/scale ns (`analyze.in_exact_time`)."""
    from fractions import Fraction

    def ms(time: int) -> str:
        return exact_ms(Fraction(time, scale))

    out = []
    for exp in program.expectations:
        if exp.kind is not ExpectKind.MAKESPAN or exp.limit is None:
            continue
        limit = ms(exp.limit)
        if result.deadlock:
            out.append(MakespanVerdict(exp, "violated", "the program can deadlock: it has no makespan"))
        elif result.program is not None and result.program <= exp.limit:
            out.append(MakespanVerdict(exp, "met",
                                       f"minimum makespan {ms(result.program)} ms <= {limit} ms"))
        elif result.optimal_program or result.proven_lower_program > exp.limit:
            best = result.program if result.optimal_program else result.proven_lower_program
            out.append(MakespanVerdict(exp, "violated",
                                       f"minimum makespan {ms(best)} ms exceeds {limit} ms"
                                       + ("" if result.optimal_program else " (proven lower bound)")))
        else:
            out.append(MakespanVerdict(exp, "unknown",
                                       f"no schedule within {limit} ms found and none ruled out "
                                       "in the time limit"))
    return tuple(out)


class EmitError(ValueError):
    """Raised by `emit` when no spec can be synthesized; its message is for the user."""


def emit(program: Program, result: OptimizeResult) -> str:
    """A spec with the same work whose minimum makespan is the overlap bound.
    Raises EmitError (a message for the user) when the program has no exact bound."""
    from checker.optimize import synthesis

    try:
        return synthesis.synthesize(program, result)
    except synthesis.EmitError as exc:
        raise EmitError(str(exc)) from None
