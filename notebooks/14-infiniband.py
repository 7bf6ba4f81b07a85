# %% [markdown]
# # InfiniBand's own network
#
# RoCE and iWARP carry RDMA over Ethernet and IP, networks that existed before them. InfiniBand, where the
# verbs and the transport headers come from, is a network of its own, with its own addresses, its own
# switches and its own way of never dropping a packet for congestion:
#
# * **A subnet manager (SM)** brings the subnet up. Until it has run, no port has an address: the SM finds
#   every switch and adapter by *directed-route* packets, gives each port a 16-bit **LID** (local ID), and
#   writes into every switch a **linear forwarding table** (LFT): destination LID -> output port.
# * **Packets** carry a **Local Route Header** (LRH: destination and source LID, service level, virtual
#   lane) in place of Ethernet and IP, and two CRCs: the ICRC end to end, the VCRC hop by hop.
# * **Credits** (IBA Vol 1 7.9): a port sends only when the buffer at the other end of its link has room,
#   which that end advertises, per virtual lane. A full buffer stops the link before it; nothing is dropped.
#
# Everything here runs in this process, on the house's model of a subnet: the subnet is an *ibsim net file*
# (the topology format of ibsim, the simulator OpenSM is tested on), read into `rdmalab.fabric.ibsubnet.Subnet`,
# whose every port has the *subnet management agent* ibsim gives it; the SM is `rdmalab.fabric.ibsm`, a subnet
# manager written to be read, whose packets cross that subnet hop by hop (`SubnetMADs`); and the data path
# is `rdmalab.fabric.ibfabric` (soft HCAs of the verbs engine, switches, credits per VL) built from the subnet
# the SM brought up (`fabric_on_subnet`): the switches forward by the tables the SM wrote into their agents,
# and the HCAs take their LIDs from their own ports. Near the end, where they are installed, the stock OpenSM
# and infiniband-diags manage the same net file, and the WRITE runs again on OpenSM's tables.

# %%
from rdmalab import lab, viz
from rdmalab.fabric.ibfabric_subnet import SubnetLFT, SubnetMADs, fabric_on_subnet, own_port_info
from rdmalab.lab.checkers.infiniband import book_net, book_subnet, bring_up, lft_of, sm_ladder

print(book_net())
subnet = book_subnet()
print("switches:", [n.nodeid for n in subnet.nodes if n.is_switch], "| HCAs:",
      [n.nodeid for n in subnet.nodes if not n.is_switch])

# %% [markdown]
# Three HCAs (`ha` on switch `sw1`, `hb` and `hc` on `sw2`) and two links between the switches, all 4x QDR
# (`speed=4`: four lanes of 10 Gb/s). A record per node, a line per linked port: `[3] "sw2"[3]` under `sw1`
# is its port 3, linked to port 3 of `sw2`. Before a subnet manager has run, a port has no LID (its PortInfo
# says 0, and its state *Init*: the link is up, the port carries no data) and every switch's table is empty:
# a switch with no entry for a packet's DLID discards the packet, so no data can cross yet. Here is `hb`'s
# port as its driver reads it (a Get(PortInfo) to its own agent), and `sw1`'s table as its agent holds it:

# %%
info = own_port_info(subnet, "hb")
print(f"hb's port: LID {info.lid}, state {info.state_name} | sw1's table:", dict(SubnetLFT(subnet.node("sw1"))))

# %% [markdown]
# ## The sweep: directed-route SMPs
#
# The SM runs on `ha`. It speaks **SMPs** (subnet management packets, MADs of 256 bytes to QP0, IBA Vol 1
# 14.2) on the management lane, VL15. With no LIDs to address anything, each SMP carries its route: the
# list of output ports, hop by hop (*directed route*, 14.2.2). `path []` is `ha` itself, `path [1]` is
# whatever is at the end of `ha`'s port 1, `path [1, 3]` leaves that switch by port 3, and so on. At each
# node the SM asks `NodeInfo` (a switch or an adapter? its GUID, its number of ports, the port the SMP came
# in by), `NodeDescription`, `SwitchInfo` and the `PortInfo` of every port; for every switch port whose
# link is up it sends `NodeInfo` one hop further, breadth first. `SubnetMADs` carries each SMP from `ha`'s
# port through the subnet, switch port by switch port, to the agent it is for, and the answer back. (The
# ladder draws each SMP from the SM to the node that answers it.)

# %%
mads = SubnetMADs(subnet)
sm = bring_up(mads, "ha")
sweep = [ev for ev in sm.events if ev.phase == "discover" and ev.src == "SM"]
print(f"SM {sm.state_name}: {len(sm.nodes)} nodes; the sweep took {len(sweep)} SMPs, "
      f"{sum(' PortInfo ' in ev.summary for ev in sweep)} of them Get(PortInfo), left out of the drawing")
sm_ladder(sm, ("discover",), skip=("PortInfo",), title="the sweep: directed-route SMPs from the SM on ha")

# %% [markdown]
# Note how the sweep meets `sw2` twice, by port 3 and by port 4 of `sw1`: `NodeInfo` returns the same node
# GUID, so the SM knows it is one switch with two links to `sw1`, and does not sweep it again.
#
# Each of these SMPs is a packet: a UD SEND to QP0 on VL15, between the *permissive* LIDs 0xFFFF (no LID is
# needed to follow a directed route). The SM writes every one into a capture, which rdmalab (and tshark)
# decode:

# %%
import tempfile

from rdmalab import capture
from rdmalab.wire.ib import LRH

with tempfile.TemporaryDirectory() as tmp:
    sm.write_capture(f"{tmp}/sm.pcap")
    smps = [cp.packet for cp in capture.read(f"{tmp}/sm.pcap")]
for p in smps[10:14]:
    print(f"VL {p[LRH].vl} DLID {p[LRH].dlid:#06x} SLID {p[LRH].slid:#06x} | {p.summary().split(' MAD ')[-1]}")

# %% [markdown]
# A directed-route SMP carries its route in the MAD itself: the *initial path* (the output port at each hop),
# a hop count and a hop pointer. On the way the agents fill in the *return path*, the port by which the SMP
# entered each node, so that the answer (direction bit set) can retrace the route backwards (IBA Vol 1
# 14.2.2). The SMP that first reached `hb`, and its answer:

# %%
from rdmalab.wire.smp import SMP

ask = next(i for i, ev in enumerate(sm.events) if ev.dst == "hb")
for ev in sm.events[ask:ask + 2]:
    smp = SMP.decode(ev.mad)
    print(f"{ev.src:>3} -> {ev.dst:3} {smp.summary():40} hops {smp.hops} hop pointer {smp.hop_ptr} "
          f"direction {smp.direction}: initial path {list(smp.initial_path)}, return path {list(smp.return_path)}")

# %% [markdown]
# ## The LIDs appear
#
# Then the SM numbers the ports: LID 1 for its own, then one per adapter port and one per switch (its
# port 0, the management port) in the order the sweep met them, and writes each one into that port's
# `PortInfo` with a Set. The ports go Init -> Armed -> Active, one step a Set.

# %%
for lid, port in sorted(sm.lids.items()):
    node = sm.nodes[port.node_guid]
    print(f"LID {lid}: {node.name:4} port {port.num}  ({'switch' if node.is_switch else 'HCA'}, "
          f"GUID 0x{port.guid:016x})")
print("port states:", sorted(set(sm.port_states().values())))
info = own_port_info(subnet, "hb")
print(f"hb's port, as its driver reads it now: LID {info.lid}, state {info.state_name}, SM at LID {info.master_sm_lid}")

# %%
from collections import Counter

print("the SM's MADs, by step:", dict(Counter(ev.phase for ev in sm.events)))
sm_ladder(sm, ("set lids",), title="each LID into its port's PortInfo, by Set")

# %% [markdown]
# Now the subnet can carry data. `fabric_on_subnet` builds the data path from it, copying nothing the SM set:
# each HCA reads its LID and its SM's LID from its own PortInfo (a port that is not Active is refused), and
# each switch forwards by the very table its agent holds. The HCAs' verbs see their LID, as `ibv_query_port`
# reports it on a real HCA. The ports run at an MTU of 1024 bytes here:

# %%
from rdmalab.verbs.device import Context

fabric = fabric_on_subnet(subnet, mtu=1024)
print("hb's port, as its verbs see it: LID", Context(name="hb", fabric=fabric).query_port(1).lid)

# %% [markdown]
# ## A switch's forwarding table
#
# For every switch and every LID the SM picks an output port on a shortest path (*min-hop*); of equally
# short ones, the port that carries the fewest routes so far, so that parallel links share the load. It
# writes each table with Set(LinearForwardingTable), 64 LIDs a block. Port 0 is the switch itself. What
# the switch's agent holds, and the data path forwards by, is the table the SM computed:

# %%
for sw in ("sw1", "sw2"):
    held = dict(fabric.node(sw).lft)
    assert held == lft_of(sm, sw)
    print(f"{sw}:  " + "   ".join(f"LID {lid} -> port {out}" for lid, out in sorted(held.items())))

# %% [markdown]
# `sw1` sends `hb` and `hc`, both behind `sw2`, out of different ports, one over each link. An adapter learns
# the path to a peer from the SM's **Subnet Administrator** (SA) with a *PathRecord* query (IBA Vol 1
# 15.2.5.16): a MAD of the SA class to QP1 at the SM's LID (which the adapter's PortInfo names), LID-routed
# through the switches like data. The answer has the LIDs, the SL, the MTU and rate of the path.
# `ask_paths` sends it from `ha` (for `hb`; the SM runs on `ha`'s port, so that query goes to `ha`'s own LID)
# and from `hb` (for `ha`, across both switches):

# %%
from rdmalab.fabric.ibsm_sa import SubnetAdministrator
from rdmalab.lab.checkers.infiniband import ask_paths

before = len(sm.events)
there, back = ask_paths(mads, fabric, "ha", "hb")
for ev in sm.events[before:]:
    print(f"{ev.src:>3} -> {ev.dst:3} DLID {ev.dlid} SLID {ev.slid} QP{ev.dqp} | {ev.summary}")
path = SubnetAdministrator(sm).path(there.slid, there.dlid)
print(f"ha -> hb: SLID {there.slid}, DLID {there.dlid}, SL {there.sl}, MTU code {there.mtu}, {path.hops} links, "
      f"leaving by {[f'{sm.nodes[p.node_guid].name}/{p.num}' for p in path.ports]}")

# %% [markdown]
# ## A WRITE across two switches
#
# Now the data. A WRITE of 3000 bytes from `ha` to `hb` by an RC QP pair whose address vectors are the
# PathRecords': the peer by LID (`ah_attr.dlid`, `is_global=0`, as on an HCA), the SL, and a path MTU of at
# most the record's (MTU code 4: 2048; the ports here run at 1024). A tap on both links between the switches
# writes what crosses them, native InfiniBand in ERF records that tshark decodes as InfiniBand.

# %%
from rdmalab.lab.checkers.infiniband import requests_of, tapped_write

with tempfile.TemporaryDirectory() as tmp:
    packets = tapped_write(fabric, 3000, there, back, f"{tmp}/write.pcap")
for p in packets:
    lrh = p[LRH]
    print(f"{p.summary()[:60]:60} DLID {lrh.dlid} SLID {lrh.slid} SL {lrh.sl} VL {lrh.vl} PktLen {lrh.pktlen} | "
          f"ICRC {p.crc_status}, VCRC {p.vcrc_status}")

# %% [markdown]
# The three requests go to `hb`'s LID and the ACK comes back to `ha`'s: two links, as `sw1` and `sw2` route
# them, the requests out of one `sw1` port and the ACK in over the other. (The "credits" in the ACK's AETH
# are the transport's end-to-end credits, receive buffers posted at the responder; the link-level credits
# of the last part of this notebook travel in flow-control packets of their own.) The first request's
# headers, field by field (hover over the bytes):

# %%
first = requests_of(packets)[0]
viz.field_table(first[LRH])

# %%
viz.hexdump(first)

# %% [markdown]
# * **LRH** (8 bytes, IBA Vol 1 7.7): VL, link version, SL, LNH (2: the next header is a BTH, no GRH: the
#   packet stays in its subnet), DLID, **PktLen** (4-byte words from the LRH through the ICRC), SLID.
# * **ICRC** (4 bytes): a CRC-32 over the packet from the LRH on, with the fields a switch may change (the
#   VL, and the BTH's reserved byte) masked: the end-to-end check, as on RoCE.
# * **VCRC** (2 bytes, after the ICRC): a CRC-16 over the whole packet, VL included, recomputed at every hop:
#   the link's own check. RoCE has no VCRC; Ethernet's FCS does that job.

# %% [markdown]
# ## The same incast with credits instead of PFC
#
# Notebook 10 ran an incast on Ethernet: senders writing to one receiver at 40 Gb/s through a switch, its
# queue filling, PFC pausing the links. Here is the incast on InfiniBand, with no PFC and no ECN: only
# credits. Four senders `h1`..`h4` on a leaf switch write to `recv` on a second switch (`spine`); a fifth
# host `hv` on the leaf writes to `rv`, idle otherwise, also on the spine: the *victim*. All links 40 Gb/s,
# 1 µs; the leaf-spine link carries everyone (200 Gb/s, so the receiver's own link is the bottleneck);
# every input buffer holds 32 KB per VL.

# %%
from rdmalab.fabric.ibflows import ib_incast

run = ib_incast(senders=4, duration_us=200)
print("drops:", run.summary["drops"])
for name, f in run.summary["flows"].items():
    print(f"  {name:16} {f['gbps']:6.2f} Gb/s")
for name, p in run.summary["ports"].items():
    print(f"  {name:12} waited for credits {p['xmit_wait_us']:7.1f} us; buffer at its far end peaked at "
          f"{p['peer_buffer_max_blocks'] * 64 / 1024:5.1f} KB")

# %% [markdown]
# Nothing was dropped, and the receiver's link ran full: four shares of about 10 Gb/s. How the queue backs
# up, hop by hop, over the first 20 µs (the first packets reach the spine after 2 µs): first the spine's
# buffer for the packets from the leaf fills, and the leaf's port to the spine runs out of credits and
# waits; so the leaf's own input buffers from the senders fill, and then the senders' ports wait in turn.
# (The spine's buffer never shows all of its 32 KB at once: the rest is on the 1 µs link, sent against
# credits, or freed with its credits still on their way back to the leaf.)

# %%
from matplotlib.figure import Figure

from rdmalab.lab.checkers.infiniband import queue_series
from rdmalab.viz.plots import Plot

times = [t / 2 for t in range(1, 41)]
series = queue_series(times, senders=4)
fig = Figure(figsize=(7.5, 3.8), dpi=100)
ax = fig.add_subplot(1, 1, 1)
ax.grid(True, color="#eeeeee")
for name, colour in (("spine, from leaf", "#1565c0"), ("leaf, from h1", "#2e7d32")):
    ax.plot(times, series[name], color=colour, label=f"KB in the input buffer at {name}")
ax.axhline(32, color="#999", lw=0.8)
ax.set_xlabel("time (us)")
ax.set_ylabel("KB buffered (of 32)")
waits = ax.twinx()
for name, colour in (("leaf->spine xmit wait (us)", "#1565c0"), ("h1->leaf xmit wait (us)", "#2e7d32")):
    waits.plot(times, series[name], "--", color=colour, label=f"{name[:-5]}ed for credits (us, right)")
waits.set_ylabel("us waited for credits")
ax.set_title("4:1 incast with credits: the buffers fill hop by hop, nothing is dropped")
fig.legend(fontsize=8, loc="upper center", ncol=2, bbox_to_anchor=(0.5, 0.0))
Plot(fig)

# %% [markdown]
# The victim `hv` writes to an idle host, yet it got no more than an incast sender: its packets share the
# leaf's port to the spine, on the same VL, and wait in the same queue behind incast packets that have no
# credits. That is **head-of-line blocking**, InfiniBand's form of notebook 10's victim flow. Without
# credits (`credits=False`: not InfiniBand, a comparison) the same buffers overflow:

# %%
lossy = ib_incast(senders=4, duration_us=200, credits=False)
print("without credits: drops", lossy.summary["drops"], "| goodput:",
      {n: f["gbps"] for n, f in lossy.summary["flows"].items()})

# %% [markdown]
# ## The stock OpenSM on the lab's subnet
#
# OpenSM is the subnet manager real InfiniBand fabrics run; `ibsim` simulates a fabric for it and for
# infiniband-diags (`ibsim-run` makes a program's management packets go to the simulator). `rdmalab ibsim`
# serves the lab's `Subnet` the way `ibsim` serves its own, so the cell below takes the same net file, fresh
# (no LIDs yet), serves it from this process (`served`), and runs OpenSM on `ha`'s port: once OpenSM has
# brought the subnet up, `ibnetdiscover` and `ibroute` read it, and `ha` and `hb` ask OpenSM's SA for their
# PathRecords. Then OpenSM stops, and the subnet keeps what it wrote into the agents: so `fabric_on_subnet`
# builds the data path on *OpenSM's* LIDs and tables, and the same WRITE runs by *OpenSM's* PathRecords.
# Where the tools are not installed it says so and skips.

# %%
from rdmalab.lab.checkers.infiniband import run_opensm, stock_tools

missing = stock_tools()
if missing:
    print("skipped:", missing)
else:
    osm_subnet = book_subnet()
    with tempfile.TemporaryDirectory() as tmp:
        try:
            stock = run_opensm(osm_subnet, tmp, pairs=(("ha", "hb"), ("hb", "ha")))
        except Exception as err:  # a tool that fails here is shown, not raised: the rest of the notebook runs on
            stock = None
            print("OpenSM failed:", err)
    if stock is not None:
        print("ibnetdiscover (its records, without the settings lines):")
        print("\n".join(line for line in stock.ibnetdiscover.splitlines() if line.startswith(("Switch", "Ca", "["))))
        print(stock.ibroute["sw1"])
        print("ours, sw1:", lft_of(sm, "sw1"))
        osm_fabric = fabric_on_subnet(osm_subnet, mtu=1024)
        print("on OpenSM's tables, sw1:", dict(osm_fabric.node("sw1").lft))
        with tempfile.TemporaryDirectory() as tmp:
            osm_packets = tapped_write(osm_fabric, 3000, stock.paths[("ha", "hb")], stock.paths[("hb", "ha")],
                                       f"{tmp}/osm-write.pcap")
        for p in osm_packets:
            print(f"{p.summary().split(' QP=')[0]:24} DLID {p[LRH].dlid} SLID {p[LRH].slid} PktLen {p[LRH].pktlen}")
        for name, fab in (("our", fabric), ("OpenSM's", osm_fabric)):
            sent = {num: fab.node("sw1").ports[num].counters["PortXmitPkts"] for num in (3, 4)}
            print(f"on {name} tables, sw1 sent the WRITE's packets to sw2 by port 3: {sent[3]}, by port 4: {sent[4]}")

# %% [markdown]
# Where OpenSM ran: it gave the same LIDs to the same ports (both number the SM's port first, then in the
# order of a breadth-first sweep), and its min-hop tables send every LID over a link as short as ours; where
# two links are equally short, it may pick the other one (`tests/fabric/test_ibsm.py` holds the hop counts
# equal on several subnets). The WRITE on OpenSM's tables has the same packets, LIDs and lengths; which of the
# two links between the switches each direction takes is OpenSM's choice.

# %% [markdown]
# ## Exercises
#
# ### 1. Your subnet
#
# Your scenario wires four HCAs (`ha`, `hb`, `hc`, `hd`) to `sw1` and `sw2` on ports of its own, with two
# links between the switches, and runs the SM on one of the HCAs. `my_net()` is its net file, and
# `my_subnet()` reads it (not brought up yet). Bring it up with the SM on your scenario's host
# (`bring_up(SubnetMADs(subnet), host)`); what LID does your `target` get, and out of which port does your
# `switch` send that LID?

# %%
from rdmalab.lab.checkers.infiniband import my_net, my_subnet

lab.scenario("ib.lft")
print(my_net())

# %% tags=["exercise"]
lft_answer = {"lid": ..., "port": ...}
### BEGIN SOLUTION
s = lab.scenario("ib.lft")
mine = bring_up(SubnetMADs(my_subnet()), s.sm_on)
target_lid = next(n for n, p in mine.lids.items() if mine.nodes[p.node_guid].name == s.target)
lft_answer = {"lid": target_lid, "port": lft_of(mine, s.switch)[target_lid]}
### END SOLUTION
lab.check("ib.lft", lft_answer)

# %% [markdown]
# ### 2. Your WRITE's LRH
#
# Your scenario has a WRITE length, an MTU, a service level and a number of data VLs. Run
# `lrh_run(length, mtu, sl, vls, path)` with them (it brings the book's subnet up, builds its fabric at that
# MTU and VLs, asks the SA for the paths between `ha` and `hb`, taps both links between the switches into
# `path`, and WRITEs from `ha` to `hb` on your SL: the PathRecord says SL 0, the SA here has no QoS, and your
# address vector asks for another) and read the requests (`requests_of(packets)`): how many packets, the last
# one's `LRH.pktlen`, and its VL?

# %%
from rdmalab.lab.checkers.infiniband import lrh_run

lab.scenario("ib.lrh")

# %% tags=["exercise"]
lrh_answer = {"packets": ..., "last_pktlen": ..., "vl": ...}
### BEGIN SOLUTION
s = lab.scenario("ib.lrh")
with tempfile.TemporaryDirectory() as tmp:
    reqs = requests_of(lrh_run(s.length, s.mtu, s.sl, s.vls, f"{tmp}/mine.pcap"))
lrh_answer = {"packets": len(reqs), "last_pktlen": reqs[-1][LRH].pktlen, "vl": reqs[-1][LRH].vl}
### END SOLUTION
lab.check("ib.lrh", lrh_answer)

# %% [markdown]
# ### 3. Free the victim
#
# Your incast has its own number of senders and link rate. `hol_runs(senders, rate)` runs it twice for
# 200 µs: the victim on the incast's VL (SL 0, one VL), and on a VL of its own (`victim_sl=1`, `vls=2`: every
# port then has a second buffer and second credits). Give the victim's goodput in each
# (`victim_gbps(run)`).

# %%
from rdmalab.lab.checkers.infiniband import hol_runs, victim_gbps

lab.scenario("ib.hol")

# %% tags=["exercise"]
hol_answer = {"shared_vl_gbps": ..., "own_vl_gbps": ...}
### BEGIN SOLUTION
s = lab.scenario("ib.hol")
shared_run, own_run = hol_runs(s.senders, s.rate_gbps)
hol_answer = {"shared_vl_gbps": victim_gbps(shared_run), "own_vl_gbps": victim_gbps(own_run)}
### END SOLUTION
lab.check("ib.hol", hol_answer)

# %% [markdown]
# ### 4. Why
#
# On one VL the victim slowed down although its own destination link was idle. Pick the explanation:
#
# * **A**: The leaf switch drops some of the victim's packets when its buffer is full, and the victim's QP
#   resends them.
# * **B**: The victim's packets wait in the leaf's output queue on the same VL behind incast packets that
#   have no credits, because the spine's input buffer for that VL is full of packets for the receiver.
# * **C**: The receiver sends the victim congestion notifications, and its NIC lowers its rate.

# %% tags=["exercise"]
why = ...
### BEGIN SOLUTION
why = "B"
### END SOLUTION
lab.check("ib.why", why)

# %% [markdown]
# ## What was compared
#
# The subnet's agents answer as ibsim's on the same net file: the stock OpenSM and infiniband-diags print the
# same against `rdmalab ibsim` as against `ibsim` (`tests/fabric/test_ibsim*.py`). The SM's sweep, LIDs and
# min-hop tables are held against the stock OpenSM's (`opensm -R minhop`) and read back by the stock
# infiniband-diags on ibsim's example subnets (`tests/fabric/test_ibsm.py`); the data path on the tables
# either SM wrote, by either SA's PathRecords, in `tests/fabric/test_ib_managed.py` and
# `tests/lab/test_nb14_feedback.py`; the packets of the tap decode in tshark as InfiniBand, ICRC and VCRC
# checked (`tests/fabric/test_ib_engine.py`). Credits,
# VLs and head-of-line blocking are the model of `rdmalab.fabric.ibfabric` (one flow-control update per
# packet freed, round-robin VL arbitration), read from IBA Vol 1 7.9: a teaching model, not a measurement of
# a real switch. A credit loop can deadlock as PFC does: `rdmalab.fabric.ibflows.ib_credit_loop`.
