"""The fabrics' capture taps write through rdmalab.capture.pcapwriter: what they write is what
went on the wire, at the time it went.  (The switched fabric's tap: test_congestion_engine reads
its file with dpkt's reader.)"""

from __future__ import annotations

import io
import time
from pathlib import Path

from test_sim import mixed_run
from test_udp import _Recorder, _write_first

from rdmalab.capture.pcapio import record_blocks
from rdmalab.fabric.sim import Fabric
from rdmalab.fabric.udp import UdpFabric


def _records(data: bytes, tmp: Path) -> list[tuple[int, bytes, int]]:
    p = tmp / "t.pcap"
    p.write_bytes(data)
    return [(t, bytes(b.buf[o:o + c]), w) for b in record_blocks(p)
            for o, c, w, t in zip(b.offset.tolist(), b.caplen.tolist(), b.wirelen.tolist(), b.ts_ns.tolist(),
                                  strict=True)]


def test_sim_tap_writes_each_frame_at_its_virtual_time(tmp_path: Path) -> None:
    fab = Fabric(seed=2)
    seen: list[tuple[int, bytes]] = []
    fab.tap(lambda t, s, d, fr: seen.append((t, bytes(fr))))
    buf = io.BytesIO()
    with fab.write_pcap(buf) as tap:
        mixed_run(fab)
    assert not buf.closed  # a file object is the caller's
    got = _records(buf.getvalue(), tmp_path)
    assert len(got) == tap.count == len(seen) > 10
    assert [(t, d) for t, d, _ in got] == seen
    assert buf.getvalue()[:4] == b"\x4d\x3c\xb2\xa1"  # nanosecond pcap
    tap.close()  # twice is harmless


def test_udp_tap_writes_each_datagram_as_an_ethernet_frame_at_wall_clock_time(tmp_path: Path) -> None:
    fab = UdpFabric.__new__(UdpFabric)
    fab._init_state(seed=1)
    fab._raw = rec = _Recorder()  # type: ignore[assignment]
    buf = io.BytesIO()
    fab.write_pcap(buf)
    p = _write_first(b"hello")
    p.src_mac, p.dst_mac = 0x020000000001, 0x020000000002
    before = time.time_ns()
    fab.send(None, p)  # type: ignore[arg-type]
    after = time.time_ns()
    assert fab._pcap is not None
    fab._pcap.flush()
    (t, frame, wire), = _records(buf.getvalue(), tmp_path)
    (datagram, _addr), = rec.sent
    assert frame == bytes.fromhex("020000000002" "020000000001" "0800") + datagram and wire == len(frame)
    assert before <= t <= after
