"""TCP's flags as tshark 4.0.17 has them: ``tcp.flags`` holds 12 bits (the three reserved bits before the
nine flags, RFC 9293 3.1), ``tcp.flags.res`` is set when any reserved bit is, the bit after them is AE
(Accurate ECN, RFC 9768: "[SYN, AE]"), and a segment with reserved bits set says so in its line
("[SYN, Reserved]").  On real siw segments with those bits set, on both paths, against tshark."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tshark_cli import decode, requires_tshark, tshark

from rdmalab.capture import records
from rdmalab.capture.pcapwriter import CaptureWriter
from rdmalab.wire.net import TCP, tcp_flag_names

CAPTURES = Path(__file__).resolve().parents[2] / "captures"
#: (reserved bits, flags) written into real segments
CASES = [(0, 0x102), (1, 0x002), (4, 0x012), (7, 0x1FF), (2, 0x010), (0, 0x100), (0, 0x018), (3, 0x011)]


def _frames(tmp_path: Path) -> Path:
    """siw's segments (one with payload, one without) with the reserved bits and flags of CASES."""
    segments = [bytes(r.data) for r in records(CAPTURES / "siw_rping.pcap")]
    path = tmp_path / "flags.pcap"
    with CaptureWriter(path) as w:
        for i, (res, flags) in enumerate(CASES):
            d = bytearray(segments[4 if i % 2 else 9])
            assert d[12:14] == b"\x08\x00" and d[23] == 6 and d[14] == 0x45
            d[46] = (d[46] & 0xF0) | res << 1 | flags >> 8
            d[47] = flags & 0xFF
            w.write(bytes(d), (10 + i) * 10**9)
    return path


def test_the_names() -> None:
    assert tcp_flag_names(0x102) == ["SYN", "AE"]
    assert tcp_flag_names(0x202) == ["SYN", "Reserved"]
    assert tcp_flag_names(0xFFF)[-2:] == ["AE", "Reserved"]
    assert TCP(flags=0x12, reserved=5).ws_fields()["tcp.flags"] == 0xA12


def _ours(capsys: Any, *args: str) -> list[str]:
    return decode(capsys, *args).splitlines()


@requires_tshark
@pytest.mark.tshark
def test_flags_as_tshark(tmp_path: Path, capsys: Any) -> None:
    """-T fields of the flags, the flags in each line, and -T json's tcp.flags: tshark's, on both paths."""
    path = _frames(tmp_path)
    names = ("tcp.flags", "tcp.flags.res", "tcp.flags.ae", "tcp.flags.cwr", "tcp.flags.syn", "tcp.flags.ack")
    argv = ["-T", "fields", *[a for n in names for a in ("-e", n)]]
    want = tshark("-r", str(path), *argv).splitlines()
    assert [w.split("\t")[1] for w in want] == ["0", "1", "1", "1", "1", "0", "0", "1"]
    lines = tshark("-r", str(path)).splitlines()
    their_flags = [line[line.index(" [", line.index("→", line.index("TCP"))):].split("]")[0] + "]" for line in lines]
    for flag in ([], ["--no-columnar"]):
        assert _ours(capsys, "-r", str(path), *argv, *flag) == want
        ours = _ours(capsys, "-r", str(path), *flag)
        assert [line[line.index(" [", line.index("→", line.index("TCP"))):].split("]")[0] + "]" for line in ours] \
            == their_flags
        tree = _ours(capsys, "-r", str(path), "-V", *flag)
        assert [t.split("Summary: ")[1].split("]")[0].split(" [")[1] for t in tree if "Summary: " in t and " [" in t] \
            == [f.strip(" []") for f in their_flags]
        js = json.loads("\n".join(_ours(capsys, "-r", str(path), "-T", "json", *flag)))
        assert [p["_source"]["layers"]["tcp"]["tcp.flags"] for p in js] == [w.split("\t")[0] for w in want]
    assert "[SYN, AE]" in their_flags[0] and "Reserved" in their_flags[1]
