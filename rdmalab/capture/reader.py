"""Reading pcap and pcapng files as a stream of decoded packets, and writing decoded packets back
(through :mod:`rdmalab.capture.pcapwriter`, the one writer).

The records come from :mod:`rdmalab.capture.pcapio`, the one walker over pcap and pcapng
records (the columnar decoder reads through it too).  It is ours, not dpkt's, because dpkt's
readers drop what we need: the original (wire) length, the interface of a pcapng packet (each
interface has its own link type), and the difference between a file that ends cleanly and one
cut off in the middle of a record (dpkt's pcap reader silently returns the short record).

Memory does not grow with the file: records are read a block at a time and decoded and handed
out one at a time.  A damaged file yields every packet before the damage, then raises
:class:`CaptureError`, whose message names the file, the frame and the byte offset, and says
what was wrong.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from rdmalab.capture.linktypes import LINKTYPE_ERF, LINKTYPE_ETHERNET, decode_frame, erf_frame
from rdmalab.capture.pcapio import CaptureError, epoch_ns, record_blocks, record_ns
from rdmalab.capture.pcapwriter import DEFAULT_SNAPLEN, CaptureWriter, Format, seconds_to_ns
from rdmalab.wire.errors import DecodeError
from rdmalab.wire.packet import Packet

__all__ = ["CaptureError", "CapturedPacket", "RawRecord", "decode_record", "epoch_ns", "read", "read_selected", "records",
           "write_pcap"]

@dataclass(slots=True)
class RawRecord:
    """One record of a capture file, before decoding."""

    frame_number: int
    timestamp: float
    linktype: int
    data: bytes
    wire_length: int
    interface: int = 0
    #: the record's time in nanoseconds since the epoch, exact, where the reader has it (its
    #: header's seconds and units: a nanosecond capture's are finer than ``timestamp``'s float)
    ns: int | None = None
    #: the decimal places of its time as tshark shows them (:func:`~rdmalab.capture.pcapio.time_digits`)
    digits: int = 6
    #: the FCS length the capture says its frames keep (-1: it does not say): ``RecordBlock.fcs_len``
    fcs_len: int = -1


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
    #: the frame's time in nanoseconds since the epoch where its record carries a time of its own
    #: (an ERF record: :func:`~rdmalab.capture.linktypes.erf_frame`), which ``timestamp`` then is
    #: too, in seconds; else None
    time_ns: int | None = None
    #: the octets Wireshark counts as captured (``frame.cap_len``) where that is not the whole
    #: record (an ERF record's header is not frame data); else None: ``len(packet.data)``
    cap_length: int | None = None
    #: where the frame's octets start in the record: after an ERF record's headers (its pseudo-header:
    #: :func:`~rdmalab.capture.linktypes.erf_frame`), else 0
    frame_start: int = 0
    #: the record header's time in nanoseconds, exact (:attr:`RawRecord.ns`), or None
    record_ns: int | None = None
    #: the decimal places of its time as tshark shows them: its record's (:attr:`RawRecord.digits`), an
    #: ERF record's 9 (its own time, 32.32 fixed point)
    digits: int = 6
    #: a TCP segment whose payload no protocol above TCP claims: no PDU completes in it and the
    #: iWARP tracker does not read its stream as MPA (or was not asked: ``iwarp=False``), what
    #: tshark shows as ``data``
    tcp_data: bool = False

    @property
    def epoch_ns(self) -> int:
        """``frame.time_epoch`` in nanoseconds, exact: the ERF record's own time, else the record
        header's, else (none, or past what an int64 holds: years 1677 to 2262) from ``timestamp``
        (:func:`epoch_ns`)."""
        if self.time_ns is not None:
            return self.time_ns
        return epoch_ns(self.timestamp) if self.record_ns is None else record_ns(self.timestamp, self.record_ns)

    @property
    def captured(self) -> int:
        """``frame.cap_len``: the octets of the frame that were captured."""
        return len(self.packet.data) if self.cap_length is None else self.cap_length

    @property
    def frame_bytes(self) -> bytes | memoryview:
        """The frame's bytes as Wireshark's frame holds them: an ERF record's after its headers (a
        pseudo-header, not frame data: ``frame.cap_len`` of them from :attr:`frame_start`), any other
        record's whole."""
        data = self.packet.data
        if self.linktype == LINKTYPE_ERF and self.cap_length is not None:
            return data[self.frame_start:self.frame_start + self.cap_length]
        return data

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


def records(path: str | os.PathLike[str], *, block_bytes: int = 1 << 20) -> Iterator[RawRecord]:
    """The records of a pcap or pcapng file (or stream: ``-``, a FIFO), one at a time, undecoded.

    The file is walked by :func:`rdmalab.capture.pcapio.record_blocks` (the one record walker,
    shared with the columnar decoder) in blocks of about ``block_bytes``."""
    for blk in record_blocks(path, block_bytes):
        buf = blk.buf
        rows = zip(blk.offset.tolist(), blk.caplen.tolist(), blk.wirelen.tolist(), blk.seconds().tolist(),
                   blk.linktype.tolist(), blk.interfaces().tolist(), blk.ts_ns.tolist(), blk.time_digits().tolist(),
                   blk.fcs_lens().tolist(), strict=True)
        for n, (off, cap, wire, ts, lt, iface, ns, digits, fcs) in enumerate(rows, blk.first):
            yield RawRecord(n, ts, lt, bytes(buf[off:off + cap]), wire, iface, ns, digits, fcs)


# ============================================================================ decoded packets


def _load_iwarp_tracker() -> Any:
    # lazy: the iWARP decoders load only when asked for; keeps `import rdmalab.capture` and `rdmalab --help` fast
    from rdmalab.capture.iwarp import IwarpTracker

    return IwarpTracker


def decode_record(rec: RawRecord, *, lenient: bool = True, tracker: Any = None) -> CapturedPacket:
    """Decode one raw record (and feed TCP segments to an iWARP tracker, if given)."""
    try:
        pkt = decode_frame(rec.linktype, rec.data, lenient=lenient, wire_length=rec.wire_length, fcs_len=rec.fcs_len)
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
    cp = CapturedPacket(rec.frame_number, rec.timestamp, rec.linktype, pkt, pdus, rec.wire_length, rec.interface,
                        record_ns=rec.ns, digits=rec.digits)
    if pkt.encap == "tcp" and pkt.payload_length and not pdus:
        cp.tcp_data = tracker is None or not tracker.follows(pkt)
    if rec.linktype == LINKTYPE_ERF:  # Wireshark's frame time and lengths for ERF are the ERF record's own
        own = erf_frame(rec.data)
        if own is not None:
            cp.time_ns, cp.wire_length, cp.cap_length, cp.frame_start = own
            cp.timestamp = own[0] / 1e9
            cp.digits = 9
    return cp


def read(path: str | os.PathLike[str], *, lenient: bool = True, iwarp: bool = True,
         count: int | None = None) -> Iterator[CapturedPacket]:
    """Decode a pcap or pcapng file, one :class:`CapturedPacket` at a time (streaming).

    ``lenient`` (the default) records bad frames in ``Packet.problems`` and keeps going;
    ``lenient=False`` raises the first :class:`~rdmalab.wire.errors.DecodeError`.  ``iwarp``
    reassembles TCP streams into MPA/DDP/RDMAP PDUs (``CapturedPacket.pdus``).  A damaged file
    raises :class:`CaptureError` after the packets before the damage.  ``path`` may be ``-``
    (standard input) or a FIFO: each packet is handed out as soon as its record has arrived, and
    after the ``count``-th nothing more is read.
    """
    if count is not None and count <= 0:
        return
    tracker_cls = _load_iwarp_tracker() if iwarp else None
    tracker = tracker_cls() if tracker_cls is not None else None
    for rec in records(path):
        yield decode_record(rec, lenient=lenient, tracker=tracker)
        if count is not None and rec.frame_number >= count:
            return  # at once: a stream (a pipe, a live capture) is not read further


def read_selected(path: str | os.PathLike[str], wanted: Any, *, lenient: bool = True, iwarp: bool = True,
                  count: int | None = None) -> Iterator[CapturedPacket]:
    """:func:`read` of a file, but for the frames no one reads whole: each frame ``wanted`` holds (``frame
    number in wanted``, asked in frame order) is decoded; so is each other that may be a TCP segment (the iWARP
    streams follow every one), but for a plain one (an untagged Ethernet frame of a whole TCP segment over IPv4
    without options, lenient) whose addresses, ports, sequence number, flags and payload alone are fed to the
    streams (:meth:`~rdmalab.capture.iwarp.IwarpTracker.process_frame`); any other Ethernet frame not wanted
    (UDP over IPv4 or IPv6, ARP: :func:`_no_tcp`; lenient with ``iwarp=False``, every one) is a
    :class:`CapturedPacket` of its record's number, time and lengths with an empty packet, not decoded.  For a
    display filter whose frames are known beforehand (``decode -T json -Y``, ``-V -Y``)."""
    tracker_cls = _load_iwarp_tracker() if iwarp else None
    tracker = tracker_cls() if tracker_cls is not None else None
    unused = Packet(b"", encap="other")
    for rec in records(path):
        if rec.frame_number in wanted or not (_no_tcp(rec.linktype, rec.data)
                                              or (lenient and _fed(tracker, rec))):
            yield decode_record(rec, lenient=lenient, tracker=tracker)
        else:
            yield CapturedPacket(rec.frame_number, rec.timestamp, rec.linktype, unused, [], rec.wire_length,
                                 rec.interface, record_ns=rec.ns, digits=rec.digits)
        if count is not None and rec.frame_number >= count:
            return


def _fed(tracker: Any, rec: RawRecord) -> bool:
    """Whether the Ethernet record ``rec``, not shown, needs no decoding: no tracker follows the streams (its
    packet is then no one's), or it is a plain TCP segment now fed to ``tracker`` as decoding it would
    (:meth:`~rdmalab.capture.iwarp.IwarpTracker.process_frame`; lenient: the tracker's failure, which a
    decoded frame would show, is not shown)."""
    if rec.linktype != LINKTYPE_ETHERNET:
        return False
    if tracker is None:
        return True
    try:
        return tracker.process_frame(rec.frame_number, rec.data) is not None
    except Exception:  # noqa: BLE001 - (lenient: as decode_record, on a frame no one shows)
        return True


def _no_tcp(linktype: int, data: bytes) -> bool:
    """Whether a record is an Ethernet frame (untagged) that holds UDP over IPv4 or IPv6 (no extension
    header) or ARP: what the iWARP reassembly never reads."""
    if linktype != LINKTYPE_ETHERNET or len(data) < 34:
        return False
    kind = data[12:14]
    return (kind == b"\x08\x00" and data[23] == 17) or (kind == b"\x86\xdd" and len(data) >= 54 and data[20] == 17) \
        or kind == b"\x08\x06"


# ============================================================================ writing


def write_shown(path: str | os.PathLike[str], dest: str | os.PathLike[str] | IO[bytes], *,
                keep: Callable[[CapturedPacket], bool] | None = None, format: Format = "pcapng",
                count: int | None = None, lenient: bool = True, iwarp: bool = True) -> int:
    """``tshark -r FILE -Y FILTER -w OUT``: copy the records of a capture that ``keep`` keeps (every
    record without it) into a new pcapng (or pcap) file, each as it was read: its bytes, its time to the
    nanosecond, its length on the wire, its link type (each interface of the input is an interface of
    the output, in pcapng).  ``keep`` is given every frame in order, decoded (with the iWARP streams
    followed when ``iwarp``).  ``path`` may be a stream (``-``, a FIFO): it is read once.  Returns how
    many were written.  A pcap output holds one link type, the first frame's: a frame of another is a
    :class:`CaptureError` that says to write pcapng."""
    tracker_cls = _load_iwarp_tracker() if iwarp and keep is not None else None
    tracker = tracker_cls() if tracker_cls is not None else None
    ifaces: dict[tuple[int, int], int] = {}  # (the input's interface, its link type) -> the output's
    w: CaptureWriter | None = None
    try:
        for rec in records(path):
            if count is not None and rec.frame_number > count:
                break
            if w is None:  # (a pcap file's one link type is the first frame's)
                w = CaptureWriter(dest, format=format, linktype=None if format == "pcapng" else rec.linktype)
            if keep is not None and not keep(decode_record(rec, lenient=lenient, tracker=tracker)):
                continue
            out = ifaces.get((rec.interface, rec.linktype))
            if out is None:
                if format == "pcap":
                    if rec.linktype != w.interfaces[0]:
                        raise CaptureError(path, f"frame {rec.frame_number} is of link type {rec.linktype}, the pcap "
                                                 f"file written of link type {w.interfaces[0]}: a pcap file holds one "
                                                 "(write pcapng)", frames_read=rec.frame_number - 1)
                    out = 0
                else:
                    out = w.add_interface(rec.linktype, snaplen=0)
                ifaces[(rec.interface, rec.linktype)] = out
            w.write(rec.data, rec.ns if rec.ns is not None else epoch_ns(rec.timestamp), wire_len=rec.wire_length,
                    interface=out, as_read=True)
        if w is None:  # an empty capture: an empty file of its format
            w = CaptureWriter(dest, format=format, linktype=None if format == "pcapng" else LINKTYPE_ETHERNET)
        return w.count
    finally:
        if w is not None:
            w.close()


def write_pcap(path: str | os.PathLike[str] | IO[bytes], frames: Iterable[Any], *, linktype: int = LINKTYPE_ETHERNET,
               snaplen: int = DEFAULT_SNAPLEN, nano: bool = False) -> int:
    """Write frames to a pcap file (or binary file object) and return how many were written.

    Each frame may be ``bytes``, a ``(timestamp in float seconds, bytes)`` pair, a
    :class:`~rdmalab.wire.packet.Packet` or a :class:`CapturedPacket` (its wire length is kept, and
    its time to the nanosecond: :attr:`CapturedPacket.epoch_ns`).
    Frames without a timestamp get 0.000001 s apart from 0, so the file is deterministic.  The
    writing is :class:`rdmalab.capture.pcapwriter.CaptureWriter`'s (``nano`` picks nanosecond
    timestamps); float seconds become nanoseconds by :func:`~rdmalab.capture.pcapwriter.seconds_to_ns`.
    """
    with CaptureWriter(path, linktype=linktype, snaplen=snaplen, nano=nano) as w:
        for n, item in enumerate(frames):
            ts: float | None = None
            ns: int | None = None
            wire: int | None = None
            if isinstance(item, CapturedPacket):
                ns, data = item.epoch_ns, item.packet.data  # (a nanosecond capture's times: exact)
                wire = max(item.wire_length, len(data)) if item.wire_length else None
            elif isinstance(item, Packet):
                data = item.data
            elif isinstance(item, tuple):
                ts, data = float(item[0]), bytes(item[1])
            else:
                data = bytes(item)
            if ns is None:
                ns = n * 1000 if ts is None else seconds_to_ns(ts)
            w.write(data, ns, wire_len=wire)
        return w.count
