"""Build a stream program in Python, then check, simulate or optimize it.

    import streamproof as sp

    p = sp.Program("copy then compute")
    gpu = p.device("gpu0", compute=1, copy=1)
    x_host = p.buffer("x_host", "4MiB", on="host", pinned=True)
    x = p.buffer("x", "4MiB", on=gpu)
    copies, compute = p.stream("copies", gpu), p.stream("compute", gpu)
    loaded = p.event("loaded")
    main = p.thread("main")
    main.copy(copies, x, x_host, "8ms")
    main.record(copies, loaded)
    main.wait(compute, loaded)
    main.kernel(compute, "step", reads=[x], duration="3ms")
    main.sync("all")
    assert p.check().passed

The builder writes `.sched` text and loads it through the same front end as a file. A program
built here is therefore exactly the program its text describes: `to_sched()` returns that
text, and `check`, `simulate` and `optimize` run on what loading it produced.

Sizes are a number of bytes or a size string (`"4MiB"`); durations are a number of
nanoseconds or a duration string (`"3.5ms"`). Names follow the language's rules; a name that
breaks them, or one declared twice, raises `ValueError` at once.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable, Union

from checker.errors import SpecInvalid
from checker.resources import SOLVER_LOCK
from checker.spec_text import (
    DURATION, RESERVED, SIZE, comment_text, duration_text, is_name, size_text, title_text,
)

__all__ = [
    "Program", "Thread", "Graph", "Device", "Buffer", "Stream", "Event", "Notify", "Comm", "Access",
    "CheckResult", "SpecInvalid", "load_file", "load_text",
]

Size = Union[int, str]
Duration = Union[int, str, None]


# ---------------------------------------------------------------- spelling


def _size(value: Size, what: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise TypeError(f"{what}: a size is a number of bytes or a string like '4MiB', not {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"{what}: a size cannot be negative ({value})")
        return size_text(value)
    if not SIZE.match(value):
        raise ValueError(f"{what}: {value!r} is not a size (write e.g. 64B, 512KiB, 4MiB)")
    return value


def _offset(value: Size, what: str) -> str:
    """A byte offset inside an access: plain bytes or a size."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise TypeError(f"{what}: a byte offset is an int or a size string, not {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"{what}: a byte offset cannot be negative ({value})")
        return str(value)
    if not SIZE.match(value):
        raise ValueError(f"{what}: {value!r} is not a size (write e.g. 64B, 512KiB, 4MiB)")
    return value


def _duration(value: Duration, what: str) -> str:
    """` 3ms` (with the leading space) or "" for no duration."""
    if value is None:
        return ""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise TypeError(f"{what}: a duration is nanoseconds or a string like '3.5ms', not {value!r}")
    if isinstance(value, (int, float)):
        if value < 0 or (isinstance(value, float) and not value.is_integer()):
            raise ValueError(f"{what}: a duration in nanoseconds is a whole number >= 0, not {value!r}")
        return f" {duration_text(int(value))}" if value else ""
    if not DURATION.match(value):
        raise ValueError(f"{what}: {value!r} is not a duration (write e.g. 10us, 3.5ms)")
    return f" {value}"


def _check_name(name: str, what: str) -> str:
    if not isinstance(name, str) or not is_name(name):
        reason = " (a reserved word)" if name in RESERVED else ""
        raise ValueError(f"{what} name {name!r} is not a valid name{reason}: letters, digits and _, "
                         "not starting with a digit")
    return name


# ---------------------------------------------------------------- handles


@dataclass(frozen=True, slots=True)
class Access:
    """Some memory as the language writes it: `x`, `x[1]`, `x[0:4MiB]`, `x[1][0:64]`."""

    text: str
    element: bool = False
    """Already indexed by element (a further `[lo:hi]` is a byte range of it)."""
    array: bool = False
    """An array declaration not yet indexed."""

    def __getitem__(self, key) -> "Access":
        if isinstance(key, slice):
            if key.step is not None:
                raise ValueError("byte ranges have no step")
            if self.array:
                raise ValueError(f"{self.text} is an array: index an element first, e.g. {self.text}[0][lo:hi]")
            lo = "" if key.start is None else _offset(key.start, self.text)
            hi = "" if key.stop is None else _offset(key.stop, self.text)
            return Access(f"{self.text}[{lo}:{hi}]")
        if isinstance(key, bool) or not isinstance(key, int):
            raise TypeError(f"{self.text}[...] takes an int element or a byte range slice, not {key!r}")
        if not self.array:
            raise ValueError(f"{self.text} is not an array: use a byte range {self.text}[lo:hi]")
        return Access(f"{self.text}[{key}]", element=True)

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True, slots=True)
class Device:
    name: str

    def __str__(self) -> str:
        return self.name


class Buffer(Access):
    """A declared buffer (or an alias); index or slice it for part of it."""

    __slots__ = ()

    @property
    def name(self) -> str:
        return self.text


@dataclass(frozen=True, slots=True)
class _Ref:
    """A stream, event or notify, or one element of an array of them."""

    name: str
    count: int | None = None

    def __getitem__(self, index: int):
        if self.count is None:
            raise ValueError(f"{self.name} is not an array")
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < self.count:
            raise IndexError(f"{self.name}[{index!r}]: index out of range 0..{self.count - 1}")
        return type(self)(f"{self.name}[{index}]")

    def __str__(self) -> str:
        return self.name


class Stream(_Ref):
    __slots__ = ()


class Event(_Ref):
    __slots__ = ()


class Notify(_Ref):
    __slots__ = ()


@dataclass(frozen=True, slots=True)
class Comm:
    name: str

    def __str__(self) -> str:
        return self.name


def _ref(value, kinds: tuple[type, ...], what: str) -> str:
    if isinstance(value, kinds):
        if getattr(value, "count", None) is not None:
            raise ValueError(f"{value.name} is an array of {value.count}: name one element, e.g. {value.name}[0]")
        return str(value)
    raise TypeError(f"{what} must be a {' or '.join(k.__name__ for k in kinds)}, not {value!r}")


def _access(value, what: str) -> str:
    if isinstance(value, Access):
        if value.array:
            raise ValueError(f"{value.text} is an array: name an element, e.g. {value.text}[0]")
        return value.text
    raise TypeError(f"{what} must be a Buffer or part of one (x, x[1], x[0:64]), not {value!r}")


def _accesses(values, what: str) -> list[str]:
    if values is None:
        return []
    if isinstance(values, Access):
        values = [values]
    return [_access(v, what) for v in values]


def _rw(reads, writes) -> str:
    out = ""
    r, w = _accesses(reads, "reads"), _accesses(writes, "writes")
    if r:
        out += " reads " + ", ".join(r)
    if w:
        out += " writes " + ", ".join(w)
    return out


# ---------------------------------------------------------------- the builder


class Thread:
    """A host thread: its methods append statements in program order."""

    def __init__(self, program: "Program", name: str) -> None:
        self._program = program
        self.name = name
        self._lines: list[str] = []

    def _add(self, line: str) -> "Thread":
        self._lines.append(line)
        self._program._changed()
        return self

    def _stream(self, stream) -> str:
        return _ref(stream, (Stream,), "the stream")

    # stream statements

    def kernel(self, stream: Stream, name: str, *, reads: Iterable[Access] | Access = (),
               writes: Iterable[Access] | Access = (), duration: Duration = None) -> "Thread":
        """Enqueue a kernel: it runs on a compute engine and accesses what it reads and writes."""
        return self._add(f"{self._stream(stream)}: kernel {_check_name(name, 'kernel')}{_rw(reads, writes)}"
                         f"{_duration(duration, name)}")

    def copy(self, stream: Stream, dst: Access, src: Access, duration: Duration = None) -> "Thread":
        """Enqueue a copy into `dst` from `src` (a copy with pageable host memory blocks the thread)."""
        return self._add(f"{self._stream(stream)}: copy {_access(dst, 'dst')} <- {_access(src, 'src')}"
                         f"{_duration(duration, 'copy')}")

    def callback(self, stream: Stream, name: str, *, reads=(), writes=(), duration: Duration = None) -> "Thread":
        """Enqueue host code that runs in stream order."""
        return self._add(f"{self._stream(stream)}: callback {_check_name(name, 'callback')}{_rw(reads, writes)}"
                         f"{_duration(duration, name)}")

    def _event_task(self, stream: Stream, op: str, event: Event, external: bool) -> "Thread":
        return self._add(f"{self._stream(stream)}: {op} {_ref(event, (Event,), 'the event')}"
                         + (" external" if external else ""))

    def record(self, stream: Stream, event: Event, *, external: bool = False) -> "Thread":
        """Record the event; `external=True` in a `Graph` is an event record node on the
        declared event, which work outside the graph can wait on."""
        return self._event_task(stream, "record", event, external)

    def wait(self, stream: Stream, event: Event, *, external: bool = False) -> "Thread":
        """The stream waits for the latest `record` of the event enqueued before this (snapshot);
        `external=True` in a `Graph` is a wait node, for the latest record before the launch."""
        return self._event_task(stream, "wait", event, external)

    def reset(self, stream: Stream, event: Event, *, external: bool = False) -> "Thread":
        """Clear a flag event; `external=True` in a `Graph` is a reset node."""
        return self._event_task(stream, "reset", event, external)

    def notify(self, notify: Notify, stream: Stream | None = None) -> "Thread":
        """Set a notify, on a stream or (without one) on this thread."""
        target = _ref(notify, (Notify,), "the notify")
        return self._add(f"{self._stream(stream)}: notify {target}" if stream is not None else f"notify {target}")

    def await_(self, notify: Notify, stream: Stream | None = None) -> "Thread":
        """Wait until a notify is set, then clear it (`await` is a Python keyword)."""
        target = _ref(notify, (Notify,), "the notify")
        return self._add(f"{self._stream(stream)}: await {target}" if stream is not None else f"await {target}")

    def allreduce(self, stream: Stream, comm: Comm, access: Access, duration: Duration = None) -> "Thread":
        return self._add(f"{self._stream(stream)}: allreduce {_ref(comm, (Comm,), 'the comm')} "
                         f"{_access(access, 'allreduce')}{_duration(duration, 'allreduce')}")

    def send(self, stream: Stream, comm: Comm, to: Stream, access: Access, duration: Duration = None) -> "Thread":
        return self._add(f"{self._stream(stream)}: send {_ref(comm, (Comm,), 'the comm')} to {self._stream(to)} "
                         f"{_access(access, 'send')}{_duration(duration, 'send')}")

    def recv(self, stream: Stream, comm: Comm, source: Stream, access: Access,
             duration: Duration = None) -> "Thread":
        return self._add(f"{self._stream(stream)}: recv {_ref(comm, (Comm,), 'the comm')} from "
                         f"{self._stream(source)} {_access(access, 'recv')}{_duration(duration, 'recv')}")

    def alloc(self, access: Access, stream: Stream | None = None) -> "Thread":
        """Start a buffer's lifetime, on a stream (`cudaMallocAsync`) or on this thread."""
        where = f"{self._stream(stream)}: " if stream is not None else ""
        return self._add(f"{where}alloc {_access(access, 'alloc')}")

    def free(self, access: Access, stream: Stream | None = None) -> "Thread":
        """End a buffer's lifetime (counts as a write of all of it)."""
        where = f"{self._stream(stream)}: " if stream is not None else ""
        return self._add(f"{where}free {_access(access, 'free')}")

    # host statements

    def host(self, name: str, *, reads=(), writes=(), duration: Duration = None) -> "Thread":
        """Host code on this thread: takes `duration` and accesses memory."""
        return self._add(f"host {_check_name(name, 'host function')}{_rw(reads, writes)}{_duration(duration, name)}")

    def sync(self, target) -> "Thread":
        """Block until a stream, an event's record, a device or (`"all"`) every stream has drained."""
        if target == "all":
            return self._add("sync all")
        return self._add(f"sync {_ref(target, (Stream, Event, Device), 'the sync target')}")

    def comment(self, text: str) -> "Thread":
        """A comment line in the spec text."""
        return self._add(f"# {comment_text(text)}")

    def launch(self, stream: Stream, graph: "Graph") -> "Thread":
        """Run a captured graph on `stream` (`cudaGraphLaunch`): after the stream's earlier work;
        its later work waits for the whole graph."""
        if not isinstance(graph, Graph):
            raise TypeError(f"the graph must be a Graph, not {graph!r}")
        return self._add(f"{self._stream(stream)}: launch {graph.name}")

    def __enter__(self) -> "Thread":
        return self

    def __exit__(self, *exc) -> None:
        return None


class Graph(Thread):
    """A captured graph (`graph NAME { ... }`): the stream work a capture recorded, in the order
    it was issued, run by `Thread.launch`. Only stream work can be captured: its host methods
    (`host`, `sync`, host `notify`/`await`/`alloc`/`free`) give SP029 when the spec loads."""



def _limit(name: str, value) -> None:
    """A time or size limit is a positive, finite number, as the command line requires."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
        raise ValueError(f"{name} must be a positive number, not {value!r}")


class Program:
    """A program under construction; `to_sched()` is its text, `program` what it lowers to."""

    def __init__(self, title: str | None = None, *, path: str = "<api>") -> None:
        if title is not None and title_text(title) != title:
            raise ValueError(f"a spec title is one line without double quotes: {title!r}")
        self.title = title
        self.path = path
        self._declarations: list[str] = []
        self._names: set[str] = set()
        self._threads: dict[str, Thread] = {}
        self._graphs: dict[str, Graph] = {}
        self._expectations: list[str] = []
        self._loaded = None

    def _changed(self) -> None:
        self._loaded = None

    def _declare(self, name: str, what: str, line: str) -> None:
        _check_name(name, what)
        if name in self._names:
            raise ValueError(f"{name!r} is already declared")
        self._names.add(name)
        self._declarations.append(line)
        self._changed()

    @staticmethod
    def _count(count: int | None, name: str) -> str:
        if count is None:
            return ""
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"{name}: an array has a count of at least 1, not {count!r}")
        return f"[{count}]"

    # declarations

    def device(self, name: str, *, compute: int | None = None, copy: int | None = None,
               h2d: int | None = None, d2h: int | None = None, d2d: int | None = None,
               comm: int | None = None, launch: Duration = None, queues: int | None = None) -> Device:
        """A device and its engine counts (an engine not given has one unit)."""
        items = []
        for engine, value in (("compute", compute), ("copy", copy), ("h2d", h2d), ("d2h", d2h),
                              ("d2d", d2d), ("comm", comm)):
            if value is not None:
                if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                    raise ValueError(f"{name}: {engine} needs a count of at least 1, not {value!r}")
                items.append(f"{engine} {value}")
        if launch is not None:
            items.append(f"launch{_duration(launch, 'launch') or ' 0ns'}")
        if queues is not None:
            if isinstance(queues, bool) or not isinstance(queues, int) or queues < 1:
                raise ValueError(f"{name}: queues needs a count of at least 1, not {queues!r}")
            items.append(f"queues {queues}")
        self._declare(name, "device", f"device {name} {{ {' '.join(items)} }}" if items else f"device {name}")
        return Device(name)

    def buffer(self, name: str, size: Size, *, on: Device | str, pinned: bool = False,
               count: int | None = None, ipc: bool = False) -> Buffer:
        """Memory on a device or on the host (`on="host"`, pageable unless `pinned`; `ipc`:
        shared between processes on purpose)."""
        if on == "host":
            place = "host"
        elif isinstance(on, Device):
            place = on.name
        else:
            raise TypeError(f"{name}: `on` is a Device or 'host', not {on!r}")
        if pinned and place != "host":
            raise ValueError(f"{name}: only host memory can be pinned")
        array = self._count(count, name)
        self._declare(name, "buffer", f"buffer {name}{array} {_size(size, name)} on {place}"
                      + (" pinned" if pinned else "") + (" ipc" if ipc else ""))
        return Buffer(name, array=bool(array))

    def alias(self, name: str, access: Access) -> Buffer:
        """Another name for some bytes of a buffer."""
        self._declare(name, "alias", f"alias {name} = {_access(access, name)}")
        return Buffer(name)

    def stream(self, name: str, device: Device, *, priority: str | int | None = None, legacy: bool = False,
               nonblocking: bool = False, count: int | None = None) -> Stream:
        if not isinstance(device, Device):
            raise TypeError(f"{name}: the device must be a Device, not {device!r}")
        if legacy and nonblocking:
            raise ValueError(f"{name}: a stream is legacy or nonblocking, not both")
        options = ""
        if priority is not None:
            if priority not in ("high", "low") and (isinstance(priority, bool) or not isinstance(priority, int)):
                raise ValueError(f"{name}: priority is 'high', 'low' or an int, not {priority!r}")
            options += f" priority {priority}"
        options += " legacy" if legacy else ""
        options += " nonblocking" if nonblocking else ""
        self._declare(name, "stream", f"stream {name}{self._count(count, name)} on {device.name}{options}")
        return Stream(name, count)

    def event(self, name: str, *, flag: bool = False, count: int | None = None, ipc: bool = False) -> Event:
        """A snapshot event (CUDA events), or a hardware flag (`flag=True`, CANN); `ipc`: shared
        between processes on purpose."""
        self._declare(name, "event", f"event {name}{self._count(count, name)}" + (" flag" if flag else "")
                      + (" ipc" if ipc else ""))
        return Event(name, count)

    def notify(self, name: str, *, count: int | None = None) -> Notify:
        self._declare(name, "notify", f"notify {name}{self._count(count, name)}")
        return Notify(name, count)

    def comm(self, name: str, members: Iterable[Stream], *, one_in_flight: bool = False) -> Comm:
        """A communicator: one member stream per rank (`one_in_flight`: a library that allows one
        call in flight per rank, such as custom all-reduce)."""
        streams = [_ref(s, (Stream,), "a comm member") for s in members]
        if not streams:
            raise ValueError(f"{name}: a comm needs at least one member stream")
        self._declare(name, "comm", f"comm {name} = {{ {', '.join(streams)} }}" + " one_in_flight" * bool(one_in_flight))
        return Comm(name)

    def graph(self, name: str) -> Graph:
        """A captured graph (declared once; the same name returns the same graph)."""
        if name not in self._graphs:
            self._declare(name, "graph", "")
            self._declarations.pop()
            self._graphs[name] = Graph(self, name)
        return self._graphs[name]

    def thread(self, name: str) -> Thread:
        """A host thread (its own namespace); the same name returns the same thread."""
        _check_name(name, "thread")
        if name not in self._threads:
            self._threads[name] = Thread(self, name)
            self._changed()
        return self._threads[name]

    def expect(self, property: str) -> "Program":
        """An `expect` line: `no race`, `race on x`, `no deadlock`, `makespan <= 5ms`, ..."""
        text = " ".join(str(property).split())
        if not text or "\n" in text or "#" in text:
            raise ValueError(f"not an expectation: {property!r}")
        self._expectations.append(f"expect {text}")
        self._changed()
        return self

    # text and program

    def to_sched(self) -> str:
        """The spec text this builder describes (it parses back to the same program)."""
        out = []
        if self.title is not None:
            out.append(f'spec "{title_text(self.title)}"')
            out.append("")
        out.extend(self._declarations)
        for graph in self._graphs.values():
            out.append("")
            out.append(f"graph {graph.name} {{")
            out.extend(f"  {line}" for line in graph._lines)
            out.append("}")
        for thread in self._threads.values():
            out.append("")
            out.append(f"thread {thread.name} {{")
            out.extend(f"  {line}" for line in thread._lines)
            out.append("}")
        if self._expectations:
            out.append("")
            out.extend(self._expectations)
        return "\n".join(out) + "\n"

    def load(self):
        """The front end's result for `to_sched()` (a `checker.frontend.Loaded`)."""
        if self._loaded is None:
            from checker.frontend import load_text as _load

            self._loaded = _load(self.to_sched(), self.path)
        return self._loaded

    @property
    def program(self):
        """The lowered program (`checker.ir.Program`); raises SpecInvalid if it does not load."""
        loaded = self.load()
        if loaded.program is None:
            raise SpecInvalid(loaded.source, loaded.diagnostics)
        return loaded.program

    def check(self, *, timeout: float = 10.0, budget: float = 300.0, exhaustive: bool = False,
              max_states: int = 1_000_000, max_memory: int = 1 << 30,
              allow_unknown: bool = False, explore_first: int = 20_000, symmetry: bool = True) -> "CheckResult":
        """Races, use-after-free, deadlocks and the `expect` lines, over every execution.
        `symmetry=False` asks the solver every race question, also of threads that are the
        same program (`check --no-symmetry`)."""
        from checker.analyze import Options, check_loaded

        for name, value in (("timeout", timeout), ("budget", budget), ("max_states", max_states),
                            ("max_memory", max_memory)):
            _limit(name, value)
        if isinstance(explore_first, bool) or not isinstance(explore_first, int) or explore_first < 0:
            raise ValueError(f"explore_first must be a whole number of states, 0 or more, not {explore_first!r}")
        self.program  # raise SpecInvalid on input errors rather than report them
        with SOLVER_LOCK:  # (Z3 is not thread-safe: calls from threads take turns)
            report = check_loaded(self.load(), Options(timeout=timeout, budget=budget, exhaustive=exhaustive,
                                                       max_states=max_states, max_memory=max_memory,
                                                       allow_unknown=allow_unknown, explore_first=explore_first,
                                                       symmetry=bool(symmetry)))
        return CheckResult.of(report)

    def simulate(self):
        """The program run forward in time (`checker.executor.simulate.Simulation`)."""
        from checker.executor.simulate import simulate

        return simulate(self.program)

    def optimize(self, timeout: float = 30.0):
        """Simulated and minimum makespan, and the overlap bound (`checker.optimize.OptimizeResult`)."""
        from checker.crosscheck import optimize_as_written

        _limit("timeout", timeout)
        with SOLVER_LOCK:  # (Z3 is not thread-safe: calls from threads take turns)
            result = optimize_as_written(self.program, runs_in_time=True, timeout=timeout)
        if result.deadlock or not self.simulate().deadlocked:
            return result
        # (as `streamproof optimize` reports it: a program that can get stuck has no makespan,
        # and no schedule of it stands, whatever the timed model scheduled)
        return replace(result, deadlock=True, simulated=None, program=None, bound=None, optimal_program=False,
                       optimal_bound=False, program_schedule=None, bound_schedule=None)


@dataclass(frozen=True, slots=True)
class CheckResult:
    """What `check` concluded: the status, whether the `expect` lines are met, the findings."""

    status: str
    """`clean`, `findings`, `unknown` or `error`."""
    passed: bool
    """The program meets its expectations (what `streamproof check` exits 0 for)."""
    findings: tuple
    """`checker.findings.Finding`s: kind, message, statements, buffer, witness, ..."""
    diagnostics: tuple
    report: object
    """The full `checker.findings.FileReport` (for the reporters)."""

    @classmethod
    def of(cls, report) -> "CheckResult":
        return cls(report.status.value, report.passed, report.findings, report.diagnostics, report)

    def of_kind(self, kind: str) -> tuple:
        """Findings of one kind: `race`, `deadlock`, `use-after-free`, ..."""
        return tuple(f for f in self.findings if f.kind.value == kind)

    @property
    def races(self) -> tuple:
        return self.of_kind("race")

    @property
    def deadlocks(self) -> tuple:
        return self.of_kind("deadlock")

    @property
    def clean(self) -> bool:
        return self.status == "clean"


def load_text(text: str, path: str = "<spec>"):
    """Load spec text (`checker.frontend.Loaded`: `.program` or `.diagnostics`)."""
    from checker.frontend import load_text as _load

    return _load(text, path)


def load_file(path):
    """Load a `.sched` file (`checker.frontend.Loaded`)."""
    from checker.frontend import load_file as _load

    return _load(path)
