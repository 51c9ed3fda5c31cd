"""SGLang 0.5.23's FlashInfer all-reduce: when SGLang turns its fusion on by itself (overrides.py
`_flashinfer_allreduce_fusion_auto_enable`: an architecture it lists, on SM90 / SM10x, TP > 1, no DP attention, one
node or SM10x, no MoE all-to-all backend) and what the backend it resolves to (trtllm on SM90, MNNVL on SM10x)
takes in its 2048-row workspace. Each gate read from the released wheel. Pure."""

from __future__ import annotations

from commprof.planner.models import DTYPE_BYTES
from commprof.report.analysis.engine_facts import Box, Cite, Derived, Op, Rule, Switches, on, sm_text
from commprof.report.analysis.engine_flashinfer import mnnvl_buffer_bytes, mnnvl_required_bytes

SG = "sglang/srt/distributed"
OVERRIDES = "sglang/srt/arg_groups/overrides.py"
FUSION = "sglang/srt/layers/flashinfer_comm_fusion.py"

FI_WORKSPACE_TOKENS = 2048  # layer_boundary/residual/add_norm.py FUSE_ALLREDUCE_MAX_BATCH_SIZE: the workspace's rows
# overrides.py: the architectures SGLang enables FlashInfer's all-reduce fusion for by itself ("auto" backend).
FUSION_ARCHITECTURES = frozenset(
    {
        "DeepseekV3ForCausalLM",
        "DeepseekV32ForCausalLM",
        "DeepseekV4ForCausalLM",
        "GptOssForCausalLM",
        "GlmMoeDsaForCausalLM",
        "Glm4MoeForCausalLM",
        "Glm4MoeLiteForCausalLM",
        "MistralLarge3ForCausalLM",
        "Qwen3MoeForCausalLM",
        "Qwen3VLMoeForConditionalGeneration",
        "Qwen3NextForCausalLM",
        "Qwen4ExpForConditionalGeneration",
        "KimiK25ForConditionalGeneration",
        "Qwen3_5MoeForConditionalGeneration",
        "InternS2PreviewForConditionalGeneration",
        "Qwen3_5ForConditionalGeneration",
        "NemotronHForCausalLM",
        "NemotronHPuzzleForCausalLM",
        "NemotronH_Omni_Reasoning_V3",
    }
)
MIMO_ARCHITECTURES = ("MiMoV2ForCausalLM", "MiMoV2FlashForCausalLM")  # cutedsl on SM100 instead of auto
MIMO_TP_SIZES = (2, 4, 8, 16)  # layers/flashinfer_mnnvl_cutedsl.py SUPPORTED_TP_SIZES
FUSION_BACKEND = "--flashinfer-allreduce-fusion-backend"
ENFORCE_DISABLE = "--enforce-disable-flashinfer-allreduce-fusion"
A2A_BACKEND = "--moe-a2a-backend"


def _major(box: Box) -> int | None:
    return int(box.sm) if box.sm is not None else None


def auto_enable(box: Box, s: Switches) -> Derived | None:
    """overrides.py _flashinfer_allreduce_fusion_auto_enable: the backend SGLang sets itself when none was given
    (None: the rule does not apply on this box, so nothing to say)."""
    major = _major(box)
    if major not in (9, 10) or box.tp <= 1:
        return None
    mimo = box.architecture in MIMO_ARCHITECTURES
    if not box.architecture:
        return Derived(
            None,
            f"SGLang sets {FUSION_BACKEND} itself for {len(FUSION_ARCHITECTURES)} architectures (DeepSeek, Kimi, "
            "Qwen3-MoE, GLM, gpt-oss, Nemotron-H, ...) on SM90 / SM10x; this run does not say the model's "
            "architecture, so it is not assumed",
        )
    if not mimo and box.architecture not in FUSION_ARCHITECTURES:
        return Derived(None, f"{box.architecture} is not one SGLang enables FlashInfer's all-reduce fusion for")
    if mimo and not (major == 10 and box.tp in MIMO_TP_SIZES):
        return Derived(None, f"{box.architecture}: SGLang's CuTe DSL fusion needs SM10x and TP 2 / 4 / 8 / 16")
    if box.dp_attention:
        return Derived(None, "not with DP attention")
    if box.nodes > 1 and major != 10:
        return Derived(None, f"{box.nodes} nodes: only SM10x (MNNVL) spans nodes")
    if str(s.get(A2A_BACKEND, "none")) != "none":
        return Derived(None, f"{A2A_BACKEND}={s[A2A_BACKEND]}: only with none")
    if (
        box.architecture == "DeepseekV4ForCausalLM"
        and major == 10
        and box.tp == 4
        and box.nodes == 1
        and not on(s, "--disable-custom-all-reduce")
    ):
        return Derived(
            None,
            "DeepSeek V4.1 (model_type deepseek_v41, hidden 5120) at TP 4 on Blackwell keeps custom all-reduce; "
            "which V4 this is, commprof does not read: not assumed",
        )
    value = "cutedsl" if mimo else "auto"
    return Derived(
        value,
        f"{box.architecture} at TP {box.tp} on {sm_text(box)}, without DP attention, "
        f"{'on one node' if box.nodes == 1 else 'across nodes on SM10x'}, {A2A_BACKEND} none",
    )


def _fi_backend(box: Box, s: Switches) -> tuple[str | None, str]:
    """flashinfer_comm_fusion.py _resolve_backend: the workspace backend the fusion runs on here, or None and why
    not."""
    backend = str(s.get(FUSION_BACKEND, ""))
    if _major(box) not in (9, 10):
        return None, f"not on this box: {sm_text(box)} (the fusion backend needs SM90 or SM10x)"
    if not on(s, FUSION_BACKEND):
        derived = auto_enable(box, s)
        return None, f"{FUSION_BACKEND} not given" + (f"; SGLang leaves it: {derived.why}" if derived else "")
    if on(s, ENFORCE_DISABLE):
        return None, f"{ENFORCE_DISABLE} given"
    if backend == "cutedsl":
        return None, "cutedsl has no workspace for the standalone all-reduce"
    sm100 = _major(box) == 10
    if backend == "auto":
        if box.nodes > 1 and not sm100:
            return None, "raises at start-up: auto spans nodes only on SM10x"
        backend = "mnnvl" if sm100 else "trtllm"
    if backend == "trtllm" and box.nodes > 1:
        return None, "raises at start-up: trtllm is one node only"
    if backend == "mnnvl" and not (sm100 or box.nodes == 1):
        return None, "raises at start-up: mnnvl spans nodes only on SM10x"
    if backend == "mnnvl" and box.multicast is not True:
        unknown = "; unknown on this box" if box.multicast is None else ""
        return None, f"mnnvl needs NVLink multicast (NVSwitch){unknown}: its workspace fails and NCCL paths run"
    if backend == "trtllm" and not box.p2p:
        return None, "trtllm's IPC workspace needs P2P between every pair"
    return backend, ""


def _fi_standalone(box: Box, op: Op, s: Switches) -> str | None:
    backend, why = _fi_backend(box, s)
    if backend is None:
        return why
    if op.dims != 2:
        return "only 2-D ops"
    hidden = op.model_hidden or op.hidden
    model_bytes = DTYPE_BYTES.get(op.model_dtype or op.dtype, 2)
    if backend == "trtllm":
        if op.dtype == "float32":
            return "fp32 on the trtllm workspace, built without use_fp32_lamport for the model's dtype"
        if op.tokens * op.hidden > FI_WORKSPACE_TOKENS * hidden:
            return f"above its {FI_WORKSPACE_TOKENS}-token workspace"
        return None
    element = DTYPE_BYTES.get(op.dtype, 2)
    if op.hidden * element % 16:
        return f"a row of {op.hidden} x {element} B is not whole 16-byte vectors (MNNVL)"
    need = mnnvl_required_bytes(box.tp, op.tokens, op.hidden, element)
    have = mnnvl_buffer_bytes(box.tp, FI_WORKSPACE_TOKENS, hidden, model_bytes)
    return None if need <= have else f"needs {need} B of MNNVL buffer, its {FI_WORKSPACE_TOKENS}-token one has {have} B"


def sglang_fusion_fails(sm: float | None) -> str | None:
    """Why SGLang 0.5.23's FlashInfer all-reduce fusion cannot start on these GPUs (None: it can, or unknown)."""
    if sm is None or int(sm) in (9, 10):
        return None
    return f"raises at start-up on SM {sm:g} (FlashInfer allreduce fusion requires SM90 or SM10X)"


def fusion_fails(box: Box) -> str | None:
    return sglang_fusion_fails(box.sm)


AUTO_ENABLE = Cite(
    OVERRIDES,
    "_flashinfer_allreduce_fusion_auto_enable",
    order=(
        r"view\.flashinfer_allreduce_fusion_backend is None",
        r"model_arch in _FLASHINFER_ALLREDUCE_FUSION_ARCHS",
        r"not prefer_custom_dsv41",
        r"get_platform\(\)\.is_sm90 or get_platform\(\)\.is_sm100",
        r"view\.tp_size > 1",
        r"not attn_dp_enabled_of\(view\)",
        r"view\.nnodes == 1 or get_platform\(\)\.is_sm100",
        r'view\.moe_a2a_backend == "none"',
        r'backend = "cutedsl" if is_mimo else "auto"',
    ),
)

FLASHINFER_ALL_REDUCE = Rule(
    "FlashInfer all-reduce",
    (
        AUTO_ENABLE,
        Cite(OVERRIDES, "", constant="_FLASHINFER_ALLREDUCE_FUSION_ARCHS", value=FUSION_ARCHITECTURES),
        Cite(FUSION, "can_use_flashinfer_allreduce", r"input_\.ndim != 2"),
        Cite(
            FUSION,
            "can_use_flashinfer_allreduce",
            r"use_fp32_lamport != \(input_\.dtype == torch\.float32\)",
        ),
        Cite(FUSION, "can_use_flashinfer_allreduce", r"hidden_dim % \(16 // input_\.element_size\(\)\) != 0"),
        Cite(FUSION, "_resolve_backend", r"requires SM90 or SM10X"),
        Cite(FUSION, "_resolve_backend", order=(r"if get_platform\(\)\.is_sm100:", r'return "mnnvl"')),
        Cite(
            "sglang/srt/layers/layer_boundary/residual/add_norm.py",
            "",
            constant="FUSE_ALLREDUCE_MAX_BATCH_SIZE",
            value=FI_WORKSPACE_TOKENS,
        ),
        Cite(
            "sglang/srt/model_executor/runner/base_runner.py",
            "_pre_initialize_flashinfer_allreduce_workspace",
            r"max_token_num=FUSE_ALLREDUCE_MAX_BATCH_SIZE",
        ),
        Cite(f"{SG}/bootstrap.py", "_set_all_reduce_flags", r"not uses_cutedsl_ar_fusion\(\)"),
        Cite("sglang/srt/layers/flashinfer_mnnvl_cutedsl.py", "", constant="SUPPORTED_TP_SIZES", value=MIMO_TP_SIZES),
    ),
    _fi_standalone,
    switch=FUSION_BACKEND,
)
