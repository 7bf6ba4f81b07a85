"""The columns of the columnar decoder: their Wireshark names, types and layers, the
:class:`Columns` table that holds them, and how tshark prints their values.

One concern: what a column *is*.  Reading records is :mod:`rdmalab.capture.pcapio`, turning
records into columns :mod:`rdmalab.capture.columnar_decode`, whole files
:mod:`rdmalab.capture.columnar`.

Columns (see :data:`COLUMNS`): integers as unsigned numpy arrays, addresses as integers
(``ip.src`` uint32, ``eth.src`` uint64, ``ipv6.src`` 16-byte strings), ``frame.time_epoch``
as float64 seconds (and ``frame.time_ns`` exact).  Which rows a column applies to is its
layer's mask (:meth:`Columns.present`): e.g. ``infiniband.reth.va`` only where a RETH exists.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rdmalab.capture.pcapio import NS_MAX, NS_MIN, record_ns
from rdmalab.capture.tcp_analysis import LABEL_FIELDS, TIME_FIELDS, VALUE_FIELDS
from rdmalab.wire.net import ETHERTYPE_ROCE, ROCEV2_PORT, TCP, IPv4
from rdmalab.wire.opcodes import opcode_name

WINDOW = 160


@dataclass(frozen=True, slots=True)
class Col:
    """One column: Wireshark name, numpy dtype, the layer whose rows it applies to, and how
    tshark prints it (``dec``, ``hexN`` with N digits, ``bool``, ``ipv4``, ``ipv6``, ``mac``,
    ``epoch``, ``str``, ``reltime``: a relative time in nanoseconds, written as signed seconds and nine digits)."""

    name: str
    dtype: str
    layer: str
    fmt: str = "dec"


#: the columns that number conversations (tcp.stream, udp.stream) and count TCP sequence numbers from each
#: direction's first (tcp.seq, tcp.ack, tcp.nxtseq), as tshark does by default
CONVERSATION_FIELDS = ("tcp.stream", "udp.stream", "tcp.seq", "tcp.ack", "tcp.nxtseq")

COLUMNS: tuple[Col, ...] = (
    Col("frame.number", "u8", "frame"),
    Col("frame.time_epoch", "f8", "frame", "epoch"),
    Col("frame.time_ns", "i8", "frame"),
    Col("frame.len", "u4", "frame"),
    Col("frame.cap_len", "u4", "frame"),
    Col("eth.dst", "u8", "eth", "mac"),
    Col("eth.src", "u8", "eth", "mac"),
    Col("eth.type", "u2", "eth.type", "hex4"),
    # a Linux cooked capture's header (v1 and v2; the interface index is v2's alone)
    Col("sll.pkttype", "u2", "sll"),
    Col("sll.hatype", "u2", "sll"),
    Col("sll.halen", "u2", "sll"),
    Col("sll.etype", "u2", "sll", "hex4"),
    Col("sll.ifindex", "u4", "sll.ifindex"),
    Col("ieee8021ad.id", "u2", "ieee8021ad"),
    Col("ieee8021ad.priority", "u1", "ieee8021ad"),
    Col("vlan.id", "u2", "vlan"),
    Col("vlan.priority", "u1", "vlan"),
    Col("ip.version", "u1", "ipver"),
    Col("ip.hdr_len", "u1", "ip"),
    # (a bogus header: "ip.front" its first 4 octets where its header length is 20 or more, "ip.rest"
    # the others where its total length is too: columnar_decode, as wire.net.IPv4Bogus, IPv4BogusLength)
    Col("ip.dsfield", "u1", "ip.front", "hex2"),
    Col("ip.dsfield.dscp", "u1", "ip.front"),
    Col("ip.dsfield.ecn", "u1", "ip.front"),
    Col("ip.len", "u2", "ip.front"),
    Col("ip.id", "u2", "ip.rest", "hex4"),
    Col("ip.flags", "u1", "ip.rest", "hex2"),
    *(Col(name, "u1", "ip.rest", "bool") for name, _bit in IPv4.FLAG_FIELDS),
    Col("ip.frag_offset", "u2", "ip.rest"),
    Col("ip.ttl", "u1", "ip.rest"),
    Col("ip.proto", "u1", "ip.rest"),
    Col("ip.checksum", "u2", "ip.rest", "hex4"),
    Col("ip.src", "u4", "ip.rest", "ipv4"),
    Col("ip.dst", "u4", "ip.rest", "ipv4"),
    Col("ipv6.tclass", "u1", "ipv6", "hex8"),
    Col("ipv6.flow", "u4", "ipv6", "hex6"),
    Col("ipv6.plen", "u2", "ipv6"),
    Col("ipv6.nxt", "u1", "ipv6"),
    Col("ipv6.hlim", "u1", "ipv6"),
    Col("ipv6.src", "S16", "ipv6", "ipv6"),
    Col("ipv6.dst", "S16", "ipv6", "ipv6"),
    Col("udp.srcport", "u2", "udp"),
    Col("udp.dstport", "u2", "udp"),
    Col("udp.length", "u2", "udp.length"),
    Col("udp.checksum", "u2", "udp.rest", "hex4"),
    Col("tcp.srcport", "u2", "tcp"),
    Col("tcp.dstport", "u2", "tcp"),
    Col("tcp.seq_raw", "u4", "tcp"),
    # (a bogus header length, under 20: "tcp.rest", the acknowledgment number, flags and window, absent)
    Col("tcp.ack_raw", "u4", "tcp.rest"),
    Col("tcp.hdr_len", "u1", "tcp"),
    Col("tcp.flags", "u2", "tcp.rest", "hex4"),
    *(Col(name, "u1", "tcp.rest", "bool") for name, _bit in TCP.FLAG_FIELDS),
    Col("tcp.window_size_value", "u2", "tcp.rest"),
    # the window scaled by the shift count of the sender's SYN (RFC 7323 2.2), as Wireshark
    # computes it; it needs the capture's handshakes in order, so it is only filled (and present)
    # where the decoder follows them (rdmalab.capture.render.TcpWindowScaling)
    Col("tcp.window_size", "u4", "tcp.window_size"),
    Col("tcp.len", "u4", "tcp.len"),  # (not for a header longer than its datagram: columnar_decode)
    # tshark's conversation numbers and relative sequence numbers: they need every frame before in order,
    # so they are only filled (and present) where the decoder follows the conversations
    # (rdmalab.capture.render.Conversations, columnar_decode.fill_conversations)
    *(Col(name, "u4", name) for name in CONVERSATION_FIELDS),
    # tshark's TCP sequence analysis (rdmalab.capture.tcp_analysis): each segment weighed against its
    # conversation's segments before it, in order, so only filled (and present) where the decoder follows
    # it (columnar_decode.fill_tcp_analysis); the flags are labels (1 where present); a duplicate ACK's
    # label occurs twice in tshark's tree (Columns.multi holds both)
    *(Col(name, "u1", name) for name in LABEL_FIELDS),
    Col("tcp.analysis.duplicate_ack_num", "u4", "tcp.analysis.duplicate_ack_num"),
    Col("tcp.analysis.duplicate_ack_frame", "u8", "tcp.analysis.duplicate_ack_frame"),
    # its values (a frame acknowledged, times in nanoseconds: tshark's relative times, "reltime")
    *(Col(name, "i8", name, "reltime") if name in TIME_FIELDS else Col(name, "u8" if name.endswith("frame") else "u4",
                                                                        name) for name in VALUE_FIELDS),
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
    Col("rdmalab.payload.len", "u4", "rdmalab.payload.len"),  # IB packets, and iWARP PDUs with a payload
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
    # Terminate (RFC 5040 7.3.5): the error type and code, under the name Wireshark gives each
    # layer's (packet-iwarp-ddp-rdmap.c), hexadecimal as tshark prints them
    _iw("iwarp_rdma.term_etype", "u1", "hex2"),
    _iw("iwarp_rdma.term_etype_rdma", "u1", "hex2"),
    _iw("iwarp_rdma.term_etype_ddp", "u1", "hex2"),
    _iw("iwarp_rdma.term_etype_llp", "u1", "hex2"),
    _iw("iwarp_rdma.term_errcode", "u1", "hex2"),
    _iw("iwarp_rdma.term_errcode_rdma", "u1", "hex2"),
    _iw("iwarp_rdma.term_errcode_ddp_tagged", "u1", "hex2"),
    _iw("iwarp_rdma.term_errcode_ddp_untagged", "u1", "hex2"),
    _iw("iwarp_rdma.term_errcode_llp", "u1", "hex2"),
    _iw("iwarp_rdma.term_rsvd", "u2", "hex4"),
    # MPA markers (RFC 5044 5): every marker of the frame is kept in Columns.multi
    _iw("iwarp_mpa.marker_res", "u2", "hex4"),
    _iw("iwarp_mpa.marker_fpduptr", "u2"),
    # RDMAP atomics (RFC 7306 5.2)
    _iw("iwarp_rdma.atomic.opcode", "u4"),
    _iw("iwarp_rdma.atomic.reserved", "u4"),
    _iw("iwarp_rdma.atomic.request_identifier", "u4"),
    _iw("iwarp_rdma.atomic.remote_stag", "u4"),
    _iw("iwarp_rdma.atomic.remote_tagged_offset", "u8"),
    _iw("iwarp_rdma.atomic.add_data", "u8"),
    _iw("iwarp_rdma.atomic.add_mask", "u8", "hex16"),
    _iw("iwarp_rdma.atomic.swap_data", "u8"),
    _iw("iwarp_rdma.atomic.swap_mask", "u8", "hex16"),
    _iw("iwarp_rdma.atomic.compare_data", "u8"),
    _iw("iwarp_rdma.atomic.compare_mask", "u8", "hex16"),
    _iw("iwarp_rdma.atomic.original_request_identifier", "u4"),
    _iw("iwarp_rdma.atomic.original_remote_data_value", "u8"),
    # ours: CRC32c status of the frame's first FPDU (1 good, 2 bad, 0 unchecked: no CRC
    # negotiated), and how many iWARP PDUs the frame completes
    Col("rdmalab.crc32c.ok", "i1", "rdmalab.crc32c"),
    Col("rdmalab.pdus", "u2", "iwarp"),
)
IWARP_LAYERS = ("iwarp", "iwarp_mpa", "iwarp_ddp", "iwarp_rdma", "rdmalab.crc32c")
#: Field-name prefixes that make the columnar decoder reassemble iWARP streams.
IWARP_PREFIXES = ("iwarp", "rdmalab.crc32c", "rdmalab.pdus", "rdmalab.payload.len")  # (payload.len: of FPDUs too)
COLUMNS = COLUMNS + IWARP_COLUMNS
COLUMN_BY_NAME: dict[str, Col] = {c.name: c for c in COLUMNS}
#: Derived columns, computed on demand from others (strings for people and filters).
DERIVED = ("rdmalab.icrc.status", "rdmalab.opcode", "rdmalab.encap", "rdmalab.crc32c.status")
COLUMN_NAMES: frozenset[str] = frozenset([*COLUMN_BY_NAME, *DERIVED])
#: The protocol names a display filter tests on the columns (``-Y udp``, ``tcp && !infiniband``):
#: :meth:`Columns.present` of each is the per-packet filter's (a protocol is there when a field of its is:
#: filter._eval's Exists), an ICMP error's quote included (its row's fields are the per-packet decoder's,
#: :attr:`Columns.multi`).  The others (``ip``, whose bogus headers of another version the columns do not
#: call IPv4; ``iwarp_mpa``, ``data`` ...) are read frame by frame, and so is a filter that reads a protocol's
#: bytes (``eth contains 52:54``: :func:`columns_answer`).
FILTER_PROTOCOLS: frozenset[str] = frozenset({"eth", "vlan", "sll", "ipv6", "udp", "tcp", "infiniband", "icmp",
                                               "icmpv6", "arp"})
#: tshark's times of a frame relative to others that a display filter reads (``frame.time_relative``: since the
#: capture's first frame; ``frame.time_delta``: since the frame read before it), in float seconds
#: (``frame.time_delta > 0.001``).  They are not a record's alone: a table has them once the frames before
#: it are counted (:meth:`Columns.stamp_times`), and a filter on the columns reads them then.
FILTER_TIMES = ("frame.time_relative", "frame.time_delta")


def columns_answer(flt: Any) -> bool:
    """Whether the columns answer a compiled display filter's fields: each a column, one of
    :data:`FILTER_TIMES` (the caller stamps them: :meth:`Columns.stamp_times`), or a protocol of
    :data:`FILTER_PROTOCOLS` whose presence alone it tests (not its bytes: ``udp contains 12``)."""
    names = set(flt.fields) - (FILTER_PROTOCOLS - set(flt.byte_protocols)) - set(FILTER_TIMES)
    return names <= COLUMN_NAMES


#: Layers that share rows with another one (a protocol name a filter may test).
_LAYER_ALIASES = {"infiniband.reth": "infiniband.reth", "infiniband": "infiniband.bth"}


# ============================================================================ the table


class Columns:
    """Decoded columns of ``n`` packets: ``cols[name]`` arrays and per-layer row masks."""

    def __init__(self, n: int, data: dict[str, np.ndarray], layers: dict[str, np.ndarray],
                 path: str | None = None, multi: dict[int, dict[str, Any]] | None = None) -> None:
        self.n = n
        self.data = data
        self.layers = layers
        self.path = path
        #: frames whose fields occur more than once, frame number -> those fields: a frame that
        #: completes more than one iWARP PDU (every iWARP field of the frame, a list where a field
        #: occurs more than once: what tshark prints with ``-E occurrence=a``), a duplicate ACK
        #: (``tcp.analysis.duplicate_ack``: ``[1, 1]``), an ICMP error that quotes a datagram (its
        #: per-packet fields, columnar_decode.fill_quotes); the columns hold each field's first occurrence
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
        if name in FILTER_TIMES:
            raise KeyError(f"{name}: these columns' frames were not counted from the frames before them "
                           "(Columns.stamp_times)")
        if name == "rdmalab.encap":  # as the per-packet decoder names a frame (Packet.encap)
            enc = np.full(self.n, "other", dtype=object)
            eth = self.layers["eth"] | self.layers["sll"]  # (a Linux cooked capture's: as the per-packet decoder names it)
            enc[eth] = "eth"
            enc[(~eth & (self.layers["ip"] | self.layers["ipv6"])) | self.layers["rawip"]] = "ip"  # a raw IP link type
            enc[self.layers["infiniband.bth"]] = "ib"  # native InfiniBand (RoCE below)
            enc[self.layers["tcp.len"]] = "tcp"  # (a header longer than its datagram: not a segment)
            # (RoCE whose BTH the capture cut is RoCE all the same, as the per-packet decoder names it)
            roce1 = (self.layers["eth"] & (self.data["eth.type"] == ETHERTYPE_ROCE)) | (
                self.layers["sll"] & (self.data["sll.etype"] == ETHERTYPE_ROCE))
            enc[self.layers["rocev1"] | roce1] = "rocev1"
            enc[self.layers["rocev2"] | (self.layers["udp"] & (self.data["udp.dstport"] == ROCEV2_PORT))] = "rocev2"
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
        if name == "rdmalab.encap" or name == "frame" or (name in FILTER_TIMES and name in self.data):
            return self.layers["frame"]  # (the times: once stamped, stamp_times)
        if name in self.layers:
            return self.layers[name]
        if name == "infiniband" and "infiniband.grh" in self.layers:  # (a RoCEv1 GRH whose BTH is cut: there too)
            anyib: np.ndarray = self.layers["infiniband.bth"] | self.layers["infiniband.grh"]
            return anyib
        alias = _LAYER_ALIASES.get(name)
        if alias is not None and alias in self.layers:
            return self.layers[alias]
        prefix = name + "."
        hits = [self.layers[c.layer] for c in COLUMNS if c.name.startswith(prefix)]
        if hits:
            anyhit: np.ndarray = np.logical_or.reduce(hits)
            return anyhit
        raise KeyError(name)

    def stamp_times(self, first: int, before: int) -> int:
        """Add :data:`FILTER_TIMES` to the table as a display filter reads them, float seconds from each
        frame's exact nanoseconds since the epoch (as :class:`rdmalab.capture.filter.FrameClock` counts them
        frame by frame): since ``first`` (the capture's first frame) and since the frame before (``before``
        for the first row: the frame read before the table's).  The time of the last row comes back (the
        next table's ``before``)."""
        ns = self.data["frame.time_ns"].astype(np.int64, copy=False)
        if not self.n:
            return before
        lo, hi = min(int(ns.min()), first, before), max(int(ns.max()), first, before)
        if lo <= NS_MIN or hi >= NS_MAX or hi - lo > NS_MAX:
            # a time past what an int64 holds (the per-packet path's float seconds), or a difference it does
            # not hold (damaged times): Python's integers, frame by frame
            exact = list(map(record_ns, self.data["frame.time_epoch"].tolist(), ns.tolist()))
            self.data["frame.time_relative"] = np.array([(x - first) / 1e9 for x in exact], dtype=np.float64)
            self.data["frame.time_delta"] = np.array(
                [(a - b) / 1e9 for a, b in zip(exact, [before, *exact[:-1]], strict=True)], dtype=np.float64)
            return exact[-1]
        prev = np.empty_like(ns)
        prev[0], prev[1:] = before, ns[:-1]
        self.data["frame.time_relative"] = (ns - first) / 1e9
        self.data["frame.time_delta"] = (ns - prev) / 1e9
        return int(ns[-1])

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


_LAYER_NAMES = sorted({c.layer for c in COLUMNS} | {"rocev1", "rocev2", "infiniband.reth", "rawip", "icmp", "icmpv6", "arp",
                                                    "udp.cut", *IWARP_LAYERS})


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
    if f == "ipv6":  # (each address written once: a capture's addresses repeat, and the text costs microseconds)
        uniq, inv = np.unique(values, return_inverse=True)
        texts = np.array([_ipv6_text(bytes(v).ljust(16, b"\0")) for v in uniq.tolist()] or [""], dtype=object)
        return texts[inv.reshape(-1)].tolist() if len(values) else []
    if f == "reltime":
        return [reltime_text(v) for v in values.tolist()]
    raise AssertionError(f)  # pragma: no cover


def reltime_text(ns: int) -> str:
    """tshark's text of a relative time (FT_RELATIVE_TIME) in nanoseconds: signed seconds, a dot and nine
    digits (``0.001500000``, ``-0.003000000``)."""
    a = abs(ns)
    return f"{'-' if ns < 0 else ''}{a // 1_000_000_000}.{a % 1_000_000_000:09d}"


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
        if present.all():
            return vals
        return [v if ok else missing for v, ok in zip(vals, present.tolist(), strict=True)]
    values = cols[name]
    every = present.all()
    if not every:  # (the rows that have the field, alone: the others' values are not the field's)
        at = np.flatnonzero(present)
        values = values[at]
    vals = [str(v) for v in values.tolist()] if name in DERIVED else _fmt_values(COLUMN_BY_NAME[name], values)
    if every:
        return vals
    out: list[Any] = [missing] * len(present)
    for i, v in zip(at.tolist(), vals, strict=True):
        out[i] = v
    return out


def link_header_length(layers: dict[str, np.ndarray]) -> np.ndarray:
    """Where each row's network header starts: after the Ethernet header and its tags (an 802.1ad
    S-TAG, an 802.1Q tag: four octets each, IEEE 802.1Q 9.6), or after a Linux cooked capture's
    header (16 octets, v2's 20: tcpdump.org LINKTYPE_LINUX_SLL and LINKTYPE_LINUX_SLL2), or at the
    record's first octet (raw IP, ``rawip``), as the columns' layers say."""
    eth = 14 + 4 * (layers["ieee8021ad"].astype(np.int64) + layers["vlan"].astype(np.int64))
    out: np.ndarray = np.where(layers["sll"], 16 + 4 * layers["sll.ifindex"].astype(np.int64),
                               np.where(layers["rawip"], 0, eth))
    return out

