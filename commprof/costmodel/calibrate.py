"""Fit the cost model's box parameters (fixed overhead, per-hop latency, per-channel bandwidth) to measurements.

Pure: records in, parameters and error tables out. The fit minimises the mean squared log error (so a
10 % miss at 8 KB weighs as much as one at 1 GB) plus a small pull toward NCCL's own figures, which keeps
parameters that the data cannot tell apart (overhead vs. per-hop latency at one rank count) near the prior.
NCCL's algorithm/protocol choice is always made with NCCL's own figures, as NCCL does.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, replace
from statistics import median

import numpy as np

from commprof.costmodel.latency import COLLECTIVES, PROTOS, CostParams, Op, estimate, predict
from commprof.costmodel.line_fit import Line, fit_line, median_abs_pct
from commprof.errors import UsageError
from commprof.impls.registry import fuses_rmsnorm, runs_on_nccl
from commprof.planner.plan import SITE_COLLECTIVES

SIZE_BANDS = (
    (0, 8 << 10, "< 8 KB"),
    (8 << 10, 64 << 10, "8-64 KB"),
    (64 << 10, 1 << 20, "64 KB-1 MB"),
    (1 << 20, 16 << 20, "1-16 MB"),
    (16 << 20, math.inf, ">= 16 MB"),
)
HOLDOUT_RANGE = (8 << 10, 1 << 20)  # sizes the holdout test fits on (every other one) and predicts (the rest)
RIDGE = 0.01  # weight of the pull toward NCCL's figures, per parameter, in log units
PRIOR_OVERHEAD_US = 1.0  # where the fitted overhead starts and is pulled to (NCCL's own is 0)


@dataclass(frozen=True)
class Sample:
    """One measured latency of one collective, with the NCCL constraints it ran under."""

    group: str
    collective: str
    bytes: int
    ranks: int
    time_us: float
    algos: tuple[str, ...] | None = None
    protos: tuple[str, ...] | None = None
    cohort: str = ""  # the box, rank count and NCCL version it was measured at (commprof.costmodel.cohorts)


def samples_from_records(records: list[dict], constraints) -> tuple[list[Sample], list[str]]:
    """Samples from nccl-tests / collective records and from eager step records' per-op medians (op_us).

    constraints(point, collective) -> (algos, protos) that point's NCCL may use, or None when the point is
    not plain NCCL on the calibrated transport (skipped). Returns the samples and a note per kind of skip.
    """
    samples: list[Sample] = []
    skipped: Counter[str] = Counter()
    for record in records:
        point = record.get("point") or {}
        ranks = record.get("world_size")
        group = f"{record.get('point_id')} {point.get('label', '')}".strip()
        if record.get("status") != "ok" or record.get("source") == "simulated":
            skipped["not ok, or modelled"] += 1
        elif record.get("backend") not in ("nccl", None):  # imported nccl-tests rows carry no backend
            skipped[f"measured on {record.get('backend')}, not NCCL"] += 1
        elif not isinstance(ranks, int):
            skipped["rank count unknown (the log states none: import-nccl-tests --ranks N)"] += 1
        elif ranks < 2:
            skipped["one rank (no communication)"] += 1
        elif record.get("kind") == "collective":
            if record.get("collective") not in COLLECTIVES:
                # broadcast, reduce, all-to-all, ...: the cost model has no formula to fit them to.
                skipped[f"{record.get('collective')} (the cost model fits {', '.join(COLLECTIVES)})"] += 1
                continue
            rule = constraints(point, record.get("collective"))
            if rule is None:
                skipped[f"not plain NCCL {record.get('collective')} on this transport"] += 1
                continue
            samples.append(
                Sample(
                    f"{group} ({record['collective']} x{ranks})",
                    record["collective"],
                    int(record["bytes"]),
                    ranks,
                    float(record["time_us"]),
                    *rule,
                )
            )
        elif record.get("kind") == "step" and record.get("mode") == "eager" and record.get("op_us"):
            if constraints(point, "all_reduce") is None:
                skipped[f"{point.get('impl')} {point.get('env') or ''}: not plain NCCL on this transport"] += 1
                continue
            samples.extend(_op_samples(record, f"{group} (T={record.get('tokens')} x{ranks})", ranks, constraints))
    usable = [s for s in samples if s.time_us > 0 and math.isfinite(s.time_us)]
    if len(usable) < len(samples):
        skipped["a latency of 0 or less, or not finite (not a measurement)"] += len(samples) - len(usable)
    return usable, [f"skipped {count} record(s): {why}" for why, count in skipped.items()]


def nccl_constraints(topology, link: str):
    """The `constraints` for samples_from_records: plain NCCL points on `link`, with the pairs their env allows.

    Points whose env the fit cannot represent (channel counts, thresholds, unmodelled variables) are skipped.
    """
    from commprof.costmodel.simulate import nccl_setting

    def rule(point: dict, collective: str):
        impl = point.get("impl", "nccl")
        if not runs_on_nccl(impl) or fuses_rmsnorm(impl):
            return None
        try:
            setting = nccl_setting(topology, point.get("env") or {})
        except UsageError:
            return None
        if (
            setting.link != link
            or setting.notes
            or setting.min_channels
            or setting.max_channels
            or setting.thread_thresholds
            or setting.nthreads
        ):
            return None
        return setting.algos[collective], setting.protos[collective]

    return rule


def _op_samples(record: dict, group: str, ranks: int, constraints) -> list[Sample]:
    """One sample per distinct (collective, bytes) of a step: the median of its ops' median latencies."""
    ops = record["op_us"]
    sites = ops.get("sites", [])
    # Records name each op's collective; older ones only their sites (the logits gather, all-reduces elsewhere).
    collectives = ops.get("collectives") or [
        SITE_COLLECTIVES.get(str(s).rsplit(".", 1)[-1], "all_reduce") for s in sites
    ]
    by_size: dict[tuple[str, int], list[float]] = {}
    for collective, nbytes, value in zip(collectives, ops.get("bytes", []), ops.get("median", [])):
        if value is None:
            continue
        by_size.setdefault((collective, int(nbytes)), []).append(float(value))
    return [
        Sample(group, collective, nbytes, ranks, median(values), *constraints(record["point"], collective))
        for (collective, nbytes), values in sorted(by_size.items())
    ]


def predicted(params: CostParams, sample: Sample) -> float:
    return predict(params, sample.collective, sample.bytes, sample.ranks, sample.algos, sample.protos).time_us


def abs_pct_errors(params: CostParams, samples: list[Sample]) -> list[float]:
    """Each sample's absolute % error under `params`, each distinct op predicted once."""
    times: dict[tuple, float] = {}
    for s in samples:
        key = (s.collective, s.bytes, s.ranks, s.algos, s.protos)
        if key not in times:
            times[key] = predicted(params, s)
    return [
        100.0 * abs(times[(s.collective, s.bytes, s.ranks, s.algos, s.protos)] - s.time_us) / s.time_us for s in samples
    ]


def fit(samples: list[Sample], prior: CostParams, ridge: float = RIDGE) -> CostParams:
    """Parameters that best explain `samples`, starting from (and pulled toward) `prior`.

    Fits the overhead, the per-channel bandwidth, and the per-hop latency of each protocol NCCL picks
    for some sample; the other protocols keep the prior's figure.
    """
    if not samples:
        raise ValueError("no samples to fit")
    # NCCL's choice depends only on the prior: fix it once per distinct sample. The loss estimates each distinct
    # (op, choice) once and spreads it over its samples: 20,000 repeats of one size cost one estimate, not 20,000.
    keys = [(s.collective, s.bytes, s.ranks, s.algos, s.protos) for s in samples]
    distinct = list(dict.fromkeys(keys))
    choices = [predict(prior, *key) for key in distinct]
    ops = [Op(collective, nbytes, ranks) for collective, nbytes, ranks, _, _ in distinct]
    position = {key: i for i, key in enumerate(distinct)}
    where = np.array([position[key] for key in keys])
    used = sorted({c.proto for c in choices}, key=PROTOS.index)
    start = np.log([PRIOR_OVERHEAD_US, prior.channel_bw_gbps] + [max(prior.hop_us[p], 0.05) for p in used])

    def params_at(x: np.ndarray) -> CostParams:
        values = np.exp(x)
        hop = dict(prior.hop_us)
        hop.update({p: float(v) for p, v in zip(used, values[2:])})
        return replace(
            prior,
            overhead_us=float(values[0]),
            channel_bw_gbps=float(values[1]),
            hop_us=hop,
            nccl_bw_gbps=prior.selection_bw_gbps,
        )

    log_measured = np.log([s.time_us for s in samples])

    def loss(x: np.ndarray) -> float:
        params = params_at(x)
        times = np.array([estimate(params, op, c.algo, c.proto).time_us for op, c in zip(ops, choices)])
        residual = np.log(times)[where] - log_measured
        return float(np.mean(residual**2) + ridge * np.sum((x - start) ** 2))

    best_x, best_loss = start, loss(start)
    for shift in (0.0, 1.5, -1.0):  # restarts: a larger or smaller overhead, the usual ambiguity
        x0 = start.copy()
        x0[0] += shift
        x, value = nelder_mead(loss, x0)
        if value < best_loss:
            best_x, best_loss = x, value
    fitted = params_at(best_x)
    return replace(fitted, fit={"samples": len(samples), "loss": round(best_loss, 6), "protocols": used})


def nelder_mead(
    f, x0: np.ndarray, step: float = 0.3, max_iter: int = 800, tol: float = 1e-10
) -> tuple[np.ndarray, float]:
    """Minimise f from x0 with the Nelder-Mead simplex (scipy is not a dependency; a handful of parameters)."""
    simplex = [np.array(x0, dtype=float)]
    for i in range(len(x0)):
        point = np.array(x0, dtype=float)
        point[i] += step
        simplex.append(point)
    values = [f(p) for p in simplex]
    for _ in range(max_iter):
        order = np.argsort(values)
        simplex = [simplex[i] for i in order]
        values = [values[i] for i in order]
        if abs(values[-1] - values[0]) < tol:
            break
        centroid = np.mean(simplex[:-1], axis=0)
        reflected = centroid + (centroid - simplex[-1])
        f_reflected = f(reflected)
        if f_reflected < values[0]:
            expanded = centroid + 2.0 * (centroid - simplex[-1])
            f_expanded = f(expanded)
            simplex[-1], values[-1] = (expanded, f_expanded) if f_expanded < f_reflected else (reflected, f_reflected)
        elif f_reflected < values[-2]:
            simplex[-1], values[-1] = reflected, f_reflected
        else:
            contracted = centroid + 0.5 * (simplex[-1] - centroid)
            f_contracted = f(contracted)
            if f_contracted < values[-1]:
                simplex[-1], values[-1] = contracted, f_contracted
            else:
                simplex = [simplex[0] + 0.5 * (p - simplex[0]) for p in simplex]
                values = [f(p) for p in simplex]
    best = int(np.argmin(values))
    return simplex[best], values[best]


def band_errors(params: CostParams, samples: list[Sample]) -> list[dict]:
    """Median and max absolute % error per size band (bands without samples left out)."""
    rows = []
    errors = abs_pct_errors(params, samples)
    for low, high, name in SIZE_BANDS:
        band = [e for s, e in zip(samples, errors) if low <= s.bytes < high]
        if band:
            rows.append({"band": name, "n": len(band), "median_pct": median(band), "max_pct": max(band)})
    return rows


@dataclass(frozen=True)
class Holdout:
    """The accuracy test on one log: fit on every other size in 8 KB-1 MB, predict the others."""

    group: str
    ranks: int
    fit_sizes: tuple[int, ...]
    held_sizes: tuple[int, ...]
    held_median_pct: float  # held-out sizes inside 8 KB-1 MB: the figure with the 15 % target
    rest_median_pct: float  # every size not fitted on, including outside 8 KB-1 MB
    prior_median_pct: float  # NCCL's uncalibrated model, all sizes of the log
    prior_held_median_pct: float
    params: CostParams
    line_held_median_pct: float  # a latency + bandwidth line fitted on the same sizes, on the same held-out sizes
    line: Line


def holdout(samples: list[Sample], prior: CostParams) -> list[Holdout]:
    """One Holdout per group (one run of one log) with at least 4 sizes in the holdout range."""
    results = []
    groups: dict[str, list[Sample]] = {}
    for sample in samples:  # one pass: 20,000 groups of one log made this quadratic
        groups.setdefault(sample.group, []).append(sample)
    for group, members in sorted(groups.items()):
        sizes = sorted({s.bytes for s in members if HOLDOUT_RANGE[0] <= s.bytes <= HOLDOUT_RANGE[1]})
        if len(sizes) < 4:
            continue
        fit_sizes, held_sizes = tuple(sizes[0::2]), tuple(sizes[1::2])
        params = fit([s for s in members if s.bytes in fit_sizes], prior)
        held = [s for s in members if s.bytes in held_sizes]
        rest = [s for s in members if s.bytes not in fit_sizes]
        fitted = [s for s in members if s.bytes in fit_sizes]
        line = fit_line([s.bytes for s in fitted], [s.time_us for s in fitted])
        results.append(
            Holdout(
                group=group,
                ranks=members[0].ranks,
                fit_sizes=fit_sizes,
                held_sizes=held_sizes,
                held_median_pct=median(abs_pct_errors(params, held)),
                rest_median_pct=median(abs_pct_errors(params, rest)),
                prior_median_pct=median(abs_pct_errors(prior, members)),
                prior_held_median_pct=median(abs_pct_errors(prior, held)),
                params=params,
                line_held_median_pct=median_abs_pct(line, [s.bytes for s in held], [s.time_us for s in held]),
                line=line,
            )
        )
    return results
