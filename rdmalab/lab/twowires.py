"""The same RDMA WRITE and READ over RoCEv2 and over iWARP, each run by the engine and captured, side by side.

:func:`write_and_read` runs one WRITE of ``size`` bytes and one READ of the same bytes back on two
soft RoCEv2 devices (:class:`rdmalab.fabric.harness.EndpointPair`, path MTU 1024 as rxe on a 1500-byte
Ethernet) and on two soft iWARP devices connected by rdma_cm (:class:`rdmalab.fabric.iwpair.IwPair`,
TCP MSS 1460), both on the simulated fabric, writes each run to a pcap and reads it back with
:func:`rdmalab.capture.read`, as ``rdmalab decode`` would.  :class:`SideBySide` lays the two
captures next to each other: for every frame its direction, what it carries, its size on the
wire and what it acknowledges (an RC ACK's PSN on RoCEv2; TCP's cumulative acknowledgement
number, in bytes of the stream, on iWARP).
"""

from __future__ import annotations

import html
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from rdmalab.capture.reader import CapturedPacket, read
from rdmalab.fabric.harness import EndpointPair
from rdmalab.fabric.iwpair import IwPair
from rdmalab.fabric.simtcp import SimTcp
from rdmalab.verbs import enums as e
from rdmalab.wire.header import Header
from rdmalab.wire.ib import AETH, BTH
from rdmalab.wire.net import TCP, IPv4, is_retransmission, seq_add, seq_max, tcp_flag_names

H = TypeVar("H", bound=Header)


@dataclass
class Row:
    """One frame of a run: ``direction`` is ``"->"`` (requester to responder) or ``"<-"``."""

    frame: int
    direction: str
    what: str
    size: int
    acks: str = ""
    carries_data: bool = False


@dataclass
class Run:
    wire: str
    pcap: Path
    packets: list[CapturedPacket]
    rows: list[Row] = field(default_factory=list)

    @property
    def frames(self) -> int:
        return len(self.rows)

    @property
    def wire_bytes(self) -> int:
        return sum(r.size for r in self.rows)

    @property
    def ack_only(self) -> int:
        """Frames that only acknowledge (no payload, no request)."""
        return sum(1 for r in self.rows if r.acks and not r.carries_data)

    def __str__(self) -> str:
        t0 = self.packets[0].timestamp if self.packets else 0.0
        times = {cp.frame_number: cp.timestamp - t0 for cp in self.packets}
        lines = [f"{self.wire}: {self.frames} frames, {self.wire_bytes} bytes on the wire"]
        for r in self.rows:
            t = times.get(r.frame, 0.0)
            when = f"{t * 1e3:9.3f} ms" if t >= 1e-3 else f"{t * 1e6:9.3f} us"
            lines.append(f"{r.frame:>3} {when} {r.direction} {r.what[:34]:34} {r.size:>5}  {r.acks}")
        return "\n".join(lines)


def _directed(packets: list[CapturedPacket], requester_ip: str,
              transport: type[H]) -> Iterator[tuple[CapturedPacket, H, str]]:
    """The IPv4 packets that carry a ``transport`` header, with it and their direction: "->" from the
    requester, "<-" to it."""
    for cp in packets:
        head = cp.packet.get(transport)
        ip = cp.packet.get(IPv4)
        if head is not None and ip is not None:
            yield cp, head, "->" if ip.describe("src") == requester_ip else "<-"


def _roce_rows(packets: list[CapturedPacket], requester_ip: str) -> list[Row]:
    rows = []
    for cp, bth, direction in _directed(packets, requester_ip, BTH):
        pkt = cp.packet
        aeth = pkt.get(AETH)
        what = pkt.summary().split(" QP=")[0] if hasattr(pkt, "summary") else str(bth.opcode)
        what = f"{what.split(' PSN')[0]} PSN {bth.psn}"
        acks = f"PSN {bth.psn} and before" if aeth is not None else ""
        rows.append(Row(cp.frame_number, direction, what, len(pkt.data), acks, pkt.payload_length > 0))
    return rows


def _iwarp_rows(packets: list[CapturedPacket], requester_ip: str) -> list[Row]:
    rows = []
    iss: dict[str, int] = {}  # per direction: the sequence number before the first byte
    sent: dict[str, int] = {}  # per direction: the sequence number after the furthest byte seen (modulo 2^32)
    for cp, tcp, direction in _directed(packets, requester_ip, TCP):
        pkt = cp.packet
        other = "<-" if direction == "->" else "->"
        if tcp.flags & TCP.SYN:
            iss[direction] = tcp.seq
        if cp.pdus:
            what = "; ".join((p.info or "").split(" [")[0].split(" STag")[0].split(" QN")[0].split(" sink")[0]
                             for p in cp.pdus)
        elif is_retransmission(tcp.seq, pkt.payload_length, sent.get(direction)):
            what = "TCP retransmission"
        elif tcp.flags & (TCP.SYN | TCP.FIN):
            what = "TCP " + "+".join(tcp_flag_names(tcp.flags & (TCP.SYN | TCP.FIN | TCP.ACK)))
        else:
            what = "TCP ACK"  # (new bytes that end no PDU, the middle of an FPDU, too: a TCP ACK with data)
        acks = ""
        if tcp.flags & TCP.ACK and other in iss:
            acks = f"bytes up to {seq_add(tcp.ack, -iss[other] - 1)}"
        rows.append(Row(cp.frame_number, direction, what, len(pkt.data), acks, pkt.payload_length > 0))
        if pkt.payload_length:
            sent[direction] = seq_max(seq_add(tcp.seq, pkt.payload_length), sent.get(direction))
    return rows


def write_and_read(size: int = 3000, *, seed: int = 0, directory: str | Path | None = None) -> tuple[Run, Run]:
    """One WRITE of ``size`` bytes and one READ of them back, over RoCEv2 and over iWARP; both captured."""
    where = Path(directory) if directory is not None else Path(tempfile.mkdtemp(prefix="rdmalab-two-wires-"))
    data = bytes((i * 13 + 5) & 0xFF for i in range(size))
    # RoCEv2: two soft devices, an RC QP each (path MTU 1024)
    roce = EndpointPair(seed=seed, record_frames=True, path_mtu=e.IBV_MTU_1024)
    roce.a.mr.write(data, size, 0)
    roce.send(roce.a, e.IBV_WR_RDMA_WRITE, wr_id=1, length=size, remote=0)
    roce.send(roce.a, e.IBV_WR_RDMA_READ, wr_id=2, offset=size, length=size, remote=0)
    if len(roce.wait(roce.a.cq, 2)) != 2:
        raise RuntimeError("the RoCEv2 WRITE and READ did not complete")
    roce.run()
    if roce.a.mr.read(size, size) != data:
        raise RuntimeError("the RoCEv2 READ brought back other bytes")
    roce_pcap = where / "roce-write-read.pcap"
    roce.write_pcap(str(roce_pcap))
    # iWARP: two soft iWARP devices, connected with rdma_cm (TCP + MPA), MSS 1460
    iw_pcap = where / "iwarp-write-read.pcap"
    iw = IwPair(seed=seed, capture=str(iw_pcap), recvs=0)
    iw.a.mr.write(data, size, 0)
    iw.a.post(e.IBV_WR_RDMA_WRITE, 0, size, wr_id=1, remote=iw.b.mr.buf, rkey=iw.b.mr.rkey)
    iw.a.post(e.IBV_WR_RDMA_READ, size, size, wr_id=2, remote=iw.b.mr.buf, rkey=iw.b.mr.rkey)
    if len(iw.wait(iw.a, 2)) != 2:
        raise RuntimeError("the iWARP WRITE and READ did not complete")
    iw.run()
    iw.close()
    if iw.a.mr.read(size, size) != data:
        raise RuntimeError("the iWARP READ brought back other bytes")
    r = Run("RoCEv2", roce_pcap, list(read(roce_pcap)))
    r.rows = _roce_rows(r.packets, "10.0.0.1")
    i = Run("iWARP", iw_pcap, list(read(iw_pcap)))
    i.rows = _iwarp_rows(i.packets, "10.0.0.1")
    return r, i


def iwarp_with_a_loss(size: int = 4000, *, lose: int = 2, seed: int = 0,
                      directory: str | Path | None = None) -> Run:
    """One WRITE of ``size`` bytes over iWARP whose ``lose``-th data segment (counting from 1, the
    requester's segments after the MPA exchange) is lost once; TCP repairs it.  Captured as sent."""

    where = Path(directory) if directory is not None else Path(tempfile.mkdtemp(prefix="rdmalab-iwarp-loss-"))
    path = where / "iwarp-loss.pcap"
    iw = IwPair(seed=seed, capture=str(path), recvs=0)
    tcp = SimTcp.of(iw.fabric)
    seen = {"n": 0}

    def drop(src: Any, seg: Any) -> bool:
        if src is not iw.dev_a or not seg.data or seen["n"] >= lose:
            return False
        seen["n"] += 1
        return seen["n"] == lose

    tcp.drop = drop
    data = bytes((i * 7) & 0xFF for i in range(size))
    iw.a.mr.write(data, size, 0)
    iw.a.post(e.IBV_WR_RDMA_WRITE, 0, size, wr_id=1, remote=iw.b.mr.buf, rkey=iw.b.mr.rkey)
    iw.wait(iw.a)
    iw.run()
    iw.close()
    if iw.b.mr.read(size, 0) != data:
        raise RuntimeError("the WRITE did not arrive whole")
    r = Run("iWARP", path, list(read(path)))
    r.rows = _iwarp_rows(r.packets, "10.0.0.1")
    return r


class SideBySide:
    """Two runs in two columns of one table (HTML in a notebook, text otherwise)."""

    def __init__(self, left: Run, right: Run) -> None:
        self.left, self.right = left, right

    def totals(self) -> dict[str, dict[str, int]]:
        return {r.wire: {"frames": r.frames, "wire bytes": r.wire_bytes, "acknowledgement-only frames": r.ack_only}
                for r in (self.left, self.right)}

    def _cells(self, r: Row | None) -> list[str]:
        if r is None:
            return ["", "", "", "", ""]
        return [str(r.frame), r.direction, r.what, str(r.size), r.acks]

    def __str__(self) -> str:
        """Both columns as wide as their longest cell: nothing is cut (a PSN must be read whole)."""
        n = max(len(self.left.rows), len(self.right.rows))
        left = [self._cells(r) for r in self.left.rows] + [self._cells(None)] * (n - len(self.left.rows))
        right = [self._cells(r) for r in self.right.rows] + [self._cells(None)] * (n - len(self.right.rows))
        wl = [max([len(c[i]) for c in left] + [0]) for i in range(5)]
        wr = [max([len(c[i]) for c in right] + [0]) for i in range(5)]

        def cell(c: list[str], w: list[int]) -> str:
            return f"{c[0]:>{w[0]}} {c[1]:{w[1]}} {c[2]:{w[2]}} {c[3]:>{w[3]}} {c[4]:{w[4]}}"

        width = len(cell(self._cells(None), wl))
        lines = [f"{self.left.wire:<{width}} | {self.right.wire}"]
        for ca, cb in zip(left, right, strict=True):
            lines.append(f"{cell(ca, wl)} | {cell(cb, wr).rstrip()}")
        for wire, t in self.totals().items():
            lines.append(f"{wire}: " + ", ".join(f"{v} {k}" for k, v in t.items()))
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        n = max(len(self.left.rows), len(self.right.rows))
        th = "".join(f"<th>{h}</th>" for h in ("#", "", "what", "bytes", "acknowledges") * 2)
        body = []
        for k in range(n):
            a = self.left.rows[k] if k < len(self.left.rows) else None
            b = self.right.rows[k] if k < len(self.right.rows) else None
            cells = self._cells(a) + self._cells(b)
            # text left, numbers right (a notebook's tables right-align every cell by default)
            side = [f"text-align:{a};padding:1px 6px" for a in ("right", "left", "left", "right", "left")]
            style = [*side[:4], side[4] + ";border-right:2px solid #888", *side]
            body.append("<tr>" + "".join(f"<td style='{s}'>{html.escape(c)}</td>" for c, s in zip(cells, style,
                                                                                                    strict=True))
                        + "</tr>")
        tot = self.totals()
        foot = "".join(f"<td colspan='5'>{html.escape(w)}: "
                       + html.escape(", ".join(f"{v} {k}" for k, v in t.items())) + "</td>" for w, t in tot.items())
        return ("<table style='font-family:monospace;font-size:12px'>"
                f"<tr><th colspan='5'>{html.escape(self.left.wire)}</th><th colspan='5'>{html.escape(self.right.wire)}"
                f"</th></tr><tr>{th}</tr>{''.join(body)}<tr>{foot}</tr></table>")


def side_by_side(left: Run, right: Run) -> SideBySide:
    return SideBySide(left, right)


def summary(run: Run) -> dict[str, Any]:
    return {"wire": run.wire, "frames": run.frames, "wire bytes": run.wire_bytes, "ack-only frames": run.ack_only}
