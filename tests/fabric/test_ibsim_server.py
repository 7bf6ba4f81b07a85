"""rdmalab.fabric.ibsim_server over its real sockets, with a client written from ibsim's protocol
(rdmalab.wire.ibsim): CONNECT, the GET_* control messages, a MAD and its reply, and bad input (a bad magic, a
short message, an unknown node, an unknown type) that gets ibsim's answer and leaves the server serving."""

from __future__ import annotations

import os
import signal
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from rdmalab.fabric.ibsim_server import IbsimServer
from rdmalab.fabric.ibsubnet import Subnet
from rdmalab.wire import ibsim as W
from rdmalab.wire import smp as S

NET = Path(__file__).resolve().parent.parent / "data" / "ib" / "fattree2.net"


@pytest.fixture
def server() -> Iterator[str]:
    base = f"rdl-unit-{os.getpid()}"
    srv = IbsimServer(Subnet.from_file(str(NET)), base)
    t = threading.Thread(target=srv.serve, kwargs={"timeout": 0.05}, daemon=True)
    t.start()
    yield base
    srv.stop()
    t.join(5)
    srv.close()


class PyClient:
    def __init__(self, base: str, pid: int) -> None:
        self.base, self.pid = base, pid
        self.ctl = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.ctl.bind(W.client_ctl_name(pid, base))
        self.ctl.connect(W.ctl_name(base))
        self.ctl.settimeout(2)
        self.data = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.data.bind(W.client_in_name(pid, base))
        self.data.settimeout(2)
        self.id = 0

    def call(self, ctl: W.SimCtl) -> W.SimCtl:
        self.ctl.send(ctl.encode())
        return W.SimCtl.decode(self.ctl.recv(4096))

    def connect(self, node: str) -> W.SimCtl:
        info = W.SimClientInfo(id=self.pid, nodeid=node)
        rep = self.call(W.SimCtl(W.CtlType.CONNECT, len=W.SIM_CLIENT_INFO_SIZE, data=info.encode()))
        if rep.type != W.CtlType.ERROR:
            self.id = W.SimClientInfo.decode(rep.data).id
            self.data.connect(W.out_name(self.id, self.base))
        return rep

    def close(self) -> None:
        self.ctl.close()
        self.data.close()


def test_connect_controls_and_a_mad(server: str) -> None:
    c = PyClient(server, 900001)
    try:
        rep = c.connect("Leaf1")
        assert rep.type == W.CtlType.CONNECT and W.SimClientInfo.decode(rep.data).nodeid == "Leaf1"
        port = W.SimPort.decode(c.call(W.SimCtl(W.CtlType.GET_PORT, c.id)).data)
        assert (port.lid, port.state) == (0, 4)  # a switch's port 0: Active from the start, no LID yet
        ni = c.call(W.SimCtl(W.CtlType.GET_NODEINFO, c.id, len=64)).data
        assert S.NodeInfo.get_field(ni, "node_guid") == 0x200002 and S.NodeInfo.get_field(ni, "node_type") == 2
        guid = c.call(W.SimCtl(W.CtlType.GET_GUID, c.id, len=8)).data[:8]
        assert int.from_bytes(guid, "little") == 0x200002  # host order, as ibsim's memcpy
        pkeys = c.call(W.SimCtl(W.CtlType.GET_PKEYS, c.id, len=64)).data
        assert pkeys[:2] == b"\xff\xff" and pkeys[2:16] == bytes(14)  # the switch's port 0: 8 P_Keys
        pi = c.call(W.SimCtl(W.CtlType.GET_PORTINFO, c.id, len=64, data=bytes([7]))).data
        assert S.PortInfo.get_field(pi, "port_state") == 2 and S.PortInfo.get_field(pi, "port_phys_state") == 5
        # a DR NodeInfo Get one hop out of port 7 (to Spine1), and its reply
        smp = S.dr_get(S.ATTR_NODE_INFO, (7,), tid=0x42)
        c.data.send(W.SimRequest(0xFFFF, 0xFFFF, 0, 0, smp.encode()).encode())
        reply = W.SimRequest.decode(c.data.recv(4096))
        got = S.SMP.decode(reply.mad)
        assert reply.status == 0 and got.method == 0x81 and got.tid & 0xFFFFFFFFFFFF == 0x42
        assert S.NodeInfo.get_field(got.data, "node_guid") == 0x200000 and S.NodeInfo.get_field(got.data, "local_port_num") == 1
        # a short datagram is dropped (no reply), the next MAD still answered
        c.data.send(b"\0" * 40)
        c.data.send(W.SimRequest(0xFFFF, 0xFFFF, 0, 0, smp.encode()).encode())
        assert W.SimRequest.decode(c.data.recv(4096)).status == 0
        assert c.call(W.SimCtl(W.CtlType.DISCONNECT, c.id)).type == W.CtlType.DISCONNECT
    finally:
        c.close()


def test_bad_control_messages(server: str) -> None:
    c = PyClient(server, 900002)
    try:
        assert c.connect("NoSuchNode").type == W.CtlType.ERROR
        c.ctl.send(W.SimCtl(W.CtlType.GET_PORT, magic=0x12345678).encode())  # bad magic: ignored, no answer
        c.ctl.send(b"\0" * 12)  # not a sim_ctl: ignored
        with pytest.raises(TimeoutError):
            c.ctl.settimeout(0.3)
            c.ctl.recv(4096)
        c.ctl.settimeout(2)
        assert c.call(W.SimCtl(W.CtlType.GET_PORT, clientid=99)).type == W.CtlType.ERROR
        assert c.connect("H3").type == W.CtlType.CONNECT  # still serving
        assert c.call(W.SimCtl(77, c.id)).type == 77  # an unknown type comes back unchanged, as from ibsim
    finally:
        c.close()


def test_a_capture_file_that_cannot_be_written_is_one_sentence(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """``rdmalab ibsim -w DIR/missing/x.pcap NET``: the file is named, not the sockets; nothing is served."""
    from rdmalab.cli import main

    bad = tmp_path / "missing" / "x.pcap"
    before = signal.getsignal(signal.SIGTERM)  # the command turns SIGTERM into a clean stop: not for pytest
    try:
        assert main(["ibsim", "--sockname", f"rdl-w-{os.getpid()}", "-w", str(bad), str(NET)]) == 1
    finally:
        signal.signal(signal.SIGTERM, before)
    err = capsys.readouterr().err
    assert err == f"rdmalab: ibsim: -w {bad}: cannot write it (No such file or directory)\n"


def _answering(reply: object) -> tuple[socket.socket, threading.Thread]:
    """A UDP socket on 127.0.0.1 that answers each datagram with ``reply(datagram)`` (until closed)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                got, peer = sock.recvfrom(4096)
                sock.sendto(reply(got), peer)  # type: ignore[operator]
            except OSError:
                return

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    return sock, t


def test_a_client_that_is_answered_by_something_else_than_ibsim_says_so() -> None:
    """The remote mode's CONNECT answered by what is not ibsim: its own request sent back (the client's own
    control socket given the simulator's port before ibsim took it sends to itself) is no simulator
    there, which a caller waiting for one to start retries; a reply naming a client id ibsim never gives
    (a slot, 0-9) is an error in words, never a port past 65535 (OverflowError)."""
    from rdmalab.fabric.ibsim_client import IBSimClient, IBSimError, IBSimNotRunning

    echo, _t = _answering(lambda d: d)
    try:
        with pytest.raises(IBSimNotRunning, match="no ibsim simulator answered .* came back as it was sent"):
            IBSimClient(None, server="127.0.0.1", port=echo.getsockname()[1], timeout=2.0)
    finally:
        echo.close()

    def wrong_id(d: bytes) -> bytes:
        ctl = W.SimCtl.decode(d)
        info = W.SimClientInfo.decode(ctl.data)
        return W.SimCtl(type=ctl.type, clientid=0, len=ctl.len,
                        data=W.SimClientInfo(id=40000, qp=info.qp, issm=info.issm, nodeid="Hca1").encode()).encode()

    other, _t = _answering(wrong_id)
    try:
        with pytest.raises(IBSimError, match=r"names client 40000, not one of ibsim's 0-9"):
            IBSimClient(None, server="127.0.0.1", port=other.getsockname()[1], timeout=2.0)
    finally:
        other.close()
