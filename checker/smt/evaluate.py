"""The binding integers of an execution, in Python.

The encoding defines some integers by constraints rather than spelling every case out (the
latest candidate record before a wait, a call's position in its comm, the latest step a
group partner's rules require: `Encoding._latest_by_key`, `position`, `ready`). Checking
that the base admits a concrete execution (`Session.admits`) substitutes the execution's
times and these integers' values into the base; this module computes the values from the
times, as the definitions say.
"""

from __future__ import annotations


def binding_values(bindings, times: list[int]) -> list[int]:
    """The binding integers of the linear snapshot binding (`Encoding._latest_by_key`) given
    every step's time: per wait, the issue step of the latest candidate record issued before
    it, in (time, step id) order, and that record's time (none: -1 and 0). `bindings`: per
    wait, (its issue step, ((candidate issue step, whether it is issued before the wait:
    True, False, or None when their times decide it), ...)). Then, per call of an
    interleaved comm (`Encoding.position`), (its issue step, the other calls of its class in
    the same form, "position"): how many of them are issued before it. Then, per call whose
    own rules a group's other members read (`Encoding.ready`), (None, ((required step,
    True or (a, b): required when step a precedes step b), ...), "latest"): the latest
    required step and its time."""
    values = []
    for entry in bindings:
        own, candidates = entry[0], entry[1]
        if len(entry) > 2 and entry[2] == "latest":
            # (None, ((step, condition), ...), "latest"): the latest step, in (time, step id)
            # order, whose condition holds (True, or (a, b): step a before step b).
            chosen = max(((times[step], step) for step, when in candidates
                          if when is True or (times[when[0]], when[0]) < (times[when[1]], when[1])),
                         default=(0, -1))
            values += [chosen[1], chosen[0]]
            continue
        earlier = [(times[issue], issue) for issue, before in candidates
                   if (before if before is not None else (times[issue], issue) < (times[own], own))]
        if len(entry) > 2:
            values.append(len(earlier))
            continue
        chosen = max(earlier, default=(0, -1))
        values += [chosen[1], chosen[0]]
    return values
