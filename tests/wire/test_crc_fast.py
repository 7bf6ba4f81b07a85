"""The ICRC's one home (wire/crc.py): its fast pieces against the readable definition.

``mask_rocev2`` (the variant fields set to ones in place, used by icrc_rocev2 and by the UDP
carrier's receive and encode paths) against masking done field by field through the header
declarations; ``icrc_mask_delta`` (the UDP carrier's send path computes one CRC over the bytes as
sent and corrects it) against the ICRC itself; zlib-ng's CRC-32 against zlib's."""

from __future__ import annotations

import os
import random
import zlib

import pytest

from rdmalab.wire.crc import ICRC_SEED, ICRC_VARIANT_FIELDS, crc32, icrc_mask_delta, icrc_rocev2, mask_rocev2
from rdmalab.wire.ib import BTH
from rdmalab.wire.net import UDP, IPv4, IPv6


def _packet(rng: random.Random, version: int, options: int = 0) -> bytes:
    """IP, UDP, BTH and a payload, every field random (the ICRC does not care whether they make sense)."""
    size = rng.randrange(0, 300)
    if version == 4:
        ip = IPv4(ihl=5 + options, dscp=rng.getrandbits(6), ecn=rng.getrandbits(2), ttl=rng.getrandbits(8),
                  checksum=rng.getrandbits(16), identification=rng.getrandbits(16), src=rng.getrandbits(32),
                  dst=rng.getrandbits(32)).encode() + os.urandom(4 * options)
    else:
        ip = IPv6(tclass=rng.getrandbits(8), flowlabel=rng.getrandbits(20), hop_limit=rng.getrandbits(8),
                  src=rng.getrandbits(128), dst=rng.getrandbits(128)).encode()
    udp = UDP(sport=rng.getrandbits(16), dport=4791, checksum=rng.getrandbits(16)).encode()
    bth = BTH(opcode=rng.getrandbits(8), fecn=rng.getrandbits(1), becn=rng.getrandbits(1), resv6=rng.getrandbits(6),
              destqp=rng.getrandbits(24), psn=rng.getrandbits(24)).encode()
    return ip + udp + bth + os.urandom(size)


def _masked_by_fields(pkt: bytes) -> bytes:
    """The definition: decode each header, set its variant fields (ICRC_VARIANT_FIELDS) to all ones."""
    variant = ICRC_VARIANT_FIELDS["rocev2"]
    ip_cls = IPv4 if pkt[0] >> 4 == 4 else IPv6
    ip = ip_cls.decode(pkt)
    at = (pkt[0] & 0x0F) * 4 if ip_cls is IPv4 else 40
    out = []
    for cls, start in ((ip_cls, 0), (UDP, at), (BTH, at + 8)):
        h = cls.decode(pkt, start) if cls is not ip_cls else ip
        ones = {f: cls.LAYOUT.field(f).mask for name, f in variant if name == cls.__name__}
        out.append(h.replace(**ones).encode())
    size4 = IPv4.LAYOUT.size
    options = pkt[size4:at] if ip_cls is IPv4 else b""
    return out[0] + options + out[1] + out[2] + pkt[at + 20:]


@pytest.mark.parametrize(("version", "options"), [(4, 0), (4, 3), (6, 0)])
def test_mask_rocev2_is_the_declared_masking(version: int, options: int) -> None:
    rng = random.Random(version * 10 + options)
    for _ in range(100):
        pkt = _packet(rng, version, options)
        b = bytearray(pkt)
        mask_rocev2(b)
        assert bytes(b) == _masked_by_fields(pkt)
        assert icrc_rocev2(pkt) == zlib.crc32(b"\xff" * 8 + _masked_by_fields(pkt))


def test_icrc_mask_delta_corrects_the_crc_as_sent() -> None:
    rng = random.Random(1)
    for _ in range(100):
        pkt = _packet(rng, 4)
        head = pkt[:40]
        assert crc32(pkt, ICRC_SEED) ^ icrc_mask_delta(head, len(pkt)) == icrc_rocev2(pkt)


def test_not_ip_is_refused() -> None:
    with pytest.raises(ValueError, match="neither 4 nor 6"):
        mask_rocev2(bytearray(b"\x55" + bytes(60)))


def test_crc_is_zlibs() -> None:
    data = os.urandom(5000)
    for cut in (0, 1, 17, 4096):
        assert crc32(data[cut:], crc32(data[:cut])) == zlib.crc32(data)
    # rxe_icrc.c seeds its CRC with 0xdebb20e3, the register after eight 0xFF bytes; zlib returns it inverted
    assert ICRC_SEED == zlib.crc32(b"\xff" * 8) == 0xDEBB20E3 ^ 0xFFFFFFFF
