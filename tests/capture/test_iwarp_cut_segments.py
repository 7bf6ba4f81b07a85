"""iWARP in a capture cut by a snap length (``tcpdump -s 128``, ``editcap -s``: a headers-only capture).

A segment the capture cut, on a direction that follows FPDUs, gives the FPDUs it holds: the whole ones,
and the one the capture cut as far as it was captured (``wire.iwarp.decode_cut_fpdu``: its MPA length,
its DDP and RDMAP headers when captured whole), and the stream stays in step past it
(``IwarpTracker._cut_segment``).  Before, its octets not captured were a hole, and the FPDUs of every
cut segment were lost.  Checked against tshark on siw's real captures cut at many lengths: each frame
is iWARP where tshark shows MPA or DDP/RDMA, and every difference ``crosscheck`` finds is named
(tshark shows only the MPA length of a cut FPDU); on both of rdmalab's paths alike."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tshark_cli import decode, requires_tshark

from rdmalab.capture import read, records
from rdmalab.capture.crosscheck import crosscheck
from rdmalab.capture.pcapwriter import CaptureWriter
from rdmalab.wire.iwarp import decode_cut_fpdu, encode_fpdu, rdma_write, read_request, send
from rdmalab.wire.mpa import MPA
from rdmalab.wire.rdmap import DDPTagged, DDPUntagged, RDMAPControl, RDMAPUntagged, ReadRequest

CAPTURES = Path(__file__).resolve().parents[2] / "captures"
SIW = ["siw_write_bw.pcap", "siw_crc_write_bw.pcap", "siw_crc_read_bw.pcap", "siw_crc_rping.pcap",
       "siw_send_bw.pcap"]


def _snapped(src: Path, dst: Path, snap: int) -> Path:
    """``src`` with every record cut to ``snap`` octets, its length on the wire kept (as ``editcap -s``)."""
    with CaptureWriter(dst, nano=True) as w:
        for r in records(src):
            d = bytes(r.data)
            w.write(d[:snap], r.ns or 0, wire_len=r.wire_length or len(d))
    return dst


def _protocols(path: Path, *command: str) -> list[str]:
    out = subprocess.run([*command, "-r", str(path)], capture_output=True, text=True, check=True).stdout
    return [line.split()[5] for line in out.splitlines()]


def test_a_cut_fpdu_shows_what_was_captured() -> None:
    """Headers captured whole are decoded, a header cut part way is not shown and is no payload; the
    captured octets after the headers are the payload; no CRC verdict; a problem says what is missing."""
    write = encode_fpdu(rdma_write(0x1234, 0x5000, b"x" * 64))
    pkt = decode_cut_fpdu(write[:30], len(write))
    assert [type(la.header) for la in pkt.layers] == [MPA, DDPTagged, RDMAPControl]
    assert pkt.layers[0].header == MPA(len(write) - 6)
    assert pkt.payload_length == 30 - 2 - 14 and pkt.crc_status is None
    assert [p.kind for p in pkt.problems] == ["truncated"]
    assert f"at most the 28 octets captured after it (30 of the FPDU's {len(write)})" in str(pkt.problems[0])
    assert pkt.payload_wire == 64 and "payload=64 (14 captured)" in pkt.summary()
    cut = decode_cut_fpdu(write[:10], len(write))  # (the DDP header cut part way)
    assert [type(la.header) for la in cut.layers] == [MPA] and cut.payload_length == 0
    rr = encode_fpdu(read_request(0xA, 0x100, 4096, 0xB, 0x200))
    short = decode_cut_fpdu(rr[:30], len(rr))  # (its ReadRequest header cut: DDP and RDMAP alone, no payload)
    assert ReadRequest not in [type(la.header) for la in short.layers] and short.payload_length == 0
    whole_headers = decode_cut_fpdu(rr[:len(rr) - 4], len(rr))
    assert whole_headers.get(ReadRequest) == ReadRequest(sink_stag=0xA, sink_to=0x100, src_stag=0xB,
                                                         src_to=0x200, size=4096)
    s = decode_cut_fpdu(encode_fpdu(send(b"y" * 40))[:24], 64)
    assert s.get(DDPUntagged) is not None and s.get(RDMAPUntagged) is not None and s.payload_length == 4
    with pytest.raises(Exception, match="MPA"):
        decode_cut_fpdu(write[:1], len(write))


@requires_tshark
@pytest.mark.tshark
@pytest.mark.parametrize("snap", [80, 96, 100, 128, 160, 300])
def test_each_frame_is_iwarp_where_tshark_shows_mpa(snap: int, tmp_path: Path) -> None:
    """Frame for frame, iWARP where tshark shows MPA or DDP/RDMA, TCP where it shows TCP, but for the
    retransmissions of cut segments (whose FPDU length tshark shows again: a named cause); crosscheck
    names every difference."""
    causes: set[str] = set()
    for name in SIW:
        cut = _snapped(CAPTURES / name, tmp_path / f"{snap}_{name}", snap)
        report = crosscheck(cut)
        assert not report.unexplained, report.text()
        causes |= {r.defect.id for r in report.explained if r.defect}
        again = {r.frame for r in report.explained if r.defect and r.defect.id == "retransmitted-cut-fpdu"}
        theirs = ["iWARP" if p in ("MPA", "DDP/RDMA") else p for p in _protocols(cut, "tshark", "-n")]
        ours = _protocols(cut, sys.executable, "-m", "rdmalab", "decode")
        differ = [(i + 1, a, b) for i, (a, b) in enumerate(zip(ours, theirs, strict=True)) if a != b]
        assert [d[0] for d in differ] == sorted(again), (name, differ[:5])
    if 96 <= snap <= 160:  # (shorter: no DDP header captured; longer: most segments whole)
        assert "cut-fpdu-mpa-only" in causes


@requires_tshark
@pytest.mark.tshark
def test_the_cut_fpdus_are_the_whole_captures(tmp_path: Path) -> None:
    """The FPDUs of a headers-only capture are those of the capture whole, as far as captured: at the same
    stream positions, with the same MPA lengths, DDP and RDMAP headers; and the stream stays in step (nine
    in ten of the capture's FPDUs are found, the frames after a cut one giving theirs too)."""
    for name in SIW:
        whole = {(p.stream.tuple4, p.stream.seq): p for cp in read(CAPTURES / name) for p in cp.pdus
                 if p.stream is not None}
        cut = [p for cp in read(_snapped(CAPTURES / name, tmp_path / name, 128)) for p in cp.pdus]
        assert len(cut) >= 0.9 * len(whole), name
        for pb in cut:
            assert pb.stream is not None
            pa = whole[(pb.stream.tuple4, pb.stream.seq)]
            assert [la.header for la in pb.layers] == [la.header for la in pa.layers][:len(pb.layers)], name


@pytest.mark.parametrize("snap", [96, 160])
def test_both_paths_say_the_same(snap: int, tmp_path: Path, capsys: Any) -> None:
    fields = [a for f in ("frame.number", "iwarp_mpa.ulpdulength", "iwarp_ddp.msn", "iwarp_ddp.stag",
                          "iwarp_rdma.opcode", "iwarp_mpa.crc", "rdmalab.crc32c.status", "rdmalab.problems")
              for a in ("-e", f)]
    for name in SIW:
        cut = str(_snapped(CAPTURES / name, tmp_path / name, snap))
        for args in ([], ["-V"], ["-T", "json"], ["-T", "fields", *fields], ["-Y", "iwarp_ddp.msn > 2"]):
            assert decode(capsys, "-r", cut, *args) == decode(capsys, "-r", cut, *args, "--no-columnar"), (name, args)
