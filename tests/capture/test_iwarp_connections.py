"""iWARP connections in ``analyze`` and ``top``: one per TCP connection that carries MPA, with its FPDUs,
messages and data bytes per direction (rdmalab.capture.iwarp_conns).

Oracles: tshark's iWARP fields (opcode, DDP Last flag, MPA ULPDU length, tagged flag) of every frame,
counted per TCP stream and direction, with the TCP client (the SYN's sender) as the initiator; and what the
programs that made the real captures were asked to do (captures/MANIFEST.md: ``ib_write_bw -n 5 -s 4096``
moves 5 RDMA Writes of 4096 bytes, ``rping -C 3 -S 64`` 3 Read and 3 Write of 64 bytes)."""

from __future__ import annotations

import json
import struct
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from tshark_cli import requires_tshark, tshark

from rdmalab.capture import records
from rdmalab.capture.analysis import analyze
from rdmalab.capture.analysis_model import Connection
from rdmalab.capture.iwarp_conns import SYN_MAX, IwarpConns, data_octets, rdmap_name
from rdmalab.capture.pcapio import record_blocks
from rdmalab.capture.pcapwriter import CaptureWriter
from rdmalab.capture.top import LiveTop
from rdmalab.cli import main

CAPTURES = Path(__file__).resolve().parents[2] / "captures"
#: the iWARP captures tshark decodes (it decodes nothing of siw_write_bw_midstream: no MPA exchange in it)
IWARP = sorted(p for p in CAPTURES.glob("*.pcap") if ("siw" in p.name or "iwarp" in p.name)
               and "midstream" not in p.name)
_ARGS = ("--disable-protocol", "rpcordma", "--disable-protocol", "smb_direct")
_FIELDS = ("tcp.stream", "ip.src", "tcp.srcport", "ip.dst", "tcp.dstport", "tcp.flags", "iwarp_rdma.opcode",
           "iwarp_ddp.last_flag", "iwarp_mpa.ulpdulength", "iwarp_ddp.tagged_flag", "iwarp_mpa.rev", "tcp.len",
           "tcp.analysis.retransmission")


def _ints(text: str) -> list[int]:
    return [int(x, 0) for x in text.split(",")] if text else []


def _tshark_connections(path: Path) -> dict[tuple[str, int, str, int], dict[str, Any]]:
    """tshark's iWARP per TCP connection: (initiator, port, responder, port) -> per direction (0: from the
    initiator) FPDUs and messages by opcode, data bytes, frames with iWARP, and the segments with data
    tshark calls retransmissions (``tcp.analysis.retransmission``: spurious ones too) and their octets."""
    args = [x for f in _FIELDS for x in ("-e", f)]
    lines = tshark("-r", str(path), "-T", "fields", *args, "-E", "occurrence=a", "-E", "aggregator=,",
                   *_ARGS).splitlines()
    client: dict[str, tuple[str, int, str, int]] = {}
    rows = []
    for line in lines:
        stream, src, sport, dst, dport, flags, ops, last, length, tagged, rev, seglen, retx = line.split("\t")
        if not stream:  # (not TCP over IPv4)
            continue
        if int(flags, 16) & 0x12 == 0x02:  # a SYN without ACK: its sender is the client, the initiator
            client[stream] = (src, int(sport), dst, int(dport))
        rows.append((stream, (src, int(sport), dst, int(dport)), _ints(ops), _ints(last), _ints(length),
                     _ints(tagged), bool(rev), int(seglen or 0) if retx else 0))
    out: dict[tuple[str, int, str, int], dict[str, Any]] = {}
    iwarp = {r[0] for r in rows if r[2] or r[6]}
    for stream, key, ops, last, length, tagged, rev, again in rows:
        if stream not in iwarp:
            continue
        init = client[stream]
        side = 0 if key == init else 1
        c = out.setdefault(init, {"dirs": [{"fpdus": Counter(), "messages": Counter(), "bytes": 0, "frames": 0,
                                            "retransmissions": 0, "retransmitted_bytes": 0} for _ in range(2)]})
        d = c["dirs"][side]
        if again:
            d["retransmissions"] += 1
            d["retransmitted_bytes"] += again
        if not ops and not rev:
            continue
        d["frames"] += 1
        assert len(ops) == len(last) == len(length) == len(tagged), line
        for op, ls, n, tg in zip(ops, last, length, tagged, strict=True):
            d["fpdus"][rdmap_name(op)] += 1
            d["messages"][rdmap_name(op)] += ls
            d["bytes"] += data_octets(op, tg, n)
    return out


def _mine(c: Connection) -> dict[str, Any]:
    return {"dirs": [{"fpdus": Counter(d["opcodes"]), "messages": +Counter(d["messages"]), "bytes": d["bytes"],
                      "frames": d["frames"], "retransmissions": d["retransmissions"],
                      "retransmitted_bytes": d["retransmitted_bytes"]} for d in c.summary["directions"]]}


@requires_tshark
@pytest.mark.tshark
@pytest.mark.parametrize("path", IWARP, ids=[p.name for p in IWARP])
def test_every_connection_as_tshark_counts_it(path: Path) -> None:
    """Per TCP connection and direction: the FPDUs by opcode, the messages (DDP Last set) by opcode, the data
    bytes, the frames with iWARP and the TCP retransmissions (segments, octets) are tshark's; the initiator is
    the SYN's sender."""
    theirs = {k: {"dirs": [{**d, "messages": +d["messages"]} for d in v["dirs"]]}
              for k, v in _tshark_connections(path).items()}
    a = analyze(path)
    assert not a.connections  # (no RoCE in these captures)
    mine = {(c.requester, c.requester_port, c.responder, c.responder_port): _mine(c) for c in a.iwarp_connections}
    assert theirs and mine == theirs
    assert all(c.summary["initiator_known_by"] == "syn" for c in a.iwarp_connections)
    assert [c.retransmitted_bytes for c in a.iwarp_connections] == \
        [sum(d["retransmitted_bytes"] for d in c.summary["directions"]) for c in a.iwarp_connections]
    assert a.iwarp_frames == sum(d["frames"] for c in theirs.values() for d in c["dirs"])
    # numbered after the RoCE connections, in the order of their first frame
    assert [c.id for c in a.iwarp_connections] == list(range(len(a.iwarp_connections)))
    assert [c.first for c in a.iwarp_connections] == sorted(c.first for c in a.iwarp_connections)


@requires_tshark
@pytest.mark.tshark
@pytest.mark.parametrize("path", IWARP, ids=[p.name for p in IWARP])
def test_the_segments_plotted_are_tsharks(path: Path) -> None:
    """``Analysis.iwarp_seq_time``, what the HTML report plots of each iWARP connection: every TCP segment with
    data from the connection's first frame with iWARP on, each where tshark puts it (``tcp.seq`` relative to
    the SYN: the first octet after it is 1, here 0), of its length, sent again where tshark says
    ``tcp.analysis.retransmission``, and timed from the connection's first frame with iWARP."""
    lines = tshark("-r", str(path), "-T", "fields", *[x for f in ("frame.number", "frame.time_epoch", "tcp.stream",
                   "ip.src", "tcp.srcport", "tcp.flags", "tcp.seq", "tcp.len", "tcp.analysis.retransmission",
                   "iwarp_mpa.ulpdulength", "iwarp_mpa.rev") for x in ("-e", f)], "-E", "occurrence=f", *_ARGS).splitlines()
    syn: dict[str, tuple[str, int]] = {}
    first: dict[str, int] = {}  # stream -> its first frame with iWARP
    rows = []
    for line in lines:
        frame, t, stream, src, sport, flags, seq, seglen, retx, ulpdu, rev = line.split("\t")
        if not stream:
            continue
        if int(flags, 16) & 0x12 == 0x02:
            syn[stream] = (src, int(sport))
        if (ulpdu or rev) and stream not in first:
            first[stream] = int(frame)
        rows.append((int(frame), float(t), stream, (src, int(sport)), int(seq or 0), int(seglen or 0), bool(retx)))
    theirs: dict[tuple[str, int], list[tuple[int, int, int, int, bool]]] = {}
    t0: dict[tuple[str, int], float] = {}
    for frame, t, stream, src, seq, seglen, retx in rows:
        if stream not in first or frame < first[stream] or not seglen:
            continue
        key = syn[stream]
        if frame == first[stream]:
            t0[key] = t
        theirs.setdefault(key, []).append((src != key, frame, seq - 1, seglen, retx))
    a = analyze(path)
    mine = {}
    for c in a.iwarp_connections:
        pts = a.iwarp_seq_time[c.id]
        assert pts["t"].min() >= 0 and len(pts["frame"]) == len(pts["t"]) == len(pts["kind"])
        got = sorted(zip(pts["dir"].astype(bool).tolist(), pts["frame"].tolist(), pts["seq"].tolist(),
                         pts["len"].tolist(), (pts["kind"] == 1).tolist(), strict=True))
        mine[(c.requester, c.requester_port)] = got
        for frame, t in zip(pts["frame"].tolist(), pts["t"].tolist(), strict=True):
            (when,) = [r[1] for r in rows if r[0] == frame]
            assert abs(t - (when - t0[(c.requester, c.requester_port)])) < 2e-6, frame
    assert mine == {k: sorted(v) for k, v in theirs.items()}
    if path.name == "siw_write_bw.pcap":  # (its one retransmission: the comparison holds one)
        assert sum(r for v in mine.values() for *_x, r in v) == 1


def test_the_report_shows_each_connections_segments_and_says_what_tcp_sent_again(tmp_path: Path) -> None:
    """The HTML report of an iWARP capture: a TCP sequence plot per connection, the segments sent again in
    the connections' table and in the summary (which no longer says nothing went wrong)."""
    pytest.importorskip("plotly")
    from rdmalab.viz.report import html_report

    a = analyze(CAPTURES / "siw_write_bw.pcap")
    page = html_report(a)
    assert page.count("TCP sequence over time, iWARP connection") == len(a.iwarp_connections) == 2
    assert "TCP sent 1 segment(s) again on the iWARP connections</b> (1,260 bytes)" in page
    assert "Nothing went wrong" not in page and "<td class=n>1 (1,260 B)</td>" in page
    assert "No RoCE or InfiniBand connection" not in page and "requester → responder" not in page
    quiet = html_report(analyze(CAPTURES / "siw_send_bw.pcap"))
    assert "Nothing went wrong" in quiet and "segment(s) again" not in quiet


def test_the_segments_recorded_are_bounded() -> None:
    """The segments kept for the pictures stop at the budget (top keeps none); the counts go on."""
    conns = IwarpConns()
    assert conns.points_left == 0
    conns.points_left = 3
    c = conns._new(("10.0.0.2", 1, "10.0.0.1", 2), "syn", 0)
    for k in range(10):
        conns._segment(c.sides[0], k + 1, k, 1000 + 100 * k, 100)
    assert c.sides[0].points is not None and len(c.sides[0].points) == 3 * 5 and conns.points_left == 0
    assert c.sides[0].hi == 1000


def _data(a: Any) -> Connection:
    """The perftest data connection: the one whose initiator sends more than Sends (the first carries
    perftest's own key exchange)."""
    (c,) = [c for c in a.iwarp_connections if set(c.summary["opcodes"]) - {"Send"}
            or c.summary["bytes"] > 20000]
    return c


@pytest.mark.parametrize("name,op,side,messages,nbytes", [
    ("siw_write_bw.pcap", "Write", 0, 5, 5 * 4096),  # ib_write_bw -n 5 -s 4096
    ("siw_crc_write_bw.pcap", "Write", 0, 5, 5 * 4096),
    ("siw_read_bw.pcap", "Read Response", 1, 5, 5 * 4096),  # ib_read_bw: the responder answers 5 Reads
    ("siw_crc_read_bw.pcap", "Read Response", 1, 5, 5 * 4096),
    ("siw_send_bw.pcap", "Send", 0, 5, 5 * 4096 + 8),  # ib_send_bw, and perftest's 2 small Writes (4 bytes each)
])
def test_what_perftest_was_asked_to_move(name: str, op: str, side: int, messages: int, nbytes: int) -> None:
    """MANIFEST: each *_bw capture moved 5 messages of 4096 bytes on its data connection, over MSS-sized FPDUs."""
    c = _data(analyze(CAPTURES / name))
    d = c.summary["directions"][side]
    assert d["messages"][op] == messages and d["opcodes"][op] > messages  # (more FPDUs than messages)
    assert c.request_bytes == nbytes and c.responder_port == 18515
    assert c.summary["mpa"]["request"]["frame"] < c.summary["mpa"]["reply"]["frame"]
    if "read" in name:
        assert c.summary["directions"][0]["messages"] == {"Read Request": 5}


@pytest.mark.parametrize("name,crc", [("siw_rping.pcap", 0), ("siw_crc_rping.pcap", 1)])
def test_rping_reads_and_writes_64_bytes_three_times(name: str, crc: int) -> None:
    """rping -C 3 -S 64: the server (the responder, port 7174) reads the client's 64 bytes and writes them
    back, three times; the MPA exchange says whether CRC32c was negotiated (MANIFEST)."""
    (c,) = analyze(CAPTURES / name).iwarp_connections
    to_client, to_server = c.summary["directions"][1], c.summary["directions"][0]
    assert c.responder_port == 7174 and c.summary["initiator_known_by"] == "syn"
    assert to_client["messages"]["Read Request"] == 3 and to_client["messages"]["Write"] == 3
    assert to_server["messages"]["Read Response"] == 3
    assert to_server["bytes"] - 16 * to_server["messages"]["Send"] == 3 * 64  # (rping's Sends: 16 bytes each)
    assert {m["crc"] for m in c.summary["mpa"].values()} == {crc}
    assert {m["rev"] for m in c.summary["mpa"].values()} == {2}


def test_a_capture_that_begins_after_the_mpa_exchange() -> None:
    """siw_write_bw_midstream starts at the 6th Write FPDU of ib_write_bw -n 10 -s 16384 (MANIFEST): no SYN, no
    MPA; the initiator is not known (said so), and the 10 Writes end in it, less the 5 FPDUs of 1428 bytes cut."""
    a = analyze(CAPTURES / "siw_write_bw_midstream.pcap")
    data = max(a.iwarp_connections, key=lambda c: c.request_bytes)
    assert data.summary["initiator_known_by"] is None and not data.summary["mpa"]
    assert "<->" in data.name and "not known" in a.text()
    assert data.summary["directions"][0]["messages"] == {"Write": 10}
    assert data.request_bytes == 10 * 16384 - 5 * 1428


def test_findings_name_their_connection() -> None:
    """A bad MPA CRC and a Terminate are findings of the connection they were sent on."""
    a = analyze(CAPTURES / "synthetic_iwarp_mpa_crc.pcap")
    (c,) = a.iwarp_connections
    kinds = {f.kind: f.connection for f in a.findings}
    assert kinds == {"bad_crc32c": c.id, "terminate": c.id}
    assert c.summary["bad_crc32c"] == 1 and c.summary["terminates"] == 1


@pytest.mark.parametrize("path", IWARP + [CAPTURES / "siw_write_bw_midstream.pcap"],
                         ids=[p.name for p in IWARP] + ["siw_write_bw_midstream.pcap"])
def test_top_counts_what_analyze_counts(path: Path) -> None:
    """``top``'s iWARP rows at the end of a replay are analyze's connections: ends, frames, data bytes,
    messages, and the findings on each."""
    a = analyze(path)
    top = LiveTop(idle_s=None)
    for blk in record_blocks(path, 1 << 12):
        top.feed_block(blk)
    top.tick()
    rows = top.iwarp_rows()
    assert [(r["name"], r["packets"], r["request_bytes"], r["messages"], r["directions"]) for r in rows] == \
        [(c.name, c.packets, c.request_bytes, c.summary["messages"], c.summary["directions"])
         for c in a.iwarp_connections]
    tot = top.totals()
    assert (tot["iwarp_frames"], tot["iwarp_connections"]) == (a.iwarp_frames, len(a.iwarp_connections))
    assert tot["connections"] == len(a.connections) == 0
    per = Counter((f.kind, f.connection is not None) for f in a.findings if f.kind in ("bad_crc32c", "terminate"))
    assert Counter((f.kind, f.connection is not None) for f in top.findings) == per


def test_analyze_and_top_commands_show_them(capsys: Any) -> None:
    path = str(CAPTURES / "siw_rping.pcap")
    assert main(["analyze", path]) == 0
    out = capsys.readouterr().out
    assert "1 connection(s) (0 RoCE, 1 iWARP)" in out and "(iWARP)" in out and "3 Read Request" in out
    assert main(["analyze", "-T", "json", path]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["connections"] == [] and len(doc["iwarp_connections"]) == 1
    assert doc["iwarp_connections"][0]["transport"] == "iWARP" and doc["iwarp_frames"] == 23
    assert main(["top", "-r", path, "--once", "-T", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in doc["iwarp_connections"]] == ["10.0.0.2:50170 -> 10.0.0.1:7174 (iWARP)"]
    assert main(["top", "-r", path, "--once"]) == 0
    out = capsys.readouterr().out
    assert "10.0.0.2:50170 -> 10.0.0.1:7174 (iWARP)" in out and "23 iWARP frames" in out


def _as_ipv6(frame: bytes) -> bytes:
    """An Ethernet IPv4 frame as IPv6 (2001:db8::a.b.c.d), its transport segment unchanged."""
    if frame[12:14] != b"\x08\x00":
        return frame
    ihl = (frame[14] & 15) * 4
    total = int.from_bytes(frame[16:18], "big")
    seg = frame[14 + ihl:14 + total]
    addr = [b"\x20\x01\x0d\xb8" + bytes(8) + frame[26 + 4 * k:30 + 4 * k] for k in range(2)]
    hdr = struct.pack("!IHBB", 6 << 28, len(seg), frame[23], 64) + addr[0] + addr[1]
    return frame[:12] + b"\x86\xdd" + hdr + seg


def test_over_ipv6(tmp_path: Path) -> None:
    """The same connection over IPv6: the same counts, the ends named by their IPv6 addresses."""
    src = CAPTURES / "siw_rping.pcap"
    dst = tmp_path / "rping6.pcap"
    with CaptureWriter(dst) as w:
        for r in records(src):
            w.write(_as_ipv6(r.data), round(r.timestamp * 1e9))
    (four,) = analyze(src).iwarp_connections
    (six,) = analyze(dst).iwarp_connections
    assert (six.requester, six.responder) == ("2001:db8::a00:2", "2001:db8::a00:1")
    assert six.summary["directions"] == [{**d, "from": d["from"].replace("10.0.0.", "2001:db8::a00:"),
                                          "to": d["to"].replace("10.0.0.", "2001:db8::a00:")}
                                         for d in four.summary["directions"]]


def _syn(k: int) -> bytes:
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 40, 0, 0, 64, 6, 0, bytes([10, 1, k >> 8 & 255, k & 255]),
                     bytes([10, 2, 0, 1]))
    tcp = struct.pack("!HHIIBBHHH", 1024 + k % 60000, 7174, k, 0, 5 << 4, 0x02, 65535, 0, 0)
    return bytes(6) + bytes(6) + b"\x08\x00" + ip + tcp


def test_memory_stays_bounded() -> None:
    """SYNs of connections that never carry iWARP are remembered up to SYN_MAX; at most max_conns
    connections are kept in top, the others retired into its totals."""
    top = LiveTop(idle_s=None, max_conns=3)
    for k in range(SYN_MAX + 500):
        top.feed(k * 1000, _syn(k))
    top.flush()
    iw: IwarpConns = top._iwarp
    assert len(iw.syns) == SYN_MAX and not iw.conns
    frames = [(round(r.timestamp * 1e9), r.data) for r in records(CAPTURES / "siw_rping.pcap")]
    for rep in range(5):  # the same connection from five client ports: five connections
        for ts, data in frames:
            at = 14 + (data[14] & 15) * 4 + (0 if data[26:30] == bytes([10, 0, 0, 2]) else 2)
            top.feed(ts + rep * 10**9, data[:at] + (50170 + rep).to_bytes(2, "big") + data[at + 2:])
    top.tick()
    assert len(top.iwarp_connections) == 3 and iw.retired["connections"] == 2
    tot = top.totals()
    assert tot["iwarp_connections"] == 5 and tot["iwarp_frames"] == 5 * 23
    assert tot["iwarp_bytes"] == 5 * analyze(CAPTURES / "siw_rping.pcap").iwarp_connections[0].request_bytes


def test_html_report_lists_them() -> None:
    import html

    from rdmalab.viz.report import html_report

    a = analyze(CAPTURES / "siw_write_bw.pcap")
    page = html_report(a)
    assert "<h2>iWARP connections</h2>" in page and "No RDMA connection" not in page
    assert all(html.escape(c.name) in page for c in a.iwarp_connections)
    assert "5 Write" in page


# ---------------------------------------------------------------- resynchronisations said, not silent

def _hole(tmp_path: Path, late: bool = False) -> tuple[Path, int, int]:
    """siw_crc_write_bw with one data segment of the Writes cut out (the capture missed it); with
    ``late`` the segment comes back three segments later (a retransmission seen late)."""
    from test_iwarp_resync import CRC_WRITE, DATA_PORT, data_segments, load, save, tcp_of

    frames = load(CRC_WRITE)
    segs = data_segments(frames, DATA_PORT)
    k = segs[5]
    lost = tcp_of(frames[k][1])
    if late:
        edited = frames[:k] + frames[k + 1:segs[8] + 1] + [frames[k]] + frames[segs[8] + 1:]
    else:
        edited = frames[:k] + frames[k + 1:]
    return save(edited, tmp_path / "hole.pcap"), len(lost.data), k


def test_a_hole_in_the_capture_is_a_finding_of_its_connection(tmp_path: Path) -> None:
    """The reassembly follows the Writes again past the hole: analyze says so (``iwarp_resync``, the
    octets from the hole to the FPDU start it went on from), on the Writes' connection and direction,
    and the connection counts it; top says the same as it happens."""
    path, lost, _k = _hole(tmp_path)
    a = analyze(path)
    (f,) = a.of_kind("iwarp_resync")
    data = _data(a)
    assert f.connection == data.id and f.detail["kind"] == "hole"
    assert f.detail["direction"][:2] == [data.requester, data.requester_port]
    # at least the segment the capture missed; at most that and the rest of the FPDU it began
    assert lost <= f.detail["octets"] < lost + 1460
    d = data.summary["directions"][0]
    assert (d["resyncs"], d["octets_skipped"]) == (1, f.detail["octets"])
    assert "followed again 1 time(s)" in a.text() and "iwarp_resync" in a.text()
    whole = _data(analyze(CAPTURES / "siw_crc_write_bw.pcap"))
    assert d["messages"]["Write"] < whole.summary["directions"][0]["messages"]["Write"] or \
        d["bytes"] < whole.summary["directions"][0]["bytes"]
    top = LiveTop(idle_s=None)
    for blk in record_blocks(path, 1 << 12):
        top.feed_block(blk)
    (seen,) = [x for x in top.findings if x.kind == "iwarp_resync"]
    assert seen.connection is not None and f.text in seen.text


def test_no_resync_where_nothing_was_missed(tmp_path: Path) -> None:
    """No finding on the captures that miss nothing, nor where the missed segment comes late: the
    reassembly went on past the hole, then the late bytes completed every FPDU in it (the hole is taken
    back: the same messages and bytes as the whole capture; top takes back the finding it showed)."""
    for path in IWARP:
        assert not analyze(path).of_kind("iwarp_resync"), path.name
    late, _lost, _k = _hole(tmp_path, late=True)
    a = analyze(late)
    assert not a.of_kind("iwarp_resync")
    data, whole = _data(a), _data(analyze(CAPTURES / "siw_crc_write_bw.pcap"))
    assert data.summary["directions"] == whole.summary["directions"]
    assert data.summary["directions"][0]["resyncs"] == 0
    top = LiveTop(idle_s=None)
    for blk in record_blocks(late, 1 << 10):
        top.feed_block(blk)
    assert not [f for f in top.findings if f.kind == "iwarp_resync"] and not top.kinds["iwarp_resync"]


def test_captures_appended_reuse_the_ports_a_new_connection_each(tmp_path: Path) -> None:
    """The same capture appended to itself (mergecap -a): each SYN on the ports starts a new connection,
    as tshark starts a new tcp.stream, with the same counts; top retires the ended one into its totals."""
    src = CAPTURES / "siw_rping.pcap"
    dst = tmp_path / "twice.pcap"
    recs = list(records(src))
    with CaptureWriter(dst) as w:
        for rep in range(2):
            for r in recs:
                w.write(r.data, round(r.timestamp * 1e9) + rep * 10**9)
    (one,) = analyze(src).iwarp_connections
    a = analyze(dst)
    assert [c.summary["directions"] for c in a.iwarp_connections] == [one.summary["directions"]] * 2
    assert [c.id for c in a.iwarp_connections] == [0, 1] and a.iwarp_frames == 2 * 23
    top = LiveTop(idle_s=None)
    for blk in record_blocks(dst, 1 << 12):
        top.feed_block(blk)
    tot = top.totals()
    assert (tot["iwarp_connections"], len(top.iwarp_connections), top._iwarp.retired["connections"]) == (2, 1, 1)
    assert tot["iwarp_bytes"] == 2 * one.request_bytes


@requires_tshark
@pytest.mark.tshark
def test_every_capture_appended_as_tshark_counts_it(tmp_path: Path) -> None:
    """All the iWARP captures appended into one pcapng (mergecap -a, as Wireshark writes; every connection on
    other ports): one connection per tshark TCP stream that carries iWARP, in the order of their first frame,
    each counted as tshark counts it."""
    import shutil
    import subprocess

    if shutil.which("mergecap") is None:
        pytest.skip("mergecap (Wireshark) is not installed; CI installs it with tshark")
    merged = tmp_path / "all.pcapng"
    subprocess.run(["mergecap", "-a", "-F", "pcapng", "-w", str(merged), *map(str, IWARP)], check=True)
    theirs = _tshark_connections(merged)
    a = analyze(merged)
    mine = {(c.requester, c.requester_port, c.responder, c.responder_port): _mine(c) for c in a.iwarp_connections}
    assert len(mine) == len(a.iwarp_connections) == len(theirs) > 10
    assert mine == {k: {"dirs": [{**d, "messages": +d["messages"]} for d in v["dirs"]]} for k, v in theirs.items()}


def test_what_counts_as_a_tcp_retransmission() -> None:
    """Octets seen before: a retransmission (partly new: the octets seen count); a segment that fills a hole:
    out of order, not counted; a keep-alive (one octet just below the highest): not counted; across the
    sequence number's wrap."""
    from rdmalab.capture.iwarp_conns import _Side

    top = (1 << 32) - 1000
    s = _Side()
    s.segment(top, 500)           # [top, top+500)
    s.segment(top + 1500, 500)    # past a hole of 1000 (wraps past 2**32)
    assert (s.retx, s.retx_octets) == (0, 0)
    s.segment(top + 500, 1000)    # fills the hole: out of order
    assert (s.retx, s.retx_octets) == (0, 0)
    s.segment(top + 1999, 1)      # a keep-alive
    assert (s.retx, s.retx_octets) == (0, 0)
    s.segment((top + 1800) % (1 << 32), 400)  # 200 seen, 200 new
    assert (s.retx, s.retx_octets) == (1, 200)
    s.segment(top, 100)           # all seen
    assert (s.retx, s.retx_octets) == (2, 300)
