"""A report folder a teammate can open: it follows the umask, as run folders do (tempfile's staging folder alone
would be private)."""

import os
import stat
from pathlib import Path

import pytest

from commprof.cli import main

DEMO_RUN = Path(__file__).parent / "fixtures" / "readme-demo"


@pytest.mark.parametrize("umask, mode", [(0o022, 0o755), (0o077, 0o700)])
def test_the_report_folder_follows_the_umask(tmp_path, umask, mode):
    previous = os.umask(umask)
    try:
        assert main(["report", str(DEMO_RUN), "--out", str(tmp_path / "report")]) == 0
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "report").stat().st_mode) == mode
