"""The engine on real UDP: RoCEv2 packets on port 4791 of an IPv4 address, as Linux rxe sends them.

:class:`UdpFabric` puts one soft device (:class:`rdmalab.verbs.engine.node.SoftDevice`) on a
real network interface, so that the kernel's rxe, the stock tools (``ibv_rc_pingpong``,
``ib_write_bw`` ...) and pyverbs programs can be its peers.  What it does the way rxe 6.1 does
(``drivers/infiniband/sw/rxe/``):

* **UDP destination port 4791** for everything, also ACKs and read responses; the **source port
  is per connection**, ``rdma_get_udp_sport(flow_label, qpn, dest_qpn)`` (``ib_verbs.h``; set by
  ``rxe_modify_qp`` when the address vector is given, replacing ``rxe_qp_init_req``'s initial
  ``0xC000 + hash_32(qpn, 14)``): the engine's QP computes it (``QPCore.set_udp_sport``).
* **IPv4 with DF set**, TTL 64, a **nonzero IP Identification** from a per-device counter (rxe
  calls ``__ip_select_ident`` directly in ``rxe_net.c`` ``prepare_ipv4_hdr``), UDP checksum 0.
* **GIDs as rxe lays them out**: index 0 the link-local ``fe80::`` + modified EUI-64 of the
  interface MAC, index 1 ``::ffff:<IPv4>``.
* **Port MTU from the interface**: ``netdev MTU - 80`` rounded down to an IB MTU (``rxe.c``
  ``rxe_set_mtu``, ``rxe_param.h`` ``eth_mtu_int_to_enum`` with ``RXE_MAX_HDR_LENGTH`` 80).
* **ICRC**: computed for every packet sent, checked on every packet received; a bad one is
  dropped silently and counted (``rxe_icrc.c``, ``rxe_recv.c``).

Why a raw socket.  The ICRC covers the IPv4 header with only TOS, TTL and the checksum masked,
so it covers the Identification field.  A plain UDP socket neither shows the IP header of what
it receives nor lets the sender choose the ID: Linux puts ``id = 0`` on a DF datagram from an
unconnected socket and a per-socket counter on a connected one (``include/net/ip.h``
``ip_select_ident_segs`` in 6.1).  So the carrier uses one ``AF_INET``/``SOCK_RAW``/
``IPPROTO_UDP`` socket with ``IP_HDRINCL``: it sends whole IPv4 packets (the kernel fills in
only the header checksum, and the ID only when it is 0: ``net/ipv4/raw.c`` ``raw_send_hdrinc``)
and receives every UDP packet of the network namespace with its IP header; a classic BPF filter
keeps only UDP to port 4791 of this device's address.  A plain UDP socket is bound to
``<ip>:4791`` with a filter that discards everything, only so that the kernel does not answer
rxe's packets with ICMP "port unreachable".

Needs: root, or ``CAP_NET_RAW`` (``setcap cap_net_raw+ep`` on the interpreter).  Without it
:class:`UdpFabric` raises :class:`CarrierError` saying so.  In kernel 6.1, rxe holds UDP 4791 in
the initial network namespace (``rxe_net.c`` creates its tunnel sockets in ``init_net``), so on
a machine with rxe the engine runs in its own namespace joined by a veth pair
(``docs/interop.md``).

Time is the wall clock (``time.monotonic_ns``); the carrier is a
:class:`~rdmalab.fabric.loop.WallClockLoop` (its timers, and :meth:`UdpFabric.step`/``progress``) (``selectors``, no threads, no asyncio): it receives what has arrived, runs
the timers that are due, and lets the devices send their coalesced ACKs.
"""

from __future__ import annotations

import errno
import ipaddress
import random
import selectors
import socket
import time
from typing import IO, TYPE_CHECKING, Any

from rdmalab.fabric.loop import WallClockLoop
from rdmalab.fabric.udp_codec import (
    HDR,
    ICRC,
    RETH_WORDS,
    RX_FIELDS,
    SEGMENT_RETH,
    U16,
    U32,
    ZEROS,
    decode_datagram,
    encode_datagram,
    ext_headers,
    mask_delta,
)
from rdmalab.fabric.udp_setup import (
    _DROP_ALL,
    NO_RAW_SOCKET,
    CarrierError,
    _attach_filter,
    _rocev2_filter,
    check_permission,
    ib_mtu_for,
    interface_ipv4,
    interface_mac,
    interface_mtu,
    interface_of,
    neighbour_mac,
)
from rdmalab.verbs.engine.carrier import Station
from rdmalab.verbs.engine.node import SoftDevice
from rdmalab.verbs.engine.packet import PSN_MASK, Pkt, middle_of
from rdmalab.verbs.engine.trace import Trace, TraceEvent
from rdmalab.wire.crc import ICRC_SEED, crc32, mask_rocev2
from rdmalab.wire.ib import check_mtu
from rdmalab.wire.net import ROCEV2_PORT
from rdmalab.wire.opcodes import CNP_OPCODE

if TYPE_CHECKING:
    from rdmalab.capture.pcapwriter import CaptureWriter

# the names programs and tests import from here (set-up and codec live in udp_setup and udp_codec)
__all__ = ["ACK_BATCH", "RECV_BUDGET", "ROCEV2_PORT", "CarrierError", "UdpFabric", "check_permission",
           "decode_datagram", "encode_datagram", "ib_mtu_for", "interface_ipv4", "interface_mac", "interface_mtu",
           "interface_of", "neighbour_mac"]

#: received packets after which the ACKs held back for coalescing are sent (see _receive_all)
ACK_BATCH = 8
#: the most packets one :meth:`UdpFabric.step` receives before it returns to the program, even if
#: more are waiting: a peer that keeps the socket full (rxe resending a window of up to 128 PSNs,
#: RXE_MAX_UNACKED_PSNS, after every NAK) must not keep the program from polling its CQ and posting
#: receives (docs/interop.md says how rxe's RNR and sequence-NAK retries once kept one step going for minutes)
RECV_BUDGET = 128


# ---------------------------------------------------------------------- the carrier
class UdpFabric(WallClockLoop):
    """One soft device on a real interface, talking RoCEv2 over UDP/IPv4 port 4791.

    ``UdpFabric(ifname="veth1")`` or ``UdpFabric(ip="10.0.0.2")`` (either finds the other);
    ``fab.device`` is the :class:`SoftDevice`; open it with
    ``rdmalab.verbs.device.Context(name=fab.device.name, fabric=fab)``.  ``mtu`` overrides the
    port MTU taken from the interface.  ``pcap`` (a path or binary file) records every frame
    sent and received, with wall-clock timestamps.  ``poll_wait`` is how long :meth:`progress`
    (what ``CQ.poll`` and ``get_cq_event`` call) waits for traffic before it gives up.
    """

    @property
    def burst_ok(self) -> bool:
        """The engine may hand over a run of packets of one message as one burst object
        (:mod:`rdmalab.verbs.engine.packet`): :meth:`send` expands it into the very packets the
        engine would have built one by one, and each leaves as its own datagram; the receiver
        never sees a burst.  Not while tracing, so that the trace has one event per packet."""
        return not self._tracing

    def __init__(self, ifname: str | None = None, ip: str | None = None, *, name: str = "rdmalab0",
                 mtu: int | None = None, trace: bool = False, pcap: str | IO[bytes] | None = None,
                 poll_wait: float = 0.02, seed: int | None = None) -> None:
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
        self.ifname = ifname
        self.ip = ip
        self.netdev_mtu = interface_mtu(ifname)
        self.mtu = mtu if mtu is not None else ib_mtu_for(self.netdev_mtu)
        try:
            check_mtu(self.mtu)
        except ValueError as exc:
            raise CarrierError(errno.EINVAL, str(exc)) from None
        mac = interface_mac(ifname)
        self._init_state(trace, poll_wait, seed)
        self._open_sockets(ip, ipv4)
        self.device = SoftDevice(name, ipv4, mac, self, seed=self.rng.getrandbits(32))
        self.device.ifname = ifname
        self.devices = {name: self.device}
        if pcap is not None:
            self.write_pcap(pcap)

    def _init_state(self, trace: bool = False, poll_wait: float = 0.02, seed: int | None = None) -> None:
        """Everything but the interface, the sockets and the device (tests of the byte paths use it alone)."""
        self.rng = random.Random(seed)
        self.trace = Trace()
        self._tracing = trace
        WallClockLoop.__init__(self, poll_wait=poll_wait)  # the clock, the timers, ``closed``
        self.stats = {"sent": 0, "received": 0, "bad_icrc": 0, "not_rocev2": 0, "send_errors": 0, "oversized": 0}
        self.sent_sizes: dict[int, int] = {}  # UDP payload size -> datagrams of that size sent
        self._ip_id = self.rng.randrange(1, 0x10000)
        self._tx = bytearray(65536)  # the datagram being sent (the fast path builds it here)
        self._txmv = memoryview(self._tx)
        self._rx = bytearray(65536)  # the datagram being received
        self._rxmv = memoryview(self._rx)
        self._macs: dict[int, int] = {}
        self._addrs: dict[int, tuple[str, int]] = {}
        self._pcap: CaptureWriter | None = None

    def _open_sockets(self, ip: str, ipv4: int) -> None:
        try:
            raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_UDP)
        except PermissionError:
            raise CarrierError(errno.EPERM, NO_RAW_SOCKET) from None
        raw.setsockopt(socket.IPPROTO_IP, socket.IP_HDRINCL, 1)
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
        _attach_filter(raw, _rocev2_filter(ipv4))
        # Drain what arrived before the filter was attached (it may be anything).
        raw.setblocking(False)
        try:
            while True:
                raw.recv(65536)
        except BlockingIOError:
            pass
        sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sink.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sink.bind((ip, ROCEV2_PORT))
        except OSError as exc:
            raw.close()
            sink.close()
            hint = (" (in this network namespace something already holds it: kernel rxe does, in the "
                    "initial namespace, while rdma_rxe is loaded; run the engine in its own namespace, "
                    "see docs/interop.md)") if exc.errno == errno.EADDRINUSE else ""
            raise CarrierError(exc.errno or errno.EADDRINUSE,
                               f"cannot bind UDP {ip}:{ROCEV2_PORT}: {exc.strerror}{hint}") from None
        _attach_filter(sink, _DROP_ALL)
        self._raw = raw
        self._sink = sink
        self._groups: list[int] = []
        self._sel = selectors.DefaultSelector()
        self._sel.register(raw, selectors.EVENT_READ)
        self.closed = False

    def join_group(self, group: str) -> None:
        """Receive RoCEv2 sent to the IPv4 multicast ``group`` (IGMP membership on this interface, and the
        filter lets it in); multicast this carrier sends leaves through this interface and loops back to
        local members, as for rxe (rdma_cm on RoCE joins the IP group: ``cma_iboe_join_multicast``)."""
        g = int(ipaddress.IPv4Address(group))
        if g in self._groups:
            return
        mreq = socket.inet_aton(group) + socket.inet_aton(self.ip)
        self._raw.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, mreq)
        self._raw.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(self.ip))
        self._raw.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 1)
        self._groups.append(g)
        _attach_filter(self._raw, _rocev2_filter(int(ipaddress.IPv4Address(self.ip)), tuple(self._groups)))

    def leave_group(self, group: str) -> None:
        g = int(ipaddress.IPv4Address(group))
        if g not in self._groups:
            return
        self._groups.remove(g)
        mreq = socket.inet_aton(group) + socket.inet_aton(self.ip)
        try:
            self._raw.setsockopt(socket.IPPROTO_IP, socket.IP_DROP_MEMBERSHIP, mreq)
        except OSError:
            pass
        _attach_filter(self._raw, _rocev2_filter(int(ipaddress.IPv4Address(self.ip)), tuple(self._groups)))

    def reopen(self) -> None:
        """New sockets for this process (after ``fork()``: sockets shared with the parent would hand
        each arriving packet to only one of the two processes)."""
        for closable in (self._sel, self._raw, self._sink):
            closable.close()
        groups = [str(ipaddress.IPv4Address(g)) for g in self._groups]
        self._open_sockets(self.ip, int(ipaddress.IPv4Address(self.ip)))
        self._groups = []
        for g in groups:
            self.join_group(g)

    # ------------------------------------------------------------------ the fabric interface of the engine
    def add_device(self, name: str | None = None, ip: str | None = None, mac: int | None = None) -> SoftDevice:
        raise ValueError("a UdpFabric carries one device, its interface's (fab.device)")

    def resolve_mac(self, gid: int) -> int | None:
        """The peer's MAC (for captures only: the kernel routes and resolves the real one)."""
        mac = self._macs.get(gid)
        if mac is None:
            if gid in self.device.gids:
                return self.device.mac
            if (gid >> 32) != 0xFFFF:
                return None  # only IPv4-mapped GIDs are carried (rxe's index 1)
            mac = neighbour_mac(str(ipaddress.IPv4Address(gid & 0xFFFFFFFF))) or 0
            self._macs[gid] = mac
        return mac

    @property
    def scheduler(self) -> UdpFabric:
        """The carrier is its own scheduler (:meth:`step`, :meth:`progress`, :meth:`run`)."""
        return self

    @property
    def tracing(self) -> bool:
        return self._tracing

    @tracing.setter
    def tracing(self, on: bool) -> None:
        self._tracing = on

    def record(self, ev: TraceEvent) -> None:
        self.trace.append(ev)

    # ------------------------------------------------------------------ sending
    def send(self, src: Station, pkt: Pkt) -> None:
        """The carrier seam's outbound call: each packet leaves as one IPv4 datagram."""
        if self._tracing or self._pcap is not None or pkt.opcode == CNP_OPCODE or (pkt.dst_gid >> 32) != 0xFFFF \
                or (pkt.src_gid >> 32) != 0xFFFF:
            for p in pkt.expand():
                self._send_one(src, p)
            return
        self._send_fast(pkt)

    def _send_fast(self, pkt: Pkt) -> None:
        """Send a packet or a burst (see :mod:`rdmalab.verbs.engine.packet`) without a ``Pkt`` per packet.

        Each datagram is built in one reused buffer, headers packed in place, payload copied after
        them.  The ICRC is one CRC-32 over the datagram as it goes on the wire, corrected for the
        fields the ICRC masks (:func:`mask_delta`); in a burst the MIDDLE packets differ only in
        IP Identification, PSN, AckReq and payload, so only those are rewritten.  The bytes are
        those of :func:`encode_datagram` for the packets ``pkt.expand()`` gives
        (``tests/fabric/test_udp.py`` compares them)."""
        count = pkt.count
        first = pkt.opcode
        src = pkt.src_gid & 0xFFFFFFFF
        dst = pkt.dst_gid & 0xFFFFFFFF
        sport = pkt.sport
        dqp = pkt.destqp & 0xFFFFFF
        tos = pkt.ecn & 0xFF
        psn0 = pkt.psn
        addr = self._addrs.get(dst)
        if addr is None:
            addr = self._addrs[dst] = (socket.inet_ntoa(dst.to_bytes(4, "big")), 0)
        self._ip_id = ip_id = self._ip_id
        if count == 1:
            self._emit(first, ext_headers(pkt, first), pkt.payload, pkt.ackreq, pkt.se, psn0, src, dst, sport, dqp, tos,
                       addr)
            return
        mtu = pkt.mtu
        data = memoryview(pkt.payload)
        acks = pkt.acks
        self._emit(first, ext_headers(pkt, first), data[:mtu], int(0 in acks), 0, psn0, src, dst, sport, dqp, tos, addr)
        if count > 2:
            # the MIDDLE packets: one header template, then per packet the ID, the PSN and the payload
            udp_len = 24 + mtu  # no extended header, no pad (an IB MTU is a multiple of 4)
            end = 40 + mtu
            buf = self._tx
            HDR.pack_into(buf, 0, 0x45, tos, 20 + udp_len, 0, 0x4000, 64, 17, 0, src, dst, sport, ROCEV2_PORT,
                           udp_len, 0, middle_of(first), 0, 0xFFFF, dqp, 0)
            delta = mask_delta(tos, end)
            body = self._txmv[:end]
            whole = self._txmv[:end + 4]
            pack_id = U16.pack_into
            pack_psn = U32.pack_into
            pack_icrc = ICRC.pack_into
            sendto = self._raw.sendto
            ip_id = self._ip_id
            sent = 0
            off = mtu
            for i in range(1, count - 1):
                pack_id(buf, 4, ip_id)
                pack_psn(buf, 36, (psn0 + i) & PSN_MASK | (0x80000000 if i in acks else 0))
                buf[40:end] = data[off:off + mtu]
                pack_icrc(buf, end, crc32(body, ICRC_SEED) ^ delta)
                ip_id = (ip_id + 1) & 0xFFFF or 1  # never 0: the kernel would replace it (raw.c)
                off += mtu
                try:
                    sendto(whole, addr)
                    sent += 1
                except OSError as exc:
                    self._send_failed(exc, bytes(whole))
            self._ip_id = ip_id
            self.stats["sent"] += sent
            self.sent_sizes[udp_len - 8] = self.sent_sizes.get(udp_len - 8, 0) + count - 2
        last = pkt.last_opcode
        self._emit(last, ext_headers(pkt, last), data[(count - 1) * mtu:], pkt.ackreq, pkt.se, (psn0 + count - 1) & PSN_MASK,
                   src, dst, sport, dqp, tos, addr)

    def _emit(self, code: int, ext: bytes, data: Any, ackreq: int, se: int, psn: int, src: int, dst: int, sport: int,
              dqp: int, tos: int, addr: tuple[str, int]) -> None:
        """One datagram of the fast path (a single packet, or the first or last of a burst)."""
        buf = self._tx
        n = len(data)
        pad = -n & 3
        at = 40 + len(ext)
        end = at + n
        udp_len = end - 16 + pad  # UDP 8 + BTH 12 + extended headers + payload + pad + ICRC 4
        ip_id = self._ip_id
        HDR.pack_into(buf, 0, 0x45, tos, 20 + udp_len, ip_id, 0x4000, 64, 17, 0, src, dst, sport, ROCEV2_PORT,
                       udp_len, 0, code, (se << 7) | (pad << 4), 0xFFFF, dqp, (ackreq << 31) | psn)
        if ext:
            buf[40:at] = ext
        buf[at:end] = data
        if pad:
            buf[end:end + pad] = ZEROS[pad]
            end += pad
        ICRC.pack_into(buf, end, crc32(self._txmv[:end], ICRC_SEED) ^ mask_delta(tos, end))
        self._ip_id = (ip_id + 1) & 0xFFFF or 1  # never 0: the kernel would replace it (raw.c)
        whole = self._txmv[:end + 4]
        self.sent_sizes[udp_len - 8] = self.sent_sizes.get(udp_len - 8, 0) + 1
        try:
            self._raw.sendto(whole, addr)
            self.stats["sent"] += 1
        except OSError as exc:
            self._send_failed(exc, bytes(whole))

    def _send_failed(self, exc: OSError, datagram: bytes) -> None:
        if isinstance(exc, BlockingIOError):
            self._wait_writable(datagram)
        else:
            # EMSGSIZE: larger than the route MTU (a DF packet that does not fit); ENOBUFS: the
            # qdisc is full.  Either way the packet is lost, and the engine's retry covers it.
            self.stats["oversized" if exc.errno == errno.EMSGSIZE else "send_errors"] += 1

    def _send_one(self, src: Station, p: Pkt) -> None:
        dst = p.dst_gid
        if (dst >> 32) != 0xFFFF or (p.src_gid >> 32) != 0xFFFF:
            self.stats["send_errors"] += 1
            if self._tracing:
                self._record_drop(src, p, "only IPv4 GIDs (::ffff:a.b.c.d, rxe's index 1) are carried")
            return
        datagram = self.encode(p)
        if self._tracing:
            self.trace.append(TraceEvent(self.now_ns, src.name, p.srcqp, "sent", p.psn, p.opcode,
                                         {"packet_id": p.id, "dqpn": p.destqp, "len": len(p.payload),
                                          "ackreq": p.ackreq}, None))
        if self._pcap is not None:
            self._tap(datagram, p.src_mac, p.dst_mac)
        addr = self._addrs.get(dst)
        if addr is None:
            addr = self._addrs[dst] = (socket.inet_ntoa(datagram[16:20]), 0)
        try:
            self._raw.sendto(datagram, addr)
            self.stats["sent"] += 1
            self.sent_sizes[len(datagram) - 28] = self.sent_sizes.get(len(datagram) - 28, 0) + 1
        except BlockingIOError:
            self._wait_writable(datagram)
        except OSError as exc:
            # EMSGSIZE: larger than the route MTU (a DF packet that does not fit); ENOBUFS: the
            # qdisc is full.  Either way the packet is lost, and the engine's retry covers it.
            self.stats["oversized" if exc.errno == errno.EMSGSIZE else "send_errors"] += 1
            if self._tracing:
                self._record_drop(src, p, f"send failed: {exc.strerror}")

    def _wait_writable(self, datagram: bytes) -> None:
        sel = selectors.DefaultSelector()
        sel.register(self._raw, selectors.EVENT_WRITE)
        try:
            for _ in range(100):
                sel.select(0.01)
                try:
                    self._raw.sendto(datagram, (socket.inet_ntoa(datagram[16:20]), 0))
                    self.stats["sent"] += 1
                    return
                except BlockingIOError:
                    continue
            self.stats["send_errors"] += 1
        finally:
            sel.close()

    def _record_drop(self, dev: Station, p: Pkt, reason: str) -> None:
        self.trace.append(TraceEvent(self.now_ns, dev.name, p.destqp, "dropped", p.psn, p.opcode,
                                     {"packet_id": p.id, "reason": reason}))

    def next_ip_id(self) -> int:
        i = self._ip_id
        self._ip_id = (i + 1) & 0xFFFF or 1  # never 0: the kernel would replace it (raw.c)
        return i

    def encode(self, p: Pkt) -> bytes:
        """The IPv4 datagram for ``p`` with this device's next IP Identification."""
        return encode_datagram(p, self.next_ip_id())

    # ------------------------------------------------------------------ receiving
    def _receive_all(self) -> int:
        if self._tracing or self._pcap is not None:
            return self._receive_all_slow()
        got = 0
        buf = self._rx
        mv = self._rxmv
        recv_into = self._raw.recv_into
        # the device's fast path for the bulk of WRITEs and SENDs (SoftDevice.receive_segment: no Pkt;
        # it counts what it takes), the full path for the rest
        device = self.device
        receive_segment = device.receive_segment
        dst_gid = device.gids[1]
        stats = self.stats
        rx_fields = RX_FIELDS.unpack_from
        icrc_of = ICRC.unpack_from
        reth_words = RETH_WORDS.unpack_from
        fast = 0
        next_flush = ACK_BATCH
        while got < RECV_BUDGET:
            if got >= next_flush:  # the ACKs of the last ACK_BATCH packets (see _receive_all_slow)
                device.flush()
                next_flush = got + ACK_BATCH
            try:
                n = recv_into(buf)
            except BlockingIOError:
                stats["received"] += fast
                return got
            except InterruptedError:
                continue
            got += 1
            # version/IHL, total length, IPv4 source; BTH opcode, flags, words 1 and 2 (one struct call)
            vihl, total, ip_src, code, flags, w1, w2 = rx_fields(buf)
            if vihl != 0x45 or total != n or n < 48:
                self.inbound(bytes(mv[:n]))  # IP options, a truncated or odd datagram: the general path
                continue
            # The ICRC (rxe_icrc.c), checked in place: the variant fields set to ones (wire.crc); the
            # fields read above are not among them (BTH byte 4 is the top of word 1, masked off below)
            end = n - 4
            mask_rocev2(buf)
            if crc32(mv[:end], ICRC_SEED) != icrc_of(buf, end)[0]:
                stats["bad_icrc"] += 1
                device.discard("bad ICRC or malformed packet")
                continue
            reth = SEGMENT_RETH.get(code)
            if reth is not None:
                stop = end - ((flags >> 4) & 3)
                if reth:  # a WRITE's FIRST or ONLY: the RETH
                    if stop >= 56 and receive_segment(w1 & 0xFFFFFF, code, w2 & PSN_MASK, w2 >> 31,
                                                      0xFFFF00000000 | ip_src, dst_gid, mv[56:stop],
                                                      reth_words(buf, 40)):
                        fast += 1
                        continue
                elif stop >= 40 and receive_segment(w1 & 0xFFFFFF, code, w2 & PSN_MASK, w2 >> 31,
                                                    0xFFFF00000000 | ip_src, dst_gid, mv[40:stop]):
                    fast += 1
                    continue
            # everything else (ACKs, READs, atomics, a packet out of sequence ...): a Pkt and the full path
            self._deliver(bytes(mv[:n]), checked=True)
        stats["received"] += fast  # the budget is spent; what is still waiting is the next step's
        return got

    def _receive_all_slow(self) -> int:
        got = 0
        recv = self._raw.recv
        inbound = self.inbound
        while got < RECV_BUDGET:
            try:
                d = recv(65536)  # a fresh bytes object: the packet's payload stays a view into it
            except BlockingIOError:
                return got
            except InterruptedError:
                continue
            got += 1
            inbound(d)
            if got % ACK_BATCH == 0:
                # Coalesce ACKs over a few packets, not over the whole burst waiting in the socket:
                # rxe sends up to 128 unacknowledged PSNs (RXE_MAX_UNACKED_PSNS) and re-arms its
                # retransmission timer (4.096 us << timeout, 67 ms for perftest's 14) on each ACK
                # (rxe_comp.c); answering a 128-packet burst with one ACK at its end lets that timer
                # fire whenever the burst takes longer than that to process (a slow CPU, TCG), and
                # the go-back-N resends then feed the backlog.
                self.device.flush()
        return got

    def inbound(self, datagram: bytes) -> None:
        """One IPv4 datagram (IP header first) arrived for this device: check and deliver it."""
        self._deliver(datagram, checked=False)

    def _deliver(self, datagram: bytes, checked: bool) -> None:
        pkt = decode_datagram(datagram, icrc_checked=checked)
        if pkt is None:
            self.stats["bad_icrc" if len(datagram) > 44 and datagram[9] == 17 else "not_rocev2"] += 1
            self.device.discard("bad ICRC or malformed packet")
            return
        self.stats["received"] += 1
        pkt.dst_mac = self.device.mac
        mac = self._macs.get(pkt.src_gid)
        pkt.src_mac = mac if mac is not None else self.resolve_mac(pkt.src_gid) or 0
        if self._pcap is not None:
            self._tap(datagram, pkt.src_mac, pkt.dst_mac)
        # The seam's fast path (Station.receive): the ICRC was checked above, over the real IP
        # header; Station.deliver would rebuild that header from a Datagram and decode it again.
        self.device.receive(pkt)

    # ------------------------------------------------------------------ the event loop
    def poll_io(self, timeout: float) -> int:
        """(The loop's I/O, see :meth:`~rdmalab.fabric.loop.WallClockLoop.step`:) wait up to ``timeout``
        seconds for the socket, then receive what is there (at most ``RECV_BUDGET`` packets)."""
        if timeout > 0:
            self._sel.select(timeout)
        return self._receive_all()

    def end_step(self) -> None:
        """After every step: the device sends the ACKs it held back for coalescing."""
        self.device.flush()

    def fileno(self) -> int:
        return self._raw.fileno()

    # ------------------------------------------------------------------ capture
    def write_pcap(self, dest: str | IO[bytes]) -> None:
        """Record every datagram sent and received (as Ethernet frames, wall-clock ns timestamps) to
        ``dest`` (a path, ``"-"`` or a binary file object), through
        :class:`~rdmalab.capture.pcapwriter.CaptureWriter`; a capture already running is closed."""
        # imported here, when a capture is asked for: the live tools (pingpong, perftest ...) load this
        # carrier and must start without rdmalab.capture (start-up in the TCG VM; tests/test_cli.py pins it)
        from rdmalab.capture.pcapwriter import CaptureWriter

        if self._pcap is not None:
            self._pcap.close()
        self._pcap = CaptureWriter(dest, nano=True)

    def _tap(self, datagram: bytes, src_mac: int, dst_mac: int) -> None:
        if self._pcap is not None:
            eth = dst_mac.to_bytes(6, "big") + src_mac.to_bytes(6, "big") + b"\x08\x00"
            self._pcap.write(eth + datagram, time.time_ns())

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._sel.close()
        self._raw.close()
        self._sink.close()
        if self._pcap is not None:
            self._pcap.close()
            self._pcap = None

    def __enter__(self) -> UdpFabric:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
