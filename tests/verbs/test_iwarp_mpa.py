"""MPA connection setup as siw 6.1 does it (reference B.2): frames, negotiation and the traps.

The engine's listener and connector are driven by hand-made peers (a raw TCP connection of the
simulated fabric that sends and reads bytes), so each trap is the byte sequence a peer would send.
"""

from __future__ import annotations

import errno
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
from rdmalab.verbs.engine import mpacm
from rdmalab.verbs.pyverbs_error import PyverbsRDMAError
from rdmalab.verbs.qp import QPCap, QPInitAttr
from rdmalab.wire.iwarp import decode_fpdu, decode_mpa_frame, encode_mpa_frame
from rdmalab.wire.mpa import MPAReqRep, MPAv2IRDORD
from rdmalab.wire.rdmap import Terminate

PORT = 7174


@pytest.fixture(autouse=True)
def _default_fabric() -> Iterator[None]:
    yield
    reset_default_fabric()


def _init() -> QPInitAttr:
    return QPInitAttr(qp_type=e.IBV_QPT_RC, cap=QPCap(max_send_wr=8, max_recv_wr=8))


class RawPeer:
    """A TCP connection of the fabric's TCP model driven by the test: it sends bytes and keeps what arrives."""

    def __init__(self) -> None:
        self.got = bytearray()
        self.closed: str | None = None
        self.stream: Any = None

    def on_bytes(self, data: bytes) -> None:
        self.got += data

    def on_closed(self, why: str) -> None:
        self.closed = why

    def connected(self, stream: Any, why: str | None) -> None:
        assert stream is not None, why
        self.stream = stream
        stream.receiver = self


def _raw_fabric() -> tuple[Any, SimTcp]:
    fab = iwarp_fabric(seed=3)
    add_iwarp_device(fab, "raw", "10.0.0.3")
    reset_default_fabric(fab)
    return fab, SimTcp.of(fab)


def _listener() -> tuple[CMEventChannel, CMID]:
    ch = CMEventChannel()
    lid = CMID(ch)
    lid.bind_addr(AddrInfo(src="10.0.0.2", src_service=PORT, flags=RAI_PASSIVE))
    lid.listen()
    return ch, lid


def _raw_client(fab: Any, tcp: SimTcp, first: bytes) -> RawPeer:
    peer = RawPeer()
    tcp.connect(("10.0.0.3", 40000), ("10.0.0.2", PORT), peer.connected)
    fab.run(until_ns=fab.now_ns + 1_000_000)
    peer.stream.write(first)
    fab.run(until_ns=fab.now_ns + 1_000_000)
    return peer


# ============================================================================ frames the engine sends


def test_request_and_reply_are_rev2_enhanced_with_real_ird_ord_and_the_application_private_data() -> None:
    pair = IwPair(record=True, ird=3, ord=5, private_data=b"app-data")
    from rdmalab.capture.iwarp import IwarpTracker
    from rdmalab.wire.frame import decode_ethernet

    tracker = IwarpTracker()
    pdus = [p for i, f in enumerate(pair.frames) for p in tracker.process(i, decode_ethernet(f))]
    req, rep = pdus[0], pdus[1]
    for p in (req, rep):
        h = p[MPAReqRep]
        assert (h.rev, h.res, h.marker_flag, h.crc_flag) == (2, 0x10, 0, 0)
    assert req[MPAReqRep].is_request and rep[MPAReqRep].is_reply
    w = req[MPAv2IRDORD]
    assert (w.ird, w.ord, w.p2p, w.zero_rtr, w.write_rtr, w.read_rtr) == (3, 5, 0, 0, 0, 0)
    assert req.private_data == w.encode() + b"app-data"  # no cma_hdr: the application's bytes, unchanged
    # the server accepted with resources 3 / depth 5: its ORD is capped by the client's IRD (3), its IRD
    # raised to the client's ORD (5, relaxed IRD negotiation)
    r = rep[MPAv2IRDORD]
    assert (r.ird, r.ord) == (5, 3)
    assert (pair.a.engine.ird, pair.a.engine.ord) == (3, 5)
    assert (pair.b.engine.ird, pair.b.engine.ord) == (5, 3)


def test_ird_ord_are_clamped_to_128_never_0x3fff() -> None:
    frame = mpacm.request_frame(ird=1000, ord=0x3FFF, crc=False)
    pkt, _ = decode_mpa_frame(frame)
    assert (pkt[MPAv2IRDORD].ird, pkt[MPAv2IRDORD].ord) == (128, 128)


def test_siw_rping_request_bytes_are_what_the_engine_sends_for_rping() -> None:
    # captured from siw_rping (reference B.2): flags 0x10, rev 2, pd_len 4, IRD 1, ORD 1
    assert mpacm.request_frame(ird=1, ord=1, crc=False) == b"MPA ID Req Frame" + bytes.fromhex("1002000400010001")


# ============================================================================ the responder's traps


def test_a_request_with_the_m_flag_is_answered_with_a_reject_and_no_connect_request() -> None:
    fab, tcp = _raw_fabric()
    ch, _ = _listener()
    peer = _raw_client(fab, tcp, encode_mpa_frame(markers=True, crc=False, rev=2, ird=1, ord=1))
    fab.run()
    pkt, n = decode_mpa_frame(bytes(peer.got))
    assert pkt[MPAReqRep].is_reply and pkt[MPAReqRep].rej_flag == 1 and pkt[MPAReqRep].marker_flag == 0
    assert peer.closed is not None and n == len(peer.got)
    assert not ch.queue  # no CONNECT_REQUEST reached the application


@pytest.mark.parametrize("pd_len", [253, 300, 508])
def test_a_request_with_more_than_256_bytes_of_private_data_is_dropped(pd_len: int) -> None:
    fab, tcp = _raw_fabric()
    ch, _ = _listener()
    peer = _raw_client(fab, tcp, encode_mpa_frame(crc=False, rev=2, ird=1, ord=1, private_data=b"x" * pd_len))
    fab.run()
    assert peer.got == b"" and peer.closed is not None  # siw: -EPROTO, no Reply
    assert not ch.queue


def test_bytes_after_the_request_before_the_reply_are_refused() -> None:
    fab, tcp = _raw_fabric()
    ch, _ = _listener()
    peer = _raw_client(fab, tcp, encode_mpa_frame(crc=False, rev=2, ird=1, ord=1) + b"\x00\x10extra")
    fab.run()
    assert peer.got == b"" and peer.closed is not None and not ch.queue


def test_the_responder_sends_no_fpdu_before_the_initiators_first() -> None:
    fab, tcp = _raw_fabric()
    ch, _ = _listener()
    peer = _raw_client(fab, tcp, encode_mpa_frame(crc=False, rev=2, ird=1, ord=1, private_data=b"hi"))
    ev = CMEvent(ch)
    assert ev.event_type == EV.RDMA_CM_EVENT_CONNECT_REQUEST and ev.private_data == b"hi"
    conn = CMID(ev, listen_id=ch.ids[0])
    conn.create_qp(_init())
    conn.accept(ConnParam(resources=1, depth=1))
    mr = conn.reg_msgs(16)
    conn.post_send(mr)  # the server speaks first: held back
    fab.run()
    rep, n = decode_mpa_frame(bytes(peer.got))
    assert rep[MPAReqRep].is_reply and n == len(peer.got)  # the Reply and nothing after it
    from rdmalab.wire.iwarp import send

    peer.stream.write(mpacm_fpdu(send(b"", msn=1)))  # the initiator's first FPDU (a zero-byte Send)...
    fab.run()
    assert len(peer.got) > n  # ... lets the held Send go
    pkt, _ = decode_fpdu(bytes(peer.got), n, crc=False)
    assert pkt.payload_length == 16


def mpacm_fpdu(ulpdu: bytes) -> bytes:
    from rdmalab.wire.mpa import frame_fpdu

    return frame_fpdu(ulpdu, crc=False)


# ============================================================================ the initiator's traps


class RawServer:
    """A raw listener that answers the engine's MPA Request with the given bytes."""

    def __init__(self, tcp: SimTcp, reply: bytes) -> None:
        self.reply = reply
        self.peer = RawPeer()
        tcp.listen("10.0.0.3", PORT, self.accepted)

    def accepted(self, stream: Any) -> None:
        self.peer.stream = stream
        stream.receiver = self

    def on_bytes(self, data: bytes) -> None:
        first = not self.peer.got
        self.peer.on_bytes(data)
        if first:
            self.peer.stream.write(self.reply)

    def on_closed(self, why: str) -> None:
        self.peer.on_closed(why)


def _engine_client(reply: bytes, private_data: bytes = b"") -> tuple[Any, RawServer, CMID, CMEvent]:
    fab, tcp = _raw_fabric()
    srv = RawServer(tcp, reply)
    ch = CMEventChannel()
    cid = CMID(ch)
    cid.resolve_addr(AddrInfo(src="10.0.0.1", dst="10.0.0.3", dst_service=PORT))
    CMEvent(ch)
    cid.resolve_route()
    CMEvent(ch)
    cid.create_qp(_init())
    param = ConnParam(resources=1, depth=1)
    param.set_private_data(private_data)
    cid.connect(param)
    ev = CMEvent(ch)
    fab.run()
    return fab, srv, cid, ev


def test_a_reply_with_ord_over_128_is_answered_with_terminate_insufficient_ird() -> None:
    fab, srv, cid, ev = _engine_client(encode_mpa_frame(reply=True, crc=False, rev=2, ird=1, ord=200))
    assert ev.event_type == EV.RDMA_CM_EVENT_CONNECT_ERROR
    got = bytes(srv.peer.got)
    req, n = decode_mpa_frame(got)
    term, _ = decode_fpdu(got, n, crc=False)
    t = term[Terminate]
    assert (t.layer, t.etype, t.errcode) == (2, 0, 0x06)  # LLP, MPA, insufficient IRD (siw_proc_mpareply)
    assert srv.peer.closed is not None


def test_a_reply_with_markers_is_refused() -> None:
    _, _, _, ev = _engine_client(encode_mpa_frame(reply=True, markers=True, crc=False, rev=2, ird=1, ord=1))
    assert ev.event_type == EV.RDMA_CM_EVENT_CONNECT_ERROR


def test_a_rev1_reply_to_an_enhanced_request_is_refused() -> None:
    _, _, _, ev = _engine_client(encode_mpa_frame(reply=True, crc=False, rev=1))
    assert ev.event_type == EV.RDMA_CM_EVENT_CONNECT_ERROR


def test_a_reply_with_crc_turns_crc_on() -> None:
    _, srv, cid, ev = _engine_client(encode_mpa_frame(reply=True, crc=True, rev=2, ird=1, ord=1))
    assert ev.event_type == EV.RDMA_CM_EVENT_ESTABLISHED
    assert cid.qp is not None and cid.qp.engine.crc is True
    req, _ = decode_mpa_frame(bytes(srv.peer.got))
    assert req[MPAReqRep].crc_flag == 0  # the engine did not ask (siw's default); the Reply's C decides


def test_reject_with_private_data_reaches_the_client_as_rejected_econnrefused() -> None:
    reset_default_fabric(iwarp_fabric(seed=5))
    sch, lid = _listener()
    cch = CMEventChannel()
    cid = CMID(cch)
    cid.resolve_addr(AddrInfo(dst="10.0.0.2", dst_service=PORT))
    CMEvent(cch)
    cid.resolve_route()
    CMEvent(cch)
    cid.create_qp(_init())
    cid.connect(ConnParam())
    ev = CMEvent(sch)
    child = CMID(ev, listen_id=lid)
    child.reject(b"go away", 7)
    rej = CMEvent(cch)
    assert rej.event_type == EV.RDMA_CM_EVENT_REJECTED and rej.status == -errno.ECONNREFUSED
    assert rej.private_data == b"go away"


def test_connect_to_a_port_nobody_listens_on_is_rejected() -> None:
    reset_default_fabric(iwarp_fabric(seed=5))
    cch = CMEventChannel()
    cid = CMID(cch)
    cid.resolve_addr(AddrInfo(dst="10.0.0.2", dst_service=9999))
    CMEvent(cch)
    cid.resolve_route()
    CMEvent(cch)
    cid.create_qp(_init())
    cid.connect(ConnParam())
    ev = CMEvent(cch)
    assert ev.event_type == EV.RDMA_CM_EVENT_REJECTED and ev.status == -errno.ECONNREFUSED


def test_no_reply_within_10_s_is_unreachable() -> None:
    fab, tcp = _raw_fabric()
    tcp.listen("10.0.0.3", PORT, lambda s: setattr(s, "receiver", RawPeer()))  # accepts, never answers
    ch = CMEventChannel()
    cid = CMID(ch)
    cid.resolve_addr(AddrInfo(src="10.0.0.1", dst="10.0.0.3", dst_service=PORT))
    CMEvent(ch)
    cid.resolve_route()
    CMEvent(ch)
    cid.create_qp(_init())
    cid.connect(ConnParam())
    ev = CMEvent(ch)
    assert ev.event_type == EV.RDMA_CM_EVENT_UNREACHABLE and ev.status == -errno.ETIMEDOUT
    assert 10_000_000_000 <= fab.now_ns < 11_000_000_000


def test_private_data_over_252_bytes_is_refused_at_connect() -> None:
    reset_default_fabric(iwarp_fabric(seed=5))
    cch = CMEventChannel()
    cid = CMID(cch)
    cid.resolve_addr(AddrInfo(dst="10.0.0.2", dst_service=PORT))
    CMEvent(cch)
    cid.resolve_route()
    CMEvent(cch)
    cid.create_qp(_init())
    p = ConnParam()
    p.set_private_data(b"x" * 253)
    with pytest.raises(PyverbsRDMAError, match="253 bytes of private data"):
        cid.connect(p)


def test_the_device_shows_as_an_iwarp_rnic() -> None:
    from rdmalab.verbs.device import get_device_list

    fab = iwarp_fabric()
    devs = {d.name: d for d in get_device_list(fab)}
    assert devs[b"siw0"].node_type == 4 and devs[b"siw0"].transport_type == 1  # RNIC, IBV_TRANSPORT_IWARP


def test_only_rc_qps_on_an_iwarp_device() -> None:
    from rdmalab.verbs.cq import CQ
    from rdmalab.verbs.device import Context
    from rdmalab.verbs.pd import PD
    from rdmalab.verbs.qp import QP

    fab = iwarp_fabric()
    ctx = Context(name="siw0", fabric=fab)
    cq = CQ(ctx, 8)
    with pytest.raises(PyverbsRDMAError, match="RC QPs only"):
        QP(PD(ctx), QPInitAttr(qp_type=e.IBV_QPT_UD, scq=cq, rcq=cq))
