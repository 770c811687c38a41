"""What a command line names, and the defaults a project sets.

* `expand(names)`: files as given, directories as every `*.sched` below them (sorted; hidden
  files and directories, and links to directories, skipped), and `-` as standard input; a
  name that matches nothing, and a directory that cannot be read, is kept so that loading it
  reports SP001. Names are shown as `shown`
  writes them (`Source.file` keeps the name of the file, which the loaded file carries on).
* `load(source)`: one source through the front end (`checker.frontend`).
* `find_config(start)` / `read_config(path)`: the `[tool.streamproof]` table of the nearest
  `pyproject.toml` that has one, from `start` upwards.
"""

from __future__ import annotations

import io
import os
import re
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from checker.errors import InputError

STDIN = "-"
STDIN_PATH = "<stdin>"
SUFFIX = ".sched"


@dataclass(frozen=True, slots=True)
class Source:
    """One spec to load: a path, or bytes already read (standard input)."""

    path: str
    """The name reports show."""
    data: bytes | None = None
    """The bytes of standard input; None to read `path`."""
    problem: str | None = None
    """Why nothing can be loaded (a directory without specs); reported as SP001."""
    file: str | None = None
    """The file to read when its name is shown otherwise (`shown`); None to read `path`."""
    help: str | None = None
    """What to do about `problem` (default: pass specs)."""


def shown(path: str) -> str:
    """A file name as every report writes it: each byte that is not UTF-8 (which the file
    system encoding keeps as a lone surrogate, which no UTF-8 output can hold) as `\\xff`,
    and each control or format character (an escape sequence, a bidi override, a newline) as
    a space, as code frames show the source: printing a name cannot drive the terminal."""
    from checker.report.frames import printable

    path = os.fspath(path)
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        try:
            path = os.fsencode(path).decode("utf-8", "backslashreplace")
        except UnicodeEncodeError:  # a surrogate the file system encoding did not make
            path = path.encode("utf-8", "backslashreplace").decode("utf-8")
    return printable(path)


def _source(path: str, **fields) -> Source:
    path = os.fspath(path)
    name = shown(path)
    if name == path:
        return Source(path, **fields)
    return Source(name, file=path, **fields)


def _specs_under(directory: str) -> list[tuple[str, OSError | None]]:
    """The specs below a directory in path order, and, in their place in that order, each
    directory that cannot be read (with its error): the walk would leave them out silently."""
    found: list[tuple[tuple[str, ...], str, OSError | None]] = []

    def unreadable(exc: OSError) -> None:
        place = exc.filename if isinstance(exc.filename, str) else directory
        try:
            relative = Path(place).relative_to(directory).parts
        except ValueError:
            relative = ()
        found.append((relative, place, exc))

    for root, dirs, files in os.walk(directory, onerror=unreadable):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        relative = Path(root).relative_to(directory).parts
        for name in files:
            if name.endswith(SUFFIX) and not name.startswith("."):
                found.append((relative + (name,), os.path.join(root, name), None))
    return [(path, exc) for _, path, exc in sorted(found, key=lambda item: item[:2])]


def _special(path: str) -> bool:
    """A named pipe, device or socket (following links), not a file or a missing path."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def expand(names: Iterable[str], stdin=None, stdin_name: str | None = None) -> list[Source]:
    """Sources in command-line order; a directory contributes its specs in path order.

    A file named twice (directly or through a directory) is checked once, where it first
    appears. `stdin` is a binary file to read for `-` (default: the process's standard input),
    `stdin_name` the name its spec is shown by (default `<stdin>`).
    """
    sources: list[Source] = []
    seen: set[str] = set()
    read_stdin = False

    def add(path: str) -> None:
        key = os.path.realpath(path) if os.path.exists(path) else path
        if key not in seen:
            seen.add(key)
            sources.append(_source(path))

    for name in names:
        if name == STDIN:
            if read_stdin:
                raise InputError("`-` (standard input) can be named only once")
            read_stdin = True
            stream = stdin if stdin is not None else sys.stdin.buffer
            from checker.parse import MAX_SOURCE_CHARS

            sources.append(Source(stdin_name or STDIN_PATH, stream.read(MAX_SOURCE_CHARS + 1)))
        elif os.path.isdir(name):
            specs = _specs_under(name)
            if not specs:
                sources.append(_source(name, problem=f"no {SUFFIX} files in directory {shown(name)}"))
            for path, exc in specs:
                if exc is not None:
                    sources.append(_source(path, problem=f"cannot read directory {shown(path)}: "
                                                         f"{exc.strerror or 'cannot be read'}",
                                           help="its specs, if any, are not checked: make it readable, "
                                                "or name the specs to check"))
                elif _special(path):  # opening a named pipe would wait for a writer forever
                    sources.append(_source(path, problem=f"{shown(path)} is not a regular file (a named pipe, "
                                                         "device or socket in a directory is not read)"))
                else:
                    add(path)
        else:
            add(name)
    return sources


def load(source: Source, max_statements: int | None = None):
    """The `Loaded` front-end result of one source."""
    from checker.codes import Code
    from checker.diagnostics import error
    from checker.frontend import Loaded, load_bytes, load_file
    from checker.lower import DEFAULT_MAX_STATEMENTS

    limit = DEFAULT_MAX_STATEMENTS if max_statements is None else max_statements
    if source.problem is not None:
        return Loaded(source.path, "", None, (error(Code.SP001, source.problem, None,
                                                    help=source.help or "pass .sched files, or a directory "
                                                                        "that holds some"),))
    if source.data is not None:
        return load_bytes(source.data, source.path, limit)
    if source.file is not None:  # read the file, report it by its shown name
        return load_file(source.file, limit, shown=source.path)
    return load_file(source.path, limit)


# -- configuration ------------------------------------------------------------------------


def _toml():
    try:
        import tomllib  # Python >= 3.11
    except ModuleNotFoundError:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    return tomllib


class ConfigError(InputError):
    """A `[tool.streamproof]` setting that cannot be used, with its place in the file (1-based
    line and column, and the length to underline) when it can be found."""

    def __init__(self, path: Path, message: str, where: tuple[int, int, int] | None = None,
                 help: str = "") -> None:
        super().__init__(f"{path}: {message}")
        self.path, self.message, self.where, self.help = path, message, where, help


_HEADER = re.compile(r"\s*\[\s*([^\[\]]+?)\s*\]\s*(#.*)?$")


def _table_name(text: str) -> str:
    return ".".join(part.strip().strip('"').strip("'") for part in text.split("."))


def locate_setting(path: Path, table: str, key: str | None = None) -> tuple[int, int, int] | None:
    """Where `key` of `[table]` (or the table's header, without a key) is written in a TOML file:
    (line, column, length of the value or header). A key may also be written as a table of its
    own (`[table.key]`), and a table as a key of its parent (`key = { ... }`) or as an array of
    tables (`[[table]]`). None when it is written some other way (a dotted key)."""
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    found = _locate(lines, table, key)
    if found is None and key is not None:
        found = _locate(lines, f"{table}.{key}", None)
    if found is None and "." in table:
        parent, _, last = table.rpartition(".")
        found = _locate(lines, parent, last)
        if found is not None and key is not None:  # `last = { key = value }`: the key within it
            number, column, length = found
            text = lines[number - 1][column - 1:column - 1 + length]
            setting = re.search(r"[{,]\s*([\"']?)" + re.escape(key) + r"\1\s*=\s*", text)
            if setting is not None:
                value = re.match(r"[^,}]*", text[setting.end():]).group(0).rstrip() or " "
                found = number, column + setting.end(), len(value)
    return found


def locate_key(path: Path, table: str, key: str) -> tuple[int, int, int] | None:
    """Where the name of `key` of `[table]` is written (line, column, length): an unknown key
    is at fault, not its value. Where `locate_setting` finds the setting some other way, there."""
    found = locate_setting(path, table, key)
    if found is None:
        return None
    try:
        line = path.read_text(encoding="utf-8", errors="replace").splitlines()[found[0] - 1]
    except (OSError, IndexError):
        return found
    name = re.match(r"\s*([\"']?)" + re.escape(key) + r"\1(?=\s*[=.])", line)
    if name is None:
        return found
    start = len(line) - len(line.lstrip())
    return found[0], start + 1, name.end() - start


def _locate(lines: list[str], table: str, key: str | None) -> tuple[int, int, int] | None:
    current = None
    for number, line in enumerate(lines, 1):
        if line.lstrip().startswith("[["):  # an array of tables: ours only as a header
            current = None
            name = line.strip()[2:].split("]]")[0]
            if key is None and _table_name(name) == table:
                start = line.index("[")
                return number, start + 1, len(line.rstrip()) - start
            continue
        header = _HEADER.match(line)
        if header is not None:
            current = _table_name(header.group(1))
            if key is None and current == table:
                start = line.index("[")
                return number, start + 1, len(line.rstrip()) - start
            continue
        if current != table or key is None:
            continue
        setting = re.match(r"\s*([\"']?)" + re.escape(key) + r"\1\s*=\s*", line)
        if setting is not None:
            value = line[setting.end():].split(" #")[0].rstrip() or " "
            return number, setting.end() + 1, len(value)
        dotted = re.match(r"\s*([\"']?)" + re.escape(key) + r"\1\s*\.", line)
        if dotted is not None:  # `key.option = value`: the key's table, written as a dotted key
            start = len(line) - len(line.lstrip())
            return number, start + 1, len(line.split("=")[0].rstrip()) - start
    return None


def _deepest(text: str) -> tuple[int, tuple[int, int, int] | None]:
    """How deep arrays and inline tables nest in a TOML text, at most, and where the outermost
    bracket of the deepest value is (line, column, 1); strings and comments are skipped."""
    depth = deepest = 0
    opened = best = None
    at, end = 0, len(text)
    while at < end:
        char = text[at]
        if char == "#":
            at = text.find("\n", at)
            at = end if at < 0 else at
            continue
        if char in "\"'":
            quote = text[at:at + 3] if text.startswith(char * 3, at) else char
            at += len(quote)
            while at < end and not text.startswith(quote, at):
                if text[at] == "\n" and len(quote) == 1:
                    break  # (not valid TOML, which the parser said already)
                at += 2 if text[at] == "\\" and char == '"' else 1
            at += len(quote)
            continue
        if char in "[{":
            depth += 1
            if depth == 1:
                opened = at
            if depth > deepest:
                deepest, best = depth, opened
        elif char in "]}":
            depth = max(depth - 1, 0)
        at += 1
    if best is None:
        return deepest, None
    line_start = text.rfind("\n", 0, best) + 1
    return deepest, (text.count("\n", 0, best) + 1, best - line_start + 1, 1)


MAX_CONFIG_BYTES = 4 << 20
"""The largest pyproject.toml read for settings."""


def read_config(path: Path) -> dict | None:
    """The `[tool.streamproof]` table of one pyproject.toml (None when it has none)."""
    from checker.resources import read_prefix

    toml = _toml()
    try:
        raw = read_prefix(path, MAX_CONFIG_BYTES)
        if len(raw) > MAX_CONFIG_BYTES:
            raise ConfigError(path, f"larger than {MAX_CONFIG_BYTES >> 20} MiB: not read",
                              help="a pyproject.toml this large is not a project's settings")
        data = toml.loads(raw.decode("utf-8"))
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except (toml.TOMLDecodeError, UnicodeDecodeError) as exc:
        if b"streamproof" not in raw:
            return None  # another tool's broken file: not ours to judge
        text = str(exc)
        at = re.search(r"\s*\(at line (\d+), column (\d+)\)", text)
        where = (int(at.group(1)), int(at.group(2)), 1) if at else None
        if at is None:
            at = re.search(r"\s*\(at end of document\)", text)
            if at is not None:  # just past the last character
                lines = raw.decode("utf-8").split("\n")
                where = (len(lines), len(lines[-1]) + 1, 1)
        if isinstance(exc, UnicodeDecodeError):  # the first byte that is not UTF-8
            line_start = raw.rfind(b"\n", 0, exc.start) + 1
            where = (raw.count(b"\n", 0, exc.start) + 1, len(raw[line_start:exc.start].decode("utf-8", "replace")) + 1, 1)
            text = "a byte that is not UTF-8"
        raise ConfigError(path, f"not valid TOML: {text[:at.start()] if at else text}", where) from None
    except RecursionError:  # valid TOML, but nested deeper than the parser recurses
        if b"streamproof" not in raw:
            return None  # another tool's file: not ours to judge
        depth, where = _deepest(raw.decode("utf-8"))
        raise ConfigError(path, f"a value nested {depth} levels deep (arrays or inline tables within each "
                                "other): deeper than the TOML parser reads", where or (1, 1, 1),
                          help="write the value with fewer levels of nesting") from None
    tool = data.get("tool")
    section = tool.get("streamproof") if isinstance(tool, dict) else None
    if section is None:
        return None
    if not isinstance(section, dict):
        raise ConfigError(path, "[tool.streamproof] must be a table", locate_setting(path, "tool", "streamproof"))
    return section


def find_config(start: Path | None = None) -> tuple[Path | None, dict]:
    """The nearest pyproject.toml with a `[tool.streamproof]` table, from `start` (default the
    working directory) upwards, and that table; (None, {}) when there is none."""
    here = (start or Path.cwd()).resolve()
    for directory in (here, *here.parents):
        candidate = directory / "pyproject.toml"
        if candidate.is_file():
            section = read_config(candidate)
            if section is not None:
                return candidate, section
    return None, {}


def overwrites(output: str, path: str) -> bool:
    """Whether writing `output` would overwrite the input `path` (the same file by its
    device and inode, through links too; or, when the output does not exist yet, the same
    resolved path). Only regular files count: writing to /dev/null or a pipe destroys nothing."""
    try:
        out = os.stat(output)
    except (OSError, ValueError):
        out = None
    if out is not None and not stat.S_ISREG(out.st_mode):
        return False
    try:
        if path == STDIN:
            return out is not None and os.path.samestat(os.fstat(sys.stdin.fileno()), out)
        if out is not None:
            return os.path.samestat(os.stat(path), out)
        return Path(output).resolve() == Path(path).resolve()
    except (OSError, ValueError, RuntimeError, AttributeError, io.UnsupportedOperation):
        return False  # (an input that cannot be read says so when it is read)
