"""An IP datagram that ends inside its UDP header (a total length under the IP header and 8 octets, octets
after it captured as a trailer): the ports when the datagram holds them, then a problem, as tshark shows it
(its ports, then a malformed packet).  rdmalab read the length and checksum from the trailer and wrote
'Payload: -4 bytes'."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tshark_cli import decode, requires_tshark, tshark

from rdmalab.capture.pcapwriter import write_capture


def _capture(path: Path) -> Path:
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether

    frames = []
    for i, inside in enumerate((0, 2, 4, 6, 7, 8, 12)):
        whole = bytes(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / IP(src="10.0.0.1", dst="10.0.0.2")
                      / UDP(sport=40000 + i, dport=40004) / (b"c" * 12))
        b = bytearray(whole)
        b[16:18] = (20 + inside).to_bytes(2, "big")  # (the total length; the checksum left as it was)
        frames.append((1_700_000_000_000_000_000 + i * 1000, bytes(b) + bytes(10)))
    write_capture(path, frames)
    return path


@requires_tshark
@pytest.mark.tshark
@pytest.mark.parametrize("path_args", [[], ["--no-columnar"]])
def test_as_tshark_shows_it(path_args: list[str], tmp_path: Path, capsys: Any) -> None:
    path = str(_capture(tmp_path / "short.pcap"))
    fields = ["-T", "fields", *(a for f in ("frame.number", "udp.srcport", "udp.dstport", "udp.length", "udp.checksum",
                                            "eth.trailer", "eth.padding", "udp.stream") for a in ("-e", f))]
    assert decode(capsys, *path_args, "-r", path, *fields) == tshark("-r", path, *fields)
    want = tshark("-r", path, "-Y", "udp.length", "-T", "fields", "-e", "frame.number")
    assert decode(capsys, *path_args, "-r", path, "-Y", "udp.length", "-T", "fields", "-e", "frame.number") == want


def test_no_negative_payload(tmp_path: Path, capsys: Any) -> None:
    path = str(_capture(tmp_path / "short.pcap"))
    tree = decode(capsys, "-V", "-r", path)
    assert "-4 bytes" not in tree and "Payload: -" not in tree
    lines = decode(capsys, "-r", path).splitlines()
    assert sum("truncated UDP.length" in line for line in lines) == 5
    assert lines == decode(capsys, "--no-columnar", "-r", path).splitlines()


@requires_tshark
@pytest.mark.tshark
@pytest.mark.parametrize("path_args", [[], ["--no-columnar"]])
def test_a_length_field_under_eight(path_args: list[str], tmp_path: Path, capsys: Any) -> None:
    """A UDP length field under 8 (the header's own): ports and length, no checksum, no conversation (each
    such datagram shifted every later udp.stream by one), a problem; IPv6's 0 is a jumbogram's, a whole header."""
    from scapy.layers.inet import IP, UDP
    from scapy.layers.inet6 import IPv6
    from scapy.layers.l2 import Ether

    frames = []
    for i, (six, length) in enumerate([(False, 0), (False, 1), (False, 7), (False, 8), (False, 9), (True, 0),
                                       (True, 5), (False, 20)]):
        ip = IPv6(src="fe80::1", dst="fe80::2") if six else IP(src="10.0.0.1", dst="10.0.0.2")
        pkt = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / ip / UDP(sport=5000 + i, dport=6000, len=length)
        frames.append((1_700_000_000_000_000_000 + i * 1000, bytes(pkt / (b"x" * 12))))
    path = tmp_path / "lengths.pcap"
    write_capture(path, frames)
    fields = ["-T", "fields", *(a for f in ("udp.srcport", "udp.length", "udp.checksum", "udp.stream")
                                for a in ("-e", f))]
    assert decode(capsys, *path_args, "-r", str(path), *fields) == tshark("-r", str(path), *fields)
    assert decode(capsys, *path_args, "-r", str(path)).count("malformed UDP.length") == 4
