"""Which version of a Python distribution is installed: the one home of that question (package metadata, no
import, so asking never loads a CUDA library)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version


def installed_version(*distributions: str) -> str | None:
    """The installed version of the first of `distributions` found ("flashinfer-python", "flashinfer"), or None."""
    for name in distributions:
        try:
            return version(name)
        except PackageNotFoundError:
            continue
    return None
