"""``rdmalab decode -V`` from per-header templates (rdmalab.capture.tree_templates): every tree is the
per-packet decoder's tree (render.frame_tree, with tshark's SEQ/ACK analysis where a TCP segment has one, as
``decode -V`` puts it in), on every capture in captures/ (RoCEv1/v2, native IB in
ERF, iWARP with markers and CRCs, CM, UD, losses), on damaged frames, and in blocks of any size."""

from __future__ import annotations

import glob
import os
import random
import struct
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import hostile  # tests/hostile.py: frames made hostile, or sent another way
import numpy as np
import pytest
from rdmalab_modules import wire_header_classes  # tests/rdmalab_modules.py

from rdmalab.capture import read, render, tree_templates
from rdmalab.capture.fields import frame_fields
from rdmalab.capture.header_text import header_int_fn, header_lines
from rdmalab.capture.iwarp import IwarpTracker
from rdmalab.capture.pcapwriter import write_capture
from rdmalab.capture.reader import records
from rdmalab.capture.tcp_analysis import fields_tree
from rdmalab.capture.tree_templates import SPECIAL, fast_frame, header_text_fn, templatable, tree_blocks
from rdmalab.cli import main
from rdmalab.wire import ib, net
from rdmalab.wire import iwarp as iwarp_wire
from rdmalab.wire.crc import icrc_rocev2
from rdmalab.wire.frame import encode_rocev2
from rdmalab.wire.header import Header

ROOT = Path(__file__).resolve().parents[2]
CAPTURES = sorted(glob.glob(str(ROOT / "captures" / "*.pcap")))


def _per_packet(path: str | Path, count: int | None = None) -> str:
    """The per-packet trees, each TCP segment's with tshark's SEQ/ACK analysis put in as ``decode -V
    --no-columnar`` puts it (the analysis fed every TCP segment, and an ICMP error's quote, in order)."""
    conversations = render.Conversations(analysis=True)
    windows = render.TcpWindowScaling()
    out = []
    for cp in read(path, count=count):
        lines: list[str] = []
        if cp.packet.get(net.TCP) is not None or cp.packet.quoted is not None:
            fields = frame_fields(cp, windows=windows)
            conversations.add(fields, cp.packet, windows)
            lines = fields_tree(fields)
        out.append(render.with_analysis_tree(render.frame_tree(cp), lines) + "\n\n")
    return "".join(out)


def _fast(path: str | Path, **kw: int) -> str:
    return b"".join(tree_blocks(path, **kw)).decode()


@pytest.mark.parametrize("path", CAPTURES, ids=os.path.basename)
def test_trees_are_the_per_packet_trees(path: str) -> None:
    assert _fast(path) == _per_packet(path)


def test_small_blocks_and_a_count() -> None:
    """Block boundaries anywhere (a block of a few records), and -c inside a block."""
    path = ROOT / "captures" / "siw_crc_send_bw.pcap"
    assert _fast(path, block_bytes=700) == _per_packet(path)
    assert _fast(path, count=7, block_bytes=700) == _per_packet(path, count=7)
    assert list(tree_blocks(path, count=0)) == []


def _appended(tmp_path: Path, names: list[str]) -> Path:
    """The records of several captures in one file, one after the other (as ``mergecap -a`` makes them)."""
    recs = [r for name in names for r in records(ROOT / "captures" / name)]
    path = tmp_path / "appended.pcap"
    write_capture(path, [(int(r.timestamp * 1e9), r.data) for r in recs], nano=True)
    return path


def test_trees_in_workers_are_the_trees(tmp_path: Path) -> None:
    """-V in worker processes (every frame but the TCP segments written there, those here, in order,
    with the iWARP reassembly): the same text as in one process, blocks cut anywhere, with a count,
    on RoCE, iWARP (CRC, markers, Read), CM, plain TCP, damaged frames and other link layers."""
    names = ["siw_crc_send_bw.pcap", "rxe_read_bw.pcap", "siw_write_bw.pcap", "rxe_imm.pcap", "siw_read_bw.pcap"]
    path = _appended(tmp_path, names)
    one = _fast(path)
    assert "        RDMAP  [" in one and "RDMA Read Response" in one and "RDMA READ Response" in one  # iWARP, RoCE
    for block in (700, 1 << 20):
        got = b"".join(tree_blocks(path, workers=2, parallel_min_bytes=0, block_bytes=block)).decode()
        assert got == one
    got = b"".join(tree_blocks(path, workers=2, parallel_min_bytes=0, count=333, block_bytes=700)).decode()
    assert got == _fast(path, count=333)
    for path in (_damaged(tmp_path), *[p for p in CAPTURES if "erf" not in p]):
        assert b"".join(tree_blocks(path, workers=2, parallel_min_bytes=0)).decode() == _fast(path), path


def _fpdus_as_decoded(data: bytes, crc: bool) -> tuple[str, str]:
    """The Summary and PDU trees of the FPDUs ``data`` is made of, decoded (what the stream writes)."""
    pdus, at = [], 0
    while at < len(data):
        pkt, n = iwarp_wire.decode_fpdu(data, at, crc=crc, lenient=True)
        pdus.append(pkt)
        at += n
    return render.pdus_info(pdus), "\n" + "\n".join(render.pdu_lines(pdus))


def test_fpdus_written_from_their_octets_are_the_decoded_ones() -> None:
    """The FPDUs a worker writes from their octets (tree_templates._lanes): the same Summary and trees as
    the FPDUs decoded, for each kind it takes (RDMA Write, Read Response, Send, Send with SE, Read Request:
    pad or none, payloads shorter than a payload line shows and longer, last or not, several in a segment)
    with the CRC checked and not; a segment with another kind or a Send that begins a message of several
    is not taken, one with a bad CRC only as not looked at."""
    ulpdus = [iwarp_wire.rdma_write(0x7457DC00, 0x55FA02A6C000, bytes(range(200)), last=False),
              iwarp_wire.rdma_write(1, 0, b"x"), iwarp_wire.read_response(0xABCDEF01, 1 << 63, b"ab", last=True),
              iwarp_wire.send(b"hello", msn=7, mo=0), iwarp_wire.send(b"", se=True, msn=0xFFFFFFFF),
              iwarp_wire.read_request(0xD4171E00, 0x56029A15B000, 4096, 0xB6405700, 0x55E5BD1A4000, msn=3),
              iwarp_wire.send(bytes(33), se=True, mo=4096)]
    segments = [[u] for u in ulpdus] + [ulpdus[:3], ulpdus[3:]]
    for crc in (True, False):
        datas = [iwarp_wire.encode_fpdus(seg, crc=crc) for seg in segments]
        # a segment the workers leave to the stream: a Send that begins a message, another kind, a bad CRC
        begun = iwarp_wire.encode_fpdus([iwarp_wire.send(b"a", last=False)], crc=crc)
        other = iwarp_wire.encode_fpdus([iwarp_wire.send(b"a", inv_stag=5)], crc=crc)
        bad = bytearray(datas[0])
        bad[-1] ^= 1
        payloads = [*datas, begun, other, bytes(bad)]
        lanes = tree_templates._lanes(np.frombuffer(b"".join(payloads), dtype=np.uint8),
                                      np.array([len(p) for p in payloads], dtype=np.int64))
        assert lanes is not None
        cols = tree_templates._TcpColumns(np.zeros((0, 17), dtype=np.int64), np.zeros(0), np.zeros(0, np.uint8),
                                          np.zeros(0, np.uint8), [], lanes)
        for i, data in enumerate(datas):
            lane = cols.lane(i)
            assert lane is not None, i
            crc_good, plain, sends, info, more = lane
            assert (crc_good, plain) == (crc, not crc)
            assert sends == any(u[1] & 15 in (3, 5) and not u[0] & 0x80 for u in segments[i])
            assert (bytes(info).decode(), bytes(more).decode()) == _fpdus_as_decoded(data, crc), (i, crc)
        assert cols.lane(len(datas)) is None and cols.lane(len(datas) + 1) is None
        # a bad CRC: written as not looked at (the stream takes that only on a direction without CRC)
        assert cols.lane(len(datas) + 2)[:2] == (False, True)  # type: ignore[index]


def test_whole_fpdus_decoded_in_workers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """-V in worker processes: a segment of whole FPDUs is decoded in its worker, and the process that
    follows the streams only moves its stream past it when the stream would emit just those FPDUs
    (IwarpTracker.take_whole); the trees are the ones of one process, the Send messages of several FPDUs
    (put together by the stream, never by a worker) among them, with CRC and without."""
    path = _appended(tmp_path, ["siw_send_bw.pcap", "siw_crc_send_bw.pcap", "siw_crc_write_bw.pcap", "siw_read_bw.pcap"])
    taken: list[bool] = []
    real = IwarpTracker.take_whole

    def counting(self: IwarpTracker, *a: Any) -> bool:
        got = real(self, *a)
        taken.append(got)
        return got

    monkeypatch.setattr(IwarpTracker, "take_whole", counting)
    one = _fast(path)
    assert not taken  # (one process: every segment through the stream)
    assert one.count("Send message:") == 10
    assert b"".join(tree_blocks(path, workers=2, parallel_min_bytes=0)).decode() == one
    assert taken.count(True) > 100 and taken.count(False) >= 10  # (the Sends that end a message of several)


def fail_tracker_at(monkeypatch: pytest.MonkeyPatch, frame: int) -> None:
    """The iWARP reassembly of the trees raises on the segment of frame ``frame`` (a reassembly bug)."""
    real = tree_templates.IwarpTracker.process_segment

    def failing(self: object, number: int, *a: object) -> object:
        if number == frame:
            raise RuntimeError("a test's failure")
        return real(self, number, *a)  # type: ignore[arg-type]

    monkeypatch.setattr(tree_templates.IwarpTracker, "process_segment", failing)


def test_a_tracker_that_fails_in_workers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The iWARP reassembly failing on a segment whose tree came in parts from a worker: the frame
    decoded whole again and its tree says so, as in one process."""
    path = _appended(tmp_path, ["siw_write_bw.pcap"])
    fail_tracker_at(monkeypatch, 40)
    one = _fast(path)
    assert "iWARP tracker: RuntimeError: a test's failure" in one
    assert b"".join(tree_blocks(path, workers=2, parallel_min_bytes=0)).decode() == one


@pytest.mark.parametrize("name", ["rxe_write_bw.pcap", "siw_crc_write_bw.pcap", "rxe_atomic_fadd.pcap"])
def test_the_templates_write_most_frames(name: str) -> None:
    """The comparison above is not empty: RoCEv2 and TCP frames of real captures take the templates."""
    recs = list(records(ROOT / "captures" / name))
    fast = 0
    for blk_rec in recs:
        data = blk_rec.data
        if fast_frame(data, 0, len(data), blk_rec.frame_number, blk_rec.wire_length, blk_rec.timestamp, 0,
                      None) is not None:
            fast += 1
    assert fast >= 0.9 * len(recs)


def _damaged(tmp_path: Path) -> Path:
    """Real RoCEv2 and iWARP frames with bytes of their headers and trailer changed at random (bad
    lengths, opcodes, pad counts, versions, ICRCs, TCP offsets...), and cut short."""
    rng = random.Random(38)
    frames = []

    def good_icrc(bad: bytearray) -> None:
        end = min(len(bad), 14 + int.from_bytes(bad[16:18], "big"))
        if end >= 58:
            bad[end - 4:end] = icrc_rocev2(bytes(bad[14:end - 4])).to_bytes(4, "little")
            frames.append(bytes(bad))

    for name in ("rxe_rc_pingpong.pcap", "rxe_atomic_cswap.pcap", "rxe_imm.pcap", "siw_crc_rping.pcap",
                 "rxe_ud_pingpong.pcap", "siw_rping.pcap"):
        for rec in records(ROOT / "captures" / name):
            data = bytearray(rec.data)
            frames.append(bytes(data))
            for _ in range(3):
                bad = bytearray(data)
                for _ in range(rng.randint(1, 3)):
                    at = rng.randrange(12, min(len(bad), 90)) if rng.random() < 0.85 else rng.randrange(len(bad))
                    bad[at] = rng.randrange(256)
                frames.append(bytes(bad))
                if bad[12:14] == b"\x08\x00" and bad[14] >> 4 == 4 and bad[23] == 17 and len(bad) >= 58:
                    good_icrc(bad)  # the damage with a good ICRC
            if data[23] == 17 and len(data) >= 58:
                data[43] |= 0x30  # a pad count of 3 (more than an ACK's payload)
                good_icrc(data)
            frames.append(bytes(data[:rng.randrange(14, len(data))]))
    # a pad count above the payload, a payload after an ACK's headers, an ACK without its AETH (ICRCs good)
    for frame in (encode_rocev2(ib.BTH(opcode=0x04, destqp=5, psn=1)),
                  encode_rocev2(ib.BTH(opcode=0x11, destqp=5, psn=2), [ib.AETH.ack(3)], b"abcd", check=False),
                  encode_rocev2(ib.BTH(opcode=0x11, destqp=5, psn=3), [], b"", check=False)):
        bad = bytearray(frame)
        if frame[42] == 0x04:
            bad[43] |= 0x30
        good_icrc(bad)
    path = tmp_path / "damaged.pcap"
    write_capture(path, [(i * 1000, f) for i, f in enumerate(frames)], nano=False)
    return path


def test_damaged_frames(tmp_path: Path) -> None:
    path = _damaged(tmp_path)
    got = _fast(path)
    assert got == _per_packet(path)
    assert "Problem:" in got and "(bad, should be" in got  # the damage was seen, by the per-packet way
    for problem in ("malformed BTH.tver", "malformed BTH.padcnt", "malformed BTH.opcode", "malformed AETH.type",
                    "malformed Payload", "truncated TCP.data_offset", "malformed IPv4.total_length", "truncated AETH"):
        assert f"Problem: {problem}" in got, problem


@pytest.mark.parametrize("cls", [c for c in wire_header_classes() if templatable(c)], ids=lambda c: c.__name__)
def test_header_template_is_the_renderer(cls: type[Header]) -> None:
    """A header's template gives the renderer's lines, for random values of every field (and so the
    fields SPECIAL does not list are shown as the generic describe shows them)."""
    rng = random.Random(cls.__name__)
    size = cls.LAYOUT.size
    for offset, indent in ((0, "    "), (42, "    "), (7, "        ")):
        text = header_text_fn(cls, offset, indent)
        for _ in range(300):
            raw = bytes(rng.randrange(256) for _ in range(size))
            h = cls.decode(raw)
            want = "\n".join(header_lines(h, offset, indent))
            assert text(int.from_bytes(raw, "big")) == want
            assert text(int.from_bytes(raw, "big")) == want  # remembered


@pytest.mark.parametrize("cls", [c for c in wire_header_classes() if templatable(c)], ids=lambda c: c.__name__)
def test_trees_write_headers_by_their_templates(cls: type[Header]) -> None:
    """render._header_lines (every tree's header lines): a header's lines by its class's template, the
    header's fields read as one integer (header_int_fn), for random values; and a header holding what a
    field cannot (a value past its bits, a bool, made by hand) written from its spans, as before."""
    rng = random.Random(cls.__name__ + "/tree")
    size = cls.LAYOUT.size
    value = header_int_fn(cls)
    for _ in range(100):
        raw = bytes(rng.randrange(256) for _ in range(size))
        h = cls.decode(raw)
        assert value(h) == int.from_bytes(raw, "big")
        assert render._header_lines(h, 14, "    ") == header_lines(h, 14, "    ")
    f = cls.LAYOUT.fields[-1]
    made = h.replace(**{f.name: True})  # (a bool where an integer goes: "True" in its line)
    assert value(made) is None
    assert render._header_lines(made, 14, "    ") == header_lines(made, 14, "    ")


def test_a_template_that_misreads_a_header_is_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first header of each class, offset and indentation is written both ways: a template that
    disagrees (here: made to) is not used again, and the lines are the spans' own."""
    monkeypatch.setattr(render, "_TEMPLATES", {})
    monkeypatch.setattr(render, "_CHECKED", {})
    real = render.header_text_fn

    def wrong(*a: Any) -> Any:
        text = real(*a)
        return lambda v: text(v) + " (wrong)"

    monkeypatch.setattr(render, "header_text_fn", wrong)
    h = net.UDP(1, 2, 8, 0)
    assert render._header_lines(h, 34, "    ") == header_lines(h, 34, "    ")
    assert render._TEMPLATES[(net.UDP, 34, "    ")] is None
    assert render._header_lines(net.UDP(3, 4, 9, 1), 34, "    ") == header_lines(net.UDP(3, 4, 9, 1), 34, "    ")


def test_special_classes_override_describe() -> None:
    """SPECIAL lists classes that spell some fields their own way, and only their fields."""
    for cls, fields in SPECIAL.items():
        assert cls.describe is not Header.describe
        names = {f.name for f in cls.LAYOUT.fields}
        for name, deps in fields.items():
            assert name in names and set(deps) <= names


def test_a_class_spelling_fields_its_own_way_gets_no_template() -> None:
    assert not templatable(ib.LRH)  # LRH spells lnh and pktlen, and is not in SPECIAL
    with pytest.raises(ValueError, match="LRH"):
        header_text_fn(ib.LRH, 0, "    ")


def test_cli_tree_is_the_per_packet_tree(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _damaged(tmp_path)
    assert main(["decode", "-V", "-r", str(path)]) == 0
    fast = capsys.readouterr().out
    assert main(["decode", "-V", "--no-columnar", "-r", str(path)]) == 0
    assert fast == capsys.readouterr().out
    assert main(["decode", "-V", "-c", "5", "-r", str(path)]) == 0
    assert capsys.readouterr().out == _per_packet(path, count=5)


def test_icrc_from_the_remembered_term() -> None:
    """The ICRC as the CRC of the datagram as sent XOR a term remembered per first 33 bytes and length
    is icrc_rocev2's, whatever the bytes after those 33 and whatever the variant fields (TOS, TTL, IP
    checksum, UDP checksum, BTH byte 4: each changed alone after the datagram as it was)."""
    rng = random.Random(4791)
    datagrams = []
    for rec in records(ROOT / "captures" / "rxe_atomic_cswap.pcap"):
        d = rec.data
        if d[12:14] == b"\x08\x00" and d[23] == 17:
            datagrams.append(d[14:14 + int.from_bytes(d[16:18], "big")])
    assert datagrams
    for dg in datagrams:
        for at in (None, 1, 8, 10, 11, 26, 27, 32):  # the datagram, then each variant byte changed alone
            b = bytearray(dg)
            if at is not None:
                b[at] ^= rng.randrange(1, 256)
            for _ in range(2):
                buf = bytes(7) + bytes(b)
                assert tree_templates._icrc(buf, 7, 7 + len(b) - 4) == icrc_rocev2(bytes(b[:-4]))
                for i in range(33, len(b) - 4):
                    b[i] = rng.randrange(256)


def _edges(tmp_path: Path) -> tuple[Path, list[bool | None]]:
    """Frames at the edges of the templates' shapes, and whether each takes them: VLAN-tagged RoCEv2 over IPv4
    and IPv6 (taken; two tags: not), IPv6 RoCEv2 (taken), IPv4 options, fragments, Ethernet padding after the IP
    packet, UDP to another port, TCP with options and a payload, a MAD, and frames of every opcode in one stream."""
    send = ib.BTH(opcode=0x04, destqp=0x12, psn=5)  # RC SEND Only
    ack = encode_rocev2(ib.BTH(opcode=0x11, destqp=0x12, psn=5), [ib.AETH.ack(1)])
    tagged = encode_rocev2(send, [], b"x" * 40, vlan=net.VLAN(vid=7, ethertype=0x0800))
    frames: list[tuple[bytes, bool | None]] = [
        (encode_rocev2(send, [], b"x" * 40), True),
        (tagged, True),
        (hostile.tagged(tagged, 5, 9), False),  # (two tags: the per-packet way)
        (hostile.tagged(encode_rocev2(send, [], b"x" * 40, src_ip="fe80::1", dst_ip="fe80::2")), True),
        (hostile.tagged(ack) + bytes(2), True),  # a tag, then padding after the IP packet
        (encode_rocev2(send, [], b"x" * 40, src_ip="fe80::1", dst_ip="fe80::2"), True),  # (IPv6: templates too)
        (ack + bytes(2), True),  # Ethernet padding after the IP packet
        (encode_rocev2(send, [], b"abc"), True),  # a pad of 1
        (encode_rocev2(send, [], b"x" * 40, dst_port=4792), False),  # UDP, not RoCEv2
    ]
    opts = bytearray(encode_rocev2(send, [], b"x" * 40))
    opts[14] = 0x46  # a header of 6 words: the 4 bytes after it are read as options
    frames.append((bytes(opts), False))
    frag = bytearray(encode_rocev2(send, [], b"x" * 40))
    frag[20] |= 0x20  # More Fragments
    frames.append((bytes(frag), False))
    for rec in records(ROOT / "captures" / "siw_crc_rping.pcap"):  # TCP with options, payloads, MPA
        tcp = rec.data[12:14] == b"\x08\x00" and rec.data[23] == 6
        frames.append((rec.data, tcp or None))
        frames.append((rec.data + bytes(6), tcp or None))  # and padded
        frames.append((hostile.tagged(rec.data), tcp or None))  # and tagged
    for name in ("synthetic_rocev2_cm_req.pcap", "synthetic_all_opcodes_rocev2.pcap"):
        frames += [(rec.data, None) for rec in records(ROOT / "captures" / name)]
    path = tmp_path / "edges.pcap"
    write_capture(path, [(i * 1000, f) for i, (f, _) in enumerate(frames)], nano=False)
    return path, [fast for _, fast in frames]


def test_edge_frames(tmp_path: Path) -> None:
    path, fast = _edges(tmp_path)
    assert _fast(path) == _per_packet(path)
    assert _fast(path, block_bytes=300) == _per_packet(path)
    for rec, want in zip(records(path), fast, strict=True):
        if want is not None:
            got = fast_frame(rec.data, 0, len(rec.data), rec.frame_number, rec.wire_length, rec.timestamp, 0, None)
            assert (got is not None) == want, rec.frame_number


def test_a_file_cut_mid_record(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Every tree before the damage, then the same error as the per-packet path's."""
    cut = tmp_path / "cut.pcap"
    cut.write_bytes((ROOT / "captures" / "siw_crc_write_bw.pcap").read_bytes()[:20000])
    assert main(["decode", "-V", "-r", str(cut)]) == 1
    fast = capsys.readouterr()
    assert main(["decode", "-V", "--no-columnar", "-r", str(cut)]) == 1
    slow = capsys.readouterr()
    assert fast.out == slow.out and fast.out.count("\nFrame ") == 58
    assert fast.err == slow.err and "truncated mid-record" in fast.err


def _same_over_ipv6(name: str, move: Callable[[bytes], bytes], tmp_path: Path) -> str:
    """The frames of capture ``name`` sent over IPv6 by ``move``: the per-packet trees (-V, one process and
    workers, blocks cut anywhere), and the templates write every moved frame they write as it was.  The text."""
    recs = list(records(ROOT / "captures" / name))
    path = tmp_path / "v6.pcap"
    moved = [move(r.data) for r in recs]
    write_capture(path, [(round(r.timestamp * 1e9), v6) for r, v6 in zip(recs, moved, strict=True)])
    want = _per_packet(path)
    assert _fast(path) == want
    for block in (700, 4096):
        assert b"".join(tree_blocks(path, workers=2, parallel_min_bytes=0, block_bytes=block)).decode() == want
    four = six = 0
    for r, v6 in zip(recs, moved, strict=True):
        if v6 is r.data:
            continue
        four += fast_frame(r.data, 0, len(r.data), r.frame_number, r.wire_length, r.timestamp, 0, None) is not None
        got = fast_frame(v6, 0, len(v6), r.frame_number, len(v6), r.timestamp, 0, None)
        six += got is not None
        assert got is None or b"    IPv6  [RFC 8200 3]  bytes 14-53" in got
    assert six == four > 0
    return want


@pytest.mark.parametrize("name", ["rxe_write_bw.pcap", "rxe_read_bw.pcap", "rxe_atomic_cswap.pcap", "rxe_imm.pcap",
                                  "rxe_ud_send_bw.pcap", "rxe_send_bw_loss.pcap"])
def test_roce_over_ipv6(name: str, tmp_path: Path) -> None:
    """RoCEv2 to IPv6 GIDs (:func:`_same_over_ipv6`)."""
    _same_over_ipv6(name, partial(hostile.over_ipv6, trailer=True), tmp_path)


@pytest.mark.parametrize("name", ["siw_crc_send_bw.pcap", "siw_write_bw_midstream.pcap", "synthetic_iwarp_mpa_markers.pcap",
                                  "siw_read_bw.pcap", "rxe_write_bw.pcap", "siw_crc_rping.pcap"])
def test_tcp_over_ipv6(name: str, tmp_path: Path) -> None:
    """TCP between IPv6 addresses (iWARP over IPv6, perftest's own TCP exchange: :func:`_same_over_ipv6`), the
    iWARP PDUs reassembled."""
    want = _same_over_ipv6(name, partial(hostile.tcp_over_ipv6, trailer=True), tmp_path)
    if name.startswith(("siw", "synthetic_iwarp")):
        assert "        RDMAP  [" in want


def _same_when_changed(frames: list[bytes], lo: int, hi: int, tmp_path: Path) -> None:
    """``frames``, each followed by copies with one octet of its ``lo:hi`` changed in turn (its lowest bit, its
    highest): the trees are the per-packet ones (one process and workers), whichever way each goes, and some,
    not all, take the templates."""
    changed = []
    for f in frames:
        changed.append(f)
        for pos in range(lo, min(len(f), hi)):
            for delta in (1, 0x80):
                d = bytearray(f)
                d[pos] ^= delta
                changed.append(bytes(d))
    path = tmp_path / "changed.pcap"
    write_capture(path, [(i * 1000, f) for i, f in enumerate(changed)])
    want = _per_packet(path)
    assert _fast(path) == want
    assert b"".join(tree_blocks(path, workers=2, parallel_min_bytes=0, block_bytes=4096)).decode() == want
    taken = sum(fast_frame(f, 0, len(f), 1, len(f), 0.0, 0, None) is not None for f in changed)
    assert 0 < taken < len(changed)


def test_ipv6_frames_with_a_header_octet_changed(tmp_path: Path) -> None:
    """IPv6 RoCEv2 frames with each octet of their first 80 changed (the version, payload length, next header,
    addresses, UDP, BTH)."""
    recs = list(records(ROOT / "captures" / "rxe_write_bw.pcap"))[:80:9]
    _same_when_changed([hostile.over_ipv6(r.data, trailer=True) for r in recs], 0, 80, tmp_path)


def test_tcp_over_ipv6_with_a_header_octet_changed(tmp_path: Path) -> None:
    """IPv6 TCP segments of an iWARP stream with each octet of their first 80 changed (the version, payload
    length, next header, addresses, ports, sequence number, header length, flags)."""
    recs = list(records(ROOT / "captures" / "siw_crc_send_bw.pcap"))[:60:7]
    moved = [hostile.tcp_over_ipv6(r.data) for r in recs]
    _same_when_changed([v6 for r, v6 in zip(recs, moved, strict=True) if v6 is not r.data], 0, 80, tmp_path)


def _tagged_copy(name: str, path: Path) -> tuple[list[bytes], list[bytes]]:
    """The frames of capture ``name`` and the same frames 802.1Q-tagged (priorities and VLANs varied, every
    third sent over IPv6 first), the tagged ones written to ``path``."""
    recs = list(records(ROOT / "captures" / name))
    plain = [r.data for r in recs]
    tagged = []
    for i, data in enumerate(plain):
        if i % 3 == 2:
            data = hostile.tcp_over_ipv6(hostile.over_ipv6(data, trailer=True), trailer=True)
        tagged.append(hostile.tagged(data, pcp=i % 8, vid=1 + i % 4094))
    write_capture(path, [(round(r.timestamp * 1e9), t) for r, t in zip(recs, tagged, strict=True)])
    return plain, tagged


@pytest.mark.parametrize("name", ["rxe_write_bw.pcap", "rxe_read_bw.pcap", "rxe_ud_send_bw.pcap", "rxe_atomic_cswap.pcap",
                                  "rxe_send_bw_loss.pcap", "siw_crc_send_bw.pcap", "siw_read_bw.pcap",
                                  "synthetic_iwarp_mpa_markers.pcap", "synthetic_all_opcodes_rocev2.pcap"])
def test_vlan_tagged(name: str, tmp_path: Path) -> None:
    """802.1Q-tagged frames (a RoCE NIC's on a lossless class: PFC reads the tag's priority), over IPv4 and
    IPv6: the per-packet trees (-V, one process and workers, blocks cut anywhere), the iWARP PDUs of the
    tagged segments reassembled; and the templates write every tagged frame they write untagged."""
    path = tmp_path / "tagged.pcap"
    plain, tagged = _tagged_copy(name, path)
    want = _per_packet(path)
    assert "    VLAN  [IEEE 802.1Q 9.6]  bytes 14-17" in want
    assert _fast(path) == want
    for block in (700, 4096):
        assert b"".join(tree_blocks(path, workers=2, parallel_min_bytes=0, block_bytes=block)).decode() == want
    if name.startswith(("siw", "synthetic_iwarp")):
        assert "        RDMAP  [" in want
    if name == "rxe_write_bw.pcap":  # (the same frames as ERF Ethernet records: the ERF header's lines, then the tag's)
        from test_erf_trees import erf_copy

        erf = erf_copy(tmp_path, path)
        assert _fast(erf) == _per_packet(erf)
        assert "    VLAN  [IEEE 802.1Q 9.6]  bytes 32-35" in _fast(erf)
    untagged = sum(fast_frame(d, 0, len(d), 1, len(d), 0.0, 0, None) is not None
                   for i, d in enumerate(plain) if i % 3 != 2)
    taken = sum(fast_frame(d, 0, len(d), 1, len(d), 0.0, 0, None) is not None
                for i, d in enumerate(tagged) if i % 3 != 2)
    assert taken == untagged > 0


@pytest.mark.parametrize("fcs", [4, 0])
def test_vlan_tagged_with_a_declared_fcs(fcs: int, tmp_path: Path) -> None:
    """Tagged RoCEv2 frames, some of them padded to the least frame, in a capture that says its frames keep
    their FCS (4: each ends in it) or do not (0): the per-packet trees (where after a tag Wireshark divides
    what follows the datagram its own way: rdmalab.wire.net.ethernet_trailer)."""
    from test_eth_trailer import _fcs

    frames = []
    for r in list(records(ROOT / "captures" / "rxe_write_bw.pcap"))[:200]:
        t = hostile.tagged(r.data)
        t += bytes(max(0, 60 - len(t)))  # (padded as a NIC pads a short frame)
        frames.append(t + (_fcs(t) if fcs else b""))
    path = tmp_path / "fcs.pcap"
    write_capture(path, [((1000 + i) * 10**9, d) for i, d in enumerate(frames)], nano=False)
    raw = bytearray(path.read_bytes())
    struct.pack_into("<I", raw, 20, 1 | 0x04000000 | (fcs // 2) << 28)  # (pcap-savefile(5): the FCS bits)
    path.write_bytes(bytes(raw))
    want = _per_packet(path)
    assert ("eth.fcs" in want or "FCS" in want) == (fcs == 4)
    assert _fast(path) == want
    assert b"".join(tree_blocks(path, workers=2, parallel_min_bytes=0, block_bytes=4096)).decode() == want


def test_tagged_frames_with_a_header_octet_changed(tmp_path: Path) -> None:
    """Tagged RoCEv2 and TCP frames with each octet from the 13th to the 60th changed (the tag's type, priority,
    VLAN, the EtherType after it, the IP header)."""
    recs = list(records(ROOT / "captures" / "rxe_write_bw.pcap"))[:40:9]
    recs += list(records(ROOT / "captures" / "siw_crc_send_bw.pcap"))[:40:9]
    _same_when_changed([hostile.tagged(r.data) for r in recs], 12, 60, tmp_path)


def _trailed(src: str | Path, dst: Path) -> Path:
    """``src`` with six octets after every TCP segment's datagram (Ethernet padding: a line of the tree after
    the TCP header's, where its fields must still end)."""
    frames = [(t, data + bytes(6), wire + 6) if data[12:14] == b"\x08\x00" and len(data) > 23 and data[23] == 6
              else (t, data, wire) for t, data, wire in hostile.frames_of(src)]
    hostile.write(dst, frames)
    return dst


@pytest.mark.parametrize("name", ["siw_crc_send_bw.pcap", "siw_write_bw_midstream.pcap", "synthetic_iwarp_mpa_markers.pcap", "siw_write_bw.pcap",
                                  "siw_crc_rping.pcap"])
def test_where_a_segments_tcp_fields_end_is_said_not_looked_for(name: str, tmp_path: Path) -> None:
    """The workers say where each TCP segment's header fields end in its tree (where its SEQ/ACK analysis
    goes), and the iWARP PDUs a segment completes move it: the place the text itself shows
    (columnar_summary._tcp_fields_end, which looked for it), for every segment of iWARP captures, with
    and without padding after the segments."""
    from rdmalab.capture.columnar_summary import _tcp_fields_end
    from rdmalab.capture.iwarp import IwarpTracker
    from rdmalab.capture.pcapio import record_blocks

    src = ROOT / "captures" / name
    if not src.exists():
        pytest.skip(f"{name} is not in captures/")
    for path in (src, _trailed(src, tmp_path / "trailed.pcap")):
        tracker = IwarpTracker()
        segments = pdus = 0
        for blk in record_blocks(path, 1 << 14):
            _first, _pieces, tcp = tree_templates._tree_block(blk, len(blk), None, None)
            for _j, parts, iface in tcp.unpack() if tcp is not None else []:
                text, end = tree_templates.tcp_tree_at(parts, tracker, lambda _n: b"", iface)
                text = bytes(text)
                assert end == _tcp_fields_end(text, 0, len(text)), text.decode()
                segments += 1
                pdus += b"\n    PDU " in text
        assert segments >= 9 and pdus >= 5, (path, segments, pdus)


def test_trees_a_worker_wrote_with_a_tcp_header_get_their_analysis(tmp_path: Path) -> None:
    """An ICMP error that quotes a TCP segment is written by a worker (not left as a segment); its tree with
    and without workers is the per-packet one (test_icmp_quotes' routers' quotes)."""
    from test_icmp_quotes import _built

    path = _built(tmp_path)
    for block in (100, 300, 1 << 20):
        got = b"".join(tree_blocks(path, workers=2, parallel_min_bytes=0, block_bytes=block)).decode()
        assert got == _per_packet(path), block


def test_pieces_are_written_whole_however_the_system_cuts_the_writes(tmp_path: Path, monkeypatch: Any) -> None:
    """``decode -V`` writes a block's pieces with os.writev, without joining them: every octet once, in
    order, when each write takes only part of what it is given (a pipe, a signal), IOV_MAX at a time;
    and joined where the output has no file descriptor."""
    import io
    import os as _os

    from rdmalab.cli.decode import _write_pieces

    pieces: list[bytes | memoryview] = [b"abc", b"", memoryview(b"defgh")[1:], b"ij" * 700, b"k"] * 600
    want = b"".join(pieces)
    real = _os.writev
    calls = []

    def stingy(fd: int, bufs: list[Any]) -> int:
        calls.append(len(bufs))
        head = b"".join(bytes(b) for b in bufs)[:997]  # (a write cut inside a piece)
        return _os.write(fd, head)

    monkeypatch.setattr(_os, "writev", stingy)
    path = tmp_path / "out"
    with open(path, "w") as f:
        _write_pieces(f, pieces)
    assert path.read_bytes() == want
    assert max(calls) <= (_os.sysconf("SC_IOV_MAX") if "SC_IOV_MAX" in _os.sysconf_names else 1024)
    monkeypatch.setattr(_os, "writev", real)
    text = io.StringIO()  # (no descriptor)
    _write_pieces(text, [b"x\n", memoryview(b"y\n")])
    assert text.getvalue() == "x\ny\n"
