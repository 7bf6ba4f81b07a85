"""What every subcommand module shares: the user-facing error, and a server that listens first."""

from __future__ import annotations

import socket
from collections.abc import Callable


class Fail(Exception):
    """A user-facing error: printed as ``rdmalab: <message>``, exit status 1."""


def listen_then_run(listen: bool, port: int, what: str, run: Callable[[socket.socket | None], int]) -> int:
    """A server that opens its TCP listener first and loads the engine after (issue 21: start-up in the lab
    VM): a client that connects meanwhile waits in the kernel's accept queue.  The permission check comes
    first, as the stock programs fail at once without it.  ``run(listener)`` closes the listener once it
    accepts; a failure before that leaves it here to close.  ``listen=False`` (a client, rdma_cm): ``run(None)``.
    """
    # imported here: `rdmalab --help` and the other commands do not load the carrier's set-up
    from rdmalab.fabric.udp_setup import CarrierError, check_permission
    from rdmalab.live.listener import OOBError, open_listener

    listener = None
    if listen:
        try:
            check_permission()
            listener = open_listener(port)
        except (OOBError, CarrierError) as exc:
            raise Fail(f"{what}: {exc}") from None
    try:
        return run(listener)
    finally:
        if listener is not None:
            listener.close()
