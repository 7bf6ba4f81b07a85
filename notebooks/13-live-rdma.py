# %% [markdown]
# # Live RDMA: the same operations on the kernel's Soft-RoCE
#
# So far every packet in these notebooks came from rdmalab's own engine or from a capture file.
# This notebook runs the same operations on **Linux's Soft-RoCE driver (`rdma_rxe`)**: a real
# RoCEv2 implementation in the kernel, driven through **pyverbs**, the Python binding of
# rdma-core. You see its real completions, its memory and the packets tcpdump captured, in the
# same pictures as the soft engine's.
#
# Your machine does not need RDMA. If its kernel has no rxe devices, `BACKEND = "rxe"` boots a small
# virtual machine (`rdmalab vm`, docs/live.md). The VM runs your distribution's own kernel on your
# own files. Inside it, `rxe1` (10.0.1.1) and `rxe2` (10.0.1.2) are joined by a virtual Ethernet
# cable (a veth pair), and tcpdump listens on that cable. Booting takes half a minute with KVM and
# about a minute without it, and happens once per notebook session.
#
# With `BACKEND = "soft"` (the default, so the notebook runs anywhere) the same program runs on
# the soft engine. Switch to `"rxe"` and run all the cells again: only where things ran changes.

# %%
BACKEND = "soft"  # "rxe": the kernel's Soft-RoCE (in a VM when this machine has no rxe device)

from rdmalab import lab, viz
from rdmalab.live import labruns

BACKEND = lab.backend(BACKEND)  # checks that the backend is available
lab.environment()

# %% [markdown]
# ## One program, two implementations
#
# The operations live in one verbs program, `rdmalab/live/programs/lab_ops.py`. It uses the
# pyverbs-shaped API of `rdmalab.verbs`. To run it on rxe, rdmalab changes **only its imports** to
# `pyverbs` and runs it under the system's Python (`/usr/bin/python3`), the interpreter Debian's
# `python3-pyverbs` is built for. Here is the complete difference:

# %%
import difflib

original = labruns.PROGRAM.read_text().splitlines(keepends=True)
on_rxe = labruns.pyverbs_source().splitlines(keepends=True)
print("".join(difflib.unified_diff(original, on_rxe, "lab_ops.py (soft engine)", "lab_ops.py (pyverbs)", n=0)))

# %% [markdown]
# ## An RDMA WRITE and an RDMA READ
#
# A (on `rxe1`, or `soft0`) writes random bytes into B's registered buffer, then reads them
# back into the second half of its own buffer. How many bytes differs from one of you to the
# next: your length is in your scenario below (with the seed of the random data). Both QPs use
# path MTU 1024. The table shows each work request's completion, as `ibv_poll_cq`
# returned it, and the first bytes of the memory it changed: B's buffer after the WRITE, A's
# after the READ.

# %%
mine = lab.scenario("live.segments")
mine

# %%
run = labruns.run_scenario("write_read", backend=BACKEND, size=mine.length, seed=mine.seed)
print(run)
run.table()

# %%
w, r = run.steps
print("B's memory after the WRITE :", w["memory"]["head_hex"][:48], "...  sha256", w["memory"]["sha256"][:16])
print("A's memory after the READ  :", r["memory"]["head_hex"][:48], "...  sha256", r["memory"]["sha256"][:16])
print("the data A wrote           : sha256", run.data["data_sha256"][:16])
print(f"A: QP {run.data['a']['qpn']:#x} on {run.data['a']['device']}, B: QP {run.data['b']['qpn']:#x} "
      f"on {run.data['b']['device']}, B's rkey {run.data['b']['rkey']:#x}")

# %% [markdown]
# ## The capture, decoded
#
# These packets were captured on the cable between the two devices (or on the soft fabric). They
# are decoded by `rdmalab.capture`, and every ICRC is recomputed and compared with the one on the
# wire. (This listing leaves the payload lengths out: exercise 1 asks for one of them.)

# %%
import re

pkts = run.packets()
for p in pkts:
    print(f"{p.frame_number:3}  {re.sub(r' payload=[0-9]+', '', p.packet.summary())}   ICRC {p.packet.crc_status}")

# %%
viz.ladder(pkts, title=f"RDMA WRITE then READ, {run.where}")

# %% [markdown]
# Look at the first packet up close. The RETH carries the virtual address and the rkey that
# B gave A, and the payload is the start of the random data.

# %%
viz.hexdump(pkts[0], title=f"Frame {pkts[0].frame_number}: {pkts[0].packet.opcode_name}")

# %% [markdown]
# With `BACKEND = "rxe"`, the RETH's virtual address is a real user-space address in the
# pyverbs process. The UDP source port is derived from the sending QP, as rxe does. The IP
# Identification is nonzero and counts up; the ICRC covers it, which is why it matters to any
# implementation that wants to talk to rxe.

# %% [markdown]
# ## A wrong rkey
#
# Now A writes with an rkey that B never handed out: B's rkey with some bits flipped. rxe's
# responder looks the key up (`drivers/infiniband/sw/rxe/rxe_resp.c`, `check_rkey`), finds no
# matching memory region, and answers with a NAK: AETH syndrome type 3 (NAK), value 2,
# *Remote Access Error*. Nothing is written into B's memory.

# %%
bad = labruns.run_scenario("wrong_rkey", backend=BACKEND, size=4096, seed=5)
print(bad)
w = bad.steps[0]
print(f"A wrote {w['length']} bytes with rkey {w['rkey']:#x}; B's rkey is {w['right_rkey']:#x}")
# (A's completion and its QP's state afterwards are exercise 3's: `bad.completions`, `bad.data`)

# %%
from rdmalab.wire.ib import AETH

bad_pkts = bad.packets()
for p in bad_pkts:
    print(f"{p.frame_number:3}  {p.packet.summary()}")
nak = next(p for p in bad_pkts if p.packet.get(AETH) is not None and p.packet.get(AETH).type == 3)
viz.field_table(nak.packet.get(AETH))

# %% [markdown]
# Compare the error completion's `opcode` and `byte_len` on the two backends:

# %%
wc = bad.completions[0]
print(f"{bad.where}: A's completion has opcode {wc['opcode']} and byte_len {wc['byte_len']}")

# %% [markdown]
# The soft engine fills in the operation and length of the failed request. Kernel rxe, on Linux
# 6.1, leaves both zero (`IBV_WC_SEND`, 0). Neither is wrong: `man ibv_poll_cq` says that when
# the status is not `IBV_WC_SUCCESS`, only a few fields are valid. Code that reads anything else
# from an error completion works on one implementation and breaks on the next.

# %% [markdown]
# ## The soft engine and the kernel talking to each other
#
# The VM has a second link for this. `rxe0` sits on veth0 (10.0.0.1) in the VM's initial
# network namespace, and veth1 (10.0.0.2) sits in a namespace called `peer`. In Linux 6.1 rxe
# works only in the initial namespace, so a user-space RoCE implementation needs its own
# namespace to own UDP port 4791 on its own address. rdmalab's engine can run there on real UDP
# (`rdmalab.fabric.udp`) and speak the out-of-band exchange of rdma-core's `ibv_rc_pingpong`
# (`rdmalab pingpong`). With `BACKEND = "rxe"`, the next cell runs the kernel's `ibv_rc_pingpong`
# as the server on rxe0 and `rdmalab pingpong rc` as the client in the namespace. Both check
# the data (`--chk`). The cell shows both programs' output and the packets between them.

# %%
if BACKEND == "rxe":
    vm = labruns.shared_vm()
    both = vm.run_job("""
ibv_rc_pingpong -d $RXE0 -g $GID_INDEX -n 5 -s 2048 --chk > server.log 2>&1 &
for i in $(seq 1 100); do ss -ltn 'sport = :18515' | grep -q LISTEN && break; sleep 0.1; done
ip netns exec $PEER_NS $RDMALAB_PYTHON -m rdmalab pingpong rc -g $GID_INDEX -n 5 -s 2048 --chk $RXE0_IP
rc=$?; wait %1; src=$?
echo "--- kernel ibv_rc_pingpong (server, rxe0):"; cat server.log
exit $((rc + src))
""", capture="veth0", timeout=180)
    print(both.stdout, both.stderr, "exit status", both.rc)
    mixed = [p for p in both.packets() if p.packet.bth is not None]
    display(viz.ladder(mixed[:24], title="rdmalab's engine (10.0.0.2) <-> kernel rxe0 (10.0.0.1)"))  # noqa: F821
else:
    print("BACKEND is 'soft': set BACKEND = 'rxe' in the first cell to run the engine against the kernel.")

# %% [markdown]
# On the command line the same pair is `rdmalab vm --exec '...'`. Without the VM, on a host
# with an rxe device, it is `ibv_rc_pingpong -g 1 --chk` on one side and
# `rdmalab pingpong rc -g 1 --chk HOST` on the other (docs/live.md).

# %% [markdown]
# ## Exercises
#
# ### 1. Packets of a message
#
# Your WRITE moved the length in your scenario (`mine.length`) at path MTU 1024, and the READ
# brought it back. From the capture above (`pkts`), give the number of RDMA WRITE packets, the
# number of RDMA READ Response packets, and how many bytes of payload the WRITE's Last packet
# carries (`p.packet.payload_length`, or worked out from the length and the MTU).

# %% tags=["exercise"]
segments = {"writes": ..., "read_responses": ..., "last_payload": ...}
### BEGIN SOLUTION
segments = {"writes": sum(p.packet.opcode_name.startswith("RC RDMA WRITE") for p in pkts),
            "read_responses": sum(p.packet.opcode_name.startswith("RC RDMA READ Response") for p in pkts),
            "last_payload": next((p.packet.payload_length for p in pkts if p.packet.opcode_name == "RC RDMA WRITE Last"),
                                 None)}  # None: no capture (an rxe run on the host without root captures nothing)
### END SOLUTION
lab.check("live.segments", segments)

# %% [markdown]
# ### 2. What an error completion tells you
#
# Give the set of work-completion fields (pyverbs names, e.g. `"wr_id"`) that you may rely on
# when a completion's status is not `IBV_WC_SUCCESS`.

# %% tags=["exercise"]
reliable = ...  # {"wr_id", ...}
### BEGIN SOLUTION
reliable = {"wr_id", "status", "qp_num", "vendor_err"}
### END SOLUTION
lab.check("live.error_fields", reliable)

# %% [markdown]
# ### 3. After a wrong rkey
#
# Give `[A's completion status name, the name of A's QP state afterwards]` for the wrong-rkey run:
# the work completion is in `bad.completions`, the QP states are in `bad.data["qp_state"]`.

# %% tags=["exercise"]
after = ...  # ["IBV_WC_...", "IBV_QPS_..."]
### BEGIN SOLUTION
after = [bad.completions[0]["status"], bad.data["qp_state"]["a"]]
### END SOLUTION
lab.check("live.wrong_rkey", after)
