# %% [markdown]
# # Atomics
#
# Two remote atomic operations act on one aligned 8-byte word of remote memory, and return
# the word's value *before* the operation into a local buffer (IBA Vol 1 9.4.5):
#
# - **Compare and Swap**: if the word equals *compare*, replace it with *swap*;
# - **Fetch and Add**: add *add* to the word.
#
# The responder performs the read-modify-write atomically with respect to other atomics on
# the same NIC, which is enough to build counters, locks and queues shared across machines
# without the remote CPU. The request carries an **AtomicETH** (address, rkey, swap/add,
# compare); the answer is an **Atomic Acknowledge** with an AETH and an **AtomicAckETH**
# holding the original value.
#
# With `BACKEND = "rxe"` the cells run on the Linux kernel's Soft-RoCE (two rxe devices in the
# lab VM, or on your machine if it has them): real completions, real memory, and pictures of
# the packets tcpdump captured (docs/live.md).

# %%
BACKEND = "soft"
import struct

import rdmalab.verbs.enums as e
from rdmalab import lab, viz
from rdmalab.lab.pair import Pair
from rdmalab.verbs.wr import SGE, SendWR

BACKEND = lab.backend(BACKEND)  # checks that the backend is available
pair = Pair(backend=BACKEND)
a, b = pair.a, pair.b
b.mr.write(struct.pack("<Q", 41), 8, 0)  # B's counter, in B's (little-endian) host order


def atomic(op, compare_add, swap=0, local_offset=0):
    wr = SendWR(wr_id=local_offset, opcode=op, num_sge=1, sg=[SGE(a.mr.buf + local_offset, 8, a.mr.lkey)])
    wr.set_wr_atomic(b.mr.rkey, b.mr.buf, compare_add, swap)
    a.qp.post_send(wr)
    wc = a.poll()
    return wc, struct.unpack("<Q", a.mr.read(8, local_offset))[0]


wc, old = atomic(e.IBV_WR_ATOMIC_FETCH_AND_ADD, 1)
print(wc)
print("returned:", old, "| B's counter now:", struct.unpack("<Q", b.mr.read(8, 0))[0])

# %%
req, ack = pair.packets()[:2]
viz.hexdump(req, title="FetchAdd request: BTH + AtomicETH (28 bytes), no payload")

# %%
viz.hexdump(ack, title="Atomic Acknowledge: BTH + AETH + AtomicAckETH (the value before the add)")

# %% [markdown]
# On the wire the numbers are big-endian (network order); in memory the counter is whatever
# the host's order is. The NIC converts: the AtomicAckETH above says `0x29` = 41, the value
# before the add, and A's buffer received it in A's host order.
#
# ## Compare and swap
#
# CmpSwap only writes when the comparison holds; either way it returns the old value, which
# tells the requester whether it won:

# %%
for compare, swap in ((42, 100), (42, 7)):
    wc, old = atomic(e.IBV_WR_ATOMIC_CMP_AND_SWP, compare, swap, local_offset=8)
    now = struct.unpack("<Q", b.mr.read(8, 0))[0]
    print(f"CmpSwap(compare={compare}, swap={swap}): returned {old}, swapped: {old == compare}, counter now {now}")
pair.ladder(title="FetchAdd, then two CmpSwaps")

# %% [markdown]
# A responder keeps the results of its recent atomics: if an Atomic Acknowledge is lost and
# the requester resends the request with the same PSN, the responder answers from that cache
# instead of adding twice (IBA 9.7.5.1.4). Notebook 09 shows retransmissions.
#
# ## Exercises
#
# ### 1. Predict a sequence
#
# B's counter starts at `start`, and A runs four atomics on it, in order, each after the one
# before has completed:
#
# 1. FetchAdd(`add1`), which returns r1;
# 2. CmpSwap(compare `compare1`, swap `swap1`), which returns r2;
# 3. CmpSwap(compare `compare2`, swap `swap2`), which returns r3;
# 4. FetchAdd(`add2`), which returns r4.
#
# Every student has their own values: the cell below shows yours. Give `[[r1, r2, r3, r4], the
# final counter value]`, worked out on paper: each atomic finds the counter as the ones before it
# left it.

# %%
lab.scenario("atomic.final")

# %% tags=["exercise"]
prediction = ...  # [[r1, r2, r3, r4], final]
### BEGIN SOLUTION
s = lab.scenario("atomic.final")
counter, returned = s.start, []
for kind, x, swap in (("add", s.add1, 0), ("cas", s.compare1, s.swap1), ("cas", s.compare2, s.swap2),
                      ("add", s.add2, 0)):
    returned.append(counter)  # an atomic returns the value it found
    if kind == "add":
        counter += x
    elif counter == x:
        counter = swap
prediction = [returned, counter]
### END SOLUTION
lab.check("atomic.final", prediction)

# %% [markdown]
# ### 2. A lock across the network
#
# B's 8-byte word at offset 64 of its buffer is a lock: 0 free, 1 taken. Write
# `try_lock(pair)` that tries once to take it with a single atomic and returns `True` if it
# got the lock and `False` otherwise. Use a fresh local offset (e.g. 128) for the returned
# value. The checker calls your function twice on a fresh pair: the first call finds the lock
# free, the second finds it taken.

# %% tags=["exercise"]
def try_lock(pair):
    ### BEGIN SOLUTION
    a, b = pair.a, pair.b
    wr = SendWR(wr_id=9, opcode=e.IBV_WR_ATOMIC_CMP_AND_SWP, num_sge=1, sg=[SGE(a.mr.buf + 128, 8, a.mr.lkey)])
    wr.set_wr_atomic(b.mr.rkey, b.mr.buf + 64, 0, 1)
    a.qp.post_send(wr)
    a.poll()
    return struct.unpack("<Q", a.mr.read(8, 128))[0] == 0
    ### END SOLUTION


lab.check("atomic.lock", try_lock)
