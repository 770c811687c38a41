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

from strategies import specs
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


@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
@given(specs(shared_comms=True))
def test_reduction_preserves_verdicts_when_calls_meet_in_enqueue_order(text):
    """Comms called from several threads: which calls meet is captured at enqueue, so the
    steps reduction may take alone must still leave every meeting reachable."""
    loaded = load_text(text)
    assert loaded.program is not None, (text, loaded.diagnostics)
    for program in loaded.variants:
        full = explore(program, max_states=60_000, reduce=False)
        assume(full.complete)
        reduced = explore(program, max_states=60_000, reduce=True)
        assert reduced.complete
        assert verdict(reduced) == verdict(full), text
        assert len(reduced.mismatches) == len(full.mismatches), text  # one per comm position
