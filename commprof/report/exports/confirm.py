"""confirm.toml: a simulated run's measurement plan as the sweep file that measures it on the box: the simulated
sweep's [run] and [report], the baseline (p000, NCCL's defaults, always first) and the ranked candidates as
[[points]], each with its predicted gain and the model's error as a range in a comment. Pure (a Decision in, the
file's text out); the sweep's own parser reads it back (`allreduce_sweep --sweep confirm.toml --dry-run`)."""

from __future__ import annotations

import json
import re
from typing import Any

from commprof.env_names import export_name_problem, is_export_name
from commprof.report.decision.types import Candidate, Decision
from commprof.report.exports.export_text import comment

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def confirm_text(decision: Decision) -> str | None:
    """The sweep file that measures a simulated run's candidates, or None where the run proposes nothing."""
    plan = decision.plan
    if plan is None:
        return None
    lines = [
        comment(
            f"Measurement plan of the simulated run {decision.run.run_id} ({decision.environment.evidence.label})."
        ),
        comment(f"Why: {plan.why}."),
        comment(f"Measure on the box, from this folder: {plan.command}"),
        comment("then: commprof report --latest runs (a measured run disposes; only it exports live lines)."),
        comment(
            f"Baseline: p000 (NCCL's defaults), then {len(plan.candidates)} candidate(s), ranked by predicted gain:"
        ),
    ]
    for c in plan.candidates:
        lines.append(comment(f"  {c.rank}. {c.point_id} {c.label} ({c.what}): {_range(c)}"))
    lines += ["", f"name = {_value(f'confirm-{decision.run.run_id}'[:80])}", "", "[run]"]
    lines += [f"{_key(k)} = {_value(v)}" for k, v in plan.run.items()]
    if plan.report:
        lines += ["", "[report]", *(f"{_key(k)} = {_value(v)}" for k, v in plan.report.items() if k != "baseline")]
    base = plan.baseline
    if base is not None and base.env:  # the simulated baseline set variables: measure it as it was
        lines += ["", "[[points]]", f"impl = {_value(base.impl)}", f"label = {_value('baseline ' + base.label)}"]
        lines += _env(base.env)
    for c in plan.candidates:
        lines += ["", comment(f"{c.rank}. {_range(c)}"), *_point(c)]
    return "\n".join(lines) + "\n"


def _range(c: Candidate) -> str:
    if c.low_pct is None or c.high_pct is None:
        return f"predicted {c.gain_pct:.1f} % less step communication at T = {c.tokens}, the model's error unknown"
    return (
        f"predicted {c.gain_pct:.1f} % less step communication at T = {c.tokens}, {c.low_pct:.1f} to {c.high_pct:.1f} % within "
        "the model's error"
    )


def _point(c: Candidate) -> list[str]:
    lines = ["[[points]]", f"impl = {_value(c.impl)}", f"label = {_value(c.label)}"]
    if c.options:
        lines.append(f"options = {_value(c.options)}")
    return lines + _env(c.env)


def _env(env: dict[str, str]) -> list[str]:
    """A point's `env` line with the variables a sweep may set (env_names' allow-list, the one the sweep's parser
    applies); each other one a comment saying why it is left out."""
    kept = {name: value for name, value in env.items() if is_export_name(name)}
    skipped = [comment(f"skipped {name!r}: {export_name_problem(name)}") for name in env if name not in kept]
    return skipped + ([f"env = {_value(kept)}"] if kept else [])


def _key(key: str) -> str:
    return key if _BARE_KEY.match(key) else json.dumps(key)


def _value(value: Any) -> str:
    """A TOML value: strings as basic strings (JSON's escapes are TOML's), tables inline."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{_key(str(k))} = {_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"cannot write {type(value).__name__} to TOML")
