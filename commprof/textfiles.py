"""Reading the files a user names (model configs, sweep files, calibrations, topologies, logs, run folders).

Regular files only, at most a bounded size, and every failure one UsageError naming the file: a FIFO given as a
config would block forever, /dev/zero would fill memory, a 5000-digit number or JSON nested 100,000 deep would
raise from deep inside the parser.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

from commprof.errors import UsageError

CONFIG_BYTES = 16 << 20  # a config.json, a sweep file, a calibration, a topology, meta.json
LOG_BYTES = 512 << 20  # an nccl-tests or NCCL_DEBUG log, a bundle file
RESULTS_BYTES = 4 << 30  # a results.jsonl


def read_text(path: Path | str, what: str, limit: int = CONFIG_BYTES, errors: str = "strict") -> str:
    """The UTF-8 text of a regular file of at most `limit` bytes; UsageError "<what> <path>: <why>" otherwise."""
    return utf8_text(read_bytes(path, what, limit), what, path, errors)


def utf8_text(data: bytes, what: str, path: Path | str, errors: str = "strict") -> str:
    """`data` (read from `path`) as UTF-8 text; UsageError "<what> <path>: not UTF-8 text (byte n)" otherwise."""
    try:
        return data.decode("utf-8", errors=errors)
    except UnicodeDecodeError as exc:
        raise UsageError(f"{what} {path}: not UTF-8 text (byte {exc.start})") from None


def read_bytes(path: Path | str, what: str, limit: int = CONFIG_BYTES) -> bytes:
    """The bytes of a regular file of at most `limit` bytes; UsageError "<what> <path>: <why>" otherwise."""
    with _regular_file(path, what, limit) as (handle, size):
        try:
            data = _read_at_most(handle, size, limit)
        except OSError as exc:
            raise UsageError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    if len(data) > limit:  # grew while being read
        raise UsageError(f"{what} {path}: more than the {limit} bytes a {what} may have")
    return data


def read_blocks(path: Path | str, what: str, limit: int, block: int = 16 << 20) -> Iterator[bytes]:
    """read_bytes's bytes, the same checks and refusals, `block` bytes at a time: a reader that takes a large file
    a block at a time never holds it whole. As _read_at_most, no read asks for more than the file holds and one byte
    (a read reserves what it asks for), then for a MiB at a time where it grew while being read."""
    with _regular_file(path, what, limit) as (handle, size):
        total = 0
        while True:
            try:
                data = handle.read(min(block, size + 1 - total) if total <= size else 1 << 20)
            except OSError as exc:
                raise UsageError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
            if not data:
                return
            total += len(data)
            if total > limit:  # grew while being read
                raise UsageError(f"{what} {path}: more than the {limit} bytes a {what} may have")
            yield data


@contextlib.contextmanager
def _regular_file(path: Path | str, what: str, limit: int) -> Iterator[tuple[Any, int]]:
    """(the open file, its size) of a regular file of at most `limit` bytes; UsageError otherwise."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # opening a FIFO for reading blocks without O_NONBLOCK
    except FileNotFoundError:
        raise UsageError(f"{what} not found: {path}") from None
    except OSError as exc:
        raise UsageError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):  # a folder, a FIFO, a device (os.fdopen refuses a folder itself)
        os.close(fd)
        raise UsageError(f"{what} {path}: not a regular file")
    with os.fdopen(fd, "rb") as handle:
        if info.st_size > limit:
            raise UsageError(f"{what} {path}: {info.st_size} bytes, more than the {limit} a {what} may have")
        yield handle, info.st_size


def _read_at_most(handle: Any, size: int, limit: int) -> bytes:
    """At most `limit` + 1 bytes of `handle`, asking for no more memory than the file holds: its stated `size` + 1
    first (a read of n bytes reserves n up front: 4 GiB reserved for a 26 KB file fails under `ulimit -v`), then
    what it grew by while being read, by read_bounded."""
    data = handle.read(min(size, limit) + 1)
    if len(data) <= size:
        return data
    return data + read_bounded(handle, limit - len(data))


def read_bounded(handle: Any, limit: int) -> bytes:
    """At most `limit` + 1 bytes of a stream of unknown length (a gzip member, a file growing), a MiB at a time:
    memory follows what the stream holds, not the limit."""
    parts, total = [], 0
    while total <= limit:
        part = handle.read(min(1 << 20, limit + 1 - total))
        if not part:
            break
        parts.append(part)
        total += len(part)
    return b"".join(parts)


def parse_json(text: str, where: str) -> Any:
    """JSON from `text`; UsageError "<where>: ..." for bad syntax, numbers beyond Python's digit limit or nesting
    beyond its recursion limit."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{where}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    except (ValueError, RecursionError) as exc:
        raise UsageError(f"{where}: not usable JSON ({first_line(exc)})") from None


def parse_toml(text: str, where: str) -> dict[str, Any]:
    """TOML from `text`; UsageError "<where>: ..." for bad syntax, numbers beyond Python's digit limit or nesting
    beyond its recursion limit."""
    try:
        return tomllib.loads(text.removeprefix("\ufeff"))  # a byte-order mark, as Windows editors save UTF-8
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{where}: not valid TOML ({exc})") from None
    except (ValueError, RecursionError) as exc:
        raise UsageError(f"{where}: not usable TOML ({first_line(exc)})") from None


def read_json(path: Path | str, what: str, limit: int = CONFIG_BYTES) -> Any:
    """read_text then parse_json."""
    return parse_json(read_text(path, what, limit), f"{what} {path}")


def first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0][:300] if lines else type(exc).__name__
