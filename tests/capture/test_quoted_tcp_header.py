"""An ICMP or ICMPv6 error's quote of a TCP segment, cut after 8, 12, 16, 20, 23 and 26 octets of its header
and payload, shown as tshark 4.0.17 shows it (packet-tcp.c for a header inside an error packet): an IPv4
quote's sequence number is tcp.seq, the number as it is, without tcp.seq_raw; an IPv6 quote's ports alone
under 16 octets, then tcp.seq and tcp.seq_raw in their ordinary places; from 16 octets on, everything up
to the window and the quote's conversation (tcp.stream), from 20 the checksum and urgent pointer.  Before,
rdmalab showed tcp.seq_raw in every quote (and tcp.seq, an IPv6 quote's too, under 16 octets) and, of a
16-octet quote, the ports and sequence number alone, in no conversation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tshark_cli import decode, requires_tshark, tshark

from rdmalab.capture.pcapwriter import write_capture

FIELDS = ("frame.number", "frame.protocols", "ip.src", "ipv6.src", "tcp.srcport", "tcp.dstport", "tcp.port",
          "tcp.seq", "tcp.seq_raw", "tcp.stream", "tcp.ack", "tcp.ack_raw", "tcp.hdr_len", "tcp.flags",
          "tcp.flags.push", "tcp.flags.ack", "tcp.window_size_value", "tcp.window_size", "tcp.checksum",
          "tcp.urgent_pointer", "tcp.len", "tcp.nxtseq", "tcp.payload", "data.data", "data.len")
FILTERS = ("tcp.seq_raw", "tcp.seq == 1001", "tcp.seq == 1", "tcp.stream == 1", "tcp.stream == 2", "tcp.ack == 5",
           "tcp.hdr_len == 20", "tcp.window_size_value == 8192", "tcp.flags.push == 1", "tcp.checksum",
           "tcp.urgent_pointer == 0", "tcp.payload", "tcp.len", "data")


def _capture(path: Path) -> Path:
    from scapy.layers.inet import ICMP, IP, TCP
    from scapy.layers.inet6 import ICMPv6DestUnreach, IPv6
    from scapy.layers.l2 import Ether

    eth = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
    frames = [bytes(eth / IP(src="10.0.0.5", dst="10.0.0.6") / TCP(sport=1, dport=2, seq=9, flags="S"))]
    for six in (False, True):
        ip = IPv6(src="fe80::1", dst="fe80::2") if six else IP(src="10.0.0.1", dst="10.0.0.2", id=7)
        segment = ip / TCP(sport=3333, dport=4444, seq=1001, ack=5, flags="PA", window=8192) / b"abcdef"
        head = 40 if six else 20
        for n in (8, 12, 16, 20, 23, 26):  # octets of the TCP header and its payload quoted
            quote = bytes(segment)[:head + n]
            error = (IPv6(src="fe80::2", dst="fe80::1") / ICMPv6DestUnreach() if six
                     else IP(src="10.0.0.2", dst="10.0.0.1") / ICMP(type=3, code=4))
            frames.append(bytes(eth / error / quote))
        frames.append(bytes(eth / segment))  # the quoted conversation itself, after its quotes
    write_capture(path, [((10 + i) * 10**9, f) for i, f in enumerate(frames)], nano=False)
    return path


@requires_tshark
@pytest.mark.tshark
@pytest.mark.parametrize("path_args", [[], ["--no-columnar"]])
def test_fields_and_filters_as_tshark(path_args: list[str], tmp_path: Path, capsys: Any) -> None:
    path = str(_capture(tmp_path / "quoted_tcp.pcap"))
    fields = ["-T", "fields", *(a for f in FIELDS for a in ("-e", f))]
    want = tshark("-r", path, *fields)
    assert "\t1001\t1001\t" in want and "\t3333,4444\t1001\t\t" in want  # (IPv6's seq and seq_raw; IPv4's seq alone)
    assert decode(capsys, *path_args, "-r", path, *fields) == want
    for expr in FILTERS:
        frames = ["-Y", expr, "-T", "fields", "-e", "frame.number"]
        assert decode(capsys, *path_args, "-r", path, *frames) == tshark("-r", path, *frames), expr
    # the conversation fields alone (the columns' conversations, without the quotes' other fields asked)
    few = ["-T", "fields", "-e", "tcp.stream", "-e", "tcp.seq"]
    assert decode(capsys, *path_args, "-r", path, *few) == tshark("-r", path, *few)


@requires_tshark
@pytest.mark.tshark
def test_json_and_lines(tmp_path: Path, capsys: Any) -> None:
    """The quote's TCP layer in the ICMP layer of -T json: tshark's keys (rdmalab writes some of them: not
    tcp.port, tcp.stream, tcp.flags_tree ... of any TCP header), in tshark's order, with tshark's values;
    the summary lines and -V the same on both paths."""
    path = str(_capture(tmp_path / "quoted_tcp.pcap"))
    want = json.loads(tshark("-r", path, "-T", "json", "--no-duplicate-keys"))
    for args in ([], ["--no-columnar"]):
        got = json.loads(decode(capsys, *args, "-r", path, "-T", "json"))
        for a, b in zip(got, want, strict=True):
            la, lb = a["_source"]["layers"], b["_source"]["layers"]
            icmp = "icmp" if "icmp" in lb else "icmpv6" if "icmpv6" in lb else None
            if icmp is None:
                continue
            ours, theirs = la[icmp]["tcp"], lb[icmp]["tcp"]
            assert [k for k in theirs if k in ours] == list(ours), b["_source"]["layers"]["frame"]["frame.number"]
            assert all(ours[k] == theirs[k] for k in ours)
            assert ("tcp.seq_raw" in ours) == ("tcp.seq_raw" in theirs)  # (an IPv6 quote's derived tcp.seq:
            assert ("tcp.seq" in ours) == ("tcp.seq" in theirs and icmp == "icmp")  # not in rdmalab's JSON, as no TCP's)
            assert ("tcp.window_size_value" in ours) == ("tcp.window_size_value" in theirs)
    lines = decode(capsys, "-r", path)
    assert lines == decode(capsys, "--no-columnar", "-r", path)
    assert len(lines.splitlines()) == 15
    tree = decode(capsys, "-V", "-r", path)
    assert tree == decode(capsys, "-V", "--no-columnar", "-r", path)
    assert "seq: 1001  {tcp.seq}" in tree and "window: 8192  {tcp.window_size_value}" in tree


def _edges(path: Path) -> Path:
    """Quotes of 4 and 6 octets of TCP header (the ports alone), of a header with options cut inside them,
    and of a header whose length is bogus (under 20 octets: no window); IPv4 and IPv6."""
    from scapy.layers.inet import ICMP, IP, TCP
    from scapy.layers.inet6 import ICMPv6DestUnreach, IPv6
    from scapy.layers.l2 import Ether

    eth = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
    frames = []
    syn = bytes(IP(src="10.0.0.1", dst="10.0.0.2", id=7) / TCP(
        sport=3333, dport=4444, seq=1001, ack=5, flags="S", window=8192,
        options=[("MSS", 1460), ("WScale", 7), ("NOP", None), ("NOP", None)]) / b"abc")
    bogus = bytearray(bytes(IP(src="10.0.0.1", dst="10.0.0.2") / TCP(sport=3333, dport=4444, seq=1001, ack=5,
                                                                       flags="PA")))
    bogus[32] = 0x30  # a data offset of 3 (12 octets)
    for quote in (*(syn[:20 + n] for n in (4, 6, 22, 28, 31)), *(bytes(bogus[:20 + n]) for n in (16, 20))):
        frames.append(bytes(eth / IP(src="10.0.0.2", dst="10.0.0.1") / ICMP(type=3, code=4) / quote))
    syn6 = bytes(IPv6(src="fe80::1", dst="fe80::2") / TCP(sport=3333, dport=4444, seq=1001, ack=5, flags="S",
                                                         options=[("MSS", 1460)]))
    for n in (4, 16, 22):
        frames.append(bytes(eth / IPv6(src="fe80::2", dst="fe80::1") / ICMPv6DestUnreach() / syn6[:40 + n]))
    write_capture(path, [((10 + i) * 10**9, f) for i, f in enumerate(frames)], nano=False)
    return path


@requires_tshark
@pytest.mark.tshark
@pytest.mark.parametrize("path_args", [[], ["--no-columnar"]])
def test_short_and_odd_quotes(path_args: list[str], tmp_path: Path, capsys: Any) -> None:
    """Before: a quote of 4 to 7 octets of TCP header had no TCP layer (tshark: the ports), and one of a
    bogus header length showed a tcp.window_size (tshark: none)."""
    path = str(_edges(tmp_path / "edges.pcap"))
    fields = ["-T", "fields", *(a for f in FIELDS for a in ("-e", f))]
    assert decode(capsys, *path_args, "-r", path, *fields) == tshark("-r", path, *fields)
    for expr in ("tcp", "tcp.window_size", "tcp.port == 4444", "tcp.seq == 1001", "tcp.stream == 0"):
        frames = ["-Y", expr, "-T", "fields", "-e", "frame.number"]
        assert decode(capsys, *path_args, "-r", path, *frames) == tshark("-r", path, *frames), expr
