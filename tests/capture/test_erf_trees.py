"""``rdmalab decode -V`` of ERF Ethernet records (a DAG card's captures: pcap link type 197, record type 2)
from the per-header templates (``rdmalab.capture.tree_templates.erf_ethernet``): every tree is the
per-packet path's (``decode -V --no-columnar``: ``render.frame_tree`` of the whole record, its ERF header's
lines first), byte for byte, on ERF copies of every capture in captures/ with Ethernet frames (RoCEv2,
RoCEv1, iWARP with and without CRCs and markers, CM, UD, losses, ICMP), on damaged frames (bad ICRCs,
headers, lengths), on records the templates leave to the per-packet decoder (extension headers, records
cut short by the capture or by the card, other ERF types among Ethernet records), in one process and in
worker processes, and blocks of any size.  Against tshark: each frame's ERF header (timestamp, record
and wire lengths), wire length and time, and the SEQ/ACK analysis trees of the TCP segments."""

from __future__ import annotations

import glob
import os
import re
import subprocess
import zlib
from pathlib import Path
from typing import Any

import pytest
from test_erf_columns import _with_extension_header
from test_tcp_info_prefix import seq_ack_trees
from test_tree_templates import _damaged, _edges, fail_tracker_at
from tshark_cli import decode, requires_tshark

from rdmalab.capture import records, tree_templates
from rdmalab.capture.linktypes import (
    ERF,
    ERF_TYPE_COLOR_ETH,
    ERF_TYPE_ETH,
    ERF_TYPE_IPV4,
    LINKTYPE_ERF,
    LINKTYPE_ETHERNET,
    erf_ethernet_record,
    erf_timestamp,
)
from rdmalab.capture.pcapio import record_blocks
from rdmalab.capture.pcapwriter import write_capture
from rdmalab.capture.tree_templates import erf_ethernet, fast_frame, tree_blocks
from rdmalab.wire.frame import encode_rocev2
from rdmalab.wire.ib import BTH

ROOT = Path(__file__).resolve().parents[2]


def _linktype(path: str | Path) -> int:
    return int(next(record_blocks(path)).linktype[0])


#: every capture of captures/ whose frames are Ethernet frames (not the native InfiniBand ones in ERF)
ETHERNET = [p for p in sorted(glob.glob(str(ROOT / "captures" / "*.pcap"))) if _linktype(p) == LINKTYPE_ETHERNET]


def _ns(rec: Any) -> int:
    return rec.ns if rec.ns is not None else round(rec.timestamp * 1e9)


def _erf(path: Path, frames: list[tuple[int, bytes]]) -> Path:
    """Ethernet frames (time in ns, bytes) as ERF Ethernet records (``erf_ethernet_record``)."""
    write_capture(path, [(ns, erf_ethernet_record(ns, f)) for ns, f in frames], linktype=LINKTYPE_ERF, nano=False)
    return path


def erf_copy(tmp_path: Path, src: str | Path) -> Path:
    return _erf(tmp_path / f"erf_{Path(src).name}", [(_ns(r), bytes(r.data)) for r in records(src)])


def _fast(path: Path, **kw: Any) -> str:
    return b"".join(tree_blocks(path, **kw)).decode()


def _same_as_per_packet(path: Path, capsys: Any) -> str:
    """-V from the templates (CLI, and small blocks) is -V --no-columnar, byte for byte; that text."""
    slow = decode(capsys, "-V", "--no-columnar", "-r", str(path))
    assert decode(capsys, "-V", "-r", str(path)) == slow
    assert _fast(path, block_bytes=700) == slow
    return slow


def _per_packet_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The frames tree_templates leaves to the per-packet decoder in this process, counted."""
    calls: list[int] = []
    real = tree_templates.decode_record

    def counted(rec: Any, **kw: Any) -> Any:
        calls.append(rec.frame_number)
        return real(rec, **kw)

    monkeypatch.setattr(tree_templates, "decode_record", counted)
    return calls


@pytest.mark.parametrize("src", ETHERNET, ids=os.path.basename)
def test_trees_are_the_per_packet_trees(tmp_path: Path, capsys: Any, src: str) -> None:
    text = _same_as_per_packet(erf_copy(tmp_path, src), capsys)
    assert text.count("\nFrame ") + 1 == sum(1 for _ in records(src))
    assert text.startswith("Frame 1: ") and ", ERF, time " in text.split("\n", 1)[0]


@pytest.mark.parametrize("name", ["rxe_write_bw.pcap", "siw_crc_write_bw.pcap", "siw_read_bw.pcap",
                                  "rxe_atomic_fadd.pcap", "rxe_ud_send_bw.pcap"])
def test_the_templates_write_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """The comparison above is not empty: the ERF records of real captures take the templates (a
    RoCEv2 datagram, a TCP segment and its iWARP PDUs), and their trees are the per-packet trees."""
    path = erf_copy(tmp_path, ROOT / "captures" / name)
    n = sum(1 for _ in records(path))
    calls = _per_packet_calls(monkeypatch)
    text = _fast(path)
    assert len(calls) <= 0.1 * n, calls
    monkeypatch.undo()
    fast = 0
    for blk in record_blocks(path):
        for off, cap in zip(blk.offset.tolist(), blk.caplen.tolist(), strict=True):
            got = erf_ethernet(blk.buf, off, cap)
            assert got is not None
            record, o, c, w, t = got
            fast += fast_frame(blk.buf, o, c, 1, w, t, 0, None, -1, record) is not None
    assert fast >= 0.9 * n
    assert text == _fast(path, workers=1, block_bytes=1000)


def _bad_icrcs(tmp_path: Path) -> Path:
    """The frames of RoCEv2 captures, every other RoCEv2 datagram with its ICRC changed."""
    frames = []
    for name in ("rxe_send_bw.pcap", "rxe_atomic_cswap.pcap", "rxe_ud_pingpong.pcap"):
        for i, r in enumerate(records(ROOT / "captures" / name)):
            d = bytearray(r.data)
            if i % 2 and d[12:14] == b"\x08\x00" and d[23] == 17 and len(d) >= 58:
                end = 14 + int.from_bytes(d[16:18], "big")
                d[end - 2] ^= 0x5A
            frames.append((_ns(r), bytes(d)))
    return _erf(tmp_path / "bad_icrc.pcap", frames)


def test_a_bad_icrc(tmp_path: Path, capsys: Any) -> None:
    text = _same_as_per_packet(_bad_icrcs(tmp_path), capsys)
    assert text.count("(bad, should be ") > 20 and text.count("(good)") > 20


def test_damaged_and_edge_frames(tmp_path: Path, capsys: Any) -> None:
    """test_tree_templates' damaged frames (random octets of real headers changed, ICRCs made good
    again, frames cut short) and the frames at the edges of the templates' shapes (VLAN, IPv6, IPv4
    options, fragments, padding, MADs, CM, every opcode), as ERF records."""
    for made in (_damaged(tmp_path), _edges(tmp_path)[0]):
        path = _erf(tmp_path / f"erf_{made.name}", [(_ns(r), bytes(r.data)) for r in records(made)])
        text = _same_as_per_packet(path, capsys)
        assert text.count("\nFrame ") + 1 == sum(1 for _ in records(made))
        if made.name.startswith("damaged"):
            assert "Problem:" in text and "(bad, should be" in text


def _odd_records(tmp_path: Path) -> Path:
    """Ethernet records of real RoCEv2 and iWARP captures among records the templates do not take
    (extension headers; cut short by the capture; a frame cut short by the card, rlen less than wlen;
    an rlen other than the record's length; a wlen of 0; a record shorter than its headers) and records
    of other ERF types (native InfiniBand, IPv4, an unknown type, a coloured Ethernet record, an
    Ethernet record keeping its FCS): the per-packet decoder writes those, in their places."""
    ib = [(r.ns, bytes(r.data)) for r in records(ROOT / "captures" / "synthetic_native_ib_erf.pcap")]
    eth = [(_ns(r), bytes(r.data)) for name in ("rxe_write_bw_loss.pcap", "siw_crc_send_bw.pcap")
           for r in records(ROOT / "captures" / name)]
    out: list[tuple[int, bytes]] = []
    for i, (ns, frame) in enumerate(eth):
        rec = erf_ethernet_record(ns, frame)
        erf = ERF.decode(rec, 0)
        kind = i % 13
        if kind == 1:
            rec = _with_extension_header(rec)
        elif kind == 2:
            rec = rec[:max(16, len(rec) // 2)]  # the capture's snap length: rlen past the captured octets
        elif kind == 3:  # the card's snap length: the frame cut at 40 octets, rlen the record's, wlen the frame's
            rec = erf.replace(rlen=16 + 2 + 40).encode() + rec[16:18 + 40]
        elif kind == 4:
            rec = erf.replace(rlen=erf.rlen - 8).encode() + rec[16:]  # rlen less than the record
        elif kind == 5:
            rec = erf.replace(wlen=0).encode() + rec[16:]
        elif kind == 6:
            rec = rec[:12]
        elif kind == 7:
            rec = erf.replace(type=ERF_TYPE_COLOR_ETH).encode() + rec[16:]
        elif kind == 8:  # an IPv4 record: the datagram alone
            body = frame[14:]
            body += bytes(-(16 + len(body)) % 8)
            rec = ERF(ts=erf.ts, type=ERF_TYPE_IPV4, flags=4, rlen=16 + len(body), wlen=len(frame) - 14).encode() + body
        elif kind == 9:
            rec = erf.replace(type=1).encode() + rec[16:]  # (HDLC: not decoded)
        elif kind == 10:  # the FCS kept (wlen counts it), as a DAG card keeps it
            rec = erf_ethernet_record(ns, frame + zlib.crc32(frame).to_bytes(4, "little"))
        elif kind == 11 and ib:
            out.append(ib[i % len(ib)])
        elif kind == 12:
            rec = erf.replace(lctr=7, flags=0x0D).encode() + rec[16:18] + bytes([0x21]) + rec[19:]
        out.append((ns, rec))
    assert {ERF.decode(r, 0).type for _ns, r in out if len(r) >= 16} >= {ERF_TYPE_ETH, ERF_TYPE_COLOR_ETH,
                                                                          ERF_TYPE_IPV4, 21, 1}
    path = tmp_path / "odd_erf.pcap"
    write_capture(path, out, linktype=LINKTYPE_ERF, nano=False)
    return path


def test_records_the_templates_do_not_take(tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _odd_records(tmp_path)
    n = sum(1 for _ in records(path))
    calls = _per_packet_calls(monkeypatch)
    text = _fast(path)
    monkeypatch.undo()
    assert 0.3 * n < len(calls) < 0.85 * n  # the odd ones per packet, the others from the templates
    assert text == _same_as_per_packet(path, capsys)
    for seen in ("ERF extension  [", "Problem: truncated ERF at byte 0", "(not decoded)", "Ethernet FCS: ", "        type: 10  {erf.types.type}", "LRH  ["):
        assert seen in text, seen
    assert _fast(path, workers=2, parallel_min_bytes=0, block_bytes=900) == text


def test_timestamps_of_every_fraction(tmp_path: Path, capsys: Any) -> None:
    """ERF times whose fraction rounds to the nanosecond either way, carries into the next second, or
    is not a whole microsecond: the frame lines' times are the per-packet decoder's."""
    frame = encode_rocev2(BTH(opcode=0x04, destqp=0x12, psn=5), [], b"x" * 40)
    base = erf_timestamp(1_700_000_000 * 10**9)
    recs = []
    for frac in (0, 1, 0x7FF07040, 0x00400000, 0xFFFFFFFF, 0x80000000, 0x12345678, 0xFFFFFFFE, 0x0000_0005):
        rec = erf_ethernet_record(0, frame)
        recs.append((0, ERF.decode(rec, 0).replace(ts=base | frac).encode() + rec[16:]))
    path = tmp_path / "times.pcap"
    write_capture(path, recs, linktype=LINKTYPE_ERF, nano=False)
    text = _same_as_per_packet(path, capsys)
    assert "time 1700000001.000000" in text  # (0xFFFFFFFF: the next second)


def _appended(tmp_path: Path) -> Path:
    names = ["siw_crc_send_bw.pcap", "rxe_read_bw.pcap", "siw_write_bw.pcap", "rxe_imm.pcap", "siw_read_bw.pcap",
             "synthetic_iwarp_mpa_markers.pcap", "rxe_write_bw_loss.pcap"]
    frames = [(_ns(r), bytes(r.data)) for name in names for r in records(ROOT / "captures" / name)]
    return _erf(tmp_path / "appended_erf.pcap", frames)


def test_trees_in_workers_are_the_trees(tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """-V of ERF records in worker processes (every frame but the TCP segments written there, those
    here, in order, with the iWARP reassembly; each record's own time): the same text as one process
    and as the per-packet path, blocks cut anywhere, with a count."""
    used: list[int] = []
    real = tree_templates.blocks_in_workers

    def counted(*a: Any, **kw: Any) -> Any:
        used.append(kw["workers"])
        return real(*a, **kw)

    monkeypatch.setattr(tree_templates, "blocks_in_workers", counted)
    path = _appended(tmp_path)
    one = _fast(path)
    assert not used
    assert one == decode(capsys, "-V", "--no-columnar", "-r", str(path))
    assert "        RDMAP  [" in one and "RDMA READ Response" in one
    for block in (700, 1 << 20):
        assert _fast(path, workers=2, parallel_min_bytes=0, block_bytes=block) == one
    assert _fast(path, workers=2, parallel_min_bytes=0, count=333, block_bytes=700) == _fast(path, count=333)
    assert _fast(path, count=333) == decode(capsys, "-V", "--no-columnar", "-c", "333", "-r", str(path))
    for path in (_bad_icrcs(tmp_path), ROOT / "captures" / "hw_ib_connectx_erf.pcap",
                 ROOT / "captures" / "synthetic_native_ib_erf.pcap"):
        assert _fast(path, workers=2, parallel_min_bytes=0, block_bytes=2000) == _fast(path), path
    assert used and set(used) == {2}


def test_a_tracker_that_fails(tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The iWARP reassembly failing on an ERF record's segment (in one process, and from a worker's
    parts): the record decoded whole again and its tree says so, as the per-packet path's."""
    path = erf_copy(tmp_path, ROOT / "captures" / "siw_write_bw.pcap")
    fail_tracker_at(monkeypatch, 40)
    one = _fast(path)
    assert "    Problem: rdmalab could not fully decode this frame: iWARP tracker: RuntimeError: a test's failure" in one
    assert _fast(path, workers=2, parallel_min_bytes=0) == one
    assert decode(capsys, "-V", "--no-columnar", "-r", str(path)) == one


def _ours_per_frame(text: str) -> dict[int, tuple[str, ...]]:
    """frame -> its wire length, time (6 decimals), and its ERF header's timestamp, rlen and wlen, from -V text."""
    out: dict[int, tuple[str, ...]] = {}
    for tree in text.split("\n\n"):
        m = re.match(r"Frame (\d+): (\d+) bytes on wire, \d+ bytes captured, ERF, time (\S+)\n", tree)
        if m is None:
            continue
        ts, rlen, wlen = (re.search(rf"\n        {f}: (\S+)  {{erf\.{f}}}", tree) for f in ("ts", "rlen", "wlen"))
        assert ts and rlen and wlen
        out[int(m.group(1))] = (m.group(2), m.group(3), ts.group(1), rlen.group(1), wlen.group(1))
    return out


def _tsharks_per_frame(text: str) -> dict[int, tuple[str, ...]]:
    """The same from tshark's -V text (its epoch time cut to 6 decimals: the times here are whole microseconds)."""
    out: dict[int, tuple[str, ...]] = {}
    for tree in re.split(r"\n(?=Frame \d+: )", text):
        m = re.match(r"Frame (\d+): (\d+) bytes on wire", tree)
        if m is None:
            continue
        epoch, ts, rlen, wlen = (re.search(p, tree) for p in (r"\n    Epoch Time: (\d+\.\d{6})000 seconds",
                                                              r"\n    Timestamp: (0x[0-9a-f]{16})",
                                                              r"\n    Record length: (\d+)", r"\n    Wire length: (\d+)"))
        assert epoch and ts and rlen and wlen, tree[:400]
        out[int(m.group(1))] = (m.group(2), epoch.group(1), ts.group(1), rlen.group(1), wlen.group(1))
    return out


@requires_tshark
@pytest.mark.tshark
@pytest.mark.parametrize("name", ["rxe_write_bw_loss.pcap", "siw_crc_write_bw.pcap", "siw_write_bw_midstream.pcap",
                                  "rxe_send_bw.pcap", "siw_read_bw.pcap", "lo_icmp_unreachable.pcap"])
def test_tshark_shows_them_so(tmp_path: Path, capsys: Any, name: str) -> None:
    """Each frame's ERF header (timestamp, record length, wire length), wire length and time, and the
    SEQ/ACK analysis trees of the TCP segments, as tshark -V shows them."""
    path = erf_copy(tmp_path, ROOT / "captures" / name)
    ours = decode(capsys, "-V", "-r", str(path))
    theirs = subprocess.run(["tshark", "-n", "-r", str(path), "-V"], capture_output=True, text=True, check=True).stdout
    want, got = _tsharks_per_frame(theirs), _ours_per_frame(ours)
    assert got == want and len(got) == sum(1 for _ in records(path))
    want_trees, got_trees = seq_ack_trees(theirs, 4), seq_ack_trees(ours, 8)
    assert got_trees == want_trees
    if name.startswith(("rxe_write_bw_loss", "siw")):
        assert want_trees
