"""Encode a program's executions as integer constraints over step times.

Every step of the program (see `checker.witness` and `docs/semantics.md`) gets one integer
time variable. With S steps and a horizon H = S, a step happens iff its time is below H.
The execution order is (time, step index) lexicographically, so every "x before y" is one
`<` or `<=` atom and the order is total without a `Distinct` constraint. A collective
member's `end` needs every member of its group started.

For every step s, `Encoding.condition(s, now)` states when s is enabled, as a formula over
the steps ordered before `now` (a step, or HORIZON: the end of the prefix). The base
assertions say: if s happened, its condition held at its own place in the order. Then the
happened steps, in order, are a legal execution prefix, and every legal prefix is a model.
Queries (race, use-after-free, deadlock) are formulas over the same variables, asked on top
of the base.

What a step needs is stated once, in `rules.py`, already simplified by the
must-happen-before order (`order.py`): facts every execution shares never reach Z3.
`docs/encoding.md` explains each rule. No object of this module leaves `checker.smt`.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass

import z3

from checker.ir import Op, Program, Statement
from checker.smt.evaluate import binding_values as plain_binding_values
from checker.smt.layout import Layout, latest
from checker.smt.order import MustOrder, compute
from checker.smt.rules import Bind, Meet, Need, NeedIf, Never, Rules, SetState
from checker.witness import Step, StepKind, Witness

SMALL_BINDING = 6
"""Up to this many candidate records, a wait's binding is spelled out pairwise; beyond it,
two integers per wait keep the encoding linear (`Encoding._latest_by_key`)."""

SMALL_READY = 4
"""Up to this many items, a group partner's own rules are spelled out where a call reads
them; beyond it, they are read through the latest step they require (`Encoding.ready`),
written once per partner instead of once per call that meets it."""

HORIZON = -1
"""`now` for a condition asked at the end of an execution prefix (deadlock)."""


# --- term constructors ----------------------------------------------------------------------
# z3's Python operators check and coerce every argument (sorts, contexts, numerals) before the
# one C call that builds the term; the encoding's arguments are Boolean terms and integer
# constants of one context already, and building a program's base spent most of its time in
# those checks (two threads of 500 statements: 12 s). These make the same terms directly.


def _terms(parts) -> tuple:
    """The C array of `parts`' ASTs, and their context."""
    array = (z3.Ast * len(parts))()
    for k, part in enumerate(parts):
        array[k] = part.as_ast()
    return array, parts[0].ctx


def _mk_and(parts: list) -> z3.BoolRef:
    array, ctx = _terms(parts)
    return z3.BoolRef(z3.Z3_mk_and(ctx.ref(), len(parts), array), ctx)


def _mk_or(parts: list) -> z3.BoolRef:
    array, ctx = _terms(parts)
    return z3.BoolRef(z3.Z3_mk_or(ctx.ref(), len(parts), array), ctx)


def _mk_binary(make, left, right) -> z3.BoolRef:
    ctx = left.ctx
    return z3.BoolRef(make(ctx.ref(), left.as_ast(), right.as_ast()), ctx)


# --- folding helpers: Python booleans are constants, so static facts vanish early ----------


def _and(*parts):
    kept = []
    for part in parts:
        if part is True:
            continue
        if part is False:
            return False
        kept.append(part)
    if not kept:
        return True
    return kept[0] if len(kept) == 1 else _mk_and(kept)


def _or(*parts):
    kept = []
    for part in parts:
        if part is False:
            continue
        if part is True:
            return True
        kept.append(part)
    if not kept:
        return False
    return kept[0] if len(kept) == 1 else _mk_or(kept)


def _not(part):
    if part is True:
        return False
    if part is False:
        return True
    ctx = part.ctx
    return z3.BoolRef(z3.Z3_mk_not(ctx.ref(), part.as_ast()), ctx)


def _implies(cond, then):
    if cond is False or then is True:
        return True
    if cond is True:
        return then
    if then is False:
        return _not(cond)
    return _mk_binary(z3.Z3_mk_implies, cond, then)


def _static(part) -> bool | None:
    """A folded formula's value when it is a constant, else None."""
    return part if part is True or part is False else None


def any_of(parts: list):
    """The disjunction of folded formulas (a query asking whether any of them holds)."""
    return _or(*parts)


def to_z3(part) -> z3.BoolRef:
    """A folded formula as a Z3 term (for assertions)."""
    if part is True:
        return z3.BoolVal(True)
    if part is False:
        return z3.BoolVal(False)
    return part


@dataclass(frozen=True, slots=True)
class Conjunct:
    """One part of a step's enabling condition."""

    formula: object
    after: int | None = None
    """When the conjunct is exactly 'step `after` happened before now': a must-happen-before
    edge."""
    window: NeedIf | None = None
    """When the conjunct is a stream-order implication whose condition (the order in which
    two threads enqueued) the must order leaves open: its rule. A relaxed session leaves
    these out until a model breaks one (`relaxed.py`)."""


@dataclass(frozen=True, slots=True)
class Segment:
    """A byte range of one memory that every alloc, free and access covers whole or not at all."""

    memory: int
    start: int
    end: int
    allocs: tuple[int, ...]
    """Statements whose alloc covers the segment."""
    frees: tuple[int, ...]
    """Statements whose free covers the segment."""


class Encoding:
    """The step variables of one program and every formula built over them."""

    def __init__(self, program: Program, order: MustOrder | None = None):
        self.program = program
        self.layout = order.layout if order is not None else Layout(program)
        self.order = order if order is not None else compute(self.layout)
        self.rules = Rules(self.layout, self.order)
        self.steps: list[Step] = self.layout.steps
        self.horizon = len(self.steps)
        self.time = [z3.Int(f"t{i}_{s.kind.value}_{s.statement}") for i, s in enumerate(self.steps)]
        self.hap = [z3.Bool(f"h{i}") for i in range(len(self.steps))]
        self.segments: tuple[Segment, ...] = self._segments()
        self._segments_of: dict[int, list[Segment]] = {}
        for segment in self.segments:
            self._segments_of.setdefault(segment.memory, []).append(segment)
        self._items: dict[int, list] = {}
        self._alloc_positions: dict[int, dict[int, list[int]]] = {}
        """memory -> thread -> the program positions of its allocs there (`enqueued_after_free`)."""
        self._lifetime_chains: dict[int, tuple[dict, dict, dict[int, int]]] = {}
        """id of a segment -> its frees' and allocs' lifetime steps by chain, and the statement of
        each step (`segment_chains`)."""
        self._numerals: dict[int, z3.ArithRef] = {}
        self._positions: dict[int, object] = {}
        self._ready: dict[int, tuple] = {}
        """id of a partner's items -> (the items, its two `ready` integers)."""
        self._own: dict[int, list[Conjunct]] = {}
        self._bound_key: dict[int, z3.ArithRef] = {}
        self._binding_facts: list[z3.BoolRef] = []
        self._bindings: list[tuple] = []
        """Per wait bound in linear size: (bind, bind_time, its issue step, ((candidate issue
        step, whether it is enqueued before the wait: True, False, or None when the order of
        the two issue steps decides it), ...)); per call whose position is open (`position`):
        (pos, None, its issue step, the other calls of its class in the same form); per group
        partner read through the latest step its rules require (`ready`): (ready, ready_time,
        None, ((step, True or (a, b)), ...))."""
        self._based = False
        self.enabled_facts: dict[int, z3.BoolRef] = {}
        """Per step whose condition is not trivially true: the condition at its own time."""

    # --- step lookup --------------------------------------------------------------------

    def previous(self, statement: Statement) -> Statement | None:
        """The statement before this one in its thread."""
        index = self.layout.previous[statement.index]
        return None if index is None else self.program.statements[index]

    def witness(self, order) -> Witness:
        """The witness of an execution order given as step ids."""
        return Witness(tuple(map(self.steps.__getitem__, order)))

    def can_block(self) -> bool:
        """Whether any step can wait on something enqueued later or on nothing at all.

        Without flag waits, awaits and collectives, every task waits only for
        tasks enqueued before it (stream, hardware queue and legacy order, the bound record)
        and every blocked thread only for tasks it already saw enqueued: the earliest
        enqueued unfinished task can always move, so no execution deadlocks."""
        program = self.program
        for statement in program.statements:
            if statement.op is Op.AWAIT or statement.group is not None:
                return True
            if statement.op is Op.WAIT and program.events[statement.event].flag:
                return True
        return bool(program.groups)

    def step(self, kind: StepKind, statement: int) -> int:
        return self.layout.step_id[(kind, statement)]

    def has_step(self, kind: StepKind, statement: int) -> bool:
        return (kind, statement) in self.layout.step_id

    def first_step(self, statement: Statement) -> int:
        return self.layout.first_step(statement)

    def last_step(self, statement: Statement) -> int:
        return self.layout.last_step(statement)

    def completion(self, statement: Statement) -> int:
        return self.layout.completion(statement)

    def begin(self, statement: Statement) -> int:
        return self.layout.begin(statement)

    def thread_done(self, statement: Statement) -> int:
        return self.layout.thread_done(statement)

    def lifetime_step(self, index: int) -> int:
        return self.layout.lifetime_step(self.program.statements[index])

    _lifetime_step = lifetime_step

    # --- atoms --------------------------------------------------------------------------

    def precedes(self, first: int, second: int):
        """first comes before second in the execution order: (t, index) lexicographically.

        Ties in time are broken by step index, so every comparison is a single `<` or `<=`
        and no `Distinct` is needed for the order to be total."""
        if first == second:
            return False
        return _mk_binary(z3.Z3_mk_le if first < second else z3.Z3_mk_lt, self.time[first], self.time[second])

    def before(self, step: int, now: int):
        """Step `step` happened before `now`: a step id, or HORIZON (the end of the prefix)."""
        if now == HORIZON:
            return self.happened(step)
        return self.precedes(step, now)

    def happened(self, step: int):
        return self.hap[step]

    def enqueued_before(self, u: Statement, x: Statement):
        """u's issue precedes x's issue, where x's issue happened (every caller asks it so).
        Static within a thread (program order), and where the must-happen-before order
        decides it."""
        if u.index == x.index:
            return False
        if u.thread == x.thread:
            return self.layout.position[u.index] < self.layout.position[x.index]
        iu, ix = self.layout.issue(u), self.layout.issue(x)
        if self.order.prec(iu, ix):
            return True
        if self.order.prec(ix, iu):
            return False
        return self.precedes(iu, ix)

    # --- conditions -----------------------------------------------------------------------

    def items(self, step: int) -> list:
        cached = self._items.get(step)
        if cached is None:
            cached = self._items[step] = self.rules.items(step)
        return cached

    def all_items(self) -> None:
        """Every step's items, before any formula or run needs them: a program with too many
        open orderings (`rules.TooLarge`) is refused before Z3 spends a minute on formulas
        for the steps ahead of where the count passes the limit."""
        for i in range(len(self.time)):
            self.items(i)

    def condition(self, step: int, now) -> list[Conjunct]:
        """When `step` may happen at time `now` (docs/encoding.md, section "conditions")."""
        statements = self.program.statements
        parts: list[Conjunct] = []
        for item in self.items(step):
            if isinstance(item, Need):
                parts.append(Conjunct(self.before(item.step, now), item.step))
            elif isinstance(item, NeedIf):
                when = self.enqueued_before(statements[item.u], statements[item.x])
                open_order = when is not True and when is not False
                parts.append(Conjunct(_implies(when, self.before(item.step, now)),
                                      window=item if open_order else None))
            elif isinstance(item, Bind):
                parts += self._bound_record_done(item, now)
            elif isinstance(item, SetState):
                parts.append(Conjunct(self.set_state(item, now)))
            elif isinstance(item, Never):
                parts.append(Conjunct(False))
            elif isinstance(item, Meet):
                parts.append(Conjunct(self.meet(item, now)))
        return parts

    def _plain_item(self, item, now):
        """A `Need` or `NeedIf` as one formula."""
        if isinstance(item, Need):
            return self.before(item.step, now)
        statements = self.program.statements
        return _implies(self.enqueued_before(statements[item.u], statements[item.x]), self.before(item.step, now))

    def meet(self, item: Meet, now):
        """Rule 8 for a call of an interleaved comm: per meeting class, some call of it at the
        same position whose items hold at `now`."""
        statements = self.program.statements
        call = statements[item.call]
        return _and(*[_or(*[_and(self.same_position(call, statements[other]), self._items_hold(other, items, now))
                            for other, items in candidates])
                      for candidates in item.partners])

    def _items_hold(self, call: int, items: tuple, now):
        """A partner's `Need` and `NeedIf` items hold at `now`: spelled out when they are few;
        else through the latest step they require (`ready`), so that the partner's rules,
        read by every call of its group's other classes, are written once."""
        if len(items) <= SMALL_READY:
            return _and(*[self._plain_item(i, now) for i in items])
        latest, latest_time = self.ready(call, items)
        if now == HORIZON:
            return _mk_binary(z3.Z3_mk_le, latest_time, self._numeral(self.horizon - 1))
        at = self.time[now]
        return _or(_mk_binary(z3.Z3_mk_lt, latest_time, at),
                   _and(_mk_binary(z3.Z3_mk_eq, latest_time, at), _not(self._at_least(latest, now))))

    def ready(self, call: int, items: tuple) -> tuple:
        """Two integers, defined with the binding integers: the latest step (in (time, step
        id) order) that the items require, and its time. Each `Need` requires its step, each
        `NeedIf` its step when u was enqueued before x; the items hold at `now` exactly when
        that latest step comes before `now` (the latest is never -1: a task's items need its
        issue)."""
        found = self._ready.get(id(items))
        if found is not None and found[0] is items:  # (`Rules.meet_items` gives each partner one tuple)
            return found[1]
        assert not self._based, "a readiness variable created after the base was taken"
        statements, layout = self.program.statements, self.layout
        name = f"{call}_{len(self._ready)}"
        latest, latest_time = z3.Int(f"ready_{name}"), z3.Int(f"ready_time_{name}")
        entries, plain = [], []
        for item in items:
            if isinstance(item, Need):
                entries.append((item.step, True))
                plain.append((item.step, True))
            else:
                u, x = statements[item.u], statements[item.x]
                when = self.enqueued_before(u, x)
                if when is False:
                    continue
                entries.append((item.step, when))
                plain.append((item.step, True if when is True else (layout.issue(u), layout.issue(x))))
        self._define_latest(latest, latest_time, entries)
        self._bindings.append((latest, latest_time, None, tuple(plain)))
        self._ready[id(items)] = (items, (latest, latest_time))
        return latest, latest_time

    def position(self, call: Statement):
        """How many calls of its class (`Layout.class_of`) an enqueued call of an interleaved
        comm was enqueued after: a number where program order and the must order fix it, else
        an integer `pos_c` defined with the binding integers (the sum of the open orders, as
        0 or 1 each), so that every formula that compares positions reads one variable."""
        cached = self._positions.get(call.index)
        if cached is None:
            fixed, terms, others = 0, [], []
            one, zero = self._numeral(1), self._numeral(0)
            for other in self.layout.class_of[call.index]:
                o = self.program.statements[other]
                before = self.enqueued_before(o, call)
                if other != call.index:
                    others.append((self.layout.issue(o), _static(before)))
                if before is True:
                    fixed += 1
                elif before is not False:
                    terms.append(z3.If(before, one, zero))
            if not terms:
                cached = fixed
            else:
                assert not self._based, "a position variable created after the base was taken"
                cached = z3.Int(f"pos_{call.index}")
                self._bindings.append((cached, None, self.layout.issue(call), tuple(others)))
                self._binding_facts.append(cached == z3.Sum(*terms, self._numeral(fixed)))
            self._positions[call.index] = cached
        return cached

    def same_position(self, call: Statement, other: Statement):
        """Two enqueued calls of meeting classes are at the same position (so in one group)."""
        a, b = self.position(call), self.position(other)
        if isinstance(a, int) and isinstance(b, int):
            return a == b
        return (self._numeral(a) if isinstance(a, int) else a) == (self._numeral(b) if isinstance(b, int) else b)

    def meet_at(self, call: Statement, other: Statement, k: int):
        """Two calls of an interleaved comm meet at position `k`: both enqueued there, and
        `call` has ended (so every member of the group started)."""
        return _and(self.happened(self.completion(call)), self.happened(self.layout.issue(other)),
                    self.at_position(call, k), self.at_position(other, k))

    def at_position(self, call: Statement, k: int):
        """An enqueued call of an interleaved comm is at position `k` of its class."""
        position = self.position(call)
        return position == k if isinstance(position, int) else self._is(position, k)

    def enabled(self, step: int, now):
        return _and(*[c.formula for c in self.condition(step, now)])

    def own_condition(self, step: int) -> list[Conjunct]:
        """The condition of a step at its own time (built once)."""
        cached = self._own.get(step)
        if cached is None:
            cached = self._own[step] = self.condition(step, step)
        return cached

    def set_state(self, item: SetState, now):
        """Some setter happened before now with no clearer between it and now."""
        terms = []
        for setter, fixed, clearers in item.terms:
            terms.append(_and(True if fixed else self.before(setter, now), *[
                _not(_and(self.precedes(setter, c), True if c_fixed else self.before(c, now)))
                for c, c_fixed in clearers]))
        return _or(*terms)

    # --- snapshot binding -------------------------------------------------------------------

    def _bound_record_done(self, item: Bind, now) -> list[Conjunct]:
        statements = self.program.statements
        w = statements[item.w]
        candidates = [(statements[r], fixed) for r, fixed in item.candidates]
        if len(candidates) > SMALL_BINDING:
            bound = self._latest_by_key(w, candidates)
        else:
            bound = []
            for r, fixed in candidates:
                bound.append(_and(True if fixed else self.enqueued_before(r, w), *[
                    _not(_and(self.enqueued_before(r, o), True if o_fixed else self.enqueued_before(o, w)))
                    for o, o_fixed in candidates if o.index != r.index]))
        return [Conjunct(_implies(when, self.before(self.completion(r), now)))
                for (r, _), when in zip(candidates, bound)]

    def _latest_by_key(self, w: Statement, candidates) -> list:
        """Snapshot binding in linear size and in difference logic: per wait, one integer
        `bind` holds the issue step id of the latest candidate record issued before it (-1:
        none) and one integer `bind_time` that record's time. Every candidate issued before
        the wait is at most (bind_time, bind) in the execution order, which is (time, step
        id); exactly one assignment meets that for any times, so the definition (joining the
        base assertions) restricts nothing. Each record binds iff `bind` is its issue step.
        (An order key time * steps + id would say the same in one integer, but its products
        make Z3 leave difference logic and stall without heeding its timeout.)"""
        bound = self._bound_key.get(w.index)
        issues = {r.index: self.layout.issue(r) for r, _ in candidates}
        if bound is None:
            assert not self._based, "a binding variable created after the base was taken"
            bound = self._bound_key[w.index] = z3.Int(f"bind_{w.index}")
            bound_time = z3.Int(f"bind_time_{w.index}")
            self._bindings.append((bound, bound_time, self.layout.issue(w), tuple(
                (issues[r.index], _static(True if fixed else self.enqueued_before(r, w)))
                for r, fixed in candidates)))
            self._define_latest(bound, bound_time, [
                (issues[r.index], True if fixed else self.enqueued_before(r, w)) for r, fixed in candidates])
        return [self._is(bound, issues[r.index]) for r, _ in candidates]

    def _define_latest(self, latest: z3.ArithRef, latest_time: z3.ArithRef, entries: list) -> None:
        """Defines `latest` as the latest step, in (time, step id) order, of `entries` (step,
        folded condition) whose condition holds (-1: none), and `latest_time` as its time:
        every such step is at most (latest_time, latest), and `latest` is one of them. The
        linear snapshot binding and a group partner's readiness (`ready`) are both this."""
        is_, ge = self._is, self._at_least
        facts = [_mk_or([is_(latest, -1), *[is_(latest, step) for step, _ in entries]])]
        for step, when in entries:
            at = self.time[step]
            facts.append(_implies(is_(latest, step), _and(when, _mk_binary(z3.Z3_mk_eq, latest_time, at))))
            facts.append(_implies(when, _and(ge(latest, 0), _or(
                _mk_binary(z3.Z3_mk_lt, at, latest_time),
                _and(_mk_binary(z3.Z3_mk_eq, at, latest_time), ge(latest, step))))))
        self._binding_facts += [to_z3(fact) for fact in facts if fact is not True]

    def _numeral(self, value: int) -> z3.ArithRef:
        numeral = self._numerals.get(value)
        if numeral is None:
            numeral = self._numerals[value] = z3.IntVal(value, self.time[0].ctx)
        return numeral

    def _is(self, variable: z3.ArithRef, value: int) -> z3.BoolRef:
        """`variable == value`, made as `_mk_binary` makes terms."""
        return _mk_binary(z3.Z3_mk_eq, variable, self._numeral(value))

    def _at_least(self, variable: z3.ArithRef, value: int) -> z3.BoolRef:
        return _mk_binary(z3.Z3_mk_ge, variable, self._numeral(value))

    def binding_values(self, times: list[int]) -> list[tuple]:
        """(variable, integer) for every binding integer of `_latest_by_key` and every
        position variable, given every step's time: what the definitions make them
        (`evaluate.binding_values`)."""
        return list(zip(self._binding_variables(), plain_binding_values(self.plain_bindings(), times)))

    def _binding_variables(self) -> list:
        """The binding integers in the order `evaluate.binding_values` gives their values: a
        wait's two, a position's one (its second is None)."""
        return [v for bound, bound_time, _, _ in self._bindings
                for v in ((bound,) if bound_time is None else (bound, bound_time))]

    def plain_bindings(self) -> tuple:
        """The linear snapshot bindings and positions as `evaluate.binding_values` takes them."""
        return tuple((own, candidates) if bound_time is not None and own is not None else
                     (own, candidates, "position") if bound_time is None else (own, candidates, "latest")
                     for _, bound_time, own, candidates in self._bindings)

    # --- base assertions ------------------------------------------------------------------

    def base(self) -> list[z3.BoolRef]:
        """Domain, and 'a step that happened was enabled at its place in the order'.
        Steps the order proves impossible never happen."""
        return self._base(None)

    def relaxed_base(self) -> tuple[list[z3.BoolRef], dict[int, list[tuple[NeedIf, z3.BoolRef]]]]:
        """The base without the stream-order implications across threads (`Conjunct.window`),
        and those implications per step, each as a fact to add back. Fewer facts admit more
        models, so what the relaxed base (with any of them added back) rules out, the base
        rules out too."""
        windows: dict[int, list[tuple[NeedIf, z3.BoolRef]]] = {}
        return self._base(windows), windows

    def _base(self, windows: dict | None) -> list[z3.BoolRef]:
        horizon = self.horizon
        impossible = self.order.impossible
        self.all_items()
        for index in self.layout.class_of:  # (defined with the base, also where no rule reads it)
            self.position(self.program.statements[index])
        facts = []
        for i, t in enumerate(self.time):
            # Not `t < horizon`: Z3 keeps that as "not t >= H" and tries undecided atoms
            # false first, so every step would start out happened (docs/encoding.md).
            facts.append(self.hap[i] == (t <= horizon - 1))
            if i in impossible:
                facts.append(t >= horizon)
                # Its condition is built all the same: a binding integer it shares with
                # others must be defined with the base, whatever question reads it later.
                self.own_condition(i)
                continue
            facts.append(t >= 0)
            conjuncts = self.own_condition(i)
            enabled = _and(*[c.formula for c in conjuncts])
            if enabled is True:
                continue
            # Every condition, also for a relaxed base: `admits` checks executions against it.
            if i not in self.enabled_facts:  # built once for both bases
                self.enabled_facts[i] = to_z3(enabled)
            if windows is None:
                facts.append(z3.Implies(self.hap[i], self.enabled_facts[i]))
                continue
            strict = _and(*[c.formula for c in conjuncts if c.window is None])
            if strict is not True:
                facts.append(z3.Implies(self.hap[i], to_z3(strict)))
            for c in conjuncts:
                if c.window is not None:
                    windows.setdefault(i, []).append((c.window, z3.Implies(self.hap[i], to_z3(c.formula))))
        self._based = True
        return facts + self._binding_facts

    def facts_of(self, happened) -> list[z3.BoolRef]:
        """What the base says about an execution prefix whose happened steps are `happened`
        once every other step is not (time H): each happened step's condition at its own time,
        and the binding definitions. The rest of the base holds in such an assignment by its
        form (`base`), so checking these is checking the base. None if a happened step is
        one the order proves impossible."""
        assert self._based, "the base is not built yet"
        if any(i in self.order.impossible for i in happened):
            return None
        return [self.enabled_facts[i] for i in happened if i in self.enabled_facts] + self._binding_facts

    # --- memory lifetime ------------------------------------------------------------------

    def _lifetime_range(self, statement: Statement) -> tuple[int, int]:
        memory = self.program.memories[statement.memory]
        for access in statement.accesses:
            if access.memory == statement.memory:
                return access.start, access.end
        return 0, memory.size

    def _segments(self) -> tuple[Segment, ...]:
        program, layout = self.program, self.layout
        ranges: dict[int, list[tuple[Statement, int, int]]] = {}
        for memory in sorted(set(layout.allocs) | set(layout.frees)):
            for statement in layout.allocs.get(memory, []) + layout.frees.get(memory, []):
                if not statement.launch_only:
                    lo, hi = self._lifetime_range(statement)
                    ranges.setdefault(memory, []).append((statement, lo, hi))
        segments = []
        for memory, items in sorted(ranges.items()):
            items.sort(key=lambda item: item[0].index)
            points = {0, program.memories[memory].size}
            for _, lo, hi in items:
                points |= {lo, hi}
            for statement in layout.accessing.get(memory, ()):
                for access in statement.accesses:
                    if access.memory == memory:
                        points |= {access.start, access.end}
            ordered = sorted(points)
            for lo, hi in zip(ordered, ordered[1:]):
                covering = [(s, a, b) for s, a, b in items if a <= lo and hi <= b]
                segments.append(Segment(
                    memory, lo, hi,
                    tuple(s.index for s, _, _ in covering if s.op is Op.ALLOC),
                    tuple(s.index for s, _, _ in covering if s.op is Op.FREE),
                ))
        return tuple(segments)

    def touched_segments(self, statement: Statement, only: int | None = None) -> list[Segment]:
        """The lifetime segments the statement's accesses touch (of memory `only`, if given)."""
        result = []
        for memory in sorted({a.memory for a in statement.accesses if only is None or a.memory == only}):
            for segment in self._segments_of.get(memory, ()):
                if any(a.memory == memory and a.start < segment.end and segment.start < a.end
                       for a in statement.accesses):
                    result.append(segment)
        return result

    def segment_chains(self, segment: Segment) -> tuple[dict, dict, dict[int, int]]:
        """The lifetime steps of the segment's frees and of its allocs, each grouped by chain
        (`Layout.by_chain`), and the statement of every such step. Built once per segment: a
        loop that frees a buffer each iteration asks about each of its uses, and rebuilding
        these per question made the questions quadratic in the iterations."""
        known = self._lifetime_chains.get(id(segment))
        if known is None:
            frees = {self.lifetime_step(i): i for i in segment.frees}
            allocs = {self.lifetime_step(i): i for i in segment.allocs}
            known = self._lifetime_chains[id(segment)] = (
                self.layout.by_chain(frees), self.layout.by_chain(allocs), frees | allocs)
        return known

    def dead_after_free(self, segment: Segment, now: int):
        """The latest alloc/free of the segment completed before now is a free (SP102)."""
        frees, allocs, _ = self.segment_chains(segment)
        return self.set_state(self.rules.set_state(frees, allocs, now), now)

    def never_allocated(self, segment: Segment, now: int):
        """The segment is covered by some alloc and none has completed before now (SP103).
        A segment freed before its first alloc is dead both ways (SP102 and SP103)."""
        if not segment.allocs:
            return False
        parts = []
        for i in segment.allocs:
            step = self.lifetime_step(i)
            if self.order.prec(step, now):
                return False
            if not self.order.prec(now, step):
                parts.append(_not(self.before(step, now)))
        return _and(*parts)

    # --- queries --------------------------------------------------------------------------

    def race(self, a: Statement, b: Statement):
        """Both accesses running at once: both started, neither ended before the other started."""
        sa, ea = self.first_step(a), self.last_step(a)
        sb, eb = self.first_step(b), self.last_step(b)
        return _and(self.happened(sa), self.happened(sb),
                    self.precedes(sa, eb), self.precedes(sb, ea))

    def use_after_free(self, statement: Statement, only: int | None = None):
        """Run order: some byte is dead by a free when the access starts, or a free of bytes
        it touches takes effect while it runs. Launch order: the statement is enqueued after
        a free of its memory with no alloc enqueued between. (`only`: bytes of that memory.)"""
        first = self.first_step(statement)
        return _or(
            _and(self.happened(first), _or(*[
                self.dead_after_free(g, first) for g in self.touched_segments(statement, only)
            ])),
            self.freed_while_running(statement, only),
            self.enqueued_after_free(statement, only),
        )

    def frees_touching(self, statement: Statement, only: int | None = None) -> dict[int, None]:
        """The other frees of bytes the statement touches (statement indices, in order)."""
        return dict.fromkeys(f for g in self.touched_segments(statement, only) for f in g.frees
                             if f != statement.index)

    def freed_while_running(self, statement: Statement, only: int | None = None):
        """A free of bytes the statement touches takes effect after it started and before it
        ended (or it never ends): the access runs on after the free."""
        first, last = self.first_step(statement), self.last_step(statement)
        cases = []
        for f in self._frees_open_around(statement, only):
            step = self.lifetime_step(f)
            cases.append(_and(self.happened(first), self.happened(step),
                              self.precedes(first, step), self.precedes(step, last)))
        return _or(*cases)

    def _frees_open_around(self, statement: Statement, only: int | None) -> dict[int, None]:
        """The frees of `frees_touching` whose effect the must order puts neither before the
        statement's first step nor after its last, in the same order. On a chain the frees
        before the first step are a prefix and those after the last a suffix: found by
        bisection, not by asking about every free of the memory."""
        first, last = self.first_step(statement), self.last_step(statement)
        prec = self.order.prec
        found: dict[int, None] = {}
        for segment in self.touched_segments(statement, only):
            frees, _, statement_of = self.segment_chains(segment)
            open_here = []
            for items in frees.values():
                lo = bisect_left(range(len(items)), True, key=lambda j: not prec(items[j][1], first))
                hi = bisect_left(range(lo, len(items)), True, key=lambda j: prec(last, items[j][1])) + lo
                open_here.extend(statement_of[step] for _, step in items[lo:hi])
            for f in sorted(open_here):
                if f != statement.index:
                    found[f] = None
        return found

    def launch_lifetimes(self, memory: int) -> tuple[list[Statement], list[Statement]]:
        """Every alloc and every launch-ordered free of a memory (`Statement.launch_ordered`)."""
        return (self.layout.allocs.get(memory, []),
                [free for free in self.layout.frees.get(memory, []) if free.launch_ordered])

    def enqueued_after_free(self, statement: Statement, only: int | None = None):
        """Launch order: work enqueued on a stream after a free of its memory. A host
        statement runs when it is issued, so only the frees of caching-allocator blocks
        (launch order alone) count for it this way."""
        # a use whenever it runs: the access must start (for a host statement, its issue)
        first = self.first_step(statement)
        cases = []
        position = self.layout.position
        for memory in dict.fromkeys(a.memory for a in statement.accesses if only is None or a.memory == only):
            allocs, frees = self.launch_lifetimes(memory)
            mine = self._allocs_on_thread(memory, allocs).get(statement.thread, [])
            for free in frees:
                if free.index == statement.index or not (statement.is_task or free.launch_only):
                    continue
                after = self.enqueued_before(free, statement)
                if after is False:
                    continue
                if free.thread == statement.thread and mine:
                    # An alloc the thread enqueues between the two makes this case false (its
                    # term is `not (true and true)`): skipped before a term per alloc is built
                    # (a tensor freed and allocated again each iteration: n^3 terms in all).
                    k = bisect_right(mine, position[free.index])
                    if k < len(mine) and mine[k] < position[statement.index]:
                        continue
                cases.append(_and(self.happened(first), after, *[
                    _not(_and(self.enqueued_before(free, alloc), self.enqueued_before(alloc, statement)))
                    for alloc in allocs
                ]))
        for free in map(self.program.statements.__getitem__, statement.tensor_frees):
            # its own tensor's free: no alloc in between makes it live again (another tensor's)
            if only is None or only in free.lifetime_memories:
                after = self.enqueued_before(free, statement)
                if after is not False:
                    cases.append(_and(self.happened(first), after))
        return _or(*cases)

    def _allocs_on_thread(self, memory: int, allocs: list[Statement]) -> dict[int, list[int]]:
        """Per thread, the sorted program positions of the memory's allocs there."""
        known = self._alloc_positions.get(memory)
        if known is None:
            known = self._alloc_positions[memory] = {}
            for alloc in allocs:
                known.setdefault(alloc.thread, []).append(self.layout.position[alloc.index])
            for positions in known.values():
                positions.sort()
        return known

    def use_before_alloc(self, statement: Statement):
        """Run order: some byte has never been allocated when the access starts. Launch
        order: the statement is issued before any alloc of a caching-allocator block it
        touches (a tensor used before any tensor was given that block)."""
        first = self.first_step(statement)
        return _or(
            _and(self.happened(first), _or(*[
                self.never_allocated(g, first) for g in self.touched_segments(statement)
            ])),
            self.enqueued_before_alloc(statement),
        )

    def block_allocs(self, statement: Statement) -> list[list[Statement]]:
        """For each caching-allocator tensor lifetime the statement uses, its `alloc` (as a
        one-element group: the use is before alloc when it is issued before that one)."""
        return [[self.program.statements[a]] for a in statement.tensor_allocs]

    def enqueued_before_alloc(self, statement: Statement):
        issue = self.layout.issue(statement)
        return _or(*[
            _and(self.happened(issue), *[_not(self.enqueued_before(alloc, statement)) for alloc in allocs])
            for allocs in self.block_allocs(statement)
        ])

    def earliest_pending_blocks(self):
        """A fact of every stuck state, asserted to guide the deadlock search.

        Either no enqueued task is unfinished, or the earliest-enqueued unfinished task is one
        that can wait for something enqueued later (an await, a flag wait, a collective):
        every other task waits only for earlier-enqueued tasks, which are finished, so it
        could move. Z3 proves deadlock freedom far faster with this case split spelled out.
        Of one thread's tasks on one stream, the latest one finished implies the earlier ones."""
        layout = self.layout
        tasks = [s for s in self.program.statements if s.is_task]
        issued = lambda u: self.happened(layout.issue(u))  # noqa: E731
        done = lambda u: self.happened(self.completion(u))  # noqa: E731
        cases = [_and(*[_or(_not(issued(u)), done(u)) for u in tasks])]
        for b in tasks:
            waits_for_later = (
                b.op in (Op.AWAIT, Op.ALLREDUCE, Op.SEND, Op.RECV) or b.group is not None
                or (b.op is Op.WAIT and self.program.events[b.event].flag)
            )
            if not waits_for_later:
                continue
            parts = [issued(b), _not(done(b))]
            for (thread, stream), run in layout.runs.items():
                if thread == b.thread:
                    earlier = layout.earlier_in_run(thread, stream, layout.position[b.index])
                    parts += [done(u) for u in latest(earlier)]
                    continue
                p, q = self.rules.window((thread, stream), layout.issue(b))
                parts += [done(u) for u in latest(run[:p])]
                parts += [_or(done(u), _not(self.enqueued_before(u, b))) for u in run[p:q]]
            cases.append(_and(*parts))
        return _or(*cases)

    def finished(self):
        """Every step happened: an execution that finishes (False when some step never can)."""
        if self.order.impossible:
            return False
        return _and(*[self.happened(i) for i in range(len(self.steps))])

    def deadlock(self, taken: frozenset[int] = frozenset()):
        """Some step has not happened, and no step that has not happened is enabled at H.
        `taken`: steps known to have happened in every such state (`progress.py`)."""
        impossible = self.order.impossible
        stuck = _and(_or(*[_not(self.happened(i)) for i in range(len(self.steps))
                           if i not in taken]),
                     *[self.happened(i) for i in sorted(taken)],
                     self.earliest_pending_blocks())
        blocked = [
            _or(self.happened(i), _not(self.enabled(i, HORIZON)))
            for i in range(len(self.steps)) if i not in impossible and i not in taken
        ]
        return _and(stuck, *blocked)
