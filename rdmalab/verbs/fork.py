"""``pyverbs.fork``: ``fork_init`` and ``is_fork_initialized``.

libibverbs needs ``ibv_fork_init()`` when the kernel cannot keep registered pages in the parent
after ``fork()``; kernels since 5.13 can (``RDMA_CREATE_UMEM`` copies on fork), and then
``ibv_is_fork_initialized()`` answers ``IBV_FORK_UNNEEDED``.  The soft engine registers Python
buffers, which ``fork()`` copies like any memory, so it is in that case: fork support is never
needed, ``fork_init()`` succeeds and the status is always ``IBV_FORK_UNNEEDED``.
"""

from __future__ import annotations

from rdmalab.verbs.libibverbs_enums import IBV_FORK_UNNEEDED


def fork_init() -> None:
    """``ibv_fork_init``: nothing to do (see the module docstring)."""


def is_fork_initialized() -> int:
    """``ibv_is_fork_initialized``: always ``IBV_FORK_UNNEEDED``."""
    return int(IBV_FORK_UNNEEDED)
