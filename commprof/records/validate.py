"""The one adapter between msgspec, which decodes and checks every file commprof reads against its typed
structure (in C), and the line a user reads: "key: problem", or "key value is out of range (allowed: low..high)".

A bounded field says its own problem: `bounded(int, ge=1, le=8)`, or a template naming what is wrong
(`{path}`, `{colon}`, `{head}`, `{field}`, `{value}`, `{low}`, `{high}`); a container whose template names
`{field}` answers for every wrong item in it. A field whose Meta says what it `want`s (the files a user writes:
commprof.problems) is refused as "key: problem (allowed: want)", and `all_problems` finds every such problem of a
file in one pass."""

from __future__ import annotations

import functools
import math
import re
import types
import typing
from typing import Annotated, Any, Literal

import msgspec

_RANGE = "{path} {value} is out of range (allowed: {low}..{high})"
_SEGMENT = re.compile(r"\.([^.\[]+)|\[(\d+|\.\.\.)\]")
_EXPECTED = re.compile(r"Expected `([^`]+)`, got `([^`]+)`")
_TYPE_NAMES = {
    "bool": "true/false",
    "int": "an integer",
    "float": "a finite number",
    "str": "a string",
    "array": "a list",
    "object": "an object",
    "null": "null",
}
_GOT_NAMES = {**_TYPE_NAMES, "float": "a number"}


def bounded(kind: Any, problem: str = _RANGE, **constraints: Any) -> Any:
    """`kind` constrained (msgspec.Meta: ge, le, gt, pattern ...), refused with `problem` when a value breaks it."""
    return Annotated[kind, msgspec.Meta(**constraints, extra={"problem": problem})]


def problem_of(value: Any, kind: Any) -> str | None:
    """Why `value` (parsed JSON) is not of type `kind`, as one line, or None."""
    try:
        msgspec.convert(value, kind)
    except msgspec.ValidationError as refused:
        return explain(refused, value, kind)
    return None


def explain(refused: msgspec.ValidationError, value: Any, kind: Any, at: tuple = ()) -> str:
    """msgspec's refusal of `value` (the JSON decoded without a type) as type `kind`, in the reader's words; `at`:
    where `value` sits in its file, for a problem's key."""
    message, path = _where(refused)
    located = _located(value, path, kind)
    words = {**_words([*at, *path]), "path": _words([*at, *located])["path"]}
    if message.startswith("Object missing required field"):
        missing = message.split("`")[1]
        return f"{words['colon']}: no {missing}" if words["colon"] else f"no {missing}"
    hint, metas, along = _hint_at(kind, path)
    if message.startswith("Object contains unknown field") and _is_struct(_bare(hint)[0]):
        allowed = ", ".join(field.encode_name for field in msgspec.structs.fields(_bare(hint)[0]))
        return f"{_words([*at, *located, message.split('`')[1]])['path']}: unknown key (allowed: {allowed})"
    wanted = next((m for m in metas if m.extra and "want" in m.extra), None)
    if wanted is not None:
        return f"{words['path']}: {_file_problem(message, _value_at(value, located), hint, metas)}"
    wrong_item = next((m.extra["problem"] for m in reversed(along) if "{field}" in m.extra.get("problem", "")), None)
    if wrong_item and message.startswith("Expected `"):  # a column names its wrong items itself
        return wrong_item.format(**words)
    if expected := _EXPECTED.fullmatch(message):
        return f"{words['colon']}: {_type_problem(expected, hint)}"
    found = _value_at(value, located)
    if message.startswith("Invalid enum value"):
        allowed = ", ".join(map(str, typing.get_args(_bare(hint)[0])))
        return f"{words['path']} {found!r} is not one of {allowed}"
    return _bound_problem(found, metas, words)


def _type_problem(expected: re.Match, hint: Any) -> str:
    """ "expected an integer or null, got a string": the JSON types named as the reader names them."""
    names = [_name(option) for option in typing.get_args(hint)] if _is_union(hint) else [_name(hint)]
    if None in names:  # a type this adapter does not name: msgspec's own words
        names = [_TYPE_NAMES.get(name, name) for name in expected.group(1).split(" | ")]
    return f"expected {' or '.join(names)}, got {_GOT_NAMES.get(expected.group(2), expected.group(2))}"


def _bound_problem(found: Any, metas: list, words: dict[str, str]) -> str:
    """A value outside its bounds, in its field's own template (or "key value is out of range")."""
    meta = next((m for m in metas if m.extra), None)
    template = meta.extra["problem"] if meta else _RANGE
    if isinstance(found, float) and not math.isfinite(found) and "finite" not in template:
        return f"{words['colon']}: expected a finite number, got {found!r}"
    low = next((b for b in (getattr(meta, "ge", None), getattr(meta, "gt", None)) if b is not None), None)
    return template.format(**words, value=found, low=low, high=getattr(meta, "le", None))


def _where(refused: msgspec.ValidationError) -> tuple[str, list]:
    """msgspec's message and the path it names ([] for the value itself)."""
    message, _, where = str(refused).rpartition(" - at `")
    if not message:
        message, where = str(refused), "$`"
    return message, [key or (index if index == "..." else int(index)) for key, index in _SEGMENT.findall(where[1:-1])]


def _file_problem(message: str, found: Any, hint: Any, metas: list) -> str:
    """The problem of a field that says what it wants, in the words of the files a user writes."""
    wanted = next(m for m in metas if m.extra and "want" in m.extra)
    want = wanted.extra["want"]
    if typing.get_origin(_bare(hint)[0]) is Literal:
        return f"{found!r} is not {wanted.extra['what']} (allowed: {want})"
    if isinstance(found, float) and not math.isfinite(found):
        return f"{found} is not a finite number (allowed: {want})"
    if _EXPECTED.fullmatch(message) or not message.startswith(("Expected `int`", "Expected `float`")):
        got = type(found).__name__ if wanted.extra.get("got") == "type" else repr(found)
        return f"expected {want}, got {got}"
    if message.startswith("Expected `float` <="):
        return f"{found} is above {message.rpartition(' ')[2]} (allowed: {want})"
    if message.startswith("Expected `float`"):
        return f"{found} is out of range (allowed: {want})"
    low = next((m.ge for m in metas if m.ge is not None), None)
    if message.startswith("Expected `int` >=") and low is not None and found < low:
        return f"{found} is below {low} (allowed: {want})"
    return f"{found} is above {message.rpartition(' ')[2]} (allowed: {want})"


def all_problems(value: Any, kind: Any, at: tuple = ()) -> tuple[Any, list[str]]:
    """`value` (parsed TOML or JSON) as `kind`, and every problem in it, "key: problem" each, in the order the
    structures declare their fields; a field with a problem takes its default (None where it has none), a table or
    list with a problem inside keeps what it could read (None at each problem)."""
    try:
        return msgspec.convert(value, kind), []
    except msgspec.ValidationError as error:
        refused = error
    message, path = _where(refused)
    option = _option_for(kind, value) if path or message.startswith("Object") else None
    if option is None:
        return None, [explain(refused, value, kind, at)]
    if isinstance(option, type) and issubclass(option, msgspec.Struct):
        return _struct_problems(value, option, at)
    items = value.items() if isinstance(value, dict) else enumerate(value)
    item_kind = typing.get_args(option)[-1]
    found = {key: all_problems(item, item_kind, (*at, key)) for key, item in items}
    problems = [line for _, lines in found.values() for line in lines]
    converted = {key: item for key, (item, _) in found.items()}
    return (converted if isinstance(value, dict) else list(converted.values())), problems


def _option_for(kind: Any, value: Any) -> Any:
    """The structure, dict or list among `kind`'s options that `value`'s shape is."""
    hint = _bare(kind)[0]
    for option in typing.get_args(hint) if _is_union(hint) else (hint,):
        option = _bare(option)[0]
        origin = typing.get_origin(option) or option
        if isinstance(value, dict) and (origin is dict or _is_struct(option)):
            return option
        if isinstance(value, list) and origin is list:
            return option
    return None


def _is_struct(hint: Any) -> bool:
    return isinstance(hint, type) and issubclass(hint, msgspec.Struct)


def _struct_problems(value: dict, struct: Any, at: tuple) -> tuple[Any, list[str]]:
    fields = msgspec.structs.fields(struct)
    names = [field.encode_name for field in fields]
    problems = []
    if struct.__struct_config__.forbid_unknown_fields:
        allowed = f"(allowed: {', '.join(names)})"
        problems += [f"{_words([*at, k])['path']}: unknown key {allowed}" for k in value if k not in names]
    hints = _fields(struct)
    given = {}
    for field in fields:
        required = field.default is msgspec.NODEFAULT and field.default_factory is msgspec.NODEFAULT
        if field.encode_name not in value:
            if required:
                problems.append(
                    f"{_words([*at, field.encode_name])['path']}: missing (allowed: {_want(hints[field.name])})"
                )
                given[field.name] = None
            continue
        converted, found = all_problems(value[field.encode_name], hints[field.name], (*at, field.encode_name))
        problems += found
        if not found or converted is not None or required:  # a part read is kept, its problems None
            given[field.name] = converted
    return struct(**given), problems


def _want(hint: Any) -> str:
    """What a missing field wants, as its Meta says (or its type's name)."""
    hint, metas = _bare(hint)
    said = next((m.extra.get("missing", m.extra["want"]) for m in metas if m.extra and "want" in m.extra), None)
    return said or _name(hint) or "a value"


def _is_union(hint: Any) -> bool:
    return typing.get_origin(hint) in (typing.Union, types.UnionType)


def _name(hint: Any) -> str | None:
    """How the reader names a JSON type: "an integer", "a list", "an object", "null"; None for one it does not."""
    hint = _bare(hint)[0]
    if typing.is_typeddict(hint) or _is_struct(hint):
        return "an object"
    return _PYTHON_NAMES.get(typing.get_origin(hint) or hint)


_PYTHON_NAMES = {
    type(None): "null",
    bool: "true/false",
    int: "an integer",
    float: "a finite number",
    str: "a string",
    list: "a list",
    dict: "an object",
}


def _words(path: list) -> dict[str, str]:
    """A path as the reader names it: "nccl.choices[0].bytes" and "nccl: choices: an item: bytes"."""
    dotted = "".join(f"[{p}]" if isinstance(p, int) else "[...]" if p == "..." else f".{p}" for p in path)
    colon = ": ".join("an item" if isinstance(p, int) else "a value" if p == "..." else p for p in path)
    field = ".".join(p for p in path if isinstance(p, str) and p != "...")
    return {"path": dotted.lstrip("."), "colon": colon, "head": str(path[0]) if path else "", "field": field}


def _value_at(value: Any, path: list) -> Any:
    for step in path:
        if step == "..." or not isinstance(value, (dict, list)):
            return None
        try:
            value = value[step]
        except (KeyError, IndexError, TypeError):
            return None
    return value


def _hint_at(kind: Any, path: list) -> tuple[Any, list, list]:
    """The annotation at `path` inside `kind` (Optional and Annotated taken off), its msgspec.Meta, and every
    Meta with a problem along the path."""
    hint, metas = _bare(kind)
    along = [m for m in metas if m.extra]
    for step in path:
        declared = _inner(hint, step)
        hint, metas = _bare(declared)
        along += [m for m in metas if m.extra]
    if path and _is_union(_unannotated(declared)):  # name every option, null included
        hint = _unannotated(declared)
    if _is_union(hint):  # a bounded option among others
        metas += [m for option in typing.get_args(hint) for m in _bare(option)[1]]
    return hint, metas, along


def _unannotated(hint: Any) -> Any:
    return hint.__origin__ if typing.get_origin(hint) is Annotated else hint


def _bare(hint: Any) -> tuple[Any, list]:
    metas: list = []
    while True:
        if typing.get_origin(hint) is Annotated:
            metas += [m for m in hint.__metadata__ if isinstance(m, msgspec.Meta)]
            hint = hint.__origin__
        elif typing.get_origin(hint) in (typing.Union, types.UnionType):
            options = [o for o in typing.get_args(hint) if o is not type(None)]
            if len(options) != 1:
                return hint, metas
            hint = options[0]
        else:
            return hint, metas


def _inner(hint: Any, step: Any) -> Any:
    options = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
    for option in options:
        option = _bare(option)[0]
        if isinstance(step, int) and typing.get_origin(option) is list:
            return typing.get_args(option)[0]
        if step == "..." and typing.get_origin(option) is dict:
            return typing.get_args(option)[1]
        if isinstance(step, str) and (typing.is_typeddict(option) or _is_struct(option)):
            return _fields(option).get(step, Any)
    return Any


@functools.cache
def _fields(structure: Any) -> dict[str, Any]:
    return typing.get_type_hints(structure, include_extras=True)


def _located(value: Any, path: list, kind: Any) -> list:
    """`path` with each value of a mapping ("...") named by its key: the first whose value its type refuses, as
    msgspec checks a mapping's values in order."""
    located, hint = [], kind
    for step in path:
        declared = _inner(hint, step)
        if step == "..." and isinstance(value, dict):
            step = next((key for key, item in value.items() if _refuses(item, declared)), step)
        located.append(step)
        value = value.get(step) if isinstance(value, dict) else value[step] if _indexes(value, step) else None
        hint = declared
    return located


def _refuses(value: Any, kind: Any) -> bool:
    try:
        msgspec.convert(value, kind)
    except msgspec.ValidationError:
        return True
    return False


def _indexes(value: Any, step: Any) -> bool:
    return isinstance(value, list) and isinstance(step, int) and -len(value) <= step < len(value)
