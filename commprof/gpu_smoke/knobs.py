"""The NCCL knobs the smoke proves: what NCCL chose at the baseline, settings that differ from it, and whether
NCCL's log shows the setting changed its choice at the same size. Pure.

A knob that asks for what NCCL already chose proves nothing (at 2 ranks over sockets NCCL 2.28 already runs
2 channels), so each knob's values are picked against the baseline's logged choice, and a knob whose choice
cannot be told from the baseline's is "not shown", never a pass.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from commprof.gpu_smoke.verdicts import (
    FAIL,
    NOT_SHOWN,
    PASS,
    Verdict,
    all_reduce_bytes,
    all_reduce_choices,
    mode_verdict,
)
from commprof.nccl_vocab import ALGORITHMS, PROTOCOLS, named

# The other algorithm / protocol to ask for, by what NCCL chose (log spellings): inside one node NCCL's
# all-reduce runs Ring or Tree (NVLS needs NVSwitch), LL, LL128 or Simple.
OTHER_ALGO = {"RING": "TREE", "TREE": "RING"}
OTHER_PROTO = {"LL": "SIMPLE", "LL128": "SIMPLE", "SIMPLE": "LL"}
# NCCL caps NCCL_MAX_NCHANNELS at its MAXCHANNELS (32 in older releases, more in newer): asking at most this
# many keeps the knob inside every release, so a cap never reads as "NCCL did not follow it".
MAX_CHANNELS = 32
FALLBACK = ("TREE", "SIMPLE", 4)  # when the baseline logged no choice to pick against


@dataclass(frozen=True)
class Knob:
    """One NCCL setting as a sweep point: its algorithm and protocol (log spellings), or its channel count."""

    algo: str | None = None
    proto: str | None = None
    channels: int | None = None

    @property
    def label(self) -> str:
        if self.channels:
            return f"{self.channels} channels"
        return f"{self.algo.lower()}/{self.proto}"

    @property
    def setting(self) -> str:
        if self.channels:
            return f"NCCL_MIN_NCHANNELS=NCCL_MAX_NCHANNELS={self.channels}"
        return f"NCCL_ALGO=allreduce:{named(ALGORITHMS, self.algo).env.lower()} NCCL_PROTO={self.proto}"

    @property
    def table(self) -> dict[str, Any]:
        """Its [[points]] entry."""
        if self.channels:
            return {"channels": self.channels}
        return {
            "NCCL_ALGO": f"allreduce:{named(ALGORITHMS, self.algo).env.lower()}",
            "NCCL_PROTO": named(PROTOCOLS, self.proto).env,
        }

    def asks(self, choice: dict) -> tuple:
        """The part of a TUNING choice this knob sets."""
        if self.channels:
            return (choice.get("channels"),)
        return (choice["algo"].upper(), choice["proto"].upper())

    def wanted(self) -> tuple:
        return (self.channels,) if self.channels else (self.algo, self.proto)


def baseline_choice(rows: list[dict]) -> tuple[str, str, int] | None:
    """(algorithm, protocol, coll channels) NCCL chose most often for the baseline's all-reduces, or None."""
    by_size, nccl = all_reduce_choices(rows)
    sizes = all_reduce_bytes(rows)
    counted = Counter((c["algo"].upper(), c["proto"].upper()) for s in sizes for c in by_size.get(s, []))
    if not counted or not (nccl or {}).get("channels"):
        return None
    (algo, proto), _ = counted.most_common(1)[0]
    return algo, proto, int(nccl["channels"])


def pick_knobs(baseline_rows: list[dict]) -> tuple[Knob, ...]:
    """An algorithm + protocol and a channel count that differ from the baseline's choice (twice its channels,
    e.g. 4 where it chose 2, half where twice would pass MAX_CHANNELS); the fallback where it logged none (the
    verdict then says if that differed)."""
    chosen = baseline_choice(baseline_rows)
    if chosen is None:
        algo, proto, channels = FALLBACK
        return Knob(algo=algo, proto=proto), Knob(channels=channels)
    algo, proto, channels = chosen
    other = 2 * channels if 2 * channels <= MAX_CHANNELS else channels // 2
    return Knob(algo=OTHER_ALGO.get(algo, "RING"), proto=OTHER_PROTO.get(proto, "LL")), Knob(channels=other)


def knob_verdict(path: str, knob: Knob, rows: list[dict], baseline_rows: list[dict]) -> Verdict:
    """The knob's point ran, NCCL's log shows the setting at every all-reduce size, and at one size at least the
    choice differs from the baseline's there; equal choices are "not shown" with why."""
    ran = mode_verdict(path, rows, "eager")
    if ran.status != PASS:
        return ran
    sizes = sorted(all_reduce_bytes(rows))
    mine, nccl = all_reduce_choices(rows)
    base, base_nccl = all_reduce_choices(baseline_rows)
    if knob.channels:  # the init log's coll channels, and the per-op channels where TUNING lines show them
        if (nccl or {}).get("channels") != knob.channels:
            return Verdict(path, FAIL, f"NCCL's init log shows {(nccl or {}).get('channels')} coll channels")
        before = (base_nccl or {}).get("channels")
        if before is None:
            return Verdict(path, NOT_SHOWN, "not shown: the baseline's log has no channel count to compare with")
        if before == knob.channels:
            return Verdict(path, NOT_SHOWN, f"not shown: NCCL already ran {before} coll channels without it")
        per_op = "; ".join(_shown(s, mine.get(s, []), knob) for s in sizes)
        return Verdict(path, PASS, f"coll channels {before} (baseline) -> {knob.channels}; {per_op}; {ran.detail}")
    missing = [s for s in sizes if s not in mine]
    if missing:
        return Verdict(path, FAIL, f"no TUNING choice logged for all-reduce size(s) {missing}: cannot tell if it acted")
    ignored = [s for s in sizes if any(knob.asks(c) != knob.wanted() for c in mine[s])]
    if ignored:
        return Verdict(path, FAIL, "NCCL did not follow it: " + "; ".join(_shown(s, mine[s], knob) for s in ignored))
    unknown = [s for s in sizes if s not in base]
    differs = [s for s in sizes if s in base and any(knob.asks(c) != knob.wanted() for c in base[s])]
    if not differs:
        why = (
            f"the baseline logged no choice at {unknown} B"
            if unknown
            else "NCCL chose " + "; ".join(_shown(s, base[s], knob) for s in sizes) + " without it too"
        )
        return Verdict(path, NOT_SHOWN, f"not shown: {why}, so its log cannot tell the setting acted")
    shown = "; ".join(f"{_shown(s, base[s], knob)} (baseline) -> {_shown(s, mine[s], knob)}" for s in differs)
    return Verdict(path, PASS, f"{shown}; {ran.detail}")


def _shown(size: int, choices: list[dict], knob: Knob) -> str:
    if knob.channels:
        return f"{size} B on " + ", ".join(f"{c.get('channels')} ch" for c in choices)
    return f"{size} B " + ", ".join(f"{c['algo']}/{c['proto']}" for c in choices)
