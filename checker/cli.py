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

    plain = bool(os.environ.get("NO_COLOR"))  # https://no-color.org: no escape codes at all
    return Console(file=stream or sys.stdout, highlight=False, soft_wrap=True,
                   color_system=None if plain else "auto", no_color=plain or None)


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
    check.add_argument("--budget", type=_positive_float, default=300.0, metavar="SECONDS",
                       help="solver time for all queries of one spec together (default 300); "
                            "questions left when it runs out are reported unknown")
    check.add_argument("--rlimit", type=_positive, default=None, metavar="N",
                       help="also stop each solver query after N Z3 resource units (reproducible across machines)")
    check.add_argument("--allow-unknown", action="store_true", help="do not fail on unknown answers")
    check.add_argument("--exhaustive", action="store_true",
                       help="enumerate every interleaving with the executor instead of the solver (small specs)")
    check.add_argument("--max-states", type=_positive, default=1_000_000, metavar="N",
                       help="state cap for --exhaustive (default 1,000,000); hitting it reports unknown")

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

    options = Options(timeout=args.timeout, rlimit=args.rlimit, budget=args.budget,
                      exhaustive=args.exhaustive, max_states=args.max_states,
                      allow_unknown=args.allow_unknown)
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


def _witness_from_file(path: str, spec_path: str, index: int):
    """The finding (a dict, or None for a bare witness) and witness in a `check --format json` file."""
    from checker.witness import Witness

    data = json.loads(Path(path).read_text())
    if isinstance(data, dict) and "steps" in data:
        return None, Witness.from_json(data)
    files = data["files"]
    chosen = next((f for f in files if f.get("path") == spec_path), files[0])
    findings = [f for f in chosen["findings"] if f.get("witness")]
    if not 0 <= index < len(findings):
        raise IndexError(f"the file has {len(findings)} finding(s) with a witness; --finding {index} is out of range")
    finding = findings[index]
    return finding, Witness.from_json(finding["witness"])


def _finding_from_json(program, finding: dict, witness):
    from checker.findings import Finding, FindingKind

    return Finding(FindingKind(finding["kind"]), finding.get("message", ""),
                   tuple(finding.get("statements", ())), finding.get("buffer"), finding.get("memory"),
                   witness=witness)


def _export(program, timeline, args, highlight=frozenset()) -> None:
    if getattr(args, "trace", None):
        from checker.executor.trace import chrome_trace

        _write(args.trace, json.dumps(chrome_trace(program, timeline)))
    if getattr(args, "svg", None):
        from checker.executor.svg import gantt_svg

        _write(args.svg, gantt_svg(program, timeline, highlight=frozenset(highlight)))


def command_replay(args) -> int:
    from checker.executor.replay import confirm, replay

    loaded = _load(args.file, args)
    if loaded.program is None:
        return _input_error(loaded, args)
    program = loaded.program
    try:
        finding, witness = _witness_from_file(args.witness, args.file, args.finding)
    except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
        print(f"{args.witness}: error: not a witness file: {exc}", file=sys.stderr)
        return EXIT_ERROR
    for step in witness.steps:
        if not 0 <= step.statement < len(program.statements):
            print(f"{args.witness}: error: step {step.kind.value} {step.statement} names a statement "
                  f"the spec does not have ({len(program.statements)} statements)", file=sys.stderr)
            return EXIT_ERROR
    run = replay(program, witness)
    confirmation = None
    if finding is not None and run.ok:
        confirmation = confirm(program, _finding_from_json(program, finding, witness))
    _export(program, run.timeline, args, highlight=finding.get("statements", ()) if finding else ())
    result = {"path": args.file, "replay": run.to_json(),
              "finding": finding and {k: finding[k] for k in ("kind", "code", "message", "statements") if k in finding},
              "reproduced": bool(confirmation and confirmation.ok),
              "confirmation": confirmation.to_json() if confirmation else None}
    if args.format == "json":
        _print_json(result)
    else:
        console = _console()
        for line in _replay_text(program, witness, run, finding, confirmation):
            console.print(line, markup=False)
    if not run.ok:
        return EXIT_ERROR
    if finding is None:
        return EXIT_CLEAN
    return EXIT_CLEAN if confirmation.ok else EXIT_FINDINGS


def _replay_text(program, witness, run, finding, confirmation) -> list[str]:
    out = []
    involved = set(finding.get("statements", ())) if finding else set()
    for number, step in enumerate(witness.steps[: run.applied + (0 if run.ok else 1)], start=1):
        statement = program.statements[step.statement]
        marker = "  <- illegal" if not run.ok and number == run.applied + 1 else ("  *" if step.statement in involved else "")
        out.append(f"{number:>5}. {step.kind.value:<8} line {statement.span.line:<4} {program.describe(statement)}{marker}")
    if not run.ok:
        out.append(f"illegal step {run.failed_at + 1}: {run.reason}")
        return out
    out.append(f"replayed {len(witness.steps)} steps: every step is legal")
    if confirmation is not None:
        out.append(("reproduced: " if confirmation.ok else "NOT reproduced: ") + confirmation.reason)
        detail = confirmation.detail
        if detail.get("explanation"):
            out.append(f"  {detail['explanation']}")
        for key in ("reader_saw", "writer_first", "reader_first", "a_last", "b_last"):
            if key in detail:
                out.append(f"  {key.replace('_', ' ')}: {detail[key]}")
        for item in detail.get("participants", ()):
            out.append(f"  stuck: line {item['line']} {program.describe(program.statements[item['statement']])}: {item['waits_for']}")
    elif run.stuck:
        for statement, waits in run.stuck:
            out.append(f"  stuck: line {program.statements[statement].span.line} {program.describe(program.statements[statement])}: {waits}")
    return out


def command_simulate(args) -> int:
    from checker.executor.simulate import simulate
    from checker.report.perf import simulate_text

    loaded = _load(args.file, args)
    if loaded.program is None:
        return _input_error(loaded, args)
    simulation = simulate(loaded.program)
    _export(loaded.program, simulation.timeline, args)
    data = simulation.to_json()
    for item, node in zip(data["critical_path"], simulation.critical_path):
        item["what"] = loaded.program.describe(loaded.program.statements[node.statement])
    if args.format == "json":
        _print_json({"files": [{"path": args.file, **data}]})
    else:
        console = _console()
        for line in simulate_text(args.file, data):
            console.print(line, markup=False)
    return EXIT_CLEAN


def command_optimize(args) -> int:
    from checker.optimize import emit, optimize
    from checker.report.perf import optimize_text

    loaded = _load(args.file, args)
    if loaded.program is None:
        return _input_error(loaded, args)
    program = loaded.program
    progress = None
    if args.format == "text" and sys.stderr.isatty():
        progress = _progress_printer()
    result = optimize(program, timeout=args.timeout, progress=progress)
    data = result.to_json()
    if args.trace or args.svg:
        from checker.optimize.export import timeline

        schedule = result.program_schedule or result.bound_schedule
        if schedule is not None:
            _export(program, timeline(program, schedule), args)
    if args.format == "json":
        _print_json({"files": [data]})
    else:
        console = _console()
        for line in optimize_text(args.file, data):
            console.print(line, markup=False)
    if args.emit:
        from checker.optimize import EmitError

        try:
            _write(args.emit, emit(program, result))
        except EmitError as exc:
            print(f"{args.file}: error: cannot --emit: {exc}", file=sys.stderr)
            return EXIT_ERROR
        if args.format == "text":
            _console().print(f"  wrote {args.emit}", markup=False)
    return EXIT_CLEAN


def _progress_printer():
    def show(progress) -> None:
        text = getattr(progress, "text", None)
        message = text() if callable(text) else str(progress)
        sys.stderr.write("\r\033[K" + message[:120])
        sys.stderr.flush()

    return show


COMMANDS = {"check": command_check, "show": command_show, "replay": command_replay,
            "simulate": command_simulate, "optimize": command_optimize}


def command_import(args) -> int:
    from checker.importers.command import run

    return run(args)


COMMANDS["import"] = command_import
