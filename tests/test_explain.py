"""`commprof explain`: each condition's signature planted in synthetic times is found first; the real 8 x RTX 4090
log without P2P is explained as P2P off against a P2P preset and as modelled against its own box's preset."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from commprof.costmodel.nccl_tests import parse_text
from commprof.costmodel.topology import load_topology, topology_from_dict
from commprof.doctor.result import CheckResult
from commprof.errors import UsageError
from commprof.evidence import ModelError
from commprof.explain.conditions import CONDITIONS, Variant, op_time
from commprof.explain.evidence import CONFIRMED, RULED_OUT, BoxRecords
from commprof.explain.observations import Observation, log_observations, op_observations
from commprof.explain.ranking import explain

FIXTURES = Path(__file__).parent / "fixtures"
CHARLIE = FIXTURES / "nccl-tests" / "rtx4090x8_sys_noP2P_charlie0129.txt"
ASUS = FIXTURES / "doctor" / "asus-esc8000a-8x-rtxpro6000"
SIZES = tuple(1 << k for k in range(13, 21))  # 8 KiB to 1 MiB

# A switch box with P2P whose host-memory path has measured figures (as a bundle's box prior has), and four rings:
# every condition then leaves its own mark. Its stated error is fixed for the test.
SWITCH_BOX = {
    "name": "test-switch",
    "description": "8 GPUs behind PCIe switches, P2P on (test box)",
    "gpus": 8,
    "compute_capability": 8.9,
    "gpu_path": "PXB",
    "p2p_supported": True,
    "launch_overhead_us": 4.0,
    "assumptions": "test",
    "sources": ["test"],
    "links": {
        "pci": {"channels": 4, "channel_bw_gbps": 12.0},
        "shm": {
            "channels": 2,
            "channel_bw_gbps": 7.5,
            "hop_us": {"LL": 2.3, "LL128": 5.7, "Simple": 6.3},
            "overhead_us": 1.0,
            "source": "test: measured host-memory figures",
        },
    },
}
STATED = ModelError(20.0, "test: the stated error")


def _box(p2p: bool = True):
    topology = topology_from_dict({**SWITCH_BOX, "p2p_supported": p2p}, "test-switch.toml")
    return replace(topology, prior_error=STATED)


def _planted(topology, variant: Variant, hop: float = 0.0, late: float = 0.0, scale: float = 1.0):
    """Synthetic all-reduce times at 4 and 8 ranks under `variant` at the given magnitudes."""
    out = []
    for ranks in (4, 8):
        for nbytes in SIZES:
            t = op_time(topology, variant, "all_reduce", nbytes, ranks, {})
            time_us = scale * (t.base_us + t.per_hop_us * hop + late)
            out.append(Observation(f"{nbytes} x{ranks}", (("all_reduce", nbytes, 1),), ranks, time_us, "planted"))
    return out


PLANTED = {
    "as-modelled": (Variant(()), {"scale": 1.1}),
    "p2p-off-shm": (Variant(("p2p-off-shm",), (("NCCL_P2P_DISABLE", "1"),)), {}),
    "acs-redirect": (Variant(("acs-redirect",), per_hop="p2p"), {"hop": 6.0}),
    "link-downtrained": (Variant(("link-downtrained",), rate_divisor=4), {}),
    "channels-limited": (Variant(("channels-limited",), (("NCCL_MAX_NCHANNELS", "1"),)), {}),
    "proto-forced": (Variant(("proto-forced",), (("NCCL_PROTO", "Simple"),)), {}),
    "late-rank": (Variant(("late-rank",), late=True), {"late": 30.0}),
}


@pytest.mark.parametrize("condition", sorted(PLANTED))
def test_planted_signature_is_found_first(condition):
    topology = _box()
    variant, magnitude = PLANTED[condition]
    result = explain(topology, _planted(topology, variant, **magnitude))
    first = result.explanations[0]
    assert first.condition == condition and first.explains, [(e.condition, e.error_pct) for e in result.explanations]
    assert result.explained and condition in result.verdict


def test_iommu_translation_planted_on_a_host_memory_box_is_found_first():
    """On a P2P box the IOMMU's per-hop cost predicts what ACS redirect does (the doctor's checks tell them apart);
    through host memory there is no P2P hop to redirect, and only the IOMMU's cost grows with the hops."""
    topology = _box(p2p=False)
    planted = _planted(topology, Variant(("iommu-translation",), per_hop="pcie"), hop=5.0)
    first = explain(topology, planted).explanations[0]
    assert first.condition == "iommu-translation" and first.explains and abs(first.hop_us - 5.0) < 0.2


def test_a_check_decides_between_conditions_the_times_cannot_tell_apart():
    topology = _box()
    planted = _planted(topology, Variant(("iommu-translation",), per_hop="pcie"), hop=6.0)
    acs_ok = CheckResult("acs", "ACS redirect off above the GPUs", "ok", "ReqRedir- CmpltRedir- on all bridges")
    iommu_on = CheckResult("iommu", "IOMMU off or passthrough", "warn", "the IOMMU translates DMA", fix="iommu=pt")
    result = explain(topology, planted, BoxRecords((acs_ok, iommu_on), "doctor on test"))
    by_name = {e.condition: e for e in result.explanations}
    assert result.explanations[0].condition == "iommu-translation"
    assert (
        result.explanations[0].evidence.status == CONFIRMED
        and "doctor iommu (warn)" in by_name["iommu-translation"].evidence.lines[0]
    )
    assert by_name["acs-redirect"].evidence.status == RULED_OUT and by_name["acs-redirect"].explains


def test_the_doctors_landmines_join_the_explanations():
    """A forced NCCL_PROTO in the environment confirms proto-forced; expandable segments beside a custom all-reduce
    is said beside the explanations; the doctor's driver check on a GeForce RTX 4090 confirms P2P off."""
    from commprof.doctor.driver import check_driver
    from commprof.doctor.env import check_env
    from commprof.doctor.facts import Facts, Source

    env = Facts(
        "test",
        {
            "env": Source(
                "env", "bundle/env.log", "NCCL_PROTO=Simple\nPYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\n"
            )
        },
    )
    smi = (FIXTURES / "doctor" / "nvidia-smi-q-old-driver.txt").read_text(encoding="utf-8")
    geforce = Facts("test", {"nvidia_smi_full": Source("nvidia_smi_full", "bundle/nvidia_smi_full.log", smi)})
    records = BoxRecords((check_env(env), check_driver(geforce)), "doctor on test")
    topology = _box()
    variant, magnitude = PLANTED["proto-forced"]
    result = explain(topology, _planted(topology, variant, **magnitude), records)
    first = result.explanations[0]
    assert first.condition == "proto-forced" and first.evidence.status == CONFIRMED
    assert (
        first.evidence.lines[0] == "NCCL_PROTO=Simple (doctor env: bundle/env.log)"
        and "unset NCCL_PROTO" in first.evidence.fix
    )
    assert len(result.landmines) == 1 and "expandable_segments" in result.landmines[0]
    p2p_off = next(e for e in result.explanations if e.condition == "p2p-off-shm")
    assert p2p_off.evidence.status == CONFIRMED and "doctor driver (warn)" in p2p_off.evidence.lines[0]


def test_every_condition_is_planted_here():
    assert set(PLANTED) | {"iommu-translation"} == set(CONDITIONS)


def test_two_conditions_together_explain_what_neither_does_alone():
    topology = replace(_box(), prior_error=ModelError(15.0, "test: the stated error"))
    simple = Variant(("proto-forced",), (("NCCL_PROTO", "Simple"),))
    both = simple.joined(Variant(("channels-limited",), (("NCCL_MAX_NCHANNELS", "1"),)))
    result = explain(topology, _planted(topology, both))
    assert result.explanations[0].condition == "channels-limited+proto-forced"
    singles = {e.condition: e for e in result.explanations if len(e.conditions) == 1}
    assert singles["channels-limited"].explains is False and singles["proto-forced"].explains is False


def test_real_log_without_p2p_is_p2p_off_on_a_p2p_preset_and_as_modelled_on_its_own():
    parsed = parse_text(CHARLIE.read_text(encoding="utf-8"), str(CHARLIE))
    observations = log_observations(parsed)
    records = BoxRecords(gpu_names=tuple((name, CHARLIE.name) for name in parsed.gpu_names))
    on_p2p = explain(load_topology("pcie-gen4"), observations, records)
    assert on_p2p.explanations[0].condition == "p2p-off-shm" and on_p2p.explanations[0].explains
    assert on_p2p.explanations[0].evidence.status == CONFIRMED and "GeForce RTX 4090" in on_p2p.verdict + str(
        on_p2p.explanations[0].evidence.lines
    )
    own = explain(load_topology("pcie-dual-socket-shm"), observations, records)
    assert own.explanations[0].condition == "as-modelled" and own.explained
    assert "p2p-off-shm" in dict(own.same_as_modelled)


def test_one_field_observation_on_the_bundle_says_what_would_tell_the_candidates_apart():
    from commprof.costmodel.box_prior import load_bundle_topology
    from commprof.doctor.bundle import read_bundle
    from commprof.doctor.runner import run_checks

    checks = tuple(run_checks(read_bundle(ASUS)))
    result = explain(load_bundle_topology(ASUS), op_observations(["57344=205"], 8), BoxRecords(checks, "doctor"))
    assert not result.explained and result.verdict.startswith("nothing explains it within error")
    assert "all_reduce_perf" in result.tell_apart
    by_name = {e.condition: e for e in result.explanations}
    assert by_name["iommu-translation"].evidence.status == RULED_OUT  # the bundle's kernel command line: iommu=off
    assert by_name["late-rank"].explains is None  # a delay fitted to the one observation it is judged on


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (["0=205"], "cannot be priced"),
        (["57344"], "is not KEY=VALUE"),
        (["57344=-1"], "above 0"),
        (["57344=205", "57344=210"], "given twice"),
    ],
)
def test_bad_observations_are_one_line_errors(values, message):
    with pytest.raises(UsageError, match=message):
        op_observations(values, 8)


def test_ranks_the_box_cannot_run_are_refused():
    with pytest.raises(UsageError, match="cannot be priced on pcie-4gpu"):
        explain(load_topology("pcie-4gpu"), op_observations(["57344=205"], 8))


def test_an_nccl_log_confirms_or_rules_out_what_it_shows():
    from commprof.explain.evidence import evidence_for
    from commprof.nccl_log.parse import parse_nccl_log

    log = FIXTURES / "nccl_log" / "nccl-2.27-8gpu-pcie.log"
    records = BoxRecords(nccl_log=parse_nccl_log(log.read_text(encoding="utf-8")), nccl_log_where=log.name)
    p2p_off = evidence_for("p2p-off-shm", records)
    assert p2p_off.status == CONFIRMED and "8 of 16 GPU connections through host memory" in p2p_off.lines[0]
    channels = evidence_for("channels-limited", records, modelled_channels=2)
    assert channels.status == RULED_OUT and "2 collective channels, the model runs 2" in channels.lines[0]
    assert evidence_for("channels-limited", records, modelled_channels=4).status == CONFIRMED
