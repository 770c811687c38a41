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


@given(st.integers(min_value=0, max_value=1 << 5000), st.integers(min_value=0, max_value=5000))
def test_bits_of_narrow_and_wide_masks_are_the_set_bits_lowest_first(mask: int, shift: int) -> None:
    from checker.executor.state import bits

    for value in (mask, mask << shift, mask & (mask >> 3)):
        expected = [k for k in range(value.bit_length()) if value >> k & 1]
        assert list(bits(value)) == expected


def test_a_statement_with_many_accesses_gets_the_masks_its_accesses_make(monkeypatch) -> None:
    """`data._per_program` sets the bits of a statement with many accesses in a byte array:
    the same masks as OR-ing each access's (here for every statement, a collective's reads
    included)."""
    from checker.executor import data
    from checker.ir import Op

    program = load_text("""device d[2]
buffer x[300] 64B on d[0]
buffer g[2] 1KiB on d
stream s[2] on d
comm w = { s[0], s[1] }
thread t {
  s[0]: kernel a writes x[3] reads x[4] 1us
  s[0]: allreduce w g[0] 1us
  s[1]: allreduce w g[1] 1us
  s[0]: kernel b reads x 1us
}
""", "many.sched").program
    machine = Machine(program)
    layout = machine.layout
    assert max(len(s.accesses) for s in program.statements) > data.MANY_ACCESSES  # (both ways run)
    expected_reads, expected_writes = [], []
    for statement in program.statements:
        r = w = 0
        for access in statement.accesses:
            mask = layout.mask(access.memory, access.start, access.end)
            w |= mask if access.write else 0
            r |= mask if not access.write or statement.op is Op.ALLREDUCE else 0
        expected_reads.append(r)
        expected_writes.append(w)
    for many in (data.MANY_ACCESSES, 0):
        monkeypatch.setattr(data, "MANY_ACCESSES", many)
        data._PER_PROGRAM.clear()
        _, reads, writes = data._per_program(machine)
        assert (reads, writes) == (expected_reads, expected_writes)
