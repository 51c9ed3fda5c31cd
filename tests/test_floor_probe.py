"""The floor probe: its figures from fabricated measurements (CPU), the command without GPUs, and the probe itself
on a GPU box."""

import pytest
import torch

from commprof.cli import main
from commprof.floor.measure import FloorProbe, PairCopy, figures, floor_table


def probe(**changes) -> FloorProbe:
    fields = {
        "gpus": ["RTX PRO 6000"] * 4,
        "pairs": [PairCopy(0, 1, 50.0, 53.0, 0.4), PairCopy(1, 0, 48.0, None, 0.5), PairCopy(0, 2, 30.0, 31.0, 0.6)],
        "all_pairs_ingress_gbps": {0: 22.0, 1: 24.0, 2: 21.0, 3: 23.0},
        "launch_us": 1.5,
        "copy_bytes": 1 << 26,
        "host": "box",
        "time": "2026-11-30T00:00:00+00:00",
    }
    return FloorProbe(**{**fields, **changes})


def test_figures_take_the_best_pair_the_slowest_gpu_and_the_median_latency():
    figs = figures(probe())
    assert figs.evidence == "measured" and "commprof floor on box" in figs.source
    assert figs.pair_write_gbps == 53.0 and figs.all_pairs_gbps == 21.0 and figs.write_latency_us == 0.5
    assert figs.sync_us == pytest.approx(1.5 + 2 * 0.5)
    rows = floor_table(figs, 4, sizes=(1024, 1 << 20))
    assert [r["bytes"] for r in rows] == [1024, 1 << 20] and rows[0]["floor_us"] < rows[1]["floor_us"]


def test_too_little_measured_is_an_error_naming_what_is_missing():
    with pytest.raises(ValueError, match="no peer access for 2 pair"):
        figures(probe(all_pairs_ingress_gbps={}, not_measured=["no peer access for 2 pair(s), e.g. GPU0->GPU1"]))


@pytest.mark.skipif(torch.cuda.device_count() >= 2, reason="checks the message shown without two GPUs")
def test_the_command_without_gpus_says_where_published_figures_are(capsys):
    assert main(["floor"]) == 2
    err = capsys.readouterr().err
    assert "needs at least 2 CUDA GPUs" in err and "sweeps/topologies" in err


@pytest.mark.gpu
@pytest.mark.processes
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs at least 2 CUDA GPUs")
def test_the_probe_measures_this_box(tmp_path):
    from commprof.floor.probe import probe_floor

    measured = probe_floor(copy_bytes=8 << 20, repeats=3)
    assert measured.pairs and measured.launch_us and measured.launch_us > 0
    assert all(p.ce_gbps is None or p.ce_gbps > 0 for p in measured.pairs)
    figs = figures(measured)
    assert figs.all_pairs_gbps > 0 and figs.write_latency_us > 0
    assert main(["floor", "--out", str(tmp_path / "floor.json")]) == 0


@pytest.mark.gpu
@pytest.mark.processes
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs at least 2 CUDA GPUs")
def test_the_sweep_measures_the_floor_in_a_fresh_process(tmp_path):
    from commprof.floor.fresh import measure_floor

    entry = measure_floor(2, tmp_path / "floor.json")
    assert entry["status"] == "measured", entry.get("why")
    assert entry["figures"]["all_pairs_gbps"] > 0 and "measured at the start of this run" in entry["figures"]["source"]
    assert len(entry["gpus"]) == 2 and (tmp_path / "floor.json").exists()
