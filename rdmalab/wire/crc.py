"""The InfiniBand ICRC and VCRC, and the iWARP MPA CRC32c.

ICRC (IBA Vol 1 7.8.1; RoCE Annex A16.8, RoCEv2 Annex A17.3.3): CRC-32 as Ethernet's
(reflected polynomial 0xEDB88320, init and final XOR 0xFFFFFFFF, i.e. ``zlib.crc32``) over the
packet with its *variant* fields set to all ones, preceded by 8 bytes that stand for the LRH.
It is sent least-significant byte first.  The masked fields, per encapsulation:

* native IB: LRH.VL; GRH TClass, FlowLabel, HopLmt; BTH byte 4 (FECN/BECN/Resv6, "Resv8a").
  The first 8 bytes are the real LRH with VL masked.
* RoCEv1: 8 bytes of 0xFF; GRH TClass, FlowLabel, HopLmt; BTH byte 4.
* RoCEv2/IPv4: 8 bytes of 0xFF; IPv4 TOS (DSCP+ECN), TTL, header checksum; UDP checksum;
  BTH byte 4.
* RoCEv2/IPv6: 8 bytes of 0xFF; IPv6 Traffic Class, Flow Label, Hop Limit; UDP checksum;
  BTH byte 4.

This agrees with Linux ``drivers/infiniband/sw/rxe/rxe_icrc.c`` (which seeds the CRC with
0xdebb20e3, the state after eight 0xFF bytes) and reproduces the ICRCs of the public hardware
packets in ``tests/vectors``.

VCRC (IBA Vol 1 7.8.2): CRC-16, polynomial 0x100B, computed reflected (0xD008) with init and
final XOR 0xFFFF over LRH..ICRC, as Endace's DAG capture library (``dagcrc.c``) computes it.
No native-IB hardware packet was available to confirm the byte order on the wire; we send it
least-significant byte first like the ICRC.

MPA CRC (RFC 5044 4.4 and RFC 3385): CRC32c (Castagnoli), least-significant byte first.
"""

from __future__ import annotations

import zlib

import crc32c as _crc32c

_FF8 = b"\xff" * 8

#: The ICRC's variant fields per encapsulation, as (header, field) of the header declarations:
#: the same facts as the byte masks below, in the terms a learner reads (rdmalab.viz.crcsteps
#: draws them; tests/wire/test_packets.py checks that both give the same CRC).
ICRC_VARIANT_FIELDS: dict[str, tuple[tuple[str, str], ...]] = {
    "rocev2": (
        ("IPv4", "dscp"), ("IPv4", "ecn"), ("IPv4", "ttl"), ("IPv4", "checksum"),
        ("IPv6", "tclass"), ("IPv6", "flowlabel"), ("IPv6", "hop_limit"),
        ("UDP", "checksum"),
        ("BTH", "fecn"), ("BTH", "becn"), ("BTH", "resv6"),
    ),
    "rocev1": (
        ("GRH", "tclass"), ("GRH", "flowlabel"), ("GRH", "hoplmt"),
        ("BTH", "fecn"), ("BTH", "becn"), ("BTH", "resv6"),
    ),
    "ib": (
        ("LRH", "vl"),
        ("GRH", "tclass"), ("GRH", "flowlabel"), ("GRH", "hoplmt"),
        ("BTH", "fecn"), ("BTH", "becn"), ("BTH", "resv6"),
    ),
}


def _mask_grh(b: bytearray, at: int) -> None:
    b[at] |= 0x0F  # low nibble of byte 0: TClass high bits
    b[at + 1] = b[at + 2] = b[at + 3] = 0xFF  # TClass low bits + FlowLabel
    b[at + 7] = 0xFF  # HopLmt


def icrc_rocev2(ip_through_pad: bytes | bytearray | memoryview) -> int:
    """ICRC of a RoCEv2 packet given from the IP header through the pad (no ICRC).

    Returns the CRC value; the wire bytes are ``value.to_bytes(4, "little")``.
    """
    b = bytearray(ip_through_pad)
    version = b[0] >> 4
    if version == 4:
        ihl = (b[0] & 0x0F) * 4
        b[1] = 0xFF  # TOS
        b[8] = 0xFF  # TTL
        b[10] = b[11] = 0xFF  # header checksum
        udp = ihl
    elif version == 6:
        _mask_grh(b, 0)
        udp = 40
    else:
        raise ValueError(f"IP version {version} is neither 4 nor 6")
    b[udp + 6] = b[udp + 7] = 0xFF  # UDP checksum
    b[udp + 8 + 4] = 0xFF  # BTH byte 4
    return zlib.crc32(b, zlib.crc32(_FF8))


def icrc_rocev1(grh_through_pad: bytes | bytearray | memoryview) -> int:
    """ICRC of a RoCEv1 packet given from the GRH through the pad."""
    b = bytearray(grh_through_pad)
    _mask_grh(b, 0)
    b[40 + 4] = 0xFF
    return zlib.crc32(b, zlib.crc32(_FF8))


def icrc_ib(lrh_through_pad: bytes | bytearray | memoryview) -> int:
    """ICRC of a native IB packet given from the LRH through the pad."""
    b = bytearray(lrh_through_pad)
    b[0] |= 0xF0  # VL
    bth = 8
    if b[1] & 0x03 == 3:  # LNH: GRH follows
        _mask_grh(b, 8)
        bth = 48
    b[bth + 4] = 0xFF
    return zlib.crc32(b)


def _vcrc_table() -> tuple[int, ...]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0xD008 if c & 1 else c >> 1
        table.append(c)
    return tuple(table)


_VCRC_TABLE = _vcrc_table()


def vcrc(lrh_through_icrc: bytes | bytearray | memoryview) -> int:
    """VCRC of a native IB packet given from the LRH through the ICRC."""
    c = 0xFFFF
    for byte in bytes(lrh_through_icrc):
        c = _VCRC_TABLE[(c ^ byte) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFF


def crc32c(data: bytes | bytearray | memoryview) -> int:
    """CRC32c (Castagnoli) as MPA uses it; wire bytes are ``value.to_bytes(4, "little")``."""
    return int(_crc32c.crc32c(bytes(data)))
