"""The TCP listener of the stock programs' out-of-band exchange, on its own so that a server opens it
before anything else is loaded (issue 21: ``rdmalab pingpong``/``perftest`` as servers in the TCG lab
VM, where every module imported costs).  It needs only the C module ``_socket``: ``socket`` itself
brings ``enum``, ``selectors``, ``functools``, ``collections`` ... (about a second of the lab VM's
start of a Python listener), which a server loads after its listen (:func:`adopt`).  The exchange
itself is :mod:`rdmalab.live.oob`, which re-exports :class:`OOBError` and :func:`open_listener`.
"""

from __future__ import annotations

import _socket

TYPE_CHECKING = False  # (typing is not imported at run time: start-up of the live tools)
if TYPE_CHECKING:
    import socket


class OOBError(Exception):
    """The out-of-band exchange failed (connection refused, peer gone, a record that does not parse)."""


def listen_socket(port: int, *, family: int = _socket.AF_INET6) -> _socket.socket:
    """A TCP socket listening on ``port`` (all addresses, v4 and v6 like ``AI_PASSIVE``/``AF_UNSPEC``), as
    the C module's socket object: a server opens it before it loads the engine (a client may connect
    meanwhile: the kernel queues the connection) and then makes it a :class:`socket.socket` (:func:`adopt`)
    for :func:`rdmalab.live.oob.listen` to accept on."""
    try:
        srv = _socket.socket(family, _socket.SOCK_STREAM)
    except OSError:
        family = _socket.AF_INET
        srv = _socket.socket(family, _socket.SOCK_STREAM)
    srv.setsockopt(_socket.SOL_SOCKET, _socket.SO_REUSEADDR, 1)
    if family == _socket.AF_INET6:
        srv.setsockopt(_socket.IPPROTO_IPV6, _socket.IPV6_V6ONLY, 0)
    try:
        srv.bind(("::" if family == _socket.AF_INET6 else "0.0.0.0", port))
        srv.listen(1)
    except OSError as exc:
        srv.close()
        raise OOBError(f"Couldn't listen to port {port}: {exc.strerror or exc}") from None
    return srv


def adopt(raw: _socket.socket) -> socket.socket:
    """``raw`` (of :func:`listen_socket`) as a :class:`socket.socket`, which owns its descriptor from now on."""
    import socket

    return socket.socket(fileno=raw.detach())


def open_listener(port: int, *, family: int = _socket.AF_INET6) -> socket.socket:
    """A TCP socket listening on ``port`` (:func:`listen_socket`), as a :class:`socket.socket`."""
    return adopt(listen_socket(port, family=family))
