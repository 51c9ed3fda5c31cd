"""`commprof plan`: print the ordered collective schedule of one step."""

from __future__ import annotations

import json

import click

from commprof.planner.models import load_model
from commprof.planner.plan import PHASES, SPEC_METHODS, StepPlan, build_step_plan, step_tokens, tokens_per_request
from commprof.units import format_bytes


def format_plan(plan: StepPlan) -> str:
    """The plan as an aligned text table: every op in order, then totals per collective."""
    lines = [
        f"# {plan.model.name}: {plan.phase} step, TP {plan.tp}, T = {plan.tokens}, {plan.model.dtype} "
        f"({plan.model.num_layers} layers, hidden {plan.model.hidden_size}, vocab {plan.model.vocab_size})",
        f"{'#':>4}  {'site':<16} {'collective':<11} {'shape':<16} {'bytes':>10}",
    ]
    for op in plan.ops:
        shape = "[" + ", ".join(map(str, op.shape)) + "]"
        lines.append(f"{op.index:>4}  {op.site:<16} {op.collective:<11} {shape:<16} {op.bytes:>10}")
    totals = {c: [op for op in plan.ops if op.collective == c] for c in ("all_reduce", "all_gather")}
    for collective, ops in totals.items():
        if ops:
            size = sum(op.bytes for op in ops)
            lines.append(f"total {collective}: {len(ops)} ops, {size} bytes ({format_bytes(size)})")
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
    help="Derive tokens per request from a speculative method (SGLang's rules).",
)
@click.option("--num-steps", type=int, default=None, help="EAGLE draft steps (T = steps + 1).")
@click.option("--draft-tokens", type=int, default=None, help="NGRAM draft tokens (default 12).")
@click.option("--pad-to-graph-bucket", is_flag=True, help="Pad the batch to SGLang's CUDA-graph bucket.")
@click.option("--dtype", default=None, help="Activation dtype (default: the model's).")
@click.option("--json", "as_json", is_flag=True, help='Print JSON: an object with an "ops" list.')
def plan(model, tp, tokens, batch, phase, spec_method, num_steps, draft_tokens, pad_to_graph_bucket, dtype, as_json):
    from commprof.planner.models import normalize_dtype

    shape = load_model(model)
    if tokens is None:
        tokens = tokens_per_request(spec_method, num_steps, draft_tokens=draft_tokens) if spec_method else 1
    total = step_tokens(phase, batch, tokens, pad_to_graph_bucket)
    step = build_step_plan(shape, tp, total, phase, normalize_dtype(dtype) if dtype else None)
    click.echo(json.dumps(step.to_dict(), indent=2) if as_json else format_plan(step))
