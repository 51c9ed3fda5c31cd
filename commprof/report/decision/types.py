"""The Decision: everything any output of a run shows, decided once by the analysis (report/analysis/decide.py) and
written whole as summary.json. Each part is what one step of the decision made, each step reading only what the
steps before it decided: the environment the numbers come from, the claims, the NCCL environment (answer (a)), the
routing per size, the fused kinds, the verify steps, speculation, the engine settings, the measurement plan of a
simulation, the headline; then the tables and plotted series the page shows. Types only, frozen (msgspec)."""

from __future__ import annotations

from typing import Any, Literal, get_args

from commprof.report.decision.claim import Claim, Frozen
from commprof.report.decision.observation import Observed
from commprof.report.decision.tables import Tables

# The file that applies answer (a): NCCL's environment, or the example tuner plugin's per-size rules.
NcclFile = Literal["recommend.env", "nccl_tuner.conf"]
RECOMMEND_ENV, TUNER_CONF = get_args(NcclFile)

# ----------------------------------------------------------------------------------------------- the run


class EvidenceFacts(Frozen):
    """Where the run's numbers come from (commprof.evidence.Evidence) and the rule its verdicts follow, in words."""

    level: str  # measured / simulated / imported
    label: str  # "measured on nccl", "simulated with nccl-prior (expected error ±25 %)"
    backend: str | None
    calibration: str | None
    expected_error_pct: float | None
    expected_error_basis: str | None
    calibration_boxes: str | None
    origin: list[str]
    drift_pct: float | None
    noise_floor_pct: float | None  # measured: the noise floor of the run's interleaved confirmation (None: none made)
    rule: str  # the rule with this run's figures
    uncertainty: str  # "measurement noise", "the model's expected error"
    measured: str  # "measured", "predicted", "imported"
    measurement: str  # "measurement", "prediction", "import"
    uncalibrated: bool


class RunFacts(Frozen):
    """The run the Decision is of, and what the user told the report."""

    run_id: str
    name: str
    source: str  # the records' source: measured, simulated, nccl-tests
    simulated: bool
    mode: str | None  # the headline mode
    mode_reason: str
    baseline: str | None  # the baseline's point id
    baseline_requested: str | None
    backend: str  # what the baseline ran on ("nccl", "gloo")
    model: str | None
    tp: int | None
    world_size: int | None
    records: int
    status_counts: dict[str, int]
    failed: int
    all_failed: bool
    has_steps: bool
    tokens: list[int]
    complete: bool | None  # null where no sweep planned the run or its plan was not recorded
    progress: str | None
    shared_gpus: bool
    remeasured: dict[str, str]  # old point id -> the id that counts
    compute: str  # the compute times in words
    compute_given: bool
    compute_source: str
    draft_ms: float | None
    accepts: list[float]
    engines: list[str]  # the engines asked for: the only ones any output names


# ------------------------------------------------------------------------------------- 1. the environment


class Notice(Frozen):
    level: str  # "sim", "shared", "fail", "warn", "info"
    text: str


class CalibrationUse(Frozen):
    """A calibration given to the simulation: applied to every point, or to none, and why."""

    file: str
    applied: bool
    why: str  # where it was fitted, where applied, and why it holds or does not


class Environment(Frozen):
    """Where the numbers come from: the box, the calibration, the doctor, what NCCL chose, the page's notices."""

    evidence: EvidenceFacts
    provenance: list[str]  # the head of every exported file
    notices: list[Notice]  # the page's banners, in the order they are shown
    not_a_result: list[str]  # why numbers here are not a tuning result (failing doctor checks, shared GPUs, ...)
    calibration: CalibrationUse | None
    hardware: str
    facts: list[tuple[str, str]]
    versions: list[tuple[str, str]]
    launch_env: list[tuple[str, str]]
    gpus: dict[str, Any] | None  # meta.json's GPU list as a table (columns, rows)
    topology: dict[str, Any] | None  # the probe's, the preset's or the bundle's topology as the page shows it
    doctor: dict[str, Any] | None
    nccl_title: str
    nccl_note: str
    nccl_choices: list[dict[str, Any]]  # what NCCL ran for the baseline and the answer's point, per T
    observed: Observed | None  # the engine's observation beside the prediction
    drift: dict[str, Any] | None  # the baseline's drift over the run: sentence, exceeded, samples
    # The interleaved confirmation (measured runs whose folder holds interleaved.jsonl): the baseline's
    # measurements, each candidate beside them, the noise floor and the sentence; None: the run made none.
    interleaved: dict[str, Any] | None
    spacing: dict[str, Any] | None
    box: dict[str, Any] | None  # a run simulated from a doctor bundle: its transports per GPU pair
    untested: dict[str, str]  # simulated points no verdict rests on -> why
    not_measured: dict[str, list[str]]  # why points of (a)'s implementation never ran -> their ids


# ------------------------------------------------------------------------------------ 2. answer (a): NCCL


class PointRef(Frozen):
    point_id: str
    label: str
    impl: str
    settings: str
    env: dict[str, str]
    total_us: float | None = None
    p90_total_us: float | None = None
    tokens: list[int] = []


class TunerInput(Frozen):
    """The fastest point at one size of the run, and what NCCL ran there."""

    collective: str
    bytes: int
    tokens: int
    point_id: str
    label: str
    algorithm: str | None
    protocol: str | None
    note: str | None


class Tuner(Frozen):
    """nccl_tuner.conf's content: its rules and the per-size winners behind them."""

    fields: list[str]  # the plugin's CSV fields, the header line
    rules: list[str]  # CSV lines
    inputs: list[TunerInput]
    ranges: dict[str, tuple[int, int]]  # collective -> the run's sizes
    reach: dict[str, tuple[int, int]]  # collective -> the sizes its rules reach
    no_rule: str


class AnswerAtT(Frozen):
    """What the answer runs at one T in the headline mode: its point, its step time and the claim against the
    baseline (the NCCL environment's point, the tuner's winner at T, or an implementation the routes take T to)."""

    tokens: int
    baseline_us: float | None
    point_id: str | None  # what the files set live at T
    answer_us: float | None
    route_point_id: str | None  # what the routes name at T (differs where an engine switch is left off)
    claim: str | None
    settings: str  # "p001: NCCL_P2P_LEVEL=SYS", "s2-p001: flashinfer-pcie-ipc (NCCL defaults)"


class NcclAnswer(Frozen):
    """Answer (a): one NCCL file (or none), the environment or the per-size rules it holds, and the claim."""

    file: NcclFile | None  # None: no file applies
    live: bool  # its lines act when sourced (measured, confirmed, complete); else every line is commented out
    why: str
    alternative: str | None
    env: dict[str, str]  # what recommend.env holds
    withdrawn_env: dict[str, str]
    point: PointRef | None  # the point whose environment recommend.env holds (the baseline's where kept)
    fastest: PointRef | None
    baseline_total_us: float | None
    claim: str | None  # the environment over every T against the baseline
    fastest_claim: str | None  # the fastest against the exported point, where a variable was dropped
    keeps_baseline: bool
    sets: bool  # sets an environment other than the baseline's, beyond error
    dropped: list[str]
    withheld: str | None
    # The interleaved confirmation's word on the answer, one sentence ("confirmed: ...", "not confirmed: ...");
    # None: the run made no confirmation, and its first pass decides.
    confirmation: str | None
    keep: str  # what keeping the baseline means, in words
    notes: list[str]  # recommend.env's comment lines
    graph_notes: list[str]
    graph_text: str | None
    tuner: Tuner
    per_t: list[AnswerAtT]


# ------------------------------------------------------------------------------------- 3. routing per size


class Route(Frozen):
    """One size band of one collective in one mode: what runs there, against what, and the claim."""

    collective: str
    mode: str
    min_bytes: int
    max_bytes: int
    tokens: list[int]
    impl: str
    options: dict[str, Any]
    point_id: str
    label: str
    nccl_env: dict[str, str]
    judged_against: str
    kept: bool
    live: bool  # what the files set runs it (NCCL keeps it, or a live engine switch)
    claim: str | None  # the band's comparison at its largest size (None: nothing compared)
    compared: str  # the implementation the claim sets against the baseline ("" where none)
    reason: str  # why, in words, once
    at_bytes: int
    time_us: float | None
    baseline_us: float | None
    floor_us: float | None
    pct_of_floor: float | None
    evidence: str  # "simulated (expected error ±50 %)"
    boundary: str  # how the upper edge was placed


class RoutingPlan(Frozen):
    """The routing plan's figure and notes (its bands are the Decision's routes)."""

    mode: str
    rule: str
    floor: str
    ranks: int | None
    floor_figures: dict[str, Any] | None
    curves: list[dict[str, Any]]
    gaps: list[dict[str, Any]]
    below_floor: str
    crossovers: list[dict[str, Any]]  # what each crossover search found


# --------------------------------------------------------------------------- 4. fused kinds, (b), table 1


class FusedRow(Frozen):
    """(c) at one T: the fastest fused kind against its unfused reference."""

    tokens: int
    point_id: str
    label: str
    impl: str
    settings: str
    median_us: float | None
    reference: str | None
    reference_us: float | None
    saved_pct: float | None
    speedup: float | None
    claim: str | None
    reason: str  # why it is not compared, where it is not


# ------------------------------------------------------------------------------- 5. verify steps and speculation


class VerifyStep(Frozen):
    """One verify T: the verify latency before (the baseline) and with what the answer applies; its claim derives
    from the communication claim at T."""

    tokens: int
    point_id: str | None
    before_ms: float
    after_ms: float
    comm_before_ms: float | None
    comm_after_ms: float | None
    applied: bool  # the answer changes what runs at T
    claim: str | None
    tps: list[tuple[float | None, float | None]]  # per accept length: tokens/s before, after


class Speculation(Frozen):
    setting: str  # the projection rows the card reads: "recommended" or "baseline"
    verdict: str  # the card's one sentence
    noise: bool
    lead: str


# ---------------------------------------------------------------------------------------- 6. engine settings


class EngineSetting(Frozen):
    """What one engine is told for one routed band, and whether the files set it live."""

    engine: str
    impl: str
    min_bytes: int
    max_bytes: int
    variables: list[tuple[str, str]]
    live: bool
    why: str
    version: str
    workspace: str


class EngineHint(Frozen):
    """A fused kind's engine flag, with the version it was written for; `setting` empty: no setting (engine work)."""

    engine: str
    setting: str
    version: str
    why: str
    untested: str = ""  # why it stays commented out


class Engines(Frozen):
    settings: list[EngineSetting]
    hints: list[EngineHint]
    paths: list[dict[str, Any]]  # per engine asked for: each op group's path today and with the answer
    fusion_refused: dict[str, str]
    left_out: list[str]  # what no file expresses, and why


# ------------------------------------------------------------------------------- 7. a simulation's plan


class Candidate(Frozen):
    """A setting a simulation proposes to measure, ranked by predicted gain, the model's error as its range."""

    rank: int
    point_id: str
    label: str
    impl: str
    options: dict[str, Any]
    env: dict[str, str]
    what: str  # "NCCL environment", "all-reduce implementation", "fused all-reduce + RMSNorm"
    gain_pct: float  # predicted % less step communication (the step's collectives), at its best T
    low_pct: float | None  # gain - error (None: the error is unknown)
    high_pct: float | None  # gain + error, at most 100
    tokens: int
    claim: str


class MeasurementPlan(Frozen):
    """What a simulated run proposes: the baseline and the ranked candidates, the sweep that measures them
    (confirm.toml) and the one command."""

    baseline: PointRef | None
    candidates: list[Candidate]
    run: dict[str, Any]  # confirm.toml's [run]
    report: dict[str, Any]  # confirm.toml's [report]
    command: str
    why: str


# -------------------------------------------------------------------------------------------- 8. headline


class Headline(Frozen):
    text: str  # at most 25 words: the answer, its figure, its basis
    claim: str | None  # the claim its figure is
    noise: bool  # nothing told apart: shown as such
    below: list[str]  # qualifications, under it


# ----------------------------------------------------------------------------------------------- the whole


class Decision(Frozen):
    """A run's one answer, whole: what every output of the run shows."""

    run: RunFacts
    environment: Environment
    claims: list[Claim]
    nccl: NcclAnswer
    routes: list[Route]
    routing: RoutingPlan | None
    fused: list[FusedRow]
    steps: list[VerifyStep]
    speculation: Speculation
    engines: Engines
    plan: MeasurementPlan | None
    headline: Headline
    unconfirmed: str  # why the predicted answer is withdrawn: the box contradicts it ("" where it stands)
    tables: Tables
    folder: str = "."  # where its files are, in the report's folder ("." for a single run)
    files: dict[str, str] = {}  # file name -> its path in the report's folder

    def claim(self, claim_id: str | None) -> Claim | None:
        """The claim of that id (None: none, or no id)."""
        if claim_id is None:
            return None
        return next((c for c in self.claims if c.id == claim_id), None)

    def route(self, collective: str, mode: str, nbytes: int) -> Route | None:
        return next(
            (
                r
                for r in self.routes
                if (r.collective, r.mode) == (collective, mode) and r.min_bytes <= nbytes <= r.max_bytes
            ),
            None,
        )


class CostModelCheck(Frozen):
    """One measured (or imported) run against one simulated run, on what both hold."""

    measured: str
    measured_source: str
    measured_label: str
    simulated: str
    calibration: str
    kind: str  # "step" or "collective"
    mode: str | None
    band: float
    summary: dict[str, Any]
    pairs: list[dict[str, Any]]


class Report(Frozen):
    """summary.json: each run's Decision, the measured-vs-simulated checks, and why the runs cannot be compared."""

    format: int
    generated: str  # when the report was rendered (UTC), as its page says it
    runs: list[Decision]
    costmodel_checks: list[CostModelCheck]
    incomparable: str | None
