"""Model shapes read from Hugging Face config.json files, and the presets bundled with commprof."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path

from commprof.errors import UsageError
from commprof.planner import architectures
from commprof.planner.engines import DEFAULT_ENGINE, DEFAULT_MXFP4_BACKEND, engine_name, mxfp4_moe_width
from commprof.textfiles import read_json

# Preset name -> bundled config.json (copied verbatim from the published configs, see presets/SOURCES.md).
PRESETS: dict[str, str] = {
    "kimi-k2.5": "Kimi-K2.5.json",
    "kimi-k2": "Kimi-K2-Instruct.json",
    "deepseek-v3": "DeepSeek-V3.json",
    "llama-3.1-70b": "Llama-3.1-70B.json",
    "llama-3.1-405b": "Llama-3.1-405B.json",
    "qwen3-235b-a22b": "Qwen3-235B-A22B.json",
}

_DTYPE_ALIASES = {
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "float16": "float16",
    "fp16": "float16",
    "half": "float16",
    "float32": "float32",
    "fp32": "float32",
    "float": "float32",
}

# Bytes per element of the activation dtypes commprof replays.
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}

# The largest shape a config may give, far beyond any published model (Llama-3.1-405B: 126 layers; Nemotron-4-340B:
# hidden 18432; Gemma 3: vocabulary 262208). A config past them is a mistake or an attack: a billion layers would make the plan
# and every replay grow for minutes.
SHAPE_LIMITS = {"num_layers": 2_000, "hidden_size": 1 << 17, "vocab_size": 1 << 24}
# Every other shape field (heads, experts, widths, groups): beyond any model, and small enough that what is computed
# from them (an MoE layer's width x its experts per token) stays a number a page can print.
OPTIONAL_LIMIT = 1 << 24


@dataclass(frozen=True)
class ModelShape:
    """The facts about a model that decide what one forward pass communicates."""

    name: str
    num_layers: int
    hidden_size: int
    vocab_size: int
    dtype: str
    source: str
    # Every layer's reduction sites in engine order (commprof/planner/architectures.py); empty: standard dense layers.
    layers: tuple[tuple[str, ...], ...] = ()
    layout: str = "standard"  # "standard", "parallel" or "hybrid"
    # Extra small all-reduces per layer: (the site each precedes, width per token, dtype, None: the model's; and
    # `flat`, 0: [T, width]; k > 0: 1-D of T x width elements rounded up to a multiple of k), architectures.Extra.
    extras: tuple[tuple[str, int, str | None, int], ...] = ()
    moe_width: int | None = None  # the MoE all-reduce's width where the engine pads it (MXFP4); None: hidden_size
    family: str = ""  # the family rule that decided the layout, or "--layout" when the user did
    architecture: str = ""
    # The config's own `architectures[0]` (a multimodal wrapper's, not its text model's): the class the engine loads
    # and keys its own defaults on (SGLang's FlashInfer all-reduce fusion); "": the config names none.
    served_architecture: str = ""
    rmsnorm_after: bool = True  # residual add + RMSNorm follows each layer reduction (fusable)
    num_heads: int | None = None  # attention heads; None: not in the config (not checked)
    num_kv_heads: int | None = None
    mamba_heads: int | None = None
    mamba_groups: int | None = None
    mtp_layers: int = 0  # num_nextn_predict_layers: the model's own MTP draft layers
    has_moe: bool = False
    intermediate_size: int | None = None  # the dense MLP's width (config "intermediate_size"); None: not given
    # An MoE layer's MLP width per token: each expert's intermediate size times the routed experts a token visits,
    # plus its shared experts; None: no MoE layer, or the config names no experts per token.
    moe_mlp_width: int | None = None

    def __post_init__(self) -> None:
        layers = tuple(tuple(layer) for layer in self.layers) or tuple(("attn", "mlp") for _ in range(self.num_layers))
        object.__setattr__(self, "layers", layers)

    def to_dict(self) -> dict:
        out = asdict(self)
        out["layers"] = [list(layer) for layer in self.layers]
        return out


def normalize_dtype(name: str) -> str:
    """Canonical dtype name ("bfloat16", "float16", "float32"); UsageError for anything else."""
    key = str(name).lower().removeprefix("torch.")
    if key not in _DTYPE_ALIASES:
        raise UsageError(f"unsupported dtype {name!r}; use one of bfloat16, float16, float32")
    return _DTYPE_ALIASES[key]


def check_size(name: str, value: int, source: str, key: str | None = None) -> None:
    """UsageError when `value` of shape field `name` (spelt `key` in the file) is beyond SHAPE_LIMITS."""
    limit = SHAPE_LIMITS[name]
    if value > limit:
        raise UsageError(f"{source}: {key or name!r} = {value} is beyond any model (allowed: 1..{limit})")


def _positive_int(value, key: str, source: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise UsageError(f"{source}: {key!r} must be a positive integer, got {str(value)[:40]!r}")
    return value


def shape_from_config(
    config: dict,
    name: str,
    source: str,
    layout: str | None = None,
    engine: str | None = None,
    mxfp4_backend: str | None = None,
) -> ModelShape:
    """Read a config's shape and layer layout, looking inside "text_config" for multimodal wrappers.

    `layout` ("standard", "parallel" or "hybrid:PATTERN") overrides what the architecture says; `engine`
    ("vllm==0.33", ...; default DEFAULT_ENGINE) picks the engine's layout where a family's differs by engine, and
    with an MXFP4 checkpoint the MoE all-reduce's padded width (`mxfp4_backend`, engines.MXFP4_HIDDEN_MULTIPLE).
    """
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}
    merged = {**config, **text}

    def field_value(*keys: str, required: bool = True):
        for scope in (text, config):
            for key in keys:
                if scope.get(key) is not None:
                    return scope[key]
        if required:
            raise UsageError(f"{source}: config lacks {keys[0]!r} (looked in text_config and at top level)")
        return None

    values = {}
    for attr, keys in (
        ("num_layers", ("num_hidden_layers", "n_layer", "num_layers")),
        ("hidden_size", ("hidden_size", "n_embd", "d_model")),
        ("vocab_size", ("vocab_size",)),
    ):
        values[attr] = _positive_int(field_value(*keys), keys[0], source)
        check_size(attr, values[attr], source, keys[0])  # before anything grows with it
    dtype = field_value("dtype", "torch_dtype", required=False) or "bfloat16"

    def optional_int(*keys: str, allow_zero: bool = False) -> int | None:
        value = field_value(*keys, required=False)
        if value is None or (allow_zero and value == 0 and not isinstance(value, bool)):
            return None
        value = _positive_int(value, keys[0], source)
        if value > OPTIONAL_LIMIT:
            raise UsageError(f"{source}: {keys[0]!r} = {value} is beyond any model (allowed: 1..{OPTIONAL_LIMIT})")
        return value

    heads = optional_int("num_attention_heads", "n_head")
    kv_heads = optional_int("num_key_value_heads", "num_kv_heads", "n_head_kv")
    if kv_heads is None and merged.get("multi_query") and not merged.get("new_decoder_architecture"):
        kv_heads = 1  # Falcon-7B style multi-query attention (vLLM models/falcon.py)
    architecture = architectures.architecture_of(text, config)
    if layout is None:
        family = architectures.family_of(architecture, source)
        refused = family.refusal(engine_name(engine or DEFAULT_ENGINE))
        if refused:
            raise UsageError(
                f"{source}: {architecture} cannot be planned as {engine or DEFAULT_ENGINE} issues it: {refused}; "
                "plan it with --engine vllm==0.34"
            )
        chosen = family.layout_for(engine_name(engine or DEFAULT_ENGINE), merged)
        rmsnorm_after, family_name, pattern = family.rmsnorm_after, family.name, None
        extras = family.extras_for(engine_name(engine or DEFAULT_ENGINE))
        if family.engine_layouts or family.engine_extras:  # the layout is this engine's: the plan says which
            family_name = f"{family.name}, as {engine or DEFAULT_ENGINE} issues it"
        if chosen == "hybrid":
            pattern = architectures.hybrid_pattern(merged, values["num_layers"], source)
    else:
        chosen, pattern, extras = architectures.parse_layout(layout)
        if pattern is not None:
            pattern = architectures.check_pattern(pattern, values["num_layers"], source)
        rmsnorm_after, family_name = True, "--layout"
    moe = architectures.moe_layers(merged, values["num_layers"], source)
    layers = architectures.layer_sites(chosen, values["num_layers"], moe, pattern)
    quantization = merged.get("quantization_config") if isinstance(merged.get("quantization_config"), dict) else {}
    moe_width = None
    if quantization.get("quant_method") == "mxfp4" and moe:
        moe_width = mxfp4_moe_width(values["hidden_size"], engine or DEFAULT_ENGINE, mxfp4_backend)
        if moe_width is not None:
            backend = mxfp4_backend or f"{DEFAULT_MXFP4_BACKEND}, assumed"
            family_name += f"; MXFP4 MoE all-reduce padded to {moe_width} ({backend} backend)"
    return ModelShape(
        name=name,
        dtype=normalize_dtype(dtype),
        source=source,
        layers=layers,
        layout=chosen,
        extras=extras,
        moe_width=moe_width,
        family=family_name,
        architecture=architecture or "",
        served_architecture=architectures.architecture_of(config, text) or "",
        rmsnorm_after=rmsnorm_after,
        num_heads=heads,
        num_kv_heads=kv_heads,
        mamba_heads=optional_int("mamba_num_heads"),
        mamba_groups=optional_int("n_groups", "mamba_n_groups") or config_default(architecture, "n_groups"),
        mtp_layers=optional_int("num_nextn_predict_layers", allow_zero=True) or 0,
        has_moe=bool(moe) or any("moe" in layer for layer in layers),
        intermediate_size=optional_int("intermediate_size", "ffn_hidden_size"),
        moe_mlp_width=_moe_mlp_width(optional_int, bool(moe)),
        **values,
    )


def _moe_mlp_width(optional_int, has_moe: bool) -> int | None:
    """Experts per token x each expert's width, plus the shared experts' (DeepSeek's n_shared_experts, Qwen2-MoE's
    shared_expert_intermediate_size); Mixtral's experts are intermediate_size wide."""
    per_token = optional_int("num_experts_per_tok", "moe_topk")
    expert = optional_int("moe_intermediate_size") or optional_int("intermediate_size", "ffn_hidden_size")
    if not has_moe or per_token is None or expert is None:
        return None
    shared = (optional_int("n_shared_experts", allow_zero=True) or 0) * expert
    return per_token * expert + shared + (optional_int("shared_expert_intermediate_size", allow_zero=True) or 0)


def config_default(architecture: str | None, key: str) -> int | None:
    """What the architecture's Hugging Face config class sets `key` to when config.json omits it."""
    default = architectures.CONFIG_DEFAULTS.get(architecture or "", {}).get(key)
    return default[0] if default else None


def load_model(
    spec: str, layout: str | None = None, engine: str | None = None, mxfp4_backend: str | None = None
) -> ModelShape:
    """A preset name (see PRESETS) or a path to a config.json (or its folder); `layout`, `engine` and
    `mxfp4_backend` as in shape_from_config."""
    key = spec.lower()
    if key in PRESETS:
        text = resources.files("commprof.planner.presets").joinpath(PRESETS[key]).read_text()
        return shape_from_config(json.loads(text), key, f"preset:{key}", layout, engine, mxfp4_backend)
    path = Path(spec)
    try:
        if path.is_dir():
            path = path / "config.json"
        found = path.exists()
    except OSError as exc:  # a name longer than the file system allows
        raise UsageError(f"model config {spec}: {exc.strerror}") from None
    if not found:
        if spec.endswith(".json") or "/" in spec:
            raise UsageError(f"model config not found: {spec}")
        raise UsageError(
            f"unknown model preset {spec!r}; known presets: {', '.join(PRESETS)} (or pass a path to a config.json)"
        )
    # A model folder's config.json is named after the folder; any other file after itself.
    name = (path.parent.name or path.stem) if path.name == "config.json" else path.stem
    config = read_json(path, "model config")
    if not isinstance(config, dict):
        raise UsageError(f"{path}: expected a JSON object")
    return shape_from_config(config, name, str(path), layout, engine, mxfp4_backend)
