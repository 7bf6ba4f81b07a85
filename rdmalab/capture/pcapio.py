"""The one walker over the records of a pcap or pcapng file (plain or gzip-compressed).

Both decoders read files through here: the per-packet reader (:func:`rdmalab.capture.reader.records`)
hands out the records of each block one at a time, the columnar decoder
(:mod:`rdmalab.capture.columnar`) takes a block whole.  A block is one buffer of about
``block_bytes`` and, per record, where its bytes are (:class:`RecordBlock`), so memory does not
grow with the file.

Formats: pcap (libpcap's ``pcap-savefile(5)``: microsecond and nanosecond magics, either byte
order) and pcapng (IETF draft-ietf-opsawg-pcapng: Section Header, Interface Description with
``if_tsresol``/``if_tsoffset``, Enhanced, Simple and obsolete Packet Blocks; other blocks are
skipped).  The original (wire) length and the interface of every record are kept.

A damaged file yields every record before the damage, then raises :class:`CaptureError`, whose
message names the file, the record (frame number) and the byte offset, and says what was wrong;
nothing is silently dropped or returned short.

Streams: the path ``"-"`` is standard input, and a path that is not a regular file (a FIFO, a
character device, ``/dev/fd/N`` of a pipe) is read as a stream (:func:`is_stream`): each read
returns what has arrived (at least one byte, at most :data:`STREAM_BLOCK`), so a block holds the
records that came together and is handed out at once, not when a full block or the end of the
stream arrives.  Memory stays bounded however long the stream runs: one block, and the part of a
record still coming.  A stream is read once: nothing here seeks or opens it again.

pcapng in bulk: a buffer's Enhanced Packet Blocks are found with numpy (every word that holds the
EPB type and is followed by a length a block may have; a run is the chain of those that start where
the one before ends, :class:`_EpbCandidates`: Python steps only where something that looks like a
block lies inside another's data); each run's interface ids, timestamps and lengths are then read
with numpy over the buffer, all at once, and checked with masks.  Any other block (section header, interface description, simple or obsolete
packet block, one of another type), and any block that fails a check, ends the run and is read
by the block-by-block rules, so the records, times and errors (message, frame, byte offset) are
those of a walker that reads every block in Python: ``tests/capture/pcapng_reference.py`` is one,
and ``tests/capture/test_pcapng_bulk.py`` holds the two to that on every capture and on damaged
files.  Runs are walked in native byte order; a section in the other order takes the
block-by-block rules for all its blocks.
"""

from __future__ import annotations

import contextlib
import fcntl
import gzip
import os
import select
import stat
import struct
import sys
import weakref
import zlib
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from typing import IO, Any

import numpy as np

from rdmalab.capture.pcapwriter import (
    BYTE_ORDER_MAGIC,
    PCAP_MAGIC_NS,
    PCAP_MAGIC_US,
    PCAPNG_EPB,
    PCAPNG_IDB,
    PCAPNG_SHB,
)
from rdmalab.wire.errors import RdmalabError

_NATIVE = "<" if sys.byteorder == "little" else ">"  # the byte order pcapng runs are walked in

#: A record (or pcapng block) longer than this means a corrupt length field.
MAX_RECORD = 64 * 1024 * 1024

_PCAPNG_SHB = PCAPNG_SHB.to_bytes(4, "big")  # the same either way round
#: pcap magic (as the file's first four bytes) -> (byte order, nanoseconds per timestamp unit)
PCAP_MAGICS = {PCAP_MAGIC_US.to_bytes(4, "little"): ("<", 1000), PCAP_MAGIC_US.to_bytes(4, "big"): (">", 1000),
               PCAP_MAGIC_NS.to_bytes(4, "little"): ("<", 1), PCAP_MAGIC_NS.to_bytes(4, "big"): (">", 1)}
_BOM_LE, _BOM_BE = BYTE_ORDER_MAGIC.to_bytes(4, "little"), BYTE_ORDER_MAGIC.to_bytes(4, "big")
_BLOCK_NAMES = {PCAPNG_IDB: "interface description", 2: "packet", 3: "simple packet", PCAPNG_EPB: "enhanced packet",
                PCAPNG_SHB: "section header"}


#: the path that means standard input (as tcpdump's and tshark's ``-r -``)
STDIN = "-"

#: the most a read of a stream asks for: a block of a stream holds at most this much (and the
#: part of a record left from the block before)
STREAM_BLOCK = 256 << 10


def shown_path(path: str | os.PathLike[str]) -> str:
    """How errors name a capture: its path, or "standard input" for ``-``."""
    p = os.fspath(path)
    return "standard input" if p == STDIN else p


def is_stream(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is read as a stream: ``-`` (standard input), or an existing path that is
    not a regular file (a FIFO, a character device, a socket, ``/dev/fd/N`` of a pipe).  Such a
    capture can be read once, from its start to its end, and not again or from an offset."""
    p = os.fspath(path)
    if p == STDIN:
        return True
    try:
        mode = os.stat(p).st_mode
    except OSError:
        return False
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


class CaptureError(RdmalabError):
    """A capture file that cannot be read (missing, not a capture, damaged).

    ``path`` is the file, ``offset`` the byte offset of the damage when known, and
    ``frames_read`` how many packets were read before it.
    """

    def __init__(self, path: str | os.PathLike[str], message: str, *, offset: int | None = None,
                 frames_read: int = 0) -> None:
        self.path = os.fspath(path)
        self.offset = offset
        self.frames_read = frames_read
        self.reason = message
        super().__init__(f"{shown_path(self.path)}: {message}")

    @property
    def damage(self) -> str:
        """What is wrong and where, without the file's name: the reason, and its byte offset when the
        reason does not say it (the text of ``capture_damaged`` findings)."""
        known = self.offset is not None and "byte" not in self.reason
        return self.reason + (f" (byte {self.offset})" if known else "")


@dataclass(slots=True)
class RecordBlock:
    """A block of raw records: one buffer and, per record, where its bytes are."""

    buf: bytes | bytearray
    offset: np.ndarray  # int64, start of the packet bytes in buf
    caplen: np.ndarray  # int64
    wirelen: np.ndarray  # int64
    ts_ns: np.ndarray  # int64, nanoseconds since the epoch
    linktype: np.ndarray  # int32
    first: int  # frame number of the first record
    file_pos: int  # bytes of the file consumed after this block
    #: float64 seconds, computed as the per-packet reader always has (``sec + frac / units``),
    #: so that both decoders print the same times
    ts: np.ndarray | None = None
    interface: np.ndarray | None = None  # int32 pcapng interface id (None: all 0)
    #: where ``buf`` starts in the file, when ``buf`` holds the file's bytes as they are there (a block
    #: a worker process read again by offset): a process with the file mapped can see them unsent
    from_file: int | None = None
    #: int8 per record: the decimal places of its time as tshark shows them (:func:`time_digits`; None: all 6)
    digits: np.ndarray | None = None
    #: int8 per record: the FCS length the capture says its frames keep (a pcap header's FCS bits, a pcapng
    #: interface's ``if_fcslen``; -1: it does not say; None: -1 for all), :func:`~rdmalab.wire.net.ethernet_trailer`'s ``fcs_len``
    fcs_len: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.offset)

    def time_digits(self) -> np.ndarray:
        return self.digits if self.digits is not None else np.full(len(self.offset), 6, dtype=np.int8)

    def seconds(self) -> np.ndarray:
        return self.ts if self.ts is not None else self.ts_ns / 1e9

    def interfaces(self) -> np.ndarray:
        return self.interface if self.interface is not None else np.zeros(len(self.offset), dtype=np.int32)

    def fcs_lens(self) -> np.ndarray:
        return self.fcs_len if self.fcs_len is not None else np.full(len(self.offset), -1, dtype=np.int8)


class StreamReader:
    """A capture arriving through a pipe, FIFO or standard input, read as it arrives.

    :meth:`read` and :meth:`readinto` wait for the first byte, then take whatever else has already
    arrived (up to what was asked), and return; only the end of the stream returns nothing.  The
    source is an unbuffered file (its reads return what the pipe holds), or a gzip stream over one
    (its ``read1``).  ``prefix`` holds bytes already read from the source, handed out first."""

    def __init__(self, source: IO[bytes] | gzip.GzipFile, prefix: bytes = b"", *, fd: int | None = None) -> None:
        self._src = source
        read1: Callable[[int], bytes] | None = getattr(source, "read1", None) if fd is None else None
        self._read: Callable[[int], bytes] = read1 if read1 is not None else source.read
        self._prefix = prefix
        self._fd = fd  # for a raw pipe: what else has arrived is taken without waiting
        self._eof = False
        #: given every byte read, in order (a :class:`FrameMeta` of this stream: :data:`_TAPS`)
        self.tap: Callable[[bytes], None] | None = None

    def read(self, n: int = STREAM_BLOCK) -> bytes:
        data = self._take(n)
        if self.tap is not None and data:
            self.tap(data)
        return data

    def _take(self, n: int) -> bytes:
        if self._prefix:
            out, self._prefix = self._prefix[:n], self._prefix[n:]
            return out
        if self._eof or n <= 0:
            return b""
        first: bytes = self._read(n)
        if not first:
            self._eof = True
            return b""
        if self._fd is None or len(first) >= n:
            return first
        parts = [first]
        got = len(first)
        while got < n and select.select([self._fd], [], [], 0)[0]:
            more = self._read(n - got)
            if not more:
                self._eof = True
                break
            parts.append(more)
            got += len(more)
        return b"".join(parts)

    def readinto(self, into: memoryview | bytearray) -> int:
        data = self.read(len(into))
        into[:len(data)] = data
        return len(data)

    def close(self) -> None:
        self._src.close()

    def __enter__(self) -> StreamReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_full(f: IO[bytes] | StreamReader | _Tap, n: int) -> bytes:
    """``n`` bytes from ``f``, fewer only at its end (a stream's reads may return less)."""
    data = f.read(n)
    if len(data) >= n or not data:
        return data
    parts = [data]
    got = len(data)
    while got < n:
        more = f.read(n - got)
        if not more:
            break
        parts.append(more)
        got += len(more)
    return b"".join(parts)


def _widen_pipe(fd: int) -> None:
    """A pipe of :data:`STREAM_BLOCK` bytes rather than Linux's 64 KiB: when the reader falls behind,
    its blocks grow to that, and what a block costs whatever its size is paid less often.  Not a
    pipe, or not allowed: no change."""
    try:
        if stat.S_ISFIFO(os.fstat(fd).st_mode) and fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ) < STREAM_BLOCK:
            fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, STREAM_BLOCK)
    except (OSError, AttributeError):  # not Linux, or above /proc/sys/fs/pipe-max-size
        pass


class _Gzip(gzip.GzipFile):
    """A gzip-compressed capture whose damage (the stream cut short, a bad CRC or length, bad deflate data)
    is a :class:`CaptureError` naming the file and how much of it was read, as damage in a plain capture is,
    not the gzip module's own exception."""

    def __init__(self, path: str, fileobj: Any = None) -> None:
        super().__init__(filename=None if fileobj is not None else path, mode="rb", fileobj=fileobj)
        self._capture = path

    def _damaged(self, err: Exception) -> CaptureError:
        done = self._buffer.raw._pos if hasattr(self._buffer, "raw") else 0  # type: ignore[attr-defined]
        what = ("the gzip stream ends before its end-of-stream marker" if isinstance(err, EOFError)
                else f"the gzip stream is damaged ({err})")
        return CaptureError(self._capture, f"{what}, after {done} decompressed bytes", offset=done)

    @contextlib.contextmanager
    def _told(self) -> Iterator[None]:
        try:
            yield
        except (EOFError, gzip.BadGzipFile, zlib.error) as err:
            raise self._damaged(err) from None

    def read(self, size: int | None = -1) -> bytes:
        with self._told():
            return super().read(size)

    def read1(self, size: int = -1) -> bytes:
        with self._told():
            return super().read1(size)

    def readinto(self, b: Any) -> int:
        with self._told():
            return super().readinto(b)

    def peek(self, n: int) -> bytes:
        with self._told():
            return super().peek(n)


def _open_stream(p: str) -> StreamReader:
    """Standard input or a FIFO/pipe/device, unbuffered, through gzip when it is compressed."""
    if p == STDIN:
        try:
            raw: IO[bytes] = open(sys.stdin.fileno(), "rb", buffering=0, closefd=False)  # noqa: SIM115
        except (AttributeError, OSError, ValueError):
            raise CaptureError(p, "cannot be read (there is no standard input to read)") from None
    else:
        try:
            raw = open(p, "rb", buffering=0)  # noqa: SIM115 - closed by the caller
        except PermissionError:
            raise CaptureError(p, "permission denied") from None
        except OSError as err:
            raise CaptureError(p, f"cannot be opened ({err.strerror or err})") from None
    _widen_pipe(raw.fileno())
    plain = StreamReader(raw, fd=raw.fileno())
    head = read_full(plain, 2)
    if head != b"\x1f\x8b":
        out = StreamReader(raw, head, fd=raw.fileno())
    else:
        inner: Any = StreamReader(raw, head, fd=raw.fileno())  # GzipFile reads it through read(n)
        out = StreamReader(_Gzip(p, fileobj=inner))
    out.tap = _TAPS.pop(p, None)
    return out


#: the taps waiting for a stream to be opened (its path -> what is given every byte read from it, in
#: order): how a :class:`FrameMeta` reads a pipe's blocks "a second time"
_TAPS: dict[str, Callable[[bytes], None]] = {}


class _Tap:
    """A stream's bytes read by its reader and not yet by a :class:`FrameMeta` of it, as a file to read.
    The FrameMeta asks for a frame only once the reader has decoded it, so the bytes it reads are
    here; those both have read are dropped (memory holds about what the reader reads ahead).  Closed,
    it keeps nothing more (a pcap stream: the FrameMeta has nothing to read)."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._pos = 0
        self._closed = False

    def feed(self, data: bytes) -> None:
        if not self._closed:
            self._buf += data

    def read(self, n: int) -> bytes:
        out = bytes(self._buf[self._pos:self._pos + n])
        self._pos += len(out)
        if self._pos >= STREAM_BLOCK and 2 * self._pos >= len(self._buf):
            del self._buf[:self._pos]
            self._pos = 0
        return out

    def close(self) -> None:
        self._closed = True
        self._buf = bytearray()
        self._pos = 0


def open_capture(path: str | os.PathLike[str]) -> IO[bytes]:
    """The file, or its decompressed stream when it is gzip-compressed (as tshark reads them).

    ``-`` and paths that are not regular files are streams (:func:`is_stream`): a
    :class:`StreamReader`, whose reads return what has arrived."""
    p = os.fspath(path)
    if is_stream(p):
        return _open_stream(p)  # type: ignore[return-value]
    try:
        f: IO[bytes] = open(p, "rb")  # noqa: SIM115 - closed by the caller
    except FileNotFoundError:
        raise CaptureError(p, "no such file") from None
    except IsADirectoryError:
        raise CaptureError(p, "is a directory, not a capture file") from None
    except PermissionError:
        raise CaptureError(p, "permission denied") from None
    except OSError as err:
        raise CaptureError(p, f"cannot be opened ({err.strerror or err})") from None
    if f.read(2) == b"\x1f\x8b":
        f.close()
        return _Gzip(p)  # type: ignore[return-value]
    f.seek(0)
    return f


def is_pcapng_file(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a file (not a stream; plain or gzip) that begins with a pcapng section header."""
    if is_stream(path):
        return False
    try:
        with open_capture(path) as f:
            return read_full(f, 4) == _PCAPNG_SHB
    except (CaptureError, OSError, EOFError):
        return False


def spool(path: str | os.PathLike[str], into: IO[bytes]) -> int:
    """Copy a capture (a stream: ``-``, a FIFO; decompressed if gzip) into the binary file ``into``,
    a block at a time, for what reads a capture more than once (``rdmalab analyze -r -``); returns
    the bytes copied.  Memory holds one block; the disk holds the capture."""
    n = 0
    with open_capture(path) as f:
        while chunk := f.read(STREAM_BLOCK):
            into.write(chunk)
            n += len(chunk)
    into.flush()
    return n


def record_blocks(path: str | os.PathLike[str], block_bytes: int = 16 << 20) -> Iterator[RecordBlock]:
    """The records of a pcap/pcapng file (plain or gzip) in blocks of about ``block_bytes``."""
    p = os.fspath(path)
    if is_stream(p):
        block_bytes = min(block_bytes, STREAM_BLOCK)
    with open_capture(p) as f:
        head = read_full(f, 24)
        if len(head) < 4:
            raise CaptureError(p, "is empty, not a pcap or pcapng file" if not head else
                               f"is only {len(head)} bytes long, too short for a pcap or pcapng file")
        if head[:4] == _PCAPNG_SHB:
            yield from _pcapng_blocks(p, f, head, block_bytes)
            return
        magic = head[:4]
        if magic not in PCAP_MAGICS:
            raise CaptureError(p, f"is not a pcap or pcapng file (it starts with bytes {head[:4].hex(' ')}; a pcap "
                                  "file starts with a1 b2 c3 d4 or d4 c3 b2 a1, a pcapng file with 0a 0d 0d 0a)")
        if len(head) < 24:
            raise CaptureError(p, f"ends inside the 24-byte pcap file header (after {len(head)} bytes)", offset=0)
        order, ns_mult = PCAP_MAGICS[magic]
        linktype, fcs_len = pcap_linktype(head, order), pcap_fcs_len(head, order)
        for raw in pcap_raw(p, f, order, block_bytes):
            yield pcap_block(raw.buf, raw.offs, order, ns_mult, linktype, raw.first, raw.file_end, fcs_len)


@dataclass(slots=True)
class RawBlock:
    """A block of pcap records before their headers are read: the buffer and the header offsets."""

    buf: bytes | bytearray
    offs: np.ndarray  # int64, record header offsets in buf
    first: int
    file_start: int  # file offset of buf[0]
    file_end: int  # file offset after the last whole record


def follow_headers(buf: bytes | bytearray, pos: int, last: int, order: str) -> tuple[list[int], int]:
    """Follow pcap record headers through ``buf`` from the record at ``pos``, by their captured
    lengths: the offsets of the records that start at or before ``last`` (the caller makes sure their
    16-byte headers are in ``buf``), and the offset after the last one (where the next would start).
    A record's data may run past ``buf``: the caller checks the last one."""
    offs: list[int] = []
    append = offs.append
    if order == ("<" if sys.byteorder == "little" else ">"):
        # the only per-record Python: q is the offset of a record's caplen field (its header starts 8
        # bytes before), read through four unsigned-int views of the buffer, one per alignment, without
        # a struct call per record
        end = len(buf)
        with memoryview(buf) as mv:
            views = [mv[k:k + (end - k) // 4 * 4].cast("I") for k in range(4)]
            q = pos + 8
            lim = last + 8
            while q <= lim:
                append(q - 8)
                q += 16 + views[q & 3][q >> 2]
            for v in views:
                v.release()
        return offs, q - 8
    unpack = struct.Struct(order + "I").unpack_from
    while pos <= last:
        append(pos)
        pos += 16 + unpack(buf, pos + 8)[0]
    return offs, pos


def pcap_raw(p: str, f: IO[bytes], order: str, block_bytes: int, pos_file: int = 24,
             frame: int = 1) -> Iterator[RawBlock]:
    """Follow the record headers of a pcap file block by block, from the record at byte ``pos_file``
    (where ``f`` stands; the first after the file header unless told), which is frame ``frame``."""
    unpack = struct.Struct(order + "I").unpack_from
    pending = b""
    while True:
        # read straight into the block's buffer, behind the partial record left from the last
        # one (no second copy of the block to join them)
        buf = bytearray(len(pending) + block_bytes)
        buf[:len(pending)] = pending
        with memoryview(buf) as into:
            got = f.readinto(into[len(pending):]) or 0  # type: ignore[attr-defined]
        chunk = got > 0
        if got < block_bytes:
            del buf[len(pending) + got:]
        if not buf:
            return
        end = len(buf)
        offs, pos = follow_headers(buf, 0, end - 16, order)
        if offs and pos > end:  # the last record's data runs past the buffer (only the last can)
            pos = offs.pop()
        offs_np = np.array(offs, dtype=np.int64)
        damaged = pos + 16 <= end and unpack(buf, pos + 8)[0] > MAX_RECORD
        if damaged or (not chunk and pos < end):
            # every whole record before the damage first, then the error
            if offs:
                yield RawBlock(buf, offs_np, frame, pos_file, pos_file + pos)
            n = frame + len(offs)
            at = pos_file + pos
            if damaged:
                raise CaptureError(p, f"is damaged: record {n} at byte {at} claims {unpack(buf, pos + 8)[0]} bytes "
                                      f"(more than {MAX_RECORD})", offset=at, frames_read=n - 1)
            if end - pos < 16:
                raise CaptureError(p, f"is truncated: it ends inside the header of record {n} (byte {at}, "
                                      f"{end - pos} of 16 bytes present)", offset=at, frames_read=n - 1)
            raise CaptureError(p, f"is truncated mid-record: record {n} at byte {at} announces "
                                  f"{unpack(buf, pos + 8)[0]} bytes but the file ends after {end - pos - 16}",
                               offset=at, frames_read=n - 1)
        if offs:
            yield RawBlock(buf, offs_np, frame, pos_file, pos_file + pos)
            frame += len(offs)
        pos_file += pos
        pending = bytes(buf[pos:])
        if not chunk:
            return


def time_digits(units: int) -> int:
    """The decimal places tshark shows of a time counted in ``units`` per second (a pcap file's
    microseconds or nanoseconds, a pcapng interface's ``if_tsresol``): the most of 0, 1, 2, 3, 6 and 9
    whose unit is not finer than the capture's (10^-4 s shows 3, 2^-20 s 6), each time cut there."""
    return max(d for d in (0, 1, 2, 3, 6, 9) if 10 ** d <= max(int(units), 1))


def pcap_block(buf: bytes | bytearray, offs: np.ndarray, order: str, ns_mult: int, linktype: int, frame: int,
               file_pos: int, fcs_len: int = -1) -> RecordBlock:
    """The pcap record headers at ``offs``, read with numpy (ts_sec, ts_frac, caplen, wirelen); the file's
    header says its frames keep an FCS of ``fcs_len`` octets (-1: it does not say, :func:`pcap_fcs_len`)."""
    at = np.asarray(offs, dtype=np.int64)
    bufnp = np.frombuffer(buf, dtype=np.uint8)
    hdr = np.lib.stride_tricks.sliding_window_view(bufnp, 16)[at]
    r = np.ascontiguousarray(hdr).view(order + "u4").astype(np.int64)
    n = len(offs)
    # seconds as the per-packet reader computed them: sec + frac / (1e6 or 1e9), in float64
    ts = r[:, 0].astype(np.float64) + r[:, 1].astype(np.float64) / (1e6 if ns_mult == 1000 else 1e9)
    return RecordBlock(buf, at + 16, r[:, 2], r[:, 3], r[:, 0] * 1_000_000_000 + r[:, 1] * ns_mult,
                       np.full(n, linktype, dtype=np.int32), frame, file_pos, ts,
                       digits=np.full(n, 9 if ns_mult == 1 else 6, dtype=np.int8),
                       fcs_len=None if fcs_len < 0 else np.full(n, fcs_len, dtype=np.int8))


class _Ifaces:
    """The interfaces of the current section: link type, timestamp units per second, offset in
    seconds, FCS length (-1: not said), as lists (the block-by-block rules) and as arrays (the runs)."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, int, int, int]] = []
        self._arrays: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    def clear(self) -> None:
        self.rows = []
        self._arrays = None

    def append(self, row: tuple[int, int, int, int]) -> None:
        self.rows.append(row)
        self._arrays = None

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if self._arrays is None:
            self._arrays = (np.array([r[0] for r in self.rows], dtype=np.int32),
                            np.array([r[1] for r in self.rows], dtype=object),
                            np.array([r[2] for r in self.rows], dtype=np.int64))
        return self._arrays

    def digits(self) -> np.ndarray:
        """Each interface's :func:`time_digits` (int8), from its units."""
        return np.array([time_digits(r[1]) for r in self.rows], dtype=np.int8)

    def fcs(self) -> np.ndarray | None:
        """Each interface's FCS length (int8; -1: not said), or None when no interface says one."""
        if all(r[3] < 0 for r in self.rows):
            return None
        return np.array([r[3] for r in self.rows], dtype=np.int8)


#: the nanoseconds an int64 holds (years 1677 to 2262): a pcapng timestamp outside them (64 bits
#: of units: a damaged block, mostly) is held as the nearest; its float seconds stay as read
NS_MIN, NS_MAX = -(1 << 63), (1 << 63) - 1


def pcap_linktype(head: bytes, order: str) -> int:
    """The link type of a pcap file from its 24-byte header: the low 16 bits of its last word
    (pcap-savefile(5): LT_LINKTYPE; the upper bits may say an FCS length, bits 16-25 are reserved
    and ignored by readers)."""
    return int(struct.unpack_from(order + "I", head, 20)[0]) & 0xFFFF


def pcap_fcs_len(head: bytes, order: str) -> int:
    """The FCS length, in octets, a pcap file's header says its frames keep, or -1 when it does not say
    (pcap-savefile(5): bit 26 of the link type word, the F bit, says bits 28-31 hold it in 16-bit words)."""
    word = int(struct.unpack_from(order + "I", head, 20)[0])
    return (word >> 28) * 2 if word & 0x04000000 else -1


def epoch_ns(ts: float) -> int:
    """Nanoseconds since the epoch of a time in float seconds: a time in whole microseconds stays
    exact (no float noise), finer ones are rounded to the nanosecond."""
    us = round(ts * 1e6)
    if abs(ts * 1e6 - us) < 0.01:
        return us * 1000
    return round(ts * 1e9)


def seconds_ns(secs: float) -> int:
    """Float seconds as integer nanoseconds, held within what an int64 holds (:data:`NS_MIN` ..
    :data:`NS_MAX`: a time read from a damaged timestamp may be past them)."""
    return min(max(round(secs * 1e9), NS_MIN), NS_MAX)


def record_ns(ts: float, ns: int) -> int:
    """A record's time in nanoseconds from its float seconds ``ts`` and its ``ts_ns``: ``ns``,
    exact, where an int64 holds the time, else (past year 2262) as the float has it."""
    return ns if NS_MIN < ns < NS_MAX else epoch_ns(ts)


def _times(t: np.ndarray, iface: np.ndarray, ifaces: _Ifaces) -> tuple[np.ndarray, np.ndarray]:
    """Nanoseconds (``tsoff * 1e9 + t * 1e9 // units``, exact where an int64 holds them, else the
    nearest it holds: :data:`NS_MAX`) and float seconds (``tsoff + t / float(units)``, as the
    Python walker computes them) of timestamps ``t`` (uint64) on interfaces ``iface``."""
    _lt, units_of, off_of = ifaces.arrays()
    n = len(t)
    ns = np.zeros(n, dtype=np.int64)
    secs = np.zeros(n, dtype=np.float64)
    for k in np.flatnonzero(np.bincount(iface)).tolist():  # the interfaces present (np.unique loads numpy.ma)
        sel = iface == k
        units = int(units_of[k])
        off = int(off_of[k])
        tk = t[sel]
        secs[sel] = off + tk.astype(np.float64) / float(units)
        big = bool((tk >= np.uint64(1 << 62)).any())
        if not big and units <= 1_000_000_000 and 1_000_000_000 % units == 0 and \
                int(tk.max()) * (1_000_000_000 // units) < (1 << 62) and abs(off) < (1 << 31):
            ns[sel] = off * 1_000_000_000 + tk.astype(np.int64) * (1_000_000_000 // units)
        elif not big and 1_000_000_000 < units < (1 << 62) and units % 1_000_000_000 == 0 and abs(off) < (1 << 31):
            ns[sel] = off * 1_000_000_000 + tk.astype(np.int64) // (units // 1_000_000_000)
        else:  # units that do not divide (powers of two), or huge times: Python's integers
            ns[sel] = np.array([min(max(off * 1_000_000_000 + (v * 1_000_000_000) // units, NS_MIN), NS_MAX)
                                for v in tk.tolist()], dtype=np.int64)
    return ns, secs


def _interface(buf: bytes | bytearray, pos: int, blen: int, order: str) -> tuple[int, int, int, int]:
    """The interface description block at ``pos`` (``blen`` bytes, at least 20): its link type,
    timestamp units per second (``if_tsresol``, default microseconds), offset in seconds
    (``if_tsoffset``) and the FCS length its frames keep (``if_fcslen``, option 13, in octets; -1
    without it)."""
    lt = struct.unpack_from(order + "H", buf, pos + 8)[0]
    units, tsoff = 1_000_000, 0
    opts = _options(buf, pos + 16, pos + blen - 4, order)
    for v in opts.get(9, []):
        if len(v) >= 1:
            units = (2 if v[0] & 0x80 else 10) ** (v[0] & 0x7F)
    for v in opts.get(14, []):
        if len(v) >= 8:
            tsoff = struct.unpack_from(order + "q", v)[0]
    fcs = -1
    for v in opts.get(13, []):
        if len(v) >= 1:
            fcs = v[0]
    return lt, units, tsoff, fcs


class _EpbCandidates:
    """Where a buffer's runs of Enhanced Packet Blocks are, found with numpy: every 32-bit word that
    holds the EPB type and is followed by a length a block may have (at least 32, a multiple of 4, at
    most :data:`MAX_RECORD`, inside the buffer) is a candidate; a run is the chain of candidates each
    of which starts where the one before it ends.  A candidate inside another block's data (its octets
    happen to look like an EPB's) is not on the chain and is stepped over: the run is the one a walker
    that follows the lengths block by block finds."""

    def __init__(self, words: np.ndarray, end: int) -> None:
        idx = np.flatnonzero(words[:max(len(words) - 1, 0)] == PCAPNG_EPB)
        blen = words[idx + 1].astype(np.int64)
        ok = (blen >= 32) & (blen % 4 == 0) & (blen <= MAX_RECORD) & ((idx << 2) + blen <= end)
        self.at: np.ndarray = idx[ok].astype(np.int64)  # word index of each candidate, ascending
        self.nxt: np.ndarray = self.at + (blen[ok] >> 2)  # where the block after it would start
        # the candidates i after which candidate i+1 does not start where candidate i ends
        self.breaks: np.ndarray = np.flatnonzero(self.at[1:] != self.nxt[:-1])

    def chain(self, word: int) -> np.ndarray:
        """The word indexes of the run of EPBs that starts at word ``word`` (empty when the block
        there is not a whole EPB with a length it may have)."""
        at, nxt, pieces = self.at, self.nxt, []
        i = int(np.searchsorted(at, word))
        while i < len(at) and int(at[i]) == word:
            b = int(np.searchsorted(self.breaks, i))  # the first break at or after i ends this stretch
            k = int(self.breaks[b]) if b < len(self.breaks) else len(at) - 1
            pieces.append(at[i:k + 1])
            word = int(nxt[k])  # where the stretch's last block ends: a candidate there goes on with the run
            i = int(np.searchsorted(at, word))
        if not pieces:
            return at[:0]
        return pieces[0] if len(pieces) == 1 else np.concatenate(pieces)


def _pcapng_blocks(path: str, f: IO[bytes], head: bytes, block_bytes: int, *, order: str = "<",
                   interfaces: list[tuple[int, int, int, int]] | None = None, frame: int = 1,
                   pos_file: int = 0) -> Iterator[RecordBlock]:
    """The records of a pcapng file whose first bytes ``head`` were read from ``f``, in blocks of
    about ``block_bytes``, walked in bulk (see the module's docstring, "pcapng in bulk").

    From the start of the file unless told: ``head`` then starts at byte ``pos_file``, a block that
    is frame ``frame`` or comes before it, in a section of byte order ``order`` whose interfaces
    so far are ``interfaces`` (:func:`pcapng_section`'s rows)."""
    pending = head
    ifaces = _Ifaces()
    for row in interfaces or ():
        ifaces.append(row)
    while True:
        chunk = f.read(block_bytes)
        buf = pending + chunk
        end = len(buf)
        pos = 0
        parts: list[tuple[np.ndarray, ...]] = []  # (offs, caps, wires, ts_ns, secs, lts, ifs, digits) of runs
        count = 0
        err: CaptureError | None = None
        words = np.frombuffer(buf, dtype=np.dtype(_NATIVE + "u4"), count=end // 4)
        epbs: _EpbCandidates | None = None  # (made when the buffer's first run starts)
        with memoryview(buf) as mv, mv[:end // 4 * 4].cast("I") as w32:
            while pos + 8 <= end:
                if order == _NATIVE and w32[pos >> 2] == PCAPNG_EPB:
                    # a run of Enhanced Packet Blocks: follow the lengths, then read them with numpy
                    if epbs is None:
                        epbs = _EpbCandidates(words, end)
                    at = epbs.chain(pos >> 2)
                    if len(at):
                        blen_a = words[at + 1].astype(np.int64)
                        iface = words[at + 2].astype(np.int64)
                        cap = words[at + 5].astype(np.int64)
                        trail = words[at + (blen_a >> 2) - 1].astype(np.int64)  # (the block's length again, at its end)
                        bad = (28 + cap > blen_a - 4) | (iface >= len(ifaces.rows)) | (trail != blen_a)
                        if bad.any():  # the block-by-block rules say what is wrong with it
                            k = int(np.argmax(bad))
                            at, blen_a, iface, cap = at[:k], blen_a[:k], iface[:k], cap[:k]
                        if len(at):
                            t = (words[at + 3].astype(np.uint64) << np.uint64(32)) | words[at + 4].astype(np.uint64)
                            ns, secs = _times(t, iface, ifaces)
                            lts = ifaces.arrays()[0][iface]
                            fcs_of = ifaces.fcs()
                            parts.append(((at << 2) + 28, cap, words[at + 6].astype(np.int64), ns, secs, lts,
                                          iface.astype(np.int32), ifaces.digits()[iface],
                                          np.full(len(at), -1, dtype=np.int8) if fcs_of is None else fcs_of[iface]))
                            count += len(at)
                            pos = int((at[-1] << 2) + blen_a[-1])
                            continue
                # any other block, or one that fails a run's checks: one block by the block-by-block rules
                at_file = pos_file + pos
                if buf[pos:pos + 4] == _PCAPNG_SHB:
                    if pos + 12 > end:
                        break
                    bom = buf[pos + 8:pos + 12]
                    if bom not in (_BOM_LE, _BOM_BE):
                        err = CaptureError(path, f"has a pcapng section header at byte {at_file} with an unknown "
                                                 f"byte-order magic {bom.hex(' ')}", offset=at_file,
                                           frames_read=frame - 1 + count)
                        break
                    order = "<" if bom == _BOM_LE else ">"
                btype, blen = struct.unpack_from(order + "II", buf, pos)
                name = _BLOCK_NAMES.get(btype, f"type {btype}")
                if blen < 12 or blen % 4 or blen > MAX_RECORD or (btype == PCAPNG_SHB and blen < 28):
                    err = CaptureError(path, f"is damaged: the pcapng {name} block at byte {at_file} has length "
                                             f"{blen} (a block is at least 12 bytes, a section header 28, a multiple "
                                             f"of 4 and at most {MAX_RECORD})", offset=at_file,
                                       frames_read=frame - 1 + count)
                    break
                if pos + blen > end:
                    break
                trail = struct.unpack_from(order + "I", buf, pos + blen - 4)[0]
                if trail != blen:  # (a block ends with its length again: pcapng 3.1; tshark refuses a file so)
                    err = CaptureError(path, f"is damaged: the pcapng {name} block at byte {at_file} has length "
                                             f"{blen} at its start and {trail} at its end", offset=at_file,
                                       frames_read=frame - 1 + count)
                    break
                if btype == PCAPNG_SHB:
                    ifaces.clear()
                elif btype == PCAPNG_IDB:
                    if blen < 20:
                        err = CaptureError(path, f"is damaged: the pcapng interface description block at byte "
                                                 f"{at_file} has length {blen} (at least 20)", offset=at_file,
                                           frames_read=frame - 1 + count)
                        break
                    ifaces.append(_interface(buf, pos, blen, order))
                elif btype in (PCAPNG_EPB, 2, 3):
                    frame_no = frame + count
                    if btype == 3:
                        iface_i, tv = 0, None
                        wire = struct.unpack_from(order + "I", buf, pos + 8)[0]
                        cap_i = min(wire, blen - 16)
                        data = pos + 12
                    else:
                        if blen < 32:
                            err = CaptureError(path, f"is damaged: the pcapng {name} block of frame {frame_no} at "
                                                     f"byte {at_file} has length {blen} (at least 32)", offset=at_file,
                                               frames_read=frame - 1 + count)
                            break
                        iface_i, hi, lo, cap_i, wire = struct.unpack_from(order + "IIIII", buf, pos + 8)
                        if btype == 2:  # a 16-bit interface id, then a 16-bit drops count
                            iface_i = iface_i >> 16 if order == ">" else iface_i & 0xFFFF
                        tv = (hi << 32) | lo
                        data = pos + 28
                        if data + cap_i > pos + blen - 4:
                            err = CaptureError(path, f"is damaged: the pcapng {name} block of frame {frame_no} at "
                                                     f"byte {at_file} claims {cap_i} captured bytes but holds only "
                                                     f"{blen - 32}", offset=at_file, frames_read=frame - 1 + count)
                            break
                    if iface_i >= len(ifaces.rows):
                        err = CaptureError(path, f"is damaged: the packet block of frame {frame_no} at byte {at_file} "
                                                 f"refers to interface {iface_i}, but only {len(ifaces.rows)} "
                                                 "interface(s) were described before it", offset=at_file,
                                           frames_read=frame - 1 + count)
                        break
                    lt, units, tsoff, fcs1 = ifaces.rows[iface_i]
                    if tv is None:  # a simple packet block has no time
                        ns1, s1 = 0, 0.0
                    else:
                        ns1, s1 = (tsoff * 1_000_000_000) + (tv * 1_000_000_000) // units, tsoff + tv / float(units)
                    parts.append((np.array([data], dtype=np.int64), np.array([cap_i], dtype=np.int64),
                                  np.array([wire], dtype=np.int64), np.array([ns1], dtype=np.int64),
                                  np.array([s1], dtype=np.float64), np.array([lt], dtype=np.int32),
                                  np.array([iface_i], dtype=np.int32), np.array([time_digits(units)], dtype=np.int8),
                                  np.array([fcs1], dtype=np.int8)))
                    count += 1
                pos += blen
        del words
        if count:
            cols = [np.concatenate([p[i] for p in parts]) if len(parts) > 1 else parts[0][i] for i in range(9)]
            offs, caps, wires, tss, secs_a, lts_a, ifs, digs, fcss = cols
            yield RecordBlock(buf, offs.astype(np.int64), caps.astype(np.int64), wires.astype(np.int64),
                              tss.astype(np.int64), lts_a.astype(np.int32), frame, pos_file + pos,
                              secs_a.astype(np.float64), ifs.astype(np.int32), digits=digs.astype(np.int8),
                              fcs_len=fcss.astype(np.int8) if (fcss >= 0).any() else None)
            frame += count
        if err is not None:
            raise err
        pos_file += pos
        pending = buf[pos:]
        if not chunk:
            if pending:
                if len(pending) >= 8:
                    btype, blen = struct.unpack_from(order + "II", pending, 0)
                    raise CaptureError(path, f"is truncated mid-record: the pcapng "
                                             f"{_BLOCK_NAMES.get(btype, f'type {btype}')} block at byte {pos_file} "
                                             f"(after frame {frame - 1}) announces {blen} bytes but the file ends "
                                             f"after {len(pending)}", offset=pos_file, frames_read=frame - 1)
                raise CaptureError(path, f"is truncated: it ends inside a pcapng block header at byte {pos_file} "
                                         f"(after frame {frame - 1}, {len(pending)} of 8 bytes present)",
                                   offset=pos_file, frames_read=frame - 1)
            return


#: pcapng block types that hold a packet: obsolete packet, simple packet, enhanced packet
PCAPNG_PACKET_TYPES = (2, 3, PCAPNG_EPB)


@dataclass(slots=True, frozen=True)
class PcapngSection:
    """The start of a pcapng file as the sequential reader leaves it at its first packet block:
    the section's byte order, its interfaces (link type, timestamp units per second, offset in
    seconds), and ``first``, the byte offset of the first block that holds a packet or starts
    another section (the file's size when there is none)."""

    order: str
    interfaces: list[tuple[int, int, int, int]]
    first: int


def pcapng_section(f: IO[bytes], size: int) -> PcapngSection | None:
    """The section header and interface descriptions at the start of the pcapng file ``f`` (of
    ``size`` bytes), read in order up to its first packet block (:class:`PcapngSection`); blocks of
    other types before it are skipped, as the reader skips them.  None when these blocks are not
    what the reader would take without a word (a damaged or truncated block, an unknown byte
    order): the reader, from the start, says what is wrong."""
    f.seek(0)
    shb = read_full(f, 28)
    if len(shb) < 28 or shb[:4] != _PCAPNG_SHB or shb[8:12] not in (_BOM_LE, _BOM_BE):
        return None
    order = "<" if shb[8:12] == _BOM_LE else ">"
    pos = struct.unpack_from(order + "I", shb, 4)[0]
    if pos < 28 or pos % 4 or pos > MAX_RECORD or pos > size:
        return None
    rows: list[tuple[int, int, int, int]] = []
    while pos + 8 <= size:
        f.seek(pos)
        hdr = read_full(f, 8)
        btype, blen = struct.unpack(order + "II", hdr)
        if btype in PCAPNG_PACKET_TYPES or hdr[:4] == _PCAPNG_SHB:
            return PcapngSection(order, rows, pos)
        if blen < 12 or blen % 4 or blen > MAX_RECORD or pos + blen > size:
            return None
        if btype == PCAPNG_IDB:
            if blen < 20:
                return None
            rows.append(_interface(hdr + read_full(f, blen - 8), 0, blen, order))
        pos += blen
    return PcapngSection(order, rows, pos) if pos == size else None


def pcapng_block(buf: bytes | bytearray, offs: np.ndarray, order: str, interfaces: list[tuple[int, int, int, int]],
                 frame: int, file_pos: int) -> RecordBlock:
    """The packets of the pcapng packet blocks at ``offs`` of ``buf`` (each whole and sane as the
    reader checks them: offsets multiples of 4 from the buffer's start), on ``interfaces``, read
    with numpy: the records, times and interfaces the reader gives them (:func:`_times`; a simple
    packet block has no time, 0, and is on interface 0)."""
    at = np.asarray(offs, dtype=np.int64)
    words = np.frombuffer(buf, dtype=np.dtype(order + "u4"), count=len(buf) // 4)
    w = at >> 2
    btype = words[w].astype(np.int64)
    blen = words[w + 1].astype(np.int64)
    simple = btype == 3
    iface = np.where(simple, 0, words[w + 2].astype(np.int64))
    # an obsolete packet block's interface id is its first 16 bits (then a 16-bit drops count)
    iface = np.where(btype == 2, iface >> 16 if order == ">" else iface & 0xFFFF, iface)
    wire = np.where(simple, words[w + 2], words[np.minimum(w + 6, len(words) - 1)]).astype(np.int64)
    cap = np.where(simple, np.minimum(wire, blen - 16), words[np.minimum(w + 5, len(words) - 1)].astype(np.int64))
    ifaces = _Ifaces()
    for row in interfaces:
        ifaces.append(row)
    n = len(at)
    ns = np.zeros(n, dtype=np.int64)
    secs = np.zeros(n, dtype=np.float64)
    timed = ~simple
    if timed.any():
        t = (words[w[timed] + 3].astype(np.uint64) << np.uint64(32)) | words[w[timed] + 4].astype(np.uint64)
        ns[timed], secs[timed] = _times(t, iface[timed], ifaces)
    lts = ifaces.arrays()[0][iface] if n else np.zeros(0, dtype=np.int32)
    fcs_of = ifaces.fcs()
    return RecordBlock(buf, at + np.where(simple, 12, 28), cap, wire, ns, lts.astype(np.int32), frame, file_pos,
                       secs, iface.astype(np.int32), digits=ifaces.digits()[iface] if n else np.zeros(0, dtype=np.int8),
                       fcs_len=fcs_of[iface] if fcs_of is not None and n else None)


#: the fields of a pcapng file's blocks around its packets, as Wireshark names them: the section's number
#: (from 1), the interface's number in its section (from 0, as the packet block names it), its ``if_name``
#: (``unknown`` without one) and ``if_description``, and the packet's comments (``opt_comment``).  (tshark
#: 4.0 names the interface of a later section by the first section's interface of the same number.)
FRAME_META_FIELDS = ("frame.section_number", "frame.interface_id", "frame.interface_name",
                     "frame.interface_description", "frame.comment")


_EPB_FIELDS_LE, _EPB_FIELDS_BE = struct.Struct("<I8xI"), struct.Struct(">I8xI")


class FrameMeta:
    """:data:`FRAME_META_FIELDS` of the packets of a pcapng file, in file order: :meth:`add` puts a
    frame's into its field dictionary (a pcap file has none of them, as in tshark, but for ERF records:
    each capture port an interface, numbered as first seen, named as tshark names them).  The file's blocks
    are read a second time, beside the reader that decodes them, a block at a time (bounded memory);
    a block the reader would refuse ends them (the reader says what is wrong)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._f: IO[bytes] | _Tap
        p = os.fspath(path)
        if is_stream(p):  # (made before the stream is opened: its reader gives this its bytes too)
            self._f = tap = _Tap()
            _TAPS[p] = tap.feed
            weakref.finalize(self, _TAPS.pop, p, None)
        else:
            self._f = open_capture(p)
        weakref.finalize(self, self._f.close)  # (closed when collected, or at exit, if not before)
        self._packets: Generator[dict[str, Any], None, None] = self._walk()
        self._frame = 0
        self._got: dict[str, Any] = {}
        self._ports: dict[int, int] = {}  # an ERF record's capture port -> its interface number

    def _walk(self) -> Generator[dict[str, Any], None, None]:
        try:
            yield from self._blocks(self._f)
        finally:  # (the file closed when the packets end, or when this is collected)
            self._f.close()

    def _blocks(self, f: IO[bytes] | _Tap) -> Iterator[dict[str, Any]]:
        first = read_full(f, 4)  # (not read again: a stream cannot seek)
        if first != _PCAPNG_SHB:
            return
        section = 0
        two_le, two_be = struct.Struct("<II").unpack, struct.Struct(">II").unpack
        # an enhanced packet block's interface and captured length (after its 8-octet header)
        epb_le = _EPB_FIELDS_LE.unpack_from
        epb_be = _EPB_FIELDS_BE.unpack_from
        names: list[tuple[str, list[str]]] = []  # (name, description) of every interface so far, in file order
        same: dict[tuple[int, int, int], dict[str, Any]] = {}  # one dict for the frames of an interface without comments
        base, order = 0, "<"
        while True:
            hdr = first + read_full(f, 8 - len(first))
            first = b""
            if len(hdr) < 8:
                return
            if hdr[:4] == _PCAPNG_SHB:
                bom = read_full(f, 4)
                if bom not in (_BOM_LE, _BOM_BE):
                    return
                order = "<" if bom == _BOM_LE else ">"
                blen = struct.unpack_from(order + "I", hdr, 4)[0]
                body = bom + read_full(f, blen - 12) if blen >= 12 else b""
                section += 1
                base = len(names)
                btype = struct.unpack_from(order + "I", hdr)[0]
            else:
                btype, blen = (two_le if order == "<" else two_be)(hdr)
                body = read_full(f, blen - 8) if blen >= 12 else b""
            if blen < 12 or blen % 4 or blen > MAX_RECORD or len(body) != blen - 8:
                return
            if btype == PCAPNG_IDB:
                opts = _options(body, 8, len(body) - 4, order)
                names.append((opts.get(2, [b"unknown"])[0].decode("utf-8", "replace"),
                              [v.decode("utf-8", "replace") for v in opts.get(3, [])][:1]))
            elif btype in PCAPNG_PACKET_TYPES:
                comments: list[str] = []
                if btype == 3:
                    local = 0
                else:
                    if btype == PCAPNG_EPB and blen >= 32:  # (the commonest block: its interface and length at once)
                        local, cap = (epb_le if order == "<" else epb_be)(body)
                    else:
                        local = struct.unpack_from(order + ("I" if btype == PCAPNG_EPB else "H"), body, 0)[0]
                        cap = struct.unpack_from(order + "I", body, 12)[0]
                    at = 20 + (cap + 3) // 4 * 4
                    if len(body) - 4 > at:  # (options after the packet's data: its comments, if any)
                        comments = [v.decode("utf-8", "replace") for v in _options(body, at, len(body) - 4, order).get(1, [])]
                iface = base + local
                got = same.get((section, local, iface))
                if got is None or comments:
                    got = self._fields(section, local, iface, names, comments)
                    if not comments and iface < len(names):
                        same[(section, local, iface)] = got
                yield got

    @staticmethod
    def _fields(section: int, local: int, iface: int, names: list[tuple[str, list[str]]],
                comments: list[str]) -> dict[str, Any]:
        """A packet's fields: its section, its interface's number in it (``local``; ``iface`` in the file),
        name and description (``names``), and its comments."""
        got: dict[str, Any] = {"frame.section_number": section, "frame.interface_id": local}
        if iface < len(names):
            got["frame.interface_name"] = names[iface][0]
            if names[iface][1]:
                got["frame.interface_description"] = names[iface][1][0]
        if comments:
            got["frame.comment"] = comments if len(comments) > 1 else comments[0]
        return got

    def of(self, frame: int, erf_flags: int | None = None) -> dict[str, Any]:
        """Frame number ``frame``'s fields (frames asked for in increasing order, the same one again
        allowed), ``erf_flags`` the flags of its ERF header if it has one (its capture port: bits 0-1).
        The frames of one interface without comments share one dictionary (not to be changed)."""
        while self._frame < frame:
            self._got = next(self._packets, {})
            self._frame += 1
        if erf_flags is None or "frame.interface_id" in self._got:
            return self._got
        port = erf_flags & 3
        name = f"Port {chr(65 + port)} (ERF Interface {port})"
        return {"frame.interface_id": self._ports.setdefault(port, len(self._ports)),
                "frame.interface_name": name, "frame.interface_description": name}

    def add(self, fields: dict[str, Any], frame: int) -> None:
        """Put frame number ``frame``'s fields (the frames asked for in increasing order) into ``fields``."""
        flags = fields.get("erf.flags")
        fields.update(self.of(frame, flags if isinstance(flags, int) else None))

    def close(self) -> None:
        self._packets.close()
        self._f.close()


def _options(buf: bytes | bytearray, at: int, end: int, order: str) -> dict[int, list[bytes]]:
    """The pcapng options (3.5: code -> its values, in order) of a block from ``at`` to ``end`` of ``buf``
    (where its closing length starts), up to opt_endofopt; an option that runs past ``end`` cut there."""
    out: dict[int, list[bytes]] = {}
    while at + 4 <= end:
        code, olen = struct.unpack_from(order + "HH", buf, at)
        if code == 0:
            break
        out.setdefault(code, []).append(bytes(buf[at + 4:min(at + 4 + olen, end)]))  # (one past the end: cut)
        at += 4 + (olen + 3) // 4 * 4
    return out
