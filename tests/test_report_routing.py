"""The routing plan in the report: summary.json's bands, the first screen's figure and tables, and routing.txt's
engine settings; from the simulated pcie8-verify sweep as a user runs it, and from fabricated measured records."""

import json

from commprof.report.analysis.routing import routing_plan
from commprof.report.analysis.routing_candidates import candidates
from commprof.report.analysis.routing_settings import routing_settings
from tests.test_routing import FIG, record

KIB = 1024


def test_summary_routes_every_verify_size_with_its_floor(pcie8_simulated):
    run = json.loads((pcie8_simulated / "summary.json").read_text())["runs"][0]
    claims = {c["id"]: c for c in run["claims"]}
    bands = [b for b in run["routes"] if (b["collective"], b["mode"]) == ("all_reduce", "graph")]
    assert bands[0]["min_bytes"] == 14 * KIB and bands[-1]["max_bytes"] == 224 * KIB
    assert all(low["max_bytes"] + 1 == high["min_bytes"] for low, high in zip(bands, bands[1:]))
    assert all(b["floor_us"] > 0 and b["pct_of_floor"] > 100 for b in bands)
    first = bands[0]
    assert first["impl"] in ("flashinfer-pcie-ipc", "b12x") and not first["kept"]  # a PCIe kernel, not NCCL
    claim = claims[first["claim"]]
    assert first["evidence"].startswith("simulated") and claim["verdict"] == "beyond error"
    # NCCL's predictions carry the prior's measured error, so the kernel's win was judged against both errors
    assert [t["name"] for t in claim["error"]] == ["model (this side)", "model (the reference)"]
    assert claim["error"][1]["pct"] == 41
    routing = run["routing"]
    assert "published" in routing["floor"] and "p2pmark" in routing["floor"]
    assert routing["ranks"] == 8 and routing["floor_figures"]["evidence"] == "published"
    assert {c["impl"] for c in routing["curves"]} >= {"nccl", "flashinfer-pcie-ipc", "b12x"}


def test_routing_txt_routes_the_won_sizes_and_sizes_the_workspace(pcie8_simulated):
    text = (pcie8_simulated / "routing.txt").read_text()
    assert text.startswith("# Use: source routing.txt") and "SIMULATED" in text
    # 14 KiB = T 1 x hidden 7168 x 2 bytes: the largest size that won, not the band's unmeasured edge; a
    # simulation tested nothing, so the lines are there, commented out, with why
    assert "#   export SGLANG_ENABLE_PCIE_IPC_ALLREDUCE=1\n#   export SGLANG_PCIE_IPC_MAX_NUMEL=7168\n" in text
    assert "max batch x draft tokens <= 1 tokens: 1 x hidden 7168 x 2 B" in text
    assert "#   export VLLM_ALLREDUCE_USE_FLASHINFER_PCIE_IPC=1\n" in text and "no size cap" in text
    assert not [line for line in text.splitlines() if line and not line.startswith(("#", "[ -n "))]
    # the stage's simulated search of that kernel could not place the edge: its margin there is inside model error
    assert "flashinfer-pcie-ipc: its crossover search is not resolved: inside the models' errors" in text
    run = json.loads((pcie8_simulated / "summary.json").read_text())["runs"][0]
    assert {s["engine"] for s in run["engines"]["settings"]} == {"SGLang", "vLLM"}
    assert run["files"]["routing.txt"] == "routing.txt"


def test_the_first_screen_shows_the_plan_after_what_to_set(pcie8_simulated):
    html = (pcie8_simulated / "index.html").read_text()
    start = html.index("The routing plan")
    end = html.index("1 · Per T:")
    assert html.index("<h3>What do I set?</h3>") < start < end
    card = html[start:end]
    assert "<svg" in card and "floor" in card and ": beyond error" in card
    assert (
        "Crossover searches" in card
        and "not resolved: inside the models&#39; errors" in card
        and "simulated (expected" in card
    )
    assert "routing.txt — engine settings" in html


def test_a_measured_win_inside_noise_is_never_exported():
    records = [
        record("p000", "default", 7, "graph", 20.0),
        record("p001", "b12x", 7, "graph", 18.0, p90=21.0),  # faster median, p90 above the baseline's median
        record("p000", "default", 56, "graph", 30.0),
        record("p001", "b12x", 56, "graph", 10.0),  # beyond noise, but not at the smallest size
    ]
    plan = routing_plan(candidates(records, "p000"), 8, FIG)
    settings, notes = routing_settings(plan["bands"], 1024, 2)
    assert settings == []
    assert any("not at the smallest sizes" in note for note in notes)


def test_a_measured_win_at_the_smallest_sizes_becomes_each_engines_setting_with_its_cap():
    records = [record("p000", "default", t, "graph", 20.0) for t in (7, 14, 56)] + [
        record("p001", "b12x", 7, "graph", 6.0),
        record("p001", "b12x", 14, "graph", 9.0),
        record("p001", "b12x", 56, "graph", 25.0),
    ]
    plan = routing_plan(candidates(records, "p000"), 8, FIG)
    settings, _notes = routing_settings(plan["bands"], 1024, 2)
    by_engine = {s.engine: s for s in settings}
    assert set(by_engine) == {"SGLang", "vLLM (community PCIe fork)"}
    # T = 14 x hidden 1024 x 2 B = 28 KiB is the largest size that won
    fork = dict(by_engine["vLLM (community PCIe fork)"].variables)
    assert fork["VLLM_PCIE_ONESHOT_ALLREDUCE_MAX_SIZE"] == "28672"
    assert dict(by_engine["SGLang"].variables) == {"SGLANG_B12X_PCIE_AR": "1", "SGLANG_B12X_ONESHOT_MAX_BYTES": "28672"}
    assert all(s.live for s in settings) and "beyond noise" in by_engine["SGLang"].why
    untested, _ = routing_settings(plan["bands"], 1024, 2, not_live="not tested: a simulation")
    assert not any(s.live for s in untested) and all("not tested" in s.why for s in untested)


def test_an_engine_without_a_size_cap_is_set_only_if_the_kernel_wins_at_every_size_it_would_send():
    # vLLM 0.33 sends FlashInfer PCIe IPC every all-reduce up to its largest capture size x hidden (512 x 1024 x 2 B)
    sizes = (7, 14, 512)
    wins_small = [record("p000", "default", t, "graph", 20.0) for t in sizes] + [
        record("p001", "flashinfer-pcie-ipc", t, "graph", 6.0 if t < 512 else 40.0) for t in sizes
    ]
    settings, _ = routing_settings(routing_plan(candidates(wins_small, "p000"), 8, FIG)["bands"], 1024, 2)
    vllm = next(s for s in settings if s.engine == "vLLM")
    assert not vllm.live and "no size cap" in vllm.why and "NCCL above" in vllm.why
    sglang = next(s for s in settings if s.engine == "SGLang")
    assert sglang.live and dict(sglang.variables)["SGLANG_PCIE_IPC_MAX_NUMEL"] == str(14 * 1024)
    wins_all = [record("p000", "default", t, "graph", 20.0) for t in sizes] + [
        record("p001", "flashinfer-pcie-ipc", t, "graph", 6.0) for t in sizes
    ]
    settings, _ = routing_settings(routing_plan(candidates(wins_all, "p000"), 8, FIG)["bands"], 1024, 2)
    assert next(s for s in settings if s.engine == "vLLM").live
