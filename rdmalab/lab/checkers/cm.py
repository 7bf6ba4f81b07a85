"""Checkers for 12-connection-manager: decoded from the real rping capture."""

from __future__ import annotations

from typing import Any

from rdmalab import capture
from rdmalab.lab.core import Said, Wrong, exercise
from rdmalab.lab.env import capture_path
from rdmalab.lab.feedback import as_int, norm_name
from rdmalab.wire.cm import CMMessage
from rdmalab.wire.net import IPv4
from rdmalab.wire.opcodes import OPCODES, Transport

NB = "12-connection-manager"


def cm_messages() -> list[tuple[Any, Any]]:
    """(captured packet, CMMessage) for every CM MAD in rxe_rping.pcap."""

    out = []
    for cp in capture.read(capture_path("rxe_rping.pcap")):
        m = CMMessage.from_packet(cp.packet, lenient=True)
        if m is not None:
            out.append((cp, m))
    return out


@exercise("cm.port", "The port rping listens on", notebook=NB, hints=(
    "rdma_cm maps a TCP-style port into the REQ's 64-bit ServiceID (IBA Annex A11): 0x0000000001 | protocol | port.",
    "The port is the low 16 bits of service_id.",
))
def _port(answer: Any) -> str:
    req = next(m for _, m in cm_messages() if m.name == "REQ")
    got = as_int(answer, "a port number", field="CM_REQ.service_id")
    expected = "the server's port: the low 16 bits of the REQ's ServiceID"
    if got == req.dst_port:
        return f"Yes: ServiceID {req.body.service_id:#018x} -> protocol {req.protocol} (TCP), port {req.dst_port}."
    if got == req.src_port:
        raise Wrong("That is the client's source port (from the IP CM header); the ServiceID names the server's.",
                    field="CM_REQ.service_id", offset=62, expected=expected)
    if got == req.body.service_id:
        raise Wrong("That is the whole ServiceID; the port is only its low 16 bits.", field="CM_REQ.service_id",
                    expected=expected)
    if got == int.from_bytes(req.dst_port.to_bytes(2, "little"), "big"):
        raise Wrong("Right bytes, wrong byte order: the ServiceID is big-endian.", field="CM_REQ.service_id",
                    expected=expected)
    raise Wrong("Not the port in the REQ's ServiceID.", field="CM_REQ.service_id", expected=expected)


@exercise("cm.psn", "Which CM message numbers which direction?", notebook=NB, hints=(
    "Find the PSN of the first RC request packet each host sends after the RTU.",
    "Compare them with the starting_psn fields of the REQ and the REP.",
))
def _psn(answer: Any) -> str:
    msgs = cm_messages()
    req = next(m for _, m in msgs if m.name == "REQ")
    rep = next(m for _, m in msgs if m.name == "REP")

    first: dict[str, int] = {}
    for cp in capture.read(capture_path("rxe_rping.pcap")):
        bth = cp.packet.bth
        info = OPCODES.get(bth.opcode) if bth is not None else None
        if bth is None or info is None or info.transport != Transport.RC or info.is_response:
            continue
        first.setdefault(cp.packet[IPv4].describe("src"), bth.psn)
    want = {}
    for host, psn in first.items():
        want[host] = "REQ" if psn == req.body.starting_psn else "REP" if psn == rep.body.starting_psn else "?"
    expected = "for each sender IP, 'REQ' or 'REP': the CM message whose starting_psn its first request carries"
    if not isinstance(answer, dict):
        raise Wrong("Give a dict {sender IP: 'REQ' or 'REP'}.", field="answer", expected=expected)
    for host, name in want.items():
        if host not in answer:
            raise Wrong(f"Say which message numbers the packets {host} sends.", field="IPv4.src",
                        given=Said(f"keys {sorted(map(str, answer))}"), expected=f"a key {host!r}")
        if norm_name(answer[host]) != name:
            raise Wrong(f"The first request {host} sends has PSN {first[host]}: compare with both starting PSNs.",
                        field="BTH.psn", given=Said(f"{host}: {answer[host]!r}"), expected=expected)
    return "Right: " + "; ".join(f"{h} sends from the {n}'s starting PSN" for h, n in want.items()) + "."
