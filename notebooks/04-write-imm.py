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
from rdmalab.wire.ib import ImmDt

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
# ### Why `0xC0FFEE` travels as `ee ff c0 00`
#
# B got back the value A posted, yet the ImmDt bytes above are `ee ff c0 00` and the field table
# reads them as `0xeeffc000`. Three facts explain it:
#
# - In libibverbs the `imm_data` of `struct ibv_send_wr`, and of the `struct ibv_wc` B polls, is a
#   `__be32`: "immediate data (in network byte order)" say ibv_post_send(3) and ibv_poll_cq(3). The
#   sending NIC copies the four bytes of that field into the ImmDt header (IBA Vol 1 9.3.7) as they
#   are, and the receiving NIC copies the ImmDt's four bytes into B's completion as they are.
# - pyverbs stores the integer you give `SendWR(imm_data=...)` into that C field without converting
#   it, and `wc.imm_data` reads the field back without converting it; rdmalab does the same. On a
#   little-endian host (x86-64, and ARM as Linux runs it) an integer in memory starts with its lowest
#   byte: `0x00C0FFEE` is the bytes `ee ff c0 00`, and those bytes go on the wire.
# - The field table reads every header field most significant byte first, the network byte order
#   the IBA uses for all its headers; so do Wireshark and tshark. The same four bytes read that way
#   are `0xeeffc000`.
#
# B's completion holds those four bytes and pyverbs reads them in host order: `0xc0ffee` again.
# Between two little-endian hosts the value survives the trip; a big-endian peer, or anyone reading
# the capture, sees `0xeeffc000`. A portable program converts on both sides: `socket.htonl(x)` when
# it posts, `socket.ntohl(wc.imm_data)` when it polls (`htobe32` and `be32toh` in C). pyverbs'
# extended QP API converts for you: `QPEx.wr_rdma_write_imm(rkey, addr, data)` passes
# `htobe32(data)` to libibverbs.

# %%
import socket

b2.qp.post_recv(RecvWR(wr_id=56, num_sge=0, sg=[]))
wr = SendWR(wr_id=3, opcode=e.IBV_WR_RDMA_WRITE_WITH_IMM, num_sge=1, sg=[SGE(a2.mr.buf, 8, a2.mr.lkey)],
            imm_data=socket.htonl(0xC0FFEE))  # network order, as the field wants it
wr.set_wr_rdma(b2.mr.rkey, b2.mr.buf)
a2.qp.post_send(wr)
a2.poll()
wc = b2.poll()
imm = [p for p in pair2.packets() if p.opcode_name and "Immediate" in p.opcode_name][-1][ImmDt]
print(f"on the wire: ImmDt bytes {imm.encode().hex(' ')}, read as the field table reads them: {imm.imm:#010x}")
print(f"B: wc.imm_data = {wc.imm_data:#x}, socket.ntohl(wc.imm_data) = {socket.ntohl(wc.imm_data):#x}")

# %% [markdown]
# ## Exercises
#
# ### 1. Write a verbs program: RDMA WRITE with immediate
#
# Complete `write_with_imm(pair, data, imm)`: write `data` into B's buffer at offset 0 with
# an RDMA WRITE with immediate `imm`, and return **B's** completion. Use only verbs calls on
# `pair.a` and `pair.b` (`qp`, `mr`, `poll()`). Post `imm` as it is, as the first example did, or
# in network order (`socket.htonl(imm)`): either is right as long as B's completion is returned
# untouched, and the checker's message says what went on the wire. It runs your function on a
# fresh pair of the soft engine (whatever the backend), where it can also read the engine's trace.

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
