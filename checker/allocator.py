"""The caching allocator, simulated: which block of device memory each tensor lifetime gets.

Lowering writes a placeholder memory (`placeholder`) for every use of a tensor, and records
its lifetimes (`Slot`) and what happens to them (`TensorEvent`) thread by thread. `place`
then runs the allocator over those events, each thread in program order, as PyTorch's
caching allocator does per stream: an `alloc` takes the best-fitting block freed earlier
into its thread's pool on its stream, or a fresh one; a `free` hands the block back, unless
its reuse is deferred (`record_stream` on another stream, or a free by another thread).
Each run of segment bytes that no block boundary cuts is one `Memory`: tensors whose blocks
share bytes share those memories, so the checker sees the reuse and its races.

Sizes, pools, segments, splits and merges follow PyTorch's `c10/cuda/CUDACachingAllocator.cpp`:
a request is rounded up to a multiple of 512 bytes (`round_size`, `kMinBlockSize`); requests
of at most 1 MiB (`kSmallSize`) are served from the small pool, larger ones from the large pool
(`get_pool`), and a freed block of one pool never serves the other; a request no free block fits
gets a new segment (`get_allocation_size`: 2 MiB for the small pool, 20 MiB for a large request
under 10 MiB, else its size rounded up to 2 MiB); the block handed out is split when enough is
left over (`should_split`), and a freed block merges with its free neighbours
(`try_merge_blocks`), so one freed tensor's bytes can serve two later tensors, and two freed
neighbours one larger tensor.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from dataclasses import dataclass, field
from typing import NamedTuple

from checker.codes import Code
from checker.diagnostics import Diagnostic, error, warning
from checker.ir import Memory, Span


@dataclass(frozen=True, slots=True)
class Tensor:
    """One declared tensor, or one element of a tensor array."""

    name: str
    decl: str
    size: int
    device: int
    span: Span


@dataclass(slots=True)
class Slot:
    """One lifetime of a tensor in the allocator simulation: an `alloc` (kind "alloc"), or
    the uses of a tensor in a thread that has not allocated it (kind "shared"), which must
    resolve to the tensor's single `alloc` in the whole program."""

    kind: str
    tensor: int
    thread: int
    span: Span
    stream: int | None = None
    block: int | None = None
    """The block the allocator handed out for it (an index in allocation order)."""
    statement: int | None = None
    """An "alloc" slot: the index of its `alloc` statement."""
    target: "Slot | None" = None
    marked: bool = False
    """Reuse deferred (`record_stream` on another stream, or freed by another thread): the
    block is never handed out again."""
    freed: bool = False

    @property
    def owner(self) -> "Slot":
        """The "alloc" slot whose lifetime this is (a shared use stands for its target)."""
        return self.target or self


class TensorEvent(NamedTuple):
    """What a statement does to a slot: "alloc", "free" or "record" (`record_stream` on
    `stream`), on `thread`."""

    kind: str
    thread: int
    slot: int
    span: Span | None = None
    stream: int | None = None


def placeholder(slot: int) -> int:
    """The memory index that stands for a tensor slot until the allocator places it."""
    return -1 - slot


def slot_of(memory: int) -> int:
    """The slot a placeholder memory index stands for."""
    return -1 - memory


MIN_BLOCK = 512
"""PyTorch's `kMinBlockSize`: every request is rounded up to a multiple of it."""
SMALL_SIZE = 1 << 20
"""PyTorch's `kSmallSize`: the largest request the small pool serves."""


def rounded(size: int) -> int:
    """The block size PyTorch's `round_size` gives a request of `size` bytes."""
    return max(MIN_BLOCK, -(-size // MIN_BLOCK) * MIN_BLOCK)


def pool_of(slot: Slot, tensors: list[Tensor]) -> tuple[int, int | None, bool]:
    """The pool an "alloc" slot draws from: its thread's (the simulation keeps one allocator
    per thread), its stream's, small or large by the rounded request (`get_pool`)."""
    return slot.thread, slot.stream, rounded(tensors[slot.tensor].size) <= SMALL_SIZE


SMALL_SEGMENT = 2 << 20
"""PyTorch's `kSmallBuffer`: every small-pool segment is 2 MiB."""
LARGE_SEGMENT = 20 << 20
"""PyTorch's `kLargeBuffer`: the segment of a large request under `kMinLargeAlloc` (10 MiB)."""
MIN_LARGE_ALLOC = 10 << 20
ROUND_LARGE = 2 << 20
"""PyTorch's `kRoundLarge`: a larger request gets a segment of its size rounded up to 2 MiB."""


def segment_size(size: int) -> int:
    """The segment PyTorch's `get_allocation_size` asks the driver for, for a rounded request
    that no free block fits."""
    if size <= SMALL_SIZE:
        return SMALL_SEGMENT
    if size < MIN_LARGE_ALLOC:
        return LARGE_SEGMENT
    return -(-size // ROUND_LARGE) * ROUND_LARGE


def splits(small: bool, remaining: int) -> bool:
    """PyTorch's `should_split`: a small-pool block is split when at least 512 bytes would be
    left over, a large-pool one when more than 1 MiB would."""
    return remaining >= MIN_BLOCK if small else remaining > SMALL_SIZE


@dataclass(slots=True)
class _Segment:
    """One `cudaMalloc` of the allocator: the blocks it is cut into, by offset."""

    size: int
    device: int
    stream: int | None
    key: tuple
    """The pool its free blocks go to."""
    blocks: list[list] = field(default_factory=list)
    """[offset, size, free] per block, ascending offsets, covering the segment."""


class _Pool:
    """The free blocks of one thread's pool on one stream, small or large: best fit, the
    smallest block that holds the request, the lowest address among equal sizes (PyTorch's
    `BlockComparator`: stream, size, address; segments count in the order they were made)."""

    def __init__(self) -> None:
        self.free: list[tuple[int, int, int]] = []
        """(size, segment, offset) of every free block, ascending."""

    def take(self, size: int) -> tuple[int, int, int] | None:
        at = bisect_left(self.free, (size, -1, -1))
        return self.free.pop(at) if at < len(self.free) else None

    def give(self, block: tuple[int, int, int]) -> None:
        insort(self.free, block)

    def remove(self, block: tuple[int, int, int]) -> None:
        del self.free[bisect_left(self.free, block)]


class Piece(NamedTuple):
    """A run of bytes of a placed tensor's block that no other block boundary cuts: one
    memory. `start` and `end` count from the start of the block (the tensor's byte 0)."""

    memory: int
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class Placement:
    """What the simulation gave: the pieces of the segments that tensors got, as memories
    (indices from `base`), the pieces of each slot's block, and its warnings; or the errors
    that stopped it (a use that stands for no one `alloc`), with nothing placed."""

    memories: tuple[Memory, ...] = ()
    pieces_of_slot: tuple[tuple[Piece, ...] | None, ...] = ()
    warnings: tuple[Diagnostic, ...] = ()
    errors: tuple[Diagnostic, ...] = ()


class _Allocator:
    """The segments and free blocks of every pool, as PyTorch's `DeviceCachingAllocator`
    keeps them: an allocation takes the best-fitting free block of its pool (or a new
    segment), splits off what it does not need (`should_split`), and a free merges the block
    with free neighbours of its segment (`free_block`, `try_merge_blocks`)."""

    def __init__(self) -> None:
        self.segments: list[_Segment] = []
        self.pools: dict[tuple, _Pool] = {}

    def allocate(self, key: tuple, size: int, device: int, stream: int | None) -> tuple[int, int, int]:
        """(segment, offset, size) of the block handed out for a rounded request."""
        pool = self.pools.setdefault(key, _Pool())
        found = pool.take(size)
        if found is None:
            segment = len(self.segments)
            self.segments.append(_Segment(segment_size(size), device, stream, key))
            self.segments[segment].blocks.append([0, self.segments[segment].size, False])
            block_size, offset = self.segments[segment].size, 0
        else:
            block_size, segment, offset = found
        blocks = self.segments[segment].blocks
        at = self._index(blocks, offset)
        blocks[at][2] = False
        if splits(key[2], block_size - size):
            blocks[at][1] = size
            blocks.insert(at + 1, [offset + size, block_size - size, True])
            pool.give((block_size - size, segment, offset + size))
            block_size = size
        return segment, offset, block_size

    def release(self, segment: int, offset: int) -> None:
        """A block back in its pool, merged with its free neighbours."""
        owner = self.segments[segment]
        pool = self.pools[owner.key]
        blocks = owner.blocks
        at = self._index(blocks, offset)
        blocks[at][2] = True
        for neighbour in (at + 1, at - 1):  # the next one first, so `at` stays put
            if 0 <= neighbour < len(blocks) and blocks[neighbour][2]:
                first, second = sorted((at, neighbour))
                for k in (first, second):
                    if k != at:
                        pool.remove((blocks[k][1], segment, blocks[k][0]))
                blocks[first][1] += blocks[second][1]
                del blocks[second]
                at = first
        pool.give((blocks[at][1], segment, blocks[at][0]))

    @staticmethod
    def _index(blocks: list[list], offset: int) -> int:
        return bisect_left(blocks, offset, key=lambda block: block[0])


def place(slots: list[Slot], events: list[TensorEvent], tensors: list[Tensor], stream_names: list[str],
          thread_names: list[str], base: int, processes: frozenset[int] = frozenset(),
          released: dict[int, int] | None = None) -> Placement:
    """Simulate the caching allocator, each thread in program order. `slots` are updated in
    place (targets, blocks, marks). `processes`: the threads declared `process`, each with
    an allocator of its own. `released`: free event -> the alloc event at which the block that
    free hands back, recorded on other streams, returns to the pool (their work done then),
    instead of never."""
    released = released or {}
    pending: dict[int, list[Slot]] = {}  # alloc event -> recorded blocks back in the pool there
    allocs: dict[int, list[Slot]] = {}
    for slot in slots:
        if slot.kind == "alloc":
            allocs.setdefault(slot.tensor, []).append(slot)
    errors = []
    for slot in slots:
        if slot.kind == "shared":
            problem = _shared_target(slot, allocs.get(slot.tensor, []), tensors, thread_names)
            if isinstance(problem, Slot):
                slot.target = problem
            else:
                errors.append(problem)
    if errors:
        return Placement(errors=tuple(errors))
    owner = lambda index: slots[index].owner  # noqa: E731
    warnings = []
    # Deferred reuse, whichever thread asks for it (events are in each thread's program order).
    freed_here: set[tuple[int, int]] = set()  # (thread, id of the alloc's slot) freed so far
    for event in events:
        if event.kind == "record":
            slot = owner(event.slot)
            if (event.thread, id(slot)) in freed_here:
                warnings.append(warning(
                    Code.SP055, f"`record_stream` of `{tensors[slot.tensor].name}` after its `free` does nothing",
                    event.span, "after the free",
                    help="the block went back to the pool at the free: record the tensor on the other "
                         "stream before freeing it"))
            elif event.stream != slot.stream:
                slot.marked = True
            else:
                warnings.append(warning(
                    Code.SP055, f"`record_stream` of `{tensors[slot.tensor].name}` on `{stream_names[slot.stream]}`, "
                    "its own allocation stream, does nothing", event.span, "its allocation stream",
                    help="record the tensor on each other stream that uses it: the allocator already "
                         "orders its own stream"))
        elif event.kind == "free":
            freed_here.add((event.thread, id(owner(event.slot))))
            if owner(event.slot).thread != event.thread:
                owner(event.slot).marked = True
    allocator = _Allocator()
    given: list[tuple[int, int, int, int]] = []  # (segment, offset, size, slot) in allocation order
    freed_into: dict[int, list[tuple[int, Span, Slot]]] = {}  # stream -> [(thread, free, slot)]
    handed_back: list[tuple[int, Span, Slot]] = []  # frees by a thread that did not allocate
    for i in sorted(range(len(events)), key=lambda i: (events[i].thread, i)):
        event = events[i]
        if event.kind == "alloc":
            for back in pending.pop(i, ()):
                allocator.release(*given[back.block][:2])
            slot = slots[event.slot]
            tensor = tensors[slot.tensor]
            segment, offset, block_size = allocator.allocate(
                pool_of(slot, tensors), rounded(tensor.size), tensor.device, slot.stream)
            slot.block = len(given)
            given.append((segment, offset, block_size, event.slot))
        elif event.kind == "free":
            slot = owner(event.slot)
            if slot.block is None and slot.thread == event.thread and not slot.freed:
                errors.append(error(Code.SP027, f"tensor `{tensors[slot.tensor].name}` is freed before it is "
                                                "allocated", event.span, "not allocated yet",
                                    help="free it after its `alloc`"))
                continue
            if slot.marked and not slot.freed and event.thread != slot.thread and slot.stream is not None:
                handed_back.append((event.thread, event.span, slot))
            if i in released and slot.marked and not slot.freed and slot.block is not None:
                pending.setdefault(released[i], []).append(slot)
                slot.freed = True
                continue
            if slot.freed or slot.block is None or slot.marked:
                if slot.marked and not slot.freed and slot.block is not None and event.thread == slot.thread:
                    # (held until the work it is recorded on is done: then any thread may get it)
                    freed_into.setdefault(slot.stream, []).append((slot.thread, event.span, slot))
                slot.freed = True
                continue
            slot.freed = True
            allocator.release(*given[slot.block][:2])
            freed_into.setdefault(slot.stream, []).append((slot.thread, event.span, slot))
    if errors:
        return Placement(errors=tuple(errors))
    warnings += _shared_pool_warnings(slots, freed_into, tensors, stream_names, thread_names, processes)
    warnings += _handed_back_warnings(slots, handed_back, tensors, stream_names, thread_names, processes)
    memories, pieces_of_block = _pieces(given, allocator.segments, slots, tensors, base)
    pieces_of_slot = tuple(None if owner(k).block is None else pieces_of_block[owner(k).block]
                           for k in range(len(slots)))
    return Placement(memories, pieces_of_slot, tuple(warnings))


def _pieces(given: list[tuple[int, int, int, int]], segments: list[_Segment], slots: list[Slot],
            tensors: list[Tensor], base: int) -> tuple[tuple[Memory, ...], list[tuple[Piece, ...]]]:
    """Cut each segment at every boundary of a block handed out from it; each run of bytes
    some block covered is a memory, named after the first tensor that got it (`act`; a part
    of its block as `act[1KiB:2KiB]`; `act#2` for a second block of `act`), listing every
    tensor whose block covered it. Bytes no tensor ever got are no memory."""
    cuts: dict[int, set[int]] = {}
    for segment, offset, size, _ in given:
        cuts.setdefault(segment, set()).update((offset, offset + size))
    bounds = {segment: sorted(points) for segment, points in cuts.items()}
    first: dict[tuple[int, int], int] = {}  # (segment, piece start) -> memory index
    found: list[list] = []  # [name, decl, size, device, span, owners, pool, tensor names]
    named: dict[str, int] = {}
    pieces_of_block = []
    for segment, offset, size, slot_index in given:
        tensor = tensors[slots[slot_index].tensor]
        points = bounds[segment]
        at = bisect_left(points, offset)
        pieces = []
        while points[at] < offset + size:
            start, end = points[at], points[at + 1]
            memory = first.get((segment, start))
            if memory is None:
                name = tensor.name
                if (start, end) != (offset, offset + size):
                    name += f"[{_bytes(start - offset)}:{_bytes(end - offset)}]"
                named[name] = named.get(name, 0) + 1
                memory = first[(segment, start)] = base + len(found)
                found.append([name if named[name] == 1 else f"{name}#{named[name]}", tensor.decl, end - start,
                              tensor.device, tensor.span, [], segments[segment].stream, []])
            owners, names = found[memory - base][5], found[memory - base][7]
            if tensor.decl not in owners:
                owners.append(tensor.decl)
            if tensor.name not in names:
                names.append(tensor.name)
            pieces.append(Piece(memory, start - offset, end - offset))
            at += 1
        pieces_of_block.append(tuple(pieces))
    memories = tuple(Memory(base + k, name, decl, size, device, False, span, tuple(owners), pool, tuple(names))
                     for k, (name, decl, size, device, span, owners, pool, names) in enumerate(found))
    return memories, pieces_of_block


def _bytes(count: int) -> str:
    """A byte count as a spec writes it: in the largest unit that divides it."""
    for unit, name in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if count and count % unit == 0:
            return f"{count // unit}{name}"
    return str(count)


def _shared_target(slot: Slot, allocs: list[Slot], tensors: list[Tensor], thread_names: list[str]) -> Slot | Diagnostic:
    """The one `alloc` a use outside its allocating thread stands for, or why there is none."""
    tensor = tensors[slot.tensor]
    here = thread_names[slot.thread]
    if len(allocs) == 1:
        return allocs[0]
    if not allocs:
        return error(Code.SP027, f"tensor `{tensor.name}` is used but never allocated", slot.span,
                     "not allocated", help=f"allocate it first: `STREAM: alloc {tensor.name}`")
    threads = list(dict.fromkeys(thread_names[a.thread] for a in allocs))
    if len(threads) == 1:
        return error(Code.SP027, f"tensor `{tensor.name}` is used before any `alloc` of it in thread `{here}`",
                     slot.span, "not allocated on this thread yet",
                     help=f"it is allocated {len(allocs)} times in thread `{threads[0]}`, so which "
                          "allocation this is would be ambiguous: allocate it on this thread first, "
                          "or only once in the whole spec")
    listed = ", ".join(f"`{t}`" for t in threads[:-1]) + f" and `{threads[-1]}`"
    own = " before its own `alloc`" if here in threads else ""
    return error(Code.SP028, f"tensor `{tensor.name}` is allocated in threads {listed} and used in "
                             f"thread `{here}`{own}",
                 slot.span, "which allocation is this?",
                 help="the block it would get depends on how the threads interleave: allocate it "
                      "once in the whole spec, or on the thread that uses it")


def _shared_pool_warnings(slots: list[Slot], freed_into: dict[int, list[tuple[int, Span, Slot]]],
                          tensors: list[Tensor], stream_names: list[str], thread_names: list[str],
                          processes: frozenset[int] = frozenset()) -> list[Diagnostic]:
    """SP056: PyTorch's caching allocator is one per process, so an `alloc` on a stream may
    take a block that another thread freed into that stream's pool, depending on which ran
    first. The simulation keeps a pool per thread and stream (a fixed block per tensor),
    so that reuse, and the races it brings, go unchecked: say so at the alloc. A thread declared
    `process` shares no allocator with any other thread."""
    found = []
    warned: set[int] = set()
    # Per stream, the first free into it, and the first by another thread than that one's.
    firsts: dict[int, list[tuple[int, Span, Slot] | None]] = {}
    for stream, frees in freed_into.items():
        frees = [f for f in frees if f[0] not in processes]  # (a process's pool is its own)
        if frees:
            firsts[stream] = [frees[0], next((f for f in frees if f[0] != frees[0][0]), None)]
    for slot in slots:
        if slot.kind != "alloc" or slot.stream is None or slot.thread in warned or slot.thread in processes:
            continue
        other = next((f for f in firsts.get(slot.stream, ()) if f is not None and f[0] != slot.thread), None)
        if other is None:
            continue
        warned.add(slot.thread)
        thread, span, freed = other
        found.append(warning(
            Code.SP056, f"thread `{thread_names[slot.thread]}` allocates `{tensors[slot.tensor].name}` "
            f"from the pool of `{stream_names[slot.stream]}`, into which thread `{thread_names[thread]}` frees "
            f"`{tensors[freed.tensor].name}`", slot.span, "may reuse that block",
            secondary=((span, "freed here"),),
            help="the caching allocator is shared by all threads, but streamproof hands out blocks per "
                 "thread, so a reuse across threads is not checked: allocate and free these tensors on "
                 "one thread, or give each thread its own stream to allocate on"))
    return found


def _handed_back_warnings(slots: list[Slot], handed_back: list[tuple[int, Span, Slot]], tensors: list[Tensor],
                          stream_names: list[str], thread_names: list[str],
                          processes: frozenset[int] = frozenset()) -> list[Diagnostic]:
    """SP056 at a `free` by a thread that did not allocate the tensor, where some `alloc`
    draws from the pool it goes back to: PyTorch hands the block to that `alloc` when the free
    came first, but the simulation never hands such a block on (which allocation gets it
    depends on how the threads interleave), so that reuse and its races go unchecked."""
    found = []
    warned: set[int] = set()
    for thread, span, slot in handed_back:
        if slot.stream in warned or thread in processes or slot.thread in processes:
            continue
        taker = next((other for other in slots if other.kind == "alloc" and other.stream == slot.stream
                      and other is not slot and other.thread not in processes), None)
        if taker is None:
            continue
        warned.add(slot.stream)
        found.append(warning(
            Code.SP056, f"thread `{thread_names[thread]}` frees `{tensors[slot.tensor].name}`, which thread "
            f"`{thread_names[slot.thread]}` allocated, back into the pool of `{stream_names[slot.stream]}`, "
            f"from which `{tensors[taker.tensor].name}` is allocated", span, "freed by another thread",
            secondary=((taker.span, "may reuse that block"),),
            help="the caching allocator hands the block to the next allocation on that stream, whichever "
                 "thread makes it, but streamproof never hands on a block freed by another thread, so that "
                 "reuse is not checked: free each tensor on the thread that allocated it"))
    return found

