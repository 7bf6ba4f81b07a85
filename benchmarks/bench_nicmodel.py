"""The NIC model's figures beside the papers': message rate and latency in virtual time, ConnectX-3 defaults.

    python benchmarks/bench_nicmodel.py [--messages 3000] [--quick]

Each table varies one thing the papers vary, on two devices of the simulated fabric with
``NicModel.connectx3()`` (rdmalab.fabric.nicbench: RC WRITEs of 32 bytes, 128 outstanding per QP unless
said otherwise), and names the paper's figure or section whose ordering it follows.  The papers measured
real ConnectX-3 NICs with many client threads; the model is one NIC pair and reproduces the *orderings*
(which option wins and roughly by how much), not the papers' absolute numbers.  docs/nic-model.md
keeps the figures of the last run.
"""

from __future__ import annotations

import argparse
import time

from rdmalab.fabric import nicbench as nb
from rdmalab.verbs.engine.nicmodel import NicModel


def table(title: str, source: str, head: tuple[str, ...], rows: list[tuple[object, ...]]) -> None:
    print(f"\n## {title}\n({source})\n")
    print(" | ".join(head))
    print(" | ".join("---" for _ in head))
    for r in rows:
        print(" | ".join(f"{v:.2f}" if isinstance(v, float) else str(v) for v in r))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=3000)
    ap.add_argument("--quick", action="store_true", help="fewer points (the QP sweep stops at 512)")
    a = ap.parse_args()
    m = NicModel.connectx3()
    n = a.messages
    t0 = time.monotonic()
    print(f"# NIC model {m.name}: PCIe {m.pcie_bytes_per_ns} B/ns per direction, {m.processing_units} PUs, "
          f"QP cache {m.qp_cache}, link {m.link_gbps} Gb/s")

    rows = []
    for size in (8, 32, 64, 128, 256):
        plain, inl = nb.rate(m, size=size, messages=n), nb.rate(m, size=size, inline=True, messages=n)
        rows.append((size, plain.mops, inl.mops, inl.mops / plain.mops, nb.latency(m, size=size, samples=10),
                     nb.latency(m, size=size, inline=True, samples=10)))
    for size in (1024, 4096, 16384):
        plain = nb.rate(m, size=size, messages=max(200, n // 10))
        rows.append((size, plain.mops, "-", "-", nb.latency(m, size=size, samples=10), "- (> max_inline)"))
    table("Inline vs non-inline WRITEs", "Kalia et al. ATC'16 §3.2 (inlining saves the payload's DMA read); "
          "HERD SIGCOMM'14 §3 (inlined WRITEs are faster for small payloads)",
          ("size B", "Mops", "Mops inline", "gain", "latency ns", "latency ns inline"), rows)

    base = nb.rate(m, messages=n).mops
    rows = [(b, r.mops, r.mops / base) for b in (1, 2, 4, 8, 16, 32) for r in [nb.rate(m, batch=b, messages=n)]]
    table("Doorbell batching (chains of b WRITEs, one post_send each)",
          "Kalia et al. ATC'16 §3.1 (Doorbell batching: one MMIO and one WQE DMA read per batch)",
          ("batch", "Mops", "vs batch 1"), rows)

    rows = [(s, r.mops, r.mops / base) for s in (1, 4, 16, 64) for r in [nb.rate(m, signal_every=s, messages=n)]]
    table("Selective signaling (one signaled WRITE in s)",
          "Kalia et al. ATC'16 §3.2 / HERD §4 (unsignaled WRs write no CQE)", ("signal every", "Mops", "vs 1"), rows)

    best = nb.rate(m, inline=True, batch=16, signal_every=16, messages=n)
    table("All three", "Kalia et al. ATC'16 §3 (the guidelines combined)", ("", "Mops", "vs none"),
          [("none", base, 1.0), ("inline + batch 16 + signal 1/16", best.mops, best.mops / base)])

    rows = []
    for q in (1, 16, 64, 128, 256, 384, 512) + (() if a.quick else (1024,)):
        r = nb.rate(m, qps=q, depth=8, messages=max(2048, 4 * q))
        rows.append((q, r.mops))
    table(f"QPs sharing the NIC (QP-context cache {m.qp_cache}, 8 outstanding per QP)",
          "FaRM NSDI'14 §3 and Kalia et al. ATC'16 §3.4: throughput falls once the active QPs' contexts "
          "outgrow the NIC's cache", ("QPs", "Mops"), rows)
    print(f"\n({time.monotonic() - t0:.0f} s of wall time)")


if __name__ == "__main__":
    main()
