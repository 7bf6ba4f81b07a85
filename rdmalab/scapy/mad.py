"""Scapy layers for Management Datagrams: the MAD common header, RMPP, the CM messages and the
RDMA IP CM private-data header, generated from :mod:`rdmalab.wire.mad` and
:mod:`rdmalab.wire.cm`.

Where rdmalab's decoder finds a MAD (the payload of a packet with a DETH, addressed to or sent
from QP0/QP1), scapy now dissects one too::

    BTH(opcode=0x64) / DETH(q_key=0x80010000, src_qp=1) / MAD(attr_id=0x10) / CMReq(...) / IPCM(...) / Raw(private data)

After the MAD header: RMPP for the classes that use it (SA, vendor 0x30-0x4F); for the CM class
(0x07) the message its attribute ID names; after a REQ or SIDR_REQ with an RDMA IP CM service
ID, the IP CM header.  What remains (class data, private data) is ``Raw``.
"""

from __future__ import annotations

from scapy.config import conf
from scapy.contrib import roce
from scapy.packet import Packet

from rdmalab.wire import cm, mad
from rdmalab.wire.opcodes import OpcodeInfo

from ._gen import binding_for_layer, make_layer, scapy_class
from .ib import DETH, add_payload_hook, find_under

_MOD = __name__


class MADLayer(Packet):
    """Base of the MAD-family layers: the next layer as rdmalab's MAD decoder chooses it."""

    def guess_payload_class(self, payload: bytes) -> type[Packet]:
        return next_mad_class(self, payload)


MAD = make_layer(mad.MADHeader, name="MAD", base=MADLayer, module=_MOD)
RMPP = make_layer(mad.RMPPHeader, name="RMPP", base=MADLayer, module=_MOD)
IPCM = make_layer(cm.IPCMHeader, name="IPCM", base=MADLayer, module=_MOD)
CMReq = make_layer(cm.CMReq, name="CMReq", base=MADLayer, module=_MOD)
CMMra = make_layer(cm.CMMra, name="CMMra", base=MADLayer, module=_MOD)
CMRej = make_layer(cm.CMRej, name="CMRej", base=MADLayer, module=_MOD)
CMRep = make_layer(cm.CMRep, name="CMRep", base=MADLayer, module=_MOD)
CMRtu = make_layer(cm.CMRtu, name="CMRtu", base=MADLayer, module=_MOD)
CMDreq = make_layer(cm.CMDreq, name="CMDreq", base=MADLayer, module=_MOD)
CMDrep = make_layer(cm.CMDrep, name="CMDrep", base=MADLayer, module=_MOD)
CMSidrReq = make_layer(cm.CMSidrReq, name="CMSidrReq", base=MADLayer, module=_MOD)
CMSidrRep = make_layer(cm.CMSidrRep, name="CMSidrRep", base=MADLayer, module=_MOD)

# Attribute ID -> scapy layer of the CM message (built from rdmalab's CM_MESSAGES).
_CM_LAYERS: dict[int, type[Packet]] = {}


def _cm_layers() -> dict[int, type[Packet]]:
    if not _CM_LAYERS:
        _CM_LAYERS.update({attr: scapy_class(body) for attr, body in cm.CM_MESSAGES.items()})
    return _CM_LAYERS


def next_mad_class(layer: Packet, payload: bytes) -> type[Packet]:
    raw: type[Packet] = conf.raw_layer
    nxt: type[Packet] | None = None
    if isinstance(layer, MAD):
        if mad.class_uses_rmpp(layer.mgmt_class):
            nxt = RMPP
        elif layer.mgmt_class == mad.MGMT_CLASS_CM:
            nxt = _cm_layers().get(layer.attr_id)
    elif isinstance(layer, (CMReq, CMSidrReq)) and cm.is_ip_cm_service_id(layer.service_id):
        nxt = IPCM
    if nxt is None:
        return raw
    b = binding_for_layer(nxt)
    size = b.header.LAYOUT.size if b is not None else 0
    return nxt if len(payload) >= size else raw


def _mad_hook(layer: Packet, bth: Packet, info: OpcodeInfo, payload: bytes) -> type[Packet] | None:
    """rdmalab's own rule, :func:`rdmalab.wire.mad.carries_mad`."""
    deth = find_under(layer, DETH)
    if deth is None or not isinstance(bth, roce.BTH) or len(payload) < mad.MAD_HEADER_SIZE:
        return None
    return MAD if mad.carries_mad(bth.opcode, bth.dqpn, deth.src_qp, len(payload)) else None


add_payload_hook(_mad_hook)

__all__ = [
    "CMDrep", "CMDreq", "CMMra", "CMRej", "CMRep", "CMReq", "CMRtu", "CMSidrRep", "CMSidrReq",
    "IPCM", "MAD", "MADLayer", "RMPP", "next_mad_class",
]
