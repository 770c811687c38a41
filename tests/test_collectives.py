"""Collective mismatch (SP202) over every collective kind: at each position of a comm, the
members must call the same collective with the same size and the same root."""

from __future__ import annotations

import pytest

from checker.analyze import check_loaded
from checker.collectives import mismatches
from checker.findings import FindingKind
from checker.frontend import load_text

HEADER = """device d0 { compute 1 comm 1 }
device d1 { compute 1 comm 1 }
buffer a0 1MiB on d0
buffer b0 2MiB on d0
buffer a1 1MiB on d1
buffer b1 2MiB on d1
stream c0 on d0
stream c1 on d1
comm world = { c0, c1 }
"""


def _mismatches(rank0: str, rank1: str):
    loaded = load_text(HEADER + f"thread r0 {{\n  {rank0}\n}}\nthread r1 {{\n  {rank1}\n}}\n")
    assert loaded.program is not None, loaded.diagnostics
    return loaded.program, mismatches(loaded.program)


@pytest.mark.parametrize("rank0, rank1", [
    ("c0: allgather world b0 <- a0", "c1: allgather world b1 <- a1"),
    ("c0: reducescatter world a0 <- b0", "c1: reducescatter world a1 <- b1"),
    ("c0: alltoall world a0", "c1: alltoall world a1"),
    ("c0: broadcast world root c0 a0", "c1: broadcast world root c0 a1"),
    ("c0: reduce world root c1 a0", "c1: reduce world root c1 b1 <- a1"),
])
def test_matching_calls_are_no_mismatch(rank0, rank1):
    _, found = _mismatches(rank0, rank1)
    assert found == ()


@pytest.mark.parametrize("rank0, rank1, words", [
    ("c0: allgather world b0 <- a0", "c1: allreduce world a1", ("allgather", "allreduce")),
    ("c0: allreduce world a0", "c1: allreduce world b1", ("1048576 bytes", "2097152 bytes")),
    ("c0: broadcast world root c0 a0", "c1: broadcast world root c1 a1", ("rooted at `c0`", "rooted at `c1`")),
    ("c0: reduce world root c0 a0", "c1: allreduce world a1", ("reduce", "allreduce")),
    ("c0: send world to c1 a0", "c1: allreduce world a1", ("send", "allreduce")),
])
def test_disagreeing_calls_are_sp202(rank0, rank1, words):
    program, found = _mismatches(rank0, rank1)
    assert len(found) == 1
    (finding,) = found
    assert finding.kind is FindingKind.COLLECTIVE_MISMATCH and finding.code.value == "SP202"
    assert {program.statements[i].span.line for i in finding.statements} == {11, 14}
    for word in words:
        assert word in finding.message


def test_a_mismatch_fails_check_and_names_both_lines():
    loaded = load_text(HEADER + "thread r0 {\n  c0: allgather world b0 <- a0\n}\n"
                                "thread r1 {\n  c1: allreduce world a1\n}\n")
    report = check_loaded(loaded)
    assert not report.passed
    assert any(f.kind is FindingKind.COLLECTIVE_MISMATCH for f in report.findings)


def test_broadcast_accesses_follow_the_root():
    """The root reads its source; a non-root member only receives (writes)."""
    program, _ = _mismatches("c0: broadcast world root c0 a0", "c1: broadcast world root c0 a1")
    root, other = (s for s in program.statements if s.comm is not None)
    assert [a.write for a in root.accesses] == [False]
    assert [a.write for a in other.accesses] == [True]
