"""The command line as a user meets it: version, help, `show`, `check` on several files,
the JSON shape, colour, unreadable input, and warnings versus exit status."""

from __future__ import annotations

import json
import re

import pytest

from conftest import CONFORMANCE, SPECS
from checker import __version__

C01 = CONFORMANCE / "c01_two_writers_race.sched"
C02 = CONFORMANCE / "c02_event_orders_writers.sched"
C20 = CONFORMANCE / "c20_double_buffering.sched"
E01 = CONFORMANCE / "e01_undeclared_stream.sched"
ANSI = re.compile(r"\x1b\[")
DIAGNOSTIC = re.compile(r"^(?P<path>.+?):(?P<line>\d+):(?P<column>\d+): (?P<severity>error|warning)\[(?P<code>SP\d{3})\]: .+")


def test_version(run, capsys):
    with pytest.raises(SystemExit) as exit_:
        run("--version")
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"streamproof {__version__}"


def test_help_mentions_exit_codes(run, capsys):
    with pytest.raises(SystemExit) as exit_:
        run("--help")
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert "exit status" in out
    for status in ("0", "1", "2"):
        assert re.search(rf"^\s+{status}\s+\S", out, re.M), status
    for command in ("check", "show"):
        assert command in out


def test_check_help_mentions_exit_codes(run, capsys):
    with pytest.raises(SystemExit):
        run("check", "--help")
    out = capsys.readouterr().out
    assert "exit status" in out and "--max-statements" in out and "--timeout" in out


@pytest.mark.parametrize("command,zero", [("show", "every spec is valid"), ("simulate", "no spec deadlocks"),
                                           ("optimize", "no spec deadlocks")])
def test_each_commands_help_gives_its_own_exit_status(run, capsys, command, zero):
    with pytest.raises(SystemExit):
        run(command, "--help")
    out = capsys.readouterr().out
    assert re.search(rf"^  0  {zero}", out, re.M) and "expect" not in out.split("exit status:")[1], out
    assert "143  terminated" in out and ("  1  " in out) == (command != "show")


def test_no_command_is_a_usage_error(run):
    status, out, err = run()
    assert status == 2
    assert "usage" in (out + err).lower()


def test_unknown_option_is_a_usage_error(run, capsys):
    with pytest.raises(SystemExit) as exit_:
        run("check", "--no-such-option", C01)
    assert exit_.value.code == 2
    assert "usage: streamproof check " in capsys.readouterr().err  # (the command's usage, not the top level's)
    with pytest.raises(SystemExit) as exit_:
        run("replay", C01, C01, "--witness", C01)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "usage: streamproof replay " in err and "unrecognized arguments" in err


# -- show ---------------------------------------------------------------------------------


def test_show_text(run):
    status, out, _ = run("show", C01)
    assert status == 0
    lines = out.splitlines()
    assert lines[0] == str(C01)
    assert "devices:" in lines and "streams:" in lines
    body = [line for line in lines if re.match(r"^\s+\d+\s+line", line)]
    assert [re.search(r"line (\d+)", line).group(1) for line in body] == ["6", "7"]
    assert "main: kernel fwd" in body[0] and "side: kernel clear" in body[1]
    assert lines[-1].startswith("2 statements (2 tasks) on 2 streams")


def test_show_json_counts_and_order(run):
    status, out, _ = run("show", "--format", "json", C20)
    assert status == 0
    (shown,) = json.loads(out)["files"]
    assert shown["counts"] == {"statements": 37, "tasks": 36, "threads": 1, "streams": 2, "devices": 1, "buffers": 5}
    statements = shown["statements"]
    assert [s["index"] for s in statements] == list(range(37))
    assert [s["op"] for s in statements[:6]] == ["wait", "copy", "record", "wait", "kernel", "record"]
    assert statements[1]["copy"] == "h2d" and statements[1]["duration_ms"] == 8.2
    assert statements[6]["bindings"] == {"slot": 1, "step": 1}
    assert statements[-1]["op"] == "sync"
    assert [b["name"] for b in shown["buffers"]] == ["staged[0]", "staged[1]", "input[0]", "input[1]", "output"]


def test_show_prints_warnings_and_succeeds(run, tmp_path):
    spec = tmp_path / "w.sched"
    spec.write_text("device d\nstream s on d\nstream idle on d\nthread t {\n  s: kernel k\n}\n")
    status, out, _ = run("show", spec)
    assert status == 0
    assert f"{spec}:3:1: warning[SP051]" in out


def test_show_invalid_spec(run):
    status, out, err = run("show", E01)
    assert status == 2
    assert (out + err).startswith(f"{E01}:3:3: error[SP010]")


def test_show_max_statements(run):
    status, out, err = run("show", "--max-statements", "10", C20)
    assert status == 2
    assert "error[SP018]" in out + err


# -- check --------------------------------------------------------------------------------


def test_check_several_files(run):
    status, out, _ = run("check", C01, C02)
    assert status == 1  # c01 races
    assert f"{C01}:6:3: error[SP101]" in out
    assert str(C02) not in out.split("\n\n")[0] or "SP101" in out
    assert out.rstrip().splitlines()[-1].startswith("failed: 2 files checked")


def test_the_summary_counts_unmet_expectations(run, tmp_path):
    # An expectation left unmet fails the file without a finding: the last line says so.
    spec = tmp_path / "fixed.sched"
    spec.write_text("device d\nbuffer x 1MiB on d\nstream s on d\nthread main {\n  s: kernel k writes x\n}\n"
                    "expect race on x\n")
    status, out, _ = run("check", spec)
    assert status == 1
    assert out.rstrip().splitlines()[-1] == "failed: 1 file checked, 1 unmet expectation"


def test_a_line_ending_in_a_continuation_is_shown_as_written(run, tmp_path):
    spec = tmp_path / "continued.sched"
    spec.write_text("device d\nstream s on d\nthread t {\n  s: kernel k reads zz \\\n    writes zz\n}\n")
    status, out, _ = run("check", spec)
    assert status == 2
    assert "4 |   s: kernel k reads zz \\\n" in out  # (one backslash: rich's escape doubled it)


def test_check_clean_files(run):
    status, out, _ = run("check", C02, CONFORMANCE / "c05_stream_sync_orders.sched")
    assert status == 0
    assert out.rstrip().splitlines()[-1].startswith("ok: 2 files checked")


def test_check_error_wins_over_findings(run):
    status, out, err = run("check", C01, E01)
    assert status == 2
    assert f"{E01}:3:3: error[SP010]" in out + err


def test_check_json_shape(run):
    status, out, _ = run("check", "--format", "json", C01, C02, E01)
    assert status == 2
    result = json.loads(out)
    assert [f["path"] for f in result["files"]] == [str(C01), str(C02), str(E01)]
    assert [f["status"] for f in result["files"]][2] == "error"
    for file in result["files"]:
        assert {"path", "status", "findings", "diagnostics"} <= set(file)
        for finding in file["findings"]:
            assert {"kind", "code", "message", "buffer", "locations"} <= set(finding)
            for location in finding["locations"]:
                assert set(location) >= {"line", "column", "end_line", "end_column"}
                assert all(isinstance(location[k], int) for k in ("line", "column", "end_line", "end_column"))
        for diagnostic in file["diagnostics"]:
            assert {"code", "severity", "message", "line", "column", "end_line", "end_column"} <= set(diagnostic)
    (race,) = result["files"][0]["findings"]
    assert (race["kind"], race["code"], race["buffer"]) == ("race", "SP101", "act")
    assert [loc["line"] for loc in race["locations"]] == [6, 7]
    assert race["locations"][0] == {"line": 6, "column": 3, "end_line": 6, "end_column": 34}
    assert result["files"][1]["findings"] == []
    (diagnostic,) = result["files"][2]["diagnostics"]
    assert (diagnostic["code"], diagnostic["severity"], diagnostic["line"], diagnostic["column"]) == (
        "SP010", "error", 3, 3)


def test_nonexistent_file(run, tmp_path):
    missing = tmp_path / "missing.sched"
    status, out, err = run("check", missing)
    assert status == 2
    text = out + err
    assert text.startswith(f"{missing}: error[SP001]: cannot read")
    assert "Traceback" not in text


def test_nonexistent_file_json(run, tmp_path):
    missing = tmp_path / "missing.sched"
    status, out, _ = run("check", "--format", "json", missing)
    assert status == 2
    (file,) = json.loads(out)["files"]
    assert file["status"] == "error" and file["diagnostics"][0]["code"] == "SP001"
    assert file["diagnostics"][0]["line"] is None


def test_directory_without_specs_is_unreadable(run, tmp_path):
    status, out, err = run("check", tmp_path)
    assert status == 2
    assert "error[SP001]" in out + err


def test_invalid_spec_prints_source_caret_and_help(run):
    status, out, err = run("check", CONFORMANCE / "e02_syntax_error.sched")
    text = out + err
    assert status == 2
    lines = text.splitlines()
    assert DIAGNOSTIC.match(lines[0]).group("code") == "SP002"
    assert any("s: kernel k reads" in line for line in lines)
    assert any(line.lstrip(" |").startswith("^") for line in lines)
    assert any("= help:" in line for line in lines)


def test_warnings_do_not_change_the_exit_status(run, tmp_path):
    spec = tmp_path / "w.sched"
    spec.write_text(
        "device d\nbuffer x 1MiB on d\nstream s on d\nstream idle on d\nevent e\nnotify n\n"
        "thread t {\n  s: wait e\n  s: kernel k writes x\n}\n"
    )
    status, out, _ = run("check", spec)
    assert status == 0
    assert "warning[SP051]" in out and "warning[SP050]" in out
    status, out, _ = run("check", "--format", "json", spec)
    assert status == 0
    file = json.loads(out)["files"][0]
    assert file["status"] == "clean" and {d["code"] for d in file["diagnostics"]} == {"SP050", "SP051"}


def test_warnings_beside_findings(run, tmp_path):
    spec = tmp_path / "w.sched"
    spec.write_text(C01.read_text() + "stream idle on npu0\n")
    status, out, _ = run("check", spec)
    assert status == 1


def test_expected_findings_pass(run):
    status, out, _ = run("check", SPECS / "bug_free_in_flight.sched")
    assert status == 0
    assert "(expected)" in out


def test_buggy_example_reports_its_race_with_both_lines(run):
    status, out, _ = run("check", SPECS / "bug_missing_wait.sched")
    assert status == 1
    assert "bug_missing_wait.sched:31:3: error[SP101]: race on `grad`" in out
    assert "31 |   comm: allreduce world grad 1.5ms" in out
    assert "32 |   compute: kernel step reads grad writes w 0.5ms" in out


def test_max_statements_on_check(run):
    status, out, err = run("check", "--max-statements", "5", C20)
    assert status == 2
    assert re.search(r":10:3: error\[SP018\]: this loop runs 6 times, past the limit of 5 ", out + err)


def test_no_traceback_on_binary_file(run, tmp_path):
    spec = tmp_path / "bin.sched"
    spec.write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)))
    status, out, err = run("check", spec)
    assert status == 2
    assert DIAGNOSTIC.match((out + err).splitlines()[0]).group("code") == "SP001"
    assert "Traceback" not in out + err


# -- colour -------------------------------------------------------------------------------


def test_no_ansi_when_not_a_terminal(run, monkeypatch):
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    status, out, err = run("check", C01, E01)
    assert not ANSI.search(out + err)


def test_colour_when_forced(run, monkeypatch):
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.delenv("TERM", raising=False)
    status, out, _ = run("check", C01)
    assert ANSI.search(out)


def test_no_color_means_no_escapes_even_on_a_terminal(run, monkeypatch):
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setenv("NO_COLOR", "1")
    status, out, _ = run("check", C01)
    assert not ANSI.search(out)


def test_no_color_has_no_colour_codes(run, monkeypatch):
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setenv("NO_COLOR", "1")
    status, out, _ = run("check", C01)
    # no SGR colour parameters (30-37, 38;..., 90-97)
    assert not re.search(r"\x1b\[[0-9;]*(3[0-8]|9[0-7])[;m]", out)


# -- the documentation's examples ---------------------------------------------------------

DOCS = CONFORMANCE.parent.parent / "docs"


def _code_examples():
    text = (DOCS / "codes.md").read_text()
    sections = re.split(r"^### (SP\d{3})\b", text, flags=re.M)
    for code, body in zip(sections[1::2], sections[2::2]):
        block = re.search(r"```sched\n(.*?)```", body, re.S)
        yield code, block.group(1) if block else None


def test_codes_doc_covers_every_code():
    from checker.codes import Code

    assert [code for code, _ in _code_examples()] == [c.value for c in Code]


@pytest.mark.parametrize("code,example", [pair for pair in _code_examples() if pair[1]], ids=lambda v: v[:5])
def test_codes_doc_example_produces_its_code(run, tmp_path, code, example):
    spec = tmp_path / "example.sched"
    spec.write_text(example)
    options = example.splitlines()[0].removeprefix("# streamproof check").split() if example.startswith(
        "# streamproof check") else []
    status, out, err = run("check", "--format", "json", *options, spec)
    file = json.loads(out)["files"][0]
    codes = {d["code"] for d in file["diagnostics"]} | {f["code"] for f in file["findings"]}
    assert code in codes, (codes, out)
    expected_status = {"0": 2, "1": 1}.get(code[2], 1 if code != "SP402" else 2)
    if 50 <= int(code[2:]) < 100:  # the warnings
        # an await that nothing notifies deadlocks, a send to its own stream too; a partial
        # free's example uses what it freed; of two contradicting expectations one is unmet
        expected_status = 1 if code in ("SP052", "SP053", "SP057", "SP067") else 0
    assert status == expected_status


def test_language_doc_tour_is_clean_and_breaks_without_its_wait(run, tmp_path):
    tour = re.search(r"```\n(.*?)```", (DOCS / "language.md").read_text(), re.S).group(1)
    spec = tmp_path / "tour.sched"
    spec.write_text(tour)
    assert run("check", spec)[0] == 0
    spec.write_text("\n".join(line for line in tour.splitlines() if "worker: wait loaded" not in line))
    status, out, _ = run("check", spec)
    assert status == 1 and "error[SP101]" in out


ERROR_SPECS = [
    ("device d\nstream s on d\nthread t {\n  s9: kernel k\n}\n", "SP010", 4, 3, 2),
    ("device d\nstream s on d\nthread t {\n  s: kernel k reads\n}\n", "SP002", 4, 20, 1),
    ("device d\nbuffer x[2] 1MiB on d\nstream s on d\nthread t {\n  s: kernel k reads x[5]\n}\n", "SP013", 5, 23, 1),
    ("device d\nbuffer x 1MiB on d\nstream s on d\nthread t {\n  s: kernel k reads x[0:2MiB]\n}\n", "SP014", 5, 22, 8),
    ("device d\nstream s on d\nevent e\nthread t {\n\ts: reset e\n}\n", "SP017", 5, 2, 10),
    ("device d\nstream s on d\nthread t {\n  let v = 1 / (2 - 2)\n}\n", "SP019", 4, 16, 5),
    ("device d\r\nstream s on d\r\nthread t {\r\n  s: kernel k 1.5\r\n}\r\n", "SP002", 4, 15, 3),
    ("", "SP003", 1, 1, 0),
]


@pytest.mark.parametrize("source,code,line,column,width", ERROR_SPECS, ids=[s[1] for s in ERROR_SPECS])
def test_error_output_has_location_source_caret(run, tmp_path, source, code, line, column, width):
    spec = tmp_path / "bad.sched"
    spec.write_bytes(source.encode())
    status, out, err = run("check", spec)
    assert status == 2
    lines = (out + err).splitlines()
    head = DIAGNOSTIC.match(lines[0])
    assert head and (head["code"], int(head["line"]), int(head["column"])) == (code, line, column), lines[0]
    assert "Traceback" not in out + err
    if not source.strip():
        return
    source_line = source.splitlines()[line - 1]
    shown = next(i for i, text in enumerate(lines) if re.match(rf"^\s*{line} \| ", text))
    gutter = lines[shown].index("| ") + 2
    assert lines[shown][gutter:] == source_line.replace("\t", " ")  # a tab is shown as one space
    caret = lines[shown + 1]
    start = caret.index("^")
    assert start - gutter == column - 1
    assert caret[start:].startswith("^" * max(width, 1))


def test_endless_input_is_refused_not_read_forever(run):
    status, out, err = run("check", "/dev/zero")
    assert status == 2
    assert (out + err).startswith("/dev/zero: error[SP004]: spec is too large")


@pytest.mark.parametrize("text", [
    "expect makespan <= 1ms\n",
    "thread a { }\nexpect makespan <= 1ms\n",
    "device d { compute 1 }\nstream s on d\nthread a { sync s }\nexpect makespan <= 0ms\n",
])
@pytest.mark.parametrize("command", ["check", "optimize", "simulate"])
def test_a_program_with_no_task_has_makespan_zero(run, tmp_path, text, command):
    spec = tmp_path / "empty.sched"
    spec.write_text(text)
    status, out, err = run(command, spec)
    assert status == 0, out + err
    if command != "check":
        assert "0.000 ms" in out


@pytest.mark.parametrize("argument", ["--timeout=inf", "--budget=1e308", "--budget=nan",
                                      "--max-statements=20000001"])
def test_limits_must_be_finite(run, argument):
    with pytest.raises(SystemExit) as stopped:
        run("check", argument, CONFORMANCE.parent.parent / "specs" / "copy_compute_sync.sched")
    assert stopped.value.code == 2


@pytest.mark.parametrize("command", [("simulate", "--trace"), ("simulate", "--svg"), ("optimize", "--emit")])
def test_an_output_file_that_cannot_be_written_is_a_usage_error(run, tmp_path, command):
    spec = CONFORMANCE.parent.parent / "specs" / "copy_compute_sync.sched"
    status, _, err = run(command[0], command[1], tmp_path, spec)  # a directory
    assert status == 2 and f"streamproof {command[0]}: error: cannot write {tmp_path}: it is a directory" in err


def test_one_output_may_be_standard_output_and_the_report_moves_to_standard_error(run):
    spec = CONFORMANCE.parent.parent / "specs" / "copy_compute_sync.sched"
    status, out, err = run("simulate", "--svg", "-", spec)
    assert status == 0 and out.startswith("<svg") and "simulated makespan" in err and "makespan" not in out
    status, out, err = run("simulate", "--format", "json", "--trace", "-", spec)
    assert status == 0 and "traceEvents" in json.loads(out) and json.loads(err)["files"][0]["makespan"] > 0
    status, out, err = run("optimize", "--timeout", "2", "--emit", "-", spec)
    assert status == 0 and "thread " in out and "best execution (program)" in err
    status, out, _ = run("check", "--format", "json", "-o", "-", spec)
    assert status == 0 and json.loads(out)["files"][0]["verdict"]["races"] == []
    trace = CONFORMANCE.parent / "fixtures" / "traces" / "two_streams.json"
    status, out, err = run("import", trace, "-o", "-")
    assert status == 0 and "thread " in out and err.startswith("wrote -:")
    status, out, err = run("simulate", "--trace", "-", "--svg", "-", spec)
    assert status == 2 and out == "" and "--trace and --svg both name standard output" in err


def test_optimize_writes_the_simulated_run_where_it_has_no_exact_model(run, tmp_path):
    # Threads that share a stream have no exact model: the best run found is the simulated one,
    # and --trace/--svg write it (they wrote nothing, silently).
    spec = CONFORMANCE.parent.parent / "specs" / "identical_workers.sched"
    trace, svg = tmp_path / "t.json", tmp_path / "t.svg"
    status, out, _ = run("optimize", "--timeout", "2", "--format", "json", "--trace", trace, "--svg", svg, spec)
    assert status == 0 and json.loads(out)["files"][0]["optimal"]["program"] is False
    events = json.loads(trace.read_text())["traceEvents"]
    ends = [e["ts"] + e["dur"] for e in events if e.get("ph") == "X"]
    assert max(ends) == pytest.approx(json.loads(out)["files"][0]["makespan"]["simulated"] * 1000)
    assert svg.read_text().startswith("<svg")


def test_inputs_past_their_size_limit_are_refused(run, tmp_path, monkeypatch):
    from checker import cli
    from checker.importers import command

    big = tmp_path / "big.json"
    big.write_bytes(b" " * 4096)
    monkeypatch.setattr(command, "MAX_TRACE_BYTES", 1024)
    status, _, err = run("import", big, "-o", tmp_path / "out.sched")
    assert status == 2 and "is larger than" in err
    monkeypatch.setattr(cli, "MAX_WITNESS_BYTES", 1024)
    status, out, _ = run("replay", "--witness", big, CONFORMANCE.parent.parent / "specs" / "bug_missing_wait.sched")
    assert status == 2 and "is larger than" in out


@pytest.mark.parametrize("command,flag", [("check", "-o"), ("simulate", "--trace"), ("simulate", "--svg"),
                                          ("optimize", "--emit"), ("optimize", "--trace")])
def test_an_output_that_names_the_input_spec_is_refused_and_the_spec_kept(run, tmp_path, command, flag):
    spec = tmp_path / "spec.sched"
    text = "device d\nstream s on d\nthread t {\n  s: kernel k 1us\n}\n"
    spec.write_text(text)
    status, _, err = run(command, flag, spec, spec)
    assert status == 2 and "is an input" in err and "overwrite" in err
    assert spec.read_text() == text


def test_the_cli_default_statement_limit_is_the_lowering_s():
    from checker import cli, lower

    assert cli.DEFAULT_MAX_STATEMENTS == lower.DEFAULT_MAX_STATEMENTS


def test_an_output_that_names_a_spec_in_an_input_folder_is_refused(run, tmp_path):
    folder = tmp_path / "specs"
    folder.mkdir()
    spec = folder / "a.sched"
    spec.write_text("device d\nstream s on d\nthread t {\n  s: kernel k 1us\n}\n")
    status, _, err = run("check", folder, "-o", spec)
    assert status == 2 and "input folder" in err and spec.read_text().startswith("device d")


def test_simulate_says_when_its_run_is_one_of_several(run, tmp_path):
    # Two threads share a stream: the simulated run is one order of theirs at each instant.
    racing = tmp_path / "racing.sched"
    racing.write_text("device d { compute 2 launch 2us }\nbuffer x 1MiB on d\nstream a on d\n"
                      "thread producer { a: kernel k writes x 1ms }\n"
                      "thread consumer {\n  host prepare 3us\n  sync a\n}\n")
    status, out, _ = run("simulate", racing)
    assert status == 0 and "note: threads share stream `a` (one syncs it), so this is one run in time" in out
    status, out, _ = run("simulate", "--format", "json", racing)
    assert json.loads(out)["files"][0]["threads_race"] == "threads share stream `a` (one syncs it)"
    spec = CONFORMANCE.parent.parent / "specs" / "copy_compute_sync.sched"
    status, out, _ = run("simulate", spec)
    assert status == 0 and "one run in time of several" not in out
    status, out, _ = run("simulate", "--format", "json", spec)
    assert json.loads(out)["files"][0]["threads_race"] is None


def test_optimize_of_a_stuck_program_claims_no_simulated_makespan(run, tmp_path):
    spec = tmp_path / "stuck.sched"
    spec.write_text("device d\nstream s on d\nnotify go\nthread main {\n  s: await go\n  sync d\n  notify go\n}\n")
    status, out, _ = run("optimize", spec)
    assert status == 1 and "deadlock" in out and "note: no exact model: it uses notifies on streams\n" in out, out
    assert "are the simulated makespan" not in out


CHOOSE_TWO_RACES = ("device d0 { compute 1 }\nbuffer x 1MiB on d0\nbuffer y 1MiB on d0\nstream s on d0\n"
                    "stream s2 on d0\nevent e\nthread t {\n  s: kernel k writes x 1ms\n  choose {\n"
                    "    s: record e\n    s2: wait e\n    s2: kernel extra writes y 1ms\n  } or {\n"
                    "    host skip\n  }\n  s2: kernel r reads x 1ms\n  host h reads y\n}\n")


def test_each_branch_combinations_finding_names_it_and_a_bare_witness_can_too(run, tmp_path):
    spec = tmp_path / "choose.sched"
    spec.write_text(CHOOSE_TWO_RACES)
    status, out, _ = run("check", "--format", "json", spec)
    findings = json.loads(out)["files"][0]["findings"]
    # each race is in one branch only: the first combination's is labelled as the second's is
    assert sorted(f.get("variant") for f in findings) == ["line 9: branch 1 of 2", "line 9: branch 2 of 2"]
    second = next(f for f in findings if f["variant"].endswith("2 of 2"))
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps({"steps": second["witness"]["steps"]}))
    status, out, _ = run("replay", spec, "--witness", bare)
    assert status == 2 and '"variant": "line 9: branch 2 of 2"' in out, out  # (the help names the way)
    bare.write_text(json.dumps({"steps": second["witness"]["steps"], "variant": second["variant"]}))
    status, out, _ = run("replay", "--format", "json", spec, "--witness", bare)
    replayed = json.loads(out)["files"][0]
    assert status == 0 and replayed["replay"]["ok"] and replayed["finding"] is None


def test_a_replay_svg_names_the_steps_as_the_witness_lists_them(run, tmp_path):
    spec = SPECS / "bug_missing_wait.sched"
    found = tmp_path / "found.json"
    found.write_text(run("check", "--format", "json", spec)[1])
    status, _, _ = run("replay", spec, "--witness", found, "--svg", tmp_path / "g.svg")
    svg = (tmp_path / "g.svg").read_text()
    # the witness: 7. start backward, 8. end backward, 10. start step, 12. start allreduce
    assert status == 0 and "compute: kernel backward (line 28): steps 7-8</title>" in svg
    assert "comm: allreduce world (line 31): step 12</title>" in svg


def test_replayed_steps_name_their_loop_iteration_as_the_check_witness_does(run, tmp_path):
    """One line's steps in two iterations are told apart in `replay`'s text as in `check`'s."""
    spec = tmp_path / "loop.sched"
    spec.write_text("device d { compute 2 }\nbuffer x[2] 1MiB on d\nstream s on d\nstream t on d\n"
                    "thread h {\n  for i in 0..2 {\n    s: kernel w writes x[i] 1ms\n"
                    "    t: kernel r reads x[i] 1ms\n  }\n}\n")
    found = tmp_path / "found.json"
    found.write_text(run("check", "--format", "json", spec)[1])
    status, checked, _ = run("check", spec)
    assert status == 1 and "[i=0]" in checked
    status, out, _ = run("replay", spec, "--witness", found)
    steps = [line for line in out.splitlines() if ". issue " in line or ". start " in line]
    assert status == 0 and steps and all(line.rstrip(" *").endswith(("[i=0]", "[i=1]")) for line in steps), out
    assert "s: kernel w [i=0]" in out


def test_sub_microsecond_times_are_not_shown_as_zero(run, tmp_path):
    # Text shows 3 decimals of a millisecond; a 400 ns makespan must still read as 400 ns.
    spec = tmp_path / "short.sched"
    spec.write_text("device g { compute 2 }\nbuffer a 1KB on g\nbuffer b 1KB on g\nstream s on g\n"
                    "stream t on g\nthread h {\n  s: kernel k1 writes a 300ns\n  t: kernel k2 writes b 0.4us\n}\n")
    status, out, _ = run("simulate", spec)
    assert status == 0 and "simulated makespan 0.000400 ms" in out and "busy 0.000700 ms" in out, out
    status, out, _ = run("optimize", spec)
    assert status == 0 and "best execution (program) 0.000400 ms (optimal)" in out, out
    from checker.messages import ms_text
    assert [ms_text(v) for v in (0, 1.5, 0.1, 0.05, 0.0004, 0.000001)] == [
        "0.000 ms", "1.500 ms", "0.100 ms", "0.0500 ms", "0.000400 ms", "0.000001 ms"]


def test_locations_and_source_are_not_read_as_emoji_codes(run, tmp_path):
    # `:100:` and `:fire:` are rich emoji codes: a location on line 100, a file name or a
    # comment with one must come out as written, in text and JUnit alike
    spec = tmp_path / "a:fire:b.sched"
    spec.write_text("device d\nbuffer x 1MiB on d\nstream s1 on d\nstream s2 on d\nthread main {\n"
                    + "  # pad\n" * 94 + "  s1: kernel a writes x 1ms  # see :bug: and :warning:\n  s2: kernel b writes x 1ms\n}\n")
    for options in ((), ("--color", "always"), ("--format", "junit")):
        status, out, _ = run("check", *options, spec)
        assert status == 1
        assert f"{spec}:100:3:" in out and "# see :bug: and :warning:" in out, out[:400]
        assert not any(ord(ch) > 0x2000 for ch in out), [ch for ch in out if ord(ch) > 0x2000][:5]


def test_an_interrupt_while_the_parser_is_built_exits_130_without_a_traceback(monkeypatch, capsys):
    from checker import cli

    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "_parser", interrupted)
    assert cli.main(["check", "x.sched"]) == 130
    assert capsys.readouterr().err == "streamproof: interrupted\n"


@pytest.mark.skipif(not __import__("os").path.exists("/dev/full"), reason="needs /dev/full")
def test_a_full_disk_on_standard_output_is_an_environment_error_not_a_bug():
    import subprocess
    import sys

    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "checker", "check", "--format", "json",
                               str(SPECS / "bug_missing_wait.sched")], stdout=full, stderr=subprocess.PIPE, text=True)
    assert done.returncode == 2
    assert done.stderr == "streamproof: error: cannot write standard output: No space left on device\n"


def test_a_loop_race_names_its_elements_and_those_no_expectation_asks_for(run, tmp_path):
    spec = tmp_path / "loop.sched"
    spec.write_text("device d\nbuffer x[3] 1MiB on d\nstream s1 on d\nstream s2 on d\nthread t {\n"
                    "  for i in 0..3 {\n    s1: kernel a writes x[i]\n    s2: kernel b reads x[i]\n  }\n}\n"
                    "expect race on x[1]\n")
    status, out, _ = run("check", spec)
    assert status == 1 and "SP401" not in out, out
    assert "= note: the memories it touches: `x[0]`, `x[1]`, `x[2]` (`elements` in `--format json`)" in out
    assert "= note: no `expect` line asks for it on `x[0]`, `x[2]`, so it fails the check there" in out


def test_simulate_names_the_thread_that_syncs_a_stream_it_does_not_use(run, tmp_path):
    # each rank enqueues on its own streams; a rank's `sync all` also waits for the other's
    spec = tmp_path / "ranks.sched"
    spec.write_text("device gpu[2]\nbuffer g[2] 1MiB on gpu\nstream c[2] on gpu\ncomm w = { c }\n"
                    "thread rank[2] {\n  c[rank]: allreduce w g[rank] 1ms\n  sync all\n}\n")
    status, out, _ = run("simulate", spec)
    assert status == 0 and "note: threads share stream `c[0]` (`rank[1]` syncs it, and `rank[0]` enqueues" in out


def test_a_race_between_byte_ranges_names_the_bytes_they_share(run, tmp_path):
    spec = tmp_path / "ranges.sched"
    spec.write_text("device d\nbuffer b 1KiB on d\nstream s1 on d\nstream s2 on d\nthread t {\n"
                    "  s1: kernel a writes b[0:512]\n  s2: kernel b reads b[256:768]\n"
                    "  s1: kernel c writes b[0:100], b[200:300]\n  s2: kernel d reads b\n}\n")
    status, out, _ = run("check", spec)
    assert status == 1
    assert "race on `b[256:512]`: s1: kernel a (line 6) and s2: kernel b (line 7)" in out
    # (two pieces apart: the buffer's name alone, which claims no byte between them)
    assert "race on `b`: s1: kernel c (line 8) and s2: kernel d (line 9)" in out


def test_an_exchange_between_ranks_is_fixed_with_the_peer_index_it_reads(run, tmp_path):
    head = "device gpu[2]\nstream s[2] on gpu\nbuffer x[2] 1MiB on gpu\n"
    spec = tmp_path / "exchange.sched"
    spec.write_text(head + "thread rank[2] {\n  s[rank]: kernel produce writes x[rank]\n"
                    "  s[rank]: kernel consume reads x[1 - rank]\n}\n")
    status, out, _ = run("check", spec)
    assert status == 1
    assert ("help: give each rank an event and a notify of its own (`event E[2]`, `notify N[2]`): `record E[rank]` "
            "on `s[rank]` after the first, then `notify N[rank]`; `await N[1 - rank]`, then `wait E[1 - rank]` on "
            "`s[rank]` before the second") in out, out
    fixed = tmp_path / "fixed.sched"  # (the help, applied as it reads)
    fixed.write_text(head + "event E[2]\nnotify N[2]\nthread rank[2] {\n  s[rank]: kernel produce writes x[rank]\n"
                     "  s[rank]: record E[rank]\n  notify N[rank]\n  await N[1 - rank]\n  s[rank]: wait E[1 - rank]\n"
                     "  s[rank]: kernel consume reads x[1 - rank]\n}\n")
    for engine in ((), ("--exhaustive",)):
        status, out, _ = run("check", *engine, fixed)
        assert status == 0, out


def test_a_process_is_told_to_sync_its_own_stream_not_another_process_s(run, tmp_path):
    head = ("device gpu0 { runtime cuda }\nbuffer dev 4MiB on gpu0\nbuffer shm 4MiB on host pinned\n"
            "stream ps on gpu0\nnotify ready\n")
    consumer = "thread consumer process {\n  await ready\n  host parse reads shm\n}\n"
    spec = tmp_path / "shm.sched"
    spec.write_text(head + "thread producer process {\n  ps: copy shm <- dev 1ms\n  notify ready\n}\n" + consumer)
    status, out, _ = run("check", spec)
    assert status == 1
    assert ("a process cannot sync another's stream: have `producer` `sync ps` before `notify ready` (line 8)"
            in out), out
    fixed = tmp_path / "fixed.sched"  # (the help, applied as it reads)
    fixed.write_text(head + "thread producer process {\n  ps: copy shm <- dev 1ms\n  sync ps\n  notify ready\n}\n"
                     + consumer)
    status, out, _ = run("check", fixed)
    assert status == 0 and "SP101" not in out and "SP062" not in out, out
    foreign = tmp_path / "foreign.sched"  # (the consumer syncing the producer's stream: no handle to pass)
    foreign.write_text(spec.read_text().replace("  await ready\n", "  await ready\n  sync ps\n"))
    status, out, _ = run("check", foreign)
    assert "warning[SP062]: stream `ps` is used by process `producer` and by process `consumer`" in out, out
    assert "a sync of it by another process" in out
