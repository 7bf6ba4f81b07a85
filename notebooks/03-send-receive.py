# %% [markdown]
# # SEND and RECEIVE
#
# SEND is RDMA's *two-sided* operation: the sender names no remote address. The receiver
# must have posted a **receive work request** that says where an incoming message goes; the
# responder takes the next one from its receive queue, scatters the payload there, and
# reports a completion to the receiving application (IBA Vol 1 9.4.1, 10.8).
#
# With `BACKEND = "rxe"` (or `rdmalab lab --backend rxe`) every cell below runs on the Linux
# kernel's Soft-RoCE instead of the soft engine: two rxe devices in the lab VM (or on your
# machine if it has them), real completions, real registered memory, and the ladders drawn
# from the packets tcpdump captured between them (docs/live.md). The first cell then boots
# the VM, which takes a minute or two.

# %%
BACKEND = "soft"
import rdmalab.verbs.enums as e
from rdmalab import lab, viz
from rdmalab.lab.pair import Pair
from rdmalab.verbs.wr import SGE, RecvWR, SendWR

BACKEND = lab.backend(BACKEND)  # checks that the backend is available
pair = Pair(backend=BACKEND, mtu=1024)
a, b = pair.a, pair.b
pair

# %% [markdown]
# ## One small message
#
# B posts a receive first: a work request with one scatter/gather entry (SGE) covering 256
# bytes of its registered buffer. Then A posts a SEND of 20 bytes from its own buffer. Note the
# keys: both SGEs name *local* memory, so both use their own MR's **lkey**.

# %%
b.qp.post_recv(RecvWR(wr_id=100, num_sge=1, sg=[SGE(b.mr.buf, 256, b.mr.lkey)]))
a.mr.write(b"Hello from soft0 :-)", 20)
a.qp.post_send(SendWR(wr_id=1, opcode=e.IBV_WR_SEND, num_sge=1, sg=[SGE(a.mr.buf, 20, a.mr.lkey)]))
print("A:", a.poll())
print("B:", b.poll())
print("B's buffer:", b.mr.read(20, 0))

# %% [markdown]
# Both sides got a completion: A's says its message was delivered and acknowledged, B's says a
# message of `byte_len` bytes landed in receive `wr_id=100`. On the wire that was two packets:

# %%
pair.ladder(title="A SEND and its ACK")

# %%
packets = pair.packets()
viz.hexdump(packets[0], title="RC SEND Only: BTH, then the payload directly: a SEND names no address")

# %% [markdown]
# The ACK carries an AETH (ACK Extended Transport Header): a syndrome (ACK, NAK or RNR NAK,
# plus credits or an error code) and the responder's message sequence number (MSN).

# %%
viz.hexdump(packets[1], title="RC Acknowledge: BTH + AETH")

# %% [markdown]
# ## A message larger than the MTU
#
# The path MTU here is 1024 bytes of payload per packet. A 3000-byte SEND becomes a *First*,
# a *Middle* and a *Last* packet with consecutive PSNs. Only the Last asks for an ACK (the
# AckReq bit), and one ACK covers the whole message.

# %%
b.qp.post_recv(RecvWR(wr_id=101, num_sge=1, sg=[SGE(b.mr.buf, 4096, b.mr.lkey)]))
a.qp.post_send(SendWR(wr_id=2, opcode=e.IBV_WR_SEND, num_sge=1, sg=[SGE(a.mr.buf, 3000, a.mr.lkey)]))
a.poll()
print("B:", b.poll())
for p in pair.packets()[2:]:
    print(p.summary())

# %% [markdown]
# ## No receive posted: RNR
#
# What if B's application has not posted a receive yet? The responder cannot place the
# message, so it answers with an **RNR NAK** ("receiver not ready", IBA 9.7.5.2.8) that
# carries a timer code; the requester waits at least that long and tries again, up to
# `rnr_retry` times (7 means forever). Below, B's application is busy for a while before it
# posts its receive: how long, and the timer code B's QP was given (its `min_rnr_timer`), are
# your own, drawn for you (on rxe the busy time is wall-clock time, plus the time the request
# takes to reach the VM, so the number of RNR NAKs varies from run to run).

# %%
from rdmalab.lab.checkers.verbs import rnr_run

print(f"B's application is busy for {lab.scenario('send.rnr').busy_ms:g} ms before it posts its receive.")
rnr = rnr_run(BACKEND)
# without_times(): exercise 2 below asks how long an RNR NAK tells A to wait; this ladder would say it.
# Once you have answered it, run rnr.ladder() to see the waits drawn to their real length.
rnr.ladder(title="SEND before the receive is posted: RNR NAKs, then success").without_times()

# %%
from rdmalab.wire.ib import AETH

rnr_nak = next(p for p in rnr.packets() if AETH in p and p[AETH].is_rnr_nak)
viz.hexdump(rnr_nak, title="An RNR NAK: AETH syndrome type 01, value = timer code", highlight=[(54, 55, "syndrome")],
            hide=["AETH.value"])  # exercise 2 asks you to decode it

# %% [markdown]
# ## Exercises
#
# ### 1. Segmentation
#
# List the opcode names (as `rdmalab.wire.opcode_name` spells them) of the packets A sends for
# a SEND of **the length in your scenario, at your scenario's MTU** (the next cell shows them;
# every student has their own). Work it out first, then run the engine to check yourself if you
# like (`Pair(mtu=...)` makes a pair at another MTU).

# %%
lab.scenario("send.opcodes")

# %% tags=["exercise"]
opcodes = ...  # a list of names, e.g. ["RC SEND First", ...]
### BEGIN SOLUTION
import math

s = lab.scenario("send.opcodes")
n = math.ceil(s.length / s.mtu)
opcodes = ["RC SEND First"] + ["RC SEND Middle"] * (n - 2) + ["RC SEND Last"]
### END SOLUTION
lab.check("send.opcodes", opcodes)

# %% [markdown]
# ### 2. Read the RNR timer
#
# From the bytes of the RNR NAK above, how long (in milliseconds) does B ask A to wait before
# retrying? Decode the AETH yourself: its syndrome is the first byte after the BTH.

# %% tags=["exercise"]
from rdmalab.wire.ib import RNR_TIMER_US

wait_ms = ...  # a number
### BEGIN SOLUTION
syndrome = rnr_nak.data[54]
timer_code = syndrome & 0x1F
wait_ms = RNR_TIMER_US[timer_code] / 1000
### END SOLUTION
lab.check("send.rnr", wait_ms)
