"""Packets answered while the program is busy elsewhere, as a kernel device answers them.

Kernel rxe runs its protocol in the kernel, whatever the program is doing: a receive arrives, rxe
ACKs it, even while the program sleeps or waits on a lock.  The engine runs when the program calls
into it (polling a CQ, waiting for an rdma_cm event).  A program that waits for something else
before it polls, as rdma-core's rdma-cm tests do (one process waits at a barrier for the other,
which waits for the ACK of its SEND), would then never be answered.

So a linked device's carrier asks the kernel for ``SIGIO`` on its socket (``O_ASYNC``,
``F_SETOWN``): when packets arrive, the handler steps the carrier (receive, answer, send the
ACKs) *if the program was interrupted outside rdmalab*; if it was inside rdmalab's code the
program is driving the engine itself and the handler does nothing (that code is not re-entered).
Python runs signal handlers in the main thread only, between bytecodes, so this holds for
single-threaded programs; ``RDMALAB_BACKGROUND=0`` turns it off.
"""

from __future__ import annotations

import atexit
import fcntl
import os
import signal
import threading
from types import FrameType
from typing import Any

_driven: list[Any] = []
_installed = False
STEPS_PER_SIGNAL = 64


def _inside_rdmalab(frame: FrameType | None) -> bool:
    while frame is not None:
        if str(frame.f_globals.get("__name__", "")).startswith("rdmalab."):
            return True
        frame = frame.f_back
    return False


def _on_sigio(signum: int, frame: FrameType | None) -> None:
    if _inside_rdmalab(frame):
        return
    for fab in list(_driven):
        for _ in range(STEPS_PER_SIGNAL):
            if fab.closed or not fab.step(0.0):
                break


def arm(fab: Any) -> bool:
    """Deliver SIGIO to this process when ``fab``'s socket has packets (again after a fork: new socket, new PID)."""
    fd = fab.fileno()
    fcntl.fcntl(fd, fcntl.F_SETOWN, os.getpid())
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_ASYNC)
    return True


def _disarm_all() -> None:
    """At exit: no more SIGIO.  The interpreter puts the default handlers back while it shuts down, and
    SIGIO's default action ends the process (status 128 + 29): a late packet must not turn a clean exit
    into a kill."""
    try:
        signal.signal(signal.SIGIO, signal.SIG_IGN)
    except (ValueError, OSError):
        pass
    for fab in _driven:
        try:
            fd = fab.fileno()
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_ASYNC)
        except (OSError, ValueError):
            pass


def drive(fab: Any) -> bool:
    """Answer ``fab``'s packets from a SIGIO handler while the program is elsewhere; False if not possible here."""
    global _installed
    if os.environ.get("RDMALAB_BACKGROUND", "1") == "0" or threading.current_thread() is not threading.main_thread():
        return False
    if not _installed:
        previous = signal.getsignal(signal.SIGIO)
        if previous not in (signal.SIG_DFL, signal.SIG_IGN, None):
            return False  # the program handles SIGIO itself: leave it alone
        signal.signal(signal.SIGIO, _on_sigio)
        atexit.register(_disarm_all)
        _installed = True
    _driven.append(fab)
    return arm(fab)
