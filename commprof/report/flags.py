"""The report's options: what the command line gives (ReportFlags) over what the run's sweep file's [report] set,
parsed and checked into the analysis's ReportOptions; every bad value a one-line error."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from commprof.errors import UsageError
from commprof.records.meta_sections import SweepReport
from commprof.records.run_meta import RunMeta
from commprof.records.values import MAX_ACCEPT
from commprof.report.analysis.projection import ComputeTimes
from commprof.report.analysis.run_analysis import DEFAULT_ACCEPTS, ReportOptions


@dataclass(frozen=True)
class ReportFlags:
    """The report command's analysis options as given on its command line (None: not given)."""

    compute_ms: str | None  # --compute-ms
    draft_ms: str | None  # --draft-ms
    accept: str | None  # --accept
    baseline: str | None  # --baseline
    engines: tuple[str, ...]  # each --engine
    allow_partial: bool  # --allow-partial


def sweep_options(meta: RunMeta) -> SweepReport:
    """Report options the run's sweep file set (meta.json's sweep's report); the command line overrides them."""
    report = meta.sweep.report if meta.sweep else None
    return report if report is not None else SweepReport()


def report_options(cli: dict[str, Any], from_sweep: SweepReport) -> ReportOptions:
    """Command line over sweep file over defaults, parsed and checked."""

    def pick(name: str, sweep_name: str):
        return cli[name] if cli.get(name) is not None else getattr(from_sweep, sweep_name)

    def given(name: str, sweep_name: str) -> str:
        """Where a value came from, as its error names it."""
        return f"--{name.replace('_', '-')}" if cli.get(name) is not None else f"the sweep file's [report] {sweep_name}"

    draft = pick("draft_ms", "draft_ms")
    accept = pick("accept", "accept_lengths")
    compute = pick("compute_ms", "compute_ms")
    return ReportOptions(
        compute=parse_compute_ms(compute, given("compute_ms", "compute_ms")),
        draft_ms=parse_ms(draft, given("draft_ms", "draft_ms")) if draft is not None else None,
        accepts=parse_accept(accept, given("accept", "accept_lengths")) if accept is not None else DEFAULT_ACCEPTS,
        baseline=pick("baseline", "baseline"),
        compute_source="given with --compute-ms"
        if cli.get("compute_ms") is not None
        else "given in the sweep file's [report] compute_ms"
        if compute is not None
        else "",
        allow_partial=bool(cli.get("allow_partial")),
        **({"engines": tuple(cli["engines"])} if cli.get("engines") else {}),
    )


def parse_compute_ms(value: Any, given: str = "--compute-ms") -> ComputeTimes:
    """ "5.0" (every T), "4=5.0,8=5.2" (per T), a number, or a {T: ms} mapping (from the sweep file); `given`
    names where it came from in an error."""
    if value is None or value == "":
        return ComputeTimes()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return ComputeTimes(everywhere=parse_ms(value, given))
    if isinstance(value, dict):
        items = list(value.items())
    else:
        text = str(value).strip()
        if "=" not in text:
            return ComputeTimes(everywhere=parse_ms(text, given))
        items = []
        for part in text.split(","):
            key, sep, ms = part.partition("=")
            if not sep:
                raise UsageError(f'{given}: {part.strip()!r} is not T=ms (e.g. "4=5.0,8=5.2" or one number)')
            items.append((key, ms))
    per_tokens = {}
    for key, ms in items:
        try:
            tokens = int(str(key).strip())
        except ValueError:
            raise UsageError(f"{given}: T {key!r} is not a whole number") from None
        if tokens < 1:
            raise UsageError(f"{given}: T must be >= 1, got {tokens}")
        per_tokens[tokens] = parse_ms(ms, given)
    return ComputeTimes(per_tokens=per_tokens)


def parse_ms(value: Any, given: str) -> float:
    """A duration in ms from the command line or the sweep file; `given` names where it came from in an error."""
    try:
        number = float(str(value).strip())
    except ValueError:
        raise UsageError(f"{given}: {value!r} is not a number of milliseconds") from None
    if not math.isfinite(number) or number < 0:
        raise UsageError(f"{given}: {value!r} must be a finite number >= 0")
    return number


def parse_accept(value: Any, given: str = "--accept") -> tuple[float, ...]:
    """Accept lengths (tokens kept per verify step, bonus token included): "1.3,2.0,3.0" or a list; each >= 1.
    `given` names where they came from in an error."""
    parts = value if isinstance(value, (list, tuple)) else str(value).split(",")
    lengths = []
    for part in parts:
        try:
            length = float(str(part).strip())
        except ValueError:
            raise UsageError(f"{given}: {part!r} is not a number") from None
        if not math.isfinite(length) or length < 1:
            raise UsageError(f"{given}: accept length {part!r} must be >= 1 (the bonus token always counts)")
        if length > MAX_ACCEPT:
            raise UsageError(f"{given}: accept length {part!r} is above {MAX_ACCEPT} (tokens kept per verify step)")
        lengths.append(length)
    if not lengths:
        raise UsageError(f"{given}: give at least one accept length, e.g. 1.3,2.0,3.0")
    return tuple(sorted(set(lengths)))
