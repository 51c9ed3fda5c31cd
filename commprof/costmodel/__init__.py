"""The cost model: nccl-tests import, NCCL's latency model with fitted parameters, and the sweep simulator.

See docs/cost-model.md. Everything here is labelled by source: "nccl-tests" (imported) or "simulated".
"""
