"""Hostile captures for the analyzer's tests and benchmarks (``benchmarks/bench_analyze.py``).

Each builder writes a pcap (nanosecond timestamps) of about ``n`` frames:

* :func:`appended`: a real capture appended to itself (``mergecap -a``): the same QPNs, PSNs and
  addresses again, time jumping back at each seam.
* :func:`duplicated`: every frame of a real capture twice (a mirror port copying twice).
* :func:`psn_wrap`: RC WRITEs whose PSNs wrap past 2^24, with coalesced ACKs.
* :func:`many_connections`: 10,000 (or ``conns``) RC connections between two hosts, interleaved.
* :func:`reordered`: a real capture with frames shuffled inside windows of 8 (timestamps kept,
  so they go back).
* :func:`snaplen_cut`: a real capture with every frame cut to ``snaplen`` bytes (``editcap -s``),
  and :func:`truncated_tail`: a capture that ends in the middle of its last record.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator

from rdmalab.capture.columnar import record_blocks
from rdmalab.capture.pcapwriter import CaptureWriter
from rdmalab.wire import AETH, BTH, RETH, encode_rocev2

Frame = tuple[int, bytes, int]  # (time in ns, captured bytes, length on the wire)


def frames_of(path: str | os.PathLike[str]) -> list[Frame]:
    out: list[Frame] = []
    for blk in record_blocks(path):
        for off, cap, wire, t in zip(blk.offset.tolist(), blk.caplen.tolist(), blk.wirelen.tolist(),
                                     blk.ts_ns.tolist(), strict=True):
            out.append((t, bytes(blk.buf[off:off + cap]), wire))
    return out


def write(path: str | os.PathLike[str], frames: Iterator[Frame] | list[Frame], snaplen: int = 65535) -> int:
    """Write frames as a nanosecond pcap (:class:`~rdmalab.capture.pcapwriter.CaptureWriter`); returns how many."""
    with CaptureWriter(path, snaplen=snaplen, nano=True) as w:
        for t, data, wire in frames:
            w.write(data, t, wire_len=wire)
        return w.count


def appended(src: str | os.PathLike[str], dst: str | os.PathLike[str], n: int) -> int:
    base = frames_of(src)
    return write(dst, (base[k % len(base)] for k in range(n)))


def duplicated(src: str | os.PathLike[str], dst: str | os.PathLike[str], n: int) -> int:
    base = frames_of(src)

    def gen() -> Iterator[Frame]:
        k = 0
        rep = 0
        span = base[-1][0] - base[0][0] + 1_000_000
        while k < n:
            for fr in base:
                t = fr[0] + rep * span  # repeated copies go on in time: only the duplicates are hostile here
                yield (t, fr[1], fr[2])
                yield (t, fr[1], fr[2])
                k += 2
                if k >= n:
                    return
            rep += 1
    return write(dst, gen())


def psn_wrap(dst: str | os.PathLike[str], n: int, start: int = (1 << 24) - 5000) -> int:
    """RC WRITE Only packets from PSN ``start`` on (wrapping at 2^24), an ACK every 16."""
    def gen() -> Iterator[Frame]:
        t = 1_700_000_000_000_000_000
        psn = start
        k = 0
        while k < n:
            fr = encode_rocev2(BTH(opcode=0x0A, destqp=0x12, psn=psn, ackreq=int(k % 16 == 15)),
                               [RETH(0x1000, 7, 64)], b"w" * 64)
            yield (t, fr, len(fr))
            k += 1
            t += 1000
            if k % 16 == 0:
                ack = encode_rocev2(BTH(opcode=0x11, destqp=0x13, psn=psn), [AETH.ack(psn & 0xFFFFFF)], b"",
                                    src_ip="10.0.0.2", dst_ip="10.0.0.1")
                yield (t, ack, len(ack))
                k += 1
                t += 1000
            psn = (psn + 1) & 0xFFFFFF
    return write(dst, gen())


def many_connections(dst: str | os.PathLike[str], n: int, conns: int = 10_000) -> int:
    """``conns`` RC connections (QPNs 0x100..), each WRITE Only + ACK, round robin."""
    def gen() -> Iterator[Frame]:
        t = 1_700_000_000_000_000_000
        rnd = random.Random(7)
        # distinct starting PSNs: with a packet or two per connection, connections whose PSNs collide
        # between the same two hosts cannot be told apart by their ACKs (which name only a PSN)
        start = rnd.sample(range(0, 1 << 24, 1 << 10), conns)
        k = 0
        rnd_i = 0
        while k < n:
            c = rnd_i % conns
            psn = (start[c] + rnd_i // conns) & 0xFFFFFF
            fr = encode_rocev2(BTH(opcode=0x0A, destqp=0x100 + c, psn=psn, ackreq=1), [RETH(0x1000, 7, 32)], b"m" * 32)
            ack = encode_rocev2(BTH(opcode=0x11, destqp=0x100 + conns + c, psn=psn), [AETH.ack(0)], b"",
                                src_ip="10.0.0.2", dst_ip="10.0.0.1")
            yield (t, fr, len(fr))
            yield (t + 500, ack, len(ack))
            t += 1000
            k += 2
            rnd_i += 1
    return write(dst, gen())


def reordered(src: str | os.PathLike[str], dst: str | os.PathLike[str], n: int, window: int = 8) -> int:
    base = frames_of(src)
    rnd = random.Random(3)

    def gen() -> Iterator[Frame]:
        k = 0
        rep = 0
        span = base[-1][0] - base[0][0] + 1_000_000
        while k < n:
            for i in range(0, len(base), window):
                chunk = [(t + rep * span, d, w) for t, d, w in base[i:i + window]]
                rnd.shuffle(chunk)
                for fr in chunk:
                    yield fr
                    k += 1
                    if k >= n:
                        return
            rep += 1
    return write(dst, gen())


def snaplen_cut(src: str | os.PathLike[str], dst: str | os.PathLike[str], n: int, snaplen: int = 60) -> int:
    base = frames_of(src)
    return write(dst, ((base[k % len(base)][0] + (k // len(base)) * 10**9, base[k % len(base)][1][:snaplen],
                        base[k % len(base)][2]) for k in range(n)), snaplen=snaplen)


def truncated_tail(src: str | os.PathLike[str], dst: str | os.PathLike[str], n: int) -> int:
    """:func:`appended`, then the file cut in the middle of its last record."""
    got = appended(src, dst, n)
    size = os.path.getsize(dst)
    with open(dst, "r+b") as f:
        f.truncate(size - 30)
    return got


__all__ = ["appended", "duplicated", "frames_of", "many_connections", "over_ipv6", "psn_wrap", "reordered",
           "snaplen_cut", "tagged", "tcp_over_ipv6", "truncated_tail", "write"]


def over_ipv6(data: bytes, *, trailer: bool = False) -> bytes:
    """A RoCEv2-over-IPv4 frame sent to IPv6 GIDs instead (2001:db8::A.B.C.D, traffic class 0x20, flow label
    0x12345, hop limit 64: no IP identification then), its ICRC that of the new datagram (IBA Annex A17.3.3:
    over IPv6 the traffic class, flow label and hop limit are masked); ``trailer``: the octets after the IPv4
    datagram (padding) kept after the new one.  Any other frame as it is."""
    import struct

    from rdmalab.wire.crc import icrc_rocev2

    if data[12:14] != b"\x08\x00" or data[23] != 17 or data[36:38] != b"\x12\xb7":
        return data
    ihl = (data[14] & 15) * 4
    total = int.from_bytes(data[16:18], "big")
    hdr = (struct.pack(">IHBB", 6 << 28 | 0x20 << 20 | 0x12345, total - ihl, 17, 64) + b"\x20\x01\x0d\xb8"
           + bytes(8) + data[26:30] + b"\x20\x01\x0d\xb8" + bytes(8) + data[30:34])
    out = bytearray(data[:12] + b"\x86\xdd" + hdr + data[14 + ihl:14 + total] + (data[14 + total:] if trailer else b""))
    end = 54 + total - ihl
    out[end - 4:end] = icrc_rocev2(bytes(out[14:end - 4])).to_bytes(4, "little")
    return bytes(out)


def tcp_over_ipv6(data: bytes, *, trailer: bool = False) -> bytes:
    """A TCP segment over IPv4 (without options) sent between IPv6 addresses instead (2001:db8::A.B.C.D, flow
    label 0xabcde, hop limit 64), its payload, TCP header and all else as they were; ``trailer``: the octets
    after the IPv4 datagram kept after the new one.  Any other frame as it is."""
    import struct

    if len(data) < 34 or data[12:14] != b"\x08\x00" or data[14] != 0x45 or data[23] != 6:
        return data
    total = int.from_bytes(data[16:18], "big")
    hdr = (struct.pack(">IHBB", 6 << 28 | 0xABCDE, total - 20, 6, 64) + b"\x20\x01\x0d\xb8" + bytes(8)
           + data[26:30] + b"\x20\x01\x0d\xb8" + bytes(8) + data[30:34])
    return data[:12] + b"\x86\xdd" + hdr + data[34:14 + total] + (data[14 + total:] if trailer else b"")


def tagged(data: bytes, pcp: int = 3, vid: int = 100) -> bytes:
    """An Ethernet frame with an 802.1Q tag put after its addresses (priority ``pcp``, VLAN ``vid``: how a RoCE
    NIC sends on a lossless class, PFC reading the priority), the rest as it was."""
    return data[:12] + b"\x81\x00" + (pcp << 13 | vid).to_bytes(2, "big") + data[12:]
