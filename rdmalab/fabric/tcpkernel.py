"""iWARP on the kernel's TCP: soft iWARP devices whose streams are real TCP sockets (the peer of Linux siw).

siw speaks iWARP over ordinary in-kernel TCP sockets (``siw_cm.c``: ``kernel_bindconnect``,
``kernel_accept``, ``kernel_sendmsg``, ``tcp_read_sock``), so a user-space process is its peer
with plain ``socket(AF_INET, SOCK_STREAM)`` and ``TCP_NODELAY`` (reference B.4): no raw socket,
no privilege.  A :class:`KernelTcp` is a carrier (wall clock, timers), its own scheduler (an
event loop that waits on its sockets and timers) and the :class:`~rdmalab.verbs.engine.iwdevice.TcpStack`
of the devices made on it::

    kt = KernelTcp()
    dev = kt.add_device("siw0", "10.77.0.2")        # an address of this host (or 127.0.0.x), or
    dev = kt.add_interface_device("siw0", "veth1")   # the address of an interface
    Context(name="siw0", fabric=kt)                  # pyverbs on it, or make it the default device
    set_default_devices(lambda: kt)                  # set, so that rdma_cm (pyverbs.cmid) finds it

The sockets are non-blocking; writes that the kernel does not take at once wait in a buffer
and go when the socket is writable, in order.  Each stream reports the kernel's MSS
(``TCP_MAXSEG``) so that FPDUs fit a segment, as siw sizes them.  The kernel does the segments,
ACKs and retransmissions; to see them, capture on the interface (tcpdump), since this carrier
sees only the byte stream.
"""

from __future__ import annotations

import errno
import ipaddress
import selectors
import socket
from collections.abc import Callable
from typing import Any

from rdmalab.fabric.loop import WallClockLoop
from rdmalab.fabric.udp_setup import interface_ipv4
from rdmalab.verbs.engine.iwdevice import ConnectResult, IwDevice
from rdmalab.verbs.engine.trace import TraceEvent

_READ = 262144


class SockStream:
    """A connected TCP socket as an iWARP :class:`~rdmalab.verbs.engine.iwarp.Stream`."""

    def __init__(self, kt: KernelTcp, sock: socket.socket, dev: IwDevice | None) -> None:
        self.kt, self.sock, self.dev = kt, sock, dev
        self.receiver: Any = None
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # siw: siw_tcp_nagle is false
        try:
            self.mss = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG) or 1448
        except OSError:
            self.mss = 1448
        lip, lport = sock.getsockname()[:2]
        pip, pport = sock.getpeername()[:2]
        self.local: tuple[str, int] = (lip, lport)
        self.peer: tuple[str, int] = (pip, pport)
        self._out = bytearray()
        self._closing = False
        self.closed = False
        self.bytes_in = self.bytes_out = 0
        kt._register(self)

    def write(self, data: bytes) -> None:
        if self.closed or self._closing:
            return
        if not self._out:
            try:
                n = self.sock.send(data)
            except BlockingIOError:
                n = 0
            except OSError as exc:
                self._fail(f"send failed: {exc.strerror or exc}")
                return
            self.bytes_out += n
            if n == len(data):
                return
            data = data[n:]
        if not self._out:
            self.kt._want_write(self, True)
        self._out += data

    def close(self) -> None:
        if self.closed or self._closing:
            return
        self._closing = True
        if not self._out:
            self._shut()

    def _shut(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_WR)  # FIN; the peer's FIN (or RST) closes the socket for good
        except OSError:
            self._finish("closed")

    def _on_writable(self) -> None:
        try:
            n = self.sock.send(self._out)
        except BlockingIOError:
            return
        except OSError as exc:
            self._fail(f"send failed: {exc.strerror or exc}")
            return
        self.bytes_out += n
        del self._out[:n]
        if not self._out:
            self.kt._want_write(self, False)
            if self._closing:
                self._shut()

    def _on_readable(self) -> None:
        try:
            data = self.sock.recv(_READ)
        except BlockingIOError:
            return
        except OSError as exc:
            self._fail(f"connection error: {exc.strerror or exc}")
            return
        if not data:
            self._finish("the peer closed the connection (FIN)")
            return
        self.bytes_in += len(data)
        if self.receiver is not None:
            self.receiver.on_bytes(data)

    def _fail(self, why: str) -> None:
        self._finish(why)

    def _finish(self, why: str) -> None:
        if self.closed:
            return
        self.closed = True
        self.kt._unregister(self)
        try:
            self.sock.close()
        except OSError:
            pass
        if self.receiver is not None:
            self.receiver.on_closed(why)

    def __repr__(self) -> str:
        return f"<TCP socket {self.local[0]}:{self.local[1]} -> {self.peer[0]}:{self.peer[1]}>"


class KernelTcp(WallClockLoop):
    """Soft iWARP devices on kernel TCP sockets: carrier, scheduler and TCP stack in one.

    ``poll_wait`` is how long ``CQ.poll`` (through :meth:`progress`) waits for the network when
    its queue is empty, as the UDP carrier's.  The event loop is a
    :class:`~rdmalab.fabric.loop.WallClockLoop` waiting on the sockets (:meth:`poll_io`)."""

    mtu = 4096
    burst_ok = False

    def __init__(self, *, poll_wait: float = 0.02, trace: bool = False) -> None:
        super().__init__(poll_wait=poll_wait)  # the clock, the timers, ``closed``
        self.devices: dict[str, IwDevice] = {}
        self._by_ip: dict[str, IwDevice] = {}
        self.tracing = trace
        self.events: list[TraceEvent] = []
        self._sel = selectors.DefaultSelector()
        self._listeners: dict[tuple[str, int], socket.socket] = {}
        self._pending: dict[int, tuple[socket.socket, ConnectResult, IwDevice | None]] = {}

    # ------------------------------------------------------------------ devices
    def add_device(self, name: str, ip: str, mac: int | None = None, *, mpa_crc: bool = False,
                   seed: int | None = None) -> IwDevice:
        """A soft iWARP device with address ``ip`` (which must be one of this host's, or 127.x.y.z)."""
        if name in self.devices:
            raise ValueError(f"a device named {name!r} already exists")
        v = int(ipaddress.IPv4Address(ip))
        mac = mac if mac is not None else 0x020000000000 | (v & 0xFFFFFFFF)
        dev = IwDevice(name, v, mac, self, self, seed=seed if seed is not None else v, mpa_crc=mpa_crc)
        self.devices[name] = dev
        self._by_ip[ip] = dev
        return dev

    def add_interface_device(self, name: str, ifname: str, *, mpa_crc: bool = False) -> IwDevice:
        """A soft iWARP device on the IPv4 address of network interface ``ifname`` (as ``rdma link add
        siw0 type siw netdev IFNAME`` puts siw on one); ``dev.ifname`` names it."""

        dev = self.add_device(name, interface_ipv4(ifname), mpa_crc=mpa_crc)
        dev.ifname = ifname
        return dev

    def resolve_mac(self, gid: int) -> int | None:
        return None

    # ------------------------------------------------------------------ carrier: clock, timers (the loop's), trace
    @property
    def scheduler(self) -> KernelTcp:
        return self

    def record(self, ev: TraceEvent) -> None:
        self.events.append(ev)

    def send(self, src: Any, pkt: Any) -> None:
        raise RuntimeError("a soft iWARP device sends no RoCE packets")

    def fileno(self) -> int:
        """(So that rdma_cm waits for events from outside the process instead of giving up.)"""
        return self._sel.fileno() if hasattr(self._sel, "fileno") else -1

    # ------------------------------------------------------------------ TcpStack
    def listen(self, ip: str, port: int, on_accept: Callable[[Any], None]) -> None:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((ip, port))
            s.listen(16)
        except OSError:
            s.close()
            raise
        s.setblocking(False)
        self._listeners[(ip, port)] = s
        self._sel.register(s, selectors.EVENT_READ, ("listen", on_accept, ip))

    def unlisten(self, ip: str, port: int) -> None:
        s = self._listeners.pop((ip, port), None)
        if s is not None:
            self._sel.unregister(s)
            s.close()

    def connect(self, src: tuple[str, int], dst: tuple[str, int], on_result: ConnectResult) -> None:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.setblocking(False)
        try:
            if src[0] not in ("", "0.0.0.0"):
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.bind(src)  # siw: kernel_bindconnect to rdma_cm's local address and port
            rc = s.connect_ex(dst)
        except OSError:
            s.close()
            raise
        if rc not in (0, errno.EINPROGRESS):
            s.close()
            self.call_later(0, lambda _: on_result(None, f"connect to {dst[0]}:{dst[1]}: {errno.errorcode.get(rc, rc)}"
                                                   + (" (connection refused)" if rc == errno.ECONNREFUSED else "")))
            return
        self._pending[s.fileno()] = (s, on_result, self._by_ip.get(src[0]))
        self._sel.register(s, selectors.EVENT_WRITE, ("connect", dst))

    # ------------------------------------------------------------------ the event loop
    def _register(self, st: SockStream) -> None:
        self._sel.register(st.sock, selectors.EVENT_READ, ("stream", st))

    def _unregister(self, st: SockStream) -> None:
        try:
            self._sel.unregister(st.sock)
        except (KeyError, ValueError):
            pass

    def _want_write(self, st: SockStream, on: bool) -> None:
        ev = selectors.EVENT_READ | (selectors.EVENT_WRITE if on else 0)
        try:
            self._sel.modify(st.sock, ev, ("stream", st))
        except (KeyError, ValueError):
            pass

    def _ready(self, key: selectors.SelectorKey, mask: int) -> None:
        kind = key.data[0]
        if kind == "stream":
            st: SockStream = key.data[1]
            if mask & selectors.EVENT_WRITE:
                st._on_writable()
            if mask & selectors.EVENT_READ and not st.closed:
                st._on_readable()
        elif kind == "listen":
            _, on_accept, ip = key.data
            try:
                conn, _ = key.fileobj.accept()  # type: ignore[union-attr]
            except BlockingIOError:
                return
            local_ip = conn.getsockname()[0]
            dev = self._by_ip.get(local_ip) or self._by_ip.get(ip)
            on_accept(SockStream(self, conn, dev))
        elif kind == "connect":
            s = key.fileobj
            assert isinstance(s, socket.socket)
            self._sel.unregister(s)
            _, on_result, dev = self._pending.pop(s.fileno())
            err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err:
                s.close()
                dst = key.data[1]
                on_result(None, f"connect to {dst[0]}:{dst[1]}: {errno.errorcode.get(err, err)}"
                          + (" (connection refused)" if err == errno.ECONNREFUSED else ""))
                return
            on_result(SockStream(self, s, dev), None)

    def poll_io(self, timeout: float) -> int:
        """(The loop's I/O, see :meth:`~rdmalab.fabric.loop.WallClockLoop.step`:) wait up to ``timeout``
        seconds for the sockets and handle what they have."""
        did = 0
        for key, mask in self._sel.select(timeout):
            self._ready(key, mask)
            did += 1
        return did

    def run(self, until_ns: int | None = None, max_events: int = 10_000_000) -> int:
        """Step (waiting up to 10 ms each time) until the clock reaches ``until_ns`` or, without
        ``until_ns``, until a step finds nothing to do (the kernel does TCP's own timers, so timers
        left here are not waited for); returns the steps."""
        steps = 0
        while steps < max_events and not self.closed:
            if until_ns is not None and self.now_ns >= until_ns:
                break
            if not self.step(0.01) and until_ns is None:
                break
            steps += 1
        return steps

    def close(self) -> None:
        if self.closed:
            return
        for key in list(self._sel.get_map().values()):
            try:
                key.fileobj.close()  # type: ignore[union-attr]
            except OSError:
                pass
        self._sel.close()
        self.closed = True

    def __enter__(self) -> KernelTcp:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
