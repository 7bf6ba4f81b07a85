"""Soft engine speed: RDMA WRITE throughput against a plain memory copy, and small SENDs per second.

Not a test: it prints figures.  Setup: two soft devices, a fault-free fabric, path MTU 4096,
1 MiB RDMA WRITEs (256 packets each), trace off, nobody tapping.  Three modes are measured:

* ``burst``      the default when nothing observes the traffic: the requester hands the fabric a
                 run of up to 128 consecutive packets of one message (rxe's window of unacknowledged PSNs,
                 RXE_MAX_UNACKED_PSNS) as one object; the responder
                 checks the first and last packet in full and copies the middle ones in one
                 memoryview assignment.  No frame bytes or ICRCs are computed (nobody looks).
* ``per-packet`` ``Fabric(bursts=False)``: one Python object per 4 KiB packet, still no frames.
* ``frames``     ``Fabric(frames=True)``: every packet encoded as a real RoCEv2 frame with its
                 ICRC and decoded again at the receiver (what a tap or pcap costs, and more).

The ratio is engine bytes/s divided by ``bytearray`` slice-assignment (memcpy) bytes/s of the
same 1 MiB buffers in the same run.  Run: ``python benchmarks/bench_engine.py``.
"""

from __future__ import annotations

import time

import rdmalab.verbs.enums as e
from rdmalab.fabric import Fabric
from rdmalab.fabric.harness import Pair

MIB = 1 << 20


def memcpy_rate(reps: int = 400) -> float:
    src, dst = bytearray(b"x" * MIB), bytearray(MIB)
    dst[:] = src
    t = time.perf_counter()
    for _ in range(reps):
        dst[:] = src
    return reps * MIB / (time.perf_counter() - t)


def write_rate(fabric: Fabric, messages: int) -> float:
    p = Pair(fabric, size=MIB, path_mtu=e.IBV_MTU_4096, timeout=14, max_rd_atomic=16)
    p.a.mr.write(b"y" * MIB, MIB)
    for _ in range(2):  # warm up
        p.send(p.a, e.IBV_WR_RDMA_WRITE, length=MIB)
        p.wait(p.a.cq)
    t = time.perf_counter()
    for i in range(messages):
        p.send(p.a, e.IBV_WR_RDMA_WRITE, length=MIB, wr_id=i)
        if i % 8 == 7:
            p.wait(p.a.cq, 8)
    elapsed = time.perf_counter() - t
    assert p.b.mr.read(16, MIB - 16) == b"y" * 16
    return messages * MIB / elapsed


def send_rate(messages: int) -> float:
    p = Pair(Fabric(trace=False), size=1 << 16, path_mtu=e.IBV_MTU_4096)
    t = time.perf_counter()
    batch = 256
    for start in range(0, messages, batch):
        for i in range(batch):
            p.b.recv(wr_id=i, offset=64 * i, length=64)
        for i in range(batch):
            p.send(p.a, e.IBV_WR_SEND, length=64, wr_id=start + i, flags=e.IBV_SEND_SIGNALED if i == batch - 1 else 0)
        p.wait(p.a.cq, 1)
        assert len(p.wait(p.b.cq, batch)) == batch
    return messages / (time.perf_counter() - t)


def main() -> None:
    copy = memcpy_rate()
    print(f"memcpy (bytearray slice assignment, 1 MiB): {copy / 1e9:8.2f} GB/s")
    for name, fab, n in (("burst", Fabric(trace=False, mtu=4096), 200),
                         ("per-packet", Fabric(trace=False, mtu=4096, bursts=False), 40),
                         ("frames", Fabric(trace=False, mtu=4096, frames=True), 8)):
        rate = write_rate(fab, n)
        print(f"RDMA WRITE 1 MiB, MTU 4096, {name:<10}: {rate / 1e9:8.3f} GB/s   ratio to memcpy {rate / copy:6.3f}")
    copy2 = memcpy_rate()
    print(f"memcpy again (drift check): {copy2 / 1e9:8.2f} GB/s")
    print(f"small SENDs (64 B, RC, trace off): {send_rate(20_000):,.0f} messages/s")


if __name__ == "__main__":
    main()
