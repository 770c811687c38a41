"""Synthesis: a spec that reaches the overlap bound.

From the bound's schedule, `synthesize` writes a spec with the same devices, buffers, work and
host code, host order unchanged, but with the tasks re-assigned to streams ("lanes") and the
program's own events replaced by a minimal set that enforces exactly the dependencies the
bound keeps:

* each thread's tasks of a device go, in program order, onto a lane whose last task ended
  by the time the task starts in the bound's schedule (preferring the lane of a task it
  depends on, whose order then costs nothing); a new lane otherwise;
* a kept dependency between tasks on different lanes becomes `record` after the first and
  `wait` before the second, unless lane order, other waits or host syncs already imply it;
* a host statement that touches what a task did (a read of its output, a `free`) waits for
  the latest such tasks first (through `sync LANE` when that task is the lane's last one so
  far, else through an event); the program's own syncs, which the bound drops, are not written.

A record always comes before its wait in its thread (a wait issued first binds to no record):
a dependency on a collective member issued before the task it follows waits through a later
member of its group instead. Generated names (the event and lane arrays, flattened elements)
avoid every name the spec uses.

Collectives stay on their comm's member streams, in their order. Loops come out unrolled.
Event operations cost launch time like any enqueue: on a device with a `launch` cost the
synthesized spec can exceed the bound by that much per added event operation (the header
comment says how many there are).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from checker.ir import (
    NS_PER_MS, PRIORITY_HIGH, PRIORITY_LOW, Access, ExpectKind, Op, Program, Runtime, Statement, StreamMode,
    accesses_conflict,
)
from checker import spec_text
from checker.optimize.model import TimedModel
from checker.spec_text import duration_text, rw_text



class EmitError(ValueError):
    """Raised when no spec can be synthesized (the program has no exact bound)."""


@dataclass(frozen=True, slots=True)
class Synthesis:
    text: str
    lanes: int
    events: int
    waits: int
    syncs: int


def flat(name: str) -> str:
    """An element of an array as a name of its own (`gpu[0]` -> `gpu_0`): the synthesized spec
    declares every element by itself, since its parts may sit on different devices."""
    return spec_text.UNSAFE.sub("_", _INDEX.sub(r"_\1", name))  # (also `x.staged#1`, a staging copy)


_INDEX = re.compile(r"\[(\d+)\]")


def _fresh(candidate: str, taken: set[str]) -> str:
    """`candidate`, or with the first numeric suffix that makes it a name not yet taken."""
    name, k = candidate, 0
    while name in taken:
        k += 1
        name = f"{candidate}_{k}"
    return name


def _declared_names(program: Program) -> list[str]:
    return [x.name for kind in (program.devices, program.memories, program.streams, program.events,
                                program.notifies, program.comms, program.threads) for x in kind]


@dataclass(frozen=True)
class SpecNames:
    """Every name the synthesized spec writes, each distinct (`spec_names`), with the program
    they name: built once per synthesis and handed to every writer."""

    program: Program
    names: dict[str, str]

    def of(self, name: str) -> str:
        """A declared name as the synthesized spec writes it."""
        return self.names[name]

    @property
    def event(self) -> str:
        """The synthesized spec's event array."""
        return self.names["#event"]

    def lane(self, device: int) -> str:
        """The synthesized spec's lane array on a device."""
        return self.names[f"#lane:{device}"]


def spec_names(program: Program) -> SpecNames:
    """Every name the synthesized spec writes, each distinct: a declared name as it is, an
    element flattened (`x[0]` -> `x_0`) unless that is a name the spec already uses (then a
    fresh suffix), and the generated event (`#event`) and lane arrays (`#lane:DEVICE`) fresh:
    two things under one name would not load, or, buffers, would share their bytes."""
    declared = _declared_names(program)
    taken = {n for n in declared if flat(n) == n} | {_INDEX.split(n)[0] for n in declared}
    names = {n: n for n in declared if flat(n) == n}
    for n in declared:
        if n not in names:
            names[n] = _fresh(flat(n), taken)
            taken.add(names[n])
    names["#event"] = _fresh("dep", taken)
    taken.add(names["#event"])
    for d in program.devices:
        names[f"#lane:{d.index}"] = _fresh(f"{names[d.name]}_lane", taken)
        taken.add(names[f"#lane:{d.index}"])
    return SpecNames(program, names)


def access_text(names: SpecNames, access: Access) -> str:
    memory = names.program.memories[access.memory]
    return spec_text.access_text(names.of(memory.name), memory.size, access.start, access.end)


def _rw(names: SpecNames, st: Statement) -> str:
    return rw_text([access_text(names, a) for a in st.accesses if not a.write],
                   [access_text(names, a) for a in st.accesses if a.write])


def _operands(names: SpecNames, st: Statement) -> str:
    """A collective's buffers as written: `x` where it reads and writes one range (or, a rooted
    member, only reads or only writes it), `destination <- source` where they differ. A
    `one_in_flight` comm's state is the comm's, not written."""
    program = names.program
    data = [a for a in st.accesses if program.memories[a.memory].comm is None]
    if st.op in (Op.ALLGATHER, Op.REDUCESCATTER) and len({a.memory for a in data}) == 1:
        # In place: the rank's share and the rest of one buffer (`in_place_share`), written whole.
        spans = sorted((a.start, a.end) for a in data)
        if all(start <= max(end for _, end in spans[:k]) for k, (start, _) in enumerate(spans) if k):
            return access_text(names, replace(data[0], start=spans[0][0], end=max(end for _, end in spans)))
    reads, writes = [a for a in data if not a.write], [a for a in data if a.write]
    if reads and writes and (reads[0].memory, reads[0].start, reads[0].end) != \
            (writes[0].memory, writes[0].start, writes[0].end):
        return f"{access_text(names, writes[0])} <- {access_text(names, reads[0])}"
    return access_text(names, (writes or reads)[0])


def _dur(st: Statement) -> str:
    return f" {duration_text(st.duration)}" if st.duration else ""


def statement_text(names: SpecNames, st: Statement, stream: str | None) -> str:
    """One statement of the synthesized spec (work and host code only)."""
    program = names.program
    prefix = f"{stream}: " if stream is not None else ""
    op = st.op
    if op is Op.KERNEL:
        return f"{prefix}kernel {st.name}{_rw(names, st)}{_dur(st)}"
    if op is Op.CALLBACK:
        return f"{prefix}callback {st.name}{_rw(names, st)}{_dur(st)}"
    if op is Op.COPY:
        source, destination = st.accesses
        return (f"{prefix}copy {access_text(names, destination)} <- "
                f"{access_text(names, source)}{_dur(st)}")
    if op is Op.HOST:
        return f"host {st.name}{_rw(names, st)}{_dur(st)}"
    if op in (Op.ALLOC, Op.FREE):
        target = names.of(program.memories[st.memory].name) if st.memory is not None else ""
        if op is Op.FREE and st.accesses:
            target = access_text(names, st.accesses[0])
        nosync = " nosync" if op is Op.FREE and st.stream is None and st.form.endswith(" nosync") else ""
        return f"{prefix}{op.value} {target}{nosync}"
    if op is Op.MEMSET:
        return f"{prefix}memset {access_text(names, st.accesses[0])}{_dur(st)}"
    comm = names.of(program.comms[st.comm].name) if st.comm is not None else ""
    data = access_text(names, st.accesses[0]) if st.accesses else ""
    if st.operation.collective and op not in (Op.SEND, Op.RECV):
        root = f" root {names.of(program.streams[st.root].name)}" if st.root is not None else ""
        return f"{prefix}{op.value} {comm}{root} {_operands(names, st)}{_dur(st)}"
    if op is Op.SEND:
        return f"{prefix}send {comm} to {names.of(program.streams[st.peer].name)} {data}{_dur(st)}"
    if op is Op.RECV:
        return f"{prefix}recv {comm} from {names.of(program.streams[st.peer].name)} {data}{_dur(st)}"
    raise EmitError(f"cannot synthesize {op.value} statements")


def _blocks_by_itself(program: Program, st: Statement) -> bool:
    """Whether the copy, written as a plain `copy`, blocks its thread as the program's did: a
    copy to or from pageable host memory does; a `memcpy` of pinned or device memory needs a
    `sync` after it."""
    return any(program.memories[a.memory].device is None and not program.memories[a.memory].pinned
               for a in st.accesses)


def _declarations(names: SpecNames, lanes: dict[int, int], kept_streams: set[int],
                  events: int) -> list[str]:
    program = names.program
    out = []
    for d in program.devices:
        engines = " ".join(f"{e.value} {n}" for e, n in d.engines) or "compute 1 copy 1 comm 1"
        launch = f" launch {duration_text(d.launch)}" if d.launch else ""
        runtime = " runtime cuda" if d.runtime is Runtime.CUDA else ""  # (its rules: collectives that spin, ...)
        out.append(f"device {names.of(d.name)} {{ {engines}{launch}{runtime} }}")
    out.append("")
    for m in program.memories:
        if m.comm is not None:
            continue  # (a `one_in_flight` comm's state: the comm declares it)
        where = "host" if m.device is None else names.of(program.devices[m.device].name)
        pinned = " pinned" if m.pinned else ""
        out.append(f"buffer {names.of(m.name)} {m.size}B on {where}{pinned}")
    out.append("")
    for s in program.streams:
        if s.index in kept_streams:
            mode = " nonblocking" if s.mode is StreamMode.NONBLOCKING else ""
            level = {PRIORITY_HIGH: "high", PRIORITY_LOW: "low"}.get(s.priority, str(s.priority))
            out.append(f"stream {names.of(s.name)} on {names.of(program.devices[s.device].name)} priority {level}{mode}")
    for d in program.devices:
        if lanes.get(d.index):
            out.append(f"stream {names.lane(d.index)}[{lanes[d.index]}] on {names.of(d.name)}")
    if events:
        out.append(f"event {names.event}[{events}]")
    for c in program.comms:
        one_in_flight = " one_in_flight" if c.in_flight else ""
        out.append(f"comm {names.of(c.name)} = {{ {', '.join(names.of(program.streams[i].name) for i in c.members)} }}"
                   f"{one_in_flight}")
    out.append("")
    return out


def synthesize(program: Program, result) -> str:
    """The synthesized spec's text (see the module docstring); raises EmitError."""
    return _Synthesizer(program, result).run().text


class _Synthesizer:
    def __init__(self, program: Program, result):
        if result.bound_schedule is None or result.deadlock:
            raise EmitError("no overlap bound to reach: " + "; ".join(result.notes))
        if any(st.op in (Op.NOTIFY, Op.AWAIT) for st in program.statements):
            # (the synthesized spec keeps each thread's own orders, not the hand-offs' between them)
            raise EmitError("its threads hand off to each other (notify, await), which a synthesized spec "
                            "would not keep")
        from checker.optimize.model import bound_model, program_model

        exact = program_model(program)
        relaxed = bound_model(program, exact)
        if not isinstance(relaxed, TimedModel):
            raise EmitError(relaxed.reason)
        self.program = program
        self.names = spec_names(program)
        self.result = result
        self._position: dict[int, int] | None = None
        """Statement -> its place in its thread (`_issued_in_order`), built once."""
        self.model = relaxed
        self.slot = {s.statement: s for s in result.bound_schedule.slots}

    def run(self) -> Synthesis:
        p, model = self.program, self.model
        # Kept dependencies between statements, from the relaxation's edges.
        by_node = {}
        for st_index, node in model.first:
            by_node.setdefault(node, []).append(st_index)
        owner_of_completion = {}
        for st_index, node in model.completion:
            owner_of_completion.setdefault(node, []).append(st_index)
        deps: set[tuple[int, int]] = set()
        sync_waits: dict[int, set[int]] = {}
        """Host statement -> the tasks it must see done first (a sync is written before it)."""
        for u, v, _ in model.edges:
            owners = owner_of_completion.get(u, ())
            for a in owners:
                sa = p.statements[a]
                if sa.stream is None:
                    continue
                for b in by_node.get(v, ()):
                    if p.statements[b].stream is None and p.statements[b].op is not Op.SYNC:
                        # a host statement that touches what the task did: a sync before it
                        sync_waits.setdefault(b, set()).add(a)
                targets = [b for b in by_node.get(v, ())
                           if p.statements[b].stream is not None and b != a]
                if len(targets) > 1:
                    # a collective's start: each member starts on its own stream, so the
                    # order goes to the members whose buffers a touches; else to the member
                    # on a's own stream, or on its thread
                    touching = [b for b in targets if accesses_conflict(sa.accesses, p.statements[b].accesses)]
                    own = ([b for b in targets if p.statements[b].stream == sa.stream]
                           or [b for b in targets if p.statements[b].thread == sa.thread])
                    targets = touching or own[:1] or targets[:1]
                for b in targets:
                    deps.add((a, b))
        # Lanes: per (thread, device), in program order.
        lane_of: dict[int, str] = {}
        kept_streams: set[int] = set()
        lane_count: dict[int, int] = {}
        lanes: dict[tuple[int, int], list[list[int]]] = {}
        preds: dict[int, set[int]] = {}
        for a, b in deps:
            preds.setdefault(b, set()).add(a)
        lane_index: dict[int, tuple[int, int, int]] = {}
        for thread in p.threads:
            for i in thread.statements:
                st = p.statements[i]
                if st.stream is None or st.operation.synchronizes:
                    continue
                if st.operation.collective:  # (a call off its member stream goes onto the member's)
                    lane_of[i] = self.names.of(p.streams[st.rank_stream].name)
                    kept_streams.add(st.rank_stream)
                    continue
                key = (thread.index, st.device)
                chains = lanes.setdefault(key, [])
                start = self.slot[i].start
                fits = [k for k, chain in enumerate(chains) if self.slot[chain[-1]].end <= start]
                prefer = [k for k in fits if chains[k][-1] in preds.get(i, ())]
                if prefer or fits:
                    k = max(prefer or fits, key=lambda k: self.slot[chains[k][-1]].end)
                    chains[k].append(i)
                else:
                    chains.append([i])
                    k = len(chains) - 1
                lane_index[i] = (thread.index, st.device, k)
        offset: dict[tuple[int, int], int] = {}
        for (thread, device), chains in sorted(lanes.items()):
            offset[(thread, device)] = lane_count.get(device, 0)
            lane_count[device] = lane_count.get(device, 0) + len(chains)
        for i, (thread, device, k) in lane_index.items():
            lane_of[i] = f"{self.names.lane(device)}[{offset[(thread, device)] + k}]"
        for s in p.streams:
            for c in p.comms:
                if s.index in c.members:
                    kept_streams.add(s.index)
        needed, sync_targets = self._reduce(deps, sync_waits, lane_of)
        needed = {self._issued_in_order(a, b) for a, b in needed}
        return self._write(lane_of, lane_count, kept_streams, needed, sync_targets)

    def _reduce(self, deps, sync_waits, lane_of):
        """Drop every dependency that lane order, other dependencies or syncs already imply."""
        p = self.program
        succ: dict[object, set[object]] = {}

        def member(i: int) -> bool:
            st = p.statements[i]
            return st.operation.collective and st.group is not None

        def start(i: int):
            """Each member starts on its own (when its stream reaches it) ..."""
            return ("start", i) if member(i) else ("task", i)

        def done(i: int):
            """... and ends once every member of its group has started."""
            return ("done", i) if member(i) else ("task", i)

        def edge(a, b):
            succ.setdefault(a, set()).add(b)

        for group in p.groups:
            for m in group.members:
                for other in group.members:
                    edge(start(m), done(other))

        def same_group(a: int, b: int) -> bool:
            return member(a) and member(b) and p.statements[a].group == p.statements[b].group

        last_on_lane: dict[str, int] = {}
        for thread in p.threads:
            previous = None
            for i in thread.statements:
                st = p.statements[i]
                if st.operation.synchronizes:
                    continue
                node = ("issue", i)
                if previous is not None:
                    edge(previous, node)
                previous = node
                if st.stream is not None:
                    edge(node, start(i))
                    lane = lane_of[i]
                    if lane in last_on_lane:
                        edge(done(last_on_lane[lane]), start(i))
                    last_on_lane[lane] = i
                if st.blocking or st.op is Op.SYNC:
                    # the thread moves on at the return: after the pageable copy, or the sync
                    edge(node, ("return", i))
                    if st.blocking:
                        edge(done(i), ("return", i))
                    previous = ("return", i)

        def reaches(a, b, skip=None) -> bool:
            stack, seen = [a], {a}
            while stack:
                x = stack.pop()
                for y in succ.get(x, ()):
                    if (x, y) == skip:
                        continue
                    if y == b:
                        return True
                    if y not in seen:
                        seen.add(y)
                        stack.append(y)
            return False

        structural = {(x, y) for x, ys in succ.items() for y in ys}
        for a, b in deps:
            edge(done(a), start(b))
        needed = set()
        below = _descendants(succ)  # (None: a cycle; then one search per dependency, as before)
        for a, b in sorted(deps, key=lambda d: (d[1], d[0])):
            if (done(a), start(b)) in structural or a == b or same_group(a, b):
                continue  # lane order already runs them in this order
            if below is not None:
                # In a DAG an edge is implied when another successor of its tail reaches its head,
                # and dropping every such edge at once keeps what reaches what.
                index, reach = below
                head = 1 << index[start(b)]
                if any(reach[index[w]] & head for w in succ[done(a)] if w != start(b)):
                    continue
                needed.add((a, b))
            elif reaches(done(a), start(b), skip=(done(a), start(b))):
                succ[done(a)].discard(start(b))
            else:
                needed.add((a, b))
        for a, b in needed:
            if p.statements[a].thread != p.statements[b].thread:
                raise EmitError("a dependency the bound keeps crosses threads; events shared by "
                                "threads would make the synthesized spec's order depend on timing")
        sync_targets: dict[int, list[int]] = {}
        for thread in p.threads:
            for i in thread.statements:
                st = p.statements[i]
                if i not in sync_waits:
                    continue
                waits = sorted(sync_waits[i])
                chosen = []
                for t in waits:
                    if reaches(done(t), ("issue", i)):
                        continue  # an earlier sync of this thread already waited for it
                    if any(o != t and reaches(done(t), done(o)) for o in waits):
                        continue  # a later task it waits for implies this one
                    chosen.append(t)
                for t in chosen:
                    if p.statements[t].thread != st.thread:
                        raise EmitError("a host statement the bound keeps waits for another thread's task; "
                                        "events shared by threads would make the order depend on timing")
                    edge(done(t), ("issue", i))
                sync_targets[i] = chosen
        return needed, sync_targets

    def _issued_in_order(self, a: int, b: int) -> tuple[int, int]:
        """The dependency a -> b as a record after a and a wait its thread issues later: a
        wait binds to the latest record enqueued before it, so one issued first does nothing.
        A collective group starts once every member is at its stream's head, so a member
        issued before a (the group waits for a through another member) takes its wait on a
        member of its group issued after a; no such member: an emit error."""
        p = self.program
        if self._position is None:  # (each statement's place in its thread, for every dependency)
            self._position = {i: k for thread in p.threads for k, i in enumerate(thread.statements)}
        position = self._position
        thread = p.statements[a].thread
        if p.statements[b].thread != thread or position[b] > position[a]:
            return a, b  # (across threads the emitted spec's check decides: `emit_as_run`)
        group = p.statements[b].group if p.statements[b].operation.collective else None
        later = [m for m in (p.groups[group].members if group is not None else ())
                 if p.statements[m].thread == thread and position[m] > position[a]]
        if not later:
            raise EmitError(f"a dependency the bound keeps ({p.describe(p.statements[a])} before "
                            f"{p.describe(p.statements[b])}) runs against the order its thread issues them")
        return a, min(later, key=position.get)

    def _write(self, lane_of, lane_count, kept_streams, needed, sync_targets) -> Synthesis:
        p = self.program
        dep = self.names.event
        # An event per task another task or a sync must wait for; a sync on a lane needs none
        # when the task is that lane's latest one at the sync.
        incoming: dict[int, list[int]] = {}
        for a, b in needed:
            incoming.setdefault(b, []).append(a)
        event_of: dict[int, int] = {}
        enqueued_before: dict[int, dict[str, int]] = {}
        for thread in p.threads:
            last: dict[str, int] = {}
            for i in thread.statements:
                st = p.statements[i]
                if i in sync_targets:
                    enqueued_before[i] = dict(last)
                if st.stream is not None and not st.operation.synchronizes and i in lane_of:
                    last[lane_of[i]] = i
        sync_plan: dict[int, list[str]] = {}
        for s, targets in sync_targets.items():
            plan = []
            for t in targets:
                lane = lane_of[t]
                if enqueued_before[s].get(lane) == t:
                    plan.append(f"sync {lane}")
                else:
                    event_of.setdefault(t, len(event_of))
                    plan.append(f"sync {dep}[{event_of[t]}]")
            sync_plan[s] = plan
        for a, _ in sorted(needed):
            event_of.setdefault(a, len(event_of))
        body: dict[int, list[str]] = {}
        waits = syncs = 0
        for thread in p.threads:
            lines: list[str] = []
            batch: list[str] | None = None  # the calls of the `group` being written
            after: list[str] = []  # what follows them: records go after the group's launch
            for i in thread.statements:
                st = p.statements[i]
                if st.operation.synchronizes or (st.op in (Op.ALLOC, Op.FREE) and st.launch_only):
                    continue  # (a caching-allocator tensor's alloc and free do nothing at run time)
                if batch is not None and (st.batch is None or st.batch != batch_id):
                    lines += ["group {", *("  " + line for line in batch), "}", *after]
                    batch, after = None, []
                if st.op is Op.SYNC:
                    continue  # (the bound drops the program's syncs; what needs one gets its own)
                if st.stream is None:  # (what a host statement waits for, first)
                    lines.extend(sync_plan.get(i, []))
                    syncs += len(sync_plan.get(i, []))
                lane = lane_of.get(i)
                for a in sorted(incoming.get(i, ())):
                    lines.append(f"{lane}: wait {dep}[{event_of[a]}]")
                    waits += 1
                text = statement_text(self.names, st, lane)
                followers = [f"{lane}: record {dep}[{event_of[i]}]"] if i in event_of else []
                if st.blocking and lane is not None and not _blocks_by_itself(p, st):
                    followers.append(f"sync {lane}")  # (a `memcpy`: the thread waits for the copy)
                if st.batch is not None:
                    if batch is None:
                        batch, batch_id = [], st.batch
                    batch.append(text)
                    after += followers
                else:
                    lines += [text, *followers]
            if batch is not None:
                lines += ["group {", *("  " + line for line in batch), "}", *after]
            body[thread.index] = lines
        bound = self.result.bound
        title = p.title or p.path
        added = len(event_of) + waits + sum(1 for plans in sync_plan.values() for x in plans if f"{dep}[" in x)
        out = [
            f"# Synthesized by `streamproof optimize --emit` from {p.path}.",
            "# The same work, buffers and host code (loops unrolled); tasks re-assigned to lanes;",
            f"# {len(event_of)} event(s), {waits} wait(s), {syncs} sync(s) enforce the dependencies",
            "# the overlap bound keeps. Its minimum makespan is the bound of the original program,",
            f"# {bound / NS_PER_MS:g} ms" + (
                f" (plus launch time for the {added} added event operation(s))"
                if added and any(d.launch for d in p.devices) else "") + ".",
        ]
        if any(st.launch is not None and not st.costs_launch and p.devices[st.device].launch for st in p.statements):
            out.append("# A graph's work is written out task by task, and each task then costs its device's "
                       "launch time (one `launch` of the graph cost it once): this spec's minimum can be above "
                       "the bound by that much.")
        if p.variant:
            out.append(f"# Of the spec's programs, the one written here is {p.variant}.")
        if any(d.queues for d in p.devices):
            out.append("# `queues N` is left out of the devices: the bound has no hardware queues (CUDA: raise "
                       "CUDA_DEVICE_MAX_CONNECTIONS to come near it).")
        if any(e.kind in (ExpectKind.RACE, ExpectKind.USE_AFTER_FREE) for e in p.expectations):
            out.append("# The original expects findings: the work's orders are kept, not those findings; "
                       "`streamproof check` this spec before relying on it.")
        out += [f'spec "{title} (reaches the overlap bound)"', ""]
        out += _declarations(self.names, lane_count, kept_streams, len(event_of))
        for thread in p.threads:
            out.append(f"thread {self.names.of(thread.name)}{' process' if thread.process else ''} {{")
            out.extend("  " + line for line in body[thread.index])
            out.append("}")
            out.append("")
        kinds = {e.kind for e in p.expectations}
        if ExpectKind.NO_RACE in kinds:
            out.append("expect no race")
        out.append("expect no deadlock")
        if ExpectKind.NO_USE_AFTER_FREE in kinds:
            out.append("expect no use-after-free")
        if bound <= spec_text.MAX_DURATION_NS:
            out.append(f"expect makespan <= {duration_text(bound)}")
        else:  # longer than a spec may write: the expectation is left out
            out.append(f"# minimum makespan {bound / 1e9:g} s, past the longest duration a spec may write")
        return Synthesis("\n".join(out) + "\n", sum(lane_count.values()), len(event_of), waits, syncs)


def _descendants(succ: dict) -> tuple[dict, list[int]] | None:
    """Each node's descendants as a bit set (node -> its bit: `index`), read in reverse
    topological order, so that every implied edge is found in one pass (a search per edge
    from its tail made `optimize --emit` cubic: 28 s at 200 loop rounds); None for a cycle."""
    nodes = list(dict.fromkeys([*succ, *(y for ys in succ.values() for y in ys)]))
    index = {node: k for k, node in enumerate(nodes)}
    indegree = [0] * len(nodes)
    for ys in succ.values():
        for y in ys:
            indegree[index[y]] += 1
    order = [k for k in range(len(nodes)) if indegree[k] == 0]
    for k in order:  # (grows as nodes lose their last predecessor)
        for y in succ.get(nodes[k], ()):
            indegree[index[y]] -= 1
            if indegree[index[y]] == 0:
                order.append(index[y])
    if len(order) < len(nodes):
        return None
    reach = [0] * len(nodes)
    for k in reversed(order):
        bits = 0
        for y in succ.get(nodes[k], ()):
            bits |= reach[index[y]] | (1 << index[y])
        reach[k] = bits
    return index, reach
