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
# Everything here runs in this process: the subnet is `rdmalab.fabric.ibfabric` (soft HCAs of the verbs
# engine, switches forwarding by their LFTs, credits per VL), the SM is `rdmalab.fabric.ibsm`, a subnet
# manager written to be read, and its packets reach each node's *subnet management agent* through
# `FabricAgents` (in this notebook's checker module). Near the end, where they are installed, the stock
# OpenSM and infiniband-diags manage the same subnet.

# %%
from rdmalab import lab, viz
from rdmalab.lab.checkers.infiniband import BOOK_LINKS, book_subnet, bring_up, lft_of, sm_ladder

fabric = book_subnet()
for a, pa, b, pb in BOOK_LINKS:
    print(f"{a} port {pa} <-> {b} port {pb}")
print("switches:", [sw.name for sw in fabric.switches], "| HCAs:", [h.name for h in fabric.hcas])

# %% [markdown]
# Three HCAs (`ha` on switch `sw1`, `hb` and `hc` on `sw2`) and two links between the switches. Before a
# subnet manager has run, a port has no LID (here: a placeholder no packet is addressed to) and every
# switch's table is empty: a switch with no entry for a packet's DLID discards the packet, so no data can
cross yet.

# %%
print("sw1's table:", fabric.node("sw1").lft, "| sw2's table:", fabric.node("sw2").lft)

# %% [markdown]
# ## The sweep: directed-route SMPs
#
# The SM runs on `ha`. It speaks **SMPs** (subnet management packets, MADs of 256 bytes to QP0, IBA Vol 1
# 14.2) on the management lane, VL15. With no LIDs to address anything, each SMP carries its route: the
# list of output ports, hop by hop (*directed route*, 14.2.2). `path []` is `ha` itself, `path [1]` is
# whatever is at the end of `ha`'s port 1, `path [1, 3]` leaves that switch by port 3, and so on. At each
# node the SM asks `NodeInfo` (a switch or an adapter? its GUID, its number of ports, the port the SMP came
# in by), `NodeDescription`, `SwitchInfo` and the `PortInfo` of every port; for every switch port whose
# link is up it sends `NodeInfo` one hop further, breadth first. (The ladder draws each SMP from the SM to
# the node that answers it; the switches on its route pass it on, port by port.)

# %%
sm = bring_up(fabric, "ha")
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
from rdmalab.wire.ib import BTH, LRH

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
# `PortInfo` with a Set. The ports go Init -> Armed -> Active, one step a Set. The HCAs' verbs see their LID
# now, as `ibv_query_port` reports it on a real HCA:

# %%
for lid, port in sorted(sm.lids.items()):
    node = sm.nodes[port.node_guid]
    print(f"LID {lid}: {node.name:4} port {port.num}  ({'switch' if node.is_switch else 'HCA'}, "
          f"GUID 0x{port.guid:016x})")
print("port states:", sorted(set(sm.port_states().values())))
from rdmalab.verbs.device import Context

print("hb's port, as its verbs see it: LID", Context(name="hb", fabric=fabric).query_port(1).lid)

# %%
from collections import Counter

print("the SM's MADs, by step:", dict(Counter(ev.phase for ev in sm.events)))
sm_ladder(sm, ("set lids",), title="each LID into its port's PortInfo, by Set")

# %% [markdown]
# ## A switch's forwarding table
#
# For every switch and every LID the SM picks an output port on a shortest path (*min-hop*); of equally
# short ones, the port that carries the fewest routes so far, so that parallel links share the load. It
# writes each table with Set(LinearForwardingTable), 64 LIDs a block. Port 0 is the switch itself.

# %%
for sw in ("sw1", "sw2"):
    print(f"{sw}:  " + "   ".join(f"LID {lid} -> port {out}" for lid, out in sorted(lft_of(sm, sw).items())))

# %% [markdown]
# `sw1` sends `hb` and `hc`, both behind `sw2`, out of different ports, one over each link. An adapter learns
# the path to a peer from the SM's **Subnet Administrator** (SA) with a *PathRecord* query (IBA Vol 1
# 15.2.5.16): the LIDs, the MTU and rate of the path, and, here, the links crossed.

# %%
from rdmalab.fabric.ibsm_sa import SubnetAdministrator

sa = SubnetAdministrator(sm)
lid = {sm.nodes[p.node_guid].name: n for n, p in sm.lids.items()}
path = sa.path(lid["ha"], lid["hb"])
rec = path.record
print(f"ha -> hb: SLID {rec.slid}, DLID {rec.dlid}, {path.hops} links, MTU code {rec.mtu}, "
      f"leaving by {[f'{sm.nodes[p.node_guid].name}/{p.num}' for p in path.ports]}")

# %% [markdown]
# ## A WRITE across two switches
#
# Now the data. A WRITE of 3000 bytes from `ha` to `hb` at an MTU of 1024, by an RC QP pair whose address
# vectors name the peer by LID (`ah_attr.dlid`, `is_global=0`, as on an HCA). A tap on both links between the
# switches writes what crosses them, native InfiniBand in ERF records that tshark decodes as InfiniBand.

# %%
from rdmalab.lab.checkers.infiniband import lrh_run, requests_of

with tempfile.TemporaryDirectory() as tmp:
    packets = lrh_run(3000, 1024, 0, 1, f"{tmp}/write.pcap")
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
# infiniband-diags (`ibsim-run` makes a program's management packets go to the simulator). The cell below
# writes this notebook's subnet as a net file, runs OpenSM once on it (on `rdmalab ibsim`, the lab's own
# simulator, when this rdmalab has it, else on the stock `ibsim`), and shows what `ibnetdiscover` then
# finds, and OpenSM's table of `sw1` beside ours. Where the tools are not installed it says so and skips.

# %%
from rdmalab.lab.checkers.infiniband import netfile, run_opensm, stock_tools

print(netfile(fabric))
cmd, which = stock_tools()
if not cmd:
    print("skipped:", which)
else:
    with tempfile.TemporaryDirectory() as tmp:
        try:
            stock = run_opensm(book_subnet(), tmp)
        except Exception as err:  # a tool that fails here is shown, not raised: the rest of the notebook runs on
            stock = {"simulator": which, "error": str(err)}
    print("simulator:", stock["simulator"])
    print(stock.get("error") or stock["ibnetdiscover"])
    print(stock.get("ibroute sw1", ""))
    print("ours, sw1:", lft_of(sm, "sw1"))

# %% [markdown]
# Where OpenSM ran: it gave the same LIDs to the same ports (both number the SM's port first, then in the
# order of a breadth-first sweep), and its min-hop tables send every LID over a link as short as ours; where
# two links are equally short, it may pick the other one (`tests/fabric/test_ibsm.py` holds the hop counts
# equal on several subnets).

# %% [markdown]
# ## Exercises
#
# ### 1. Your subnet
#
# Your scenario wires four HCAs (`ha`, `hb`, `hc`, `hd`) to `sw1` and `sw2` on ports of its own, with two
# links between the switches, and runs the SM on one of the HCAs. `my_subnet()` builds it (not brought up
# yet). Bring it up with the SM on your scenario's host; what LID does your `target` get, and out of which
# port does your `switch` send that LID?

# %%
from rdmalab.lab.checkers.infiniband import my_subnet

lab.scenario("ib.lft")

# %% tags=["exercise"]
lft_answer = {"lid": ..., "port": ...}
### BEGIN SOLUTION
s = lab.scenario("ib.lft")
mine = bring_up(my_subnet(), s.sm_on)
target_lid = next(n for n, p in mine.lids.items() if mine.nodes[p.node_guid].name == s.target)
lft_answer = {"lid": target_lid, "port": lft_of(mine, s.switch)[target_lid]}
### END SOLUTION
lab.check("ib.lft", lft_answer)

# %% [markdown]
# ### 2. Your WRITE's LRH
#
# Your scenario has a WRITE length, an MTU, a service level and a number of data VLs. Run
# `lrh_run(length, mtu, sl, vls, path)` with them (it brings the book's subnet up at that MTU and VLs, taps
# both links between the switches into `path`, and WRITEs from `ha` to `hb` on that SL) and read the requests
# (`requests_of(packets)`): how many packets, the last one's `LRH.pktlen`, and its VL?

# %%
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
# The SM's sweep, LIDs and min-hop tables are held against the stock OpenSM's (`opensm -R minhop`) and read
# back by the stock infiniband-diags on ibsim's example subnets (`tests/fabric/test_ibsm.py`); the packets of
# the tap decode in tshark as InfiniBand, ICRC and VCRC checked (`tests/fabric/test_ib_engine.py`). Credits,
# VLs and head-of-line blocking are the model of `rdmalab.fabric.ibfabric` (one flow-control update per
# packet freed, round-robin VL arbitration), read from IBA Vol 1 7.9: a teaching model, not a measurement of
# a real switch. A credit loop can deadlock as PFC does: `rdmalab.fabric.ibflows.ib_credit_loop`.
