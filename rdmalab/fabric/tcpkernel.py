"""A soft iWARP device on a real interface, its TCP the kernel's: the engine's peer is kernel siw.

:class:`KernelTcpFabric` is three things for one :class:`~rdmalab.verbs.engine.iwdevice.IwDevice`:

* its **TCP stack** (:class:`~rdmalab.verbs.engine.iwdevice.TcpStack`): ``listen``/``connect`` open
  plain ``SOCK_STREAM`` sockets of this process (``TCP_NODELAY``, as siw sets on its own,
  ``siw_cm.c``), bound to the interface's IPv4 address; each connection is a
  :class:`KernelStream` handing the QP the bytes in order, however TCP cut them.  No raw socket
  and no privilege is needed: the kernel does TCP's handshake, ACKs and retransmissions, and
  what goes on the wire is ordinary Linux TCP, which is all siw uses either
  (``/work/shared/reference/connection-management.md`` B.4);
* its **carrier**: the wall clock and timers (``now_ns``, ``call_later``), as the UDP carrier's;
* its **scheduler**: :meth:`step` waits on every socket and the next timer, reads what came,
  writes what is queued, runs due timers; ``CQ.poll`` and rdma_cm's waits advance through it.

Every callback into the engine (``receiver.on_bytes``, ``on_closed``, ``on_accept``,
``on_result``) runs from :meth:`step`, never from inside ``write``/``connect``/``listen``, as the
carrier rules ask (:mod:`rdmalab.verbs.engine.carrier`).

:func:`use_interface` makes one on an interface for this run and makes it the device
``get_device_list()`` and rdma_cm use (what ``rdmalab rping --netdev IF --transport iwarp`` and
``rdmalab perftest -R -d IF --transport iwarp`` do).
"""

from __future__ import annotations

import errno
import heapq
import ipaddress
import os
import random
import selectors
import socket
import time
from collections.abc import Callable
from typing import Any

from rdmalab.fabric.udp_setup import (
    CarrierError,
    ib_mtu_for,
    interface_ipv4,
    interface_mac,
    interface_mtu,
    interface_of,
)
from rdmalab.verbs.device import set_default_devices
from rdmalab.verbs.engine.carrier import Timer
from rdmalab.verbs.engine.iwdevice import ConnectResult, IwDevice
from rdmalab.verbs.engine.trace import Trace, TraceEvent

__all__ = ["KernelStream", "KernelTcpFabric", "use_interface"]

RECV_CHUNK = 1 << 16


class KernelStream:
    """One kernel TCP connection as an iWARP QP's :class:`~rdmalab.verbs.engine.iwarp.Stream`.

    ``local``/``peer`` are ``(ip, port)``; ``mss`` is the kernel's ``TCP_MAXSEG`` for it (siw
    sizes its FPDUs by ``mss_cache`` the same way).  ``write`` queues and sends what the socket
    takes at once; the rest leaves from :meth:`KernelTcpFabric.step`.  ``close`` sends what is
    queued, then a FIN; the receiver hears ``on_closed`` once, when the peer's FIN (or a reset)
    has come."""

    def __init__(self, fab: KernelTcpFabric, sock: socket.socket) -> None:
        self.fab, self.sock = fab, sock
        self.receiver: Any = None
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.local: tuple[str, int] = sock.getsockname()[:2]
        self.peer: tuple[str, int] = sock.getpeername()[:2]
        try:
            self.mss = int(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG)) or 1448
        except OSError:
            self.mss = 1448
        self.dev = fab.device
        self._out = bytearray()
        self._closing = False    # close() called: FIN once the queue is out
        self._fin_sent = False
        self._done = False       # the socket is closed, on_closed said
        self.bytes_in = self.bytes_out = 0
        fab._sel.register(sock, selectors.EVENT_READ, self)

    def write(self, data: bytes) -> None:
        if self._done or self._closing:
            return
        self._out += data
        self._flush()

    def close(self) -> None:
        if self._done or self._closing:
            return
        self._closing = True
        self._flush()

    # -- from the scheduler
    def _flush(self) -> None:
        while self._out:
            try:
                n = self.sock.send(self._out)
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:
                self._out.clear()
                self.fab._later(self._finish, f"TCP send failed: {exc.strerror or exc}")
                return
            self.bytes_out += n
            del self._out[:n]
        if self._out:
            self._interest(selectors.EVENT_READ | selectors.EVENT_WRITE)
            return
        self._interest(selectors.EVENT_READ)
        if self._closing and not self._fin_sent:
            self._fin_sent = True
            try:
                self.sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass

    def _interest(self, events: int) -> None:
        if self._done:
            return
        key = self.fab._sel.get_key(self.sock)
        if key.events != events:
            self.fab._sel.modify(self.sock, events, self)

    def _ready(self, mask: int) -> None:
        if mask & selectors.EVENT_WRITE:
            self._flush()
        if mask & selectors.EVENT_READ and not self._done:
            try:
                data = self.sock.recv(RECV_CHUNK)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                self._finish(f"TCP connection reset ({exc.strerror or exc})")
                return
            if not data:
                self._finish("the peer closed the TCP connection (FIN)")
                return
            self.bytes_in += len(data)
            if self.receiver is not None:
                self.receiver.on_bytes(data)

    def _finish(self, why: str) -> None:
        if self._done:
            return
        self._done = True
        try:
            self.fab._sel.unregister(self.sock)
        except (KeyError, ValueError):
            pass
        self.sock.close()
        self.fab._streams.discard(self)
        if self.receiver is not None:
            self.receiver.on_closed(why)

    def __repr__(self) -> str:
        return f"<KernelStream {self.local[0]}:{self.local[1]} -> {self.peer[0]}:{self.peer[1]}>"


class _Listener:
    def __init__(self, fab: KernelTcpFabric, sock: socket.socket, on_accept: Callable[[Any], None]) -> None:
        self.fab, self.sock, self.on_accept = fab, sock, on_accept

    def _ready(self, mask: int) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            stream = KernelStream(self.fab, conn)
            self.fab._streams.add(stream)
            self.on_accept(stream)


class _Connecting:
    def __init__(self, fab: KernelTcpFabric, sock: socket.socket, dst: tuple[str, int], on_result: ConnectResult) -> None:
        self.fab, self.sock, self.dst, self.on_result = fab, sock, dst, on_result

    def _ready(self, mask: int) -> None:
        self.fab._sel.unregister(self.sock)
        err = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if err:
            self.sock.close()
            why = "connection refused" if err == errno.ECONNREFUSED else f"TCP connect to {self.dst[0]}:{self.dst[1]}: {os.strerror(err)}"
            self.on_result(None, why)
            return
        stream = KernelStream(self.fab, self.sock)
        self.fab._streams.add(stream)
        self.on_result(stream, None)


class KernelTcpFabric:
    """One soft iWARP device on interface ``ifname`` (or the one with address ``ip``), TCP by the kernel.

    ``fab.device`` is the :class:`IwDevice` (named ``name``); ``mpa_crc`` makes it ask for MPA
    CRC32c.  ``poll_wait`` is how long :meth:`progress` waits for traffic before giving up."""

    burst_ok = False

    def __init__(self, ifname: str | None = None, ip: str | None = None, *, name: str = "rdmalab0",
                 mpa_crc: bool = False, poll_wait: float = 0.02, seed: int | None = None) -> None:
        if ifname is None and ip is None:
            raise CarrierError(errno.EINVAL, "give the interface (ifname=) or its IPv4 address (ip=)")
        if ifname is None:
            assert ip is not None
            ifname = interface_of(ip)
        if ip is None:
            ip = interface_ipv4(ifname)
        try:
            ipv4 = int(ipaddress.IPv4Address(ip))
        except ValueError:
            raise CarrierError(errno.EINVAL, f"{ip!r} is not an IPv4 address") from None
        self.ifname, self.ip = ifname, ip
        self.netdev_mtu = interface_mtu(ifname)
        self.mtu = ib_mtu_for(self.netdev_mtu)   # what the device reports as active MTU (siw: 1024 on 1500)
        self.rng = random.Random(seed)
        self.trace = Trace()
        self._tracing = False
        self.poll_wait = poll_wait
        self._seq = 0
        self._timers: list[tuple[int, int, Callable[[Any], None], Any]] = []
        self._sel = selectors.DefaultSelector()
        self._listeners: dict[tuple[str, int], _Listener] = {}
        self._streams: set[KernelStream] = set()
        self._closed = False
        self.device = IwDevice(name, ipv4, interface_mac(ifname), self, self, seed=self.rng.getrandbits(32),
                               mpa_crc=mpa_crc)
        self.device.ifname = ifname
        self.devices = {name: self.device}

    # ------------------------------------------------------------------ the TCP stack
    def _addr(self, ip: str) -> str:
        # a wildcard listener is pinned to the device (siw pins it to the netdev: sk_bound_dev_if)
        return self.ip if ip in ("", "0.0.0.0") else ip

    def listen(self, ip: str, port: int, on_accept: Callable[[Any], None]) -> None:
        addr = (self._addr(ip), port)
        if addr in self._listeners:
            raise OSError(errno.EADDRINUSE, f"{addr[0]}:{port} is already listened on")
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(addr)
            s.listen(16)
        except OSError:
            s.close()
            raise
        s.setblocking(False)
        lst = _Listener(self, s, on_accept)
        self._listeners[addr] = lst
        self._sel.register(s, selectors.EVENT_READ, lst)

    def unlisten(self, ip: str, port: int) -> None:
        lst = self._listeners.pop((self._addr(ip), port), None)
        if lst is not None:
            self._sel.unregister(lst.sock)
            lst.sock.close()

    def connect(self, src: tuple[str, int], dst: tuple[str, int], on_result: ConnectResult) -> None:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((self._addr(src[0]), src[1]))
            s.setblocking(False)
            err = s.connect_ex(dst)
        except OSError:
            s.close()
            raise
        if err not in (0, errno.EINPROGRESS):
            s.close()
            why = "connection refused" if err == errno.ECONNREFUSED else f"TCP connect to {dst[0]}:{dst[1]}: {os.strerror(err)}"
            self._later(lambda w: on_result(None, w), why)
            return
        self._sel.register(s, selectors.EVENT_WRITE, _Connecting(self, s, dst, on_result))

    # ------------------------------------------------------------------ the carrier
    @property
    def now_ns(self) -> int:
        return time.monotonic_ns()

    def call_later(self, delay_ns: int, fn: Callable[[Any], None], arg: Any = None) -> Timer:
        t = Timer(fn, arg)
        cb: Callable[[Any], None] = t
        self._seq += 1
        heapq.heappush(self._timers, (time.monotonic_ns() + max(0, int(delay_ns)), self._seq, cb, None))
        return t

    def _later(self, fn: Callable[[Any], None], arg: Any) -> None:
        self.call_later(0, fn, arg)

    @property
    def scheduler(self) -> KernelTcpFabric:
        return self

    @property
    def tracing(self) -> bool:
        return self._tracing

    @tracing.setter
    def tracing(self, on: bool) -> None:
        self._tracing = on

    def record(self, ev: TraceEvent) -> None:
        self.trace.append(ev)

    def resolve_mac(self, gid: int) -> int | None:
        return None   # the kernel resolves and routes; the engine puts no frame on the wire itself

    def send(self, src: Any, pkt: Any) -> None:
        raise CarrierError(errno.EPROTO, "an iWARP device sends bytes on its TCP streams, no RoCE packets")

    def add_device(self, name: str | None = None, ip: str | None = None, mac: int | None = None) -> Any:
        raise ValueError("a KernelTcpFabric carries one device, its interface's (fab.device)")

    # ------------------------------------------------------------------ the scheduler
    def step(self, timeout: float = 0.0) -> bool:
        """Wait up to ``timeout`` s (less if a timer falls due) for any socket, handle what is ready, run due
        timers.  True if anything happened."""
        if self._closed:
            return False
        if self._timers:
            timeout = min(timeout, max(0.0, (self._timers[0][0] - time.monotonic_ns()) / 1e9))
        did = 0
        for key, mask in self._sel.select(timeout if timeout > 0 else 0):
            key.data._ready(mask)
            did += 1
        t = self._timers
        now = time.monotonic_ns()
        while t and t[0][0] <= now:
            _, _, fn, arg = heapq.heappop(t)
            fn(arg)
            did += 1
        self.device.flush()
        return did > 0

    def run(self, until_ns: int | None = None, max_events: int = 10_000_000) -> int:
        steps = 0
        while steps < max_events and not self._closed:
            if until_ns is not None and time.monotonic_ns() >= until_ns:
                break
            if not self._timers and until_ns is None:
                self.step()
                break
            self.step(0.01)
            steps += 1
        return steps

    def progress(self, done: Callable[[], bool], max_steps: int = 20_000, timeout: float | None = None) -> bool:
        end = time.monotonic() + (self.poll_wait if timeout is None else timeout)
        while not done():
            left = end - time.monotonic()
            if left <= 0:
                self.step()
                return done()
            self.step(min(left, 0.05))
        return True

    def run_until(self, done: Callable[[], bool], timeout: float) -> bool:
        return self.progress(done, timeout=timeout)

    def fileno(self) -> int:
        """The selector's descriptor: traffic can come from outside this process (rdma_cm waits for it)."""
        return self._sel.fileno()

    def close(self) -> None:
        """Close every socket (connections end with a FIN, or a reset if data was still unread)."""
        if self._closed:
            return
        self._closed = True
        for stream in list(self._streams):
            stream._flush()
            stream.sock.close()
        for lst in self._listeners.values():
            lst.sock.close()
        self._listeners.clear()
        self._sel.close()

    def __enter__(self) -> KernelTcpFabric:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def use_interface(ifname: str, name: str = "rdmalab0", *, mpa_crc: bool = False, **options: Any) -> KernelTcpFabric:
    """A soft iWARP device on ``ifname`` for this run, made the devices ``get_device_list()`` offers."""
    fab = KernelTcpFabric(ifname=ifname, name=name, mpa_crc=mpa_crc, **options)
    set_default_devices(lambda: fab)
    return fab
