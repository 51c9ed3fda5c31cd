"""The report's first screen: what to set, each answer rendering the Decision: (a) the NCCL environment and the one
file that applies it, (b) other all-reduce implementations against (a), (c) fused all-reduce + RMSNorm kinds
against their unfused reference; with how much faster the verify step gets and whether speculative decoding pays
(views/verify_answers.py). Every verdict shown is a claim's. Pure: a Decision in, strings and dicts out."""

from __future__ import annotations

from typing import Any

from commprof.env_names import is_export_name, shell_value
from commprof.report.decision.formatting import (
    claim_words,
    error_words,
    fmt_bytes,
    fmt_ms,
    fmt_pct,
    sentence,
    tokens_text,
)
from commprof.report.decision.types import RECOMMEND_ENV, TUNER_CONF, Decision
from commprof.report.views.verify_answers import faster_answer, routed_bands, spec_answer

MAX_REASON_CHARS = 160
UNFUSED_REFERENCE = "nccl+rmsnorm"
NOT_CONFIRMED_CAVEAT = (
    "Not confirmed on your box: the model does not explain what the engine measured (above), so this predicted "
    "answer may not hold; run the checks named there first."
)


def _reason(message: Any) -> str:
    text = " ".join(str(message or "no message").split())
    return text if len(text) <= MAX_REASON_CHARS else text[: MAX_REASON_CHARS - 1] + "…"


def tuned_name(decision: Decision) -> str:
    return "NCCL" if decision.run.backend == "nccl" else decision.run.backend


def export_line(env: dict[str, str]) -> str:
    """`export A=1 B='0 0'`: the settings commprof may set as one line a shell accepts (the page shows it;
    recommend.env holds it)."""
    return "export " + " ".join(f"{k}={shell_value(str(v))}" for k, v in sorted(env.items()) if is_export_name(k))


def env_answer(decision: Decision) -> dict[str, Any]:
    """(a): the export line (or what to keep), why (its claim), its effect per T against the baseline, and the one
    file to apply with the other as its alternative."""
    name = tuned_name(decision)
    nccl = decision.nccl
    out: dict[str, Any] = {
        "title": f"(a) {name} environment",
        "unconfirmed": NOT_CONFIRMED_CAVEAT if decision.unconfirmed else "",
        "code": "",
        "lines": [],
        "notes": [],
        "rows": [],
        "column": "with (a)",
        "warnings": list(decision.environment.not_a_result),
        "apply": "",
    }
    point, fastest = nccl.point, nccl.fastest
    claim = decision.claim(nccl.claim)
    if point is None:
        out["lines"].append(f"No single {name} setting passed at every T; see table 1.")
    elif nccl.keeps_baseline:
        out["lines"].append(nccl.keep)
        if decision.run.tokens and len({r.point_id for r in decision.tables.choices}) <= 1:
            out["notes"].append(f"{sentence(nccl.why)}.")
        elif fastest is not None and fastest.point_id == decision.run.baseline:
            out["notes"].append(
                f"No other setting was faster than the baseline ({decision.environment.evidence.label})."
            )
        elif nccl.withheld:
            out["notes"].append(f"{fastest.point_id if fastest else 'The fastest'} is not acted on: {nccl.withheld}.")
        elif fastest is not None:
            out["notes"].append(
                f"The fastest, {fastest.point_id} {fastest.label}, over every T: {claim_words(claim)}. Not a result."
            )
    elif not point.env:
        out["lines"].append(f"Keep {name}'s defaults: no {name} setting beat them.")
    else:
        _set_lines(decision, out)
    if nccl.confirmation:  # what the interleaved confirmation found, beside the claim it decided
        out["notes"].append(f"{sentence(nccl.confirmation)}.")
    for reason, ids in _untested(decision).items():
        out["notes"].append(f"Not ranked ({len(ids)} point{'s' if len(ids) != 1 else ''}, e.g. {ids[0]}): {reason}.")
    for reason, ids in decision.environment.not_measured.items():
        how = " Measure them on GPUs, where the sweep runs on NCCL." if "NCCL does not run here" in reason else ""
        out["notes"].append(
            f"Not measured ({len(ids)} point{'s' if len(ids) != 1 else ''}, e.g. {ids[0]}): {reason}.{how}"
        )
    out["apply"] = _apply_line(decision, " ".join(out["lines"] + out["notes"]).lower())
    return out


def _set_lines(decision: Decision, out: dict[str, Any]) -> None:
    nccl = decision.nccl
    point = nccl.point
    line = export_line(point.env)
    if decision.unconfirmed:
        out["lines"].append(f"Withdrawn ({decision.unconfirmed}); the model predicted: {line}")
    elif nccl.live and nccl.file == RECOMMEND_ENV:
        out["code"] = line
    elif nccl.live:
        out["lines"].append(f"The alternative to {nccl.file}, commented out in recommend.env: {line}")
    else:
        out["lines"].append(f"Measure first, then set: {line}")
    out["notes"].append(
        f"Point {point.point_id} {point.label} over every T: {claim_words(decision.claim(nccl.claim))} "
        f"({decision.environment.evidence.label})."
    )
    if nccl.dropped and nccl.fastest is not None:
        out["notes"].append(
            f"{', '.join(nccl.dropped)} left out: {nccl.fastest.point_id} (with them) against {point.point_id}: "
            f"{claim_words(decision.claim(nccl.fastest_claim))}."
        )
    if nccl.live and nccl.file == TUNER_CONF:
        _tuner_rows(decision, out)
        return
    for row in decision.tables.choices:
        if "recommended" not in row.roles:
            continue
        claim = decision.claim(row.claim)
        out["rows"].append(
            {
                "tokens": row.tokens,
                "baseline": fmt_ms(row.baseline_us),
                "time": fmt_ms(row.median_us),
                "saved": fmt_pct(row.saved_pct),
                "noise": claim is None or not claim.beyond,
                "why": "" if claim is not None and claim.beyond else _why(claim),
            }
        )


def _tuner_rows(decision: Decision, out: dict[str, Any]) -> None:
    """Where nccl_tuner.conf is the answer, the table is what its rules run at each T (its per-T winner), not the
    alternative the note above names."""
    out["column"] = "with nccl_tuner.conf"
    for answer in decision.nccl.per_t:
        claim = decision.claim(answer.claim)
        out["rows"].append(
            {
                "tokens": answer.tokens,
                "baseline": fmt_ms(answer.baseline_us),
                "time": f"{fmt_ms(answer.answer_us)} ({answer.point_id})" if answer.point_id else "—",
                "saved": fmt_pct(claim.gain_pct) if claim is not None else "—",
                "noise": claim is None or not claim.beyond,
                "why": "" if claim is not None and claim.beyond else _why(claim),
            }
        )


def _why(claim) -> str:
    if claim is None:
        return "not compared"
    return f"{error_words(claim)}: {claim.verdict}" + (f", {claim.reason}" if claim.reason else "")


def _apply_line(decision: Decision, said: str) -> str:
    """The one file to apply and why; the why once (a card that has just said it says only the consequence)."""
    nccl = decision.nccl
    if nccl.file and nccl.live:
        return f"Apply {nccl.file}: {nccl.why}." + (
            f" {nccl.alternative} holds the alternative, commented out: use one, never both."
            if nccl.alternative
            else ""
        )
    if nccl.file:
        return f"Nothing to apply yet: {nccl.file} holds it commented out. " + (
            "Measure it first: confirm.toml." if decision.run.simulated else f"{sentence(nccl.why)}."
        )
    return "Nothing to apply." if nccl.why.lower() in said else f"Nothing to apply: {nccl.why}."


def _untested(decision: Decision) -> dict[str, list[str]]:
    reasons: dict[str, list[str]] = {}
    for point_id, reason in decision.environment.untested.items():
        reasons.setdefault(reason, []).append(point_id)
    return reasons


def alternative_answer(decision: Decision) -> dict[str, Any]:
    """(b): where the routes give sizes to another all-reduce implementation than (a), by how much (the route's
    claim), what it takes in SGLang / vLLM, and the per-T rows (each with its claim against (a))."""
    absent = [m for m in decision.tables.without_result if not m.fused]
    not_run = [f"{m.impl}: {m.status}: {_reason(m.message)}" for m in absent]
    out: dict[str, Any] = {"lines": [], "rows": [], "engine": [], "not_run": "; ".join(not_run)}
    alternatives = decision.tables.alternatives
    if not alternatives and not routed_bands(decision):
        out["lines"].append(
            "No other all-reduce implementation ran in this sweep" + (" (see below why)." if not_run else ".")
        )
        return out
    out["rows"] = [
        {
            "tokens": r.tokens,
            "size": fmt_bytes(r.bytes),
            "reference": fmt_ms(r.reference_us),
            "impl": r.impl,
            "time": fmt_ms(r.median_us),
            "wins": r.routed,
            "versus": claim_words(decision.claim(r.claim), "not compared"),
        }
        for r in alternatives
    ]
    out["lines"] = _routed_lines(decision)
    if routed_bands(decision):
        out["engine"] = _engine_rows(decision)
    return out


def _routed_lines(decision: Decision) -> list[str]:
    """Where the routes give sizes to another implementation, each band's claim, and the T they leave to NCCL."""
    name = tuned_name(decision)
    reference = "(a)" if decision.nccl.file == RECOMMEND_ENV else f"{name}'s baseline"
    routed = routed_bands(decision)
    if not routed:
        return [f"No other implementation takes any size from {reference}: stay with {name}."]
    verb = "is predicted to beat" if decision.run.simulated else "beats"
    lines = [
        f"{route.impl} {verb} {reference} at T = {tokens_text(route.tokens)} ({fmt_bytes(route.min_bytes)} – "
        f"{fmt_bytes(route.max_bytes)} per all-reduce): {claim_words(decision.claim(route.claim))} per all-reduce."
        for route in routed
    ]
    taken = {t for route in routed for t in route.tokens}
    rest = sorted({r.tokens for r in decision.tables.alternatives} - taken)
    if rest:
        lines.append(f"Not at T = {tokens_text(rest)}: keep {name} for those sizes.")
    return lines


def _engine_rows(decision: Decision) -> list[dict[str, Any]]:
    """What each engine is told for the routed bands, and engine work where no setting runs an implementation."""
    rows = [
        {
            "engine": s.engine,
            "setting": " ".join(f"{k}={v}" for k, v in s.variables),
            "version": s.version,
            "text": "" if s.live else s.why,
        }
        for s in decision.engines.settings
    ]
    for impl in sorted({r.impl for r in routed_bands(decision)} - {s.impl for s in decision.engines.settings}):
        for engine in [e for e in ("SGLang", "vLLM") if e.lower() in decision.run.engines]:
            rows.append(
                {"engine": engine, "setting": "", "version": "—", "text": f"no setting runs {impl}: engine work"}
            )
    return rows


def fusion_answer(decision: Decision) -> dict[str, Any]:
    """(c): fused all-reduce + RMSNorm kinds against their unfused reference, per T, each with its claim, and the
    engine flags."""
    absent = [m for m in decision.tables.without_result if m.fused and m.impl != UNFUSED_REFERENCE]
    not_run = [f"{m.impl}: {m.status}: {_reason(m.message)}" for m in absent]
    out: dict[str, Any] = {"lines": [], "engine": [], "not_run": "; ".join(not_run)}
    fused = decision.fused
    if not fused:
        out["lines"].append(
            "No fused kind ran in this sweep."
            if not_run
            else 'No fused kind in this sweep (add impl = "flashinfer-fused" and its reference '
            f'"{UNFUSED_REFERENCE}" to measure it).'
        )
        return out
    groups: dict[str, list[int]] = {}
    for row in fused:
        claim = decision.claim(row.claim)
        said = (
            f"{row.impl} against {row.reference}: {claim_words(claim)}"
            if claim is not None
            else f"not compared: {row.reason.removeprefix('not compared: ')}"
        )
        groups.setdefault(said, []).append(row.tokens)
    for said, tokens in groups.items():
        out["lines"].append(f"T = {tokens_text(tokens)}: {said}.")
    for hint in decision.engines.hints:
        if hint.setting:
            out["engine"].append(
                {"engine": hint.engine, "setting": hint.setting, "version": hint.version, "text": hint.untested}
            )
    return out


def headline_answers(decision: Decision) -> dict[str, Any]:
    """The first screen's answers, each rendering the Decision: how much faster, (a), (b), (c), and whether
    speculative decoding pays."""
    answers: dict[str, Any] = {
        "empty": "",
        "env": None,
        "alt": None,
        "fused": None,
        "faster": faster_answer(decision),
        "spec": spec_answer(decision),
    }
    if not decision.run.has_steps:
        answers["empty"] = "No replayed steps in this run: nothing to recommend."
    elif decision.run.all_failed:
        answers["empty"] = "Nothing: every point failed. See the CUDA-graph compatibility matrix below."
    else:
        answers.update(env=env_answer(decision), alt=alternative_answer(decision), fused=fusion_answer(decision))
    return answers
