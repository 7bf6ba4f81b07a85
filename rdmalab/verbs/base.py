"""``pyverbs.base``: ``PyverbsRDMAErrno`` and ``inc_rkey``."""

from __future__ import annotations

import ctypes

from rdmalab.verbs.pyverbs_error import PyverbsRDMAError


def PyverbsRDMAErrno(msg: str) -> PyverbsRDMAError:  # noqa: N802 - pyverbs' name
    """A PyverbsRDMAError carrying the current C ``errno`` (as pyverbs builds it after a failed verb).

    The soft engine sets no C errno, so this is 0 unless some C call in the process set it.
    """
    return PyverbsRDMAError(msg, ctypes.get_errno())


def inc_rkey(rkey: int) -> int:
    """``ibv_inc_rkey``: the next key of the same index (the low 8 "key" bits + 1, wrapping)."""
    return (rkey & 0xFFFFFF00) | ((rkey + 1) & 0xFF)
