"""calibration.toml: a calibration of the latency model as a small, hand-readable TOML file, written and read
back as its typed structure (CalibrationFile) with every value checked against generous bounds, so an edited or
corrupt file is refused, not believed."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from commprof.costmodel.latency import ARCHS, LINKS, PROTOS, CostParams
from commprof.problems import Problems, String, choice, integer, number, table
from commprof.records.values import MAX_ERROR_PCT, MAX_RANKS
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


def _bounded(name: str) -> Any:
    low, high = PARAM_BOUNDS[name]
    return integer(low, high) if isinstance(low, int) else number(low, high)


# [costmodel.hop_us]: the per-hop Ring latency of each protocol, µs (one field per protocol of PROTOS).
HopUs = msgspec.defstruct(
    "HopUs", [(proto, _bounded("hop_us")) for proto in PROTOS], frozen=True, forbid_unknown_fields=True
)


class CostModelTable(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """[costmodel]: the parameters of one (link type, GPU generation) cost model (latency.CostParams)."""

    link: choice(LINKS, "a link type")  # the link type the model is for
    arch: choice(ARCHS, "a GPU generation")
    channels: _bounded("channels")  # NCCL's channel count
    nvls_channels: _bounded("nvls_channels") = 0
    channel_bw_gbps: _bounded("channel_bw_gbps")  # bus bandwidth of one channel (NCCL's bwIntra)
    nccl_bw_gbps: _bounded("nccl_bw_gbps") | None = None  # the per-channel bandwidth NCCL's own search assumes
    overhead_us: _bounded("overhead_us")  # a fixed per-op overhead
    source: Any = None  # what the calibration was fitted from, as written (the file read is the source)
    hop_us: table(HopUs)


def _list(item: Any, want: str) -> Any:
    return Annotated[list[item], msgspec.Meta(extra={"want": want})]


class FitTable(msgspec.Struct, frozen=True, kw_only=True):
    """[fit]: how the calibration was fitted; the keys the simulator reads, typed (its other keys are notes)."""

    model: String | None = None  # "line": a latency + bandwidth line (LineFit), else the cost model
    ranks: integer(1, most=MAX_RANKS) | None = None  # the rank count it was fitted at
    protocols: _list(choice(PROTOS, "a protocol"), f"a list of {', '.join(PROTOS)}") = []  # the protocols it saw
    expected_error_pct: number(0.0, most=MAX_ERROR_PCT) | None = None  # the largest held-out error over band_names
    error_basis: String | None = None  # how expected_error_pct was judged
    band_names: _list(String, "a list of strings") = []  # the decode / verify size bands it was judged on
    band_error_pct: _list(number(0.0, most=MAX_ERROR_PCT), "a list of numbers >= 0") = []  # each band_names' error
    box: table(dict[str, Any]) | None = None  # the box it was fitted on (fitted_box.BoxFacts)


class LineFit(msgspec.Struct, frozen=True, kw_only=True):
    """[fit] of a calibration that fell back to a latency + bandwidth line (model = "line"); its other keys are
    the fit's notes (samples, protocols, ranks, error), read by the simulator."""

    line_intercept_us: number(0.0, most=PARAM_BOUNDS["overhead_us"][1])  # µs
    line_us_per_byte: number(0.0, most=1.0)  # µs per byte: 1 MB/s, slower than any link


class CalibrationFile(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """calibration.toml, written by params_to_toml: [costmodel] (or, before its rename, [model]) and [fit]."""

    costmodel: table(CostModelTable) | None = None
    model: table(CostModelTable) | None = None  # the same table in files written before the rename
    fit: table(dict[str, Any]) = {}  # how the calibration was fitted (calibrate.py), as the simulator reads it


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
    problems = Problems(path)
    raw = parse_toml(text, path)
    data = problems.read(raw, CalibrationFile)
    model = data.costmodel or data.model
    if COSTMODEL_TABLE not in raw and LEGACY_COSTMODEL_TABLE not in raw:
        problems.error(COSTMODEL_TABLE, "missing (allowed: a table)")
    fit = problems.read(data.fit, FitTable, ("fit",))
    if not problems.errors and len(fit.band_error_pct) != len(fit.band_names):
        problems.error("fit.band_error_pct", f"{len(fit.band_error_pct)} errors for {len(fit.band_names)} band_names")
    line = None
    if data.fit.get("model") == "line":
        fit = problems.read(data.fit, LineFit, ("fit",))
        line = fit and (fit.line_intercept_us, fit.line_us_per_byte)
    problems.raise_if_any()
    return CostParams(
        link=model.link,
        arch=model.arch,
        channels=model.channels,
        channel_bw_gbps=model.channel_bw_gbps,
        hop_us=msgspec.structs.asdict(model.hop_us),
        overhead_us=model.overhead_us,
        nvls_channels=model.nvls_channels,
        nccl_bw_gbps=model.nccl_bw_gbps,
        source=path,
        fit=data.fit,
        line=line,
    )
