"""What a command line names, and the defaults a project sets.

* `expand(names)`: files as given, directories as every `*.sched` below them (sorted, hidden
  directories skipped), and `-` as standard input; a name that matches nothing is kept so that
  loading it reports SP001.
* `load(source)`: one source through the front end (`checker.frontend`).
* `find_config(start)` / `read_config(path)`: the `[tool.streamproof]` table of the nearest
  `pyproject.toml` that has one, from `start` upwards.
"""

from __future__ import annotations

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


def _specs_under(directory: str) -> list[str]:
    found: list[tuple[tuple[str, ...], str]] = []
    for root, dirs, files in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        relative = Path(root).relative_to(directory).parts
        for name in files:
            if name.endswith(SUFFIX) and not name.startswith("."):
                found.append((relative + (name,), os.path.join(root, name)))
    return [path for _, path in sorted(found)]


def _special(path: str) -> bool:
    """A named pipe, device or socket (following links), not a file or a missing path."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def expand(names: Iterable[str], stdin=None) -> list[Source]:
    """Sources in command-line order; a directory contributes its specs in path order.

    A file named twice (directly or through a directory) is checked once, where it first
    appears. `stdin` is a binary file to read for `-` (default: the process's standard input).
    """
    sources: list[Source] = []
    seen: set[str] = set()
    read_stdin = False

    def add(path: str) -> None:
        key = os.path.realpath(path) if os.path.exists(path) else path
        if key not in seen:
            seen.add(key)
            sources.append(Source(path))

    for name in names:
        if name == STDIN:
            if read_stdin:
                raise InputError("`-` (standard input) can be named only once")
            read_stdin = True
            stream = stdin if stdin is not None else sys.stdin.buffer
            from checker.parse import MAX_SOURCE_CHARS

            sources.append(Source(STDIN_PATH, stream.read(MAX_SOURCE_CHARS + 1)))
        elif os.path.isdir(name):
            specs = _specs_under(name)
            if not specs:
                sources.append(Source(name, problem=f"no {SUFFIX} files in directory {name}"))
            for path in specs:
                if _special(path):  # opening a named pipe would wait for a writer forever
                    sources.append(Source(path, problem=f"{path} is not a regular file (a named pipe, "
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
                                                    help="pass .sched files, or a directory that holds some"),))
    if source.data is not None:
        return load_bytes(source.data, source.path, limit)
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

    def __init__(self, path: Path, message: str, where: tuple[int, int, int] | None = None) -> None:
        super().__init__(f"{path}: {message}")
        self.path, self.message, self.where = path, message, where


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
    if found is None and key is None and "." in table:
        parent, _, last = table.rpartition(".")
        found = _locate(lines, parent, last)
    return found


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
    return None


def read_config(path: Path) -> dict | None:
    """The `[tool.streamproof]` table of one pyproject.toml (None when it has none)."""
    toml = _toml()
    try:
        with open(path, "rb") as file:
            raw = file.read()
        data = toml.loads(raw.decode("utf-8"))
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except (toml.TOMLDecodeError, UnicodeDecodeError) as exc:
        if b"streamproof" not in raw:
            return None  # another tool's broken file: not ours to judge
        text = str(exc)
        at = re.search(r"\s*\(at line (\d+), column (\d+)\)", text)
        where = (int(at.group(1)), int(at.group(2)), 1) if at else None
        if isinstance(exc, UnicodeDecodeError):  # the first byte that is not UTF-8
            line_start = raw.rfind(b"\n", 0, exc.start) + 1
            where = (raw.count(b"\n", 0, exc.start) + 1, len(raw[line_start:exc.start].decode("utf-8", "replace")) + 1, 1)
            text = "a byte that is not UTF-8"
        raise ConfigError(path, f"not valid TOML: {text[:at.start()] if at else text}", where) from None
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
