"""Which all-reduce path each serving engine takes for each op of the plan on this box, today and with the
answer's switches: the engines' own dispatch order, read from their released source (one table per engine
version; each rule names the file and function it comes from). Pure.

An engine version without a table here is said so, never guessed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from commprof.errors import UsageError

MiB = 1 << 20
KiB = 1 << 10


@dataclass(frozen=True)
class Box:
    """What the engines' dispatch reads of the box."""

    sm: float | None  # compute capability, 12.0 for SM120 (None: unknown)
    tp: int
    nvlink: bool  # every GPU pair over NVLink
    p2p: bool  # peer-to-peer works between every pair


@dataclass(frozen=True)
class Op:
    """One op group of the plan at one T: the layers' all-reduces of [T, hidden]."""

    group: str
    tokens: int
    nbytes: int
    dtype: str
    hidden: int


# A rule: (the path, where it comes from, a check returning None when the rule takes the op, else why not).
Check = Callable[[Box, Op, dict[str, str]], str | None]


@dataclass(frozen=True)
class Rule:
    path: str
    source: str
    check: Check


@dataclass(frozen=True)
class EngineTable:
    engine: str
    version: str
    dispatch: str  # the function whose order the rules follow
    rules: tuple[Rule, ...]
    flags: tuple[tuple[str, str, Callable[[Box], str | None]], ...] = ()  # (setting, source, why it fails here)


def _on(switches: dict[str, str], name: str) -> bool:
    return str(switches.get(name, "")).strip().lower() not in ("", "0", "false")


def _sm(box: Box) -> str:
    return f"SM {box.sm:g}" if box.sm is not None else "an unknown SM"


def _sm_major(box: Box) -> int | None:
    return int(box.sm) if box.sm is not None else None


# ------------------------------------------------------------------------------------------ SGLang 0.5.23

SG = "sglang/srt/distributed"


def _sg_custom(box: Box, op: Op, switches: dict) -> str | None:
    if box.tp > 2 and not box.nvlink:
        return "off for more than two PCIe-only GPUs"
    if not box.p2p:
        return "needs P2P between every pair"
    return None if op.nbytes <= 8192 * 1024 else "above its 8 MiB buffer"


def _sg_pcie_ipc(box: Box, op: Op, switches: dict) -> str | None:
    if not _on(switches, "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE"):
        return "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE not set"
    if box.tp not in (2, 4, 8):
        return f"world size {box.tp} not 2 / 4 / 8"
    if op.dtype != "bfloat16":
        return f"{op.dtype}: only bf16 is tuned"
    cap = switches.get("SGLANG_PCIE_IPC_MAX_NUMEL")
    if cap is None:
        return None  # sized to the server's decode width x hidden: decode-sized ops only
    return None if op.nbytes // 2 <= int(cap) else f"{op.nbytes // 2} elements > SGLANG_PCIE_IPC_MAX_NUMEL={cap}"


def _sg_symm(box: Box, op: Op, switches: dict) -> str | None:
    if not _on(switches, "--enable-torch-symm-mem"):
        return "--enable-torch-symm-mem not given"
    return None if _sm_major(box) in (9, 10) else f"{_sm(box)}: only SM9x / SM10x"


def sglang_fusion_fails(sm: float | None) -> str | None:
    """Why SGLang 0.5.23's FlashInfer all-reduce fusion cannot start on these GPUs (None: it can, or unknown)."""
    if sm is None or int(sm) in (9, 10):
        return None
    return f"raises at start-up on SM {sm:g} (FlashInfer allreduce fusion requires SM90 or SM10X)"


SGLANG_0_5_23 = EngineTable(
    "SGLang",
    "0.5.23",
    f"{SG}/parallel_state.py: GroupCoordinator._resolve_outplace_all_reduce_method",
    (
        Rule(
            "custom all-reduce",
            f"{SG}/device_communicators/custom_all_reduce.py: CustomAllreduce.should_custom_ar; "
            "custom_all_reduce_utils.py: can_use_custom_all_reduce_with_nvlink",
            _sg_custom,
        ),
        Rule("FlashInfer PCIe IPC", f"{SG}/device_communicators/pcie_ipc_ar.py: should_pcie_ipc_ar", _sg_pcie_ipc),
        Rule("quick all-reduce", f"{SG}/parallel_state.py: qr_rocm_arch_available", lambda b, o, s: "ROCm only"),
        Rule(
            "MSCCL++",
            f"{SG}/device_communicators/pymscclpp.py: should_mscclpp_allreduce",
            lambda b, o, s: None if _on(s, "--enable-mscclpp") else "--enable-mscclpp not given",
        ),
        Rule(
            "torch symm-mem",
            f"{SG}/device_communicators/torch_symm_mem.py: TorchSymmMemCommunicator (TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES)",
            _sg_symm,
        ),
        Rule("NCCL", f"{SG}/parallel_state.py: inplace_all_reduce (pynccl)", lambda b, o, s: None),
    ),
    (
        (
            "--flashinfer-allreduce-fusion-backend",
            "sglang/srt/layers/flashinfer_comm_fusion.py: _resolve_backend",
            lambda box: sglang_fusion_fails(box.sm),
        ),
    ),
)

# --------------------------------------------------------------------------------------------- vLLM 0.33

VL = "vllm/distributed/device_communicators"


def _vl_nccl_symm(box: Box, op: Op, switches: dict) -> str | None:
    if not _on(switches, "VLLM_USE_NCCL_SYMM_MEM"):
        return "VLLM_USE_NCCL_SYMM_MEM not set"
    if box.tp < 4:
        return "world size below 4"
    ranges = {4: (16 * KiB, 512 * KiB), 8: (16 * KiB, 128 * KiB)}
    if box.tp in ranges:
        low, high = ranges[box.tp]
        return None if op.nbytes <= low or op.nbytes >= high else "custom all-reduce's range"
    return None if box.tp > 8 else "no range for this world size"


def _vl_pcie_ipc(box: Box, op: Op, switches: dict) -> str | None:
    if not _on(switches, "VLLM_ALLREDUCE_USE_FLASHINFER_PCIE_IPC"):
        return "VLLM_ALLREDUCE_USE_FLASHINFER_PCIE_IPC not set"
    if box.tp not in (2, 4, 8):
        return f"world size {box.tp} not 2 / 4 / 8"
    return None  # every [tokens, hidden] op up to the largest capture size x hidden: no size cap


def _vl_custom(box: Box, op: Op, switches: dict) -> str | None:
    if box.tp > 2 and not box.nvlink:
        return "off for more than two PCIe-only GPUs"
    if not box.p2p:
        return "needs P2P between every pair"
    return None if op.nbytes <= 8192 * 1024 else "above its 8 MiB buffer"


def _vl_symm(box: Box, op: Op, switches: dict) -> str | None:
    if not _on(switches, "VLLM_ALLREDUCE_USE_SYMM_MEM"):
        return "VLLM_ALLREDUCE_USE_SYMM_MEM not set"
    return None if box.sm in (9.0, 10.0, 10.3, 10.7) else f"{_sm(box)}: no SYMM_MEM_ALL_REDUCE_MAX_SIZES entry"


VLLM_0_33 = EngineTable(
    "vLLM",
    "0.33",
    f"{VL}/cuda_communicator.py: CudaCommunicator.all_reduce",
    (
        Rule("NCCL symmetric memory", f"{VL}/all_reduce_utils.py: should_nccl_symm_mem_allreduce", _vl_nccl_symm),
        Rule("quick-reduce", f"{VL}/quick_all_reduce.py: QuickAllReduce", lambda b, o, s: "ROCm only"),
        Rule(
            "FlashInfer PCIe IPC",
            f"{VL}/flashinfer_pcie_ipc_all_reduce.py: FlashInferPcieIpcAllReduce.should_use",
            _vl_pcie_ipc,
        ),
        Rule(
            "FlashInfer all-reduce",
            f"{VL}/flashinfer_all_reduce.py: should_use_fi_ar",
            lambda b, o, s: (
                None
                if _on(s, "VLLM_ALLREDUCE_USE_FLASHINFER") and b.nvlink
                else "VLLM_ALLREDUCE_USE_FLASHINFER not set"
                if not _on(s, "VLLM_ALLREDUCE_USE_FLASHINFER")
                else "its workspace needs NVSwitch multicast or NVLink"
            ),
        ),
        Rule("AITER", f"{VL}/aiter_custom_all_reduce.py", lambda b, o, s: "ROCm only"),
        Rule(
            "custom all-reduce", f"{VL}/custom_all_reduce.py: CustomAllreduce.__init__ / should_custom_ar", _vl_custom
        ),
        Rule("torch symm-mem", f"{VL}/symm_mem.py: SymmMemCommunicator.should_use_symm_mem", _vl_symm),
        Rule("NCCL", f"{VL}/pynccl.py: PyNcclCommunicator.all_reduce", lambda b, o, s: None),
    ),
)

CAPS = ("_MAX_NUMEL", "_MAX_SIZE", "_MAX_BYTES")  # size caps: they bound what a switch takes, moving nothing alone
TABLES = {("sglang", "0.5.23"): SGLANG_0_5_23, ("vllm", "0.33"): VLLM_0_33}
DEFAULT_ENGINES = ("sglang==0.5.23", "vllm==0.33")


def parse_engine(text: str) -> tuple[str, str]:
    """ "sglang==0.5.23" -> ("sglang", "0.5.23"); vLLM's patch releases share a table ("0.33.1" -> "0.33")."""
    name, sep, version = text.strip().partition("==")
    name = name.strip().lower()
    if not sep or name not in ("sglang", "vllm") or not version.strip():
        raise UsageError(f"--engine {text!r}: give sglang==VERSION or vllm==VERSION (e.g. sglang==0.5.23)")
    version = version.strip()
    if name == "vllm":
        version = ".".join(version.split(".")[:2])
    return name, version


def dispatch(table: EngineTable, box: Box, op: Op, switches: dict[str, str]) -> tuple[Rule, list[str]]:
    """The rule that takes `op`, and why each rule before it did not."""
    passed = []
    for rule in table.rules:
        why = rule.check(box, op, switches)
        if why is None:
            return rule, passed
        passed.append(f"{rule.path}: {why}")
    return table.rules[-1], passed


def engine_paths(engines: tuple[str, ...], box: Box, ops: list[Op], answer: dict[str, dict[str, str]]) -> list[dict]:
    """Per engine asked for: each op group's path today (no switch) and with the answer's switches (`answer`:
    engine name -> the variables the decision names for it), each rule with its source; a version without a
    table says so."""
    out = []
    for text in engines:
        name, version = parse_engine(text)
        table = TABLES.get((name, version))
        if table is None:
            known = ", ".join(f"{n}=={v}" for n, v in TABLES)
            out.append(
                {"engine": text, "table": None, "why": f"no dispatch table for {text} (known: {known}): not guessed"}
            )
            continue
        switches = answer.get(table.engine, {})
        rows = []
        for op in ops:
            today, _ = dispatch(table, box, op, {})
            with_answer, skipped = dispatch(table, box, op, switches)
            rows.append(
                {
                    "group": op.group,
                    "tokens": op.tokens,
                    "bytes": op.nbytes,
                    "today": today.path,
                    "today_source": today.source,
                    "with_answer": with_answer.path,
                    "with_answer_source": with_answer.source,
                    "skipped": skipped,
                }
            )
        inert = [
            f"{variable}={value}: moves no op of this plan on this box"
            for variable, value in switches.items()
            if not variable.endswith(CAPS)
            and _paths(table, box, ops, switches)
            == _paths(table, box, ops, {k: v for k, v in switches.items() if k != variable})
        ]
        failing = [
            f"{flag}: {why} ({source})" for flag, source, check in table.flags if (why := check(box)) is not None
        ]
        out.append(
            {
                "engine": f"{table.engine} {table.version}",
                "table": table.dispatch,
                "rows": rows,
                "inert": inert,
                "fails_here": failing,
            }
        )
    return out


def _paths(table: EngineTable, box: Box, ops: list[Op], switches: dict[str, str]) -> list[str]:
    return [dispatch(table, box, op, switches)[0].path for op in ops]


def paths_basis(box: Box, backend: str, simulated: str | None = None) -> str:
    """Where the engine section's paths come from: the engine's released dispatch read against the box's SM, TP and
    P2P, never a measurement of the engine; on another backend (gloo), that the run measured it and not NCCL;
    `simulated`: the evidence label of a simulation."""
    sm = f"SM {box.sm:g}" if box.sm is not None else "SM unknown"
    links = "NVLink" if box.nvlink else "P2P" if box.p2p else "no P2P"
    read = f"the engine's own dispatch rules, read for TP {box.tp}, {sm}, {links}"
    if backend != "nccl":
        return (
            f"This run measured {backend} on CPU ranks: NCCL never ran here, and no engine did. The paths are what "
            f"the engine would do on your GPU box ({read}); measure with a sweep on that box to time them."
        )
    if simulated:
        return f"Predicted, not measured: {read} of the simulated box ({simulated})."
    return f"From {read} of this box; the times elsewhere are commprof's replay, not the engine's."
