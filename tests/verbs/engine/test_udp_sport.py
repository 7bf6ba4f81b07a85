"""The UDP source port of a connected QP: rdma_get_udp_sport (Linux ib_verbs.h), as rxe 6.1 sets it
in rxe_modify_qp, checked against the kernel's own packets in captures/ and on the engine."""

from __future__ import annotations

from pathlib import Path

import dpkt
import pytest

import rdmalab.verbs.enums as e
from rdmalab.fabric import Fabric
from rdmalab.fabric.harness import EndpointPair
from rdmalab.verbs.addr import AHAttr, GlobalRoute
from rdmalab.verbs.qp import QPAttr
from rdmalab.wire.ib import calc_flow_label, flow_label_to_udp_sport, udp_sport

CAPTURES = Path(__file__).resolve().parents[3] / "captures"
# rxe captures of one RC or UC connection with packets both ways (perftest and ibv_*_pingpong:
# no rdma_cm, so the address vector's flow label is 0)
TWO_WAY = ["rxe_rc_pingpong.pcap", "rxe_uc_pingpong.pcap", "rxe_write_bw.pcap", "rxe_read_bw.pcap",
           "rxe_send_bw.pcap", "rxe_send_lat.pcap", "rxe_atomic_fadd.pcap", "rxe_imm.pcap", "rxe_srq_pingpong.pcap"]


def _connections(path: Path) -> list[tuple[int, int, int, int]]:
    """(source IP, destination QP, UDP source port, packets) of the RC/UC packets in a capture."""
    seen: dict[tuple[int, int, int], int] = {}
    with path.open("rb") as f:
        for _, buf in dpkt.pcap.Reader(f):
            ip = dpkt.ethernet.Ethernet(buf).data
            if not isinstance(ip, dpkt.ip.IP) or not isinstance(ip.data, dpkt.udp.UDP) or ip.data.dport != 4791:
                continue
            bth = bytes(ip.data.data)
            if bth[0] >> 5 in (0, 1):  # RC or UC
                key = (int.from_bytes(ip.src, "big"), int.from_bytes(bth[5:8], "big"), ip.data.sport)
                seen[key] = seen.get(key, 0) + 1
    return [(*k, n) for k, n in seen.items()]


@pytest.mark.parametrize("name", TWO_WAY)
def test_rxe_uses_rdma_get_udp_sport(name: str) -> None:
    conns = _connections(CAPTURES / name)
    sides = {src for src, *_ in conns}
    assert len(sides) == 2, "a capture of packets both ways"
    checked = 0
    for src, dqp, sport, _ in conns:
        # the other side's QPN is the destination QP of the packets it received from it
        peers = [d for s, d, sp, _ in conns if s != src and sp == sport]
        assert peers, f"{name}: no packet back on UDP port {sport:#x}"
        assert any(udp_sport(0, lq, dqp) == sport for lq in peers), f"{name}: {sport:#x} for QPs {peers}, {dqp:#x}"
        checked += 1
    assert checked >= 2


def test_the_kernel_helpers() -> None:
    # symmetric in the two QP numbers, 20 bits; a nonzero flow label is used as it is
    assert calc_flow_label(0x11, 0x12) == calc_flow_label(0x12, 0x11) == 0x11 * 0x12
    assert calc_flow_label(0xFFFFFF, 0xFFFFFF) < 1 << 20
    assert flow_label_to_udp_sport(0xFC000 | 0x5) == 0xC000 | (0x5 ^ 0x3F)
    assert udp_sport(0x12345, 1, 2) == flow_label_to_udp_sport(0x12345)
    assert 0xC000 <= udp_sport(0, 0x11, 0x12) <= 0xFFFF


def test_engine_sends_on_the_connections_port() -> None:
    p = EndpointPair(Fabric(), path_mtu=e.IBV_MTU_1024, record_frames=True)
    a, b = p.a.qp, p.b.qp
    port = udp_sport(0, a.qp_num, b.qp_num)
    assert a.engine.sport == b.engine.sport == port
    p.b.recv()
    p.send(p.a, e.IBV_WR_SEND, length=100)
    p.wait(p.b.cq)
    p.wait(p.a.cq)
    ports = {ip.data.sport for _, _, _, f in p.frames if isinstance(ip := dpkt.ethernet.Ethernet(f).data, dpkt.ip.IP)}
    assert ports == {port}


def test_a_flow_label_in_the_address_vector_sets_the_port() -> None:
    p = EndpointPair(Fabric(), connect=False)
    attr = QPAttr(port_num=1, path_mtu=e.IBV_MTU_1024)
    attr.ah_attr = AHAttr(port_num=1, is_global=1, gr=GlobalRoute(dgid=p.b.gid, sgid_index=1, flow_label=0xABCDE))
    attr.dest_qp_num, attr.rq_psn = p.b.qp.qp_num, 0
    attr.max_dest_rd_atomic, attr.min_rnr_timer = 1, 12
    before = p.a.qp.engine.sport
    p.a.qp.to_rtr(attr)
    assert p.a.qp.engine.sport == flow_label_to_udp_sport(0xABCDE) != before
