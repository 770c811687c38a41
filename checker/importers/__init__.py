"""Real programs in: profiler traces to `.sched` specs.

* `import_kineto(trace, et=None, source=..., min_gap=0) -> Imported`: a parsed PyTorch
  profiler (Kineto) trace, and optionally a parsed Execution Trace, to spec text
  (`checker/importers/kineto.py`; an Ascend profiler trace is read through
  `checker/importers/ascend.py`);
* `import_kineto_file(path, et_path=None)`: the same from files (`.json` or `.json.gz`);
* `import_ranks([(trace, name), ...])`: several ranks' traces to one spec in which their
  collectives meet (`checker/importers/ranks.py`); `import_ranks_files(paths, et_paths=None)`
  the same from files;
* `compare(imported, program) -> Comparison`: the spec's simulation next to the trace.

Bad input raises `TraceError` (or `InputError` for unreadable files) with a one-line message.
"""

from __future__ import annotations

from pathlib import Path

from checker.importers.ascend import with_profiled_rank
from checker.importers.command import InputError, read_json
from checker.importers.compare import Comparison, compare
from checker.importers.execution_trace import ExecutionTrace, TraceError, read_execution_trace
from checker.importers.kineto import Imported, import_kineto
from checker.importers.ranks import import_ranks

__all__ = ["import_kineto", "import_kineto_file", "import_ranks", "import_ranks_files", "compare", "Comparison",
           "Imported", "ExecutionTrace",
           "read_execution_trace", "TraceError", "InputError"]


def import_kineto_file(path, et_path=None, *, min_gap: int = 0) -> Imported:
    """A spec from a Kineto trace file, with the Execution Trace file of the same run if given."""
    et = read_execution_trace(read_json(str(et_path))) if et_path else None
    return import_kineto(read_json(str(path)), et, source=Path(path).name, min_gap=min_gap)


def import_ranks_files(paths, et_paths=None, *, min_gap: int = 0) -> Imported:
    """One spec from the Kineto trace files of several ranks of a run (and, if given, each
    one's Execution Trace file, in the same order): `streamproof import kineto R0 R1 ...`."""
    paths = [str(path) for path in paths]
    ets = [read_execution_trace(read_json(str(path))) for path in et_paths] if et_paths else None
    # (an Ascend trace's rank is in its profiler folder: `profiler_info_N.json`)
    return import_ranks([(with_profiled_rank(read_json(path), path), Path(path).name) for path in paths], ets,
                        min_gap=min_gap)
