"""Which box's NCCL model a calibration starts from when `calibrate` is not told: the preset the records' own
GPUs, rank count and NCCL settings (the log's command line, a sweep point's env) single out. Pure but for reading
the presets."""

from __future__ import annotations

from commprof.costmodel.topology import Topology, link_for, load_topology, preset_names
from commprof.errors import UsageError
from commprof.nccl_vocab import nccl_user_p2p_level

# The preset assumed when the records say nothing of their box: the box of the real logs commprof ships.
FALLBACK_PRESET = "pcie-dual-socket-shm"


def records_p2p_env(records: list[dict]) -> dict[str, str]:
    """The P2P settings (NCCL_P2P_LEVEL / NCCL_P2P_DISABLE) every record ran under; {} where they differ (a sweep
    with a P2P axis: the box's default transport is fitted, and points on another are skipped)."""
    found: dict[str, set[str]] = {}
    for record in records:
        env = (record.get("point") or {}).get("env") or {}
        for key in ("NCCL_P2P_LEVEL", "NCCL_P2P_DISABLE"):
            found.setdefault(key, set()).add(str(env[key]) if key in env else "")
    if any(len(values) > 1 for values in found.values()):
        return {}
    return {key: values.pop() for key, values in found.items() if "" not in values}


def _fits(topology: Topology, arch: str | None, ranks: int | None, env: dict[str, str]) -> bool:
    user = nccl_user_p2p_level(env)
    wants_p2p = None if user is None else user.level != "LOC"
    if arch is not None and topology.arch != arch:
        return False
    if ranks is not None and topology.gpus < ranks:
        return False
    return wants_p2p is None or (link_for(topology, env) != "shm") == wants_p2p


def choose_prior_topology(
    gpus: set[str], arch: str | None, ranks: int | None, env: dict[str, str]
) -> tuple[Topology, str]:
    """The preset the records single out, and a note saying why. Their GPUs' generation and settings (P2P asked
    for rules out a box that has none, and the reverse) keep the presets that fit; of several, the one whose
    description names the GPUs, else FALLBACK_PRESET where it fits; none, or several without it: UsageError
    asking for --topology, naming them."""
    settings = ", ".join(f"{k}={v}" for k, v in sorted(env.items()))
    said = ", ".join(x for x in (" / ".join(sorted(gpus)), f"{ranks} ranks" if ranks else "", settings) if x)
    said = said or "(unstated) GPUs and settings"
    left = [t for t in (load_topology(name) for name in preset_names()) if _fits(t, arch, ranks, env)]
    models = {name.replace("NVIDIA", "").replace("GeForce", "").strip() for name in gpus}
    named = [t for t in left if any(model and model in t.description for model in models)]
    if len(named) == 1:
        return named[0], f"prior: preset {named[0].name}, the box of the records' {said}"
    if len(left) == 1:
        return left[0], f"prior: preset {left[0].name}, the only one that fits the records' {said}"
    if FALLBACK_PRESET in {t.name for t in left}:
        others = ", ".join(t.name for t in left if t.name != FALLBACK_PRESET)
        return load_topology(FALLBACK_PRESET), (
            f"prior: preset {FALLBACK_PRESET} assumed for the records' {said} (also fit: {others}; name the box with "
            "--topology)"
        )
    names = ", ".join(t.name for t in left) or "none"
    raise UsageError(
        f"the records' {said} single out no one box (presets that fit: {names}): name it with --topology "
        "(a preset or a topology file)"
    )
