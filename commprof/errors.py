"""Errors that reach the user as one clear line, never a traceback, and the exit status each one means."""

from __future__ import annotations

import errno
import signal
import time
from collections.abc import Sequence
from pathlib import Path

import click

from commprof.terminal import printable

# Exit statuses: a run that cannot go on, bad input (a flag, a file, a value) and an interrupt; click's own
# errors keep theirs.
EXIT_STOPPED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
# How long a rank that prints nothing waits before it ends in a refusal every rank makes: rank 0, which prints the
# one line, ends first, and torchrun ends this one then. On a loaded machine rank 0 can reach its refusal seconds
# after the others (5 s was once too short: torchrun stopped rank 0 mid-line); the wait costs nothing otherwise.
QUIET_RANK_DELAY_S = 15.0
# The most of one error line a terminal gets: a value or key from a file (a 1 MB string, a 16 MB sweep file's key)
# is cut in the middle, with how much was left out.
LINE_CHARS = 2000


class UsageError(Exception):
    """Bad input from the user: a flag, a file or a value commprof cannot use."""


class RunStopped(Exception):
    """A run that cannot go on (another rank's controller gone, this rank's fork server dead): one line, exit 1.

    Finished points are on disk, in `run_dir`; the command adds how to continue.
    """

    def __init__(self, message: str, run_dir: Path | None = None):
        super().__init__(message)
        self.run_dir = run_dir


def run_command(command: click.Command, argv: Sequence[str] | None, prog_name: str, quiet: bool = False) -> int:
    """Run a click command and return its exit status; every error becomes one line on stderr.

    UsageError, click's usage errors and a path name too long for the file system exit 2, an interrupt 130. `quiet`: print nothing (ranks other than 0)
    except RunStopped, which every rank says (exit 1): the rank that would print may be the one that is gone.
    """
    try:
        command.main(args=argv, prog_name=prog_name, standalone_mode=False)
    except UsageError as exc:
        message, status = f"error: {exc}", EXIT_USAGE
    except RunStopped as exc:
        click.echo(printable(f"commprof: error: {exc}"), err=True)
        return EXIT_STOPPED
    except click.ClickException as exc:
        message, status = f"error: {exc.format_message()}", exc.exit_code
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.exceptions.Abort:
        message, status = "aborted", EXIT_INTERRUPTED
    except OSError as exc:  # a path the user named that no file system holds; pathlib's is_dir() and exists() raise
        if exc.errno != errno.ENAMETOOLONG:
            raise
        message, status = f"error: {exc.filename}: a path name longer than the file system allows", EXIT_USAGE
    else:
        return 0
    if not quiet:
        click.echo(printable("\n".join(_cut(line) for line in f"commprof: {message}".split("\n"))), err=True)
    elif status == EXIT_USAGE:  # every rank refuses alike; torchrun ends the others when one fails: rank 0 says why
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # torchrun's stop ends it silently: rank 0 has said why
        time.sleep(QUIET_RANK_DELAY_S)
    return status


def _cut(line: str) -> str:
    """`line` as at most LINE_CHARS characters: its start (the file and key) and its end (the problem and what is
    allowed), with how many characters between them were left out."""
    if len(line) <= LINE_CHARS:
        return line
    head, tail = LINE_CHARS * 3 // 4, LINE_CHARS // 4
    return f"{line[:head]} ... ({len(line) - head - tail} characters left out) ... {line[-tail:]}"
