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


def analyze(program: Program, timeout: float = 10.0, rlimit: int | None = None) -> tuple[Finding, ...]:
    """Every race, use-after-free / use-before-alloc and deadlock of `program`.

    `timeout` (seconds) and `rlimit` (Z3 resource units, None for none) bound each query.
    A query the solver cannot decide within them is reported as a FindingKind.UNKNOWN
    finding (SP301) naming the question, so an undecided program never looks clean.
    Races are grouped per pair of source statements (`instances` counts the racing
    instance pairs); every finding but an unknown carries a witness.
    """
    try:
        return Analysis(program, Budget(timeout, rlimit)).run()
    except (RecursionError, MemoryError, z3.Z3Exception) as error:
        # Resource exhaustion while building formulas is an undecided answer, not a crash.
        return (Finding(
            FindingKind.UNKNOWN,
            f"the solver could not analyse this program ({type(error).__name__}: {error})",
            (),
            help="make the spec smaller, or check it with --exhaustive",
            detail={"query": "all", "reason": type(error).__name__},
        ),)
