"""FPDU resynchronisation after holes, keep-alives and late segments, on real siw captures edited here.

Each capture below is a real siw capture (captures/MANIFEST.md) with TCP segments cut out (a
capture that missed bytes), keep-alives put in, a segment moved later (a retransmission the
capture saw after what followed it) or two one-FPDU segments merged into one.  Two oracles:

* the complete capture: every FPDU that starts after a hole, followed in the complete stream, must
  be decoded from the edited one with the same bytes (this runs everywhere);
* tshark (tests marked ``tshark``): in every frame, rdmalab decodes the FPDUs Wireshark decodes.
"""

from __future__ import annotations

import io
import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import dpkt
import pytest

from rdmalab.capture import read
from rdmalab.capture.crosscheck import crosscheck
from rdmalab.capture.defects import explain
from rdmalab.capture.iwarp import IwarpTracker
from rdmalab.cli import build_parser
from rdmalab.wire.iwarp import encode_fpdus, encode_mpa_frame, rdma_write, send
from rdmalab.wire.mpa import MARKER_INTERVAL
from rdmalab.wire.rdmap import DDPTagged, DDPUntagged

CAPTURES = Path(__file__).resolve().parents[2] / "captures"
CRC_WRITE = CAPTURES / "siw_crc_write_bw.pcap"
CRC_SEND = CAPTURES / "siw_crc_send_bw.pcap"
PLAIN_WRITE = CAPTURES / "siw_write_bw.pcap"
needs_captures = pytest.mark.skipif(not CRC_WRITE.exists(), reason=f"siw captures not found in {CAPTURES}")
requires_tshark = pytest.mark.skipif(shutil.which("tshark") is None,
                                     reason="tshark (Wireshark) is not installed; CI installs it")

Frames = list[tuple[float, bytes]]


# ---------------------------------------------------------------- editing real captures


def load(path: Path) -> Frames:
    with open(path, "rb") as fh:
        return [(ts, bytes(buf)) for ts, buf in dpkt.pcap.Reader(fh)]


def save(frames: Frames, path: Path) -> Path:
    with open(path, "wb") as fh:
        w = dpkt.pcap.Writer(fh)
        for ts, buf in frames:
            w.writepkt(buf, ts)
    return path


def tcp_of(buf: bytes) -> dpkt.tcp.TCP:
    return dpkt.ethernet.Ethernet(buf).data.data


def with_tcp(buf: bytes, edit: Callable[[dpkt.tcp.TCP], None]) -> bytes:
    """The frame with its TCP segment edited (lengths and checksums recomputed)."""
    eth = dpkt.ethernet.Ethernet(buf)
    ip = eth.data
    tcp = ip.data
    edit(tcp)
    tcp.sum = 0
    ip.sum = 0
    ip.data = tcp
    ip.len = len(ip)
    return bytes(eth)


def keepalive(template: bytes, seq: int, octets: int) -> bytes:
    """A keep-alive of the template's flow: ``octets`` (0 or 1, a garbage 0xAA) at ``seq``."""
    def edit(tcp: dpkt.tcp.TCP) -> None:
        tcp.seq = seq % (1 << 32)
        tcp.data = b"\xaa" * octets
        tcp.flags = dpkt.tcp.TH_ACK
    return with_tcp(template, edit)


def data_segments(frames: Frames, sport: int) -> list[int]:
    """0-based indexes of the frames carrying TCP payload from ``sport``."""
    out = []
    for i, (_, buf) in enumerate(frames):
        eth = dpkt.ethernet.Ethernet(buf)
        tcp = getattr(eth.data, "data", None)
        if isinstance(tcp, dpkt.tcp.TCP) and tcp.sport == sport and tcp.data:
            out.append(i)
    return out


def is_fpdu(p: object) -> bool:
    return DDPTagged in p or DDPUntagged in p  # type: ignore[operator]


def fpdus_by_seq(path: Path) -> dict[tuple[object, int], bytes]:
    """(flow, TCP seq) -> FPDU bytes of every FPDU rdmalab decodes in ``path``."""
    return {(p.stream.tuple4, p.stream.seq): bytes(p.data) for cp in read(path) for p in cp.pdus if is_fpdu(p)}


def flow_port(path: Path, port: int) -> Callable[[tuple[object, int]], bool]:
    return lambda key: key[0][1] == port  # type: ignore[index]


# ---------------------------------------------------------------- the edits

DATA_PORT = 38470  # siw_crc_write_bw.pcap's data connection (initiator side sends the RDMA Writes)


def gap_and_keepalive(tmp: Path, *, octets: int = 1, source: Path = CRC_WRITE, port: int = DATA_PORT,
                      lose: int = 5, where: str = "before") -> tuple[Path, int, int]:
    """``source`` with the ``lose``-th data segment from ``port`` cut out and a keep-alive in its
    place: at the hole's first seq - 1 (``where="before"``: the sender idle, then the capture
    misses a segment) or at its end - 1 (``"after"``: the capture missed the data before the
    keep-alive).  Returns the file, the hole's first and past-the-end seqs."""
    frames = load(source)
    segs = data_segments(frames, port)
    k = segs[lose]
    lost = tcp_of(frames[k][1])
    start, end = lost.seq, lost.seq + len(lost.data)
    ka = keepalive(frames[k][1], (start if where == "before" else end) - 1, octets)
    edited = frames[:k] + [(frames[k][0], ka)] + frames[k + 1 :]
    return save(edited, tmp / f"gap_{source.stem}_{octets}_{where}.pcap"), start, end


def after_hole(full: dict[tuple[object, int], bytes], port: int, end: int) -> dict[tuple[object, int], bytes]:
    """The FPDUs of the complete stream from ``port`` that start at or after ``end``."""
    return {k: v for k, v in full.items() if k[0][1] == port and (k[1] - end) % (1 << 32) < 1 << 31}  # type: ignore[index]


@needs_captures
@pytest.mark.parametrize("where", ["before", "after"])
@pytest.mark.parametrize("octets", [0, 1])
def test_every_fpdu_after_a_hole_and_keepalive_is_decoded_crc(tmp_path: Path, octets: int, where: str) -> None:
    path, _start, end = gap_and_keepalive(tmp_path, octets=octets, where=where)
    full = fpdus_by_seq(CRC_WRITE)
    got = fpdus_by_seq(path)
    want = after_hole(full, DATA_PORT, end)
    assert len(want) >= 10
    assert {k: got.get(k) for k in want} == want
    # nothing invented: every FPDU decoded is one of the complete stream's
    assert all(full.get(k) == v for k, v in got.items())
    pdus = [p for cp in read(path) for p in cp.pdus if is_fpdu(p) and p.stream.tuple4[1] == DATA_PORT]
    assert all(p.crc_status == "good" for p in pdus)
    assert any(p.stream.resync for p in pdus) and not pdus[0].stream.resync


@needs_captures
def test_every_fpdu_after_a_hole_is_decoded_without_crc(tmp_path: Path) -> None:
    """siw without CRC: starts are proven by header sanity and a zero CRC field."""
    frames = load(PLAIN_WRITE)
    port = next(tcp_of(frames[i][1]).sport for i in range(len(frames))
                if tcp_of(frames[i][1]).data[:3] == b"MPA" and b"Req" in tcp_of(frames[i][1]).data[:16]
                and len(data_segments(frames, tcp_of(frames[i][1]).sport)) > 10)
    path, _start, end = gap_and_keepalive(tmp_path, source=PLAIN_WRITE, port=port, lose=4)
    full = fpdus_by_seq(PLAIN_WRITE)
    got = fpdus_by_seq(path)
    want = after_hole(full, port, end)
    assert len(want) >= 8
    assert {k: got.get(k) for k in want} == want
    assert all(full.get(k) == v for k, v in got.items())


@needs_captures
def test_late_segment_fills_the_hole_from_the_park(tmp_path: Path) -> None:
    """The lost segment arrives after the segments that follow it (a retransmission seen late):
    every FPDU is decoded, those it completes in the frame it arrives in."""
    frames = load(CRC_WRITE)
    segs = data_segments(frames, DATA_PORT)
    k, later = segs[5], segs[8]
    moved = frames[:k] + frames[k + 1 : later + 1] + [frames[k]] + frames[later + 1 :]
    path = save(moved, tmp_path / "late.pcap")
    assert fpdus_by_seq(path) == fpdus_by_seq(CRC_WRITE)
    frame_of = {(p.stream.seq): cp.frame_number for cp in read(path) for p in cp.pdus if is_fpdu(p)}
    late_seq = tcp_of(frames[k][1]).seq
    assert frame_of[late_seq] == later + 1  # 1-based: the frame the late segment now is


@needs_captures
def test_keepalive_in_step_changes_nothing(tmp_path: Path) -> None:
    """A 1-octet keep-alive with a garbage octet at next - 1 between two data segments."""
    frames = load(CRC_WRITE)
    segs = data_segments(frames, DATA_PORT)
    k = segs[6]
    nxt = tcp_of(frames[k][1]).seq
    edited = frames[:k] + [(frames[k][0], keepalive(frames[k][1], nxt - 1, 1))] + frames[k:]
    path = save(edited, tmp_path / "ka.pcap")
    assert fpdus_by_seq(path) == fpdus_by_seq(CRC_WRITE)
    assert not any(p.stream.resync for cp in read(path) for p in cp.pdus)


def test_markers_point_past_a_hole_in_unaligned_segments() -> None:
    """Markers on, segments not aligned with FPDUs, one segment lost: the first marker after the
    hole leads back to an FPDU start, and every FPDU that starts after the hole is decoded."""
    a, b = ("10.0.0.1", 40000), ("10.0.0.2", 33333)
    req = encode_mpa_frame(markers=False, crc=True)
    rep = encode_mpa_frame(reply=True, markers=True, crc=True)  # the responder wants markers
    ulpdus = [rdma_write(7, i * 4096, bytes([i]) * (300 + 97 * (i % 5))) for i in range(40)]
    fpdus = encode_fpdus(ulpdus, markers=True)
    starts, pos = [], 0
    for _ in ulpdus:  # each FPDU's offset in the marked stream, found by re-encoding its prefix
        starts.append(pos)
        pos = len(encode_fpdus(ulpdus[: len(starts)], markers=True))
    assert pos == len(fpdus)
    isn_a, isn_b = 1000, 5000
    stream = req + fpdus
    cut = 1000  # segments of 1000 octets: FPDUs are not aligned with them
    segs = [(isn_b + 1, rep, b, a)]
    for off in range(0, len(stream), cut):
        segs.append((isn_a + 1 + off, stream[off : off + cut], a, b))
    lost = 5
    hole_end = (lost - 1 + 1) * cut - len(req)  # stream offset (after the MPA Request) where the hole ends
    del segs[lost]
    tr = IwarpTracker()
    out = []
    for n, (seq, data, src, dst) in enumerate(segs, start=1):
        out.extend(tr.process_segment(n, src[0], src[1], dst[0], dst[1], seq, 0x18, data))
    got = {p.stream.seq - (isn_a + 1 + len(req)): p for p in out if is_fpdu(p) and p.stream.tuple4[1] == a[1]}
    want = [s for s in starts if s >= hole_end]
    assert hole_end % MARKER_INTERVAL and len(want) > 10
    assert all(s in got and got[s].crc_status == "good" and got[s].markers is not None for s in want)
    lost_starts = [s for s in starts if hole_end - cut <= s < hole_end]
    assert lost_starts and not any(s in got for s in lost_starts)  # their headers are in the hole
    assert set(got) <= set(starts)  # nothing invented


def test_unaligned_stream_without_markers_waits_then_hunts() -> None:
    """No markers, no alignment, no CRC: no start can be proven, so the hole is held until
    ``max_pending_bytes`` and the stream is then hunted (the old rule 6)."""
    a, b = ("10.0.0.1", 40000), ("10.0.0.2", 33333)
    req = encode_mpa_frame(crc=False)
    rep = encode_mpa_frame(reply=True, crc=False)
    stream = req + encode_fpdus([send(bytes([i]) * 200, msn=i + 1) for i in range(60)], crc=False)
    segs = [(5001, rep, b, a)] + [(1001 + off, stream[off : off + 700], a, b) for off in range(0, len(stream), 700)]
    del segs[4]
    tr = IwarpTracker(max_pending_bytes=4000)
    out = []
    first_resync = None
    for n, (seq, data, src, dst) in enumerate(segs, start=1):
        got = tr.process_segment(n, src[0], src[1], dst[0], dst[1], seq, 0x18, data)
        if first_resync is None and any(p.stream.resync for p in got):
            first_resync = n
        out.extend(got)
    sends = [p for p in out if is_fpdu(p) and p.stream.tuple4[1] == a[1]]
    assert 40 <= len(sends) < 60 and sends[-1].payload == bytes([59]) * 200
    assert first_resync is not None and first_resync >= 5 + 4000 // 700  # held until the bound, then hunted


# ---------------------------------------------------------------- several FPDUs in one segment


def merged(tmp: Path) -> tuple[Path, int]:
    """siw_crc_send_bw with two consecutive one-FPDU Send segments of the control connection
    merged into one; returns the file and the merged frame's number."""
    frames = load(CRC_SEND)
    port = tcp_of(frames[0][1]).sport
    segs = data_segments(frames, port)
    for i, j in zip(segs, segs[1:], strict=False):
        ti, tj = tcp_of(frames[i][1]), tcp_of(frames[j][1])
        if ti.seq + len(ti.data) == tj.seq and not ti.data.startswith(b"MPA") and len(ti.data) == len(tj.data) == 80:
            both = bytes(ti.data) + bytes(tj.data)

            def edit(tcp: dpkt.tcp.TCP, both: bytes = both) -> None:
                tcp.data = both
            out = frames[:i] + [(frames[i][0], with_tcp(frames[i][1], edit))] + frames[i + 1 : j] + frames[j + 1 :]
            return save(out, tmp / "merged.pcap"), i + 1
    raise AssertionError("no two consecutive Send segments found")


def cli(*argv: str) -> str:
    out = io.StringIO()
    args = build_parser().parse_args(["decode", *argv])
    assert args.func(args, out) == 0
    return out.getvalue()


@needs_captures
def test_two_fpdus_in_one_segment_all_shown(tmp_path: Path) -> None:
    path, n = merged(tmp_path)
    cp = next(c for c in read(path) if c.frame_number == n)
    assert len(cp.pdus) == 2 and all(p.crc_status == "good" for p in cp.pdus)
    line = next(x for x in cli("-r", str(path)).splitlines() if x.split()[0] == str(n))
    assert line.count("Send QN=0") == 2 and "; " in line, line
    assert line == next(x for x in cli("-r", str(path), "--no-columnar").splitlines() if x.split()[0] == str(n))
    tree = cli("-r", str(path), "-V", "-Y", f"frame.number == {n}")
    assert "PDU 1 of 2" in tree and "PDU 2 of 2" in tree
    obj = json.loads(cli("-r", str(path), "-T", "json", "-Y", f"frame.number == {n}"))[0]
    layers = obj["_source"]["layers"]
    assert isinstance(layers["iwarp_mpa"], list) and len(layers["iwarp_mpa"]) == 2
    assert isinstance(layers["iwarp_ddp_rdmap"], list) and len(layers["iwarp_ddp_rdmap"]) == 2
    msns = [x["iwarp_ddp.msn"] for x in layers["iwarp_ddp_rdmap"]]
    assert msns[1] == str(int(msns[0]) + 1)


# ---------------------------------------------------------------- tshark as the oracle


def tshark_fpdus(path: Path) -> dict[int, list[tuple[str, str]]]:
    """frame -> [(ULPDU_Length, DDP MSN or tagged offset)] of every FPDU tshark decodes in it."""
    cmd = [shutil.which("tshark") or "tshark", "-n", "--disable-protocol", "rpcordma", "-r", str(path), "-T", "fields",
           "-e", "frame.number", "-e", "iwarp_mpa.ulpdulength", "-e", "iwarp_ddp.msn", "-e", "iwarp_ddp.tagged_offset",
           "-E", "occurrence=a", "-E", "aggregator=|"]
    text = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    out: dict[int, list[tuple[str, str]]] = {}
    for row in text.splitlines():
        num, lens, msn, to = (row.split("\t") + ["", "", ""])[:4]
        if lens:
            ids = (msn or to).split("|")
            out[int(num)] = list(zip(lens.split("|"), ids, strict=False))
    return out


def ours(path: Path) -> dict[int, list[tuple[str, str]]]:
    out: dict[int, list[tuple[str, str]]] = {}
    for cp in read(path):
        got = []
        for p in cp.pdus:
            if not is_fpdu(p):
                continue
            ddp = p.get(DDPUntagged)
            ident = str(ddp.msn) if ddp is not None else f"0x{p[DDPTagged].to:016x}"
            got.append((str(p.data[0] << 8 | p.data[1]), ident))
        if got:
            out[cp.frame_number] = got
    return out


@needs_captures
@requires_tshark
@pytest.mark.tshark
@pytest.mark.parametrize("source,port,lose,where", [(CRC_WRITE, DATA_PORT, 5, "before"),
                                                    (CRC_WRITE, DATA_PORT, 9, "after"),
                                                    (PLAIN_WRITE, None, 4, "before")],
                         ids=["crc-5", "crc-9-after", "plain-4"])
def test_after_a_hole_rdmalab_decodes_what_tshark_decodes(tmp_path: Path, source: Path, port: int | None,
                                                          lose: int, where: str) -> None:
    if port is None:
        frames = load(source)
        port = max({tcp_of(b).sport for _, b in frames if isinstance(dpkt.ethernet.Ethernet(b).data.data, dpkt.tcp.TCP)},
                   key=lambda p: len(data_segments(frames, p)))
    path, _start, _end = gap_and_keepalive(tmp_path, source=source, port=port, lose=lose, where=where)
    theirs, mine = tshark_fpdus(path), ours(path)
    ws_frames = [f for f in theirs if f > 0]
    assert len(ws_frames) > 10
    for f in ws_frames:
        assert mine.get(f) == theirs[f], f"frame {f}: rdmalab {mine.get(f)} tshark {theirs[f]}"
    # and nothing tshark does not show
    extra = {f: v for f, v in mine.items() if f not in theirs}
    assert not extra, extra


@needs_captures
@requires_tshark
@pytest.mark.tshark
def test_two_fpdus_in_one_segment_match_tshark(tmp_path: Path) -> None:
    path, n = merged(tmp_path)
    theirs, mine = tshark_fpdus(path), ours(path)
    assert len(theirs[n]) == 2 and mine[n] == theirs[n]


@needs_captures
@requires_tshark
@pytest.mark.tshark
def test_crosscheck_does_not_blame_wireshark_for_a_miss(tmp_path: Path) -> None:
    """After a hole both decode the same FPDUs: no iWARP difference, explained or not, is left;
    and a PDU rdmalab decodes in a stream whose MPA frames are in the capture is never put down
    to Wireshark's mid-stream limitation."""
    path, _s, _e = gap_and_keepalive(tmp_path)
    report = crosscheck(path)
    iw = [r for r in report.results if r.key.startswith(("iwarp_", "rdmalab.crc32c"))
          and (r.defect is None or r.defect.id == "iwarp-mid-stream")]
    assert not iw, "\n".join(map(str, iw[:10]))


@needs_captures
def test_mid_stream_defect_only_where_the_handshake_is_missing(tmp_path: Path) -> None:
    """'iwarp-mid-stream' explains a PDU Wireshark does not show only when the capture lacks the
    connection's MPA frames; after a hole in a stream whose handshake was captured it does not."""
    path, _s, end = gap_and_keepalive(tmp_path)
    after = [cp for cp in read(path) if cp.pdus and all(p.stream.resync for p in cp.pdus)]
    assert after and all(p.stream.handshake for cp in after for p in cp.pdus)
    assert explain(after[0], {}, "iwarp_mpa.ulpdulength", "only_rdmalab") is None
    mid = next(cp for cp in read(CAPTURES / "siw_write_bw_midstream.pcap") if cp.pdus)
    assert not mid.pdus[0].stream.handshake
    d = explain(mid, {}, "iwarp_mpa.ulpdulength", "only_rdmalab")
    assert d is not None and d.id == "iwarp-mid-stream"


def repeated_with_holes(tmp: Path, source: Path, port: int, frames_out: int, every: int) -> Path:
    """The connection of ``port`` in ``source``: its frames up to the first data segment from
    ``port`` after the MPA frames, then those data segments repeated with advancing sequence
    numbers (one valid MPA stream), every ``every``-th one left out."""
    frames = load(source)
    segs = [i for i in data_segments(frames, port) if not tcp_of(frames[i][1]).data.startswith(b"MPA")]
    head = [f for f in frames[: segs[0]] if isinstance(dpkt.ethernet.Ethernet(f[1]).data.data, dpkt.tcp.TCP)
            and port in (tcp_of(f[1]).sport, tcp_of(f[1]).dport)]
    first = tcp_of(frames[segs[0]][1]).seq
    last = tcp_of(frames[segs[-1]][1])
    span = last.seq + len(last.data) - first
    out: Frames = list(head)
    t, k, rep = frames[segs[0]][0], 0, 0
    while len(out) < frames_out:
        for i in segs:
            k += 1
            if k % every:
                seq = tcp_of(frames[i][1]).seq + rep * span

                def edit(tcp: dpkt.tcp.TCP, seq: int = seq) -> None:
                    tcp.seq = seq % (1 << 32)
                out.append((t, with_tcp(frames[i][1], edit)))
                t += 1e-6
        rep += 1
    return save(out[:frames_out], tmp / f"repeated_{source.stem}_{every}.pcap")


@needs_captures
@requires_tshark
@pytest.mark.tshark
@pytest.mark.parametrize("source", [CRC_WRITE, PLAIN_WRITE], ids=["crc", "plain"])
@pytest.mark.parametrize("every", [3, 7])
def test_many_holes_match_tshark_frame_by_frame(tmp_path: Path, source: Path, every: int) -> None:
    """A long real stream missing one segment in ``every``: in every frame, the same FPDUs as tshark."""
    frames = load(source)
    port = max({tcp_of(b).sport for _, b in frames if isinstance(dpkt.ethernet.Ethernet(b).data.data, dpkt.tcp.TCP)},
               key=lambda p: len(data_segments(frames, p)))
    path = repeated_with_holes(tmp_path, source, port, 1500, every)
    theirs, mine = tshark_fpdus(path), ours(path)
    assert sum(map(len, theirs.values())) > 600
    assert mine == theirs


@needs_captures
def test_columnar_fields_follow_the_same_resynchronisation(tmp_path: Path) -> None:
    """``-T fields`` (columnar: the same tracker fed from record blocks) and the per-packet path
    agree frame by frame on a stream with many holes."""
    path = repeated_with_holes(tmp_path, CRC_WRITE, DATA_PORT, 600, 4)
    argv = ["-r", str(path), "-T", "fields", "-e", "frame.number", "-e", "iwarp_mpa.ulpdulength",
            "-e", "iwarp_ddp.tagged_offset", "-e", "rdmalab.pdus"]
    columnar, objects = cli(*argv), cli(*argv, "--no-columnar")
    assert columnar == objects
    decoded = [row for row in columnar.splitlines() if row.split("\t")[1]]
    assert len(decoded) == sum(len(v) for v in ours(path).values()) > 300


def on_port(src: Path, dst: Path, old: int, new: int) -> Path:
    """``src`` with TCP port ``old`` renamed ``new`` (checksums recomputed)."""
    def edit(tcp: dpkt.tcp.TCP) -> None:
        tcp.sport = new if tcp.sport == old else tcp.sport
        tcp.dport = new if tcp.dport == old else tcp.dport
    frames = [(ts, with_tcp(b, edit) if isinstance(dpkt.ethernet.Ethernet(b).data.data, dpkt.tcp.TCP) else b)
              for ts, b in load(src)]
    return save(frames, dst)


@needs_captures
@requires_tshark
@pytest.mark.tshark
def test_smb_direct_port_5445_is_cross_checked(tmp_path: Path) -> None:
    """On TCP port 5445 (SMB Direct over iWARP) tshark's Artemis dissector would take the stream:
    the cross-check disables it, so Wireshark decodes the FPDUs and no difference is left to blame
    on anything."""
    gap, _s, _e = gap_and_keepalive(tmp_path)
    path = on_port(gap, tmp_path / "p5445.pcap", 18515, 5445)
    plain = subprocess.run(["tshark", "-n", "--disable-protocol", "rpcordma", "-r", str(path), "-Y", "iwarp_mpa"],
                           capture_output=True, text=True, check=True).stdout
    assert plain.strip() == ""  # the Artemis dissector took port 5445
    report = crosscheck(path)
    iw = [r for r in report.results if r.key.startswith(("iwarp_", "rdmalab.crc32c"))
          and (r.defect is None or r.defect.id == "iwarp-mid-stream")]
    assert not iw, "\n".join(map(str, iw[:10]))
    assert report.per_key["iwarp_mpa.ulpdulength"] > 30


@needs_captures
@requires_tshark
@pytest.mark.tshark
@pytest.mark.parametrize("source", [CRC_SEND, CRC_WRITE], ids=["crc-send", "crc-write"])
def test_a_damaged_fpdu_in_step_keeps_the_stream(tmp_path: Path, source: Path) -> None:
    """An FPDU whose RDMAP control octet was damaged (an RDMAP version of 3) and whose CRC is therefore bad,
    ending where its segment does: shown with its problems and its bad CRC, as tshark shows it, and the
    FPDUs after it decoded as in the undamaged capture (before, the stream was taken as out of step, and
    the next FPDUs were lost until a resynchronisation)."""
    from rdmalab.capture import records
    from rdmalab.capture.pcapwriter import CaptureWriter

    whole = list(read(source))
    damaged_frames = [cp.frame_number for cp in whole if len(cp.pdus) == 1 and cp.pdus[0].stream is not None
                      and cp.pdus[0].stream.frames == (cp.frame_number,)][2::7][:4]  # (an FPDU in one segment)
    assert len(damaged_frames) == 4
    path = tmp_path / "damaged.pcap"
    with CaptureWriter(path) as w:
        for cp, r in zip(whole, records(source), strict=True):
            d = bytearray(r.data)
            if cp.frame_number in damaged_frames:
                at = len(d) - cp.packet.payload_length + 3  # (the payload starts with the FPDU: its RDMAP control octet)
                d[at] |= 0xC0
            w.write(bytes(d), r.ns or 0)
    got = list(read(path))
    for a, b in zip(whole, got, strict=True):
        if a.frame_number in damaged_frames:
            assert len(b.pdus) == 1 and b.pdus[0].crc_status == "bad" and b.pdus[0].problems
            continue
        assert [[la.header for la in p.layers] for p in b.pdus] == [[la.header for la in p.layers] for p in a.pdus]
    report = crosscheck(path)
    assert not report.unexplained, report.text()
