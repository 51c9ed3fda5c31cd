"""index.html in a real browser: headless Chromium (Debian's package) loads it without errors and draws it."""

import os
import shutil
import subprocess

import pytest

from commprof.cli import main
from tests.report_fixtures import write_run

pytestmark = pytest.mark.slow

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def chromium() -> str:
    """Path of chromium; installs Debian's package when running as root without it, else skips with the reason."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        pytest.skip("chromium is not installed and this test can only apt-get install it as root on Debian")
    for command in (["apt-get", "update"], ["apt-get", "install", "-y", "chromium"]):
        done = subprocess.run(command, capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            pytest.skip(f"could not install chromium ({' '.join(command)}: {done.stderr.strip()[-200:]})")
    found = shutil.which("chromium")
    if not found:
        pytest.skip("apt-get installed chromium but it is not on PATH")
    return found


def test_report_loads_in_headless_chromium(tmp_path):
    browser = chromium()
    run_dir = write_run(tmp_path / "runs", "kimi-synth")
    out = tmp_path / "report"
    assert main(["report", str(run_dir), "--out", str(out), "--compute-ms", "5", "--draft-ms", "0.8"]) == 0
    url = (out / "index.html").resolve().as_uri()
    profile = tmp_path / "profile"
    png = tmp_path / "page.png"
    shot = subprocess.run([browser, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--enable-logging=stderr",
                           "--v=0", f"--screenshot={png}", "--window-size=1400,4000", url],
                          capture_output=True, text=True, timeout=120)
    assert shot.returncode == 0, shot.stderr[-2000:]
    console = [line for line in shot.stderr.splitlines()
               if "CONSOLE" in line or "Failed to load resource" in line or "Uncaught" in line]
    assert not console, console
    from PIL import Image

    with Image.open(png) as image:
        assert image.size == (1400, 4000)
        colours = image.convert("RGB").resize((140, 400)).getcolors(maxcolors=100_000)
    assert colours is None or len(colours) > 50          # drawn, not a blank page

    dom = subprocess.run([browser, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--dump-dom", url],
                         capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    for text in ("What do I set?", "How much faster is my verify step?", "NCCL_ALGO=Ring NCCL_PROTO=LL"):
        assert text in dom.stdout, text
