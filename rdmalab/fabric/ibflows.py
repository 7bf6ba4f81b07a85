"""Flows and congestion scenarios on the InfiniBand subnet (:mod:`rdmalab.fabric.ibfabric`): the incast
of notebook 10 with credits instead of PFC, head-of-line blocking, and a credit loop that deadlocks.

A flow (:class:`IBFlow`) is an RC QP pair of the engine, made through the pyverbs-shaped API and
connected by LID (``AHAttr(dlid=..., sl=..., is_global=0)``), whose sender keeps ``depth`` RDMA
WRITEs of ``msg_packets`` packets posted, as the switched fabric's flows do
(:class:`rdmalab.fabric.switched_flows.Flow`); it counts the bytes of the WRITEs completed.

* :func:`ib_incast`: ``senders`` hosts write to one receiver, on one switch (``topology="star"``:
  the incast of :mod:`rdmalab.fabric.congestion_scenarios`, 40 Gb/s links, 1 us, 1024-byte
  packets, 64-packet WRITEs, 3 posted) or on a leaf switch with the receiver on a second one
  (``"leaf-spine"``), where, with ``victim=True``, one more host on the leaf writes to an idle host
  on the second switch.  Every flow crosses the leaf-to-spine link.  With credits,
  the receiver's link is the bottleneck, the second switch's input buffer from the leaf fills, the
  leaf's port to it waits for credits (``PortXmitWait``), and the victim's packets wait behind the
  incast's in the same VL: its destination link is idle, yet it gets a share of the shared link,
  not the line rate.  Nothing is dropped.  Given its own SL on a VL of its own (``victim_sl=1``,
  ``vls=2``) the victim is not blocked.  With ``credits=False`` the same buffers overflow and drop.
* :func:`ib_credit_loop`: three switches in a ring, a host on each, every host writing to the
  host two switches on; ``routing="clockwise"`` sets the tables so that every flow goes two hops
  clockwise, a cyclic buffer dependency: the input buffers fill with packets waiting for credits
  from the next switch, whose buffer waits on the next, and the ring stops for good (a credit
  loop; PFC's deadlock of the ``deadlock`` scenario).  ``routing="min-hop"`` takes the direct link
  and nothing stops.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import IO, Any

from rdmalab.fabric.ibfabric import LFT_BLOCK, NO_PORT, IBFabric, IBHca
from rdmalab.verbs import enums as e
from rdmalab.verbs.addr import AHAttr
from rdmalab.verbs.cq import CQ, WC
from rdmalab.verbs.device import Context
from rdmalab.verbs.mr import MR
from rdmalab.verbs.pd import PD
from rdmalab.verbs.qp import QP, QPAttr, QPCap, QPInitAttr
from rdmalab.verbs.wr import SGE, SendWR

__all__ = ["IBFlow", "IBRun", "ib_credit_loop", "ib_incast"]

_ACCESS = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE


class _Completions(CQ):
    """A flow's send CQ: each completion goes straight to the flow (which posts the next WRITE)."""

    def __init__(self, ctx: Context, flow: IBFlow) -> None:
        super().__init__(ctx, 1 << 20)
        self._flow = flow

    def push(self, wc: WC, solicited: bool = False) -> bool:
        self._flow._completed(wc)
        return True


class IBFlow:
    """An RC QP pair from ``src`` to ``dst`` connected by LID on service level ``sl``, writing
    ``msg_packets`` x MTU bytes per WRITE, ``depth`` posted, until the run ends.  ``done_bytes``
    counts the bytes of completed WRITEs, ``errors`` the completions in error."""

    def __init__(self, fab: IBFabric, src: IBHca, dst: IBHca, *, name: str, sl: int = 0, msg_packets: int = 64,
                 depth: int = 3, timeout: int = 10) -> None:
        self.fabric = fab
        self.name = name
        self.src, self.dst = src, dst
        self.sl = sl
        self.msg_bytes = msg_packets * fab.mtu
        self.depth = depth
        self.posted = self.completed = self.errors = 0
        self.done_bytes = 0
        a, b = Context(name=src.name, fabric=fab), Context(name=dst.name, fabric=fab)
        pa, pb = PD(a), PD(b)
        self.cq = _Completions(a, self)
        self.peer_cq = CQ(b, 16)
        self.mr = MR(pa, self.msg_bytes, _ACCESS)
        self.peer_mr = MR(pb, self.msg_bytes, _ACCESS)
        cap = QPCap(max_send_wr=depth, max_recv_wr=1, max_send_sge=1, max_recv_sge=1)
        self.qp = QP(pa, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=self.cq, rcq=self.cq, cap=cap))
        self.peer_qp = QP(pb, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=self.peer_cq, rcq=self.peer_cq, cap=cap))
        mtu = e.bytes_to_mtu(fab.mtu)
        for qp, peer, peer_qp in ((self.qp, dst, self.peer_qp), (self.peer_qp, src, self.qp)):
            attr = QPAttr(qp_state=e.IBV_QPS_INIT, port_num=1, path_mtu=mtu)
            attr.qp_access_flags = e.IBV_ACCESS_REMOTE_WRITE
            attr.max_rd_atomic = attr.max_dest_rd_atomic = 1
            attr.min_rnr_timer, attr.timeout, attr.retry_cnt, attr.rnr_retry = 12, timeout, 7, 7
            attr.ah_attr = AHAttr(dlid=peer.lid, sl=sl, is_global=0, port_num=1)
            attr.dest_qp_num, attr.rq_psn, attr.sq_psn = peer_qp.qp_num, 0, 0
            qp.to_rts(attr)

    def start(self) -> None:
        for _ in range(self.depth):
            self._post()

    def _post(self) -> None:
        wr = SendWR(wr_id=self.posted, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1,
                    sg=[SGE(self.mr.buf, self.msg_bytes, self.mr.lkey)], send_flags=e.IBV_SEND_SIGNALED)
        wr.set_wr_rdma(self.peer_mr.rkey, self.peer_mr.buf)
        self.posted += 1
        self.qp.post_send(wr)

    def _completed(self, wc: WC) -> None:
        if wc.status != e.IBV_WC_SUCCESS:
            self.errors += 1
            return
        self.completed += 1
        self.done_bytes += self.msg_bytes
        self._post()

    @property
    def delivered(self) -> int:
        """Payload bytes the responder has taken in sequence (its next expected PSN x the MTU: every
        packet of these WRITEs is a full one; the QPs start at PSN 0 and a run does not wrap)."""
        return int(self.peer_qp.engine.resp.psn) * self.fabric.mtu

    def gbps(self, ns: int) -> float:
        """Goodput over ``ns`` nanoseconds: :attr:`delivered` bytes in Gb/s."""
        return self.delivered * 8 / ns if ns else 0.0

    def __repr__(self) -> str:
        return f"IBFlow({self.name})"


@dataclass
class IBRun:
    """What a scenario run leaves: the fabric, its flows, and a summary."""

    fabric: IBFabric
    flows: list[IBFlow]
    duration_ns: int
    summary: dict[str, Any] = field(default_factory=dict)


def _summary(fab: IBFabric, flows: list[IBFlow], ns: int, ports: list[tuple[str, str]]) -> dict[str, Any]:
    return {
        "credits": fab.credit_fc,
        "drops": fab.drops(),
        "flows": {f.name: {"gbps": round(f.gbps(ns), 3), "delivered": f.delivered, "completed": f.done_bytes,
                           "errors": f.errors} for f in flows},
        "ports": {f"{a}->{b}": {"xmit_wait_us": round(fab.port(a, b).xmit_wait(fab.now_ns) / 1000, 3),
                                "xmit_pkts": fab.port(a, b).counters["PortXmitPkts"],
                                "peer_buffer_max_blocks": max(fab.port(b, a).rx_max)}
                  for a, b in ports},
    }


def ib_incast(*, senders: int = 4, topology: str = "leaf-spine", victim: bool | None = None, rate: float = 40.0,
              uplink: float | None = None, delay_us: float = 1.0, duration_us: float = 300.0, credits: bool = True,
              victim_sl: int = 0, vls: int = 1, vl_buffer: int = 32768, mtu: int = 1024, msg_packets: int = 64,
              depth: int = 3, seed: int = 1, capture: str | IO[bytes] | None = None) -> IBRun:
    """The incast with credits (see the module docstring).

    ``topology="star"`` is the incast of :mod:`rdmalab.fabric.congestion_scenarios` node for node:
    hosts h1.. and ``recv`` on one switch ``sw``.  ``"leaf-spine"`` (the default) puts the senders
    on switch ``leaf`` and ``recv`` on switch ``spine``, and with ``victim`` (its default there) adds
    ``hv`` on the leaf writing to ``rv`` on the spine.  Host links run at ``rate`` Gb/s, the
    leaf-spine link at ``uplink`` (default ``rate`` x the hosts on the leaf: no oversubscription,
    so that the receiver's link is the one bottleneck).  The defaults are the scenario's: 40 Gb/s,
    1 us links, 1024-byte packets, 64-packet WRITEs, 3 posted per flow.  ``capture`` writes the
    packets of the link into the bottleneck's switch (leaf-spine; the receiver's link in the star)
    to a pcap (:meth:`IBFabric.tap`: ERF records, native IB, both directions)."""
    if senders < 1:
        raise ValueError(f"senders must be at least 1, not {senders!r}")
    if duration_us <= 0:
        raise ValueError(f"duration_us must be positive, not {duration_us!r}")
    if topology not in ("leaf-spine", "star"):
        raise ValueError(f"topology must be 'leaf-spine' or 'star', not {topology!r}")
    if victim is None:
        victim = topology == "leaf-spine"
    elif victim and topology == "star":
        raise ValueError("the victim flow needs the leaf-spine topology (a shared link to be blocked on)")
    fab = IBFabric(mtu=mtu, vls=vls, vl_buffer=vl_buffer, credits=credits, seed=seed)
    if topology == "star":
        leaf = spine = fab.add_switch("sw")
    else:
        leaf, spine = fab.add_switch("leaf"), fab.add_switch("spine")
        fab.link(leaf, spine, rate * (senders + int(victim)) if uplink is None else uplink, delay_us)
    recv = fab.add_hca("recv")
    fab.link(recv, spine, rate, delay_us)
    hosts = []
    for i in range(senders):
        h = fab.add_hca(f"h{i + 1}")
        fab.link(h, leaf, rate, delay_us)
        hosts.append(h)
    flows = [IBFlow(fab, h, recv, name=f"{h.name}->recv", msg_packets=msg_packets, depth=depth) for h in hosts]
    if victim:
        hv, rv = fab.add_hca("hv"), fab.add_hca("rv")
        fab.link(hv, leaf, rate, delay_us)
        fab.link(rv, spine, rate, delay_us)
        flows.append(IBFlow(fab, hv, rv, name="hv->rv (victim)", sl=victim_sl, msg_packets=msg_packets,
                            depth=depth))
    fab.min_hop_routes()
    if capture is not None:
        a, b = (leaf.name, spine.name) if leaf is not spine else (spine.name, "recv")
        fab.tap(a, b, capture)
    for f in flows:
        f.start()
    ns = round(duration_us * 1000)
    try:
        fab.loop.advance_to(ns)
    finally:
        fab.close()
    ports = [(spine.name, "recv")] + [(h.name, leaf.name) for h in hosts]
    if topology == "leaf-spine":
        ports.append(("leaf", "spine"))
    if victim:
        ports.append(("spine", "rv"))
    return IBRun(fab, flows, ns, _summary(fab, flows, ns, ports))


def ib_credit_loop(*, routing: str = "clockwise", rate: float = 40.0, delay_us: float = 1.0,
                   duration_us: float = 300.0, vl_buffer: int = 4096, mtu: int = 1024, msg_packets: int = 16,
                   depth: int = 3, seed: int = 1) -> IBRun:
    """Three switches S0-S1-S2 in a ring, host Hi on Si writing to H(i+2)%3 (see the module docstring)."""
    if routing not in ("clockwise", "min-hop"):
        raise ValueError(f"routing must be 'clockwise' or 'min-hop', not {routing!r}")
    fab = IBFabric(mtu=mtu, vl_buffer=vl_buffer, seed=seed)
    sws = [fab.add_switch(f"S{i}", nports=4) for i in range(3)]
    hosts = [fab.add_hca(f"H{i}") for i in range(3)]
    for i in range(3):
        fab.link(hosts[i], sws[i], rate, delay_us, port_b=1)
    for i in range(3):  # port 2: clockwise to S(i+1); port 3: back from S(i-1)
        fab.link(sws[i], sws[(i + 1) % 3], rate, delay_us, port_a=2, port_b=3)
    fab.min_hop_routes()
    if routing == "clockwise":
        for i, sw in enumerate(sws):  # every LID but the local host's (and the switch's own) leaves clockwise
            entries = sw.lft_block(0)
            for lid in range(1, LFT_BLOCK):
                if entries[lid] not in (NO_PORT, 0) and lid != hosts[i].lid:
                    entries[lid] = 2
            sw.set_lft(0, entries)
    flows = [IBFlow(fab, hosts[i], hosts[(i + 2) % 3], name=f"H{i}->H{(i + 2) % 3}", msg_packets=msg_packets,
                    depth=depth) for i in range(3)]
    for f in flows:
        f.start()
    ns = round(duration_us * 1000)
    fab.loop.advance_to(ns)
    ports = [(f"S{i}", f"S{(i + 1) % 3}") for i in range(3)]
    return IBRun(fab, flows, ns, _summary(fab, flows, ns, ports))
