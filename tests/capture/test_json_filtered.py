"""``decode -T json -Y FILTER`` and ``decode -V -Y FILTER`` of a file whose filter the columns answer
(rdmalab.cli.decode._shown_and_decoded): the frames shown found by the columnar ``-T fields`` path, only those
and the TCP segments decoded one by one.  The text is the per-packet path's (``--no-columnar``) for every
filter below on every capture named, and that path's is held to tshark's elsewhere
(tests/capture/test_tsjson.py, tests/capture/test_tree_templates.py)."""

from __future__ import annotations

import io
import subprocess
import sys
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from rdmalab.cli import main

CAPTURES = Path(__file__).resolve().parents[2] / "captures"
FILTERS = [
    "infiniband.bth.opcode == 17", "tcp.analysis.retransmission", "tcp.stream == 1", "iwarp_rdma.opcode == 0",
    "udp", "ip.src == 10.0.0.2 && infiniband.bth.psn > 100", "frame.number > 5 && frame.number < 40",
    "tcp.len > 0", "icmpv6 || arp", "rdmalab.icrc.ok == 1", "infiniband.aeth.syndrome", "frame.time_delta > 0.001",
    "iwarp_mpa", "infiniband.bth.opcode == 17 && !tcp",
]


def _json(*args: str) -> str:
    buf = io.StringIO()
    with redirect_stdout(buf):
        assert main(["decode", "-T", "json", *args]) == 0
    return buf.getvalue()


def _trees(path: Path, *args: str) -> str:
    out = subprocess.run([sys.executable, "-m", "rdmalab", "decode", "-V", *args, "-r", str(path)], capture_output=True,
                         text=True, timeout=300, check=True)
    return out.stdout


@pytest.mark.parametrize("name", ["siw_write_bw.pcap", "rxe_send_bw_loss.pcap", "siw_crc_rping.pcap",
                                  "synthetic_all_opcodes_rocev2.pcap", "synthetic_iwarp_mpa_crc.pcap",
                                  "lo_icmp_unreachable.pcap"])
def test_the_per_packet_paths_text(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from rdmalab.cli import decode

    taken: list[str] = []
    real = decode._json_shown
    monkeypatch.setattr(decode, "_json_shown", lambda path, args, *rest: taken.append(args.filter) or real(path, args, *rest))
    path = str(CAPTURES / name)
    shown = 0
    for expr in FILTERS:
        got = _json("-Y", expr, "-r", path)
        assert got == _json("--no-columnar", "-Y", expr, "-r", path), expr
        shown += got.count('"_index"')
    assert shown > 0
    # (udp, tcp, icmpv6 and arp are the columns' to answer, FILTER_PROTOCOLS, and frame.time_delta,
    # FILTER_TIMES; iwarp_mpa not)
    assert len(taken) == 13 and "udp" in taken and "icmpv6 || arp" in taken and "iwarp_mpa" not in taken, taken
    assert "frame.time_delta > 0.001" in taken


def test_with_a_count_and_appended_captures(tmp_path: Path) -> None:
    """-c stops the frames shown where the per-packet path stops them; captures appended to each other (an
    iWARP stream after a RoCE one, its ports reused later) give the same text."""
    from rdmalab.capture.pcapwriter import write_capture
    from rdmalab.capture.reader import records

    path = tmp_path / "appended.pcap"
    recs = [r for name in ("rxe_write_bw.pcap", "siw_write_bw.pcap", "siw_write_bw.pcap")
            for r in records(CAPTURES / name)]
    write_capture(path, [(round(r.timestamp * 1e9), r.data) for r in recs])
    for expr in ("iwarp_rdma.opcode == 0", "tcp.analysis.retransmission", "infiniband.bth.opcode == 10 || tcp.flags.syn == 1"):
        for count in ([], ["-c", "150"]):
            assert _json(*count, "-Y", expr, "-r", str(path)) == _json("--no-columnar", *count, "-Y", expr, "-r",
                                                                          str(path)), (expr, count)


@pytest.mark.parametrize("name", ["siw_write_bw.pcap", "rxe_send_bw_loss.pcap", "siw_crc_rping.pcap",
                                  "synthetic_iwarp_mpa_crc.pcap"])
def test_trees_are_the_per_packet_paths(name: str) -> None:
    """-V -Y: each frame shown as the per-packet path writes its tree, with tshark's SEQ/ACK analysis."""
    path = CAPTURES / name
    frames = 0
    for expr in ("infiniband.bth.opcode == 17", "tcp.analysis.retransmission", "iwarp_rdma.opcode == 0",
                 "frame.number > 5 && frame.number < 40", "tcp.len > 0", "tcp.analysis.ack_rtt > 0"):
        got = _trees(path, "-Y", expr)
        assert got == _trees(path, "--no-columnar", "-Y", expr), expr
        frames += got.count("\nFrame ") + got.startswith("Frame ")
    assert frames > 0


def _hostile_segments(src: Path, dst: Path) -> Path:
    """``src``'s frames, and copies of its TCP segments made hard to read without decoding them: IPv4 options,
    a fragment, cut short, a TCP data offset past the datagram, a padding after the datagram, a VLAN tag; the
    copies go to other ports, so each hostile kind starts a stream of its own."""
    import struct

    import hostile

    out = []
    for t, data, wire in hostile.frames_of(src):
        out.append((t, data, wire))
        if data[12:14] != b"\x08\x00" or len(data) < 54 or data[23] != 6:
            continue
        ports = (data[34:36], data[36:38])
        for k, make in enumerate((
                lambda d: d[:14] + bytes([0x46]) + d[15:16] + struct.pack(">H", int.from_bytes(d[16:18], "big") + 4)
                + d[18:34] + b"\x01\x01\x01\x00" + d[34:],  # IPv4 options (NOPs)
                lambda d: d[:20] + b"\x20\x00" + d[22:],  # more fragments
                lambda d: d[:len(d) - 3] if len(d) > 60 else d[:56],  # cut short
                lambda d: d[:46] + bytes([0xF0 | d[46] & 0x0F]) + d[47:],  # a data offset of 60 octets
                lambda d: d + bytes(7),  # padding
                lambda d: d[:12] + b"\x81\x00\x00\x05" + d[12:])):  # a VLAN tag
            frame = make(data)
            at = 14 + (4 if frame[12:14] == b"\x81\x00" else 0) + 20 + (4 if k == 0 else 0)
            sport = (int.from_bytes(ports[0], "big") + 1000 * (k + 1)) & 0xFFFF
            frame = frame[:at] + struct.pack(">H", sport) + frame[at + 2:]
            out.append((t, frame, wire + len(frame) - len(data) if k != 2 else wire))
    hostile.write(dst, out)
    return dst


@pytest.mark.parametrize("name", ["siw_write_bw.pcap", "siw_crc_rping.pcap", "synthetic_iwarp_mpa_markers.pcap"])
def test_segments_fed_undecoded_give_the_streams_decoding_gives(name: str, tmp_path: Path) -> None:
    """The TCP segments a filter does not show are fed to the iWARP streams without decoding them
    (IwarpTracker.process_frame, for a plain segment over IPv4): every frame's PDUs are those a tracker fed
    decoded segments completes, on real iWARP captures and on copies of their segments made hostile (IPv4
    options, fragments, cut, a data offset past the datagram, padding, a VLAN tag), which it leaves to the
    decoder."""
    from rdmalab.capture.iwarp import IwarpTracker
    from rdmalab.capture.reader import decode_record, records

    path = _hostile_segments(CAPTURES / name, tmp_path / "hostile.pcap")
    decoded, fed = IwarpTracker(), IwarpTracker()
    taken = left = pdus = 0
    for rec in records(path):
        want = decode_record(rec, tracker=decoded).pdus
        got = fed.process_frame(rec.frame_number, rec.data)
        if got is None:
            got = decode_record(rec, tracker=fed).pdus
            left += rec.data[12:14] in (b"\x08\x00", b"\x81\x00") and len(rec.data) > 23
        else:
            taken += 1
        assert [frame_tree_of(p) for p in got] == [frame_tree_of(p) for p in want], rec.frame_number
        pdus += len(want)
    assert taken > 20 and left > 20 and pdus > 5, (taken, left, pdus)


def frame_tree_of(pkt: object) -> str:
    """A PDU's whole tree, to compare two (every layer, field and problem)."""
    from rdmalab.capture.render import packet_tree

    return "\n".join(packet_tree(pkt))  # type: ignore[arg-type]


@pytest.mark.parametrize("expr", ["infiniband.bth.opcode == 17", "tcp.len > 0", "tcp.stream == 3"])
def test_hostile_segments_not_shown_give_the_per_packet_text(expr: str, tmp_path: Path) -> None:
    """-T json -Y and -V -Y of a capture with hostile copies of its iWARP segments: the per-packet path's text."""
    path = str(_hostile_segments(CAPTURES / "siw_crc_rping.pcap", tmp_path / "hostile.pcap"))
    assert _json("-Y", expr, "-r", path) == _json("--no-columnar", "-Y", expr, "-r", path)
    assert _trees(Path(path), "-Y", expr) == _trees(Path(path), "--no-columnar", "-Y", expr)


@pytest.mark.parametrize("out", [["-V"], ["-T", "json"]])
def test_the_frame_numbers_reader_ends_with_the_command(out: list[str], tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The frame numbers found in worker processes are read by a generator that holds the workers; the command
    closes it when done.  Left to be collected, a TCP header said to run past its segment (its decode error kept
    in a reference cycle) held it, and the workers, until the interpreter's exit, which printed a traceback
    (EBADF: multiprocessing had closed its pipes first).  The garbage collector is off here, as at that exit."""
    import functools
    import gc
    import multiprocessing

    from hostile import frames_of, write  # tests/hostile.py

    import rdmalab.capture.blockpool as blockpool
    import rdmalab.capture.fieldtext as fieldtext

    frames = [f for name in ("siw_crc_read_bw.pcap", "siw_crc_rping.pcap") for f in frames_of(CAPTURES / name)] * 4
    t, d, w = frames[300]
    assert d[12:14] == b"\x08\x00" and d[23] == 6  # (an IPv4 TCP segment: its header length made 60 octets)
    frames[300] = (t, d[:46] + bytes([0xF0 | d[46] & 0x0F]) + d[47:], w)
    path = tmp_path / "long_header.pcap"
    write(path, frames)
    monkeypatch.setattr(blockpool, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(fieldtext, "BLOCK_BYTES", 16384)
    monkeypatch.setattr(fieldtext, "WORKER_BLOCK_BYTES", 16384)
    monkeypatch.setattr(fieldtext, "field_text", functools.partial(fieldtext.field_text, parallel_min_bytes=0,
                                                                   block_bytes=16384))
    gc.collect()
    gc.disable()
    try:
        with redirect_stdout(io.StringIO()) as buf:
            assert main(["decode", *out, "-Y", "tcp", "-j", "2", "-r", str(path)]) == 0
        left = multiprocessing.active_children()
    finally:
        gc.enable()
        gc.collect()
    assert "truncated TCP.data_offset" in buf.getvalue()
    assert not left, left
