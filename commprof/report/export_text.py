"""The one way the exports write text they did not choose (labels, run ids, hostnames, launch variables, notes).

recommend.env is sourced by a shell and nccl_tuner.conf is read line by line by NCCL's tuner plugin: a label or
hostname holding a newline would end its comment line and start a command, or a tuner rule commprof never chose.
Every comment line of an export is built by `comment`, every value by `export_line`, every CSV cell by
`spreadsheet_cell`.
"""

from __future__ import annotations

import shlex
from typing import Any

from commprof.env_names import export_name_problem
from commprof.terminal import CONTROL_CHARACTERS, one_line

# What makes a spreadsheet run a cell as a formula (OWASP, "CSV injection").
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def comment(text: Any) -> str:
    """A comment line of a shell or config file: "# " and `text` on one line."""
    return "# " + one_line(text)


def export_line(name: str, value: Any) -> str:
    """`export NAME='value'` for a shell, or a comment saying why the pair was left out."""
    text = str(value)
    if refused := export_name_problem(name):
        return comment(f"skipped {name!r}: {refused}")
    if CONTROL_CHARACTERS.search(text):
        return comment(f"skipped {name}: its value holds control characters ({text!r})")
    return f"export {name}={shlex.quote(text)}"


def spreadsheet_cell(value: Any) -> Any:
    """A CSV cell a spreadsheet shows as text: a string starting like a formula gets a leading apostrophe."""
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value
