"""The optimizer against the executor on random specs that use every timing feature:
hardware queues, the legacy default stream, callbacks, collectives across threads, pageable
copies, stream alloc/free, launch costs, several engines of one kind."""

from __future__ import annotations

import random

import pytest

from checker import hb
from checker.crosscheck import replays
from checker.frontend import load_text
from checker.crosscheck import optimize_as_written as optimize
from checker.optimize import emit


def feature_spec(seed: int) -> str:
    rng = random.Random(seed)
    queues = rng.choice(["", "", " queues 1", " queues 2"])
    launch = rng.choice(["", "", " launch 500us"])
    legacy = rng.random() < 0.3
    lines = [
        f"device d0 {{ compute {rng.choice([1, 2])} h2d 1 d2h 1 comm 1{launch}{queues} }}",
        f"device d1 {{ compute 1 copy 1 comm 1{launch} }}",
        "buffer h[2] 1MiB on host pinned",
        "buffer pg 1MiB on host",
        "buffer a[3] 1MiB on d0",
        "buffer b[3] 1MiB on d1",
        "buffer tmp 1MiB on d0",
        "stream x0 on d0" + (" legacy" if legacy else ""),
        "stream x1 on d0 priority high",
        "stream c0 on d0",
        "stream y0 on d1",
        "stream c1 on d1",
        "comm world = { c0, c1 }",
        "event e0[3]",
        "event e1[3]",
    ]
    collectives = rng.randint(0, 2)
    body0, body1 = [], []
    rec0 = []
    for i in range(rng.randint(3, 6)):
        s = rng.choice(["x0", "x1"])
        k = rng.random()
        dur = f"{rng.randint(1, 4) * 0.5}ms"
        if k < 0.35:
            body0.append(f"{s}: kernel k reads a[{rng.randrange(3)}] writes a[{rng.randrange(3)}] {dur}")
        elif k < 0.5:
            body0.append(f"{s}: copy a[{rng.randrange(3)}] <- h[{rng.randrange(2)}] {dur}")
        elif k < 0.6:
            body0.append(f"{s}: copy pg <- a[{rng.randrange(3)}] {dur}")
        elif k < 0.7:
            body0.append(f"{s}: callback cb reads h[{rng.randrange(2)}] {dur}")
        elif k < 0.8:
            e = rng.randrange(3)
            body0.append(f"{s}: record e0[{e}]")
            rec0.append(e)
        elif k < 0.88 and rec0:
            body0.append(f"{s}: wait e0[{rng.choice(rec0)}]")
        elif k < 0.94:
            body0.append(f"sync {s}")
        else:
            body0.append(f"host work reads h[{rng.randrange(2)}] {dur}")
    if rng.random() < 0.3:
        body0 = ["x1: alloc tmp", "x1: kernel fill writes tmp 1ms"] + body0 + ["x1: free tmp"]
    for j in range(collectives):
        body0.append(f"c0: allreduce world a[{j}] 1ms")
        body1.append(f"c1: allreduce world b[{j}] 1ms")
    for i in range(rng.randint(1, 4)):
        body1.insert(rng.randrange(len(body1) + 1),
                     f"y0: kernel m reads b[{rng.randrange(3)}] writes b[{rng.randrange(3)}] {rng.randint(1, 3)}ms")
    body0.append("sync d0")
    body1.append("sync d1")
    out = lines + ["thread t0 {"] + ["  " + b for b in body0] + ["}", "thread t1 {"]
    out += ["  " + b for b in body1] + ["}"]
    return "\n".join(out) + "\n"


@pytest.mark.parametrize("seed", range(60))
def test_features_agree_with_the_executor(seed):
    loaded = load_text(feature_spec(seed))
    assert loaded.program is not None, loaded.diagnostics
    program = loaded.program
    result = optimize(program, timeout=20)
    if result.deadlock:
        assert result.program is None
        return
    assert result.program is not None
    if result.simulated is not None:
        assert result.simulated >= result.program
    assert result.program >= result.bound >= result.lower
    if result.program_schedule is None:
        return
    assert result.optimal_program and result.optimal_bound
    ok, why = replays(program, result.program_schedule)
    assert ok, why
    text = emit(program, result)
    again_loaded = load_text(text)
    assert again_loaded.program is not None, (again_loaded.diagnostics, text)
    again = optimize(again_loaded.program, timeout=20)
    assert again.optimal_program
    if all(d.launch == 0 for d in program.devices):
        assert again.program == result.bound, text
    if not hb.analyze(program)[0]:
        assert not hb.analyze(again_loaded.program)[0], text


EVERY_KIND = """device g[2]
buffer x[2] 1MiB on g
buffer y[2] 2MiB on g
stream s[2] on g
comm w = { s }
thread t[2] process {
  s[t]: memset x[t] 10us
  s[t]: allreduce w x[t] 1ms
  s[t]: allgather w y[t] <- x[t] 1ms
  s[t]: reducescatter w x[t] 1ms
  s[t]: alltoall w y[t][0:1MiB] <- x[t] 1ms
  s[t]: broadcast w root s[0] x[t] 1ms
  s[t]: broadcast w root s[1] y[t][0:1MiB] <- x[t] 1ms
  s[t]: reduce w root s[0] x[t] 1ms
  s[t]: reduce w root s[1] y[t][0:1MiB] <- x[t] 1ms
  sync s[t]
  memset y[t] 5us
}
"""


def test_emit_writes_memsets_and_every_collective_kind():
    """Each statement is written back as its kind and operands: in place, out of place, rooted
    (a member that only reads or only writes its buffer written in place), memsets on a stream
    and on the host's default stream."""
    program = load_text(EVERY_KIND).program
    result = optimize(program, timeout=20)
    text = emit(program, result)
    for line in ("allgather w y_0 <- x_0", "alltoall w y_0[0:1048576] <- x_0", "broadcast w root s_1 y_1[0:1048576] <- x_1",
                 "reduce w root s_1 y_1[0:1048576] <- x_1", "reduce w root s_1 x_0 ", "broadcast w root s_0 x_0 ",
                 "memset x_0 10us", "memset y_1 5us", "reducescatter w x_1 1ms"):
        assert line in text, (line, text)
    again = load_text(text).program
    assert again is not None
    rewritten = [(s.op, s.root is not None, [(a.start, a.end, a.write) for a in s.accesses])
                 for s in again.statements if s.op.value not in ("record", "wait", "sync")]
    original = [(s.op, s.root is not None, [(a.start, a.end, a.write) for a in s.accesses])
                for s in program.statements if s.op.value not in ("record", "wait", "sync")]
    assert sorted(map(repr, rewritten)) == sorted(map(repr, original))
    assert optimize(again, timeout=20).program == result.bound
    assert not hb.analyze(program)[0] and not hb.analyze(again)[0]
