"""Several ranks' PyTorch profiler traces -> one `.sched` spec in which their collectives meet.

Each trace is one rank of a distributed run (its `distributedInfo.rank`, else its place on the
command line) and is imported as on its own (`kineto.py`), every name it declares prefixed
`rN_`. The communication kernels become collectives: PyTorch writes, on each NCCL kernel (and
on the `record_param_comms` operator that launched it), the collective's kind and its process
group's name and ranks. A process group whose every rank is imported, and which each rank ran
on one stream, becomes a `comm` of those streams, and the k-th collective each rank ran on it
stands for the k-th of the others, as NCCL matches them (the language's comm positions).

A collective's measured time includes its wait for the last rank to arrive, which the spec's
group start already models: every member takes the shortest time measured in its group (the
last rank to arrive waited least).

What cannot be matched stays a kernel, with a note saying why: point-to-point kernels (the
trace does not name the peer), a group with a rank not imported, run on two streams by one
rank, or whose ranks ran different numbers of collectives (profiling windows that do not line
up; profile the same steps on every rank).
"""

from __future__ import annotations

import bisect
import json
from collections import defaultdict
from dataclasses import dataclass

from checker.importers.execution_trace import TraceError
from checker.importers.execution_trace import ExecutionTrace
from checker.importers.kineto import Collective, GpuOp, Imported, _Builder, _Trace, check_trace
from checker.spec_text import SpecText, safe_name, title_text

KINDS = {"allreduce": "allreduce", "barrier": "allreduce", "allgather": "allgather",
         "reducescatter": "reducescatter", "alltoall": "alltoall", "alltoallv": "alltoall",
         "broadcast": "broadcast", "reduce": "reduce"}
"""`Collective name` as PyTorch writes it (normalised by `collective_kind`) -> the statement.
NCCL runs a barrier as an allreduce of one element. Send and recv are left out: the kernel does
not name its peer."""
ROOTED = frozenset({"broadcast", "reduce"})
ROOT_MARK = "{{root:{}}}"
"""Where a rooted collective's root stream goes, until every rank's streams are named."""


def collective_kind(name: str) -> str | None:
    """`allreduce`, `_allgather_base`, `all_gather_into_tensor_coalesced`, `reduce_scatter_tensor`,
    `all_to_allv`, ... -> the statement's collective, None for one the spec cannot match."""
    key = str(name).lower().strip().lstrip("_")
    for part in ("_coalesced", "_into_tensor", "_tensor", "_base", "_single"):
        key = key.replace(part, "")
    return KINDS.get(key.replace("_", ""))


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


def _comm_meta(rank: Rank, op: GpuOp, starts: dict[tuple, list[int]]) -> dict | None:
    """The collective a kernel ran: its own args, else those of the `record_param_comms` that
    was running on the thread whose call launched it (`starts`: per thread, the starts of its
    `record_param_comms`, in order)."""
    if op.comm is not None:
        return op.comm
    call = rank.trace.call_by_corr.get(op.correlation) if op.correlation is not None else None
    if call is None or call.thread not in starts:
        return None
    index = bisect.bisect_right(starts[call.thread], call.start) - 1
    if index < 0:
        return None
    _, end, meta = rank.trace.comm_ops[call.thread][index]
    return meta if call.start <= end else None


class _Matcher:
    """Which kernels of which ranks are one collective, and what each rank writes for it."""

    def __init__(self, ranks: list[Rank]) -> None:
        self.ranks = {r.rank: r for r in ranks}
        self.notes: list[str] = []
        self.assumptions: list[str] = []
        self.comms: list[tuple[str, tuple[int, ...], dict[int, tuple[int, int]]]] = []
        """(comm name, its ranks in order, each rank's (device, stream) for it)."""
        self.collectives: dict[int, dict[int, Collective]] = {r.rank: {} for r in ranks}
        """rank -> id(kernel) -> the collective it stands for, for that rank's `_Builder`."""
        self.matched = 0

    def match(self) -> None:
        groups: dict[str, dict[int, list[tuple[GpuOp, str]]]] = defaultdict(lambda: defaultdict(list))
        metas: dict[str, dict] = {}
        unnamed = unmatched = 0
        for number, rank in sorted(self.ranks.items()):
            for ops in rank.trace.comm_ops.values():
                ops.sort(key=lambda item: item[0])
            starts = {thread: [start for start, _, _ in ops] for thread, ops in rank.trace.comm_ops.items()}
            for op in rank.trace.gpu:
                if op.kind != "kernel":
                    continue
                meta = _comm_meta(rank, op, starts)
                if meta is None:
                    continue
                kind = collective_kind(meta.get("Collective name", ""))
                name = meta.get("Process Group Name", meta.get("Process Group Description"))
                if kind is None:
                    unmatched += 1
                elif name is None:
                    unnamed += 1
                else:
                    groups[str(name)][number].append((op, kind))
                    metas.setdefault(str(name), meta)
        if unmatched:
            self.notes.append(f"{unmatched:,} communication kernel(s) of point-to-point or other operations "
                              "(send, recv, gather, scatter: the trace does not name the peer or root) stay kernels")
        if unnamed:
            self.notes.append(f"{unnamed:,} communication kernel(s) name no process group (PyTorch writes "
                              "`Process Group Name` since 2.2): they stay kernels")
        used_names: set[str] = set()
        for name in sorted(groups):
            self._group(name, metas[name], groups[name], used_names)

    def _group(self, name: str, meta: dict, by_rank: dict[int, list[tuple[GpuOp, str]]], used_names: set[str]) -> None:
        """One process group's collectives as one comm's, or a note saying why they cannot be."""
        members = group_ranks(meta)
        if members is None:
            if meta.get("Group size") == len(self.ranks) and set(by_rank) == set(self.ranks):
                members = tuple(sorted(self.ranks))
            else:
                self.notes.append(f"process group {name!r}: the trace does not list its ranks; its "
                                  "collectives stay kernels")
                return
        if len(members) < 2:
            return  # (a group of one rank meets nobody: its kernels are kernels)
        missing = [r for r in members if r not in self.ranks]
        if missing:
            self.notes.append(f"process group {name!r} spans rank(s) {', '.join(map(str, missing))}, whose traces "
                              "were not given: its collectives stay kernels")
            return
        strangers = [r for r in by_rank if r not in members]
        if strangers:
            self.notes.append(f"process group {name!r}: rank {strangers[0]} ran its collectives without being "
                              "one of its ranks; they stay kernels")
            return
        counts = {r: len(by_rank.get(r, ())) for r in members}
        if len(set(counts.values())) > 1:
            self.notes.append(f"process group {name!r}: the ranks ran different numbers of collectives ("
                              + ", ".join(f"rank {r}: {n}" for r, n in counts.items())
                              + "): the profiling windows do not line up (profile the same steps on every "
                                "rank); they stay kernels")
            return
        streams: dict[int, tuple[int, int]] = {}
        for r in members:
            lanes = {(op.device, op.stream) for op, _ in by_rank[r]}
            if len(lanes) > 1:
                self.notes.append(f"process group {name!r}: rank {r} ran its collectives on {len(lanes)} "
                                  "streams; they stay kernels")
                return
            streams[r] = lanes.pop()
        comm = safe_name(f"pg_{name}", "pg")
        while comm in used_names:
            comm += "_"
        used_names.add(comm)
        self.comms.append((comm, members, streams))
        # (in stream order: the order each rank enqueued them, which NCCL matches)
        ordered = {r: sorted(by_rank[r], key=lambda item: item[0].start) for r in members}
        rooted = False
        for k in range(counts[members[0]]):
            duration = min(ordered[r][k][0].dur for r in members)
            for r in members:
                op, kind = ordered[r][k]
                # (the root's stream is named once every rank is written: `_with_root`)
                root = ROOT_MARK.format(comm) if kind in ROOTED else None
                rooted = rooted or kind in ROOTED
                self.collectives[r][id(op)] = Collective(kind, comm, root, duration)
            self.matched += 1
        if rooted:
            self.assumptions.append(f"process group {name!r}: the root of each broadcast or reduce is its first "
                                    f"rank, {members[0]} (the trace does not name it)")

def read_ranks(traces: list[tuple[object, str]]) -> list[Rank]:
    """Each (parsed trace, its name) as a rank: its `distributedInfo.rank`, else its place."""
    parsed = []
    for data, source in traces:
        try:
            parsed.append((_Trace(data), source))
        except TraceError as exc:
            raise TraceError(f"{source}: {exc}") from None
    given = [t.rank for t, _ in parsed]
    if all(r >= 0 for r in given):
        seen: dict[int, str] = {}
        for (t, source) in parsed:
            if t.rank in seen:
                raise TraceError(f"{source} and {seen[t.rank]} are both rank {t.rank} (distributedInfo.rank): "
                                 "give each rank's trace once")
            seen[t.rank] = source
        return [Rank(t.rank, source, t) for t, source in parsed]
    return [Rank(k, source, t) for k, (t, source) in enumerate(parsed)]


def import_ranks(traces: list[tuple[object, str]], ets: list[ExecutionTrace | None] | None = None, *,
                 min_gap: int = 0) -> Imported:
    """One spec from several ranks' Kineto traces (each parsed JSON with its name), and
    optionally each one's Execution Trace (in the same order)."""
    ets = ets or [None] * len(traces)
    if len(ets) != len(traces):
        raise TraceError(f"{len(ets)} Execution Traces for {len(traces)} traces: give one per trace, in order")
    ranks = read_ranks(traces)
    for rank in ranks:
        try:
            check_trace(rank.trace)
        except TraceError as exc:
            raise TraceError(f"{rank.source}: {exc}") from None
    unnumbered = any(r.trace.rank < 0 for r in ranks)
    matcher = _Matcher(ranks)
    matcher.match()
    builders = [_Builder(rank.trace, et, rank.source, min_gap, prefix=rank.prefix,
                         collectives=matcher.collectives[rank.rank]) for rank, et in zip(ranks, ets)]
    parts = [builder.assemble() for builder in builders]
    spec = SpecText(title_text(f"imported from {len(ranks)} ranks: {', '.join(r.source for r in ranks)}"))
    header = [f"Imported by `streamproof import kineto` from the traces of {len(ranks)} ranks; each rank's "
              "names begin with `rN_`, and its timeline starts at its own first event.",
              f"{matcher.matched:,} collective(s) matched across ranks on {len(matcher.comms)} comm(s) (one per "
              "process group): the k-th collective of each rank on a comm is one group, each member taking the "
              "shortest time measured in its group (the last rank to arrive waited least).",
              "Collectives use the tensors an Execution Trace gives, placeholder memory otherwise."]
    if unnumbered:
        header.append("The traces name no rank (distributedInfo.rank): ranks are numbered in the order given.")
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
        threads.extend(part.threads)
        streams.update(observed)
        firsts.append(first)
        lasts.append(last)
        notes.extend(f"rank {rank.rank}: {n}" for n in builder.notes)
        assumptions.extend(f"rank {rank.rank}: {a}" for a in builder.assumptions)
        for key, value in builder.counts.items():
            counts[key] += value
        counts["streams"] += len(builder.stream_keys)
        counts["events"] += len(builder.events)
        counts["assumptions"] += builder.assumed
        counts["trace_events"] += rank.trace.total
    if matcher.comms:
        declarations.append("# collectives: one comm per process group")
    by_rank = {rank.rank: builder for rank, builder in zip(ranks, builders)}
    roots = {}
    for comm, members, lanes in matcher.comms:
        names = [by_rank[r].stream_name(lanes[r]) for r in members]
        roots[comm] = names[0]
        declarations.append(f"comm {comm} = {{ {', '.join(names)} }}")
    for thread in threads:
        thread.lines[:] = [_with_root(line, roots) for line in thread.lines]
    spec.header = header
    spec.declarations = declarations
    spec.threads = threads
    counts["assumptions"] += len(matcher.assumptions)
    counts.update(threads=len(threads), ranks=len(ranks), comms=len(matcher.comms))
    return Imported(spec.render(), streams, min(firsts, default=0), max(lasts, default=0), notes, assumptions,
                    dict(counts))


def _with_root(line: str, roots: dict[str, str]) -> str:
    """A rooted collective's root is the comm's first member, named once the streams are."""
    if "{root:" not in line:
        return line
    start = line.index("{root:")
    end = line.index("}", start)
    return line[:start] + roots[line[start + len("{root:"):end]] + line[end + 1:]
