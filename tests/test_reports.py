"""The CI formats: SARIF (valid against the SARIF 2.1.0 schema, as GitHub code scanning reads
it) and JUnit XML (as Jenkins reads it), on the example specs, through the commands that
docs/ci.md tells a CI server to run."""

from __future__ import annotations

import json
import re
import shlex
import xml.etree.ElementTree as ET

import pytest

from conftest import CONFORMANCE, SPECS, HERE
from checker.codes import Code

jsonschema = pytest.importorskip("jsonschema")

SCHEMA = json.loads((HERE / "fixtures" / "sarif-schema-2.1.0.json").read_text())
ROOT = HERE.parent
CI_DOC = (ROOT / "docs" / "ci.md").read_text()


def valid_sarif(log: dict) -> dict:
    errors = sorted(jsonschema.Draft4Validator(SCHEMA).iter_errors(log), key=lambda e: list(e.path))
    assert not errors, [f"{list(e.path)}: {e.message}" for e in errors[:5]]
    return log


def results_of(log: dict, rule: str) -> list[dict]:
    return [r for r in log["runs"][0]["results"] if r["ruleId"] == rule]


# -- SARIF ----------------------------------------------------------------------------------


def test_schema_fixture_rejects_what_sarif_forbids():
    validator = jsonschema.Draft4Validator(SCHEMA)
    assert not validator.is_valid({"version": "2.0.0", "runs": []})
    assert not validator.is_valid({"version": "2.1.0", "runs": [{"tool": {"driver": {}}}]})  # driver needs a name
    assert not validator.is_valid({"version": "2.1.0", "runs": [{"tool": {"driver": {"name": "x"}},
                                                                 "results": [{"ruleId": "X"}]}]})  # no message
    assert validator.is_valid({"version": "2.1.0", "runs": [{"tool": {"driver": {"name": "x"}}, "results": []}]})


def test_sarif_of_every_example_and_conformance_spec_is_valid(run, monkeypatch):
    monkeypatch.chdir(ROOT)
    status, out, _ = run("check", "--format", "sarif", "specs", "tests/conformance")
    assert status == 2  # the conformance suite has invalid specs on purpose
    log = valid_sarif(json.loads(out))
    run_ = log["runs"][0]
    rules = run_["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == [c.value for c in Code]
    for rule in rules:
        assert rule["shortDescription"]["text"] and rule["fullDescription"]["text"] and rule["help"]["text"]
    for result in run_["results"]:
        assert rules[result["ruleIndex"]]["id"] == result["ruleId"]
        for location in result["locations"] + result.get("relatedLocations", []):
            uri = location["physicalLocation"]["artifactLocation"]["uri"]
            assert not uri.startswith(("/", "file:")), uri  # relative to the repository root
            assert (ROOT / uri).is_file()
    assert {r["ruleId"] for r in run_["results"]} >= {"SP101", "SP201", "SP010", "SP002"}


def test_sarif_race_has_both_accesses_and_the_witness(run, monkeypatch):
    monkeypatch.chdir(ROOT)
    status, out, _ = run("check", "--format", "sarif", "specs/bug_missing_wait.sched")
    assert status == 1
    log = valid_sarif(json.loads(out))
    (race,) = results_of(log, "SP101")
    assert race["level"] == "error" and "race on `grad`" in race["message"]["text"]
    (first,) = race["locations"]
    assert first["physicalLocation"]["artifactLocation"]["uri"] == "specs/bug_missing_wait.sched"
    assert first["physicalLocation"]["region"] == {"startLine": 31, "startColumn": 3, "endLine": 31, "endColumn": 35}
    (second,) = race["relatedLocations"]
    assert second["physicalLocation"]["region"]["startLine"] == 32
    assert second["message"]["text"].startswith("second access: compute: kernel step")
    _, out, _ = run("check", "--format", "json", "specs/bug_missing_wait.sched")
    witness = json.loads(out)["files"][0]["findings"][0]["witness"]["timeline"]
    steps = race["codeFlows"][0]["threadFlows"][0]["locations"]
    assert [s["location"]["message"]["text"] for s in steps] == [
        f"{n}. {step['step']}: {step['what']}" for n, step in enumerate(witness, start=1)]
    assert [s["location"]["physicalLocation"]["region"]["startLine"] for s in steps] == [w["line"] for w in witness]
    assert {s["importance"] for s in steps if s["location"]["physicalLocation"]["region"]["startLine"] in (31, 32)} == {
        "essential"}
    assert "suppressions" not in race
    assert race["partialFingerprints"]["streamproof/v1"]


def test_sarif_expected_findings_are_suppressed_and_fingerprints_are_stable(run, monkeypatch, tmp_path):
    monkeypatch.chdir(ROOT)
    _, out, _ = run("check", "--format", "sarif", "specs/bug_free_in_flight.sched")
    log = valid_sarif(json.loads(out))
    results = log["runs"][0]["results"]
    assert results and all(r["suppressions"][0]["kind"] == "inSource" for r in results)
    assert all(r["level"] == "error" for r in results)  # (an expected finding keeps its level)
    # Moving the statements down keeps the identity of the findings (what code scanning tracks).
    moved = tmp_path / "specs"
    moved.mkdir()
    (moved / "bug_free_in_flight.sched").write_text("# a comment\n\n" + (SPECS / "bug_free_in_flight.sched").read_text())
    monkeypatch.chdir(tmp_path)
    _, out2, _ = run("check", "--format", "sarif", "specs/bug_free_in_flight.sched")
    results2 = json.loads(out2)["runs"][0]["results"]
    assert [r["partialFingerprints"] for r in results2] == [r["partialFingerprints"] for r in results]
    assert [r["locations"][0]["physicalLocation"]["region"]["startLine"] for r in results2] == [
        r["locations"][0]["physicalLocation"]["region"]["startLine"] + 2 for r in results]


def test_sarif_fingerprints_of_diagnostics_do_not_hold_the_lines_they_name(run, monkeypatch, tmp_path):
    # SP069's message names the lines of both comms' calls: a comment above moves them
    original = HERE / "peers" / "mbi30_collp2p_separate_comms_streams_ok.sched"
    moved = tmp_path / original.name
    moved.write_text("# a comment\n" + original.read_text())
    monkeypatch.chdir(tmp_path)
    prints = []
    for text in (original.read_text(), moved.read_text()):
        moved.write_text(text)
        _, out, _ = run("check", "--format", "sarif", original.name)
        (result,) = results_of(json.loads(out), "SP069")
        prints.append((result["partialFingerprints"], result["message"]["text"]))
    assert prints[0][0] == prints[1][0] and prints[0][1] != prints[1][1]


def test_junit_classnames_do_not_depend_on_how_the_path_is_spelled(run, monkeypatch):
    monkeypatch.chdir(ROOT)
    names = set()
    for path in ("specs/bug_missing_wait.sched", "./specs/bug_missing_wait.sched", "specs//bug_missing_wait.sched",
                 "specs/../specs/bug_missing_wait.sched", str(SPECS / "bug_missing_wait.sched")):
        _, out, _ = run("check", "--format", "junit", path)
        names |= {c.get("classname") for c in ET.fromstring(out).iter("testcase")}
    assert names == {"specs.bug_missing_wait"}


def test_sarif_gives_two_races_of_the_same_statement_text_two_identities(run, tmp_path):
    spec = tmp_path / "twice.sched"
    spec.write_text("device g\nbuffer x 1MiB on g\nstream a on g\nstream b on g\nthread t {\n"
                    "  a: kernel k writes x\n  b: kernel k writes x\n  b: kernel k writes x\n}\n")
    _, out, _ = run("check", "--format", "sarif", spec)
    races = results_of(valid_sarif(json.loads(out)), "SP101")
    lines = [[loc["physicalLocation"]["region"]["startLine"] for loc in r["locations"] + r.get("relatedLocations", [])]
             for r in races]
    assert len(races) == 2, lines
    fingerprints = [r["partialFingerprints"]["streamproof/v1"] for r in races]
    assert len(set(fingerprints)) == 2 and fingerprints[1] == fingerprints[0] + ":2"


def test_sarif_rule_levels_are_the_codes_severities():
    from checker.report.sarif import rules

    levels = {rule["id"]: rule["defaultConfiguration"]["level"] for rule in rules()}
    warnings = {code for code in levels if 50 <= int(code[2:]) < 100}
    assert {code for code, level in levels.items() if level == "warning"} == warnings
    assert "SP061" in warnings and "SP101" not in warnings
    assert levels["SP301"] == "error"  # (an unknown answer fails the run; a warning under --allow-unknown)


def test_sarif_deadlock_lists_the_stuck_statements(run):
    status, out, _ = run("check", "--format", "sarif", CONFORMANCE / "c16_single_hw_queue_deadlock.sched")
    log = valid_sarif(json.loads(out))
    (deadlock,) = results_of(log, "SP201")
    assert deadlock["relatedLocations"] and all("stuck: " in loc["message"]["text"]
                                                for loc in deadlock["relatedLocations"])
    lines = [loc["physicalLocation"]["region"]["startLine"] for loc in deadlock["relatedLocations"]]
    assert len(lines) == len(set(lines))  # each stuck statement once


def test_sarif_for_an_unreadable_file_and_a_syntax_error(run, tmp_path):
    broken = tmp_path / "broken.sched"
    broken.write_text("device d\nstream s on d\nthread t {\n  s: kernel k reads\n}\n")
    status, out, _ = run("check", "--format", "sarif", tmp_path / "missing.sched", broken)
    assert status == 2
    log = valid_sarif(json.loads(out))
    (unreadable,) = results_of(log, "SP001")
    assert unreadable["locations"][0]["physicalLocation"]["region"] == {"startLine": 1}  # the whole file
    (syntax,) = results_of(log, "SP002")
    assert syntax["locations"][0]["physicalLocation"]["region"]["startLine"] == 4
    assert log["runs"][0]["invocations"][0]["exitCode"] == 2
    # outside the working directory: an absolute URI, with no base to resolve it against
    for artifact in [r["locations"][0]["physicalLocation"]["artifactLocation"] for r in log["runs"][0]["results"]]:
        assert artifact["uri"].startswith("file:///") and "uriBaseId" not in artifact


def test_sarif_regions_are_the_spans_json_gives_an_empty_one_too(run, tmp_path):
    # an empty file: an empty region at its start (an insertion point), as JSON gives it
    empty = tmp_path / "empty.sched"
    empty.write_text("")
    _, out, _ = run("check", "--format", "sarif", empty)
    (result,) = results_of(valid_sarif(json.loads(out)), "SP003")
    assert result["locations"][0]["physicalLocation"]["region"] == {
        "startLine": 1, "startColumn": 1, "endLine": 1, "endColumn": 1}
    _, out, _ = run("check", "--format", "json", empty)
    (diagnostic,) = json.loads(out)["files"][0]["diagnostics"]
    assert (diagnostic["line"], diagnostic["column"], diagnostic["end_line"], diagnostic["end_column"]) == (1, 1, 1, 1)


def test_sarif_places_every_result_on_a_line(run, tmp_path, monkeypatch):
    """An unknown answer about no statement (here the solver may do next to nothing) is on line 1:
    code scanning places every result on a line of a file under the checkout."""
    monkeypatch.chdir(CONFORMANCE)
    status, out, _ = run("check", "--format", "sarif", "--budget", "1e-9", "--rlimit", "1",
                         "c19_two_threads_rerecord.sched")
    log = valid_sarif(json.loads(out))
    assert status == 1 and results_of(log, "SP301")
    for result in log["runs"][0]["results"]:
        physical = result["locations"][0]["physicalLocation"]
        assert physical["region"]["startLine"] >= 1
        assert physical["artifactLocation"] == {"uri": "c19_two_threads_rerecord.sched", "uriBaseId": "%SRCROOT%",
                                                "index": 0}


def test_github_workflow_of_the_docs(run, monkeypatch, tmp_path):
    """The workflow's command writes SARIF that the upload step's file names, valid and with
    the example race, and fails the job (status 1) as the last step expects."""
    workflow = re.search(r"```yaml\n(name: streamproof.*?)```", CI_DOC, re.S).group(1)
    command = re.search(r"run: (streamproof check .*)", workflow).group(1)
    sarif_file = re.search(r"sarif_file: (\S+)", workflow).group(1)
    assert "upload-sarif" in workflow and "security-events: write" in workflow
    try:
        import yaml
    except ImportError:
        yaml = None
    if yaml is not None:
        steps = yaml.safe_load(workflow)["jobs"]["check"]["steps"]
        assert any(step.get("uses", "").startswith("github/codeql-action/upload-sarif") for step in steps)
    argv = shlex.split(command)
    assert argv[0] == "streamproof" and sarif_file in argv
    monkeypatch.chdir(tmp_path)
    (tmp_path / "specs").symlink_to(SPECS)
    status, out, _ = run(*argv[1:])
    assert status == 1 and out == ""
    log = valid_sarif(json.loads((tmp_path / sarif_file).read_text()))
    unsuppressed = [r for r in log["runs"][0]["results"] if not r.get("suppressions")]
    assert [(r["ruleId"], r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]) for r in unsuppressed] == [
        ("SP101", "specs/bug_missing_wait.sched")]


# -- JUnit ----------------------------------------------------------------------------------


def expectations_of(path) -> int:
    return sum(1 for line in path.read_text().splitlines() if line.startswith("expect "))


def test_junit_counts_one_testcase_per_file_and_expectation(run, monkeypatch):
    monkeypatch.chdir(ROOT)
    status, out, _ = run("check", "--format", "junit", "specs")
    assert status == 1
    root = ET.fromstring(out)
    assert root.tag == "testsuites"
    (suite,) = root.findall("testsuite")
    specs = sorted(SPECS.glob("*.sched"))
    cases = suite.findall("testcase")
    assert len(cases) == sum(expectations_of(p) + 1 for p in specs) == int(suite.get("tests"))
    failed = [c for c in cases if c.find("failure") is not None]
    assert [(c.get("classname"), c.get("name")) for c in failed] == [("specs.bug_missing_wait", "no findings")]
    assert suite.get("failures") == "1" and suite.get("errors") == "0"
    report = failed[0].find("failure").text
    assert "bug_missing_wait.sched:31:3: error[SP101]: race on `grad`" in report and "\x1b[" not in report
    names = {c.get("name") for c in cases if c.get("classname") == "specs.bug_free_in_flight"}
    assert names == {"expect use-after-free on workspace", "expect race on workspace", "no unexpected findings"}


def test_junit_unmet_expectation_and_invalid_spec(run, tmp_path):
    unmet = tmp_path / "unmet.sched"
    unmet.write_text("device d\nstream s on d\nbuffer x 1MiB on d\nthread t {\n  s: kernel k writes x\n}\n"
                     "expect race on x\nexpect no deadlock\n")
    invalid = tmp_path / "invalid.sched"
    invalid.write_text("device d\nstream s on d\nthread t {\n  s9: kernel k\n}\n")
    status, out, _ = run("check", "--format", "junit", unmet, invalid)
    assert status == 2
    suite = ET.fromstring(out).find("testsuite")
    cases = {(c.get("classname").rsplit(".", 1)[-1], c.get("name")): c for c in suite.findall("testcase")}
    assert set(cases) == {("unmet", "expect race on x"), ("unmet", "expect no deadlock"),
                          ("unmet", "no unexpected findings"), ("invalid", "no findings")}
    failure = cases[("unmet", "expect race on x")].find("failure")
    assert failure.get("type") == "SP401" and "expectation not met" in failure.get("message")
    assert cases[("unmet", "expect race on x")].get("line") == "7"
    assert cases[("unmet", "expect no deadlock")].find("failure") is None
    error = cases[("invalid", "no findings")].find("error")
    assert error.get("type") == "SP010" and "error[SP010]" in error.text
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("4", "1", "1")


@pytest.mark.parametrize("expectations, open_catch_all", [
    ("expect race on act\n", True),
    ("expect no race\nexpect no use-after-free\nexpect no deadlock\nexpect no mismatch\n", False),
])
def test_junit_a_search_stopped_early_leaves_no_unexpected_findings_open(run, tmp_path, expectations, open_catch_all):
    """An unknown about every question (the search stopped) leaves "no unexpected findings"
    undecided too, unless `expect no ...` lines cover every question."""
    spec = tmp_path / "stopped.sched"
    spec.write_text("device d { compute 2 }\nbuffer act 2MiB on d\nbuffer other 2MiB on d\nstream main on d\n"
                    "stream side on d\nthread t {\n  main: kernel fwd writes act\n  side: kernel clear writes act\n"
                    "  side: kernel use reads other\n  free other\n}\n" + expectations)
    status, out, _ = run("check", "--format", "junit", "--exhaustive", "--max-states", "3", "--allow-unknown", spec)
    cases = {c.get("name"): c for c in ET.fromstring(out).find("testsuite").findall("testcase")}
    assert (cases["no unexpected findings"].find("skipped") is not None) is open_catch_all


UNDECIDED = CONFORMANCE / "c19_two_threads_rerecord.sched"
"""Threads racing to re-record an event: with no solver time at all, its questions stay open."""


@pytest.mark.parametrize("allow_unknown", [False, True])
def test_junit_expectations_left_open_by_unknowns_never_pass(run, tmp_path, allow_unknown):
    spec = tmp_path / "open.sched"
    spec.write_text(UNDECIDED.read_text() + "expect no race\nexpect race\nexpect no deadlock\n")
    flags = ["--budget", "1e-9", "--rlimit", "1"] + (["--allow-unknown"] if allow_unknown else [])
    status, out, _ = run("check", "--format", "junit", *flags, spec)
    suite = ET.fromstring(out).find("testsuite")
    outcome = "skipped" if allow_unknown else "error"
    for case in suite.findall("testcase"):
        if case.get("name").startswith("expect") and "race" in case.get("name"):  # none shown either way
            element = case.find(outcome)
            assert element is not None and element.get("type") == "SP301", case.get("name")
            assert element.get("message").startswith("SP301: undecided: ")
        elif case.get("name").startswith("expect"):
            # Nothing here can block, so the deadlock question is decided: the race questions
            # the budget left unasked are SP301s about races only.
            assert list(case) == [], case.get("name")
    assert int(suite.get("skipped" if allow_unknown else "errors")) == 2
    assert status == (0 if allow_unknown else 1)
    _, out, _ = run("check", "--format", "json", *flags, spec)
    (file,) = json.loads(out)["files"]
    first = len(UNDECIDED.read_text().splitlines()) + 1
    assert file["undecided_expectations"] == [first, first + 1]
    unknowns = [f for f in file["findings"] if f["code"] == "SP301"]
    assert unknowns and all(len(f["locations"]) == 2 and f["detail"]["about"] == "race" for f in unknowns)
    assert not [d for d in file["diagnostics"] if d["code"] == "SP401"]  # `expect race` is not "not met"


@pytest.mark.parametrize("allow_unknown", [False, True])
def test_junit_catch_all_left_open_by_unknowns_never_passes(run, tmp_path, allow_unknown):
    # No `expect` line: the unknown answers leave "no findings" itself undecided.
    spec = tmp_path / "open.sched"
    spec.write_text(UNDECIDED.read_text())
    flags = ["--budget", "1e-9", "--rlimit", "1"] + (["--allow-unknown"] if allow_unknown else [])
    status, out, _ = run("check", "--format", "junit", *flags, spec)
    (case,) = ET.fromstring(out).find("testsuite").findall("testcase")
    element = case.find("skipped" if allow_unknown else "error")
    assert case.get("name") == "no findings" and element is not None and element.get("type") == "SP301"
    assert element.get("message").startswith("SP301: undecided (")
    assert status == (0 if allow_unknown else 1)


def test_junit_testcases_pass_exactly_when_the_file_passes(run, monkeypatch):
    monkeypatch.chdir(ROOT)
    status, out, _ = run("check", "--format", "json", "specs", "tests/conformance")
    passed = {f["path"]: f["passed"] for f in json.loads(out)["files"]}
    _, out, _ = run("check", "--format", "junit", "specs", "tests/conformance")
    failing: dict[str, bool] = {}
    for case in ET.fromstring(out).iter("testcase"):
        bad = case.find("failure") is not None or case.find("error") is not None
        failing[case.get("file")] = failing.get(case.get("file"), False) or bad
    assert failing == {path: not ok for path, ok in passed.items()}


def test_jenkins_command_of_the_docs(run, monkeypatch, tmp_path):
    command = re.search(r"sh '(streamproof check [^|']*?)\s*(\|\| true)?'", CI_DOC).group(1)
    output = re.search(r"junit '([^']+)'", CI_DOC).group(1)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "specs").symlink_to(SPECS)
    status, out, _ = run(*shlex.split(command)[1:])
    assert status == 1
    suite = ET.parse(tmp_path / output).getroot().find("testsuite")
    assert int(suite.get("failures")) == 1 and int(suite.get("tests")) > 11


def test_output_file_for_text_has_no_colour(run, tmp_path, monkeypatch):
    monkeypatch.setenv("FORCE_COLOR", "1")
    target = tmp_path / "report.txt"
    status, out, _ = run("check", "--output", target, SPECS / "bug_missing_wait.sched")
    assert status == 1 and out == ""
    text = target.read_text()
    assert "error[SP101]" in text and "\x1b[" not in text and text.rstrip().splitlines()[-1].startswith("failed:")


def test_unwritable_output_is_a_usage_error(run, tmp_path):
    status, out, err = run("check", "--format", "sarif", "--output", tmp_path / "no" / "such" / "dir.sarif",
                           SPECS / "copy_compute_sync.sched")
    assert status == 2 and "cannot write" in err and "Traceback" not in err
    # said before any work: a spec that would take the solver minutes ends at once
    status, out, err = run("check", "--output", tmp_path / "no" / "report.json", "--format", "json",
                           ROOT / "tests" / "fixtures" / "rand3x100_3.sched")
    assert status == 2 and out == "" and f"there is no directory {tmp_path / 'no'}" in err


# -- pre-commit -----------------------------------------------------------------------------


def test_pre_commit_hook_runs_the_checker_on_changed_specs(run):
    yaml = pytest.importorskip("yaml")
    (hook,) = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    assert hook["id"] == "streamproof" and hook["language"] == "python"
    assert re.search(hook["files"], "specs/a.sched") and not re.search(hook["files"], "specs/a.py")
    tomllib = pytest.importorskip("tomllib")
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    argv = shlex.split(hook["entry"])
    assert argv[0] in scripts
    # pre-commit appends the staged files that match `files`
    status, out, _ = run(*argv[1:], SPECS / "copy_compute_sync.sched", SPECS / "bug_free_in_flight.sched")
    assert status == 0 and out == ""
    status, out, _ = run(*argv[1:], SPECS / "copy_compute_sync.sched", SPECS / "bug_missing_wait.sched")
    assert status == 1 and "error[SP101]" in out


def test_large_json_reports_are_compact_and_say_the_same(run, monkeypatch):
    import checker.report.json as json_report

    spec = SPECS / "bug_missing_wait.sched"
    status, pretty, _ = run("check", spec, "--format", "json")
    assert status == 1 and "\n " in pretty  # small: indented for people
    monkeypatch.setattr(json_report, "PRETTY_UP_TO", 100)
    status, compact, _ = run("check", spec, "--format", "json")
    assert status == 1 and compact.count("\n") == 1  # large: one line, written by the C encoder
    assert json.loads(compact) == json.loads(pretty)


def test_code_frame_shows_the_line_the_parser_counted(run, tmp_path):
    # A form feed line, a U+2028 inside a comment, a form feed inside a statement and a CRLF:
    # only \n ends a line for the parser, so the frame must show the same line, caret aligned.
    spec = tmp_path / "odd.sched"
    spec.write_text("device d\n\x0c\n# a\u2028b\nstream s on d\r\nthread t {\n  s: kernel\x0ck writes y\n}\n",
                    newline="")
    status, out, _ = run("check", spec)
    assert status == 2
    lines = out.splitlines()
    shown = next(i for i, line in enumerate(lines) if line.startswith("6 |"))
    assert lines[shown] == "6 |   s: kernel k writes y"
    assert lines[shown + 1].index("^") == lines[shown].index("y")


def test_witness_lines_name_their_loop_iteration(run, tmp_path):
    spec = tmp_path / "loop.sched"
    spec.write_text("device d\nbuffer x 1MiB on d\nstream s[2] on d\nthread t {\n"
                    "  for i in 0..3 {\n    s[i % 2]: kernel k writes x\n  }\n}\n")
    status, out, _ = run("check", spec)
    assert status == 1
    steps = [line for line in out.splitlines() if re.match(r"\s+\d+\. (issue|start|end) ", line)]
    assert steps and all(re.search(r"kernel k \[i=\d\]$", line) for line in steps)
    assert len({line.rsplit("[", 1)[1] for line in steps}) == 2  # two iterations, told apart


def test_statements_lowered_from_one_are_marked_once(run):
    # `free` under `runtime cuda` is a device sync and a free, both on line 14 and both stuck.
    spec = HERE / "semantics" / "s15_cudafree_against_spinning_allreduce.sched"
    status, out, _ = run("check", spec)
    assert status == 1
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("14 |"))
    assert "stuck here" in lines[at + 1] and not lines[at + 2].strip(" |^").startswith("stuck here")


def test_show_prints_a_title_s_control_characters_as_spaces(run, tmp_path):
    spec = tmp_path / "esc.sched"
    spec.write_text('spec "a\x1b[31mred\u202ex"\ndevice d\n')
    status, out, _ = run("show", spec)
    assert status == 0
    assert out.splitlines()[0].endswith(": a [31mred x")


BROKEN = "device d\nstream s on d\nthread t {\n  s: kernel k reads\n}\n"


def _named(directory, name: bytes, text: str = BROKEN) -> str:
    """A spec whose file name is these bytes (skipped where the file system refuses them)."""
    import os

    path = os.path.join(os.fsdecode(bytes(directory)), os.fsdecode(name))
    try:
        with open(path, "w") as file:
            file.write(text)
    except (OSError, UnicodeError):
        pytest.skip("the file system takes no such name")
    return os.fsdecode(name)


def test_sarif_uri_holds_the_bytes_of_a_name_that_is_not_utf8():
    import os
    from pathlib import Path

    from checker.report.sarif import _uri

    base = Path("/base")
    assert _uri(os.fsdecode(b"/base/d/bad\xffname.sched"), base) == "d/bad%FFname.sched"
    assert _uri(os.fsdecode(b"/elsewhere/bad\xff.sched"), base) == "file:///elsewhere/bad%FF.sched"


def test_a_file_name_that_is_not_utf8_in_every_format(run, tmp_path, monkeypatch):
    """Every report names it alike, with the byte as `\\xff` (a lone surrogate is not UTF-8:
    SARIF crashed, JSON held an escape that strict readers refuse, text could not be written
    to a strict UTF-8 stream); the SARIF location holds the name's bytes."""
    name = _named(tmp_path, b"bad\xffname.sched")
    shown = "bad\\xffname.sched"
    monkeypatch.chdir(tmp_path)
    status, out, err = run("check", "--format", "sarif", name)
    assert status == 2 and err == ""
    log = valid_sarif(json.loads(out))
    (result,) = results_of(log, "SP002")
    assert result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "bad%FFname.sched"
    status, out, _ = run("check", "--format", "json", name)
    assert status == 2 and "\\udc" not in out and json.loads(out)["files"][0]["path"] == shown
    status, out, _ = run("check", "--format", "junit", name)
    assert status == 2 and f'file="{shown}"' in out
    for command in ("check", "show"):
        status, out, _ = run(command, name)
        out.encode("utf-8")  # (no lone surrogate)
        assert status == 2 and out.startswith(f"{shown}:4:"), out
    # Checked in worker processes, the report carries the file's name back with it.
    _named(tmp_path, b"clean.sched", (SPECS / "copy_compute_sync.sched").read_text())
    status, out, _ = run("check", "-j", "2", "--format", "sarif", ".")
    (result,) = results_of(valid_sarif(json.loads(out)), "SP002")
    assert result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "bad%FFname.sched"


def test_a_file_name_s_control_characters_are_printed_as_spaces(run, tmp_path, monkeypatch):
    """As a code frame prints them: a name cannot send the terminal an escape sequence."""
    name = _named(tmp_path, b"a\x1b[31mred\tname.sched")
    monkeypatch.chdir(tmp_path)
    for command in ("check", "show", "simulate", "optimize"):
        status, out, _ = run(command, name)
        assert status == 2 and out.startswith("a [31mred name.sched:4:") and "\x1b" not in out, (command, out)
    status, out, _ = run("check", "--format", "sarif", name)
    uris = {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in json.loads(out)["runs"][0]["results"]}
    assert uris == {"a%1B%5B31mred%09name.sched"}
    _named(tmp_path, b"clean\x1b[2J.sched", (SPECS / "copy_compute_sync.sched").read_text())
    status, out, _ = run("check", "-j", "1", "--format", "json", ".")
    assert [f["path"] for f in json.loads(out)["files"]] == ["./a [31mred name.sched", "./clean [2J.sched"]


def test_warnings_of_one_code_past_twenty_are_counted_not_framed(run, tmp_path):
    """A spec declaring 50 streams and using one: 49 SP051 warnings, 20 framed and one line
    for the rest; JSON still lists every one."""
    spec = tmp_path / "unused.sched"
    spec.write_text("device d\n" + "".join(f"stream s{i} on d\n" for i in range(50))
                    + "thread t {\n  s0: kernel k\n}\n")
    status, out, _ = run("check", spec)
    assert status == 0 and out.count("warning[SP051]") == 21
    assert "warning[SP051]: ... and 29 more like these" in out
    status, out, _ = run("check", "--format", "json", spec)
    assert [d["code"] for d in json.loads(out)["files"][0]["diagnostics"]].count("SP051") == 49


def test_findings_past_the_framed_ones_are_one_line_each(run, tmp_path, monkeypatch):
    """With room for two framed findings, a spec with six races frames the first two in
    source order and gives the other four one line each (location, code, message) after a
    note that counts them; JSON still gives every one with its witness, and `--quiet`
    shortens the same way."""
    from checker.report import text as text_report

    monkeypatch.setattr(text_report, "FINDINGS_FRAMED", 2)
    spec = tmp_path / "racy.sched"
    spec.write_text("device d { compute 4 }\nbuffer x 1KiB on d\nstream s[4] on d\nthread t {\n"
                    + "".join(f"  s[{i}]: kernel k{i} writes x 1ms\n" for i in range(4)) + "}\n")
    status, out, _ = run("check", "--format", "json", spec)
    findings = json.loads(out)["files"][0]["findings"]
    assert status == 1 and len(findings) == 6 and all(f["witness"] for f in findings)
    for flags in ((), ("--quiet",)):
        status, out, _ = run("check", *flags, spec)
        assert status == 1
        assert out.count("error[SP101]") == 6
        assert out.count("= witness:") == 2 and out.count("= help:") == 2
        assert "note: 4 more findings, one line each (the first 2 are shown whole" in out
        one_line = [line for line in out.splitlines() if "error[SP101]" in line][2:]
        assert all(re.match(rf"{re.escape(str(spec))}:\d+:3: error\[SP101\]: race on `x`", line) for line in one_line)
        lines = [int(line.split(":")[1]) for line in out.splitlines() if "error[SP101]" in line]
        assert lines == sorted(lines)


def test_sarif_flows_past_the_log_s_budget_keep_their_last_steps(run, tmp_path, monkeypatch):
    """Once the results before have used up MAX_FLOW_TOTAL thread-flow locations, each later
    result's flow keeps its last SHORT_FLOW_STEPS steps (a log must stay under code
    scanning's 10 MB); every result is still there, and the log is still valid."""
    from checker.report import sarif as sarif_report

    spec = tmp_path / "racy.sched"
    spec.write_text("device d { compute 4 }\nbuffer x 1KiB on d\nstream s[4] on d\nthread t {\n"
                    + "".join(f"  s[{i}]: kernel k{i} writes x 1ms\n" for i in range(4)) + "}\n")
    _, out, _ = run("check", "--format", "sarif", spec)
    whole = [len(r["codeFlows"][0]["threadFlows"][0]["locations"]) for r in results_of(valid_sarif(json.loads(out)), "SP101")]
    assert len(whole) == 6 and min(whole) >= 3
    monkeypatch.setattr(sarif_report, "MAX_FLOW_TOTAL", whole[0] + 1)
    monkeypatch.setattr(sarif_report, "SHORT_FLOW_STEPS", 2)
    _, out, _ = run("check", "--format", "sarif", spec)
    results = results_of(valid_sarif(json.loads(out)), "SP101")
    flows = [r["codeFlows"][0]["threadFlows"][0]["locations"] for r in results]
    assert [len(flow) for flow in flows] == whole[:2] + [2] * 4
    for flow, steps in zip(flows[2:], whole[2:]):  # the last steps, numbered as in the whole witness
        assert [location["executionOrder"] for location in flow] == [steps - 1, steps]


def test_sarif_results_past_the_limit_are_counted_not_listed(run, tmp_path, monkeypatch):
    """Past MAX_RESULTS results a log lists the first ones and says in a notification of the
    invocation how many it left out; the log stays valid."""
    from checker.report import sarif as sarif_report

    monkeypatch.setattr(sarif_report, "MAX_RESULTS", 4)
    spec = tmp_path / "racy.sched"
    spec.write_text("device d { compute 4 }\nbuffer x 1KiB on d\nstream s[4] on d\nthread t {\n"
                    + "".join(f"  s[{i}]: kernel k{i} writes x 1ms\n" for i in range(4)) + "}\n")
    status, out, _ = run("check", "--format", "sarif", spec)
    log = valid_sarif(json.loads(out))
    assert status == 1 and len(log["runs"][0]["results"]) == 4
    (note,) = log["runs"][0]["invocations"][0]["toolExecutionNotifications"]
    assert note["message"]["text"].startswith("2 more results were left out")
    # warnings first (SP051, unused streams, come before the findings in report order) are
    # what a cut leaves out, not the race that fails the run
    spec.write_text("device d\nbuffer x 1KiB on d\nstream a on d\nstream b on d\n"
                    + "".join(f"stream u{i} on d\n" for i in range(6))
                    + "thread t {\n  a: kernel k writes x\n  b: kernel j writes x\n}\n")
    status, out, _ = run("check", "--format", "sarif", spec)
    results = valid_sarif(json.loads(out))["runs"][0]["results"]
    assert status == 1 and [r["ruleId"] for r in results].count("SP101") == 1 and len(results) == 4


def test_sarif_of_standard_input_names_no_file_of_the_checkout(run, monkeypatch):
    import io

    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO((SPECS / "bug_missing_wait.sched").read_bytes())))
    _, out, _ = run("check", "--format", "sarif", "-")
    log = valid_sarif(json.loads(out))
    assert log["runs"][0]["artifacts"][0]["location"] == {"uri": "stdin"}
    assert all("uriBaseId" not in r["locations"][0]["physicalLocation"]["artifactLocation"]
               for r in log["runs"][0]["results"])


def test_an_undecided_makespan_expectation_is_placed_on_its_line(run, tmp_path, monkeypatch):
    """A duration finer than the exact check's resolution leaves `expect makespan` unknown: the
    unknown has no statement, and every format points at the `expect` line instead."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "fine.sched").write_text("device d\nstream s on d\nthread main {\n  s: kernel k 0.0000000001ns\n}\n"
                                         "expect makespan <= 1ms\n")
    status, out, _ = run("check", "--color", "never", "fine.sched")
    assert status == 1 and "fine.sched:6:1: error[SP301]" in out and "this expectation" in out
    # (one that --allow-unknown lets pass is a warning, in text and in SARIF)
    status, out, _ = run("check", "--color", "never", "--allow-unknown", "fine.sched")
    assert status == 0 and "fine.sched:6:1: warning[SP301]" in out
    for allow, level in ((), "error"), (("--allow-unknown",), "warning"):
        _, out, _ = run("check", "--format", "sarif", *allow, "fine.sched")
        assert [r["level"] for r in json.loads(out)["runs"][0]["results"]] == [level]
    _, out, _ = run("check", "--format", "json", "fine.sched")
    (finding,) = json.loads(out)["files"][0]["findings"]
    assert finding["code"] == "SP301" and [at["line"] for at in finding["locations"]] == [6]
    _, out, _ = run("check", "--format", "sarif", "fine.sched")
    (result,) = results_of(valid_sarif(json.loads(out)), "SP301")
    assert result["locations"][0]["physicalLocation"]["region"]["startLine"] == 6


def test_witness_steps_say_which_loop_iteration_they_are_in_json_and_sarif(run, tmp_path):
    spec = tmp_path / "loop.sched"
    spec.write_text("device d\nbuffer x 1MiB on d\nstream s1 on d\nstream s2 on d\nthread t {\n  for i in 0..2 {\n"
                    "    s1: kernel a writes x\n    s2: kernel b writes x\n  }\n}\n")
    _, out, _ = run("check", "--format", "json", spec)
    timeline = json.loads(out)["files"][0]["findings"][0]["witness"]["timeline"]
    assert all(line["loop"] in ({"i": 0}, {"i": 1}) for line in timeline)
    _, out, _ = run("check", "--format", "sarif", spec)
    flow = valid_sarif(json.loads(out))["runs"][0]["results"][0]["codeFlows"][0]["threadFlows"][0]["locations"]
    assert all(location["location"]["message"]["text"].endswith(("[i=0]", "[i=1]")) for location in flow)
    spec.write_text("device d\nbuffer x 1MiB on d\nstream s1 on d\nstream s2 on d\nthread t {\n"
                    "  s1: kernel a writes x\n  s2: kernel b writes x\n}\n")
    _, out, _ = run("check", "--format", "json", spec)
    assert all("loop" not in line for line in json.loads(out)["files"][0]["findings"][0]["witness"]["timeline"])
