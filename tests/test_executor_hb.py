"""Differential: exhaustive exploration against a happens-before oracle written from the contract.

For programs whose threads share buffers but not streams or events, the contract's ordering is
static: thread order, stream order, record->wait bindings, syncs and pageable copies. A race is
a conflicting pair that neither happens before the other. The explorer must find exactly those.
"""

from __future__ import annotations

import networkx as nx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checker.executor.explore import explore
from checker.frontend import load_text
from checker.ir import Op, SyncKind


@st.composite
def programs(draw):
    n_threads = draw(st.integers(1, 2))
    lines = ["device d { compute 2 copy 2 }", "buffer h 1MiB on host pinned",
             "buffer pg 1MiB on host", "buffer x[3] 1MiB on d"]
    for t in range(n_threads):
        lines += [f"stream t{t}s{k} on d" for k in range(2)]
        lines.append(f"event t{t}e[2]")
    for t in range(n_threads):
        lines.append(f"thread th{t} {{")
        for _ in range(draw(st.integers(1, 6 if n_threads == 2 else 8))):
            s = f"t{t}s{draw(st.integers(0, 1))}"
            kind = draw(st.sampled_from(
                ["kernel", "kernel", "copy", "record", "wait", "host", "sync", "syncev"]))
            a, b = draw(st.integers(0, 2)), draw(st.integers(0, 2))
            if kind == "kernel":
                rw = draw(st.sampled_from(["reads", "writes"]))
                lo = draw(st.sampled_from(["", "[0:512KiB]", "[256KiB:1MiB]"]))
                lines.append(f"  {s}: kernel k {rw} x[{a}]{lo}")
            elif kind == "copy":
                src, dst = draw(st.sampled_from(
                    [("h", f"x[{a}]"), (f"x[{a}]", "h"), ("pg", f"x[{a}]"), (f"x[{a}]", f"x[{b}]")]))
                if src != dst:
                    lines.append(f"  {s}: copy {dst} <- {src}")
            elif kind == "record":
                lines.append(f"  {s}: record t{t}e[{a % 2}]")
            elif kind == "wait":
                lines.append(f"  {s}: wait t{t}e[{a % 2}]")
            elif kind == "host":
                rw = draw(st.sampled_from(["reads", "writes"]))
                lines.append(f"  host f {rw} {draw(st.sampled_from(['h', 'pg']))}")
            elif kind == "sync":
                lines.append(f"  sync {s}")
            else:
                lines.append(f"  sync t{t}e[{a % 2}]")
        lines.append("}")
    return "\n".join(lines)


def oracle_races(program) -> set[tuple[int, int]]:
    g = nx.DiGraph()
    stmts = program.statements
    for s in stmts:
        g.add_node(("T", s.index))
        if s.stream is not None:
            g.add_node(("X", s.index))
            g.add_edge(("T", s.index), ("X", s.index))
    for thread in program.threads:
        seq = thread.statements
        last_on_stream: dict[int, int] = {}
        last_record: dict[int, int] = {}
        for k, i in enumerate(seq):
            s = stmts[i]
            if k:
                prev = stmts[seq[k - 1]]
                g.add_edge(("T", prev.index), ("T", i))
                if prev.blocking:
                    g.add_edge(("X", prev.index), ("T", i))
            if s.stream is not None:
                if s.stream in last_on_stream:
                    g.add_edge(("X", last_on_stream[s.stream]), ("X", i))
                last_on_stream[s.stream] = i
                if s.op is Op.RECORD:
                    last_record[s.event] = i
                if s.op is Op.WAIT and s.event in last_record:
                    g.add_edge(("X", last_record[s.event]), ("X", i))
            elif s.op is Op.SYNC:
                if s.sync is SyncKind.STREAM and s.target in last_on_stream:
                    g.add_edge(("X", last_on_stream[s.target]), ("T", i))
                if s.sync is SyncKind.EVENT and s.target in last_record:
                    g.add_edge(("X", last_record[s.target]), ("T", i))
    closure = {n: nx.descendants(g, n) for n in g.nodes}

    def node(i):
        return ("X", i) if stmts[i].stream is not None else ("T", i)

    races = set()
    for a in stmts:
        for b in stmts:
            if a.index >= b.index:
                continue
            if not any(x.conflicts(y) for x in a.accesses for y in b.accesses):
                continue
            na, nb = node(a.index), node(b.index)
            if nb not in closure[na] and na not in closure[nb]:
                races.add((a.index, b.index))
    return races


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_explore_finds_exactly_the_unordered_conflicts(text):
    loaded = load_text(text)
    assert loaded.program is not None, (text, loaded.diagnostics)
    program = loaded.program
    result = explore(program, max_states=300_000)
    assert result.complete
    assert not result.deadlocks and not result.dead_uses
    assert set(result.race_pairs()) == oracle_races(program), text
