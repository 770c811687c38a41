"""CP-SAT and the makespan portfolio: the same optima as Z3 and brute force, valid schedules
that the executor replays, shared bounds that never keep a bad schedule, and Z3 alone when
OR-Tools is missing. No test depends on timing: deadlines are generous and only proofs count."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from checker.crosscheck import optimize_as_written as optimize
from checker.optimize import core, cpsat, portfolio
from checker.optimize.model import Unsupported, bound_model, program_model
from checker.optimize.search import _scale, minimize as z3_minimize
from checker.optimize.shared import Shared
from test_optimize import COPY_COMPUTE, brute_force, load, random_spec

needs_cpsat = pytest.mark.skipif(not cpsat.available(), reason="OR-Tools is not installed")

LONG = 120.0
"""Seconds: far more than any of these small models needs; results never depend on it."""


def models(seed: int, tasks: int):
    program = load(random_spec(seed, tasks=tasks, threads=1 + seed % 2))
    exact = program_model(program)
    assert not isinstance(exact, Unsupported), exact
    return program, exact, bound_model(program, exact)


def weak_start(model) -> Shared:
    """The greedy schedule and no lower bound: the solver has to prove everything itself."""
    g = core.graph(model)
    return Shared(model, core.greedy(model, g, budget=0.0), 0)


@needs_cpsat
@pytest.mark.parametrize("seed", range(30))
def test_cpsat_optimum_is_brute_force_and_z3(seed):
    _, exact, relaxed = models(seed, tasks=6)
    for model in (exact, relaxed):
        shared = weak_start(model)
        outcome = cpsat.Run(model, shared, _scale(model)).solve(time.monotonic() + LONG)
        assert shared.optimal, outcome
        assert core.validate(model, shared.times) is None
        best = brute_force(model)
        assert shared.span == best
        z3 = z3_minimize(model, "program", time.monotonic() + LONG)
        assert z3.optimal and z3.makespan == best
        for solver in ("cpsat", "auto"):
            result = portfolio.minimize(model, "program", time.monotonic() + LONG, solver=solver)
            assert result.optimal and result.makespan == best
            assert core.validate(model, result.times) is None


@needs_cpsat
@pytest.mark.parametrize("seed", range(12))
def test_cpsat_portfolio_and_z3_agree_beyond_brute_force(seed):
    _, exact, relaxed = models(seed, tasks=16)
    for model in (exact, relaxed):
        results = {solver: portfolio.minimize(model, "program", time.monotonic() + LONG,
                                              solver=solver)
                   for solver in ("z3", "cpsat", "auto")}
        for solver, result in results.items():
            assert result.optimal, (solver, result.reason)
            assert core.validate(model, result.times) is None
            assert max(result.times) == result.makespan
        assert len({r.makespan for r in results.values()}) == 1
        shared = weak_start(model)
        cpsat.Run(model, shared, _scale(model)).solve(time.monotonic() + LONG)
        assert shared.optimal and shared.span == results["z3"].makespan


@needs_cpsat
@pytest.mark.parametrize("seed", range(20))
def test_portfolio_schedules_replay(seed):
    from checker.crosscheck import replays

    program, exact, _ = models(seed, tasks=10)
    result = optimize(program, timeout=LONG, solver="auto")
    assert result.solver == "portfolio"
    assert result.optimal_program and result.optimal_bound
    reference = optimize(program, timeout=LONG, solver="z3")
    assert (result.program, result.bound) == (reference.program, reference.bound)
    ok, why = replays(program, result.program_schedule)
    assert ok, why
    solver = result.to_json()["solver"]
    assert solver["engine"] == "portfolio"
    for kind in ("program", "bound"):
        assert solver[kind]["schedule_by"] in ("greedy", "seed", "z3", "cpsat")
        assert solver[kind]["proved_by"] in ("bounds", "z3", "cpsat")


@needs_cpsat
def test_cpsat_is_reproducible():
    _, exact, _ = models(3, tasks=16)
    runs = []
    for _ in range(2):
        shared = weak_start(exact)
        outcome = cpsat.Run(exact, shared, _scale(exact), workers=1).solve(time.monotonic() + LONG)
        runs.append((outcome.status, shared.span, shared.lower))
    assert runs[0] == runs[1] and runs[0][0] == "OPTIMAL"


@needs_cpsat
def test_cpsat_starts_from_the_shared_bounds():
    """A proven lower bound given to CP-SAT is a constraint: with the optimum as the lower
    bound and an optimal schedule as the incumbent there is nothing left to search."""
    _, exact, _ = models(5, tasks=16)
    best = z3_minimize(exact, "program", time.monotonic() + LONG)
    assert best.optimal
    shared = Shared(exact, best.times, best.makespan, "z3", "z3")
    outcome = cpsat.Run(exact, shared, _scale(exact)).solve(time.monotonic() + LONG)
    assert outcome.status == "SKIPPED" and shared.times_by == "z3"


def _needs_search(tasks: int = 16):
    """A model the Z3 search proves by itself (the instant bounds do not settle it)."""
    for seed in range(40):
        _, exact, _ = models(seed, tasks=tasks)
        result = z3_minimize(exact, "program", time.monotonic() + LONG)
        if result.optimal and result.reason == "proved by z3":
            return exact, result
    pytest.skip("no random spec needs the solvers")  # pragma: no cover


@needs_cpsat
@pytest.mark.parametrize("fork", [True, False])
def test_portfolio_takes_z3s_proof_when_cpsat_finds_nothing(monkeypatch, fork):
    exact, alone = _needs_search()

    def idle(self, deadline):
        while not self._stopped and time.monotonic() < deadline:
            time.sleep(0.005)
        return "UNKNOWN", "stopped"

    monkeypatch.setattr(cpsat.Run, "_solve", idle)
    monkeypatch.setattr(portfolio, "FORK", fork)
    result = portfolio.minimize(exact, "program", time.monotonic() + LONG, solver="auto")
    assert result.optimal and result.makespan == alone.makespan
    assert result.lower_by == "z3" and result.schedule_by in ("greedy", "z3")
    assert core.validate(exact, result.times) is None


@needs_cpsat
@pytest.mark.parametrize("fork", [True, False])
def test_portfolio_takes_cpsats_proof_when_z3_finds_nothing(monkeypatch, fork):
    from checker.optimize import search
    from checker.optimize.search import result_of

    exact, alone = _needs_search()

    def idle(self):
        while not self.stopped and self.remaining() > 0:
            time.sleep(0.005)
        return result_of(self.shared, "timeout")

    monkeypatch.setattr(search.Z3Search, "run", idle)
    monkeypatch.setattr(portfolio, "FORK", fork)
    result = portfolio.minimize(exact, "program", time.monotonic() + LONG, solver="auto")
    assert result.optimal and result.makespan == alone.makespan
    assert result.lower_by == "cpsat" and result.schedule_by in ("greedy", "cpsat")


@needs_cpsat
@pytest.mark.parametrize("fork", [True, False])
def test_portfolio_survives_a_broken_ortools(monkeypatch, fork):
    exact, alone = _needs_search()

    def broken(self, deadline):
        raise ImportError("libortools.so: cannot open shared object file")

    monkeypatch.setattr(cpsat.Run, "_solve", broken)
    monkeypatch.setattr(portfolio, "FORK", fork)
    result = portfolio.minimize(exact, "program", time.monotonic() + LONG, solver="auto")
    assert result.optimal and result.makespan == alone.makespan and result.lower_by == "z3"


@needs_cpsat
@pytest.mark.parametrize("seed", range(8))
def test_portfolio_in_threads_agrees(monkeypatch, seed):
    """Where no process can be forked, Z3 runs in a thread: the same optima."""
    monkeypatch.setattr(portfolio, "FORK", False)
    _, exact, relaxed = models(seed, tasks=16)
    for model in (exact, relaxed):
        result = portfolio.minimize(model, "program", time.monotonic() + LONG, solver="auto")
        reference = z3_minimize(model, "program", time.monotonic() + LONG)
        assert result.optimal and reference.optimal and result.makespan == reference.makespan
        assert core.validate(model, result.times) is None


def test_an_invalid_schedule_is_never_kept():
    _, exact, _ = models(4, tasks=8)
    shared = weak_start(exact)
    times, span = shared.times, shared.span
    heard = []
    shared.listen(lambda: heard.append(shared.span))
    bad = tuple(0 for _ in times)  # everything at once: breaks every edge with a weight
    assert core.validate(exact, bad) is not None
    assert not shared.offer(bad, "cpsat")
    assert shared.rejected == 1 and shared.times == times and shared.span == span
    assert heard == []
    assert not shared.prove(-1, "z3") and shared.lower == 0


def test_bounds_meet():
    program, exact, _ = models(2, tasks=6)
    best = brute_force(exact)
    shared = weak_start(exact)
    assert shared.prove(best, "z3")
    if shared.span == best:
        assert shared.done.is_set() and shared.proved_by == "z3"
    else:
        assert not shared.done.is_set() and shared.proved_by is None


def test_unknown_solver_is_an_error():
    with pytest.raises(ValueError):
        portfolio.engine("gurobi")


@pytest.fixture
def no_ortools(monkeypatch):
    """OR-Tools hidden: every `import ortools...` fails as if it were not installed."""
    for name in list(sys.modules):
        if name == "ortools" or name.startswith("ortools."):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "ortools", None)
    assert not cpsat.available()


def test_z3_alone_without_ortools(no_ortools):
    assert portfolio.engine("auto") == "z3"
    with pytest.raises(portfolio.SolverUnavailable):
        portfolio.engine("cpsat")
    program = load(COPY_COMPUTE)
    result = optimize(program, timeout=LONG)
    assert result.solver == "z3"
    assert result.program == 11_700_000 and result.optimal_program
    for seed in range(6):
        program, exact, _ = models(seed, tasks=6)
        result = optimize(program, timeout=LONG)
        assert result.solver == "z3" and result.optimal_program
        assert result.program == brute_force(exact)
        model = exact
        found = portfolio.minimize(model, "program", time.monotonic() + LONG)
        assert found.optimal and found.makespan == result.program


def test_cli_solver_option(run, tmp_path):
    spec = tmp_path / "copy.sched"
    spec.write_text(COPY_COMPUTE)
    status, out, _ = run("optimize", "--format", "json", "--solver", "z3", spec)
    data = json.loads(out)["files"][0]
    assert data["solver"]["engine"] == "z3"
    assert data["makespan"]["program"] == 11.7 and data["optimal"]["program"]
    if cpsat.available():
        status, out, _ = run("optimize", "--format", "json", "--solver", "cpsat", spec)
        assert json.loads(out)["files"][0]["solver"]["engine"] == "cpsat"


def test_cli_cpsat_without_ortools_is_an_error(run, tmp_path, no_ortools):
    spec = tmp_path / "copy.sched"
    spec.write_text(COPY_COMPUTE)
    status, out, err = run("optimize", "--solver", "cpsat", spec)
    assert status != 0 and "OR-Tools" in err
    status, out, _ = run("optimize", "--format", "json", spec)
    assert json.loads(out)["files"][0]["solver"]["engine"] == "z3"


@needs_cpsat
def test_the_z3_child_stops_quietly_under_the_command_line_s_sigterm_handler(capfd):
    """The parent stops the forked Z3 search with SIGTERM once CP-SAT or the bounds settle a
    phase; the child must not run the command line's handler (which raises) and print a
    traceback on a clean run."""
    import signal

    from checker.cli import _on_sigterm
    from checker.frontend import load_file

    program = load_file(Path(__file__).resolve().parent.parent / "bench" / "data" / "opt_100_0.sched").program
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        optimize(program, timeout=5.0, solver="auto")
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert "Traceback" not in capfd.readouterr().err


@needs_cpsat
@pytest.mark.skipif(not sys.platform.startswith("linux") or not __import__("shutil").which("pgrep"),
                    reason="reads /proc, lists children with pgrep")
@pytest.mark.parametrize("solver, sig, status", [("auto", "SIGINT", 130), ("cpsat", "SIGINT", 130),
                                                 ("z3", "SIGINT", 130), ("auto", "SIGTERM", 143)])
def test_an_interrupted_optimize_stops_at_once_and_leaves_no_process(solver, sig, status):
    """^C or a cancelled job during the search: the solvers' own SIGINT handlers (CP-SAT's,
    Z3's) would stop only the search (or abort the process), and the forked Z3 search must go
    with the command."""
    import os
    import signal
    import subprocess

    spec = Path(__file__).resolve().parent.parent / "bench" / "data" / "opt_500_1.sched"
    process = subprocess.Popen([sys.executable, "-m", "checker", "optimize", "--solver", solver, "--timeout", "60",
                                str(spec)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    children: list[str] = []
    for _ in range(30):  # (until the search runs: the portfolio's forked Z3 search, or 3 s)
        time.sleep(0.1)
        children = subprocess.run(["pgrep", "-P", str(process.pid)], capture_output=True, text=True).stdout.split()
        if children:
            break
    time.sleep(1)
    sent = time.monotonic()
    process.send_signal(getattr(signal, sig))
    _, err = process.communicate(timeout=30)
    assert process.returncode == status, err
    assert time.monotonic() - sent < 10 and "Traceback" not in err and "terminate called" not in err
    time.sleep(1)
    assert [c for c in children if os.path.exists(f"/proc/{c}") and
            "checker" in Path(f"/proc/{c}/cmdline").read_text(errors="replace")] == []
