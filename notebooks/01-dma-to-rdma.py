# %% [markdown]
# # From DMA to RDMA
#
# **DMA** (direct memory access) lets a device, a disk controller or a network card, read and
# write host memory without the CPU copying every byte. **RDMA** stretches that across the
# network: a network card places data straight into a *remote* host's memory. Three words
# describe what that buys:
#
# - **zero copy**: the payload goes from the sender's buffer to the receiver's buffer without
#   being copied into and out of kernel socket buffers;
# - **kernel bypass**: posting work and collecting completions are not system calls;
# - **CPU offload**: segmentation, acknowledgement and retransmission run in the NIC, and for
#   one-sided operations the remote application does nothing at all.
#
# Rather than take those on trust, we count. Linux keeps per-thread I/O counters in
# `/proc/thread-self/io`: `syscr`/`syscw` count read-like and write-like system calls
# (`recv` and `send` included), `rchar`/`wchar` the bytes those calls moved between user space
# and the kernel.

# %%
BACKEND = "soft"
import threading

from rdmalab import lab

BACKEND = lab.backend(BACKEND)  # checks that the backend is available


def io_counters() -> dict:
    """This thread's I/O counters (Linux /proc/thread-self/io)."""
    with open("/proc/thread-self/io") as f:
        return {k: int(v) for k, v in (line.split(": ") for line in f)}


KEYS = ("syscr", "syscw", "rchar", "wchar")


def _raw_delta(before: dict, after: dict) -> dict:
    return {k: after[k] - before[k] for k in KEYS}


# Reading the counters is itself two read() calls (the data, then end of file); measure that
# once and subtract it, so an interval in which nothing happens shows zeros.
OVERHEAD = _raw_delta(io_counters(), io_counters())


def delta(before: dict, after: dict) -> dict:
    raw = _raw_delta(before, after)
    return {k: max(0, raw[k] - OVERHEAD[k]) for k in KEYS}


print("cost of reading the counters:", OVERHEAD)


SIZE = 1 << 20  # one MiB
message = bytes(range(256)) * (SIZE // 256)

# %% [markdown]
# ## A socket transfer, counted
#
# A sender thread writes one MiB into a connected socket in 64 KiB `write()` system calls; a
# receiver thread reads it with `read()`. (We call `os.write`/`os.read` on the socket so that
# every call is exactly one system call that the counters see.) Each thread measures its own
# counters.

# %%
import os
import socket

left, right = socket.socketpair()
counts = {}


def sender():
    before = io_counters()
    view = memoryview(message)
    off = 0
    while off < SIZE:
        off += os.write(left.fileno(), view[off:off + 65536])
    counts["sender"] = delta(before, io_counters())


def receiver():
    before = io_counters()
    got = bytearray()
    while len(got) < SIZE:
        got += os.read(right.fileno(), 65536)
    counts["receiver"] = delta(before, io_counters())
    counts["ok"] = bytes(got) == message


threads = [threading.Thread(target=receiver), threading.Thread(target=sender)]
for t in threads:
    t.start()
for t in threads:
    t.join()
left.close()
right.close()
for who in ("sender", "receiver"):
    c = counts[who]
    print(f"{who:>8}: {c['syscw']:4} write-like + {c['syscr']:4} read-like system calls, "
          f"{c['wchar'] / SIZE:.2f} MiB handed to the kernel, {c['rchar'] / SIZE:.2f} MiB copied out of it")
print("data intact:", counts["ok"])

# %% [markdown]
# `wchar` counts the bytes a thread's write-like calls copied from its own buffer into the
# kernel, `rchar` the bytes its read-like calls copied from the kernel into its buffer. Each of
# those calls was a system call, and the receiving application had to be running and calling
# `read()` for the data to arrive at all. How many times the message crossed the user/kernel
# boundary, exercise 1 asks.
#
# ## The same megabyte with RDMA WRITE
#
# Now two RDMA endpoints on the soft engine. `Pair` (from `rdmalab.lab.pair`) opens two
# devices and connects two RC queue pairs; notebook 02 builds the same objects by hand. A
# registers nothing new: its buffer is already a memory region (MR), and so is B's.

# %%
import rdmalab.verbs.enums as e
from rdmalab.lab.pair import Pair
from rdmalab.verbs.wr import SGE, SendWR

pair = Pair(mtu=4096, size=SIZE)
a, b = pair.a, pair.b
a.mr.write(message, SIZE)


def rdma_write(length):
    wr = SendWR(wr_id=1, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(a.mr.buf, length, a.mr.lkey)])
    wr.set_wr_rdma(b.mr.rkey, b.mr.buf)  # where in B's memory, and B's permission to write there
    a.qp.post_send(wr)
    return a.poll()


rdma_write(8)  # warm-up: the first call imports a few modules, which reads files
n_before = len(pair.trace)

before = io_counters()
wc = rdma_write(SIZE)
engine = delta(before, io_counters())  # the thread's counters across the WRITE: exercise 2 reads them
print(wc)
print("B's memory holds the data:", b.mr.read(SIZE, 0) == message)
print("completions B's application saw:", len(b.completions()))

# %% [markdown]
# `post_send` put a work request on A's send queue and `poll` read A's completion queue. The
# data went from A's registered buffer to B's registered buffer, placed by the (soft) NIC at
# the address the WRITE named. B's application made no call and got no completion: it did not
# take part. The cell kept the thread's counters across the WRITE in `engine`, unprinted:
# exercise 2 asks what they say.
#
# ## What the "NIC" did instead
#
# The engine cut the megabyte into 4096-byte packets and numbered them (PSN). It set the AckReq
# bit on every 64th packet and on the last, as Linux `rxe` does (`RXE_MAX_PKT_PER_ACK`), and B
# answered each with an ACK that A matched, all without either application. Here are the first
# packets, then, past a cut in the time axis, the packet that asked for the first ACK, and that
# ACK:

# %%
from rdmalab import viz

big = pair.trace[n_before:]
print(viz.opcode_counts(big))
first_ack = next(ev for ev in big if ev.kind == "sent" and ev.node == b.name)
first_psn = next(ev.psn for ev in big if ev.kind == "sent")
shown = [ev for ev in big if ev.kind in ("sent", "received")
         and (ev.psn < first_psn + 3 or first_ack.psn - 1 <= ev.psn <= first_ack.psn)]
viz.from_trace(shown, title="The start of the 1 MiB RDMA WRITE, and its first ACK")

# %% [markdown]
# ## Exercises
#
# ### 1. Copies
#
# In the socket transfer above, how many times did the message cross between user space and
# the kernel? (Count whole messages: `wchar` and `rchar` of both threads, divided by `SIZE`.)

# %% tags=["exercise"]
copies = ...  # an integer
### BEGIN SOLUTION
copies = round((counts["sender"]["wchar"] + counts["receiver"]["rchar"]) / SIZE)
### END SOLUTION
lab.check("dma.copies", copies)

# %% [markdown]
# ### 2. System calls on the RDMA data path
#
# How many system calls did the thread make between posting the WRITE and getting its
# completion?

# %% tags=["exercise"]
syscalls = ...  # an integer
### BEGIN SOLUTION
syscalls = engine["syscr"] + engine["syscw"]
### END SOLUTION
lab.check("dma.syscalls", syscalls)

# %% [markdown]
# ## What the counters said
#
# Once you have answered both, print them side by side:

# %%
print("socket transfer, sender:  ", counts["sender"])
print("socket transfer, receiver:", counts["receiver"])
print("RDMA WRITE, sender:       ", engine)

# %% [markdown]
# The socket copied the message into the kernel and out again, one system call per 64 KiB
# each way. The WRITE made no system call and moved no byte through the kernel: `post_send`
# and `poll` are plain memory operations on queues the application shares with the NIC.
#
# Two honest footnotes. The soft engine runs inside this Python process, so here "the NIC"
# is code on the same CPU; what the counters show is the *interface*: no system calls, no
# kernel copies. With a hardware RNIC, `post_send` rings a doorbell, a write to a
# memory-mapped device register. With the kernel's Soft-RoCE (`rxe`), the doorbell is a
# system call, because the NIC is a kernel driver (rdma-core `providers/rxe`).
