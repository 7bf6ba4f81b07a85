"""An IPv4 header tshark calls bogus (packet-ip.c): a header length under 20 octets ("Bogus IP header
length"), or a total length shorter than the header ("Bogus IP length").  tshark shows the header's
fields up to the one that is wrong and nothing after it: no addresses (the summary line's source and
destination are then the Ethernet addresses), no protocol, nothing of what it carries.  Before, rdmalab
gave every field of the header (``ip.src``, ``ip.proto`` ...) and the IP addresses in the line."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from tshark_cli import decode as _ours
from tshark_cli import requires_tshark

from rdmalab.capture import records
from rdmalab.capture.pcapwriter import CaptureWriter

CAPTURES = Path(__file__).resolve().parents[2] / "captures"
FIELDS = ["frame.number", "ip.version", "ip.hdr_len", "ip.dsfield.dscp", "ip.len", "ip.id", "ip.flags", "ip.ttl",
          "ip.proto", "ip.checksum", "ip.src", "ip.dst", "ip.addr", "udp.srcport", "tcp.srcport",
          "infiniband.bth.opcode"]


def _bogus(path: Path) -> int:
    """Real IPv4 frames (RoCEv2, TCP, UDP), every other one given a header length under 20 octets or a
    total length from 1 to 19 octets, in turn; how many."""
    n = 0
    with CaptureWriter(path) as w:
        for name in ("rxe_write_bw.pcap", "siw_rping.pcap", "rxe_ud_send_bw.pcap", "lo_icmp_unreachable.pcap"):
            for i, r in enumerate(records(CAPTURES / name)):
                d = bytearray(r.data)
                if i % 2 == 0 and d[12:14] == b"\x08\x00":
                    if n % 2:
                        d[14] = 0x40 | n % 5
                    else:
                        d[16:18] = (1 + n % 19).to_bytes(2, "big")
                    n += 1
                w.write(bytes(d), r.ns or 0)
    return n


@requires_tshark
@pytest.mark.tshark
def test_fields_and_lines_as_tshark(tmp_path: Path, capsys: Any) -> None:
    path = tmp_path / "bogus.pcap"
    assert _bogus(path) > 50
    args = ["-r", str(path), "-T", "fields", *[a for f in FIELDS for a in ("-e", f)]]
    want = subprocess.run(["tshark", "-n", *args], capture_output=True, text=True, check=True).stdout
    for opt in ([], ["--no-columnar"]):
        assert _ours(capsys, *args, *opt) == want, opt
    # a filter on the fields tshark does not show keeps those frames, as tshark's (the bogus IPv4 headers: not the
    # IPv6 packets, whose hidden ip.version is no IPv4 header)
    kept = subprocess.run(["tshark", "-n", "-r", str(path), "-Y", "ip and not ip.src", "-T", "fields", "-e", "frame.number"],
                          capture_output=True, text=True, check=True).stdout.split()
    assert kept and kept == [line.split("\t")[0] for line in want.splitlines()
                             if line.split("\t")[10] == "" and line.split("\t")[1] == "4"]
    for opt in ([], ["--no-columnar"]):
        assert _ours(capsys, "-r", str(path), "-Y", "ip and not ip.src", "-T", "fields", "-e", "frame.number",
                     *opt).split() == kept
    # the lines: the Ethernet addresses, tshark's Info (then the problem, in rdmalab's words)
    shown = subprocess.run(["tshark", "-n", "-r", str(path), "-T", "fields", "-e", "frame.number", "-e", "_ws.col.Source",
                            "-e", "_ws.col.Destination", "-e", "_ws.col.Info"],
                           capture_output=True, text=True, check=True).stdout.splitlines()
    lines = _ours(capsys, "-r", str(path)).splitlines()
    assert lines == _ours(capsys, "-r", str(path), "--no-columnar").splitlines()
    bogus = 0
    for line, cols in zip(lines, shown, strict=True):
        number, src, dst, info = cols.split("\t")
        if info.startswith("Bogus IP"):
            bogus += 1
            assert line.split()[:4] == [number, line.split()[1], src, "\u2192"] and f" {dst} " in line, (line, cols)
            assert f" {info} [1 problem(s): malformed IPv4." in line, (line, cols)
    assert bogus > 50
    for mode in (["-V"], ["-T", "json"]):
        assert _ours(capsys, "-r", str(path), *mode) == _ours(capsys, "-r", str(path), *mode, "--no-columnar"), mode
