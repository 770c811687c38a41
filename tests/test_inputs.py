"""What the command line takes in and gives back, the same way for every command: files,
directories and standard input; [tool.streamproof] defaults; --quiet and --color; one JSON
envelope; errors on standard output; a deadlocking program fails `simulate` and `optimize`."""

from __future__ import annotations

import io
import json
import re
import sys
from pathlib import Path

import pytest

from conftest import CONFORMANCE, SPECS
from checker import __version__
from checker.inputs import InputError, Source, expand, find_config

C01 = CONFORMANCE / "c01_two_writers_race.sched"
C02 = CONFORMANCE / "c02_event_orders_writers.sched"
C16 = CONFORMANCE / "c16_single_hw_queue_deadlock.sched"
E01 = CONFORMANCE / "e01_undeclared_stream.sched"
CLEAN = SPECS / "copy_compute_sync.sched"
ANSI = re.compile(r"\x1b\[")
WARNED = "device d\nbuffer x 1MiB on d\nstream s on d\nstream idle on d\nthread t {\n  s: kernel k writes x\n}\n"


@pytest.fixture
def stdin(monkeypatch):
    def feed(data: bytes) -> None:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))

    return feed


# -- expanding names ------------------------------------------------------------------------


def test_directories_expand_to_their_specs_recursively_in_order(tmp_path):
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "deep").mkdir(parents=True)
    (tmp_path / ".hidden").mkdir()
    for name in ("z.sched", "b/y.sched", "a/deep/x.sched", "a/w.sched", ".hidden/v.sched", "a/notes.txt"):
        (tmp_path / name).write_text("device d\n")
    paths = [s.path for s in expand([str(tmp_path)])]
    assert [p.removeprefix(str(tmp_path) + "/") for p in paths] == ["a/deep/x.sched", "a/w.sched", "b/y.sched",
                                                                     "z.sched"]


def test_a_file_named_twice_is_checked_once_and_missing_names_are_kept(tmp_path):
    spec = tmp_path / "x.sched"
    spec.write_text("device d\n")
    sources = expand([str(spec), str(tmp_path), str(tmp_path / "missing.sched")])
    assert [s.path for s in sources] == [str(spec), str(tmp_path / "missing.sched")]


def test_stdin_is_read_once(tmp_path):
    sources = expand(["-"], stdin=io.BytesIO(b"device d\n"))
    assert sources == [Source("<stdin>", b"device d\n")]
    with pytest.raises(InputError):
        expand(["-", "-"], stdin=io.BytesIO(b""))


def test_check_a_directory(run):
    status, out, _ = run("check", "-j", "1", SPECS)
    assert status == 1
    assert out.rstrip().splitlines()[-1].startswith(f"failed: {len(list(SPECS.glob('*.sched')))} files checked")
    assert "bug_missing_wait.sched:31:3: error[SP101]" in out


def test_empty_directory_is_an_input_error(run, tmp_path):
    status, out, err = run("check", tmp_path)
    assert status == 2
    assert f"{tmp_path}: error[SP001]: no .sched files in directory" in out and err == ""


def _unreadable(monkeypatch, *names: str) -> None:
    """Make the directories of these names unreadable as `chmod 000` does for a user who is
    not root (tests may run as root, who reads them anyway): listing one fails."""
    import os

    scandir = os.scandir

    def refusing(path="."):
        if os.path.basename(os.fspath(path)) in names:
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return scandir(path)

    monkeypatch.setattr(os, "scandir", refusing)  # (what os.walk lists a directory with)


def test_an_unreadable_directory_is_an_input_error(run, tmp_path, monkeypatch):
    tree = tmp_path / "tree"
    for part in ("a", "locked", "z"):
        (tree / part).mkdir(parents=True)
    (tree / "a" / "racy.sched").write_text(C01.read_text())
    (tree / "locked" / "hidden.sched").write_text(C01.read_text())
    (tree / "z" / "clean.sched").write_text(CLEAN.read_text())
    (tmp_path / "closed").mkdir()
    _unreadable(monkeypatch, "locked", "closed")
    status, out, err = run("check", "-j", "1", "--format", "json", tree, tmp_path / "closed")
    files = json.loads(out)["files"]
    assert status == 2 and err == ""
    assert [f["path"] for f in files] == [str(tree / "a" / "racy.sched"), str(tree / "locked"),
                                          str(tree / "z" / "clean.sched"), str(tmp_path / "closed")]
    for file in (files[1], files[3]):
        (diagnostic,) = file["diagnostics"]
        assert diagnostic["code"] == "SP001"
        assert diagnostic["message"] == f"cannot read directory {file['path']}: Permission denied"
    status, out, _ = run("check", "-j", "1", tmp_path / "closed")
    assert status == 2 and "no .sched files" not in out
    assert out.startswith(f"{tmp_path / 'closed'}: error[SP001]: cannot read directory {tmp_path / 'closed'}: "
                          "Permission denied")


@pytest.mark.skipif(not hasattr(__import__("os"), "geteuid") or __import__("os").geteuid() == 0,
                    reason="root reads a directory of mode 000")
def test_a_directory_of_mode_000_is_an_input_error(run, tmp_path):
    (tmp_path / "locked").mkdir()
    (tmp_path / "locked" / "a.sched").write_text(C01.read_text())
    (tmp_path / "locked").chmod(0)
    try:
        status, out, _ = run("check", "-j", "1", tmp_path, tmp_path / "locked")
    finally:
        (tmp_path / "locked").chmod(0o755)
    assert status == 2 and out.count(f"cannot read directory {tmp_path / 'locked'}: Permission denied") == 2


def test_check_stdin(run, stdin):
    stdin(C01.read_bytes())
    status, out, _ = run("check", "--format", "json", "-")
    assert status == 1
    (file,) = json.loads(out)["files"]
    assert file["path"] == "<stdin>" and file["findings"][0]["code"] == "SP101"


def test_stdin_errors_point_into_the_text(run, stdin):
    stdin(E01.read_bytes())
    status, out, _ = run("check", "-")
    assert status == 2 and out.startswith("<stdin>:3:3: error[SP010]")


def test_stdin_takes_the_name_it_is_given(run, stdin, tmp_path, monkeypatch):
    # An editor or a CI step pipes a buffer in: diagnostics and SARIF name its file.
    monkeypatch.chdir(tmp_path)
    stdin(E01.read_bytes())
    status, out, _ = run("check", "--stdin-filename", "specs/undeclared.sched", "-")
    assert status == 2 and out.startswith("specs/undeclared.sched:3:3: error[SP010]")
    stdin(C01.read_bytes())
    status, out, _ = run("check", "--format", "sarif", "--stdin-filename", "specs/two.sched", "-")
    assert status == 1
    (result, *_) = json.loads(out)["runs"][0]["results"]
    location = result["locations"][0]["physicalLocation"]["artifactLocation"]
    assert location["uri"] == "specs/two.sched" and location["uriBaseId"] == "%SRCROOT%"


def test_stdin_filename_without_stdin_is_a_usage_error(run):
    status, out, err = run("check", "--stdin-filename", "a.sched", C01)
    assert status == 2 and "pass - as a FILE" in err and out == ""


def test_a_stdin_filename_with_a_newline_is_a_usage_error(run, stdin):
    # Printed as it is, it would make diagnostic lines of its own.
    stdin(C02.read_bytes())
    status, out, err = run("check", "--stdin-filename", "a\nb.sched:1:1: error", "-")
    assert status == 2 and "must not hold control characters" in err and out == ""


@pytest.mark.parametrize("command", ["show", "simulate", "optimize"])
def test_several_files_and_stdin_for_every_command(run, stdin, command):
    stdin(C02.read_bytes())
    status, out, _ = run(command, "--format", "json", C01, "-")
    assert status == 0
    result = json.loads(out)
    assert [f["path"] for f in result["files"]] == [str(C01), "<stdin>"]


def test_no_file_is_a_usage_error(run):
    status, out, err = run("check")
    assert status == 2 and "no FILE given" in err and out == ""


# -- [tool.streamproof] ---------------------------------------------------------------------


def project(tmp_path, text: str):
    (tmp_path / "pyproject.toml").write_text(text)
    (tmp_path / "specs").mkdir(exist_ok=True)
    (tmp_path / "specs" / "racy.sched").write_text(C01.read_text())
    return tmp_path


def test_config_sets_defaults_and_files(run, tmp_path, monkeypatch):
    root = project(tmp_path, '[tool.streamproof]\nfiles = ["specs"]\nformat = "json"\njobs = 1\n')
    sub = root / "deeper"
    sub.mkdir()
    monkeypatch.chdir(sub)  # found from a subdirectory; `files` are relative to the pyproject.toml
    status, out, _ = run("check")
    assert status == 1
    (file,) = json.loads(out)["files"]
    assert file["path"] == "../specs/racy.sched"
    status, out, _ = run("check", "--format", "text", "../specs")  # the command line wins
    assert status == 1 and "error[SP101]" in out


def test_config_gives_the_options_a_command_needs(run, tmp_path, monkeypatch):
    project(tmp_path, '[tool.streamproof.replay]\nwitness = "w.json"\n')
    monkeypatch.chdir(tmp_path)
    status, out, _ = run("check", "--format", "json", "specs/racy.sched")
    (tmp_path / "w.json").write_text(out)
    status, out, _ = run("replay", "specs/racy.sched")  # --witness from pyproject.toml
    assert status == 0 and "1. issue" in out
    (tmp_path / "pyproject.toml").write_text("")
    status, _, err = run("replay", "specs/racy.sched")
    assert status == 2 and "the following arguments are required: --witness" in err


def test_config_per_command_table_and_switches(run, tmp_path, monkeypatch):
    project(tmp_path, '[tool.streamproof]\nallow-unknown = true\nquiet = true\n'
                      '[tool.streamproof.show]\nformat = "json"\n')
    monkeypatch.chdir(tmp_path)
    status, out, _ = run("show", "specs/racy.sched")
    assert status == 0 and json.loads(out)["files"][0]["path"] == "specs/racy.sched"
    status, out, _ = run("check", "-j", "1", CLEAN)
    assert status == 0 and out == ""  # quiet: nothing on success
    status, out, _ = run("check", "-j", "1", "--no-quiet", CLEAN)
    assert status == 0 and out.startswith("ok:")  # the command line undoes the switch
    undecided = tmp_path / "specs" / "open.sched"
    undecided.write_text((CONFORMANCE / "c19_two_threads_rerecord.sched").read_text())
    flags = ("-j", "1", "--budget", "1e-9", "--rlimit", "1")
    assert run("check", *flags, undecided)[0] == 0  # unknowns allowed by the configuration
    assert run("check", *flags, "--no-allow-unknown", undecided)[0] == 1


def test_a_shared_setting_applies_where_a_command_takes_its_value(run, tmp_path, monkeypatch):
    """`format = "sarif"` at the top is `check`'s: `show` and `simulate` keep their own default."""
    project(tmp_path, '[tool.streamproof]\nformat = "sarif"\n')
    monkeypatch.chdir(tmp_path)
    status, out, _ = run("check", "specs/racy.sched")
    assert status == 1 and json.loads(out)["version"] == "2.1.0"
    for command in ("show", "simulate"):
        status, out, err = run(command, "specs/racy.sched")
        assert status == 0 and err == "" and out.startswith("specs/racy.sched"), command


@pytest.mark.parametrize("text,problem,where", [
    ('[tool.streamproof]\ntimeout = "soon"\n', "not a number", "2:11"),
    ('[tool.streamproof]\nno-such-option = 1\n', "unknown option `no-such-option`", "2:1"),
    ('[tool.streamproof]\n  timout = 3\n', "unknown option `timout` (did you mean `timeout`?)", "2:3"),
    # `--symmetry` only undoes a configured `no-symmetry`: not suggested as its own correction
    ('[tool.streamproof]\nsymmetry = false\n', "unknown option `symmetry`: configure `no-symmetry = true`", "2:1"),
    ('[tool.streamproof]\nquiet = "yes"\n', "must be true or false", "2:9"),
    ('[tool.streamproof]\nformat = "xml"\n', "must be one of", "2:10"),
    ('[tool.streamproof]\ncluster = 5\n', "`cluster` must be a string", "2:11"),
    ('[project]\nname = "x"\n\n[tool.streamproof.optimize]\nemit = 5  # a path\n', "`emit` must be a string", "5:8"),
    ('[tool.streamproof.shw]\nformat = "json"\n', "no command `shw`", "1:1"),
    ('[tool.streamproof.show]\ntimeout = 3\n', "`show` has no option `timeout`", "2:1"),
    ('[tool.streamproof\n', "not valid TOML", "1:18"),
    ('[[tool.streamproof]]\ntimeout = 1\n', "must be a table", "1:1"),
    ('[tool.streamproof.check]\n[tool.streamproof.check.deep]\na = 1\n', "`check` has no option `deep`", "2:1"),
    ('[tool.streamproof]\ntimeout = { a = 1 }\n', "there is no command `timeout`", "2:11"),
    ('[tool.streamproof]\na.b = 1\n', "there is no command `a`", "2:1"),  # (a dotted key)
    ('[tool.streamproof]\nfiles = ["\\u0000"]\n', "a path cannot hold a NUL character", "2:9"),
    ('[tool.streamproof]\ncluster = "a\\u0000"\n', "cannot hold a NUL character", "2:11"),
    ('[tool.streamproof]\ncluster = "garbage"\n', "is not a scheduler address (no host and port)", "2:11"),
    ('[tool.streamproof]\ncluster = "tcp://h:99999"\n', "'99999' is not a port number", "2:11"),
    ('[tool.streamproof.replay]\nfinding = "x"\n', "`finding` must be an integer", "2:11"),
    ('[tool.streamproof.replay]\nfinding = 1.5\n', "`finding` must be an integer", "2:11"),
    ('[tool.streamproof]\ncheck = {timeout = "x"}\n', "`timeout`: not a number", "2:20"),
    ('[tool.streamproof]\ncheck = { timeout = 1, jobs = "x" }\n', "`jobs`: not an integer", "2:31"),
    ('[tool.streamproof]\ntimeout = 1\nxyz', "not valid TOML", "3:4"),  # (at the end of the text)
])
def test_bad_config_is_a_diagnostic_at_the_setting(run, tmp_path, monkeypatch, text, problem, where):
    project(tmp_path, text)
    monkeypatch.chdir(tmp_path)
    status, out, err = run("check", "specs")
    assert status == 2 and problem in err and "Traceback" not in err and "int()" not in err
    head = err.splitlines()[0]
    assert head.startswith(f"pyproject.toml:{where}: error[SP005]: "), head
    column = int(where.split(":")[1])
    caret = next(line for line in err.splitlines() if "^" in line)
    assert caret.index("^") - caret.index("|") - 2 == column - 1  # under the value (a key unknown: the key)


def test_a_config_written_inline_still_names_the_file(run, tmp_path, monkeypatch):
    project(tmp_path, 'tool.streamproof = { timeout = "soon" }\n')
    monkeypatch.chdir(tmp_path)
    status, out, err = run("check", "specs")
    assert status == 2 and "pyproject.toml" in err and "not a number" in err and "Traceback" not in err


def test_a_pyproject_too_large_to_be_settings_is_refused_unread(run, tmp_path, monkeypatch):
    with open(tmp_path / "pyproject.toml", "wb") as file:
        file.truncate(3 << 30)  # (sparse: 3 GiB of NULs on no disk)
    (tmp_path / "a.sched").write_text(WARNED)
    monkeypatch.chdir(tmp_path)
    status, out, err = run("check", "a.sched")
    assert status == 2 and "Traceback" not in err
    assert err.splitlines()[0] == f"pyproject.toml: error[SP005]: larger than 4 MiB: not read"
    assert err.splitlines()[1].startswith("  = help: ")


def test_a_named_pipe_without_a_writer_is_refused_and_one_with_a_writer_is_read(run, tmp_path, monkeypatch):
    import os
    import threading

    from checker import resources

    monkeypatch.setattr(resources, "WRITER_WAIT_SECONDS", 0.4)
    pipe = tmp_path / "spec.sched"
    os.mkfifo(pipe)
    status, out, _ = run("show", pipe)
    assert status == 2 and "a named pipe that nothing wrote to" in out
    writer = threading.Thread(target=lambda: pipe.write_text(WARNED))
    writer.start()
    status, out, _ = run("show", pipe)
    writer.join()
    assert status == 0 and "stream" in out


def test_pyproject_without_the_table_is_skipped(tmp_path, monkeypatch):
    (tmp_path / "pyproject.toml").write_text('[tool.streamproof]\ntimeout = 5\n')
    inner = tmp_path / "inner"
    inner.mkdir()
    (inner / "pyproject.toml").write_text('[project]\nname = "x"\n')
    path, table = find_config(inner)
    assert path == tmp_path / "pyproject.toml" and table == {"timeout": 5}


# -- --quiet and --color --------------------------------------------------------------------


def test_quiet_prints_only_failures(run, tmp_path):
    warned = tmp_path / "w.sched"
    warned.write_text(WARNED)
    status, out, _ = run("check", "-j", "1", "--quiet", warned, SPECS / "bug_free_in_flight.sched")
    assert status == 0 and out == ""  # no warnings, no expected findings, no summary
    status, out, _ = run("check", "-j", "1", "-q", warned, C01)
    assert status == 1
    assert out.startswith(f"{C01}:6:3: error[SP101]") and "warning" not in out and "failed:" not in out
    for command in ("show", "simulate", "optimize"):
        assert run(command, "-q", warned)[1:] == ("", "")


def test_color_always_and_never(run, monkeypatch):
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.setenv("NO_COLOR", "1")
    assert ANSI.search(run("check", "--color", "always", C01)[1])  # an explicit flag beats NO_COLOR
    monkeypatch.delenv("NO_COLOR")
    monkeypatch.setenv("FORCE_COLOR", "1")
    assert not ANSI.search(run("check", "--color", "never", C01)[1])
    assert ANSI.search(run("check", C01)[1])
    assert not ANSI.search(run("check", "--format", "json", "--color", "always", C01)[1])


# -- one envelope, one stream ---------------------------------------------------------------


def envelope(out: str) -> list[dict]:
    result = json.loads(out)
    assert set(result) == {"version", "files"} and result["version"] == __version__
    return result["files"]


def test_every_command_prints_the_same_envelope(run, tmp_path):
    for command in ("check", "show", "simulate", "optimize"):
        status, out, _ = run(command, "--format", "json", CLEAN)
        (file,) = envelope(out)
        assert file["path"] == str(CLEAN) and "status" in file and "diagnostics" in file, command
    _, found, _ = run("check", "--format", "json", SPECS / "bug_missing_wait.sched")
    witness = tmp_path / "found.json"
    witness.write_text(found)
    status, out, _ = run("replay", "--format", "json", SPECS / "bug_missing_wait.sched", "--witness", witness)
    assert status == 0
    (file,) = envelope(out)
    assert file["status"] == "ok" and file["reproduced"] is True


@pytest.mark.parametrize("command", ["check", "show", "simulate", "optimize", "replay"])
def test_invalid_spec_is_reported_the_same_way_by_every_command(run, tmp_path, command):
    extra = ["--witness", tmp_path / "none.json"] if command == "replay" else []
    status, out, err = run(command, E01, *extra)
    assert status == 2 and err == ""
    assert out.startswith(f"{E01}:3:3: error[SP010]")
    status, out, err = run(command, "--format", "json", E01, *extra)
    (file,) = envelope(out)
    assert status == 2 and err == "" and file["status"] == "error"
    assert file["diagnostics"][0]["code"] == "SP010"


def test_bad_witness_file_is_an_input_error(run, tmp_path):
    witness = tmp_path / "w.json"
    witness.write_text("not json")
    status, out, err = run("replay", C01, "--witness", witness)
    assert status == 2 and err == "" and out.startswith(f"{witness}: error[SP001]: not a witness file")
    status, out, _ = run("replay", "--format", "json", C01, "--witness", witness)
    (file,) = envelope(out)
    assert status == 2 and file["diagnostics"][0]["code"] == "SP001"
    witness.write_text("[" * 100_000 + "]" * 100_000)  # deeper than the JSON decoder recurses
    status, out, err = run("replay", C01, "--witness", witness)
    assert status == 2 and err == "" and "not a witness file: nested too deeply" in out


def test_replay_reads_the_witness_from_standard_input(run, stdin):
    spec = SPECS / "bug_missing_wait.sched"
    _, found, _ = run("check", "--format", "json", spec)
    stdin(found.encode())
    status, out, err = run("replay", spec, "--witness", "-")
    assert status == 0 and err == "" and "reproduced" in out
    stdin(b"[]")
    status, out, _ = run("replay", spec, "--witness", "-")
    assert status == 2 and out.startswith("<stdin>: error[SP001]: not a witness file")
    stdin(found.encode())
    status, out, err = run("replay", "-", "--witness", "-")
    assert status == 2 and out == "" and "only one of them can be read from standard input" in err


@pytest.mark.parametrize("text,problem", [
    ("[1, 2]", "not a witness file: expected a JSON object (a `check --format json` report), not an array"),
    ("null", "not a witness file: expected a JSON object (a `check --format json` report), not null"),
    ('{"version": "0.1.0"}', "not a witness file: expected a `check --format json` report (an object with a list "
                             "under `files`)"),
    ('{"files": []}', "not a witness file: its `files` list holds no report of a spec"),
    ('{"files": [1, "x"]}', "not a witness file: its `files` list holds no report of a spec"),
    ('{"files": [{"findings": [{"kind": ["race"], "witness": {"steps": []}}]}]}',
     "not a witness file: its finding's kind \"['race']\" is none that `check` reports"),
    ('{"files": [{"findings": [{"kind": "race", "witness": {"steps": [[["issue"], 0]]}}]}]}',
     "not a witness file: not a step: [['issue'], 0]"),
    ('{"files": [{"findings": [{"kind": "race", "statements": 5, "witness": {"steps": []}}]}]}',
     "not a witness file: its finding's `statements` is not a list of statement numbers"),
    ('{"files": [', "not a witness file: not valid JSON: expecting value (line 1, column 12)"),
    (b"\xff", "not a witness file: byte 0 (0xff) is not UTF-8"),
])
def test_a_witness_file_s_problem_is_said_plainly(run, tmp_path, text, problem):
    """Not Python's words for them ("list indices must be integers or slices, not str")."""
    witness = tmp_path / "w.json"
    witness.write_bytes(text if isinstance(text, bytes) else text.encode())
    for extra in ((), ("--finding", "0")):
        status, out, err = run("replay", C01, "--witness", witness, *extra)
        assert status == 2 and err == "", err
        assert out.startswith(f"{witness}: error[SP001]: {problem}"), out


def test_a_missing_witness_file_cannot_be_read(run, tmp_path):
    missing = tmp_path / "missing.json"
    status, out, err = run("replay", C01, "--witness", missing)
    assert status == 2 and err == "" and "Errno" not in out
    assert out.startswith(f"{missing}: error[SP001]: cannot read {missing}: No such file or directory")


def test_replay_counts_steps_as_it_lists_them_and_takes_no_directory(run, tmp_path):
    _, found, _ = run("check", "--format", "json", SPECS / "bug_missing_wait.sched")
    witness = tmp_path / "found.json"
    witness.write_text(found)
    status, out, _ = run("replay", SPECS / "bug_missing_wait.sched", "--witness", witness)
    assert status == 0
    listed = [line for line in out.splitlines() if re.match(r"\s+\d+\. start ", line)]
    last_start = int(listed[-1].split(".")[0])  # the later access starts at the last start listed
    assert f"both accesses are running after step {last_start}" in out
    assert "writer first: (that order cannot be reached from this execution)" in out
    status, out, err = run("replay", SPECS, "--witness", witness)
    assert status == 2 and out == "" and "is a directory" in err
    status, out, _ = run("replay", SPECS / "bug_free_in_flight.sched", "--witness", witness)
    assert status == 2 and "the finding is of another spec: its statements are on lines 31, 32 there" in out
    report = json.loads(found)
    report["files"][0]["findings"][0]["kind"] = "zzz"
    witness.write_text(json.dumps(report))
    status, out, _ = run("replay", SPECS / "bug_missing_wait.sched", "--witness", witness)
    assert status == 2 and "not a witness file: its finding's kind 'zzz' is none" in out


MISMATCH_THEN_RACE = """device d0 { compute 2 }
device d1
buffer a0 1KiB on d0
buffer a1 2KiB on d1
stream c0 on d0
stream k0 on d0
stream c1 on d1
comm w = { c0, c1 }
thread r0 {
  c0: allreduce w a0
  k0: kernel k writes a0
}
thread r1 {
  c1: allreduce w a1
}
"""


def test_replay_finding_counts_the_reports_findings(run, tmp_path):
    """`--finding N` is the place in the report's `findings` list, witness or not."""
    spec, witness = tmp_path / "m.sched", tmp_path / "m.json"
    spec.write_text(MISMATCH_THEN_RACE)
    run("check", "--format", "json", spec, "-o", witness)
    findings = json.loads(witness.read_text())["files"][0]["findings"]
    assert [(f["code"], bool(f.get("witness"))) for f in findings] == [("SP202", False), ("SP101", True)]
    for chosen in ((), ("--finding", "1")):  # by default the first with a witness
        status, out, _ = run("replay", "--format", "json", spec, "--witness", witness, *chosen)
        (file,) = envelope(out)
        assert status == 0 and file["finding"]["code"] == "SP101" and file["reproduced"]
    status, out, _ = run("replay", spec, "--witness", witness, "--finding", "0")
    assert status == 2 and "finding 0 (SP202) has no witness to replay; those with one: 1" in out
    status, out, _ = run("replay", spec, "--witness", witness, "--finding", "2")
    assert status == 2 and "the file has 2 finding(s), 0 to 1: --finding 2 is out of range" in out


def test_warnings_are_in_every_commands_json(run, tmp_path):
    spec = tmp_path / "w.sched"
    spec.write_text(WARNED)
    for command in ("check", "show", "simulate", "optimize"):
        (file,) = envelope(run(command, "--format", "json", spec)[1])
        assert [d["code"] for d in file["diagnostics"]] == ["SP051"], command


def test_one_engine_naming_style(run):
    (simulated,) = envelope(run("simulate", "--format", "json", CLEAN)[1])
    (optimized,) = envelope(run("optimize", "--format", "json", CLEAN)[1])
    assert set(simulated["engines"]) == {"npu0/compute", "npu0/copy"}
    assert {e["name"] for e in optimized["report"]["engines"]} == {"npu0/compute", "npu0/copy"}


# -- deadlocks have no makespan -------------------------------------------------------------


def test_simulate_says_a_deadlocking_program_deadlocks(run):
    status, out, _ = run("simulate", C16)
    assert status == 1
    assert out.startswith(f"{C16}: deadlock: the program gets stuck")
    assert "makespan 0" not in out and "stuck: line 6 s1: await go" in out
    status, out, _ = run("simulate", "--format", "json", C16)
    (file,) = envelope(out)
    assert status == 1 and file["status"] == "deadlock" and file["deadlocked"] is True
    assert file["makespan"] is None and file["stuck"]


def test_optimize_says_a_deadlocking_program_deadlocks(run, tmp_path):
    status, out, _ = run("optimize", C16)
    assert status == 1 and out.startswith(f"{C16}: deadlock:") and "0.000 ms" not in out
    status, out, _ = run("optimize", "--format", "json", C16)
    (file,) = envelope(out)
    assert status == 1 and file["status"] == "deadlock" and file["deadlock"] is True
    assert set(file["makespan"].values()) == {None}
    emitted = tmp_path / "out.sched"
    status, out, _ = run("optimize", C16, "--emit", emitted)
    assert status == 1 and not emitted.exists()


def test_emitted_spec_names_the_staging_copy_of_a_pageable_source_validly(run, tmp_path):
    spec = tmp_path / "staged.sched"
    spec.write_text("device gpu0 { compute 1 copy 1 runtime cuda }\nbuffer src 1MiB on host\n"
                    "buffer dst 1MiB on gpu0\nstream s on gpu0\nthread main {\n  s: copy dst <- src 1ms\n"
                    "  s: kernel use reads dst 1ms\n}\n")
    emitted = tmp_path / "out.sched"
    status, out, _ = run("optimize", spec, "--emit", emitted)
    assert status == 0 and "src_staged" in emitted.read_text()
    status, out, err = run("check", emitted)
    assert status == 0, out + err


def test_emit_without_an_exact_model_is_no_usage_error(run, tmp_path):
    spec = tmp_path / "shared.sched"
    spec.write_text("device d\nstream s on d\nbuffer x 1KiB on d\nthread a {\n  s: kernel k writes x 1ms\n}\n"
                    "thread b {\n  s: kernel j writes x 1ms\n}\n")
    status, out, _ = run("optimize", spec, "--emit", tmp_path / "out.sched")
    assert status == 1 and "cannot --emit" in out and not (tmp_path / "out.sched").exists()


def test_clean_program_still_succeeds(run):
    status, out, _ = run("simulate", CLEAN)
    assert status == 0 and "simulated makespan 70.200 ms" in out
    (file,) = envelope(run("simulate", "--format", "json", CLEAN)[1])
    assert file["status"] == "ok" and file["makespan"] == 70.2


def test_trace_with_several_files_is_a_usage_error(run, tmp_path):
    status, _, err = run("simulate", CLEAN, C01, "--trace", tmp_path / "t.json")
    assert status == 2 and "exactly one spec" in err


# -- help -----------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["check", "show", "replay", "simulate", "optimize"])
def test_every_command_has_a_description_and_examples(run, capsys, command):
    with pytest.raises(SystemExit):
        run(command, "--help")
    out = capsys.readouterr().out
    assert "examples:" in out and f"streamproof {command}" in out.split("examples:")[1]
    assert "exit status" in out and "--quiet" in out and "--color" in out
    description = out.split("\n\n")[1]
    assert len(description.split()) >= 8, description


def test_another_tools_broken_pyproject_is_skipped(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.streamproof]\ntimeout = 5\n')
    inner = tmp_path / "inner"
    inner.mkdir()
    (inner / "pyproject.toml").write_text('[tool.other\nname = "x"\n')
    assert find_config(inner) == (tmp_path / "pyproject.toml", {"timeout": 5})
    (inner / "pyproject.toml").write_text('[tool.streamproof\ntimeout = 5\n')  # ours, broken: an error
    with pytest.raises(ValueError, match="not valid TOML"):
        find_config(inner)


def test_a_config_byte_that_is_not_utf8_is_located(run, tmp_path, monkeypatch):
    project(tmp_path, "")
    (tmp_path / "pyproject.toml").write_bytes(b'[tool.streamproof]\ntimeout = "\xff"\n')
    monkeypatch.chdir(tmp_path)
    status, out, err = run("check", "specs")
    assert status == 2 and "Traceback" not in err
    assert err.splitlines()[0].startswith(f"pyproject.toml:2:12: error[SP005]: not valid TOML")


def test_a_config_nested_too_deeply_for_the_parser_is_located(run, tmp_path, monkeypatch):
    """tomllib recurses once per level of nesting: a deep value anywhere in the file raised
    RecursionError, a traceback for every command run below it."""
    deep = "[" * 5000 + "]" * 5000
    project(tmp_path, f'[tool.streamproof]\ntimeout = 5\n\n[project]\nx = {deep}\n')
    monkeypatch.chdir(tmp_path)
    for command in ("check", "show"):
        status, out, err = run(command, "specs")
        assert status == 2 and out == "" and "Traceback" not in err and "Recursion" not in err
        head = err.splitlines()[0]
        assert head.startswith(f"pyproject.toml:5:5: error[SP005]: a value nested 5000 levels deep"), head
        caret = next(line for line in err.splitlines() if "^" in line)
        assert caret.index("^") - caret.index("|") - 2 == 4  # under the value's first bracket
    # Another tool's file (no [tool.streamproof]) is not ours to judge, as when it is not TOML
    # at all: the search goes on upwards.
    (tmp_path / "pyproject.toml").write_text("[tool.streamproof]\ntimeout = 5\n")
    inner = tmp_path / "inner"
    inner.mkdir()
    (inner / "pyproject.toml").write_text(f'[project]\nname = "x"\nx = {{ a = {deep} }}\n')
    assert find_config(inner) == (tmp_path / "pyproject.toml", {"timeout": 5})
    (tmp_path / "pyproject.toml").unlink()
    monkeypatch.chdir(inner)
    status, out, err = run("show", CLEAN)
    assert status == 0 and err == "" and "statements" in out


# -- --max-memory ---------------------------------------------------------------------------

RING = """device gpu0
buffer x[4] 1MiB on gpu0
stream s[4] on gpu0
notify n[4]
thread t[4] {
  for i in 0..5 {
    s[t]: kernel k writes x[t] 1ms
    notify n[(t + 1) % 4]
    s[t]: notify n[t]
    await n[t]
  }
}
"""
"""Four threads that pass notifies round a ring: far more states than 1 MiB holds."""


def test_max_memory_bounds_the_exhaustive_search(run, tmp_path, monkeypatch):
    spec = tmp_path / "ring.sched"
    spec.write_text(RING)
    status, out, _ = run("check", "--exhaustive", "--max-memory", "1MiB", "--format", "json", spec)
    (finding,) = json.loads(out)["files"][0]["findings"]
    assert status == 1 and finding["code"] == "SP301"
    assert "fit in 1MiB (--max-memory)" in finding["message"] and "raise --max-memory" in finding["help"]
    project(tmp_path, '[tool.streamproof.check]\nmax-memory = "1MiB"\nexhaustive = true\n')
    monkeypatch.chdir(tmp_path)
    status, out, _ = run("check", "ring.sched")
    assert status == 1 and "fit in 1MiB" in out


@pytest.mark.parametrize("value", ["1000000B", "2TiB", "lots", "4 PiB", "-1"])
def test_max_memory_out_of_range_is_a_usage_error(run, value):
    with pytest.raises(SystemExit) as exit_:
        run("check", "--exhaustive", "--max-memory", value, C01)
    assert exit_.value.code == 2


@pytest.mark.skipif(not hasattr(__import__("os"), "mkfifo"), reason="needs named pipes")
def test_a_named_pipe_in_a_directory_is_reported_not_waited_on(run, tmp_path):
    import os

    (tmp_path / "a.sched").write_text(C01.read_text())
    os.mkfifo(tmp_path / "pipe.sched")  # no writer: opening it would block forever
    status, out, _ = run("check", "-j", "1", tmp_path)
    assert status == 2
    assert "error[SP101]" in out and "pipe.sched is not a regular file" in out


def test_an_emitted_spec_passes_its_own_check(run, tmp_path):
    """The synthesized spec's lanes allow the overlap bound, but run in time (contended
    engines to priority, none held back) the inference pipeline takes 17.1 ms, not 16.3: the
    emitted `expect makespan` is the run's, so `check` of the spec it wrote passes."""
    emitted = tmp_path / "out.sched"
    spec = Path(__file__).parent.parent / "specs" / "inference_pipeline.sched"
    status, _, _ = run("optimize", spec, "--emit", emitted)
    text = emitted.read_text()
    assert status == 0 and "expect makespan <= 17100us" in text and "16.3 ms" in text
    status, out, err = run("check", emitted)
    assert status == 0, out + err


def test_a_witness_longer_than_any_execution_is_refused_before_it_is_read(run, tmp_path):
    """Each statement takes each of its steps once: a witness of more steps than all of them is
    no execution of this spec, whatever its steps (a 112 MB file of 8 million took a minute)."""
    from checker.frontend import load_text
    from checker.witness import task_steps, thread_steps

    program = load_text(open(C01).read()).program
    most = sum(len(thread_steps(s)) + len(task_steps(s)) for s in program.statements)
    witness = tmp_path / "w.json"
    witness.write_text(json.dumps({"steps": [["issue", 0]] * (most + 1)}))
    status, out, _ = run("replay", C01, "--witness", witness)
    assert status == 2 and f"more than any execution of this spec takes ({most})" in out
    witness.write_text(json.dumps({"steps": [["issue", 0]] * most}))
    status, out, _ = run("replay", C01, "--witness", witness)
    assert status == 2 and "more than any execution" not in out and "is not legal here" in out and "error[SP001]" in out


def test_replay_finds_its_spec_in_a_directory_report_however_the_path_is_written(run, tmp_path, monkeypatch):
    specs = tmp_path / "specs"
    specs.mkdir()
    for name in ("bug_missing_wait.sched", "bug_collective_order.sched"):
        (specs / name).write_text((SPECS / name).read_text())
    monkeypatch.chdir(tmp_path)
    status, out, _ = run("check", "--format", "json", "specs")
    report = tmp_path / "report.json"
    report.write_text(out)
    for spelling in ("specs/bug_missing_wait.sched", "./specs/bug_missing_wait.sched",
                     str(specs / "bug_missing_wait.sched")):
        status, out, _ = run("replay", spelling, "--witness", report, "-q")
        assert status == 0, (spelling, out)
    monkeypatch.chdir(specs)  # (check ran one directory up: the file name alone tells)
    status, out, _ = run("replay", "bug_missing_wait.sched", "--witness", report, "-q")
    assert status == 0, out
    # A spec the report does not hold is said so, not matched with the report's first file.
    (tmp_path / "elsewhere.sched").write_text((SPECS / "bug_missing_wait.sched").read_text())
    status, out, _ = run("replay", tmp_path / "elsewhere.sched", "--witness", report)
    assert status == 2 and "the report holds 2 files, none of them this spec" in out


def test_replay_refuses_a_step_numbered_by_a_boolean_and_a_finding_of_missing_statements(run, tmp_path):
    status, out, _ = run("check", "--format", "json", SPECS / "bug_missing_wait.sched")
    data = json.loads(out)
    finding = data["files"][0]["findings"][0]
    witness = tmp_path / "w.json"
    witness.write_text(json.dumps({"steps": [["issue", True]]}))
    status, out, _ = run("replay", SPECS / "bug_missing_wait.sched", "--witness", witness)
    assert status == 2 and "error[SP001]" in out and "not a step" in out
    finding["statements"] = [*finding["statements"][:-1], 99999]
    witness.write_text(json.dumps(data))
    status, out, _ = run("replay", SPECS / "bug_missing_wait.sched", "--witness", witness)
    assert status == 2 and "statement 99999, which the spec does not have" in out
