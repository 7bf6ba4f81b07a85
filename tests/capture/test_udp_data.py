"""A UDP datagram's payload that no protocol rdmalab reads takes is tshark's ``data`` (packet-udp.c hands
what no port or heuristic dissector takes to the data dissector): ``frame.protocols`` ends ``udp:data``,
``data.data`` and ``data.len`` hold it, ``-Y data`` picks it, the JSON has the ``data`` layer, in a frame
and in the datagram an ICMP error quotes.  rdmalab showed no ``data`` for UDP at all (it did for TCP)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from tshark_cli import decode, requires_tshark, tshark

from rdmalab.capture.pcapwriter import CaptureWriter

FIELDS = ("frame.number", "frame.protocols", "data.data", "data.len", "udp.length", "udp.stream")


def _frames() -> list[bytes]:
    """Datagrams between ports no dissector of tshark's claims (40000-40009), payloads of text (no heuristic
    takes them): IPv4 and IPv6, behind an 802.1Q tag, empty, padded to 60 octets, and quoted by ICMP and
    ICMPv6 port unreachables, whole and cut."""
    from scapy.layers.inet import ICMP, IP, UDP
    from scapy.layers.inet6 import ICMPv6DestUnreach, IPv6
    from scapy.layers.l2 import Dot1Q, Ether

    rnd = random.Random(5)
    eth = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
    out = []
    for i in range(60):
        text = " ".join(rnd.choice(["rdma", "lab", "queue", "pair", "hello"]) for _ in range(rnd.randrange(0, 12)))
        udp = UDP(sport=40000 + i % 5, dport=40005 + i % 5) / text.encode()
        kind = i % 6
        if kind == 0:
            f = eth / IP(src="10.0.0.1", dst="10.0.0.2") / udp
        elif kind == 1:
            f = eth / IPv6(src="fd00::1", dst="fd00::2") / udp
        elif kind == 2:
            f = eth / Dot1Q(vlan=7) / IP(src="10.0.0.1", dst="10.0.0.2") / udp
        elif kind == 3:
            quoted = bytes(IP(src="10.0.0.2", dst="10.0.0.1") / udp)
            f = eth / IP(src="10.0.0.1", dst="10.0.0.2") / ICMP(type=3, code=3) / quoted[:rnd.choice([28, 32, 60])]
        elif kind == 4:
            quoted = bytes(IPv6(src="fd00::2", dst="fd00::1") / udp)
            f = eth / IPv6(src="fd00::1", dst="fd00::2") / ICMPv6DestUnreach(code=4) / quoted
        else:
            f = eth / IP(src="10.0.0.1", dst="10.0.0.2") / UDP(sport=40001, dport=40006) / b"x"  # (padded to 60)
        out.append(bytes(f).ljust(60, b"\0"))
    return out


@requires_tshark
def test_udp_payloads_are_data_as_in_tshark(tmp_path: Path, capsys: Any) -> None:
    frames = _frames()
    path = tmp_path / "udp.pcap"
    # some IPv4 frames cut by a snap length of 50 octets (the payload as far as it was captured; their headers
    # whole)
    with CaptureWriter(path, nano=False) as w:
        for i, f in enumerate(frames):
            w.write(f[:50] if i % 6 in (0, 2, 5) and i % 4 == 0 else f, 10**9 + i * 1000, wire_len=len(f))
    args = ["-r", str(path), "-T", "fields", *(a for n in FIELDS for a in ("-e", n))]
    want = tshark(*args)
    assert ":udp:data\t" in want and "icmp:ip:udp:data" in want and "icmpv6:ipv6:udp:data" in want
    assert decode(capsys, *args) == want
    assert decode(capsys, *args, "--no-columnar") == want
    for flt in ("data", "data.len > 10", "!data && udp", 'data.data contains "pair"'):
        sel = ["-r", str(path), "-Y", flt, "-T", "fields", "-e", "frame.number"]
        assert decode(capsys, *sel) == tshark(*sel), flt
    mine = json.loads(decode(capsys, "-r", str(path), "-T", "json"))
    theirs = json.loads(tshark("-r", str(path), "-T", "json"))
    for m, t in zip(mine, theirs, strict=True):
        assert m["_source"]["layers"].get("data") == t["_source"]["layers"].get("data"), \
            m["_source"]["layers"]["frame"]["frame.number"]
