# %% [markdown]
# # Reading captures: rping over rxe and siw, rdmalab and Wireshark
#
# Linux has two software RDMA devices that run on any Ethernet interface: **rxe** (Soft-RoCE,
# RoCEv2 over UDP) and **siw** (Soft-iWARP, over TCP). Because they are software, `tcpdump`
# sees their traffic, which makes them the easiest way to get real RDMA bytes. The captures
# in `captures/` were recorded with them (see `captures/MANIFEST.md`): perftest runs
# (`ib_write_bw`, `ib_read_lat`, ...) and `rping`, the rdma_cm ping-pong.
#
# The keys in those files would be the same for everyone, so the session you take apart here is
# your own: rdmalab's engine runs `rping` between two soft devices, connected by its rdma_cm, from a
# seed made from your name, and writes what crossed the wire to a pcap in `my-captures/` (open it
# in Wireshark too). The kernel's captures are there to compare with.
#
# Your scenario: the engine's seed, rping's `-S` (buffer size) and `-C` (cycles), and how many
# memory regions each device had registered before rping started. rxe numbers memory regions in
# order and puts the number in the upper 24 bits of a key (the low 8 bits are random); the engine
# does the same, so a device that has been in use hands out other keys.

# %%
BACKEND = "soft"
from rdmalab import capture, lab, viz
from rdmalab.lab.checkers.captures import my_rping

BACKEND = lab.backend(BACKEND)  # checks that the backend is available
lab.scenario("captures.rkey")

# %% [markdown]
# rping between a client on soft0 (10.0.0.1) and a server on soft1 (10.0.0.2), two soft **RoCEv2**
# devices, as `rping -s -a 10.0.0.2 -S size` and `rping -c -a 10.0.0.2 -S size -C cycles -V` would
# run it on two rxe hosts:

# %%
roce = my_rping("roce", directory="my-captures")
mine = roce.packets
print(len(mine), "frames in", roce.path)
for cp in mine[:5]:  # the rest comes after exercise 1, whose answer it shows
    print(f"{cp.frame_number:3} {(cp.timestamp - mine[0].timestamp) * 1e6:8.3f} us  {cp.packet.summary()}")

# %% [markdown]
# ## Keys on the wire
#
# Frame 4 is the client's SEND. Its 16-byte payload is rping's `struct rping_rdma_info`:
# buffer address (8 bytes), rkey (4), length (4), in network byte order. Hover over it:

# %%
viz.hexdump(mine[3], title="Frame 4: the client advertises its buffer")

# %% [markdown]
# ### Exercise 1. Find the rkey
#
# What rkey did the rping client advertise in frame 4 of your capture? Read it from the payload
# bytes above, before the frames below show it again.

# %% tags=["exercise"]
rkey = ...  # an integer
### BEGIN SOLUTION
rkey = int.from_bytes(mine[3].packet.payload[8:12], "big")
### END SOLUTION
lab.check("captures.rkey", rkey)

# %% [markdown]
# The first three frames are the connection manager's REQ, REP and RTU (notebook 12), sent as
# UD datagrams to QP1. Then rping's own protocol on the new RC connection: the client SENDs
# the address, rkey and length of its buffer; the server READs from it, and later WRITEs
# into it. As a ladder (hover over an arrow for its packet):

# %%
viz.from_capture(mine, limit=16, title="your rping over soft RoCEv2 (the first 16 frames)")

# %% [markdown]
# The server uses exactly those values in the RETH of its RDMA READ (frame 6). An rkey that
# crosses the network unencrypted is readable by anyone who can capture; notebook 11 shows
# what it allows.

# %%
viz.hexdump(mine[5], title="Frame 6: RDMA READ Request with the advertised address and rkey")

# %% [markdown]
# ### The same session on the kernel's rxe
#
# `captures/rxe_rping.pcap` is rping between two kernel rxe devices in a virtual machine,
# `-C 3 -S 64`. The same frames come in the same order; the kernel chose its own PSNs, QP
# numbers and keys, and its times are the machine's: milliseconds between frames, where the
# engine's simulated fabric (1 µs of latency per link) takes about one microsecond.

# %%
rxe = list(capture.read(lab.capture_path("rxe_rping.pcap")))
print(len(rxe), "rxe frames")
for cp in rxe[:16]:
    print(f"{cp.frame_number:3} {(cp.timestamp - rxe[0].timestamp) * 1e6:10.1f} us  {cp.packet.summary()}")

# %% [markdown]
# ## The same session over siw
#
# Over iWARP, rping's messages ride in a TCP connection. After the TCP handshake, MPA
# exchanges a Request and a Reply frame (RFC 5044 7.1) to agree on markers and CRC; from then
# on every TCP segment carries FPDUs. rdmalab reassembles the TCP stream and decodes the FPDUs
# it completes (`cp.pdus`). Here is rping again, from its own scenario, between two soft
# **iWARP** devices (siw0 and siw1, as the kernel's siw):

# %%
lab.scenario("captures.stag")

# %%
iw = my_rping("iwarp", directory="my-captures")
siw_mine = iw.packets
print(len(siw_mine), "frames in", iw.path)
for cp in siw_mine:
    if any(p.summary().startswith("RDMA Write") for p in cp.pdus):
        break  # the first RDMA Write: its STag is exercise 2
    print(f"{cp.frame_number:3}  {cp.packet.summary():40}  {' | '.join(p.summary() for p in cp.pdus)}")

# %%
fpdu_frame = next(cp for cp in siw_mine if any(p.summary().startswith("RDMA Read Request") for p in cp.pdus))
viz.hexdump(fpdu_frame, title=f"Frame {fpdu_frame.frame_number} as captured: Ethernet, IPv4, TCP, then the FPDU")

# %%
viz.hexdump(fpdu_frame.pdus[0], title="The FPDU inside it: MPA length, DDP untagged header, RDMAP Read Request, CRC32c")

# %% [markdown]
# The same frame from the kernel's siw (`captures/siw_rping.pcap`): its TCP header is 32 bytes
# long, not 20, because Linux's TCP adds 12 bytes of options to every segment (two no-ops and a
# timestamp, RFC 7323), which the engine's TCP does not send. MPA, DDP and RDMAP are the same
# layers with the kernel's own STags and addresses.

# %%
siw = list(capture.read(lab.capture_path("siw_rping.pcap")))
siw_read = next(cp for cp in siw if any(p.summary().startswith("RDMA Read Request") for p in cp.pdus))
viz.hexdump(siw_read, title=f"siw_rping.pcap frame {siw_read.frame_number}: TCP with options, then the FPDU")

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
    for path in (roce.path, lab.capture_path("siw_rping.pcap"), lab.capture_path("rxe_write_bw.pcap")):
        print(crosscheck(path).text())
else:
    print("tshark is not installed: install it (Debian/Ubuntu: apt-get install tshark) to compare.")

# %% [markdown]
# The first line is your capture (when tshark is installed): tshark decodes the engine's frames as
# it decodes the kernel's, and where it parts from rdmalab it is in the CM REQ, with known
# Wireshark defects from the table at the end of this section, whoever sent the REQ.
#
# Frame 6 of the kernel's `rxe_rping.pcap`, field by field (green: both agree):

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
# ## Recovery over iWARP is TCP's
#
# iWARP has no PSN and no NAK of its own: MPA rides on TCP, and a segment that does not arrive is
# TCP's to send again. `rdmalab analyze` counts, for each iWARP connection and direction, the TCP
# segments that carry octets seen before. In `siw_crc_rping.pcap` the server sent three segments
# of 40 bytes again (orange crosses below). The client's next ACK each time carries a D-SACK
# (RFC 2883): it had those octets already. Nothing was lost: the server's retransmission timer fired
# before the ACK came back, in a slow emulated VM.

# %%
from rdmalab.capture.analysis import analyze

rping_iwarp = analyze(lab.capture_path("siw_crc_rping.pcap"))
print(rping_iwarp.text())
viz.tcp_seq_time(rping_iwarp)

# %% [markdown]
# ## Exercises
#
# (Exercise 1 is above, next to frame 4.)
#
# ### 2. Find the STag
#
# In your siw capture (`siw_mine`, from `my_rping("iwarp")`), what STag does the first RDMA Write
# carry?

# %% tags=["exercise"]
stag = ...  # an integer
### BEGIN SOLUTION
write = next(p for cp in siw_mine for p in cp.pdus if p.summary().startswith("RDMA Write"))
stag = next(s.value for s in write.spans() if s.field == "stag")
### END SOLUTION
lab.check("captures.stag", stag)

# %% [markdown]
# ### 3. How far do they agree?
#
# A third capture of your own: rping again, with longer buffers (so each READ and WRITE spans
# several packets) and more cycles, as your scenario below says. Cross-check it with tshark: how
# many fields did the cross-check compare, and how many differ?

# %%
from rdmalab.lab.checkers.captures import my_long_rping

long_run = my_long_rping(directory="my-captures")
print(len(long_run.packets), "frames in", long_run.path)
lab.scenario("captures.agree")

# %% tags=["exercise"]
agreement = [..., ...]  # [fields compared, fields that differ]
### BEGIN SOLUTION
report = crosscheck(long_run.path)
agreement = [report.fields_compared, report.fields_compared - report.agreements]
### END SOLUTION
lab.check("captures.agree", agreement)
