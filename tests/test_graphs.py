"""Captured graphs (`graph NAME { ... }`, `STREAM: launch NAME`), an extension.

A launch means what docs/language.md and docs/semantics.md say it means in the plain
language: a record on the launch stream, the body on streams of the graph's own (the first
waiting for that record), a record after the body on its first stream, and a wait for it on
the launch stream. Random specs are checked against that expansion written out by hand, and
the engines against each other on them; the capture errors (SP029-SP031) and the help lines
that name the launch are checked one by one.
"""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checker import ast
from checker.frontend import load_text
from checker.lower import _CAPTURABLE, _UNCAPTURABLE
from test_differential import compare

HEADER = """device gpu { compute 2 copy 1 }
buffer a 1KiB on gpu
buffer b 1KiB on gpu
stream s1 on gpu
stream s2 on gpu
stream x on gpu
stream y on gpu
stream o on gpu
"""


def check_json(run, tmp_path, text: str, *options: str) -> tuple[int, dict]:
    spec = tmp_path / "spec.sched"
    spec.write_text(text)
    status, out, _ = run("check", "--format", "json", *options, spec)
    return status, json.loads(out)["files"][0]


def _named(text: str):
    lines = text.splitlines()

    def name(line: int) -> str:
        """A kernel's name, or the statement without its stream (`free c`)."""
        found = re.search(r"kernel (\w+)", lines[line - 1])
        return found.group(1) if found else re.sub(r"^\w+: ", "", lines[line - 1].strip())
    return name


def racing_names(text: str, file_json: dict) -> set[tuple[str, ...]]:
    """Each race as the sorted pair of the kernel names on its two lines, with its buffer."""
    name = _named(text)
    return {tuple(sorted(name(location["line"]) for location in f["locations"][:2])) + (f["buffer"],)
            for f in file_json["findings"] if f["kind"] == "race"}


def dead_names(text: str, file_json: dict) -> set[tuple[str, ...]]:
    """Each use after free or before alloc as its kind, the use's name and the memory."""
    name = _named(text)
    return {(f["kind"], name(f["locations"][0]["line"]), f["buffer"]) for f in file_json["findings"]
            if f["kind"] in ("use-after-free", "use-before-alloc")}


# -- random graphs, against their expansion -------------------------------------------------

ACCESS = st.sampled_from(["", "reads a", "writes a", "reads b", "writes b", "reads a writes b",
                          "reads b writes a", "reads c", "writes c"])


@st.composite
def graph_programs(draw):
    """(the spec with graphs, the same program with every launch written out)."""
    counter = iter(range(1000))

    def kernel(stream: str) -> str:
        return f"{stream}: kernel k{next(counter)} {draw(ACCESS)} {draw(st.integers(0, 3))}us".replace("  ", " ")

    body = [kernel("s1") for _ in range(draw(st.integers(0, 1)))]
    body += ["s1: record f", "s2: wait f"]
    for _ in range(draw(st.integers(0, 4))):
        step = draw(st.sampled_from(["s1", "s2", "s1>s2", "s2>s1"]))
        if ">" in step:
            source, target = step.split(">")
            event = "e1" if source == "s1" else "e2"
            body += [f"{source}: record {event}", f"{target}: wait {event}"]
        else:
            body.append(kernel(step))
    body += ["s2: record j", "s1: wait j"] + [kernel("s1") for _ in range(draw(st.integers(0, 1)))]
    # event nodes on events outside the graph: records anywhere on s1, or on s2 while it is in
    # the capture; a wait node first on s1
    for _ in range(draw(st.integers(0, 2))):
        if draw(st.booleans()):
            body.insert(draw(st.integers(0, len(body))), "s1: record xr external")
        else:
            joined, left = body.index("s2: wait f") + 1, body.index("s2: record j")
            body.insert(draw(st.integers(joined, left)), "s2: record xr external")
    if draw(st.booleans()):
        body.insert(0, "s1: wait xw external")
    live = False  # an allocation each launch leaves live (to free before the next: SP032)
    if draw(st.booleans()):  # memory nodes: `c` allocated and freed by each launch
        at = draw(st.integers(0, len(body)))
        body.insert(at, "s1: alloc c")
        live = True
        if draw(st.booleans()):
            body.insert(draw(st.integers(at + 1, len(body))), "s1: free c")
            live = False
        else:
            joined, left = body.index("s2: wait f") + 1, body.index("s2: record j")
            if joined > at:
                body.insert(draw(st.integers(joined, left)), "s2: free c")
                live = False
    second = [kernel("s1")]
    thread = []
    for _ in range(draw(st.integers(1, 4))):
        step = draw(st.sampled_from(["g", "g", "h", "outside", "order", "sync", "node"]))
        if step in ("g", "h"):
            stream = draw(st.sampled_from(["x", "y"]))
            thread.append((step, stream))
            if step == "g" and live:
                thread.append(("text", f"{stream}: free c"))
        elif step == "outside":
            thread.append(("text", kernel("o")))
        elif step == "order":
            source, target = draw(st.permutations(["x", "o"]))
            thread += [("text", f"{source}: record e3"), ("text", f"{target}: wait e3")]
        elif step == "node":  # (what the graph's event nodes wait for, and wait on them)
            thread.append(("text", draw(st.sampled_from(["o: record xw", "o: wait xr"]))))
        else:
            thread.append(("text", f"sync {draw(st.sampled_from(['x', 'y', 'o']))}"))
    other = [kernel("o") for _ in range(draw(st.integers(0, 2)))]

    graphs = HEADER + "buffer c 1KiB on gpu\nevent f\nevent j\nevent e1\nevent e2\nevent e3\nevent xr\nevent xw\n"
    graphs += "graph g {\n" + "".join(f"  {line}\n" for line in body) + "}\n"
    graphs += "graph h {\n" + "".join(f"  {line}\n" for line in second) + "}\n"
    graphs += "thread t {\n" + "".join(f"  {line if kind == 'text' else f'{line}: launch {kind}'}\n"
                                       for kind, line in thread) + "}\n"
    graphs += "thread u {\n" + "".join(f"  {line}\n" for line in other) + "}\n"

    # The expansion: each graph's streams and events declared in the order lowering makes them.
    created: list[str] = []
    lines: list[str] = []
    for n, (kind, line) in enumerate(thread):
        if kind == "text":
            lines.append(line)
            continue
        lines += [f"{line}: record start{n}"]
        for k, statement in enumerate(body if kind == "g" else second):
            stream, rest = statement.split(": ", 1)
            if f"{kind}_{stream}" not in created:
                created.append(f"{kind}_{stream}")
            if k == 0:
                lines.append(f"{kind}_{stream}: wait start{n}")
            if rest.endswith(" external"):  # (the declared event itself)
                rest = rest.removesuffix(" external")
            else:
                rest = re.sub(r"\b(record|wait) (\w+)", rf"\1 {kind}_\2", rest)
            lines.append(f"{kind}_{stream}: {rest}")
        lines += [f"{kind}_s1: record done{n}", f"{line}: wait done{n}"]
    expanded = HEADER + "buffer c 1KiB on gpu\n" + "".join(f"stream {name} on gpu nonblocking\n" for name in created)
    expanded += "event e3\nevent xr\nevent xw\n" + "".join(f"event g_{e}\n" for e in ("f", "j", "e1", "e2"))
    expanded += "".join(f"event start{n}\nevent done{n}\n" for n in range(len(thread)))
    expanded += "thread t {\n" + "".join(f"  {line}\n" for line in lines) + "}\n"
    expanded += "thread u {\n" + "".join(f"  {line}\n" for line in other) + "}\n"
    return graphs, expanded


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(graph_programs())
def test_a_launch_means_its_expansion(run, tmp_path, pair):
    graphs, expanded = pair
    status, with_graphs = check_json(run, tmp_path, graphs)
    assert with_graphs["status"] != "error", with_graphs["diagnostics"]
    _, written_out = check_json(run, tmp_path, expanded)
    assert written_out["status"] != "error", written_out["diagnostics"]
    assert racing_names(graphs, with_graphs) == racing_names(expanded, written_out)
    assert dead_names(graphs, with_graphs) == dead_names(expanded, written_out)
    deadlocks = [any(f["kind"] == "deadlock" for f in file["findings"]) for file in (with_graphs, written_out)]
    assert deadlocks[0] == deadlocks[1]
    for text in (graphs, expanded):
        (tmp_path / "spec.sched").write_text(text)
    spans = []
    for text in (graphs, expanded):
        (tmp_path / "spec.sched").write_text(text)
        _, out, _ = run("simulate", "--format", "json", tmp_path / "spec.sched")
        spans.append(json.loads(out)["files"][0].get("makespan_ns"))
    assert spans[0] == spans[1]


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(graph_programs())
def test_engines_agree_on_graphs(pair):
    assert compare(pair[0]) == []


# -- what a launch orders --------------------------------------------------------------------

def verdict(run, tmp_path, body: str, threads: str) -> set:
    text = HEADER + "event f\nevent j\nevent e\n" + body + threads
    status, file = check_json(run, tmp_path, text)
    assert file["status"] != "error", file["diagnostics"]
    return racing_names(text, file)


def test_launches_of_one_graph_never_overlap_but_two_graphs_do(run, tmp_path):
    graphs = "graph g {\n  s1: kernel k writes a 1us\n}\ngraph h {\n  s1: kernel l writes a 1us\n}\n"
    assert verdict(run, tmp_path, graphs, "thread t {\n  x: launch g\n  y: launch g\n}\n") == set()
    assert verdict(run, tmp_path, graphs, "thread t {\n  x: launch g\n  y: launch h\n}\n") == {("k", "l", "a")}


def test_a_launch_comes_after_the_streams_earlier_work_and_before_its_later_work(run, tmp_path):
    graph = "graph g {\n  s1: kernel k reads a writes b\n}\n"
    ordered = "thread t {\n  x: kernel before writes a\n  x: launch g\n  x: kernel after reads b\n}\n"
    assert verdict(run, tmp_path, graph, ordered) == set()
    other = "thread t {\n  o: kernel before writes a\n  x: launch g\n  o: kernel after reads b\n}\n"
    assert verdict(run, tmp_path, graph, other) == {("before", "k", "a"), ("after", "k", "b")}


def test_the_declared_streams_of_a_body_order_nothing_outside_it(run, tmp_path):
    """A capture's streams stand for its order only: work enqueued on `s1` itself is not
    ordered with the graph's work captured on `s1`."""
    graph = "graph g {\n  s1: kernel k writes a\n}\n"
    assert verdict(run, tmp_path, graph, "thread t {\n  x: launch g\n  s1: kernel l reads a\n}\n") == {
        ("k", "l", "a")}


def test_a_host_sync_of_the_launch_stream_waits_for_the_whole_graph(run, tmp_path):
    graph = ("graph g {\n  s1: record f\n  s2: wait f\n  s2: kernel k writes a 5us\n  s2: record j\n"
             "  s1: wait j\n}\n")
    text = HEADER + "buffer h 1KiB on host pinned\nevent f\nevent j\n" + graph.replace(
        "s2: kernel k writes a 5us", "s2: copy h <- a 5us")
    for threads, races in (("thread t {\n  x: launch g\n  sync x\n  host use reads h\n}\n", 0),
                           ("thread t {\n  x: launch g\n  host use reads h\n}\n", 1)):
        status, file = check_json(run, tmp_path, text + threads)
        assert sum(f["kind"] == "race" for f in file["findings"]) == races, file["findings"]


def test_a_graph_inside_races_like_streams_do(run, tmp_path):
    graph = ("graph g {\n  s1: record f\n  s1: kernel k writes a\n  s2: wait f\n  s2: kernel l writes a\n"
             "  s2: record j\n  s1: wait j\n}\n")
    assert verdict(run, tmp_path, graph, "thread t {\n  x: launch g\n}\n") == {("k", "l", "a")}


RANKS = """device gpu[2] { runtime cuda }
buffer grad[2] 1MiB on gpu
stream s[2] on gpu
stream m[2] on gpu
comm world = { s[0], s[1] }
"""


def test_each_process_has_its_own_exec_and_collectives_meet_per_launch(run, tmp_path):
    text = RANKS + """graph step[2] {
  s[step]: kernel backward writes grad[step] 1us
  s[step]: allreduce world grad[step] 2us
}
thread rank[2] process {
  for i in 0..3 {
    m[rank]: launch step[rank]
  }
  sync m[rank]
}
expect no race
expect no deadlock
"""
    status, file = check_json(run, tmp_path, text)
    assert status == 0 and file["passed"], file
    # One rank launching once more: its third call meets nobody.
    status, file = check_json(run, tmp_path, text.replace("  sync m[rank]", "  if rank == 0 {\n"
                                                          "    m[0]: launch step[0]\n  }\n  sync m[rank]"))
    assert status == 1 and any(f["kind"] == "deadlock" for f in file["findings"])


def test_a_captured_collective_is_matched_with_an_eager_one(run, tmp_path):
    text = RANKS + """graph step[2] {
  s[step]: allreduce world grad[step]
}
thread rank0 process {
  m[0]: launch step[0]
}
thread rank1 process {
  s[1]: broadcast world root s[0] grad[1]
}
"""
    status, file = check_json(run, tmp_path, text)
    assert [f["code"] for f in file["findings"]] == ["SP202"]


# -- capture errors ------------------------------------------------------------------------

def diagnostics(run, tmp_path, text: str) -> list[tuple[str, int, str]]:
    status, file = check_json(run, tmp_path, text)
    assert status == 2
    return [(d["code"], d["line"], d["message"]) for d in file["diagnostics"]]


@pytest.mark.parametrize("statement,message", [
    ("sync s1", "a host `sync` cannot be captured"),
    ("host h reads a", "a `host` statement cannot be captured"),
    ("s1: notify n", "a stream `notify` cannot be captured"),
    ("s1: alloc t", "a graph cannot capture a tensor's allocation"),
    ("s1: record_stream t", "a `record_stream` cannot be captured"),
    ("x: launch inner", "a graph launch inside a graph is not modelled"),
    ("gpu.default: kernel k writes a", "a graph cannot capture work on a device's default stream"),
    ("s1: record fl", "a graph cannot capture a flag event (`fl`)"),
    ("s1: copy hp <- a", "a copy to or from pageable host memory cannot be captured"),
    ("choose { s1: kernel k } or { s1: kernel l }", "a `choose` cannot be captured"),
    # (a legacy stream that has not joined the capture: joining it would not help, so SP029 at once)
    ("lg: kernel k", "a graph cannot capture work on the legacy stream `lg`"),
])
def test_what_cannot_be_captured_is_sp029(run, tmp_path, statement, message):
    text = (HEADER + "stream lg on gpu legacy\nbuffer hp 1KiB on host\ntensor t 1KiB on gpu\nevent fl flag\nnotify n\n"
            "graph inner {\n  s1: kernel i\n}\n"
            f"graph g {{\n  s1: kernel first writes b\n  {statement}\n}}\nthread t {{\n  x: launch g\n}}\n")
    found = diagnostics(run, tmp_path, text)
    line = text.splitlines().index(f"  {statement}") + 1
    assert [(code, at) for code, at, _ in found] == [("SP029", line)], found
    assert found[0][2].startswith(message)


def test_every_statement_is_capturable_or_has_a_reason():
    statements = set(ast.Statement.__args__) - {ast.For, ast.Let, ast.If, ast.Group, ast.Choose}
    assert statements == set(_CAPTURABLE) | set(_UNCAPTURABLE)
    assert not set(_CAPTURABLE) & set(_UNCAPTURABLE)


@pytest.mark.parametrize("body,line,message", [
    (["s1: record f", "s2: wait f", "s2: kernel k writes a"], 3,
     "graph `g`: the work captured on `s2` is not joined back into `s1`"),
    (["s1: kernel k writes a", "s2: kernel l writes b"], 2, "`s2` is not part of graph `g`'s capture here"),
    (["s1: wait e"], 1, "graph `g` waits on `e`, which it has not recorded"),
    (["s1: kernel k", "s2: wait_stream s1", "s2: kernel l", "s1: wait_stream x"], 4,
     "`x` has captured nothing for graph `g` here"),
])
def test_a_capture_that_is_not_one_is_sp030(run, tmp_path, body, line, message):
    text = HEADER + "event f\nevent e\ngraph g {\n" + "".join(f"  {b}\n" for b in body) + "}\n"
    text += "thread t {\n  x: record e\n  x: launch g\n}\n"
    found = diagnostics(run, tmp_path, text)
    first = text.splitlines().index("graph g {") + 1
    assert [(code, at) for code, at, _ in found] == [("SP030", first + line)], found
    assert found[0][2].startswith(message)


def test_wait_stream_joins_and_is_joined(run, tmp_path):
    text = HEADER + ("graph g {\n  s1: kernel k writes a\n  s2: wait_stream s1\n  s2: kernel l reads a writes b\n"
                     "  s1: wait_stream s2\n}\nthread t {\n  x: launch g\n  x: kernel m reads b\n}\n"
                     "expect no race\n")
    status, file = check_json(run, tmp_path, text)
    assert status == 0 and file["passed"], file


def test_an_event_recorded_in_a_graph_cannot_be_waited_on_outside_it(run, tmp_path):
    """NVIDIA/warp PR #1791: the host waited on an event recorded inside the captured graph
    and read the buffer before the replayed copy landed; the fix records on the stream after
    the launch."""
    text = HEADER + """buffer count 4B on host pinned
event ready
graph g {
  s1: kernel nnz writes a
  s1: copy count <- a
  s1: record ready
}
thread t {
  x: launch g
  sync ready
  host read reads count
}
"""
    found = diagnostics(run, tmp_path, text)
    assert [(code, line) for code, line, _ in found] == [("SP030", 18)]
    assert "used both inside graph `g` and outside it" in found[0][2]
    fixed = text.replace("  s1: record ready\n", "").replace("  x: launch g\n", "  x: launch g\n  x: record ready\n")
    status, file = check_json(run, tmp_path, fixed + "expect no race\n")
    assert status == 0 and file["passed"], file


def test_an_event_record_node_is_what_outside_work_waits_on(run, tmp_path):
    """`record E external` (cudaEventRecordExternal): the wait outside waits for the graph's
    work up to the node, not for the rest of it; `wait E external` (cudaEventWaitExternal)
    makes the graph's work after it wait for the latest record enqueued before the launch."""
    text = HEADER + """event half
event ready
graph g {
  s1: wait ready external
  s1: kernel first writes a 10us
  s1: record half external
  s1: kernel second writes b 50us
}
thread t {
  o: kernel produce writes b 5us
  o: record ready
  x: launch g
  o: wait half
  o: kernel consume reads a 5us
  o: kernel late reads b 5us
  sync o
}
"""
    assert verdict(run, tmp_path, "", text[len(HEADER):]) == {("late", "second", "b")}
    # without the wait node, `produce` races with `second`; without the record node, the
    # host's wait on `half` binds to no record, and `consume` races with `first`
    no_wait = text.replace("  s1: wait ready external\n", "")
    assert verdict(run, tmp_path, "", no_wait[len(HEADER):]) == {("late", "second", "b"), ("produce", "second", "b")}
    no_record = text.replace("  s1: record half external\n", "")
    assert ("consume", "first", "a") in verdict(run, tmp_path, "", no_record[len(HEADER):])
    # a wait node binds to the latest record before the launch: recording after it is too late
    late = text.replace("  o: record ready\n  x: launch g\n", "  x: launch g\n  o: record ready\n")
    assert ("produce", "second", "b") in verdict(run, tmp_path, "", late[len(HEADER):])
    spec = tmp_path / "spec.sched"
    spec.write_text(text)
    _, out, _ = run("show", spec)
    assert "g.s1: record half external" in out and "g.s1: wait ready external" in out


def test_flag_event_nodes_wait_for_a_set_flag_at_every_launch(run, tmp_path):
    """vllm-ascend's full-graph decode: the captured graph waits on a flag event (torch_npu's
    ExternalEvent) that an update stream sets after patching the graph's parameters, and
    resets it. The wait does not clear the flag: two updates can set it before the first
    launch resets it, and the second launch then waits forever."""
    body = ("graph g {\n  s1: wait upd external\n  s1: reset upd external\n  s1: kernel attn reads a 5us\n}\n")
    threads = ("thread t {\n  for step in 0..2 {\n    x: launch g\n    o: kernel update writes a 1us\n"
               "    o: record upd\n  }\n  sync x\n}\n")
    text = HEADER + "event upd flag\n" + body + threads
    _, file = check_json(run, tmp_path, text)
    assert file["status"] != "error", file["diagnostics"]
    assert {f["kind"] for f in file["findings"]} == {"deadlock", "race"}
    # the update waits for the launch before patching, and the next launch comes after the flag
    fixed = threads.replace("    o: kernel update", "    x: record launched\n    o: wait launched\n    o: kernel update")
    fixed = fixed.replace("  for step in 0..2 {\n    x: launch g", "  for step in 0..2 {\n    x: launch g")
    text = HEADER + "event upd flag\nevent launched\n" + body + fixed
    _, file = check_json(run, tmp_path, text)
    assert file["status"] != "error", file["diagnostics"]
    assert [f["kind"] for f in file["findings"]] == ["deadlock"]  # (the lost set remains)
    assert compare(text) == [] and compare(HEADER + "event upd flag\n" + body + threads) == []


@pytest.mark.parametrize("body, thread, code, message", [
    ("  s1: kernel k writes a\n", "  o: record e external\n", "SP030",
     "`record ... external` is an event record node of a captured graph"),
    ("  s1: kernel k writes a\n", "  o: wait e external\n", "SP030",
     "`wait ... external` is an event wait node of a captured graph"),
    ("  s1: kernel k writes a\n  s1: record flagged\n", "", "SP029", "a graph cannot capture a flag event (`flagged`)"),
    ("  s1: wait flagged external\n  s1: reset flagged\n", "  o: record flagged\n", "SP029",
     "a `reset` cannot be captured into a graph"),
    ("  s1: reset e external\n", "", "SP017", "`reset` needs a flag event; `e` is a snapshot event"),
    ("  s1: kernel k writes a\n", "  o: reset flagged external\n", "SP030",
     "`reset ... external` is an event reset node of a captured graph"),
    # a record node joins nothing: a wait inside the capture on it waits on work outside
    ("  s1: record e external\n  s2: wait e\n  s2: kernel k writes a\n", "", "SP030",
     "graph `g` waits on `e`, which it records only as an external record node (`record E external`), "
     "and that joins no work to the capture"),
    # nor does a wait node join its stream to the capture
    ("  s1: kernel k writes a\n  s2: wait e external\n  s2: kernel l writes a\n", "  o: record e\n", "SP030",
     "`s2` is not part of graph `g`'s capture here"),
])
def test_event_nodes_misused_are_errors(run, tmp_path, body, thread, code, message):
    text = (HEADER + "event e\nevent flagged flag\ngraph g {\n" + body + "}\nthread t {\n  x: launch g\n" + thread
            + "}\n")
    found = diagnostics(run, tmp_path, text)
    assert [c for c, _, _ in found] == [code] and message in found[0][2], found


def test_isolation_and_shared_event_help_offer_event_nodes(run, tmp_path):
    inside = diagnostics(run, tmp_path, HEADER + "event e\ngraph g {\n  s1: wait e\n  s1: kernel k writes a\n}\n"
                         "thread t {\n  o: record e\n  x: launch g\n}\n")
    assert [c for c, _, _ in inside] == ["SP030"]
    _, file = check_json(run, tmp_path, HEADER + "event e\ngraph g {\n  s1: wait e\n  s1: kernel k writes a\n}\n"
                         "thread t {\n  o: record e\n  x: launch g\n}\n")
    assert file["diagnostics"][0]["help"].endswith("or, for an event, make the wait a wait node (`wait EVENT external`)")
    _, file = check_json(run, tmp_path, HEADER + "event e\ngraph g {\n  s1: kernel k writes a\n  s1: record e\n}\n"
                         "thread t {\n  x: launch g\n  o: wait e\n}\n")
    assert "(`record e external`)" in file["diagnostics"][0]["help"]
    # a wait that would join its stream to the capture cannot be a wait node, which joins none
    _, file = check_json(run, tmp_path, HEADER + "event e\ngraph g {\n  s1: kernel k writes a\n  s2: wait e\n}\n"
                         "thread t {\n  o: record e\n  x: launch g\n}\n")
    assert "wait node" not in file["diagnostics"][0]["help"]


def test_one_exec_launched_by_two_threads_or_on_another_device_is_sp031(run, tmp_path):
    graph = "graph g {\n  s1: kernel k writes a\n}\n"
    found = diagnostics(run, tmp_path, HEADER + graph + "thread t {\n  x: launch g\n}\nthread u {\n  y: launch g\n}\n")
    assert [(code, line) for code, line, _ in found] == [("SP031", 16)]
    assert "launched by two threads of one process" in found[0][2]
    two = "device gpu2\nstream z on gpu2\n" + HEADER + graph + "thread t {\n  z: launch g\n}\n"
    found = diagnostics(run, tmp_path, two)
    assert [(code, line) for code, line, _ in found] == [("SP031", 15)]
    assert found[0][2] == "graph `g` is launched on a stream of `gpu2`, but captures work on `s1` of `gpu`"
    arrays = HEADER + "graph g[2] {\n  s1: kernel k writes a\n}\nthread t[2] {\n  x: launch g[t]\n}\n"
    status, file = check_json(run, tmp_path, arrays)
    assert file["status"] != "error" and any(f["kind"] == "race" for f in file["findings"])


# -- messages --------------------------------------------------------------------------------

def test_race_help_names_the_launch_not_the_graphs_streams(run, tmp_path):
    graph = ("graph g {\n  s1: record f\n  s1: kernel k writes a\n  s2: wait f\n  s2: kernel l writes a\n"
             "  s2: record j\n  s1: wait j\n}\ngraph h {\n  s1: kernel m writes b\n}\n")
    text = HEADER + "event f\nevent j\n" + graph + (
        "thread t {\n  x: launch g\n  o: kernel n reads b\n  y: launch h\n}\n")
    status, file = check_json(run, tmp_path, text)
    helps = {tuple(sorted(re.findall(r"kernel (\w+)", f["message"]))): f["help"] for f in file["findings"]}
    assert helps[("k", "l")] == ("order them inside graph `g`: `record E` on `s1` after the first, `wait E` on "
                                 "`s2` before the second (or capture both on one stream)")
    assert helps[("m", "n")] == ("order them with an event: `record E` on `o` after the first, `wait E` on `y` "
                                 "before `launch h` (line 25)")
    assert not any("g.s1" in help for help in helps.values())


LIFETIME = """device gpu { runtime cuda }
buffer x 4MiB on gpu
stream s on gpu nonblocking
stream t on gpu nonblocking
graph g {
  s: kernel fill writes x
}
thread main {
  alloc x
  s: launch g
"""


@pytest.mark.parametrize("rest, message, help", [
    # the host frees while the graph may still run (without cudaFree's synchronization): wait for it
    ("  free x\n", "g.s: kernel fill (line 6, launched at line 10) can touch `x` after free x (line 11)",
     "make the free wait for the graph: `sync s` after `launch g` (line 10), or record an event on `s` "
     "there and wait on it before the free"),
    # a second launch after the free: the launch itself is the misplaced call
    ("  sync s\n  t: free x\n  s: launch g\n  sync s\n",
     "g.s: kernel fill (line 6, launched at line 13) can touch `x` after t: free x (line 12)",
     "`launch g` (line 13) is enqueued after the free: launch every graph that uses `x` before freeing it "
     "(and make the free wait for those launches)"),
])
def test_use_after_free_of_a_graphs_work_names_its_launch(run, tmp_path, rest, message, help):
    text = LIFETIME.replace("{ runtime cuda }", "{ }") + rest + "}\n"
    status, file = check_json(run, tmp_path, text)
    (finding,) = [f for f in file["findings"] if f["kind"] == "use-after-free"]
    assert finding["message"].startswith(message), finding["message"]
    assert finding["help"] == help
    spec = tmp_path / "spec.sched"
    _, out, _ = run("check", spec)
    launch_line = int(re.search(r"launched at line (\d+)", message).group(1))
    assert re.search(rf"^{launch_line} \|   s: launch g\n +\| +-+ the graph launch that runs it$", out, re.M), out


def test_launches_at_two_lines_are_two_findings_and_a_loops_launches_one(run, tmp_path):
    """vllm-project/vllm-omni#6587's shape: the host frees what launches before the free use,
    and a launch after it uses it too: each launch line is a place to fix."""
    text = LIFETIME.replace("{ runtime cuda }", "{ }") + (
        "  for i in 0..2 {\n    s: launch g\n  }\n  free x\n  s: launch g\n  sync s\n}\n")
    _, file = check_json(run, tmp_path, text)
    dead = sorted((int(re.search(r"launched at line (\d+)", f["message"]).group(1)), f["instances"], f["help"])
                  for f in file["findings"] if f["kind"] == "use-after-free")
    assert [(line, instances) for line, instances, _ in dead] == [(10, 1), (12, 2), (15, 1)], dead
    assert "`sync s` after `launch g` (line 10)" in dead[0][2]
    assert dead[2][2].startswith("`launch g` (line 15) is enqueued after the free")


MEMORY = HEADER + "buffer c 1KiB on gpu\nevent f\nevent j\n"


@pytest.mark.parametrize("body, thread, dead, help", [
    # NVIDIA/warp#1418's shape: a captured free ordered after one stream's work, not the other's
    ("  s1: alloc c\n  s1: kernel produce writes c\n  s1: record f\n  s2: wait f\n  s2: kernel consume reads c\n"
     "  s1: free c\n  s2: record j\n  s1: wait j\n", "", {"consume"},
     "order them inside graph `g`: `record E` on `s2` after the use, `wait E` on `s1` before the free (or capture "
     "both on one stream)"),
    # the graph frees what outside work enqueued after the launch uses
    ("  s1: alloc c\n  s1: kernel produce writes c\n  s1: free c\n", "  o: kernel late reads c\n", {"late"},
     "`launch g` (line 18) frees `c` at every launch (line 15): free it outside the graph after them"),
    # a use captured after the free node on the same stream
    ("  s1: alloc c\n  s1: free c\n  s1: kernel stale reads c\n", "", {"stale"},
     "in graph `g` the use is captured after the free node (line 14): capture every use of `c` before its free"),
    # outside work enqueued before the launch, not ordered before its free node
    ("  s1: free c\n", None, {"early"},
     "make the launch wait for the use: `record E` on `o` after it, `wait E` on `x` before `launch g` (line 22)"),
    # an allocation the graph does not free is live for work ordered after the launch
    ("  s1: alloc c\n  s1: kernel produce writes c\n", "  x: kernel after reads c\n  x: free c\n", set(), None),
])
def test_memory_nodes_allocate_and_free_at_each_launch(run, tmp_path, body, thread, dead, help):
    threads = ("thread t {\n  x: launch g\n" + thread + "  sync x\n  sync o\n}\n" if thread is not None else
               "thread t {\n  x: launch make\n  sync x\n  o: kernel early reads c 5us\n  x: launch g\n  sync x\n"
               "  sync o\n}\n")
    allocates = "graph make {\n  s1: alloc c\n}\n" if thread is None else ""  # (what the free node frees)
    text = MEMORY + allocates + "graph g {\n" + body + "}\n" + threads
    _, file = check_json(run, tmp_path, text)
    assert file["status"] != "error", file["diagnostics"]
    found = [f for f in file["findings"] if f["kind"] == "use-after-free"]
    assert {re.search(r"kernel (\w+)", f["message"]).group(1) for f in found} == dead, found
    if help is not None:
        assert found[0]["help"] == help
    launch_line = text.splitlines().index("  x: launch g") + 1
    program = load_text(text, "<memory>").program
    for f in found:  # (the launch that ran the graph's side of each)
        graph_work = [program.statements[i].launch is not None for i in f["statements"]]
        assert any(graph_work)
        assert f["launches"] == [{"statement": program.statements[i].launch, "line": launch_line, "stream": "x"}
                                 if work else None for i, work in zip(f["statements"], graph_work)]
    assert compare(text) == []


@pytest.mark.parametrize("graphs, thread, line", [
    # a graph's allocation freed by nothing before the next launch: cudaGraphLaunch fails
    ("graph g {\n  s1: alloc c\n  s1: kernel k writes c\n}\n", ["x: launch g", "x: launch g", "x: free c"], 18),
    ("graph g {\n  s1: alloc c\n}\n", ["for i in 0..3 {", "  x: launch g", "}"], 17),
    # freed in between: by the host, on a stream, or by another graph's free node
    ("graph g {\n  s1: alloc c\n}\n", ["x: launch g", "sync x", "free c", "x: launch g"], None),
    ("graph g {\n  s1: alloc c\n}\n", ["x: launch g", "y: free c", "x: launch g", "x: free c"], None),
    ("graph g {\n  s1: alloc c\n}\ngraph h {\n  s1: free c\n}\n", ["x: launch g", "x: launch h", "x: launch g"],
     None),
    # freed by the graph itself, or launched once
    ("graph g {\n  s1: alloc c\n  s1: free c\n}\n", ["x: launch g", "x: launch g"], None),
    ("graph g[2] {\n  s1: alloc c\n}\n", ["x: launch g[0]", "x: free c", "x: launch g[1]", "x: free c"], None),
    # the body's order counts: an alloc node after the free node leaves its allocation live
    ("graph g {\n  s1: alloc c\n  s1: free c\n  s1: alloc c\n}\n", ["x: launch g", "x: launch g", "x: free c"], 19),
    # a free node of memory no graph allocates: CUDA's capture refuses it
    ("graph g {\n  s1: kernel k writes c\n  s1: free c\n}\n", ["alloc c", "x: launch g"], 14),
])
def test_graph_memory_that_cuda_refuses_is_sp032(run, tmp_path, graphs, thread, line):
    text = MEMORY + graphs + "thread t {\n" + "".join(f"  {s}\n" for s in thread) + "}\n"
    status, file = check_json(run, tmp_path, text)
    found = [(d["code"], d["line"]) for d in file["diagnostics"] if d["severity"] == "error"]
    assert found == ([] if line is None else [("SP032", line)]), file["diagnostics"]
    assert (status == 2) == (line is not None)
    if "no graph allocates" in "".join(d["message"] for d in file["diagnostics"]):
        # the help's fix, pasted: a free on the launch stream after the launch (a host free would race)
        (help,) = [d["help"] for d in file["diagnostics"] if d["code"] == "SP032"]
        assert "(`x: free c`;" in help, help
        fixed = text.replace("  s1: free c\n", "").replace("  x: launch g\n", "  x: launch g\n  x: free c\n")
        assert check_json(run, tmp_path, fixed)[1]["findings"] == []


def test_a_relaunch_names_every_live_element_and_its_help_is_a_fix(run, tmp_path):
    text = (HEADER + "buffer c[2] 1KiB on gpu\ngraph g {\n  s1: alloc c\n  s1: kernel k writes c[0]\n}\n"
            "thread t {\n  for i in 0..3 {\n    x: launch g\n  }\n  x: free c\n}\n")
    status, file = check_json(run, tmp_path, text)
    (error,) = [d for d in file["diagnostics"] if d["severity"] == "error"]
    assert error["message"] == ("graph `g` is launched again while `c[0]` and `c[1]`, which its last launch "
                                "allocated, are still live")
    assert error["help"].startswith("free them between the two launches on the launch stream (`x: free c` after "
                                    "`launch g`)")
    fixed = text.replace("    x: launch g\n", "    x: launch g\n    x: free c\n").replace("  }\n  x: free c\n", "  }\n")
    status, file = check_json(run, tmp_path, fixed)
    assert status == 0 and file["status"] == "clean", file


def test_a_free_another_thread_may_make_between_two_launches_is_not_refused(run, tmp_path):
    """Whether it comes between them is the interleaving's to say; the check stays silent."""
    text = (MEMORY + "graph g {\n  s1: alloc c\n}\nthread t {\n  x: launch g\n  x: record f\n  x: launch g\n}\n"
            "thread u {\n  o: wait f\n  o: free c\n}\n")
    status, file = check_json(run, tmp_path, text)
    assert not [d for d in file["diagnostics"] if d["severity"] == "error"]


def test_an_implicitly_synchronized_free_of_a_graphs_memory_names_the_launch_stream(run, tmp_path):
    text = LIFETIME + "  free x\n}\n"
    from checker.lints import frees_waiting_through_cuda_free

    program = load_text(text, "<graphs>").program
    (warning,) = frees_waiting_through_cuda_free(program)
    assert warning.code.value == "SP064"
    assert "wait for the work first (`sync s`), or free on its stream (`s: free x`); memory released by a call that synchronizes nothing (cuMemUnmap) is freed with `free x nosync`" in warning.help
    assert "g.s" not in warning.help
    assert any(a.label == "the graph launch that runs it" and a.span.line == 10 for a in warning.annotations)
    # and the suggested free on the launch stream is checked clean
    _, fixed = check_json(run, tmp_path, text.replace("  free x\n}", "  s: free x\n}"))
    assert fixed["findings"] == [] and fixed["status"] == "clean"


def test_reports_show_the_graphs_own_streams(run, tmp_path):
    text = HEADER + "graph g {\n  s1: kernel k writes a\n}\nthread t {\n  x: launch g\n  x: launch g\n}\n"
    spec = tmp_path / "spec.sched"
    spec.write_text(text)
    status, out, _ = run("show", spec)
    assert "g.s1 on gpu (a graph's work captured on s1)" in out
    assert out.count("x: launch g (begins)") == 2 and out.count("g.s1: kernel k") == 2
    program = load_text(text, "<graphs>").program
    assert [s.captured for s in program.streams if s.name == "g.s1"] == [0]


def test_the_python_api_builds_graphs():
    from checker.api import Program

    program = Program("graphs from python")
    gpu = program.device("gpu", compute=2)
    a = program.buffer("a", "1KiB", on=gpu)
    s1, x, o = (program.stream(name, gpu) for name in ("s1", "x", "o"))
    graph = program.graph("g")
    graph.kernel(s1, "k", writes=a, duration="1us")
    assert program.graph("g") is graph
    program.thread("t").launch(x, graph).kernel(o, "reader", reads=a)
    assert "graph g {\n  s1: kernel k writes a 1us\n}\n" in program.to_sched()
    result = program.check()
    assert [f.help for f in result.findings] == [
        "order them with an event: `record E` on `x` after `launch g` (line 14), `wait E` on `o` before the second"]
    with pytest.raises(ValueError):
        program.graph("a")  # (a buffer's name)
    with pytest.raises(TypeError):
        program.thread("t").launch(x, "g")


def test_a_graph_no_thread_launches_is_checked_and_warned_about(run, tmp_path):
    text = HEADER + "graph g {\n  s1: kernel k writes a\n}\ngraph h[2] {\n  s1: kernel l writes b\n}\n"
    status, file = check_json(run, tmp_path, text + "thread t {\n  x: launch h[1]\n}\n")
    assert status == 0
    graphs = [(d["code"], d["line"], d["message"]) for d in file["diagnostics"] if "graph" in d["message"]]
    assert graphs == [("SP051", 9, "graph `g` is never launched")]
    found = diagnostics(run, tmp_path, HEADER + "graph g {\n  s9: kernel k\n}\nthread t {\n  x: kernel m\n}\n")
    assert [(code, line) for code, line, _ in found] == [("SP010", 10)]


def test_a_launch_costs_its_thread_one_launch(run, tmp_path):
    """`cudaGraphLaunch` is one call: ten captured 1us kernels on a device whose enqueues cost
    10us take 10us of host time and 10us of work, where ten eager launches take 100us."""
    head = "device gpu { compute 1 launch 10us }\nstream s on gpu\nstream a on gpu\n"
    spans = []
    for text in (head + "graph g {\n  for i in 0..10 {\n    s: kernel k 1us\n  }\n}\n"
                        "thread t {\n  a: launch g\n  sync a\n}\n",
                 head + "thread t {\n  for i in 0..10 {\n    a: kernel k 1us\n  }\n  sync a\n}\n"):
        (tmp_path / "spec.sched").write_text(text)
        _, out, _ = run("simulate", "--format", "json", tmp_path / "spec.sched")
        spans.append(json.loads(out)["files"][0]["makespan"])
    assert spans == [pytest.approx(0.020), pytest.approx(0.101)]


def test_peers_and_roots_in_a_graph_name_ranks_on_other_devices(run, tmp_path):
    text = """device gpu[2] { runtime cuda }
buffer x[2] 1MiB on gpu
stream c[2] on gpu
stream m[2] on gpu
comm p2p = { c[0], c[1] }
graph stage[2] {
  if stage == 0 {
    c[0]: send p2p to c[1] x[0]
    c[0]: broadcast p2p root c[0] x[0]
  } else {
    c[1]: recv p2p from c[0] x[1]
    c[1]: broadcast p2p root c[0] x[1]
  }
}
thread rank[2] process {
  m[rank]: launch stage[rank]
  sync m[rank]
}
expect no deadlock
expect no race
"""
    status, file = check_json(run, tmp_path, text)
    assert status == 0 and file["passed"], file


def test_graph_misuses_get_messages_that_say_what_to_write(run, tmp_path):
    # A stream's wait for itself is no join and no wait on outside work.
    text = HEADER + "graph g {\n  s1: wait_stream s1\n  s1: kernel k writes a\n}\nthread t {\n  x: launch g\n}\n"
    assert check_json(run, tmp_path, text)[0] == 0
    # The graph's own streams cannot be named.
    found = diagnostics(run, tmp_path, HEADER + "graph g {\n  s1: kernel k\n}\nthread t {\n  x: launch g\n"
                                                "  sync g.s1\n}\n")
    assert found == [("SP012", 14, "`g.s1` is a graph's own stream, which only reports show")]
    # A graph declared in a thread.
    found = diagnostics(run, tmp_path, HEADER + "thread t {\n  graph g {\n    s1: kernel k\n  }\n}\n")
    assert found[0][:2] == ("SP002", 10) and found[0][2].startswith("a `graph` is declared at the top level")


def test_a_tensor_used_by_a_graph_gets_its_record_stream_on_the_launch_stream(run, tmp_path):
    text = """device gpu { compute 2 }
tensor T 1MiB on gpu
tensor U 1MiB on gpu
stream s on gpu
stream a on gpu
stream b on gpu
graph g {
  s: kernel reader reads T 5us
}
thread t {
  a: alloc T
  a: kernel init writes T 1us
  b: wait_stream a
  b: launch g
  free T
  a: alloc U
  a: kernel k writes U 1us
  sync all
}
"""
    status, file = check_json(run, tmp_path, text)
    helps = [f["help"] for f in file["findings"] if f["kind"] == "race"]
    assert any("write `b: record_stream T` after `launch g` (line 14)" in h for h in helps), helps
    fixed = text.replace("  b: launch g\n", "  b: launch g\n  b: record_stream T\n")
    status, file = check_json(run, tmp_path, fixed + "expect no race\nexpect no use-after-free\n")
    assert status == 0, file["findings"]


def test_help_for_one_launch_statement_run_by_two_processes_names_the_threads(run, tmp_path):
    text = ("device gpu { compute 2 }\nbuffer x 1MiB on gpu\nstream s on gpu\nstream a[2] on gpu\n"
            "graph g {\n  s: kernel k writes x 1us\n}\nthread p[2] process {\n  a[p]: launch g\n}\n")
    status, file = check_json(run, tmp_path, text)
    assert [f["help"] for f in file["findings"]] == [
        "the launches of `g` at line 9 by `p[0]` and `p[1]` are not ordered, and they run in two processes, where an "
        "(interprocess) event orders them only once its record is known to be enqueued: order them with a signal, `a[0]: notify N` after `launch g` and `a[1]: await N` before "
        "`launch g`"]


@pytest.mark.parametrize("report,body,code,line", [
    # vllm-project/vllm PR #57785 (issue #57759): a side stream's prefetch inside the capture was
    # never joined back, and the capture failed or the work leaked past it.
    ("vllm57785", ["s1: kernel forward writes a", "s1: record f", "s2: wait f", "s2: copy b <- a"],
     "SP030", 4),
    # NVIDIA/cccl PR #8674: a pool stream waited on an event never recorded in the capture
    # (cudaErrorStreamCaptureIsolation); the fix forks every pool stream from the capturing one.
    ("cccl8674", ["s1: kernel produce writes a", "s2: wait e", "s2: kernel consume reads a"], "SP030", 2),
])
def test_capture_failures_of_real_reports(run, tmp_path, report, body, code, line):
    text = HEADER + "event f\nevent e\ngraph g {\n" + "".join(f"  {b}\n" for b in body) + "}\n"
    text += "thread t {\n  x: record e\n  x: launch g\n}\n"
    found = diagnostics(run, tmp_path, text)
    assert [(c, at) for c, at, _ in found] == [(code, text.splitlines().index("graph g {") + 1 + line)], (report, found)


def test_json_races_name_the_launch_of_a_graphs_work(run, tmp_path):
    from test_json_schemas import validator

    text = HEADER + "graph g {\n  s1: kernel k writes a\n}\nthread t {\n  x: launch g\n  o: kernel l reads a\n}\n"
    spec = tmp_path / "spec.sched"
    spec.write_text(text)
    _, out, _ = run("check", "--format", "json", spec)
    output = json.loads(out)
    validator("check").validate(output)
    detail = output["files"][0]["findings"][0]["detail"]
    assert detail["a"]["launch"] == {"statement": 0, "line": 13, "stream": "x"}
    assert "launch" not in detail["b"]


def test_sarif_points_at_the_launch_that_runs_a_graphs_work(run, tmp_path):
    text = HEADER + "graph g {\n  s1: kernel k writes a\n}\nthread t {\n  x: launch g\n  o: kernel other reads a\n}\n"
    spec = tmp_path / "spec.sched"
    spec.write_text(text)
    _, out, _ = run("check", "--format", "sarif", spec)
    (result,) = [r for r in json.loads(out)["runs"][0]["results"] if r["ruleId"] == "SP101"]
    assert result["locations"][0]["physicalLocation"]["region"]["startLine"] == 10
    related = {(r["physicalLocation"]["region"]["startLine"], r["message"]["text"]) for r in result["relatedLocations"]}
    assert related == {(14, "second access: o: kernel other"), (13, "the graph launch that runs g.s1: kernel k")}


@pytest.mark.parametrize("producer, consumer, line", [
    # a graph's own record, and an event node of another graph on the declared event
    ("  s1: record e\n", "  s1: wait e external\n", 15),
    # both in one graph
    ("  s1: record e\n  s1: wait e external\n", "", 13),
    # the fix: a record node, which the other graph's wait node shares
    ("  s1: record e external\n", "  s1: wait e external\n", None),
])
def test_an_event_node_on_an_event_a_graph_captures_as_its_own_is_sp030(run, tmp_path, producer, consumer, line):
    text = (HEADER + "event e\ngraph producer {\n  s1: kernel k writes a\n" + producer + "}\n"
            "graph consumer {\n" + consumer + "  s1: kernel l reads a\n}\n"
            "thread t {\n  x: launch producer\n  o: launch consumer\n}\n")
    status, file = check_json(run, tmp_path, text)
    errors = [(d["code"], d["line"]) for d in file["diagnostics"] if d["severity"] == "error"]
    assert errors == ([] if line is None else [("SP030", line)]), file["diagnostics"]
    if line is not None:
        where = "graph `consumer`" if consumer else "the same graph"
        assert file["diagnostics"][0]["message"] == (f"event `e` is used both inside graph `producer` and by an "
                                                     f"event node of {where}, which acts on the declared event")


def test_freeing_outside_what_the_graph_frees_is_a_double_free_with_help_on_which_to_drop(run, tmp_path):
    body = "  s1: alloc c\n  s1: kernel k writes c\n  s1: free c\n"
    text = MEMORY + "graph g {\n" + body + "}\nthread t {\n  x: launch g\n  sync x\n  x: free c\n}\n"
    _, file = check_json(run, tmp_path, text)
    (dead,) = [f for f in file["findings"] if f["kind"] == "use-after-free"]
    assert dead["message"] == "x: free c (line 20) frees `c` again: g.s1: free c (line 15, launched at line 18) frees it too"
    assert dead["help"].startswith("`launch g` (line 18) already frees `c` at every launch (line 15): drop one")
    # dropping the graph's free node, as the help says, leaves the allocation to the outside free
    _, fixed = check_json(run, tmp_path, text.replace("  s1: free c\n", ""))
    assert fixed["status"] == "clean", fixed


def test_a_free_node_that_can_run_before_its_launch_s_alloc_gets_help_to_order_it(run, tmp_path):
    # the free node follows the begin stream only: one launch's free can come before its own alloc
    text = (MEMORY + "graph g {\n  s1: kernel p writes a\n  s2: wait_stream s1\n  s2: alloc c\n"
            "  s2: kernel k writes c\n  s1: free c\n  s1: wait_stream s2\n}\n"
            "thread t {\n  for i in 0..2 {\n    x: launch g\n  }\n  sync x\n}\n")
    _, file = check_json(run, tmp_path, text)
    double = [f for f in file["findings"] if f["kind"] == "use-after-free" and "again" in f["message"]]
    assert double and double[0]["help"].startswith("graph `g` frees `c` at every launch (line 17), and this free "
                                                   "node can run before its launch's own alloc")
    _, fixed = check_json(run, tmp_path, text.replace("  s1: free c\n", "  s2: free c\n"))
    assert fixed["status"] == "clean", fixed


def test_a_relaunch_refused_in_one_choose_branch_says_which(run, tmp_path):
    text = (MEMORY + "buffer other 1KiB on gpu\ngraph g {\n  s1: alloc c\n  s1: kernel k writes c\n}\n"
            "thread t {\n  x: launch g\n  choose { x: free c } or { x: kernel l writes other }\n  x: launch g\n"
            "  x: free c\n}\n")
    status, file = check_json(run, tmp_path, text)
    (error,) = [d for d in file["diagnostics"] if d["severity"] == "error"]
    assert error["code"] == "SP032" and error["notes"] == ["when line 19: branch 2 of 2"]


def test_launches_by_two_threads_are_told_to_hand_over_too():
    from checker.analyze import check_loaded
    from checker.findings import FindingKind

    # an event alone does not order them: the wait may be enqueued before the record
    text = ("device gpu { compute 2 runtime cuda }\nbuffer shared 1MiB on gpu\nstream s on gpu\nstream a on gpu\n"
            "stream b on gpu\ngraph g[2] {\n  s: kernel k writes shared 10us\n}\n"
            "thread p0 {\n  a: launch g[0]\n  sync a\n}\nthread p1 {\n  b: launch g[1]\n  sync b\n}\n")
    report = check_loaded(load_text(text, "<graphs>"))
    (race,) = [f for f in report.findings if f.kind is FindingKind.RACE]
    assert race.help.endswith("have `p0` set a notify after the record (`notify N`) and `p1` `await N` before the wait")


def test_a_stream_named_only_by_a_graph_never_launched_is_not_unused():
    # the graph is never launched (SP051 says so); its body's stream is named, as any graph's is
    text = ("device gpu { runtime cuda }\nbuffer x 1MiB on gpu\nstream s on gpu\nstream main on gpu\n"
            "graph g {\n  for i in 0..2 {\n    if i == 1 {\n      s: kernel k writes x\n    }\n  }\n}\n"
            "thread t {\n  main: kernel r reads x\n  sync main\n}\n")
    warned = [d.message for d in load_text(text, "<graphs>").diagnostics if d.code.value == "SP051"]
    assert warned == ["graph `g` is never launched"], warned


def test_a_graph_s_own_streams_share_no_hardware_queue_with_another_thread():
    """A graph exec's streams take no hardware queue: a thread that launches one is not
    judged to share queue 0 with a thread whose stream has it (the program stays on the fast
    path)."""
    from checker.determinism import nondeterminism

    program = load_text("""device gpu { compute 2 queues 2 }
buffer x 1MiB on gpu
buffer y 1MiB on gpu
stream other on gpu
stream main on gpu
graph step {
  main: kernel k writes x 1us
}
thread a {
  main: launch step
  sync main
}
thread b {
  other: kernel j writes y 1us
  sync other
}
""", "t.sched").program
    assert [(s.name, s.queue) for s in program.streams] == [("other", 0), ("main", 1), ("step.main", None)]
    assert nondeterminism(program) is None


def test_a_use_before_alloc_in_a_graph_is_told_to_wait_on_the_launch_stream_before_the_launch():
    from checker.analyze import check_loaded
    from checker.findings import FindingKind

    # the exec's own stream (`g.s`) cannot be named: the wait goes before `launch g` on `s`
    text = ("device d { compute 2 }\nbuffer x 4KiB on d\nstream s on d\nstream u on d\nevent E\n"
            "graph g {\n  s: kernel gk writes x 1us\n}\nthread a {\n  u: alloc x\n  s: launch g\n  sync all\n}\n")
    (finding,) = check_loaded(load_text(text, "<graphs>")).findings
    assert finding.kind is FindingKind.USE_BEFORE_ALLOC
    assert finding.help == ("`u: alloc x` (line 10) allocates it before the use, but only on `u`: record an event on "
                            "`u` after it and wait on it on `s` before `launch g` (line 11)")
    fixed = text.replace("  s: launch g\n", "  u: record E\n  s: wait E\n  s: launch g\n")  # (the help, applied)
    assert check_loaded(load_text(fixed, "<graphs>")).findings == ()
