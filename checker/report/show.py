"""`streamproof show`: the lowered program, as a person or a script reads it."""

from __future__ import annotations

from checker.ir import Program
from checker.report.frames import printable
from checker.spec_text import duration_text


def _ms(ns: int) -> str:
    text = f"{ns / 1e6:g}"
    return duration_text(ns) if "e" in text else f"{text}ms"  # `2ns`, not `2e-06ms`


def _size(n: int) -> str:
    """Bytes in the language's own units: 4MiB, 512KiB, 100B."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{unit}"
    return f"{n}B"


def _range(program: Program, access) -> str:
    memory = program.memories[access.memory]
    if access.start == 0 and access.end == memory.size:
        return memory.name
    return f"{memory.name}[{_size(access.start) if access.start else ''}:{_size(access.end)}]"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def show_json(program: Program) -> dict:
    return {
        "path": program.path,
        "title": program.title,
        "devices": [{"name": d.name, "engines": {e.value: n for e, n in d.engines}, "launch_ms": d.launch / 1e6,
                     "queues": d.queues} for d in program.devices],
        "buffers": [{"name": m.name, "buffer": m.buffer, "bytes": m.size,
                     "on": "host" if m.on_host else program.devices[m.device].name, "pinned": m.pinned}
                    for m in program.memories],
        "streams": [{"name": s.name, "device": program.devices[s.device].name, "priority": s.priority,
                     "mode": s.mode.value, "queue": s.queue,
                     "process": program.threads[s.context].name if s.context is not None else None}
                    for s in program.streams],
        "threads": [{"name": t.name, "statements": len(t.statements)} for t in program.threads],
        "statements": [
            {"index": s.index, "line": s.span.line, "thread": program.threads[s.thread].name,
             "stream": program.streams[s.stream].name if s.stream is not None else None,
             "device": program.devices[s.device].name if s.device is not None else None,
             "op": s.op.value, "what": program.describe(s),
             "engine": s.engine.value if s.engine else None, "copy": s.copy.value if s.copy else None,
             "pinned": not s.blocking if s.copy else None,
             "duration_ms": s.duration / 1e6,
             "accesses": [{"memory": program.memories[a.memory].name, "start": a.start, "end": a.end,
                           "mode": "write" if a.write else "read"} for a in s.accesses],
             "bindings": dict(s.bindings)}
            for s in program.statements
        ],
        "counts": {"statements": len(program.statements), "tasks": sum(1 for s in program.statements if s.stream is not None),
                   "threads": len(program.threads), "streams": len(program.streams),
                   "devices": len(program.devices), "buffers": len(program.memories)},
    }


def show_text(program: Program, limit: int = 2000) -> list[str]:
    out = [printable(f"{program.path}" + (f": {program.title}" if program.title else ""))]
    out.append("devices:")
    for d in program.devices:
        engines = " ".join(f"{e.value} {n}" for e, n in d.engines)
        extra = (f" launch {_ms(d.launch)}" if d.launch else "") + (f" queues {d.queues}" if d.queues else "")
        out.append(f"  {d.name}: {engines}{extra}")
    out.append("buffers:")
    for m in program.memories:
        where = "host" + (" pinned" if m.pinned else " pageable") if m.on_host else program.devices[m.device].name
        out.append(f"  {m.name}: {_size(m.size)} on {where}")
    out.append("streams:")
    for s in program.streams:
        extra = f" priority {s.priority}" if s.priority else ""
        extra += f" {s.mode.value}" if s.mode.value != "blocking" else ""
        extra += f" queue {s.queue}" if s.queue is not None else ""
        extra += f" (process {program.threads[s.context].name})" if s.context is not None else ""
        if s.captured is not None:  # (nonblocking and on no queue, whatever was declared)
            process = f", process {program.threads[s.context].name}" if s.context is not None else ""
            extra = f" (a graph's work captured on {program.streams[s.captured].name}{process})"
        out.append(f"  {s.name} on {program.devices[s.device].name}{extra}")
    for t in program.threads:
        out.append(f"thread {t.name}{' (process)' if t.process else ''}: {len(t.statements)} statements")
        for i in t.statements[:limit]:
            s = program.statements[i]
            parts = [f"    {s.index:>5}  line {s.span.line:<4} {program.describe(s)}"]
            for a in s.accesses:
                parts.append(f"{'writes' if a.write else 'reads'} {_range(program, a)}")
            if s.duration:
                parts.append(_ms(s.duration))
            if s.engine:
                pageable = any(program.memories[a.memory].on_host and not program.memories[a.memory].pinned
                               for a in s.accesses)
                blocks = (", pageable: blocks the thread" if pageable else ", blocks the thread") if s.blocking else ""
                parts.append(f"({s.engine.value}{', ' + s.copy.value if s.copy else ''}{blocks})")
            if s.bindings:
                parts.append("[" + " ".join(f"{k}={v}" for k, v in s.bindings) + "]")
            out.append(" ".join(parts))
        if len(t.statements) > limit:
            out.append(f"    ... {len(t.statements) - limit} more")
    tasks = sum(1 for s in program.statements if s.stream is not None)
    out.append(f"{_count(len(program.statements), 'statement')} ({_count(tasks, 'task')}) on "
               f"{_count(len(program.streams), 'stream')}, {_count(len(program.devices), 'device')}, "
               f"{_count(len(program.threads), 'thread')}")
    return out
