#!/usr/bin/env python3
"""Random generator of small contract-valid .sched specs (for tests/test_contract_reference.py).

Every spec has 2-3 threads, 2-4 devices, 3-8 statements per thread.  About half of the specs
are "collective-heavy": a comm over one comm stream per device (2-3 members), allreduce
rounds and send/recv pairs, with kernels on the other streams of the same devices touching
the members' buffers, and members waiting on events recorded after such kernels.  The rest
mix events (snapshot and flag, cross-device waits), notifies, syncs, stream/host
alloc/free, `queues N`, `legacy` streams and pinned/pageable host copies.

    python3 generate.py --n 5 --seed 1 --out DIR      # writes DIR/g_<seed>_<i>.sched
    python3 generate.py --seed 7 --one 3              # prints spec #3 of seed 7
"""
from __future__ import annotations

import argparse
import os
import random

DURS = ["", "", " 1ms", " 2ms", " 10us"]


class Gen:
    def __init__(self, rng: random.Random, heavy: bool, ordered: bool = False):
        self.r = rng
        self.heavy = heavy
        self.ordered = ordered          # kernels mostly fenced by record/wait: fewer races
        self.build_decls()
        self.loops = None
        if rng.random() < (0.5 if ordered else 0.2):
            d = rng.randrange(self.nd)
            self.decl.append(f"buffer ring[2] 1MiB on d{d}")
            self.decl.append("event ev[2]")
            self.loops = d

    # ------------------------------------------------------------------ declarations
    def build_decls(self):
        r = self.r
        nd = r.choice([2, 2, 3]) if self.heavy else r.choice([2, 2, 3, 4])
        self.nd = nd
        self.nthreads = r.choice([2, 3]) if nd >= 3 else 2
        self.decl = []
        self.dev_streams = {d: [] for d in range(nd)}   # compute-ish streams
        self.comm_stream = {}
        self.legacy = {}
        self.dev_bufs = {d: [] for d in range(nd)}
        self.sliced = set()
        nstreams = 0
        max_streams = 6
        for d in range(nd):
            props = "compute 1 copy 1 comm 1"
            if r.random() < 0.3:
                props += f" queues {r.choice([1, 1, 2])}"
            self.decl.append(f"device d{d} {{ {props} }}")
        for d in range(nd):
            # stream declaration order matters for `queues`
            names = []
            if self.heavy or r.random() < 0.35:
                names.append((f"c{d}", ""))
                self.comm_stream[d] = f"c{d}"
            nk = 1 if (self.heavy or nd >= 3) else r.choice([1, 2])
            for j in range(nk):
                names.append((f"k{d}{'ab'[j]}", ""))
            if r.random() < 0.2:
                names.append((f"L{d}", " legacy"))
            elif r.random() < 0.1:
                names.append((f"x{d}", " nonblocking"))
            r.shuffle(names)
            kept = 0
            for nm, mode in names:
                if nstreams >= max_streams and kept and nm != self.comm_stream.get(d):
                    continue
                nstreams += 1
                kept += 1
                prio = " priority high" if r.random() < 0.1 else ""
                self.decl.append(f"stream {nm} on d{d}{prio}{mode}")
                if mode == " legacy":
                    self.legacy[d] = nm
                elif nm != self.comm_stream.get(d):
                    self.dev_streams[d].append(nm)
            if not self.dev_streams[d]:
                self.dev_streams[d].append(self.legacy.get(d) or self.comm_stream[d])
        for d in range(nd):
            self.decl.append(f"buffer g{d} 1MiB on d{d}")
            self.dev_bufs[d].append(f"g{d}")
            if r.random() < 0.6:
                self.decl.append(f"buffer t{d} 2MiB on d{d}")
                self.dev_bufs[d].append(f"t{d}")
                self.sliced.add(f"t{d}")
        # workspace buffer with alloc/free
        self.ws = None
        if r.random() < 0.6:
            d = r.randrange(nd)
            self.ws = (f"w{d}", d)
            self.decl.append(f"buffer w{d} 1MiB on d{d}")
        self.host_bufs = []
        if r.random() < 0.8:
            self.decl.append("buffer hp 1MiB on host pinned")
            self.host_bufs.append("hp")
        if r.random() < 0.6:
            self.decl.append("buffer hq 1MiB on host")
            self.host_bufs.append("hq")
        self.alias = None
        if r.random() < 0.2:
            d = r.randrange(nd)
            if f"t{d}" in self.dev_bufs[d]:
                self.decl.append(f"alias at{d} = t{d}[512KiB:2MiB]")
                self.alias = (f"at{d}", d)
        self.events = [f"e{i}" for i in range(r.choice([1, 2, 2, 3]))]
        for e in self.events:
            self.decl.append(f"event {e}")
        self.flags = []
        if r.random() < 0.5:
            self.flags = ["f0"]
            self.decl.append("event f0 flag")
        self.notifies = []
        if r.random() < 0.4:
            self.notifies = ["nt0"]
            self.decl.append("notify nt0")
        members = sorted(self.comm_stream)
        self.comm = None
        if len(members) >= 2:
            if len(members) > 3:
                members = sorted(r.sample(members, 3))
            self.comm = ("cw", members)
            self.decl.append("comm cw = { " + ", ".join(self.comm_stream[d] for d in members) + " }")
        self.owner = {d: d % self.nthreads for d in range(nd)}

    # ------------------------------------------------------------------ helpers
    def acc(self, d=None, whole=False):
        r = self.r
        if d is None or r.random() < 0.3:
            d = r.randrange(self.nd)
        pool = list(self.dev_bufs[d])
        if self.ws and self.ws[1] == d:
            pool.append(self.ws[0])
        if self.alias and self.alias[1] == d:
            pool.append(self.alias[0])
        b = r.choice(pool)
        if b in self.sliced and not whole and r.random() < 0.5:
            return b + r.choice(["[0:1MiB]", "[1MiB:2MiB]", "[512KiB:1536KiB]"])
        return b

    def stream_of(self, ti, comm_ok=False):
        r = self.r
        devs = [d for d in range(self.nd) if self.owner[d] == ti] or list(range(self.nd))
        if r.random() < 0.15:
            devs = list(range(self.nd))
        d = r.choice(devs)
        pool = list(self.dev_streams[d])
        if d in self.legacy and self.legacy[d] not in pool:
            pool.append(self.legacy[d])
        if comm_ok and d in self.comm_stream:
            pool.append(self.comm_stream[d])
        return r.choice(pool), d

    def dev_of_stream(self, s):
        for d in range(self.nd):
            if s in self.dev_streams[d] or self.comm_stream.get(d) == s or self.legacy.get(d) == s:
                return d
        raise KeyError(s)

    def kernel(self, ti, name="k"):
        r = self.r
        s, d = self.stream_of(ti)
        reads = [self.acc(d) for _ in range(r.choice([0, 1, 1, 2]))]
        writes = [self.acc(d) for _ in range(r.choice([0, 1, 1]))]
        if not reads and not writes:
            writes = [self.acc(d)]
        txt = f"{s}: kernel {name}"
        if reads:
            txt += " reads " + ", ".join(dict.fromkeys(reads))
        if writes:
            txt += " writes " + ", ".join(dict.fromkeys(writes))
        return txt + r.choice(DURS)

    def copy(self, ti):
        r = self.r
        s, d = self.stream_of(ti)
        dev = self.acc(d, whole=True)
        if self.host_bufs and r.random() < 0.8:
            h = r.choice(self.host_bufs)
            if r.random() < 0.5:
                return f"{s}: copy {dev} <- {h}" + r.choice(DURS)
            return f"{s}: copy {h} <- {dev}" + r.choice(DURS)
        other = self.acc(None, whole=True)
        return f"{s}: copy {dev} <- {other}" + r.choice(DURS)

    def any_event(self):
        r = self.r
        if self.flags and r.random() < 0.35:
            return r.choice(self.flags)
        return r.choice(self.events)

    def misc(self, ti):
        """one random non-collective statement (may be several lines for a motif)"""
        r = self.r
        choices = ["kernel"] * 5 + ["copy"] * 2 + ["record"] * 3 + ["wait"] * 3 + ["sync"] * 2 + \
                  ["host"] * 2 + ["callback"]
        if self.notifies:
            choices += ["notify", "await"]
        if self.flags:
            choices += ["reset"]
        if self.ws:
            choices += ["free", "alloc"]
        if self.loops is not None:
            choices += ["loop"]
        c = r.choice(choices)
        if c == "kernel":
            if self.ordered and r.random() < 0.8:
                s, _ = self.stream_of(ti)
                k = self.kernel(ti)
                ks = k.split(":")[0]
                ev = r.choice(self.events)
                out = [f"{ks}: wait {ev}"] if r.random() < 0.8 else []
                out.append(k)
                out.append(f"{ks}: record {r.choice(self.events)}")
                return out
            return [self.kernel(ti)]
        if c == "loop":
            d = self.loops
            s = r.choice(self.dev_streams[d])
            body = ["for i in 0..2 {"]
            if r.random() < 0.5:
                body.append("  let j = (i + 1) % 2")
                other = "j"
            else:
                other = "1 - i"
            if r.random() < 0.6:
                body.append(f"  {s}: wait ev[{other}]")
            rw = r.choice([f"reads ring[i] writes ring[{other}][0:512KiB]", "writes ring[i]",
                           f"reads ring[{other}]"])
            s2 = s if r.random() < 0.6 else r.choice(self.dev_streams[d] +
                                                     ([self.legacy[d]] if d in self.legacy else []))
            body.append(f"  {s2}: kernel lk {rw}" + r.choice(DURS))
            body.append(f"  {s2}: record ev[i]")
            body.append("}")
            return ["\n  ".join(body)]
        if c == "copy":
            return [self.copy(ti)]
        if c == "record":
            s, _ = self.stream_of(ti, comm_ok=True)
            return [f"{s}: record {self.any_event()}"]
        if c == "wait":
            s, _ = self.stream_of(ti, comm_ok=True)
            return [f"{s}: wait {self.any_event()}"]
        if c == "reset":
            s, _ = self.stream_of(ti)
            return [f"{s}: reset {r.choice(self.flags)}"]
        if c == "sync":
            k = r.random()
            if k < 0.45:
                s, _ = self.stream_of(ti, comm_ok=True)
                return [f"sync {s}"]
            if k < 0.7:
                return [f"sync {r.choice(self.events)}"]
            if k < 0.9:
                return [f"sync d{r.randrange(self.nd)}"]
            return ["sync all"]
        if c == "host":
            if not self.host_bufs:
                return ["host h"]
            h = r.choice(self.host_bufs)
            return [f"host h {r.choice(['reads', 'writes'])} {h}" + r.choice(DURS)]
        if c == "callback":
            s, _ = self.stream_of(ti)
            if self.host_bufs:
                return [f"{s}: callback cb {r.choice(['reads', 'writes'])} {r.choice(self.host_bufs)}"]
            return [f"{s}: callback cb"]
        if c == "notify":
            if r.random() < 0.5:
                return ["notify nt0"]
            s, _ = self.stream_of(ti, comm_ok=True)
            return [f"{s}: notify nt0"]
        if c == "await":
            if r.random() < 0.4:
                return ["await nt0"]
            s, _ = self.stream_of(ti, comm_ok=True)
            return [f"{s}: await nt0"]
        if c in ("free", "alloc"):
            w, d = self.ws
            if r.random() < 0.3:
                return [f"{c} {w}"]
            s = r.choice(self.dev_streams[d] + ([self.legacy[d]] if d in self.legacy else []))
            return [f"{s}: {c} {w}"]
        raise AssertionError(c)

    # ------------------------------------------------------------------ motifs
    def motif_free_order(self, per):
        """free on one stream ordered (or not) against a use on another stream, with the use
        launched after the free (launch order != run order)."""
        r = self.r
        if not self.ws:
            return
        w, d = self.ws
        streams = self.dev_streams[d] + ([self.comm_stream[d]] if d in self.comm_stream else [])
        sa = r.choice(streams)
        sb = r.choice(streams)
        ev = self.flags[0] if self.flags and r.random() < 0.7 else r.choice(self.events)
        ti = self.owner[d]
        lines = []
        if r.random() < 0.3:
            lines.append(f"{sa}: alloc {w}")
        lines += [f"{sa}: wait {ev}", f"{sa}: free {w}"]
        use = [f"{sb}: kernel use reads {w}" + r.choice(DURS), f"{sb}: record {ev}"]
        if r.random() < 0.5:
            per[ti].extend(lines + use)
        else:
            other = r.randrange(self.nthreads)
            per[ti].extend(lines)
            per[other].extend(use)

    def collective_skeleton(self, per):
        r = self.r
        name, members = self.comm
        rounds = r.choice([1, 1, 2])
        for d in members:
            ti = self.owner[d]
            c = self.comm_stream[d]
            seq = []
            for k in range(rounds):
                # kernel on another stream touching some member's buffer, then an event the
                # member waits on before its allreduce
                if r.random() < 0.7:
                    peer = r.choice(members)
                    ks = r.choice(self.dev_streams[d])
                    ev = r.choice(self.events + self.flags)
                    kt = r.choice(["writes", "reads"])
                    seq.append(f"{ks}: kernel prep {kt} g{peer}" + r.choice(DURS))
                    seq.append(f"{ks}: record {ev}")
                    tgt = per[r.randrange(self.nthreads)] if r.random() < 0.3 else None
                    w = f"{c}: wait {ev}"
                    if tgt is not None and tgt is not per[ti]:
                        tgt.append(w)   # cross-thread wait (binding depends on interleaving)
                    else:
                        seq.append(w)
                seq.append(f"{c}: allreduce {name} {self.acc(d) if r.random() < 0.3 else 'g%d' % d}"
                           + r.choice(DURS))
                if r.random() < 0.5:
                    ks = r.choice(self.dev_streams[d])
                    seq.append(f"{ks}: kernel post {r.choice(['reads', 'writes'])} g{r.choice(members)}"
                               + r.choice(DURS))
            if r.random() < 0.08:                       # mismatch: one allreduce fewer
                last = max(i for i, x in enumerate(seq) if "allreduce" in x)
                seq.pop(last)
            per[ti].extend(seq)
        # send/recv pairs
        if r.random() < 0.6:
            a, b = r.sample(members, 2)
            ca, cb = self.comm_stream[a], self.comm_stream[b]
            per[self.owner[a]].append(f"{ca}: send {name} to {cb} g{a}" + r.choice(DURS))
            rl = []
            if r.random() < 0.5:
                ev = r.choice(self.events + self.flags)
                ks = r.choice(self.dev_streams[b])
                rl += [f"{ks}: kernel use reads g{b}" + r.choice(DURS), f"{ks}: record {ev}",
                       f"{cb}: wait {ev}"]
            rl.append(f"{cb}: recv {name} from {ca} g{b}" + r.choice(DURS))
            per[self.owner[b]].extend(rl)

    # ------------------------------------------------------------------ threads
    def threads(self):
        r = self.r
        per = [[] for _ in range(self.nthreads)]
        if self.heavy and self.comm:
            self.collective_skeleton(per)
        elif self.comm and r.random() < 0.4:
            name, members = self.comm
            a, b = r.sample(members, 2)
            ca, cb = self.comm_stream[a], self.comm_stream[b]
            if r.random() < 0.5:
                for d in members:
                    per[self.owner[d]].append(f"{self.comm_stream[d]}: allreduce {name} g{d}")
            else:
                per[self.owner[a]].append(f"{ca}: send {name} to {cb} g{a}")
                per[self.owner[b]].append(f"{cb}: recv {name} from {ca} g{b}")
        if self.ws and r.random() < 0.6:
            self.motif_free_order(per)
        # fill / shuffle in random statements, keeping each thread within 3..8 statements
        out = []
        for ti in range(self.nthreads):
            body = per[ti]
            target = r.randint(3, 8)
            while len(body) > 8:                         # trim non-collective lines
                idx = [i for i, x in enumerate(body) if not any(
                    k in x for k in ("allreduce", "send", "recv"))]
                if not idx:
                    break
                body.pop(r.choice(idx))
            while len(body) < target:
                pos = r.randint(0, len(body))
                for line in reversed(self.misc(ti)):
                    body.insert(pos, line)
            out.append(body[:max(len(body), 3)])
        return out

    def render(self, title):
        th = self.threads()
        lines = [f'spec "{title}"'] + self.decl
        for i, body in enumerate(th):
            lines.append(f"thread t{i} {{")
            lines += ["  " + b for b in body]
            lines.append("}")
        return "\n".join(lines) + "\n"


def gen_spec(seed: int, index: int) -> str:
    rng = random.Random(seed * 1_000_003 + index)
    heavy = index % 2 == 0
    ordered = index % 4 == 3
    kind = "collective" if heavy else "ordered" if ordered else "mixed"
    return Gen(rng, heavy, ordered).render(f"gen seed={seed} index={index} {kind}")


def main():
    ap = argparse.ArgumentParser(description="random small .sched specs")
    ap.add_argument("--n", type=int, default=10)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default=None, help="directory to write specs into")
    ap.add_argument("--one", type=int, default=None, help="print only spec #ONE")
    a = ap.parse_args()
    if a.one is not None:
        print(gen_spec(a.seed, a.one), end="")
        return
    for i in range(a.n):
        text = gen_spec(a.seed, i)
        if a.out:
            os.makedirs(a.out, exist_ok=True)
            with open(os.path.join(a.out, f"g_{a.seed}_{i}.sched"), "w") as f:
                f.write(text)
        else:
            print(text)


if __name__ == "__main__":
    main()
