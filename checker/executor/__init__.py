"""The executor: the operational semantics of `docs/semantics.md`, step by step.

The second, independent backend over the IR (the SMT engine is the first). One state
machine (`machine.Machine`: `initial`, `enabled`, `apply`) drives every mode:

* `replay(program, witness)` walks a witness, checking each step; `confirm(program, finding)`
  checks the witness exhibits the finding and shows the corrupted bytes of a race
  (`confirm_all` does it for many findings, replaying once the races read off one run);
* `explore(program, max_states)` enumerates every interleaving (with partial-order
  reduction) and reports races, uses of dead memory and deadlocks with witnesses;
* `walk(program, seconds)` takes random executions of a program the solver refuses, and
  reports what they show (races, dead uses, a deadlock), never what they do not;
* `simulate(program)` runs the program in time on its engines and reports the makespan,
  per-task times, engine use, the critical path and the `Timing` of every statement (which
  `checker/report/` draws as a timeline); `timed_search(program, limit, seconds)` explores
  every run in time of a program whose threads race, for one that ends by `limit`.

Modules: `state.py` (State, the mutable Store, the update table and its two interpreters),
`layout.py` (memory segments), `machine.py` (the rules: blockers, enabled steps, effects),
which builds `reduction.py`'s tables (steps exploration may take alone) and explains itself
through `explain.py` (what a stuck statement waits for); `data.py` (abstract bytes for
replays); then the modes `explore.py`, `walks.py`, `replay.py`, `simulate.py` (and `timed.py` over it).
"""

from checker.executor.explore import Exploration, explore
from checker.executor.machine import IllegalStep, Machine, State, Transition
from checker.executor.replay import Confirmation, Replay, confirm, confirm_all, replay
from checker.executor.simulate import Simulation, simulate

__all__ = [
    "Confirmation",
    "Exploration",
    "IllegalStep",
    "Machine",
    "Replay",
    "Simulation",
    "State",
    "Transition",
    "confirm",
    "confirm_all",
    "explore",
    "replay",
    "simulate",
]
