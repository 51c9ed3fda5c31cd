"""The page's figures asked for by name, so that the report's writer may have them drawn elsewhere: by a worker
beside the page (report/worker.py installs it as the drawer), else here when asked."""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Iterator
from typing import Any

from markupsafe import Markup

# (module, function, args, kwargs) -> the SVG, or a stand-in the template shows when it gets there
Drawer = Callable[[str, str, tuple, dict], Any]
_drawer: Drawer | None = None
FIGURES = f"{__package__}.figures"  # the module of (most of) the page's figures: matplotlib, slow to import


def draw(function: str, *args: Any, **kwargs: Any) -> Any:
    """A figure of this package ("figures.sites_svg", "drift_figure.drift_svg") as the page shows it: from the
    drawer if one is installed, else drawn now (matplotlib's SVG writer escapes its text)."""
    module, _, name = function.rpartition(".")
    module = f"{__package__}.{module}"
    if _drawer is not None:
        return _drawer(module, name, args, kwargs)
    return Markup(getattr(importlib.import_module(module), name)(*args, **kwargs))


@contextlib.contextmanager
def drawn_by(drawer: Drawer) -> Iterator[None]:
    """For the block, every figure comes from `drawer`."""
    global _drawer
    _drawer, previous = drawer, _drawer
    try:
        yield
    finally:
        _drawer = previous
