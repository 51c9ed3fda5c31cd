"""The step plan: the ordered collectives of one tensor-parallel forward pass, at their real sizes.

Follows what SGLang and vLLM issue (docs/step-plan.md): one all-reduce after the vocab-parallel embedding, the
layers' reductions as their family issues them (commprof/planner/architectures.py), and one all-gather of the
vocab-parallel logits. With a speculative draft model the plan also holds the draft's K steps (marked
`draft`); with DP attention, all-gather / reduce-scatter pairs around each MLP replace the all-reduces.
Pure: no processes, no torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from commprof.errors import UsageError
from commprof.planner.architectures import NO_DP_ATTENTION
from commprof.planner.models import DTYPE_BYTES, ModelShape
from commprof.planner.speculative import (
    GRAPH_BATCH_BUCKETS,
    PHASES,
    SPEC_METHODS,
    PlanOptions,
    graph_bucket,
    step_tokens,
    tokens_per_request,
)
from commprof.planner.tensor_parallel import check_tp, padded_vocab

__all__ = [
    "COLLECTIVES",
    "GRAPH_BATCH_BUCKETS",
    "PHASES",
    "SITE_COLLECTIVES",
    "SITE_KINDS",
    "SPEC_METHODS",
    "CollectiveOp",
    "PlanOptions",
    "StepPlan",
    "build_step_plan",
    "graph_bucket",
    "step_tokens",
    "tokens_per_request",
]

# Every site kind a plan holds (the last part of an op's site) and the collective issued there.
SITE_COLLECTIVES = {
    "embed": "all_reduce",
    "attn": "all_reduce",
    "mlp": "all_reduce",
    "moe": "all_reduce",
    "attn+mlp": "all_reduce",  # a parallel block: attention and MLP summed, then reduced once
    "mamba": "all_reduce",
    "mamba_norm": "all_reduce",  # Mamba-2's gated RMSNorm over TP ranks when the model has one group
    "extra": "all_reduce",  # a layout's extra small all-reduce (MiniMax-M2's q/k variances, 1-D fp32)
    "dp_gather": "all_gather",  # DP attention: every rank's tokens gathered before the MLP / MoE / lm_head
    "dp_scatter": "reduce_scatter",  # ...and reduced back to each rank's own tokens after the MLP / MoE
    "logits": "all_gather",
}
SITE_KINDS = tuple(SITE_COLLECTIVES)
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter")


@dataclass(frozen=True)
class CollectiveOp:
    """One collective of the step, as every rank issues it."""

    index: int
    site: str  # where the engine issues it, e.g. "embed", "layer.12.attn", "draft.0.logits"
    collective: str  # "all_reduce", "all_gather" or "reduce_scatter"
    shape: tuple[int, ...]  # the output tensor on each rank
    input_shape: tuple[int, ...]  # what each rank contributes (equals shape for all-reduce)
    dtype: str
    bytes: int  # bytes of the larger buffer (gathered output, reduce-scatter input): what nccl-tests reports
    rmsnorm_after: bool  # the engine runs residual-add + RMSNorm right after it (fusable)
    draft: bool = False  # issued by the speculative draft model, not the target

    @property
    def site_kind(self) -> str:
        """The op's site without its prefix: "embed", "attn", "mlp", "moe", "logits", ..."""
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
            "draft": self.draft,
        }


@dataclass(frozen=True)
class StepPlan:
    """The ordered collectives of one forward pass of `tokens` tokens at tensor parallelism `tp`
    (with a draft model: the whole speculative cycle, verify and draft)."""

    model: ModelShape
    tp: int
    tokens: int
    phase: str
    ops: tuple[CollectiveOp, ...] = field(repr=False)
    options: PlanOptions = field(default_factory=PlanOptions)

    @property
    def total_bytes(self) -> int:
        return sum(op.bytes for op in self.ops)

    def count(self, collective: str, draft: bool | None = None) -> int:
        return sum(1 for op in self.ops if op.collective == collective and (draft is None or op.draft == draft))

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
            "layout": self.model.layout,
            "architecture": self.model.served_architecture or None,
            **{c: self.count(c) for c in COLLECTIVES},
            "draft_ops": sum(1 for op in self.ops if op.draft),
            **self.options.summary(),
            "total_bytes": self.total_bytes,
        }

    def to_dict(self) -> dict:
        return {**self.summary(), "model_source": self.model.source, "ops": [op.to_dict() for op in self.ops]}


class _Builder:
    """Appends ops in engine order; one forward pass at a time."""

    def __init__(self, model: ModelShape, tp: int, dtype: str, dp_attention: bool):
        self.model, self.tp, self.dtype, self.dp = model, tp, dtype, dp_attention
        self.size = DTYPE_BYTES[dtype]
        self.ops: list[CollectiveOp] = []
        self.draft = False  # the pass being appended is the speculative draft model's

    def add(self, site, collective, shape, input_shape, rmsnorm_after=False, dtype=None) -> None:
        dtype = dtype or self.dtype
        big = max(math.prod(shape), math.prod(input_shape))
        self.ops.append(
            CollectiveOp(
                len(self.ops),
                site,
                collective,
                tuple(shape),
                tuple(input_shape),
                dtype,
                big * DTYPE_BYTES[dtype],
                rmsnorm_after,
                self.draft,
            )
        )

    def forward(self, prefix: str, layers, tokens: int, logit_rows: int, vocab: int, draft: bool) -> None:
        """One forward pass: embedding, every layer's reductions, the logits gather."""
        self.draft = draft
        hidden, tp, norm = (tokens, self.model.hidden_size), self.tp, self.model.rmsnorm_after
        gathered = (tp * tokens, self.model.hidden_size)
        if not self.dp:
            # The embedding's all-reduce feeds layer 0's input norm, which has no residual yet: not fusable.
            self.add(f"{prefix}embed", "all_reduce", hidden, hidden)
        for number, sites in enumerate(layers):
            for site in sites:
                where = f"{prefix}layer.{number}"
                if self.dp:
                    # SGLang layers/communicator.py + dp_attention.py (MAX_LEN padding, as under CUDA graphs):
                    # attention runs whole heads per rank; the MLP / MoE sees every rank's tokens.
                    if site == "attn":
                        continue
                    self.add(f"{where}.dp_gather", "all_gather", gathered, hidden)
                    self.add(f"{where}.dp_scatter", "reduce_scatter", hidden, gathered)
                    continue
                if site == "mamba" and self.model.mamba_groups == 1 and tp > 1:
                    # layers/mamba/mamba_mixer2.py Mixer2RMSNormGated: one group split over ranks, so the sum
                    # of squares is all-reduced (fp32, one value per token) before out_proj.
                    self.add(f"{where}.mamba_norm", "all_reduce", (tokens, 1), (tokens, 1), dtype="float32")
                for anchor, width, dtype, flat in self.model.extras:
                    if anchor == site and tp > 1 and not self.draft:  # the target's layers (a draft head is not)
                        shape = (-(-tokens * width // flat) * flat,) if flat else (tokens, width)
                        self.add(f"{where}.extra", "all_reduce", shape, shape, dtype=dtype)
                shape = (tokens, self.model.moe_width) if site == "moe" and self.model.moe_width else hidden
                self.add(f"{where}.{site}", "all_reduce", shape, shape, norm)
        rows = logit_rows * tp if self.dp else logit_rows
        if self.dp:
            # layers/logits_processor.py: dp_gather_replicate of the hidden states, then the vocab-parallel head.
            self.add(
                f"{prefix}logits.dp_gather",
                "all_gather",
                (rows, self.model.hidden_size),
                (logit_rows, self.model.hidden_size),
            )
        per_rank = padded_vocab(vocab) // tp
        self.add(f"{prefix}logits", "all_gather", (rows, per_rank * tp), (rows, per_rank))


def build_step_plan(
    model: ModelShape,
    tp: int,
    tokens: int,
    phase: str = "verify",
    dtype: str | None = None,
    options: PlanOptions | None = None,
) -> StepPlan:
    """Every collective of one forward pass over `tokens` tokens (a speculative cycle with a draft model),
    in the order the engine issues them. UsageError when no engine could run it."""
    options = options or PlanOptions()
    if tokens < 1:
        raise UsageError(f"tokens must be >= 1, got {tokens}")
    if phase not in PHASES:
        raise UsageError(f"unknown phase {phase!r}; known: {', '.join(PHASES)}")
    check_tp(model, tp, options.dp_attention)
    dtype = dtype or model.dtype
    if dtype not in DTYPE_BYTES:
        raise UsageError(f"unsupported dtype {dtype!r}; use one of {', '.join(DTYPE_BYTES)}")
    draft = options.draft(model, phase, tokens)
    if options.dp_attention and model.layout != "standard":
        raise UsageError(f"{model.name}: DP attention is modelled for standard layouts, not {model.layout}")
    if options.dp_attention and model.architecture in NO_DP_ATTENTION:
        raise UsageError(
            f"{model.name}: no DP attention for {model.architecture}: {NO_DP_ATTENTION[model.architecture]} "
            "(plan it without --dp-attention)"
        )
    build = _Builder(model, tp, dtype, options.dp_attention)
    # The verify forward needs logits for every token it checks.
    build.forward("", model.layers, tokens, tokens, model.vocab_size, draft=False)
    if draft is not None:
        # SGLang eagle_worker.py / vLLM's EAGLE proposer: one draft forward over the verified tokens (logits of
        # each request's last one), then num_steps - 1 decode steps of one token per request.
        for step in range(draft.num_steps):
            step_t = tokens if step == 0 else draft.batch
            build.forward(f"draft.{step}.", (draft.layer,), step_t, draft.batch, draft.vocab_size, draft=True)
    return StepPlan(
        model=replace(model, dtype=dtype), tp=tp, tokens=tokens, phase=phase, ops=tuple(build.ops), options=options
    )
