"""`check` as a whole: expectations, exit statuses, which engine decides, unknown is never clean."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from checker.analyze import Options, check_loaded
from checker.findings import FindingKind, Status
from checker.frontend import load_text

RACY = """device d { compute 2 }
buffer x 1MiB on d
buffer y 1MiB on d
stream s1 on d
stream s2 on d
thread t {
  s1: kernel a writes x
  s2: kernel b writes x
}
"""


def check(text: str, **options):
    return check_loaded(load_text(text, "spec.sched"), Options(**options))


def test_expected_race_passes_and_is_marked():
    report = check(RACY + "expect race on x\n")
    assert report.passed
    assert report.status is Status.FINDINGS
    assert [f.expected for f in report.findings] == [True]


def test_race_on_another_buffer_is_not_expected():
    report = check(RACY + "expect race on y\n")
    assert not report.passed
    assert [d.code.value for d in report.diagnostics] == ["SP401"]
    assert report.diagnostics[0].primary_span.line == 10
    assert [f.expected for f in report.findings] == [False]


def test_expect_no_race_fails_on_a_race_with_a_diagnostic_on_the_expect_line():
    report = check(RACY + "expect no race\n")
    assert not report.passed
    assert report.diagnostics[0].code.value == "SP401"
    assert report.diagnostics[0].primary_span.line == 10


def test_unmet_expect_deadlock_fails():
    report = check(RACY.replace("s2: kernel b writes x", "s2: kernel b writes y") + "expect deadlock\n")
    assert report.status is Status.CLEAN
    assert not report.passed
    assert report.diagnostics[0].message == "expectation not met: `expect deadlock`"


@pytest.mark.parametrize("members, body, warned", [
    ("device g[2] { runtime cuda }\nstream s[2] on g\n", "  s[0]: allreduce w x[0]\n  s[1]: allreduce w x[1]\n", "SP054"),
    ("device g[1]\nstream s[2] on g[0]\n", "  s[0]: allreduce w x[0]\n}\nthread u {\n  s[1]: allreduce w x[1]\n",
     "SP059"),
])
def test_an_unmet_expect_deadlock_points_at_the_warning_of_a_hang_the_model_does_not_have(members, body, warned):
    """NCCL may block a thread that calls several ranks outside a group, and refuses two ranks
    on one device: the language has neither hang, and the help says so rather than 'fixed'."""
    report = check(members + "buffer x[2] 1MiB on g[0]\ncomm w = { s }\nthread t {\n" + body + "}\nexpect deadlock\n")
    (unmet,) = [d for d in report.diagnostics if d.code.value == "SP401"]
    assert warned in [d.code.value for d in report.diagnostics] and f"warning {warned}" in unmet.help
    assert check(RACY + "expect deadlock\n").diagnostics[0].help == (
        "no execution deadlocks; drop the expectation if the hang was fixed")  # (no such warning)


def test_expect_deadlock_met():
    text = """device d { compute 1 }
stream s on d
event ready flag
thread t {
  s: wait ready
  sync s
}
expect deadlock
"""
    report = check(text)
    assert report.passed
    assert [f.kind for f in report.findings] == [FindingKind.DEADLOCK]


MISMATCHED = """device d0 { comm 1 }
device d1 { comm 1 }
buffer a0 4KiB on d0
buffer a1 8KiB on d1
stream c0 on d0
stream c1 on d1
comm g = { c0, c1 }
thread rank0 {
  c0: allreduce g a0
}
thread rank1 {
  c1: allreduce g a1
}
"""


def test_expect_mismatch_covers_a_collective_mismatch():
    (finding,) = check(MISMATCHED).findings
    assert finding.advisory  # sizes only: a warning, which the contract lets meet
    report = check(MISMATCHED + "expect mismatch\n")
    assert report.passed
    assert [(f.kind, f.expected) for f in report.findings] == [(FindingKind.COLLECTIVE_MISMATCH, True)]


def test_expect_no_mismatch_fails_on_one_and_holds_without():
    report = check(MISMATCHED + "expect no mismatch\n")
    assert not report.passed
    assert report.diagnostics[-1].message == "expectation not met: `expect no mismatch`"
    fixed = MISMATCHED.replace("a1 8KiB", "a1 4KiB")
    assert check(fixed + "expect no mismatch\n").passed
    unmet = check(fixed + "expect mismatch\n")
    assert not unmet.passed and unmet.diagnostics[-1].message == "expectation not met: `expect mismatch`"


def test_alias_expectation_names_the_aliased_buffer():
    text = RACY.replace("buffer y 1MiB on d", "buffer y 1MiB on d\nalias q = x[0:4KiB]") + "expect race on q\n"
    report = check(text)
    assert report.passed


@pytest.mark.parametrize("alias, passes", [("x[1][0:512]", True), ("x[1]", True), ("x[2][0:512]", False),
                                           ("x[2]", False)])
@pytest.mark.parametrize("kind", ["race", "use-after-free"])
def test_an_alias_of_one_element_expects_that_element_alone(alias, passes, kind):
    # (the buffer behind the alias is the element, not the whole array)
    use = ("  s1: kernel a writes x[1][0:10]\n  s2: kernel b reads x[1][5:6]\n" if kind == "race" else
           "  free x[1]\n  s1: kernel a reads x[1][0:10]\n")
    text = (f"device d {{ compute 2 }}\nbuffer x[4] 1KiB on d\nalias q = {alias}\nstream s1 on d\nstream s2 on d\n"
            f"thread main {{\n{use}}}\nexpect {kind} on q\n")
    assert check(text).passed is passes


@pytest.mark.parametrize("expect, passes", [("expect makespan <= 3ms", True), ("expect makespan <= 2.5ms", False)])
def test_makespan_expectation(expect, passes):
    text = """device d { compute 1 copy 1 }
buffer h 1MiB on host pinned
buffer x 1MiB on d
stream s on d
thread t {
  s: copy x <- h 1ms
  s: kernel k reads x 2ms
}
""" + expect + "\n"
    report = check(text)
    assert report.passed is passes
    if not passes:
        assert [d.code.value for d in report.diagnostics] == ["SP401"]


PRIORITIES = """device d0 { compute 1 copy 1 }
buffer a 1MiB on d0
buffer b 1MiB on d0
buffer ah 1MiB on host pinned
stream lo on d0 priority low
stream hi on d0 priority high
thread main {
  lo: kernel L writes a 5ms
  lo: copy ah <- a 5ms
  hi: kernel H writes b 5ms
}
"""
"""L and H both want the one compute unit at 0: H has it first (rule 12), so L's copy ends at
15 ms. Running L first would end everything at 10 ms, which no runtime does."""


@pytest.mark.parametrize("limit, passes", [("15ms", True), ("14.9ms", False), ("10ms", False)])
def test_a_makespan_bound_is_met_by_the_run_that_gives_contended_engines_to_priority(limit, passes):
    report = check(PRIORITIES + f"expect makespan <= {limit}\n")
    assert report.passed is passes
    if not passes:
        (diagnostic,) = report.diagnostics
        assert diagnostic.code.value == "SP401" and "makespan 15 ms exceeds" in diagnostic.message


RACING_FLAG = """device d0 { compute 2 }
stream s0 on d0
stream s1 on d0
stream s2 on d0
buffer x 256B on d0
event f flag
thread a {
  s0: record f
}
thread b {
  s1: reset f
}
thread c {
  s2: wait f
  s2: kernel k writes x 1us
  s2: kernel k2 1us
}
expect deadlock
"""
"""Three threads race to set, clear and wait for a flag: the greedy simulation deadlocks, and
the optimizer has no exact model of the race, yet some execution finishes in 2us. No
execution finishes sooner: thread c's two kernels run one after the other on its stream
(while the engines' load alone, 2us of work on 2 units, bounds it by 1us only)."""


@pytest.mark.parametrize("limit, passes", [("2us", True), ("1999ns", False)])
def test_makespan_of_a_program_with_races_is_decided_by_other_runs_and_own_chains(limit, passes):
    report = check(RACING_FLAG + f"expect makespan <= {limit}\n")
    assert report.passed is passes
    assert not [f for f in report.findings if f.code.value == "SP301"]  # decided, not unknown
    if not passes:
        assert any("proven lower bound" in d.message for d in report.diagnostics if d.code.value == "SP401")


SHARED_RECORD = """
device d0 { }
buffer x 2KiB on d0
buffer h 2KiB on host pinned
stream a on d0
stream b on d0
event e
thread t1 {
  a: record e
}
thread t2 {
  a: kernel k writes x 1s
  a: record e
  b: wait e
  b: copy h <- x 10ns
}
"""
"""Both threads record `e` on stream `a`, so the wait binds to a record behind the 1 s kernel
whichever thread records last (rule 3): the copy ends 1 s + 10 ns in, in every execution. Each
thread's own chain (1 s) does not show it; the must-happen-before order does."""


@pytest.mark.parametrize("limit, passes", [("1000000010ns", True), ("1s", False)])
def test_makespan_of_racing_threads_bounded_by_the_orders_every_execution_keeps(limit, passes):
    report = check(SHARED_RECORD + f"expect makespan <= {limit}\n")
    assert report.passed is passes
    assert not [f for f in report.findings if f.code.value == "SP301"]
    if not passes:
        assert any("1000.00001 ms exceeds 1000 ms" in d.message for d in report.diagnostics)


@pytest.mark.parametrize("limit, passes", [("2s", True), ("1999999999ns", False)])
def test_makespan_of_threads_sharing_a_stream_is_at_least_the_stream_s_work(limit, passes):
    # whichever thread enqueues first, the two 1 s kernels run one after the other
    report = check("device d { compute 2 }\nstream s on d\nthread a {\n  s: kernel k 1s\n}\n"
                   f"thread b {{\n  s: kernel k 1s\n}}\nexpect makespan <= {limit}\n")
    assert report.passed is passes
    assert not [f for f in report.findings if f.code.value == "SP301"]


def test_the_calls_of_one_group_batch_on_a_stream_are_not_added_up():
    # the two allreduces of each rank's stream are one fused launch (not ordered by the
    # stream): the program ends at 1 ms + 1 us, which a bound that added them up would refuse
    spec = ("device g[2] { compute 1 comm 4 }\nbuffer x[2] 1KiB on g[0]\nbuffer y[2] 1KiB on g[1]\n"
            "stream a on g[0]\nstream b on g[1]\ncomm c = { a, b }\n"
            "thread t {\n  group {\n    a: allreduce c x[0] 1ms\n    a: allreduce c x[1] 1ms\n"
            "    b: allreduce c y[0] 1ms\n    b: allreduce c y[1] 1ms\n  }\n}\n"
            "thread u {\n  a: kernel k 1us\n}\n")
    assert check(spec + "expect makespan <= 1.001ms\n").passed
    report = check(spec + "expect makespan <= 1.0009ms\n")
    assert not report.passed and not [f for f in report.findings if f.code.value == "SP301"]


def test_a_race_free_run_of_no_time_meets_a_makespan_bound():
    untimed = RACING_FLAG.replace(" 1us", "")  # every execution that finishes takes 0 ns
    assert check(untimed + "expect makespan <= 1us\n").passed


@pytest.mark.parametrize("body, limit, passes", [
    ("s: kernel k 1.5ns", "1.75ns", True),  # the launch (0.25 ns), then the kernel
    ("s: kernel k 1.5ns\n  s: kernel k2 1.5ns", "3.25ns", True),  # in whole ns it was 1 + 2 + 2
    ("s: kernel k 1.5ns\n  s: kernel k2 1.5001ns", "3.25ns", False),
    ("s: kernel k 1.5ns\n  s: kernel k2 1.5ns", "3.2499ns", False),
])
def test_makespan_bounds_are_checked_at_the_resolution_the_spec_writes(body, limit, passes):
    report = check(f"device d {{ launch 0.25ns }}\nstream s on d\nthread t {{\n  {body}\n}}\n"
                   f"expect makespan <= {limit}\n")
    assert report.passed is passes
    if passes:
        assert not report.diagnostics and not report.findings
    else:  # the makespan in exact digits: launch 0.25 ns, then the two kernels
        (diagnostic,) = report.diagnostics
        assert diagnostic.code.value == "SP401" and "makespan 0.0000032" in diagnostic.message


@pytest.mark.parametrize("limit, passes", [("3ns", True), ("2.9999ns", False)])
def test_makespan_of_racing_threads_at_a_resolution_finer_than_a_nanosecond(limit, passes):
    report = check(RACING_FLAG.replace(" 1us", " 1.5ns") + f"expect makespan <= {limit}\n")
    assert report.passed is passes
    assert not [f for f in report.findings if f.code.value == "SP301"]


HAND_BACK = ("device d\nstream s on d\nnotify n\nthread a {\n  s: notify n\n  s: await n\n}\n"
             "thread b {\n  s: await n\n  s: notify n\n}\nexpect deadlock\n")
"""Two threads hand one notify back and forth on one stream. Only a run in which they take
turns at the same instant finishes (a's notify, b's await, b's notify, a's await); a thread
that goes as far as it can first leaves an await behind the other's with no notify left."""


def test_a_makespan_bound_met_only_by_threads_that_take_turns_at_one_instant():
    report = check(HAND_BACK + "expect makespan <= 1ms\n")
    assert report.passed and not [f for f in report.findings if f.code.value == "SP301"]


def test_a_program_none_of_whose_executions_finish_fails_a_makespan_bound():
    # a's host await has no notify anywhere; b shares the stream (so the threads race)
    report = check("device d\nstream s on d\nnotify n\nthread a {\n  s: kernel k 1us\n  await n\n}\n"
                   "thread b {\n  s: kernel j 1us\n}\nexpect deadlock\nexpect makespan <= 1ms\n")
    assert not report.passed and not [f for f in report.findings if f.code.value == "SP301"]
    (diagnostic,) = [d for d in report.diagnostics if d.code.value == "SP401"]
    assert "of the program finishes (each one deadlocks)" in diagnostic.message


def test_makespan_questions_stay_within_the_budget():
    # The same program with almost no budget: the solver's "does any execution finish?" is
    # not asked past `--budget`, and the bound is undecided, not failed.
    spec = ("device d\nstream s on d\nnotify n\nthread a {\n  s: kernel k 1us\n  await n\n}\n"
            "thread b {\n  s: kernel j 1us\n}\nexpect makespan <= 1ms\n")
    report = check(spec, budget=0.001)
    assert not [d for d in report.diagnostics if d.code.value == "SP401"]
    (unknown,) = [f for f in report.findings if f.kind is FindingKind.UNKNOWN and f.detail.get("about") == "makespan"]
    assert "left of the budget" in unknown.message


def test_a_resolution_too_fine_for_an_exact_makespan_is_unknown():
    report = check("device d\nstream s on d\nthread t {\n  s: kernel k 1.0000000001ns\n}\n"
                   "expect makespan <= 3ns\n")
    (unknown,) = report.findings
    assert unknown.code.value == "SP301" and "finer than a millionth of a nanosecond" in unknown.message


def test_exit_statuses(run, tmp_path):
    clean = tmp_path / "clean.sched"
    clean.write_text(RACY.replace("s2: kernel b writes x", "s2: kernel b writes y"))
    racy = tmp_path / "racy.sched"
    racy.write_text(RACY)
    expected = tmp_path / "expected.sched"
    expected.write_text(RACY + "expect race on x\n")
    broken = tmp_path / "broken.sched"
    broken.write_text("thread t {\n  s9: kernel k\n}\n")
    assert run("check", clean)[0] == 0
    assert run("check", racy)[0] == 1
    assert run("check", expected)[0] == 0
    assert run("check", broken)[0] == 2
    assert run("check", clean, racy)[0] == 1
    assert run("check", clean, broken)[0] == 2


def test_json_race_contract(run, tmp_path):
    racy = tmp_path / "racy.sched"
    racy.write_text(RACY)
    status, out, _ = run("check", "--format", "json", racy)
    data = json.loads(out)["files"][0]
    assert status == 1
    assert data["status"] == "findings"
    (finding,) = data["findings"]
    assert finding["kind"] == "race" and finding["code"] == "SP101" and finding["buffer"] == "x"
    assert [loc["line"] for loc in finding["locations"]] == [7, 8]
    assert set(finding["locations"][0]) == {"line", "column", "end_line", "end_column"}
    assert finding["witness"]["steps"]


def test_solver_path_finds_cross_thread_race():
    """Two threads sharing a stream are decided by the solver, not the fast path."""
    text = """device d { compute 2 }
buffer x 1MiB on d
stream s1 on d
stream s2 on d
event e
thread p {
  s1: kernel w writes x
  s1: record e
}
thread c {
  s2: wait e
  s2: kernel r reads x
}
"""
    report = check(text)
    races = [f for f in report.findings if f.kind is FindingKind.RACE]
    assert len(races) == 1  # the wait may be enqueued before the record and bind to nothing
    assert report.status is Status.FINDINGS


def test_unknown_is_never_clean(monkeypatch):
    import checker.smt as smt
    from checker.findings import Finding

    monkeypatch.setattr(smt, "analyze", lambda program, timeout, rlimit=None, total=None, **options: (Finding(FindingKind.UNKNOWN, "timed out", ()),))
    text = RACY.replace("thread t {", "event g flag\nthread t {\n  s1: record g")
    report = check(text)
    assert report.status is Status.UNKNOWN
    assert not report.passed
    assert check(text, allow_unknown=True).passed


COMMS = """device d0 { comm 1 }
device d1 { comm 1 }
buffer a 1MiB on d0
buffer b 2MiB on d1
stream c0 on d0
stream c1 on d1
comm w = { c0, c1 }
"""


def test_allreduce_size_mismatch_is_sp202():
    report = check(COMMS + "thread r0 {\n  c0: allreduce w a\n}\nthread r1 {\n  c1: allreduce w b\n}\n")
    kinds = [f.kind for f in report.findings]
    assert kinds == [FindingKind.COLLECTIVE_MISMATCH]
    assert report.findings[0].code.value == "SP202"
    assert {report.program.statements[i].span.line for i in report.findings[0].statements} == {9, 12}
    # The contract: "the k-th allreduce of every member stream forms one group", whatever the
    # sizes. So the mismatch is a warning: it fails `check` only under `expect no mismatch`.
    assert report.findings[0].advisory and report.passed
    assert not check(COMMS + "thread r0 {\n  c0: allreduce w a\n}\nthread r1 {\n  c1: allreduce w b\n}\n"
                     "expect no mismatch\n").passed


def test_a_send_crossing_a_collective_deadlocks_without_a_mismatch():
    # The allreduces meet, and so do the send and the recv (they pair apart from collectives),
    # but each rank's stream queues its half behind the other kind: a hang, not a mismatch.
    text = COMMS + ("thread r0 {\n  c0: allreduce w a\n  c0: send w to c1 a\n}\n"
                    "thread r1 {\n  c1: recv w from c0 b[0:1MiB]\n  c1: allreduce w b[0:1MiB]\n}\n")
    report = check(text)
    (deadlock,) = report.findings
    assert deadlock.kind.value == "deadlock"


def test_matching_send_recv_is_clean():
    text = COMMS + "thread r0 {\n  c0: send w to c1 a\n}\nthread r1 {\n  c1: recv w from c0 b[0:1MiB]\n}\n"
    report = check(text)
    assert report.status is Status.CLEAN and report.passed


STALE_FLAG = """device npu0 { compute 2 }
buffer buf 4MiB on npu0
stream s1 on npu0
stream s2 on npu0
event full flag
event empty[2]
thread t {
  for i in 0..2 {
    s1: kernel produce writes buf 1ms
    s1: record full
    s2: wait full
    s2: kernel consume reads buf 1ms
    s2: record empty[i]
    s1: wait empty[i]
  }
}
"""


def test_a_race_behind_a_flag_never_reset_says_to_reset_it():
    report = check_loaded(load_text(STALE_FLAG, "flag.sched"))
    (race,) = [f for f in report.findings if f.kind is FindingKind.RACE]
    assert race.help.startswith("`s2: wait full` (line 11) can pass on an earlier `record full`")
    assert "`s2: reset full`" in race.help
    fixed = STALE_FLAG.replace("    s2: kernel consume", "    s2: reset full\n    s2: kernel consume")
    assert check_loaded(load_text(fixed, "flag.sched")).findings == ()


CROSSED_SENDS = """device d0
device d1
buffer x[2] 1MiB on d0
buffer y[2] 1MiB on d1
stream s0 on d0
stream s1 on d1
stream w0 on d0
comm c = { s0, s1 }
thread r0 {
  s0: send c to s1 x[0]
  s0: recv c from s1 x[1]
  for i in 0..30 {
    s0: kernel after reads x[0]
  }
  w0: wait_stream s0
}
thread r1 {
  s1: send c to s0 y[0]
  s1: recv c from s0 y[1]
  sync s1
}
"""


def test_a_deadlock_report_names_its_cycle_first_and_stays_short():
    from checker.report.text import STUCK_SHOWN, render_finding

    report = check(CROSSED_SENDS)
    (finding,) = [f for f in report.findings if f.kind is FindingKind.DEADLOCK]
    program = report.program
    lines = [program.statements[item.statement].span.line for item in finding.stuck]
    # each send waits for the other rank's recv, queued behind that rank's send: the cycle first
    assert set(lines[:4]) == {10, 11, 18, 19}
    assert len(finding.stuck) > STUCK_SHOWN
    from rich.text import Text

    text = [Text.from_markup(line).plain for line in render_finding(report, finding)]
    text = [line for line in text if line.lstrip().startswith("= stuck")]
    assert len(text) == STUCK_SHOWN + 1
    assert f"and {len(finding.stuck) - STUCK_SHOWN} more" in text[-1]
    assert "kernel after [i=1]:" in "".join(text)  # loop iterations are named, as printed
    # wait_stream's hidden record names the stream it was resolved to
    record = next(s for s in program.statements if s.form.startswith("record (for"))
    assert program.describe(record) == "s0: record (for w0: wait_stream s0)"


@pytest.mark.parametrize("runtime, where", [(" { runtime cuda }", "default stream (`gpu0.default`)"),
                                             ("", "waits for no stream (CANN's aclrtMemcpy")])
def test_race_help_for_a_memcpy_on_the_default_stream_names_a_sync(runtime, where):
    report = check(f"""device gpu0{runtime}
buffer x 4KiB on gpu0
buffer h 4KiB on host pinned
stream s on gpu0 nonblocking
thread t {{
  s: kernel k writes x 1ms
  memcpy h <- x
}}
""")
    (finding,) = report.findings
    assert where in finding.help and "`sync s`" in finding.help
    assert ("blocks until done" in finding.help) == bool(runtime)  # (CUDA: a device-to-host memcpy)
    assert ".calls@" not in finding.help and ".calls@" not in finding.message  # (no stream a spec can name)


def test_race_help_for_a_task_enqueued_on_the_default_stream_by_name_is_the_stream_one():
    """`gpu0.default: free x` is a stream statement like any other (cudaFreeAsync(x, 0)): it
    does not block, and the spec named its stream."""
    report = check("""device gpu0 { compute 1 copy 1 runtime cuda }
buffer x 4KiB on gpu0
stream s on gpu0 nonblocking
thread t {
  s: kernel k writes x 1ms
  gpu0.default: free x
}
""")
    races = [f for f in report.findings if f.code == "SP101"]
    assert races and all("blocks" not in f.help and "default stream" not in f.help for f in races)


def test_race_help_names_a_wait_that_can_come_before_its_record():
    report = check("""device d
buffer g 4KiB on d
stream comp on d
stream comm on d
event reduced
notify ready
thread main {
  comp: kernel grad writes g 1ms
  notify ready
  comp: wait reduced
  comp: kernel step reads g writes g 1ms
}
thread hook {
  await ready
  comm: kernel reduce reads g writes g 1ms
  comm: record reduced
}
""")
    helps = [f.help for f in report.findings if f.kind is FindingKind.RACE]
    assert any("`comp: wait reduced` (line 10) can be enqueued before `comm: record reduced` (line 16)" in h
               for h in helps), helps


def _race_helps(text: str) -> list[str]:
    return [f.help for f in check(text).findings if f.kind is FindingKind.RACE]


@pytest.mark.parametrize("engine", [{}, {"exhaustive": True}, {"explore_first": 0}], ids=["default", "exhaustive", "solver"])
def test_race_on_a_reused_block_shows_the_race_within_one_iteration_first(engine):
    # Each iteration's kernel reads the weights its copy writes without waiting for the copy;
    # across iterations the block also goes to the next copy at the free. The pair of one
    # iteration is the witness, and its help is the missing wait, not a record_stream.
    report = check("""device gpu { runtime cuda }
tensor w[2] 16MiB on gpu
buffer w_cpu[2] 16MiB on host pinned
buffer act 8MiB on gpu
stream transfer on gpu nonblocking
thread pipe {
  for g in 0..2 {
    transfer: alloc w[g]
    transfer: copy w[g] <- w_cpu[g]
    gpu.default: kernel group_forward reads w[g], act writes act
    free w[g]
  }
  sync all
}
""", **engine)
    (race,) = [f for f in report.findings if f.kind is FindingKind.RACE]
    program = report.program
    shown = [program.statements[i].bindings for i in race.statements]
    assert race.instances == 4 and shown[0] == shown[1]
    assert race.help == ("order them with an event: `record E` on `transfer` after the first, `wait E` on "
                         "`gpu.default` before the second (or put both on one stream)")


def test_race_buffers_shows_a_pair_of_one_iteration_over_an_earlier_one_across_iterations():
    from checker.messages import race_buffers

    program = load_text("""device d
buffer x 1MiB on d
stream a on d
stream b on d
thread t {
  for i in 0..2 {
    a: kernel w writes x
    b: kernel r reads x
  }
}
""", "spec.sched").program
    w, r = program.statements[0::2], program.statements[1::2]  # (by iteration)
    pairs = [(w[0], r[1]), (w[1], r[0]), (w[1], r[1]), (w[0], r[0])]
    ((k, memory, count, _),) = race_buffers(program, pairs)
    assert (k, memory.name, count) == (2, "x", 4)


def test_race_help_orders_a_handed_back_buffer_the_way_the_hand_off_goes():
    # The transfer thread refills `inter` once main has *enqueued* its copy (the notify back),
    # not once the copy is done. The copy is enqueued first in every run, so the order to add
    # goes from the copy to the next transfer, and the wait before the copy, bound to this
    # layer's record by the `ready` hand-off, is not what went wrong.
    helps = _race_helps("""device gpu0
buffer inter 8MiB on gpu0
buffer weights[2] 8MiB on gpu0
stream eplb on gpu0
stream main_s on gpu0
event transferred[2]
notify ready
notify consumed
thread transfer {
  for layer in 0..2 {
    eplb: kernel transfer_layer writes inter
    eplb: record transferred[layer]
    notify ready
    await consumed
  }
}
thread main {
  for layer in 0..2 {
    await ready
    main_s: wait transferred[layer]
    main_s: copy weights[layer] <- inter
    notify consumed
  }
}
""")
    assert helps == ["order them with an event: `record E` on `main_s` after `main_s: copy weights[layer] <- inter` "
                     "(line 21), `wait E` on `eplb` before `eplb: kernel transfer_layer` (line 11) (or put both on "
                     "one stream); they are enqueued by two threads, and a wait binds to the latest record enqueued "
                     "before it: have `main` set a notify after the record (`notify N`) and `transfer` `await N` "
                     "before the wait"]


def test_race_help_names_the_record_that_replaced_the_one_a_wait_needed():
    # one event recorded on two streams: the wait binds to the second record only
    helps = _race_helps("""device d { compute 2 }
buffer part[2] 1MiB on d
stream work[2] on d
stream waiter on d
event barrier
thread main {
  work[0]: kernel k0 writes part[0] 5ms
  work[1]: kernel k1 writes part[1] 1ms
  work[0]: record barrier
  work[1]: record barrier
  waiter: wait barrier
  waiter: kernel merge reads part[0], part[1]
}
""")
    assert helps == ["`waiter: wait barrier` (line 11) binds to the latest `record barrier`, `work[1]: record "
                     "barrier` (line 10), which replaced `work[0]: record barrier` (line 9): an event holds only "
                     "its latest record. Record one event per stream and wait on each"]


def test_race_help_names_a_stale_record_a_wait_can_bind_to():
    helps = _race_helps("""device d { compute 2 }
buffer buf[2] 1MiB on d
buffer out 1MiB on d
stream prod on d
stream cons on d
event filled
notify started
thread producer {
  prod: record filled
  notify started
  for i in 0..3 {
    prod: kernel fill writes buf[i % 2] 1ms
    prod: record filled
  }
}
thread consumer {
  await started
  for i in 0..3 {
    cons: wait filled
    cons: kernel use reads buf[i % 2] writes out 1ms
  }
}
""")
    assert len(helps) == 1
    assert helps[0].startswith("`cons: wait filled` (line 19) can bind to an older `prod: record filled` (line 9), "
                               "enqueued before `prod: kernel fill` (line 12), not to the one after it (line 13)")


def test_race_help_for_a_wait_enqueued_before_its_record_by_one_thread_says_reorder():
    helps = _race_helps("""device d { compute 2 }
buffer kv 1MiB on d
stream a on d
stream b on d
event ready
thread main {
  a: wait ready
  a: kernel consume reads kv 1ms
  b: kernel produce writes kv 2ms
  b: record ready
}
""")
    assert helps == ["`a: wait ready` (line 7) is enqueued before `b: record ready` (line 10) by the same thread, "
                     "so it waits for nothing: a wait binds to the latest record enqueued before it. Enqueue the "
                     "record, after the work it marks, before the wait (move the wait, and what it orders, after "
                     "line 10)"]
    fixed = ("device d { compute 2 }\nbuffer kv 1MiB on d\nstream a on d\nstream b on d\nevent ready\nthread main {\n"
             "  b: kernel produce writes kv 2ms\n  b: record ready\n  a: wait ready\n  a: kernel consume reads kv 1ms\n}\n")
    assert _race_helps(fixed) == []


def test_race_help_moves_a_wait_that_comes_after_the_access_it_should_order():
    # a pipeline stage copies the activation, then waits for the event recorded after the
    # kernel that wrote it; the back-pressure wait before that kernel binds to nothing at
    # first by design and is not the fix
    helps = _race_helps(PIPELINE_STAGES)
    assert helps == ["`p2p: wait written` (line 18) comes after `p2p: copy out <- act` (line 17) on `p2p`, so it "
                     "does not order it: a wait orders only the work enqueued after it on its stream. Move the "
                     "wait before line 17"]
    fixed = PIPELINE_STAGES.replace("  p2p: copy out <- act 1ms\n  p2p: wait written\n",
                                    "  p2p: wait written\n  p2p: copy out <- act 1ms\n")
    assert fixed != PIPELINE_STAGES and _race_helps(fixed) == []


def test_race_help_names_a_wait_on_the_wrong_element_not_a_later_iterations_wait():
    # the wait before the read names e[i], the record after the write is e[1]: at i=0 the
    # wait binds to nothing; iteration 1's wait (written before the read) is not the fix
    spec = ("device d { compute 2 }\nbuffer x 1KiB on d\nstream s1 on d\nstream s2 on d\nevent e[2]\n"
            "thread t {\n  for i in 0..2 {\n    s1: kernel a writes x\n    s1: record e[1]\n"
            "    s2: wait e[i]\n    s2: kernel b reads x\n  }\n}\n")
    helps = _race_helps(spec)
    assert helps and all("Move the wait" not in h for h in helps), helps
    assert "`s2: wait e[0]` (line 10) waits on `e[0]`, but the record after `s1: kernel a` (line 8) is " \
           "`s1: record e[1]` (line 9): the wait's index names another element of `e`" in helps[0], helps


PIPELINE_STAGES = """device d { compute 1 copy 1 }
buffer act 1MiB on d
buffer out 1MiB on d
stream comp on d
stream p2p on d
event written
event copied
notify ready
thread stage0 {
  comp: wait copied
  comp: kernel fwd writes act 1ms
  comp: record written
  notify ready
}
thread stage1 {
  await ready
  p2p: copy out <- act 1ms
  p2p: wait written
  p2p: record copied
}
"""


def test_race_help_names_the_record_already_there_that_no_wait_uses():
    # the producer records `written` after its kernel and hands over with a notify; the
    # consumer's stream never waits on it
    helps = _race_helps(HANDED_OVER)
    assert helps == ["`a: record written` (line 11) follows `a: kernel stage_a` (line 10) on `a`, and the execution "
                     "shown enqueues it before `b: kernel stage_b` (line 17): wait on it there (`b: wait written` "
                     "before line 17; if the record is not always enqueued first, have the thread `await` a notify "
                     "set after it)"]
    fixed = HANDED_OVER.replace("  b: kernel stage_b", "  b: wait written\n  b: kernel stage_b")
    assert fixed != HANDED_OVER and _race_helps(fixed) == []


HANDED_OVER = """device d { compute 2 }
buffer mid 1MiB on d
buffer out 1MiB on d
stream a on d
stream b on d
event written
event drained
notify ready
thread producer {
  a: kernel stage_a writes mid 1ms
  a: record written
  notify ready
}
thread consumer {
  await ready
  b: wait drained
  b: kernel stage_b reads mid writes out 1ms
}
"""


def test_deadlock_help_for_crossed_sends_suggests_a_group():
    (finding,) = [f for f in check(CROSSED_SENDS).findings if f.kind is FindingKind.DEADLOCK]
    assert "`group { ... }`" in finding.help and "even ranks send first" in finding.help


def _deadlock_help(text: str) -> str:
    (finding,) = [f for f in check(text).findings if f.kind is FindingKind.DEADLOCK]
    return finding.help


def test_deadlock_help_for_a_ring_of_sends_each_queued_before_its_recv():
    # No two groups share two streams in opposite orders: the cycle goes around all four ranks.
    help = _deadlock_help("""device gpu[4] { runtime cuda }
buffer act[4] 1MiB on gpu
buffer rx[4] 1MiB on gpu
stream p2p[4] on gpu
comm pp = { p2p }
thread rank[4] {
  p2p[rank]: send pp to p2p[(rank+1)%4] act[rank]
  p2p[rank]: recv pp from p2p[(rank+3)%4] rx[rank]
  sync p2p[rank]
}
""")
    assert "`group { ... }`" in help and "even ranks send first" in help


def test_deadlock_help_for_collectives_crossed_in_one_hardware_queue():
    help = _deadlock_help("""device gpu[2] { queues 1 }
buffer a[2] 1MiB on gpu
buffer b[2] 1MiB on gpu
stream sa[2] on gpu
stream sb[2] on gpu
comm ca = { sa }
comm cb = { sb }
thread r0 {
  sa[0]: allreduce ca a[0]
  sb[0]: allreduce cb b[0]
  sync gpu[0]
}
thread r1 {
  sb[1]: allreduce cb b[1]
  sa[1]: allreduce ca a[1]
  sync gpu[1]
}
""")
    assert help.startswith("a collective completes only once all its members have started, and here each waits "
                           "for a partner queued behind a call of another comm on its stream or its device's "
                           "hardware queue (`queues N`): the ranks issue the calls of comms `ca` and `cb` in crossed "
                           "orders")


def test_deadlock_help_for_collectives_crossed_through_events():
    help = _deadlock_help("""device npu[2]
buffer x[2] 1MiB on npu
buffer y[2] 1MiB on npu
stream comp[2] on npu
stream sa[2] on npu
stream sb[2] on npu
comm ca = { sa }
comm cb = { sb }
event a_done[2]
event go[2]
thread r0 {
  sa[0]: allgather ca x[0]
  sa[0]: record a_done[0]
  sb[0]: wait a_done[0]
  sb[0]: allgather cb y[0]
  sync sb[0]
}
thread r1 {
  sb[1]: allgather cb y[1]
  sb[1]: record go[1]
  sa[1]: wait go[1]
  sa[1]: allgather ca x[1]
  sync sa[1]
}
""")
    assert help.startswith("the ranks issue these collectives in different orders")


def test_deadlock_help_names_the_send_whose_recv_is_never_issued():
    help = _deadlock_help("""device gpu[2] { runtime cuda }
buffer x[2] 1MiB on gpu
stream s[2] on gpu
comm w = { s }
thread r0 {
  for i in 0..3 {
    s[0]: send w to s[1] x[0]
    s[0]: recv w from s[1] x[0]
  }
  sync s[0]
}
thread r1 {
  for i in 0..2 {
    s[1]: recv w from s[0] x[1]
    s[1]: send w to s[0] x[1]
  }
  sync s[1]
}
""")
    assert help.startswith("`s[0]: send w to s[1]` (line 7) is send 3 from `s[0]` to `s[1]` on comm `w`, and `s[1]` "
                           "never issues a matching recv 3 (`recv w from s[0]`)")


def test_deadlock_help_skips_a_notify_queued_behind_the_await_it_would_release():
    # Two threads take a driver lock (`drv`) and then, in the stream callback, the GIL; t2
    # holds the GIL across its call. Its stream's `s: notify gil` (line 21) sits behind
    # t1's `s: await gil` (line 13) on `s`: only the host's `notify gil` (line 24) could
    # release that await.
    help = _deadlock_help("""device gpu { runtime cuda }
buffer log_host 4KiB on host
stream s on gpu
notify gil
notify drv
thread init {
  notify gil
  notify drv
}
thread t1 {
  notify gil
  await drv
  s: await drv
  s: await gil
  s: callback cb1 writes log_host
  s: notify gil
  s: notify drv
  notify drv
}
thread t2 {
  await gil
  await drv
  s: await drv
  s: await gil
  s: callback cb2 writes log_host
  s: notify gil
  s: notify drv
  notify drv
  notify gil
  sync s
}
""")
    assert help.startswith("`notify gil` (line 29), which would release `s: await gil` (line 14)"), help


@pytest.mark.parametrize("body,help", [
    ("  s1: wait ready\n  s1: kernel k\n",
     "`s1: wait ready` (line 7) waits for flag event `ready`, which no statement records"),
    ("  s1: notify n\n  s2: await n\n  s2: await n\n",
     "`n` is set 1 time and awaited 2 times: each `notify` releases one `await`, so `s2: await n` (line 9) waits "
     "forever; set it once per await"),
    ("  s1: await n\n  s1: notify n\n",
     "`s1: notify n` (line 8), which would release `s1: await n` (line 7), is stuck too"),
])
def test_deadlock_help_for_a_flag_or_notify_nothing_can_set(body, help):
    spec = f"""device d
stream s1 on d
stream s2 on d
event ready flag
notify n
thread t {{
{body}}}
"""
    assert _deadlock_help(spec).startswith(help)


def test_deadlock_help_for_a_notify_behind_a_device_wide_free():
    report = check("""device gpu0 { compute 2 runtime cuda }
buffer vram 1MiB on gpu0
stream netio on gpu0 nonblocking
notify stop
thread main {
  netio: await stop
  netio: kernel tail
  free vram
  notify stop
}
""")
    (finding,) = [f for f in report.findings if f.kind is FindingKind.DEADLOCK]
    assert finding.help.startswith("`notify stop` (line 9), which would release `netio: await stop` (line 6), "
                                   "comes after `free vram (cudaFree synchronizes the device)` (line 8)")
    assert "cudaFreeAsync" in finding.help


def test_help_for_a_free_racing_another_thread_s_task_hands_the_enqueue_over_first():
    # t1 already syncs s; t2 may enqueue the kernel after that sync
    spec = """device npu { }
buffer d 1MiB on npu
stream s on npu
notify n
thread t1 {
  sync s
  free d
}
thread t2 {
  s: kernel k reads d 1us
}
"""
    findings = check(spec).findings
    assert sorted(f.kind.value for f in findings) == ["race", "use-after-free"]
    assert {f.help for f in findings} == {
        "order the two threads: have `t2` set a notify after enqueueing `s: kernel k` (line 10) (`notify N`) and "
        "`t1` `await N`, then `sync s` (or an event recorded after the task), before `free d` (line 7): a sync "
        "waits only for work enqueued before it"}
    fixed = spec.replace("  sync s\n", "  await n\n  sync s\n").replace("1us\n", "1us\n  notify n\n")
    assert check(fixed).findings == ()


@pytest.mark.parametrize("free,fix,help", [
    ("  free d\n", "  sync s\n  free d\n",
     "make the host wait for the use before the free: `sync s` (or `sync E` on an event recorded after the use) "
     "before `free d` (line 8)"),
    ("  o: free d\n", "  s: record e\n  o: wait e\n  o: free d\n",
     "make the free wait for the use: `record E` on `s` after it, `wait E` on `o` before `o: free d` (line 8)"),
])
def test_use_after_free_help_says_how_that_free_can_wait(free, fix, help):
    # A host cannot `wait` on an event: its free syncs; a free on another stream waits on one.
    spec = """device npu { runtime cann }
buffer d 1MiB on npu
stream s on npu
stream o on npu
event e
thread t {
  s: kernel k writes d 1us
FREE}
"""
    (dead,) = [f for f in check(spec.replace("FREE", free)).findings if f.kind is FindingKind.USE_AFTER_FREE]
    assert dead.help == help
    assert check(spec.replace("FREE", fix)).findings == ()


def test_race_help_names_the_notify_set_before_the_record_a_host_sync_needs():
    spec = """device gpu
buffer out_host 1MiB on host pinned
stream ext on gpu
event done
notify completed
thread submit {
  ext: kernel produce writes out_host 50us
  notify completed
  ext: record done
}
thread caller {
  await completed
  sync done
  host read reads out_host
}
"""
    (race,) = [f for f in check(spec).findings if f.kind is FindingKind.RACE]
    assert race.help == ("`sync done` (line 13) can be issued before `ext: record done` (line 9), and then waits "
                         "for an older record or none (a sync binds to the latest record enqueued before it): "
                         "`notify completed` (line 8) is set before that record, so move it after the record")
    assert check(spec.replace("  notify completed\n  ext: record done\n",
                              "  ext: record done\n  notify completed\n")).findings == ()


REUSED_TOO_EARLY = """device gpu { runtime cuda }
buffer t 4KiB on gpu
buffer th 4KiB on host pinned
stream s on gpu nonblocking
event c
notify r
notify read
thread engine {
  s: copy th <- t
  s: record c
  notify r
  s: kernel next writes t
  s: copy th <- t
  AWAIT
  s: record c
}
thread out {
  await r
  sync c
  host read reads th
  notify read
}
"""


@pytest.mark.parametrize("late_await, reuse", [
    ("", "have `out` set a notify after it (`notify N`) and `engine` `await N` before enqueueing "
         "`s: copy th <- t` (line 13)"),
    ("await read", "`await read` (line 14) comes after it: move it before `s: copy th <- t` (line 13)"),
])
def test_race_help_offers_to_delay_the_overwrite_of_a_buffer_read_after_a_handover(late_await, reuse):
    """The host reads the copy handed over by `notify r`, and the next copy overwrites it: the
    help offers both fixes, the overwrite waiting for the read first (the staging buffer's)."""
    spec = REUSED_TOO_EARLY.replace("AWAIT", late_await)
    (race,) = [f for f in check(spec).findings if f.kind is FindingKind.RACE]
    assert race.help == ("`sync c` (line 19) can be issued before `s: record c` (line 15), and then waits for an "
                         "older record or none (a sync binds to the latest record enqueued before it). If `host read` "
                         "(line 20) is meant to see the work before `notify r` (line 11), `s: copy th <- t` (line 13) "
                         f"overwrites it too early: {reuse}. If it is meant to see the later work, have `engine` set a "
                         "notify after the record (`notify N`) and `out` `await N` before the sync")
    fixed = REUSED_TOO_EARLY.replace("AWAIT", "").replace("  s: kernel next", "  await read\n  s: kernel next")
    assert check(fixed).findings == ()


def test_race_help_names_the_iterations_of_a_wait_to_add_across_iterations():
    """The record a kernel needs is an earlier iteration's: the wait's event must name it from
    the kernel's iteration, which the help says rather than only its element."""
    spec = """device d { compute 2 }
buffer tok 1MiB on d
buffer out[2] 1MiB on host pinned
stream compute on d
stream d2h on d
event copied[2]
thread t {
  for s in 0..2 {
    compute: kernel sample writes tok 1ms
    d2h: wait_stream compute
    d2h: copy out[s] <- tok 1ms
    d2h: record copied[s]
  }
}
"""
    helps = _race_helps(spec)
    assert helps and any("(`compute: wait copied[0]` before line 9, in iteration [s=1], for the record of "
                         "iteration [s=0]: index the event so that it names that record from there)" in h
                         for h in helps), helps
    # One event re-recorded each iteration: a wait binds to its latest record, no note needed.
    plain = _race_helps(spec.replace("event copied[2]", "event copied").replace("record copied[s]", "record copied"))
    assert any("(`compute: wait copied` before line 9)" in h for h in plain), plain


FREED_UNDER_SIDE_WORK = """device gpu { compute 2 }
buffer ws 16MiB on gpu
buffer o 1MiB on gpu
stream main on gpu
stream side on gpu
event fork
event join
thread t {
  main: alloc ws
  main: kernel plan writes ws 5us
  main: record fork
  side: wait fork
  side: kernel attn reads ws writes o 50us
  side: record join
LATER  main: free ws
}
"""


@pytest.mark.parametrize("later, reused", [("", True), ("  main: record join\n", False)])
def test_use_after_free_help_names_the_record_after_the_use_as_the_race_help_does(later, reused):
    """The side stream records `join` after its use: the free should wait on it, as the race
    finding's help says too, unless a wait there would bind to another record."""
    spec = FREED_UNDER_SIDE_WORK.replace("LATER", later)
    findings = check(spec).findings
    (dead,) = [f for f in findings if f.kind is FindingKind.USE_AFTER_FREE]
    if reused:
        assert dead.help == ("`side: record join` (line 14) follows the use on `side`: make the free wait on it "
                             "(`main: wait join` before line 15)")
        assert any("`main: wait join` before line 15" in f.help for f in findings if f.kind is FindingKind.RACE)
        assert check(spec.replace("  main: free ws", "  main: wait join\n  main: free ws")).findings == ()
    else:
        assert dead.help.startswith("make the free wait for the use: `record E` on `side` after it")


def test_race_help_for_replicated_streams_sharing_a_buffer_offers_a_buffer_each():
    spec = """device gpu
buffer d_in 4MiB on gpu
stream s[2] on gpu
thread main {
  for i in 0..2 {
    s[i]: kernel infer writes d_in 1ms
  }
}
"""
    (race,) = [f for f in check(spec).findings if f.kind is FindingKind.RACE]
    assert race.help.endswith("; or, where the iterations are meant to run at once, give each its own `d_in` "
                              "(an array indexed as its stream is)")
    fixed = spec.replace("buffer d_in 4MiB", "buffer d_in[2] 4MiB").replace("writes d_in", "writes d_in[i]")
    assert check(fixed).findings == ()


def test_help_for_a_host_access_racing_another_thread_s_free_orders_the_access_first():
    spec = """device npu { }
buffer d 1MiB on npu
stream s on npu
notify n
thread t1 {
  host look reads d
}
thread t2 {
  s: free d
}
"""
    (race,) = [f for f in check(spec).findings if f.kind is FindingKind.RACE]
    assert race.help == ("order the two threads: have `t1` set a notify after `host look` (line 6) (`notify N`) "
                         "and `t2` `await N` before enqueueing `s: free d` (line 9)")
    fixed = spec.replace("reads d\n", "reads d\n  notify n\n").replace("  s: free d", "  await n\n  s: free d")
    assert check(fixed).findings == ()


def test_race_help_moves_a_record_out_of_the_group_whose_call_it_should_follow():
    spec = """device gpu[2] { runtime cuda }
buffer x[2] 1MiB on gpu
stream s[2] on gpu
stream o on gpu[0]
comm w = { s }
event e
thread r0 {
  group {
    s[0]: allreduce w x[0] 1us
    s[0]: record e
  }
  o: wait e
  o: kernel k reads x[0] 1us
}
thread r1 {
  s[1]: allreduce w x[1] 1us
}
"""
    (race,) = check(spec).findings
    assert race.help == ("`s[0]: record e` (line 10) is inside the `group` that holds `s[0]: allreduce w` (line 9): "
                         "a group enqueues its calls when it ends, so the record comes before the call and waits for "
                         "none of it; move the record after the group")
    assert check(spec.replace("    s[0]: record e\n  }\n", "  }\n  s[0]: record e\n")).findings == ()


def test_race_help_for_a_memset_another_thread_uses_syncs_then_hands_over():
    spec = """device gpu { runtime cuda }
buffer pad 4KiB on gpu
stream s on gpu nonblocking
notify n
thread a {
  memset pad
}
thread b {
  s: kernel put writes pad
}
"""
    (help,) = _race_helps(spec)
    assert help.endswith("returns before it is done, and `b` enqueues `s: kernel put` (line 9): have `a` wait for the "
                         "call (`sync gpu.default`) and then hand over (`notify N`, with `await N` before the other "
                         "thread's use)")
    fixed = spec.replace("  memset pad\n", "  memset pad\n  sync gpu.default\n  notify n\n").replace(
        "  s: kernel", "  await n\n  s: kernel")
    assert check(fixed).findings == ()


SYNC_IN_GROUP = """device gpu[2] { runtime cuda }
buffer g[2] 1MiB on gpu
buffer h[2] 1MiB on host pinned
stream nc[2] on gpu
stream cp[2] on gpu
comm w = { nc }
thread r[2] {
  group {
    nc[r]: allreduce w g[r] 1ms
    sync nc[r]
    cp[r]: copy h[r] <- g[r] 1ms
  }
  sync gpu[r]
}
"""


def test_race_help_moves_work_written_after_a_call_in_its_group_after_the_group():
    helps = set(_race_helps(SYNC_IN_GROUP))  # (one finding for both ranks, named by one)
    assert len(helps) == 1 and helps < {f"`cp[{r}]: copy h[r] <- g[r]` (line 11) is written after `nc[{r}]: allreduce w` (line 9) inside "
                     "its `group`, but a group enqueues its calls when it ends, so it comes first (and a `sync` inside "
                     "the group waits for none of the calls): move it after the group" for r in (0, 1)}
    moved = SYNC_IN_GROUP.replace("    sync nc[r]\n    cp[r]: copy h[r] <- g[r] 1ms\n  }\n",
                                  "  }\n  sync nc[r]\n  cp[r]: copy h[r] <- g[r] 1ms\n")
    assert check(moved).findings == ()


def test_race_help_records_after_the_group_that_holds_the_first_call():
    spec = """device gpu[2] { runtime cuda }
buffer g[2] 1MiB on gpu
buffer o 1MiB on gpu[0]
stream nc[2] on gpu
stream comp on gpu[0]
comm w = { nc }
event e
thread t {
  group {
    nc[0]: allreduce w g[0] 1ms
    nc[1]: allreduce w g[1] 1ms
  }
  comp: kernel use reads g[0] writes o 1ms
  sync all
}
"""
    (help,) = _race_helps(spec)
    assert help.startswith("order them with an event: `record E` on `nc[0]` after the `group` that holds the first, "
                           "`wait E` on `comp` before the second")
    assert check(spec.replace("  }\n  comp:", "  }\n  nc[0]: record e\n  comp: wait e\n  comp:")).findings == ()


def test_race_help_across_threads_hands_the_record_over_and_across_processes_signals():
    spec = """device gpu0 { runtime cuda }
buffer d 1KiB on gpu0
stream s1 on gpu0
stream s2 on gpu0
event e
notify n
thread a {
  s1: kernel k1 writes d
}
thread b {
  s2: kernel k2 writes d
}
"""
    (help,) = _race_helps(spec)
    assert help.endswith("; they are enqueued by two threads, and a wait binds to the latest record enqueued before "
                         "it: have `a` set a notify after the record (`notify N`) and `b` `await N` before the wait")
    fixed = spec.replace("writes d\n}\nthread b {\n", "writes d\n  s1: record e\n  notify n\n}\nthread b {\n"
                         "  await n\n  s2: wait e\n")
    assert check(fixed).findings == ()
    processes = spec.replace("thread a {", "thread a process {").replace("thread b {", "thread b process {")
    # (CUDA: an event shared through an IPC handle, its record handed over by a host signal)
    assert _race_helps(processes) == ["they run in two processes: share an event through an IPC handle "
                                      "(`event E ipc`: `cudaIpcGetEventHandle`, `cudaIpcOpenEventHandle`), whose wait "
                                      "binds only to a record already enqueued: `record E` on `s1` after the first, "
                                      "then `notify N`; in `b`, `await N`, then `wait E` on `s2` before the second"]
    shared = fixed.replace("thread a {", "thread a process {").replace("thread b {", "thread b process {")
    assert _race_helps(shared) == []
    # (declared `ipc`, the event and the buffer shared on purpose get no warning; as written, SP063 and SP075)
    codes = lambda text: sorted(d.code.value for d in load_text(text, "t.sched").diagnostics)  # noqa: E731
    assert codes(shared) == ["SP063", "SP075"]
    assert codes(shared.replace("event e\n", "event e ipc\n").replace("on gpu0\nstream s1", "on gpu0 ipc\nstream s1")) == []
    cann = processes.replace("{ runtime cuda }", "{ runtime cann }")
    assert _race_helps(cann) == ["they run in two processes, where an (interprocess) event orders them only once its record is known to be "
                                 "enqueued: order them with a signal, "
                                 "`s1: notify N` after the first and `s2: await N` before the second (a barrier "
                                 "of stream signals)"]
    signalled = cann.replace("k1 writes d\n", "k1 writes d\n  s1: notify n\n").replace(
        "  s2: kernel", "  s2: await n\n  s2: kernel")
    assert _race_helps(signalled) == []


FLAG_LOOP = """device npu { }
buffer x 1MiB on npu
stream p on npu
stream c on npu
event full flag
event empty flag
thread t {
  p: record empty
  for i in 0..3 {
    p: wait empty
    p: reset empty
    p: kernel w writes x 1us
    p: record full
    c: wait full
    c: kernel r reads x 1us
    c: record empty
  }
}
"""


def test_race_help_resets_a_flag_that_an_earlier_wait_left_set():
    (race,) = [f for f in check(FLAG_LOOP).findings if f.kind is FindingKind.RACE]
    assert race.help.startswith("`c: wait full` (line 14) can pass on an earlier `record full`")
    assert "reset it once the wait is through (`c: reset full`) and have the next record come after that reset" \
        in race.help and race.help.endswith("or record a fresh event each time")
    assert check(FLAG_LOOP.replace("    c: wait full\n", "    c: wait full\n    c: reset full\n")).findings == ()


def test_race_help_does_not_reset_a_flag_that_another_stream_set_before_any_wait():
    # s1's record may set the flag before s2's kernel is done: no reset after the wait clears it
    (race,) = check("""device npu { }
buffer x 1MiB on npu
stream s1 on npu
stream s2 on npu
stream s3 on npu
event f flag
thread t {
  s1: record f
  s2: kernel w writes x 1us
  s2: record f
  s3: wait f
  s3: kernel r reads x 1us
}
""").findings
    assert "reset" not in race.help


@pytest.mark.parametrize("queues", [1, 2])
def test_deadlock_help_for_a_hardware_queue_moves_a_stream_only_where_there_is_another_queue(queues):
    spec = f"""device npu {{ queues {queues} }}
stream s1 on npu
stream s2 on npu
stream s3 on npu
notify n
thread t {{
  s1: await n
  s3: notify n
  sync s1
}}
"""
    (finding,) = check(spec).findings
    moved = "or move one stream to another queue" in finding.help
    assert moved == (queues == 2) and ("under `queues 1`" in finding.help) == (queues == 1)
    if moved:  # s2 takes the second queue's first place: s3 joins it
        assert check(spec.replace("stream s2 on npu\nstream s3 on npu", "stream s3 on npu\nstream s2 on npu")) \
            .findings == ()


def test_deadlock_help_names_the_member_that_skips_a_collective():
    spec = """device gpu[2] { runtime cuda }
buffer x[2] 1MiB on gpu
stream s[2] on gpu
comm world = { s }
thread r[2] {
  s[r]: allreduce world x[r]
  if r == 1 {
    s[r]: broadcast world root s[1] x[r]
  }
  sync s[r]
}
"""
    (finding,) = [f for f in check(spec).findings if f.kind is FindingKind.DEADLOCK]
    assert finding.help.startswith("`s[1]: broadcast world` (line 8) is call 2 of comm `world` on its member, and "
                                   "`s[0]` never issues a call 2")
    assert check(spec.replace("  if r == 1 {\n", "  if r < 2 {\n")).findings == ()


def test_deadlock_help_names_a_blocking_call_that_holds_back_a_collective_s_partner():
    spec = """device gpu[2] { runtime cuda }
buffer x[2] 1MiB on gpu
buffer staging 1MiB on host pinned
stream s[2] on gpu
comm world = { s }
thread t0 {
  s[0]: allreduce world x[0]
  sync s[0]
}
thread t1 {
  free staging
  s[1]: allreduce world x[1]
  sync s[1]
}
"""
    (finding,) = [f for f in check(spec).findings if f.kind is FindingKind.DEADLOCK]
    assert finding.help.startswith("`free staging (cudaFreeHost synchronizes every device)` (line 11) blocks `t1` "
                                   "before it issues `s[1]: allreduce world` (line 12), the partner `s[0]: allreduce "
                                   "world` (line 7) waits for")
    fixed = spec.replace("  free staging\n  s[1]: allreduce world x[1]\n  sync s[1]\n",
                         "  s[1]: allreduce world x[1]\n  sync s[1]\n  free staging\n")
    assert [f.kind for f in check(fixed).findings if f.kind is FindingKind.DEADLOCK] == []


def test_deadlock_help_for_a_notify_behind_freeing_pinned_memory_offers_no_stream_free():
    # cudaFreeAsync cannot free cudaMallocHost memory: the one fix is to set the notify first
    spec = """device gpu0 { compute 2 runtime cuda }
buffer staging 1MiB on host pinned
stream netio on gpu0
notify stop
thread main {
  netio: await stop
  FREE
  notify stop
}
"""
    (finding,) = check(spec.replace("FREE", "free staging")).findings
    assert finding.help.endswith("which is stuck too: set `stop` before that call")
    report = check(spec.replace("FREE", "netio: free staging"))
    assert [d.code.value for d in report.diagnostics] == ["SP068"]


def test_a_deadlock_report_shows_every_place_before_repeats():
    # 15 waits on a flag nobody records, then a send/recv ring that deadlocks: the ring's
    # lines are shown among the first lines, not hidden behind the 15 waits
    report = check("""device d0
device d1
buffer x[2] 1KiB on d0
buffer y[2] 1KiB on d1
stream z[15] on d0
stream s0 on d0
stream s1 on d1
event e flag
comm w = { s0, s1 }
thread u {
  for i in 0..15 {
    z[i]: wait e
  }
}
thread r0 {
  s0: send w to s1 x[0]
  s0: recv w from s1 x[1]
}
thread r1 {
  s1: send w to s0 y[0]
  s1: recv w from s0 y[1]
}
""")
    (finding,) = [f for f in report.findings if f.kind is FindingKind.DEADLOCK]
    lines = [report.program.statements[item.statement].span.line for item in finding.stuck]
    assert set(lines[:5]) == {12, 16, 17, 20, 21}


def test_race_help_on_a_reused_block_names_the_record_stream_to_write():
    helps = _race_helps("""device g { compute 1 copy 1 }
tensor act 1MiB on g
tensor nxt 1MiB on g
buffer stash 1MiB on host pinned
stream main on g
stream d2h on g
thread t {
  main: alloc act
  main: kernel fwd writes act 2ms
  d2h: wait_stream main
  d2h: copy stash <- act 4ms
  free act
  main: alloc nxt
  main: kernel fwd2 writes nxt 2ms
}
""")
    assert helps == ["`free act` (line 12) hands its block to the next allocation on its stream at once, while "
                     "`d2h` may still use it: write `d2h: record_stream act` after that use and before the free, "
                     "or order the use before the free with an event"]


def test_record_stream_help_indexes_the_stream_as_the_line_does():
    # in a thread array the fix is pasted into the array's body: `nccl[rank]`, as the tensor is
    # written beside it, not one instance's `nccl[1]` that would record stream 1 for both ranks
    helps = _race_helps("""device g[2] { runtime cuda }
tensor up[2] 1MiB on g
tensor nx[2] 1MiB on g
buffer out[2] 2MiB on g
stream cur[2] on g
stream nccl[2] on g
comm world = { nccl }
thread rank[2] process {
  cur[rank]: alloc up[rank]
  cur[rank]: kernel k writes up[rank] 2ms
  nccl[rank]: wait_stream cur[rank]
  nccl[rank]: allgather world out[rank] <- up[rank] 3ms
  free up[rank]
  cur[rank]: alloc nx[rank]
  cur[rank]: kernel k2 writes nx[rank] 2ms
}
""")
    assert set(helps) == {"`free up[rank]` (line 13) hands its block to the next allocation on its stream at once, "
                          "while `nccl[rank]` may still use it: write `nccl[rank]: record_stream up[rank]` after "
                          "that use and before the free, or order the use before the free with an event"}, helps


def test_help_names_a_process_s_default_stream_as_the_spec_writes_it():
    # reports mark the process's own default stream `gpu.default@p`; a spec writes `gpu.default`
    spec = """device gpu { runtime cuda }
tensor a 1MiB on gpu
tensor b 1MiB on gpu
buffer x 1MiB on gpu
stream s on gpu nonblocking
thread p process {
  s: alloc a
  gpu.default: kernel r reads a 1us
  free a
  s: alloc b
  s: kernel w writes b, x 1us
  gpu.default: kernel v reads x 1us
}
"""
    report = check(spec)
    assert all("gpu.default@p: kernel" in f.message for f in report.findings)
    assert sorted(f.help for f in report.findings) == [
        "`free a` (line 9) hands its block to the next allocation on its stream at once, while `gpu.default` may "
        "still use it: write `gpu.default: record_stream a` after that use and before the free, or order the use "
        "before the free with an event",
        "order them with an event: `record E` on `s` after the first, `wait E` on `gpu.default` before the second "
        "(or put both on one stream)"]
    fixed = spec.replace("  free a\n", "  gpu.default: record_stream a\n  free a\n").replace(
        "  gpu.default: kernel v", "  s: record e\n  gpu.default: wait e\n  gpu.default: kernel v")
    assert check(fixed.replace("stream s on gpu nonblocking\n", "stream s on gpu nonblocking\nevent e\n")).findings == ()


def test_a_statement_lowered_to_parts_is_one_statement_stuck():
    """Under `runtime cuda` a host `free` is a device sync, then the free: stuck behind the
    first rank's allreduce, it is one statement that never completes, not two, the second
    waiting for the first."""
    report = check("""device gpu[2] { compute 1 comm 1 runtime cuda }
buffer g[2] 4MiB on gpu
buffer tmp 1MiB on gpu[0]
stream s[2] on gpu
comm world = { s }
thread main {
  alloc tmp
  s[0]: allreduce world g[0] 1ms
  free tmp
  s[1]: allreduce world g[1] 1ms
  sync all
}
expect deadlock
""")
    (deadlock,) = [f for f in report.findings if f.code.value == "SP201"]
    assert deadlock.message == "deadlock: 4 statements can never complete (lines 9, 10, 8, 11)"
    assert len(deadlock.stuck) == 4
    assert not any("waits for free tmp (cudaFree" in item.waits_for for item in deadlock.stuck)


# -- the exhaustive search first --------------------------------------------------------------

def two_producers(rounds: int) -> str:
    """Two producers share one notify and one acknowledgement: one producer can take both acks
    of a round and the other then waits forever (the solver proves every race candidate absent
    one by one, 52 s at 10 rounds; the search sees few interleavings). The benchmark's spec."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
    from bench_smt_scale import two_producers

    return two_producers(rounds)


def _searches(monkeypatch) -> list:
    """Each exhaustive search `check` starts: (the seconds it was given, None for its own
    limit; whether it covered everything)."""
    import checker.analyze as analyze

    outcomes = []
    real = analyze.search_first

    def search_first(program, options, progress=None, seconds=None):
        found = real(program, options, progress, seconds)
        outcomes.append((seconds, found is not None))
        return found

    monkeypatch.setattr(analyze, "search_first", search_first)
    return outcomes


def test_the_search_decides_when_many_questions_are_left_for_z3(monkeypatch):
    searches = _searches(monkeypatch)
    text = two_producers(5)
    searched = check(text)
    assert searches == [(None, True)]
    solved = check(text, explore_first=0)
    assert searches == [(None, True)]
    # the same findings (a deadlock's stuck set is that of the execution each engine found)
    summary = lambda report: sorted((f.kind.value, f.instances) for f in report.findings)
    assert summary(searched) == summary(solved)
    assert {f.kind for f in searched.findings} == {FindingKind.DEADLOCK}


def test_few_questions_left_are_z3s_alone(monkeypatch):
    searches = _searches(monkeypatch)
    report = check(two_producers(2))
    assert searches == []
    assert {f.kind for f in report.findings} == {FindingKind.DEADLOCK}


def test_a_search_that_does_not_finish_leaves_the_program_to_z3(monkeypatch):
    searches = _searches(monkeypatch)
    report = check(two_producers(5), explore_first=50)
    assert searches == [(None, False)]
    assert {f.kind for f in report.findings} == {FindingKind.DEADLOCK}
    assert report.status is Status.FINDINGS


ONE_EVENT_TWO_STREAMS = """device d { compute 3 copy 1 }
buffer a 1MiB on d
buffer b 1MiB on d
buffer c 1MiB on d
stream s1 on d
stream s2 on d
stream s3 on d
event ev
notify pa
notify pb
notify ca
notify cb
thread producer_a {
  for j in 0..8 {
    s1: kernel wa writes a 1ms
    s1: record ev
    notify pa
    await ca
  }
}
thread producer_b {
  for j in 0..8 {
    s2: kernel wb writes b 1ms
    s2: record ev
    notify pb
    await cb
  }
}
thread consumer {
  for j in 0..8 {
    await pa
    await pb
    s3: wait ev
    s3: kernel use reads a, b writes c 1ms
    sync s3
    notify ca
    notify cb
  }
}
"""
"""The consumer's wait binds to whichever producer recorded last, so its kernel races with the
other producer's next write: the runs find both races at once, and leave their instance pairs
to count (16 or more: the search is asked, with `SHORTCUT_COUNTING_SECONDS`)."""


def test_the_search_counts_instance_pairs_left_after_the_races_are_found(monkeypatch):
    from checker import smt

    # The runs that give one thread priority show every instance pair at once; without
    # them the random and aimed runs leave the pairs to count.
    monkeypatch.setattr("checker.smt.runs.PRIORITY_ORDERS", 0)
    searches = _searches(monkeypatch)
    searched = check(ONE_EVENT_TWO_STREAMS)
    assert searches == [(smt.SHORTCUT_COUNTING_SECONDS, True)]
    solved = check(ONE_EVENT_TWO_STREAMS, explore_first=0)
    summary = lambda report: sorted((f.message, f.instances) for f in report.findings)
    assert summary(searched) == summary(solved)
    assert [f.kind for f in searched.findings] == [FindingKind.RACE, FindingKind.RACE]


def test_runs_that_give_a_thread_priority_count_every_instance_pair(monkeypatch):
    """The consumer's kernel races with whichever producer did not record last; random runs
    interleave the three threads and leave some instance pairs to the solver (whose counting
    budget may end first). A run that lets one thread go as far as it can before the others
    shows them all: the counts are exact and no question is asked."""
    from checker import smt
    from checker.smt import stats

    program = load_text(ONE_EVENT_TWO_STREAMS.replace("0..8", "0..15")).program

    def counts() -> tuple[list, dict]:
        findings = smt.analyze(program, timeout=10.0, total=30.0)
        return sorted((f.message, f.instances) for f in findings), stats.snapshot()

    with_priority, asked = counts()
    monkeypatch.setattr("checker.smt.runs.PRIORITY_ORDERS", 0)
    without, asked_without = counts()
    assert [instances for _, instances in with_priority] == [15 * 16 // 2] * 2
    assert asked["sat"] + asked["unsat"] + asked["unknowns"] == 0
    assert asked_without["sat"] + asked_without["unsat"] + asked_without["unknowns"] > 0
    assert [message for message, _ in without] == [message for message, _ in with_priority]


def test_a_prioritized_run_takes_the_first_thread_as_far_as_it_goes():
    from itertools import permutations

    from checker.smt.encode import Encoding
    from checker.smt.runs import Runner, thread_orders

    assert thread_orders(1) == []
    assert sorted(thread_orders(3)) == sorted(permutations(range(3)))
    assert thread_orders(8) == [tuple((first + k) % 8 for k in range(8)) for first in range(6)]
    program = load_text(ONE_EVENT_TWO_STREAMS).program
    runner = Runner(Encoding(program))
    statements, steps = program.statements, runner.layout.steps
    for threads in thread_orders(3):
        order, _ = runner.prioritized(threads)
        owners = [statements[steps[step].statement].thread for step in order]
        # The first thread moves until it waits for another (its first `await`; the
        # consumer's is its first statement), and only then do the others.
        first_other = next(k for k, owner in enumerate(owners) if owner != threads[0])
        blocked = [step for step in runner.thread_chains[threads[0]] if step not in order[:first_other]]
        assert blocked and statements[steps[blocked[0]].statement].op.name == "AWAIT"


LOST_NOTIFY_LOCK = """device d { compute 2 copy 1 }
buffer x 1MiB on d
stream s1 on d
stream s2 on d
notify go
thread consumer {
  s1: await go
  s1: await go
  sync s1
  s1: kernel k1 writes x 1ms
  s2: kernel k2 writes x 1ms
}
thread producer_a {
  notify go
}
thread producer_b {
  notify go
}
"""
"""The consumer gets past its sync only when its first await takes one producer's notify
before the other producer's is lost on the flag still set; then its two kernels race."""


@pytest.mark.parametrize("eagerness", [0.05, 0.3, 0.6])
def test_covering_runs_reach_what_the_first_runs_did_not(monkeypatch, eagerness):
    """With one random run, which loses a notify and never passes the sync, the race past it
    is left to the solver; covering runs (a prefix of that run, then on at random) get past
    it, show the race, and no question is asked. They are made only where COVER_WORTH open
    pairs wait on statements no run began (here one pair)."""
    from checker import smt
    from checker.smt import stats

    program = load_text(LOST_NOTIFY_LOCK).program
    monkeypatch.setattr("checker.smt.queries.EAGERNESS", (eagerness,))
    monkeypatch.setattr("checker.smt.runs.PRIORITY_ORDERS", 0)
    monkeypatch.setattr("checker.smt.queries.COVER_WORTH", 1)

    def check() -> tuple[list, dict]:
        findings = smt.analyze(program, timeout=10.0, total=30.0)
        return sorted(f.kind.value for f in findings), stats.snapshot()

    covered, asked = check()
    monkeypatch.setattr("checker.smt.queries.COVER_WORTH", 2)  # one pair waits: too few
    ungated, asked_ungated = check()
    monkeypatch.setattr("checker.smt.queries.COVER", False)
    uncovered, asked_uncovered = check()
    assert covered == ungated == uncovered == ["deadlock", "race"]
    assert asked["sat"] + asked["unsat"] + asked["unknowns"] == 0
    assert asked_ungated["sat"] == asked_uncovered["sat"] == 1


def test_covering_runs_stop_when_nothing_new_is_reached(monkeypatch):
    """Steps no execution takes (the kernels behind an await with one notify for two awaits),
    when not known to be impossible (none is said to be here), are searched for until
    STALE_ATTEMPTS attempts in a row took nothing new; each run kept took a new step and is
    an execution."""
    from checker.smt import runs
    from checker.smt.queries import Analysis
    from checker.smt.runs import covering_runs
    from checker.smt.solve import Budget

    text = LOST_NOTIFY_LOCK.replace("thread producer_b {\n  notify go\n}\n", "")
    program = load_text(text).program
    monkeypatch.setattr(runs, "STALE_ATTEMPTS", 25)
    analysis = Analysis(program, Budget(timeout=10.0))
    runner = analysis.runner()
    attempts = []
    run = runner.run
    monkeypatch.setattr(runner, "run", lambda *args, **kwargs: attempts.append(1) or run(*args, **kwargs))
    first, _ = run(0, 0.05)
    kept = covering_runs(runner, [first[:1]], frozenset())
    covered = set(first[:1])
    for order, _ in kept:
        assert not covered.issuperset(order)
        covered.update(order)
        assert analysis.admits(order) is not None
    kernels = [analysis.encoding.first_step(s) for s in program.statements if s.op.name == "KERNEL"]
    assert kernels and covered.isdisjoint(kernels)
    assert covered.issuperset(first)
    assert len(kept) + 25 <= len(attempts) <= 26 * (len(kept) + 1)


def test_covering_runs_stop_once_the_steps_taken_are_enough(monkeypatch):
    """`enough` is asked after each run kept: once it says yes, no attempt follows, however
    many steps are left; past the deadline none is made (`Analysis._cover` stops once fewer than COVER_WORTH open pairs wait
    on a step no run took: on rand3x100-1 the 700 attempts after that cost 5 s)."""
    from checker.smt.queries import Analysis
    from checker.smt.runs import covering_runs
    from checker.smt.solve import Budget

    program = load_text(LOST_NOTIFY_LOCK).program
    analysis = Analysis(program, Budget(timeout=10.0))
    runner = analysis.runner()
    first, _ = runner.run(0, 0.05)
    start = first[:1]
    everything = covering_runs(runner, [start], frozenset())
    assert len(everything) >= 2
    asked: list[int] = []

    def enough(covered: set[int]) -> bool:
        asked.append(len(covered))
        return len(asked) == 2

    stopped = covering_runs(runner, [start], frozenset(), enough)
    assert stopped == everything[:2]
    assert asked == sorted(asked) and asked[0] > len(start)
    assert covering_runs(runner, [start], frozenset(), deadline=time.time() - 1) == []


def covered_lock(monkeypatch):
    """LOST_NOTIFY_LOCK with one random run, no prioritized ones and covering runs made for
    one waiting pair: (program, its analysis, the two kernels)."""
    from checker.smt.queries import Analysis
    from checker.smt.solve import Budget

    program = load_text(LOST_NOTIFY_LOCK).program
    monkeypatch.setattr("checker.smt.queries.EAGERNESS", (0.05,))
    monkeypatch.setattr("checker.smt.runs.PRIORITY_ORDERS", 0)
    monkeypatch.setattr("checker.smt.queries.COVER_WORTH", 1)
    k1, k2 = [s for s in program.statements if s.op.name == "KERNEL"]
    return program, Analysis(program, Budget(timeout=10.0)), k1, k2


def test_a_run_aimed_at_a_pair_only_covering_runs_reached_starts_from_one(monkeypatch):
    """`_lead_in`: the prefix is the start of a run that began both kernels, cut before the
    first of them; the aimed runs of pairs with a step only covering runs took use it."""
    import random

    _, analysis, k1, k2 = covered_lock(monkeypatch)
    analysis.harvest_races(analysis.race_candidates(), aim=False)
    first = analysis._first_last()[0]
    assert {first[k1.index], first[k2.index]} <= analysis._rare
    orders = [list(verdict.order) for verdict, _ in analysis.runs()]
    for seed in range(8):
        prefix = analysis._lead_in(k1.index, k2.index, random.Random(seed))
        assert any(order[:len(prefix)] == prefix and first[k1.index] in order and first[k2.index] in order
                   for order in orders)
        assert first[k1.index] not in prefix and first[k2.index] not in prefix


def test_an_aims_job_leads_in_as_the_first_session_does(monkeypatch):
    """`Analysis.leads` carries the covering runs to an `aims` job (`jobs.py`): a fresh
    session given them (`aim_all`) starts its runs aimed at a rare pair from the same
    prefixes, and answers the pair as the first session's aimed runs do."""
    import random

    from checker.smt.queries import Analysis
    from checker.smt.solve import Budget

    program, analysis, k1, k2 = covered_lock(monkeypatch)
    candidates = analysis.race_candidates()
    pair = [race for race in candidates if {race[0].index, race[1].index} == {k1.index, k2.index}]
    analysis.harvest_races(candidates, aim=False)
    job = Analysis(program, Budget(timeout=10.0), analysis.order)
    assert job.aim_all(pair, [], *analysis.leads()) == []
    assert (k1.index, k2.index) in job.racing
    for seed in range(8):
        assert job._lead_in(k1.index, k2.index, random.Random(seed)) == \
            analysis._lead_in(k1.index, k2.index, random.Random(seed))
    without = Analysis(program, Budget(timeout=10.0), analysis.order)
    assert without.aim_all(pair, []) == pair, "aimed from the start, a run reaches the pair"


COMM_RING = """device d[3] { compute 1 comm 1 }
buffer g[3] 1MiB on d
stream c[3] on d
comm w[3] = { c[w], c[(w+1)%3] }
thread r[3] {
  for i in 0..2 {
    c[r]: allreduce w[r] g[r] 1us
    c[r]: allreduce w[(r+2)%3] g[r] 1us
  }
}
"""


def test_a_deadlocked_ring_of_groups_lists_the_members_that_hold_it_first():
    """Each rank calls its own comm first, then its left neighbour's: every group waits for
    a member queued behind another group's member. The members that hold the ring head the
    listing (their reason names a queue too, in parentheses), then the first call of line 8,
    which only queues; the other instances follow, those that only queue last."""
    from checker.smt import analyze

    program = load_text(COMM_RING).program
    (finding,) = [f for f in analyze(program) if f.kind is FindingKind.DEADLOCK]
    holding = [item for item in finding.stuck if "group starts together" in item.waits_for]
    assert finding.stuck[0] == holding[0]
    assert {program.statements[item.statement].span.line for item in holding} == {7}
    assert {program.statements[item.statement].bindings for item in holding} == {
        (("i", 0), ("r", r)) for r in range(3)}
    second = finding.stuck[1]
    assert program.statements[second.statement].span.line == 8
    assert second.waits_for.startswith("waiting for ") and " ahead of it on " in second.waits_for
    assert finding.stuck[2:len(holding) + 1] == tuple(holding[1:])
    assert all(item.waits_for.startswith("waiting for ") for item in finding.stuck[len(holding) + 1:])


def test_the_budget_is_the_specs_across_its_choose_combinations():
    """Each program of a spec (one per combination of `choose` branches) gets what the ones
    before it left of `--budget`; once it is spent, the rest are not checked, and one SP301
    says how many and which (they used to take a budget each: 144 s at `--budget 5`)."""
    text = """device d
buffer y[2] 1KiB on d
stream s[2] on d
thread t {
  for i in 0..3 {
    choose {
      s[0]: kernel a writes y[0] 1us
    } or {
      s[1]: kernel b writes y[1] 1us
    }
  }
}
"""
    loaded = load_text(text, "spec.sched")
    assert len(loaded.variants) == 8
    everything = check_loaded(loaded, Options())
    assert not [f for f in everything.findings if f.kind is FindingKind.UNKNOWN]
    report = check_loaded(load_text(text, "spec.sched"), Options(budget=1e-6))
    (skipped,) = [f for f in report.findings if f.detail.get("reason") == "budget"]
    assert skipped.kind is FindingKind.UNKNOWN and skipped.message.startswith("7 of the 8 programs")
    assert skipped.detail["unchecked"] == [program.variant for program in loaded.variants[1:]]
    assert not report.passed


@pytest.mark.parametrize("body, expected", [
    # a back-pressure wait (the copy waits for the previous reader of its slot) is not blamed
    # for the missing wait of the reader on the copy
    ("  for i in 0..4 {\n    let slot = i % 2\n    if i >= 2 {\n      loader: wait consumed[slot]\n    }\n"
     "    loader: copy batch[slot] <- host_batch[slot] 1ms\n    loader: record loaded[slot]\n"
     "    worker: kernel infer reads batch[slot] 2ms\n    worker: record consumed[slot]\n  }\n",
     "`loader: record loaded[0]` (line 15) follows `loader: copy batch[slot] <- host_batch[slot]` (line 14) on "
     "`loader`, and is enqueued before `worker: kernel infer` (line 16): wait on it there (`worker: wait "
     "loaded[slot]` before line 16)"),  # (as the block's lines name it: a fix for every iteration)
    # the wait before a collective serves its own bucket: the kernel after it lacks its own wait
    ("  for b in 0..2 {\n    worker: kernel grad writes batch[b] 1ms\n    worker: record loaded[b]\n"
     "    loader: wait loaded[b]\n    loader: kernel reduce reads batch[b] writes batch[b] 1ms\n  }\n"
     "  worker: kernel step reads batch[0] 1ms\n",
     "order them with an event: `record E` on `loader` after the first, `wait E` on `worker` before the second"),
    # a wait that served an earlier iteration's record is not blamed for the next iteration's overwrite
    ("  for i in 0..2 {\n    loader: copy batch[0] <- host_batch[0] 1ms\n    loader: record loaded[0]\n"
     "    worker: wait loaded[0]\n    worker: kernel infer reads batch[0] 2ms\n  }\n",
     "order them with an event: `record E` on `worker` after the first, `wait E` on `loader` before the second"),
])
def test_race_help_does_not_blame_a_wait_that_served_another_access(body, expected):
    helps = _race_helps("device d { compute 2 }\nbuffer batch[2] 1MiB on d\nbuffer host_batch[2] 1MiB on host pinned\n"
                        "stream loader on d\nstream worker on d\nevent loaded[2]\nevent consumed[2]\n"
                        "thread main {\n" + body + "}\n")
    assert helps and all(h.startswith(expected) for h in helps), helps


@pytest.mark.parametrize("between, double", [("", True), ("  s: alloc x\n", False)])
def test_a_second_free_is_reported_as_a_double_free(between, double):
    text = ("device d\nbuffer x 1MiB on d\nstream s on d\nthread t {\n  s: alloc x\n  s: kernel k writes x\n"
            f"  s: free x\n{between}  s: free x\n}}\n")
    report = check(text)
    dead = [f for f in report.findings if f.kind is FindingKind.USE_AFTER_FREE]
    if not double:
        assert dead == []
        return
    (finding,) = dead
    assert finding.message == "s: free x (line 8) frees `x` again: s: free x (line 7) frees it too"
    assert finding.help.startswith("free each allocation once")


@pytest.mark.parametrize("options", [{}, {"explore_first": 0}, {"exhaustive": True}])
@pytest.mark.parametrize("writes", ["t[0], t[1]", "t"])
def test_one_pair_racing_on_several_elements_names_each_in_every_engine(options, writes):
    # the pair is one finding on `t`, and `expect race on t[1]` is met by it as `on t[0]` is
    # (the fast path counted the pair at its first element and named that one only)
    report = check(f"""device gpu0
buffer t[2] 1KiB on gpu0
stream s1 on gpu0
stream s2 on gpu0
thread main {{
  s1: kernel a writes {writes}
  s2: kernel b writes {writes}
}}
expect race on t[0]
expect race on t[1]
""", **options)
    (race,) = report.findings
    assert race.kind is FindingKind.RACE and set(race.elements) == {"t[0]", "t[1]"}, race
    assert report.passed


@pytest.mark.parametrize("options", [{}, {"exhaustive": True}])
def test_a_lost_notify_before_a_collective_is_named_as_lost(options):
    # hook0's second await finds no set left (main0's second notify found the flag still set):
    # the help says so, not that the await waits for work behind the collective
    report = check("""device gpu[2] { compute 1 comm 1 }
buffer a[2] 1MiB on gpu
buffer b[2] 1MiB on gpu
stream c[2] on gpu
comm w = { c }
notify go
thread main0 {
  for i in 0..2 {
    c[0]: allreduce w a[0]
    notify go
  }
}
thread hook0 {
  for i in 0..2 {
    await go
    c[0]: allreduce w b[0]
  }
}
thread r1 {
  for i in 0..4 {
    c[1]: allreduce w a[1]
  }
}
expect deadlock
""", **options)
    (deadlock,) = report.findings
    assert deadlock.kind is FindingKind.DEADLOCK and report.passed
    assert "a `notify` that finds `go` already set is lost" in deadlock.help, deadlock.help


def test_a_wait_naming_another_iteration_s_event_in_one_thread_is_told_to_check_the_index():
    # one thread: no notify can help; the record after the write is of another event than the wait's
    helps = _race_helps("""device d { compute 1 copy 1 }
stream s1 on d
stream s2 on d
buffer x[4] 1KiB on d
event e[4]
thread t {
  for i in 0..40 {
    s1: kernel k writes x[i % 4]
    s1: record e[i % 4]
    s2: wait e[(i + i / 7) % 4]
    s2: kernel r reads x[i % 4]
  }
}
""")
    assert helps and all("await" not in h and ("check the index the wait names" in h or
                                                "the wait's index names another element" in h) for h in helps), helps


def test_an_unmet_expectation_without_a_buffer_does_not_speak_of_one():
    report = check(RACY.replace("s2: kernel", "s1: kernel") + "expect race\nexpect race on x\n")
    helps = [d.help for d in report.diagnostics if d.code.value == "SP401"]
    assert helps == ["no execution races; drop the expectation if the race was fixed",
                     "no execution races on this buffer; drop the expectation if the race was fixed"], helps


def test_a_race_across_two_threads_loops_is_fixed_earlier_iteration_first():
    # copy [i=1] overwrites what kernel [i=0] still reads: the kernel's round goes first
    helps = _race_helps("""device g
buffer h 1MiB on host pinned
buffer d 1MiB on g
stream cp on g
stream comp on g
event ready[2] flag
thread producer {
  for i in 0..2 {
    cp: copy d <- h 1ms
    cp: record ready[i]
  }
}
thread consumer {
  for i in 0..2 {
    comp: wait ready[i]
    comp: kernel use reads d 3ms
  }
  sync all
}
""")
    assert helps and helps[0].startswith("order them with an event: `record E` on `comp` after `comp: kernel use` "
                                         "(line 16) [i=0], `wait E` on `cp` before `cp: copy d <- h` (line 9) [i=1]"), helps


def test_helps_quote_the_free_and_the_flag_event_as_their_lines_write_them():
    free = _race_helps("""device npu0 { runtime cann }
tensor t[3] 1MiB on npu0
stream s on npu0
stream c on npu0
thread main {
  for i in 0..3 {
    s: alloc t[i]
    s: kernel w writes t[i] 1ms
    c: wait_stream s
    c: kernel r reads t[i] 1ms
    if i >= 1 { free t[i-1] }
  }
  sync all
}
""")
    assert any(h.startswith("`free t[i-1]` (line 11) hands its block") for h in free), free
    flag = _race_helps("""device npu[2] { runtime cann }
buffer x[2] 1MiB on npu
stream a[2] on npu
stream b[2] on npu
event f[2] flag
thread rank[2] process {
  for it in 0..2 {
    a[rank]: kernel w writes x[rank] 1ms
    a[rank]: record f[rank]
    b[rank]: wait f[rank]
    b[rank]: kernel r reads x[rank] 1ms
  }
  sync npu[rank]
}
""")
    assert flag and all("(`b[rank]: reset f[rank]`)" in h for h in flag), flag


def test_a_wait_enqueued_before_its_record_is_named_for_a_write_after_write_and_cuda_gets_no_flag_event():
    """The help names the wait its thread enqueued before the record (a write after a write
    is meant to be ordered too, unlike a back-pressure wait before overwriting a read), and a
    flag event is offered only where the runtime has them."""
    spec = ("device gpu\nbuffer x 1MiB on gpu\nstream s1 on gpu\nstream s2 on gpu\nevent e\n"
            "thread t {\n  s2: wait e\n  s1: kernel a writes x\n  s1: record e\n  s2: kernel b writes x\n}\n")
    assert _race_helps(spec)[0].startswith("`s2: wait e` (line 7) is enqueued before `s1: record e` (line 9) by "
                                           "the same thread")
    threads = spec.replace("thread t {\n  s2: wait e\n  s1: kernel a writes x\n  s1: record e\n",
                           "thread t {\n  s1: kernel a writes x\n  s1: record e\n}\nthread u {\n  s2: wait e\n")
    assert _race_helps(threads)[0].endswith("or use a flag event (`event E flag`)")
    cuda = threads.replace("device gpu\n", "device gpu { runtime cuda }\n")
    assert _race_helps(cuda)[0].endswith("`await` a notify set after it)")


def test_helps_name_the_realloc_and_the_hand_off_already_written():
    """A use after a re-alloc on another stream, a second free after a stream re-alloc, and a
    free after a notify hand-off: the help names the statement already there and what is
    missing, not the alloc or notify the spec has."""
    head = "device gpu0 { compute 2 }\nbuffer x 1MiB on gpu0\nstream A on gpu0\nstream B on gpu0\nnotify n\n"
    realloc = check(head + "thread main {\n  A: alloc x\n  A: kernel w writes x\n  A: free x\n  A: alloc x\n"
                           "  B: kernel r reads x\n  sync all\n}\n")
    helps = {f.kind.value: f.help for f in realloc.findings}
    assert helps["use-after-free"].startswith("`A: alloc x` (line 10) allocates it again before the use, but only on `A`")
    assert helps["use-before-alloc"].startswith("`A: alloc x` (line 10) allocates it again")
    double = check(head + "thread main {\n  alloc x\n  free x\n  A: alloc x\n  free x\n}\n")
    assert [f.help for f in double.findings if f.kind.value == "use-after-free"] == [
        "`A: alloc x` (line 9) allocates it again between the two frees, but only on `A`: the second free can run "
        "before that alloc does (`sync A` before it)"]
    handed = check(head + "thread user {\n  A: kernel k writes x\n  notify n\n}\nthread freer {\n  await n\n  free x\n}\n")
    assert {f.help for f in handed.findings if f.kind.value in ("race", "use-after-free")} == {
        "`freer` awaits `n` (line 11), which `user` sets after enqueueing `A: kernel k` (line 7), but the task may "
        "still run: add `sync A` (or a sync of an event recorded after the task) after line 11, before `free x` "
        "(line 12)"}


def test_a_use_enqueued_after_a_tensors_del_is_told_it_is_the_allocators_free():
    spec = ("device gpu0 { compute 2 }\ntensor grad 4MiB on gpu0\nstream main on gpu0\nstream side on gpu0\n"
            "thread t {\n  main: alloc grad\n  main: kernel bwd writes grad\n  free grad\n"
            "  side: kernel late reads grad\n  sync all\n}\n")
    helps = [f.help for f in check(spec).findings if f.kind.value == "use-after-free"]
    assert helps and all("a tensor's free (PyTorch's `del`) hands its block back" in h for h in helps)


@pytest.mark.parametrize("engine", [{}, {"explore_first": 0}, {"exhaustive": True}])
def test_a_use_after_a_tensors_free_names_the_tensor_not_another_buffer_of_the_statement(engine):
    # (a second thread sends the program to the solver; the kernel's other buffer is never freed)
    spec = ("device d0\ntensor ws 4MiB on d0\ntensor t2 4MiB on d0\nbuffer x 4MiB on d0\nstream main on d0\n"
            "stream s1 on d0\nthread worker {\n  main: alloc ws\n  free ws\n  main: kernel op reads x writes ws\n"
            "  main: alloc t2\n  sync all\n}\nthread other {\n  s1: kernel k\n}\n")
    (found,) = [f for f in check(spec, **engine).findings if f.kind is FindingKind.USE_AFTER_FREE]
    assert found.buffer == "ws" and "frees `ws`" in found.message
    assert not check(spec + "expect use-after-free on x\n", **engine).passed


def test_a_race_scan_cut_by_the_budget_says_the_budget_ran_out():
    spec = ("device d\nbuffer x 1MiB on d\nstream s[4] on d\nthread t {\n"
            + "".join(f"  s[{i % 4}]: kernel k{i} writes x\n" for i in range(8)) + "}\n")
    report = check(spec, budget=1e-9)
    (unknown,) = [f for f in report.findings if f.kind is FindingKind.UNKNOWN]
    assert report.status is Status.UNKNOWN and not report.passed
    assert unknown.message.startswith("the 1e-09 s budget ran out before every pair of unordered accesses was read")


def test_a_tensor_reallocated_in_a_loop_gets_the_record_stream_help():
    """One tensor name, a new block lifetime per iteration: the race across iterations is the
    allocator handing the block on at the free, as between two tensors."""
    spec = ("device gpu { runtime cuda }\ntensor x 16MiB on gpu\nbuffer out 16MiB on gpu\n"
            "stream side on gpu nonblocking\nstream cur on gpu nonblocking\nthread main {\n  for step in 0..3 {\n"
            "    cur: alloc x\n    cur: kernel produce writes x 1ms\n    side: wait_stream cur\n"
            "    side: kernel consume reads x writes out 3ms\n    free x\n  }\n  sync all\n}\n")
    races = [f for f in check(spec).findings if f.kind is FindingKind.RACE]
    assert races and all("its block handed on again at each free" in f.message for f in races)
    assert races[0].help.startswith("`free x` (line 12) hands its block to the next allocation on its stream at once, "
                                    "while `side` may still use it: write `side: record_stream x`")
    fixed = spec.replace("    free x\n", "    side: record_stream x\n    free x\n")
    assert check(fixed).findings == ()


def test_a_block_race_of_a_use_enqueued_after_its_tensors_free_names_the_free():
    spec = ("device gpu { runtime cuda }\ntensor x 4MiB on gpu\ntensor y 4MiB on gpu\n"
            "stream cur on gpu nonblocking\nstream side on gpu nonblocking\nthread main {\n  cur: alloc x\n"
            "  cur: kernel p writes x 1ms\n  side: wait_stream cur\n  side: record_stream x\n  free x\n"
            "  side: kernel late reads x 1ms\n  cur: alloc y\n  cur: kernel q writes y 1ms\n  sync all\n}\n")
    (race,) = [f for f in check(spec).findings if f.kind is FindingKind.RACE]
    assert race.help == ("`side: kernel late` (line 12) is enqueued after `free x` (line 11), which hands the block on: "
                         "enqueue the use before the free")


def test_a_host_write_after_a_hand_off_is_told_only_the_sync_is_missing():
    """A DataLoader-style pinned slot handed back by a notify right after its copy is enqueued:
    the help names the hand-off that is there and the sync that is not, not a second notify."""
    spec = ("device gpu { runtime cuda }\nbuffer pinned[2] 8MiB on host pinned\nbuffer batch[2] 8MiB on gpu\n"
            "stream s on gpu\nnotify filled[2]\nnotify free_slot[2]\n"
            "thread setup {\n  notify free_slot[0]\n  notify free_slot[1]\n}\n"
            "thread pinner {\n  for i in 0..4 {\n    let k = i % 2\n    await free_slot[k]\n"
            "    host pin_copy writes pinned[k] 1ms\n    notify filled[k]\n  }\n}\n"
            "thread main {\n  for i in 0..4 {\n    let k = i % 2\n    await filled[k]\n"
            "    s: copy batch[k] <- pinned[k] 2ms\n    notify free_slot[k]\n  }\n  sync s\n}\n")
    helps = {f.help for f in check(spec).findings if f.kind is FindingKind.RACE}
    assert helps and all(h.startswith("`pinner` awaits `free_slot[") and "add `sync s`" in h for h in helps), helps


def test_a_hang_of_two_comms_crossed_through_stream_syncs_is_told_the_order():
    """Each rank syncs one comm's stream before calling the other comm, in opposite orders:
    the help names the crossed comms, not the device-wide wait the sync is not."""
    spec = ("device gpu[2] { runtime cuda }\nbuffer a[2] 4MiB on gpu\nbuffer b[2] 4MiB on gpu\n"
            "stream ntp[2] on gpu\nstream ndp[2] on gpu\ncomm tp = { ntp }\ncomm dp = { ndp }\n"
            "thread rank[2] process {\n  if rank == 0 {\n    ntp[rank]: allreduce tp a[rank] 1ms\n    sync ntp[rank]\n"
            "    ndp[rank]: allreduce dp b[rank] 1ms\n    sync ndp[rank]\n  } else {\n"
            "    ndp[rank]: allreduce dp b[rank] 1ms\n    sync ndp[rank]\n    ntp[rank]: allreduce tp a[rank] 1ms\n"
            "    sync ntp[rank]\n  }\n}\n")
    (deadlock,) = [f for f in check(spec).findings if f.kind is FindingKind.DEADLOCK]
    assert deadlock.help.endswith("in opposite orders; issue the collectives of every comm in the same order on "
                                  "every rank"), deadlock.help
    assert "not the device" not in deadlock.help


def test_an_unmet_makespan_under_choose_names_the_combination_that_misses_it():
    text = """device d { compute 1 }
buffer x 1MiB on d
stream s1 on d
thread main {
  choose {
    s1: kernel fast writes x 1ms
  } or {
    s1: kernel slow writes x 5ms
  }
  sync s1
}
expect makespan <= 2ms
"""
    report = check_loaded(load_text(text, "spec.sched"), Options())
    (unmet,) = [d for d in report.diagnostics if d.code.value == "SP401"]
    assert unmet.message.endswith("(when line 5: branch 2 of 2)"), unmet.message
    assert not report.passed


def test_an_unmet_expectation_on_an_alias_quotes_the_line_as_written_and_as_meant():
    text = ("device d\nbuffer arena 1MiB on d\nalias q = arena[0:4KiB]\nstream s on d\nthread t {\n"
            "  s: kernel k writes q\n}\nexpect race  on q\nexpect race on arena\n")
    report = check_loaded(load_text(text, "spec.sched"), Options())
    assert [d.message for d in report.diagnostics if d.code.value == "SP401"] == [
        "expectation not met: `expect race on q` (`expect race on arena`)",
        "expectation not met: `expect race on arena`"]


def test_a_ring_slot_guard_before_its_record_is_not_blamed_for_a_missing_wait():
    # `comp: wait sent[s]` guards y's slot and binds to nothing on a slot's first use; the
    # missing wait is on `got`, whose record already follows the write and nobody waits on
    helps = _race_helps("""device d
stream comm on d
stream comp on d
buffer x[2] 1KiB on d
buffer y[2] 1KiB on d
event got[2]
event made[2]
event sent[2]
thread t {
  for mb in 0..4 {
    let s = mb % 2
    comm: kernel recv writes x[s]
    comm: record got[s]
    comp: wait sent[s]
    comp: kernel fwd reads x[s] writes y[s]
    comp: record made[s]
    comm: wait made[s]
    comm: kernel send reads y[s]
    comm: record sent[s]
  }
}
""")
    assert helps and all("`comp: wait got[" in h and "move the wait" not in h and "iteration" not in h
                         for h in helps), helps


def test_a_wait_to_add_in_a_thread_array_is_named_as_its_lines_name_streams_and_events():
    # pasted as `k[1]: wait e[1]` it would fix one rank (and make rank 0 wait on rank 1)
    helps = _race_helps("""device gpu[2]
buffer g[2] 1MiB on gpu
stream c[2] on gpu
stream k[2] on gpu
comm w = { c }
event e[2]
thread rank[2] {
  c[rank]: allreduce w g[rank]
  c[rank]: record e[rank]
  k[rank]: kernel step reads g[rank]
}
""")
    assert helps and all("(`k[rank]: wait e[rank]` before line 10)" in h for h in helps), helps


def test_dead_use_helps_in_a_thread_array_name_streams_as_the_block_does():
    # `sync ag[0]` pasted into the block would sync rank 0's stream from every rank
    report = check_loaded(load_text("""device gpu[2] { runtime cuda }
stream ag[2] on gpu
buffer full[2] 4MiB on gpu
thread rank[2] process {
  ag[rank]: alloc full[rank]
  ag[rank]: kernel fill writes full[rank]
  free full[rank]
}
"""))
    helps = [f.help for f in report.findings if f.kind in (FindingKind.USE_AFTER_FREE, FindingKind.USE_BEFORE_ALLOC)]
    assert helps and all("`sync ag[rank]`" in h and "sync ag[0]" not in h for h in helps), helps


def test_a_host_use_after_a_free_gets_a_help_it_can_follow():
    # a host statement records no event: its thread is ordered, or it moves before the free
    same = check_loaded(load_text("device d\nbuffer x 1MiB on d\nstream s on d\nthread t {\n  s: alloc x\n"
                                  "  s: kernel k writes x\n  s: free x\n  host peek reads x\n}\n"))
    (dead,) = [f for f in same.findings if f.kind is FindingKind.USE_AFTER_FREE]
    assert dead.help.startswith("`host peek` (line 8) is issued after `s: free x` (line 7): move the use before"), dead.help
    other = check_loaded(load_text("device d\nbuffer x 1MiB on d\nstream a on d\nthread p {\n  alloc x\n"
                                   "  a: kernel k writes x\n  a: free x\n}\nthread q {\n  host peek reads x\n}\n"))
    (dead,) = [f for f in other.findings if f.kind is FindingKind.USE_AFTER_FREE]
    assert "have `q` set a notify after the use (`notify N`) and `p` `await N` before `a: free x`" in dead.help


def test_a_race_on_a_tensor_nobody_frees_is_told_as_a_race_of_one_lifetime():
    # no free: no block is handed on, so `record_stream` is no fix; the threads need an order
    report = check_loaded(load_text("device g\ntensor A 1MiB on g\nstream s on g\nstream u on g\n"
                                    "thread p {\n  s: alloc A\n  s: kernel fill writes A\n}\n"
                                    "thread q {\n  u: kernel peek reads A\n}\n"))
    (race,) = [f for f in report.findings if f.kind is FindingKind.RACE]
    assert "handed on" not in race.message and "record_stream" not in race.help, (race.message, race.help)
    assert "notify" in race.help


@pytest.mark.parametrize("threads, words", [
    # another thread's record of the flag can set it before the access is done
    ("thread p {\n  a: kernel k1 writes x\n  a: record e\n}\nthread q {\n  b: wait e\n  b: kernel k2 reads x\n}\n"
     "thread r {\n  a: record e\n}\n", "`a: record e` (line 15) of `r` can set it before `a: kernel k1` (line 7)"),
    # another thread's earlier round left the flag set
    ("thread p {\n  for i in 0..2 {\n    a: kernel k1 writes x\n    a: record e\n  }\n}\n"
     "thread q {\n  for i in 0..2 {\n    b: wait e\n    b: kernel k2 reads x\n  }\n}\n",
     "can pass on an earlier `a: record e` (line 9)"),
])
def test_a_flag_wait_that_passes_on_another_record_is_told_so(threads, words):
    helps = _race_helps("device d\nbuffer x 1MiB on d\nstream a on d\nstream b on d\nevent e flag\n" + threads)
    assert helps and all(words in h and "binds to the latest record" not in h for h in helps), helps


def test_a_reused_block_s_help_does_not_ask_for_a_record_stream_already_written():
    # `rs` never waits for `comp`; every use on `rs` is recorded: the fix is the wait
    report = check_loaded(load_text("""device g { compute 2 runtime cuda }
tensor a 4MiB on g
tensor b 4MiB on g
stream comp on g nonblocking
stream rs on g nonblocking
thread t {
  comp: alloc a
  comp: kernel bwd_a writes a 3ms
  rs: kernel reduce_a reads a 1ms
  rs: record_stream a
  free a
  comp: alloc b
  comp: kernel bwd_b writes b 3ms
  rs: kernel reduce_b reads b 1ms
  rs: record_stream b
  free b
  sync all
}
"""))
    reused = [f for f in report.findings if f.kind is FindingKind.RACE and "handed to" in f.message]
    assert reused and all("record_stream" not in f.help and "wait for it on `rs`" in f.help for f in reused), \
        [f.help for f in reused]


def test_a_wait_before_its_record_in_a_loop_is_said_to_wait_for_nothing_in_that_iteration_only():
    helps = _race_helps("device d\nbuffer x 1MiB on d\nstream a on d\nstream b on d\nevent e\nthread t {\n"
                        "  for l in 0..3 {\n    b: wait e\n    a: kernel w writes x\n    a: record e\n"
                        "    b: kernel r reads x\n  }\n}\n")
    assert helps and any("so in iteration [l=0] it waits for nothing (in a later one, for an earlier "
                         "iteration's record" in h for h in helps), helps
    once = _race_helps("device d\nbuffer x 1MiB on d\nstream a on d\nstream b on d\nevent e\nthread t {\n"
                       "  b: wait e\n  a: kernel w writes x\n  a: record e\n  b: kernel r reads x\n}\n")
    assert once and all("so it waits for nothing" in h for h in once), once


def test_a_deadlock_help_that_moves_a_notify_also_says_when_too_few_are_set():
    # moving the notify before the sync alone leaves the second await waiting forever
    help = _deadlock_help("device d\nstream s on d\nnotify n\nthread a {\n  await n\n  s: kernel k\n}\n"
                          "thread b {\n  sync s\n  notify n\n}\nthread c {\n  s: await n\n}\n")
    assert "set `n` before that call" in help and "`n` is set 1 time but awaited 2 times" in help, help
    counted = _deadlock_help("device d\nstream a on d\nstream b on d\nnotify n\nthread t {\n"
                             "  a: notify n\n  b: await n\n  b: await n\n}\n")
    assert "a `notify` that finds `n` already set is lost" in counted, counted


def test_a_use_before_a_graph_s_alloc_is_ordered_around_the_launch():
    # a graph's own stream (`g.s`) cannot take a record: the launch stream can
    report = check_loaded(load_text("device d\nbuffer x 1MiB on d\nstream s on d\nstream main on d\nstream o on d\n"
                                    "graph g {\n  s: alloc x\n  s: kernel k writes x\n}\nthread t {\n"
                                    "  main: launch g\n  o: kernel after reads x\n  sync all\n  free x\n}\n"))
    (early,) = [f for f in report.findings if f.kind is FindingKind.USE_BEFORE_ALLOC]
    assert "record an event on `main` after the launch and wait on it on `o`" in early.help, early.help
    assert "g.s:" not in early.help.split("allocates it")[1]


def test_a_wait_an_if_skips_in_one_iteration_is_named_with_that_iteration():
    helps = _race_helps("device gpu { compute 1 comm 1 }\nbuffer grad 4MiB on gpu\nstream cp on gpu\n"
                        "stream cm on gpu\nevent g_done\nthread t {\n  for i in 0..8 {\n"
                        "    cp: kernel bwd writes grad 2ms\n    cp: record g_done\n    if i % 7 != 6 {\n"
                        "      cm: wait g_done\n    }\n    cm: kernel reduce reads grad 1ms\n  }\n}\n")
    assert helps and any("`cm: wait g_done` (line 11) would order it, but iteration [i=6] does not run that line"
                         in h for h in helps), helps


def test_a_record_inside_a_group_with_its_wait_and_use_is_told_to_move_them_all():
    helps = _race_helps("device gpu[2]\nbuffer g[2] 1MiB on gpu\nstream c[2] on gpu\nstream k[2] on gpu\n"
                        "comm w = { c }\nevent e[2]\nthread r[2] {\n  group {\n    c[r]: allreduce w g[r]\n"
                        "    c[r]: record e[r]\n    k[r]: wait e[r]\n    k[r]: kernel post reads g[r]\n  }\n}\n")
    assert helps and all("move the record after the group, and with it what is written after it in the group, "
                         "through `k[" in h for h in helps), helps


def test_the_event_a_thread_array_is_told_to_add_is_one_per_rank():
    # one `event E` pasted into the block would be shared by every rank
    helps = _race_helps("device gpu[2]\nbuffer g[2] 1MiB on gpu\nstream c[2] on gpu\nstream k[2] on gpu\n"
                        "comm w = { c }\nthread rank[2] {\n  c[rank]: allreduce w g[rank]\n"
                        "  k[rank]: kernel step reads g[rank]\n}\n")
    assert helps and all(h.startswith("order them with an event of each rank's own (`event E[N]`): `record E[rank]`")
                         for h in helps), helps


def test_dead_uses_across_threads_are_told_to_hand_over_with_a_notify():
    report = check_loaded(load_text("device d\nbuffer x 1MiB on d\nstream a on d\nstream b on d\nthread p {\n"
                                    "  a: alloc x\n  a: kernel k writes x\n  a: free x\n}\nthread q {\n"
                                    "  b: kernel r reads x\n}\n"))
    (after,) = [f for f in report.findings if f.kind is FindingKind.USE_AFTER_FREE]
    (before,) = [f for f in report.findings if f.kind is FindingKind.USE_BEFORE_ALLOC]
    assert "`q` sets a notify after that (`notify N`), and `p` `await N` and `a: wait E` before" in after.help
    assert "have `p` set a notify after that (`notify N`), and `q` `await N` and `b: wait E`" in before.help


def test_a_cross_rank_read_is_told_to_wait_on_the_writer_s_record_after_a_hand_off():
    helps = _race_helps("device gpu[2] { compute 1 copy 1 }\nbuffer x[2] 4MiB on gpu\nbuffer y[2] 4MiB on gpu\n"
                        "stream k[2] on gpu\nstream c[2] on gpu\nevent e[2]\nthread rank[2] {\n"
                        "  k[rank]: kernel produce writes x[rank] 2ms\n  k[rank]: record e[rank]\n"
                        "  c[rank]: kernel consume reads x[1 - rank] writes y[rank] 1ms\n}\n")
    assert helps and all("wait on it before `c[" in h and "sets a notify after it (`notify N`)" in h
                         and "iteration" not in h for h in helps), helps


def test_a_race_between_two_thread_arrays_names_each_block_s_own_stream():
    helps = _race_helps("device gpu[2]\nbuffer x[2] 1MiB on gpu\nstream a[2] on gpu\nstream b[2] on gpu\n"
                        "thread prod[2] {\n  a[prod]: kernel p writes x[prod]\n}\n"
                        "thread cons[2] {\n  b[cons]: kernel c reads x[cons]\n}\n")
    assert helps and all("on `a[prod]` after" in h and "on `b[cons]` before" in h and "`event E[R]`" in h
                         for h in helps), helps


@pytest.mark.parametrize("middle, words", [
    # the use is enqueued after the free: it moves before it (ordering the free first would
    # leave a use after free in every execution)
    ("", "is enqueued after `comp: free a` (line 10), which ends the memory: move the use before the free"),
    # a new lifetime's use on another stream: the free goes before its alloc
    ("  pf: alloc a\n", "`comp: free a` (line 10) is not ordered before `pf: alloc a` (line 11)"),
])
def test_a_race_with_a_free_puts_the_free_last(middle, words):
    report = check_loaded(load_text("device gpu { compute 1 copy 1 runtime cuda }\nbuffer a 32MiB on gpu\n"
                                    "buffer h 32MiB on host pinned\nstream comp on gpu\nstream pf on gpu\nevent made\n"
                                    "thread main {\n  comp: kernel fwd writes a 1ms\n  comp: record made\n"
                                    "  comp: free a\n" + middle + "  pf: wait made\n  pf: copy h <- a 1ms\n}\n"))
    helps = [f.help for f in report.findings if f.kind is FindingKind.RACE and "free" in f.message]
    assert helps and all(words in h for h in helps), helps
    assert not [f for f in report.findings if "wait on it on `pf` before the use" in f.help]


def test_two_comms_calls_in_one_group_are_told_no_event_can_order_them():
    helps = _race_helps("device gpu[2] { compute 1 copy 1 comm 1 }\nbuffer x[2] 4MiB on gpu\nstream a[2] on gpu\n"
                        "stream b[2] on gpu\ncomm ca = { a }\ncomm cb = { b }\nthread rank[2] {\n  group {\n"
                        "    a[rank]: allreduce ca x[rank] 1ms\n    b[rank]: allreduce cb x[rank] 1ms\n  }\n}\n")
    assert helps and all(h.startswith("the two calls are in one `group`") for h in helps), helps


def test_a_flag_recorded_after_a_stuck_sync_is_told_to_move_the_record():
    # no reset anywhere: the record is behind the sync that waits for the flag's waiter
    help = _deadlock_help("device npu0 { compute 1 }\nbuffer b 4MiB on npu0\nstream s on npu0\nstream t on npu0\n"
                          "event f flag\nthread th {\n  s: wait f\n  s: kernel k writes b 1ms\n  sync s\n"
                          "  t: record f\n}\n")
    assert help.startswith("`t: record f` (line 10), which would set the flag `s: wait f` (line 7) waits for"), help
    assert "reset" not in help


def test_a_write_after_read_across_two_threads_loops_is_ordered_from_the_read():
    # fc2 of layer 1 overwrites z while rs of layer 0 reads it: the wait before rs was for
    # layer 0's record, not layer 1's, so the order to add goes from rs to the next fc2
    helps = _race_helps("device gpu { compute 2 }\nbuffer z 4MiB on gpu\nbuffer o 4MiB on gpu\nstream comp on gpu\n"
                        "stream cs on gpu\nevent mm\nnotify ready\nnotify gone\nthread producer {\n"
                        "  for l in 0..2 {\n    comp: kernel fc2 writes z 1ms\n    comp: record mm\n    notify ready\n"
                        "    await gone\n  }\n}\nthread consumer {\n  for l in 0..2 {\n    await ready\n"
                        "    cs: wait mm\n    cs: kernel rs reads z writes o 1ms\n    notify gone\n  }\n}\n")
    assert helps and all(h.startswith("order them with an event: `record E` on `cs` after `cs: kernel rs`")
                         for h in helps), helps


def test_a_record_written_before_the_access_it_marks_is_told_to_move_after_it():
    helps = _race_helps("device gpu { compute 2 }\nbuffer z 4MiB on gpu\nbuffer o 4MiB on gpu\nstream comp on gpu\n"
                        "stream cs on gpu\nevent mm[2]\nthread t {\n  for k in 0..4 {\n    let s = k % 2\n"
                        "    comp: record mm[s]\n    comp: kernel fc2 writes z 1ms\n    cs: wait mm[s]\n"
                        "    cs: kernel rs reads z writes o 1ms\n  }\n}\n")
    assert any("so it marks the work before it, not it: move the record after line 11" in h for h in helps), helps


def test_a_flag_cleared_by_a_reset_in_a_loop_is_blamed_on_the_reset():
    help = _deadlock_help("device d\nbuffer g 1MiB on d\nstream a on d\nstream b on d\nevent x flag\nevent f flag\n"
                          "thread t {\n  b: record x\n  for l in 0..2 {\n    a: wait x\n    a: kernel k writes g 1ms\n"
                          "    a: record f\n    a: reset f\n    b: wait f\n    b: kernel r reads g 1ms\n"
                          "    b: record x\n  }\n}\n")
    assert "reset only once that wait is through" in help and "is stuck too" not in help, help


def test_two_ranks_of_one_array_are_told_to_split_the_hand_off_by_rank():
    # pasted as written, `notify N` and `await N` in the one body would hang both ranks
    report = check_loaded(load_text("device d\nbuffer h 1MiB on host\nthread t[2] {\n  host w writes h\n}\n"))
    (race,) = [f for f in report.findings if f.kind is FindingKind.RACE]
    assert "put each under an `if` on the rank (`if t == 0 { ... notify N }`, `if t == 1 { await N ... }`)" \
        in race.help, race.help


def test_a_wait_on_the_wrong_slot_is_told_the_element_as_the_block_names_it():
    helps = _race_helps("device d { compute 2 }\nbuffer b[3] 1MiB on d\nbuffer hostb[3] 1MiB on host pinned\n"
                        "stream ld on d\nstream wk on d\nevent loaded[3]\nthread t {\n  for step in 0..6 {\n"
                        "    let slot = step % 3\n    ld: copy b[slot] <- hostb[slot]\n    ld: record loaded[slot]\n"
                        "    wk: wait loaded[(step + 1) % 3]\n    wk: kernel use reads b[slot]\n  }\n}\n")
    assert helps and any("Wait on `loaded[slot]` there" in h for h in helps), helps


def test_a_double_free_by_two_ranks_of_one_line_names_each_rank():
    report = check_loaded(load_text("device gpu[2] { compute 1 runtime cuda }\ntensor g[2] 8MiB on gpu\n"
                                    "stream comp[2] on gpu nonblocking\nthread rank[2] process {\n"
                                    "  comp[rank]: alloc g[rank]\n  comp[rank]: kernel bwd writes g[rank] 2ms\n"
                                    "  free g\n  sync all\n}\n"))
    twice = [f.message for f in report.findings if "again" in f.message]
    assert twice and all("of `rank[" in m for m in twice), twice


def test_a_sync_bound_to_a_later_round_s_record_is_told_the_event_is_reused():
    # the writer's `sync copied[1]` of round 1 binds to the record of round 3, which waits for
    # the writer's `notify written[1]` after the sync: moving that notify would trade the hang
    # for a race on the staging buffer
    report = check_loaded(load_text("""device gpu { compute 1 d2h 1 }
buffer W 64MiB on gpu
buffer Wst[2] 64MiB on host pinned
buffer file[4] 64MiB on host
stream comp on gpu
stream ck on gpu
event stepped[4]
event copied[2]
notify go[4]
notify written[2]
thread trainer {
  for s in 0..4 {
    comp: kernel adam writes W 2ms
    comp: record stepped[s]
    ck: wait stepped[s]
    if s >= 2 {
      ck: await written[s%2]
    }
    ck: copy Wst[s%2] <- W 3ms
    ck: record copied[s%2]
    notify go[s]
  }
}
thread writer {
  for s in 0..4 {
    await go[s]
    sync copied[s%2]
    host write reads Wst[s%2] writes file[s] 12ms
    if s < 2 {
      notify written[s%2]
    }
  }
}
"""))
    (deadlock,) = [f for f in report.findings if f.kind is FindingKind.DEADLOCK]
    assert "of round [s=3]" in deadlock.help and "is reused too soon" in deadlock.help, deadlock.help


def test_race_help_orders_an_overwrite_after_the_read_that_waits_for_an_earlier_write():
    # `use0` waits for `fill0`; `fill1` refills the one buffer: waiting on `e1` instead would
    # silence the race and make `use0` read the second fill
    spec = """device d
buffer x 1MiB on d
buffer y 1MiB on d
stream p on d
stream c on d
event e0
event e1
thread t {
  p: kernel fill0 writes x
  p: record e0
  p: kernel fill1 writes x
  p: record e1
  c: wait e0
  c: kernel use0 reads x writes y
}
"""
    assert _race_helps(spec) == [
        "`c: kernel use0` (line 14) waits for `p: kernel fill0` (line 9) (`wait e0`, line 13), and `p: kernel fill1` "
        "(line 11) overwrites those bytes before it reads them: move it after `c: kernel use0` (line 14) and make it "
        "wait for an event recorded after the read, or give the later write a buffer of its own (double buffering). "
        "Waiting for the overwrite instead would make the read see the later data"]
    moved = spec.replace("  p: kernel fill1 writes x\n  p: record e1\n", "").replace(
        "writes y\n}", "writes y\n  c: record e1\n  p: wait e1\n  p: kernel fill1 writes x\n}")
    assert check(moved).findings == ()


def test_race_help_across_threads_names_the_overwrite_s_own_wait_that_bound_to_nothing():
    # the worker reads what `prep0` wrote; `prep1` was to wait for the read through `rd`, but
    # its wait can be enqueued before the worker records `rd`
    spec = """device gpu { runtime cuda }
buffer x 1MiB on gpu
stream sched on gpu nonblocking
stream fwd on gpu nonblocking
event rd
event p[2]
notify r0
thread S {
  sched: kernel prep0 writes x
  sched: record p[0]
  notify r0
  sched: wait rd
  sched: kernel prep1 writes x
  sched: record p[1]
}
thread W {
  await r0
  fwd: wait p[0]
  fwd: kernel meta reads x
  fwd: record rd
}
"""
    assert _race_helps(spec) == [
        "`sched: wait rd` (line 12) can be enqueued before `fwd: record rd` (line 20), and then waits for nothing: a "
        "wait binds to the latest record enqueued before it. Enqueue the record first (have the waiting thread "
        "`await` a notify set after it)"]


def test_use_after_free_help_names_no_alloc_of_another_buffer_the_use_also_touches():
    # `alloc w` comes between the free of `kv` and a use of both: it does not allocate `kv` again
    spec = ("device gpu\nbuffer kv 1MiB on gpu\nbuffer w 1MiB on gpu\nstream s on gpu\n"
            "thread t {\n  alloc kv\n  free kv\n  alloc w\n  s: kernel k reads kv, w\n}\n")
    (finding,) = check(spec).findings
    assert finding.kind is FindingKind.USE_AFTER_FREE and finding.buffer == "kv"
    assert "alloc w" not in finding.help and "`alloc` the buffer again before the use" in finding.help


def test_deadlock_help_names_a_point_to_point_call_where_the_peer_issues_a_collective():
    spec = ("device a { runtime cuda }\ndevice b { runtime cuda }\nbuffer x 1MiB on a\nbuffer y 1MiB on b\n"
            "stream sa on a\nstream sb on b\ncomm c = { sa, sb }\n"
            "thread t0 process {\n  sa: broadcast c root sa x\n}\nthread t1 process {\n  sb: recv c from sa y\n}\n")
    (finding,) = check(spec).findings
    assert finding.kind is FindingKind.DEADLOCK
    assert finding.help.startswith("`sa: broadcast c` (line 9) is call 1 of comm `c`, a collective, and `sb` issues "
                                   "`sb: recv c from sa` (line 12) there, a point-to-point call")
