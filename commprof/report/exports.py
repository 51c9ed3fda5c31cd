"""What a user pastes: recommend.env, NCCL tuner-plugin rules, engine flags, nccl-tests tables, summary, CSV.

Text builders are pure (DataFrames and dicts in, strings out); only write_text / write_json_file touch
files. Every file says which run and which source (measured / simulated / imported) it came from.
"""

from __future__ import annotations

import json
import math
import shlex
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from commprof.nccl_vocab import ALGORITHMS, CHANNEL_VARIABLES, COLLECTIVES, ENV_NAME, PROTOCOLS, Name, forced, named
from commprof.planner.models import DTYPE_BYTES

# The NCCL example tuner plugin's CSV (plugins/tuner/example): 10 fields, lower-case names, -1 = any / keep.
TUNER_FIELDS = (
    "collective",
    "min_bytes",
    "max_bytes",
    "algorithm",
    "protocol",
    "channels",
    "nNodes",
    "nRanks",
    "numPipeOps",
    "regBuff",
)
TUNER_ALGORITHMS = tuple(a.tuner for a in ALGORITHMS)
TUNER_PROTOCOLS = tuple(p.tuner for p in PROTOCOLS)
NCCL_TESTS_TYPES = {"bfloat16": "bfloat16", "float16": "half", "float32": "float"}

# Engine flags, each with the engine version it was written for and where that was checked.
SGLANG_FUSION_FLAG = (
    "--flashinfer-allreduce-fusion-backend auto",
    "SGLang 2026 main (flag added by sgl-project/sglang#12787); releases before it, e.g. v0.5.10, "
    "take --enable-flashinfer-allreduce-fusion, which newer ones accept as a deprecated alias",
)
SGLANG_FUSION_OFF_FLAG = (
    "--enforce-disable-flashinfer-allreduce-fusion",
    "SGLang 2026 main (sgl-project/sglang#21446): turns off the fusion SGLang auto-enables",
)
VLLM_FUSION_FLAG = (
    '--compilation-config \'{"pass_config": {"fuse_allreduce_rms": true}}\'',
    "vLLM 0.18 (docs.vllm.ai/en/v0.18.2/design/fusions: PassConfig.fuse_allreduce_rms; "
    "vLLM 0.10-0.11 named it enable_fi_allreduce_fusion)",
)
VLLM_FUSION_OFF_FLAG = (
    '--compilation-config \'{"pass_config": {"fuse_allreduce_rms": false}}\'',
    "vLLM 0.18 (PassConfig.fuse_allreduce_rms; on by default at -O2 on Hopper/Blackwell, TP > 1)",
)
VLLM_FUSION_BACKEND_ENV = (
    "VLLM_FLASHINFER_ALLREDUCE_BACKEND=auto   # or trtllm / mnnvl",
    "vLLM with vllm-project/vllm#34109 (2026)",
)
ENGINES = ("SGLang", "vLLM")
# What makes each engine run an all-reduce implementation other than NCCL, per commprof impl name:
# (engine, setting, version written for). An engine missing here has no such setting that commprof knows of:
# running that implementation in it is engine work. Fused kinds: the fusion flags above.
ALTERNATIVE_ENGINE_SETTINGS = {
    "flashinfer-pcie-ipc": (
        (
            "vLLM",
            "VLLM_ALLREDUCE_USE_FLASHINFER_PCIE_IPC=1",
            "vLLM 0.30 (vllm-project/vllm#53576: opt-in, default 0; single node, PCIe only, TP 2 / 4 / 8)",
        ),
    ),
    "symm-mem": (
        (
            "SGLang",
            "--enable-torch-symm-mem",
            "SGLang 2026 main server arguments: only SM90 (TP 4 / 6 / 8) and SM10x (TP 6 / 8); elsewhere NCCL runs",
        ),
        (
            "vLLM",
            "VLLM_ALLREDUCE_USE_SYMM_MEM=1",
            "vLLM 0.11+ (SymmMemCommunicator: only SM90 / SM10x; its kernel choice may differ from the one measured)",
        ),
    ),
}


# ------------------------------------------------------------------------------------------- tuner rules


@dataclass(frozen=True)
class TunerRule:
    """One line of the NCCL example tuner plugin's config file."""

    collective: str
    min_bytes: int
    max_bytes: int  # -1: no upper bound (strtoull("-1") is the largest size)
    algorithm: str
    protocol: str
    channels: int = -1
    n_nodes: int = -1
    n_ranks: int = -1
    num_pipe_ops: int = -1
    reg_buff: int = -1

    def csv(self) -> str:
        return ",".join(
            str(v)
            for v in (
                self.collective,
                self.min_bytes,
                self.max_bytes,
                self.algorithm,
                self.protocol,
                self.channels,
                self.n_nodes,
                self.n_ranks,
                self.num_pipe_ops,
                self.reg_buff,
            )
        )


def _tuner(name: Name | None) -> str | None:
    return name.tuner if name is not None else None


def rule_inputs(winners: pd.DataFrame) -> pd.DataFrame:
    """Per winning record (one per T) and collective: size and what NCCL ran (its log), else what env forced.

    A winner with a `note` (e.g. within measurement noise of the baseline) gets no choice: NCCL keeps its own.
    """
    rows = []
    for r in winners.itertuples():
        note = getattr(r, "note", None)
        note = note if isinstance(note, str) and note else None
        env = r.env if isinstance(r.env, dict) else {}
        choices = (r.nccl or {}).get("choices") or [] if isinstance(r.nccl, dict) else []
        sizes = {
            "allreduce": int(r.tokens) * int(r.hidden_size) * DTYPE_BYTES.get(r.dtype, 2)
            if _number(r.hidden_size) and _number(r.tokens)
            else None
        }
        logged: dict[str, dict] = {}
        for choice in choices:
            coll = _tuner(named(COLLECTIVES, choice.get("coll")))
            if coll:
                logged.setdefault(coll, choice)
                sizes.setdefault(coll, choice.get("bytes"))
        sets_channels = any(k in env for k in CHANNEL_VARIABLES)
        for coll, size in sizes.items():
            if not size:
                continue
            choice = logged.get(coll, {})
            algorithm = _tuner(named(ALGORITHMS, choice.get("algo")) or forced("NCCL_ALGO", env.get("NCCL_ALGO"), coll))
            protocol = _tuner(
                named(PROTOCOLS, choice.get("proto")) or forced("NCCL_PROTO", env.get("NCCL_PROTO"), coll)
            )
            channels = choice.get("channels") if sets_channels and choice.get("channels") else -1
            if note:
                algorithm = protocol = None
            rows.append(
                {
                    "collective": coll,
                    "bytes": int(size),
                    "tokens": int(r.tokens),
                    "point_id": r.point_id,
                    "label": r.label,
                    "algorithm": algorithm,
                    "protocol": protocol,
                    "channels": int(channels),
                    "n_ranks": int(r.world_size) if _number(r.world_size) else -1,
                    "note": note,
                }
            )
    return pd.DataFrame(
        rows,
        columns=[
            "collective",
            "bytes",
            "tokens",
            "point_id",
            "label",
            "algorithm",
            "protocol",
            "channels",
            "n_ranks",
            "note",
        ],
    )


def tuner_rules(inputs: pd.DataFrame) -> list[TunerRule]:
    """One rule per message-size range, per collective: each measured size owns the range up to the geometric
    midpoint with its neighbours; neighbouring ranges with the same choice merge; sizes without a known
    algorithm and protocol get no rule (NCCL keeps its own choice there)."""
    rules: list[TunerRule] = []
    for coll, group in inputs.groupby("collective", sort=True):
        group = group.sort_values("bytes").drop_duplicates("bytes")
        sizes = group["bytes"].tolist()
        bounds = [math.isqrt(a * b) for a, b in zip(sizes, sizes[1:])]
        lows = [0] + bounds
        highs = [b - 1 for b in bounds] + [-1]
        merged: list[TunerRule] = []
        for r, low, high in zip(group.itertuples(), lows, highs):
            if not (r.algorithm in TUNER_ALGORITHMS and r.protocol in TUNER_PROTOCOLS):
                continue
            rule = TunerRule(coll, low, high, r.algorithm, r.protocol, int(r.channels), -1, int(r.n_ranks))
            last = merged[-1] if merged else None
            if (
                last
                and last.max_bytes == low - 1
                and (last.algorithm, last.protocol, last.channels) == (rule.algorithm, rule.protocol, rule.channels)
            ):
                merged[-1] = TunerRule(
                    coll, last.min_bytes, high, last.algorithm, last.protocol, last.channels, -1, last.n_ranks
                )
            else:
                merged.append(rule)
        rules.extend(merged)
    return rules


def tuner_conf_text(rules: list[TunerRule], inputs: pd.DataFrame, provenance: list[str]) -> str:
    """nccl_tuner.conf: comments (where from, how to load, the override trap), then one CSV line per rule."""
    lines = [f"# {line}" for line in provenance]
    lines += [
        "# NCCL example tuner plugin rules (plugins/tuner/example in the NCCL source tree). Load with:",
        "#   export NCCL_TUNER_PLUGIN=/path/to/libnccl-tuner-example.so",
        "#   export NCCL_TUNER_CONFIG_FILE=/path/to/nccl_tuner.conf",
        "# NCCL_ALGO / NCCL_PROTO in the environment override a tuner: do not set them together with this file.",
        "# An algorithm/protocol pair NCCL cannot run is silently ignored: check NCCL_DEBUG=INFO's TUNING lines.",
        "# Ranges come from the fastest point at each measured size (one T each); -1 = any / keep NCCL's choice.",
        "# " + ",".join(TUNER_FIELDS),
    ]
    for r in inputs.sort_values(["collective", "bytes"]).itertuples():
        note = getattr(r, "note", None)
        choice = (
            f"{r.algorithm}/{r.protocol}"
            if isinstance(r.algorithm, str) and isinstance(r.protocol, str)
            else f"{note}: no rule"
            if isinstance(note, str) and note
            else "no single algo/proto: no rule"
        )
        lines.append(f"#   {r.collective} {r.bytes} B (T={r.tokens}): {r.point_id} {r.label!s} -> {choice}")
    if not rules:
        lines.append(
            "# No rule: at every size NCCL keeps its own choice (no winner beyond noise with a known "
            "algorithm and protocol)."
        )
    lines += [rule.csv() for rule in rules]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------- recommend.env


def recommend_env_text(point: pd.Series | None, provenance: list[str], notes: list[str]) -> str:
    """Bash-sourceable export lines for the recommended point's environment, with where it was measured."""
    lines = [f"# {line}" for line in provenance + notes]
    env = point["env"] if point is not None and isinstance(point.get("env"), dict) else {}
    if point is None:
        lines.append("# No point passed at every T in this run: nothing to recommend.")
    elif not env:
        lines.append("# The recommendation sets no variable: nothing to export.")
    lines.append("# NCCL reads most variables once per process: restart the engine after sourcing this file.")
    for name, value in sorted(env.items()):
        if not ENV_NAME.match(name):
            lines.append(f"# skipped {name!r}: not a valid environment variable name")
            continue
        lines.append(f"export {name}={shlex.quote(str(value))}")
    return "\n".join(lines) + "\n"


# -------------------------------------------------------------------------------------------- engines


@dataclass(frozen=True)
class EngineHint:
    """One way to apply the result in a serving engine, with the version it was written for; `setting` empty:
    the engine has no setting for it (engine work)."""

    engine: str
    setting: str
    version: str
    why: str


def alternative_hints(alternatives: pd.DataFrame, reference_name: str = "NCCL") -> list[EngineHint]:
    """Per implementation that beat the exported settings beyond noise at some T (analysis.alternatives): each
    engine's setting that runs it, or a hint without a setting saying it needs engine work."""
    if alternatives.empty:
        return []
    won = alternatives[np.array([v is True for v in alternatives["beyond_noise"]], dtype=bool)]
    hints = []
    for impl, group in won.groupby("impl", sort=True):
        tokens = ", ".join(str(int(t)) for t in group["tokens"])
        lost = sorted(set(int(t) for t in alternatives["tokens"]) - set(int(t) for t in group["tokens"]))
        why = f"{impl} beat {reference_name} (recommend.env) beyond noise at T = {tokens}" + (
            f"; not at T = {', '.join(map(str, lost))}, where the engine should keep {reference_name}" if lost else ""
        )
        for engine, setting, version in implementation_settings(str(impl)):
            hints.append(
                EngineHint(engine, setting, version, why)
                if setting
                else EngineHint(
                    engine,
                    "",
                    "—",
                    f"{why}; {engine} has no setting that runs {impl} (none known "
                    "to commprof): using it there is engine work",
                )
            )
    return hints


def implementation_settings(impl: str) -> list[tuple[str, str, str]]:
    """Per engine (ENGINES): the setting that makes it run `impl` and the version it was written for, or
    ("", "—") where commprof knows none (running it there is engine work)."""
    known = {engine: (setting, version) for engine, setting, version in ALTERNATIVE_ENGINE_SETTINGS.get(impl, ())}
    return [(engine, *known.get(engine, ("", "—"))) for engine in ENGINES]


def engine_hints(
    fusion: pd.DataFrame, fused_measured: bool, env_exported: bool, alternatives: pd.DataFrame | None = None
) -> list[EngineHint]:
    """SGLang / vLLM flags and environment for what won beyond noise; only what this run measured.

    `fusion`: analysis.fusion_comparison (impl, tokens, beyond_noise, slower_beyond_noise per T);
    `alternatives`: analysis.alternatives (other all-reduce implementations against the exported settings).
    """
    hints = []
    if env_exported:
        hints.append(
            EngineHint(
                "SGLang and vLLM",
                "source recommend.env in the shell that launches the engine",
                "any version (both use NCCL through PyNccl / torch.distributed)",
                "NCCL_* variables reach every rank through the environment",
            )
        )
    if alternatives is not None:
        hints += alternative_hints(alternatives)
    if not fused_measured or fusion.empty:
        return hints
    flashinfer = fusion["impl"].astype(str).str.contains("flashinfer").to_numpy()
    won = fusion[flashinfer & np.array([v is True for v in fusion["beyond_noise"]], dtype=bool)]
    lost = fusion[np.array([v is True for v in fusion["slower_beyond_noise"]], dtype=bool)]
    if not won.empty:
        tokens = ", ".join(str(int(t)) for t in won["tokens"])
        why = (
            f"the FlashInfer fused all-reduce + RMSNorm beat its unfused reference at T = {tokens}; the engine "
            "uses it only where its FlashInfer build supports this GPU: check its log says it initialised"
        )
        hints += [
            EngineHint("SGLang", SGLANG_FUSION_FLAG[0], SGLANG_FUSION_FLAG[1], why),
            EngineHint("vLLM", VLLM_FUSION_FLAG[0], VLLM_FUSION_FLAG[1], why),
            EngineHint(
                "vLLM",
                VLLM_FUSION_BACKEND_ENV[0],
                VLLM_FUSION_BACKEND_ENV[1],
                "chooses FlashInfer's all-reduce backend for the fused kernels",
            ),
        ]
    elif not fusion.empty and len(lost) == len(fusion):
        why = "the fused all-reduce + RMSNorm was slower than its unfused reference, beyond noise, at every T measured"
        hints += [
            EngineHint("SGLang", SGLANG_FUSION_OFF_FLAG[0], SGLANG_FUSION_OFF_FLAG[1], why),
            EngineHint("vLLM", VLLM_FUSION_OFF_FLAG[0], VLLM_FUSION_OFF_FLAG[1], why),
        ]
    return hints


def engine_hints_text(hints: list[EngineHint], provenance: list[str]) -> str:
    lines = [f"# {line}" for line in provenance]
    if not hints:
        lines.append("# Nothing engine-specific to set from this run.")
    for hint in hints:
        if not hint.setting:
            lines += ["", f"# {hint.engine}: no setting", f"# why: {hint.why}"]
            continue
        lines += ["", f"# {hint.engine} -- written for {hint.version}", f"# why: {hint.why}", hint.setting]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------- nccl-tests tables


def nccl_tests_table(
    sizes: list[tuple[str, int, float]], world_size: int, dtype: str, header: list[str], wrong: int | None
) -> str:
    """An all_reduce_perf-style table per collective: size, count, type, redop, root, time, algbw, busbw, #wrong.

    `sizes`: (collective, bytes, time µs) rows, time being the median over the ops of that size.
    algbw = bytes / time; busbw = algbw × 2(n−1)/n for all-reduce, × (n−1)/n for all-gather (nccl-tests'
    definitions); count is elements of the buffer (all-reduce) or per rank (all-gather), as nccl-tests prints.
    """
    elem = DTYPE_BYTES.get(dtype, 2)
    type_name = NCCL_TESTS_TYPES.get(dtype, dtype)
    lines = [f"# {line}" for line in header]
    busbws = []
    for collective in sorted({row[0] for row in sizes}):
        factor = 2 * (world_size - 1) / world_size if collective == "all_reduce" else (world_size - 1) / world_size
        redop = "sum" if collective == "all_reduce" else "none"
        lines += [
            "#",
            f"# {collective} (in place)",
            f"# {'size':>10}  {'count':>12}  {'type':>8}  {'redop':>6}  {'root':>6}  {'time':>7}  "
            f"{'algbw':>6}  {'busbw':>6}  {'#wrong':>6}",
            f"# {'(B)':>10}  {'(elements)':>12}  {'':>8}  {'':>6}  {'':>6}  {'(us)':>7}  "
            f"{'(GB/s)':>6}  {'(GB/s)':>6}  {'':>6}",
        ]
        for _, size, time_us in sorted(row for row in sizes if row[0] == collective):
            size = int(size)
            count = size // elem if collective == "all_reduce" else size // elem // world_size
            algbw = size / time_us / 1e3 if time_us > 0 else 0.0
            busbw = algbw * factor
            busbws.append(busbw)
            lines.append(
                f"{size:>12}  {count:>12}  {type_name:>8}  {redop:>6}  {-1:>6}  {time_us:>7.2f}  "
                f"{algbw:>6.2f}  {busbw:>6.2f}  {'N/A' if wrong is None else wrong:>6}"
            )
    lines.append(f"# Avg bus bandwidth    : {sum(busbws) / len(busbws) if busbws else 0.0:.4f}")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------- summary, csv, files

CSV_DROP = ("env", "config", "op_us", "nccl", "rank_step_median_us")


def results_csv(frame: pd.DataFrame) -> str:
    """Every record as one CSV row (nested op_us / nccl left out; per-rank medians joined with ';')."""
    table = frame.drop(columns=[c for c in CSV_DROP if c in frame])
    if "rank_step_median_us" in frame:
        table["rank_step_median_us"] = [
            ";".join(f"{v:g}" for v in ranks) if isinstance(ranks, list) else ""
            for ranks in frame["rank_step_median_us"]
        ]
    return table.to_csv(index=False)


def json_ready(value: Any) -> Any:
    """NaN -> None, numpy scalars -> Python, recursively: summary.json must be strict JSON."""
    if isinstance(value, dict):
        return {str(k): json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_ready(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def write_text(path: Path, text: str) -> Path:
    if not path.parent.is_dir():
        path.parent.mkdir(parents=True)
    path.write_text(text, encoding="utf-8")
    return path


def write_json_file(path: Path, data: Any) -> Path:
    return write_text(path, json.dumps(json_ready(data), indent=2, sort_keys=False, allow_nan=False) + "\n")


def hints_as_dicts(hints: list[EngineHint]) -> list[dict]:
    return [asdict(h) for h in hints]


def _number(value: Any) -> bool:
    try:
        return value is not None and math.isfinite(float(value))
    except (TypeError, ValueError):
        return False
