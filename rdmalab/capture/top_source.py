"""Frames for the live view (:mod:`rdmalab.capture.top`): a capture file replayed, or a live interface.

A source is an iterator of :data:`Frame` tuples ``(timestamp_ns, frame bytes, link type, length on
the wire)`` or ``None`` when nothing came for a while (a live interface that is quiet: the view
refreshes anyway).  :func:`replay` reads a pcap/pcapng file (the one record walker,
:func:`rdmalab.capture.reader.records`) at the capture's own pace times ``speed``, or as fast as
it can; :func:`af_packet` opens a Linux ``AF_PACKET`` raw socket on an interface: small and kept
apart, so that the live reader of ``rdmalab capture -i`` can take its place.
"""

from __future__ import annotations

import errno
import os
import socket
import struct
import time
from collections.abc import Callable, Iterator

from rdmalab.capture.linktypes import LINKTYPE_ETHERNET
from rdmalab.capture.reader import CaptureError, records

#: the errors a source raises: LiveCaptureError (an interface), CaptureError (a file that cannot be read)
__all__ = ["CaptureError", "Frame", "LiveCaptureError", "af_packet", "replay"]

Frame = tuple[int, bytes, int, int]
_ETH_P_ALL = 0x0003
_SNAPLEN = 65535
_SOL_PACKET, _PACKET_STATISTICS = 263, 6  # <linux/socket.h>, <linux/if_packet.h>
_ARPHRD_LOOPBACK = 772  # <linux/if_arp.h>


class LiveCaptureError(Exception):
    """An interface that cannot be captured on: one sentence saying why."""


def replay(path: str | os.PathLike[str], speed: float | None = 1.0, *, clock: Callable[[], float] = time.monotonic,
           sleep: Callable[[float], None] = time.sleep, wait_max: float = 0.25) -> Iterator[Frame | None]:
    """The frames of a capture file, each when its time comes: at ``speed`` times the capture's
    pace (``None``: no waiting).  While a frame's time has not come it yields ``None`` every
    ``wait_max`` seconds at most, so that a view can refresh during a long pause of the capture."""
    start_wall: float | None = None
    start_ts = 0
    for rec in records(path):
        ts = round(rec.timestamp * 1e9)
        if speed is not None:
            if start_wall is None:
                start_wall, start_ts = clock(), ts
            while True:
                due = start_wall + (ts - start_ts) / 1e9 / speed - clock()
                if due <= 0:
                    break
                sleep(min(due, wait_max))
                if due > wait_max:
                    yield None
        yield ts, rec.data, rec.linktype, rec.wire_length


def af_packet(iface: str, *, timeout: float = 0.25, stats: dict[str, int] | None = None) -> Iterator[Frame | None]:
    """Every frame of a live interface (both directions, once: on the loopback interface the
    outgoing copy of each frame is skipped, as libpcap does), timestamped on arrival; ``None`` after
    ``timeout`` seconds without one.  Linux only; needs root or CAP_NET_RAW.  ``stats["dropped"]``
    counts the frames the kernel dropped because the socket's buffer was full (PACKET_STATISTICS),
    brought up to date whenever a ``None`` is yielded and every 1024 frames."""
    if not hasattr(socket, "AF_PACKET"):
        raise LiveCaptureError(f"capturing on {iface} needs Linux (AF_PACKET sockets); replay a file with -r instead")
    try:
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(_ETH_P_ALL))
    except PermissionError:
        raise LiveCaptureError(f"capturing on {iface} needs root or the CAP_NET_RAW capability "
                               f"(run as root, or: sudo setcap cap_net_raw+ep $(readlink -f $(which python3)))") from None
    try:
        s.bind((iface, _ETH_P_ALL))
    except OSError as err:
        s.close()
        if err.errno in (errno.ENODEV, errno.ENXIO) or isinstance(err, socket.gaierror):
            raise LiveCaptureError(f"there is no network interface named {iface!r} (see ip link)") from None
        raise LiveCaptureError(f"cannot capture on {iface}: {err.strerror or err}") from None
    s.settimeout(timeout)
    # room for bursts while the decoder catches up: 32 MB, past net.core.rmem_max where the process may
    # (SO_RCVBUFFORCE, CAP_NET_ADMIN); in the TCG lab VM, with rmem_max's 208 KiB, a 10 % loss run of
    # ib_write_bw -n 50 lost 235 of its 821 RoCE frames on the way to the decoder
    for opt in (getattr(socket, "SO_RCVBUFFORCE", 33), socket.SO_RCVBUF):
        try:
            s.setsockopt(socket.SOL_SOCKET, opt, 32 << 20)
            break
        except OSError:
            continue
    buf = bytearray(_SNAPLEN)
    got = 0
    try:
        while True:
            try:
                n, where = s.recvfrom_into(buf, _SNAPLEN, socket.MSG_TRUNC)
            except TimeoutError:
                _drops(s, stats)
                yield None
                continue
            except OSError as err:
                if err.errno == errno.ENETDOWN:
                    raise LiveCaptureError(f"interface {iface} went down") from None
                raise
            if where[2] == socket.PACKET_OUTGOING and where[3] == _ARPHRD_LOOPBACK:
                continue  # loopback: each frame comes again as incoming (libpcap skips this copy too)
            got += 1
            if got % 1024 == 0:
                _drops(s, stats)
            cap = min(n, _SNAPLEN)
            yield time.time_ns(), bytes(buf[:cap]), LINKTYPE_ETHERNET, n
    finally:
        _drops(s, stats)
        s.close()


def _drops(s: socket.socket, stats: dict[str, int] | None) -> None:
    """Add the drops since the last call (reading PACKET_STATISTICS resets it) to ``stats``."""
    if stats is None:
        return
    try:
        raw = s.getsockopt(_SOL_PACKET, _PACKET_STATISTICS, 8)
    except OSError:
        return
    stats["dropped"] = stats.get("dropped", 0) + struct.unpack("=II", raw)[1]  # struct tpacket_stats: packets, drops
