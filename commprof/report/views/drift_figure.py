"""The baseline over the run's time: each of its measurements (the first, the repeats, the closing one) with the
drift band they span, so a gain can be set against how far the box moved. matplotlib, like figures.py."""

from __future__ import annotations

from typing import Any

from commprof.report.views.figures import subplots, to_svg


def drift_svg(drift: dict[str, Any]) -> str:
    """Baseline step time (ms, summed over T) per measurement in time order, the band between its extremes (the
    Decision's environment.drift)."""
    samples = drift["samples"]
    totals = [s["total_us"] / 1000.0 for s in samples]
    order = list(range(1, len(totals) + 1))
    fig, ax = subplots(figsize=(7.5, 2.6))
    fig.subplots_adjust(left=0.09, right=0.98, bottom=0.2, top=0.92)
    ax.axhspan(min(totals), max(totals), color="#d95f02" if drift["exceeded"] else "#7570b3", alpha=0.15)
    ax.plot(order, totals, marker="o", color="#333333")
    labels = [
        f"{s['time'][11:19] or '?'}\n" + ("first" if s["repeat"] == 0 else f"again {s['repeat']}") for s in samples
    ]
    ax.set_xticks(order, labels, fontsize=7)
    ax.set_ylabel("baseline ms per step")
    band = drift["band_pct"]
    ax.set_title(
        f"baseline over the run ({drift['mode']} mode): drift band {band:.1f} %" if band is not None else "",
        fontsize=9,
    )
    return to_svg(fig)
