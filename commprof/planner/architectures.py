"""Model families: which reductions each layer of a model issues, read from its config's `architectures`.

A layer is a tuple of reduction sites in engine order: ("attn", "mlp") for a standard dense layer, ("attn",
"moe") for an MoE layer, ("attn+mlp",) for a parallel block whose two branch outputs are summed before one
all-reduce, and one site per character of a hybrid pattern. Each family names the engine code it mirrors
(docs/step-plan.md says which version was read). Pure.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from commprof.errors import UsageError

LAYOUTS = ("standard", "parallel", "hybrid")

# Nemotron-H's hybrid_override_pattern: one mixer per character, each ending in one all-reduce.
HYBRID_MIXERS = {"M": "mamba", "*": "attn", "-": "mlp", "E": "moe"}
# The same mixers as newer Nemotron-H configs spell them (layers_block_type).
BLOCK_TYPES = {"mamba": "mamba", "attention": "attn", "mlp": "mlp", "moe": "moe"}

LAYOUT_HELP = (
    "--layout standard|parallel|hybrid:PATTERN[+extra@SITE:WIDTH[:DTYPE]...] (PATTERN: one of M * - E per layer, "
    "Nemotron-H's letters; each +extra: one more all-reduce of [T, WIDTH] before every SITE reduction, SITE one of "
    "attn, mlp, moe, attn+mlp, mamba; DTYPE float32, bfloat16 or float16, default the model's)"
)
EXTRA_SITES = ("attn", "mlp", "moe", "attn+mlp", "mamba")
EXTRA_DTYPES = ("float32", "bfloat16", "float16")
# One extra small all-reduce per layer: (the site it precedes, width per token, dtype or None for the model's, and
# `flat`: 0 for a [T, width] tensor, k > 0 for a 1-D one of T x width elements rounded up to a multiple of k).
Extra = tuple[str, int, str | None, int]


@dataclass(frozen=True)
class Family:
    """A group of architectures whose layers communicate alike, and the engine code that says so."""

    name: str
    architectures: tuple[str, ...]
    layout: str  # "standard", "parallel" or "hybrid"
    rmsnorm_after: bool  # the norm after each reduction is residual add + RMSNorm (FlashInfer fuses that)
    engine: str  # the engine code this rule mirrors
    # Config facts that turn this family's layout into another (Falcon without parallel_attn is standard).
    layout_of: Callable[[dict], str] | None = None
    # Engines whose model file issues this family's reductions otherwise: (engine, layout, the code that says so);
    # `layout` and `engine` above are then the other engine's.
    engine_layouts: tuple[tuple[str, str, str], ...] = ()
    # Small all-reduces each layer issues besides its reductions (MiniMax-M2's q/k variance before attention).
    extras: tuple[Extra, ...] = ()
    # Engines whose model file issues the extras otherwise: (engine, extras); `extras` above are the others'.
    engine_extras: tuple[tuple[str, tuple[Extra, ...]], ...] = ()
    # Engines that cannot run the family with tensor parallelism: (engine, why, with the code that says so).
    refused_by: tuple[tuple[str, str], ...] = ()

    def layout_for(self, engine: str, config: dict) -> str:
        """The layout under `engine` ("vllm", "sglang")."""
        for name, layout, _code in self.engine_layouts:
            if name == engine:
                return layout
        return self.layout_of(config) if self.layout_of else self.layout

    def extras_for(self, engine: str) -> tuple[Extra, ...]:
        """The extra all-reduces under `engine` ("vllm", "sglang")."""
        return next((extras for name, extras in self.engine_extras if name == engine), self.extras)

    def refusal(self, engine: str) -> str | None:
        """Why `engine` cannot run this family at TP > 1, or None."""
        return next((why for name, why in self.refused_by if name == engine), None)


def _falcon_layout(config: dict) -> str:
    # vLLM models/falcon.py: reduce_row_parallel_results = not (new_decoder_architecture or parallel_attn).
    return "parallel" if config.get("new_decoder_architecture") or config.get("parallel_attn") else "standard"


FAMILIES: tuple[Family, ...] = (
    Family(
        "Llama / Mistral / Qwen dense",
        ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"),
        "standard",
        True,
        "models/llama.py, qwen2.py, qwen3.py: o_proj and down_proj are RowParallelLinear that all-reduce",
    ),
    Family(
        "Mixtral / Qwen MoE / gpt-oss",
        ("MixtralForCausalLM", "Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM", "GptOssForCausalLM"),
        "standard",
        True,
        "models/mixtral.py, qwen2_moe.py, qwen3_moe.py, gpt_oss.py: o_proj all-reduces; the experts' output "
        "(with Qwen2-MoE's shared expert added first) is all-reduced once",
    ),
    Family(
        "DeepSeek / Kimi / GLM MoE",
        (
            "DeepseekV2ForCausalLM",
            "DeepseekV3ForCausalLM",
            "KimiK25ForConditionalGeneration",
            "Glm4MoeForCausalLM",
        ),
        "standard",
        True,
        "models/deepseek_v2.py, glm4_moe.py: shared experts are added to the routed output before the one "
        "all-reduce of the MoE; layers below first_k_dense_replace are dense MLPs reducing the same [T, H]",
    ),
    Family(
        "Falcon",
        ("FalconForCausalLM", "RWForCausalLM"),
        "parallel",
        False,
        "vLLM models/falcon.py: with parallel_attn or new_decoder_architecture, attention and MLP outputs are "
        "summed and reduced by one tensor_model_parallel_all_reduce (LayerNorm, not RMSNorm, follows)",
        _falcon_layout,
        refused_by=(
            (
                "sglang",
                "SGLang 0.5.23 has no Falcon model (sglang/srt/models holds falcon_h1.py and falcon_mamba.py, other "
                "architectures), and its Transformers fallback refuses tensor parallelism for it (models/"
                "transformers.py recursive_replace: no TP plan, as transformers 5.19.0's FalconConfig has no "
                "base_model_tp_plan)",
            ),
        ),
    ),
    Family(
        "Cohere / Command-R",
        ("CohereForCausalLM", "Cohere2ForCausalLM"),
        "standard",
        False,
        "SGLang 0.5.23 models/commandr.py: attention and MLP run in parallel, but o_proj and down_proj are "
        "RowParallelLinear with the default reduce_results=True, so each all-reduces (LayerNorm follows)",
        engine_layouts=(
            (
                "vllm",
                "parallel",
                "vLLM 0.33 models/commandr.py: CohereMLP and o_proj take reduce_results=False, and "
                "CohereDecoderLayer.forward all-reduces attention + MLP once (LayerNorm follows)",
            ),
        ),
    ),
    Family(
        "GPT-NeoX / GPT-J",
        ("GPTNeoXForCausalLM", "GPTJForCausalLM"),
        "standard",
        False,
        "GPT-J: vLLM 0.33 and SGLang 0.5.23 models/gpt_j.py, out_proj and fc_out RowParallelLinear each "
        "all-reduce; GPT-NeoX: no model file in either (vLLM 0.33 runs it with its Transformers backend, by "
        "transformers' GPTNeoXConfig.base_model_tp_plan: attention.dense and mlp.dense_4h_to_h row-wise, each "
        "reduced); LayerNorm follows",
    ),
    Family(
        "MiniMax-M2",
        ("MiniMaxM2ForCausalLM",),
        "standard",
        True,
        "SGLang 0.5.23 models/minimax_m2.py (MiniMaxM2QKRMSNorm._forward_naive, attn_tp_all_reduce of "
        "rms_sumsq_serial's sum_sq) and vLLM 0.33 / 0.34 models/minimax_m2.py with layers/minimax_rms_norm/"
        "rms_norm_tp.py (_all_reduce_variance: var.flatten()): the q and k RMSNorm over TP-split heads all-reduces "
        "the two fp32 variances of every token as one 1-D tensor before attention (SGLang pads it to a multiple of "
        "4 elements, 16 bytes); o_proj and the MoE each all-reduce",
        extras=(("attn", 2, "float32", 4),),
        engine_extras=(("vllm", (("attn", 2, "float32", 1),)),),
    ),
    Family(
        "Nemotron-H",
        ("NemotronHForCausalLM",),
        "hybrid",
        True,
        "models/nemotron_h.py (both engines): every layer is one mixer (Mamba-2 out_proj, attention o_proj, "
        "MLP down_proj, or MoE with its shared expert summed in) ending in one all-reduce",
    ),
)

KNOWN = {arch: family for family in FAMILIES for arch in family.architectures}
# Architectures no one layout describes, and why (a refusal says so rather than suggest a layout that is wrong).
NOT_EXPRESSIBLE = {
    "KimiK3ForConditionalGeneration": (
        "its latent MoE reduces the latent [T, moe hidden] and the shared experts' [T, H] apart or fused into one "
        "all-reduce depending on the token count and the GPU (vLLM 0.33 models/kimi_k3/nvidia/latent_moe_runner.py"
        "); no one layout holds for every T. For a T that reduces them apart: --layout "
        "standard+extra@moe:<moe hidden size>"
    ),
}
# Architectures with no DP-attention path in SGLang 0.5.23: their model files (models/commandr.py for both Cohere
# classes, models/mixtral.py, models/gpt_j.py) never use LayerCommunicator or the attention-TP group, and SGLang
# has no model file for Falcon or GPT-NeoX at all; --enable-dp-attention cannot apply to them.
NO_DP_ATTENTION = {
    "CohereForCausalLM": "SGLang 0.5.23 models/commandr.py has no DP-attention path",
    "Cohere2ForCausalLM": "SGLang 0.5.23 models/commandr.py has no DP-attention path",
    "MixtralForCausalLM": "SGLang 0.5.23 models/mixtral.py has no DP-attention path",
    "GPTJForCausalLM": "SGLang 0.5.23 models/gpt_j.py has no DP-attention path",
    "FalconForCausalLM": "SGLang 0.5.23 has no Falcon model",
    "RWForCausalLM": "SGLang 0.5.23 has no Falcon model",
    "GPTNeoXForCausalLM": "SGLang 0.5.23 has no GPT-NeoX model",
}
# Config keys a family's Hugging Face config class fills in when config.json omits them, with where that is said.
CONFIG_DEFAULTS = {
    # transformers' NemotronHConfig: mamba_n_groups=8 (stored as n_groups), configuration_nemotron_h.py
    "NemotronHForCausalLM": {
        "n_groups": (8, "NemotronHConfig's default mamba_n_groups=8 (configuration_nemotron_h.py)")
    },
}


def known_families() -> str:
    """One line naming every known family by layout, for refusals."""
    by_layout = {layout: [f.name for f in FAMILIES if f.layout == layout] for layout in LAYOUTS}
    return "; ".join(f"{layout}: {'; '.join(names)}" for layout, names in by_layout.items() if names)


def architecture_of(text: dict, config: dict) -> str | None:
    """The first entry of `architectures`, the language model's (text_config) before the wrapper's."""
    for scope in (text, config):
        names = scope.get("architectures")
        if isinstance(names, list) and names and isinstance(names[0], str):
            return names[0]
    return None


def family_of(architecture: str | None, source: str) -> Family:
    """The family of an architecture; UsageError naming the known ones and the override otherwise."""
    if architecture in KNOWN:
        return KNOWN[architecture]
    if architecture in NOT_EXPRESSIBLE:
        raise UsageError(f"{source}: architecture {architecture!r} cannot be planned: {NOT_EXPRESSIBLE[architecture]}")
    what = f"architecture {architecture!r}" if architecture else "no architecture (config has no 'architectures')"
    raise UsageError(
        f"{source}: {what} is not one commprof knows how to plan ({known_families()}); say how its layers "
        f"communicate with {LAYOUT_HELP}"
    )


def parse_layout(text: str) -> tuple[str, str | None, tuple[Extra, ...]]:
    """A --layout value: ("standard" | "parallel" | "hybrid", PATTERN or None, its +extra all-reduces)."""
    base, *extra_texts = str(text).split("+extra@")
    name, _, pattern = base.partition(":")
    if name not in LAYOUTS or (name == "hybrid") != bool(pattern):
        raise UsageError(f"--layout {text!r} is not a layout (allowed: {LAYOUT_HELP})")
    extras = []
    for item in extra_texts:
        site, _, rest = item.partition(":")
        width, _, dtype = rest.partition(":")
        if site not in EXTRA_SITES or not width.isdigit() or int(width) < 1 or dtype not in ("", *EXTRA_DTYPES):
            raise UsageError(f"--layout {text!r}: +extra@{item} is not SITE:WIDTH[:DTYPE] (allowed: {LAYOUT_HELP})")
        extras.append((site, int(width), dtype or None, 0))
    return name, pattern or None, tuple(extras)


def moe_layers(text: dict, num_layers: int, source: str) -> frozenset[int]:
    """Which layers are MoE, by the config fields the engines read (the rest are dense MLPs); UsageError naming
    the field where one is not what the engines compute with (a string, NaN, 0.5, where they divide by it: 0)."""
    if _count(text, "n_routed_experts", 0, source):
        # models/deepseek_v2.py, glm4_moe.py: MoE from first_k_dense_replace on, every moe_layer_freq-th layer.
        first = _count(text, "first_k_dense_replace", 0, source)
        every = _count(text, "moe_layer_freq", 1, source)
        return frozenset(i for i in range(first, num_layers) if i % every == 0)
    if _count(text, "num_experts", 0, source) and "first_k_dense_replace" in text:
        # Kimi-Linear / Kimi-K3 (vLLM 0.34 models/kimi_k3/nvidia/model.py KimiDecoderLayer.is_moe_layer): MoE from
        # first_k_dense_replace on, every moe_layer_freq-th layer; the layers before are dense MLPs.
        first = _count(text, "first_k_dense_replace", 0, source)
        every = _count(text, "moe_layer_freq", 1, source)
        return frozenset(i for i in range(first, num_layers) if i % every == 0)
    if _count(text, "num_experts", 0, source):
        # models/qwen2_moe.py, qwen3_moe.py: sparse unless in mlp_only_layers, every decoder_sparse_step-th.
        dense = text.get("mlp_only_layers") or []
        if not isinstance(dense, list) or not all(_is_count(i, 0) for i in dense):
            raise UsageError(f"{source}: 'mlp_only_layers' must be a list of layer indices, got {str(dense)[:40]!r}")
        step, dense_layers = _count(text, "decoder_sparse_step", 1, source), set(dense)
        return frozenset(i for i in range(num_layers) if i not in dense_layers and (i + 1) % step == 0)
    if _count(text, "num_local_experts", 0, source):
        return frozenset(range(num_layers))  # Mixtral, gpt-oss: every layer
    return frozenset()


# The largest count an MoE field may hold: more experts or layers than any model has.
_MOST = 1 << 24


def _is_count(value: object, low: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= _MOST


def _count(text: dict, key: str, low: int, source: str) -> int:
    """The integer config field `key` (low..2^24; absent or null: `low`, what the engines take then)."""
    value = text.get(key)
    if value is None:
        return low
    if not _is_count(value, low):
        raise UsageError(f"{source}: {key!r} must be an integer from {low} to {_MOST}, got {str(value)[:40]!r}")
    return value


def hybrid_pattern(text: dict, num_layers: int, source: str) -> str:
    """The per-layer mixer letters of a hybrid config (hybrid_override_pattern or layers_block_type)."""
    pattern = text.get("hybrid_override_pattern")
    if pattern is None and isinstance(text.get("layers_block_type"), list):
        letters = {mixer: letter for letter, mixer in HYBRID_MIXERS.items()}
        kinds = text["layers_block_type"]
        bad = [k for k in kinds if not isinstance(k, str) or BLOCK_TYPES.get(k) is None]
        if bad:
            raise UsageError(f"{source}: layers_block_type has {bad[0]!r} (allowed: {', '.join(BLOCK_TYPES)})")
        pattern = "".join(letters[BLOCK_TYPES[k]] for k in kinds)
    if not isinstance(pattern, str) or not pattern:
        raise UsageError(f"{source}: a hybrid model needs hybrid_override_pattern (or pass {LAYOUT_HELP})")
    return check_pattern(pattern, num_layers, source)


def check_pattern(pattern: str, num_layers: int, source: str) -> str:
    bad = sorted(set(pattern) - set(HYBRID_MIXERS))
    if bad:
        raise UsageError(
            f"{source}: hybrid pattern has {bad[0]!r}, not a mixer (allowed: M Mamba, * attention, - MLP, E MoE)"
        )
    if len(pattern) != num_layers:
        raise UsageError(f"{source}: hybrid pattern has {len(pattern)} layers, the config {num_layers}")
    return pattern


def layer_sites(layout: str, num_layers: int, moe: frozenset[int], pattern: str | None) -> tuple[tuple[str, ...], ...]:
    """Every layer's reduction sites, in order."""
    if layout == "hybrid":
        return tuple((HYBRID_MIXERS[letter],) for letter in pattern or "")
    if layout == "parallel":
        return tuple(("attn+mlp",) for _ in range(num_layers))
    return tuple(("attn", "moe" if i in moe else "mlp") for i in range(num_layers))
