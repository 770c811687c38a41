"""The state machine: `enabled` lists exactly the steps `apply` accepts, states are hashable
values, and odd programs (empty, host only) behave."""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checker.executor.explore import explore
from checker.executor.machine import IllegalStep, Machine
from checker.executor.simulate import simulate
from checker.frontend import load_text
from checker.witness import Step, StepKind

from test_executor_strategies import programs


def _every_step(machine):
    for kind in StepKind:
        for i in range(machine.n):
            yield Step(kind, i)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(), st.integers(0, 2**32 - 1))
def test_enabled_is_exactly_what_apply_accepts(text, seed):
    program = load_text(text).program
    machine = Machine(program)
    rng = random.Random(seed)
    state = machine.initial()
    for _ in range(60):
        enabled = set(machine.enabled(state))
        for step in _every_step(machine):
            group = machine.group_of[step.statement]
            if step.kind is StepKind.START and group is not None and step.statement != group.members[0]:
                continue  # another member may name the group's start; enabled lists the first
            try:
                machine.apply(state, step)
                accepted = True
            except IllegalStep as exc:
                accepted = False
                assert exc.reason
            assert accepted == (step in enabled), (step, text)
        if not enabled:
            assert machine.finished(state) or machine.stuck(state)
            break
        step = rng.choice(sorted(enabled, key=lambda s: (s.statement, s.kind.value)))
        nxt = machine.apply(state, step)
        assert nxt != state and hash(nxt) == hash(machine.apply(state, step))
        state = nxt


def test_empty_and_host_only_programs():
    empty = load_text("device d { compute 1 }\nthread main {\n}\n").program
    assert explore(empty).clean
    sim = simulate(empty)
    assert sim.makespan == 0 and not sim.deadlocked
    host = load_text("buffer h 1MiB on host\nthread a {\n  host f writes h 1ms\n}\n"
                     "thread b {\n  host g reads h 2ms\n}\n").program
    result = explore(host)
    assert result.complete and len(result.races) == 1
    assert simulate(host).makespan == 2_000_000


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 1), st.booleans(), st.integers(0, 3), st.integers(1, 4)),
                min_size=1, max_size=14))
def test_conflict_masks_are_the_pairwise_conflicts(accesses):
    """`Machine.conflicts` (per memory: every pair when writers abound, else each writer's
    pairs only) against `Machine.conflict`, which compares two statements' accesses directly."""
    lines = ["device d", "stream s on d", "buffer x[2] 16B on d", "thread t {"]
    for memory, write, low, length in accesses:
        lines.append(f"  s: kernel k {'writes' if write else 'reads'} x[{memory}][{low}:{min(16, low + length)}]")
    program = load_text("\n".join(lines + ["}"])).program
    machine = Machine(program)
    n = len(program.statements)
    for i in range(n):
        expected = sum(1 << j for j in range(n) if machine.conflict(i, j))
        assert machine.conflicts[i] == expected
