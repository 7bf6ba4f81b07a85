"""``rdmalab.tools.oob.Channel.recv`` with a pump: the timeout counts only the time with neither a
record nor RDMA traffic (a peer still sending a long ``-a`` run is not idle), and a peer that is
quiet for the whole timeout gets an error naming what was awaited."""
import socket
import time

import pytest

from rdmalab.tools.oob import Channel, OOBError


def _pair(timeout: float) -> tuple[Channel, socket.socket]:
    a, b = socket.socketpair()
    # socketpair is AF_UNIX: TCP_NODELAY does not apply, so build the Channel by hand
    ch = Channel.__new__(Channel)
    ch.sock, ch.timeout, ch.pump = a, timeout, None
    a.settimeout(timeout)
    return ch, b


def test_traffic_keeps_the_wait_alive_past_the_timeout() -> None:
    ch, peer = _pair(0.3)
    start = time.monotonic()
    calls = 0

    def pump() -> bool:  # the peer's RDMA traffic arrives for 1 s, then its record
        nonlocal calls
        calls += 1
        time.sleep(0.01)
        if time.monotonic() - start > 1.0 and calls < 10_000:
            peer.sendall(b"done")
            calls = 10_000
        return True

    ch.pump = pump
    assert ch.recv(4, "its key record") == b"done"
    assert time.monotonic() - start > 0.9


def test_a_quiet_peer_times_out_and_the_error_names_the_record() -> None:
    ch, _peer = _pair(0.3)

    def pump() -> bool:
        time.sleep(0.01)
        return False

    ch.pump = pump
    start = time.monotonic()
    with pytest.raises(OOBError, match=r"did not send its key record .*nor any RDMA traffic.* for 0.3 s"):
        ch.recv(4, "its key record")
    assert 0.3 <= time.monotonic() - start < 5


def test_without_a_pump_the_timeout_is_the_socket_s() -> None:
    ch, _peer = _pair(0.2)
    with pytest.raises(OOBError, match=r"did not send its report on the out-of-band connection for 0.2 s"):
        ch.recv(8, "its report")
