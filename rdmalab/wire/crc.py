"""The InfiniBand ICRC and VCRC, and the iWARP MPA CRC32c.

ICRC (IBA Vol 1 7.8.1; RoCE Annex A16.8, RoCEv2 Annex A17.3.3): CRC-32 as Ethernet's
(reflected polynomial 0xEDB88320, init and final XOR 0xFFFFFFFF, i.e. ``zlib.crc32``) over the
packet with its *variant* fields set to all ones, preceded by 8 bytes that stand for the LRH.
It is sent least-significant byte first.  The masked fields, per encapsulation:

* native IB, local (LNH 2, no GRH): LRH.VL; BTH byte 4 (FECN/BECN/Resv6, "Resv8a").  The first
  8 bytes are the real LRH with VL masked.
* native IB, global (LNH 3, a GRH follows): the whole LRH (all 8 bytes), since a router rebuilds
  the LRH of a packet it forwards between subnets (new DLID/SLID/SL/VL); GRH TClass, FlowLabel,
  HopLmt; BTH byte 4.  IBA 7.8.1 makes the covered fields depend on the GRH for exactly this
  reason, and RoCE's 8 bytes of ones are this rule with the LRH absent: the ICRC of a global IB
  packet is the RoCEv1 ICRC of its GRH through pad.  Checked on ConnectX packets of a public
  ERF capture (``captures/hw_ib_connectx_erf.pcap``: IPoIB multicast with a GRH, and local
  traffic whose ICRC covers the LRH but VL).
* RoCEv1: 8 bytes of 0xFF; GRH TClass, FlowLabel, HopLmt; BTH byte 4.
* RoCEv2/IPv4: 8 bytes of 0xFF; IPv4 TOS (DSCP+ECN), TTL, header checksum; UDP checksum;
  BTH byte 4.
* RoCEv2/IPv6: 8 bytes of 0xFF; IPv6 Traffic Class, Flow Label, Hop Limit; UDP checksum;
  BTH byte 4.

This agrees with Linux ``drivers/infiniband/sw/rxe/rxe_icrc.c`` (which seeds the CRC with
0xdebb20e3, the state after eight 0xFF bytes) and reproduces the ICRCs of the public hardware
packets in ``captures/public_hw_byte_vectors.pcap`` and ``captures/hw_ib_connectx_erf.pcap``.

VCRC (IBA Vol 1 7.8.2): CRC-16, polynomial 0x100B, computed reflected (0xD008) with init and
final XOR 0xFFFF over LRH..ICRC, as Endace's DAG capture library (``dagcrc.c``) computes it,
sent least-significant byte first like the ICRC: the 43 VCRCs of the ConnectX capture above
verify so.

MPA CRC (RFC 5044 4.4 and RFC 3385): CRC32c (Castagnoli), least-significant byte first.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import zlib
from collections.abc import Callable

# zlib-ng's CRC-32 is zlib's function (the ICRC's) with a folding (PCLMULQDQ) implementation, about ten
# times faster over a 4 KiB packet; the same results bit for bit (tests/wire/test_crc_fast.py).
from zlib_ng.zlib_ng import crc32 as crc32  # (re-exported: the carriers take it from here)

from rdmalab.wire.header import Header
from rdmalab.wire.ib import BTH, GRH, LNH_IBA_GLOBAL, LRH
from rdmalab.wire.net import UDP, IPv4, IPv6

_FF8 = b"\xff" * 8

#: The ICRC's variant fields per encapsulation, as (header, field) of the header declarations.
#: Declared once: the byte masks the CRC functions below apply are derived from this table and
#: the header layouts, and rdmalab.viz.crcsteps draws the same table.
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
    # native IB without a GRH (LNH 2): only what a switch may change
    "ib": (
        ("LRH", "vl"),
        ("BTH", "fecn"), ("BTH", "becn"), ("BTH", "resv6"),
    ),
    # native IB with a GRH (LNH 3): a router rebuilds the whole LRH
    "ib_global": (
        *(("LRH", f.name) for f in LRH.LAYOUT.fields),
        ("GRH", "tclass"), ("GRH", "flowlabel"), ("GRH", "hoplmt"),
        ("BTH", "fecn"), ("BTH", "becn"), ("BTH", "resv6"),
    ),
}


def _or_masks(header: type[Header], names: tuple[str, ...]) -> tuple[tuple[int, int], ...]:
    """``(byte offset, bits)`` pairs that set the fields ``names`` of ``header`` to all ones."""
    lay = header.LAYOUT
    mask = 0
    for name in names:
        f = lay.field(name)
        mask |= f.mask << f.shift
    raw = mask.to_bytes(lay.size, "big")
    return tuple((i, b) for i, b in enumerate(raw) if b)


def _masks(encap: str) -> dict[str, tuple[tuple[int, int], ...]]:
    """Header name -> its ICRC byte masks for ``encap``, from :data:`ICRC_VARIANT_FIELDS`."""
    classes: dict[str, type[Header]] = {"IPv4": IPv4, "IPv6": IPv6, "UDP": UDP, "BTH": BTH, "GRH": GRH, "LRH": LRH}
    out: dict[str, tuple[tuple[int, int], ...]] = {}
    for hname in dict.fromkeys(h for h, _ in ICRC_VARIANT_FIELDS[encap]):
        out[hname] = _or_masks(classes[hname], tuple(f for h, f in ICRC_VARIANT_FIELDS[encap] if h == hname))
    return out


_ROCEV2 = _masks("rocev2")
_ROCEV1 = _masks("rocev1")
_IB = _masks("ib")
_IB_GLOBAL = _masks("ib_global")


def _apply(b: bytearray, at: int, masks: tuple[tuple[int, int], ...]) -> None:
    for i, bits in masks:
        b[at + i] |= bits


#: zlib's CRC-32 of the 8 bytes of ones that stand for the LRH (rxe_icrc.c seeds its register with
#: 0xdebb20e3, the same state before zlib's final inversion):
#: ``crc32(masked, ICRC_SEED)`` is the ICRC of the masked bytes.
ICRC_SEED = zlib.crc32(_FF8)


def mask_rocev2(b: bytearray) -> None:
    """Set the ICRC's variant fields of a RoCEv2 packet (``b`` from the IP header; IPv4 with or
    without options, or IPv6) to all ones, in place.  The one implementation of the masking:
    :func:`icrc_rocev2` and the UDP carrier's fast paths all use it."""
    version = b[0] >> 4
    if version == 4:
        _apply(b, 0, _ROCEV2["IPv4"])
        udp = (b[0] & 0x0F) * 4
    elif version == 6:
        _apply(b, 0, _ROCEV2["IPv6"])
        udp = IPv6.LAYOUT.size
    else:
        raise ValueError(f"IP version {version} is neither 4 nor 6")
    _apply(b, udp, _ROCEV2["UDP"])
    _apply(b, udp + UDP.LAYOUT.size, _ROCEV2["BTH"])


def icrc_rocev2(ip_through_pad: bytes | bytearray | memoryview) -> int:
    """ICRC of a RoCEv2 packet given from the IP header through the pad (no ICRC).

    Returns the CRC value; the wire bytes are ``value.to_bytes(4, "little")``.
    """
    b = bytearray(ip_through_pad)
    mask_rocev2(b)
    return crc32(b, ICRC_SEED)


def icrc_mask_delta(head: bytes | bytearray | memoryview, length: int) -> int:
    """What to XOR into ``crc32(datagram, ICRC_SEED)``, the CRC of a RoCEv2 datagram of ``length``
    bytes (IP header through pad) *as sent*, to get its ICRC, for datagrams that begin with ``head``
    (every variant field inside it, unmasked, as on the wire).

    CRC-32 is affine: over messages of one length from one starting state,
    ``crc(x ^ y) == crc(x) ^ crc(y) ^ crc(zeros)``.  The masked datagram is the one sent XOR a
    pattern that depends only on ``head`` (ones where a variant field has zeros), so the ICRC is
    the CRC as sent XOR ``crc(pattern) ^ crc(zeros)``: a carrier computes one CRC over the bytes it
    sends, and this correction once per kind of header and length."""
    masked = bytearray(head)
    mask_rocev2(masked)
    pattern = bytes(a ^ b for a, b in zip(masked, head, strict=True)) + bytes(length - len(head))
    return crc32(pattern, ICRC_SEED) ^ crc32(bytes(length), ICRC_SEED)


def icrc_rocev1(grh_through_pad: bytes | bytearray | memoryview) -> int:
    """ICRC of a RoCEv1 packet given from the GRH through the pad."""
    b = bytearray(grh_through_pad)
    _apply(b, 0, _ROCEV1["GRH"])
    _apply(b, GRH.LAYOUT.size, _ROCEV1["BTH"])
    return zlib.crc32(b, zlib.crc32(_FF8))


def icrc_rule_ib(lrh_through_pad: bytes | bytearray | memoryview) -> str:
    """Which ICRC rule a native IB packet (given from its LRH) follows: ``"ib_global"`` when its
    LRH says a GRH follows (LNH 3), ``"ib"`` otherwise (the keys of :data:`ICRC_VARIANT_FIELDS`)."""
    if len(lrh_through_pad) < LRH.LAYOUT.size:
        raise ValueError(f"a native IB packet starts with an 8-byte LRH; got {len(lrh_through_pad)} bytes")
    return "ib_global" if lrh_through_pad[1] & 0x3 == LNH_IBA_GLOBAL else "ib"


def icrc_masked_ib(lrh_through_pad: bytes | bytearray | memoryview) -> bytes:
    """The bytes :func:`icrc_ib` runs the CRC over: the packet from the LRH through the pad with
    the variant fields of its rule (:func:`icrc_rule_ib`) set to ones.  With a GRH the LRH becomes
    8 bytes of ones, so these bytes are :data:`ICRC_SEED`'s ones followed by RoCEv1's masked bytes."""
    b = bytearray(lrh_through_pad)
    masks = _IB_GLOBAL if icrc_rule_ib(b) == "ib_global" else _IB
    _apply(b, 0, masks["LRH"])
    bth = LRH.LAYOUT.size
    if "GRH" in masks:
        _apply(b, bth, masks["GRH"])
        bth += GRH.LAYOUT.size
    _apply(b, bth, masks["BTH"])
    return bytes(b)


def icrc_ib(lrh_through_pad: bytes | bytearray | memoryview) -> int:
    """ICRC of a native IB packet given from the LRH through the pad: the LRH's VL masked when no
    GRH follows, the whole LRH when one does (IBA Vol 1 7.8.1; see the module docstring)."""
    return crc32(icrc_masked_ib(lrh_through_pad))


def icrc_masks(encap: str) -> dict[str, tuple[tuple[int, int], ...]]:
    """The ICRC's variant-field masks for ``encap`` ("rocev2", "rocev1", "ib" or "ib_global"): header name ->
    ``(byte offset within the header, bits set to one)`` pairs, derived from
    :data:`ICRC_VARIANT_FIELDS`.  The functions here apply them to one packet; fast paths that
    mask many packets at once (the columnar decoder) apply the same pairs."""
    return dict({"rocev2": _ROCEV2, "rocev1": _ROCEV1, "ib": _IB, "ib_global": _IB_GLOBAL}[encap])


def icrc_masked_rocev2(ip_through_pad: bytes | bytearray | memoryview) -> bytes:
    """The bytes :func:`icrc_rocev2` runs the CRC over (after :data:`ICRC_SEED`): the packet from the
    IP header through the pad with its variant fields set to ones (:func:`mask_rocev2`)."""
    b = bytearray(ip_through_pad)
    mask_rocev2(b)
    return bytes(b)


def icrc_masked_rocev1(grh_through_pad: bytes | bytearray | memoryview) -> bytes:
    """The bytes :func:`icrc_rocev1` runs the CRC over (after :data:`ICRC_SEED`)."""
    b = bytearray(grh_through_pad)
    _apply(b, 0, _ROCEV1["GRH"])
    _apply(b, GRH.LAYOUT.size, _ROCEV1["BTH"])
    return bytes(b)


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


def crc32c_function() -> Callable[[bytes | bytearray | memoryview], int]:
    """The CRC32c function :func:`crc32c` calls (the ``crc32c`` package's: any bytes-like object,
    slices of a memoryview without a copy), for a loop over many FPDUs."""
    global _CRC32C
    if _CRC32C is None:
        _CRC32C = _load_crc32c()
    return _CRC32C


#: the ``crc32c`` package's function, once loaded (:func:`_load_crc32c`)
_CRC32C: Callable[[bytes | bytearray | memoryview], int] | None = None


def _load_crc32c() -> Callable[[bytes | bytearray | memoryview], int]:
    """The ``crc32c`` package's C function.  Its extension module is loaded by itself when it can be
    found: the package's ``__init__`` imports :mod:`importlib.metadata` for its version string,
    which costs more start-up than the whole extension (``python -X importtime``: 34 ms for the
    package, 26 ms of it importlib.metadata, 0.4 ms for the extension); else the package."""
    spec = importlib.util.find_spec("crc32c")  # finds the package without running it
    for where in (spec.submodule_search_locations or []) if spec is not None else []:
        for name in os.listdir(where):
            if name.startswith("_crc32c.") and name.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES)):
                loader = importlib.machinery.ExtensionFileLoader("crc32c._crc32c", os.path.join(where, name))
                spec = importlib.util.spec_from_loader(loader.name, loader)
                if spec is None:
                    break
                ext = importlib.util.module_from_spec(spec)
                loader.exec_module(ext)
                fn: Callable[[bytes | bytearray | memoryview], int] = ext.crc32c
                return fn
    import crc32c as _crc32c  # lazy: only iWARP needs it (start-up and memory of the RoCE-only paths)

    fn = _crc32c.crc32c
    return fn


def crc32c(data: bytes | bytearray | memoryview) -> int:
    """CRC32c (Castagnoli) as MPA uses it; wire bytes are ``value.to_bytes(4, "little")``."""
    return int(crc32c_function()(bytes(data)))
