#!/usr/bin/env python3
"""Independent reference checker for the .sched language contract (v1).

Parses a spec with a hand-written parser, unrolls the threads, and explores every
interleaving by explicit-state search (memoised on the full state).  Reports the
conformance verdict: races (pairs of source lines), race_buffers, uaf_lines, deadlock.

Execution model (literal reading of the contract):
  * every access-carrying task (kernel, copy, callback, free, allreduce, send, recv) has a
    start step and an end step, whatever its duration; its accesses are "in use" in between;
  * record / wait / reset / notify / await / alloc tasks complete in one step at the head
    of their stream when their condition holds;
  * host statements that access memory (`host`, host `free`) also have a start and an end
    step on their thread (other threads and tasks may interleave in between); with
    --host-instant they are one step;
  * a race = two accesses of different tasks / host statements that are in use in the same
    reachable state, overlapping bytes, at least one write;
  * use after free / before alloc = an access in use in a reachable state where its buffer
    is not alive (free kills the buffer at the END of the free task / host free;
    alloc makes it alive when it completes; a buffer without any alloc is alive at start);
  * rule 8: a collective group / send-recv pair starts in ONE step when every member is at
    the head of its stream, pending, and allowed to begin (hw queue, legacy); members end
    independently;
  * rule 10: a task may begin only when every task enqueued earlier into its hardware queue
    has begun (a zero-duration task has begun only once it has completed);
  * rule 11: legacy dependencies are captured at enqueue time;
  * rule 3: snapshot waits bind at enqueue time; rule 4 flag events; rule 5 notifies;
  * rule 6: sync captures its targets when the thread reaches it;
  * deadlock = a reachable state, not everything completed, no step enabled.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass, field

# ----------------------------------------------------------------------------- lexing

KEYWORDS = {
    "spec", "device", "buffer", "alias", "stream", "event", "notify", "comm", "thread",
    "expect", "on", "host", "pinned", "priority", "high", "low", "legacy", "nonblocking",
    "flag", "for", "in", "let", "kernel", "reads", "writes", "copy", "callback", "record",
    "wait", "reset", "await", "allreduce", "send", "recv", "to", "from", "alloc", "free",
    "sync", "all",
}
ENGINES = {"compute", "copy", "h2d", "d2h", "d2d", "comm"}
SIZE_UNITS = {"B": 1, "KiB": 1024, "MiB": 1024 ** 2, "GiB": 1024 ** 3,
              "KB": 1000, "MB": 1000 ** 2, "GB": 1000 ** 3}
DUR_UNITS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
UNROLL_LIMIT = 100_000


class SpecError(Exception):
    def __init__(self, line, col, msg):
        super().__init__(f"{line}:{col}: {msg}")
        self.line, self.col, self.msg = line, col, msg


@dataclass
class Tok:
    kind: str   # NAME INT DEC SIZE DUR STR PUNCT NL EOF
    val: object
    line: int
    col: int
    text: str = ""


TOKEN_RE = re.compile(r"""
 (?P<ws>[ \t\r]+)
|(?P<comment>\#[^\n]*)
|(?P<nl>\n)
|(?P<str>"[^"\n]*")
|(?P<num>\d+(?:\.\d+)?)(?P<unit>KiB|MiB|GiB|KB|MB|GB|B|ns|us|ms|s)?(?![A-Za-z0-9_])
|(?P<name>[A-Za-z_][A-Za-z0-9_]*)
|(?P<punct>\.\.|<-|<=|[{}\[\]():,=+\-*/%])
""", re.X)


def lex(text):
    toks = []
    pos, line, lstart = 0, 1, 0
    while pos < len(text):
        m = TOKEN_RE.match(text, pos)
        col = pos - lstart + 1
        if not m:
            raise SpecError(line, col, f"unexpected character {text[pos]!r}")
        k = m.lastgroup
        s = m.group(0)
        if k == "nl":
            toks.append(Tok("NL", None, line, col, s))
            line += 1
            lstart = m.end()
        elif k in ("ws", "comment"):
            pass
        elif k == "str":
            toks.append(Tok("STR", s[1:-1], line, col, s))
        elif m.group("num") is not None:
            num, unit = m.group("num"), m.group("unit")
            if unit is None:
                if "." in num:
                    toks.append(Tok("DEC", float(num), line, col, s))
                else:
                    toks.append(Tok("INT", int(num), line, col, s))
            elif unit in SIZE_UNITS:
                if "." in num:
                    v = float(num) * SIZE_UNITS[unit]
                    if v != int(v):
                        raise SpecError(line, col, "fractional byte size")
                    v = int(v)
                else:
                    v = int(num) * SIZE_UNITS[unit]
                toks.append(Tok("SIZE", v, line, col, s))
            else:
                toks.append(Tok("DUR", float(num) * DUR_UNITS[unit], line, col, s))
        elif k == "name":
            toks.append(Tok("NAME", s, line, col, s))
        else:
            toks.append(Tok("PUNCT", s, line, col, s))
        pos = m.end()
    toks.append(Tok("NL", None, line, pos - lstart + 1))
    toks.append(Tok("EOF", None, line + 1, 1))
    return toks


# ----------------------------------------------------------------------------- AST

@dataclass
class Ref:           # NAME or NAME[expr]
    name: str
    index: object    # expr or None
    line: int
    col: int


@dataclass
class Access:        # NAME, NAME[i], NAME[lo:hi], NAME[i][lo:hi]
    name: str
    index: object
    lo: object
    hi: object
    line: int
    col: int


@dataclass
class Stmt:
    kind: str
    line: int
    col: int
    stream: Ref = None
    args: dict = field(default_factory=dict)
    body: list = None


class Parser:
    def __init__(self, text):
        self.toks = lex(text)
        self.i = 0

    # helpers
    @property
    def t(self):
        return self.toks[self.i]

    def err(self, msg, tok=None):
        tok = tok or self.t
        raise SpecError(tok.line, tok.col, msg)

    def at(self, kind, val=None):
        t = self.t
        return t.kind == kind and (val is None or t.val == val)

    def at_kw(self, kw):
        return self.t.kind == "NAME" and self.t.val == kw

    def eat(self, kind, val=None):
        if not self.at(kind, val):
            self.err(f"expected {val or kind}, found {self.t.text or self.t.kind!r}")
        t = self.t
        self.i += 1
        return t

    def eat_kw(self, kw):
        if not self.at_kw(kw):
            self.err(f"expected `{kw}`, found {self.t.text or self.t.kind!r}")
        self.i += 1

    def name(self):
        return self.eat("NAME")   # lenient: keywords may be used as names

    def skip_nl(self):
        while self.at("NL"):
            self.i += 1

    def end_stmt(self):
        if self.at("PUNCT", "}"):
            return
        if not self.at("NL") and not self.at("EOF"):
            self.err(f"unexpected {self.t.text!r}")
        self.skip_nl()

    # expressions
    def expr(self):
        e = self.term()
        while self.at("PUNCT", "+") or self.at("PUNCT", "-"):
            op = self.eat("PUNCT").val
            e = (op, e, self.term())
        return e

    def term(self):
        e = self.factor()
        while self.at("PUNCT", "*") or self.at("PUNCT", "/") or self.at("PUNCT", "%"):
            op = self.eat("PUNCT")
            e = (op.val, e, self.factor(), op.line, op.col)
        return e

    def factor(self):
        t = self.t
        if self.at("PUNCT", "-"):
            self.i += 1
            return ("neg", self.factor())
        if self.at("PUNCT", "("):
            self.i += 1
            e = self.expr()
            self.eat("PUNCT", ")")
            return e
        if t.kind in ("INT", "SIZE"):
            self.i += 1
            return ("num", t.val)
        if t.kind == "NAME" and t.val not in KEYWORDS:
            self.i += 1
            return ("var", t.val, t.line, t.col)
        self.err(f"expected an expression, found {t.text or t.kind!r}")

    def ref(self):
        n = self.name()
        idx = None
        if self.at("PUNCT", "["):
            self.i += 1
            idx = self.expr()
            self.eat("PUNCT", "]")
        return Ref(n.val, idx, n.line, n.col)

    def access(self):
        n = self.name()
        idx = lo = hi = None
        for _ in range(2):
            if not self.at("PUNCT", "["):
                break
            self.i += 1
            a = self.expr()
            if self.at("PUNCT", ":"):
                self.i += 1
                b = self.expr()
                self.eat("PUNCT", "]")
                if lo is not None:
                    self.err("two slices")
                lo, hi = a, b
                break
            self.eat("PUNCT", "]")
            if idx is not None:
                self.err("two indices")
            idx = a
        return Access(n.val, idx, lo, hi, n.line, n.col)

    def access_list(self):
        lst = [self.access()]
        while self.at("PUNCT", ","):
            self.i += 1
            lst.append(self.access())
        return lst

    def opt_dur(self):
        if self.at("DUR"):
            return self.eat("DUR").val
        if self.at("INT") and self.t.val == 0:   # tolerate a bare 0
            self.i += 1
            return 0.0
        return None

    # top level
    def program(self):
        prog = {"devices": [], "buffers": [], "aliases": [], "streams": [], "events": [],
                "notifies": [], "comms": [], "threads": [], "expects": [], "title": None}
        self.skip_nl()
        while not self.at("EOF"):
            t = self.t
            if t.kind != "NAME":
                self.err(f"unexpected {t.text!r}")
            kw = t.val
            self.i += 1
            if kw == "spec":
                prog["title"] = self.eat("STR").val
            elif kw == "device":
                prog["devices"].append(self.device(t))
            elif kw == "buffer":
                n = self.name()
                cnt = self.opt_count()
                if not self.at("SIZE"):
                    self.err("expected a size")
                size = self.eat("SIZE").val
                self.eat_kw("on")
                if self.at_kw("host"):
                    self.i += 1
                    where = None
                else:
                    where = self.name()
                pinned = False
                if self.at_kw("pinned"):
                    self.i += 1
                    pinned = True
                prog["buffers"].append(dict(name=n.val, count=cnt, size=size, where=where,
                                            pinned=pinned, line=n.line, col=n.col))
            elif kw == "alias":
                n = self.name()
                self.eat("PUNCT", "=")
                prog["aliases"].append(dict(name=n.val, access=self.access(), line=n.line,
                                            col=n.col))
            elif kw == "stream":
                n = self.name()
                cnt = self.opt_count()
                self.eat_kw("on")
                dev = self.name()
                prio, mode = None, "blocking"
                while True:
                    if self.at_kw("priority"):
                        self.i += 1
                        if self.at_kw("high") or self.at_kw("low"):
                            prio = self.t.val
                            self.i += 1
                        else:
                            neg = False
                            if self.at("PUNCT", "-"):
                                self.i += 1
                                neg = True
                            v = self.eat("INT").val
                            prio = -v if neg else v
                    elif self.at_kw("legacy") or self.at_kw("nonblocking"):
                        mode = self.t.val
                        self.i += 1
                    else:
                        break
                prog["streams"].append(dict(name=n.val, count=cnt, device=dev, mode=mode,
                                            prio=prio, line=n.line, col=n.col))
            elif kw == "event":
                n = self.name()
                cnt = self.opt_count()
                flag = False
                if self.at_kw("flag"):
                    self.i += 1
                    flag = True
                prog["events"].append(dict(name=n.val, count=cnt, flag=flag, line=n.line,
                                           col=n.col))
            elif kw == "notify":
                n = self.name()
                cnt = self.opt_count()
                prog["notifies"].append(dict(name=n.val, count=cnt, line=n.line, col=n.col))
            elif kw == "comm":
                n = self.name()
                self.eat("PUNCT", "=")
                self.eat("PUNCT", "{")
                self.skip_nl()
                members = [self.ref()]
                self.skip_nl()
                while self.at("PUNCT", ","):
                    self.i += 1
                    self.skip_nl()
                    members.append(self.ref())
                    self.skip_nl()
                self.eat("PUNCT", "}")
                prog["comms"].append(dict(name=n.val, members=members, line=n.line, col=n.col))
            elif kw == "thread":
                n = self.name()
                self.eat("PUNCT", "{")
                body = self.block()
                prog["threads"].append(dict(name=n.val, body=body, line=n.line, col=n.col))
            elif kw == "expect":
                parts = []
                while not self.at("NL") and not self.at("EOF"):
                    parts.append(self.t.text)
                    self.i += 1
                prog["expects"].append((" ".join(parts), t.line))
            else:
                self.err(f"unexpected {kw!r}", t)
            self.end_stmt()
        return prog

    def opt_count(self):
        if self.at("PUNCT", "["):
            self.i += 1
            c = self.eat("INT").val
            self.eat("PUNCT", "]")
            if c < 1:
                self.err("array size must be >= 1")
            return c
        return None

    def device(self, kwtok):
        n = self.name()
        self.eat("PUNCT", "{")
        engines, launch, queues = {}, None, None
        while True:
            self.skip_nl()
            if self.at("PUNCT", "}"):
                self.i += 1
                break
            t = self.eat("NAME")
            if t.val in ENGINES:
                c = self.eat("INT").val
                if c < 1:
                    self.err("engine count must be >= 1", t)
                engines[t.val] = c
            elif t.val == "launch":
                launch = self.eat("DUR").val
            elif t.val == "queues":
                queues = self.eat("INT").val
                if queues < 1:
                    self.err("queues must be >= 1", t)
            else:
                self.err(f"unknown device property {t.val!r}", t)
        return dict(name=n.val, engines=engines, launch=launch, queues=queues, line=n.line,
                    col=n.col)

    def block(self):
        stmts = []
        self.skip_nl()
        while not self.at("PUNCT", "}"):
            if self.at("EOF"):
                self.err("unterminated block")
            stmts.append(self.stmt())
            self.end_stmt()
        self.eat("PUNCT", "}")
        return stmts

    def rw(self):
        reads, writes = [], []
        for _ in range(2):
            if self.at_kw("reads") and not reads:
                self.i += 1
                reads = self.access_list()
            elif self.at_kw("writes") and not writes:
                self.i += 1
                writes = self.access_list()
        return reads, writes

    def stmt(self):
        t = self.t
        L, C = t.line, t.col
        if t.kind != "NAME":
            self.err(f"expected a statement, found {t.text or t.kind!r}")
        kw = t.val
        nxt = self.toks[self.i + 1]
        if nxt.kind == "PUNCT" and nxt.val in (":", "["):
            kw = None          # STREAM: op
        if kw == "for":
            self.i += 1
            v = self.name()
            self.eat_kw("in")
            a = self.expr()
            self.eat("PUNCT", "..")
            b = self.expr()
            self.eat("PUNCT", "{")
            body = self.block()
            return Stmt("for", L, C, args=dict(var=v.val, a=a, b=b), body=body)
        if kw == "let":
            self.i += 1
            v = self.name()
            self.eat("PUNCT", "=")
            return Stmt("let", L, C, args=dict(var=v.val, e=self.expr()))
        if kw == "host":
            self.i += 1
            n = self.name()
            r, w = self.rw()
            d = self.opt_dur()
            return Stmt("host", L, C, args=dict(name=n.val, reads=r, writes=w, dur=d))
        if kw == "sync":
            self.i += 1
            if self.at_kw("all"):
                self.i += 1
                return Stmt("sync", L, C, args=dict(target=None))
            return Stmt("sync", L, C, args=dict(target=self.ref()))
        if kw in ("notify", "await"):
            self.i += 1
            return Stmt("h" + kw, L, C, args=dict(target=self.ref()))
        if kw in ("alloc", "free"):
            self.i += 1
            return Stmt("h" + kw, L, C, args=dict(acc=self.access()))
        # STREAM: op
        s = self.ref()
        self.eat("PUNCT", ":")
        op = self.eat("NAME")
        o = op.val
        if o in ("kernel", "callback"):
            n = self.name()
            r, w = self.rw()
            return Stmt(o, L, C, s, dict(name=n.val, reads=r, writes=w, dur=self.opt_dur()))
        if o == "copy":
            dst = self.access()
            self.eat("PUNCT", "<-")
            src = self.access()
            return Stmt(o, L, C, s, dict(dst=dst, src=src, dur=self.opt_dur()))
        if o in ("record", "wait", "reset", "notify", "await"):
            return Stmt(o, L, C, s, dict(target=self.ref()))
        if o == "allreduce":
            c = self.ref()
            a = self.access()
            return Stmt(o, L, C, s, dict(comm=c, acc=a, dur=self.opt_dur()))
        if o in ("send", "recv"):
            c = self.ref()
            self.eat_kw("to" if o == "send" else "from")
            peer = self.ref()
            a = self.access()
            return Stmt(o, L, C, s, dict(comm=c, peer=peer, acc=a, dur=self.opt_dur()))
        if o in ("alloc", "free"):
            return Stmt(o, L, C, s, dict(acc=self.access()))
        self.err(f"unknown stream operation {o!r}", op)


# ----------------------------------------------------------------------------- lowering

CONTROL = {"record", "wait", "reset", "notify", "await", "alloc"}
ACCESS_TASKS = {"kernel", "copy", "callback", "free"}
COLLECTIVE = {"allreduce", "send", "recv"}


@dataclass
class Task:          # one unrolled statement
    idx: int
    thread: int
    kind: str        # stream kinds, or host kinds: host, hfree, halloc, hnotify, hawait, sync
    line: int
    stream: int = -1
    accesses: list = field(default_factory=list)   # (mem, lo, hi, write)
    zero: bool = True
    event: int = -1
    flag: bool = False
    notify: int = -1
    mem: int = -1           # alloc/free target memory
    comm: int = -1
    peer: int = -1
    pageable: bool = False
    sync_streams: tuple = ()
    sync_event: int = -1
    what: str = ""


class Model:
    def __init__(self, prog):
        self.prog = prog
        self.lower()

    def err(self, node, msg):
        raise SpecError(node.line if hasattr(node, "line") else node["line"],
                        node.col if hasattr(node, "col") else node["col"], msg)

    def lower(self):
        p = self.prog
        names = {}

        def declare(kind, d, table):
            if d["name"] in table:
                raise SpecError(d["line"], d["col"], f"{d['name']!r} declared twice")
            table[d["name"]] = kind

        for kind in ("devices", "buffers", "aliases", "streams", "events", "notifies", "comms"):
            for d in p[kind]:
                declare(kind, d, names)
        thread_names = {}
        for d in p["threads"]:     # threads are never referenced: their own namespace
            declare("threads", d, thread_names)
        self.names = names
        self.devices = {d["name"]: d for d in p["devices"]}
        self.dev_index = {d["name"]: i for i, d in enumerate(p["devices"])}
        # memories: one per buffer element
        self.mems = []          # (label, declared name, size, host, pinned)
        self.buf = {}
        for b in p["buffers"]:
            if b["where"] is not None and b["where"].val not in self.devices:
                raise SpecError(b["where"].line, b["where"].col,
                                f"unknown device {b['where'].val!r}")
            ids = []
            for k in range(b["count"] or 1):
                label = b["name"] if b["count"] is None else f"{b['name']}[{k}]"
                ids.append(len(self.mems))
                self.mems.append((label, b["name"], b["size"], b["where"] is None, b["pinned"]))
            self.buf[b["name"]] = (b, ids)
        # streams
        self.streams = []       # dict(name, device, mode, queue)
        self.stream_ids = {}
        per_dev = {}
        for s in p["streams"]:
            if s["device"].val not in self.devices:
                raise SpecError(s["device"].line, s["device"].col,
                                f"unknown device {s['device'].val!r}")
            ids = []
            for k in range(s["count"] or 1):
                label = s["name"] if s["count"] is None else f"{s['name']}[{k}]"
                dev = s["device"].val
                pos = per_dev.get(dev, 0)
                per_dev[dev] = pos + 1
                ids.append(len(self.streams))
                self.streams.append(dict(name=label, device=dev, mode=s["mode"], pos=pos))
            self.stream_ids[s["name"]] = (s, ids)
        # hardware queues
        self.queue_of = []
        qkeys = {}
        for si, s in enumerate(self.streams):
            n = self.devices[s["device"]]["queues"]
            key = (s["device"], s["pos"] % n) if n else ("own", si)
            if key not in qkeys:
                qkeys[key] = len(qkeys)
            self.queue_of.append(qkeys[key])
        self.nqueues = len(qkeys)
        # events / notifies
        self.events = []
        self.event_ids = {}
        for e in p["events"]:
            ids = []
            for k in range(e["count"] or 1):
                ids.append(len(self.events))
                self.events.append(e["flag"])
            self.event_ids[e["name"]] = (e, ids)
        self.notifies = 0
        self.notify_ids = {}
        for n in p["notifies"]:
            ids = list(range(self.notifies, self.notifies + (n["count"] or 1)))
            self.notifies += n["count"] or 1
            self.notify_ids[n["name"]] = (n, ids)
        # aliases (resolved lazily, may refer to each other)
        self.alias_defs = {a["name"]: a for a in p["aliases"]}
        self.alias_cache = {}
        # comms
        self.comms = []
        self.comm_ids = {}
        for c in p["comms"]:
            members = [self.resolve_stream(m, {}) for m in c["members"]]
            if len(set(members)) != len(members):
                raise SpecError(c["line"], c["col"], "a stream is twice in a comm")
            self.comm_ids[c["name"]] = len(self.comms)
            self.comms.append(members)
        # threads
        self.tasks = []
        self.threads = []
        for ti, th in enumerate(p["threads"]):
            seq = []
            self.unroll(th["body"], {}, ti, seq)
            self.threads.append(seq)
        self.post()

    # --- resolution helpers
    def eval(self, e, env):
        k = e[0]
        if k == "num":
            return e[1]
        if k == "var":
            if e[1] not in env:
                raise SpecError(e[2], e[3], f"unknown variable {e[1]!r}")
            return env[e[1]]
        if k == "neg":
            return -self.eval(e[1], env)
        a, b = self.eval(e[1], env), self.eval(e[2], env)
        if k == "+":
            return a + b
        if k == "-":
            return a - b
        if k == "*":
            return a * b
        if b == 0:
            raise SpecError(e[3], e[4], "division by zero")
        if k == "/":
            return a // b
        return a % b

    def pick(self, ref, env, table, kindname):
        if ref.name not in table:
            raise SpecError(ref.line, ref.col, f"{ref.name!r} is not a declared {kindname}")
        decl, ids = table[ref.name]
        if decl["count"] is None:
            if ref.index is not None:
                raise SpecError(ref.line, ref.col, f"{ref.name!r} is not an array")
            return ids[0]
        if ref.index is None:
            raise SpecError(ref.line, ref.col, f"{ref.name!r} needs an index")
        i = self.eval(ref.index, env)
        if not 0 <= i < len(ids):
            raise SpecError(ref.line, ref.col, f"index {i} out of range for {ref.name!r}")
        return ids[i]

    def resolve_stream(self, ref, env):
        return self.pick(ref, env, self.stream_ids, "stream")

    def resolve_access(self, acc, env, depth=0):
        """-> (mem, lo, hi)"""
        if depth > 50:
            raise SpecError(acc.line, acc.col, "alias cycle")
        if acc.name in self.alias_defs:
            if acc.index is not None:
                raise SpecError(acc.line, acc.col, f"alias {acc.name!r} is not an array")
            a = self.alias_defs[acc.name]
            mem, lo, hi = self.resolve_access(a["access"], {}, depth + 1)
        elif acc.name in self.buf:
            decl, ids = self.buf[acc.name]
            r = Ref(acc.name, acc.index, acc.line, acc.col)
            mem = self.pick(r, env, self.buf, "buffer")
            lo, hi = 0, self.mems[mem][2]
        else:
            raise SpecError(acc.line, acc.col, f"{acc.name!r} is not a declared buffer")
        if acc.lo is not None:
            a, b = self.eval(acc.lo, env), self.eval(acc.hi, env)
            if not (0 <= a < b <= hi - lo):
                raise SpecError(acc.line, acc.col, f"byte range {a}:{b} out of range")
            lo, hi = lo + a, lo + b
        return mem, lo, hi

    def unroll(self, body, env, ti, seq):
        env = dict(env)
        for st in body:
            if st.kind == "let":
                env[st.args["var"]] = self.eval(st.args["e"], env)
            elif st.kind == "for":
                a, b = self.eval(st.args["a"], env), self.eval(st.args["b"], env)
                if b - a > UNROLL_LIMIT or len(self.tasks) + (b - a) > UNROLL_LIMIT:
                    raise SpecError(st.line, st.col, "loop unrolls past the limit")
                for v in range(a, b):
                    e2 = dict(env)
                    e2[st.args["var"]] = v
                    self.unroll(st.body, e2, ti, seq)
                    if len(self.tasks) > UNROLL_LIMIT:
                        raise SpecError(st.line, st.col, "loop unrolls past the limit")
            else:
                t = self.lower_stmt(st, env, ti)
                self.tasks.append(t)
                seq.append(t.idx)

    def lower_stmt(self, st, env, ti):
        t = Task(len(self.tasks), ti, st.kind, st.line)
        a = st.args
        k = st.kind
        if st.stream is not None:
            t.stream = self.resolve_stream(st.stream, env)
            t.what = f"{self.streams[t.stream]['name']}: {k}"
        else:
            t.what = k
        if "dur" in a:
            t.zero = not a["dur"]
        if k in ("kernel", "callback", "host"):
            for acc in a["reads"]:
                t.accesses.append((*self.resolve_access(acc, env), False))
            for acc in a["writes"]:
                t.accesses.append((*self.resolve_access(acc, env), True))
            if k == "host":
                t.zero = True
        elif k == "copy":
            dm, dl, dh = self.resolve_access(a["dst"], env)
            sm, sl, sh = self.resolve_access(a["src"], env)
            if self.mems[dm][3] and self.mems[sm][3]:
                raise SpecError(st.line, st.col, "copy between two host buffers")
            t.accesses = [(sm, sl, sh, False), (dm, dl, dh, True)]
            t.pageable = any(self.mems[m][3] and not self.mems[m][4] for m in (dm, sm))
        elif k in ("record", "wait", "reset"):
            r = a["target"]
            t.event = self.pick(r, env, self.event_ids, "event")
            t.flag = self.events[t.event]
            if k == "reset" and not t.flag:
                raise SpecError(st.line, st.col, "reset of an event that is not a flag")
        elif k in ("notify", "await", "hnotify", "hawait"):
            t.notify = self.pick(a["target"], env, self.notify_ids, "notify")
        elif k in ("alloc", "free", "halloc", "hfree"):
            mem, lo, hi = self.resolve_access(a["acc"], env)
            t.mem = mem
            if k in ("free", "hfree"):
                t.accesses = [(mem, 0, self.mems[mem][2], True)]
        elif k in COLLECTIVE:
            c = a["comm"]
            if c.name not in self.comm_ids or c.index is not None:
                raise SpecError(c.line, c.col, f"{c.name!r} is not a declared comm")
            t.comm = self.comm_ids[c.name]
            if t.stream not in self.comms[t.comm]:
                raise SpecError(st.line, st.col, "stream is not a member of the comm")
            m, lo, hi = self.resolve_access(a["acc"], env)
            if k == "allreduce":
                t.accesses = [(m, lo, hi, False), (m, lo, hi, True)]
            else:
                t.peer = self.resolve_stream(a["peer"], env)
                if t.peer not in self.comms[t.comm] or t.peer == t.stream:
                    raise SpecError(st.line, st.col, "peer is not another member of the comm")
                t.accesses = [(m, lo, hi, k == "recv")]
        elif k == "sync":
            r = a["target"]
            if r is None:
                t.sync_streams = tuple(range(len(self.streams)))
            elif r.name in self.stream_ids:
                t.sync_streams = (self.resolve_stream(r, env),)
            elif r.name in self.event_ids:
                t.sync_event = self.pick(r, env, self.event_ids, "event")
            elif r.name in self.devices and r.index is None:
                t.sync_streams = tuple(i for i, s in enumerate(self.streams)
                                       if s["device"] == r.name)
            else:
                raise SpecError(r.line, r.col, f"cannot sync on {r.name!r}")
        if st.stream is not None and k not in ("kernel", "callback", "copy", "record", "wait",
                                               "reset", "notify", "await", "alloc", "free",
                                               "allreduce", "send", "recv"):
            raise SpecError(st.line, st.col, "bad stream op")
        return t

    def post(self):
        ts = self.tasks
        n = len(ts)
        self.n = n
        # conflicts between statements
        self.conf = [dict() for _ in range(n)]
        acc_tasks = [t for t in ts if t.accesses]
        self.mem_users = {}
        for t in acc_tasks:
            for (m, lo, hi, w) in t.accesses:
                self.mem_users.setdefault(m, set()).add(t.idx)
        for i, a in enumerate(acc_tasks):
            for b in acc_tasks[i:]:
                bufs = set()
                for (m1, l1, h1, w1) in a.accesses:
                    for (m2, l2, h2, w2) in b.accesses:
                        if m1 == m2 and (w1 or w2) and l1 < h2 and l2 < h1:
                            bufs.add(self.mems[m1][1])
                if bufs:
                    self.conf[a.idx][b.idx] = bufs
                    self.conf[b.idx][a.idx] = bufs
        self.access_mems = [frozenset(m for (m, _, _, _) in t.accesses) for t in ts]
        allocated = {t.mem for t in ts if t.kind in ("alloc", "halloc")}
        self.init_alive = 0
        for m in range(len(self.mems)):
            if m not in allocated:
                self.init_alive |= 1 << m
        # collective counters
        self.ckeys = {}
        for t in ts:
            if t.kind == "allreduce":
                key = ("ar", t.comm, t.stream)
            elif t.kind == "send":
                key = ("s", t.comm, t.stream, t.peer)
            elif t.kind == "recv":
                key = ("r", t.comm, t.peer, t.stream)
            else:
                continue
            if key not in self.ckeys:
                self.ckeys[key] = len(self.ckeys)
            t.ckey = self.ckeys[key]
        # legacy info
        self.legacy_streams = {}
        self.blocking_streams = {}
        for i, s in enumerate(self.streams):
            if s["mode"] == "legacy":
                self.legacy_streams.setdefault(s["device"], []).append(i)
            elif s["mode"] == "blocking":
                self.blocking_streams.setdefault(s["device"], []).append(i)
        self.has_legacy = bool(self.legacy_streams)
        self.legacy_dep_streams = []
        for i, s in enumerate(self.streams):
            if s["mode"] == "legacy":
                self.legacy_dep_streams.append(tuple(self.blocking_streams.get(s["device"], [])))
            elif s["mode"] == "blocking":
                self.legacy_dep_streams.append(tuple(self.legacy_streams.get(s["device"], [])))
            else:
                self.legacy_dep_streams.append(())


# ----------------------------------------------------------------------------- exploration

class Capped(Exception):
    pass


def explore(M: Model, cap=2_000_000, host_instant=False, group_hwq="strict"):
    ts = M.tasks
    threads = M.threads
    nth = len(threads)
    nst = len(M.streams)
    conf = M.conf
    races = {}          # (line,line) -> set(buffers)
    uaf = set()
    deadlock = [False]
    queue_of = M.queue_of
    comms = M.comms

    # state components
    #  th: tuple of (pc, phase, aux)   phase 0 ready, 1 in host stmt, 2 pageable wait, 3 sync wait
    #  st: tuple of task statuses (0 none, 1 pending, 2 running, 3 done)
    #  sq: per stream tuple of enqueued not-done tasks
    #  hq: per hw queue tuple of enqueued not-begun tasks
    #  ax: per task aux: (binding_or_groupkey, legacy deps tuple) for pending tasks
    #  lr: per event last enqueued (not completed) snapshot record, -1 none
    #  fl, nt, al: bitmasks (flags, notifies, alive)
    #  cn: collective counters
    init = (tuple((0, 0, None) for _ in range(nth)), (0,) * M.n, ((),) * nst,
            ((),) * M.nqueues, (None,) * M.n, (-1,) * len(M.events), 0, 0, M.init_alive,
            (0,) * len(M.ckeys))

    race_pair = {}

    def note_start(new_ids, stt, alive):
        """new_ids start now; stt = statuses before the step (running = 2, host stmts too)."""
        for a in new_ids:
            for b, bufs in conf[a].items():
                if stt[b] == 2 or (b in new_ids and b > a):
                    key = race_pair.get((a, b))
                    if key is None:
                        key = race_pair[(a, b)] = tuple(sorted((ts[a].line, ts[b].line)))
                    races.setdefault(key, set()).update(bufs)
            for m in M.access_mems[a]:
                if not (alive >> m) & 1:
                    uaf.add(ts[a].line)

    def note_free_end(mem, stt, freer):
        for i in M.mem_users.get(mem, ()):
            if i != freer and stt[i] == 2:
                uaf.add(ts[i].line)

    def begun(i, stt):
        s = stt[i]
        return s == 3 or (s == 2 and not ts[i].zero)

    def can_begin(i, stt, hq, ax, ignore=()):
        """hw queue + legacy conditions for pending task i."""
        q = hq[queue_of[ts[i].stream]]
        for j in q:
            if j == i:
                break
            if j in ignore:
                continue
            return False
        a = ax[i]
        if a is not None and a[1]:
            for d in a[1]:
                if stt[d] != 3:
                    return False
        return True

    visited = set()
    stack = [init]
    visited.add(init)
    while stack:
        S = stack.pop()
        th, stt, sq, hq, ax, lr, fl, nt, al, cn = S
        succ = []
        alldone = True
        # ---------------- thread steps
        for ti in range(nth):
            pc, ph, aux = th[ti]
            seq = threads[ti]
            if pc >= len(seq):
                continue
            alldone = False
            t = ts[seq[pc]]
            k = t.kind

            if ph == 1:       # end of a host access statement
                st2 = list(stt)
                st2[t.idx] = 3
                st2 = tuple(st2)
                al2 = al
                nthr = list(th)
                nthr[ti] = (pc + 1, 0, None)
                nthr = tuple(nthr)
                if k == "hfree":
                    al2 = al & ~(1 << t.mem)
                    note_free_end(t.mem, st2, t.idx)
                succ.append((nthr, st2, sq, hq, ax, lr, fl, nt, al2, cn))
                continue
            if ph == 2:       # waiting for own pageable copy
                if stt[t.idx] == 3:
                    nthr = list(th)
                    nthr[ti] = (pc + 1, 0, None)
                    succ.append((tuple(nthr), stt, sq, hq, ax, lr, fl, nt, al, cn))
                continue
            if ph == 3:       # sync waiting
                if all(stt[j] == 3 for j in aux):
                    nthr = list(th)
                    nthr[ti] = (pc + 1, 0, None)
                    succ.append((tuple(nthr), stt, sq, hq, ax, lr, fl, nt, al, cn))
                continue
            # ph == 0 : execute statement pc
            nthr = list(th)
            if t.stream >= 0:
                i = t.idx
                st2 = list(stt)
                st2[i] = 1
                sq2 = list(sq)
                sq2[t.stream] = sq[t.stream] + (i,)
                hq2 = list(hq)
                qi = queue_of[t.stream]
                hq2[qi] = hq[qi] + (i,)
                bind = None
                lr2 = lr
                cn2 = cn
                if k == "wait" and not t.flag:
                    bind = lr[t.event]
                elif k == "record":
                    lr2 = list(lr)
                    lr2[t.event] = i
                    lr2 = tuple(lr2)
                elif k in COLLECTIVE:
                    c = cn[t.ckey]
                    cn2 = list(cn)
                    cn2[t.ckey] = c + 1
                    cn2 = tuple(cn2)
                    if k == "allreduce":
                        bind = ("ar", t.comm, c)
                    else:
                        a_, b_ = (t.stream, t.peer) if k == "send" else (t.peer, t.stream)
                        bind = ("sr", t.comm, a_, b_, c)
                deps = ()
                if M.has_legacy:
                    dl = []
                    for s2 in M.legacy_dep_streams[t.stream]:
                        if sq[s2]:
                            dl.append(sq[s2][-1])
                    deps = tuple(dl)
                ax2 = ax
                if bind is not None or deps:
                    ax2 = list(ax)
                    ax2[i] = (bind, deps)
                    ax2 = tuple(ax2)
                if t.pageable:
                    nthr[ti] = (pc, 2, None)
                else:
                    nthr[ti] = (pc + 1, 0, None)
                succ.append((tuple(nthr), tuple(st2), tuple(sq2), tuple(hq2), ax2, lr2, fl, nt,
                             al, cn2))
                continue
            if k in ("host", "hfree"):
                if not t.accesses and k == "host":
                    nthr[ti] = (pc + 1, 0, None)
                    succ.append((tuple(nthr), stt, sq, hq, ax, lr, fl, nt, al, cn))
                    continue
                note_start((t.idx,), stt, al)
                if host_instant:
                    nthr[ti] = (pc + 1, 0, None)
                    al2 = al
                    if k == "hfree":
                        al2 = al & ~(1 << t.mem)
                        note_free_end(t.mem, stt, t.idx)
                    succ.append((tuple(nthr), stt, sq, hq, ax, lr, fl, nt, al2, cn))
                else:
                    nthr[ti] = (pc, 1, None)
                    st2 = list(stt)
                    st2[t.idx] = 2
                    succ.append((tuple(nthr), tuple(st2), sq, hq, ax, lr, fl, nt, al, cn))
                continue
            if k == "halloc":
                nthr[ti] = (pc + 1, 0, None)
                succ.append((tuple(nthr), stt, sq, hq, ax, lr, fl, nt, al | (1 << t.mem), cn))
                continue
            if k == "hnotify":
                nthr[ti] = (pc + 1, 0, None)
                succ.append((tuple(nthr), stt, sq, hq, ax, lr, fl, nt | (1 << t.notify), al, cn))
                continue
            if k == "hawait":
                if (nt >> t.notify) & 1:
                    nthr[ti] = (pc + 1, 0, None)
                    succ.append((tuple(nthr), stt, sq, hq, ax, lr, fl, nt & ~(1 << t.notify),
                                 al, cn))
                continue
            if k == "sync":
                if t.sync_event >= 0:
                    r = lr[t.sync_event]
                    targets = () if r < 0 or stt[r] == 3 else (r,)
                else:
                    targets = tuple(sq[s][-1] for s in t.sync_streams if sq[s])
                if targets:
                    nthr[ti] = (pc, 3, targets)
                else:
                    nthr[ti] = (pc + 1, 0, None)
                succ.append((tuple(nthr), stt, sq, hq, ax, lr, fl, nt, al, cn))
                continue
            raise AssertionError(k)
        # ---------------- task steps
        for s in range(nst):
            q = sq[s]
            if not q:
                continue
            alldone = False
            i = q[0]
            t = ts[i]
            k = t.kind
            status = stt[i]
            if status == 2:
                # end
                st2 = list(stt)
                st2[i] = 3
                st2 = tuple(st2)
                sq2 = list(sq)
                sq2[s] = q[1:]
                hq2 = hq
                if t.zero:
                    hq2 = list(hq)
                    qi = queue_of[s]
                    hq2[qi] = tuple(x for x in hq[qi] if x != i)
                    hq2 = tuple(hq2)
                al2 = al
                if k == "free":
                    al2 = al & ~(1 << t.mem)
                    note_free_end(t.mem, st2, i)
                ax2 = ax
                if M.has_legacy:
                    ax2 = clean_deps(ax, i)
                succ.append((th, st2, tuple(sq2), hq2, ax2, lr, fl, nt, al2, cn))
                continue
            # pending at head
            if k in COLLECTIVE:
                key = ax[i][0]
                if key[0] == "ar":
                    members_streams = comms[key[1]]
                else:
                    members_streams = (key[2], key[3])
                if s != min(members_streams):
                    continue   # generate the joint step from one member only
                members = []
                ok = True
                for ms in members_streams:
                    mq = sq[ms]
                    if not mq:
                        ok = False
                        break
                    j = mq[0]
                    if stt[j] != 1 or ax[j] is None or ax[j][0] != key:
                        ok = False
                        break
                    members.append(j)
                if not ok:
                    continue
                if group_hwq == "strict":
                    mset = ()
                elif group_hwq == "joint":       # fellow members that begin at this step
                    mset = {j for j in members if not ts[j].zero}
                else:
                    mset = set(members)
                if not all(can_begin(j, stt, hq, ax, mset) for j in members):
                    continue
                st2 = list(stt)
                hq2 = list(hq)
                ax2 = list(ax)
                for j in members:
                    st2[j] = 2
                    ax2[j] = None
                    if not ts[j].zero:
                        qi = queue_of[ts[j].stream]
                        hq2[qi] = tuple(x for x in hq2[qi] if x != j)
                note_start(members, stt, al)
                st2 = tuple(st2)
                succ.append((th, st2, sq, tuple(hq2), tuple(ax2), lr, fl, nt, al, cn))
                continue
            if not can_begin(i, stt, hq, ax):
                continue
            if k in ACCESS_TASKS:
                st2 = list(stt)
                st2[i] = 2
                st2 = tuple(st2)
                hq2 = hq
                if not t.zero:
                    hq2 = list(hq)
                    qi = queue_of[s]
                    hq2[qi] = tuple(x for x in hq[qi] if x != i)
                    hq2 = tuple(hq2)
                ax2 = ax
                if ax[i] is not None:
                    ax2 = list(ax)
                    ax2[i] = None
                    ax2 = tuple(ax2)
                note_start((i,), stt, al)
                succ.append((th, st2, sq, hq2, ax2, lr, fl, nt, al, cn))
                continue
            # control task: single completion step
            fl2, nt2, al2, lr2 = fl, nt, al, lr
            if k == "record":
                if t.flag:
                    fl2 = fl | (1 << t.event)
                if lr[t.event] == i:
                    lr2 = list(lr)
                    lr2[t.event] = -1
                    lr2 = tuple(lr2)
            elif k == "wait":
                if t.flag:
                    if not (fl >> t.event) & 1:
                        continue
                else:
                    b = ax[i][0] if ax[i] is not None else None
                    if b is not None and b >= 0 and stt[b] != 3:
                        continue
            elif k == "reset":
                fl2 = fl & ~(1 << t.event)
            elif k == "notify":
                nt2 = nt | (1 << t.notify)
            elif k == "await":
                if not (nt >> t.notify) & 1:
                    continue
                nt2 = nt & ~(1 << t.notify)
            elif k == "alloc":
                al2 = al | (1 << t.mem)
            st2 = list(stt)
            st2[i] = 3
            sq2 = list(sq)
            sq2[s] = q[1:]
            hq2 = list(hq)
            qi = queue_of[s]
            hq2[qi] = tuple(x for x in hq[qi] if x != i)
            ax2 = list(ax)
            ax2[i] = None
            ax2 = tuple(ax2)
            if M.has_legacy:
                ax2 = clean_deps(ax2, i)
            if k == "record" and not t.flag:
                # normalise: waits bound to a completed record behave like no-op waits
                ax2 = tuple((-1, a[1]) if (a is not None and a[0] == i) else a for a in ax2)
            succ.append((th, tuple(st2), tuple(sq2), tuple(hq2), ax2, lr2, fl2, nt2, al2, cn))
        if not succ and not alldone:
            deadlock[0] = True
        for n in succ:
            if n not in visited:
                visited.add(n)
                if len(visited) > cap:
                    raise Capped()
                stack.append(n)

    return dict(
        races=sorted([list(k) for k in races]),
        race_buffers=sorted({b for v in races.values() for b in v}),
        uaf_lines=sorted(uaf),
        deadlock=deadlock[0],
    ), len(visited)


def clean_deps(ax, done):
    out = None
    for j, a in enumerate(ax):
        if a is not None and a[1] and done in a[1]:
            if out is None:
                out = list(ax)
            nd = tuple(x for x in a[1] if x != done)
            out[j] = None if (a[0] is None and not nd) else (a[0], nd)
    return ax if out is None else tuple(out)


# ----------------------------------------------------------------------------- API / CLI

def check_text(text, cap=2_000_000, host_instant=False, group_hwq="strict"):
    """-> dict with either 'verdict' (and 'states'), 'error' (line, col, msg) or 'capped'."""
    try:
        prog = Parser(text).program()
        M = Model(prog)
    except SpecError as e:
        return {"error": {"line": e.line, "col": e.col, "message": e.msg}}
    try:
        v, n = explore(M, cap=cap, host_instant=host_instant, group_hwq=group_hwq)
    except Capped:
        return {"capped": True, "cap": cap}
    return {"verdict": v, "states": n}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--cap", type=int, default=2_000_000, help="state cap (default 2,000,000)")
    ap.add_argument("--host-instant", action="store_true",
                    help="host statements are a single step (never overlap each other)")
    ap.add_argument("--group-hwq", choices=("strict", "joint", "ignore"), default="strict",
                    help="collective members sharing a hardware queue: strict = each member must "
                         "be allowed to begin before the joint step (default); joint = a fellow "
                         "member with a duration counts as begun at the joint step; ignore = "
                         "fellow members never hold each other")
    args = ap.parse_args(argv)
    worst = 0
    out = {}
    for f in args.files:
        with open(f) as fh:
            r = check_text(fh.read(), cap=args.cap, host_instant=args.host_instant,
                           group_hwq=args.group_hwq)
        out[f] = r
        if "error" in r:
            worst = max(worst, 2)
        elif "capped" in r:
            worst = max(worst, 1)
    print(json.dumps(out if len(args.files) > 1 else out[args.files[0]], indent=1))
    return worst


if __name__ == "__main__":
    sys.exit(main())
