"""One transfer on a fresh pair, for notebook 09: as a function and as a widget.

:func:`run_transfer` runs one RDMA WRITE, READ or SEND on a fresh pair (the soft engine, or kernel
rxe with ``backend="rxe"``, where loss is tc netem and the seed means nothing) and returns the
pair and its completions, with the ladder and the PSN plot of the run; :func:`transfer_runner` puts
sliders for operation, size, MTU, loss and seed in front of it (ipywidgets).  This drives the
engine, so it lives in the lab layer; :mod:`rdmalab.viz` only draws what it produced.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import rdmalab.verbs.enums as e
from rdmalab.lab.pair import Pair
from rdmalab.verbs.cq import WC
from rdmalab.verbs.wr import SGE, RecvWR, SendWR
from rdmalab.viz.ladder import Ladder
from rdmalab.viz.plots import Plot
from rdmalab.viz.widgets import StaticView, live_box
from rdmalab.wire.ib import IB_MTUS, RETH


@dataclass
class TransferResult:
    pair: Pair   # a SoftPair, or a LivePair on rxe
    completions: list[WC | None]
    loss: float = 0.0

    @property
    def ladder(self) -> Ladder:
        ladder: Ladder = self.pair.ladder()
        return ladder

    @property
    def psn_plot(self) -> Plot:
        plot: Plot = self.pair.psn_plot()
        return plot

    def stats(self) -> dict[str, Any]:
        """What the wire did: request packets resent (from the packets), and the simulated fabric's
        counters on soft or the netem loss rate on rxe.

        A request packet is resent when its PSN falls inside the PSNs an earlier request of the same
        QP already used.  A READ Request uses one PSN per response it asks for (IBA Vol 1 9.4.3: the
        responses take ceil(length / PMTU) PSNs from the request's), so a READ reissued after a
        timeout starts at the first response that did not arrive: a PSN no earlier request carried,
        but one the first READ covered.
        """
        mtu = int(getattr(self.pair, "mtu", 0) or 0)
        used: dict[int, list[tuple[int, int]]] = {}  # destqp -> [first PSN, PSN after the last) of each request
        resent = 0
        pkts = self.pair.packets()
        for p in pkts:
            name = str(p.opcode_name)
            if p.bth is None or "Acknowledge" in name or "Response" in name:
                continue
            psn = p.bth.psn
            ranges = used.setdefault(p.bth.destqp, [])
            resent += any(lo <= psn < hi for lo, hi in ranges)
            reth = p.get(RETH) if "READ Request" in name else None
            span = max(1, -(-reth.dma_length // mtu)) if reth is not None and mtu else 1
            ranges.append((psn, psn + span))
        fabric = getattr(self.pair, "fabric", None)
        if fabric is not None:
            return {**{k: v for k, v in fabric.stats.items() if v}, "requests resent": resent}
        return {"captured": len(pkts), "requests resent": resent, "netem loss": f"{self.loss:.0%}"}


    def summary(self) -> list[str]:
        """Short lines for the widget: each completion's essentials, then the wire's counters (a line
        short enough that an output area never wraps it inside a word)."""
        lines = []
        for who, wc in zip(("A", *["B"] * (len(self.completions) - 1)), self.completions, strict=True):
            if wc is None:
                lines.append(f"{who}: no completion (the work request never finished)")
                continue
            text = str(wc)  # WC(wr_id=1, status=success, opcode=SEND, byte_len=8192, ...)
            keep = [kv for kv in text[text.find("(") + 1:-1].split(", ")
                    if kv.split("=")[0] in ("wr_id", "status", "opcode", "byte_len")]
            lines.append(f"{who}'s completion: " + ", ".join(keep))
        lines.append("wire: " + ", ".join(f"{k} {v}" for k, v in self.stats().items()))
        return lines


def run_transfer(*, op: str = "WRITE", size: int = 8192, mtu: int = 1024, loss: float = 0.0,
                 seed: int = 1, backend: str | None = None) -> TransferResult:
    """Run one RDMA WRITE, READ or SEND of ``size`` bytes on a fresh seeded pair."""
    pair = Pair(backend=backend, seed=seed, mtu=mtu, loss=loss, size=max(size, 4096))
    a, b = pair.a, pair.b
    opcode = {"WRITE": e.IBV_WR_RDMA_WRITE, "READ": e.IBV_WR_RDMA_READ, "SEND": e.IBV_WR_SEND}[op]
    if op == "SEND":
        b.qp.post_recv(RecvWR(wr_id=9, num_sge=1, sg=[SGE(b.mr.buf, size, b.mr.lkey)]))
    wr = SendWR(wr_id=1, opcode=opcode, num_sge=1, sg=[SGE(a.mr.buf, size, a.mr.lkey)])
    if op != "SEND":
        wr.set_wr_rdma(b.mr.rkey, b.mr.buf)
    a.qp.post_send(wr)
    wcs: list[WC | None] = [a.poll()]  # None if the WRITE/READ never completed
    pair.run()
    result = TransferResult(pair, [*wcs, *b.completions()], loss)
    if loss and getattr(pair, "fabric", None) is None:
        pair.set_loss(0.0)   # netem stays on the wire until removed; the next pair starts clean
    return result


def transfer_runner(backend: str | None = None) -> Any:
    """Sliders for operation, message size, MTU, loss and seed; each change re-runs the engine."""
    import ipywidgets as w  # optional: ipywidgets, IPython (lab extra)


    view = StaticView()  # the static view a saved notebook keeps

    op = w.ToggleButtons(options=["WRITE", "READ", "SEND"], value="WRITE", description="operation")
    size = w.IntSlider(value=8192, min=64, max=65536, step=64, description="bytes", continuous_update=False)
    mtu = w.SelectionSlider(options=list(IB_MTUS), value=1024, description="MTU",
                            continuous_update=False)
    loss = w.FloatSlider(value=0.0, min=0.0, max=0.3, step=0.01, description="loss", continuous_update=False)
    seed = w.IntSlider(value=1, min=0, max=50, description="seed", continuous_update=False)
    out = w.Output()

    def redraw(_: Any = None) -> None:
        out.clear_output(wait=True)
        view.clear(f"{op.value}, {size.value} bytes, MTU {mtu.value}, loss {loss.value:.0%}, seed {seed.value}")
        with out:
            res = run_transfer(op=op.value, size=size.value, mtu=mtu.value, loss=loss.value, seed=seed.value,
                               backend=backend)
            view.print("\n".join(res.summary()))
            view.display(res.ladder)
            view.display(res.psn_plot)

    for c in (op, size, mtu, loss, seed):
        c.observe(redraw, names="value")
    redraw()
    return live_box([w.HBox([op]), w.HBox([size, mtu]), w.HBox([loss, seed]), out], view)
