"""Evaluate the encoding's formulas on one concrete assignment, in Python.

Reading a question's formula off an execution that has no Z3 model (a run's: dead uses,
`Analysis._dead_harvest`), and checking that the base admits an execution
(`Session.admits`, which tests hold the executor's step rules to), would substitute the
values into the Z3 terms and simplify them: 26 ms per execution of 700 steps. A term is
compiled here once into a Python function of the step times, the happened flags and the
binding integers; an evaluation is then a few hundred calls.

A term of a kind this module does not know is not compiled (`Compiler.source` returns None) and
the caller falls back to substitution, so the evaluator never guesses a meaning.
"""

from __future__ import annotations

from collections.abc import Callable

import z3

Fact = Callable[[list, list, list], bool]
"""A compiled Boolean term: called with step times, happened flags and binding integers."""

_COMPARE = {
    z3.Z3_OP_LE: "<=", z3.Z3_OP_LT: "<", z3.Z3_OP_GE: ">=", z3.Z3_OP_GT: ">", z3.Z3_OP_EQ: "==",
}
_ARITHMETIC = {z3.Z3_OP_ADD: "+", z3.Z3_OP_SUB: "-"}


def function(source: str) -> Fact:
    """The function a `Compiler.source` defines."""
    namespace: dict = {}
    exec(compile(source, "<encoding fact>", "exec"), namespace)  # noqa: S102 - generated here
    return namespace["fact"]


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


def assignment(order, horizon: int, bindings) -> tuple[list, list, list]:
    """The values the execution `order` gives a compiled fact's arguments: a step's time is
    its place in `order` (`horizon` if it is not in it), the happened flags, and the binding
    integers those times make (`bindings` as `binding_values` takes them)."""
    position = {step: k for k, step in enumerate(order)}
    times = [position.get(i, horizon) for i in range(horizon)]
    happened = [i in position for i in range(horizon)]
    return times, happened, binding_values(bindings, times)


def holds(facts, order: list[int], horizon: int, bindings) -> bool:
    """Whether every compiled fact holds for the execution `order` (`assignment`)."""
    values = assignment(order, horizon, bindings)
    return all(fact(*values) for fact in facts)


class _Unsupported(Exception):
    """A term kind outside what the encoding builds."""


class Compiler:
    """Compiles Z3 Boolean terms over the given variables into Python functions. `slots`
    maps each variable to where its value is read: ("T", i), ("H", i) or ("B", k).

    The terms are read through Z3's C API (z3py's objects cost most of the time otherwise).
    Atoms are remembered across terms by AST id, which is sound only while the terms stay
    alive: compile only terms their owner keeps (the encoding's facts)."""

    def __init__(self, slots: list[tuple[z3.ExprRef, str, int]], context: z3.Context):
        self.context = context.ref()
        self.leaves: dict[int, str] = {
            z3.Z3_get_ast_id(self.context, variable.as_ast()): f"{array}[{index}]"
            for variable, array, index in slots
        }
        """AST id -> the expression of a variable, numeral or atom (a comparison of leaves)."""
        self._alive: list[z3.ExprRef] = [variable for variable, _, _ in slots]
        """Every term read: an AST id names the same term only while the term is alive."""

    def compile(self, term: z3.ExprRef) -> Fact | None:
        """`term` as a Python function, or None if it has a kind not handled here."""
        source = self.source(term)
        return None if source is None else function(source)

    def source(self, term: z3.ExprRef) -> str | None:
        """The Python source of `term`'s function (`fact(T, H, B)`), or None if it has a
        kind not handled here."""
        self._alive.append(term)
        lines: list[str] = []
        names: dict[int, str] = {}
        try:
            root = self._emit(term.as_ast(), lines, names)
        except (_Unsupported, RecursionError):
            return None
        return "def fact(T, H, B):\n" + "".join(f"    {line}\n" for line in lines) + f"    return {root}\n"

    def _emit(self, ast, lines: list[str], names: dict[int, str]) -> str:
        """An expression for the term `ast`: a leaf's own; other terms get a local each, named
        v<k> (the term is a DAG: shared parts are computed once, and nesting stays shallow)."""
        context = self.context
        key = z3.Z3_get_ast_id(context, ast)
        done = self.leaves.get(key) or names.get(key)
        if done is not None:
            return done
        kind = z3.Z3_get_ast_kind(context, ast)
        if kind == z3.Z3_NUMERAL_AST:
            try:  # an integer; anything else (a rational) is not compiled
                expression = self.leaves[key] = str(int(z3.Z3_get_numeral_string(context, ast)))
            except ValueError:
                raise _Unsupported(ast) from None
            return expression
        if kind != z3.Z3_APP_AST:
            raise _Unsupported(ast)
        operator = z3.Z3_get_decl_kind(context, z3.Z3_get_app_decl(context, ast))
        if operator == z3.Z3_OP_TRUE:
            return "True"
        if operator == z3.Z3_OP_FALSE:
            return "False"
        arguments = [self._emit(z3.Z3_get_app_arg(context, ast, k), lines, names)
                     for k in range(z3.Z3_get_app_num_args(context, ast))]
        if operator in _COMPARE and len(arguments) == 2:
            expression = f"{arguments[0]} {_COMPARE[operator]} {arguments[1]}"
            if not any(argument.startswith("v") for argument in arguments):  # no locals
                self.leaves[key] = f"({expression})"
                return self.leaves[key]
        elif operator == z3.Z3_OP_AND:
            expression = " and ".join(arguments) if arguments else "True"
        elif operator == z3.Z3_OP_OR:
            expression = " or ".join(arguments) if arguments else "False"
        elif operator == z3.Z3_OP_NOT:
            expression = f"not {arguments[0]}"
        elif operator == z3.Z3_OP_IMPLIES:
            expression = f"(not {arguments[0]}) or {arguments[1]}"
        elif operator in _ARITHMETIC and arguments:
            expression = f" {_ARITHMETIC[operator]} ".join(f"({a})" for a in arguments)
        elif operator == z3.Z3_OP_UMINUS:
            expression = f"-({arguments[0]})"
        elif operator == z3.Z3_OP_ITE:
            expression = f"({arguments[1]}) if {arguments[0]} else ({arguments[2]})"
        else:
            raise _Unsupported(ast)
        name = names[key] = f"v{len(names)}"
        lines.append(f"{name} = {expression}")
        return name
