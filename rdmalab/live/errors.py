"""What rdmalab.live's modules share: the error type and the cache directory."""

from __future__ import annotations

import os
from pathlib import Path


class VMError(RuntimeError):
    """The VM cannot be booted or a job could not be run; the message says what and how to fix it."""


def cache_dir() -> Path:
    """``$XDG_CACHE_HOME/rdmalab`` (``~/.cache/rdmalab``), created on first use."""
    d = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rdmalab"
    d.mkdir(parents=True, exist_ok=True)
    return d
