"""The UDP carrier's fast datagram decoder (``udp_codec._decode_ipv4``) against its reference
(``decode_datagram_reference``), packet for packet: every opcode the engine knows, random fields and
payloads, with and without the ICRC check, and damaged datagrams (a flipped bit, cut short, a wrong
length, port or protocol)."""

from __future__ import annotations

import random
from typing import Any

import pytest

from rdmalab.fabric.udp_codec import _decode_ipv4, decode_datagram, decode_datagram_reference, encode_datagram
from rdmalab.verbs.engine.packet import _ATTR, INFO, Pkt
from rdmalab.wire.header import Header

FIELDS = ("opcode", "psn", "destqp", "ackreq", "se", "src_gid", "dst_gid", "sport", "pkey", "reth", "aeth", "deth",
          "imm", "ieth", "atomic", "atomic_ack")


def _random_header(cls: type[Header], rng: random.Random) -> Header:
    return cls(*[rng.getrandbits(f.bits) for f in cls.LAYOUT.fields])


def _packet(code: int, rng: random.Random) -> Pkt:
    n = rng.choice([0, 1, 2, 3, 4, 5, 64, 255, 1024])
    p = Pkt(code, rng.getrandbits(24), rng.getrandbits(24), 0xFFFF00000000 | rng.getrandbits(32),
            0xFFFF00000000 | rng.getrandbits(32), rng.getrandbits(16), 0, 0, rng.randbytes(n), rng.getrandbits(1),
            rng.getrandbits(1))
    p.ecn = rng.getrandbits(2)
    for cls in INFO[code].headers:
        if cls in _ATTR:
            setattr(p, _ATTR[cls], _random_header(cls, rng))
    return p


def _same(a: Pkt | None, b: Pkt | None) -> None:
    assert (a is None) == (b is None)
    if a is None or b is None:
        return
    for f in FIELDS:
        assert getattr(a, f) == getattr(b, f), f
    assert bytes(a.payload) == bytes(b.payload)


def _damaged(d: bytes, rng: random.Random) -> list[bytes]:
    out = []
    flip = bytearray(d)
    flip[rng.randrange(len(d))] ^= 1 << rng.randrange(8)
    out.append(bytes(flip))
    out.append(d[:rng.randrange(len(d))])
    for at, value in ((2, b"\xff\xff"), (2, b"\x00\x10"), (9, b"\x06"), (22, b"\x12\xb8")):
        bad = bytearray(d)
        bad[at:at + len(value)] = value
        out.append(bytes(bad))
    return out


@pytest.mark.parametrize("code", sorted(INFO))
def test_every_opcode_decodes_as_the_reference_does(code: int) -> None:
    rng = random.Random(code)
    for _ in range(8):
        d = encode_datagram(_packet(code, rng), rng.randrange(1, 0x10000))
        assert d[0] == 0x45
        got = _decode_ipv4(d, False)
        assert got is not None
        _same(got, decode_datagram_reference(d, False))
        _same(_decode_ipv4(d, True), decode_datagram_reference(d, True))
        for bad in _damaged(d, rng):
            for checked in (False, True):
                ref: Any = decode_datagram_reference(bad, checked)
                _same(decode_datagram(bad, checked), ref)


def test_an_rd_or_flush_packet_is_decoded_without_a_crash() -> None:
    # The engine's packet has no attribute for RD's RDETH or FLUSH's FETH: the reference used to raise
    # KeyError on such a datagram from the wire (a crash of the carrier's receive loop).
    rng = random.Random(7)
    for code in (0x1C, 0x40, 0x4A):
        d = encode_datagram(_packet(code, rng), 9)
        got = decode_datagram(d)
        assert got is not None and got.opcode == code
        _same(got, decode_datagram_reference(d))


def test_ip_options_take_the_reference_path() -> None:
    rng = random.Random(3)
    d = bytearray(encode_datagram(_packet(0x11, rng), 5))
    # an IP header with one 4-byte option (NOP x4): IHL 6, total length + 4
    opt = bytes([0x46]) + d[1:2] + (len(d) + 4).to_bytes(2, "big") + d[4:20] + b"\x01\x01\x01\x01" + d[20:]
    got = decode_datagram(opt, icrc_checked=True)  # (the ICRC covers the header: the option changed it)
    assert got is not None and got.aeth is not None
    _same(got, decode_datagram_reference(opt, icrc_checked=True))
    assert decode_datagram(opt) is None
