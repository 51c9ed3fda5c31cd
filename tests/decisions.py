"""Decisions for renderer tests: a real one (a small SYNTHETIC measured run decided as the report decides it) with
parts replaced, so a renderer is tested on the one thing it takes."""

from __future__ import annotations

import functools

import msgspec

from commprof.records.run_meta import RunMeta, parse_meta
from commprof.report.analysis.decide import decide
from commprof.report.analysis.decide_nccl import tuner_of
from commprof.report.analysis.run_analysis import ReportOptions, analyze_run
from commprof.report.analysis.tuner_rules import ApplyPlan
from commprof.report.decision.types import Decision, NcclAnswer
from tests.report_fixtures import base_points, make_meta, make_records


@functools.lru_cache(maxsize=1)
def measured() -> Decision:
    """The Decision of a SYNTHETIC measured run: the baseline and two NCCL settings at T = 1, 4."""
    points = [p for p in base_points() if p["label"] in ("NCCL defaults", "Ring/LL", "Ring/Simple")]
    records = make_records("synthetic", points=points, tokens=(1, 4))
    (run,) = analyze_run("synthetic", records, parse_meta(make_meta("synthetic")), ReportOptions())
    return decide(run)


def with_plan(plan: ApplyPlan, live: bool = True, decision: Decision | None = None) -> Decision:
    """`decision` (measured()'s) whose answer (a) applies `plan`'s file and holds its settings and rules."""
    decision = decision or measured()
    answer: NcclAnswer = msgspec.structs.replace(
        decision.nccl,
        file=plan.choice,
        live=live,
        why=plan.why,
        alternative=plan.alternative,
        env=dict(plan.env),
        tuner=tuner_of(plan),
        notes=["note"],
        graph_notes=[],
    )
    environment = msgspec.structs.replace(decision.environment, provenance=["run r (measured)"])
    return msgspec.structs.replace(decision, nccl=answer, environment=environment)


def fused_hints_at(after_us: float, refused: dict[str, str] | None = None) -> list:
    """The engine hints a measured run gets whose fused kind (flashinfer-fused) ran `after_us` against its unfused
    reference's 100 µs at T = 4 (p90 1 % above each median): its claim decides the flags."""
    from commprof.evidence import MEASURED, Evidence
    from commprof.report.analysis.claims import ClaimBook
    from commprof.report.analysis.decide_engines import fused_hints
    from commprof.report.decision.types import FusedRow

    book = ClaimBook(Evidence(MEASURED, backend="nccl"))
    book.compare("c", "fused vs its reference", ((after_us, after_us * 1.01), (100.0, 101.0)))
    row = FusedRow(tokens=4, point_id="p9", label="fused", impl="flashinfer-fused", settings="", median_us=after_us,
                   reference="p8", reference_us=100.0, saved_pct=100 - after_us, speedup=None, claim="c", reason="")  # fmt: skip

    class Run:  # what fused_hints reads of an analysed run
        evidence = Evidence(MEASURED, backend="nccl")
        meta = RunMeta(versions={})
        options = type("Options", (), {"engines": ()})()

    return fused_hints(Run(), [row], book, refused or {})
