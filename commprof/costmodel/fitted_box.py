"""The box a calibration was fitted on and the box it is applied to: GPU, SM, PCIe generation, rank count,
transport and NCCL version. Applied to a box that differs in any fact both state, a calibration keeps its
parameters but not its error: it is judged by the prior's error (or its own, if wider), and says "fitted on <box>,
applied to <box>". Pure."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from commprof.costmodel.box import capability_of_name
from commprof.costmodel.calibrated_sizes import judged_sizes
from commprof.costmodel.latency import CostParams
from commprof.costmodel.topology import Topology, link_for, load_topology
from commprof.errors import UsageError
from commprof.evidence import ModelError
from commprof.records.run_meta import RunMeta

UNKNOWN = "unknown"


@dataclass(frozen=True)
class BoxFacts:
    """What is known of one box; each fact a string, UNKNOWN where nothing states it."""

    gpu: str = UNKNOWN
    """The GPUs' names, " / " between several."""
    sm: str = UNKNOWN
    """Compute capability ("8.9")."""
    pcie_gen: str = UNKNOWN
    """The GPUs' PCIe generation ("Gen5")."""
    ranks: str = UNKNOWN
    """The rank count."""
    transport: str = UNKNOWN
    """NCCL's transport between the GPUs: "shm", "pci" or "nvlink"."""
    nccl: str = UNKNOWN
    """The NCCL version."""

    def to_dict(self) -> dict[str, str]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, data: object) -> BoxFacts | None:
        """The facts a calibration file records ([fit.box]); None where it records none."""
        if not isinstance(data, dict):
            return None
        return cls(**{f.name: str(data.get(f.name) or UNKNOWN) for f in fields(cls)})

    def describe(self) -> str:
        """ "8 x NVIDIA GeForce RTX 4090, SM 8.9, PCIe Gen4, shm, NCCL 2.19.3" (unknown facts said so)."""
        return (
            f"{self.ranks} x {self.gpu}, SM {self.sm}, PCIe {self.pcie_gen}, transport {self.transport}, "
            f"NCCL {self.nccl}"
        )

    def differs(self, other: BoxFacts) -> list[str]:
        """The facts both boxes state and state differently."""
        return [
            f.name
            for f in fields(self)
            if UNKNOWN not in (getattr(self, f.name), getattr(other, f.name))
            and getattr(self, f.name) != getattr(other, f.name)
        ]


def records_facts(metas: list[RunMeta], ranks: int | None, transport: str, nccl: str) -> BoxFacts:
    """The facts of the box records were measured on: their runs' meta.json GPUs (a sweep's compute capability and
    PCIe generation; an import's GPU names, whose capability NVIDIA's list gives)."""
    gpus = [g for meta in metas for g in meta.gpus or []]
    probed = [g for meta in metas for g in meta.probed_gpus]
    names = sorted({g.name for g in gpus if g.name})
    sms = {g.compute_capability for g in gpus if g.compute_capability}
    sms |= {f"{c:g}" for name in names if not sms and (c := capability_of_name(name)) is not None}
    gens = {f"Gen{g.pcie.gen_max}" for g in probed if g.pcie is not None and g.pcie.gen_max}
    return BoxFacts(
        gpu=" / ".join(names) or UNKNOWN,
        sm=" / ".join(sorted(sms)) or UNKNOWN,
        pcie_gen=" / ".join(sorted(gens)) or UNKNOWN,
        ranks=str(ranks) if ranks else UNKNOWN,
        transport=transport,
        nccl=nccl if nccl and nccl != "?" else UNKNOWN,
    )


def topology_facts(topology: Topology, ranks: int) -> BoxFacts:
    """The facts of the box a simulation runs on: a bundle's GPUs as read, a preset's compute capability."""
    box = topology.box
    if box is None:
        return BoxFacts(sm=f"{topology.compute_capability:g}", ranks=str(ranks), transport=link_for(topology, {}))
    names = sorted({str(g.name.value) for g in box.gpus if g.name.value})
    sms = sorted({f"{float(g.compute_capability.value):g}" for g in box.gpus if not g.compute_capability.assumed})
    gens = sorted({f"Gen{g.pcie_gen_max.value}" for g in box.gpus if g.pcie_gen_max.value})
    return BoxFacts(
        gpu=" / ".join(names) or UNKNOWN,
        sm=" / ".join(sms) or UNKNOWN,
        pcie_gen=" / ".join(gens) or UNKNOWN,
        ranks=str(ranks),
        transport=link_for(topology, {}, ranks),
    )


def over_plan_sizes(calibration: CostParams, sizes: set[int]) -> CostParams:
    """The calibration's expected error over the bands the plan's `sizes` fall in (the largest of them), not over
    every band it states. A size outside them was never judged: the simulation prices it with the prior, which
    carries the prior's error (commprof.costmodel.calibrated_sizes.Pricing), so it does not count here."""
    fit = calibration.fit
    stated = dict(zip(fit.get("band_names") or (), fit.get("band_error_pct") or ()))
    judged = judged_sizes(fit)
    if not stated or judged is None or not sizes:
        return calibration
    used = sorted({name for low, high, name in judged.bands if any(low <= b < high for b in sizes)})
    if not used:
        return calibration
    said = "; ".join(f"{name} {stated[name]:g} %" for name in used)
    basis = f"the largest over the bands the plan's sizes use ({said})"
    return replace(calibration, fit={**fit, "expected_error_pct": max(stated[n] for n in used), "error_basis": basis})


def stated_box(fit: dict) -> BoxFacts | None:
    """The box a calibration of the older layout states (no [fit.box]): the topology preset it was fitted on
    ([fit] topology), at its rank count; None where it names none this commprof knows."""
    name = fit.get("topology")
    if not isinstance(name, str) or not name:
        return None
    try:
        preset = load_topology(name)
    except UsageError:
        return None
    ranks = fit.get("ranks") if isinstance(fit.get("ranks"), int) else preset.gpus
    return replace(topology_facts(preset, ranks), transport=str(fit.get("link") or link_for(preset, {}, ranks)))


def older_layout(fit: dict) -> dict:
    """[fit] of a calibration written before it stated its box and its error per band: its stated held-out
    error (holdout_median_pct) as its expected error, and the preset it names as its box."""
    if "holdout_median_pct" not in fit or "expected_error_pct" in fit:
        return fit
    out = {
        **fit,
        "expected_error_pct": fit["holdout_median_pct"],
        "error_basis": f"its stated held-out median error ({fit.get('holdout_basis', 'held out')}; an older layout)",
    }
    box = stated_box(fit)
    return {**out, "box": box.to_dict()} if box is not None and not fit.get("box") else out


def holds(calibration: CostParams) -> str:
    """Why a calibration applied to a box (applied_to) does not hold there ("" where it holds): fitted on another
    GPU, rank count or transport. It is then applied to no point."""
    different = calibration.fit.get("applied_differs")
    if not different:
        return ""
    return (
        f"{calibration.fit.get('applied')}: they differ in {', '.join(different)}, so no point uses it; NCCL's "
        "uncalibrated model prices every point"
    )


def whole(records: list[dict], name: str, link: str) -> str:
    """Why a calibration cannot price this sweep whole ("" where every point's NCCL runs over the transport it was
    fitted on, `link`): a calibration is applied to every point or to none."""
    steps = {r.get("point_id"): r.get("calibration") for r in records if r.get("kind", "step") == "step"}
    other = sorted(str(p) for p, used in steps.items() if used != name)
    if not other:
        return ""
    return (
        f"it was fitted over {link}, and {len(other)} of {len(steps)} points (e.g. {other[0]}) run over another "
        "transport: a calibration applies to every point or to none, so no point uses it; NCCL's uncalibrated "
        "model prices every point"
    )


def applied_to(calibration: CostParams, target: BoxFacts, prior: ModelError) -> CostParams:
    """The calibration as applied to `target`: its fit says where it was fitted and where it is applied, and
    where the boxes differ, its expected error becomes the prior's (or its own, if wider)."""
    fitted = BoxFacts.from_dict(calibration.fit.get("box")) or stated_box(calibration.fit) or BoxFacts()
    boxes = f"fitted on {fitted.describe()}, applied to {target.describe()}"
    fit = {**calibration.fit, "applied": boxes}
    different = fitted.differs(target)
    own = fit.get("expected_error_pct")
    if different:
        fit["applied_differs"] = different
        known = [p for p in (prior.pct, own) if isinstance(p, (int, float))]
        fit["expected_error_pct"] = max(known) if prior.pct is not None else None
        fit["error_basis"] = (
            f"{boxes}: they differ in {', '.join(different)}, so the calibration's own error "
            f"({own if own is not None else 'unknown'} %) does not hold; the prior's ({prior.band}: {prior.basis})"
            + (
                ", the calibration's being wider"
                if own is not None and prior.pct is not None and own > prior.pct
                else ""
            )
        )
    else:
        fit["error_basis"] = f"{fit.get('error_basis', 'held out')}; {boxes}"
    return replace(calibration, fit=fit)
