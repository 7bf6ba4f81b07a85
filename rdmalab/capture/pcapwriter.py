"""The one pcap / pcapng writer: every tap, tool and test that writes a capture writes it here.

:class:`CaptureWriter` writes incrementally (open, :meth:`~CaptureWriter.write` a packet,
:meth:`~CaptureWriter.flush`, :meth:`~CaptureWriter.close`, or ``with``) to a path, to ``"-"``
(standard output, as tshark's ``-w -``) or to any binary file object, pipes included: it only
ever appends, never seeks.  :func:`write_capture` writes a list of frames in one call.

Two formats:

* ``"pcap"``, libpcap's classic format (``pcap-savefile(5)``): a 24-byte file header (magic
  ``a1b2c3d4`` for microsecond or ``a1b23c4d`` for nanosecond timestamps, version 2.4, snaplen,
  link type), then per packet a 16-byte header (seconds, fraction, captured length, original
  length) and the bytes.  One link type per file.
* ``"pcapng"`` (IETF draft-ietf-opsawg-pcapng): a Section Header Block (4.1; options
  ``shb_comment`` and ``shb_userappl``), Interface Description Blocks (4.2; one per interface,
  each with its own link type and snaplen, options ``if_name``, ``if_description`` and
  ``if_tsresol`` = 9 for nanoseconds), Enhanced Packet Blocks (4.3) with any number of
  ``opt_comment`` options (3.5), which Wireshark shows as ``frame.comment``.  Interfaces may be
  added at any time (:meth:`CaptureWriter.add_interface`), as the format allows, before the
  packets that use them.

Times are integer nanoseconds since the epoch (or since whatever zero a simulation uses), the
house unit.  A microsecond file stores them rounded to the nearest microsecond (halves up).
:func:`seconds_to_ns` turns float seconds into nanoseconds the way dpkt's writer always did
(whole seconds, then the fraction rounded), so files written from float times stay as they were.

Files are little-endian whatever the host, so the same run writes the same bytes everywhere.
A packet longer than the snaplen is cut to it, its original length kept (as ``tcpdump -s``
does); snaplen 0 in pcapng means no limit.  Bad arguments raise ``ValueError`` or
``TypeError`` naming the argument, the packet number and what was expected.
"""

from __future__ import annotations

import io
import math
import operator
import os
import struct
import sys
from collections.abc import Iterable, Sequence
from types import TracebackType
from typing import IO, Literal

from rdmalab.capture.linktypes import LINKTYPE_ETHERNET

__all__ = ["BYTE_ORDER_MAGIC", "DEFAULT_SNAPLEN", "PCAPNG_EPB", "PCAPNG_IDB", "PCAPNG_SHB", "PCAP_MAGIC_NS",
           "PCAP_MAGIC_US", "CaptureWriter", "seconds_to_ns", "write_capture"]

#: tcpdump's default snapshot length: every RDMA frame fits whole
DEFAULT_SNAPLEN = 262144

#: the numbers of the formats (the reader, rdmalab.capture.pcapio, recognises files by them too)
PCAP_MAGIC_US = 0xA1B2C3D4
PCAP_MAGIC_NS = 0xA1B23C4D
_PCAP_HEADER = struct.Struct("<IHHiIII")  # magic, version 2.4, thiszone, sigfigs, snaplen, link type
_PCAP_RECORD = struct.Struct("<IIII")  # seconds, fraction, captured length, original length

PCAPNG_SHB = 0x0A0D0D0A
PCAPNG_IDB = 1
PCAPNG_EPB = 6
BYTE_ORDER_MAGIC = 0x1A2B3C4D
_OPT_ENDOFOPT, _OPT_COMMENT = 0, 1
_SHB_USERAPPL = 4
_IF_NAME, _IF_DESCRIPTION, _IF_TSRESOL = 2, 3, 9
_EPB_HEAD = struct.Struct("<IIIIIII")  # type, length, interface, ts high, ts low, captured, original
_OPTION = struct.Struct("<HH")

Format = Literal["pcap", "pcapng"]
#: what a frame handed to :func:`write_capture` may be: bytes (time 0), ``(ts_ns, bytes)`` or
#: ``(ts_ns, bytes, comment)``
FrameLike = bytes | bytearray | memoryview | tuple[int, bytes] | tuple[int, bytes, str | Sequence[str] | None]


def seconds_to_ns(ts: float) -> int:
    """Float seconds as integer nanoseconds: the whole seconds, plus the fraction times 10^9
    rounded (dpkt's rule, so files written from float times keep their bytes).

    >>> seconds_to_ns(5.5), seconds_to_ns(1e-6), seconds_to_ns(3)
    (5500000000, 1000, 3000000000)
    """
    if not math.isfinite(ts):
        raise ValueError(f"a timestamp must be a finite number of seconds, not {ts!r}")
    whole, frac = divmod(float(ts), 1.0)
    return int(whole) * 1_000_000_000 + round(frac * 1e9)


def _pad4(n: int) -> bytes:
    return b"\0" * (-n % 4)


def _options(opts: Iterable[tuple[int, bytes]], where: str) -> bytes:
    """pcapng options (3.5): code, length, value padded to 4 bytes; ``opt_endofopt`` after any."""
    out = bytearray()
    for code, value in opts:
        if len(value) > 0xFFFF:
            raise ValueError(f"{where}: an option of {len(value)} bytes is longer than a pcapng option can "
                             "hold (65535)")
        out += _OPTION.pack(code, len(value)) + value + _pad4(len(value))
    if out:
        out += _OPTION.pack(_OPT_ENDOFOPT, 0)
    return bytes(out)


def _block(btype: int, body: bytes) -> bytes:
    total = 12 + len(body)
    return struct.pack("<II", btype, total) + body + struct.pack("<I", total)


def _comments(comment: str | Sequence[str] | None, where: str) -> list[str]:
    if comment is None:
        return []
    if isinstance(comment, str):
        return [comment]
    got = list(comment)
    for c in got:
        if not isinstance(c, str):
            raise TypeError(f"{where}: a comment must be a str, not {type(c).__name__}")
    return got


class _Interface:
    __slots__ = ("linktype", "snaplen", "per_second", "to_units")

    def __init__(self, linktype: int, snaplen: int, nano: bool) -> None:
        self.linktype = linktype
        self.snaplen = snaplen
        self.per_second = 1_000_000_000 if nano else 1_000_000
        self.to_units = 1 if nano else 1000


class CaptureWriter:
    """Writes packets to a pcap or pcapng file as they come.

    ``dest`` is a path (created or truncated; closed by :meth:`close`), ``"-"`` for standard
    output, or a binary file object (a pipe too; left open by :meth:`close`, which flushes it).
    ``format`` is ``"pcap"`` or ``"pcapng"``.  ``linktype`` and ``snaplen`` describe the first
    interface (the only one in pcap; in pcapng ``linktype=None`` starts with none, to be added
    by :meth:`add_interface`); ``if_name`` names it (pcapng only).  ``nano`` chooses nanosecond
    timestamps (``False``: microseconds).  ``comment`` and ``application`` are the pcapng
    section's ``shb_comment`` and ``shb_userappl``.

    >>> import io
    >>> buf = io.BytesIO()
    >>> with CaptureWriter(buf, format="pcapng", comment="two frames") as w:
    ...     w.write(bytes(60), 1_000)
    ...     w.write(bytes(60), 2_500, comment="the second")
    >>> w.count, buf.getvalue()[:4].hex()
    (2, '0a0d0d0a')
    """

    def __init__(self, dest: str | os.PathLike[str] | IO[bytes], *, format: Format = "pcap",
                 linktype: int | None = LINKTYPE_ETHERNET, snaplen: int = DEFAULT_SNAPLEN, nano: bool = True,
                 if_name: str | None = None, comment: str | Sequence[str] | None = None,
                 application: str | None = None) -> None:
        if format not in ("pcap", "pcapng"):
            raise ValueError(f"format must be 'pcap' or 'pcapng', not {format!r}")
        self.format: Format = format
        self.nano = nano
        self.count = 0
        self._ifaces: list[_Interface] = []
        if format == "pcap":
            if linktype is None:
                raise ValueError("a pcap file has one link type, given when it is opened: linktype=None is "
                                 "for pcapng")
            for what, val in (("if_name", if_name), ("comment", comment), ("application", application)):
                if val is not None:
                    raise ValueError(f"{what} is a pcapng option: a classic pcap file has no place for it "
                                     "(use format='pcapng')")
            if not 1 <= snaplen <= 0xFFFFFFFF:
                raise ValueError(f"snaplen of a pcap file must be 1..4294967295 bytes, not {snaplen}")
        shb = b""
        if format == "pcapng":
            opts = [(_OPT_COMMENT, c.encode("utf-8")) for c in _comments(comment, "the section comment")]
            if application is not None:
                opts.append((_SHB_USERAPPL, application.encode("utf-8")))
            # byte-order magic, version 1.0, section length not given (-1)
            shb = _block(PCAPNG_SHB, struct.pack("<IHHq", BYTE_ORDER_MAGIC, 1, 0, -1)
                         + _options(opts, "the section header"))
        self._own, self._f = _open(dest)
        self.closed = False
        try:
            if format == "pcap":
                assert linktype is not None
                self._check_linktype(linktype)
                self._f.write(_PCAP_HEADER.pack(PCAP_MAGIC_NS if nano else PCAP_MAGIC_US, 2, 4, 0, 0, snaplen,
                                                linktype))
                self._ifaces.append(_Interface(linktype, snaplen, nano))
            else:
                self._f.write(shb)
                if linktype is not None:
                    self.add_interface(linktype, name=if_name, snaplen=snaplen)
        except BaseException:
            self.close()
            raise

    @staticmethod
    def _check_linktype(linktype: int) -> None:
        if not isinstance(linktype, int) or not 0 <= linktype <= 0xFFFF:
            raise ValueError(f"linktype must be a LINKTYPE_* number (0..65535), not {linktype!r}")

    # ------------------------------------------------------------------ interfaces
    def add_interface(self, linktype: int, *, name: str | None = None, description: str | None = None,
                      snaplen: int = DEFAULT_SNAPLEN, nano: bool | None = None) -> int:
        """Describe one more interface (pcapng only) and return its number, for :meth:`write`.

        ``snaplen`` 0 means no limit; ``nano`` (default: the writer's) chooses ``if_tsresol`` 9."""
        self._check_open()
        if self.format != "pcapng":
            raise ValueError("a pcap file has exactly one interface: add_interface is for format='pcapng'")
        self._check_linktype(linktype)
        if not 0 <= snaplen <= 0xFFFFFFFF:
            raise ValueError(f"snaplen must be 0 (no limit) .. 4294967295 bytes, not {snaplen}")
        ns = self.nano if nano is None else nano
        opts: list[tuple[int, bytes]] = []
        if name is not None:
            opts.append((_IF_NAME, name.encode("utf-8")))
        if description is not None:
            opts.append((_IF_DESCRIPTION, description.encode("utf-8")))
        if ns:
            opts.append((_IF_TSRESOL, b"\x09"))  # 10^-9 s; without the option, 10^-6 s
        where = f"interface {len(self._ifaces)}"
        self._f.write(_block(PCAPNG_IDB, struct.pack("<HHI", linktype, 0, snaplen) + _options(opts, where)))
        self._ifaces.append(_Interface(linktype, snaplen, ns))
        return len(self._ifaces) - 1

    @property
    def interfaces(self) -> list[int]:
        """The link type of each interface, by interface number."""
        return [i.linktype for i in self._ifaces]

    # ------------------------------------------------------------------ packets
    def write(self, data: bytes | bytearray | memoryview, ts_ns: int = 0, *, wire_len: int | None = None,
              interface: int = 0, comment: str | Sequence[str] | None = None, as_read: bool = False) -> None:
        """Append one packet: its bytes, its time in nanoseconds, its length on the wire (default:
        ``len(data)``), its interface (pcapng) and its comments (pcapng; a str or several).
        ``as_read``: a record copied from a capture as it was read, whose wire length may be shorter
        than its bytes (a damaged record: the copy keeps both, as Wireshark shows them)."""
        if self.closed:
            self._check_open()
        n = self.count + 1
        if not isinstance(data, bytes | bytearray | memoryview):
            raise TypeError(f"packet {n}: data must be bytes, not {type(data).__name__}")
        if type(ts_ns) is not int:
            try:
                ts_ns = operator.index(ts_ns)  # numpy's integers too
            except TypeError:
                raise TypeError(f"packet {n}: ts_ns must be an int number of nanoseconds, not "
                                f"{type(ts_ns).__name__} {ts_ns!r} (seconds_to_ns converts float seconds)") from None
        if ts_ns < 0:
            raise ValueError(f"packet {n}: ts_ns must not be negative (before the epoch), not {ts_ns}")
        size = len(data)
        wire = size if wire_len is None else wire_len
        if wire < size and not as_read:
            raise ValueError(f"packet {n}: wire_len {wire} is shorter than the {size} bytes captured")
        try:
            iface = self._ifaces[interface] if interface >= 0 else None
        except IndexError:
            iface = None
        if iface is None:
            raise ValueError(f"packet {n}: no interface {interface} (the file describes {len(self._ifaces)}"
                             f"{'; add_interface adds one' if self.format == 'pcapng' else ''})")
        if iface.snaplen and size > iface.snaplen:
            data = data[:iface.snaplen]
            size = iface.snaplen
        units = ts_ns if iface.to_units == 1 else (ts_ns + 500) // 1000
        f = self._f
        if self.format == "pcap":
            if comment is not None:
                raise ValueError(f"packet {n}: a classic pcap file has no place for a comment "
                                 "(use format='pcapng')")
            sec, frac = divmod(units, iface.per_second)
            if sec > 0xFFFFFFFF:
                raise ValueError(f"packet {n}: {ts_ns} ns is past 2106, beyond a pcap file's 32-bit seconds "
                                 "(use format='pcapng')")
            f.write(_PCAP_RECORD.pack(sec, frac, size, wire))
            f.write(data)
        else:
            if units > 0xFFFFFFFFFFFFFFFF:
                raise ValueError(f"packet {n}: {ts_ns} ns does not fit pcapng's 64-bit timestamp")
            opts = b""
            if comment is not None:
                opts = _options(((_OPT_COMMENT, c.encode("utf-8")) for c in _comments(comment, f"packet {n}")),
                                f"packet {n}")
            total = 32 + size + (-size % 4) + len(opts)
            f.write(_EPB_HEAD.pack(PCAPNG_EPB, total, interface, units >> 32, units & 0xFFFFFFFF, size, wire))
            f.write(data)
            f.write(_pad4(size) + opts + total.to_bytes(4, "little"))
        self.count = n

    # ------------------------------------------------------------------ the file
    def _check_open(self) -> None:
        if self.closed:
            raise ValueError("the capture writer is closed")

    def flush(self) -> None:
        """Push what was written to the file (or pipe), so a reader at the other end sees it."""
        self._check_open()
        self._f.flush()

    def close(self) -> None:
        """Flush, and close the file if the writer opened it.  Closing twice is harmless."""
        if self.closed:
            return
        self.closed = True
        try:
            self._f.flush()
        finally:
            if self._own:
                self._f.close()

    def __enter__(self) -> CaptureWriter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def _open(dest: str | os.PathLike[str] | IO[bytes]) -> tuple[bool, IO[bytes]]:
    """(whether the writer owns the file, the file)."""
    if isinstance(dest, str | os.PathLike):
        path = os.fspath(dest)
        if path == "-":
            return False, sys.stdout.buffer
        return True, open(path, "wb")  # noqa: SIM115 - closed by CaptureWriter.close
    if isinstance(dest, io.TextIOBase):
        raise TypeError("a capture is binary: give a binary file object (for standard output, sys.stdout.buffer "
                        "or '-'), not a text stream")
    if not callable(getattr(dest, "write", None)):
        raise TypeError(f"dest must be a path, '-' or a binary file object, not {type(dest).__name__}")
    return False, dest


def write_capture(dest: str | os.PathLike[str] | IO[bytes], frames: Iterable[FrameLike], *,
                  format: Format = "pcap", linktype: int = LINKTYPE_ETHERNET, snaplen: int = DEFAULT_SNAPLEN,
                  nano: bool = True, comment: str | Sequence[str] | None = None,
                  application: str | None = None) -> int:
    """Write ``frames`` to ``dest`` in one call (see :class:`CaptureWriter`); returns how many.

    A frame is bytes (time 0), ``(ts_ns, bytes)`` or ``(ts_ns, bytes, comment)`` (pcapng)."""
    with CaptureWriter(dest, format=format, linktype=linktype, snaplen=snaplen, nano=nano, comment=comment,
                       application=application) as w:
        for item in frames:
            if isinstance(item, tuple):
                if len(item) == 2:
                    w.write(item[1], item[0])
                elif len(item) == 3:
                    w.write(item[1], item[0], comment=item[2])
                else:
                    raise ValueError(f"frame {w.count + 1}: a tuple is (ts_ns, bytes) or (ts_ns, bytes, comment), "
                                     f"not {len(item)} items")
            else:
                w.write(item)
        return w.count
