"""Checks of the files a user writes (sweeps, topologies, calibrations): every problem one line, the same way.

"file: key: problem (allowed: ...)", all of them in one pass, so the file is fixed once; known traps are
warnings in the same form. A file's typed structure declares its fields with the types below (each says what it
wants) and is read by `Problems.read` (msgspec, through commprof.records.validate); the hand readers return the
checked value, or None after recording what is wrong; pass `table.get(name, MISSING)` for a key the file must have.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Annotated, Any, Literal

import msgspec

from commprof.errors import UsageError
from commprof.records.validate import all_problems


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()  # what table.get(name, MISSING) gives for a required key the file leaves out


def allowed(values: Iterable[object]) -> str:
    return f"(allowed: {', '.join(str(v) for v in values)})"


_LARGEST = sys.float_info.max  # TOML allows inf and nan: neither is a measurement, a bandwidth or a time


def integer(low: int, high: int | None = None, missing: str | None = None, most: int | None = None) -> Any:
    """An integer from `low` (to `high`), refused as "0 is below 1 (allowed: an integer >= 1)"; `missing`: what
    "missing (allowed: ...)" says where more than the bounds helps; `most`: a limit no run reaches, refused as
    "9999 is above 1024 (allowed: an integer >= 1)" without being offered."""
    want = f"an integer >= {low}" + ("" if high is None else f" and <= {high}")
    top = high if most is None else most
    return Annotated[int, msgspec.Meta(ge=low, le=top, extra={"want": want, "missing": missing or want})]


def number(low: float | None = None, high: float | None = None, strict: bool = False, most: float | None = None) -> Any:
    """A finite number from `low` (above it when strict) to `high`, refused as "-1 is out of range (allowed: a
    number >= 0)" or "nan is not a finite number (allowed: ...)"; `most`: as integer's."""
    bound = "" if low is None else f" > {low:g}" if strict else f" >= {low:g}"
    if high is not None:
        bound += f" and <= {high:g}" if bound else f" <= {high:g}"
    floor = {"ge": -_LARGEST} if low is None else {"gt": low} if strict else {"ge": low}
    top = high if most is None else most
    return Annotated[
        float, msgspec.Meta(**floor, le=_LARGEST if top is None else top, extra={"want": f"a number{bound}"})
    ]


def choice(values: tuple[str, ...], what: str) -> Any:
    """One of `values`, refused as "'x' is not <what> (allowed: ...)"."""
    return Annotated[Literal[values], msgspec.Meta(extra={"want": ", ".join(values), "what": what})]


def table(kind: Any, want: str = "a table") -> Any:
    """A TOML table (or an array of tables) read as `kind`, refused as "expected a table, got int"."""
    return Annotated[kind, msgspec.Meta(extra={"want": want, "got": "type"})]


String = Annotated[str, msgspec.Meta(extra={"want": "a string"})]
Boolean = Annotated[bool, msgspec.Meta(extra={"want": "true or false"})]


class Problems:
    """Collects "file: key: problem" lines; raise_if_any() turns them into one UsageError, a line each."""

    def __init__(self, source: str):
        self.source = source
        self.errors: list[str] = []
        self.warnings: list[str] = []

    def error(self, key: str, text: str) -> None:
        self.errors.append(f"{self.source}: {key}: {text}" if key else f"{self.source}: {text}")

    def warn(self, key: str, text: str) -> None:
        line = f"{self.source}: {key}: {text}"
        if line not in self.warnings:
            self.warnings.append(line)

    def read(self, value: Any, kind: Any, at: tuple = ()) -> Any:
        """`value` (parsed TOML or JSON; found at key path `at`) as its typed structure `kind`, every problem
        recorded; a field with a problem takes its default."""
        converted, found = all_problems(value, kind, at)
        self.errors += [f"{self.source}: {line}" for line in found]
        return converted

    def raise_if_any(self) -> None:
        if self.errors:
            raise UsageError("\n".join(self.errors))

    # --- readers: the value when it is right, else None (and the problem recorded) -----------------------

    def table(self, value: Any, key: str) -> dict:
        """A TOML table (an absent one, None, is empty)."""
        if value is None or self._missing(value, key, "a table"):
            return {}
        if not isinstance(value, dict):
            self.error(key, f"expected a table, got {type(value).__name__}")
            return {}
        return value

    def unknown_keys(self, table: dict, known: Iterable[str], key: str) -> None:
        known = tuple(known)
        for name in table:
            if name not in known:
                self.error(f"{key}.{name}" if key else name, f"unknown key {allowed(known)}")

    def _missing(self, value: Any, key: str, want: str) -> bool:
        if value is MISSING:
            self.error(key, f"missing (allowed: {want})")
            return True
        return False

    def string(self, value: Any, key: str) -> str | None:
        if self._missing(value, key, "a string"):
            return None
        if not isinstance(value, str):
            self.error(key, f"expected a string, got {value!r}")
            return None
        return value
