# %% [markdown]
# # Reading real captures: rxe and siw, rdmalab and Wireshark
#
# Linux has two software RDMA devices that run on any Ethernet interface: **rxe** (Soft-RoCE,
# RoCEv2 over UDP) and **siw** (Soft-iWARP, over TCP). Because they are software, `tcpdump`
# sees their traffic, which makes them the easiest way to get real RDMA bytes. The captures
# in `captures/` were recorded with them (see `captures/MANIFEST.md`): perftest runs
# (`ib_write_bw`, `ib_read_lat`, ...) and `rping`, the rdma_cm ping-pong.
#
# Here the same `rping` session, over rxe and over siw.

# %%
BACKEND = "soft"
from rdmalab import capture, lab, viz

BACKEND = lab.backend(BACKEND)  # checks that the backend is available
rxe = list(capture.read(lab.capture_path("rxe_rping.pcap")))
siw = list(capture.read(lab.capture_path("siw_rping.pcap")))
print(len(rxe), "rxe frames,", len(siw), "siw frames")
for cp in rxe[:5]:  # the rest comes after exercise 1, whose answer it shows
    print(f"{cp.frame_number:3} {cp.timestamp - rxe[0].timestamp:8.4f} s  {cp.packet.summary()}")

# %% [markdown]
# ## Keys on the wire
#
# Frame 4 is the client's SEND. Its 16-byte payload is rping's `struct rping_rdma_info`:
# buffer address (8 bytes), rkey (4), length (4), in network byte order. Hover over it:

# %%
viz.hexdump(rxe[3], title="Frame 4: the client advertises its buffer")

# %% [markdown]
# ### Exercise 1. Find the rkey
#
# What rkey did the rping client advertise in frame 4? Read it from the payload bytes above,
# before the frames below show it again.

# %% tags=["exercise"]
rkey = ...  # an integer
### BEGIN SOLUTION
rkey = int.from_bytes(rxe[3].packet.payload[8:12], "big")
### END SOLUTION
lab.check("captures.rkey", rkey)

# %% [markdown]
# The first three frames are the connection manager's REQ, REP and RTU (notebook 12), sent as
# UD datagrams to QP1. Then rping's own protocol on the new RC connection: the client SENDs
# the address, rkey and length of its buffer; the server READs from it, and later WRITEs
# into it. As a ladder (hover over an arrow for its packet):

# %%
viz.from_capture(rxe, limit=16, title="rping over rxe (the first 16 frames)")

# %% [markdown]
# The server uses exactly those values in the RETH of its RDMA READ (frame 6). An rkey that
# crosses the network unencrypted is readable by anyone who can capture; notebook 11 shows
# what it allows.

# %%
viz.hexdump(rxe[5], title="Frame 6: RDMA READ Request with the advertised address and rkey")

# %% [markdown]
# ## The same session over siw
#
# Over iWARP, rping's messages ride in a TCP connection. After the TCP handshake, MPA
# exchanges a Request and a Reply frame (RFC 5044 7.1) to agree on markers and CRC; from then
# on every TCP segment carries FPDUs. rdmalab reassembles the TCP stream and decodes the FPDUs
# it completes (`cp.pdus`).

# %%
for cp in siw[:12]:  # up to the first RDMA Write, whose STag is exercise 2
    print(f"{cp.frame_number:3}  {cp.packet.summary():40}  {' | '.join(p.summary() for p in cp.pdus)}")

# %%
fpdu_frame = next(cp for cp in siw if any(p.summary().startswith("RDMA Read Request") for p in cp.pdus))
viz.hexdump(fpdu_frame, title=f"Frame {fpdu_frame.frame_number} as captured: Ethernet, IPv4, TCP, then the FPDU")

# %%
viz.hexdump(fpdu_frame.pdus[0], title="The FPDU inside it: MPA length, DDP untagged header, RDMAP Read Request, CRC32c")

# %% [markdown]
# ## rdmalab and Wireshark, side by side
#
# Wireshark's dissectors are an independent oracle: rdmalab's cross-check runs `tshark` on the
# same file and compares every field both decode, value and byte offset. Where they differ,
# the difference is either a known Wireshark 4.0 defect (a table in
# `rdmalab.capture.defects`, with the specification's reading) or a bug to fix.

# %%
from rdmalab.capture.crosscheck import crosscheck, tshark_path

if tshark_path():
    for name in ("siw_rping.pcap", "rxe_write_bw.pcap"):  # rxe_rping.pcap is exercise 3's
        print(crosscheck(lab.capture_path(name)).text())
else:
    print("tshark is not installed: install it (Debian/Ubuntu: apt-get install tshark) to compare.")

# %% [markdown]
# Frame 6, field by field (green: both agree):

# %%
from rdmalab.viz.wireshark import defect_table, side_by_side

side_by_side(lab.capture_path("rxe_rping.pcap"), 6) if tshark_path() else "tshark not installed"

# %% [markdown]
# Frame 1, the CM REQ, is where they part: Wireshark 4.0 mis-reads the path's flow label and
# packet rate, and shows one reserved field twice. The yellow rows name the defect:

# %%
if tshark_path():
    sbs = side_by_side(lab.capture_path("rxe_rping.pcap"), 1)
    sbs.rows = [r for r in sbs.rows if r[3] != "agree"]
    display(sbs)

# %% [markdown]
# All the known Wireshark 4.0 defects rdmalab accounts for:

# %%
defect_table()

# %% [markdown]
# ## A capture with loss
#
# `rxe_send_bw_loss.pcap` was recorded while the client's NIC dropped 10 % of its packets
# (`tc netem`). The capture was taken on the receiver, so the lost packets never appear; what
# does appear are the gaps, the NAKs (red triangles) and the go-back-N retransmissions
# (orange crosses): the same shapes as the engine's runs in notebook 09.

# %%
loss = list(capture.read(lab.capture_path("rxe_send_bw_loss.pcap")))
viz.psn_time(loss, title="rxe_send_bw_loss.pcap: PSN over time")

# %% [markdown]
# And the payload throughput over the same capture, per sender, in time windows: the dips are
# the recoveries.

# %%
viz.throughput(loss, title="rxe_send_bw_loss.pcap: payload throughput")

# %% [markdown]
# ## Exercises
#
# (Exercise 1 is above, next to frame 4.)
#
# ### 2. Find the STag
#
# In `siw_rping.pcap`, what STag does the first RDMA Write carry?

# %% tags=["exercise"]
stag = ...  # an integer
### BEGIN SOLUTION
write = next(p for cp in siw for p in cp.pdus if p.summary().startswith("RDMA Write"))
stag = next(s.value for s in write.spans() if s.field == "stag")
### END SOLUTION
lab.check("captures.stag", stag)

# %% [markdown]
# ### 3. How far do they agree?
#
# For `rxe_rping.pcap`, how many fields did the cross-check compare, and how many differ?

# %% tags=["exercise"]
agreement = [..., ...]  # [fields compared, fields that differ]
### BEGIN SOLUTION
report = crosscheck(lab.capture_path("rxe_rping.pcap"))
agreement = [report.fields_compared, report.fields_compared - report.agreements]
### END SOLUTION
lab.check("captures.agree", agreement)
