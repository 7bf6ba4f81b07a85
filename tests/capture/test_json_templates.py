"""``-T json`` of RoCEv2 frames from per-header templates (rdmalab.capture.json_templates): the text of
the per-packet writer, frame by frame, on every capture of ``captures/``; every header template held
to the per-packet writer for random values of its volatile fields; the frames the templates must leave
to the per-packet way (a bad ICRC, padding, an FCS, a frame cut short); and the check of each kind of
frame against the per-packet writer, which takes the kind away from the templates when they differ."""

from __future__ import annotations

import glob
import random
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import hostile  # tests/hostile.py: frames made hostile, or sent another way
import numpy as np
import pytest

from rdmalab.capture import json_templates
from rdmalab.capture.json_blocks import _starts
from rdmalab.capture.json_templates import VOLATILE, HeaderJson, roce_json
from rdmalab.capture.pcapio import record_blocks, record_ns
from rdmalab.capture.reader import RawRecord, decode_record
from rdmalab.capture.tsjson import _frame_text, _make_header_layer, _packet_json, frame_start, frame_starts
from rdmalab.wire.header import Header
from rdmalab.wire.net import TCP

ROOT = Path(__file__).resolve().parents[2]
CAPTURES = sorted(glob.glob(str(ROOT / "captures" / "*.pcap")))


def _frames(path: str) -> list[tuple[bytes, int, int, int, float, int, int]]:
    """(bytes, captured, wire, link type, seconds, ns, FCS length) of each record of a capture."""
    out = []
    for blk in record_blocks(path, 1 << 20):
        secs = blk.seconds().tolist()
        for j in range(len(blk)):
            off, cap = int(blk.offset[j]), int(blk.caplen[j])
            out.append((bytes(blk.buf[off:off + cap]), cap, int(blk.wirelen[j]), int(blk.linktype[j]), secs[j],
                        record_ns(secs[j], int(blk.ts_ns[j])), int(blk.fcs_lens()[j])))
    return out


def _per_packet(data: bytes, cap: int, wire: int, lt: int, ts: float, ns: int, fcs: int, frame: int, first: int,
                prev: int) -> str:
    cp = decode_record(RawRecord(frame, ts, lt, data, wire, 0, ns, fcs_len=fcs), lenient=True)
    return _frame_text(_packet_json(cp, first, prev, prev, None, None))


def _templated(data: bytes, cap: int, wire: int, lt: int, ts: float, ns: int, fcs: int, frame: int, first: int,
               prev: int) -> str | None:
    return roce_json(data, 0, cap, wire, lt, fcs, frame, ts, ns, 0, first, prev)


@pytest.mark.parametrize("path", CAPTURES, ids=[Path(p).name for p in CAPTURES])
def test_each_frame_as_the_per_packet_writer_writes_it(path: str) -> None:
    frames = _frames(path)
    taken = 0
    first = prev = frames[0][5] if frames else 0
    for n, f in enumerate(frames, 1):
        got = _templated(*f, n, first, prev)
        if got is not None:
            taken += 1
            assert got == _per_packet(*f, n, first, prev), f"{Path(path).name} frame {n}"
        prev = f[5]
    assert not json_templates.REFUSED
    roce = sum(1 for f in frames if f[0][12:14] == b"\x08\x00" and f[0][23] == 17 and f[0][36:38] == b"\x12\xb7")
    if Path(path).name.startswith("rxe_"):  # (the kernel's RoCE: every datagram taken but the MADs of rdma_cm)
        assert taken >= 0.9 * roce > 0 or "cm" in path or "rping" in path or "udaddy" in path, \
            f"{Path(path).name}: {taken} of {roce} RoCE frames from templates"


def _random_header(cls: type[Header], rng: random.Random, base: int | None = None) -> bytes:
    """A header of ``cls`` that decodes (its constant fields kept), random in its volatile fields, and
    (``base`` None) in every other field too."""
    lay = cls.LAYOUT
    v = rng.getrandbits(8 * lay.size) if base is None else base
    for name in VOLATILE.get(cls, ()):
        f = lay.field(name)
        v = v & ~(f.mask << f.shift) | rng.getrandbits(f.bits) << f.shift
    for f in lay.fields:
        if f.const is not None:
            v = v & ~(f.mask << f.shift) | f.const << f.shift
    if cls is TCP:  # (the segments tcp_json takes: a header of 20 octets or more)
        f = lay.field("data_offset")
        v |= max(5, v >> f.shift & f.mask) << f.shift
    return v.to_bytes(lay.size, "big")


def _mismatches(cls: type[Header]) -> int:
    """Headers of random other fields, each with 20 random values of its volatile fields: how many of
    them the templates write otherwise than the per-packet writer (or not at all)."""
    rng = random.Random(cls.__name__)
    hj = HeaderJson(cls)
    bad = 0
    for _ in range(40):
        base = int.from_bytes(_random_header(cls, rng), "big")
        for _ in range(20):
            b = _random_header(cls, rng, base)
            got = hj.parts(b, 0)
            want = _make_header_layer(cls.decode(b), b, 0)
            if got is None or (got[0].proto, got[1], got[0].ours) != (want[0], want[3], want[2]):
                bad += 1
    return bad


@pytest.mark.parametrize("cls", list(VOLATILE), ids=[c.__name__ for c in VOLATILE])
def test_a_header_template_is_the_per_packet_writers_text_whatever_its_volatile_fields(cls: type[Header]) -> None:
    assert _mismatches(cls) == 0


def test_a_field_that_changes_the_headers_fields_cannot_be_volatile(monkeypatch: Any) -> None:
    """The AETH's syndrome type names its value's field (credit_count, timer, error_code): with it
    among the volatile fields a template is another type's text, which the test above finds."""
    from rdmalab.wire.ib import AETH

    monkeypatch.setitem(VOLATILE, AETH, ("type", "msn"))
    assert _mismatches(AETH) > 100


def _roce_write(path: str = "rxe_write_bw.pcap") -> tuple[list[Any], int]:
    frames = _frames(str(ROOT / "captures" / path))
    first = frames[0][5]
    for n, f in enumerate(frames, 1):
        if _templated(*f, n, first, first) is not None and f[1] > 200:
            return list(f), n
    raise AssertionError("no RoCE frame with a payload")


def test_frames_the_templates_leave_to_the_per_packet_way() -> None:
    f, n = _roce_write()
    data = f[0]
    first = f[5]
    cases = {
        "bad ICRC": data[:-5] + bytes([data[-5] ^ 1]) + data[-4:],
        "padding after the datagram": data + bytes(6),
        "cut short": data[:-10],
    }
    for name, d in cases.items():
        g = [d, len(d), len(d), *f[3:]]
        assert _templated(*g, n, first, first) is None, name
    assert _templated(data, len(data), len(data) + 4, *f[3:], n, first, first) is None  # (longer on the wire)
    g = list(f)
    g[6] = 4  # (the capture says it keeps an FCS)
    assert _templated(*g, n, first, first) is None
    # and the same frame, whole, is taken
    assert _templated(*f, n, first, first) == _per_packet(*f, n, first, first)


def test_a_kind_whose_text_differs_goes_the_per_packet_way(monkeypatch: Any) -> None:
    f, n = _roce_write()
    first = f[5]
    kind = (f[0][42], True, bool(f[0][43] >> 4 & 3), 0, 4)  # (opcode, payload, pad, tag, IP version)
    monkeypatch.setattr(json_templates, "_CHECKED", set())
    monkeypatch.setattr(json_templates, "REFUSED", set())
    real = json_templates._written
    monkeypatch.setattr(json_templates, "_written", lambda *a: real(*a).replace('"eth.type"', '"eth.typo"'))
    assert _templated(*f, n, first, first) is None
    assert json_templates.REFUSED == {kind}
    assert _templated(*f, n, first, first) is None  # (and stays refused)


def test_the_udp_length_is_the_datagrams() -> None:
    """A UDP length shorter than the IPv4 datagram: what follows it is not the ICRC; the per-packet way
    says so, the templates leave the frame to it or write what it writes."""
    f, n = _roce_write()
    data = bytearray(f[0])
    struct.pack_into("!H", data, 38, struct.unpack_from("!H", data, 38)[0] - 4)
    first = f[5]
    g = [bytes(data), *f[1:]]
    got = _templated(*g, n, first, first)
    assert got is None or got == _per_packet(*g, n, first, first)


@pytest.mark.parametrize("path", CAPTURES, ids=[Path(p).name for p in CAPTURES])
def test_a_tcp_segments_piece_is_the_per_packet_ones(path: str, monkeypatch: Any) -> None:
    """What a worker sends of a TCP segment (its text, what the iWARP reassembly is fed, where its text is
    finished), from the templates, is what the per-packet way sends, on every segment of the iWARP and
    other captures, each compared here (not only the first of its kind)."""
    from rdmalab.capture import json_blocks

    monkeypatch.setattr(json_blocks, "_TCP_CHECKED", set())
    frames = _frames(path)
    first = prev = frames[0][5]
    taken = tcp = 0
    for n, (data, cap, wire, lt, ts, ns, fcs) in enumerate(frames, 1):
        json_blocks._TCP_CHECKED.clear()  # (every segment checked against the per-packet way, in the function)
        got = json_blocks._tcp_templated(data, 0, cap, wire, lt, fcs, n, ts, ns, 0, first, prev, True)
        want = json_blocks._per_packet(n, ts, ns, lt, data, wire, 0, fcs, first, prev, True, True)
        tcp += want[1]
        if got is not None:
            taken += 1
            assert got == (data, ",\n  " + want[0], want[2], want[3]), f"frame {n}"
        prev = ns
    assert not json_blocks.TCP_REFUSED
    assert taken >= 0.9 * tcp, f"{taken} of {tcp} TCP segments from templates"
    assert tcp or "siw" not in path


def test_a_tcp_kind_whose_piece_differs_goes_the_per_packet_way(monkeypatch: Any) -> None:
    from rdmalab.capture import json_blocks

    path = str(ROOT / "captures" / "siw_write_bw.pcap")
    frames = _frames(path)
    first = frames[0][5]
    monkeypatch.setattr(json_blocks, "_TCP_CHECKED", set())
    monkeypatch.setattr(json_blocks, "TCP_REFUSED", set())
    real = json_blocks.tcp_json
    monkeypatch.setattr(json_blocks, "tcp_json", lambda *a: None if (g := real(*a)) is None else
                        (g[0].replace('"tcp.flags"', '"tcp.flag"'), *g[1:]))
    kinds = set()
    for n, (data, cap, wire, lt, ts, ns, fcs) in enumerate(frames, 1):
        assert json_blocks._tcp_templated(data, 0, cap, wire, lt, fcs, n, ts, ns, 0, first, first, True) is None
        g = real(data, 0, cap, wire, lt, fcs, n, ns, first, first)
        if g is not None:
            kinds.add((g[4][5], g[2], g[3] > 0, g[5]))
    assert json_blocks.TCP_REFUSED == kinds and kinds


class _Everything(set[object]):
    """A set that holds every kind: the per-kind check against the per-packet way switched off."""

    def __contains__(self, _x: object) -> bool:
        return True


@pytest.mark.parametrize("name", ["rxe_write_bw.pcap", "rxe_atomic_fadd.pcap", "rxe_ud_send_bw.pcap",
                                  "siw_write_bw.pcap", "siw_crc_read_bw.pcap"])
def test_frames_with_a_header_octet_changed(name: str, monkeypatch: Any) -> None:
    """Every octet of the headers of some frames changed in turn (1, 0x10, 0x80, 0xff XORed in), the checks
    per kind switched off: each frame the templates still write (a RoCE frame, a TCP segment's piece) is
    what the per-packet way writes, and the others are left to it (a bad ICRC, a length that does not add
    up, a header that is not one)."""
    from rdmalab.capture import json_blocks

    monkeypatch.setattr(json_templates, "_CHECKED", _Everything())
    monkeypatch.setattr(json_blocks, "_TCP_CHECKED", _Everything())
    frames = _frames(str(ROOT / "captures" / name))
    first = frames[0][5]
    taken = 0
    for n in range(1, min(len(frames), 240), 11):
        data, cap, wire, lt, ts, ns, fcs = frames[n - 1]
        for pos in range(min(cap, 86)):
            for delta in (1, 0x10, 0x80, 0xFF):
                d = bytearray(data)
                d[pos] ^= delta
                b = bytes(d)
                got_roce = roce_json(b, 0, cap, wire, lt, fcs, n, ts, ns, 0, first, first)
                if got_roce is not None:
                    taken += 1
                    assert got_roce == _per_packet(b, cap, wire, lt, ts, ns, fcs, n, first, first), (n, pos, delta)
                    continue
                got = json_blocks._tcp_templated(b, 0, cap, wire, lt, fcs, n, ts, ns, 0, first, first, True)
                if got is not None:
                    taken += 1
                    want = json_blocks._per_packet(n, ts, ns, lt, b, wire, 0, fcs, first, first, True, True)
                    assert want[0] is not None and got == (b, ",\n  " + want[0], want[2], want[3]), (n, pos, delta)
    assert taken > 500


def _tag(data: bytes, pcp: int = 3, vid: int = 100) -> bytes:
    return data[:12] + struct.pack(">HH", 0x8100, pcp << 13 | vid) + data[12:]


@pytest.mark.parametrize("name", ["rxe_write_bw.pcap", "rxe_read_bw.pcap", "rxe_atomic_cswap.pcap",
                                  "siw_write_bw.pcap", "siw_crc_send_bw.pcap"])
def test_frames_with_an_802_1q_tag(name: str, monkeypatch: Any) -> None:
    """Each frame of a capture with an 802.1Q tag put in (as a switch's mirror port gives RoCE with PFC
    priorities): the RoCE frames and TCP segments the templates write are the per-packet way's text and
    pieces, every one compared, and they write nine in ten of them; tags in the ``vlan`` layer."""
    from rdmalab.capture import json_blocks

    monkeypatch.setattr(json_templates, "_CHECKED", _Everything())
    monkeypatch.setattr(json_blocks, "_TCP_CHECKED", _Everything())
    frames = _frames(str(ROOT / "captures" / name))
    first = frames[0][5]
    taken = eligible = 0
    for n, (data, _cap, _wire, lt, ts, ns, fcs) in enumerate(frames, 1):
        b = _tag(data)
        cap = len(b)
        if b[16:18] == b"\x08\x00" and b[27] in (6, 17) and cap >= 64:
            eligible += 1
        got_roce = roce_json(b, 0, cap, cap, lt, fcs, n, ts, ns, 0, first, first)
        if got_roce is not None:
            taken += 1
            want = _per_packet(b, cap, cap, lt, ts, ns, fcs, n, first, first)
            assert got_roce == want, n
            assert '"vlan": {' in want and '"vlan.id": "100"' in want and "eth:ethertype:vlan:ethertype:ip:udp" in want
            continue
        got = json_blocks._tcp_templated(b, 0, cap, cap, lt, fcs, n, ts, ns, 0, first, first, True)
        if got is not None:
            taken += 1
            want_tcp = json_blocks._per_packet(n, ts, ns, lt, b, cap, 0, fcs, first, first, True, True)
            assert want_tcp[0] is not None and got == (b, ",\n  " + want_tcp[0], want_tcp[2], want_tcp[3]), n
    assert taken >= 0.9 * eligible > 0, (taken, eligible)


@pytest.mark.parametrize("tagged", [False, True], ids=["untagged", "802.1Q"])
@pytest.mark.parametrize("name", ["rxe_write_bw.pcap", "rxe_read_bw.pcap", "rxe_atomic_cswap.pcap", "rxe_imm.pcap",
                                  "rxe_ud_send_bw.pcap", "rxe_send_bw_loss.pcap"])
def test_roce_over_ipv6(name: str, tagged: bool, monkeypatch: Any) -> None:
    """RoCEv2 to IPv6 GIDs (a RoCE port's default GID is its IPv6 link-local one): every frame of a capture sent
    so instead, with an 802.1Q tag or not, the checks per kind switched off: each frame the templates write is
    the per-packet way's text, and they write every frame over IPv6 they write over IPv4; the ``ipv6`` layer
    in each."""
    monkeypatch.setattr(json_templates, "_CHECKED", _Everything())
    frames = _frames(str(ROOT / "captures" / name))
    first = frames[0][5]
    taken = eligible = 0
    for n, (data, _cap, _wire, lt, ts, ns, fcs) in enumerate(frames, 1):
        b = hostile.over_ipv6(data)
        if tagged:
            b = _tag(b)
        cap = len(b)
        four = _tag(data) if tagged else data
        if b[12 + 4 * tagged:14 + 4 * tagged] == b"\x86\xdd" and \
                roce_json(four, 0, len(four), len(four), lt, fcs, n, ts, ns, 0, first, first) is not None:
            eligible += 1  # (a frame the templates write over IPv4)
        got = roce_json(b, 0, cap, cap, lt, fcs, n, ts, ns, 0, first, first)
        if got is not None:
            taken += 1
            want = _per_packet(b, cap, cap, lt, ts, ns, fcs, n, first, first)
            assert got == want, n
            assert '"ipv6": {' in want and ":ipv6:udp:infiniband" in want and '"ipv6.flow": "0x012345"' in want
    assert taken == eligible > 0, (taken, eligible)


def _changed(frame: bytes, upto: int) -> Iterator[tuple[int, int, bytes]]:
    """``frame`` with each octet of its first ``upto`` changed in turn (1, 0x10, 0x80, 0xff XORed in): each
    place, what was XORed in and the frame so changed."""
    for pos in range(min(len(frame), upto)):
        for delta in (1, 0x10, 0x80, 0xFF):
            d = bytearray(frame)
            d[pos] ^= delta
            yield pos, delta, bytes(d)


@pytest.mark.parametrize("name", ["rxe_write_bw.pcap", "rxe_atomic_fadd.pcap"])
def test_ipv6_frames_with_a_header_octet_changed(name: str, monkeypatch: Any) -> None:
    """The IPv6 frames of :func:`test_roce_over_ipv6` with every octet of their first 90 changed in turn (the
    IPv6 version, payload length, next header, addresses, UDP, BTH ...): what the templates still write is the
    per-packet way's text, the rest (a next header that is not UDP, a length that does not add up, a bad ICRC)
    is left to it."""
    monkeypatch.setattr(json_templates, "_CHECKED", _Everything())
    frames = _frames(str(ROOT / "captures" / name))
    first = frames[0][5]
    taken = 0
    for n in range(1, min(len(frames), 200), 13):
        data, _cap, _wire, lt, ts, ns, fcs = frames[n - 1]
        for pos, delta, b in _changed(hostile.over_ipv6(data), 90):
            got = roce_json(b, 0, len(b), len(b), lt, fcs, n, ts, ns, 0, first, first)
            if got is not None:
                taken += 1
                assert got == _per_packet(b, len(b), len(b), lt, ts, ns, fcs, n, first, first), (n, pos, delta)
    assert taken > 50


@pytest.mark.parametrize("tagged", [False, True], ids=["untagged", "802.1Q"])
@pytest.mark.parametrize("name", ["siw_write_bw.pcap", "siw_crc_send_bw.pcap", "synthetic_iwarp_mpa_markers.pcap",
                                  "rxe_write_bw.pcap"])
def test_tcp_over_ipv6(name: str, tagged: bool, monkeypatch: Any) -> None:
    """TCP between IPv6 addresses (iWARP over IPv6, perftest's own exchange): every segment of a capture sent so
    instead, with an 802.1Q tag or not, the checks per kind switched off: each piece the templates give is the
    per-packet way's (its text, what the reassembly is fed, where the text is finished), and they take at least
    every segment over IPv6 they take over IPv4; the ``ipv6`` layer in each."""
    from rdmalab.capture import json_blocks

    monkeypatch.setattr(json_blocks, "_TCP_CHECKED", _Everything())
    frames = _frames(str(ROOT / "captures" / name))
    first = frames[0][5]
    four = six = segments = 0
    for n, (data, _cap, _wire, lt, ts, ns, fcs) in enumerate(frames, 1):
        v4 = _tag(data) if tagged else data
        b = hostile.tcp_over_ipv6(data)
        if b is data:
            continue
        segments += 1
        if tagged:
            b = _tag(b)
        four += json_blocks._tcp_templated(v4, 0, len(v4), len(v4), lt, fcs, n, ts, ns, 0, first, first, True) is not None
        got = json_blocks._tcp_templated(b, 0, len(b), len(b), lt, fcs, n, ts, ns, 0, first, first, True)
        if got is not None:
            six += 1
            want = json_blocks._per_packet(n, ts, ns, lt, b, len(b), 0, fcs, first, first, True, True)
            assert want[0] is not None and got == (b, ",\n  " + want[0], want[2], want[3]), n
            assert '"ipv6": {' in want[0] and ":ipv6:tcp" in want[0]
    assert six >= four > 0 and six >= 0.9 * segments, (six, four, segments)


def test_tcp_over_ipv6_with_a_header_octet_changed(monkeypatch: Any) -> None:
    """IPv6 TCP segments of an iWARP capture with every octet of their first 80 changed in turn (the version,
    payload length, next header, addresses, ports, numbers, header length, flags): each piece the templates
    still give is the per-packet way's, the rest is left to it."""
    from rdmalab.capture import json_blocks

    monkeypatch.setattr(json_blocks, "_TCP_CHECKED", _Everything())
    frames = _frames(str(ROOT / "captures" / "siw_crc_send_bw.pcap"))
    first = frames[0][5]
    taken = 0
    for n in range(1, min(len(frames), 120), 9):
        data, _cap, _wire, lt, ts, ns, fcs = frames[n - 1]
        for pos, delta, b in _changed(hostile.tcp_over_ipv6(data), 80):
            got = json_blocks._tcp_templated(b, 0, len(b), len(b), lt, fcs, n, ts, ns, 0, first, first, True)
            if got is not None:
                taken += 1
                want = json_blocks._per_packet(n, ts, ns, lt, b, len(b), 0, fcs, first, first, True, True)
                assert want[0] is not None and got == (b, ",\n  " + want[0], want[2], want[3]), (n, pos, delta)
    assert taken > 200


@pytest.mark.parametrize("seed", range(4))
def test_the_frames_starts_a_column_at_a_time_are_each_frames_own(seed: int) -> None:
    """frame_starts (a block's _index and frame layers, made a column at a time in a -T json worker) equals
    frame_start (one frame's, from frame_values: what the per-packet writer writes) for times that cross
    seconds and days, go back (a frame before the one before it), sit before the first frame, on the
    second, with nine digits, the last years nanoseconds since 1970 hold (2262), and frame numbers and lengths of
    every width."""
    rnd = random.Random(seed)
    base = rnd.choice([0, 1_795_241_888 * 10**9, 86_399 * 10**9 + 999_999_999, 9_223_372_036 * 10**9 - 10**15, 10**18])
    ns = np.array([base + rnd.choice([0, 1, 10**9, rnd.randrange(3 * 10**9), rnd.randrange(10**14)])
                   for _ in range(300)], dtype=np.int64)
    prev = np.array([int(ns[0]) - rnd.randrange(5)] + [int(x) for x in ns[:-1]], dtype=np.int64)
    first = int(ns.min()) + rnd.choice([0, 10**9, -(10**12)])
    numbers = np.array(sorted(rnd.randrange(1, 10**rnd.randrange(1, 10)) for _ in range(300)), dtype=np.int64)
    lengths = np.array([rnd.choice([14, 60, 1082, 9000, 65535]) for _ in range(300)], dtype=np.int64)
    want = [frame_start(int(a), int(b), first, int(c), int(d)) for a, b, c, d in zip(ns, prev, numbers, lengths, strict=True)]
    assert frame_starts(ns, prev, first, numbers, lengths) == want
    assert frame_starts(ns[:0], prev[:0], first, numbers[:0], lengths[:0]) == []


def test_a_blocks_frame_starts_are_left_to_each_frame_outside_what_int64_holds() -> None:
    """A block whose times (its frames', the frame before it's or the first frame's) are before 1970 or past
    2262 gets no column-made starts (numpy's int64 would not hold them): each frame's is made as it is written."""
    ok = [1_795_242_080_870_131_000, 1_795_242_080_891_394_000]
    assert _starts(ok, ok[0], ok[0], 1, [60, 60]) is not None
    assert _starts([*ok, 2**64 * 10**3], ok[0], ok[0], 1, [60, 60, 60]) is None
    assert _starts(ok, 2**64 * 10**3, ok[0], 1, [60, 60]) is None
    assert _starts(ok, ok[0], -5, 1, [60, 60]) is None
    assert _starts([-1, *ok], ok[0], ok[0], 1, [60, 60, 60]) is None
