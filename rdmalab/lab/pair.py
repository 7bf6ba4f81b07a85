"""Two connected RC endpoints for the notebooks: the setup, not the lesson.

Notebook 02 builds every verbs object by hand.  The later notebooks start from a
:class:`Pair` so that they can show the operation itself: ``Pair()`` opens two devices on a
fresh, seeded fabric, gives each a PD, a CQ, a registered buffer and an RC QP, and moves both
QPs to RTS towards each other.  It is the fabric layer's two-endpoint harness
(:class:`rdmalab.fabric.harness.Pair`) with the notebooks' defaults (fixed PSNs, every frame
recorded, MTU in bytes) and pictures (:meth:`Pair.ladder`, :meth:`Pair.psn_plot`).  Everything
it creates is a plain verbs object (``pair.a.qp`` is a ``rdmalab.verbs.qp.QP``), so the notebook
code that follows is ordinary verbs code that would run on pyverbs.

The backend switch: ``Pair(backend="soft")`` is the simulator.  ``Pair(backend="rxe")`` (or
``RDMALAB_BACKEND=rxe``) returns a :class:`rdmalab.lab.livepair.LivePair` instead: the same
attributes, but every object is the kernel's (rxe through pyverbs, in the lab VM or on the host)
and the pictures come from the packets tcpdump captured.  :class:`SoftPair` is always the
simulator, whatever the backend (the checkers replay their runs on it).
"""

from __future__ import annotations

from typing import Any

import rdmalab.verbs.enums as e
from rdmalab.fabric.harness import ALL_ACCESS, Endpoint
from rdmalab.fabric.harness import Pair as _HarnessPair
from rdmalab.fabric.sim import Fabric
from rdmalab.lab.env import backend as _backend
from rdmalab.lab.livepair import LivePair
from rdmalab.verbs.qp import QPCap
from rdmalab.viz.ladder import Ladder, from_trace
from rdmalab.viz.plots import Plot, psn_time

DEFAULT_ACCESS_NAMES = ("LOCAL_WRITE", "REMOTE_WRITE", "REMOTE_READ", "REMOTE_ATOMIC")

#: one side of a :class:`Pair` (``name``, ``ctx``, ``pd``, ``cq``, ``qp``, ``mr``, ``psn``, ``gid``,
#: ``poll()``, ``completions()``)
Node = Endpoint


class Pair(_HarnessPair):
    """Two RC QPs connected to each other on one simulated fabric (or on kernel rxe, see the module)."""

    def __new__(cls, *, backend: str | None = None, **kw: Any) -> Any:
        if cls is Pair and _backend(backend) == "rxe":
            return LivePair(**kw)  # not a Pair instance, so Python does not call Pair.__init__ on it
        return super().__new__(cls)

    def __init__(self, *, backend: str | None = None, seed: int = 1, mtu: int = 1024, size: int = 65536,
                 access: int | None = None, loss: float = 0.0, latency_ns: int = 1000,
                 bandwidth_gbps: float = 100.0, timeout: int = 14, retry_cnt: int = 7, rnr_retry: int = 7,
                 min_rnr_timer: int = 12, max_wr: int = 64, psn: tuple[int, int] = (100, 500),
                 names: tuple[str, str] = ("soft0", "soft1")) -> None:
        self.backend = "soft"  # "rxe" was sent to LivePair by __new__
        self.e = e
        fabric = Fabric(seed=seed, mtu=mtu, latency_ns=latency_ns, bandwidth_gbps=bandwidth_gbps)
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

    def __repr__(self) -> str:
        return (f"Pair({self.a.name} QP {self.a.qp.qp_num:#x} <-> {self.b.name} QP {self.b.qp.qp_num:#x}, "
                f"MTU {self.mtu}, backend {self.backend})")


class SoftPair(Pair):
    """A :class:`Pair` on the soft engine whatever ``RDMALAB_BACKEND`` says (checkers replay on it)."""
