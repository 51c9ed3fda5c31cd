"""Rich consoles that print text as given: labels, paths and messages come from users and plug-ins.

Rich reads "[...]" as markup and ":name:" as emoji codes; a label such as "x [/]" would raise, and "[red]"
would restyle. Every console commprof prints through comes from here, and styles are given as Text spans.
"""

from __future__ import annotations

import sys

from rich.console import Console
from rich.text import Text


def plain_console(stderr: bool = False, pipe_width: int = 160) -> Console:
    """A console that never interprets the text it prints (no markup, no emoji codes, no highlighting).

    On a terminal it takes the terminal's width; into a pipe or file, `pipe_width` columns.
    """
    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() else pipe_width
    return Console(stderr=stderr, width=width, markup=False, emoji=False, highlight=False)


def styled(*parts: str | tuple[str, str]) -> Text:
    """Text from plain strings and (text, style) pairs; the strings are never parsed."""
    return Text.assemble(*parts)
