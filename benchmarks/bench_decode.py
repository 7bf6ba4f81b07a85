"""Decode speed: ``rdmalab decode`` against ``tshark`` on the same real capture, in the same run.

Builds a capture of real rxe RoCEv2 packets (the packets of ``captures/rxe_*.pcap`` repeated, each
repetition shifted in time: :func:`bench_columnar.build`), then runs each pair of commands as whole
processes, output discarded, and prints wall time, CPU time and peak RSS side by side:

* one-line summaries, ``decode -r FILE`` against ``tshark -r FILE`` (``--packets``, default
  1,000,000), with rdmalab's default workers (one a core not fully busy: it depends on the load when the
  command starts; the bench prints what it would be), with ``-j 1`` and with ``-j 2``;
* ``-T json`` (default workers, ``-j 1``, ``-j 2``) against ``tshark -T json`` and ``-V`` against
  ``tshark -V`` on the first ``--json-packets`` (default 50,000) of the same packets (tshark's
  JSON and trees are slow).

The output of both rdmalab paths for summaries (columnar and ``--no-columnar``), and JSON from one
process and from two workers, are compared on the small file, so a speed-up that changed the text
would show.

``--mixed`` measures a capture as real ones come instead: the real rxe and siw captures
(``captures/rxe_*.pcap``, ``captures/siw*.pcap``: RoCEv2, iWARP and plain TCP, ICMPv6, ARP) appended
one after the other (``mergecap -a``, pcapng, as Wireshark writes; without mergecap, the project's
:class:`~rdmalab.capture.pcapwriter.CaptureWriter`, pcap) and repeated until ``--packets`` (default
200,000 there).  Rows, each with default options against tshark in the same run: the start-up (the
first 10 packets: what each takes before its first line, a part of every other row), summaries,
``-T fields`` (:data:`bench_columnar.FIELDS`) on all the packets, ``-T fields`` of the conversations'
fields (``tcp.stream``, ``udp.stream``, relative ``tcp.seq``, ``tcp.ack``, ``tcp.nxtseq``: followed in
order in one process, the blocks decoded in workers) on all the packets, ``-T fields`` of the pcapng blocks' fields (``frame.interface_id``,
``frame.interface_name``, ``frame.comment`` ...: the file's blocks read beside the columns) on all the
packets, ``-T fields`` of tshark's TCP sequence analysis (``tcp.analysis.flags`` and the rest: each TCP
segment weighed in order in one process) and summaries filtered on it (``-Y tcp.analysis.retransmission``)
on all the packets, summaries filtered on a protocol's name (``udp``, ``arp``), on iWARP's fields and on the
scaled window, ``-T json`` and ``-V`` on the first ``--json-packets``, and both filtered on the RoCE ACKs
(``-Y 'infiniband.bth.opcode == 17'``: the frames a filter shows, decoded whole).

``--icmp`` measures what a host where nothing takes RoCEv2 answers: each RoCEv2 packet of the real rxe
captures followed by the ICMP port unreachable that quotes it, as Linux writes one (IPv4: at most 576
octets in all, RFC 1812 4.3.2.3; IPv6: up to 1280), repeated until ``--packets`` (default 100,000:
half of them ICMP errors, each quoting another packet).  Rows: summaries, ``-T fields`` (the
conversations' ``udp.stream`` among them) and a filter on a quoted field, against tshark.

``--links`` measures the ``--mixed`` capture (``--packets``, default 200,000) written again as two other
link types write it: behind Linux cooked capture v2 headers (``tcpdump -i any``) and as ERF Ethernet
records (a DAG card's); and with an 802.1Q tag in every frame (priority 3: a RoCE NIC's lossless class).
Rows: summaries and ``-T fields`` of each, against tshark; and ``-V`` of the ERF records and of the tagged
frames on the first ``--json-packets`` (its text compared with the per-packet path's first).

``--background`` measures the ``--mixed`` capture (``--packets``, default 200,000) with the traffic a host's
capture holds beside its RDMA put between its frames, one frame in four (``tests/hostile.background_frames``:
DNS, mDNS, NTP and other UDP, ARP, router and neighbour discovery, MLD, LLDP, other IP protocols and
EtherTypes, a fifth of them tagged; every frame different, so that no memo of frames seen helps).  Rows:
summaries, ``-T fields``, ``-T json`` and ``-V`` against tshark; the fast paths' text compared with the
per-packet path's first.

``--ipv6`` measures the ``--mixed`` capture with its RoCEv2 sent to IPv6 GIDs instead (what perftest and
rdma_cm send on a RoCE port's default GID, its IPv6 link-local one; the ICRCs recomputed), and its TCP
(iWARP, perftest's exchange) between the same IPv6 addresses. Rows:
summaries, ``-T fields`` (``ipv6.src``/``ipv6.dst`` for the IPv4 addresses), ``-T json`` and ``-V`` against
tshark; the fast paths' text compared with the per-packet path's first.

With ``--repeat N`` each command runs N times (rdmalab's and tshark's in turn) and the best wall and
CPU times count: on a loaded machine the ratio of CPU times (the table's last column) is the steadier.

    python benchmarks/bench_decode.py [--packets N] [--json-packets N] [--keep DIR] [--no-tshark] [--mixed]
                                      [--icmp] [--links] [--ipv6] [--background] [--repeat N]
"""

from __future__ import annotations

import argparse
import compileall
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [p for p in (_ROOT, os.path.dirname(os.path.abspath(__file__)), os.path.join(_ROOT, "tests"))
                if p not in sys.path]

from bench_columnar import FIELDS, build, run  # noqa: E402

import rdmalab  # noqa: E402
from rdmalab.capture.columnar_schema import CONVERSATION_FIELDS  # noqa: E402
from rdmalab.capture.pcapio import FRAME_META_FIELDS  # noqa: E402
from rdmalab.capture.tcp_analysis import ANALYSIS_FIELDS  # noqa: E402


def mixed_sources() -> list[str]:
    """The real rxe and siw captures, in name order (the rxe ones first)."""
    return sorted(glob.glob(os.path.join(_ROOT, "captures", "rxe_*.pcap"))) + \
        sorted(glob.glob(os.path.join(_ROOT, "captures", "siw*.pcap")))


def build_mixed(path: str, n: int) -> int:
    """The real rxe and siw captures appended, repeated until ``n`` packets (cut there): with
    ``mergecap -a`` (pcapng) when installed, else with CaptureWriter (pcap, timestamps as read)."""
    from rdmalab.capture import records
    from rdmalab.capture.pcapwriter import CaptureWriter

    srcs = mixed_sources()
    per_round = sum(1 for s in srcs for _ in records(s))
    rounds = -(-n // per_round)
    if shutil.which("mergecap") and shutil.which("editcap"):
        one = path + ".round"
        subprocess.run(["mergecap", "-a", "-F", "pcapng", "-w", one, *srcs], check=True)
        many = path + ".many"
        subprocess.run(["mergecap", "-a", "-F", "pcapng", "-w", many, *([one] * rounds)], check=True)
        subprocess.run(["editcap", "-F", "pcapng", "-r", many, path, f"1-{n}"], check=True)
        os.remove(one)
        os.remove(many)
        return n
    written = 0
    with CaptureWriter(path, nano=True) as w:
        for _ in range(rounds):
            for s in srcs:
                for rec in records(s):
                    if written >= n:
                        return written
                    w.write(rec.data, round(rec.timestamp * 1e9), wire_len=rec.wire_length or None)
                    written += 1
    return written


def build_icmp(path: str, n: int) -> int:
    """Each RoCEv2 packet of the real rxe captures (shifted in time by each round) and, 10 us after it, the
    ICMP (ICMPv6) port unreachable that quotes it from the destination, until ``n`` frames."""
    import struct

    from rdmalab.capture import records
    from rdmalab.capture.pcapwriter import CaptureWriter
    from rdmalab.wire.net import internet_checksum

    packets = [(round(r.timestamp * 1e9), r.data) for s in sorted(glob.glob(os.path.join(_ROOT, "captures", "rxe_*.pcap")))
               for r in records(s) if len(r.data) > 42 and r.data[12:14] in (b"\x08\x00", b"\x86\xdd")
               and r.data[23 if r.data[12:14] == b"\x08\x00" else 20] == 17]
    span = max(t for t, _ in packets) - min(t for t, _ in packets) + 1_000_000
    written = 0
    with CaptureWriter(path, nano=True) as w:
        for k in range(-(-n // (2 * len(packets)))):
            for t, frame in packets:
                if written >= n:
                    return written
                w.write(frame, t + k * span)
                written += 1
                if written >= n:
                    return written
                eth = frame[6:12] + frame[0:6] + frame[12:14]
                if frame[12:14] == b"\x08\x00":
                    ip = frame[14:]
                    quote = ip[:576 - 28]
                    body = struct.pack(">BBHI", 3, 3, 0, 0) + quote
                    body = body[:2] + internet_checksum(body).to_bytes(2, "big") + body[4:]
                    hdr = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + len(body), 0, 0, 64, 1, 0, ip[16:20], ip[12:16])
                    hdr = hdr[:10] + internet_checksum(hdr).to_bytes(2, "big") + hdr[12:]
                    err = eth + hdr + body
                else:
                    ip = frame[14:]
                    body = struct.pack(">BBHI", 1, 4, 0, 0) + ip[:1280 - 48]
                    err = eth + struct.pack(">IHBB16s16s", 6 << 28, len(body), 58, 64, ip[24:40], ip[8:24]) + body
                w.write(err, t + k * span + 10_000)
                written += 1
    return written


def main_icmp(args: argparse.Namespace, tmp: str) -> None:
    n_all = args.packets if args.packets_given else 100_000
    big = os.path.join(tmp, "icmp_big.pcap")
    n = build_icmp(big, n_all)
    print(f"{big}: {n:,} frames, real rxe RoCEv2 packets each followed by the ICMP port unreachable that quotes it, "
          f"{os.path.getsize(big) / 2**20:.0f} MiB")
    py = [sys.executable, "-m", "rdmalab", "decode"]
    tshark = None if args.no_tshark or not shutil.which("tshark") else "tshark"
    # (columns all: icmp.type is none, and would take the per-packet decoder for every frame)
    ef = [a for f in ("frame.number", "ip.src", "udp.stream", "infiniband.bth.destqp", "infiniband.bth.psn")
          for a in ("-e", f)]
    flt = ["-Y", "infiniband.bth.opcode == 6"]  # (RDMA WRITE First, and the errors that quote one)
    rows: list[str] = []
    # what each takes before the first line (start-up: imports, tshark's dissector tables): a part of every
    # row below that no packet changes
    rows += compare("start-up (the first 10 packets)", 10, [("rdmalab decode -c 10", [*py, "-r", big, "-c", "10"])],
                    [tshark, "-n", "-r", big, "-c", "10"] if tshark else None)
    rows += compare("summary lines", n, [("rdmalab decode -r FILE", [*py, "-r", big])],
                    [tshark, "-n", "-r", big] if tshark else None)
    rows += compare("-T fields", n, [("rdmalab decode -T fields", [*py, "-r", big, "-T", "fields", *ef])],
                    [tshark, "-n", "-r", big, "-T", "fields", *ef] if tshark else None)
    rows += compare("-Y on a quoted field", n, [("rdmalab decode -Y ...", [*py, "-r", big, *flt])],
                    [tshark, "-n", "-r", big, *flt] if tshark else None)
    if rows:
        print("\n| command (RoCEv2 and the ICMP errors quoting it) | rdmalab (peak RSS) | tshark (peak RSS) | "
              "rdmalab packets/s over tshark's | over tshark's CPU time |")
        print("|---|---|---|---|---|")
        print("\n".join(rows))


def build_links(src: str, n: int, sll: str, erf: str, tagged: str) -> int:
    """The first ``n`` frames of ``src`` written again as two other link types' captures (pcap): behind
    a Linux cooked capture v2 header (``tcpdump -i any``: link type 276, the EtherType, interface 3,
    ARPHRD_ETHER, the sender's address) and as ERF Ethernet records (a DAG card's: link type 197, record
    type 2, the offset and pad octets, 32.32 fixed-point times); and as Ethernet frames with an 802.1Q tag
    (priority 3, VLAN 100: what a RoCE NIC sends on a lossless class, the priority PFC pauses)."""
    import struct

    from rdmalab.capture import records

    written = 0
    with open(sll, "wb") as fs, open(erf, "wb") as fe, open(tagged, "wb") as ft:
        fs.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, 276))
        fe.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, 197))
        ft.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, 1))
        for r in records(src):
            if written >= n:
                break
            d = bytes(r.data)
            if len(d) < 14:
                continue
            s, us = r.ns // 10**9, r.ns % 10**9 // 1000
            cooked = d[12:14] + b"\0\0" + struct.pack(">IHBB", 3, 1, 0, 6) + d[6:12] + b"\0\0" + d[14:]
            fs.write(struct.pack("<IIII", s, us, len(cooked), len(cooked)) + cooked)
            body = b"\0\0" + d + bytes(-(18 + len(d)) % 8)
            ts = s << 32 | (r.ns % 10**9 << 32) // 10**9
            rec = struct.pack("<Q", ts) + struct.pack(">BBHHH", 2, 4, 16 + len(body), 0, len(d)) + body
            fe.write(struct.pack("<IIII", s, us, len(rec), len(rec)) + rec)
            tag = d[:12] + b"\x81\x00" + (3 << 13 | 100).to_bytes(2, "big") + d[12:]
            ft.write(struct.pack("<IIII", s, us, len(tag), r.wire_length + 4) + tag)
            written += 1
    return written


def main_links(args: argparse.Namespace, tmp: str) -> None:
    """The mixed capture as other link types write it: Linux cooked v2 and ERF Ethernet; and 802.1Q-tagged."""
    n_all = args.packets if args.packets_given else 200_000
    mixed = os.path.join(tmp, "mixed_big.pcapng")
    build_mixed(mixed, n_all)
    sll, erf, tagged = (os.path.join(tmp, f"mixed_{k}.pcap") for k in ("sll2", "erf", "8021q"))
    n = build_links(mixed, n_all, sll, erf, tagged)
    small_sll, small_erf, small_tagged = (os.path.join(tmp, f"mixed_small_{k}.pcap") for k in ("sll2", "erf", "8021q"))
    m = build_links(mixed, args.json_packets, small_sll, small_erf, small_tagged)
    os.remove(small_sll)
    py = [sys.executable, "-m", "rdmalab", "decode"]
    tshark = None if args.no_tshark or not shutil.which("tshark") else "tshark"
    ef = [a for f in FIELDS for a in ("-e", f)]
    rows: list[str] = []
    for label, path in (("Linux cooked v2", sll), ("ERF Ethernet", erf), ("802.1Q-tagged", tagged)):
        print(f"{path}: {n:,} packets of the mixed capture as {label}, {os.path.getsize(path) / 2**20:.0f} MiB")
        head = [[*py, *extra, "-r", path, "-c", "20000"] for extra in ([], ["--no-columnar"])]
        same = [subprocess.run(cmd, capture_output=True, check=True).stdout for cmd in head]
        print(f"  summary lines of the first 20,000, columnar vs per-packet path: "
              f"{'identical' if same[0] == same[1] else 'DIFFERENT'}")
        rows += compare(f"{label}: summary lines", n, [("rdmalab decode -r FILE", [*py, "-r", path])],
                        [tshark, "-n", "-r", path] if tshark else None)
        rows += compare(f"{label}: -T fields", n, [("rdmalab decode -T fields", [*py, "-r", path, "-T", "fields", *ef])],
                        [tshark, "-n", "-r", path, "-T", "fields", *ef] if tshark else None)
    # -V of the ERF records (the frames' trees from the templates, the ERF header's lines first) and of the
    # tagged frames (the tag's lines after the Ethernet header's)
    for label, path in (("ERF Ethernet", small_erf), ("802.1Q-tagged", small_tagged)):
        same = [subprocess.run([*py, "-V", *extra, "-r", path], capture_output=True, check=True).stdout
                for extra in ([], ["--no-columnar"])]
        print(f"{path}: -V of the first {m:,} as {label}, templates vs per-packet path: "
              f"{'identical' if same[0] == same[1] else 'DIFFERENT'} ({len(same[0]):,} bytes)")
        del same
        rows += compare(f"{label}: -V", m, [("rdmalab decode -V", [*py, "-V", "-r", path])],
                        [tshark, "-n", "-r", path, "-V"] if tshark else None)
    if rows:
        print("\n| command (mixed capture, other link types) | rdmalab (peak RSS) | tshark (peak RSS) | "
              "rdmalab packets/s over tshark's | over tshark's CPU time |")
        print("|---|---|---|---|---|")
        print("\n".join(rows))


def over_ipv6(data: bytes) -> bytes:
    """A RoCEv2-over-IPv4 frame sent to IPv6 GIDs instead (2001:db8::A.B.C.D, as rdma_cm maps an IPv4
    address into a GID's low bits; a flow label; hop limit 64), its ICRC that of the new datagram (IBA
    Annex A17.3.3: over IPv6 the traffic class, flow label and hop limit are masked); a TCP segment over IPv4
    without options (iWARP, perftest's own exchange) sent between the same IPv6 addresses; any other frame as
    it is."""
    import struct

    from rdmalab.wire.crc import icrc_rocev2

    if len(data) < 54 or data[12:14] != b"\x08\x00":
        return data
    ihl = (data[14] & 15) * 4
    total = int.from_bytes(data[16:18], "big")
    if data[23] == 6 and ihl == 20:
        hdr = (struct.pack(">IHBB", 6 << 28 | 0x12345, total - ihl, 6, 64) + b"\x20\x01\x0d\xb8" + bytes(8)
               + data[26:30] + b"\x20\x01\x0d\xb8" + bytes(8) + data[30:34])
        return data[:12] + b"\x86\xdd" + hdr + data[14 + ihl:14 + total]
    if data[23] != 17 or data[36:38] != b"\x12\xb7":
        return data
    hdr = (struct.pack(">IHBB", 6 << 28 | 0x12345, total - ihl, 17, 64) + b"\x20\x01\x0d\xb8" + bytes(8)
           + data[26:30] + b"\x20\x01\x0d\xb8" + bytes(8) + data[30:34])
    out = bytearray(data[:12] + b"\x86\xdd" + hdr + data[14 + ihl:14 + total])
    out[-4:] = icrc_rocev2(bytes(out[14:-4])).to_bytes(4, "little")
    return bytes(out)


def build_ipv6(src: str, n: int, path: str) -> int:
    """The first ``n`` frames of ``src`` (pcapng) written again (pcap) with every RoCEv2 frame and TCP segment
    sent over IPv6 (:func:`over_ipv6`)."""
    from rdmalab.capture import records
    from rdmalab.capture.pcapwriter import CaptureWriter

    written = 0
    with CaptureWriter(path) as w:
        for r in records(src):
            if written >= n:
                break
            d = over_ipv6(bytes(r.data))
            w.write(d, r.ns, wire_len=r.wire_length + len(d) - len(r.data))
            written += 1
    return written


def main_ipv6(args: argparse.Namespace, tmp: str) -> None:
    """The mixed capture with its RoCEv2 sent to IPv6 GIDs (what perftest and rdma_cm send on GID index 0, a
    RoCE port's IPv6 link-local GID) and its TCP between the same addresses: summaries, -T fields, -T json and
    -V against tshark."""
    _derived(args, tmp, build_ipv6, "ipv6", "IPv6", "its RoCEv2 and TCP over IPv6",
             "mixed capture, RoCEv2 and TCP over IPv6", FIELDS_IPV6)


def _derived(args: argparse.Namespace, tmp: str, build: Any, name: str, label: str, what: str, title: str,
             fields: list[str]) -> None:
    """A capture ``build`` makes of the mixed one (``build(mixed, n, path)``): its protocols, the fast paths'
    text against the per-packet path's on its first 5,000 frames, then summaries and -T fields (``fields``) of
    all of it, -T json and -V of its first ``--json-packets``, against tshark."""
    n_all = args.packets if args.packets_given else 200_000
    mixed = os.path.join(tmp, "mixed_big.pcapng")
    build_mixed(mixed, n_all)
    big, small = os.path.join(tmp, f"mixed_{name}.pcap"), os.path.join(tmp, f"mixed_small_{name}.pcap")
    n = build(mixed, n_all, big)
    m = build(mixed, args.json_packets, small)
    print(f"{big}: {n:,} packets of the mixed capture, {what}, {os.path.getsize(big) / 2**20:.0f} MiB")
    print(f"  {protocols(big)}")
    py = [sys.executable, "-m", "rdmalab", "decode"]
    for opt in ([], ["-T", "json"], ["-V"]):
        same = [subprocess.run([*py, *opt, *extra, "-r", small, "-c", "5000"], capture_output=True, check=True).stdout
                for extra in ([], ["--no-columnar"])]
        print(f"  {' '.join(opt) or 'summary lines'} of the first 5,000, fast vs per-packet path: "
              f"{'identical' if same[0] == same[1] else 'DIFFERENT'}")
    tshark = None if args.no_tshark or not shutil.which("tshark") else "tshark"
    ef = [a for f in fields for a in ("-e", f)]
    rows: list[str] = []
    rows += compare(f"{label}: summary lines", n, [("rdmalab decode -r FILE", [*py, "-r", big])],
                    [tshark, "-n", "-r", big] if tshark else None)
    rows += compare(f"{label}: -T fields", n, [("rdmalab decode -T fields", [*py, "-r", big, "-T", "fields", *ef])],
                    [tshark, "-n", "-r", big, "-T", "fields", *ef] if tshark else None)
    rows += compare(f"{label}: -T json", m, [("rdmalab decode -T json", [*py, "-T", "json", "-r", small])],
                    [tshark, "-n", "-r", small, "-T", "json"] if tshark else None)
    rows += compare(f"{label}: -V", m, [("rdmalab decode -V", [*py, "-V", "-r", small])],
                    [tshark, "-n", "-r", small, "-V"] if tshark else None)
    if rows:
        print(f"\n| command ({title}) | rdmalab (peak RSS) | tshark (peak RSS) | "
              "rdmalab packets/s over tshark's | over tshark's CPU time |")
        print("|---|---|---|---|---|")
        print("\n".join(rows))


def build_background(src: str, n: int, path: str) -> int:
    """The first frames of ``src`` with a frame of background traffic (``tests/hostile.background_frames``,
    undamaged) after every three, ``n`` frames in all (pcap, nanoseconds), each background frame timed
    just after the frame before it."""
    import hostile

    from rdmalab.capture import records
    from rdmalab.capture.pcapwriter import CaptureWriter

    extra = iter(hostile.background_frames(1, n // 4 + 1, damaged=False))
    written = 0
    with CaptureWriter(path, nano=True) as w:
        for r in records(src):
            if written >= n:
                break
            ns = r.ns if r.ns is not None else round(r.timestamp * 1e9)
            w.write(r.data, ns, wire_len=r.wire_length or None)
            written += 1
            if written % 4 == 3 and written < n:
                _t, data, wire = next(extra)
                w.write(data, ns + 1, wire_len=wire)
                written += 1
    return written


def main_background(args: argparse.Namespace, tmp: str) -> None:
    """The mixed capture with background traffic between its frames: summaries, -T fields, -T json and -V
    against tshark."""
    _derived(args, tmp, build_background, "background", "background", "background traffic between its frames",
             "mixed capture, background traffic between", FIELDS)


#: bench_columnar.FIELDS with the IPv6 addresses instead of the IPv4 ones
FIELDS_IPV6 = ["ipv6.src" if f == "ip.src" else "ipv6.dst" if f == "ip.dst" else f for f in FIELDS]


def protocols(path: str) -> str:
    """How many frames of each kind the capture holds (as the columnar decoder sees them)."""
    from rdmalab.capture.columnar import iter_columns

    counts: dict[str, int] = {}
    for c in iter_columns(path, fields=("frame.number",)):
        L = c.layers
        ip = L["ip"] | L["ipv6"]
        kinds = {"RoCEv2": L["rocev2"], "TCP": L["tcp"], "UDP (not RoCE)": L["udp"] & ~L["rocev2"],
                 "ICMP": L["icmp"], "ICMPv6": L["icmpv6"], "ARP": L["arp"],
                 "other": ~(L["rocev2"] | L["tcp"] | L["udp"] | L["icmp"] | L["icmpv6"] | L["arp"]) & (ip | L["eth"])}
        for k, m in kinds.items():
            counts[k] = counts.get(k, 0) + int(m.sum())
    return ", ".join(f"{k} {v:,}" for k, v in counts.items())


def main_mixed(args: argparse.Namespace, tmp: str) -> None:
    n_all = args.packets if args.packets_given else 200_000
    big, small = os.path.join(tmp, "mixed_big.pcapng"), os.path.join(tmp, "mixed_small.pcapng")
    t = time.perf_counter()
    n = build_mixed(big, n_all)
    m = build_mixed(small, args.json_packets)
    print(f"{big}: {n:,} packets of the real rxe and siw captures appended ({len(mixed_sources())} files, "
          f"{'mergecap -a' if shutil.which('mergecap') else 'CaptureWriter'}), {os.path.getsize(big) / 2**20:.0f} MiB; "
          f"{small}: {m:,} (built in {time.perf_counter() - t:.1f} s)")
    print(f"  {protocols(big)}")
    py = [sys.executable, "-m", "rdmalab", "decode"]
    same = [subprocess.run([*py, *extra, "-r", small], capture_output=True, check=True).stdout
            for extra in ([], ["--no-columnar"])]
    print(f"summary lines, columnar vs per-packet path on {m:,} packets: "
          f"{'identical' if same[0] == same[1] else 'DIFFERENT'} ({len(same[0]):,} bytes)")
    tshark = None if args.no_tshark or not shutil.which("tshark") else "tshark"
    load0 = os.getloadavg()[0]
    ef = [a for f in FIELDS for a in ("-e", f)]
    rows: list[str] = []
    # what each takes before the first line (start-up: imports, tshark's dissector tables): a part of every
    # row below that no packet changes
    rows += compare("start-up (the first 10 packets)", 10, [("rdmalab decode -c 10", [*py, "-r", big, "-c", "10"])],
                    [tshark, "-n", "-r", big, "-c", "10"] if tshark else None)
    rows += compare("summary lines", n, [("rdmalab decode -r FILE", [*py, "-r", big])],
                    [tshark, "-n", "-r", big] if tshark else None)
    rows += compare("-T fields", n, [("rdmalab decode -T fields", [*py, "-r", big, "-T", "fields", *ef])],
                    [tshark, "-n", "-r", big, "-T", "fields", *ef] if tshark else None)
    # the fields that follow every conversation in order (tcp.stream, relative sequence numbers)
    cf = [a for f in CONVERSATION_FIELDS for a in ("-e", f)]
    rows += compare("-T fields (conversations)", n,
                    [("rdmalab decode -T fields -e tcp.stream ...", [*py, "-r", big, "-T", "fields", *cf])],
                    [tshark, "-n", "-r", big, "-T", "fields", *cf] if tshark else None)
    # iWARP's fields: every TCP stream followed in order (the FPDUs of segments in step read from their octets)
    wf = [a for f in ("frame.number", "iwarp_rdma.opcode", "iwarp_ddp.msn", "iwarp_ddp.tagged_offset", "iwarp_mpa.ulpdulength")
          for a in ("-e", f)]
    rows += compare("-T fields (iWARP)", n,
                    [("rdmalab decode -T fields -e iwarp_rdma.opcode ...", [*py, "-r", big, "-T", "fields", *wf])],
                    [tshark, "-n", "-r", big, "-T", "fields", *wf] if tshark else None)
    # tshark's TCP sequence analysis: every TCP segment weighed in order (retransmissions, duplicate ACKs ...),
    # as fields and as the filter engineers type first
    af = [a for f in ("frame.number", *ANALYSIS_FIELDS) for a in ("-e", f)]
    rows += compare("-T fields (TCP analysis)", n,
                    [("rdmalab decode -T fields -e tcp.analysis.flags ...", [*py, "-r", big, "-T", "fields", *af])],
                    [tshark, "-n", "-r", big, "-T", "fields", *af] if tshark else None)
    # the flags alone (which segments were retransmitted, duplicate ACKs ...): no value asked for, so the
    # analysis follows the flags alone
    ff = [a for f in ("frame.number", "tcp.analysis.flags", "tcp.analysis.retransmission",
                      "tcp.analysis.duplicate_ack_num", "tcp.analysis.window_full") for a in ("-e", f)]
    rows += compare("-T fields (TCP analysis flags)", n,
                    [("rdmalab decode -T fields -e tcp.analysis.retransmission ...", [*py, "-r", big, "-T", "fields", *ff])],
                    [tshark, "-n", "-r", big, "-T", "fields", *ff] if tshark else None)
    rows += compare("summary lines -Y tcp.analysis.retransmission", n,
                    [("rdmalab decode -Y tcp.analysis.retransmission",
                      [*py, "-r", big, "-Y", "tcp.analysis.retransmission"])],
                    [tshark, "-n", "-r", big, "-Y", "tcp.analysis.retransmission"] if tshark else None)
    # what engineers type to pick one kind of traffic out: a protocol's name (answered from the columns, an
    # ICMP error's quote included), iWARP's fields (the streams followed beside), the scaled window, the pauses
    # (the time since the frame before: counted over the blocks in order)
    for expr in ("udp", "arp", "iwarp_rdma.opcode == 1", "tcp.window_size > 1000", "frame.time_delta > 0.001"):
        rows += compare(f"summary lines -Y '{expr}'", n, [(f"rdmalab decode -Y '{expr}'", [*py, "-r", big, "-Y", expr])],
                        [tshark, "-n", "-r", big, "-Y", expr] if tshark else None)
    # the fields of the pcapng blocks around the packets (interfaces, sections, comments), read beside the columns
    mf = [a for f in ("frame.number", *FRAME_META_FIELDS) for a in ("-e", f)]
    rows += compare("-T fields (pcapng blocks)", n,
                    [("rdmalab decode -T fields -e frame.interface_id ...", [*py, "-r", big, "-T", "fields", *mf])],
                    [tshark, "-n", "-r", big, "-T", "fields", *mf] if tshark else None)
    rows += compare("-T json", m, [("rdmalab decode -T json", [*py, "-T", "json", "-r", small])],
                    [tshark, "-n", "-r", small, "-T", "json"] if tshark else None)
    rows += compare("-V", m, [("rdmalab decode -V", [*py, "-V", "-r", small])],
                    [tshark, "-n", "-r", small, "-V"] if tshark else None)
    # what engineers type to read one kind of packet whole: a filter the columns answer, the frames it shows
    # decoded one by one (the RoCE ACKs: about one frame in fourteen)
    ack = "infiniband.bth.opcode == 17"
    rows += compare(f"-T json -Y '{ack}'", m, [("rdmalab decode -T json -Y", [*py, "-T", "json", "-Y", ack, "-r", small])],
                    [tshark, "-n", "-r", small, "-T", "json", "-Y", ack] if tshark else None)
    rows += compare(f"-V -Y '{ack}'", m, [("rdmalab decode -V -Y", [*py, "-V", "-Y", ack, "-r", small])],
                    [tshark, "-n", "-r", small, "-V", "-Y", ack] if tshark else None)
    print(f"load average (1 min) before / after: {load0:.1f} / {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    if rows:
        print("\n| command (mixed capture) | rdmalab (peak RSS) | tshark (peak RSS) | rdmalab packets/s over tshark's | "
              "over tshark's CPU time |")
        print("|---|---|---|---|---|")
        print("\n".join(rows))


def line(label: str, n: int, r: tuple[float, int, float]) -> str:
    dt, rss, cpu = r
    return (f"  {label:<40}: {n / dt:10,.0f} packets/s wall ({dt:6.2f} s; CPU {cpu:6.2f} s), "
            f"peak RSS {rss / 1024:5.0f} MiB")


#: how many times each command runs (--repeat); the best wall time and CPU time of its runs count
REPEAT = 1


def best(runs: list[tuple[float, int, float]]) -> tuple[float, int, float]:
    """The fastest wall time, the largest peak RSS and the least CPU time of several runs of one command."""
    return min(r[0] for r in runs), max(r[1] for r in runs), min(r[2] for r in runs)


def compare(title: str, n: int, ours: list[tuple[str, list[str]]], theirs: list[str] | None) -> list[str]:
    """Run rdmalab's commands and tshark's (each ``REPEAT`` times, in turn), print them and the ratio;
    return table rows."""
    print(f"{title} ({n:,} packets)")
    runs: dict[int, list[tuple[float, int, float]]] = {i: [] for i in range(len(ours) + 1)}
    for _ in range(REPEAT):
        for i, (_label, cmd) in enumerate(ours):
            runs[i].append(run(cmd))
        if theirs is not None:
            runs[len(ours)].append(run(theirs))
    got = []
    for i, (label, _cmd) in enumerate(ours):
        r = best(runs[i])
        print(line(label, n, r))
        got.append((label, r))
    rows: list[str] = []
    if theirs is None:
        print("  tshark: not run")
        return rows
    ts = best(runs[len(ours)])
    opts = [a for i, a in enumerate(theirs[1:], 1) if a not in ("-n", "-r") and theirs[i - 1] != "-r"]
    print(line(" ".join(["tshark", *opts]), n, ts))
    for label, r in got:
        ratio = ts[0] / r[0]
        print(f"  -> {label}: {ratio:.2f}x tshark's packets/s (CPU time {ts[2] / r[2]:.2f}x)")
        rows.append(f"| {title}: {label} | {r[0]:.2f} s ({r[1] / 1024:.0f} MiB) | {ts[0]:.2f} s ({ts[1] / 1024:.0f} MiB)"
                    f" | {ratio:.2f}x | {ts[2] / r[2]:.2f}x |")
    return rows


def compiled() -> None:
    """rdmalab's modules byte-compiled before anything is timed, as ``pip install`` leaves them: run from a
    source tree with ``PYTHONDONTWRITEBYTECODE`` set (or a read-only tree), every command would compile
    every module it imports again (about 0.2 s a command), which no installed copy does."""
    compileall.compile_dir(os.path.dirname(rdmalab.__file__), quiet=1)
    print(f"rdmalab {os.path.dirname(rdmalab.__file__)}: byte-compiled (as installed); "
          f"PYTHONDONTWRITEBYTECODE={os.environ.get('PYTHONDONTWRITEBYTECODE', '(unset)')}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--packets", type=int, default=None,
                    help="packets in the large file (default 1,000,000; 200,000 with --mixed)")
    ap.add_argument("--json-packets", type=int, default=50_000)
    ap.add_argument("--keep", metavar="DIR", help="write the captures here and keep them")
    ap.add_argument("--no-tshark", action="store_true")
    ap.add_argument("--repeat", type=int, default=1, metavar="N",
                    help="run each command N times, rdmalab's and tshark's in turn, and keep the best wall and CPU "
                         "times of each (a loaded machine's noise)")
    ap.add_argument("--icmp", action="store_true",
                    help="RoCEv2 packets each followed by the ICMP port unreachable that quotes it")
    ap.add_argument("--mixed", action="store_true",
                    help="the real rxe and siw captures appended (RoCEv2, iWARP, TCP, ICMPv6, ARP) instead of rxe alone")
    ap.add_argument("--links", action="store_true",
                    help="the --mixed capture as a Linux cooked v2 capture, as ERF Ethernet records and 802.1Q-tagged")
    ap.add_argument("--ipv6", action="store_true",
                    help="the --mixed capture with its RoCEv2 (ICRCs recomputed) and TCP sent over IPv6")
    ap.add_argument("--background", action="store_true",
                    help="the --mixed capture with background traffic (UDP, ARP, ICMP, ICMPv6, LLDP ...) between its frames")
    args = ap.parse_args()
    if args.repeat < 1:
        ap.error(f"--repeat {args.repeat}: at least 1")
    global REPEAT
    REPEAT = args.repeat
    args.packets_given = args.packets is not None
    if args.packets is None:
        args.packets = 1_000_000
    compiled()
    tmp = args.keep or tempfile.mkdtemp(prefix="rdmalab-bench-")
    os.makedirs(tmp, exist_ok=True)
    if args.mixed or args.icmp or args.links or args.ipv6 or args.background:
        try:
            (main_mixed if args.mixed else main_links if args.links else main_ipv6 if args.ipv6
             else main_background if args.background else main_icmp)(args, tmp)
        finally:
            if not args.keep:
                shutil.rmtree(tmp, ignore_errors=True)
        return
    big, small = os.path.join(tmp, "rxe_big.pcap"), os.path.join(tmp, "rxe_small.pcap")
    try:
        t = time.perf_counter()
        n = build(big, args.packets)
        m = build(small, args.json_packets)
        print(f"{big}: {n:,} real rxe RoCEv2 packets, {os.path.getsize(big) / 2**20:.0f} MiB; {small}: {m:,} "
              f"(built in {time.perf_counter() - t:.1f} s)")
        load0 = os.getloadavg()[0]
        py = [sys.executable, "-m", "rdmalab", "decode"]
        same = [subprocess.run([*py, *extra, "-r", small], capture_output=True, check=True).stdout
                for extra in ([], ["--no-columnar"])]
        print(f"summary lines, columnar vs per-packet path on {m:,} packets: "
              f"{'identical' if same[0] == same[1] else 'DIFFERENT'} ({len(same[0]):,} bytes)")
        tshark = None if args.no_tshark or not shutil.which("tshark") else "tshark"
        rows = []
        from rdmalab.capture.blockpool import default_workers

        print(f"default workers for summary lines and JSON now: {default_workers()} (load average {os.getloadavg()[0]:.1f}, "
              f"{os.cpu_count()} cores); peak RSS below is the largest process's")
        rows += compare("summary lines", n, [("rdmalab decode -r FILE", [*py, "-r", big]),
                                             ("rdmalab decode -r FILE -j 1", [*py, "-j", "1", "-r", big]),
                                             ("rdmalab decode -r FILE -j 2", [*py, "-j", "2", "-r", big])],
                        [tshark, "-n", "-r", big] if tshark else None)
        js = [subprocess.run([*py, "-T", "json", "-j", j, "-r", small], capture_output=True, check=True).stdout
              for j in ("1", "2")]
        print(f"-T json, one process vs two workers on {m:,} packets: "
              f"{'identical' if js[0] == js[1] else 'DIFFERENT'} ({len(js[0]):,} bytes)")
        del js
        rows += compare("-T json", m, [("rdmalab decode -T json", [*py, "-T", "json", "-r", small]),
                                       ("rdmalab decode -T json -j 1", [*py, "-T", "json", "-j", "1", "-r", small]),
                                       ("rdmalab decode -T json -j 2", [*py, "-T", "json", "-j", "2", "-r", small])],
                        [tshark, "-n", "-r", small, "-T", "json"] if tshark else None)
        rows += compare("-V", m, [("rdmalab decode -V", [*py, "-V", "-r", small])],
                        [tshark, "-n", "-r", small, "-V"] if tshark else None)
        print(f"load average (1 min) before / after: {load0:.1f} / {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        if rows:
            print("\n| command | rdmalab (peak RSS) | tshark (peak RSS) | rdmalab packets/s over tshark's | "
                  "over tshark's CPU time |")
            print("|---|---|---|---|---|")
            print("\n".join(rows))
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
