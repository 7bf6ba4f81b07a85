"""A small RDMA key-value store on the soft engine: GET by one-sided READs, or GET/PUT by RPC.

The two designs the papers compare (issue 40):

* **Pilaf-style GET** (Mitchell, Geng, Li, USENIX ATC 2013): the client reads the server's hash table
  itself with RDMA READs, bucket by bucket along the key's probe sequence, and the server's CPU takes
  no part.  A PUT is the server's own (local) update of a bucket, so a READ that reaches the bucket
  while a PUT is half done returns a *torn* bucket: new bytes in front, old ones behind.  Every bucket
  carries a CRC32 over its version, key and value (Pilaf's self-verifying data); the client checks it
  and reads the bucket again on a mismatch, counting the retries.
* **HERD-style RPC** (Kalia, Kaminsky, Andersen, SIGCOMM 2014): the client RDMA-WRITEs its request
  (RC, inline, unsignaled) into its own slot of a request region at the server; the server's CPU polls
  the region, does the GET or PUT on its table, and answers with a **UD SEND**.  UD, as HERD chose it:
  one datagram QP at the server answers every client (no connected QP per client for the responses,
  so no per-client QP context for the NIC to keep), and a SEND is the one operation that puts the answer
  into the client's memory *and* tells the client's CPU it is there (a completion), which a WRITE does not.

The table (:class:`Layout`): ``buckets`` fixed-size buckets in one registered region, linear probing
from ``home(key)``; a bucket is ``version`` (u64, 0 = empty) | ``key`` (16 bytes, zero-padded) |
``value`` (``value_size`` bytes, zero-padded: a value may not end in a zero byte) | ``crc`` (u32, CRC32 of the bytes before it), little
endian; 64 bytes with the default ``value_size`` of 36.  There is no DELETE.

Everything is plain verbs code on :mod:`rdmalab.verbs` objects, so it runs on any carrier of the engine:
the simulated fabric (:class:`~rdmalab.fabric.sim.Fabric`, virtual time: :attr:`GetResult.ns` is
virtual nanoseconds), UDP (:class:`~rdmalab.fabric.udp.UdpFabric`, wall-clock time) or native InfiniBand
(:class:`~rdmalab.fabric.ibfabric.IBFabric`, virtual time; :func:`on_ib`).  The one part that differs by
link layer is how a side names its port to the peer and the address vector to it (:func:`_address`,
:func:`_ah_attr`: by LID without a GRH on InfiniBand, by RoCEv2 GID in a GRH on Ethernet).  The server's
CPU is modelled by events on the carrier's loop: it polls the request region every ``poll_ns`` and
spends ``service_ns`` on each request (parameters, not measurements: 0 takes the CPU out of the figures).

Interleaving in virtual time: :meth:`KvServer.put_local` writes a bucket in two halves ``split_ns``
apart (from ``at_ns``), so that a READ landing in between is torn; :meth:`KvClient.get_read` with
``verify=False`` returns what it read without checking the CRC, which is how a torn value gets out.
"""

from __future__ import annotations

import hashlib
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rdmalab.fabric.ibfabric import IBFabric
from rdmalab.fabric.loop import Loop
from rdmalab.fabric.sim import Fabric
from rdmalab.verbs import enums as e
from rdmalab.verbs.addr import AH, AHAttr, GlobalRoute
from rdmalab.verbs.cq import CQ, WC
from rdmalab.verbs.device import Context
from rdmalab.verbs.mr import MR
from rdmalab.verbs.pd import PD
from rdmalab.verbs.qp import QP, QPAttr, QPCap, QPInitAttr
from rdmalab.verbs.wr import SGE, RecvWR, SendWR

__all__ = ["GET", "KEY_SIZE", "PUT", "QKEY", "Bucket", "GetResult", "KvClient", "KvError", "KvServer", "Layout",
           "PendingPut", "RpcResult", "Store", "TornReadError", "connect", "key_at_distance", "on_ib", "simulated"]

KEY_SIZE = 16
QKEY = 0x4B560001
GET, PUT = 1, 2
#: status byte of an RPC response
OK, NOT_FOUND, FULL = 0, 1, 2
GRH = 40  # a UD receive buffer starts with the 40 bytes the GRH takes
_RC_ACCESS = e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
_ID_READ, _ID_REQ, _ID_RECV, _ID_RESP = 1, 2, 3, 4
_EMPTY_POLLS = 200  # polls of a CQ that finds nothing, with the carrier idle, before a wait gives up


class KvError(Exception):
    """A key-value operation that cannot be done (bad key or value, a full table, a failed completion)."""


class TornReadError(KvError):
    """A READ-based GET that read a bucket with a bad checksum more than ``max_retries`` times in a row."""


# ---------------------------------------------------------------------------- the table


@dataclass(frozen=True)
class Bucket:
    """One decoded bucket: ``ok`` says whether its CRC matches its bytes."""

    index: int
    version: int
    key: bytes
    value: bytes
    crc: int
    ok: bool

    @property
    def empty(self) -> bool:
        return self.version == 0


@dataclass(frozen=True)
class Layout:
    """The hash table's shape: ``buckets`` buckets of ``bucket_size`` bytes (values of ``value_size`` bytes)."""

    buckets: int = 64
    value_size: int = 36

    def __post_init__(self) -> None:
        if not 1 <= self.buckets <= 1 << 20:
            raise KvError(f"Layout.buckets: {self.buckets} is not in 1..{1 << 20}")
        if not 1 <= self.value_size <= 4096:
            raise KvError(f"Layout.value_size: {self.value_size} is not in 1..4096")

    @property
    def bucket_size(self) -> int:
        return 8 + KEY_SIZE + self.value_size + 4

    @property
    def size(self) -> int:
        return self.buckets * self.bucket_size

    def home(self, key: bytes) -> int:
        """The first bucket of ``key``'s probe sequence (BLAKE2b of the key, modulo the buckets)."""
        h = hashlib.blake2b(check_key(key), digest_size=8).digest()
        return int.from_bytes(h, "little") % self.buckets

    def probe(self, key: bytes) -> list[int]:
        """Every bucket ``key`` may be in, in the order a GET looks (linear probing from ``home``)."""
        h = self.home(key)
        return [(h + i) % self.buckets for i in range(self.buckets)]

    def offset(self, index: int) -> int:
        return index * self.bucket_size

    def encode(self, key: bytes, value: bytes, version: int) -> bytes:
        """A bucket's bytes, CRC included (``key`` b"" and version 0: the empty bucket)."""
        if len(value) > self.value_size:
            raise KvError(f"value: {len(value)} bytes, more than the table's value_size of {self.value_size}")
        if value.endswith(b"\0"):
            raise KvError(f"value {bytes(value[:16])!r}...: ends in a zero byte (the bucket pads values with zeros, "
                          "so a GET could not tell them from the padding)")
        body = (struct.pack("<Q", version) + key.ljust(KEY_SIZE, b"\0") + value.ljust(self.value_size, b"\0"))
        return body + struct.pack("<I", zlib.crc32(body))

    def decode(self, raw: bytes, index: int = 0) -> Bucket:
        if len(raw) != self.bucket_size:
            raise KvError(f"bucket {index}: {len(raw)} bytes, not {self.bucket_size}")
        body, (crc,) = raw[:-4], struct.unpack("<I", raw[-4:])
        (version,) = struct.unpack("<Q", body[:8])
        return Bucket(index, version, body[8:8 + KEY_SIZE].rstrip(b"\0"), body[8 + KEY_SIZE:], crc,
                      zlib.crc32(body) == crc)


def check_key(key: bytes) -> bytes:
    if not isinstance(key, (bytes, bytearray)):
        raise KvError(f"key: {type(key).__name__}, not bytes")
    if not 1 <= len(key) <= KEY_SIZE or key.endswith(b"\0"):
        raise KvError(f"key {bytes(key)!r}: 1..{KEY_SIZE} bytes, not ending in a zero byte")
    return bytes(key)


def _loop(ctx: Context) -> Loop:
    """The event loop of ``ctx``'s carrier (its clock, and where the server's CPU schedules its work): the
    carrier's scheduler, or the loop that scheduler runs on (:class:`~rdmalab.fabric.ibfabric.IBFabric`)."""
    sched = ctx.device.scheduler
    loop = sched if isinstance(sched, Loop) else getattr(sched, "loop", None)
    if not isinstance(loop, Loop):
        raise KvError(f"device {ctx.name}: its carrier's scheduler {type(sched).__name__} is not an event loop "
                      "and runs on none (rdmalab.fabric.loop.Loop: the simulated fabric, UDP, native IB)")
    return loop


# The one part that differs by link layer: how a peer's port is named, and the address vector to it.
def _address(ctx: Context) -> dict[str, Any]:
    """Where peers reach port 1 of ``ctx``: its LID on InfiniBand (``{"lid": n}``), its RoCEv2 GID (index 1)
    on Ethernet (``{"gid": GID}``)."""
    port = ctx.query_port(1)
    if port.link_layer == e.IBV_LINK_LAYER_INFINIBAND:
        return {"lid": port.lid}
    return {"gid": ctx.query_gid(1, 1)}


def _ah_attr(peer: dict[str, Any]) -> AHAttr:
    """The address vector to a peer's :func:`_address`: by LID in the LRH alone (no GRH) on InfiniBand, by GID
    in a GRH (RoCEv2) on Ethernet."""
    if "lid" in peer:
        return AHAttr(port_num=1, dlid=peer["lid"], sl=0, is_global=0)
    if "gid" in peer:
        return AHAttr(port_num=1, is_global=1, gr=GlobalRoute(dgid=peer["gid"], sgid_index=1))
    raise KvError(f"peer address {sorted(peer)}: neither a lid (InfiniBand) nor a gid (RoCE)")


def _rc_qp(pd: PD, cq: CQ, depth: int) -> QP:
    init = QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, sq_sig_all=0,
                      cap=QPCap(max_send_wr=depth, max_recv_wr=depth, max_inline_data=128))
    attr = QPAttr(port_num=1)
    attr.qp_access_flags = _RC_ACCESS
    return QP(pd, init, attr)


def _ud_qp(pd: PD, cq: CQ, depth: int) -> QP:
    init = QPInitAttr(qp_type=e.IBV_QPT_UD, scq=cq, rcq=cq, sq_sig_all=0,
                      cap=QPCap(max_send_wr=depth, max_recv_wr=depth, max_inline_data=128))
    attr = QPAttr(port_num=1)
    attr.qkey = QKEY
    qp = QP(pd, init, attr)
    if qp.qp_state != e.IBV_QPS_RTS:
        qp.to_rts(QPAttr())
    return qp


def _connect_rc(qp: QP, peer: dict[str, Any], qpn: int, rq_psn: int, sq_psn: int, mtu: int) -> None:
    attr = QPAttr(port_num=1, path_mtu=mtu)
    attr.qp_access_flags = _RC_ACCESS
    attr.max_dest_rd_atomic = attr.max_rd_atomic = 4
    attr.min_rnr_timer, attr.timeout, attr.retry_cnt, attr.rnr_retry = 12, 14, 7, 7
    attr.ah_attr = _ah_attr(peer)
    attr.dest_qp_num, attr.rq_psn, attr.sq_psn = qpn, rq_psn, sq_psn
    qp.to_rts(attr)


def _request_size(layout: Layout) -> int:
    """A request slot: op (u8) | key | value | seq (u32, last: the server sees a request once its seq changed)."""
    return 1 + KEY_SIZE + layout.value_size + 4


def _response_size(layout: Layout) -> int:
    """A response: seq (u32) | status (u8) | 3 pad | version (u64) | value."""
    return 16 + layout.value_size


# ---------------------------------------------------------------------------- the server


@dataclass
class PendingPut:
    """A :meth:`KvServer.put_local` under way: ``first_ns`` and ``done_ns`` are when its halves land."""

    key: bytes
    value: bytes
    index: int
    version: int
    first_ns: int
    done_ns: int
    old: bytes = b""  # the bucket's bytes before the PUT
    new: bytes = b""  # and after it


@dataclass
class _Client:
    qp: QP
    slot: int
    ud_qpn: int
    ah: AH
    seen: int = 0


class KvServer:
    """The table's owner on device ``ctx``: the table and request regions, an RC QP per client, one UD QP.

    ``poll_ns``: how often its CPU looks at the request region; ``service_ns``: the CPU time of one request.
    """

    def __init__(self, ctx: Context, layout: Layout | None = None, *, max_clients: int = 16, poll_ns: int = 100,
                 service_ns: int = 200, mtu: int = e.IBV_MTU_1024) -> None:
        if poll_ns < 1 or service_ns < 0:
            raise KvError(f"KvServer: poll_ns {poll_ns} (>= 1), service_ns {service_ns} (>= 0)")
        self.ctx = ctx
        self.layout = layout or Layout()
        self.poll_ns, self.service_ns, self.mtu = poll_ns, service_ns, mtu
        self.loop = _loop(ctx)
        self.pd = PD(ctx)
        self.table = MR(self.pd, self.layout.size, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_READ)
        empty = self.layout.encode(b"", b"", 0)
        self.table.write(empty * self.layout.buckets, self.layout.size, 0)
        self.slot_size = _request_size(self.layout)
        self.requests = MR(self.pd, max_clients * self.slot_size, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE)
        self.cq = CQ(ctx, 4096)
        self.ud = _ud_qp(self.pd, self.cq, 1024)
        # one response buffer per client: a client has one request outstanding, so its buffer is free again
        # by the time its next request comes (a SEND too long to go inline is read from it after the post)
        self.resp = MR(self.pd, max_clients * _response_size(self.layout), e.IBV_ACCESS_LOCAL_WRITE)
        self.max_clients = max_clients
        self.clients: list[_Client] = []
        self._writing: dict[int, PendingPut] = {}  # bucket index -> the split PUT still writing it
        self._busy_until = 0
        self._running = False
        self.served = {"get": 0, "put": 0, "polls": 0, "deferred": 0}

    # ------------------------------------------------------------------ connecting
    def accept(self, client: dict[str, Any]) -> dict[str, Any]:
        """Take a client's address (:meth:`KvClient.address`), make its RC QP; return what the client needs."""
        if len(self.clients) >= self.max_clients:
            raise KvError(f"KvServer: already {self.max_clients} clients (max_clients)")
        qp = _rc_qp(self.pd, self.cq, 64)
        psn = self.ctx.device.rng.getrandbits(24)
        _connect_rc(qp, client, client["rc_qpn"], client["psn"], psn, self.mtu)
        ah = AH(self.pd, _ah_attr(client))
        slot = len(self.clients)
        self.clients.append(_Client(qp, slot, client["ud_qpn"], ah))
        return {**_address(self.ctx), "rc_qpn": qp.qp_num, "psn": psn, "ud_qpn": self.ud.qp_num,
                "table": self.table.buf, "table_rkey": self.table.rkey, "buckets": self.layout.buckets,
                "value_size": self.layout.value_size, "request": self.requests.buf + slot * self.slot_size,
                "request_rkey": self.requests.rkey}

    # ------------------------------------------------------------------ the table, locally
    def bucket(self, index: int) -> Bucket:
        lay = self.layout
        return lay.decode(self.table.read(lay.bucket_size, lay.offset(index)), index)

    def find(self, key: bytes) -> tuple[int, Bucket | None]:
        """(the bucket holding ``key`` or the empty one it would go in, that bucket's contents if it holds the key);
        (-1, None) if the table is full without it."""
        for i in self.layout.probe(key):
            b = self.bucket(i)
            if b.empty:
                return i, None
            if b.key == key:
                return i, b
        return -1, None

    def lookup(self, key: bytes) -> bytes | None:
        """The value of ``key`` as the table holds it now (the server's own view)."""
        _, b = self.find(check_key(key))
        return None if b is None else b.value.rstrip(b"\0")

    def put_local(self, key: bytes, value: bytes, *, at_ns: int | None = None, split_ns: int = 0) -> PendingPut:
        """The server's CPU stores ``value`` under ``key``: the bucket's first half at ``at_ns`` (default now),
        its second half (the rest of the value and the CRC) ``split_ns`` later; both at once if 0.

        The bucket is chosen now; the write happens when the loop runs (at once only if ``at_ns`` is now and
        ``split_ns`` is 0).  Returns the :class:`PendingPut` (its ``old`` and ``new`` bytes, its times)."""
        key = check_key(key)
        index, b = self.find(key)
        if index < 0:
            raise KvError(f"put {key!r}: the table is full ({self.layout.buckets} buckets)")
        if index in self._writing:
            raise KvError(f"put {key!r}: bucket {index} is already being written by a PUT until "
                          f"{self._writing[index].done_ns} ns")
        now = self.loop.now_ns
        at = now if at_ns is None else at_ns
        if at < now or split_ns < 0:
            raise KvError(f"put {key!r}: at_ns {at} is before now ({now} ns) or split_ns {split_ns} < 0")
        version = 1 if b is None else b.version + 1
        lay = self.layout
        p = PendingPut(key, bytes(value), index, version, at, at + split_ns,
                       self.table.read(lay.bucket_size, lay.offset(index)), lay.encode(key, value, version))
        half = lay.bucket_size // 2
        if split_ns == 0 and at == now:
            self._write(index, 0, p.new)
            return p
        self._writing[index] = p
        self.loop.call_at(at, lambda _: self._write(index, 0, p.new[:half]))
        self.loop.call_at(at + split_ns, lambda _: self._finish(p, half))
        return p

    def _write(self, index: int, start: int, data: bytes) -> None:
        self.table.write(data, len(data), self.layout.offset(index) + start)

    def _finish(self, p: PendingPut, half: int) -> None:
        self._write(p.index, half, p.new[half:])
        self._writing.pop(p.index, None)

    # ------------------------------------------------------------------ serving RPCs
    def start(self) -> None:
        """Start the CPU's polling of the request region (an event every ``poll_ns`` until :meth:`stop`)."""
        if not self._running:
            self._running = True
            self.loop.call_later(self.poll_ns, self._poll)

    def stop(self) -> None:
        self._running = False

    def _poll(self, _: Any = None) -> None:
        if not self._running:
            return
        self.served["polls"] += 1
        size = self.slot_size
        for c in self.clients:
            raw = self.requests.read(size, c.slot * size)
            (seq,) = struct.unpack("<I", raw[-4:])
            if seq != c.seen:
                c.seen = seq
                start = max(self.loop.now_ns, self._busy_until)
                self._busy_until = start + self.service_ns
                self.loop.call_at(self._busy_until, self._serve, (c, raw))
        while True:  # the UD QP's (unsignaled) SENDs complete only on error: look without running the loop
            if not len(self.cq):
                break
            n, wcs = self.cq.poll(16)
            bad = [w for w in wcs if w.status != e.IBV_WC_SUCCESS]
            if bad:
                raise KvError(f"KvServer: a response failed: {e.ibv_wc_status_str(bad[0].status)}")
        self.loop.call_later(self.poll_ns, self._poll)

    def _serve(self, arg: tuple[_Client, bytes]) -> None:
        c, raw = arg
        lay = self.layout
        op, key = raw[0], raw[1:1 + KEY_SIZE].rstrip(b"\0")
        value = raw[1 + KEY_SIZE:1 + KEY_SIZE + lay.value_size]
        seq = raw[-4:]
        index, b = self.find(key)
        if index in self._writing:  # another core's PUT is writing this bucket: answer once it is done (EREW)
            self.served["deferred"] += 1
            self.loop.call_at(self._writing[index].done_ns, self._serve, arg)
            return
        if op == GET:
            self.served["get"] += 1
            status, version, val = (NOT_FOUND, 0, b"") if b is None else (OK, b.version, b.value)
        elif op == PUT:
            self.served["put"] += 1
            if index < 0:
                status, version, val = FULL, 0, b""
            else:
                version = 1 if b is None else b.version + 1
                self._write(index, 0, lay.encode(key, value.rstrip(b"\0"), version))
                status, val = OK, b""
        else:
            raise KvError(f"KvServer: request slot {c.slot}: op {op}, neither GET ({GET}) nor PUT ({PUT})")
        body = seq + bytes([status, 0, 0, 0]) + struct.pack("<Q", version) + val.ljust(lay.value_size, b"\0")
        inline = len(body) <= 128
        off = c.slot * _response_size(lay)
        self.resp.write(body, len(body), off)
        wr = SendWR(wr_id=_ID_RESP, opcode=e.IBV_WR_SEND, num_sge=1,
                    sg=[SGE(self.resp.buf + off, len(body), self.resp.lkey)], send_flags=e.IBV_SEND_INLINE if inline else 0)
        wr.set_wr_ud(c.ah, c.ud_qpn, QKEY)
        self.ud.post_send(wr)


# ---------------------------------------------------------------------------- the client


@dataclass
class GetResult:
    """A GET: the value (None: not found), its version, and what it took.

    ``round_trips``: READs posted (READ GET; retries included) or 1 (RPC); ``retries``: READs of a bucket
    whose checksum did not match (or, with ``verify=False``, 0); ``ns``: time from the first post to the
    answer (virtual on the simulated fabric); ``buckets``: the buckets read, in order; ``torn``: buckets
    read whose checksum did not match (whether or not they were checked)."""

    key: bytes
    value: bytes | None
    version: int
    round_trips: int
    retries: int
    ns: int
    buckets: list[int] = field(default_factory=list)
    torn: int = 0

    @property
    def found(self) -> bool:
        return self.value is not None


@dataclass
class RpcResult:
    status: int
    version: int
    value: bytes
    ns: int


class KvClient:
    """A client on device ``ctx``: an RC QP to the server (READs of the table, WRITEs of requests), a UD QP for
    the responses.  Connect it with :func:`connect` (or :meth:`address` / :meth:`KvServer.accept` /
    :meth:`attach` when the two sides are in different processes)."""

    def __init__(self, ctx: Context, *, window: int = 1, max_retries: int = 16, mtu: int = e.IBV_MTU_1024,
                 recv_depth: int = 16) -> None:
        if window < 1 or max_retries < 0:
            raise KvError(f"KvClient: window {window} (>= 1), max_retries {max_retries} (>= 0)")
        self.ctx = ctx
        self.window, self.max_retries, self.mtu = window, max_retries, mtu
        self.loop = _loop(ctx)
        self.pd = PD(ctx)
        self.cq = CQ(ctx, 1024)
        self.rcq = CQ(ctx, 1024)
        self.rc = _rc_qp(self.pd, self.cq, 64)
        init = QPInitAttr(qp_type=e.IBV_QPT_UD, scq=self.rcq, rcq=self.rcq, sq_sig_all=0,
                          cap=QPCap(max_send_wr=4, max_recv_wr=recv_depth))
        attr = QPAttr(port_num=1)
        attr.qkey = QKEY
        self.ud = QP(self.pd, init, attr)
        if self.ud.qp_state != e.IBV_QPS_RTS:
            self.ud.to_rts(QPAttr())
        self.psn = ctx.device.rng.getrandbits(24)
        self.recv_depth = recv_depth
        self.server: dict[str, Any] = {}
        self.layout = Layout()
        self.buf: MR | None = None
        self.seq = 0

    def address(self) -> dict[str, Any]:
        return {**_address(self.ctx), "rc_qpn": self.rc.qp_num, "psn": self.psn, "ud_qpn": self.ud.qp_num}

    def attach(self, server: dict[str, Any]) -> None:
        """Connect to the server whose :meth:`KvServer.accept` answer is ``server``."""
        self.server = server
        self.layout = Layout(server["buckets"], server["value_size"])
        lay = self.layout
        self.resp_size = GRH + _response_size(lay)
        self.read_size = max(self.window, 1) * lay.bucket_size
        self.buf = MR(self.pd, self.read_size + _request_size(lay) + self.recv_depth * self.resp_size,
                      e.IBV_ACCESS_LOCAL_WRITE)
        _connect_rc(self.rc, server, server["rc_qpn"], server["psn"], self.psn, self.mtu)
        for i in range(self.recv_depth):
            self._post_recv(i)

    def _post_recv(self, i: int) -> None:
        assert self.buf is not None
        off = self.read_size + _request_size(self.layout) + i * self.resp_size
        self.ud.post_recv(RecvWR(wr_id=_ID_RECV << 16 | i, num_sge=1, sg=[SGE(self.buf.buf + off, self.resp_size,
                                                                             self.buf.lkey)]))

    def _wait(self, cq: CQ, what: str) -> WC:
        empty = 0
        while True:
            n, wcs = cq.poll(1)
            if n:
                wc = wcs[0]
                if wc.status != e.IBV_WC_SUCCESS:
                    raise KvError(f"{what}: completion {e.ibv_wc_status_str(wc.status)}")
                return wc
            empty += 1
            if empty > _EMPTY_POLLS and not self.loop.pending:
                raise KvError(f"{what}: no completion, and nothing left to happen on the carrier")

    # ------------------------------------------------------------------ Pilaf: one-sided READs
    def read_buckets(self, first: int, count: int) -> list[bytes]:
        """One RDMA READ of ``count`` consecutive buckets from bucket ``first``: their raw bytes."""
        if self.buf is None:
            raise KvError("KvClient: not connected (connect(server, client) or attach())")
        lay = self.layout
        length = count * lay.bucket_size
        wr = SendWR(wr_id=_ID_READ, opcode=e.IBV_WR_RDMA_READ, num_sge=1, sg=[SGE(self.buf.buf, length, self.buf.lkey)],
                    send_flags=e.IBV_SEND_SIGNALED)
        wr.set_wr_rdma(self.server["table_rkey"], self.server["table"] + lay.offset(first))
        self.rc.post_send(wr)
        self._wait(self.cq, f"READ of buckets {first}..{first + count - 1}")
        raw = self.buf.read(length, 0)
        return [raw[i * lay.bucket_size:(i + 1) * lay.bucket_size] for i in range(count)]

    def get_read(self, key: bytes, *, verify: bool = True) -> GetResult:
        """GET ``key`` by READs along its probe sequence, ``window`` buckets per READ; with ``verify``, a bucket
        whose CRC does not match is read again (up to ``max_retries`` times in a row, then
        :class:`TornReadError`); without, it is taken as it is (a torn value can be returned)."""
        key = check_key(key)
        lay = self.layout
        start = self.loop.now_ns
        res = GetResult(key, None, 0, 0, 0, 0)
        probe = lay.probe(key)
        pos = in_a_row = 0
        while pos < lay.buckets:
            first = probe[pos]
            count = min(self.window, lay.buckets - first, lay.buckets - pos)
            raws = self.read_buckets(first, count)
            res.round_trips += 1
            for i, raw in enumerate(raws):
                b = lay.decode(raw, first + i)
                res.buckets.append(b.index)
                if not b.ok:
                    res.torn += 1
                    if verify:
                        res.retries += 1
                        in_a_row += 1
                        if in_a_row > self.max_retries:
                            raise TornReadError(f"get {key!r}: bucket {b.index} failed its CRC {in_a_row} times in "
                                                "a row (max_retries)")
                        break  # read again from this bucket
                in_a_row = 0
                pos += 1
                if b.empty or b.key == key:
                    if not b.empty:
                        res.value, res.version = b.value.rstrip(b"\0"), b.version
                    res.ns = self.loop.now_ns - start
                    return res
        res.ns = self.loop.now_ns - start
        return res

    # ------------------------------------------------------------------ HERD: WRITE the request, get a SEND
    def rpc(self, op: int, key: bytes, value: bytes = b"") -> RpcResult:
        if self.buf is None:
            raise KvError("KvClient: not connected (connect(server, client) or attach())")
        key = check_key(key)
        lay = self.layout
        if len(value) > lay.value_size:
            raise KvError(f"value: {len(value)} bytes, more than the table's value_size of {lay.value_size}")
        self.seq = (self.seq + 1) & 0xFFFFFFFF or 1
        body = (bytes([op]) + key.ljust(KEY_SIZE, b"\0") + value.ljust(lay.value_size, b"\0")
                + struct.pack("<I", self.seq))
        start = self.loop.now_ns
        off = self.read_size
        self.buf.write(body, len(body), off)
        wr = SendWR(wr_id=_ID_REQ, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1,
                    sg=[SGE(self.buf.buf + off, len(body), self.buf.lkey)],
                    send_flags=e.IBV_SEND_INLINE if len(body) <= 128 else e.IBV_SEND_SIGNALED)
        wr.set_wr_rdma(self.server["request_rkey"], self.server["request"])
        self.rc.post_send(wr)
        while True:
            wc = self._wait(self.rcq, f"the response to request {self.seq}")
            i = wc.wr_id & 0xFFFF
            off = self.read_size + _request_size(lay) + i * self.resp_size
            resp = self.buf.read(self.resp_size, off)[GRH:]
            self._post_recv(i)
            (seq,) = struct.unpack("<I", resp[:4])
            if seq == self.seq:
                break
        while len(self.cq):  # an unsignaled WRITE completes only on error: look without running the loop
            _, wcs = self.cq.poll(1)
            if wcs[0].status != e.IBV_WC_SUCCESS:
                raise KvError(f"request WRITE: completion {e.ibv_wc_status_str(wcs[0].status)}")
        (version,) = struct.unpack("<Q", resp[8:16])
        return RpcResult(resp[4], version, resp[16:16 + lay.value_size].rstrip(b"\0"), self.loop.now_ns - start)

    def get_rpc(self, key: bytes) -> GetResult:
        """GET ``key`` by RPC: one WRITE of the request, one SEND back (one round trip, the server's CPU between)."""
        r = self.rpc(GET, key)
        return GetResult(check_key(key), r.value if r.status == OK else None, r.version, 1, 0, r.ns)

    def put_rpc(self, key: bytes, value: bytes) -> RpcResult:
        """PUT by RPC: the server's CPU writes the bucket in one instant of the loop (so no READ lands between its
        halves; :meth:`KvServer.put_local` with ``split_ns`` is the PUT that can be torn)."""
        r = self.rpc(PUT, key, value)
        if r.status == FULL:
            raise KvError(f"put {key!r}: the table is full")
        return r


def connect(server: KvServer, client: KvClient) -> None:
    """Connect ``client`` to ``server`` in one process (both on the same carrier)."""
    client.attach(server.accept(client.address()))


@dataclass
class Store:
    """A server and a client connected on a simulated fabric of their own (:func:`simulated`) or on native
    InfiniBand (:func:`on_ib`)."""

    fabric: Fabric | IBFabric
    server: KvServer
    client: KvClient


def simulated(*, layout: Layout | None = None, seed: int = 1, window: int = 1, service_ns: int = 200,
              poll_ns: int = 100, max_retries: int = 16, latency_ns: int = 1000, nic: Any = None) -> Store:
    """A fresh :class:`~rdmalab.fabric.sim.Fabric` (``latency_ns`` each way, 100 Gb/s) with devices "server"
    and "client", a :class:`KvServer` and a connected :class:`KvClient`; ``nic``: the fabric's NIC model (None:
    the links' costs only)."""
    kw = {} if nic is None else {"nic": nic}
    f = Fabric(seed=seed, latency_ns=latency_ns, **kw)
    for n in ("server", "client"):
        f.add_device(n)
    s = KvServer(Context(name="server", fabric=f), layout, service_ns=service_ns, poll_ns=poll_ns)
    c = KvClient(Context(name="client", fabric=f), window=window, max_retries=max_retries)
    connect(s, c)
    return Store(f, s, c)


def on_ib(*, fabric: IBFabric | None = None, server: str = "server", client: str = "client",
          layout: Layout | None = None, seed: int = 1, window: int = 1, service_ns: int = 200, poll_ns: int = 100,
          max_retries: int = 16, mtu: int = e.IBV_MTU_1024, rate_gbps: float = 100.0, delay_us: float = 0.1,
          frames: bool = False) -> Store:
    """The store on native InfiniBand: a :class:`KvServer` on HCA ``server`` and a connected :class:`KvClient` on
    HCA ``client`` of ``fabric``, their QPs addressed by LID (RC for the READs and the request WRITEs, UD for the
    answers; no GRH).  ``fabric`` None: a fresh :class:`~rdmalab.fabric.ibfabric.IBFabric` (``seed``, ``frames``),
    server - sw1 - sw2 - client, links of ``rate_gbps`` and ``delay_us``, min-hop tables (LIDs: server 1, client 2,
    the switches 3 and 4).  Given one (e.g. :func:`~rdmalab.fabric.ibfabric_subnet.fabric_on_subnet` of a subnet a
    subnet manager brought up), ``server`` and ``client`` name two of its HCAs, and the LIDs are those the HCAs
    have (the SM's); ``rate_gbps``, ``delay_us``, ``seed`` and ``frames`` are then not used."""
    if fabric is None:
        fabric = IBFabric(seed=seed, frames=frames)
        for n in (server, client):
            fabric.add_hca(n)
        fabric.add_switch("sw1", nports=8)
        fabric.add_switch("sw2", nports=8)
        for a, b in ((server, "sw1"), ("sw1", "sw2"), ("sw2", client)):
            fabric.link(a, b, rate_gbps, delay_us)
        fabric.min_hop_routes()
    for n in (server, client):
        if n not in fabric.devices:
            raise KvError(f"on_ib: {n!r} is not an HCA of the fabric (HCAs: {', '.join(sorted(fabric.devices))})")
    s = KvServer(Context(name=server, fabric=fabric), layout, service_ns=service_ns, poll_ns=poll_ns, mtu=mtu)
    c = KvClient(Context(name=client, fabric=fabric), window=window, max_retries=max_retries, mtu=mtu)
    connect(s, c)
    return Store(fabric, s, c)


def key_at_distance(layout: Layout, home: int, distance: int, taken: Callable[[bytes], bool] = lambda k: False,
                    prefix: bytes = b"k") -> list[bytes]:
    """Keys whose home bucket is ``home`` (so the ``distance+1``-th of them stored lands ``distance`` buckets
    after it): ``distance + 1`` keys ``prefix<n>`` not ``taken``, the first ones found counting n from 0."""
    out: list[bytes] = []
    n = 0
    while len(out) < distance + 1:
        k = prefix + str(n).encode()
        if layout.home(k) == home and not taken(k):
            out.append(k)
        n += 1
        if n > 10_000_000:
            raise KvError(f"no {distance + 1} keys with home {home} among {prefix!r}0..9999999")
    return out
