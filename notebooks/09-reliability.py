# %% [markdown]
# # Reliability under loss: PSN, ACK, NAK, go-back-N, RNR
#
# The Reliable Connected (RC) transport delivers every message exactly once and in order, over
# a network that may lose packets (IBA Vol 1 9.7). Its tools:
#
# - every request packet carries a 24-bit **PSN** (packet sequence number), consecutive
#   within the connection;
# - the responder accepts only the PSN it expects next. An older PSN is a **duplicate**
#   (re-acknowledged, never executed twice). A newer one means packets were lost: the
#   responder sends one **NAK** with the code *PSN Sequence Error*, naming the PSN it expected;
# - the requester keeps every unacknowledged packet and, on a NAK or when its **retransmit
#   timer** expires, goes back to the oldest unacknowledged PSN and resends everything from
#   there (**go-back-N**), up to `retry_cnt` times;
# - a responder that has no receive WQE for a SEND answers **RNR NAK** (notebook 03).
#
# The soft fabric loses packets at random, from a seed: the same seed gives the same run.
#
# **On rxe.** The kernel has no seeded loss and no trace of its internal events. So the runs
# that depend on a seed (the NAK run, the timeout run, the throughput table, and the
# exercises built on them) always come from the soft engine, which records exactly which
# packet it dropped. With `BACKEND = "rxe"` the transfer runner and the section "The same on
# the kernel" run on the Linux kernel's Soft-RoCE in the lab VM, with random loss from
# `tc netem` on the wire, and the pictures come from the packets tcpdump captured
# (docs/live.md).

# %%
BACKEND = "soft"
from rdmalab import lab, viz
from rdmalab.lab import replays

BACKEND = lab.backend(BACKEND)  # checks that the backend is available
print("seeded runs: the soft engine; transfer runner and live section:", BACKEND)

# %% [markdown]
# ## A lost packet in the middle: NAK and go-back-N
#
# An 8 KiB RDMA WRITE at MTU 1024 is 8 packets. In this run (seed
# `replays.NAK_SEED`) the fabric loses 10 % of the packets:

# %%
nak_run = replays.nak_run()
print("fabric:", {k: v for k, v in nak_run.fabric.stats.items() if v})
nak_run.ladder(title="One packet lost in the middle of a WRITE")

# %% [markdown]
# Read it top to bottom: the lost packet ends in a cross; the next packet arrives with a PSN
# one too high; the responder sends a NAK naming the PSN it still expects; the requester goes
# back and resends everything from there (the dashed orange arrows). That includes packets
# that did arrive: a responder that detects a gap discards everything after it until the
# missing PSN comes, so the requester must resend them too.
#
# The PSN/time plot shows the same run the way tcptrace shows TCP: blue dots are requests,
# orange crosses retransmissions, the green staircase the highest PSN acknowledged, red
# triangles the NAK.

# %%
nak_run.psn_plot(title="PSN over time: a NAK-driven go-back-N")

# %%
from rdmalab.wire.ib import AETH

nak_pkt = next(p for p in nak_run.packets() if AETH in p and p[AETH].is_nak)
viz.hexdump(nak_pkt, title="The NAK: its AETH syndrome byte holds the type (top bits, 11 = NAK) and the NAK code (low 5 bits)",
            hide=["AETH.value"])

# %% [markdown]
# ## A lost last packet: the retransmission timer
#
# If the *last* packet of a message is lost, nothing follows it, so the responder sees no gap
# and sends no NAK. Only the requester's timer can recover. The QP attribute `timeout` is a
# code: the timer runs for 4.096 µs × 2^timeout, here 2^14, about 67 ms, an eternity
# compared with the microseconds a packet takes. (Notice the cut in the ladder's time axis.)

# %%
to_run = replays.timeout_run()
print("fabric:", {k: v for k, v in to_run.fabric.stats.items() if v})
to_run.ladder(title="The tail of a message lost: a timeout, then go-back-N")

# %%
to_run.psn_plot(title="PSN over time: a timeout (the long flat gap) and a full resend")

# %% [markdown]
# The cost of loss is therefore very different: a NAK costs about one round trip, a timeout
# costs the timer. That is why RDMA networks are engineered not to drop (notebook 10), and why
# the choice of `timeout` matters.
#
# ## Throughput under loss
#
# The same 64 KiB WRITE (16 packets at MTU 4096) at increasing loss rates, 20 seeded runs
# each. Most runs are unaffected, but a run that hits a timeout takes thousands of times
# longer, and that dominates the average:

# %%
import statistics

for loss in (0.0, 0.01, 0.05, 0.1):
    times, timeouts = [], 0
    for seed in range(20):
        p = replays.lossy_write(seed, length=65536, mtu=4096, loss=loss)
        times.append(max(ev.time_ns for ev in p.trace if ev.kind == "completed") / 1e3)
        timeouts += any(ev.kind == "retransmitted" and "timeout" in str(ev.detail.get("reason")) for ev in p.trace)
    mean = statistics.mean(times)
    print(f"loss {loss:4.0%}: median {statistics.median(times):8.1f} µs, mean {mean:9.1f} µs, "
          f"runs with a timeout {timeouts:2}/20, mean goodput {65536 * 8 / mean / 1e3:7.3f} Gbit/s")

# %% [markdown]
# ## Try it: the transfer runner
#
# In JupyterLab, move the sliders: operation, message size, MTU, loss rate and seed. Each
# change runs the engine again (on rxe: the kernel, with netem loss; the seed then means
# nothing) and redraws the ladder and the PSN plot. (The book shows one static run of the
# same function below.)

# %% tags=["widget"]
from rdmalab.lab.transfer import transfer_runner

transfer_runner(BACKEND)

# %%
from rdmalab.lab.transfer import run_transfer

run = run_transfer(op="READ", size=5000, mtu=1024, loss=0.1, seed=3, backend=BACKEND)
print("wire:", run.stats())
run.ladder

# %% [markdown]
# ## The same on the kernel
#
# An 8 KiB WRITE again, now through `run_transfer` with `backend=BACKEND`: with
# `BACKEND = "rxe"` it runs between two rxe devices in the lab VM, with `tc netem` dropping
# 10 % of the packets in each direction. netem drops a packet before the capture point, so a
# lost packet is simply missing from the ladder; what you see is the kernel's reaction: a NAK
# naming the PSN it still expects and a resend from there, or, when the tail was lost, a
# pause of the retransmission timer and a resend. Loss is random, so the cell tries a few
# times until a run shows a retransmission (on the soft engine it tries the next seeds).

# %%
for attempt in range(1, 7):
    live = run_transfer(op="WRITE", size=8192, mtu=1024, loss=0.1, seed=attempt, backend=BACKEND)
    if live.stats()["requests resent"]:
        break
print(f"attempt {attempt}: completions {[str(wc) for wc in live.completions]}")
print("wire:", live.stats())
live.ladder

# %% [markdown]
# ## Exercises
#
# The exercises are about runs of your own, not the ones drawn above: an RDMA WRITE with the
# length, MTU and first PSN of your scenario, over a fabric losing 5 % of the packets, with a
# fabric seed picked so that the run shows what the exercise asks about. The next cell makes
# them and shows your scenario; nothing of them is drawn yet.

# %%
from rdmalab.lab.checkers.reliability import nak_scenario_run, timeout_scenario_run

my_nak = nak_scenario_run()  # one packet lost in the middle
my_timeout = timeout_scenario_run()  # the last packet lost
lab.scenario("reliability.nak")

# %% [markdown]
# ### 1. Explain the NAK
#
# In your run `my_nak`: which PSN was lost, what NAK code did the responder send, and from
# which PSN did the requester resend? Draw it (`my_nak.ladder()`), or read the NAK's bytes
# (`my_nak.packets()`) or the trace (`my_nak.trace`).

# %% tags=["exercise"]
explanation = {"lost": ..., "code": ..., "resend_from": ...}
### BEGIN SOLUTION
lost = next(ev.psn for ev in my_nak.trace if ev.kind == "dropped")
my_nak_pkt = next(p for p in my_nak.packets() if AETH in p and p[AETH].is_nak)
explanation = {"lost": lost, "code": my_nak_pkt[AETH].nak_name, "resend_from": my_nak_pkt.bth.psn}
### END SOLUTION
lab.check("reliability.nak", explanation)

# %% [markdown]
# ### 2. The price of a timeout
#
# Your run `my_timeout` (its scenario is below) lost the last packet of its WRITE, on a QP
# whose `timeout` code is your scenario's. How many request packets did the requester send a
# second time, and how long, in milliseconds, did it wait from sending the lost packet until
# it resent? Draw it (`my_timeout.ladder()`) or read `my_timeout.trace`.

# %%
lab.scenario("reliability.timeout")

# %% tags=["exercise"]
cost = {"resent": ..., "waited_ms": ...}
### BEGIN SOLUTION
seen, resent, sent_at = set(), 0, {}
for ev in my_timeout.trace:
    if ev.kind == "sent" and ev.node == my_timeout.a.name:
        resent += ev.psn in seen
        seen.add(ev.psn)
        sent_at.setdefault(ev.psn, ev.time_ns)
lost_psn = next(ev.psn for ev in my_timeout.trace if ev.kind == "dropped" and ev.node == my_timeout.b.name)
again = next(ev.time_ns for ev in my_timeout.trace if ev.kind == "retransmitted")
cost = {"resent": resent, "waited_ms": (again - sent_at[lost_psn]) / 1e6}
### END SOLUTION
lab.check("reliability.timeout", cost)
