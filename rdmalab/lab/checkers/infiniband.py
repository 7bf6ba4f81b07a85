"""Checkers for 14-infiniband: a subnet manager's LIDs and tables, a WRITE's LRHs, credits under incast.

The notebook's subnet is an :class:`~rdmalab.fabric.ibfabric.IBFabric` (HCAs, switches forwarding by their
linear forwarding tables, credits per VL) brought up by rdmalab's own subnet manager
(:class:`~rdmalab.fabric.ibsm.SubnetManager`).  The SM speaks directed-route SMPs to a ``MADPort``; here that
port is :class:`FabricAgents`, the subnet management agents of the fabric's nodes in this process, so the
notebook runs without a simulator: each SMP is encoded, walked hop by hop along its initial path through the
fabric's links, answered by the node it reaches (NodeInfo, NodeDescription, SwitchInfo, PortInfo,
LinearForwardingTable) and decoded by the SM.  A Set(PortInfo) gives an HCA its LID in the fabric (what its
device's ``query_port`` reports), a Set(LinearForwardingTable) writes a switch's table, which the data
packets then follow.  Every expected answer is measured on that fabric or on
:func:`rdmalab.fabric.ibflows.ib_incast`, as the notebook measures it.

Per student (:mod:`rdmalab.lab.variant`): ``ib.lft``, the subnet's wiring (which switch ports the HCAs use,
which HCA the SM runs on, which LID and switch are asked about); ``ib.lrh``, the WRITE's length, MTU, SL and
VLs; ``ib.hol``, the number of senders of the incast.  ``ib.why`` is a mechanism, the same for everyone.
"""

from __future__ import annotations

import importlib.util
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rdmalab.capture.reader import read
from rdmalab.fabric.ibfabric import LFT_BLOCK, ErfTap, IBFabric, IBHca, IBNode, IBSwitch
from rdmalab.fabric.ibflows import ib_incast
from rdmalab.fabric.ibsim_client import IBSimClient, IBSimNotRunning
from rdmalab.fabric.ibsm import SM, SubnetManager
from rdmalab.lab.core import Said, Wrong, exercise
from rdmalab.lab.feedback import as_int, plain
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
from rdmalab.wire.mad import METHOD_GET, METHOD_SET
from rdmalab.wire.smp import (
    ATTR_LINEAR_FORWARDING_TABLE,
    ATTR_NODE_DESCRIPTION,
    ATTR_NODE_INFO,
    ATTR_PORT_INFO,
    ATTR_SWITCH_INFO,
    CAPMASK_IS_SM,
    NODE_TYPE_CA,
    NODE_TYPE_SWITCH,
    PHYS_STATE_LINKUP,
    PORT_STATE_ACTIVE,
    PORT_STATE_ARMED,
    PORT_STATE_DOWN,
    PORT_STATE_INIT,
    PORT_STATE_NOP,
    SMP,
    NodeInfo,
    PortInfo,
    SwitchInfo,
    attribute_data,
    get_response,
)

NB = "14-infiniband"

#: MAD status of an SMP an agent cannot answer: "unsupported method/attribute" (IBA Vol 1 13.4.7, table 111:
#: bits 2-4 = 3 unsupported attribute or modifier; 7: invalid value in the attribute)
STATUS_BAD_ATTRIBUTE = 3 << 2
STATUS_BAD_VALUE = 7 << 2
#: a placeholder LID every port holds before the SM has set one (reported as 0 in PortInfo)
_UNSET_BASE = 0xB000
#: PortInfo's LinkSpeedActive code by Gb/s per lane (14.2.5.6: 1 SDR 2.5, 2 DDR 5, 4 QDR 10)
_SPEED = {2500: 1, 5000: 2, 10000: 4}
_MTU_CODE = {256: 1, 512: 2, 1024: 3, 2048: 4, 4096: 5}


class SMPLost(RuntimeError):
    """An SMP whose directed route leads through no link: a real subnet drops it (the SM times out)."""


# ----------------------------------------------------------------------------- the agents
class FabricAgents:
    """The subnet management agents of every node of ``fabric``, reached from HCA ``sm_host``'s port:
    a ``MADPort`` for :class:`~rdmalab.fabric.ibsm.SubnetManager` (``exchange(mad, dlid, dqp) -> reply``).

    Directed-route SMPs only (the SM's sweep uses nothing else): Get of NodeInfo, NodeDescription,
    SwitchInfo, PortInfo, LinearForwardingTable; Set of PortInfo (LID, MasterSMLID, PortState one step at a
    time: Init -> Armed -> Active), SwitchInfo (LinearFDBTop) and LinearForwardingTable.  Anything else is
    answered with a bad-attribute status; a route through a port without a link raises :class:`SMPLost`.
    ``log`` lists each SMP as (path, node reached, port it entered by, attribute summary)."""

    def __init__(self, fabric: IBFabric, sm_host: str) -> None:
        host = fabric.node(sm_host)
        if not isinstance(host, IBHca):
            raise ValueError(f"the SM runs on an HCA's port; {sm_host!r} is a switch")
        self.fabric = fabric
        self.host = host
        self.state: dict[tuple[str, int], int] = {}
        self.sm_lid: dict[tuple[str, int], int] = {}
        self.assigned: set[str] = set()
        self.top: dict[str, int] = {}
        self.log: list[tuple[tuple[int, ...], str, int, str]] = []
        for n in fabric.nodes:
            for num, p in n.ports.items():
                self.state[(n.name, num)] = PORT_STATE_INIT if p.peer is not None else PORT_STATE_DOWN
            if isinstance(n, IBSwitch):
                self.state[(n.name, 0)] = PORT_STATE_ACTIVE  # port 0, the management port, is always up

    def walk(self, path: tuple[int, ...]) -> tuple[IBNode, int, tuple[int, ...]]:
        """The node an SMP with initial path ``path`` reaches, the port it enters by and the return path."""
        node: IBNode = self.host
        inport = 1
        back: list[int] = []
        for hop, out in enumerate(path):
            port = node.ports.get(out)
            if port is None or port.peer is None:
                raise SMPLost(f"hop {hop + 1} of directed route {list(path)}: {node.name} port {out} has no link")
            node, inport = port.peer.node, port.peer.num
            back.append(inport)
        return node, inport, tuple(back)

    def exchange(self, mad: bytes, dlid: int, dqp: int) -> bytes:
        req = SMP.decode(mad)
        if not req.directed or dqp != 0:
            return get_response(req, b"", STATUS_BAD_ATTRIBUTE).encode()
        node, inport, back = self.walk(req.initial_path)
        status, data = self._answer(req, node, inport)
        self.log.append((req.initial_path, node.name, inport, req.summary()))
        reply = get_response(req, data, status)
        return SMP(reply.method, reply.attr_id, reply.attr_mod, reply.tid, reply.data, initial_path=req.initial_path,
                   return_path=back, hop_ptr=req.hops, hop_cnt=req.hops, direction=1, status=status).encode()

    # ------------------------------------------------------------------ attributes
    def _answer(self, req: SMP, node: IBNode, inport: int) -> tuple[int, bytes]:
        attr, mod, is_set = req.attr_id, req.attr_mod, req.method == METHOD_SET
        if req.method not in (METHOD_GET, METHOD_SET):
            return STATUS_BAD_ATTRIBUTE, b""
        switch = node if isinstance(node, IBSwitch) else None
        if attr == ATTR_NODE_INFO and not is_set:
            info = NodeInfo(node_type=NODE_TYPE_SWITCH if switch else NODE_TYPE_CA,
                            num_ports=switch.nports if switch else 1, system_image_guid=node.guid,
                            node_guid=node.guid, port_guid=node.guid, partition_cap=1, device_id=0x1003,
                            local_port_num=inport, vendor_id=0x0002C9)
            return 0, attribute_data(info)
        if attr == ATTR_NODE_DESCRIPTION and not is_set:
            return 0, node.name.encode()[:64].ljust(64, b"\0")
        if attr == ATTR_PORT_INFO:
            num = mod or (0 if switch else inport)
            if num > (switch.nports if switch else 1):
                return STATUS_BAD_ATTRIBUTE, b""
            if is_set:
                bad = self._set_port(node, num, PortInfo.decode(req.data[:64]))
                if bad:
                    return STATUS_BAD_VALUE, attribute_data(self.port_info(node, num))
            return 0, attribute_data(self.port_info(node, num))
        if switch is not None and attr == ATTR_SWITCH_INFO:
            if is_set:
                self.top[switch.name] = SwitchInfo.decode(req.data[:17]).linear_fdb_top
            return 0, attribute_data(SwitchInfo(linear_fdb_cap=0xC000, linear_fdb_top=self.top.get(switch.name, 0),
                                                default_port=0xFF, life_time_value=18, lids_per_port=1,
                                                enhanced_port0=0))
        if switch is not None and attr == ATTR_LINEAR_FORWARDING_TABLE:
            if is_set:
                try:
                    switch.set_lft(mod, list(req.data[:LFT_BLOCK]))
                except ValueError:
                    return STATUS_BAD_VALUE, bytes(switch.lft_block(mod)) if mod < 0xC000 // LFT_BLOCK else b""
            return 0, bytes(switch.lft_block(mod))
        return STATUS_BAD_ATTRIBUTE, b""

    def lid(self, node: IBNode) -> int:
        """The LID a port reports: 0 until the SM set one."""
        return node.lid if node.name in self.assigned else 0

    def port_info(self, node: IBNode, num: int) -> PortInfo:
        port = node.ports.get(num)
        linked = port is not None and port.peer is not None
        state = self.state.get((node.name, num), PORT_STATE_DOWN)
        carries_lid = num == 0 or not isinstance(node, IBSwitch)
        is_sm = node is self.host
        lanes = 4
        speed = _SPEED.get((port.mbps // lanes) if port is not None else 0, 4)
        return PortInfo(gid_prefix=0xFE80 << 48, lid=self.lid(node) if carries_lid else 0,
                        master_sm_lid=self.sm_lid.get((node.name, num), 0),
                        capability_mask=CAPMASK_IS_SM if is_sm else 0, local_port_num=num,
                        link_width_enabled=2, link_width_supported=2, link_width_active=2 if linked else 0,
                        link_speed_supported=speed, port_state=state,
                        port_phys_state=PHYS_STATE_LINKUP if linked or num == 0 else 2, link_down_default_state=2,
                        link_speed_active=speed if linked else 0, link_speed_enabled=speed,
                        neighbor_mtu=_MTU_CODE[self.fabric.mtu], vl_cap=min(self.fabric.vls, 4) if linked else 0,
                        mtu_cap=_MTU_CODE[self.fabric.mtu], operational_vls=1, guid_cap=1, subnet_timeout=18)

    def _set_port(self, node: IBNode, num: int, new: PortInfo) -> bool:
        """Apply a Set(PortInfo); True when a value is refused (a LID another port has, a state skipped)."""
        key = (node.name, num)
        if num == 0 or not isinstance(node, IBSwitch):
            if new.lid and (new.lid != node.lid or node.name not in self.assigned):
                try:
                    self.fabric.set_lid(node, new.lid, new.master_sm_lid or None)
                except ValueError:
                    return True
                self.assigned.add(node.name)
        if new.master_sm_lid:
            self.sm_lid[key] = new.master_sm_lid
        want, now = new.port_state, self.state.get(key, PORT_STATE_DOWN)
        if want == PORT_STATE_NOP or want == now:
            return False
        if (want, now) in ((PORT_STATE_ARMED, PORT_STATE_INIT), (PORT_STATE_ACTIVE, PORT_STATE_ARMED)):
            self.state[key] = want
            return False
        return True


def build(links: list[tuple[str, int, str, int]], *, hcas: list[str], switches: list[str], nports: int = 6,
          **fabric_kw: Any) -> IBFabric:
    """A fabric of ``hcas`` and ``switches`` (``nports`` each), ``links`` as (node, port, node, port), every
    port without a LID yet (placeholder LIDs the SM replaces) and every switch with an empty table."""
    fab = IBFabric(**fabric_kw)
    for i, name in enumerate(switches):
        fab.add_switch(name, nports=nports, lid=_UNSET_BASE + 0x100 + i)
    for i, name in enumerate(hcas):
        fab.add_hca(name, lid=_UNSET_BASE + i)
    for a, pa, b, pb in links:
        fab.link(a, b, 40.0, 0.1, port_a=pa if fab.node(a) in fab.switches else None,
                 port_b=pb if fab.node(b) in fab.switches else None)
    return fab


#: the notebook's own subnet: ha on sw1, hb and hc on sw2, two links between the switches
BOOK_LINKS = [("ha", 1, "sw1", 1), ("sw1", 3, "sw2", 3), ("sw1", 4, "sw2", 4), ("sw2", 1, "hb", 1),
              ("sw2", 2, "hc", 1)]


def book_subnet(**fabric_kw: Any) -> IBFabric:
    """The notebook's subnet (:data:`BOOK_LINKS`), not yet brought up."""
    return build(BOOK_LINKS, hcas=["ha", "hb", "hc"], switches=["sw1", "sw2"], **fabric_kw)


def bring_up(fabric: IBFabric, sm_host: str = "ha") -> SubnetManager:
    """Run rdmalab's subnet manager on ``sm_host``'s port against ``fabric``: sweep, LIDs, tables, Active."""
    sm = SubnetManager(FabricAgents(fabric, sm_host))
    sm.run()
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


def scenario_links(s: Any) -> list[tuple[str, int, str, int]]:
    """A scenario's wiring as :func:`build` takes it."""
    out = []
    for host, where in s.hcas.items():
        sw, _, port = where.split()
        out.append((host, 1, sw, int(port)))
    for text in s.switch_links:
        a, _, pa, _, b, _, pb = text.split()
        out.append((a, int(pa), b, int(pb)))
    return out


def my_subnet(**fabric_kw: Any) -> IBFabric:
    """Your subnet (scenario ``ib.lft``), not yet brought up."""
    s = draw("ib.lft")
    return build(scenario_links(s), hcas=list(s.hcas), switches=["sw1", "sw2"], **fabric_kw)


def lft_answer() -> tuple[int, int, SubnetManager]:
    s = draw("ib.lft")
    sm = bring_up(my_subnet(), s.sm_on)
    target = next(p for p in sm.lids.values() if sm.nodes[p.node_guid].name == s.target)
    return target.lid, lft_of(sm, s.switch)[target.lid], sm


@exercise("ib.lft", "Your subnet: the LID the SM gives a host, and where a switch sends it", notebook=NB, varies=True,
          hints=(
    "Build your subnet with my_subnet() and bring it up with bring_up(fabric, sm_host) from the SM's host of your "
    "scenario: sm.lids maps each LID to the port that has it.",
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


def write_across(fab: IBFabric, length: int, *, sl: int = 0, src: str = "ha", dst: str = "hb") -> bool:
    """One RDMA WRITE of ``length`` bytes from ``src`` to ``dst``, by LID on service level ``sl`` (an RC QP pair
    connected as a pyverbs program connects them on an HCA); True when it completed successfully."""
    access = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE
    sides = []
    for name in (src, dst):
        ctx = Context(name=name, fabric=fab)
        pd = PD(ctx)
        cq = CQ(ctx, 16)
        mr = MR(pd, max(length, 64), access)
        qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq,
                               cap=QPCap(max_send_wr=4, max_recv_wr=4, max_send_sge=1, max_recv_sge=1)))
        sides.append((ctx, cq, mr, qp))
    for me, peer in ((sides[0], sides[1]), (sides[1], sides[0])):
        attr = QPAttr(qp_state=e.IBV_QPS_INIT, port_num=1, path_mtu=e.bytes_to_mtu(fab.mtu))
        attr.qp_access_flags = access
        attr.dest_qp_num, attr.rq_psn, attr.sq_psn = peer[3].qp_num, 0, 0
        attr.max_rd_atomic = attr.max_dest_rd_atomic = 1
        attr.min_rnr_timer, attr.timeout, attr.retry_cnt, attr.rnr_retry = 12, 14, 7, 7
        attr.ah_attr = AHAttr(dlid=peer[0].query_port(1).lid, sl=sl, is_global=0, port_num=1)
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


def lrh_run(length: int, mtu: int, sl: int, vls: int, capture: str) -> list[Any]:
    """The book's subnet at ``mtu`` with ``vls`` data VLs, brought up by the SM, a tap on both links between sw1
    and sw2 writing the file ``capture``, one WRITE of ``length`` bytes from ha to hb on SL ``sl``: the decoded
    packets the tap saw (the requests on one link, the ACKs on the other, as the tables route them)."""
    fab = book_subnet(mtu=mtu, vls=vls)
    bring_up(fab)
    tap = ErfTap(capture)
    for num in (3, 4):  # the two sw1-sw2 links (BOOK_LINKS)
        port = fab.node("sw1").ports[num]
        port.taps.append(tap)
        if port.peer is not None:
            port.peer.taps.append(tap)
    fab.frames = True
    ok = write_across(fab, length, sl=sl)
    tap.close()
    if not ok:
        raise RuntimeError(f"the WRITE of {length} bytes from ha to hb did not complete")
    return [cp.packet for cp in read(capture)]


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
    if not isinstance(answer, str) or answer.strip().upper() not in _WHY:
        raise Wrong(f"Answer with one letter of {', '.join(_WHY)}.", field="answer", given=answer,
                    expected="A, B or C")
    a = answer.strip().upper()
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
def netfile(fabric: IBFabric) -> str:
    """``fabric``'s nodes and links in ibsim's net-file format (ibnetdiscover's: a record per node, its linked
    ports as ``[port] "peer"[port]``), the first HCA first, so that it is the SM's port."""
    order = fabric.hcas[:1] + fabric.switches + fabric.hcas[1:]
    out = []
    for n in order:
        kind, ports = ("Switch", n.nports) if isinstance(n, IBSwitch) else ("Hca", 1)
        lines = [f'{kind}\t{ports} "{n.name}"']
        for num, p in sorted(n.ports.items()):
            if p.peer is not None:
                lines.append(f'[{num}]\t"{p.peer.node.name}"[{p.peer.num}]')
        out.append("\n".join(lines))
    return "\n\n".join(out) + "\n"


def stock_tools() -> tuple[list[str], str]:
    """(the simulator command to run a net file with, or [] and why not): ``rdmalab ibsim`` when this rdmalab
    has it, else the stock ``ibsim``; and the stock OpenSM, ibsim-run and ibnetdiscover must be installed."""
    missing = [t for t in ("opensm", "ibsim-run", "ibnetdiscover") if shutil.which(t) is None]
    if missing:
        return [], f"not installed here: {', '.join(missing)} (Debian: opensm, ibsim-utils, infiniband-diags)"
    if importlib.util.find_spec("rdmalab.fabric.ibsim_server") is not None:
        return [sys.executable, "-m", "rdmalab", "ibsim", "--sockname"], "rdmalab ibsim"
    if shutil.which("ibsim") is not None:
        return ["ibsim", "-s"], "the stock ibsim"
    return [], "no simulator: neither rdmalab ibsim (rdmalab.fabric.ibsim_server) nor the stock ibsim is installed"


def run_opensm(fabric: IBFabric, tmp: str, *, sm_host: str = "ha", timeout: float = 30.0) -> dict[str, str]:
    """The stock OpenSM, once (``opensm -o``), on ``fabric``'s net file in a simulator (:func:`stock_tools`),
    then ``ibnetdiscover`` and ``ibroute`` of each switch: their outputs, and ``simulator``: which one ran.
    RuntimeError, with the tool's own words, when a step fails."""
    cmd, which = stock_tools()
    if not cmd:
        raise RuntimeError(which)
    net = Path(tmp) / "lab.net"
    net.write_text(netfile(fabric), encoding="utf-8")
    sockname = f"rdmalab-nb14-{os.getpid()}-{int(time.monotonic() * 1000) % 100000}"
    env = dict(os.environ, IBSIM_SOCKNAME=sockname, SIM_HOST=sm_host, OSM_TMP_DIR=tmp, OSM_CACHE_DIR=tmp)
    args = [*cmd, sockname, str(net)] if cmd[-1] == "--sockname" else [*cmd, str(net)]
    log = open(Path(tmp) / "sim.log", "wb")  # noqa: SIM115  # closed in the finally below
    sim = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=tmp)
    out = {"simulator": which}
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                IBSimClient(None, sockname=sockname, timeout=1.0).close()
                break
            except IBSimNotRunning:
                if sim.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{which} did not start: "
                                       f"{(Path(tmp) / 'sim.log').read_text(errors='replace')[-400:]}") from None
                time.sleep(0.05)

        def tool(*argv: str) -> str:
            got = subprocess.run(["ibsim-run", *argv], env=env, capture_output=True, text=True, timeout=timeout)
            if got.returncode != 0:
                raise RuntimeError(f"{' '.join(argv)} exited {got.returncode}: {got.stderr.strip()[-400:]}")
            return got.stdout

        tool("opensm", "-o", "-e", "-f", str(Path(tmp) / "osm.log"), "-s", "0")
        out["ibnetdiscover"] = tool("ibnetdiscover")
        for sw in fabric.switches:
            m = re.search(rf'^Switch\s.*"{sw.name}".*\blid (\d+)', out["ibnetdiscover"], re.M)
            if m:
                out[f"ibroute {sw.name}"] = tool("ibroute", m.group(1))
        return out
    finally:
        if sim.stdin is not None:
            sim.stdin.close()
        sim.terminate()
        try:
            sim.wait(timeout=5)
        except subprocess.TimeoutExpired:
            sim.kill()
            sim.wait()
        log.close()
