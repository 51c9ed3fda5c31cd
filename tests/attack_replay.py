"""The replay of an attack case through the entry point a user runs (`python -m <argv>`), in the test's own process
(runpy: the module's `__main__` code, as one rank of a one-rank launch in a bare environment): its exit code, its
one error line, no traceback, every file and link outside the folder it was given left as it was. A case that gives
a time limit is about a bound (a million GPUs in a bundle, a 128 MiB log): the CPU seconds it took and how far it
raised this process's peak resident memory (the kernel's VmHWM, reset before the case) are held to it. A case that
patches the entry point's module (a tools/ script's bound made small) runs through its main function instead
(check_in_process). The round-4 and round-5 attack replays share it."""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import re
import runpy
import shutil
import signal
import socket
import sys
import time
import traceback
import warnings
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
    limit_s: float | None = None  # a bound: CPU seconds, and PEAK_BYTES of memory
    after: Callable[[], None] | None = None  # what else must hold afterwards
    absent: str = ""  # a regular expression nothing printed matches (an unbounded number, a raw label)


@dataclass
class Ran:
    """What a replayed command did: its exit status and what it printed."""

    status: int
    err: str
    out: str


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _environment(cwd: Path) -> dict[str, str]:
    """The bare environment of one rank of a one-rank launch, run in `cwd`."""
    return {
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


# What a fresh interpreter shows of Python's warnings on stderr (its default filters), shown here the same way.
_DEFAULT_WARNINGS = [
    ("ignore", DeprecationWarning),
    ("ignore", PendingDeprecationWarning),
    ("ignore", ImportWarning),
    ("ignore", ResourceWarning),
]


def replay_here(argv: list[str], cwd: Path, launch: dict[str, str] | None = None) -> Ran:
    """`python -m argv` run in this process (runpy, the module's `__main__` code) in `cwd`, with the environment
    `replay` gives the child (`launch` overriding it): its exit status, and its output with the warnings and any
    traceback a child would print. Signal handlers, the environment and the working folder are put back afterwards."""
    out, err = io.StringIO(), io.StringIO()
    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    with pytest.MonkeyPatch.context() as patch, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        for action, category in _DEFAULT_WARNINGS:
            warnings.filterwarnings(action, category=category)
        warnings.filterwarnings("ignore", "'commprof.* found in sys.modules", RuntimeWarning)  # runpy's, of a -m
        for name in list(os.environ):
            patch.delenv(name)
        for name, value in (_environment(cwd) | (launch or {})).items():
            patch.setenv(name, value)
        patch.chdir(cwd)
        patch.setattr(sys, "argv", [argv[0], *argv[1:]])
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                runpy.run_module(argv[0], run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as exited:
            code = _exit_status(exited.code, err)
        except Exception:  # what the interpreter prints of an exception nothing caught
            err.write(traceback.format_exc())
            code = 1
        finally:
            for signum, handler in handlers.items():
                signal.signal(signum, handler)
    shown = "".join(warnings.formatwarning(w.message, w.category, w.filename, w.lineno, w.line) for w in caught)
    return Ran(code, err.getvalue() + shown, out.getvalue())


def _exit_status(code, err: io.StringIO) -> int:
    """The exit status of `sys.exit(code)`, and what the interpreter prints of it."""
    if code is None or isinstance(code, int):
        return code or 0
    err.write(f"{code}\n")
    return 1


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


def replay_bounded(argv: list[str], cwd: Path, limit_s: float, launch: dict[str, str] | None = None) -> Ran:
    """`replay_here`, held to `limit_s` CPU seconds and to raising this process's peak resident memory by less than
    PEAK_BYTES (nothing read or allocated unbounded)."""
    resident = _reset_peak_resident()
    started = time.process_time()
    ran = replay_here(argv, cwd, launch)
    seconds = time.process_time() - started
    raised = _status_bytes("VmHWM") - resident
    assert seconds < limit_s and raised < PEAK_BYTES, (seconds, raised, ran.err[-2000:])
    return ran


def _status_bytes(field: str) -> int:
    """A memory figure of this process from /proc/self/status (VmRSS, VmHWM), in bytes."""
    found = re.search(rf"^{field}:\s+(\d+) kB$", Path("/proc/self/status").read_text(), re.MULTILINE)
    assert found, f"/proc/self/status has no {field}"
    return int(found[1]) * 1024


def _reset_peak_resident() -> int:
    """This process's peak resident memory (VmHWM) set back to what it holds now (Linux >= 4.0: clear_refs 5),
    so that after a case the peak is the case's own; what it holds now."""
    Path("/proc/self/clear_refs").write_text("5")
    return _status_bytes("VmRSS")


def attack_params(cases: dict[str, Callable[[Path], Attack]], starting: set[str]) -> list:
    """The cases as test parameters, those in `starting` (their command starts a process) marked `processes`."""
    assert starting <= set(cases), starting - set(cases)
    return [pytest.param(name, marks=[pytest.mark.processes] if name in starting else [], id=name) for name in cases]


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
    ran = replay_here(attack.argv, cwd) if attack.limit_s is None else replay_bounded(attack.argv, cwd, attack.limit_s)
    assert tree(tmp_path, skip) == before
    _held(attack, ran, cwd)


def _held(attack: Attack, ran: Ran, cwd: Path) -> None:
    """What every replayed case must do: its status, one error line matching where it refuses, none where it ends
    well, no traceback or control character, nothing left in its working folder, nothing `absent` printed, and its
    own `after`."""
    assert list(cwd.iterdir()) == []
    assert "Traceback" not in ran.err and ran.status == attack.status, ran.err[-3000:]
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f]", ran.err + ran.out), "a control character was printed"
    errors = [line for line in ran.err.splitlines() if "error" in line]
    if attack.status == 2:  # a refusal: one line
        assert len(errors) == 1 and re.search(attack.error, errors[0]), ran.err[-3000:]
    elif attack.status == 0:  # 1 is a check that failed: it says so in its own words
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
    """check_attack's checks, with the case replayed through its entry point's main function in this process (a case
    that patches that module first): its exit code, one error line, no traceback (an exception escaping main fails
    the test), nothing outside the folders given changed, and its processor time within `limit_s` where one is given.
    Returns what it printed (capsys's result)."""
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
    assert attack.limit_s is None or seconds < attack.limit_s, (
        f"{attack.argv[:3]} took {seconds:.1f} s of processor time"
    )
    _held(attack, Ran(status, printed.err, printed.out), cwd)
    return printed
