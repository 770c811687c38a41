"""Thread symmetries (`checker/symmetry.py`): found where threads are the same program, never
where they are not, and the SMT engine's answers with them are its answers without them.

The differential test draws programs of 2-3 copies of one random thread body, each copy
using shared resources or its own (its own stream, buffer, event, notify; with a device of
its own, also allreduces of a communicator of the copies' streams; sometimes each copy with
a second thread of its own, a rank of two threads), sometimes beside a thread of its own,
and checks every finding of `smt.analyze` with the symmetries against the findings without
them, and every carried witness against the executor; a second one checks the racing pairs
with symmetries against the executor's exhaustive search."""

from __future__ import annotations

import json
import os
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import checker.smt as smt
from checker.collectives import interleaved_comms
from checker.executor.replay import confirm
from checker.findings import FindingKind
from checker.frontend import load_text
from checker.symmetry import orbits, symmetries

HEADER = """\
device d { compute 2 copy 2 }
buffer x[4] 4KiB on d
buffer out[4] 4KiB on host pinned
buffer page 4KiB on host
stream s[4] on d
event ev[4]
event ready[4] flag
notify go[4]
"""

EXAMPLES = int(os.environ.get("STREAMPROOF_SYMMETRY_EXAMPLES", "60"))

SHARED = 3
"""Index of the resources every copy of the body shares (s[3], x[3], ev[3], ...); copy k
owns index k."""


def program_of(text: str):
    loaded = load_text(text, "<symmetric>")
    assert loaded.program is not None, loaded.diagnostics
    return loaded.program


PER_DEVICE_HEADER = HEADER.replace("device d { compute 2 copy 2 }", "device d[4] { compute 2 copy 2 }").replace(
    "stream s[4] on d", "\n".join(f"stream s{k} on d[{k}]" for k in range(4))).replace(" on d\n", " on d[3]\n")
"""Each copy's stream on a device of its own (`s{k}` on `d[k]`), the buffers on the shared one."""


def threads(body: list[str], copies: int, extra: list[str] = (), per_device: bool = False,
            partner: list[str] = ()) -> str:
    """`copies` copies of the thread `body` (and, with `partner`, each with a second thread
    of its own: a rank of two threads), then the thread `extra` if any."""
    if per_device:
        body = [re.sub(r"s\[(\{k\}|\d)\]", r"s\1", line) for line in body]
        extra = [re.sub(r"s\[(\{k\}|\d)\]", r"s\1", line) for line in extra]
        partner = [re.sub(r"s\[(\{k\}|\d)\]", r"s\1", line) for line in partner]
    text = PER_DEVICE_HEADER if per_device else HEADER
    if per_device:  # one rank per copy, each on a device of its own
        text += f"comm world = {{ {', '.join(f's{k}' for k in range(copies))} }}\n"
    for k in range(copies):
        lines = "".join(f"  {line.format(k=k)}\n" for line in body)
        text += f"thread w{k} {{\n{lines}}}\n"
        if partner:
            lines = "".join(f"  {line.format(k=k)}\n" for line in partner)
            text += f"thread p{k} {{\n{lines}}}\n"
    if extra:
        text += "thread other {\n" + "".join(f"  {line.format(k=SHARED)}\n" for line in extra) + "}\n"
    return text


@st.composite
def statements(draw, collective: bool = False) -> str:
    """One statement template: `{k}` is the copy's own index, a number the shared one. With
    `collective`, also an allreduce on the copy's own stream (a member of `world`)."""
    own = lambda: draw(st.sampled_from(["{k}", str(SHARED)]))  # noqa: E731
    kind = draw(st.sampled_from(["kernel", "kernel", "kernel", "copy", "record", "wait", "flag", "reset",
                                 "waitflag", "notify", "await", "hostnotify", "hostawait", "sync",
                                 "syncevent", "host", "pageable", "alloc", "free", "hostfree"]
                                + ["allreduce"] * (2 * collective)))
    s = f"s[{own()}]"
    if kind == "allreduce":
        return f"s[{{k}}]: allreduce world x[{own()}] 1ms"
    if kind in ("alloc", "free"):
        return f"{s}: {kind} x[{own()}]"
    if kind == "hostfree":
        return f"free out[{own()}]"
    if kind == "kernel":
        return f"{s}: kernel k reads x[{own()}] writes x[{own()}] 1ms"
    if kind == "copy":
        return f"{s}: copy out[{own()}] <- x[{own()}] 1ms"
    if kind == "pageable":
        return f"{s}: copy page <- x[{own()}] 1ms"
    if kind == "record":
        return f"{s}: record ev[{own()}]"
    if kind == "wait":
        return f"{s}: wait ev[{own()}]"
    if kind == "flag":
        return f"{s}: record ready[{own()}]"
    if kind == "reset":
        return f"{s}: reset ready[{own()}]"
    if kind == "waitflag":
        return f"{s}: wait ready[{own()}]"
    if kind == "notify":
        return f"{s}: notify go[{own()}]"
    if kind == "await":
        return f"{s}: await go[{own()}]"
    if kind == "hostnotify":
        return f"notify go[{own()}]"
    if kind == "hostawait":
        return f"await go[{own()}]"
    if kind == "sync":
        return f"sync {s}"
    if kind == "syncevent":
        return f"sync ev[{own()}]"
    return f"host h reads out[{own()}]"


def key(findings) -> list:
    """What a finding says, for comparing two analyses: a race's pair and message; a dead
    use's accessing statement and a deadlock's presence. Which free a dead use names, and
    which statements a deadlock shows stuck, come from the execution that shows it (either
    analysis may find another one first)."""
    def said(f):
        if f.kind is FindingKind.RACE:
            return (tuple(f.statements), f.message)
        if f.kind is FindingKind.DEADLOCK:
            return ((), "")
        return (tuple(f.statements[:1]) if f.kind is not FindingKind.UNKNOWN else tuple(f.statements), "")
    return sorted((f.kind.value, *said(f), f.instances, f.undecided) for f in findings)


def both(program, monkeypatch) -> tuple[tuple, tuple]:
    monkeypatch.setattr(smt, "SYMMETRY", True)
    with_symmetry = smt.analyze(program, timeout=30.0)
    monkeypatch.setattr(smt, "SYMMETRY", False)
    without = smt.analyze(program, timeout=30.0)
    return with_symmetry, without


def _same_with_and_without_symmetries(program) -> tuple:
    """The findings with symmetries, once they are those without and each witness replays."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        with_symmetry, without = both(program, monkeypatch)
    assert key(with_symmetry) == key(without)
    for finding in with_symmetry:
        if finding.kind is not FindingKind.UNKNOWN:
            confirmation = confirm(program, finding)
            assert confirmation.ok, (finding.message, confirmation.reason)
    return with_symmetry


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(copies=st.integers(2, 3), extra=st.lists(statements(), max_size=2), per_device=st.booleans(),
       data=st.data())
def test_findings_with_symmetries_are_the_findings_without(copies, extra, per_device, data):
    body = data.draw(st.lists(statements(collective=per_device), min_size=2, max_size=6))
    # (a partner's allreduces share its copy's comm stream: calls met by enqueue order)
    partner = data.draw(st.lists(statements(collective=per_device), max_size=3)) if data.draw(st.booleans()) else []
    program = program_of(threads(body, copies, extra, per_device, partner))
    found = symmetries(program)
    assert len(found) >= copies - 1, "every copy (with its partner) is joined to the first"
    _same_with_and_without_symmetries(program)


def test_identical_threads_sharing_everything_are_one_orbit_per_pair_shape():
    body = ["s[3]: kernel k reads x[0] writes x[1] 1ms", "s[2]: copy out[2] <- x[1] 1ms", "host h reads out[2]"]
    program = program_of(threads(body, 4))
    found = symmetries(program)
    assert [s.threads for s in found] == [(0, 1), (0, 2), (0, 3)]
    count = len(program.statements)
    grouped = orbits([(a, b) for a in range(count) for b in range(a + 1, count)], found)
    # 12 statements, 66 pairs: within one thread one orbit per pair of lines (3), across two
    # threads one per pair of lines (3) and one per line with its own copy (3).
    assert len(set(grouped.representative.values())) == 9
    for pair, representative in grouped.representative.items():
        assert grouped.carry(representative[0], grouped.path[pair]) in pair
        assert grouped.carry(representative[1], grouped.path[pair]) in pair


def test_threads_with_their_own_streams_and_buffers_swap_them():
    body = ["s[{k}]: kernel k reads x[3] writes x[{k}] 1ms", "s[{k}]: record ev[{k}]", "s[3]: wait ev[{k}]",
            "s[3]: kernel k reads x[{k}] writes x[3] 1ms"]
    program = program_of(threads(body, 3))
    found = symmetries(program)
    assert [s.threads for s in found] == [(0, 1), (0, 2)]
    first = program.threads[0].statements
    second = program.threads[1].statements
    assert [found[0].image(i) for i in first] == list(second)


@pytest.mark.parametrize("change", [
    ("s[{k}]: kernel k reads x[3] writes x[{k}] 1ms", "s[{k}]: kernel k reads x[3] writes x[{k}] 2ms"),
    # (reading x[2] instead would be a symmetry: x[2] and x[3] swap, as nothing else uses them)
    ("s[{k}]: kernel k reads x[3] writes x[{k}] 1ms", "s[{k}]: kernel k reads x[0] writes x[{k}] 1ms"),
    ("s[{k}]: record ev[{k}]", "s[{k}]: record ev[3]"),
])
def test_threads_that_differ_in_one_statement_have_no_symmetry(change):
    body = ["s[{k}]: kernel k reads x[3] writes x[{k}] 1ms", "s[{k}]: record ev[{k}]", "s[3]: wait ev[{k}]"]
    program = program_of(threads(body, 2).replace(change[0].format(k=1), change[1].format(k=1), 1))
    assert symmetries(program) == ()


def test_a_renamed_resource_must_keep_its_declaration():
    body = ["s[{k}]: kernel k reads x[3] writes x[{k}] 1ms"]
    text = threads(body, 2).replace("stream s[4] on d", "stream s[4] on d\nstream t on d priority high")
    text = text.replace("s[1]: kernel", "t: kernel")
    assert symmetries(program_of(text)) == ()
    # A third thread that uses one copy's stream breaks that copy's swap with the other (and
    # is itself the same program as that copy, with x[0] and x[2] swapped).
    found = symmetries(program_of(threads(body, 2, ["s[0]: kernel k reads x[3] writes x[2] 1ms"])))
    assert [s.threads for s in found] == [(0, 2)]


def test_a_carried_race_names_its_own_pair_and_replays():
    body = ["s[3]: kernel k reads x[0] writes x[1] 1ms", "s[3]: record ev[3]", "s[2]: wait ev[3]",
            "s[2]: copy out[2] <- x[1] 1ms", "host h reads out[2]"]
    program = program_of(threads(body, 3))
    with pytest.MonkeyPatch.context() as monkeypatch:
        with_symmetry, without = both(program, monkeypatch)
    assert key(with_symmetry) == key(without)
    races = [f for f in with_symmetry if f.kind is FindingKind.RACE]
    assert len({f.statements for f in races}) == len(races) > 3
    for finding in races:
        assert confirm(program, finding).ok


PER_DEVICE = """\
device d0 { compute 2 copy 1 }
device d1 { compute 2 copy 1 }
buffer host_in[2] 4KiB on host pinned
buffer w0 4KiB on d0
buffer w1 4KiB on d1
buffer shared 4KiB on host pinned
stream s0 on d0
stream s1 on d1
thread t0 {
  s0: copy w0 <- host_in[0] 1ms
  s0: kernel k reads w0 writes w0 1ms
  s0: copy shared <- w0 1ms
  sync d0
}
thread t1 {
  s1: copy w1 <- host_in[1] 1ms
  s1: kernel k reads w1 writes w1 1ms
  s1: copy shared <- w1 1ms
  sync d1
}
"""


def test_a_thread_per_device_swaps_the_devices(monkeypatch):
    program = program_of(PER_DEVICE)
    assert [s.threads for s in symmetries(program)] == [(0, 1)]
    with_symmetry, without = both(program, monkeypatch)
    assert key(with_symmetry) == key(without)
    assert any(f.kind is FindingKind.RACE for f in with_symmetry)
    for finding in with_symmetry:
        assert confirm(program, finding).ok


@pytest.mark.parametrize("change", [
    ("device d1 { compute 2 copy 1 }", "device d1 { compute 3 copy 1 }"),  # other engines
    ("stream s1 on d1", "stream s1 on d1 legacy"),  # another mode
    ("buffer w1 4KiB on d1", "buffer w1 4KiB on d0"),  # its buffer on the other device
    ("sync d1", "sync d0"),
])
def test_devices_that_differ_are_not_swapped(change):
    assert symmetries(program_of(PER_DEVICE.replace(*change))) == ()


def test_a_stream_left_in_place_must_stay_on_its_device():
    # s2 on d0 is used by neither copy but by a third thread, and would have to move to d1
    # with d0. (Used by nothing, it changes no execution: see the per-rank declarations.)
    text = PER_DEVICE.replace("stream s1 on d1", "stream s1 on d1\nstream s2 on d0 legacy") + (
        "thread t2 {\n  s2: kernel z 1ms\n}\n")
    assert symmetries(program_of(text)) == ()


def workers(copies: int, rounds: int) -> str:
    """Copies of one worker whose tally kernels all write one shared buffer."""
    return f"""\
device d {{ compute 2 copy 2 }}
buffer batch[{copies}] 4KiB on d
buffer stats 4KiB on d
stream h2d on d
stream work[{copies}] on d
event copied[{copies}]
thread worker[{copies}] {{
  for step in 0..{rounds} {{
    h2d: kernel load writes batch[worker] 1ms
    h2d: record copied[worker]
    work[worker]: wait copied[worker]
    work[worker]: kernel tally reads batch[worker] writes stats 1ms
  }}
}}
"""


def test_the_orbits_reach_past_the_pairs_the_solver_lists(monkeypatch):
    # 6 workers x 3 rounds: 135 racing instance pairs of the tallies, 153 pairs in all. Past a cap of 50 listed
    # pairs, the program without symmetries asks about 50 and counts the rest as undecided
    # instances of the races found; with them only the pairs that can be representatives are
    # listed (those with a statement of the first worker: 48), and the orbits reach every
    # other one.
    from checker.smt import queries

    program = program_of(workers(6, 3))
    monkeypatch.setattr(queries, "MAX_RACE_CANDIDATES", 50)
    with_symmetry, without = both(program, monkeypatch)
    # (and each worker's next load races with its earlier tallies: 3 instance pairs each)
    assert sorted(f.instances for f in with_symmetry if f.kind is FindingKind.RACE) == [18, 135]
    assert all(f.kind is FindingKind.RACE and confirm(program, f).ok for f in with_symmetry)
    assert not any(f.undecided for f in with_symmetry)
    assert sorted((f.kind, f.instances + f.undecided) for f in without) == [(FindingKind.RACE, 18), (FindingKind.RACE, 135)]
    assert sum(f.instances for f in without) <= 50 and any(f.undecided for f in without)


def test_pairs_past_the_cap_are_carried_to_their_images(monkeypatch):
    # With a cap of 20, even the 48 pairs that can be representatives are too many: the pairs
    # past the cap are counted per class, and their images (never listed) with them, as
    # undecided instances of the races their classes have.
    from checker.smt import queries

    program = program_of(workers(6, 3))
    monkeypatch.setattr(queries, "MAX_RACE_CANDIDATES", 20)
    findings = smt.analyze(program, timeout=30.0)
    assert sorted((f.kind, f.instances + f.undecided) for f in findings) == [
        (FindingKind.RACE, 18), (FindingKind.RACE, 135)]
    assert any(f.undecided for f in findings)
    assert all(confirm(program, f).ok for f in findings)


def test_symmetries_that_do_not_map_classes_to_classes_leave_the_images_unlisted(monkeypatch):
    from checker.smt import answers, queries

    program = program_of(workers(6, 3))
    monkeypatch.setattr(queries, "MAX_RACE_CANDIDATES", 20)
    monkeypatch.setattr(answers, "carries_classes", lambda *_: False)
    findings = smt.analyze(program, timeout=30.0)
    assert any(f.kind is FindingKind.UNKNOWN and f.detail.get("reason") == "too large" for f in findings)


def test_classes_are_carried_only_by_symmetries_that_keep_them():
    from checker.symmetry import Symmetry, carries_classes

    program = program_of(workers(2, 2))
    found = symmetries(program)
    assert found and carries_classes(program, found, lambda s: (s.origin, s.accesses))
    # A map that sends two statements of one class to two classes does not carry classes.
    (first, second) = [s.index for s in program.statements if s.thread == 0][:2]
    bad = Symmetry(found[0].threads, {**found[0].moved, first: second})
    assert not carries_classes(program, (bad,), lambda s: s.origin)


@settings(max_examples=max(EXAMPLES // 2, 10), deadline=None, suppress_health_check=list(HealthCheck))
@given(copies=st.integers(2, 3), rounds=st.integers(1, 3), cap=st.integers(1, 12), symmetry=st.booleans(),
       body=st.lists(statements(), min_size=2, max_size=4), shared=st.booleans(), array=st.booleans())
def test_past_the_cap_the_findings_stand_and_count_their_instances(copies, rounds, cap, symmetry, body, shared,
                                                                   array):
    """With a cap of a few race questions, each race found is one found without the cap, with
    at most its instances and at least them once the pairs not asked about are counted; a
    race not found has an SP301 on its source statements, or the program one saying pairs
    were left unlisted. The other findings do not change. With `array`, the copies are one
    thread array, whose copies share their statements' source (and, where a statement
    names only shared resources, their classes)."""
    from checker.smt import queries

    body += ["s[{k}]: kernel tally reads x[{k}] writes x[3] 1ms"] * shared  # (races across copies, mostly)
    loop = [f"for step in 0..{rounds} {{{{"] + ["  " + line for line in body] + ["}}"]
    if array:
        program = program_of(HEADER + f"thread w[{copies}] {{\n" + "".join(
            f"  {line.format(k='w')}\n" for line in loop) + "}\n")
    else:
        program = program_of(threads(loop, copies))
    statements_of = program.statements

    def origins(finding):
        return tuple(sorted(statements_of[i].origin for i in finding.statements[:2]))

    whole = smt.analyze(program, timeout=30.0)
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setattr(queries, "MAX_RACE_CANDIDATES", cap)
        monkeypatch.setattr(smt, "SYMMETRY", symmetry)
        capped = smt.analyze(program, timeout=30.0)
    def race_key(finding):  # (which instance, and which element of the buffer, names the
        # finding depends on which was found first)
        return origins(finding), re.match(r"race on `([^`\[]*)", finding.message).group(1)

    races = {race_key(f): f for f in whole if f.kind is FindingKind.RACE}
    undecided = {origins(f) for f in capped if f.kind is FindingKind.UNKNOWN and f.detail.get("reason") == "too large"}
    unlisted = () in undecided  # (pairs never listed: no statements to name)
    found = {race_key(f): f for f in capped if f.kind is FindingKind.RACE}
    assert set(found) <= set(races)
    for key_of, race in races.items():
        if key_of in found:
            assert found[key_of].instances <= race.instances
            assert unlisted or race.instances <= found[key_of].instances + found[key_of].undecided
            assert confirm(program, found[key_of]).ok
        else:
            assert unlisted or origins(race) in undecided, race.message
    others = [f for f in whole if f.kind not in (FindingKind.RACE, FindingKind.UNKNOWN)]
    assert key(others) == key([f for f in capped if f.kind not in (FindingKind.RACE, FindingKind.UNKNOWN)])


@pytest.mark.parametrize("copies, tried", [(3, True), (4, False)])
def test_the_exhaustive_search_is_not_tried_first_for_many_copies(monkeypatch, copies, tried):
    # The search does not use the symmetries: past a few copies of one thread their
    # interleavings are beyond it, and the solver goes first.
    monkeypatch.setattr(smt, "SHORTCUT_FROM", 0)
    called = []
    findings = smt.analyze(program_of(workers(copies, 2)), timeout=30.0,
                           shortcut=lambda seconds: called.append(seconds))
    assert bool(called) == tried
    assert any(f.kind is FindingKind.RACE for f in findings)


def test_orbits_cut_at_their_limit_say_so(monkeypatch):
    program = program_of(workers(6, 3))
    monkeypatch.setattr(smt, "ORBIT_PAIRS", 20)
    findings = smt.analyze(program)
    assert any(f.kind is FindingKind.UNKNOWN and f.detail.get("reason") == "too large" for f in findings)
    assert sum(f.instances for f in findings if f.kind is FindingKind.RACE) < 153


RANKS = """\
device gpu[2] { compute 2 copy 1 comm 1 }
buffer act[2] 4KiB on host pinned
buffer grad0 4KiB on gpu[0]
buffer grad1 4KiB on gpu[1]
stream comp0 on gpu[0]
stream comp1 on gpu[1]
stream nccl0 on gpu[0]
stream nccl1 on gpu[1]
event posted[2]
notify ready[2]
comm world = { nccl0, nccl1 }
thread main0 {
  for i in 0..3 {
    comp0: kernel fb reads act[0] writes grad0 2ms
    comp0: record posted[0]
    notify ready[0]
  }
}
thread main1 {
  for i in 0..3 {
    comp1: kernel fb reads act[1] writes grad1 2ms
    comp1: record posted[1]
    notify ready[1]
  }
}
thread hook0 {
  for i in 0..3 {
    await ready[0]
    nccl0: wait posted[0]
    nccl0: allreduce world grad0 2ms
  }
}
thread hook1 {
  for i in 0..3 {
    await ready[1]
    nccl1: wait posted[1]
    nccl1: allreduce world grad1 2ms
  }
}
"""


def test_a_rank_of_two_threads_swaps_with_the_other_rank_whole(monkeypatch):
    program = program_of(RANKS)
    # Swapping the main threads alone renames rank 0's device, which the hook thread's
    # stream stays on: the hook threads must swap too (once found, not again from them).
    assert [s.threads for s in symmetries(program)] == [(0, 1, 2, 3)]
    with_symmetry, without = both(program, monkeypatch)
    assert key(with_symmetry) == key(without)
    races = [f for f in with_symmetry if f.kind is FindingKind.RACE]
    assert races and all(confirm(program, f).ok for f in races)
    # A hook thread that differs keeps the ranks apart.
    assert symmetries(program_of(RANKS.replace("nccl1: allreduce world grad1 2ms", "nccl1: allreduce world grad1 3ms"))) == ()


def test_check_asks_every_question_with_no_symmetry(run, monkeypatch):
    from conftest import SPECS

    carried = []
    spread = smt.spread
    monkeypatch.setattr(smt, "spread", lambda *args: (carried.append(args[2]), spread(*args)))
    outputs = []
    for extra in ((), ("--no-symmetry",)):
        status, out, _ = run("check", "-j", "1", "--format", "json", SPECS / "identical_workers.sched", *extra)
        assert status == 0
        outputs.append([(f["kind"], f["instances"], f["message"]) for f in json.loads(out)["files"][0]["findings"]])
        assert len(carried) == 1  # once with the symmetries, not again without them
    assert outputs[0] == outputs[1] == [("race", 54, outputs[0][0][2])]


def test_answers_from_split_jobs_are_carried_as_inline_ones(monkeypatch):
    # No concrete runs and no inline questions: every representative goes to the solver in
    # jobs (`jobs.py`), and what they answer is carried as before.
    from checker.smt import queries

    monkeypatch.setattr(queries, "EAGERNESS", ())
    monkeypatch.setattr(smt, "INLINE", 0)
    body = ["s[3]: kernel k reads x[0] writes x[1] 1ms", "s[3]: record ev[3]", "s[2]: wait ev[3]",
            "s[2]: copy out[2] <- x[1] 1ms", "host h reads out[2]", "s[{k}]: kernel k reads x[1] writes x[{k}] 1ms"]
    program = program_of(threads(body, 3))
    with_symmetry, without = both(program, monkeypatch)
    assert key(with_symmetry) == key(without)
    races = [f for f in with_symmetry if f.kind is FindingKind.RACE]
    assert len(races) > 3 and all(confirm(program, f).ok for f in races)


FREEING_WORKERS = """\
device d { compute 2 copy 2 }
buffer staged[3] 4KiB on host pinned
buffer batch[3] 4KiB on d
buffer stats 4KiB on d
stream h2d on d
stream work[3] on d
event copied[3]
event done[3]
thread worker[3] {
  for step in 0..2 {
    h2d: alloc batch[worker]
    h2d: copy batch[worker] <- staged[worker] 1ms
    h2d: record copied[worker]
    work[worker]: wait copied[worker]
    work[worker]: kernel infer reads batch[worker] writes stats 1ms
    work[worker]: record done[worker]
    WAIT
    h2d: free batch[worker]
  }
}
"""
"""Three workers that allocate, fill, use and free a batch each iteration; the free waits for
the use (WAIT: `h2d: wait done[worker]`) or does not (a use after free in every worker)."""


@pytest.mark.parametrize("wait", ["h2d: wait done[worker]", ""])
@pytest.mark.parametrize("inline", [True, False])
def test_dead_use_questions_wait_for_their_orbit_and_take_its_no(wait, inline, monkeypatch):
    from checker.smt import queries

    if not inline:  # every question in jobs (`jobs.py`), none answered by runs
        monkeypatch.setattr(queries, "EAGERNESS", ())
        monkeypatch.setattr(smt, "INLINE", 0)
    program = program_of(FREEING_WORKERS.replace("WAIT", wait))
    asked = []
    ask = queries.Analysis.ask
    monkeypatch.setattr(queries.Analysis, "ask", lambda self, query, *rest, **kw: (
        asked.append(smt.SYMMETRY), ask(self, query, *rest, **kw))[1])
    with_symmetry, without = both(program, monkeypatch)
    assert key(with_symmetry) == key(without)
    dead = [f for f in with_symmetry if f.kind is FindingKind.USE_AFTER_FREE]
    assert bool(dead) == (wait == "")
    # (the workers' statements are one source statement each: one finding counts all three)
    assert sum(f.instances for f in dead) % 3 == 0
    assert all(confirm(program, f).ok for f in dead)
    if wait:  # the proofs of "no" are one worker's, not three
        assert asked.count(True) < asked.count(False)


@settings(max_examples=max(10, EXAMPLES // 2), deadline=None, suppress_health_check=list(HealthCheck))
@given(copies=st.integers(2, 3), per_device=st.booleans(), data=st.data())
def test_racing_pairs_with_symmetries_are_the_exhaustive_searchs(copies, per_device, data):
    """The other implementation: every racing instance pair, carried ones included, against
    the executor's exhaustive search of the same program."""
    from checker.executor.explore import explore

    body = data.draw(st.lists(statements(collective=per_device), min_size=1, max_size=4))
    partner = data.draw(st.lists(statements(collective=per_device), max_size=2)) if data.draw(st.booleans()) else []
    program = program_of(threads(body, copies, [], per_device, partner))
    search = explore(program, max_states=100_000)
    if not search.complete:
        return
    racing = []
    assemble = smt.assemble
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setattr(smt, "assemble", lambda program, parts, total: (
            racing.append(set(parts.races)), assemble(program, parts, total))[1])
        findings = smt.analyze(program, timeout=30.0)
    if racing and not any(f.kind is FindingKind.UNKNOWN for f in findings):
        assert racing[0] == set(search.race_pairs())


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(copies=st.integers(2, 3), data=st.data())
def test_ranks_whose_threads_share_a_comm_stream_keep_their_findings(copies, data):
    """Each rank's two threads both call its comm stream, so calls meet by enqueue order
    (`Meet`): a symmetry swaps whole ranks, classes of calls with them. The findings with
    symmetries are those without, and the racing pairs and deadlock those of the search."""
    from checker.executor.explore import explore

    def with_a_call(drawn: list[str]) -> list[str]:
        at = data.draw(st.integers(0, len(drawn)))
        return drawn[:at] + [f"s[{{k}}]: allreduce world x[{data.draw(st.sampled_from(['{k}', str(SHARED)]))}] 1ms"] + drawn[at:]

    body = with_a_call(data.draw(st.lists(statements(collective=True), min_size=1, max_size=4)))
    partner = with_a_call(data.draw(st.lists(statements(collective=True), max_size=2)))
    program = program_of(threads(body, copies, [], True, partner))
    assert interleaved_comms(program)
    with_symmetry = _same_with_and_without_symmetries(program)
    search = explore(program, max_states=100_000)
    if search.complete and not any(f.kind is FindingKind.UNKNOWN for f in with_symmetry):
        assert any(f.kind is FindingKind.DEADLOCK for f in with_symmetry) == bool(search.deadlocks)
        assert sum(f.kind is FindingKind.COLLECTIVE_MISMATCH for f in with_symmetry) == len(search.mismatches)


@pytest.mark.parametrize("unused", ["buffer spare[2] 1MiB on gpu", "stream idle[2] on gpu legacy",
                                    "stream c[2] on gpu\ncomm unused = { c }", ""])
def test_a_per_rank_declaration_no_statement_names_keeps_the_ranks_symmetric(unused):
    """Ranks swap with their devices; a stream or buffer of each device that nothing uses
    changes no execution, so it must not stop the swap (it did: no symmetry was found)."""
    spec = (f"device gpu[2]\nbuffer x[2] 1MiB on gpu\nstream s[2] on gpu\nstream t[2] on gpu\n{unused}\n"
            "thread rank[2] {\n  s[rank]: kernel a writes x[rank] 1ms\n  t[rank]: kernel b reads x[rank] 1ms\n}\n")
    program = program_of(spec)
    assert [s.threads for s in symmetries(program)] == [(0, 1)]
    _same_with_and_without_symmetries(program)
