"""Captures the engine makes for one learner: rping between two soft devices, an iWARP exchange with damaged FPDUs.

Notebook 08 asks for the rkey and the STag that rping advertised, and notebook 07 asks which FPDUs of an
iWARP exchange fail their CRC32c.  Read off a capture shipped with the lab, those answers would be the
same for a whole class.  Here the engine makes the capture from a seed drawn for the learner
(:func:`rdmalab.lab.variant.seed`), so the keys and the damaged FPDUs are the learner's own.  A run is a
pure function of its arguments (the simulated fabric, :mod:`rdmalab.fabric.sim`, is seeded and keeps a
virtual clock), so a checker makes the same capture again in its own process and finds the same keys,
whatever files the learner's kernel wrote.  What differs between two runs are the buffers' addresses:
like rxe and siw, the engine puts a buffer's virtual address on the wire, and that is wherever Python
allocated the buffer.

* :func:`rping_capture` runs librdmacm's rping cycle (:mod:`rdmalab.tools.rping`, which follows
  rdma-core's ``rping.c``: the same four buffers, the same 16-byte descriptors, the server's RDMA READ
  and RDMA WRITE) between a client on 10.0.0.1 and a server on 10.0.0.2, connected by the engine's
  rdma_cm, over two soft RoCEv2 devices (as on rxe: CM MADs, then RC packets) or two soft iWARP devices
  (as on siw: TCP's handshake, the MPA Request and Reply, then FPDUs).  The client and the server are
  two programs on real hosts; here one thread takes their steps in the order the protocol imposes (each
  side waits for what the other sent), which is the order they take on two hosts.
* :func:`damaged_iwarp_capture` records a SEND, an RDMA WRITE and an RDMA READ between two soft iWARP
  devices that negotiated CRC32c (RFC 5044 7.1), then damages some FPDUs in the file: two 16-bit words
  of their data trade places.  The TCP checksum, a one's-complement sum of 16-bit words (RFC 1071),
  does not change when words trade places, so TCP would take the segment; the FPDU's CRC32c (RFC 5044
  4.4) no longer matches.
"""

from __future__ import annotations

import io
import random
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from rdmalab.capture.reader import CapturedPacket, read, write_pcap
from rdmalab.fabric.iwpair import IwPair
from rdmalab.fabric.sim import Fabric, reset_default_fabric
from rdmalab.fabric.simtcp import add_iwarp_device
from rdmalab.tools import rping as rp
from rdmalab.verbs import enums as e
from rdmalab.verbs.cm_enums import RAI_PASSIVE
from rdmalab.verbs.cmid import CMID, AddrInfo, CMEventChannel
from rdmalab.verbs.device import Context
from rdmalab.verbs.mr import MR
from rdmalab.verbs.pd import PD
from rdmalab.wire.net import TCP, IPv4, tcp_checksum
from rdmalab.wire.packet import Packet

CLIENT, SERVER = "10.0.0.1", "10.0.0.2"
TRANSPORTS = ("roce", "iwarp")


@dataclass
class OwnCapture:
    """A capture the engine made: where it was written, its frames decoded, and what the run knew."""

    path: Path
    packets: list[CapturedPacket]
    #: for rping: the client's start buffer (the one it advertises first) and its rdma buffer (the sink
    #: the server writes into), as (address, key); for a damaged capture: the FPDU indexes damaged
    facts: dict[str, object] = field(default_factory=dict)

    def fpdus(self) -> list[Packet]:
        """The FPDUs that carry a CRC32c, in capture order (what notebook 07 numbers from 0)."""
        return [p for cp in self.packets for p in cp.pdus if p.crc_kind == "crc32c"]


def _where(directory: str | Path | None, prefix: str) -> Path:
    if directory is None:
        return Path(tempfile.mkdtemp(prefix=prefix))
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    return path


def _register_before(fab: Fabric, names: tuple[str, str], count: int) -> None:
    """Register and deregister ``count`` memory regions on each device: a device that has been in use.

    rxe numbers its MRs in order and puts the number in the key's upper 24 bits (the low 8 bits are
    random), and so does the engine; a device that registered ``count`` MRs before rping started gives
    rping's buffers the numbers after them."""
    for name in names:
        pd = PD(Context(name=name, fabric=fab))
        for _ in range(count):
            MR(pd, 64, e.IBV_ACCESS_LOCAL_WRITE).close()
        pd.close()


def rping_capture(seed: int, *, transport: str = "roce", size: int = 64, count: int = 1,
                  registered_before: int = 0, port: int = 7174, directory: str | Path | None = None,
                  name: str | None = None) -> OwnCapture:
    """``rping -s -a 10.0.0.2 -S size`` and ``rping -c -a 10.0.0.2 -S size -C count -V`` on two soft devices.

    ``transport`` is ``"roce"`` (soft0 and soft1, RoCEv2) or ``"iwarp"`` (siw0 and siw1).  The capture
    is written to ``directory`` (a new temporary folder if None) as ``name`` (``rping-<transport>.pcap``)
    and read back with :func:`rdmalab.capture.read`.  ``facts`` holds ``start`` and ``sink``: the
    client's two buffers as (address, key), from the client's own MRs."""
    if transport not in TRANSPORTS:
        raise ValueError(f"transport {transport!r}: one of {TRANSPORTS}")
    if not rp.MIN_BUFSIZE <= size <= rp.BUFSIZE - 1:
        raise ValueError(f"size {size}: rping takes {rp.MIN_BUFSIZE} to {rp.BUFSIZE - 1} bytes")
    if count < 1:
        raise ValueError(f"count {count}: at least one cycle")
    if registered_before < 0:
        raise ValueError(f"registered_before {registered_before}: a number of MRs, 0 or more")
    path = _where(directory, "rdmalab-rping-") / (name or f"rping-{transport}.pcap")
    fab = Fabric(seed=seed, mtu=1024)
    names = ("soft0", "soft1") if transport == "roce" else ("siw0", "siw1")
    for n, ip in zip(names, (CLIENT, SERVER), strict=True):
        if transport == "roce":
            fab.add_device(n, ip)
        else:
            add_iwarp_device(fab, n, ip)
    reset_default_fabric(fab)  # rdma_cm finds the devices by address among the default devices
    try:
        _register_before(fab, names, registered_before)
        with fab.write_pcap(str(path)):
            facts = _rping(fab, size=size, count=count, port=port)
    finally:
        reset_default_fabric(None)
    return OwnCapture(path, list(read(path)), facts)


def _rping(fab: Fabric, *, size: int, count: int, port: int) -> dict[str, object]:
    """rping's client and server (rping_test_client / rping_test_server), their steps taken in turn."""
    out = io.StringIO()
    copt = rp.RpingOptions(server=False, addr=SERVER, port=port, size=size, count=count, validate=True, timeout=30)
    sopt = rp.RpingOptions(server=True, addr=SERVER, port=port, size=size, timeout=30)
    where = f"{SERVER}:{port}"
    ev = rp.EV
    sch, cch = CMEventChannel(), CMEventChannel()
    listener = CMID(sch)
    listener.bind_addr(AddrInfo(src=SERVER, src_service=port, flags=RAI_PASSIVE))
    listener.listen(3)
    client = CMID(cch)
    client.resolve_addr(AddrInfo(dst=SERVER, dst_service=port))
    rp.expect_event(cch, ev.RDMA_CM_EVENT_ADDR_RESOLVED, "rdma_resolve_addr", where)
    client.resolve_route()
    rp.expect_event(cch, ev.RDMA_CM_EVENT_ROUTE_RESOLVED, "rdma_resolve_route", where)
    c = rp.Side(client, copt, out)
    c.post_recv()
    client.connect(c.param())
    req = rp.expect_event(sch, ev.RDMA_CM_EVENT_CONNECT_REQUEST, "wait for CONNECT_REQUEST", where)
    server = CMID(req, listen_id=listener)
    s = rp.Side(server, sopt, out)
    s.post_recv()
    server.accept(s.param())
    rp.expect_event(sch, ev.RDMA_CM_EVENT_ESTABLISHED, "accept", where)
    rp.expect_event(cch, ev.RDMA_CM_EVENT_ESTABLISHED, "connect error", where)
    assert c.start_mr is not None
    start = 65
    for ping in range(count):
        text = rp.ping_text(ping, start, size)
        start = 65 if start + 1 > 122 else start + 1
        c.start_mr.write(text, size)
        c.send_info(c.start_mr)  # client: "here is my start buffer"
        info = s.wait("the client's source descriptor", rp.RECV_WRID)
        if info is None:
            raise RuntimeError("rping: the connection went away before the first descriptor")
        addr, rkey, length = info
        s.rdma(e.IBV_WR_RDMA_READ, length, addr, rkey)  # server: read it
        s.wait("the RDMA READ", rp.RDMA_WRID)
        data = bytes(s.rdma_mr.read(size, 0))
        s.send_info(None)  # server: go ahead
        c.wait("the server's go-ahead after its RDMA READ", rp.RECV_WRID)
        c.send_info(c.rdma_mr)  # client: "here is my sink buffer"
        info = s.wait("the client's sink descriptor", rp.RECV_WRID)
        if info is None:
            raise RuntimeError("rping: the connection went away before the sink descriptor")
        addr, rkey, _ = info
        s.rdma(e.IBV_WR_RDMA_WRITE, data.find(b"\0") + 1, addr, rkey)  # server: write it back
        s.wait("the RDMA WRITE", rp.RDMA_WRID)
        s.send_info(None)  # server: go ahead
        c.wait("the server's go-ahead after its RDMA WRITE", rp.RECV_WRID)
        if bytes(c.rdma_mr.read(size, 0)) != text:
            raise RuntimeError(f"rping cycle {ping}: the data came back changed (-V would say 'data mismatch')")
    client.disconnect()  # after -C cycles the client disconnects; the server sees DISCONNECTED, then disconnects
    if s.wait("the client's next descriptor", rp.RECV_WRID) is not None:
        raise RuntimeError("rping: the server got a descriptor after the client disconnected")
    server.disconnect()
    rp.expect_event(cch, ev.RDMA_CM_EVENT_DISCONNECTED, "rdma_disconnect", where)
    listener.close()
    fab.run()  # what is left: the last ACKs, the CM's timewait
    return {"start": (c.start_mr.buf, c.start_mr.rkey), "sink": (c.rdma_mr.buf, c.rdma_mr.rkey)}


def damaged_iwarp_capture(seed: int, *, send: int = 300, write: int = 4000, read_back: int = 2500,
                          damage: int | None = None, directory: str | Path | None = None,
                          name: str = "iwarp-crc.pcap") -> OwnCapture:
    """A SEND of ``send`` bytes, an RDMA WRITE of ``write`` and an RDMA READ of ``read_back`` over iWARP
    with CRC32c, with ``damage`` of the FPDUs that carry data damaged in the file afterwards (None: 2 or 3).

    How many (when ``damage`` is None), which FPDUs and which of their words trade places follow from
    ``seed``; ``facts["damaged"]`` is the list of their indexes among the CRC32c FPDUs (0-based, capture
    order)."""
    for what, n in (("send", send), ("write", write), ("read_back", read_back)):
        if not 4 <= n <= 16384:
            raise ValueError(f"{what} {n}: between 4 and 16384 bytes")
    if damage is not None and damage < 1:
        raise ValueError(f"damage {damage}: at least one FPDU")
    folder = _where(directory, "rdmalab-iwarp-crc-")
    clean = folder / (name + ".clean")
    rng = random.Random(seed)
    data = rng.randbytes(send + write + read_back)
    if damage is None:
        damage = rng.choice((2, 3))
    size = send + write + read_back
    iw = IwPair(seed=seed, crc=True, capture=str(clean), recvs=1, recv_len=send, size=size)
    try:
        iw.a.mr.write(data, send + write, 0)
        iw.b.mr.write(data[send + write:], read_back, write)  # what the READ brings back, after where the WRITE puts
        iw.a.post(e.IBV_WR_SEND, 0, send, wr_id=1)
        iw.a.post(e.IBV_WR_RDMA_WRITE, send, write, wr_id=2, remote=iw.b.mr.buf, rkey=iw.b.mr.rkey)
        iw.a.post(e.IBV_WR_RDMA_READ, send + write, read_back, wr_id=3, remote=iw.b.mr.buf + write,
                  rkey=iw.b.mr.rkey)
        if len(iw.wait(iw.a, 3)) != 3:
            raise RuntimeError("the iWARP SEND, WRITE and READ did not complete")
        iw.run()
        if iw.b.mr.read(write, 0) != data[send:send + write] or iw.a.mr.read(size, 0) != data:
            raise RuntimeError("the iWARP WRITE or READ moved other bytes")
    finally:
        iw.close()
    packets = list(read(clean))
    # the FPDUs with data, each in one frame: (index among the CRC32c FPDUs, frame number, where its data is)
    candidates: list[tuple[int, int, int, int]] = []
    index = 0
    for cp in packets:
        for p in cp.pdus:
            if p.crc_kind != "crc32c":
                continue
            at = bytes(cp.packet.data).find(bytes(p.data))
            if at >= 0 and p.payload_length >= 8:
                candidates.append((index, cp.frame_number, at + p.payload_offset, p.payload_length))
            index += 1
    if len(candidates) < damage:
        raise ValueError(f"only {len(candidates)} FPDUs carry data; cannot damage {damage}")
    chosen = sorted(rng.sample(candidates, damage))
    frames = {cp.frame_number: bytearray(cp.packet.data) for cp in packets}
    for _, number, start, length in chosen:
        frame = frames[number]
        first = start + (start % 2)  # words at even offsets of the frame: the TCP segment starts at an even one
        words = [o for o in range(first, start + length - 1, 2)]
        while True:
            a, b = sorted(rng.sample(words, 2))
            if frame[a:a + 2] != frame[b:b + 2]:
                break
        frame[a:a + 2], frame[b:b + 2] = frame[b:b + 2], frame[a:a + 2]
    path = folder / name
    write_pcap(path, [(cp.timestamp, bytes(frames[cp.frame_number])) for cp in packets], nano=True)
    clean.unlink()
    damaged = list(read(path))
    for _, number, _, _ in chosen:  # TCP would take the damaged segment: its checksum still holds
        pkt = damaged[number - 1].packet
        ip, tcp = pkt.get(IPv4), pkt.get(TCP)
        assert ip is not None and tcp is not None
        if tcp_checksum(ip, bytes(pkt.data[14 + ip.header_len:14 + ip.total_length])) != tcp.checksum:
            raise RuntimeError(f"frame {number}: the damage changed the TCP checksum")
    return OwnCapture(path, damaged, {"damaged": [i for i, *_ in chosen]})
