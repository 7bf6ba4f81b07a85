"""rdmalab.scapy: scapy layers for every RDMA header ``scapy.contrib.roce`` lacks, and
lossless conversion between scapy packets and rdmalab packets.

Importing this package binds the layers into scapy, so that::

    from scapy.all import Ether, IP, UDP, Raw
    from rdmalab.scapy import BTH, RETH

    p = Ether() / IP() / UDP(sport=49152, dport=4791) / BTH(opcode=0x0A) / RETH(va=0x1000, r_key=7, dma_length=4) / Raw(b"abcd")
    Ether(bytes(p))  # BTH / RETH / Raw, ICRC computed by contrib.roce's BTH

The layers are generated from rdmalab's header declarations (:mod:`rdmalab.wire.ib`,
:mod:`rdmalab.wire.mad`, :mod:`rdmalab.wire.cm`, :mod:`rdmalab.wire.iwarp`), and the headers
after a BTH follow rdmalab's opcode table.  contrib.roce's BTH, GRH, AETH and CNPPadding are
reused, not replaced.  See :mod:`rdmalab.scapy.ib` for the two global binding changes made on
import, and :mod:`rdmalab.scapy.iwarp` for iWARP (scapy sees TCP segments, not the MPA stream:
FPDUs are dissected from TCP payload bytes).
"""

from __future__ import annotations

from ._gen import header_from_layer, headers_from_layer, layer_from_header, make_layer, registered_headers, scapy_class
from .convert import (
    compare_layers,
    fix_crcs,
    from_scapy,
    register_decoder,
    scapy_headers,
    scapy_icrc,
    scapy_payload,
    to_scapy,
)
from .ib import (
    AETH,
    BTH,
    DETH,
    FETH,
    GRH,
    IETH,
    LRH,
    RDETH,
    RETH,
    XRCETH,
    AtomicAckETH,
    AtomicETH,
    CNPPadding,
    IBExtHeader,
    ImmDt,
    add_payload_hook,
    install_bindings,
    next_layer_class,
)
from .iwarp import (
    FPDU,
    AtomicRequest,
    AtomicResponse,
    DDPTagged,
    DDPUntagged,
    ImmediateData,
    MPAMarker,
    MPAReqRep,
    MPAv2IRDORD,
    ReadRequest,
    Terminate,
    TerminatedDDPTagged,
    TerminatedDDPUntagged,
    TerminatedRDMAP,
    TerminateSegLen,
    dissect_fpdu,
    dissect_tcp_payload,
)
from .mad import IPCM, MAD, RMPP, CMDrep, CMDreq, CMMra, CMRej, CMRep, CMReq, CMRtu, CMSidrRep, CMSidrReq

install_bindings()

__all__ = [
    "AETH", "BTH", "CNPPadding", "DETH", "FETH", "GRH", "IETH", "LRH", "RDETH", "RETH", "XRCETH",
    "AtomicAckETH", "AtomicETH", "IBExtHeader", "ImmDt",
    "add_payload_hook", "install_bindings", "next_layer_class",
    "compare_layers", "fix_crcs", "from_scapy", "register_decoder", "scapy_headers", "scapy_icrc",
    "scapy_payload", "to_scapy",
    "MAD", "RMPP", "IPCM", "CMReq", "CMMra", "CMRej", "CMRep", "CMRtu", "CMDreq", "CMDrep", "CMSidrReq", "CMSidrRep",
    "MPAReqRep", "MPAv2IRDORD", "MPAMarker", "FPDU", "DDPTagged", "DDPUntagged", "ReadRequest", "Terminate",
    "TerminateSegLen", "TerminatedDDPTagged", "TerminatedDDPUntagged", "TerminatedRDMAP", "AtomicRequest",
    "AtomicResponse", "ImmediateData", "dissect_fpdu", "dissect_tcp_payload",
    "header_from_layer", "headers_from_layer", "layer_from_header", "make_layer", "registered_headers", "scapy_class",
]
