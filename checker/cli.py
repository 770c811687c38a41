"""Command line: `streamproof check|show|replay|simulate|optimize`.

Exit status: 0 = every file clean (or exactly as its `expect` lines say), 1 = findings, an
unmet expectation, an unknown answer, or (simulate, optimize) a program that deadlocks,
2 = a usage error, unreadable input, or an invalid spec.

Streams: everything about the inputs (results, findings, diagnostics of a spec) goes to
standard output, in every format; standard error carries usage errors, interrupts and the
progress display (on a terminal only). JSON output is `{"version": ..., "files": [...]}`
for every command.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import difflib
import errno
import io
import json
import os
import re
import sys
import zlib
from pathlib import Path

from checker import __version__

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2

DESCRIPTION = """\
streamproof: a formal concurrency model checker for GPU/NPU stream programs.

Write the program as a .sched spec (streams, events, kernels, copies, host threads), and
streamproof proves it free of races, use-after-free and deadlocks in every execution, or
shows an execution that has one.
"""

EXIT_STATUS = """\
exit status:
  0  every file is clean, or has exactly the findings its `expect` lines ask for
  1  findings, an unmet expectation, an undecided (unknown) query, (simulate,
     optimize) a program that deadlocks, or optimize --emit with no spec to write
  2  usage error, unreadable input, an invalid spec (diagnostics say where) or an
     invalid configuration (SP005)
  130  interrupted (Ctrl-C)
  143  terminated (SIGTERM): worker processes are stopped too

inputs:
  FILE is a .sched spec, a directory (every *.sched below it) or - (standard input);
  `replay` takes one spec file.
  [tool.streamproof] in the nearest pyproject.toml sets defaults for any option, e.g.
  `timeout = 30`, `jobs = 4`, `files = ["specs"]`; a [tool.streamproof.COMMAND] table
  sets them for one command.
"""

EPILOG = EXIT_STATUS + """
examples:
  streamproof check specs/
  streamproof check -j 4 --format sarif --output results.sarif specs/
  streamproof check --format junit specs/ > streamproof.xml
  cat spec.sched | streamproof check -
  streamproof show specs/inference_pipeline.sched
  streamproof simulate specs/copy_compute_double_buffered.sched --trace out.json
  streamproof optimize specs/copy_compute_sync.sched
"""

EXAMPLES = {
    "check": """\
  streamproof check specs/copy_compute_double_buffered.sched
  streamproof check specs/                      every *.sched below specs/
  streamproof check -j 4 --quiet specs/         four workers; print only failures
  streamproof check --format sarif -o results.sarif specs/   for GitHub code scanning
  streamproof check --format junit specs/ > streamproof.xml   for Jenkins, GitLab
  streamproof check --format json spec.sched | jq '.files[0].findings'
  streamproof check --cluster tcp://scheduler:8786 suites/   on a Dask cluster
""",
    "show": """\
  streamproof show specs/inference_pipeline.sched
  streamproof show --format json specs/ | jq '.files[].counts'
""",
    "replay": """\
  streamproof check --format json specs/bug_missing_wait.sched > found.json
  streamproof replay specs/bug_missing_wait.sched --witness found.json
  streamproof replay specs/bug_missing_wait.sched --witness found.json --finding 1 --trace replay.json
""",
    "simulate": """\
  streamproof simulate specs/copy_compute_double_buffered.sched
  streamproof simulate specs/pipeline_three_stage.sched --trace out.json   (open in ui.perfetto.dev)
  streamproof simulate --format json specs/
""",
    "optimize": """\
  streamproof optimize specs/copy_compute_sync.sched
  streamproof optimize --timeout 60 specs/copy_compute_sync.sched --emit faster.sched
  streamproof optimize --format json specs/
""",
}


REPLAY_EXIT_STATUS = """\
exit status:
  0  the finding was reproduced step by step
  1  its steps replay but do not show the finding again
  2  usage error, unreadable input, an invalid spec, or a witness that is not an
     execution of this spec (of another spec, or of an earlier version of it)
"""


_INVALID_STATUS = EXIT_STATUS[EXIT_STATUS.index("  2  usage error"):]
"""Status 2, interrupts and inputs, as every command but `replay` has them."""

COMMAND_EXIT_STATUS = {
    "replay": REPLAY_EXIT_STATUS,
    "show": """\
exit status:
  0  every spec is valid
""" + _INVALID_STATUS,
    "simulate": """\
exit status:
  0  no spec deadlocks
  1  a program that deadlocks (it has no makespan)
""" + _INVALID_STATUS,
    "optimize": """\
exit status:
  0  no spec deadlocks (and, with --emit, every spec was written)
  1  a program that deadlocks (it has no makespan), or --emit with no spec to write
""" + _INVALID_STATUS,
}


def _epilog(command: str) -> str:
    status = COMMAND_EXIT_STATUS.get(command, EXIT_STATUS)
    return status + "\nexamples:\n" + EXAMPLES[command]


class _Settings:
    """Output settings of the running command (set by `main`)."""

    color = "auto"
    document = sys.stdout
    """Where an output named `-` goes: standard output, while the report goes to standard error."""


OUTPUT_FLAGS = (("-o", "output"), ("--trace", "trace"), ("--svg", "svg"), ("--emit", "emit"))
"""Options that name an output file; `-` names standard output."""


def write_output(path: str, text: str) -> None:
    """Write a finished output (trace, chart, spec, report) to a file, or to standard output
    for `-`. Raises OSError."""
    if path == "-":
        _Settings.document.write(text)
        _Settings.document.flush()
    else:
        Path(path).write_text(text, encoding="utf-8")


def _plain_output() -> bool:
    """No escape codes at all: --color never, or NO_COLOR (https://no-color.org) under auto."""
    return _Settings.color == "never" or (_Settings.color == "auto" and bool(os.environ.get("NO_COLOR")))


def _console(stream=None):
    from rich.console import Console

    if _plain_output():
        return Console(file=stream or sys.stdout, highlight=False, soft_wrap=True, emoji=False, color_system=None,
                       no_color=True)
    if _Settings.color == "always":
        return Console(file=stream or sys.stdout, highlight=False, soft_wrap=True, emoji=False, force_terminal=True,
                       color_system="standard", no_color=False)
    return Console(file=stream or sys.stdout, highlight=False, soft_wrap=True, emoji=False, color_system="auto")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="streamproof", description=DESCRIPTION, epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"streamproof {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    def common(sub, many=False, formats=("text", "json")):
        if many:
            sub.add_argument("files", nargs="*", metavar="FILE",
                             help=".sched specs, directories of them (every *.sched below), or - for standard input")
        else:
            sub.add_argument("file", metavar="FILE", help="a .sched spec, or - for standard input")
        sub.add_argument("--format", choices=formats, default="text",
                         help=f"output format: {', '.join(formats)} (default text)")
        sub.add_argument("--stdin-filename", metavar="PATH", default=None,
                         help="the name to give the spec read from standard input (-) in diagnostics and "
                              "reports, e.g. the file an editor or a CI step pipes in"
                              + (" (SARIF locates it there)" if "sarif" in formats else ""))
        sub.add_argument("--max-statements", type=_statement_limit, default=DEFAULT_MAX_STATEMENTS, metavar="N",
                         help=f"refuse specs that unroll past N statements (default {DEFAULT_MAX_STATEMENTS:,}, "
                              f"at most {MAX_STATEMENTS:,})")
        sub.add_argument("-q", "--quiet", action=argparse.BooleanOptionalAction, default=False,
                         help="print only what fails (findings, errors), nothing on success; no progress display")
        sub.add_argument("--color", choices=("auto", "always", "never"), default="auto",
                         help="colour text output: auto (on a terminal, unless NO_COLOR is set), always, never")

    check = commands.add_parser("check", help="prove a spec free of races, use-after-free and deadlocks",
                                description="Search every execution of each spec for races, use-after-free, "
                                            "deadlocks and collective mismatches; check its `expect` lines.",
                                epilog=_epilog("check"), formatter_class=argparse.RawDescriptionHelpFormatter)
    common(check, many=True, formats=("text", "json", "sarif", "junit"))
    check.add_argument("-o", "--output", metavar="FILE",
                       help="write the report to FILE instead of standard output (text is written without colour)")
    check.add_argument("-j", "--jobs", type=_positive, default=None, metavar="N",
                       help="check files in N worker processes (default: every core); results are the same as -j 1")
    check.add_argument("--cluster", metavar="ADDRESS", default=None, type=_address,
                       help="send the files to the Dask scheduler at ADDRESS (e.g. tcp://host:8786) instead; "
                            "needs `pip install 'streamproof[cluster]'` here and on the workers")
    check.add_argument("--timeout", type=_positive_float, default=10.0, metavar="SECONDS",
                       help="solver time per query (default 10); a query that runs out is reported unknown")
    check.add_argument("--budget", type=_positive_float, default=300.0, metavar="SECONDS",
                       help="time for all solver queries of one spec together, or for its --exhaustive "
                            "search (default 300); questions left when it runs out are reported unknown")
    check.add_argument("--rlimit", type=_positive, default=None, metavar="N",
                       help="also stop each solver query after N Z3 resource units (reproducible across machines)")
    check.add_argument("--allow-unknown", action=argparse.BooleanOptionalAction, default=False,
                       help="do not fail on unknown answers (--no-allow-unknown: fail, whatever pyproject.toml says)")
    check.add_argument("--exhaustive", action=argparse.BooleanOptionalAction, default=False,
                       help="enumerate every interleaving with the executor instead of the solver (small specs)")
    check.add_argument("--max-states", type=_positive, default=1_000_000, metavar="N",
                       help="state cap for --exhaustive (default 1,000,000); hitting it reports unknown")
    check.add_argument("--explore-first", type=_count, default=20_000, metavar="N",
                       help="when the solver's runs leave many questions for Z3, let the exhaustive search "
                            "try first: if it covers every interleaving within N states (default 20,000) and "
                            "3 s it decides the spec, else Z3 does; 0 for the solver alone")
    check.add_argument("--no-symmetry", action="store_true",
                       help="ask the solver about every pair of threads that are the same program, instead "
                            "of one pair per orbit whose answer is carried to the rest (to compare)")
    check.add_argument("--symmetry", dest="no_symmetry", action="store_false",
                       help="one question per orbit of identical threads (the default; undoes a configured "
                            "`no-symmetry = true`)")
    check.add_argument("--max-memory", type=_memory_size, default=None, metavar="SIZE",
                       help="memory the exhaustive search may hold in states (default 1GiB, at most 1TiB), "
                            "estimated per state; reaching it reports unknown")

    show = commands.add_parser("show", help="print the lowered program: devices, streams, statements",
                               description="Print each spec as the checker sees it: devices, buffers, streams, "
                                           "and every statement after loops are unrolled, with counts.",
                               epilog=_epilog("show"), formatter_class=argparse.RawDescriptionHelpFormatter)
    common(show, many=True)

    replay = commands.add_parser("replay", help="replay a finding's witness step by step",
                                 description="Replay the execution behind a finding of `check --format json` "
                                             "step by step with the executor, and confirm the finding.",
                                 epilog=_epilog("replay"), formatter_class=argparse.RawDescriptionHelpFormatter)
    common(replay)
    replay.add_argument("--witness", metavar="FILE",
                        help="the JSON that `check --format json` printed (required; pyproject.toml may set it)")
    replay.add_argument("--finding", type=int, default=None, metavar="N",
                        help="which finding: its place in the report's `findings` list, from 0 "
                             "(default: the first that has a witness)")
    replay.add_argument("--trace", metavar="FILE", help="write a Chrome/Perfetto trace of the replay")
    replay.add_argument("--svg", metavar="FILE", help="write a Gantt chart of the replay")

    simulate = commands.add_parser("simulate", help="run the program forward in time: makespan, utilisation, timeline",
                                   description="Run each spec forward in time with its durations: makespan, "
                                               "engine utilisation and the critical path. A program that gets "
                                               "stuck has no makespan: that is reported and the status is 1.",
                                   epilog=_epilog("simulate"), formatter_class=argparse.RawDescriptionHelpFormatter)
    common(simulate, many=True)
    simulate.add_argument("--trace", metavar="FILE", help="write Chrome Trace Event JSON (opens in Perfetto)")
    simulate.add_argument("--svg", metavar="FILE", help="write a Gantt chart")

    optimize = commands.add_parser("optimize", help="minimum makespan and the overlap bound of the work",
                                   description="The simulated makespan of each spec, the minimum makespan any "
                                               "execution reaches, and the bound of perfect overlap. A program "
                                               "that deadlocks has no makespan: that is reported and the status is 1.",
                                   epilog=_epilog("optimize"), formatter_class=argparse.RawDescriptionHelpFormatter)
    common(optimize, many=True)
    optimize.add_argument("--timeout", type=_positive_float, default=30.0, metavar="SECONDS",
                          help="solver time limit (default 30); reports the best found and the proven lower bound")
    optimize.add_argument("--trace", metavar="FILE",
                          help="write the best execution found as Chrome Trace Event JSON")
    optimize.add_argument("--svg", metavar="FILE",
                          help="write Gantt charts of the best execution and of the overlap bound "
                               "(one SVG, one time scale)")
    optimize.add_argument("--emit", metavar="OUT", help="write a spec whose orders allow the overlap bound (its `expect makespan` is what its run "
                               "in time reaches, which a runtime's dispatch can put above the bound)")
    optimize.add_argument("--solver", choices=("auto", "z3", "cpsat"), default="auto",
                          help="z3, cpsat (needs streamproof[cpsat]), or auto: both at once sharing "
                               "bounds when OR-Tools is installed, z3 otherwise (default)")

    from checker.importers.command import add_arguments as import_arguments
    import_arguments(commands.add_parser("import", help="write a .sched spec from a profiler trace (kineto)"))
    return parser


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError("must be positive")
    if not value <= MAX_SECONDS:  # also infinity and NaN
        raise argparse.ArgumentTypeError(f"must be at most {MAX_SECONDS:,} seconds")
    return value


MAX_STATEMENTS = 20_000_000
"""The highest `--max-statements`: lowering takes about 1 KB and 25 us per statement, so a
spec this large already takes gigabytes and minutes before any analysis."""
DEFAULT_MAX_STATEMENTS = 250_000
"""The default `--max-statements` (`checker.lower.DEFAULT_MAX_STATEMENTS`, kept equal by a test;
the lowering is not imported for `--help`)."""


def _count(text: str) -> int:
    """A whole number from 0 up to the state cap's range."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if not 0 <= value <= 10**12:
        raise argparse.ArgumentTypeError("must be from 0 to 1,000,000,000,000")
    return value


def _statement_limit(text: str) -> int:
    value = _positive(text)
    if value > MAX_STATEMENTS:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_STATEMENTS:,}")
    return value


MAX_SECONDS = 10**7
"""The longest time limit accepted (about 115 days): solvers take limits in whole milliseconds."""


def _memory_size(text: str) -> int:
    """A memory size: `4GiB`, `512MB`, or plain bytes."""
    from checker.parse import SIZE_UNITS

    found = re.fullmatch(r"\s*([0-9]+)\s*([A-Za-z]*)\s*", text)
    unit = found and (SIZE_UNITS.get(found.group(2)) if found.group(2) else 1)
    if not unit:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (write e.g. 4GiB, 512MiB)")
    value = int(found.group(1)) * unit
    if not 2**20 <= value <= 2**40:
        raise argparse.ArgumentTypeError("must be between 1MiB and 1TiB")
    return value


def _limit_memory() -> None:
    """Cap the address space so that no spec can exhaust the machine (MemoryError is reported)."""
    try:
        import resource

        limit = int(os.environ.get("STREAMPROOF_MAX_MEMORY_GB", "16")) * 2**30
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        if soft == resource.RLIM_INFINITY or soft > limit:
            resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    except (ImportError, ValueError, OSError):
        pass


def _unwritable_output(args) -> str | None:
    """An output file that cannot be written, said before the work rather than after it (a
    check of minutes must not end in "cannot write"): its folder is missing or not writable,
    or it is a folder."""
    for flag, name in OUTPUT_FLAGS:
        output = getattr(args, name, None)
        if not output or output == "-":
            continue
        path = Path(output)
        folder = path.parent if str(path.parent) else Path(".")
        if path.is_dir():
            return f"cannot write {output}: it is a directory"
        if not folder.is_dir():
            return f"cannot write {output}: there is no directory {folder}"
        if not os.access(folder, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
            return f"cannot write {output}: permission denied"
    return None


def _clobbered_input(args) -> str | None:
    """An output flag that names an input file (a spec given by name, a witness): writing
    there would destroy it before or while it is read. `import` checks its own."""
    from checker.inputs import overwrites

    named = [path for path in getattr(args, "files", None) or () if path != "-"]
    inputs = [path for path in named if os.path.isfile(path)]
    folders = [Path(path).resolve() for path in named if os.path.isdir(path)]
    for attribute in ("file", "witness"):
        path = getattr(args, attribute, None)
        if isinstance(path, str) and path != "-" and os.path.isfile(path):
            inputs.append(path)
    for flag, name in OUTPUT_FLAGS:
        output = getattr(args, name, None)
        if args.command == "import" or not isinstance(output, str) or output == "-":
            continue
        for path in inputs:
            if overwrites(output, path):
                return f"{flag} {output} is an input ({path}): writing there would overwrite it; name another file"
        if output.endswith(".sched"):  # a spec below a folder given as input
            resolved = Path(output).resolve()
            for folder in folders:
                if resolved.is_relative_to(folder):
                    return (f"{flag} {output} is a spec in the input folder {folder}: writing there would "
                            "overwrite it; name another file")
    return None


_HANDLER_PID: list[int] = []
"""The process that installed `_on_sigterm` (a child forked before it resets the signal
inherits the handler, and must not speak for the command)."""


def _on_sigterm(signum, frame) -> None:
    """SIGTERM (a CI job cancelled, `kill`, a container stopped): stop every worker process
    and the forked solver, say so, and exit at once. Unwinding instead freed what the search
    held first: an `--exhaustive` search of a minute took 20 s to go, past the grace period
    that `docker stop` and CI runners give before SIGKILL."""
    import multiprocessing

    if os.getpid() not in _HANDLER_PID:
        os._exit(143)
    children = multiprocessing.active_children()
    for child in children:
        child.terminate()
    for child in children:
        child.join(timeout=2.0)
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream.isatty():  # (a progress display's line, and the cursor it hid)
                stream.write("\r\x1b[2K\x1b[?25h")
            stream.flush()
        except (OSError, ValueError):
            pass
    try:
        print("streamproof: terminated", file=sys.stderr, flush=True)
    finally:
        os._exit(143)


def main(argv: list[str] | None = None) -> int:
    import signal
    import threading

    previous = None
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        _HANDLER_PID[:] = [os.getpid()]
        previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        return _main(argv)
    except KeyboardInterrupt:  # (also while the parser and the commands' modules load)
        print("streamproof: interrupted", file=sys.stderr)
        return 130
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _main(argv: list[str] | None) -> int:
    parser = _parser()
    try:
        _apply_config(parser)
        config_error = None
    except ValueError as exc:  # inputs.InputError: reported after --help and --version had their say
        config_error = exc
    args, extra = parser.parse_known_args(argv)
    if extra:  # (told by the command's own usage, not the top level's)
        commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        (commands.choices.get(args.command) or parser).error(f"unrecognized arguments: {' '.join(extra)}")
    if config_error is not None:
        _config_error(config_error)
        return EXIT_ERROR
    if args.command is None:
        parser.print_help()
        return EXIT_ERROR
    _Settings.color = getattr(args, "color", "auto")
    standard = [flag for flag, name in OUTPUT_FLAGS if getattr(args, name, None) == "-"]
    if len(standard) > 1:
        return _usage_error(args, f"{' and '.join(standard)} {'both' if len(standard) == 2 else 'all'} name standard output (-): "
                                  "at most one output can go there")
    clobbered = _clobbered_input(args) or _unwritable_output(args)
    if clobbered:
        return _usage_error(args, clobbered)
    _limit_memory()
    try:
        if not standard or (args.command == "check" and standard == ["-o"]):
            return COMMANDS[args.command](args)
        # The one output named `-` has standard output to itself; the report goes to standard error.
        _Settings.document = sys.stdout
        with contextlib.redirect_stdout(sys.stderr):
            return COMMANDS[args.command](args)
    except KeyboardInterrupt:
        print("streamproof: interrupted", file=sys.stderr)
        return 130
    except MemoryError as exc:
        where = f"; {exc}" if str(exc) else ""
        print(f"streamproof: error: out of memory (the spec is too large to analyse{where})", file=sys.stderr)
        return EXIT_ERROR
    except BrokenPipeError:  # the reader closed the output early (`| head`): it was cut
        try:  # (and Python's last flush at exit must not complain about the closed pipe)
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError, io.UnsupportedOperation):
            pass
        return EXIT_FINDINGS
    except _OutputError as exc:
        return _usage_error(args, str(exc))
    except OSError as exc:
        if exc.errno not in _WRITE_ERRORS:
            return _internal_error(exc)
        # (standard output on a full disk or a failing device: the environment's, not a bug)
        try:  # (Python's last flush at exit would fail again)
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError, io.UnsupportedOperation):
            pass
        print(f"streamproof: error: cannot write standard output: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_ERROR
    except ctypes.ArgumentError as exc:
        if "KeyboardInterrupt" in str(exc):  # (^C taken while z3's ctypes converted an argument)
            print("streamproof: interrupted", file=sys.stderr)
            return 130
        return _internal_error(exc)
    except Exception as exc:
        return _internal_error(exc)


_WRITE_ERRORS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EFBIG})
"""The errors of a write that the machine, not streamproof, is to blame for."""


def _internal_error(exc: Exception) -> int:
    """Never show a user a traceback; STREAMPROOF_DEBUG=1 does."""
    if os.environ.get("STREAMPROOF_DEBUG"):
        raise exc
    print(f"streamproof: internal error: {type(exc).__name__}: {exc}\n"
          "this is a bug in streamproof; rerun with STREAMPROOF_DEBUG=1 for details and please report it",
          file=sys.stderr)
    return EXIT_ERROR


# -- configuration: [tool.streamproof] in pyproject.toml -----------------------------------


def _address(text: str) -> str:
    """A Dask scheduler address, checked here (not when connecting) so that a bad one in the
    configuration is shown where it is written: tcp and tls (the default when no scheme is
    written) need a host and a port; other schemes are left to Dask."""
    written = text.strip()
    if not written:
        raise argparse.ArgumentTypeError("an empty address: write e.g. tcp://host:8786")
    scheme, _, location = written.partition("://") if "://" in written else ("tcp", "", written)
    if scheme in ("tcp", "tls"):
        host, colon, port = location.rpartition(":")
        if not colon or not host or host == "[]":
            raise argparse.ArgumentTypeError(f"{text!r} is not a scheduler address (no host and port): "
                                             "write e.g. tcp://host:8786")
        if not (port.isascii() and port.isdigit() and 0 < int(port) < 65536):
            raise argparse.ArgumentTypeError(f"{text!r} is not a scheduler address ({port!r} is not a port "
                                             "number): write e.g. tcp://host:8786")
    return text


def _config_error(exc: ValueError) -> None:
    """A bad configuration, as a diagnostic framed in pyproject.toml where the setting is found."""
    from checker.codes import Code
    from checker.diagnostics import error
    from checker.inputs import ConfigError
    from checker.ir import Span
    from checker.report.text import render_diagnostic

    where = exc.where if isinstance(exc, ConfigError) else None
    shown = str(exc.path) if isinstance(exc, ConfigError) else ""
    if isinstance(exc, ConfigError) and Path(exc.path).is_absolute():  # (found upward: as the user would name it)
        relative = os.path.relpath(exc.path)
        shown = relative if not relative.startswith("..") else shown
    if where is None:
        if isinstance(exc, ConfigError):  # (the whole file, or a setting not found in it)
            print(f"{shown}: error[SP005]: {exc.message}" + (f"\n  = help: {exc.help}" if exc.help else ""),
                  file=sys.stderr)
        else:
            print(f"streamproof: error: {exc}", file=sys.stderr)
        return
    line, column, length = where
    try:
        source = exc.path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        source = ""
    start = sum(len(text) + 1 for text in source.split("\n")[:line - 1]) + column - 1
    span = Span(line, column, line, column + length, start, start + length)
    help = exc.help or ("pyproject.toml must be valid TOML throughout" if exc.message.startswith("not valid TOML")
                        else "fix the setting, or remove it to use the default (`streamproof COMMAND --help`)")
    diagnostic = error(Code.SP005, exc.message, span, "here", help=help)
    console = _console(sys.stderr)
    for text in render_diagnostic(shown, source, diagnostic):
        console.print(text)


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _config_value(action: argparse.Action, key: str, value, problem):
    """A configuration value checked and converted as the command line would; `problem(text)`
    makes the error to raise."""
    if action.dest == "files":
        values = [value] if isinstance(value, str) else value
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise problem(f"`{key}` must be a list of paths")
        if any("\0" in v for v in values):
            raise problem(f"`{key}`: a path cannot hold a NUL character")
        return values
    if isinstance(action, argparse._AppendAction):  # (`--et`, one per trace: a path or a list)
        values = [value] if isinstance(value, str) else value
        if not isinstance(values, list) or not all(isinstance(v, str) and "\0" not in v for v in values):
            raise problem(f"`{key}` must be a path or a list of paths")
        return values
    if action.nargs == 0:  # a switch
        if not isinstance(value, bool):
            raise problem(f"`{key}` must be true or false")
        return value
    wanted = ("string" if action.type in (None, str, _address) else "integer" if action.type is int
              else "number")  # (a duration may be either)
    article = "an" if wanted == "integer" else "a"
    if isinstance(value, (bool, list, dict)) or (wanted == "string" and not isinstance(value, str)):
        raise problem(f"`{key}` must be {article} {wanted}")
    if isinstance(value, str) and "\0" in value:
        raise problem(f"`{key}` cannot hold a NUL character")
    converted = str(value)
    if action.type is not None:
        try:
            converted = action.type(converted)
        except argparse.ArgumentTypeError as exc:
            raise problem(f"`{key}`: {exc}") from None
        except ValueError:  # a plain type (int): its message is Python's ("invalid literal for int()")
            raise problem(f"`{key}` must be {article} {wanted}") from None
    if action.choices is not None and converted not in action.choices:
        raise problem(f"`{key}` must be one of {', '.join(map(str, action.choices))}")
    return converted


def _apply_config(parser: argparse.ArgumentParser, start: Path | None = None) -> None:
    """Option defaults from the nearest pyproject.toml with a [tool.streamproof] table (from
    `start`, default the working directory, upwards): its keys apply to every command that has
    the option and takes the value (`format = "sarif"` is `check`'s alone), a
    [tool.streamproof.COMMAND] table to one."""
    from checker.inputs import ConfigError, find_config, locate_key, locate_setting

    path, table = find_config(start)
    if not table:
        return

    def problem(table_name: str, key: str | None, text: str, at_key: bool = False) -> ConfigError:
        where = locate_key(path, table_name, key) if at_key and key else locate_setting(path, table_name, key)
        return ConfigError(path, f"[{table_name}]: {text}", where)

    commands = _subparsers(parser)
    for key, value in table.items():
        if isinstance(value, dict) and key not in commands:
            raise problem(f"tool.streamproof.{key}", None,
                          f"there is no command `{key}` (commands: {', '.join(commands)})")
    shared = {k: v for k, v in table.items() if not isinstance(v, dict)}
    dests = {a.dest for sub in commands.values() for a in sub._actions}
    for key in shared:
        if key.replace("-", "_") not in dests or key in ("file", "help"):
            known = sorted({a.option_strings[-1].lstrip("-") for sub in commands.values() for a in sub._actions
                            if a.option_strings and a.option_strings[-1].startswith("--")})
            close = [name for name in difflib.get_close_matches(key, known, n=2) if name != key][:1]
            if f"no-{key}" in known:  # (`--{key}` only undoes a configured `no-{key}`: the default)
                close = []
                key_help = f": configure `no-{key} = true`, or leave it out for the default"
            else:
                key_help = f" (did you mean `{close[0]}`?)" if close else ""
            raise problem("tool.streamproof", key, f"unknown option `{key}`{key_help}", at_key=True)
    taken: set[str] = set()  # shared keys some command takes
    refused: dict[str, ConfigError] = {}
    for name, sub in commands.items():
        actions = {a.dest: a for a in sub._actions if a.dest not in ("help", "file")}
        own = table.get(name, {}) if isinstance(table.get(name), dict) else {}
        defaults = {}
        for key, value in {**shared, **own}.items():
            action = actions.get(key.replace("-", "_"))
            table_name = "tool.streamproof" + (f".{name}" if key in own else "")
            if action is None:
                if key in own:
                    raise problem(table_name, key, f"`{name}` has no option `{key}`", at_key=True)
                continue
            try:
                converted = _config_value(action, key, value, lambda text: problem(table_name, key, text))
            except ConfigError as exc:
                if key in own:
                    raise
                refused.setdefault(key, exc)  # another command may take it
                continue
            taken.add(key)
            if action.dest == "files":
                converted = [v if os.path.isabs(v) or v == "-" else os.path.relpath(path.parent / v)
                             for v in converted]
            defaults[action.dest] = converted
        sub.set_defaults(**defaults)
    for key, exc in refused.items():
        if key not in taken:
            raise exc


def check_defaults(start: Path) -> dict:
    """`check`'s option values when none is given: the configuration found from `start`
    upwards, checked as the command line checks it (raises `inputs.ConfigError`)."""
    parser = _parser()
    _apply_config(parser, start)
    check = _subparsers(parser)["check"]
    return {action.dest: check.get_default(action.dest) for action in check._actions
            if action.dest not in ("help", "files")}


# -- inputs and output ----------------------------------------------------------------------


def _usage_error(args, message: str) -> int:
    print(f"streamproof {args.command}: error: {message}", file=sys.stderr)
    return EXIT_ERROR


def _sources(args):
    """The sources the command line (or the configuration) names; None after a usage error."""
    from checker.inputs import STDIN, InputError, expand

    names = args.files if hasattr(args, "files") else [args.file]
    if not names:
        _usage_error(args, "no FILE given: name specs, directories or - (standard input), "
                           "or set `files` in [tool.streamproof] of pyproject.toml")
        return None
    stdin_name = getattr(args, "stdin_filename", None)
    if stdin_name is not None and STDIN not in names:
        _usage_error(args, "--stdin-filename names the spec read from standard input: pass - as a FILE")
        return None
    if stdin_name is not None and not stdin_name.strip():
        _usage_error(args, "--stdin-filename needs a name")
        return None
    if stdin_name is not None and any(ord(c) < 32 or ord(c) == 127 for c in stdin_name):
        # (a newline in it would print as diagnostic lines of its own)
        _usage_error(args, "--stdin-filename must not hold control characters (a newline, a tab, ...)")
        return None
    try:
        return expand(names, stdin_name=stdin_name)
    except InputError as exc:
        _usage_error(args, str(exc))
        return None


def _load(source, args):
    from checker.inputs import load

    return load(source, args.max_statements)


def _envelope(files: list[dict]) -> dict:
    """The JSON of every command: the version and one object per file."""
    return {"version": __version__, "files": files}


def _print_json(value) -> None:
    from checker.report.json import json_text

    sys.stdout.write(json_text(value) + "\n")


def _error_report(loaded):
    from checker.findings import FileReport, Status

    return FileReport(loaded.path, Status.ERROR, (), loaded.diagnostics, False, loaded.source,
                      file=loaded.file)


def _input_error(loaded, args, console=None) -> dict:
    """Print (text) the diagnostics of a spec that failed to load; its JSON object."""
    from checker.report.json import report_json
    from checker.report.text import render_report

    report = _error_report(loaded)
    if args.format == "text":
        console = console or _console()
        for line in render_report(report):
            console.print(line)
    return report_json(report)


def _warnings(loaded, args, console) -> list[dict]:
    """Print (text, unless --quiet) the warnings of a loaded spec; their JSON objects."""
    from checker.report.json import diagnostic_json
    from checker.report.text import left_out, render_diagnostic, shown_diagnostics

    if args.format == "text" and not args.quiet:
        shown, left = shown_diagnostics(loaded.diagnostics)
        for diagnostic in shown:
            for line in render_diagnostic(loaded.path, loaded.source, diagnostic):
                console.print(line)
        for line in left_out(loaded.path, left):
            console.print(line)
    return [diagnostic_json(d) for d in loaded.diagnostics]


class _Batch:
    """One command's work over its specs: the JSON object of each file, in order, and the
    exit status so far. Specs that fail to load are reported here, once for every command."""

    def __init__(self, args, console):
        self.args, self.console = args, console
        self.files: list[dict] = []
        self.status = EXIT_CLEAN

    def loaded(self, sources):
        """Each spec of `sources` that loads, with its warnings (printed, and as JSON)."""
        for source in sources:
            loaded = _load(source, self.args)
            if loaded.program is None:
                self.files.append(_input_error(loaded, self.args, self.console))
                self.status = EXIT_ERROR
                continue
            yield loaded, _warnings(loaded, self.args, self.console)

    def finish(self) -> int:
        """Print the JSON envelope (with --format json); the exit status."""
        if self.args.format == "json":
            _print_json(_envelope(self.files))
        return self.status


def _display_console(args=None):
    """Where a progress display may draw: a terminal (standard output, else standard error);
    none under --color never or NO_COLOR, since it draws with cursor escape codes. Never
    standard output when a machine format (json, sarif, junit) goes there: a terminal can be
    the capture of a report (`docker run -t ... > out.sarif`)."""
    if _plain_output():
        return None
    machine = args is not None and getattr(args, "format", "text") != "text" and getattr(args, "output", None) in (None, "-")
    for stream in (sys.stderr,) if machine else (sys.stdout, sys.stderr):
        try:
            if stream.isatty():
                return stream
        except (AttributeError, ValueError):
            continue
    return None


def _document(args, text: str) -> int:
    """Write a finished document to --output or standard output."""
    output = getattr(args, "output", None)
    if not output or output == "-":
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        return EXIT_CLEAN
    try:
        Path(output).write_text(text if text.endswith("\n") else text + "\n", encoding="utf-8")
    except OSError as exc:
        return _usage_error(args, f"cannot write {output}: {exc.strerror or exc}")
    return EXIT_CLEAN


# -- check ----------------------------------------------------------------------------------


class _OrderedPrinter:
    """Prints text reports in input order as files finish (in any order)."""

    def __init__(self, console, quiet: bool, allow_unknown: bool):
        self.console, self.quiet, self.allow_unknown = console, quiet, allow_unknown
        self.waiting: dict[int, object] = {}
        self.next = 0

    def done(self, index: int, report) -> None:
        from checker.report.text import render_report

        self.waiting[index] = report
        while self.next in self.waiting:
            ready = self.waiting.pop(self.next)
            self.next += 1
            for line in render_report(ready, quiet=self.quiet, allow_unknown=self.allow_unknown):
                self.console.print(line)


class _CheckDisplay:
    """The progress display of `check` on a terminal: files done, what the current spec's
    analysis is doing (questions asked and decided, the pair in question), time elapsed."""

    def __init__(self, console, total: int):
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn,
                                   TimeElapsedColumn)

        self.progress = Progress(SpinnerColumn(), TextColumn("[bold]checking[/]"), BarColumn(bar_width=12),
                                 MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("{task.fields[detail]}"),
                                 console=console, transient=True, redirect_stdout=False, redirect_stderr=False)
        self.task = self.progress.add_task("check", total=total, detail="")
        self.current = ""

    def __enter__(self):
        self.progress.start()
        return self

    def __exit__(self, *exc) -> None:
        self.progress.stop()

    def _detail(self, text: str) -> None:
        from rich.markup import escape

        room = max(20, self.progress.console.width - 40)  # what the spinner, bar, count and clock leave
        self.progress.update(self.task, detail=escape(text if len(text) <= room else text[:room - 3] + "..."))

    def file(self, event) -> None:
        if event.report is None:
            self.current = os.path.basename(event.path) or event.path
            self._detail(self.current)
        else:
            self.progress.advance(self.task)

    def analysis(self, progress) -> None:
        text = f"{self.current}: {progress.phase}"
        if progress.phase == "replay":
            text = f"{self.current}: replaying witness {progress.asked}" + (
                f"/{progress.total}" if progress.total else "")
        elif progress.asked or progress.total:
            text += f", {progress.decided}/{progress.asked} questions decided"
            if progress.total:
                text += f" of {progress.total}"
        if progress.current:
            text += f": {progress.current}"
        self._detail(text)


def _check_status(reports) -> int:
    from checker.findings import Status

    if any(r.status is Status.ERROR for r in reports):
        return EXIT_ERROR
    return EXIT_CLEAN if all(r.passed for r in reports) else EXIT_FINDINGS


def command_check(args) -> int:

    from checker.analyze import Options
    from checker.parallel import ClusterError, check_all, default_jobs
    from checker.report.text import plain, render_report, summary

    sources = _sources(args)
    if sources is None:
        return EXIT_ERROR
    options = Options(timeout=args.timeout, rlimit=args.rlimit, budget=args.budget,
                      exhaustive=args.exhaustive, max_states=args.max_states,
                      explore_first=args.explore_first, symmetry=not args.no_symmetry,
                      allow_unknown=args.allow_unknown,
                      **({} if args.max_memory is None else {"max_memory": args.max_memory}))
    console = _console()
    streaming = args.format == "text" and not args.output
    printer = _OrderedPrinter(console, args.quiet, args.allow_unknown) if streaming else None
    terminal = None if args.quiet else _display_console(args)
    display = None
    if terminal is not None:
        display = _CheckDisplay(console if terminal is sys.stdout else _console(terminal), len(sources))

    def on_file(event) -> None:
        if display is not None:
            display.file(event)
        if printer is not None and event.report is not None:
            printer.done(event.index, event.report)

    try:
        with display or contextlib.nullcontext():
            reports = check_all(sources, options, max_statements=args.max_statements,
                                jobs=args.jobs or default_jobs(), cluster=args.cluster, on_file=on_file,
                                progress=display.analysis if display is not None else None)
    except ClusterError as exc:
        return _usage_error(args, str(exc))
    status = _check_status(reports)
    if streaming:
        if not args.quiet:
            console.print(summary(reports))
        return status
    if args.format == "text":
        lines = [plain(line) for r in reports for line in render_report(r, args.quiet, args.allow_unknown)]
        if not args.quiet:
            lines.append(plain(summary(reports)))
        text = "\n".join(lines)
    elif args.format == "json":
        from checker.report.json import json_text, report_json

        text = json_text(_envelope([report_json(r) for r in reports]))
    elif args.format == "sarif":
        from checker.report.json import json_text
        from checker.report.sarif import sarif_log

        text = json_text(sarif_log(reports, exit_code=status, allow_unknown=args.allow_unknown))
    else:
        from checker.report.junit import junit_xml

        text = junit_xml(reports, allow_unknown=args.allow_unknown)
    return _document(args, text) or status


# -- show -----------------------------------------------------------------------------------


def command_show(args) -> int:
    from checker.report.show import show_json, show_text

    sources = _sources(args)
    if sources is None:
        return EXIT_ERROR
    console = _console()
    batch = _Batch(args, console)
    for number, (loaded, diagnostics) in enumerate(batch.loaded(sources)):
        if args.format == "json":
            batch.files.append({**show_json(loaded.program), "status": "ok", "diagnostics": diagnostics})
        elif not args.quiet:
            if number:
                console.print("")
            lines = show_text(loaded.program)
            for start in range(0, len(lines), 1000):  # (a print per line: 45 us each in rich)
                console.print("\n".join(lines[start:start + 1000]), markup=False)
    return batch.finish()


class _OutputError(Exception):
    """An output file (`--trace`, `--svg`, `--emit`) that cannot be written: a usage error."""


def _write(path: str, text: str) -> None:
    try:
        write_output(path, text)
    except OSError as exc:
        raise _OutputError(f"cannot write {path}: {exc.strerror or exc}") from None


MAX_WITNESS_BYTES = 256 << 20
"""The largest witness file `replay --witness` reads (a `check --format json` report)."""


class _NoSuchFinding(LookupError):
    """`--finding N` names no finding of the file that has a witness."""


class _BadWitness(ValueError):
    """A witness file that cannot be read or is no `check --format json` report; the message
    says why, for the user."""


def _witness_name(path: str) -> str:
    """A witness file as reports name it (`-` is standard input)."""
    from checker.inputs import STDIN, STDIN_PATH, shown

    return STDIN_PATH if path == STDIN else shown(path)


def _witness_bytes(path: str) -> bytes:
    """The bytes of a witness file, or of standard input for `-`, at most MAX_WITNESS_BYTES
    (a gzip file decompressed); raises `_BadWitness`."""
    import gzip

    from checker.resources import TooLarge, read_at_most, read_stdin_at_most

    name = _witness_name(path)
    try:
        if path != "-":
            return read_at_most(path, MAX_WITNESS_BYTES)
        return read_stdin_at_most(MAX_WITNESS_BYTES, name)
    except TooLarge as exc:
        raise _BadWitness(f"{exc}: too large for a witness file") from None
    except (EOFError, zlib.error, gzip.BadGzipFile):
        raise _BadWitness(f"not a witness file: {name} is a gzip file that cannot be decompressed "
                          "(cut short or damaged)") from None
    except OSError as exc:
        raise _BadWitness(f"cannot read {name}: {exc.strerror or 'cannot be read'}") from None


def _json_kind(value) -> str:
    if isinstance(value, bool):
        return "true or false"
    return {dict: "an object", list: "an array", str: "a string", type(None): "null"}.get(type(value), "a number")


def _witness_json(path: str):
    """The JSON value of a witness file; raises `_BadWitness`."""
    data = _witness_bytes(path)
    try:
        return json.loads(data)
    except UnicodeDecodeError as exc:
        raise _BadWitness(f"not a witness file: byte {exc.start} (0x{data[exc.start]:02x}) is not UTF-8 "
                          "(`check --format json` writes UTF-8)") from None
    except json.JSONDecodeError as exc:
        message = exc.msg.removesuffix(" at")
        raise _BadWitness(f"not a witness file: not valid JSON: {message[:1].lower() + message[1:]} "
                          f"(line {exc.lineno}, column {exc.colno})") from None
    except RecursionError:
        raise _BadWitness("not a witness file: nested too deeply") from None


def _most_steps(programs) -> int:
    """The most steps an execution of any of `programs` takes: each statement's thread steps
    and task steps, once each."""
    from checker.witness import task_steps, thread_steps

    return max(sum(len(thread_steps(s)) + len(task_steps(s)) for s in program.statements) for program in programs)


def _witness_from_file(path: str, spec_path: str, index: int | None, most_steps: int | None = None):
    """The finding (a dict, or None for a bare witness), witness and the branch combination
    they belong to (None: the spec's first) in a `check --format json`
    file (`-`: standard input): `findings[index]` of the spec's entry, or the first finding
    with a witness. Raises `_BadWitness` and `_NoSuchFinding`."""
    from checker.findings import FindingKind
    from checker.witness import Witness

    def witness_of(value):
        steps = value.get("steps") if isinstance(value, dict) else None
        if most_steps is not None and isinstance(steps, list) and len(steps) > most_steps:
            raise _BadWitness(f"the witness has {len(steps):,} steps, more than any execution of this spec "
                              f"takes ({most_steps:,})")
        try:
            return Witness.from_json(value)
        except ValueError as exc:
            raise _BadWitness(f"not a witness file: {exc}") from None

    data = _witness_json(path)
    if isinstance(data, dict) and "steps" in data:
        variant = data.get("variant")  # (a bare witness of one `choose` branch combination may name it)
        return None, witness_of(data), variant if isinstance(variant, str) else None
    if not isinstance(data, dict):
        raise _BadWitness("not a witness file: expected a JSON object (a `check --format json` report), "
                          f"not {_json_kind(data)}")
    files = data.get("files")
    if not isinstance(files, list):
        raise _BadWitness("not a witness file: expected a `check --format json` report (an object with a "
                          "list under `files`) or a witness (an object with a list under `steps`)")
    entries = [f for f in files if isinstance(f, dict) and isinstance(f.get("findings"), list)]
    if not entries:
        raise _BadWitness("not a witness file: its `files` list holds no report of a spec (an object with "
                          "a list under `findings`)")
    chosen = _report_of(entries, spec_path)
    findings = chosen["findings"]
    replayable = [k for k, f in enumerate(findings) if isinstance(f, dict) and f.get("witness")]
    if index is None:
        if not replayable:
            raise _NoSuchFinding(f"none of its {len(findings)} finding(s) has a witness to replay")
        index = replayable[0]
    if not 0 <= index < len(findings):
        raise _NoSuchFinding(f"the file has {len(findings)} finding(s)"
                             + (f", 0 to {len(findings) - 1}" if findings else "")
                             + f": --finding {index} is out of range")
    finding = findings[index]
    if index not in replayable:
        others = ", ".join(map(str, replayable[:10])) or "none"
        code = finding.get("code", "?") if isinstance(finding, dict) else "?"
        raise _NoSuchFinding(f"finding {index} ({str(code)[:10]}) has no witness to replay; "
                             f"those with one: {others}")
    if not isinstance(finding.get("kind"), str) or finding["kind"] not in {kind.value for kind in FindingKind}:
        raise _BadWitness(f"not a witness file: its finding's kind {str(finding.get('kind'))[:40]!r} "
                          "is none that `check` reports")
    statements = finding.get("statements", [])
    if not isinstance(statements, list) or not all(type(k) is int for k in statements):
        raise _BadWitness("not a witness file: its finding's `statements` is not a list of statement numbers")
    return finding, witness_of(finding["witness"]), finding.get("variant")


def _report_of(entries: list[dict], spec_path: str) -> dict:
    """The report of the spec being replayed among a `check` report's files: the one whose
    path is the spec's as written, else the same file (`./specs/a.sched`, an absolute path;
    relative paths read from here), else the only one of that file name (`check` ran in
    another directory), else the only report there is (then `_found_elsewhere` says whether
    it fits); of several reports none of which is the spec's, none."""
    from checker.inputs import STDIN_PATH

    paths = [entry.get("path") if isinstance(entry.get("path"), str) else "" for entry in entries]
    for k, path in enumerate(paths):
        if path == spec_path:
            return entries[k]
    if spec_path != STDIN_PATH:
        here = os.path.realpath(spec_path)
        for k, path in enumerate(paths):
            if path and path != STDIN_PATH and os.path.realpath(path) == here:
                return entries[k]
        named = [k for k, path in enumerate(paths) if path and Path(path).name == Path(spec_path).name]
        if len(named) == 1:
            return entries[named[0]]
    if len(entries) > 1:
        listed = ", ".join(paths[:3]) + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")
        raise _BadWitness(f"the report holds {len(entries)} files, none of them this spec ({listed}): give "
                          "the report of a `check` of this spec, or name the spec as that `check` did")
    return entries[0]


def _found_elsewhere(program, finding: dict) -> bool:
    """Whether a finding of a witness file names statements whose lines differ from this
    spec's: a report of another spec, whose steps would fail to replay for no reason the
    user can see."""
    statements, locations = finding.get("statements"), finding.get("locations")
    if not isinstance(statements, list) or not isinstance(locations, list) or len(statements) != len(locations):
        return False
    for index, at in zip(statements, locations):
        if not isinstance(index, int) or not isinstance(at, dict) or not 0 <= index < len(program.statements):
            return True
        if at.get("line") != program.statements[index].span.line:
            return True
    return False


def _finding_from_json(program, finding: dict, witness):
    from checker.findings import Finding, FindingKind

    return Finding(FindingKind(finding["kind"]), finding.get("message", ""),
                   tuple(finding.get("statements", ())), finding.get("buffer"), finding.get("memory"),
                   witness=witness)


def _export(program, timings, args, highlight=()) -> None:
    """`--trace` of the first timing and `--svg` of all of them, stacked on one time scale;
    `timings` are (chart title, `Timing`) pairs."""
    if not (getattr(args, "trace", None) or getattr(args, "svg", None)):
        return
    from checker.report.timeline import build

    timelines = [(title, build(program, timing)) for title, timing in timings]
    if getattr(args, "trace", None):
        from checker.report.chrome_trace import chrome_trace

        _write(args.trace, json.dumps(chrome_trace(program, timelines[0][1])))
    if getattr(args, "svg", None):
        from checker.report.svg import Chart, charts_svg

        charts = [Chart(timeline, title, frozenset(highlight)) for title, timeline in timelines]
        _write(args.svg, charts_svg(program, charts))


def _replay_error(args, path: str, message: str) -> int:
    """A witness file that cannot be used: SP001 on the witness, in the command's format."""
    from checker.codes import Code
    from checker.diagnostics import error
    from checker.report.json import diagnostic_json
    from checker.report.text import render_diagnostic

    diagnostic = error(Code.SP001, message, None, help="pass the JSON that `streamproof check --format json` "
                                                       "printed for this spec")
    if args.format == "json":
        _print_json(_envelope([{"path": path, "status": "error", "witness": _witness_name(args.witness),
                                "diagnostics": [diagnostic_json(diagnostic)]}]))
    else:
        console = _console()
        for line in render_diagnostic(_witness_name(args.witness), "", diagnostic):
            console.print(line)
    return EXIT_ERROR


def command_replay(args) -> int:
    from checker.executor.replay import confirm, replay

    if args.witness is None:  # (not `required=`: that would ignore a default from pyproject.toml)
        return _usage_error(args, "the following arguments are required: --witness")
    if args.file == "-" and args.witness == "-":
        return _usage_error(args, "FILE and --witness are both - (standard input): only one of them can be "
                                  "read from standard input")
    sources = _sources(args)
    if sources is None:
        return EXIT_ERROR
    if args.file != "-" and Path(args.file).is_dir():
        return _usage_error(args, f"{_witness_name(args.file)} is a directory: replay takes the one spec "
                                  "the witness is of")
    loaded = _load(sources[0], args)
    path = loaded.path
    if loaded.program is None:
        item = _input_error(loaded, args)
        if args.format == "json":
            _print_json(_envelope([item]))
        return EXIT_ERROR
    program = loaded.program
    try:
        finding, witness, variant = _witness_from_file(args.witness, path, args.finding,
                                              _most_steps(loaded.variants or (program,)))
    except (_NoSuchFinding, _BadWitness) as exc:
        return _replay_error(args, path, str(exc))
    except (KeyError, TypeError, ValueError, IndexError, AttributeError):  # a shape no check above foresaw
        return _replay_error(args, path, "not a witness file: its contents are not those of a `check --format "
                                         "json` report or of a witness")
    if variant:  # a witness of one `choose` branch combination
        program = next((v for v in loaded.variants if v.variant == variant), None)
        if program is None:
            return _replay_error(args, path, f"the spec has no branch combination `{variant}`")
    for step in witness.steps:
        if not 0 <= step.statement < len(program.statements):
            return _replay_error(args, path, f"step {step.kind.value} {step.statement} names a statement "
                                             f"the spec does not have ({len(program.statements)} statements)")
    named = [k for k in finding.get("statements", ()) if not 0 <= k < len(program.statements)] if finding else []
    if named:
        return _replay_error(args, path, f"the finding names statement {named[0]}, which the spec does not have "
                                         f"({len(program.statements)} statements)")
    if finding is not None and _found_elsewhere(program, finding):
        lines = ", ".join(str(at.get("line") if isinstance(at, dict) else "?") for at in finding["locations"])
        return _replay_error(args, path, f"the finding is of another spec: its statements are on lines {lines} "
                                         "there; replay it against the spec that `check` reported it for")
    console = _console()
    diagnostics = _warnings(loaded, args, console)
    run = replay(program, witness)
    illegal = None
    if not run.ok:
        from checker.codes import Code
        from checker.diagnostics import error
        from checker.report.json import diagnostic_json

        help = "replay a witness against the spec (and version of it) that `check` reported it for"
        if len(loaded.variants) > 1 and finding is None and program is loaded.variants[0]:
            help += (f"; a bare witness of another of the spec's programs (one per `choose` branch combination "
                     f"or runtime behaviour) names it, as its finding's "
                     f"`variant` does: {{\"steps\": [...], \"variant\": \"{loaded.variants[1].variant}\"}}")
        illegal = error(Code.SP001, f"the witness is not an execution of this spec: {run.reason}", None, help=help)
        diagnostics = diagnostics + [diagnostic_json(illegal)]
    confirmation = None
    if finding is not None and run.ok:
        confirmation = confirm(program, _finding_from_json(program, finding, witness))
    _export(program, [("", run.timing)], args, highlight=finding.get("statements", ()) if finding else ())
    if not run.ok:
        status = EXIT_ERROR
    elif finding is None:
        status = EXIT_CLEAN
    else:
        status = EXIT_CLEAN if confirmation.ok else EXIT_FINDINGS
    result = {"path": path, "status": {EXIT_CLEAN: "ok", EXIT_FINDINGS: "not-reproduced"}.get(status, "error"),
              "replay": run.to_json(),
              "finding": finding and {k: finding[k] for k in ("kind", "code", "message", "statements") if k in finding},
              "reproduced": bool(confirmation and confirmation.ok),
              "confirmation": confirmation.to_json() if confirmation else None,
              "diagnostics": diagnostics}
    if args.format == "json":
        _print_json(_envelope([result]))
    elif not (args.quiet and status == EXIT_CLEAN):
        from checker.report.replay_text import replay_text

        for line in replay_text(program, witness.steps, result):
            console.print(line, markup=False)
        if illegal is not None:
            from checker.report.text import render_diagnostic

            for line in render_diagnostic(_witness_name(args.witness), "", illegal):
                console.print(line)
    return status


def _deadlock_text(path: str, headline: str, stuck: list[dict], notes=()) -> list[str]:
    out = [f"{path}: deadlock: {headline}"]
    for item in stuck:
        out.append(f"  stuck: line {item.get('line')} {item.get('what') or ''}: {item.get('waits_for')}")
    for note in notes:
        out.append(f"  note: {note}")
    out.append("  = help: `streamproof check` finds every execution that deadlocks and shows one step by step")
    return out


def command_simulate(args) -> int:
    from checker.determinism import nondeterminism
    from checker.messages import ms_text
    from checker.report.perf import simulate_text

    sources = _sources(args)
    if sources is None:
        return EXIT_ERROR
    if (args.trace or args.svg) and len(sources) != 1:
        return _usage_error(args, "--trace and --svg need exactly one spec")
    console = _console()
    batch = _Batch(args, console)
    for loaded, diagnostics in batch.loaded(sources):
        program, simulation = _slowest(loaded)
        _export(program, [("", simulation.timing)], args)
        data = simulation.to_json()
        if program.variant:
            data["variant"] = program.variant
        data["threads_race"] = nondeterminism(program)
        for item, node in zip(data["critical_path"], simulation.critical_path):
            item["what"] = program.describe(program.statements[node.statement])
        deadlocked = bool(data.get("deadlocked"))
        if deadlocked:  # no makespan: the time it got stuck is not one
            data["stuck_at"], data["makespan"] = data["makespan"], None
            batch.status = max(batch.status, EXIT_FINDINGS)
        batch.files.append({"path": loaded.path, "status": "deadlock" if deadlocked else "ok", **data,
                            "diagnostics": diagnostics})
        if args.format != "text":
            continue
        if deadlocked:
            lines = _deadlock_text(loaded.path, f"the program gets stuck at {ms_text(data['stuck_at'])} and "
                                                "never finishes: it has no makespan", data.get("stuck") or [])
        elif args.quiet:
            continue
        else:
            lines = simulate_text(loaded.path, data)
        for line in lines:
            console.print(line, markup=False)
    return batch.finish()


def _slowest(loaded):
    """The program of a spec to simulate, and its simulation: with several (one per `choose`
    branch combination), one that deadlocks, else the one that takes longest. (A program of
    the allocator's timing, `Program.races_only`, is no run: its sync stands for a timing.)"""
    from checker.executor.simulate import simulate

    runs = [(program, simulate(program)) for program in loaded.variants or (loaded.program,)
            if not program.races_only]
    return max(runs, key=lambda run: (run[1].deadlocked, run[1].makespan))


def _engine_names(data: dict) -> None:
    """One engine naming style in every output: `device/engine`, as `simulate` and traces name them."""
    for engine in (data.get("report") or {}).get("engines") or ():
        name = engine.get("name")
        if isinstance(name, str) and "/" not in name and "." in name:
            device, kind = name.rsplit(".", 1)
            engine["name"] = f"{device}/{kind}"


class _OptimizeDisplay:
    """The progress display of `optimize` on a terminal: best schedule, proven bound, elapsed."""

    def __init__(self, console, path: str):
        from rich.markup import escape
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self.progress = Progress(SpinnerColumn(), TextColumn(f"[bold]optimizing[/] {escape(path)}"),
                                 TimeElapsedColumn(), TextColumn("{task.fields[detail]}"), console=console,
                                 transient=True, redirect_stdout=False, redirect_stderr=False)
        self.task = self.progress.add_task("optimize", total=None, detail="")

    def __enter__(self):
        self.progress.start()
        return self

    def __exit__(self, *exc) -> None:
        self.progress.stop()

    def update(self, progress) -> None:
        from rich.markup import escape

        text = getattr(progress, "text", None)
        self.progress.update(self.task, detail=escape(text() if callable(text) else str(progress)))


def command_optimize(args) -> int:

    from checker.crosscheck import best_run_in_time, emit_as_run, must_chain, simulated_makespan
    from checker.optimize import optimize
    from checker.report.perf import optimize_text

    sources = _sources(args)
    if sources is None:
        return EXIT_ERROR
    from checker.optimize import SolverUnavailable, engine
    try:
        engine(args.solver)
    except SolverUnavailable as exc:
        return _usage_error(args, str(exc))
    if (args.trace or args.svg or args.emit) and len(sources) != 1:
        return _usage_error(args, "--trace, --svg and --emit need exactly one spec")
    console = _console()
    batch = _Batch(args, console)
    for loaded, diagnostics in batch.loaded(sources):
        program, simulation = _slowest(loaded)
        terminal = None if args.quiet else _display_console(args)
        display = None
        if terminal is not None:
            display = _OptimizeDisplay(console if terminal is sys.stdout else _console(terminal), loaded.path)
        with display or contextlib.nullcontext():
            result = optimize(program, timeout=args.timeout, progress=display.update if display else None,
                              solver=args.solver, simulated=simulated_makespan(simulation), must_chain=must_chain,
                              best_run=best_run_in_time)
        data = result.to_json()
        _engine_names(data)
        stuck: list[dict] = []
        deadlock = bool(result.deadlock) or simulation.deadlocked
        if simulation.deadlocked:
            stuck = simulation.to_json().get("stuck") or []
        item = {"path": loaded.path, "status": "deadlock" if deadlock else "ok"}
        item.update({k: v for k, v in data.items() if k != "path"})
        if program.variant:
            item["variant"] = program.variant
        item["deadlock"] = deadlock
        if deadlock:  # no makespan, and no bound of one
            batch.status = max(batch.status, EXIT_FINDINGS)
            item["makespan"] = {key: None for key in item.get("makespan") or {}}
            item["proven_lower"] = {key: None for key in item.get("proven_lower") or {}}
            # (the timed model can still schedule a program whose steps get stuck: tasks that
            # must begin one after another begin together there; no schedule of it stands)
            item["optimal"] = {key: False for key in item.get("optimal") or {}}
            item["schedules"] = {key: None for key in item.get("schedules") or {}}
            for kind in ("program", "bound"):
                if isinstance((item.get("solver") or {}).get(kind), dict):
                    item["solver"][kind]["proved_by"] = None
            item["stuck"] = stuck
        elif args.trace or args.svg:
            schedules = (("best execution (program)", result.program_schedule),
                         ("overlap bound (bound)", result.bound_schedule))
            timings = [(title, schedule.timing(program)) for title, schedule in schedules
                       if schedule is not None]
            if not timings:  # (no exact model: the best run found is the simulated one)
                timings = [("as written (simulated)", simulation.timing)]
            _export(program, timings, args)  # the trace shows the first; the chart all, on one time scale
        emitted = None
        if args.emit and not deadlock:
            from checker.optimize import EmitError

            try:
                _write(args.emit, emit_as_run(program, result))
                emitted = {"path": args.emit, "written": True, "error": None}
            except EmitError as exc:
                # (a valid spec whose program has no exact bound: not a usage error)
                emitted = {"path": args.emit, "written": False, "error": f"cannot --emit: {exc}"}
                batch.status = max(batch.status, EXIT_FINDINGS)
            item["emit"] = emitted
        item["diagnostics"] = diagnostics
        batch.files.append(item)
        if args.format != "text":
            continue
        if deadlock:
            lines = _deadlock_text(loaded.path, "the program can get stuck: it has no makespan to minimize",
                                   stuck, data.get("notes") or ())
        elif args.quiet and not (emitted and emitted["error"]):
            continue
        else:
            lines = [] if args.quiet else optimize_text(loaded.path, data)
            if emitted and emitted["error"]:
                lines.append(f"{loaded.path}: error: {emitted['error']}")
            elif emitted:
                lines.append(f"  wrote {args.emit}")
        for line in lines:
            console.print(line, markup=False)
    return batch.finish()


COMMANDS = {"check": command_check, "show": command_show, "replay": command_replay,
            "simulate": command_simulate, "optimize": command_optimize}


def command_import(args) -> int:
    from checker.importers.command import run

    return run(args)


COMMANDS["import"] = command_import
