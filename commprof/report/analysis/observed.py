"""What the engine measured beside what the run predicts: whether the model explains the user's box.

The observation is the engine's communication per verify step (`report --observed-step-ms N`, or the median of an
engine trace read with `commprof trace`, `--observed DIR`). It is set beside the run's prediction with today's
settings (the baseline) and with the answer (the recommended point), per T, in the headline mode. Outside the
prediction's error band the model does not explain the box: the ranked explanations follow (commprof.explain: each
box condition priced on the run's box, judged within the model's error, with what the doctor's verdicts in meta.json
say of it and the fix), and the page says which checks could. Pure.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import TYPE_CHECKING, Any

import msgspec

from commprof.errors import UsageError
from commprof.report.decision.observation import Explanations, Observed
from commprof.units import MAX_TIME_US

if TYPE_CHECKING:
    from commprof.explain.ranking import Explained

MAX_STEP_MS = MAX_TIME_US / 1000  # a step longer than a day is no step an engine ran

# What could explain a box the model does not: each names its command.
CHECKS = (
    "`commprof doctor` on the box: P2P, IOMMU, ACS, PCIe link width and speed, NUMA placement",
    "`commprof nccl-log` on an NCCL_DEBUG=INFO log of the engine: the transports, graph and algorithms NCCL chose",
    "a sweep on the box (`torchrun ... -m commprof.allreduce_sweep --sweep sweeps/pcie8-verify.toml`): measured, "
    "not predicted",
)


def parse_observed_ms(value: str) -> dict[int | None, float]:
    """ "25" (the T is not said) or "4=25,8=26" (per T) -> {T or None: ms}; UsageError for anything else."""
    text = str(value).strip()
    items = [(None, text)] if "=" not in text else [tuple(part.split("=", 1)) for part in text.split(",")]
    out: dict[int | None, float] = {}
    for key, ms in items:
        tokens = None
        if key is not None:
            try:
                tokens = int(str(key).strip())
            except ValueError:
                raise UsageError(f"--observed-step-ms: T {key!r} is not a whole number") from None
            if not 1 <= tokens <= 1 << 24:
                raise UsageError(f"--observed-step-ms: T must be from 1 to {1 << 24}, got {tokens}")
        try:
            number = float(str(ms).strip())
        except ValueError:
            raise UsageError(f"--observed-step-ms: {ms!r} is not a number of milliseconds") from None
        if not math.isfinite(number) or not 0 < number <= MAX_STEP_MS:
            raise UsageError(
                f"--observed-step-ms: {ms!r} must be a number of milliseconds above 0, at most {MAX_STEP_MS:g}"
            )
        if tokens in out:
            raise UsageError(f"--observed-step-ms: T = {tokens} given twice")
        out[tokens] = number
    return out


def _step_ms(run: Any, point_id: str | None, tokens: int) -> float | None:
    steps = run.steps
    if point_id is None or steps.empty:
        return None
    rows = steps[
        (steps["point_id"] == point_id)
        & (steps["tokens"] == tokens)
        & (steps["mode"] == run.mode)
        & (steps["status"] == "ok")
    ]
    return float(rows["median_us"].iloc[0]) / 1000.0 if len(rows) else None


def observed_view(
    run: Any, observed: dict[int | None, float], source: str, answer: str | None = None
) -> dict[str, Any] | None:
    """Per T: observed ms, predicted ms with today's settings and its band, predicted with the answer (`answer`: its
    point, once decided); and one verdict (explained / not explained / not judged) with the checks to run when the
    model does not explain the box."""
    if not observed or run.steps.empty:
        return None
    error = run.evidence.model_error.pct if run.simulated and run.evidence.model_error else None
    run_tokens = sorted({int(t) for t in run.steps["tokens"].unique()})
    wanted = [(t, ms) for t, ms in observed.items() if t is not None]
    if None in observed:
        wanted += [(t, observed[None]) for t in run_tokens if t not in observed]
    rows = []
    for tokens, ms in sorted(wanted):
        today = _step_ms(run, run.baseline, tokens)
        answer_ms = _step_ms(run, answer, tokens)
        row = {"tokens": tokens, "observed_ms": ms, "today_ms": today, "answer_ms": answer_ms, "explained": None}
        if today is not None and error is not None:
            low, high = today * (1 - error / 100.0), today * (1 + error / 100.0)
            row.update(band_ms=[low, high], explained=low <= ms <= high, ratio=ms / today)
        rows.append(row)
    judged = [r for r in rows if r["explained"] is not None]
    t_given = None not in observed
    if not run.simulated:
        verdict, explained = (
            "measured by commprof's harness on the box: a gap to the engine's number means the engine does not run "
            "what the sweep ran (its launch, its settings, its overlap)",
            None,
        )
    elif not judged:
        verdict, explained = "not judged: the model's expected error is unknown, or no prediction at these T", None
    elif any(r["explained"] for r in judged):
        hits = ", ".join(f"T={r['tokens']}" for r in judged if r["explained"])
        verdict, explained = f"the model explains the observation ({hits}: inside the expected error)", True
    else:
        nearest = min(judged, key=lambda r: abs(math.log(r["ratio"])))
        verdict = (
            f"the model does not explain this box: the engine's {nearest['observed_ms']:g} ms per step is "
            f"{nearest['ratio']:.1f}x the prediction with today's settings ({nearest['today_ms']:.2f} ms at "
            f"T={nearest['tokens']}), outside its expected error (±{error:g} %) at "
            + ("the T given" if t_given else "every T of the run")
            + ": do not act on the predicted answer before a check explains the gap"
        )
        explained = False
    return {
        "source": source,
        "mode": run.mode,
        "rows": rows,
        "explained": explained,
        "verdict": verdict,
        "checks": list(CHECKS) if explained is False else [],
        "t_given": t_given,
    }


def observed_decision(run: Any, answer: str | None) -> Observed | None:
    """The observation as the Decision carries it (`answer`: the point the answer sets): observed_view's figures and
    verdict and, where the model does not explain the observation, the ranked explanations on the run's box
    (explained_by), each with its verdict in words."""
    view = observed_view(run, run.options.observed, run.options.observed_source, answer)
    if view is None:
        return None
    unexplained = view["explained"] is False
    judged = [r for r in view["rows"] if r["explained"] is not None]
    found = explained_by(run, judged, view["source"]) if unexplained else None
    return Observed(
        **view,
        explanations=explanations(found) if found is not None else None,
        explanations_note=run.options.observed_box_note if unexplained else "",
    )


def explanations(found: Explained) -> Explanations:
    """commprof explain's answer in the Decision's terms: its JSON (Explained.to_dict) with each explanation's
    verdict in words and its fix only where it names a condition."""
    from commprof.explain.words import state_words

    data = found.to_dict()
    entries = [
        {**item, "state": state_words(e), "fix": e.evidence.fix if e.conditions else ""}
        for item, e in zip(data["explanations"], found.explanations)
    ]
    plain = msgspec.to_builtins({**data, "explanations": entries}, enc_hook=_item)
    return msgspec.convert(plain, Explanations)


def _item(value: Any) -> Any:
    """A numpy number (a fitted figure) as the Python number it is."""
    if hasattr(value, "item"):
        return value.item()
    raise NotImplementedError(f"not a number: {type(value).__name__}")


def _step_ops(run: Any, tokens: int) -> tuple[tuple[tuple[str, int, int], ...], int | None]:
    """The baseline's collectives in one step of T tokens as (collective, bytes, how many), and its ranks."""
    steps = run.steps
    rows = steps[
        (steps["point_id"] == run.baseline)
        & (steps["tokens"] == tokens)
        & (steps["mode"] == run.mode)
        & (steps["status"] == "ok")
    ]
    ops = rows["op_us"].iloc[0] if len(rows) and "op_us" in rows else None
    if not isinstance(ops, dict) or not ops.get("bytes"):
        return (), None
    collectives = ops.get("collectives") or ["all_reduce"] * len(ops["bytes"])
    counts = Counter((str(c), int(b)) for c, b in zip(collectives, ops["bytes"]))
    ranks = rows["tp"].iloc[0] if "tp" in rows else None
    return tuple((c, b, n) for (c, b), n in sorted(counts.items())), int(ranks) if ranks == ranks and ranks else None


def explained_by(run: Any, rows: list[dict[str, Any]], source: str) -> Explained | None:
    """The ranked explanations of the observed steps on the run's box, with the doctor's verdicts of meta.json (else
    those on the run's bundle) as the box's records; None where the run's box could not be read again or no step's
    ops are known. commprof.explain (the cost model, the doctor's readers) is imported here, by the runs that
    were given an observation, and by no other report."""
    box = run.options.observed_box
    if box is None:
        return None
    from commprof.doctor.result import CheckResult
    from commprof.explain.evidence import BoxRecords
    from commprof.explain.observations import Observation
    from commprof.explain.ranking import explain

    observations = []
    for row in rows:
        ops, ranks = _step_ops(run, row["tokens"])
        if ops and ranks:
            label = f"T={row['tokens']} step x{ranks}"
            time_us = row["observed_ms"] * 1000.0
            observations.append(Observation(label, ops, ranks, time_us, source, graph=run.mode == "graph"))
    doctor = run.meta.doctor
    checks = [CheckResult(**msgspec.structs.asdict(check)) for check in doctor.checks or []] if doctor else []
    records = BoxRecords(tuple(checks), "the doctor's verdicts in the run's meta.json") if checks else box.records
    try:
        return explain(box.topology, observations, records)
    except UsageError:
        return None
