"""`streamproof import [kineto] TRACE.json[.gz] [--et ET.json[.gz]] -o OUT.sched [--compare]`.

Bad input (a missing file, not JSON, not a trace, an output that is one of the inputs) is one
line on stderr and exit status 2; so is running out of memory. `-` as TRACE (or as the
`--et` file) reads standard input, within the same size cap as a file.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import sys
import zlib
from pathlib import Path

from checker.inputs import overwrites
from checker.parse import MAX_DURATION_NS
from checker.resources import TooLarge, read_at_most, read_stdin_at_most

MAX_TRACE_BYTES = 1 << 30
MAX_JSON_OBJECTS = 10_000_000
"""JSON objects a trace may hold (about 300 bytes each in memory once read: a small file of
empty ones, `[{}, {}, ...]`, took 3 GB). A real trace of 200,000 kernels holds about 1.3 million."""
"""The largest trace read, after decompression: importing takes about 7 bytes of memory and
0.1-0.2 s per byte-megabyte of JSON, so 1 GiB costs some 7 GB and a few minutes."""

MAX_COMPARE_STATEMENTS = 200_000
"""The largest spec `--compare` simulates. Loading and simulating cost about 80 us of CPU per
statement, linear but some four times the import itself: 200,000 statements take some 15-20 s
and 600,000 over a minute (and 1.5 GB). Past it the comparison is skipped with a note."""

STDIN = "-"
ASCEND_OUTPUT, ASCEND_TRACE = "ASCEND_PROFILER_OUTPUT", "trace_view.json"
"""Where the Ascend profiler writes its trace: `ASCEND_OUTPUT/ASCEND_TRACE` in a rank's
`..._ascend_pt` folder."""
STDIN_NAME = "<stdin>"
"""How messages and the spec's title name a trace read from standard input."""

EXIT_OK, EXIT_ERROR = 0, 2
FORMAT = "kineto"
"""The trace format word, the only one (and the default): `import [kineto] TRACE...`."""

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
  streamproof import report.sqlite -o run.sched            (nsys export --type sqlite)
  streamproof import kineto rank0.json.gz rank1.json.gz -o ranks.sched   (one spec, collectives matched)
  streamproof check run.sched && streamproof optimize run.sched
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = DESCRIPTION
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.usage = ("%(prog)s [-h] [kineto] TRACE [TRACE ...] [--et EXECUTION_TRACE] [-o OUT] [--compare]\n"
                    "       [--min-gap DURATION] [--format {text,json}]")
    # (dest `trace_files`, not `trace`: `trace` is the --trace output of other commands, and
    # a TRACE of `-` is standard input, not standard output; the format word is read off its
    # front by `_Traces`: an optional positional before one of `+` took the first of several
    # traces for the format word, a usage error)
    parser.add_argument("trace_files", metavar="[kineto] TRACE", nargs="+", action=_Traces,
                        help="the trace format, kineto (PyTorch profiler Chrome trace, the default), which may "
                             "be left out; then the trace (.json or .json.gz, or an Nsight Systems .sqlite export), - for "
                             "standard input; several (or "
                             "a directory of them): one per rank of a distributed run, imported into one spec "
                             "where their collectives meet")
    parser.add_argument("--et", metavar="EXECUTION_TRACE", action=_EachTrace,
                        help="PyTorch Execution Trace of the same run: reads and writes of every operator "
                             "(- for standard input); with several traces, one --et per trace, in order")
    parser.add_argument("-o", "--output", metavar="OUT",
                        help="where to write the .sched spec, - for standard output (required; pyproject.toml may set it)")
    parser.add_argument("--compare", action="store_true",
                        help="simulate the spec and print its spans next to the trace's, per stream "
                             f"(skipped, with a note, past {MAX_COMPARE_STATEMENTS:,} statements)")
    parser.add_argument("--min-gap", type=_duration_ns, default=0, metavar="DURATION",
                        help="write host gaps shorter than this into the next one (default 0: every gap); "
                             "makes large specs smaller")
    parser.add_argument("--format", choices=("text", "json"), default="text", help="output format (default text)")


class _Traces(argparse.Action):
    """The TRACE arguments, after the format word `kineto` where it leads them (it may be left
    out, as it is the only format); `kind` is the format."""

    def __call__(self, parser, namespace, values, option_string=None):
        values = list(values)
        if values[0] == FORMAT:
            values = values[1:]
            if not values:
                parser.error("the following arguments are required: TRACE")
        elif len(values) > 1 and re.fullmatch(r"[A-Za-z]\w*", values[0]) and not os.path.exists(values[0]):
            # (a word that is no file, before the traces: a format this command does not read)
            parser.error(f"argument [kineto] TRACE: invalid choice: {values[0]!r} (choose from {FORMAT!r})")
        namespace.kind = FORMAT
        setattr(namespace, self.dest, values)


class _EachTrace(argparse._AppendAction):
    """`--et`, once per trace; those on the command line replace a default from
    pyproject.toml instead of adding to it."""

    def __call__(self, parser, namespace, values, option_string=None):
        given = getattr(namespace, "_et_given", False)
        items = list(getattr(namespace, self.dest, None) or []) if given else []
        namespace._et_given = True
        setattr(namespace, self.dest, [*items, values])


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


def _shown(path: str) -> str:
    return STDIN_NAME if path == STDIN else path


def _read_at_most_stdin(limit: int) -> bytes:
    """Standard input's bytes, refusing more than `limit` (decompressed when gzip)."""
    if sys.stdin is None:
        raise InputError("cannot read standard input: it is closed")
    return read_stdin_at_most(limit, "standard input")


def read_json(path: str):
    """The JSON document in a file, gzip-compressed or not; `-` is standard input. An Nsight
    Systems SQLite export (a file that starts as SQLite databases do) is read as the Kineto
    trace it amounts to (`nsys.py`), the database opened read-only."""
    name = _shown(path)
    from checker.importers import nsys

    if path != STDIN and nsys.is_sqlite(path):
        return _read_nsys(path, name)
    try:
        data = _read_at_most_stdin(MAX_TRACE_BYTES) if path == STDIN else read_at_most(path, MAX_TRACE_BYTES)
    except TooLarge as exc:
        raise InputError(f"{exc}: import a shorter profiling window") from None
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise InputError(f"{name}: not a readable gzip file ({exc})") from None
    except OSError as exc:
        raise InputError(f"cannot read {name}: {exc.strerror or exc}") from None
    except ValueError as exc:  # reading a closed standard input
        raise InputError(f"cannot read {name}: {exc}") from None
    if data[:len(nsys.MAGIC)] == nsys.MAGIC:  # (an export on standard input, or gzip-compressed)
        return _read_nsys(data, name)
    if data.count(b"{") > MAX_JSON_OBJECTS:  # (an over-count where strings hold braces: still far past real traces)
        raise InputError(f"{name}: more than {MAX_JSON_OBJECTS:,} JSON objects, too many to read: import a "
                         "shorter profiling window")
    try:
        return json.loads(data)
    except UnicodeDecodeError:
        raise InputError(f"{name}: not JSON (not UTF-8 text)") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"{name}:{exc.lineno}:{exc.colno}: not JSON: {exc.msg}") from None
    except RecursionError:
        raise InputError(f"{name}: not JSON (nested too deeply)") from None
    except ValueError:  # an integer of more digits than Python converts (4,300)
        raise InputError(f"{name}: not a trace: it holds a number of thousands of digits") from None


def _read_nsys(source, name: str):
    from checker.importers.execution_trace import TraceError
    from checker.importers.nsys import as_kineto

    try:
        return as_kineto(source)
    except TraceError as exc:
        raise InputError(f"{name}: {exc}") from None


def _output_problem(args) -> str | None:
    """What makes the output unwritable or harmful, found before any work."""
    output = args.output
    if output == STDIN:
        return None
    inputs = [(path, "the trace being imported") for path in args.trace_files]
    inputs += [(path, "the Execution Trace given with --et") for path in args.et or ()]
    for path, what in inputs:
        if overwrites(output, path):
            return (f"-o {output} is {what}{' (standard input)' if path == STDIN else ''}: writing the "
                    "spec there would overwrite it; name another output file (e.g. run.sched)")
    if os.path.isdir(output):
        return f"cannot write {output}: it is a directory"
    return None


def _error(message: str) -> int:
    print(f"streamproof: error: {message}", file=sys.stderr)
    return EXIT_ERROR


def run(args) -> int:
    phase = ["import"]
    try:
        return _run(args, phase)
    except MemoryError:
        pass  # (out of the handler first: the exception's frames hold what filled the memory)
    if phase[0] == "compare":
        return _error(f"out of memory comparing the imported spec with the trace ({args.output} was "
                      "written; the trace is too large to compare: import without --compare, or with "
                      "--min-gap for a smaller spec)")
    return _error("out of memory (the trace is too large to import: import a shorter profiling window, "
                  "or without --et)")


def _expand(paths: list[str]) -> list[str] | str:
    """The traces, a directory standing for the traces in it (the profiler's output folder of
    a distributed run, one per rank): its `*.pt.trace.json[.gz]` files (PyTorch's
    `tensorboard_trace_handler` names), else every `.json` and `.json.gz` file, by name; a
    message for a directory with none."""
    out: list[str] = []
    for path in paths:
        if path == STDIN or not os.path.isdir(path):
            out.append(path)
            continue
        folder = Path(path)
        entries = sorted(folder.iterdir())
        files = [p for p in entries if p.is_file() and p.name.endswith((".json", ".json.gz"))]
        named = [p for p in files if p.name.endswith((".pt.trace.json", ".pt.trace.json.gz"))]
        # (the Ascend profiler: a `..._ascend_pt` folder per rank, its trace inside; or the
        # output folder itself)
        if folder.name == ASCEND_OUTPUT:
            ascend = [p for p in files if p.name == ASCEND_TRACE]
        else:
            ascend = [p / ASCEND_OUTPUT / ASCEND_TRACE for p in [folder, *entries]
                      if (p / ASCEND_OUTPUT / ASCEND_TRACE).is_file()]
        if ascend and not named:
            out += [str(p) for p in ascend]
            continue
        if not files:
            return f"{path} is a directory with no .json or .json.gz trace in it"
        out += [str(p) for p in (named or files)]
    return out


def _rounded_up(count: int) -> int:
    """A limit a little above `count`, easy to type (two significant digits)."""
    step = 10 ** max(0, len(str(count)) - 2)
    return (count // step + 1) * step


def _statements(counts: dict) -> int:
    """About how many statements the written spec has (its threads' lines but comments)."""
    return sum(counts.get(kind, 0) for kind in ("kernel", "memcpy", "memset", "host", "record", "wait", "sync"))


def _run(args, phase: list[str]) -> int:
    from checker.importers.ascend import with_profiled_rank
    from checker.importers.execution_trace import TraceError, read_execution_trace
    from checker.importers.kineto import import_kineto
    from checker.importers.ranks import import_ranks

    if args.output is None:  # (not `required=`: that would ignore a default from pyproject.toml)
        return _error("the following arguments are required: -o/--output")
    sources = _expand(args.trace_files)
    if isinstance(sources, str):
        return _error(sources)
    args.trace_files = sources
    ets = args.et or []
    if sources.count(STDIN) == 1 and STDIN in ets:
        return _error("the trace and the --et file cannot both be read from standard input (-)")
    if sources.count(STDIN) + ets.count(STDIN) > 1:
        return _error("only one input can be read from standard input (-)")
    if ets and len(ets) != len(sources):
        return _error(f"{len(ets)} --et file(s) for {len(sources)} trace(s): give one Execution Trace per trace, "
                      "in the same order, or none")
    problem = _output_problem(args)
    if problem is not None:
        return _error(problem)
    names = [STDIN_NAME if source == STDIN else Path(source).name for source in sources]
    if len(set(names)) < len(names):
        names = [_shown(source) for source in sources]
    try:
        # (an Ascend trace's rank is in the profiler's folder, not in the trace)
        traces = [read_json(source) if source == STDIN else with_profiled_rank(read_json(source), source)
                  for source in sources]
        if ets and any(isinstance(t, dict) and t.get("streamproofFlavour") == "nsys" for t in traces):
            return _error("--et cannot be used with an Nsight Systems export: the export names no PyTorch "
                          "operators (record function ids) to link an Execution Trace to")
        parsed_ets = []
        for path in ets:
            try:
                parsed_ets.append(read_execution_trace(read_json(path)))
            except TraceError as exc:
                return _error(f"{_shown(path)}: {exc}")
    except InputError as exc:
        return _error(str(exc))
    try:
        if len(traces) == 1:
            imported = import_kineto(traces[0], parsed_ets[0] if parsed_ets else None, source=names[0],
                                     min_gap=args.min_gap)
        else:
            imported = import_ranks(list(zip(traces, names)), parsed_ets or None, min_gap=args.min_gap)
    except TraceError as exc:
        return _error(f"{_shown(sources[0])}: {exc}" if len(traces) == 1 else str(exc))
    del traces, parsed_ets
    # (names from the trace reach comments with their control and format characters and lone
    # surrogates replaced: `Imported` makes its text printable, see `kineto.printable_text`)
    text = imported.text
    imported.text = ""  # (one copy of the spec in memory is enough)
    from checker.cli import write_output
    from checker.parse import MAX_SOURCE_CHARS

    size = len(text.encode("utf-8"))
    if size > MAX_SOURCE_CHARS:  # (a spec no command would read: not written)
        return _error(f"the spec would be {size / (1 << 20):,.1f} MiB, over the {MAX_SOURCE_CHARS >> 20} MiB a spec "
                      "may have; nothing written: profile fewer steps (torch.profiler's `schedule`) or a shorter "
                      "window of the run")

    try:
        write_output(args.output, text)
    except OSError as exc:
        return _error(f"cannot write {args.output}: {exc.strerror or exc}")
    c = imported.counts
    notes = imported.notes
    from checker.lower import DEFAULT_MAX_STATEMENTS

    if _statements(c) > DEFAULT_MAX_STATEMENTS:
        notes.append(f"the spec has about {_statements(c):,} statements, more than the {DEFAULT_MAX_STATEMENTS:,} "
                     f"the other commands lower by default: run them with `--max-statements "
                     f"{_rounded_up(_statements(c))}` (or make the spec smaller: --min-gap, or a shorter "
                     "profiling window)")
    compare_it = args.compare
    if compare_it and _statements(c) > MAX_COMPARE_STATEMENTS:
        compare_it = False
        notes.append(f"--compare skipped: the spec has {_statements(c):,} statements, more than the "
                     f"{MAX_COMPARE_STATEMENTS:,} it simulates (loading and simulating cost about four times "
                     "the import); --min-gap makes the spec smaller, or import a shorter profiling window")
    for note in notes:
        print(f"streamproof: note: {note}", file=sys.stderr)
    result = {"path": args.output, "trace": _shown(sources[0]), "counts": c, "notes": notes,
              "assumptions": imported.assumptions}
    if len(sources) > 1:
        result["traces"] = [_shown(source) for source in sources]
    if args.format == "text":
        print(f"wrote {args.output}: {c.get('threads', 0)} thread(s), {c.get('streams', 0)} stream(s), "
              f"{c.get('kernel', 0)} kernels, {c.get('memcpy', 0)} copies, {c.get('memset', 0)} memsets, "
              f"{c.get('wait', 0)} waits, {c.get('sync', 0)} syncs"
              + (f", {c.get('collective', 0)} collectives on {c['comms']} comm(s)" if c.get("ranks") else "")
              + (f", {c['assumptions']} assumption(s)" if c.get("assumptions") else ""))
    if args.compare and not compare_it:
        result["compare"] = None
    if compare_it:
        from checker.frontend import load_text
        from checker.importers.compare import compare

        phase[0] = "compare"
        loaded = load_text(text, args.output, max_statements=10_000_000)
        del text
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
