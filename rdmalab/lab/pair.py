"""Two connected RC endpoints for the notebooks: the setup, not the lesson.

Notebook 02 builds every verbs object by hand.  The later notebooks start from a
:class:`Pair` so that they can show the operation itself: ``Pair()`` opens two devices on a
fresh, seeded fabric, gives each a PD, a CQ, a registered buffer and an RC QP, and moves both
QPs to RTS towards each other.  Everything it creates is a plain verbs object (``pair.a.qp``
is a ``rdmalab.verbs.qp.QP``), so the notebook code that follows is ordinary verbs code that
would run on pyverbs.

The backend switch: ``Pair(backend="soft")`` is the simulator.  Other backends (kernel rxe via
pyverbs) will plug in here without changing the notebooks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rdmalab.lab.env import backend as _backend

DEFAULT_ACCESS_NAMES = ("LOCAL_WRITE", "REMOTE_WRITE", "REMOTE_READ", "REMOTE_ATOMIC")


@dataclass
class Node:
    name: str
    ctx: Any
    pd: Any
    cq: Any
    qp: Any
    mr: Any
    psn: int
    gid: Any
    extra: dict[str, Any] = field(default_factory=dict)

    def poll(self, max_steps: int = 200_000) -> Any:
        """The next completion of this node's CQ (runs the fabric until there is one), or ``None``."""
        n, wcs = self.cq.poll(1)
        return wcs[0] if n else None

    def completions(self) -> list[Any]:
        """All completions available now (after letting the fabric run to quiescence)."""
        self.ctx.fabric.run()
        out: list[Any] = []
        while True:
            n, wcs = self.cq.poll(16)
            if not n:
                return out
            out += wcs


class Pair:
    """Two RC QPs connected to each other on one simulated fabric."""

    def __init__(self, *, backend: str | None = None, seed: int = 1, mtu: int = 1024, size: int = 65536,
                 access: int | None = None, loss: float = 0.0, latency_ns: int = 1000,
                 bandwidth_gbps: float = 100.0, timeout: int = 14, retry_cnt: int = 7, rnr_retry: int = 7,
                 min_rnr_timer: int = 12, max_wr: int = 64, psn: tuple[int, int] = (100, 500),
                 names: tuple[str, str] = ("soft0", "soft1")) -> None:
        self.backend = _backend(backend)
        if self.backend != "soft":
            # a Pair is driven call by call on the simulated fabric; on rxe the lab runs whole
            # scenarios as pyverbs programs (rdmalab.live.scenarios), so say so instead of
            # quietly running the simulator under the name "rxe"
            raise RuntimeError(f"Pair runs on the soft engine only; on {self.backend!r} use "
                               f"rdmalab.live.scenarios.run(NAME, backend={self.backend!r}) (notebook 13)")
        import rdmalab.verbs.enums as e
        from rdmalab.fabric import Fabric

        self.e = e
        self.fabric = Fabric(seed=seed, mtu=mtu, latency_ns=latency_ns, bandwidth_gbps=bandwidth_gbps)
        self.frames: list[tuple[int, str, str, bytes]] = []
        self.fabric.tap(lambda t, s, d, f: self.frames.append((t, s, d, f)))
        for n, ip in zip(names, ("10.0.0.1", "10.0.0.2"), strict=True):
            self.fabric.add_device(n, ip)
        if access is None:
            access = (e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
                      | e.IBV_ACCESS_REMOTE_ATOMIC)
        self.access = access
        self.mtu = mtu
        self.a = self._node(names[0], size, access, max_wr, psn[0])
        self.b = self._node(names[1], size, access, max_wr, psn[1])
        opts = dict(timeout=timeout, retry_cnt=retry_cnt, rnr_retry=rnr_retry, min_rnr_timer=min_rnr_timer)
        self._connect(self.a, self.b, **opts)
        self._connect(self.b, self.a, **opts)
        if loss:
            self.fabric.set_faults(loss=loss)

    # ------------------------------------------------------------------ setup
    def _node(self, name: str, size: int, access: int, max_wr: int, psn: int) -> Node:
        e = self.e
        from rdmalab.verbs.cq import CQ
        from rdmalab.verbs.device import Context
        from rdmalab.verbs.mr import MR
        from rdmalab.verbs.pd import PD
        from rdmalab.verbs.qp import QP, QPAttr, QPCap, QPInitAttr

        ctx = Context(name=name, fabric=self.fabric)
        pd = PD(ctx)
        cq = CQ(ctx, 4 * max_wr, None, None, 0)
        mr = MR(pd, size, access)
        init = QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=QPCap(max_send_wr=max_wr, max_recv_wr=max_wr))
        attr = QPAttr(port_num=1)
        attr.qp_access_flags = access
        qp = QP(pd, init, attr)
        return Node(name, ctx, pd, cq, qp, mr, psn, ctx.query_gid(1, 1))

    def _connect(self, me: Node, peer: Node, *, timeout: int, retry_cnt: int, rnr_retry: int,
                 min_rnr_timer: int) -> None:
        e = self.e
        from rdmalab.verbs.addr import AHAttr, GlobalRoute
        from rdmalab.verbs.qp import QPAttr

        attr = QPAttr(port_num=1)
        attr.qp_access_flags = self.access
        attr.path_mtu = {256: e.IBV_MTU_256, 512: e.IBV_MTU_512, 1024: e.IBV_MTU_1024, 2048: e.IBV_MTU_2048,
                         4096: e.IBV_MTU_4096}[self.mtu]
        attr.max_dest_rd_atomic = attr.max_rd_atomic = 4
        attr.min_rnr_timer, attr.timeout, attr.retry_cnt, attr.rnr_retry = min_rnr_timer, timeout, retry_cnt, rnr_retry
        attr.ah_attr = AHAttr(port_num=1, is_global=1, gr=GlobalRoute(dgid=peer.gid, sgid_index=1))
        attr.dest_qp_num, attr.rq_psn, attr.sq_psn = peer.qp.qp_num, peer.psn, me.psn
        me.qp.to_rts(attr)

    # ------------------------------------------------------------------ what happened
    @property
    def trace(self) -> Any:
        return self.fabric.trace

    def run(self) -> None:
        """Let the fabric deliver everything in flight (timers included)."""
        self.fabric.run()

    def ladder(self, **kw: Any) -> Any:
        from rdmalab.viz.ladder import from_trace

        return from_trace(self.trace, nodes=[self.a.name, self.b.name], **kw)

    def psn_plot(self, **kw: Any) -> Any:
        from rdmalab.viz.plots import psn_time

        return psn_time(self.trace, **kw)

    def packets(self) -> list[Any]:
        """Every frame the fabric carried, decoded (in the order they were sent)."""
        from rdmalab.wire.frame import decode_ethernet

        return [decode_ethernet(f, lenient=True) for _, _, _, f in self.frames]

    def write_pcap(self, path: str) -> None:
        """Save every frame carried so far as a pcap (open it in Wireshark)."""
        from rdmalab.capture import write_pcap

        write_pcap(path, [f for *_, f in self.frames])

    def __repr__(self) -> str:
        return (f"Pair({self.a.name} QP {self.a.qp.qp_num:#x} <-> {self.b.name} QP {self.b.qp.qp_num:#x}, "
                f"MTU {self.mtu}, backend {self.backend})")
