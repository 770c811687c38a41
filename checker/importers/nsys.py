"""NVIDIA Nsight Systems SQLite exports -> the shape of trace `kineto.py` reads.

`nsys profile --trace=cuda,nvtx -o report python train.py`, then
`nsys export --type sqlite -o report.sqlite report.nsys-rep`, writes one table per kind of data
(NVIDIA's "SQLite Export Schema Reference"; tables are created lazily, so any may be missing):

* `StringIds(id, value)`: every name, referred to by id;
* `CUPTI_ACTIVITY_KIND_RUNTIME` / `_DRIVER(start, end, globalTid, correlationId, nameId)`: the
  host's CUDA API calls; `globalTid` packs the process and thread ids (NVIDIA's examples:
  `globalTid / 0x1000000 % 0x1000000` is the pid, `globalTid % 0x1000000` the tid); runtime
  names carry the API version (`cudaLaunchKernel_v7000`);
* `CUPTI_ACTIVITY_KIND_KERNEL` / `_MEMCPY` / `_MEMSET(start, end, deviceId, contextId, streamId,
  correlationId, globalPid, ...)`: the GPU work; a kernel's name is `demangledName` (else
  `shortName`), a copy's direction `copyKind` (CUpti_ActivityMemcpyKind) and its memory
  `srcKind`, `dstKind` (CUpti_ActivityMemoryKind);
* `CUPTI_ACTIVITY_KIND_SYNCHRONIZATION(start, end, deviceId, contextId, streamId, correlationId,
  globalPid, syncType, eventId[, eventSyncId])`: CUPTI's synchronization records, what Kineto's
  `cuda_sync` events are made from (`syncType`: CUpti_ActivitySynchronizationType, named in
  `ENUM_CUPTI_SYNC_TYPE` where the export has it);
* `CUPTI_ACTIVITY_KIND_CUDA_EVENT(correlationId, contextId, streamId, eventId, deviceId,
  globalPid[, eventSyncId])`: each `cudaEventRecord`: its call (by correlation id), its stream;
* `NVTX_EVENTS(start, end, eventType, text, textId, globalTid)`: NVTX ranges;
  `ThreadNames(nameId, globalTid)`: thread names.

`as_kineto` reads these tables (the database opened read-only: nothing is ever written to it)
and writes the Kineto trace that the same program profiled by PyTorch's profiler would give:
calls `cuda_runtime` / `cuda_driver`, work `kernel` / `gpu_memcpy` (named as CUPTI names a copy,
`Memcpy HtoD (Pageable -> Device)`) / `gpu_memset`, synchronization records `cuda_sync` with the
record each event wait or sync binds to (`wait_on_cuda_event_record_corr_id`: the record
`eventSyncId` names, else the latest record of the same event before it by correlation id, as
Kineto binds them), each record's stream as a `cuda_event` entry, NVTX push/pop ranges as
`user_annotation` ranges (the spec's comments). So every rule of the Kineto importer applies
unchanged. Times stay whole nanoseconds: they are taken from the export's first event before
they are written as microseconds. What is left out or malformed is said in notes.
"""

from __future__ import annotations

import bisect
import os
import re
import sqlite3
import time
from collections import defaultdict
from pathlib import Path

from checker.importers.execution_trace import TraceError

MAGIC = b"SQLite format 3\x00"
"""The first 16 bytes of every SQLite database file."""

FLAVOUR = "nsys"
MAX_NS = 1 << 62
"""A time beyond this (about 146 years of nanoseconds) is corrupt."""
INVALID = frozenset({0xFFFFFFFF, -1})
"""CUPTI_SYNCHRONIZATION_INVALID_VALUE (a uint32 -1), as the export writes it."""

COPY_KINDS = {1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA", 8: "DtoD",
              9: "HtoH", 10: "PtoP"}
"""CUpti_ActivityMemcpyKind -> the direction CUPTI (and Kineto) write in a copy's name."""
MEMORY_KINDS = {1: "Pageable", 2: "Pinned", 3: "Device", 4: "Array", 5: "Managed", 6: "Device Static",
                7: "Managed Static"}
"""CUpti_ActivityMemoryKind -> the memory kind written in a copy's name."""
MEMORY_WORDS = (("DEVICE_STATIC", "Device Static"), ("MANAGED_STATIC", "Managed Static"),
                ("PAGEABLE", "Pageable"), ("PINNED", "Pinned"), ("DEVICE", "Device"), ("ARRAY", "Array"),
                ("MANAGED", "Managed"))
SYNC_KINDS = {1: "Event Sync", 2: "Stream Wait Event", 3: "Stream Sync", 4: "Context Sync"}
"""CUpti_ActivitySynchronizationType -> Kineto's `cuda_sync_kind`."""
SYNC_WORDS = (("STREAM_WAIT_EVENT", "Stream Wait Event"), ("EVENT_SYNCHRONIZE", "Event Sync"),
              ("STREAM_SYNCHRONIZE", "Stream Sync"), ("CONTEXT_SYNCHRONIZE", "Context Sync"))
"""The enum names (`ENUM_CUPTI_SYNC_TYPE.name`, CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_...) -> kinds."""
NVTX_PUSH_POP = 59
"""`NVTX_EVENTS.eventType` of a push/pop range (NvtxPushPopRange), where the export has no
ENUM_NSYS_EVENT_TYPE table to say so."""

API_SUFFIX = re.compile(r"(?:_ptsz|_ptds)?_v\d{4,6}$")
"""A runtime call's version suffix (`cudaLaunchKernel_v7000`, `cudaMemcpyAsync_ptsz_v7000`); a
driver call's `_v2` is part of its name (`cuMemcpyHtoD_v2`) and is kept."""

CUDA_TABLES = ("CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_DRIVER", "CUPTI_ACTIVITY_KIND_KERNEL",
               "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")


def is_sqlite(path: str) -> bool:
    """Whether the file at `path` is an SQLite database (by its first 16 bytes). Only a regular
    file is looked at: a pipe's bytes read here would be lost to the reader after (`command.py`
    recognises an export read from a pipe by its bytes)."""
    try:
        if not os.path.isfile(path):
            return False
        with open(path, "rb") as handle:
            return handle.read(len(MAGIC)) == MAGIC
    except (OSError, ValueError):
        return False


MAX_ROWS = 3_000_000
"""Rows read from one table (an export of 200,000 kernels has about half a million in its
largest, the runtime calls; each costs about 400 bytes once read): a view that never ends
(`WITH RECURSIVE`) stops here, not at the machine's memory."""
MAX_SECONDS = 300.0
"""SQLite work one import may take (an export's tables are read in seconds)."""


def _connect(source) -> sqlite3.Connection:
    """A read-only connection: a path is opened with `mode=ro` (as a URI, so no name can be read
    as an option), bytes are loaded into memory."""
    if isinstance(source, (bytes, bytearray)):
        connection = sqlite3.connect(":memory:")
        connection.deserialize(bytes(source))
    else:
        uri = Path(os.path.abspath(os.fspath(source))).as_uri() + "?mode=ro"
        connection = sqlite3.connect(uri, uri=True, timeout=2.0)  # (a lock held longer: an error)
    connection.execute("PRAGMA query_only = ON")
    deadline = time.monotonic() + MAX_SECONDS
    connection.set_progress_handler(lambda: time.monotonic() > deadline, 100_000)  # (true: interrupt)
    connection.text_factory = lambda raw: raw.decode("utf-8", "replace")  # (a corrupt name is not fatal)
    return connection


def as_kineto(source) -> dict:
    """The Kineto-shaped trace of an Nsight Systems SQLite export: `source` is its path, its bytes
    or an open `sqlite3.Connection` (used as it is, and left open). TraceError (one line) when
    it cannot be read or is not such an export."""
    if isinstance(source, sqlite3.Connection):
        return _Reader(source).convert()
    try:
        connection = _connect(source)
    except (sqlite3.Error, ValueError, OverflowError) as exc:
        raise TraceError(f"not a readable SQLite database ({_said(exc)})") from None
    try:
        return _Reader(connection).convert()
    finally:
        connection.close()


def _said(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _int(value) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def _pid(global_id) -> int | None:
    value = _int(global_id)
    return None if value is None or value < 0 else (value >> 24) & 0xFFFFFF


def _tid(global_tid) -> int | None:
    value = _int(global_tid)
    return None if value is None or value < 0 else value & 0xFFFFFF


class _Reader:
    """One export's tables, read into one Kineto trace (`convert`)."""

    def __init__(self, connection: sqlite3.Connection) -> None:
        self.db = connection
        self.notes: list[str] = []
        self.bad: dict[str, list] = {}
        """Per kind of malformed row: [count, the first one's table]."""
        try:
            found = connection.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')").fetchall()
        except sqlite3.Error as exc:
            raise TraceError(f"not a readable SQLite database ({_said(exc)})") from None
        self.tables = {str(name) for (name,) in found}

    # -- reading

    def rows(self, table: str, columns: tuple[str, ...]) -> list[dict]:
        """The rows of `table`, the columns of `columns` it has (the others absent); none for a
        table the export does not have."""
        if table not in self.tables:
            return []
        try:
            have = {str(row[1]) for row in self.db.execute(f'PRAGMA table_info("{table}")')}
            wanted = [c for c in columns if c in have]
            if not wanted:
                return []
            query = "SELECT " + ", ".join(f'"{c}"' for c in wanted) + f' FROM "{table}" LIMIT {MAX_ROWS + 1}'
            rows = [dict(zip(wanted, row)) for row in self.db.execute(query)]
        except sqlite3.OperationalError as exc:
            if "interrupt" in str(exc):
                raise TraceError(f"reading table {table} took past {MAX_SECONDS:g} s: not an export "
                                 "streamproof can read (a view that never ends?)") from None
            raise TraceError(f"cannot read table {table} ({_said(exc)})") from None
        except sqlite3.Error as exc:
            raise TraceError(f"cannot read table {table} ({_said(exc)})") from None
        if len(rows) > MAX_ROWS:
            raise TraceError(f"table {table} has more than {MAX_ROWS:,} rows: import a shorter profiling window")
        return rows

    def flag(self, kind: str, table: str) -> None:
        seen = self.bad.setdefault(kind, [0, table])
        seen[0] += 1

    def span(self, row: dict, table: str) -> tuple[int, int] | None:
        """A row's start and end in ns (None: no readable start, counted); an end that is
        missing or before its start is read as the start, counted."""
        start = _int(row.get("start"))
        if start is None or not 0 <= start <= MAX_NS:
            self.flag("start", table)
            return None
        end = _int(row.get("end"))
        if end is None or not start <= end <= MAX_NS:
            self.flag("end", table)
            end = start
        return start, end

    def convert(self) -> dict:
        if not self.tables & set(CUDA_TABLES):
            if "StringIds" in self.tables or any(t.startswith(("TARGET_INFO_", "NVTX_")) for t in self.tables):
                raise TraceError("the Nsight Systems export has no CUDA activity (no CUPTI_ACTIVITY_KIND_RUNTIME "
                                 "or _KERNEL table): profile with `nsys profile --trace=cuda`")
            raise TraceError("an SQLite database that is not an Nsight Systems export (no CUPTI_ACTIVITY_KIND_* "
                             "tables)")
        self.strings = {}
        for row in self.rows("StringIds", ("id", "value")):
            key = _int(row.get("id"))
            if key is not None and row.get("value") is not None:
                self.strings[key] = str(row["value"])
        self.contexts: dict[int, int] = {}
        """contextId -> deviceId, for the records that name no device."""
        for row in self.rows("TARGET_INFO_CUDA_CONTEXT_INFO", ("contextId", "deviceId")):
            context, device = _int(row.get("contextId")), _int(row.get("deviceId"))
            if context is not None and device is not None and device >= 0:
                self.contexts.setdefault(context, device)
        calls = self.read_calls()
        gpu = self.read_gpu()
        calls = self.check_processes(calls, gpu)
        events = self.read_records()
        syncs = self.read_syncs(events)
        ranges = self.read_ranges()
        starts = [c[0] for c in calls] + [g[0] for g in gpu] + [s[0] for s in syncs] + [r[0] for r in ranges]
        origin = min(starts, default=0)
        record_call = {c[5]["correlation"]: c for c in calls if c[5].get("correlation") is not None}
        out: list[dict] = []

        def us(ns: int) -> float:
            return (ns - origin) / 1000

        for start, end, name, cat, where, args in calls + gpu + syncs + ranges:
            out.append({"ph": "X", "cat": cat, "name": name, "pid": where[0], "tid": where[1], "ts": us(start),
                        "dur": (end - start) / 1000, "args": args})
        for correlation, (device, stream) in events.streams.items():
            call = record_call.get(correlation)
            out.append({"ph": "X", "cat": "cuda_event", "name": "cudaEventRecord", "pid": device, "tid": stream,
                        "ts": us(call[0]) if call is not None else 0.0, "dur": 0,
                        "args": {"correlation": correlation, "stream": stream, "device": device}})
        for row in self.rows("ThreadNames", ("nameId", "globalTid")):
            pid, tid, name = _pid(row.get("globalTid")), _tid(row.get("globalTid")), _int(row.get("nameId"))
            if pid is not None and name in self.strings:
                out.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                            "args": {"name": self.strings[name]}})
        notes = list(self.notes)
        for kind, (count, table) in self.bad.items():
            notes.append(f"{count:,} row(s) {BAD[kind]}; the first is in {table}")
        return {"traceEvents": out, "streamproofFlavour": FLAVOUR, "streamproofNotes": notes}

    def name(self, value, table: str) -> str | None:
        key = _int(value)
        if key is None or key not in self.strings:
            return None
        return self.strings[key]

    def read_calls(self) -> list[tuple]:
        """The runtime and driver calls: (start, end, name, cat, (pid, tid), args)."""
        out = []
        runtime_ids: dict[tuple, tuple[int, int]] = {}
        for table, cat in (("CUPTI_ACTIVITY_KIND_RUNTIME", "cuda_runtime"), ("CUPTI_ACTIVITY_KIND_DRIVER", "cuda_driver")):
            nested = 0
            for row in self.rows(table, ("start", "end", "globalTid", "correlationId", "nameId")):
                span = self.span(row, table)
                if span is None:
                    continue
                pid, tid = _pid(row.get("globalTid")), _tid(row.get("globalTid"))
                if pid is None:
                    self.flag("thread", table)
                    continue
                name = self.name(row.get("nameId"), table)
                if name is None:
                    self.flag("name", table)
                    name = "cudaUnknownCall"
                correlation = _int(row.get("correlationId"))
                correlation = correlation if correlation is not None and correlation > 0 else None
                if cat == "cuda_runtime":
                    name = API_SUFFIX.sub("", name)
                    if correlation is not None:
                        runtime_ids[(pid, tid, correlation)] = span
                elif correlation is not None and (outer := runtime_ids.get((pid, tid, correlation))) is not None \
                        and outer[0] <= span[0] and span[1] <= outer[1]:
                    nested += 1  # (the driver call a runtime call made: the runtime call is the one)
                    continue
                args = {"correlation": correlation} if correlation is not None else {}
                out.append((span[0], span[1], name, cat, (pid, tid), args))
            if nested:
                self.notes.append(f"{nested:,} driver call(s) made inside the runtime call of the same correlation id "
                                  "were left out (the runtime call is the program's)")
        return out

    def device_of(self, row: dict) -> int | None:
        device = _int(row.get("deviceId"))
        if device is None:
            device = self.contexts.get(_int(row.get("contextId")))
        return device if device is not None and device >= 0 else None

    def read_gpu(self) -> list[tuple]:
        """Kernels, copies and memsets: (start, end, name, cat, (device, stream), args)."""
        out = []
        self.gpu_pids: set[int] = set()
        common = ("start", "end", "deviceId", "contextId", "streamId", "correlationId", "globalPid")
        copy_names = self.enum_names("ENUM_CUDA_MEMCPY_OPER")
        memory_names = self.enum_names("ENUM_CUDA_MEM_KIND")
        unknown_memory = 0
        for table, cat, extra in (("CUPTI_ACTIVITY_KIND_KERNEL", "kernel", ("demangledName", "shortName", "mangledName")),
                                  ("CUPTI_ACTIVITY_KIND_MEMCPY", "gpu_memcpy", ("copyKind", "srcKind", "dstKind", "bytes")),
                                  ("CUPTI_ACTIVITY_KIND_MEMSET", "gpu_memset", ("bytes",))):
            for row in self.rows(table, common + extra):
                span = self.span(row, table)
                if span is None:
                    continue
                device, stream = self.device_of(row), _int(row.get("streamId"))
                if device is None or stream is None or stream < 0:
                    self.flag("lane", table)
                    continue
                if cat == "kernel":
                    name = next((n for key in extra if (n := self.name(row.get(key), table)) is not None), None)
                    if name is None:
                        self.flag("name", table)
                        name = "unknown_kernel"
                elif cat == "gpu_memcpy":
                    direction = self.copy_kind(row.get("copyKind"), copy_names)
                    src = self.memory_kind(row.get("srcKind"), memory_names)
                    dst = self.memory_kind(row.get("dstKind"), memory_names)
                    if direction is None:
                        name = "Memcpy Unknown"  # (kineto.py says what it read it as)
                    elif src is None or dst is None:
                        unknown_memory += 1
                        name = f"Memcpy {direction}"
                    else:
                        name = f"Memcpy {direction} ({src} -> {dst})"
                else:
                    name = "Memset (Device)"
                correlation = _int(row.get("correlationId"))
                args = {"device": device, "stream": stream}
                if correlation is not None and correlation > 0:
                    args["correlation"] = correlation
                if (size := _int(row.get("bytes"))) is not None:
                    args["bytes"] = size
                if (pid := _pid(row.get("globalPid"))) is not None:
                    self.gpu_pids.add(pid)
                out.append((span[0], span[1], name, cat, (device, stream), args))
        if unknown_memory:
            self.notes.append(f"{unknown_memory:,} copy(ies) name no host memory kind (srcKind, dstKind): read as the "
                              "Kineto importer reads such a copy (host memory pageable)")
        return out

    def enum_names(self, table: str) -> dict[int, str]:
        out = {}
        for row in self.rows(table, ("id", "name")):
            key = _int(row.get("id"))
            if key is not None and isinstance(row.get("name"), str):
                out[key] = row["name"].upper()
        return out

    @staticmethod
    def copy_kind(value, names: dict[int, str]) -> str | None:
        key = _int(value)
        if key in names:
            word = names[key].rsplit("_", 1)[-1]
            found = next((d for d in COPY_KINDS.values() if d.upper() == word), None)
            if found is not None:
                return found
        return COPY_KINDS.get(key)

    @staticmethod
    def memory_kind(value, names: dict[int, str]) -> str | None:
        key = _int(value)
        if key in names:
            found = next((kind for word, kind in MEMORY_WORDS if word in names[key]), None)
            if found is not None:
                return found
        return MEMORY_KINDS.get(key)

    def check_processes(self, calls: list[tuple], gpu: list[tuple]) -> list[tuple]:
        """One process's trace: CUPTI numbers correlation ids per process, so an export of several
        processes that ran GPU work (ranks profiled together) cannot tie their launches apart. The
        calls of other processes that ran none (a launcher, a data loader touching CUDA) are left
        out, with a note."""
        working = self.gpu_pids or {call[4][0] for call in calls}
        if len(working) > 1:
            shown = ", ".join(str(p) for p in sorted(working)[:8]) + (", ..." if len(working) > 8 else "")
            raise TraceError(f"the export holds {len(working)} processes that used CUDA (pids {shown}): CUPTI numbers "
                             "correlation ids per process, so their launches cannot be told apart; profile each "
                             "process (rank) into its own report (e.g. `nsys profile -o rank%q{RANK} python ...` "
                             "under the launcher) and import each export, or several as ranks")
        if not calls and not gpu:
            raise TraceError("the Nsight Systems export has no CUDA calls or GPU work that could be read")
        kept = [call for call in calls if call[4][0] in working]
        if len(kept) < len(calls):
            others = {call[4][0] for call in calls} - working
            self.notes.append(f"{len(calls) - len(kept):,} CUDA call(s) of {len(others)} other process(es) that ran no "
                              "GPU work were left out (the trace is process " + ", ".join(map(str, working)) + "'s)")
        return kept

    def read_records(self) -> _Records:
        table = "CUPTI_ACTIVITY_KIND_CUDA_EVENT"
        records = _Records(table in self.tables)
        for row in self.rows(table, ("correlationId", "contextId", "streamId", "eventId", "deviceId", "globalPid",
                                     "eventSyncId")):
            correlation, event = _int(row.get("correlationId")), _int(row.get("eventId"))
            stream, device = _int(row.get("streamId")), self.device_of(row)
            if correlation is None or correlation <= 0 or event is None or stream is None or stream < 0 \
                    or stream in INVALID:
                self.flag("record", table)
                continue
            if device is not None:
                records.streams[correlation] = (device, stream)
            records.stream_of[correlation] = stream
            records.by_event[(_int(row.get("contextId")), event)].append(correlation)
            records.by_id[event].append(correlation)
            if (sync_id := _int(row.get("eventSyncId"))) is not None and sync_id > 0:
                records.by_sync_id[sync_id] = correlation
        for found in [*records.by_event.values(), *records.by_id.values()]:
            found.sort()
        return records

    def sync_kinds(self) -> dict[int, str]:
        kinds = dict(SYNC_KINDS)
        for key, name in self.enum_names("ENUM_CUPTI_SYNC_TYPE").items():
            found = next((kind for word, kind in SYNC_WORDS if word in name), None)
            if found is not None:
                kinds[key] = found
            else:
                kinds.pop(key, None)
        return kinds

    def read_syncs(self, records: _Records) -> list[tuple]:
        """CUPTI's synchronization records as Kineto's `cuda_sync` events."""
        table = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
        if table not in self.tables:
            return []  # (kineto.py says the trace has no cuda_sync events)
        kinds = self.sync_kinds()
        out = []
        unbound = 0
        for row in self.rows(table, ("start", "end", "deviceId", "contextId", "streamId", "correlationId", "globalPid",
                                     "syncType", "eventId", "eventSyncId")):
            span = self.span(row, table)
            if span is None:
                continue
            kind = kinds.get(_int(row.get("syncType")))
            if kind is None:
                self.flag("sync_kind", table)
                continue
            correlation, device = _int(row.get("correlationId")), self.device_of(row)
            if correlation is None or correlation <= 0 or device is None:
                self.flag("sync", table)
                continue
            stream = _int(row.get("streamId"))
            stream = -1 if stream is None or stream in INVALID or stream < 0 else stream
            args = {"cuda_sync_kind": kind, "stream": stream, "correlation": correlation, "device": device}
            if kind in ("Event Sync", "Stream Wait Event"):
                event = _int(row.get("eventId"))
                if event is not None and event not in INVALID:
                    args["wait_on_cuda_event_id"] = event
                if records.present:
                    record = records.bind(_int(row.get("contextId")), event, correlation, _int(row.get("eventSyncId")))
                    args["wait_on_cuda_event_record_corr_id"] = -1 if record is None else record
                    args["wait_on_stream"] = -1 if record is None else records.stream_of[record]
                    unbound += record is None
            out.append((span[0], span[1], kind, "cuda_sync", (device, stream), args))
        if not records.present and any(s[2] in ("Event Sync", "Stream Wait Event") for s in out):
            self.notes.append("the export has no CUPTI_ACTIVITY_KIND_CUDA_EVENT table: each event wait or sync binds "
                              "to the latest cudaEventRecord before it (marked assumed)")
        if unbound:
            self.notes.append(f"{unbound:,} event wait(s) or sync(s) name an event no record of which is in the export "
                              "before them (recorded before the profiling window)")
        return out

    def read_ranges(self) -> list[tuple]:
        """NVTX push/pop ranges, as the annotations that become the spec's comments."""
        table = "NVTX_EVENTS"
        if table not in self.tables:
            return []
        kinds = self.enum_names("ENUM_NSYS_EVENT_TYPE")
        push_pop = {key for key, name in kinds.items() if name == "NVTXPUSHPOPRANGE"} or {NVTX_PUSH_POP}
        out = []
        for row in self.rows(table, ("start", "end", "eventType", "text", "textId", "globalTid")):
            if _int(row.get("eventType")) not in push_pop or _int(row.get("end")) is None:
                continue
            span = self.span(row, table)
            pid, tid = _pid(row.get("globalTid")), _tid(row.get("globalTid"))
            if span is None or pid is None:
                continue
            text = row.get("text")
            if not isinstance(text, str):
                text = self.name(row.get("textId"), table)
            if text:
                out.append((span[0], span[1], text, "user_annotation", (pid, tid), {}))
        return out


class _Records:
    """The export's `cudaEventRecord`s (CUPTI_ACTIVITY_KIND_CUDA_EVENT), to bind waits and syncs."""

    def __init__(self, present: bool) -> None:
        self.present = present
        self.streams: dict[int, tuple[int, int]] = {}
        """record's correlation id -> (device, stream)."""
        self.stream_of: dict[int, int] = {}
        self.by_event: dict[tuple, list[int]] = defaultdict(list)
        """(contextId, eventId) -> the correlation ids of its records, in order."""
        self.by_id: dict[int, list[int]] = defaultdict(list)
        """eventId -> the correlation ids of its records, whatever their context (where the
        export names a context on one side only)."""
        self.by_sync_id: dict[int, int] = {}

    def bind(self, context, event, correlation: int, sync_id) -> int | None:
        """The record a wait or sync binds to: the one its `eventSyncId` names (CUPTI 12.8 and
        later), else the latest record of its event made before it (the runtime numbers calls
        in the order they are made, as Kineto binds them)."""
        if sync_id is not None and sync_id in self.by_sync_id:
            return self.by_sync_id[sync_id]
        if event is None or event in INVALID:
            return None
        found = self.by_event.get((context, event)) or self.by_id.get(event)
        if not found:
            return None
        i = bisect.bisect_left(found, correlation)
        return found[i - 1] if i else None


BAD = {
    "start": "have no readable start (a whole number of ns, not negative) and were left out",
    "end": "have no readable end (missing, before the start, or too large) and were read as lasting 0",
    "thread": "of CUDA calls have no readable globalTid and were left out",
    "name": "name a string id that is not in StringIds (read as an unknown name)",
    "lane": "of GPU work name no valid device or stream and were left out",
    "record": "of CUDA event records have no readable correlation id, event or stream and were left out",
    "sync_kind": "of synchronization records have a syncType the importer does not know and were left out (their "
                 "calls are read as in a trace without cuda_sync events)",
    "sync": "of synchronization records have no correlation id or device and were left out",
}
"""What the reader does with each kind of malformed row (a note on stderr says so)."""
