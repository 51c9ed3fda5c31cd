"""Check 1: P2P really works between every GPU pair (NVML status, then a real NCCL all-reduce per pair)."""

from __future__ import annotations

from commprof.doctor.facts import Facts
from commprof.doctor.gpus import gpu_view
from commprof.doctor.result import FAIL, OK, SKIPPED, WARN, CheckResult
from commprof.doctor.topology_probe import p2p_all_pairs

ID, TITLE = "p2p", "GPU peer-to-peer works between every pair"


def check_p2p(facts: Facts) -> CheckResult:
    topology = facts.topology or {}
    n_gpus = len(topology.get("gpus") or [])
    if not topology.get("gpus"):
        gpus, where, why = gpu_view(facts)
        if gpus:
            return CheckResult(
                ID,
                TITLE,
                SKIPPED,
                f"{len(gpus)} GPUs in {where}, but neither NVML P2P answers nor "
                "pair all-reduce results were collected (`commprof doctor --collect DIR` on the box "
                "records both)",
            )
        return CheckResult(ID, TITLE, SKIPPED, f"no GPU: {why}")
    if n_gpus < 2:
        return CheckResult(ID, TITLE, SKIPPED, "one GPU: no pairs")
    nvml_ok, nvml_detail = p2p_all_pairs(topology)
    evidence = [nvml_detail]
    tests = facts.tests.get("pairs")
    if tests is None:
        why = facts.tests.get("pairs_skipped", "pair all-reduces not run")
        status = WARN if nvml_ok is False else SKIPPED
        return CheckResult(
            ID,
            TITLE,
            status,
            f"{why}; NVML alone: {nvml_detail}",
            evidence,
            "run `commprof doctor` on the box to test every pair" if status == WARN else "",
        )
    failed = [t for t in tests if t["status"] != "ok"]
    for t in tests:
        a, b = t["gpus"]
        seen = "/".join(t.get("transports") or []) or "transport not logged"
        evidence.append(
            f"GPU {a}-{b}: {t['status']} in {t['seconds']} s over {seen}"
            + (f" ({t['message']})" if t.get("message") else "")
            + (f"; control NCCL_P2P_DISABLE=1: {t['control']['status']}" if t.get("control") else "")
        )
    if failed:
        p2p_only = [t for t in failed if (t.get("control") or {}).get("status") == "ok"]
        nothing = [t for t in failed if t not in p2p_only]
        parts = []
        if p2p_only:
            parts.append("P2P fails but SHM works between GPU " + ", ".join(_pair(t) for t in p2p_only))
        if nothing:
            parts.append("nothing works between GPU " + ", ".join(_pair(t) for t in nothing))
        fix = (
            "see the acs and iommu checks (ACS redirect and IOMMU translation are the usual causes); until "
            "fixed, NCCL_P2P_DISABLE=1 keeps NCCL on SHM and custom all-reduce kernels must stay off"
        )
        if nothing:
            fix += "; for pairs where even SHM fails: dmesg | grep -i xid, nvidia-smi -q, reseat the GPUs"
        return CheckResult(ID, TITLE, FAIL, "; ".join(parts), evidence, fix)
    whole = facts.tests.get("all_gpus") or {}
    if whole.get("status", "ok") != "ok":
        return CheckResult(
            ID,
            TITLE,
            FAIL,
            f"every tested pair passed, but the all-GPU NCCL all-reduce ended "
            f"'{whole['status']}' ({whole.get('message', '')})",
            evidence,
            "commprof doctor --all-pairs to test every pair; read the NCCL log of the all-GPU run "
            "(commprof doctor --collect DIR keeps it as nccl_init.log)",
        )
    over_shm = [t for t in tests if "P2P" not in (t.get("transports") or ["P2P"])]
    scope = facts.tests.get("pairs_scope", "")
    if nvml_ok is False or over_shm:
        if nvml_ok is False:
            detail = nvml_detail
        else:
            used = "/".join(over_shm[0]["transports"])
            detail = f"all-reduce passed but NCCL used {used}, not P2P, for GPU {_pair(over_shm[0])}"
        return CheckResult(
            ID,
            TITLE,
            WARN,
            f"{detail}: NCCL falls back to SHM there and custom all-reduce kernels that need P2P will not run",
            evidence,
            "check the driver check (P2P support of this GPU / platform) and the acs / iommu checks",
        )
    return CheckResult(
        ID, TITLE, OK, f"NCCL all-reduce over P2P passed on {len(tests)} pair(s){scope}; {nvml_detail}", evidence
    )


def _pair(test: dict) -> str:
    return f"{test['gpus'][0]}-{test['gpus'][1]}"
