"""Two connected RC endpoints for the notebooks: the setup, not the lesson.

Notebook 02 builds every verbs object by hand.  The later notebooks start from a
:class:`Pair` so that they can show the operation itself: ``Pair()`` gives two endpoints ``a``
and ``b``, each with a PD, a CQ, a registered buffer and an RC QP, both QPs in RTS towards each
other, and pictures of what went over the wire (:meth:`Pair.ladder`, :meth:`Pair.psn_plot`).

``Pair(...)`` makes one of its two kinds, by the backend (``backend=`` or ``RDMALAB_BACKEND``):

* :class:`SoftPair` (``"soft"``, the default): two devices on a fresh, seeded simulated fabric.
  It is the fabric layer's two-endpoint harness (:class:`rdmalab.fabric.harness.EndpointPair`)
  with the notebooks' defaults (fixed PSNs, every frame recorded, MTU in bytes).  Everything it
  creates is a plain verbs object (``pair.a.qp`` is a ``rdmalab.verbs.qp.QP``), so the notebook
  code that follows is ordinary verbs code that would run on pyverbs.  ``SoftPair(...)`` is the
  simulator whatever the backend says (the checkers replay their runs on it).
* :class:`LivePair` (``"rxe"``): two RC endpoints on the kernel's Soft-RoCE, driven call by call.
  Every object is a proxy for a real kernel object owned by a verbs server next to the devices
  (:mod:`rdmalab.live.remote`): in the lab VM between rxe1 and rxe2, or on the host's own rxe
  devices.  Completions are the kernel's, memory is the registered buffer, and the pictures are
  drawn from what tcpdump captured on the veth between the two devices (the VM only: capturing
  on the host needs root).  What the kernel cannot give: the engine's trace (internal events
  such as "dropped" or "retransmitted because of a timeout"), a seeded loss pattern (loss there
  is tc netem, random), and the fabric's clock (times are the capture's wall-clock times).
  :attr:`LivePair.trace` says so instead of inventing one.

Both are :class:`Pair` instances and take :class:`Pair`'s arguments (a :class:`LivePair` also a
``server``).  What the notebooks use is on both: ``a`` and ``b`` (each with ``qp``, ``cq``, ``mr``),
``mtu``, ``access``, ``backend``, ``ladder()``, ``psn_plot()``, ``packets()``, ``write_pcap()`` and
``idle()``; the engine's ``trace`` and ``fabric`` only on a :class:`SoftPair`.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import rdmalab.verbs.enums as e
from rdmalab.capture import read
from rdmalab.capture.reader import CapturedPacket, write_pcap
from rdmalab.fabric.harness import ALL_ACCESS, Endpoint, EndpointPair
from rdmalab.fabric.sim import Fabric
from rdmalab.lab.env import backend as _backend
from rdmalab.live.remote import RemoteEndpoint, VerbsServer, shared_server
from rdmalab.verbs.cq import WC
from rdmalab.verbs.engine.nicmodel import NicModel
from rdmalab.verbs.qp import QPCap
from rdmalab.viz.ladder import Ladder, from_capture, from_trace
from rdmalab.viz.plots import Plot, psn_time
from rdmalab.wire.packet import Packet

__all__ = ["DEFAULT_ACCESS_NAMES", "LivePair", "Node", "Pair", "SoftPair"]

DEFAULT_ACCESS_NAMES = ("LOCAL_WRITE", "REMOTE_WRITE", "REMOTE_READ", "REMOTE_ATOMIC")

#: one side of a :class:`SoftPair` (``name``, ``ctx``, ``pd``, ``cq``, ``qp``, ``mr``, ``psn``, ``gid``,
#: ``poll()``, ``completions()``)
Node = Endpoint


class Pair:
    """Two RC QPs connected to each other: a :class:`SoftPair` or, on the ``rxe`` backend, a :class:`LivePair`.

    Arguments (keywords, the same for both kinds): ``backend`` (``"soft"`` or ``"rxe"``; default
    ``RDMALAB_BACKEND``, else soft), ``seed``, ``mtu`` (bytes), ``size`` (each MR), ``access``,
    ``loss`` (0..1), ``latency_ns``, ``bandwidth_gbps``, ``timeout``, ``retry_cnt``, ``rnr_retry``,
    ``min_rnr_timer``, ``max_wr``, ``psn`` (A's and B's initial PSNs) and ``names``.
    """

    backend: str
    mtu: int
    access: int
    a: Any
    b: Any

    def __new__(cls, *, backend: str | None = None, **kw: Any) -> Any:
        if cls is Pair:  # the kind by the backend; Python then calls that kind's __init__ with the same arguments
            cls = LivePair if _backend(backend) == "rxe" else SoftPair
        return super().__new__(cls)

    def ladder(self, **kw: Any) -> Ladder:
        """The ladder diagram of what went over the wire between ``a`` and ``b``."""
        raise NotImplementedError

    def psn_plot(self, **kw: Any) -> Plot:
        """PSN against time of every packet between ``a`` and ``b``."""
        raise NotImplementedError

    def idle(self, seconds: float) -> None:
        """Let ``seconds`` pass with the applications doing nothing."""
        raise NotImplementedError

    def packets(self) -> list[Packet]:
        """Every frame between ``a`` and ``b`` so far, decoded, oldest first."""
        raise NotImplementedError

    def write_pcap(self, path: str) -> None:
        """Save those frames as a pcap (open it in Wireshark)."""
        raise NotImplementedError

    def _where(self) -> str:
        return self.backend

    def __repr__(self) -> str:
        return (f"Pair({self.a.name} QP {self.a.qp.qp_num:#x} <-> {self.b.name} QP {self.b.qp.qp_num:#x}, "
                f"MTU {self.mtu}, backend {self._where()})")


def _kind(cls: type, backend: str | None, want: str) -> None:
    if backend is not None and backend != want:
        raise ValueError(f"{cls.__name__} runs on the {want!r} backend, not {backend!r}: "
                         f"Pair(backend={backend!r}) picks the kind by the backend")


class SoftPair(EndpointPair, Pair):
    """A :class:`Pair` on the simulated fabric, whatever ``RDMALAB_BACKEND`` says (checkers replay on it).
    ``nic`` (a :class:`~rdmalab.verbs.engine.nicmodel.NicModel`) gives both devices the NIC cost model
    (docs/nic-model.md): the fabric's virtual time (``pair.fabric.now_ns``) then counts what the NICs do."""

    def __init__(self, *, backend: str | None = None, seed: int = 1, mtu: int = 1024, size: int = 65536,
                 access: int | None = None, loss: float = 0.0, latency_ns: int = 1000,
                 bandwidth_gbps: float = 100.0, timeout: int = 14, retry_cnt: int = 7, rnr_retry: int = 7,
                 min_rnr_timer: int = 12, max_wr: int = 64, psn: tuple[int, int] = (100, 500),
                 names: tuple[str, str] = ("soft0", "soft1"), nic: NicModel | None = None) -> None:
        _kind(SoftPair, backend, "soft")
        self.backend = "soft"
        self.e = e
        # nic: a NIC cost model for both devices (docs/nic-model.md); None, links only
        fabric = Fabric(seed=seed, mtu=mtu, latency_ns=latency_ns, bandwidth_gbps=bandwidth_gbps, nic=nic)
        for n, ip in zip(names, ("10.0.0.1", "10.0.0.2"), strict=True):
            fabric.add_device(n, ip)
        self.access = ALL_ACCESS if access is None else access
        self.mtu = mtu
        super().__init__(fabric, size=size, mr_access=self.access, qp_access=self.access,
                         path_mtu=e.bytes_to_mtu(mtu), timeout=timeout, retry_cnt=retry_cnt, rnr_retry=rnr_retry,
                         min_rnr_timer=min_rnr_timer, max_rd_atomic=4, max_dest_rd_atomic=4,
                         cap=QPCap(max_send_wr=max_wr, max_recv_wr=max_wr), sq_sig_all=1, psn=psn, cqe=4 * max_wr,
                         record_frames=True)
        if loss:
            fabric.set_faults(loss=loss)

    # ------------------------------------------------------------------ pictures
    def ladder(self, **kw: Any) -> Ladder:
        return from_trace(self.trace, nodes=[self.a.name, self.b.name], **kw)

    def psn_plot(self, **kw: Any) -> Plot:
        return psn_time(self.trace, **kw)

    def idle(self, seconds: float) -> None:
        """Let ``seconds`` of fabric time pass (the applications do nothing meanwhile)."""
        self.fabric.run(until_ns=self.fabric.now_ns + int(seconds * 1e9))

    __repr__ = Pair.__repr__  # the notebooks' words, not the harness's


class LivePair(Pair):
    """Two RC QPs on two kernel rxe devices, connected to each other with the notebooks' defaults.

    Takes :class:`Pair`'s arguments.  ``mtu``, ``size``, ``access``, ``timeout``,
    ``retry_cnt``, ``rnr_retry``, ``min_rnr_timer``, ``max_wr`` and ``psn`` go to the kernel
    unchanged; ``loss`` becomes netem loss on the wire (both directions, random: lost packets
    are not in the capture, their retransmissions are); ``seed``, ``latency_ns``,
    ``bandwidth_gbps`` and ``names`` describe the simulated fabric and have no kernel meaning
    (the kernel picks its own keys and QP numbers).
    """

    backend = "rxe"

    def __init__(self, *, seed: int = 1, mtu: int = 1024, size: int = 65536, access: int | None = None,
                 loss: float = 0.0, latency_ns: int = 1000, bandwidth_gbps: float = 100.0, timeout: int = 14,
                 retry_cnt: int = 7, rnr_retry: int = 7, min_rnr_timer: int = 12, max_wr: int = 64,
                 psn: tuple[int, int] = (100, 500), names: tuple[str, str] = ("soft0", "soft1"),
                 server: VerbsServer | None = None, backend: str | None = None) -> None:
        if backend not in (None, "rxe") and _backend(backend) != "rxe":  # ("soft" under RDMALAB_BACKEND=rxe is rxe)
            _kind(LivePair, backend, "rxe")
        self.e = e
        self.server = server or shared_server()
        self.where = self.server.where
        self.mtu = mtu
        self.access = ALL_ACCESS if access is None else access
        qp_access = ALL_ACCESS & ~e.IBV_ACCESS_LOCAL_WRITE   # as rdmalab.fabric.harness.EndpointPair sets it
        self.a: RemoteEndpoint
        self.b: RemoteEndpoint
        self.a, self.b, self.t0 = self.server.pair(
            size=size, access=self.access, qp_access=qp_access, path_mtu=e.bytes_to_mtu(mtu), timeout=timeout,
            retry_cnt=retry_cnt, rnr_retry=rnr_retry, min_rnr_timer=min_rnr_timer, max_rd_atomic=4, max_wr=max_wr,
            cqe=4 * max_wr, psn=psn)
        self.loss = loss
        if loss or self.server.loss:   # a pair starts with its own loss rate, 0 included
            self.set_loss(loss)

    # ------------------------------------------------------------------ the wire
    def set_loss(self, loss: float) -> None:
        """Drop ``loss`` (0..1) of the packets each way at random from now on (tc netem on both veths)."""
        self.server.set_loss(100.0 * loss)
        self.loss = loss

    def captured(self) -> list[CapturedPacket]:
        """This pair's RoCE frames as tcpdump captured them (with timestamps), oldest first."""
        path = self.server.capture()
        if path is None:
            raise RuntimeError(f"no capture on {self.where}: tcpdump on the host needs root, so the host's rxe "
                               "devices give completions and memory but no packets (the lab VM captures)")
        qpns = {self.a.qp.qp_num, self.b.qp.qp_num}
        out = []
        for cp in read(path):
            bth = cp.packet.bth
            if bth is not None and bth.destqp in qpns and cp.timestamp >= self.t0 - 1.0:
                out.append(cp)
        return out

    def packets(self) -> list[Packet]:
        """This pair's frames, decoded, in the order the capture saw them."""
        return [cp.packet for cp in self.captured()]

    def write_pcap(self, path: str) -> None:
        """Save this pair's captured frames as a pcap (open it in Wireshark)."""
        write_pcap(path, self.captured())

    def capture_path(self) -> Path | None:
        """The whole capture so far (every pair on this server), as a pcap file."""
        return self.server.capture()

    # ------------------------------------------------------------------ time
    def run(self) -> None:
        """Let what is in flight finish (the kernel runs on its own; this waits a moment)."""
        self.idle(0.3)

    def idle(self, seconds: float) -> None:
        """Do nothing for ``seconds`` (wall-clock time; the kernel keeps working meanwhile)."""
        time.sleep(seconds)

    def wait(self, cq: Any, n: int = 1, timeout: float = 8.0) -> list[WC]:
        """Collect ``n`` completions from ``cq``, waiting up to ``timeout`` s; fewer if they do not come."""
        _, wcs = cq.poll(n, timeout)
        return list(wcs)

    @property
    def trace(self) -> Any:
        raise AttributeError("the kernel keeps no engine trace: on rxe the record of what happened is the "
                             "capture (pair.packets(), pair.ladder(), pair.psn_plot())")

    # ------------------------------------------------------------------ pictures
    def _names(self, ladder: Ladder) -> Ladder:
        ips = {"10.0.1.1": self.a.name, "10.0.1.2": self.b.name}
        ladder.nodes = [ips.get(n, n) for n in ladder.nodes]
        for arrow in ladder.arrows:
            arrow.src, arrow.dst = ips.get(arrow.src, arrow.src), ips.get(arrow.dst, arrow.dst)
        return ladder

    def ladder(self, **kw: Any) -> Ladder:
        """The ladder diagram of this pair's captured packets (one capture point: level arrows)."""
        kw.setdefault("limit", 200)
        return self._names(from_capture(self.captured(), **kw))

    def psn_plot(self, **kw: Any) -> Plot:
        return psn_time(self.captured(), **kw)

    def _where(self) -> str:
        return f"rxe on {self.where}"
