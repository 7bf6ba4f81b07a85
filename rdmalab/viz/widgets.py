"""Interactive widgets (ipywidgets), thin layers over the static renderers.

* :func:`packet_builder`: choose an opcode and edit BTH/RETH fields and the payload; the frame
  is re-encoded with :func:`rdmalab.wire.encode_rocev2`, and the hex dump and the ICRC
  walkthrough are redrawn on every change.
* :func:`transfer_runner`: MTU, loss, message size, operation and seed sliders; each change
  runs the soft engine (:class:`rdmalab.lab.pair.Pair`) and redraws the ladder and PSN plot.

The work is done by plain functions (:func:`build_frame`, :func:`run_transfer`) that return the
same objects the notebooks display statically, so a widget never computes anything the static
pages cannot show.  Callbacks need a live kernel; in the book, the notebooks show the static
output of the same functions instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rdmalab.viz.crcsteps import icrc_steps
from rdmalab.viz.hexdump import hexdump
from rdmalab.viz.ladder import from_trace
from rdmalab.viz.plots import psn_time
from rdmalab.wire.header import Header

BUILDER_OPCODES = {
    "RC SEND Only": 0x04,
    "RC SEND Only with Immediate": 0x05,
    "RC RDMA WRITE Only": 0x0A,
    "RC RDMA WRITE Only with Immediate": 0x0B,
    "RC RDMA READ Request": 0x0C,
    "RC Acknowledge": 0x11,
    "RC FetchAdd": 0x14,
    "UD SEND Only": 0x64,
    "CNP": 0x81,
}


def build_frame(opcode: int = 0x0A, *, destqp: int = 0x11, psn: int = 0, ackreq: bool = True, se: bool = False,
                fecn: bool = False, becn: bool = False, va: int = 0x1000, rkey: int = 0x42, imm: int = 0,
                payload: bytes = b"hello", ecn: int = 0) -> Any:
    """A decoded RoCEv2 frame for ``opcode`` with the given field values (extended headers filled in)."""
    from rdmalab.wire import AETH, BTH, DETH, OPCODES, RETH, AtomicETH, CNPPad, ImmDt, decode_ethernet, encode_rocev2

    info = OPCODES[opcode]
    headers: list[Header] = []
    for cls in info.headers:
        if cls is RETH:
            headers.append(RETH(va=va, r_key=rkey, dma_length=len(payload) if info.payload else max(len(payload), 1)))
        elif cls is ImmDt:
            headers.append(ImmDt(imm=imm))
        elif cls is AETH:
            headers.append(AETH.ack(msn=1))
        elif cls is AtomicETH:
            headers.append(AtomicETH(va=va, r_key=rkey, swap_add=1))
        elif cls is DETH:
            headers.append(DETH(q_key=0x11111111, src_qp=0x22))
        elif cls is CNPPad:
            headers.append(CNPPad())
        else:
            headers.append(cls())
    bth = BTH(opcode=opcode, destqp=destqp, psn=psn, ackreq=int(ackreq), se=int(se), fecn=int(fecn), becn=int(becn))
    frame = encode_rocev2(bth, headers, payload if info.payload else b"", ecn=ecn)
    return decode_ethernet(frame)


@dataclass
class TransferResult:
    pair: Any
    completions: list[Any]

    @property
    def ladder(self) -> Any:
        return from_trace(self.pair.trace, nodes=[self.pair.a.name, self.pair.b.name])

    @property
    def psn_plot(self) -> Any:
        return psn_time(self.pair.trace)


def run_transfer(*, op: str = "WRITE", size: int = 8192, mtu: int = 1024, loss: float = 0.0,
                 seed: int = 1) -> TransferResult:
    """Run one RDMA WRITE, READ or SEND of ``size`` bytes on a fresh seeded pair."""
    import rdmalab.verbs.enums as e
    from rdmalab.lab.pair import Pair
    from rdmalab.verbs.wr import SGE, RecvWR, SendWR

    pair = Pair(seed=seed, mtu=mtu, loss=loss, size=max(size, 4096))
    a, b = pair.a, pair.b
    opcode = {"WRITE": e.IBV_WR_RDMA_WRITE, "READ": e.IBV_WR_RDMA_READ, "SEND": e.IBV_WR_SEND}[op]
    if op == "SEND":
        b.qp.post_recv(RecvWR(wr_id=9, num_sge=1, sg=[SGE(b.mr.buf, size, b.mr.lkey)]))
    wr = SendWR(wr_id=1, opcode=opcode, num_sge=1, sg=[SGE(a.mr.buf, size, a.mr.lkey)])
    if op != "SEND":
        wr.set_wr_rdma(b.mr.rkey, b.mr.buf)
    a.qp.post_send(wr)
    wcs = [a.poll()]
    pair.run()
    return TransferResult(pair, wcs + b.completions())


def packet_builder() -> Any:
    """An interactive RoCEv2 packet builder: every change re-encodes the frame and its ICRC."""
    import ipywidgets as w
    from IPython import display as ipd

    display: Any = ipd.display

    opcode = w.Dropdown(options=list(BUILDER_OPCODES.items()), value=0x0A, description="opcode")
    destqp = w.BoundedIntText(value=0x11, min=0, max=0xFFFFFF, description="DestQP")
    psn = w.BoundedIntText(value=0, min=0, max=0xFFFFFF, description="PSN")
    ackreq = w.Checkbox(value=True, description="AckReq")
    se = w.Checkbox(value=False, description="Solicited")
    fecn = w.Checkbox(value=False, description="FECN")
    becn = w.Checkbox(value=False, description="BECN")
    ecn = w.Dropdown(options=[("Not-ECT 00", 0), ("ECT(1) 01", 1), ("ECT(0) 10", 2), ("CE 11", 3)], value=0,
                     description="IP ECN")
    rkey = w.BoundedIntText(value=0x42, min=0, max=0xFFFFFFFF, description="rkey")
    va = w.BoundedIntText(value=0x1000, min=0, max=2**64 - 1, description="VA")
    payload = w.Text(value="hello", description="payload")
    out = w.Output()
    controls = [opcode, destqp, psn, ackreq, se, fecn, becn, ecn, rkey, va, payload]

    def redraw(_: Any = None) -> None:
        out.clear_output(wait=True)
        with out:
            try:
                pkt = build_frame(opcode.value, destqp=destqp.value, psn=psn.value, ackreq=ackreq.value,
                                  se=se.value, fecn=fecn.value, becn=becn.value, va=va.value, rkey=rkey.value,
                                  payload=payload.value.encode(), ecn=ecn.value)
            except Exception as err:  # an impossible value: say which
                print(f"cannot encode: {err}")
                return
            display(hexdump(pkt, title=pkt.summary()))
            display(icrc_steps(pkt))

    for c in controls:
        c.observe(redraw, names="value")
    redraw()
    return w.VBox([w.HBox([w.VBox(controls[:6]), w.VBox(controls[6:])]), out])


def transfer_runner() -> Any:
    """Sliders for operation, message size, MTU, loss and seed; each change re-runs the engine."""
    import ipywidgets as w
    from IPython import display as ipd

    display: Any = ipd.display

    op = w.ToggleButtons(options=["WRITE", "READ", "SEND"], value="WRITE", description="operation")
    size = w.IntSlider(value=8192, min=64, max=65536, step=64, description="bytes", continuous_update=False)
    mtu = w.SelectionSlider(options=[256, 512, 1024, 2048, 4096], value=1024, description="MTU",
                            continuous_update=False)
    loss = w.FloatSlider(value=0.0, min=0.0, max=0.3, step=0.01, description="loss", continuous_update=False)
    seed = w.IntSlider(value=1, min=0, max=50, description="seed", continuous_update=False)
    out = w.Output()

    def redraw(_: Any = None) -> None:
        out.clear_output(wait=True)
        with out:
            res = run_transfer(op=op.value, size=size.value, mtu=mtu.value, loss=loss.value, seed=seed.value)
            stats = {k: v for k, v in res.pair.fabric.stats.items() if v}
            print("completions:", [str(wc) for wc in res.completions], "| fabric:", stats)
            display(res.ladder)
            display(res.psn_plot)

    for c in (op, size, mtu, loss, seed):
        c.observe(redraw, names="value")
    redraw()
    return w.VBox([w.HBox([op]), w.HBox([size, mtu]), w.HBox([loss, seed]), out])
