"""Which calls of a comm meet, and collective mismatch (SP202): members of a comm disagree
at the same position.

Calls meet by position on their streams: the k-th collective of each member stream, the k-th
send A->B with the k-th recv on B from A. When one thread enqueues all the calls of a class
(a member stream's collectives, or its sends to one peer), position is program order and
what meets is fixed before anything runs (`Program.groups`, and the mismatch check here).
When two threads enqueue calls of one class onto the same stream, position is enqueue order,
which depends on the interleaving: such a comm is *interleaved* (`interleaved_comms`), the
executor matches its calls as they are enqueued, and its mismatches are checked on the groups
the exhaustive search forms (`met_mismatch`) instead of here.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from fractions import Fraction

from checker.findings import Finding, FindingKind
from checker.ir import Group, GroupKind, Op, Program, Statement, loop_text


def _size(program: Program, statement: Statement) -> int | Fraction:
    """The element count every member must agree on, in bytes: what the call reads (in
    place: its buffer); a broadcast's non-root member only receives. An allgather in place
    sends its own share of the buffer (NCCL, "In-place Operations": `sendbuff` is
    `recvbuff + rank * sendcount`), so a member in place meets one out of place whose
    source is that share."""
    access = statement.accesses[0]
    size = access.end - access.start
    if statement.op is Op.ALLGATHER and len(statement.accesses) == 2:
        written = statement.accesses[1]
        if (written.memory, written.start, written.end) == (access.memory, access.start, access.end):
            share = Fraction(size, len(program.comms[statement.comm].members))
            return int(share) if share.denominator == 1 else share
    return size


def _label(program: Program, s: Statement) -> str:
    if s.operation.pairwise:
        direction = "to" if s.op is Op.SEND else "from"
        return f"{s.op.value} {direction} `{program.streams[s.peer].name}` of {_size(program, s)} bytes"
    root = f" rooted at `{program.streams[s.root].name}`" if s.root is not None else ""
    return f"{s.op.value} of {_size(program, s)} bytes{root}"


def program_order_groups(statements, comms) -> tuple[tuple[Group, ...], dict[int, int]]:
    """The groups of calls matched by position in program order (`Program.groups`): the k-th
    collective call (of any kind) of each member stream of a comm, and the k-th send A->B
    with the k-th recv on B from A; and each member's group index. (Calls of an interleaved
    comm get them too, and meet by enqueue order instead: `interleaved_comms`.)"""
    groups: list[Group] = []
    calls: dict[tuple[int, int], list[int]] = {}
    pairs: dict[tuple[int, int, int], tuple[list[int], list[int]]] = {}  # (comm, from, to)
    for s in statements:
        if s.comm is None:
            continue
        if s.op is Op.SEND:
            pairs.setdefault((s.comm, s.rank_stream, s.peer), ([], []))[0].append(s.index)
        elif s.op is Op.RECV:
            pairs.setdefault((s.comm, s.peer, s.rank_stream), ([], []))[1].append(s.index)
        else:
            calls.setdefault((s.comm, s.rank_stream), []).append(s.index)
    for comm in comms:
        per_stream = [calls.get((comm.index, m), []) for m in comm.members]
        rounds = max((len(v) for v in per_stream), default=0)
        for k in range(rounds):
            members = tuple(v[k] for v in per_stream if k < len(v))
            groups.append(Group(len(groups), GroupKind.COLLECTIVE, comm.index, k, members,
                                len(members) == len(comm.members)))
        rank = {m: i for i, m in enumerate(comm.members)}
        for key in sorted((key for key in pairs if key[0] == comm.index), key=lambda k: (rank[k[1]], rank[k[2]])):
            sends, recvs = pairs[key]
            for k in range(max(len(sends), len(recvs))):
                members = tuple(x[k] for x in (sends, recvs) if k < len(x))
                groups.append(Group(len(groups), GroupKind.SENDRECV, comm.index, k, members, len(members) == 2))
    return tuple(groups), {m: g.index for g in groups for m in g.members}


def unit_holders(program: Program, members) -> tuple[int, ...]:
    """The members of a group that hold an engine unit while the group runs: every member
    that takes time on an engine, except that members on one device (which SP059 warns of)
    share its units when they are fewer: the longest ones hold them."""
    by_pool: dict[tuple, list[Statement]] = defaultdict(list)
    for m in members:
        s = program.statements[m]
        if s.engine is not None and s.device is not None and s.duration > 0:
            by_pool[(s.device, s.engine)].append(s)
    holders: list[int] = []
    for (device, engine), found in by_pool.items():
        found.sort(key=lambda s: (-s.duration, s.index))
        holders.extend(s.index for s in found[:program.devices[device].count(engine)])
    return tuple(sorted(holders))


def call_class(statement: Statement) -> tuple | None:
    """The class a comm call takes its position in (None for other statements): a member
    stream's collectives, its sends to one peer, or its recvs from one."""
    if statement.group is None or statement.stream is None:
        return None
    if statement.op is Op.SEND:
        return ("send", statement.comm, statement.rank_stream, statement.peer)
    if statement.op is Op.RECV:
        return ("recv", statement.comm, statement.peer, statement.rank_stream)
    return ("call", statement.comm, statement.rank_stream)


def meeting_classes(program: Program, key: tuple) -> tuple[tuple, ...]:
    """The classes whose k-th calls meet the k-th call of class `key` (itself included)."""
    if key[0] == "call":
        return tuple(("call", key[1], member) for member in program.comms[key[1]].members)
    return (("send",) + key[1:], ("recv",) + key[1:])


def interleaved_comms(program: Program) -> frozenset[int]:
    """Comms with a class of calls that two threads enqueue onto one stream: which of those
    calls is the k-th, and so which calls meet, depends on how the threads interleave."""
    owner: dict[tuple, int] = {}
    out: set[int] = set()
    for s in program.statements:
        key = call_class(s)
        if key is not None and owner.setdefault(key, s.thread) != s.thread:
            out.add(s.comm)
    return frozenset(out)


_ADVISORY = (" (NCCL and HCCL need it; the spec language lets such calls meet, so this warning does not "
             "fail `check` unless the spec says `expect no mismatch`)")
_ADVISORY_ALLTOALL = (" (an alltoall needs it; an alltoallv, HCCL's HcclAlltoAllV or PyTorch's all_to_all_single "
                      "with split sizes, does not, so this warning does not fail `check` unless the spec says "
                      "`expect no mismatch`)")


def _order_help(program: Program, rows: list[list[Statement]], k: int) -> str | None:
    """Which member to change, for a mismatch at position k of calls each member issues in
    its own order (`rows`): against the commonest call at k, one that issues it at another
    position (a swapped order), or one that issues no such call at all."""
    def signature(s: Statement) -> tuple:
        return (s.op, _size(program, s), s.root)

    at_k = [row[k] for row in rows if k < len(row)]
    counts = Counter(signature(s) for s in at_k)
    reference = max(at_k, key=lambda s: counts[signature(s)])  # (the first of the commonest: the odd one out differs)
    name = lambda s: f"`{program.streams[s.stream].written}`"  # noqa: E731
    theirs = next((row for row in rows if k < len(row) and row[k] is reference), [])
    for row in rows:
        if k >= len(row) or signature(row[k]) == signature(reference):
            continue
        other = next((s for s in row[k + 1:] + row[:k][::-1] if signature(s) == signature(reference)), None)
        # (a swapped order: the reference's member issues this call too, elsewhere; a call it
        # never issues is the odd one out, whatever comes after it)
        swapped = any(signature(s) == signature(row[k]) for s in theirs)
        if other is not None and swapped:
            at = f"line {other.span.line}" + (f" {loop_text(other.bindings)}" if other.span.line == reference.span.line
                                               and other.bindings else "")
            when = "later" if other.index > row[k].index else "earlier"
            return (f"{name(other)} issues the call that matches {name(reference)}'s (line {reference.span.line}) "
                    f"{when}, at {at}, and {_label(program, row[k])} (line {row[k].span.line}) "
                    "here: issue the collectives in the same order on every member")
        return (f"{name(row[k])} issues {_label(program, row[k])} (line {row[k].span.line}) where "
                f"{name(reference)} issues {_label(program, reference)} (line {reference.span.line}), and none like "
                f"it anywhere else: every member of a comm must issue the same collectives, with the same sizes and roots, "
                f"in the same order")
    return None


def _calls_mismatch(program: Program, comm: int, k: int, at_k: list[Statement],
                    rows: list[list[Statement]] | None = None) -> Finding | None:
    """The calls at position k of a comm's member streams, if they disagree."""
    kinds = {s.op for s in at_k}
    matched = [s for s in at_k if not s.operation.pairwise]
    sizes = {_size(program, s) for s in matched}
    roots = {s.root for s in matched}
    if not matched or (len(kinds) <= 1 and len(sizes) <= 1 and len(roots) <= 1):
        return None
    # The contract: "the k-th allreduce of every member stream forms one group"; an `alltoall`
    # stands for alltoallv too (HCCL's HcclAlltoAllV, PyTorch's all_to_all_single with split
    # sizes), whose members each send and receive what they count.
    advisory = kinds == {Op.ALLREDUCE} or kinds == {Op.ALLTOALL}
    differ = [what for what, values in (("kind", kinds), ("size", sizes), ("root", roots)) if len(values) > 1]
    parts = "; ".join(f"`{program.streams[s.stream].name}` issues {_label(program, s)} (line {s.span.line})"
                      for s in at_k)
    return Finding(
        FindingKind.COLLECTIVE_MISMATCH,
        f"collective mismatch at call {k + 1} of comm `{program.comms[comm].name}`: {parts}",
        tuple(s.index for s in at_k),
        help=((rows is not None and _order_help(program, rows, k))
              or "every member of a comm must issue the same collectives, with the same sizes and roots, in the "
                 "same order") + ((_ADVISORY_ALLTOALL if kinds == {Op.ALLTOALL} else _ADVISORY) if advisory else ""),
        advisory=advisory,
        detail={"differ": differ},
    )


def severity(finding: Finding) -> int:
    """Which of two mismatches found at one position of an interleaved comm is reported (the
    higher): calls of different kinds or roots (3) over an error of sizes only (2), over a
    warning (1, allreduces of different sizes, which the contract lets meet), over an
    unknown (0). Both engines keep the most severe they find (docs/codes.md, SP202)."""
    if finding.kind is not FindingKind.COLLECTIVE_MISMATCH:
        return 0
    if finding.advisory:
        return 1
    return 3 if set(finding.detail.get("differ", ())) & {"kind", "root"} else 2


WORST = 3
"""The highest `severity`: nothing found later at that position replaces it."""


def _pair_mismatch(program: Program, comm: int, send: Statement, recv: Statement) -> Finding | None:
    if _size(program, send) == _size(program, recv):
        return None
    return Finding(
        FindingKind.COLLECTIVE_MISMATCH,
        f"send of {_size(program, send)} bytes (line {send.span.line}) meets a recv of {_size(program, recv)} bytes "
        f"(line {recv.span.line}) on comm `{program.comms[comm].name}`",
        (send.index, recv.index),
        help="a send and its matching recv must move the same number of bytes" + _ADVISORY,
        advisory=True,  # the contract pairs the k-th send with the k-th recv, whatever they move
    )


def meeting_place(statement: Statement) -> tuple:
    """Where a call's groups are counted: its comm's collective calls, or the sends from A
    to B with their recvs (the two count apart). With a position, `met_position`."""
    if statement.op not in (Op.SEND, Op.RECV):
        return ("call", statement.comm)
    s = statement
    return ("pair", s.comm, (s.rank_stream, s.peer) if s.op is Op.SEND else (s.peer, s.rank_stream))


def met_position(program: Program, group) -> tuple:
    """Which position a group of an interleaved comm formed at: the comm's k-th collective
    call, or the k-th send from A to B with its recv."""
    return meeting_place(program.statements[group.members[0]]) + (group.position,)


def met_mismatch(program: Program, members: tuple[int, ...], position: int) -> Finding | None:
    """The calls that met in one group of an interleaved comm (found by a run), if they
    disagree: the same check as `mismatches`, at the group the run formed."""
    calls = [program.statements[m] for m in members]
    if calls[0].op in (Op.SEND, Op.RECV):
        if len(calls) != 2:
            return None
        send, recv = sorted(calls, key=lambda s: s.op is not Op.SEND)
        return _pair_mismatch(program, calls[0].comm, send, recv)
    return _calls_mismatch(program, calls[0].comm, position, calls)


def mismatches(program: Program) -> tuple[Finding, ...]:
    findings: list[Finding] = []
    interleaved = interleaved_comms(program)
    sequences: dict[tuple[int, int], list[Statement]] = defaultdict(list)
    for s in program.statements:  # (sends and recvs pair apart: checked below, per pair)
        if s.operation.collective and not s.operation.pairwise and s.stream is not None:
            sequences[(s.comm, s.rank_stream)].append(s)
    for comm in program.comms:
        if comm.index in interleaved:
            continue
        rows = [sequences.get((comm.index, m), []) for m in comm.members]
        for k in range(max((len(r) for r in rows), default=0)):
            found = _calls_mismatch(program, comm.index, k, [r[k] for r in rows if k < len(r)], rows)
            if found is not None:
                findings.append(found)
    for group in program.groups:
        if group.kind is GroupKind.SENDRECV and group.complete and group.comm not in interleaved:
            found = _pair_mismatch(program, group.comm, *(program.statements[m] for m in group.members))
            if found is not None:
                findings.append(found)
    return tuple(findings)


def missing_member(program: Program, statement: Statement, position: int) -> str:
    """Why a call whose group lacks a member never completes, in the words of its kind: the
    k-th send from A to B meets the k-th recv on B from A, not a collective call."""
    comm = program.comms[statement.comm].name if statement.comm is not None else "?"
    if statement.op in (Op.SEND, Op.RECV) and statement.peer is not None:
        peer = program.streams[statement.peer].name
        if statement.op is Op.SEND:
            return f"its send {position + 1} to `{peer}` on comm `{comm}` has no matching recv"
        return f"its recv {position + 1} from `{peer}` on comm `{comm}` has no matching send"
    return f"its collective call {position + 1} on comm `{comm}` is missing a member"
