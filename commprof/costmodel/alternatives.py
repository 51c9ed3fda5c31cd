"""Which all-reduces other than NCCL's would run on a simulated box, and which latency model predicts each.

An implementation's own gate (commprof.impls) decides over the topology's facts: compute capability, peer
access, native peer atomics, world size, dtype and T, with every library taken as installed at a version that has
the kernel (the simulator predicts that box, not this machine's packages). The prediction then comes from the
topology's stated model ([impls.<name>]), else from the floor of the algorithm the point runs: a lower bound with
an unknown expected error, so no verdict or routing decision rests on it. Pure.
"""

from __future__ import annotations

from dataclasses import replace

from commprof.costmodel.kernels import KernelModel
from commprof.costmodel.topology import Topology
from commprof.impls.base import ImplContext
from commprof.impls.registry import builtin

FLOOR_ONLY = "no published figure for {impl} on {box}; a lower bound, not a prediction"


def box_context(topology: Topology, world_size: int, dtype: str, tokens: tuple[int, ...], hidden: int) -> ImplContext:
    """The facts a gate reads, as the topology file states them."""
    major = int(topology.compute_capability)
    minor = round((topology.compute_capability - major) * 10)
    return ImplContext(
        backend="nccl",
        world_size=world_size,
        dtype=dtype,
        tokens=tokens,
        hidden_size=hidden,
        device_type="cuda",
        compute_capability=(major, minor),
        p2p_all_pairs=topology.p2p_supported,
        p2p_detail="" if topology.p2p_supported else f"{topology.name} says p2p_supported = false",
        p2p_atomics=topology.p2p_atomics,
        p2p_atomics_detail=f"{topology.name} says p2p_atomics = false" if topology.p2p_atomics is False else "",
        libraries_assumed=True,
    )


def refusal(impl: str, context: ImplContext, options: dict, tokens: int | None = None) -> str | None:
    """Why a built-in would not run on the box (at T = `tokens` when given), or None; plug-ins are not gated."""
    cls = builtin(impl)
    if cls is None:
        return None
    context = replace(context, options=dict(options))
    support = cls.support(context) if tokens is None else cls.support_tokens(context, tokens)
    return None if support else support.reason


def kernel_model(impl: str, topology: Topology) -> KernelModel | None:
    """The topology's stated model of `impl`, else the floor of its algorithm (None without a [floor])."""
    stated = topology.impls.get(impl)
    if stated is not None or topology.floor is None or builtin(impl) is None:
        return stated
    return KernelModel(impl=impl, basis="floor", source=FLOOR_ONLY.format(impl=impl, box=topology.name))
