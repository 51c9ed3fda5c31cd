"""How `commprof explain` says its answer in a terminal: the verdict, each explanation with its predicted and
observed times, what the box's records say and the fix. Pure: an Explained in, lines out."""

from __future__ import annotations

from commprof.explain.ranking import Explained, Explanation

SIZES_SHOWN = 12  # per-size rows of the first explanation; --json has every one


def state_words(e: Explanation) -> str:
    """Whether it explains the observation, in a few words."""
    if e.explains:
        return f"explains: median error {e.error_pct:.0f} % within ±{e.allowed_pct:g} %"
    if e.explains is None and e.allowed_pct is not None:  # within error only through a fitted magnitude
        n = e.judged_count
        return (
            f"median error {e.error_pct:.0f} %, but only with a magnitude fitted to "
            f"{'the one observation' if n == 1 else f'the {n} observations'}: not judged"
        )
    if e.explains is None:
        return f"median error {e.error_pct:.0f} % (the model's error is unknown: not judged)"
    return f"does not explain it: median error {e.error_pct:.0f} %, beyond ±{e.allowed_pct:g} %"


def _sizes(e: Explanation) -> list[str]:
    shown = [s for s in e.sizes if s.judged][:SIZES_SHOWN]
    lines = [f"      {'observed':<22} {'observed us':>12} {'predicted us':>13} {'error':>8}"]
    lines += [
        f"      {s.label:<22} {s.observed_us:>12.1f} {s.predicted_us:>13.1f} {s.error_pct:>+7.0f}%" for s in shown
    ]
    left = len(e.sizes) - len(shown)
    if left:
        lines.append(f"      (+{left} more: outside the judged sizes or beyond {SIZES_SHOWN} rows; --json has each)")
    return lines


def explained_lines(result: Explained, observed_from: str) -> list[str]:
    """The terminal's answer: verdict first, then every explanation, best first."""
    count = len(result.explanations[0].sizes) if result.explanations else 0
    lines = [
        f"commprof explain: {count} observation(s) from {observed_from} (repeats of one size merged, their median)",
        f"box: {result.box}",
        f"model error: {result.error.band} ({result.error.basis}); {result.judged_note}",
        "",
        f"verdict: {result.verdict}",
    ]
    if result.tell_apart:
        lines.append(f"next: {result.tell_apart}")
    for number, e in enumerate(result.explanations, 1):
        magnitude = f" [{e.magnitude}]" if e.magnitude else ""
        lines += ["", f"{number}. {e.condition}{magnitude}: {state_words(e)}; records: {e.evidence.status}"]
        if number == 1:
            lines += _sizes(e)
        lines += [f"   read: {line}" for line in e.evidence.lines[:3]]
        if e.evidence.fix and e.conditions:
            lines.append(f"   fix: {e.evidence.fix}")
        lines.append(f"   priced as: {e.basis}")
    if result.same_as_modelled:
        lines.append("")
        lines += [f"no change on this box: {c}: {why}" for c, why in result.same_as_modelled]
    lines += [f"landmine: {line}" for line in result.landmines]
    return lines
