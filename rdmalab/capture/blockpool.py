"""Blocks of a plain pcap or pcapng file rendered in worker processes, the results in file order.

The one home of ``rdmalab decode``'s parallel paths (summary lines, ``-T fields``, ``-T json``),
and of the worker pool the capture layer's other parallel paths share (:func:`worker_pool`).
The file is cut into ranges of bytes.  A worker reads its range (``pread``: no capture bytes go
through a pipe), finds the first record in it by the look of the headers and follows the record
headers to the range's end; this process checks each range's first record against where the
records of the range before end (following the headers itself when the guess was wrong), numbers
the frames, and hands the range's records to a worker again to render with the given function.
A pcapng file's records are its packet blocks: this process reads its section header and
interface descriptions first and gives them to the workers; from a range that starts another
section or describes another interface on, this process reads the blocks (the sequential
reader) and the workers render them.
The results come back in file order, at most ``2 * workers`` blocks ahead, through shared memory
when the workers are forked.  A damaged or truncated file yields every block before the damage,
then raises the :class:`~rdmalab.capture.pcapio.CaptureError` the sequential reader raises:
nothing before the damage is lost.
"""

from __future__ import annotations

import contextlib
import gzip
import mmap
import os
import pickle
import struct
import sys
from collections import deque
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from rdmalab.capture.linktypes import COLUMNAR_LINKTYPES, LINKTYPE_ERF
from rdmalab.capture.pcapio import (
    MAX_RECORD,
    PCAP_MAGICS,
    PCAPNG_PACKET_TYPES,
    PcapngSection,
    RawBlock,
    RecordBlock,
    _pcapng_blocks,
    follow_headers,
    is_stream,
    open_capture,
    pcap_block,
    pcap_fcs_len,
    pcap_linktype,
    pcap_raw,
    pcapng_block,
    pcapng_section,
    record_ns,
)
from rdmalab.capture.pcapwriter import PCAPNG_EPB, PCAPNG_IDB, PCAPNG_SHB
from rdmalab.wire.errors import RdmalabError

if TYPE_CHECKING:
    from concurrent.futures import Future

#: files smaller than this are rendered in this process (the workers' start-up would cost more)
PARALLEL_MIN_BYTES = 32 << 20
#: the same for ``-T json``, whose text costs about 15 times more CPU a frame than a summary line (on the mixed capture of benchmarks/bench_decode.py):
#: the workers pay off on smaller files
JSON_PARALLEL_MIN_BYTES = 4 << 20

#: ``render(block, n, t0, prev, *extra)``: the first ``n`` records of ``block``; ``t0`` is the
#: capture's first timestamp and ``prev`` the timestamp of the record before the block (None for
#: the first block), both in seconds as :meth:`rdmalab.capture.pcapio.RecordBlock.seconds` gives them
#: (:func:`blocks_in_workers` with ``exact_times``: nanoseconds, as ``RecordBlock.ts_ns`` has them)
Render = Callable[..., Any]


def plain_pcap(path: str, *, own_times: bool = False) -> bool:
    """Whether ``path`` is an uncompressed pcap file (its blocks can be read again by offset).

    A stream (``-``, a FIFO: :func:`~rdmalab.capture.pcapio.is_stream`) is not: it is not even
    opened here, which would take its first bytes.  Nor is a pcap of ERF records, whose frames'
    times are the records' own (read in order by one process), unless ``own_times``: the caller
    takes each ERF record's own time in its worker (:func:`rdmalab.capture.columnar_decode.erf_ethernet_view`)
    and needs no time of the record before a block (summary lines: times since the first frame)."""
    if is_stream(path):
        return False
    try:
        with open(path, "rb") as f:
            head = f.read(24)
    except OSError:
        return False
    fmt = PCAP_MAGICS.get(head[:4])
    if fmt is None:
        return False
    if len(head) < 24:
        return True  # the readers report the truncated header
    # ERF records carry their own times, which the frames' times and deltas follow
    # (reader.decode_record): such a file is read in order, by one process
    return own_times or pcap_linktype(head, fmt[0]) != LINKTYPE_ERF


def parallel_capture(path: str, *, ethernet: bool = False, own_times: bool = False) -> bool:
    """Whether ``path`` is a capture whose blocks :func:`blocks_in_workers` reads in worker processes:
    a plain pcap file (:func:`plain_pcap`), or an uncompressed pcapng file none of whose interfaces
    described before its first packet is of ERF records (as for pcap: their frames' times are the
    records' own, read in order by one process) or, with ``ethernet``, of another link type than
    Ethernet (``-T fields`` decodes those frames with the per-packet decoder, in order).  A pcapng
    file whose first blocks are damaged is not: the reader, in one process, says what is wrong.
    ``own_times``: ERF records too, their times the caller's (:func:`plain_pcap`)."""
    if plain_pcap(path, own_times=own_times):
        return True
    if is_stream(path):
        return False
    try:
        with open(path, "rb") as f:
            if f.read(4) != _SHB:
                return False
            sect = pcapng_section(f, os.fstat(f.fileno()).st_size)
    except OSError:
        return False
    return sect is not None and all((own_times or lt != LINKTYPE_ERF) and (lt in COLUMNAR_LINKTYPES or not ethernet)
                                    for lt, _units, _off, _fcs in sect.interfaces)


def default_workers() -> int:
    """Worker processes for summary lines and JSON when not told: one a core that is not busy now, at
    most four, at least one.

    Busy now is the kernel's count of tasks that can run at this moment, less this process (the
    fourth field of ``/proc/loadavg``, ``proc(5)``); where there is no such file, the whole part of
    the one-minute load average.  Not the load average alone: it lags by a minute, so a machine
    that has just finished other work (a benchmark's previous command) would look busy.

    This process only checks the workers' ranges, writes, and decodes TCP segments, so it does not
    take a core of its own; past four workers it could not keep them fed.  On a busy machine the
    workers would only compete with each other, and cost more CPU time than one process, so they
    are not started."""
    cores = os.cpu_count() or 1
    return max(1, min(cores - _busy_now(), 4))


def _busy_now() -> int:
    """Cores other tasks keep busy at this moment (see :func:`default_workers`)."""
    try:
        with open(_LOADAVG, encoding="ascii") as f:
            runnable = int(f.read().split()[3].split("/")[0])
        return max(0, runnable - 1)
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.getloadavg()[0])
    except OSError:  # no load average on this system
        return 0


#: where the kernel says how many tasks can run now (``proc(5)``)
_LOADAVG = "/proc/loadavg"


#: The results' way back, when the workers are forked: slots of a shared anonymous mapping made
#: before the fork, ``(mapping, slot size)``.  A worker pickles its result into the slot the task
#: names and returns only the length (a result through the pool's pipe costs this process about
#: 2 ms of CPU a MB: 0.35 s for the 100 MB of a million summary lines).  A larger result goes the
#: usual way.
_SLOTS: tuple[mmap.mmap, int] | None = None


@dataclass(slots=True, frozen=True)
class _InSlot:
    size: int
    buffers: tuple[int, ...] = ()  # the out-of-band buffers after the pickle, their sizes


def _forks() -> bool:
    """Whether worker processes are forked here (they then inherit what this process made before)."""
    import multiprocessing  # lazy: only the parallel paths need it (start-up, memory)

    return "fork" in multiprocessing.get_all_start_methods()


class WorkerLost(RdmalabError):
    """A worker process ended without its result (killed by a signal, out of memory)."""


def run_beside(make: Callable[[], Iterator[Any]]) -> Iterator[Any]:
    """The items of the iterator ``make()`` makes, made in a process forked beside this one now, in
    order (where the system cannot fork: made here, as they are taken).  This process does other work
    meanwhile; the child runs at most a pipe's buffer ahead of what has been taken (a child that would
    read a whole file for a command that stops early reads only a few blocks past it).  The child's
    error is raised here when its place is reached (as :func:`_sendable` makes it), a child that died
    is a :class:`WorkerLost`, and the child is ended when the items are no longer wanted."""
    if not _forks():
        return iter(make())
    import multiprocessing  # lazy: only the parallel paths need it (start-up, memory)

    ctx = multiprocessing.get_context("fork")
    got, put = ctx.Pipe(duplex=False)
    _widen(put)
    child = ctx.Process(target=_beside, args=(make, put), daemon=True)  # (forked: nothing pickled)
    child.start()
    put.close()
    return _taken(got, child)


#: how far (octets) :func:`run_beside`'s child may run ahead: its pipe's buffer, made this large where the
#: system lets it (Linux: F_SETPIPE_SZ, up to /proc/sys/fs/pipe-max-size, 1 MiB by default; else 64 KiB):
#: a block's items for the trees are a few hundred KiB, so the child can make the next block's while this
#: process takes the last one's
BESIDE_AHEAD = 1 << 20


def _widen(conn: Any) -> None:
    """The buffer of a pipe's end ``conn`` made :data:`BESIDE_AHEAD` octets, where the system lets it."""
    try:
        import fcntl  # lazy: not on every system

        fcntl.fcntl(conn.fileno(), fcntl.F_SETPIPE_SZ, BESIDE_AHEAD)
    except (ImportError, AttributeError, OSError):  # (another system, or a smaller limit: as it was)
        pass


def _taken(got: Any, child: Any) -> Iterator[Any]:
    """The items :func:`run_beside`'s child sends, until its end or its error."""
    try:
        while True:
            try:
                kind, value = got.recv()
            except EOFError:
                child.join()
                raise WorkerLost(f"the process beside this one ended without its results "
                                 f"(exit code {child.exitcode})") from None
            if kind == _ITEM:
                yield value
            elif kind == _ERROR:
                raise value
            else:
                return
    finally:
        got.close()
        if child.is_alive():
            child.terminate()
        child.join()


_ITEM, _ERROR, _END = 0, 1, 2


def _beside(make: Callable[[], Iterator[Any]], put: Any) -> None:
    """In the child of :func:`run_beside`: each item sent, then the end or the error."""
    try:
        for item in make():
            put.send((_ITEM, item))
        put.send((_END, None))
    except BrokenPipeError:  # (the parent no longer wants them)
        pass
    except Exception as err:  # noqa: BLE001 - sent, raised in the parent at its place
        put.send((_ERROR, _sendable(err)))
    finally:
        put.close()


@contextlib.contextmanager
def worker_pool(workers: int, initializer: Callable[..., None] | None = None,
                initargs: tuple[Any, ...] = ()) -> Iterator[Any]:
    """A :class:`concurrent.futures.ProcessPoolExecutor` of ``workers`` processes (forked where the
    system can), for the capture layer's parallel paths: ``decode -j``, the parallel column reader,
    ``convert -j``.

    concurrent.futures rather than ``multiprocessing.Pool``: a worker that dies, or a result that
    does not unpickle, breaks the executor with an error instead of leaving the caller waiting.  A
    worker that ended without its result is a :class:`WorkerLost` here.  On the way out the tasks
    not started are cancelled and the running ones finished."""
    import multiprocessing  # lazy: only the parallel paths need them (start-up, memory)
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    ctx = multiprocessing.get_context("fork" if _forks() else None)
    pool = ProcessPoolExecutor(workers, mp_context=ctx, initializer=initializer, initargs=initargs)
    try:
        yield pool
    except BrokenProcessPool as err:
        raise WorkerLost("a worker process ended without its result (killed, or out of memory?); "
                         "with -j 1 the work is done in this process") from err
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _slots(shm: mmap.mmap | None, slot_bytes: int) -> None:
    """In a worker process, as it starts: where its results go (:data:`_SLOTS`)."""
    global _SLOTS
    _SLOTS = (shm, slot_bytes) if shm is not None else None


def _sendable(err: BaseException) -> BaseException:
    """``err``, or when it would not unpickle in this process's parent, an error with its type's name
    and message that will (the parent would otherwise only learn that a result failed to unpickle)."""
    try:
        pickle.loads(pickle.dumps(err))
    except Exception:  # noqa: BLE001 - any failure to make the round trip
        return RuntimeError(f"{type(err).__name__}: {err}")
    return err


def _in_worker(fn: Callable[[tuple[Any, ...]], Any], task: tuple[Any, ...]) -> Any:
    """In a worker process: ``fn(task)``, its error one that unpickles in this process's parent."""
    try:
        return fn(task)
    except Exception as err:
        raise _sendable(err) from None


def _run(task: tuple[Any, ...]) -> Any:
    """In a worker process: read one block of pcap records again and render it."""
    slot, render, path, start, end, offs, first, order, ns_mult, linktype, fcs_len, n, t0, prev, extra = task
    return _to_slot(slot, _render(render, path, start, end, offs, first, order, ns_mult, (linktype, fcs_len), n, t0,
                                  prev, extra))


def _render(render: Render, path: str, start: int, end: int, offs: np.ndarray, first: int, order: str,
            ns_mult: int, link: tuple[int, int], n: int, t0: float, prev: float | None, extra: tuple[Any, ...]) -> Any:
    blk = pcap_block(_read_again(path, start, end), offs, order, ns_mult, link[0], first, end, link[1])
    blk.from_file = start
    return render(blk, n, t0, prev, *extra)


def _read_again(path: str, start: int, end: int) -> bytearray:
    buf = bytearray(end - start)  # a bytearray: the ICRC check masks it in place (no copy)
    with open(path, "rb", buffering=0) as f:
        f.seek(start)
        got = f.readinto(buf)
    if got != len(buf):
        raise OSError(f"{path}: {len(buf)} bytes at {start} read as {got} (was the file changed?)")
    return buf


def _to_slot(slot: int | None, result: Any) -> Any:
    """In a worker process: ``result`` into its slot of the shared mapping (:data:`_SLOTS`) when
    it fits, its length returned; else ``result`` itself.  Pickled with protocol 5, its arrays'
    data out of band: copied straight into the slot after the pickle (no pickle of megabytes
    made and copied again: each new buffer costs page faults), read back as views of the slot."""
    if slot is None or _SLOTS is None:
        return result
    shm, size = _SLOTS
    bufs: list[pickle.PickleBuffer] = []
    data = pickle.dumps(result, protocol=5, buffer_callback=bufs.append)
    raws = [b.raw() for b in bufs]
    total = len(data) + sum(r.nbytes for r in raws)
    if total > size:
        return result
    base = slot * size
    shm[base:base + len(data)] = data
    at = base + len(data)
    sizes = []
    for r in raws:
        shm[at:at + r.nbytes] = r
        at += r.nbytes
        sizes.append(r.nbytes)
    return _InSlot(len(data), tuple(sizes))


def _run_pcapng(task: tuple[Any, ...]) -> Any:
    """In a worker process: read the packet blocks of one range of a pcapng file again and render them."""
    slot, render, path, start, end, offs, first, order, interfaces, n, t0, prev, extra = task
    blk = pcapng_block(_read_again(path, start, end), offs, order, interfaces, first, end)
    blk.from_file = start
    return _to_slot(slot, render(blk, n, t0, prev, *extra))


def _run_block(task: tuple[Any, ...]) -> Any:
    """In a worker process: render a block this process read itself (after damage, a new section)."""
    slot, render, blk, n, t0, prev, extra = task
    return _to_slot(slot, render(blk, n, t0, prev, *extra))


#: bytes read past a range's end, so that the record that starts last in it is usually whole
_TAIL = 256 << 10
#: a record header whose captured length is 0 or above this is not taken for a header when a worker
#: looks for the first record of its range (pcap's snapshot lengths stop at 262,144)
_SYNC_MAX_CAPLEN = 262_144
#: how many headers in a row, each following the last one's length, make the start of a range
_SYNC_CHAIN = 8


#: no time (a range without records)
_NO_TIME = (0.0, 0)


def _times_of(blk: RecordBlock, i: int, j: int) -> tuple[tuple[float, int], tuple[float, int]]:
    """The times (float seconds, nanoseconds) of records ``i`` and ``j`` of ``blk``."""
    secs = blk.seconds()
    return ((float(secs[i]), record_ns(float(secs[i]), int(blk.ts_ns[i]))),
            (float(secs[j]), record_ns(float(secs[j]), int(blk.ts_ns[j]))))


@dataclass(slots=True)
class _Walked:
    """What a worker found in one range of the file: ``start`` the first record it took for one
    (None: none found), ``offs`` the file offsets of the records that start in the range, ``end``
    where the next record starts, ``whole`` whether every record found is whole and sane (its
    length at most :data:`MAX_RECORD`, its bytes in the file), and the first and last timestamps
    (float seconds, nanoseconds)."""

    start: int | None
    offs: np.ndarray
    end: int
    whole: bool
    ts_first: tuple[float, int]
    ts_last: tuple[float, int]


def _header_ts(buf: bytes | bytearray, pos: int, order: str, ns_mult: int) -> tuple[float, int]:
    """The time of the pcap record header at ``pos``: in float seconds (as RecordBlock.seconds
    computes it: sec + frac / units, in float64) and in nanoseconds (exact)."""
    sec, frac = struct.unpack_from(order + "II", buf, pos)
    return float(sec) + float(frac) / (1e6 if ns_mult == 1000 else 1e9), sec * 1_000_000_000 + frac * ns_mult


def _sync(buf: bytearray, hi: int, order: str, ns_mult: int, sec0: int) -> int | None:
    """The first offset in ``buf[:hi]`` where :data:`_SYNC_CHAIN` plausible record headers follow
    each other (a captured length above 0 and at most the wire length and :data:`_SYNC_MAX_CAPLEN`,
    a fraction of a second below one second, seconds within ten years of the file's first record).
    A guess: the caller checks it against where the records before the range end."""
    for window in (16 << 10, _SYNC_MAX_CAPLEN + (16 << 10), hi):
        found = _sync_in(buf, min(window, hi, len(buf) - 16), order, ns_mult, sec0)
        if found is not None or window >= hi:
            return found
    return None


def _plausible(sec: Any, frac: Any, cap: Any, wire: Any, units: int, sec0: int) -> Any:
    """Whether a record header could be one (:func:`_sync`): of one header's fields, or of arrays of them."""
    return ((cap > 0) & (cap <= _SYNC_MAX_CAPLEN) & (cap <= wire) & (frac < units)
            & (abs(sec - sec0) < 10 * 365 * 86400))


def _sync_in(buf: bytearray, n: int, order: str, ns_mult: int, sec0: int) -> int | None:
    if n <= 0:
        return None
    b = np.frombuffer(buf, dtype=np.uint8)
    dt = np.dtype(order + "u4")

    def word(k: int) -> np.ndarray:  # the 32-bit word at offset i + k, for every i < n
        return np.lib.stride_tricks.sliding_window_view(b[k:k + n + 3], 4)[:n].copy().view(dt).ravel()

    units = 1_000_000 if ns_mult == 1000 else 1_000_000_000
    ok = _plausible(word(0).astype(np.int64), word(4), word(8), word(12), units, sec0)
    unpack = struct.Struct(order + "IIII").unpack_from
    for i in np.flatnonzero(ok).tolist():
        q = i
        for _ in range(_SYNC_CHAIN):
            if q + 16 > len(buf):
                break  # the chain ran to the end of what was read: good enough, the caller checks
            s, fr, c, w = unpack(buf, q)
            if not _plausible(s, fr, c, w, units, sec0):
                break
            q += 16 + c
        else:
            return i
        if q + 16 > len(buf):
            return i
    return None


def _walk(task: tuple[Any, ...]) -> _Walked:
    """In a worker process (or this one): the records that start in ``[lo, hi)`` of the file, from
    ``start`` when known, else from a guess (:func:`_sync`)."""
    path, lo, hi, start, order, ns_mult, size, sec0 = task
    buf = bytearray(min(hi + _TAIL, size) - lo)
    with open(path, "rb", buffering=0) as f:
        f.seek(lo)
        got = f.readinto(buf)
        del buf[got:]
        first = start - lo if start is not None else _sync(buf, hi - lo, order, ns_mult, sec0)
        if first is None:
            return _Walked(None, np.zeros(0, dtype=np.int64), lo, False, _NO_TIME, _NO_TIME)
        offs, end = follow_headers(buf, first, min(hi - lo - 1, len(buf) - 16), order)
        whole = True
        if offs and end > len(buf):  # the last record runs past what was read
            last = offs[-1]
            cap = struct.unpack_from(order + "I", buf, last + 8)[0]
            if cap > MAX_RECORD or lo + end > size:
                whole = False
            else:  # read the rest of it
                more = bytearray(end - len(buf))
                f.seek(lo + len(buf))
                got = f.readinto(more)
                buf += more[:got]
                whole = got == len(more)
        if end + 16 > len(buf) and lo + end < size and lo + end < hi:
            whole = False  # a header cut by the read (the file is shorter than it said, or changed)
    at = np.array(offs, dtype=np.int64)
    if len(at):
        caps = np.frombuffer(buf, dtype=np.uint8)[(at + 8)[:, None] + np.arange(4)].copy().view(order + "u4").ravel()
        whole = whole and bool((caps <= MAX_RECORD).all())
        return _Walked(lo + first, at + lo, lo + end, whole, _header_ts(buf, offs[0], order, ns_mult),
                       _header_ts(buf, offs[-1], order, ns_mult))
    return _Walked(lo + first, at, lo + end, whole, _NO_TIME, _NO_TIME)


# ---------------------------------------------------------------- pcapng
# A pcapng file's packet blocks depend on its section (byte order) and interfaces (link type, time
# units and offset): this process reads the section header and interface descriptions up to the
# first packet block (pcapio.pcapng_section) and hands them to the workers.  A range that holds
# another section header or interface description is left to the sequential reader, from there on.

_SHB = PCAPNG_SHB.to_bytes(4, "big")  # the same either way round
_NATIVE = "<" if sys.byteorder == "little" else ">"  # the byte order runs of blocks are followed in


def _pb_interface(word: Any, order: str) -> Any:
    """The interface id of an obsolete packet block whose first body word, read in ``order``, is
    ``word`` (or an array of them): its first 16 bits (then a 16-bit drops count)."""
    return word >> 16 if order == ">" else word & 0xFFFF


def _block_ok(words: np.ndarray, w: int, nbytes: int, nifs: int, order: str) -> bool:
    """Whether the 32-bit word ``w`` of a buffer of ``nbytes`` starts what could be a pcapng block
    (:func:`_sync_ng`): a length that is a multiple of 4, at least 12 and at most
    :data:`MAX_RECORD`, repeated in its last word when that is in the buffer; a packet block's
    lengths and interface as the reader checks them."""
    if w + 2 > len(words):
        return True  # runs past what was read: the caller checks the guess
    btype, blen = int(words[w]), int(words[w + 1])
    if blen < 12 or blen % 4 or blen > MAX_RECORD:
        return False
    if w * 4 + blen <= nbytes and int(words[w + blen // 4 - 1]) != blen:
        return False
    if btype in (PCAPNG_EPB, 2):
        if blen < 32:
            return False
        if w + 6 <= len(words):
            iface = _pb_interface(int(words[w + 2]), order) if btype == 2 else int(words[w + 2])
            return iface < nifs and 28 + int(words[w + 5]) <= blen - 4
    return not (btype == 3 and (blen < 16 or nifs == 0))


def _sync_ng(buf: bytearray, span: int, order: str, nifs: int) -> int | None:
    """The first offset (a multiple of 4) in ``buf[:span]`` of an enhanced packet block on one of
    the ``nifs`` interfaces (its length a multiple of 4, at least 32, repeated in its last word; its
    captured bytes inside it) after which :data:`_SYNC_CHAIN` blocks follow each other, each of a
    plausible length repeated in its last word (:func:`_block_ok`).  A guess: the caller checks it
    against where the blocks before the range end."""
    words = np.frombuffer(buf, dtype=np.dtype(order + "u4"), count=len(buf) // 4)
    lim = min(span, len(buf) - 28) // 4
    if lim <= 0 or nifs == 0:
        return None
    w = np.flatnonzero(words[:lim] == PCAPNG_EPB)
    blen = words[w + 1].astype(np.int64)
    ok = (blen % 4 == 0) & (blen >= 32) & (blen <= MAX_RECORD) & (w * 4 + blen <= len(buf))
    ok &= (words[w + 2] < nifs) & (28 + words[w + 5].astype(np.int64) <= blen - 4)
    w, blen = w[ok], blen[ok]
    w, blen = w[words[w + blen // 4 - 1] == blen], blen[words[w + blen // 4 - 1] == blen]
    for i, n in zip(w.tolist(), blen.tolist(), strict=True):
        q = i + n // 4
        for _ in range(_SYNC_CHAIN):
            if q * 4 + 8 > len(buf) or not _block_ok(words, q, len(buf), nifs, order):
                break
            q += int(words[q + 1]) // 4
        else:
            return int(i) * 4
        if q * 4 + 8 > len(buf):
            return int(i) * 4  # the chain ran to the end of what was read: good enough, the caller checks
    return None


def _walk_ng(task: tuple[Any, ...]) -> _Walked:
    """In a worker process (or this one): the packet blocks that start in ``[lo, hi)`` of a pcapng
    file, from ``start`` when known, else from a guess (:func:`_sync_ng`).  ``whole`` is False when
    a block is damaged or cut short, or starts a section or describes an interface: the
    sequential reader takes the range."""
    path, lo, hi, start, order, interfaces, size = task
    nifs = len(interfaces)
    span = hi - lo
    buf = bytearray(min(hi + _TAIL, size) - lo)
    offs: list[int] = []
    whole = True
    with open(path, "rb", buffering=0) as f:
        f.seek(lo)
        got = f.readinto(buf)
        del buf[got:]
        first = start - lo if start is not None else _sync_ng(buf, span, order, nifs)
        if first is None:
            return _Walked(None, np.zeros(0, dtype=np.int64), lo, False, _NO_TIME, _NO_TIME)

        def more(need: int) -> bool:  # read on to ``need`` bytes of the range; whether they are there
            if lo + need > size:
                return False
            extra = bytearray(need - len(buf))
            f.seek(lo + len(buf))
            n = f.readinto(extra)
            buf.extend(extra[:n])
            return len(buf) >= need

        unpack = struct.Struct(order + "II").unpack_from
        add = offs.append
        q = first
        while q < span:
            if order == _NATIVE:  # a run of enhanced packet blocks, one subscript a block
                end4 = len(buf) // 4 * 4
                lim, epb, most = min(span, end4 - 7), PCAPNG_EPB, MAX_RECORD
                with memoryview(buf) as mv, mv[:end4].cast("I") as w32:
                    while q < lim and w32[q >> 2] == epb:
                        blen = w32[(q >> 2) + 1]
                        if blen < 32 or blen & 3 or blen > most or q + blen > end4:
                            break
                        add(q)
                        q += blen
                if q >= span:
                    break
            if q + 8 > len(buf) and not more(q + 8):
                whole = False
                break
            btype, blen = unpack(buf, q)
            if blen < 12 or blen % 4 or blen > MAX_RECORD or (q + blen > len(buf) and not more(q + blen)):
                whole = False
                break
            if btype == PCAPNG_IDB or buf[q:q + 4] == _SHB:
                whole = False  # a new section or interface: the sequential reader follows it
                break
            if btype in PCAPNG_PACKET_TYPES:
                if blen < (16 if btype == 3 else 32) or nifs == 0:
                    whole = False
                    break
                add(q)
            q += blen
    at = np.array(offs, dtype=np.int64)
    if whole and len(at):  # the packet blocks' lengths and interfaces as the reader checks them
        words = np.frombuffer(buf, dtype=np.dtype(order + "u4"), count=len(buf) // 4)
        w = at >> 2
        btype = words[w].astype(np.int64)
        timed = btype != 3
        tw = w[timed]
        iface = words[tw + 2].astype(np.int64)
        iface = np.where(btype[timed] == 2, _pb_interface(iface, order), iface)
        blen_w = words[w + 1].astype(np.int64)
        whole = bool(((iface < nifs) & (28 + words[tw + 5].astype(np.int64) <= words[tw + 1] - 4)).all()
                     # (each block ends with its length again: one that does not is the reader's to name)
                     and (words[w + (blen_w >> 2) - 1] == blen_w).all())
    if not whole:
        return _Walked(lo + first, at + lo, lo + q, False, _NO_TIME, _NO_TIME)
    if len(at):
        ends = pcapng_block(buf, at[[0, -1]], order, interfaces, 1, 0)
        return _Walked(lo + first, at + lo, lo + q, True, *_times_of(ends, 0, 1))
    return _Walked(lo + first, at, lo + q, True, _NO_TIME, _NO_TIME)


@dataclass(slots=True)
class _Format:
    """What :func:`blocks_in_workers` needs of a file's format: where its records start, how a
    worker walks a range (``walk(lo, hi, start)``: the function and its task), how a worker renders
    the records at ``offs`` of ``[start, end)`` (``run``), and the sequential reader from a record on
    (``tail(f, at, frame)``)."""

    first: int
    walk: Callable[[int, int, int | None], tuple[Callable[[tuple[Any, ...]], _Walked], tuple[Any, ...]]]
    run: Callable[[int | None, Render, int, int, np.ndarray, int, int, float, float | None, tuple[Any, ...]],
                  tuple[Callable[[tuple[Any, ...]], Any], tuple[Any, ...]]]
    tail: Callable[[Any, int, int], Iterator[RecordBlock | RawBlock]]
    ts: Callable[[RawBlock, int], tuple[float, int]]


def _pcap_format(p: str, head: bytes, first_hdr: bytes, size: int, block_bytes: int) -> _Format:
    order, ns_mult = PCAP_MAGICS[head[:4]]
    linktype, fcs_len = pcap_linktype(head, order), pcap_fcs_len(head, order)
    sec0 = struct.unpack(order + "I", first_hdr[:4])[0] if len(first_hdr) == 16 else 0
    return _Format(
        24,
        lambda lo, hi, start: (_walk, (p, lo, hi, start, order, ns_mult, size, sec0)),
        lambda slot, render, start, end, offs, frame, n, t0, prev, extra: (
            _run, (slot, render, p, start, end, offs, frame, order, ns_mult, linktype, fcs_len, n, t0, prev, extra)),
        lambda f, at, frame: pcap_raw(p, f, order, block_bytes, at, frame),
        lambda raw, k: _header_ts(raw.buf, k, order, ns_mult))


def _pcapng_format(p: str, sect: PcapngSection, size: int, block_bytes: int) -> _Format:
    order, rows = sect.order, sect.interfaces

    def tail(f: Any, at: int, frame: int) -> Iterator[RecordBlock]:
        f.seek(at)
        return _pcapng_blocks(p, f, b"", block_bytes, order=order, interfaces=rows, frame=frame, pos_file=at)

    return _Format(
        sect.first,
        lambda lo, hi, start: (_walk_ng, (p, lo, hi, start, order, rows, size)),
        lambda slot, render, start, end, offs, frame, n, t0, prev, extra: (
            _run_pcapng, (slot, render, p, start, end, offs, frame, order, rows, n, t0, prev, extra)),
        tail, lambda raw, k: _NO_TIME)


def blocks_in_workers(path: str | os.PathLike[str], render: Render, extra: tuple[Any, ...], *, workers: int,
                      block_bytes: int, count: int | None = None,
                      progress: Callable[[int], None] | None = None,
                      exact_times: bool = False) -> Generator[tuple[Any, Any], None, None]:
    """``(render(blk, n, t0, prev, *extra), t0)`` for each block of the plain pcap or pcapng file
    ``path`` (the first ``count`` records; :func:`parallel_capture` says which files), computed in
    ``workers`` processes, yielded in file order: ``blk`` the block's records, ``n`` how many of them
    to render, ``t0`` the time of the capture's first record and ``prev`` that of the record before
    the block (None for the first), in float seconds (``exact_times``: in nanoseconds, exact, an
    int).  ``progress(bytes)`` is told how far into the file the blocks handed out reach.

    The workers also follow the record headers (pcapng: the block lengths): the file is cut into
    ranges of ``block_bytes``, and a worker finds the first record of its range by the look of the
    headers (:func:`_sync`; pcapng: :func:`_sync_ng`, an enhanced packet block).  That guess is
    checked here: a range's first record must be where the records of the range before it end.
    When it is not (a payload that looks like a chain of headers), this process follows the headers
    of the range itself.  When a range holds a record that is not whole or sane, or (pcapng)
    starts a section or describes an interface, this process reads the rest of the file with the
    sequential reader (:func:`~rdmalab.capture.pcapio.record_blocks`'s checks, errors and times)
    and the workers render its blocks.

    pcapng: this process first reads the section header and interface descriptions up to the
    first packet block (:func:`~rdmalab.capture.pcapio.pcapng_section`), which the workers are
    given.

    ``render`` and ``extra`` must pickle (the workers are given them by name and value): when they do
    not, a TypeError says so before any worker starts (a task that does not pickle left this
    process waiting for its result for ever).

    Where workers are forked, a result comes back through shared memory, its numpy arrays as views
    of it (no copy): they hold until the result after next is asked for, when a worker may write
    that memory again.  A caller that keeps arrays of a result longer copies them."""
    try:
        pickle.dumps((render, extra))
    except Exception as err:  # noqa: BLE001 - whatever pickle raises for it
        raise TypeError(f"blocks_in_workers: the render function {getattr(render, '__qualname__', render)!r} "
                        f"and its arguments must pickle to reach the worker processes (a function at a module's "
                        f"top level): {type(err).__name__}: {err}") from err
    p = os.fspath(path)
    refused = ValueError(f"{p}: not a plain pcap or pcapng file (a stream, or compressed?): its blocks cannot be "
                         "read again by offset; read it in one process")
    if is_stream(p):
        raise refused
    with open_capture(p) as f:
        head = f.read(24)
        size = os.fstat(f.fileno()).st_size
        sect: PcapngSection | None = None
        plain = not isinstance(f, gzip.GzipFile)  # else its bytes are not the file's
        if plain and head[:4] in PCAP_MAGICS:
            fmt = _pcap_format(p, head, f.read(16), size, block_bytes)
        elif plain and head[:4] == _SHB:
            sect = pcapng_section(f, size)
            fmt = _pcapng_format(p, sect or PcapngSection("<", [], 0), size, block_bytes)
        else:
            raise refused
        step = max(4, block_bytes // 4 * 4)  # pcapng blocks start at multiples of 4: so do its ranges
        ranges = [(lo, min(lo + step, size)) for lo in range(fmt.first, size, step)]
        forked = _forks()  # as worker_pool starts them
        nslots = 2 * workers + 2  # more than the blocks in flight: a slot is read before it is named again
        slot_bytes = max(8 * block_bytes, 16 << 20)
        # made before the workers are forked, which inherit it; pages are taken only when written
        shm = mmap.mmap(-1, nslots * slot_bytes) if forked else None
        view = memoryview(shm) if shm is not None else None

        def result(job: Future[Any], slot: int | None) -> Any:
            got = job.result()
            if isinstance(got, _InSlot) and view is not None and slot is not None:
                at = slot * slot_bytes + got.size
                bufs = []
                for n in got.buffers:  # views of the slot: read before the slot is named again
                    bufs.append(view[at:at + n])
                    at += n
                return pickle.loads(view[slot * slot_bytes:slot * slot_bytes + got.size], buffers=bufs)
            return got

        renders = 0
        # the pool goes first, then the mapping
        with _unmapped(view, shm), worker_pool(workers, _slots, (shm, slot_bytes)) as pool:
            walks: deque[Future[_Walked]] = deque()
            nxt = 0

            def walk_ahead() -> None:
                nonlocal nxt
                while nxt < len(ranges) and len(walks) < 4 * workers:
                    lo, hi = ranges[nxt]
                    fn, task = fmt.walk(lo, hi, fmt.first if lo == fmt.first else None)
                    walks.append(pool.submit(_in_worker, fn, task))
                    nxt += 1

            pending: deque[tuple[Future[Any], int | None, float]] = deque()
            t0: float | int | None = None
            prev: float | int | None = None
            left = count
            frame = 1
            expected = fmt.first  # where the next record starts
            # the sequential reader, once a range needs it (from the start: a pcapng file whose
            # first blocks are not what the reader takes without a word)
            tail: Iterator[RecordBlock | RawBlock] | None = None
            if head[:4] == _SHB and sect is None:
                tail = fmt.tail(f, 0, 1)
                ranges = []
            failed: BaseException | None = None
            ready: RecordBlock | None = None  # a block the sequential reader made whole
            k = 0
            while left is None or left > 0:
                ready = None
                if tail is None:
                    walk_ahead()
                    if k >= len(ranges):
                        break
                    lo, hi = ranges[k]
                    w = walks.popleft().result()
                    k += 1
                    if expected >= hi:
                        continue  # a record that started in an earlier range covers this one
                    if w.start != expected:  # the guess was wrong: follow the headers from where they lead
                        fn, task = fmt.walk(lo, hi, expected)
                        w = fn(task)
                    if not w.whole:  # damaged, truncated, a new section: the sequential reader, with its errors
                        f.seek(expected)
                        tail = fmt.tail(f, expected, frame)
                        for ahead in walks:
                            ahead.cancel()
                        walks.clear()
                        continue
                    if not len(w.offs):
                        expected = w.end
                        continue
                    start, end, offs = int(w.offs[0]), w.end, w.offs - w.offs[0]
                    ts_first, ts_last = w.ts_first, w.ts_last
                    expected = end
                else:
                    try:
                        raw = next(tail)
                    except StopIteration:
                        break
                    except Exception as err:  # noqa: BLE001 - the damage: raised after the blocks before it
                        failed = err
                        break
                    if isinstance(raw, RecordBlock):
                        ready, offs, end = raw, raw.offset, raw.file_pos
                        ts_first, ts_last = _times_of(raw, 0, -1)
                    else:
                        start, end, offs = raw.file_start, raw.file_end, raw.offs
                        ts_first, ts_last = fmt.ts(raw, int(offs[0])), fmt.ts(raw, int(offs[-1]))
                n = len(offs) if left is None else min(len(offs), left)
                if t0 is None:
                    t0 = ts_first[exact_times]
                slot = renders % nslots if view is not None else None
                renders += 1
                if ready is not None:
                    fn, task = _run_block, (slot, render, ready, n, t0, prev, extra)
                else:
                    fn, task = fmt.run(slot, render, start, end, offs, frame, n, t0, prev, extra)
                pending.append((pool.submit(_in_worker, fn, task), slot, t0))
                if progress is not None:
                    progress(end)
                prev = ts_last[exact_times]
                frame += len(offs)
                while len(pending) > 2 * workers:  # a worker's own error is raised here, in order
                    job, slot, t = pending.popleft()
                    yield result(job, slot), t
                if left is not None:
                    left -= n
            for job, slot, t in pending:
                yield result(job, slot), t
            if failed is not None:
                raise failed


class _unmapped:
    """Release the view of the results' mapping, then close it (after the pool is gone)."""

    def __init__(self, view: memoryview | None, shm: mmap.mmap | None) -> None:
        self.view, self.shm = view, shm

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        if self.view is not None:
            self.view.release()
        if self.shm is not None:
            try:
                self.shm.close()
            except BufferError:  # arrays of the last results still view it: freed with them
                pass
