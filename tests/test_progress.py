"""Progress: what the analysis tells a display, the display itself (on a terminal only, never
with --quiet), and repeated unknown answers about one pair folded into one finding."""

from __future__ import annotations

import io
import json

import pytest

from conftest import CONFORMANCE, SPECS
from checker import cli, smt
from checker.analyze import Options, Progress, check_loaded, fold_unknowns
from checker.findings import Finding, FindingKind
from checker.frontend import load_file, load_text


class Terminal(io.StringIO):
    """A terminal that remembers what was drawn on it."""

    def isatty(self) -> bool:
        return True


def phases(path, options=Options()) -> list[Progress]:
    seen: list[Progress] = []
    check_loaded(load_file(path), options, progress=seen.append)
    return seen


def test_analysis_reports_its_engine_and_each_witness_replayed():
    seen = phases(SPECS / "bug_missing_wait.sched")
    assert seen[0].phase == "happens-before"
    replays = [p for p in seen if p.phase == "replay"]
    assert [(p.asked, p.total) for p in replays] == [(1, 1)]
    assert "comm: allreduce world (line 31)" in replays[0].current and "(line 32)" in replays[0].current


def test_solver_and_makespan_phases():
    assert phases(CONFORMANCE / "c12_notify_handshake.sched")[0].phase == "solver"
    assert "makespan" in {p.phase for p in phases(SPECS / "copy_compute_sync.sched")}
    assert phases(CONFORMANCE / "c01_two_writers_race.sched", Options(exhaustive=True))[0].phase == "exhaustive"


def test_progress_does_not_change_the_report():
    loaded = load_file(SPECS / "bug_missing_wait.sched")
    quiet = check_loaded(loaded, Options())
    told = check_loaded(loaded, Options(), progress=lambda p: None)
    assert (quiet.status, quiet.findings, quiet.diagnostics) == (told.status, told.findings, told.diagnostics)


# -- SP301 folding --------------------------------------------------------------------------

LOOPED = """device d
buffer x 1MiB on d
stream a on d
stream b on d
notify n
thread t {
  for i in 0..4 {
    a: kernel k writes x
    b: kernel j reads x
  }
  notify n
}
thread u {  # (two awaits of one notify: no one-shot hand-off, so the solver decides it)
  await n
  await n
}
"""


def test_unknowns_about_one_pair_fold_into_one_with_a_count():
    program = load_text(LOOPED).program
    k = [s.index for s in program.statements if s.name == "k"]
    j = [s.index for s in program.statements if s.name == "j"]
    unknowns = [Finding(FindingKind.UNKNOWN, f"could not decide {a} {b}", (a, b), detail={"reason": "timeout"})
                for a, b in zip(k, j)]
    other = Finding(FindingKind.UNKNOWN, "remaining questions", (), detail={"reason": "out of time"})
    folded = fold_unknowns(program, unknowns + [other, other])
    assert [(f.message, f.instances) for f in folded] == [(unknowns[0].message, 4), ("remaining questions", 2)]


def test_check_prints_one_folded_unknown(run, tmp_path, monkeypatch):
    spec = tmp_path / "looped.sched"
    spec.write_text(LOOPED)
    program = load_text(LOOPED).program
    pairs = [(a.index, b.index) for a, b in zip([s for s in program.statements if s.name == "k"],
                                                 [s for s in program.statements if s.name == "j"])]

    def undecided(program, timeout, rlimit=None, total=None, **options):
        return tuple(Finding(FindingKind.UNKNOWN, "the solver could not decide whether k and j race (timeout)",
                             pair, detail={"reason": "timeout"}) for pair in pairs)

    monkeypatch.setattr(smt, "analyze", undecided)
    status, out, _ = run("check", spec)
    assert status == 1
    assert out.count("error[SP301]") == 1
    assert "4 undecided questions like this one" in out
    status, out, _ = run("check", "--format", "json", spec)
    (unknown,) = json.loads(out)["files"][0]["findings"]
    assert unknown["code"] == "SP301" and unknown["instances"] == 4


# -- the display ----------------------------------------------------------------------------


@pytest.fixture
def terminal(monkeypatch):
    screen = Terminal()
    monkeypatch.setattr(cli, "_display_console", lambda args=None: screen)
    return screen


def test_check_draws_progress_on_a_terminal(run, terminal):
    status, out, _ = run("check", "-j", "1", "--format", "json", SPECS / "copy_compute_sync.sched",
                         SPECS / "bug_missing_wait.sched")
    assert status == 1 and out.startswith("{")  # the document is untouched
    drawn = terminal.getvalue()
    assert "checking" in drawn and "/2" in drawn


def test_no_progress_with_quiet(run, terminal):
    run("check", "-j", "1", "--quiet", SPECS / "copy_compute_sync.sched")
    assert terminal.getvalue() == ""


def test_no_progress_on_a_pipe(run, capsys):
    status, out, err = run("check", "-j", "1", SPECS / "copy_compute_sync.sched")
    assert err == "" and "checking" not in out


def test_optimize_draws_progress_on_a_terminal(run, terminal):
    status, out, _ = run("optimize", SPECS / "copy_compute_sync.sched")
    assert status == 0 and "optimizing" in terminal.getvalue() and "optimizing" not in out


@pytest.mark.parametrize("plain", [("--color", "never"), "NO_COLOR"])
def test_no_progress_without_escape_codes(run, monkeypatch, plain):
    """The display draws with cursor codes: none where the user asked for no escape codes."""
    screen = Terminal()
    monkeypatch.setattr("sys.stderr", screen)
    if plain == "NO_COLOR":
        monkeypatch.setenv("NO_COLOR", "1")
        plain = ()
    run("check", "-j", "1", *plain, SPECS / "copy_compute_sync.sched")
    assert "\x1b" not in screen.getvalue()
    monkeypatch.delenv("NO_COLOR", raising=False)
    run("check", "-j", "1", SPECS / "copy_compute_sync.sched")  # the same terminal, asked for nothing
    assert "checking" in screen.getvalue()


@pytest.mark.parametrize("form", ["json", "sarif", "junit", "text"])
def test_a_machine_report_on_a_terminal_stdout_gets_no_progress_there(run, monkeypatch, form):
    """`docker run -t ... > out.sarif` captures a terminal: the display draws on standard
    error for json, sarif and junit, and on standard output only for text."""
    out, err = Terminal(), Terminal()
    monkeypatch.setattr("sys.stdout", out)
    monkeypatch.setattr("sys.stderr", err)
    monkeypatch.delenv("NO_COLOR", raising=False)
    cli.main(["check", "-j", "1", "--format", form, str(SPECS / "copy_compute_sync.sched")])
    assert ("checking" in out.getvalue()) is (form == "text")
    assert ("checking" in err.getvalue()) is (form != "text")
    if form == "json":
        json.loads(out.getvalue())
