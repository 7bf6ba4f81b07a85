"""tshark's TCP sequence analysis (``tcp.analysis.*``, rdmalab.capture.tcp_analysis) against tshark's own.

Compared frame by frame, every analysis field as ``-T fields`` writes it, on: every capture of
``captures/`` with TCP (siw's retransmissions and duplicate ACKs among them); the real captures appended
one after the other (each copy's segments again: retransmissions, spurious ones and keep-alives, at
times that go back); and a made conversation whose segments raise each flag tshark has (lost and
ACKed-unseen segments, duplicate ACKs and a fast retransmission, keep-alive and its ACK, window update,
window full, zero window, its probe and the probe's ACK, out-of-order, spurious and plain
retransmissions, and the ports reused by a SYN after the close: test_tcp_reused_ports.py has more).
tshark must give each flag there at least once, so that each is compared.
"""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tshark_util import requires_tshark

from rdmalab.capture.columnar import iter_columns, read_columns
from rdmalab.capture.fieldtext import _block_text
from rdmalab.capture.filter import FilterError, compile_filter
from rdmalab.capture.pcapwriter import write_capture
from rdmalab.capture.reader import records
from rdmalab.capture.tcp_analysis import ANALYSIS_FIELDS, FLAG_FIELDS, VALUE_FIELDS, Later, tree_lines
from rdmalab.cli import main
from rdmalab.wire.frame import encode_tcp_frame
from rdmalab.wire.net import TCP

ROOT = Path(__file__).resolve().parents[2]
WITH_TCP = [p for p in sorted((ROOT / "captures").glob("*.pcap")) if p.name.startswith(("siw", "rxe_", "synthetic_iwarp"))]

A, B = ("10.0.0.1", 40000), ("10.0.0.2", 7174)
MS = 1_000_000


def made_conversation() -> list[tuple[int, bytes]]:
    """One connection whose segments raise each of tshark's analysis flags (times in ns)."""
    out: list[tuple[int, bytes]] = []
    t = 1_795_000_000 * 1_000_000_000

    def seg(dt_ms: float, frm: tuple[str, int], seq: int, ack: int, n: int = 0, flags: int = TCP.ACK,
            window: int = 1000) -> None:
        nonlocal t
        t += int(dt_ms * MS)
        to = B if frm == A else A
        out.append((t, encode_tcp_frame(bytes(n), src_ip=frm[0], dst_ip=to[0], src_port=frm[1], dst_port=to[1],
                                        seq=seq, ack=ack, flags=flags | (TCP.PSH if n else 0), window=window)))

    seg(0, A, 1000, 0, flags=TCP.SYN)
    seg(1, B, 5000, 1001, flags=TCP.SYN | TCP.ACK)
    seg(1, A, 1001, 5001)  # (the first round trip: 2 ms)
    seg(10, A, 1001, 5001, 100)
    seg(1, A, 1201, 5001, 100)  # 1101..1200 not captured: lost segment
    seg(1, B, 5001, 1101)
    seg(1, B, 5001, 1101)  # duplicate ACK 1
    seg(1, B, 5001, 1101)  # duplicate ACK 2
    seg(2, A, 1101, 5001, 100)  # within 20 ms of the duplicates: fast retransmission
    seg(1, B, 5001, 1401)  # ACKs 1301..1400, never seen: ACKed unseen segment
    seg(50, A, 1300, 5001)  # one octet below the next: keep-alive
    seg(1, B, 5001, 1401)  # its ACK
    seg(1, B, 5001, 1401, window=1200)  # the same numbers, another window: window update
    seg(10, A, 1401, 5001, 1200)  # up to the window B offered: window full
    seg(1, B, 5001, 2601, window=0)  # zero window
    seg(200, A, 2601, 5001, 1)  # one octet into the zero window: probe
    seg(1, B, 5001, 2601, window=0)  # its ACK
    seg(1, B, 5001, 2601, window=1000)  # window update again
    seg(10, A, 2601, 5001, 100)
    seg(1, A, 2801, 5001, 100)  # a hole again (2701..2800)
    seg(0.5, A, 2701, 5001, 100)  # within the first round trip: out of order
    seg(1, B, 5001, 2901)
    seg(300, A, 2801, 5001, 100)  # data B has acknowledged: spurious retransmission
    seg(300, A, 2901, 5001, 100)
    seg(300, A, 2901, 5001, 100)  # not acknowledged, long after: retransmission
    seg(1, B, 5001, 3001, flags=TCP.ACK | TCP.FIN)
    seg(1, A, 3001, 5002, flags=TCP.ACK | TCP.FIN)
    seg(1, B, 5002, 3002)
    seg(100, A, 9000, 0, flags=TCP.SYN)  # the same ports again, another ISN: ports reused (a new stream)
    return out


def unseen_acknowledged() -> list[tuple[int, bytes]]:
    """ACKs of data the capture missed, again and again: repeated, duplicated, then moving on; and the
    other direction's data and ACKs between them (how often tshark says "ACKed unseen segment")."""
    out: list[tuple[int, bytes]] = []
    t = 1_795_000_100 * 1_000_000_000

    def seg(frm: tuple[str, int], seq: int, ack: int, n: int = 0, flags: int = TCP.ACK, window: int = 2000) -> None:
        nonlocal t
        t += 5 * MS
        to = B if frm == A else A
        out.append((t, encode_tcp_frame(bytes(n), src_ip=frm[0], dst_ip=to[0], src_port=frm[1], dst_port=to[1],
                                        seq=seq, ack=ack, flags=flags | (TCP.PSH if n else 0), window=window)))

    seg(A, 1000, 0, flags=TCP.SYN)
    seg(B, 5000, 1001, flags=TCP.SYN | TCP.ACK)
    seg(A, 1001, 5001)
    seg(A, 1001, 5001, 100)
    seg(B, 5001, 1301)  # 1101..1300 unseen
    seg(B, 5001, 1301)  # the same ACK again: a duplicate
    seg(B, 5001, 1301)
    seg(A, 1301, 5001, 100)
    seg(B, 5001, 1501)  # 1401..1500 unseen as well
    seg(B, 5001, 1501, 50)  # with data of its own
    seg(A, 1501, 5051, 100)
    seg(B, 5051, 1701)  # and again
    seg(A, 1701, 5051, 100)
    seg(B, 5051, 1801)  # at last, what was seen
    seg(B, 5051, 1801, window=1000)
    seg(A, 1801, 5051, 100)
    seg(B, 5051, 2001)  # unseen once more
    seg(B, 5051, 2001)
    seg(A, 2001, 5051, flags=TCP.ACK | TCP.FIN)
    seg(B, 5051, 2002, flags=TCP.ACK | TCP.FIN)
    seg(A, 2002, 5052)
    return out


def with_options(frame: bytes, options: bytes) -> bytes:
    """An Ethernet/IPv4/TCP frame of :func:`encode_tcp_frame` with TCP ``options`` (a multiple of four octets)
    put after its header: the lengths and the IPv4 checksum made again (tshark checks neither TCP's)."""
    ip = bytearray(frame[14:34])
    ip[2:4] = (int.from_bytes(ip[2:4], "big") + len(options)).to_bytes(2, "big")
    ip[10:12] = b"\0\0"
    total = sum(int.from_bytes(ip[i:i + 2], "big") for i in range(0, 20, 2))
    while total > 0xFFFF:
        total = (total & 0xFFFF) + (total >> 16)
    ip[10:12] = (~total & 0xFFFF).to_bytes(2, "big")
    tcp = bytearray(frame[34:54])
    tcp[12] = ((20 + len(options)) // 4) << 4
    return frame[:14] + bytes(ip) + bytes(tcp) + options + frame[54:]


def sack(*edges: int) -> bytes:
    """A SACK option (RFC 2018) of the blocks ``edges`` (left, right, left, right ...), after two NOPs."""
    return b"\x01\x01" + bytes((5, 2 + 4 * len(edges))) + b"".join(e.to_bytes(4, "big") for e in edges)


def acknowledged_values() -> list[tuple[int, bytes]]:
    """Segments whose analysis values tshark gives: ACKs of whole segments, of part of one, of several
    (the segment acknowledged is the oldest whose end the ACK is), at times that go back (a negative
    round trip), data with FIN, PSH now and then, and SACK options of one to four blocks, alone or in
    twos, which the bytes in flight of the other direction leave out (the first three blocks of the last
    option of the last segment), and segments without one after them."""
    out: list[tuple[int, bytes]] = []
    t = 1_795_000_300 * 1_000_000_000

    def seg(dt_ms: float, frm: tuple[str, int], seq: int, ack: int, n: int = 0, flags: int = TCP.ACK,
            options: bytes = b"") -> None:
        nonlocal t
        t += int(dt_ms * MS)
        to = B if frm == A else A
        frame = encode_tcp_frame(bytes(n), src_ip=frm[0], dst_ip=to[0], src_port=frm[1], dst_port=to[1],
                                 seq=seq, ack=ack, flags=flags, window=1000)
        out.append((t, with_options(frame, options) if options else frame))

    seg(0, A, 1000, 0, flags=TCP.SYN, options=b"\x04\x02\x01\x01")  # (SACK permitted)
    seg(1, B, 5000, 1001, flags=TCP.SYN | TCP.ACK, options=b"\x04\x02\x01\x01")
    seg(1, A, 1001, 5001)
    seg(1, A, 1001, 5001, 100)
    seg(1, A, 1101, 5001, 100, flags=TCP.ACK | TCP.PSH)
    seg(1, A, 1201, 5001, 100)
    seg(1, B, 5001, 1150)  # part of a segment: no tree
    seg(1, B, 5001, 1201)  # the end of the second segment
    seg(-5, B, 5001, 1301)  # the third, at a time before it was sent: a negative round trip
    for i in range(4):
        seg(1, A, 1301 + 100 * i, 5001, 100, flags=TCP.ACK | (TCP.PSH if i == 1 else 0))
    seg(1, B, 5001, 1401, options=sack(1501, 1601))  # (the first three segments' ends: one block)
    seg(1, A, 1701, 5001, 100)
    seg(1, B, 5001, 1401, options=sack(1501, 1601, 1801, 1901) + sack(1501, 1701))  # (two options: the last)
    seg(1, A, 1801, 5001, 100)
    seg(1, A, 1901, 5001, 100)
    seg(1, A, 1401, 5001, 100)  # a retransmission
    seg(1, B, 5001, 1401, options=b"\x01\x01\x05\x22" + b"".join(
        e.to_bytes(4, "big") for e in (1501, 1601, 1701, 1801, 1901, 2001, 2001, 2002)))  # (four blocks: three)
    seg(1, A, 2001, 5001, 100)
    seg(1, B, 5001, 1401)  # no option: none left out
    seg(1, A, 2101, 5001, 100)
    seg(1, B, 5001, 1601, 50, flags=TCP.ACK | TCP.PSH, options=sack(1701, 1801))  # with data of its own
    seg(1, A, 2201, 5051, 100)
    seg(1, B, 5051, 2301)
    seg(1, A, 2301, 5051, 100, flags=TCP.ACK | TCP.FIN)  # data and FIN: its octet is not in flight
    seg(1, B, 5051, 2402, 50, flags=TCP.ACK | TCP.FIN)
    seg(1, A, 2402, 5102)
    return out


def to_itself() -> list[tuple[int, bytes]]:
    """Segments from an address and port to the same address and port (a socket connected to itself):
    tshark keeps two directions all the same, each segment sent by the one and received by the other (so
    its data is never acknowledged: bytes in flight grow), with losses, duplicate ACKs and a keep-alive."""
    out: list[tuple[int, bytes]] = []
    t = 1_795_000_400 * 1_000_000_000

    def seg(seq: int, ack: int, n: int = 0, flags: int = TCP.ACK) -> None:
        nonlocal t
        t += MS
        out.append((t, encode_tcp_frame(bytes(n), src_ip=A[0], dst_ip=A[0], src_port=A[1], dst_port=A[1], seq=seq,
                                        ack=ack, flags=flags | (TCP.PSH if n else 0), window=1000)))

    seg(1000, 0, flags=TCP.SYN)
    seg(1000, 1001, flags=TCP.SYN | TCP.ACK)
    seg(1001, 1001)
    for k in range(3):
        seg(1001 + 100 * k, 1001 + 100 * k, 100)
        seg(1101 + 100 * k, 1101 + 100 * k)
        seg(1101 + 100 * k, 1101 + 100 * k)
    seg(1501, 1301, 100)  # (1401..1500 not captured)
    seg(1301, 1401)
    seg(1301, 1401)
    seg(1401, 1401, 100)
    seg(1400, 1601)
    return out


def lossy_conversation(seed: int, n: int = 400) -> list[tuple[int, bytes]]:
    """A bulk transfer A -> B with cumulative ACKs, as a capture point that loses, repeats and reorders
    frames would see it (seeded): some frames dropped, some twice, some swapped with the next; the
    sender retransmits what was not acknowledged; B's window now and then closes and opens."""
    rnd = random.Random(seed)
    frames: list[tuple[int, bytes]] = []
    t = 1_795_000_200 * 1_000_000_000

    def frame(frm: tuple[str, int], seq: int, ack: int, n_: int = 0, flags: int = TCP.ACK, window: int = 4000) -> None:
        nonlocal t
        t += rnd.choice((100_000, 400_000, 1 * MS, 5 * MS, 30 * MS))
        to = B if frm == A else A
        frames.append((t, encode_tcp_frame(bytes(n_), src_ip=frm[0], dst_ip=to[0], src_port=frm[1], dst_port=to[1],
                                           seq=seq % (1 << 32), ack=ack % (1 << 32),
                                           flags=flags | (TCP.PSH if n_ else 0), window=window)))

    isn_a, isn_b = rnd.randrange(1 << 32), rnd.randrange(1 << 32)
    frame(A, isn_a, 0, flags=TCP.SYN)
    frame(B, isn_b, isn_a + 1, flags=TCP.SYN | TCP.ACK)
    frame(A, isn_a + 1, isn_b + 1)
    sent, acked, window = isn_a + 1, isn_a + 1, 4000
    b_sent = b_acked = isn_b + 1  # (B sends some data too, from the odd seeds on: both directions)
    while len(frames) < n:
        r = rnd.random()
        if r < 0.55:
            size = rnd.choice((1, 100, 500, 1000))
            start = acked if rnd.random() < 0.15 else sent  # (a retransmission of the unacknowledged)
            if rnd.random() < 0.7:
                b_acked = rnd.randrange(b_acked, b_sent + 1)
            frame(A, start, b_acked, size)
            sent = max(sent, start + size)
        elif r < 0.85 or (r < 0.9 and seed % 2 == 0):
            acked = rnd.randrange(acked, sent + 1) if rnd.random() < 0.8 else acked
            window = 0 if rnd.random() < 0.05 else rnd.choice((window, 4000, 3000))
            frame(B, b_sent, acked, window=window)
        elif r < 0.9:
            size = rnd.choice((1, 200))
            frame(B, b_sent, acked, size, window=window)
            b_sent += size
        else:
            frame(A, sent - 1, b_acked)  # keep-alive
    shown: list[tuple[int, bytes]] = []
    for f in frames:
        r = rnd.random()
        if r < 0.08 and len(shown) > 3:
            continue  # lost at the capture point
        shown.append(f)
        if r > 0.95:
            shown.append((f[0] + 1000, f[1]))  # seen twice
    for i in range(3, len(shown) - 1):
        if rnd.random() < 0.04:  # reordered (the times stay in order)
            (ta, fa), (tb, fb) = shown[i], shown[i + 1]
            shown[i], shown[i + 1] = (ta, fb), (tb, fa)
    return shown


def appended(path: Path) -> None:
    """The real siw and rxe captures' frames, appended one after the other twice, times as read."""
    frames = []
    for _ in range(2):
        for src in WITH_TCP:
            if src.name.startswith(("siw", "rxe_send", "rxe_write_bw")):
                frames += [(r.ns if r.ns is not None else round(r.timestamp * 1e9), bytes(r.data)) for r in records(src)]
    write_capture(path, frames)


def _tshark(path: Path, names: tuple[str, ...]) -> list[str]:
    args = ["tshark", "-n", "-r", str(path), "-T", "fields", *(x for n in names for x in ("-e", n))]
    return subprocess.run(args, capture_output=True, text=True, check=True).stdout.splitlines()


def _ours(path: Path, names: tuple[str, ...], capsys: Any, *extra: str) -> list[str]:
    capsys.readouterr()
    assert main(["decode", "-r", str(path), "-T", "fields", *(x for n in names for x in ("-e", n)), *extra]) == 0
    return capsys.readouterr().out.splitlines()


#: the flags alone (no value, no tree): the first of ANALYSIS_FIELDS, after the frame number
FLAGS_ALONE = ("frame.number", "tcp.analysis.flags", *FLAG_FIELDS, "tcp.analysis.duplicate_ack_num",
               "tcp.analysis.duplicate_ack_frame")


def _same(path: Path, capsys: Any) -> list[str]:
    """tshark's fields of every frame, and rdmalab's the same on both paths: from columns (the default:
    rdmalab.capture.columnar_decode.fill_tcp_analysis) and per packet (render.Conversations); and the flags
    alone, asked for without a value (the columns then follow the flags alone: TcpAnalysis(values=False))."""
    names = ("frame.number", *ANALYSIS_FIELDS)
    assert names[:len(FLAGS_ALONE)] == FLAGS_ALONE
    theirs = _tshark(path, names)
    for extra in ((), ("--no-columnar",)):
        ours = _ours(path, names, capsys, *extra)
        assert len(ours) == len(theirs)
        bad = [(t, o) for t, o in zip(theirs, ours, strict=True) if t != o]
        assert not bad, f"{extra}: {len(bad)} frames differ from tshark's (tshark, rdmalab): {bad[:5]}"
    cut = ["\t".join(row.split("\t")[:len(FLAGS_ALONE)]) for row in theirs]
    alone = _ours(path, FLAGS_ALONE, capsys)
    bad = [(t, o) for t, o in zip(cut, alone, strict=True) if t != o]
    assert len(alone) == len(cut) and not bad, f"the flags alone: {len(bad)} frames differ from tshark's: {bad[:5]}"
    return theirs


def _written_and_compared(path: Path, frames: list[tuple[int, bytes]], capsys: Any) -> tuple[Path, list[list[str]]]:
    """The frames written to ``path``, compared with tshark (:func:`_same`); tshark's rows, split."""
    write_capture(path, frames)
    return path, [r.split("\t") for r in _same(path, capsys)]


@requires_tshark
@pytest.mark.tshark
@pytest.mark.parametrize("path", WITH_TCP, ids=lambda p: p.name)
def test_the_analysis_of_each_capture_is_tsharks(path: Path, capsys: Any) -> None:
    _same(path, capsys)


@requires_tshark
@pytest.mark.tshark
def test_the_analysis_of_captures_appended_is_tsharks(tmp_path: Path, capsys: Any) -> None:
    path = tmp_path / "appended.pcap"
    appended(path)
    rows = _same(path, capsys)
    flagged = [r for r in rows if r.split("\t")[1]]
    assert len(flagged) > 100  # (the second copy: retransmissions, keep-alives, duplicate ACKs)


@requires_tshark
@pytest.mark.tshark
def test_each_flag_of_a_made_conversation_is_tsharks(tmp_path: Path, capsys: Any) -> None:
    path, rows = _written_and_compared(tmp_path / "made.pcap", made_conversation(), capsys)
    given = {name for r in rows for name, v in zip(ANALYSIS_FIELDS, r[1:], strict=True) if v}
    assert given == set(ANALYSIS_FIELDS), f"tshark gives none of {sorted(set(ANALYSIS_FIELDS) - given)} here"
    # the filter picks the frames tshark's picks, and the summary lines of the per-packet path
    for flt in ("tcp.analysis.flags", "tcp.analysis.retransmission && !tcp.analysis.fast_retransmission",
                "tcp.analysis.duplicate_ack_num == 2", "tcp.analysis.window_full || tcp.analysis.zero_window_probe"):
        want = subprocess.run(["tshark", "-n", "-r", str(path), "-Y", flt, "-T", "fields", "-e", "frame.number"],
                              capture_output=True, text=True, check=True).stdout.split()
        assert _ours(path, ("frame.number",), capsys, "-Y", flt) == want, flt
        assert main(["decode", "-r", str(path), "-Y", flt]) == 0
        assert [line.split()[0] for line in capsys.readouterr().out.splitlines()] == want, flt


@requires_tshark
@pytest.mark.tshark
def test_acks_of_unseen_data_are_said_as_tshark_says_them(tmp_path: Path, capsys: Any) -> None:
    _path, rows = _written_and_compared(tmp_path / "unseen.pcap", unseen_acknowledged(), capsys)
    said = [r[0] for r in rows if r[1 + ANALYSIS_FIELDS.index("tcp.analysis.ack_lost_segment")]]
    assert 3 <= len(said) < 10  # (not on every ACK past the unseen octets)


@requires_tshark
@pytest.mark.tshark
def test_an_end_talking_to_itself_has_two_directions_as_in_tshark(tmp_path: Path, capsys: Any) -> None:
    _path, rows = _written_and_compared(tmp_path / "itself.pcap", to_itself(), capsys)
    assert sum(1 for r in rows if r[1]) >= 4
    assert any(r[1 + ANALYSIS_FIELDS.index("tcp.analysis.bytes_in_flight")] == "301" for r in rows)


@requires_tshark
@pytest.mark.tshark
@pytest.mark.parametrize("seed", range(6))
def test_a_lossy_capture_of_a_bulk_transfer_is_analysed_as_tshark_does(seed: int, tmp_path: Path, capsys: Any) -> None:
    _path, rows = _written_and_compared(tmp_path / f"lossy{seed}.pcap", lossy_conversation(seed), capsys)
    assert sum(1 for r in rows if r[1]) > 40  # (flags of many kinds here, each frame compared)


@requires_tshark
@pytest.mark.tshark
def test_the_columns_follow_the_analysis_from_block_to_block(tmp_path: Path, capsys: Any) -> None:
    """The columns of blocks far smaller than the capture (the state goes on from one to the next), of a
    raw IP capture (its columns made by the per-packet decoder), of a capture read from a pipe, and the
    Python API's (read_columns) hold the fields tshark gives, with one -E occurrence option too."""
    frames = lossy_conversation(1)
    path, rows = _written_and_compared(tmp_path / "lossy.pcap", frames, capsys)
    names = ("frame.number", *ANALYSIS_FIELDS)
    want = ["\t".join(r) for r in rows]
    small = list(iter_columns(path, block_bytes=4096, fields=names))
    assert len(small) > 20
    got = b"".join(_block_text(c, names, None, b"\t", b"") for c in small).decode().splitlines()
    assert got == want
    cols = read_columns(path)
    assert int(cols.present("tcp.analysis.flags").sum()) == sum(1 for r in rows if r[1])
    dup = ANALYSIS_FIELDS.index("tcp.analysis.duplicate_ack") + 1
    assert {f: got["tcp.analysis.duplicate_ack"] for f, got in cols.multi.items()} == {
        int(r[0]): [1, 1] for r in rows if r[dup]}
    raw = tmp_path / "raw.pcap"  # (the same segments without their Ethernet headers: link type RAW)
    write_capture(raw, [(t, f[14:]) for t, f in frames], linktype=101)
    assert _ours(raw, names, capsys) == _tshark(raw, names) == want
    first = subprocess.run(["tshark", "-n", "-r", str(path), "-T", "fields", "-e", "tcp.analysis.duplicate_ack",
                            "-E", "occurrence=f", "-E", "separator=,"], capture_output=True, text=True,
                           check=True).stdout.splitlines()
    assert _ours(path, ("tcp.analysis.duplicate_ack",), capsys, "-E", "occurrence=f") == first
    assert "1" in first
    piped = subprocess.run([sys.executable, "-m", "rdmalab", "decode", "-r", "-", "-T", "fields",
                            *(x for n in names for x in ("-e", n))], input=path.read_bytes(), capture_output=True,
                           check=True).stdout.decode().splitlines()
    assert piped == want


@requires_tshark
@pytest.mark.tshark
def test_the_values_of_acknowledged_and_sacked_segments_are_tsharks(tmp_path: Path, capsys: Any) -> None:
    """acks_frame, ack_rtt (negative too), initial_rtt, bytes_in_flight (less SACKed octets, less a FIN's)
    and push_bytes_sent, frame by frame, on both paths, and filters on them as tshark's."""
    path, rows = _written_and_compared(tmp_path / "values.pcap", acknowledged_values(), capsys)
    col = {name: 1 + ANALYSIS_FIELDS.index(name) for name in VALUE_FIELDS}
    bif = {int(r[0]): r[col["tcp.analysis.bytes_in_flight"]] for r in rows}
    # (tshark's answers, each compared: SACKed octets left out, 100 of 400, 300 of 700; none after a
    # segment without SACK; the FIN's octet left out)
    assert (bif[15], bif[21], bif[23], bif[27]) == ("300", "400", "800", "100"), bif
    assert any(r[col["tcp.analysis.ack_rtt"]].startswith("-") for r in rows)
    assert not any(r[col["tcp.analysis.initial_rtt"]] for r in rows if r[0] == "7")  # (part of a segment: no tree)
    for flt in ("tcp.analysis.ack_rtt > 0.0015", "tcp.analysis.ack_rtt < 0", "tcp.analysis.acks_frame == 5",
                "tcp.analysis.bytes_in_flight >= 300 && tcp.analysis.push_bytes_sent < 300",
                "tcp.analysis.initial_rtt == 0.002", "tcp.analysis.ack_rtt in {0.001 0.003}",
                "!tcp.analysis.initial_rtt && tcp", "tcp.analysis.ack_rtt == 1"):
        want = subprocess.run(["tshark", "-n", "-r", str(path), "-Y", flt.replace("{0.001 0.003}", "{0.001, 0.003}"),
                               "-T", "fields", "-e", "frame.number"], capture_output=True, text=True,
                              check=True).stdout.split()
        flt = flt.replace("{0.001 0.003}", "{0.001, 0.003}")
        for extra in ((), ("--no-columnar",)):
            assert _ours(path, ("frame.number",), capsys, "-Y", flt, *extra) == want, (flt, extra)
        if flt != "tcp.analysis.ack_rtt == 1":
            assert want, flt


@pytest.mark.parametrize("flt", ["tcp.analysis.retransmission == 1", "tcp.analysis.flags != 0",
                                 'tcp.analysis.keep_alive contains "x"', "tcp.analysis.window_full in {1}"])
def test_a_flag_is_a_label_not_a_value(flt: str) -> None:
    with pytest.raises(FilterError, match="is a label, present or not"):
        compile_filter(flt)


@requires_tshark
@pytest.mark.tshark
def test_the_analysis_tree_itself_is_a_label(tmp_path: Path, capsys: Any) -> None:
    """``tcp.analysis`` (tshark's SEQ/ACK analysis tree) on the segments that have it: a label, as tshark's
    (-e gives 1, a comparison is an error); -Y picks tshark's frames on both paths (the -T fields of every
    comparison above hold it too, ANALYSIS_FIELDS)."""
    with pytest.raises(FilterError, match="is a label, present or not"):
        compile_filter("tcp.analysis == 1")
    for name in (*ANALYSIS_FIELDS, "tcp.analysis.flags && tcp.len > 0", "tcp.analysis && !tcp.analysis.flags"):
        compile_filter(name)
    assert len(FLAG_FIELDS) == 15
    path = tmp_path / "values.pcap"
    write_capture(path, acknowledged_values())
    for flt in ("tcp.analysis", "!tcp.analysis && tcp", "tcp.analysis && !tcp.analysis.flags"):
        want = subprocess.run(["tshark", "-n", "-r", str(path), "-Y", flt, "-T", "fields", "-e", "frame.number"],
                              capture_output=True, text=True, check=True).stdout.split()
        assert want, flt
        for extra in ((), ("--no-columnar",)):
            assert _ours(path, ("frame.number",), capsys, "-Y", flt, *extra) == want, (flt, extra)
            assert main(["decode", "-r", str(path), "-Y", flt, *extra]) == 0
            assert [line.split()[0] for line in capsys.readouterr().out.splitlines()] == want, (flt, extra)


@requires_tshark
@pytest.mark.tshark
def test_a_stream_read_part_from_columns_part_per_packet_is_analysed_once(tmp_path: Path, capsys: Any) -> None:
    """One lossy conversation captured on two interfaces of a pcapng file: an Ethernet one (its frames read
    from columns) and a raw IP one (link type 101: its frames' columns made by the per-packet decoder), the
    segments taking turns in blocks of every size.  Both kinds of frame feed the one analysis of the
    reading, so each segment is weighed after all those before it, as tshark weighs them."""
    from rdmalab.capture.pcapwriter import CaptureWriter

    frames = lossy_conversation(3)
    path = tmp_path / "two-interfaces.pcapng"
    with CaptureWriter(path, format="pcapng") as w:
        raw = w.add_interface(101)
        for i, (ts, frame) in enumerate(frames):
            if (i // 5) % 3 == 2:  # five frames in fifteen through the raw interface
                w.write(frame[14:], ts, interface=raw)
            else:
                w.write(frame, ts)
    names = ("frame.number", *ANALYSIS_FIELDS)
    want = _same(path, capsys)  # both paths, each against tshark
    assert sum(1 for r in want if r.split("\t")[1]) > 10  # flags on both kinds of frame
    flagged_raw = [r for r in want if r.split("\t")[1] and ((int(r.split("\t")[0]) - 1) // 5) % 3 == 2]
    assert flagged_raw, "no flagged frame came through the per-packet interface"
    for block in (1024, 4096, 65536):
        got = b"".join(_block_text(c, names, None, b"\t", b"")
                       for c in iter_columns(path, block_bytes=block, fields=names)).decode().splitlines()
        assert got == want, block


def test_the_flags_lines_are_made_once_and_the_rto_goes_after_a_plain_retransmission() -> None:
    """``tree_lines`` takes a set of flags' lines from a memo (``_flag_lines``): the same text for every
    segment with those flags, a plain retransmission's RTO lines put between its own expert lines and the
    next flag's, never for a fast or spurious one, nor without an RTO; a duplicate ACK's line only with its pair."""
    retx, full = "tcp.analysis.retransmission", "tcp.analysis.window_full"
    values = (0, 0, 0, 0, 0, 1_500_000, 7)  # (no ACKed frame, RTT, iRTT or bytes in flight; an RTO of 1.5 ms)
    lines = tree_lines([retx, full], None, values)
    rto = lines.index("        [The RTO for this segment was: 0.001500000 seconds]")
    assert lines[rto + 1] == "        [RTO based on delta from frame: 7]"
    assert lines[rto - 1] == "            [Group: Sequence]" and "retransmission" in lines[rto - 3]
    assert "receiver is now completely full" in lines[rto + 2]
    assert tree_lines([retx, full], None, values) == lines  # (from the memo: the same)
    assert not any("RTO" in x for x in tree_lines([retx, full], None, values[:5] + (0, 0)))
    spurious = tree_lines([retx, "tcp.analysis.spurious_retransmission"], None, values)
    assert not any("RTO" in x for x in spurious) and sum("Expert Info" in x for x in spurious) == 2
    dup = "tcp.analysis.duplicate_ack"
    assert "        [This is a TCP duplicate ack]" in tree_lines([dup], (2, 5), values)
    assert "        [This is a TCP duplicate ack]" not in tree_lines([dup], None, values)
    assert Later([retx], None, values).tree() == ("\n        " + "\n        ".join(tree_lines([retx], None, values))).encode()
    assert Later([], None, None).tree() == b""
