"""Run every check on gathered facts; the doctor's public API for the CLI and the sweep."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from commprof.doctor.acs import check_acs
from commprof.doctor.driver import check_driver
from commprof.doctor.env import check_env
from commprof.doctor.facts import Facts
from commprof.doctor.floor import check_floor
from commprof.doctor.iommu import check_iommu
from commprof.doctor.nccl import check_nccl
from commprof.doctor.numa import check_numa
from commprof.doctor.p2p import check_p2p
from commprof.doctor.pcie import check_bar1, check_pcie_errors, check_pcie_link
from commprof.doctor.power import check_clocks
from commprof.doctor.result import FAIL, CheckResult, worst

# In the order of the checklist (1-11).
CHECKS: list[Callable[[Facts], CheckResult]] = [
    check_p2p,
    check_acs,
    check_iommu,
    check_driver,
    check_pcie_link,
    check_pcie_errors,
    check_bar1,
    check_numa,
    check_nccl,
    check_env,
    check_clocks,
    check_floor,
]


def run_checks(facts: Facts) -> list[CheckResult]:
    """Every check on the same facts; pure."""
    return [check(facts) for check in CHECKS]


def gather(
    bundle_dir: Path | None = None,
    quick: bool = True,
    tp: int | None = None,
    run_tests: bool = True,
    floor: dict[str, Any] | None = None,
) -> Facts:
    """Facts from a bundle directory, or from this machine (`floor`: one measured already, not probed again)."""
    if bundle_dir is not None:
        from commprof.doctor.bundle import read_bundle

        facts = read_bundle(Path(bundle_dir))
        facts.tp = tp
        return facts
    from commprof.doctor.live import gather_live

    return gather_live(quick=quick, run_tests=run_tests, tp=tp, floor=floor)


def run_doctor(
    bundle_dir: Path | None = None, quick: bool = True, tp: int | None = None, floor: dict[str, Any] | None = None
) -> list[CheckResult]:
    """The verdicts for this machine (or a bundle). quick: one pair all-reduce per path type, not every pair;
    `floor`: the box's floor a sweep measured already (the doctor summarises it rather than probing again)."""
    return run_checks(gather(bundle_dir, quick=quick, tp=tp, floor=floor))


def has_failures(results: list[CheckResult]) -> bool:
    return any(r.status == FAIL for r in results)


def doctor_summary(results: list[CheckResult]) -> dict[str, Any]:
    """JSON-able verdicts for meta.json["doctor"]: overall status, counts per status, every check."""
    return {
        "status": worst([r.status for r in results]),
        "counts": dict(Counter(r.status for r in results)),
        "checks": [r.to_dict() for r in results],
    }
