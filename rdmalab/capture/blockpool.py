"""Blocks of a plain pcap file rendered in worker processes, the results in file order.

The one home of ``rdmalab decode``'s parallel paths (summary lines, ``-T json``): this process
follows the record headers (:func:`rdmalab.capture.pcapio.pcap_raw`) and hands each block's
record offsets to a worker, which reads the block again from the file (``pread``: no bytes go
through a pipe) and renders it with the given function.  The results come back in file order, at
most ``2 * workers`` blocks ahead.  A damaged or truncated file yields every block before the
damage, then raises the :class:`~rdmalab.capture.pcapio.CaptureError` the sequential reader
raises: nothing before the damage is lost.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

from rdmalab.capture.pcapio import PCAP_MAGICS, RecordBlock, open_capture, pcap_block, pcap_raw

#: files smaller than this are rendered in this process (the workers' start-up would cost more)
PARALLEL_MIN_BYTES = 32 << 20

#: ``render(block, n, t0, prev, *extra)``: the first ``n`` records of ``block``; ``t0`` is the
#: capture's first timestamp and ``prev`` the timestamp of the record before the block (None for
#: the first block), both in seconds as :meth:`RecordBlock.seconds` gives them
Render = Callable[..., Any]


def plain_pcap(path: str) -> bool:
    """Whether ``path`` is an uncompressed pcap file (its blocks can be read again by offset)."""
    try:
        with open(path, "rb") as f:
            return f.read(4) in PCAP_MAGICS
    except OSError:
        return False


def default_workers() -> int:
    """Worker processes for summary lines and JSON when not told: one a core that is idle (the cores less
    the one-minute load average, as ``make -l`` weighs it), at most four, at least one.

    This process only follows the record headers, writes, and decodes TCP segments, so it does
    not take a core of its own; past four workers it could not keep them fed.  On a busy machine
    the workers would only compete with each other, and cost more CPU time than one process
    (results passed back through pipes), so they are not started."""
    cores = os.cpu_count() or 1
    try:
        busy = os.getloadavg()[0]
    except OSError:  # no load average on this system
        busy = 0.0
    return max(1, min(cores - int(busy + 0.5), 4))


def _run(task: tuple[Any, ...]) -> Any:
    """In a worker process: read one block of pcap records again and render it."""
    render, path, start, end, offs, first, order, ns_mult, linktype, n, t0, prev, extra = task
    buf = bytearray(end - start)  # a bytearray: the ICRC check masks it in place (no copy)
    with open(path, "rb", buffering=0) as f:
        f.seek(start)
        got = f.readinto(buf)
    if got != len(buf):
        raise OSError(f"{path}: {len(buf)} bytes at {start} read as {got} (was the file changed?)")
    return render(pcap_block(buf, offs, order, ns_mult, linktype, first, end), n, t0, prev, *extra)


def blocks_in_workers(path: str | os.PathLike[str], render: Render, extra: tuple[Any, ...], *, workers: int,
                      block_bytes: int, count: int | None = None,
                      progress: Callable[[int], None] | None = None) -> Iterator[tuple[Any, float]]:
    """``(render(...), t0)`` for each block of the plain pcap file ``path`` (the first ``count``
    records), computed in ``workers`` processes, yielded in file order.  ``progress(bytes)`` is
    told how far into the file the blocks handed out reach."""
    import multiprocessing  # lazy: only the parallel paths need it (start-up, memory)

    p = os.fspath(path)
    with open_capture(p) as f:
        head = f.read(24)
        if head[:4] not in PCAP_MAGICS:
            raise ValueError(f"{p}: not a plain pcap file (pcapng or compressed): its blocks cannot be read "
                             "again by offset; read it in one process")
        order, ns_mult = PCAP_MAGICS[head[:4]]
        linktype = int.from_bytes(head[20:24], "little" if order == "<" else "big") & 0x0FFFFFFF
        ctx = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else None)
        with ctx.Pool(workers) as pool:
            pending: list[tuple[Any, float]] = []
            t0: float | None = None
            prev: float | None = None
            left = count
            failed: BaseException | None = None
            raws = pcap_raw(p, f, order, block_bytes)
            while True:
                try:
                    raw = next(raws)
                except StopIteration:
                    break
                except Exception as err:  # noqa: BLE001 - the damage: raised after the blocks before it
                    failed = err
                    break
                n = len(raw.offs) if left is None else min(len(raw.offs), left)
                if t0 is None:
                    t0 = _seconds(raw, 0, order, ns_mult, linktype)
                task = (render, p, raw.file_start, raw.file_end, raw.offs, raw.first, order, ns_mult, linktype, n,
                        t0, prev, extra)
                pending.append((pool.apply_async(_run, (task,)), t0))
                if progress is not None:
                    progress(raw.file_end)
                if n:
                    prev = _seconds(raw, n - 1, order, ns_mult, linktype)
                while len(pending) > 2 * workers:  # a worker's own error is raised here, in order
                    res, t = pending.pop(0)
                    yield res.get(), t
                if left is not None:
                    left -= n
                    if left <= 0:
                        break
            for res, t in pending:
                yield res.get(), t
            if failed is not None:
                raise failed


def _seconds(raw: Any, i: int, order: str, ns_mult: int, linktype: int) -> float:
    blk: RecordBlock = pcap_block(raw.buf, raw.offs[i:i + 1], order, ns_mult, linktype, 1, 0)
    return float(blk.seconds()[0])
