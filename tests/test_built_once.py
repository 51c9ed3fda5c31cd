"""What the tests build once (tests/built_once.py) is rebuilt whenever a source changes, is never shared by two
checkouts, and is never handed out after a test wrote into it."""

from pathlib import Path

import pytest

from tests import built_once

FOLDERS = ["commprof", "sweeps", "tests"]  # the package, its shipped sweeps and presets, the tests and fixtures


@pytest.fixture
def checkout(tmp_path, monkeypatch) -> Path:
    """A checkout of its own (one source file per folder the key reads), keyed afresh at every call."""
    repo = tmp_path / "commprof"
    for top in FOLDERS:
        (repo / top).mkdir(parents=True)
        (repo / top / "a.py").write_text(f"# {top}\n")
    monkeypatch.setattr(built_once, "REPO", repo)
    monkeypatch.setattr(built_once, "source_key", built_once.source_key.__wrapped__)
    return repo


def _counting_build(builds: list[Path]):
    def build(folder: Path) -> dict:
        builds.append(folder)
        (folder / "report").mkdir()
        (folder / "report" / "summary.json").write_text("{}")
        return {"report": "report"}

    return build


def test_a_build_is_made_once_and_then_read(checkout, tmp_path):
    builds: list[Path] = []
    first = built_once.built_once(tmp_path / "cache", "x", _counting_build(builds))
    again = built_once.built_once(tmp_path / "cache", "x", _counting_build(builds))
    assert first == again == (builds[0], {"report": "report"}) and len(builds) == 1


@pytest.mark.parametrize("top", FOLDERS)
def test_any_change_to_a_source_makes_a_new_build_and_the_oldest_go(checkout, tmp_path, top):
    builds: list[Path] = []
    built_once.built_once(tmp_path / "cache", "x", _counting_build(builds))
    (checkout / top / "a.py").write_text("# changed\n")
    built_once.built_once(tmp_path / "cache", "x", _counting_build(builds))
    (checkout / top / "deeper").mkdir()
    for edit in range(built_once.KEPT):
        (checkout / top / "deeper" / "template.html").write_text(f"<p>edit {edit}</p>")
        built_once.built_once(tmp_path / "cache", "x", _counting_build(builds))
    kept = sorted(p for p in (tmp_path / "cache").iterdir() if p.is_dir())
    assert len(set(builds)) == len(builds) == 2 + built_once.KEPT
    assert kept == sorted(builds[-1 - built_once.KEPT :])  # the newest and KEPT before it: the oldest went


def test_a_checkout_elsewhere_with_the_same_files_has_its_own_key(checkout, tmp_path, monkeypatch):
    key = built_once.source_key()
    clone = tmp_path / "elsewhere" / "commprof"
    clone.parent.mkdir()
    checkout.rename(clone)
    monkeypatch.setattr(built_once, "REPO", clone)
    assert built_once.source_key() != key


def test_a_build_a_test_wrote_into_is_made_again(checkout, tmp_path):
    builds: list[Path] = []
    folder, found = built_once.built_once(tmp_path / "cache", "x", _counting_build(builds))
    (folder / found["report"] / "summary.json").write_text('{"edited": true}')
    built_once.built_once(tmp_path / "cache", "x", _counting_build(builds))
    assert len(builds) == 2 and (builds[-1] / "report" / "summary.json").read_text() == "{}"
