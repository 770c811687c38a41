"""The caching allocator, simulated: which block of device memory each tensor lifetime gets.

Lowering writes a placeholder memory (`placeholder`) for every use of a tensor, and records
its lifetimes (`Slot`) and what happens to them (`TensorEvent`) thread by thread. `place`
then runs the allocator over those events, each thread in program order, as PyTorch's
caching allocator does per stream: an `alloc` takes the best-fitting block freed earlier
into its thread's pool on its stream, or a fresh one; a `free` hands the block back, unless
its reuse is deferred (`record_stream` on another stream, or a free by another thread).
Tensors that share a block share a `Memory`, so the checker sees the reuse and its races.

Sizes and pools follow PyTorch's `c10/cuda/CUDACachingAllocator.cpp`: a request is rounded up
to a multiple of 512 bytes (`round_size`, `kMinBlockSize`), and requests of at most 1 MiB
(`kSmallSize`) are served from the small pool, larger ones from the large pool (`get_pool`):
a freed block of one pool never serves the other. Blocks are not split or merged.
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
    target: "Slot | None" = None
    marked: bool = False
    """Reuse deferred (`record_stream` on another stream, or freed by another thread): the
    block is never handed out again."""
    freed: bool = False


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


@dataclass(slots=True)
class _Block:
    size: int
    device: int
    name: str
    buffer: str
    span: Span
    owners: list[str] = field(default_factory=list)
    pool: int | None = None


class _Pool:
    """The free blocks of one thread's pool on one stream: best fit, the smallest block that
    holds the tensor, the one freed last among equal sizes (as the allocator simulation has
    always chosen), found by bisection instead of a scan (100,000 tensors took minutes)."""

    def __init__(self) -> None:
        self.sizes: list[int] = []
        """The sizes of the free blocks, ascending, each once."""
        self.freed: dict[int, list[int]] = {}
        """Size -> the free blocks of that size, in the order they were freed."""

    def take(self, size: int) -> int | None:
        """The block to hand out for a tensor of `size` bytes (None: a fresh one)."""
        at = bisect_left(self.sizes, size)
        if at == len(self.sizes):
            return None
        fitting = self.freed[self.sizes[at]]
        block = fitting.pop()
        if not fitting:
            del self.freed[self.sizes[at]]
            del self.sizes[at]
        return block

    def give(self, block: int, size: int) -> None:
        if size not in self.freed:
            insort(self.sizes, size)
            self.freed[size] = []
        self.freed[size].append(block)


@dataclass(frozen=True, slots=True)
class Placement:
    """What the simulation gave: the blocks as memories (indices from `base`), the memory of
    each slot, and its warnings; or the errors that stopped it (a use that stands for no one
    `alloc`), with nothing placed."""

    memories: tuple[Memory, ...] = ()
    memory_of_slot: tuple[int | None, ...] = ()
    warnings: tuple[Diagnostic, ...] = ()
    errors: tuple[Diagnostic, ...] = ()


def place(slots: list[Slot], events: list[TensorEvent], tensors: list[Tensor], stream_names: list[str],
          thread_names: list[str], base: int, processes: frozenset[int] = frozenset()) -> Placement:
    """Simulate the caching allocator, each thread in program order. `slots` are updated in
    place (targets, blocks, marks). `processes`: the threads declared `process`, each with
    an allocator of its own."""
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
    owner = lambda index: slots[index].target or slots[index]  # noqa: E731
    warnings = []
    # Deferred reuse, whichever thread asks for it.
    for event in events:
        if event.kind == "record":
            slot = owner(event.slot)
            if event.stream != slot.stream:
                slot.marked = True
            else:
                warnings.append(warning(
                    Code.SP055, f"`record_stream` of `{tensors[slot.tensor].name}` on `{stream_names[slot.stream]}`, "
                    "its own allocation stream, does nothing", event.span, "its allocation stream",
                    help="record the tensor on each other stream that uses it: the allocator already "
                         "orders its own stream"))
        elif event.kind == "free" and owner(event.slot).thread != event.thread:
            owner(event.slot).marked = True
    blocks: list[_Block] = []
    pools: dict[tuple[int, int | None, bool], _Pool] = {}  # (thread, stream, small) -> its free blocks
    fresh: dict[int, int] = {}
    freed_into: dict[int, list[tuple[int, Span, Slot]]] = {}  # stream -> [(thread, free, slot)]
    for i in sorted(range(len(events)), key=lambda i: (events[i].thread, i)):
        event = events[i]
        if event.kind == "alloc":
            slot = slots[event.slot]
            tensor = tensors[slot.tensor]
            size = rounded(tensor.size)
            reused = pools.setdefault((slot.thread, slot.stream, size <= SMALL_SIZE), _Pool()).take(size)
            if reused is not None:
                slot.block = reused
            else:
                fresh[slot.tensor] = fresh.get(slot.tensor, 0) + 1
                n = fresh[slot.tensor]
                slot.block = len(blocks)
                blocks.append(_Block(size, tensor.device, tensor.name if n == 1 else f"{tensor.name}#{n}",
                                     tensor.decl, tensor.span, pool=slot.stream))
            if tensor.decl not in blocks[slot.block].owners:
                blocks[slot.block].owners.append(tensor.decl)
        elif event.kind == "free":
            slot = owner(event.slot)
            if slot.freed or slot.block is None or slot.marked:
                slot.freed = True
                continue
            slot.freed = True
            size = blocks[slot.block].size
            pools.setdefault((slot.thread, slot.stream, size <= SMALL_SIZE), _Pool()).give(slot.block, size)
            freed_into.setdefault(slot.stream, []).append((slot.thread, event.span, slot))
    warnings += _shared_pool_warnings(slots, freed_into, tensors, stream_names, thread_names, processes)
    memories = tuple(Memory(base + k, b.name, b.buffer, b.size, b.device, False, b.span, tuple(b.owners), b.pool)
                     for k, b in enumerate(blocks))
    memory_of_slot = tuple(None if owner(k).block is None else base + owner(k).block for k in range(len(slots)))
    return Placement(memories, memory_of_slot, tuple(warnings))


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
