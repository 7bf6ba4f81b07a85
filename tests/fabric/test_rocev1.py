"""RoCEv1 as a device mode: the engine's RC WRITE and SEND in GRH-on-Ethernet frames (EtherType
0x8915), checked by our decoder (ICRC) and by tshark (0 malformed, the same opcodes and GIDs)."""

from __future__ import annotations

import ipaddress
import json
import subprocess
from pathlib import Path

import pytest
from ib_util import ACCESS, Side, side, wait
from tshark_util import requires_tshark

from rdmalab.capture.reader import read
from rdmalab.fabric.rocev1 import RoceV1Fabric
from rdmalab.verbs import enums as e
from rdmalab.verbs.addr import AHAttr, GlobalRoute
from rdmalab.verbs.qp import QPAttr
from rdmalab.verbs.wr import SGE, RecvWR, SendWR
from rdmalab.wire.ib import BTH, GRH
from rdmalab.wire.net import ETHERTYPE_ROCE, Ethernet

WRITE_FIRST, WRITE_MIDDLE, WRITE_LAST, ACK, SEND_ONLY = 0x06, 0x07, 0x08, 0x11, 0x04


def _connect(a: Side, b: Side) -> None:
    for me, peer in ((a, b), (b, a)):
        attr = QPAttr(qp_state=e.IBV_QPS_INIT, port_num=1, path_mtu=e.IBV_MTU_1024)
        attr.qp_access_flags = ACCESS
        attr.dest_qp_num = peer.qp.qp_num
        attr.rq_psn = attr.sq_psn = 0
        attr.max_rd_atomic = attr.max_dest_rd_atomic = 1
        attr.min_rnr_timer, attr.timeout, attr.retry_cnt, attr.rnr_retry = 12, 14, 7, 7
        attr.ah_attr = AHAttr(is_global=1, port_num=1, gr=GlobalRoute(dgid=peer.ctx.query_gid(1, 0), sgid_index=0))
        me.qp.to_rts(attr)


def _run(tmp_path: Path) -> tuple[RoceV1Fabric, Path, Side, Side]:
    fab = RoceV1Fabric()
    fab.add_device("r0")
    fab.add_device("r1")
    path = tmp_path / "rocev1.pcap"
    tap = fab.write_pcap(str(path))
    a, b = side(fab, "r0"), side(fab, "r1")
    _connect(a, b)
    data = bytes(range(256)) * 12
    a.mr.write(data, len(data))
    wr = SendWR(wr_id=5, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(a.mr.buf, len(data), a.mr.lkey)],
                send_flags=e.IBV_SEND_SIGNALED)
    wr.set_wr_rdma(b.mr.rkey, b.mr.buf)
    a.qp.post_send(wr)
    (wc,) = wait(fab, a.cq)
    assert (wc.status, wc.opcode) == (e.IBV_WC_SUCCESS, e.IBV_WC_RDMA_WRITE)
    assert b.mr.read(len(data), 0) == data
    b.qp.post_recv(RecvWR(wr_id=1, num_sge=1, sg=[SGE(b.mr.buf, 64, b.mr.lkey)]))
    a.qp.post_send(SendWR(wr_id=6, opcode=e.IBV_WR_SEND, num_sge=1, sg=[SGE(a.mr.buf, 40, a.mr.lkey)],
                          send_flags=e.IBV_SEND_SIGNALED))
    (rwc,) = wait(fab, b.cq)
    assert (rwc.status, rwc.opcode, rwc.byte_len) == (e.IBV_WC_SUCCESS, e.IBV_WC_RECV, 40)
    wait(fab, a.cq)
    tap.close()
    return fab, path, a, b


def test_rocev1_write_and_send(tmp_path: Path) -> None:
    fab, path, a, b = _run(tmp_path)
    assert a.ctx.query_gid_type(1, 0) == e.IBV_GID_TYPE_ROCE_V1
    pkts = [cp.packet for cp in read(path)]
    assert pkts and all(p.encap == "rocev1" and p.crc_status == "good" and not p.problems for p in pkts)
    assert all(p[Ethernet].ethertype == ETHERTYPE_ROCE for p in pkts)
    reqs = [p for p in pkts if p[BTH].opcode != ACK]
    assert [p[BTH].opcode for p in reqs] == [WRITE_FIRST, WRITE_MIDDLE, WRITE_LAST, SEND_ONLY]
    ga, gb = int(a.ctx.query_gid(1, 0)), int(b.ctx.query_gid(1, 0))
    assert {(p[GRH].sgid, p[GRH].dgid) for p in reqs} == {(ga, gb)}
    assert fab.stats["sent"] == len(pkts)


def test_a_corrupt_rocev1_frame_is_dropped(tmp_path: Path) -> None:
    fab = RoceV1Fabric(seed=3)
    fab.add_device("r0")
    fab.add_device("r1")
    a, b = side(fab, "r0"), side(fab, "r1")
    _connect(a, b)
    fab.set_faults(corrupt=1.0, src="r0")
    wr = SendWR(wr_id=5, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(a.mr.buf, 64, a.mr.lkey)],
                send_flags=e.IBV_SEND_SIGNALED)
    wr.set_wr_rdma(b.mr.rkey, b.mr.buf)
    a.qp.post_send(wr)
    fab.advance(1_000_000)
    assert b.ctx.device.counters["dropped"] >= 1 and b.ctx.device.counters["rcvd_pkts"] == 0


def test_frames_and_bursts_are_fixed() -> None:
    with pytest.raises(TypeError, match="frames is fixed"):
        RoceV1Fabric(frames=False)


@requires_tshark
@pytest.mark.tshark
def test_tshark_decodes_rocev1(tmp_path: Path) -> None:
    _, path, a, b = _run(tmp_path)
    out = subprocess.run(["tshark", "-n", "-r", str(path), "-T", "json", "-e", "eth.type", "-e", "infiniband.bth.opcode",
                          "-e", "infiniband.grh.sgid", "-e", "infiniband.grh.dgid", "-e", "_ws.malformed",
                          "-e", "infiniband.invariant.crc"],
                         capture_output=True, text=True, check=True).stdout
    rows = [r["_source"]["layers"] for r in json.loads(out)]
    pkts = [cp.packet for cp in read(path)]
    assert len(rows) == len(pkts) > 0
    assert not any("_ws.malformed" in r for r in rows)
    assert all(r["eth.type"] == ["0x8915"] for r in rows)
    assert [int(r["infiniband.bth.opcode"][0]) for r in rows] == [p[BTH].opcode for p in pkts]
    ga = str(ipaddress.IPv6Address(int(a.ctx.query_gid(1, 0))))
    first = rows[0]
    assert first["infiniband.grh.sgid"] == [ga]
    for r, p in zip(rows, pkts, strict=True):
        assert int(r["infiniband.invariant.crc"][0], 16) == int.from_bytes(p.crc_expected.to_bytes(4, "little"), "big")
