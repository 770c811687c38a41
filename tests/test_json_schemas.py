"""The JSON Schemas of `--format json` (checker/schemas/) are valid and hold for real output.

Each command runs in-process (`checker.cli.main`, one at a time) on the example specs and on
test specs chosen for their variety: races, uses of dead memory, deadlocks, collective
mismatches, unknowns, `choose` variants, warnings, invalid specs (exit status 2), directories,
several files, standard input, expectations met and unmet. Every output must validate against
its command's schema, and its exit status must agree with the statuses it reports. Mutated
outputs must not validate: the schemas catch drift.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import sys
from pathlib import Path

import pytest

import checker
from checker.cli import main

jsonschema = pytest.importorskip("jsonschema")
from jsonschema import Draft202012Validator  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SCHEMAS = Path(checker.__file__).parent / "schemas"
COMMANDS = ("check", "show", "simulate", "optimize", "replay")

SPECS = ROOT / "specs"
TESTS = ROOT / "tests"
SEMANTICS = TESTS / "semantics"
CONFORMANCE = TESTS / "conformance"
INVALID = CONFORMANCE / "e02_syntax_error.sched"
UNDECLARED = CONFORMANCE / "e01_undeclared_stream.sched"
VARIETY = [  # one call of `check` on several files
    SEMANTICS / "s08_rank_skips_collective.sched",            # `choose` variants, deadlock
    SEMANTICS / "s27_tensor_used_before_its_alloc.sched",     # use-before-alloc
    TESTS / "peers" / "mbi11_count_mismatch_allreduce.sched",  # advisory collective mismatch
    TESTS / "bugs" / "nccl48_cudafreehost_hang_bug.sched",    # warnings
    SPECS / "bug_free_in_flight.sched",                       # use-after-free and race, expected
]
STDIN_SPEC = (SPECS / "bug_missing_wait.sched").read_text(encoding="utf-8")


def schema(command: str) -> dict:
    return json.loads((SCHEMAS / f"{command}.schema.json").read_text(encoding="utf-8"))


def validator(command: str) -> Draft202012Validator:
    return Draft202012Validator(schema(command))


def streamproof(*args, stdin: str | None = None) -> tuple[int, dict]:
    """Run `streamproof ARGS` in this process; its exit status and the JSON it printed."""
    out, err = io.StringIO(), io.StringIO()
    saved = sys.stdin
    if stdin is not None:
        sys.stdin = io.TextIOWrapper(io.BytesIO(stdin.encode("utf-8")), encoding="utf-8")
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = main([str(a) for a in args])
    finally:
        sys.stdin = saved
    assert out.getvalue().strip(), f"no output (exit {status}): {err.getvalue()}"
    return status, json.loads(out.getvalue())


def assert_valid(command: str, data: dict) -> None:
    errors = sorted(validator(command).iter_errors(data), key=lambda e: list(e.absolute_path))
    if errors:
        lines = []
        for error in errors[:5]:
            lines.append(f"at {list(error.absolute_path)}: {error.message[:300]}")
            for sub in (error.context or [])[:5]:
                lines.append(f"    {list(sub.absolute_path)}: {sub.message[:200]}")
        pytest.fail(f"`{command}` output does not match its schema:\n" + "\n".join(lines))


# -- (a) the schemas themselves ----------------------------------------------------------------


def test_every_command_has_a_schema():
    assert sorted(p.name for p in SCHEMAS.glob("*.schema.json")) == sorted(f"{c}.schema.json" for c in COMMANDS)


@pytest.mark.parametrize("command", COMMANDS)
def test_schema_is_valid_draft_2020_12(command):
    document = schema(command)
    assert document["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    Draft202012Validator.check_schema(document)


def test_a_definition_the_schemas_share_is_the_same_in_each():
    """Each schema stands alone (a tool validating one output reads one file), so shared
    definitions are copies: a change to one must reach the others."""
    first: dict[str, tuple[str, object]] = {}
    for command in COMMANDS:
        for name, definition in schema(command).get("$defs", {}).items():
            owner, known = first.setdefault(name, (command, definition))
            assert definition == known, f"$defs/{name} differs between {owner} and {command}"


@pytest.mark.parametrize("command", COMMANDS)
def test_every_property_is_described(command):
    """Every property of every object says what it means (the schemas are the documentation)."""
    missing = []

    def walk(node, where):
        if isinstance(node, dict):
            for name, sub in (node.get("properties") or {}).items():
                # (a `properties` inside an if/then/allOf refines a property described elsewhere)
                if isinstance(sub, dict) and "$ref" not in sub and "description" not in sub and "/if" not in where \
                        and "/then" not in where and "/else" not in where and "spec_error" not in where:
                    missing.append(f"{where}/{name}")
            for key, sub in node.items():
                walk(sub, f"{where}/{key}")
        elif isinstance(node, list):
            for k, sub in enumerate(node):
                walk(sub, f"{where}/{k}")

    walk(schema(command), "")
    assert not missing


# -- (b) real output validates -----------------------------------------------------------------


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    """Every run: name -> (command, exit status, JSON). Each command runs once per case."""
    tmp = tmp_path_factory.mktemp("json")
    unmet = tmp / "unmet_expectation.sched"
    unmet.write_text((SPECS / "copy_compute_sync.sched").read_text(encoding="utf-8") + "\nexpect deadlock\n",
                     encoding="utf-8")
    runs: dict[str, tuple[str, int, dict]] = {}

    def run(name, command, *args, stdin=None):
        status, data = streamproof(command, "--format", "json", *args, stdin=stdin)
        runs[name] = (command, status, data)
        return data

    # check
    run("check specs/", "check", "-j", "1", SPECS)
    run("check conformance/ (invalid specs)", "check", "-j", "1", CONFORMANCE)
    run("check regressions/", "check", "-j", "1", TESTS / "regressions")
    run("check bugs/", "check", "-j", "1", TESTS / "bugs")
    run("check semantics/", "check", "-j", "1", SEMANTICS)
    run("check peers/", "check", "-j", "1", TESTS / "peers")
    run("check several files", "check", "-j", "1", *VARIETY)
    run("check expectations met", "check", "-j", "1", SPECS / "bug_collective_order.sched",
        SPECS / "copy_compute_sync.sched")
    run("check expectation unmet", "check", "-j", "1", unmet)
    run("check unknown", "check", "-j", "1", "--exhaustive", "--max-states", "2",
        SPECS / "comm_overlap_priorities.sched")
    run("check unknown allowed", "check", "-j", "1", "--exhaustive", "--max-states", "2", "--allow-unknown",
        SPECS / "copy_compute_sync.sched")
    run("check stdin", "check", "-j", "1", "--stdin-filename", "piped.sched", "-", stdin=STDIN_SPEC)
    run("check invalid stdin", "check", "-j", "1", "-", stdin="stream s\n  s: kernel\n")
    # show
    run("show specs/", "show", SPECS)
    run("show invalid and valid", "show", INVALID, UNDECLARED, SPECS / "inference_pipeline.sched")
    run("show stdin", "show", "-", stdin=STDIN_SPEC)
    run("show semantics/", "show", SEMANTICS)
    # simulate
    run("simulate specs/", "simulate", SPECS)
    run("simulate semantics/", "simulate", SEMANTICS)
    run("simulate bugs/", "simulate", TESTS / "bugs")
    run("simulate invalid", "simulate", INVALID, SPECS / "copy_compute_sync.sched")
    # optimize
    run("optimize specs/", "optimize", "--timeout", "1", SPECS)
    run("optimize variety", "optimize", "--timeout", "1",
        SEMANTICS / "s08_rank_skips_collective.sched",           # deadlock, variant
        SEMANTICS / "s05_flag_wait_use_enqueued_after_free.sched",  # no exact model
        SEMANTICS / "s10_cuda_pageable_copy_then_other_stream.sched",  # engine-bound
        TESTS / "regressions" / "executor_free_then_realloc.sched")
    run("optimize semantics/", "optimize", "--timeout", "1", SEMANTICS)
    run("optimize invalid", "optimize", "--timeout", "1", INVALID)
    run("optimize --emit", "optimize", "--timeout", "1", "--emit", tmp / "faster.sched",
        SPECS / "copy_compute_sync.sched")
    # replay: witnesses of every kind, a bare witness, one that does not reproduce, errors
    for spec in ("bug_missing_wait", "bug_free_in_flight", "bug_collective_order", "bug_ddp_two_threads_one_comm"):
        found = tmp / f"{spec}.json"
        found.write_text(json.dumps(runs["check specs/"][2]), encoding="utf-8")
        report = next(f for f in runs["check specs/"][2]["files"] if f["path"].endswith(f"{spec}.sched"))
        for index, finding in enumerate(report["findings"]):
            if finding["witness"]:
                run(f"replay {spec} {index} ({finding['kind']})", "replay", SPECS / f"{spec}.sched",
                    "--witness", found, "--finding", index)
    report = next(f for f in runs["check specs/"][2]["files"] if f["path"].endswith("bug_missing_wait.sched"))
    steps = report["findings"][0]["witness"]["steps"]
    bare = tmp / "bare.json"
    bare.write_text(json.dumps({"steps": steps}), encoding="utf-8")
    short = copy.deepcopy({"version": "0", "files": [report]})
    short["files"][0]["findings"][0]["witness"]["steps"] = steps[:2]
    (tmp / "short.json").write_text(json.dumps(short), encoding="utf-8")
    (tmp / "illegal.json").write_text(json.dumps({"steps": [["end", 0]]}), encoding="utf-8")
    (tmp / "array.json").write_text("[1]", encoding="utf-8")
    missing_wait = SPECS / "bug_missing_wait.sched"
    run("replay bare witness", "replay", missing_wait, "--witness", bare)
    run("replay not reproduced", "replay", missing_wait, "--witness", tmp / "short.json")
    run("replay illegal step", "replay", missing_wait, "--witness", tmp / "illegal.json")
    run("replay not a witness", "replay", missing_wait, "--witness", tmp / "array.json")
    run("replay no such finding", "replay", missing_wait, "--witness", tmp / "bug_missing_wait.json",
        "--finding", 99)
    run("replay invalid spec", "replay", "-", "--witness", bare, stdin="stream s\n")
    return runs


CASES = [
    "check specs/", "check conformance/ (invalid specs)", "check regressions/", "check bugs/",
    "check semantics/", "check peers/", "check several files",
    "check expectations met", "check expectation unmet", "check unknown", "check unknown allowed",
    "check stdin", "check invalid stdin",
    "show specs/", "show invalid and valid", "show stdin", "show semantics/",
    "simulate specs/", "simulate semantics/", "simulate bugs/", "simulate invalid",
    "optimize specs/", "optimize variety", "optimize semantics/", "optimize invalid", "optimize --emit",
    "replay bare witness", "replay not reproduced", "replay illegal step", "replay not a witness",
    "replay no such finding", "replay invalid spec",
]


@pytest.mark.parametrize("name", CASES)
def test_output_matches_schema(outputs, name):
    command, _, data = outputs[name]
    assert_valid(command, data)


def test_replays_match_schema(outputs):
    replays = [name for name in outputs if name.startswith("replay bug_")]
    kinds = {name.split("(")[-1].rstrip(")") for name in replays}
    assert {"race", "use-after-free", "deadlock"} <= kinds
    for name in replays:
        command, status, data = outputs[name]
        assert_valid(command, data)
        assert status == 0 and data["files"][0]["reproduced"], name


def test_every_case_runs(outputs):
    assert set(CASES) <= set(outputs)


EXPECTED_STATUS = {
    "check specs/": 1, "check conformance/ (invalid specs)": 2, "check regressions/": 1,
    "check bugs/": 0, "check semantics/": 1, "check peers/": 0,
    "check several files": 1, "check expectations met": 0, "check expectation unmet": 1,
    "check unknown": 1, "check unknown allowed": 0, "check stdin": 1, "check invalid stdin": 2,
    "show specs/": 0, "show invalid and valid": 2, "show stdin": 0, "show semantics/": 0,
    "simulate specs/": 1, "simulate semantics/": 1, "simulate bugs/": 1, "simulate invalid": 2,
    "optimize specs/": 1, "optimize variety": 1, "optimize semantics/": 1, "optimize invalid": 2,
    "optimize --emit": 0,
    "replay bare witness": 0, "replay not reproduced": 1, "replay illegal step": 2,
    "replay not a witness": 2, "replay no such finding": 2, "replay invalid spec": 2,
}


@pytest.mark.parametrize("name", CASES)
def test_exit_status_agrees_with_the_output(outputs, name):
    command, status, data = outputs[name]
    assert status == EXPECTED_STATUS[name]
    statuses = [f["status"] for f in data["files"]]
    if command == "check":
        wanted = 2 if "error" in statuses else 0 if all(f["passed"] for f in data["files"]) else 1
    elif command == "replay":
        wanted = {"ok": 0, "not-reproduced": 1, "error": 2}[statuses[0]]
    elif command == "optimize" and any(f.get("emit", {}).get("error") for f in data["files"]):
        wanted = 2 if "error" in statuses else 1
    else:
        wanted = 2 if "error" in statuses else 1 if "deadlock" in statuses else 0
    assert status == wanted


def test_the_cases_cover_what_the_schemas_describe(outputs):
    """The runs above reach the shapes the schemas allow, so that validating them means something."""
    files = {command: [] for command in COMMANDS}
    for command, _, data in outputs.values():
        files[command] += data["files"]
    findings = [x for f in files["check"] for x in f["findings"]]
    assert {x["kind"] for x in findings} == {"race", "use-after-free", "use-before-alloc", "deadlock",
                                             "collective-mismatch", "unknown"}
    assert {f["status"] for f in files["check"]} == {"clean", "findings", "unknown", "error"}
    assert any(x.get("variant") for x in findings) and any(x["advisory"] for x in findings)
    assert {x["kind"] for x in findings if x.get("launches")} >= {"race", "use-after-free"}  # (graphs in bugs/)
    assert any(x["expected"] for x in findings) and any(f["undecided_expectations"] for f in files["check"])
    assert any(f["status"] == "clean" and not f["passed"] for f in files["check"])
    assert any(d["severity"] == "warning" for f in files["check"] for d in f["diagnostics"])
    assert any(f["path"] == "piped.sched" for f in files["check"])
    for command in ("show", "simulate", "optimize", "replay"):
        assert "error" in {f["status"] for f in files[command]}, command
    assert {"ok", "deadlock"} <= {f["status"] for f in files["simulate"]}
    assert any(f.get("variant") for f in files["simulate"])
    assert {"ok", "deadlock"} <= {f["status"] for f in files["optimize"]}
    assert any(f.get("emit") for f in files["optimize"])
    assert {f["solver"]["engine"] for f in files["optimize"] if "solver" in f} >= {"none"}
    assert {f["status"] for f in files["replay"]} == {"ok", "not-reproduced", "error"}


# -- (c) the schemas reject what the commands do not write --------------------------------------


def _first(data, key):
    return next(f for f in data["files"] if f.get(key))


def _drop(key):
    def mutate(data):
        del data["files"][0][key]
    return mutate


def _set_in_finding(key, value):
    def mutate(data):
        _first(data, "findings")["findings"][0][key] = value
    return mutate


MUTATIONS = {
    "check: required key removed": ("check specs/", _drop("passed")),
    "check: unknown key added": ("check specs/", lambda d: d["files"][0].update(score=1)),
    "check: status outside its enum": ("check specs/", lambda d: d["files"][0].update(status="ok")),
    "check: instances as a string": ("check specs/", _set_in_finding("instances", "1")),
    "check: code of another kind": ("check specs/", _set_in_finding("code", "SP999")),
    "check: kind and code disagree": ("check specs/", lambda d: _first(d, "findings")["findings"][0].update(
        code="SP101" if _first(d, "findings")["findings"][0]["code"] != "SP101" else "SP201")),
    "check: a step kind outside its enum": (
        "check specs/", lambda d: _first(d, "findings")["findings"][0]["witness"]["steps"][0].__setitem__(0, "go")),
    "check: 0-based line": ("check specs/", lambda d: _first(d, "findings")["findings"][0]["locations"][0].update(line=0)),
    "check: version missing": ("check specs/", lambda d: d.pop("version")),
    "check: diagnostic code malformed": (
        "check conformance/ (invalid specs)", lambda d: _first(d, "diagnostics")["diagnostics"][0].update(code="E1")),
    "show: bytes as a float": ("show specs/", lambda d: d["files"][0]["buffers"][0].update(bytes=1.5)),
    "show: unknown op": ("show specs/", lambda d: d["files"][0]["statements"][0].update(op="launch")),
    "simulate: task start as a string": ("simulate specs/",
                                       lambda d: _first(d, "tasks")["tasks"][0].update(start="0.0")),
    "simulate: deadlock without stuck_at": (
        "simulate specs/", lambda d: next(f for f in d["files"] if f["status"] == "deadlock").pop("stuck_at")),
    "simulate: ok run with no makespan": (
        "simulate specs/", lambda d: next(f for f in d["files"] if f["status"] == "ok").update(makespan=None)),
    "optimize: optimal as a string": ("optimize specs/", lambda d: d["files"][0]["optimal"].update(program="yes")),
    "optimize: solver engine outside its enum": ("optimize specs/",
                                                 lambda d: d["files"][0]["solver"].update(engine="gurobi")),
    "replay: reproduced missing": ("replay not reproduced", _drop("reproduced")),
    "replay: two files": ("replay bare witness", lambda d: d["files"].append(copy.deepcopy(d["files"][0]))),
    "replay: status outside its enum": ("replay bare witness", lambda d: d["files"][0].update(status="reproduced")),
}


@pytest.mark.parametrize("mutation", MUTATIONS)
def test_schema_rejects_mutated_output(outputs, mutation):
    name, mutate = MUTATIONS[mutation]
    command, _, data = outputs[name]
    assert validator(command).is_valid(data)
    broken = copy.deepcopy(data)
    mutate(broken)
    assert not validator(command).is_valid(broken)


def test_a_deadlocked_optimize_claims_no_optimum():
    """The timed model can schedule a program whose steps get stuck (two members of one
    group in one hardware queue begin together there): no schedule or proof of it stands."""
    status, output = streamproof("optimize", "--format", "json",
                                 SEMANTICS / "s59_group_members_in_one_hardware_queue.sched")
    item = output["files"][0]
    assert status == 1 and item["status"] == "deadlock"
    assert item["optimal"] == {"program": False, "bound": False}
    assert item["schedules"] == {"program": None, "bound": None}
    assert [item["solver"][kind]["proved_by"] for kind in ("program", "bound")] == [None, None]
    validator("optimize").validate(output)


def test_a_long_witness_keeps_every_step_and_describes_the_last_thousand():
    """A race after a loop of 400 ordered iterations: its witness issues every statement of the
    loop first; its timeline describes the last 1,000 steps, which the schema allows."""
    import tempfile

    from checker.report.json import TIMELINE_STEPS

    text = ("device d { compute 2 }\nbuffer x 1KiB on d\nbuffer y 1KiB on d\nstream a on d\nstream b on d\n"
            "event e\nthread t {\n  for i in 0..400 {\n    a: kernel w writes x 1us\n    a: record e\n"
            "    b: wait e\n    b: kernel r reads x 1us\n  }\n  a: kernel late writes y 1us\n"
            "  b: kernel later reads y 1us\n}\n")
    with tempfile.TemporaryDirectory() as folder:
        spec = Path(folder) / "long.sched"
        spec.write_text(text, encoding="utf-8")
        status, data = streamproof("check", "--format", "json", str(spec))
    assert status == 1
    errors = sorted(validator("check").iter_errors(data), key=str)
    assert not errors, errors[:3]
    witnesses = [f["witness"] for f in data["files"][0]["findings"] if f["witness"]]
    long = [w for w in witnesses if len(w["steps"]) > TIMELINE_STEPS]
    assert long, [len(w["steps"]) for w in witnesses]
    for witness in witnesses:
        cut = witness.get("timeline_from", 0)
        assert len(witness["timeline"]) == len(witness["steps"]) - cut == min(len(witness["steps"]), TIMELINE_STEPS)
        assert [[line["step"], line["statement"]] for line in witness["timeline"]] == witness["steps"][cut:]
