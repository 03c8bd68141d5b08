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
