"""`make gpu-smoke` / `python -m commprof.gpu_smoke`: every GPU path on whatever GPUs a machine has (even one).

NCCL at >= 2 ranks (sharing a GPU when there is one: one NCCL_HOSTID per rank, or NCCL_MULTI_RANK_GPU_ENABLE
on NCCL >= 2.30), eager and CUDA-graph replay of the whole step, the knobs and their capture verdicts, NCCL's
parsed log, the implementations (gated with their reason where they cannot run), the doctor's GPU checks, the
report, and `pytest -m gpu`; one verdict per path, everything kept under --out. Runs from a source checkout
with an interpreter that already has torch (no venv, no install, no package index).
"""
