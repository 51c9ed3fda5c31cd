"""Implementations that compile kernels on first use, for the sweep's build-before-the-first-point tests."""

import os
import time
from pathlib import Path

import torch.distributed as dist

from commprof.impls.base import AllReduceImpl

# What FlashInfer raises when nvcc fails (jit/cpp_ext.py run_ninja): "Ninja build failed. Ninja output:" and
# ninja's output, nvcc's "file(line): error: ..." among it.
NVCC_FAILURE = (
    "Ninja build failed. Ninja output:\n"
    "[1/2] /usr/local/cuda/bin/nvcc --generate-dependencies-with-compile -c /src/fake_comm.cu -o fake_comm.cuda.o\n"
    "FAILED: fake_comm.cuda.o\n"
    '/src/fake_comm.cu(42): error: identifier "__nv_fp8x4_e4m3" is undefined\n'
    '1 error detected in the compilation of "/src/fake_comm.cu".\n'
    "ninja: build stopped: subcommand failed."
)


class FakeSpec:
    """Quacks like flashinfer.jit.core.JitSpec: name, is_compiled, jit_library_path, build_and_load()."""

    def __init__(self, name: str, error: str | None = None, compiled: bool = False):
        self.name, self.error, self.is_compiled = name, error, compiled
        self.jit_library_path = Path("/cache/cached_ops") / name / f"{name}.so"

    def build_and_load(self):
        if self.error:
            raise RuntimeError(self.error)
        return object()


class DyingSpec(FakeSpec):
    """A build that takes the builder process down with it (exit 3)."""

    def build_and_load(self):
        os._exit(3)


class EndlessSpec(FakeSpec):
    """A build that never ends: the builder's time limit must end it."""

    def build_and_load(self):
        while True:
            time.sleep(1)


def dying_comm() -> FakeSpec:
    return DyingSpec("dying_comm")


def endless_comm() -> FakeSpec:
    return EndlessSpec("endless_comm")


def broken_comm() -> FakeSpec:
    return FakeSpec("fake_comm", NVCC_FAILURE)


def fine_comm() -> FakeSpec:
    return FakeSpec("fine_comm")


class NeedsBrokenBuild(AllReduceImpl):
    """Builds a module that fails to compile: its points must be unsupported, with nvcc's error."""

    name = "needs-broken-build"

    @classmethod
    def jit_builds(cls, backend, options):
        return ("tests.plugins.builds:broken_comm",)

    def all_reduce(self, x):
        dist.all_reduce(x, group=self.group)
        return x


class NeedsFineBuild(NeedsBrokenBuild):
    """Builds a module that compiles: its points run."""

    name = "needs-fine-build"

    @classmethod
    def jit_builds(cls, backend, options):
        return ("tests.plugins.builds:fine_comm",)


class NeedsDyingBuild(NeedsBrokenBuild):
    name = "needs-dying-build"

    @classmethod
    def jit_builds(cls, backend, options):
        return ("tests.plugins.builds:dying_comm",)


class NeedsEndlessBuild(NeedsBrokenBuild):
    name = "needs-endless-build"

    @classmethod
    def jit_builds(cls, backend, options):
        return ("tests.plugins.builds:endless_comm",)
