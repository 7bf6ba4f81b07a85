"""Terminate: each error the iWARP receiver finds is answered with one Terminate naming its layer, error
type and code (RFC 5040 4.8, RFC 5041 7.2; siw_qp_rx.c), then the connection ends and the QP goes to ERR.

A raw peer (a TCP connection of the simulated fabric driven by the test) does the MPA exchange
with the engine and then sends the faulty FPDUs; the Terminate it gets back is decoded with the
wire codecs.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from rdmalab.fabric import reset_default_fabric
from rdmalab.fabric.iwpair import IwPair
from rdmalab.fabric.simtcp import SimTcp, add_iwarp_device, iwarp_fabric
from rdmalab.verbs import enums as e
from rdmalab.verbs.cm_enums import RAI_PASSIVE
from rdmalab.verbs.cm_enums import rdma_cm_event_type as EV
from rdmalab.verbs.cmid import CMID, AddrInfo, CMEvent, CMEventChannel, ConnParam
from rdmalab.verbs.mr import MR
from rdmalab.verbs.qp import QPCap, QPInitAttr
from rdmalab.wire.iwarp import (
    decode_fpdu,
    decode_mpa_frame,
    encode_mpa_frame,
    rdma_write,
    read_request,
    read_response,
    send,
)
from rdmalab.wire.mpa import frame_fpdu
from rdmalab.wire.packet import Packet
from rdmalab.wire.rdmap import DDPUntagged, Terminate, TerminatedDDPTagged, TerminatedDDPUntagged, TerminateSegLen

PORT = 7174
ALL = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ


@pytest.fixture(autouse=True)
def _default_fabric() -> Iterator[None]:
    yield
    reset_default_fabric()


class Peer:
    """The raw side: MPA by hand, then FPDUs; keeps every byte the engine sent."""

    def __init__(self) -> None:
        self.got = bytearray()
        self.closed: str | None = None
        self.stream: Any = None
        self.crc = False

    def on_bytes(self, data: bytes) -> None:
        self.got += data

    def on_closed(self, why: str) -> None:
        self.closed = why

    def send(self, ulpdu: bytes, *, crc_ok: bool = True) -> None:
        f = bytearray(frame_fpdu(ulpdu, crc=self.crc))
        if not crc_ok:
            f[-1] ^= 0xFF
        self.stream.write(bytes(f))

    def pdus(self) -> list[Packet]:
        """The engine's FPDUs after its MPA Reply."""
        buf = bytes(self.got)
        _, pos = decode_mpa_frame(buf)
        out = []
        while pos < len(buf):
            p, n = decode_fpdu(buf, pos, crc=self.crc)
            out.append(p)
            pos += n
        return out

    def terminate(self) -> Packet:
        terms = [p for p in self.pdus() if p.get(Terminate) is not None]
        assert len(terms) == 1, [p.info for p in self.pdus()]
        return terms[0]


class Established:
    """The engine accepts a raw peer's connection (engine = responder, the peer = initiator)."""

    def __init__(self, *, crc: bool = False, recvs: int = 1, resources: int = 1, ird: int = 1, ord: int = 1) -> None:
        fab = iwarp_fabric(seed=11)
        add_iwarp_device(fab, "raw", "10.0.0.3")
        reset_default_fabric(fab)
        self.fab = fab
        self.ch = CMEventChannel()
        lid = CMID(self.ch)
        lid.bind_addr(AddrInfo(src="10.0.0.2", src_service=PORT, flags=RAI_PASSIVE))
        lid.listen()
        self.peer = Peer()
        self.peer.crc = crc
        SimTcp.of(fab).connect(("10.0.0.3", 40001), ("10.0.0.2", PORT), self._connected)
        fab.run(until_ns=fab.now_ns + 1_000_000)
        self.peer.stream.write(encode_mpa_frame(crc=crc, rev=2, ird=ird, ord=ord))
        ev = CMEvent(self.ch)
        assert ev.event_type == EV.RDMA_CM_EVENT_CONNECT_REQUEST
        self.cmid = CMID(ev, listen_id=lid)
        self.cmid.create_qp(QPInitAttr(qp_type=e.IBV_QPT_RC, cap=QPCap(max_send_wr=8, max_recv_wr=8)))
        self.mr = MR(self.cmid.pd, 4096, ALL)
        for _ in range(recvs):
            self.cmid.post_recv(self.mr, 100)
        self.cmid.accept(ConnParam(resources=resources, depth=1))
        assert CMEvent(self.ch).event_type == EV.RDMA_CM_EVENT_ESTABLISHED
        fab.run(until_ns=fab.now_ns + 1_000_000)

    def _connected(self, stream: Any, why: str | None) -> None:
        assert stream is not None, why
        self.peer.stream = stream
        stream.receiver = self.peer

    @property
    def qp(self) -> Any:
        assert self.cmid.qp is not None
        return self.cmid.qp

    def run(self) -> None:
        self.fab.run()

    def expect_terminate(self, layer: int, etype: int, code: int) -> Packet:
        self.run()
        p = self.peer.terminate()
        t = p[Terminate]
        assert (t.layer, t.etype, t.errcode) == (layer, etype, code), p.info
        u = p[DDPUntagged]
        assert (u.qn, u.msn, u.mo) == (2, 1, 0)  # QN 2, MSN 1, MO 0 (siw_send_terminate)
        assert self.qp.qp_state == e.IBV_QPS_ERR
        assert self.peer.closed is not None  # the connection ended (FIN)
        assert CMEvent(self.ch).event_type == EV.RDMA_CM_EVENT_DISCONNECTED
        return p


def test_a_send_without_a_posted_receive_is_terminate_ddp_untagged_no_buffer_not_rnr() -> None:
    s = Established(recvs=0)
    s.peer.send(send(b"hello", msn=1))
    p = s.expect_terminate(1, 2, 0x02)
    # the offending DDP header travels with it (D set), with the segment's length
    t = p[Terminate]
    assert t.hdrct_d == 1 and t.hdrct_m == 1
    offending = send(b"hello", msn=1)
    assert p[TerminatedDDPUntagged].ddp_h == int.from_bytes(offending[:18], "big")
    assert p[TerminateSegLen].ddp_seg_len == len(offending)


def test_engine_to_engine_send_without_receive_completes_locally_then_both_qps_fail() -> None:
    pair = IwPair(recvs=0)
    pair.a.post(e.IBV_WR_SEND, 0, 8, wr_id=9)
    (wc,) = pair.wait(pair.a)
    assert wc.status == e.IBV_WC_SUCCESS  # handed to TCP: complete (siw), there is no RNR NAK to wait for
    pair.run()
    assert pair.b.engine.terminate_sent is not None and pair.b.engine.terminate_sent[:3] == (1, 2, 0x02)
    assert pair.a.engine.terminate_received == (1, 2, 0x02)
    assert pair.a.qp.qp_state == e.IBV_QPS_ERR and pair.b.qp.qp_state == e.IBV_QPS_ERR


def test_a_wrong_msn_is_terminate_ddp_untagged_msn_range() -> None:
    s = Established()
    s.peer.send(send(b"x", msn=2))
    s.expect_terminate(1, 2, 0x03)


def test_a_wrong_mo_is_terminate_ddp_untagged_invalid_mo() -> None:
    s = Established()
    s.peer.send(send(b"abc", msn=1, mo=0, last=False))
    s.peer.send(send(b"def", msn=1, mo=4, last=True))  # 3 bytes were placed, not 4
    s.expect_terminate(1, 2, 0x04)


def test_an_invalid_queue_number_is_terminate_ddp_untagged_invalid_qn() -> None:
    s = Established()
    u = bytearray(send(b"x", msn=1))
    u[6:10] = (5).to_bytes(4, "big")  # QN 5
    s.peer.send(bytes(u))
    s.expect_terminate(1, 2, 0x01)


def test_a_send_longer_than_the_receive_is_terminate_too_long_and_the_receive_fails() -> None:
    s = Established()
    s.peer.send(send(b"y" * 101, msn=1))
    s.expect_terminate(1, 2, 0x05)


def test_a_write_to_an_unknown_stag_is_terminate_ddp_tagged_invalid_stag() -> None:
    s = Established()
    s.peer.send(rdma_write(0xDEAD00, s.mr.buf, b"z"))
    p = s.expect_terminate(1, 1, 0x00)
    assert p[TerminatedDDPTagged].ddp_h == int.from_bytes(rdma_write(0xDEAD00, s.mr.buf, b"z")[:14], "big")


def test_a_write_beyond_the_region_is_terminate_ddp_tagged_base_bounds() -> None:
    s = Established()
    s.peer.send(rdma_write(s.mr.rkey, s.mr.buf + 4090, b"z" * 10))
    s.expect_terminate(1, 1, 0x01)


def test_a_write_to_a_read_only_region_is_terminate_rdmap_access_rights() -> None:
    s = Established()
    ro = MR(s.cmid.pd, 64, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_READ)
    s.peer.send(rdma_write(ro.rkey, ro.buf, b"z"))
    s.expect_terminate(0, 1, 0x02)


def test_a_read_request_with_ird_0_is_refused() -> None:
    s = Established(resources=0, ord=0)
    assert s.qp.engine.ird == 0
    s.peer.send(read_request(0x100, 0, 8, s.mr.rkey, s.mr.buf, msn=1))
    s.expect_terminate(0, 2, 0x07)


def test_a_read_request_is_answered_with_read_responses_to_its_sink() -> None:
    s = Established()
    s.mr.write(b"0123456789", 10, 0)
    s.peer.send(read_request(0xABCD, 0x1000, 10, s.mr.rkey, s.mr.buf, msn=1))
    s.run()
    (p,) = s.peer.pdus()
    assert p.info.startswith("RDMA Read Response STag=0x0000abcd TO=0x1000 [last]") and p.payload == b"0123456789"


def test_a_read_response_with_nothing_outstanding_is_terminate_unexpected_opcode() -> None:
    s = Established()
    s.peer.send(read_response(0x1, 0, b"q"))
    s.expect_terminate(0, 2, 0x06)


def test_a_bad_crc_is_terminate_llp_mpa_crc_error() -> None:
    s = Established(crc=True)
    assert s.qp.engine.crc is True
    s.peer.send(send(b"x", msn=1), crc_ok=False)
    s.expect_terminate(2, 0, 0x02)


def test_a_terminate_received_takes_the_qp_to_error_and_flushes() -> None:
    s = Established(recvs=2)
    from rdmalab.wire.iwarp import terminate

    s.peer.send(terminate(0, 2, 0xFF))
    s.run()
    assert s.qp.engine.terminate_received == (0, 2, 0xFF)
    assert s.qp.qp_state == e.IBV_QPS_ERR
    cq = s.qp.rcq
    n, wcs = cq.poll(4)
    assert n == 2 and all(w.status == e.IBV_WC_WR_FLUSH_ERR for w in wcs)
    assert CMEvent(s.ch).event_type == EV.RDMA_CM_EVENT_DISCONNECTED


# ============================================================================ Read Response matching (engine as requester)


class RawResponder:
    """A raw server: answers the engine's MPA Request, then each Read Request with ``respond(rr)``."""

    def __init__(self, tcp: SimTcp, respond: Any) -> None:
        self.respond = respond
        self.peer = Peer()
        self.mpa_done = False
        tcp.listen("10.0.0.3", PORT, self.accepted)

    def accepted(self, stream: Any) -> None:
        self.peer.stream = stream
        stream.receiver = self

    def on_bytes(self, data: bytes) -> None:
        self.peer.on_bytes(data)
        buf = bytes(self.peer.got)
        if not self.mpa_done:
            _, n = decode_mpa_frame(buf)
            self.mpa_done = True
            self.pos = n
            self.peer.stream.write(encode_mpa_frame(reply=True, crc=False, rev=2, ird=4, ord=4))
        while self.pos < len(buf):
            p, n = decode_fpdu(buf, self.pos, crc=False)
            self.pos += n
            from rdmalab.wire.rdmap import ReadRequest

            rr = p.get(ReadRequest)
            if rr is not None:
                for u in self.respond(rr):
                    self.peer.send(u)

    def on_closed(self, why: str) -> None:
        self.peer.on_closed(why)


def _read_through(respond: Any, length: int = 100) -> tuple[Any, Any, Any]:
    fab = iwarp_fabric(seed=13)
    add_iwarp_device(fab, "raw", "10.0.0.3")
    reset_default_fabric(fab)
    srv = RawResponder(SimTcp.of(fab), respond)
    ch = CMEventChannel()
    cid = CMID(ch)
    cid.resolve_addr(AddrInfo(src="10.0.0.1", dst="10.0.0.3", dst_service=PORT))
    CMEvent(ch)
    cid.resolve_route()
    CMEvent(ch)
    cid.create_qp(QPInitAttr(qp_type=e.IBV_QPT_RC, cap=QPCap(max_send_wr=8, max_recv_wr=8)))
    cid.connect(ConnParam(resources=4, depth=4))
    assert CMEvent(ch).event_type == EV.RDMA_CM_EVENT_ESTABLISHED
    sink = MR(cid.pd, 4096, ALL)
    cid.post_read(sink, length, 0x5000, 0x77, flags=e.IBV_SEND_SIGNALED)
    fab.run()
    return cid, sink, srv


def test_read_responses_that_match_complete_the_read() -> None:
    data = bytes(range(100))
    cid, sink, _ = _read_through(lambda rr: [read_response(rr.sink_stag, rr.sink_to, data[:60], last=False),
                                             read_response(rr.sink_stag, rr.sink_to + 60, data[60:])])
    wc = cid.get_send_comp()
    assert wc.status == e.IBV_WC_SUCCESS and sink.read(100, 0) == data


@pytest.mark.parametrize("case,code", [("stag", 0x00), ("to", 0x01), ("short", 0x01), ("long", 0x01)])
def test_a_read_response_off_the_sink_stag_to_or_length_is_terminate_ddp_tagged(case: str, code: int) -> None:
    def respond(rr: Any) -> list[bytes]:
        if case == "stag":
            return [read_response(rr.sink_stag ^ 0x100, rr.sink_to, b"a" * 100)]
        if case == "to":
            return [read_response(rr.sink_stag, rr.sink_to + 4, b"a" * 100)]
        if case == "short":
            return [read_response(rr.sink_stag, rr.sink_to, b"a" * 99)]
        return [read_response(rr.sink_stag, rr.sink_to, b"a" * 101)]

    cid, _, srv = _read_through(respond)
    eng = cid.qp.engine
    assert eng.terminate_sent is not None and eng.terminate_sent[:3] == (1, 1, code), eng.terminate_sent
    assert cid.qp.qp_state == e.IBV_QPS_ERR
    wc = cid.get_send_comp()
    assert wc.status == e.IBV_WC_WR_FLUSH_ERR
    buf = bytes(srv.peer.got)
    _, pos = decode_mpa_frame(buf)
    terms = []
    while pos < len(buf):
        p, n = decode_fpdu(buf, pos, crc=False)
        pos += n
        if p.get(Terminate) is not None:
            terms.append(p[Terminate])
    assert [(x.layer, x.etype, x.errcode) for x in terms] == [(1, 1, code)]
