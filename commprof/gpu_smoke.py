"""`make gpu-smoke`: exercise every GPU path on whatever GPUs this machine has, and print a verdict per path.

For the rare session lent a GPU (possibly one): NCCL at world size 1 with eager and CUDA-graph replay of a
whole step; several NCCL ranks on one GPU (NCCL 2.30's NCCL_MULTI_RANK_GPU_ENABLE, or one NCCL_HOSTID per
rank on older NCCL) so real multi-rank communicators, knobs and capture are checked without 8 GPUs; NCCL's
INFO log parsed; the alternative implementations gated or run; the GPU-marked tests. Under 5 minutes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BUDGET_S = 280

# Several ranks, NCCL knobs that stay legal on any box, and every implementation (gated where it can't run).
SMOKE_SWEEP = """
name = "gpu-smoke"
[run]
model = "kimi-k2.5"
tokens = [4, 16]
iterations = 10
warmup = 2
point_timeout_s = 120

[axes]
impl = ["default", "nccl+rmsnorm", "flashinfer-pcie-ipc",
        { name = "flashinfer-fused", options = { use_oneshot = true } },
        { name = "symm-mem", options = { variant = "one_shot" } }]

[[points]]
NCCL_ALGO = "ring"
NCCL_PROTO = "LL"

[[points]]
NCCL_ALGO = "allreduce:tree"
NCCL_PROTO = "simple"

[[points]]
channels = 2
"""


def _run(cmd: list[str], timeout: float, env: dict | None = None) -> tuple[int, str]:
    """Run a command in its own session; on timeout kill the whole tree (torchrun, controllers, workers)."""
    started = time.monotonic()
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=REPO,
        env={**os.environ, **(env or {})},
        start_new_session=True,
    )
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        return 124, f"timed out after {timeout:.0f} s\n{output[-3000:]}"
    return proc.returncode, f"[{time.monotonic() - started:.0f} s]\n{output[-6000:]}"


def _records(out_dir: Path) -> list[dict]:
    files = sorted(out_dir.glob("*/results.jsonl"))
    return [json.loads(line) for line in files[-1].read_text().splitlines() if line.strip()] if files else []


def _sweep(out_dir: Path, nproc: int, args: list[str], timeout: float) -> tuple[int, str, list[dict]]:
    launch = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={nproc}",
        "-m",
        "commprof.allreduce_sweep",
        "--out",
        str(out_dir),
        "--no-doctor",
        *args,
    ]
    code, log = _run(launch, timeout)
    return code, log, _records(out_dir)


def _verdict(records: list[dict], want: dict[str, set[str]]) -> tuple[bool, str]:
    """Every (impl, mode) named in `want` must end in one of its allowed statuses."""
    seen: dict[tuple[str, str], set[str]] = {}
    for r in records:
        seen.setdefault((r["point"]["label"], r["mode"]), set()).add(r["status"])
    lines, ok = [], bool(records)
    for (label, mode), statuses in sorted(seen.items()):
        allowed = want.get(mode, {"ok"})
        good = statuses <= allowed
        ok &= good
        medians = [
            f"T={r['tokens']}: {r['step_us']['median']:.0f} µs"
            for r in records
            if r["point"]["label"] == label and r["mode"] == mode and r.get("step_us")
        ]
        messages = {
            r["message"].splitlines()[0]
            for r in records
            if r["point"]["label"] == label and r["mode"] == mode and r.get("message")
        }
        lines.append(
            f"    {'ok ' if good else 'BAD'} {label:<40} {mode:<5} {','.join(sorted(statuses)):<16} "
            f"{'; '.join(medians)} {' | '.join(sorted(messages))[:300]}"
        )
    return ok, "\n".join(lines)


def main() -> int:
    import torch

    if not torch.cuda.is_available():
        print("gpu-smoke: no CUDA GPU here (torch.cuda.is_available() is false): every GPU path skipped")
        return 0
    gpus = torch.cuda.device_count()
    names = {torch.cuda.get_device_name(i) for i in range(gpus)}
    print(
        f"gpu-smoke: {gpus} GPU(s) {', '.join(sorted(names))}; torch {torch.__version__}, "
        f"CUDA {torch.version.cuda}, NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}"
    )
    started = time.monotonic()
    verdicts: list[tuple[str, bool, str]] = []
    ranks = min(4, max(2, gpus))
    share = ["--share-gpus"] if gpus < ranks else []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)

        code, log, records = _sweep(
            tmp / "w1", 1, ["--tokens", "1,4", "--iterations", "20", "--impl", "nccl+rmsnorm"], 120
        )
        ok, detail = _verdict(records, {"eager": {"ok"}, "graph": {"ok"}})
        nccl = next((r["nccl"] for r in records if r.get("nccl")), None)
        verdicts.append(
            (
                "NCCL world size 1, eager + CUDA-graph capture/replay of the whole Kimi-K2.5 step",
                ok and code == 0,
                detail or log,
            )
        )
        verdicts.append(
            (
                "NCCL INFO log parsed (version, channels, algo/proto per size from the untimed probe)",
                bool(nccl and nccl.get("version") and nccl.get("choices")),
                json.dumps(nccl)[:600] if nccl else "no NCCL summary in the records",
            )
        )

        sweep = tmp / "multi.toml"
        sweep.write_text(SMOKE_SWEEP)
        remaining = BUDGET_S - (time.monotonic() - started)
        # Ranks sharing a GPU take turns on it: fewer steps keep the check inside the budget.
        lighter = ["--tokens", "4", "--iterations", "3", "--warmup", "1"] if share else []
        code, log, records = _sweep(
            tmp / "multi", ranks, ["--sweep", str(sweep), *share, *lighter], max(60, remaining - 60)
        )
        ok, detail = _verdict(
            records, {"eager": {"ok", "unsupported"}, "graph": {"ok", "unsupported", "capture_failed"}}
        )
        verdicts.append(
            (
                f"{ranks} NCCL ranks on {gpus} GPU(s){' (shared)' if share else ''}: knobs, "
                "implementations, capture verdicts",
                ok and code == 0,
                detail or log,
            )
        )

        remaining = BUDGET_S - (time.monotonic() - started)
        code, log = _run([sys.executable, "-m", "pytest", "-q", "-m", "gpu", "tests/"], max(30, remaining))
        verdicts.append(("pytest -m gpu", code == 0, log[-1500:]))

    print()
    for title, ok, detail in verdicts:
        print(f"[{'PASS' if ok else 'FAIL'}] {title}\n{detail}\n")
    print(
        f"gpu-smoke: {sum(ok for _, ok, _ in verdicts)}/{len(verdicts)} paths pass "
        f"in {time.monotonic() - started:.0f} s"
    )
    return 0 if all(ok for _, ok, _ in verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
