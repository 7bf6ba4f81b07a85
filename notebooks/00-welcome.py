# %% [markdown]
# # Welcome to the RDMA protocol lab
#
# This lab teaches Remote Direct Memory Access by showing it: every claim in these notebooks is
# made on real bytes (captures from ConnectX NICs and from the Linux `rxe` and `siw` drivers),
# on frames that rdmalab encodes and decodes byte for byte, and on a running verbs engine whose
# every packet you can watch.
#
# **How the notebooks work.** Run the cells from top to bottom (`Shift+Enter`). Each concept
# notebook ends with exercises. An exercise cell holds a placeholder `...`; replace it with your
# answer and run the cell. `lab.check(...)` then tells you whether you are right, and if not,
# *what* is wrong: which header and field, at which byte offset, and what kind of value belongs
# there. `lab.hint(...)` gives hints one at a time.
#
# | Notebook | What you will see |
# |---|---|
# | 01 From DMA to RDMA | copies and system calls of a socket transfer, counted, next to an RDMA WRITE |
# | 02 The verbs objects | device, PD, MR, CQ, QP, and the QP state machine drawn from the engine's table |
# | 03 SEND and RECEIVE | two-sided messaging, segmentation, receive queues, RNR |
# | 04 RDMA WRITE and immediate data | one-sided writes; waking the peer with 32 bits of immediate data |
# | 05 RDMA READ | pulling remote memory; READ responses |
# | 06 Atomics | compare-and-swap and fetch-and-add, 8 bytes at a time |
# | 07 One operation on four wires | native IB, RoCEv1, RoCEv2 and iWARP side by side; ICRC and CRC32c step by step |
# | 08 Reading real captures | rxe and siw captures, decoded by rdmalab and by Wireshark |
# | 09 Reliability | PSN, ACK, NAK, go-back-N and RNR under loss |
# | 10 Congestion signals | ECN marks and CNPs |
# | 11 Security | keys, protection domains, access flags, and a guessed rkey |
# | 12 The connection manager | REQ, REP, RTU decoded from a real `rping` capture |
# | 13 Live RDMA | a WRITE, a READ and a wrong rkey on the kernel's Soft-RoCE, captured and decoded |
# | 14 InfiniBand's own network | a subnet manager's sweep by directed-route SMPs, LIDs and forwarding tables; a WRITE's LRH across two switches; an incast with credits, not PFC; the stock OpenSM where installed |
# | 15 Building on RDMA | a key-value store two ways (READ-based GETs and HERD-style RPC) under a NIC cost model; a torn read |

# %% [markdown]
# ## Setup
#
# The next cell is the only one you would change to move from the simulator to a real device.
# `"soft"` is rdmalab's own verbs engine running on a simulated fabric: it needs no kernel
# module, no privileges and no network, and the same seed gives the same run every time.
# `"rxe"` runs the same cells on the Linux kernel's Soft-RoCE driver through pyverbs, in a
# small virtual machine if your machine has no rxe device (`rdmalab vm`): the verbs notebooks
# (03-06), reliability (09), security (11) and live RDMA (13), with real completions, memory and
# captured packets. The first rxe cell of a notebook boots the VM (a minute or two).

# %%
BACKEND = "soft"  # the one-line backend switch used by every notebook

from rdmalab import lab, viz

BACKEND = lab.backend(BACKEND)  # checks that the backend is available
lab.environment()

# %% [markdown]
# ## A first packet
#
# `captures/public_hw_byte_vectors.pcap` holds four frames captured on real hardware
# (ConnectX-4 and ConnectX NICs, taken from public test suites; see `captures/MANIFEST.md`).
# `rdmalab.capture.read` decodes each frame down to its RDMA headers, and a packet's
# `summary()` says in one line what it is. We print it for the first three frames; the fourth
# is yours to decode in the exercise at the end.

# %%
from rdmalab import capture

packets = list(capture.read(lab.capture_path("public_hw_byte_vectors.pcap")))
for cp in packets:
    if cp.frame_number == 4:
        print(cp.frame_number, cp.packet.encap, f"{cp.wire_length} bytes: what is it? (the exercise below asks)")
    else:
        print(cp.frame_number, cp.packet.encap, cp.packet.summary())

# %% [markdown]
# Every decoded packet can draw itself. Each header has its own colour; neighbouring fields
# alternate between a light and a dark shade, and **hovering over a byte names the field(s)
# it belongs to, with the decoded value**. Underlined bytes hold several bit fields. The
# table under the dump lists every field with its Wireshark display-filter name.

# %%
viz.hexdump(packets[0], title="Frame 1: a congestion notification packet sent by a ConnectX-4 Lx")

# %% [markdown]
# The first 14 bytes are Ethernet, then IPv4 (blue), UDP (purple) to port 4791, which is what
# makes this RoCEv2, then the InfiniBand Base Transport Header (yellow), 16 reserved bytes
# and the 4-byte invariant CRC (red). A header is a set of fields with bit widths; the same
# declaration gives the decoder, the encoder and these colours:

# %%
from rdmalab.wire import BTH

bth = packets[0].packet.bth
print(BTH.LAYOUT.spec)
viz.field_table(bth)

# %% [markdown]
# ## Exercise: your first check
#
# Frame 4 of the same capture was sent by a different NIC. **What operation is it?** Give its
# name as rdmalab spells it (for example `"RC SEND Only"`).

# %% tags=["exercise"]
answer = ...  # e.g. "RC SEND Only"
### BEGIN SOLUTION
answer = packets[3].packet.opcode_name
### END SOLUTION
lab.check("welcome.opcode", answer)

# %% [markdown]
# If you are stuck, ask for a hint: remove the `#` in the next cell and run it (run it again
# for the next hint). The hints never show by themselves.

# %%
# lab.hint("welcome.opcode")

# %% [markdown]
# All the exercises of the lab, with their ids:

# %%
lab.exercises()
