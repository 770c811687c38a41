"""pytest plugin: every `.sched` spec pytest is pointed at is a test.

`pytest specs/` collects each `*.sched` file under `specs/` (or named on the command line) as
one test, which passes when the spec meets its `expect` lines (a spec without them must have
no findings) - what `streamproof check` reports with exit status 0. A failing test shows the
text report of `streamproof check`.

Options: `--sched-timeout`, `--sched-budget`, `--sched-allow-unknown`, `--sched-exhaustive`,
and `--no-sched` to collect nothing. `[tool.streamproof]` in pyproject.toml sets their
defaults (`timeout`, `budget`, `allow-unknown`, `exhaustive`, `max-statements`), as it does
for the command line. A project whose test tree holds specs that are meant to fail keeps
them out with `collect_ignore_glob = ["*.sched"]` in its conftest.py.
Registered as the `streamproof` plugin (entry point `pytest11`); `-p no:streamproof` turns it off.
"""

from __future__ import annotations

from pathlib import Path

import pytest

SUFFIX = ".sched"


def pytest_addoption(parser) -> None:
    group = parser.getgroup("streamproof", "streamproof: .sched specs as tests")
    group.addoption("--no-sched", action="store_true", default=False,
                    help="do not collect .sched specs as tests")
    group.addoption("--sched-timeout", type=float, default=None, metavar="SECONDS",
                    help="solver time per query (default 10, or `timeout` in [tool.streamproof])")
    group.addoption("--sched-budget", type=float, default=None, metavar="SECONDS",
                    help="solver time for all queries of one spec (default 300)")
    group.addoption("--sched-allow-unknown", action="store_true", default=None,
                    help="pass specs whose only findings are unknown answers")
    group.addoption("--sched-exhaustive", action="store_true", default=None,
                    help="enumerate every interleaving instead of asking the solver (small specs)")


def _size(value) -> int:
    """A memory size as the command line reads it (`4GiB`, or bytes)."""
    import argparse

    from checker.cli import _memory_size

    try:
        return _memory_size(str(value))
    except argparse.ArgumentTypeError as exc:
        raise ValueError(str(exc)) from None


_size.__name__ = "size"


def _settings(config) -> dict:
    """Check options: the command line, then [tool.streamproof] of the project, then defaults."""
    settings = {}
    try:
        from checker.inputs import find_config

        _, table = find_config(Path(str(config.rootpath)))
    except (ValueError, OSError):
        table = {}
    own = table.get("check") if isinstance(table.get("check"), dict) else {}
    merged = {**{k: v for k, v in table.items() if not isinstance(v, dict)}, **own}
    kinds = {"timeout": float, "budget": float, "rlimit": int, "max-states": int, "max-statements": int,
             "max-memory": _size, "allow-unknown": bool, "exhaustive": bool}
    for key, kind in kinds.items():
        value = merged.get(key, merged.get(key.replace("-", "_")))
        if value is None:
            continue
        try:
            settings[key.replace("-", "_")] = kind(value)
        except (TypeError, ValueError):
            raise pytest.UsageError(f"[tool.streamproof] {key}: not a valid {kind.__name__}: {value!r}") from None
    for key in ("timeout", "budget", "allow_unknown", "exhaustive"):
        value = config.getoption(f"--sched-{key.replace('_', '-')}")
        if value is not None:
            settings[key] = value
    return settings


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
        from checker.parallel import check_one
        from checker.report.text import plain, plain_report, summary

        settings = _settings(self.config)
        options = Options(**{k: settings[k] for k in ("timeout", "budget", "rlimit", "max_states", "max_memory",
                                                          "allow_unknown", "exhaustive") if k in settings})
        report = check_one(Source(self._shown_path()), options, settings.get("max_statements"))
        if not report.passed:
            raise SchedFailure(f"{plain(summary([report]))}\n\n{plain_report(report)}")

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
