"""The executor's state: what one configuration holds, and the updates that change it.

Representation, chosen so that a million states fit in a minute:

* `State` is a NamedTuple of small immutable pieces. Per-statement status is one `bytes`
  object (its hash is cached by CPython); sets of running statements and of dead memory
  segments are Python ints used as bitmasks.
* `Store` holds the same fields in mutable containers, for replay and simulation, where a
  step must cost the same whatever the program's size.
* A step's effect is a sequence of *updates* (`Machine.effects`): `(code, index, value)` for
  one slot of a per-thread, per-statement, per-stream, per-event or per-binding field, and
  `(code, on, off)` for a bitmask field (`new = (old | on) & ~off`).

What each update code does is written once, in the table `UPDATES` (field and action); the
two interpreters, `Store.update` (in place) and `apply_updates` (a new State), are generated
from it, so that they cannot disagree. Generated rather than one shared loop over a draft
copy because exploration applies updates a million times a minute: the generated code is
the hand-written loop, without a call per update (measured: a shared mutable draft made
exploration 70% slower).
"""

from __future__ import annotations

import linecache
from collections import deque
from dataclasses import dataclass
from typing import NamedTuple

NEW, QUEUED, RUNNING, DONE = 0, 1, 2, 3
"""Statement status codes. A host statement is RUNNING while its thread holds it."""

USE_AFTER_FREE, ENQUEUED_AFTER_FREE, USE_BEFORE_ALLOC = "use-after-free", "enqueued-after-free", "use-before-alloc"
"""Dead uses a step can show: an access starting on freed bytes, a statement enqueued after a
free of its memory (launch order), an access starting on bytes not allocated yet."""


class State(NamedTuple):
    """One reachable configuration. Immutable and hashable; equal states behave alike."""

    threads: tuple[int, ...]
    """Per thread: 2 * (position of the statement it is at) + 1 while that statement holds it."""
    status: bytes
    """Per statement: NEW, QUEUED, RUNNING or DONE."""
    queues: tuple[tuple[int, ...], ...]
    """Per stream: enqueued tasks that have not completed, in enqueue order."""
    tails: tuple[int, ...]
    """Per stream: the task enqueued last so far (-1: none), completed or not. Syncs and
    ordering dependencies capture this rather than the queue, so that capturing commutes
    with tasks completing (which keeps partial-order reduction simple)."""
    last_record: tuple[int, ...]
    """Per event: the latest `record` enqueued so far (-1: none)."""
    bind: tuple
    """Per binding slot: what an issued wait/sync/task captured when it was enqueued."""
    flags: int
    """Bit e set: flag event e is set."""
    notes: int
    """Bit n set: notify n is set."""
    dead: int
    """Bit g set: memory segment g is not alive."""
    freed: int
    """Bit g set: segment g has been freed at least once (dead by free, not never-allocated)."""
    running: int
    """Bit i set: statement i's accesses are running."""
    launch_dead: int
    """Bit g set: segment g is freed in launch order (a free of it was enqueued since it was
    last allocated): work enqueued now would use freed memory."""
    launch_marked: int
    """Bit i set: task i was enqueued onto freed memory (launch order); it is a use after free
    if it starts."""


@dataclass(frozen=True, slots=True)
class Transition:
    """The result of one step: the new state plus what the step started that is wrong."""

    state: State
    races: tuple[tuple[int, int], ...] = ()
    """(earlier-running statement, statement this step started) for each conflicting pair."""
    dead_uses: tuple[tuple[int, str], ...] = ()
    """(statement, USE_AFTER_FREE | ENQUEUED_AFTER_FREE | USE_BEFORE_ALLOC) for each dead use."""


WIDE_MASK = 1024
"""Masks of more bits than this are read through their binary text (`bits`)."""


def bits(mask: int):
    """Indices of set bits, lowest first. A wide mask is read through its binary text, in time
    linear in its size: clearing one bit at a time rewrites the whole mask per bit, which on
    a buffer array of 100,000 segments took 4-5 s for each witness confirmed."""
    if mask.bit_length() > WIDE_MASK:
        text = bin(mask)[:1:-1]  # (lowest bit first, without the "0b")
        index = text.find("1")
        while index >= 0:
            yield index
            index = text.find("1", index + 1)
        return
    while mask:
        low = mask & -mask
        yield low.bit_length() - 1
        mask ^= low


# ---------------------------------------------------------------------- updates

(U_STATUS, U_THREAD, U_ENQUEUE, U_DEQUEUE, U_RUNNING, U_LAST, U_BIND, U_FLAGS, U_NOTES, U_DEAD,
 U_FREED, U_LAUNCH, U_MARK) = range(13)
"""Update codes (see `UPDATES`)."""

UPDATES: tuple[tuple[int, str, str], ...] = (
    # code      field          action      (most frequent first: the interpreters test in order)
    (U_STATUS,  "status",      "byte"),    # (code, statement, status)
    (U_THREAD,  "threads",     "item"),    # (code, thread, 2 * position + holding)
    (U_ENQUEUE, "queues",      "enqueue"),  # (code, stream, task): append; the stream's tail
    (U_DEQUEUE, "queues",      "dequeue"),  # (code, stream, task): remove that task
    (U_RUNNING, "running",     "bit"),     # (code, statement, True: starts / False: ends running)
    (U_LAST,    "last_record", "item"),    # (code, event, record)
    (U_BIND,    "bind",        "item"),    # (code, slot, what the statement captured)
    (U_FLAGS,   "flags",       "bits"),    # (code, on, off) for every other bitmask field
    (U_NOTES,   "notes",       "bits"),
    (U_DEAD,    "dead",        "bits"),
    (U_FREED,   "freed",       "bits"),
    (U_LAUNCH,  "launch_dead", "bits"),
    (U_MARK,    "launch_marked", "bits"),
)
"""Every update code: the `State` field it changes and how (the one definition of updates)."""

_IN_PLACE = {
    "byte": ("self.{f}[u[1]] = u[2]",),
    "item": ("self.{f}[u[1]] = u[2]",),
    "bits": ("self.{f} = (self.{f} | u[1]) & ~u[2]",),
    # (one statement's index, not its mask: a cached update holding `1 << i` costs i / 8
    # bytes, and every statement's cached, 8 GB for 262,144 statements)
    "bit": ("self.{f} = self.{f} | 1 << u[1] if u[2] else self.{f} & ~(1 << u[1])",),
    "enqueue": ("self.queues[u[1]].append(u[2])",
                "self.tails[u[1]] = u[2]"),
    "dequeue": ("queue = self.queues[u[1]]",
                "if queue[0] == u[2]:",
                "    queue.popleft()",
                "else:",
                "    queue.remove(u[2])"),
}
"""Each action on a `Store` (mutable containers)."""

_PERSISTENT = {
    "byte": ("k = u[1]",
             "{f} = {f}[:k] + _BYTE[u[2]] + {f}[k + 1:]"),
    "item": ("k = u[1]",
             "{f} = {f}[:k] + (u[2],) + {f}[k + 1:]"),
    "bits": ("{f} = ({f} | u[1]) & ~u[2]",),
    "bit": ("{f} = {f} | 1 << u[1] if u[2] else {f} & ~(1 << u[1])",),
    "enqueue": ("k = u[1]",
                "queues = queues[:k] + (queues[k] + (u[2],),) + queues[k + 1:]",
                "tails = tails[:k] + (u[2],) + tails[k + 1:]"),
    "dequeue": ("k = u[1]",
                "queue = queues[k]",
                "rest = queue[1:] if queue[0] == u[2] else tuple(x for x in queue if x != u[2])",
                "queues = queues[:k] + (rest,) + queues[k + 1:]"),
}
"""Each action on a `State`'s fields held in local variables of the same names (immutable)."""

_BYTE = tuple(bytes([v]) for v in range(4))


def _dispatch(actions: dict, indent: str) -> list[str]:
    """An if-chain over `UPDATES`, one branch per code, in the table's order."""
    lines = []
    for k, (code, field, action) in enumerate(UPDATES):
        lines.append(f"{indent}{'if' if k == 0 else 'elif'} code == {code}:")
        lines.extend(f"{indent}    {line.format(f=field)}" for line in actions[action])
    lines.append(f"{indent}else:")
    lines.append(f"{indent}    raise ValueError(f'unknown update code {{code}}')")
    return lines


def _generate(name: str, lines: list[str], namespace: dict):
    """Compile a generated function (its source registered, as attrs does, so that tracebacks
    and `inspect.getsource` show it)."""
    source = "\n".join(lines) + "\n"
    filename = f"<streamproof executor {name}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), namespace)
    return namespace[name]


_FIELDS = ", ".join(State._fields)

_update_in_place = _generate("update", [
    "def update(self, updates):",
    '    """Apply `updates` (from `Machine.effects`) in place."""',
    "    for u in updates:",
    "        code = u[0]",
    *_dispatch(_IN_PLACE, " " * 8),
], {})

apply_updates = _generate("apply_updates", [
    "def apply_updates(state, updates):",
    '    """The State with `updates` (from `Machine.effects`) applied; `state` is unchanged."""',
    f"    {_FIELDS} = state",
    "    for u in updates:",
    "        code = u[0]",
    *_dispatch(_PERSISTENT, " " * 8),
    f"    return State({_FIELDS})",
], {"State": State, "_BYTE": _BYTE})


class Store:
    """A mutable state with the `State` field names: the machine's rules read it as they read
    a State, and `Machine.advance_into` changes it in place. Replay and simulation use it so
    that a step costs the same whatever the program's size."""

    __slots__ = State._fields

    def __init__(self, state: State) -> None:
        self.threads = list(state.threads)
        self.status = bytearray(state.status)
        self.queues = [deque(q) for q in state.queues]
        self.tails = list(state.tails)
        self.last_record = list(state.last_record)
        self.bind = list(state.bind)
        self.flags = state.flags
        self.notes = state.notes
        self.dead = state.dead
        self.freed = state.freed
        self.running = state.running
        self.launch_dead = state.launch_dead
        self.launch_marked = state.launch_marked

    def freeze(self) -> State:
        """The immutable State this store holds now."""
        return State(tuple(self.threads), bytes(self.status), tuple(tuple(q) for q in self.queues),
                     tuple(self.tails), tuple(self.last_record), tuple(self.bind), self.flags,
                     self.notes, self.dead, self.freed, self.running, self.launch_dead,
                     self.launch_marked)

    update = _update_in_place
