"""The out-of-band exchanges of the stock test programs, over TCP: records and connections.

Two families (facts from the programs' sources, named below):

* rdma-core's ``ibv_{rc,uc,ud,srq}_pingpong`` (``libibverbs/examples/*_pingpong.c`` at v44.0):
  a 52-byte record ``"%04x:%06x:%06x:%s"`` (LID, QPN, PSN, GID as 32 hex digits in network
  order) plus a NUL, written and read as one unit; the client writes first; the server connects
  its QP before it answers; the client closes with ``"done\\0"``.  srq_pingpong sends 256
  records each way (``MAX_QP``), the unused ones zero.
* perftest 4.5 (``src/perftest_communication.c``): a 108-byte key record
  ``"%04x:%04x:%06x:%06x:%08x:%016llx:"`` + 16 x ``"%02x:"`` + ``"%08x:"`` + NUL (LID,
  out_reads, QPN, PSN, rkey, vaddr, GID bytes, SRQN) and raw exchanges (version string, page
  size, cache line, MTU, report doubles); in every exchange the client writes, then reads.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass


class OOBError(Exception):
    """The out-of-band exchange failed (connection refused, peer gone, a record that does not parse)."""


def open_listener(port: int, *, family: int = socket.AF_INET6) -> socket.socket:
    """A TCP socket listening on ``port`` on all addresses: IPv4 and IPv6 where the host has IPv6 (as the
    stock programs' ``AI_PASSIVE``/``AF_UNSPEC``) unless ``family`` is ``AF_INET``; ``socket.create_server``
    (with ``SO_REUSEADDR``).  (``rdmalab pingpong``/``perftest`` open theirs with the C module before they
    load anything else: :func:`rdmalab.cli.listen_socket`.)"""
    dual = family == socket.AF_INET6 and socket.has_dualstack_ipv6()
    try:
        return socket.create_server(("::" if dual else "", port), family=socket.AF_INET6 if dual else socket.AF_INET,
                                    backlog=1, dualstack_ipv6=dual)
    except OSError as exc:
        raise OOBError(f"Couldn't listen to port {port}: {exc.strerror or exc}") from None

PP_RECORD = 52  # sizeof "0000:000000:000000:00000000000000000000000000000000"
PP_DONE = b"done\0"
PERF_RECORD = 108  # KEY_MSG_SIZE_GID


# ---------------------------------------------------------------------- pingpong records
@dataclass
class PPDest:
    lid: int
    qpn: int
    psn: int
    gid: bytes  # 16 bytes, network order

    def encode(self) -> bytes:
        text = f"{self.lid:04x}:{self.qpn:06x}:{self.psn:06x}:{self.gid.hex()}".encode()
        return text + b"\0" * (PP_RECORD - len(text))

    @classmethod
    def decode(cls, raw: bytes) -> PPDest:
        text = raw.split(b"\0", 1)[0].decode("ascii", "replace")
        parts = text.split(":")
        try:
            if len(parts) != 4 or len(parts[3]) != 32:
                raise ValueError
            return cls(int(parts[0], 16), int(parts[1], 16), int(parts[2], 16), bytes.fromhex(parts[3]))
        except ValueError:
            raise OOBError(f"the peer's address record {text!r} is not LID:QPN:PSN:GID "
                           "(is the peer an ibv_*_pingpong of the same kind?)") from None


def gid_text(gid: bytes) -> str:
    """A GID as the tools print it (``inet_ntop(AF_INET6)``: ``::ffff:10.0.0.1``)."""
    return socket.inet_ntop(socket.AF_INET6, gid)


# ---------------------------------------------------------------------- perftest records
@dataclass
class PerfDest:
    lid: int
    out_reads: int
    qpn: int
    psn: int
    rkey: int
    vaddr: int
    gid: bytes
    srqn: int = 0

    def encode(self) -> bytes:
        text = (f"{self.lid:04x}:{self.out_reads:04x}:{self.qpn:06x}:{self.psn:06x}:{self.rkey:08x}:"
                f"{self.vaddr:016x}:" + "".join(f"{b:02x}:" for b in self.gid) + f"{self.srqn:08x}:").encode()
        assert len(text) == PERF_RECORD - 1
        return text + b"\0"

    @classmethod
    def decode(cls, raw: bytes) -> PerfDest:
        text = raw.split(b"\0", 1)[0].decode("ascii", "replace")
        parts = text.split(":")
        try:
            if len(parts) < 23:
                raise ValueError
            gid = bytes(int(x, 16) for x in parts[6:22])
            return cls(int(parts[0], 16), int(parts[1], 16), int(parts[2], 16), int(parts[3], 16),
                       int(parts[4], 16), int(parts[5], 16), gid, int(parts[22], 16))
        except ValueError:
            raise OOBError(f"the peer's key record {text!r} does not parse as perftest's "
                           "LID:OUT_READS:QPN:PSN:RKEY:VADDR:GID...:SRQN (is the peer perftest 4.5 with a GID?)") from None


# ---------------------------------------------------------------------- connections
class Channel:
    """A TCP connection carrying fixed-size exchanges (reads are exact: short reads are joined)."""

    def __init__(self, sock: socket.socket, timeout: float = 120.0) -> None:
        self.sock = sock
        self.timeout = timeout
        self.sock.settimeout(timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # While set, called again and again while a read waits (the engine's event loop keeps
        # answering the peer's RDMA traffic while we wait for its next out-of-band record).  It
        # returns True when it handled traffic: a peer still sending (a long ``-a`` run on a slow
        # machine) is not idle, so the timeout counts only the time with neither a record nor traffic.
        self.pump: Callable[[], bool] | None = None

    @property
    def local_ip(self) -> str:
        return str(self.sock.getsockname()[0]).removeprefix("::ffff:")

    @property
    def peer_ip(self) -> str:
        return str(self.sock.getpeername()[0]).removeprefix("::ffff:")

    def send(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except OSError as exc:
            raise OOBError(f"the out-of-band connection failed while sending: {exc.strerror or exc}") from None

    def recv(self, n: int, what: str = "data") -> bytes:
        buf = bytearray()
        end = time.monotonic() + self.timeout
        while len(buf) < n:
            try:
                if self.pump is not None:
                    if self.pump():
                        end = time.monotonic() + self.timeout
                    self.sock.settimeout(0)
                    try:
                        chunk = self.sock.recv(n - len(buf))
                    except BlockingIOError:
                        if time.monotonic() > end:
                            raise TimeoutError from None
                        continue
                    finally:
                        self.sock.settimeout(self.timeout)
                else:
                    chunk = self.sock.recv(n - len(buf))
            except TimeoutError:
                idle = " (nor any RDMA traffic)" if self.pump is not None else ""
                raise OOBError(f"the peer did not send {what} on the out-of-band connection{idle} for "
                               f"{self.timeout:g} s") from None
            except OSError as exc:
                raise OOBError(f"the out-of-band connection failed while reading {what}: "
                               f"{exc.strerror or exc}") from None
            if not chunk:
                raise OOBError(f"the peer closed the out-of-band connection before sending {what} "
                               f"({len(buf)} of {n} bytes)")
            buf += chunk
        return bytes(buf)

    def recv_upto(self, n: int, timeout: float = 5.0) -> bytes:
        """Whatever arrives (at most ``n`` bytes) before the peer closes or ``timeout`` passes."""
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(n)
        except OSError:
            return b""

    def exchange(self, mine: bytes, n: int, client: bool, what: str) -> bytes:
        """Client: write then read; server: read then write (perftest's ``ctx_xchg_data``)."""
        if client:
            self.send(mine)
            return self.recv(n, what)
        got = self.recv(n, what)
        self.send(mine)
        return got

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def connect(host: str, port: int, *, family: int = socket.AF_UNSPEC, tries: float = 0.0) -> Channel:
    """Connect to ``host:port`` (``tries`` seconds of retrying while the server is not up yet)."""
    end = time.monotonic() + tries
    last: Exception | None = None
    while True:
        try:
            infos = socket.getaddrinfo(host, port, family, socket.SOCK_STREAM)
        except socket.gaierror as exc:
            raise OOBError(f"cannot resolve {host!r}: {exc.strerror}") from None
        for fam, typ, proto, _, addr in infos:
            s = socket.socket(fam, typ, proto)
            try:
                s.settimeout(10)
                s.connect(addr)
                return Channel(s)
            except OSError as exc:
                last = exc
                s.close()
        if time.monotonic() >= end:
            raise OOBError(f"Couldn't connect to {host}:{port} ({last})")
        time.sleep(0.2)


def listen(port: int, *, family: int = socket.AF_INET6, timeout: float | None = None,
           listener: socket.socket | None = None) -> Channel:
    """Accept one connection on ``port`` (on ``listener`` if given: :func:`open_listener`'s socket); the
    listening socket is closed once the connection is accepted (or on failure)."""
    srv = listener if listener is not None else open_listener(port, family=family)
    try:
        srv.settimeout(timeout)
        conn, _ = srv.accept()
    except TimeoutError:
        raise OOBError(f"no client connected to port {port} in time") from None
    except OSError as exc:
        raise OOBError(f"Couldn't listen to port {port}: {exc.strerror or exc}") from None
    finally:
        srv.close()
    return Channel(conn)


def pack_double(x: float) -> bytes:
    """A double as perftest sends report fields (``bswap_64`` on little-endian: big-endian)."""
    return struct.pack(">d", x)


def pack_u64(x: int) -> bytes:
    return struct.pack(">Q", x)
