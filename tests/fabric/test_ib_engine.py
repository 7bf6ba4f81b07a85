"""The engine on native InfiniBand: RC WRITE and SEND between two HCAs across two switches, addressed
by LID; the packets' LRH, ICRC and VCRC checked by our decoder and by tshark."""

from __future__ import annotations

import ipaddress
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from ib_util import connect_by_lid, side, two_switches, wait
from tshark_util import requires_tshark, tshark_path

from rdmalab.capture.linktypes import ERF
from rdmalab.capture.reader import read
from rdmalab.fabric.ibfabric import NO_PORT, IBFabric
from rdmalab.fabric.sim import Fabric
from rdmalab.verbs import enums as e
from rdmalab.verbs.addr import AH, AHAttr, GlobalRoute
from rdmalab.verbs.cq import CQ
from rdmalab.verbs.device import Context
from rdmalab.verbs.engine.ibframe import ib_frame, ib_size
from rdmalab.verbs.engine.packet import Pkt
from rdmalab.verbs.mr import MR
from rdmalab.verbs.pd import PD
from rdmalab.verbs.pyverbs_error import PyverbsRDMAError
from rdmalab.verbs.qp import QP, QPAttr, QPCap, QPInitAttr
from rdmalab.verbs.wr import SGE, RecvWR, SendWR
from rdmalab.wire.frame import decode_ib
from rdmalab.wire.ib import BTH, GRH, LNH_IBA_LOCAL, LRH, RETH

WRITE_ONLY, WRITE_FIRST, WRITE_MIDDLE, WRITE_LAST, ACK, SEND_ONLY = 0x0A, 0x06, 0x07, 0x08, 0x11, 0x04


def test_query_port_reports_infiniband_and_the_lid() -> None:
    fab = two_switches()
    a = side(fab, "hca1")
    port = a.ctx.query_port(1)
    assert port.link_layer == e.IBV_LINK_LAYER_INFINIBAND
    assert port.lid == 1 and fab.hcas[1].device.lid == 2
    assert a.ctx.query_gid_type(1, 0) == e.IBV_GID_TYPE_IB
    gid = int(a.ctx.query_gid(1, 0))
    assert gid >> 64 == 0xFE80 << 48  # the default subnet prefix, then the port GUID
    assert gid & (1 << 64) - 1 == a.ctx.query_device().node_guid == fab.hcas[0].guid
    assert port.gid_tbl_len == 1


def test_roce_devices_keep_ethernet() -> None:
    fab = Fabric()
    fab.add_device("soft0")
    ctx = side(fab, "soft0").ctx
    assert ctx.query_port(1).link_layer == e.IBV_LINK_LAYER_ETHERNET
    assert ctx.query_gid_type(1, 1) == e.IBV_GID_TYPE_ROCE_V2


def _write(fab: IBFabric, n: int = 4000) -> tuple[bytes, bytes, list]:
    a, b = side(fab, "hca1"), side(fab, "hca2")
    connect_by_lid(a, b)
    data = bytes((i * 7) % 251 for i in range(n))
    a.mr.write(data, n)
    wr = SendWR(wr_id=7, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(a.mr.buf, n, a.mr.lkey)],
                send_flags=e.IBV_SEND_SIGNALED)
    wr.set_wr_rdma(b.mr.rkey, b.mr.buf + 100)
    a.qp.post_send(wr)
    wcs = wait(fab, a.cq)
    return data, b.mr.read(n, 100), wcs


def test_write_across_two_switches_by_lid() -> None:
    fab = two_switches()
    data, got, wcs = _write(fab)
    assert got == data
    assert [(w.wr_id, w.status, w.opcode) for w in wcs] == [(7, e.IBV_WC_SUCCESS, e.IBV_WC_RDMA_WRITE)]
    # 4000 bytes at MTU 1024: four requests crossed every link, and the ACK(s) back
    for a, b in (("hca1", "sw1"), ("sw1", "sw2"), ("sw2", "hca2")):
        assert fab.port(a, b).counters["PortXmitPkts"] == 4
        assert fab.port(b, a).counters["PortXmitPkts"] >= 1
    assert fab.drops() == 0


def test_send_across_two_switches_by_lid() -> None:
    fab = two_switches(frames=True)
    a, b = side(fab, "hca1"), side(fab, "hca2")
    connect_by_lid(a, b)
    b.qp.post_recv(RecvWR(wr_id=3, num_sge=1, sg=[SGE(b.mr.buf, 256, b.mr.lkey)]))
    a.mr.write(b"hello, infiniband", 17)
    a.qp.post_send(SendWR(wr_id=9, opcode=e.IBV_WR_SEND, num_sge=1, sg=[SGE(a.mr.buf, 17, a.mr.lkey)],
                          send_flags=e.IBV_SEND_SIGNALED))
    (rwc,) = wait(fab, b.cq)
    (swc,) = wait(fab, a.cq)
    assert (rwc.wr_id, rwc.status, rwc.opcode, rwc.byte_len) == (3, e.IBV_WC_SUCCESS, e.IBV_WC_RECV, 17)
    assert (swc.wr_id, swc.status, swc.opcode) == (9, e.IBV_WC_SUCCESS, e.IBV_WC_SEND)
    assert b.mr.read(17, 0) == b"hello, infiniband"


@pytest.mark.parametrize(("at", "bad"), [(40, ("bad", "bad")), (-1, ("good", "bad"))])
def test_a_bad_vcrc_or_icrc_is_dropped_by_the_hca(at: int, bad: tuple[str, str]) -> None:
    """A payload byte flipped spoils both CRCs; the VCRC's own byte only the VCRC (the ICRC is
    end to end, the VCRC per link): either way the HCA drops the packet, and the resend arrives."""
    fab = two_switches(frames=True)
    a, b = side(fab, "hca1"), side(fab, "hca2")
    connect_by_lid(a, b)
    hca2 = fab.hcas[1]
    before = hca2.device.counters["dropped"]
    good = fab.port("sw2", "hca2")
    orig = fab._deliver
    spoilt: list[Any] = []

    def corrupt(hca, ip):  # type: ignore[no-untyped-def]
        if hca is hca2 and ip.pkt.opcode == WRITE_ONLY and not spoilt:
            spoilt.append(ip.pkt.psn)
            raw = bytearray(ip.frame)
            raw[at] ^= 0x01
            ip.frame = bytes(raw)
            d = decode_ib(ip.frame, lenient=True)
            spoilt.append((d.crc_status, d.vcrc_status))
        orig(hca, ip)

    fab._deliver = corrupt  # type: ignore[method-assign]
    wr = SendWR(wr_id=1, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(a.mr.buf, 64, a.mr.lkey)],
                send_flags=e.IBV_SEND_SIGNALED)
    wr.set_wr_rdma(b.mr.rkey, b.mr.buf)
    a.qp.post_send(wr)
    (wc,) = wait(fab, a.cq)
    assert wc.status == e.IBV_WC_SUCCESS  # the requester's timeout resent it
    assert hca2.device.counters["dropped"] == before + 1
    assert spoilt[1] == bad
    assert good.counters["PortXmitPkts"] >= 2


def test_bad_address_vectors_are_refused_with_the_reason() -> None:
    fab = two_switches()
    a, b = side(fab, "hca1"), side(fab, "hca2")
    attr = QPAttr(qp_state=e.IBV_QPS_INIT, port_num=1, path_mtu=e.IBV_MTU_1024)
    attr.dest_qp_num = b.qp.qp_num
    for ah, why in ((AHAttr(dlid=0), "not a unicast LID"), (AHAttr(dlid=0xC001), "not a unicast LID"),
                    (AHAttr(dlid=77), "no port of the subnet has LID 0x4d"), (AHAttr(dlid=2, sl=16), "sl 16"),
                    (AHAttr(is_global=1, gr=GlobalRoute(dgid=b.ctx.query_gid(1, 0), sgid_index=3)), "sgid_index 3"),
                    (AHAttr(is_global=1, gr=GlobalRoute(dgid=0xFE80 << 112 | 77)), "cannot resolve")):
        attr.ah_attr = ah
        with pytest.raises(PyverbsRDMAError, match=why):
            a.qp.to_rtr(attr)


def test_lft_blocks_and_unrouted_lids() -> None:
    fab = two_switches()
    sw1 = fab.switches[0]
    block = sw1.lft_block(0)
    assert block[1] == fab.port("sw1", "hca1").num and block[2] == fab.port("sw1", "sw2").num
    assert block[3] == 0 and block[0] == NO_PORT  # its own LID: port 0; LID 0: none
    with pytest.raises(ValueError, match="64 entries"):
        sw1.set_lft(0, [1, 2])
    with pytest.raises(ValueError, match="port 99"):
        sw1.set_lft(0, [99] * 64)
    # clear LID 2 in sw1: the WRITE is discarded there, counted, and never completes
    entries = list(block)
    entries[2] = NO_PORT
    sw1.set_lft(0, entries)
    assert 2 not in sw1.lft
    a, b = side(fab, "hca1"), side(fab, "hca2")
    connect_by_lid(a, b)
    wr = SendWR(wr_id=1, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(a.mr.buf, 64, a.mr.lkey)],
                send_flags=e.IBV_SEND_SIGNALED)
    wr.set_wr_rdma(b.mr.rkey, b.mr.buf)
    a.qp.post_send(wr)
    fab.run_us(100)
    assert fab.port("sw1", "hca1").counters["PortXmitDiscards"] >= 1
    assert fab.port("sw1", "sw2").counters["PortXmitPkts"] == 0


def test_the_lrh_on_the_wire(tmp_path: Path) -> None:
    fab = two_switches(frames=True)
    path = tmp_path / "write.pcap"
    fab.tap("sw1", "sw2", str(path))
    _write(fab, 3000)
    fab.close()
    pkts = [cp.packet for cp in read(path)]
    assert len(pkts) >= 4
    for p in pkts:
        assert p.crc_status == "good" and p.vcrc_status == "good" and not p.problems
        lrh = p[LRH]
        assert lrh.lnh == LNH_IBA_LOCAL and lrh.vl == 0 and lrh.sl == 0
        assert lrh.pktlen * 4 + 2 == p[ERF].wlen  # PktLen: LRH through ICRC, in words; the VCRC after it
    reqs = [p for p in pkts if p[BTH].opcode != ACK]
    assert [p[BTH].opcode for p in reqs] == [WRITE_FIRST, WRITE_MIDDLE, WRITE_LAST]
    assert {(p[LRH].slid, p[LRH].dlid) for p in reqs} == {(1, 2)}
    assert {(p[LRH].slid, p[LRH].dlid) for p in pkts if p[BTH].opcode == ACK} == {(2, 1)}


@requires_tshark
@pytest.mark.tshark
def test_tshark_decodes_the_write_as_infiniband(tmp_path: Path) -> None:
    fab = two_switches(frames=True)
    path = tmp_path / "write.pcap"
    fab.tap("sw1", "sw2", str(path))
    _write(fab, 3000)
    fab.close()
    out = subprocess.run(["tshark", "-n", "-r", str(path), "-T", "json", "-e", "infiniband.lrh.dlid",
                          "-e", "infiniband.lrh.slid", "-e", "infiniband.bth.opcode", "-e", "_ws.malformed",
                          "-e", "infiniband.invariant.crc", "-e", "infiniband.variant.crc"],
                         capture_output=True, text=True, check=True).stdout
    rows = [r["_source"]["layers"] for r in json.loads(out)]
    assert rows and not any("_ws.malformed" in r for r in rows)
    got = [(int(r["infiniband.lrh.slid"][0]), int(r["infiniband.lrh.dlid"][0]), int(r["infiniband.bth.opcode"][0]))
           for r in rows]
    pkts = [cp.packet for cp in read(path)]
    assert got == [(p[LRH].slid, p[LRH].dlid, p[BTH].opcode) for p in pkts]
    assert [op for _, _, op in got if op != ACK] == [WRITE_FIRST, WRITE_MIDDLE, WRITE_LAST]
    assert {(s, d) for s, d, op in got if op == ACK} == {(2, 1)}
    # tshark 4.0 shows the CRCs without checking them: the values it reads where the IBA puts them are
    # the ones our CRC functions compute over the bytes before them (checked on ConnectX captures)
    # (tshark prints each as its bytes in wire order read as a big-endian number; the IBA sends them
    # least significant byte first)
    def as_tshark(value: int, n: int) -> int:
        return int.from_bytes(value.to_bytes(n, "little"), "big")

    for r, p in zip(rows, pkts, strict=True):
        assert int(r["infiniband.invariant.crc"][0], 16) == as_tshark(p.crc_expected, 4)
        assert int(r["infiniband.variant.crc"][0], 16) == as_tshark(p.vcrc_expected, 2)


def _ud_side(fab: IBFabric, name: str) -> tuple[Any, Any, Any, Any]:
    ctx = Context(name=name, fabric=fab)
    pd = PD(ctx)
    cq = CQ(ctx, 16)
    mr = MR(pd, 4096, e.IBV_ACCESS_LOCAL_WRITE)
    qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_UD, scq=cq, rcq=cq,
                           cap=QPCap(max_send_wr=4, max_recv_wr=4, max_send_sge=1, max_recv_sge=1)))
    attr = QPAttr(qp_state=e.IBV_QPS_INIT, port_num=1)
    attr.qkey = 0x1234
    qp.to_rts(attr)
    return pd, cq, mr, qp


def test_ud_by_lid_and_the_reply_from_the_wc() -> None:
    """UD on an IB port: AH(dlid) to send; the receive WC has no GRH and names the sender's LID, and
    AH(pd, wc=...) answers it (as on an HCA: the first 40 bytes of the buffer are the GRH's, unwritten)."""
    fab = two_switches(frames=True)
    pa, cqa, mra, qpa = _ud_side(fab, "hca1")
    pb, cqb, mrb, qpb = _ud_side(fab, "hca2")
    mrb.write(b"\xee" * 40, 40)
    qpb.post_recv(RecvWR(wr_id=1, num_sge=1, sg=[SGE(mrb.buf, 1024, mrb.lkey)]))
    mra.write(b"ping", 4)
    wr = SendWR(wr_id=2, opcode=e.IBV_WR_SEND, num_sge=1, sg=[SGE(mra.buf, 4, mra.lkey)], send_flags=e.IBV_SEND_SIGNALED)
    wr.set_wr_ud(AH(pa, attr=AHAttr(dlid=2, sl=0, is_global=0, port_num=1)), qpb.qp_num, 0x1234)
    qpa.post_send(wr)
    (wc,) = wait(fab, cqb)
    assert (wc.status, wc.byte_len, wc.src_qp, wc.slid) == (e.IBV_WC_SUCCESS, 44, qpa.qp_num, 1)
    assert not wc.wc_flags & e.IBV_WC_GRH
    assert mrb.read(44, 0) == b"\xee" * 40 + b"ping"  # no GRH written
    qpa.post_recv(RecvWR(wr_id=3, num_sge=1, sg=[SGE(mra.buf + 1024, 1024, mra.lkey)]))
    mrb.write(b"pong", 4, 2048)
    reply = SendWR(wr_id=4, opcode=e.IBV_WR_SEND, num_sge=1, sg=[SGE(mrb.buf + 2048, 4, mrb.lkey)])
    reply.set_wr_ud(AH(pb, wc=wc, port_num=1), wc.src_qp, 0x1234)
    qpb.post_send(reply)
    got = [w for w in wait(fab, cqa, 2) if w.opcode == e.IBV_WC_RECV]
    assert [(w.wr_id, w.slid) for w in got] == [(3, 2)]
    assert mra.read(4, 1024 + 40) == b"pong"


def test_sl_and_vl_in_the_lrh(tmp_path: Path) -> None:
    fab = two_switches(frames=True, vls=2)
    path = tmp_path / "sl.pcap"
    fab.tap("hca1", "sw1", str(path))
    a, b = side(fab, "hca1"), side(fab, "hca2")
    connect_by_lid(a, b, sl=3)
    wr = SendWR(wr_id=1, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(a.mr.buf, 8, a.mr.lkey)],
                send_flags=e.IBV_SEND_SIGNALED)
    wr.set_wr_rdma(b.mr.rkey, b.mr.buf)
    a.qp.post_send(wr)
    wait(fab, a.cq)
    fab.close()
    lrhs = [(cp.packet[LRH].sl, cp.packet[LRH].vl, cp.packet[BTH].opcode) for cp in read(path)]
    assert lrhs == [(3, 1, WRITE_ONLY), (3, 1, ACK)]  # SL 3 on VL 3 % 2; the responder's ACK on its QP's SL
    assert all(cp.packet.crc_status == "good" for cp in read(path))  # the VL is masked in the ICRC


@pytest.mark.parametrize("n", [0, 1, 3, 4, 1021, 1024])
def test_ib_size_is_the_frame_length(n: int) -> None:
    p = Pkt(SEND_ONLY, 5, 0x11, 0, 0, 0, 1, 2, bytes(n))
    assert ib_size(p) == len(ib_frame(p, slid=1, dlid=2))
    w = Pkt(WRITE_ONLY, 5, 0x11, 0, 0, 0, 1, 2, bytes(n))
    w.reth = RETH(va=1, r_key=2, dma_length=n)
    assert ib_size(w) == len(ib_frame(w, slid=1, dlid=2)) == 8 + 12 + 16 + n + (-n % 4) + 4 + 2


def test_bytes_or_objects_the_same_run() -> None:
    """The subnet times a packet by its size whether its bytes travel (frames=True) or not."""
    def run(frames: bool) -> tuple[int, list[int]]:
        fab = two_switches(frames=frames)
        _write(fab, 5000)
        return fab.now_ns, [p.counters["PortXmitData"] for n in fab.nodes for p in n.ports.values()]

    assert run(True) == run(False)


def test_lids_set_as_an_sm_sets_them() -> None:
    fab = two_switches(frames=True)
    fab.set_lid("hca1", 0x21, sm_lid=0x40)
    fab.set_lid("hca2", 0x22)
    fab.set_lid("sw1", 0x40)
    with pytest.raises(ValueError, match="already another node's"):
        fab.set_lid("sw2", 0x21)
    with pytest.raises(ValueError, match="not a unicast LID"):
        fab.set_lid("sw2", 0xC000)
    a = side(fab, "hca1")
    assert (a.ctx.query_port(1).lid, a.ctx.query_port(1).sm_lid) == (0x21, 0x40)
    assert fab.gid_of_lid(1) is None and fab.gid_of_lid(0x22) == fab.hcas[1].device.gids[0]
    fab.min_hop_routes()
    assert fab.switches[0].lft[0x22] == fab.port("sw1", "sw2").num and fab.switches[0].lft[0x40] == 0
    data, got, wcs = _write(fab, 100)
    assert got == data and wcs[0].status == e.IBV_WC_SUCCESS


def test_min_hop_spreads_lids_over_parallel_links() -> None:
    """Two links between sw1 and sw2: the stand-in routing sends the LIDs behind sw2 out of both,
    one each (fewest LIDs routed first, then the lowest port), and the shortest way to every LID."""
    fab = IBFabric()
    for name in ("a", "b", "c"):
        fab.add_hca(name)
    s1, s2 = fab.add_switch("sw1", nports=4), fab.add_switch("sw2", nports=4)
    fab.link("a", "sw1", port_b=1)
    fab.link("sw1", "sw2", port_a=2, port_b=2)
    fab.link("sw1", "sw2", port_a=3, port_b=3)
    fab.link("sw2", "b", port_a=1)
    fab.link("sw2", "c", port_a=4)
    fab.min_hop_routes()
    assert s1.lft[fab.node("a").lid] == 1 and s1.lft[s1.lid] == 0
    assert sorted((s1.lft[fab.node("b").lid], s1.lft[fab.node("c").lid])) == [2, 3]
    assert (s2.lft[fab.node("b").lid], s2.lft[fab.node("c").lid]) == (1, 4)
    assert s2.lft[fab.node("a").lid] in (2, 3) and s2.lft[s1.lid] in (2, 3)
    with pytest.raises(ValueError, match="outside 0..767"):
        s1.set_lft(768, [NO_PORT] * 64)


def test_rc_with_a_grh_on_ib(tmp_path: Path) -> None:
    """``is_global=1`` on an IB port: the peer named by its GID, the packets carry a GRH (LNH 3), the
    ICRC covers it with the whole LRH masked; tshark reads the GIDs; a UD AH with a GRH is refused."""
    fab = two_switches(frames=True)
    path = tmp_path / "grh.pcap"
    fab.tap("sw1", "sw2", str(path))
    a, b = side(fab, "hca1"), side(fab, "hca2")
    for me, peer in ((a, b), (b, a)):
        attr = QPAttr(qp_state=e.IBV_QPS_INIT, port_num=1, path_mtu=e.IBV_MTU_1024)
        attr.qp_access_flags = e.IBV_ACCESS_REMOTE_WRITE
        attr.dest_qp_num, attr.rq_psn, attr.sq_psn = peer.qp.qp_num, 0, 0
        attr.max_rd_atomic = attr.max_dest_rd_atomic = 1
        attr.ah_attr = AHAttr(is_global=1, port_num=1, sl=2,
                              gr=GlobalRoute(dgid=peer.ctx.query_gid(1, 0), hop_limit=7, traffic_class=0x20))
        me.qp.to_rts(attr)
    a.mr.write(b"x" * 100, 100)
    wr = SendWR(wr_id=1, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(a.mr.buf, 100, a.mr.lkey)],
                send_flags=e.IBV_SEND_SIGNALED)
    wr.set_wr_rdma(b.mr.rkey, b.mr.buf)
    a.qp.post_send(wr)
    (wc,) = wait(fab, a.cq)
    fab.close()
    assert wc.status == e.IBV_WC_SUCCESS and b.mr.read(100, 0) == b"x" * 100
    pkts = [cp.packet for cp in read(path)]
    ga, gb = (int(s.ctx.query_gid(1, 0)) for s in (a, b))
    assert [(p[LRH].lnh, p[GRH].sgid, p[GRH].dgid, p[GRH].hoplmt, p[GRH].tclass) for p in pkts] == [
        (3, ga, gb, 7, 0x20), (3, gb, ga, 7, 0x20)]
    assert all(p.crc_status == p.vcrc_status == "good" for p in pkts)
    if tshark_path() is not None:
        out = subprocess.run(["tshark", "-n", "-r", str(path), "-T", "fields", "-e", "infiniband.grh.sgid",
                              "-e", "infiniband.bth.opcode", "-e", "_ws.malformed"],
                             capture_output=True, text=True, check=True).stdout.splitlines()
        assert [line.split("\t") for line in out] == [
            [str(ipaddress.IPv6Address(ga)), str(WRITE_ONLY), ""], [str(ipaddress.IPv6Address(gb)), str(ACK), ""]]
    with pytest.raises(PyverbsRDMAError, match="without a GRH"):
        AH(b.pd, attr=AHAttr(is_global=1, gr=GlobalRoute(dgid=a.ctx.query_gid(1, 0))))
