# %% [markdown]
# # RDMA READ
#
# RDMA READ pulls remote memory: the requester sends one small **READ Request** carrying a
# RETH (remote address, rkey, length), and the responder's NIC answers with **READ Response**
# packets carrying the data, which the requester places in the local buffer its work request
# named (IBA Vol 1 9.4.4). The responder's application does nothing and sees nothing; the
# region must allow `REMOTE_READ`.
#
# The responses reuse the request's PSN space: a READ of *n* packets consumes *n* PSNs at the
# requester, and the READ Response First and Last (or Only) carry an AETH, so they also act
# as the acknowledgement.
#
# With `BACKEND = "rxe"` the cells run on the Linux kernel's Soft-RoCE (two rxe devices in the
# lab VM, or on your machine if it has them): real completions, real memory, and pictures of
# the packets tcpdump captured (docs/live.md).

# %%
BACKEND = "soft"
import rdmalab.verbs.enums as e
from rdmalab import lab, viz
from rdmalab.lab.pair import Pair
from rdmalab.verbs.wr import SGE, SendWR

BACKEND = lab.backend(BACKEND)  # checks that the backend is available
pair = Pair(backend=BACKEND, mtu=1024)
a, b = pair.a, pair.b
b.mr.write(b"Data that lives in soft1's memory. " * 100, 3500)

wr = SendWR(wr_id=7, opcode=e.IBV_WR_RDMA_READ, num_sge=1, sg=[SGE(a.mr.buf, 3000, a.mr.lkey)])
wr.set_wr_rdma(b.mr.rkey, b.mr.buf)
a.qp.post_send(wr)
print("A:", a.poll())
print("A's buffer now:", a.mr.read(35, 0))
print("B's completions:", b.completions())
pair.ladder(title="RDMA READ of 3000 bytes at MTU 1024")

# %%
pkts = pair.packets()
viz.hexdump(pkts[0], title="READ Request: BTH + RETH, no payload")

# %%
viz.hexdump(pkts[1], title="READ Response First: BTH + AETH + data", end=72)

# %% [markdown]
# The PSNs: the request used PSN 100, and the three responses are numbered 100, 101, 102. The
# requester's next request will use PSN 103:

# %%
for p in pkts:
    print(f"{p.opcode_name:32} PSN {p.bth.psn}")

# %% [markdown]
# ## READ versus WRITE, in time
#
# Both complete after about one round trip: a WRITE's completion waits for the ACK, a READ's
# for the data. The difference is *where the data is when*. A WRITE's data is in the remote
# memory after one one-way trip; a READ cannot have its data before a full round trip.
# On the soft fabric (1 µs one-way latency, 100 Gbit/s), for 8 KiB, the engine's trace says
# when the data arrived and when the work request completed. The kernel keeps no such trace:
# on rxe the cell prints what the capture between the two devices saw instead (times of a VM,
# often emulated, so much slower than the soft fabric's).

# %%
for op, name in ((e.IBV_WR_RDMA_WRITE, "WRITE"), (e.IBV_WR_RDMA_READ, "READ")):
    p = Pair(backend=BACKEND, mtu=4096, seed=9)
    wr = SendWR(wr_id=1, opcode=op, num_sge=1, sg=[SGE(p.a.mr.buf, 8192, p.a.mr.lkey)])
    wr.set_wr_rdma(p.b.mr.rkey, p.b.mr.buf)
    p.a.qp.post_send(wr)
    p.a.poll()
    data_node = p.b.name if name == "WRITE" else p.a.name
    if BACKEND == "soft":
        placed = max(ev.time_ns for ev in p.trace if ev.kind == "received" and ev.node == data_node
                     and ev.opcode not in (0x11, 0x0C))
        done = max(ev.time_ns for ev in p.trace if ev.kind == "completed")
        print(f"{name:5}: data in place at {data_node} after {placed / 1000:.3f} µs, "
              f"completion after {done / 1000:.3f} µs")
    else:
        wire = p.captured()  # (timestamp, packet) as tcpdump saw them on the veth between rxe1 and rxe2
        t0 = wire[0].timestamp
        data_last = max(c.timestamp for c in wire if c.packet.payload_length)  # WRITE data or READ responses
        print(f"{name:5}: {len(wire)} packets; the last data packet towards {data_node} passed "
              f"{(data_last - t0) * 1e6:.0f} µs after the first packet, the last packet at "
              f"{(wire[-1].timestamp - t0) * 1e6:.0f} µs")

# %% [markdown]
# ## Exercises
#
# ### 1. Write a verbs program that reads remote memory
#
# Complete `read_remote(pair, remote_offset, length)`: read `length` bytes starting
# `remote_offset` bytes into B's buffer, into A's buffer at offset 0, and return them as
# `bytes`. The checker fills B's memory with a secret and compares.

# %% tags=["exercise"]
def read_remote(pair, remote_offset, length):
    ### BEGIN SOLUTION
    a, b = pair.a, pair.b
    wr = SendWR(wr_id=1, opcode=e.IBV_WR_RDMA_READ, num_sge=1, sg=[SGE(a.mr.buf, length, a.mr.lkey)])
    wr.set_wr_rdma(b.mr.rkey, b.mr.buf + remote_offset)
    a.qp.post_send(wr)
    wc = a.poll()
    assert wc.status == e.IBV_WC_SUCCESS, wc
    return a.mr.read(length, 0)
    ### END SOLUTION


lab.check("read.program", read_remote)

# %% [markdown]
# ### 2. Count the responses, size the last
#
# How many READ Response packets does the responder send for a READ of `length` bytes at a path
# MTU of `mtu` bytes, and how many bytes of data does the last of them carry (its headers and
# pad not counted)? Every student has their own READ: the cell below shows yours.

# %%
lab.scenario("read.responses")

# %% tags=["exercise"]
responses = ...  # [how many READ Responses, bytes of data in the last one]
### BEGIN SOLUTION
s = lab.scenario("read.responses")
n = -(-s.length // s.mtu)  # all responses but the last carry a full MTU of data
responses = [n, s.length - (n - 1) * s.mtu]
### END SOLUTION
lab.check("read.responses", responses)
