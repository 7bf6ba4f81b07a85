# %% [markdown]
# # Security: keys, protection domains, access flags
#
# RDMA lets a remote peer write into your memory without your CPU looking. What stops it from
# writing anywhere? Three checks, all made by the responder's NIC on every request
# (IBA Vol 1 10.6 and 9.7.4.1.4):
#
# 1. the **rkey** in the request must name a memory region that is still registered,
#    registered in the **same protection domain** as the QP the request arrived on;
# 2. the whole range `[va, va + length)` must lie inside that region;
# 3. the region's **access flags** must allow the operation: `REMOTE_WRITE` for WRITE,
#    `REMOTE_READ` for READ, `REMOTE_ATOMIC` for atomics.
#
# A request that fails is not executed: the responder answers with a NAK whose code says
# which kind of check failed, the requester's work request completes with an error status,
# and the connection goes to the error state. Which code and which status, you read off the
# wire below (exercise 2).
#
# With `BACKEND = "rxe"` the cells run on the Linux kernel's Soft-RoCE (two rxe devices in the
# lab VM, or on your machine if it has them), so every verdict below is the kernel's own
# (`drivers/infiniband/sw/rxe/rxe_resp.c`, `rxe_mr.c`), and the ladders are drawn from the
# packets tcpdump captured (docs/live.md).

# %%
BACKEND = "soft"
import rdmalab.verbs.enums as e
from rdmalab import lab, viz
from rdmalab.lab.pair import Pair
from rdmalab.verbs.mr import MR
from rdmalab.verbs.wr import SGE, SendWR

BACKEND = lab.backend(BACKEND)  # checks that the backend is available


def try_write(pair, rkey, addr, length=16, *, lkey=None):
    """A writes `length` bytes to (rkey, addr); returns the status of A's completion (a number)."""
    a = pair.a
    wr = SendWR(wr_id=1, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1,
                sg=[SGE(a.mr.buf, length, a.mr.lkey if lkey is None else lkey)])
    wr.set_wr_rdma(rkey, addr)
    a.qp.post_send(wr)
    return int(a.poll().status)


def verdict(status):
    return "done" if status == e.IBV_WC_SUCCESS else f"refused, wc.status {status}"


# %% [markdown]
# ## The keys
#
# Each MR has an lkey (for local work requests) and an rkey (for remote peers). In the soft
# engine, as in Linux `rxe`, a key is a 24-bit index and an 8-bit *key* part. Both draw the
# 8-bit part at random; the soft engine also never makes lkey and rkey equal, while rxe gives
# a region one key for both (`rxe_mr.c`: `lkey = rkey = index << 8 | key` when remote access
# is allowed). Run it with `BACKEND = "rxe"` and see.

# %%
pair = Pair(backend=BACKEND, seed=12)
b = pair.b
print(f"B's MR: lkey {b.mr.lkey:#010x}  rkey {b.mr.rkey:#010x}  (index {b.mr.rkey >> 8}, key byte {b.mr.rkey & 0xff:#04x})")
print("lkey == rkey:", b.mr.lkey == b.mr.rkey)
print("a correct write:", verdict(try_write(pair, b.mr.rkey, b.mr.buf)))

# %% [markdown]
# ## A guessed rkey
#
# Suppose a connected peer tries an rkey it was never given: the right region index (they are
# small and predictable) with a guessed key byte, here one more than the real one.

# %%
pair = Pair(backend=BACKEND, seed=12)
before = pair.b.mr.read(16, 0)
guessed = (pair.b.mr.rkey & ~0xFF) | ((pair.b.mr.rkey + 1) & 0xFF)
print(f"real rkey {pair.b.mr.rkey:#010x}, guessed {guessed:#010x}")
guessed_status = try_write(pair, guessed, pair.b.mr.buf)
print("write with a wrong key:", verdict(guessed_status))
print("B's memory unchanged:", pair.b.mr.read(16, 0) == before)
print("A's QP state now:", pair.a.qp.qp_state_name)
pair.ladder(title="A wrong rkey: a NAK, and the QP is dead", names=False)  # exercise 2 asks the names

# %%
from rdmalab.wire.ib import AETH

nak = next(p for p in pair.packets() if AETH in p and p[AETH].is_nak)
viz.hexdump(nak, title="B's NAK: the code is in the low 5 bits of the AETH syndrome byte", hide=["AETH.value"])

# %% [markdown]
# What a guess **cannot** do: touch memory that is not registered, go outside the region's
# bounds, do what the access flags forbid, or use a region of another protection domain. And a
# wrong guess is loud: the requester's connection is torn down and must be re-established.
#
# What a **right** guess can do: everything the region allows, inside its bounds. The 8-bit key
# part gives 256 possibilities per region index, which is why rkeys are *not* a
# secret to rely on across trust boundaries; real deployments also rely on the connection
# (only connected, authenticated peers reach the QP), and on invalidating keys after use.
#
# ## Out of bounds, wrong access, wrong PD

# %%
cases = {}
pair = Pair(backend=BACKEND, seed=13)
cases["past the end of the region"] = try_write(pair, pair.b.mr.rkey, pair.b.mr.buf + pair.b.mr.length - 8, 16)

pair = Pair(backend=BACKEND, seed=13)
# B registers one more region in its PD, readable but not writable: MR(pair.b.pd, 4096, flags)
ro = pair.b.reg_mr(4096, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_READ)
cases["region without REMOTE_WRITE"] = try_write(pair, ro.rkey, ro.buf)

pair = Pair(backend=BACKEND, seed=13)
other_pd = pair.b.alloc_pd()  # PD(pair.b.ctx): a second protection domain on B's device
foreign = pair.b.reg_mr(4096, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE, pd=other_pd)
cases["region in another protection domain"] = try_write(pair, foreign.rkey, foreign.buf)

pair = Pair(backend=BACKEND, seed=13)
cases["correct rkey, inside the region"] = try_write(pair, pair.b.mr.rkey, pair.b.mr.buf)
for what, status in cases.items():
    print(f"{what:38} -> {verdict(status)}")

# %% [markdown]
# ## The lkey/rkey mix-up
#
# A classic bug: swapping the keys. On hardware where lkey and rkey happen to be equal it goes
# unnoticed (a public RDMA example carried it for years). The soft engine makes them
# differ on purpose, so the bug shows. (rxe is such an implementation with equal keys, and
# there the outcome depends on whether B's key happens to name a region on A's device too;
# with `BACKEND = "rxe"` the cell shows what the kernel did.)

# %%
def write_to_peer_buggy(pair, data):
    a, b = pair.a, pair.b
    a.mr.write(data, len(data))
    wr = SendWR(wr_id=1, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(a.mr.buf, len(data), b.mr.rkey)])
    wr.set_wr_rdma(a.mr.lkey, b.mr.buf)
    a.qp.post_send(wr)
    return a.poll()


print(write_to_peer_buggy(Pair(backend=BACKEND, seed=51), b"keys matter " * 50))

# %% [markdown]
# It fails before a single packet is sent: A's own NIC checks the SGE's key against A's
# memory regions and completes the work request with a local error: a *local protection
# error* on the soft engine; rxe in Linux 6.1 reported it here as a *local QP operation
# error*. Had only the RETH's key been wrong, B would have refused the request with a NAK
# instead, as it refused the guessed key above.

# %% [markdown]
# ## Exercises
#
# ### 1. Fix the bug
#
# Write `write_to_peer(pair, data)`: the same function with the keys right. It must return
# A's completion, and B's buffer must hold `data` at offset 0.

# %% tags=["exercise"]
def write_to_peer(pair, data):
    ### BEGIN SOLUTION
    a, b = pair.a, pair.b
    a.mr.write(data, len(data))
    wr = SendWR(wr_id=1, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(a.mr.buf, len(data), a.mr.lkey)])
    wr.set_wr_rdma(b.mr.rkey, b.mr.buf)
    a.qp.post_send(wr)
    return a.poll()
    ### END SOLUTION


lab.check("security.fix", write_to_peer)

# %% [markdown]
# ### 2. What a wrong guess gets you
#
# Give `[the ibv_wc_status name A's work request completes with, the name of the NAK B sends]`
# for a write with a guessed, wrong rkey. The cells above show both, on either backend: the
# ladder, the NAK's bytes, and A's `wc.status` as a number (`e.ibv_wc_status_str(n)` and
# `rdmalab.wire.ib.NAK_NAMES` turn numbers into names).

# %% tags=["exercise"]
guess = ...  # ["IBV_WC_...", "..."]
### BEGIN SOLUTION
status_names = {int(v): k for k, v in vars(e).items() if k.startswith("IBV_WC_") and k.endswith("_ERR")}
guess = [status_names[guessed_status], nak[AETH].nak_name]
### END SOLUTION
lab.check("security.guess", guess)

# %% [markdown]
# ### 3. Least privilege
#
# Give the smallest set of access flags (names without the `IBV_ACCESS_` prefix) for a
# region that remote peers may only **read**, and for a region that is only the target of
# remote **atomics**. Try registering your choices with `MR(pd, 64, flags)` first: the verbs
# reject some combinations.

# %% tags=["exercise"]
flags = {"read": ..., "atomic": ...}
### BEGIN SOLUTION
flags = {"read": {"REMOTE_READ"}, "atomic": {"LOCAL_WRITE", "REMOTE_ATOMIC"}}
### END SOLUTION
lab.check("security.flags", flags)
