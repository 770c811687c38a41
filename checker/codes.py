"""Stable diagnostic codes. A code never changes meaning; docs/codes.md explains each."""

from __future__ import annotations

import enum


class Severity(str, enum.Enum):
    ERROR = "error"
    WARNING = "warning"


class Code(str, enum.Enum):
    # Input that cannot be read or parsed.
    SP001 = "SP001"
    SP002 = "SP002"
    SP003 = "SP003"
    SP004 = "SP004"
    SP005 = "SP005"
    # Names and declarations.
    SP010 = "SP010"
    SP011 = "SP011"
    SP012 = "SP012"
    SP013 = "SP013"
    SP014 = "SP014"
    SP015 = "SP015"
    SP016 = "SP016"
    SP017 = "SP017"
    SP018 = "SP018"
    SP019 = "SP019"
    SP020 = "SP020"
    SP021 = "SP021"
    SP022 = "SP022"
    SP023 = "SP023"
    SP024 = "SP024"
    SP025 = "SP025"
    SP026 = "SP026"
    SP027 = "SP027"
    SP028 = "SP028"
    SP029 = "SP029"
    SP030 = "SP030"
    SP031 = "SP031"
    SP032 = "SP032"
    # Warnings about a spec that is valid but probably not what was meant.
    SP050 = "SP050"
    SP051 = "SP051"
    SP052 = "SP052"
    SP053 = "SP053"
    SP054 = "SP054"
    SP055 = "SP055"
    SP056 = "SP056"
    SP057 = "SP057"
    SP058 = "SP058"
    SP059 = "SP059"
    SP060 = "SP060"
    SP061 = "SP061"
    SP062 = "SP062"
    SP063 = "SP063"
    SP064 = "SP064"
    SP065 = "SP065"
    SP066 = "SP066"
    SP067 = "SP067"
    SP068 = "SP068"
    SP069 = "SP069"
    SP070 = "SP070"
    SP071 = "SP071"
    SP072 = "SP072"
    SP073 = "SP073"
    SP074 = "SP074"
    SP075 = "SP075"
    # Findings.
    SP101 = "SP101"
    SP102 = "SP102"
    SP103 = "SP103"
    SP201 = "SP201"
    SP202 = "SP202"
    SP301 = "SP301"
    SP401 = "SP401"
    SP402 = "SP402"

    @property
    def summary(self) -> str:
        return SUMMARIES[self]


SUMMARIES: dict[Code, str] = {
    Code.SP001: "input is not readable text",
    Code.SP002: "syntax error",
    Code.SP003: "empty spec",
    Code.SP004: "input too large or too deeply nested",
    Code.SP005: "invalid [tool.streamproof] configuration",
    Code.SP010: "undeclared name",
    Code.SP011: "duplicate declaration",
    Code.SP012: "name of the wrong kind",
    Code.SP013: "index out of range",
    Code.SP014: "byte range outside its buffer",
    Code.SP015: "bad indexing",
    Code.SP016: "copy between two host buffers",
    Code.SP017: "reset of an event that is not a flag",
    Code.SP018: "loop unrolls past the statement limit",
    Code.SP019: "division by zero",
    Code.SP020: "value out of range",
    Code.SP021: "stream outside its comm",
    Code.SP022: "keyword used as a name",
    Code.SP023: "alias cycle",
    Code.SP024: "invalid device declaration",
    Code.SP025: "two comm members on one device (retired: now the warning SP059)",
    Code.SP026: "too many branch combinations",
    Code.SP027: "tensor used outside its allocation",
    Code.SP028: "tensor allocation depends on the thread interleaving",
    Code.SP029: "statement that cannot be captured into a graph",
    Code.SP030: "graph capture not joined, or waiting on work outside it",
    Code.SP031: "graph launched by two threads or on another device",
    Code.SP032: "graph memory that CUDA refuses to free or to allocate again",
    Code.SP050: "event waited on but never recorded",
    Code.SP051: "stream or graph declared but never used",
    Code.SP052: "notify awaited but never notified",
    Code.SP053: "alloc or free of part of a buffer",
    Code.SP054: "one thread calls several ranks of a comm outside a group",
    Code.SP055: "record_stream on the tensor's own allocation stream",
    Code.SP056: "a stream's allocator pool shared by threads",
    Code.SP057: "a send or recv to its own stream",
    Code.SP058: "sync all in a thread that drives one rank",
    Code.SP059: "two comm members on one device",
    Code.SP060: "two legacy streams on one device",
    Code.SP061: "one event recorded on streams of two CUDA devices",
    Code.SP062: "a stream used by a process and by another thread",
    Code.SP063: "a buffer used by two processes",
    Code.SP064: "a free that waits for work only through cudaFree's implicit synchronization",
    Code.SP065: "an allocation whose block depends on several held blocks coming back",
    Code.SP066: "a use of a pageable copy's destination that waits only through the copy's blocking",
    Code.SP067: "an expectation repeated, or contradicted by another",
    Code.SP068: "a stream alloc or free of host memory on a CUDA device",
    Code.SP069: "two comms called in opposite orders by two ranks",
    Code.SP070: "collective buffers whose sizes do not fit the comm",
    Code.SP071: "one rank of a comm called by two threads that nothing orders",
    Code.SP072: "flag event on a CUDA device",
    Code.SP073: "copy between ranges of two sizes, or overlapping ones",
    Code.SP074: "comm across CUDA and CANN devices",
    Code.SP075: "an event used by two processes",
    Code.SP101: "race",
    Code.SP102: "use after free",
    Code.SP103: "use before alloc",
    Code.SP201: "deadlock",
    Code.SP202: "collective mismatch",
    Code.SP301: "unknown",
    Code.SP401: "expectation not met",
    Code.SP402: "internal error: a witness did not replay",
}
