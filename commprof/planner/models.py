"""Model shapes read from Hugging Face config.json files, and the presets bundled with commprof."""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from commprof.errors import UsageError
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

# The largest shape a config may give, far beyond any published model (Llama-3.1-405B: 126 layers, hidden 16384;
# vocabularies up to ~260k). A config past them is a mistake or an attack: a billion layers would make the plan
# and every replay grow for minutes.
SHAPE_LIMITS = {"num_layers": 2_000, "hidden_size": 1 << 17, "vocab_size": 1 << 24}


@dataclass(frozen=True)
class ModelShape:
    """The facts about a model that decide what one forward pass communicates."""

    name: str
    num_layers: int
    hidden_size: int
    vocab_size: int
    dtype: str
    source: str

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "num_layers": self.num_layers,
            "hidden_size": self.hidden_size,
            "vocab_size": self.vocab_size,
            "dtype": self.dtype,
            "source": self.source,
        }


def normalize_dtype(name: str) -> str:
    """Canonical dtype name ("bfloat16", "float16", "float32"); UsageError for anything else."""
    key = str(name).lower().removeprefix("torch.")
    if key not in _DTYPE_ALIASES:
        raise UsageError(f"unsupported dtype {name!r}; use one of bfloat16, float16, float32")
    return _DTYPE_ALIASES[key]


def shape_from_config(config: dict, name: str, source: str) -> ModelShape:
    """Read layers, hidden size, vocabulary and dtype, looking inside "text_config" for multimodal wrappers."""
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}

    def field(*keys: str, required: bool = True):
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
        value = field(*keys)
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise UsageError(f"{source}: {keys[0]!r} must be a positive integer, got {value!r}")
        if value > SHAPE_LIMITS[attr]:
            raise UsageError(f"{source}: {keys[0]!r} = {value} is beyond any model (allowed: 1..{SHAPE_LIMITS[attr]})")
        values[attr] = value
    dtype = field("dtype", "torch_dtype", required=False) or "bfloat16"
    return ModelShape(name=name, dtype=normalize_dtype(dtype), source=source, **values)


def load_model(spec: str) -> ModelShape:
    """A preset name (see PRESETS) or a path to a config.json."""
    key = spec.lower()
    if key in PRESETS:
        text = resources.files("commprof.planner.presets").joinpath(PRESETS[key]).read_text()
        return shape_from_config(json.loads(text), key, f"preset:{key}")
    path = Path(spec)
    if path.is_dir():
        path = path / "config.json"
    if not path.exists():
        if spec.endswith(".json") or "/" in spec:
            raise UsageError(f"model config not found: {spec}")
        raise UsageError(
            f"unknown model preset {spec!r}; known presets: {', '.join(PRESETS)} (or pass a path to a config.json)"
        )
    config = read_json(path, "model config")
    if not isinstance(config, dict):
        raise UsageError(f"{path}: expected a JSON object")
    return shape_from_config(config, path.parent.name or path.stem, str(path))
