"""iWARP on the wire: MPA frames and FPDUs <-> :class:`~rdmalab.wire.packet.Packet`, and builders.

The three iWARP layers are MPA (RFC 5044, framing on TCP; :mod:`rdmalab.wire.mpa`), DDP
(RFC 5041) and RDMAP (RFC 5040 + RFC 7306; :mod:`rdmalab.wire.rdmap`).  This module ties them:

* :func:`decode_fpdu` / :func:`encode_fpdu`: one FPDU, byte-exact both ways, CRC32c checked,
  markers stripped and checked (or inserted);
* :func:`decode_mpa_frame` / :func:`encode_mpa_frame`: the MPA Request/Reply frames;
* :func:`decode_ulpdu`: the DDP segment inside an FPDU (DDP + RDMAP headers and payload);
* builders that return a ULPDU (DDP + RDMAP bytes) for each RDMAP message, and
  :func:`segment_tagged` / :func:`segment_untagged` to cut a message into DDP segments that fit
  an MULPDU.

A decoded FPDU is a :class:`Packet` with ``encap="iwarp"`` whose ``data`` is the FPDU *without
markers* (so the headers are contiguous); the wire bytes and the markers are in
``extra["wire"]`` and ``extra["markers"]`` (a list of ``(wire_offset, MPAMarker)``).  Its layers
are ``MPA`` (offset 0), ``DDP`` (offset 2), ``RDMAP`` (offset 3, overlapping the DDP header's
RsvdULP octets, as in Wireshark's tree) and the message's own headers.  ``crc`` is the CRC field
as a little-endian integer, ``crc_expected`` the CRC32c of the covered octets.

The stateful part (TCP reassembly, MPA negotiation, mid-stream resynchronisation) is
:mod:`rdmalab.capture.iwarp`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rdmalab.wire import crc as _crc
from rdmalab.wire.errors import DecodeError, EncodeError, MalformedError, TruncatedError
from rdmalab.wire.header import Header
from rdmalab.wire.mpa import (
    MARKER_SIZE,
    MAX_ULPDU,
    MPA,
    MPA_CRC_SIZE,
    MPA_FLAG_ENHANCED,
    MPA_HEADER_SIZE,
    MPA_KEY_REP_INT,
    MPA_KEY_REQ_INT,
    MPA_PD_MAX,
    MPA_V2_NO_IRD_ORD,
    MPAMarker,
    MPAReqRep,
    MPAv2IRDORD,
    fpdu_length,
    frame_fpdu,
    gather,
    pad_length,
    ulpdu_length_at,
)
from rdmalab.wire.packet import Layer, Packet
from rdmalab.wire.rdmap import (
    ATOMIC_FETCH_ADD,
    OP_ATOMIC_REQUEST,
    OP_ATOMIC_RESPONSE,
    OP_IMMEDIATE_DATA,
    OP_IMMEDIATE_DATA_SE,
    OP_READ_REQUEST,
    OP_READ_RESPONSE,
    OP_SEND,
    OP_SEND_INVALIDATE,
    OP_SEND_SE,
    OP_SEND_SE_INVALIDATE,
    OP_TERMINATE,
    OP_WRITE,
    QN_ATOMIC,
    QN_READ_REQUEST,
    QN_SEND,
    QN_TERMINATE,
    RDMAP_OPCODES,
    RDMAP_VERSION,
    AtomicRequest,
    AtomicResponse,
    DDPTagged,
    DDPUntagged,
    ImmediateData,
    RDMAPControl,
    RDMAPUntagged,
    ReadRequest,
    Terminate,
    TerminatedDDPTagged,
    TerminatedDDPUntagged,
    TerminatedRDMAP,
    TerminateSegLen,
    rdmap_opcode_name,
)

Buffer = bytes | bytearray | memoryview

DDP_TAGGED_SIZE = 14
DDP_UNTAGGED_SIZE = 18


def _problem(pkt: Packet, err: DecodeError, lenient: bool) -> None:
    if not lenient:
        raise err
    pkt.problems.append(err)


def rdmap_control_byte(opcode: int) -> int:
    """The RDMAP control byte for ``opcode`` (RV = 1)."""
    return (RDMAP_VERSION << 6) | (opcode & 0x0F)


# ============================================================================ ULPDU (DDP + RDMAP)


def decode_cut_fpdu(data: bytes, wire_length: int) -> Packet:
    """An FPDU (without markers) the capture cut short, as a snap length cuts a segment: ``data`` the
    octets of it captured, ``wire_length`` its octets on the wire.  Its MPA header, then its DDP and
    RDMAP headers and the headers its opcode names, as far as they were captured whole (a header the
    capture cut is not shown); the captured octets after them are its payload (its length on the wire in
    ``payload_wire`` when the cut is in it); its CRC was not captured (no verdict); a truncated
    problem says how much of it the capture holds.  Raises
    :class:`TruncatedError` when not even its MPA header was captured."""
    if len(data) < MPA_HEADER_SIZE:
        raise TruncatedError("MPA", "ulpdu_length", 0, len(data), f"{MPA_HEADER_SIZE} bytes for the MPA header")
    ulpdu_len = ulpdu_length_at(data, 0)
    pkt = Packet(bytes(data), encap="iwarp")
    pkt.layers.append(Layer(MPA(ulpdu_len), 0))
    pkt.problems.append(TruncatedError("MPA", "ulpdu_length", 0, ulpdu_len,
                                       f"at most the {len(data) - MPA_HEADER_SIZE} octets captured after it "
                                       f"({len(data)} of the FPDU's {wire_length})"))
    end = min(len(data), MPA_HEADER_SIZE + ulpdu_len)
    offset = MPA_HEADER_SIZE
    pkt.payload_offset, pkt.payload_length = end, 0  # (a DDP header cut part way: no payload)
    pkt.zero_length = ulpdu_len == 0
    tagged = data[offset] >> 7 if end > offset else 0
    size = DDP_TAGGED_SIZE if tagged else DDP_UNTAGGED_SIZE
    if end - offset >= size:
        rdmap_op = data[offset + 1] & 0x0F
        info = RDMAP_OPCODES.get(rdmap_op)
        headers = None if info is None or info.tagged != bool(tagged) or rdmap_op == OP_TERMINATE else \
            size + sum(cls.LAYOUT.size for cls in info.headers)
        if headers is not None and end - offset >= headers:  # every header there whole: as a whole FPDU's
            decode_ulpdu(data, pkt, offset, end, lenient=True)
            if end < MPA_HEADER_SIZE + ulpdu_len:  # the cut is in the payload: its length on the wire
                pkt.payload_wire = MPA_HEADER_SIZE + ulpdu_len - pkt.payload_offset
        else:  # the DDP and RDMAP headers alone (those after them cut, or not known)
            _ddp_rdmap(data, pkt, offset, tagged, True)
            pkt.payload_offset = offset + size  # (what follows: a header cut part way, no payload)
    pkt.info = summarize_fpdu(pkt)
    return pkt


def _ddp_rdmap(data: bytes, pkt: Packet, offset: int, tagged: int, lenient: bool) -> RDMAPControl | RDMAPUntagged:
    """The DDP header at ``offset`` (tagged or not) and the RDMAP control field in it, each a layer of
    ``pkt`` with the problems its checks find; the RDMAP header returned."""
    ddp: DDPTagged | DDPUntagged = DDPTagged.decode(data, offset) if tagged else DDPUntagged.decode(data, offset)
    pkt.layers.append(Layer(ddp, offset))
    for p in ddp.check(offset):
        _problem(pkt, p, lenient)
    rdmap: RDMAPControl | RDMAPUntagged = (
        RDMAPControl.decode(data, offset + 1) if tagged else RDMAPUntagged.decode(data, offset + 1)
    )
    pkt.layers.append(Layer(rdmap, offset + 1))
    for p in rdmap.check(offset + 1):
        _problem(pkt, p, lenient)
    return rdmap


def decode_ulpdu(data: bytes, pkt: Packet, offset: int, end: int, *, lenient: bool = False) -> None:
    """Decode the DDP segment ``data[offset:end]`` into ``pkt`` (layers, payload).

    A zero-length ULPDU (an RFC 6581 zero-length FPDU, e.g. a Send RTR) gets no layers.
    """
    length = end - offset
    pkt.payload_offset, pkt.payload_length = offset, 0
    if length == 0:
        pkt.zero_length = True
        return
    tagged = data[offset] >> 7
    size = DDP_TAGGED_SIZE if tagged else DDP_UNTAGGED_SIZE
    if length < size:
        _problem(pkt, MalformedError("MPA", "ulpdu_length", offset - 2, length,
                                     f"at least {size} (the {'tagged' if tagged else 'untagged'} DDP header)"),
                 lenient)
        pkt.payload_offset, pkt.payload_length = offset, length
        return
    rdmap = _ddp_rdmap(data, pkt, offset, tagged, lenient)
    pos = offset + size
    info = RDMAP_OPCODES.get(rdmap.opcode)
    if info is None:
        _problem(pkt, MalformedError("RDMAP", "opcode", offset + 1, rdmap.opcode,
                                     "an opcode of RFC 5040/7306 (0x0-0x7, 0xA-0xD)",
                                     detail=rdmap_opcode_name(rdmap.opcode)), lenient)
        pkt.payload_offset, pkt.payload_length = pos, end - pos
        return
    if info.tagged != bool(tagged):
        want = "1 (tagged)" if info.tagged else "0 (untagged)"
        _problem(pkt, MalformedError("DDP", "tagged", offset, tagged, f"{want} for {info.name}"), lenient)
        pkt.payload_offset, pkt.payload_length = pos, end - pos
        return
    for cls in info.headers:
        if pos + cls.LAYOUT.size > end:
            _problem(pkt, MalformedError("MPA", "ulpdu_length", offset - 2, length,
                                         f"room for the {cls.LAYOUT.size}-byte {cls.LAYOUT.name} header "
                                         f"({pos + cls.LAYOUT.size - offset} bytes)"), lenient)
            pkt.payload_offset, pkt.payload_length = pos, end - pos
            return
        h = cls.decode(data, pos)
        pkt.layers.append(Layer(h, pos))
        for p in h.check(pos):
            _problem(pkt, p, lenient)
        pos += cls.LAYOUT.size
        if isinstance(h, Terminate):
            pos = _decode_terminate_parts(data, pkt, h, pos, end, lenient)
    if not info.payload and pos != end:
        _problem(pkt, MalformedError("MPA", "ulpdu_length", offset - 2, length,
                                     f"{pos - offset} (no payload after the headers of {info.name})"), lenient)
    pkt.payload_offset, pkt.payload_length = pos, end - pos


def _decode_terminate_parts(data: bytes, pkt: Packet, term: Terminate, pos: int, end: int, lenient: bool) -> int:
    parts: list[type[Header]] = []
    if term.hdrct_d:
        parts.append(TerminateSegLen)
        # The terminated DDP header says itself whether it is tagged (its T bit).  Wireshark
        # instead picks 14 bytes only when EType is 1 (DDP tagged buffer error).
        at = pos + 2
        tagged = at < end and bool(data[at] & 0x80)
        parts.append(TerminatedDDPTagged if tagged else TerminatedDDPUntagged)
    if term.hdrct_r:
        parts.append(TerminatedRDMAP)
    for cls in parts:
        if pos + cls.LAYOUT.size > end:
            _problem(pkt, MalformedError("RDMAP Terminate", "hdrct", pos, end - pos,
                                         f"{cls.LAYOUT.size} more bytes for the parts the D/R bits announce"),
                     lenient)
            return pos
        h = cls.decode(data, pos)
        pkt.layers.append(Layer(h, pos))
        pos += cls.LAYOUT.size
    return pos


# ============================================================================ FPDU


def decode_fpdu(
    buf: Buffer,
    offset: int = 0,
    *,
    markers: int | None = None,
    crc: bool = True,
    lenient: bool = False,
) -> tuple[Packet, int]:
    """Decode the FPDU at ``buf[offset:]``; return the packet and the wire octets consumed.

    ``markers`` is the FPDU's stream position (octets since the first FPDU of the direction,
    see :mod:`rdmalab.wire.mpa`) when markers were negotiated, else ``None``.  ``crc=False``
    (CRC not negotiated) leaves ``crc_expected`` unset.  Raises :class:`TruncatedError` if the
    buffer ends before the FPDU does (also in lenient mode: there is no FPDU to return).
    """
    ulpdu_len = ulpdu_length_at(buf, offset, markers)
    pad = pad_length(ulpdu_len)
    covered = MPA_HEADER_SIZE + ulpdu_len + pad
    body_markers: list[tuple[int, bytes]]
    crc_markers: list[tuple[int, bytes]]
    try:
        if markers is None and offset + covered + MPA_CRC_SIZE <= len(buf):  # gather's answer, without markers
            body, body_wire, body_markers = bytes(buf[offset : offset + covered]), covered, []
            crc_raw, crc_wire, crc_markers = bytes(buf[offset + covered : offset + covered + MPA_CRC_SIZE]), \
                MPA_CRC_SIZE, []
        else:
            body, body_wire, body_markers = gather(buf, offset, covered, markers)
            crc_pos = None if markers is None else markers + body_wire
            crc_raw, crc_wire, crc_markers = gather(buf, offset + body_wire, MPA_CRC_SIZE, crc_pos)
    except TruncatedError as err:
        raise TruncatedError("MPA", "ulpdu_length", offset, len(buf) - offset,
                             f"{fpdu_length(ulpdu_len)} bytes for an FPDU with ULPDU_Length {ulpdu_len}"
                             + (" (plus markers)" if markers is not None else ""),
                             detail=str(err)) from None
    wire_len = body_wire + crc_wire
    data = body + crc_raw
    pkt = Packet(data, encap="iwarp")
    pkt.layers.append(Layer(MPA(ulpdu_len), 0))
    all_markers = body_markers + [(body_wire + w, raw) for w, raw in crc_markers]
    if markers is not None:
        decoded_markers: list[tuple[int, MPAMarker]] = []
        for w, raw in all_markers:
            m = MPAMarker.decode(raw)
            decoded_markers.append((w, m))
            for p in m.check(offset + w):
                _problem(pkt, p, lenient)
            if m.fpduptr != w & 0xFFFF:
                _problem(pkt, MalformedError("MPA Marker", "fpduptr", offset + w + 2, m.fpduptr,
                                             f"{w} (octets back to this FPDU's header)"), lenient)
        pkt.markers = decoded_markers
        pkt.wire = bytes(buf[offset : offset + wire_len])
    # The CRC covers every wire octet before the CRC field, markers included (a marker due
    # just where the CRC starts comes before it).
    cover = body_wire + (MARKER_SIZE if crc_markers and crc_markers[0][0] == 0 else 0)
    pkt.crc_offset, pkt.crc_kind = covered, "crc32c"
    pkt.crc = int.from_bytes(crc_raw, "little")
    if crc:
        pkt.crc_expected = _crc.crc32c(bytes(buf[offset : offset + cover]) if markers is not None else body)
    pkt.pad = pad
    try:
        decode_ulpdu(data, pkt, MPA_HEADER_SIZE, MPA_HEADER_SIZE + ulpdu_len, lenient=lenient)
    except DecodeError as err:
        if not lenient:
            raise
        pkt.problems.append(err)
    pkt.info = summarize_fpdu(pkt)
    return pkt, wire_len


def encode_fpdu(ulpdu: bytes, crc: bool = True, markers: int | None = None) -> bytes:
    """An FPDU around ``ulpdu`` (DDP + RDMAP bytes): length, pad, CRC32c and markers.

    ``markers`` is the stream position of this FPDU (see :mod:`rdmalab.wire.mpa`), ``None``
    for no markers.
    """
    return frame_fpdu(bytes(ulpdu), crc=crc, markers=markers)


def encode_fpdus(ulpdus: Sequence[bytes], *, crc: bool = True, markers: bool = False, stream_pos: int = 0) -> bytes:
    """Consecutive FPDUs as one byte stream (markers placed across them if asked)."""
    out = bytearray()
    for u in ulpdus:
        out += frame_fpdu(bytes(u), crc=crc, markers=(stream_pos + len(out)) if markers else None)
    return bytes(out)


# ============================================================================ MPA Request / Reply


def decode_mpa_frame(buf: Buffer, offset: int = 0, *, lenient: bool = False) -> tuple[Packet, int]:
    """Decode an MPA Request or Reply frame at ``buf[offset:]``; return it and its length.

    The packet's layers are ``MPA Req/Rep`` and, for an enhanced (Rev 2) frame with at least 4
    octets of private data, ``MPA IRD/ORD``; the payload is the rest of the private data.
    """
    hdr = MPAReqRep.decode(buf, offset)
    total = 20 + hdr.pd_length
    if offset + total > len(buf):
        raise TruncatedError("MPA Req/Rep", "pd_length", offset + 18, hdr.pd_length,
                             f"{hdr.pd_length} bytes of private data, {len(buf) - offset - 20} present")
    data = bytes(buf[offset : offset + total])
    pkt = Packet(data, encap="iwarp")
    pkt.layers.append(Layer(hdr, 0))
    for p in hdr.check(0):
        _problem(pkt, p, lenient)
    pos = 20
    if hdr.rev == 2 and hdr.enhanced:
        if hdr.pd_length < 4:
            _problem(pkt, MalformedError("MPA Req/Rep", "pd_length", 18, hdr.pd_length,
                                         "at least 4 (IRD/ORD words) in an enhanced Rev 2 frame"), lenient)
        else:
            pkt.layers.append(Layer(MPAv2IRDORD.decode(data, 20), 20))
            pos = 24
    pkt.payload_offset, pkt.payload_length = pos, total - pos
    pkt.private_data = data[20:]
    pkt.info = _mpa_summary(pkt)
    return pkt, total


def encode_mpa_frame(
    reply: bool = False,
    *,
    markers: bool = False,
    crc: bool = True,
    reject: bool = False,
    rev: int = 1,
    private_data: bytes = b"",
    ird: int | None = None,
    ord: int | None = None,
    p2p: bool = False,
    rtr_send: bool = False,
    rtr_write: bool = False,
    rtr_read: bool = False,
    res: int | None = None,
) -> bytes:
    """An MPA Request (or Reply) frame.

    With ``rev=2`` the frame is "enhanced" (0x10 flag) and the IRD/ORD words (RFC 6581) lead
    the private data; ``ird``/``ord`` default to 0x3FFF ("none").  ``res`` overrides the
    reserved bits outright (for odd frames in tests).
    """
    pd = bytes(private_data)
    if rev == 2:
        words = MPAv2IRDORD(
            int(p2p), int(rtr_send), MPA_V2_NO_IRD_ORD if ird is None else ird,
            int(rtr_write), int(rtr_read), MPA_V2_NO_IRD_ORD if ord is None else ord,
        ).encode()
        pd = words + pd
        flags = MPA_FLAG_ENHANCED
    else:
        if any(v for v in (ird, ord)) or p2p or rtr_send or rtr_write or rtr_read:
            raise EncodeError("MPA Req/Rep", "rev", rev, "2 for IRD/ORD and RTR options (RFC 6581)")
        flags = 0
    if len(pd) > MPA_PD_MAX:
        raise EncodeError("MPA Req/Rep", "pd_length", len(pd), f"at most {MPA_PD_MAX} octets of private data")
    if reject and not reply:
        raise EncodeError("MPA Req/Rep", "rej_flag", 1, "R only in a Reply")
    hdr = MPAReqRep(
        MPA_KEY_REP_INT if reply else MPA_KEY_REQ_INT, int(markers), int(crc), int(reject),
        flags if res is None else res, rev, len(pd),
    )
    return hdr.encode() + pd


def _mpa_summary(pkt: Packet) -> str:
    hdr = pkt[MPAReqRep]
    kind = "MPA Reply" if hdr.is_reply else "MPA Request" if hdr.is_request else "MPA frame (bad key)"
    flags = [n for n, v in (("M", hdr.marker_flag), ("C", hdr.crc_flag), ("R", hdr.rej_flag)) if v]
    text = f"{kind} Rev {hdr.rev}" + (f" [{' '.join(flags)}]" if flags else "")
    words = pkt.get(MPAv2IRDORD)
    if words is not None:
        text += f" IRD={words.ird} ORD={words.ord}"
        rtr = [n for n, v in (("P2P", words.p2p), ("Send", words.zero_rtr), ("Write", words.write_rtr),
                              ("Read", words.read_rtr)) if v]
        if rtr:
            text += f" RTR[{' '.join(rtr)}]"
    if pkt.payload_length:
        text += f" private_data={pkt.payload_length}"
    return text


# ============================================================================ summaries


def summarize_fpdu(pkt: Packet) -> str:
    """One line for a decoded FPDU, in the spirit of Wireshark's Info column."""
    # the first header of each class, as pkt.get finds it (no header class here subclasses another)
    by_type = {type(la.header): la.header for la in reversed(pkt.layers)}
    get: Any = by_type.get
    if get(MPAReqRep) is not None:
        return _mpa_summary(pkt)
    if pkt.zero_length:
        text = "Zero-length FPDU"
    else:
        ctl = get(RDMAPControl) or get(RDMAPUntagged)
        name = rdmap_opcode_name(ctl.opcode) if ctl is not None else "FPDU"
        parts = [name]
        t = get(DDPTagged)
        u = get(DDPUntagged)
        if t is not None:
            parts.append(f"STag=0x{t.stag:08x} TO=0x{t.to:x}")
        elif u is not None:
            parts.append(f"QN={u.qn} MSN={u.msn} MO={u.mo}")
        ddp = t or u
        if ddp is not None:
            parts.append("[last]" if ddp.last else "[more]")
        rr = get(ReadRequest)
        if rr is not None:
            parts.append(f"sink=0x{rr.sink_stag:08x}@0x{rr.sink_to:x} src=0x{rr.src_stag:08x}@0x{rr.src_to:x} "
                         f"len={rr.size}")
        if isinstance(ctl, RDMAPUntagged) and ctl.opcode in (OP_SEND_INVALIDATE, OP_SEND_SE_INVALIDATE):
            parts.append(f"inv=0x{ctl.inval_stag:08x}")
        term = get(Terminate)
        if term is not None:
            parts.append(f"{term.describe('layer')}/{term.describe('etype')}/{term.describe('errcode')}")
        ar = get(AtomicRequest)
        if ar is not None:
            parts.append(f"{ar.describe('atomic_opcode')} id={ar.req_id} STag=0x{ar.stag:08x} TO=0x{ar.to:x}")
        aresp = get(AtomicResponse)
        if aresp is not None:
            parts.append(f"id={aresp.req_id} value=0x{aresp.value:x}")
        imm = get(ImmediateData)
        if imm is not None:
            parts.append(f"imm=0x{imm.imm_data:016x}")
        if (size := pkt.payload_text()) is not None:
            parts.append(size)
        text = " ".join(parts)
    if pkt.crc_status == "bad":
        text += " [BAD CRC32c]"
    if pkt.problems:
        text += f" [{len(pkt.problems)} problem(s): {pkt.problems[0]}]"
    return text


# ============================================================================ builders (ULPDUs)


def _tagged(opcode: int, stag: int, to: int, payload: bytes, last: bool) -> bytes:
    hdr = DDPTagged(1, int(last), 0, 1, rdmap_control_byte(opcode), stag, to)
    return hdr.encode() + bytes(payload)


def _untagged(opcode: int, qn: int, msn: int, mo: int, last: bool, ulp: int = 0, rest: bytes = b"") -> bytes:
    rsvdulp = (rdmap_control_byte(opcode) << 32) | ulp
    hdr = DDPUntagged(0, int(last), 0, 1, rsvdulp, qn, msn, mo)
    return hdr.encode() + bytes(rest)


def rdma_write(stag: int, to: int, payload: bytes = b"", *, last: bool = True) -> bytes:
    """An RDMA Write segment (tagged, opcode 0x0) into ``stag``/``to``."""
    return _tagged(OP_WRITE, stag, to, payload, last)


def read_request(
    sink_stag: int, sink_to: int, size: int, src_stag: int, src_to: int, *, msn: int = 1
) -> bytes:
    """An RDMA Read Request (untagged QN 1, opcode 0x1)."""
    rr = ReadRequest(sink_stag, sink_to, size, src_stag, src_to).encode()
    return _untagged(OP_READ_REQUEST, QN_READ_REQUEST, msn, 0, True, 0, rr)


def read_response(sink_stag: int, sink_to: int, payload: bytes = b"", *, last: bool = True) -> bytes:
    """An RDMA Read Response segment (tagged, opcode 0x2) to the Read Request's sink."""
    return _tagged(OP_READ_RESPONSE, sink_stag, sink_to, payload, last)


def send(
    payload: bytes = b"",
    *,
    msn: int = 1,
    mo: int = 0,
    last: bool = True,
    se: bool = False,
    inv_stag: int | None = None,
) -> bytes:
    """A Send segment (QN 0): Send, with SE, with Invalidate, or both (opcodes 0x3-0x6)."""
    if inv_stag is None:
        opcode = OP_SEND_SE if se else OP_SEND
    else:
        opcode = OP_SEND_SE_INVALIDATE if se else OP_SEND_INVALIDATE
    return _untagged(opcode, QN_SEND, msn, mo, last, inv_stag or 0, payload)


def terminate(
    layer: int,
    etype: int,
    errcode: int,
    *,
    msn: int = 1,
    ddp_seg_len: int | None = None,
    terminated_ddp: bytes | None = None,
    terminated_rdmap: bytes | None = None,
    m: bool | None = None,
) -> bytes:
    """A Terminate message (untagged QN 2, opcode 0x7).

    ``terminated_ddp`` (14 or 18 bytes) sets D and brings the DDP Segment Length with it
    (``ddp_seg_len``, default: 0 with M clear).  ``terminated_rdmap`` (28 bytes) sets R.
    ``m`` (DDP Segment Length valid) defaults to "a length was given".
    """
    parts: list[bytes] = []
    d = terminated_ddp is not None
    if d:
        assert terminated_ddp is not None
        if len(terminated_ddp) not in (DDP_TAGGED_SIZE, DDP_UNTAGGED_SIZE):
            raise EncodeError("RDMAP Terminate", "terminated_ddp", len(terminated_ddp), "14 or 18 bytes")
        if bool(terminated_ddp[0] & 0x80) != (len(terminated_ddp) == DDP_TAGGED_SIZE):
            raise EncodeError("RDMAP Terminate", "terminated_ddp", bytes(terminated_ddp[:1]).hex(),
                              "a DDP header whose T bit matches its length")
        parts.append(TerminateSegLen(ddp_seg_len or 0).encode())
        parts.append(bytes(terminated_ddp))
    elif ddp_seg_len is not None:
        raise EncodeError("RDMAP Terminate", "ddp_seg_len", ddp_seg_len,
                          "a terminated DDP header too (the length travels with it)")
    if terminated_rdmap is not None:
        if len(terminated_rdmap) != 28:
            raise EncodeError("RDMAP Terminate", "terminated_rdmap", len(terminated_rdmap), "28 bytes")
        parts.append(bytes(terminated_rdmap))
    m_bit = (ddp_seg_len is not None) if m is None else m
    term = Terminate(layer, etype, errcode, int(m_bit), int(d), int(terminated_rdmap is not None), 0)
    return _untagged(OP_TERMINATE, QN_TERMINATE, msn, 0, True, 0, term.encode() + b"".join(parts))


def atomic_request(
    atomic_opcode: int,
    req_id: int,
    stag: int,
    to: int,
    add_swap: int = 0,
    add_swap_mask: int = 0,
    compare: int = 0,
    compare_mask: int = 0,
    *,
    msn: int = 1,
    qn: int = QN_ATOMIC,
) -> bytes:
    """An RFC 7306 Atomic Request (opcode 0xA): 0 FetchAdd, 1 Swap, 2 CompareSwap."""
    body = AtomicRequest(0, atomic_opcode, req_id, stag, to, add_swap, add_swap_mask, compare, compare_mask)
    return _untagged(OP_ATOMIC_REQUEST, qn, msn, 0, True, 0, body.encode())


def fetch_add(req_id: int, stag: int, to: int, add: int, *, msn: int = 1, mask: int = 0) -> bytes:
    """FetchAdd Atomic Request (mask 0 = one 64-bit add, RFC 7306)."""
    return atomic_request(ATOMIC_FETCH_ADD, req_id, stag, to, add, mask, msn=msn)


def atomic_response(req_id: int, value: int, *, msn: int = 1, qn: int = QN_ATOMIC) -> bytes:
    """An RFC 7306 Atomic Response (opcode 0xB) with the original remote value."""
    return _untagged(OP_ATOMIC_RESPONSE, qn, msn, 0, True, 0, AtomicResponse(req_id, value).encode())


def immediate_data(imm: int, *, se: bool = False, msn: int = 1) -> bytes:
    """An RFC 7306 Immediate Data message (0xC, or 0xD with Solicited Event), QN 0."""
    opcode = OP_IMMEDIATE_DATA_SE if se else OP_IMMEDIATE_DATA
    return _untagged(opcode, QN_SEND, msn, 0, True, 0, ImmediateData(imm).encode())


# ============================================================================ segmentation


def _chunks(payload: bytes, room: int) -> list[bytes]:
    if room <= 0:
        raise EncodeError("DDP", "mulpdu", room, "room for at least one payload byte after the DDP header")
    if not payload:
        return [b""]
    return [payload[i : i + room] for i in range(0, len(payload), room)]


def segment_tagged(opcode: int, stag: int, to: int, payload: bytes, mulpdu: int) -> list[bytes]:
    """Cut a tagged message (RDMA Write or Read Response) into ULPDUs of at most ``mulpdu``.

    Each segment's TO advances by the bytes before it; only the last has L set (RFC 5041).
    """
    info = RDMAP_OPCODES.get(opcode)
    if info is None or not info.tagged:
        raise EncodeError("RDMAP", "opcode", opcode, "a tagged message (0x0 RDMA Write, 0x2 Read Response)")
    chunks = _chunks(bytes(payload), min(mulpdu, MAX_ULPDU) - DDP_TAGGED_SIZE)
    out = []
    done = 0
    for i, c in enumerate(chunks):
        out.append(_tagged(opcode, stag, (to + done) & 0xFFFFFFFFFFFFFFFF, c, i == len(chunks) - 1))
        done += len(c)
    return out


def segment_untagged(
    opcode: int, payload: bytes, mulpdu: int, *, msn: int = 1, qn: int | None = None, inv_stag: int = 0
) -> list[bytes]:
    """Cut an untagged message carrying a payload (the Sends) into ULPDUs of at most ``mulpdu``.

    Every segment has the same QN and MSN; MO advances; only the last has L set.
    """
    info = RDMAP_OPCODES.get(opcode)
    if info is None or info.tagged or not info.payload:
        raise EncodeError("RDMAP", "opcode", opcode, "an untagged message with a payload (Send 0x3-0x6)")
    chunks = _chunks(bytes(payload), min(mulpdu, MAX_ULPDU) - DDP_UNTAGGED_SIZE)
    q = info.qn if qn is None else qn
    assert q is not None
    out = []
    done = 0
    for i, c in enumerate(chunks):
        out.append(_untagged(opcode, q, msn, done, i == len(chunks) - 1, inv_stag if info.invalidate else 0, c))
        done += len(c)
    return out


__all__ = [
    # functions
    "decode_fpdu", "encode_fpdu", "encode_fpdus", "decode_ulpdu", "decode_mpa_frame", "encode_mpa_frame",
    "summarize_fpdu", "rdma_write", "read_request", "read_response", "send", "terminate", "atomic_request",
    "fetch_add", "atomic_response", "immediate_data", "segment_tagged", "segment_untagged", "rdmap_control_byte",
    "pad_length", "fpdu_length",
    # headers
    "MPA", "MPAMarker", "MPAReqRep", "MPAv2IRDORD", "DDPTagged", "DDPUntagged", "RDMAPControl", "RDMAPUntagged",
    "ReadRequest", "Terminate", "TerminateSegLen", "TerminatedDDPTagged", "TerminatedDDPUntagged",
    "TerminatedRDMAP", "AtomicRequest", "AtomicResponse", "ImmediateData",
    # tables and constants
    "RDMAP_OPCODES", "rdmap_opcode_name", "DDP_TAGGED_SIZE", "DDP_UNTAGGED_SIZE",
    "OP_WRITE", "OP_READ_REQUEST", "OP_READ_RESPONSE", "OP_SEND", "OP_SEND_INVALIDATE", "OP_SEND_SE",
    "OP_SEND_SE_INVALIDATE", "OP_TERMINATE", "OP_ATOMIC_REQUEST", "OP_ATOMIC_RESPONSE", "OP_IMMEDIATE_DATA",
    "OP_IMMEDIATE_DATA_SE", "QN_SEND", "QN_READ_REQUEST", "QN_TERMINATE", "QN_ATOMIC",
]
