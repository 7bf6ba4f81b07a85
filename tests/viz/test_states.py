"""The connection managers' state diagrams: drawn from their tables (the IB CM, MPA, rdma_cm's CMID)."""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable
from typing import Any

import pytest

from rdmalab.verbs import cmstate
from rdmalab.verbs.engine import ibcm, mpacm
from rdmalab.viz.states import (
    CM_LAYOUT,
    CMID_LAYOUT,
    MPA_LAYOUT,
    StateDiagram,
    cm_state_diagram,
    cmid_state_diagram,
    mpa_state_diagram,
)

NS = "{http://www.w3.org/2000/svg}"


def _table_edges(which: str) -> set[tuple[str, str, str]]:
    """(from, to, event) read from the table itself, independently of the drawing code."""
    out: set[tuple[str, str, str]] = set()
    if which == "cm":
        for (s, ev), r in ibcm.TABLE.items():
            if r.do not in ibcm.REFUSALS:
                out |= {(s.name, to.name, ev.value) for to in r.to if (s.name, to.name) != ("IDLE", "IDLE")}
    elif which == "mpa":
        for (s, ev), r in mpacm.TABLE.items():
            if r.do not in ibcm.REFUSALS:
                out |= {(s.name, to.name, ev.value) for to in r.to}
    else:
        out = {(s.name, to.name, ev.value) for (s, ev), to in cmstate.TRANSITIONS.items()}
    return out


DIAGRAMS: dict[str, tuple[Callable[..., StateDiagram], dict[str, tuple[int, int]], Any]] = {
    "cm": (cm_state_diagram, CM_LAYOUT, ibcm.State),
    "mpa": (mpa_state_diagram, MPA_LAYOUT, mpacm.MPAState),
    "cmid": (cmid_state_diagram, CMID_LAYOUT, cmstate.CMIDState),
}


@pytest.mark.parametrize("which", list(DIAGRAMS))
def test_every_transition_of_the_table_is_an_edge_and_nothing_else(which: str) -> None:
    draw, layout, states = DIAGRAMS[which]
    d = draw()
    drawn = {(a, b, lab) for a, b, labs in d.edges for lab in labs.split(" | ")}
    assert drawn == _table_edges(which)
    assert len({(a, b) for a, b, _ in d.edges}) == len(d.edges)  # one edge per pair, its events joined
    assert set(layout) == {s.name for s in states}  # every state has a place, and only states do
    assert len(set(layout.values())) == len(layout)


def test_a_refusal_is_not_an_edge_and_a_changed_table_changes_the_picture(monkeypatch: pytest.MonkeyPatch) -> None:
    pairs = {(a, b) for a, b, _ in cm_state_diagram().edges}
    assert ibcm.rule(ibcm.State.DREQ_RCVD, ibcm.Event.DREQ).do == ibcm.DUPLICATE
    assert ("DREQ_RCVD", "DREQ_RCVD") not in pairs
    monkeypatch.setitem(ibcm.TABLE, (ibcm.State.DREQ_RCVD, ibcm.Event.DREQ), ibcm.Rule("dreq", (ibcm.State.DREQ_RCVD,)))
    assert ("DREQ_RCVD", "DREQ_RCVD", "DREQ") in cm_state_diagram().edges


@pytest.mark.parametrize("which", list(DIAGRAMS))
def test_the_svg_parses_and_no_arrow_runs_through_a_state(which: str) -> None:
    d = DIAGRAMS[which][0]()
    svg = ET.fromstring(d.to_svg())
    circles = [(float(c.get("cx", 0)), float(c.get("cy", 0))) for c in svg.iter(f"{NS}circle")]
    assert len(circles) == len(DIAGRAMS[which][1])
    r = d.radius
    for p in svg.iter(f"{NS}path"):
        m = re.fullmatch(r"M([\d.-]+),([\d.-]+) Q([\d.-]+),([\d.-]+) ([\d.-]+),([\d.-]+)", p.get("d", ""))
        if not m:
            continue
        sx, sy, mx, my, ex, ey = (float(v) for v in m.groups())
        for i in range(1, 50):
            s = i / 50
            px = (1 - s) ** 2 * sx + 2 * s * (1 - s) * mx + s * s * ex
            py = (1 - s) ** 2 * sy + 2 * s * (1 - s) * my + s * s * ey
            for cx, cy in circles:
                assert math.hypot(px - cx, py - cy) > r - 1, f"an arrow runs through the state at ({cx}, {cy})"


@pytest.mark.parametrize(("which", "start"), [("cm", ["IDLE", "REQ_SENT", "REP_RCVD", "ESTABLISHED"]),
                                             ("mpa", ["TCP_CONNECTING", "REQUEST_SENT", "ESTABLISHED"]),
                                             ("cmid", ["IDLE", "ADDR_RESOLVED", "ROUTE_RESOLVED", "CONNECTING"])])
def test_the_highlighted_path_is_the_active_handshake_and_every_step_of_it_is_a_transition(
        which: str, start: list[str]) -> None:
    d = DIAGRAMS[which][0]()
    pairs = {(a, b) for a, b, _ in d.edges}
    assert d.highlight[:len(start)] == start
    assert all((a, b) in pairs for a, b in zip(d.highlight, d.highlight[1:], strict=False))
    svg = d.to_svg()
    assert svg.count('stroke="#1565c0" stroke-width="2.2"') == len(d.highlight) - 1
