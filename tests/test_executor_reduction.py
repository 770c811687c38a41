"""Partial-order reduction changes how many states are explored, never the verdict.

Random programs with every kind of statement (shared streams and events across threads,
flag events with resets, notifies, syncs, pageable copies, alloc/free, hardware queues, the
legacy stream) are explored with and without reduction; races, dead uses and the deadlock
verdict must agree exactly.
"""

from __future__ import annotations

from hypothesis import HealthCheck, assume, given, settings

from checker.executor.explore import explore
from checker.frontend import load_text

from test_executor_strategies import programs


def verdict(result):
    return (set(result.race_pairs()), {(u.statement, u.kind) for u in result.dead_uses},
            bool(result.deadlocks))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_reduction_preserves_verdicts(text):
    loaded = load_text(text)
    assert loaded.program is not None, (text, loaded.diagnostics)
    full = explore(loaded.program, max_states=100_000, reduce=False)
    assume(full.complete)
    reduced = explore(loaded.program, max_states=100_000, reduce=True)
    assert reduced.complete
    assert reduced.states <= full.states
    assert verdict(reduced) == verdict(full), text
