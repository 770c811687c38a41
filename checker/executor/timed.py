"""Every run in time of a program whose threads race: does one end by a bound?

`simulate` takes one run in time. Where threads race (for a stream, an event, a flag or a
notify), every order of what may happen at one instant (a thread's next step, a stream head
acting) is a run of its own, and `expect makespan <= D` is met when one of them ends by D.
Random orders (`crosscheck.shortest_shuffled_run`) can show that one does; ruling it out
takes every run. `timed_search` explores them depth first, stateless as CHESS does: each run
re-runs the simulator (`simulate_choosing`) with the choices made so far, then takes
the next untried choice at the deepest point that has one. Three things keep it small:

* stream heads whose order changes nothing act without a choice (`_Simulator._quiet_heads`),
  and engine ties never branch (enqueued first is by instant, thread declared first, program
  order, whatever order the steps took);
* a run stops once no continuation of it can end by D (`earliest_end`: each thread's launches
  and host functions still to go, each stream's tasks still to run, one after another, each
  engine's work over its units);
* a choice point whose state (`state_key`: everything that decides what can still happen, and
  when) was explored to the end before, without a run that ends by D, is not explored again.

A run that ends by D is replayed by the executor, step by step, before it counts.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from enum import Enum

from checker.ir import Program
from checker.executor.machine import Machine
from checker.executor.replay import replay
from checker.executor.simulate import Simulation, _Simulator, simulate_choosing


STATEMENTS_UP_TO = 400
"""Programs past this many statements are not searched (`check`, `optimize`): each run
re-runs the program from its start."""

REMEMBERED = 200_000
"""Explored states kept at most (each holds the machine state): past it, states are explored
again when met again, which costs time, never soundness."""


class Outcome(Enum):
    MET = "met"
    """A run ends by the bound (`TimedSearch.run`, replayed by the executor)."""
    NOT_MET = "not met"
    """Every run was explored (or ruled out by `earliest_end`): none ends by the bound."""
    UNKNOWN = "unknown"
    """The time or the runs allowed ran out first (or a run did not replay: `unreplayed`)."""


@dataclass(frozen=True, slots=True)
class TimedSearch:
    outcome: Outcome
    runs: int
    """Runs started (each to its end, to a state explored before, or past the bound)."""
    finished: int
    """Runs that completed every statement (the others deadlocked or were cut short)."""
    cut: int
    """Runs stopped because no continuation could end by the bound."""
    run: Simulation | None = None
    """MET: the run that ends by the bound (with `least`, the one that ends first)."""
    least: bool = False
    """`run` ends first of every run in time (`least`: the search saw them all)."""
    unreplayed: str = ""
    """UNKNOWN because a run that ended by the bound did not replay step by step (why): a bug
    in the simulator or the executor, never a finding."""


class _Choices:
    """The `Chooser` of one run: replays `path`'s choices, then takes the first option at
    each new choice point (and records it on `path`)."""

    def __init__(self, path: list[list], limit: int, explored: set) -> None:
        self.path = path
        """Per choice point of the current run: [option taken, options, state key]."""
        self.limit = limit
        self.explored = explored
        self.depth = 0
        self.cut = False

    def pick(self, simulator: _Simulator, options: int) -> int | None:
        depth = self.depth
        self.depth += 1
        if depth < len(self.path):
            return self.path[depth][0]
        if not self.goes_on(simulator):
            return None
        key = simulator.state_key()
        if key in self.explored:
            return None
        self.path.append([0, options, key])
        return 0

    def goes_on(self, simulator: _Simulator) -> bool:
        if simulator.earliest_end() > self.limit:
            self.cut = True
            return False
        return True


def timed_search(program: Program, limit: int, seconds: float, max_runs: int = 1_000_000,
                 least: bool = False, reduce: bool = True, remember: bool = True) -> TimedSearch:
    """Whether some run in time of `program` ends by `limit` (ns), exploring every order of
    the steps that may go at one instant until one does, every run is seen, or `seconds`
    (or `max_runs` runs) have gone. With `least`, a run that ends by the limit lowers it to
    just below its makespan and the search goes on (branch and bound: what was explored or
    cut stays so under a lower limit), for the run that ends first. For tests,
    `reduce=False` tries the orders of quiet stream heads too (`_Simulator._quiet_heads`),
    `remember=False` explores states seen before again."""
    deadline = time.monotonic() + seconds
    machine = Machine(program)
    path: list[list] = []
    explored: set = set()
    runs = finished = cut = 0
    best = None
    while True:
        if runs >= max_runs or time.monotonic() > deadline:
            return TimedSearch(Outcome.MET if best else Outcome.UNKNOWN, runs, finished, cut, best)
        choices = _Choices(path, limit, explored)
        run = simulate_choosing(program, choices, reduce, machine)
        runs += 1
        cut += choices.cut
        if run is not None and not run.deadlocked:
            finished += 1
            if run.makespan <= limit:
                checked = replay(program, run.steps)
                if not (checked.ok and checked.finished):
                    return TimedSearch(Outcome.UNKNOWN, runs, finished, cut,
                                       unreplayed=checked.reason or "the replay left work unfinished")
                if not least:
                    return TimedSearch(Outcome.MET, runs, finished, cut, run)
                best, limit = run, run.makespan - 1
        while path:  # the deepest choice point with an option left
            point = path[-1]
            if point[0] + 1 < point[1]:
                point[0] += 1
                break
            if remember and len(explored) < REMEMBERED:
                explored.add(point[2])
            path.pop()
        else:
            if best is not None:
                return TimedSearch(Outcome.MET, runs, finished, cut, best, least=True)
            return TimedSearch(Outcome.NOT_MET, runs, finished, cut)
