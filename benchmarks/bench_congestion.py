"""Switched-fabric speed: packet events per second, and one simulated second of 2:1 incast.

Not a test: it prints figures.  Setup: the ``incast`` scenario of ``rdmalab simulate`` (two
senders, one switch, 40 Gb/s links of 1 us, the ns3-rdma DCQCN constants, ECN and PFC on),
capture off, for ``--duration`` ms of simulated time (default 1000: one second, as the DCQCN
author's ns3-rdma sample runs).  Figures:

* events/s: every event the fabric's loop ran (packet departures and arrivals, flow pacing,
  DCQCN timers, samples), per wall-clock second on one core;
* packets/s: frames that crossed a link (each costs one to three events);
* wall time per simulated second;
* the same number of timestamps pushed and popped through a bare ``heapq`` loop calling an
  empty function, with the same heap size: the floor for an event simulator in Python; the
  ratio says how much work per event the fabric adds on top.

``--capture`` also times a short run with every frame built and written to a pcap.
Run: ``python benchmarks/bench_congestion.py [--duration MS] [--capture]``.
"""

from __future__ import annotations

import argparse
import heapq
import os
import random
import tempfile
import time

from rdmalab.fabric.scenarios import run


def bare_loop(events: int, heap_size: int, seed: int = 1) -> float:
    """Seconds to pop ``events`` timestamps (pushing one for each) through a heapq of ``heap_size``."""
    rng = random.Random(seed)

    def nothing(_: object) -> None:
        return None

    q: list[tuple[float, int, object, object]] = [(rng.random() * 1000.0, i, nothing, None) for i in range(heap_size)]
    heapq.heapify(q)
    seq = heap_size
    deltas = [rng.random() * 1000.0 for _ in range(4096)]
    pop, push = heapq.heappop, heapq.heappush
    t = time.perf_counter()
    for i in range(events):
        ev = pop(q)
        ev[2](ev[3])
        seq += 1
        push(q, (ev[0] + deltas[i & 4095], seq, nothing, None))
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=1000.0, help="simulated ms (default 1000)")
    ap.add_argument("--capture", action="store_true", help="also time a 5 ms run writing every frame to a pcap")
    args = ap.parse_args()

    t = time.perf_counter()
    res = run("incast", senders=2, rate=40.0, duration_ms=args.duration)
    wall = time.perf_counter() - t
    fab = res.fabric
    pkts = sum(p.tx_pkts for n in fab.nodes for p in n.ports)
    heap = len(fab._q)
    bare = bare_loop(fab.events, max(heap, 8))
    print(f"2:1 incast at 40 Gb/s, {args.duration:g} ms simulated (capture off), one core")
    print(f"  events              {fab.events:>12,d}")
    print(f"  packets on links    {pkts:>12,d}  ({fab.events / pkts:.2f} events per packet)")
    print(f"  wall time           {wall:>12.2f} s   ({wall / (args.duration / 1000):.2f} s per simulated second)")
    print(f"  events/s            {fab.events / wall:>12,.0f}")
    print(f"  packets/s           {pkts / wall:>12,.0f}")
    print(f"  bare heapq loop     {fab.events / bare:>12,.0f} events/s (same count, heap of {max(heap, 8)})")
    print(f"  fabric / bare       {bare / wall:>12.3f}   (share of the bare loop's speed)")
    flows = res.to_json()["flows"]
    print("  goodput (2nd half)  " + ", ".join(f"{f['name']} {f['goodput_gbps']:.2f} Gb/s" for f in flows))
    if args.capture:
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "incast.pcap")
            t = time.perf_counter()
            cap = run("incast", senders=2, rate=40.0, duration_ms=5.0, capture=path)
            w = time.perf_counter() - t
            n = cap.extra["captured_frames"]
            print(f"with capture: 5 ms simulated in {w:.2f} s, {n:,d} frames written "
                  f"({cap.fabric.events / w:,.0f} events/s, {os.path.getsize(path) / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
