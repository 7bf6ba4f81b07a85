"""sendmmsg/recvmmsg through :class:`rdmalab.fabric.mmsg.Ring`, over real UDP sockets on 127.0.0.1."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator

import numpy as np
import pytest

from rdmalab.fabric import mmsg

pytestmark = pytest.mark.skipif(not mmsg.available(), reason="this C library has no sendmmsg/recvmmsg")


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    a = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    b = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        a.bind(("127.0.0.1", 0))
        b.bind(("127.0.0.1", 0))
    except OSError as exc:
        pytest.skip(f"no loopback here: {exc}")
    b.setblocking(False)
    yield a, b
    a.close()
    b.close()


def test_a_batch_arrives_whole_and_in_order(pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    tx, rx = mmsg.Ring(8, 2048), mmsg.Ring(16, 2048)
    sizes = [1, 100, 2048, 7, 512, 33]
    data = [os.urandom(n) for n in sizes]
    for i, d in enumerate(data):
        tx.buf[i, :len(d)] = np.frombuffer(d, np.uint8)
        tx.lens[i] = len(d)
    port = b.getsockname()[1]
    assert tx.send(a.fileno(), 0, 2, "127.0.0.1", port) == (2, 0)
    assert tx.send(a.fileno(), 2, 4, "127.0.0.1", port) == (4, 0)  # from a row other than the first
    n = rx.recv(b.fileno())
    assert n == 6
    assert rx.lens[:n].tolist() == sizes
    assert [bytes(rx.rows[i][:sizes[i]]) for i in range(n)] == data
    assert not (rx.flags[:n] & mmsg.MSG_TRUNC).any()
    assert rx.recv(b.fileno()) == 0  # nothing waiting: 0, and no blocking


def test_a_datagram_longer_than_its_slot_is_flagged(pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    rx = mmsg.Ring(4, 64)
    a.sendto(bytes(100), b.getsockname())
    assert rx.recv(b.fileno()) == 1
    assert rx.flags[0] & mmsg.MSG_TRUNC and rx.lens[0] == 64


def test_an_error_names_its_cause(pair: tuple[socket.socket, socket.socket]) -> None:
    a, _ = pair
    tx = mmsg.Ring(2, 128)
    tx.lens[0] = 100
    sent, err = tx.send(a.fileno(), 0, 1, "127.0.0.1", 0)  # UDP to port 0 is refused
    assert sent == 0 and err != 0
    with pytest.raises(ValueError, match="multiple of 4"):
        mmsg.Ring(2, 30)
