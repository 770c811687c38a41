"""The SMT backend: races, use-after-free / use-before-alloc and deadlocks, decided by Z3.

`analyze` is the whole public surface. It encodes the program once (`encode.py`), asks
every question on one solver session (`solve.py`, the only caller of `check()`), and
returns findings whose witnesses are step sequences in `checker.witness` terms. No Z3
object leaves this package.
"""

from __future__ import annotations

import z3

from checker.findings import Finding, FindingKind
from checker.ir import Program
from checker.smt.queries import Analysis
from checker.smt.solve import Budget

__all__ = ["analyze"]


MAX_STATEMENTS = 1500
"""Programs larger than this are not encoded: the encoding grows quadratically where threads
share streams and events, and the answer would be an unknown after a long wait anyway."""


def analyze(program: Program, timeout: float = 10.0, rlimit: int | None = None,
            total: float | None = None) -> tuple[Finding, ...]:
    """Every race, use-after-free / use-before-alloc and deadlock of `program`.

    `timeout` (seconds) and `rlimit` (Z3 resource units, None for none) bound each query.
    A query the solver cannot decide within them is reported as a FindingKind.UNKNOWN
    finding (SP301) naming the question, so an undecided program never looks clean.
    Races are grouped per pair of source statements (`instances` counts the racing
    instance pairs); every finding but an unknown carries a witness. `total` bounds the
    seconds of all queries together; questions left when it runs out become one unknown.
    """
    if len(program.statements) > MAX_STATEMENTS:
        return (Finding(
            FindingKind.UNKNOWN,
            f"the program has {len(program.statements):,} statements whose order depends on the "
            f"interleaving; the solver checks at most {MAX_STATEMENTS:,}",
            (),
            help="check a shorter unrolling of the loops (the bug usually shows in two or three "
                 "iterations), or split the threads",
            detail={"query": "all", "reason": "too large"},
        ),)
    try:
        return Analysis(program, Budget(timeout, rlimit, total)).run()
    except (RecursionError, MemoryError, z3.Z3Exception) as error:
        # Resource exhaustion while building formulas is an undecided answer, not a crash.
        return (Finding(
            FindingKind.UNKNOWN,
            f"the solver could not analyse this program ({type(error).__name__}: {error})",
            (),
            help="make the spec smaller, or check it with --exhaustive",
            detail={"query": "all", "reason": type(error).__name__},
        ),)
