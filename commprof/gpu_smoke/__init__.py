"""`python -m commprof.gpu_smoke` (and `make gpu-smoke`): every GPU path on whatever GPUs a machine has (even one).

NCCL at >= 2 ranks (sharing a GPU when there is one: one NCCL_HOSTID per rank, or NCCL_MULTI_RANK_GPU_ENABLE
on NCCL >= 2.30), eager and CUDA-graph replay of the whole step, the knobs judged against the baseline's logged
choices and their capture verdicts, NCCL's parsed log, the implementations (gated with their reason where they
cannot run), the doctor's GPU checks, the report, and `pytest -m gpu`; with --extended a second step. One
verdict per path, everything kept under --out and packed into one archive. Runs from a source checkout with an
interpreter that already has torch (no venv, no install, no package index). docs/gpu-check.md: how to run it.

environment.py decides whether to run; run.py (first step) and extended.py (second) run the steps through
steps.py; points.py, knobs.py and verdicts.py judge the records (pure); archive.py packs what was kept.
"""
