"""Live capture from a network interface: Linux packet sockets, tcpdump's capture filters, and
dumpcap's ring files.

What ``rdmalab capture -i IFACE -w FILE`` and ``rdmalab decode -i IFACE`` read from.

* :class:`LiveCapture` opens an ``AF_PACKET`` socket on one interface (``packet(7)``), in
  promiscuous mode unless told not to, with the kernel's nanosecond timestamp of each packet
  (``SO_TIMESTAMPNS``) and its length on the wire (``MSG_TRUNC``).  A capture filter in tcpdump's
  language (``pcap-filter(7)``) is compiled to a classic BPF program by libpcap and attached to
  the socket before it is bound to the interface, so no packet the filter rejects is ever seen.
  On the loopback interface each packet passes twice (out and in); the outgoing copy is dropped,
  as libpcap drops it.  A VLAN tag the network card took off (``PACKET_AUXDATA``) is put back
  into the frame, as libpcap does.  The kernel's counts of packets received and dropped
  (``PACKET_STATISTICS``) are :meth:`LiveCapture.stats`.
* :func:`compile_filter` is libpcap's ``pcap_compile`` through :mod:`ctypes`, on a handle that
  needs no interface and no privileges (``pcap_open_dead``).  Why not a Python package: the
  ones that bind libpcap (pcapy-ng, python-libpcap) need a C compiler and libpcap's headers to
  install from PyPI on Debian 12, and scapy's own filter compiler needs libpcap (or tcpdump) too;
  the library itself (Debian's ``libpcap0.8``, which tcpdump and Wireshark depend on) is all that
  is needed, and only for ``-f``.  Packet sockets need no library at all.
* :class:`RingFiles` writes the packets through :class:`~rdmalab.capture.pcapwriter.CaptureWriter`
  (the one writer), to one file or, as dumpcap's ``-b``, to a ring of files named
  ``STEM_NNNNN_YYYYmmddHHMMSS.EXT`` that switches after a size (``filesize``, kB of 1000 bytes),
  a time (``duration``) or a number of packets (``packets``), keeping only the newest ``files``.

Interface ``any`` captures on every interface at once, as tcpdump's ``-i any`` does: a packet socket
bound to none, in cooked mode (``SOCK_DGRAM``: the kernel takes the link-layer header off), each
packet written behind a Linux cooked capture v2 header (link type 276, ``LINKTYPE_LINUX_SLL2``:
EtherType, interface index, ARPHRD type, packet type, source address).  As libpcap does there, the
loopback's outgoing copies are dropped, promiscuous mode is not set, and a filter is attached
only after a reject-everything filter and a drain, so no packet before it gets through.

Linux only (packet sockets); Ethernet and loopback interfaces (the link types RoCE and iWARP
travel on), or ``any``.  Capturing needs root or the capability ``CAP_NET_RAW``; without it, or without the
interface, :class:`SniffError` says so in one sentence.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import select
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from rdmalab.capture.linktypes import LINKTYPE_ETHERNET, LINKTYPE_LINUX_SLL2
from rdmalab.capture.pcapwriter import DEFAULT_SNAPLEN, CaptureWriter, Format
from rdmalab.wire.errors import RdmalabError

__all__ = ["ANY", "DEFAULT_SNAPLEN", "Format", "LiveCapture", "PcapPipe", "RingFiles", "SniffError", "Stop", "compile_filter",
           "interface_names", "parse_conditions", "restore_vlan"]

# packet(7), linux/if_packet.h, linux/if_arp.h, asm-generic/socket.h
ETH_P_ALL = 0x0003
SOL_PACKET = 263
PACKET_ADD_MEMBERSHIP = 1
PACKET_MR_PROMISC = 1
PACKET_STATISTICS = 6
PACKET_AUXDATA = 8
PACKET_OUTGOING = 4
TP_STATUS_VLAN_VALID = 0x10
TP_STATUS_VLAN_TPID_VALID = 0x40
SO_ATTACH_FILTER = 26
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
ARPHRD_ETHER = 1
ARPHRD_LOOPBACK = 772
#: the link types we capture, by the interface's ARPHRD type (both carry Ethernet headers)
_LINKTYPES = {ARPHRD_ETHER: LINKTYPE_ETHERNET, ARPHRD_LOOPBACK: LINKTYPE_ETHERNET}
#: classic BPF (linux/filter.h): load the packet type (an ancillary load, SKF_AD_OFF + SKF_AD_PKTTYPE), if
#: it is PACKET_OUTGOING return 0 (drop), else go on with the next instruction; jumps are relative, so the
#: instructions of a compiled filter keep their meaning behind these
_BPF_LD_W_ABS, _BPF_JEQ_K, _BPF_RET_K = 0x20, 0x15, 0x06
_SKF_AD_PKTTYPE = (-0x1000 + 4) & 0xFFFFFFFF
_NOT_OUTGOING = [(_BPF_LD_W_ABS, 0, 0, _SKF_AD_PKTTYPE), (_BPF_JEQ_K, 0, 1, PACKET_OUTGOING), (_BPF_RET_K, 0, 0, 0)]
_AUXDATA = struct.Struct("=IIIHHHH")  # tp_status, tp_len, tp_snaplen, tp_mac, tp_net, tp_vlan_tci, tp_vlan_tpid
_TIMESPEC = struct.Struct("@ll")
_PACKET_MREQ = struct.Struct("@iHH8s")
_SOCK_FPROG = struct.Struct("@HP")
_TPACKET_STATS = struct.Struct("=II")
#: tcpdump.org LINKTYPE_LINUX_SLL2: EtherType, reserved, interface index, ARPHRD type, packet type,
#: address length, address (padded to 8 bytes); big-endian
_SLL2 = struct.Struct(">HHIHBB8s")
#: the pseudo-interface of every interface (libpcap's name for it)
ANY = "any"
_REJECT_ALL = [(_BPF_RET_K, 0, 0, 0)]
#: linux/filter.h: the ancillary loads that stand for the SLL2 header's fields on a cooked socket, by the
#: field's offset in that header (EtherType, interface index, ARPHRD type, packet type)
_SKF_AD_OFF = -0x1000
_SLL2_ANCILLARY = {0: 0, 4: 8, 8: 28, 10: 4}  # -> SKF_AD_PROTOCOL, SKF_AD_IFINDEX, SKF_AD_HATYPE, SKF_AD_PKTTYPE
_BPF_LD, _BPF_LDX, _BPF_ABS, _BPF_IND, _BPF_MSH = 0x00, 0x01, 0x20, 0x40, 0xA0


class SniffError(RdmalabError):
    """A live capture that cannot start (no interface, no privileges, a bad filter) or fails."""


def interface_names() -> list[str]:
    """The names of this host's network interfaces, in index order."""
    try:
        return [name for _i, name in socket.if_nameindex()]
    except OSError:
        return []


def _arphrd(iface: str) -> int:
    try:
        with open(f"/sys/class/net/{iface}/type", encoding="ascii") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return -1


# ============================================================================ capture filters


class _BpfInsn(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint32)]


class _BpfProgram(ctypes.Structure):
    _fields_ = [("bf_len", ctypes.c_uint), ("bf_insns", ctypes.POINTER(_BpfInsn))]


_PCAP_NETMASK_UNKNOWN = 0xFFFFFFFF
_libpcap: Any = None


def _pcap() -> Any:
    global _libpcap
    if _libpcap is None:
        name = ctypes.util.find_library("pcap")
        if name is None:
            raise SniffError("a capture filter (-f) is compiled by libpcap, which is not installed "
                             "(Debian/Ubuntu: apt install libpcap0.8)")
        lib = ctypes.CDLL(name)
        lib.pcap_open_dead.restype = ctypes.c_void_p
        lib.pcap_open_dead.argtypes = [ctypes.c_int, ctypes.c_int]
        lib.pcap_compile.restype = ctypes.c_int
        lib.pcap_compile.argtypes = [ctypes.c_void_p, ctypes.POINTER(_BpfProgram), ctypes.c_char_p, ctypes.c_int,
                                     ctypes.c_uint32]
        lib.pcap_geterr.restype = ctypes.c_char_p
        lib.pcap_geterr.argtypes = [ctypes.c_void_p]
        lib.pcap_freecode.argtypes = [ctypes.POINTER(_BpfProgram)]
        lib.pcap_close.argtypes = [ctypes.c_void_p]
        _libpcap = lib
    return _libpcap


def compile_filter(expr: str, *, linktype: int = LINKTYPE_ETHERNET,
                   snaplen: int = DEFAULT_SNAPLEN) -> list[tuple[int, int, int, int]]:
    """A capture filter in tcpdump's language as classic BPF instructions ``(code, jt, jf, k)``
    (what ``tcpdump -ddd`` prints), compiled and optimised by libpcap for ``linktype``.

    >>> compile_filter("udp port 4791")[-1]  # the last: accept nothing
    (6, 0, 0, 0)
    """
    lib = _pcap()
    handle = lib.pcap_open_dead(linktype, snaplen)
    if not handle:
        raise SniffError(f"libpcap could not make a handle for link type {linktype} to compile the filter")
    try:
        prog = _BpfProgram()
        if lib.pcap_compile(handle, ctypes.byref(prog), expr.encode(), 1, _PCAP_NETMASK_UNKNOWN) != 0:
            why = (lib.pcap_geterr(handle) or b"").decode(errors="replace")
            raise SniffError(f"-f {expr!r}: not a capture filter libpcap understands ({why})")
        try:
            return [(prog.bf_insns[i].code, prog.bf_insns[i].jt, prog.bf_insns[i].jf, prog.bf_insns[i].k)
                    for i in range(prog.bf_len)]
        finally:
            lib.pcap_freecode(ctypes.byref(prog))
    finally:
        lib.pcap_close(handle)


def restore_vlan(data: bytes, tci: int, tpid: int = 0x8100) -> bytes:
    """The frame with its 802.1Q tag put back after the two MAC addresses (the network card took
    it off and the kernel handed it beside the frame, in ``PACKET_AUXDATA``).

    >>> restore_vlan(bytes(12) + b"\\x08\\x00", 5).hex()
    '000000000000000000000000810000050800'
    """
    return data[:12] + struct.pack("!HH", tpid, tci) + data[12:]


# ============================================================================ the socket


@dataclass(slots=True)
class Stop:
    """When a capture stops (dumpcap's ``-c`` and ``-a``): after ``packets`` packets, after
    ``duration`` seconds, or when ``stopped()`` says so (checked after every packet and at
    least every ``poll`` seconds)."""

    packets: int | None = None
    duration: float | None = None
    stopped: Callable[[], bool] | None = None
    poll: float = 0.25


def _cooked_program(program: list[tuple[int, int, int, int]], expr: str) -> list[tuple[int, int, int, int]]:
    """A filter compiled for SLL2 records, rewritten for a cooked socket: there the kernel runs the filter
    on the packet from its network header on, so a load past the 20-byte SLL2 header is moved back by
    20, and a load of one of its fields becomes the kernel's ancillary load of that field (as libpcap
    does for ``any``).  Loads of other bytes of the header cannot be filtered in the kernel: refused."""
    out = []
    for code, jt, jf, k in program:
        if code & 0x07 in (_BPF_LD, _BPF_LDX) and code & 0xE0 in (_BPF_ABS, _BPF_IND, _BPF_MSH) and k < 1 << 31:
            if k >= _SLL2.size:
                k -= _SLL2.size
            elif k in _SLL2_ANCILLARY and code & 0xE0 == _BPF_ABS and code & 0x07 == _BPF_LD:
                k = (_SKF_AD_OFF + _SLL2_ANCILLARY[k]) & 0xFFFFFFFF
            else:
                raise SniffError(f"-f {expr!r}: on -i {ANY} the filter reads byte {k} of the cooked header, "
                                 "which the kernel cannot filter on; filter on the packet instead")
        out.append((code, jt, jf, k))
    return out


def _attach(sock: socket.socket, program: list[tuple[int, int, int, int]]) -> None:
    """Attach a classic BPF program (a list of ``(code, jt, jf, k)``) to a socket (``SO_ATTACH_FILTER``)."""
    insns = b"".join(struct.pack("=HBBI", *ins) for ins in program)
    buf = ctypes.create_string_buffer(insns)
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, _SOCK_FPROG.pack(len(program), ctypes.addressof(buf)))


class LiveCapture:
    """An ``AF_PACKET`` socket on interface ``iface``, or on all of them for ``"any"`` (see the module's
    description; :attr:`linktype` says what the packets are: Ethernet, or SLL2 for ``any``).

    ``bpf`` is a capture filter in tcpdump's language (None: every packet), ``snaplen`` the most
    bytes kept of a packet, ``promisc`` puts the interface in promiscuous mode while the capture
    is open.  Raises :class:`SniffError` naming the interface and what is missing."""

    def __init__(self, iface: str, *, bpf: str | None = None, snaplen: int = DEFAULT_SNAPLEN,
                 promisc: bool = True) -> None:
        self.iface = iface
        self.snaplen = snaplen
        self.filter = bpf
        self._sock: socket.socket | None = None
        self.received = 0  # packets handed out
        self._kernel = [0, 0]  # the kernel's counts: packets, drops (PACKET_STATISTICS resets on reading)
        if not 1 <= snaplen <= DEFAULT_SNAPLEN:
            raise SniffError(f"-s {snaplen}: the snapshot length must be 1..{DEFAULT_SNAPLEN} bytes")
        self.cooked = iface == ANY
        if self.cooked:
            self.ifindex = 0
            self.loopback = False
            self.linktype = LINKTYPE_LINUX_SLL2
            self._indexes: dict[str, int] = {}
        else:
            try:
                self.ifindex = socket.if_nametoindex(iface)
            except OSError:
                names = ", ".join(interface_names()) or "none found"
                raise SniffError(f"-i {iface}: there is no interface {iface!r} on this host (interfaces: {names}; "
                                 f"{ANY}: all of them)") from None
            hw = _arphrd(iface)
            if hw not in _LINKTYPES:
                raise SniffError(f"-i {iface}: rdmalab captures on Ethernet and loopback interfaces; {iface} is of "
                                 f"ARPHRD type {hw} (/sys/class/net/{iface}/type)")
            self.loopback = hw == ARPHRD_LOOPBACK
            self.linktype = _LINKTYPES[hw]
        program = compile_filter(bpf, linktype=self.linktype, snaplen=snaplen) if bpf else None
        if self.loopback:
            # each packet passes lo twice (out, then in): the outgoing copy is rejected in the kernel,
            # so it costs no copy to this process and the kernel's counts are of packets, not copies
            program = [*_NOT_OUTGOING, *(program or [(_BPF_RET_K, 0, 0, snaplen)])]
        try:
            if self.cooked:
                # bound to no interface, a socket must say its protocol when it is made, and packets may
                # queue before the filter is on: they are drained below, behind a filter that takes none
                sock = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(ETH_P_ALL))
            else:
                # protocol 0: nothing arrives until bind(), so the filter is in place for the first packet
                sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
        except PermissionError:
            raise SniffError(f"-i {iface}: capturing needs root or the capability CAP_NET_RAW (a packet socket "
                             "was refused: operation not permitted)") from None
        except OSError as err:
            raise SniffError(f"-i {iface}: cannot open a packet socket ({err.strerror or err})") from None
        try:
            if self.cooked:
                _attach(sock, _REJECT_ALL)
                sock.setblocking(False)
                while True:
                    try:
                        sock.recv(1)
                    except (BlockingIOError, InterruptedError):
                        break
                # lo's outgoing copies are rejected in the kernel (as on -i lo), then the filter runs
                lo = socket.if_nametoindex("lo") if "lo" in interface_names() else 0
                ifindex = (_SKF_AD_OFF + 8) & 0xFFFFFFFF
                not_lo_out = [(_BPF_LD_W_ABS, 0, 0, ifindex), (_BPF_JEQ_K, 0, 3, lo), *_NOT_OUTGOING]
                _attach(sock, [*not_lo_out, *(_cooked_program(program, bpf or "") if program
                                              else [(_BPF_RET_K, 0, 0, DEFAULT_SNAPLEN)])])
            elif program is not None:
                _attach(sock, program)
            sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            sock.setsockopt(SOL_PACKET, PACKET_AUXDATA, 1)
            # bursts wait here, not dropped: 32 MiB past net.core.rmem_max where the process may
            # (SO_RCVBUFFORCE needs CAP_NET_ADMIN), else what rmem_max allows.  In the TCG lab VM, with
            # rmem_max's 208 KiB, a 10 % loss run of ib_write_bw -n 50 lost 235 of its 821 RoCE frames
            # on the way to the decoder of `rdmalab top`.
            for opt, size in ((getattr(socket, "SO_RCVBUFFORCE", 33), 32 << 20), (socket.SO_RCVBUF, 4 << 20)):
                try:
                    sock.setsockopt(socket.SOL_SOCKET, opt, size)
                    break
                except OSError:
                    continue
            if not self.cooked:
                sock.bind((iface, ETH_P_ALL))
            if promisc and not self.cooked:  # libpcap does not set promiscuous mode on "any" either
                sock.setsockopt(SOL_PACKET, PACKET_ADD_MEMBERSHIP,
                                _PACKET_MREQ.pack(self.ifindex, PACKET_MR_PROMISC, 0, b""))
            sock.setblocking(False)
        except OSError as err:
            sock.close()
            raise SniffError(f"-i {iface}: cannot capture ({err.strerror or err})") from None
        self._sock = sock
        self._buf = bytearray(snaplen)
        self._view = memoryview(self._buf)

    def fileno(self) -> int:
        return self._sock.fileno() if self._sock is not None else -1

    def _recv(self) -> tuple[int, bytes, int] | None:
        """The next packet waiting (ns since the epoch, bytes, length on the wire), or None when
        none is (or only a loopback packet's outgoing copy was)."""
        assert self._sock is not None
        try:
            n, anc, _flags, addr = self._sock.recvmsg_into([self._view], 256, socket.MSG_TRUNC)
        except (BlockingIOError, InterruptedError):
            return None
        if self.loopback and addr[2] == PACKET_OUTGOING:
            return None
        if self.cooked and addr[2] == PACKET_OUTGOING and addr[0] == "lo":
            return None  # lo's outgoing copy of a packet it also receives (libpcap drops it on "any" too)
        ts_ns = None
        tci = None
        tpid = 0x8100
        for level, kind, data in anc:
            if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= _TIMESPEC.size:
                sec, nsec = _TIMESPEC.unpack_from(data)
                ts_ns = sec * 1_000_000_000 + nsec
            elif level == SOL_PACKET and kind == PACKET_AUXDATA and len(data) >= _AUXDATA.size:
                status, _len, _snap, _mac, _net, vtci, vtpid = _AUXDATA.unpack_from(data)
                if status & TP_STATUS_VLAN_VALID:
                    tci = vtci
                    if status & TP_STATUS_VLAN_TPID_VALID:
                        tpid = vtpid
        if ts_ns is None:
            ts_ns = time.time_ns()
        if self.cooked:
            return ts_ns, *self._cooked(addr, n, tci, tpid)
        got = bytes(self._view[:min(n, self.snaplen)])
        wire = n
        if tci is not None and len(got) >= 12:
            got = restore_vlan(got, tci, tpid)[:self.snaplen]
            wire += 4
        return ts_ns, got, wire

    def _cooked(self, addr: tuple[Any, ...], n: int, tci: int | None, tpid: int) -> tuple[bytes, int]:
        """A packet of a cooked socket behind its SLL2 header (and the VLAN tag the card took off, as an
        802.1Q header after it: the header's EtherType becomes the tag's TPID), with its length."""
        name, proto, pkttype, hatype, hwaddr = addr[:5]
        index = self._indexes.get(name)
        if index is None:
            try:
                index = self._indexes[name] = socket.if_nametoindex(name)
            except OSError:  # the interface went away between the packet and now
                index = 0
        body = self._view[:min(n, self.snaplen)]
        tag = b""
        if tci is not None:
            tag = struct.pack(">HH", tci, proto)
            proto = tpid
        head = _SLL2.pack(proto, 0, index, hatype, pkttype, len(hwaddr), hwaddr[:8])
        return (head + tag + bytes(body))[:self.snaplen], _SLL2.size + len(tag) + n

    def packets(self, stop: Stop | None = None, *, idle: Callable[[], None] | None = None
                ) -> Iterator[tuple[int, bytes, int]]:
        """The packets as they arrive: ``(time in ns since the epoch, bytes, length on the wire)``,
        until ``stop`` says (forever without it).  ``idle`` is called whenever no packet is waiting,
        before waiting for one (a writer flushes its file there)."""
        stop = stop or Stop()
        deadline = None if stop.duration is None else time.monotonic() + stop.duration
        while self._sock is not None:
            if stop.packets is not None and self.received >= stop.packets:
                return
            if stop.stopped is not None and stop.stopped():
                return
            pkt = self._recv()
            if pkt is not None:
                self.received += 1
                yield pkt
                continue
            if idle is not None:
                idle()
            wait = stop.poll if stop.stopped is not None else None
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                wait = left if wait is None else min(wait, left)
            select.select([self._sock], [], [], wait)

    def poll(self, timeout: float) -> tuple[int, bytes, int] | None:
        """The next packet (as :meth:`packets` gives them), waiting up to ``timeout`` seconds for
        one; None if none came (a view that refreshes while the interface is quiet)."""
        if self._sock is None:
            return None
        pkt = self._recv()
        if pkt is None:
            select.select([self._sock], [], [], timeout)
            pkt = self._recv()
        if pkt is not None:
            self.received += 1
        return pkt

    def stats(self) -> tuple[int, int]:
        """The kernel's counts since the capture opened: (packets it passed to the socket, packets it
        dropped because the socket's buffer was full)."""
        if self._sock is not None:
            try:
                got, dropped = _TPACKET_STATS.unpack(self._sock.getsockopt(SOL_PACKET, PACKET_STATISTICS,
                                                                           _TPACKET_STATS.size))
                self._kernel[0] += got
                self._kernel[1] += dropped
            except OSError:
                pass
        return self._kernel[0], self._kernel[1]

    def close(self) -> None:
        if self._sock is not None:
            self.stats()
            self._sock.close()
            self._sock = None

    def __enter__(self) -> LiveCapture:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ============================================================================ into a pipe


class PcapPipe:
    """A live capture written as pcap into a pipe by a thread, for what reads captures as streams
    (``rdmalab decode -i`` reads :attr:`path`, ``/dev/fd/N`` of the pipe's reading end), as tshark
    reads what dumpcap writes.  The writer flushes whenever no packet is waiting, so each packet
    reaches the reader at once.  The capture ends at ``stop``, when the reader stops reading (the
    pipe breaks), or at :meth:`close`, which also raises what went wrong in the thread."""

    def __init__(self, cap: LiveCapture, stop: Stop | None = None) -> None:
        stop = stop or Stop()
        self._cap = cap
        self._closed = threading.Event()
        told = stop.stopped
        self._stop = Stop(stop.packets, stop.duration,
                          (lambda: self._closed.is_set() or told()) if told is not None else self._closed.is_set,
                          stop.poll)
        self._r, w = os.pipe()
        self.path = f"/dev/fd/{self._r}"
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._pump, args=(w,), name=f"capture {cap.iface}", daemon=True)
        self._thread.start()

    def _pump(self, w: int) -> None:
        try:
            with open(w, "wb") as f, CaptureWriter(f, linktype=self._cap.linktype, snaplen=self._cap.snaplen) as out:
                for ts, data, wire in self._cap.packets(self._stop, idle=out.flush):
                    out.write(data, ts, wire_len=max(wire, len(data)))
        except BrokenPipeError:  # the reader stopped reading: the capture ends
            pass
        except BaseException as err:  # noqa: BLE001 - raised by close(), in the reader's thread
            self._error = err

    def close(self) -> None:
        """Stop capturing, close the pipe, and raise what went wrong in the capture's thread."""
        if self._closed.is_set():
            return
        self._closed.set()
        os.close(self._r)
        self._thread.join(self._stop.poll * 20)
        if self._error is not None:
            raise self._error

    def __enter__(self) -> PcapPipe:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ============================================================================ dumpcap's -a and -b

#: the keys of dumpcap's ``-a`` (stop) and ``-b`` (ring buffer) conditions that rdmalab knows
STOP_KEYS = ("duration", "packets", "filesize", "files")
RING_KEYS = ("duration", "packets", "filesize", "files")


def parse_conditions(opts: list[str], option: str, keys: tuple[str, ...]) -> dict[str, float]:
    """dumpcap's ``-a KEY:VALUE`` / ``-b KEY:VALUE`` options as ``{key: value}``; a bad one raises
    :class:`SniffError` naming it and what was expected."""
    out: dict[str, float] = {}
    for opt in opts:
        key, colon, val = opt.partition(":")
        if not colon or key not in keys:
            raise SniffError(f"{option} {opt}: expected one of {', '.join(k + ':N' for k in keys)}")
        try:
            num = float(val) if key == "duration" else int(val)
        except ValueError:
            raise SniffError(f"{option} {opt}: {val!r} is not a number") from None
        if num <= 0:
            raise SniffError(f"{option} {opt}: the value must be positive")
        out[key] = num
    return out


class _Counted:
    """A binary file that counts the bytes written to it (the ring's filesize condition)."""

    def __init__(self, f: IO[bytes]) -> None:
        self.f = f
        self.size = 0

    def write(self, data: Any) -> int:
        self.size += len(data)
        return self.f.write(data)

    def flush(self) -> None:
        self.f.flush()

    def close(self) -> None:
        self.f.close()


@dataclass
class RingFiles:
    """Where a live capture's packets go: one file (or ``-``, standard output), or dumpcap's ring
    of files when ``ring`` has a condition to switch on (``filesize`` in kB of 1000 bytes,
    ``duration`` in seconds, ``packets``) and ``files`` (keep only the newest N).  ``stop`` holds
    the ``-a`` conditions that are about files (``filesize``: stop when the file reaches it,
    ``files``: stop after that many files); :attr:`done` says when one was met.  Each file is a
    :class:`~rdmalab.capture.pcapwriter.CaptureWriter` of ``format``."""

    path: str
    linktype: int
    format: Format = "pcapng"
    snaplen: int = DEFAULT_SNAPLEN
    ring: dict[str, float] = field(default_factory=dict)
    stop: dict[str, float] = field(default_factory=dict)
    if_name: str | None = None
    application: str | None = None
    paths: list[str] = field(default_factory=list)  # every file written, the oldest first
    removed: list[str] = field(default_factory=list)  # files the ring deleted
    count: int = 0
    done: bool = False

    @staticmethod
    def check(path: str, ring: dict[str, float]) -> dict[str, float]:
        """The conditions to switch files on, or :class:`SniffError` if ``ring`` cannot work (before a
        capture opens: a command checks its options before it asks for privileges)."""
        switch = {k: v for k, v in ring.items() if k != "files"}
        if ring and not switch:
            raise SniffError("-b files:N needs a condition to switch files on: -b filesize:KB, -b duration:S "
                             "or -b packets:N (as dumpcap)")
        if ring and path == "-":
            raise SniffError("-b writes a ring of files: it needs -w FILE, not standard output")
        return switch

    def __post_init__(self) -> None:
        self._switch = self.check(self.path, self.ring)
        self._writer: CaptureWriter | None = None
        self._file: _Counted | None = None
        self._opened = 0.0
        self._in_file = 0
        self._open()

    def _name(self, n: int) -> str:
        if not self._switch:
            return self.path
        stem, ext = os.path.splitext(self.path)
        return f"{stem}_{n:05d}_{time.strftime('%Y%m%d%H%M%S')}{ext}"

    def _open(self) -> None:
        name = self._name(len(self.paths) + len(self.removed) + 1)
        try:
            dest: Any = "-" if name == "-" else _Counted(open(name, "wb"))  # noqa: SIM115 - closed in _close
        except OSError as err:
            raise SniffError(f"-w {name}: cannot write the capture ({err.strerror or err})") from None
        self._file = dest if isinstance(dest, _Counted) else None
        opts: dict[str, Any] = {"if_name": self.if_name, "application": self.application} \
            if self.format == "pcapng" else {}
        self._writer = CaptureWriter(dest, format=self.format, linktype=self.linktype, snaplen=self.snaplen,
                                     **opts)
        self.paths.append(name)
        self._opened = time.monotonic()
        self._in_file = 0
        keep = self.ring.get("files")
        if keep is not None:
            while len(self.paths) > keep:
                old = self.paths.pop(0)
                try:
                    os.unlink(old)
                except OSError:
                    pass
                self.removed.append(old)

    def _close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self._file is not None:
            self._file.close()
            self._file = None

    def write(self, ts_ns: int, data: bytes, wire: int) -> None:
        """One packet; then the file is switched (or the capture marked done) if a condition is met."""
        assert self._writer is not None
        self._writer.write(data, ts_ns, wire_len=max(wire, len(data)))
        self.count += 1
        self._in_file += 1
        size = self._file.size if self._file is not None else 0
        full = "filesize" in self.stop and size >= self.stop["filesize"] * 1000
        switch = (("filesize" in self._switch and size >= self._switch["filesize"] * 1000)
                  or ("packets" in self._switch and self._in_file >= self._switch["packets"])
                  or ("duration" in self._switch and time.monotonic() - self._opened >= self._switch["duration"]))
        if not (switch or full):
            return
        written = len(self.paths) + len(self.removed)
        if (full and not self._switch) or ("files" in self.stop and written >= self.stop["files"]):
            self.done = True
            return
        self._close()
        self._writer = None
        self._open()

    def tick(self) -> None:
        """Between packets: flush, and switch a ``duration`` ring whose time is up."""
        if self._writer is None:
            return
        self._writer.flush()
        if "duration" in self._switch and self._in_file and time.monotonic() - self._opened >= self._switch["duration"]:
            written = len(self.paths) + len(self.removed)
            if "files" in self.stop and written >= self.stop["files"]:
                self.done = True
                return
            self._close()
            self._open()

    def close(self) -> None:
        self._close()
