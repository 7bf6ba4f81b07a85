# %% [markdown]
# # One operation on four wires
#
# InfiniBand defined the RDMA transport: the Base Transport Header (BTH), the extended headers
# (RETH, AETH, ...) and the invariant CRC. RoCE carries exactly that transport over Ethernet:
# RoCEv1 under a Global Route Header with EtherType 0x8915 (IBA Annex A16), RoCEv2 inside
# UDP/IP to port 4791 (Annex A17). iWARP is a different stack with the same ideas: RDMAP
# (RFC 5040) over DDP (RFC 5041) over MPA (RFC 5044) over TCP.
#
# Here is **one RDMA WRITE** of 12 bytes to the same remote address and key, encoded by
# rdmalab for all four, and decoded back.

# %%
BACKEND = "soft"
from rdmalab import lab, viz
from rdmalab.lab.samples import one_write

BACKEND = lab.backend(BACKEND)  # checks that the backend is available
wires = one_write(b"Hello, RDMA!")
viz.compare_wires(wires)

# %% [markdown]
# The payload is the same 12 bytes everywhere; what differs is what gets it there.
# Native IB needs only an 8-byte Local Route Header inside a subnet; RoCEv1 replaces it with
# Ethernet plus a 40-byte GRH (shaped like IPv6); RoCEv2 uses IPv4 (or IPv6) and UDP instead,
# so it can be routed; iWARP replaces the whole InfiniBand transport with TCP and three thin
# layers. Hover over the bytes below to compare field by field.

# %%
for w in wires:
    display(viz.wire_hexdump(w, fields=False))

# %% [markdown]
# The remote address and key are the same numbers on every wire but sit in different
# headers: the RETH's `va` and `r_key` on InfiniBand and RoCE, the DDP tagged header's
# `to` (tagged offset) and `stag` (steering tag) on iWARP.

# %%
for w in wires:
    fields = {f"{s.layer}.{s.field}": s.text for s in w.packet.spans()
              if s.field in ("va", "r_key", "stag", "to", "dma_length")}
    print(f"{w.name:>10}: {fields}")

# %% [markdown]
# ## The invariant CRC, step by step
#
# InfiniBand protects a packet twice: the **VCRC** (CRC-16) is recomputed on every link, and the
# **ICRC** (CRC-32) goes end to end (IBA Vol 1 7.8). A router or switch may change some
# fields in flight (it decrements TTL, re-marks the traffic class, sets ECN), so those
# *variant* fields are counted as all ones in the ICRC. RoCE keeps the ICRC: RoCEv2 masks
# the IP TOS, TTL and header checksum, the UDP checksum and BTH byte 4 (FECN/BECN), and puts
# 8 bytes of `0xff` in front where the LRH would be (Annex A17.3.3).
#
# Here is that computation on a frame sent by a **ConnectX-4 Lx NIC**. `viz.icrc_steps`
# looks up each variant field in the decoder's field spans, sets its bits to one, runs
# CRC-32, and compares with the 4 bytes the NIC sent and with `rdmalab.wire.crc`.

# %%
from rdmalab import capture

hw = list(capture.read(lab.capture_path("public_hw_byte_vectors.pcap")))
viz.icrc_steps(hw[0])

# %% [markdown]
# The same walk for RoCEv1 (a frame from the scapy test suite captured on a ConnectX NIC):
# the coverage starts at the GRH, and the GRH's traffic class, flow label and hop limit
# are masked instead.

# %%
viz.icrc_steps(hw[1])

# %% [markdown]
# And native IB, where the real LRH is covered (with its virtual lane masked) and a
# VCRC follows. That is the packet without a GRH; when a GRH follows the LRH (LNH 3, a packet
# that may cross a router, which rebuilds the LRH), all 8 LRH bytes count as ones, plus the
# GRH's traffic class, flow label and hop limit as in RoCEv1 (`rdmalab.wire.crc.icrc_rule_ib`;
# the IPoIB multicast packets of `captures/hw_ib_connectx_erf.pcap`, from ConnectX HCAs, verify so):

# %%
viz.icrc_steps(wires[0].packet)

# %% [markdown]
# ## iWARP's CRC32c
#
# iWARP does not need variant-field masks: TCP delivers the bytes end to end, and MPA adds a
# CRC32c (the Castagnoli polynomial, RFC 5044 4.4 and RFC 3385) over the whole FPDU because
# TCP's 16-bit checksum is too weak for storage traffic.

# %%
viz.crc32c_steps(wires[3].packet)

# %% [markdown]
# The same check on an FPDU that Linux **siw** sent, with CRCs negotiated in the MPA
# Request/Reply (`captures/siw_crc_rping.pcap`):

# %%
siw_fpdus = [p for cp in capture.read(lab.capture_path("siw_crc_rping.pcap")) for p in cp.pdus
             if p.crc_kind == "crc32c" and p.crc_expected is not None]
print(siw_fpdus[0].summary())
viz.crc32c_steps(siw_fpdus[0])

# %% [markdown]
# ## Try it: the packet builder
#
# In JupyterLab, this widget re-encodes the frame and recomputes the ICRC whenever you change
# a field: set ECN to CE or flip FECN and watch the ICRC stay the same; change the PSN and
# watch it change. (In the book, the static render below shows its starting state.)

# %% tags=["widget"]
from rdmalab.viz.widgets import packet_builder

packet_builder()

# %%
from rdmalab.viz.widgets import build_frame

built = build_frame(0x0A, psn=7, payload=b"hello", ecn=3)
display(viz.hexdump(built, title=built.summary(), fields=False))
print(viz.icrc_steps(built))

# %% [markdown]
# ## The same WRITE and READ, run on two wires
#
# Everything above was one frame built by hand. Now the engine *runs* an RDMA WRITE of 3000
# bytes and an RDMA READ of the same bytes back, twice: between two soft **RoCEv2** devices (RC
# QPs, path MTU 1024 as rxe uses on a 1500-byte Ethernet), and between two soft **iWARP**
# devices that rdma_cm connected the iWARP way: a TCP connection to the rdma_cm port, then the
# MPA Request and Reply (revision 2, with the IRD/ORD words), as Linux siw does. Both run on the
# simulated fabric; each run is written to a pcap and read back with `capture.read`, as
# `rdmalab decode` reads it (tshark decodes both files the same way).

# %%
from rdmalab.lab.twowires import side_by_side, write_and_read

roce_run, iwarp_run = write_and_read(3000)
side_by_side(roce_run, iwarp_run)

# %% [markdown]
# Read the two columns against each other:
#
# * **Setting up.** RoCEv2's QPs were connected before the first frame (here by hand; rdma_cm
#   would send CM MADs). iWARP spends five frames first: TCP's handshake, then the MPA Request
#   and Reply, which carry the IRD/ORD and whether FPDUs will have a CRC32c.
# * **Cutting the message.** RoCEv2 cuts the WRITE by the path MTU into FIRST/MIDDLE/LAST
#   packets with consecutive PSNs; iWARP cuts it into FPDUs that each fit one TCP segment, and
#   every segment says where its bytes go (STag and tagged offset), so each can be placed on
#   its own.
# * **Acknowledging.** RoCEv2's responder acknowledges *packets* by PSN (one ACK covers the
#   WRITE; the READ responses carry an AETH themselves). iWARP's RDMAP and DDP never acknowledge
#   anything: the ACKs are TCP's, cumulative counts of *bytes* of the stream, sent every second
#   segment or after the delayed-ACK timer (40 ms here, at the end). A WRITE completes on the
#   iWARP requester as soon as TCP has its bytes, as it does on siw.
# * **Cost.** iWARP carries 54 bytes of Ethernet/IPv4/TCP per segment plus its own layers (exercise
#   5), against RoCEv2's 58 bytes of Ethernet/IPv4/UDP/BTH/ICRC plus a RETH on the first packet; it
#   moves more frames, mostly the ACKs.

# %% [markdown]
# ### Who repairs a loss
#
# On RoCEv2 the RC transport repairs a loss itself (notebook 09: the responder NAKs the gap in
# the PSNs, the requester goes back). On iWARP, RDMAP and DDP never learn of it: TCP does. Here
# the fabric loses the second segment of a 4000-byte WRITE (its second FPDU). The responder's
# TCP acknowledges the bytes before the gap at once and keeps nothing after it (this TCP model
# has no out-of-order queue); when the retransmission timer expires (200 ms, Linux's minimum) the
# requester sends everything from the gap again, and one ACK covers it all. The capture was
# taken where frames are sent, so the lost segment is in it too (frame 7).

# %%
from rdmalab.lab.twowires import iwarp_with_a_loss

print(iwarp_with_a_loss(4000))

# %% [markdown]
# ## Exercises
#
# ### 1. Build a BTH by hand
#
# Build the 12 bytes of the BTH your scenario below describes: its opcode (the operation is named
# next to it), the **Solicited Event** bit `se`, the pad count `padcnt`, the partition key `p_key`,
# the destination QP `destqp`, the **AckReq** bit `ackreq` and the `psn`. Everything else (MigReq,
# TVer, FECN, BECN and the reserved bits) is zero. Use plain Python (`bytes`, `int.to_bytes`), not
# `rdmalab.wire.BTH`. Each student's scenario is their own, so the values are read from
# `bth_task`, not written out here.

# %%
bth_task = lab.scenario("wires.bth")
bth_task

# %% tags=["exercise"]
my_bth = ...  # 12 bytes
### BEGIN SOLUTION
my_bth = (bytes([bth_task.opcode, bth_task.se << 7 | bth_task.padcnt << 4]) + bth_task.p_key.to_bytes(2, "big")
          + bytes([0]) + bth_task.destqp.to_bytes(3, "big")
          + bytes([bth_task.ackreq << 7]) + bth_task.psn.to_bytes(3, "big"))
### END SOLUTION
lab.check("wires.bth", my_bth)

# %% [markdown]
# ### 2. Compute an ICRC by hand
#
# `icrc_frame()` is the ConnectX-4 CNP above, sent this time to the QP of your scenario (below),
# with its ICRC replaced by zeros (so the walk-through above does not give you the answer).
# Compute the ICRC with `zlib.crc32` and byte manipulation only, and give it as the 4 bytes that go
# on the wire (or as the integer). The checker recognises the usual slips and names them.

# %%
lab.scenario("wires.icrc")

# %% tags=["exercise"]
import zlib

from rdmalab.lab.checkers.wires import icrc_frame

frame = icrc_frame()
my_icrc = ...  # 4 bytes, as on the wire
### BEGIN SOLUTION
b = bytearray(frame[14:-4])  # IPv4 header .. pad
b[1] = 0xFF  # TOS (DSCP + ECN)
b[8] = 0xFF  # TTL
b[10:12] = b"\xff\xff"  # IPv4 header checksum
b[26:28] = b"\xff\xff"  # UDP checksum
b[32] = 0xFF  # BTH byte 4: FECN, BECN, reserved
my_icrc = zlib.crc32(b"\xff" * 8 + bytes(b)).to_bytes(4, "little")
### END SOLUTION
lab.check("wires.icrc", my_icrc)

# %% [markdown]
# ### 3. Which FPDUs are damaged?
#
# The next cell has the engine record an iWARP conversation between two soft iWARP devices that
# negotiated CRC32c in their MPA Request and Reply: a SEND, an RDMA WRITE and an RDMA READ of the
# sizes in your scenario. Then some FPDUs were damaged in the file: in each, two 16-bit words of
# the data traded places. TCP's checksum adds 16-bit words (RFC 1071), and a sum does not change
# when two of its terms trade places, so the receiver's TCP would take these segments as they are.
# The capture is written to `my-captures/iwarp-crc.pcap` (Wireshark opens it too).
#
# Give the list of the FPDUs (numbered from 0 in capture order, as in `fpdus`) whose CRC32c does
# **not** match their bytes. Compute the CRC yourself with `rdmalab.wire.crc.crc32c` on each FPDU's
# bytes (`pdu.data[:pdu.crc_offset]`) and compare with the 4 bytes after them.

# %%
lab.scenario("wires.crc32c")

# %% tags=["exercise"]
from rdmalab.lab.checkers.wires import crc_capture
from rdmalab.wire.crc import crc32c

crc_pcap = crc_capture("my-captures").path
fpdus = [p for cp in capture.read(crc_pcap) for p in cp.pdus if p.crc_kind == "crc32c"]
print(len(fpdus), "FPDUs in", crc_pcap)
bad = ...  # a list of indexes
### BEGIN SOLUTION
bad = [i for i, p in enumerate(fpdus)
       if crc32c(p.data[:p.crc_offset]) != int.from_bytes(p.data[p.crc_offset:p.crc_offset + 4], "little")]
### END SOLUTION
lab.check("wires.crc32c", bad)

# %% [markdown]
# ### 4. Which wire is which?
#
# Four frames, one per encapsulation, in a secret order. Name each one: `"IB"`, `"RoCEv1"`,
# `"RoCEv2"` or `"iWARP"`. Look at the first bytes only, not at a decoder.

# %% tags=["exercise"]
from rdmalab.lab.samples import mystery_frames

for i, (_, f) in enumerate(mystery_frames()):
    print(i, f[:48].hex(" "))
names = [..., ..., ..., ...]
### BEGIN SOLUTION
names = []
for _, f in mystery_frames():
    ethertype = int.from_bytes(f[12:14], "big")
    if ethertype == 0x8915:
        names.append("RoCEv1")
    elif ethertype == 0x0800:
        names.append("RoCEv2" if f[23] == 17 else "iWARP")  # IPv4 protocol: 17 UDP, 6 TCP
    else:
        names.append("IB")
### END SOLUTION
lab.check("wires.which", names)

# %% [markdown]
# ### 5. What iWARP adds to each FPDU
#
# In `iwarp_run` (the iWARP column of the table above), each RDMA Write FPDU filled one TCP
# segment. How many bytes of each Write FPDU are iWARP's own, that is MPA's, DDP's and RDMAP's
# (length field, headers, pad, CRC), and not the data it places? Compute it from
# `iwarp_run.packets`: each `cp.pdus` holds the PDUs that completed in that frame.

# %% tags=["exercise"]
writes = [p for cp in iwarp_run.packets for p in cp.pdus if p.info.startswith("RDMA Write")]
overhead = ...  # bytes per FPDU
### BEGIN SOLUTION
overhead = len(writes[0].data) - len(writes[0].payload)
### END SOLUTION
lab.check("wires.iwarp_overhead", overhead)
