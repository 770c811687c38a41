"""The one place that calls Z3's `check()`; answers are values, models become witnesses.

A `Session` holds one program's base assertions in one solver and asks each query inside
its own push/pop scope, so everything learnt about the base is reused across queries.
Every check runs under a wall-clock timeout and, when given, an rlimit (a budget that
stops at the same point on every machine; z3-solver 5.4 reports a spent rlimit as
"canceled" and a timeout as "timeout"). Unknown is a result, never an exception.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import z3

from checker.smt.encode import Encoding, to_z3
from checker.witness import Witness


@dataclass(frozen=True, slots=True)
class Budget:
    """Per-query limits: seconds of wall clock, and Z3 resource units (None: no rlimit);
    and `total`, the seconds all queries of one program may take together (None: no limit),
    so that a program with thousands of open pairs cannot run for hours."""

    timeout: float = 10.0
    rlimit: int | None = None
    total: float | None = None


OUT_OF_TIME = "the total solver budget was spent before this question was asked"

@dataclass(frozen=True, slots=True)
class Sat:
    """The query holds in some execution. `order` lists every happened step id in execution
    order (the whole model, also past the witness's cut): other questions can be read off it."""

    witness: Witness
    order: tuple[int, ...]
    model: object = field(default=None, compare=False, repr=False)
    """The Z3 model of a solver's verdict, to read other questions' formulas in
    (`Session.holds`); none for a concrete run's. Never leaves `checker.smt`."""


@dataclass(frozen=True, slots=True)
class Unsat:
    """No execution satisfies the query."""


@dataclass(frozen=True, slots=True)
class Unknown:
    """The solver gave up (budget spent, timeout, or an internal failure)."""

    reason: str


Verdict = Sat | Unsat | Unknown


def _substitute(term: z3.ExprRef, pairs: list[tuple]) -> z3.ExprRef:
    """`z3.substitute` without its per-pair debug checks (the pairs are variables and
    constants of the same sorts, made here), which cost more than the substitution."""
    count = len(pairs)
    sources, targets = (z3.Ast * count)(), (z3.Ast * count)()
    for k, (source, target) in enumerate(pairs):
        sources[k], targets[k] = source.as_ast(), target.as_ast()
    return z3.z3._to_expr_ref(z3.Z3_substitute(term.ctx.ref(), term.as_ast(), count, sources, targets), term.ctx)


def _reason(said: str, limit: float, budget: Budget) -> str:
    """Why Z3 gave up, in the user's words: z3 reports a timeout as "canceled" (or "timeout")
    when no rlimit is set, and a spent rlimit as "canceled" too."""
    if said in ("canceled", "timeout"):
        if budget.rlimit is None or said == "timeout":
            return f"no answer within {limit:g} s"
        return f"no answer within {limit:g} s or {budget.rlimit:,} resource units"
    return said or "unknown"


def _integers(model: z3.ModelRef, terms: list[z3.ArithRef]) -> list[int]:
    """`model.eval(term, model_completion=True).as_long()` per term, without z3py's wrapping
    of each value in a Python object (most of the time of reading a model of a large
    program)."""
    ctx = model.ctx.ref()
    value = (z3.Ast * 1)()
    values = []
    for term in terms:
        if not z3.Z3_model_eval(ctx, model.model, term.as_ast(), True, value):
            raise z3.Z3Exception("failed to evaluate a time in the model")
        z3.Z3_inc_ref(ctx, value[0])
        try:
            values.append(int(z3.Z3_get_numeral_string(ctx, value[0])))
        finally:
            z3.Z3_dec_ref(ctx, value[0])
    return values


def _conjunction(facts: list) -> z3.BoolRef:
    """`z3.And` of Boolean terms without its per-argument coercion (they are Booleans)."""
    ctx = facts[0].ctx
    arguments = (z3.Ast * len(facts))(*(fact.as_ast() for fact in facts))
    return z3.BoolRef(z3.Z3_mk_and(ctx.ref(), len(facts), arguments), ctx)


class Session:
    """One solver for one program; each `ask` is scoped so the base is shared. `base`: the
    facts the solver holds (default `Encoding.base()`; the relaxed session passes fewer).
    `fresh`: each `ask` gets a new solver over the base instead. Z3 simplifies the facts of a
    solver that was never scoped before it searches, which on the shorter programs of
    `prefix.py` finds executions about twice as fast (bench/README.md); a session that asks
    many questions of one program keeps what it learned instead."""

    def __init__(self, encoding: Encoding, budget: Budget, deadline: float | None = None,
                 base: list[z3.BoolRef] | None = None, fresh: bool = False):
        self.encoding = encoding
        self.budget = budget
        self.base = encoding.base() if base is None else base
        self.fresh = fresh
        self._solver = None if fresh else self._new_solver()
        self.checks = 0
        self._constants: dict = {}
        if deadline is None and budget.total is not None:
            deadline = time.time() + budget.total
        self.deadline = deadline
        """Wall-clock time (`time.time()`) after which no question is asked: shared by every
        session of one program, also across worker processes."""

    @property
    def solver(self) -> z3.Solver:
        """The scoped solver: every `ask` unless `fresh`, `confirm`, and the facts the
        relaxed session adds back. A fresh session makes it only if `confirm` needs it."""
        if self._solver is None:
            self._solver = self._new_solver()
        return self._solver

    def _new_solver(self) -> z3.Solver:
        solver = z3.Solver()
        solver.set("timeout", max(1, int(self.budget.timeout * 1000)))
        if self.budget.rlimit is not None:
            solver.set("rlimit", max(1, int(self.budget.rlimit)))
        solver.add(*self.base)
        return solver

    def ask(self, query, cut: tuple[int, ...] = (), timeout: float | None = None) -> Verdict:
        """Is `query` satisfiable on top of the base? On SAT, the witness is the happened
        steps in time order, cut after the latest of the `cut` steps when given. `timeout`:
        seconds for this question, when fewer than the budget's."""
        if query is False:
            return Unsat()
        limit = self.budget.timeout if timeout is None else min(timeout, self.budget.timeout)
        if self.deadline is not None:
            left = self.deadline - time.time()
            if left <= 0:
                return Unknown(OUT_OF_TIME)
            limit = min(limit, left)
        solver = self._new_solver() if self.fresh else self.solver
        solver.set("timeout", max(1, int(limit * 1000)))
        if not self.fresh:
            solver.push()
        try:
            solver.add(to_z3(query))
            self.checks += 1
            answer = solver.check()
            if answer == z3.sat:
                return self._decode(solver.model(), cut)
            if answer == z3.unsat:
                return Unsat()
            return Unknown(_reason(solver.reason_unknown(), limit, self.budget))
        except z3.Z3Exception as error:
            return Unknown(f"solver error: {error}")
        finally:
            if not self.fresh:
                solver.pop()

    def _decode(self, model: z3.ModelRef, cut: tuple[int, ...]) -> Sat:
        encoding = self.encoding
        times = _integers(model, encoding.time)
        # The execution order is (time, step index): ties are broken by index, as the
        # encoding's `precedes` says.
        happened = sorted(
            (i for i, value in enumerate(times) if value < encoding.horizon),
            key=lambda i: (times[i], i),
        )
        shown = happened
        position = {step: k for k, step in enumerate(happened)}
        ends = [position[i] for i in cut if i in position]
        if ends:
            shown = happened[: max(ends) + 1]
        return Sat(encoding.witness(shown), tuple(happened), model)

    def confirm(self, order: list[int]) -> Sat | None:
        """The execution `order` (step ids) as a model of the base, every time fixed: a Sat
        whose witness is the whole order, or None if the encoding does not admit it. (The
        tests' oracle for what the pipeline reads off runs without a model.)"""
        encoding = self.encoding
        position = {step: k for k, step in enumerate(order)}
        fixed = [t == position.get(i, encoding.horizon) for i, t in enumerate(encoding.time)]
        self.solver.push()
        try:
            self.solver.add(*fixed)
            self.checks += 1
            if self.solver.check() != z3.sat:
                return None
            verdict = self._decode(self.solver.model(), ())
        except z3.Z3Exception:
            return None
        finally:
            self.solver.pop()
        return verdict if list(verdict.order) == list(order) else None

    def admits(self, order: list[int]) -> Sat | None:
        """Like `confirm`, without a model: the base (the part of it that the steps of
        `order` make binding: `Encoding.facts_of`) must hold for the times of `order` and the
        binding integers they define, once the values are substituted (`substituted`). The
        analysis checks runs on the executor's machine instead (`Analysis.admits`); tests
        hold the two to the same answers. A Sat whose witness is the whole order, or None."""
        encoding = self.encoding
        facts = encoding.facts_of(order)
        if facts is None:
            return None
        position = {step: k for k, step in enumerate(order)}
        times = [position.get(i, encoding.horizon) for i in range(encoding.horizon)]
        admitted = self.substituted(facts, times, position, encoding.binding_values(times))
        return Sat(encoding.witness(order), tuple(order)) if admitted else None

    def substituted(self, facts: list, times: list[int], position: dict, bindings: list) -> bool:
        """Whether `facts` hold once the values are substituted and simplified (under an
        rlimit, checked by a solver within the same limits instead, so that the rlimit bounds
        this work too)."""
        encoding = self.encoding
        values = [(t, self._constant(at)) for t, at in zip(encoding.time, times)]
        values += [(h, self._constant(i in position)) for i, h in enumerate(encoding.hap)]
        values += [(v, self._constant(at)) for v, at in bindings]
        rest = z3.Solver()
        rest.set("timeout", max(1, int(self.budget.timeout * 1000)))
        if self.budget.rlimit is not None:
            rest.set("rlimit", max(1, int(self.budget.rlimit)))
        try:
            left = _substitute(_conjunction(facts), values) if facts else z3.BoolVal(True)
            if self.budget.rlimit is None:
                left = z3.simplify(left)
            if not z3.is_true(left):
                rest.add(left)
                self.checks += 1
                if rest.check() != z3.sat:
                    return False
        except z3.Z3Exception:
            return False
        return True

    def _constant(self, value: int | bool):
        """A Z3 integer or Boolean constant, made once per session."""
        key = (type(value), value)
        made = self._constants.get(key)
        if made is None:
            made = self._constants[key] = z3.BoolVal(value) if isinstance(value, bool) else z3.IntVal(value)
        return made

    def holds(self, verdict: Sat, formula) -> bool:
        """Evaluate a formula over the encoding's variables in a SAT verdict's model."""
        if formula is True or formula is False:
            return formula
        value = verdict.model.eval(to_z3(formula), model_completion=True)
        return z3.is_true(value)
