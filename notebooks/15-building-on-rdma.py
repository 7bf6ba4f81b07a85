# %% [markdown]
# # Building on RDMA: a key-value store, two ways
#
# The earlier notebooks took every operation apart. This one asks what engineers build with them,
# and why they pick one verb over another. The classic case is a **key-value store**: a hash table
# in one machine's memory, and clients that GET and PUT values by key. Papers answered it two ways:
#
# * **Pilaf** (Mitchell, Geng, Li, USENIX ATC 2013) and **FaRM** (Dragojević et al., NSDI 2014):
#   the client *reads the table itself* with one-sided RDMA READs. The server's CPU does nothing
#   for a GET. But a GET may need several READs (one per bucket it looks at), and a READ can land
#   while the server is in the middle of writing a bucket.
# * **HERD** (Kalia, Kaminsky, Andersen, SIGCOMM 2014): the client RDMA-WRITEs its request into a
#   region the server's CPU polls; the server looks the key up in its own memory and answers with
#   a SEND. Always one round trip, plus the server's CPU time.
#
# Everything here runs on the simulated fabric (1 µs each way, 100 Gbit/s) with its **NIC model**
# on: each device is a ConnectX-3 on PCIe 3.0 (`rdmalab.verbs.engine.nicmodel`, `docs/nic-model.md`),
# so a post costs a doorbell, a WQE is fetched by DMA, a READ's data is DMA-read at the responder,
# a completion is DMA-written, and a NIC whose caches miss waits for a PCIe round trip. Times are
# the fabric's virtual nanoseconds. The store is `rdmalab.tools.kv`; you will write its GET yourself.

# %%
from rdmalab import lab
from rdmalab.lab.checkers.kv import NIC
from rdmalab.tools.kv import KEY_SIZE, Layout, key_at_distance, simulated
from rdmalab.verbs.trace import Trace
from rdmalab.viz.ladder import from_trace

st = simulated(layout=Layout(buckets=64), nic=NIC)  # a server and a client, each on its own device
server, client, fabric = st.server, st.client, st.fabric
lay = server.layout
print(f"{lay.buckets} buckets of {lay.bucket_size} bytes: version 8 | key {KEY_SIZE} | value {lay.value_size} | crc32 4")

# %% [markdown]
# ## The table
#
# The server registers one memory region for the table (`REMOTE_READ`, so clients may read it) and
# gives each client its address and rkey. A bucket holds a **version** (0: empty), the **key**,
# the **value** and a **CRC32** over the bytes before it. A key's search starts at its *home*
# bucket (a hash of the key) and goes on bucket by bucket (*linear probing*) until it finds the key
# or an empty bucket.

# %%
for name in (b"alice", b"bob", b"carol"):
    server.put_local(name, b"the value of " + name)   # the server's CPU writes its own memory
home = lay.home(b"alice")
raw = server.table.read(lay.bucket_size, lay.offset(home))
print(f"alice's home is bucket {home}; its bytes:")
for i in range(0, len(raw), 16):
    print(f"  {i:3}: {raw[i:i + 16].hex(' ')}")
print(lay.decode(raw, home))

# %% [markdown]
# ## A GET by READs
#
# `client.get_read(key)` is the store's own GET by READs: one READ of the home bucket; the key is
# there, so that is the whole GET. The ladder shows the one READ Request and its response, and
# nothing from the server's CPU: no completion on the server at all. (This first READ also pays
# the NICs' cold caches: the QP context and the memory translations are fetched over PCIe once.)

# %%
t0 = len(fabric.trace)
got = client.get_read(b"alice")
print(got)
from_trace(Trace(list(fabric.trace)[t0:]), nodes=["client", "server"], title="GET by one READ")

# %% [markdown]
# When other keys took the home bucket first, the GET reads on: a key stored *d* buckets past
# its home costs *d* + 1 READs, one after the other, since the client learns only from each
# bucket whether to read the next. `key_at_distance(layout, home, d)` gives *d* + 1 keys with the
# same home; stored in order, the last lands *d* buckets past it (from a home with five empty
# buckets after it, so that no other key is in the way).

# %%
free = next(h for h in range(lay.buckets) if all(server.bucket((h + i) % lay.buckets).empty for i in range(5)))
crowd = key_at_distance(lay, free, 4, prefix=b"crowd")
for k in crowd:
    server.put_local(k, k)
for d, k in enumerate(crowd):
    g = client.get_read(k)
    print(f"{k!r:10} {d} buckets past home: {g.round_trips} READs, {g.ns} ns")

# %% [markdown]
# ## A GET by RPC
#
# The same GET, HERD's way. Each client owns a slot in a *request region* at the server
# (`REMOTE_WRITE`). The client WRITEs its request there (RC, inline, unsignaled: nothing to wait
# for); the server's CPU polls the slots every `poll_ns` (100 ns), serves a request in
# `service_ns` (200 ns here: a parameter, not a measurement) and answers with a **UD SEND**.
#
# Why a SEND for the answer: the client's CPU must learn the answer has come, and a SEND makes a
# completion at the client, a WRITE does not. Why UD: one datagram QP at the server answers every
# client, so the server's NIC keeps no connected QP per client for the responses (HERD's choice,
# for scaling to many clients).

# %%
server.start()    # the server's CPU starts polling its request region
t0 = len(fabric.trace)
got = client.get_rpc(b"alice")
print(got)
from_trace(Trace(list(fabric.trace)[t0:]), nodes=["client", "server"], title="GET by RPC: WRITE, then UD SEND")

# %% [markdown]
# The RPC GET costs the same round trip whatever the probe sequence: the server follows it in its
# own memory. PUTs go the same way (`client.put_rpc(key, value)`).

# %%
for d, k in enumerate(crowd):
    print(f"{k!r:10} {d} buckets past home: RPC {client.get_rpc(k).ns} ns")
client.put_rpc(b"dave", b"written by RPC")
print(client.get_read(b"dave").value, client.get_rpc(b"dave").value)
server.stop()

# %% [markdown]
# ## A concurrent writer
#
# A READ takes the bucket's bytes as they are in the server's memory when the request arrives. If
# the server's CPU is writing that bucket at that moment, the READ brings part new, part old bytes:
# a **torn read**. `server.put_local(key, value, at_ns=..., split_ns=...)` writes the bucket in two
# halves `split_ns` apart, so that a READ can land between them. Here the halves land at 1 µs and
# 6 µs, and a GET starts at once, on a fresh store.

# %%
demo = simulated(nic=NIC)
demo.server.put_local(b"hot", b"o" * 36)
demo.server.put_local(b"hot", b"n" * 36, at_ns=1000, split_ns=5000)
unchecked = demo.client.get_read(b"hot", verify=False)
landed = [ev.time_ns for ev in demo.fabric.trace if ev.node == "server" and ev.kind == "received"]
print(f"the READ reached the server at {landed[0]} ns")
print("CRC not checked:", unchecked.value, "version", unchecked.version)

demo = simulated(nic=NIC)
demo.server.put_local(b"hot", b"o" * 36)
demo.server.put_local(b"hot", b"n" * 36, at_ns=1000, split_ns=5000)
checked = demo.client.get_read(b"hot")
print("CRC checked:    ", checked.value, "version", checked.version, "READs", checked.round_trips,
      "retries", checked.retries)

# %% [markdown]
# Without the check, the GET returned a value nobody ever stored, under the new version. With it,
# the first READ's CRC did not match, the client read the bucket again, and the second READ found it
# whole. That is Pilaf's *self-verifying* bucket. (FaRM puts a version in every cache line instead;
# HERD never has the problem, since only the server's CPU touches its table.)

# %% [markdown]
# ## Exercises
#
# ### 1. Write the GET by READs
#
# Complete `get_by_reads(pair, table, key)`. `table.layout` is the table's `Layout` (`home(key)`,
# `probe(key)`: every bucket in search order, `bucket_size`, `decode(raw, index)`: a `Bucket` with
# `version`, `key`, `value`, `crc`), and `table.read(first, count)` does **one RDMA READ** of
# `count` consecutive buckets and returns their raw bytes. Check each bucket's CRC yourself
# (`zlib.crc32` of all but its last 4 bytes against those 4 bytes, little-endian) and read it again
# when it does not match; return the value (zero bytes at the end stripped), or `None` when the key
# is not there. (`pair` is the pair the checker runs on; you do not need it.)
#
# The checker runs three GETs on a fresh store (on the plain fabric, without the NIC model): one of
# a key whose bucket a PUT is rewriting, one of a key three buckets past its home, one of an absent
# key.

# %% tags=["exercise"]
import zlib


def get_by_reads(pair, table, key):
    ### BEGIN SOLUTION
    lay = table.layout
    for index in lay.probe(key):
        while True:
            raw = table.read(index, 1)[0]
            if zlib.crc32(raw[:-4]) == int.from_bytes(raw[-4:], "little"):
                break
        bucket = lay.decode(raw, index)
        if bucket.version == 0:
            return None
        if bucket.key == key:
            return bucket.value.rstrip(b"\0")
    return None
    ### END SOLUTION


lab.check("kv.get", get_by_reads)

# %% [markdown]
# ### 2. When does the RPC win?
#
# Your server's CPU spends `service_ns` on each request (the cell below shows yours). Build a store
# with it, `simulated(service_ns=..., nic=NIC)`, measure a GET by RPC (its `.ns`: take the mean of a
# few, the server's polling loop moves it a little), and GETs by READs of keys 0, 1, 2, ... buckets
# past their home. Measure warm NICs: the first touch of a QP, or of a page of memory, misses the
# NIC's caches and waits for a PCIe round trip, so first read every bucket you will measure and
# use each of the client's `recv_depth` receive buffers once, unmeasured. Give the RPC GET's time in ns, and the fewest READs per
# GET at which the RPC is faster.

# %%
lab.scenario("kv.crossover")

# %% tags=["exercise"]
crossover = {"rpc_ns": ..., "reads": ...}
### BEGIN SOLUTION
mine = simulated(layout=Layout(buckets=64), service_ns=lab.scenario("kv.crossover").service_ns, nic=NIC)
keys = key_at_distance(mine.server.layout, 10, 7)
for k in keys:
    mine.server.put_local(k, k)
mine.client.get_read(keys[-1])   # warm up the NICs' caches: every bucket measured, read once
by_reads = [mine.client.get_read(k).ns for k in keys]
mine.server.start()
for _ in range(mine.client.recv_depth):   # and every receive buffer of the client used once
    mine.client.get_rpc(keys[0])
rpc = [mine.client.get_rpc(k).ns for k in keys]
mine.server.stop()
rpc_ns = sum(rpc) / len(rpc)
crossover = {"rpc_ns": round(rpc_ns), "reads": next(i + 1 for i, t in enumerate(by_reads) if t > rpc_ns)}
### END SOLUTION
lab.check("kv.crossover", crossover)

# %% [markdown]
# ### 3. Catch a torn read
#
# Your scenario has a key, an old and a new value, and the times of a PUT's two halves. On a fresh
# store (`simulated(nic=NIC)`), PUT the old value at once, then the new one with
# `put_local(key, new, at_ns=first_ns, split_ns=split_ns)`, and GET the key at once without the
# check (`verify=False`): what value comes back? Then the same on another fresh store with the
# check: how many READs does the GET take?

# %%
lab.scenario("kv.torn")

# %% tags=["exercise"]
torn = {"torn": ..., "reads": ...}
### BEGIN SOLUTION
s = lab.scenario("kv.torn")
runs = []
for verify in (False, True):
    t = simulated(nic=NIC)
    t.server.put_local(s.key.encode(), s.old.encode())
    t.server.put_local(s.key.encode(), s.new.encode(), at_ns=s.first_ns, split_ns=s.split_ns)
    runs.append(t.client.get_read(s.key.encode(), verify=verify))
torn = {"torn": runs[0].value, "reads": runs[1].round_trips}
### END SOLUTION
lab.check("kv.torn", torn)

# %% [markdown]
# ### 4. Why
#
# From a few READs on, the RPC wins. Pick the explanation:
#
# * **A**: An RPC moves fewer bytes than a READ of a bucket.
# * **B**: A GET by READs pays a network round trip per READ, one per bucket of the probe
#   sequence; the RPC pays one round trip and the server CPU's time, however long the probe
#   sequence.
# * **C**: The RPC takes no round trip at all: the server's SEND comes without the client waiting
#   for an answer.

# %% tags=["exercise"]
why = ...
### BEGIN SOLUTION
why = "B"
### END SOLUTION
lab.check("kv.why", why)

# %% [markdown]
# ## What the papers found
#
# HERD's authors made the same choice on real NICs for the same reason: a design that needs one
# round trip for every request, rather than READs that depend on one another, gave them lower
# latency and, for small items, over twice the throughput of the READ-based stores they compared
# (HERD's abstract: 26 million operations per second, 5 µs average latency). Pilaf and FaRM keep
# the server's CPU out of GETs and pay in READs: FaRM shortens the search by reading a whole
# neighbourhood of buckets in one larger READ (try `simulated(window=4)`: fewer READs, more bytes
# per GET), and both need a check against torn reads that HERD does not.
