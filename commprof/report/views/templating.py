"""The page's jinja templates: one environment per process, whose templates may have been compiled by another
process (the report's figure worker compiles them while the records are read) and handed over as code."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator

import jinja2

# -> every template's compiled code, by jinja's cache key (compiled_templates' result, from another process)
Compiler = Callable[[], dict[str, bytes]]
_compiler: Compiler | None = None


class _CompiledCode(jinja2.BytecodeCache):
    """Compiled templates held in memory, by jinja's key; jinja compares each with its template's source (a
    checksum) before it uses it, and compiles again where they differ."""

    def __init__(self) -> None:
        self.code: dict[str, bytes] = {}

    def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        if (code := self.code.get(bucket.key)) is not None:
            bucket.bytecode_from_string(code)

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        self.code[bucket.key] = bucket.bytecode_to_string()


@functools.cache
def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader("commprof.report", "templates"),
        autoescape=jinja2.select_autoescape(["html"]),
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,  # each section's file ends with its newline, as it did inside one page
        bytecode_cache=_CompiledCode(),
    )


def templates() -> jinja2.Environment:
    """The page's templates, each compiled once per process, or taken from the installed compiler's code."""
    global _compiler
    env = _environment()
    if _compiler is not None:
        compiler, _compiler = _compiler, None
        env.bytecode_cache.code.update(compiler())
    return env


def compiled_templates() -> dict[str, bytes]:
    """Every template compiled, as code another process's `templates()` can take (compiled_by)."""
    env = _environment()
    for name in env.list_templates():
        env.get_template(name)
    return dict(env.bytecode_cache.code)


@contextlib.contextmanager
def compiled_by(compiler: Compiler) -> Iterator[None]:
    """For the block, the templates' code comes from `compiler` (asked once, when the page is first rendered)."""
    global _compiler
    _compiler, previous = compiler, _compiler
    try:
        yield
    finally:
        _compiler = previous
