"""A solver session over the base without the stream order across threads, added back where
a model breaks it.

Where two threads enqueue on one stream, each task of one waits for every task the other
enqueued before it: one implication per pair in each other's window (`NeedIf`), quadratic
in the tasks per stream. They are what makes race questions hard for Z3 (at 3 threads x 50
statements, 2.4x the time and 13 questions unknown at 5 s without this session, against
none with it; bench/README.md), while a question usually turns on a few of them. So this session
starts without them (`Encoding.relaxed_base`) and adds back, after each model, the ones
that the steps two racing starts relied on break, as read off the model's order the way
`Runner.needs` reads a run. It is sound both ways:

- "unsat" holds for the full base too, which has every fact the relaxed one has;
- a model counts only once no implication is broken among the steps the two starts relied
  on: those steps, in the model's order, are an execution the encoding itself admits
  (`Session.admits`, the full conditions), and the executor replays it like any other.

Each round either answers a question or adds at least one implication, so the rounds end;
with every implication added back the session is the full one.
"""

from __future__ import annotations

import z3

from checker.smt.encode import Encoding
from checker.smt.runs import Runner
from checker.smt.solve import Budget, Session

Window = tuple[int, int, int, int]
"""A stream-order implication as `Runner` compiles it: (the step, the step it waits for, u's
issue, x's issue)."""


class RelaxedSession(Session):
    """A `Session` over `Encoding.relaxed_base`. Its models need not be executions: read
    them with `broken` first. (`confirm` checks against the relaxed base; use `admits`.)"""

    def __init__(self, encoding: Encoding, runner: Runner, budget: Budget, deadline: float | None = None):
        base, windows = encoding.relaxed_base()
        super().__init__(encoding, budget, deadline, base)
        self.runner = runner
        issue = runner.issue_of_statement
        self.windows: dict[Window, z3.BoolRef] = {}
        """Each implication left out of the base, as the fact to add back."""
        for step, rules in windows.items():
            for rule, fact in rules:
                self.windows[(step, rule.step, issue[rule.u], issue[rule.x])] = fact
        self.added: set[Window] = set()

    @property
    def left_out(self) -> int:
        return len(self.windows) - len(self.added)

    def broken(self, order: list[int], roots: list[int]) -> tuple[set[Window], list[int]]:
        """The implications left out that `order` (a model's happened steps in order)
        breaks among the steps `roots` relied on, transitively; and those steps in order
        (an execution when nothing is broken). What a step relied on is what
        `Runner.relied` reads: each `Need`, the window whose task was enqueued first (broken
        when it did not complete before the step), the record a wait was bound to, the
        setter that left a state set."""
        runner = self.runner
        position = {step: k for k, step in enumerate(order)}
        seen: set[int] = set()
        stack = [root for root in roots if root in position]
        broken: set[Window] = set()
        while stack:
            step = stack.pop()
            if step in seen or step not in position:  # not in a model of the base: `admits` says no
                continue
            seen.add(step)
            here = position[step]
            for relied, choice in runner.relied(step, here, order, position):
                if relied is None:
                    continue
                if position.get(relied, here) < here:
                    stack.append(relied)
                elif choice is not None:
                    # Only a window can be broken in a model of the relaxed base (it holds
                    # every other item); its choice is (x's issue, u's issue).
                    key = (step, relied, choice[1], choice[0])
                    if key in self.windows and key not in self.added:
                        broken.add(key)
        return broken, [step for step in order if step in seen]

    def add(self, windows: set[Window]) -> int:
        """Adds implications back, for good (outside any question's scope); how many."""
        new = sorted(windows - self.added)
        self.added.update(new)
        self.solver.add(*[self.windows[key] for key in new])
        return len(new)
