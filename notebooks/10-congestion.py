# %% [markdown]
# # Congestion signals: ECN marks and CNPs
#
# RDMA transports were built for lossless fabrics: a dropped packet costs a retransmission
# timeout or a go-back-N (notebook 09), so RoCE networks try hard not to drop. They signal
# congestion instead, in two steps (RoCEv2 Annex A17.9; the DCQCN scheme that NICs implement
# builds on them):
#
# 1. A congested **switch marks** a passing packet: it sets the 2-bit ECN field of the IP
#    header to *Congestion Experienced* (RFC 3168). On native InfiniBand it sets the FECN bit
#    in the BTH instead.
# 2. The **receiver** of a marked packet (the *notification point*) sends a **Congestion
#    Notification Packet** (CNP, BTH opcode `0x81`) back to the sender's QP, which slows down.
#
# This notebook shows both on real bytes.

# %%
BACKEND = "soft"
from rdmalab import capture, lab, viz
from rdmalab.wire import BTH, CNPPad, decode_ethernet, encode_rocev2
from rdmalab.wire.net import IPv4

BACKEND = lab.backend(BACKEND)  # checks that the backend is available

# %% [markdown]
# ## The ECN field
#
# The IPv4 TOS byte (byte 1 of the IP header) holds a 6-bit DSCP and the 2-bit ECN field
# (RFC 3168 section 5): `00` not ECN-capable, `10` ECT(0) and `01` ECT(1) for an
# ECN-capable sender, `11` CE, Congestion Experienced. Hover over byte 15 of this WRITE:

# %%
from rdmalab.lab.checkers.congestion import data_frame

write = decode_ethernet(data_frame())
viz.hexdump(write, highlight=[(15, 16, "TOS: DSCP + ECN")], fields=False)

# %% [markdown]
# ## Marking a packet does not break its ICRC
#
# A switch that marks a packet rewrites the TOS byte and so must recompute the IPv4 header
# checksum, but it cannot recompute the ICRC: it is not an RDMA endpoint. That is exactly why
# the ICRC treats the TOS, TTL and checksum as variant fields (notebook 07). Watch: we mark
# the WRITE CE the way a switch would, and the receiver's ICRC check still passes.

# %%
ip = write[IPv4]
marked_ip = ip.replace(ecn=3).with_checksum()
marked = write.data[:14] + marked_ip.encode() + write.data[34:]
m = decode_ethernet(marked)
print("ECN:", ip.ecn, "->", m[IPv4].ecn, "| IP checksum:", hex(ip.checksum), "->", hex(m[IPv4].checksum),
      "| ICRC:", m.crc_status)
viz.hexdump(m, highlight=[(i, i + 1, "changed by the switch") for i in range(len(marked)) if marked[i] != write.data[i]],
            fields=False)

# %% [markdown]
# Change one bit of a field that is *not* variant, say the destination QP, and the receiver
# drops the packet:

# %%
tampered = bytearray(marked)
tampered[49] ^= 0x01  # low byte of BTH.destqp
t = decode_ethernet(bytes(tampered), lenient=True)
print("ICRC:", t.crc_status, "| on the wire", t.crc.to_bytes(4, "little").hex(), "| expected",
      t.crc_expected.to_bytes(4, "little").hex())

# %% [markdown]
# ## A CNP sent by a real NIC
#
# Frame 1 of the hardware capture is a CNP sent by a **ConnectX-4 Lx**. Its BTH has opcode
# `0x81`, the BECN bit set, and destination QP `0x000118`: the QP of the sender whose packets
# were marked. The PSN is zero and 16 reserved bytes follow (Annex A17.9.3).

# %%
hw = list(capture.read(lab.capture_path("public_hw_byte_vectors.pcap")))
cnp = hw[0].packet
print(cnp.summary())
print("IPv4 DSCP", cnp[IPv4].dscp, "ECN", cnp[IPv4].ecn)
viz.hexdump(cnp)

# %% [markdown]
# The NIC sent its CNP with DSCP 48 (a high-priority class, so the signal is not itself
# stuck behind the congestion) and ECN `10`, ECT(0). rdmalab can build the same packet with
# the same addresses. The fields that still differ are ones each sender picks freely (the IP
# identification, the UDP source port, which this NIC leaves at 0) and the two checksums that
# follow from them:

# %%
ours = decode_ethernet(encode_rocev2(BTH(opcode=0x81, destqp=0x118, becn=1), [CNPPad()],
                                     src_ip=cnp[IPv4].describe("src"), dst_ip=cnp[IPv4].describe("dst"),
                                     dscp=48, ecn=2))
theirs = {(s.layer, s.field): s.text for s in cnp.spans()}
for s in ours.spans():
    if s.layer not in ("Ethernet",) and theirs.get((s.layer, s.field)) != s.text:
        print(f"{s.layer}.{s.field:<15} ConnectX: {theirs.get((s.layer, s.field))!s:<22} rdmalab: {s.text}")

# %% [markdown]
# ## FECN and BECN in the BTH
#
# Byte 4 of the BTH carries FECN (bit 7) and BECN (bit 6), InfiniBand's own congestion bits.
# Wireshark 4.0 shows this whole byte as "reserved"; rdmalab decodes the two bits. Frame 20 of
# the synthetic capture is a WRITE with FECN set, as a native IB switch would mark it:

# %%
syn = list(capture.read(lab.capture_path("synthetic_rocev2.pcap")))
f20 = syn[19].packet
print(f20.summary())
viz.field_table(f20[BTH])

# %% [markdown]
# What the sender does with a CNP (DCQCN cuts its rate, then recovers it step by step) is
# a NIC algorithm outside the transport specification; rdmalab's engine does not model rate
# control.
#
# ## Exercises
#
# ### 1. Be the switch
#
# Mark `data_frame()` Congestion Experienced and return the whole frame, as a switch would
# forward it. The checker decodes your frame and names any field you changed by mistake.

# %% tags=["exercise"]
frame = data_frame()
marked_frame = ...  # bytes
### BEGIN SOLUTION
pkt = decode_ethernet(frame)
new_ip = pkt[IPv4].replace(ecn=3).with_checksum()
marked_frame = frame[:14] + new_ip.encode() + frame[34:]
### END SOLUTION
lab.check("congestion.ce", marked_frame)

# %% [markdown]
# ### 2. Be the notification point
#
# The marked WRITE arrived at QP `0x11` on 192.168.1.2. Its sender is QP `0x000022` on
# 192.168.1.1. Build the complete CNP frame that 192.168.1.2 sends back.

# %% tags=["exercise"]
my_cnp = ...  # bytes
### BEGIN SOLUTION
my_cnp = encode_rocev2(BTH(opcode=0x81, destqp=0x22, becn=1), [CNPPad()],
                       src_ip="192.168.1.2", dst_ip="192.168.1.1")
### END SOLUTION
lab.check("congestion.cnp", my_cnp)
