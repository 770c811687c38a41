"""Command line: `streamproof check|show|replay|simulate|optimize`.

Exit status: 0 = every file clean (or exactly as its `expect` lines say), 1 = findings, an
unmet expectation, or an unknown answer, 2 = a usage error, unreadable input, or an invalid spec.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from checker import __version__

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2

DESCRIPTION = """\
streamproof: a formal concurrency model checker for GPU/NPU stream programs.

Write the program as a .sched spec (streams, events, kernels, copies, host threads), and
streamproof proves it free of races, use-after-free and deadlocks in every execution, or
shows an execution that has one.
"""

EPILOG = """\
exit status:
  0  every file is clean, or has exactly the findings its `expect` lines ask for
  1  findings, an unmet expectation, or an undecided (unknown) query
  2  usage error, unreadable input, or an invalid spec (diagnostics say where)

examples:
  streamproof check specs/copy_compute_double_buffered.sched
  streamproof check --format json specs/*.sched
  streamproof show specs/inference_pipeline.sched
  streamproof simulate specs/copy_compute_double_buffered.sched --trace out.json
  streamproof optimize specs/copy_compute_sync.sched
"""


def _console(stream=None):
    from rich.console import Console

    return Console(file=stream or sys.stdout, highlight=False, soft_wrap=True,
                   no_color="NO_COLOR" in os.environ or None)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="streamproof", description=DESCRIPTION, epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"streamproof {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    def common(sub, many=False):
        if many:
            sub.add_argument("files", nargs="+", metavar="FILE", help=".sched specs")
        else:
            sub.add_argument("file", metavar="FILE", help="a .sched spec")
        sub.add_argument("--format", choices=("text", "json"), default="text", help="output format (default text)")
        sub.add_argument("--max-statements", type=_positive, default=1_000_000, metavar="N",
                         help="refuse specs that unroll past N statements (default 1,000,000)")

    check = commands.add_parser("check", help="prove a spec free of races, use-after-free and deadlocks",
                                description="Search every execution of each spec for races, use-after-free, "
                                            "deadlocks and collective mismatches; check its `expect` lines.",
                                epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    common(check, many=True)
    check.add_argument("--timeout", type=_positive_float, default=10.0, metavar="SECONDS",
                       help="solver time per query (default 10); a query that runs out is reported unknown")
    check.add_argument("--allow-unknown", action="store_true", help="do not fail on unknown answers")
    check.add_argument("--exhaustive", action="store_true",
                       help="enumerate every interleaving with the executor instead of the solver (small specs)")
    check.add_argument("--max-states", type=_positive, default=1_000_000, metavar="N",
                       help="state cap for --exhaustive (default 1,000,000); hitting it reports unknown")
    check.add_argument("--no-replay", action="store_true", help=argparse.SUPPRESS)

    show = commands.add_parser("show", help="print the lowered program: devices, streams, statements")
    common(show)

    replay = commands.add_parser("replay", help="replay a finding's witness step by step")
    common(replay)
    replay.add_argument("--witness", required=True, metavar="FILE",
                        help="the JSON that `check --format json` printed")
    replay.add_argument("--finding", type=int, default=0, metavar="N", help="which finding (default 0, the first)")
    replay.add_argument("--trace", metavar="FILE", help="write a Chrome/Perfetto trace of the replay")
    replay.add_argument("--svg", metavar="FILE", help="write a Gantt chart of the replay")

    simulate = commands.add_parser("simulate", help="run the program forward in time: makespan, utilisation, timeline")
    common(simulate)
    simulate.add_argument("--trace", metavar="FILE", help="write Chrome Trace Event JSON (opens in Perfetto)")
    simulate.add_argument("--svg", metavar="FILE", help="write a Gantt chart")

    optimize = commands.add_parser("optimize", help="minimum makespan and the overlap bound of the work")
    common(optimize)
    optimize.add_argument("--timeout", type=_positive_float, default=30.0, metavar="SECONDS",
                          help="solver time limit (default 30); reports the best found and the proven lower bound")
    optimize.add_argument("--trace", metavar="FILE", help="write the optimal schedules as Chrome Trace Event JSON")
    optimize.add_argument("--svg", metavar="FILE", help="write the optimal schedule as a Gantt chart")
    optimize.add_argument("--emit", metavar="OUT", help="write a spec that reaches the overlap bound")
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


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command is None:
        _parser().print_help()
        return EXIT_ERROR
    _limit_memory()
    try:
        return COMMANDS[args.command](args)
    except KeyboardInterrupt:
        print("streamproof: interrupted", file=sys.stderr)
        return 130
    except MemoryError:
        print("streamproof: error: out of memory (the spec is too large to analyse)", file=sys.stderr)
        return EXIT_ERROR
    except BrokenPipeError:
        return EXIT_ERROR
    except Exception as exc:  # never show a user a traceback; STREAMPROOF_DEBUG=1 does
        if os.environ.get("STREAMPROOF_DEBUG"):
            raise
        print(f"streamproof: internal error: {type(exc).__name__}: {exc}\n"
              "this is a bug in streamproof; rerun with STREAMPROOF_DEBUG=1 for details and please report it",
              file=sys.stderr)
        return EXIT_ERROR


def _load(path: str, args):
    from checker.frontend import load_file

    return load_file(path, max_statements=args.max_statements)


def _print_json(value) -> None:
    sys.stdout.write(json.dumps(value, indent=1) + "\n")


def _input_error(loaded, args) -> int:
    """Print a spec's diagnostics when it failed to load; return its exit status."""
    from checker.findings import FileReport, Status
    from checker.report.json import report_json
    from checker.report.text import render_report

    report = FileReport(loaded.path, Status.ERROR, (), loaded.diagnostics, False, loaded.source)
    if args.format == "json":
        _print_json({"files": [report_json(report)]})
    else:
        console = _console(sys.stderr)
        for line in render_report(report):
            console.print(line)
    return EXIT_ERROR


def command_check(args) -> int:
    from checker.analyze import Options, check_loaded
    from checker.findings import Status
    from checker.report.json import report_json
    from checker.report.text import render_report, summary

    options = Options(timeout=args.timeout, exhaustive=args.exhaustive, max_states=args.max_states,
                      allow_unknown=args.allow_unknown, replay=not args.no_replay)
    reports = []
    console = _console()
    for path in args.files:
        report = check_loaded(_load(path, args), options)
        reports.append(report)
        if args.format == "text":
            for line in render_report(report):
                console.print(line)
    if args.format == "json":
        _print_json({"version": __version__, "files": [report_json(r) for r in reports]})
    else:
        console.print(summary(reports))
    if any(r.status is Status.ERROR for r in reports):
        return EXIT_ERROR
    return EXIT_CLEAN if all(r.passed for r in reports) else EXIT_FINDINGS


def command_show(args) -> int:
    from checker.report.show import show_json, show_text
    from checker.report.text import render_diagnostic

    loaded = _load(args.file, args)
    if loaded.program is None:
        return _input_error(loaded, args)
    if args.format == "json":
        _print_json(show_json(loaded.program))
        return EXIT_CLEAN
    console = _console()
    for diagnostic in loaded.diagnostics:
        for line in render_diagnostic(loaded.path, loaded.source, diagnostic):
            console.print(line)
    for line in show_text(loaded.program):
        console.print(line, markup=False)
    return EXIT_CLEAN


def _write(path: str, text: str) -> None:
    Path(path).write_text(text)


COMMANDS = {"check": command_check, "show": command_show}
