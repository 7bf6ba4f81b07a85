"""What every subcommand module shares: the user-facing error."""

from __future__ import annotations


class Fail(Exception):
    """A user-facing error: printed as ``rdmalab: <message>``, exit status 1."""
