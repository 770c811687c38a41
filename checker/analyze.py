"""Checking one program: pick the engine that can decide it, confirm witnesses, apply `expect`.

* deterministic programs go to the happens-before fast path (`hb`),
* everything else to the SMT engine (`smt`), or to the executor's exhaustive explorer when
  asked (`--exhaustive`); when the solver's concrete runs leave many questions for Z3, the
  explorer is tried first (`search_first`): a search that covers every interleaving within
  `Options.explore_first` states decides the program (a lost notify between two producers,
  10 rounds: Z3 took 52 s proving race candidates absent, the search 0.3 s),
* a program the solver refuses as too large (or too wide for the fast path's clocks) is run
  at random instead (`executor.walks`): what those executions show is reported, and the
  SP301 stays for the rest,
* every witness is replayed by the executor before it is reported; a witness that does not
  replay is an internal error, never a finding,
* an unknown answer is a finding of its own (SP301), never clean; unknowns about the same
  pair of source statements (loop instances of one question) fold into one with a count.

`check_loaded(loaded, options, progress)` reports what it is doing to `progress` (a callable
taking a `Progress`), for displays; the analysis never depends on it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Callable

from checker import collectives, hb, messages
from checker.determinism import nondeterminism
from checker.codes import Code, Severity
from checker.diagnostics import Diagnostic, error
from checker.findings import QUESTION_OF, FileReport, Finding, FindingKind, Status, unknown_concerns
from checker.frontend import Loaded
from checker.ir import ExpectKind, Program, Runtime
from checker.order import MAX_GATE_EDGES
from checker.lower import MAX_RELEASES, MAX_VARIANTS


@dataclass(frozen=True, slots=True)
class Options:
    timeout: float = 10.0
    """Seconds per solver query."""
    rlimit: int | None = None
    """Z3 resource units per query: a budget that stops at the same point on every machine."""
    budget: float = 300.0
    """Seconds all solver queries of one spec may take together."""
    exhaustive: bool = False
    max_states: int = 1_000_000
    max_memory: int = 1 << 30
    """Bytes the exhaustive search may hold in states (estimated per state)."""
    allow_unknown: bool = False
    workers: int = 1
    """Worker processes the SMT engine may use for independent questions of one spec; the
    findings do not depend on it."""
    explore_first: int = 20_000
    """States the exhaustive search may visit when the solver's runs leave many questions for
    Z3 (0: never). A search that finishes within them (and `EXPLORE_FIRST_SECONDS`) decides
    the program; one that does not is dropped and Z3 goes on."""
    symmetry: bool = True
    """Ask the solver one race question per orbit of the thread symmetries (threads that are
    the same program) and carry each answer to the rest; False asks every question."""


@dataclass(frozen=True, slots=True)
class Progress:
    """What the analysis of one spec is doing, for a progress display."""

    phase: str
    """`happens-before`, `solver`, `exhaustive`, `walks` (random executions of a program the
    solver refuses), `replay` (confirming a witness) or `makespan`."""
    asked: int = 0
    """Questions asked so far (solver queries, witnesses replayed)."""
    decided: int = 0
    """Questions answered so far."""
    total: int | None = None
    """Questions known to be coming, when known."""
    current: str = ""
    """The question under way (e.g. the statement pair being checked for a race)."""


ProgressCallback = Callable[[Progress], None]


def _tell(progress: ProgressCallback | None, *args, **kwargs) -> None:
    if progress is not None:
        progress(Progress(*args, **kwargs))


def _unknown(message: str, help: str = "", **about) -> Finding:
    return Finding(FindingKind.UNKNOWN, message, (), help=help, detail=about)


def find(program: Program, options: Options,
         progress: ProgressCallback | None = None) -> tuple[tuple[Finding, ...], tuple[Diagnostic, ...]]:
    """All findings of a program (before expectations), and internal-error diagnostics."""
    findings = list(collectives.mismatches(program))  # (those of comms whose calls meet by program order)
    if options.exhaustive:
        _tell(progress, "exhaustive")
        findings += _explore(program, options)
    elif nondeterminism(program) is None:
        _tell(progress, "happens-before")
        began = time.monotonic()
        try:
            found, complete = hb.analyze(program, seconds=options.budget)
        except hb.TooWide as wide:
            complete = True
            found = _walked(program, options, _unknown(
                f"the program is too wide to order: its collectives' members start together, which takes "
                f"{wide.gates:,} orders (at most {MAX_GATE_EDGES:,})" if wide.gates else
                f"the program is too wide to order: {wide.steps:,} steps on {wide.chains:,} threads and "
                f"streams (at most {hb.MAX_CLOCK_ENTRIES:,} of the two multiplied)" if not wide.joins else
                f"the program is too wide to order: its steps join {wide.joins:,} orders of others on "
                f"{wide.chains:,} threads and streams (at most {hb.MAX_JOIN_ENTRIES:,} of the two multiplied)",
                "use fewer streams (or threads), or split the spec", reason="too wide", refused=True), progress)
        findings += found
        if not complete and time.monotonic() - began >= options.budget:  # (the scan's deadline, not its cap)
            findings.append(_unknown(f"the {options.budget:g} s budget ran out before every pair of unordered "
                                     "accesses was read (the races reported are some)",
                                     "give it a larger --budget, or split the spec"))
        elif not complete:
            findings.append(_unknown("too many unordered accesses to enumerate every race (the races "
                                     f"reported are some; at most {hb.RACE_SCAN_BUDGET:,} runs of accesses are read, "
                                     f"within the {options.budget:g} s budget)",
                                     "split the spec, or check it with --exhaustive on a smaller version"))
    else:
        _tell(progress, "solver")
        findings += _solve(program, options, progress)
    return _confirmed(program, fold_unknowns(program, findings), progress, options.workers)


def _place(program: Program, statement) -> tuple:
    """Where a finding's statement is in the source, the same in every program of a spec: its
    line and column, and for a graph's work those of the launch that ran it."""
    launch = program.statements[statement.launch].span if statement.launch is not None else None
    return (statement.span.line, statement.span.column) + ((launch.line, launch.column) if launch else ())


def fold_unknowns(program: Program, findings: list[Finding]) -> list[Finding]:
    """One SP301 per question: unknowns about the same source statements (loop instances of
    one pair) for the same reason become the first of them, with `instances` counting them."""
    out: list[Finding] = []
    first: dict[tuple, int] = {}
    for finding in findings:
        if finding.kind is not FindingKind.UNKNOWN:
            out.append(finding)
            continue
        origins = tuple(sorted(program.statements[i].origin for i in finding.statements
                               if 0 <= i < len(program.statements)))
        key = (origins, finding.detail.get("reason"), finding.message if not origins else "")
        if key in first:
            known = out[first[key]]
            out[first[key]] = replace(known, instances=known.instances + finding.instances)
        else:
            first[key] = len(out)
            out.append(finding)
    return out


# The backends are imported where they are used, so that `show` and input errors do not pay
# for loading Z3.


def _explore(program: Program, options: Options) -> list[Finding]:
    """Every interleaving, by the executor (`--exhaustive`)."""
    from checker.executor.explore import explore
    from checker.spec_text import size_text

    result = explore(program, max_states=options.max_states, budget=options.budget, memory=options.max_memory)
    findings = list(result.findings(program))
    if not result.complete:
        limit = {"states": f"at {options.max_states:,} states",
                 "memory": f"at {result.states:,} states, the most that fit in {size_text(options.max_memory)} "
                           "(--max-memory) for a program this size",
                 "time": f"at the {options.budget:g} s budget ({result.states:,} states)"}[result.stopped]
        raise_limit = {"states": "raise --max-states", "time": "raise --budget",
                       "memory": "raise --max-memory"}[result.stopped]
        findings.append(_unknown(f"exploration stopped {limit} before covering every interleaving",
                                 f"{raise_limit}, or drop --exhaustive to use the solver"))
    return findings


EXPLORE_FIRST_SECONDS = 3.0
"""The most the search before Z3 may take (or a tenth of `--budget`, if less). States
cost 0.1 ms in most programs, but over 1 ms where many accesses conflict (three threads of
100 random statements: 20,000 states took 7-26 s), and those the search would not finish."""

EXPLORE_FIRST_MEMORY = 256 << 20


def search_first(program: Program, options: Options, progress: ProgressCallback | None = None,
                 seconds: float | None = None) -> list[Finding] | None:
    """The exhaustive search's findings when it covers every interleaving within
    `options.explore_first` states and `seconds` (default `EXPLORE_FIRST_SECONDS`), else None
    (nothing it saw is kept: Z3 decides).

    Both engines implement the same semantics (tests/test_differential.py holds them to the
    same findings), so which one decides changes only the witnesses (and, for a search that
    ends near its time limit, can depend on the machine's speed). The search is cheap
    where the solver is slow: few interleavings but many race candidates, each of which the
    solver must prove absent on its own (`smt.SHORTCUT_FROM` says when it is asked)."""
    from checker.executor.explore import explore

    states = min(options.explore_first, options.max_states)
    if states <= 0:
        return None
    _tell(progress, "exhaustive", current=f"every interleaving, if they take at most {states:,} states")
    seconds = EXPLORE_FIRST_SECONDS if seconds is None else seconds
    result = explore(program, max_states=states, budget=min(seconds, options.budget / 10),
                     memory=min(options.max_memory, EXPLORE_FIRST_MEMORY))
    return list(result.findings(program)) if result.complete else None


def _solve(program: Program, options: Options, progress: ProgressCallback | None = None) -> list[Finding]:
    from checker import smt

    def shortcut(seconds: float | None) -> list[Finding] | None:
        return search_first(program, options, progress, seconds)

    findings = list(smt.analyze(program, timeout=options.timeout, rlimit=options.rlimit, total=options.budget,
                                workers=options.workers, progress=progress, symmetry=options.symmetry,
                                shortcut=shortcut if options.explore_first > 0 else None))
    refused = [f for f in findings if f.kind is FindingKind.UNKNOWN and f.detail.get("refused")]
    if refused:
        findings = [f for f in findings if f not in refused] + _walked(program, options, refused[0], progress)
    return findings


WALK_SECONDS = 10.0
"""What the random executions of a program the solver refuses may take (or `--budget`, if
less). Walks cost little (two threads of 5,000 random statements: half a second each), and
what they add after the first few is mostly more racing pairs of statements already shown."""


def _walked(program: Program, options: Options, refused: Finding,
            progress: ProgressCallback | None = None) -> list[Finding]:
    """The refused program's random executions (`executor.walks`): what they show, each with
    its witness, and the refusal's SP301, which still says that the rest is undecided."""
    from checker.executor.walks import walk

    _tell(progress, "walks", current="random executions of a program too large to decide")
    walks = walk(program, min(WALK_SECONDS, options.budget))
    shown = walks.exploration
    reported = len(shown.races)
    counts = f"{'at least ' if walks.pairs_capped else ''}{walks.racing_pairs:,} racing pairs"
    if reported < walks.racing_pairs:
        counts += f", of which the {reported:,} seen earliest are reported"
    ran = f"{walks.walks:,} random execution{'s were' if walks.walks != 1 else ' was'} run instead"
    if walks.cut:
        ran += f" ({'the last ' if walks.walks != 1 else ''}cut short at the {min(WALK_SECONDS, options.budget):g} s limit)"
    message = (f"{refused.message}; {ran} and what {'they show' if walks.walks != 1 else 'it shows'} is "
               f"reported ({counts}, {walks.dead_uses:,} uses of dead memory, "
               f"{'a deadlock' if shown.deadlocks else 'no deadlock'}), but what they miss stays undecided")
    detail = {**refused.detail, "walks": walks.walks, "racing_pairs_seen": walks.racing_pairs,
              "racing_pairs_reported": reported}
    # A race the runs show is one the solver did not decide: its other instance pairs are left
    # undecided, so its count is a lower bound (`undecided_instances`).
    per_line: dict[int, int] = {}
    for statement in program.statements:
        per_line[statement.span.start] = per_line.get(statement.span.start, 0) + 1
    found = []
    for finding in shown.findings(program, shortened=False):
        if finding.kind is FindingKind.RACE and len(finding.statements) == 2:
            a, b = (program.statements[i].span.start for i in finding.statements)
            pairs = per_line[a] * (per_line[a] - 1) // 2 if a == b else per_line[a] * per_line[b]
            finding = replace(finding, undecided=max(finding.undecided, pairs - finding.instances))
        found.append(finding)
    return found + [replace(refused, message=message, detail=detail)]


def _confirmed(program: Program, findings: list[Finding], progress: ProgressCallback | None = None,
               workers: int = 1):
    from checker.executor.replay import confirm_all

    kept: list[Finding] = []
    internal: list[Diagnostic] = []
    witnessed = [f for f in findings if f.witness is not None]
    confirmations = confirm_all(program, witnessed, workers)
    replayed = 0
    for finding in findings:
        if finding.witness is None:
            kept.append(finding)
            continue
        replayed += 1
        _tell(progress, "replay", replayed, replayed - 1, len(witnessed), _pair(program, finding))
        confirmation = next(confirmations)
        if confirmation.ok:
            kept.append(replace(finding, detail={**finding.detail, **confirmation.detail}))
        else:
            span = program.statements[finding.statements[0]].span if finding.statements else None
            internal.append(error(
                Code.SP402, f"internal error: the {finding.kind.value} witness did not replay: {confirmation.reason}",
                span, "reported here", help="this is a bug in streamproof; please report it with this spec"))
    return tuple(kept), tuple(internal)


def _expectation_met(programs: tuple[Program, ...], expectation,
                     findings: list[Finding]) -> tuple[bool, dict[int, frozenset[str] | None]]:
    """Whether an expectation holds, and the findings it accounts for (`programs`: every
    program of the spec, whose memories the findings name): index -> the memories of the
    finding it covers (`covered`), None for all of them."""
    kind = expectation.kind
    if kind in (ExpectKind.RACE, ExpectKind.USE_AFTER_FREE):
        wanted = ((FindingKind.RACE,) if kind is ExpectKind.RACE
                  else (FindingKind.USE_AFTER_FREE, FindingKind.USE_BEFORE_ALLOC))
        owners: dict[str, set[str]] = {}
        blocks: set[str] = set()
        for m in (m for program in programs for m in program.memories):
            owners.setdefault(m.name, set()).update(m.owners, m.tensors, (m.buffer,))
            if m.owners:
                blocks.add(m.name)
        matched: dict[int, frozenset[str] | None] = {}
        for i, f in enumerate(findings):
            if f.kind not in wanted:
                continue
            named = expectation.buffer
            used = _tensors_used(programs, f) if f.memory in blocks else None
            if used is not None:  # (a block several tensors had: the tensors its statements use)
                if named is None or any(named in (t, t.split("[")[0]) for t in used):
                    matched[i] = None
                continue
            memories = covered_memories(f)
            if named is None or (not memories and f.buffer == named):
                matched[i] = None
                continue
            covered = frozenset(m for m in memories if named == m or named in owners.get(m, ()))
            if covered:
                matched[i] = None if len(covered) == len(set(memories)) else covered
        return bool(matched), matched
    positive = {ExpectKind.DEADLOCK: FindingKind.DEADLOCK, ExpectKind.MISMATCH: FindingKind.COLLECTIVE_MISMATCH}
    if kind in positive:
        matched = {i: None for i, f in enumerate(findings) if f.kind is positive[kind]}
        return bool(matched), matched
    negative = {ExpectKind.NO_RACE: FindingKind.RACE, ExpectKind.NO_DEADLOCK: FindingKind.DEADLOCK,
                ExpectKind.NO_MISMATCH: FindingKind.COLLECTIVE_MISMATCH}
    if kind in negative:
        return not any(f.kind is negative[kind] for f in findings), {}
    if kind is ExpectKind.NO_USE_AFTER_FREE:
        return not any(f.kind in (FindingKind.USE_AFTER_FREE, FindingKind.USE_BEFORE_ALLOC) for f in findings), {}
    return True, {}


def covered_memories(finding: Finding) -> tuple[str, ...]:
    """The memories a race or dead-use finding is about: every element its instances touch
    (`Finding.elements`), or its one memory. An expectation accounts for the finding only
    once every one of them is expected: `expect race on x[1]` leaves a loop's race on x[0]
    failing."""
    return finding.elements or ((finding.memory,) if finding.memory is not None else ())


def _tensors_used(programs: tuple[Program, ...], finding: Finding) -> set[str] | None:
    """The caching-allocator tensors (`g[1]`) the statements of a finding on a block use, by
    their allocations; None where loop instances (which may use other tensors of the block)
    are grouped in it, or no statement names a tensor: the block's tensors then all count."""
    if finding.instances > 1 or finding.variant >= len(programs):
        return None
    statements = programs[finding.variant].statements
    used = {statements[a].form.split()[1] for i in finding.statements
            for a in statements[i].tensor_allocs if statements[a].form.startswith("alloc ")}
    return used or None


MAX_TIME_SCALE = 10**6
"""The finest time `expect makespan` is checked at exactly: a millionth of a nanosecond."""
MAX_SCALED_TIME = 10**15
"""The longest duration at that resolution (the optimizer's solvers take 64-bit integers)."""


def in_exact_time(program: Program) -> tuple[Program, int] | None:
    """The program with every time in 1/scale ns, where durations or bounds finer than a
    nanosecond (`1.5ns`) are rounded in whole ones (durations up, bounds down: two `1.5ns`
    kernels would miss a `3ns` bound), and the scale (1: nothing is rounded). None where the
    scale or the scaled times would be too large."""
    from math import lcm

    rounded = ([value for _, value in program.exact_durations] + [value for _, value in program.exact_launches]
               + [e.exact_limit for e in program.expectations if e.exact_limit is not None])
    if not rounded:
        return program, 1
    scale = lcm(*(value.denominator for value in rounded))
    if scale > MAX_TIME_SCALE:
        return None
    durations = {index: value * scale for index, value in program.exact_durations}
    launches = {index: value * scale for index, value in program.exact_launches}
    statements = tuple(replace(st, duration=int(durations.get(st.index, st.duration * scale)))
                       for st in program.statements)
    devices = tuple(replace(d, launch=int(launches.get(d.index, d.launch * scale))) for d in program.devices)
    expectations = tuple(replace(e, limit=int(e.exact_limit * scale if e.exact_limit is not None else e.limit * scale))
                         if e.kind is ExpectKind.MAKESPAN and e.limit is not None else e
                         for e in program.expectations)
    if sum(st.duration for st in statements) + max((d.launch for d in devices), default=0) * len(statements) \
            > MAX_SCALED_TIME:
        return None
    return replace(program, statements=statements, devices=devices, expectations=expectations), scale


def _makespan_checks(program: Program, options: Options) -> tuple[list[Diagnostic], list[Finding]]:
    """`expect makespan <= D`: the program run in time must end by D. Its tasks start as soon
    as they may, and an engine that several want goes to the higher priority (the contract's
    rule 12), as `simulate` runs it. Where threads race (a shared stream, a flag, a notify),
    the program has several such runs: one that ends by D meets the bound, and the optimizer's
    proven lower bound over every execution can rule it out."""
    from fractions import Fraction

    from checker.crosscheck import optimize_as_written, shortest_shuffled_run
    from checker.executor.simulate import simulate
    from checker.executor.timed import STATEMENTS_UP_TO, Outcome, timed_search
    from checker.messages import exact_ms
    from checker.optimize import check_makespan

    expectations = [e for e in program.expectations if e.kind is ExpectKind.MAKESPAN and e.limit is not None]
    diagnostics: list[Diagnostic] = []
    findings: list[Finding] = []
    if not expectations:
        return diagnostics, findings
    timed = in_exact_time(program)
    if timed is None:
        for expectation in expectations:
            findings.append(_unknown(
                "could not decide `expect makespan`: its durations or bound are finer than a millionth "
                "of a nanosecond, or too long at the resolution they are written in",
                "write durations in whole nanoseconds", about="makespan", line=expectation.span.line))
        return diagnostics, findings
    program, scale = timed  # every time below is in 1/scale ns
    expectations = [e for e in program.expectations if e.kind is ExpectKind.MAKESPAN and e.limit is not None]

    def ms(time: int) -> str:
        return exact_ms(Fraction(time, scale))

    run = simulate(program)
    ran = None if run.deadlocked else int(run.makespan)

    def not_met(expectation, message: str) -> None:
        diagnostics.append(error(Code.SP401, f"expectation not met: {message}", expectation.span, "not met",
                                 help="run `streamproof simulate` or `optimize` on this spec to see where the time goes"))

    if nondeterminism(program) is None:  # one run in time: the simulated one
        for expectation in expectations:
            if ran is None:
                not_met(expectation, "the program deadlocks: it has no makespan")
            elif ran > expectation.limit:
                cuda = any(device.runtime is Runtime.CUDA for device in program.devices)
                not_met(expectation, f"makespan {ms(ran)} ms exceeds {ms(expectation.limit)} ms "
                                     "(tasks start as soon as they may; a contended engine goes to the higher priority"
                                     + (", which under `runtime cuda` ranks kernels, memsets and collectives only: "
                                        "copies go in the order enqueued" if cuda else "") + ")")
        return diagnostics, findings
    # `--budget` bounds these questions too: what `find_all` left of it (`check_loaded`).
    deadline = time.monotonic() + options.budget

    def seconds(cap: float) -> float:
        return max(0.0, min(cap, deadline - time.monotonic()))

    result = optimize_as_written(program, timeout=seconds(max(options.timeout, 1.0)))
    shortest: int | None = ran
    searched = False
    finishes: bool | None = None  # (asked of the solver when no run finished)
    for verdict in check_makespan(program, result, scale):
        limit = verdict.expectation.limit
        if shortest is not None and shortest <= limit:
            continue  # met: a run ends by the bound
        if verdict.status != "violated" and not searched:
            # Other runs than the first: threads and stream heads in random orders.
            found = shortest_shuffled_run(program, seconds=seconds(min(max(options.timeout, 1.0), 10.0)),
                                          enough=min(e.limit for e in expectations))
            shortest = min((m for m in (shortest, found) if m is not None), default=None)
            searched = True
            if shortest is not None and shortest <= limit:
                continue
        if verdict.status != "violated" and len(program.statements) <= STATEMENTS_UP_TO:
            # Every run in time: one that ends by the bound, or none does.
            search = timed_search(program, limit, seconds=seconds(min(max(options.timeout, 1.0), 10.0)))
            if search.unreplayed:
                diagnostics.append(error(
                    Code.SP402, f"internal error: a run in time did not replay: {search.unreplayed}",
                    verdict.expectation.span, "checked here",
                    help="this is a bug in streamproof; please report it with this spec"))
            if search.outcome is Outcome.MET:
                shortest = min(m for m in (shortest, search.run.makespan) if m is not None)
                continue
            if search.outcome is Outcome.NOT_MET:
                if search.finished or search.cut:
                    runs = f"{search.runs:,} run{'s' if search.runs != 1 else ''}"
                    cut = (f", {search.cut:,} of them cut short once they could no longer end by it"
                           if search.cut else "")
                    found = f"; the shortest run found ends at {ms(shortest)} ms" if shortest is not None else ""
                    not_met(verdict.expectation, f"no run in time ends by {ms(limit)} ms (searched in every "
                                                 "order of what the threads and stream heads may do at one "
                                                 f"instant: {runs}{cut}){found}")
                else:
                    not_met(verdict.expectation, "no run in time of the program finishes (each one "
                                                 "deadlocks): it has no makespan")
                continue
        asking = seconds(options.timeout)
        if verdict.status != "violated" and (shortest is None or shortest > limit) and finishes is None \
                and asking > 0.05:
            # The solver: does any execution finish? None does: no makespan. One does: a run
            # in time that follows it (`simulate`'s `guide`), checked step by step.
            from checker.crosscheck import guided_run
            from checker.smt import completes

            finishes, issued = completes(program, timeout=asking, rlimit=options.rlimit)
            if finishes:
                found = guided_run(program, issued)
                shortest = min((m for m in (shortest, found) if m is not None), default=None)
                if shortest is not None and shortest <= limit:
                    continue
        if verdict.status == "violated":
            not_met(verdict.expectation, verdict.message)
        elif shortest is None and finishes is False:
            not_met(verdict.expectation, "no execution of the program finishes (each one deadlocks): "
                                         "it has no makespan")
        else:
            spent = seconds(1.0) == 0
            findings.append(_unknown(f"could not decide `expect makespan`: no run found that ends by "
                                     f"{ms(limit)} ms, and none ruled out"
                                     + (f" within the {options.budget:g} s left of the budget" if spent else ""),
                                     "raise --budget" if spent else "raise --timeout, or simplify the spec",
                                     about="makespan", line=verdict.expectation.span.line))
    return diagnostics, findings


def _pair(program: Program, finding: Finding) -> str:
    """The statements of a finding, as a progress display names them."""
    return " and ".join(f"{program.describe(program.statements[i])} (line {program.statements[i].span.line})"
                        for i in finding.statements[:2])


def find_all(variants: tuple[Program, ...], options: Options, progress: ProgressCallback | None = None):
    """Findings of every program of a spec (one per combination of `choose` branches).

    The same finding in several programs (same kind, same source statements, same buffer)
    is kept once, from the first program that has it; one that only some programs have says
    in its message which branches it needs. The programs of an allocator timing
    (`Program.races_only`) come last, and add only what the others do not show."""
    internal: list[Diagnostic] = []
    seen: dict[tuple, list[int]] = {}
    keyed: list[tuple[tuple, Finding]] = []
    position_of: dict[tuple, int] = {}
    began = time.monotonic()
    unchecked: tuple[Program, ...] = ()
    order = sorted(range(len(variants)), key=lambda index: variants[index].races_only)
    for position, index in enumerate(order):
        program = variants[index]
        # `--budget` is the spec's: each program gets what the ones before it left, and
        # once it is spent the rest are not checked (64 combinations of six `choose`s each
        # took their own budget and fixed costs: 144 s at `--budget 5`).
        left = round(options.budget - (time.monotonic() - began), 2)
        if index and left <= 0:
            unchecked = tuple(variants[i] for i in order[position:])
            break
        found, errors = find(program, replace(options, budget=left) if index else options, progress)
        if program.races_only:  # (its sync may hang or wait where the allocator would not)
            found = tuple(f for f in found if f.kind in (FindingKind.RACE, FindingKind.USE_AFTER_FREE,
                                                         FindingKind.USE_BEFORE_ALLOC)
                          or f.kind is FindingKind.UNKNOWN and f.detail.get("about") != "deadlock")
        internal += [e for e in errors if e not in internal]
        for finding in found:
            where = tuple(_place(program, program.statements[i]) for i in finding.statements)
            if program.races_only and any(k[0] is finding.kind and k[3] == where for k in seen):
                continue  # (its memory may be named after the block's earlier tensor)
            key = (finding.kind, finding.buffer, finding.message if not finding.statements else "", where)
            if key not in seen:
                seen[key] = []
                position_of[key] = len(keyed)
                keyed.append((key, replace(finding, variant=index)))
            else:  # (kept from the first program, naming the memories every program's instances touch)
                kept = keyed[position_of[key]][1]
                memories = tuple(dict.fromkeys(covered_memories(kept) + covered_memories(finding)))
                if len(memories) > 1 and memories != covered_memories(kept):
                    keyed[position_of[key]] = (key, replace(kept, elements=memories))
            seen[key].append(index)
    findings = []
    base = {index for index, program in enumerate(variants) if not program.races_only}
    for key, finding in keyed:
        if not base <= set(seen[key]):
            label = variants[finding.variant].variant
            having = len(base & set(seen[key]))
            when = (f"when {label}" if having <= 1 else
                    f"in {having} of the {len(base)} branch combinations, as when {label}")
            finding = replace(finding, message=f"{finding.message} ({when})",
                              detail={**finding.detail, "variant": label})
        findings.append(finding)
    if unchecked:
        labels = [program.variant for program in unchecked]
        findings.append(messages.unknown(
            f"{len(unchecked)} of the {len(variants)} programs of this spec (one per combination "
            f"of `choose` branches, runtime behaviours and allocator timings) were not checked: "
            f"the {options.budget:g} s budget was spent on the others (the first not checked: {labels[0]}; "
            "JSON lists them all)",
            "raise --budget, or give the spec fewer `choose` combinations",
            (), {"reason": "budget", "unchecked": labels}))
    if variants[0].timings_left:
        left, past_size = variants[0].timings_left, variants[0].timings_past_size
        why = []
        if left > past_size:
            why.append(f"a thread gets them for its first {MAX_RELEASES} frees of tensors recorded on other streams "
                       "whose work its thread does not wait for before allocating again (a loop's later iterations "
                       "are past that)")
        if past_size:
            why.append(f"past {MAX_VARIANTS} such programs in all, or the statements they unroll to")
        findings.append(messages.unknown(
            f"{left} program{'s' if left > 1 else ''} of the caching allocator's timing (a block recorded on "
            f"other streams handed back once their work is done) {'were' if left > 1 else 'was'} not checked: "
            + "; and ".join(why),
            "have the thread wait for the recorded streams before its next allocation from the pool (`sync STREAM` "
            "after the free: the block is then surely back, and needs no program of its own), or free fewer "
            "recorded tensors" + (", give the spec fewer `choose` combinations, or raise --max-statements"
                                  if past_size else ""),
            (), {"reason": "limit", "about": "race"}))
    return findings, internal


def check_loaded(loaded: Loaded, options: Options = Options(),
                 progress: ProgressCallback | None = None) -> FileReport:
    if loaded.program is None:
        return FileReport(loaded.path, Status.ERROR, (), loaded.diagnostics, False, loaded.source,
                          file=loaded.file)
    program = loaded.program
    variants = tuple(loaded.variants) or (program,)
    began = time.monotonic()
    findings, internal = find_all(variants, options, progress)
    diagnostics = list(loaded.diagnostics) + list(internal)
    covered: dict[int, frozenset[str] | None] = {}
    """Finding -> the memories of it the expectations ask for (None: all of them)."""
    if any(e.kind is ExpectKind.MAKESPAN for e in program.expectations):
        _tell(progress, "makespan")
        for variant in (v for v in variants if not v.races_only):
            left = max(0.0, options.budget - (time.monotonic() - began))
            makespan_diagnostics, makespan_findings = _makespan_checks(variant, replace(options, budget=left))
            if len(variants) > 1 and variant.variant:  # (each combination of branches must meet the bound)
                makespan_diagnostics = [replace(d, message=f"{d.message} (when {variant.variant})")
                                        if d.code is Code.SP401 else d for d in makespan_diagnostics]
            diagnostics += [d for d in makespan_diagnostics if d not in diagnostics]
            findings += makespan_findings
    undecided: list[int] = []
    for number, expectation in enumerate(program.expectations):
        about = QUESTION_OF.get(expectation.kind)
        open_question = about is not None and any(
            unknown_concerns(f, about, expectation.span.line) for f in findings)
        if expectation.kind is ExpectKind.MAKESPAN:
            if open_question:
                undecided.append(number)
            continue
        met, matched = _expectation_met(variants, expectation, findings)
        open_question = open_question or (not met and _left_undecided(expectation, findings))
        for index, memories in matched.items():
            if memories is None or covered.get(index, frozenset()) is None:
                covered[index] = None
            else:
                covered[index] = covered.get(index, frozenset()) | memories
        positive = expectation.kind in (ExpectKind.RACE, ExpectKind.USE_AFTER_FREE, ExpectKind.DEADLOCK,
                                        ExpectKind.MISMATCH)
        if open_question and (met if not positive else not met):
            undecided.append(number)  # shown neither way: what is not found may be in what is unknown
        elif not met:
            what = expectation.kind.value + (f" on {expectation.buffer}" if expectation.buffer else "")
            said = f"`expect {what}`"
            written = " ".join(loaded.source[expectation.span.start:expectation.span.end].split())
            if written.startswith("expect ") and "\\" not in written and written != f"expect {what}":
                said = f"`{written}` (`expect {what}`)"  # (an alias: as written, then as meant)
            diagnostics.append(error(Code.SP401, f"expectation not met: {said}", expectation.span,
                                     "not met", help=_unmet_help(expectation.kind, diagnostics, expectation.buffer)))
    for index, memories in covered.items():
        finding = findings[index]
        left = [m for m in covered_memories(finding) if memories is not None and m not in memories]
        findings[index] = (replace(finding, expected=True) if not left else
                           replace(finding, detail={**finding.detail, "not_expected": left}))
    failing = [f for f in findings if f.fails(options.allow_unknown)]
    has_error = any(d.severity is Severity.ERROR for d in diagnostics)
    internal_error = any(d.code is Code.SP402 for d in diagnostics)
    if internal_error:
        status = Status.ERROR
    elif any(f.kind is not FindingKind.UNKNOWN for f in findings):
        status = Status.FINDINGS
    elif findings:
        status = Status.UNKNOWN
    else:
        status = Status.CLEAN
    passed = not failing and not has_error
    return FileReport(loaded.path, status, tuple(findings), tuple(diagnostics), passed, loaded.source, program,
                      variants if len(variants) > 1 else (), tuple(undecided), loaded.file)



def _left_undecided(expectation, findings: list[Finding]) -> bool:
    """An `expect race on x[k]` that a race of the array's left undecided instances may meet:
    a finding names the elements of the pairs it decided (`Finding.elements`), not of those the
    budget left (`Finding.undecided`)."""
    if expectation.kind is not ExpectKind.RACE or not expectation.buffer or "[" not in expectation.buffer:
        return False
    array = expectation.buffer.split("[")[0]
    return any(f.kind is FindingKind.RACE and f.undecided and f.buffer == array for f in findings)


def _unmet_help(kind: ExpectKind, diagnostics=(), buffer: str | None = "") -> str:
    warned = {d.code for d in diagnostics}
    if kind is ExpectKind.DEADLOCK and Code.SP054 in warned:
        return ("no execution deadlocks as the language has it: a comm call returns at once, while NCCL may block "
                "a thread that calls several ranks outside a `group` (warning SP054 above): that hang is fixed by a "
                "`group` around the calls, and then the expectation is dropped")
    if kind is ExpectKind.DEADLOCK and Code.SP059 in warned:
        return ("no execution deadlocks as written: two members of a comm share a device (warning SP059 above), "
                "which NCCL and HCCL refuse or hang on; give each rank its own device, or drop the expectation "
                "if the hang was fixed")
    on = "" if not buffer else " on this element" if "[" in buffer else " on this buffer"
    return {
        ExpectKind.RACE: f"no execution races{on}; drop the expectation if the race was fixed",
        ExpectKind.DEADLOCK: "no execution deadlocks; drop the expectation if the hang was fixed",
        ExpectKind.USE_AFTER_FREE: f"no execution uses {'this buffer' if buffer else 'a buffer'} outside its lifetime",
        ExpectKind.MISMATCH: "every comm's members call the same collectives in the same order; drop the expectation if the mismatch was fixed",
        ExpectKind.NO_RACE: "see the race findings above",
        ExpectKind.NO_DEADLOCK: "see the deadlock finding above",
        ExpectKind.NO_USE_AFTER_FREE: "see the use-after-free findings above",
        ExpectKind.NO_MISMATCH: "see the collective mismatch findings above",
    }.get(kind, "")
