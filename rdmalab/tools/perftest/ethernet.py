"""perftest's TCP exchange ("Data ex. method : Ethernet", not ``-R``): the RC QP made by hand and
connected with the peer's key record (``ctx_connect`` in ``src/perftest_resources.c``), then the
session of :mod:`rdmalab.tools.perftest.session`.
"""

from __future__ import annotations

import random
from typing import IO, Any

from rdmalab.tools.oob import Channel, PerfDest
from rdmalab.tools.perftest.exchange import PAGE
from rdmalab.tools.perftest.options import OUT_READS, PerftestError, PerftestOptions
from rdmalab.tools.perftest.report import PerftestResult
from rdmalab.tools.perftest.session import _session
from rdmalab.tools.perftest.traffic import ACCESS, _data_mr
from rdmalab.verbs import enums as e
from rdmalab.verbs.addr import GID, AHAttr, GlobalRoute
from rdmalab.verbs.cq import CQ
from rdmalab.verbs.device import Context
from rdmalab.verbs.pd import PD
from rdmalab.verbs.qp import QP, QPAttr, QPCap, QPInitAttr


def _traffic(opts: PerftestOptions, out: IO[str], chan: Channel, fab: Any, client: bool, sizes: list[int],
             curr_mtu: int, mtu_bytes: int) -> PerftestResult:
    verb = opts.verb
    assert opts.iters is not None
    ctx = Context(name=fab.device.name, fabric=fab)
    pd = PD(ctx)
    bufsize = max(max(sizes), PAGE)
    mr = _data_mr(pd, bufsize, verb)
    cq = CQ(ctx, opts.tx_depth + opts.rx_depth + 1)
    cap = QPCap(max_send_wr=opts.tx_depth, max_recv_wr=opts.rx_depth, max_send_sge=1, max_recv_sge=1)
    qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=cap))
    init = QPAttr(port_num=opts.ib_port)
    init.qp_access_flags = ACCESS & ~e.IBV_ACCESS_LOCAL_WRITE
    qp.to_init(init)
    gid = int(ctx.query_gid(opts.ib_port, 1)).to_bytes(16, "big")
    # The receiving area is the second half of the buffer (perftest: buf + num_qps * BUFF_SIZE).
    me = PerfDest(0, OUT_READS, qp.qp_num, random.SystemRandom().getrandbits(24), mr.rkey, mr.buf + bufsize, gid)

    def connect_qp(rem: PerfDest) -> None:
        if ((rem.gid[:12] == bytes(10) + b"\xff\xff") != (gid[:12] == bytes(10) + b"\xff\xff")):
            raise PerftestError("Found Incompatibility issue with GID types. Please Try to use a different IP version.")
        a = QPAttr(port_num=opts.ib_port, path_mtu=curr_mtu)
        a.qp_access_flags = ACCESS & ~e.IBV_ACCESS_LOCAL_WRITE
        a.dest_qp_num, a.rq_psn, a.sq_psn = rem.qpn, rem.psn, me.psn
        a.max_dest_rd_atomic = OUT_READS
        a.max_rd_atomic = max(1, min(rem.out_reads, OUT_READS))
        a.min_rnr_timer, a.timeout, a.retry_cnt, a.rnr_retry = 12, 14, 7, 7
        a.ah_attr = AHAttr(port_num=opts.ib_port, is_global=1,
                           gr=GlobalRoute(dgid=GID.from_int(int.from_bytes(rem.gid, "big")), sgid_index=1,
                                          hop_limit=0xFF))
        qp.to_rts(a)

    return _session(opts, out, chan, fab, client, sizes, mtu_bytes, qp, cq, mr, bufsize, me, connect_qp)
