"""The page's jinja templates: one environment per process, its templates compiled once per source and kept in
jinja's bytecode cache on disk, so that a report compiles none of them unless one changed since the last."""

from __future__ import annotations

import functools

import jinja2


class _CompiledCode(jinja2.FileSystemBytecodeCache):
    """jinja's cache of compiled templates in a folder of this user's only: jinja compares each entry with its
    template's source (a checksum) before it uses it, and compiles again where they differ. A folder that cannot be
    read or written is no error: the templates are then compiled in each process that renders them."""

    def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        try:
            super().load_bytecode(bucket)
        except OSError:
            pass

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        try:
            super().dump_bytecode(bucket)
        except OSError:
            pass


def compiled_code(directory: str | None = None) -> jinja2.BytecodeCache | None:
    """The cache of compiled templates in `directory` (None: jinja's own folder for this user, in the temporary
    folder); None where no such folder can be made safely."""
    try:
        return _CompiledCode(directory)
    except (OSError, RuntimeError):  # RuntimeError: jinja found no folder it could trust
        return None


@functools.cache
def templates() -> jinja2.Environment:
    """The page's templates, each compiled once per source (compiled_code) and loaded once per process."""
    return jinja2.Environment(
        loader=jinja2.PackageLoader("commprof.report", "templates"),
        autoescape=jinja2.select_autoescape(["html"]),
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,  # each section's file ends with its newline, as it did inside one page
        bytecode_cache=compiled_code(),
    )
