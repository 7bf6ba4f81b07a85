"""MPA, Marker PDU Aligned framing for TCP (RFC 5044), with the RFC 6581 enhancements.

MPA turns a TCP byte stream into framed PDUs for DDP.  A connection starts in *streaming mode*
with one MPA Request frame (initiator -> responder) and one MPA Reply frame (responder ->
initiator); after that both directions carry FPDUs ("full operation")::

    | ULPDU_Length (16) | ULPDU (the DDP segment) | PAD (0..3) | CRC32c (32) |

with an optional 4-byte *marker* (Reserved 16 | FPDUPTR 16) at every 512th octet of TCP
sequence space, counted from the first octet of the first FPDU of each direction.  The CRC
covers the length field, the ULPDU, the pad and any markers inside the FPDU, and is sent
least-significant byte first.

This module holds the MPA headers and the framing arithmetic (pad, markers, CRC); the
decoding of whole FPDUs into DDP/RDMAP layers is :func:`rdmalab.wire.iwarp.decode_fpdu`.

Marker positions are given as a *stream position*: the number of TCP octets between the
first octet of the first FPDU of the direction and the first octet of the FPDU at hand,
i.e. ``(tcp_seq_of_this_fpdu - tcp_seq_of_first_fpdu) % 2**32``.  A marker sits wherever
``stream position % 512 == 0`` (Wireshark's convention, ``packet-iwarp-mpa.c``); a marker
that falls immediately after an FPDU's CRC belongs to the *next* FPDU.

Section numbers cited are those of the RFCs as we recall them; the layouts themselves are
cross-checked against Wireshark 4.0 and Linux siw (see ``tests/wire/test_iwarp.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from rdmalab.wire import crc as _crc
from rdmalab.wire.errors import EncodeError, MalformedError, TruncatedError
from rdmalab.wire.header import F, Header, Layout, layout

MPA_KEY_REQ = b"MPA ID Req Frame"
MPA_KEY_REP = b"MPA ID Rep Frame"
MPA_KEY_REQ_INT = int.from_bytes(MPA_KEY_REQ, "big")
MPA_KEY_REP_INT = int.from_bytes(MPA_KEY_REP, "big")
MPA_KEY_PREFIX = b"MPA ID Re"  # common to both keys: cheap first check on a TCP stream

MPA_PD_MAX = 512  # RFC 5044: private data is at most 512 octets
MARKER_INTERVAL = 512  # RFC 5044: markers every 512 octets of TCP sequence space
MARKER_SIZE = 4
MPA_HEADER_SIZE = 2
MPA_CRC_SIZE = 4
MAX_ULPDU = 0xFFFF

# Flags of byte 16 of the Request/Reply frame
MPA_FLAG_MARKERS = 0x80
MPA_FLAG_CRC = 0x40
MPA_FLAG_REJECT = 0x20
MPA_FLAG_ENHANCED = 0x10  # RFC 6581 (Rev 2): IRD/ORD words lead the private data
MPA_FLAG_SIW_GSO = 0x08  # Linux siw's non-standard "G" flag

# RFC 6581 IRD/ORD word bits (as Linux siw/cxgb4/irdma name them)
MPA_V2_PEER_TO_PEER = 0x8000
MPA_V2_ZERO_LENGTH_RTR = 0x4000
MPA_V2_RDMA_WRITE_RTR = 0x8000
MPA_V2_RDMA_READ_RTR = 0x4000
MPA_V2_NO_IRD_ORD = 0x3FFF
MPA_V2_IRD_ORD_MASK = 0x3FFF


def pad_length(ulpdu_length: int) -> int:
    """PAD octets after a ULPDU so that ``2 + ULPDU_Length + PAD`` is a multiple of 4."""
    return -(ulpdu_length + MPA_HEADER_SIZE) % 4


def fpdu_length(ulpdu_length: int) -> int:
    """Octets of an FPDU without markers: length field, ULPDU, pad and CRC (RFC 5044 4.1:
    ``2 + ULPDU_Length + PAD`` rounded up to 4, then the 4-octet CRC)."""
    return (MPA_HEADER_SIZE + ulpdu_length + 3 & ~3) + MPA_CRC_SIZE


def mulpdu(emss: int, markers: bool = False) -> int:
    """Largest ULPDU that fits one TCP segment of ``emss`` payload octets.

    RFC 5044 (MULPDU): ``EMSS - (6 + 4 * ceil(EMSS / 512) + EMSS mod 4)`` with markers and
    ``EMSS - (6 + EMSS mod 4)`` without.  (Formula recalled from the RFC text; it keeps the
    FPDU, pad, CRC and every marker the segment could hold within ``emss``.)
    """
    if emss <= 0:
        raise EncodeError("MPA", "emss", emss, "a positive segment size")
    overhead = 6 + emss % 4 + (4 * -(-emss // MARKER_INTERVAL) if markers else 0)
    return max(0, min(MAX_ULPDU, emss - overhead))


# ============================================================================ headers


@dataclass(frozen=True, slots=True)
class MPAReqRep(Header):
    """MPA Request or Reply frame header, 20 bytes, followed by ``pd_length`` octets.

    ``res`` holds the five low bits of byte 16: RFC 5044 reserves them, RFC 6581 (Rev 2) uses
    0x10 for "enhanced" connection setup (IRD/ORD words), and Linux siw puts its private "G"
    (GSO) flag at 0x08.  Wireshark 4.0 knows only Rev 1 and warns on Rev 2 frames.
    """

    key: int = MPA_KEY_REQ_INT
    marker_flag: int = 0
    crc_flag: int = 1
    rej_flag: int = 0
    res: int = 0
    rev: int = 1
    pd_length: int = 0

    LAYOUT: ClassVar[Layout] = layout(
        "MPA Req/Rep",
        "RFC 5044 7.1.1 (MPA Request and Reply Frame Format); RFC 6581 (Rev 2)",
        F("key", 128, None, fmt="bytes", doc='"MPA ID Req Frame" or "MPA ID Rep Frame"'),
        F("marker_flag", 1, "iwarp_mpa.marker_flag", doc="M: the sender wants markers in the FPDUs it receives"),
        F("crc_flag", 1, "iwarp_mpa.crc_flag", doc="C: CRC32c wanted (used if either side sets it)"),
        F("rej_flag", 1, "iwarp_mpa.rej_flag", doc="R: the responder rejects the connection"),
        F("res", 5, "iwarp_mpa.res", fmt="hex", doc="Reserved; 0x10 = enhanced (RFC 6581)"),
        F("rev", 8, "iwarp_mpa.rev", doc="MPA revision: 1 (RFC 5044) or 2 (RFC 6581)"),
        F("pd_length", 16, "iwarp_mpa.pdlength", doc="Private data octets that follow"),
        ws="iwarp_mpa",
    )

    @property
    def is_request(self) -> bool:
        return self.key == MPA_KEY_REQ_INT

    @property
    def is_reply(self) -> bool:
        return self.key == MPA_KEY_REP_INT

    @property
    def enhanced(self) -> bool:
        return bool(self.res & MPA_FLAG_ENHANCED)

    def validate(self, offset: int = 0) -> list[MalformedError]:
        out = []
        if self.key not in (MPA_KEY_REQ_INT, MPA_KEY_REP_INT):
            out.append(MalformedError("MPA Req/Rep", "key", offset, self.key.to_bytes(16, "big"),
                                      '"MPA ID Req Frame" or "MPA ID Rep Frame"'))
        if self.rev not in (1, 2):
            out.append(MalformedError("MPA Req/Rep", "rev", offset + 17, self.rev, "1 (RFC 5044) or 2 (RFC 6581)"))
        allowed = 0 if self.rev == 1 else MPA_FLAG_ENHANCED | MPA_FLAG_SIW_GSO
        if self.res & ~allowed:
            out.append(MalformedError("MPA Req/Rep", "res", offset + 16, self.res,
                                      f"reserved bits zero (allowed 0x{allowed:02x} for Rev {self.rev})"))
        if self.pd_length > MPA_PD_MAX:
            out.append(MalformedError("MPA Req/Rep", "pd_length", offset + 18, self.pd_length,
                                      f"at most {MPA_PD_MAX} (RFC 5044)"))
        if self.rej_flag and self.is_request:
            out.append(MalformedError("MPA Req/Rep", "rej_flag", offset + 16, 1, "0 in a Request (R is valid in a Reply)"))
        return out

    def describe(self, field: str) -> str:
        if field == "key":
            raw = self.key.to_bytes(16, "big")
            text = raw.decode("ascii", "replace")
            return f'"{text}"' if raw in (MPA_KEY_REQ, MPA_KEY_REP) else raw.hex()
        if field == "res" and self.res:
            names = [n for bit, n in ((MPA_FLAG_ENHANCED, "enhanced"), (MPA_FLAG_SIW_GSO, "siw GSO")) if self.res & bit]
            return f"0x{self.res:02x}" + (f" ({', '.join(names)})" if names else "")
        return Header.describe(self, field)

    def ws_fields(self) -> dict[str, int]:
        out = Header.ws_fields(self)
        out["iwarp_mpa.key.rep" if self.is_reply else "iwarp_mpa.key.req"] = self.key
        return out


@dataclass(frozen=True, slots=True)
class MPAv2IRDORD(Header):
    """RFC 6581 IRD/ORD words: the first 4 octets of private data when Rev = 2 (enhanced).

    IRD word: P (peer-to-peer, 0x8000), Z (zero-length Send RTR, 0x4000), IRD (14 bits).
    ORD word: W (zero-length RDMA Write RTR, 0x8000), R (zero-length RDMA Read RTR, 0x4000),
    ORD (14 bits).  0x3FFF means "no IRD/ORD value".  Wireshark 4.0 shows these as raw
    private data; the bit names follow Linux siw/cxgb4/irdma.
    """

    p2p: int = 0
    zero_rtr: int = 0
    ird: int = 0
    write_rtr: int = 0
    read_rtr: int = 0
    ord: int = 0

    LAYOUT: ClassVar[Layout] = layout(
        "MPA IRD/ORD",
        "RFC 6581 (Enhanced MPA connection establishment: IRD/ORD and RTR bits)",
        F("p2p", 1, "rdmalab.mpa.p2p", doc="Peer-to-peer: an RTR message follows the Reply"),
        F("zero_rtr", 1, "rdmalab.mpa.rtr_send", doc="Zero-length Send (FPDU) RTR offered/chosen"),
        F("ird", 14, "rdmalab.mpa.ird", doc="Inbound RDMA Read queue depth"),
        F("write_rtr", 1, "rdmalab.mpa.rtr_write", doc="Zero-length RDMA Write RTR"),
        F("read_rtr", 1, "rdmalab.mpa.rtr_read", doc="Zero-length RDMA Read RTR"),
        F("ord", 14, "rdmalab.mpa.ord", doc="Outbound RDMA Read queue depth"),
    )

    def describe(self, field: str) -> str:
        if field in ("ird", "ord") and getattr(self, field) == MPA_V2_NO_IRD_ORD:
            return "0x3fff (none)"
        return Header.describe(self, field)


@dataclass(frozen=True, slots=True)
class MPA(Header):
    """FPDU header: the ULPDU length (RFC 5044 4.1).  Pad and CRC32c follow the ULPDU."""

    ulpdu_length: int = 0

    LAYOUT: ClassVar[Layout] = layout(
        "MPA",
        "RFC 5044 4.1 (MPA Full Operation Phase FPDU Format)",
        F("ulpdu_length", 16, "iwarp_mpa.ulpdulength",
          doc="Octets of the ULPDU (DDP segment); excludes the length field, pad, CRC and markers"),
        ws="iwarp_mpa",
    )

    def describe(self, field: str) -> str:
        if field == "ulpdu_length":
            pad = pad_length(self.ulpdu_length)
            return f"{self.ulpdu_length} bytes (+{pad} pad)"
        return Header.describe(self, field)


@dataclass(frozen=True, slots=True)
class MPAMarker(Header):
    """A marker: 4 octets at every 512th octet of TCP sequence space (RFC 5044 4.3)."""

    reserved: int = 0
    fpduptr: int = 0

    LAYOUT: ClassVar[Layout] = layout(
        "MPA Marker",
        "RFC 5044 4.3 (MPA Markers)",
        F("reserved", 16, "iwarp_mpa.marker_res", fmt="hex", reserved=True, const=0),
        F("fpduptr", 16, "iwarp_mpa.marker_fpduptr",
          doc="Octets from the start of the FPDU header to this marker (FPDU back pointer)"),
        ws="iwarp_mpa",
    )


# ============================================================================ markers


def marker_offsets(stream_pos: int, length: int) -> list[int]:
    """Offsets (in wire bytes, from the FPDU start) of the markers in an FPDU.

    ``length`` is the FPDU's size *without* markers; the wire size is that plus 4 per marker.
    """
    out: list[int] = []
    wire = 0
    logical = 0
    pos = stream_pos % MARKER_INTERVAL
    while logical < length:
        if (pos + wire) % MARKER_INTERVAL == 0:
            out.append(wire)
            wire += MARKER_SIZE
            continue
        # jump to the next marker position or the end of the FPDU, whichever comes first
        to_marker = MARKER_INTERVAL - (pos + wire) % MARKER_INTERVAL
        step = min(to_marker, length - logical)
        wire += step
        logical += step
    return out


def insert_markers(fpdu: bytes, stream_pos: int) -> bytes:
    """``fpdu`` (length field through CRC, or through pad) with markers inserted."""
    offsets = marker_offsets(stream_pos, len(fpdu))
    if not offsets:
        return bytes(fpdu)
    parts: list[bytes] = []
    src = 0
    wire = 0
    for m in offsets:
        take = m - wire
        parts.append(fpdu[src : src + take])
        src += take
        parts.append(MPAMarker(0, m & 0xFFFF).encode())
        wire = m + MARKER_SIZE
    parts.append(fpdu[src:])
    return b"".join(parts)


def gather(
    buf: bytes | bytearray | memoryview, offset: int, count: int, stream_pos: int | None
) -> tuple[bytes, int, list[tuple[int, bytes]]]:
    """Read ``count`` FPDU octets at ``offset`` skipping markers (if ``stream_pos`` is given).

    Returns ``(octets, wire_length, markers)`` where markers are ``(wire_offset, 4 raw bytes)``
    relative to ``offset``.  Raises :class:`TruncatedError` if ``buf`` ends first.
    """
    if stream_pos is None:
        end = offset + count
        if end > len(buf):
            raise TruncatedError("MPA", None, offset, len(buf) - offset, f"{count} bytes of FPDU")
        return bytes(buf[offset:end]), count, []
    parts: list[bytes] = []
    markers: list[tuple[int, bytes]] = []
    wire = 0
    got = 0
    pos = stream_pos % MARKER_INTERVAL
    while got < count:
        at = offset + wire
        if (pos + wire) % MARKER_INTERVAL == 0:
            if at + MARKER_SIZE > len(buf):
                raise TruncatedError("MPA Marker", None, at, len(buf) - at, "a 4-byte marker")
            markers.append((wire, bytes(buf[at : at + MARKER_SIZE])))
            wire += MARKER_SIZE
            continue
        to_marker = MARKER_INTERVAL - (pos + wire) % MARKER_INTERVAL
        step = min(to_marker, count - got)
        if at + step > len(buf):
            raise TruncatedError("MPA", None, offset, len(buf) - offset - len(markers) * MARKER_SIZE,
                                 f"{count} bytes of FPDU (plus markers)")
        parts.append(bytes(buf[at : at + step]))
        wire += step
        got += step
    return b"".join(parts), wire, markers


def ulpdu_length_at(buf: bytes | bytearray | memoryview, offset: int = 0, stream_pos: int | None = None) -> int:
    """The ULPDU_Length of the FPDU starting at ``buf[offset]`` (RFC 5044 4.1, its first two octets,
    big-endian), a marker due before them skipped when ``stream_pos`` is given (see the module
    docstring).  Raises :class:`TruncatedError` if ``buf`` ends before the field does."""
    if stream_pos is None:
        if offset + MPA_HEADER_SIZE > len(buf):
            raise TruncatedError("MPA", "ulpdu_length", offset, len(buf) - offset, "2 bytes of ULPDU_Length")
        return (buf[offset] << 8) | buf[offset + 1]
    head, _, _ = gather(buf, offset, MPA_HEADER_SIZE, stream_pos)
    return int.from_bytes(head, "big")


def fpdu_wire_length(buf: bytes | bytearray | memoryview, offset: int = 0, stream_pos: int | None = None) -> int | None:
    """Wire octets of the FPDU starting at ``offset`` (markers included), or ``None`` if the
    buffer does not yet hold its length field.  Does not need the rest of the FPDU."""
    if stream_pos is None:  # no marker to skip: the length field's two octets, when held
        if offset + MPA_HEADER_SIZE > len(buf):
            return None
        return fpdu_length((buf[offset] << 8) | buf[offset + 1])
    try:
        n = fpdu_length(ulpdu_length_at(buf, offset, stream_pos))
    except TruncatedError:
        return None
    if stream_pos is None:
        return n
    return n + MARKER_SIZE * len(marker_offsets(stream_pos, n))


# ============================================================================ FPDU framing


def frame_fpdu(ulpdu: bytes, *, crc: bool = True, markers: int | None = None) -> bytes:
    """Wrap a ULPDU in an FPDU: length, ULPDU, pad, CRC32c (LSB first), markers if asked.

    ``markers`` is the FPDU's stream position (see the module docstring) or ``None`` for no
    markers.  With ``crc=False`` the CRC field is sent as zeros (RFC 5044, CRC not negotiated).
    """
    if len(ulpdu) > MAX_ULPDU:
        raise EncodeError("MPA", "ulpdu_length", len(ulpdu), f"at most {MAX_ULPDU} octets")
    body = len(ulpdu).to_bytes(2, "big") + bytes(ulpdu) + b"\0" * pad_length(len(ulpdu))
    if markers is None:
        value = _crc.crc32c(body) if crc else 0
        return body + value.to_bytes(4, "little")
    wire = insert_markers(body, markers)
    # A marker due exactly where the CRC starts precedes the CRC and is covered by it.
    if (markers + len(wire)) % MARKER_INTERVAL == 0:
        wire += MPAMarker(0, len(wire) & 0xFFFF).encode()
    value = _crc.crc32c(wire) if crc else 0
    crc_bytes = value.to_bytes(4, "little")
    # Markers cannot fall inside the CRC when FPDUs keep 4-byte alignment; handle it anyway.
    out = bytearray(wire)
    for b in crc_bytes:
        if (markers + len(out)) % MARKER_INTERVAL == 0:
            out += MPAMarker(0, len(out) & 0xFFFF).encode()
        out.append(b)
    return bytes(out)
