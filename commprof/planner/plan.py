"""The step plan: the ordered collectives of one tensor-parallel forward pass, at their real sizes.

Follows what SGLang and vLLM do under pure tensor parallelism (see docs/step-plan.md): one all-reduce after
the vocab-parallel embedding, two per layer (after attention's o_proj and after the MLP / MoE), and one
all-gather of the vocab-parallel logits. Pure: no processes, no torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from commprof.errors import UsageError
from commprof.planner.models import DTYPE_BYTES, ModelShape

PHASES = ("decode", "verify")
SPEC_METHODS = ("eagle", "ngram")

# vLLM and SGLang pad the vocabulary to a multiple of 64 before splitting it across ranks.
VOCAB_PAD = 64

# SGLang's CUDA-graph batch buckets for speculative decoding: 1-8, 10-32 step 2, 40-64 step 4, 72-256 step 8.
GRAPH_BATCH_BUCKETS = tuple(range(1, 9)) + tuple(range(10, 33, 2)) + tuple(range(40, 65, 4)) + tuple(range(72, 257, 8))


@dataclass(frozen=True)
class CollectiveOp:
    """One collective of the step, as every rank issues it."""

    index: int
    site: str  # where the engine issues it, e.g. "embed", "layer.12.attn", "logits"
    collective: str  # "all_reduce" or "all_gather"
    shape: tuple[int, ...]  # the output tensor on each rank
    input_shape: tuple[int, ...]  # what each rank contributes (equals shape for all-reduce)
    dtype: str
    bytes: int  # bytes of the output buffer, the size nccl-tests reports
    rmsnorm_after: bool  # the engine runs residual-add + RMSNorm right after it (fusable)

    @property
    def site_kind(self) -> str:
        """The op's site without the layer number: "embed", "attn", "mlp" or "logits"."""
        return self.site.rsplit(".", 1)[-1]

    def to_dict(self) -> dict:
        return {
            "index": self.index,
            "site": self.site,
            "collective": self.collective,
            "shape": list(self.shape),
            "input_shape": list(self.input_shape),
            "dtype": self.dtype,
            "bytes": self.bytes,
            "rmsnorm_after": self.rmsnorm_after,
        }


@dataclass(frozen=True)
class StepPlan:
    """The ordered collectives of one forward pass of `tokens` tokens at tensor parallelism `tp`."""

    model: ModelShape
    tp: int
    tokens: int
    phase: str
    ops: tuple[CollectiveOp, ...] = field(repr=False)

    @property
    def total_bytes(self) -> int:
        return sum(op.bytes for op in self.ops)

    def count(self, collective: str) -> int:
        return sum(1 for op in self.ops if op.collective == collective)

    @property
    def max_numel(self) -> int:
        """Elements of the largest all-reduce, which sizes implementation workspaces."""
        return max((math.prod(op.shape) for op in self.ops if op.collective == "all_reduce"), default=0)

    def summary(self) -> dict:
        return {
            "model": self.model.name,
            "tp": self.tp,
            "tokens": self.tokens,
            "phase": self.phase,
            "dtype": self.model.dtype,
            "hidden_size": self.model.hidden_size,
            "num_layers": self.model.num_layers,
            "vocab_size": self.model.vocab_size,
            "all_reduce": self.count("all_reduce"),
            "all_gather": self.count("all_gather"),
            "total_bytes": self.total_bytes,
        }

    def to_dict(self) -> dict:
        return {**self.summary(), "model_source": self.model.source, "ops": [op.to_dict() for op in self.ops]}


def graph_bucket(batch: int) -> int:
    """The CUDA-graph batch an engine pads `batch` to (SGLang's speculative buckets); beyond them, unchanged."""
    for bucket in GRAPH_BATCH_BUCKETS:
        if bucket >= batch:
            return bucket
    return batch


def tokens_per_request(spec: str, num_steps: int | None = None, topk: int = 1, draft_tokens: int | None = None) -> int:
    """Tokens one request contributes to a verify step under SGLang's rules.

    EAGLE / EAGLE-3 chain (topk 1) with num_steps k verifies k + 1 tokens; NGRAM always verifies
    num_draft_tokens (default 12), padded when fewer drafts are found.
    """
    if spec == "eagle":
        if topk != 1:
            raise UsageError("EAGLE with topk > 1 verifies a tree: pass --tokens (num_draft_tokens) instead")
        if num_steps is None or num_steps < 1:
            raise UsageError("EAGLE needs --num-steps >= 1")
        return num_steps + 1
    if spec == "ngram":
        draft = 12 if draft_tokens is None else draft_tokens
        if draft < 1:
            raise UsageError("NGRAM needs --draft-tokens >= 1")
        return draft
    raise UsageError(f"unknown speculative method {spec!r}; known: {', '.join(SPEC_METHODS)}")


def step_tokens(phase: str, batch: int = 1, per_request: int = 1, pad_to_graph_bucket: bool = False) -> int:
    """T for one step: decode verifies one token per request, verify `per_request` tokens per request."""
    if phase not in PHASES:
        raise UsageError(f"unknown phase {phase!r}; known: {', '.join(PHASES)}")
    if batch < 1:
        raise UsageError(f"batch must be >= 1, got {batch}")
    if per_request < 1:
        raise UsageError(f"tokens must be >= 1, got {per_request}")
    if phase == "decode" and per_request != 1:
        raise UsageError("decode verifies one token per request; use --phase verify for more")
    padded = graph_bucket(batch) if pad_to_graph_bucket else batch
    return padded * per_request


def build_step_plan(
    model: ModelShape, tp: int, tokens: int, phase: str = "verify", dtype: str | None = None
) -> StepPlan:
    """Every collective of one forward pass over `tokens` tokens, in the order the engine issues them."""
    if tp < 1:
        raise UsageError(f"tensor parallel degree must be >= 1, got {tp}")
    if tokens < 1:
        raise UsageError(f"tokens must be >= 1, got {tokens}")
    if phase not in PHASES:
        raise UsageError(f"unknown phase {phase!r}; known: {', '.join(PHASES)}")
    dtype = dtype or model.dtype
    if dtype not in DTYPE_BYTES:
        raise UsageError(f"unsupported dtype {dtype!r}; use one of {', '.join(DTYPE_BYTES)}")
    size = DTYPE_BYTES[dtype]
    hidden = (tokens, model.hidden_size)
    hidden_bytes = tokens * model.hidden_size * size
    vocab_per_rank = math.ceil(math.ceil(model.vocab_size / VOCAB_PAD) * VOCAB_PAD / tp)

    ops: list[CollectiveOp] = []

    def add(site: str, collective: str, shape, input_shape, nbytes: int, rmsnorm_after: bool) -> None:
        ops.append(
            CollectiveOp(len(ops), site, collective, tuple(shape), tuple(input_shape), dtype, nbytes, rmsnorm_after)
        )

    # The embedding's all-reduce feeds layer 0's input RMSNorm, which has no residual yet: not fusable.
    add("embed", "all_reduce", hidden, hidden, hidden_bytes, False)
    for layer in range(model.num_layers):
        add(f"layer.{layer}.attn", "all_reduce", hidden, hidden, hidden_bytes, True)
        add(f"layer.{layer}.mlp", "all_reduce", hidden, hidden, hidden_bytes, True)
    gathered = (tokens, vocab_per_rank * tp)
    add("logits", "all_gather", gathered, (tokens, vocab_per_rank), math.prod(gathered) * size, False)
    return StepPlan(model=replace(model, dtype=dtype), tp=tp, tokens=tokens, phase=phase, ops=tuple(ops))
