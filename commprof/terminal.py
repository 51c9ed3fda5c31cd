"""Rich consoles that print text as given: labels, paths and messages come from users and plug-ins.

Rich reads "[...]" as markup and ":name:" as emoji codes; a label such as "x [/]" would raise, and "[red]"
would restyle. Every console commprof prints through comes from here, and styles are given as Text spans.
"""

from __future__ import annotations

import re
import sys

from rich.console import Console
from rich.text import Text

# C0 and C1 control characters (newline, carriage return, escape, NUL, ...), DEL, and Unicode's line and paragraph
# separators: whatever could end a line or drive a terminal.
CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def one_line(text: object) -> str:
    """`text` with every control character replaced by a space: it stays on one line and prints as itself."""
    return CONTROL_CHARACTERS.sub(" ", str(text))


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
