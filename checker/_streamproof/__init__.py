"""streamproof: a formal concurrency model checker for GPU/NPU stream programs.

`import streamproof` is the Python API (`checker/api.py`): build a program, then `check`,
`simulate` or `optimize` it; `import_kineto_file` writes a spec from a profiler trace, and
`import_ranks_files` one from the traces of several ranks.
The implementation lives in the `checker` package; this package only gives it its name.
"""

from checker import __version__
from checker.api import (
    Access, Buffer, CheckResult, Comm, Device, Event, Notify, Program, SpecInvalid, Stream, Thread,
    load_file, load_text,
)
from checker.importers import Imported, TraceError, import_kineto, import_kineto_file, import_ranks_files

__all__ = [
    "Program", "Thread", "Device", "Buffer", "Stream", "Event", "Notify", "Comm", "Access",
    "CheckResult", "SpecInvalid", "load_file", "load_text", "import_kineto", "import_kineto_file",
    "import_ranks_files", "Imported", "TraceError", "__version__",
]
