"""What the SMT engine spent its time on, for benchmarks (`bench/bench_smt_scale.py`).

Counters of the latest `analyze` calls in this process, summed over its jobs (the workers
send theirs back). Nothing reads them during an analysis; they never change a result.
"""

from __future__ import annotations

FIELDS = ("steps", "rounds", "candidates", "sat", "unsat", "unknowns", "runs", "run_answers",
          "setup", "races", "lifetimes", "deadlock", "mismatches", "slowest", "symmetric")

_current: dict = {}


def reset() -> None:
    _current.clear()
    _current.update({name: 0 for name in FIELDS})
    _current["deadlock_how"] = "not asked"


def add(record: dict) -> None:
    if not _current:
        reset()
    for name, value in record.items():
        if name == "slowest":
            _current[name] = max(_current.get(name, 0), value)
        elif name == "deadlock_how":
            if value != "not asked":
                _current[name] = value
        elif name in ("steps", "rounds"):
            _current[name] = max(_current.get(name, 0), value)
        else:
            _current[name] = _current.get(name, 0) + value


def snapshot() -> dict:
    if not _current:
        reset()
    return dict(_current)
