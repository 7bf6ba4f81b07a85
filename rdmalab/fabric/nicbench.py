"""Measuring the NIC model: message rate and latency of RC verbs on the simulated fabric, in virtual time.

:func:`rate` posts ``messages`` work requests over ``qps`` RC connections between two devices of a
:class:`~rdmalab.fabric.sim.Fabric` with NIC model ``model`` (``None``: no model, the links only) and
measures the virtual time from the first post to the last completion; :func:`latency` measures one work
request at a time, post to completion.  The options are the ones the papers vary: inline data,
doorbell batching (``batch`` work requests chained in one ``post_send``), selective signaling (one
signaled work request in ``signal_every``), and the number of QPs.  The program itself costs no virtual
time (it posts and polls at the fabric's current instant): what is measured is the NIC and the link.

This is what ``benchmarks/bench_nicmodel.py``, the tests of the papers' orderings and ``rdmalab
perftest --nic`` run.
"""

from __future__ import annotations

from dataclasses import dataclass

from rdmalab.fabric.sim import Fabric
from rdmalab.verbs import enums as e
from rdmalab.verbs.addr import AHAttr, GlobalRoute
from rdmalab.verbs.cq import CQ
from rdmalab.verbs.device import Context
from rdmalab.verbs.engine.nicmodel import NicModel
from rdmalab.verbs.mr import MR
from rdmalab.verbs.pd import PD
from rdmalab.verbs.qp import QP, QPAttr, QPCap, QPInitAttr
from rdmalab.verbs.wr import SGE, RecvWR, SendWR

OPS = {"write": e.IBV_WR_RDMA_WRITE, "read": e.IBV_WR_RDMA_READ, "send": e.IBV_WR_SEND}
ACCESS = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ


@dataclass(frozen=True)
class Run:
    """What one measurement gave: ``messages`` of ``size`` bytes completed in ``ns`` virtual nanoseconds."""

    messages: int
    size: int
    ns: int

    @property
    def mops(self) -> float:
        """Million messages per second of virtual time."""
        return self.messages * 1e3 / self.ns

    @property
    def gbps(self) -> float:
        """Payload gigabits per second of virtual time."""
        return self.messages * self.size * 8 / self.ns


class Testbed:
    """Two devices on a fabric with ``model`` and ``qps`` connected RC QPs from the client (``soft0``) to
    the server (``soft1``), one CQ per side, one MR per side of ``mr_size`` bytes."""

    def __init__(self, model: NicModel | None, *, qps: int = 1, depth: int = 128, mtu: int = 1024,
                 latency_ns: int = 1000, bandwidth_gbps: float | None = None, mr_size: int = 1 << 16,
                 max_inline: int | None = None, recv_depth: int = 0, seed: int = 1) -> None:
        if qps < 1:
            raise ValueError(f"qps: at least 1, not {qps}")
        rate = bandwidth_gbps if bandwidth_gbps is not None else (model.link_gbps if model is not None else 56.0)
        self.fabric = Fabric(seed=seed, mtu=4096, latency_ns=latency_ns, bandwidth_gbps=rate, trace=False, nic=model)
        self.model = model
        inline = max_inline if max_inline is not None else (model.max_inline if model is not None else 256)
        ends = []
        for name in ("soft0", "soft1"):
            self.fabric.add_device(name)
            ctx = Context(name=name, fabric=self.fabric)
            pd = PD(ctx)
            cq = CQ(ctx, max(4096, 2 * qps * max(depth, recv_depth)))
            mr = MR(pd, mr_size, ACCESS)
            ends.append((ctx, pd, cq, mr))
        (_, cpd, self.ccq, self.cmr), (_, spd, self.scq, self.smr) = ends
        cap = QPCap(max_send_wr=depth, max_recv_wr=max(1, recv_depth), max_inline_data=inline)
        self.client: list[QP] = []
        self.server: list[QP] = []
        for _ in range(qps):
            self.client.append(QP(cpd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=self.ccq, rcq=self.ccq, cap=cap, sq_sig_all=0)))
            self.server.append(QP(spd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=self.scq, rcq=self.scq, cap=cap, sq_sig_all=0)))
        gids = [ctx.query_gid(1, 1) for ctx, *_ in ends]
        for qc, qs in zip(self.client, self.server, strict=True):
            for x, y, dgid in ((qc, qs, gids[1]), (qs, qc, gids[0])):
                attr = QPAttr(port_num=1, path_mtu=e.bytes_to_mtu(mtu))
                attr.qp_access_flags = ACCESS
                attr.max_dest_rd_atomic = attr.max_rd_atomic = 16
                attr.min_rnr_timer, attr.timeout, attr.retry_cnt, attr.rnr_retry = 12, 14, 7, 7
                attr.ah_attr = AHAttr(port_num=1, is_global=1, gr=GlobalRoute(dgid=dgid, sgid_index=1))
                attr.dest_qp_num, attr.rq_psn, attr.sq_psn = y.qp_num, 0, 0
                x.to_rts(attr)
        self.depth = depth

    @property
    def nics(self) -> list[object]:
        """The two devices' :class:`~rdmalab.verbs.engine.nicmodel.Nic` (client's, server's), or Nones."""
        return [d.nic for d in self.fabric.devices.values()]

    def wr(self, op: str, size: int, wr_id: int, flags: int) -> SendWR:
        wr = SendWR(wr_id=wr_id, opcode=OPS[op], num_sge=1, sg=[SGE(self.cmr.buf, size, self.cmr.lkey)],
                    send_flags=flags)
        if op != "send":
            wr.set_wr_rdma(self.smr.rkey, self.smr.buf + self.smr.length // 2)
        return wr

    def post_recvs(self, qp: QP, n: int) -> None:
        for i in range(n):
            qp.post_recv(RecvWR(wr_id=i, num_sge=1, sg=[SGE(self.smr.buf, self.smr.length // 2, self.smr.lkey)]))


def _check(op: str, size: int, batch: int, signal_every: int, messages: int) -> None:
    if op not in OPS:
        raise ValueError(f"op {op!r}: one of {', '.join(OPS)}")
    for name, v in (("size", size), ("batch", batch), ("signal_every", signal_every), ("messages", messages)):
        if v < 1:
            raise ValueError(f"{name}: at least 1, not {v}")


def rate(model: NicModel | None, *, op: str = "write", size: int = 32, inline: bool = False, batch: int = 1,
         signal_every: int = 1, qps: int = 1, messages: int = 2000, depth: int = 128, mtu: int = 1024,
         seed: int = 1) -> Run:
    """The message rate of ``messages`` RC ``op`` work requests (write, read or send) of ``size`` bytes,
    round robin over ``qps`` QPs, at most ``depth`` outstanding per QP, posted ``batch`` at a time as one
    chain (one doorbell), one in ``signal_every`` signaled (and always the last of a QP)."""
    _check(op, size, batch, signal_every, messages)
    if signal_every + batch > depth:
        raise ValueError(f"signal_every {signal_every} + batch {batch} > depth {depth}: the send queue would fill "
                         "with nothing signaled to free it")
    per_qp = -(-messages // qps)
    bed = Testbed(model, qps=qps, depth=depth, mtu=mtu, mr_size=max(1 << 16, 2 * size),
                  recv_depth=per_qp if op == "send" else 0, seed=seed)
    if op == "send":
        for qs in bed.server:
            bed.post_recvs(qs, per_qp)
    fab = bed.fabric
    quota = [per_qp] * qps
    quota[-1] = messages - per_qp * (qps - 1)
    posted = [0] * qps
    done = [0] * qps
    flags_inline = e.IBV_SEND_INLINE if inline else 0
    start = fab.now_ns
    finished = 0
    while finished < messages:
        for q, qp in enumerate(bed.client):
            while posted[q] < quota[q] and posted[q] - done[q] + min(batch, quota[q] - posted[q]) <= depth:
                n = min(batch, quota[q] - posted[q])
                chain = []
                for k in range(n):
                    i = posted[q] + k
                    signaled = (i + 1) % signal_every == 0 or i + 1 == quota[q]
                    chain.append(bed.wr(op, size, q << 32 | i,
                                        flags_inline | (e.IBV_SEND_SIGNALED if signaled else 0)))
                for a, b in zip(chain, chain[1:], strict=False):
                    a.next_wr = b
                qp.post_send(chain[0])
                posted[q] += n
        got, wcs = bed.ccq.poll(64)  # (runs the fabric until a completion is there)
        if not got:
            raise RuntimeError(f"the fabric went idle with {finished} of {messages} messages completed")
        for wc in wcs:
            if wc.status != e.IBV_WC_SUCCESS:
                raise RuntimeError(f"work request {wc.wr_id:#x} failed: {e.ibv_wc_status_str(wc.status)}")
            q, i = wc.wr_id >> 32, wc.wr_id & 0xFFFFFFFF
            finished += i + 1 - done[q]
            done[q] = i + 1
    return Run(messages, size, fab.now_ns - start)


def latency(model: NicModel | None, *, op: str = "write", size: int = 32, inline: bool = False,
            samples: int = 20, mtu: int = 1024, seed: int = 1) -> float:
    """The mean virtual time (ns) from ``post_send`` of one signaled ``op`` of ``size`` bytes to its
    completion, one at a time."""
    _check(op, size, 1, 1, samples)
    bed = Testbed(model, mtu=mtu, mr_size=max(1 << 16, 2 * size), recv_depth=samples if op == "send" else 0,
                  seed=seed)
    if op == "send":
        bed.post_recvs(bed.server[0], samples)
    fab = bed.fabric
    total = 0
    for i in range(samples):
        t0 = fab.now_ns
        bed.client[0].post_send(bed.wr(op, size, i, e.IBV_SEND_SIGNALED | (e.IBV_SEND_INLINE if inline else 0)))
        got, wcs = bed.ccq.poll(1)
        if not got or wcs[0].status != e.IBV_WC_SUCCESS:
            raise RuntimeError(f"work request {i} did not complete")
        total += fab.now_ns - t0
        fab.run()  # (let the ACKs and timers of this one settle before the next)
    return total / samples
