"""Errors that reach the user: each says what went wrong and what to do next."""

from __future__ import annotations


class LabctlError(Exception):
    """A failure with a message for the user, a hint, and the process exit code."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class UsageError(LabctlError):
    """Bad input from the user (topology file, arguments): exit code 2, nothing created."""

    exit_code = 2


def short_repr(value: object, limit: int = 60) -> str:
    """repr() of a value for a message, cut to about `limit` characters with an ellipsis:
    a hostile input (a 20 MB name) is never echoed whole."""
    if isinstance(value, str | bytes):  # cut by characters: escapes make repr() longer
        return repr(value[:limit]) + "…" if len(value) > limit else repr(value)
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "…"
