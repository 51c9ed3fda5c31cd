"""What an engine runs today, from a run to the decision: a simulated Kimi-K2.5 step on the HGX H100 preset, its
plan naming the served architecture, and SGLang 0.5.23's own FlashInfer all-reduce auto-enable read from it (the
rule cited). In process; one point at one T."""

from commprof.cli import main
from commprof.report.analysis.decide import decide
from commprof.report.analysis.run_analysis import analyze_run
from commprof.report.command import load_run
from commprof.report.flags import report_options, sweep_options

SWEEP = """
name = "kimi-nvlink-t4"
description = "Kimi-K2.5 at TP 8 on NVLink, T = 4: NCCL's defaults only."

[run]
model = "kimi-k2.5"
tokens = [4]
phase = "verify"
dtype = "bfloat16"
interconnect = "nvlink"
"""
CLI = {"compute_ms": None, "draft_ms": None, "accept": None, "baseline": None, "allow_partial": True}


def test_sglang_runs_flashinfer_all_reduce_today_for_kimi_on_hgx_h100(tmp_path):
    sweep = tmp_path / "kimi.toml"
    sweep.write_text(SWEEP)
    assert main(["simulate", "--topology", "nvlink-h100", "--sweep", str(sweep), "--out", str(tmp_path / "sim")]) == 0
    (run_dir,) = (tmp_path / "sim").iterdir()
    run_id, records, meta, _ = load_run(run_dir)
    assert records[0]["plan"]["architecture"] == "KimiK25ForConditionalGeneration"  # the wrapper, not DeepseekV3
    options = report_options(CLI | {"engines": ("sglang==0.5.23",)}, sweep_options(meta))
    (run,) = analyze_run(run_id, records, meta, options, str(run_dir))
    (sglang,) = decide(run).engines.paths
    (row,) = sglang["rows"]
    assert row["today"] == "FlashInfer all-reduce"
    assert "overrides.py: _flashinfer_allreduce_fusion_auto_enable" in row["today_source"]
    (rule,) = sglang["engine_sets"]
    assert rule.startswith("--flashinfer-allreduce-fusion-backend=auto: KimiK25ForConditionalGeneration at TP 8")
