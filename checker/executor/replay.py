"""Replay a witness step by step, and confirm that it exhibits the finding it claims.

A witness from any backend is only believed once the executor has walked it: every step
must be legal in the state the previous steps reached (`Machine.apply`). `confirm` then
checks the witness shows the finding (both racing accesses running at once; an access
starting on dead bytes; a stuck state with work left) and, for a race, shows the bytes the
reader saw next to what it sees when the two accesses are ordered one way or the other.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from checker.findings import Finding, FindingKind
from checker.ir import Program, conflicting
from checker.timing import Interval, Part, Timing, TimeUnit
from checker.executor.data import ByteModel
from checker.executor.machine import (
    DONE, ENQUEUED_AFTER_FREE, USE_AFTER_FREE, USE_BEFORE_ALLOC, IllegalStep, Machine, State, Store,
)
from checker.executor.state import bits
from checker.witness import Step, StepKind, Witness


@dataclass(frozen=True, slots=True)
class Replay:
    ok: bool
    """Every step was legal."""
    applied: int
    """How many steps were applied (all of them when ok)."""
    failed_at: int | None
    """Index into the witness of the first illegal step."""
    reason: str
    state: State
    """The state after the applied steps."""
    races: tuple[tuple[int, int, int], ...]
    """(a, b, step index): a step started b while a, a conflicting access, was running."""
    dead_uses: tuple[tuple[int, str, int], ...]
    """(statement, kind, step index) of each access started on dead bytes."""
    finished: bool
    """The final state has no work left."""
    stuck: tuple[tuple[int, str], ...]
    """When no step is enabled in the final state but work is left: who waits for what."""
    timing: Timing
    """When each applied step's statement ran, one step per time unit."""

    def to_json(self) -> dict:
        return {
            "ok": self.ok,
            "applied": self.applied,
            "failed_at": self.failed_at,
            "reason": self.reason,
            "races": [list(r) for r in self.races],
            "dead_uses": [list(u) for u in self.dead_uses],
            "finished": self.finished,
            "stuck": [{"statement": i, "waits_for": w} for i, w in self.stuck],
        }


@dataclass(frozen=True, slots=True)
class Confirmation:
    ok: bool
    reason: str
    detail: dict = field(default_factory=dict, compare=False, hash=False)

    def to_json(self) -> dict:
        return {"ok": self.ok, "reason": self.reason, "detail": self.detail}


def replay(program: Program, witness: Witness | tuple[Step, ...]) -> Replay:
    """Drive the machine along the witness, stopping at the first illegal step."""
    steps = witness.steps if isinstance(witness, Witness) else tuple(witness)
    return _run(Machine(program), steps)[0]


CHECKPOINT_EVERY = 32
"""`confirm_all` keeps the state of a shared replay every this many steps..."""
MAX_CHECKPOINTS = 64
"""...and at most this many states per replay (a long witness spaces them further), so
that the memory they take stays bounded whatever the program's size."""


@dataclass(slots=True)
class _Trace:
    """What a shared replay keeps for the findings whose witnesses are its prefixes: the
    first step after which both statements of each watched pair run, and the state and
    bytes before every `every`-th step. (Not the running set after every step: its bits
    reach the highest running statement, so a witness of 300,000 steps through 100,000
    statements kept 1.6 GB of them.)"""

    every: int
    watch: dict[int, list[tuple[int, tuple[int, int]]]] = field(default_factory=dict)
    """statement -> [(the other statement of a pair, the pair)]."""
    together: dict[tuple[int, int], int] = field(default_factory=dict)
    checkpoints: list[tuple[State, ByteModel]] = field(default_factory=list)

    @classmethod
    def spaced(cls, length: int, pairs=()) -> "_Trace":
        """A trace for witnesses of at most `length` steps watching `pairs`: a checkpoint every
        `CHECKPOINT_EVERY` steps, or further apart so that there are at most `MAX_CHECKPOINTS`."""
        trace = cls(max(CHECKPOINT_EVERY, -(-length // MAX_CHECKPOINTS)))
        for a, b in pairs:
            trace.watch.setdefault(a, []).append((b, (a, b)))
            trace.watch.setdefault(b, []).append((a, (a, b)))
        return trace

    def observe(self, k: int, step: Step, running: int) -> None:
        """After step k: a pair runs together from the moment its later statement starts."""
        i = step.statement
        if running >> i & 1:
            for other, pair in self.watch.get(i, ()):
                if pair not in self.together and running >> other & 1:
                    self.together[pair] = k

    def resume(self, before: int) -> tuple[int, Store, ByteModel]:
        """Fresh copies of the state and bytes after the witness's first k steps, for the
        latest checkpoint k <= `before`."""
        k = min(before // self.every, len(self.checkpoints) - 1)
        state, data = self.checkpoints[k]
        return k * self.every, Store(state), data.copy()


def _run(machine: Machine, steps: tuple[Step, ...], watch: int = 0) -> tuple[Replay, ByteModel, int | None]:
    """Replay on a mutable store (a step costs the same whatever the program's size).
    Also returns the first step index after which every statement bit in `watch` runs."""
    state = Store(machine.initial())
    data = ByteModel(machine)
    together = None
    races: list[tuple[int, int, int]] = []
    uses: list[tuple[int, str, int]] = []
    failed_at = None
    reason = ""
    applied = 0
    for k, step in enumerate(steps):
        if not isinstance(step, Step) or not isinstance(step.kind, StepKind):
            failed_at, reason = k, f"step {k + 1}: not a step: {step!r}"
            break
        try:
            step_races, step_uses = machine.advance_into(state, step)
        except IllegalStep as exc:
            failed_at, reason = k, f"step {k + 1} is not legal here: {exc.reason}"
            break
        data.observe(step)
        races.extend((a, b, k) for a, b in step_races)
        uses.extend((i, kind, k) for i, kind in step_uses)
        applied += 1
        if watch and together is None and state.running & watch == watch:
            together = k
    finished = machine.finished(state)
    stuck = ()
    if not finished and not machine.enabled(state):
        stuck = machine.stuck(state)
    result = Replay(
        ok=failed_at is None,
        applied=applied,
        failed_at=failed_at,
        reason=reason or "every step is legal",
        state=state.freeze(),
        races=tuple(races),
        dead_uses=tuple(uses),
        finished=finished,
        stuck=stuck,
        timing=step_timing(machine, steps[:applied]),
    )
    return result, data, together


def step_timing(machine: Machine, steps: tuple[Step, ...]) -> Timing:
    """The times of a witness: step k happens at time k (unit "step")."""
    opened: dict[int, int] = {}
    intervals: list[Interval] = []
    add = intervals.append
    holds = machine.holds
    tasks = [st.stream is not None for st in machine.program.statements]
    for k, step in enumerate(steps):
        i = step.statement
        kind = step.kind
        if kind is StepKind.START:
            opened[i] = k
        elif kind is StepKind.END:
            add(Interval(i, Part.TASK, opened.pop(i, k), k + 1))
        elif kind is StepKind.COMPLETE:
            add(Interval(i, Part.TASK, k, k))
        elif kind is StepKind.ISSUE and not tasks[i]:
            if holds[i]:
                opened[i] = k
            else:
                add(Interval(i, Part.HOST, k, k))
        elif kind is StepKind.ISSUE:
            add(Interval(i, Part.ENQUEUE, k, k))  # the thread enqueues a task: a tick
        elif kind is StepKind.RETURN and not tasks[i]:
            add(Interval(i, Part.HOST, opened.pop(i, k), k + 1))
    for i, k in opened.items():
        add(Interval(i, Part.TASK if tasks[i] else Part.HOST, k, len(steps)))
    return Timing(tuple(intervals), TimeUnit.STEP, len(steps))


# ---------------------------------------------------------------------- confirmation


def confirm(program: Program, finding: Finding, machine: Machine | None = None) -> Confirmation:
    """Replay `finding.witness` and check that it exhibits `finding` (on `machine`, the
    program's, when given: building one reads the whole program)."""
    if finding.witness is None:
        return Confirmation(False, "the finding carries no witness to replay")
    machine = Machine(program) if machine is None else machine
    for i in finding.statements:
        if not isinstance(i, int) or not 0 <= i < len(program.statements):
            return Confirmation(False, f"the finding names statement #{i}, which the program lacks")
    steps = finding.witness.steps
    watch = 0
    if finding.kind is FindingKind.RACE and len(finding.statements) == 2:
        a, b = finding.statements
        watch = (1 << a) | (1 << b) if a != b else 0
    run, data, together = _run(machine, steps, watch)
    if not run.ok:
        return Confirmation(False, run.reason, {"failed_at": run.failed_at})
    if finding.kind is FindingKind.RACE:
        return _confirm_race(machine, finding, steps, data, together)
    if finding.kind in (FindingKind.USE_AFTER_FREE, FindingKind.USE_BEFORE_ALLOC):
        return _confirm_dead_use(machine, finding, run, steps)
    if finding.kind is FindingKind.DEADLOCK:
        return _confirm_deadlock(machine, run)
    if finding.kind is FindingKind.COLLECTIVE_MISMATCH and steps:
        return _confirm_mismatch(machine, finding, steps)
    return Confirmation(False, f"a {finding.kind.value} finding has no execution to confirm")


def _confirm_mismatch(machine: Machine, finding: Finding, steps) -> Confirmation:
    """The witness of a mismatch in an interleaved comm ends with the `end` of the group its
    calls formed, and those calls disagree."""
    from checker.collectives import met_mismatch

    last = steps[-1]
    state = machine.initial()
    for step in steps[:-1]:
        state = machine.apply(state, step)
    met = machine.group(state, last.statement) if last.kind is StepKind.END else None
    if met is None or sorted(met.members) != sorted(finding.statements):
        return Confirmation(False, "the witness does not end with the group of the mismatched calls")
    if met_mismatch(machine.program, met.members, met.position) is None:
        return Confirmation(False, "the calls that met in the witness agree")
    return Confirmation(True, "the calls meet in the witness and disagree")


CONFIRM_SPLIT = 400
"""Witnessed findings from which `confirm_all` confirms them in worker processes, when it
is given more than one: three threads of 100 random statements have 3,000-3,600 races, whose
confirmation takes 4.6 s in one process and 3.0-3.5 s in two (bench/README.md)."""
CHUNKS_PER_WORKER = 4
"""Chunks per worker: the runs of replays differ in cost (how many steps each shares with the
one before), and a worker that finishes early takes the next chunk."""


def confirm_all(program: Program, findings: list[Finding], workers: int = 1):
    """`confirm` of each finding, in order (a generator). Races read off one execution have
    witnesses that are prefixes of one longer witness; they share one replay of it. That
    replay answers for each prefix: a prefix of a legal run is legal, the running statements
    after each step are kept, and the bytes after the prefix are rebuilt from the nearest
    checkpoint before its end (a collective's later member start samples the whole group
    again, so the bytes after the longer witness may differ). Each replay starts from the
    one before within their common first steps (`_confirm_here`). With `workers` > 1 and at
    least CONFIRM_SPLIT findings, worker processes confirm chunks of them (each group that
    shares a replay in one chunk); each confirmation is the one a single process gives."""
    if workers > 1 and len(findings) >= CONFIRM_SPLIT:
        yield from _confirm_in_workers(program, findings, workers)
    else:
        yield from _confirm_here(program, findings)


def _chunks(program: Program, findings: list[Finding], count: int) -> list[list[int]]:
    """The findings' indices in at most `count` chunks of about equal replay work, each in
    finding order: the replays that `_confirm_here` makes (`_replays`) cut into runs of
    consecutive ones, so that each keeps its findings together and starts from its
    predecessor's steps, and the findings that get no replay of their own dealt out one
    each round."""
    replays = _replays(program, findings)
    keys = [key for _, key, _ in replays]
    costs = [len(key) - (_common(keys[k - 1], key) if k else 0) + len(members)
             for k, (_, key, members) in enumerate(replays)]
    total = sum(costs) or 1
    chunks: list[list[int]] = [[] for _ in range(count)]
    done = 0
    for cost, (_, _, members) in zip(costs, replays):
        chunks[min(count - 1, done * count // total)].extend(members)
        done += cost
    grouped = {k for _, _, members in replays for k in members}
    for position, k in enumerate(k for k in range(len(findings)) if k not in grouped):
        chunks[position % count].append(k)
    return [sorted(chunk) for chunk in chunks if chunk]


def _replays(program: Program, findings: list[Finding]) -> list[tuple[int, list, list[int]]]:
    """The replays `_confirm_here` makes, in its order: per race finding whose witness is no
    prefix of another's (`_longest_witnesses`), its index, its witness's steps as keys to
    compare, and the findings whose witnesses are prefixes of it (itself included), in
    the order of their witnesses."""
    groups: dict[int, list[int]] = {}
    for k, owner in _longest_witnesses(program, findings, alone=True).items():
        groups.setdefault(owner, []).append(k)
    replays = [(owner, [(step.statement, step.kind.value) for step in findings[owner].witness.steps], sorted(members))
               for owner, members in groups.items()]
    return sorted(replays, key=lambda replay: replay[1])


_SHARED: tuple | None = None
"""(program, findings) for workers forked from this process (they need not be sent)."""


def _confirm_chunk(program, findings, indices: list[int]) -> list[Confirmation]:
    if program is None:
        program, findings = _SHARED
        findings = [findings[k] for k in indices]
    return list(_confirm_here(program, findings))


def _confirm_in_workers(program: Program, findings: list[Finding], workers: int):
    """`confirm_all`'s chunks in `workers` processes, yielded in finding order."""
    global _SHARED
    from checker.resources import process_pool, worker_context

    chunks = _chunks(program, findings, workers * CHUNKS_PER_WORKER)
    context = worker_context()
    forked = context.get_start_method() == "fork"
    _SHARED = (program, findings)
    try:
        with process_pool(min(workers, len(chunks)), context) as executor:
            futures = [executor.submit(_confirm_chunk, None, None, chunk) if forked
                       else executor.submit(_confirm_chunk, program, [findings[k] for k in chunk], chunk)
                       for chunk in chunks]
            where = {k: (c, position) for c, chunk in enumerate(chunks) for position, k in enumerate(chunk)}
            results: dict[int, list[Confirmation]] = {}
            for k in range(len(findings)):
                c, position = where[k]
                if c not in results:
                    results[c] = futures[c].result()
                yield results[c][position]
    finally:
        _SHARED = None


def _confirm_here(program: Program, findings: list[Finding]):
    """`confirm_all` in this process. Each race whose witness is no prefix of another's gets
    a replay that the races with its prefixes as witnesses share (`_replays`); these replays
    go in the order of their witnesses, each starting from the previous one's checkpoint
    within their common first steps (`_traced`): witnesses read off runs that began alike
    (aimed runs led in from one run, the solver's models) share most of their steps (three
    threads of 100 random statements: 1.2 million steps in 3,600 witnesses, 112,000 once
    common first steps count once). Confirmations come out in finding order."""
    machine = Machine(program)
    replays = _replays(program, findings)
    longest = max((len(key) for _, key, _ in replays), default=0)
    confirmed: dict[int, Confirmation] = {}
    previous: tuple[list, _Trace] | None = None
    for owner, key, members in replays:
        pairs = [findings[j].statements for j in members]
        trace = _Trace.spaced(longest, pairs)
        begin = 0
        if previous is not None:
            # Not past the step where some pair may first run together: the later of its
            # two statements' first steps (`trace.together` is read from there on).
            first: dict[int, int] = {}
            for k, (statement, _) in enumerate(key):
                first.setdefault(statement, k)
            latest = min(max(first.get(a, len(key)), first.get(b, len(key))) for a, b in pairs)
            begin = min(_common(previous[0], key), latest) // trace.every
            begin = min(begin, len(previous[1].checkpoints) - 1) * trace.every
        ok = _traced(machine, findings[owner].witness.steps, trace, begin, previous[1] if previous else None)
        previous = (key, trace)
        for j in members:
            confirmed[j] = _confirm_shared(machine, findings[j], trace) if ok else confirm(program, findings[j], machine)
    for k, finding in enumerate(findings):
        yield confirmed.pop(k) if k in confirmed else confirm(program, finding, machine)


def _common(first: list, second: list) -> int:
    """How many first items the two lists share."""
    count = 0
    for x, y in zip(first, second):
        if x != y:
            break
        count += 1
    return count


def _confirm_shared(machine: Machine, finding: Finding, trace: _Trace) -> Confirmation:
    """`confirm` of a race whose witness is a prefix of the witness `trace` replayed."""
    steps = finding.witness.steps
    a, b = finding.statements
    together = trace.together.get((a, b))
    if together is not None and together >= len(steps):
        together = None  # (together only after this finding's witness ends)
    begin, state, data = trace.resume(len(steps))
    for step in steps[begin:]:
        machine.advance_into(state, step)
        data.observe(step)
    return _confirm_race(machine, finding, steps, data, together, trace.resume)


def _traced(machine: Machine, steps, trace: _Trace, begin: int = 0, before: _Trace | None = None) -> bool:
    """Replays `steps`, filling `trace` as it says; whether every step is legal. From `begin`
    (a multiple of `trace.every`) on, when `before` is the trace of a replay whose witness
    has the same first `begin` steps: its checkpoints up to there are this replay's."""
    if begin and before is not None:
        trace.checkpoints = before.checkpoints[: begin // trace.every + 1]
        frozen, data = trace.checkpoints[-1]
        state, data = Store(frozen), data.copy()
    else:
        begin, state, data = 0, Store(machine.initial()), ByteModel(machine)
        trace.checkpoints = [(state.freeze(), data.copy())]
    for k in range(begin, len(steps)):
        step = steps[k]
        if k % trace.every == 0 and k // trace.every == len(trace.checkpoints):
            trace.checkpoints.append((state.freeze(), data.copy()))
        if not isinstance(step, Step) or not isinstance(step.kind, StepKind):
            return False
        try:
            machine.advance_into(state, step)
        except IllegalStep:
            return False
        data.observe(step)
        if trace.watch:
            trace.observe(k, step, state.running)
    return True


def _longest_witnesses(program: Program, findings: list[Finding], alone: bool = False) -> dict[int, int]:
    """For each race finding whose witness is a prefix of another's: the index of the finding
    with the longest witness it is a prefix of (itself included). With `alone`, also each
    other race finding (two statements of the program) with itself."""
    count = len(program.statements)
    races = [k for k, f in enumerate(findings)
             if f.kind is FindingKind.RACE and f.witness is not None and len(f.statements) == 2
             and all(isinstance(i, int) and 0 <= i < count for i in f.statements)
             and f.statements[0] != f.statements[1]]
    races.sort(key=lambda k: -len(findings[k].witness.steps))
    longest: list[tuple[int, tuple[Step, ...]]] = []
    owner: dict[int, int] = {}
    for k in races:
        steps = findings[k].witness.steps
        for index, long in longest:
            # The last step first: a cheap test that rejects most non-prefixes.
            if steps and long[len(steps) - 1] == steps[-1] and long[: len(steps)] == steps:
                owner[k] = index
                break
        else:
            longest.append((k, steps))
            owner[k] = k
    if alone:
        return owner
    shared = {index for k, index in owner.items() if k != index}
    return {k: index for k, index in owner.items() if index in shared}


def _confirm_deadlock(machine: Machine, run: Replay) -> Confirmation:
    if run.finished:
        return Confirmation(False, "the witness ends with every statement and task finished")
    enabled = machine.enabled(run.state)
    if enabled:
        nxt = ", ".join(f"{s.kind.value} {machine.describe(s.statement)}" for s in enabled[:3])
        return Confirmation(False, f"the witness ends in a state that can still move ({nxt})")
    stuck = [
        {"statement": i, "line": machine.program.statements[i].span.line, "waits_for": w}
        for i, w in run.stuck
    ]
    p = machine.program
    lines = [f"{p.describe(p.statements[s['statement']])}: {s['waits_for']}" for s in stuck]
    return Confirmation(True, "the final state has unfinished work and no enabled step",
                        {"stuck": lines, "participants": stuck})


def _confirm_dead_use(machine: Machine, finding: Finding, run: Replay, steps) -> Confirmation:
    (a, *_) = finding.statements
    want = USE_AFTER_FREE if finding.kind is FindingKind.USE_AFTER_FREE else USE_BEFORE_ALLOC
    # a use after free shows by run order or by launch order alike
    kinds = {USE_AFTER_FREE if kind == ENQUEUED_AFTER_FREE else kind: (k, kind) for i, kind, k in run.dead_uses
             if i == a}
    if want in kinds:
        k, kind = kinds[want]
        step = steps[k]
        # (steps count from 1 in words, as the listing numbers them)
        if step.statement != a:  # the free took effect while the statement ran
            how = (f"is running when step {k + 1} ({step.kind.value} {machine.describe(step.statement)}) "
                   f"frees bytes it touches")
        elif kind == ENQUEUED_AFTER_FREE:
            how = f"starts at step {k + 1}, enqueued after bytes it touches were freed"
        else:
            how = f"starts at step {k + 1} while bytes it touches are dead"
        return Confirmation(True, f"{machine.describe(a)} {how}", {"step": k, "kind": want})
    if kinds:
        other = next(iter(kinds))
        return Confirmation(False, f"the witness shows a {other}, not a {want}, of {machine.describe(a)}")
    return Confirmation(False, f"{machine.describe(a)} never starts on dead bytes in the witness")


def _first_start(machine: Machine, steps, i: int) -> int | None:
    """Index of the step that starts statement i's accesses."""
    want = StepKind.ISSUE if machine.program.statements[i].stream is None else StepKind.START
    for k, step in enumerate(steps):
        if step.statement == i and step.kind is want:
            return k
    return None


def _confirm_race(machine, finding, steps, data, together, resume=None) -> Confirmation:
    if len(finding.statements) != 2:
        return Confirmation(False, "a race names exactly two statements")
    a, b = finding.statements
    p = machine.program
    if together is None:
        return Confirmation(False, f"{machine.describe(a)} and {machine.describe(b)} are never "
                                   f"running at the same time in the witness")
    pair = _conflicting_pair(p, a, b, finding.memory or finding.buffer)
    if pair is None:
        return Confirmation(False, "the two statements touch no common bytes with a write")
    detail = _race_bytes(machine, steps[: together + 1], a, b, pair, data, resume)
    detail["together_at_step"] = together  # counted from 0; people count the steps from 1
    return Confirmation(True, f"both accesses are running after step {together + 1}", detail)


def _conflicting_pair(p: Program, a: int, b: int, memory: str | None = None):
    """The two statements' conflicting accesses, on the finding's memory where it names one
    (a pair racing on several buffers is one finding per buffer, each replayed on its own)."""
    pairs = list(conflicting(p.statements[a].accesses, p.statements[b].accesses))
    named = [pair for pair in pairs if p.memories[pair[0].memory].name == memory]
    return (named or pairs or [None])[0]


def _finish_steps(machine: Machine, state: State, i: int) -> tuple[Step, ...]:
    st = machine.program.statements[i]
    if st.stream is None:
        return (machine.steps[StepKind.RETURN][i],)
    if state.status[i] == DONE:
        return ()
    return (machine.steps[StepKind.END][i],)


def _ordered(machine: Machine, steps, first: int, second: int, resume=None):
    """A legal run where `first` finishes before `second` starts, or None.

    Keep the witness steps that stay legal without `second`, finish `first`, then start
    `second`. Returns the ByteModel after that start. `resume(k)` (a shared replay's
    `_Trace.resume`) gives the state after some first steps of the witness, no more than k:
    up to the first step left out, this run is the witness itself.
    """
    where = _first_start(machine, steps, second)
    if where is None:
        return None
    start_second = steps[where]

    def left_out(step) -> bool:
        return step == start_second or (
            step.statement in (first, second) and step.kind in (StepKind.END, StepKind.RETURN))

    begin = 0
    if resume is not None:
        begin, state, data = resume(next((k for k, step in enumerate(steps) if left_out(step)), len(steps)))
    else:
        state, data = Store(machine.initial()), ByteModel(machine)
    for step in steps[begin:]:
        if left_out(step):
            continue
        if machine.blocker(state, step) is not None:
            continue
        machine.advance_into(state, step)
        data.observe(step)
    if not state.running >> first & 1 and state.status[first] != DONE:
        st = machine.program.statements[first]
        kind = StepKind.ISSUE if st.stream is None else StepKind.START
        begin = machine.steps[kind][first]
        if machine.blocker(state, begin) is not None:
            return None
        machine.advance_into(state, begin)
        data.observe(begin)
    for step in _finish_steps(machine, state, first) + (start_second,):
        if machine.blocker(state, step) is not None:
            return None
        machine.advance_into(state, step)
        data.observe(step)
    return data


def _try_ordered(machine: Machine, steps, first: int, second: int, resume=None):
    """`_ordered`, or None when the witness cannot be rearranged that way."""
    try:
        return _ordered(machine, steps, first, second, resume)
    except (IllegalStep, TypeError, IndexError, KeyError):
        return None


def _race_bytes(machine, steps, a, b, pair, data, resume=None) -> dict:
    """Bytes the reader saw in the witness vs in the two serial orders of the pair."""
    p = machine.program
    lay = machine.layout
    x, y = pair
    lo, hi = max(x.start, y.start), min(x.end, y.end)
    mem = p.memories[x.memory]
    overlap = lay.mask(x.memory, lo, hi)
    detail: dict = {
        "memory": mem.name,
        "buffer": mem.buffer,
        "bytes": [lo, hi],
        "a": {"statement": a, "line": p.statements[a].span.line, "what": p.describe(p.statements[a]),
              "access": x.written_as, "writes": x.write},
        "b": {"statement": b, "line": p.statements[b].span.line, "what": p.describe(p.statements[b]),
              "access": y.written_as, "writes": y.write},
    }
    for side, index in (("a", a), ("b", b)):
        launch = p.launch_of(p.statements[index])
        if launch is not None:  # (a graph's work: the launch that ran it, which the spec can name)
            detail[side]["launch"] = launch
    if x.write and y.write:
        detail["kind"] = "write/write"
        detail["a_last"] = data.combined((g, data.written_value(a, g)) for g in _segs(overlap))
        detail["b_last"] = data.combined((g, data.written_value(b, g)) for g in _segs(overlap))
        detail["explanation"] = (
            f"both write {mem.name if (lo, hi) == (0, mem.size) else f'{mem.name}[{lo}:{hi}]'} at once: it ends as {detail['a_last']} if "
            f"{p.describe(p.statements[a])} finishes last, {detail['b_last']} if "
            f"{p.describe(p.statements[b])} does")
        return detail
    reader, writer = (a, b) if y.write else (b, a)
    detail["kind"] = "read/write"
    detail["reader"] = reader
    detail["writer"] = writer

    def seen(model, who):
        got = dict(model.sampled.get(who, ()))
        return model.combined((g, got.get(g)) for g in _segs(overlap) if g in got)

    detail["reader_saw"] = seen(data, reader)
    wf = _try_ordered(machine, steps, writer, reader, resume)
    rf = _try_ordered(machine, steps, reader, writer, resume)
    detail["writer_first"] = seen(wf, reader) if wf is not None else None
    detail["reader_first"] = seen(rf, reader) if rf is not None else None
    where = mem.name if (lo, hi) == (0, mem.size) else f"{mem.name}[{lo}:{hi}]"
    r_what = p.describe(p.statements[reader])
    w_what = p.describe(p.statements[writer])
    if str(detail["reader_saw"]).startswith("in-flight"):
        saw = f"{r_what} read {where} while {w_what} was writing it (torn bytes)"
    else:
        saw = (f"{r_what} read {where} = {detail['reader_saw']} while {w_what} started "
               f"overwriting it")
    orders = []
    if detail["writer_first"] is not None:
        orders.append(f"{detail['writer_first']} had the write completed first")
    if detail["reader_first"] is not None and detail["reader_first"] != detail["reader_saw"]:
        orders.append(f"{detail['reader_first']} had the read completed first")
    if orders:
        detail["explanation"] = saw + "; it would read " + ", or ".join(orders)
    elif detail["reader_first"] is not None:
        # (a collective's write cannot be finished first from this execution alone)
        detail["explanation"] = (saw + "; it read the old value this time, as it would had the read "
                                 "completed first, but nothing orders the two")
    else:
        detail["explanation"] = saw
    return detail


def _segs(mask: int):
    return list(bits(mask))
