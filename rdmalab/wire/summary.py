"""One-line packet summaries, in the spirit of tshark's Info column."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rdmalab.wire.ib import AETH, BTH, DETH, RETH, AtomicETH, ImmDt

if TYPE_CHECKING:
    from rdmalab.wire.packet import Packet


def summarize(pkt: Packet) -> str:
    bth = pkt.get(BTH)
    if bth is None:
        hook = pkt.extra.get("summary")
        if isinstance(hook, str):
            return hook
        names = [layer.name for layer in pkt.layers]
        return " / ".join(names) + (f" ({pkt.payload_length} bytes)" if pkt.payload_length else "")
    from rdmalab.wire.opcodes import opcode_name

    parts = [f"{opcode_name(bth.opcode)} QP=0x{bth.destqp:06x} PSN={bth.psn}"]
    if bth.ackreq:
        parts.append("A")
    if bth.se:
        parts.append("SE")
    if bth.fecn:
        parts.append("FECN")
    if bth.becn:
        parts.append("BECN")
    reth = pkt.get(RETH)
    if reth is not None:
        parts.append(f"VA=0x{reth.va:x} rkey=0x{reth.r_key:x} len={reth.dma_length}")
    atomic = pkt.get(AtomicETH)
    if atomic is not None:
        parts.append(f"VA=0x{atomic.va:x} rkey=0x{atomic.r_key:x} swap/add=0x{atomic.swap_add:x} cmp=0x{atomic.compare:x}")
    aeth = pkt.get(AETH)
    if aeth is not None:
        parts.append(f"[{aeth.syndrome_text()}] MSN={aeth.msn}")
    deth = pkt.get(DETH)
    if deth is not None:
        parts.append(f"QKey=0x{deth.q_key:08x} SrcQP=0x{deth.src_qp:06x}")
    imm = pkt.get(ImmDt)
    if imm is not None:
        parts.append(f"Imm=0x{imm.imm:08x}")
    mad = _mad_summary(pkt)
    if mad:
        parts.append(mad)
    elif pkt.payload_length:
        parts.append(f"payload={pkt.payload_length}")
    status = pkt.crc_status
    if status == "bad":
        parts.append("[BAD ICRC]")
    if pkt.problems:
        parts.append(f"[{len(pkt.problems)} problem(s): {pkt.problems[0]}]")
    return " ".join(parts)


def _mad_summary(pkt: Packet) -> str | None:
    """``MAD CM Send ConnectRequest (REQ) 10.0.0.2:35360 -> 10.0.0.1:7174`` for a MAD packet."""
    if not any(layer.name == "MAD" for layer in pkt.layers):
        return None
    from rdmalab.wire.cm import IPCMHeader, parse_ip_cm_service_id
    from rdmalab.wire.mad import MADHeader

    mad = pkt[MADHeader]
    text = f"MAD {mad.class_name} {mad.method_name} {mad.attr_name}"
    ipcm = pkt.get(IPCMHeader)
    if ipcm is not None:
        sids = [getattr(h, "service_id", None) for h in pkt.headers()]
        sid = next((v for v in sids if isinstance(v, int)), None)
        port = parse_ip_cm_service_id(sid) if isinstance(sid, int) else None
        dst = f"{ipcm.dst_address}:{port[1]}" if port else str(ipcm.dst_address)
        text += f" {ipcm.src_address}:{ipcm.src_port} -> {dst}"
    return text
