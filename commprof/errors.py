"""Errors that reach the user as one clear line, never a traceback, and the exit status each one means."""

from __future__ import annotations

from collections.abc import Sequence

import click

# Exit statuses: bad input (a flag, a file, a value) and an interrupt; click's own errors keep theirs.
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class UsageError(Exception):
    """Bad input from the user: a flag, a file or a value commprof cannot use."""


def run_command(command: click.Command, argv: Sequence[str] | None, prog_name: str, quiet: bool = False) -> int:
    """Run a click command and return its exit status; every error becomes one line on stderr.

    UsageError and click's usage errors exit 2, an interrupt 130. `quiet`: print nothing (ranks other than 0).
    """
    try:
        command.main(args=argv, prog_name=prog_name, standalone_mode=False)
    except UsageError as exc:
        message, status = f"error: {exc}", EXIT_USAGE
    except click.ClickException as exc:
        message, status = f"error: {exc.format_message()}", exc.exit_code
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.exceptions.Abort:
        message, status = "aborted", EXIT_INTERRUPTED
    else:
        return 0
    if not quiet:
        click.echo(f"commprof: {message}", err=True)
    return status
