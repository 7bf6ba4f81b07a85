"""Frames for the live view (:mod:`rdmalab.capture.top`): a capture file replayed, or a live interface.

A source is an iterator of :data:`Frame` tuples ``(timestamp_ns, frame bytes, link type, length on
the wire)`` or ``None`` when nothing came for a while (a live interface that is quiet: the view
refreshes anyway).  :func:`replay` reads a pcap/pcapng file (the one record walker,
:func:`rdmalab.capture.reader.records`) at the capture's own pace times ``speed``, or as fast as
it can; :func:`live` reads an interface through :class:`rdmalab.capture.sniff.LiveCapture`, the
live reader of ``rdmalab capture -i`` and ``decode -i`` (a Linux packet socket, a capture filter).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator

from rdmalab.capture.pcapio import seconds_ns
from rdmalab.capture.reader import CaptureError, records
from rdmalab.capture.sniff import LiveCapture, SniffError

#: the errors a source raises: SniffError (an interface), CaptureError (a file that cannot be read)
__all__ = ["CaptureError", "Frame", "SniffError", "live", "replay"]

Frame = tuple[int, bytes, int, int]


def replay(path: str | os.PathLike[str], speed: float | None = 1.0, *, clock: Callable[[], float] = time.monotonic,
           sleep: Callable[[float], None] = time.sleep, wait_max: float = 0.25,
           max_gap: float | None = 60.0) -> Iterator[Frame | None]:
    """The frames of a capture file, each when its time comes: at ``speed`` times the capture's
    pace (``None``: no waiting).  While a frame's time has not come it yields ``None`` every
    ``wait_max`` seconds at most, so that a view can refresh during a long pause of the capture.
    A frame more than ``max_gap`` seconds (of waiting, at ``speed``) after the one before comes at once,
    and the pace goes on from it (tcpreplay's ``--maxsleep``): a capture that sat idle for an hour, or
    one frame stamped decades ahead, does not stall the replay.  None: every pause waited through."""
    start_wall: float | None = None
    start_ts = 0
    for rec in records(path):
        ts = rec.ns if rec.ns is not None else seconds_ns(rec.timestamp)
        if speed is not None:
            if start_wall is None:
                start_wall, start_ts = clock(), ts
            if max_gap is not None and start_wall + (ts - start_ts) / 1e9 / speed - clock() > max_gap:
                start_wall, start_ts = clock(), ts  # (the pause skipped: the pace again from this frame)
            while True:
                due = start_wall + (ts - start_ts) / 1e9 / speed - clock()
                if due <= 0:
                    break
                sleep(min(due, wait_max))
                if due > wait_max:
                    yield None
        yield ts, rec.data, rec.linktype, rec.wire_length


def live(iface: str, *, bpf: str | None = None, timeout: float = 0.25,
         stats: dict[str, int] | None = None) -> Iterator[Frame | None]:
    """Every frame of a live interface (both directions, once), as :class:`~rdmalab.capture.sniff.LiveCapture`
    reads them (``bpf``: a capture filter in tcpdump's language); ``None`` after ``timeout`` seconds
    without one.  ``stats["dropped"]`` is the kernel's count of frames dropped because the socket's
    buffer was full, brought up to date whenever a ``None`` is yielded and every 1024 frames."""
    with LiveCapture(iface, bpf=bpf) as cap:
        while True:
            pkt = cap.poll(timeout)
            if pkt is None or cap.received % 1024 == 0:
                if stats is not None:
                    stats["dropped"] = cap.stats()[1]
            if pkt is None:
                yield None
                continue
            ts, data, wire = pkt
            yield ts, data, cap.linktype, wire
