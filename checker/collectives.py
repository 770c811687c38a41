"""Collective mismatch (SP202): members of a comm disagree at the same position.

This is decided from the program text alone: collectives match by position, so what meets
at position k of a comm is fixed before anything runs.
"""

from __future__ import annotations

from collections import defaultdict

from checker.findings import Finding, FindingKind
from checker.ir import GroupKind, Op, Program, Statement


def _size(statement: Statement) -> int:
    """The element count every member must agree on, in bytes: what the call reads (in
    place: its buffer); a broadcast's non-root member only receives."""
    access = statement.accesses[0]
    return access.end - access.start


def _label(program: Program, s: Statement) -> str:
    if s.operation.pairwise:
        direction = "to" if s.op is Op.SEND else "from"
        return f"{s.op.value} {direction} `{program.streams[s.peer].name}` of {_size(s)} bytes"
    root = f" rooted at `{program.streams[s.root].name}`" if s.root is not None else ""
    return f"{s.op.value} of {_size(s)} bytes{root}"


def mismatches(program: Program) -> tuple[Finding, ...]:
    findings: list[Finding] = []
    sequences: dict[tuple[int, int], list[Statement]] = defaultdict(list)
    for s in program.statements:
        if s.operation.collective and s.stream is not None:
            sequences[(s.comm, s.stream)].append(s)
    for comm in program.comms:
        rows = [sequences.get((comm.index, m), []) for m in comm.members]
        for k in range(max((len(r) for r in rows), default=0)):
            at_k = [r[k] for r in rows if k < len(r)]
            kinds = {s.op for s in at_k}
            matched = [s for s in at_k if not s.operation.pairwise]
            sizes = {_size(s) for s in matched}
            roots = {s.root for s in matched}
            if matched and (len(kinds) > 1 or len(sizes) > 1 or len(roots) > 1):
                parts = "; ".join(f"`{program.streams[s.stream].name}` issues {_label(program, s)} (line {s.span.line})" for s in at_k)
                findings.append(Finding(
                    FindingKind.COLLECTIVE_MISMATCH,
                    f"collective mismatch at position {k} of comm `{comm.name}`: {parts}",
                    tuple(s.index for s in at_k),
                    help="every member of a comm must issue the same collectives, with the same sizes and roots, in the same order",
                ))
    for group in program.groups:
        if group.kind is GroupKind.SENDRECV and group.complete:
            send, recv = (program.statements[m] for m in group.members)
            if _size(send) != _size(recv):
                findings.append(Finding(
                    FindingKind.COLLECTIVE_MISMATCH,
                    f"send of {_size(send)} bytes (line {send.span.line}) meets a recv of {_size(recv)} bytes (line {recv.span.line}) on comm `{program.comms[group.comm].name}`",
                    (send.index, recv.index),
                    help="a send and its matching recv must move the same number of bytes",
                ))
    return tuple(findings)
