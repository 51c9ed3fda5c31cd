"""The replay of an attack case through the entry point a user runs, in a process of its own: its exit code, its
one error line, no traceback, every file and link outside the folder it was given left as it was, its time limit
and peak memory (the child's own rusage, read by wait4). Where the process itself is not under test, the same checks
run through the entry point's main function in this process (check_in_process). The attack replays share it."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
PEAK_BYTES = 2 * 2**30


@dataclass
class Attack:
    """One case as the attacker ran it: `python -m <argv>`, and what it must do."""

    argv: list[str]
    status: int = 2
    error: str = ""  # a regular expression the one error line matches
    given: list[Path] = field(default_factory=list)  # the folders it may write in
    limit_s: float = 60.0
    after: Callable[[], None] | None = None  # what else must hold afterwards
    absent: str = ""  # a regular expression nothing printed matches (an unbounded number, a raw label)


@dataclass
class Ran:
    status: int
    err: str
    out: str
    seconds: float
    peak_bytes: int


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def replay(argv: list[str], cwd: Path, limit_s: float) -> Ran:
    """`python -m argv` in `cwd` as one rank of a one-rank launch; its exit, output, wall time and peak memory
    (the child's own ru_maxrss, read by wait4). Killed and failed at `limit_s`."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(cwd.parent / "home"),  # matplotlib's and torch's caches
        "PYTHONPATH": str(REPO),
        "RANK": "0",
        "WORLD_SIZE": "1",
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(_free_port()),
    }
    out, err = cwd / ".stdout", cwd / ".stderr"
    start = time.monotonic()
    with open(out, "wb") as o, open(err, "wb") as e:
        child = subprocess.Popen([sys.executable, "-m", *argv], cwd=cwd, env=env, stdout=o, stderr=e)
    while True:
        pid, status, usage = os.wait4(child.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() - start > limit_s:
            os.kill(child.pid, signal.SIGKILL)
            os.wait4(child.pid, 0)
            pytest.fail(f"{argv} ran past its {limit_s} s limit: {err.read_text()[-2000:]}")
        time.sleep(0.05)
    seconds = time.monotonic() - start
    code = os.waitstatus_to_exitcode(status)
    texts = out.read_text(errors="replace"), err.read_text(errors="replace")
    out.unlink()
    err.unlink()
    return Ran(code, texts[1], texts[0], seconds, usage.ru_maxrss * 1024)


def tree(root: Path, skip: list[Path]) -> dict[str, str]:
    """Every path under `root` outside `skip`, with what it is (a link's target, a file's digest)."""
    seen = {}
    for path in sorted(root.rglob("*")):
        if any(path == s or s in path.parents for s in skip):
            continue
        if path.is_symlink():
            seen[str(path)] = "-> " + str(path.readlink())
        elif path.is_file():
            seen[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            seen[str(path)] = "folder"
    return seen


def sweep_file(tmp: Path, body: str) -> Path:
    path = tmp / "evil.toml"
    path.write_text('name = "evil"\n[run]\ntokens = [1]\n' + body)
    return path


GLOO_RUN = REPO / "tests" / "fixtures" / "report" / "cpu-smoke-gloo"


def gloo_run(tmp: Path, plan: str | None = None, drop: str = "") -> Path:
    """A copy of a real 2-rank gloo run (stage 0 of 5 points, stage 1 "confirm" of 2), `drop`'s records left out
    as an interrupted run leaves them, plan.jsonl replaced by `plan`."""
    run = tmp / "runs" / "X"
    shutil.copytree(GLOO_RUN, run)
    if drop:
        lines = (run / "results.jsonl").read_text().splitlines(keepends=True)
        (run / "results.jsonl").write_text("".join(line for line in lines if f'"{drop}"' not in line))
    if plan is not None:
        (run / "plan.jsonl").write_text(plan)
    return run


def check_attack(make: Callable[[Path], Attack], tmp_path: Path) -> None:
    """Replay the case `make` builds under `tmp_path` (beside a victim file outside every folder it is given)."""
    victim = tmp_path / "outside" / "victim"
    victim.parent.mkdir()
    victim.write_text("export KEEP=1\n")
    attack = make(tmp_path)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    skip = [*attack.given, cwd, tmp_path / "home"]
    before = tree(tmp_path, skip)
    ran = replay(attack.argv, cwd, attack.limit_s)
    assert tree(tmp_path, skip) == before
    assert list(cwd.iterdir()) == []
    assert "Traceback" not in ran.err and ran.status == attack.status, ran.err[-3000:]
    assert ran.peak_bytes < PEAK_BYTES, ran.peak_bytes
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f]", ran.err + ran.out), "a control character was printed"
    errors = [line for line in ran.err.splitlines() if "error" in line]
    if attack.status:
        assert len(errors) == 1 and re.search(attack.error, errors[0]), ran.err[-3000:]
    else:
        assert errors == [], ran.err[-3000:]
    if attack.absent:
        assert not re.search(attack.absent, ran.out + ran.err), (ran.out + ran.err)[-3000:]
    if attack.after is not None:
        attack.after()


def _entry_point(name: str) -> Callable[[list[str]], int]:
    """The main function of an entry point the attacker ran: `commprof` (its CLI) or a tools/ script by its name."""
    if name == "commprof":
        from commprof.cli import main

        return main
    import importlib.util

    if name in sys.modules:  # loaded once, so a test may patch it
        return sys.modules[name].main
    spec = importlib.util.spec_from_file_location(name, REPO / "tools" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    tool = importlib.util.module_from_spec(spec)
    sys.modules[name] = tool
    spec.loader.exec_module(tool)
    return tool.main


def check_in_process(
    make: Callable[[Path], Attack], tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> Any:
    """check_attack's checks, with the case replayed through its entry point's main function in this process, where
    the process itself is not under test: its exit code, one error line, no traceback (an exception escaping main
    fails the test), nothing outside the folders given changed, and its processor time within `limit_s` (memory
    bounds are proved by the refusal coming before the expansion). Returns what it printed (capsys's result)."""
    victim = tmp_path / "outside" / "victim"
    victim.parent.mkdir(parents=True)
    victim.write_text("export KEEP=1\n")
    attack = make(tmp_path)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    skip = [*attack.given, cwd]
    before = tree(tmp_path, skip)
    main = _entry_point(attack.argv[0])
    capsys.readouterr()
    start = time.process_time()
    status = main(attack.argv[1:])
    seconds = time.process_time() - start
    printed = capsys.readouterr()
    assert tree(tmp_path, skip) == before
    assert list(cwd.iterdir()) == []
    assert status == attack.status and "Traceback" not in printed.err, printed.err[-3000:]
    assert seconds < attack.limit_s, f"{attack.argv[:3]} took {seconds:.1f} s of processor time"
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f]", printed.err + printed.out), "a control character was printed"
    errors = [line for line in printed.err.splitlines() if "error" in line]
    if attack.status == 2:
        assert len(errors) == 1 and re.search(attack.error, errors[0]), printed.err[-3000:]
    elif attack.status == 0:
        assert errors == [], printed.err[-3000:]
    if attack.absent:
        assert not re.search(attack.absent, printed.out + printed.err), (printed.out + printed.err)[-3000:]
    if attack.after is not None:
        attack.after()
    return printed
