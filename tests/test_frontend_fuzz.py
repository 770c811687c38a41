"""Fuzz the front end through the CLI: mutate the conformance specs and the example specs
(delete, insert, duplicate and swap lines and characters; junk bytes, invalid UTF-8, NUL)
and run `check` (and `show`) in-process. Whatever the input, the exit status is 0, 1 or 2,
nothing prints a traceback, and an invalid spec is reported as `path:line:col: error[SPxxx]`
(or `path: error[SPxxx]` when the problem has no position)."""

from __future__ import annotations

import contextlib
import io
import re
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import CONFORMANCE, SPECS
from checker.cli import main

SEEDS = [p.read_bytes() for p in sorted(CONFORMANCE.glob("*.sched")) + sorted(SPECS.glob("*.sched"))]
SEED_LINES = sorted({line for seed in SEEDS for line in seed.splitlines(keepends=True)})
TOKENS = [
    b"{", b"}", b"[", b"]", b"(", b")", b":", b",", b"<-", b"..", b"=", b"<=", b"#", b"\n", b"\r\n", b"\t", b" ",
    b"-", b"+", b"*", b"/", b"%", b"0", b"1", b"3", b"99999999999999999999", b"4MiB", b"0B", b"1.5ms", b"0.5ns",
    b"thread", b"stream", b"buffer", b"event", b"flag", b"notify", b"await", b"comm", b"alias", b"device",
    b"kernel", b"copy", b"reads", b"writes", b"record", b"wait", b"reset", b"sync", b"all", b"for", b"let",
    b"in", b"host", b"pinned", b"on", b"alloc", b"free", b"allreduce", b"send", b"recv", b"to", b"from",
    b"expect", b"race", b"deadlock", b"no", b"use-after-free", b"makespan", b"legacy", b"nonblocking",
    b"priority", b"high", b"queues", b"launch", b'"', b"\\\n", b"spec",
    b"group {", b"choose {", b"} or {", b"query", b"memcpy", b"memset", b"tensor", b"runtime cuda", b"broadcast",
    b"root", b"reduce", b"allgather", b"alltoall", b"wait_stream", b"record_stream", b"item", b"[2]", b"4mb", b"2 ms",
]
JUNK = [b"\x00", b"\xff", b"\xfe\xff", b"\xc3", b"\xc3\x28", b"\xe2\x82", b"\xed\xa0\x80", b"\x80", b"\xf4\x90\x80\x80",
        "é".encode(), "\u2028".encode(), "\u00a0".encode(), "\ufeff".encode(), b"\x1b[31m", b"\x0c", b"\x0b", b"\r"]

# The first line of any exit-2 output: a diagnostic with or without a position.
ERROR_HEAD = r"{path}(:\d+:\d+)?: error\[SP\d{{3}}\]: \S"


@st.composite
def mutated(draw) -> bytes:
    data = draw(st.sampled_from(SEEDS))
    for _ in range(draw(st.integers(1, 4))):
        lines = data.splitlines(keepends=True) or [b""]
        kind = draw(st.sampled_from([
            "delete_line", "duplicate_line", "swap_lines", "insert_line", "delete_chars", "duplicate_chars",
            "insert_token", "insert_junk", "replace_char", "swap_chars", "truncate",
        ]))
        i = draw(st.integers(0, len(lines) - 1))
        j = draw(st.integers(0, len(lines) - 1))
        at = draw(st.integers(0, len(data)))
        if kind == "delete_line":
            del lines[i]
        elif kind == "duplicate_line":
            lines.insert(j, lines[i])
        elif kind == "swap_lines":
            lines[i], lines[j] = lines[j], lines[i]
        elif kind == "insert_line":
            lines.insert(i, draw(st.sampled_from(SEED_LINES)))
        if kind in ("delete_line", "duplicate_line", "swap_lines", "insert_line"):
            data = b"".join(lines)
            continue
        length = draw(st.integers(1, 8))
        if kind == "delete_chars":
            data = data[:at] + data[at + length:]
        elif kind == "duplicate_chars":
            data = data[:at] + data[at:at + length] * draw(st.integers(2, 4)) + data[at:]
        elif kind == "insert_token":
            data = data[:at] + draw(st.sampled_from(TOKENS)) + data[at:]
        elif kind == "insert_junk":
            junk = draw(st.one_of(st.sampled_from(JUNK), st.binary(min_size=1, max_size=4)))
            data = data[:at] + junk + data[at:]
        elif kind == "replace_char":
            data = data[:at] + draw(st.sampled_from(TOKENS + JUNK)) + data[at + 1:]
        elif kind == "swap_chars" and at + 1 < len(data):
            data = data[:at] + data[at + 1:at + 2] + data[at:at + 1] + data[at + 2:]
        elif kind == "truncate":
            data = data[:at]
    return data


def run_cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(list(args))
    return status, out.getvalue(), err.getvalue()


def check_output(path: Path, status: int, out: str, err: str) -> None:
    text = out + err
    assert status in (0, 1, 2), (status, text)
    assert "Traceback" not in text, text
    assert "internal error" not in text, text
    if status == 2:
        first = text.lstrip("\n").splitlines()[0]
        assert re.match(ERROR_HEAD.format(path=re.escape(str(path))), first), text[:2000]


@contextlib.contextmanager
def spec_file(data: bytes):
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "fuzzed.sched"
        path.write_bytes(data)
        yield path


@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
@given(mutated())
def test_check_survives_mutations(data):
    with spec_file(data) as path:
        status, out, err = run_cli("check", "--timeout", "2", "--max-statements", "5000", str(path))
        check_output(path, status, out, err)


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(mutated())
def test_show_survives_mutations(data):
    with spec_file(data) as path:
        status, out, err = run_cli("show", str(path))
        assert status in (0, 2)
        check_output(path, status, out, err)


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.binary(max_size=300))
def test_show_survives_random_bytes(data):
    with spec_file(data) as path:
        status, out, err = run_cli("show", str(path))
        check_output(path, status, out, err)


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.sampled_from(TOKENS), max_size=40))
def test_show_survives_token_soup(tokens):
    with spec_file(b" ".join(tokens)) as path:
        status, out, err = run_cli("show", str(path))
        check_output(path, status, out, err)
