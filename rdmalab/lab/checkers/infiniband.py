"""Checkers for 14-infiniband: a subnet manager's LIDs and tables, a WRITE's LRHs, credits under incast.

The notebook's subnet is the house's: an ibsim net file (:func:`net_file`) read into a
:class:`~rdmalab.fabric.ibsubnet.Subnet`, whose ports carry the subnet management agents the stock OpenSM
and infiniband-diags are compared against.  rdmalab's own subnet manager
(:class:`~rdmalab.fabric.ibsm.SubnetManager`) sweeps it in this process through
:class:`~rdmalab.fabric.ibfabric_subnet.SubnetMADs` (:func:`bring_up`): every directed-route SMP crosses the
subnet hop by hop and is answered by the agent it reaches, which keeps what a Set writes (LIDs, port states,
forwarding tables).  The data path is then :func:`~rdmalab.fabric.ibfabric_subnet.fabric_on_subnet`'s
:class:`~rdmalab.fabric.ibfabric.IBFabric`: the HCAs take their LIDs from their own PortInfo, the switches forward
by the tables the agents hold, and a WRITE is addressed by the PathRecords each HCA asks of the SM's SA
(:func:`ask_paths`).  Where the stock OpenSM is installed, :func:`run_opensm` runs it on the same
:class:`~rdmalab.fabric.ibsubnet.Subnet`, served by ``rdmalab ibsim``'s server, so the same data path can run on
the tables OpenSM wrote.  Every expected answer is measured on that subnet or on
:func:`rdmalab.fabric.ibflows.ib_incast`, as the notebook measures it.

Per student (:mod:`rdmalab.lab.variant`): ``ib.lft``, the subnet's wiring (which switch ports the HCAs use,
which HCA the SM runs on, which LID and switch are asked about); ``ib.lrh``, the WRITE's length, MTU, SL and
VLs; ``ib.hol``, the number of senders of the incast.  ``ib.why`` is a mechanism, the same for everyone.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import count
from pathlib import Path
from typing import Any

from rdmalab.capture.reader import read
from rdmalab.fabric.ibfabric import ErfTap, IBFabric, IBHca
from rdmalab.fabric.ibfabric_subnet import SubnetMADs, fabric_on_subnet, path_record
from rdmalab.fabric.ibflows import ib_incast
from rdmalab.fabric.ibsim_client import IBSimClient
from rdmalab.fabric.ibsim_server import IbsimServer
from rdmalab.fabric.ibsm import SM, SubnetManager
from rdmalab.fabric.ibsm_sa import SubnetAdministrator, answer
from rdmalab.fabric.ibsubnet import Subnet
from rdmalab.lab.core import Said, Wrong, exercise
from rdmalab.lab.feedback import as_int, as_letter, plain
from rdmalab.lab.variant import draw, scenario
from rdmalab.verbs import enums as e
from rdmalab.verbs.addr import AHAttr
from rdmalab.verbs.cq import CQ
from rdmalab.verbs.device import Context
from rdmalab.verbs.mr import MR
from rdmalab.verbs.pd import PD
from rdmalab.verbs.qp import QP, QPAttr, QPCap, QPInitAttr
from rdmalab.verbs.wr import SGE, SendWR
from rdmalab.viz.ladder import Arrow, Ladder
from rdmalab.wire.ib import BTH, LRH
from rdmalab.wire.sa import PathRecord
from rdmalab.wire.smp import ATTR_PORT_INFO, PortInfo, dr_get

NB = "14-infiniband"

#: a link between two nodes: (node, its port, node, its port)
Link = tuple[str, int, str, int]


# ----------------------------------------------------------------------------- the subnet
def net_file(links: list[Link], *, hcas: list[str], switches: list[str], nports: int = 6) -> str:
    """ibsim's net file (ibnetdiscover's format: a record per node, its linked ports as ``[port] "peer"[port]``)
    of one-port HCAs ``hcas`` and switches ``switches`` of ``nports`` ports each, linked by ``links``; every
    link 4x QDR (``speed=4``, PortInfo's LinkSpeedEnabled: 10 Gb/s a lane).  The net file's reader names a port
    used twice or a link to an unknown node (:class:`~rdmalab.fabric.ibsubnet_netfile.NetFileError`)."""
    ports: dict[str, list[tuple[int, str, int]]] = {name: [] for name in (*hcas, *switches)}
    for a, pa, b, pb in links:
        for here, num, there, far in ((a, pa, b, pb), (b, pb, a, pa)):
            if here not in ports:
                raise ValueError(f"link {a}[{pa}] - {b}[{pb}]: {here!r} is not one of the nodes {sorted(ports)}")
            ports[here].append((num, there, far))
    out = ["# written by rdmalab.lab.checkers.infiniband.net_file", "speed=4"]
    for name in (*hcas, *switches):
        kind = f"Switch\t{nports}" if name in switches else "Hca\t1"
        out.append(f'\n{kind} "{name}"')
        out += [f'[{num}]\t"{there}"[{far}]' for num, there, far in sorted(ports[name])]
    return "\n".join(out) + "\n"


#: the notebook's own subnet: ha on sw1, hb and hc on sw2, two links between the switches
BOOK_LINKS: list[Link] = [("ha", 1, "sw1", 1), ("sw1", 3, "sw2", 3), ("sw1", 4, "sw2", 4), ("sw2", 1, "hb", 1),
                          ("sw2", 2, "hc", 1)]


def book_net() -> str:
    """The notebook's subnet (:data:`BOOK_LINKS`) as a net file."""
    return net_file(BOOK_LINKS, hcas=["ha", "hb", "hc"], switches=["sw1", "sw2"])


def book_subnet() -> Subnet:
    """The notebook's subnet with its agents, as ibsim starts it: no LIDs, ports Init, tables empty."""
    return Subnet.from_text(book_net(), "book.net")


def bring_up(mads: SubnetMADs, sm_host: str = "ha") -> SubnetManager:
    """Run rdmalab's subnet manager on ``sm_host``'s port of ``mads.subnet``: sweep, LIDs, tables, ports Active;
    then its SA answers the PathRecord queries sent to the SM's LID (:func:`ask_paths`)."""
    port = mads.port(sm_host, issm=True)
    sm = SubnetManager(port)
    sm.run()
    sa = SubnetAdministrator(sm)
    mads.serve(port, lambda req: answer(sm, sa, req))
    return sm


def lft_of(sm: SubnetManager, switch: str) -> dict[int, int]:
    """The forwarding table the SM computed for the switch named ``switch`` (LID -> output port)."""
    for node in sm.nodes.values():
        if node.name == switch and node.is_switch:
            return dict(node.lft)
    raise ValueError(f"no switch named {switch!r} in the subnet the SM found")


def sm_ladder(sm: SubnetManager, phases: tuple[str, ...] = ("discover",), *, skip: tuple[str, ...] = (),
              title: str | None = None) -> Ladder:
    """The SM's MADs of ``phases`` (:attr:`SMEvent.phase`) as a ladder diagram: the SM on the left, the nodes in
    the order the sweep met them; each SMP an arrow out, its GetResp an arrow back (each a step of the drawing:
    the in-process agents take no time).  SMPs whose attribute is in ``skip`` (e.g. ``"PortInfo"``) are left
    out, with their answers."""
    names = [SM] + [n.name for n in sm.nodes.values()]
    events = [ev for ev in sm.events if ev.phase in phases]
    arrows = []
    t = 0
    for i, ev in enumerate(events):
        response = ev.src != SM
        request = events[i - 1] if response and i else ev
        if any(f" {attr} " in request.summary for attr in skip):
            continue
        src, dst = ev.src, ev.dst
        if not response and dst not in names and i + 1 < len(events):
            dst = events[i + 1].src  # a node met again by another path: its answer names it
        if response and src not in names:
            src = request.dst if request.dst in names else src
        text = "GetResp" if response else ev.summary.replace(" DR path", " path")
        arrows.append(Arrow(src, dst, t, t + 1000, text, kind="ack" if response else "request", note=ev.summary))
        t += 1000
    return Ladder(names, arrows, title=title, times=False)


# ----------------------------------------------------------------------------- 1. LIDs and a table
@scenario("ib.lft")
def _lft_scenario(r: random.Random) -> dict[str, Any]:
    s1 = r.sample(range(1, 7), 4)  # sw1: ha, hd, and two links to sw2
    s2 = r.sample(range(1, 7), 4)  # sw2: hb, hc, and the two links from sw1
    links = [("ha", s1[0], "sw1"), ("hd", s1[1], "sw1"), ("hb", s2[0], "sw2"), ("hc", s2[1], "sw2")]
    inter = sorted(zip(s1[2:], s2[2:], strict=True))
    return {"hcas": {h: f"{sw} port {p}" for h, p, sw in links},
            "switch_links": [f"sw1 port {a} - sw2 port {b}" for a, b in inter],
            "sm_on": r.choice(["ha", "hb", "hc", "hd"]), "target": r.choice(["ha", "hb", "hc", "hd"]),
            "switch": r.choice(["sw1", "sw2"])}


def scenario_links(s: Any) -> list[Link]:
    """A scenario's wiring, as :func:`net_file` takes it."""
    out = []
    for host, where in s.hcas.items():
        sw, _, port = where.split()
        out.append((host, 1, sw, int(port)))
    for text in s.switch_links:
        a, _, pa, _, b, _, pb = text.split()
        out.append((a, int(pa), b, int(pb)))
    return out


def my_net() -> str:
    """Your subnet (scenario ``ib.lft``) as a net file."""
    s = draw("ib.lft")
    return net_file(scenario_links(s), hcas=list(s.hcas), switches=["sw1", "sw2"])


def my_subnet() -> Subnet:
    """Your subnet (scenario ``ib.lft``), not yet brought up."""
    return Subnet.from_text(my_net(), "my.net")


def lft_answer() -> tuple[int, int, SubnetManager]:
    s = draw("ib.lft")
    sm = bring_up(SubnetMADs(my_subnet()), s.sm_on)
    target = next(p for p in sm.lids.values() if sm.nodes[p.node_guid].name == s.target)
    return target.lid, lft_of(sm, s.switch)[target.lid], sm


@exercise("ib.lft", "Your subnet: the LID the SM gives a host, and where a switch sends it", notebook=NB, varies=True,
          hints=(
    "Build your subnet with my_subnet() and bring it up with bring_up(SubnetMADs(subnet), sm_host) from the SM's "
    "host of your scenario: sm.lids maps each LID to the port that has it.",
    "lft_of(sm, switch) is that switch's table, LID -> output port (0: the switch itself).",
    "LIDs go out in the order the sweep met the ports, the SM's own port first; each switch's port 0 has one.",
))
def _lft(answer: Any) -> str:
    s = draw("ib.lft")
    lid, port, sm = lft_answer()
    shape = "{'lid': the LID of your target host, 'port': the port your switch sends that LID out of}"
    if not isinstance(answer, dict) or set(answer) != {"lid", "port"}:
        raise Wrong(f"Give {shape}.", field="answer", given=answer, expected=shape)
    got = as_int(answer["lid"], "a LID", field="lid")
    if got != lid:
        owner = sm.lids.get(got)
        who = (f"LID {got} is {sm.nodes[owner.node_guid].name}'s" if owner is not None
               else f"no port has LID {got}")
        raise Wrong(f"Not {s.target}'s LID: {who}. Bring up your own subnet, with the SM on {s.sm_on} (the sweep "
                    "starts there, and LIDs follow its order).", field="PortInfo.lid", given=plain(got),
                    expected=f"the LID the SM set in {s.target}'s PortInfo")
    out = as_int(answer["port"], "a port number", field="port")
    if out != port:
        lft = lft_of(sm, s.switch)
        raise Wrong(f"{s.switch} does not send LID {lid} out of port {out}: read its forwarding table "
                    f"(lft_of(sm, {s.switch!r})), which has {len(lft)} entries.", field="LinearForwardingTable",
                    given=plain(out), expected=f"{s.switch}'s entry for LID {lid}")
    hops = "it is on that switch" if any(h == s.target and sw == s.switch for h, _, sw, _ in scenario_links(s)) \
        else "it is behind the other switch, one of the two links between them"
    return (f"Right: {s.target} has LID {lid}, and {s.switch} sends it out of port {port} ({hops}); the SM met "
            f"{len(sm.nodes)} nodes and gave {len(sm.lids)} LIDs.")


# ----------------------------------------------------------------------------- 2. a WRITE's LRHs
@scenario("ib.lrh")
def _lrh_scenario(r: random.Random) -> dict[str, Any]:
    mtu = r.choice((256, 512, 1024))
    return {"length": r.randrange(2 * mtu + 1, 6 * mtu) // 4 * 4 + r.choice((0, 1, 2, 3)), "mtu": mtu,
            "sl": r.randrange(1, 8), "vls": r.choice((2, 4))}


def ask_paths(mads: SubnetMADs, fab: IBFabric, src: str = "ha", dst: str = "hb") -> tuple[PathRecord, PathRecord]:
    """The PathRecords ``src`` -> ``dst`` and back, each asked by its own HCA: a SubnAdmGet(PathRecord) from its
    port through the subnet to the SM LID its PortInfo names, answered by the SM's SA (:func:`bring_up`)."""
    hcas = {h.name: h for h in fab.hcas}
    for name in (src, dst):
        if name not in hcas:
            raise ValueError(f"{name!r} is not an HCA of the fabric (have {sorted(hcas)})")
    records = []
    for me, peer in ((hcas[src], hcas[dst]), (hcas[dst], hcas[src])):
        port = mads.port(me.name)
        try:
            records.append(path_record(port, me.device.sm_lid, me.lid, peer.lid))
        finally:
            port.close()
    return records[0], records[1]


def write_across(fab: IBFabric, length: int, there: PathRecord, back: PathRecord, *, sl: int | None = None) -> bool:
    """One RDMA WRITE of ``length`` bytes from the HCA with LID ``there.slid`` to the one with ``there.dlid``, by an
    RC QP pair connected as a pyverbs program connects them on an HCA: each side's address vector from its
    PathRecord (``ah_attr.dlid``, ``is_global=0``; the record's SL unless ``sl`` is given), its path MTU the
    record's or the fabric's, the smaller.  True when it completed successfully and the bytes landed."""
    by_lid: dict[int, IBHca] = {h.lid: h for h in fab.hcas}
    for what, lid in (("source", there.slid), ("destination", there.dlid)):
        if lid not in by_lid:
            raise ValueError(f"the PathRecord's {what} LID {lid} is no HCA's in the fabric "
                             f"(have {sorted(by_lid)})")
    if (back.slid, back.dlid) != (there.dlid, there.slid):
        raise ValueError(f"the PathRecord back goes from LID {back.slid} to {back.dlid}, not from {there.dlid} to "
                         f"{there.slid}")
    access = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE
    sides = []
    for rec in (there, back):
        ctx = Context(name=by_lid[rec.slid].name, fabric=fab)
        pd = PD(ctx)
        cq = CQ(ctx, 16)
        mr = MR(pd, max(length, 64), access)
        qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq,
                               cap=QPCap(max_send_wr=4, max_recv_wr=4, max_send_sge=1, max_recv_sge=1)))
        sides.append((rec, cq, mr, qp))
    for me, peer in ((sides[0], sides[1]), (sides[1], sides[0])):
        rec = me[0]
        attr = QPAttr(qp_state=e.IBV_QPS_INIT, port_num=1, path_mtu=min(e.bytes_to_mtu(fab.mtu), rec.mtu))
        attr.qp_access_flags = access
        attr.dest_qp_num, attr.rq_psn, attr.sq_psn = peer[3].qp_num, 0, 0
        attr.max_rd_atomic = attr.max_dest_rd_atomic = 1
        attr.min_rnr_timer, attr.timeout, attr.retry_cnt, attr.rnr_retry = 12, 14, 7, 7
        attr.ah_attr = AHAttr(dlid=rec.dlid, sl=rec.sl if sl is None else sl, is_global=0, port_num=1)
        me[3].to_rts(attr)
    (_, cq, mr, qp), (_, _, peer_mr, _) = sides
    mr.write(bytes(i % 251 for i in range(length)), length)
    wr = SendWR(wr_id=1, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(mr.buf, length, mr.lkey)],
                send_flags=e.IBV_SEND_SIGNALED)
    wr.set_wr_rdma(peer_mr.rkey, peer_mr.buf)
    qp.post_send(wr)
    wcs: list[Any] = []

    def done() -> bool:
        wcs.extend(cq.poll(1)[1])
        return bool(wcs)

    fab.progress(done, 2_000_000)
    return bool(wcs) and wcs[0].status == e.IBV_WC_SUCCESS and peer_mr.read(length, 0) == mr.read(length, 0)


def tapped_write(fab: IBFabric, length: int, there: PathRecord, back: PathRecord, capture: str, *,
                 sl: int | None = None) -> list[Any]:
    """:func:`write_across` on the book's fabric with a tap on both links between sw1 and sw2 writing the file
    ``capture`` (ERF records, native InfiniBand): the decoded packets the tap saw (the requests on one link, the
    ACKs on the other, as the tables route them)."""
    tap = ErfTap(capture)
    sw1 = fab.node("sw1")
    for num in (3, 4):  # the two sw1-sw2 links (BOOK_LINKS)
        port = sw1.ports[num]
        port.taps.append(tap)
        if port.peer is not None:
            port.peer.taps.append(tap)
    fab.frames = True
    try:
        ok = write_across(fab, length, there, back, sl=sl)
    finally:
        tap.close()
    if not ok:
        raise RuntimeError(f"the WRITE of {length} bytes from LID {there.slid} to LID {there.dlid} did not complete")
    return [cp.packet for cp in read(capture)]


def lrh_run(length: int, mtu: int, sl: int, vls: int, capture: str) -> list[Any]:
    """The book's subnet brought up by the SM, its fabric (:func:`fabric_on_subnet`) at ``mtu`` with ``vls`` data
    VLs, the PathRecords ha -> hb and back from the SA, and one WRITE of ``length`` bytes from ha to hb on SL
    ``sl``, tapped into ``capture`` (:func:`tapped_write`): the decoded packets the tap saw."""
    subnet = book_subnet()
    mads = SubnetMADs(subnet)
    bring_up(mads)
    fab = fabric_on_subnet(subnet, mtu=mtu, vls=vls)
    there, back = ask_paths(mads, fab, "ha", "hb")
    return tapped_write(fab, length, there, back, capture, sl=sl)


def requests_of(packets: list[Any]) -> list[Any]:
    """The WRITE's request packets among ``packets`` (BTH opcodes below 0x10: RC requests)."""
    return [p for p in packets if p.get(BTH) is not None and p[BTH].opcode < 0x10]


def lrh_answer(s: Any) -> dict[str, int]:
    with tempfile.TemporaryDirectory() as tmp:
        reqs = requests_of(lrh_run(s.length, s.mtu, s.sl, s.vls, f"{tmp}/write.pcap"))
    return {"packets": len(reqs), "last_pktlen": reqs[-1][LRH].pktlen, "vl": reqs[-1][LRH].vl}


@exercise("ib.lrh", "Your WRITE across two switches: its packets, the last one's PktLen, its VL", notebook=NB,
          varies=True, hints=(
    "Run lrh_run(length, mtu, sl, vls, path) with your scenario's values (a path in a temporary directory) and "
    "keep the requests (requests_of): one packet per MTU of payload, the last one shorter.",
    "LRH.pktlen counts 4-byte words from the LRH through the ICRC (not the VCRC): LRH 8 + BTH 12 + (RETH 16 on "
    "the first packet only) + payload and its pad to 4 bytes + ICRC 4.",
    "The VL is what the SL maps to: with SL-to-VL at its default here, sl modulo the number of data VLs.",
))
def _lrh(answer: Any) -> str:
    s = draw("ib.lrh")
    want = lrh_answer(s)
    shape = "{'packets': WRITE packets, 'last_pktlen': LRH.pktlen of the last one, 'vl': LRH.vl}"
    if not isinstance(answer, dict) or set(answer) != set(want):
        raise Wrong(f"Give {shape}.", field="answer", given=answer, expected=shape)
    n = as_int(answer["packets"], "a number of packets", field="packets")
    if n != want["packets"]:
        raise Wrong(f"Your WRITE of {s.length} bytes at an MTU of {s.mtu} is not {n} packets: each carries at most "
                    f"{s.mtu} bytes of payload.", field="BTH.opcode", given=plain(n), expected="the request packets")
    last = as_int(answer["last_pktlen"], "a PktLen in 4-byte words", field="last_pktlen")
    if last != want["last_pktlen"]:
        tail = s.length - (want["packets"] - 1) * s.mtu
        if last == want["last_pktlen"] + 1:
            why = "the VCRC is outside PktLen: it counts the LRH through the ICRC"
        elif last in (tail, tail + 8 + 12 + 4, want["last_pktlen"] * 4):
            why = "PktLen counts 4-byte words, not bytes"
        elif last == (tail + 3) // 4 + (8 + 12 + 16 + 4) // 4:
            why = "only the first packet of a WRITE has a RETH"
        else:
            why = f"the last packet carries {tail} bytes of payload"
        raise Wrong(f"Not PktLen {last}: {why}.", field="LRH.pktlen", given=plain(last),
                    expected="the last request's LRH.pktlen")
    vl = as_int(answer["vl"], "a VL", field="vl")
    if vl != want["vl"]:
        why = ("VL 15 is the management lane, for SMPs only" if vl == 15 else
               f"that is the SL; the port maps SL {s.sl} to a VL among its {s.vls} data VLs" if vl == s.sl else
               f"SL {s.sl} maps to sl modulo {s.vls}")
        raise Wrong(f"Not VL {vl}: {why}.", field="LRH.vl", given=plain(vl), expected="the VL the SL maps to")
    return (f"Right: {want['packets']} packets, the last {want['last_pktlen'] * 4} bytes from LRH to ICRC (the VCRC's "
            f"2 bytes after it), SL {s.sl} on VL {want['vl']}.")


# ----------------------------------------------------------------------------- 3. the incast with credits
@scenario("ib.hol")
def _hol_scenario(r: random.Random) -> dict[str, Any]:
    return {"senders": r.randrange(3, 9), "rate_gbps": r.choice((25, 40, 50, 100))}


#: the incast's run length (us) in the exercise and its plot
HOL_US = 200.0


def hol_runs(senders: int, rate: float) -> tuple[Any, Any]:
    """The leaf-spine incast with its victim, the victim on the incast's VL and on a VL of its own."""
    shared = ib_incast(senders=senders, rate=rate, duration_us=HOL_US)
    own = ib_incast(senders=senders, rate=rate, duration_us=HOL_US, victim_sl=1, vls=2)
    return shared, own


def victim_gbps(run: Any) -> float:
    return float(run.summary["flows"]["hv->rv (victim)"]["gbps"])


def queue_series(times_us: list[float], **kw: Any) -> dict[str, list[float]]:
    """KB held, at each of ``times_us``, in the input buffers along the incast's path (the spine's from the leaf,
    the leaf's from h1) and the time the leaf's port to the spine and h1's port to the leaf have waited for credits
    (``PortXmitWait``, in us): ``ib_incast(**kw)`` run to each time (the runs
    are deterministic, so a run to t is the longer run seen at t)."""
    out: dict[str, list[float]] = {"spine, from leaf": [], "leaf, from h1": [], "leaf->spine xmit wait (us)": [],
                                   "h1->leaf xmit wait (us)": []}
    for t in times_us:
        run = ib_incast(duration_us=t, **kw)
        fab = run.fabric
        out["spine, from leaf"].append(sum(fab.port("spine", "leaf").rx_blocks) * 64 / 1024)
        out["leaf, from h1"].append(sum(fab.port("leaf", "h1").rx_blocks) * 64 / 1024)
        out["leaf->spine xmit wait (us)"].append(fab.port("leaf", "spine").xmit_wait(fab.now_ns) / 1000)
        out["h1->leaf xmit wait (us)"].append(fab.port("h1", "leaf").xmit_wait(fab.now_ns) / 1000)
    return out


@exercise("ib.hol", "Your incast: the victim's goodput on the incast's VL, and on a VL of its own", notebook=NB,
          varies=True, hints=(
    "hol_runs(senders, rate) runs your incast twice, the victim on the incast's VL and on its own; "
    "victim_gbps(run) is its goodput.",
    "Give both numbers in Gb/s as measured (within 5 %).",
))
def _hol(answer: Any) -> str:
    s = draw("ib.hol")
    shared, own = (victim_gbps(r) for r in hol_runs(s.senders, s.rate_gbps))
    shape = "{'shared_vl_gbps': the victim's goodput on the incast's VL, 'own_vl_gbps': on a VL of its own}"
    if not isinstance(answer, dict) or set(answer) != {"shared_vl_gbps", "own_vl_gbps"}:
        raise Wrong(f"Give {shape}.", field="answer", given=answer, expected=shape)
    for key, want in (("shared_vl_gbps", shared), ("own_vl_gbps", own)):
        got = answer[key]
        if isinstance(got, bool) or not isinstance(got, (int, float)):
            raise Wrong(f"{key} is a number of Gb/s.", field=key, given=got, expected="a number")
        if abs(got - want) > 0.05 * want:
            other = own if key == "shared_vl_gbps" else shared
            why = ("that is the other run's" if abs(got - other) <= 0.05 * other else
                   f"that is the line rate; the victim's packets {'wait' if key == 'shared_vl_gbps' else 'do not'} "
                   "wait behind the incast's" if abs(got - s.rate_gbps) <= 0.05 * s.rate_gbps else
                   f"run your incast: {s.senders} senders at {s.rate_gbps} Gb/s")
            raise Wrong(f"Not {got} Gb/s for {key}: {why}.", field=key, given=plain(got),
                        expected="victim_gbps of that run, within 5 %")
    return (f"Right: {shared:.2f} Gb/s behind the incast (about one share in {s.senders + 1} of the shared link), "
            f"{own:.2f} Gb/s on a VL of its own, with nothing dropped in either run.")


# ----------------------------------------------------------------------------- 4. why
_WHY = {
    "A": "The leaf switch drops some of the victim's packets when its buffer is full, and the victim's QP resends "
         "them.",
    "B": "The victim's packets wait in the leaf's output queue on the same VL behind incast packets that have no "
         "credits, because the spine's input buffer for that VL is full of packets for the receiver.",
    "C": "The receiver sends the victim congestion notifications, and its NIC lowers its rate.",
}


@exercise("ib.why", "Why the victim slows down with credits", notebook=NB, hints=(
    "Look at the counters of the runs: drops, and PortXmitWait of the leaf's port to the spine.",
))
def _why(answer: Any) -> str:
    a = as_letter(answer, _WHY)
    if a == "A":
        raise Wrong("Nothing was dropped: a sender with credits never overruns the buffer at the other end of "
                    "its link (the drops counter is 0).", field="drops", given=Said(a),
                    expected="the mechanism by which nothing is dropped")
    if a == "C":
        raise Wrong("No congestion control runs here: no ECN, no CNPs. The slowdown is the link's own flow "
                    "control.", field="answer", given=Said(a),
                    expected="a mechanism of the credits themselves")
    return ("Right: head-of-line blocking. Credits stop a full buffer's upstream link, which fills the buffer "
            "before it, hop by hop; every packet of that VL waits, wherever it goes. A VL of its own has its own "
            "buffers and credits.")


# ----------------------------------------------------------------------------- the stock OpenSM, where installed
STOCK_TOOLS = ("opensm", "ibsim-run", "ibnetdiscover", "ibroute")


def stock_tools() -> str:
    """What is missing here to run the stock OpenSM and diags (:data:`STOCK_TOOLS`); "" when nothing is."""
    missing = [t for t in STOCK_TOOLS if shutil.which(t) is None]
    return f"not installed here: {', '.join(missing)} (Debian: opensm, ibsim-utils, infiniband-diags)" if missing \
        else ""


@dataclass
class OpenSMRun:
    """What the stock tools said while OpenSM was master of the subnet: ``ibnetdiscover``'s output, ``ibroute``'s
    of every switch (by name), and the PathRecords OpenSM's SA gave (by (source, destination) HCA names)."""

    ibnetdiscover: str = ""
    ibroute: dict[str, str] = field(default_factory=dict)
    paths: dict[tuple[str, str], PathRecord] = field(default_factory=dict)


_socknames = count()


@contextmanager
def served(subnet: Subnet) -> Iterator[str]:
    """``subnet`` served by ``rdmalab ibsim``'s server (:class:`~rdmalab.fabric.ibsim_server.IbsimServer`) on
    ibsim's sockets, in a thread of this process, until the block ends; yields the sockets' name for
    ``IBSIM_SOCKNAME``.  The subnet keeps what its clients set."""
    sockname = f"rdmalab-nb14-{os.getpid()}-{next(_socknames)}"
    server = IbsimServer(subnet, sockname)
    thread = threading.Thread(target=server.serve, name=f"ibsim {sockname}", daemon=True)
    thread.start()
    try:
        yield sockname
    finally:
        server.stop()
        thread.join(timeout=10)
        server.close()


def run_opensm(subnet: Subnet, tmp: str, *, sm_host: str = "ha", pairs: tuple[tuple[str, str], ...] = (),
               timeout: float = 30.0) -> OpenSMRun:
    """The stock OpenSM on ``subnet`` (:func:`served`), on ``sm_host``'s port: once it has brought the subnet up,
    ``ibnetdiscover``, ``ibroute`` of every switch, and, for each (source, destination) of ``pairs``, the
    PathRecord the source's port asks of OpenSM's SA (at the SM LID its own PortInfo names); then OpenSM stops.
    The subnet keeps what OpenSM wrote into its agents (LIDs, port states, forwarding tables), so that
    :func:`fabric_on_subnet` then builds the data path on OpenSM's tables.  RuntimeError, with the tool's own
    words, when a step fails."""
    missing = stock_tools()
    if missing:
        raise RuntimeError(missing)
    log = Path(tmp) / "osm.log"
    out = OpenSMRun()
    with served(subnet) as sockname:
        env = dict(os.environ, IBSIM_SOCKNAME=sockname, SIM_HOST=sm_host, OSM_TMP_DIR=tmp, OSM_CACHE_DIR=tmp)
        # -e: a fresh log; -d2: flush it at every line (so "SUBNET UP" can be waited for); -s 0: no later sweeps
        osm = subprocess.Popen(["ibsim-run", "opensm", "-e", "-f", str(log), "-d2", "-s", "0"], env=env,
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + timeout
            while "SUBNET UP" not in (log.read_text(errors="replace") if log.exists() else ""):
                if osm.poll() is not None or time.monotonic() > deadline:
                    said = log.read_text(errors="replace")[-400:] if log.exists() else "no log"
                    raise RuntimeError(f"OpenSM did not bring the subnet up within {timeout} s: {said}")
                time.sleep(0.05)

            def tool(*argv: str) -> str:
                got = subprocess.run(["ibsim-run", *argv], env=env, capture_output=True, text=True, timeout=timeout)
                if got.returncode != 0:
                    raise RuntimeError(f"{' '.join(argv)} exited {got.returncode}: {got.stderr.strip()[-400:]}")
                return got.stdout

            out.ibnetdiscover = tool("ibnetdiscover")
            for node in subnet.nodes:
                if node.is_switch:
                    out.ibroute[node.nodeid] = tool("ibroute", str(node.first_port().lid))
            for src, dst in pairs:
                mine, theirs = (_own_port_info(sockname, name) for name in (src, dst))
                with IBSimClient(src, sockname=sockname) as client:
                    out.paths[(src, dst)] = path_record(client, mine.master_sm_lid, mine.lid, theirs.lid)
        finally:
            osm.terminate()
            try:
                osm.wait(timeout=10)
            except subprocess.TimeoutExpired:
                osm.kill()
                osm.wait()
    return out


def _own_port_info(sockname: str, node: str) -> PortInfo:
    """``node``'s PortInfo as its driver reads it (a directed-route Get with hop count 0), over ibsim's sockets."""
    with IBSimClient(node, sockname=sockname) as client:
        return PortInfo.decode(client.exchange(dr_get(ATTR_PORT_INFO, (), attr_mod=1).encode(), 0xFFFF, 0), 64)
