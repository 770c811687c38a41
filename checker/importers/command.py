"""`streamproof import [kineto] TRACE.json[.gz] [--et ET.json[.gz]] -o OUT.sched [--compare]`.

Bad input (a missing file, not JSON, not a trace) is one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import zlib
from pathlib import Path

from checker.parse import MAX_DURATION_NS
from checker.resources import TooLarge, read_at_most

MAX_TRACE_BYTES = 1 << 30
"""The largest trace read, after decompression: importing takes about 7 bytes of memory and
0.1-0.2 s per byte-megabyte of JSON, so 1 GiB costs some 7 GB and a few minutes."""

EXIT_OK, EXIT_ERROR = 0, 2

DESCRIPTION = """\
Write a .sched spec from a profiler trace of a real run: streams, kernels, copies and
memsets with their measured durations, the host threads with their measured gaps, and the
trace's cross-stream waits and syncs. `check`, `simulate` and `optimize` then work on it.
"""

EPILOG = """\
examples:
  streamproof import kineto trace.json.gz -o run.sched --compare
  streamproof import trace.json.gz -o run.sched            (kineto is the default format)
  streamproof import kineto trace.json --et execution_trace.json -o run.sched
  streamproof check run.sched && streamproof optimize run.sched
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = DESCRIPTION
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("kind", nargs="?", choices=("kineto",), default="kineto",
                        help="trace format: kineto (PyTorch profiler Chrome trace), the default")
    parser.add_argument("trace", metavar="TRACE", help="the trace (.json or .json.gz)")
    parser.add_argument("--et", metavar="EXECUTION_TRACE",
                        help="PyTorch Execution Trace of the same run: reads and writes of every operator")
    parser.add_argument("-o", "--output", metavar="OUT",
                        help="where to write the .sched spec, - for standard output (required; pyproject.toml may set it)")
    parser.add_argument("--compare", action="store_true",
                        help="simulate the spec and print its spans next to the trace's, per stream")
    parser.add_argument("--min-gap", type=_duration_ns, default=0, metavar="DURATION",
                        help="write host gaps shorter than this into the next one (default 0: every gap); "
                             "makes large specs smaller")
    parser.add_argument("--format", choices=("text", "json"), default="text", help="output format (default text)")


def _duration_ns(text: str) -> int:
    if text.strip() == "0":  # the default, written as the help writes it
        return 0
    units = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000}
    for unit in ("ns", "us", "ms", "s"):
        if text.endswith(unit):
            try:
                value = float(text[: -len(unit)])
            except ValueError:
                break
            if not 0 <= value * units[unit] <= MAX_DURATION_NS:  # negative, too long, inf, nan
                break
            return round(value * units[unit])
    raise argparse.ArgumentTypeError(f"not a duration: {text!r} (write e.g. 2us or 500ns)")


class InputError(Exception):
    """A file that cannot be read as what it should be; the message is one line."""


def read_json(path: str):
    """The JSON document in a file, gzip-compressed or not."""
    try:
        data = read_at_most(path, MAX_TRACE_BYTES)
    except TooLarge as exc:
        raise InputError(f"{exc}: import a shorter profiling window") from None
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise InputError(f"{path}: not a readable gzip file ({exc})") from None
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        return json.loads(data)
    except UnicodeDecodeError:
        raise InputError(f"{path}: not JSON (not UTF-8 text)") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}:{exc.lineno}:{exc.colno}: not JSON: {exc.msg}") from None
    except RecursionError:
        raise InputError(f"{path}: not JSON (nested too deeply)") from None
    except ValueError:  # an integer of more digits than Python converts (4,300)
        raise InputError(f"{path}: not a trace: it holds a number of thousands of digits") from None


def _error(message: str) -> int:
    print(f"streamproof: error: {message}", file=sys.stderr)
    return EXIT_ERROR


def run(args) -> int:
    from checker.importers.execution_trace import TraceError, read_execution_trace
    from checker.importers.kineto import import_kineto

    if args.output is None:  # (not `required=`: that would ignore a default from pyproject.toml)
        return _error("the following arguments are required: -o/--output")
    try:
        trace = read_json(args.trace)
        et = read_execution_trace(read_json(args.et)) if args.et else None
    except InputError as exc:
        return _error(str(exc))
    except TraceError as exc:
        return _error(f"{args.et}: {exc}")
    try:
        imported = import_kineto(trace, et, source=Path(args.trace).name, min_gap=args.min_gap)
    except TraceError as exc:
        return _error(f"{args.trace}: {exc}")
    del trace, et
    # Names from the trace reach comments as they are: a lone surrogate cannot be written as
    # UTF-8 and a NUL makes the spec binary to `check` (SP001).
    text = imported.text.encode("utf-8", "replace").decode("utf-8").replace("\0", "?")
    from checker.cli import write_output

    try:
        write_output(args.output, text)
    except OSError as exc:
        return _error(f"cannot write {args.output}: {exc.strerror or exc}")
    for note in imported.notes:
        print(f"streamproof: note: {note}", file=sys.stderr)
    c = imported.counts
    result = {"path": args.output, "trace": args.trace, "counts": c, "notes": imported.notes,
              "assumptions": imported.assumptions}
    if args.format == "text":
        print(f"wrote {args.output}: {c.get('threads', 0)} thread(s), {c.get('streams', 0)} stream(s), "
              f"{c.get('kernel', 0)} kernels, {c.get('memcpy', 0)} copies, {c.get('memset', 0)} memsets, "
              f"{c.get('wait', 0)} waits, {c.get('sync', 0)} syncs"
              + (f", {c['assumptions']} assumption(s)" if c.get("assumptions") else ""))
    if args.compare:
        from checker.frontend import load_text
        from checker.importers.compare import compare

        loaded = load_text(text, args.output, max_statements=10_000_000)
        if loaded.program is None:
            first = loaded.diagnostics[0]
            span = first.primary_span
            where = f":{span.line}:{span.column}" if span is not None else ""
            return _error(f"{args.output}{where}: the written spec does not load: {first.message} "
                          "(this is a bug in streamproof; please report it with the trace)")
        comparison = compare(imported, loaded.program)
        if args.format == "text":
            for line in comparison.lines():
                print(line)
            print(f"run `streamproof optimize {args.output}` for the best schedule of this work")
        else:
            result["compare"] = comparison.to_json()
    if args.format == "json":
        sys.stdout.write(json.dumps(result, indent=1) + "\n")
    return EXIT_OK
