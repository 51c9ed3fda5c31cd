"""The report's first screen: what to set, how much faster the verify step gets and whether speculative decoding
pays, each answer built from the points of table 1 (choices.choices_per_tokens).

"What do I set?" has three parts, each judged by ranking.NOISE_RULE:
(a) the environment to export: the fastest setting of the baseline's implementation (NCCL) over every T if it
    beats the baseline beyond noise, else keep the baseline; with its effect per T;
(b) another all-reduce implementation, where it beats (a) beyond noise (for which T, by how much) and what
    that takes in an engine: its flag where one exists, else engine work;
(c) fused all-reduce + residual + RMSNorm kinds against their unfused reference (nccl+rmsnorm).
Pure: a RunAnalysis in, formatted strings and dicts for the template out.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from commprof.report.engine_hints import engine_hints, implementation_settings
from commprof.report.formatting import finite, fmt_bytes, fmt_ms, fmt_num, fmt_pct
from commprof.report.projection import tps_column
from commprof.report.ranking import UNFUSED_REFERENCE_IMPL
from commprof.report.run_analysis import RunAnalysis
from commprof.report.words import (
    break_even_text,
    draft_text,
    export_line,
    keep_text,
    noise_sentence,
    not_a_result_notes,
    spec_label,
    tuned_name,
)

MAX_REASON_CHARS = 160


def _tokens_text(tokens) -> str:
    return ", ".join(str(int(t)) for t in tokens)


def _range_pct(values: pd.Series) -> str:
    low, high = float(values.min()), float(values.max())
    return f"{high:.0f} %" if abs(high - low) < 0.5 else f"{low:.0f}–{high:.0f} %"


def _reason(message: Any) -> str:
    text = " ".join(str(message or "no message").split())
    return text if len(text) <= MAX_REASON_CHARS else text[: MAX_REASON_CHARS - 1] + "…"


def env_answer(run: RunAnalysis) -> dict[str, Any]:
    """(a): the export line (or what to keep), why, and its effect per T against the baseline."""
    name = tuned_name(run)
    out: dict[str, Any] = {
        "title": f"(a) {name} environment",
        "code": "",
        "lines": [],
        "notes": [],
        "rows": [],
        "warnings": [],
    }
    rec, point = run.recommendation, run.recommended
    if point is None:
        out["lines"].append(f"No single {name} setting passed at every T; see table 1.")
    elif rec.keeps_baseline:
        out["lines"].append(keep_text(run))
        if rec.fastest["point_id"] == run.baseline:
            out["notes"].append("No setting measured was faster than the baseline.")
        else:
            out["notes"].append(
                f"The fastest, {rec.fastest['point_id']} {rec.fastest['label']}, was "
                f"{fmt_pct(rec.saved_pct)} faster over every T, within measurement noise: "
                f"{noise_sentence(run)} Not a result; re-measure with more iterations."
            )
    elif not point["env"]:
        out["lines"].append(f"Keep {name}'s defaults: no {name} setting measured beat them.")
    else:
        out["code"] = export_line(point["env"])
        out["notes"].append(
            f"Point {point['point_id']} {point['label']}: the least total {run.mode}-mode step "
            f"time over every T, beyond measurement noise; in recommend.env."
        )
        if rec.beyond_noise is None:
            out["notes"].append(noise_sentence(run))
        chosen = run.choices[[("recommended" in roles) for roles in run.choices["roles"]]]
        for r in chosen.itertuples():
            out["rows"].append(
                {
                    "tokens": int(r.tokens),
                    "baseline": fmt_ms(r.baseline_us),
                    "time": fmt_ms(r.median_us),
                    "saved": fmt_pct(r.saved_pct),
                    "noise": r.beyond_noise is not True,
                }
            )
    out["warnings"] = not_a_result_notes(run)
    return out


def alternative_answer(run: RunAnalysis) -> dict[str, Any]:
    """(b): where another all-reduce implementation beats (a) beyond noise, by how much, and what it takes in
    SGLang / vLLM (their setting, or engine work where none exists)."""
    name = tuned_name(run)
    reference = "(a)" if run.reference != run.baseline else f"{name}'s baseline"
    out: dict[str, Any] = {"lines": [], "rows": [], "engine": [], "not_run": []}
    alt = run.alternatives
    absent = (
        run.without_result[~run.without_result["fused_rmsnorm"].astype(bool)]
        if not run.without_result.empty
        else run.without_result
    )
    out["not_run"] = [f"{r.impl}: {r.status}: {_reason(r.message)}" for r in absent.itertuples()]
    if alt.empty:
        out["lines"].append(
            "No other all-reduce implementation ran in this sweep" + (" (see below why)." if out["not_run"] else ".")
        )
        return out
    for r in alt.itertuples():
        out["rows"].append(
            {
                "tokens": int(r.tokens),
                "size": fmt_bytes(r.bytes),
                "reference": fmt_ms(r.reference_us),
                "impl": r.impl,
                "time": fmt_ms(r.median_us),
                "saved": fmt_pct(r.saved_pct),
                "wins": r.beyond_noise is True,
                "loses": r.slower_beyond_noise is True,
            }
        )
    won = alt[[v is True for v in alt["beyond_noise"]]]
    if won.empty:
        out["lines"].append(f"No other implementation beats {reference} beyond noise at any T: stay with {name}.")
        return out
    for impl, group in won.groupby("impl", sort=True):
        sizes = ", ".join(f"{int(t)} ({fmt_bytes(b)})" for t, b in zip(group["tokens"], group["bytes"]))
        line = (
            f"{impl} beats {reference} beyond noise at T = {sizes} per all-reduce: "
            f"{_range_pct(group['saved_pct'])} less communication per step."
        )
        rest = sorted(set(int(t) for t in alt["tokens"]) - set(int(t) for t in group["tokens"]))
        if rest:
            line += f" Not at T = {_tokens_text(rest)}: keep {name} for those sizes."
        out["lines"].append(line)
    for impl in sorted(set(won["impl"])):
        for engine, setting, version in implementation_settings(impl):
            out["engine"].append(
                {
                    "engine": engine,
                    "setting": setting,
                    "version": version,
                    "text": "" if setting else f"no setting runs {impl}: engine work",
                }
            )
    return out


def fusion_answer(run: RunAnalysis) -> dict[str, Any]:
    """(c): fused all-reduce + RMSNorm kinds against their unfused reference, per T, and the engine flags."""
    out: dict[str, Any] = {"lines": [], "engine": [], "not_run": []}
    absent = (
        run.without_result[
            run.without_result["fused_rmsnorm"].astype(bool) & (run.without_result["impl"] != UNFUSED_REFERENCE_IMPL)
        ]
        if not run.without_result.empty
        else run.without_result
    )
    out["not_run"] = [f"{r.impl}: {r.status}: {_reason(r.message)}" for r in absent.itertuples()]
    fusion = run.fusion
    if fusion.empty:
        out["lines"].append(
            "No fused kind ran in this sweep."
            if out["not_run"]
            else 'No fused kind in this sweep (add impl = "flashinfer-fused" and its reference '
            f'"{UNFUSED_REFERENCE_IMPL}" to measure it).'
        )
        return out
    if fusion["reference_us"].isna().any():
        missing = fusion[fusion["reference_us"].isna()]
        out["lines"].append(
            f"No {UNFUSED_REFERENCE_IMPL} reference ran at T = {_tokens_text(missing['tokens'])}: "
            f'add impl = "{UNFUSED_REFERENCE_IMPL}" to the sweep to compare there.'
        )
    verdicts = (
        ("beats", [v is True for v in fusion["beyond_noise"]]),
        ("is slower than", [v is True for v in fusion["slower_beyond_noise"]]),
    )
    for verb, mask in verdicts:
        rows = fusion[mask]
        if not rows.empty:
            saved = rows["saved_pct"].abs()
            out["lines"].append(
                f"{rows['impl'].iloc[0]} {verb} {UNFUSED_REFERENCE_IMPL} beyond noise at "
                f"T = {_tokens_text(rows['tokens'])}: {_range_pct(saved)} "
                f"{'less' if verb == 'beats' else 'more'} time per step."
            )
    within = fusion[[b is False and s is False for b, s in zip(fusion["beyond_noise"], fusion["slower_beyond_noise"])]]
    if not within.empty:
        out["lines"].append(f"Within noise of {UNFUSED_REFERENCE_IMPL} at T = {_tokens_text(within['tokens'])}.")
    fused_measured = bool((run.steps["fused_rmsnorm"] & (run.steps["impl"] != UNFUSED_REFERENCE_IMPL)).any())
    for hint in engine_hints(fusion, fused_measured, env_exported=False):
        out["engine"].append({"engine": hint.engine, "setting": hint.setting, "version": hint.version, "text": ""})
    return out


def faster_answer(run: RunAnalysis) -> dict[str, Any]:
    """Per verify T: the baseline, with (a), and the fastest of all (maybe (b)); the headline verdict."""
    out: dict[str, Any] = {"rows": [], "verdict": "", "noise": False, "more": "", "note": ""}
    choices = run.choices
    if choices.empty:
        return out
    verify = choices[choices["tokens"] > 1] if (choices["tokens"] > 1).any() else choices
    family = set(run.baseline_family)
    env_gains, alt_gains, any_noise = [], [], False
    for tokens, group in verify.groupby("tokens", sort=True):
        roles = {role: r for r in group.itertuples() for role in r.roles}
        base, fastest = roles.get("baseline"), roles.get("fastest")
        if base is None or fastest is None:
            continue
        env = roles.get("recommended", base)
        env_real = env.point_id != run.baseline and env.beyond_noise is True
        best_real = fastest.point_id != run.baseline and fastest.beyond_noise is True
        any_noise |= (env.point_id != run.baseline and not env_real) or (
            fastest.point_id != run.baseline and not best_real
        )
        other = fastest.impl not in family
        if env_real:
            env_gains.append((int(tokens), env.saved_pct))
        if other and best_real:
            alt_gains.append((int(tokens), fastest.saved_pct, fastest.impl))
        out["rows"].append(
            {
                "tokens": int(tokens),
                "baseline": fmt_ms(base.median_us),
                "env": fmt_ms(env.median_us),
                "env_saved": fmt_pct(env.saved_pct) if env.point_id != run.baseline else "—",
                "env_noise": env.point_id != run.baseline and not env_real,
                "best": fmt_ms(fastest.median_us),
                "best_saved": fmt_pct(fastest.saved_pct) if fastest.point_id != run.baseline else "—",
                "best_label": fastest.impl
                if other
                else "baseline"
                if fastest.point_id == run.baseline
                else "(a)"
                if fastest.point_id == env.point_id
                else fastest.label,
                "best_noise": fastest.point_id != run.baseline and not best_real,
                "best_other": other,
            }
        )
    verify_count = len(out["rows"])
    if env_gains:
        out["verdict"] = f"{_range_pct(pd.Series([g for _, g in env_gains]))} less communication with (a)"
        if len(env_gains) < verify_count:
            out["verdict"] += f" at T = {_tokens_text(t for t, _ in env_gains)}"
    elif alt_gains:
        out["verdict"] = (
            f"{_range_pct(pd.Series([g for _, g, _ in alt_gains]))} less communication with "
            f"{alt_gains[0][2]} (b) at T = {_tokens_text(t for t, _, _ in alt_gains)}"
        )
    elif out["rows"]:
        out["verdict"] = "No gain beyond measurement noise"
        out["noise"] = True
    if env_gains and alt_gains:
        out["more"] = (
            f"With {alt_gains[0][2]} (b): {_range_pct(pd.Series([g for _, g, _ in alt_gains]))} at "
            f"T = {_tokens_text(t for t, _, _ in alt_gains)} (needs the engine to run it)."
        )
    elif alt_gains and not env_gains:
        out["more"] = f"{tuned_name(run)} settings alone (a): no gain beyond noise."
    if any_noise:
        out["note"] = "Grey: within measurement noise (the point's p90 is not below the baseline's median), not a gain."
    return out


def spec_answer(run: RunAnalysis) -> dict[str, Any]:
    """Break-even accept length and tokens/s per verify T with the settings (a) exports; without compute times
    a communication-only bound, said first and greyed."""
    bound = not run.options.compute.given
    out: dict[str, Any] = {
        "bound": bound,
        "rows": [],
        "verdict": "",
        "plain": "",
        "setting": "",
        "note": "",
        "fastest": "",
        "caveat": "",
    }
    if bound:
        out["caveat"] = (
            "Communication only: compute time not given (--compute-ms, or compute_ms in the sweep "
            "file's [report]). These tokens/s leave the model's compute out: upper bounds, not "
            "throughput."
        )
    if run.projection.empty:
        out["note"] = (
            "Not answerable from this run: a T = 1 step (plain decode) and at least one verify T are both needed."
        )
        return out
    setting = "recommended" if (run.projection["setting"] == "recommended").any() else "baseline"
    out["setting"] = (
        "with (a), the settings to export"
        if setting == "recommended"
        else "with the baseline's settings (kept: nothing beat them beyond noise)"
        if run.recommendation is not None and run.recommendation.keeps_baseline
        else "with the baseline's settings"
    )
    chosen = run.projection[run.projection["setting"] == setting]
    for r in chosen.itertuples():
        cells = []
        for accept in run.options.accepts:
            value = getattr(r, tps_column(accept))
            cells.append(
                {
                    "text": fmt_num(value, 0) if finite(value) else "n/a",
                    "pays": finite(value) and value > r.plain_tokens_per_s,
                }
            )
        out["rows"].append({"tokens": int(r.tokens), "break_even": break_even_text(r.break_even_ratio), "cells": cells})
    plain = chosen["plain_tokens_per_s"]
    out["plain"] = fmt_num(plain.iloc[0], 0) if not plain.empty else "—"
    if not chosen.empty and chosen["break_even_ratio"].notna().any():
        anywhere = chosen[chosen["pays_at_any_accept"].astype(bool)]
        if not anywhere.empty:
            out["verdict"] = "Pays at any accept length at T = " + _tokens_text(anywhere["tokens"])
        else:
            lowest = chosen.loc[chosen["break_even_ratio"].idxmin()]
            out["verdict"] = f"Pays above accept length {lowest['break_even_ratio']:.2f} at T = {int(lowest['tokens'])}"
    fastest = run.projection[run.projection["setting"] == "best"]
    best = fastest.set_index("tokens")["break_even_ratio"].map(break_even_text)
    ours = chosen.set_index("tokens")["break_even_ratio"].map(break_even_text)
    if not best.empty and not ours.reindex(best.index).equals(best):
        out["fastest"] = (
            "With the fastest point at each T (table 1, other implementations included): plain "
            f"decode {fmt_num(fastest['plain_tokens_per_s'].iloc[0], 0)} tok/s, break-even "
            + ", ".join(f"T = {int(t)}: {v}" for t, v in best.items())
            + "."
        )
    out["note"] = draft_text(run).capitalize() + "." if bound else spec_label(run)
    return out


def headline_answers(run: RunAnalysis) -> dict[str, Any]:
    """The first screen's answers: (a), (b), (c), how much faster, and whether speculative decoding pays."""
    answers: dict[str, Any] = {
        "empty": "",
        "env": None,
        "alt": None,
        "fused": None,
        "faster": faster_answer(run),
        "spec": spec_answer(run),
    }
    if run.steps.empty:
        answers["empty"] = "No replayed steps in this run: nothing to recommend."
    elif run.all_failed:
        answers["empty"] = "Nothing: every point failed. See the CUDA-graph compatibility matrix below."
    else:
        answers.update(env=env_answer(run), alt=alternative_answer(run), fused=fusion_answer(run))
    return answers
