"""The connection manager on the simulated fabric: rdma_cm's API (pyverbs.cmid) over the engine's own ib_cm.

Wire agreement with tshark is in test_cm_wire (tshark marker); the kernel as peer in tests/live.
"""

from __future__ import annotations

import errno
from collections.abc import Iterator

import pytest

from rdmalab.fabric import Fabric, reset_default_fabric
from rdmalab.verbs import enums as e
from rdmalab.verbs.cm_enums import RAI_PASSIVE, RDMA_PS_UDP, rdma_cm_event_type
from rdmalab.verbs.cmid import CMID, AddrInfo, CMEvent, CMEventChannel, ConnParam, UDParam, service_id
from rdmalab.verbs.engine import ibcm
from rdmalab.verbs.pyverbs_error import PyverbsRDMAError
from rdmalab.verbs.qp import QPCap, QPInitAttr
from rdmalab.wire import cm as w

EV = rdma_cm_event_type
PORT = 7174


@pytest.fixture
def fab() -> Iterator[Fabric]:
    f = reset_default_fabric()
    f.frames = True  # packets cross as real frames: the trace keeps each one
    f.tracing = True
    yield f
    reset_default_fabric()


def _init(qp_type: int = e.IBV_QPT_RC) -> QPInitAttr:
    return QPInitAttr(qp_type=qp_type, cap=QPCap(max_send_wr=8, max_recv_wr=8))


class Side:
    def __init__(self) -> None:
        self.ch = CMEventChannel()
        self.id = CMID(self.ch)

    def event(self, expect: int) -> CMEvent:
        ev = CMEvent(self.ch)
        assert ev.event_type == expect, f"{ev.event_str()} (status {ev.status}), expected {EV(expect).name}"
        return ev


def _listen(port: int = PORT, addr: str = "10.0.0.2", ps: int | None = None) -> Side:
    s = Side()
    if ps is not None:
        s.id = CMID(s.ch, port_space=ps)
    s.id.bind_addr(AddrInfo(src=addr, src_service=port, flags=RAI_PASSIVE))
    s.id.listen()
    return s


def _client(port: int = PORT, dst: str = "10.0.0.2", ps: int | None = None) -> Side:
    c = Side()
    if ps is not None:
        c.id = CMID(c.ch, port_space=ps)
    c.id.resolve_addr(AddrInfo(dst=dst, dst_service=port))
    c.event(EV.RDMA_CM_EVENT_ADDR_RESOLVED)
    c.id.resolve_route()
    c.event(EV.RDMA_CM_EVENT_ROUTE_RESOLVED)
    return c


def _connect(fab: Fabric, param: ConnParam | None = None) -> tuple[Side, Side, CMID]:
    srv, cli = _listen(), _client()
    cli.id.create_qp(_init())
    cli.id.connect(param or ConnParam())
    ev = srv.event(EV.RDMA_CM_EVENT_CONNECT_REQUEST)
    conn = CMID(ev, listen_id=srv.id)
    conn.create_qp(_init())
    return srv, cli, conn


def _cm_names(fab: Fabric) -> list[str]:
    """The CM messages that crossed the fabric, in order, as 'REQ>' (soft0 to soft1) or '<REP'."""
    return [_name(ev) for ev in fab.trace if ev.kind == "sent" and ev.qpn == 1]


def _name(ev: object) -> str:
    frame = ev.frame  # type: ignore[attr-defined]
    if frame is None:
        return "?"
    from rdmalab.wire.frame import decode_ethernet

    msg = w.CMMessage.from_packet(decode_ethernet(frame))
    assert msg is not None
    arrow = ">" if ev.node == "soft0" else "<"  # type: ignore[attr-defined]
    return f"{msg.name}{arrow}" if arrow == ">" else f"{arrow}{msg.name}"


def test_rping_service_id_and_port_spaces() -> None:
    assert service_id(0x0106, 7174) == 0x0000000001061C06  # rping
    assert service_id(RDMA_PS_UDP, 7174) == 0x0000000001111C06  # udaddy
    assert service_id(0x0106, 18515) == 0x0000000001064853  # perftest


def test_connect_send_and_disconnect_with_each_qp_state_at_each_step(fab: Fabric) -> None:
    srv, cli, conn = _connect(fab, ConnParam(resources=1, depth=1, retry=7, rnr_retry=7))
    assert cli.id.qp is not None and conn.qp is not None
    assert (cli.id.qp.qp_state, conn.qp.qp_state) == (e.IBV_QPS_INIT, e.IBV_QPS_INIT)
    mr = conn.reg_msgs(64)
    conn.post_recv(mr)
    conn.accept(ConnParam(resources=1, depth=1))
    assert conn.qp.qp_state == e.IBV_QPS_RTS  # the passive side is in RTS before its REP leaves
    cli.event(EV.RDMA_CM_EVENT_ESTABLISHED)
    assert cli.id.qp.qp_state == e.IBV_QPS_RTS
    srv.event(EV.RDMA_CM_EVENT_ESTABLISHED)
    # The REQ's starting PSN is what the passive side sends with, the REP's what the active side sends with.
    req, rep = conn.req.body, conn.conn.rep.body  # type: ignore[union-attr]
    assert isinstance(req, w.CMReq) and isinstance(rep, w.CMRep)
    assert conn.qp.attr.sq_psn == req.starting_psn == cli.id.qp.attr.rq_psn
    assert cli.id.qp.attr.sq_psn == rep.starting_psn == conn.qp.attr.rq_psn
    assert conn.qp.attr.dest_qp_num == cli.id.qp.qp_num and cli.id.qp.attr.dest_qp_num == conn.qp.qp_num
    m2 = cli.id.reg_msgs(64)
    m2.write(b"hello over rdma_cm", 18)
    cli.id.post_send(m2, length=18)
    assert cli.id.get_send_comp().status == e.IBV_WC_SUCCESS
    wc = conn.get_recv_comp()
    assert (wc.status, wc.byte_len) == (e.IBV_WC_SUCCESS, 18)
    assert bytes(mr.read(18, 0)) == b"hello over rdma_cm"
    cli.id.disconnect()
    assert cli.id.qp.qp_state == e.IBV_QPS_ERR  # rdma_disconnect: the QP to ERR before the DREQ
    srv.event(EV.RDMA_CM_EVENT_DISCONNECTED)
    conn.disconnect()  # sends the DREP
    cli.event(EV.RDMA_CM_EVENT_DISCONNECTED)
    t0 = fab.now_ns
    cli.event(EV.RDMA_CM_EVENT_TIMEWAIT_EXIT)
    assert fab.now_ns - t0 == pytest.approx(ibcm.cm_ms(ibcm.PACKET_LIFE_TIME + 1) * 1e6, rel=0.01)  # ~2 s
    srv.event(EV.RDMA_CM_EVENT_TIMEWAIT_EXIT)
    assert _cm_names(fab) == ["REQ>", "<REP", "RTU>", "DREQ>", "<DREP"]
    assert not fab.devices["soft0"].gsi.agent.conns and not fab.devices["soft1"].gsi.agent.conns


def test_no_listener_is_rejected_with_reason_8_in_words(fab: Fabric) -> None:
    _listen(port=PORT)
    cli = _client(port=PORT + 1)
    cli.id.create_qp(_init())
    cli.id.connect()
    ev = cli.event(EV.RDMA_CM_EVENT_REJECTED)
    assert ev.status == w.REJ_INVALID_SERVICE_ID
    # the synchronous API says it in words: reason code and name, address and port
    sync = CMID(AddrInfo(dst="10.0.0.2", dst_service=PORT + 2), qp_init_attr=_init())
    with pytest.raises(PyverbsRDMAError, match=r"10\.0\.0\.2:7176 was rejected: reason 8 \(Invalid Service ID\)"):
        sync.connect()


def test_unreachable_after_the_req_retries_as_ib_cm_times_them(fab: Fabric) -> None:
    fab.set_faults(loss=1.0, src="soft0")
    _listen()
    cli = _client()
    cli.id.create_qp(_init())
    t0 = fab.now_ns
    cli.id.connect()
    ev = cli.event(EV.RDMA_CM_EVENT_UNREACHABLE)
    per_try = ibcm.req_timeout_ms()
    assert per_try == 6144
    assert ev.status < 0
    assert (fab.now_ns - t0) / 1e6 == pytest.approx(16 * per_try)  # the REQ and its 15 retries
    assert [n for n in _cm_names(fab)] == ["REQ>"] * 16
    sync = CMID(AddrInfo(dst="10.0.0.2", dst_service=PORT), qp_init_attr=_init())
    with pytest.raises(PyverbsRDMAError, match=r"unreachable: no answer to the REQ after 16 tries over 98\.3 s"):
        sync.connect()


def test_a_lost_rep_is_sent_again_and_the_connection_comes_up(fab: Fabric) -> None:
    fab.devices["soft0"].gsi.agent.lose_next("REP")
    srv, cli, conn = _connect(fab)
    conn.accept()
    t0 = fab.now_ns
    cli.event(EV.RDMA_CM_EVENT_ESTABLISHED)
    srv.event(EV.RDMA_CM_EVENT_ESTABLISHED)
    req = conn.req.body  # type: ignore[union-attr]
    assert isinstance(req, w.CMReq)
    assert (fab.now_ns - t0) / 1e6 >= ibcm.cm_ms(req.local_cm_response_timeout)  # the REP timer: 4096 ms
    assert _cm_names(fab) == ["REQ>", "<REP", "<REP", "RTU>"]


def test_a_duplicate_rep_after_the_rtu_gets_the_same_rtu_again(fab: Fabric) -> None:
    fab.devices["soft1"].gsi.agent.lose_next("RTU")
    srv, cli, conn = _connect(fab)
    conn.accept()
    cli.event(EV.RDMA_CM_EVENT_ESTABLISHED)
    srv.event(EV.RDMA_CM_EVENT_ESTABLISHED)
    assert _cm_names(fab) == ["REQ>", "<REP", "RTU>", "<REP", "RTU>"]
    assert fab.devices["soft0"].gsi.agent.counters["cm_rx_duplicates"] == 1


def test_an_mra_extends_the_active_sides_timer(fab: Fabric) -> None:
    srv = _listen()
    cli = _client()
    cli.id.create_qp(_init())
    cli.id.connect()
    ev = srv.event(EV.RDMA_CM_EVENT_CONNECT_REQUEST)
    conn = CMID(ev, listen_id=srv.id)
    conn.create_qp(_init())
    # the server takes its time: the REQ is sent again after 6144 ms and answered with an MRA
    fab.advance(ibcm.req_timeout_ms() * 1_000_000 + 1)
    fab.advance(ibcm.req_timeout_ms() * 2 * 1_000_000)  # past where a second retry would have been
    assert _cm_names(fab) == ["REQ>", "REQ>", "<MRA"]
    conn.accept()
    cli.event(EV.RDMA_CM_EVENT_ESTABLISHED)
    assert _cm_names(fab) == ["REQ>", "REQ>", "<MRA", "<REP", "RTU>"]


def test_a_stale_connection_is_rejected_with_reason_10(fab: Fabric) -> None:
    srv, cli, conn = _connect(fab)
    conn.accept()
    cli.event(EV.RDMA_CM_EVENT_ESTABLISHED)
    srv.event(EV.RDMA_CM_EVENT_ESTABLISHED)
    # a second REQ from the same QPN while the first connection lives (no DREQ in between)
    again = _client()
    again.id.connect(ConnParam(qp_num=cli.id.qpn or 0))
    ev = again.event(EV.RDMA_CM_EVENT_REJECTED)
    assert ev.status == w.REJ_STALE_CONN
    srv.event(EV.RDMA_CM_EVENT_DISCONNECTED)  # and the old connection is taken down


def test_dreq_in_both_directions_at_once(fab: Fabric) -> None:
    srv, cli, conn = _connect(fab)
    conn.accept()
    cli.event(EV.RDMA_CM_EVENT_ESTABLISHED)
    srv.event(EV.RDMA_CM_EVENT_ESTABLISHED)
    cli.id.disconnect()
    conn.disconnect()  # in the same instant: the two DREQs cross
    cli.event(EV.RDMA_CM_EVENT_DISCONNECTED)
    srv.event(EV.RDMA_CM_EVENT_DISCONNECTED)
    names = _cm_names(fab)
    assert sorted(names[3:]) == sorted(["DREQ>", "<DREQ", "DREP>", "<DREP"])
    cli.event(EV.RDMA_CM_EVENT_TIMEWAIT_EXIT)
    srv.event(EV.RDMA_CM_EVENT_TIMEWAIT_EXIT)


def test_a_rej_from_the_application_reaches_the_client_with_its_private_data(fab: Fabric) -> None:
    srv, cli, conn = _connect(fab)
    conn.reject(b"go away", 7)
    ev = cli.event(EV.RDMA_CM_EVENT_REJECTED)
    assert ev.status == w.REJ_CONSUMER_DEFINED
    assert ev.private_data[:7] == b"go away"


def test_a_req_whose_cma_hdr_is_not_version_0_gets_rej_28(fab: Fabric) -> None:
    _listen()
    dev = fab.devices["soft0"]
    req = w.build_req("10.0.0.1", "10.0.0.2", 40000, PORT, local_comm_id=0x1234, local_qpn=0x99,
                      starting_psn=1)
    raw = bytearray(req.encode())
    raw[24 + req.body.LAYOUT.size] = 1  # cma_version 1
    dev.gsi.agent.send_raw(dev.gids[0] & 0 | (0xFFFF00000000 | 0x0A000002), bytes(raw))
    fab.run()
    rej = [n for n in _cm_names(fab) if "REJ" in n]
    assert rej == ["<REJ"]
    last = [ev for ev in fab.trace if ev.kind == "sent" and ev.qpn == 1][-1]
    from rdmalab.wire.frame import decode_ethernet

    msg = w.CMMessage.from_packet(decode_ethernet(last.frame))
    assert msg is not None and isinstance(msg.body, w.CMRej) and msg.body.reason == w.REJ_CONSUMER_DEFINED


def test_qp1_drops_a_mad_with_the_wrong_qkey(fab: Fabric) -> None:
    _listen()
    soft0 = fab.devices["soft0"]
    agent = soft0.gsi.agent
    req = w.build_req("10.0.0.1", "10.0.0.2", 40000, PORT, local_comm_id=0x1234, local_qpn=0x99, starting_psn=1)
    from rdmalab.verbs.engine.packet import Pkt
    from rdmalab.wire.ib import DETH

    p = Pkt(ibcm.UD_SEND_ONLY, 0, 1, soft0.gids[1], 0xFFFF0A000002, 55410, soft0.mac, 0, req.encode(), ackreq=1)
    p.deth = DETH(q_key=0x1234, src_qp=1)
    soft0.transmit(p)
    fab.run()
    peer = fab.devices["soft1"].gsi.agent
    assert peer.counters["cm_rx_dropped"] == 1 and "Q_Key 0x1234" in peer.log[-1]
    assert agent.counters["cm_rx_msgs"] == 0  # nothing came back


def test_sidr_and_ud_sends_with_immediate_as_udaddy_does(fab: Fabric) -> None:
    srv = _listen(ps=RDMA_PS_UDP)
    cli = _client(ps=RDMA_PS_UDP)
    cli.id.create_qp(_init(e.IBV_QPT_UD))
    assert cli.id.qp is not None and cli.id.qp.qp_state == e.IBV_QPS_RTS
    cli.id.connect()
    ev = srv.event(EV.RDMA_CM_EVENT_CONNECT_REQUEST)
    conn = CMID(ev, listen_id=srv.id)
    conn.create_qp(_init(e.IBV_QPT_UD))
    conn.accept()
    ev = cli.event(EV.RDMA_CM_EVENT_ESTABLISHED)
    ud = UDParam(ev)
    assert (ud.qp_num, ud.qkey) == (conn.qpn, ibcm.RDMA_UDP_QKEY)
    assert _cm_names(fab) == ["SIDR_REQ>", "<SIDR_REP"]
    # no UDP listener on another port: SIDR_REP status 1 (unsupported) -> UNREACHABLE
    other = _client(port=PORT + 5, ps=RDMA_PS_UDP)
    other.id.connect()
    other.event(EV.RDMA_CM_EVENT_UNREACHABLE)


def test_a_cmevent_the_fabric_can_never_bring_is_an_error_not_a_hang(fab: Fabric) -> None:
    srv = _listen()
    with pytest.raises(PyverbsRDMAError, match="nothing left to do"):
        CMEvent(srv.ch)


def test_bind_to_an_address_no_device_has_names_the_devices(fab: Fabric) -> None:
    s = CMID(CMEventChannel())
    with pytest.raises(PyverbsRDMAError, match=r"no soft device has address 10\.9\.9\.9 \(have: soft0 10\.0\.0\.1"):
        s.bind_addr(AddrInfo(src="10.9.9.9", src_service=1, flags=RAI_PASSIVE))
    with pytest.raises(PyverbsRDMAError, match=r"'nonsense!' is not an IPv4 address"):
        AddrInfo(dst="nonsense!", dst_service=1)


def test_multicast_join_send_and_leave(fab: Fabric) -> None:
    # rdma_cm on RoCE (no SA): the group's MGID is its IPv4-mapped address, the Q_Key RDMA_UDP_QKEY; a UD
    # SEND to QP 0xFFFFFF reaches every QP attached to the group, the sender's own included, until it leaves.
    from rdmalab.verbs.addr import AH

    group = "230.0.0.7"
    members = []
    for src in ("10.0.0.1", "10.0.0.2"):
        s = Side()
        s.id = CMID(s.ch, port_space=RDMA_PS_UDP)
        s.id.resolve_addr(AddrInfo(src=src, dst=group))
        s.event(EV.RDMA_CM_EVENT_ADDR_RESOLVED)
        s.id.create_qp(_init(e.IBV_QPT_UD))
        s.id.join_multicast(addr=AddrInfo(src=group))
        ev = s.event(EV.RDMA_CM_EVENT_MULTICAST_JOIN)
        ud = UDParam(ev)
        assert (ud.qp_num, ud.qkey) == (0xFFFFFF, ibcm.RDMA_UDP_QKEY)
        assert ud.ah_attr.gr.dgid.gid == "0000:0000:0000:0000:0000:ffff:e600:0007"
        members.append((s, ud))
    (sender, ud), (receiver, _) = members
    rmr = receiver.id.reg_msgs(64 + 40)
    receiver.id.post_recv(rmr)
    smr = sender.id.reg_msgs(64)
    smr.write(b"to the group", 12)
    sender.id.post_ud_send(smr, AH(sender.id.pd, attr=ud.ah_attr), rqpn=0xFFFFFF, length=12)
    assert sender.id.get_send_comp().status == e.IBV_WC_SUCCESS
    wc = receiver.id.get_recv_comp()
    assert (wc.status, wc.byte_len, wc.src_qp) == (e.IBV_WC_SUCCESS, 52, sender.id.qpn)
    assert bytes(rmr.read(12, 40)) == b"to the group"
    # after leaving, the group's packets no longer reach the receiver's QP
    receiver.id.leave_multicast(AddrInfo(src=group))
    receiver.id.post_recv(rmr)
    sender.id.post_ud_send(smr, AH(sender.id.pd, attr=ud.ah_attr), rqpn=0xFFFFFF, length=12)
    assert sender.id.get_send_comp().status == e.IBV_WC_SUCCESS
    fab.run()
    assert receiver.id.qp is not None and len(receiver.id.qp.rcq) == 0
    with pytest.raises(PyverbsRDMAError, match="has not joined 230.0.0.7"):
        receiver.id.leave_multicast(AddrInfo(src=group))


def test_qp1_drops_a_mad_from_another_partition(fab: Fabric) -> None:
    _listen()
    soft0 = fab.devices["soft0"]
    req = w.build_req("10.0.0.1", "10.0.0.2", 40000, PORT, local_comm_id=0x1234, local_qpn=0x99, starting_psn=1)
    from rdmalab.verbs.engine.packet import Pkt
    from rdmalab.wire.ib import DETH

    p = Pkt(ibcm.UD_SEND_ONLY, 0, 1, soft0.gids[1], 0xFFFF0A000002, 55410, soft0.mac, 0, req.encode(), ackreq=1)
    p.deth = DETH(q_key=ibcm.GSI_QKEY, src_qp=1)
    p.pkey = 0x8001  # partition 1, full member: not the default partition
    fab.devices["soft1"].receive(p)
    peer = fab.devices["soft1"].gsi.agent
    assert peer.counters["cm_rx_dropped"] == 1 and "P_Key 0x8001" in peer.log[-1]
    p2 = Pkt(ibcm.UD_SEND_ONLY, 1, 1, soft0.gids[1], 0xFFFF0A000002, 55410, soft0.mac, 0, req.encode(), ackreq=1)
    p2.deth = DETH(q_key=ibcm.GSI_QKEY, src_qp=1)
    p2.pkey = 0x7FFF  # the default partition, limited member: matches 0xFFFF (rxe pkey_match)
    fab.devices["soft1"].receive(p2)
    fab.run()
    assert peer.counters["cm_rx_msgs"] == 1


# ---------------------------------------------------------------------- rdma_cm over IB (cmid_ib): the listener's
# checks of the cma_hdr and the IB CM's reports as rdma_cm events
def _last_cm(fab: Fabric) -> w.CMMessage:
    from rdmalab.wire.frame import decode_ethernet

    last = [ev for ev in fab.trace if ev.kind == "sent" and ev.qpn == 1][-1]
    msg = w.CMMessage.from_packet(decode_ethernet(last.frame))  # type: ignore[attr-defined]
    assert msg is not None
    return msg


def test_a_req_for_another_address_than_the_listeners_gets_rej_8(fab: Fabric) -> None:
    srv = _listen()
    soft0, soft1 = fab.devices["soft0"], fab.devices["soft1"]
    req = w.build_req("10.0.0.1", "10.0.0.9", 40000, PORT, local_comm_id=0x1234, local_qpn=0x99, starting_psn=1)
    soft0.gsi.agent.send(0xFFFF0A000002, req)  # to 10.0.0.2's QP1, its cma_hdr naming 10.0.0.9
    fab.run()
    rej = _last_cm(fab)
    assert isinstance(rej.body, w.CMRej) and rej.body.reason == w.REJ_INVALID_SERVICE_ID
    assert "REQ for 10.0.0.9, not this listener's 10.0.0.2 (cma_match_private_data)" in soft1.gsi.agent.log
    assert not srv.id.backlog and soft1.gsi.agent.conns == {}


class _Reports:
    def __init__(self) -> None:
        self.got: list[tuple[str, dict[str, object]]] = []

    def cm_event(self, conn: object, kind: str, msg: object, **info: object) -> None:
        self.got.append((kind, info))


def test_a_sidr_req_whose_cma_hdr_is_not_version_0_gets_a_sidr_rep_that_rejects(fab: Fabric) -> None:
    _listen(ps=RDMA_PS_UDP)
    soft0 = fab.devices["soft0"]
    hdr = bytearray(w.IPCMHeader.for_addresses("10.0.0.1", "10.0.0.2", 40000).encode())
    hdr[0] = 1  # cma_version 1
    h = _Reports()
    soft0.gsi.agent.sidr_request(h, 0xFFFF0A000002, service_id(RDMA_PS_UDP, PORT), bytes(hdr))
    fab.run()
    assert h.got == [("sidr_rep", {"status": ibcm.SIDR_REJECT, "qpn": 0, "qkey": 0})]
    assert _cm_names(fab) == ["SIDR_REQ>", "<SIDR_REP"]


def test_connect_response_without_a_qp_then_establish_sends_the_rtu(fab: Fabric) -> None:
    srv, cli = _listen(), _client()
    cli.id.connect(ConnParam(qp_num=0x77))  # a QP of the program's own, named by number
    conn = CMID(srv.event(EV.RDMA_CM_EVENT_CONNECT_REQUEST), listen_id=srv.id)
    conn.create_qp(_init())
    conn.accept()
    ev = cli.event(EV.RDMA_CM_EVENT_CONNECT_RESPONSE)
    assert str(cli.id.state) == "connecting" and _cm_names(fab) == ["REQ>", "<REP"]
    cli.id.establish()
    srv_ev = CMEvent(srv.ch)
    assert srv_ev.event_type == EV.RDMA_CM_EVENT_ESTABLISHED and srv_ev.id is conn
    assert _cm_names(fab) == ["REQ>", "<REP", "RTU>"]
    assert str(cli.id.state) == str(conn.state) == "established" and ev.id is cli.id


def test_a_rep_the_qp_cannot_take_is_connect_error_and_rej_28(fab: Fabric) -> None:
    srv, cli, conn = _connect(fab)
    assert cli.id.qp is not None
    cli.id.qp.to_error()  # the REP's RTR cannot be reached from ERR
    conn.accept()
    ev = cli.event(EV.RDMA_CM_EVENT_CONNECT_ERROR)
    assert ev.status == -errno.EINVAL and str(cli.id.state) == "error"
    rej = srv.event(EV.RDMA_CM_EVENT_REJECTED)
    assert rej.status == w.REJ_CONSUMER_DEFINED and _cm_names(fab) == ["REQ>", "<REP", "REJ>"]
