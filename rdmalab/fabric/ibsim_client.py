"""A client of ibsim's protocol: send MADs into a simulated InfiniBand subnet from Python.

``ibsim -s NETFILE`` simulates a subnet and serves it to programs preloaded with umad2sim (what
``ibsim-run`` does).  :class:`IBSimClient` speaks the same protocol as umad2sim's
``sim_client.c`` (the messages are :mod:`rdmalab.wire.ibsim`'s), so our own subnet manager
(:mod:`rdmalab.fabric.ibsm`) runs against the stock ibsim, or against anything that serves the
protocol (``rdmalab ibsim``):

1. bind the control socket ``BASE:ctl<id>`` and send CONNECT (the node to attach to, ``SIM_HOST``,
   and whether this client is the node's SM) to ``BASE:ctl``; the reply is the client id ``i``;
2. bind the data socket ``BASE:in<id>`` and connect it to ``BASE:out<i>``;
3. write and read ``struct sim_request`` (one 256-byte MAD and its LIDs and QPs) on it.

``BASE`` is ``IBSIM_SOCKNAME`` or ``"sim"``; the sockets are abstract unix datagram sockets, or UDP
when ``IBSIM_SERVER_NAME`` is set (``IBSIM_SERVER_PORT``, default 7070; the data socket's port is the
id).  ``id`` is this process's pid (umad2sim's choice) with a per-client number above bit 22, so that
several clients of one process do not clash.

Transaction IDs: ibsim overwrites the top 16 bits of a request's TID with the sender's client id and
finds the requester of a response by them, so :meth:`IBSimClient.rpc` matches replies on the low 48
bits.  A request that reaches no one comes back with status 110 (ETIMEDOUT), raised as
:class:`IBSimTimeout`, as does no reply within the timeout.
"""

from __future__ import annotations

import collections
import itertools
import os
import socket
from types import TracebackType

from rdmalab.wire.errors import RdmalabError
from rdmalab.wire.ibsim import (
    IBSIM_DEFAULT_SERVER_PORT,
    IBSIM_MAX_CLIENTS,
    SIM_BASENAME,
    SIM_CTL_MAX_DATA,
    SIM_CTL_SIZE,
    SIM_REPLY_TIMEOUT_STATUS,
    SIM_REQUEST_SIZE,
    CtlType,
    SimClientInfo,
    SimCtl,
    SimPort,
    SimRequest,
    client_ctl_name,
    client_in_name,
    ctl_name,
    out_name,
)
from rdmalab.wire.mad import MADHeader

TID_MATCH_MASK = (1 << 48) - 1  # ibsim owns the top 16 bits of a request's TID (sim_mad.c update_trid)
_ID_SHIFT = 22  # Linux pids are below 2**22
_counter = itertools.count(0)


class IBSimError(RdmalabError, RuntimeError):
    """ibsim is not there, refused a request, or answered something unreadable."""


class IBSimNotRunning(IBSimError):
    """No simulator listens where the client looked."""


class IBSimTimeout(IBSimError):
    """A MAD got no answer: ibsim could not deliver it (status 110) or nothing came in time."""


class IBSimClient:
    """One client of an ibsim-protocol simulator, attached to node ``node`` (``SIM_HOST``).

    ``issm`` makes it the node's SM: ibsim then hands it the requests to QP0/QP1 that arrive at
    the node's port (SMInfo, SA queries).  Use as a context manager, or call :meth:`close`.
    """

    def __init__(self, node: str | None = None, *, sockname: str | None = None, issm: bool = False,
                 timeout: float = 2.0, server: str | None = None, port: int | None = None) -> None:
        env = os.environ
        self.node_requested = node if node is not None else env.get("SIM_HOST", "")
        self.base = sockname or env.get("IBSIM_SOCKNAME") or SIM_BASENAME
        self.server = server if server is not None else env.get("IBSIM_SERVER_NAME") or None
        self.server_port = port or int(env.get("IBSIM_SERVER_PORT") or IBSIM_DEFAULT_SERVER_PORT)
        self.timeout = timeout
        self.issm = issm
        #: requests that arrived for this client while it waited for a reply (see :meth:`requests`)
        self.incoming: collections.deque[SimRequest] = collections.deque()
        self._ctl: socket.socket | None = None
        self._data: socket.socket | None = None
        self.client_id = -1
        self.node = ""
        self._connect()

    # ------------------------------------------------------------------ connecting
    def _where(self) -> str:
        if self.server:
            return f"UDP {self.server}:{self.server_port} (IBSIM_SERVER_NAME/IBSIM_SERVER_PORT)"
        return f"the abstract unix socket '{self.base}:ctl' (IBSIM_SOCKNAME={self.base!r})"

    def _connect(self) -> None:
        family = socket.AF_INET if self.server else socket.AF_UNIX
        ctl = socket.socket(family, socket.SOCK_DGRAM)
        data = socket.socket(family, socket.SOCK_DGRAM)
        try:
            ident = self._bind(ctl, data)
            try:
                ctl.connect((self.server, self.server_port) if self.server else ctl_name(self.base))
            except (ConnectionRefusedError, FileNotFoundError) as err:
                raise IBSimNotRunning(
                    f"no ibsim simulator listens on {self._where()}: start one (e.g. "
                    f"`tail -f /dev/null | ibsim -s NETFILE`, or `rdmalab ibsim NETFILE`) with the same "
                    f"IBSIM_SOCKNAME ({err.strerror})") from None
            ctl.settimeout(self.timeout)
            self._ctl = ctl
            info = SimClientInfo(id=ident, qp=0, issm=int(self.issm), nodeid=self.node_requested)
            reply = self.control(CtlType.CONNECT, info.encode(), what=f"CONNECT to node {self.node_requested!r}")
            got = SimClientInfo.decode(reply)
            if not 0 <= got.id < IBSIM_MAX_CLIENTS:  # (ibsim.c's sim_ctl_new_client answers a slot, 0-9)
                raise IBSimError(f"the reply to CONNECT from {self._where()} names client {got.id}, not one of "
                                 f"ibsim's 0-{IBSIM_MAX_CLIENTS - 1}: is another program listening there?")
            self.client_id, self.node = got.id, got.nodeid
            try:
                data.connect((self.server, self.server_port + self.client_id + 1) if self.server
                             else out_name(self.client_id, self.base))
            except OSError as err:
                raise IBSimError(f"ibsim gave client id {self.client_id} but its data socket "
                                 f"'{self.base}:out{self.client_id}' refuses: {err}") from None
            data.settimeout(self.timeout)
            self._data = data
            if self.issm:
                self.control(CtlType.SET_ISSM, (1).to_bytes(4, "little"), what="SET_ISSM")
        except BaseException:
            ctl.close()
            data.close()
            self._ctl = self._data = None
            raise

    def _bind(self, ctl: socket.socket, data: socket.socket) -> int:
        """Bind both sockets under a fresh id; returns the id CONNECT carries."""
        if self.server:
            ctl.bind(("", 0))
            data.bind(("", 0))
            port: int = data.getsockname()[1]
            return port
        pid = os.getpid()
        for _ in range(64):
            ident = pid | (next(_counter) % 512) << _ID_SHIFT
            try:
                ctl.bind(client_ctl_name(ident, self.base))
                data.bind(client_in_name(ident, self.base))
                return ident
            except OSError:
                ctl.close()
                data.close()
                ctl = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                data = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        raise IBSimError(f"could not bind client sockets under '{self.base}:ctl{pid}' and 63 other ids")

    # ------------------------------------------------------------------ control
    def control(self, type_: CtlType, data: bytes = b"", *, what: str | None = None) -> bytes:
        """One control request (``struct sim_ctl``) and its 64-byte reply payload.  A reply of type
        ERROR raises :class:`IBSimError` naming the request."""
        if self._ctl is None:
            raise IBSimError("the client is closed")
        name = what or type_.name
        msg = SimCtl(type=int(type_), clientid=max(self.client_id, 0), len=len(data), data=data)
        sent = msg.encode()
        try:
            self._ctl.send(sent)
            raw = self._ctl.recv(SIM_CTL_SIZE + 16)
        except ConnectionRefusedError:
            raise IBSimNotRunning(f"{name}: the simulator on {self._where()} is gone") from None
        except TimeoutError:
            raise IBSimTimeout(f"{name}: no control reply from {self._where()} in {self.timeout} s") from None
        if raw == sent and type_ == CtlType.CONNECT:
            # the request itself came back (ibsim answers CONNECT with the client's slot and node in place of
            # what was asked): nothing answered, and the socket that took it echoes (this client's own control
            # socket, given the simulator's port by the system before ibsim took it, sends to itself)
            raise IBSimNotRunning(f"{name}: no ibsim simulator answered on {self._where()}: the request came "
                                  "back as it was sent")
        reply = SimCtl.decode(raw)
        if reply.type == CtlType.ERROR:
            hint = ""
            if type_ == CtlType.CONNECT:
                hint = (f": is there a node {self.node_requested!r} in the net file, a free client slot (10), "
                        "and no other SM on that node?" if self.issm else
                        f": is there a node {self.node_requested!r} in the net file and a free client slot (10)?")
            raise IBSimError(f"ibsim refused {name}{hint}")
        return reply.data[:SIM_CTL_MAX_DATA]

    def port(self) -> SimPort:
        """The attached port's LID and state (GET_PORT)."""
        return SimPort.decode(self.control(CtlType.GET_PORT))

    # ------------------------------------------------------------------ MADs
    def send(self, req: SimRequest) -> None:
        if self._data is None:
            raise IBSimError("the client is closed")
        try:
            self._data.send(req.encode())
        except ConnectionRefusedError:
            raise IBSimNotRunning(f"the simulator on {self._where()} is gone") from None

    def recv(self, timeout: float | None = None) -> SimRequest | None:
        """The next MAD for this client, or None when none came within ``timeout`` seconds."""
        if self._data is None:
            raise IBSimError("the client is closed")
        self._data.settimeout(self.timeout if timeout is None else timeout)
        try:
            raw = self._data.recv(SIM_REQUEST_SIZE + 64)
        except TimeoutError:
            return None
        except ConnectionRefusedError:
            raise IBSimNotRunning(f"the simulator on {self._where()} is gone") from None
        if len(raw) != SIM_REQUEST_SIZE:
            raise IBSimError(f"a MAD message of {len(raw)} bytes from the simulator, not {SIM_REQUEST_SIZE}")
        return SimRequest.decode(raw)

    def rpc(self, mad: bytes, *, dlid: int, dqp: int, sqp: int = 0, slid: int | None = None) -> SimRequest:
        """Send a request MAD and wait for its response (matched by TID).  ``dlid`` 0xFFFF sends a
        directed-route SMP.  Requests to this client that arrive meanwhile go to :attr:`incoming`.
        Raises :class:`IBSimTimeout` if ibsim could not deliver it or nothing answered in time."""
        tid = MADHeader.decode(mad).tid & TID_MATCH_MASK
        if slid is None:
            slid = 0xFFFF if dlid == 0xFFFF else 0
        self.send(SimRequest(dlid=dlid, slid=slid, dqp=dqp, sqp=sqp, mad=mad, length=len(mad)))
        while True:
            got = self.recv()
            if got is None:
                raise IBSimTimeout(f"no answer to {MADHeader.decode(mad).summary()} in {self.timeout} s")
            hdr = MADHeader.decode(got.mad)
            if hdr.tid & TID_MATCH_MASK == tid and (hdr.is_response or got.status):
                if got.status == SIM_REPLY_TIMEOUT_STATUS:
                    raise IBSimTimeout(f"ibsim could not deliver {MADHeader.decode(mad).summary()} "
                                       f"(dlid 0x{dlid:04x}): status {got.status}")
                return got
            if not hdr.is_response:
                self.incoming.append(got)

    def exchange(self, mad: bytes, dlid: int, dqp: int) -> bytes:
        """:meth:`rpc`, the reply's MAD only: what :class:`rdmalab.fabric.ibsm.MADPort` asks."""
        return self.rpc(mad, dlid=dlid, dqp=dqp).mad

    def requests(self, timeout: float = 0.0) -> list[SimRequest]:
        """The requests waiting for this client (from :attr:`incoming` and the socket), waiting up
        to ``timeout`` seconds for the first."""
        out = list(self.incoming)
        self.incoming.clear()
        if out:
            timeout = 0.0
        while True:
            got = self.recv(timeout) if timeout > 0 else self._poll()
            if got is None:
                return out
            if not MADHeader.decode(got.mad).is_response:
                out.append(got)
            timeout = 0.0

    def _poll(self) -> SimRequest | None:
        assert self._data is not None
        self._data.setblocking(False)
        try:
            raw = self._data.recv(SIM_REQUEST_SIZE + 64)
        except BlockingIOError:
            return None
        finally:
            self._data.settimeout(self.timeout)
        return SimRequest.decode(raw)

    # ------------------------------------------------------------------ closing
    def close(self) -> None:
        """Detach from the simulator; an SM client first clears its port's IsSM capability, so that
        the next SM does not look for it there."""
        if self._ctl is not None:
            try:
                if self.issm:
                    self.control(CtlType.SET_ISSM, (0).to_bytes(4, "little"), what="SET_ISSM 0")
                self.control(CtlType.DISCONNECT)
            except IBSimError:
                pass  # the simulator is gone already: nothing to detach from
            self._ctl.close()
        if self._data is not None:
            self._data.close()
        self._ctl = self._data = None

    def __enter__(self) -> IBSimClient:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
