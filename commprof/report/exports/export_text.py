"""The one way the exports write text they did not choose (labels, run ids, hostnames, launch variables, notes).

recommend.env is sourced by a shell and nccl_tuner.conf is read line by line by NCCL's tuner plugin: a label or
hostname holding a newline would end its comment line and start a command, or a tuner rule commprof never chose.
Every comment line of an export is built by `comment`, every value by `export_line`, every CSV cell by
`spreadsheet_cell`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from commprof.env_names import export_name_problem, shell_value
from commprof.terminal import CONTROL_CHARACTERS, one_line

# What makes a spreadsheet run a cell as a formula (OWASP, "CSV injection"), and the full-width forms some read
# as the same.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "\uff1d", "\uff0b", "\uff0d", "\uff20")


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
    return f"export {name}={shell_value(text)}"


def spreadsheet_cell(value: Any) -> Any:
    """A CSV text cell a spreadsheet shows as text, on its row: control characters (a bare CR would split the row
    for some readers) become spaces, and a string starting like a formula, after any spaces, gets a leading
    apostrophe. Writers quote every text cell too (csv.QUOTE_NONNUMERIC)."""
    if not isinstance(value, str):
        return value
    value = one_line(value)
    if value.startswith(_FORMULA_START) or value.lstrip().startswith(_FORMULA_START):
        return "'" + value
    return value


def spreadsheet_cells(values: np.ndarray) -> list[Any]:
    """`spreadsheet_cell` of every cell of a column (an object array), each distinct text once (a results table
    repeats its labels, statuses and ids on every row); a cell that is not text as it is."""
    try:
        codes, distinct = pd.factorize(values, use_na_sentinel=True)
    except TypeError:  # an unhashable cell (a dict a simulation records)
        distinct = None
    if distinct is None or not all(isinstance(value, str) for value in distinct):  # 1 and True would be one value
        return [spreadsheet_cell(value) for value in values]
    cells = np.array([*map(spreadsheet_cell, distinct), None], dtype=object)  # a missing cell: None (code -1)
    return cells[codes].tolist()


# The folder a sourced file was sourced from: bash's BASH_SOURCE, zsh's %x prompt escape (the file being sourced); a
# shell with neither is refused by shell_guard before a line runs, so no other folder's files are ever applied.
OWN_FOLDER = '"$(dirname "${BASH_SOURCE[0]:-${(%):-%x}}")"'


def shell_guard(name: str) -> str:
    """The line that refuses any shell but bash and zsh, where a sourced file could not find the files beside it."""
    return (
        f'[ -n "${{BASH_VERSION:-}}${{ZSH_VERSION:-}}" ] || {{ echo "{name}: source it in bash or zsh (it finds '
        'the files beside it by its own path)" >&2; return 2 2>/dev/null || exit 2; }'
    )
