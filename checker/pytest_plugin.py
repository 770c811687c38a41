"""pytest plugin: every `.sched` spec pytest is pointed at is a test.

`pytest specs/` collects each `*.sched` file under `specs/` (or named on the command line) as
one test, which passes when the spec meets its `expect` lines (a spec without them must have
no findings) - what `streamproof check` reports with exit status 0. A failing test shows the
text report of `streamproof check`.

Options: `--sched-timeout`, `--sched-budget`, `--sched-allow-unknown`, `--sched-exhaustive`,
and `--no-sched` to collect nothing. `[tool.streamproof]` in pyproject.toml sets their
defaults and those of `check`'s other limits (`rlimit`, `max-states`, `max-memory`,
`explore-first`, `max-statements`), read and checked by the command line's own reader: a setting it refuses
stops pytest as a usage error (SP005). A project whose test tree holds specs that are meant to fail keeps
them out with `collect_ignore_glob = ["*.sched"]` in its conftest.py.
Registered as the `streamproof` plugin (entry point `pytest11`); `-p no:streamproof` turns it off.
"""

from __future__ import annotations

from pathlib import Path

import pytest

SUFFIX = ".sched"


def _seconds(text: str) -> float:
    """A positive, finite time limit, as the command line takes one."""
    from checker.cli import _positive_float

    return _positive_float(text)


_seconds.__name__ = "seconds"


def pytest_addoption(parser) -> None:
    group = parser.getgroup("streamproof", "streamproof: .sched specs as tests")
    group.addoption("--no-sched", action="store_true", default=False,
                    help="do not collect .sched specs as tests")
    group.addoption("--sched-timeout", type=_seconds, default=None, metavar="SECONDS",
                    help="solver time per query (default 10, or `timeout` in [tool.streamproof])")
    group.addoption("--sched-budget", type=_seconds, default=None, metavar="SECONDS",
                    help="solver time for all queries of one spec (default 300)")
    group.addoption("--sched-allow-unknown", action="store_true", default=None,
                    help="pass specs whose only findings are unknown answers")
    group.addoption("--sched-exhaustive", action="store_true", default=None,
                    help="enumerate every interleaving instead of asking the solver (small specs)")


OPTIONS = ("timeout", "budget", "rlimit", "max_states", "max_memory", "allow_unknown", "exhaustive",
           "explore_first")
"""`check`'s options that the tests take, besides `max_statements`."""


def _config_start(config) -> Path:
    """Where the search for [tool.streamproof] starts: the directory pytest runs in, as
    `streamproof check` starts from its working directory (not pytest's rootdir, which a
    `pytest.ini` higher up can move past a subproject's pyproject.toml)."""
    return Path(str(config.invocation_params.dir))


def _settings(config) -> dict:
    """Check options: the command line, then [tool.streamproof] of the project (read and
    checked as `streamproof check` reads it), then `check`'s defaults."""
    from checker.cli import check_defaults
    from checker.inputs import ConfigError

    try:
        defaults = check_defaults(_config_start(config))
    except ConfigError as exc:
        where = f":{exc.where[0]}:{exc.where[1]}" if exc.where else ""
        raise pytest.UsageError(f"{exc.path}{where}: error[SP005]: {exc.message}") from None
    except ValueError as exc:  # (not TOML at all)
        raise pytest.UsageError(f"error[SP005]: {exc}") from None
    settings = {key: defaults[key] for key in OPTIONS + ("max_statements",) if defaults.get(key) is not None}
    for key in ("timeout", "budget", "allow_unknown", "exhaustive"):
        value = config.getoption(f"--sched-{key.replace('_', '-')}")
        if value is not None:
            settings[key] = value
    return settings


def pytest_configure(config) -> None:
    """A project's [tool.streamproof] is read once, before anything runs: a bad setting stops
    pytest as a usage error. (Without one, nothing is read until a spec runs.)"""
    from checker.inputs import find_config

    if config.getoption("--no-sched", default=False):
        return
    try:
        _, table = find_config(_config_start(config))
    except ValueError as exc:  # (not TOML at all)
        raise pytest.UsageError(f"error[SP005]: {exc}") from None
    if table:
        config._streamproof_settings = _settings(config)


def pytest_collect_file(file_path: Path, parent):
    if file_path.suffix != SUFFIX or parent.config.getoption("--no-sched"):
        return None
    return SchedFile.from_parent(parent, path=file_path)


class SchedFile(pytest.File):
    def collect(self):
        yield SchedItem.from_parent(self, name=self.path.name)


class SchedFailure(Exception):
    """A spec that does not meet its expectations; carries the text report."""


class SchedItem(pytest.Item):
    def runtest(self) -> None:
        from checker.analyze import Options
        from checker.inputs import Source
        from checker.findings import FindingKind
        from checker.parallel import check_one
        from checker.report.text import plain, plain_report, summary

        if not hasattr(self.config, "_streamproof_settings"):
            self.config._streamproof_settings = _settings(self.config)
        settings = self.config._streamproof_settings
        options = Options(**{k: settings[k] for k in OPTIONS if k in settings})
        # (read at the absolute path: a test that changed directory does not move the spec)
        report = check_one(Source(self._shown_path(), file=str(self.path)), options, settings.get("max_statements"))
        if not report.passed:
            raise SchedFailure(f"{plain(summary([report]))}\n\n{plain_report(report)}")
        unknown = next((f for f in report.findings if f.kind is FindingKind.UNKNOWN), None)
        if unknown is not None:  # (passed under --sched-allow-unknown: undecided is never shown as passed)
            pytest.skip(f"undecided (allowed): {unknown.message}")

    def _shown_path(self) -> str:
        """The spec's path as the command line would show it: relative to where pytest runs."""
        try:
            return str(self.path.relative_to(Path(str(self.config.invocation_params.dir))))
        except ValueError:
            return str(self.path)

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, SchedFailure):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style)

    def reportinfo(self):
        return self.path, None, f"streamproof check {self.path.name}"
