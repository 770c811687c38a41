"""Schedules in the executor's vocabulary: a drawable `Timeline` (for `--trace` / `--svg`)
and a replay of the step sequence. The one module of the optimizer that uses the executor."""

from __future__ import annotations

from checker.ir import Program
from checker.optimize.schedule import Schedule


def timeline(program: Program, schedule: Schedule):
    """The schedule as the executor's `Timeline` (ns): the same lanes and slices as a
    simulation. A bound schedule has no streams (the relaxation dropped them): its tasks are
    drawn on engine-unit rows instead."""
    from checker.executor.timeline import Lane, Slice, Timeline, label_of

    units: dict[tuple[int, str], list[int]] = {}
    unit_of: dict[int, tuple[int, str, int]] = {}
    for slot in sorted(schedule.slots, key=lambda s: (s.start, s.end)):
        st = program.statements[slot.statement]
        if st.stream is None or st.engine is None or st.duration <= 0 or st.device is None:
            continue
        key = (st.device, st.engine.value)
        free_at = units.setdefault(key, [0] * program.devices[st.device].count(st.engine))
        u = next((k for k, t in enumerate(free_at) if t <= slot.start), None)
        if u is None:  # cannot happen for a valid schedule; draw on an extra row
            free_at.append(0)
            u = len(free_at) - 1
        free_at[u] = slot.end
        unit_of[slot.statement] = (st.device, st.engine.value, u)
    slices = []
    for slot in schedule.slots:
        i = slot.statement
        st = program.statements[i]
        label = label_of(program, st)
        thread = f"thread:{program.threads[st.thread].name}"
        if st.stream is not None:
            category = st.engine.value if st.engine is not None and st.duration > 0 else "instant"
            if schedule.kind == "program":
                slices.append(Slice(i, f"stream:{program.streams[st.stream].name}", slot.start,
                                    slot.end, label, st.span.line, category))
            if i in unit_of:
                dev, eng, u = unit_of[i]
                slices.append(Slice(i, f"engine:{program.devices[dev].name}/{eng}/{u}", slot.start,
                                    slot.end, label, st.span.line, category))
            launch = program.devices[program.streams[st.stream].device].launch
            if launch:
                slices.append(Slice(i, thread, slot.issue, slot.issue + launch, f"launch {label}",
                                    st.span.line, "launch"))
            if st.blocking:
                slices.append(Slice(i, thread, slot.issue + launch, slot.released,
                                    f"blocked on {label}", st.span.line, "sync"))
        else:
            category = {"host": "host", "free": "host", "sync": "sync"}.get(st.op.value, "instant")
            slices.append(Slice(i, thread, slot.issue, slot.released, label, st.span.line, category))
    slices.sort(key=lambda s: (s.start, s.end, s.statement))
    lanes = []
    if schedule.kind == "program":
        lanes += [Lane(f"stream:{s.name}", s.name, "stream") for s in program.streams]
    lanes += [Lane(f"thread:{t.name}", t.name, "thread") for t in program.threads]
    # A bound schedule has no streams: its engine units are drawn as the rows tasks run on.
    kind = "engine" if schedule.kind == "program" else "stream"
    for (dev, eng), free_at in sorted(units.items()):
        name = program.devices[dev].name
        lanes += [Lane(f"engine:{name}/{eng}/{u}", f"{name} {eng} #{u}", kind)
                  for u in range(len(free_at))]
    return Timeline(tuple(lanes), tuple(slices), "ns", schedule.makespan)


def replays(program: Program, schedule: Schedule) -> tuple[bool, str]:
    """Whether the executor accepts the schedule's steps as a legal, complete execution."""
    from checker.executor.replay import replay

    run = replay(program, schedule.witness)
    if not run.ok:
        return False, f"step {run.failed_at}: {run.reason}"
    if not run.finished:
        return False, "the replay left work unfinished"
    return True, "ok"


def chrome_trace(program: Program, schedule: Schedule) -> dict:
    """A Chrome/Perfetto trace of the schedule (`--trace`)."""
    from checker.executor.trace import chrome_trace as trace

    return trace(program, timeline(program, schedule))


def gantt_svg(program: Program, schedule: Schedule) -> str:
    """A Gantt chart of the schedule (`--svg`)."""
    from checker.executor.svg import gantt_svg as svg

    return svg(program, timeline(program, schedule))
