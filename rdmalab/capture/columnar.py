"""Columnar decoding: a capture file into numpy columns with Wireshark's field names.

Per-packet objects (:func:`rdmalab.capture.read`) are for reading one packet; this module is for
a million.  It reads the file in blocks of records, copies the first :data:`WINDOW` bytes of
every packet into one ``(n, WINDOW)`` byte matrix, and takes every field with numpy over that
matrix: each row carries its own offsets (VLAN tag or not, IPv4 header length, IPv4/IPv6, the
extended headers the BTH opcode implies, looked up in the opcode table of
:mod:`rdmalab.wire.opcodes`), so no Python code runs per packet except the walk over record
headers and the ICRC (``zlib.crc32`` over the masked header row and the payload bytes).

Memory is bounded by the block size (:func:`iter_columns` yields one :class:`Columns` per block);
:func:`read_columns` concatenates them.  Files may be pcap or pcapng, plain or gzip-compressed.
Frames of link types other than Ethernet are decoded by the per-packet decoder instead
(:func:`columns_from_packets`), with the same column names.  iWARP columns come from the TCP
stream reassembly of :mod:`rdmalab.capture.iwarp`, fed the block's TCP segments in order
(:func:`fill_iwarp`).

Columns (see :data:`COLUMNS`): integers as unsigned numpy arrays, addresses as integers
(``ip.src`` uint32, ``eth.src`` uint64, ``ipv6.src`` 16-byte strings), ``frame.time_epoch``
as float64 seconds (and ``frame.time_ns`` exact).  Which rows a column applies to is its
layer's mask (:meth:`Columns.present`): e.g. ``infiniband.reth.va`` only where a RETH exists.
"""

from __future__ import annotations

import gzip
import ipaddress
import os
import struct
import sys
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import IO, Any

import numpy as np

from rdmalab.capture.fields import (
    frame_fields,
    packet_fields,  # the per-packet field names, one source of truth
)
from rdmalab.capture.reader import CaptureError, read
from rdmalab.wire.errors import DecodeError
from rdmalab.wire.opcodes import CNP_OPCODE, OPCODES, opcode_name

#: Bytes of each packet copied into the field matrix: Ethernet + VLAN + IPv6 + UDP + BTH +
#: the longest run of extended headers (RDETH+DETH+AtomicETH) fits with room to spare.
WINDOW = 160
LINKTYPE_ETHERNET = 1
ROCEV2_PORT = 4791


@dataclass(frozen=True, slots=True)
class Col:
    """One column: Wireshark name, numpy dtype, the layer whose rows it applies to, and how
    tshark prints it (``dec``, ``hexN`` with N digits, ``bool``, ``ipv4``, ``ipv6``, ``mac``,
    ``epoch``, ``str``)."""

    name: str
    dtype: str
    layer: str
    fmt: str = "dec"


COLUMNS: tuple[Col, ...] = (
    Col("frame.number", "u8", "frame"),
    Col("frame.time_epoch", "f8", "frame", "epoch"),
    Col("frame.time_ns", "i8", "frame"),
    Col("frame.len", "u4", "frame"),
    Col("frame.cap_len", "u4", "frame"),
    Col("eth.dst", "u8", "eth", "mac"),
    Col("eth.src", "u8", "eth", "mac"),
    Col("eth.type", "u2", "eth", "hex4"),
    Col("vlan.id", "u2", "vlan"),
    Col("vlan.priority", "u1", "vlan"),
    Col("ip.version", "u1", "ipver"),
    Col("ip.hdr_len", "u1", "ip"),
    Col("ip.dsfield.dscp", "u1", "ip"),
    Col("ip.dsfield.ecn", "u1", "ip"),
    Col("ip.len", "u2", "ip"),
    Col("ip.id", "u2", "ip", "hex4"),
    Col("ip.flags", "u1", "ip", "hex2"),
    Col("ip.frag_offset", "u2", "ip"),
    Col("ip.ttl", "u1", "ip"),
    Col("ip.proto", "u1", "ip"),
    Col("ip.checksum", "u2", "ip", "hex4"),
    Col("ip.src", "u4", "ip", "ipv4"),
    Col("ip.dst", "u4", "ip", "ipv4"),
    Col("ipv6.tclass", "u1", "ipv6", "hex8"),
    Col("ipv6.flow", "u4", "ipv6", "hex6"),
    Col("ipv6.plen", "u2", "ipv6"),
    Col("ipv6.nxt", "u1", "ipv6"),
    Col("ipv6.hlim", "u1", "ipv6"),
    Col("ipv6.src", "S16", "ipv6", "ipv6"),
    Col("ipv6.dst", "S16", "ipv6", "ipv6"),
    Col("udp.srcport", "u2", "udp"),
    Col("udp.dstport", "u2", "udp"),
    Col("udp.length", "u2", "udp"),
    Col("udp.checksum", "u2", "udp", "hex4"),
    Col("tcp.srcport", "u2", "tcp"),
    Col("tcp.dstport", "u2", "tcp"),
    Col("tcp.seq_raw", "u4", "tcp"),
    Col("tcp.ack_raw", "u4", "tcp"),
    Col("tcp.hdr_len", "u1", "tcp"),
    Col("tcp.flags", "u2", "tcp", "hex4"),
    Col("tcp.window_size_value", "u2", "tcp"),
    Col("tcp.len", "u4", "tcp"),
    Col("infiniband.grh.tclass", "u1", "infiniband.grh"),
    Col("infiniband.grh.flowlabel", "u4", "infiniband.grh"),
    Col("infiniband.grh.paylen", "u2", "infiniband.grh"),
    Col("infiniband.grh.nxthdr", "u1", "infiniband.grh"),
    Col("infiniband.grh.hoplmt", "u1", "infiniband.grh"),
    Col("infiniband.grh.sgid", "S16", "infiniband.grh", "ipv6"),
    Col("infiniband.grh.dgid", "S16", "infiniband.grh", "ipv6"),
    Col("infiniband.bth.opcode", "u1", "infiniband.bth"),
    Col("infiniband.bth.se", "u1", "infiniband.bth", "bool"),
    Col("infiniband.bth.m", "u1", "infiniband.bth", "bool"),
    Col("infiniband.bth.padcnt", "u1", "infiniband.bth"),
    Col("infiniband.bth.tver", "u1", "infiniband.bth"),
    Col("infiniband.bth.p_key", "u2", "infiniband.bth"),
    Col("rdmalab.bth.fecn", "u1", "infiniband.bth"),
    Col("rdmalab.bth.becn", "u1", "infiniband.bth"),
    Col("infiniband.bth.destqp", "u4", "infiniband.bth", "hex6"),
    Col("infiniband.bth.a", "u1", "infiniband.bth", "bool"),
    Col("infiniband.bth.psn", "u4", "infiniband.bth"),
    Col("infiniband.rdeth.eecnxt", "u4", "infiniband.rdeth", "hex6"),
    Col("infiniband.deth.q_key", "u8", "infiniband.deth", "hex16"),
    Col("infiniband.deth.srcqp", "u4", "infiniband.deth", "hex8"),
    Col("infiniband.reth.va", "u8", "infiniband.va", "hex16"),
    Col("infiniband.reth.r_key", "u4", "infiniband.va", "hex8"),
    Col("infiniband.reth.dmalen", "u4", "infiniband.reth"),
    Col("infiniband.atomiceth.swapdt", "u8", "infiniband.atomiceth"),
    Col("infiniband.atomiceth.cmpdt", "u8", "infiniband.atomiceth"),
    Col("infiniband.aeth.syndrome", "u1", "infiniband.aeth"),
    Col("infiniband.aeth.msn", "u4", "infiniband.aeth"),
    Col("infiniband.atomicacketh.origremdt", "u8", "infiniband.atomicacketh"),
    Col("infiniband.immdt", "u4", "infiniband.immdt", "bytes4"),
    Col("infiniband.ieth", "u4", "infiniband.ieth", "bytes4"),
    Col("rdmalab.xrceth.xrcsrq", "u4", "rdmalab.xrceth", "hex6"),
    Col("infiniband.invariant.crc", "u4", "infiniband.crc", "hex8"),
    Col("rdmalab.icrc.ok", "i1", "infiniband.crc"),
    Col("rdmalab.payload.len", "u4", "infiniband.bth"),
    Col("rdmalab.cnp", "u1", "rdmalab.cnp"),
)


def _iw(name: str, dtype: str, fmt: str = "dec") -> Col:
    return Col(name, dtype, name, fmt)


#: iWARP columns (Wireshark's ``iwarp_mpa``/``iwarp_ddp``/``iwarp_rdma`` fields, printed with
#: the bases tshark 4.0 uses).  They come from the MPA frames and FPDUs that the TCP stream
#: reassembly of :mod:`rdmalab.capture.iwarp` completes in each frame; each column applies to the
#: rows where its own field occurs, and holds the field's first occurrence in the frame (a frame
#: may complete several FPDUs: :attr:`Columns.multi` keeps all of their values).
IWARP_COLUMNS: tuple[Col, ...] = (
    _iw("iwarp_mpa.marker_flag", "u1", "bool"),
    _iw("iwarp_mpa.crc_flag", "u1", "bool"),
    _iw("iwarp_mpa.rej_flag", "u1", "bool"),
    _iw("iwarp_mpa.res", "u1", "hex2"),
    _iw("iwarp_mpa.rev", "u1"),
    _iw("iwarp_mpa.pdlength", "u2"),
    _iw("iwarp_mpa.ulpdulength", "u2"),
    _iw("iwarp_mpa.crc", "u4", "hex8"),
    _iw("iwarp_mpa.crc_check", "u4", "hex8"),
    _iw("iwarp_ddp.tagged_flag", "u1", "bool"),
    _iw("iwarp_ddp.last_flag", "u1", "bool"),
    _iw("iwarp_ddp.rsvd", "u1", "hex2"),
    _iw("iwarp_ddp.dv", "u1"),
    _iw("iwarp_ddp.stag", "u4", "hex8"),
    _iw("iwarp_ddp.tagged_offset", "u8", "hex16"),
    _iw("iwarp_ddp.qn", "u4"),
    _iw("iwarp_ddp.msn", "u4"),
    _iw("iwarp_ddp.mo", "u4"),
    _iw("iwarp_rdma.version", "u1"),
    _iw("iwarp_rdma.rsv", "u1", "hex2"),
    _iw("iwarp_rdma.opcode", "u1", "hex2"),
    _iw("iwarp_rdma.inval_stag", "u4"),
    _iw("iwarp_rdma.sinkstag", "u4", "hex8"),
    _iw("iwarp_rdma.sinkto", "u8", "hex16"),
    _iw("iwarp_rdma.rdmardsz", "u4"),
    _iw("iwarp_rdma.srcstag", "u4", "hex8"),
    _iw("iwarp_rdma.srcto", "u8", "hex16"),
    _iw("iwarp_rdma.term_layer", "u1", "hex2"),
    _iw("iwarp_rdma.term_hdrct_m", "u1", "bool"),
    _iw("iwarp_rdma.hdrct_d", "u1", "bool"),
    _iw("iwarp_rdma.hdrct_r", "u1", "bool"),
    # ours: CRC32c status of the frame's first FPDU (1 good, 2 bad, 0 unchecked: no CRC
    # negotiated), and how many iWARP PDUs the frame completes
    Col("rdmalab.crc32c.ok", "i1", "rdmalab.crc32c"),
    Col("rdmalab.pdus", "u2", "iwarp"),
)
IWARP_LAYERS = ("iwarp", "iwarp_mpa", "iwarp_ddp", "iwarp_rdma", "rdmalab.crc32c")
#: Field-name prefixes that make the columnar decoder reassemble iWARP streams.
IWARP_PREFIXES = ("iwarp", "rdmalab.crc32c", "rdmalab.pdus")
COLUMNS = COLUMNS + IWARP_COLUMNS
COLUMN_BY_NAME: dict[str, Col] = {c.name: c for c in COLUMNS}
#: Derived columns, computed on demand from others (strings for people and filters).
DERIVED = ("rdmalab.icrc.status", "rdmalab.opcode", "rdmalab.encap", "rdmalab.crc32c.status")
COLUMN_NAMES: frozenset[str] = frozenset([*COLUMN_BY_NAME, *DERIVED])
#: Layers that share rows with another one (a protocol name a filter may test).
_LAYER_ALIASES = {"infiniband.reth": "infiniband.reth", "infiniband": "infiniband.bth"}


def _opcode_tables() -> dict[str, np.ndarray]:
    """Per BTH opcode: byte offset after the BTH of each extended header (-1: absent), and the
    total length of the extended headers; from the opcode table (the one source of truth)."""
    names = {"RDETH": "rdeth", "DETH": "deth", "RETH": "reth", "AtomicETH": "atomiceth", "AETH": "aeth",
             "AtomicAckETH": "atomicacketh", "ImmDt": "immdt", "IETH": "ieth", "XRCETH": "xrceth"}
    t = {k: np.full(256, -1, dtype=np.int16) for k in names.values()}
    t["extlen"] = np.zeros(256, dtype=np.int16)
    t["known"] = np.zeros(256, dtype=bool)
    for code, info in OPCODES.items():
        pos = 0
        for h in info.headers:
            key = names.get(h.__name__)
            if key is not None:
                t[key][code] = pos
            pos += h.LAYOUT.size
        t["extlen"][code] = pos
        t["known"][code] = True
    return t


_OPT: dict[str, np.ndarray] | None = None


def _opt() -> dict[str, np.ndarray]:
    global _OPT
    if _OPT is None:
        _OPT = _opcode_tables()
    return _OPT


# ============================================================================ the table


class Columns:
    """Decoded columns of ``n`` packets: ``cols[name]`` arrays and per-layer row masks."""

    def __init__(self, n: int, data: dict[str, np.ndarray], layers: dict[str, np.ndarray],
                 path: str | None = None, multi: dict[int, dict[str, Any]] | None = None) -> None:
        self.n = n
        self.data = data
        self.layers = layers
        self.path = path
        #: frames that complete more than one iWARP PDU: frame number -> every iWARP field of
        #: the frame, a list where a field occurs more than once (what tshark prints with
        #: ``-E occurrence=a``); the columns hold each field's first occurrence
        self.multi: dict[int, dict[str, Any]] = multi if multi is not None else {}

    def __len__(self) -> int:
        return self.n

    def __contains__(self, name: object) -> bool:
        return name in COLUMN_NAMES

    def __getitem__(self, name: str) -> np.ndarray:
        if name in self.data:
            return self.data[name]
        if name == "rdmalab.icrc.status":
            return np.array(["unchecked", "good", "bad"], dtype=object)[self.data["rdmalab.icrc.ok"].astype(np.int64) + 0]
        if name == "rdmalab.crc32c.status":
            return np.array(["unchecked", "good", "bad"], dtype=object)[self.data["rdmalab.crc32c.ok"].astype(np.int64)]
        if name == "rdmalab.opcode":
            names = np.array([opcode_name(i) for i in range(256)], dtype=object)
            out: np.ndarray = names[self.data["infiniband.bth.opcode"]]
            return out
        if name == "rdmalab.encap":
            enc = np.full(self.n, "other", dtype=object)
            enc[self.present("tcp")] = "tcp"
            enc[self.present("udp")] = "udp"
            enc[self.layers["rocev1"]] = "rocev1"
            enc[self.layers["rocev2"]] = "rocev2"
            return enc
        raise KeyError(name)

    def present(self, name: str) -> np.ndarray:
        """Rows where the field or protocol exists."""
        col = COLUMN_BY_NAME.get(name)
        if col is not None:
            return self.layers[col.layer]
        if name in ("rdmalab.icrc.status",):
            return self.layers["infiniband.crc"]
        if name == "rdmalab.crc32c.status":
            return self.layers["rdmalab.crc32c"]
        if name in ("rdmalab.opcode",):
            return self.layers["infiniband.bth"]
        if name == "rdmalab.encap" or name == "frame":
            return self.layers["frame"]
        if name in self.layers:
            return self.layers[name]
        alias = _LAYER_ALIASES.get(name)
        if alias is not None and alias in self.layers:
            return self.layers[alias]
        prefix = name + "."
        hits = [self.layers[c.layer] for c in COLUMNS if c.name.startswith(prefix)]
        if hits:
            anyhit: np.ndarray = np.logical_or.reduce(hits)
            return anyhit
        raise KeyError(name)

    def has(self, name: str) -> bool:
        """Whether this table can answer ``name`` (a column, derived column or layer)."""
        try:
            self.present(name)
        except KeyError:
            return False
        return name in self.data or name in DERIVED or name not in COLUMN_NAMES

    def take(self, mask_or_index: np.ndarray) -> Columns:
        """The rows a boolean mask (or index array) selects."""
        data = {k: v[mask_or_index] for k, v in self.data.items()}
        layers = {k: v[mask_or_index] for k, v in self.layers.items()}
        n = len(data["frame.number"])
        return Columns(n, data, layers, self.path, self.multi)

    @staticmethod
    def concat(parts: Sequence[Columns]) -> Columns:
        if not parts:
            return empty_columns()
        if len(parts) == 1:
            return parts[0]
        data = {k: np.concatenate([p.data[k] for p in parts]) for k in parts[0].data}
        layers = {k: np.concatenate([p.layers[k] for p in parts]) for k in parts[0].layers}
        multi = {k: v for p in parts for k, v in p.multi.items()}
        return Columns(sum(p.n for p in parts), data, layers, parts[0].path, multi)

    # ------------------------------------------------------------------ other libraries
    def to_arrow(self, names: Iterable[str] | None = None) -> Any:
        """A ``pyarrow.Table``; a field is null where its layer is absent; addresses as strings."""
        import pyarrow as pa  # optional dependency (the "analysis" extra)

        arrays = {}
        for name in (names if names is not None else [c.name for c in COLUMNS]):
            col = COLUMN_BY_NAME.get(name)
            valid = self.present(name)
            if col is not None and col.fmt in ("ipv4", "ipv6", "mac"):
                arrays[name] = pa.array(format_column(self, name, missing=None), type=pa.string())
            else:
                values = self[name]
                arrays[name] = pa.array(values, mask=~valid) if values.dtype != object else pa.array(
                    [v if ok else None for v, ok in zip(values, valid, strict=True)], type=pa.string())
        return pa.table(arrays)

    def to_pandas(self, names: Iterable[str] | None = None) -> Any:
        """A ``pandas.DataFrame`` (through Arrow: nullable integer columns)."""
        return self.to_arrow(names).to_pandas()


def empty_columns() -> Columns:
    data = {c.name: np.zeros(0, dtype=c.dtype) for c in COLUMNS}
    return Columns(0, data, {k: np.zeros(0, dtype=bool) for k in _LAYER_NAMES})


_LAYER_NAMES = sorted({c.layer for c in COLUMNS} | {"rocev1", "rocev2", "infiniband.reth", *IWARP_LAYERS})


# ============================================================================ reading records


@dataclass(slots=True)
class RecordBlock:
    """A block of raw records: one buffer and, per record, where its bytes are."""

    buf: bytes | bytearray
    offset: np.ndarray  # int64, start of the packet bytes in buf
    caplen: np.ndarray  # int64
    wirelen: np.ndarray  # int64
    ts_ns: np.ndarray  # int64, nanoseconds since the epoch
    linktype: np.ndarray  # int32
    first: int  # frame number of the first record
    file_pos: int  # bytes of the file consumed after this block


def _open(path: str) -> IO[bytes]:
    try:
        f: IO[bytes] = open(path, "rb")  # noqa: SIM115 - closed by the caller
    except FileNotFoundError:
        raise CaptureError(path, "no such file") from None
    except IsADirectoryError:
        raise CaptureError(path, "is a directory, not a capture file") from None
    except OSError as err:
        raise CaptureError(path, f"cannot be opened ({err.strerror or err})") from None
    if f.read(2) == b"\x1f\x8b":
        f.close()
        return gzip.open(path, "rb")  # type: ignore[return-value]
    f.seek(0)
    return f


def record_blocks(path: str | os.PathLike[str], block_bytes: int = 16 << 20) -> Iterator[RecordBlock]:
    """The records of a pcap/pcapng file (plain or gzip) in blocks of about ``block_bytes``."""
    p = os.fspath(path)
    with _open(p) as f:
        head = f.read(24)
        if len(head) < 4:
            raise CaptureError(p, "is empty, not a pcap or pcapng file" if not head else
                               f"is only {len(head)} bytes long, too short for a pcap or pcapng file")
        if head[:4] == b"\x0a\x0d\x0d\x0a":
            yield from _pcapng_blocks(p, f, head, block_bytes)
            return
        magic = head[:4]
        formats = {b"\xd4\xc3\xb2\xa1": ("<", 1000), b"\xa1\xb2\xc3\xd4": (">", 1000),
                   b"\x4d\x3c\xb2\xa1": ("<", 1), b"\xa1\xb2\x3c\x4d": (">", 1)}
        if magic not in formats:
            raise CaptureError(p, f"is not a pcap or pcapng file (it starts with bytes {head[:4].hex(' ')}; a pcap "
                                  "file starts with a1 b2 c3 d4 or d4 c3 b2 a1, a pcapng file with 0a 0d 0d 0a)")
        if len(head) < 24:
            raise CaptureError(p, f"ends inside the 24-byte pcap file header (after {len(head)} bytes)", offset=0)
        order, ns_mult = formats[magic]
        linktype = struct.unpack(order + "I", head[20:24])[0] & 0x0FFFFFFF
        for raw in _pcap_raw(p, f, order, block_bytes):
            yield _block(raw.buf, raw.offs, order, ns_mult, linktype, raw.first, raw.file_end)


@dataclass(slots=True)
class _Raw:
    buf: bytes | bytearray
    offs: np.ndarray  # int64, record header offsets in buf
    first: int
    file_start: int  # file offset of buf[0]
    file_end: int  # file offset after the last whole record


def _pcap_raw(p: str, f: IO[bytes], order: str, block_bytes: int) -> Iterator[_Raw]:
    unpack = struct.Struct(order + "I").unpack_from
    pending = b""
    frame = 1
    pos_file = 24
    native = order == ("<" if sys.byteorder == "little" else ">")
    while True:
        # read straight into the block's buffer, behind the partial record left from the last
        # one (no second copy of the block to join them)
        buf = bytearray(len(pending) + block_bytes)
        buf[:len(pending)] = pending
        with memoryview(buf) as into:
            got = f.readinto(into[len(pending):]) or 0  # type: ignore[attr-defined]
        chunk = got > 0
        if got < block_bytes:
            del buf[len(pending) + got:]
        if not buf:
            return
        end = len(buf)
        pos = 0
        offs: list[int] = []
        append = offs.append
        # the only per-record Python: follow the captured lengths from header to header.  The
        # caplen field of a record at ``pos`` is the 32-bit word at ``pos + 8``; four unsigned-int
        # views of the buffer, one per alignment, read it without a struct call per record
        if native:
            # q is the offset of a record's caplen field (its header starts 8 bytes before): the
            # loop keeps every record whose header is whole, then drops the last one if its data
            # runs past the buffer (only the last can)
            with memoryview(buf) as mv:
                views = [mv[k:k + (end - k) // 4 * 4].cast("I") for k in range(4)]
                q = 8
                lim = end - 8
                while q <= lim:
                    append(q)
                    q += 16 + views[q & 3][q >> 2]
                for v in views:
                    v.release()
            if offs and q - 8 > end:
                q = offs.pop()
            pos = q - 8
            offs_np = np.array(offs, dtype=np.int64) - 8
        else:
            while pos + 16 <= end:
                nxt = pos + 16 + unpack(buf, pos + 8)[0]
                if nxt > end:
                    break
                append(pos)
                pos = nxt
            offs_np = np.array(offs, dtype=np.int64)
        if pos + 16 <= end and unpack(buf, pos + 8)[0] > 64 << 20:
            raise CaptureError(p, f"is damaged: record {frame + len(offs)} at byte {pos_file + pos} claims "
                                  f"{unpack(buf, pos + 8)[0]} bytes", offset=pos_file + pos, frames_read=frame - 1)
        if not chunk and pos < end:
            at = pos_file + pos
            what = ("inside the header of" if end - pos < 16 else "in the middle of")
            if offs:
                yield _Raw(buf, offs_np, frame, pos_file, pos_file + pos)
            raise CaptureError(p, f"is truncated: it ends {what} record {frame + len(offs)} (byte {at})",
                               offset=at, frames_read=frame - 1 + len(offs))
        if offs:
            yield _Raw(buf, offs_np, frame, pos_file, pos_file + pos)
            frame += len(offs)
        pos_file += pos
        pending = bytes(buf[pos:])
        if not chunk:
            return


def _block(buf: bytes | bytearray, offs: np.ndarray, order: str, ns_mult: int, linktype: int, frame: int,
           file_pos: int) -> RecordBlock:
    """The record headers at ``offs``, read with numpy (ts_sec, ts_frac, caplen, wirelen)."""
    at = np.asarray(offs, dtype=np.int64)
    bufnp = np.frombuffer(buf, dtype=np.uint8)
    hdr = np.lib.stride_tricks.sliding_window_view(bufnp, 16)[at]
    r = np.ascontiguousarray(hdr).view(order + "u4").astype(np.int64)
    n = len(offs)
    return RecordBlock(buf, at + 16, r[:, 2], r[:, 3], r[:, 0] * 1_000_000_000 + r[:, 1] * ns_mult,
                       np.full(n, linktype, dtype=np.int32), frame, file_pos)


def _pcapng_blocks(path: str, f: IO[bytes], head: bytes, block_bytes: int) -> Iterator[RecordBlock]:
    pending = head
    order = "<"
    ifaces: list[tuple[int, int, int]] = []  # linktype, units per second, offset seconds
    frame = 1
    pos_file = 0
    while True:
        chunk = f.read(block_bytes)
        buf = pending + chunk
        end = len(buf)
        pos = 0
        offs: list[int] = []
        caps: list[int] = []
        wires: list[int] = []
        tss: list[int] = []
        lts: list[int] = []
        while pos + 12 <= end:
            if buf[pos:pos + 4] == b"\x0a\x0d\x0d\x0a":
                bom = buf[pos + 8:pos + 12]
                order = "<" if bom == b"\x4d\x3c\x2b\x1a" else ">"
                if bom not in (b"\x4d\x3c\x2b\x1a", b"\x1a\x2b\x3c\x4d"):
                    raise CaptureError(path, f"has a pcapng section header at byte {pos_file + pos} with an unknown "
                                             f"byte-order magic {bom.hex(' ')}", offset=pos_file + pos)
            btype, blen = struct.unpack_from(order + "II", buf, pos)
            if blen < 12 or blen % 4:
                raise CaptureError(path, f"is damaged: the pcapng block at byte {pos_file + pos} has length {blen}",
                                   offset=pos_file + pos, frames_read=frame - 1 + len(offs))
            if pos + blen > end:
                break
            if btype == 0x0A0D0D0A:
                ifaces = []
            elif btype == 1:
                lt = struct.unpack_from(order + "H", buf, pos + 8)[0]
                units, tsoff = 1_000_000, 0
                o = pos + 16
                while o + 4 <= pos + blen - 4:
                    code, olen = struct.unpack_from(order + "HH", buf, o)
                    if code == 0:
                        break
                    if code == 9 and olen >= 1:
                        v = buf[o + 4]
                        units = (2 if v & 0x80 else 10) ** (v & 0x7F)
                    elif code == 14 and olen >= 8:
                        tsoff = struct.unpack_from(order + "q", buf, o + 4)[0]
                    o += 4 + ((olen + 3) & ~3)
                ifaces.append((lt, units, tsoff))
            elif btype in (6, 2, 3):
                if btype == 3:
                    iface, hi, lo = 0, 0, 0
                    wire = struct.unpack_from(order + "I", buf, pos + 8)[0]
                    cap = min(wire, blen - 16)
                    data = pos + 12
                else:
                    iface, hi, lo, cap, wire = struct.unpack_from(order + "IIIII", buf, pos + 8)
                    if btype == 2:
                        iface &= 0xFFFF
                    data = pos + 28
                if iface >= len(ifaces):
                    raise CaptureError(path, f"is damaged: the packet block at byte {pos_file + pos} refers to "
                                             f"interface {iface}, but only {len(ifaces)} interface(s) were described "
                                             "before it", offset=pos_file + pos, frames_read=frame - 1 + len(offs))
                lt, units, tsoff = ifaces[iface]
                t = (hi << 32) | lo
                offs.append(data)
                caps.append(cap)
                wires.append(wire)
                tss.append((tsoff * 1_000_000_000) + (t * 1_000_000_000) // units)
                lts.append(lt)
            pos += blen
        if offs:
            yield RecordBlock(buf, np.array(offs, dtype=np.int64), np.array(caps, dtype=np.int64),
                              np.array(wires, dtype=np.int64), np.array(tss, dtype=np.int64),
                              np.array(lts, dtype=np.int32), frame, pos_file + pos)
            frame += len(offs)
        pos_file += pos
        pending = buf[pos:]
        if not chunk:
            if pending:
                raise CaptureError(path, f"is truncated mid-record: a pcapng block at byte {pos_file} is cut off",
                                   offset=pos_file, frames_read=frame - 1)
            return


# ============================================================================ vectorised fields


def _realign(H: np.ndarray, base: np.ndarray, width: int) -> np.ndarray:
    """Row i of the result is ``H[i, base[i]:base[i] + width]`` (zeros past the window).

    Rows are grouped by their offset (a block of one capture has very few distinct ones: with or
    without a VLAN tag, IPv4 options, the extended headers of each opcode), so this is a few
    slices rather than a gather per byte."""
    n, hw = H.shape
    if n == 0:
        return np.zeros((0, width), dtype=np.uint8)
    b = int(base[0])
    if 0 <= b and b + width <= hw and (base == b).all():
        return H[:, b:b + width]
    lo, hi = int(base.min()), int(base.max())
    # the few distinct offsets: a count per possible offset is much cheaper than np.unique
    uniq = np.flatnonzero(np.bincount(base - lo)) + lo if 0 <= lo and hi < 4 * hw else np.unique(base)
    out = np.zeros((n, width), dtype=np.uint8)
    for b in uniq.tolist():
        if b < 0 or b >= hw:
            continue
        m = base == b
        w = min(width, hw - b)
        out[m, :w] = H[m, b:b + w]
    return out


def _be(M: np.ndarray, a: int, nbytes: int) -> np.ndarray:
    """Big-endian unsigned integer of bytes ``a .. a+nbytes-1`` of every row."""
    if nbytes == 1:
        return M[:, a].astype(np.uint64)
    # copy the bytes into rows of 2, 4 or 8 (zero-padded in front) and read them as big-endian
    # integers: one copy and one conversion instead of a shift and an OR per byte
    w = 2 if nbytes == 2 else 4 if nbytes <= 4 else 8
    rows = np.zeros((M.shape[0], w), dtype=np.uint8)
    rows[:, w - nbytes:] = M[:, a:a + nbytes]
    return rows.view(f">u{w}").reshape(-1).astype(np.uint64)


def wants_iwarp(fields: Iterable[str] | None) -> bool:
    """Whether decoding ``fields`` (None: all) needs the iWARP stream reassembly."""
    return fields is None or any(f.startswith(IWARP_PREFIXES) for f in fields)


#: The columns the iWARP reassembly reads (added to the fields asked for when it runs).
_TCP_INPUTS = ("ip.src", "ip.dst", "ip.hdr_len", "ipv6.src", "ipv6.dst", "tcp.srcport", "tcp.dstport",
               "tcp.seq_raw", "tcp.flags", "tcp.hdr_len", "tcp.len", "vlan.id")


def decode_block(blk: RecordBlock, *, verify_icrc: bool = True, fields: Iterable[str] | None = None,
                 tracker: Any = None) -> Columns:
    """Decode one block of Ethernet records into columns.

    ``fields`` (default: all) limits the work to the columns named (and what they depend on);
    the others are left as zeros with their layer absent.  ``tracker`` (an
    :class:`rdmalab.capture.iwarp.IwarpTracker`, kept from block to block) fills the iWARP
    columns; without one they are absent."""
    if tracker is not None and fields is not None:
        fields = (*fields, *_TCP_INPUTS)
    return _decode(blk, verify_icrc, None if fields is None else frozenset(fields), tracker)


def _wanted(wanted: frozenset[str] | None, prefixes: tuple[str, ...]) -> bool:
    return wanted is None or any(f.startswith(p) or p.startswith(f + ".") or p == f
                                 for f in wanted for p in prefixes)


_NEED_CACHE: dict[tuple[frozenset[str] | None, tuple[str, ...]], bool] = {}


def _decode(blk: RecordBlock, verify_icrc: bool, wanted: frozenset[str] | None, tracker: Any) -> Columns:
    n = len(blk.offset)

    def need(*prefixes: str) -> bool:
        key = (wanted, prefixes)
        hit = _NEED_CACHE.get(key)
        if hit is None:
            if len(_NEED_CACHE) > 4096:
                _NEED_CACHE.clear()
            hit = _NEED_CACHE[key] = _wanted(wanted, prefixes)
        return hit

    bufnp = np.frombuffer(blk.buf, dtype=np.uint8)
    # one row copy per packet: fancy indexing over a sliding-window view of the block; the last
    # records, whose window runs past the buffer, are copied one by one and zero-padded
    inside = blk.offset <= len(bufnp) - WINDOW
    if len(bufnp) >= WINDOW and inside.all():
        H = np.lib.stride_tricks.sliding_window_view(bufnp, WINDOW)[blk.offset]
    else:
        H = np.zeros((n, WINDOW), dtype=np.uint8)
        if len(bufnp) >= WINDOW:
            H[inside] = np.lib.stride_tricks.sliding_window_view(bufnp, WINDOW)[blk.offset[inside]]
        for i in np.flatnonzero(~inside).tolist():
            row = bufnp[int(blk.offset[i]):int(blk.offset[i]) + WINDOW]
            H[i, :len(row)] = row
    # bytes past a packet's captured length are the next record's: every field below is only
    # marked present where the captured length covers it
    caplen = blk.caplen
    u64 = np.uint64

    data: dict[str, np.ndarray] = {}
    L: dict[str, np.ndarray] = {}
    data["frame.number"] = np.arange(blk.first, blk.first + n, dtype=np.uint64)
    data["frame.time_ns"] = blk.ts_ns
    data["frame.time_epoch"] = blk.ts_ns / 1e9
    data["frame.len"] = blk.wirelen.astype(np.uint32)
    data["frame.cap_len"] = caplen.astype(np.uint32)
    L["frame"] = np.ones(n, dtype=bool)
    eth = (blk.linktype == LINKTYPE_ETHERNET) & (caplen >= 14)
    L["eth"] = eth
    if need("eth.src", "eth.dst"):
        data["eth.dst"] = _be(H, 0, 6)
        data["eth.src"] = _be(H, 6, 6)
    etype = _be(H, 12, 2)
    data["eth.type"] = etype.astype(np.uint16)
    vlan = eth & (etype == 0x8100) & (caplen >= 18)
    L["vlan"] = vlan
    if need("vlan"):
        tci = _be(H, 14, 2)
        data["vlan.id"] = (tci & u64(0xFFF)).astype(np.uint16)
        data["vlan.priority"] = (tci >> u64(13)).astype(np.uint8)
    etype = np.where(vlan, _be(H, 16, 2), etype)
    l3 = np.where(vlan, 18, 14).astype(np.int64)
    IP = _realign(H, l3, 40)
    b0 = IP[:, 0]
    ip = eth & (etype == 0x0800) & (b0 >> 4 == 4) & (caplen >= l3 + 20)
    ihl = (b0 & 0x0F).astype(np.int64)
    L["ip"] = ip
    data["ip.len"] = _be(IP, 2, 2).astype(np.uint16)
    ff = _be(IP, 6, 2)
    frag = (ff & u64(0x1FFF)).astype(np.uint16)
    data["ip.frag_offset"] = frag
    proto4 = IP[:, 9]
    data["ip.proto"] = proto4
    if need("ip.", "ip"):
        data["ip.version"] = (b0 >> 4).astype(np.uint8)
        data["ip.hdr_len"] = (ihl * 4).astype(np.uint8)
        tos = IP[:, 1]
        data["ip.dsfield.dscp"] = tos >> 2
        data["ip.dsfield.ecn"] = tos & 3
        data["ip.id"] = _be(IP, 4, 2).astype(np.uint16)
        data["ip.flags"] = (ff >> u64(13)).astype(np.uint8)
        data["ip.ttl"] = IP[:, 8]
        data["ip.checksum"] = _be(IP, 10, 2).astype(np.uint16)
        data["ip.src"] = _be(IP, 12, 4).astype(np.uint32)
        data["ip.dst"] = _be(IP, 16, 4).astype(np.uint32)
    ip6 = eth & (etype == 0x86DD) & (b0 >> 4 == 6) & (caplen >= l3 + 40)
    L["ipv6"] = ip6
    L["ipver"] = ip | ip6
    need6 = need("ipv6", "infiniband.grh")
    if need6:
        w0 = _be(IP, 0, 4)
        data["ipv6.tclass"] = ((w0 >> u64(20)) & u64(0xFF)).astype(np.uint8)
        data["ipv6.flow"] = (w0 & u64(0xFFFFF)).astype(np.uint32)
    data["ipv6.plen"] = _be(IP, 4, 2).astype(np.uint16)
    nxt6 = IP[:, 6]
    data["ipv6.nxt"] = nxt6
    if need6:
        data["ipv6.hlim"] = IP[:, 7]
        data["ipv6.src"] = np.ascontiguousarray(IP[:, 8:24]).view("S16").reshape(n)
        data["ipv6.dst"] = np.ascontiguousarray(IP[:, 24:40]).view("S16").reshape(n)
    l4 = np.where(ip6, l3 + 40, l3 + ihl * 4)
    proto = np.where(ip6, nxt6, proto4)
    l4ok = (ip & (frag == 0) & (ihl >= 5)) | ip6
    udp = l4ok & (proto == 17) & (caplen >= l4 + 8)
    tcp = l4ok & (proto == 6) & (caplen >= l4 + 20)
    L["udp"], L["tcp"] = udp, tcp
    # the UDP/TCP header and, for RoCEv2, the BTH and extended headers after it
    T = _realign(H, l4, 8 + 12 + 48)
    data["udp.srcport"] = _be(T, 0, 2).astype(np.uint16)
    data["udp.dstport"] = _be(T, 2, 2).astype(np.uint16)
    udplen = _be(T, 4, 2).astype(np.int64)
    data["udp.length"] = udplen.astype(np.uint16)
    if need("udp.checksum"):
        data["udp.checksum"] = _be(T, 6, 2).astype(np.uint16)
    if need("tcp"):
        data["tcp.srcport"] = data["udp.srcport"]
        data["tcp.dstport"] = data["udp.dstport"]
        data["tcp.seq_raw"] = _be(T, 4, 4).astype(np.uint32)
        data["tcp.ack_raw"] = _be(T, 8, 4).astype(np.uint32)
        thl = (T[:, 12] >> 4).astype(np.int64) * 4
        data["tcp.hdr_len"] = thl.astype(np.uint8)
        data["tcp.flags"] = (_be(T, 12, 2) & u64(0x1FF)).astype(np.uint16)
        data["tcp.window_size_value"] = _be(T, 14, 2).astype(np.uint16)
        iplen = np.where(ip6, data["ipv6.plen"].astype(np.int64) + 40, data["ip.len"].astype(np.int64))
        data["tcp.len"] = np.maximum(iplen - (l4 - l3) - thl, 0).astype(np.uint32)
    # RoCEv2: UDP to port 4791; RoCEv1: EtherType 0x8915 and a GRH
    rocev2 = udp & (data["udp.dstport"] == ROCEV2_PORT) & (caplen >= l4 + 8 + 12)
    rocev1 = eth & (etype == 0x8915) & (caplen >= l3 + 40 + 12)
    L["rocev2"], L["rocev1"] = rocev2, rocev1
    L["infiniband.grh"] = rocev1
    if need6:
        data["infiniband.grh.tclass"] = data["ipv6.tclass"]
        data["infiniband.grh.flowlabel"] = data["ipv6.flow"]
        data["infiniband.grh.paylen"] = data["ipv6.plen"]
        data["infiniband.grh.nxthdr"] = nxt6
        data["infiniband.grh.hoplmt"] = data["ipv6.hlim"]
        data["infiniband.grh.sgid"] = data["ipv6.src"]
        data["infiniband.grh.dgid"] = data["ipv6.dst"]
    bth = np.where(rocev1, l3 + 40, l4 + 8)
    B = T[:, 8:] if not rocev1.any() else _realign(H, bth, 12 + 48)
    ib = rocev1 | rocev2
    L["infiniband.bth"] = ib
    opcode = B[:, 0].copy()
    data["infiniband.bth.opcode"] = opcode
    b1 = B[:, 1]
    data["infiniband.bth.se"] = b1 >> 7
    data["infiniband.bth.m"] = (b1 >> 6) & 1
    pad = ((b1 >> 4) & 3).astype(np.int64)
    data["infiniband.bth.padcnt"] = pad.astype(np.uint8)
    data["infiniband.bth.tver"] = b1 & 0x0F
    data["infiniband.bth.p_key"] = _be(B, 2, 2).astype(np.uint16)
    b4 = B[:, 4]
    data["rdmalab.bth.fecn"] = b4 >> 7
    data["rdmalab.bth.becn"] = (b4 >> 6) & 1
    data["infiniband.bth.destqp"] = _be(B, 5, 3).astype(np.uint32)
    data["infiniband.bth.a"] = B[:, 8] >> 7
    data["infiniband.bth.psn"] = _be(B, 9, 3).astype(np.uint32)
    # the IB packet's end (ICRC included): from the UDP length or the GRH payload length
    ib_end = np.where(rocev1, l3 + 40 + data["ipv6.plen"].astype(np.int64), l4 + udplen)
    ib_end = np.minimum(ib_end, caplen)
    t = _opt()
    ext0 = bth + 12
    extlen = t["extlen"][opcode].astype(np.int64)
    fits = ib & (ext0 + extlen <= ib_end)
    sizes = {"rdeth": 4, "deth": 8, "reth": 16, "atomiceth": 28, "aeth": 4, "atomicacketh": 8, "immdt": 4,
             "ieth": 4, "xrceth": 4}
    X: dict[str, np.ndarray] = {}
    layer_of = {"rdeth": ("infiniband.rdeth",), "deth": ("infiniband.deth",), "reth": ("infiniband.reth",),
                "atomiceth": ("infiniband.atomiceth", "infiniband.reth"), "aeth": ("infiniband.aeth",),
                "atomicacketh": ("infiniband.atomicacketh",), "immdt": ("infiniband.immdt",),
                "ieth": ("infiniband.ieth",), "xrceth": ("rdmalab.xrceth",)}
    for key, size in sizes.items():
        o = t[key][opcode].astype(np.int64)
        L[f"_{key}"] = fits & (o >= 0)
        if need(*layer_of[key]):
            X[key] = _realign(B, 12 + np.where(o >= 0, o, 48), size)
        else:
            X[key] = np.zeros((n, size), dtype=np.uint8)
    data["infiniband.rdeth.eecnxt"] = _be(X["rdeth"], 1, 3).astype(np.uint32)
    data["infiniband.deth.q_key"] = _be(X["deth"], 0, 4)
    data["infiniband.deth.srcqp"] = _be(X["deth"], 5, 3).astype(np.uint32)
    R = X["reth"]
    A = X["atomiceth"]
    data["infiniband.reth.dmalen"] = _be(R, 12, 4).astype(np.uint32)
    data["infiniband.atomiceth.swapdt"] = _be(A, 12, 8)
    data["infiniband.atomiceth.cmpdt"] = _be(A, 20, 8)
    data["infiniband.aeth.syndrome"] = X["aeth"][:, 0].copy()
    data["infiniband.aeth.msn"] = _be(X["aeth"], 1, 3).astype(np.uint32)
    data["infiniband.atomicacketh.origremdt"] = _be(X["atomicacketh"], 0, 8)
    data["infiniband.immdt"] = _be(X["immdt"], 0, 4).astype(np.uint32)
    data["infiniband.ieth"] = _be(X["ieth"], 0, 4).astype(np.uint32)
    data["rdmalab.xrceth.xrcsrq"] = _be(X["xrceth"], 1, 3).astype(np.uint32)
    for key, layer in (("rdeth", "infiniband.rdeth"), ("deth", "infiniband.deth"), ("reth", "infiniband.reth"),
                       ("atomiceth", "infiniband.atomiceth"), ("aeth", "infiniband.aeth"),
                       ("atomicacketh", "infiniband.atomicacketh"), ("immdt", "infiniband.immdt"),
                       ("ieth", "infiniband.ieth"), ("xrceth", "rdmalab.xrceth")):
        L[layer] = L.pop(f"_{key}")
    # RETH and AtomicETH share Wireshark's names for the address and key
    is_at = L["infiniband.atomiceth"]
    data["infiniband.reth.va"] = np.where(is_at, _be(A, 0, 8), _be(R, 0, 8))
    data["infiniband.reth.r_key"] = np.where(is_at, _be(A, 8, 4), _be(R, 8, 4)).astype(np.uint32)
    L["infiniband.va"] = L["infiniband.reth"] | is_at
    L["rdmalab.cnp"] = ib & (opcode == CNP_OPCODE)
    data["rdmalab.cnp"] = L["rdmalab.cnp"].astype(np.uint8)
    plen = ib_end - ext0 - extlen - pad - 4
    data["rdmalab.payload.len"] = np.maximum(plen, 0).astype(np.uint32)
    crc_ok = fits & (ib_end >= ext0 + extlen + 4)
    L["infiniband.crc"] = crc_ok
    status = np.zeros(n, dtype=np.int8)
    if need("infiniband.invariant", "rdmalab.icrc") or verify_icrc:
        crc_at = blk.offset + np.maximum(ib_end - 4, 0)
        crc_at = np.minimum(crc_at, len(bufnp) - 4)
        wire = ((bufnp[crc_at].astype(np.uint32) << 24) | (bufnp[crc_at + 1].astype(np.uint32) << 16)
                | (bufnp[crc_at + 2].astype(np.uint32) << 8) | bufnp[crc_at + 3])
        data["infiniband.invariant.crc"] = wire
    if verify_icrc and crc_ok.any():
        status = _verify_icrc(blk, H, crc_ok, rocev1, l3, bth, ib_end, wire)
    data["rdmalab.icrc.ok"] = status
    for c in COLUMNS:  # the columns not asked for
        if c.name not in data:
            data[c.name] = np.zeros(n, dtype=c.dtype)
    for name in (*IWARP_LAYERS, *(c.layer for c in IWARP_COLUMNS)):
        L[name] = np.zeros(n, dtype=bool)
    cols = Columns(n, data, L)
    if tracker is not None:
        fill_iwarp(blk, cols, tracker)
    return cols


def fill_iwarp(blk: RecordBlock, cols: Columns, tracker: Any) -> None:
    """Feed the block's TCP segments, in order, to the iWARP stream reassembly (the same
    :class:`~rdmalab.capture.iwarp.IwarpTracker` the per-packet decoder uses) and put the fields
    of the PDUs each frame completes into the iWARP columns.

    Python runs per TCP segment and per PDU here (reassembly is sequential by nature); frames
    of other protocols cost nothing."""
    tcp = cols.layers["tcp"]
    idx = np.nonzero(tcp & (cols.data["tcp.len"] > 0) | tcp & ((cols.data["tcp.flags"] & 0x06) != 0))[0]
    if len(idx) == 0:
        return
    d, L = cols.data, cols.layers
    v6 = L["ipv6"][idx]
    l3 = np.where(L["vlan"][idx], 18, 14)
    l4 = l3 + np.where(v6, 40, d["ip.hdr_len"][idx].astype(np.int64))
    start = blk.offset[idx] + l4 + d["tcp.hdr_len"][idx].astype(np.int64)
    end = np.minimum(start + d["tcp.len"][idx].astype(np.int64), blk.offset[idx] + blk.caplen[idx])
    end = np.maximum(end, start)
    if v6.any():
        src = [_ipv6_text(a) if six else "" for a, six in zip(d["ipv6.src"][idx].tolist(), v6.tolist(), strict=True)]
        dst = [_ipv6_text(a) if six else "" for a, six in zip(d["ipv6.dst"][idx].tolist(), v6.tolist(), strict=True)]
    else:
        src = dst = [""] * len(idx)
    buf = blk.buf
    frame0 = int(d["frame.number"][0]) if cols.n else 0
    process = tracker.process_segment
    rows = zip(idx.tolist(), src, dst, d["ip.src"][idx].tolist(), d["ip.dst"][idx].tolist(),
               d["tcp.srcport"][idx].tolist(), d["tcp.dstport"][idx].tolist(), d["tcp.seq_raw"][idx].tolist(),
               d["tcp.flags"][idx].tolist(), start.tolist(), end.tolist(), v6.tolist(), strict=True)
    for i, s6, d6, s4, d4, sport, dport, seq, flags, a, b, six in rows:
        if not six:
            s6 = f"{s4 >> 24}.{(s4 >> 16) & 255}.{(s4 >> 8) & 255}.{s4 & 255}"
            d6 = f"{d4 >> 24}.{(d4 >> 16) & 255}.{(d4 >> 8) & 255}.{d4 & 255}"
        try:
            pdus = process(frame0 + i, s6, sport, d6, dport, seq, flags, buf[a:b])
        except DecodeError:  # a damaged stream: the per-packet decoder reports it, columns skip it
            continue
        if not pdus:
            continue
        got: dict[str, Any] = {}
        for pdu in pdus:
            packet_fields(pdu, got, raw=True)
        for key, v in got.items():
            first = v[0] if isinstance(v, list) else v
            if key == "rdmalab.crc32c.status":
                d["rdmalab.crc32c.ok"][i] = {"good": 1, "bad": 2}.get(first, 0)
                L["rdmalab.crc32c"][i] = True
                continue
            col = COLUMN_BY_NAME.get(key)
            if col is None or col.layer != key:
                continue
            d[key][i] = first
            L[key][i] = True
        d["rdmalab.pdus"][i] = len(pdus)
        L["iwarp"][i] = True
        if len(pdus) > 1:
            cols.multi[frame0 + i] = got
    for proto in ("iwarp_mpa", "iwarp_ddp", "iwarp_rdma"):
        hits = [L[c.name] for c in IWARP_COLUMNS if c.name.startswith(proto + ".")]
        L[proto] = np.logical_or.reduce(hits)


_FF8_STATE = zlib.crc32(b"\xff" * 8)


def _verify_icrc(blk: RecordBlock, H: np.ndarray, sel: np.ndarray, rocev1: np.ndarray, l3: np.ndarray,
                 bth: np.ndarray, ib_end: np.ndarray, wire: np.ndarray) -> np.ndarray:
    """ICRC status per row (1 good, 2 bad, 0 unchecked): the variant fields are masked in a copy
    of the header rows with numpy (IBA Vol 1 7.8.1, RoCEv2 Annex A17.3.3; see rdmalab.wire.crc),
    then zlib.crc32 runs over the masked headers and the rest of the packet, per packet."""
    idx = np.nonzero(sel)[0]
    M = H[idx].copy()
    r = np.arange(len(idx))
    l3s, bths, v1 = l3[idx], bth[idx], rocev1[idx]
    v6 = (M[r, l3s] >> 4) == 6
    grh = v1 | v6
    # IPv4: TOS, TTL, header checksum; IPv6 / GRH: traffic class, flow label, hop limit
    four = ~grh
    M[r[four], l3s[four] + 1] = 0xFF
    M[r[four], l3s[four] + 8] = 0xFF
    M[r[four], l3s[four] + 10] = 0xFF
    M[r[four], l3s[four] + 11] = 0xFF
    M[r[grh], l3s[grh]] |= 0x0F
    for i in (1, 2, 3, 7):
        M[r[grh], l3s[grh] + i] = 0xFF
    udp = ~v1
    M[r[udp], bths[udp] - 2] = 0xFF  # UDP checksum
    M[r[udp], bths[udp] - 1] = 0xFF
    M[r, bths + 4] = 0xFF  # BTH byte 4: FECN, BECN, Resv6
    hdr_end = np.minimum(bths + 12, ib_end[idx] - 4)
    body_end = blk.offset[idx] + ib_end[idx] - 4
    body_start = blk.offset[idx] + hdr_end
    crc32 = zlib.crc32
    mv = memoryview(blk.buf)
    rows_b = M.tobytes()
    out = np.zeros(len(H), dtype=np.int8)
    got = np.empty(len(idx), dtype=np.uint32)
    for j, (a, e, bs, be) in enumerate(zip(l3s.tolist(), hdr_end.tolist(), body_start.tolist(), body_end.tolist(),
                                           strict=True)):
        base = j * WINDOW
        c = crc32(rows_b[base + a:base + e], _FF8_STATE)
        got[j] = crc32(mv[bs:be], c)
    # the ICRC goes least-significant byte first; ``wire`` reads its bytes big-endian
    want = wire[idx].byteswap()
    out[idx] = np.where(got == want, 1, 2)
    return out


# ============================================================================ objects -> columns


def columns_from_packets(path: str | os.PathLike[str], *, first: int = 1, limit: int | None = None) -> Columns:
    """Columns made with the per-packet decoder (other link types, iWARP): slower, same names."""
    n_max = limit
    rows: list[dict[str, Any]] = []
    for cp in read(path):
        if cp.frame_number < first:
            continue
        rows.append(frame_fields(cp, raw=True))
        if n_max is not None and len(rows) >= n_max:
            break
    return columns_from_dicts(rows)


def columns_from_dicts(rows: list[dict[str, Any]]) -> Columns:
    n = len(rows)
    data: dict[str, np.ndarray] = {}
    L: dict[str, np.ndarray] = {k: np.zeros(n, dtype=bool) for k in _LAYER_NAMES}
    layer_hits: dict[str, np.ndarray] = {}
    multi: dict[int, dict[str, Any]] = {}
    for c in COLUMNS:
        arr = np.zeros(n, dtype=c.dtype)
        hit = np.zeros(n, dtype=bool)
        for i, row in enumerate(rows):
            v = row.get(c.name)
            if isinstance(v, list):
                v = v[0] if v else None
            if v is None:
                continue
            if c.name == "frame.time_epoch":
                arr[i] = v
            elif c.dtype == "S16":
                arr[i] = int(v).to_bytes(16, "big")
            else:
                arr[i] = int(v)
            hit[i] = True
        data[c.name] = arr
        layer_hits.setdefault(c.layer, np.zeros(n, dtype=bool))
        layer_hits[c.layer] |= hit
    data["frame.time_ns"] = np.array([round(r["frame.time_epoch"] * 1e9) for r in rows], dtype=np.int64)
    for i, row in enumerate(rows):
        if "erf.ts" in row:  # Wireshark's frame time and length for ERF are the ERF record's own
            ts = int(row["erf.ts"])
            data["frame.time_ns"][i] = (ts >> 32) * 1_000_000_000 + ((ts & 0xFFFFFFFF) * 1_000_000_000 >> 32)
            data["frame.time_epoch"][i] = data["frame.time_ns"][i] / 1e9
            wlen = int(row.get("erf.wlen", 0))
            data["frame.len"][i] = wlen
            data["frame.cap_len"][i] = min(wlen, int(data["frame.cap_len"][i]) - 16)
    L.update(layer_hits)
    for i, row in enumerate(rows):
        enc = row.get("rdmalab.encap")
        if enc in ("rocev1", "rocev2"):
            L[enc][i] = True
        if "iwarp_ddp.qn" in row or "iwarp_ddp.stag" in row:
            L["iwarp"][i] = True
        st = row.get("rdmalab.icrc.status")
        data["rdmalab.icrc.ok"][i] = {"good": 1, "bad": 2}.get(st if isinstance(st, str) else "", 0)
        if "rdmalab.icrc.status" in row:
            L["infiniband.crc"][i] = True
        st = row.get("rdmalab.crc32c.status")
        if isinstance(st, list):
            st = st[0] if st else None
        if st is not None:
            data["rdmalab.crc32c.ok"][i] = {"good": 1, "bad": 2}.get(st, 0)
            L["rdmalab.crc32c"][i] = True
        if int(row.get("rdmalab.pdus", 0) or 0) > 1:
            multi[int(row["frame.number"])] = {k: v for k, v in row.items() if k.startswith(IWARP_PREFIXES)}
    L["frame"] = np.ones(n, dtype=bool)
    L["infiniband.bth"] = L["infiniband.bth"] | L["rocev1"] | L["rocev2"]
    for proto in ("iwarp_mpa", "iwarp_ddp", "iwarp_rdma"):
        L[proto] = np.logical_or.reduce([L[c.name] for c in IWARP_COLUMNS if c.name.startswith(proto + ".")])
    return Columns(n, data, L, multi=multi)


# ============================================================================ whole files


def _ethernet_only(blk: RecordBlock) -> bool:
    return bool((blk.linktype == LINKTYPE_ETHERNET).all())


def iter_columns(path: str | os.PathLike[str], *, block_bytes: int = 16 << 20, verify_icrc: bool = True,
                 progress: bool = False, fields: Iterable[str] | None = None) -> Iterator[Columns]:
    """Columns of a capture, one :class:`Columns` per block of records (bounded memory).

    A file with frames of other link types than Ethernet is decoded with the per-packet decoder.
    """
    p = os.fspath(path)
    bar = _progress(p) if progress else None
    if fields is not None:
        fields = tuple(fields)
    tracker = _tracker() if wants_iwarp(fields) else None
    try:
        for blk in record_blocks(p, block_bytes):
            if not _ethernet_only(blk):
                yield columns_from_packets(p, first=blk.first)
                return
            cols = decode_block(blk, verify_icrc=verify_icrc, fields=fields, tracker=tracker)
            cols.path = p
            if bar is not None:
                bar.update(blk.file_pos - bar.n)
            yield cols
    finally:
        if bar is not None:
            bar.close()


def _tracker() -> Any:
    from rdmalab.capture.iwarp import IwarpTracker  # lazy: only captures that need iWARP columns load it

    return IwarpTracker()


def _progress(path: str) -> Any:
    """A progress bar on stderr (tqdm), by bytes read, for files large enough to wait for."""
    try:
        size = os.path.getsize(path)
    except OSError:
        return None
    if size < 64 << 20:
        return None
    try:
        from tqdm import tqdm  # optional dependency (the "analysis" extra)
    except ImportError:
        return None
    return tqdm(total=size, unit="B", unit_scale=True, desc=os.path.basename(path), leave=False)


def read_columns(path: str | os.PathLike[str], *, verify_icrc: bool = True, progress: bool = False,
                 workers: int = 1, block_bytes: int = 16 << 20) -> Columns:
    """All columns of one capture file.  ``workers > 1`` decodes blocks in worker processes."""
    p = os.fspath(path)
    if workers <= 1:
        return Columns.concat(list(iter_columns(p, verify_icrc=verify_icrc, progress=progress,
                                                block_bytes=block_bytes)))

    parts: list[Columns] = []
    tracker = _tracker()

    def done(item: tuple[RecordBlock, Any]) -> Columns:
        # the iWARP reassembly follows TCP streams across blocks: it runs here, in block order
        blk, fut = item
        cols: Columns = fut.result()
        fill_iwarp(blk, cols, tracker)
        return cols

    from concurrent.futures import ProcessPoolExecutor  # lazy: only parallel reads need it (start-up, memory)

    with ProcessPoolExecutor(workers) as pool:
        futs: list[tuple[RecordBlock, Any]] = []
        for blk in record_blocks(p, block_bytes):
            if not _ethernet_only(blk):
                for _b, fu in futs:
                    fu.cancel()
                return columns_from_packets(p)
            futs.append((blk, pool.submit(decode_block, blk, verify_icrc=verify_icrc)))
            if len(futs) > 2 * workers:  # bounded: do not read ahead of the workers
                parts.append(done(futs.pop(0)))
        parts.extend(done(f) for f in futs)
    out = Columns.concat(parts)
    out.path = p
    return out


def read_many(paths: Sequence[str | os.PathLike[str]], *, workers: int = 1,
              verify_icrc: bool = True) -> list[Columns]:
    """Columns of many files, one file per worker process."""
    if workers <= 1 or len(paths) <= 1:
        return [read_columns(p, verify_icrc=verify_icrc) for p in paths]

    from concurrent.futures import ProcessPoolExecutor  # lazy: only parallel reads need it (start-up, memory)

    with ProcessPoolExecutor(workers) as pool:
        return list(pool.map(_read_one, [(os.fspath(p), verify_icrc) for p in paths]))


def _read_one(arg: tuple[str, bool]) -> Columns:
    return read_columns(arg[0], verify_icrc=arg[1])


# ============================================================================ printing like tshark


def _fmt_values(col: Col, values: np.ndarray) -> list[str]:
    f = col.fmt
    if f == "dec" or f == "bool":
        return [str(v) for v in values.tolist()]
    if f.startswith("hex"):
        w = int(f[3:])
        return [f"0x{v:0{w}x}" for v in values.tolist()]
    if f.startswith("bytes"):
        w = int(f[5:])
        return [v.to_bytes(w, "big").hex() for v in values.tolist()]
    if f == "ipv4":
        return [f"{v >> 24}.{(v >> 16) & 255}.{(v >> 8) & 255}.{v & 255}" for v in values.tolist()]
    if f == "mac":
        return [v.to_bytes(6, "big").hex(":") for v in values.tolist()]
    if f == "ipv6":
        return [_ipv6_text(bytes(v).ljust(16, b"\0")) for v in values]
    raise AssertionError(f)  # pragma: no cover


def _ipv6_text(b: bytes) -> str:
    """IPv6 as Wireshark writes it: IPv4-mapped addresses end in dotted decimal (::ffff:10.0.0.1)."""
    if b[:12] == b"\0" * 10 + b"\xff\xff":
        return "::ffff:" + ".".join(str(x) for x in b[12:])
    return str(ipaddress.IPv6Address(b))


def format_column(cols: Columns, name: str, missing: str | None = "") -> list[Any]:
    """A column as tshark ``-T fields`` prints it, ``missing`` where the field is absent."""
    present = cols.present(name)
    if name == "frame.time_epoch":
        ns = cols.data["frame.time_ns"].tolist()
        vals = [f"{t // 1_000_000_000}.{t % 1_000_000_000:09d}" for t in ns]
    elif name in DERIVED:
        vals = [str(v) for v in cols[name].tolist()]
    else:
        vals = _fmt_values(COLUMN_BY_NAME[name], cols[name])
    if present.all():
        return vals
    pres = present.tolist()
    return [v if ok else missing for v, ok in zip(vals, pres, strict=True)]
