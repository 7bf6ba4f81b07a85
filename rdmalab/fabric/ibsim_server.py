"""ibsim's client protocol served for a :class:`rdmalab.fabric.ibsubnet.Subnet`: ``rdmalab ibsim NETFILE``.

The sockets and messages are ibsim's (:mod:`rdmalab.wire.ibsim` has the facts): datagram sockets in the
abstract unix namespace named from ``IBSIM_SOCKNAME`` (default ``sim``), the control socket ``BASE:ctl``
and one data socket ``BASE:out<i>`` per client; or, in remote mode, UDP on a port (``IBSIM_SERVER_PORT``,
default 7070) and the ten after it.  So a libumad program under ``ibsim-run`` (OpenSM, the diags) runs
against it unchanged.

With a capture (``rdmalab ibsim -w FILE``, :class:`MadCapture`), every MAD a client sends and every MAD
handed to a client is written as the native IB packet that carries it (LRH, BTH, DETH, the MAD, ICRC,
VCRC: :func:`rdmalab.wire.frame.mad_ib_packet`) in an ERF record of type 21 with the host's clock,
flushed at once, as a capture at the ports where the programs run: what OpenSM's sweep and the diags
said and were told, which tshark dissects as InfiniBand.
"""

from __future__ import annotations

import errno
import os
import selectors
import socket
import sys
import time
from collections.abc import Callable
from typing import IO, TextIO

from rdmalab.capture.linktypes import LINKTYPE_ERF, erf_ib_record
from rdmalab.capture.pcapwriter import CaptureWriter
from rdmalab.fabric.ibsubnet import Client, Delivery, Subnet
from rdmalab.wire import ibsim as W
from rdmalab.wire.errors import DecodeError, RdmalabError
from rdmalab.wire.frame import mad_ib_packet


class CaptureFileError(RdmalabError):
    """The file of ``rdmalab ibsim -w`` cannot be written."""


class MadCapture:
    """Every MAD through the server as a native IB packet in an ERF record (see the module's docstring)."""

    def __init__(self, dest: str | os.PathLike[str] | IO[bytes], *, format: str = "pcap") -> None:
        self.writer = CaptureWriter(dest, format="pcapng" if format == "pcapng" else "pcap", linktype=LINKTYPE_ERF)
        self.count = 0

    def write(self, req: W.SimRequest) -> None:
        pkt = mad_ib_packet(req.mad[:W.SIM_MAD_SIZE], dlid=req.dlid & 0xFFFF, slid=req.slid & 0xFFFF,
                            dqp=req.dqp & 0xFFFFFF, sqp=req.sqp & 0xFFFFFF, psn=self.count)
        now = time.time_ns()
        self.writer.write(erf_ib_record(now, pkt), now)
        self.writer.flush()
        self.count += 1

    def close(self) -> None:
        self.writer.close()


class IbsimServer:
    """The control socket and the ten client sockets, bound; :meth:`serve` answers until :meth:`stop`."""

    def __init__(self, subnet: Subnet, basename: str = W.SIM_BASENAME, *, remote_port: int | None = None,
                 log: TextIO | None = None, capture: MadCapture | None = None) -> None:
        self.subnet = subnet
        self.capture = capture
        self.basename = basename
        self.remote_port = remote_port
        self.log = log
        family = socket.AF_INET if remote_port is not None else socket.AF_UNIX
        self.ctl = socket.socket(family, socket.SOCK_DGRAM)
        self.outs: list[socket.socket] = []
        self.by_client: dict[int, Client] = {}
        self._stop = False
        try:
            self.ctl.bind(self._name("ctl", 0))
            for i in range(W.IBSIM_MAX_CLIENTS):
                s = socket.socket(family, socket.SOCK_DGRAM)
                self.outs.append(s)
                s.bind(self._name(f"out{i}", i + 1))
        except OSError:
            self.close()
            raise
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.ctl, selectors.EVENT_READ, None)

    def _name(self, suffix: str, offset: int) -> bytes | tuple[str, int]:
        if self.remote_port is not None:
            return ("0.0.0.0", self.remote_port + offset)
        return W.abstract_name(self.basename, suffix)

    @property
    def where(self) -> str:
        if self.remote_port is not None:
            return f"udp port {self.remote_port}"
        return f"unix sockets @{self.basename}:ctl"

    def _say(self, text: str) -> None:
        if self.log is not None:
            print(text, file=self.log, flush=True)

    # ------------------------------------------------------------------ control
    def _control(self) -> None:
        try:
            raw, addr = self.ctl.recvfrom(4096)
        except OSError:
            return
        try:
            ctl = W.SimCtl.decode(raw)
        except DecodeError as exc:
            self._say(f"ibsim: control message dropped: {exc}")
            return
        if not ctl.magic_ok:
            self._say(f"ibsim: control message with bad magic 0x{ctl.magic:08x} dropped")
            return
        reply = self._handle_ctl(ctl, addr)
        try:
            self.ctl.sendto(reply.encode(), addr)
        except OSError as exc:
            self._say(f"ibsim: cannot answer control message: {exc}")

    def _handle_ctl(self, ctl: W.SimCtl, addr: object) -> W.SimCtl:
        sub = self.subnet
        if ctl.type == W.CtlType.CONNECT:
            return self._connect(ctl, addr)
        client = self.by_client.get(ctl.clientid)
        if ctl.clientid >= W.IBSIM_MAX_CLIENTS or (client is None and ctl.type != W.CtlType.DISCONNECT):
            return ctl.reply(error=True)
        if ctl.type == W.CtlType.DISCONNECT:
            if client is not None:
                self._disconnect(client)
            return ctl.reply()
        assert client is not None
        port = client.port
        node = port.node
        if ctl.type == W.CtlType.GET_PORT:
            return ctl.reply(W.SimPort(port.lid, port.state).encode())
        if ctl.type == W.CtlType.GET_VENDOR:
            ni = node.nodeinfo
            from_ni = W.SimVendor(int.from_bytes(ni[37:40], "big"), int.from_bytes(ni[30:32], "big"),
                                  int.from_bytes(ni[32:36], "big"), 1)
            return ctl.reply(from_ni.encode())
        if ctl.type == W.CtlType.GET_GID:
            return ctl.reply(bytes(port.portinfo[8:16]) + node.guid.to_bytes(8, "little"))
        if ctl.type == W.CtlType.GET_GUID:
            return ctl.reply(node.guid.to_bytes(8, "little"))
        if ctl.type == W.CtlType.GET_NODEINFO:
            return ctl.reply(bytes(node.nodeinfo[:64]))
        if ctl.type == W.CtlType.GET_PORTINFO:
            num = ctl.data[0]
            p = port if num == 0 or num > node.num_ports else node.port(num) if node.is_switch else node.port(num - 1)
            if p is None:
                p = port
            return ctl.reply(bytes(p.refresh_portinfo()))
        if ctl.type == W.CtlType.SET_ISSM:
            issm = int.from_bytes(ctl.data[:4], "little", signed=True)
            self._deliver(sub.set_issm(client, bool(issm)))
            return ctl.reply()
        if ctl.type == W.CtlType.GET_PKEYS:
            return ctl.reply(bytes(port.pkeys[:64]))
        self._say(f"ibsim: bad control type {ctl.type}")
        return ctl  # ibsim answers an unknown type unchanged

    def _connect(self, ctl: W.SimCtl, addr: object) -> W.SimCtl:
        try:
            info = W.SimClientInfo.decode(ctl.data)
        except DecodeError:
            return ctl.reply(error=True)
        try:
            client = self.subnet.attach(info.nodeid or None, pid=info.id, qp=info.qp, issm=bool(info.issm))
        except KeyError:
            self._say(f'ibsim: client pid {info.id} asked for unknown node "{info.nodeid}"')
            return ctl.reply(error=True)
        except ValueError as exc:
            self._say(f"ibsim: client pid {info.id} refused: {exc}")
            return ctl.reply(error=True)
        out = self.outs[client.id]
        if self.remote_port is not None:
            assert isinstance(addr, tuple)
            target: bytes | tuple[str, int] = (addr[0], info.id)
        else:
            target = W.client_in_name(info.id, self.basename)
        try:
            out.connect(target)
        except OSError as exc:
            self.subnet.detach(client)
            self._say(f"ibsim: cannot connect to client pid {info.id}: {exc}")
            return ctl.reply(error=True)
        self.by_client[client.id] = client
        self.sel.register(out, selectors.EVENT_READ, client.id)
        self._say(f'ibsim: client {client.id} (pid {info.id}) attached to "{client.port.node.nodeid}"'
                  f"{' as SM' if client.issm else ''}")
        reply = W.SimClientInfo(client.id, info.qp, info.issm, client.port.node.nodeid[:31])
        return ctl.reply(reply.encode())

    def _disconnect(self, client: Client) -> None:
        self.subnet.detach(client)
        self.by_client.pop(client.id, None)
        out = self.outs[client.id]
        try:
            self.sel.unregister(out)
        except (KeyError, ValueError):
            pass
        # a fresh socket for the slot: a connected datagram socket cannot be unconnected portably
        out.close()
        family = socket.AF_INET if self.remote_port is not None else socket.AF_UNIX
        s = socket.socket(family, socket.SOCK_DGRAM)
        s.bind(self._name(f"out{client.id}", client.id + 1))
        self.outs[client.id] = s
        self._say(f"ibsim: client {client.id} detached")

    # ------------------------------------------------------------------ MADs
    def _packet(self, cid: int) -> None:
        client = self.by_client.get(cid)
        if client is None:
            return
        try:
            raw = self.outs[cid].recv(4096)
        except OSError as exc:
            if exc.errno in (errno.ECONNREFUSED, errno.ENOTCONN):
                self._disconnect(client)
            return
        if len(raw) != W.SIM_REQUEST_SIZE:
            self._say(f"ibsim: packet of {len(raw)} bytes from client {cid} dropped (expected {W.SIM_REQUEST_SIZE})")
            return
        req = W.SimRequest.decode(raw)
        if self.capture is not None:
            self.capture.write(req)
        try:
            deliveries = self.subnet.send(client, req)
        except Exception as exc:  # the subnet must outlive any MAD: say so and drop it
            self._say(f"ibsim: MAD from client {cid} dropped, internal error: {exc!r}")
            return
        self._deliver(deliveries)

    def _deliver(self, deliveries: list[Delivery]) -> None:
        for d in deliveries:
            if self.by_client.get(d.client.id) is not d.client:
                continue
            if self.capture is not None:
                self.capture.write(d.request)
            try:
                self.outs[d.client.id].send(d.request.encode())
            except OSError as exc:
                self._say(f"ibsim: cannot deliver to client {d.client.id}: {exc}")
                if exc.errno in (errno.ECONNREFUSED, errno.ENOTCONN):
                    self._disconnect(d.client)

    # ------------------------------------------------------------------ running
    def serve(self, ready: Callable[[], None] | None = None, timeout: float = 0.5) -> None:
        if ready is not None:
            ready()
        while not self._stop:
            for key, _ in self.sel.select(timeout):
                if key.data is None:
                    self._control()
                else:
                    self._packet(key.data)

    def stop(self) -> None:
        self._stop = True

    def close(self) -> None:
        for s in [self.ctl, *self.outs]:
            s.close()


def serve_netfile(path: str, basename: str | None = None, remote_port: int | None = None, verbose: bool = False,
                  out: TextIO = sys.stdout, capture: str | None = None) -> int:
    """Load ``path`` and serve it until interrupted; the ready line goes to ``out``; ``capture``: a file to
    write every MAD to (pcapng if it ends in .pcapng, else pcap).  Raises NetFileError, OSError."""
    subnet = Subnet.from_file(path)
    base = basename or os.environ.get("IBSIM_SOCKNAME") or W.SIM_BASENAME
    try:
        cap = MadCapture(capture, format="pcapng" if capture.endswith(".pcapng") else "pcap") if capture else None
    except OSError as exc:
        raise CaptureFileError(f"-w {capture}: cannot write it ({exc.strerror or exc})") from None
    try:
        server = IbsimServer(subnet, base, remote_port=remote_port, log=sys.stderr if verbose else None, capture=cap)
    except OSError:
        if cap is not None:
            cap.close()
        raise
    nports = sum(1 for _ in subnet.ports())

    def ready() -> None:
        print(f"rdmalab ibsim: {path}: {len(subnet.nodes)} nodes, {nports} ports; ready on {server.where}",
              file=out, flush=True)

    try:
        server.serve(ready)
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
        if cap is not None:
            cap.close()
            print(f"rdmalab ibsim: {cap.count} MADs written to {capture}", file=out, flush=True)
    return 0
