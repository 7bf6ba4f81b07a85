"""Reading pcap and pcapng files as a stream of decoded packets, and writing pcap.

The file formats are dpkt's (``dpkt.pcap`` / ``dpkt.pcapng`` header and block classes); the
loops over records are ours because dpkt's readers drop what we need: the original (wire)
length, the interface of a pcapng packet (each interface has its own link type), and the
difference between a file that ends cleanly and one cut off in the middle of a record (dpkt's
pcap reader silently returns the short record).

Memory does not grow with the file: one record is read, decoded and handed out at a time.  A
damaged file yields every packet before the damage, then raises :class:`CaptureError`, whose
message names the file and says what was wrong and where.
"""

from __future__ import annotations

import gzip
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any, Literal

from rdmalab.capture.linktypes import LINKTYPE_ETHERNET, decode_frame
from rdmalab.wire.errors import DecodeError, RdmalabError
from rdmalab.wire.packet import Packet

_PCAPNG_MAGIC = 0x0A0D0D0A
_BOM = 0x1A2B3C4D
_MAX_RECORD = 64 * 1024 * 1024  # a record larger than this means a corrupt length field


class CaptureError(RdmalabError):
    """A capture file that cannot be read (missing, not a capture, damaged).

    ``path`` is the file, ``offset`` the byte offset of the damage when known, and
    ``frames_read`` how many packets were read before it.
    """

    def __init__(self, path: str | os.PathLike[str], message: str, *, offset: int | None = None,
                 frames_read: int = 0) -> None:
        self.path = os.fspath(path)
        self.offset = offset
        self.frames_read = frames_read
        self.reason = message
        super().__init__(f"{self.path}: {message}")


@dataclass(slots=True)
class RawRecord:
    """One record of a capture file, before decoding."""

    frame_number: int
    timestamp: float
    linktype: int
    data: bytes
    wire_length: int
    interface: int = 0


@dataclass(slots=True)
class CapturedPacket:
    """A decoded record: the frame, and the RDMA PDUs that complete in it.

    ``packet`` is the whole frame.  For RoCE and native IB it *is* the RDMA packet.  For iWARP
    the frame is a TCP segment and ``pdus`` holds the MPA Request/Reply frames and FPDUs that
    the TCP stream completes in this segment (zero, one or several).
    """

    frame_number: int
    timestamp: float
    linktype: int
    packet: Packet
    pdus: list[Packet] = field(default_factory=list)
    wire_length: int = 0
    interface: int = 0

    @property
    def rdma(self) -> list[Packet]:
        """The RDMA packets of this frame: the frame itself for IB/RoCE, else the PDUs."""
        if self.packet.encap in ("rocev2", "rocev1", "ib"):
            return [self.packet]
        return list(self.pdus)

    @property
    def ok(self) -> bool:
        return self.packet.ok and all(p.ok for p in self.pdus)


# ============================================================================ raw records


def _open(path: str | os.PathLike[str]) -> IO[bytes]:
    p = os.fspath(path)
    try:
        f = open(p, "rb")  # noqa: SIM115 - closed by the generator
        if f.read(2) == b"\x1f\x8b":  # gzip-compressed capture: read it as tshark does, directly
            f.close()
            return gzip.open(p, "rb")  # type: ignore[return-value]
        f.seek(0)
        return f
    except FileNotFoundError:
        raise CaptureError(p, "no such file") from None
    except IsADirectoryError:
        raise CaptureError(p, "is a directory, not a capture file") from None
    except PermissionError:
        raise CaptureError(p, "permission denied") from None
    except OSError as err:
        raise CaptureError(p, f"cannot be opened ({err.strerror or err})") from None


def records(path: str | os.PathLike[str]) -> Iterator[RawRecord]:
    """The records of a pcap or pcapng file, one at a time, undecoded."""
    from dpkt import pcap as _pcap  # lazy: the columnar decoder reads files without dpkt (start-up, memory)

    f = _open(path)
    with f:
        head = f.read(4)
        if not head:
            raise CaptureError(path, "is empty, not a pcap or pcapng file")
        if len(head) < 4:
            raise CaptureError(path, f"is only {len(head)} bytes long, too short for a pcap or pcapng file")
        magic_be = int.from_bytes(head, "big")
        if magic_be == _PCAPNG_MAGIC:
            yield from _pcapng_records(path, f, head)
        elif magic_be in _pcap.MAGIC_TO_PKT_HDR:
            yield from _pcap_records(path, f, head)
        else:
            raise CaptureError(
                path,
                f"is not a pcap or pcapng file (it starts with bytes {head.hex(' ')}; a pcap file starts "
                "with a1 b2 c3 d4 or d4 c3 b2 a1, a pcapng file with 0a 0d 0d 0a)",
            )


def _pcap_records(path: str | os.PathLike[str], f: IO[bytes], head: bytes) -> Iterator[RawRecord]:
    from dpkt import pcap as _pcap  # lazy: the columnar decoder reads files without dpkt (start-up, memory)

    rest = f.read(_pcap.FileHdr.__hdr_len__ - 4)
    buf = head + rest
    if len(buf) < _pcap.FileHdr.__hdr_len__:
        raise CaptureError(path, f"ends inside the 24-byte pcap file header (after {len(buf)} bytes)", offset=0)
    magic = int.from_bytes(head, "big")
    le = magic in (_pcap.PMUDPCT_MAGIC, _pcap.PMUDPCT_MAGIC_NANO, _pcap.PACPDOM_MAGIC)
    fh: Any = _pcap.LEFileHdr(buf) if le else _pcap.FileHdr(buf)
    # dpkt keys the record-header class by the magic read big-endian (as dpkt's own reader does)
    phdr_cls = _pcap.MAGIC_TO_PKT_HDR[magic]
    nano = magic in (_pcap.TCPDUMP_MAGIC_NANO, _pcap.PMUDPCT_MAGIC_NANO)
    divisor = 1e9 if nano else 1e6
    linktype = fh.linktype & 0x0FFFFFFF  # the top bits may hold FCS information (LINKTYPE_ values fit 16 bits)
    hlen = phdr_cls.__hdr_len__
    pos = len(buf)
    n = 0
    read = f.read
    while True:
        hb = read(hlen)
        if not hb:
            return
        if len(hb) < hlen:
            raise CaptureError(path, f"is truncated: it ends inside the header of record {n + 1} "
                                     f"(byte {pos}, {len(hb)} of {hlen} bytes present)", offset=pos, frames_read=n)
        ph = phdr_cls(hb)
        caplen = ph.caplen
        if caplen > _MAX_RECORD:
            raise CaptureError(path, f"is damaged: record {n + 1} at byte {pos} claims {caplen} bytes",
                               offset=pos, frames_read=n)
        data = read(caplen)
        if len(data) < caplen:
            raise CaptureError(path, f"is truncated mid-record: record {n + 1} at byte {pos} announces {caplen} "
                                     f"bytes but the file ends after {len(data)}", offset=pos, frames_read=n)
        n += 1
        pos += hlen + caplen
        yield RawRecord(n, ph.tv_sec + ph.tv_usec / divisor, linktype, data, ph.len)


@dataclass(slots=True)
class _Iface:
    linktype: int
    divisor: float = 1e6
    tsoffset: int = 0


def _pcapng_records(path: str | os.PathLike[str], f: IO[bytes], head: bytes) -> Iterator[RawRecord]:
    import dpkt  # lazy: the columnar decoder reads files without dpkt (start-up, memory)
    from dpkt import pcapng as _pcapng

    pos = 0
    n = 0
    le = True
    ifaces: list[_Iface] = []
    pending = head
    while True:
        hb = pending + f.read(8 - len(pending))
        pending = b""
        if not hb:
            return
        if len(hb) < 8:
            raise CaptureError(path, f"is truncated: it ends inside a pcapng block header at byte {pos}",
                               offset=pos, frames_read=n)
        btype_be = int.from_bytes(hb[:4], "big")
        if btype_be == _PCAPNG_MAGIC:  # Section Header Block: sets the byte order
            bom = f.read(4)
            if len(bom) < 4:
                raise CaptureError(path, f"is truncated: it ends inside the section header at byte {pos}",
                                   offset=pos, frames_read=n)
            if int.from_bytes(bom, "little") == _BOM:
                le = True
            elif int.from_bytes(bom, "big") == _BOM:
                le = False
            else:
                raise CaptureError(path, f"has a pcapng section header at byte {pos} with an unknown byte-order "
                                         f"magic {bom.hex(' ')}", offset=pos, frames_read=n)
            blen = int.from_bytes(hb[4:8], "little" if le else "big")
            body = bom + f.read(max(0, blen - 12))
            if blen < 28 or blen % 4 or len(body) < blen - 8:
                raise _block_error(path, pos, blen, len(body) + 8, n, "section header")
            ifaces = []
            pos += blen
            continue
        order: Literal["little", "big"] = "little" if le else "big"
        btype = int.from_bytes(hb[:4], order)
        blen = int.from_bytes(hb[4:8], order)
        if blen < 12 or blen % 4 or blen > _MAX_RECORD:
            raise CaptureError(path, f"is damaged: the pcapng block at byte {pos} has length {blen} "
                                     "(a block is at least 12 bytes and a multiple of 4)", offset=pos, frames_read=n)
        body = f.read(blen - 8)
        if len(body) < blen - 8:
            raise _block_error(path, pos, blen, len(body) + 8, n, _BLOCK_NAMES.get(btype, f"type {btype}"))
        buf = hb + body
        try:
            if btype == _pcapng.PCAPNG_BT_IDB:
                idb: Any = (_pcapng.InterfaceDescriptionBlockLE if le else _pcapng.InterfaceDescriptionBlock)(buf)
                iface = _Iface(idb.linktype)
                for opt in idb.opts:
                    if opt.code == _pcapng.PCAPNG_OPT_IF_TSRESOL and opt.data:
                        v = opt.data[0]
                        iface.divisor = float((2 if v & 0x80 else 10) ** (v & 0x7F))
                    elif opt.code == _pcapng.PCAPNG_OPT_IF_TSOFFSET and len(opt.data) >= 8:
                        iface.tsoffset = int.from_bytes(opt.data[:8], order, signed=True)
                ifaces.append(iface)
            elif btype == _pcapng.PCAPNG_BT_EPB:
                epb: Any = (_pcapng.EnhancedPacketBlockLE if le else _pcapng.EnhancedPacketBlock)(buf)
                iface = _iface(path, ifaces, epb.iface_id, pos, n)
                n += 1
                ts = iface.tsoffset + ((epb.ts_high << 32) | epb.ts_low) / iface.divisor
                yield RawRecord(n, ts, iface.linktype, bytes(epb.pkt_data), epb.pkt_len, epb.iface_id)
            elif btype == _pcapng.PCAPNG_BT_PB:
                pb: Any = (_pcapng.PacketBlockLE if le else _pcapng.PacketBlock)(buf)
                iface = _iface(path, ifaces, pb.iface_id, pos, n)
                n += 1
                ts = iface.tsoffset + ((pb.ts_high << 32) | pb.ts_low) / iface.divisor
                yield RawRecord(n, ts, iface.linktype, bytes(pb.pkt_data), pb.pkt_len, pb.iface_id)
            elif btype == _pcapng.PCAPNG_BT_SPB:
                iface = _iface(path, ifaces, 0, pos, n)
                orig = int.from_bytes(body[:4], order)
                n += 1
                yield RawRecord(n, 0.0, iface.linktype, bytes(body[4 : 4 + min(orig, blen - 16)]), orig, 0)
        except (dpkt.UnpackError, dpkt.NeedData, IndexError, ValueError) as err:
            raise CaptureError(path, f"is damaged: the pcapng {_BLOCK_NAMES.get(btype, f'type {btype}')} block at "
                                     f"byte {pos} cannot be parsed ({err or type(err).__name__})",
                               offset=pos, frames_read=n) from None
        pos += blen


_BLOCK_NAMES = {1: "interface description", 2: "packet", 3: "simple packet", 6: "enhanced packet"}


def _block_error(path: str | os.PathLike[str], pos: int, blen: int, got: int, n: int, what: str) -> CaptureError:
    return CaptureError(path, f"is truncated mid-record: the pcapng {what} block at byte {pos} announces "
                              f"{blen} bytes but the file ends after {got}", offset=pos, frames_read=n)


def _iface(path: str | os.PathLike[str], ifaces: list[_Iface], idx: int, pos: int, n: int) -> _Iface:
    if idx >= len(ifaces):
        raise CaptureError(path, f"is damaged: the packet block at byte {pos} refers to interface {idx}, "
                                 f"but only {len(ifaces)} interface(s) were described before it",
                           offset=pos, frames_read=n)
    return ifaces[idx]


# ============================================================================ decoded packets


def _load_iwarp_tracker() -> Any:
    # lazy: the iWARP decoders load only when asked for; keeps `import rdmalab.capture` and `rdmalab --help` fast
    from rdmalab.capture.iwarp import IwarpTracker

    return IwarpTracker


def decode_record(rec: RawRecord, *, lenient: bool = True, tracker: Any = None) -> CapturedPacket:
    """Decode one raw record (and feed TCP segments to an iWARP tracker, if given)."""
    try:
        pkt = decode_frame(rec.linktype, rec.data, lenient=lenient)
    except DecodeError as err:
        err.frame_number = rec.frame_number  # type: ignore[attr-defined]
        raise
    except Exception as err:  # a decoder bug must not stop a capture: report it on the frame
        if not lenient:
            raise
        pkt = Packet(rec.data, encap="other")
        pkt.payload_offset, pkt.payload_length = 0, len(rec.data)
        pkt.internal_error = f"{type(err).__name__}: {err}"
        pkt.info = f"[rdmalab could not decode this frame: {type(err).__name__}: {err}]"
    pdus: list[Packet] = []
    if tracker is not None and pkt.encap == "tcp":
        try:
            pdus = list(tracker.process(rec.frame_number, pkt))
        except DecodeError as err:
            if not lenient:
                err.frame_number = rec.frame_number  # type: ignore[attr-defined]
                raise
        except Exception as err:
            if not lenient:
                raise
            pkt.internal_error = f"iWARP tracker: {type(err).__name__}: {err}"
    return CapturedPacket(rec.frame_number, rec.timestamp, rec.linktype, pkt, pdus, rec.wire_length, rec.interface)


def read(path: str | os.PathLike[str], *, lenient: bool = True, iwarp: bool = True,
         count: int | None = None) -> Iterator[CapturedPacket]:
    """Decode a pcap or pcapng file, one :class:`CapturedPacket` at a time (streaming).

    ``lenient`` (the default) records bad frames in ``Packet.problems`` and keeps going;
    ``lenient=False`` raises the first :class:`~rdmalab.wire.errors.DecodeError`.  ``iwarp``
    reassembles TCP streams into MPA/DDP/RDMAP PDUs (``CapturedPacket.pdus``).  A damaged file
    raises :class:`CaptureError` after the packets before the damage.
    """
    tracker_cls = _load_iwarp_tracker() if iwarp else None
    tracker = tracker_cls() if tracker_cls is not None else None
    for rec in records(path):
        if count is not None and rec.frame_number > count:
            return
        yield decode_record(rec, lenient=lenient, tracker=tracker)


# ============================================================================ writing


def write_pcap(path: str | os.PathLike[str], frames: Iterable[Any], *, linktype: int = LINKTYPE_ETHERNET,
               snaplen: int = 262144, nano: bool = False) -> int:
    """Write frames to a pcap file and return how many were written.

    Each frame may be ``bytes``, a ``(timestamp, bytes)`` pair, a
    :class:`~rdmalab.wire.packet.Packet` or a :class:`CapturedPacket`.  Frames without a
    timestamp get 0.000001 s apart from 0, so the file is deterministic.
    """
    from dpkt import pcap as _pcap  # lazy: the columnar decoder reads files without dpkt (start-up, memory)

    n = 0
    with open(os.fspath(path), "wb") as f:
        w = _pcap.Writer(f, snaplen=snaplen, linktype=linktype, nano=nano)
        for item in frames:
            ts: float | None = None
            if isinstance(item, CapturedPacket):
                ts, data = item.timestamp, item.packet.data
            elif isinstance(item, Packet):
                data = item.data
            elif isinstance(item, tuple):
                ts, data = float(item[0]), bytes(item[1])
            else:
                data = bytes(item)
            w.writepkt(data, ts=n * 1e-6 if ts is None else ts)
            n += 1
    return n
