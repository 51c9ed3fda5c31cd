"""The engine releases a plan can be made for: where engines issue a family's collectives differently, the plan
follows the one named (`plan --engine`, the sweep's `[run] engine`). Pure."""

from __future__ import annotations

from commprof.errors import UsageError

# The releases whose model files commprof read, per engine (commprof.planner.architectures cites the files). vLLM
# 0.34's model files, MXFP4 padding (fused_moe/oracle/mxfp4.py mxfp4_round_up_hidden_size_and_intermediate_size)
# and post-all-reduce padding strip (fused_moe/runner/moe_runner.py _maybe_pad_hidden_states) issue the same
# all-reduces as 0.33's: what changed in models/qwen2.py, qwen3.py, qwen2_moe.py, deepseek_v2.py and glm4_moe.py
# moves no reduction (a sliding-window assertion, a local-logits helper, an activation-quant fusion, ROCm's fused
# shared experts per layer).
PLAN_ENGINES = {"sglang": ("0.5.23",), "vllm": ("0.33", "0.34")}
# The engine a plan follows when none is named: SGLang's model files, the first engine commprof's sweeps target.
DEFAULT_ENGINE = "sglang==0.5.23"
_KNOWN = [f"{name}=={version}" for name, versions in PLAN_ENGINES.items() for version in versions]
ENGINE_HELP = f"{', '.join(_KNOWN[:-1])} or {_KNOWN[-1]} (the engine whose model files the plan follows)"


def parse_plan_engine(text: str) -> str:
    """ "vllm==0.33.1" -> "vllm==0.33" (vLLM's patch releases share their model files); UsageError naming the
    known releases for any other engine or version."""
    name, sep, version = str(text).strip().partition("==")
    name, version = name.strip().lower(), version.strip()
    if name == "vllm":
        version = ".".join(version.split(".")[:2])
    if not sep or version not in PLAN_ENGINES.get(name, ()):
        raise UsageError(f"--engine {text!r}: no model files read for that release (known: {', '.join(_KNOWN)})")
    return f"{name}=={version}"


def engine_name(engine: str) -> str:
    """ "vllm==0.33" -> "vllm"."""
    return engine.partition("==")[0]


# vLLM 0.33 fused_moe/oracle/mxfp4.py mxfp4_round_up_hidden_size_and_intermediate_size: the multiple each MXFP4 MoE
# backend pads the hidden size to (MARLIN and FlashInfer TRT-LLM 256, CUTLASS and FlashInfer CUTLASS 128, Triton
# none); fused_moe/runner/moe_runner.py _maybe_pad_hidden_states strips it only after the MoE's all-reduce ("post_xform
# strips padding after all-reduce" for GPT-OSS), so that all-reduce carries the padded width.
MXFP4_HIDDEN_MULTIPLE = {"marlin": 256, "trtllm": 256, "cutlass": 128, "flashinfer-cutlass": 128, "triton": 1}
# vLLM 0.33 _get_priority_backends_for_gpt_oss puts MARLIN before Triton on SM120; which one runs depends on the GPU
# and on what the FlashInfer build supports, so a plan says it assumed it.
DEFAULT_MXFP4_BACKEND = "marlin"


def mxfp4_moe_width(hidden_size: int, engine: str, backend: str | None) -> int | None:
    """The width of an MXFP4 MoE's all-reduce under `engine`, None where it is the hidden size (SGLang 0.5.23's
    MXFP4 padding is not read: planned unpadded)."""
    if engine_name(engine) != "vllm":
        return None
    multiple = MXFP4_HIDDEN_MULTIPLE[backend or DEFAULT_MXFP4_BACKEND]
    return -(-hidden_size // multiple) * multiple
