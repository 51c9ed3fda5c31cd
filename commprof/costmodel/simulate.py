"""Predict every point of a sweep on a topology: the same step records a sweep writes, with source "simulated".

Step latency = the sum over the step plan's collectives of each op's predicted latency. NCCL points are
predicted by the cost model under the NCCL variables it knows (NCCL_ALGO, NCCL_PROTO, channel counts,
NCCL_P2P_LEVEL / NCCL_P2P_DISABLE); other implementations by their kernel model on the topology
(commprof.costmodel.kernels: published figures, or the floor of the algorithm they run), which every record
names with its expected error (`kernel_model`).
Pure: spec, topology and calibration in, records out.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timezone

from commprof.costmodel.alternatives import box_context, kernel_model, refusal
from commprof.costmodel.calibrated_sizes import OUTSIDE, Pricing, covering, judged_sizes
from commprof.costmodel.graph_sim import GRAPH_ERROR_BASIS, GraphModel, point_graph
from commprof.costmodel.kernels import KernelModel
from commprof.costmodel.latency import CostParams, default_algorithms, default_protocols, predict
from commprof.costmodel.topology import Topology, link_for
from commprof.errors import UsageError
from commprof.evidence import ModelError, calibration_error
from commprof.impls.registry import algorithm, fuses_rmsnorm, runs_on_nccl
from commprof.nccl_vocab import CHANNEL_VARIABLES, MODEL_PROTOCOLS, PLAN_COLLECTIVES, modelled_selection
from commprof.planner.plan import build_step_plan
from commprof.records.schema import MODES, StepRecord, step_record
from commprof.stats import summarize
from commprof.sweep.planning.spec import SweepPoint, SweepSpec
from commprof.units import MAX_TIME_US

# How far NCCL's uncalibrated model is from measurements: its median |error| over 8 KB-1 MB on the only 8-GPU
# nccl-tests log at hand (docs/cost-model.md, "Measured accuracy").
PRIOR_ERROR_PCT = 41.0
PRIOR_ERROR_BASIS = (
    "NCCL's uncalibrated model: median |error| 41 % over 8 KB-1 MB on the one 8-GPU nccl-tests log measured "
    "(docs/cost-model.md, Measured accuracy); calibrate on this box to narrow it"
)
NO_EFFECT_VARS = ("NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE")
MODELLED_VARS = (
    "NCCL_ALGO",
    "NCCL_PROTO",
    "NCCL_P2P_LEVEL",
    "NCCL_P2P_DISABLE",
    "NCCL_THREAD_THRESHOLDS",
    "NCCL_NTHREADS",
    "NCCL_GRAPH_FILE",  # commprof.costmodel.graph_sim
) + CHANNEL_VARIABLES


@dataclass
class NcclSetting:
    """How one point's NCCL variables change the model: transport, enabled pairs per collective, channels."""

    link: str
    algos: dict[str, tuple[str, ...]]
    protos: dict[str, tuple[str, ...]]
    min_channels: int | None = None
    max_channels: int | None = None
    thread_thresholds: tuple[int, ...] | None = None
    nthreads: int | None = None
    notes: list[str] = field(default_factory=list)


def _selection(variable: str, value: str) -> dict[str, set[str] | None]:
    """Per plan collective, the model's names the value enables; UsageError for what NCCL rejects at init."""
    try:
        return modelled_selection(variable, value)
    except ValueError as exc:
        raise UsageError(f"{variable}: {exc}") from None


def nccl_setting(topology: Topology, env: dict[str, str], ranks: int | None = None) -> NcclSetting:
    """Read the point's NCCL environment into the model's terms (UsageError where NCCL itself would fail)."""
    link = link_for(topology, env, ranks)
    notes = []
    if link == "shm" and not topology.p2p_supported and "NCCL_P2P_LEVEL" in env:
        notes.append(
            f"NCCL_P2P_LEVEL={env['NCCL_P2P_LEVEL']}: this box's driver refuses GPU peer access "
            "(topology p2p_supported = false), so NCCL still goes through host memory"
        )
    nvls = link == "nvlink" and "nvlink" in topology.links and topology.links["nvlink"].nvls_channels >= 2
    algos = {c: default_algorithms(c, nvls) for c in PLAN_COLLECTIVES}
    protos = {c: default_protocols(link) for c in algos}
    setting = NcclSetting(link=link, algos=algos, protos=protos, notes=notes)
    if "NCCL_ALGO" in env:
        for collective, chosen in _selection("NCCL_ALGO", env["NCCL_ALGO"]).items():
            if chosen is not None:
                possible = default_algorithms(collective, nvls)
                setting.algos[collective] = tuple(a for a in possible if a in chosen)
    if "NCCL_PROTO" in env:
        for collective, chosen in _selection("NCCL_PROTO", env["NCCL_PROTO"]).items():
            if chosen is not None:
                setting.protos[collective] = tuple(p for p in MODEL_PROTOCOLS if p in chosen)
        if link != "nvlink" and any("LL128" in p for p in setting.protos.values()):
            setting.notes.append("LL128 forced on a box without NVLink: NCCL warns this can corrupt data")
    for name in CHANNEL_VARIABLES:
        if name in env:
            try:
                count = int(env[name])
            except ValueError:
                raise UsageError(f"{name}={env[name]!r}: expected an integer") from None
            if name.startswith("NCCL_MIN"):
                setting.min_channels = max(setting.min_channels or 0, count)
            else:
                setting.max_channels = min(setting.max_channels or count, count)
    if "NCCL_THREAD_THRESHOLDS" in env:
        try:
            values = tuple(int(v) for v in env["NCCL_THREAD_THRESHOLDS"].split())
        except ValueError:
            values = ()
        if len(values) != 6:
            raise UsageError(f"NCCL_THREAD_THRESHOLDS={env['NCCL_THREAD_THRESHOLDS']!r}: expected six integers")
        setting.thread_thresholds = values
    if "NCCL_NTHREADS" in env:
        try:
            setting.nthreads = int(env["NCCL_NTHREADS"])
        except ValueError:
            raise UsageError(f"NCCL_NTHREADS={env['NCCL_NTHREADS']!r}: expected an integer") from None
    unknown = sorted(k for k in env if k not in MODELLED_VARS and k not in NO_EFFECT_VARS)
    if unknown:
        setting.notes.append(f"not modelled, predicted as NCCL's default: {', '.join(unknown)}")
    return setting


def params_for(
    topology: Topology, setting: NcclSetting, calibration: CostParams | None, ranks: int | None = None
) -> tuple[CostParams, str]:
    """The parameters for the point's transport (the calibration where it was fitted on that transport)
    with its channel count set by NCCL_MIN/MAX_*; and the calibration's name for the record."""
    if setting.link not in topology.links:
        raise UsageError(f"topology {topology.name} does not describe the {setting.link} transport this point uses")
    line_ranks = calibration.fit.get("ranks") if calibration is not None and calibration.line else None
    if line_ranks is not None and ranks is not None and line_ranks != ranks:
        setting.notes.append(
            f"calibration {calibration.source} is a line fitted at {line_ranks} ranks, this point runs {ranks}: "
            "NCCL's uncalibrated model used"
        )
        calibration = None
    elif calibration is not None and calibration.line and calibration.link == setting.link:
        setting.notes.append(
            f"calibration {calibration.source} is a latency + bandwidth line (the cost model did worse held out): "
            "every NCCL setting on this transport is predicted alike"
        )
    if calibration is not None and calibration.link == setting.link:
        params, name = calibration, calibration.source
    else:
        params, name = topology.prior(setting.link), "nccl-prior"
        if calibration is not None:
            setting.notes.append(
                f"calibration {calibration.source} is for {calibration.link}, this point runs over "
                f"{setting.link}: NCCL's uncalibrated model used"
            )
    params = replace(params, thread_thresholds=setting.thread_thresholds, nthreads=setting.nthreads)
    channels = params.channels
    if setting.min_channels:
        channels = max(channels, setting.min_channels)
    if setting.max_channels:
        channels = min(channels, setting.max_channels)
    if channels != params.channels:
        # NCCL duplicates rings to reach more channels (sharing the same links) and drops rings to go below:
        # fewer channels lose bandwidth, more only help messages that trimming would otherwise starve.
        cap = params.channels * params.channel_bw_gbps if channels > params.channels else None
        params = replace(params, channels=channels, bus_cap_gbps=cap)
    return params, name


def _stats(value: float) -> dict:
    """A predicted latency as a Stats object: one value, so every statistic equals it and cv is 0."""
    return summarize([value])


@dataclass(frozen=True)
class SimulatedRun:
    """What every point and search of one simulated sweep shares: the box, its calibration, the run's records."""

    topology: Topology
    """The box predicted on."""
    calibration: CostParams | None
    """A fitted cost model for the box's links; None: the NCCL prior."""
    run_id: str
    """The run id the records carry."""
    now: str | None = None
    """The records' time (ISO 8601); None: the time each point is simulated."""
    graphs: dict[str, GraphModel | str] | None = None
    """NCCL_GRAPH_FILE value -> the graph it names, or why it could not be read."""
    prior: ModelError | None = None
    """The uncalibrated model's expected error on this box, which an op outside the calibrated sizes carries;
    None: the prior's figure a prior-only simulation states (nccl_model_error)."""


def pricing(
    topology: Topology, env: dict[str, str], ranks: int, params: CostParams, calibration_name: str, run: SimulatedRun
) -> Pricing:
    """The point's pricing: `params` (its calibration's, as params_for set them) inside the calibration's judged
    sizes, the prior under the same NCCL variables outside."""
    judged = judged_sizes(params.fit) if calibration_name != "nccl-prior" else None
    prior_params = params
    if judged is not None:  # the prior under the same variables, for the sizes outside
        prior_params, _ = params_for(topology, nccl_setting(topology, env, ranks), None, ranks)
        prior_params, *_ = point_graph(env, prior_params, topology, prior_params.link, run.graphs)
    prior_error = run.prior or ModelError(**_pct_basis(nccl_model_error(prior_params, "nccl-prior", topology)))
    return Pricing(params, prior_params, judged, prior_error)


def _pct_basis(error: dict) -> dict:
    return {"pct": error["expected_error_pct"], "basis": error["error_basis"]}


def simulate_point(spec: SweepSpec, point: SweepPoint, run: SimulatedRun) -> list[StepRecord]:
    """One record per (T, mode) of the point, like the sweep writes; failures become a status and message."""
    topology, calibration, run_id, graphs = run.topology, run.calibration, run.run_id, run.graphs
    now = run.now or datetime.now(timezone.utc).isoformat(timespec="seconds")
    model = spec.model_shape
    tp = spec.tp or topology.gpus
    if tp > topology.gpus:
        raise UsageError(f"TP {tp} needs {tp} GPUs, topology {topology.name} has {topology.gpus}")
    records = []
    status, message, calibration_name = "ok", None, "nccl-prior"
    notes: list[str] = []
    setting = params = stated = graph = None
    prices = None
    try:
        setting = nccl_setting(topology, point.env, tp)
        params, calibration_name = params_for(topology, setting, calibration, tp)
        notes = setting.notes
        params, graph, graph_note, graph_refusal = point_graph(point.env, params, topology, setting.link, graphs)
        if graph_refusal is not None:
            status, message = "unsupported", graph_refusal
        elif graph_note is not None:
            notes.append(graph_note)
        prices = pricing(topology, point.env, tp, params, calibration_name, run)
    except UsageError as exc:
        status, message = "error", f"NCCL would refuse this configuration: {exc}"
    context = box_context(topology, tp, spec.dtype or model.dtype, tuple(spec.tokens), model.hidden_size)
    if status == "ok" and not runs_on_nccl(point.impl):
        refused = refusal(point.impl, context, point.options)
        stated = kernel_model(point.impl, topology) if refused is None else None
        if refused is not None:
            status, message = "unsupported", f"would not run on {topology.name}: {refused}"
        elif stated is None:
            status = "unsupported"
            message = (
                f"the cost model has no latency for {point.impl!r} on {topology.name} "
                f"(add [impls.{point.impl}] with published figures, or a [floor], to the topology file)"
            )
        else:
            notes.append(kernel_note(stated))
    if fuses_rmsnorm(point.impl):
        notes.append("residual add + RMSNorm after each all-reduce not modelled (communication only)")
    for tokens in spec.tokens:
        plan = build_step_plan(model, tp, tokens, spec.phase, spec.dtype, spec.plan_options)
        op_times: list[float] = []
        choices: dict[tuple, dict] = {}
        op_status, op_message = status, message
        refused = refusal(point.impl, context, point.options, tokens) if status == "ok" else None
        if refused is not None:
            op_status, op_message = "unsupported", f"would not run on {topology.name} at T = {tokens}: {refused}"
        outside: list[int] = []  # the NCCL ops priced by the prior, outside the calibrated sizes
        nccl_ops: list[tuple[int, bool]] = []  # (index in the step, priced by the prior) of each NCCL-priced op
        if op_status == "ok":
            cache: dict[tuple[str, int], float] = {}
            try:
                for op in plan.ops:
                    key = (op.collective, op.bytes)
                    if key not in cache:
                        if stated is not None and op.collective == "all_reduce" and stated.covers(op.bytes):
                            cache[key] = kernel_eager_us(stated, topology, point, op.bytes, tp)
                        else:
                            choice = predict(
                                prices.params(op.bytes),
                                op.collective,
                                op.bytes,
                                tp,
                                setting.algos[op.collective],
                                setting.protos[op.collective],
                            )
                            cache[key] = choice.time_us
                            choices[key] = {
                                "coll": op.collective,
                                "bytes": op.bytes,
                                "algo": choice.algo,
                                "proto": choice.proto,
                                "channels": choice.channels,
                                **({"calibrated": False} if prices.outside(op.bytes) else {}),
                            }
                    if key in choices:
                        nccl_ops.append((len(op_times), prices.outside(op.bytes)))
                        if prices.outside(op.bytes):
                            outside.append(op.bytes)
                    op_times.append(cache[key])
            except UsageError as exc:
                op_status, op_message = "error", f"NCCL would fail: {exc}"
        op_notes = list(notes)
        if calibration_name != "nccl-prior":
            fitted = set(params.fit.get("protocols", ()))
            guessed = sorted({c["proto"] for c in choices.values() if c.get("calibrated", True)} - fitted)
            if guessed:
                op_notes.append(f"{', '.join(guessed)} not in the calibration data: NCCL's per-hop figure used")
        if op_status == "ok" and op_notes:
            op_message = "; ".join(op_notes)
        nccl = (
            {
                "version": None,
                "transports": {"intra": setting.link},
                "channels": params.channels,
                "choices": list(choices.values()),
                **nccl_model_error(params, calibration_name, topology),
                **(graph_error(graph, params, calibration_name) if graph is not None else {}),
            }
            if op_status == "ok"
            else None
        )
        if nccl is not None and outside:
            # The step's error covers its ops': the calibration's inside its judged sizes, the prior's outside.
            note = prices.note(len(outside), sorted(set(outside)))
            nccl["outside_calibration"] = note
            own = nccl["expected_error_pct"]
            nccl["expected_error_pct"] = covering(
                [(op_times[i], prices.prior_error.pct if prior else own) for i, prior in nccl_ops]
            )
            nccl["error_basis"] = (
                f"{nccl['error_basis']}; {len(outside)} op(s) {OUTSIDE} ({prices.judged.describe()}): "
                f"{note['error_basis']}; the step's error weighs each op's by its predicted time"
            )
            op_notes.append(f"{len(outside)} op(s) {OUTSIDE} ({prices.judged.describe()}) priced by the prior")
            if op_status == "ok":
                op_message = "; ".join(op_notes)
        if op_status == "ok":
            _check_predicted(op_times, topology)
        for mode in MODES:
            step_us, op_us, mode_message = None, None, op_message
            if op_status == "ok" and mode == "eager":
                step_us = _stats(sum(op_times))
                op_us = _op_stats(plan, op_times)
            elif op_status == "ok":
                # A CUDA graph removes the CPU launch of every op; the op itself still runs.
                graph_times = [max(t - topology.launch_overhead_us, 0.0) for t in op_times]
                step_us = _stats(sum(graph_times))
                op_us = _op_stats(plan, graph_times)
                assumed = (
                    f"graph mode = eager minus the topology's assumed launch overhead of "
                    f"{topology.launch_overhead_us:g} µs per op"
                )
                mode_message = f"{op_message}; {assumed}" if op_message else assumed
            records.append(
                step_record(
                    source="simulated",
                    run_id=run_id,
                    point_id=point.point_id,
                    point=point.to_dict(),
                    backend="nccl",
                    world_size=tp,
                    status=op_status,
                    message=mode_message,
                    time=now,
                    calibration=calibration_name,
                    model=model.name,
                    phase=spec.phase,
                    tp=tp,
                    tokens=tokens,
                    dtype=plan.model.dtype,
                    plan=plan.summary(),
                    mode=mode,
                    timing="simulated",
                    step_us=step_us,
                    op_us=op_us,
                    fused_rmsnorm=fuses_rmsnorm(point.impl),
                    nccl=nccl,
                    iterations=spec.iterations,
                    warmup=spec.warmup,
                    kernel_model=stated.describe() if stated is not None else None,
                )
            )
    return records


def nccl_model_error(params: CostParams, calibration_name: str, topology: Topology | None = None) -> dict:
    """How far to trust the NCCL predictions of a record: the prior's measured error (the box prior's, for a
    topology read from a bundle) or the calibration's held-out error (evidence.calibration_error: never the
    in-sample fit, which is a lower bound); unknown where the calibration records none."""
    if calibration_name == "nccl-prior" and topology is not None and topology.prior_error is not None:
        return {"expected_error_pct": topology.prior_error.pct, "error_basis": topology.prior_error.basis}
    if calibration_name == "nccl-prior":
        return {"expected_error_pct": PRIOR_ERROR_PCT, "error_basis": PRIOR_ERROR_BASIS}
    error = calibration_error(calibration_name, params.fit)
    return {"expected_error_pct": error.pct, "error_basis": error.basis}


def graph_error(graph: GraphModel, params: CostParams, calibration_name: str) -> dict:
    """A graph-file point's record: the file it ran with, and an error no smaller than NCCL's model's."""
    error = nccl_model_error(params, calibration_name)["expected_error_pct"]
    return {
        "graph": {"file": graph.name, "sha256": graph.sha256, "channels": graph.channels},
        "expected_error_pct": max(error or PRIOR_ERROR_PCT, PRIOR_ERROR_PCT),
        "error_basis": GRAPH_ERROR_BASIS,
    }


def _check_predicted(op_times: list[float], topology: Topology) -> None:
    """UsageError where the figures predict what no step takes: a step beyond a day (a bandwidth of 1e-300), or an
    eager op no longer than the launch a CUDA graph removes (its graph time would be 0, and every gain 0 / 0)."""
    if sum(op_times) > MAX_TIME_US:
        raise UsageError(
            f"topology {topology.name}: its figures predict {sum(op_times) / 60e6:.3g} minutes for one step, beyond "
            "any step's day: check its bandwidths and latencies"
        )
    if op_times and min(op_times) <= topology.launch_overhead_us:
        raise UsageError(
            f"topology {topology.name}: launch_overhead_us = {topology.launch_overhead_us:g} µs is at least the "
            f"{min(op_times):.3g} µs predicted for one eager op, so a CUDA graph would remove all of it: measure "
            "eager against graph on the box and state the difference"
        )


def _op_stats(plan, times: list[float]) -> dict:
    """Predicted per-op times as the records' columnar op_us (every statistic the one predicted value)."""
    return {
        "sites": [op.site for op in plan.ops],
        "collectives": [op.collective for op in plan.ops],
        "draft": [op.draft for op in plan.ops],
        "bytes": [op.bytes for op in plan.ops],
        **{k: list(times) for k in ("min", "median", "mean", "p90", "max")},
        "cv": [0.0] * len(times),
    }


def kernel_eager_us(model: KernelModel, topology: Topology, point, nbytes: int, ranks: int) -> float:
    """A kernel model's eager time of one all-reduce: graph-timed figures (and the floor) plus the launch a CUDA
    graph removes; eager-timed figures as they are."""
    chosen = algorithm(point.impl, point.options, nbytes, ranks)
    graph = model.graph_us(nbytes, ranks, chosen, topology.floor)
    return graph if model.basis == "published" and model.timed == "eager" else graph + topology.launch_overhead_us


def kernel_note(model: KernelModel) -> str:
    """The record's note on a kernel model: basis, source, expected error, and where NCCL takes over."""
    error = (
        f"expected error ±{model.expected_error_pct:g} %"
        if model.expected_error_pct is not None
        else "expected error unknown, so no verdict rests on it"
    )
    basis = (
        f"published figures ({model.source})"
        if model.basis == "published"
        else f"the floor of its algorithm{f' plus {model.overhead_us:g} µs' if model.overhead_us else ''} ({model.source})"
    )
    return f"{model.impl}: predicted from {basis}, {error}" + (
        f"; NCCL above {model.max_bytes} B" if model.max_bytes else ""
    )
