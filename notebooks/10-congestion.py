# %% [markdown]
# # Congestion signals: ECN marks and CNPs
#
# RDMA transports were built for lossless fabrics: a dropped packet costs a retransmission
# timeout or a go-back-N (notebook 09), so RoCE networks try hard not to drop. They signal
# congestion instead, in two steps (RoCEv2 Annex A17.9; the DCQCN scheme that NICs implement
# builds on them):
#
# 1. A congested **switch marks** a passing packet: it sets the 2-bit ECN field of the IP
#    header to *Congestion Experienced* (RFC 3168). On native InfiniBand it sets the FECN bit
#    in the BTH instead.
# 2. The **receiver** of a marked packet (the *notification point*) sends a **Congestion
#    Notification Packet** (CNP, BTH opcode `0x81`) back to the sender's QP, which slows down.
#
# This notebook shows both on real bytes, then runs them on a switched fabric: queues, marks,
# CNPs, the DCQCN rate control NICs run, and PFC pause frames.

# %%
BACKEND = "soft"
from rdmalab import capture, lab, viz
from rdmalab.verbs.engine.dcqcn import PAPER
from rdmalab.wire import BTH, CNPPad, decode_ethernet, encode_rocev2
from rdmalab.wire.net import IPv4

BACKEND = lab.backend(BACKEND)  # checks that the backend is available

# %% [markdown]
# ## The ECN field
#
# The IPv4 TOS byte (byte 1 of the IP header) holds a 6-bit DSCP and the 2-bit ECN field
# (RFC 3168 section 5): `00` not ECN-capable, `10` ECT(0) and `01` ECT(1) for an
# ECN-capable sender, `11` CE, Congestion Experienced. Hover over byte 15 of this WRITE:

# %%
from rdmalab.lab.checkers.congestion import data_frame

write = decode_ethernet(data_frame())
viz.hexdump(write, highlight=[(15, 16, "TOS: DSCP + ECN")], fields=False)

# %% [markdown]
# ## Marking a packet does not break its ICRC
#
# A switch that marks a packet rewrites the TOS byte and so must recompute the IPv4 header
# checksum, but it cannot recompute the ICRC: it is not an RDMA endpoint. That is exactly why
# the ICRC treats the TOS, TTL and checksum as variant fields (notebook 07). Watch: we mark
# the WRITE CE the way a switch would, and the receiver's ICRC check still passes.

# %%
ip = write[IPv4]
marked_ip = ip.replace(ecn=3).with_checksum()
marked = write.data[:14] + marked_ip.encode() + write.data[34:]
m = decode_ethernet(marked)
print("ECN:", ip.ecn, "->", m[IPv4].ecn, "| IP checksum:", hex(ip.checksum), "->", hex(m[IPv4].checksum),
      "| ICRC:", m.crc_status)
viz.hexdump(m, highlight=[(i, i + 1, "changed by the switch") for i in range(len(marked)) if marked[i] != write.data[i]],
            fields=False)

# %% [markdown]
# Change one bit of a field that is *not* variant, say the destination QP, and the receiver
# drops the packet:

# %%
tampered = bytearray(marked)
tampered[49] ^= 0x01  # low byte of BTH.destqp
t = decode_ethernet(bytes(tampered), lenient=True)
print("ICRC:", t.crc_status, "| on the wire", t.crc.to_bytes(4, "little").hex(), "| expected",
      t.crc_expected.to_bytes(4, "little").hex())

# %% [markdown]
# ## A CNP sent by a real NIC
#
# Frame 1 of the hardware capture is a CNP sent by a **ConnectX-4 Lx**. Its BTH has opcode
# `0x81`, the BECN bit set, and destination QP `0x000118`: the QP of the sender whose packets
# were marked. The PSN is zero and 16 reserved bytes follow (Annex A17.9.3).

# %%
hw = list(capture.read(lab.capture_path("public_hw_byte_vectors.pcap")))
cnp = hw[0].packet
print(cnp.summary())
print("IPv4 DSCP", cnp[IPv4].dscp, "ECN", cnp[IPv4].ecn)
viz.hexdump(cnp)

# %% [markdown]
# The NIC sent its CNP with DSCP 48 (a high-priority class, so the signal is not itself
# stuck behind the congestion) and ECN `10`, ECT(0). rdmalab can build the same packet with
# the same addresses. The fields that still differ are ones each sender picks freely (the IP
# identification, the UDP source port, which this NIC leaves at 0) and the two checksums that
# follow from them:

# %%
ours = decode_ethernet(encode_rocev2(BTH(opcode=0x81, destqp=0x118, becn=1), [CNPPad()],
                                     src_ip=cnp[IPv4].describe("src"), dst_ip=cnp[IPv4].describe("dst"),
                                     dscp=48, ecn=2))
theirs = {(s.layer, s.field): s.text for s in cnp.spans()}
for s in ours.spans():
    if s.layer not in ("Ethernet",) and theirs.get((s.layer, s.field)) != s.text:
        print(f"{s.layer}.{s.field:<15} ConnectX: {theirs.get((s.layer, s.field))!s:<22} rdmalab: {s.text}")

# %% [markdown]
# ## FECN and BECN in the BTH
#
# Byte 4 of the BTH carries FECN (bit 7) and BECN (bit 6), InfiniBand's own congestion bits.
# Wireshark 4.0 shows this whole byte as "reserved"; rdmalab decodes the two bits. Frame 20 of
# the synthetic capture is a WRITE with FECN set, as a native IB switch would mark it:

# %%
syn = list(capture.read(lab.capture_path("synthetic_rocev2.pcap")))
f20 = syn[19].packet
print(f20.summary())
viz.field_table(f20[BTH])

# %% [markdown]
# ## A switched fabric: queues, marks, CNPs and DCQCN
#
# Single frames show the signals; what they do shows only on a network. `rdmalab.fabric.switched`
# simulates one: hosts and store-and-forward switches joined by 40 Gb/s links, per-priority
# egress queues on a shared buffer, RED-style ECN marking (Kmin, Kmax, Pmax), PFC, and in every
# NIC the two halves of **DCQCN** (Zhu et al., SIGCOMM 2015): the *notification point* that
# answers CE-marked data with CNPs (at most one per `min_time_between_cnps`), and the
# *reaction point* that cuts the QP's rate by a factor `(1 - alpha/2)` on a CNP and climbs back
# in fast-recovery, additive (`rpg_ai_rate`) and hyper (`rpg_hai_rate`) steps, every
# `rpg_time_reset` microseconds or `rpg_byte_reset` bytes. The parameter names are mlx5's.
#
# Every flow on this fabric is an RC QP pair of the soft verbs engine you drove in notebooks 03
# to 09, posting RDMA WRITEs: its requester numbers the packets (PSNs) and sets AckReq, the
# receiver's responder ACKs them, and when a switch drops one its completer goes back N.
#
# First the run the DCQCN author ships with his simulator (ns3-rdma's sample): **2:1 incast**,
# two senders at 40 Gb/s into one receiver, Kmin 40 KB, Kmax 1000 KB, Pmax 1.

# %%
from rdmalab.fabric.congestion_scenarios import flow_table, queue_table, run_scenario
from rdmalab.viz.congestion import timeline

incast = run_scenario("incast", senders=2, rate=40.0, duration_ms=15.0)
timeline(incast, title="2:1 incast, ns3-rdma constants")

# %% [markdown]
# Both senders start at line rate; the switch's queue towards the receiver fills, its packets
# get marked, CNPs come back, both rates are cut and then hover around half the link each. The
# queue settles near Kmin, far below Kmax, and PFC never has to pause anyone. The goodput is
# payload only (1024 of every 1082 bytes), so a fair share is 18.9 Gb/s:

# %%
for f in flow_table(incast.fabric):
    print(f"{f['name']:10} goodput {f['goodput_gbps']:6.2f} Gb/s   DCQCN rate {f['rate_gbps']:6.2f}   CNPs {f['cnps']}")
q = queue_table(incast.fabric)[0]
print(f"queue {q['port']}: mean {q['mean_kb']} KB, max {q['max_kb']} KB | pauses: {incast.fabric.pauses}")

# %% [markdown]
# ### Every frame is real
#
# A tap on a link writes the frames that cross it. The switch marked data frames by rewriting
# the TOS byte of the real IP header, the receiver's CNPs went back on the same link, and every
# ICRC still checks: the same story as the single frame at the top, now thousands of times.
# tshark reads the same file.

# %%
import tempfile
from collections import Counter

from rdmalab.wire.pfc import is_pfc_frame

with tempfile.TemporaryDirectory() as tmp:
    path = f"{tmp}/incast.pcap"
    run_scenario("incast", senders=2, duration_ms=1.0, capture=path, settings={"kmin": "5", "kmax": "50"})
    kinds: Counter[str] = Counter()
    for cp in capture.read(path):
        p = cp.packet
        if p.get(BTH) is None:
            kinds["PFC" if is_pfc_frame(p.data) else "other"] += 1
            continue
        kinds[("CE " if p[IPv4].ecn == 3 else "") + (p.opcode_name or "?") + f" (ICRC {p.crc_status})"] += 1
for k, n in kinds.most_common():
    print(f"{n:6d}  {k}")

# %% [markdown]
# ## PFC and the victim flow
#
# Without DCQCN, or before it reacts, the switch protects its buffer with **PFC** (802.1Qbb): when
# the bytes that came in on one port reach the XOFF threshold it sends a pause frame for that
# priority back up the link. The pause stops *everything* of that priority on the link, also
# traffic that was going elsewhere.
#
# The DCQCN-validation study (sc20anonymous/DCQCN-validation) runs exactly this: long flows F1
# (H1 to R1) and F2 (H2 to R2) cross the P1-P2 link; at 3 ms fifteen hosts on P2 send to R2 for
# 1 ms. F1 has nothing to do with R2. Watch its rate:

# %%
from rdmalab.fabric.congestion_scenarios import victim_summary
from rdmalab.lab.checkers.congestion import victim_run

victim = victim_run()
print(f"{victim.duration_ms:g} ms of the victim scenario")
timeline(victim, title="victim flow: 15-host incast on R2 from 3 to 4 ms", max_flows=3)

# %%
v = victim_summary(victim.fabric)
print(f"F1's DCQCN rate: {v['f1_rate_before_gbps']} Gb/s before the incast, {v['f1_rate_min_gbps']} at its lowest; "
      f"a port on F1's path paused for {v['p1_p2_paused_ms']} ms (exercise 3: which one, and why?)")
print(f"the link F1 and F2 share under 90 % of its {v['throughput_before_gbps']} Gb/s for {v['underused_ms']} ms "
      "(the study reports 16 ms with its ns-3 setup)")

# %% [markdown]
# Without DCQCN the same incast looks different. PFC alone stops F1 only while the incast lasts
# (the pause propagates hop by hop towards the senders), and F1 is back at full speed as soon as
# it ends. DCQCN turned a 1 ms blockage into a much longer slowdown: why is exercise 3.
# Goodput per flow:

# %%
pfc_only = run_scenario("victim", duration_ms=6.0, settings={"dcqcn": "0"})
timeline(pfc_only, title="the same incast with PFC alone (DCQCN off)", max_flows=3, goodput=True, window_us=100)

# %% [markdown]
# ## Deadlock: a cycle of pauses
#
# Pauses can also chase their own tail. Three switches in a ring, one host on each, every flow
# routed two hops clockwise: each ring link carries two flows, each switch's ingress from its
# neighbour fills, and each switch pauses the neighbour that feeds it. Each paused queue waits
# for the next one; none of them ever drains (a *cyclic buffer dependency*, Hu et al.,
# HotNets 2016). DCQCN is off here, as it is in a fabric running PFC alone.

# %%
dead = run_scenario("deadlock", duration_ms=3.0)
print(dead.to_json()["deadlock"])
alive = run_scenario("deadlock", duration_ms=3.0, settings={"routing": "shortest"})
print("shortest-path routing (one hop each, no cycle):", alive.to_json()["deadlock"])

# %% [markdown]
# ## Without PFC: drops, and go-back-N
#
# Turn PFC off and the buffer is all the switch has. Sixteen senders each WRITE 512 KB to one
# receiver at the same moment, through a shallow 150 KB buffer: the first burst overflows it
# before DCQCN can react, and the switch drops. Nothing is lost for good: the receiver's
# responder sees a gap in the PSNs and NAKs the first missing one (once), discards what comes
# after it, and the sender's completer goes back to that PSN and resends everything from there,
# also the packets that had arrived (*go-back-N*). A resend that is lost again waits for the
# local ACK timeout. The tap on the receiver's link sees the NAKs and the same PSNs twice:

# %%
from rdmalab.wire.ib import AETH

with tempfile.TemporaryDirectory() as tmp:
    path = f"{tmp}/lossy.pcap"
    lossy = run_scenario("lossy", duration_ms=8.0, capture=path, settings={"buffer": "0.15", "flow_kb": "512"})
    naks = repeats = 0
    seen: set[tuple[int, int]] = set()
    for cp in capture.read(path):
        p = cp.packet
        bth = p.get(BTH)
        if bth is None:
            continue
        if bth.opcode == 0x11 and p[AETH].is_nak:
            naks += 1
        elif bth.opcode < 0x11:
            repeats += (bth.destqp, bth.psn) in seen
            seen.add((bth.destqp, bth.psn))
print(f"on the receiver's link: {naks} NAKs, {repeats} requests carrying a PSN already seen")
loss = lossy.to_json()["loss"]
print(f"{loss['data_drops']} requests dropped; go-back-N resent {loss['retransmitted_kb']:.0f} KB "
      f"({loss['retransmitted_share']:.0%} of what was sent) after {loss['naks']} NAKs and {loss['timeouts']} timeouts; "
      f"all data intact: {loss['intact']}")
timeline(lossy, title="16:1 incast, PFC off, 150 KB buffer", goodput=True, window_us=100)

# %% [markdown]
# The same incast with PFC on (`settings={"pfc": "1"}`, on a 500 KB buffer that leaves room for
# PFC's headroom) drops nothing and resends nothing; `rdmalab simulate lossy` compares the two.

# %% [markdown]
# ## The fluid model beside the packets
#
# Zhu et al. (CoNEXT 2016) wrote DCQCN as delay-differential equations for N identical flows:
# the queue grows with N RC - C, the marking probability follows the queue, and the expected
# effect of CNPs, timer and byte-counter expiries drives alpha, RT and RC
# (`rdmalab.fabric.fluid` has the equations). Integrated next to the packet simulation of the
# same incast, N = 2, 10 and 64 senders:

# %%
import statistics

from rdmalab.fabric.fluid import simulate
from rdmalab.fabric.congestion_scenarios import NS3_RDMA
from rdmalab.viz.congestion import fluid_vs_packets

plots = []
for n in (2, 10, 64):
    pk = run_scenario("incast", senders=n, duration_ms=10.0)
    model = simulate(NS3_RDMA, n=n, duration_ms=10.0, tau_star_us=4.87, dt_us=0.25, record_every=4)
    k = len(pk.fabric.samples) // 2
    rate = statistics.mean(statistics.mean(r) for r in pk.fabric.rate_series[k:])
    m_rate, m_queue, _ = model.settled()
    print(f"N={n:2d}: rate per flow {rate:6.3f} Gb/s (fluid {m_rate:6.3f}); "
          f"queue {queue_table(pk.fabric)[0]['mean_kb']:6.1f} KB (fluid {m_queue:6.1f})")
    plots.append(fluid_vs_packets(model, pk))
plots[2]

# %% [markdown]
# The model says more than the means. With the paper's switch settings (Kmin 5 KB, Kmax
# 200 KB, Pmax 1 %) and a feedback delay of 85 us, a few flows settle, but around 14 and more
# the loop oscillates: the queue swings by hundreds of KB and runs empty, so the link idles.
# Peak-to-peak queue over the last 40 % of 20 ms:

# %%
for tau in (4.0, 85.0):
    row = []
    for n in (2, 10, 20, 64):
        m = simulate(PAPER, n=n, duration_ms=20.0, tau_star_us=tau, kmin_kb=5, kmax_kb=200, pmax=0.01, dt_us=0.5,
                     record_every=2)
        row.append(f"N={n}: {m.oscillation(0.4):5.0f}")
    print(f"feedback delay {tau:4.0f} us | " + " | ".join(row) + "  (KB)")

# %% [markdown]
# In JupyterLab, this widget reruns a scenario whenever you move a slider:

# %% tags=["widget"]
from rdmalab.lab.congestion import congestion_runner

congestion_runner("incast")

# %% [markdown]
# The same function without the sliders, for the static page: an 8:1 incast with the defaults.

# %%
eight = run_scenario("incast", senders=8, duration_ms=10.0)
timeline(eight, title="8:1 incast, ns3-rdma constants")

# %% [markdown]
# ## Exercises
#
# The first two exercises are about a WRITE of your own, not the one marked above: its
# addresses, QP numbers, PSN and key come from your scenario. Its sender marked it
# ECN-capable, ECT(0), as RoCE NICs do.

# %%
from rdmalab.lab.checkers.congestion import my_write_frame

frame = my_write_frame()
print(decode_ethernet(frame).summary())
lab.scenario("congestion.write")

# %% [markdown]
# ### 1. Be the switch
#
# Mark your WRITE, `frame`, Congestion Experienced and return the whole frame, as a switch
# would forward it. The checker decodes your frame and names any field you changed by mistake.

# %% tags=["exercise"]
marked_frame = ...  # bytes
### BEGIN SOLUTION
pkt = decode_ethernet(frame)
new_ip = pkt[IPv4].replace(ecn=3).with_checksum()
marked_frame = frame[:14] + new_ip.encode() + frame[34:]
### END SOLUTION
lab.check("congestion.ce", marked_frame)

# %% [markdown]
# ### 2. Be the notification point
#
# Your marked WRITE arrived at the responder, the QP and address it was sent to. Its sender
# is the requester QP `requester_qpn` of your scenario (a WRITE does not carry its
# sender's QP number). Build the complete CNP frame that the responder sends back.

# %% tags=["exercise"]
my_cnp = ...  # bytes
### BEGIN SOLUTION
mine = lab.scenario("congestion.write")
my_cnp = encode_rocev2(BTH(opcode=0x81, destqp=mine.requester_qpn, becn=1), [CNPPad()],
                       src_ip=mine.responder_ip, dst_ip=mine.requester_ip)
### END SOLUTION
lab.check("congestion.cnp", my_cnp)

# %% [markdown]
# ### 3. The victim
#
# In the victim-flow run above, F1 (H1 to R1) slowed down although it never goes to R2.
# `victim_run()` is that run; `fabric.flows[0]` is F1, `fabric.paused_time_ns(port)`
# says how long a port was paused, `f.fwd` lists a flow's egress ports. Which port on F1's path
# did PFC pause, and why did F1's *DCQCN rate* fall? Pick the explanation:
#
# * **A**: F1's packets go through R2's congested egress queue.
# * **B**: PFC pauses priority 3 on that link; F1's packets wait at P1, where the queue grows
#   past Kmin and they are marked, so H1 gets CNPs.
# * **C**: the CNPs meant for F2 are delivered to F1's QP.

# %% tags=["exercise"]
fab = victim_run().fabric
victim_answer = {"port": ..., "reason": ...}
### BEGIN SOLUTION
f1 = fab.flows[0]
paused = [p.name for p in f1.fwd.values() if fab.paused_time_ns(p) > 0]
victim_answer = {"port": paused[0], "reason": "B"}
### END SOLUTION
lab.check("congestion.victim", victim_answer)

# %% [markdown]
# ### 4. Converge faster, and at what cost?
#
# In the 8:1 incast above, the first burst fills the queue, and while it drains every packet
# is marked: the senders cut their rates again and again, far below their fair share, and
# then climb back slowly. `recovery_time(fabric)` is when their summed rate is back at 90 % of
# the link. Find a DCQCN parameter that makes this at least 30 % sooner (try it with
# `run_scenario("incast", senders=8, duration_ms=10, settings={...})`), and say what it costs:
# `"queue"`, `"cnps"`, `"pauses"` or `"goodput"` (`incast_costs(fabric)` measures all four).

# %% tags=["exercise"]
from rdmalab.fabric.congestion_scenarios import incast_costs, recovery_time

print("defaults: back at 90 % after", recovery_time(eight.fabric), "ms")
converge_answer = {"settings": ..., "cost": ...}
### BEGIN SOLUTION
faster = run_scenario("incast", senders=8, duration_ms=10.0, settings={"rpg_ai_rate": 400})
print("rpg_ai_rate 400:", incast_costs(faster.fabric), "| defaults:", incast_costs(eight.fabric))
converge_answer = {"settings": {"rpg_ai_rate": 400}, "cost": "queue"}
### END SOLUTION
lab.check("congestion.converge", converge_answer)
