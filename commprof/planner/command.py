"""`commprof plan`: print the ordered collective schedule of one step."""

from __future__ import annotations

import json

import click

from commprof.planner.architectures import LAYOUT_HELP
from commprof.planner.engines import DEFAULT_MXFP4_BACKEND, ENGINE_HELP, MXFP4_HIDDEN_MULTIPLE, parse_plan_engine
from commprof.planner.models import load_model
from commprof.planner.plan import COLLECTIVES, PHASES, SPEC_METHODS, PlanOptions, StepPlan, build_step_plan, step_tokens
from commprof.planner.speculative import tokens_per_request
from commprof.terminal import echo
from commprof.units import format_bytes


def _totals(label: str, ops) -> list[str]:
    lines = []
    for collective in COLLECTIVES:
        chosen = [op for op in ops if op.collective == collective]
        if chosen:
            size = sum(op.bytes for op in chosen)
            lines.append(f"{label}{collective}: {len(chosen)} ops, {size} bytes ({format_bytes(size)})")
    return lines


def format_plan(plan: StepPlan) -> str:
    """The plan as an aligned text table: every op in order, then totals per collective (draft apart)."""
    model = plan.model
    extras = [f"{model.layout} layout ({model.family or 'default'})"]
    if plan.options.spec:
        steps = f" --num-steps {plan.options.num_steps}" if plan.options.num_steps is not None else ""
        extras.append(f"--spec {plan.options.spec}{steps}")
    if plan.options.dp_attention:
        extras.append("DP attention: T per rank")
    lines = [
        f"# {model.name}: {plan.phase} step, TP {plan.tp}, T = {plan.tokens}, {model.dtype} "
        f"({model.num_layers} layers, hidden {model.hidden_size}, vocab {model.vocab_size}); {', '.join(extras)}",
    ]
    shapes = ["[" + ", ".join(map(str, op.shape)) + "]" for op in plan.ops]
    site_width = max([24, *(len(op.site) for op in plan.ops)])
    shape_width = max([16, *map(len, shapes)])
    lines.append(f"{'#':>4}  {'site':<{site_width}} {'collective':<14} {'shape':<{shape_width}} {'bytes':>10}")
    for op, shape in zip(plan.ops, shapes):
        lines.append(
            f"{op.index:>4}  {op.site:<{site_width}} {op.collective:<14} {shape:<{shape_width}} {op.bytes:>10}"
        )
    draft = [op for op in plan.ops if op.draft]
    lines += _totals("total ", plan.ops)
    if draft:
        lines += _totals("  verify (target) ", [op for op in plan.ops if not op.draft])
        lines += _totals("  draft ", draft)
    lines.append(f"total: {len(plan.ops)} collectives, {plan.total_bytes} bytes ({format_bytes(plan.total_bytes)})")
    return "\n".join(lines)


@click.command(help="Print the ordered collective schedule of one step (what the sweep replays).")
@click.option("--model", default="kimi-k2.5", show_default=True, help="Preset name or path to a config.json.")
@click.option("--tp", type=int, default=8, show_default=True, help="Tensor parallel degree.")
@click.option(
    "--tokens",
    type=int,
    default=None,
    help="Tokens per request in the step (verify: T per request; decode: 1). Default: from --spec, else 1.",
)
@click.option("--batch", type=int, default=1, show_default=True, help="Requests in the batch.")
@click.option("--phase", type=click.Choice(PHASES), default="verify", show_default=True)
@click.option(
    "--spec",
    "spec_method",
    type=click.Choice(SPEC_METHODS),
    default=None,
    help="Speculative method: T per request from SGLang's rules; eagle and mtp add the draft model's collectives.",
)
@click.option("--num-steps", type=int, default=None, help="EAGLE / MTP draft steps K (T per request = K + 1).")
@click.option("--draft-tokens", type=int, default=None, help="NGRAM draft tokens (default 12).")
@click.option("--draft-vocab", type=int, default=None, help="EAGLE-3 head's draft_vocab_size (default: the model's).")
@click.option("--dp-attention", is_flag=True, help="SGLang DP attention (DP size = TP); T is tokens per rank.")
@click.option("--layout", default=None, help=f"Override the layout the architecture implies: {LAYOUT_HELP}.")
@click.option("--engine", default=None, help=f"Plan as this engine issues the model's collectives: {ENGINE_HELP}.")
@click.option(
    "--mxfp4-backend",
    type=click.Choice(tuple(MXFP4_HIDDEN_MULTIPLE)),
    default=None,
    help=f"vLLM's MXFP4 MoE backend, which pads the MoE all-reduce (default {DEFAULT_MXFP4_BACKEND}, assumed).",
)
@click.option("--pad-to-graph-bucket", is_flag=True, help="Pad the batch to SGLang's CUDA-graph bucket.")
@click.option("--dtype", default=None, help="Activation dtype (default: the model's).")
@click.option("--json", "as_json", is_flag=True, help='Print JSON: an object with an "ops" list.')
def plan(
    model,
    tp,
    tokens,
    batch,
    phase,
    spec_method,
    num_steps,
    draft_tokens,
    draft_vocab,
    dp_attention,
    layout,
    engine,
    mxfp4_backend,
    pad_to_graph_bucket,
    dtype,
    as_json,
):
    from commprof.planner.models import normalize_dtype

    shape = load_model(model, layout, parse_plan_engine(engine) if engine else None, mxfp4_backend)
    if tokens is None:
        tokens = tokens_per_request(spec_method, num_steps, draft_tokens=draft_tokens) if spec_method else 1
    options = PlanOptions(spec_method, num_steps, draft_vocab, dp_attention)
    total = step_tokens(phase, batch, tokens, pad_to_graph_bucket)
    step = build_step_plan(shape, tp, total, phase, normalize_dtype(dtype) if dtype else None, options)
    echo(json.dumps(step.to_dict(), indent=2) if as_json else format_plan(step))
