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

And :func:`background_frames`: the traffic a host's capture holds beside its RDMA (name resolution,
discovery, neighbours: each frame different), for the decoder's tests and ``benchmarks/bench_decode.py``.
"""

from __future__ import annotations

import os
import random
import struct
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


# ---------------------------------------------------------------------------- traffic beside RDMA


def _ipv4(proto: int, payload: bytes, rng: random.Random, options: bytes = b"") -> bytes:
    ihl = 5 + len(options) // 4
    head = struct.pack("!BBHHHBBH4s4s", 0x40 | ihl, rng.randrange(256), 20 + len(options) + len(payload),
                       rng.randrange(65536), rng.choice([0, 0x4000]), rng.randrange(1, 256), proto, 0,
                       rng.randbytes(4), rng.randbytes(4))
    return head + options + payload


def _ipv6(nxt: int, payload: bytes, rng: random.Random) -> bytes:
    src = bytes.fromhex("fe80000000000000") + rng.randbytes(8)
    dst = rng.choice([bytes.fromhex("ff0200000000000000000001ff") + rng.randbytes(3), rng.randbytes(16)])
    return struct.pack("!IHBB", 0x60000000 | rng.randrange(1 << 20), len(payload), nxt, rng.randrange(256)) \
        + src + dst + payload


def _udp(rng: random.Random) -> bytes:
    body = rng.randbytes(rng.choice([0, 1, 7, 30, 200]))
    dport = rng.choice([53, 5353, 4790, 4792, 123, rng.randrange(65536)])
    return struct.pack("!HHHH", rng.randrange(65536), dport, 8 + len(body), rng.randrange(65536)) + body


def _icmp(rng: random.Random, six: bool) -> bytes:
    if six:  # RS, RA, NS (with a source link-layer option or not), NA, MLD, redirect, unknown
        kind = rng.choice([133, 134, 135, 136, 130, 131, 132, 137, 143, 200])
        body = rng.randbytes(4) + rng.randbytes(16)
        if kind in (135, 136, 133) and rng.random() < 0.5:
            body += bytes([1 if kind != 136 else 2, 1]) + rng.randbytes(6)
    else:  # router advertisement and solicitation, timestamp, information, address mask, unknown
        kind = rng.choice([9, 10, 13, 14, 15, 16, 17, 18, 42, 200])
        body = rng.randbytes(rng.choice([4, 8, 16]))
    return bytes([kind, rng.choice([0, 0, 1, 16])]) + rng.randbytes(2) + body


def _arp(rng: random.Random) -> bytes:
    me = rng.randbytes(4)
    other = rng.choice([me, rng.randbytes(4), bytes(4)])
    op = rng.choice([1, 1, 2, 2, 3, 8])
    sha, tha = rng.randbytes(6), rng.choice([bytes(6), b"\xff" * 6, rng.randbytes(6)])
    spa, tpa = (bytes(4), other) if rng.random() < 0.2 else (me, other)
    return bytes.fromhex("000108000604") + struct.pack("!H", op) + sha + spa + tha + tpa


def background_frame(rng: random.Random) -> bytes:
    """An Ethernet frame of what a host sends beside RDMA, random fields: UDP (DNS, mDNS, NTP, any port;
    near RoCEv2's but not it), IP datagrams of other protocols (IGMP, GRE, ESP, OSPF, SCTP ...), ICMP and
    ICMPv6 messages that are neither errors nor echoes (router and neighbour discovery, MLD, timestamps),
    ARP (requests, replies, probes, announcements), other EtherTypes (LLDP, IEEE 802.3 lengths, MAC
    Control, IPX); a fifth behind an 802.1Q tag or an 802.1ad S-TAG and a tag; most padded to 60 octets."""
    kind = rng.choice(["udp4", "udp6", "ip4", "ip6", "icmp", "icmp6", "arp", "eth", "eth"] * 10
                      + ["icmp6_in_4", "icmp_in_6"])  # (now and then a message of the other IP version's ICMP)
    if kind == "udp4":
        ethertype, body = 0x0800, _ipv4(17, _udp(rng), rng, rng.choice([b"", b"", b"\x01\x01\x01\x00"]))
    elif kind == "udp6":
        ethertype, body = 0x86DD, _ipv6(17, _udp(rng), rng)
    elif kind == "ip4":
        ethertype, body = 0x0800, _ipv4(rng.choice([2, 47, 50, 89, 132, 253]), rng.randbytes(rng.randrange(0, 60)), rng)
    elif kind == "ip6":
        ethertype, body = 0x86DD, _ipv6(rng.choice([59, 47, 132, 89]), rng.randbytes(rng.randrange(0, 60)), rng)
    elif kind == "icmp":
        ethertype, body = 0x0800, _ipv4(1, _icmp(rng, False), rng)
    elif kind == "icmp6":
        ethertype, body = 0x86DD, _ipv6(58, _icmp(rng, True), rng)
    elif kind == "icmp6_in_4":
        ethertype, body = 0x0800, _ipv4(58, _icmp(rng, True), rng)
    elif kind == "icmp_in_6":
        ethertype, body = 0x86DD, _ipv6(1, _icmp(rng, False), rng)
    elif kind == "arp":
        ethertype, body = 0x0806, _arp(rng)
    else:  # LLDP, an IEEE 802.3 length, MAC Control (a PAUSE; a PFC frame is read), IPX, a made-up one
        ethertype = rng.choice([0x88CC, 0x0026, 0x8808, 0x8137, 0x1234])
        body = rng.choice([b"\x00\x01\xff\xff", b"\x01\x01\x00\xff"]) if ethertype == 0x8808 else b""
        body += rng.randbytes(rng.randrange(0, 80))
    tags = b""
    shape = rng.random()
    if shape < 0.2:
        tags = struct.pack("!HH", 0x8100, rng.randrange(65536))
    elif shape < 0.3:
        tags = struct.pack("!HHHH", 0x88A8, rng.randrange(65536), 0x8100, rng.randrange(65536))
    frame = rng.randbytes(6) + rng.randbytes(6) + tags + struct.pack("!H", ethertype) + body
    return frame.ljust(60, b"\0") if rng.random() < 0.7 else frame  # (padded as a NIC sends it, or not)


def _ones(a: int, b: int) -> int:
    s = a + b  # 16-bit one's complement addition (RFC 1071)
    return (s & 0xFFFF) + (s >> 16)


def echo_frame(rng: random.Random, six: bool, request: tuple[bytes, bytes, bytes, int] | None = None,
               ends: tuple[bytes, bytes] | None = None) -> tuple[bytes, tuple[bytes, bytes, bytes, int]]:
    """An echo request (``request`` None) between ``ends`` (source, destination; None: random addresses),
    or the reply to ``request`` (its addresses swapped, its identifier, sequence number and data, its
    checksum the request's with the type changed: RFC 1624 3); the frame and what a reply to it needs."""
    req_type, rep_type = (128, 129) if six else (8, 0)
    if request is None:
        src, dst = ends or (rng.randbytes(16 if six else 4), rng.randbytes(16 if six else 4))
        body, checksum, kind = rng.randbytes(4) + rng.randbytes(rng.choice([0, 8, 56])), rng.randrange(65536), req_type
    else:
        dst, src, body, req_checksum = request
        checksum, kind = _ones(req_checksum, _ones(req_type << 8, 0xFFFF ^ (rep_type << 8))), rep_type
    msg = bytes([kind, 0]) + struct.pack("!H", checksum) + body
    if six:
        ip = struct.pack("!IHBB", 0x60000000, len(msg), 58, 64) + src + dst
        ethertype = 0x86DD
    else:
        ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(msg), 0, 0x4000, 64, 1, 0, src, dst)
        ethertype = 0x0800
    frame = rng.randbytes(12) + struct.pack("!H", ethertype) + ip + msg
    return frame.ljust(60, b"\0"), (src, dst, body, checksum)


def background_frames(seed: int, n: int, damaged: bool = True) -> list[Frame]:
    """``n`` frames of the traffic a host's capture holds beside its RDMA (:func:`background_frame`), and
    pings (ICMP and ICMPv6 echo requests, most answered a few frames later, some twice, some replies to
    nothing), as (time, captured bytes, length on the wire); ``damaged``: some cut by a snap length, some
    with octets changed (lengths past the frame, versions, types, ports ...)."""
    rng = random.Random(seed)
    out = []
    waiting: list[tuple[bool, tuple[bytes, bytes, bytes, int]]] = []
    for i in range(n):
        roll = rng.random()
        if roll < 0.06:
            six = rng.random() < 0.4
            frame, request = echo_frame(rng, six)
            waiting.append((six, request))
        elif roll < 0.11 and waiting:
            six, request = waiting.pop(rng.randrange(len(waiting))) if rng.random() < 0.9 else rng.choice(waiting)
            frame, _r = echo_frame(rng, six, request)
        elif roll < 0.115:
            six = rng.random() < 0.5
            frame, _r = echo_frame(rng, six, echo_frame(rng, six)[1])  # (a reply whose request was not captured)
        else:
            frame = background_frame(rng)
        data = bytearray(frame)
        wire = len(data)
        roll = rng.random() if damaged else 1.0
        if roll < 0.1:
            data = data[:rng.randrange(14, max(15, len(data)))]
        elif roll < 0.25:
            for _ in range(rng.randrange(1, 3)):
                data[rng.randrange(12, len(data))] = rng.randrange(256)
        out.append((1_700_000_000_000_000_000 + i * 1_000_003, bytes(data), wire))
    return out
