"""tshark's ``tcp.analysis.reused_ports`` and the ``tcp.stream`` numbers that go with it, against tshark's own.

tshark 4.0 (packet-tcp.c, ``dissect_tcp``, right after it finds the frame's conversation): a SYN whose
sender's base sequence number is set (its last SYN's, else one before its first segment's, else one
before the other side's first ACK of it: TCP_S_BASE_SEQ_SET) and whose sequence number is another has the
ports reused: without ACK it starts a new conversation (``conversation_new``: a new ``tcp.stream``, the
analysis and the relative numbers afresh from it), with ACK it stays in its own; both are flagged
(TCP_A_REUSED_PORTS: "[TCP Port numbers reused] ", the expert information first under the flags).  Neither
FIN nor RST counts: a SYN on an open conversation is reused ports as well, and a SYN with its old number
after a FIN a retransmission.

Made captures: a connection closed by FIN then opened again on the same ports with another ISN; closed by
RST (either side); a SYN retransmitted (not reused); a new SYN on an open connection; a SYN after
mid-stream data whose start was not captured (and one with the number the data gives, not reused); SYN/ACKs
with another number (reused in their own stream, with a retransmission or a lost segment); a SYN back to an
older ISN (a third stream).  Compared with tshark: ``-T fields`` (streams, relative numbers, the flags and
values), the summary lines' Info prefixes, ``-V`` SEQ/ACK trees and ``-T json``, on the columnar path and
per packet, in small blocks and in worker processes.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from test_tcp_analysis import MS, A, B
from tshark_util import requires_tshark

from rdmalab.capture.columnar_summary import summary_bytes
from rdmalab.capture.fieldtext import field_text
from rdmalab.capture.pcapwriter import write_capture
from rdmalab.capture.tcp_analysis import EXPERT, FLAG_FIELDS, INFO_PREFIXES, info_prefix
from rdmalab.cli import main
from rdmalab.wire.frame import encode_tcp_frame
from rdmalab.wire.net import TCP

SYN, SYN_ACK, ACK, FIN, RST = TCP.SYN, TCP.SYN | TCP.ACK, TCP.ACK, TCP.FIN | TCP.ACK, TCP.RST
#: a segment: sender, seq, ack, octets of data, flags, ms since the one before
Step = tuple[tuple[str, int], int, int, int, int, float]

NAMES = ("frame.number", "tcp.stream", "tcp.seq", "tcp.ack", "tcp.nxtseq", "tcp.analysis.flags",
         "tcp.analysis.reused_ports", "tcp.analysis.retransmission", "tcp.analysis.spurious_retransmission",
         "tcp.analysis.out_of_order", "tcp.analysis.lost_segment", "tcp.analysis.ack_lost_segment",
         "tcp.analysis.acks_frame", "tcp.analysis.initial_rtt", "tcp.analysis.bytes_in_flight")


def frames(steps: list[Step], t0: int = 1_795_000_500 * 1_000_000_000,
           ends: tuple[tuple[str, int], tuple[str, int]] = (A, B)) -> list[tuple[int, bytes]]:
    """The frames of ``steps`` between ``ends`` (the first's A, the second's B), from ``t0`` (ns)."""
    out = []
    t = t0
    a, b = ends
    for frm, seq, ack, n, flags, dt in steps:
        t += int(dt * MS)
        src, dst = (a, b) if frm == A else (b, a)
        out.append((t, encode_tcp_frame(bytes(n), src_ip=src[0], dst_ip=dst[0], src_port=src[1], dst_port=dst[1],
                                        seq=seq % (1 << 32), ack=ack % (1 << 32),
                                        flags=flags | (TCP.PSH if n else 0), window=1000)))
    return out


def connection(isn_a: int, isn_b: int, close: str | None = "fin", data: int = 100) -> list[Step]:
    """A handshake, data and its ACK, then closed: by FIN both ways ("fin"), RST from A ("rst") or from B
    ("rst-b"), or left open (None)."""
    steps: list[Step] = [(A, isn_a, 0, 0, SYN, 1), (B, isn_b, isn_a + 1, 0, SYN_ACK, 1),
                         (A, isn_a + 1, isn_b + 1, 0, ACK, 1), (A, isn_a + 1, isn_b + 1, data, ACK, 1),
                         (B, isn_b + 1, isn_a + 1 + data, 0, ACK, 1)]
    end = isn_a + 1 + data
    if close == "fin":
        steps += [(A, end, isn_b + 1, 0, FIN, 1), (B, isn_b + 1, end + 1, 0, FIN, 1), (A, end + 1, isn_b + 2, 0, ACK, 1)]
    elif close == "rst":
        steps.append((A, end, isn_b + 1, 0, RST | TCP.ACK, 1))
    elif close == "rst-b":
        steps.append((B, isn_b + 1, end, 0, RST, 1))
    return steps


#: name -> the segments of one made capture (each a case of the module's docstring)
CASES: dict[str, list[Step]] = {
    "fin": connection(1000, 5000) + connection(9000, 7000),
    "rst": connection(1000, 5000, "rst") + connection(9000, 7000),
    "rst-b": connection(1000, 5000, "rst-b") + connection(9000, 7000),
    "syn-retransmitted": [(A, 1000, 0, 0, SYN, 1), (A, 1000, 0, 0, SYN, 1000)] + connection(1000, 5000)[1:],
    "open": connection(1000, 5000, None) + connection(9000, 7000),
    "same-isn-after-fin": connection(1000, 5000) + connection(1000, 7000),  # (a retransmission; the SYN/ACK reused)
    "mid-stream": [(A, 3000, 8000, 100, ACK, 1), (B, 8000, 3100, 0, ACK, 1), (A, 3100, 8000, 100, ACK, 1)]
    + connection(9000, 7000),
    "mid-stream-ack-alone": [(B, 8000, 3100, 0, ACK, 1)] + connection(9000, 7000),  # (A's base from B's ACK)
    # (a SYN with the number one before the data's: the base, not reused; B's SYN/ACK is)
    "mid-stream-same-base": [(B, 8000, 3100, 50, ACK, 1), (A, 3099, 0, 0, SYN, 1), (B, 7000, 3100, 0, SYN_ACK, 1),
                             (A, 3100, 7001, 0, ACK, 1)],
    "syn-ack-reused": [(B, 8000, 3100, 50, ACK, 1), (A, 3100, 8050, 0, ACK, 1),
                       (B, 7990, 3100, 20, SYN_ACK, 100),  # (acknowledged data: a spurious retransmission too)
                       (B, 8100, 3100, 50, ACK, 1), (B, 6000, 3100, 0, SYN_ACK, 100), (B, 5000, 3100, 0, SYN_ACK, 1)],
    "back-to-an-older-isn": connection(1000, 5000) + [(A, 9000, 0, 0, SYN, 1), (A, 9000, 0, 0, SYN, 1)]
    + connection(1000, 7000),
    "syn-with-data": [(A, 1000, 0, 20, SYN, 1), (A, 1000, 0, 20, SYN, 1), (A, 1500, 0, 20, SYN, 1)],
}


def many() -> list[tuple[int, bytes]]:
    """Port pairs whose connections are opened again and again (each case above on ports of its own, then
    all of them once more with other ISNs), interleaved frame by frame: enough frames for small blocks
    and workers, a SYN often in another block than the segments that gave its base."""
    out = []
    for i, steps in enumerate(list(CASES.values()) * 5):
        turn, case = divmod(i, len(CASES))  # (each turn 5 s after the one before, the cases 10 us apart)
        shift = turn * 100_000
        moved = [(frm, seq + shift, ack + shift if ack else 0, n, flags, dt) for frm, seq, ack, n, flags, dt in steps]
        out += frames(moved, t0=(1_795_001_000 + 5 * turn) * 1_000_000_000 + case * 10_000,
                      ends=(("10.0.1.1", 41000 + case), ("10.0.2.2", 7174)))
    return sorted(out, key=lambda x: x[0])


def reused_ports_capture(path: Path) -> Path:
    """Every case above in one capture, each on ports of its own (for test_tcp_info_prefix.py's made captures:
    every flag's text and expert information seen)."""
    got = []
    for i, steps in enumerate(CASES.values()):
        got += frames(steps, t0=(1_795_000_600 + 10 * i) * 1_000_000_000,
                      ends=(("10.0.3.1", 42000 + i), ("10.0.3.2", 7174)))
    write_capture(path, got)
    return path


def _tshark(path: Path, *args: str) -> str:
    return subprocess.run(["tshark", "-n", "-r", str(path), *args], capture_output=True, text=True,
                          check=True).stdout


def _fields_args(names: tuple[str, ...] = NAMES) -> list[str]:
    return ["-T", "fields", *(x for n in names for x in ("-e", n))]


def _ours(path: Path, capsys: Any, *args: str) -> str:
    capsys.readouterr()
    assert main(["decode", "-r", str(path), *args]) == 0
    return str(capsys.readouterr().out)


def _written(tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.pcap"
    write_capture(path, frames(CASES[name]))
    return path


def _same_fields(path: Path, capsys: Any) -> list[list[str]]:
    """tshark's -T fields and rdmalab's on both paths, the same; tshark's rows."""
    want = _tshark(path, *_fields_args())
    for how in ((), ("--no-columnar",)):
        got = _ours(path, capsys, *_fields_args(), *how)
        assert got.splitlines() == want.splitlines(), (path.name, how)
    return [line.split("\t") for line in want.splitlines()]


@requires_tshark
@pytest.mark.tshark
@pytest.mark.parametrize("name", list(CASES))
def test_the_streams_and_the_flags_are_tsharks(name: str, tmp_path: Path, capsys: Any) -> None:
    rows = _same_fields(_written(tmp_path, name), capsys)
    reused = [int(r[0]) for r in rows if r[6]]
    streams = [int(r[1]) for r in rows]
    # (what tshark 4.0 does, the cases as the module's docstring says)
    expected = {"fin": ([9], 2), "rst": ([7], 2), "rst-b": ([7], 2), "syn-retransmitted": ([], 1),
                "open": ([6], 2), "same-isn-after-fin": ([10], 1), "mid-stream": ([4], 2),
                "mid-stream-ack-alone": ([2], 2), "mid-stream-same-base": ([3], 1),
                "syn-ack-reused": ([3, 5, 6], 1), "back-to-an-older-isn": ([9, 11], 3), "syn-with-data": ([3], 2)}
    assert (reused, len(set(streams))) == expected[name]
    for r in rows:
        if r[6]:
            assert r[5] == "1"  # (one of the flags)
    if name == "fin":  # the new connection: numbers afresh from its SYN, its first round trip its own
        assert [r[2] for r in rows[8:11]] == ["0", "0", "1"]
        assert rows[10][13] and rows[10][13] == rows[2][13]


@requires_tshark
@pytest.mark.tshark
def test_a_filter_on_the_flag(tmp_path: Path, capsys: Any) -> None:
    """``-Y tcp.analysis.reused_ports`` (a label: present or not) keeps tshark's lines, on both paths; and
    ``tcp.analysis.flags`` the frames it flags as well."""
    path = reused_ports_capture(tmp_path / "all.pcap")
    for flt in ("tcp.analysis.reused_ports", "tcp.analysis.flags && !tcp.analysis.reused_ports",
                "tcp.stream == 1 && tcp.flags.syn == 1"):
        want = _tshark(path, "-Y", flt, "-T", "fields", "-e", "frame.number", "-e", "tcp.stream")
        assert want.strip()
        for how in ((), ("--no-columnar",)):
            got = _ours(path, capsys, "-Y", flt, "-T", "fields", "-e", "frame.number", "-e", "tcp.stream", *how)
            assert got == want, (flt, how)


def test_the_text_and_expert_information() -> None:
    """packet-tcp.c's texts: the ports reused are said first (prepended first: last in front of Info), and
    their expert information comes first under the flags."""
    assert "tcp.analysis.reused_ports" in FLAG_FIELDS
    assert info_prefix(["tcp.analysis.reused_ports"]) == "[TCP Port numbers reused] "
    assert info_prefix(["tcp.analysis.out_of_order", "tcp.analysis.reused_ports"]) == \
        "[TCP Out-Of-Order] [TCP Port numbers reused] "
    assert info_prefix(["tcp.analysis.retransmission", "tcp.analysis.spurious_retransmission",
                        "tcp.analysis.reused_ports"]) == "[TCP Spurious Retransmission] [TCP Port numbers reused] "
    assert INFO_PREFIXES[-1][0] == EXPERT[0][0] == "tcp.analysis.reused_ports"
    assert EXPERT[0][1:] == ("Note", "A new tcp session is started with the same ports as an earlier session in this trace")


@requires_tshark
@pytest.mark.tshark
def test_info_trees_and_json_are_tsharks(tmp_path: Path, capsys: Any, monkeypatch: Any) -> None:
    """The summary lines' Info prefixes, ``-V`` SEQ/ACK trees and ``-T json``'s ``tcp.analysis`` members,
    as test_tcp_info_prefix.py compares them (both paths; JSON in worker processes too)."""
    from test_tcp_info_prefix import _compared, _same_json, _same_trees

    path = reused_ports_capture(tmp_path / "all.pcap")
    n = sum(1 for x in _tshark(path, "-T", "fields", "-e", "tcp.analysis.reused_ports").splitlines() if x)
    assert n == 14
    want = _compared(path, capsys)
    assert sum("[TCP Port numbers reused] " in text for text in want.values()) == n
    assert {"[TCP Out-Of-Order] [TCP Port numbers reused] ", "[TCP Retransmission] [TCP Port numbers reused] ",
            "[TCP Spurious Retransmission] [TCP Port numbers reused] ",
            "[TCP Previous segment not captured] [TCP Port numbers reused] "} <= set(want.values())
    trees = _same_trees(path, capsys)
    message = "[Expert Info (Note/Sequence): A new tcp session is started with the same ports as an earlier session"
    assert sum(any(x.strip().startswith(message) for x in tree) for tree in trees.values()) == n
    members = _same_json(path, capsys, monkeypatch)
    assert sum("tcp.analysis.reused_ports" in repr(m) for m in members.values()) == n


@requires_tshark
@pytest.mark.tshark
def test_in_blocks_and_worker_processes(tmp_path: Path, capsys: Any) -> None:
    """Many connections opened again on their ports, interleaved: tshark's fields in blocks far smaller
    than the capture (a SYN's base from an earlier block), in one process and in workers (-j 2), and its
    summary lines' prefixes and trees, the same in blocks and workers."""
    from test_tcp_info_prefix import prefixes, seq_ack_trees

    from rdmalab.capture.tree_templates import tree_blocks

    path = tmp_path / "many.pcap"
    write_capture(path, many())
    want = _tshark(path, *_fields_args())
    rows = [r.split("\t") for r in want.splitlines()]
    assert len(rows) > 500 and sum(1 for r in rows if r[6]) > 30
    assert _ours(path, capsys, *_fields_args(), "-j", "2") == want
    assert _ours(path, capsys, *_fields_args(), "--no-columnar") == want
    for block in (1024, 4096):
        for workers in (1, 2):
            got = b"".join(field_text(path, NAMES, workers=workers, block_bytes=block, parallel_min_bytes=0)).decode()
            assert got == want, (block, workers)
    theirs = _tshark(path)
    whole = _ours(path, capsys, "-j", "2")
    assert prefixes(whole) == prefixes(theirs)
    assert sum("Port numbers reused" in p for p in prefixes(whole).values()) == sum(1 for r in rows if r[6])
    for block in (1024, 65536):
        for workers in (1, 2):
            got = b"".join(summary_bytes(path, block_bytes=block, workers=workers, parallel_min_bytes=0)).decode()
            assert got == whole, (block, workers)
    trees = _ours(path, capsys, "-V")
    assert seq_ack_trees(trees, 8) == seq_ack_trees(_tshark(path, "-V"), 4)
    for workers in (1, 2):
        got = b"".join(tree_blocks(path, block_bytes=2048, workers=workers, parallel_min_bytes=0)).decode()
        assert got == trees, workers


def overlapping() -> list[tuple[int, bytes]]:
    """The cases again and again on the same few ports, their turns overlapping in time (connections on one
    pair of ports mixed up), every segment with 1,100 more octets: SYN/ACKs with data on numbers of other
    turns (bytes in flight counted from where each SYN starts the numbers again)."""
    out = []
    cases = list(CASES.values())
    for i in range(96):
        turn = i // 24
        moved = [(f, s + turn * 100_000, a + turn * 100_000 if a else 0, n + 1100, fl, dt)
                 for f, s, a, n, fl, dt in cases[i % len(cases)]]
        out += frames(moved, t0=(1_795_003_000 + 3 * (i % 24)) * 1_000_000_000 + turn * 10_000 + (i % 7) * 1000,
                      ends=(("10.1.0.1", 30000 + i % 24), ("10.2.0.2", 7174)))
    return sorted(out, key=lambda x: x[0])


@requires_tshark
@pytest.mark.tshark
def test_connections_on_the_same_ports_overlapping(tmp_path: Path, capsys: Any) -> None:
    """Streams, relative numbers, the ports reused, lost and ACKed-unseen segments and bytes in flight as
    tshark's, on both paths (the retransmissions' kinds left out: out-of-order or not, tshark's timing there
    is not followed: docs/captures.md)."""
    path = tmp_path / "overlapping.pcap"
    write_capture(path, overlapping())
    names = tuple(n for n in NAMES if "retransmission" not in n and "out_of_order" not in n)
    want = _tshark(path, *_fields_args(names))
    rows = [r.split("\t") for r in want.splitlines()]
    assert sum(1 for r in rows if r[names.index("tcp.analysis.reused_ports")]) > 100
    assert sum(1 for r in rows if r[names.index("tcp.analysis.bytes_in_flight")]) > 200
    for how in ((), ("--no-columnar",)):
        assert _ours(path, capsys, *_fields_args(names), *how) == want, how
