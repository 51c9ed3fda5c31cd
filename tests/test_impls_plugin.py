"""The plug-in example in docs/implementations.md, loaded by import path and replayed on two gloo ranks."""

import re
from dataclasses import replace
from pathlib import Path

import pytest

from tests.distributed import run_ranks

DOCS = Path(__file__).resolve().parents[1] / "docs" / "implementations.md"


def example_source() -> str:
    match = re.search(r"<!-- example: my_allreduce\.py -->\n```python\n(.*?)```", DOCS.read_text(), re.S)
    assert match, "docs/implementations.md lost its my_allreduce.py example"
    return match.group(1)


def _replay_plugin(rank, world_size, plugin_dir):
    import sys

    import torch
    import torch.distributed as dist

    sys.path.insert(0, plugin_dir)
    from commprof.impls.registry import load_impl
    from commprof.planner.models import ModelShape
    from commprof.planner.plan import build_step_plan
    from commprof.replay.harness import ReplayConfig, StepReplay, replay_mode

    impl = load_impl("my_allreduce:GatherSum")()
    plan = build_step_plan(ModelShape("tiny", 3, 128, 512, "bfloat16", "test"), world_size, 4)
    impl.setup(dist.group.WORLD, plan, torch.device("cpu"))
    replay = StepReplay(plan, impl, dist.group.WORLD, torch.device("cpu"), ReplayConfig(iterations=2, warmup=1))
    try:
        return replay_mode(replay, "eager").to_dict()
    finally:
        impl.teardown()


@pytest.mark.processes
def test_the_documented_plugin_loads_gates_and_passes_the_exact_check(tmp_path):
    (tmp_path / "my_allreduce.py").write_text(example_source())
    results = run_ranks(_replay_plugin, 2, (str(tmp_path),))
    for result in results:
        assert result["status"] == "ok", result["message"]
        assert result["check"]["bad_ops"] == 0


def test_the_documented_plugin_gates_on_world_size(tmp_path, monkeypatch):
    import sys

    (tmp_path / "my_allreduce.py").write_text(example_source())
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(sys.modules, "my_allreduce", None)  # restored (removed) after the test
    del sys.modules["my_allreduce"]
    from commprof.impls.context import build_impl_context
    from commprof.impls.registry import load_impl

    cls = load_impl("my_allreduce:GatherSum")
    ctx = build_impl_context("gloo", 2, "bfloat16", (4,), 128)
    assert cls.support(ctx) and cls.name == "gather-sum"
    refused = cls.support(replace(ctx, world_size=16))
    assert not refused and refused.reason == "gathers a copy per rank: at most 8 ranks, not 16"
