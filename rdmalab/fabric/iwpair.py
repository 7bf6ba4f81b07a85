"""Two soft iWARP devices connected by rdma_cm on the simulated fabric: the iWARP twin of :class:`~rdmalab.fabric.harness.EndpointPair`.

``IwPair()`` builds a fabric with ``siw0`` (10.0.0.1, the client, ``pair.a``) and ``siw1``
(10.0.0.2, the server, ``pair.b``), connects them with pyverbs.cmid calls (TCP and the MPA
Request/Reply, :mod:`rdmalab.verbs.cmid_iwarp`) and gives each side a CQ, one MR with every access
right, and its RC QP.  Work requests are posted on ``pair.a.qp`` / ``pair.b.qp`` as on any QP;
:meth:`IwPair.wait` collects completions while the fabric's virtual clock runs.  Everything is
an ordinary ``rdmalab.verbs`` object, so tests and notebooks read like verbs code.
"""

from __future__ import annotations

from typing import Any

from rdmalab.fabric.sim import Fabric, reset_default_fabric
from rdmalab.fabric.simtcp import SimTcp, add_iwarp_device
from rdmalab.verbs import enums as e
from rdmalab.verbs.cm_enums import RAI_PASSIVE
from rdmalab.verbs.cm_enums import rdma_cm_event_type as EV
from rdmalab.verbs.cmid import CMID, AddrInfo, CMEvent, CMEventChannel, ConnParam
from rdmalab.verbs.cq import CQ, WC
from rdmalab.verbs.engine.iwarp import IwQP
from rdmalab.verbs.mr import MR
from rdmalab.verbs.qp import QPCap, QPInitAttr
from rdmalab.verbs.wr import SGE, RecvWR, SendWR

ALL_ACCESS = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ


class IwEndpoint:
    """One side: its CMID, CQ, MR (``size`` bytes, every access) and QP."""

    def __init__(self, cmid: CMID, size: int, cap: QPCap) -> None:
        self.cmid = cmid
        assert cmid.ctx is not None
        self.cq = CQ(cmid.ctx, 4096)
        cmid.create_qp(QPInitAttr(qp_type=e.IBV_QPT_RC, scq=self.cq, rcq=self.cq, cap=cap, sq_sig_all=0))
        assert cmid.qp is not None
        self.qp = cmid.qp
        self.mr = MR(cmid.pd, size, ALL_ACCESS)

    @property
    def engine(self) -> IwQP:
        eng = self.qp.engine
        assert isinstance(eng, IwQP)
        return eng

    def sge(self, offset: int = 0, length: int = 0) -> SGE:
        return SGE(self.mr.buf + offset, length, self.mr.lkey)

    def post_recv(self, offset: int = 0, length: int = 0, wr_id: int = 0) -> None:
        self.qp.post_recv(RecvWR(wr_id=wr_id, num_sge=1, sg=[self.sge(offset, length)]))

    def post(self, opcode: int, offset: int = 0, length: int = 0, *, wr_id: int = 0, remote: int = 0,
             rkey: int = 0, flags: int = e.IBV_SEND_SIGNALED, invalidate: int = 0) -> None:
        """Post one work request on this side's QP from ``mr[offset:offset + length]``."""
        wr = SendWR(wr_id=wr_id, opcode=opcode, num_sge=1, sg=[self.sge(offset, length)], send_flags=flags)
        if opcode in (e.IBV_WR_RDMA_WRITE, e.IBV_WR_RDMA_READ):
            wr.set_wr_rdma(rkey, remote)
        if opcode == e.IBV_WR_SEND_WITH_INV:
            wr.invalidate_rkey = invalidate
        self.qp.post_send(wr)


class IwPair:
    """``siw0`` (client, ``a``) and ``siw1`` (server, ``b``) connected over iWARP on a simulated fabric.

    ``crc`` (or ``crc_a``/``crc_b``) makes that side ask for CRC32c in its MPA frame; ``ird``/``ord``
    are the client's ``responder_resources``/``initiator_depth`` (the server accepts with the same);
    ``recvs`` receives of ``recv_len`` bytes are posted on the server before it accepts (and on
    the client once connected), so that a Send finds one.  ``capture`` writes a pcap; ``record``
    keeps every frame in :attr:`frames`."""

    def __init__(self, *, seed: int = 0, size: int = 1 << 16, crc: bool = False, crc_a: bool | None = None,
                 crc_b: bool | None = None, ird: int = 4, ord: int = 4, port: int = 7174, recvs: int = 4,
                 recv_len: int = 4096, private_data: bytes = b"", mss: int = 1460, capture: str | None = None,
                 fabric: Fabric | None = None, cap: QPCap | None = None, record: bool = False) -> None:
        fab = fabric if fabric is not None else Fabric(seed=seed)
        self.fabric = fab
        SimTcp.of(fab).mss = mss
        self.dev_a = add_iwarp_device(fab, "siw0", "10.0.0.1", mpa_crc=crc if crc_a is None else crc_a)
        self.dev_b = add_iwarp_device(fab, "siw1", "10.0.0.2", mpa_crc=crc if crc_b is None else crc_b)
        reset_default_fabric(fab)
        self.tap = fab.write_pcap(capture) if capture else None
        #: with ``record``, every frame the fabric carried (from the first SYN on)
        self.frames: list[bytes] = []
        if record:
            fab.tap(lambda t, s, d, f: self.frames.append(f))
        cap = cap or QPCap(max_send_wr=256, max_recv_wr=256)
        self.sch, self.cch = CMEventChannel(), CMEventChannel()
        self.listener = CMID(self.sch)
        self.listener.bind_addr(AddrInfo(src="10.0.0.2", src_service=port, flags=RAI_PASSIVE))
        self.listener.listen()
        client = CMID(self.cch)
        client.resolve_addr(AddrInfo(dst="10.0.0.2", dst_service=port))
        self._expect(self.cch, EV.RDMA_CM_EVENT_ADDR_RESOLVED)
        client.resolve_route()
        self._expect(self.cch, EV.RDMA_CM_EVENT_ROUTE_RESOLVED)
        self.a = IwEndpoint(client, size, cap)
        param = ConnParam(resources=ird, depth=ord)
        param.set_private_data(private_data)
        client.connect(param)
        req = self._expect(self.sch, EV.RDMA_CM_EVENT_CONNECT_REQUEST)
        self.request_private_data = req.private_data
        server = CMID(req, listen_id=self.listener)
        self.b = IwEndpoint(server, size, cap)
        for i in range(recvs):
            self.b.post_recv(0, recv_len, wr_id=1000 + i)
        server.accept(ConnParam(resources=ird, depth=ord))
        self._expect(self.sch, EV.RDMA_CM_EVENT_ESTABLISHED)
        self._expect(self.cch, EV.RDMA_CM_EVENT_ESTABLISHED)
        for i in range(recvs):
            self.a.post_recv(0, recv_len, wr_id=2000 + i)

    @staticmethod
    def _expect(ch: CMEventChannel, kind: int) -> CMEvent:
        ev = CMEvent(ch)
        if ev.event_type != kind:
            raise RuntimeError(f"expected {EV(kind).name}, got {ev.event_str()} (status {ev.status})")
        return ev

    def wait(self, side: IwEndpoint, count: int = 1, max_steps: int = 100_000) -> list[WC]:
        """Up to ``count`` completions of ``side``'s CQ, running the fabric until they come or nothing is left."""
        got: list[WC] = []
        for _ in range(max_steps):
            n, wcs = side.cq.poll(count - len(got))
            got.extend(wcs)
            if len(got) >= count or (not n and not self.fabric.pending):
                break
        return got

    def run(self) -> None:
        """Run the fabric until nothing is left to happen (every segment delivered, every timer run)."""
        self.fabric.run()

    def close(self) -> None:
        if self.tap is not None:
            self.tap.close()
            self.tap = None

    def __enter__(self) -> IwPair:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
