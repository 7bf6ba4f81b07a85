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


# ---------------------------------------------------------------- the handshake performed on the soft engine
def _word(s: Any) -> str:
    return str(s).strip().lower().replace("-", "_").replace(" ", "_")


def _handshake() -> Any:
    from rdmalab.lab.connect import run_connect

    return run_connect()


@exercise("cm.req_psn", "What the REQ's starting PSN becomes", notebook=NB, hints=(
    "Compare the REQ's starting_psn with the sq_psn and rq_psn of both QPs after the connection is up.",
    "One side sends with it, the other expects it: both are right answers, give one.",
))
def _req_psn(answer: Any) -> str:
    run = _handshake()
    expected = "(side, attribute): which QP attribute, on which side, the REQ's starting PSN sets"
    if not isinstance(answer, (tuple, list)) or len(answer) != 2:
        raise Wrong("Give a pair (side, attribute), e.g. ('client', 'sq_psn').", field="answer",
                    given=Said(repr(answer)), expected=expected)
    side, attr = _word(answer[0]), _word(answer[1])
    side = {"active": "client", "passive": "server"}.get(side, side)
    ok = {("server", "sq_psn"), ("client", "rq_psn")}
    if (side, attr) in ok:
        return (f"Yes: the REQ's starting PSN {run.req_psn} is the PSN the server sends from (its sq_psn) and so "
                "the PSN the client expects (its rq_psn); Linux's ib_cm does this (cm_req_handler) and the "
                "capture of rping shows it. The REP's starting PSN numbers the other direction.")
    if (side, attr) in {("client", "sq_psn"), ("server", "rq_psn")}:
        raise Wrong("That is the direction the REP's starting PSN numbers. Look at the first request each side sends.",
                    field="CM_REQ.starting_psn", given=Said(f"{answer[0]!r}, {answer[1]!r}"), expected=expected)
    raise Wrong("Name a side ('client' or 'server') and a QP attribute ('sq_psn' or 'rq_psn').",
                field="CM_REQ.starting_psn", given=Said(repr(tuple(answer))), expected=expected)


@exercise("cm.first_rts", "Which side reaches RTS first", notebook=NB, hints=(
    "Read the QP columns of the step table: after which call does each QP show RTS?",
    "librdmacm moves the passive side's QP to RTR and RTS inside rdma_accept, before the REP leaves.",
))
def _first_rts(answer: Any) -> str:
    run = _handshake()
    first = next(s for s in run.steps if "RTS" in (s.client_qp, s.server_qp))
    who = "server" if first.server_qp == "RTS" else "client"
    expected = "'client' or 'server'"
    if not isinstance(answer, str):
        raise Wrong("Give 'client' or 'server'.", field="answer", given=Said(repr(answer)), expected=expected)
    got = {"active": "client", "passive": "server"}.get(_word(answer), _word(answer))
    if got == who:
        return (f"Right: the {who} is in RTS after '{first.call}', before the REP leaves; the client moves to RTR "
                "and RTS only when the REP arrives, then sends the RTU.")
    raise Wrong("Look at the step where a QP column first shows RTS.", field="QP.state", given=Said(repr(answer)),
                expected=expected)


@exercise("cm.service_id", "What a service ID encodes", notebook=NB, hints=(
    "IBA Annex A11: 0x0000000001 | port space (two bytes) | port (two bytes). rdma_cm writes (ps << 16) + port.",
    "RDMA_PS_TCP is 0x0106, RDMA_PS_UDP 0x0111.",
))
def _service_id(answer: Any) -> str:
    sid = 0x0000000001111C06
    expected = "{'port_space': ..., 'port': ...} read from 0x0000000001111C06"
    if not isinstance(answer, dict) or set(answer) != {"port_space", "port"}:
        raise Wrong("Give a dict with the keys 'port_space' and 'port'.", field="answer", given=Said(repr(answer)),
                    expected=expected)
    ps = as_int(answer["port_space"], "a port space", field="service_id")
    port = as_int(answer["port"], "a port", field="service_id")
    if (ps, port) == ((sid >> 16) & 0xFFFF, sid & 0xFFFF):
        return "Yes: port space 0x0111 (RDMA_PS_UDP: udaddy's), port 7174; rping's would be 0x0000000001061C06."
    if port == 0x061C:
        raise Wrong("Byte order: the service ID is a big-endian number; its low 16 bits are the port.",
                    field="service_id", given=Said(f"port {port}"), expected=expected)
    raise Wrong(f"Split {sid:#018x} into (port_space << 16) + port.", field="service_id",
                given=Said(f"port_space {ps:#x}, port {port}"), expected=expected)
