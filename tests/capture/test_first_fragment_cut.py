"""The first fragment of an IPv4 datagram (MF set, offset 0) that the capture cut (a snap length): tshark
reads its UDP or TCP header (and so in an ICMP error's quote of a first fragment) (packet-ip.c reassembles only fragments captured whole, and hands the first
fragment of any other datagram to the next dissector; packet-tcp.c counts no segment length in it: the raw
sequence and acknowledgment numbers, no tcp.len nor tcp.nxtseq, no Len= in the line); rdmalab read none,
as for a fragment.  A fragment captured whole, and every later fragment, stays a fragment."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import pytest
from tshark_cli import decode, requires_tshark, tshark

from rdmalab.capture.columnar import COLUMN_NAMES

FIELDS = ("frame.number", "ip.flags.mf", "ip.frag_offset", "udp.srcport", "udp.dstport", "udp.length",
          "udp.checksum", "udp.stream", "tcp.srcport", "tcp.dstport", "tcp.seq", "tcp.seq_raw", "tcp.ack", "tcp.len",
          "tcp.nxtseq", "tcp.stream", "tcp.flags", "tcp.window_size_value", "tcp.window_size", "tcp.checksum",
          "infiniband.bth.opcode", "infiniband.bth.destqp", "infiniband.bth.psn")
FILTERS = ("udp", "tcp", "infiniband", "udp.stream == 1", "tcp.len", "tcp.seq == 1001", "tcp.nxtseq",
           "udp.length == 2008", "infiniband.bth.destqp == 0x11", "ip.flags.mf == 1 && udp")


def _capture(path: Path) -> Path:
    from scapy.layers.inet import ICMP, IP, TCP, UDP, fragment
    from scapy.layers.l2 import Ether

    eth = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
    bth = bytes.fromhex("0040ffff00000011000000aa")  # RC SEND First to QP 0x11, PSN 0xaa
    whole = [UDP(sport=5000, dport=6000) / (b"x" * 2000),
             TCP(sport=3333, dport=4444, seq=1001, ack=5, flags="PA", window=8192) / (b"x" * 2000),
             UDP(sport=49152, dport=4791) / (bth + b"x" * 1988)]
    records = []
    for snap in (54, 60, 80):  # cut inside the UDP payload, after the TCP header, further on
        for i, l4 in enumerate(whole):
            for f in fragment(IP(src="10.0.0.1", dst="10.0.0.2", id=100 + i) / l4, fragsize=1400):
                b = bytes(eth / f)
                records.append((b[:snap], len(b)))
    for i, l4 in enumerate(whole):  # a first fragment captured whole (the next one cut: no reassembly): a fragment
        first, second = (bytes(eth / f) for f in fragment(IP(src="10.0.0.1", dst="10.0.0.2", id=200 + i) / l4,
                                                            fragsize=1400))
        records += [(first, len(first)), (second[:54], len(second))]
        for n in (8, 28):  # an ICMP error's quote of a first fragment (cut, as quotes are): read as tshark reads it
            error = bytes(eth / IP(src="10.0.0.2", dst="10.0.0.1") / ICMP(type=11, code=0) / first[14:14 + 20 + n])
            records.append((error, len(error)))
    body = b"".join(struct.pack("<IIII", 10 + i, 0, len(b), n) + b for i, (b, n) in enumerate(records))
    path.write_bytes(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1) + body)
    return path


@requires_tshark
@pytest.mark.tshark
@pytest.mark.parametrize("path_args", [[], ["--no-columnar"]])
def test_as_tshark_shows_it(path_args: list[str], tmp_path: Path, capsys: Any) -> None:
    path = str(_capture(tmp_path / "fragments.pcap"))
    fields = ["-T", "fields", *(a for f in FIELDS for a in ("-e", f))]
    want = tshark("-r", path, *fields)
    assert "\t3333\t4444\t1001\t1001\t5\t\t\t" in want  # (tshark: the raw numbers, no tcp.len of a cut first fragment)
    assert decode(capsys, *path_args, "-r", path, *fields) == want
    columns = [n for n in FIELDS if n in COLUMN_NAMES]  # (the columns alone: the columnar path's fields)
    assert len(columns) >= 15
    fields = ["-T", "fields", *(a for f in columns for a in ("-e", f))]
    assert decode(capsys, *path_args, "-r", path, *fields) == tshark("-r", path, *fields)
    for expr in FILTERS:
        frames = ["-Y", expr, "-T", "fields", "-e", "frame.number"]
        assert decode(capsys, *path_args, "-r", path, *frames) == tshark("-r", path, *frames), expr


def test_lines_on_both_paths(tmp_path: Path, capsys: Any) -> None:
    """The summary lines agree on both paths, and a cut first fragment's TCP line has no Len= (tshark's
    "3333 → 4444 [PSH, ACK] Seq=1001 Ack=5 Win=8192")."""
    path = str(_capture(tmp_path / "fragments.pcap"))
    lines = decode(capsys, "-r", path)
    assert lines == decode(capsys, "--no-columnar", "-r", path)
    tcp = [line for line in lines.splitlines() if "3333 → 4444" in line]
    assert len(tcp) == 3 and all("Seq=1001 Ack=5 Win=8192" in line and "Len=" not in line for line in tcp)
