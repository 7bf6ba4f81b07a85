"""One rdma_cm connection, step by step, for notebook 12: REQ, REP, RTU, data, DREQ, DREP, timewait.

:func:`run_connect` connects a client on ``soft0`` (10.0.0.1) to a server on ``soft1`` (10.0.0.2)
through the engine's connection manager (:mod:`rdmalab.verbs.cmid` over
:mod:`rdmalab.verbs.engine.ibcm`) on a fresh simulated fabric, with the rdma_cm calls rping makes,
and records after every call what each side's QP and CM state were.  ``listen_port=`` is the port
the server listens on, ``port=`` the one the client asks for (the same unless given: another one
gets a REJ); ``seed=`` seeds the fabric, and so the QP numbers and starting PSNs the two sides
choose.  ``lose=("REP",)`` loses the first REP on its way (the server's CM sends it again when its
timer runs out).  :attr:`ConnectResult.qps` holds the QP attributes the CM set on each side.

With ``backend="rxe"`` the same handshake is rping's between two kernel rxe devices in the lab VM
(rxe1 10.0.1.1 -> rxe2 10.0.1.2), captured by tcpdump: the kernel's CM has no trace of its states,
so the steps are the CM messages on the wire.
"""

from __future__ import annotations

import html
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import rdmalab.verbs.enums as e
from rdmalab.capture import read
from rdmalab.capture.reader import write_pcap
from rdmalab.fabric.sim import Fabric, reset_default_fabric
from rdmalab.live.labruns import shared_vm
from rdmalab.verbs.cm_enums import RAI_PASSIVE, rdma_cm_event_type
from rdmalab.verbs.cmid import CMID, AddrInfo, CMEvent, CMEventChannel, ConnParam
from rdmalab.verbs.pyverbs_error import PyverbsRDMAError
from rdmalab.verbs.qp import QPCap, QPInitAttr
from rdmalab.viz.ladder import Ladder, from_capture, from_trace
from rdmalab.wire.cm import CMMessage, rej_reason_name
from rdmalab.wire.frame import decode_ethernet

EV = rdma_cm_event_type
PORT = 7174
CLIENT, SERVER = "10.0.0.1", "10.0.0.2"


@dataclass
class Step:
    """After one call: who did what, and both sides' QP and CM states."""

    t_ns: int
    who: str
    call: str
    client_qp: str
    server_qp: str
    client_cm: str
    server_cm: str
    note: str = ""


@dataclass
class ConnectResult:
    steps: list[Step]
    fabric: Fabric | None
    frames: list[bytes] = field(default_factory=list)
    captured: list[Any] = field(default_factory=list)
    error: str | None = None
    backend: str = "soft"
    #: per side ("client", "server"): the QP's qp_num, dest_qp_num, sq_psn and rq_psn once both sides were
    #: established, before any data (soft engine only; empty for rxe, whose kernel keeps them to itself)
    qps: dict[str, dict[str, int]] = field(default_factory=dict)

    def messages(self) -> list[CMMessage]:
        """The CM messages that crossed the wire, in order."""
        out = []
        for f in self.frames:
            m = CMMessage.from_packet(decode_ethernet(f), lenient=True)
            if m is not None:
                out.append(m)
        return out

    def names(self) -> list[str]:
        return [m.name for m in self.messages()]

    @property
    def req_psn(self) -> int | None:
        """The starting PSN the REQ carried."""
        req = next((m for m in self.messages() if m.name == "REQ"), None)
        return None if req is None else int(req.body.starting_psn)  # type: ignore[attr-defined]

    @property
    def ladder(self) -> Ladder:
        if self.fabric is None:
            return from_capture(self.captured, title="rping's connection between two kernel rxe devices")
        return from_trace(self.fabric.trace, states=True, nodes=["soft0", "soft1"],
                          title="rdma_cm: client soft0 (10.0.0.1) -> server soft1 (10.0.0.2)")

    def write_pcap(self, path: str | Path | None = None) -> Path:
        """Write the frames to ``path`` (by default a new file in a temporary directory) and return it."""

        if path is None:
            path = Path(tempfile.mkdtemp(prefix="rdmalab-connect-")) / "connect.pcap"
        write_pcap(path, self.frames)
        return Path(path)

    def table(self) -> StepTable:
        return StepTable(self.steps)

    def _repr_html_(self) -> str:
        return self.table()._repr_html_()


class StepTable:
    def __init__(self, steps: list[Step]) -> None:
        self.steps = steps

    def _repr_html_(self) -> str:
        head = ("<tr><th>time</th><th>who</th><th>call / event</th><th>client QP</th><th>client CM</th>"
                "<th>server QP</th><th>server CM</th><th>note</th></tr>")
        rows = "".join(
            f"<tr><td>{s.t_ns / 1e6:.3f} ms</td><td>{s.who}</td><td><code>{html.escape(s.call)}</code></td>"
            f"<td>{s.client_qp}</td><td>{s.client_cm}</td><td>{s.server_qp}</td><td>{s.server_cm}</td>"
            f"<td>{html.escape(s.note)}</td></tr>" for s in self.steps)
        return f"<table>{head}{rows}</table>"

    def __repr__(self) -> str:
        return "\n".join(f"{s.t_ns / 1e6:10.3f} ms {s.who:6} {s.call:34} client {s.client_qp:5} {s.client_cm:14} "
                         f"server {s.server_qp:5} {s.server_cm:14} {s.note}" for s in self.steps)


def _qp_state(cmid: CMID | None) -> str:
    if cmid is None or cmid.qp is None:
        return "-"
    return str(cmid.qp.qp_state_name).removeprefix("IBV_QPS_")


def _cm_state(cmid: CMID | None) -> str:
    if cmid is None or cmid.conn is None:
        return "-" if cmid is None else cmid.state
    return cmid.conn.state.value


def _qp_attrs(cmid: CMID) -> dict[str, int]:
    qp = cmid.qp
    if qp is None:
        raise RuntimeError("run_connect: an established cm_id without a QP")
    attr, _ = qp.query(e.IBV_QP_SQ_PSN | e.IBV_QP_RQ_PSN | e.IBV_QP_DEST_QPN)
    return {"qp_num": int(qp.qp_num), "dest_qp_num": int(attr.dest_qp_num), "sq_psn": int(attr.sq_psn),
            "rq_psn": int(attr.rq_psn)}


def _port(value: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 0xFFFF:
        raise ValueError(f"run_connect: {what} must be a port number from 1 to 65535, not {value!r}")
    return value


def run_connect(*, lose: tuple[str, ...] = (), port: int | None = None, listen_port: int = PORT, seed: int = 1,
                backend: str = "soft", message: bytes = b"hello over rdma_cm") -> ConnectResult:
    """Connect, send one message, disconnect and wait out timewait; see the module docstring."""
    listen_port = _port(listen_port, "listen_port")
    port = listen_port if port is None else _port(port, "port")
    if backend == "rxe":
        return _run_rxe(port, listen_port)
    if backend != "soft":
        raise ValueError(f"run_connect: unknown backend {backend!r}; choose 'soft' or 'rxe'")
    fab = Fabric(seed=seed, frames=True)
    fab.add_device("soft0", CLIENT)
    fab.add_device("soft1", SERVER)
    reset_default_fabric(fab)  # rdma_cm finds devices by address among the default devices
    fab.tracing = True
    frames: list[bytes] = []
    fab.tap(lambda _t, _s, _d, frame: frames.append(frame))
    for name in lose:
        fab.devices["soft0" if name in ("REP", "DREP", "MRA", "REJ") else "soft1"].gsi.agent.lose_next(name)
    steps: list[Step] = []
    client: CMID | None = None
    server: CMID | None = None

    def step(who: str, call: str, note: str = "") -> None:
        steps.append(Step(fab.now_ns, who, call, _qp_state(client), _qp_state(server), _cm_state(client),
                          _cm_state(server), note))

    init = QPInitAttr(qp_type=e.IBV_QPT_RC, cap=QPCap(max_send_wr=4, max_recv_wr=4))
    sch, cch = CMEventChannel(), CMEventChannel()
    listener = CMID(sch)
    listener.bind_addr(AddrInfo(src=SERVER, src_service=listen_port, flags=RAI_PASSIVE))
    listener.listen()
    step("server", f"listen() on {SERVER}")
    client = CMID(cch)
    client.resolve_addr(AddrInfo(dst=SERVER, dst_service=port))
    CMEvent(cch)
    client.resolve_route()
    CMEvent(cch)
    step("client", "resolve_addr + resolve_route", f"device {client.dev_name}, source port {client.src_port}")
    client.create_qp(init)
    step("client", "create_qp")
    client.connect(ConnParam(resources=1, depth=1, retry=7, rnr_retry=7))
    step("client", "connect()", "REQ sent")
    try:
        ev = CMEvent(sch)
    except PyverbsRDMAError:
        ev = None
    if ev is None or ev.event_type != EV.RDMA_CM_EVENT_CONNECT_REQUEST:
        got = CMEvent(cch)
        note = (f"reason {got.status} ({rej_reason_name(got.status)})" if got.event_type == EV.RDMA_CM_EVENT_REJECTED
                else f"status {got.status}")
        step("client", got.event_str(), note)
        return ConnectResult(steps, fab, frames, error=f"{got.event_str()}: {note}", qps={})
    server = CMID(ev, listen_id=listener)
    step("server", "CONNECT_REQUEST event", f"from {server.dst_addr}:{server.dst_port}")
    server.create_qp(init)
    mr = server.reg_msgs(64)
    server.post_recv(mr)
    step("server", "create_qp + post_recv")
    server.accept(ConnParam(resources=1, depth=1))
    step("server", "accept()", "REP sent")
    got = CMEvent(cch)
    step("client", got.event_str(), "REP arrived, RTU sent")
    got = CMEvent(sch)
    step("server", got.event_str(), "RTU arrived")
    qps = {"client": _qp_attrs(client), "server": _qp_attrs(server)}
    out = client.reg_msgs(64)
    out.write(message, len(message))
    client.post_send(out, length=len(message))
    client.get_send_comp()
    server.get_recv_comp()
    step("both", "SEND / receive", repr(bytes(mr.read(len(message), 0))))
    client.disconnect()
    step("client", "disconnect()", "QP to ERR, DREQ sent")
    got = CMEvent(sch)
    step("server", got.event_str())
    server.disconnect()
    step("server", "disconnect()", "DREP sent")
    for ch, who in ((cch, "client"), (cch, "client"), (sch, "server")):
        got = CMEvent(ch)
        step(who, got.event_str())
    return ConnectResult(steps, fab, frames, qps=qps)


def _run_rxe(port: int, listen_port: int) -> ConnectResult:

    vm = shared_vm()
    # rping between the lab VM's rxe1 ($KA_IP, the server) and rxe2, as rdmalab.live.captures makes
    # captures/rxe_rping.pcap; the server is ready when rdma_cm lists its cm_id as listening
    script = (f"timeout 60 rping -s -a $KA_IP -p {listen_port} -v -C 1 -S 64 > server.out 2>&1 &\n"
              "for i in $(seq 1 200); do rdma resource show cm_id 2>/dev/null | grep -q LISTEN && break; sleep 0.1; done\n"
              f"timeout 60 rping -c -a $KA_IP -p {port} -v -C 1 -S 64 -V > client.out 2>&1; echo $? > client.rc\n"
              "kill %1 2>/dev/null; wait\n")
    r = vm.run_job(script, timeout=150, capture="veth2", name="notebook 12 rping")
    captured = list(read(r.pcap_path)) if r.pcap_path is not None else []
    frames = [bytes(cp.packet.data) for cp in captured]
    steps: list[Step] = []
    t0 = None
    for cp in captured:
        m = CMMessage.from_packet(cp.packet, lenient=True)
        if m is not None:
            t0 = cp.timestamp if t0 is None else t0
            steps.append(Step(int((cp.timestamp - t0) * 1e9), "wire", f"CM {m.name}", "?", "?", "?",
                              "?", "the kernel keeps its QP states to itself"))
    error = None
    rej = next((m for m in (CMMessage.from_packet(cp.packet, lenient=True) for cp in captured)
                if m is not None and m.name == "REJ"), None)
    if rej is not None:
        error = f"REJECTED: reason {rej.body.reason} ({rej_reason_name(rej.body.reason)})"  # type: ignore[attr-defined]
    return ConnectResult(steps, None, frames, captured, error=error, backend="rxe")
