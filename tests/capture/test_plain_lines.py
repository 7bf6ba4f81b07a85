"""Summary lines of the frames that carry nothing the lab decodes further, written from the columns
(columnar_summary._plain_rows, _plain_text): UDP to other ports than RoCEv2's, IP datagrams of other
protocols, Ethernet frames of other EtherTypes, ARP, ICMP and ICMPv6 messages that are neither errors nor
echoes.  Their text is the per-packet path's (``--no-columnar``) byte for byte, on frames of every such
shape with random fields, behind tags and not, cut by a snap length, damaged, and with display filters."""

from __future__ import annotations

import random
import struct
from pathlib import Path
from typing import Any

import pytest
from hostile import background_frames as _frames  # tests/hostile.py
from hostile import echo_frame, frames_of

from rdmalab.capture import columnar_summary
from rdmalab.capture.pcapwriter import write_capture
from rdmalab.cli import main


def _write(path: Path, frames: list[tuple[int, bytes, int]]) -> Path:
    # (the records' wire lengths: write_capture takes (time, bytes); cut frames keep their length on the wire)
    write_capture(path, [(t, d) for t, d, _w in frames])
    raw = bytearray(path.read_bytes())
    pos = 24
    for _t, d, w in frames:
        struct.pack_into("<I", raw, pos + 12, w)
        pos += 16 + len(d)
    path.write_bytes(bytes(raw))
    return path


def _both(args: list[str], capsys: Any) -> tuple[str, str]:
    assert main(["decode", *args]) == 0
    fast = capsys.readouterr().out
    assert main(["decode", "--no-columnar", *args]) == 0
    return fast, capsys.readouterr().out


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_plain_frames_are_written_from_the_columns_as_per_packet(seed: int, tmp_path: Path, capsys: Any,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Every kind, in every shape, with random fields, cut and damaged: the per-packet path's lines; and
    most frames (the whole, undamaged ones at least) were written from the columns."""
    frames = _frames(seed, 4000)
    path = _write(tmp_path / "plain.pcap", frames)
    taken: list[int] = []
    real = columnar_summary._plain_text

    def counting(*a: Any) -> Any:
        got = real(*a)
        taken.append(len(a[2]) - int(got[1].sum()))
        return got

    monkeypatch.setattr(columnar_summary, "_plain_text", counting)
    fast, ref = _both(["-r", str(path)], capsys)
    assert fast == ref
    assert fast.count("\n") == len(frames)
    assert sum(taken) >= 0.6 * len(frames), sum(taken)


@pytest.mark.parametrize("flt", ["udp", "arp", "icmpv6", "icmp", "eth.type == 0x88cc", "udp.length > 20",
                                 "vlan", "ip.ttl < 100", "!ip"])
def test_plain_frames_filtered(flt: str, tmp_path: Path, capsys: Any) -> None:
    path = _write(tmp_path / "plain.pcap", _frames(7, 800))
    fast, ref = _both(["-r", str(path), "-Y", flt], capsys)
    assert fast == ref
    assert fast  # (each filter keeps some)


def test_a_shape_the_columns_misread_is_left_to_the_decoder(tmp_path: Path, capsys: Any,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A shape whose frame the per-packet decoder writes otherwise than the columns would (here: made so
    by an Info that says more) is written by the decoder whole, not from the columns."""
    path = _write(tmp_path / "plain.pcap", _frames(5, 300))
    real_info, real_text = columnar_summary.info, columnar_summary._plain_text
    left: list[bool] = []

    def text(*a: Any) -> Any:
        got = real_text(*a)
        left.extend(got[1].tolist())
        return got

    monkeypatch.setattr(columnar_summary, "info", lambda cp, *a: real_info(cp, *a) + " (changed)")
    monkeypatch.setattr(columnar_summary, "_plain_text", text)
    assert main(["decode", "-r", str(path)]) == 0
    fast = capsys.readouterr().out
    assert main(["decode", "--no-columnar", "-r", str(path)]) == 0
    ref = capsys.readouterr().out
    assert left and all(left)  # every shape's frame disagreed: all its rows left to the decoder
    assert fast.replace(" (changed)", "") == ref
    assert fast.count(" (changed)") >= len(left)  # (their lines the decoder's, through the changed Info)


@pytest.mark.parametrize("fcs", [0, 4])
def test_plain_frames_of_a_capture_that_says_they_keep_their_fcs(fcs: int, tmp_path: Path, capsys: Any) -> None:
    """A pcap whose header says its frames keep 4 octets of FCS, or none (pcap-savefile(5): the F bit
    and bits 28-31 of the link type word): where each frame's payload ends, and a datagram said to run
    into the FCS, as the per-packet path has them."""
    rng = random.Random(fcs)
    frames = [(t, d + rng.randbytes(fcs), w + fcs) for t, d, w in _frames(11, 600)]
    path = _write(tmp_path / "fcs.pcap", frames)
    raw = bytearray(path.read_bytes())
    struct.pack_into("<I", raw, 20, 1 | 0x04000000 | (fcs // 2) << 28)
    path.write_bytes(bytes(raw))
    fast, ref = _both(["-r", str(path)], capsys)
    assert fast == ref
    assert fast.count("\n") == len(frames)


def test_records_longer_than_their_frames(tmp_path: Path, capsys: Any) -> None:
    """A record whose captured length is more than its length on the wire (a damaged record header): an IP
    datagram said to run past the frame's wire length is a problem for the per-packet decoder, and the
    columns leave such frames to it, RoCEv2 and TCP (real rxe and siw frames) as the rest."""
    root = Path(__file__).resolve().parents[2] / "captures"
    frames = [f for name in ("rxe_send_bw.pcap", "siw_rping.pcap") for f in frames_of(root / name)[:200]]
    frames += _frames(13, 400, damaged=False)
    frames = [(t, d, len(d) - 1 if i % 3 == 0 else w) for i, (t, d, w) in enumerate(frames)]
    fast, ref = _both(["-r", str(_write(tmp_path / "longer.pcap", frames))], capsys)
    assert fast == ref
    assert "expected at most the" in fast


@pytest.mark.parametrize("args", [[], ["-V"], ["-T", "json"], ["-T", "fields", "-e", "frame.number", "-e", "frame.len",
                                                               "-e", "frame.cap_len", "-e", "tcp.len"],
                                  ["-Y", "frame.len == 74"]])
def test_records_without_a_wire_length(args: list[str], tmp_path: Path, capsys: Any) -> None:
    """A record whose length on the wire is 0 (a damaged record header): its length is its captured one in
    every output and in filters, from the columns as from the per-packet decoder (the columns' frame.len
    was 0 while the lines, trees and JSON said the captured length)."""
    root = Path(__file__).resolve().parents[2] / "captures"
    frames = [f for name in ("rxe_send_bw.pcap", "siw_rping.pcap") for f in frames_of(root / name)[:120]]
    frames += _frames(17, 300, damaged=False)
    frames = [(t, d, 0 if i % 3 == 0 else w) for i, (t, d, w) in enumerate(frames)]
    fast, ref = _both([*args, "-r", str(_write(tmp_path / "nowire.pcap", frames))], capsys)
    assert fast == ref
    if args[:1] == ["-Y"]:
        assert fast.count("\n") >= 10


@pytest.mark.parametrize("args", [[], ["-V"], ["-T", "json"],
                                  ["-T", "fields", "-e", "frame.number", "-e", "ip.len", "-e", "tcp.len", "-e",
                                   "tcp.analysis.flags", "-e", "tcp.analysis.bytes_in_flight", "-e", "rdmalab.pdus",
                                   "-e", "iwarp_rdma.opcode", "-e", "infiniband.bth.psn"]])
def test_ipv4_total_length_zero(args: list[str], tmp_path: Path, capsys: Any) -> None:
    """An IPv4 total length of 0 (left for a NIC that segments to fill in): the datagram is the frame's as
    captured, for the TCP segment's length, its analysis and the iWARP streams it feeds, as the per-packet
    decoder takes it (the columns took its payload for empty: no bytes in flight, an ACK of an unseen
    segment after it, its FPDUs lost)."""
    root = Path(__file__).resolve().parents[2] / "captures"
    frames = [f for name in ("siw_crc_rping.pcap", "siw_write_bw.pcap", "rxe_send_bw.pcap")
              for f in frames_of(root / name)[:150]]
    zeroed = []
    for i, (t, d, w) in enumerate(frames):
        if i % 4 == 1 and d[12:14] == b"\x08\x00":
            d = d[:16] + bytes(2) + d[18:]
        zeroed.append((t, d, w))
    fast, ref = _both([*args, "-r", str(_write(tmp_path / "tso.pcap", zeroed))], capsys)
    assert fast == ref


@pytest.mark.parametrize("six", [False, True])
def test_echo_replies_shown_alone_still_name_their_requests(six: bool, tmp_path: Path, capsys: Any) -> None:
    """A filter that shows the replies alone (their source): the requests it drops are paired all the
    same, in order, and each reply's line names its request, as the per-packet path has it."""
    rng = random.Random(3)
    a, b = (bytes(15) + b"\1", bytes(15) + b"\2") if six else (bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2]))
    frames = []
    for i in range(40):
        req_frame, req = echo_frame(rng, six, ends=(a, b))
        frames.append((1_700_000_000_000_000_000 + i * 2_000_000, req_frame, len(req_frame)))
        frames += [(1_700_000_000_000_000_000 + i * 2_000_000 + (k + 1) * 100_000, d, w) for k, (_t, d, w) in enumerate(_frames(i, 3, damaged=False))]
        rep_frame, _r = echo_frame(rng, six, req)
        frames.append((1_700_000_000_000_000_000 + i * 2_000_000 + 1_000_000, rep_frame, len(rep_frame)))
    frames.sort(key=lambda f: f[0])
    src = "ipv6.src == ::2" if six else "ip.src == 10.0.0.2"
    fast, ref = _both(["-r", str(_write(tmp_path / "pings.pcap", frames)), "-Y", src], capsys)
    assert fast == ref
    assert fast.count("(request in ") >= 30
