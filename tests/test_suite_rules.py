"""Rules the test suite keeps about itself: it passes wherever the checkout and its venv lie (`git clone` makes a
folder named commprof, with .venv inside it), so no test takes a line for commprof's own by the package's name."""

import re
from pathlib import Path

from tests.sweeprun import PACKAGE, own_frames

TESTS = Path(__file__).resolve().parent


def test_own_frames_are_matched_by_the_package_path_not_its_name():
    venv = "/home/me/commprof/.venv/lib/python3.11/site-packages"
    output = "\n".join(
        [
            "Traceback (most recent call last):",
            f'  File "{venv}/torch/distributed/run.py", line 1032, in <module>',
            '  File "/srv/commprof-checkout/commprof/sweep/command.py", line 12, in main',  # another checkout's
            f'  File "{PACKAGE}/sweep/command.py", line 12, in main',
            f"torch.distributed.elastic.multiprocessing.errors.ChildFailedError: {venv}/../bin/python commprof",
        ]
    )
    assert own_frames(output) == [f'  File "{PACKAGE}/sweep/command.py", line 12, in main']


def test_no_test_takes_a_line_for_commprofs_by_the_name_commprof():
    """`"commprof" in line` holds for any path under a folder named commprof: match by PACKAGE (own_frames)."""
    bare_name = re.compile(r"""["']commprof["']\s+(not\s+)?in\b""")
    found = [
        f"{path.name}:{number}"
        for path in sorted(TESTS.glob("*.py"))
        if path.name != Path(__file__).name
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if bare_name.search(line)
    ]
    assert found == []
