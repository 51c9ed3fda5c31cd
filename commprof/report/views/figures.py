"""The report's plots as inline SVG strings (matplotlib's SVG writer, no network): one function per figure.

Inputs are a Decision's tables (as DataFrames or plain lists, views/page.py makes them); outputs are `<svg>` text with ids made unique per figure, so
several figures can live in one HTML page. Step times are drawn in ms, single collectives in µs.
"""

from __future__ import annotations

import io
import itertools
import math
import re
import textwrap
from collections.abc import Iterator

import matplotlib.artist

# matplotlib writes the help text of each artist class's `set` as it defines the class, a quarter of its import: the
# process that draws the figures shows no help text, so it is left empty (before the artists' modules are imported).
matplotlib.artist.kwdoc = lambda artist: ""

import matplotlib  # noqa: E402
import matplotlib.axis  # noqa: E402
import matplotlib.collections  # noqa: E402
import matplotlib.patches  # noqa: E402
import matplotlib.text  # noqa: E402
import matplotlib.ticker  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

# A Figure with the SVG writer's canvas, not pyplot: no figure manager, no GUI backend to choose (a tenth of the
# import, and of each figure's making).
from matplotlib.backends.backend_svg import FigureCanvasSVG  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from commprof.terminal import printable  # noqa: E402

matplotlib.rcParams.update(
    {
        "svg.fonttype": "none",  # text stays text: smaller files, selectable, prints crisply
        "svg.hashsalt": "commprof",  # stable ids (made unique per figure below)
        "font.size": 9,
        "axes.titlesize": 10,
        "axes.spines.top": False,
        "axes.spines.right": False,
        "font.family": ["DejaVu Sans", "sans-serif"],
    }
)

COLORS = {"baseline": "#8c8c8c", "answer": "#1f6fb4", "comm": "#1f6fb4", "overhead": "#f0a030", "compute": "#b9c7d6"}
_figure_counter = itertools.count()


def to_svg(fig) -> str:
    """A figure as inline `<svg>` text; ids prefixed per figure so pages with many figures stay valid."""
    _printable_text(fig)
    buffer = io.StringIO()
    # No bbox_inches="tight" (it draws the figure twice); no RDF metadata block (date, creator): stable output.
    fig.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None, "Format": None, "Type": None})
    text = buffer.getvalue()
    text = text[text.index("<svg") :]
    prefix = f"f{next(_figure_counter)}-"
    text = re.sub(r'\bid="', f'id="{prefix}', text)
    text = text.replace("url(#", f"url(#{prefix}").replace('href="#', f'href="#{prefix}')
    return text


def _printable_text(fig) -> None:
    """Every text of `fig` as a terminal would print it (labels come from users): no control character reaches the
    font, its warnings or the page. Tick labels given as text are kept by their formatter until drawn."""
    for text in _texts(fig):
        text.set_text(printable(text.get_text()))
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            formatter = axis.get_major_formatter()
            if isinstance(formatter, matplotlib.ticker.FixedFormatter):
                formatter.seq = [printable(label) for label in formatter.seq]
            elif isinstance(formatter, matplotlib.ticker.FuncFormatter):  # what set_xticklabels makes
                formatter.func = lambda x, pos, labels=formatter.func: printable(labels(x, pos))


def _texts(artist) -> Iterator[matplotlib.text.Text]:
    """The texts of `artist` and of what it holds, but an axis's ticks: their labels come from the axis's formatter
    when drawn (asking for the ticks before would make them, and again once the limits are known)."""
    if isinstance(artist, matplotlib.text.Text):
        yield artist
    if isinstance(artist, matplotlib.axis.Axis):
        yield from (artist.label, artist.offsetText)
        return
    for child in artist.get_children():
        yield from _texts(child)


def subplots(lines: int = 1, columns: int = 1, **options):
    """pyplot.subplots without pyplot: a Figure (on the SVG writer's canvas) and its axes."""
    fig = Figure(figsize=options.pop("figsize"))
    FigureCanvasSVG(fig)
    return fig, fig.subplots(lines, columns, **options)


def _log_scale(axis, base: float = 10, numbered: bool = False) -> None:
    """A log scale without minor ticks: ticks are the costliest artists to draw, and the unlabelled minor ones were
    a fifth of a report's drawing. `numbered`: ticks at 1, 2 and 5 of each decade, labelled as plain numbers."""
    getattr(axis.axes, f"set_{axis.axis_name}scale")("log", base=base)
    axis.set_minor_locator(matplotlib.ticker.NullLocator())
    if numbered:
        axis.set_major_locator(matplotlib.ticker.LogLocator(base=base, subs=(1.0, 2.0, 5.0)))
        axis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))


def _single_axes(size: tuple[float, float]):
    """A figure with one axes and fixed margins (cheaper than a layout engine, same look for these plots)."""
    fig, ax = subplots(figsize=size)
    fig.subplots_adjust(left=0.09, right=0.98, bottom=0.15, top=0.96)
    return fig, ax


def breakdown_svg(
    parts: pd.DataFrame, compute_given: bool, mode: str = "graph", labels: dict[str, str] | None = None
) -> str:
    """Per T, for each setting (baseline, recommended, answer, as present) a bar of the verify latency as the table
    gives it, communication (in `mode`) + compute, and beside it a thin hatched bar of the launch overhead
    (eager - graph), which an engine replaying the captured graph does not pay. `labels` names the settings."""
    tokens = sorted(parts["tokens"].unique())
    settings = [s for s in ("baseline", "recommended", "answer") if (parts["setting"] == s).any()]
    fig, ax = _single_axes((7.5, 3.2))
    fig.subplots_adjust(top=0.86)  # the legend sits above the bars
    width = 0.8 / len(settings)
    for k, setting in enumerate(settings):
        rows = parts[parts["setting"] == setting].set_index("tokens").reindex(tokens)
        x = np.arange(len(tokens)) + (k - (len(settings) - 1) / 2) * width
        comm = rows["comm_ms"].fillna(0).to_numpy()
        over = rows["overhead_ms"].clip(lower=0).fillna(0).to_numpy()
        comp = rows["compute_ms"].fillna(0).to_numpy() if compute_given else np.zeros(len(tokens))
        alpha = 0.55 if setting == "baseline" else 1.0
        first = k == len(settings) - 1
        stack_x = x - width * 0.14
        ax.bar(
            stack_x,
            comm,
            width * 0.68,
            color=COLORS["comm"],
            alpha=alpha,
            label=f"communication ({mode})" if first else None,
        )
        if compute_given:
            ax.bar(
                stack_x,
                comp,
                width * 0.68,
                bottom=comm,
                color=COLORS["compute"],
                alpha=alpha,
                label="compute (given)" if first else None,
            )
        if over.any():
            ax.bar(
                x + width * 0.34,
                over,
                width * 0.24,
                color="white",
                edgecolor=COLORS["overhead"],
                hatch="//",
                label="launch overhead (eager − graph), not paid in a graph" if first else None,
            )
        name = (labels or {}).get(setting, setting)
        for xi, top in zip(stack_x, comm + comp):
            ax.text(xi, top, name, ha="center", va="bottom", fontsize=6.5, color="#444")
    ax.set_xticks(np.arange(len(tokens)), [f"T = {t}" for t in tokens])
    ax.set_ylabel("verify latency, ms per step")
    ax.legend(frameon=False, fontsize=8, loc="lower left", bbox_to_anchor=(0.0, 1.0), ncol=3)
    ax.margins(y=0.15)
    return to_svg(fig)


def sites_svg(per_tokens: dict[int, dict[str, dict[str, list[float]]]]) -> str:
    """Per T, the distribution of per-op median latency (µs) by op site (in the Decision's order), baseline vs the
    answer (eager records): {T: {setting: {site kind: [each op's median]}}}.

    Boxes are the quartiles over the step's ops of that site, whiskers their min and max.
    """
    count = len(per_tokens)
    columns = min(count, 4)
    lines = math.ceil(count / columns)
    # Fixed margins, not a layout engine: constrained layout costs half again the drawing time.
    fig, axes = subplots(lines, columns, figsize=(3.3 * columns, 2.8 * lines), squeeze=False)
    # ~0.75 inch on the left for the tick labels and the axis label, whatever the width.
    fig.subplots_adjust(
        left=max(0.07, 0.75 / (3.3 * columns)), right=0.99, bottom=0.1, top=0.84, wspace=0.35, hspace=0.45
    )
    for ax, (tokens, settings) in zip(axes.flat, per_tokens.items()):
        positions, data, colors, ticks = [], [], [], []
        present = list(dict.fromkeys(kind for sites in settings.values() for kind in sites))
        for k, site in enumerate(present):
            for j, (setting, sites) in enumerate(settings.items()):
                values = np.asarray(sites.get(site, []), dtype=float)
                if values.size:
                    positions.append(k * 3 + j)
                    data.append(values)
                    colors.append(COLORS.get(setting, "#555"))
            ticks.append((k * 3 + 0.5, site))
        if data:
            _boxes(ax, positions, data, colors)
        ax.set_xticks([t for t, _ in ticks], [s for _, s in ticks])
        ax.set_title(f"T = {tokens}")
        ax.set_ylabel("µs per op (median)")
        _log_scale(ax.yaxis, numbered=True)
    for ax in axes.flat[count:]:
        ax.axis("off")
    handles = [matplotlib.patches.Rectangle((0, 0), 1, 1, color=COLORS[s]) for s in ("baseline", "answer")]
    fig.legend(handles, ["baseline", "the answer"], loc="upper center", ncol=2, frameon=False, fontsize=8)
    return to_svg(fig)


def _boxes(ax, positions: list[float], data: list[np.ndarray], colors: list[str]) -> None:
    """Box plots (quartiles; whiskers and caps at the min and max) drawn as five collections, as ax.boxplot draws
    them with whis=(0, 100), but several times faster than its six artists per box."""
    low, q1, median, q3, high = np.array([np.percentile(values, [0, 25, 50, 75, 100]) for values in data]).T
    x, rc = np.asarray(positions, dtype=float), matplotlib.rcParams
    boxes = [matplotlib.patches.Rectangle((p - 0.4, bottom), 0.8, top - bottom) for p, bottom, top in zip(x, q1, q3)]
    edges = {"edgecolors": rc["boxplot.boxprops.color"], "linewidths": rc["boxplot.boxprops.linewidth"]}
    ax.add_collection(matplotlib.collections.PatchCollection(boxes, facecolors=colors, alpha=0.8, zorder=2, **edges))
    line = {"colors": rc["boxplot.whiskerprops.color"], "linewidths": rc["boxplot.whiskerprops.linewidth"]}
    ax.vlines(np.r_[x, x], np.r_[low, q3], np.r_[q1, high], zorder=2, **line)  # the whiskers
    ax.hlines(np.r_[low, high], np.r_[x, x] - 0.2, np.r_[x, x] + 0.2, zorder=2, **line)  # their caps
    ax.hlines(median, x - 0.4, x + 0.4, colors="black", linewidths=rc["boxplot.medianprops.linewidth"], zorder=2.1)
    ax.set_xlim(x.min() - 0.5, x.max() + 0.5)


def projection_svg(
    parts: pd.DataFrame,
    draft_ms: float,
    accepts: tuple[float, ...],
    field_cases: tuple[tuple[float, int], ...],
    labels: dict[str, str] | None = None,
) -> str:
    """Tokens/s vs accept length: plain decode (flat) and each verify T, baseline (dashed), recommended
    (dash-dot) and the answer (solid), each crossing plain decode at its break-even (the Decision's, from these
    medians), with its verify p90 dotted where it has a spread; `labels` names the settings in the legend."""
    labels = labels or {}
    fig, ax = _single_axes((9.5, 3.6))
    fig.subplots_adjust(left=0.07, right=0.72)  # the legend sits right of the plot
    top = max(max(accepts), 3.0)
    palette = matplotlib.colormaps["tab10"]
    verify_tokens = sorted(t for t in parts["tokens"].unique() if t > 1)
    for setting, style in (("baseline", "--"), ("recommended", "-."), ("answer", "-")):
        rows = parts[parts["setting"] == setting].set_index("tokens")
        if 1 in rows.index and np.isfinite(rows.loc[1, "verify_ms"]):
            plain = 1000.0 / rows.loc[1, "verify_ms"]
            ax.axhline(
                plain,
                color="black",
                linestyle=style,
                linewidth=1,
                label=f"plain decode, {labels.get(setting, setting)}: {plain:.0f} tok/s",
            )
        for k, tokens in enumerate(verify_tokens):
            if tokens not in rows.index or not np.isfinite(rows.loc[tokens, "verify_ms"]):
                continue
            verify = rows.loc[tokens, "verify_ms"]
            accept = np.linspace(1.0, min(top, tokens), 50)
            ax.plot(
                accept,
                1000.0 * accept / (draft_ms + verify),
                style,
                color=palette(k % 10),
                linewidth=1.4,
                label=f"T = {tokens}, {labels.get(setting, setting)}",
            )
            spread = rows.loc[tokens, "comm_p90_ms"] - rows.loc[tokens, "comm_ms"]
            if np.isfinite(spread) and spread > 0:
                ax.plot(
                    accept,
                    1000.0 * accept / (draft_ms + verify + spread),
                    ":",
                    color=palette(k % 10),
                    linewidth=0.9,
                    label=f"T = {tokens}, {labels.get(setting, setting)}, verify p90",
                )
            for case_accept, case_tokens in field_cases:
                if case_tokens == tokens and case_accept <= tokens:
                    y = 1000.0 * case_accept / (draft_ms + verify)
                    ax.plot(
                        [case_accept], [y], marker="o", color=palette(k % 10), markersize=6, markeredgecolor="black"
                    )
                    if setting == "answer":
                        ax.annotate(
                            f"field report: accept {case_accept:g}, T = {case_tokens}",
                            (case_accept, y),
                            textcoords="offset points",
                            xytext=(8, -14),
                            fontsize=7,
                            bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.85, "pad": 1},
                        )
    for accept in accepts:
        ax.axvline(accept, color="#ccc", linewidth=0.8, zorder=0)
    ax.set_xlabel("accept length (tokens kept per verify step)")
    ax.set_ylabel("tokens/s (single stream)")
    ax.set_xlim(1.0, top)
    ax.set_ylim(bottom=0)
    ax.legend(frameon=False, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return to_svg(fig)


def comparison_svg(heads: dict[str, pd.DataFrame]) -> str:
    """Several runs side by side: the answer's and the baseline's step time per T (ms), one bar group per T; a run
    whose answer applies nothing (a simulation's plan: no answer_us) has its baseline's bar alone."""
    tokens = sorted({int(t) for head in heads.values() for t in head["tokens"]})
    count = len(heads)
    fig, ax = _single_axes((7.5, 3.2 + 0.15 * count))
    fig.subplots_adjust(
        top=1 - (0.35 + 0.15 * count) / (3.2 + 0.15 * count)
    )  # the legend above the bars, a row per run
    width = 0.8 / (2 * count)
    palette = matplotlib.colormaps["tab10"]
    for k, (name, head) in enumerate(heads.items()):
        rows = head.drop_duplicates("tokens").set_index("tokens").reindex(tokens)
        x = np.arange(len(tokens)) - 0.4 + width * (2 * k + 0.5)
        ax.bar(x, rows["baseline_us"].to_numpy() / 1000, width, color=palette(k), alpha=0.4, label=f"{name}: baseline")
        answer = pd.to_numeric(rows["answer_us"], errors="coerce")
        if answer.notna().any():
            ax.bar(x + width, answer.to_numpy() / 1000, width, color=palette(k), label=f"{name}: the answer")
    ax.set_xticks(np.arange(len(tokens)), [f"T = {t}" for t in tokens])
    ax.set_ylabel("ms per step (communication)")
    ax.legend(frameon=False, fontsize=7, ncol=2, loc="lower left", bbox_to_anchor=(0.0, 1.02), borderaxespad=0.0)
    return to_svg(fig)


def collectives_svg(collectives: pd.DataFrame) -> str:
    """Single-collective latency (µs) vs message size, log-log, one line per (source, collective, graph)."""
    fig, ax = _single_axes((7.5, 3.2))
    ok = collectives[collectives["status"] == "ok"].dropna(subset=["bytes", "time_us"])
    for (source, collective, graph), group in ok.groupby(["source", "collective", "graph"], dropna=False):
        group = group.groupby("bytes")["time_us"].median()
        ax.plot(
            group.index,
            group.to_numpy(),
            marker=".",
            label=f"{collective} · {source}" + (" · graph" if graph is True else ""),
        )
    _log_scale(ax.xaxis, base=2)
    _log_scale(ax.yaxis)
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("µs per op")
    ax.legend(frameon=False, fontsize=7)
    return to_svg(fig)


def costmodel_scatter_svg(
    pairs: pd.DataFrame, x_label: str, y_label: str, band: float, scale: float = 1.0, group: str = "tokens"
) -> str:
    """Measured (x) vs modelled (y), log-log, one colour per `group` value: the y = x line and the ±band where
    a prediction counts as close. `scale` converts the µs columns to the axes' unit (1e-3: ms)."""
    fig, ax = subplots(figsize=(6.4, 4.6))
    fig.subplots_adjust(left=0.15, right=0.97, bottom=0.16, top=0.97)
    x = pairs["measured_us"].to_numpy(dtype=float) * scale
    y = pairs["simulated_us"].to_numpy(dtype=float) * scale
    values = np.concatenate([x, y])
    values = values[np.isfinite(values) & (values > 0)]
    low, high = (values.min() / 1.3, values.max() * 1.3) if values.size else (0.1, 10.0)
    line = np.geomspace(low, high, 50)
    ax.fill_between(
        line,
        line * (1 - band),
        line * (1 + band),
        color="#1e7b34",
        alpha=0.12,
        linewidth=0,
        label=f"within ±{band * 100:.0f} %",
    )
    ax.plot(line, line, color="#1e7b34", linewidth=1, label="model = measured")
    palette = matplotlib.colormaps["tab10"]
    for k, (value, rows) in enumerate(pairs.groupby(group, sort=True)):
        name = f"T = {value}" if group == "tokens" else str(value)
        ax.scatter(
            rows["measured_us"].to_numpy(dtype=float) * scale,
            rows["simulated_us"].to_numpy(dtype=float) * scale,
            s=14,
            color=palette(k % 10),
            alpha=0.8,
            label=name,
            edgecolors="none",
        )
    _log_scale(ax.xaxis, numbered=True)
    _log_scale(ax.yaxis, numbered=True)
    ax.set_xlim(low, high)
    ax.set_ylim(low, high)
    ax.set_xlabel("\n".join(textwrap.wrap(x_label, 90)), fontsize=8)
    ax.set_ylabel("\n".join(textwrap.wrap(y_label, 60)), fontsize=8)
    ax.legend(frameon=False, fontsize=7, loc="upper left")
    return to_svg(fig)


def routing_svg(curves: list[dict], bands: list[dict]) -> str:
    """One collective in one mode: µs per op vs message size (log-log), each implementation's curve, the floor
    (dashed), and above them the routed implementation per band."""
    fig, ax = _single_axes((7.5, 3.4))
    fig.subplots_adjust(top=0.86, right=0.94)
    palette = matplotlib.colormaps["tab10"]
    names = sorted(
        {c["label"] for c in curves}, key=lambda n: (not any(c["baseline"] for c in curves if c["label"] == n), n)
    )
    colour = {name: palette(k % 10) for k, name in enumerate(names)}
    for name in names:
        points = sorted((c["bytes"], c["time_us"], c["baseline"]) for c in curves if c["label"] == name)
        baseline = points[0][2]
        ax.plot(
            [p[0] for p in points],
            [p[1] for p in points],
            marker=".",
            color=colour[name],
            linewidth=2.2 if baseline else 1.1,
            label=f"{name} (baseline)" if baseline else name,
        )
    floor = sorted({(c["bytes"], c["floor_us"]) for c in curves if c["floor_us"]})
    if floor:
        ax.plot([f[0] for f in floor], [f[1] for f in floor], "k--", linewidth=1, label="floor")
    _log_scale(ax.xaxis, base=2)
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: _size_label(v)))
    _log_scale(ax.yaxis, numbered=True)
    ax.set_xlabel("all-reduce size per rank")
    ax.set_ylabel("µs per op")
    for band in bands:
        low, high = max(band["min_bytes"], 1), band["max_bytes"]
        ax.axvspan(low, high, ymin=1.0, ymax=1.06, clip_on=False, color=colour.get(band["label"], "#8c8c8c"))
        middle = math.sqrt(low * high)
        ax.text(middle, 1.08, band["impl"], transform=ax.get_xaxis_transform(), ha="center", fontsize=7)
    ax.legend(frameon=False, fontsize=7, loc="upper left")
    return to_svg(fig)


def _size_label(nbytes: float) -> str:
    return f"{nbytes / 1024:g} KiB" if nbytes < 1 << 20 else f"{nbytes / (1 << 20):g} MiB"
