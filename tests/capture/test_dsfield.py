"""``ip.dsfield``: the IPv4 header's whole second octet (DSCP and ECN, RFC 2474 3 and RFC 3168 5), as tshark
shows it: a name filters took (a prefix of ip.dsfield.dscp) but that held no value, so ``-e ip.dsfield``
printed nothing and ``-Y 'ip.dsfield == 0xb8'`` matched no frame (tshark: every such frame)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from tshark_cli import decode, requires_tshark, tshark

from rdmalab.capture.pcapwriter import write_capture


def _capture(path: Path) -> Path:
    from scapy.layers.inet import ICMP, IP, UDP, IPerror, UDPerror
    from scapy.layers.l2 import Ether

    rng = random.Random(7)
    frames = []
    for i in range(200):
        ip = IP(src="10.0.0.1", dst="10.0.0.2", tos=rng.randrange(256))
        if i % 10 == 0:  # an ICMP error quoting a datagram of another marking: a second value
            pkt = Ether() / ip / ICMP(type=3, code=3) / IPerror(dst="10.0.0.1", tos=0x2E) / UDPerror(dport=9)
        else:
            pkt = Ether() / ip / UDP(sport=1000 + i, dport=4000) / bytes(rng.randrange(30))
        frames.append((1_700_000_000_000_000_000 + i * 1000, bytes(pkt)))
    write_capture(path, frames)
    return path


@requires_tshark
@pytest.mark.tshark
@pytest.mark.parametrize("path_args", [[], ["--no-columnar"]])
def test_as_tshark_has_it(path_args: list[str], tmp_path: Path, capsys: Any) -> None:
    path = str(_capture(tmp_path / "marked.pcap"))
    fields = ["-T", "fields", "-e", "frame.number", "-e", "ip.dsfield", "-e", "ip.dsfield.dscp", "-e", "ip.dsfield.ecn"]
    assert decode(capsys, *path_args, "-r", path, *fields) == tshark("-r", path, *fields)
    for flt in ("ip.dsfield == 0xb8", "ip.dsfield > 0x80", "ip.dsfield.ecn == 3 && ip.dsfield >= 0x40", "ip.dsfield == 0x2e"):
        want = tshark("-r", path, "-Y", flt, "-T", "fields", "-e", "frame.number")
        assert decode(capsys, *path_args, "-r", path, "-Y", flt, "-T", "fields", "-e", "frame.number") == want, flt
