"""The suite's own rules (tests/conftest.py): tests are told apart by their markers, never by keyword, and every GPU
test passes the process rule. Collected in this process (pytester), no test run."""

from pathlib import Path

import pytest

from tests import conftest

pytest_plugins = ("pytester",)

TESTS = Path(__file__).resolve().parent


def test_a_checkout_inside_a_folder_named_gpu_runs_its_cpu_tests(pytester, monkeypatch):
    folder = pytester.mkdir("gpu")
    (folder / "test_in_gpu_folder.py").write_text(
        "import pytest\n\ndef test_cpu():\n    pass\n\n@pytest.mark.gpu\ndef test_gpu():\n    pass\n"
    )
    items, _ = pytester.inline_genitems(str(folder), "-p", "no:cacheprovider")
    cpu, gpu = sorted(items, key=lambda item: item.name)
    assert "gpu" in cpu.keywords  # the folder's name is one of its keywords: a keyword rule would skip it
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    conftest.pytest_collection_modifyitems(None, items)
    assert cpu.get_closest_marker("skip") is None and gpu.get_closest_marker("skip") is not None
    assert not conftest.marked(cpu, "gpu") and conftest.marked(gpu, "gpu")


def test_every_gpu_test_collected_with_cuda_passes_the_process_rule(pytester, monkeypatch):
    """Collected as on a GPU box (CUDA faked present, so nothing is skipped), every test marked `gpu` (what the
    smoke's `pytest -m gpu` runs) is marked `processes`: the rule that fails a passing test which started a process
    unmarked never fails one."""
    monkeypatch.setattr("torch.cuda.is_available", lambda: True)
    files = sorted(str(p) for p in TESTS.glob("test_*.py") if "mark.gpu" in p.read_text(encoding="utf-8"))
    items, _ = pytester.inline_genitems("-p", "no:cacheprovider", *files)
    gpu = [item for item in items if conftest.marked(item, "gpu")]
    names = {item.name for item in gpu}
    assert "test_nccl_two_ranks_eager_and_graph_replay_verified" in names and len(files) >= 10
    for item in gpu:
        assert item.get_closest_marker("skip") is None, item.nodeid
        assert conftest.marked(item, "processes"), f"{item.nodeid}: a GPU test must carry @pytest.mark.processes"


@pytest.mark.parametrize("marker", ["gpu", "processes"])
def test_a_marker_is_read_from_the_test_not_its_keywords(pytester, marker):
    folder = pytester.mkdir(marker)
    (folder / "test_plain.py").write_text("def test_plain():\n    pass\n")
    (item,) = pytester.inline_genitems(str(folder), "-p", "no:cacheprovider")[0]
    assert marker in item.keywords and not conftest.marked(item, marker)
