"""``rdmalab decode`` in worker processes (rdmalab.capture.blockpool): the same text as one process.

pcap and pcapng files: for pcapng, sections and interfaces of every kind, payloads that look like
a chain of blocks, damaged blocks, and counts (the section at the end).

Each path is run with small blocks (so that a capture is many blocks) and no size threshold, and
compared byte for byte with the single-process path: ``-T json`` on every capture in ``captures/``
(iWARP ones included: their TCP segments are decoded in order by the main process), and summary
lines, ``-T fields`` and JSON on a capture that ends mid-record, where every frame before the cut
must come out before the error (the parallel summary path once dropped the blocks still in the
workers, and ``-T fields`` waited forever).
"""

from __future__ import annotations

import glob
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest

from rdmalab.capture import read
from rdmalab.capture.blockpool import blocks_in_workers, parallel_capture, plain_pcap
from rdmalab.capture.json_blocks import iter_json_file
from rdmalab.capture.tsjson import iter_json

ROOT = Path(__file__).resolve().parents[2]
#: the captures whose blocks the workers read (plain pcap, and pcapng: siw_write_bw_midstream.pcap)
CAPTURES = [p for p in sorted(glob.glob(str(ROOT / "captures" / "*.pcap"))) if parallel_capture(p)]


def _json_one(path: str, count: int | None = None, lenient: bool = True) -> str:
    return "".join(iter_json(read(path, count=count, lenient=lenient)))


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("path", CAPTURES, ids=[Path(p).name for p in CAPTURES])
def test_json_in_workers_is_the_json_of_one_process(path: str, workers: int) -> None:
    """(workers 1: the blocks rendered the workers' way, in this process)"""
    many = "".join(iter_json_file(path, workers=workers, block_bytes=4096))
    assert many == _json_one(path)


def test_json_in_workers_with_a_count() -> None:
    path = str(ROOT / "captures" / "siw_write_bw.pcap")
    for count in (0, 1, 7, 150):
        for workers in (1, 2):
            assert "".join(iter_json_file(path, workers=workers, block_bytes=4096, count=count)) == _json_one(path, count)
    from rdmalab.capture.columnar_summary import summary_bytes

    assert b"".join(summary_bytes(path, count=0, workers=2, block_bytes=4096, parallel_min_bytes=0)) == b""


def test_a_compressed_file_is_refused_in_words(tmp_path: Path) -> None:
    import gzip

    from rdmalab.capture.blockpool import parallel_capture

    path = tmp_path / "c.pcap.gz"
    path.write_bytes(gzip.compress((ROOT / "captures" / "siw_write_bw_midstream.pcap").read_bytes()))
    assert not plain_pcap(str(path)) and not parallel_capture(str(path))
    with pytest.raises(ValueError, match="not a plain pcap or pcapng file"):
        "".join(iter_json_file(str(path), workers=2))


def _until_error(pieces: Iterable[str | bytes]) -> tuple[str, str]:
    got: list[str] = []
    try:
        for piece in pieces:
            got.append(piece.decode() if isinstance(piece, bytes) else piece)
    except Exception as err:  # noqa: BLE001 - compared by the caller
        return "".join(got), f"{type(err).__name__}: {err}"
    return "".join(got), ""


def _cut(tmp_path: Path) -> str:
    """Three captures appended, the file cut in the middle of its last record."""
    import hostile  # tests/hostile.py

    p = tmp_path / "cut.pcap"
    frames = hostile.frames_of(ROOT / "captures" / "rxe_write_bw_loss.pcap")
    hostile.write(p, frames + frames + frames)
    data = p.read_bytes()
    p.write_bytes(data[:-300])
    return str(p)


def test_a_capture_cut_mid_record_loses_nothing_in_workers(tmp_path: Path) -> None:
    from rdmalab.capture.columnar_summary import summary_bytes
    from rdmalab.capture.fieldtext import field_text

    path = _cut(tmp_path)
    names = ["frame.number", "infiniband.bth.psn"]
    runs: dict[str, Callable[[int], Iterable[str | bytes]]] = {
        "summary": lambda w: summary_bytes(path, workers=w, block_bytes=8192, parallel_min_bytes=0),
        "fields": lambda w: field_text(path, names, workers=w, block_bytes=8192, parallel_min_bytes=0),
        "json": lambda w: (iter_json_file(path, workers=2, block_bytes=8192) if w > 1 else
                           iter_json(read(path))),
    }
    for what, run in runs.items():
        one, many = _until_error(run(1)), _until_error(run(2))
        assert "truncated mid-record" in one[1], what
        assert many == one, what
        if what == "json":  # (and its blocks rendered the workers' way, in this process)
            assert _until_error(iter_json_file(path, workers=1, block_bytes=8192)) == one
        if what == "summary":  # a line for every whole record before the one the cut is in
            cut_at = int(re.search(r"record (\d+) at byte", one[1]).group(1))  # type: ignore[union-attr]
            assert cut_at > 1200 and many[0].count("\n") == cut_at - 1


def test_json_in_workers_strict_stops_at_the_same_frame(tmp_path: Path) -> None:
    """--strict: the JSON before the first bad frame, then the same error as one process."""
    import hostile  # tests/hostile.py

    frames = hostile.frames_of(ROOT / "captures" / "rxe_write_bw_loss.pcap")
    t, d, _w = frames[200]
    frames[200] = (t, d[:40], 40)  # cut inside the BTH
    p = tmp_path / "bad.pcap"
    hostile.write(p, frames)
    one = _until_error(iter_json(read(p, lenient=False)))
    many = _until_error(iter_json_file(str(p), workers=2, block_bytes=4096, lenient=False))
    assert one[1] and many == one
    assert _until_error(iter_json_file(str(p), workers=1, block_bytes=4096, lenient=False)) == one
    assert one[0].count('"frame.number"') == 200


def _render_or_fail(blk: object, n: int, t0: float, prev: float | None) -> tuple[int, int]:
    first = blk.first  # type: ignore[attr-defined]
    if first <= 200 < first + n:
        raise ValueError(f"a renderer's error at the block of frame 200 (frames {first}..)")
    return first, n


@pytest.mark.timeout(120)
def test_a_workers_error_comes_in_file_order() -> None:
    """A block whose rendering fails raises its error after the blocks before it and before any
    block after it (the results are taken in file order)."""
    from rdmalab.capture.blockpool import blocks_in_workers

    path = str(ROOT / "captures" / "rxe_write_bw_loss.pcap")
    got: list[tuple[int, int]] = []
    with pytest.raises(ValueError, match="block of frame 200"):
        for res, _t0 in blocks_in_workers(path, _render_or_fail, (), workers=2, block_bytes=4096):
            got.append(res)
    assert got and got[0][0] == 1
    assert all(a + n == b for (a, n), (b, _) in zip(got, got[1:]))  # noqa: B905 - consecutive blocks
    assert got[-1][0] + got[-1][1] <= 200


# ---------------------------------------------------------------- workers that find their own records
# The workers follow the record headers of their own range of the file, starting from a record they
# find by the look of its header (blockpool._sync); this process checks each guess against where the
# records of the range before end, and follows the headers itself when a guess was wrong.


def _udp_frame(payload: bytes) -> bytes:
    """Ethernet, IPv4, UDP to port 9 (not RoCE) with ``payload``: bytes the decoders show as data."""
    import struct

    udp = struct.pack(">HHHH", 40000, 9, 8 + len(payload), 0) + payload
    ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 1, 0, 64, 17, 0, bytes([10, 0, 0, 1]),
                     bytes([10, 0, 0, 2]))
    return b"\x02" * 6 + b"\x04" * 6 + b"\x08\x00" + ip + udp


def _fake_headers(t_ns: int, count: int) -> bytes:
    """``count`` pcap record headers that follow each other, each with 8 bytes of data, as a payload."""
    import struct

    return b"".join(struct.pack("<IIII", t_ns // 1_000_000_000, 0, 8, 8) + b"\x01" * 8 for _ in range(count))


def _all_ways(path: str, block_bytes: int) -> None:
    """Summary lines, -T fields and -T json from two workers equal one process's, error included."""
    from rdmalab.capture.columnar_summary import summary_bytes
    from rdmalab.capture.fieldtext import field_text

    names = ["frame.number", "frame.time_relative", "ip.src", "udp.length", "infiniband.bth.psn"]
    runs: dict[str, Callable[[int], Iterable[str | bytes]]] = {
        "summary": lambda w: summary_bytes(path, workers=w, block_bytes=block_bytes, parallel_min_bytes=0),
        "fields": lambda w: field_text(path, names, workers=w, block_bytes=block_bytes, parallel_min_bytes=0),
        "json": lambda w: (iter_json_file(path, workers=2, block_bytes=block_bytes) if w > 1 else
                           iter_json(read(path))),
    }
    for what, run in runs.items():
        one, many = _until_error(run(1)), _until_error(run(2))
        assert many == one, what


def _count_walks_here(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The ranges this process walks itself (a worker's guess was wrong)."""
    from rdmalab.capture import blockpool

    calls: list[int] = []
    walk = blockpool._walk

    def counted(task: tuple[object, ...]) -> object:
        calls.append(task[1])  # type: ignore[arg-type]
        return walk(task)

    # the pool sends functions by name: this one is found under the old one's (the forked workers count
    # in their own copy of the list)
    counted.__module__, counted.__qualname__ = walk.__module__, walk.__qualname__
    monkeypatch.setattr(blockpool, "_walk", counted)
    return calls


def test_payloads_that_look_like_record_headers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Frames whose data is a chain of pcap record headers, all through the file: the workers' guesses
    land on them, this process finds out and follows the headers itself; the text is the same."""
    import hostile  # tests/hostile.py

    real = hostile.frames_of(ROOT / "captures" / "rxe_write_bw_loss.pcap")
    frames = []
    for i, (t, d, w) in enumerate(real[:300]):
        frames.append((t, d, w))
        if i % 3 == 0:
            fake = _udp_frame(_fake_headers(t, 60))
            frames.append((t + 1, fake, len(fake)))
    p = tmp_path / "fake_headers.pcap"
    hostile.write(p, frames)
    walked = _count_walks_here(monkeypatch)
    _all_ways(str(p), 4096)
    assert walked, "no guess was wrong: the test did not test the check"


def test_a_record_longer_than_a_range_and_zeros_at_time_zero(tmp_path: Path) -> None:
    """Records of 20,000 bytes (ranges of 4,096 bytes start and end inside them) and data of zeros,
    with timestamps from 0: seconds, fraction and lengths of zero look like headers to no one."""
    import hostile  # tests/hostile.py

    real = hostile.frames_of(ROOT / "captures" / "rxe_write_bw_loss.pcap")[:120]
    t0 = real[0][0]
    frames = []
    for i, (t, d, w) in enumerate(real):
        frames.append((t - t0, d, w))
        if i % 10 == 0:
            big = _udp_frame(bytes(20_000))
            frames.append((t - t0 + 1, big, len(big)))
    p = tmp_path / "big_records.pcap"
    hostile.write(p, frames)
    _all_ways(str(p), 4096)


def test_a_damaged_record_in_the_middle_in_workers(tmp_path: Path) -> None:
    """A record in the middle claims 2 GB: every record before it comes out, then the reader's error."""
    import struct

    import hostile  # tests/hostile.py

    frames = hostile.frames_of(ROOT / "captures" / "rxe_write_bw_loss.pcap")
    p = tmp_path / "damaged.pcap"
    hostile.write(p, frames + frames)
    data = bytearray(p.read_bytes())
    pos, n = 24, 0
    while n < len(frames) + 37:  # to the header of record len(frames) + 38
        pos += 16 + struct.unpack_from("<I", data, pos + 8)[0]
        n += 1
    struct.pack_into("<I", data, pos + 8, 0x7FFF_0000)
    p.write_bytes(bytes(data))
    from rdmalab.capture.columnar_summary import summary_bytes

    one = _until_error(summary_bytes(str(p), workers=1, block_bytes=4096))
    assert f"record {len(frames) + 38} at byte {pos}" in one[1] and "is damaged" in one[1]
    assert one[0].count("\n") == len(frames) + 37
    _all_ways(str(p), 4096)


def _sized(blk: object, n: int, t0: float, prev: float | None, big: int) -> tuple[int, bytes]:
    first = blk.first  # type: ignore[attr-defined]
    return first, (b"%d;" % first) * (big if first == 1 else 3)


def _array(blk: object, n: int, t0: float, prev: float | None) -> Any:
    import numpy as np

    return np.full(50_000, blk.first, dtype=np.int64)  # type: ignore[attr-defined]


def test_a_results_arrays_hold_until_the_result_after_next() -> None:
    """blocks_in_workers' promise: a result's arrays (out of band, views of the shared slots) hold
    until the result after next is asked for, however far the workers have got meanwhile."""
    import time

    import numpy as np

    path = str(ROOT / "captures" / "rxe_write_bw_loss.pcap")
    it = blocks_in_workers(path, _array, (), workers=2, block_bytes=4096)
    held: list[tuple[np.ndarray, int]] = []
    count = 0
    for arr, _t0 in it:
        held.append((arr, int(arr[0])))
        time.sleep(0.01)  # the workers run ahead, into the free slots
        if len(held) == 2:  # the one before this one still holds
            before, first = held.pop(0)
            assert (before == first).all()
        count += 1
    assert count > 20


def test_results_come_back_through_shared_memory_or_the_pipe(monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker's result is pickled into its slot of the shared mapping and only its length comes
    back; one larger than a slot comes through the pool's pipe.  Either way the caller gets the
    renderer's results, in file order."""
    import mmap
    import pickle

    from rdmalab.capture import blockpool
    from rdmalab.capture.pcapio import PCAP_MAGICS

    path = str(ROOT / "captures" / "rxe_write_bw_loss.pcap")
    # in this process: _run with a mapping of two 64 KiB slots
    with open(path, "rb") as f:
        head = f.read(24)
    order, ns_mult = PCAP_MAGICS[head[:4]]
    w = blockpool._walk((path, 24, 4096, 24, order, ns_mult, Path(path).stat().st_size, 0))
    offs = w.offs - w.offs[0]
    shm = mmap.mmap(-1, 2 << 16)
    monkeypatch.setattr(blockpool, "_SLOTS", (shm, 1 << 16))
    for big, slot in ((10, 1), (1 << 15, 0)):  # a result of about 40 bytes, then one of about 200 KiB
        task = (slot, _sized, path, int(w.offs[0]), w.end, offs, 1, order, ns_mult, 1, -1, len(offs), 0.0, None, (big,))
        got = blockpool._run(task)
        want = _sized(type("B", (), {"first": 1})(), len(offs), 0.0, None, big)
        if big == 10:
            assert isinstance(got, blockpool._InSlot)
            assert pickle.loads(shm[slot << 16:(slot << 16) + got.size]) == want
        else:
            assert got == want  # too large for a slot: returned as it is
    monkeypatch.setattr(blockpool, "_SLOTS", None)
    shm.close()
    # through the pool: the first block's text is larger than a slot (16 MiB at this block size)
    got_all = [res for res, _t0 in blockpool.blocks_in_workers(path, _sized, ((17 << 20) // 2,), workers=2,
                                                                 block_bytes=4096)]
    firsts = [first for first, _ in got_all]
    assert firsts[0] == 1 and firsts == sorted(firsts) and len(got_all) > 20
    assert len(got_all[0][1]) > 16 << 20
    assert all(text == (b"%d;" % first) * 3 for first, text in got_all[1:])


def test_a_big_endian_microsecond_capture_in_workers(tmp_path: Path) -> None:
    """The workers' guesses and walks read the headers in the file's byte order and time unit."""
    import struct  # built by hand: rdmalab's writer writes little-endian files only

    import hostile  # tests/hostile.py

    frames = hostile.frames_of(ROOT / "captures" / "rxe_write_bw_loss.pcap") * 3
    p = tmp_path / "be.pcap"
    with open(p, "wb") as f:
        f.write(struct.pack(">IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        for t, d, w in frames:
            f.write(struct.pack(">IIII", t // 10**9, (t % 10**9) // 1000, len(d), w) + d)
    _all_ways(str(p), 4096)


# ---------------------------------------------------------------- a worker's error, or its death
# The workers send their errors back pickled.  rdmalab's errors take other arguments than their
# message (DecodeError's layer, field, offset...): they once failed to unpickle here, which killed
# multiprocessing.Pool's result thread and left the caller waiting forever.


def _malformed_at_frame_200(blk: object, n: int, t0: float, prev: float | None) -> int:
    from rdmalab.wire.errors import MalformedError

    first = blk.first  # type: ignore[attr-defined]
    if first <= 200 < first + n:
        raise MalformedError("BTH", "opcode", 7, 0x1F, "a defined opcode", detail=f"frame {first}..")
    return n


class _OwnError(Exception):
    """An error of a renderer that does not unpickle (its __init__ wants two arguments)."""

    def __init__(self, a: int, b: int) -> None:
        super().__init__(f"{a} and {b}")


def _own_error_at_frame_200(blk: object, n: int, t0: float, prev: float | None) -> int:
    first = blk.first  # type: ignore[attr-defined]
    if first <= 200 < first + n:
        raise _OwnError(3, 4)
    return n


def _dies_at_frame_200(blk: object, n: int, t0: float, prev: float | None) -> int:
    import os

    first = blk.first  # type: ignore[attr-defined]
    if first <= 200 < first + n:
        os._exit(3)
    return n


def _frames(blk: object, n: int, t0: float, prev: float | None) -> int:
    return n


def _all_blocks(render: Callable[..., int]) -> int:
    from rdmalab.capture.blockpool import blocks_in_workers

    path = str(ROOT / "captures" / "rxe_write_bw_loss.pcap")
    return sum(n for n, _t0 in blocks_in_workers(path, render, (), workers=2, block_bytes=4096))


@pytest.mark.timeout(120)
def test_a_decode_error_in_a_worker_comes_back_whole() -> None:
    from rdmalab.wire.errors import MalformedError

    with pytest.raises(MalformedError) as got:
        _all_blocks(_malformed_at_frame_200)
    err = got.value
    assert (err.layer, err.field, err.offset, err.value, err.expected) == ("BTH", "opcode", 7, 0x1F, "a defined opcode")
    assert str(err).startswith("malformed BTH.opcode at byte 7: got 31 (0x1f), expected a defined opcode (frame ")


@pytest.mark.timeout(120)
def test_an_error_that_would_not_unpickle_comes_back_in_words() -> None:
    with pytest.raises(RuntimeError, match=r"^_OwnError: 3 and 4$"):
        _all_blocks(_own_error_at_frame_200)


@pytest.mark.timeout(120)
def test_a_worker_that_dies_is_an_error_not_a_wait() -> None:
    from concurrent.futures.process import BrokenProcessPool

    from rdmalab.capture.blockpool import WorkerLost
    from rdmalab.wire.errors import RdmalabError

    with pytest.raises(WorkerLost, match=r"^a worker process ended without its result .*-j 1") as got:
        _all_blocks(_dies_at_frame_200)
    assert isinstance(got.value, RdmalabError)  # the command line prints it as one sentence
    assert isinstance(got.value.__cause__, BrokenProcessPool)
    # and the next run starts its own workers and reads every frame
    assert _all_blocks(_frames) == sum(1 for _ in read(ROOT / "captures" / "rxe_write_bw_loss.pcap"))


@pytest.mark.timeout(120)
def test_convert_loses_a_worker_in_words(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``convert -j`` (and the parallel column reader) share decode's pool: a worker that dies is a
    WorkerLost, which the command line prints as one sentence (exit 1), not a traceback."""
    import contextlib
    import io

    from rdmalab.capture import dataset
    from rdmalab.cli import main

    def dies(*args: object) -> object:
        import os

        os._exit(9)

    # the pool sends the function by name: this one is found under the old one's in the forked workers
    dies.__module__, dies.__qualname__ = dataset.__name__, "_convert_task"
    monkeypatch.setattr(dataset, "_convert_task", dies)
    caps = [str(ROOT / "captures" / "rxe_write_bw_loss.pcap"), str(ROOT / "captures" / "siw_write_bw.pcap")]
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        rc = main(["convert", *caps, "-o", str(tmp_path / "ds"), "-j", "2"])
    assert rc == 1
    assert err.getvalue().startswith("rdmalab: a worker process ended without its result"), err.getvalue()
    assert "Traceback" not in err.getvalue()


# ---------------------------------------------------------------- pcapng
# The workers follow the block lengths of their ranges of a pcapng file, given the section's byte
# order and interfaces, which this process reads first; a range that starts a section or describes
# an interface, or holds a damaged block, is read by the sequential reader from there on.


def _ng(btype: int, body: bytes, order: str = "<") -> bytes:
    import struct

    body += bytes(-len(body) % 4)
    return struct.pack(order + "II", btype, 12 + len(body)) + body + struct.pack(order + "I", 12 + len(body))


def _shb(order: str = "<") -> bytes:
    import struct

    return _ng(0x0A0D0D0A, struct.pack(order + "IHHq", 0x1A2B3C4D, 1, 0, -1), order)


def _idb(linktype: int = 1, tsresol: int | None = None, tsoffset: int | None = None, order: str = "<") -> bytes:
    import struct

    opts = b""
    if tsresol is not None:
        opts += struct.pack(order + "HHB3x", 9, 1, tsresol)
    if tsoffset is not None:
        opts += struct.pack(order + "HHq", 14, 8, tsoffset)
    if opts:
        opts += struct.pack(order + "HH", 0, 0)
    return _ng(1, struct.pack(order + "HHI", linktype, 0, 65535) + opts, order)


def _epb(iface: int, ticks: int, data: bytes, wire: int, order: str = "<", btype: int = 6) -> bytes:
    import struct

    if btype == 2:  # the obsolete packet block: a 16-bit interface, then a drops count
        head = struct.pack(order + "HHIIII", iface, 7, ticks >> 32, ticks & 0xFFFFFFFF, len(data), wire)
    else:
        head = struct.pack(order + "IIIII", iface, ticks >> 32, ticks & 0xFFFFFFFF, len(data), wire)
    return _ng(btype, head + data, order)


def _spb(data: bytes, order: str = "<") -> bytes:
    import struct

    return _ng(3, struct.pack(order + "I", len(data)) + data, order)


def _mixed_frames() -> list[tuple[int, bytes, int]]:
    """Real RoCE and iWARP frames (the iWARP ones are decoded in order by this process), in time order."""
    import hostile  # tests/hostile.py

    rxe = hostile.frames_of(ROOT / "captures" / "rxe_write_bw_loss.pcap")
    siw = hostile.frames_of(ROOT / "captures" / "siw_write_bw.pcap")
    shift = rxe[-1][0] - siw[0][0] + 1_000_000
    return rxe + [(t + shift, d, w) for t, d, w in siw]


def _one_section(frames: list[tuple[int, bytes, int]], order: str = "<") -> bytes:
    """Frames on two interfaces (nanoseconds; microseconds 100 s on), some in simple and obsolete
    packet blocks, with statistics and custom blocks between them."""
    out = [_shb(order), _idb(1, tsresol=9, order=order), _idb(1, tsoffset=100, order=order)]
    for i, (t, d, w) in enumerate(frames):
        if i % 97 == 50:
            out.append(_spb(d, order))
        elif i % 89 == 40:
            out.append(_epb(1, t // 1000 - 100_000_000, d, w, order, btype=2))
        elif i % 2:
            out.append(_epb(1, t // 1000 - 100_000_000, d, w, order))
        else:
            out.append(_epb(0, t, d, w, order))
        if i % 151 == 0:
            out.append(_ng(5, bytes(20), order))  # interface statistics: skipped
            out.append(_ng(0x40000BAD, b"rdmalab test", order))  # custom: skipped
    return b"".join(out)


def _seq_columns(path: str) -> list[list[object]]:
    from rdmalab.capture.pcapio import record_blocks

    cols: list[list[object]] = [[] for _ in range(7)]
    for blk in record_blocks(path, 1 << 20):
        for i, v in enumerate(_cols(blk, len(blk))):
            cols[i] += v
    return cols


def _cols(blk: object, n: int) -> list[list[object]]:
    b: object = blk
    data = [bytes(b.buf[o:o + c]) for o, c in zip(b.offset[:n].tolist(), b.caplen[:n].tolist(), strict=True)]  # type: ignore[attr-defined]
    return [data, b.wirelen[:n].tolist(), b.ts_ns[:n].tolist(), b.seconds()[:n].tolist(),  # type: ignore[attr-defined]
            b.linktype[:n].tolist(), b.interfaces()[:n].tolist(), list(range(b.first, b.first + n))]  # type: ignore[attr-defined]


def _cols_in_worker(blk: object, n: int, t0: float, prev: float | None) -> list[list[object]]:
    return _cols(blk, n)


def _par_columns(path: str, block_bytes: int = 4096, count: int | None = None) -> list[list[object]]:
    from rdmalab.capture.blockpool import blocks_in_workers

    cols: list[list[object]] = [[] for _ in range(7)]
    for res, _t0 in blocks_in_workers(path, _cols_in_worker, (), workers=2, block_bytes=block_bytes, count=count):
        for i, v in enumerate(res):
            cols[i] += v
    return cols


def _count_tails(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Where this process took the sequential reader (pcapng: a new section, a damaged block)."""
    from rdmalab.capture import blockpool

    calls: list[int] = []
    blocks = blockpool._pcapng_blocks

    def counted(*args: object, **kw: object) -> object:
        calls.append(kw["pos_file"])  # type: ignore[arg-type]
        return blocks(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(blockpool, "_pcapng_blocks", counted)
    return calls


def test_pcapng_records_times_and_interfaces_from_workers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every packet of a pcapng file of one section (two interfaces with their own time units and
    offsets; enhanced, simple and obsolete packet blocks; blocks of other kinds between them), either
    byte order, as the sequential reader gives it: bytes, lengths, times, link types, interfaces,
    frame numbers; read in the workers, not by the sequential reader."""
    frames = _mixed_frames()
    tails = _count_tails(monkeypatch)
    for order in "<>":
        p = tmp_path / f"one{order == '>'}.pcapng"
        p.write_bytes(_one_section(frames, order))
        assert parallel_capture(str(p))
        want = _seq_columns(str(p))
        assert len(want[0]) == len(frames) and set(want[5]) == {0, 1}
        assert _par_columns(str(p)) == want
        assert _par_columns(str(p), count=333) == [c[:333] for c in want]
    assert tails == []
    _all_ways(str(tmp_path / "one1.pcapng"), 4096)


@pytest.mark.parametrize("layout", ["interface", "section"])
def test_pcapng_sections_and_interfaces_added_later(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    layout: str) -> None:
    """An interface described after packets, then a second section in the other byte order with its
    own interfaces (times in 2^-20 s); or a second section in the same byte order whose two
    interfaces are as many as the first's but count time otherwise: this process reads on from the
    range that holds them, and the packets, text and JSON are the sequential reader's."""
    frames = _mixed_frames()
    a, b = frames[:300], frames[300:]
    if layout == "interface":
        data = (_one_section(a) + _idb(1, tsresol=6) + b"".join(_epb(2, t // 1000, d, w) for t, d, w in b[:40])
                + _shb(">") + _idb(1, tsresol=0x94, order=">")
                + b"".join(_epb(0, t * 2**20 // 10**9, d, w, ">") for t, d, w in b[40:]))
    else:
        data = (_one_section(a) + _shb() + _idb(1, tsoffset=-5) + _idb(1, tsresol=3)
                + b"".join(_epb(i % 2, t // 1000 + 5_000_000 if i % 2 == 0 else t // 1_000_000, d, w)
                           for i, (t, d, w) in enumerate(b)))
    p = tmp_path / "sections.pcapng"
    p.write_bytes(data)
    tails = _count_tails(monkeypatch)
    want = _seq_columns(str(p))
    assert len(want[0]) == len(frames) and (2 in want[5]) == (layout == "interface")
    assert _par_columns(str(p)) == want
    assert len(tails) == 1 and 0 < tails[0] < len(_one_section(a)) + 1  # at the new interface's range
    _all_ways(str(p), 4096)


def _udp_frame_at(payload: bytes, pad: int) -> bytes:
    return _udp_frame(bytes(pad) + payload)


def test_payloads_that_look_like_enhanced_packet_blocks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Frames whose data is a chain of enhanced packet blocks (lengths repeated at their ends, on a
    described interface, at offsets that are multiples of 4), all through the file: the workers'
    guesses land on them, this process finds out and follows the blocks itself; the text is the same."""
    frames = []
    for i, (t, d, w) in enumerate(_mixed_frames()[:400]):
        frames.append((t, d, w))
        if i % 3 == 0:
            # the payload starts 28 + 42 bytes into the block: 2 bytes more and the fakes are aligned
            fake = _udp_frame_at(b"".join(_epb(0, t, b"\x01" * 8, 8) for _ in range(40)), 2)
            frames.append((t + 1, fake, len(fake)))
    p = tmp_path / "fake_blocks.pcapng"
    p.write_bytes(_one_section(frames))
    walked = []
    from rdmalab.capture import blockpool

    walk = blockpool._walk_ng

    def counted(task: tuple[object, ...]) -> object:
        walked.append(task[1])
        return walk(task)

    counted.__module__, counted.__qualname__ = walk.__module__, walk.__qualname__
    monkeypatch.setattr(blockpool, "_walk_ng", counted)
    tails = _count_tails(monkeypatch)
    assert _par_columns(str(p)) == _seq_columns(str(p))
    assert walked, "no guess was wrong: the test did not test the check"
    assert tails == []
    _all_ways(str(p), 4096)


def _block_offsets(data: bytes) -> list[tuple[int, int]]:
    """(offset, type) of each block of a little-endian pcapng file."""
    import struct

    out, pos = [], 0
    while pos < len(data):
        btype, blen = struct.unpack_from("<II", data, pos)
        out.append((pos, btype))
        pos += blen
    return out


@pytest.mark.parametrize("damage", ["huge", "odd", "short", "caplen", "interface", "cut", "cut_header"])
def test_a_damaged_pcapng_block_in_workers(tmp_path: Path, damage: str) -> None:
    """A damaged block in the middle (or a file cut short): every packet before it comes out, then
    the sequential reader's error, at the same frame and byte, from workers as from one process."""
    import struct

    data = bytearray(_one_section(_mixed_frames()))
    packets = [pos for pos, btype in _block_offsets(bytes(data)) if btype == 6]
    at = packets[377]
    if damage == "huge":
        struct.pack_into("<I", data, at + 4, 0x7FFF_0000)
    elif damage == "odd":
        struct.pack_into("<I", data, at + 4, struct.unpack_from("<I", data, at + 4)[0] + 2)
    elif damage == "short":
        struct.pack_into("<I", data, at + 4, 24)
    elif damage == "caplen":
        struct.pack_into("<I", data, at + 20, 5000)
    elif damage == "interface":
        struct.pack_into("<I", data, at + 8, 7)
    elif damage == "cut":
        del data[at + 100:]
    else:
        del data[at + 4:]
    p = tmp_path / f"{damage}.pcapng"
    p.write_bytes(bytes(data))
    from rdmalab.capture.columnar_summary import summary_bytes

    one = _until_error(summary_bytes(str(p), workers=1, block_bytes=4096))
    assert ("is damaged" in one[1] or "is truncated" in one[1]) and f"byte {at}" in one[1], one[1]
    assert one[0].count("\n") == sum(1 for pos, _ in _block_offsets(bytes(data[:at])) if pos in set(packets)) + \
        sum(1 for pos, btype in _block_offsets(bytes(data[:at])) if btype in (2, 3))
    _all_ways(str(p), 4096)


def test_pcapng_counts_in_workers(tmp_path: Path) -> None:
    p = tmp_path / "counts.pcapng"
    p.write_bytes(_one_section(_mixed_frames()))
    from rdmalab.capture.columnar_summary import summary_bytes

    for count in (0, 1, 7, 150, 460):
        assert "".join(iter_json_file(str(p), workers=2, block_bytes=4096, count=count)) == _json_one(str(p), count)
        many = b"".join(summary_bytes(str(p), count=count, workers=2, block_bytes=4096, parallel_min_bytes=0))
        one = b"".join(summary_bytes(str(p), count=count, workers=1, block_bytes=4096))
        assert many == one and one.count(b"\n") == count


def test_which_pcapng_files_the_workers_read(tmp_path: Path) -> None:
    """Not a pcapng file of ERF records (their own times, read in order), nor one whose first
    blocks are damaged (the reader says what is wrong); blocks_in_workers, given such a file anyway,
    reads it with the sequential reader from the start."""
    import hostile  # tests/hostile.py

    from rdmalab.capture.linktypes import LINKTYPE_ERF

    frames = _mixed_frames()[:50]
    erf = tmp_path / "erf.pcapng"
    erf.write_bytes(_shb() + _idb(1) + _idb(LINKTYPE_ERF) + _epb(0, frames[0][0] // 1000, *frames[0][1:]))
    assert not parallel_capture(str(erf))
    # -T fields decodes frames of link types the columns do not read (BSD loopback) with the per-packet
    # decoder, in order; Linux cooked captures and raw IP the columns read, as Ethernet
    loop = tmp_path / "loop.pcapng"
    loop.write_bytes(_shb() + _idb(1) + _idb(0) + _epb(0, frames[0][0] // 1000, *frames[0][1:]))
    assert parallel_capture(str(loop)) and not parallel_capture(str(loop), ethernet=True)
    sll = tmp_path / "sll.pcapng"
    sll.write_bytes(_shb() + _idb(1) + _idb(113) + _idb(276) + _idb(101) + _idb(228) + _idb(229)
                    + _epb(0, frames[0][0] // 1000, *frames[0][1:]))
    assert parallel_capture(str(sll), ethernet=True)
    pcap = tmp_path / "a.pcap"
    hostile.write(pcap, frames)
    assert parallel_capture(str(pcap))
    bad = tmp_path / "bad_head.pcapng"
    idb = bytearray(_idb(1))
    idb[4:8] = (16).to_bytes(4, "little")  # an interface description of 16 bytes (at least 20)
    bad.write_bytes(_shb() + bytes(idb) + b"".join(_epb(0, t // 1000, d, w) for t, d, w in frames))
    assert not parallel_capture(str(bad))
    one = _until_error(summary_bytes_of(str(bad), 1))
    assert "interface description block at byte 28 has length 16" in one[1], one[1]
    from rdmalab.capture.blockpool import blocks_in_workers

    many = _until_error(str(n) for n, _t0 in blocks_in_workers(str(bad), _frames, (), workers=2, block_bytes=4096))
    assert many[1] == one[1]


def summary_bytes_of(path: str, workers: int) -> Iterable[bytes]:
    from rdmalab.capture.columnar_summary import summary_bytes

    return summary_bytes(path, workers=workers, block_bytes=4096, parallel_min_bytes=0)


def test_an_interface_of_erf_records_described_later(tmp_path: Path) -> None:
    """ERF records on an interface described after other packets (the sequential reader takes that
    range on): their frames' times are the records' own, and so are the time deltas of the frames
    after them in the JSON (left to this process), in workers as in one process; the summary lines
    too."""
    import hostile  # tests/hostile.py

    from rdmalab.capture.columnar_summary import summary_bytes
    from rdmalab.capture.linktypes import LINKTYPE_ERF

    erf = hostile.frames_of(ROOT / "captures" / "hw_ib_connectx_erf.pcap")
    frames = _mixed_frames()[:300]
    p = tmp_path / "erf_later.pcapng"
    p.write_bytes(_one_section(frames) + _idb(LINKTYPE_ERF, tsresol=9) + b"".join(_epb(2, t, d, w) for t, d, w in erf)
                  + b"".join(_epb(0, t, d, w) for t, d, w in frames[:60]) + b"".join(_epb(2, t, d, w) for t, d, w in erf))
    assert parallel_capture(str(p)) and parallel_capture(str(p), ethernet=True)  # told only by its first section
    one = _json_one(str(p))
    assert one.count('"frame.time_delta"') == len(frames) + 60 + 2 * len(erf)
    assert "".join(iter_json_file(str(p), workers=2, block_bytes=4096)) == one
    runs = [_until_error(summary_bytes(str(p), workers=w, block_bytes=4096, parallel_min_bytes=0)) for w in (1, 2)]
    assert runs[0] == runs[1] and not runs[0][1] and runs[0][0].count("\n") == len(frames) + 60 + 2 * len(erf)
    # -T fields: the per-packet decoder from the block of the first ERF record on, as iter_columns has it
    # (which block that is depends on the block boundaries: the lines from that record on are compared)
    from rdmalab.capture.fieldtext import field_text

    names = ["frame.number", "frame.time_epoch", "frame.len", "infiniband.bth.psn", "ip.src"]
    many, one = (b"".join(field_text(str(p), names, workers=w, block_bytes=4096, parallel_min_bytes=0)).splitlines()
                 for w in (2, 1))
    assert len(many) == len(one) == len(frames) + 60 + 2 * len(erf)
    assert many[len(frames):] == one[len(frames):]
    assert many[len(frames)].split(b"\t")[3]  # an ERF record's PSN (the columnar decoder has none)


def test_decode_json_uses_the_workers_from_a_few_megabytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """``decode -T json -j 2`` hands a file of JSON_PARALLEL_MIN_BYTES or more to the workers (JSON costs
    enough a frame to pay for their start-up), and its text is one process's; a smaller file stays here."""
    from rdmalab.capture import blockpool, json_blocks, records
    from rdmalab.capture.pcapwriter import CaptureWriter
    from rdmalab.cli import main

    src = str(ROOT / "captures" / "rxe_write_bw.pcap")
    recs = list(records(src))
    big = tmp_path / "big.pcap"
    with CaptureWriter(str(big), nano=True) as w:
        while big.stat().st_size < blockpool.JSON_PARALLEL_MIN_BYTES:
            for r in recs:
                w.write(r.data, int(r.timestamp * 1e9))
            w.flush()
    small = tmp_path / "small.pcap"
    with CaptureWriter(str(small), nano=True) as w:
        for r in recs:
            w.write(r.data, int(r.timestamp * 1e9))
    used: list[int] = []
    real = json_blocks.blocks_in_workers

    def spy(*a: object, **k: object) -> object:
        used.append(int(k["workers"]))  # type: ignore[call-overload]
        return real(*a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(json_blocks, "blocks_in_workers", spy)
    for path, want in ((big, [2]), (small, [])):
        used.clear()
        assert main(["decode", "-T", "json", "-j", "2", "-r", str(path)]) == 0
        text = capsys.readouterr().out
        assert used == want, path.name
        # one process's text: the command's own (with the TCP analysis its main process adds)
        assert main(["decode", "-T", "json", "-j", "1", "-r", str(path)]) == 0
        assert text == capsys.readouterr().out, path.name


@pytest.mark.timeout(120)
def test_a_render_function_that_does_not_pickle_is_an_error_not_a_wait() -> None:
    """A render function the workers cannot be given (not at a module's top level) is refused in one
    sentence before any worker starts; it used to leave the caller waiting for ever."""
    from rdmalab.capture.blockpool import blocks_in_workers

    def render(*_: object) -> int:  # local: does not pickle
        return 1

    with pytest.raises(TypeError, match="must pickle to reach the worker processes"):
        next(iter(blocks_in_workers(CAPTURES[0], render, (), workers=2, block_bytes=1 << 16)))
    with pytest.raises(TypeError, match="render"):
        next(iter(blocks_in_workers(CAPTURES[0], _json_one, (lambda: 0,), workers=2, block_bytes=1 << 16)))


CONVERSATION_NAMES = ["frame.number", "tcp.stream", "udp.stream", "tcp.seq", "tcp.ack", "tcp.nxtseq", "ip.addr",
                      "udp.port", "infiniband.bth.psn", "frame.time_delta"]


@pytest.mark.parametrize("expr", [None, "tcp.stream == 1 || udp.stream == 0", "udp.stream == 2 || tcp.seq > 1000"])
def test_fields_of_the_conversations_in_workers(tmp_path: Path, expr: str | None, monkeypatch: Any) -> None:
    """-T fields of the conversations' fields (followed in order) with the blocks decoded in workers:
    the same text as one process, on captures appended (RoCEv2 with rdma_cm, iWARP, the ICMP errors
    that quote RoCEv2 datagrams: conversations counted from the quotes), blocks cut anywhere, with a
    filter on them, and on a capture cut mid-record (every frame before the cut, then the same error)."""
    import hostile  # tests/hostile.py

    from rdmalab.capture import fieldtext
    from rdmalab.capture.fieldtext import field_text

    in_workers: list[str] = []
    real = fieldtext._conversations_text
    monkeypatch.setattr(fieldtext, "_conversations_text", lambda p, *a: in_workers.append(p) or real(p, *a))
    frames = [f for name in ("rxe_rping.pcap", "lo_icmp_unreachable.pcap", "siw_rping.pcap", "rxe_write_bw_loss.pcap")
              for f in hostile.frames_of(ROOT / "captures" / name)]
    whole = tmp_path / "appended.pcap"
    hostile.write(whole, frames)
    cut = tmp_path / "cut.pcap"
    cut.write_bytes(whole.read_bytes()[:-300])
    for path in (whole, cut):
        for block in (4096, 1 << 20):
            one = _until_error(field_text(str(path), CONVERSATION_NAMES, filter_expr=expr, workers=1))
            many = _until_error(field_text(str(path), CONVERSATION_NAMES, filter_expr=expr, workers=2,
                                           block_bytes=block, parallel_min_bytes=0))
            assert many == one, (path.name, block)
            assert one[0].count("\n") > (300 if expr is None else 10)
            assert ("truncated mid-record" in one[1]) == (path == cut)
    assert len(in_workers) == 4  # the workers' path was taken (and not by one process)


@pytest.mark.parametrize("expr", ["tcp.stream == 1 || udp.stream == 0", "tcp.analysis.retransmission",
                                  "tcp.analysis.bytes_in_flight > 100 || tcp.seq == 1", "tcp.analysis.ack_rtt"])
def test_summaries_filtered_on_the_conversations_in_workers(tmp_path: Path, expr: str, monkeypatch: Any) -> None:
    """Summary lines with a filter on the conversations or the TCP analysis (followed in order, in the
    process beside the workers, which also runs the filter on each block's columns) with the lines written
    in workers: the same lines as one process, on captures appended (lossy RoCE, iWARP, ICMP errors), blocks
    cut anywhere, and on a capture cut mid-record (every line kept before the cut, then the same error)."""
    import hostile  # tests/hostile.py

    from rdmalab.capture import blockpool as bp
    from rdmalab.capture import columnar_summary
    from rdmalab.capture.filter import compile_filter

    used: list[int] = []
    real = bp.blocks_in_workers
    monkeypatch.setattr(columnar_summary, "blocks_in_workers", lambda *a, **k: used.append(k["workers"]) or real(*a, **k))
    frames = [f for name in ("siw_write_bw.pcap", "rxe_write_bw_loss.pcap", "lo_icmp_unreachable.pcap", "siw_rping.pcap")
              for f in hostile.frames_of(ROOT / "captures" / name)]
    whole = tmp_path / "appended.pcap"
    hostile.write(whole, frames)
    cut = tmp_path / "cut.pcap"
    cut.write_bytes(whole.read_bytes()[:-300])
    flt = compile_filter(expr)
    for path in (whole, cut):
        before = len(used)
        one = _until_error(columnar_summary.summary_bytes(str(path), flt=flt, filter_expr=expr, workers=1))
        assert len(used) == before
        for block in (4096, 1 << 20):
            many = _until_error(columnar_summary.summary_bytes(str(path), flt=flt, filter_expr=expr, workers=2,
                                                               block_bytes=block, parallel_min_bytes=0))
            assert many == one, (path.name, block)
        assert one[0].count("\n") > 2
        assert ("truncated mid-record" in one[1]) == (path == cut)
    assert used == [2, 2, 2, 2]


def test_a_pcapng_block_whose_lengths_disagree_in_workers(tmp_path: Path) -> None:
    """A packet block in the middle whose length at its end is not the one at its start (pcapng 3.1; tshark
    refuses such a file): every frame before it, then the reader's error naming it, from two workers as from
    one process (a worker's walk took the block as sound)."""
    import struct

    import hostile  # tests/hostile.py
    from test_pcapio import _to_pcapng  # (the walker's own tests' conversion)

    frames = hostile.frames_of(ROOT / "captures" / "rxe_write_bw_loss.pcap")
    plain = tmp_path / "twice.pcap"
    hostile.write(plain, frames + frames)
    p = _to_pcapng(str(plain), tmp_path / "damaged.pcapng")
    data = bytearray(p.read_bytes())
    pos, n = 0, 0
    while True:  # the enhanced packet block of frame len(frames) + 38
        btype, blen = struct.unpack_from("<II", data, pos)
        n += btype == 6
        if n == len(frames) + 38:
            break
        pos += blen
    struct.pack_into("<I", data, pos + blen - 4, blen + 8)
    p.write_bytes(bytes(data))
    from rdmalab.capture.columnar_summary import summary_bytes

    one = _until_error(summary_bytes(str(p), workers=1, block_bytes=4096))
    assert f"block at byte {pos} has length {blen} at its start and {blen + 8} at its end" in one[1], one[1]
    assert one[0].count("\n") == len(frames) + 37
    _all_ways(str(p), 4096)
