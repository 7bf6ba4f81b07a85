"""The columnar decoder's column names are the names the header declarations give their fields.

Each header field's Wireshark name is declared once, in its ``LAYOUT`` (``rdmalab.wire``); the
scapy layers, the field dictionaries and the trees read it from there.  The column table of
:mod:`rdmalab.capture.columnar` lists which fields become columns; this test keeps every name in
it tied to a declaration, so a renamed or misspelt field cannot drift apart silently.
"""

from __future__ import annotations

import rdmalab.wire.cm
import rdmalab.wire.frame
import rdmalab.wire.iwarp
import rdmalab.wire.pfc  # noqa: F401 - imported for their Header subclasses
from rdmalab.capture.columnar import COLUMNS
from rdmalab.capture.tcp_analysis import LABEL_FIELDS, VALUE_FIELDS
from rdmalab.wire.header import Header
from rdmalab.wire.net import TCP, IPv4

#: columns that are not one declared header field, and why
COMPUTED = {
    "tcp.len": "segment length: IP total length minus the IP and TCP headers",
    "ip.dsfield": "the whole octet of DSCP and ECN; the declaration splits it in two (RFC 2474 3, RFC 3168 5)",
    "infiniband.aeth.syndrome": "the whole syndrome byte; the declaration splits it into reserved/opcode/value",
    "infiniband.invariant.crc": "the ICRC trailer, not a header field",
    "iwarp_mpa.crc": "the MPA CRC32c trailer, not a header field",
    "iwarp_mpa.crc_check": "whether that trailer checks (computed)",
    "tcp.window_size": "the raw window scaled by the shift count of the sender's SYN (RFC 7323 2.2)",
    "tcp.stream": "the TCP conversation's number, in the order of its first frame (render.Conversations)",
    "udp.stream": "the UDP conversation's number, in the order of its first frame (render.Conversations)",
    "tcp.seq": "tcp.seq_raw counted from its direction's SYN (render.Conversations); declared too, by the TCP "
               "header of an ICMP error's quote of an IPv4 datagram (wire.net.TCPQuoted: the number as it is)",
    "tcp.ack": "tcp.ack_raw counted from the other direction's SYN (render.Conversations)",
    "tcp.nxtseq": "the relative tcp.seq after the segment (render.Conversations)",
    # tshark's TCP sequence analysis: each segment against the conversation's segments before it
    **{name: "a label of tshark's TCP sequence analysis (tcp_analysis.TcpAnalysis)" for name in LABEL_FIELDS},
    "tcp.analysis.duplicate_ack_num": "how many duplicate ACKs in a row (tcp_analysis.TcpAnalysis)",
    "tcp.analysis.duplicate_ack_frame": "the frame of the ACK a duplicate ACK repeats (tcp_analysis.TcpAnalysis)",
    **{name: "a value of tshark's TCP sequence analysis tree (tcp_analysis.VALUE_FIELDS)" for name in VALUE_FIELDS},
    # Wireshark names the Terminate's error type and code by the layer that reported the error
    # (packet-iwarp-ddp-rdmap.c); the declaration has one field each, term_etype and term_errcode
    "iwarp_rdma.term_etype_rdma": "term_etype when the layer is RDMAP",
    "iwarp_rdma.term_etype_ddp": "term_etype when the layer is DDP",
    "iwarp_rdma.term_etype_llp": "term_etype when the layer is the LLP (MPA)",
    "iwarp_rdma.term_errcode_rdma": "term_errcode for an RDMAP error",
    "iwarp_rdma.term_errcode_ddp_tagged": "term_errcode for a DDP tagged-buffer error",
    "iwarp_rdma.term_errcode_ddp_untagged": "term_errcode for a DDP untagged-buffer error",
    "iwarp_rdma.term_errcode_llp": "term_errcode for an LLP error",
    # the atomic's add/swap operand: Wireshark names it by the atomic's opcode
    "iwarp_rdma.atomic.swap_data": "add_data of a Swap or CompareSwap",
    "iwarp_rdma.atomic.swap_mask": "add_mask of a Swap or CompareSwap",
    # Wireshark's field of each flag bit; the declaration has the flags as one field
    **{name: f"bit 0x{bit:03x} of tcp.flags" for name, bit in TCP.FLAG_FIELDS},
    **{name: f"bit 0x{bit:x} of ip.flags" for name, bit in IPv4.FLAG_FIELDS},
}


def _declared() -> set[str]:
    names: set[str] = set()
    todo = list(Header.__subclasses__())
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        lay = getattr(cls, "LAYOUT", None)
        if lay is not None:
            names.update(f.ws for f in lay.fields if f.ws)
    return names


def test_every_column_is_a_declared_field_or_a_named_computed_one() -> None:
    declared = _declared()
    for col in COLUMNS:
        if col.name.startswith(("frame.", "rdmalab.")):
            continue  # frame metadata and rdmalab's own (non-Wireshark) columns
        assert col.name in declared or col.name in COMPUTED, (
            f"column {col.name!r} is not declared by any header LAYOUT in rdmalab.wire")


def test_the_computed_list_holds_no_declared_name() -> None:
    declared = _declared()
    assert declared & COMPUTED.keys() == {"tcp.seq"}  # (computed, and a quote's own: see COMPUTED)
    assert COMPUTED.keys() <= {c.name for c in COLUMNS}
