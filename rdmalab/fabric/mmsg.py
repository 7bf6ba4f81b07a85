"""Many datagrams per system call: Linux ``sendmmsg(2)`` and ``recvmmsg(2)`` over a ring of slots.

Python's socket module has ``sendmsg``/``recvmsg_into`` (one datagram a call) but not their
batched forms, which Linux has had since 2.6.33 (``recvmmsg``) and 3.0 (``sendmmsg``).  A
:class:`Ring` is a numpy array of ``slots`` rows of ``slot_size`` bytes, one datagram a row,
with the ``struct mmsghdr`` array (``include/linux/socket.h``) and one ``struct iovec`` per row
already pointing at the rows, so that a batch costs one ``ctypes`` call and no Python object per
datagram.  The lengths the kernel writes back (``msg_len``) and the flags (``msg_flags``) are
numpy views into the header array.

The UDP carrier (:mod:`rdmalab.fabric.udp`) uses one ring to receive and one to send.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import socket
from typing import Any

import numpy as np

MSG_DONTWAIT = 0x40  # include/linux/socket.h
MSG_TRUNC = 0x20


class Iovec(ctypes.Structure):
    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]


class MsgHdr(ctypes.Structure):
    _fields_ = [("msg_name", ctypes.c_void_p), ("msg_namelen", ctypes.c_uint32),
                ("msg_iov", ctypes.c_void_p), ("msg_iovlen", ctypes.c_size_t),
                ("msg_control", ctypes.c_void_p), ("msg_controllen", ctypes.c_size_t),
                ("msg_flags", ctypes.c_int)]


class MMsgHdr(ctypes.Structure):
    _fields_ = [("msg_hdr", MsgHdr), ("msg_len", ctypes.c_uint)]


class SockaddrIn(ctypes.Structure):
    _fields_ = [("sin_family", ctypes.c_ushort), ("sin_port", ctypes.c_uint16),
                ("sin_addr", ctypes.c_uint8 * 4), ("sin_zero", ctypes.c_uint8 * 8)]


def _libc() -> Any:
    lib = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    for name in ("sendmmsg", "recvmmsg"):
        if not hasattr(lib, name):
            return None
    lib.sendmmsg.restype = ctypes.c_int
    lib.recvmmsg.restype = ctypes.c_int
    return lib


_LIBC = _libc() if os.name == "posix" else None


def available() -> bool:
    """True where the C library has ``sendmmsg`` and ``recvmmsg`` (glibc and musl on Linux)."""
    return _LIBC is not None


def _bytes_of(obj: Any) -> np.ndarray:
    """The memory of a ctypes object as a numpy byte array (no copy)."""
    b: Any = (ctypes.c_uint8 * ctypes.sizeof(obj)).from_buffer(obj)
    return np.frombuffer(b, np.uint8)


def _field_view(base: np.ndarray, field: Any, dtype: Any, slots: int) -> np.ndarray:
    """A numpy view of one field of every ``struct mmsghdr`` in the array whose bytes are ``base``."""
    size = ctypes.sizeof(MMsgHdr)
    return np.ndarray((slots,), dtype=dtype, buffer=base, offset=field, strides=(size,))


class Ring:
    """``slots`` datagram buffers of ``slot_size`` bytes with their ``mmsghdr`` array.

    ``buf[i]`` is row ``i`` (numpy, uint8); ``rows[i]`` the same as a memoryview; ``lens[i]`` the
    length of datagram ``i`` (set by :meth:`recv`; set it before :meth:`send`); ``flags[i]`` its
    ``msg_flags`` after :meth:`recv` (``MSG_TRUNC``: the datagram was longer than the slot)."""

    def __init__(self, slots: int, slot_size: int) -> None:
        if slot_size % 4:
            raise ValueError(f"slot_size must be a multiple of 4, not {slot_size}")
        if _LIBC is None:
            raise OSError(errno.ENOSYS, "this C library has no sendmmsg/recvmmsg")
        self.slots = slots
        self.slot_size = slot_size
        self.buf = np.zeros((slots, slot_size), np.uint8)
        flat = self.buf.data.cast("B")
        self.rows = [flat[i * slot_size:(i + 1) * slot_size] for i in range(slots)]
        self._iov = (Iovec * slots)()
        self._msgs = (MMsgHdr * slots)()
        base = self.buf.ctypes.data
        iov0 = ctypes.addressof(self._iov)
        for i in range(slots):
            self._iov[i].iov_base = base + i * slot_size
            self._iov[i].iov_len = slot_size
            h = self._msgs[i].msg_hdr
            h.msg_iov = iov0 + i * ctypes.sizeof(Iovec)
            h.msg_iovlen = 1
        raw = _bytes_of(self._msgs)
        iraw = _bytes_of(self._iov)
        hdr = MMsgHdr.msg_hdr.offset
        self.be16 = self.buf.view(">u2")  # the rows as big-endian 16- and 32-bit words (slot_size % 4 == 0)
        self.be32 = self.buf.view(">u4")
        self.le32 = self.buf.view("<u4")
        self.lens = _field_view(raw, MMsgHdr.msg_len.offset, np.uint32, slots)
        self.flags = _field_view(raw, hdr + MsgHdr.msg_flags.offset, np.int32, slots)
        self._names = _field_view(raw, hdr + MsgHdr.msg_name.offset, np.uint64, slots)
        self._namelens = _field_view(raw, hdr + MsgHdr.msg_namelen.offset, np.uint32, slots)
        self._iov_lens = np.ndarray((slots,), np.uint64, iraw, Iovec.iov_len.offset, (ctypes.sizeof(Iovec),))
        self._dests: dict[tuple[str, int], SockaddrIn] = {}
        self._last_dest: tuple[str, int, int, int] | None = None
        self._mmsg_size = ctypes.sizeof(MMsgHdr)
        self._lib: Any = _LIBC

    # ------------------------------------------------------------------ receiving
    def recv(self, fd: int) -> int:
        """Receive up to ``slots`` datagrams that are waiting (never blocks); 0 when none is."""
        n = self._lib.recvmmsg(fd, self._msgs, self.slots, MSG_DONTWAIT, None)
        if n < 0:
            err = ctypes.get_errno()
            if err in (errno.EAGAIN, errno.EINTR):
                return 0
            raise OSError(err, os.strerror(err))
        return int(n)

    # ------------------------------------------------------------------ sending
    def _dest(self, ip: str, port: int) -> SockaddrIn:
        sa = self._dests.get((ip, port))
        if sa is None:
            sa = SockaddrIn(socket.AF_INET, socket.htons(port))
            sa.sin_addr[:] = list(socket.inet_aton(ip))
            self._dests[(ip, port)] = sa
        return sa

    def send(self, fd: int, start: int, count: int, ip: str, port: int = 0) -> tuple[int, int]:
        """Send rows ``start .. start+count-1`` (their lengths in ``lens``) to ``ip`` (and ``port``;
        0 for a raw socket), in order.

        Returns ``(sent, errno)``: the datagrams the kernel took, and 0, or the error that stopped
        it at row ``start + sent`` (``EAGAIN``: the socket buffer is full; the caller waits and
        sends the rest)."""
        end = start + count
        if self._last_dest != (ip, port, start, end):  # the same destination and rows as last time: already set
            self._names[start:end] = ctypes.addressof(self._dest(ip, port))
            self._namelens[start:end] = ctypes.sizeof(SockaddrIn)
            self._last_dest = (ip, port, start, end)
        self._iov_lens[start:end] = self.lens[start:end]
        n = self._lib.sendmmsg(fd, ctypes.byref(self._msgs, start * self._mmsg_size), count, 0)
        if n < 0:
            return 0, ctypes.get_errno()
        return int(n), 0
