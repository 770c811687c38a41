"""The pytest plugin: `pytest specs/` collects every .sched file as a test that passes when the
spec meets its `expect` lines and fails with the text report."""

from __future__ import annotations

import shutil

import pytest

from conftest import CONFORMANCE, SPECS

pytest_plugins = ["pytester"]


def _import_the_checker() -> None:
    """pytester's in-process runs drop the modules first imported inside them; a module the
    checker imports lazily (the solver, the replay) would then come back as a second copy,
    whose classes are not those of the first. Importing them all here keeps one copy."""
    import importlib
    import pkgutil

    import checker

    for module in pkgutil.walk_packages(checker.__path__, "checker."):
        if module.name.endswith("__main__"):
            continue
        try:
            importlib.import_module(module.name)
        except Exception:  # a module that cannot load here is not one the checks use
            pass


_import_the_checker()

RACY = (CONFORMANCE / "c01_two_writers_race.sched").read_text()
CLEAN = (CONFORMANCE / "c02_event_orders_writers.sched").read_text()


@pytest.fixture
def project(pytester):
    # Runs stay in this process; hypothesis's plugin would be imported again for each of them.
    pytester.makepyprojecttoml("[tool.pytest.ini_options]\naddopts = \"-p no:hypothesispytest -p no:cacheprovider\"\n")
    return pytester


def test_the_example_specs_as_tests(project):
    shutil.copytree(SPECS, project.path / "specs")
    result = project.runpytest("specs", "-v")
    specs = len(list(SPECS.glob("*.sched")))
    result.assert_outcomes(passed=specs - 1, failed=1)  # bug_missing_wait fails on purpose
    result.stdout.fnmatch_lines([
        "*specs/bug_missing_wait.sched::bug_missing_wait.sched FAILED*",
        "*failed: 1 file checked, 1 finding*",
        "specs/bug_missing_wait.sched:31:3: error[[]SP101]: race on `grad`*",
        "*31 |   comm: allreduce world grad 1.5ms*",
    ])
    assert "Traceback" not in result.stdout.str() and "\x1b[" not in result.stdout.str()


def test_a_file_named_on_the_command_line(project):
    project.makefile(".sched", racy=RACY, clean=CLEAN)
    project.runpytest("racy.sched").assert_outcomes(failed=1)
    project.runpytest("clean.sched").assert_outcomes(passed=1)


def test_an_expected_finding_passes_and_an_invalid_spec_fails(project):
    project.makefile(".sched", expected=RACY + "expect race on act\n",
                     invalid="device d\nstream s on d\nthread t {\n  s9: kernel k\n}\n")
    result = project.runpytest("-v")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*invalid.sched:4:3: error[[]SP010]*"])


def test_only_sched_files_are_collected_next_to_python_tests(project):
    project.makefile(".sched", clean=CLEAN)
    project.makefile(".txt", notes="not a spec")
    project.makepyfile(test_plain="def test_ok():\n    pass\n")
    project.runpytest().assert_outcomes(passed=2)


def test_no_sched_and_disabling_the_plugin(project):
    project.makefile(".sched", racy=RACY)
    project.makepyfile(test_plain="def test_ok():\n    pass\n")
    project.runpytest("--no-sched").assert_outcomes(passed=1)
    project.runpytest("-p", "no:streamproof").assert_outcomes(passed=1)


def test_options_and_pyproject_defaults(project):
    unknown = "device d\nstream s on d\nnotify n\nthread t {\n  await n\n}\nthread u {\n  notify n\n}\n"
    project.makefile(".sched", spec=unknown)
    # a deadlock-free handshake: passes with the solver and with exhaustive exploration
    project.runpytest("--sched-timeout", "5").assert_outcomes(passed=1)
    project.runpytest("--sched-exhaustive").assert_outcomes(passed=1)
    project.makepyprojecttoml("[tool.pytest.ini_options]\naddopts = \"-p no:hypothesispytest\"\n"
                              "[tool.streamproof]\ntimeout = \"soon\"\n")
    result = project.runpytest()
    assert result.ret != 0 and "timeout" in (result.stdout.str() + result.stderr.str())


@pytest.mark.parametrize("setting, message", [
    ('allow-unknown = "false"', "`allow-unknown` must be true or false"),
    ("budgett = 5", "unknown option `budgett`"),
    ('timeout = "soon"', "`timeout`: not a number: 'soon'"),
])
def test_pyproject_settings_are_checked_as_the_command_line_checks_them(project, setting, message):
    """The plugin reads [tool.streamproof] with the command line's own reader: a setting the
    command line refuses stops pytest with the same words, never a test that passes for it."""
    project.makefile(".sched", racy=RACY)
    project.makepyprojecttoml("[tool.pytest.ini_options]\naddopts = \"-p no:hypothesispytest\"\n"
                              f"[tool.streamproof]\n{setting}\n")
    result = project.runpytest()
    output = result.stdout.str() + result.stderr.str()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "pyproject.toml:4:" in output and "error[SP005]" in output and message in output
    assert "Traceback" not in output


def test_the_plugin_takes_check_settings_and_refuses_bad_limits(project):
    project.makefile(".sched", racy=RACY)
    project.makepyprojecttoml("[tool.pytest.ini_options]\naddopts = \"-p no:hypothesispytest\"\n"
                              "[tool.streamproof]\nformat = \"sarif\"\n[tool.streamproof.check]\n"
                              "budget = 30\n")
    project.runpytest().assert_outcomes(failed=1)  # (`format` is check's; the race fails the test)
    result = project.runpytest("--sched-timeout", "-1")
    assert result.ret == pytest.ExitCode.USAGE_ERROR and "must be positive" in result.stderr.str()


def test_this_projects_own_tests_do_not_collect_its_specs(pytester):
    """tests/conftest.py keeps the deliberately broken specs of tests/ out of collection."""
    from conftest import HERE

    result = pytester.runpytest_subprocess("--collect-only", "-q", "-p", "no:cacheprovider", "-p", "no:hypothesispytest",
                                           str(HERE / "conformance"), str(HERE / "regressions"))
    assert ".sched" not in result.stdout.str()
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED


def test_a_spec_is_read_where_it_is_even_after_a_test_changed_directory(project, tmp_path_factory):
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    (elsewhere / "z_racy.sched").write_text(CLEAN)  # (the same relative path, another spec)
    project.makefile(".sched", z_racy=RACY)  # (collected after the test that moves)
    project.makepyfile(test_a_first=f"import os\ndef test_moves():\n    os.chdir({str(elsewhere)!r})\n")
    project.runpytest().assert_outcomes(passed=1, failed=1)


def test_settings_come_from_the_nearest_pyproject_above_where_pytest_runs(project):
    """As `streamproof check` reads them: a subproject's table, not the rootdir's."""
    project.makepyprojecttoml("[tool.pytest.ini_options]\naddopts = \"-p no:hypothesispytest -p no:cacheprovider\"\n"
                              "[tool.streamproof]\nallow-unknown = true\nexhaustive = true\nmax-states = 3\n")
    sub = project.mkdir("sub")
    (sub / "pyproject.toml").write_text("[tool.streamproof]\ntimeout = 20\n")
    (sub / "racy.sched").write_text(RACY)
    import os

    here = os.getcwd()
    os.chdir(sub)
    try:
        result = project.runpytest("racy.sched")
    finally:
        os.chdir(here)
    result.assert_outcomes(failed=1)


def test_an_undecided_spec_allowed_by_sched_allow_unknown_is_skipped_not_passed(project):
    """As the JUnit report shows it: an answer left unknown is never a pass, only skipped when
    unknown answers are allowed."""
    project.makepyprojecttoml("[tool.pytest.ini_options]\naddopts = \"-p no:hypothesispytest -p no:cacheprovider\"\n"
                              "[tool.streamproof]\nexhaustive = true\nmax-states = 3\n")
    project.makefile(".sched", racy=RACY + "expect race on act\n")
    project.runpytest("--sched-allow-unknown").assert_outcomes(skipped=1)
    project.runpytest().assert_outcomes(failed=1)
