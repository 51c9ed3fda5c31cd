"""Benchmark: decode and validate 10,000 results.jsonl step records with msgspec and with pydantic v2, against the
same record types (commprof.records.schema), beside the stdlib json.loads the reader used before. Prints seconds.

Both libraries are given the same job: JSON text of one record per line in, a validated dict per line out
(pydantic reads the types' shapes; msgspec also their bounds). pydantic is not a commprof dependency:
`pip install pydantic` to run this comparison.

    python bench/schema_decode.py [--records 10000]
"""

from __future__ import annotations

import argparse
import functools
import json
import operator
import sys
import time
import types
import typing
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import msgspec  # noqa: E402
import pydantic  # noqa: E402
import typing_extensions  # noqa: E402

from commprof.records.schema import StepRecord  # noqa: E402
from tests.report_fixtures import TOKENS, make_records, many_points  # noqa: E402


def _for_pydantic(hint, made):
    """The same annotation with typing_extensions TypedDicts (pydantic refuses typing's on Python < 3.12)."""
    if typing.is_typeddict(hint):
        if hint not in made:
            fields = {k: _for_pydantic(v, made) for k, v in typing.get_type_hints(hint, include_extras=True).items()}
            optional = hint.__optional_keys__
            fields = {k: typing_extensions.NotRequired[v] if k in optional else v for k, v in fields.items()}
            made[hint] = typing_extensions.TypedDict(hint.__name__, fields)
        return made[hint]
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return functools.reduce(operator.or_, (_for_pydantic(a, made) for a in args))
    if origin in (list, dict) and args:
        return origin[tuple(_for_pydantic(a, made) for a in args)]
    return hint


def _time(decode, lines) -> float:
    start = time.perf_counter()
    for line in lines:
        decode(line)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=10_000)
    args = parser.parse_args()
    points = many_points(-(-args.records // (2 * len(TOKENS))))
    lines = [json.dumps(r).encode() for r in make_records("bench-run", points=points)[: args.records]]
    msgspec_decoder = msgspec.json.Decoder(StepRecord)
    pydantic_adapter = pydantic.TypeAdapter(_for_pydantic(StepRecord, {}))
    pydantic_adapter.validate_json(lines[0])
    msgspec_decoder.decode(lines[0])
    results = {
        "json.loads (no validation)": _time(json.loads, lines),
        "msgspec.json.Decoder(StepRecord).decode": _time(msgspec_decoder.decode, lines),
        "pydantic.TypeAdapter(StepRecord).validate_json": _time(pydantic_adapter.validate_json, lines),
    }
    megabytes = sum(map(len, lines)) / 1e6
    for name, seconds in results.items():
        print(f"{name:<50} {seconds:6.2f} s for {len(lines)} records ({megabytes:.0f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
