"""calibration.toml: a calibration of the latency model as a small, hand-readable TOML file, written and read
back with every value checked against generous bounds, so an edited or corrupt file is refused, not believed."""

from __future__ import annotations

from typing import Any

from commprof.costmodel.latency import ARCHS, LINKS, PROTOS, CostParams
from commprof.problems import MISSING, Problems
from commprof.textfiles import parse_toml


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(float(f"{value:.9g}") if isinstance(value, float) else value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    raise TypeError(f"cannot write {type(value).__name__} to TOML")


def dumps_toml(tables: dict[str, dict]) -> str:
    """Flat TOML writer: top-level scalars, then [table] and [table.sub] of scalars / lists."""
    lines: list[str] = []

    def emit(prefix: str, table: dict) -> None:
        scalars = {k: v for k, v in table.items() if not isinstance(v, dict)}
        subtables = {k: v for k, v in table.items() if isinstance(v, dict)}
        if prefix and scalars:
            lines.append(f"\n[{prefix}]")
        for key, value in scalars.items():
            if value is not None:
                lines.append(f"{key} = {_toml_value(value)}")
        for key, value in subtables.items():
            emit(f"{prefix}.{key}" if prefix else key, value)

    emit("", tables)
    return "\n".join(lines).lstrip("\n") + "\n"


def params_to_toml(params: CostParams, header: str = "") -> str:
    body = dumps_toml(
        {
            COSTMODEL_TABLE: {
                "link": params.link,
                "arch": params.arch,
                "channels": params.channels,
                "nvls_channels": params.nvls_channels,
                "channel_bw_gbps": params.channel_bw_gbps,
                "nccl_bw_gbps": params.selection_bw_gbps,
                "overhead_us": params.overhead_us,
                "source": params.source,
                "hop_us": dict(params.hop_us),
            },
            "fit": dict(params.fit),
        }
    )
    comment = "".join(f"# {line}\n" for line in header.splitlines())
    return comment + body


# The table of the cost model's parameters; files written before it was named for the cost model say [model].
COSTMODEL_TABLE = "costmodel"
LEGACY_COSTMODEL_TABLE = "model"
CALIBRATION_KEYS = (COSTMODEL_TABLE, LEGACY_COSTMODEL_TABLE, "fit")
COSTMODEL_KEYS = (
    "link",
    "arch",
    "channels",
    "nvls_channels",
    "channel_bw_gbps",
    "nccl_bw_gbps",
    "overhead_us",
    "source",
    "hop_us",
)


# What a calibration may say, per parameter (low, high): generous bounds around every real interconnect, so an
# edited or corrupt file (a negative overhead predicts negative steps) is refused instead of believed. µs, GB/s.
PARAM_BOUNDS = {
    "overhead_us": (0.0, 10_000.0),
    "hop_us": (0.0, 1_000.0),
    "channel_bw_gbps": (0.001, 1_000.0),
    "nccl_bw_gbps": (0.001, 1_000.0),
    "channels": (1, 64),  # NCCL's MAXCHANNELS
    "nvls_channels": (0, 64),
}


def out_of_bounds(params: CostParams) -> str | None:
    """The first parameter outside PARAM_BOUNDS, as "name = value (allowed low..high)", or None."""
    values = {
        "overhead_us": params.overhead_us,
        "channel_bw_gbps": params.channel_bw_gbps,
        "nccl_bw_gbps": params.nccl_bw_gbps,
        "channels": params.channels,
        "nvls_channels": params.nvls_channels,
        **{f"hop_us.{proto}": value for proto, value in params.hop_us.items()},
    }
    for name, value in values.items():
        low, high = PARAM_BOUNDS[name.split(".")[0]]
        if value is not None and not low <= value <= high:
            return f"{name} = {value:g} (allowed {low:g}..{high:g})"
    return None


def params_from_toml(text: str, path: str) -> CostParams:
    """Read a calibration written by params_to_toml; UsageError lists every problem as "file: key: problem",
    a value outside PARAM_BOUNDS (or nan / inf, which TOML allows) among them."""
    data = parse_toml(text, path)
    problems = Problems(path)

    def bounded(value: Any, key: str) -> float | None:
        low, high = PARAM_BOUNDS[key.split(".")[0]]
        return problems.number(value, f"{table}.{key}", low, maximum=high)

    def bounded_integer(value: Any, key: str) -> int | None:
        low, high = PARAM_BOUNDS[key]
        return problems.integer(value, f"{table}.{key}", int(low), int(high))

    problems.unknown_keys(data, CALIBRATION_KEYS, "")
    table = COSTMODEL_TABLE if COSTMODEL_TABLE in data or LEGACY_COSTMODEL_TABLE not in data else LEGACY_COSTMODEL_TABLE
    model = problems.table(data.get(table, MISSING), table)
    problems.unknown_keys(model, COSTMODEL_KEYS, table)
    link = problems.choice(model.get("link", MISSING), f"{table}.link", LINKS, "a link type")
    arch = problems.choice(model.get("arch", MISSING), f"{table}.arch", ARCHS, "a GPU generation")
    channels = bounded_integer(model.get("channels", MISSING), "channels")
    nvls_channels = bounded_integer(model.get("nvls_channels", 0), "nvls_channels")
    bandwidth = bounded(model.get("channel_bw_gbps", MISSING), "channel_bw_gbps")
    nccl_bw = model.get("nccl_bw_gbps")
    nccl_bw = None if nccl_bw is None else bounded(nccl_bw, "nccl_bw_gbps")
    overhead = bounded(model.get("overhead_us", MISSING), "overhead_us")
    hop = problems.table(model.get("hop_us", MISSING), f"{table}.hop_us")
    problems.unknown_keys(hop, PROTOS, f"{table}.hop_us")
    hop_us = {proto: bounded(hop.get(proto, MISSING), f"hop_us.{proto}") for proto in PROTOS}
    fit = data.get("fit", {}) if isinstance(data.get("fit"), dict) else {}
    line = None
    if fit.get("model") == "line":
        intercept = problems.number(fit.get("line_intercept_us", MISSING), "fit.line_intercept_us", 0.0)
        slope = problems.number(fit.get("line_us_per_byte", MISSING), "fit.line_us_per_byte", 0.0)
        line = (intercept, slope)
    problems.raise_if_any()
    return CostParams(
        link=link,
        arch=arch,
        channels=channels,
        channel_bw_gbps=bandwidth,
        hop_us=hop_us,
        overhead_us=overhead,
        nvls_channels=nvls_channels,
        nccl_bw_gbps=nccl_bw,
        source=path,
        fit=fit,
        line=line,
    )
