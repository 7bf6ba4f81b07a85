"""The two-endpoint harness: two soft devices on one carrier, one connected QP each side.

h11's ConnectionPair idea for the verbs engine.  Tests, the benchmark and the notebooks (through
:class:`rdmalab.lab.pair.Pair`, which adds pictures and the notebooks' defaults) build a
:class:`EndpointPair`, post work requests on ``pair.a`` / ``pair.b`` and collect completions with
:meth:`EndpointPair.wait` or :meth:`Endpoint.poll`.  Everything it creates is a plain pyverbs-shaped
object (``pair.a.qp`` is a :class:`rdmalab.verbs.qp.QP`), so the code around it is ordinary verbs
code.  Time moves only through the carrier's scheduler (``device.scheduler``), a bounded number
of steps at a time: a wait never hangs.

The carrier is the simulated :class:`~rdmalab.fabric.sim.Fabric` unless another one is given;
any :class:`~rdmalab.verbs.engine.carrier.Carrier` with a ``devices`` mapping (and two devices
on it) works, e.g. the byte-only carrier of ``tests/verbs/engine/test_carrier.py``.
"""

from __future__ import annotations

import socket
from typing import Any

from rdmalab.capture.reader import write_pcap
from rdmalab.fabric.sim import Fabric
from rdmalab.verbs import enums as e
from rdmalab.verbs.addr import AH, AHAttr, GlobalRoute
from rdmalab.verbs.cq import CQ, WC
from rdmalab.verbs.device import Context
from rdmalab.verbs.engine.carrier import Scheduler
from rdmalab.verbs.mr import MR
from rdmalab.verbs.pd import PD
from rdmalab.verbs.qp import QP, QPAttr, QPCap, QPInitAttr
from rdmalab.verbs.srq import SRQ, SrqAttr, SrqInitAttr
from rdmalab.verbs.trace import Trace
from rdmalab.verbs.wr import SGE, RecvWR, SendWR
from rdmalab.wire.frame import decode_ethernet
from rdmalab.wire.packet import Packet

ALL_ACCESS = (e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
              | e.IBV_ACCESS_REMOTE_ATOMIC)
QKEY = 0x11111111


class Endpoint:
    """One side: context, PD, one CQ (send and receive), one MR, one QP (and an SRQ if asked).

    ``psn`` is the QP's initial send PSN: the given one, or 24 random bits from the device's
    seeded generator.
    """

    def __init__(self, ctx: Context, qp_type: int, size: int, mr_access: int, qp_access: int, cap: QPCap,
                 use_srq: bool, sq_sig_all: int, *, cqe: int = 4096, psn: int | None = None) -> None:
        self.ctx = ctx
        self.name = ctx.name
        self.pd = PD(ctx)
        self.cq = CQ(ctx, cqe)
        self.mr = MR(self.pd, size, mr_access)
        self.srq = SRQ(self.pd, SrqInitAttr(SrqAttr(max_wr=1024, max_sge=4))) if use_srq else None
        init = QPInitAttr(qp_type=qp_type, scq=self.cq, rcq=self.cq, srq=self.srq, cap=cap, sq_sig_all=sq_sig_all)
        attr = QPAttr(port_num=1)
        attr.qp_access_flags = qp_access
        attr.qkey = QKEY
        self.qp = QP(self.pd, init, attr)
        self.psn = ctx.device.rng.getrandbits(24) if psn is None else psn
        self.extra: dict[str, Any] = {}  # room for a notebook's own bookkeeping

    @property
    def gid(self) -> Any:
        return self.ctx.query_gid(1, 1)

    @property
    def scheduler(self) -> Scheduler:
        return self.ctx.device.scheduler

    def sge(self, offset: int = 0, length: int | None = None, mr: MR | None = None) -> SGE:
        mr = mr or self.mr
        return SGE(mr.buf + offset, mr.length - offset if length is None else length, mr.lkey)

    def recv(self, wr_id: int = 0, offset: int = 0, length: int | None = None, sges: list[SGE] | None = None) -> None:
        sg = sges if sges is not None else [self.sge(offset, length)]
        wr = RecvWR(wr_id=wr_id, num_sge=len(sg), sg=sg)
        (self.srq or self.qp).post_recv(wr)

    def reg_mr(self, length: int, access: int, pd: PD | None = None) -> MR:
        """Register ``length`` more bytes in ``pd`` (this endpoint's PD by default): ``MR(pd, length, access)``."""
        return MR(pd or self.pd, length, access)

    def alloc_pd(self) -> PD:
        """Another protection domain on this endpoint's device: ``PD(ctx)``."""
        return PD(self.ctx)

    def poll(self) -> WC | None:
        """The next completion of this endpoint's CQ (``CQ.poll`` runs the scheduler until there is one), or None."""
        n, wcs = self.cq.poll(1)
        return wcs[0] if n else None

    def completions(self) -> list[WC]:
        """All completions, after letting the carrier run until nothing is left to do."""
        self.scheduler.run()
        out: list[WC] = []
        while True:
            n, wcs = self.cq.poll(16)
            if not n:
                return out
            out += wcs


class EndpointPair:
    """Two endpoints ``a`` and ``b`` on ``fabric`` (a new seeded :class:`Fabric` if not given), connected.

    ``psn`` fixes both initial PSNs (A's, B's); ``cqe`` is each CQ's size; ``record_frames``
    keeps every frame the fabric carries (``frames``, :meth:`packets`, :meth:`write_pcap`).
    """

    def __init__(self, fabric: Any = None, qp_type: int = e.IBV_QPT_RC, size: int = 1 << 16,
                 mr_access: int = ALL_ACCESS, qp_access: int | None = None, path_mtu: int = e.IBV_MTU_1024,
                 timeout: int = 14, retry_cnt: int = 7, rnr_retry: int = 7, min_rnr_timer: int = 12,
                 max_rd_atomic: int = 16, max_dest_rd_atomic: int = 16, cap: QPCap | None = None,
                 srq: bool = False, sq_sig_all: int = 0, seed: int = 0, connect: bool = True,
                 psn: tuple[int, int] | None = None, cqe: int = 4096, record_frames: bool = False) -> None:
        if fabric is None:
            fabric = Fabric(seed=seed)
        while len(fabric.devices) < 2:
            fabric.add_device()
        self.fabric = fabric
        self.frames: list[tuple[int, str, str, bytes]] = []
        if record_frames:
            fabric.tap(lambda t, s, d, f: self.frames.append((t, s, d, f)))
        names = list(fabric.devices)[:2]
        cap = cap or QPCap(max_send_wr=1024, max_recv_wr=1024, max_send_sge=4, max_recv_sge=4, max_inline_data=64)
        qp_access = ALL_ACCESS & ~e.IBV_ACCESS_LOCAL_WRITE if qp_access is None else qp_access
        if qp_type == e.IBV_QPT_UC:
            qp_access &= e.IBV_ACCESS_REMOTE_WRITE
        self.qp_type = qp_type
        psns = psn or (None, None)
        self.a = Endpoint(Context(name=names[0], fabric=fabric), qp_type, size, mr_access, qp_access, cap, srq,
                          sq_sig_all, cqe=cqe, psn=psns[0])
        self.b = Endpoint(Context(name=names[1], fabric=fabric), qp_type, size, mr_access, qp_access, cap, srq,
                          sq_sig_all, cqe=cqe, psn=psns[1])
        self.settings = dict(path_mtu=path_mtu, timeout=timeout, retry_cnt=retry_cnt, rnr_retry=rnr_retry,
                             min_rnr_timer=min_rnr_timer, max_rd_atomic=max_rd_atomic,
                             max_dest_rd_atomic=max_dest_rd_atomic, qp_access=qp_access)
        if connect:
            self.connect()

    @property
    def scheduler(self) -> Scheduler:
        """The event loop of the carrier both endpoints sit on."""
        return self.a.scheduler

    def connect(self) -> None:
        if self.qp_type == e.IBV_QPT_UD:
            for x in (self.a, self.b):
                x.qp.to_rts(QPAttr()) if x.qp.qp_state != e.IBV_QPS_RTS else None
            return
        for x, y in ((self.a, self.b), (self.b, self.a)):
            s = self.settings
            attr = QPAttr(port_num=1, path_mtu=s["path_mtu"])
            attr.qp_access_flags = s["qp_access"]
            attr.max_dest_rd_atomic, attr.max_rd_atomic = s["max_dest_rd_atomic"], s["max_rd_atomic"]
            attr.min_rnr_timer, attr.timeout = s["min_rnr_timer"], s["timeout"]
            attr.retry_cnt, attr.rnr_retry = s["retry_cnt"], s["rnr_retry"]
            attr.ah_attr = AHAttr(port_num=1, is_global=1, gr=GlobalRoute(dgid=y.gid, sgid_index=1))
            attr.dest_qp_num, attr.rq_psn, attr.sq_psn = y.qp.qp_num, y.psn, x.psn
            x.qp.to_rts(attr)

    def ah(self, frm: Endpoint, to: Endpoint) -> AH:
        return AH(frm.pd, AHAttr(port_num=1, is_global=1, gr=GlobalRoute(dgid=to.gid, sgid_index=1)))

    def send(self, frm: Endpoint, opcode: int = e.IBV_WR_SEND, *, wr_id: int = 1, offset: int = 0,
             length: int = 64, remote: int = 0, rkey: int | None = None, imm: int = 0, flags: int = e.IBV_SEND_SIGNALED,
             compare_add: int = 0, swap: int = 0, sges: list[SGE] | None = None, invalidate: int = 0) -> SendWR:
        """Post one send WR from ``frm`` to the other side; ``remote`` is an offset in its MR."""
        to = self.b if frm is self.a else self.a
        sg = sges if sges is not None else [frm.sge(offset, length)]
        wr = SendWR(wr_id=wr_id, opcode=opcode, num_sge=len(sg), sg=sg, send_flags=flags,
                    imm_data=socket.htonl(imm) if imm else 0)
        wr.invalidate_rkey = invalidate
        key = to.mr.rkey if rkey is None else rkey
        if opcode in (e.IBV_WR_ATOMIC_CMP_AND_SWP, e.IBV_WR_ATOMIC_FETCH_AND_ADD):
            wr.set_wr_atomic(key, to.mr.buf + remote, compare_add, swap)
        else:
            wr.set_wr_rdma(key, to.mr.buf + remote)
        if self.qp_type == e.IBV_QPT_UD:
            wr.set_wr_ud(self.ah(frm, to), to.qp.qp_num, QKEY)
        frm.qp.post_send(wr)
        return wr

    def wait(self, cq: CQ, n: int = 1, max_steps: int = 200_000) -> list[WC]:
        """Collect ``n`` completions from ``cq``, running the scheduler; fewer if it goes idle."""
        got: list[WC] = []
        steps = 0
        sched = self.scheduler
        while len(got) < n:
            k, wcs = cq.poll(n - len(got))
            got.extend(wcs)
            if k == 0:
                if not sched.step():
                    break
                steps += 1
                if steps > max_steps:
                    break
        return got

    def run(self) -> None:
        """Run the carrier until nothing is left to do (timers included)."""
        self.scheduler.run()

    # ------------------------------------------------------------------ what happened
    @property
    def trace(self) -> Trace:
        """The engine's trace (the simulated fabric keeps it)."""
        trace: Trace = self.fabric.trace
        return trace

    def packets(self) -> list[Packet]:
        """Every frame the fabric carried, decoded, in the order they were sent (``record_frames``)."""
        return [decode_ethernet(f, lenient=True) for _, _, _, f in self.frames]

    def write_pcap(self, path: str) -> None:
        """Save every frame carried so far as a pcap (open it in Wireshark; ``record_frames``)."""
        write_pcap(path, [f for *_, f in self.frames])

    def __repr__(self) -> str:
        return (f"EndpointPair({self.a.name} QP {self.a.qp.qp_num:#x} <-> {self.b.name} QP {self.b.qp.qp_num:#x}, "
                f"{e.QP_TYPE_NAMES[self.qp_type]})")
