"""Checkers for 15-building-on-rdma: a GET by one-sided READs, READs against RPC, a torn read.

Every expected answer is measured on the store itself (:mod:`rdmalab.tools.kv`), on the same simulated fabric
the notebook uses, so that an exercise cannot drift from its notebook.

Per student (:mod:`rdmalab.lab.variant`): ``kv.crossover``, the server CPU's time per request (which moves the
number of READs from which the RPC wins); ``kv.torn``, the old and new values and the times of the PUT's two
halves.  ``kv.get`` is a program (judged by what it does on a fresh fabric); ``kv.why`` a mechanism.
"""

from __future__ import annotations

import random
from statistics import mean
from typing import Any

from rdmalab.lab.answers import Program
from rdmalab.lab.checkers.verbs import clean_run
from rdmalab.lab.core import Said, Wrong, exercise
from rdmalab.lab.feedback import as_bytes, as_int, as_letter, plain
from rdmalab.lab.pair import SoftPair
from rdmalab.lab.variant import draw, scenario
from rdmalab.tools.kv import KvClient, KvServer, Layout, connect, key_at_distance, simulated
from rdmalab.verbs.device import Context
from rdmalab.verbs.engine.nicmodel import NicModel
from rdmalab.wire.opcodes import OPCODES, Op

NB = "15-building-on-rdma"
#: the NIC model the notebook measures under: ConnectX-3 on PCIe 3.0 (:mod:`rdmalab.verbs.engine.nicmodel`)
NIC = NicModel.connectx3()


# ----------------------------------------------------------------------------- 1. the GET by READs

#: the exercise's table: 32 buckets; a key alone at its home bucket 5, which a PUT is rewriting when the GET
#: starts; four keys from home 20 (the last stored three buckets past it), and an absent key from home 20
_LAYOUT = Layout(buckets=32)
_OLD, _NEW = b"the old value, before the PUT......", b"THE NEW VALUE, AFTER THE PUT......."


def _keys() -> tuple[bytes, list[bytes], bytes]:
    hot = key_at_distance(_LAYOUT, 5, 0, prefix=b"hot")[0]
    chain = key_at_distance(_LAYOUT, 20, 4, prefix=b"user")
    return hot, chain[:4], chain[4]


def value_of(key: bytes) -> bytes:
    return b"value of " + key


class Table:
    """What ``get_by_reads`` is given: the table's ``layout``, and ``read(first, count)``, one RDMA READ of
    ``count`` consecutive buckets from bucket ``first`` (their raw bytes, a list)."""

    def __init__(self, client: KvClient) -> None:
        self.layout = client.layout
        self._client = client

    def read(self, first: int, count: int = 1) -> list[bytes]:
        return self._client.read_buckets(first, count)

    def __repr__(self) -> str:
        lay = self.layout
        return f"Table({lay.buckets} buckets of {lay.bucket_size} bytes: .layout, .read(first, count))"


def get_setup(pair: Any) -> list[tuple[Any, ...]]:
    """The store of exercise 1 on ``pair``'s fabric (server on B's device, client on A's), and the calls: the
    hot key (torn by a PUT when the GET starts), the key three buckets past its home, the absent key."""
    server = KvServer(Context(name=pair.b.name, fabric=pair.fabric), _LAYOUT)
    client = KvClient(Context(name=pair.a.name, fabric=pair.fabric))
    connect(server, client)
    hot, chain, absent = _keys()
    server.put_local(hot, _OLD)
    for k in chain:
        server.put_local(k, value_of(k))
    server.put_local(hot, _NEW, at_ns=pair.fabric.now_ns + 500, split_ns=2000)
    table = Table(client)
    return [(table, hot), (table, chain[-1]), (table, absent)]


_PROGRAM = Program(15, get_setup)


def _reads_by(run: Any, node: str) -> int:
    return sum(1 for ev in run.trace if ev.kind == "sent" and ev.node == node and ev.opcode in OPCODES
               and OPCODES[ev.opcode].op == Op.RDMA_READ_REQUEST)


def reference_reads() -> int:
    """The READs the library's own GET (``KvClient.get_read``) makes for the three calls of exercise 1."""
    pair = SoftPair(seed=_PROGRAM.seed)
    calls = get_setup(pair)
    for table, key in calls:
        table._client.get_read(key)
    return _reads_by(pair, pair.a.name)


@exercise("kv.get", "Write a GET that reads the table with RDMA READs", notebook=NB, program=_PROGRAM, hints=(
    "Start at table.layout.home(key) and go on one bucket at a time (modulo table.layout.buckets): "
    "table.layout.probe(key) lists them in order.",
    "A bucket whose CRC32 (over every byte but the last 4) is not the little-endian u32 in its last 4 bytes was "
    "read while the server was writing it: read the same bucket again.",
    "An empty bucket (version 0) ends the search: the key is not in the table (return None); a bucket whose key "
    "is yours ends it too (return its value, zero bytes at the end stripped).",
))
def _get(answer: Any) -> str:
    run = clean_run(answer, "get_by_reads", "a function (pair, table, key) -> the value (bytes) or None")
    hot, chain, absent = _keys()
    got = run.returned
    ops = [OPCODES[ev.opcode].op for ev in run.trace if ev.kind == "sent" and ev.node == run.a.name
           and ev.opcode in OPCODES]
    reads = ops.count(Op.RDMA_READ_REQUEST)
    if not reads:
        raise Wrong("Your function sent no RDMA READ: a GET of this design reads the server's table itself "
                    "(table.read(first, count)).", field="BTH.opcode", given=Said(", ".join(o.name for o in ops)
                                                                                   or "nothing"),
                    expected="RDMA READ Requests from the client")
    if any(o in (Op.SEND, Op.RDMA_WRITE) for o in ops):
        raise Wrong("Your function sent a SEND or a WRITE: this GET asks nothing of the server's CPU, it only "
                    "READs.", field="BTH.opcode", expected="RDMA READ Requests only")
    value = got[0]
    if value is None or value is Ellipsis:
        raise Wrong(f"The GET of {hot!r} returned nothing; the key is in its home bucket, "
                    f"{_LAYOUT.home(hot)}.", field="return value", given=value, expected="the value (bytes)")
    try:
        value = bytes(value)
    except TypeError:
        raise Wrong(f"Your function returned a {type(value).__name__}: return the value as bytes.",
                    field="return value", given=value, expected="bytes") from None
    half = _LAYOUT.bucket_size // 2 - 8 - 16
    if value.rstrip(b"\0") == (_NEW[:half] + _OLD[half:]).rstrip(b"\0"):
        raise Wrong(f"The GET of {hot!r} returned a torn value: the first {half} bytes of the new value and the "
                    "rest of the old one. The READ landed while the server was writing the bucket; its CRC did "
                    "not match, and a GET must then read the bucket again.", field="CRC32",
                    given=value, expected="the value after the PUT, whole")
    if value.rstrip(b"\0") != _NEW.rstrip(b"\0"):
        raise Wrong(f"The GET of {hot!r} returned neither the value the PUT wrote nor a torn one.",
                    field="return value", given=value, expected=f"{_NEW!r}")
    far = got[1]
    if far is None or far is Ellipsis:
        raise Wrong(f"The GET of {chain[-1]!r} found nothing: its home bucket, {_LAYOUT.home(chain[-1])}, holds "
                    "another key, so the key is further along the probe sequence (the next buckets, until an "
                    "empty one).", field="probe sequence", given=repr(far), expected=f"{value_of(chain[-1])!r}")
    if bytes(far).rstrip(b"\0") != value_of(chain[-1]):
        raise Wrong(f"The GET of {chain[-1]!r} returned another key's value: compare the key in each bucket "
                    "with yours before taking its value.", field="bucket key", given=far,
                    expected=f"{value_of(chain[-1])!r}")
    if got[2] is not None:
        raise Wrong(f"{absent!r} is not in the table, yet your GET returned a value for it: return None when "
                    "you reach an empty bucket.", field="return value", given=got[2], expected="None")
    want = reference_reads()
    if reads > want:
        raise Wrong(f"Your three GETs took {reads} READs; they need at most {want} (one per bucket looked at, one "
                    "more for the torn one). Stop at the first empty bucket: the key cannot be past it.",
                    field="READs", given=plain(reads), expected=f"{want} or fewer")
    return (f"Right: {reads} READs for the three GETs, no packet for the server's CPU; the torn bucket was read "
            "again, the key three buckets past its home found, the absent key ended at an empty bucket.")


# ----------------------------------------------------------------------------- 2. READs against RPC

#: the server CPU's time per request (ns) a student may draw: each at least 700 ns from a tie between the two
#: designs under :data:`NIC` (a warm READ round trip 4314 ns, an RPC 5500 ns + service_ns: ties near 3128 and
#: 7442 ns; tests/tools/test_kv.py holds the margins)
SERVICE_NS = (150, 500, 900, 1300, 1700, 2100, 2300, 4100, 4500, 4900, 5300, 5700, 6100, 6500, 6600)


@scenario("kv.crossover")
def _crossover_scenario(r: random.Random) -> dict[str, Any]:
    return {"service_ns": r.choice(SERVICE_NS)}


def measure(service_ns: int, *, max_trips: int = 8, nic: Any = NIC) -> tuple[list[int], int]:
    """The virtual time of a GET by READs needing 1..``max_trips`` READs, and of a GET by RPC (the mean of
    ``max_trips`` of them), on a store whose server spends ``service_ns`` per request."""
    st = simulated(layout=Layout(buckets=64), service_ns=service_ns, nic=nic)
    keys = key_at_distance(st.server.layout, 10, max_trips - 1)
    for k in keys:
        st.server.put_local(k, k)
    # warm: the first touch of a QP, or of a page of a region, misses the NIC's caches (a PCIe round trip each):
    # read every bucket measured, and use every receive buffer of the client once
    st.client.get_read(keys[-1])
    reads = [st.client.get_read(k).ns for k in keys]
    st.server.start()
    for _ in range(st.client.recv_depth):
        st.client.get_rpc(keys[0])
    rpc = round(mean(st.client.get_rpc(k).ns for k in keys))
    st.server.stop()
    return reads, rpc


def crossover(service_ns: int, nic: Any = NIC) -> int:
    """The fewest READs per GET at which the GET by RPC is faster (0 if it never is, up to 8)."""
    reads, rpc = measure(service_ns, nic=nic)
    return next((i + 1 for i, t in enumerate(reads) if t > rpc), 0)


@exercise("kv.crossover", "An RPC GET's time, and from how many READs on the RPC wins", notebook=NB, varies=True,
          hints=(
    "A GET by READs pays one round trip per READ: measure get_read of keys 0, 1, 2, ... buckets past their home.",
    "A GET by RPC pays one round trip, the server's polling and its service time: measure get_rpc once the server "
    "runs (server.start()); its time moves a little with where the server's polling loop is: take the mean of a few.",
    "reads: the smallest number of READs whose GET takes longer than the RPC.",
))
def _crossover(answer: Any) -> str:
    s = draw("kv.crossover")
    reads, rpc = measure(s.service_ns)
    want = next((i + 1 for i, t in enumerate(reads) if t > rpc), 0)
    shape = "{'rpc_ns': the virtual time of one RPC GET, 'reads': the fewest READs per GET at which the RPC wins}"
    if not isinstance(answer, dict) or set(answer) != {"rpc_ns", "reads"}:
        raise Wrong(f"Give {shape}.", field="answer", given=answer, expected=shape)
    ns = as_int(answer["rpc_ns"], "the time of an RPC GET in ns", field="rpc_ns")
    if abs(ns - rpc) > 0.03 * rpc:
        why = ("that is a GET by one READ: the RPC is the one that waits for the server's CPU" if ns == reads[0]
               else f"measure get_rpc(key).ns with your scenario's service_ns ({s.service_ns} ns)")
        raise Wrong(f"An RPC GET does not take {ns} ns on your server: {why}.", field="rpc_ns", given=plain(ns),
                    expected="the mean of a few get_rpc(key).ns, within 3 %")
    got = as_int(answer["reads"], "the number of READs", field="reads")
    if got == want:
        return (f"Right: with {s.service_ns} ns of server CPU an RPC GET takes {rpc / 1000:.2f} us; a GET of "
                f"{want - 1} READs {reads[want - 2] / 1000:.2f} us, of {want} READs {reads[want - 1] / 1000:.2f} us."
                if want > 1 else f"Right: even one READ ({reads[0] / 1000:.2f} us) is slower than the RPC "
                f"({rpc / 1000:.2f} us).")
    if 1 <= got <= len(reads) and reads[got - 1] <= rpc:
        why = (f"a GET of {got} READs takes {reads[got - 1] / 1000:.2f} us, still no longer than the RPC "
               f"({rpc / 1000:.2f} us)")
    elif 1 < got <= len(reads):
        why = (f"already at {got - 1} READs the GET takes {reads[got - 2] / 1000:.2f} us, longer than the RPC "
               f"({rpc / 1000:.2f} us)")
    else:
        why = f"count the READs from 1 up to {len(reads)}"
    raise Wrong(f"Not {got} READs: {why}.", field="reads", given=plain(got),
                expected="the fewest READs per GET at which the RPC is faster")


# ----------------------------------------------------------------------------- 3. the torn read

_WORDS = ("apple", "birch", "cedar", "delta", "ember", "fjord", "grove", "heron", "iris", "juniper", "kelp",
          "lichen", "maple", "nectar", "orchid", "pine", "quartz", "raven", "sorrel", "tulip")


@scenario("kv.torn")
def _torn_scenario(r: random.Random) -> dict[str, Any]:
    old, new = r.sample(_WORDS, 2)
    return {"key": f"k-{r.randrange(1000, 10000)}", "old": (old * 8)[:36], "new": (new.upper() * 8)[:36],
            "first_ns": r.randrange(100, 2000, 10), "split_ns": r.randrange(5000, 20000, 10)}


def torn_run(s: Any, verify: bool) -> Any:
    """A GET (``verify`` or not) of the scenario's key, started at 0, while a PUT writes the bucket's halves at
    ``first_ns`` and ``first_ns + split_ns``."""
    st = simulated(nic=NIC)
    st.server.put_local(s.key.encode(), s.old.encode())
    st.server.put_local(s.key.encode(), s.new.encode(), at_ns=s.first_ns, split_ns=s.split_ns)
    return st.client.get_read(s.key.encode(), verify=verify)


@exercise("kv.torn", "Catch a torn read", notebook=NB, varies=True, hints=(
    "Use your scenario's key, values and times: the old value PUT at once, the new one with "
    "put_local(key, new, at_ns=first_ns, split_ns=split_ns), then a GET at once.",
    "get_read(key, verify=False) returns what one READ brought, torn or not; get_read(key) checks the CRC and "
    "reads again until it matches: its round_trips are the READs it took.",
))
def _torn(answer: Any) -> str:
    s = draw("kv.torn")
    torn, checked = torn_run(s, False), torn_run(s, True)
    shape = "{'torn': the value the unchecked GET returned (bytes), 'reads': READs the checked GET took}"
    if not isinstance(answer, dict) or set(answer) != {"torn", "reads"}:
        raise Wrong(f"Give {shape}.", field="answer", given=answer, expected=shape)
    value = as_bytes(answer["torn"], "the torn value", field="torn")
    if value.rstrip(b"\0") != torn.value:
        if value.rstrip(b"\0") in (s.old.encode(), s.new.encode()):
            why = "that is one whole value; the unchecked GET's READ landed between the PUT's halves"
        else:
            why = "that is not what the unchecked GET returns"
        raise Wrong(f"Not the torn value: {why}.", field="torn", given=value,
                    expected="new bytes in front, old ones behind")
    reads = as_int(answer["reads"], "the READs of the checked GET", field="reads")
    if reads != checked.round_trips:
        raise Wrong(f"The checked GET took {'more' if reads < checked.round_trips else 'fewer'} READs than "
                    f"{reads}: each READ that finds a bad CRC is followed by another, until the PUT's second half "
                    f"is written at {s.first_ns + s.split_ns} ns.", field="reads", given=plain(reads),
                    expected="the round_trips of get_read(key) with the CRC checked")
    return (f"Right: the unchecked GET returned {len(torn.value)} bytes that were never stored (version "
            f"{torn.version}); the checked one read {checked.retries} torn cop{'y' if checked.retries == 1 else 'ies'} before a "
            "whole one.")


# ----------------------------------------------------------------------------- 4. why


_WHY = {
    "A": "An RPC moves fewer bytes than a READ of a bucket.",
    "B": "A GET by READs pays a network round trip per READ, one per bucket of the probe sequence; the RPC pays "
         "one round trip and the server CPU's time, however long the probe sequence.",
    "C": "The RPC takes no round trip at all: the server's SEND comes without the client waiting for an answer.",
}


@exercise("kv.why", "Why the RPC wins beyond a few READs", notebook=NB, hints=(
    "Compare how the two times grow with the number of buckets a GET looks at.",
))
def _why(answer: Any) -> str:
    a = as_letter(answer, _WHY)
    if a == "A":
        raise Wrong("An RPC's request and response carry about a bucket each way too; the bytes are not the "
                    "difference at these sizes (100 Gb/s moves 64 bytes in 5 ns).", field="answer", given=a,
                    expected="what grows with the number of buckets a GET looks at")
    if a == "C":
        raise Wrong("The client does wait: its WRITE crosses to the server, the SEND crosses back, one round trip "
                    "(with the server's CPU between); what differs is how many round trips a GET needs, one after "
                    "the other.", field="answer", given=a, expected="what each design waits for")
    return ("Right: the READ GET's time grows by a round trip per bucket; the RPC's is fixed, the server's CPU "
            "follows the probe sequence in its own memory.")
