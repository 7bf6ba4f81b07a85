"""The NIC model's figures beside the papers': message rate and latency in virtual time, ConnectX-3 defaults.

    python benchmarks/bench_nicmodel.py [--messages 3000] [--quick]

Each table varies one thing the papers vary, on two devices of the simulated fabric with
``NicModel.connectx3()`` (rdmalab.fabric.nicbench: RC WRITEs of 32 bytes, 128 outstanding per QP unless
said otherwise), and is followed by the published figures for the same ordering (``PUBLISHED`` below:
each with its paper, section and figure, the setup it was measured on, and its numbers), with our gain
printed beside the paper's.  The papers measured real NICs (mostly Connect-IB, some ConnectX-3) with many
client threads and machines; the model is one NIC pair and one program, so the comparison is of
direction and size of effect, not of absolute rates.  docs/nic-model.md keeps the figures of the last run.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from dataclasses import dataclass

from rdmalab.fabric import nicbench as nb
from rdmalab.verbs.engine.nicmodel import NicModel


@dataclass(frozen=True)
class Published:
    """One published figure beside which a row of ours is printed.

    ``without`` and ``with_`` are the paper's numbers (in ``unit``) without and with the optimization;
    ``None`` when the paper gives no number for it (``note`` says what it gives instead)."""

    ordering: str
    paper: str
    where: str
    setup: str
    without: float | None
    with_: float | None
    unit: str
    note: str = ""

    @property
    def gain(self) -> float | None:
        """with / without, when the paper gives both."""
        if self.without is None or self.with_ is None:
            return None
        return self.with_ / self.without


ATC16 = "Kalia, Kaminsky, Andersen, USENIX ATC'16"
HERD14 = "Kalia, Kaminsky, Andersen (HERD), SIGCOMM'14"

#: The published figures, as read from the papers (the numbers are the papers'; the wording is ours).
#: CX3 = the ConnectX-3 cluster, CIB = the Connect-IB cluster of ATC'16 Table 2.
PUBLISHED: tuple[Published, ...] = (
    Published("inline", ATC16, "§5.2.2, Table 5 (footnote)",
              "CX3, UD RECVs of regular SENDs; inline-receive puts a small payload in the CQE (1 DMA, not 2)",
              22.0, 26.0, "Mops",
              "the nearest figure found: inline *receive*; for inline sends ATC'16 inlines every small WRITE "
              "and SEND (§2.2.3) and prints no with/without pair"),
    Published("inline", HERD14, "§3, Fig. 2 (latency: WRITE vs WR-INLINE)", "ConnectX-3, small payloads",
              None, None, "us", "not read: the figure (as a public reproduction indexes it) was not "
              "available to us"),
    Published("batching", ATC16, "§5.2.1, Fig. 11a", "CIB, UD SENDs, batches of 16 (Doorbell) vs one "
              "WQE-by-MMIO each, as many cores as needed", 80.0, 101.6, "Mops",
              "batched: PCIe DMA-bound; non-batched: MMIO-bound"),
    Published("batching", ATC16, "§4.2, Fig. 7", "CIB, HERD-RPC sequencer, 1 server core, 70 clients",
              7.0, 16.6, "Mrps"),
    Published("batching", ATC16, "§4.3.1, Fig. 9", "CIB, HERD key-value store, 1 server core, 95% GET, "
              "16-B keys, 32-B values", 6.7, 12.3, "Mrps"),
    Published("batching", ATC16, "§4.3.1, Fig. 9", "CIB, HERD key-value store, peak over cores",
              72.8, 98.3, "Mrps"),
    Published("batching", ATC16, "§4.2.2, Fig. 8", "CIB, Spec-S0 sequencer latency", None, None, "us",
              "batching adds up to 1 us of latency (the Doorbell's extra DMA read)"),
    Published("signaling", ATC16, "§2.2.1, §3.2", "-", None, None, "Mops",
              "unsignaled verbs skip the CQE DMA write; a known optimization, no with/without figure"),
    Published("combined", ATC16, "§5.2.1, Fig. 11b; §7", "all clusters, 1 core, 60-B UD SENDs, batching with "
              "4 QPs vs the usual baseline", 1.0, 3.2, "x",
              "up to 3.2x; with one QP batching lowers a core's rate (one PU per QP, §3.3)"),
    Published("qps", ATC16, "§3.5; §4.2.1", "-", None, None, "Mops",
              "QP state is cached in the NIC, misses read it over PCIe; connected QPs limit HERD RPCs to a "
              "few hundred clients; no QP count at which the fall starts"),
    Published("qps", HERD14, "§3, Fig. 6", "ConnectX-3, outbound vs inbound UC WRITEs, UD SENDs, N*N QPs",
              None, None, "Mops", "not read: outbound WRITEs fall with the QP count, UD SENDs do not "
              "(as a public reproduction describes the figure)"),
    Published("latency", ATC16, "§2.2", "commodity RDMA NICs", None, 2.0, "us RTT",
              "about 2 us round trip"),
    Published("latency", HERD14, "abstract", "HERD GET/PUT, ConnectX-3 (the NIC its README lists)", None, 5.0, "us",
              "5 us average latency, one round trip per request"),
)


def table(title: str, source: str, head: tuple[str, ...], rows: Sequence[Sequence[object]]) -> None:
    print(f"\n## {title}\n({source})\n")
    print(" | ".join(head))
    print(" | ".join("---" for _ in head))
    for r in rows:
        print(" | ".join(f"{v:.2f}" if isinstance(v, float) else str(v) for v in r))


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:g}"


def beside(ordering: str, ours: str, our_gain: float | None) -> None:
    """The published figures for ``ordering``, with our measurement (``ours``, ``our_gain``) beside them."""
    rows = [p for p in PUBLISHED if p.ordering == ordering]
    if not rows:
        raise ValueError(f"no published figure for {ordering!r}")
    print(f"\nbeside the papers (ours: {ours}):\n")
    print("paper | where | setup | without | with | unit | paper's gain | our gain | note")
    print(" | ".join("---" for _ in range(9)))
    for p in rows:
        pg = p.gain
        print(" | ".join((p.paper, p.where, p.setup, _num(p.without), _num(p.with_), p.unit,
                          "-" if pg is None else f"{pg:.2f}", "-" if our_gain is None else f"{our_gain:.2f}",
                          p.note)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=3000)
    ap.add_argument("--quick", action="store_true", help="fewer points (the QP sweep stops at 512)")
    a = ap.parse_args()
    m = NicModel.connectx3()
    n = a.messages
    t0 = time.monotonic()
    print(f"# NIC model {m.name}: PCIe {m.pcie_bytes_per_ns} B/ns per direction, round trip {m.pcie_rtt_ns} ns, "
          f"{m.processing_units} PUs, QP cache {m.qp_cache}, link {m.link_gbps} Gb/s")

    rows: list[tuple[object, ...]] = []
    gain32 = plain32 = inl32 = 0.0
    for size in (8, 32, 64, 128, 256):
        plain, inl = nb.rate(m, size=size, messages=n), nb.rate(m, size=size, inline=True, messages=n)
        if size == 32:
            gain32, plain32, inl32 = inl.mops / plain.mops, plain.mops, inl.mops
        rows.append((size, plain.mops, inl.mops, inl.mops / plain.mops, nb.latency(m, size=size, samples=10),
                     nb.latency(m, size=size, inline=True, samples=10)))
    for size in (1024, 4096, 16384):
        plain = nb.rate(m, size=size, messages=max(200, n // 10))
        rows.append((size, plain.mops, "-", "-", nb.latency(m, size=size, samples=10), "- (> max_inline)"))
    table("Inline vs non-inline WRITEs", "Kalia et al. ATC'16 §3.2 (inlining saves the payload's DMA read); "
          "HERD SIGCOMM'14 §3, Fig. 2",
          ("size B", "Mops", "Mops inline", "gain", "latency ns", "latency ns inline"), rows)
    beside("inline", f"32-B WRITEs {plain32:.2f} -> {inl32:.2f} Mops inline", gain32)

    base = nb.rate(m, messages=n).mops
    batches = [(b, r.mops, r.mops / base) for b in (1, 2, 4, 8, 16, 32) for r in [nb.rate(m, batch=b, messages=n)]]
    table("Doorbell batching (chains of b WRITEs, one post_send each)",
          "Kalia et al. ATC'16 §3.1 (one MMIO and one WQE DMA read per batch); measured in §4.2, §4.3.1, §5.2.1",
          ("batch", "Mops", "vs batch 1"), batches)
    top = max(batches, key=lambda r: r[1])
    beside("batching", f"batch 16 {batches[4][1]:.2f} Mops vs batch 1 {base:.2f}; best batch {top[0]}, "
           f"{top[2]:.2f}x", batches[4][2])

    signals = [(s, r.mops, r.mops / base) for s in (1, 4, 16, 64) for r in [nb.rate(m, signal_every=s, messages=n)]]
    table("Selective signaling (one signaled WRITE in s)",
          "Kalia et al. ATC'16 §2.2.1, §3.2 (unsignaled WRs write no CQE)", ("signal every", "Mops", "vs 1"), signals)
    beside("signaling", f"one in 16 signaled {signals[2][1]:.2f} Mops vs all {base:.2f}", signals[2][2])

    best = nb.rate(m, inline=True, batch=16, signal_every=16, messages=n)
    table("All three", "Kalia et al. ATC'16 §3 (the guidelines combined)", ("", "Mops", "vs none"),
          [("none", base, 1.0), ("inline + batch 16 + signal 1/16", best.mops, best.mops / base)])
    beside("combined", f"{best.mops:.2f} vs {base:.2f} Mops, one QP", best.mops / base)

    sweep = [(q, nb.rate(m, qps=q, depth=8, messages=max(2048, 4 * q)).mops)
             for q in (1, 16, 64, 128, 256, 384, 512) + (() if a.quick else (1024,))]
    table(f"QPs sharing the NIC (QP-context cache {m.qp_cache}, 8 outstanding per QP)",
          "Kalia et al. ATC'16 §3.5 (after FaRM NSDI'14); HERD SIGCOMM'14 §3, Fig. 6: throughput falls once "
          "the active QPs' contexts outgrow the NIC's cache", ("QPs", "Mops"), sweep)
    peak = max(r[1] for r in sweep)
    beside("qps", f"peak {peak:.2f} Mops, {sweep[-1][1]:.2f} at {sweep[-1][0]} QPs (the fall starts past "
           f"qp_cache = {m.qp_cache}, our assumption)", sweep[-1][1] / peak)

    lat = {op: nb.latency(m, op=op, size=32, inline=op != "read", samples=10) for op in ("write", "read")}
    table("Latency of one 32-B verb, post to completion (links of 1 us each way, the fabric's default)",
          "Kalia et al. ATC'16 §2.2; HERD SIGCOMM'14 abstract", ("verb", "ns"),
          [(f"{op}{' inline' if op != 'read' else ''}", v) for op, v in lat.items()])
    beside("latency", f"WRITE {lat['write'] / 1e3:.2f} us, READ {lat['read'] / 1e3:.2f} us, 2 us of them the "
           "links'", None)
    print(f"\n({time.monotonic() - t0:.0f} s of wall time)")


if __name__ == "__main__":
    main()
