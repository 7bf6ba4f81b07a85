"""rdma_cm over native InfiniBand on the soft engine, as on an HCA with IPoIB addresses: the peer's
address resolves to its port GID, the route to its LID (the SA's PathRecord when the subnet has a
subnet manager), and the CM's MADs cross the subnet as native IB UD packets on QP1, the REQ's
primary path carrying both LIDs (IBA Vol 1 12.6.5); tshark reads them."""

from __future__ import annotations

import errno
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from ib_util import two_switches
from tshark_util import requires_tshark

from rdmalab.capture.linktypes import ERF
from rdmalab.capture.reader import read
from rdmalab.fabric.ibfabric import IBFabric
from rdmalab.fabric.ibfabric_subnet import SubnetMADs, fabric_on_subnet, path_record, use_sa
from rdmalab.fabric.ibsm import SubnetManager
from rdmalab.fabric.ibsm_sa import SubnetAdministrator, answer
from rdmalab.fabric.ibsubnet import Subnet
from rdmalab.verbs import enums as e
from rdmalab.verbs.addr import AH
from rdmalab.verbs.cm_enums import RAI_PASSIVE, RDMA_PS_UDP, rdma_cm_event_type
from rdmalab.verbs.cmid import CMID, AddrInfo, CMEvent, CMEventChannel, ConnParam, UDParam
from rdmalab.verbs.device import set_default_devices
from rdmalab.verbs.engine.gsi_link import ud_payload
from rdmalab.verbs.engine.ibcm import GSI_QKEY, MAX_CM_RETRIES, RDMA_UDP_QKEY, req_timeout_ms
from rdmalab.verbs.qp import QPCap, QPInitAttr
from rdmalab.wire import cm as w
from rdmalab.wire.ib import BTH, DETH, LRH

EV = rdma_cm_event_type
PORT = 7174
NET = Path(__file__).resolve().parent.parent / "data" / "ib" / "fattree2.net"


@pytest.fixture
def use() -> Iterator[object]:
    """Make a fabric the one rdma_cm finds (as ``rdmalab link add`` does for a real one); reset after."""

    def make_default(fab: IBFabric) -> IBFabric:
        set_default_devices(lambda: fab)
        return fab

    yield make_default
    set_default_devices(None)


class Side:
    def __init__(self) -> None:
        self.ch = CMEventChannel()
        self.id = CMID(self.ch)

    def event(self, expect: int) -> CMEvent:
        ev = CMEvent(self.ch)
        assert ev.event_type == expect, f"{ev.event_str()} (status {ev.status}), expected {EV(expect).name}"
        return ev


def _init() -> QPInitAttr:
    return QPInitAttr(qp_type=e.IBV_QPT_RC, cap=QPCap(max_send_wr=8, max_recv_wr=8))


def _connect(src: str | None, dst: str) -> tuple[Side, Side, CMID]:
    """rping's calls: the server listens on ``dst``, the client resolves, connects; the server accepts."""
    srv, cli = Side(), Side()
    srv.id.bind_addr(AddrInfo(src=dst, src_service=PORT, flags=RAI_PASSIVE))
    srv.id.listen()
    cli.id.resolve_addr(AddrInfo(src=src, dst=dst, dst_service=PORT))
    cli.event(EV.RDMA_CM_EVENT_ADDR_RESOLVED)
    cli.id.resolve_route()
    cli.event(EV.RDMA_CM_EVENT_ROUTE_RESOLVED)
    cli.id.create_qp(_init())
    cli.id.connect(ConnParam())
    conn = CMID(srv.event(EV.RDMA_CM_EVENT_CONNECT_REQUEST), listen_id=srv.id)
    conn.create_qp(_init())
    return srv, cli, conn


def _send_and_write(srv: Side, cli: Side, conn: CMID) -> None:
    rx, target = conn.reg_msgs(64), conn.reg_write(4096)
    conn.post_recv(rx)
    conn.accept(ConnParam())
    cli.event(EV.RDMA_CM_EVENT_ESTABLISHED)
    srv.event(EV.RDMA_CM_EVENT_ESTABLISHED)
    m = cli.id.reg_msgs(64)
    m.write(b"hello over IB", 13)
    cli.id.post_send(m, length=13)
    assert cli.id.get_send_comp().status == e.IBV_WC_SUCCESS
    wc = conn.get_recv_comp()
    assert (wc.status, wc.byte_len, bytes(rx.read(13, 0))) == (e.IBV_WC_SUCCESS, 13, b"hello over IB")
    data = bytes((i * 7) % 251 for i in range(3000))  # 2 packets at the path MTU of 2048
    src = cli.id.reg_msgs(4096)
    src.write(data, len(data))
    cli.id.post_write(src, len(data), target.buf, target.rkey, e.IBV_SEND_SIGNALED)
    assert cli.id.get_send_comp().status == e.IBV_WC_SUCCESS
    assert bytes(target.read(len(data), 0)) == data


def _disconnect(srv: Side, cli: Side, conn: CMID) -> None:
    cli.id.disconnect()
    srv.event(EV.RDMA_CM_EVENT_DISCONNECTED)
    conn.disconnect()
    cli.event(EV.RDMA_CM_EVENT_DISCONNECTED)


def test_rdma_cm_over_ib_across_two_switches(use, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    fab = use(two_switches(frames=True))
    pcap = tmp_path / "cm.pcap"
    fab.tap("sw1", "sw2", str(pcap))
    hca1, hca2 = fab.node("hca1"), fab.node("hca2")
    srv, cli, conn = _connect("10.0.0.1", "10.0.0.2")
    # resolve_addr: the peer's address is its port GID (subnet prefix + port GUID); the route its LID
    assert cli.id.dst_gid == hca2.device.gids[0] == (0xFE80 << 112) | hca2.guid
    path = cli.id.ib_path
    assert path is not None and (path.slid, path.dlid, path.sl, path.from_sa) == (1, 2, 0, False)
    _send_and_write(srv, cli, conn)
    # both QPs address the peer by LID, no GRH, as on an HCA
    assert cli.id.qp is not None and conn.qp is not None
    for qp, dlid in ((cli.id.qp, hca2.lid), (conn.qp, hca1.lid)):
        assert (qp.attr.ah_attr.dlid, qp.attr.ah_attr.is_global, qp.attr.path_mtu) == (dlid, 0, e.IBV_MTU_2048)
    _disconnect(srv, cli, conn)
    fab.close()
    # the CM's MADs crossed sw1-sw2 as native IB UD packets on QP1: LRH with the LIDs, VL0, DETH with
    # the GSI Q_Key, source QP 1; the REQ's primary path names both ports' LIDs
    pkts = [cp.packet for cp in read(pcap)]
    cm = [p for p in pkts if p[BTH].destqp == 1]
    msgs = [w.CMMessage.from_packet(p) for p in cm]
    # what QP1 takes from such a packet (the UD payload between DETH and ICRC/VCRC) is the same MAD
    ib = [bytes(p.data[16:16 + p[ERF].wlen]) for p in cm]  # the IB packet after its ERF record's header
    assert [m.encode() if m else None for m in msgs] == [ud_payload(b, hca1.device) for b in ib]
    names = [m.name for m in msgs if m is not None]
    assert names == ["REQ", "REP", "RTU", "DREQ", "DREP"]
    for p, name in zip(cm, names, strict=True):
        lids = (p[LRH].slid, p[LRH].dlid)
        assert lids == ((1, 2) if name in ("REQ", "RTU", "DREQ") else (2, 1)) and p[LRH].vl == 0
        assert (p[DETH].q_key, p[DETH].src_qp, p.crc_status, p.vcrc_status) == (GSI_QKEY, 1, "good", "good")
    req = msgs[0].body if msgs[0] is not None else None
    assert isinstance(req, w.CMReq)
    assert (req.primary_local_lid, req.primary_remote_lid, req.primary_subnet_local) == (1, 2, 1)
    assert (req.primary_local_gid, req.primary_remote_gid) == (hca1.device.gids[0], hca2.device.gids[0])
    assert fab.drops() == 0


@requires_tshark
@pytest.mark.tshark
def test_tshark_reads_the_cm_mads_on_ib_with_the_lids_in_the_req(use, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    fab = use(two_switches(frames=True))
    pcap = tmp_path / "cm.pcap"
    fab.tap("sw1", "sw2", str(pcap))
    srv, cli, conn = _connect("10.0.0.1", "10.0.0.2")
    _send_and_write(srv, cli, conn)
    _disconnect(srv, cli, conn)
    fab.close()
    out = subprocess.run(["tshark", "-n", "-r", str(pcap), "-T", "json", "-e", "infiniband.lrh.slid",
                          "-e", "infiniband.lrh.dlid", "-e", "infiniband.lrh.vl", "-e", "infiniband.bth.destqp",
                          "-e", "_ws.col.Info", "-e", "_ws.malformed", "-e", "infiniband.cm.req.prim_locallid",
                          "-e", "infiniband.cm.req.prim_remotelid", "-e", "infiniband.cm.req.prim_subnetlocal"],
                         capture_output=True, text=True, check=True).stdout
    rows = [r["_source"]["layers"] for r in json.loads(out)]
    assert rows and not any("_ws.malformed" in r for r in rows)
    cm = [r for r in rows if int(r["infiniband.bth.destqp"][0], 0) == 1]
    assert [r["_ws.col.Info"][0] for r in cm] == ["CM: ConnectRequest", "CM: ConnectReply", "CM: ReadyToUse",
                                                   "CM: DisconnectRequest", "CM: DisconnectReply"]
    assert [(r["infiniband.lrh.slid"][0], r["infiniband.lrh.dlid"][0]) for r in cm] == [
        ("1", "2"), ("2", "1"), ("1", "2"), ("1", "2"), ("2", "1")]
    assert all(int(r["infiniband.lrh.vl"][0], 0) == 0 for r in cm)
    req = cm[0]
    assert (req["infiniband.cm.req.prim_locallid"], req["infiniband.cm.req.prim_remotelid"]) == (["1"], ["2"])
    assert int(req["infiniband.cm.req.prim_subnetlocal"][0], 0) == 1


def test_an_address_nobody_has_is_addr_error_after_the_timeout(use) -> None:  # type: ignore[no-untyped-def]
    fab = use(two_switches())
    cli = Side()
    t0 = fab.now_ns
    cli.id.resolve_addr(AddrInfo(dst="10.0.0.9", dst_service=PORT), timeout_ms=500)  # IPoIB's /24, no such HCA
    ev = cli.event(EV.RDMA_CM_EVENT_ADDR_ERROR)
    assert ev.status == -errno.ETIMEDOUT and fab.now_ns - t0 == 500_000_000
    assert cli.id.device is fab.devices["hca1"] and cli.id.dst_gid is None


def test_a_port_nobody_listens_on_is_rejected_with_reason_8(use) -> None:  # type: ignore[no-untyped-def]
    use(two_switches())
    cli = Side()
    cli.id.resolve_addr(AddrInfo(src="10.0.0.1", dst="10.0.0.2", dst_service=PORT))
    cli.event(EV.RDMA_CM_EVENT_ADDR_RESOLVED)
    cli.id.resolve_route()
    cli.event(EV.RDMA_CM_EVENT_ROUTE_RESOLVED)
    cli.id.create_qp(_init())
    cli.id.connect(ConnParam())
    assert cli.event(EV.RDMA_CM_EVENT_REJECTED).status == w.REJ_INVALID_SERVICE_ID


def test_the_route_comes_from_the_sas_path_record(use) -> None:  # type: ignore[no-untyped-def]
    """On a subnet our SM brought up, resolve_route asks the SA (a SubnAdmGet(PathRecord) to the SM's
    LID); the QP gets the record's DLID and SL, and the connection carries data the SM's way."""
    subnet = Subnet.from_file(str(NET))
    mads = SubnetMADs(subnet)
    sm_port = mads.port("H1", issm=True)
    sm = SubnetManager(sm_port)
    sm.run()
    sa = SubnetAdministrator(sm)
    mads.serve(sm_port, lambda req: answer(sm, sa, req))
    fab = use(fabric_on_subnet(subnet))
    use_sa(fab, mads)
    h1, h8 = fab.node("H1"), fab.node("H8")
    expect = path_record(mads.port("H1"), h1.device.sm_lid, h1.lid, h8.lid)
    before = len(sm.events)
    srv, cli, conn = _connect(_addr(h1), _addr(h8))
    assert [ev.src for ev in sm.events[before:]] == ["H1", "SM"]  # the route: one query, one answer
    path = cli.id.ib_path
    assert path is not None and path.from_sa
    assert (path.dlid, path.sl, path.mtu) == (expect.dlid, expect.sl, expect.mtu) == (h8.lid, 0, 4)
    _send_and_write(srv, cli, conn)
    assert cli.id.qp is not None and cli.id.qp.attr.ah_attr.dlid == h8.lid
    _disconnect(srv, cli, conn)
    assert fab.drops() == 0


def _addr(hca: object) -> str:
    v = hca.device.ipv4  # type: ignore[attr-defined]
    return f"{v >> 24 & 255}.{v >> 16 & 255}.{v >> 8 & 255}.{v & 255}"


def test_an_hca_is_known_by_the_ipoib_address_it_was_given(use) -> None:  # type: ignore[no-untyped-def]
    fab = IBFabric()
    fab.add_hca("a", ip="192.168.7.1")
    fab.add_hca("b", ip="192.168.7.20")
    fab.add_switch("sw")
    fab.link("a", "sw")
    fab.link("b", "sw")
    fab.min_hop_routes()
    use(fab)
    with pytest.raises(ValueError, match="already another HCA's"):
        fab.add_hca("c", ip="192.168.7.20")
    with pytest.raises(ValueError, match="not an IPv4 address"):
        fab.add_hca("d", ip="fe80::1")
    srv, cli, conn = _connect(None, "192.168.7.20")  # no source address: the route picks a's port
    assert cli.id.device is fab.devices["a"] and cli.id.dst_gid == fab.node("b").device.gids[0] and conn.dst_addr == "192.168.7.1"
    _send_and_write(srv, cli, conn)


def test_sidr_on_ib_gives_the_peers_lid_and_a_ud_send_reaches_it(use) -> None:  # type: ignore[no-untyped-def]
    """udaddy's calls on IB: the SIDR_REQ/SIDR_REP cross the subnet on QP1; the ESTABLISHED event's
    address vector names the peer's LID (no GRH), and a UD SEND by it arrives."""
    fab = use(two_switches())
    srv, cli = Side(), Side()
    srv.id = CMID(srv.ch, port_space=RDMA_PS_UDP)
    cli.id = CMID(cli.ch, port_space=RDMA_PS_UDP)
    srv.id.bind_addr(AddrInfo(src="10.0.0.2", src_service=PORT, flags=RAI_PASSIVE))
    srv.id.listen()
    cli.id.resolve_addr(AddrInfo(dst="10.0.0.2", dst_service=PORT))
    cli.event(EV.RDMA_CM_EVENT_ADDR_RESOLVED)
    cli.id.resolve_route()
    cli.event(EV.RDMA_CM_EVENT_ROUTE_RESOLVED)
    ud_init = QPInitAttr(qp_type=e.IBV_QPT_UD, cap=QPCap(max_send_wr=8, max_recv_wr=8))
    cli.id.create_qp(ud_init)
    cli.id.connect()
    conn = CMID(srv.event(EV.RDMA_CM_EVENT_CONNECT_REQUEST), listen_id=srv.id)
    conn.create_qp(ud_init)
    rx = conn.reg_msgs(64 + 40)  # a UD receive buffer starts with the 40 bytes of a GRH
    conn.post_recv(rx)
    conn.accept()
    ud = UDParam(cli.event(EV.RDMA_CM_EVENT_ESTABLISHED))
    assert (ud.qp_num, ud.qkey) == (conn.qpn, RDMA_UDP_QKEY)
    assert (ud.ah_attr.dlid, ud.ah_attr.is_global) == (fab.node("hca2").lid, 0)
    assert cli.id.pd is not None
    m = cli.id.reg_msgs(64)
    m.write(b"udaddy on IB", 12)
    cli.id.post_ud_send(m, AH(cli.id.pd, attr=ud.ah_attr), ud.qp_num, length=12)
    assert cli.id.get_send_comp().status == e.IBV_WC_SUCCESS
    wc = conn.get_recv_comp()
    assert (wc.status, wc.byte_len, wc.slid) == (e.IBV_WC_SUCCESS, 12 + 40, fab.node("hca1").lid)
    assert bytes(rx.read(12, 40)) == b"udaddy on IB"


def test_a_path_the_sa_does_not_have_is_route_error(use) -> None:  # type: ignore[no-untyped-def]
    """The SM's tables lose H8's route at H1's leaf: the SA answers the PathRecord query with status
    NO_RECORDS, which rdma_cm reports as RDMA_CM_EVENT_ROUTE_ERROR, -EINVAL (ib_sa's status for a MAD
    status); the CMID may resolve the route again."""
    subnet = Subnet.from_file(str(NET))
    mads = SubnetMADs(subnet)
    sm_port = mads.port("H1", issm=True)
    sm = SubnetManager(sm_port)
    sm.run()
    sa = SubnetAdministrator(sm)
    mads.serve(sm_port, lambda req: answer(sm, sa, req))
    fab = use(fabric_on_subnet(subnet))
    use_sa(fab, mads)
    h1, h8 = fab.node("H1"), fab.node("H8")
    leaf1 = sm.nodes[subnet.node("Leaf1").guid]
    kept = leaf1.lft.pop(h8.lid)
    cli = Side()
    cli.id.resolve_addr(AddrInfo(src=_addr(h1), dst=_addr(h8), dst_service=PORT))
    cli.event(EV.RDMA_CM_EVENT_ADDR_RESOLVED)
    cli.id.resolve_route()
    assert cli.event(EV.RDMA_CM_EVENT_ROUTE_ERROR).status == -errno.EINVAL and cli.id.ib_path is None
    leaf1.lft[h8.lid] = kept
    cli.id.resolve_route()
    cli.event(EV.RDMA_CM_EVENT_ROUTE_RESOLVED)
    assert cli.id.ib_path is not None and cli.id.ib_path.dlid == h8.lid


def test_a_req_the_subnet_drops_is_unreachable_after_the_cms_retries(use) -> None:  # type: ignore[no-untyped-def]
    """The route resolved, then sw1's table loses hca2's LID: every REQ is discarded at sw1
    (PortXmitDiscards), and after ib_cm's 15 tries rdma_cm reports UNREACHABLE, -ETIMEDOUT."""
    fab = use(two_switches())
    cli = Side()
    cli.id.resolve_addr(AddrInfo(src="10.0.0.1", dst="10.0.0.2", dst_service=PORT))
    cli.event(EV.RDMA_CM_EVENT_ADDR_RESOLVED)
    cli.id.resolve_route()
    cli.event(EV.RDMA_CM_EVENT_ROUTE_RESOLVED)
    del fab.node("sw1").lft[fab.node("hca2").lid]
    cli.id.create_qp(_init())
    t0 = fab.now_ns
    cli.id.connect(ConnParam())
    assert cli.event(EV.RDMA_CM_EVENT_UNREACHABLE).status == -errno.ETIMEDOUT
    # the REQ and its retries left hca1 and were discarded at sw1's input port, nothing went further
    assert fab.port("hca1", "sw1").counters["PortXmitPkts"] == MAX_CM_RETRIES + 1
    assert fab.port("sw1", "hca1").counters["PortXmitDiscards"] == MAX_CM_RETRIES + 1 == fab.drops()
    assert fab.port("sw1", "sw2").counters["PortXmitPkts"] == 0
    assert fab.now_ns - t0 == pytest.approx((MAX_CM_RETRIES + 1) * req_timeout_ms() * 1e6, rel=1e-3)


def test_a_qp1_packet_too_short_for_its_headers_is_named() -> None:
    fab = two_switches()
    with pytest.raises(ValueError, match="native IB packet of 20 bytes"):
        ud_payload(bytes(20), fab.devices["hca1"])
