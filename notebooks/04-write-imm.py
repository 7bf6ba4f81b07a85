# %% [markdown]
# # RDMA WRITE and immediate data
#
# RDMA WRITE is *one-sided*: the requester names the remote virtual address and the remote
# key (rkey) of a memory region the responder registered with `REMOTE_WRITE` access. The
# responder's NIC checks the key and the bounds and places the data; the responder's
# application is not involved and gets no completion (IBA Vol 1 9.4.3).
#
# The address and key travel in the **RETH** (RDMA Extended Transport Header), which only the
# *first* packet of a WRITE carries: the responder remembers where the message goes and
# appends the Middle and Last packets after it.
#
# With `BACKEND = "rxe"` the cells run on the Linux kernel's Soft-RoCE (two rxe devices in the
# lab VM, or on your machine if it has them): real completions, real memory, and pictures of
# the packets tcpdump captured (docs/live.md).

# %%
BACKEND = "soft"
import rdmalab.verbs.enums as e
from rdmalab import lab, viz
from rdmalab.lab.pair import Pair
from rdmalab.verbs.wr import SGE, RecvWR, SendWR

BACKEND = lab.backend(BACKEND)  # checks that the backend is available
pair = Pair(backend=BACKEND, mtu=1024)
a, b = pair.a, pair.b

# %% [markdown]
# In a real program B would send A its buffer's address and rkey first (in a SEND, or through
# the connection manager's private data, notebook 12). Here A reads them from B's MR object.

# %%
text = b"One-sided: B's CPU is not involved. " * 80
size = 2500
a.mr.write(text[:size], size)
wr = SendWR(wr_id=1, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(a.mr.buf, size, a.mr.lkey)])
wr.set_wr_rdma(b.mr.rkey, b.mr.buf + 100)  # remote key, remote address (100 bytes into B's buffer)
a.qp.post_send(wr)
print("A:", a.poll())
print("B's memory at 100:", b.mr.read(40, 100))
print("B's completions:", b.completions())
pair.ladder(title="RDMA WRITE of 2500 bytes at MTU 1024")

# %%
first, middle, last, ack = pair.packets()[:4]
viz.hexdump(first, title="RDMA WRITE First: BTH + RETH (address, rkey, total length) + 1024 bytes", end=80)

# %%
viz.hexdump(middle, title="RDMA WRITE Middle: BTH and data only", end=64, fields=False)

# %% [markdown]
# The RETH's `dma_length` is the length of the whole message, not of this packet; the
# responder uses it to check the whole write against the region's bounds up front.
#
# ## Immediate data: waking the responder
#
# Sometimes the responder *does* need to know that a write arrived. **RDMA WRITE with
# Immediate** carries 32 bits of *immediate data* (ImmDt header) in its last packet; the
# responder consumes a receive work request and completes it with opcode
# `IBV_WC_RECV_RDMA_WITH_IMM` and the immediate value, while the data itself still goes to the
# address the RETH named. The receive WR needs no buffer.

# %%
pair2 = Pair(backend=BACKEND, mtu=1024, seed=4)
a2, b2 = pair2.a, pair2.b
b2.qp.post_recv(RecvWR(wr_id=55, num_sge=0, sg=[]))
a2.mr.write(text[:1500], 1500)
wr = SendWR(wr_id=2, opcode=e.IBV_WR_RDMA_WRITE_WITH_IMM, num_sge=1, sg=[SGE(a2.mr.buf, 1500, a2.mr.lkey)],
            imm_data=0xC0FFEE)
wr.set_wr_rdma(b2.mr.rkey, b2.mr.buf)
a2.qp.post_send(wr)
print("A:", a2.poll())
wc = b2.poll()
print("B:", wc, "| imm_data =", hex(wc.imm_data))
imm_pkt = [p for p in pair2.packets() if p.opcode_name and "Immediate" in p.opcode_name][0]
viz.hexdump(imm_pkt, title=imm_pkt.opcode_name + ": BTH, ImmDt, data", end=64)

# %% [markdown]
# ## Exercises
#
# ### 1. Write a verbs program: RDMA WRITE with immediate
#
# Complete `write_with_imm(pair, data, imm)`: write `data` into B's buffer at offset 0 with
# an RDMA WRITE with immediate `imm`, and return **B's** completion. Use only verbs calls on
# `pair.a` and `pair.b` (`qp`, `mr`, `poll()`). The checker runs your function on a fresh pair
# of the soft engine (whatever the backend), where it can also read the engine's trace.

# %% tags=["exercise"]
def write_with_imm(pair, data, imm):
    ### BEGIN SOLUTION
    a, b = pair.a, pair.b
    b.qp.post_recv(RecvWR(wr_id=1, num_sge=0, sg=[]))
    a.mr.write(data, len(data))
    wr = SendWR(wr_id=2, opcode=e.IBV_WR_RDMA_WRITE_WITH_IMM, num_sge=1, sg=[SGE(a.mr.buf, len(data), a.mr.lkey)],
                imm_data=imm)
    wr.set_wr_rdma(b.mr.rkey, b.mr.buf)
    a.qp.post_send(wr)
    a.poll()
    return b.poll()
    ### END SOLUTION


lab.check("write.imm", write_with_imm)
