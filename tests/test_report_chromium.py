"""index.html in a real browser: headless Chromium (Debian's package) loads it without errors and draws it."""

import html
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from commprof.cli import main
from commprof.report.decision.formatting import fmt_ms
from tests.report_fixtures import write_run

pytestmark = pytest.mark.processes

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium() -> str:
    """Path of chromium, or a skip with the reason: tests never install system packages (`make browser-test` does)."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        pytest.skip("chromium is not installed: `make browser-test` installs Debian's package and runs this test")
    return found


def test_report_loads_in_headless_chromium(tmp_path):
    browser = chromium()
    run_dir = write_run(tmp_path / "runs", "kimi-synth")
    out = tmp_path / "report"
    assert main(["report", str(run_dir), "--out", str(out), "--compute-ms", "5", "--draft-ms", "0.8"]) == 0
    url = (out / "index.html").resolve().as_uri()
    profile = tmp_path / "profile"
    png = tmp_path / "page.png"
    shot = subprocess.run(
        [
            browser,
            *CHROMIUM_FLAGS,
            f"--user-data-dir={profile}",
            "--enable-logging=stderr",
            "--v=0",
            f"--screenshot={png}",
            "--window-size=1400,4000",
            url,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shot.returncode == 0, shot.stderr[-2000:]
    console = [
        line
        for line in shot.stderr.splitlines()
        if "CONSOLE" in line or "Failed to load resource" in line or "Uncaught" in line
    ]
    assert not console, console
    from PIL import Image

    with Image.open(png) as image:
        assert image.size == (1400, 4000)
        colours = image.convert("RGB").resize((140, 400)).getcolors(maxcolors=100_000)
    assert colours is None or len(colours) > 50  # drawn, not a blank page

    dom = subprocess.run(
        [browser, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--dump-dom", url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert dom.returncode == 0, dom.stderr[-2000:]
    for text in ("What do I set?", "How much faster is my verify step?", "NCCL_ALGO=Ring NCCL_PROTO=LL"):
        assert text in dom.stdout, text


def rendered_text(browser: str, page: Path, profile: Path) -> str:
    """The page's text as Chromium lays it out (its DOM after loading, tags stripped)."""
    dom = subprocess.run(
        [browser, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--dump-dom", page.resolve().as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert dom.returncode == 0, dom.stderr[-2000:]
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", dom.stdout)))


@pytest.mark.parametrize("example", ["gloo_report", "pcie8_simulated"])
def test_shipped_examples_say_in_the_browser_what_summary_json_holds(example, tmp_path, request):
    """The real gloo run and the shipped pcie8 sweep simulated: the first screen, as drawn, carries the evidence,
    the verdict and table 1's numbers exactly as summary.json has them."""
    browser = chromium()
    out = request.getfixturevalue(example)  # rendered once for the session (tests/conftest.py)
    (run,) = json.loads((out / "summary.json").read_text())["runs"]
    text = rendered_text(browser, out / "index.html", tmp_path / "profile")
    assert run["environment"]["evidence"]["label"] in text and run["headline"]["text"] in text
    for row in run["tables"]["choices"]:
        assert fmt_ms(row["median_us"]) in text, row["point_id"]
    if example == "gloo_report":
        assert "measured on gloo" in text and "NCCL did not run" in text
    else:
        # The first screen's verify card is the Decision's: the band it routes to another kernel, or no change.
        routed = [r for r in run["routes"] if not r["kept"] and r["collective"] == "all_reduce"]
        if routed:
            assert f"{routed[0]['impl']} is predicted to take" in text
        else:
            assert "No change: nothing beat the baseline" in text
        assert "not tested" in text and "What to measure" in text
        assert "Calibrate the model against your own box" in text and run["nccl"]["file"] is None
