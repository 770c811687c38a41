"""Threads that are the same program: symmetries of a `Program`, and the orbits they make.

Real programs often run several identical host threads: data-loader workers sharing one copy
stream, one thread per stream doing the same work on its own buffers, one thread per device.
Swapping two such threads (and, with them, the devices, streams, events, notifies and buffers
each one owns) maps every execution to an execution, so two accesses race exactly when their
images race. The SMT engine asks one question per orbit of race candidates and carries each
answer, with its witness renamed, to the other pairs of the orbit (`smt._analyze`).

A symmetry here swaps two threads of equal length, statement k of one with statement k of
the other, together with a renaming of devices, streams, events, notifies and buffers read
off the two threads; where a thread left in place names what that renames (a rank's other
thread, on the rank's device), it is swapped too, with a thread of the same shape. It counts only when the renamed program is the program
itself, statement by statement (every field that has a meaning: operation, stream, accesses
and their byte ranges, event, notify, sync target, duration, engine, device, ...) and
declaration by declaration (a renamed device has the same engines, launch time, hardware
queues and runtime; every stream keeps its priority, mode and hardware queue and lands on the
image of its device; every buffer keeps its size and pinning and lands on the image of its
place; a renamed event keeps its kind). Two members of one collective group (the k-th
allreduce of two ranks) may trade places, and a communicator's streams with them, as long as
its member set stays the same; members of send/recv pairs and of rooted collectives, and
caching-allocator blocks, never move: their meaning depends on positions the renaming would
not carry. Names (kernel and host-function names, how a
statement was written) are labels and are not compared. The check is exact, so a symmetry
found is one; a symmetry missed only costs questions.
"""

from __future__ import annotations

from dataclasses import dataclass

from checker.ir import GroupKind, Program, Statement, SyncKind

MAX_CHECKS = 300_000
"""Statement comparisons after which no more pairs of threads are tried (about 1 s; 2,000
identical threads of 11 statements take 250,000): missing a symmetry only costs questions."""


@dataclass(frozen=True, slots=True)
class Symmetry:
    """A swap of threads, two by two (`threads`: the first pair, then any more): `moved[i]` is
    the image of statement i of a swapped thread (every other statement is its own)."""

    threads: tuple[int, ...]
    moved: dict[int, int]

    def image(self, statement: int) -> int:
        return self.moved.get(statement, statement)


class _Renaming:
    """Partial maps of each resource kind, read off pairs of corresponding statements."""

    KINDS = ("device", "stream", "event", "notify", "memory", "thread")

    def __init__(self) -> None:
        self.maps: dict[str, dict[int, int]] = {kind: {} for kind in self.KINDS}

    def bind(self, kind: str, source: int | None, target: int | None) -> bool:
        """Records source -> target; False when either is None without the other, or when
        source already maps elsewhere."""
        if source is None or target is None:
            return source is None and target is None
        known = self.maps[kind].setdefault(source, target)
        return known == target

    def permutation(self) -> bool:
        """Whether each map permutes its domain (then the identity elsewhere completes it)."""
        return all(set(mapping) == set(mapping.values()) for mapping in self.maps.values())

    def __call__(self, kind: str, value: int | None) -> int | None:
        return value if value is None else self.maps[kind].get(value, value)


def _read(renaming: _Renaming, a: Statement, b: Statement) -> bool:
    """Binds the resources statement a uses to those of b (the statement it maps to)."""
    if not (renaming.bind("device", a.device, b.device) and renaming.bind("stream", a.stream, b.stream)
            and renaming.bind("event", a.event, b.event)
            and renaming.bind("notify", a.notify, b.notify) and renaming.bind("memory", a.memory, b.memory)):
        return False
    if len(a.accesses) != len(b.accesses) or len(a.pieces) != len(b.pieces):
        return False
    if not all(renaming.bind("memory", x, y) for x, y in zip(a.pieces, b.pieces)):
        return False
    if not all(renaming.bind("memory", x.memory, y.memory) for x, y in zip(a.accesses, b.accesses)):
        return False
    kind = _target_kind(a)
    if a.sync is b.sync and kind is not None:
        return renaming.bind(kind, a.target, b.target)
    return True


def _target_kind(statement: Statement) -> str | None:
    """The resource kind a sync's `target` names, None when it names none."""
    if statement.sync is SyncKind.STREAM:
        return "stream"
    if statement.sync is SyncKind.EVENT:
        return "event"
    if statement.sync is SyncKind.DEVICE:
        return "device"
    return None


def _renamed(statement: Statement, renaming: _Renaming) -> tuple:
    """What the statement means, its resources renamed: the fields that have a meaning."""
    kind = _target_kind(statement)
    target = renaming(kind, statement.target) if kind else statement.target
    return (statement.op, renaming("stream", statement.stream),
            tuple((renaming("memory", x.memory), x.start, x.end, x.write) for x in statement.accesses),
            statement.duration, statement.engine, renaming("device", statement.device),
            renaming("event", statement.event),
            renaming("notify", statement.notify), statement.comm, renaming("stream", statement.peer), statement.group,
            statement.sync, target, statement.copy, statement.blocking, renaming("memory", statement.memory),
            tuple(renaming("memory", m) for m in statement.pieces), statement.tensor_allocs, statement.tensor_frees,
            renaming("stream", statement.root), renaming("stream", statement.member), statement.batch,
            tuple(sorted(renaming("stream", s) for s in statement.streams)),
            statement.launch_only, statement.launch_ordered, statement.spins)


_IDENTITY = _Renaming()


def _meaning(statement: Statement) -> tuple:
    return _renamed(statement, _IDENTITY)


def _declarations_kept(program: Program, renaming: _Renaming, users: dict[tuple[str, int], list[int]]) -> bool:
    """Whether every renamed stream, event and buffer keeps what its declaration says, and
    nothing whose meaning hangs on its position is renamed. A stream or buffer no statement
    names (a per-rank declaration the program never uses) changes no execution, so it need
    not follow its device."""
    fixed_streams = {m.pool for m in program.memories if m.pool is not None}
    for comm in program.comms:  # a communicator's members may only trade places among themselves
        if {renaming("stream", s) for s in comm.members} != set(comm.members):
            return False
        for rank, memory in enumerate(comm.in_flight):  # (and a rank's state goes with its member)
            if renaming("memory", memory) != comm.in_flight[comm.members.index(renaming("stream", comm.members[rank]))]:
                return False
    device = lambda index: renaming("device", index)  # noqa: E731
    for source, target in renaming.maps["device"].items():
        a, b = program.devices[source], program.devices[target]
        if (a.engines, a.launch, a.queues, a.runtime) != (b.engines, b.launch, b.queues, b.runtime):
            return False
    for a in program.streams:  # every stream: one left in place stays on its device
        if ("stream", a.index) not in users and a.index not in fixed_streams:
            continue
        b = program.streams[renaming("stream", a.index)]
        if a is not b and (a.index in fixed_streams or b.index in fixed_streams):
            return False
        if (device(a.device), a.priority, a.mode, a.queue, renaming("thread", a.context)) \
                != (b.device, b.priority, b.mode, b.queue, b.context):
            return False
    for a in program.memories:
        if ("memory", a.index) not in users and not a.owners and a.pool is None and a.comm is None:
            continue
        b = program.memories[renaming("memory", a.index)]
        if a is not b and (a.owners or b.owners or a.pool is not None or b.pool is not None):
            return False
        if (a.size, device(a.device), a.pinned) != (b.size, b.device, b.pinned):
            return False
    for source, target in renaming.maps["event"].items():
        if program.events[source].flag != program.events[target].flag:
            return False
    return True


def _movable(program: Program, statement: Statement) -> bool:
    """Whether a statement may trade places with its counterpart: anything but a member of a
    send/recv pair or of a rooted collective. Two members of one collective group (the k-th
    allreduce of two ranks) trade places within the group; which rank is which changes
    nothing a race depends on (rule 8 names no rank), but a root or a peer does."""
    if statement.group is None:
        return True
    return program.groups[statement.group].kind is GroupKind.COLLECTIVE and statement.root is None


def _references(statement: Statement) -> list[tuple[str, int]]:
    """Every (kind, index) of a resource the statement names."""
    found = [("device", statement.device), ("stream", statement.stream), ("event", statement.event),
             ("notify", statement.notify), ("memory", statement.memory), ("stream", statement.peer),
             ("stream", statement.root)]
    found += [("stream", stream) for stream in statement.streams]
    found += [("memory", access.memory) for access in statement.accesses]
    found += [("memory", memory) for memory in statement.pieces]
    kind = _target_kind(statement)
    if kind is not None:
        found.append((kind, statement.target))
    return [(kind, index) for kind, index in found if index is not None]


def _users(program: Program) -> dict[tuple[str, int], list[int]]:
    """The statements that name each resource: only they (and the two threads) can change
    under a renaming."""
    users: dict[tuple[str, int], list[int]] = {}
    for statement in program.statements:
        for reference in dict.fromkeys(_references(statement)):
            users.setdefault(reference, []).append(statement.index)
    return users


MAX_PAIRS = 8
"""Pairs of threads one symmetry may swap at once (`_transposition`): a rank of several
threads (a main and a hook thread, a loader and a trainer) swaps with another rank only
when all of its threads do."""
MAX_TRIES = 32
"""Swaps one `_transposition` tries, at most, looking for the threads that must go along."""
TRY_COST = 100
"""What one swap tried counts against MAX_CHECKS besides the statements it compared: 300
threads whose one statement each renames another's buffer made 1,000,000 comparisons out of
tens of thousands of small tries (4 s); counted so, they stop within MAX_CHECKS."""


def _swap(program: Program, pairs: list[tuple[int, int]], users: dict[tuple[str, int], list[int]]):
    """Whether swapping each pair of threads of `pairs` (statement k with statement k), with
    the renaming read off them, maps the program to itself: (the symmetry or None, how many
    statements were compared, and on failure the first thread left in place that names what
    the renaming moves, if any: swapping it too may be what is missing)."""
    statements = program.statements
    image: dict[int, int] = {}
    renaming = _Renaming()
    for first, second in pairs:
        one, other = program.threads[first].statements, program.threads[second].statements
        if len(one) != len(other) or program.threads[first].process != program.threads[second].process:
            return None, len(image), None
        renaming.bind("thread", first, second)
        renaming.bind("thread", second, first)
        image.update(zip(one, other))
        image.update(zip(other, one))
        for x, y in zip(one, other):
            if not (_movable(program, statements[x]) and _movable(program, statements[y])
                    and statements[x].group == statements[y].group):
                return None, len(image), None
            if not (_read(renaming, statements[x], statements[y]) and _read(renaming, statements[y], statements[x])):
                return None, len(image), None
    for source, target in list(renaming.maps["stream"].items()):
        if not renaming.bind("device", program.streams[source].device, program.streams[target].device):
            return None, len(image), None
    for source, target in list(renaming.maps["memory"].items()):
        if not renaming.bind("device", program.memories[source].device, program.memories[target].device):
            return None, len(image), None
    if not renaming.permutation():
        return None, len(image), None
    touched = set(image)
    for kind, mapping in renaming.maps.items():
        for source, target in mapping.items():
            if source != target:
                touched.update(users.get((kind, source), ()))
    outside = min((statements[i].thread for i in touched if i not in image), default=None)
    if not _declarations_kept(program, renaming, users):
        return None, len(image), outside
    for index in sorted(touched):
        if _renamed(statements[index], renaming) != _meaning(statements[image.get(index, index)]):
            return None, len(touched), outside
    threads = tuple(thread for pair in pairs for thread in pair)
    return Symmetry(threads, image), len(touched), None


def _transposition(program: Program, first: int, second: int, users: dict[tuple[str, int], list[int]],
                   shape: dict[int, tuple]) -> tuple[Symmetry | None, int]:
    """The symmetry swapping threads `first` and `second`, if the program has it, and how
    many statements were compared. Where a thread left in place names what the swap renames
    (a rank's other thread, on the rank's device), it is swapped too, with each thread of
    its shape in turn (`shape`: each thread's operations), up to MAX_PAIRS pairs and MAX_TRIES
    swaps tried."""
    compared = 0
    tries = [[(first, second)]]
    tried = 0
    while tries and tried < MAX_TRIES:
        pairs = tries.pop()
        tried += 1
        symmetry, count, outside = _swap(program, pairs, users)
        compared += count + TRY_COST
        if symmetry is not None:
            return symmetry, compared
        if outside is None or len(pairs) >= MAX_PAIRS:
            continue
        taken = {t for pair in pairs for t in pair}
        partners = [other for other in shape if other not in taken and other != outside
                    and shape[other] == shape[outside]]
        tries += [pairs + [(outside, other)] for other in reversed(partners)]
    return None, compared


def symmetries(program: Program) -> tuple[Symmetry, ...]:
    """Transpositions of threads that generate the thread symmetries found: threads of the
    same shape (length and operations) are tried against one member of each set of threads
    already joined, so n identical threads cost about n checks, not n * n; and a check
    compares the two threads and the statements that name a resource the renaming moves."""
    statements = program.statements
    shape = {thread.index: tuple(statements[i].op for i in thread.statements) for thread in program.threads}
    shapes: dict[tuple, list[int]] = {}
    for thread in program.threads:
        if thread.statements:
            shapes.setdefault(shape[thread.index], []).append(thread.index)
    if all(len(threads) < 2 for threads in shapes.values()):
        return ()
    users = _users(program)
    found: list[Symmetry] = []
    seen: set[frozenset] = set()
    checks = 0
    for threads in shapes.values():
        joined: list[int] = []  # one thread per set of threads already joined by symmetries
        for thread in threads:
            for member in joined:
                if checks > MAX_CHECKS:
                    return tuple(found)
                symmetry, compared = _transposition(program, member, thread, users, shape)
                checks += compared
                if symmetry is not None:
                    swapped = frozenset(frozenset(symmetry.threads[k:k + 2]) for k in range(0, len(symmetry.threads), 2))
                    if swapped not in seen:  # (a rank's other threads find the same swap again)
                        seen.add(swapped)
                        found.append(symmetry)
                    break
            else:
                joined.append(thread)
    return tuple(found)


@dataclass(frozen=True, slots=True)
class Orbits:
    """Statement pairs grouped by the symmetries: `representative[pair]` for every pair, and
    for each pair that is not its own representative, the symmetries (indices into
    `symmetries`) that carry the representative to it, in the order they apply."""

    symmetries: tuple[Symmetry, ...]
    representative: dict[tuple[int, int], tuple[int, int]]
    path: dict[tuple[int, int], tuple[int, ...]]
    complete: bool = True
    """False when the orbits were cut at a limit of pairs (`orbits`): some pairs were left out."""

    def members(self) -> dict[tuple[int, int], list[tuple[int, int]]]:
        """Per representative, the other pairs of its orbit."""
        grouped: dict[tuple[int, int], list[tuple[int, int]]] = {}
        for pair, representative in self.representative.items():
            if pair != representative:
                grouped.setdefault(representative, []).append(pair)
        return grouped

    def carry(self, statement: int, path: tuple[int, ...]) -> int:
        for k in path:
            statement = self.symmetries[k].image(statement)
        return statement


def carries_classes(program: Program, found: tuple[Symmetry, ...], shape) -> bool:
    """Whether each symmetry maps statements of one `shape` (a function of a statement) to
    statements of one shape: then the image of a class of pairs is a class, and what holds
    of every pair of a class (`answers.counts_only`) holds of every pair of its image."""
    ids: dict = {}
    of = [ids.setdefault(shape(statement), len(ids)) for statement in program.statements]
    sizes: dict[int, int] = {}
    for k in of:
        sizes[k] = sizes.get(k, 0) + 1
    for symmetry in found:
        images: dict[int, int] = {}
        moved: dict[int, int] = {}
        for source, target in symmetry.moved.items():
            if images.setdefault(of[source], of[target]) != of[target]:
                return False
            moved[of[source]] = moved.get(of[source], 0) + 1
        # A shape that a statement left in place also has maps to itself.
        if any(images[k] != k for k, count in moved.items() if count < sizes[k]):
            return False
    return True


def _image(symmetry: Symmetry, pair: tuple[int, int]) -> tuple[int, int]:
    a, b = symmetry.image(pair[0]), symmetry.image(pair[1])
    return (a, b) if a < b else (b, a)


def statement_orbits(found: tuple[Symmetry, ...], count: int) -> list[int]:
    """Per statement (of `count`): the smallest statement of its orbit under the symmetries.
    A statement's own questions (can it use freed memory?) have the answers of that one's.
    And the representative of a pair's orbit (its smallest pair) starts with the smallest
    statement of one of the two statements' orbits, so a pair whose smaller statement is not
    one is never a representative, and need not be listed at all (`Analysis.race_candidates`'
    `keep`)."""
    parent = list(range(count))

    def root(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for symmetry in found:
        for source, target in symmetry.moved.items():
            a, b = root(source), root(target)
            if a != b:
                parent[max(a, b)] = min(a, b)
    return [root(x) for x in range(count)]


def orbits(pairs: list[tuple[int, int]], found: tuple[Symmetry, ...], limit: int | None = None) -> Orbits:
    """The orbits of the statement pairs `pairs` (each (a, b) with a < b) under the group the
    symmetries generate: breadth first from each pair not reached yet (the smallest first),
    which becomes the orbit's representative. The images need not be among `pairs`: the
    listing leaves out pairs that cannot be representatives (`statement_orbits`), and an
    image races exactly when its representative does. Past `limit` pairs in all, no more
    images are followed, and `complete` says so."""
    touching: dict[int, list[int]] = {}  # statement -> the symmetries that move it
    for k, symmetry in enumerate(found):
        for statement in symmetry.moved:
            touching.setdefault(statement, []).append(k)
    representative: dict[tuple[int, int], tuple[int, int]] = {}
    path: dict[tuple[int, int], tuple[int, ...]] = {}
    complete = True
    for start in sorted(pairs):
        if start in representative:
            continue
        representative[start] = start
        path[start] = ()
        frontier = [start]
        for pair in frontier:
            if limit is not None and len(representative) > limit:
                complete = False
                break
            for k in dict.fromkeys(touching.get(pair[0], []) + touching.get(pair[1], [])):
                image = _image(found[k], pair)
                if image not in representative:
                    representative[image] = start
                    path[image] = path[pair] + (k,)
                    frontier.append(image)
    return Orbits(found, representative, path, complete)
