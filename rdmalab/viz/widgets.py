"""Interactive widgets (ipywidgets), thin layers over the static renderers.

* :func:`packet_builder`: choose an opcode and edit BTH/RETH fields and the payload; the frame
  is re-encoded with :func:`rdmalab.wire.encode_rocev2`, and the hex dump and the ICRC
  walkthrough are redrawn on every change.

The work is done by a plain function (:func:`build_frame`) that returns the same objects the
notebooks display statically, so a widget never computes anything the static pages cannot
show.  This module reads packets and never drives the engine: the transfer runner, which runs
the soft engine, is :func:`rdmalab.lab.transfer.transfer_runner`.  Callbacks need a live
kernel; in the book, the notebooks show the static output of the same functions instead.

A saved notebook keeps a widget only as a reference to a model that lives in the kernel; reopened without
it, JupyterLab says "Error displaying widget: model not found" unless the widget's state was saved with the
notebook (``rdmalab lab`` turns that setting on).  So every widget here displays as a bundle that also holds
``text/html``: a line saying to run the cell, and the static view of what the widget showed when it was
displayed (:class:`StaticView`, :func:`live_box`).  Viewers that cannot run widgets (nbconvert, the book, an
untrusted notebook in JupyterLab) show that instead.
"""

from __future__ import annotations

import base64
import html
from typing import Any

from rdmalab.viz.crcsteps import icrc_steps
from rdmalab.viz.hexdump import hexdump
from rdmalab.wire.frame import decode_ethernet, encode_rocev2
from rdmalab.wire.header import Header
from rdmalab.wire.ib import AETH, BTH, DETH, RETH, AtomicETH, CNPPad, ImmDt
from rdmalab.wire.opcodes import OPCODES
from rdmalab.wire.packet import Packet

#: the opcodes the builder offers, by their names in the opcode table
BUILDER_OPCODES = {name: next(code for code, info in OPCODES.items() if info.name == name) for name in (
    "RC SEND Only", "RC SEND Only with Immediate", "RC RDMA WRITE Only", "RC RDMA WRITE Only with Immediate",
    "RC RDMA READ Request", "RC Acknowledge", "RC FetchAdd", "UD SEND Only", "CNP")}


def build_frame(opcode: int = BUILDER_OPCODES["RC RDMA WRITE Only"], *, destqp: int = 0x11, psn: int = 0,
                ackreq: bool = True, se: bool = False, fecn: bool = False, becn: bool = False, va: int = 0x1000,
                rkey: int = 0x42, imm: int = 0, payload: bytes = b"hello", ecn: int = 0) -> Packet:
    """A decoded RoCEv2 frame for ``opcode`` with the given field values (extended headers filled in)."""
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


def uses_remote_address(opcode: int) -> bool:
    """Whether a packet of ``opcode`` carries a remote address and key (a RETH or an AtomicETH): a SEND, an
    ACK or a CNP ignores the builder's rkey and VA, so the builder greys them out."""
    return any(cls in (RETH, AtomicETH) for cls in OPCODES[opcode].headers)


def static_html(obj: Any) -> str:
    """HTML for what displaying ``obj`` shows: its ``_repr_html_``, its SVG, its PNG, or its text."""
    for name in ("_repr_html_", "_repr_svg_", "_repr_png_"):
        method: Any = getattr(obj, name, None)
        value = method() if callable(method) else None
        if value is None:
            continue
        if name == "_repr_png_":
            data = base64.b64encode(value).decode() if isinstance(value, bytes) else str(value)
            return f'<img src="data:image/png;base64,{data}"/>'
        return str(value)
    return f"<pre>{html.escape(str(obj))}</pre>"


class StaticView:
    """What a widget's output area shows, recorded as HTML as it is drawn: the static view a saved
    notebook keeps.  Use it inside ``with out:`` in place of ``display`` and ``print``."""

    def __init__(self, note: str = "Interactive: run this cell to use the controls.") -> None:
        self.note = note
        self.parts: list[str] = []
        self.settings = ""

    def clear(self, settings: str = "") -> None:
        """A redraw begins (``settings``: the controls' values, said in the static view)."""
        self.parts = []
        self.settings = settings

    def display(self, obj: Any) -> None:
        from IPython import display as ipd  # optional: IPython (lab extra)

        show: Any = ipd.display
        show(obj)
        self.parts.append(static_html(obj))

    def print(self, text: str) -> None:
        print(text)
        self.parts.append(f'<pre style="margin:.2em 0">{html.escape(text)}</pre>')

    def html(self) -> str:
        shown = f" It showed, for {html.escape(self.settings)}:" if self.settings and self.parts else \
            " It showed:" if self.parts else ""
        return (f'<div class="rdmalab-static-widget"><p style="color:#555"><em>{html.escape(self.note)}'
                f"</em>{shown}</p>{''.join(self.parts)}</div>")


_LIVE_BOX: Any = None


def live_box(children: list[Any], view: StaticView) -> Any:
    """An ``ipywidgets.VBox`` of ``children`` whose display bundle also holds ``view`` as ``text/html`` (and a
    sentence as ``text/plain``): JupyterLab shows the widget while its kernel runs, other viewers the HTML."""
    global _LIVE_BOX
    if _LIVE_BOX is None:
        import ipywidgets as w  # optional: ipywidgets (lab extra)

        class LiveBox(w.VBox):  # type: ignore[misc]
            """A VBox that leaves a static view of itself in a saved notebook."""

            def _repr_mimebundle_(self, **kwargs: Any) -> Any:
                data = super()._repr_mimebundle_(**kwargs)
                if isinstance(data, dict):
                    static = self.rdmalab_view
                    data["text/html"] = static.html()
                    data["text/plain"] = static.note
                return data

        _LIVE_BOX = LiveBox
    box = _LIVE_BOX(children)
    box.rdmalab_view = view
    return box


def packet_builder() -> Any:
    """An interactive RoCEv2 packet builder: every change re-encodes the frame and its ICRC."""
    import ipywidgets as w  # optional: ipywidgets, IPython (lab extra)

    opcode = w.Dropdown(options=list(BUILDER_OPCODES.items()), value=BUILDER_OPCODES["RC RDMA WRITE Only"],
                        description="opcode")
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
    view = StaticView("Interactive: run this cell to build packets.")

    def redraw(_: Any = None) -> None:
        out.clear_output(wait=True)
        view.clear(f"opcode {opcode.label}, PSN {psn.value}, payload {payload.value!r}")
        with out:
            try:
                pkt = build_frame(opcode.value, destqp=destqp.value, psn=psn.value, ackreq=ackreq.value,
                                  se=se.value, fecn=fecn.value, becn=becn.value, va=va.value, rkey=rkey.value,
                                  payload=payload.value.encode(), ecn=ecn.value)
            except Exception as err:  # an impossible value: say which
                view.print(f"cannot encode: {err}")
                return
            view.display(hexdump(pkt, title=pkt.summary()))
            view.display(icrc_steps(pkt))

    def remote(_: Any = None) -> None:
        rkey.disabled = va.disabled = not uses_remote_address(opcode.value)

    opcode.observe(remote, names="value")
    for c in controls:
        c.observe(redraw, names="value")
    remote()
    redraw()
    return live_box([w.HBox([w.VBox(controls[:6]), w.VBox(controls[6:])]), out], view)
