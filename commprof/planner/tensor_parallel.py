"""Which tensor-parallel degrees the engines can run a model at, and how they split its vocabulary.

Each rule mirrors a check SGLang and vLLM make when they build the model's layers (the same code in both:
SGLang's layers were ported from vLLM's); an impossible degree is refused in one line naming the numbers.
Pure.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from commprof.errors import UsageError

if TYPE_CHECKING:
    from commprof.planner.models import ModelShape

# layers/vocab_parallel_embedding.py (both engines): DEFAULT_VOCAB_PADDING_SIZE. The vocabulary is padded to a
# multiple of it, then split evenly: num_embeddings_per_partition = divide(num_embeddings_padded, tp_size).
VOCAB_PAD = 64


def padded_vocab(vocab_size: int) -> int:
    """The vocabulary as the engines allocate it: rounded up to a multiple of VOCAB_PAD."""
    return -(-vocab_size // VOCAB_PAD) * VOCAB_PAD


def tp_problems(model: ModelShape, tp: int, dp_attention: bool = False) -> list[str]:
    """Why the engines cannot run `model` at TP `tp` (empty when they can)."""
    problems = []
    kinds = {site for layer in model.layers for site in layer}
    has_attention = bool(kinds & {"attn", "attn+mlp"})
    # With DP attention every rank runs whole attention heads for its own requests: heads are not split.
    if has_attention and not dp_attention and model.num_heads:
        if model.num_heads % tp:
            # QKVParallelLinear / every attention layer: num_heads = divide(total_num_heads, tp_size).
            problems.append(f"{model.num_heads} attention heads do not divide by {tp}")
        kv = model.num_kv_heads or model.num_heads
        # Attention layers: KV heads are split when there are at least TP of them, else replicated,
        # which needs tp_size % total_num_kv_heads == 0.
        if kv >= tp and kv % tp:
            problems.append(f"{kv} KV heads do not divide by {tp}")
        elif kv < tp and tp % kv:
            problems.append(f"{kv} KV heads cannot be replicated evenly over {tp} ranks ({tp} % {kv} != 0)")
    if "mamba" in kinds and model.mamba_heads:
        # layers/mamba/mamba_mixer2.py: "Tensor parallel world size must divide num heads", and groups divide
        # by TP or are a single group (then replicated).
        if model.mamba_heads % tp:
            problems.append(f"{model.mamba_heads} Mamba heads do not divide by {tp}")
        groups = model.mamba_groups or 1
        if groups != 1 and groups % tp:
            problems.append(f"{groups} Mamba groups neither divide by {tp} nor are a single group")
    padded = padded_vocab(model.vocab_size)
    if padded % tp:
        problems.append(f"the vocabulary padded to a multiple of {VOCAB_PAD} ({padded}) does not divide by {tp}")
    return problems


def check_tp(model: ModelShape, tp: int, dp_attention: bool = False) -> None:
    """UsageError in one line when no engine can run `model` at TP `tp`."""
    if tp < 1:
        raise UsageError(f"tensor parallel degree must be >= 1, got {tp}")
    problems = tp_problems(model, tp, dp_attention)
    if problems:
        raise UsageError(f"{model.name}: TP {tp} is impossible: {'; '.join(problems)} (SGLang and vLLM refuse it)")
