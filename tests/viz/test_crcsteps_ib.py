"""The ICRC walk-through of native IB follows the packet's rule: VL only without a GRH, the whole
LRH with one (IBA Vol 1 7.8.1; rdmalab.wire.crc.icrc_rule_ib)."""

from __future__ import annotations

from rdmalab.viz.crcsteps import WHY_LRH_GLOBAL, icrc_steps
from rdmalab.wire import ib
from rdmalab.wire.frame import decode_ib
from rdmalab.wire.packet import encode_ib


def _packet(grh: ib.GRH | None) -> bytes:
    return encode_ib(ib.BTH(opcode=0x04, destqp=0x21, psn=3, becn=1), [], b"12345678",
                     lrh=ib.LRH(vl=2, sl=5, dlid=0x11, slid=0x22), grh=grh)


def test_with_a_grh_every_lrh_field_is_masked_and_the_crc_matches_the_wire() -> None:
    steps = icrc_steps(decode_ib(_packet(ib.GRH(tclass=4, flowlabel=0x12345, hoplmt=7, sgid=1, dgid=2))))
    assert steps.rule == "ib_global" and steps.matches_wire and steps.library_crc() == steps.crc
    assert steps.masked_input[:8] == b"\xff" * 8  # the LRH in the CRC input, as RoCE's stand-in bytes
    lrh = [m for m in steps.masked if m.layer == "LRH"]
    assert [m.field for m in lrh] == [f.name for f in ib.LRH.LAYOUT.fields]
    assert all(m.why == WHY_LRH_GLOBAL for m in lrh)
    assert "rebuild its LRH" in steps._repr_html_()


def test_without_a_grh_only_vl_of_the_lrh_is_masked() -> None:
    steps = icrc_steps(decode_ib(_packet(None)))
    assert steps.rule == "ib" and steps.matches_wire
    assert [m.field for m in steps.masked if m.layer == "LRH"] == ["vl"]
    assert steps.masked_input[1:8] == _packet(None)[1:8]  # SL, LNH, DLID, PktLen, SLID: covered as sent
    assert "VL aside" in steps._repr_html_()
