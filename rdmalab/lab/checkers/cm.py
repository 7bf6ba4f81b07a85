"""Checkers for 12-connection-manager: decoded from the real rping capture, then performed on the soft engine.

Per student (:mod:`rdmalab.lab.variant`):

* ``cm.connect``: the port the rping server listens on and the seed of the soft engine's connection.
  The notebook reads the real capture of rping (``captures/rxe_rping.pcap``) with the REQ's service ID
  set to that port (:func:`rping_capture`); the soft engine's connection listens on it and draws its QP
  numbers and starting PSNs from the seed (:func:`connection`).
* ``cm.service_id``: a service ID to take apart (a port space and a port).

Which side numbers which direction, and which side reaches RTS first, are the same for everyone.
"""

from __future__ import annotations

import tempfile
from functools import lru_cache
from pathlib import Path
from random import Random
from typing import Any

from rdmalab import capture
from rdmalab.lab import variant
from rdmalab.lab.connect import run_connect
from rdmalab.lab.core import Said, Wrong, exercise
from rdmalab.lab.env import capture_path
from rdmalab.lab.feedback import as_int, norm_name
from rdmalab.lab.variant import scenario
from rdmalab.wire.cm import RDMA_PS_IB, RDMA_PS_TCP, RDMA_PS_UDP, CMMessage, ip_cm_service_id
from rdmalab.wire.crc import icrc_rocev2
from rdmalab.wire.net import IPv4
from rdmalab.wire.opcodes import OPCODES, Transport

NB = "12-connection-manager"
PORT_SPACES = {RDMA_PS_TCP: "RDMA_PS_TCP", RDMA_PS_UDP: "RDMA_PS_UDP", RDMA_PS_IB: "RDMA_PS_IB"}
_PS_USE = {RDMA_PS_TCP: "a connection's REQ, as rping's", RDMA_PS_UDP: "a UD service's SIDR_REQ, as udaddy's",
           RDMA_PS_IB: "an RDMA_PS_IB cm_id's REQ or SIDR_REQ"}


def _port(r: Random) -> int:
    # below Linux's ephemeral range (32768-60999, where the client's source port comes from), and never a
    # number whose two bytes are equal: its byte-swapped value must be another number
    while True:
        port = r.randrange(1025, 32768)
        if port >> 8 != port & 0xFF:
            return port


@scenario("cm.connect")
def _connect_scenario(r: Random) -> dict[str, Any]:
    return {"port": _port(r), "seed": r.randrange(1, 2**31)}


@scenario("cm.service_id")
def _service_id_scenario(r: Random) -> dict[str, Any]:
    ps = r.choice(sorted(PORT_SPACES))
    return {"service_id": (ps << 16) + _port(r)}


# ---------------------------------------------------------------- the capture of rping, with the student's port
def _read_stored() -> list[Any]:
    return list(capture.read(capture_path("rxe_rping.pcap")))


def _with_service_id(cp: Any, service_id: int) -> Any:
    """A captured REQ with another ServiceID: the 8 bytes replaced and the ICRC computed again (UDP checksum 0)."""
    pkt = cp.packet
    span = next(s for s in pkt.spans() if s.layer == "CM_REQ" and s.field == "service_id")
    ip = next(s for s in pkt.spans() if s.layer == "IPv4").start
    if pkt.crc_offset is None or pkt.crc_status != "good":
        raise ValueError(f"rxe_rping.pcap frame {cp.frame_number}: expected a REQ with a good ICRC")
    b = bytearray(pkt.data)
    b[span.start:span.end] = service_id.to_bytes(span.end - span.start, "big")
    b[pkt.crc_offset:pkt.crc_offset + 4] = icrc_rocev2(b[ip:pkt.crc_offset]).to_bytes(4, "little")
    rec = capture.RawRecord(cp.frame_number, cp.timestamp, cp.linktype, bytes(b), cp.wire_length, cp.interface)
    return capture.decode_record(rec)


@lru_cache(maxsize=64)
def _rping_capture(port: int) -> tuple[Any, ...]:
    out = []
    for cp in _read_stored():
        m = CMMessage.from_packet(cp.packet, lenient=True)
        out.append(_with_service_id(cp, ip_cm_service_id(port)) if m is not None and m.name == "REQ" else cp)
    return tuple(out)


def rping_capture() -> list[Any]:
    """rxe_rping.pcap as your rping would have sent it: the REQ's ServiceID names your scenario's port.

    rping's port appears nowhere else in its packets (rdma_cm puts it only in the REQ's ServiceID), so
    this is, byte for byte, the capture of ``rping -p PORT`` with the same QPs and PSNs."""
    return list(_rping_capture(variant.draw("cm.connect").port))


@lru_cache(maxsize=64)
def _rping_pcap(port: int) -> Path:
    path = Path(tempfile.mkdtemp(prefix="rdmalab-rping-")) / "rxe_rping.pcap"
    capture.write_pcap(path, _rping_capture(port))
    return path


def rping_pcap() -> Path:
    """:func:`rping_capture` written to a pcap file in a temporary directory (for tshark)."""
    return _rping_pcap(variant.draw("cm.connect").port)


def cm_messages() -> list[tuple[Any, Any]]:
    """(captured packet, CMMessage) for every CM MAD in :func:`rping_capture`."""
    out = []
    for cp in rping_capture():
        m = CMMessage.from_packet(cp.packet, lenient=True)
        if m is not None:
            out.append((cp, m))
    return out


@exercise("cm.port", "The port rping listens on", notebook=NB, varies=True, hints=(
    "rdma_cm maps a TCP-style port into the REQ's 64-bit ServiceID (IBA Annex A11): 0x0000000001 | protocol | port.",
    "The port is the low 16 bits of service_id.",
))
def _port_check(answer: Any) -> str:
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
    raise Wrong("Not the port in the REQ's ServiceID (msgs[0][1].body.service_id, in the capture this notebook "
                "read for you).", field="CM_REQ.service_id", expected=expected)


@exercise("cm.psn", "Which CM message numbers which direction?", notebook=NB, hints=(
    "Find the PSN of the first RC request packet each host sends after the RTU.",
    "Compare them with the starting_psn fields of the REQ and the REP.",
))
def _psn(answer: Any) -> str:
    msgs = cm_messages()
    req = next(m for _, m in msgs if m.name == "REQ")
    rep = next(m for _, m in msgs if m.name == "REP")

    first: dict[str, int] = {}
    for cp in rping_capture():
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


def connection() -> Any:
    """Your scenario's connection on the soft engine: ``run_connect(listen_port=port, seed=seed)``."""

    s = variant.draw("cm.connect")
    return run_connect(listen_port=s.port, seed=s.seed)


def _handshake() -> Any:

    return run_connect()


_PSN_KEYS = ("client.sq_psn", "client.rq_psn", "server.sq_psn", "server.rq_psn")
_MEANS = {"sq_psn": "the PSN its QP sends its first request with", "rq_psn": "the PSN its QP expects first"}


@exercise("cm.req_psn", "What the REQ's and the REP's starting PSNs become", notebook=NB, varies=True, hints=(
    "Each starting PSN numbers one direction: the sender's sq_psn is the receiver's rq_psn.",
    "Exercise 2 found, in rping's capture, whose starting PSN each host's first request carries: "
    "the soft engine's CM does as Linux's.",
))
def _req_psn(answer: Any) -> str:
    run = connection()
    msgs = run.messages()
    req = next(m for m in msgs if m.name == "REQ").body.starting_psn
    rep = next(m for m in msgs if m.name == "REP").body.starting_psn
    truth = {f"{side}.{attr}": run.qps[side][attr] for side in ("client", "server") for attr in ("sq_psn", "rq_psn")}
    expected = ("{'client.sq_psn': ..., 'client.rq_psn': ..., 'server.sq_psn': ..., 'server.rq_psn': ...}, "
                "each one of your connection's two starting PSNs")
    if not isinstance(answer, dict) or set(map(str, answer)) != set(_PSN_KEYS):
        raise Wrong("Give a dict with the four keys " + ", ".join(repr(k) for k in _PSN_KEYS) + ".", field="answer",
                    given=Said(f"keys {sorted(map(str, answer))}" if isinstance(answer, dict) else repr(answer)),
                    expected=expected)
    got: dict[str, int] = {}
    for key in _PSN_KEYS:
        if answer[key] is Ellipsis:
            raise Wrong(f"{key} is still ...: give all four.", field=key, given=Said("..."), expected=expected)
        got[key] = as_int(answer[key], f"{key}: a PSN", field=key)
    if got == truth:
        return (f"Yes: the REQ's starting PSN {req} numbers the server-to-client direction (the server's sq_psn, "
                f"the client's rq_psn), the REP's {rep} the client-to-server one. The passive side learns where "
                "to start sending from the REQ; Linux's ib_cm does the same (cm_req_handler), and rping's capture "
                "shows it.")
    for key in _PSN_KEYS:
        if got[key] not in (req, rep):
            raise Wrong(f"{key} = {got[key]} is neither your REQ's nor your REP's starting PSN: take both from "
                        "your connection (mine.messages()).", field=key, given=got[key], expected=expected)
    for sender, receiver in (("client", "server"), ("server", "client")):
        if got[f"{sender}.sq_psn"] != got[f"{receiver}.rq_psn"]:
            raise Wrong(f"{sender}.sq_psn and {receiver}.rq_psn differ, but they number the same packets (from the "
                        f"{sender} to the {receiver}): {_MEANS['sq_psn']} is what the other side expects.",
                        field=f"{receiver}.rq_psn",
                        given=Said(f"{sender}.sq_psn {got[f'{sender}.sq_psn']}, "
                                   f"{receiver}.rq_psn {got[f'{receiver}.rq_psn']}"), expected=expected)
    if got["client.sq_psn"] == got["server.sq_psn"]:
        raise Wrong("Both directions start from the same message's PSN, but each message announces one direction's.",
                    field="client.sq_psn", given=Said(f"both sq_psn {got['client.sq_psn']}"), expected=expected)
    raise Wrong("Each value is one of your starting PSNs, but not on the side it belongs to: look again at "
                "exercise 2, whose starting PSN the first request from each host carries.", field="client.sq_psn",
                given=Said(f"client.sq_psn {got['client.sq_psn']}"), expected=expected)


@exercise("cm.first_rts", "Which side reaches RTS first", notebook=NB, hints=(
    "Read the QP columns of the step table: after which call does each QP show RTS?",
    "librdmacm moves the passive side's QP to RTR and RTS inside rdma_accept, before the REP leaves.",
))
def _first_rts(answer: Any) -> str:
    run = _handshake()
    first = next(s for s in run.steps if "RTS" in (s.client_qp, s.server_qp))
    who = "server" if first.server_qp == "RTS" else "client"
    expected = "the side whose QP column shows RTS first in the step table"
    sides = {"client": "client", "active": "client", "server": "server", "passive": "server"}
    got = sides.get(_word(answer)) if isinstance(answer, str) else None
    if got is None:
        raise Wrong("Name a side, as the step table does: the client or the server.", field="answer",
                    given=Said(repr(answer)), expected=expected)
    if got == who:
        other = "client" if who == "server" else "server"
        return (f"Right: the {who} is in RTS after '{first.call}', before the REP leaves; the {other} moves to RTR "
                "and RTS only when the REP arrives, then sends the RTU.")
    raise Wrong("Not that side. Go down the step table to the first row where a QP column shows RTS: whose column, "
                "and after which call?", field="QP.state", given=Said(repr(answer)), expected=expected)


@exercise("cm.service_id", "What a service ID encodes", notebook=NB, varies=True, hints=(
    "IBA Annex A11: 0x0000000001 | protocol | port. rdma_cm writes (port space << 16) + port: the port space "
    "holds the 0x01 and the protocol byte.",
    "The port is the low 16 bits; the port space the 16 bits above them.",
))
def _service_id(answer: Any) -> str:
    sid = variant.draw("cm.service_id").service_id
    want_ps, want_port = (sid >> 16) & 0xFFFF, sid & 0xFFFF
    expected = "{'port_space': ..., 'port': ...} read from the service ID in your scenario"
    if not isinstance(answer, dict) or set(answer) != {"port_space", "port"}:
        raise Wrong("Give a dict with the keys 'port_space' and 'port'.", field="answer", given=Said(repr(answer)),
                    expected=expected)
    ps = as_int(answer["port_space"], "port_space", field="service_id")
    port = as_int(answer["port"], "port", field="service_id")
    given = Said(f"port_space {ps:#06x}, port {port}")
    if (ps, port) == (want_ps, want_port):
        rping = f"rping's REQ to that port would carry {ip_cm_service_id(want_port):#018x}"
        same = " (as this one)" if want_ps == RDMA_PS_TCP else ""
        return (f"Yes: port space {want_ps:#06x} ({PORT_SPACES.get(want_ps, 'unknown')}: {_PS_USE.get(want_ps, '')}), "
                f"port {want_port}; {rping}{same}.")

    def swapped(v: int) -> int:
        return int.from_bytes(v.to_bytes(2, "little"), "big") if 0 <= v <= 0xFFFF else -1

    if (port, ps) == (want_ps, want_port):
        raise Wrong("The two numbers are in the wrong places: the port is the low 16 bits.", field="service_id",
                    given=given, expected=expected)
    if ps == want_ps:
        why = ("its two bytes are in the wrong order: the service ID is a big-endian number" if port == swapped(want_port)
               else "the port is the low 16 bits of the service ID")
        raise Wrong(f"The port space is right. The port is not: {why}.", field="service_id", given=given,
                    expected=expected)
    if port == want_port:
        why = ("its two bytes are in the wrong order: the service ID is a big-endian number" if ps == swapped(want_ps)
               else "the port space is the 16 bits above the port, the 0x01 of the IP CM prefix included"
               if ps == ((want_ps & 0xFF) if want_ps >> 8 == 1 else -1)
               else "it is the 16 bits above the port")
        raise Wrong(f"The port is right. The port space is not: {why}.", field="service_id", given=given,
                    expected=expected)
    if port == swapped(want_port):
        raise Wrong("Byte order: the service ID is a big-endian number; its low 16 bits are the port.",
                    field="service_id", given=given, expected=expected)
    raise Wrong(f"Neither is right: split {sid:#018x} into (port_space << 16) + port.", field="service_id",
                given=given, expected=expected)
