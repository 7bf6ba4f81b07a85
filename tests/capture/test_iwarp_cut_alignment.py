"""A segment the capture cut breaks tshark's FPDU alignment; ``crosscheck`` names it and nothing else.

tshark adds no segment the capture cut (a snap length below the segment's length on the wire) to a TCP
reassembly.  When the segment before it ends in the first octets of an FPDU, tshark's MPA dissector reads an
MPA length at the cut segment's first octet, inside that FPDU, and from then on takes lengths where no FPDU
begins.  rdmalab keeps the stream in step past the octets not captured; its FPDUs after the cut have good
CRC32c.  The data: ``tests/data/siw_read_gso_cut_by_snaplen.pcapng`` (a real siw capture whose GSO segment
``tcpdump -s 9216`` cut; tests/data/README.md), and copies of it with one more segment cut or one FPDU damaged.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from tshark_cli import tshark

from rdmalab.capture import read, records
from rdmalab.capture.columnar_summary import summary_lines
from rdmalab.capture.crosscheck import crosscheck
from rdmalab.capture.pcapwriter import CaptureWriter

DATA = Path(__file__).resolve().parents[1] / "data" / "siw_read_gso_cut_by_snaplen.pcapng"
CAUSE = "cut-segment-loses-alignment"
CUT = 34  # the frame tcpdump's snap length cut (9216 of 10710 octets)

requires_tshark = pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark (Wireshark) is not installed")
pytestmark = [requires_tshark, pytest.mark.tshark]

_ARGS = ("--disable-protocol", "rpcordma", "--disable-protocol", "smb_direct")


def _copy(dst: Path, cut: dict[int, int] | None = None, flip: tuple[int, int] | None = None) -> Path:
    """The data with frame ``n`` cut to ``cut[n]`` octets (its length on the wire kept) and the octet
    ``flip[1]`` of frame ``flip[0]`` inverted."""
    with CaptureWriter(dst, nano=True) as w:
        for i, r in enumerate(records(DATA), 1):
            d = bytearray(r.data)
            if flip is not None and flip[0] == i:
                d[flip[1]] ^= 0xFF
            wire = r.wire_length or len(d)
            w.write(bytes(d[:(cut or {}).get(i, len(d))]), r.ns or 0, wire_len=wire)
    return dst


def _mpa(path: Path) -> dict[int, list[int]]:
    """tshark's MPA lengths of each frame that has one."""
    out: dict[int, list[int]] = {}
    for line in tshark("-r", str(path), "-T", "fields", "-e", "frame.number", "-e", "iwarp_mpa.ulpdulength",
                       "-E", "occurrence=a", "-E", "aggregator=,", *_ARGS).splitlines():
        num, _, got = line.partition("\t")
        if got:
            out[int(num)] = [int(x) for x in got.split(",")]
    return out


def test_tshark_loses_the_alignment_at_the_cut_segment() -> None:
    """The oracle's behaviour the cause rests on: before the cut tshark decodes the FPDUs rdmalab does; at
    the cut it reads 46752 (an FPDU of 46760 octets in a segment of 10644); after it no MPA at all."""
    ws = _mpa(DATA)
    ours = {cp.frame_number: cp for cp in read(DATA)}
    assert ours[CUT].wire_length == 10710 and len(ours[CUT].packet.data) == 9216
    assert ws[CUT] == [46752]
    assert not [f for f in ws if f > CUT]
    before = {f: ws[f] for f in ws if 20 <= f < CUT}  # (the FPDUs rdmalab decodes, in order: the last one
    mine = {f: [p.layers[0].header.ulpdu_length for p in ours[f].pdus] for f in before}  # begun elsewhere too)
    assert len(before) == 7 and before == mine
    after = [cp for f, cp in ours.items() if f >= CUT and cp.pdus]
    assert len(after) >= 10
    assert all(p.crc_status == "good" for cp in after for p in cp.pdus if not p.problems)


def test_crosscheck_names_the_cut_segment_as_the_cause() -> None:
    report = crosscheck(DATA)
    assert not report.unexplained, report.text()
    assert len(report.explained) > 100
    assert {r.defect.id for r in report.explained if r.defect is not None} == {CAUSE}
    assert min(r.frame for r in report.explained) == CUT
    assert f"known defect {CAUSE}" in report.text()


def test_a_cut_segment_that_completes_an_fpdu_is_named(tmp_path: Path) -> None:
    """Frame 26 holds the last 1072 octets of an FPDU begun in frame 24; cut to 1000 octets, tshark reads an
    MPA length at its first octet (one past the segment's end) and loses the alignment from there."""
    path = _copy(tmp_path / "cut26.pcap", cut={26: 1000})
    ws = _mpa(path)
    assert ws[26] == [6571] and ws.get(28) is None
    report = crosscheck(path)
    assert not report.unexplained, report.text()
    assert {r.defect.id for r in report.explained if r.defect is not None} == {CAUSE}
    assert min(r.frame for r in report.explained) == 26


def test_an_fpdu_damaged_after_the_cut_stays_unexplained(tmp_path: Path) -> None:
    """rdmalab's own verdicts are the cause's evidence: an FPDU whose CRC32c is bad after the cut is not
    filed under it (the frame's differences stay unexplained); the other frames still are.  (The second
    segment after the cut: the first is where rdmalab finds the alignment again, by an FPDU whose CRC is
    good, past the octets the capture lost.)"""
    good = {cp.frame_number: cp for cp in read(DATA)}
    frame = sorted(f for f, cp in good.items() if f > CUT and cp.pdus)[1]
    path = _copy(tmp_path / "damaged.pcap", flip=(frame, 66 + 100))  # inside the first FPDU's payload
    damaged = {cp.frame_number: cp for cp in read(path)}
    assert damaged[frame].pdus[0].crc_status == "bad"
    report = crosscheck(path)
    assert report.unexplained and {r.frame for r in report.unexplained} == {frame}, report.text()
    assert {r.defect.id for r in report.explained if r.defect is not None} == {CAUSE}


def test_nothing_before_the_cut_is_filed_under_it(tmp_path: Path) -> None:
    """A direction is marked at its first cut segment, not before: every difference is on frame 34 or after
    (the frames before agree field by field), also with a second segment cut after it (frame 38, where
    tshark, taking it alone, finds an FPDU at its first octet again)."""
    for path in (DATA, _copy(tmp_path / "two_cuts.pcap", cut={38: 2000})):
        report = crosscheck(path)
        assert not report.unexplained, report.text()
        assert report.results and min(r.frame for r in report.results) == CUT


def test_rdmalab_keeps_the_fpdu_the_segment_before_began() -> None:
    """The cut segment goes on with an FPDU begun in the segment before (its first 376 octets): rdmalab joins
    them (the FPDU's frames are both), decodes the FPDUs captured whole after it and shows the one the capture
    cut as far as it was captured; the summary lines (the columns' path) say the same as the packets."""
    got = {cp.frame_number: cp for cp in read(DATA)}
    pdus = got[CUT].pdus
    assert pdus[0].stream is not None and pdus[0].stream.frames == (32, CUT)
    assert [p.crc_status for p in pdus[:-1]] == ["good"] * 6 and all(p.stream.frames == (CUT,) for p in pdus[1:])
    assert pdus[-1].crc_status is None and [p.kind for p in pdus[-1].problems] == ["truncated"]
    assert "(1214 of the FPDU's 1448)" in str(pdus[-1].problems[0])
    line = next(x for x in "".join(summary_lines(DATA)).splitlines() if x.split()[0] == str(CUT))
    assert line.count("RDMA Read Response") == 7 and "payload=1428 (1198 captured)" in line


@pytest.mark.parametrize("snap", [128, 1500, 5000])
def test_every_segment_cut_keeps_the_fpdus_tshark_finds(snap: int, tmp_path: Path) -> None:
    """The whole connection cut to one snap length (``editcap -s``): GSO segments that go on with an FPDU the
    segment before began are passed over, the octets looked through before a segment that starts like an FPDU
    given up, and every frame in which tshark finds an FPDU has rdmalab's too; every difference is named."""
    path = _copy(tmp_path / f"snap{snap}.pcap", cut=dict.fromkeys(range(1, 61), snap))
    mine = {cp.frame_number for cp in read(path) if cp.pdus}
    theirs = set(_mpa(path))
    assert theirs and theirs - mine <= {26, 34}  # (tshark's lengths read inside an FPDU there: 6571, 46752)
    report = crosscheck(path)
    assert not report.unexplained, report.text()
