"""``rdmalab decode`` one-line summaries from columns: the same text as the per-packet path, faster.

The per-packet path (:func:`rdmalab.capture.render.summary_line` over
:func:`rdmalab.capture.read`) builds a :class:`~rdmalab.capture.reader.CapturedPacket` per frame.
Here each block of records is decoded into columns (:mod:`rdmalab.capture.columnar_decode`) and
the lines of the frames the columns fully describe, well-formed RoCEv2 packets (which the
per-packet decoder would decode without a problem) and the ICMP errors that quote a datagram (a
host where nothing takes RoCEv2 answers each packet with one), are formatted from the columns with
numpy, a block of lines at a time.  The clean TCP segments (:mod:`rdmalab.capture.columnar_tcp`) are
formatted from the columns too, their windows and iWARP streams followed a block at a time
(:func:`_run_text`; the lines of segments that complete iWARP PDUs the tracker decoded are
written from those PDUs).  Every other frame (TCP that is not clean; RoCEv1; MADs; anything the
per-packet decoder would report a problem for; other link types) goes through the per-packet
path, in capture order, with the same TCP window, iWARP stream and echo pairing state (a block
written in a worker leaves its echo requests and replies to this process).  ``tests/capture/test_columnar_summary.py``
holds the two paths to the same bytes on every capture in ``captures/`` and on damaged ones.
"""

from __future__ import annotations

import ipaddress
import mmap
import os
import re
import sys
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, NamedTuple

import numpy as np

from rdmalab.capture.blockpool import blocks_in_workers, default_workers, parallel_capture, run_beside
from rdmalab.capture.columnar import _ethernet_only, source_routes
from rdmalab.capture.columnar_decode import (
    _TCP_INPUTS,
    CONVERSATION_INPUTS,
    _opt,
    columns_from_block,
    decode_block,
    erf_ethernet_view,
    fill_conversations,
    fill_tcp_analysis,
    fill_tcp_windows,
    tcp_flags,
    wants_conversations,
    wants_iwarp,
    wants_windows,
)
from rdmalab.capture.columnar_schema import FILTER_TIMES, Columns
from rdmalab.capture.columnar_tcp import (
    FLAG_TEXT,
    FPDU_HEADERS,
    FPDU_KINDS,
    READ_REQUEST_KIND,
    TCP_FIELDS,
    clean_tcp,
    fpdu_chains,
    frame_end,
    ip_end,
    tcp_offsets,
)
from rdmalab.capture.fields import frame_fields
from rdmalab.capture.fieldtext import (
    _OCTET_DOT32,
    Clock,
    _dec,
    _hex,
    _numeric_text,
    _strings,
    filter_mask,
    relative_matrix,
)
from rdmalab.capture.filter import compile_filter
from rdmalab.capture.iwarp import IwarpTracker
from rdmalab.capture.linktypes import COLUMNAR_LINKTYPES, LINKTYPE_ERF, erf_frame
from rdmalab.capture.pcapio import NS_MAX, NS_MIN, RecordBlock, record_blocks, record_ns
from rdmalab.capture.reader import RawRecord, decode_record
from rdmalab.capture.render import (
    NOT_A_FIELD,
    TCP_HEADING,
    Conversations,
    EchoPairs,
    TcpWindowScaling,
    echo_message,
    endpoints,
    format_summary,
    info,
    protocol,
    summary_line,
    time_text,
    window_shift_option,
)
from rdmalab.capture.tcp_analysis import (
    FLAG_FIELDS,
    TREE,
    VALUE_FIELDS,
    Later,
    _names,
    info_prefix,
    insert_json,
    insert_json_one,
)
from rdmalab.wire.control import (
    ARP,
    ARP_ETHERNET_IPV4,
    ARP_REPLY,
    ARP_REQUEST,
    ECHO_TYPES,
    ETHERTYPE_ARP,
    ICMP_ERRORS,
    ICMPV6_ERRORS,
    IPPROTO_ICMP,
    IPPROTO_ICMPV6,
    icmp_summary,
    icmpv6_summary,
)
from rdmalab.wire.errors import DecodeError
from rdmalab.wire.ib import AETH, Transport
from rdmalab.wire.iwarp import DDP_UNTAGGED_SIZE
from rdmalab.wire.mad import GSI_QPN
from rdmalab.wire.mpa import MPA_HEADER_SIZE
from rdmalab.wire.net import (
    ETHERTYPE_IPV4,
    ETHERTYPE_IPV6,
    ETHERTYPE_QINQ,
    ETHERTYPE_ROCE,
    ETHERTYPE_VLAN,
    IPPROTO_TCP,
    IPPROTO_UDP,
    IPV6_EXTENSIONS,
    MAX_8023_LENGTH,
    MIN_ETHERTYPE,
    ROCEV2_PORT,
    TCP,
)
from rdmalab.wire.opcodes import OPCODES, opcode_name
from rdmalab.wire.pfc import ETHERTYPE_MAC_CONTROL
from rdmalab.wire.rdmap import DDPTagged, DDPUntagged, ReadRequest, rdmap_opcode_name

_PAYLOAD = np.zeros(256, dtype=bool)
for _code, _info in OPCODES.items():
    _PAYLOAD[_code] = bool(_info.payload)
_KNOWN = np.zeros(256, dtype=bool)
_KNOWN[list(OPCODES)] = True
_SYNDROME = [AETH(reserved=s >> 7, type=(s >> 5) & 3, value=s & 31).syndrome_text() for s in range(256)]


def _fast_rows(blk: RecordBlock, c: Columns) -> np.ndarray:
    """Rows whose summary the columns fully give: RoCEv2 packets the per-packet decoder reads
    without a problem (the checks of rdmalab.wire.frame / rdmalab.wire.packet, as masks)."""
    d, L = c.data, c.layers
    cap = blk.caplen
    v4, v6 = L["ip"], L["ipv6"]
    l3, l4 = tcp_offsets(c)
    end = ip_end(c, l3)
    udplen = d["udp.length"].astype(np.int64)
    ok = L["rocev2"] & (v4 | v6) & np.isin(blk.linktype, COLUMNAR_LINKTYPES)
    ok &= ~(v4 & ((d["ip.flags"] & 1) != 0))  # a fragment
    ok &= (end <= cap) & (end <= frame_end(blk, c))  # IP length within the capture and the frame (else: a problem)
    ok &= (udplen >= 8) & (l4 + udplen <= end)
    op = d["infiniband.bth.opcode"]
    ok &= _KNOWN[op] & (d["infiniband.bth.tver"] == 0) & L["infiniband.crc"]
    # the payload the opcode allows: none, or at least the pad (IBA Vol 1 9.2, table 38)
    body = (l4 + udplen - 4) - (l4 + 8 + 12 + _opt()["extlen"][op].astype(np.int64))  # before the ICRC
    ok &= body >= 0
    ok &= np.where(_PAYLOAD[op], d["infiniband.bth.padcnt"].astype(np.int64) <= body, body == 0)
    ok &= ~(L["infiniband.aeth"] & (((d["infiniband.aeth.syndrome"] >> 5) & 3) == 2))  # reserved AETH type
    # datagrams to or from QP0/QP1 carry MADs (rdmalab.wire.mad.carries_mad): per packet
    ud = (op >> 5) == int(Transport.UD)
    ok &= ~(ud & ((d["infiniband.bth.destqp"] <= GSI_QPN) | (d["infiniband.deth.srcqp"] <= GSI_QPN)))
    result: np.ndarray = ok
    return result


def _quoting_rows(blk: RecordBlock, c: Columns) -> np.ndarray:
    """Rows that are ICMP errors (RFC 792: destination unreachable, source quench, redirect, time
    exceeded, parameter problem) or ICMPv6 errors (RFC 4443 2.1: types 1 to 4) quoting a datagram,
    whose line the columns fully give.  The per-packet line of such a frame is its link and IP
    headers' and its message's type and code (:func:`rdmalab.wire.control.icmp_summary`): the quote's
    own problems are never the frame's (:func:`rdmalab.wire.frame._quoted`).  So the rows here are
    those the per-packet decoder reads to the ICMP header without a problem: not a fragment, the IP
    length within the capture, the ICMP header of an IPv4 datagram or straight after the IPv6
    header, and a quote after it (as :func:`rdmalab.wire.frame._ip` takes one)."""
    d, L = c.data, c.layers
    v4, v6 = L["ip.rest"], L["ipv6"]
    l3, l4 = tcp_offsets(c)
    end = ip_end(c, l3)
    ok = (v4 | v6) & np.isin(blk.linktype, COLUMNAR_LINKTYPES)
    ok &= ~(v4 & (((d["ip.flags"] & 1) != 0) | (d["ip.frag_offset"] != 0)))
    ok &= np.where(v6, d["ipv6.nxt"] == IPPROTO_ICMPV6, d["ip.proto"] == IPPROTO_ICMP)
    ok &= (end <= blk.caplen) & (end <= frame_end(blk, c)) & (l4 + 8 < end)
    rows = np.flatnonzero(ok)
    kind = np.frombuffer(blk.buf, dtype=np.uint8)[blk.offset[rows] + l4[rows]]
    ok[rows] = np.where(v6[rows], np.isin(kind, _ICMPV6_ERRORS), np.isin(kind, _ICMP_ERRORS))
    result: np.ndarray = ok
    return result


_ICMP_ERRORS, _ICMPV6_ERRORS = sorted(ICMP_ERRORS), sorted(ICMPV6_ERRORS)


def _quoting_text(blk: RecordBlock, c: Columns, rows: np.ndarray, t0: int) -> tuple[np.ndarray, bytes, np.ndarray]:
    """The lines of the ICMP errors ``rows`` (:func:`_quoting_rows`) as a source for :func:`_merge`:
    the info of each kind of message (its version, type and code) written once."""
    n = len(rows)
    six = c.layers["ipv6"][rows]
    _l3, l4 = tcp_offsets(c)
    buf = np.frombuffer(blk.buf, dtype=np.uint8)
    at = blk.offset[rows] + l4[rows]
    key = six.astype(np.int64) << 16 | buf[at].astype(np.int64) << 8 | buf[at + 1]
    kinds, inv = np.unique(key, return_inverse=True)
    names, infos = [], []
    for k in kinds.tolist():
        msg = bytes([(k >> 8) & 0xFF, k & 0xFF]) + bytes(6)
        names.append(f" {'ICMPv6' if k >> 16 else 'ICMP':<10} ")
        infos.append(icmpv6_summary(msg, 0) if k >> 16 else icmp_summary(msg, None))
    proto, info_text = _strings(names), _strings(infos)
    return _lines(rows, np.hstack([_lead(blk, c, rows, t0), proto[inv], _length(blk, rows), info_text[inv],
                                   _const("\n", n)]))


# The frames that carry nothing the lab decodes further, whose line is the same function of a few octets
# whatever comes before them: a UDP datagram to a port other than RoCEv2's, an IP datagram of a protocol
# the decoder does not read (neither ICMP, TCP nor UDP), an Ethernet frame of an EtherType it does not read
# (LLDP, STP ...), an ARP request or reply for Ethernet and IPv4, and an ICMP or ICMPv6 message that is
# neither an error (:func:`_quoting_rows`) nor an echo (paired in order: EchoPairs).  A real capture holds them beside its
# RDMA traffic (name resolution, discovery, neighbours): each different, the per-packet decoder's memo of
# frames seen (_SEEN) does not help them.

#: the kinds of :func:`_plain_rows`
_UDP, _IP_OTHER, _ETH_OTHER, _ARP, _ICMP, _ECHO = 1, 2, 3, 4, 5, 6
#: ICMP and ICMPv6 types that are errors (:func:`_quoting_rows`), and that are echoes (paired in order)
_ICMP_ERROR = np.zeros(256, dtype=bool), np.zeros(256, dtype=bool)
_ICMP_ERROR[0][sorted(ICMP_ERRORS)] = True
_ICMP_ERROR[1][sorted(ICMPV6_ERRORS)] = True
_ICMP_ECHO = np.zeros(256, dtype=bool), np.zeros(256, dtype=bool)
_ICMP_ECHO[0][list(ECHO_TYPES[4])] = True
_ICMP_ECHO[1][list(ECHO_TYPES[6])] = True
#: EtherTypes the per-packet decoder reads what follows of (wire.frame._after_ethertype); any other's
#: octets are the frame's payload
_READ_ETHERTYPES = (ETHERTYPE_IPV4, ETHERTYPE_IPV6, ETHERTYPE_ARP, ETHERTYPE_ROCE, ETHERTYPE_VLAN, ETHERTYPE_QINQ,
                    ETHERTYPE_MAC_CONTROL)
#: IP protocols the per-packet decoder reads (wire.frame._ip), and IPv6's extension headers
_READ_PROTOCOLS = sorted({IPPROTO_ICMP, IPPROTO_ICMPV6, IPPROTO_TCP, IPPROTO_UDP, *IPV6_EXTENSIONS})
_ARP_FIXED = np.frombuffer(ARP_ETHERNET_IPV4, dtype=np.uint8)


def _plain_rows(blk: RecordBlock, c: Columns) -> np.ndarray:
    """The kind of each row (0: none) whose line the columns give as the per-packet decoder writes it
    (:func:`_plain_text`), read by it without a problem: a UDP datagram not to RoCEv2's port, within the
    capture and within its IP datagram; a datagram of another protocol (not ICMP, TCP or UDP, no IPv6
    extension header), within the capture; an ICMP or ICMPv6 message of 4 octets or more, not an error,
    within the capture (an echo request or reply: :data:`_ECHO`, paired in order); an Ethernet frame of an EtherType the decoder does not read (after
    the columns' tags); an ARP packet for Ethernet and IPv4, whole.  Never a fragment."""
    d, L = c.data, c.layers
    n = len(blk)
    kind = np.zeros(n, dtype=np.int8)
    if not n:
        return kind
    cap = blk.caplen.astype(np.int64)
    link = np.isin(blk.linktype, COLUMNAR_LINKTYPES) & (L["eth"] | L["sll"] | L["rawip"])
    v4, v6 = L["ip.rest"], L["ipv6"]
    l3, l4 = tcp_offsets(c)
    end = ip_end(c, l3)
    whole = link & (v4 | v6) & (end <= cap) & (end <= frame_end(blk, c))
    whole &= ~(v4 & (((d["ip.flags"] & 1) != 0) | (d["ip.frag_offset"] != 0) | (d["ip.len"] < d["ip.hdr_len"])))
    udplen = d["udp.length"].astype(np.int64)
    udp = whole & L["udp"] & ~L["rocev2"] & (d["udp.dstport"] != ROCEV2_PORT) & (udplen >= 8) & (l4 + udplen <= end)
    proto = np.where(v6, d["ipv6.nxt"], d["ip.proto"])
    other = whole & ~np.isin(proto, _READ_PROTOCOLS) & (l4 <= end)
    kind[udp] = _UDP
    kind[other] = _IP_OTHER
    icmp = np.flatnonzero(whole & np.isin(proto, (IPPROTO_ICMP, IPPROTO_ICMPV6)) & (l4 + 4 <= end))
    if len(icmp):
        buf = np.frombuffer(blk.buf, dtype=np.uint8)
        msg_type = buf[blk.offset[icmp] + l4[icmp]]
        six = proto[icmp] == IPPROTO_ICMPV6
        echo = np.where(six, _ICMP_ECHO[1][msg_type], _ICMP_ECHO[0][msg_type])
        error = np.where(six, _ICMP_ERROR[1][msg_type], _ICMP_ERROR[0][msg_type])
        # (an echo of fewer than 8 octets has no identifier: wire.control.decode_icmp, no pair either)
        paired = echo & (l4[icmp] + 8 <= end[icmp])
        kind[icmp[~error & ~paired]] = _ICMP
        kind[icmp[paired]] = _ECHO
    # the EtherType after the tags (a raw IP record has none): read where the network header starts
    eth = L["eth"] & (cap >= l3)
    rows = np.flatnonzero(eth & ~(v4 | v6))
    if len(rows):
        buf = np.frombuffer(blk.buf, dtype=np.uint8)
        at = blk.offset[rows] + l3[rows]
        etype = buf[at - 2].astype(np.int64) << 8 | buf[at - 1]
        # (a length, not a type, or neither: left to the decoder, which bounds the LLC PDU by it. After the
        # addresses 0 is a type; after an 802.1Q tag anything up to 1500 is a length; after an 802.1ad tag
        # everything is a type: wire.frame._eth, _after_ethertype)
        vlan, qinq = L["vlan"][rows], L["ieee8021ad"][rows]
        typed = np.where(vlan, etype > MAX_8023_LENGTH, qinq | (etype >= MIN_ETHERTYPE) | (etype == 0))
        kind[rows[~np.isin(etype, _READ_ETHERTYPES) & typed]] = _ETH_OTHER
        arp = rows[(etype == ETHERTYPE_ARP) & (cap[rows] >= l3[rows] + ARP.LAYOUT.size)]
        if len(arp):
            at = blk.offset[arp] + l3[arp]
            fixed = (buf[at[:, None] + np.arange(len(_ARP_FIXED))] == _ARP_FIXED).all(axis=1)
            kind[arp[fixed]] = _ARP
    return kind


def _be_words(buf: np.ndarray, at: np.ndarray, size: int) -> np.ndarray:
    """The big-endian integers of ``size`` octets (8 at most) at each of the offsets ``at`` in ``buf`` (uint8)."""
    v = np.zeros(len(at), dtype=np.uint64)
    for b in range(size):
        v = v << np.uint64(8) | buf[at + b].astype(np.uint64)
    return v


def _where_text(parts: list[np.ndarray], n: int, where: np.ndarray, *pieces: np.ndarray | str) -> None:
    """Append to ``parts`` (byte matrices of ``n`` rows) the ``pieces`` side by side on the rows ``where``, and
    nothing on the others."""
    if where.any():
        m = np.hstack([_const(p, n) if isinstance(p, str) else p for p in pieces])
        if not where.all():
            m[~where] = 0
        parts.append(m)


def _frame_words(blk: RecordBlock, rows: np.ndarray, at: np.ndarray | int, size: int, fmt: str) -> np.ndarray:
    """The ``size`` octets at octet ``at`` of the frames ``rows``, as the column format ``fmt`` writes them
    (``mac``, ``ipv4``: :func:`rdmalab.capture.fieldtext._numeric_text`)."""
    return _numeric_text(_be_words(np.frombuffer(blk.buf, dtype=np.uint8), blk.offset[rows] + at, size), fmt)


def _arp_info(blk: RecordBlock, rows: np.ndarray, l3: np.ndarray) -> np.ndarray:
    """What the ARP packets at ``l3`` in the frames ``rows`` ask or answer, as
    :meth:`rdmalab.wire.control.ARP.summary` words it (tshark's packet-arp.c)."""
    n = len(rows)
    buf = np.frombuffer(blk.buf, dtype=np.uint8)
    at = blk.offset[rows] + l3

    def value(name: str) -> np.ndarray:
        f = ARP.LAYOUT.field(name)
        return _be_words(buf, at + f.byte_start, f.bits // 8)

    def words(name: str, fmt: str) -> np.ndarray:
        f = ARP.LAYOUT.field(name)
        return _frame_words(blk, rows, l3 + f.byte_start, f.bits // 8, fmt)

    op, spa, tpa, tha = value("opcode"), value("src_ip"), value("dst_ip"), value("dst_hw")
    src_ip, dst_ip, src_hw = words("src_ip", "ipv4"), words("dst_ip", "ipv4"), words("src_hw", "mac")
    request, reply, same = op == ARP_REQUEST, op == ARP_REPLY, spa == tpa
    parts: list[np.ndarray] = []
    text = partial(_where_text, parts, n)

    probe = request & (spa == 0)
    asks = request & ~probe
    text(probe | (asks & ~same), "Who has ", dst_ip, "?")
    text(probe, " (ARP Probe)")
    text(asks & ~same, " Tell ", src_ip)
    text(asks & same & (tha == 0), "ARP Announcement for ", src_ip)
    text(asks & same & (tha != 0), "Gratuitous ARP for ", src_ip, " (Request)")
    text(reply & same, "Gratuitous ARP for ", src_ip, " (Reply)")
    text(reply & ~same, src_ip, " is at ", src_hw)
    text(~(request | reply), "ARP opcode ", _dec(op))
    return np.hstack(parts)


def _icmp_infos(blk: RecordBlock, c: Columns, rows: np.ndarray, l3: np.ndarray, l4: np.ndarray,
                end: np.ndarray) -> list[str]:
    """The Info of the ICMP and ICMPv6 messages of ``rows`` (:data:`_ICMP`), from their type on (``l4``)
    to their datagram's end (``end``), as the per-packet decoder says them
    (:func:`~rdmalab.wire.control.icmp_summary` with the TTL of an IPv4 datagram,
    :func:`~rdmalab.wire.control.icmpv6_summary` with its TTL or hop limit); a message seen before in
    the block said once."""
    d = c.data
    v6 = c.layers["ipv6"][rows]
    six = (np.where(v6, d["ipv6.nxt"][rows], d["ip.proto"][rows]) == IPPROTO_ICMPV6).tolist()
    at = blk.offset[rows]
    hops = np.frombuffer(blk.buf, dtype=np.uint8)[at + l3 + np.where(v6, 7, 8)].tolist()
    buf = blk.buf
    said: dict[tuple[bool, bool, int, bytes], str] = {}
    out = []
    for ipv6, icmpv6, hop, lo, hi in zip(v6.tolist(), six, hops, (at + l4).tolist(), (at + end).tolist(), strict=True):
        key = (ipv6, icmpv6, hop, bytes(buf[lo:hi]))
        text = said.get(key)
        if text is None:
            msg = key[3]
            text = said[key] = icmpv6_summary(msg, hop) if icmpv6 else icmp_summary(msg, None if ipv6 else hop)
        out.append(text)
    return out


def _plain_text(blk: RecordBlock, c: Columns, rows: np.ndarray, kinds: np.ndarray, t0: int,
                shown: np.ndarray | None,
                ) -> tuple[tuple[np.ndarray, bytes, np.ndarray], np.ndarray, list[tuple[int, _Echo]]]:
    """The lines of ``rows`` (their kinds ``kinds``: :func:`_plain_rows`; those a display filter shows,
    ``shown``, None: all) as a source for :func:`_merge`, which of ``rows`` are left to the per-packet
    decoder, and the echoes among them (their rows and :class:`_Echo`: paired in order by the caller).  A frame's layers, and so its protocol column and the names
    its Info lists, follow from its link type, tags, IP version and kind alone: one frame of each such
    shape is decoded per packet, which gives them, and a shape whose frame the decoder reads otherwise than
    the columns do (a problem, another protocol) is left to it whole."""
    L = c.layers
    l3, l4 = tcp_offsets(c)
    v6 = L["ipv6"][rows]
    # (the FCS a capture says its frames keep: where a frame's payload ends; ICMPv6 or ICMP, whatever the IP
    # version: the protocol column)
    icmpv6 = np.where(v6, c.data["ipv6.nxt"][rows], c.data["ip.proto"][rows]) == IPPROTO_ICMPV6
    shape = ((blk.fcs_lens()[rows].astype(np.int64) + 1) << 48 | blk.linktype[rows].astype(np.int64) << 16
             | L["ieee8021ad"][rows].astype(np.int64) << 12
             | L["vlan"][rows].astype(np.int64) << 11 | L["sll.ifindex"][rows].astype(np.int64) << 10
             | v6.astype(np.int64) << 8 | icmpv6.astype(np.int64) << 9 | kinds)
    shapes, first, inv = np.unique(shape, return_index=True, return_inverse=True)
    inv = inv.reshape(-1)
    d = c.data
    size = np.select([kinds == _UDP, kinds == _IP_OTHER, kinds == _ETH_OTHER],
                     [d["udp.length"][rows].astype(np.int64) - 8, ip_end(c, l3)[rows] - l4[rows],
                      blk.caplen[rows].astype(np.int64) - l3[rows]], 0)
    protos, names, good = [], [], np.ones(len(shapes), dtype=bool)
    secs, ifs, digits = blk.seconds(), blk.interfaces(), blk.time_digits()
    for i, j in enumerate(rows[first].tolist()):
        off, cap = int(blk.offset[j]), int(blk.caplen[j])
        cp = decode_record(RawRecord(blk.first + j, float(secs[j]), int(blk.linktype[j]), bytes(blk.buf[off:off + cap]),
                                     int(blk.wirelen[j]), int(ifs[j]), int(blk.ts_ns[j]), int(digits[j]),
                                     int(blk.fcs_lens()[j])))
        pkt = cp.packet
        layers = " / ".join(layer.name for layer in pkt.layers if not layer.header.PSEUDO)
        said = info(cp)
        n = int(size[first[i]])
        if shapes[i] & 0xFF in (_ARP, _ICMP, _ECHO):
            ok = pkt.info is not None and said == pkt.info
        else:
            ok = said == layers + (f" ({n} bytes)" if n else "") and pkt.payload_length == n
        good[i] = ok and not pkt.problems and pkt.encap not in ("tcp", "rocev2", "rocev1") and not pkt.ip_fragment
        protos.append(f" {protocol(cp):<10} ")
        names.append(layers)
    left = ~good[inv]
    # the echoes: each paired in order by the caller, shown or not (as the per-packet path feeds EchoPairs)
    echo = np.flatnonzero(~left & (kinds == _ECHO))
    echoes: list[tuple[int, _Echo]] = []
    if len(echo):
        on = np.ones(len(echo), dtype=bool) if shown is None else shown[echo]
        echoes = [(j, _Echo(blk.first + j, seen, *key)) for j, seen, key in
                  zip(rows[echo].tolist(), on.tolist(), _echo_keys(blk, c, rows[echo], l4[rows[echo]]), strict=True)]
    keep = ~left if shown is None else ~left & shown
    rows, kinds, inv, size = rows[keep], kinds[keep], inv[keep], size[keep]
    n = len(rows)
    src, dst = np.zeros((n, 1), dtype=np.uint8), np.zeros((n, 1), dtype=np.uint8)
    on_ip = np.isin(kinds, (_UDP, _IP_OTHER, _ICMP, _ECHO))
    if on_ip.any():
        src, dst = _addresses(c, rows, "src"), _addresses(c, rows, "dst")
    mac = np.flatnonzero(~on_ip)
    if len(mac):
        src, dst = (np.hstack([m, np.zeros((n, max(0, 17 - m.shape[1])), dtype=np.uint8)]) for m in (src, dst))
        src[mac] = 0
        dst[mac] = 0
        src[mac, :17] = _frame_words(blk, rows[mac], 6, 6, "mac")
        dst[mac, :17] = _frame_words(blk, rows[mac], 0, 6, "mac")
    info_text = _strings(names)[inv]
    arp = np.flatnonzero(kinds == _ARP)
    if len(arp):
        asked = _arp_info(blk, rows[arp], l3[rows[arp]])
        w = max(info_text.shape[1], asked.shape[1])
        info_text = np.hstack([info_text, np.zeros((n, w - info_text.shape[1]), dtype=np.uint8)])
        info_text[arp] = 0
        info_text[arp, :asked.shape[1]] = asked
    icmp = np.flatnonzero((kinds == _ICMP) | (kinds == _ECHO))
    if len(icmp):
        words = _strings(_icmp_infos(blk, c, rows[icmp], l3[rows[icmp]], l4[rows[icmp]], ip_end(c, l3)[rows[icmp]]))
        w = max(info_text.shape[1], words.shape[1])
        info_text = np.hstack([info_text, np.zeros((n, w - info_text.shape[1]), dtype=np.uint8)])
        info_text[icmp] = 0
        info_text[icmp, :words.shape[1]] = words
    sized = np.hstack([_const(" (", n), _dec(np.maximum(size, 0).astype(np.uint64)), _const(" bytes)", n)])
    sized[(size <= 0) | (kinds == _ARP) | (kinds == _ICMP) | (kinds == _ECHO)] = 0
    lines = np.hstack([_lead(blk, c, rows, t0, src, dst), _strings(protos)[inv], _length(blk, rows), info_text, sized,
                       _const("\n", n)])
    return _lines(rows, lines), left, echoes


class _Echo(NamedTuple):
    """An echo request or reply a block wrote from its columns (:data:`_ECHO`): its frame, whether its
    line is shown (a display filter may drop it: it is paired all the same) and what
    :meth:`rdmalab.capture.render.EchoPairs.pair` pairs it by.  The loop that follows the blocks in order
    pairs it and says a reply's request after its Info, as :func:`rdmalab.capture.render.info` does
    (:func:`_paired`)."""

    frame: int
    shown: bool
    version: int
    kind: int
    ident_seq: int
    checksum: int
    src: int
    dst: int


def _echo_keys(blk: RecordBlock, c: Columns, rows: np.ndarray, l4: np.ndarray) -> list[tuple[int, ...]]:
    """(ICMP version, type, identifier and sequence number, checksum, source, destination) of the echoes
    ``rows``, their ICMP header at ``l4``, as :func:`rdmalab.capture.render.echo_message` and the IP header
    give them (addresses as integers)."""
    d = c.data
    v6 = c.layers["ipv6"][rows]
    version = np.where(np.where(v6, d["ipv6.nxt"][rows], d["ip.proto"][rows]) == IPPROTO_ICMPV6, 6, 4)
    buf = np.frombuffer(blk.buf, dtype=np.uint8)
    at = blk.offset[rows] + l4

    def be(off: int, size: int) -> list[int]:
        out: list[int] = _be_words(buf, at + off, size).tolist()
        return out

    src: list[int] = d["ip.src"][rows].tolist()
    dst: list[int] = d["ip.dst"][rows].tolist()
    for i in np.flatnonzero(v6).tolist():
        src[i] = int.from_bytes(bytes(d["ipv6.src"][rows[i]]).ljust(16, b"\0"), "big")
        dst[i] = int.from_bytes(bytes(d["ipv6.dst"][rows[i]]).ljust(16, b"\0"), "big")
    return list(zip(version.tolist(), buf[at].tolist(), be(4, 4), be(2, 2), src, dst, strict=True))


# ---------------------------------------------------------------------------- text as byte matrices
# Each piece of a line is an (n, width) matrix of bytes in which 0 means "no character"; the
# pieces are laid side by side and the zeros dropped in one pass (as rdmalab.capture.fieldtext
# does for -T fields).  The layout is render.format_summary's:
#   f"{frame:5d} {t:11.6f} {src:>15} → {dst:<15} {proto:<10} {length:5d} {info}"
# and the info text rdmalab.wire.packet.Packet.summary's for a RoCE packet.


def _const(text: str, n: int) -> np.ndarray:
    row = np.frombuffer(text.encode(), dtype=np.uint8)
    return np.broadcast_to(row, (n, len(row)))


def _width(m: np.ndarray) -> np.ndarray:
    out: np.ndarray = np.count_nonzero(m, axis=1)
    return out


def _pad(m: np.ndarray, width: int) -> np.ndarray:
    """Spaces that right-align (put before) or left-align (put after) ``m`` in ``width`` characters."""
    short = np.maximum(width - _width(m), 0)
    table = _PADS.get(width)
    if table is None:
        table = _PADS[width] = np.where(np.arange(width)[None, :] < np.arange(width + 1)[:, None], 32, 0).astype(
            np.uint8)
    out: np.ndarray = table[short]
    return out


_PADS: dict[int, np.ndarray] = {}


def _varhex(v: np.ndarray) -> np.ndarray:
    """Hexadecimal without leading zeros (Python's ``%x``)."""
    top = int(v.max()) if len(v) else 0
    digits = max(1, (top.bit_length() + 3) // 4)
    m = _hex(v.astype(np.uint64), digits, prefix=False).copy()
    nz = m != ord("0")
    nz[:, -1] = True
    m[~np.logical_or.accumulate(nz, axis=1)] = 0
    return m


def _table(texts: list[str]) -> np.ndarray:
    """Strings as the rows of a byte matrix (0-padded), for look-ups by index."""
    w = max(1, max(len(t.encode()) for t in texts))
    out = np.zeros((len(texts), w), dtype=np.uint8)
    for i, t in enumerate(texts):
        b = t.encode()
        out[i, :len(b)] = np.frombuffer(b, dtype=np.uint8)
    return out


_OPNAMES = _table([opcode_name(i) for i in range(256)])
_SYNDROMES = _table(_SYNDROME)


def _seconds(rel: np.ndarray, digits: np.ndarray) -> np.ndarray:
    """:func:`~rdmalab.capture.render.time_text` of relative times in nanoseconds (int64), each to its
    frame's ``digits`` (:func:`~rdmalab.capture.fieldtext.relative_matrix`), right-aligned in 11 characters
    (0: no character).  A negative time (a frame before the first: appended captures) is its magnitude's
    text after a minus sign."""
    m = relative_matrix(rel, digits)
    return np.hstack([_pad(m, 11), m])


def _time_column(blk: RecordBlock, rows: np.ndarray, t0: int) -> np.ndarray:
    """The time column of the block's rows ``rows``: seconds since ``t0`` (ns) to each frame's precision
    (:func:`_seconds`); a time past what an int64 holds (years 1677 to 2262: a damaged timestamp), or a
    difference it does not hold, in Python's integers, as the per-packet path has them (``record_ns``)."""
    ns = blk.ts_ns[rows]
    digits = blk.time_digits()[rows]
    if not len(ns) or (NS_MIN < t0 < NS_MAX and int(ns.min()) > NS_MIN and int(ns.max()) < NS_MAX
                       and int(ns.max()) - t0 < NS_MAX and t0 - int(ns.min()) < NS_MAX):
        return _seconds(ns - t0, digits)
    texts = [time_text(record_ns(s, v) - t0, d) for s, v, d in
             zip(blk.seconds()[rows].tolist(), ns.tolist(), digits.tolist(), strict=True)]
    m = _strings(texts)
    return np.hstack([_pad(m, 11), m])


def _addresses(c: Columns, rows: np.ndarray, which: str) -> np.ndarray:
    v4 = c.data[f"ip.{which}"][rows]
    octets = v4.astype(">u4").view(np.uint8).reshape(len(v4), 4)
    m = _OCTET_DOT32[octets].view(np.uint8).reshape(len(v4), 16).copy()
    m[:, 15] = 0  # no dot after the last octet
    v6 = c.layers["ipv6"][rows]
    if v6.any():

        uniq, inv = np.unique(c.data[f"ipv6.{which}"][rows][v6], return_inverse=True)
        names = _table([str(ipaddress.IPv6Address(bytes(a).ljust(16, b"\0"))) for a in uniq.tolist()])
        w = max(16, names.shape[1])
        m = np.hstack([m, np.zeros((len(v4), w - 16), dtype=np.uint8)])
        m[v6] = 0
        m[np.flatnonzero(v6)[:, None], np.arange(names.shape[1])[None, :]] = names[inv]
    out: np.ndarray = m
    return out


class _Taken(dict[str, np.ndarray]):
    """The rows of the columns, taken when first asked for."""

    def __init__(self, data: dict[str, np.ndarray], rows: np.ndarray) -> None:
        super().__init__()
        self._data, self._rows = data, rows

    def __missing__(self, key: str) -> np.ndarray:
        v: np.ndarray = self._data[key][self._rows]
        self[key] = v
        return v


def _lead(blk: RecordBlock, c: Columns, rows: np.ndarray, t0: int, src: np.ndarray | None = None,
          dst: np.ndarray | None = None) -> np.ndarray:
    """The first columns of the lines of ``rows``: frame number, time, source and destination
    (render.format_summary's ``{frame:5d} {t:11.6f} {src:>15} → {dst:<15}``); the addresses the IP
    headers' unless given (byte matrices)."""
    n = len(rows)
    frame = _dec(c.data["frame.number"][rows])
    if src is None or dst is None:
        src, dst = _addresses(c, rows, "src"), _addresses(c, rows, "dst")
    out: np.ndarray = np.hstack([_pad(frame, 5), frame, _const(" ", n), _time_column(blk, rows, t0), _const(" ", n),
                                 _pad(src, 15), src, _const(" \u2192 ", n), dst, _pad(dst, 15)])
    return out


def _length(blk: RecordBlock, rows: np.ndarray) -> np.ndarray:
    """The length column of the lines of ``rows`` and the space after it (``{length:5d} ``): the frame's
    length on the wire, its captured length where the record has none."""
    wire = blk.wirelen[rows]
    length = _dec(np.where(wire != 0, wire, blk.caplen[rows]).astype(np.uint64))
    out: np.ndarray = np.hstack([_pad(length, 5), length, _const(" ", len(rows))])
    return out


def _column_text(blk: RecordBlock, c: Columns, rows: np.ndarray, t0: int) -> tuple[bytes, np.ndarray]:
    """The lines of ``rows`` (each ending in a newline) and where each starts in that text, formatted
    column by column."""
    d, L = c.data, c.layers
    n = len(rows)
    if n == 0:
        return b"", np.zeros(1, dtype=np.int64)
    get = _Taken(d, rows)
    has = {k: L[k][rows] for k in ("infiniband.reth", "infiniband.atomiceth", "infiniband.aeth",
                                   "infiniband.deth", "infiniband.immdt")}
    parts = [_lead(blk, c, rows, t0), _const(" RRoCE      ", n), _length(blk, rows), _OPNAMES[get["infiniband.bth.opcode"]],
             _const(" QP=0x", n), _hex(get["infiniband.bth.destqp"].astype(np.uint64), 6, prefix=False),
             _const(" PSN=", n), _dec(get["infiniband.bth.psn"])]

    seg = partial(_where_text, parts, n)  # (pieces of text that only some rows show)

    for name, word in (("infiniband.bth.a", " A"), ("infiniband.bth.se", " SE"), ("rdmalab.bth.fecn", " FECN"),
                       ("rdmalab.bth.becn", " BECN")):
        seg(get[name] != 0, word)
    if has["infiniband.reth"].any():
        seg(has["infiniband.reth"], " VA=0x", _varhex(get["infiniband.reth.va"]), " rkey=0x",
            _varhex(get["infiniband.reth.r_key"]), " len=", _dec(get["infiniband.reth.dmalen"]))
    if has["infiniband.atomiceth"].any():
        seg(has["infiniband.atomiceth"], " VA=0x", _varhex(get["infiniband.reth.va"]), " rkey=0x",
            _varhex(get["infiniband.reth.r_key"]), " swap/add=0x", _varhex(get["infiniband.atomiceth.swapdt"]),
            " cmp=0x", _varhex(get["infiniband.atomiceth.cmpdt"]))
    if has["infiniband.aeth"].any():
        seg(has["infiniband.aeth"], " [", _SYNDROMES[get["infiniband.aeth.syndrome"]], "] MSN=",
            _dec(get["infiniband.aeth.msn"]))
    if has["infiniband.deth"].any():
        seg(has["infiniband.deth"], " QKey=0x", _hex(get["infiniband.deth.q_key"].astype(np.uint64), 8, prefix=False),
            " SrcQP=0x", _hex(get["infiniband.deth.srcqp"].astype(np.uint64), 6, prefix=False))
    if has["infiniband.immdt"].any():
        seg(has["infiniband.immdt"], " Imm=0x", _hex(get["infiniband.immdt"].astype(np.uint64), 8, prefix=False))
    pay = get["rdmalab.payload.len"]
    seg(pay > 0, " payload=", _dec(pay))
    seg(get["rdmalab.icrc.ok"] == 2, " [BAD ICRC]")
    parts.append(_const("\n", n))
    m = np.hstack(parts)
    starts = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(_width(m), out=starts[1:])
    # bytes.translate deletes the 0 bytes in one C pass
    return m.tobytes().translate(None, b"\0"), starts


def tcp_text(blk: RecordBlock, c: Columns, rows: np.ndarray, t0: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each row (clean TCP segments: :func:`rdmalab.capture.columnar_tcp.clean_tcp`), its summary
    line up to ``Win=``, what follows the window (`` Len=N`` and a newline), as
    :func:`rdmalab.capture.render.summary_line` writes them, and the line of an iWARP frame up to its
    info: three byte matrices (0: no character), a row each."""
    n = len(rows)
    if n == 0:
        empty = np.zeros((0, 0), dtype=np.uint8)
        return empty, empty, empty
    get = _Taken(c.data, rows)
    sport, dport = _dec(get["tcp.srcport"]), _dec(get["tcp.dstport"])
    flags = get["tcp.flags"].astype(np.int64) & 0x1FF
    lead = _lead(blk, c, rows, t0)
    size = _length(blk, rows)
    iwarp = np.hstack([lead, _const(f" {'iWARP':<10} ", n), size])
    parts = [lead, _const(f" {'TCP':<10} ", n), size, sport, _const(" \u2192 ", n), dport, _const(" [", n),
             FLAG_TEXT[flags], _const("] Seq=", n), _dec(get["tcp.seq_raw"])]
    ack = (flags & TCP.ACK) != 0
    if ack.any():
        m = np.hstack([_const(" Ack=", n), _dec(get["tcp.ack_raw"])])
        if not ack.all():
            m[~ack] = 0
        parts.append(m)
    parts.append(_const(" Win=", n))
    tails = np.hstack([_const(" Len=", n), _dec(get["tcp.len"]), _const("\n", n)])
    return np.hstack(parts), tails, iwarp



# ---------------------------------------------------------------------------- lines from templates
# Most of a line takes few values in a capture: the addresses, the frame length, the opcode and
# QP, the flags, the AETH syndrome, the R_Key and DMA length, the Q_Key and source QP, the payload
# length, a bad ICRC.  The rows of a block are grouped by all of these at once (a 64-bit hash of
# them, each group checked field by field), each group's text is formatted once in Python, and
# every line is the group's literal pieces with the numbers that change from packet to packet
# (frame number, time, PSN, and after it the VA, swap/compare data, MSN and immediate data that
# packet carries, at most three of them) put between them:
#
#   frame time L0 PSN L1 X1 L2 X2 L3 X3 L4
#
# in rdmalab.wire.packet.Packet.summary's order; X1..X3 are the packet's own numbers after the
# PSN (an RDMA WRITE with immediate: VA, Imm; an atomic: VA, swap/add, compare; an ACK: MSN), and
# L1..L4 the text between them (empty past the last).  A block with too many groups (QPs or
# lengths that change with every packet) is formatted column by column (_column_text) instead.

_MIX = np.uint64(0x9E3779B97F4A7C15)


def _groups(keys: list[np.ndarray], most: int) -> tuple[np.ndarray, np.ndarray] | None:
    """Rows with equal values in every one of ``keys`` (uint64 arrays): (a row of each group, each
    row's group), or None when there are more than ``most`` groups or two groups share a hash."""
    h = np.zeros(len(keys[0]), dtype=np.uint64)
    for k in keys:
        h ^= k
        h *= _MIX  # wraps modulo 2**64, as a hash should
        h ^= h >> np.uint64(29)
    uniq, inv = np.unique(h, return_inverse=True)
    if len(uniq) > most:
        return None
    rep = np.empty(len(uniq), dtype=np.intp)
    rep[inv] = np.arange(len(h))
    for k in keys:  # a hash shared by two different keys: format the block column by column
        if not np.array_equal(k[rep][inv], k):
            return None
    return rep, inv


def _literal_table(texts: list[bytes]) -> np.ndarray:
    w = max((len(t) for t in texts), default=0)
    if w == 0:
        return np.zeros((len(texts), 0), dtype=np.uint8)
    return np.frombuffer(b"".join(t.ljust(w, b"\0") for t in texts), dtype=np.uint8).reshape(len(texts), w)


#: group key -> its literal pieces (L0..L6); bounded
_TEMPLATES: dict[tuple[int, ...], tuple[bytes, ...]] = {}
_FLAG_WORDS = [b"".join(w for bit, w in ((1, b" A"), (2, b" SE"), (4, b" FECN"), (8, b" BECN")) if f & bit)
               for f in range(16)]


def _template(src: str, dst: str, length: int, opcode: int, flags: int, bad: int, synd: int, has: int, qp: int,
              pay: int, rkey: int, dmalen: int, qkey: int, srcqp: int) -> tuple[bytes, ...]:
    """The literal pieces L0..L4 of one group's lines (see above); ``has`` the headers the opcode
    carries: 1 RETH, 2 AtomicETH, 4 AETH, 8 DETH, 16 ImmDt."""
    head = f" {src:>15} \u2192 {dst:<15} {'RRoCE':<10} {length:5d} {opcode_name(opcode)} QP=0x{qp:06x} PSN="
    segs = [head.encode()]
    cur = _FLAG_WORDS[flags].decode()
    if has & 1:
        segs.append((cur + " VA=0x").encode())
        cur = f" rkey=0x{rkey:x} len={dmalen}"
    if has & 2:
        segs.append((cur + " VA=0x").encode())
        segs.append(f" rkey=0x{rkey:x} swap/add=0x".encode())
        segs.append(b" cmp=0x")
        cur = ""
    if has & 4:
        segs.append((cur + f" [{_SYNDROME[synd]}] MSN=").encode())
        cur = ""
    if has & 8:
        cur += f" QKey=0x{qkey:08x} SrcQP=0x{srcqp:06x}"
    if has & 16:
        segs.append((cur + " Imm=0x").encode())
        cur = ""
    segs.append((cur + (f" payload={pay}" if pay else "") + (" [BAD ICRC]" if bad else "") + "\n").encode())
    return tuple(segs) + (b"",) * (5 - len(segs))


def _template_text(blk: RecordBlock, c: Columns, rows: np.ndarray, t0: int) -> bytes | None:
    """The lines of ``rows`` built from group templates, or None when the block has too many groups."""
    d, L = c.data, c.layers
    n = len(rows)
    get = _Taken(d, rows)
    u64 = np.uint64
    has_r, has_a = L["infiniband.reth"][rows], L["infiniband.atomiceth"][rows]
    has_k, has_d, has_i = L["infiniband.aeth"][rows], L["infiniband.deth"][rows], L["infiniband.immdt"][rows]
    if (has_r & has_a).any() or ((has_r | has_a) & has_k).any() or (has_a & has_i).any():
        return None  # no opcode carries these together; the layout above assumes it
    has = (has_r.astype(u64) | has_a.astype(u64) << u64(1) | has_k.astype(u64) << u64(2)
           | has_d.astype(u64) << u64(3) | has_i.astype(u64) << u64(4))
    v6 = L["ipv6"][rows]
    wire = blk.wirelen[rows]
    length = np.where(wire != 0, wire, blk.caplen[rows]).astype(u64)
    flags = (get["infiniband.bth.a"].astype(u64) | get["infiniband.bth.se"].astype(u64) << u64(1)
             | get["rdmalab.bth.fecn"].astype(u64) << u64(2) | get["rdmalab.bth.becn"].astype(u64) << u64(3))
    bad = (get["rdmalab.icrc.ok"] == 2).astype(u64)
    synd = np.where(has_k, get["infiniband.aeth.syndrome"], 0).astype(u64)
    opcode = get["infiniband.bth.opcode"].astype(u64)
    b = (length | opcode << u64(32) | flags << u64(40) | bad << u64(44) | synd << u64(45) | has << u64(53)
         | v6.astype(u64) << u64(58))
    qp = get["infiniband.bth.destqp"].astype(u64)
    pay = get["rdmalab.payload.len"].astype(u64)
    e = qp | pay << u64(24)
    has_va = has_r | has_a
    rkey = np.where(has_va, get["infiniband.reth.r_key"], 0).astype(u64)
    dmalen = np.where(has_r, get["infiniband.reth.dmalen"], 0).astype(u64)
    cc = rkey | dmalen << u64(32)
    qkey = np.where(has_d, get["infiniband.deth.q_key"], 0).astype(u64)
    srcqp = np.where(has_d, get["infiniband.deth.srcqp"], 0).astype(u64)
    dd = qkey | srcqp << u64(32)
    src4 = np.where(v6, 0, get["ip.src"]).astype(u64)
    dst4 = np.where(v6, 0, get["ip.dst"]).astype(u64)
    keys = [src4 << u64(32) | dst4, b, e, cc, dd]
    if v6.any():
        for end in ("ipv6.src", "ipv6.dst"):
            words = np.ascontiguousarray(get[end]).view(np.uint64).reshape(n, 2)
            keys += [np.where(v6, words[:, 0], 0), np.where(v6, words[:, 1], 0)]
    got = _groups(keys, max(64, n // _GROUPS_PER_ROW))
    if got is None:
        return None
    rep, inv = got
    # one template a group, formatted in Python (and remembered from block to block)
    vals = [k[rep].tolist() for k in keys]
    lit: list[list[bytes]] = [[] for _ in range(5)]
    v6_names: dict[bytes, str] = {}

    def ip6(a: bytes) -> str:
        text = v6_names.get(a)
        if text is None:

            text = v6_names[a] = str(ipaddress.IPv6Address(a))
        return text

    for key in zip(*vals, strict=True):
        t = _TEMPLATES.get(key)
        if t is None:
            addr, bb, ee, c2, d2 = key[:5]
            if (bb >> 58) & 1:
                s6 = key[5].to_bytes(8, sys.byteorder) + key[6].to_bytes(8, sys.byteorder)
                d6 = key[7].to_bytes(8, sys.byteorder) + key[8].to_bytes(8, sys.byteorder)
                src, dst = ip6(s6), ip6(d6)
            else:
                s, t4 = (addr >> 32) & 0xFFFFFFFF, addr & 0xFFFFFFFF
                src = f"{s >> 24}.{(s >> 16) & 255}.{(s >> 8) & 255}.{s & 255}"
                dst = f"{t4 >> 24}.{(t4 >> 16) & 255}.{(t4 >> 8) & 255}.{t4 & 255}"
            t = _template(src, dst, bb & 0xFFFFFFFF, (bb >> 32) & 255, (bb >> 40) & 15, (bb >> 44) & 1,
                          (bb >> 45) & 255, (bb >> 53) & 31, ee & 0xFFFFFF, ee >> 24, c2 & 0xFFFFFFFF, c2 >> 32,
                          d2 & 0xFFFFFFFF, d2 >> 32)
            if len(_TEMPLATES) >= 1 << 16:
                _TEMPLATES.clear()
            _TEMPLATES[key] = t
        for i in range(5):
            lit[i].append(t[i])
    tables = [_literal_table(x) for x in lit]
    # the numbers, each as a byte matrix (0: no character), for the rows that carry them
    fr = get["frame.number"]
    frame = _dec(fr, max(5, len(str(int(fr.max())))))
    tail = frame[:, -5:]
    tail[tail == 0] = 32  # %5d: spaces in front of a short number
    # X1..X3: where each number of a row goes
    imm_at = 1 + has_va.astype(np.int8) + 2 * has_a.astype(np.int8) + has_k.astype(np.int8)
    xs: list[list[tuple[np.ndarray, np.ndarray]]] = [[], [], []]
    va_rows = np.flatnonzero(has_va)
    if len(va_rows):
        xs[0].append((va_rows, _varhex(get["infiniband.reth.va"][va_rows])))
    at_rows = np.flatnonzero(has_a)
    if len(at_rows):
        xs[1].append((at_rows, _varhex(get["infiniband.atomiceth.swapdt"][at_rows])))
        xs[2].append((at_rows, _varhex(get["infiniband.atomiceth.cmpdt"][at_rows])))
    k_rows = np.flatnonzero(has_k)
    if len(k_rows):
        xs[0].append((k_rows, _dec(get["infiniband.aeth.msn"][k_rows])))
    i_rows = np.flatnonzero(has_i)
    if len(i_rows):
        imm = _hex(get["infiniband.immdt"][i_rows].astype(u64), 8, prefix=False)
        for x in (1, 2, 3):
            sel = imm_at[i_rows] == x
            if sel.any():
                xs[x - 1].append((i_rows[sel], imm[sel]))
    slots: list[tuple[np.ndarray | None, np.ndarray]] = [
        (None, frame), (None, _const(" ", n)), (None, _time_column(blk, rows, t0)), (None, tables[0][inv]),
        (None, _dec(get["infiniband.bth.psn"])), (None, tables[1][inv])]
    for x in range(3):
        w = max((m.shape[1] for _, m in xs[x]), default=0)
        if w:
            slots.append((None, np.zeros((0, w), dtype=np.uint8)))  # a slot wide enough for every kind
            slots += [(r, m) for r, m in xs[x]]
        slots.append((None, tables[2 + x][inv]))
    width = sum(m.shape[1] for r, m in slots if r is None)
    out = np.zeros((n, width), dtype=np.uint8)
    at = opened = 0  # where the next slot starts; where the last one started
    for which, m in slots:
        w = m.shape[1]
        if which is not None:  # rows of the number slot just opened
            out[which, opened:opened + w] = m
            continue
        if len(m):
            out[:, at:at + w] = m
        opened = at
        at += w
    # bytes.translate deletes the 0 bytes in one C pass
    text: bytes = out.tobytes().translate(None, b"\0")
    return text


def _fast_text(blk: RecordBlock, c: Columns, rows: np.ndarray, t0: int, starts: bool = True) -> tuple[bytes, np.ndarray | None]:
    """The lines of ``rows`` (each ending in a newline) and, when ``starts``, where each starts in that text."""
    if len(rows) == 0:
        return b"", np.zeros(1, dtype=np.int64)
    text = _template_text(blk, c, rows, t0) if _USE_TEMPLATES else None
    if text is None:
        return _column_text(blk, c, rows, t0)
    if not starts:
        return text, None
    nl = np.frombuffer(text, dtype=np.uint8) == 10
    at = np.zeros(len(rows) + 1, dtype=np.int64)
    at[1:] = np.flatnonzero(nl) + 1
    return text, at


#: False: every block formatted column by column (a test compares the two ways)
_USE_TEMPLATES = True
#: a block of n rows is formatted from templates when it has at most max(64, n // this) groups
_GROUPS_PER_ROW = 8


#: a record the per-packet decoder reads: (row, seconds, link type, octets, wire length, interface, time in ns,
#: digits, the FCS length its capture says its frames keep)
_Record = tuple[int, float, int, bytes, int, int, int, int, int]


@dataclass(slots=True)
class _BlockText:
    """One block's lines, in order: text (bytes), the frames only this process can write (a
    record: row, seconds, link type, bytes, wire length, interface, nanoseconds, the time's decimal places: TCP
    frames that are not clean
    and any frame the decoder must report in order) and runs of lines with clean TCP segments
    between them (:class:`_Run`, segments of ``tcp``: their windows and iWARP streams follow the
    whole capture)."""

    first: int
    pieces: list[bytes | _Record | _Run]
    tcp: _TcpBlock | None = None


#: a frame's line but for its number and time: source, destination, protocol, info, and (a record
#: with a time of its own: ERF) the per-packet path's time and length of it, else None
_Parts = tuple[str, str, str, str, tuple[int, int] | None]


def _parts(cp: Any, request_in: int | None = None) -> _Parts:
    own = (cp.time_ns, cp.wire_length) if cp.time_ns is not None else None
    return (*endpoints(cp.packet), protocol(cp), info(cp, None, request_in), own)


#: what the per-packet path says of a frame that is not TCP depends on its bytes alone (no stream
#: or window state): the same bytes again (repeated test runs, duplicated frames) are not decoded
#: again.  Bounded: emptied when full.
#: Keyed by the frame's length on the wire too (the same bytes are a packet cut by a snap length, or a
#: whole one whose headers say more than it holds: tshark and the decoder tell them apart) and by how the
#: frame is decoded (lenient or not) and the FCS length its capture says its frames keep.
_SEEN: dict[tuple[int, bytes, int, int, bool], _Parts] = {}


def _stateless_line(first: int, rec: _Record, t0: int, flt: Any, lenient: bool) -> bytes | None:
    """The line of a frame that is not TCP (b"": the filter drops it), or None when the frame is
    left to the caller's per-packet loop (TCP after all, or an error to raise in order)."""
    j, ts, lt, data, wire, iface, ns, digits, fcs = rec
    key = (lt, data, wire, fcs, lenient)
    parts = _SEEN.get(key) if flt is None else None
    if parts is None:
        try:
            cp = decode_record(RawRecord(first + j, ts, lt, data, wire, iface, ns, digits, fcs), lenient=lenient)
        except Exception:  # noqa: BLE001 - decoded again, and raised in order, by the caller
            return None
        if cp.packet.encap == "tcp" or echo_message(cp.packet) is not None:  # (an echo: paired in order)
            return None
        if flt is not None and not flt(frame_fields(cp)):
            return b""
        parts = _parts(cp)
        if flt is None:
            if len(_SEEN) >= 4096:
                _SEEN.clear()
            _SEEN[key] = parts
    return _record_line(first + j, parts, ts, ns, digits, t0, wire, len(data))


def _record_line(frame: int, parts: _Parts, ts: float, ns: int, digits: int, t0: int, wire: int, caplen: int) -> bytes:
    """The line of a record (seconds ``ts``, nanoseconds ``ns`` as its header has them) from its
    :data:`_Parts`: an ERF record's own time and length where it has them, to the nanosecond."""
    if parts[4] is not None:
        ns, wire = parts[4]
        digits = 9
    else:
        ns = record_ns(ts, ns)
    return (format_summary(frame, time_text(ns - t0, digits), parts[0], parts[1], parts[2], wire or caplen, parts[3])
            + "\n").encode()


def _render_block(blk: RecordBlock, t0: int, flt: Any, n: int, lenient: bool = True) -> _BlockText:
    """The first ``n`` records of a block: decoded into columns, the fast rows formatted from them,
    the other frames that are not TCP by the per-packet decoder; the clean TCP segments (without a
    filter) are left as columns and text (:class:`_TcpBlock`) for the caller, which follows their
    connections in order, and every other TCP frame as a record."""
    # (an ICMP error that quotes a datagram: its line from the columns when they read it to its ICMP
    # header without a problem (_quoting_rows); a filter reads its quote in the columns, Columns.multi,
    # and only the errors it keeps are decoded again)
    # (a filter on fields a TCP segment's columns hold alone, no stream's state: the clean segments still
    # written from the columns, in order, the filter's mask saying which of their lines to keep)
    stateless = flt is not None and not (wants_iwarp(flt.fields) or wants_windows(flt.fields)
                                         or wants_conversations(flt.fields))
    wanted = (*_FIELDS, *TCP_FIELDS) if flt is None else (*_FIELDS, *TCP_FIELDS, *flt.fields) if stateless \
        else (*_FIELDS, *flt.fields)
    cols = decode_block(blk, verify_icrc=True, fields=wanted, quotes=flt is not None and lenient)
    # (an IPv4 source route's destination is the per-packet decoder's, not the columns': those frames' lines
    # are its, columnar.source_routes)
    routed = source_routes(blk)
    fast = _fast_rows(blk, cols) & ~routed
    fast[n:] = False
    mask = None
    if flt is not None:
        mask = np.asarray(flt.mask(cols, cols.present, cols.n), dtype=bool)
        rows = np.flatnonzero(fast & mask)
    else:
        rows = np.flatnonzero(fast)
    others = np.flatnonzero(~fast[:n])
    kept = np.zeros(len(blk), dtype=bool)  # (the quoting frames the filter keeps: not filtered again)
    if flt is not None and cols.multi:  # (lenient: a frame the filter drops raises nothing either way)
        frames = cols.data["frame.number"][others]
        quoting = np.isin(frames, np.fromiter(cols.multi, dtype=frames.dtype))
        passed = filter_mask(flt, cols)[others]
        kept[others[quoting & passed]] = True
        others = others[~quoting | passed]
    quotes = np.zeros(0, dtype=np.int64)
    if len(others) and (flt is None or kept.any()):
        clean = _quoting_rows(blk, cols)[others] & ~routed[others] & (kept[others] if flt is not None else True)
        quotes, others = others[clean], others[~clean]
    plain = np.zeros(0, dtype=np.int64)
    echoes: list[tuple[int, _Echo]] = []
    if len(others):
        kinds = _plain_rows(blk, cols)[others]
        kinds[routed[others]] = 0
        plain, others = others[kinds != 0], others[kinds == 0]
    text, starts = _fast_text(blk, cols, rows, t0, starts=len(others) > 0 or len(quotes) > 0 or len(plain) > 0)
    if len(quotes) or len(plain):
        assert starts is not None
        sources = [(rows, text, starts)]
        if len(quotes):
            sources.append(_quoting_text(blk, cols, quotes, t0))
        if len(plain):
            source, left, echoes = _plain_text(blk, cols, plain, kinds[kinds != 0], t0,
                                               None if mask is None else mask[plain])
            sources.append(source)
            if left.any():
                others = np.sort(np.concatenate([others, plain[left]]))
        text, rows, starts = _merge(sources)
    if not len(others) and not echoes:
        return _BlockText(blk.first, [text] if text else [])
    assert starts is not None
    if flt is None or stateless:
        clean = clean_tcp(blk, cols)[others] & ~routed[others]
        tcp_rows, others = others[clean], others[~clean]
    else:
        tcp_rows = others[:0]
    secs, ifs, digits, fcss = blk.seconds(), blk.interfaces(), blk.time_digits(), blk.fcs_lens()
    tcp = cols.layers["tcp"]
    line_rows: list[int] = []
    lines: list[bytes] = []
    records: list[tuple[int, _Record]] = []
    for j in others.tolist():
        off, cap = int(blk.offset[j]), int(blk.caplen[j])
        rec = (j, float(secs[j]), int(blk.linktype[j]), bytes(blk.buf[off:off + cap]), int(blk.wirelen[j]),
               int(ifs[j]), int(blk.ts_ns[j]), int(digits[j]), int(fcss[j]))
        line = None if tcp[j] else _stateless_line(blk.first, rec, t0, None if kept[j] else flt, lenient)
        if line is None:
            records.append((j, rec))
        elif line:
            line_rows.append(j)
            lines.append(line)
    if lines:
        at = np.zeros(len(lines) + 1, dtype=np.int64)
        np.cumsum([len(x) for x in lines], out=at[1:])
        text, rows, starts = _merge([(rows, text, starts), (np.array(line_rows, dtype=np.int64), b"".join(lines), at)])
    tb = _tcp_block(blk, cols, tcp_rows, t0) if len(tcp_rows) else None
    if tb is not None and mask is not None:
        tb.keep = mask[tcp_rows]
    pieces: list[bytes | _Record | _Run] = []
    lo = t_lo = e_lo = 0  # the next static line, the next TCP segment and the next echo
    echo_rows = np.array([j for j, _e in echoes], dtype=np.int64)
    ends: list[tuple[int, _Record | None]] = [*records, (len(blk), None)]
    for j, record in ends:
        hi = int(np.searchsorted(rows, j))
        t_hi = int(np.searchsorted(tcp_rows, j))
        e_hi = int(np.searchsorted(echo_rows, j))
        if t_hi > t_lo or e_hi > e_lo:  # (the echoes among the lines: paired in order by the caller)
            pieces.append(_Run(text[starts[lo]:starts[hi]], rows[lo:hi], starts[lo:hi + 1] - starts[lo], t_lo, t_hi,
                               echoes[e_lo:e_hi]))
        elif hi > lo:
            pieces.append(text[starts[lo]:starts[hi]])
        lo, t_lo, e_lo = hi, t_hi, e_hi
        if record is not None:
            pieces.append(record)
    return _BlockText(blk.first, pieces, tb)


def _paired(run: _Run, pairs: EchoPairs) -> None:
    """The echoes of ``run`` paired in order (each, shown or not, fed to ``pairs``), and a reply's line
    given the request it answers (`` (request in N)`` after its Info, as render.info says it) in the
    run's text, its lines' starts moved past it."""
    cuts: list[tuple[int, int, bytes]] = []  # (the line, where its newline is, what goes before it)
    for j, e in run.echoes:
        request_in = pairs.pair(e.frame, e.version, e.kind, e.ident_seq, e.checksum, e.src, e.dst)
        if request_in is not None and e.shown:
            i = int(np.searchsorted(run.rows, j))
            cuts.append((i, int(run.at[i + 1]) - 1, f" (request in {request_in})".encode()))
    if not cuts:
        return
    out: list[bytes] = []
    before = 0
    grown = np.zeros(len(run.at), dtype=np.int64)
    for i, at, said in cuts:
        out += (run.text[before:at], said)
        before = at
        grown[i + 1] += len(said)
    out.append(run.text[before:])
    run.text = b"".join(out)
    run.at = run.at + np.cumsum(grown)


def _merge(parts: list[tuple[np.ndarray, bytes, np.ndarray]],
           picked: Sequence[tuple[np.ndarray, bytes, np.ndarray, np.ndarray]] = ()) -> tuple[bytes, np.ndarray, np.ndarray]:
    """Lines from several sources, in the order of their rows: each source its rows (ascending),
    its text and where each row's line starts in it (one more: the end); ``picked`` sources give
    each row's start and length in their text instead (lines anywhere in it).  The same of the lot."""
    parts = [p for p in parts if len(p[0])]
    picked = [p for p in picked if len(p[0])]
    if len(parts) == 1 and not picked:
        return parts[0][1], parts[0][0], parts[0][2]
    if not parts and not picked:
        return b"", np.zeros(0, dtype=np.int64), np.zeros(1, dtype=np.int64)
    texts = [p[1] for p in parts] + [p[1] for p in picked]
    base = np.cumsum([0] + [len(t) for t in texts[:-1]]).tolist()
    rows = np.concatenate([p[0] for p in parts] + [p[0] for p in picked])
    src = np.concatenate([p[2][:-1] + b for p, b in zip(parts, base, strict=False)]
                         + [p[2] + b for p, b in zip(picked, base[len(parts):], strict=True)])
    lens = np.concatenate([np.diff(p[2]) for p in parts] + [p[3] for p in picked])
    blob = b"".join(texts)
    order = np.argsort(rows, kind="stable")
    rows, src, lens = rows[order], src[order], lens[order]
    at = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(lens, out=at[1:])
    # runs of lines that lie one after the other in the sources are copied at once
    first = np.flatnonzero(np.r_[True, src[1:] != src[:-1] + lens[:-1]])
    run_src, run_len = src[first], np.add.reduceat(lens, first)
    if len(first) * 8 <= len(rows):
        text = b"".join([blob[a:a + k] for a, k in zip(run_src.tolist(), run_len.tolist(), strict=True)])
    else:  # lines from the sources in turn: each byte taken from where it lies
        where = np.repeat(run_src - at[first], run_len) + np.arange(int(at[-1]))
        text = np.frombuffer(blob, dtype=np.uint8)[where].tobytes()
    return text, rows, at


@dataclass(slots=True)
class _TcpBlock:
    """The clean TCP segments of a block (:func:`rdmalab.capture.columnar_tcp.clean_tcp`), a row
    each: their text up to ``Win=`` and after the window (byte matrices), what the iWARP tracker
    and the window scaling are fed, and where their bytes lie in the block's buffer (for the few
    the per-packet path writes)."""

    rows: np.ndarray  # the block's rows
    head: np.ndarray
    tail: np.ndarray
    ihead: np.ndarray  # the line of an iWARP frame up to its info
    ends: np.ndarray  # (k, 37) bytes: IPv6?, source and destination (16 bytes each), ports
    seq: np.ndarray
    flags: np.ndarray
    window: np.ndarray
    length: np.ndarray  # TCP payload octets
    seconds: np.ndarray
    ns: np.ndarray  # the record's time in nanoseconds
    digits: np.ndarray  # its decimal places (RecordBlock.time_digits)
    wire: np.ndarray  # the record's wire length (0: the captured length)
    offset: np.ndarray  # where the frame starts in buf
    caplen: np.ndarray
    opts: np.ndarray  # where its TCP options start in the frame
    payload: np.ndarray  # where its payload starts in the frame
    linktype: np.ndarray
    interface: np.ndarray
    fcs: np.ndarray  # the FCS length its capture says the frame keeps (-1: it does not say)
    buf: bytes | bytearray
    # written in the worker, from the segments' bytes alone (no stream state): whether a segment's
    # payload is whole FPDUs (CRC good, not looked at: :func:`_fpdu_chains`) and, for such a segment,
    # its line as an iWARP frame (:class:`_LaneLines`); and the same of a segment with the next of its
    # direction (``pair_of``: that one's index, -1: none) when the first holds no whole FPDU and the
    # two together are whole FPDUs: the second's line, the FPDUs' summaries (``pair``)
    whole_crc: np.ndarray | None = None
    whole_plain: np.ndarray | None = None
    lane: _LaneLines | None = None
    pair_of: np.ndarray | None = None
    pair_crc: np.ndarray | None = None
    pair_plain: np.ndarray | None = None
    pair: _LaneLines | None = None
    file_start: int | None = None  # in a worker: buf not sent back, the bytes of the file from here
    # the directions of the whole block (:func:`_directions`), found in the worker
    dirs: tuple[list[Any], np.ndarray, list[Any], np.ndarray] | None = None
    # a SYN's Window Scale shift count (-1: none; :func:`rdmalab.capture.render.window_shift_option`),
    # read in the worker; 0 on other segments
    wscale: np.ndarray | None = None
    # (a display filter on fields of the segments' own columns) whose lines are kept: each is fed to the
    # iWARP streams and the window scaling all the same
    keep: np.ndarray | None = None


@dataclass(slots=True)
class _Run:
    """Lines in a block between two records: some written already (``text``, the block rows
    ``rows``, each line's start in ``at``, one more: the end), the clean TCP segments
    ``lo:hi`` of the block's :class:`_TcpBlock`, which go between them by row (none: ``lo == hi``), and
    the echoes among the lines (their rows and :class:`_Echo`, shown or not), paired in order."""

    text: bytes
    rows: np.ndarray
    at: np.ndarray
    lo: int
    hi: int
    echoes: list[tuple[int, _Echo]] = field(default_factory=list)


def _tcp_block(blk: RecordBlock, cols: Columns, rows: np.ndarray, t0: int) -> _TcpBlock:
    head, tail, ihead = tcp_text(blk, cols, rows, t0)
    d, L = cols.data, cols.layers
    k = len(rows)
    v6 = L["ipv6"][rows]
    ends = np.zeros((k, 37), dtype=np.uint8)
    ends[:, 0] = v6
    for at, which in ((1, "src"), (17, "dst")):
        ends[:, at + 12:at + 16] = d[f"ip.{which}"][rows].astype(">u4").view(np.uint8).reshape(k, 4)
        if v6.any():
            six = np.ascontiguousarray(d[f"ipv6.{which}"][rows]).view(np.uint8).reshape(k, 16)
            ends[v6, at:at + 16] = six[v6]
    ends[:, 33:35] = d["tcp.srcport"][rows].astype(">u2").view(np.uint8).reshape(k, 2)
    ends[:, 35:37] = d["tcp.dstport"][rows].astype(">u2").view(np.uint8).reshape(k, 2)
    _l3, l4 = tcp_offsets(cols)
    l4r = l4[rows]
    tb = _TcpBlock(rows, head, tail, ihead, ends, d["tcp.seq_raw"][rows], d["tcp.flags"][rows].astype(np.int64),
                   d["tcp.window_size_value"][rows], d["tcp.len"][rows].astype(np.int64), blk.seconds()[rows],
                   blk.ts_ns[rows], blk.time_digits()[rows],
                   blk.wirelen[rows], blk.offset[rows], blk.caplen[rows], l4r + 20,
                   l4r + d["tcp.hdr_len"][rows].astype(np.int64), blk.linktype[rows], blk.interfaces()[rows],
                   blk.fcs_lens()[rows], blk.buf)
    tb.dirs = _directions(ends)
    tb.wscale = np.zeros(k, dtype=np.int8)
    for i in np.flatnonzero(tb.flags & TCP.SYN).tolist():
        o = int(tb.offset[i])
        got = window_shift_option(blk.buf[o:o + int(tb.caplen[i])], int(tb.opts[i]), int(tb.payload[i]))
        tb.wscale[i] = -1 if got is None else got
    _lane_block(tb)
    return tb


@dataclass(slots=True)
class _LaneLines:
    """The lines of segments as iWARP frames whose FPDUs :func:`_fpdu_chains` describes, made in
    the worker: a segment ``i`` of one FPDU has its line as row ``row[i]`` of the byte matrix ``m``
    (0: no character; -1: none), one of several FPDUs at ``at[i]:at[i] + size[i]`` of ``text``."""

    m: np.ndarray
    row: np.ndarray
    text: bytes
    at: np.ndarray
    size: np.ndarray

    def pick(self, rows: np.ndarray, block_rows: np.ndarray,
             ) -> tuple[np.ndarray, np.ndarray, list[tuple[np.ndarray, bytes, np.ndarray, np.ndarray]]]:
        """The lines of segments ``rows`` (indices into this one's arrays; their rows of the block
        ``block_rows``): those of one FPDU (which of ``rows``, their matrix rows) and the others as a
        source for :func:`_merge`'s ``picked``."""
        r = self.row[rows]
        one = r >= 0
        several = ~one
        picked = [(block_rows[several], self.text, self.at[rows[several]], self.size[rows[several]])] \
            if several.any() else []
        return np.flatnonzero(one), self.m[r[one]], picked


def _lane_text(tb: _TcpBlock, cand: np.ndarray, fpdus: tuple[np.ndarray, ...]) -> _LaneLines:
    """:class:`_LaneLines` of segments ``cand`` (ascending) of ``tb``, of whole FPDUs ``fpdus``
    (:func:`_fpdu_chains`); every other segment of ``tb`` has none."""
    k = len(tb.rows)
    at = np.zeros(k, dtype=np.int64)
    size = np.zeros(k, dtype=np.int64)
    row = np.full(k, -1, dtype=np.int64)
    if not len(cand):
        return _LaneLines(np.zeros((0, 1), dtype=np.uint8), row, b"", at, size)
    single, lines, more = _lane_lines(tb, 0, k, cand.tolist(), fpdus)
    row[single] = np.arange(len(single))  # a segment of one FPDU (most): its line a row of a matrix
    text = b""
    if more:  # several: the sources merged into one text, a line a segment
        srcs = [(np.searchsorted(tb.rows, r), t, a) for r, t, a in more]
        text, seg, starts = _merge(srcs)
        # a segment's pieces (head, FPDUs, newline) are consecutive after the merge
        first = np.r_[True, seg[1:] != seg[:-1]]
        segs = seg[first]
        begin = starts[:-1][first]
        end = np.r_[begin[1:], starts[-1]]
        at[segs] = begin
        size[segs] = end - begin
    return _LaneLines(lines, row, text, at, size)


def _lane_block(tb: _TcpBlock) -> None:
    """The FPDU lane's work that needs no stream state, for every segment of the block at once:
    :func:`_fpdu_chains` and the line of each segment of whole FPDUs (:func:`_lane_lines`), and the
    same for pairs of segments (:func:`_pairs`), kept in ``tb`` (the tracker later decides which of
    them go that way)."""
    k = len(tb.rows)
    ok_crc, ok_plain, fpdus = _fpdu_chains(tb, 0, k)
    tb.whole_crc, tb.whole_plain = ok_crc, ok_plain
    tb.lane = _lane_text(tb, np.flatnonzero(ok_crc | ok_plain), fpdus)
    _pairs(tb)
    tb.ihead = tb.ihead[:0]  # not needed any more (not sent back)


def _pairs(tb: _TcpBlock) -> None:
    """For :func:`_lane_block`: each segment ``a`` with payload followed, on its direction in the
    block, by a segment ``b`` with payload that starts where it ends, neither with SYN or RST,
    ``a`` holding no whole FPDU (its first FPDU is longer than it): whether their payloads together
    are whole FPDUs (CRC good, or not looked at), and ``b``'s line for them.  That is a large FPDU
    cut in two by TCP, which the tracker, fed the two one by one, holds at ``a`` and completes at
    ``b``."""
    k = len(tb.rows)
    tb.pair_of = np.full(k, -1, dtype=np.int64)
    tb.pair_crc = np.zeros(k, dtype=bool)
    tb.pair_plain = np.zeros(k, dtype=bool)
    assert tb.dirs is not None
    inv = tb.dirs[1]
    has = np.flatnonzero((tb.length > 0) & ((tb.flags & (TCP.SYN | TCP.RST)) == 0))
    o = has[np.argsort(inv[has], kind="stable")]  # each direction's segments with payload, in order
    a, b = o[:-1], o[1:]
    start = tb.offset + tb.payload
    buf = np.frombuffer(tb.buf, dtype=np.uint8)
    la = tb.length[a]
    keep = (inv[a] == inv[b]) & ((tb.seq[a].astype(np.int64) + la) & 0xFFFFFFFF == tb.seq[b])
    a, b, la = a[keep], b[keep], la[keep]
    if len(a):
        top = len(buf) - 1
        sa = start[a]
        ul = buf[sa].astype(np.int64) << 8 | buf[np.minimum(sa + 1, top)]
        total = (2 + ul + 3) // 4 * 4 + 4
        # the first FPDU ends after a, not after b; where a holds them, DDP's DV and RDMAP's RV are 1
        # (what _fpdu_chains asks of every FPDU): most TCP that is not iWARP goes no further
        ctl, rd = buf[np.minimum(sa + 2, top)], buf[np.minimum(sa + 3, top)]
        maybe = (la < 2) | ((total > la) & (total <= la + tb.length[b]))
        maybe &= (la < 4) | (((ctl & 0x3F) == 0x01) & ((rd & 0xF0) == 0x40))
        by_b = np.argsort(b[maybe])  # in the order of the block (b's lines are merged by row)
        a, b = a[maybe][by_b], b[maybe][by_b]
    if not len(a):
        tb.pair = _lane_text(tb, np.zeros(0, dtype=np.int64), ())
        return
    # the two payloads one after the other, each pair a segment of a block of its own
    la, lb = tb.length[a], tb.length[b]
    joined = b"".join(bytes(tb.buf[x:x + n]) + bytes(tb.buf[y:y + m]) for x, n, y, m in
                      zip(start[a].tolist(), la.tolist(), start[b].tolist(), lb.tolist(), strict=True))
    offs = np.zeros(len(a), dtype=np.int64)
    np.cumsum((la + lb)[:-1], out=offs[1:])
    pb = replace(tb, rows=tb.rows[b], ihead=tb.ihead[b], buf=joined, offset=offs, payload=np.zeros(len(a), dtype=np.int64),
                 length=la + lb)
    ok_crc, ok_plain, fpdus = _fpdu_chains(pb, 0, len(a))
    whole = np.flatnonzero(ok_crc | ok_plain)
    lines = _lane_text(pb, whole, fpdus)
    tb.pair_of[a[whole]] = b[whole]
    tb.pair_crc[a] = ok_crc
    tb.pair_plain[a] = ok_plain
    # the lines by b's index in the block
    row = np.full(k, -1, dtype=np.int64)
    at = np.zeros(k, dtype=np.int64)
    size = np.zeros(k, dtype=np.int64)
    row[b] = lines.row
    at[b] = lines.at
    size[b] = lines.size
    tb.pair = _LaneLines(lines.m, row, lines.text, at, size)


_WORKER_FILTERS: dict[str, Any] = {}


def _render_in_worker(blk: RecordBlock, n: int, _t0: Any, _prev: Any, expr: str | None,
                      lenient: bool, t0: int) -> _BlockText:
    """In a worker process (:func:`rdmalab.capture.blockpool.blocks_in_workers`): one block's text, its
    times since ``t0`` (the first frame's, in nanoseconds, as the per-packet path takes it: :func:`_first_time`)."""
    flt = None
    if expr:
        flt = _WORKER_FILTERS.get(expr)
        if flt is None:

            flt = _WORKER_FILTERS[expr] = compile_filter(expr)
    bt = _render_block(erf_ethernet_view(blk), t0, flt, n, lenient)  # (ERF records: their frames, their own times)
    if bt.tcp is not None and blk.from_file is not None:
        # the block's bytes are the file's: the parent maps them (not sent back)
        bt.tcp.buf = b""
        bt.tcp.file_start = blk.from_file
    return bt


def _first_time(blk: RecordBlock) -> int:
    """The time of a capture's first frame in nanoseconds as the per-packet path takes it
    (``CapturedPacket.epoch_ns``: an ERF record's own time, else the record's)."""
    if int(blk.linktype[0]) == LINKTYPE_ERF:
        off, cap = int(blk.offset[0]), int(blk.caplen[0])
        own = erf_frame(blk.buf[off:off + cap])
        if own is not None:
            return int(own[0])
    return record_ns(float(blk.seconds()[0]), int(blk.ts_ns[0]))


def _file_first_time(path: str) -> int:
    """:func:`_first_time` of a file's first frame (0 without frames)."""
    blocks = record_blocks(path, 64 << 10)
    try:
        for blk in blocks:
            if len(blk):
                return _first_time(blk)
        return 0
    finally:
        close = getattr(blocks, "close", None)  # (a generator: its file closed now)
        if close is not None:
            close()


def _sequential(path: str, block_bytes: int, count: int | None, flt: Any,
                lenient: bool, shown: _Shown | None, prefixes: AnalysisFeed) -> Iterator[tuple[_BlockText, int]]:
    t0: int | None = None
    left = count
    for raw in record_blocks(path, block_bytes):
        blk = erf_ethernet_view(raw)  # (ERF Ethernet records: their frames, for the columns)
        n = len(blk) if left is None else min(len(blk), left)
        if t0 is None:
            t0 = _first_time(raw)
        # (the TCP analysis followed in order; a filter on the conversations reads the same columns)
        cols = prefixes.note(blk, n, shown.flt.fields if shown is not None else ())
        if shown is not None:
            shown.note(cols, n)
        yield _render_block(blk, t0, flt, n, lenient), t0
        if left is not None:
            left -= n
            if left <= 0:
                return


def summary_lines(path: str | os.PathLike[str], *, count: int | None = None, flt: Any = None,
                  filter_expr: str | None = None, lenient: bool = True, iwarp: bool = True,
                  block_bytes: int = 4 << 20, workers: int | None = 1,
                  parallel_min_bytes: int = 32 << 20) -> Iterator[str]:
    """The text of ``rdmalab decode -r FILE`` (one summary line a frame, each ending in a newline),
    in pieces: :func:`summary_bytes`, decoded."""
    for piece in summary_bytes(path, count=count, flt=flt, filter_expr=filter_expr, lenient=lenient, iwarp=iwarp,
                               block_bytes=block_bytes, workers=workers, parallel_min_bytes=parallel_min_bytes):
        yield piece.decode()


def summary_bytes(path: str | os.PathLike[str], *, count: int | None = None, flt: Any = None,
                  filter_expr: str | None = None, lenient: bool = True, iwarp: bool = True,
                  block_bytes: int = 4 << 20, workers: int | None = 1,
                  parallel_min_bytes: int = 32 << 20) -> Iterator[bytes]:
    """The text of ``rdmalab decode -r FILE`` (one summary line a frame, each ending in a newline),
    UTF-8, in pieces.  ``flt`` is the compiled display filter ``filter_expr`` (or None); its fields must
    all be columns.

    ``workers`` (None: :func:`default_workers`) above 1 renders the blocks of a plain pcap or
    pcapng file (:func:`~rdmalab.capture.blockpool.parallel_capture`) of at least
    ``parallel_min_bytes`` in worker processes, which also write the lines of the
    frames the per-packet decoder reads without state (:mod:`rdmalab.capture.blockpool`: they also
    follow the record headers of their ranges of the file); this process checks the ranges, decodes
    the TCP segments (in order: TCP windows and iWARP streams follow the capture) and
    writes.  A frame the per-packet decoder must read raises
    what it raises (``lenient=False``: the first :class:`~rdmalab.wire.errors.DecodeError`),
    after the lines before it."""
    p = os.fspath(path)
    shown: _Shown | None = None
    if flt is not None and (wants_conversations(flt.fields) or wants_iwarp(flt.fields) or wants_windows(flt.fields)
                            or not flt.fields.isdisjoint(FILTER_TIMES)) \
            and not (wants_conversations(flt.fields) and wants_iwarp(flt.fields)):
        # a filter on the conversations (tcp.stream == 3), the windows (tcp.window_size), iWARP's fields
        # (iwarp_rdma.opcode == 1) or the times since other frames (frame.time_delta > 0.001): every line
        # written as without a filter (in workers too), then the lines of the frames it keeps, from the
        # block's columns (the conversations, the windows, the TCP analysis, the iWARP streams and the
        # times followed in order, here or in the process beside the workers)
        shown, flt, filter_expr = _Shown(flt), None, None
    tracker = None
    if iwarp:

        tracker = IwarpTracker()
    # tshark's TCP analysis flags in front of the Info of the lines that have one: the analysis follows
    # every frame in capture order, here (read again from the file when workers write the lines)
    prefixes = AnalysisFeed(values=shown is not None and not shown.flt.fields.isdisjoint((*VALUE_FIELDS, TREE)))
    windows = TcpWindowScaling()  # follows every frame, filtered out or not, as tshark does
    echoes = EchoPairs()  # the same (the blocks leave echo requests and replies to this loop)
    # what the per-packet path says of a frame that is not TCP depends on its bytes alone (no
    # stream or window state): the same bytes again (repeated test runs, duplicated frames) are
    # not decoded again.  Bounded: emptied when full.
    seen: dict[tuple[int, bytes, int, int], _Parts] = {}
    if workers is None:
        workers = default_workers()
    if (workers > 1 and parallel_capture(p, own_times=True) and os.path.getsize(p) >= parallel_min_bytes
            and (flt is None or filter_expr)):
        t0 = _file_first_time(p)
        blocks: Iterator[tuple[_BlockText, int]] = ((bt, t0) for bt, _t in blocks_in_workers(
            p, _render_in_worker, (filter_expr, lenient, t0), workers=workers, block_bytes=block_bytes, count=count))
        prefixes.read_from(p, block_bytes, shown)
    else:
        blocks = _sequential(p, block_bytes, count, flt, lenient, shown, prefixes)
    try:
        mapped: memoryview | None = None
        for bt, t0 in blocks:
            if bt.tcp is not None and bt.tcp.file_start is not None:
                if mapped is None:
                    with open(p, "rb") as f:
                        mapped = memoryview(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))
                bt.tcp.buf = mapped[bt.tcp.file_start:]  # type: ignore[assignment]
            first = bt.pieces[0] if len(bt.pieces) == 1 else None
            if isinstance(first, bytes):
                first = prefixes.apply(first)
                yield first if shown is None else shown.keep(first)
                continue
            out: list[bytes] = []
            failed: BaseException | None = None
            try:
                for piece in bt.pieces:
                    if isinstance(piece, bytes):
                        out.append(piece)
                        continue
                    if isinstance(piece, _Run):  # clean TCP segments, their text formatted from the columns
                        if piece.echoes:
                            _paired(piece, echoes)
                        if piece.lo == piece.hi:  # (no segment: the lines of echoes among others)
                            out.append(piece.text)
                            continue
                        assert bt.tcp is not None
                        text, stop = _run_text(bt.first, bt.tcp, piece, t0, tracker, windows, lenient)
                        out.append(text)
                        if stop is not None:
                            raise stop
                        continue
                    j, ts, lt, data, wire, iface, ns, digits, fcs = piece
                    key = (lt, data, wire, fcs)
                    parts = seen.get(key) if flt is None else None
                    if parts is None:
                        cp = decode_record(RawRecord(bt.first + j, ts, lt, data, wire, iface, ns, digits, fcs),
                                           lenient=lenient,
                                           tracker=tracker)
                        if cp.packet.encap == "tcp":
                            if not cp.pdus:
                                line = summary_line(cp, t0, windows)
                            else:
                                windows.window(cp.packet)
                                line = summary_line(cp, t0)
                            if flt is None or flt(frame_fields(cp, windows=windows)):
                                out.append((line + "\n").encode())
                            continue
                        # a TCP header the decoder did not take whole (options past the segment's end, ...):
                        # its SYN still sets its direction's window scale, as on the per-packet path
                        damaged_tcp = cp.packet.get(TCP) is not None
                        echo = echo_message(cp.packet) is not None  # an echo request or reply: paired in order
                        request_in = echoes.note(bt.first + j, cp.packet) if echo else None
                        if flt is not None and not flt(frame_fields(cp, windows=windows)):
                            continue
                        if damaged_tcp and flt is None:
                            windows.window(cp.packet)
                        parts = _parts(cp, request_in)
                        if flt is None and not damaged_tcp and not echo:  # (a damaged TCP segment, an echo: read each time)
                            if len(seen) >= 4096:
                                seen.clear()
                            seen[key] = parts
                    out.append(_record_line(bt.first + j, parts, ts, ns, digits, t0, wire, len(data)))
            except Exception as err:  # the lines before the frame that failed, then the error
                failed = err
            if out:
                text = prefixes.apply(b"".join(out))
                yield text if shown is None else shown.keep(text)
            if failed is not None:
                raise failed
    finally:  # (the process beside ended now, not when this generator is collected)
        prefixes.close()


class _Shown:
    """Which frames a display filter on the conversations keeps (:func:`summary_bytes`): each block's
    columns with the conversations followed in order (:meth:`AnalysisFeed.note`, which follows them and the
    TCP analysis for the lines' prefixes; a block of other link types: the per-packet decoder's columns,
    the same numbers), the filter run on them, and the block's lines cut down to those frames'."""

    def __init__(self, flt: Any) -> None:
        self.flt = flt
        self.mask = np.zeros(0, dtype=bool)
        # (the times since the first frame and the frame before: counted over every block, in order)
        self.clock = Clock() if not flt.fields.isdisjoint(FILTER_TIMES) else None

    def note(self, cols: Columns, n: int) -> None:
        """The first ``n`` frames of the next block, its columns ``cols`` (:meth:`AnalysisFeed.note`'s:
        every frame of the block)."""
        if self.clock is not None:
            self.clock.before = self.clock.stamp(cols)
        self.mask = filter_mask(self.flt, cols)[:n]

    def keep(self, text: bytes) -> bytes:
        """The lines of the frames kept among ``text``, the lines of the block's first frames (all of them,
        or those before an error)."""
        lines = text.split(b"\n")[:-1]
        if len(lines) > len(self.mask):  # (a newline inside a line: a frame's text is not one line)
            raise RuntimeError(f"summary lines: {len(lines)} lines for {len(self.mask)} frames of a block")
        kept = [line for line, k in zip(lines, self.mask.tolist(), strict=False) if k]
        self.mask = self.mask[len(lines):]
        return b"".join(line + b"\n" for line in kept)


#: where a summary line's Info starts: after the addresses' arrow, the destination, the protocol and the length
_INFO_AT = re.compile(rb" \xe2\x86\x92 \S+ +\S+ +\d+ ")
#: the columns :class:`AnalysisFeed` reads (the analysis' inputs are added by decode_block)
_PREFIX_FIELDS = ("frame.number", "tcp.analysis.flags", *FLAG_FIELDS, "tcp.analysis.duplicate_ack_num",
                  "tcp.analysis.duplicate_ack_frame")
#: the columns the analysis reads (:func:`~rdmalab.capture.columnar_decode.decode_block` adds them to a
#: caller's fields when it follows the windows and conversations itself)
_PREFIX_INPUTS = ("frame.number", *_TCP_INPUTS, *CONVERSATION_INPUTS)


#: a frame's tree's first line (-V) but the text's first (a literal first, which re finds fast: ten times faster
#: than ``(?m)^Frame`` over the megabytes of a block's trees; the text's own first line: _FIRST_HEAD), its TCP
#: header's heading, and the first line after that is not one of its fields
_FRAME_HEAD = re.compile(rb"\nFrame (\d+): ")
_FIRST_HEAD = re.compile(rb"Frame (\d+): ")
_JSON_NUMBER_KEY = '"frame.number": "'
_JSON_NUMBER = re.compile(r'"frame\.number": "(\d+)"')
# (render.with_analysis_tree's marks, as bytes: the -V text of the workers)
_TCP_HEADING = TCP_HEADING.encode()
_NOT_A_FIELD = re.compile(NOT_A_FIELD.pattern.encode())


def _tcp_fields_end(text: bytes, lo: int, hi: int) -> int | None:
    """Where the fields of the TCP header end in the tree ``text[lo:hi]`` (the SEQ/ACK analysis goes there,
    as :func:`~rdmalab.capture.render.with_analysis_tree` puts it); None when the tree has no TCP header."""
    at = text.find(_TCP_HEADING, lo, hi)
    if at < 0:
        return None
    m = _NOT_A_FIELD.search(text, at + len(_TCP_HEADING), hi)
    return m.start() if m is not None else len(text[:hi].rstrip(b"\n"))


def with_prefix(line: bytes, prefix: bytes) -> bytes:
    """A summary line with ``prefix`` in front of its Info (as tshark puts its TCP analysis flags)."""
    m = _INFO_AT.search(line)
    if m is None:
        return line
    return line[:m.end()] + prefix + line[m.end():]


def _frame_of(line: bytes) -> int | None:
    """The frame number a summary line starts with (None: not a frame's line)."""
    head = line.split(None, 1)[:1]
    return int(head[0]) if head and head[0].isdigit() else None


class AnalysisFeed:
    """tshark's TCP analysis flags in front of the Info of the summary lines (``[TCP Retransmission] ``,
    :func:`~rdmalab.capture.tcp_analysis.info_prefix`).  The lines are written from columns in blocks,
    perhaps by worker processes, but the analysis follows the capture's segments in order: each block's
    columns (the analysis' inputs, the conversations and windows followed as ``-T fields`` follows them:
    :func:`~rdmalab.capture.columnar_decode.fill_tcp_analysis`; a block of other link types through the
    per-packet decoder) are decoded here, in capture order (:meth:`note`, or the file read again beside the
    workers: :meth:`read_from`), and the few lines of frames with a flag get their prefix (:meth:`apply`).
    ``trees``: the frames' trees (``-V``, :mod:`rdmalab.capture.tree_templates`) get tshark's SEQ/ACK analysis
    tree instead (:meth:`apply_trees`).  ``later``: (for a display filter's frames, :meth:`apply_tree` and
    :meth:`apply_json` alone) each segment's text is made when its frame is written, not for every segment
    (:class:`~rdmalab.capture.tcp_analysis.Later`)."""

    def __init__(self, values: bool = False, *, trees: bool = False, json: bool = False, later: bool = False) -> None:
        self.conversations = Conversations(analysis=True)
        assert self.conversations.analysis is not None
        self.analysis = self.conversations.analysis
        # (the values too when a filter on the conversations reads them or a tree shows them, else the
        # flags alone: cheaper)
        self.analysis.values = values or trees or json
        self.trees = trees or json
        self.json = json  # (``-T json``: the ``tcp.analysis`` members instead, :meth:`apply_json`)
        # (a display filter's frames: each segment's text made only when its frame is written, a Later)
        self.later = later
        self.windows = TcpWindowScaling()
        #: (frame, prefix) of the frames analysed whose lines have not been written yet, in order
        self.pending: deque[tuple[int, bytes]] = deque()
        self.upto = 0  # the last frame analysed
        self._beside: Iterator[tuple[int, list[tuple[int, Any]], Any]] | None = None  # (read_from)
        self._shown: _Shown | None = None  # (read_from)
        self._texts: dict[int, bytes] = {}  # flags (one bit each, FLAG_FIELDS) -> their prefix
        self._tracker: IwarpTracker | None = None  # (a filter on iWARP's fields: the streams, :meth:`_iwarp`)

    def read_from(self, path: str, block_bytes: int, shown: _Shown | None = None) -> None:
        """Read the frames of ``path`` (a file) as :meth:`apply` needs them, and analyse them in a process
        beside this one (:func:`~rdmalab.capture.blockpool.run_beside`: this process, which writes what the
        workers render and follows the iWARP streams, is the one the others wait for).  ``shown``: a filter
        on the conversations, run there on each block's columns; its masks are added to ``shown``'s here
        as the frames are analysed (:meth:`apply` before :meth:`_Shown.keep`)."""
        self._shown = shown
        self._beside = run_beside(partial(self._analysed, path, block_bytes))

    def _analysed(self, path: str, block_bytes: int) -> Iterator[tuple[int, list[tuple[int, Any]], Any]]:
        """In the process beside (:meth:`read_from`), a copy of this feed: after each block of ``path``,
        the last frame analysed, what :meth:`note` left to put into the text and (a filter on the
        conversations) which of the block's frames it keeps."""
        shown = self._shown
        for raw in record_blocks(path, block_bytes):
            blk = erf_ethernet_view(raw)
            if shown is None:
                self.note(blk, len(raw))
                yield self.upto, list(self.pending), None
            else:
                shown.note(self.note(blk, len(raw), shown.flt.fields), len(raw))
                yield self.upto, list(self.pending), shown.mask
            self.pending.clear()

    def note(self, blk: RecordBlock, n: int, fields: Any = ()) -> Columns:
        """The next block's frames analysed (the first ``n`` of them get their prefix); its columns,
        with ``fields`` too (a filter's)."""
        if _ethernet_only(blk) and not fields:
            # (decode_block's steps, the conversations of TCP alone, without relative numbers: cheaper)
            cols = decode_block(blk, verify_icrc=False, fields=_PREFIX_INPUTS)
            ends = fill_tcp_windows(blk, cols, self.windows, ends=True, sacks=self.analysis.values)
            fill_conversations(cols, self.conversations, udp=False, relative=False)
            assert ends is not None
            if not self.analysis.values:  # (the flags alone: the prefixes straight from them, no columns)
                self.upto = blk.first + len(blk) - 1
                self._note_flags(cols, tcp_flags(cols, self.analysis, ends), n)
                return cols
            fill_tcp_analysis(cols, self.analysis, ends)
        elif _ethernet_only(blk):
            # (the ICRCs checked only for a filter that reads their status: CRC-32 of every RoCE packet else)
            cols = decode_block(blk, verify_icrc=any(f.startswith("rdmalab.icrc") for f in fields),
                                fields=(*_PREFIX_FIELDS, *fields), tracker=self._iwarp(fields),
                                conversations=self.conversations, windows=self.windows)
        else:
            cols = columns_from_block(blk, tracker=self._iwarp(fields), conversations=self.conversations,
                                      windows=self.windows)
        self.upto = blk.first + len(blk) - 1
        L = cols.layers
        if self.trees:
            self._note_trees(cols, n)
            return cols
        rows = np.flatnonzero(L["tcp.analysis.flags"][:n])
        if not len(rows):
            return cols
        bits = np.zeros(len(rows), dtype=np.int64)
        for i, name in enumerate(FLAG_FIELDS):
            bits |= L[name][rows].astype(np.int64) << i
        d = cols.data
        texts = self._texts
        dup = FLAG_FIELDS.index("tcp.analysis.duplicate_ack")
        append = self.pending.append
        for frame, b, num, of in zip(d["frame.number"][rows].tolist(), bits.tolist(),
                                     d["tcp.analysis.duplicate_ack_num"][rows].tolist(),
                                     d["tcp.analysis.duplicate_ack_frame"][rows].tolist(), strict=True):
            if b >> dup & 1:
                append((frame, info_prefix([n for i, n in enumerate(FLAG_FIELDS) if b >> i & 1], (num, of)).encode()))
                continue
            text = texts.get(b)
            if text is None:
                text = texts[b] = info_prefix([n for i, n in enumerate(FLAG_FIELDS) if b >> i & 1]).encode()
            append((frame, text))
        return cols

    def _iwarp(self, fields: Any) -> IwarpTracker | None:
        """The iWARP streams followed here for a filter that reads them (``fields``), else None."""
        if not fields or not wants_iwarp(fields):
            return None
        if self._tracker is None:
            self._tracker = IwarpTracker()
        return self._tracker

    def _note_flags(self, cols: Columns, got: list[tuple[int, int, tuple[int, int] | None]], n: int) -> None:
        """The prefixes of the first ``n`` frames of a block among its segments with a flag ``got``
        (:func:`~rdmalab.capture.columnar_decode.tcp_flags`: row, flags as bits, a duplicate ACK's pair)."""
        if not got:
            return
        got = [g for g in got if g[0] < n]
        frames = cols.data["frame.number"][[row for row, _b, _dup in got]].tolist()
        texts = self._texts
        append = self.pending.append
        for frame, (_row, b, dup) in zip(frames, got, strict=True):
            if dup is not None:
                append((frame, info_prefix(_names(b), dup).encode()))
                continue
            text = texts.get(b)
            if text is None:
                text = texts[b] = info_prefix(_names(b)).encode()
            append((frame, text))

    def _note_trees(self, cols: Columns, n: int) -> None:
        """The SEQ/ACK analysis tree of the first ``n`` frames of a block that have one, as text to put in
        (the block's columns read for those rows at once: the flags as bits, the values as lists)."""
        d, L = cols.data, cols.layers
        at = np.flatnonzero(L[TREE][:n])
        if not len(at):
            return
        bits = np.zeros(len(at), dtype=np.int64)
        for i, name in enumerate(FLAG_FIELDS):
            bits |= L[name][at].astype(np.int64) << i
        bits[L["tcp.analysis.flags"][at] == 0] = 0
        pairs = zip(L["tcp.analysis.duplicate_ack_num"][at].tolist(), d["tcp.analysis.duplicate_ack_num"][at].tolist(),
                    d["tcp.analysis.duplicate_ack_frame"][at].tolist(), strict=True)
        values = zip(*[[int(x) for x in d[name][at].tolist()] for name in VALUE_FIELDS], strict=True)
        names_of: dict[int, list[str]] = {}
        append = self.pending.append
        for frame, b, (dup, num, of), given in zip(d["frame.number"][at].tolist(), bits.tolist(), pairs, values,
                                                   strict=True):
            names = names_of.get(b)
            if names is None:
                names = names_of[b] = [name for i, name in enumerate(FLAG_FIELDS) if b >> i & 1]
            item = Later(names, (int(num), int(of)) if dup else None, given)
            append((frame, item if self.later else item.json() if self.json else item.tree()))  # type: ignore[arg-type]

    def close(self) -> None:
        """The process beside (:meth:`read_from`) ended, if it has not: no more frames are wanted."""
        beside, self._beside = self._beside, None
        close = getattr(beside, "close", None)  # (a generator: run_beside's, or made here where none forks)
        if close is not None:
            close()

    def _read_upto(self, last: int) -> None:
        """The frames up to ``last`` analysed (read from the file beside the workers: :meth:`read_from`)."""
        while self._beside is not None and self.upto < last:
            got = next(self._beside, None)
            if got is None:
                self._beside = None
            else:
                self.upto = got[0]
                self.pending.extend(got[1])
                if got[2] is not None and self._shown is not None:
                    self._shown.mask = np.concatenate((self._shown.mask, got[2]))

    def apply_trees(self, text: bytes) -> bytes:
        """``text``, the next frames' trees (``-V``), in order, tshark's SEQ/ACK analysis put in each that has
        one, after its TCP header's fields (as :func:`~rdmalab.capture.render.with_analysis_tree`)."""
        first = _FIRST_HEAD.match(text)
        heads = [(0, int(first.group(1)))] if first is not None else []
        heads += [(m.start() + 1, int(m.group(1))) for m in _FRAME_HEAD.finditer(text)]
        if not heads:
            return text
        self._read_upto(heads[-1][1])
        pending = self.pending
        if not pending or pending[0][0] > heads[-1][1]:
            return text
        where = {f: (pos, heads[i + 1][0] if i + 1 < len(heads) else len(text)) for i, (pos, f) in enumerate(heads)}
        out: list[bytes] = []
        prev = 0
        while pending and pending[0][0] <= heads[-1][1]:
            frame, block = pending.popleft()
            got = where.get(frame)
            if got is None:
                continue
            end = _tcp_fields_end(text, got[0], got[1])
            if end is None:
                continue
            out.append(text[prev:end])
            out.append(block)
            prev = end
        out.append(text[prev:])
        return b"".join(out)

    def apply_tree(self, frame: int, text: bytes) -> bytes:
        """``text``, the tree of frame number ``frame`` alone (``-V``; frames come in order), with tshark's
        SEQ/ACK analysis after its TCP header's fields if it has one: :meth:`apply_trees` of one frame,
        without looking for the frames' first lines in the text."""
        block = self._tree_of(frame)
        end = None if block is None else _tcp_fields_end(text, 0, len(text))
        return text if block is None or end is None else b"".join((text[:end], block, text[end:]))

    def _tree_of(self, frame: int) -> bytes | None:
        """The SEQ/ACK analysis lines of frame number ``frame`` (frames come in order), None without any."""
        self._read_upto(frame)
        pending = self.pending
        while pending and pending[0][0] < frame:
            pending.popleft()
        if not pending or pending[0][0] != frame:
            return None
        block = pending.popleft()[1]
        return block.tree() if isinstance(block, Later) else block

    def tree_pieces(self, frame: int, text: bytes | memoryview, end: int | None) -> tuple[bytes | memoryview, ...]:
        """:meth:`apply_tree` of a TCP segment's tree whose header's fields end at ``end`` (None: not known,
        looked for), as the pieces to write one after the other (no copy of ``text``, perhaps a view)."""
        block = self._tree_of(frame)
        if block is None:
            return (text,)
        if end is None:
            end = _tcp_fields_end(bytes(text), 0, len(text))
            if end is None:
                return (text,)
        return text[:end], block, text[end:]

    def apply_json(self, text: str) -> str:
        """``text``, the next frames' ``-T json`` text, in order, with the ``tcp.analysis`` member of each
        segment that has one (:func:`~rdmalab.capture.tcp_analysis.insert_json`)."""
        at = text.rfind(_JSON_NUMBER_KEY)  # (the last frame's number: found from the end)
        m = _JSON_NUMBER.match(text, at) if at >= 0 else None
        if m is None:
            return text
        last = int(m.group(1))
        self._read_upto(last)
        if not self.pending or self.pending[0][0] > last:  # (the segments' members put in already: json_frame)
            return text
        return insert_json(text, self.pending)

    def json_frame(self, frame: int, text: str) -> str:
        """``text``, the ``-T json`` text of frame ``frame`` alone, with its ``tcp.analysis`` member put in
        (:func:`~rdmalab.capture.tcp_analysis.insert_json_one`) if it has one; the frames before it are left to
        :meth:`apply_json` (a member of one of them, which seldom has one, stays in :attr:`pending` for it)."""
        self._read_upto(frame)
        pending = self.pending
        if not pending or pending[0][0] > frame:
            return text
        if pending[0][0] == frame:
            return insert_json_one(text, pending.popleft()[1])  # type: ignore[arg-type]  # (json: its members)
        for i, (f, lines) in enumerate(pending):  # (behind a frame before it's: seldom)
            if f >= frame:
                if f == frame:
                    del pending[i]
                    return insert_json_one(text, lines)  # type: ignore[arg-type]
                break
        return text

    def apply(self, text: bytes) -> bytes:
        """``text``, the next lines written (one a frame, in order), the prefixes put in."""
        if not text:
            return text
        end = len(text) - 1
        last = _frame_of(text[text.rfind(b"\n", 0, end) + 1:end])
        if last is None:
            return text
        self._read_upto(last)
        pending = self.pending
        if not pending or pending[0][0] > last:
            return text
        lines = text.split(b"\n")
        first = _frame_of(lines[0])
        at: dict[int, int] | None = None
        if first is None or first + len(lines) - 2 != last:  # (not every frame's line: a filter's)
            at = {}
            for i, line in enumerate(lines[:-1]):
                f = _frame_of(line)
                if f is not None:
                    at[f] = i
            first = 0
        while pending and pending[0][0] <= last:
            f, prefix = pending.popleft()
            i = f - first if at is None else at.get(f, -1)
            if i >= 0:
                lines[i] = with_prefix(lines[i], prefix)
        return b"\n".join(lines)


_FPDU_NAMES = _table([rdmap_opcode_name(op) for _t, op in FPDU_KINDS])
_LAST = _table([" [more]", " [last]"])


def _fpdu_chains(tb: _TcpBlock, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, ...]]:
    """:func:`~rdmalab.capture.columnar_tcp.fpdu_chains` of the segments ``lo:hi`` of ``tb``."""
    return fpdu_chains(tb.buf, tb.offset[lo:hi] + tb.payload[lo:hi], tb.length[lo:hi])


def _field_at(cls: Any, name: str, base: int) -> tuple[int, int]:
    """Where field ``name`` of header ``cls`` lies in an FPDU whose header ``cls`` begins at octet ``base``:
    its first octet and its size in octets (the field a whole number of octets)."""
    f = cls.LAYOUT.field(name)
    assert f.bit_offset % 8 == 0 and f.bits % 8 == 0, (cls.__name__, name)
    return base + f.byte_start, f.bits // 8


_DDP_AT = MPA_HEADER_SIZE
_RR_AT = MPA_HEADER_SIZE + DDP_UNTAGGED_SIZE
#: (first octet, size) in an FPDU of the fields its Summary says
_STAG, _TO = _field_at(DDPTagged, "stag", _DDP_AT), _field_at(DDPTagged, "to", _DDP_AT)
_QN, _MSN, _MO = (_field_at(DDPUntagged, name, _DDP_AT) for name in ("qn", "msn", "mo"))
_SINK_STAG, _SINK_TO, _RR_SIZE, _SRC_STAG, _SRC_TO = (
    _field_at(ReadRequest, name, _RR_AT) for name in ("sink_stag", "sink_to", "size", "src_stag", "src_to"))


def fpdu_words(buf: np.ndarray, fpdus: tuple[np.ndarray, ...]) -> np.ndarray:
    """The Summary of each FPDU :func:`~rdmalab.capture.columnar_tcp.fpdu_chains` describes (``fpdus``: its
    FPDUs' columns; their octets in ``buf``, uint8), as :func:`rdmalab.wire.iwarp.summarize_fpdu` says the
    FPDU :func:`~rdmalab.wire.iwarp.decode_fpdu` makes of them: one row of bytes each (0: no character).
    The summary lines' lane of whole FPDUs (:func:`_lane_lines`) and the trees' (:mod:`.tree_templates`)
    both write their FPDUs' words with it."""
    _seg, at, ul, tagged, kind, ctl = fpdus
    n = len(at)

    def word(place: tuple[int, int], where: np.ndarray) -> np.ndarray:
        off, size = place
        out = np.zeros(n, dtype=np.uint64)
        out[where] = _be_words(buf, at[where] + off, size)  # (only where the field is: the others may end before)
        return out

    t, u = tagged == 1, tagged == 0
    parts: list[np.ndarray] = [_FPDU_NAMES[kind]]
    text = partial(_where_text, parts, n)

    text(t, " STag=0x", _hex(word(_STAG, t), 8, prefix=False), " TO=0x", _varhex(word(_TO, t)))
    text(u, " QN=", _dec(word(_QN, u)), " MSN=", _dec(word(_MSN, u)), " MO=", _dec(word(_MO, u)))
    parts.append(_LAST[(ctl >> 6) & 1])
    rr = kind == READ_REQUEST_KIND
    text(rr, " sink=0x", _hex(word(_SINK_STAG, rr), 8, prefix=False), "@0x", _varhex(word(_SINK_TO, rr)),
         " src=0x", _hex(word(_SRC_STAG, rr), 8, prefix=False), "@0x", _varhex(word(_SRC_TO, rr)),
         " len=", _dec(word(_RR_SIZE, rr)))
    pay = (ul - FPDU_HEADERS[kind]).astype(np.uint64)
    text(pay > 0, " payload=", _dec(pay))
    return np.hstack(parts)


def _lane_lines(tb: _TcpBlock, lo: int, k: int, lane: list[int], fpdus: tuple[np.ndarray, ...],
                ) -> tuple[np.ndarray, np.ndarray, list[tuple[np.ndarray, bytes, np.ndarray]]]:
    """The lines of the segments ``lane`` among the ``k`` segments from ``lo`` on (the iWARP
    tracker took their FPDUs in step: each is an FPDU :func:`_fpdu_chains` describes), their
    FPDUs' summaries :func:`rdmalab.wire.iwarp.summarize_fpdu`'s text, ``; `` between two: the
    segments of one FPDU (ascending, of the ``k``) and their lines as a byte matrix (0: no
    character), those of several as sources for :func:`_merge` (their heads, FPDUs and newlines)."""
    seg, at, ul, tagged, kind, ctl = fpdus
    rows = np.asarray(lane, dtype=np.int64)
    take = np.isin(seg, rows)
    seg = seg[take]
    n = len(seg)
    words = fpdu_words(np.frombuffer(tb.buf, dtype=np.uint8), tuple(c[take] for c in fpdus))
    first = np.r_[True, seg[1:] != seg[:-1]] if n else np.zeros(0, dtype=bool)
    sep = _const("; ", n).copy()
    sep[first] = 0
    m = np.hstack([sep, words])
    # a segment of one FPDU (most): its line as a row of a matrix of the run's segments
    count = np.bincount(seg, minlength=k)
    one = np.flatnonzero(count[seg] == 1)
    single = seg[one]
    ihead = tb.ihead[lo:lo + k]
    lines = np.hstack([ihead[single], m[one], _const("\n", len(one))])
    many = count[rows] > 1
    if not many.any():
        return single, lines, []
    # several: the heads, the FPDUs and the newlines as sources of their own
    rows = rows[many]
    several = np.flatnonzero(count[seg] > 1)
    m = m[several]
    f_at = np.zeros(len(several) + 1, dtype=np.int64)
    np.cumsum(_width(m), out=f_at[1:])
    h = ihead[rows]
    h_at = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(_width(h), out=h_at[1:])
    block_rows = tb.rows[lo + rows]
    return single, lines, [(block_rows, h.tobytes().translate(None, b"\0"), h_at),
                   (tb.rows[lo + seg[several]], m.tobytes().translate(None, b"\0"), f_at),
                   (block_rows, b"\n" * len(rows), np.arange(len(rows) + 1, dtype=np.int64))]


def _lines(rows: np.ndarray, m: np.ndarray) -> tuple[np.ndarray, bytes, np.ndarray]:
    """A source for :func:`_merge`: the lines of ``rows`` given as a byte matrix (0: no character;
    each row one line, ending in its only newline)."""
    # bytes.translate deletes the 0 bytes in one C pass
    text = m.tobytes().translate(None, b"\0")
    at = np.zeros(len(rows) + 1, dtype=np.int64)
    ends = np.flatnonzero(np.frombuffer(text, dtype=np.uint8) == 10) + 1
    if len(ends) == len(rows):
        at[1:] = ends
    else:  # a newline inside a line after all: where each row's text ends, counted
        np.cumsum(_width(m), out=at[1:])
    return rows, text, at


def _distinct_rows(m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct rows of a byte matrix, as ``np.unique(..., return_index=True,
    return_inverse=True)`` gives them for rows as single values (in the order of their bytes): the
    first row of each and each row's number among them.  The rows are read as big-endian 64-bit
    words and sorted by them (a few integer sorts, not a sort of byte strings)."""
    n, w = m.shape
    pad = np.zeros((n, -(-w // 8) * 8), dtype=np.uint8)
    pad[:, :w] = m
    words = pad.view(">u8").astype(np.uint64)
    order = np.lexsort(words.T[::-1])  # stable: the first of equal rows first
    s = words[order]
    new = np.ones(n, dtype=bool)
    if n > 1:
        new[1:] = (s[1:] != s[:-1]).any(axis=1)
    inv = np.empty(n, dtype=np.int64)
    inv[order] = np.cumsum(new) - 1
    return order[new], inv


def _directions(ends: np.ndarray) -> tuple[list[Any], np.ndarray, list[Any], np.ndarray]:
    """The directions of segments with ``ends`` (:attr:`_TcpBlock.ends`): the tracker's (addresses as
    text: IPv4 and IPv6 apart) and each segment's among them, the window scaling's (addresses as
    integers, as render.TcpWindowScaling.window keys them) and each segment's among them."""
    one, inv = _distinct_rows(ends)
    e1 = ends[one].tolist()
    tkeys = [(_ip_text(bool(e[0]), bytes(e[1:17])), e[33] << 8 | e[34], _ip_text(bool(e[0]), bytes(e[17:33])),
              e[35] << 8 | e[36]) for e in e1]
    w_ends = np.ascontiguousarray(ends[:, 1:])
    wone, winv = _distinct_rows(w_ends)
    wkeys = [(int.from_bytes(bytes(e[0:16]), "big"), e[32] << 8 | e[33], int.from_bytes(bytes(e[16:32]), "big"),
              e[34] << 8 | e[35]) for e in w_ends[wone].tolist()]
    return tkeys, inv, wkeys, winv


def _ip_text(six: bool, a: bytes) -> str:
    """An address as the iWARP tracker names it (:meth:`IwarpTracker._addresses`)."""
    if six:
        return str(ipaddress.IPv6Address(a))
    return f"{a[12]}.{a[13]}.{a[14]}.{a[15]}"


class _Given(TcpWindowScaling):
    """One segment's window, already scaled (for the per-packet path of a segment whose scaled
    window :meth:`TcpWindowScaling.update_many` gave)."""

    def __init__(self, window: int) -> None:
        super().__init__()
        self._window = window

    def window(self, pkt: Any) -> int:
        return self._window


def _run_text(first: int, tb: _TcpBlock, run: _Run, t0: int, tracker: Any, windows: TcpWindowScaling,
              lenient: bool) -> tuple[bytes, BaseException | None]:
    """The lines of a :class:`_Run`: its clean TCP segments fed, in capture order, to the iWARP
    tracker and the window scaling as :func:`rdmalab.capture.reader.decode_record` and
    :func:`summary_line` feed them, a block of them at a time, and put between the lines already
    written.  A segment that completes iWARP PDUs is written from them; one the tracker fails on
    by the per-packet path.  The error that stops the lines (``lenient=False``), if any, with the
    lines before it."""
    lo, hi = run.lo, run.hi
    k = hi - lo
    flags = tb.flags[lo:hi]
    if tb.dirs is None:
        tb.dirs = _directions(tb.ends)
    tkeys, inv, wkeys, winv = tb.dirs
    inv, winv = inv[lo:hi], winv[lo:hi]
    buf = tb.buf
    base = tb.offset[lo:hi]
    pay = tb.payload[lo:hi]
    assert tb.wscale is not None
    wscale = tb.wscale[lo:hi]

    def shift(i: int) -> int | None:
        got = int(wscale[i])
        return None if got < 0 else got

    frames = (first + tb.rows[lo:hi]).tolist()
    pdus: dict[int, list[Any]] = {}
    errors: dict[int, Exception] = {}
    lane: list[int] = []
    paired: list[int] = []
    if tracker is not None:
        length = tb.length[lo:hi]
        start = base + pay

        def payload(i: int) -> bytes:
            a = int(start[i])
            return bytes(buf[a:a + int(length[i])])

        assert tb.whole_crc is not None and tb.whole_plain is not None
        assert tb.pair_of is not None and tb.pair_crc is not None and tb.pair_plain is not None
        partner = tb.pair_of[lo:hi]
        partner = np.where((partner >= lo) & (partner < hi), partner - lo, -1)  # pairs within the run
        pdus, errors, lane, paired = tracker.process_many(
            frames, tkeys, inv, tb.seq[lo:hi].tolist(), flags, length, payload,
            (tb.whole_crc[lo:hi], tb.whole_plain[lo:hi]), (partner, tb.pair_crc[lo:hi], tb.pair_plain[lo:hi]))
    stop: BaseException | None = None
    if errors and not lenient:
        i = min(errors)
        stop = errors[i]
        if isinstance(stop, DecodeError):
            stop.frame_number = frames[i]  # type: ignore[attr-defined]
        pdus = {r: p for r, p in pdus.items() if r < i}
        lane = [r for r in lane if r < i]
        paired = [r for r in paired if r < i]
        errors = {}
        k = i  # the lines before it
    else:
        errors = {r: e for r, e in errors.items() if not isinstance(e, DecodeError)}  # those return nothing
    scaled = windows.update_many(wkeys, winv, flags, tb.window[lo:hi], shift)
    plain = np.ones(hi - lo, dtype=bool)
    plain[k:] = False
    special = sorted([*pdus, *errors])
    plain[special] = False
    plain[lane] = False
    plain[paired] = False
    sources = [(run.rows, run.text, run.at)]
    picked: list[tuple[np.ndarray, bytes, np.ndarray, np.ndarray]] = []
    if plain.all():
        sources.append(_lines(tb.rows[lo:hi], np.hstack([tb.head[lo:hi], _dec(scaled.astype(np.uint64)),
                                                         tb.tail[lo:hi]])))
    else:
        pr = np.flatnonzero(plain)
        plain_m = np.hstack([tb.head[lo + pr], _dec(scaled[pr].astype(np.uint64)), tb.tail[lo + pr]])
        if lane or paired:
            ones: list[np.ndarray] = []
            mats: list[np.ndarray] = []
            for made, taken in ((tb.lane, lane), (tb.pair, paired)):
                if taken:
                    assert made is not None
                    li = np.asarray(taken, dtype=np.int64)
                    one, m1, more = made.pick(lo + li, tb.rows[lo + li])
                    ones.append(li[one])
                    mats.append(m1)
                    picked += more
            single = np.concatenate(ones)
            # the plain lines and the lane's in one matrix (in row order), as wide as the widest
            shown = plain.copy()
            shown[single] = True
            at_row = np.cumsum(shown) - 1
            m = np.zeros((len(pr) + len(single), max(plain_m.shape[1], *(x.shape[1] for x in mats))), dtype=np.uint8)
            m[at_row[pr], :plain_m.shape[1]] = plain_m
            at = 0
            for x in mats:
                m[at_row[single[at:at + len(x)]], :x.shape[1]] = x
                at += len(x)
            sources.append(_lines(tb.rows[lo:hi][shown], m))
        else:
            sources.append(_lines(tb.rows[lo + pr], plain_m))
    if special:
        lines = []
        for i in special:
            frame, ts, wire = frames[i], float(tb.seconds[lo + i]), int(tb.wire[lo + i])
            ns, digits = record_ns(ts, int(tb.ns[lo + i])), int(tb.digits[lo + i])
            if i in pdus:
                # an iWARP frame: render.summary_line's text for it, from what is known without decoding
                # the frame again (a clean segment has no problems of its own: only its PDUs' are shown)
                got = pdus[i]
                pdu_text = "; ".join(p.summary() for p in got)
                for p in got:
                    if p.problems and str(p.problems[0]) not in pdu_text:
                        pdu_text += f" [{len(p.problems)} problem(s): {p.problems[0]}]"
                lines.append((format_summary(frame, time_text(ns - t0, digits), tkeys[inv[i]][0], tkeys[inv[i]][2], "iWARP",
                                             wire or int(tb.caplen[lo + i]), pdu_text)
                              + "\n").encode())
                continue
            err = errors[i]
            o = int(base[i])
            cp = decode_record(RawRecord(frame, ts, int(tb.linktype[lo + i]), bytes(buf[o:o + int(tb.caplen[lo + i])]),
                                         wire, int(tb.interface[lo + i]), ns, digits, int(tb.fcs[lo + i])),
                               lenient=lenient)
            cp.packet.internal_error = f"iWARP tracker: {type(err).__name__}: {err}"
            lines.append((summary_line(cp, t0, _Given(int(scaled[i]))) + "\n").encode())
        at2 = np.zeros(len(lines) + 1, dtype=np.int64)
        np.cumsum([len(x) for x in lines], out=at2[1:])
        sources.append((tb.rows[lo:hi][special], b"".join(lines), at2))
    text, rows, starts = _merge(sources, picked)
    if tb.keep is not None and not tb.keep[lo:hi].all():  # (a filter's: the lines of the segments it drops out)
        keep = ~np.isin(rows, tb.rows[lo:hi][~tb.keep[lo:hi]])
        text = np.frombuffer(text, dtype=np.uint8)[np.repeat(keep, np.diff(starts))].tobytes()
        rows = rows[keep]
        starts = np.concatenate(([0], np.cumsum(np.diff(starts)[keep])))
    if stop is not None:
        cut = int(np.searchsorted(rows, tb.rows[lo + k]))
        text = text[:starts[cut]]
    return text, stop


#: The columns the summary lines read (decode_block skips the work for the others).
#: (ip.hdr_len and ip.flags: what _fast_rows and _quoting_rows check, with a filter on other fields too)
_FIELDS = ("frame.number", "ip.src", "ip.dst", "ip.hdr_len", "ip.flags", "ipv6.src", "ipv6.dst", "udp.length", "infiniband.bth",
           "infiniband.reth", "infiniband.atomiceth", "infiniband.aeth", "infiniband.deth", "infiniband.immdt",
           "rdmalab.payload.len", "rdmalab.bth", "rdmalab.icrc")
