"""`make test`'s last line (tools/cpu_seconds.py): the CPU seconds of every process the command ran, a child's
children and an orphan it left included, and the command's own exit status."""

import re
import subprocess
import sys

import pytest

from tests.sweeprun import REPO

BURN = "import time\nwhile time.process_time() < 0.3: pass"


@pytest.mark.processes
def test_the_cpu_of_a_grandchild_and_an_orphan_is_counted_and_the_status_passed_on(tmp_path):
    pid = tmp_path / "orphan.pid"
    # sh runs one python and waits for it, then leaves one (a subshell's background job) and waits until it is
    # gone: reaped by the tool, its subreaper (a zombie nobody reaps stays, and would keep sh waiting)
    script = (
        f'"$0" -c "$1"; ("$0" -c "$1" & echo $! > {pid}); '
        f"while [ ! -s {pid} ] || kill -0 $(cat {pid}) 2>/dev/null; do sleep 0.05; done; exit 3"
    )
    tool = [sys.executable, str(REPO / "tools" / "cpu_seconds.py"), "burn", "--"]
    done = subprocess.run([*tool, "sh", "-c", script, sys.executable, BURN], capture_output=True, text=True, timeout=60)
    assert done.returncode == 3, done.stderr
    (line,) = done.stderr.splitlines()
    found = re.match(
        r"burn: ([\d.]+) CPU-seconds \(user [\d.]+ \+ system [\d.]+, every process it ran; ([\d.]+) of", line
    )
    assert float(found[1]) >= 0.6 and float(found[2]) >= 0.3, line  # two pythons of 0.3 s each, one an orphan
