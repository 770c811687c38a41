"""Hypothesis strategies: random small valid `.sched` spec text.

`specs()` draws a whole spec: 1-3 threads, 2-4 streams on one or two devices (hardware
queues, legacy and nonblocking streams sometimes), buffers (arrays, pinned and pageable
host memory), an alias, snapshot and flag events, a notify, a comm, and every statement
kind (kernel, memset, copy, callback, record, wait, reset, notify, await, collectives of
every kind with roots and out-of-place forms, send/recv, `group` batches, `wait_stream`,
alloc/free on streams and hosts, host functions, `memcpy`/`memset`/`query` on the host, every
kind of sync, short `for` loops, slices), on devices that follow `runtime cuda` or cann, by
threads of which some are `process`es of their own. The
comm's members sit on different devices (with one device it has one member).
Specs stay small (about a dozen lowered statements) so that exhaustive exploration of every
interleaving finishes in well under a second.
"""

from __future__ import annotations

from hypothesis import strategies as st

KIB = 1024
BUFFER_SIZE = 4 * KIB
"""Every buffer has this many bytes; slices cut it at 1 KiB steps."""


@st.composite
def specs(draw, max_statements: int = 11, shared_comms: bool = False, comm_heavy: bool = False,
          in_flight: bool = False) -> str:
    """One valid spec, as text. Unless `shared_comms`, each comm member stream gets its calls
    from one thread only; with it, two threads may enqueue calls onto one stream, which then
    meet in enqueue order (an interleaved comm). `comm_heavy`: half the statements drawn are
    comm calls, so that such groups form often. `in_flight`: the comms are `one_in_flight`,
    and their collectives go on any stream of the member's device (the library takes the
    stream per call), so two threads' calls of one rank meet by enqueue order on streams of
    their own."""
    two_devices = draw(st.booleans())
    devices = ["d0", "d1"] if two_devices else ["d0"]
    lines: list[str] = []
    queues = {}
    for device in devices:
        q = draw(st.sampled_from([None, None, 1, 2]))
        queues[device] = q
        extra = f" queues {q}" if q else ""
        extra += draw(st.sampled_from(["", "", " runtime cuda"]))
        lines.append(f"device {device} {{ compute 2 copy 2 comm 1{extra} }}")

    # Streams: 2-4, now and then two legacy streams on one device (SP060).
    n_streams = draw(st.integers(2, 4))
    streams: list[tuple[str, str]] = []
    legacy_taken: set[str] = set()
    for k in range(n_streams):
        # The comm's two members (s0, s1) sit on different devices when there are two, as
        # NCCL and HCCL require; with one device the comm has s0 alone, or now and then both
        # on that device (SP059).
        device = devices[k] if two_devices and k < 2 else draw(st.sampled_from(devices))
        mode = draw(st.sampled_from(["", "", "", "legacy", "nonblocking"]))
        if mode == "legacy":
            if device in legacy_taken and not draw(st.booleans()):
                mode = ""
            legacy_taken.add(device)
        name = f"s{k}"
        streams.append((name, device))
        lines.append(f"stream {name} on {device}{' ' + mode if mode else ''}")
    stream_names = [s for s, _ in streams]

    # Memory: device buffers (one may be an array), a host buffer, an alias.
    lines.append(f"buffer a {BUFFER_SIZE}B on {devices[0]}")
    lines.append(f"buffer b {BUFFER_SIZE}B on {devices[-1]}")
    lines.append(f"buffer arr[2] {BUFFER_SIZE}B on {devices[0]}")
    pinned = draw(st.booleans())
    lines.append(f"buffer h {BUFFER_SIZE}B on host{' pinned' if pinned else ''}")
    lines.append("alias head = a[0:2KiB]")
    lines.append("event e")
    lines.append("event f flag")
    lines.append("notify n")
    shared_device = not two_devices and draw(st.integers(0, 3)) == 0
    comm_members = stream_names[:2] if two_devices or shared_device else stream_names[:1]
    flight = " one_in_flight" if in_flight else ""
    lines.append(f"comm c = {{ {', '.join(comm_members)} }}{flight}")
    if comm_heavy:  # a second comm on the same streams: groups of two comms may cross
        lines.append(f"comm g = {{ {', '.join(comm_members)} }}{flight}")
    device_of = dict(streams)

    def on_its_device(member: str) -> str:
        """The stream a call of `member`'s rank goes on: the member, or under `in_flight`
        any stream of its device."""
        if not in_flight:
            return member
        return draw(st.sampled_from([name for name, device in streams if device == device_of[member]]))

    # `a` is drawn most often, so that accesses conflict and orderings matter.
    device_memory = ["a", "a", "a", "b", "arr[0]", "arr[1]", "head", "a[1KiB:3KiB]",
                     "b[2KiB:4KiB]"]
    whole_device = ["a", "b", "arr[0]", "arr[1]"]

    def access(loop_var: str | None) -> str:
        if loop_var is not None and draw(st.booleans()):
            return f"arr[{loop_var}]"
        return draw(st.sampled_from(device_memory + ["h"]))

    def device_access(loop_var: str | None) -> str:
        if loop_var is not None and draw(st.booleans()):
            return f"arr[{loop_var}]"
        return draw(st.sampled_from(device_memory))

    def duration() -> str:
        return draw(st.sampled_from(["", "", " 1ms", " 2us"]))

    def rw(loop_var: str | None) -> str:
        reads = draw(st.lists(st.just(None), max_size=1))
        writes = draw(st.lists(st.just(None), max_size=1))
        text = ""
        if reads:
            text += f" reads {access(loop_var)}"
        if writes or not reads:
            text += f" writes {access(loop_var)}"
        return text

    current = [0]  # the thread being drawn
    owner: dict[str, int] = {}  # comm member stream -> the one thread that calls on it

    def callable_members() -> list[str]:
        if shared_comms:
            return comm_members
        return [m for m in comm_members if owner.get(m, current[0]) == current[0]]

    def claim(member: str) -> str:
        owner.setdefault(member, current[0])
        return member

    def collective(loop_var: str | None) -> str:
        """A collective of any kind on a comm member: in place or out of place, with a root."""
        allowed = callable_members()
        if not allowed:
            return f"{draw(st.sampled_from(stream_names))}: kernel k{rw(loop_var)}{duration()}"
        member = claim(draw(st.sampled_from(allowed)))
        kind = draw(st.sampled_from(["allreduce", "allgather", "reducescatter", "alltoall",
                                     "broadcast", "reduce"]))
        root = f" root {draw(st.sampled_from(comm_members))}" if kind in ("broadcast", "reduce") else ""
        buffers = device_access(loop_var)
        if draw(st.booleans()):
            buffers = f"{device_access(loop_var)} <- {device_access(loop_var)}"
        return f"{on_its_device(member)}: {kind} c{root} {buffers}{duration()}"

    def call(kind: str, stream: str, loop_var: str | None) -> str:
        """An allreduce, send or recv on a comm member this thread may call on."""
        allowed = callable_members()
        if not allowed:
            return f"{stream}: kernel k{rw(loop_var)}{duration()}"
        member = claim(draw(st.sampled_from(allowed)))
        if comm_heavy and kind == "allreduce" and draw(st.booleans()):
            return f"{on_its_device(member)}: allreduce g {device_access(loop_var)}{duration()}"
        if kind == "allreduce" or len(comm_members) == 1 or in_flight:
            return f"{on_its_device(member)}: allreduce c {device_access(loop_var)}{duration()}"
        other = comm_members[1] if member == comm_members[0] else comm_members[0]
        other = draw(st.sampled_from([other, other, other, member]))  # own stream: SP057, meets only in a group
        if kind == "send":
            return f"{member}: send c to {other} {device_access(loop_var)}{duration()}"
        return f"{member}: recv c from {other} {device_access(loop_var)}{duration()}"

    def statement(loop_var: str | None) -> str:
        stream = draw(st.sampled_from(stream_names))
        if comm_heavy and draw(st.booleans()):
            kind = draw(st.sampled_from(["allreduce", "allreduce", "send", "recv", "collective"]))
            return collective(loop_var) if kind == "collective" else call(kind, stream, loop_var)
        kind = draw(st.sampled_from([
            "kernel", "kernel", "copy", "callback", "record", "wait", "record_f", "wait_f",
            "reset", "notify", "await", "allreduce", "send", "recv", "alloc", "free",
            "host", "host", "sync", "hnotify", "hawait", "halloc", "hfree",
            "memset", "collective", "wait_stream", "hmemcpy", "hmemset", "query",
        ]))
        if kind == "memset":
            return f"{stream}: memset {device_access(loop_var)}{duration()}"
        if kind == "collective":
            return collective(loop_var)
        if kind == "wait_stream":
            return f"{stream}: wait_stream {draw(st.sampled_from(stream_names))}"
        if kind == "hmemcpy":
            if draw(st.booleans()):
                return f"memcpy {device_access(loop_var)} <- h{duration()}"
            return f"memcpy h <- {device_access(loop_var)}{duration()}"
        if kind == "hmemset":
            return f"memset {device_access(loop_var)}{duration()}"
        if kind == "query":
            return f"query {draw(st.sampled_from(stream_names + ['e']))}"
        if kind == "kernel":
            return f"{stream}: kernel k{rw(loop_var)}{duration()}"
        if kind == "callback":
            return f"{stream}: callback cb{rw(loop_var)}{duration()}"
        if kind == "copy":
            direction = draw(st.sampled_from(["h2d", "d2h", "d2d"]))
            if direction == "h2d":
                return f"{stream}: copy {device_access(loop_var)} <- h{duration()}"
            if direction == "d2h":
                return f"{stream}: copy h <- {device_access(loop_var)}{duration()}"
            return f"{stream}: copy {device_access(loop_var)} <- {device_access(loop_var)}{duration()}"
        if kind == "record":
            return f"{stream}: record e"
        if kind == "wait":
            return f"{stream}: wait e"
        if kind == "record_f":
            return f"{stream}: record f"
        if kind == "wait_f":
            return f"{stream}: wait f"
        if kind == "reset":
            return f"{stream}: reset f"
        if kind == "notify":
            return f"{stream}: notify n"
        if kind == "await":
            return f"{stream}: await n"
        if kind in ("allreduce", "send", "recv"):
            return call(kind, stream, loop_var)
        if kind == "alloc":
            return f"{stream}: alloc {draw(st.sampled_from(whole_device))}"
        if kind == "free":
            return f"{stream}: free {draw(st.sampled_from(whole_device))}"
        if kind == "host":
            return f"host fn{rw(loop_var)}{duration()}"
        if kind == "sync":
            target = draw(st.sampled_from(stream_names + ["e", "f", "all", devices[0]]))
            return f"sync {target}"
        if kind == "hnotify":
            return "notify n"
        if kind == "hawait":
            return "await n"
        if kind == "halloc":
            return f"alloc {draw(st.sampled_from(whole_device + ['h']))}"
        return f"free {draw(st.sampled_from(whole_device + ['h']))}"

    n_threads = draw(st.integers(1, 3))
    budget = max_statements
    bodies: list[list[str]] = [[] for _ in range(n_threads)]
    # Every thread gets at least one statement, then the budget is spread at random.
    order = list(range(n_threads)) + draw(
        st.lists(st.integers(0, n_threads - 1), min_size=0, max_size=max(0, budget - n_threads))
    )
    used = 0
    for thread in order:
        if used >= budget:
            break
        current[0] = thread
        if budget - used >= 2 and draw(st.integers(0, 9)) == 0:
            inner = draw(st.integers(1, min(2, (budget - used) // 2)))
            body = [statement("i") for _ in range(inner)]
            bodies[thread].append("for i in 0..2 {")
            bodies[thread] += ["  " + line for line in body]
            bodies[thread].append("}")
            used += 2 * inner
            continue
        if budget - used >= 2 and draw(st.integers(0, 3)) == 0:
            # A hand-off idiom: signal on one stream (or the host), then wait on another.
            first, second = draw(st.sampled_from(stream_names)), draw(st.sampled_from(stream_names))
            if draw(st.integers(0, 3)) == 0 and callable_members() == comm_members:
                # A group: its collectives are one fused launch, unordered on their stream.
                for member in comm_members:
                    claim(member)
                bodies[thread] += ["group {", "  " + collective(None), "  " + draw(st.sampled_from([
                    collective(None), f"{comm_members[-1]}: send c to {comm_members[0]} a",
                    f"{comm_members[0]}: recv c from {comm_members[-1]} b"]))
                    if len(comm_members) > 1 else "  " + collective(None), "}"]
                used += 2
                continue
            signal, wait = draw(st.sampled_from([
                (f"{first}: record e", f"{second}: wait e"),
                (f"{first}: record e", "sync e"),
                (f"{first}: record f", f"{second}: wait f"),
                (f"{first}: notify n", f"{second}: await n"),
                (f"{first}: kernel k writes a", f"sync {first}"),
            ]))
            bodies[thread] += [signal, wait]
            used += 2
            continue
        bodies[thread].append(statement(None))
        used += 1
    for k, body in enumerate(bodies):
        # now and then a thread that is a process of its own (its streams, its legacy stream
        # and hardware queues, its device-wide waits)
        process = " process" if draw(st.integers(0, 5)) == 0 else ""
        lines.append(f"thread t{k}{process} {{")
        lines += ["  " + line for line in body]
        lines.append("}")
    return "\n".join(lines) + "\n"


TENSOR_SIZES = ("512B", "1000B", "1KiB", "1536B", "2KiB", "3KiB", "4KiB")
"""Small-pool sizes that split and merge within one segment."""


@st.composite
def tensor_specs(draw, max_statements: int = 12) -> str:
    """One valid spec of caching-allocator tensors: a thread allocates, uses (on its own
    stream and on others, now and then after the free), records and frees tensors whose
    blocks split and merge, with
    `wait_stream` and syncs in between; sometimes a second thread works on the side stream."""
    count = draw(st.integers(3, 5))
    sizes = [draw(st.sampled_from(TENSOR_SIZES)) for _ in range(count)]
    lines = ["device gpu0 { compute 2 }"] + [f"tensor t{i} {size} on gpu0" for i, size in enumerate(sizes)]
    lines += ["buffer out 64B on gpu0", "stream main on gpu0", "stream side on gpu0", "stream other on gpu0"]
    body: list[str] = []
    live: list[int] = []
    freed: list[int] = []
    for k in range(draw(st.integers(6, max_statements))):
        dead = [t for t in range(count) if t not in live]
        kind = draw(st.sampled_from(("alloc", "alloc", "alloc", "free", "free", "use", "use", "use", "record",
                                     "order", "sync")))
        if kind == "alloc" and dead or not live:
            if not dead:
                break
            tensor = draw(st.sampled_from(dead))
            body.append(f"  {draw(st.sampled_from(('main', 'main', 'other')))}: alloc t{tensor}")
            live.append(tensor)
        elif kind == "free":
            tensor = draw(st.sampled_from(live))
            body.append(f"  free t{tensor}")
            live.remove(tensor)
            freed.append(tensor)
        elif kind == "record":
            body.append(f"  side: record_stream t{draw(st.sampled_from(live))}")
        elif kind == "order":
            body.append(draw(st.sampled_from(("  side: wait_stream main", "  main: wait_stream side"))))
        elif kind == "sync":
            body.append(draw(st.sampled_from(("  sync side", "  sync main"))))
        else:  # a use, now and then of a tensor already freed
            tensor = draw(st.sampled_from(live + (freed if draw(st.integers(0, 4)) == 0 else [])))
            part = "" if sizes[tensor] == "512B" else draw(st.sampled_from(("", "", "[0:512]", "[512:1000]")))
            stream = draw(st.sampled_from(("main", "side", "side", "other")))
            body.append(f"  {stream}: kernel k{k} {draw(st.sampled_from(('reads', 'writes')))} t{tensor}{part} 1ms")
    threads = ["thread a {", *body, "}"]
    if draw(st.booleans()):
        threads += ["thread b {", "  side: kernel helper reads out 1ms", "  sync side", "}"]
    return "\n".join(lines + threads) + "\n"
