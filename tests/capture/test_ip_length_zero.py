"""An IPv4 total length of 0 (left for the NIC to fill in: TCP segmentation offload, captured on the sending
host): tshark shows ``ip.len`` as the length it presumes, the rest of the frame on the wire (packet-ip.c: the
reported length, "reported as 0, presumed to be because of TSO"), and reads the datagram that far, even past
what a snap length kept; rdmalab showed 0, and took the datagram to end where the capture did (``tcp.len``
of a cut segment)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tshark_cli import decode, requires_tshark, tshark

from rdmalab.capture.pcapwriter import CaptureWriter


def _capture(path: Path) -> Path:
    from scapy.layers.inet import IP, TCP, UDP
    from scapy.layers.l2 import Ether

    def zero(pkt: Any, after: bytes = b"") -> bytes:
        b = bytearray(bytes(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / pkt))
        b[16:18] = bytes(2)  # (the total length; the checksum left as it was)
        return bytes(b) + after

    ip = IP(src="10.0.0.1", dst="10.0.0.2")
    frames = [
        zero(ip / TCP(sport=2000, dport=5001, flags="A", seq=5) / b"hello"),
        zero(ip / UDP(sport=3000, dport=3001) / b"hello", bytes(13)),  # (padded to 60 octets)
        zero(ip / TCP(sport=2001, dport=5001, flags="A", seq=5) / b"hi", bytes(4)),
        zero(ip / TCP(sport=2002, dport=5001, flags="A", seq=5) / (b"h" * 20), b"\x01\x02\x03\x04"),
        zero(ip / TCP(sport=2003, dport=5001, flags="PA", seq=5) / (b"h" * 200)),  # (cut by the snap length)
        zero(IP(src="10.0.0.1", dst="10.0.0.2", options=b"\x01\x01\x01\x00")
             / TCP(sport=2004, dport=5001, flags="A", seq=5) / (b"h" * 20)),
        zero(ip / TCP(sport=2000, dport=5001, flags="A", seq=10) / b"world"),
        bytes(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / ip / UDP(sport=3000, dport=3001) / b"x"),
    ]
    with CaptureWriter(path, snaplen=100) as w:
        for i, f in enumerate(frames):
            w.write(f[:100], 1_700_000_000_000_000_000 + i * 1000, wire_len=len(f))
    return path


_FIELDS = ("frame.number", "ip.len", "ip.hdr_len", "tcp.len", "tcp.seq", "tcp.nxtseq", "tcp.stream", "udp.length",
           "udp.stream", "eth.padding", "eth.trailer", "eth.fcs")


@requires_tshark
@pytest.mark.tshark
@pytest.mark.parametrize("path_args", [[], ["--no-columnar"]])
def test_the_length_presumed(path_args: list[str], tmp_path: Path, capsys: Any) -> None:
    path = str(_capture(tmp_path / "tso.pcap"))
    fields = ["-T", "fields", *(a for f in _FIELDS for a in ("-e", f))]
    assert decode(capsys, *path_args, "-r", path, *fields) == tshark("-r", path, *fields)
    for flt in ("ip.len == 0", "ip.len == 45", "ip.len > 60", "tcp.len == 200"):
        want = tshark("-r", path, "-Y", flt, "-T", "fields", "-e", "frame.number")
        assert decode(capsys, *path_args, "-r", path, "-Y", flt, "-T", "fields", "-e", "frame.number") == want, flt


@requires_tshark
@pytest.mark.tshark
def test_json_and_paths_agree(tmp_path: Path, capsys: Any) -> None:
    import json

    path = str(_capture(tmp_path / "tso.pcap"))
    want = [p["_source"]["layers"]["ip"]["ip.len"] for p in json.loads(tshark("-r", path, "-T", "json"))]
    for path_args in ([], ["--no-columnar"]):
        got = [p["_source"]["layers"]["ip"]["ip.len"]
               for p in json.loads(decode(capsys, *path_args, "-r", path, "-T", "json"))]
        assert got == want
    for mode in ([], ["-V"]):
        assert decode(capsys, *mode, "-r", path) == decode(capsys, "--no-columnar", *mode, "-r", path)
