"""An IP header whose length says the datagram goes on past the end of its frame on the wire (not a
frame the capture cut: one whose header is wrong).  tshark (packet-ip.c, packet-ipv6.c) takes the rest of
the frame as the datagram ("IPv4 total length exceeds packet length"): ``tcp.len``, a RoCE packet's
ICRC and payload count from the frame's end.  Before, rdmalab counted from the header's length (a
``tcp.len`` of 1444 where tshark has 539) and called the frame cut by the capture."""

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
FIELDS = ["frame.number", "ip.len", "ipv6.plen", "udp.length", "udp.srcport", "tcp.hdr_len", "tcp.len",
          "tcp.seq_raw", "infiniband.bth.opcode", "infiniband.bth.psn", "infiniband.reth.dmalen",
          "infiniband.aeth.msn", "icmp.type", "icmpv6.type"]


def _longer(path: Path, snap: bool = False) -> int:
    """Real frames, every third IP datagram's header length made longer than its frame by 1 to 600 octets
    in turn (``snap``: and every fifth of those cut by a snap length, its wire length kept); how many."""
    grow = (1, 3, 4, 20, 600)
    n = 0
    with CaptureWriter(path) as w:
        for name in ("rxe_write_bw.pcap", "siw_rping.pcap", "rxe_ud_send_bw.pcap", "rxe_atomic_cswap.pcap",
                     "lo_icmp_unreachable.pcap", "siw_crc_send_bw.pcap"):
            for i, r in enumerate(records(CAPTURES / name)):
                d = bytearray(r.data)
                wire = None
                if i % 3 == 0 and d[12:14] == b"\x08\x00":
                    d[16:18] = (int.from_bytes(d[16:18], "big") + grow[n % 5]).to_bytes(2, "big")
                    n += 1
                elif i % 3 == 0 and d[12:14] == b"\x86\xdd":
                    d[18:20] = (int.from_bytes(d[18:20], "big") + grow[n % 5]).to_bytes(2, "big")
                    n += 1
                if snap and i % 15 == 0 and len(d) > 70:
                    wire, d = len(d), d[:60]
                w.write(bytes(d), r.ns or 0, wire_len=wire)
    return n


@requires_tshark
@pytest.mark.tshark
@pytest.mark.parametrize("snap", [False, True])
def test_fields_as_tshark_on_both_paths(tmp_path: Path, capsys: Any, snap: bool) -> None:
    path = tmp_path / "longer.pcap"
    assert _longer(path, snap) > 100
    args = ["-r", str(path), "-T", "fields", *[a for f in FIELDS for a in ("-e", f)]]
    want = subprocess.run(["tshark", "-n", *args], capture_output=True, text=True, check=True).stdout
    for opt in ([], ["--no-columnar"]):
        assert _ours(capsys, *args, *opt) == want, opt
    # the lines, trees and JSON too: one path or the other, the same
    for mode in ([], ["-V"], ["-T", "json"]):
        assert _ours(capsys, "-r", str(path), *mode) == _ours(capsys, "-r", str(path), *mode, "--no-columnar"), mode


def test_the_problem_is_named(tmp_path: Path, capsys: Any) -> None:
    path = tmp_path / "longer.pcap"
    _longer(path)
    lines = _ours(capsys, "-r", str(path)).splitlines()
    assert lines[0].endswith("[1 problem(s): malformed IPv6.payload_length at byte 18: got 17 (0x11), expected "
                             "at most the 16 bytes the frame holds after the header]")  # (an ICMPv6 of 16 octets)
    assert sum("malformed IPv4.total_length at byte 16" in line for line in lines) > 50
