"""The TCP listener of the stock programs' out-of-band exchange, on its own so that a server opens it
before anything else is loaded (issue 21: ``rdmalab pingpong``/``perftest`` as servers in the TCG lab
VM, where every module imported costs).  Only :mod:`socket`; the exchange itself is
:mod:`rdmalab.live.oob`, which re-exports both names.
"""

from __future__ import annotations

import socket


class OOBError(Exception):
    """The out-of-band exchange failed (connection refused, peer gone, a record that does not parse)."""


def open_listener(port: int, *, family: int = socket.AF_INET6) -> socket.socket:
    """A TCP socket listening on ``port`` (all addresses, v4 and v6 like ``AI_PASSIVE``/``AF_UNSPEC``),
    for :func:`rdmalab.live.oob.listen` to accept on.  A server opens it before it loads the engine: a
    client may connect while the engine loads (the kernel queues the connection) and waits for the
    exchange."""
    try:
        srv = socket.socket(family, socket.SOCK_STREAM)
    except OSError:
        family = socket.AF_INET
        srv = socket.socket(family, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if family == socket.AF_INET6:
        srv.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    try:
        srv.bind(("::" if family == socket.AF_INET6 else "0.0.0.0", port))
        srv.listen(1)
    except OSError as exc:
        srv.close()
        raise OOBError(f"Couldn't listen to port {port}: {exc.strerror or exc}") from None
    return srv
