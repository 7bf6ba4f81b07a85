"""The two TCP listeners of the out-of-band exchange: the library's (``rdmalab.tools.oob.open_listener``,
``socket.create_server``) and the live servers' early one (``rdmalab.cli.listen_socket``, the C module
``_socket``, issue 21).  Both listen on IPv4 and IPv6 at once where the host has IPv6 (the stock
programs' ``AI_PASSIVE``/``AF_UNSPEC``), and a port in use is a sentence, not a traceback."""

from __future__ import annotations

import socket

import pytest

from rdmalab.cli import listen_socket
from rdmalab.tools.oob import OOBError, open_listener


def _as_socket(raw: object) -> socket.socket:
    return socket.socket(fileno=raw.detach())  # type: ignore[attr-defined]


@pytest.mark.parametrize("make", [open_listener, lambda port: _as_socket(listen_socket(port))],
                         ids=["oob.open_listener", "cli.listen_socket"])
def test_a_listener_takes_ipv4_and_ipv6_clients(make: object) -> None:
    srv = make(0)  # type: ignore[operator]
    try:
        port = srv.getsockname()[1]
        hosts = ["127.0.0.1"] + (["::1"] if socket.has_dualstack_ipv6() else [])
        for host in hosts:
            with socket.create_connection((host, port), timeout=5):
                conn, _ = srv.accept()
                conn.close()
    finally:
        srv.close()


def test_a_port_in_use_is_a_sentence() -> None:
    first = open_listener(0)
    try:
        port = first.getsockname()[1]
        with pytest.raises(OOBError, match=f"Couldn't listen to port {port}: "):
            open_listener(port)
        with pytest.raises(OSError):
            listen_socket(port)  # (rdmalab.cli.listen_then_run makes this one the sentence: tests/test_cli.py)
    finally:
        first.close()


def test_ipv4_only_when_asked() -> None:
    srv = open_listener(0, family=socket.AF_INET)
    try:
        assert srv.family == socket.AF_INET
    finally:
        srv.close()
