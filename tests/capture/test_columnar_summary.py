"""``rdmalab decode -r FILE``: the columnar summary lines are the per-packet path's, byte for byte.

The reference is the same command with ``--no-columnar`` (one CapturedPacket a frame, as before
the fast path).  Both run on every capture in captures/, with filters and counts, and on hostile
files: captures appended to themselves (time running backwards at the seam), every frame
duplicated, frames cut by a snap length, a file that ends mid-record, bad ICRCs and damaged
headers mixed in.
"""

from __future__ import annotations

import glob
import os
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rdmalab.capture import columnar_summary, records
from rdmalab.capture.columnar import decode_block, record_blocks
from rdmalab.capture.columnar_summary import _fast_rows, _template_text
from rdmalab.capture.columnar_tcp import fpdu_chains
from rdmalab.cli import main
from rdmalab.wire import iwarp as iwarp_wire

ROOT = Path(__file__).resolve().parents[2]
CAPTURES = sorted(glob.glob(str(ROOT / "captures" / "*.pcap")))


def _both(args: list[str], capsys: Any) -> tuple[str, str, int, int]:
    rc_fast = main(["decode", *args])
    fast = capsys.readouterr().out
    rc_ref = main(["decode", "--no-columnar", *args])
    ref = capsys.readouterr().out
    return fast, ref, rc_fast, rc_ref


@pytest.mark.parametrize("path", CAPTURES, ids=os.path.basename)
def test_every_capture(path: str, capsys: Any) -> None:
    fast, ref, rc1, rc2 = _both(["-r", path], capsys)
    assert rc1 == rc2 == 0
    assert fast == ref
    assert fast.count("\n") == sum(1 for _ in records(path))


def test_the_fast_path_is_taken() -> None:
    """Most frames of a real rxe capture are formatted from columns, from group templates (else
    the test above proves little)."""
    blk = next(record_blocks(ROOT / "captures" / "rxe_write_bw_loss.pcap"))
    cols = decode_block(blk)
    fast = _fast_rows(blk, cols)
    assert fast.mean() > 0.8
    assert _template_text(blk, cols, np.flatnonzero(fast), 0.0) is not None


@pytest.mark.parametrize("how", ["templates", "columns"])
@pytest.mark.parametrize("path", [p for p in CAPTURES if "siw" not in p and "iwarp" not in p], ids=os.path.basename)
def test_both_fast_formats_on_every_capture(path: str, how: str, capsys: Any, monkeypatch: Any) -> None:
    """Each way of formatting the fast rows alone (templates for every block however many groups
    it has, or column by column for every block) gives the per-packet path's lines, IPv6 and
    every opcode included."""
    import rdmalab.capture.columnar_summary as cs

    monkeypatch.setattr(cs, "_GROUPS_PER_ROW", 1)
    if how == "columns":
        monkeypatch.setattr(cs, "_USE_TEMPLATES", False)
    else:
        calls = []
        real = cs._template_text
        monkeypatch.setattr(cs, "_template_text", lambda *a: calls.append(r := real(*a)) or r)
    fast, ref, rc1, rc2 = _both(["-r", path], capsys)
    assert rc1 == rc2 == 0
    assert fast == ref
    if how == "templates":
        assert None not in calls


def test_groups_check_their_hash(monkeypatch: Any) -> None:
    """Rows are grouped by a 64-bit hash of their fields; two groups sharing a hash are caught
    (every field compared) and the block is formatted column by column instead."""
    import rdmalab.capture.columnar_summary as cs

    keys = [np.array([1, 2, 1, 3], dtype=np.uint64), np.array([5, 5, 5, 6], dtype=np.uint64)]
    rep, inv = cs._groups(keys, 10)
    assert len(rep) == 3 and inv[0] == inv[2] and len({int(inv[0]), int(inv[1]), int(inv[3])}) == 3
    assert cs._groups(keys, 2) is None  # more groups than allowed
    monkeypatch.setattr(cs, "_MIX", np.uint64(0))  # every row hashes to 0
    assert cs._groups(keys, 10) is None
    same = [np.array([7, 7, 7], dtype=np.uint64)]
    rep, inv = cs._groups(same, 10)
    assert len(rep) == 1 and (inv == 0).all()


def test_icrc_check_leaves_the_block_as_read() -> None:
    """The ICRC check masks the variant fields of a block read into a bytearray in place, then
    puts them back: the block's bytes after decoding are the file's."""
    for name in ("rxe_write_bw_loss.pcap", "synthetic_all_opcodes_rocev2.pcap", "synthetic_all_opcodes_rocev1.pcap"):
        for blk in record_blocks(ROOT / "captures" / name):
            assert isinstance(blk.buf, bytearray)
            before = bytes(blk.buf)
            cols = decode_block(blk, verify_icrc=True)
            assert (cols.data["rdmalab.icrc.ok"] != 0).any()
            assert bytes(blk.buf) == before


@pytest.mark.parametrize(("name", "flt", "count"), [
    ("rxe_write_bw_loss.pcap", "infiniband.bth.opcode == 17", None),
    ("rxe_write_bw_loss.pcap", "infiniband.aeth && ip.src == 10.0.0.0/8", 50),
    ("rxe_read_bw.pcap", "frame.number > 10 && !infiniband.reth", None),
    ("siw_write_bw.pcap", "tcp.srcport != 0", 30),
    ("rxe_write_bw_cm.pcap", "udp", None),
    ("synthetic_all_opcodes_rocev2.pcap", "infiniband.bth.opcode in {0..20}", 100),
])
def test_filters_and_counts(name: str, flt: str, count: int | None, capsys: Any) -> None:
    args = ["-r", str(ROOT / "captures" / name), "-Y", flt] + (["-c", str(count)] if count else [])
    fast, ref, rc1, rc2 = _both(args, capsys)
    assert rc1 == rc2 == 0
    assert fast == ref and fast


def _pcap_records(path: Path) -> tuple[bytes, list[tuple[bytes, bytes]]]:
    data = path.read_bytes()
    out, pos = [], 24
    while pos < len(data):
        cap = struct.unpack_from("<I", data, pos + 8)[0]
        out.append((data[pos:pos + 16], data[pos + 16:pos + 16 + cap]))
        pos += 16 + cap
    return data[:24], out


def _write(path: Path, head: bytes, recs: list[tuple[bytes, bytes]]) -> Path:
    path.write_bytes(head + b"".join(h + d for h, d in recs))
    return path


def test_hostile_captures(tmp_path: Path, capsys: Any) -> None:
    head, recs = _pcap_records(ROOT / "captures" / "rxe_write_bw_loss.pcap")
    _h2, other = _pcap_records(ROOT / "captures" / "rxe_send_bw.pcap")
    rng = np.random.default_rng(19)
    cases: dict[str, list[tuple[bytes, bytes]]] = {
        "appended": recs + other + recs,  # time runs backwards at each seam
        "duplicated": [r for r in recs for _ in (0, 1)],
    }
    snap = []  # cut by a snap length: caplen shorter than the wire length
    for h, d in recs:
        cut = d[:int(rng.integers(20, max(21, len(d))))]
        snap.append((h[:8] + struct.pack("<II", len(cut), len(d)), cut))
    cases["snaplen"] = snap
    damaged = []  # flipped bytes in headers and payloads: bad ICRCs, odd lengths, unknown opcodes
    for h, d in recs:
        b = bytearray(d)
        for at in rng.integers(0, len(b), size=2).tolist():
            b[at] ^= int(rng.integers(1, 256))
        damaged.append((h, bytes(b)))
    cases["damaged"] = damaged
    # a QP number that changes with every frame (10,000 connections): more groups than templates
    # are made for, formatted column by column
    many = []
    for h, d in recs * 4:
        b = bytearray(d)
        if len(b) > 54 and b[23] == 17:
            b[47:50] = int(rng.integers(0, 1 << 24)).to_bytes(3, "big")
        many.append((h, bytes(b)))
    cases["many_qps"] = many
    for name, rs in cases.items():
        p = _write(tmp_path / f"{name}.pcap", head, rs)
        fast, ref, rc1, rc2 = _both(["-r", str(p)], capsys)
        assert rc1 == rc2 == 0, name
        assert fast == ref, name
        assert fast.count("\n") == len(rs), name


def test_a_damaged_syn_still_scales_its_windows(tmp_path: Path, capsys: Any) -> None:
    """A SYN-ACK whose data offset runs past the segment (its Window Scale option still whole in
    it) is reported as a damaged frame, and its shift still scales its direction's windows, as
    on the per-packet path and in tshark (frame 5 shows Win=65152, 509 << 7), in one process and
    in workers."""
    from rdmalab.capture.columnar_summary import summary_bytes

    head, recs = _pcap_records(ROOT / "captures" / "rxe_read_bw.pcap")
    h, d = recs[1]
    assert d[14 + 20 + 13] == 0x12 and d[14 + 20 + 12] == 0xA0  # the SYN-ACK, 40 octets of TCP header
    recs[1] = (h, d[:46] + bytes([0xF0]) + d[47:])  # data offset 15: 60 octets, past the frame's end
    p = _write(tmp_path / "syn_ack_offset.pcap", head, recs)
    fast, ref, rc1, rc2 = _both(["-r", str(p)], capsys)
    assert rc1 == rc2 == 0
    assert fast == ref
    lines = fast.splitlines()
    assert "data_offset" in lines[1] and "Win=65152" in lines[4], lines[:5]
    many = b"".join(summary_bytes(p, block_bytes=256, workers=2, parallel_min_bytes=0))
    assert many.decode() == fast


def test_ends_mid_record(tmp_path: Path, capsys: Any) -> None:
    data = (ROOT / "captures" / "rxe_write_bw_loss.pcap").read_bytes()
    p = tmp_path / "cut.pcap"
    p.write_bytes(data[:-7])
    outs = []
    for extra in ([], ["--no-columnar"]):
        rc = main(["decode", *extra, "-r", str(p)])
        got = capsys.readouterr()
        outs.append((rc, got.out, got.err))
    assert outs[0] == outs[1]
    assert outs[0][0] != 0 and "truncated mid-record: record 420 at byte" in outs[0][2]
    assert outs[0][1].count("\n") == sum(1 for _ in records(ROOT / "captures" / "rxe_write_bw_loss.pcap")) - 1


def test_strict_stops_at_the_same_frame(tmp_path: Path, capsys: Any) -> None:
    head, recs = _pcap_records(ROOT / "captures" / "rxe_write_bw_loss.pcap")
    h, d = recs[30]
    recs[30] = (h[:8] + struct.pack("<II", 40, 40), d[:40])  # a frame cut inside the BTH
    p = _write(tmp_path / "strict.pcap", head, recs)
    from rdmalab.cli import Fail

    outs = []
    for extra in ([], ["--no-columnar"]):
        try:
            main(["decode", "--strict", *extra, "-r", str(p)])
            err = ""
        except (Fail, SystemExit) as e:
            err = str(e)
        outs.append((capsys.readouterr(), err))
    assert outs[0] == outs[1]
    assert outs[0][0].out.count("\n") == 30


def test_times_as_time_text() -> None:
    """The vectorised time column is :func:`rdmalab.capture.render.time_text`'s, each row to its own
    precision (0-9 decimals, cut: 1.9999999 s to six is 1.999999), negative times (a capture whose clock
    steps back) and large ones included."""
    from rdmalab.capture.columnar_summary import _seconds
    from rdmalab.capture.render import time_text

    rng = np.random.default_rng(19)
    rel = np.concatenate([
        rng.integers(-10**11, 10**11, 20000), np.arange(20000) * 1000, rng.integers(-999, 999, 2000),
        [0, -1, 1, 999_999_999, -999_999_999, 1_999_999_999, 10**18, -(10**18), 2**62],
    ]).astype(np.int64)
    for digits in (np.full(len(rel), 6, dtype=np.int8), np.full(len(rel), 9, dtype=np.int8),
                   rng.choice(np.array([0, 1, 2, 3, 6, 9], dtype=np.int8), len(rel))):
        m = _seconds(rel, digits)
        got = [bytes(row[row != 0]).decode() for row in m]
        assert got == [f"{time_text(x, d):>11}" for x, d in zip(rel.tolist(), digits.tolist(), strict=True)]
    assert time_text(1_999_999_999, 6) == "1.999999" and time_text(-1, 6) == "-0.000000" and time_text(3_500_000_000, 0) == "3"


@pytest.mark.parametrize(("name", "expr", "count"), [
    ("rxe_write_bw_loss.pcap", None, None),
    ("rxe_write_bw_cm.pcap", None, 150),
    ("siw_write_bw.pcap", "tcp || infiniband", None),
    ("rxe_read_bw.pcap", "infiniband.bth.opcode in {12, 13, 14, 15, 16}", None),
])
def test_worker_processes_give_the_same_text(name: str, expr: str | None, count: int | None) -> None:
    """Blocks rendered in worker processes (small blocks, so that there are many) give the text of
    the single-process path."""
    from rdmalab.capture.columnar_summary import summary_lines
    from rdmalab.capture.filter import compile_filter

    path = str(ROOT / "captures" / name)
    flt = compile_filter(expr) if expr else None
    one = "".join(summary_lines(path, count=count, flt=flt, filter_expr=expr, block_bytes=8192))
    many = "".join(summary_lines(path, count=count, flt=flt, filter_expr=expr, block_bytes=8192, workers=2,
                                 parallel_min_bytes=0))
    assert many == one and one


@pytest.mark.parametrize("lenient", [True, False])
def test_worker_processes_on_a_damaged_capture(tmp_path: Path, lenient: bool) -> None:
    """Frames the per-packet decoder must report (a frame cut inside its BTH, a MAD, bad ICRCs)
    rendered in worker processes: the same lines as one process, and with --strict the same error
    after the same lines."""
    from rdmalab.capture.columnar_summary import summary_bytes

    head, recs = _pcap_records(ROOT / "captures" / "rxe_write_bw_loss.pcap")
    _h, cm = _pcap_records(ROOT / "captures" / "rxe_write_bw_cm.pcap")
    recs = recs + cm + recs
    h, d = recs[300]
    recs[300] = (h[:8] + struct.pack("<II", 40, 40), d[:40])  # a frame cut inside the BTH
    p = _write(tmp_path / "damaged.pcap", head, recs)

    def run(workers: int) -> tuple[bytes, str]:
        got: list[bytes] = []
        try:
            for piece in summary_bytes(p, lenient=lenient, block_bytes=8192, workers=workers, parallel_min_bytes=0):
                got.append(piece)
        except Exception as err:  # noqa: BLE001 - compared below
            return b"".join(got), f"{type(err).__name__}: {err}"
        return b"".join(got), ""

    one, many = run(1), run(2)
    assert one == many
    assert (one[1] == "") == lenient
    assert one[0].count(b"\n") == (len(recs) if lenient else 300)


def test_default_workers(monkeypatch: Any, tmp_path: Any) -> None:
    """One worker a core not busy now (the tasks that can run, less this process, from /proc/loadavg;
    without that file, the whole part of the load average), at most four, at least one."""
    from rdmalab.capture import blockpool as cs

    def no_load() -> tuple[float, float, float]:
        raise OSError("no load average here")

    loadavg = tmp_path / "loadavg"
    monkeypatch.setattr(cs, "_LOADAVG", str(loadavg))
    for cores, runnable, want in ((None, 1, 1), (1, 1, 1), (2, 1, 2), (2, 2, 1), (2, 3, 1), (2, 40, 1), (3, 2, 2),
                                  (64, 1, 4), (64, 62, 3), (8, 0, 4)):
        loadavg.write_text(f"7.50 7.00 6.00 {runnable}/345 12345\n")  # a high load average: ignored
        monkeypatch.setattr(cs.os, "cpu_count", lambda c=cores: c)
        assert cs.default_workers() == want, (cores, runnable)
    loadavg.unlink()
    for cores, load, want in ((None, 0.0, 1), (2, 0.0, 2), (2, 0.99, 2), (2, 1.0, 1), (2, 7.5, 1), (3, 1.0, 2),
                              (64, 0.0, 4), (64, 61.0, 3), (8, None, 4)):
        monkeypatch.setattr(cs.os, "cpu_count", lambda c=cores: c)
        monkeypatch.setattr(cs.os, "getloadavg", no_load if load is None else lambda x=load: (x, x, x))
        assert cs.default_workers() == want, (cores, load)
    loadavg.write_text("0.00 0.00 0.00 x/1 1\n")  # not a number where the count should be
    monkeypatch.setattr(cs.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(cs.os, "getloadavg", lambda: (1.2, 1.2, 1.2))
    assert cs.default_workers() == 1


# ---------------------------------------------------------------------------- TCP segments from columns


def _vlan(d: bytes) -> bytes:
    """The frame with an 802.1Q tag (VLAN 5, priority 3) after the MAC addresses."""
    return d[:12] + b"\x81\x00" + (3 << 13 | 5).to_bytes(2, "big") + d[12:]


def _ipv6(d: bytes) -> bytes:
    """An IPv4 frame as IPv6 (the same transport bytes; addresses 2001:db8::A.B.C.D)."""
    if d[12:14] != b"\x08\x00" or len(d) < 34:
        return d
    ihl = (d[14] & 15) * 4
    total = int.from_bytes(d[16:18], "big")
    hdr = (struct.pack(">IHBB", 6 << 28, max(total - ihl, 0), d[23], 64) + b"\x20\x01\x0d\xb8" + b"\0" * 8 + d[26:30]
           + b"\x20\x01\x0d\xb8" + b"\0" * 8 + d[30:34])
    return d[:12] + b"\x86\xdd" + hdr + d[14 + ihl:]


@pytest.mark.parametrize("src", ["siw_write_bw.pcap", "siw_crc_rping.pcap", "rxe_rc_pingpong.pcap"])
def test_tcp_segments(src: str, tmp_path: Path, capsys: Any) -> None:
    """Plain TCP segments (handshakes with window scaling, perftest's socket) and iWARP streams:
    the same text by both paths, appended, duplicated, cut, damaged, VLAN-tagged, over IPv6,
    with --no-iwarp and --strict."""
    head, recs = _pcap_records(ROOT / "captures" / src)
    rng = np.random.default_rng(38)
    cases: dict[str, list[tuple[bytes, bytes]]] = {
        "plain": recs,
        "appended": recs + recs,  # the same streams again, time backwards at the seam
        "duplicated": [r for r in recs for _ in (0, 1)],
    }
    cases["snaplen"] = [(h[:8] + struct.pack("<II", len(d[:c]), len(d)), d[:c]) for (h, d), c in
                        zip(recs, rng.integers(30, 80, size=len(recs)).tolist(), strict=True)]
    damaged = []
    for h, d in recs:
        b = bytearray(d)
        at = int(rng.integers(14, len(b)))  # an IP or TCP header byte, or payload
        b[at] ^= int(rng.integers(1, 256))
        damaged.append((h, bytes(b)))
    cases["damaged"] = damaged
    for name, fn in (("vlan", _vlan), ("ipv6", _ipv6)):
        cases[name] = [(h[:8] + struct.pack("<II", len(fn(d)), int.from_bytes(h[12:16], "little") + len(fn(d))
                                            - len(d)), fn(d)) for h, d in recs]
    for name, rs in cases.items():
        p = _write(tmp_path / f"{name}.pcap", head, rs)
        for extra in ([], ["--no-iwarp"], ["--strict"]):
            rc_fast = rc_ref = 0
            try:
                rc_fast = main(["decode", *extra, "-r", str(p)])
            except SystemExit as e:
                rc_fast = int(e.code or 0)
            fast = capsys.readouterr()
            try:
                rc_ref = main(["decode", "--no-columnar", *extra, "-r", str(p)])
            except SystemExit as e:
                rc_ref = int(e.code or 0)
            ref = capsys.readouterr()
            assert (fast.out, rc_fast) == (ref.out, rc_ref), (name, extra)
            assert fast.err == ref.err, (name, extra)
            if not extra:
                assert fast.out.count("\n") == len(rs), name


def test_tcp_segments_are_formatted_from_columns(monkeypatch: Any, capsys: Any) -> None:
    """No clean TCP frame goes through the per-packet decoder (else the test above proves little),
    not even those that complete iWARP PDUs (their lines are the tracker's PDUs): on a real siw
    capture with iWARP lines and TCP lines."""
    decoded: list[int] = []
    real = columnar_summary.decode_record

    def counting(rec: Any, **kw: Any) -> Any:
        cp = real(rec, **kw)
        if cp.packet.encap == "tcp":
            decoded.append(rec.frame_number)
        return cp

    monkeypatch.setattr(columnar_summary, "decode_record", counting)
    path = ROOT / "captures" / "siw_write_bw.pcap"
    assert main(["decode", "-r", str(path)]) == 0
    out = capsys.readouterr().out
    iwarp = [int(line.split()[0]) for line in out.splitlines() if " iWARP " in line]
    tcp = [int(line.split()[0]) for line in out.splitlines() if " TCP " in line]
    assert iwarp and len(tcp) > 20
    assert decoded == []


@pytest.mark.parametrize("name", ["siw_crc_rping.pcap", "siw_write_bw.pcap", "siw_write_bw_midstream.pcap",
                                  "synthetic_iwarp_mpa_markers.pcap"])
def test_filtered_tcp_segments_are_written_from_columns(name: str, capsys: Any, monkeypatch: Any) -> None:
    """With a filter on fields a segment's own columns hold (no stream's state: not iWARP's, the windows' or
    the conversations'), the clean TCP segments are still written from the columns and fed, every one, to
    the iWARP streams and the window scaling; the filter's mask drops the lines of those it does not keep:
    the per-packet path's lines, in one process and in workers, in small blocks, with -c."""
    import rdmalab.capture.columnar_summary as cs
    from rdmalab.capture.columnar_summary import summary_lines
    from rdmalab.capture.filter import compile_filter

    runs = []
    real = cs._run_text
    monkeypatch.setattr(cs, "_run_text", lambda *a: runs.append(a[2]) or real(*a))
    path = str(ROOT / "captures" / name)
    kept = 0
    for expr in ("tcp.len > 0", "tcp.flags.push == 1 || udp", "tcp.srcport > 1024", "!tcp", "frame.len > 120",
                 "ip.dst == 10.0.0.1 && tcp"):
        whole = ""
        for count in (None, 37):
            fast, ref, rc1, rc2 = _both(["-r", path, "-Y", expr] + (["-c", str(count)] if count else []), capsys)
            assert rc1 == rc2 == 0 and fast == ref, (expr, count)
            kept += fast.count("\n")
            whole = whole or ref
        flt = compile_filter(expr)
        one = "".join(summary_lines(path, flt=flt, filter_expr=expr, block_bytes=4096))
        many = "".join(summary_lines(path, flt=flt, filter_expr=expr, block_bytes=4096, workers=2, parallel_min_bytes=0))
        assert many == one == whole, expr
    assert runs and kept > 20


def test_a_filtered_strict_decode_stops_where_the_per_packet_one_does(tmp_path: Path, capsys: Any) -> None:
    """--strict with a filter on an iWARP capture whose FPDU a segment damages: the lines kept before the
    frame that stops it, and the same error, on both paths."""
    head, recs = _pcap_records(ROOT / "captures" / "siw_crc_rping.pcap")
    for i, (h, d) in enumerate(recs):
        if len(d) > 80 and d[23] == 6 and i > 20:
            recs[i] = (h, d[:70] + bytes([d[70] ^ 0xFF]) + d[71:])  # (a segment's payload changed: its CRC bad)
            break
    p = _write(tmp_path / "strict_iwarp.pcap", head, recs)
    from rdmalab.cli import Fail

    outs = []
    for extra in ([], ["--no-columnar"]):
        try:
            rc = main(["decode", "--strict", *extra, "-Y", "tcp.len > 0", "-r", str(p)])
            err = ""
        except (Fail, SystemExit) as e:
            rc, err = None, str(e)
        outs.append((capsys.readouterr().out, rc, err))
    assert outs[0] == outs[1]


@pytest.mark.parametrize("name", ["siw_crc_rping.pcap", "siw_write_bw.pcap", "siw_write_bw_midstream.pcap",
                                  "synthetic_iwarp_mpa_markers.pcap", "synthetic_iwarp_all_opcodes.pcap"])
def test_filters_on_iwarp_and_window_fields_cut_the_lines_down(name: str, capsys: Any, monkeypatch: Any) -> None:
    """A filter on iWARP's fields or on tcp.window_size needs the streams or the windows followed in order:
    the lines are written as without a filter and cut down to the frames the filter keeps on the columns of
    the process that follows them (summary_bytes' _Shown), not decoded frame by frame; the per-packet path's
    lines, in one process and in workers in small blocks."""
    import rdmalab.capture.columnar_summary as cs
    from rdmalab.capture.columnar_summary import summary_lines
    from rdmalab.capture.filter import compile_filter

    cut = []
    real = cs._Shown.keep
    monkeypatch.setattr(cs._Shown, "keep", lambda self, text: cut.append(1) or real(self, text))
    path = str(ROOT / "captures" / name)
    kept = 0
    for expr in ("iwarp_rdma.opcode == 1", "iwarp_ddp.msn > 2 || tcp.len == 0", "iwarp_mpa.ulpdulength > 20",
                 "tcp.window_size > 500", "rdmalab.crc32c.ok == 1 && tcp.srcport > 1000"):
        fast, ref, rc1, rc2 = _both(["-r", path, "-Y", expr], capsys)
        assert rc1 == rc2 == 0 and fast == ref, expr
        kept += fast.count("\n")
        flt = compile_filter(expr)
        many = "".join(summary_lines(path, flt=flt, filter_expr=expr, block_bytes=4096, workers=2, parallel_min_bytes=0))
        assert many == ref, expr
    assert cut and kept > 20


@pytest.mark.parametrize("name", ["lo_icmp_unreachable.pcap", "rxe_write_bw_loss.pcap", "hw_ib_connectx_erf.pcap"])
def test_a_filter_on_the_icrc_beside_the_streams(name: str, capsys: Any) -> None:
    """The process that follows the streams for a filter checks the ICRCs only when the filter reads their status
    (a CRC-32 of every RoCE packet else): with a window's or a conversation's field beside it, the frames the
    per-packet path keeps, bad ICRCs among them (lo_icmp_unreachable's quoted datagrams)."""
    path = str(ROOT / "captures" / name)
    kept = 0
    for expr in ('rdmalab.icrc.status == "bad" || tcp.window_size > 100000000',
                 'rdmalab.icrc.status == "good" && udp.stream == 0', "rdmalab.icrc.ok == 2 || iwarp_rdma.opcode == 0",
                 "tcp.window_size > 100 || infiniband.bth.opcode == 17"):
        fast, ref, rc1, rc2 = _both(["-r", path, "-Y", expr], capsys)
        assert rc1 == rc2 == 0 and fast == ref, expr
        kept += fast.count("\n")
    assert kept > 0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["write", "read_response", "send", "send_se", "read_request"]),
                          st.integers(0, 2**32 - 1), st.integers(0, 2**64 - 1), st.integers(0, 2**32 - 1),
                          st.integers(0, 70), st.booleans()), min_size=1, max_size=6))
def test_fpdu_words_are_what_summarize_fpdu_says(specs: list[tuple[str, int, int, int, int, bool]]) -> None:
    """fpdu_words, which the summary lines' lane and the trees' workers both write their FPDUs' words with:
    the text rdmalab.wire.iwarp.summarize_fpdu gives the FPDU decode_fpdu makes of the same octets, for each
    kind fpdu_chains takes, with any STag, offset, MSN, MO and Read size, payloads with pad and without."""
    ulpdus = []
    for kind, a, b, c, size, last in specs:
        payload = bytes(range(size))
        if kind == "write":
            ulpdus.append(iwarp_wire.rdma_write(a, b, payload, last=last))
        elif kind == "read_response":
            ulpdus.append(iwarp_wire.read_response(a, b, payload, last=last))
        elif kind == "read_request":
            ulpdus.append(iwarp_wire.read_request(a, b, c, c ^ a, b >> 1, msn=c))
        else:
            ulpdus.append(iwarp_wire.send(payload, se=kind == "send_se", msn=c, mo=a, last=last))
    data = iwarp_wire.encode_fpdus(ulpdus, crc=True)
    ok_crc, _plain, fpdus = fpdu_chains(np.frombuffer(data, dtype=np.uint8), np.array([0]), np.array([len(data)]))
    assert ok_crc.tolist() == [True]
    words = columnar_summary.fpdu_words(np.frombuffer(data, dtype=np.uint8), fpdus)
    got = [bytes(row[row != 0]).decode() for row in words]
    want, at = [], 0
    while at < len(data):
        pkt, n = iwarp_wire.decode_fpdu(data, at, crc=True)
        want.append(iwarp_wire.summarize_fpdu(pkt))
        at += n
    assert got == want
