"""``Pair(backend="rxe")``: two RC endpoints on the kernel's Soft-RoCE, driven call by call.

The notebooks' cells post work requests on ``pair.a.qp``, poll ``pair.a.poll()``, read
``pair.b.mr`` and draw ``pair.ladder()``.  On the ``rxe`` backend every one of those objects is a
proxy for a real kernel object owned by a verbs server next to the devices
(:mod:`rdmalab.live.remote`): in the lab VM between rxe1 and rxe2, or on the host's own rxe
devices.  Completions are the kernel's, memory is the registered buffer, and the pictures are
drawn from what tcpdump captured on the veth between the two devices (the VM only: capturing
on the host needs root).

What the kernel cannot give: the engine's trace (internal events such as "dropped" or
"retransmitted because of a timeout"), a seeded loss pattern (loss here is tc netem, random),
and the fabric's clock (times are the capture's wall-clock times).  :attr:`LivePair.trace`
says so instead of inventing one.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import rdmalab.verbs.enums as e
from rdmalab.capture import read
from rdmalab.capture.reader import CapturedPacket, write_pcap
from rdmalab.fabric.harness import ALL_ACCESS
from rdmalab.live.remote import RemoteEndpoint, VerbsServer, shared_server
from rdmalab.verbs.cq import WC
from rdmalab.viz.ladder import Ladder, from_capture
from rdmalab.viz.plots import Plot, psn_time
from rdmalab.wire.packet import Packet

__all__ = ["LivePair"]


class LivePair:
    """Two RC QPs on two kernel rxe devices, connected to each other with the notebooks' defaults.

    Takes :class:`rdmalab.lab.pair.Pair`'s arguments.  ``mtu``, ``size``, ``access``, ``timeout``,
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
                 server: VerbsServer | None = None) -> None:
        self.e = e
        self.server = server or shared_server()
        self.where = self.server.where
        self.mtu = mtu
        self.access = ALL_ACCESS if access is None else access
        qp_access = ALL_ACCESS & ~e.IBV_ACCESS_LOCAL_WRITE   # as rdmalab.fabric.harness.Pair sets it
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

    def __repr__(self) -> str:
        return (f"Pair({self.a.name} QP {self.a.qp.qp_num:#x} <-> {self.b.name} QP {self.b.qp.qp_num:#x}, "
                f"MTU {self.mtu}, backend rxe on {self.where})")
