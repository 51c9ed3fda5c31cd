"""T for a step, and the speculative draft model whose collectives join the verify step's.

T follows SGLang's rules (docs/step-plan.md). The draft model of EAGLE / EAGLE-3 and of MTP runs at the same
TP as the target, so its K steps issue their own embedding, layer and logits collectives every cycle. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass

from commprof.errors import UsageError
from commprof.planner.models import ModelShape, check_size

PHASES = ("decode", "verify")
SPEC_METHODS = ("eagle", "mtp", "ngram")
DRAFT_METHODS = ("eagle", "mtp")  # the methods with a draft model (NGRAM drafts from a table, no collectives)

# More draft steps than this is no speculative setup an engine runs (they ship 1 to about 10).
MAX_DRAFT_STEPS = 64

# SGLang's CUDA-graph batch buckets for speculative decoding: 1-8, 10-32 step 2, 40-64 step 4, 72-256 step 8.
GRAPH_BATCH_BUCKETS = tuple(range(1, 9)) + tuple(range(10, 33, 2)) + tuple(range(40, 65, 4)) + tuple(range(72, 257, 8))


def graph_bucket(batch: int) -> int:
    """The CUDA-graph batch an engine pads `batch` to (SGLang's speculative buckets); beyond them, unchanged."""
    for bucket in GRAPH_BATCH_BUCKETS:
        if bucket >= batch:
            return bucket
    return batch


def tokens_per_request(spec: str, num_steps: int | None = None, topk: int = 1, draft_tokens: int | None = None) -> int:
    """Tokens one request contributes to a verify step under SGLang's rules.

    EAGLE / EAGLE-3 / MTP chain (topk 1) with num_steps k verifies k + 1 tokens; NGRAM always verifies
    num_draft_tokens (default 12), padded when fewer drafts are found.
    """
    if spec in DRAFT_METHODS:
        if topk != 1:
            raise UsageError(f"{spec} with topk > 1 verifies a tree: pass --tokens (num_draft_tokens) instead")
        if num_steps is None or num_steps < 1:
            raise UsageError(f"{spec} needs --num-steps >= 1")
        if num_steps > MAX_DRAFT_STEPS:
            raise UsageError(f"--num-steps {num_steps} is beyond commprof's limit of {MAX_DRAFT_STEPS} draft steps")
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


@dataclass(frozen=True)
class DraftModel:
    """The draft model of one speculative cycle: its layer, its vocabulary, its steps and the batch."""

    method: str
    num_steps: int
    batch: int  # requests in the batch: the verify T is batch x (num_steps + 1)
    vocab_size: int
    layer: tuple[str, ...]  # the one draft layer's reduction sites


@dataclass(frozen=True)
class PlanOptions:
    """What the step holds beyond the target's forward pass (all off by default)."""

    spec: str | None = None  # "eagle" or "mtp": add the draft model's collectives; "ngram": no draft model
    num_steps: int | None = None  # draft steps K (verify T per request = K + 1)
    draft_vocab: int | None = None  # EAGLE-3's draft_vocab_size; default: the target's vocabulary
    dp_attention: bool = False  # SGLang --enable-dp-attention with DP size = TP: T is tokens per rank

    def __post_init__(self) -> None:
        if not isinstance(self.dp_attention, bool):
            raise UsageError(f"dp_attention must be true or false, got {self.dp_attention!r}")
        if self.num_steps is not None and (isinstance(self.num_steps, bool) or not isinstance(self.num_steps, int)):
            raise UsageError(f"--num-steps must be an integer, got {self.num_steps!r}")
        if self.spec is not None and self.spec not in SPEC_METHODS:
            raise UsageError(f"unknown speculative method {self.spec!r}; known: {', '.join(SPEC_METHODS)}")
        if self.spec in DRAFT_METHODS:
            tokens_per_request(self.spec, self.num_steps)  # validates num_steps
        if self.draft_vocab is not None:
            if self.spec != "eagle":
                raise UsageError("--draft-vocab applies to --spec eagle (an EAGLE-3 head's draft_vocab_size)")
            if isinstance(self.draft_vocab, bool) or not isinstance(self.draft_vocab, int) or self.draft_vocab < 1:
                raise UsageError(f"--draft-vocab must be an integer >= 1, got {self.draft_vocab!r}")
            check_size("vocab_size", self.draft_vocab, "--draft-vocab")

    def summary(self) -> dict:
        return {
            "spec": self.spec,
            "num_steps": self.num_steps,
            "draft_vocab": self.draft_vocab,
            "dp_attention": self.dp_attention,
        }

    def draft(self, model: ModelShape, phase: str, tokens: int) -> DraftModel | None:
        """The draft model of this step's cycle, or None; UsageError when the model has none of that kind."""
        if self.spec not in DRAFT_METHODS:
            return None
        if phase != "verify":
            raise UsageError(f"--spec {self.spec} drafts for the verify phase, not {phase}")
        per_request = self.num_steps + 1
        if tokens % per_request:
            raise UsageError(
                f"T = {tokens} is not a whole batch of {per_request}-token requests "
                f"({self.spec} with {self.num_steps} steps verifies {per_request} tokens per request)"
            )
        if self.spec == "mtp":
            if not model.mtp_layers:
                raise UsageError(
                    f"{model.name}: --spec mtp needs the model's own MTP layer, and its config has "
                    f"num_nextn_predict_layers = 0 or none; use --spec eagle"
                )
            if model.layout != "standard":
                raise UsageError(f"{model.name}: MTP drafts are modelled for standard layouts, not {model.layout}")
            # SGLang models/deepseek_nextn.py, glm4_moe_nextn.py: one decoder layer of the target's MoE kind,
            # its own vocab-parallel embedding and shared head (the target's vocabulary).
            layer = ("attn", "moe" if model.has_moe else "mlp")
            vocab = model.vocab_size
        else:
            # SGLang models/llama_eagle3.py: one Llama decoder layer at the target's hidden size, a
            # vocab-parallel embedding, and an lm_head over draft_vocab_size (the target's when unset).
            layer = ("attn", "mlp")
            vocab = self.draft_vocab or model.vocab_size
        return DraftModel(self.spec, self.num_steps, tokens // per_request, vocab, layer)
