"""Shared hypothesis strategies for the executor tests (no tests here).

`programs()` draws small specs that use every kind of statement: shared streams and events
across threads, flag events with resets, notifies, syncs, pageable copies, alloc/free,
hardware queues and the legacy stream.
"""

from __future__ import annotations

from hypothesis import strategies as st


@st.composite
def programs(draw):
    queues = draw(st.sampled_from(["", " queues 1", " queues 2"]))
    lines = [f"device d {{ compute 2 copy 2{queues} }}", "buffer h 1MiB on host pinned",
             "buffer pg 1MiB on host", "buffer x[2] 1MiB on d", "buffer tmp 1MiB on d",
             "event e[2]", "event f flag", "notify n"]
    modes = ["", " legacy", " nonblocking"] if not queues else [""]
    lines += [f"stream s{k} on d{draw(st.sampled_from(modes)) if k == 0 else ''}" for k in range(3)]
    n_threads = draw(st.integers(1, 2))
    for t in range(n_threads):
        lines.append(f"thread th{t} {{")
        for _ in range(draw(st.integers(1, 5 if n_threads == 2 else 7))):
            s = f"s{draw(st.integers(0, 2))}"
            a = draw(st.integers(0, 1))
            kind = draw(st.sampled_from([
                "kernel", "kernel", "copy", "pagecopy", "record", "wait", "flagrec", "flagwait",
                "reset", "notify", "await", "hnotify", "host", "sync", "syncev", "syncall",
                "alloc", "free", "usetmp"]))
            lines.append({
                "kernel": f"  {s}: kernel k {draw(st.sampled_from(['reads', 'writes']))} x[{a}]",
                "copy": f"  {s}: copy x[{a}] <- h",
                "pagecopy": f"  {s}: copy pg <- x[{a}]",
                "record": f"  {s}: record e[{a}]",
                "wait": f"  {s}: wait e[{a}]",
                "flagrec": f"  {s}: record f",
                "flagwait": f"  {s}: wait f",
                "reset": f"  {s}: reset f",
                "notify": f"  {s}: notify n",
                "await": f"  {s}: await n",
                "hnotify": "  notify n",
                "host": f"  host g {draw(st.sampled_from(['reads', 'writes']))} h",
                "sync": f"  sync {s}",
                "syncev": f"  sync e[{a}]",
                "syncall": "  sync all",
                "alloc": f"  {s}: alloc tmp",
                "free": f"  {s}: free tmp",
                "usetmp": f"  {s}: kernel u writes tmp",
            }[kind])
        lines.append("}")
    return "\n".join(lines)
