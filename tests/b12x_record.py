"""A record of every b12x call commprof makes, as b12x's source declares it, and a fake b12x that checks each
call commprof's b12x implementations make against that record (so the check runs where b12x is not installed).

Taken from b12x 1.5.1, the PyPI wheel b12x-1.5.1-py3-none-any.whl (upstream local-inference-lab/b12x):
b12x/comm/pcie/{pcie_oneshot,pcie_twoshot_bf16,pcie_dma,_preparation,_oneshot_preparation,_twoshot_preparation,
_dma_preparation,_tuning}.py and b12x/preparation/{session,types}.py. b12x 1.5.0 declares the same; 1.3.0 has
neither b12x.preparation nor PCIeTwoShotBF16 (hence commprof's floor of 1.5). Defaults are placeholders: what a
call is checked against is each parameter's name, order and kind, and which ones have a default.
"""

from __future__ import annotations

import contextlib
import inspect
from types import ModuleType, SimpleNamespace

SOURCE = "b12x 1.5.1 (PyPI wheel)"

# Callable -> its parameters without self / cls. The public names are b12x.comm.pcie's aliases
# (api.py: PCIeOneshotAllReduce as OneshotAllReduce, PCIeDmaAllReduce as DmaAllReduce).
SIGNATURES = {
    "pcie.OneshotAllReduce.from_exchange_group": "*, exchange_group, device, eager_buffer_bytes=0, max_size=0, "
    "rank_data_bytes=0, ext_module=None, stream_affine=True",
    "pcie.OneshotAllReduce.all_reduce": "inp, *, plan, out=None, peer_input_ptrs=None",
    "pcie.OneshotAllReduce.all_reduce_fused_add_rms_norm": "inp, residual, weight, epsilon, *, plan, out=None, "
    "residual_out=None, peer_input_ptrs=None",
    "pcie.OneshotAllReduce.close": "",
    "pcie.PCIeTwoShotBF16.from_exchange_group": "*, exchange_group, device, max_rows, row_elems",
    "pcie.PCIeTwoShotBF16.all_reduce": "inp, out=None, *, plan, threads=0, block_limit=0",
    "pcie.PCIeTwoShotBF16.capture": "*, plan",
    "pcie.PCIeTwoShotBF16.close": "",
    "pcie.DmaAllReduce": "*, exchange_group, device, max_bytes, ext_module=None, fp8=None",
    "pcie.DmaAllReduce.all_reduce": "inp, *, plan, out=None",
    "pcie.DmaAllReduce.close": "",
    "pcie.query_from_runtime": "runtime, *, surface, call",
    "pcie.plan": "query, *, runtime=None, invocation=None, override=None",
    "pcie._oneshot_preparation._OneshotExecutionState.bind_input": "inp",
    "pcie._oneshot_preparation._OneshotExecutionState.run_plain": "inp, out",
    "pcie._oneshot_preparation._OneshotExecutionState.run_fused": "inp, residual, weight, out, residual_out, epsilon",
    "pcie._twoshot_preparation._TwoShotExecutionState.run": "payload, scale, out, *, threads, block_limit",
    "pcie._dma_preparation._DmaExecutionState.prime": "inp, *, out",
    "preparation.PreparationSession": "*, device=None, autotune=True, cache_dir=None, namespace=None, "
    "compile_workers=None, rounds=0, samples=0, cache_only=False, race_batch=0, race_budget=None",
    "preparation.PreparationSession.prepare": "requests, *, coordinator=None, progress=None, autotune=None",
    "preparation.PreparationSession.close": "",
    "preparation.Plan.request": "*, name, prepare_call, benchmark_call=None, dependencies=(), collective=None, "
    "retain_benchmark_call=False",
    "preparation.CollectiveRequirement": "key, ranks",
    # a kw_only dataclass
    "preparation.PreparedCall": "*, run, output=None, produce=None, reset=None, restore=None, owners=(), "
    "close=None, capture_safe=True, benchmark_producers=()",
}
# The fields of preparation.PreparationProgress commprof's coordinator reads.
PROGRESS_FIELDS = ("ready_collectives", "ready_tuning", "ready_cache")
# Each execution surface (pcie._tuning.SURFACES) and the world sizes it takes.
SURFACE_WORLD_SIZES = {
    "OneshotAllReduce.all_reduce": (2, 4, 6, 8, 10),
    "OneshotAllReduce.all_reduce_fused_add_rms_norm": (2, 4, 6, 8, 10),
    "DmaAllReduce.all_reduce": (2, 4, 6, 8, 10),
    "PCIeTwoShotBF16.all_reduce": (4,),
}
# The prepared state each surface's priming call receives (pcie._preparation._provider).
SURFACE_STATES = {
    "OneshotAllReduce.all_reduce": "pcie._oneshot_preparation._OneshotExecutionState",
    "OneshotAllReduce.all_reduce_fused_add_rms_norm": "pcie._oneshot_preparation._OneshotExecutionState",
    "DmaAllReduce.all_reduce": "pcie._dma_preparation._DmaExecutionState",
    "PCIeTwoShotBF16.all_reduce": "pcie._twoshot_preparation._TwoShotExecutionState",
}


def recorded_signature(name: str) -> inspect.Signature:
    namespace: dict = {}
    exec(f"def recorded({SIGNATURES[name]}): pass", namespace)  # the record's text as a real signature
    return inspect.signature(namespace["recorded"])


class FakeB12x:
    """b12x.comm.pcie and b12x.preparation as commprof uses them: every call is bound against the record
    (an AssertionError names the call that does not fit) and kept in `calls` as (name, args, kwargs)."""

    def __init__(self):
        self.calls: list[tuple[str, tuple, dict]] = []
        self.pcie = self._module(
            "b12x.comm.pcie",
            OneshotAllReduce=SimpleNamespace(
                from_exchange_group=self._maker("pcie.OneshotAllReduce.from_exchange_group", "pcie.OneshotAllReduce")
            ),
            PCIeTwoShotBF16=SimpleNamespace(
                from_exchange_group=self._maker("pcie.PCIeTwoShotBF16.from_exchange_group", "pcie.PCIeTwoShotBF16")
            ),
            DmaAllReduce=self._maker("pcie.DmaAllReduce", "pcie.DmaAllReduce"),
            query_from_runtime=self._query,
            plan=self._plan,
        )
        self.preparation = self._module(
            "b12x.preparation",
            PreparationSession=self._maker("preparation.PreparationSession", "preparation.PreparationSession"),
            CollectiveRequirement=self._fields("preparation.CollectiveRequirement"),
            PreparedCall=self._fields("preparation.PreparedCall"),
        )
        comm = self._module("b12x.comm", pcie=self.pcie)
        self.modules = {
            "b12x": self._module("b12x", comm=comm, preparation=self.preparation),
            "b12x.comm": comm,
            "b12x.comm.pcie": self.pcie,
            "b12x.preparation": self.preparation,
        }

    @staticmethod
    def _module(name: str, **attributes) -> ModuleType:
        module = ModuleType(name)
        module.__dict__.update(attributes)
        return module

    def call(self, name: str, args: tuple, kwargs: dict):
        try:
            bound = recorded_signature(name).bind(*args, **kwargs)
        except TypeError as error:
            raise AssertionError(f"commprof calls {name} in a way {SOURCE} does not declare: {error}") from error
        self.calls.append((name, args, kwargs))
        return bound.arguments

    def names(self) -> list[str]:
        return [name for name, _, _ in self.calls]

    def _maker(self, name: str, kind: str):
        def make(*args, **kwargs):
            self.call(name, args, kwargs)
            return FakeSession(self) if kind == "preparation.PreparationSession" else FakeObject(self, kind)

        return make

    def _fields(self, name: str):
        return lambda *args, **kwargs: SimpleNamespace(**self.call(name, args, kwargs))

    def _query(self, *args, **kwargs):
        arguments = self.call("pcie.query_from_runtime", args, kwargs)
        assert arguments["surface"] in SURFACE_WORLD_SIZES, f"{arguments['surface']!r} is not a surface of {SOURCE}"
        return SimpleNamespace(surface=arguments["surface"])

    def _plan(self, *args, **kwargs):
        query = self.call("pcie.plan", args, kwargs)["query"]
        return FakePlan(self, query.surface)


class FakeObject:
    """An instance whose recorded methods (`<kind>.<method>` in the record) record and return the output."""

    def __init__(self, fake: FakeB12x, kind: str):
        self._fake, self._kind = fake, kind

    def __getattr__(self, method: str):
        name = f"{self._kind}.{method}"
        if name not in SIGNATURES:
            raise AttributeError(f"{SOURCE} records no {name} (a call commprof makes that the record lacks)")

        def call(*args, **kwargs):
            arguments = self._fake.call(name, args, kwargs)
            if method == "capture":
                return contextlib.nullcontext()
            return arguments.get("out")

        return call


class FakePlan(FakeObject):
    def __init__(self, fake: FakeB12x, surface: str):
        super().__init__(fake, "preparation.Plan")
        self.surface = surface

    def request(self, *args, **kwargs):
        arguments = self._fake.call("preparation.Plan.request", args, kwargs)
        return SimpleNamespace(plan=self, **arguments)


class FakeSession(FakeObject):
    """prepare(): per request, a collective round through the coordinator, then its priming call's launch."""

    def __init__(self, fake: FakeB12x):
        super().__init__(fake, "preparation.PreparationSession")

    def prepare(self, *args, **kwargs):
        arguments = self._fake.call("preparation.PreparationSession.prepare", args, kwargs)
        coordinator = arguments["coordinator"]
        idle = dict.fromkeys(PROGRESS_FIELDS, ())
        for request in arguments["requests"]:
            ready = SimpleNamespace(**{**idle, "ready_cache": None, "ready_collectives": (request.collective,)})
            assert coordinator(ready) == request.collective.key
            state = FakeObject(self._fake, SURFACE_STATES[request.plan.surface])
            request.prepare_call(state).run()
        assert coordinator(SimpleNamespace(**{**idle, "ready_cache": None})) is None
