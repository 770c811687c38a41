"""PyTorch Execution Trace (Chakra host trace) -> what each operator reads and writes.

An Execution Trace lists every operator with its schema and tensor arguments. A tensor is
written `[tensor_id, storage_id, offset, numel, itemsize, device]`; the storage is the memory
and `offset`/`numel` (times `itemsize`) its byte range. The schema says which arguments an
operator mutates: `Tensor(a!)` is written, a plain `Tensor` is read, a returned fresh `Tensor`
is written, and a returned alias `Tensor(a)` (a view) is neither.

Both layouts are read: schema `1.0.1` (flat `inputs`/`input_types`/...) and the Chakra
layouts (`inputs: {values, shapes, types[, strides]}` with `attrs`).

Operators are found by `rf_id`, which the Kineto trace of the same run carries as the
`Record function id` (or `External id`) of its `cpu_op` events.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from checker.errors import TraceError
from checker.parse import MAX_LITERAL
from checker.spec_text import comment_text

MAX_BYTE = MAX_LITERAL
"""The furthest byte a tensor may reach: a spec's sizes and byte ranges are at most 2^62
(SP020), so a tensor beyond it cannot be written as a buffer. A real one is far smaller
(2^62 bytes is 4 EiB): an ET offset, numel, itemsize or stride that reaches past it is
corrupt, and the Execution Trace is refused rather than turned into a spec that does not load."""

NO_DATA = frozenset({
    "aten::empty", "aten::empty_like", "aten::empty_strided", "aten::new_empty",
    "aten::new_empty_strided", "aten::resize_", "aten::set_", "aten::record_stream",
    "aten::as_strided_", "aten::detach_",
})
"""Operators whose schema says they mutate or produce a tensor but that touch no data."""

WRITES_ITS_OUTPUTS = frozenset({"record_param_comms"})
"""Operators without a schema whose outputs are written even when they are also inputs: the
record PyTorch keeps around every collective (`RECORD_PARAM_COMMS_DATA`: inputs are the input
tensors, outputs the output tensors), so an in-place allreduce writes its buffer."""


@dataclass(frozen=True, slots=True)
class TensorAccess:
    storage: int
    device: int | None
    """CUDA device index; None for host memory."""
    start: int
    end: int
    """Byte range [start, end) of the storage."""
    write: bool


@dataclass(frozen=True, slots=True)
class Operator:
    id: int
    rf_id: int | None
    name: str
    accesses: tuple[TensorAccess, ...]


@dataclass(frozen=True, slots=True)
class ExecutionTrace:
    schema: str
    operators: dict[int, Operator]
    """By rf_id (operators without one are left out: nothing links them to the timeline)."""
    storage_size: dict[tuple[int, int | None], int]
    """(storage, device) -> the highest byte any tensor of it reaches."""
    malformed: tuple[int, str] = (0, "")
    """Tensors left out as malformed: how many, and where the first is (`note`)."""
    unread_schemas: tuple[int, str] = (0, "")
    """Operators whose schema could not be read (their tensor inputs taken as read): how many,
    and the first (`notes`)."""

    def notes(self) -> list[str]:
        """What the importer tells on stderr about what it could not read."""
        out = [] if (left_out := self.note()) is None else [left_out]
        count, first = self.unread_schemas
        if count:
            out.append(f"{count:,} operator(s) of the Execution Trace have a schema that cannot be read: their "
                       f"tensor inputs are taken as read (the first one as written for an in-place operator, "
                       f"`aten::add_`) and their outputs as written, so another write through an input is "
                       f"missed; the first is {first}")
        return out

    def note(self) -> str | None:
        """What the importer tells on stderr about the tensors it left out (None: none)."""
        count, first = self.malformed
        if not count:
            return None
        return (f"{count:,} tensor(s) of the Execution Trace are malformed (a storage id, offset, numel or "
                "itemsize that is not a whole number or is negative, a shape with a negative dimension, a "
                f"device that is neither cuda:N nor cpu) and were left out; the first is {first}")

    def operator(self, rf_id, name: str | None = None) -> Operator | None:
        """The operator with this rf_id (and, when given, this name)."""
        op = self.operators.get(rf_id) if rf_id is not None else None
        if op is None or (name is not None and op.name != name):
            return None
        return op


def _device(text) -> int | None | bool:
    """`cuda:1` -> 1, `cuda` -> 0, `cpu` -> None; False for anything else."""
    if not isinstance(text, str):
        return False
    if text == "cpu":
        return None
    if text.startswith("cuda"):
        _, _, index = text.partition(":")
        return int(index) if index.isascii() and index.isdigit() else 0
    return False


def _split_top(text: str) -> list[str]:
    """Split on commas that are not inside brackets or quotes."""
    parts, depth, quote, current = [], 0, None, []
    for ch in text:
        if quote:
            current.append(ch)
            if ch == quote:
                quote = None
            continue
        if ch in "\"'":
            quote = ch
        elif ch in "([{<":
            depth += 1
        elif ch in ")]}>":
            depth = max(0, depth - 1)
        elif ch == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
            continue
        current.append(ch)
    tail = "".join(current).strip()
    if tail:
        parts.append(tail)
    return parts


@functools.lru_cache(maxsize=4096)
def _arguments(schema: str) -> tuple[tuple[str, ...], str] | None:
    """A schema's arguments (without the `*` that starts the keyword-only ones) and what follows
    them (`-> ...`); None when the schema cannot be read. Cached: `parse_schema` and
    `viewed_arguments` both read each operator's, and a trace repeats a few hundred schemas."""
    open_at = schema.find("(")
    if open_at < 0:
        return None
    depth = 0
    close_at = -1
    for i in range(open_at, len(schema)):
        if schema[i] == "(":
            depth += 1
        elif schema[i] == ")":
            depth -= 1
            if depth == 0:
                close_at = i
                break
    if close_at < 0:
        return None
    return tuple(a for a in _split_top(schema[open_at + 1:close_at]) if a != "*"), schema[close_at + 1:].strip()


def parse_schema(schema: str) -> tuple[list[bool], list[bool | None]] | None:
    """Which arguments an operator writes, and what each return is.

    Returns (argument written?, return written?) where a return is True for a fresh tensor
    or a mutated alias, False for a view (`Tensor(a)`) and None for a non-tensor; None when
    the schema cannot be read.
    """
    found = _arguments(schema)
    if found is None:
        return None
    args, rest = found
    written = ["!" in a.split("=", 1)[0] for a in args]
    returns: list[bool | None] = []
    if rest.startswith("->"):
        ret = rest[2:].strip()
        if ret.startswith("(") and ret.endswith(")"):
            ret = ret[1:-1]
        for item in _split_top(ret):
            kind = item.split()[0] if item.split() else ""
            if not kind.startswith("Tensor"):
                returns.append(None)
            elif "(" in kind and "!" not in kind:
                returns.append(False)  # an alias of an argument: a view
            else:
                returns.append(True)
    return written, returns


def viewed_arguments(schema: str) -> list[bool]:
    """Which arguments an operator only makes a view of: typed as an alias that is not written
    (`Tensor(a) self`, `Tensor(a -> *) self`), as `aten::view`, `aten::transpose` or
    `aten::split` take them. Such an argument's data is neither read nor written (a view
    operator that has to copy, as `aten::reshape` may, does it through an operator of its own,
    `aten::clone`, which reads); [] when the schema cannot be read."""
    found = _arguments(schema)
    out = []
    for argument in found[0] if found is not None else ():
        kind = argument.split("=", 1)[0].split()[0] if argument.split() else ""
        out.append(kind.startswith("Tensor(") and "!" not in kind)
    return out


def _tensors(value, type_name: str, shape, stride):
    """(tensor tuple, shape, stride) for every tensor in one argument (lists included)."""
    if not isinstance(type_name, str):
        return
    if type_name.startswith("Tensor"):
        if isinstance(value, list) and len(value) >= 6:
            yield value, shape, stride
        return
    if type_name.startswith("GenericList[") and isinstance(value, list):
        inner = _split_top(type_name[len("GenericList["):-1])
        if len(inner) == 1 and len(value) > 1:
            inner = inner * len(value)
        shapes = shape if isinstance(shape, list) else []
        strides = stride if isinstance(stride, list) else []
        for i, (item, kind) in enumerate(zip(value, inner)):
            yield from _tensors(item, kind, shapes[i] if i < len(shapes) else None,
                                strides[i] if i < len(strides) else None)


def _shown(value: int) -> str:
    """An integer for a one-line message: as it is, or its digit count when it is long."""
    text = str(value)
    return text if len(text) <= 24 else f"a {len(text.lstrip('-'))}-digit number"


class _OutOfRange(Exception):
    """A tensor whose bytes reach past `MAX_BYTE`; the message names the fields that do."""


class _Malformed(Exception):
    """A tensor whose fields are malformed: it is left out, and counted."""


def _whole(value) -> int:
    """A field that must be a whole number (written as an integer or as a float without a
    fraction); `_Malformed` otherwise (2.5 elements is no tensor: not read as 2)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    raise _Malformed


def _byte_range(tensor: list, shape, stride) -> tuple[int, int] | None:
    """The bytes a tensor covers in its storage (strided extent when strides are known);
    None for an empty tensor; `_Malformed` for one whose fields are malformed (it is left out);
    `_OutOfRange` for one that reaches past `MAX_BYTE`."""
    offset, numel, itemsize = _whole(tensor[2]), _whole(tensor[3]), _whole(tensor[4])
    if numel < 0 or itemsize <= 0 or offset < 0:
        raise _Malformed
    if numel == 0:
        return None
    times = f" x itemsize {_shown(itemsize)}" if itemsize > 1 else ""
    if itemsize > MAX_BYTE:
        raise _OutOfRange(f"itemsize {_shown(itemsize)}")
    if offset * itemsize > MAX_BYTE:
        raise _OutOfRange(f"offset {_shown(offset)}{times}")
    if numel * itemsize > MAX_BYTE:
        raise _OutOfRange(f"numel {_shown(numel)}{times}")
    extent = numel
    if (isinstance(shape, list) and isinstance(stride, list) and len(shape) == len(stride)
            and all(isinstance(x, int) and not isinstance(x, bool) for x in shape + stride)):
        if any(x < 0 for x in shape):  # (corrupt)
            raise _Malformed
        if 0 in shape:  # (empty)
            return None
        extent = 1
        for n, s in zip(shape, stride):  # (stopping early: a shape of a million huge strides)
            extent += (n - 1) * abs(s)
            if extent * itemsize > MAX_BYTE:
                raise _OutOfRange(f"strides {_shown(max(stride, key=abs))} (shape {_shown(max(shape))}){times}")
    start, end = offset * itemsize, (offset + extent) * itemsize
    if end > MAX_BYTE:
        raise _OutOfRange(f"offset {_shown(offset)} + extent {_shown(extent)} elements{times}")
    return start, end


def _accesses(name: str, schema: str, inputs, outputs, malformed: list[str]) -> tuple[TensorAccess, ...]:
    """Reads and writes of one operator from its schema and tensor arguments; where each
    malformed tensor left out was goes to `malformed`."""
    if name in NO_DATA or name.startswith("aten::empty"):
        return ()
    parsed = parse_schema(schema) if schema else None
    found: dict[tuple[int, int | None, int, int], bool] = {}
    seen_inputs: set[int] = set()

    def add(tensor, shape, stride, write: bool, where: str) -> None:
        shown = f"{where}, tensor {_shown(tensor[0]) if isinstance(tensor[0], int) else '?'}"
        device = _device(tensor[5])
        storage = tensor[1]
        # (a negative id would name no buffer a spec can declare: `s-5`)
        if device is False or not isinstance(storage, int) or isinstance(storage, bool) or storage < 0:
            malformed.append(shown)
            return
        try:
            span = _byte_range(tensor, shape, stride)
        except _Malformed:
            malformed.append(shown)
            return
        except _OutOfRange as exc:
            raise TraceError(f"{shown}: {exc} puts its bytes past 2^62, the most a "
                             "spec's buffer can hold: the Execution Trace is corrupt (import without --et "
                             "to leave it out)") from None
        if span is None:
            return
        key = (tensor[1], device, span[0], span[1])
        found[key] = found.get(key, False) or write

    viewed = viewed_arguments(schema) if parsed else []
    values, types, shapes, strides = inputs
    for i, (value, kind) in enumerate(zip(values, types)):
        if i < len(viewed) and viewed[i]:
            continue  # (a view of it: its data is not touched)
        # (without a schema, an in-place operator, `aten::add_`, writes its first argument)
        write = bool(parsed and i < len(parsed[0]) and parsed[0][i]) or (parsed is None and i == 0 and _in_place(name))
        for tensor, shape, stride in _tensors(value, kind, shapes[i] if i < len(shapes) else None,
                                              strides[i] if strides and i < len(strides) else None):
            seen_inputs.add(tensor[0] if isinstance(tensor[0], int) else -1)
            add(tensor, shape, stride, write, f"input {i}")
    values, types, shapes, strides = outputs
    for i, (value, kind) in enumerate(zip(values, types)):
        if parsed is not None and parsed[1]:
            fresh = parsed[1][i] if i < len(parsed[1]) else True
            if not fresh:
                continue
        for tensor, shape, stride in _tensors(value, kind, shapes[i] if i < len(shapes) else None,
                                              strides[i] if strides and i < len(strides) else None):
            if parsed is None and tensor[0] in seen_inputs and name not in WRITES_ITS_OUTPUTS:
                continue  # without a schema, an output that is an input is no new write
            add(tensor, shape, stride, True, f"output {i}")
    return tuple(TensorAccess(s, d, a, b, w) for (s, d, a, b), w in found.items())


def _in_place(name: str) -> bool:
    """PyTorch's naming of an operator that mutates its first argument (`aten::fill_`,
    `aten::add_`; not the dunder methods)."""
    base = name.rsplit("::", 1)[-1].split(".", 1)[0]
    return base.endswith("_") and not base.endswith("__") and len(base) > 1


def _attrs(node: dict) -> dict:
    out = {}
    for attr in node.get("attrs") or ():
        if isinstance(attr, dict) and "name" in attr:
            out[attr["name"]] = attr.get("value")
    return out


def _io(node: dict, side: str):
    """(values, types, shapes, strides) of `inputs` or `outputs` in either layout (a field
    that is not a list, in a corrupt trace, as an empty one)."""
    item = node.get(side)
    if isinstance(item, dict):
        parts = (item.get("values"), item.get("types"), item.get("shapes"), item.get("strides"))
    else:
        singular = side[:-1]
        parts = (item, node.get(f"{singular}_types"), node.get(f"{singular}_shapes"),
                 node.get(f"{singular}_strides"))
    return tuple(part if isinstance(part, list) else [] for part in parts)


def read_execution_trace(data) -> ExecutionTrace:
    """Operators (by rf_id) with their accesses; raises TraceError on a non-ET document."""
    if not isinstance(data, dict) or not isinstance(data.get("nodes"), list):
        raise TraceError("not a PyTorch Execution Trace (expected an object with a `nodes` list)")
    schema = str(data.get("schema", ""))
    operators: dict[int, Operator] = {}
    sizes: dict[tuple[int, int | None], int] = {}
    left_out: list[str] = []
    first_left_out = ""
    unread, unread_first = 0, ""
    for node in data["nodes"]:
        if not isinstance(node, dict):
            continue
        attrs = _attrs(node)
        rf_id = node.get("rf_id", attrs.get("rf_id"))
        name = node.get("name")
        if not isinstance(name, str) or not isinstance(rf_id, int):
            continue
        op_schema = node.get("op_schema", attrs.get("op_schema")) or ""
        node_id = node.get("id")
        if isinstance(op_schema, str) and op_schema and _arguments(op_schema) is None \
                and name not in NO_DATA and not name.startswith("aten::empty"):
            if not unread:
                unread_first = f"node {_shown(node_id) if isinstance(node_id, int) else '?'} ({comment_text(name)[:80]})"
            unread += 1
        malformed: list[str] = []
        try:
            accesses = _accesses(name, op_schema if isinstance(op_schema, str) else "",
                                 _io(node, "inputs"), _io(node, "outputs"), malformed)
        except TraceError as exc:  # a field past what a spec can hold: say which node
            shown_id = _shown(node_id) if isinstance(node_id, int) else "?"
            raise TraceError(f"node {shown_id} ({comment_text(name)[:80]}, rf_id {_shown(rf_id)}), {exc}") from None
        except (TypeError, ValueError, AttributeError, IndexError, KeyError):
            accesses = ()  # a node whose tensors are malformed: its operator touches nothing known
            malformed = malformed or ["its tensors"]
        if malformed:
            if not left_out:
                shown_id = _shown(node_id) if isinstance(node_id, int) else "?"
                first_left_out = f"node {shown_id} ({comment_text(name)[:80]}, rf_id {_shown(rf_id)}), {malformed[0]}"
            left_out.extend(malformed)
        for a in accesses:
            key = (a.storage, a.device)
            if sizes.get(key, 0) < a.end:
                sizes[key] = a.end
        operators[rf_id] = Operator(node_id if isinstance(node_id, int) else -1, rf_id, name, accesses)
    return ExecutionTrace(schema, operators, sizes, (len(left_out), first_left_out), (unread, unread_first))
