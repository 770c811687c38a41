"""A cheap must-happen-before relation, to ask Z3 only where the order is truly open.

Its edges are exactly the conjuncts of the encoding that say, with no condition, "step x
happened before now" (program order, enqueue before start, stream order within a thread,
host syncs on the thread's own earlier tasks, statically bound snapshot waits, ...). Each is
required of every execution, so if x reaches y through them, every execution that takes y
took x before it. Steps on a cycle of these edges, and steps after them, never happen.
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx

from checker.smt.encode import Encoding


@dataclass(frozen=True, slots=True)
class MustOrder:
    ancestors: tuple[int, ...]
    """Bitset per step id: the steps that must precede it."""
    impossible: frozenset[int]
    """Steps that no execution takes."""

    def precedes(self, first: int, second: int) -> bool:
        """Every execution that takes `second` took `first` strictly before it."""
        return second in self.impossible or bool((self.ancestors[second] >> first) & 1)


def must_order(encoding: Encoding) -> MustOrder:
    count = len(encoding.steps)
    graph = nx.DiGraph()
    graph.add_nodes_from(range(count))
    for step in range(count):
        for conjunct in encoding.own_condition(step):
            if conjunct.formula is False:
                graph.add_edge(step, step)
            elif conjunct.after is not None:
                graph.add_edge(conjunct.after, step)
    condensed = nx.condensation(graph)
    ancestors = [0] * count
    impossible: set[int] = set()
    component_bits: dict[int, int] = {}
    dead_components: set[int] = set()
    for component in nx.topological_sort(condensed):
        nodes = condensed.nodes[component]["members"]
        bits = 0
        dead = len(nodes) > 1 or any(graph.has_edge(n, n) for n in nodes)
        for parent in condensed.predecessors(component):
            bits |= component_bits[parent]
            for node in condensed.nodes[parent]["members"]:
                bits |= 1 << node
            if parent in dead_components:
                dead = True
        component_bits[component] = bits
        if dead:
            dead_components.add(component)
            impossible |= set(nodes)
        for node in nodes:
            ancestors[node] = bits
    return MustOrder(tuple(ancestors), frozenset(impossible))
