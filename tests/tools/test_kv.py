"""rdmalab.tools.kv: the key-value store on the simulated fabric (GET by READs, GET/PUT by RPC, torn reads).

The oracles: a Python dict of what was stored (correctness), the engine's trace (which packets each design
puts on the wire, and whose CPU takes part), the bytes of the two values a torn bucket is made of.
"""

from __future__ import annotations

import random
import zlib
from typing import Any

import pytest

from rdmalab.fabric.sim import Fabric
from rdmalab.lab.checkers.kv import NIC, SERVICE_NS, measure
from rdmalab.tools.kv import (
    KEY_SIZE,
    GetResult,
    KvClient,
    KvError,
    KvServer,
    Layout,
    TornReadError,
    connect,
    key_at_distance,
)
from rdmalab.verbs.device import Context
from rdmalab.verbs.engine.nicmodel import NicModel
from rdmalab.wire.opcodes import OPCODES, Op


def store(*, window: int = 1, layout: Layout | None = None, service_ns: int = 200, poll_ns: int = 100,
          max_retries: int = 16, seed: int = 1, nic: NicModel | None = None) -> tuple[Fabric, KvServer, KvClient]:
    f = Fabric(seed=seed, nic=nic)
    for n in ("server", "client"):
        f.add_device(n)
    s = KvServer(Context(name="server", fabric=f), layout, service_ns=service_ns, poll_ns=poll_ns)
    c = KvClient(Context(name="client", fabric=f), window=window, max_retries=max_retries)
    connect(s, c)
    return f, s, c


# ---------------------------------------------------------------------------- the table's bytes


def test_bucket_bytes_and_crc() -> None:
    lay = Layout(buckets=8, value_size=36)
    assert lay.bucket_size == 64 and lay.size == 512
    raw = lay.encode(b"key", b"value", 7)
    assert raw[:8] == (7).to_bytes(8, "little") and raw[8:8 + KEY_SIZE] == b"key".ljust(KEY_SIZE, b"\0")
    assert int.from_bytes(raw[-4:], "little") == zlib.crc32(raw[:-4])
    b = lay.decode(raw, 3)
    assert (b.index, b.version, b.key, b.value.rstrip(b"\0"), b.ok, b.empty) == (3, 7, b"key", b"value", True, False)
    for i in range(len(raw)):  # any one byte changed: the CRC no longer matches
        bad = bytearray(raw)
        bad[i] ^= 0x40
        assert not lay.decode(bytes(bad)).ok, i
    assert lay.decode(lay.encode(b"", b"", 0)).empty


@pytest.mark.parametrize("key", [b"", b"x" * (KEY_SIZE + 1), b"ends\0", "text"])
def test_bad_keys_are_refused(key: object) -> None:
    _, s, c = store()
    with pytest.raises(KvError, match="key"):
        s.put_local(key, b"v")  # type: ignore[arg-type]
    with pytest.raises(KvError, match="key"):
        c.get_read(key)  # type: ignore[arg-type]


def test_too_long_a_value_and_a_full_table_are_errors() -> None:
    _, s, c = store(layout=Layout(buckets=4, value_size=8))
    with pytest.raises(KvError, match="value_size of 8"):
        s.put_local(b"a", b"123456789")
    with pytest.raises(KvError, match="ends in a zero byte"):
        s.put_local(b"a", b"12\0")
    s.start()
    for k in (b"a", b"b", b"c", b"d"):
        c.put_rpc(k, k)
    with pytest.raises(KvError, match="full"):
        c.put_rpc(b"e", b"e")
    with pytest.raises(KvError, match="full"):
        s.put_local(b"e", b"e")
    assert c.get_read(b"e").value is None and c.get_read(b"e").round_trips == 4  # looked in every bucket
    s.stop()


# ---------------------------------------------------------------------------- GET and PUT, both ways


@pytest.mark.parametrize("window", [1, 3])
def test_get_and_put_both_ways_agree_with_a_dict(window: int) -> None:
    """60 keys in 64 buckets (long probe sequences), PUT by RPC or locally, overwritten; every GET both ways."""
    _, s, c = store(window=window)
    s.start()
    r = random.Random(5)
    want: dict[bytes, tuple[bytes, int]] = {}
    for i in range(90):
        k = b"key%d" % r.randrange(60)
        v = r.randbytes(r.randrange(1, 37)).rstrip(b"\0") or b"z"
        if i % 2:
            res = c.put_rpc(k, v)
            version = res.version
        else:
            version = s.put_local(k, v).version
        want[k] = (v, want.get(k, (b"", 0))[1] + 1)
        assert version == want[k][1]
    for k, (v, version) in want.items():
        for got in (c.get_read(k), c.get_rpc(k)):
            assert (got.value, got.version) == (v, version), k
        assert s.lookup(k) == v
    for k in (b"absent", b"key60"):
        assert c.get_read(k).value is None and c.get_rpc(k).value is None
    s.stop()


def test_several_clients_share_the_servers_ud_qp() -> None:
    """Three clients, each its own RC QP and request slot, one UD QP at the server answering all, in turns:
    every answer goes to the client that asked, right, and a client's READs see the others' PUTs."""
    f = Fabric(seed=3)
    for n in ("server", "c0", "c1", "c2"):
        f.add_device(n)
    s = KvServer(Context(name="server", fabric=f))
    clients = [KvClient(Context(name=f"c{i}", fabric=f)) for i in range(3)]
    for c in clients:
        connect(s, c)
    s.start()
    for i, c in enumerate(clients):
        c.put_rpc(b"own%d" % i, b"value of client %d" % i)
    for _ in range(3):
        for i, c in enumerate(clients):
            assert c.get_rpc(b"own%d" % i).value == b"value of client %d" % i
            assert c.get_read(b"own%d" % ((i + 1) % 3)).value == b"value of client %d" % ((i + 1) % 3)
    s.stop()
    assert s.served["put"] == 3 and s.served["get"] == 9 and len({c.qp.qp_num for c in s.clients}) == 3


def test_a_read_get_follows_the_probe_sequence() -> None:
    """The key stored d buckets past its home takes d + 1 READs (window 1), ceil((d + 1) / W) with W per READ."""
    lay = Layout(buckets=32)
    for window in (1, 2, 4):
        _, s, c = store(window=window, layout=lay)
        keys = key_at_distance(lay, 7, 5)
        for k in keys:
            s.put_local(k, k)
        for d, k in enumerate(keys):
            got = c.get_read(k)
            assert got.value == k and got.buckets[-1] == 7 + d
            assert got.round_trips == -(-(d + 1) // window), (window, d, got)
            assert got.buckets == list(range(7, 7 + d + 1))  # looked at in order, up to the key


def test_read_gets_leave_the_server_cpu_out_and_rpcs_do_not() -> None:
    """The trace: a READ GET is READ Requests from the client and READ Responses from the server's NIC, no
    completion at the server; an RPC GET is one WRITE from the client and one UD SEND from the server."""
    f, s, c = store()
    keys = key_at_distance(s.layout, 3, 2)
    for k in keys:
        s.put_local(k, b"v")
    t0 = len(f.trace)
    assert c.get_read(keys[2]).round_trips == 3
    sent = [(ev.node, OPCODES[ev.opcode].op) for ev in list(f.trace)[t0:] if ev.kind == "sent" and ev.opcode in OPCODES]
    assert [op for node, op in sent if node == "client"] == [Op.RDMA_READ_REQUEST] * 3
    assert [op for node, op in sent if node == "server"] == [Op.RDMA_READ_RESPONSE] * 3
    assert s.served == {"get": 0, "put": 0, "polls": 0, "deferred": 0}
    s.start()
    t0 = len(f.trace)
    assert c.get_rpc(keys[2]).value == b"v"
    s.stop()
    sent = [(ev.node, OPCODES[ev.opcode]) for ev in list(f.trace)[t0:] if ev.kind == "sent" and ev.opcode in OPCODES]
    assert [(n, o.op) for n, o in sent if o.op != Op.ACKNOWLEDGE] == [("client", Op.RDMA_WRITE), ("server", Op.SEND)]
    assert [o.transport.name for n, o in sent if o.op == Op.SEND] == ["UD"]
    assert s.served["get"] == 1


# ---------------------------------------------------------------------------- torn reads


def _landed(f: Fabric) -> int:
    """When the first READ Request reached the server (the engine's trace): when the server's NIC read the bucket."""
    return min(ev.time_ns for ev in f.trace if ev.kind == "received" and ev.node == "server"
               and ev.opcode in OPCODES and OPCODES[ev.opcode].op == Op.RDMA_READ_REQUEST)


def _torn_sweep(verify: bool) -> list[tuple[int, Any, GetResult]]:
    """A local PUT of a new value, written in two halves at 2 us and 3.5 us; a READ GET of the key started every
    100 ns from 0 to 5 us, so that its READ lands before, between and after the halves (one fresh store per
    start).  (start, the PUT, the GET's result)"""
    out = []
    for at in range(0, 5000, 100):
        f, s, c = store()
        s.put_local(b"hot", b"O" * 36)
        p = s.put_local(b"hot", b"N" * 36, at_ns=2000, split_ns=1500)
        f.advance_to(at)
        got = c.get_read(b"hot", verify=verify)
        p.landed = _landed(f)
        out.append((at, p, got))
    return out


def test_a_torn_read_is_detected_and_never_returned() -> None:
    seen = {"old": 0, "new": 0, "retried": 0}
    for at, p, got in _torn_sweep(verify=True):
        assert (got.value, got.version) in ((b"O" * 36, 1), (b"N" * 36, 2)), (at, got)  # whole, old or new
        assert bool(got.retries) == (p.first_ns <= p.landed < p.done_ns), (at, p, got)  # torn iff between halves
        assert got.round_trips == 1 + got.retries and got.torn == got.retries
        seen["old" if got.version == 1 else "new"] += 1
        seen["retried"] += got.retries > 0
    # READs landed before the PUT, between its halves (the 1.5 us between them: 15 starts) and after it
    assert seen["old"] >= 5 and seen["new"] >= 20 and seen["retried"] >= 14, seen


def test_without_the_check_the_torn_value_is_returned() -> None:
    """The same sweep with verify=False: where the checked GET retried, this one returns new bytes in front of
    old ones, under the new version, as if they were a value that was ever stored."""
    checked = {at: got for at, _, got in _torn_sweep(verify=True)}
    torn = 0
    for at, _p, got in _torn_sweep(verify=False):
        assert got.retries == 0 and got.round_trips == 1
        if checked[at].retries:
            half = 64 // 2 - 8 - KEY_SIZE  # the value bytes in the bucket's first half
            assert got.value == b"N" * half + b"O" * (36 - half) and got.version == 2, (at, got)
            assert got.torn == 1
            torn += 1
        else:
            assert got.value in (b"O" * 36, b"N" * 36)
    assert torn >= 5


def test_a_bucket_torn_for_longer_than_the_retries_is_an_error() -> None:
    f, s, c = store(max_retries=2)
    s.put_local(b"hot", b"old")
    s.put_local(b"hot", b"new", at_ns=f.now_ns + 100, split_ns=100_000)
    with pytest.raises(TornReadError, match="3 times in a row"):
        c.get_read(b"hot")


def test_an_rpc_during_a_split_put_waits_for_it() -> None:
    """HERD's server answers a GET of a bucket another core is writing once the write is done: never torn."""
    f, s, c = store()
    s.start()
    s.put_local(b"hot", b"O" * 36)
    p = s.put_local(b"hot", b"N" * 36, at_ns=f.now_ns + 500, split_ns=5000)
    got = c.get_rpc(b"hot")
    assert (got.value, got.version) == (b"N" * 36, 2) and s.served["deferred"] == 1
    assert f.now_ns > p.done_ns
    s.stop()


# ---------------------------------------------------------------------------- the ordering (HERD, SIGCOMM'14)


@pytest.mark.parametrize("nic", [None, NicModel.connectx3()], ids=["links only", "ConnectX-3 model"])
def test_rpc_beats_read_gets_beyond_one_round_trip(nic: NicModel | None) -> None:
    """In virtual time: a GET by READs costs a round trip per READ; an RPC one round trip plus the server's CPU.
    So one READ beats the RPC, and from two READs on the RPC wins: on the links alone and under the NIC model
    (where the RPC's share is the server NIC's DMA, its UD SEND's doorbell and WQE fetch, besides the CPU).
    Warm NICs: one GET of each kind first, not measured (the first operation of a QP misses the NIC's caches)."""
    lay = Layout(buckets=64)
    _, s, c = store(layout=lay, nic=nic)
    keys = key_at_distance(lay, 10, 4)
    for k in keys:
        s.put_local(k, k)
    s.start()
    c.get_read(keys[-1])  # every bucket measured, once (the NIC model caches its translation)
    for _ in range(c.recv_depth):
        c.get_rpc(keys[0])  # every receive buffer, once
    read = [c.get_read(k) for k in keys]
    rpc = [c.get_rpc(k) for k in keys]
    s.stop()
    assert [r.round_trips for r in read] == [1, 2, 3, 4, 5]
    per_trip = read[0].ns
    for d, r in enumerate(read):
        assert r.ns == (d + 1) * per_trip  # nothing but round trips
    for r in rpc:
        assert per_trip < r.ns < 2 * per_trip, (per_trip, r.ns)
    assert read[0].ns < min(r.ns for r in rpc) and all(r.ns < read[1].ns for r in rpc)


def test_the_nic_model_makes_both_slower_and_cold_caches_cost_more() -> None:
    """Under the model every READ round trip costs more than on the links alone, and the first GET (cold QP
    context and translations) more than the next."""
    _, s0, c0 = store()
    _, s1, c1 = store(nic=NicModel.connectx3())
    for s in (s0, s1):
        s.put_local(b"k", b"v")
    plain = [c0.get_read(b"k").ns for _ in range(2)]
    model = [c1.get_read(b"k").ns for _ in range(2)]
    assert plain[0] == plain[1] and model[0] > model[1] > plain[1]


def test_the_notebooks_service_times_are_far_from_a_tie() -> None:
    """kv.crossover draws a server CPU time per student: under the notebook's NIC model, each leaves the RPC at
    least 700 ns from every READ GET's time, so that the learner's own mean decides the answer as the checker's."""
    crossovers = set()
    for service in SERVICE_NS:
        reads, rpc = measure(service, nic=NIC, max_trips=4)
        assert min(abs(rpc - t) for t in reads) >= 700, (service, reads, rpc)
        crossovers.add(next(i + 1 for i, t in enumerate(reads) if t > rpc))
    assert crossovers == {2, 3}
