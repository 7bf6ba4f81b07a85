# %% [markdown]
# # The connection manager: decoded from a real rping, then performed
#
# Before two RC QPs can talk, each must learn the other's QP number, starting PSN, path MTU,
# and how many READs/atomics it may have outstanding: exactly the attributes of the INIT ->
# RTR -> RTS transitions (notebook 02). The **Communication Manager** (CM, IBA Vol 1 chapter
# 12) exchanges them in management datagrams (MADs of class 0x07) sent as UD messages to the
# well-known QP1, with Q_Key 0x80010000:
#
# | Message | From | Says |
# |---|---|---|
# | **REQ** | active side (client) | service ID, its QPN, a starting PSN, path, resources |
# | **REP** | passive side (server) | its QPN, a starting PSN, resources |
# | **RTU** | client | "ready to use": the server may move to RTS |
# | **DREQ / DREP** | either | disconnect |
#
# `rdma_cm` (librdmacm), which rping uses, adds an IP-style addressing layer (IBA Annex A11):
# the service ID encodes a port number, and the REQ's private data starts with an IP CM header
# holding the IP addresses.
#
# The capture below (`captures/rxe_rping.pcap`) is rping between two kernel rxe devices. In this
# notebook each of you has a port of your own for the rping server: `rping_capture()` is that
# capture with the REQ's service ID set to your port, and the REQ's ICRC computed again. rdma_cm
# puts the port in the REQ's service ID and nowhere else, so these are the packets `rping -p` with
# your port would have sent, had it drawn the same QP numbers and PSNs.

# %%
BACKEND = "soft"
from rdmalab import lab, viz
from rdmalab.lab.checkers.cm import cm_messages, rping_capture, rping_pcap

BACKEND = lab.backend(BACKEND)  # checks that the backend is available
frames = rping_capture()  # the capture of your rping
msgs = cm_messages()  # (captured packet, decoded CM message) for each CM MAD in it
for cp, m in msgs:  # (the REQ's addresses and ports are exercise 1's: decode them yourself below)
    print(f"frame {cp.frame_number:2}: CM {m.name} TID={m.tid:#x}")

# %% [markdown]
# ## Exercise 1: the service
#
# Which port does the rping server listen on? Take it from the REQ's service ID
# (`msgs[0][1].body.service_id`): the pictures below show it, so decide first.

# %% tags=["exercise"]
port = ...  # an integer
### BEGIN SOLUTION
port = msgs[0][1].body.service_id & 0xFFFF
### END SOLUTION
lab.check("cm.port", port)

# %%
viz.from_capture([cp for cp in frames if cp.frame_number <= 8 or cp.frame_number >= 40],
                 title="rping: CM handshake, the first RC messages, and the disconnect")

# %% [markdown]
# ## The REQ, byte by byte
#
# A CM MAD is always 256 bytes: a 24-byte MAD header (management class 0x07, method Send,
# attribute ID 0x0010 = REQ, a transaction ID), then the REQ's fixed fields, then private
# data. Hover over the bytes; the field table below the dump lists all of them.

# %%
req_cp, req = msgs[0]
viz.hexdump(req_cp, title="Frame 1: CM REQ in a RoCEv2 UD SEND to QP1")

# %%
b = req.body
print(f"service ID      {b.service_id:#018x}  (exercise 1: which port does it name?)")
print(f"local QPN       {b.local_qpn:#08x}")
print(f"starting PSN    {b.starting_psn}")
print(f"path MTU code   {b.path_mtu}  (IBA encoding: 1=256 ... 5=4096)")
print(f"responder res.  {b.responder_resources}, initiator depth {b.initiator_depth}")
print(f"retry count     {b.retry_count}, RNR retry {b.rnr_retry_count}")
print(f"IP CM header    from {req.src_ip}:{req.src_port} to {req.dst_ip}")

# %% [markdown]
# ## What the CM set up, seen in the traffic
#
# The connection's QP numbers and PSNs must show up in the RC packets that follow. Let's
# check which side uses which starting PSN, and that the DestQP of each side's packets is the
# QPN the other side announced.

# %%
from rdmalab.wire import OPCODES
from rdmalab.wire.net import IPv4

rep_cp, rep = msgs[1]
print("REQ (from", req_cp.packet[IPv4].describe("src") + "): local QPN", hex(req.body.local_qpn),
      "starting PSN", req.body.starting_psn)
print("REP (from", rep_cp.packet[IPv4].describe("src") + "): local QPN", hex(rep.body.local_qpn),
      "starting PSN", rep.body.starting_psn)
# Which of the two numbers the traffic uses in each direction is exercise 2: find the first
# RC request each host sends in `frames` (skip the CM datagrams to QP1, and the responses).

# %% [markdown]
# ## rdmalab and Wireshark on the CM
#
# Wireshark decodes CM MADs too. The comparison of frame 1 (notebook 08) shows where Wireshark
# 4.0 mis-reads the path fields; everything else agrees.

# %%
from rdmalab.capture.crosscheck import tshark_path
from rdmalab.viz.wireshark import side_by_side

if tshark_path():
    sbs = side_by_side(rping_pcap(), 1)
    print(sum(r[3] == "agree" for r in sbs.rows), "of", len(sbs.rows), "fields agree")
    sbs.rows = [r for r in sbs.rows if "cm" in r[0]][:40]
    display(sbs)

# %% [markdown]
# ## Performing it: a connection on the soft engine
#
# The soft devices have a connection manager of their own: QP1 answers CM MADs, and the calls
# rping makes (`rdma_resolve_addr`, `rdma_connect`, `rdma_accept`, `rdma_disconnect`) are
# `pyverbs.cmid`'s (`rdmalab.verbs.cmid`). `run_connect` makes them one at a time, a client on
# soft0 (10.0.0.1) and a server on soft1 (10.0.0.2), and writes down after each call what each
# side's QP and CM were doing. Read the table row by row: who is in RTS when?
#
# Your server listens on your port (exercise 1's), and the seed in your scenario seeds the fabric,
# from which the two sides draw their starting PSNs:

# %%
conn = lab.scenario("cm.connect")
conn

# %%
from rdmalab.lab.connect import run_connect

run = run_connect(backend=BACKEND, listen_port=conn.port, seed=conn.seed)
print("backend:", run.backend, "| CM messages on the wire:", run.names())
run.table()

# %%
run.ladder

# %% [markdown]
# ### The state machines behind the handshake
#
# Each side's CM is a table, `(state, message or timer or call) -> (action, next state)`
# (`rdmalab.verbs.engine.ibcm.TABLE`, after IBA Vol 1 12.6), and the picture below is drawn from that
# table. In blue, the client's path in the ladder above: `connect()` sends the REQ, the REP moves it
# to REP received, `establish()` sends the RTU; later `disconnect()`, the DREP and timewait. The
# server walks the row below: REQ received, `accept()` (REP sent), the RTU. Light arrows go to
# CLOSED: a REJ, the last retry's timer, a disconnect before the connection was made. A message a
# state does not take is dropped and counted, as the table says, and never moves it.
#
# On an iWARP device the same rdma_cm calls run TCP and the MPA Request and Reply instead (the
# second picture, from `rdmalab.verbs.engine.mpacm.TABLE`).

# %%
from rdmalab.viz.states import cm_state_diagram, mpa_state_diagram

display(cm_state_diagram())
mpa_state_diagram()

# %% [markdown]
# (On `BACKEND = "rxe"` the handshake above is rping's between two kernel rxe devices, read from
# the capture: the kernel keeps its QP states to itself. The rest of this part uses the soft
# engine, which can lose a chosen message and shows every state.)
#
# The REQ and the REP carry what `modify_qp` needs (QPN, starting PSN, MTU, READ/atomic
# depths); each side moves its QP to RTR and RTS with them, at a moment the step table shows
# (exercise 4 asks which side comes first). After `disconnect()` each side waits in **timewait**
# (about 2 s: 2^(19-8) ms on RoCE) so that stray packets of the old connection die before its QPN
# can be used again.
#
# ### A lost REP
#
# CM messages are UD datagrams: nothing below the CM resends them. The CM keeps a timer for
# each message it expects an answer to: the server resends its REP after 2^(20-8) = 4096 ms
# (the REQ's *local CM response timeout*), up to the REQ's *max CM retries* times.

# %%
lost = run_connect(lose=("REP",), listen_port=conn.port, seed=conn.seed)
print(lost.names())
lost.ladder

# %% [markdown]
# ### Nobody listening
#
# A REQ for a service ID no one listens on is answered at once with a **REJ**, reason 8
# (*invalid service ID*); this is what rping prints when the server is not started. Here the
# client asks for the port after yours, where nobody listens.

# %%
rej = run_connect(listen_port=conn.port, port=conn.port + 1, seed=conn.seed)
print(rej.names(), "->", rej.error)
rej.ladder

# %% [markdown]
# ### The same bytes as Linux sends, checked by Wireshark
#
# Every CM message above is a real frame. Written to a pcap (in a temporary directory), tshark
# decodes it as it decodes the kernel's (notebook 08 explains the cross-check):

# %%
from rdmalab.capture.crosscheck import crosscheck

path = run.write_pcap()
if tshark_path():
    print(crosscheck(path).text())

# %% [markdown]
# ## Exercises
#
# (Exercise 1 is near the top, before the pictures that show its answer.)
#
# ### 2. Who numbers what?
#
# The REQ and the REP each carry a starting PSN. For each host, say whose starting PSN its
# RC requests use: give `{ip: "REQ" or "REP"}`. This is the capture's answer; compare it with
# what IBA Vol 1 12.6 says each field means, and with how the Linux CM turns them into the
# QPs' `sq_psn` and `rq_psn`.

# %% tags=["exercise"]
numbering = {"10.0.0.1": ..., "10.0.0.2": ...}
### BEGIN SOLUTION
numbering = {}
for cp in frames:
    bth = cp.packet.bth
    if bth is None or bth.destqp == 1 or bth.opcode in (0x11, 0x12) or 0x0D <= bth.opcode <= 0x10:
        continue
    src = cp.packet[IPv4].describe("src")
    if src not in numbering:
        numbering[src] = "REQ" if bth.psn == req.body.starting_psn else "REP"
### END SOLUTION
lab.check("cm.psn", numbering)

# %% [markdown]
# ### 3. What the two starting PSNs become
#
# Your connection on the soft engine (`mine` below: your scenario's port and seed, the same run
# as `run` when `BACKEND` is `"soft"`) carried a REQ and a REP, each with a starting PSN
# (`mine.messages()[0].body.starting_psn`, and `[1]` for the REP). From them the CM set each
# QP's `sq_psn` (the PSN its first request carries) and `rq_psn` (the PSN it expects first).
# Give the four values of your connection.

# %%
mine = run if run.backend == "soft" else run_connect(listen_port=conn.port, seed=conn.seed)

# %% tags=["exercise"]
psns = {"client.sq_psn": ..., "client.rq_psn": ...,
        "server.sq_psn": ..., "server.rq_psn": ...}
### BEGIN SOLUTION
my_req, my_rep = (m.body for m in mine.messages()[:2])
psns = {"client.sq_psn": my_rep.starting_psn, "client.rq_psn": my_req.starting_psn,
        "server.sq_psn": my_req.starting_psn, "server.rq_psn": my_rep.starting_psn}
### END SOLUTION
lab.check("cm.req_psn", psns)

# %% [markdown]
# ### 4. Who is in RTS first?
#
# From the soft engine's step table (`run_connect().table()`): which side's QP reaches RTS first,
# `"client"` or `"server"`?

# %% tags=["exercise"]
first_to_rts = ...
### BEGIN SOLUTION
first_to_rts = next("server" if s.server_qp == "RTS" else "client" for s in run_connect().steps
                    if "RTS" in (s.client_qp, s.server_qp))
### END SOLUTION
lab.check("cm.first_rts", first_to_rts)

# %% [markdown]
# ### 5. What a service ID encodes
#
# An rdma_cm application names its service by a port space (TCP-like, UDP-like, ...) and a
# port, and rdma_cm packs both into the 64-bit service ID of its REQ (or, for a UD service, of
# its SIDR_REQ). Take apart the service ID in your scenario: which port space, which port?

# %%
sid = lab.scenario("cm.service_id")
sid

# %% tags=["exercise"]
decoded = {"port_space": ..., "port": ...}
### BEGIN SOLUTION
decoded = {"port_space": (sid.service_id >> 16) & 0xFFFF, "port": sid.service_id & 0xFFFF}
### END SOLUTION
lab.check("cm.service_id", decoded)
