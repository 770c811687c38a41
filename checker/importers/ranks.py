"""Several ranks' PyTorch profiler traces -> one `.sched` spec in which their collectives meet.

Each trace is one rank of a distributed run (its `distributedInfo.rank`; traces without one
take the lowest numbers left, in the order given) and is imported as on its own (`kineto.py`),
every name it declares prefixed `rN_`. The communication kernels become collectives: PyTorch's
`record_param_comms` writes, on the operator and on the NCCL kernel it launches, the
collective's kind, its process group's name and ranks, its sequence number in the group
(`Seq`) and, for a rooted one, the root's rank in the group (`Rank`). A process group whose
every rank is imported, and which each rank ran on one stream, becomes a `comm` of those
streams; its collectives are matched across ranks by sequence number where every one has one
(those outside the window every rank profiled stay kernels), else the k-th of each rank with
the k-th of the others, as NCCL matches them.

A collective's measured time includes its wait for the last rank to arrive, which the spec's
group start already models: every member takes the shortest time measured in its group (the
last rank to arrive waited least).

Sends and recvs name their peer (`Dst Rank`, `Src Rank`, or `Rank` in the group): each pair
of ranks that talks in a process group becomes a comm of its two streams (PyTorch gives each
pair a communicator and a stream of its own), the k-th send from one meeting the k-th recv on
the other from it.

Batched sends and recvs (`batch_isend_irecv`) run as one kernel that PyTorch launches after
their `record_param_comms` have closed, so the kernel carries none of what they say: it is
read as the batch of the sends and recvs its thread recorded since its last launch, and becomes
a `group` of them on a comm of the process group's streams. Gather and scatter (grouped sends
to and from the root in NCCL) are written as the collective of the same shape: a `reduce` (every
rank reads its input, the root writes) and a `broadcast` (the root reads, every rank writes).

What cannot be matched stays a kernel, with a note saying why: peerless sends and recvs, a
group with a rank not imported, run on two streams by one rank, or (without sequence numbers)
whose ranks ran different numbers of collectives, and a pair whose sends and recvs do not
number the same.
"""

from __future__ import annotations

import bisect
import json
import math
from collections import defaultdict
from dataclasses import dataclass, replace

from checker.importers.execution_trace import ExecutionTrace, TraceError
from checker.importers.kineto import (
    COMM_OPERATOR, Batch, Collective, CpuOp, GpuOp, Imported, _Builder, _Trace, check_trace, whole,
)
from checker.spec_text import SpecText, safe_name, title_text

KINDS = {"allreduce": "allreduce", "barrier": "allreduce", "allgather": "allgather",
         "reducescatter": "reducescatter", "alltoall": "alltoall", "alltoallv": "alltoall",
         "broadcast": "broadcast", "reduce": "reduce", "gather": "reduce", "scatter": "broadcast"}
"""`Collective name` as PyTorch writes it (normalised by `collective_kind`) -> the statement.
NCCL runs a barrier as an allreduce of one element. PyTorch runs a gather as sends to the root
inside one NCCL group (the root receives from every rank), a scatter as the root's sends: the
statement of the same memory, a `reduce` (every rank reads its input; the root writes its
output) and a `broadcast` (the root reads its input; every rank writes its output). Their ranks
start together in the spec, where a rank other than the root waits only for the root."""
RENAMED = frozenset({"gather", "scatter"})
ROOTED = frozenset({"broadcast", "reduce"})
POINT_TO_POINT = frozenset({"send", "recv"})


def collective_kind(name) -> str | None:
    """`allreduce`, `_allgather_base`, `all_gather_into_tensor_coalesced`, `reduce_scatter_tensor`,
    `all_to_allv`, ... -> the statement's collective, None for one the spec cannot match."""
    key = str(name).lower().strip().lstrip("_")
    for part in ("_coalesced", "_into_tensor", "_tensor", "_base", "_single"):
        key = key.replace(part, "")
    return KINDS.get(key.replace("_", ""))


def _unique(text: str, used: set[str]) -> str:
    """A comm name for `text` that no other comm of the spec has (and now taken)."""
    name = safe_name(text, "pg")
    while name in used:
        name += "_"
    used.add(name)
    return name


def _peer(meta: dict) -> tuple[str, int] | None:
    """A send's or recv's kind and its peer's global rank (`Dst Rank` of a send, `Src Rank` of a
    recv, else `Rank`, the peer's rank in the group, read through `Process Group Ranks`); None
    for anything else, or a peer not written."""
    kind = str(meta.get("Collective name", "")).lower().strip().lstrip("_")
    if kind not in POINT_TO_POINT:
        return None
    peer = whole(meta.get("Dst Rank" if kind == "send" else "Src Rank"))
    if peer is None:
        in_group, members = whole(meta.get("Rank")), group_ranks(meta)
        peer = members[in_group] if members is not None and in_group is not None and in_group < len(members) else None
    return None if peer is None else (kind, peer)


def group_ranks(meta: dict) -> tuple[int, ...] | None:
    """`Process Group Ranks` (a list, or its text `"[0, 1]"`), None when absent or unreadable."""
    value = meta.get("Process Group Ranks")
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    if not isinstance(value, list) or not value:
        return None
    if not all(isinstance(r, int) and not isinstance(r, bool) and r >= 0 for r in value):
        return None
    return tuple(value) if len(set(value)) == len(value) else None


@dataclass(frozen=True)
class Rank:
    """One rank's trace, read."""

    rank: int
    source: str
    trace: _Trace

    @property
    def prefix(self) -> str:
        return f"r{self.rank}_"


@dataclass(frozen=True)
class _Run:
    """One rank's communication kernel, as the matching reads it."""

    op: GpuOp
    kind: str
    seq: int | None
    other: int | None
    """A rooted collective's root (its rank in the group, `Rank`, when written), or a send's
    or recv's peer (its rank)."""
    called: str | None = None
    """PyTorch's name where the statement is another collective (`RENAMED`)."""


@dataclass(frozen=True)
class _Batched:
    """One send or recv of a batch: its record, read off the host thread."""

    kind: str
    peer: int
    """The peer's rank."""
    group: str
    seq: int | None
    operator: CpuOp | None
    """Its `record_param_comms` (its tensors, with an Execution Trace)."""


def _batches(trace: _Trace, launchers: dict[int, CpuOp]) -> tuple[list[tuple[GpuOp, list[_Batched]]], list[str]]:
    """Each send-and-recv kernel launched outside any `record_param_comms`, with the sends and
    recvs it ran (`batch_isend_irecv` records each call, then launches one kernel for all of
    them when the group ends): the records of its launching thread that launched nothing
    themselves, made after the thread's launch before this one, of the process group and
    sequence number of the last of them (PyTorch numbers a batch once); and notes on what
    could not be read."""
    records = {(thread, op.start, op.end): op for thread, ops in trace.ops.items() for op in ops
               if op.name == COMM_OPERATOR}
    launches: dict[tuple, list[int]] = {}
    """Per thread, the starts of its calls that launched GPU work (or are named as launches)."""
    for thread, calls in trace.calls.items():
        launches[thread] = [call.start for call in calls
                            if (call.correlation is not None and call.correlation in trace.gpu_by_corr)
                            or "launch" in call.name.lower()]
    kernels: list[tuple[int, tuple, GpuOp]] = []
    for op in trace.gpu:
        call = trace.call_by_corr.get(op.correlation) if op.correlation is not None else None
        launcher = launchers.get(op.correlation) if call is not None else None
        if call is not None and op.kind == "kernel" and op.comm is None and (
                launcher is None or launcher.name != COMM_OPERATOR) \
                and "sendrecv" in op.name.lower().replace("_", ""):
            kernels.append((call.start, call.thread, op))
    pending: dict[tuple, list[tuple[int, int, _Batched | None]]] = defaultdict(list)
    """Per thread, its send and recv records that launched nothing: (start, end, the call, or
    None where the trace does not name its peer or its process group)."""
    for thread, ops in trace.comm_ops.items():
        starts = launches.get(thread, [])
        for start, end, meta in sorted(ops, key=lambda item: item[1]):
            if str(meta.get("Collective name", "")).lower().strip().lstrip("_") not in POINT_TO_POINT:
                continue
            i = bisect.bisect_left(starts, start)
            if i < len(starts) and starts[i] <= end:
                continue  # (it launched its own kernel: an unbatched send or recv)
            peer = _peer(meta)
            group = meta.get("Process Group Name", meta.get("Process Group Description"))
            call = None if peer is None or group is None else _Batched(
                peer[0], peer[1], str(group), whole(meta.get("Seq")), records.get((thread, start, end)))
            pending[thread].append((start, end, call))
    out: list[tuple[GpuOp, list[_Batched]]] = []
    unread = stale = 0
    for at, thread, op in sorted(kernels, key=lambda item: item[0]):
        starts = launches.get(thread, [])
        i = bisect.bisect_left(starts, at) - 1
        since = starts[i] if i >= 0 else None
        waiting = pending.get(thread, [])
        taken = [item for item in waiting if item[1] <= at and (since is None or item[0] > since)]
        stale += sum(1 for item in waiting if item[1] <= at) - len(taken)
        pending[thread] = [item for item in waiting if item[1] > at]
        if not taken:
            continue
        if any(call is None for _, _, call in taken):
            unread += 1
            continue
        last = taken[-1][2]
        chosen = [call for _, _, call in taken if (call.group, call.seq) == (last.group, last.seq)]
        stale += len(taken) - len(chosen)
        out.append((op, chosen))
    notes = []
    if unread:
        notes.append(f"{unread:,} batched send-and-recv kernel(s) whose calls' records do not all name their peer "
                     "and process group stay kernels")
    if stale:
        notes.append(f"{stale:,} send or recv record(s) that launched nothing belong to no batch (made before their "
                     "thread's previous launch, or of another process group or sequence number than the batch "
                     "launched next) and are left out")
    return out, notes


def _launchers(trace: _Trace) -> dict[int, CpuOp]:
    """Correlation id -> the operator that made the call: the innermost one running on the
    launching thread then, or the one around it where that is ProcessGroupNCCL's own
    `nccl:all_reduce`-style record (a sweep over each thread's operators and calls, both in
    time order)."""
    out: dict[int, CpuOp] = {}
    for thread, calls in trace.calls.items():
        ops = trace.ops.get(thread, [])
        stack: list[CpuOp] = []
        k = 0
        for call in calls:  # (sorted by start)
            while k < len(ops) and ops[k].start <= call.start:
                while stack and stack[-1].end < ops[k].start:
                    stack.pop()
                stack.append(ops[k])
                k += 1
            while stack and stack[-1].end < call.start:
                stack.pop()
            if stack and call.correlation is not None:
                titled = len(stack) > 1 and stack[-1].name.startswith(("nccl:", "gloo:"))
                out[call.correlation] = stack[-2] if titled else stack[-1]
    return out


def _comm_meta(rank: Rank, op: GpuOp, launchers: dict[int, CpuOp], operator_meta: dict) -> dict | None:
    """What PyTorch wrote about the collective a kernel ran: the `record_param_comms` operator
    that launched it (when that is the innermost operator at the launch: a kernel some other
    operator launched inside it, like a barrier's zero fill, is no collective), with the
    kernel's own args over it."""
    launcher = launchers.get(op.correlation) if op.correlation is not None else None
    from_operator = None
    if launcher is not None and launcher.name == COMM_OPERATOR:
        call = rank.trace.call_by_corr.get(op.correlation)
        from_operator = operator_meta.get((call.thread, launcher.start, launcher.end)) if call else None
    if op.comm is None:
        return from_operator
    return {**(from_operator or {}), **op.comm}


class _Matcher:
    """Which kernels of which ranks are one collective, and what each rank writes for it."""

    def __init__(self, ranks: list[Rank]) -> None:
        self.ranks = {r.rank: r for r in ranks}
        self.notes: list[str] = []
        self.assumptions: list[str] = []
        self.comms: list[tuple[str, tuple[int, ...], dict[int, tuple[int, int] | str]]] = []
        """(comm name, its ranks in group order, each rank's (device, stream) for it, or the
        name of the member stream made for it: `bridges`)."""
        self.bridges: dict[int, list[tuple[str, int, int]]] = defaultdict(list)
        """rank -> member streams made for comms it ran on several streams: (name, device,
        collectives through it)."""
        self.collectives: dict[int, dict[int, Collective | Batch]] = {r.rank: {} for r in ranks}
        """rank -> id(kernel) -> the collective (or batch of sends and recvs) it stands for, for
        that rank's `_Builder`."""
        self.peers: dict[tuple[int, int, int | None], tuple[int, tuple[int, int]]] = {}
        """(rank, id(kernel), place in its batch or None) -> the rank and stream of a rooted
        collective's root or of a send's or recv's peer, named once every rank's streams are
        (`name_peers`)."""
        self.matched = 0
        self.apart = 0
        """Matched send/recv pairs whose two sides did not overlap in the trace."""

    def match(self) -> None:
        groups: dict[str, dict[int, list[_Run]]] = defaultdict(lambda: defaultdict(list))
        metas: dict[str, dict] = {}
        pairs: dict[tuple[str, int, int], list[_Run]] = defaultdict(list)
        """(group, rank, peer) -> that rank's sends to and receives from the peer."""
        batched: dict[str, dict[int, list[tuple[GpuOp, list[_Batched]]]]] = defaultdict(dict)
        """group -> rank -> its batches of sends and recvs in that group."""
        unnamed = unmatched = 0
        for number, rank in sorted(self.ranks.items()):
            launchers = _launchers(rank.trace)
            operator_meta = {(thread, start, end): meta for thread, ops in rank.trace.comm_ops.items()
                             for start, end, meta in ops}
            found, notes = _batches(rank.trace, launchers)
            self.notes.extend(f"rank {number}: {note}" for note in notes)
            for op, members in found:
                batched[members[0].group].setdefault(number, []).append((op, members))
            for op in rank.trace.gpu:
                if op.kind != "kernel":
                    continue
                meta = _comm_meta(rank, op, launchers, operator_meta)
                if meta is None:
                    continue
                kind = collective_kind(meta.get("Collective name", ""))
                name = meta.get("Process Group Name", meta.get("Process Group Description"))
                peer = _peer(meta) if name is not None else None
                if peer is not None:
                    pairs[(str(name), number, peer[1])].append(_Run(op, peer[0], None, peer[1]))
                elif kind is None:
                    unmatched += 1
                elif name is None:
                    unnamed += 1
                else:
                    root = whole(meta.get("Rank")) if kind in ROOTED else None
                    called = str(meta.get("Collective name")).lower().strip().lstrip("_")
                    groups[str(name)][number].append(_Run(op, kind, whole(meta.get("Seq")), root,
                                                          called if called in RENAMED else None))
                    metas.setdefault(str(name), meta)
            # A send or recv the rank ran on the stream of its batches in that group went through
            # the same communicator (NCCL pairs them in call order with the batches' calls): a
            # batch of one call there.
            for group, by_rank in batched.items():
                lanes = {(op.device, op.stream) for op, _ in by_rank.get(number, ())}
                for key in [key for key in pairs if key[0] == group and key[1] == number]:
                    alone = [run for run in pairs[key] if (run.op.device, run.op.stream) in lanes]
                    if not alone:
                        continue
                    pairs[key] = [run for run in pairs[key] if (run.op.device, run.op.stream) not in lanes]
                    if not pairs[key]:
                        del pairs[key]
                    for run in alone:
                        launcher = launchers.get(run.op.correlation) if run.op.correlation is not None else None
                        by_rank[number].append((run.op, [_Batched(run.kind, key[2], group, None, launcher)]))
                    by_rank[number].sort(key=lambda item: item[0].start)
        if unmatched:
            self.notes.append(f"{unmatched:,} communication kernel(s) of operations the spec does not match "
                              "(peerless sends and recvs, or calls it has no statement for) stay kernels")
        if unnamed:
            self.notes.append(f"{unnamed:,} communication kernel(s) name no process group (PyTorch writes "
                              "`Process Group Name` since 2.2): they stay kernels")
        used_names: set[str] = set()
        for name in sorted(groups):
            self._group(name, metas[name], groups[name], used_names)
        for (name, rank, peer) in sorted(pairs):
            if rank < peer:
                self._pair(name, rank, peer, pairs, used_names)
        for name in sorted(batched):
            self._batched(name, batched[name], used_names)
        if self.apart:
            self.notes.append(f"in {self.apart} send/recv pair(s) one side ended before the other began in the trace "
                              "(NCCL buffered the data, or the ranks' clocks differ); the spec starts each pair "
                              "together, so a circle of sends that a run got through this way is a deadlock to `check`")
        lonely = {(name, min(rank, peer), max(rank, peer)) for (name, rank, peer) in pairs
                  if peer not in self.ranks or (name, peer, rank) not in pairs}
        if lonely:
            self.notes.append(f"{len(lonely)} pair(s) of ranks with sends or recvs of only one side in the traces "
                              "(a peer not imported, or outside its window) stay kernels")

    def _pair(self, name: str, a: int, b: int, pairs: dict, used_names: set[str]) -> None:
        """The sends and recvs between ranks a and b in one process group as a comm of their
        two streams (PyTorch gives each pair of ranks a communicator and a stream of its own):
        the k-th send from one with the k-th recv on the other from it, or a note."""
        if b not in self.ranks or (name, b, a) not in pairs:
            return
        runs = {a: sorted(pairs[(name, a, b)], key=lambda run: run.op.start),
                b: sorted(pairs[(name, b, a)], key=lambda run: run.op.start)}
        lanes = {r: {(run.op.device, run.op.stream) for run in runs[r]} for r in (a, b)}
        where = f"process group {name!r}, ranks {a} and {b}"
        if any(len(lane) > 1 for lane in lanes.values()):
            self.notes.append(f"{where}: a rank ran its sends and recvs with the other on several streams; "
                              "they stay kernels")
            return
        sends = {r: [run for run in runs[r] if run.kind == "send"] for r in (a, b)}
        recvs = {r: [run for run in runs[r] if run.kind == "recv"] for r in (a, b)}
        if len(sends[a]) != len(recvs[b]) or len(sends[b]) != len(recvs[a]):
            self.notes.append(f"{where}: {len(sends[a])} send(s) from {a} against {len(recvs[b])} recv(s) on {b}, "
                              f"{len(sends[b])} from {b} against {len(recvs[a])} on {a} (profiling windows that "
                              "do not line up): they stay kernels")
            return
        comm = _unique(f"pg_{name}_p2p_{a}_{b}", used_names)
        streams = {r: lanes[r].pop() for r in (a, b)}
        self.comms.append((comm, (a, b), streams))
        apart = 0
        for sender, receiver in ((a, b), (b, a)):
            for send, recv in zip(sends[sender], recvs[receiver]):
                duration, separate = self._met(sender, send.op, receiver, recv.op)
                apart += separate
                for rank, run, peer in ((sender, send, receiver), (receiver, recv, sender)):
                    self.peers[(rank, id(run.op), None)] = (peer, streams[peer])
                    self.collectives[rank][id(run.op)] = Collective(run.kind, comm, None, duration)
                self.matched += 1
        self.apart += apart

    def _batched(self, name: str, by_rank: dict[int, list[tuple[GpuOp, list[_Batched]]]],
                 used_names: set[str]) -> None:
        """One process group's batches of sends and recvs as `group`s on a comm of the ranks'
        streams (a batch runs on the group's own communicator, and NCCL fuses it into one
        kernel): the k-th send from one rank to another with the k-th recv there from it, or a
        note saying why they stay kernels."""
        where = f"process group {name!r}"
        lanes = {r: {(op.device, op.stream) for op, _ in batches} for r, batches in by_rank.items()}
        several = [r for r, lane in lanes.items() if len(lane) > 1]
        if several:
            self.notes.append(f"{where}: rank {several[0]} ran its batched sends and recvs on several streams; "
                              "they stay kernels")
            return
        sends: dict[tuple[int, int], list[tuple[GpuOp, int]]] = defaultdict(list)
        recvs: dict[tuple[int, int], list[tuple[GpuOp, int]]] = defaultdict(list)
        for r, batches in by_rank.items():
            for op, members in batches:
                for part, member in enumerate(members):
                    (sends if member.kind == "send" else recvs)[(r, member.peer)].append((op, part))
        selves = sorted({r for r, peer in [*sends, *recvs] if peer == r})
        if selves:
            self.notes.append(f"{where}: rank {selves[0]} sends to or receives from itself in a batch; the "
                              "group's batches stay kernels")
            return
        strangers = sorted({peer for _, peer in [*sends, *recvs] if peer not in by_rank})
        if strangers:
            why = "was not given" if strangers[0] not in self.ranks else "has no batch of the group"
            self.notes.append(f"{where}: batched sends and recvs with rank {strangers[0]}, whose trace {why}, "
                              "stay kernels")
            return
        for (a, b) in sorted({*sends, *((b, a) for a, b in recvs)}):
            if len(sends.get((a, b), ())) != len(recvs.get((b, a), ())):
                self.notes.append(f"{where}: {len(sends.get((a, b), ()))} batched send(s) from {a} against "
                                  f"{len(recvs.get((b, a), ()))} recv(s) on {b} (profiling windows that do not "
                                  "line up): the group's batches stay kernels")
                return
        comm = _unique(f"pg_{name}_batched", used_names)
        members = tuple(sorted(by_rank))
        streams = {r: next(iter(lanes[r])) for r in members}
        self.comms.append((comm, members, streams))
        # (a batch's kernel ran all of its calls at once: each takes the kernel's measured time,
        # and the device has a comm unit for each, `_Builder._declarations`)
        sizes = {id(op): len(calls) for batches in by_rank.values() for op, calls in batches}
        operators = {(id(op), part): call.operator for batches in by_rank.values() for op, calls in batches
                     for part, call in enumerate(calls)}
        parts: dict[int, list[Collective]] = {}
        apart = 0
        for (sender, receiver), out in sorted(sends.items()):
            for (send, s_part), (recv, r_part) in zip(out, recvs[(receiver, sender)]):
                duration, separate = self._met(sender, send, receiver, recv)
                apart += separate
                for rank, op, part, kind, peer in ((sender, send, s_part, "send", receiver),
                                                   (receiver, recv, r_part, "recv", sender)):
                    calls = parts.setdefault(id(op), [None] * sizes[id(op)])
                    calls[part] = Collective(kind, comm, None, duration, operator=operators[(id(op), part)])
                    self.peers[(rank, id(op), part)] = (peer, streams[peer])
                self.matched += 1
        for r, batches in by_rank.items():
            for op, _ in batches:
                self.collectives[r][id(op)] = Batch(tuple(parts[id(op)]))
        self.apart += apart

    def _clock(self, rank: int, op: GpuOp) -> int:
        """When `op` started by its trace's clock (ns)."""
        return round(self.ranks[rank].trace.origin * 1000) + op.start

    def _met(self, sender: int, send: GpuOp, receiver: int, recv: GpuOp) -> tuple[int, bool]:
        """A send and the recv it meets: the time the pair takes (the shorter side's measured
        time; a side that measured nothing is no measure of the transfer), and whether one side
        ended before the other began by the traces' own clocks (each rank's spec times start at
        its first event)."""
        sent, received = self._clock(sender, send), self._clock(receiver, recv)
        duration = min((op.dur for op in (send, recv) if op.dur > 0), default=0)
        return duration, sent + send.dur <= received or received + recv.dur <= sent

    def _members(self, name: str, meta: dict, by_rank: dict[int, list[_Run]]) -> tuple[int, ...] | None:
        """The group's ranks in group order, or None (with a note) where they cannot all be met."""
        members = group_ranks(meta)
        size = whole(meta.get("Group size"))
        if members is not None and size is not None and size > len(members):
            self.notes.append(f"process group {name!r} lists {len(members)} of its {size} ranks (the profiler "
                              "shortens long lists): its collectives stay kernels")
            return None
        if members is None:
            if size == len(self.ranks) and set(by_rank) == set(self.ranks):
                return tuple(sorted(self.ranks))
            if size is not None and size == len(by_rank) > 1:
                # (HCCL names a group, not its ranks: those that ran its collectives, when they
                # are as many as the group has)
                self.assumptions.append(f"process group {name!r}: the trace does not list its ranks; they are "
                                        f"the {size} imported ranks that ran its collectives ("
                                        + ", ".join(map(str, sorted(by_rank))) + "), in rank order")
                return tuple(sorted(by_rank))
            self.notes.append(f"process group {name!r}: the trace does not list its ranks"
                              + (f", and {len(by_rank)} of the imported ranks ran its collectives where it has "
                                 f"{size}" if size is not None else "") + "; its collectives stay kernels")
            return None
        if len(members) < 2:
            return None  # (a group of one rank meets nobody: its kernels are kernels)
        missing = [r for r in members if r not in self.ranks]
        if missing:
            self.notes.append(f"process group {name!r} spans rank(s) {', '.join(map(str, missing))}, whose traces "
                              "were not given: its collectives stay kernels")
            return None
        strangers = [r for r in by_rank if r not in members]
        if strangers:
            self.notes.append(f"process group {name!r}: rank {strangers[0]} ran its collectives without being "
                              "one of its ranks; they stay kernels")
            return None
        return members

    def _positions(self, name: str, members: tuple[int, ...],
                   by_rank: dict[int, list[_Run]]) -> list[dict[int, _Run]] | None:
        """Each group of the comm: one collective per rank. By sequence number where every
        collective has one (unique per rank), else by position in stream order."""
        ordered = {r: sorted(by_rank.get(r, ()), key=lambda run: run.op.start) for r in members}
        numbered = all(run.seq is not None for runs in ordered.values() for run in runs)
        if numbered and all(len({run.seq for run in runs}) == len(runs) for runs in ordered.values()):
            by_seq = {r: {run.seq: run for run in runs} for r, runs in ordered.items()}
            common = sorted(set.intersection(*(set(seqs) for seqs in by_seq.values())))
            outside = sum(len(runs) for runs in ordered.values()) - len(common) * len(members)
            if outside:
                self.notes.append(f"process group {name!r}: {outside:,} collective(s) whose sequence number (`Seq`) "
                                  "not every rank's trace has (profiling windows that do not line up) stay kernels")
            return [{r: by_seq[r][seq] for r in members} for seq in common]
        counts = {r: len(runs) for r, runs in ordered.items()}
        if len(set(counts.values())) > 1:
            self.notes.append(f"process group {name!r}: the ranks ran different numbers of collectives ("
                              + ", ".join(f"rank {r}: {n}" for r, n in counts.items())
                              + ") and the trace numbers none of them (`Seq`): the profiling windows do not "
                                "line up (profile the same steps on every rank); they stay kernels")
            return None
        return [{r: ordered[r][k] for r in members} for k in range(counts[members[0]])]

    def _group(self, name: str, meta: dict, by_rank: dict[int, list[_Run]], used_names: set[str]) -> None:
        """One process group's collectives as one comm's, or a note saying why they cannot be."""
        members = self._members(name, meta, by_rank)
        if members is None:
            return
        positions = self._positions(name, members, by_rank)
        if not positions:
            return
        lanes = {r: {(position[r].op.device, position[r].op.stream) for position in positions} for r in members}
        for r in members:
            if len({device for device, _ in lanes[r]}) > 1:
                self.notes.append(f"process group {name!r}: rank {r} ran its collectives on several devices; "
                                  "they stay kernels")
                return
        comm = _unique(f"pg_{name}", used_names)
        # Recent PyTorch runs a synchronous collective on the caller's stream and an asynchronous
        # one on its NCCL stream; NCCL still runs a communicator's kernels one after another: the
        # comm's member is then a stream of its own, bridged to each stream that launched a
        # collective by a record and a wait either side.
        streams: dict[int, tuple[int, int] | str] = {
            r: next(iter(lanes[r])) if len(lanes[r]) == 1 else f"{self.ranks[r].prefix}{comm}" for r in members}
        self.comms.append((comm, members, streams))
        through = {r: 0 for r in members}
        guessed = selves = False
        for position in positions:
            # (a member that measured nothing, or a corrupt time, is no measure of the transfer)
            measured = [run.op.dur for run in position.values() if run.op.dur > 0]
            duration = min(measured, default=0)
            # PyTorch before about 2.4 wrote each caller's own rank as a rooted collective's
            # `Rank`; later ones write the root. Every member naming itself says nothing of the root.
            own = all(run.other == members.index(r) for r, run in position.items())
            selves = selves or (own and any(run.kind in ROOTED for run in position.values()))
            for r, run in position.items():
                if run.kind in ROOTED:
                    root = run.other if run.other is not None and run.other < len(members) and not own else None
                    guessed = guessed or root is None
                    root_rank = members[root if root is not None else 0]
                    self.peers[(r, id(run.op), None)] = (root_rank, streams[root_rank])
                via = streams[r] if isinstance(streams[r], str) else None
                self.collectives[r][id(run.op)] = Collective(run.kind, comm, None, duration, via, through[r],
                                                             run.called)
                through[r] += 1
            self.matched += 1
        for r in members:
            if isinstance(streams[r], str):
                self.bridges[r].append((streams[r], positions[0][r].op.device, through[r]))
        if selves:
            self.assumptions.append(f"process group {name!r}: a broadcast, reduce, gather or scatter for which every "
                                    "rank names itself (`Rank`: PyTorch before about 2.4 wrote each caller's own rank "
                                    f"there, not the root) is rooted at the group's first rank, {members[0]} (were "
                                    "every rank its own root, the calls would not match)")
        elif guessed:
            self.assumptions.append(f"process group {name!r}: a broadcast or reduce whose root the trace does not "
                                    f"name (`Rank`) is rooted at the group's first rank, {members[0]}")

    def name_peers(self, builders: dict[int, _Builder]) -> None:
        """Each root's or peer's stream, by the name its rank's spec gives it."""
        for (rank, key, part), (peer, lane) in self.peers.items():
            found = self.collectives[rank][key]
            name = lane if isinstance(lane, str) else builders[peer].stream_name(lane)
            if isinstance(found, Batch):
                members = list(found.members)
                members[part] = replace(members[part], peer=name)
                self.collectives[rank][key] = Batch(tuple(members))
            else:
                self.collectives[rank][key] = replace(found, peer=name)


def read_ranks(traces: list[tuple[object, str]]) -> list[Rank]:
    """Each (parsed trace, its name) as a rank: its `distributedInfo.rank`; the traces without
    one take the lowest numbers no trace names, in the order given."""
    parsed = []
    for data, source in traces:
        try:
            parsed.append((_Trace(data), source))
        except TraceError as exc:
            raise TraceError(f"{source}: {exc}") from None
    seen: dict[int, str] = {}
    for trace, source in parsed:
        if trace.rank >= 0:
            if trace.rank in seen:
                raise TraceError(f"{source} and {seen[trace.rank]} are both rank {trace.rank} "
                                 "(distributedInfo.rank): give each rank's trace once")
            seen[trace.rank] = source
    free = (n for n in range(len(parsed) + len(seen)) if n not in seen)
    return [Rank(trace.rank if trace.rank >= 0 else next(free), source, trace) for trace, source in parsed]


def import_ranks(traces: list[tuple[object, str]], ets: list[ExecutionTrace | None] | None = None, *,
                 min_gap: int = 0) -> Imported:
    """One spec from several ranks' Kineto traces (each parsed JSON with its name), and
    optionally each one's Execution Trace (in the same order)."""
    if not traces:
        raise TraceError("no traces to import")
    ets = ets or [None] * len(traces)
    if len(ets) != len(traces):
        raise TraceError(f"{len(ets)} Execution Traces for {len(traces)} traces: give one per trace, in order")
    ranks = read_ranks(traces)
    for rank in ranks:
        try:
            check_trace(rank.trace)
        except TraceError as exc:
            raise TraceError(f"{rank.source}: {exc}") from None
    unnumbered = [r for r in ranks if r.trace.rank < 0]
    matcher = _Matcher(ranks)
    matcher.match()
    builders = [_Builder(rank.trace, et, rank.source, min_gap, prefix=rank.prefix,
                         collectives=matcher.collectives[rank.rank]) for rank, et in zip(ranks, ets)]
    for builder in builders:
        builder.prepare()
    by_rank = {rank.rank: builder for rank, builder in zip(ranks, builders)}
    matcher.name_peers(by_rank)
    size = math.lcm(*(len(members) for _, members, _ in matcher.comms)) if matcher.comms else 1
    for builder in builders:  # (placeholders that every comm's members share evenly: no SP070)
        builder.comm_placeholder_bytes = size
    parts = [builder.assemble() for builder in builders]
    spec = SpecText(title_text(f"imported from {len(ranks)} ranks: {', '.join(r.source for r in ranks)}"))
    header = [f"Imported by `streamproof import kineto` from the traces of {len(ranks)} ranks; each rank's "
              "names begin with `rN_`, and its timeline starts at its own first event.",
              f"{matcher.matched:,} collective(s) matched across ranks on {len(matcher.comms)} comm(s) (one per "
              "process group, matched by sequence number or position): each member takes the shortest time "
              "measured in its group (the last rank to arrive waited least).",
              "Collectives use the tensors an Execution Trace gives, placeholder memory otherwise."]
    if unnumbered:
        header.append(f"{len(unnumbered)} trace(s) name no rank (distributedInfo.rank): "
                      + ", ".join(f"{r.source} is rank {r.rank}" for r in unnumbered) + ".")
    header.extend(f"Assumed: {a}" for a in matcher.assumptions)
    header.extend(f"Note: {n}" for n in matcher.notes)
    declarations: list[str] = []
    streams, notes, assumptions = {}, list(matcher.notes), list(matcher.assumptions)
    counts: dict[str, int] = defaultdict(int)
    firsts, lasts, threads = [], [], []
    # (a rank's header: its source, its counts, its span, then what its spec does; what every
    # rank's spec does is said once)
    shared = set.intersection(*(set(part.header[3:]) for part, _, _, _ in parts))
    header.extend(line for line in parts[0][0].header[3:] if line in shared)
    for rank, builder, (part, observed, first, last) in zip(ranks, builders, parts):
        header.append("")
        header.append(f"rank {rank.rank} ({rank.source}):")
        header.extend(f"  {line}" for line in part.header[1:] if line not in shared)
        declarations.append(f"# rank {rank.rank}")
        declarations.extend(part.declarations)
        for name, device, count in matcher.bridges.get(rank.rank, ()):
            declarations += [f"stream {name} on {builder.device_name(device)}  # the comm's member: NCCL runs a "
                             "communicator's kernels in order, whatever stream launched them",
                             f"event {name}_in[{count}]", f"event {name}_out[{count}]"]
        threads.extend(part.threads)
        streams.update(observed)
        firsts.append(first)
        lasts.append(last)
        notes.extend(f"rank {rank.rank}: {n}" for n in builder.notes)
        assumptions.extend(f"rank {rank.rank}: {a}" for a in builder.assumptions)
        for key, value in builder.counts.items():
            counts[key] += value
        counts["streams"] += len(builder.stream_keys) + len(matcher.bridges.get(rank.rank, ()))
        counts["events"] += len(builder.events)
        counts["assumptions"] += builder.assumed
        counts["trace_events"] += rank.trace.total
    if matcher.comms:
        declarations.append("# collectives: one comm per process group")
    for comm, members, lanes in matcher.comms:
        names = (lanes[r] if isinstance(lanes[r], str) else by_rank[r].stream_name(lanes[r]) for r in members)
        declarations.append(f"comm {comm} = {{ {', '.join(names)} }}")
    spec.header = header
    spec.declarations = declarations
    spec.threads = threads
    counts["assumptions"] += len(matcher.assumptions)
    counts.update(threads=len(threads), ranks=len(ranks), comms=len(matcher.comms))
    return Imported(spec.render(), streams, min(firsts, default=0), max(lasts, default=0), notes, assumptions,
                    dict(counts))
