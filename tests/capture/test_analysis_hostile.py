"""rdmalab analyze on hostile captures (tests/hostile.py): each is analysed without error,
its findings stay readable, and repeated runs are analysed each on its own."""

from __future__ import annotations

import shutil
import subprocess
from collections import Counter
from pathlib import Path

import hostile  # tests/hostile.py: builds the hostile captures
import pytest

from rdmalab.capture.analysis import analyze
from rdmalab.capture.columnar import read_columns
from rdmalab.cli import main

CAPTURES = Path(__file__).resolve().parents[2] / "captures"
LOSS = CAPTURES / "rxe_write_bw_loss.pcap"


def test_appended_to_itself_is_analysed_run_by_run(tmp_path: Path) -> None:
    one = analyze(LOSS)
    runs = 5
    n = len(hostile.frames_of(LOSS))
    path = tmp_path / "appended.pcap"
    hostile.appended(LOSS, path, runs * n)
    a = analyze(path)
    # each run is the capture again: the same connections and findings, five times; no duplicates
    assert len(a.connections) == runs * len(one.connections)
    seams = a.of_kind("capture_seam")
    assert len(seams) == 1 and seams[0].detail["count"] == runs - 1
    assert seams[0].frames == [k * n + 1 for k in range(1, runs)]
    counts = a.counts()
    for kind, k in one.counts().items():
        assert counts[kind] == runs * k, kind
    assert {c.run for c in a.connections} == set(range(runs))


def test_every_frame_duplicated_is_one_finding(tmp_path: Path) -> None:
    one = analyze(LOSS)
    path = tmp_path / "dup.pcap"
    n = 2 * len(hostile.frames_of(LOSS))
    hostile.duplicated(LOSS, path, n)
    a = analyze(path)
    dup = a.of_kind("duplicate_frames")
    # RDMA frames are compared: frame f of the original is frames 2f-1 and 2f here
    cols = read_columns(LOSS)
    rdma = cols.data["frame.number"][cols.present("infiniband.bth")].tolist()
    assert len(dup) == 1 and dup[0].detail["count"] == len(rdma) == one.rdma_packets
    assert dup[0].text.startswith(f"frames duplicated in the capture: {len(rdma)}, e.g. {2 * rdma[0] - 1}/{2 * rdma[0]}")
    assert dup[0].frames == [2 * f for f in rdma]
    # without the copies, the analysis is the original's
    assert {k: v for k, v in a.counts().items() if k != "duplicate_frames"} == one.counts()
    assert not a.of_kind("duplicate")


def test_psn_wrap(tmp_path: Path) -> None:
    path = tmp_path / "wrap.pcap"
    hostile.psn_wrap(path, 20_000)
    a = analyze(path)
    assert len(a.connections) == 1 and a.connections[0].requester_qpn == 0x13
    assert not a.findings, a.counts()
    assert all(m.result == "ok" for m in a.messages)
    assert a.messages[0].first_psn == (1 << 24) - 5000 and any(m.first_psn == 0 for m in a.messages)


def test_ten_thousand_connections(tmp_path: Path) -> None:
    path = tmp_path / "many.pcap"
    hostile.many_connections(path, 40_000)
    a = analyze(path)
    assert len(a.connections) == 10_000 and not a.findings
    assert all(c.requester_qpn == c.responder_qpn + 10_000 for c in a.connections)
    assert len(a.messages) == 20_000 and all(m.result == "ok" for m in a.messages)


def test_heavy_reordering(tmp_path: Path) -> None:
    """Frames shuffled in windows of 8 with their timestamps: each connection is walked in time
    order, so the findings are those of the capture in order; the steps back are one finding."""
    path = tmp_path / "reordered.pcap"
    inorder = tmp_path / "inorder.pcap"
    n = 3 * len(hostile.frames_of(LOSS))
    hostile.reordered(LOSS, path, n)
    hostile.reordered(LOSS, inorder, n, window=1)
    a, b = analyze(path), analyze(inorder)
    tb = a.of_kind("time_backwards")
    assert len(tb) == 1 and tb[0].detail["count"] > 100  # one finding, every step
    assert not b.of_kind("time_backwards")
    trust = {"time_backwards", "capture_seam"}  # the TCP set-up frames are seconds apart: shuffled, they step back
    assert {k: v for k, v in a.counts().items() if k not in trust} == b.counts()
    assert [(c.name, c.packets, c.request_bytes, c.retransmitted_bytes) for c in a.connections] == \
        [(c.name, c.packets, c.request_bytes, c.retransmitted_bytes) for c in b.connections]


@pytest.mark.parametrize("snaplen", [60, 80])
def test_snaplen_cut_frames(tmp_path: Path, snaplen: int) -> None:
    """Every frame cut to 60 bytes (the BTH and a few bytes after it) or 80: the analysis is the
    uncut capture's, findings, messages and byte counts alike (payload lengths from the UDP length
    the headers carry), and a cut ICRC is not a bad one."""
    one = analyze(LOSS)
    path = tmp_path / "cut.pcap"
    hostile.snaplen_cut(LOSS, path, len(hostile.frames_of(LOSS)), snaplen=snaplen)
    a = analyze(path)
    assert a.packets == one.packets and a.rdma_packets == one.rdma_packets
    assert [(f.kind, f.frames, f.text) for f in a.findings] == [(f.kind, f.frames, f.text) for f in one.findings]
    assert [(m.op, m.first_psn, m.last_psn, m.size, m.result, m.frames) for m in a.messages] == \
        [(m.op, m.first_psn, m.last_psn, m.size, m.result, m.frames) for m in one.messages]
    assert [(c.name, c.packets, c.request_bytes, c.retransmitted_bytes) for c in a.connections] == \
        [(c.name, c.packets, c.request_bytes, c.retransmitted_bytes) for c in one.connections]
    assert one.connections[0].request_bytes > 80_000  # 4 KiB writes, not the bytes the capture kept
    # the capture cut and repeated (time going on): no crash, no bad ICRC
    hostile.snaplen_cut(LOSS, path, 2000, snaplen=snaplen)
    b = analyze(path)
    assert b.packets == 2000 and not b.of_kind("bad_icrc")


def test_capture_that_ends_mid_record(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "tail.pcap"
    n = hostile.truncated_tail(LOSS, path, 3000)
    # what is before the damage is analysed; the damage is a finding, and a warning on stderr
    assert main(["analyze", "-q", str(path)]) == 0
    captured = capsys.readouterr()
    assert "warning" in captured.err and "tail.pcap" in captured.err and f"record {n}" in captured.err
    a = analyze(path)
    assert a.packets == n - 1
    (f,) = a.of_kind("capture_damaged")
    assert f.detail["frames_read"] == n - 1 and "byte" in f.text
    one = analyze(LOSS)
    assert len(a.connections) == len(analyze(path).connections) >= len(one.connections)
    # a file with nothing readable is still an error
    bad = tmp_path / "bad.pcap"
    bad.write_bytes(b"\xd4\xc3\xb2\xa1" + b"\0" * 10)
    assert main(["analyze", "-q", str(bad)]) == 1 and "bad.pcap" in capsys.readouterr().err


@pytest.mark.tshark
@pytest.mark.skipif(shutil.which("tshark") is None, reason="needs tshark")
def test_annotated_capture_read_back_with_tshark(tmp_path: Path) -> None:
    out = tmp_path / "annotated.pcapng"
    assert main(["analyze", "-q", str(LOSS), "--annotate", str(out)]) == 0
    a = analyze(LOSS)
    want = sorted({fr for f in a.findings if f.kind == "retransmission" for fr in f.frames})
    got = subprocess.run(["tshark", "-n", "-r", str(out), "-Y", 'frame.comment contains "go-back-N"', "-T", "fields",
                          "-e", "frame.number"], capture_output=True, text=True, check=True).stdout.split()
    assert [int(x) for x in got] == want and want
    # the frames are the original's, byte for byte
    orig = subprocess.run(["tshark", "-n", "-r", str(LOSS), "-T", "fields", "-e", "frame.len", "-e", "frame.time_epoch"],
                          capture_output=True, text=True, check=True).stdout
    copy = subprocess.run(["tshark", "-n", "-r", str(out), "-T", "fields", "-e", "frame.len", "-e", "frame.time_epoch"],
                          capture_output=True, text=True, check=True).stdout
    assert orig == copy
    naks = subprocess.run(["tshark", "-n", "-r", str(out), "-Y", 'frame.comment contains "nak_seq_err"', "-T", "fields",
                           "-e", "frame.number"], capture_output=True, text=True, check=True).stdout.split()
    assert sorted(int(x) for x in naks) == sorted(f.frames[0] for f in a.of_kind("nak_seq_err"))


def test_annotating_a_record_shorter_on_the_wire_than_captured(tmp_path: Path) -> None:
    """A damaged record whose wire length is below its captured length (read as it is, as tshark
    reads it: frame.len 44, frame.cap_len 74) is copied as it is, not a ValueError of the writer."""
    from rdmalab.capture import records

    src = tmp_path / "short_wire.pcap"
    data = bytearray(LOSS.read_bytes())
    cap = int.from_bytes(data[24 + 8:24 + 12], "little")
    data[24 + 12:24 + 16] = (cap - 30).to_bytes(4, "little")  # the first record: 30 octets fewer on the wire
    src.write_bytes(bytes(data))
    out = tmp_path / "annotated.pcapng"
    assert main(["analyze", "-q", str(src), "--annotate", str(out)]) == 0
    first = [(r.wire_length, len(r.data), r.data) for r in records(src)]
    assert [(r.wire_length, len(r.data), r.data) for r in records(out)] == first
    assert first[0][0] == first[0][1] - 30


def test_annotating_frames_before_1970_is_an_error_not_a_traceback(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """A pcapng interface whose if_tsoffset puts its frames before 1970: analyze reads it; the
    annotated copy (its times unsigned, from the epoch) cannot hold them: a sentence naming the
    frame, exit status 1, and no half-written copy left (it was a ValueError's traceback)."""
    import struct

    from rdmalab.capture import records

    def block(btype: int, body: bytes) -> bytes:
        return struct.pack("<II", btype, 12 + len(body)) + body + struct.pack("<I", 12 + len(body))

    opts = struct.pack("<HH", 14, 8) + struct.pack("<q", -(1 << 40)) + struct.pack("<HH", 0, 0)  # if_tsoffset
    out = block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1)) + block(1, struct.pack("<HHI", 1, 0, 0) + opts)
    for k, r in enumerate(records(LOSS)):
        out += block(6, struct.pack("<IIIII", 0, 0, 1000 * k, len(r.data), len(r.data)) + r.data
                     + bytes(-len(r.data) % 4))
    src = tmp_path / "before_1970.pcapng"
    src.write_bytes(out)
    assert main(["analyze", "-q", str(src)]) == 0
    capsys.readouterr()
    copy = tmp_path / "annotated.pcapng"
    assert main(["analyze", "-q", str(src), "--annotate", str(copy)]) == 1
    err = capsys.readouterr().err
    assert "cannot write the annotated capture: packet 1:" in err and "before the epoch" in err
    assert not copy.exists()


@pytest.mark.skipif(shutil.which("chromium") is None, reason="needs chromium")
def test_report_renders_in_headless_chromium(tmp_path: Path) -> None:
    """The page's plots draw offline: plotly.js (inline) turned each figure into SVG in the browser."""
    page = tmp_path / "r.html"
    assert main(["analyze", "-q", str(LOSS), "--html", str(page)]) == 0
    cmd = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--virtual-time-budget=8000"]
    dom = subprocess.run([*cmd, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120).stdout
    assert dom.count('class="main-svg"') >= 4  # the four figures were drawn
    assert "Packets were lost on the wire" in dom and "psn_gap" in dom
    png = tmp_path / "r.png"
    subprocess.run([*cmd, "--window-size=1400,2000", f"--screenshot={png}", page.as_uri()], capture_output=True,
                   timeout=120)
    assert png.stat().st_size > 50_000


@pytest.mark.skipif(shutil.which("mergecap") is None, reason="needs mergecap")
def test_a_frame_of_another_link_type_does_not_slow_the_rest(tmp_path: Path) -> None:
    """Captures appended with mergecap -a, one of them native InfiniBand (ERF): only that frame goes
    through the per-packet decoder; the Ethernet captures around it are analysed as on their own."""
    path = tmp_path / "mixed.pcapng"
    erf = CAPTURES / "synthetic_native_ib_erf.pcap"
    subprocess.run(["mergecap", "-a", "-w", str(path), str(LOSS), str(erf), str(LOSS)], check=True)
    a = analyze(path)
    one = analyze(LOSS)
    ib = analyze(erf)
    assert a.packets == 2 * one.packets + ib.packets
    assert a.rdma_packets == 2 * one.rdma_packets + ib.rdma_packets
    counts = {k: v for k, v in a.counts().items() if k != "capture_seam"}
    assert counts == {k: 2 * v + ib.counts().get(k, 0) for k, v in one.counts().items()}


def test_the_rows_kept_are_narrow() -> None:
    """analysis_rows keeps about 110 bytes per RDMA packet, and nothing per frame of other protocols."""
    from rdmalab.capture.analysis_rows import load_rows

    r = load_rows(CAPTURES / "siw_write_bw.pcap")  # iWARP only: no RDMA row kept
    assert len(r) == 0 and r.frames > 0
    r = load_rows(LOSS)
    assert sum(v.itemsize for v in r.a.values()) <= 112
    assert all(len(v) == len(r) == r.frames - 49 for v in r.a.values())


def _requests(path: Path) -> int:
    """RDMA requests in a capture (every opcode but ACKs, READ responses, atomic ACKs and CNPs)."""
    cols = read_columns(path)
    op = cols.data["infiniband.bth.opcode"][cols.present("infiniband.bth")]
    responses = {0x0D, 0x0E, 0x0F, 0x10, 0x11, 0x12, 0x81}
    return sum(1 for o in op.tolist() if o not in responses)


def test_a_pass_sent_again_is_one_duplicate_finding(tmp_path: Path) -> None:
    """The capture repeated with time going on (the same QP sends its PSNs again): every request of
    the later passes is a duplicate, and each pass of them is one finding, with their count and
    every frame, not one finding a packet."""
    one = analyze(LOSS)
    n = len(hostile.frames_of(LOSS))
    path = tmp_path / "again.pcap"
    hostile.reordered(LOSS, path, 3 * n, window=1)  # in order: the capture three times, time going on
    a = analyze(path)
    assert len(a.connections) == 1 and not one.of_kind("duplicate")
    dups = a.of_kind("duplicate")
    assert a.events("duplicate") == 2 * _requests(LOSS) == sum(len(f.frames) for f in dups)
    # a pass of duplicates begins where the requester goes back: one finding per go-back-N of the later passes
    restarts = {f.frames[0] for f in a.of_kind("retransmission")}
    assert len(dups) == len(restarts) - len(one.of_kind("retransmission"))
    assert all(f.frames[0] in restarts for f in dups)
    big = max(dups, key=lambda f: f.detail["count"])
    assert big.detail["count"] > 40 and big.text.startswith(f"{big.detail['count']} requests the responder had "
                                                            "already accepted came again")
    assert 10 * len(dups) < a.events("duplicate")
    # the summary line and the JSON say both: findings and the requests they stand for
    assert f"{len(dups)} duplicate ({a.events('duplicate')} events)" in a.text()
    doc = a.to_dict()
    assert doc["counts"]["duplicate"] == len(dups) and doc["events"]["duplicate"] == a.events("duplicate")


def test_findings_past_the_budget_of_their_kind_are_folded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past KIND_BUDGET findings of one kind, a connection's further ones are one folded finding
    that counts them: the events of every kind are the same as with no budget."""
    from rdmalab.capture import analysis_model

    n = len(hostile.frames_of(LOSS))
    path = tmp_path / "again.pcap"
    hostile.reordered(LOSS, path, 3 * n, window=1)
    # and frames the capture missed (one in 97): gaps never sent again, found as capture_gap
    hostile.write(path, [fr for i, fr in enumerate(hostile.frames_of(path)) if i % 97 != 50])
    full = analyze(path)
    monkeypatch.setattr(analysis_model, "KIND_BUDGET", 5)
    a = analyze(path)
    # capture_gap, found from the PSNs of the gaps and restarts, folded ones included, too
    kinds = set(full.counts())
    assert "capture_gap" in kinds and full.events("retransmission") > 5 and full.events("psn_gap") > 5
    assert {k: a.events(k) for k in kinds} == {k: full.events(k) for k in kinds}
    # the counter checks count retransmissions by trigger: a folded finding keeps those counts
    for t in ("nak", "timeout", "implied_nak"):
        assert a.events_where("retransmission", trigger=t) == full.events_where("retransmission", trigger=t)
    assert sum(full.events_where("retransmission", trigger=t) for t in ("nak", "timeout", "implied_nak", "rnr")) \
        == full.events("retransmission")
    with pytest.raises(ValueError, match="cannot count by after_us"):
        a.events_where("retransmission", after_us=1.0)
    for kind, count in a.counts().items():
        folded = [f for f in a.of_kind(kind) if f.detail.get("folded")]
        assert count <= 5 + len(folded) and len(folded) <= 1  # one connection
        if full.counts()[kind] > 5:
            (f,) = folded
            kept = [g for g in a.of_kind(kind) if not g.detail.get("folded")]
            assert f.detail["findings"] == full.counts()[kind] - 5 == len(full.of_kind(kind)) - len(kept)
            assert f"{f.detail['findings']} more {kind} findings" in f.text
            # the frames the folded finding lists are those of the findings left out, in the order found
            left = Counter(tuple(g.frames) for g in full.of_kind(kind))
            left.subtract(Counter(tuple(g.frames) for g in kept))
            frames = sorted(fr for fs, k in left.items() for _ in range(k) for fr in fs)
            assert len(frames) <= analysis_model.FOLDED_FRAMES and sorted(f.frames) == frames


def test_first_seen_psns_as_a_dict_would_keep_them() -> None:
    """The walk's compact first-seen table (an array from the first PSN, a dict for PSNs before it or
    far past it) answers as a dict does, PSNs far ahead that the array later reaches included."""
    import random

    from rdmalab.capture.analysis_conn import _FirstSeen

    rnd = random.Random(1)
    for _ in range(100):
        base = rnd.randrange(-1000, 1000)
        fs, d = _FirstSeen(base), {}
        for _ in range(300):
            p = base + rnd.choice([rnd.randrange(-50, 200), rnd.randrange(-200_000, 200_000),
                                   rnd.randrange(60_000, 70_000)])
            t = rnd.randrange(10**9)
            new = p not in d
            d.setdefault(p, t)
            assert fs.add(p, t) is new and fs.get(p) == d[p]
            q = base + rnd.randrange(-300_000, 300_000)
            assert fs.get(q) == d.get(q)


def test_a_frame_stamped_late_is_not_a_seam() -> None:
    """A real capture (tcpdump in the lab VM under load) whose frame 30, a NAK, is stamped 6.9 ms after the
    64 WRITEs that follow it: one connection of the 20 WRITEs ib_write_bw -n 20 sent, the steps back one
    time_backwards finding.  It was split in two runs of the capture at frame 31 (the lookahead of 64
    packets all stayed before the late stamp), with a capture gap and an opcode-sequence error that were
    not there: CI's test_top_live failed on it."""
    a = analyze(Path(__file__).resolve().parents[1] / "data" / "rxe_write_bw_late_stamp.pcap")
    assert len(a.connections) == 1 and a.connections[0].summary["messages"] == {"WRITE": 20}
    assert not a.of_kind("capture_seam") and a.of_kind("time_backwards")
    assert not a.of_kind("capture_gap") and not a.of_kind("opcode_sequence")


def _ip_id_zero(data: bytes) -> bytes:
    """A RoCEv2-over-IPv4 frame with its IP identification 0 (RFC 6864 4.1: a sender may, with DF set), the
    checksum and the ICRC (which covers the identification) made good again; any other frame as it is."""
    from rdmalab.wire.crc import icrc_rocev2
    from rdmalab.wire.net import internet_checksum

    if data[12:14] != b"\x08\x00" or data[23] != 17 or data[36:38] != b"\x12\xb7":
        return data
    total = int.from_bytes(data[16:18], "big")
    out = bytearray(data)
    out[18:20] = bytes(2)
    out[24:26] = bytes(2)
    out[24:26] = internet_checksum(bytes(out[14:34])).to_bytes(2, "big")
    out[14 + total - 4:14 + total] = icrc_rocev2(bytes(out[14:14 + total - 4])).to_bytes(4, "little")
    return bytes(out)


@pytest.mark.parametrize("name", ["rxe_rc_pingpong.pcap", "rxe_send_lat.pcap", "rxe_write_lat.pcap",
                                  "rxe_srq_pingpong.pcap"])
@pytest.mark.parametrize("how", ["IPv6", "IPv4 id 0"])
def test_responses_answered_again_are_not_copies(name: str, how: str, tmp_path: Path) -> None:
    """rxe answers a duplicate request again with the same ACK (IBA 9.7.5.1, C9-105): without an IP
    identification to tell them apart (IPv6; an IPv4 sender that sets it to 0) the ACKs are identical back to
    back. They are the protocol's, not a capture's copies: the analysis is the same as over IPv4 with its
    identifications, no duplicate_frames finding, nothing left out; a request copied is still found so."""
    from rdmalab.capture.pcapwriter import write_capture
    from rdmalab.capture.reader import records
    from rdmalab.wire.opcodes import REQUEST_OPCODES

    src = Path(__file__).resolve().parents[2] / "captures" / name
    recs = list(records(src))
    change = hostile.over_ipv6 if how == "IPv6" else _ip_id_zero
    frames = [change(r.data) for r in recs]
    path = tmp_path / "same.pcap"
    write_capture(path, [(round(r.timestamp * 1e9), f) for r, f in zip(recs, frames, strict=True)])
    twice = sum(a == b for a, b in zip(frames, frames[1:], strict=False) if a[12:14] == b"\x86\xdd" or a[23] == 17)
    assert twice > 0  # (identical RoCE frames back to back: what the rule is about)
    one, a = analyze(src), analyze(path)
    assert a.counts() == one.counts() and not a.of_kind("duplicate_frames")
    assert a.rdma_packets == one.rdma_packets and len(a.messages) == len(one.messages)
    # a request copied by a mirror port: found
    bth = 62 if how == "IPv6" else 42
    k = next(i for i, f in enumerate(frames) if len(f) > bth and f[bth - 6:bth - 4] == b"\x12\xb7"
             and f[bth] in REQUEST_OPCODES)
    copied = tmp_path / "copied.pcap"
    ts = [round(r.timestamp * 1e9) for r in recs]
    write_capture(copied, [(t, f) for t, f in zip(ts, frames, strict=True)][:k + 1] + [(ts[k] + 1000, frames[k])]
                  + [(t + 1000, f) for t, f in zip(ts, frames, strict=True)][k + 1:])
    (dup,) = analyze(copied).of_kind("duplicate_frames")
    assert dup.detail["count"] == 1 and dup.frames == [k + 2]
