"""A record of the FlashInfer declarations commprof calls, and a fake FlashInfer built from it, so the binding tests
(tests/test_impls_bindings.py) check commprof's calls where FlashInfer is not installed (`make test` needs no 1.7 GB
download); where it is installed they bind against the installed package, and a test compares it with this record.

Taken from flashinfer-python 0.7.4 (the PyPI wheel, flashinfer_python-0.7.4-py3-none-any.whl): flashinfer/comm/
{allreduce,pcie_ipc_ar,trtllm_ar}.py, flashinfer/norm.py, flashinfer/jit/{core,comm}.py. Defaults are placeholders
(`...` where the default is not a plain value): a call is checked against each parameter's name, order and kind, and
which ones have a default. To refresh it for another release, in a venv with that FlashInfer (`make extras`):
`python -m tests.flashinfer_record` prints SIGNATURES as the installed package declares it; paste it below, update
SOURCE and VERSION, and run tests/test_impls_bindings.py there (its record test names any other fact that moved).
"""

from __future__ import annotations

import dataclasses
import inspect
from types import ModuleType

SOURCE = "flashinfer-python 0.7.4 (PyPI wheel)"
VERSION = "0.7.4"

# Callable -> its parameters as declared (methods with self; a class: its __init__ without self).
SIGNATURES = {
    "comm.create_allreduce_fusion_workspace": "backend='auto', world_size=None, rank=None, max_token_num=None, "
    "hidden_dim=None, dtype=None, gpus_per_node=None, comm_backend=None, force_oneshot_support=False, group=None, *, "
    "top_k=None, rms_eps=None, weight_bias=None, routed_scaling_factor=None, include_shared_expert=None, "
    "add_residual=None, write_residual_output=None, apply_rms_norm=None, output_dtype=None, dynamic_fp8=None, "
    "write_norm_output=None, config=None",
    "comm.allreduce_fusion": "input, workspace, pattern, launch_with_pdl=False, trigger_completion_at_end=True, "
    "output=None, residual_out=None, norm_out=None, quant_out=None, scale_out=None, residual_in=None, rms_gamma=None, "
    "rms_eps=1e-06, scale_factor=None, layout_code=None, use_oneshot=None, fp32_acc=False, "
    "moe_reduction_device_num_experts=None, moe_reduction_scale_input=None, "
    "moe_reduction_active_experts_token_input=None, moe_reduction_token_input=None, "
    "expanded_idx_to_permuted_idx=None, expert_scale_factor=None, shared_expert_output=None, "
    "block_quant_group_size=None, weight_bias=0.0, *, moe_finalize_backend='trtllm'",
    "comm.TRTLLMAllReduceFusionWorkspace.destroy": "self",
    "comm.PcieIpcAllReduceWorkspace": "group, max_numel, dtype=..., max_blocks=128, profile=None, tune_batches=None, "
    "tune_cache=None, ce_slow_hops=None",
    "comm.PcieIpcAllReduceWorkspace.tune": "self, hiddens, *, dtype=..., cache=None, tune_group=None, warmup=10, "
    "repeat=50",
    "comm.PcieIpcAllReduceWorkspace.prepare": "self, shapes, *, dtype=...",
    "comm.PcieIpcAllReduceWorkspace.all_reduce": "self, inp, *, out=None, config=None, enable_pdl=False",
    "comm.PcieIpcAllReduceWorkspace.rebind_stream": "self",
    "comm.PcieIpcAllReduceWorkspace.destroy": "self",
    "fused_add_rmsnorm": "input, residual, weight, eps=1e-06, enable_pdl=None",
    "jit.comm.gen_trtllm_comm_module": "",
    "jit.comm.gen_pcie_ipc_comm_module": "",
    "jit.core.JitSpec.build_and_load": "self",
}
# create_allreduce_fusion_workspace's backend annotation (commprof always asks for "trtllm", never "auto").
BACKEND_ANNOTATION = "typing.Literal['trtllm', 'mnnvl', 'mnnvl-cutedsl', 'auto']"
# comm.AllReduceFusionPattern's members commprof passes.
PATTERNS = {"kAllReduce": 0, "kARResidualRMSNorm": 1}
# jit.core.JitSpecNvcc: the field and the properties jit_build.py reads.
JIT_SPEC_FIELDS = ("name",)
JIT_SPEC_PROPERTIES = ("is_compiled", "jit_library_path")
# What each kernel module builds on first use (the generator commprof pre-builds), as its source says it.
FIRST_USE_BUILDS = {
    "comm.trtllm_ar.get_trtllm_comm_module": "gen_trtllm_comm_module().build_and_load()",
    "comm.pcie_ipc_ar.get_pcie_ipc_comm_module": "gen_pcie_ipc_comm_module().build_and_load()",
}


def signature_text(fn) -> str:
    """A callable's parameters in the record's form (annotations dropped, defaults that are not plain values `...`)."""
    parts, star = [], False
    for p in inspect.signature(fn).parameters.values():
        if p.kind is p.KEYWORD_ONLY and not star:
            parts.append("*")
        star = star or p.kind in (p.KEYWORD_ONLY, p.VAR_POSITIONAL)
        prefix = {p.VAR_POSITIONAL: "*", p.VAR_KEYWORD: "**"}.get(p.kind, "")
        default = p.default
        if default is p.empty:
            parts.append(prefix + p.name)
        else:
            plain = default is None or isinstance(default, (bool, int, float, str))
            parts.append(f"{p.name}={default!r}" if plain else f"{p.name}=...")
    return ", ".join(parts)


def _function(name: str, body=None):
    namespace: dict = {}
    exec(f"def recorded({SIGNATURES[name]}): raise NotImplementedError", namespace)  # the record as a signature
    function = namespace["recorded"]
    function.__name__ = function.__qualname__ = name.rsplit(".", 1)[-1]
    return function


class _JitSpec:
    build_and_load = _function("jit.core.JitSpec.build_and_load")


@dataclasses.dataclass
class _JitSpecNvcc(_JitSpec):
    name: str = ""
    is_compiled = property(lambda self: False)
    jit_library_path = property(lambda self: None)


def _source_function(name: str, text: str):
    namespace: dict = {}
    exec(f"def {name.rsplit('.', 1)[-1]}():\n    return {text}\n", namespace)
    return namespace[name.rsplit(".", 1)[-1]]


def fake_flashinfer() -> dict[str, ModuleType]:
    """flashinfer's modules as commprof and the tests use them, every callable declared as the record says."""

    def module(name: str, **attributes) -> ModuleType:
        made = ModuleType(name)
        made.__dict__.update(attributes)
        return made

    gens = {}
    for key in ("gen_trtllm_comm_module", "gen_pcie_ipc_comm_module"):
        gens[key] = _function(f"jit.comm.{key}")
        gens[key].__annotations__ = {"return": _JitSpec}
    workspace = type(
        "PcieIpcAllReduceWorkspace",
        (),
        {
            "__init__": _function_with_self("comm.PcieIpcAllReduceWorkspace"),
            **{
                method: _function(f"comm.PcieIpcAllReduceWorkspace.{method}")
                for method in ("tune", "prepare", "all_reduce", "rebind_stream", "destroy")
            },
        },
    )
    create = _function("comm.create_allreduce_fusion_workspace")
    create.__annotations__ = {"backend": BACKEND_ANNOTATION}
    trtllm_ar = module("flashinfer.comm.trtllm_ar")
    pcie_ipc_ar = module("flashinfer.comm.pcie_ipc_ar")
    for key, text in FIRST_USE_BUILDS.items():
        target = trtllm_ar if ".trtllm_ar." in key else pcie_ipc_ar
        setattr(target, key.rsplit(".", 1)[-1], _source_function(key, text))
    comm = module(
        "flashinfer.comm",
        create_allreduce_fusion_workspace=create,
        allreduce_fusion=_function("comm.allreduce_fusion"),
        AllReduceFusionPattern=type("AllReduceFusionPattern", (), dict(PATTERNS)),
        TRTLLMAllReduceFusionWorkspace=type(
            "TRTLLMAllReduceFusionWorkspace", (), {"destroy": _function("comm.TRTLLMAllReduceFusionWorkspace.destroy")}
        ),
        PcieIpcAllReduceWorkspace=workspace,
        trtllm_ar=trtllm_ar,
        pcie_ipc_ar=pcie_ipc_ar,
    )
    core = module("flashinfer.jit.core", JitSpec=_JitSpec, JitSpecNvcc=_JitSpecNvcc)
    jit_comm = module("flashinfer.jit.comm", **gens)
    jit = module("flashinfer.jit", core=core, comm=jit_comm)
    root = module("flashinfer", comm=comm, jit=jit, fused_add_rmsnorm=_function("fused_add_rmsnorm"))
    return {
        "flashinfer": root,
        "flashinfer.comm": comm,
        "flashinfer.comm.trtllm_ar": trtllm_ar,
        "flashinfer.comm.pcie_ipc_ar": pcie_ipc_ar,
        "flashinfer.jit": jit,
        "flashinfer.jit.core": core,
        "flashinfer.jit.comm": jit_comm,
    }


def _function_with_self(name: str):
    namespace: dict = {}
    exec(f"def __init__(self, {SIGNATURES[name]}): raise NotImplementedError", namespace)
    return namespace["__init__"]


def installed_signatures() -> dict[str, str]:
    """SIGNATURES as the installed FlashInfer declares them."""
    import importlib

    found = {}
    for name in SIGNATURES:
        parts = name.split(".")
        for split in range(len(parts) - 1, -1, -1):
            try:
                target = importlib.import_module(".".join(["flashinfer", *parts[:split]]))
            except ImportError:
                continue
            for attribute in parts[split:]:
                target = getattr(target, attribute)
            break
        found[name] = signature_text(target)
    return found


if __name__ == "__main__":
    print("SIGNATURES = {")
    for key, text in installed_signatures().items():
        print(f"    {key!r}: {text!r},")
    print("}")
