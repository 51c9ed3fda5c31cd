"""What commprof prints to a terminal: text as given, never as instructions. Labels, paths, values and messages
come from users, plug-ins, logs and traces.

Rich reads "[...]" as markup and ":name:" as emoji codes; a label such as "x [/]" would raise, and "[red]"
would restyle. A terminal reads escape sequences: OSC sets the title or a clipboard, CSI moves the cursor and
erases, a bare CR overwrites the line. Every console commprof prints through comes from here and passes every
string through `printable`; every other printer (click.echo of a listing, a trace, a log's explanation) does so
itself. Styles are given as Text spans.
"""

from __future__ import annotations

import re
import sys
from functools import cache
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:  # rich is imported where a console is made: the sanitisers serve a python without it too
    from rich.console import Console
    from rich.text import Text

# C0 and C1 control characters (newline, carriage return, escape, NUL, ...), DEL, and Unicode's line and paragraph
# separators: whatever could end a line or drive a terminal.
CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_CONTROL_BUT_NEWLINE = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029]")
# Whole escape sequences (ECMA-48), removed with their arguments: CSI (ESC [ or 0x9b ... final byte), the string
# commands OSC / DCS / SOS / PM / APC up to their terminator (BEL, ESC \ or ST) or the end, and two-byte escapes.
ESCAPE_SEQUENCES = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]?"
    r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"
    r"|\x1b[ -/]*[0-~]?"
)


def printable(text: object) -> str:
    """`text` as a terminal shows it literally: escape sequences removed, every control character but the
    newline replaced by a space."""
    return _CONTROL_BUT_NEWLINE.sub(" ", ESCAPE_SEQUENCES.sub("", str(text)))


def one_line(text: object) -> str:
    """`printable(text)` with newlines too replaced by a space: it stays on one line and prints as itself."""
    return CONTROL_CHARACTERS.sub(" ", ESCAPE_SEQUENCES.sub("", str(text)))


def echo(text: object = "", err: bool = False) -> None:
    """click.echo of `printable(text)`: how a command prints a listing, a table or an explanation."""
    click.echo(printable(text), err=err)


@cache
def _plain_console_class() -> type[Console]:
    from rich.console import Console

    class PlainConsole(Console):
        """A Rich console that renders every string it is given (printed, or a table's cell) through `printable`."""

        def render_str(self, text: str, **kwargs) -> Text:
            return super().render_str(printable(text), **kwargs)

    return PlainConsole


def plain_console(stderr: bool = False, pipe_width: int = 160) -> Console:
    """A console that never interprets the text it prints (no markup, no emoji codes, no highlighting, no
    escape sequences).

    On a terminal it takes the terminal's width; into a pipe or file, `pipe_width` columns.
    """
    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() else pipe_width
    return _plain_console_class()(stderr=stderr, width=width, markup=False, emoji=False, highlight=False)


def styled(*parts: str | tuple[str, str]) -> Text:
    """Text from plain strings and (text, style) pairs; the strings are never parsed, and pass through
    `printable`."""
    from rich.text import Text

    return Text.assemble(
        *(printable(part) if isinstance(part, str) else (printable(part[0]), part[1]) for part in parts)
    )
