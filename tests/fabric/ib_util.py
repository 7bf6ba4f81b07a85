"""Helpers of the native-InfiniBand tests: a subnet of two HCAs behind two switches, and RC QPs
connected by LID as a pyverbs program on an HCA connects them (a plain module, imported by name)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rdmalab.fabric.ibfabric import IBFabric
from rdmalab.verbs import enums as e
from rdmalab.verbs.addr import AHAttr
from rdmalab.verbs.cq import CQ, WC
from rdmalab.verbs.device import Context
from rdmalab.verbs.mr import MR
from rdmalab.verbs.pd import PD
from rdmalab.verbs.qp import QP, QPAttr, QPCap, QPInitAttr

ACCESS = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ


def two_switches(**kw: Any) -> IBFabric:
    """hca1 - sw1 - sw2 - hca2, min-hop tables (LIDs: hca1 1, hca2 2, sw1 3, sw2 4)."""
    fab = IBFabric(**kw)
    fab.add_hca("hca1")
    fab.add_hca("hca2")
    fab.add_switch("sw1", nports=8)
    fab.add_switch("sw2", nports=8)
    fab.link("hca1", "sw1")
    fab.link("sw1", "sw2")
    fab.link("sw2", "hca2")
    fab.min_hop_routes()
    return fab


@dataclass
class Side:
    ctx: Context
    pd: PD
    cq: CQ
    mr: MR
    qp: QP


def side(fab: Any, name: str, size: int = 1 << 16) -> Side:
    ctx = Context(name=name, fabric=fab)
    pd = PD(ctx)
    cq = CQ(ctx, 64)
    mr = MR(pd, size, ACCESS)
    qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq,
                           cap=QPCap(max_send_wr=16, max_recv_wr=16, max_send_sge=1, max_recv_sge=1)))
    return Side(ctx, pd, cq, mr, qp)


def connect_by_lid(a: Side, b: Side, *, sl: int = 0, mtu: int = e.IBV_MTU_1024,
                   dlids: tuple[int, int] | None = None) -> None:
    """RESET -> RTS on both QPs, each AV naming the peer's LID (``is_global=0``), as on an HCA:
    the LID its port reports, or ``dlids`` (a's AV, b's AV), e.g. from PathRecords."""
    for i, (me, peer) in enumerate(((a, b), (b, a))):
        attr = QPAttr(qp_state=e.IBV_QPS_INIT, port_num=1, path_mtu=mtu)
        attr.qp_access_flags = ACCESS
        attr.dest_qp_num = peer.qp.qp_num
        attr.rq_psn = attr.sq_psn = 0
        attr.max_rd_atomic = attr.max_dest_rd_atomic = 1
        attr.min_rnr_timer, attr.timeout, attr.retry_cnt, attr.rnr_retry = 12, 14, 7, 7
        dlid = dlids[i] if dlids is not None else peer.ctx.query_port(1).lid
        attr.ah_attr = AHAttr(dlid=dlid, sl=sl, is_global=0, port_num=1)
        me.qp.to_rts(attr)


def wait(fab: Any, cq: CQ, n: int = 1) -> list[WC]:
    out: list[WC] = []

    def done() -> bool:
        _, wcs = cq.poll(n - len(out))
        out.extend(wcs)
        return len(out) >= n

    fab.progress(done, 2_000_000)
    return out
