"""Section 2 of the page, the box a run ran on, from the Decision's environment: its facts and versions, the
topology, the doctor's verdicts and what NCCL chose."""

from __future__ import annotations

from typing import Any

from markupsafe import Markup

from commprof.report.decision.types import Decision


def environment(decision: Decision) -> dict[str, Any]:
    env = decision.environment
    return {
        "facts": env.facts,
        "versions": Markup(" · ").join(Markup("{} <b>{}</b>").format(k, v) for k, v in env.versions),
        "gpus": env.gpus,
        "env": env.launch_env,
        "topology": env.topology,
        "doctor": env.doctor,
        "nccl": env.nccl_choices,
        "nccl_title": env.nccl_title,
        "nccl_note": env.nccl_note,
    }
