"""Errors that reach the user as one clear line, never a traceback."""


class UsageError(Exception):
    """Bad input from the user: a flag, a file or a value commprof cannot use."""
