"""meta.json's one constructor: the sweep, `simulate` and `import-nccl-tests` each build their RunMeta here, so
every run folder's meta.json has the same common fields in the same order, checked by the reader's own check
(`records.checks.meta_problem`) before it is written."""

from __future__ import annotations

from typing import Any

from commprof.records.checks import meta_problem
from commprof.records.point_ids import is_run_id
from commprof.records.schema import SOURCES, RunMeta

# The software a run names, in this order; None where it is not there (or not used: a simulation has no torch).
VERSION_KEYS = ("python", "torch", "cuda", "nccl", "driver", "flashinfer", "commprof")
# Fields every meta.json has: who wrote it, when, from what command line and where.
REQUIRED = ("run_id", "source", "created", "command", "cwd", "hostname", "versions")


def run_meta(**fields: Any) -> RunMeta:
    """A meta.json: RunMeta's fields in their declared order, the versions in VERSION_KEYS order; TypeError for an
    unknown or missing field, ValueError for a value the reader would refuse."""
    names = RunMeta.__annotations__
    unknown = sorted(set(fields) - set(names))
    missing = [name for name in REQUIRED if name not in fields]
    if unknown or missing:
        raise TypeError(f"meta.json: unknown field(s) {unknown}, missing field(s) {missing}")
    if fields["source"] not in SOURCES:
        raise ValueError(f"meta.json: source {fields['source']!r} is not one of {SOURCES}")
    if not is_run_id(fields["run_id"]):
        raise ValueError(f"meta.json: run_id {fields['run_id']!r} is not a run id")
    versions = dict(fields["versions"] or {})
    fields["versions"] = {key: versions.pop(key, None) for key in VERSION_KEYS} | versions
    meta: Any = {name: fields[name] for name in names if name in fields}
    problem = meta_problem(meta)
    if problem:
        raise ValueError(f"meta.json: {problem}")
    return meta


def updated_meta(meta: RunMeta, **fields: Any) -> RunMeta:
    """A meta.json read back (read_meta) with `fields` set, checked as the constructor checks a new one; keys an
    older commprof wrote are kept as they are."""
    unknown = sorted(set(fields) - set(RunMeta.__annotations__))
    if unknown:
        raise TypeError(f"meta.json: unknown field(s) {unknown}")
    updated: Any = {**meta, **fields}
    problem = meta_problem(updated)
    if problem:
        raise ValueError(f"meta.json: {problem}")
    return updated
