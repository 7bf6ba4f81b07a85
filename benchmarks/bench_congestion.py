"""Switched-fabric speed: packet events per second in a 2:1 incast whose flows are engine QPs.

Not a test: it prints figures.  Setup: the ``incast`` scenario of ``rdmalab simulate`` (two
senders, one switch, 40 Gb/s links of 1 us, the ns3-rdma DCQCN constants, ECN and PFC on),
capture off, for ``--duration`` ms of simulated time (default 50; the DCQCN author's ns3-rdma
sample runs one second, ``--duration 1000``).  Every flow is an RC QP pair of the soft verbs
engine: each data packet is built by its requester, paced by its DCQCN reaction point, taken by
the receiver's responder, and ACKed.  Figures:

* events/s: every event the fabric's loop ran (packet departures and arrivals, the engine's
  pacing and DCQCN timers, samples), per wall-clock second on one core;
* packets/s: frames that crossed a link, and the wall time per data packet delivered;
* wall time per simulated second;
* the same number of timestamps pushed and popped through a bare ``heapq`` loop calling an
  empty function, with the same heap size, in the same run: the floor for an event simulator in
  Python; the ratio says how much work per event the fabric and the engine add on top.

``--previous DIR`` runs the same incast with the rdmalab in ``DIR`` (a git worktree of an earlier
commit, e.g. the last release whose fabric had its own simplified RC sender) in a subprocess,
and prints its figures beside these.  ``--capture`` also times a short run with every frame
built and written to a pcap.
Run: ``python benchmarks/bench_congestion.py [--duration MS] [--previous DIR] [--capture]``.
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# the rdmalab of this checkout (or, for --previous, of the tree named in RDMALAB_BENCH_TREE), not an installed one
_ROOT = os.environ.get("RDMALAB_BENCH_TREE") or str(Path(__file__).resolve().parent.parent)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

import rdmalab  # noqa: E402

try:
    from rdmalab.fabric.congestion_scenarios import run_scenario
except ImportError:  # --previous: a tree from before the function had this name, or the module
    try:
        from rdmalab.fabric.congestion_scenarios import run as run_scenario  # type: ignore[attr-defined,no-redef]
    except ImportError:
        from rdmalab.fabric.scenarios import run as run_scenario  # type: ignore[no-redef]  # noqa: E402


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


def measure(duration_ms: float) -> dict[str, float]:
    """Run the 2:1 incast and the bare loop with the same event count; the figures as a dict."""
    t = time.perf_counter()
    res = run_scenario("incast", senders=2, rate=40.0, duration_ms=duration_ms)
    wall = time.perf_counter() - t
    fab = res.fabric
    pkts = sum(p.tx_pkts for n in fab.nodes for p in n.ports)
    data = sum(getattr(f, "pkts_rcvd", 0) for f in fab.flows)
    # (the events waiting in its loop; a tree from before rdmalab.fabric.loop kept them in fab._q)
    heap = max(fab.loop.pending if hasattr(fab, "loop") else len(fab._q), 8)
    bare = bare_loop(fab.events, heap)
    flows = res.to_json()["flows"]
    return {"duration_ms": duration_ms, "events": fab.events, "packets": pkts, "data_packets": data, "wall": wall,
            "bare": bare, "heap": heap, "goodput": [f["goodput_gbps"] for f in flows],  # type: ignore[dict-item]
            "tree": str(Path(rdmalab.__file__).resolve().parent.parent)}  # type: ignore[dict-item]


def show(label: str, m: dict[str, float]) -> None:
    ev, pk, wall, bare = m["events"], m["packets"], m["wall"], m["bare"]
    print(f"{label}: 2:1 incast at 40 Gb/s, {m['duration_ms']:g} ms simulated (capture off), one core")
    print(f"  rdmalab from        {m['tree']}")
    print(f"  events              {ev:>12,.0f}")
    print(f"  packets on links    {pk:>12,.0f}  ({ev / pk:.2f} events per packet)")
    print(f"  wall time           {wall:>12.2f} s   ({wall / (m['duration_ms'] / 1000):.1f} s per simulated second)")
    if m["data_packets"]:
        print(f"  per data packet     {wall / m['data_packets'] * 1e6:>12.1f} us of wall time (requester to responder)")
    print(f"  events/s            {ev / wall:>12,.0f}")
    print(f"  packets/s           {pk / wall:>12,.0f}")
    print(f"  bare heapq loop     {ev / bare:>12,.0f} events/s (same count, heap of {m['heap']:.0f}, same run)")
    print(f"  fabric / bare       {bare / wall:>12.3f}   (share of the bare loop's speed)")
    print("  goodput (2nd half)  " + ", ".join(f"{g:.2f}" for g in m["goodput"]) + " Gb/s")  # type: ignore[attr-defined]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=50.0, help="simulated ms (default 50)")
    ap.add_argument("--previous", metavar="DIR", help="also run the incast with the rdmalab in DIR (a worktree)")
    ap.add_argument("--capture", action="store_true", help="also time a 5 ms run writing every frame to a pcap")
    ap.add_argument("--json", action="store_true", help=argparse.SUPPRESS)  # one measurement as JSON (--previous)
    args = ap.parse_args()

    if args.json:
        print(json.dumps(measure(args.duration)))
        return
    now = measure(args.duration)
    show("this tree (flows are engine QPs)", now)
    if args.previous:
        env = dict(os.environ, RDMALAB_BENCH_TREE=os.path.abspath(args.previous))
        out = subprocess.run([sys.executable, os.path.abspath(__file__), "--duration", str(args.duration), "--json"],
                             cwd=os.path.abspath(args.previous), env=env, capture_output=True, text=True, check=True)
        old = json.loads(out.stdout.strip().splitlines()[-1])
        show(f"previous ({args.previous})", old)
        print(f"wall time, this tree / previous: {now['wall'] / old['wall']:.2f}x; share of the bare loop "
              f"{now['bare'] / now['wall']:.3f} against {old['bare'] / old['wall']:.3f}")
    if args.capture:
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "incast.pcap")
            t = time.perf_counter()
            cap = run_scenario("incast", senders=2, rate=40.0, duration_ms=5.0, capture=path)
            w = time.perf_counter() - t
            n = cap.extra["captured_frames"]
            print(f"with capture: 5 ms simulated in {w:.2f} s, {n:,d} frames written "
                  f"({cap.fabric.events / w:,.0f} events/s, {os.path.getsize(path) / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
