"""The vocabularies of what the stages write into records and meta.json, defined here once so that the reader's
types (records.nccl_facts, records.meta_sections) and each writer name the same values. Imports nothing that
needs msgspec: the doctor and the floor import these without it."""

from __future__ import annotations

from typing import Literal, get_args

# A box check's verdict (commprof.doctor.result.CheckResult.status), least to most severe after "skipped".
CheckStatus = Literal["ok", "warn", "fail", "skipped"]
CHECK_STATUSES: tuple[CheckStatus, ...] = get_args(CheckStatus)
# Where a run's floor comes from (commprof.floor.record): measured at the start of the run, read from a floor.json,
# a topology preset's published figures, or none.
FloorStatus = Literal["measured", "file", "preset", "not measured"]
FLOOR_STATUSES: tuple[FloorStatus, ...] = get_args(FloorStatus)
# What floor figures are (commprof.floor.model.FloorFigures.evidence): timed by `commprof floor`, or published.
FloorEvidence = Literal["measured", "published"]
FLOOR_EVIDENCE: tuple[FloorEvidence, ...] = get_args(FloorEvidence)
# How much a finding of NCCL's log matters (commprof.nccl_log.findings).
Severity = Literal["info", "warn", "fail"]
SEVERITIES: tuple[Severity, ...] = get_args(Severity)
# What a kernel model's predictions rest on (commprof.costmodel.kernels): published (bytes, µs) figures, or the
# floor of its algorithm.
KernelBasis = Literal["published", "floor"]
KERNEL_BASES: tuple[KernelBasis, ...] = get_args(KernelBasis)
# A kernel build's outcome before the sweep (commprof.impls.jit_build.run_build).
BuildStatus = Literal["built", "cached", "failed"]
BUILD_STATUSES: tuple[BuildStatus, ...] = get_args(BuildStatus)
