"""nccl-tests runs as commprof records: one collective record per row and place."""

from __future__ import annotations

from commprof.costmodel.nccl_tests.log import ParsedLog
from commprof.records import point_ids
from commprof.records.schema import CollectiveRecord, collective_record


def run_records(parsed: ParsedLog, run_id: str, first_point: int, now: str) -> list[CollectiveRecord]:
    """Results-schema records (kind "collective", source "nccl-tests") for every row of every run.

    Each run of the log is one point ("p000", "p001", ... from first_point); one record per row and place.
    """
    records = []
    name = parsed.path.rsplit("/", 1)[-1]
    for offset, run in enumerate(parsed.runs):
        point_id = point_ids.point_id(first_point + offset)
        label = f"{name}:{run.line} {run.collective} x{run.ranks or '?'}" + (" graph" if run.graph else "")
        point = {"label": label, "impl": "nccl", "env": dict(run.env), "options": {}}
        for row in run.rows:
            for place, values in row.places.items():
                wrong = values["wrong"]
                extras = {"per_iteration": values["per_iteration"]} if "per_iteration" in values else {}
                records.append(
                    collective_record(
                        source="nccl-tests",
                        run_id=run_id,
                        point_id=point_id,
                        point=point,
                        world_size=run.ranks,
                        status="wrong" if wrong else "ok",
                        message=f"nccl-tests reported {wrong} wrong elements" if wrong else None,
                        time=now,
                        collective=run.collective,
                        bytes=row.bytes,
                        count=row.count,
                        dtype=row.dtype,
                        redop=row.redop,
                        root=row.root,
                        in_place=place == "in_place",
                        graph=run.graph,
                        time_us=values["time_us"],
                        algbw_gbps=values["algbw_gbps"],
                        busbw_gbps=values["busbw_gbps"],
                        wrong=wrong,
                        file=parsed.path,
                        line=row.line,
                        **extras,
                    )
                )
    return records
