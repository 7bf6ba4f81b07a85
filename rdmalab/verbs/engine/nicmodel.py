"""A NIC and its PCIe link in virtual time: what posting, fetching, processing and completing cost.

Without a model (the default) the soft engine's virtual clock moves only with the links (latency and
bandwidth, :mod:`rdmalab.fabric.sim`): posting is free, a doorbell is free, a NIC never runs out of
its caches.  With one, every device of the fabric gets a :class:`Nic` (``dev.nic``) that charges, in
the fabric's virtual nanoseconds, what Kalia, Kaminsky and Andersen ("Design Guidelines for High
Performance RDMA Systems", USENIX ATC 2016: §2.1 PCIe, §2.2 verbs and WQEs, §3.1 MMIOs and Doorbell
batching, §3.2 NIC-initiated DMAs, §3.3 NIC processing units, §3.5 NIC caches) describe a NIC as paying:

* **the doorbell**: one MMIO write per ``post_send`` call (one per chain when work requests are chained,
  which is *doorbell batching*), crossing the PCIe link host->NIC;
* **the WQE fetch**: a DMA read of the chain's WQEs (one read per ``max_read_request`` bytes: the WQEs
  of a chain lie next to each other in the send queue's ring), then for each WQE that is not inline a
  second DMA read of its payload, which can only start once the WQE is known (inline data came with
  the WQE);
* **the processing units** (PUs): ``processing_units`` engines working in parallel; every packet costs
  ``pu_packet_ns`` on one of them, every doorbell ``pu_doorbell_ns`` and every DMA the NIC issues
  ``pu_dma_ns``;
* **the caches**: an LRU of QP contexts (``qp_cache`` entries) and an LRU of memory translations (MPT
  entries per key and MTT entries per ``mtt_page`` page counted from the MR's start, ``mtt_cache``
  entries together, so timings do not depend on where the host put a buffer); a miss is a
  DMA read of the entry (a PCIe round trip) during which the PU that needs it waits;
* **the receive side**: each arriving packet costs a PU, its context and translation lookups, a SEND's
  receive WQE is fetched by DMA, payloads are DMA-written to host memory, a READ response's payload is
  DMA-read at the responder first;
* **completions**: a CQE is DMA-written for every signaled send WQE (and every receive); the
  completion is visible to ``poll`` once the CQE has landed.  Unsignaled WQEs write no CQE.

The PCIe link is two serial lanes (host->NIC and NIC->host) of ``pcie_bytes_per_ns``, each TLP
carrying ``tlp_overhead`` bytes beside its data (``max_payload`` bytes of data at most); a DMA read
sends its request upstream and gets its completions ``pcie_rtt_ns`` later, downstream.

Turning it on: ``Fabric(..., nic=NicModel.connectx3())`` (every device added gets a :class:`Nic`), or
:func:`attach` for one device.  Reading results: the fabric's clock ``fabric.now_ns`` is the virtual
time (measure a run as the difference of two readings); ``dev.nic.stats`` counts doorbells, DMA reads
and writes, CQEs, PU work and cache misses.  Every parameter, its value and its source: the fields
of :class:`NicModel` and ``docs/nic-model.md``.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import Any

from rdmalab.verbs import enums as e
from rdmalab.verbs.engine import requester
from rdmalab.verbs.engine.wqe import ATOMICS, SendWQE
from rdmalab.wire.ib import OPCODES, Op, Pos

_PAYLOAD_OPS = {e.IBV_WR_SEND, e.IBV_WR_SEND_WITH_IMM, e.IBV_WR_SEND_WITH_INV, e.IBV_WR_RDMA_WRITE,
                e.IBV_WR_RDMA_WRITE_WITH_IMM}


@dataclass(frozen=True)
class NicModel:
    """The costs of one NIC generation and its PCIe link (all times in ns, sizes in bytes).

    Every field says where its value comes from: a paper (section or figure), a specification or a
    driver, or *assumption* with the reason.  Change any with :meth:`replace`
    (``NicModel.connectx3().replace(qp_cache=64)``)."""

    #: the generation the defaults describe
    name: str = "ConnectX-3"
    #: PCIe bandwidth per direction, bytes/ns.  PCIe 3.0 x8 (HERD's README: ConnectX-3 354A on PCIe 3.0
    #: x8; Kalia et al. ATC'16 §2.1 and Figure 2a give the per-lane bandwidth of each PCIe generation of
    #: their clusters, Table 2 the clusters): 8 GT/s x 8 lanes x 128/130 / 8 = 7.877 GB/s, the 62.96 Gb/s
    #: "at the physical layer" for gen 3 x8 of Neugebauer et al. (pcie-bench, SIGCOMM'18, talk slides)
    pcie_bytes_per_ns: float = 7.877
    #: bytes each TLP adds to its data.  PCIe 3.0 framing: 4 B STP token (with the sequence number),
    #: 16 B header (64-bit address), 4 B LCRC = 24 B.  Kalia et al. ATC'16 §2.1 / Figure 2a: 20-26 B of
    #: header overhead per TLP (on PCIe 3.0 26 B a request, 22 B a completion, as public summaries of the
    #: figure read it); one value for both
    tlp_overhead: int = 24
    #: PCIe Max Payload Size: data bytes per write/completion TLP.  256 B: the value ConnectX-3
    #: advertises (Mellanox community, "PCIe TLP payload size", default of the ConnectX-3 INI file)
    max_payload: int = 256
    #: Max Read Request Size: bytes one DMA read request may ask for.  512 B: assumption (the common
    #: BIOS default; Mellanox's PCIe tuning notes show 512 on their adapters).  Kalia et al. ATC'16 §3.1
    #: (footnote): Connect-IB and newer read all new WQEs in one DMA, older Mellanox NICs (ConnectX-3) one
    #: or more WQEs per DMA by a proprietary prefetching logic; here a chain is read in 512-B requests
    max_read_request: int = 512
    #: a DMA read's round trip, request sent to completion back.  370 ns: the most Kalia et al. ATC'16
    #: allow on their ConnectX-3 cluster.  §5.4 / Figure 14: ConnectX-3 serializes every atomic (a PCIe
    #: read-modify-write, §3.4) and reaches 2.7 Mops whatever the number of counters, a rate the paper puts
    #: down to PCIe latency, so one atomic, a read round trip included, takes at most 1 / 2.7 Mops = 370 ns;
    #: §4.2.3 puts a PCIe round trip at a few hundred ns.  (450 ns before this bound was read.)
    pcie_rtt_ns: int = 370
    #: one-way latency of a posted write (an MMIO doorbell reaching the NIC, a DMA write landing in host
    #: memory).  Assumption: half the round trip (no paper separates the two directions)
    mmio_ns: int = 185
    #: size of a send WQE without inline data: 64 B, mlx4's send WQE basic block (control, remote address
    #: and one data segment, 16 B each, fit in one).  Kalia et al. ATC'16 §2.2.2 and Table 1: each WQE is
    #: cache-line aligned, its header is 36 B for RC/UC (68 B for UD), so an RC WRITE WQE with x inline
    #: bytes is 36 + x B and spans a second cache line past x = 28 (§5.3.2); inline data adds its bytes
    #: rounded up to 16 here
    wqe_bytes: int = 64
    #: size of a CQE.  32 B: mlx4's default CQE (``struct mlx4_cqe``; 64 B CQEs are an option).  Kalia et
    #: al. ATC'16 §2.2.1: a signaled verb's completion is a CQE the NIC DMA-writes; §3.2: unsignaled verbs
    #: avoid that write (the size is not given there)
    cqe_bytes: int = 32
    #: size of a QP context fetched on a cache miss.  256 B: assumption (mlx4's ``struct mlx4_qp_context``
    #: is about that size)
    qpc_bytes: int = 256
    #: size of one translation entry (MPT or MTT) fetched on a miss.  Assumption: 64 B, one cache line
    mtt_entry_bytes: int = 64
    #: NIC processing units working in parallel.  Assumption: 8.  Kalia et al. ATC'16 §3 assume every NIC
    #: has several PUs and §3.3 ("Engage multiple NIC PUs") shows one QP binding a core to one PU; no
    #: paper gives the count
    processing_units: int = 8
    #: PU time per packet sent or received.  Assumption: 100 ns, so 8 PUs cap a NIC at 80 Mpps; with the
    #: next two it sets the model's small-message rate (12-18 Mops for one QP pair here).  The published
    #: ConnectX-3 rates are below that cap and come from many QPs and clients: about 26 Mops for HERD's
    #: whole store (SIGCOMM'14 abstract: near native READ throughput), 22 Mops of regular RECVs (Kalia et
    #: al. ATC'16 §5.2.2, footnote), inbound READs bound by the NIC until 256 B fill 56 Gb/s (§5.3.1)
    pu_packet_ns: int = 100
    #: PU time to take a doorbell.  Assumption: 150 ns (decode, find the ring, issue the WQE read)
    pu_doorbell_ns: int = 150
    #: PU time to issue one DMA (read or write) and handle its completion.  Assumption: 100 ns
    pu_dma_ns: int = 100
    #: QP contexts the NIC caches (LRU).  Assumption: 256.  The papers report the fall, not the size:
    #: Kalia et al. ATC'16 §3.5 (QP state is one of the NIC's caches; fewer QPs, fewer misses, after FaRM)
    #: and §4.2.1 (connected QPs hold server NIC state and cap HERD-style RPCs at a few hundred clients);
    #: HERD SIGCOMM'14 §3 Figure 6 measures outbound WRITEs falling with the number of QPs (the figure as
    #: a public reproduction of HERD's §3 indexes it; its numbers were not read here)
    qp_cache: int = 256
    #: translation entries the NIC caches (LRU, MPT and MTT together).  Assumption: 4096.  Kalia et al.
    #: ATC'16 §3.5: address translations are cached and large (e.g. 2 MB) pages reduce their misses
    #: (known from FaRM, NSDI'14); the size is not published
    mtt_cache: int = 4096
    #: page size one MTT entry translates.  4096 B: the host's base page
    mtt_page: int = 4096
    #: largest inline payload.  256 B: the soft device's ``max_inline_data`` (``rdmalab.verbs.device``;
    #: mlx4 allows more)
    max_inline: int = 256
    #: the port's rate for a fabric built for this NIC (``Fabric(bandwidth_gbps=model.link_gbps)``).
    #: 56 Gb/s: FDR InfiniBand; Kalia et al. ATC'16 §5.3.1: on their CX3 cluster (Table 2) inbound READs
    #: fill the 56 Gb/s link from 256 B up
    link_gbps: float = 56.0

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.name == "name":
                if not isinstance(v, str) or not v:
                    raise ValueError("NicModel.name: a non-empty string")
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise TypeError(f"NicModel.{f.name}: a number, not {v!r}")
            positive = f.name in ("pcie_bytes_per_ns", "max_payload", "max_read_request", "processing_units",
                                  "qp_cache", "mtt_cache", "mtt_page", "link_gbps")
            if v < 0 or (positive and v <= 0):
                raise ValueError(f"NicModel.{f.name}: must be {'positive' if positive else 'at least 0'}, not {v}")

    @classmethod
    def connectx3(cls) -> NicModel:
        """Mellanox ConnectX-3 on PCIe 3.0 x8 with a 56 Gb/s port (the defaults, see each field)."""
        return cls()

    def replace(self, **changes: Any) -> NicModel:
        """This model with some parameters changed (checked as the constructor checks them)."""
        return dataclasses.replace(self, **changes)


# opcode -> (is a SEND starting a message, carries payload to place, READ request, atomic request, response)
def _kinds() -> dict[int, tuple[bool, bool, bool, bool, bool]]:
    out = {}
    for code, info in OPCODES.items():
        send_start = info.op == Op.SEND and info.pos in (Pos.FIRST, Pos.ONLY)
        places = info.op in (Op.SEND, Op.RDMA_WRITE, Op.RDMA_READ_RESPONSE)
        out[code] = (send_start, places, info.op == Op.RDMA_READ_REQUEST, info.op in (Op.CMP_SWAP, Op.FETCH_ADD),
                     info.op in (Op.RDMA_READ_RESPONSE, Op.ACKNOWLEDGE, Op.ATOMIC_ACKNOWLEDGE))
    return out


_KIND = _kinds()
_NONE = (False, False, False, False, False)


class Timeline:
    """A resource of ``rate`` units per ns (PCIe bytes, PU-nanoseconds) booked in buckets of ``bucket`` ns.

    Work is booked at the time it can start, which may lie in the future (after a DMA round trip): a
    booking takes what capacity is left in the buckets from its start on, so that bookings made out of
    time order fill the gaps earlier ones left (a fluid approximation of the resource's queue).  One
    booking never goes faster than ``unit`` units per ns (one PU works at one ns per ns; one lane moves
    ``rate`` bytes per ns)."""

    __slots__ = ("rate", "unit", "bucket", "cap", "used")

    def __init__(self, rate: float, unit: float, bucket: int = 100) -> None:
        self.rate = rate
        self.unit = unit
        self.bucket = bucket
        self.cap = rate * bucket
        self.used: dict[int, float] = {}

    def take(self, t: float, amount: float) -> float:
        """Book ``amount`` units from ``t``: when the last of them is done."""
        if amount <= 0:
            return t
        size, cap, used = self.bucket, self.cap, self.used
        b = int(t // size)
        left = amount
        room = min(cap - used.get(b, 0.0), (b + 1 - t / size) * cap)  # (the first bucket: its part after t)
        while room < left:
            if room > 0:
                used[b] = used.get(b, 0.0) + room
                left -= room
            b += 1
            room = cap - used.get(b, 0.0)
        u = used.get(b, 0.0) + left
        used[b] = u
        done = b * size + u / self.rate  # (bookings of a bucket pack from its start)
        least = t + amount / self.unit
        return done if done > least else least

    def prune(self, now: float) -> None:
        """Forget the buckets before ``now`` (no booking starts in the past)."""
        first = int(now // self.bucket)
        for k in [k for k in self.used if k < first]:
            del self.used[k]


class Nic:
    """One device's NIC under a :class:`NicModel`: its PCIe lanes, PUs, caches and counters.

    The engine calls :meth:`post` (``SoftQP.post_send``), :meth:`complete` (a CQE), and the simulated
    fabric :meth:`tx` (a response leaving) and :meth:`rx` (a packet arriving).  Each reserves the
    resources it uses from the time it is asked for onwards and returns when it is done."""

    def __init__(self, model: NicModel, dev: Any) -> None:
        self.model = model
        self.dev = dev
        self.down = Timeline(model.pcie_bytes_per_ns, model.pcie_bytes_per_ns)  # the host->NIC lane
        self.up = Timeline(model.pcie_bytes_per_ns, model.pcie_bytes_per_ns)  # the NIC->host lane
        self.pu = Timeline(model.processing_units, 1.0)  # the PUs: each works one ns per ns
        self.qpc: OrderedDict[int, None] = OrderedDict()
        self.mtt: OrderedDict[tuple[int, int], None] = OrderedDict()
        self._qp_last: dict[int, float] = {}  # QP number -> when its last posted WQE is ready (in order)
        self._cq_last: dict[int, float] = {}  # id(CQ) -> when its last CQE lands (in order)
        self._staged: dict[int, deque[tuple[float, SendWQE]]] = {}
        #: what the NIC did: doorbells, DMA reads/writes (count and bytes), CQEs written, PU busy time,
        #: QP-context and translation cache hits and misses
        self.stats = {"doorbells": 0, "wqes": 0, "dma_reads": 0, "dma_read_bytes": 0, "dma_writes": 0,
                      "dma_write_bytes": 0, "cqes": 0, "pu_ns": 0, "qpc_hits": 0, "qpc_misses": 0,
                      "mtt_hits": 0, "mtt_misses": 0, "packets_in": 0}

    # ------------------------------------------------------------------ PCIe
    def _lane(self, t: float, nbytes: int, tlps: int, up: bool) -> float:
        """``nbytes`` of data in ``tlps`` TLPs on one lane from ``t``: when the last byte has crossed."""
        return (self.up if up else self.down).take(t, nbytes + tlps * self.model.tlp_overhead)

    def dma_read(self, t: float, nbytes: int) -> float:
        """The NIC reads ``nbytes`` of host memory from ``t``: requests up, completions down a round trip
        later; when the data is in the NIC."""
        m = self.model
        self.stats["dma_reads"] += 1
        self.stats["dma_read_bytes"] += nbytes
        requests = max(1, -(-nbytes // m.max_read_request))
        sent = self._lane(t, 0, requests, True)
        return self._lane(sent + m.pcie_rtt_ns, nbytes, max(1, -(-nbytes // m.max_payload)), False)

    def dma_write(self, t: float, nbytes: int) -> float:
        """The NIC writes ``nbytes`` to host memory from ``t`` (posted writes): when they have landed."""
        m = self.model
        self.stats["dma_writes"] += 1
        self.stats["dma_write_bytes"] += nbytes
        return self._lane(t, nbytes, max(1, -(-nbytes // m.max_payload)), True) + m.mmio_ns

    # ------------------------------------------------------------------ PUs and caches
    def _hit(self, cache: OrderedDict[Any, None], key: Any, size: int, what: str) -> bool:
        if key in cache:
            cache.move_to_end(key)
            self.stats[what + "_hits"] += 1
            return True
        cache[key] = None
        if len(cache) > size:
            cache.popitem(last=False)
        self.stats[what + "_misses"] += 1
        return False

    def work(self, t: float, ns: float, qpn: int | None = None,
             mem: tuple[int, int, int] | None = None) -> float:
        """``ns`` of PU work from ``t`` on the PU free first, after looking up QP ``qpn``'s context and
        the translations of ``mem`` = (key, address, length); a miss is a DMA read the PU waits for.
        When the work is done."""
        m = self.model
        s = t
        if qpn is not None and not self._hit(self.qpc, qpn, m.qp_cache, "qpc"):
            s = self.dma_read(s, m.qpc_bytes)
        if mem is not None:
            key, addr, length = mem
            index = key >> 8
            if not self._hit(self.mtt, (index, -1), m.mtt_cache, "mtt"):  # the MPT entry of the key
                s = self.dma_read(s, m.mtt_entry_bytes)
            # pages are counted from the MR's start, as if every MR began on a page: the pages an access
            # spans then do not depend on where the host put the buffer, so a run is the same run
            mr = self.dev.mrs.get(index)
            off = addr - mr.buf if mr is not None else addr
            page = m.mtt_page
            for p in range(off // page, (off + max(length, 1) - 1) // page + 1):
                if not self._hit(self.mtt, (index, p), m.mtt_cache, "mtt"):
                    s = self.dma_read(s, m.mtt_entry_bytes)
        busy = s - t + ns  # (the PU waits for its misses)
        self.stats["pu_ns"] += int(busy)
        return self.pu.take(t, busy)

    # ------------------------------------------------------------------ the requester
    def post(self, qp: Any, wqes: list[SendWQE]) -> None:
        """``ibv_post_send`` of ``wqes`` (one chain) on engine QP ``qp``: the doorbell, the WQE fetch and
        the payload reads; each WQE reaches the requester when the NIC has processed it."""
        m = self.model
        carrier = self.dev.carrier
        now = carrier.now_ns
        st = self.stats
        if st["doorbells"] & 1023 == 0:
            for line in (self.up, self.down, self.pu):
                line.prune(now)
        st["doorbells"] += 1
        st["wqes"] += len(wqes)
        qpn = qp.qp_num
        # the doorbell: an 8-byte MMIO write crossing host->NIC, then a PU takes it and issues the WQE read
        t = self._lane(now, 8, 1, False) + m.mmio_ns
        t = self.work(t, m.pu_doorbell_ns + m.pu_dma_ns, qpn)
        ring = sum(m.wqe_bytes + (-(-len(w.inline) // 16) * 16 if w.inline else 0) for w in wqes)
        fetched = self.dma_read(t, ring)
        mtu = carrier.mtu if qp.qp_type == e.IBV_QPT_UD else qp.mtu
        last = self._qp_last.get(qpn, 0.0)
        staged = self._staged.setdefault(qpn, deque())
        for w in wqes:
            ready = fetched
            op = w.opcode
            if op in _PAYLOAD_OPS and w.inline is None and w.length:
                s = w.sg[0] if w.sg else None
                mem = (s.lkey, s.addr, w.length) if s is not None else None
                ready = self.dma_read(self.work(ready, m.pu_dma_ns, qpn, mem), w.length)
            n = 1 if op in ATOMICS or op not in _PAYLOAD_OPS else max(1, -(-w.length // mtu))
            # the PU builds the packets: the WQE goes out once its first packet is built, the PU stays
            # busy for all of them
            end = self.work(ready, n * m.pu_packet_ns, qpn)
            ready = end - (n - 1) * m.pu_packet_ns
            if ready < last:
                ready = last  # one QP's WQEs go out in order
            last = ready
            staged.append((ready, w))
            carrier.call_at(int(-(-ready // 1)), self._release, (qp, qp.gen))
        self._qp_last[qpn] = last
        qp.staged += len(wqes)

    def _release(self, arg: tuple[Any, int]) -> None:
        """WQEs the NIC has processed by now go to the requester (or are flushed, if the QP failed)."""
        qp, gen = arg
        staged = self._staged.get(qp.qp_num)
        if not staged:
            return
        now = self.dev.carrier.now_ns
        ready: list[SendWQE] = []
        while staged and staged[0][0] <= now:
            ready.append(staged.popleft()[1])
        if not ready:
            return
        qp.staged -= len(ready)
        if gen != qp.gen:
            return  # the QP was reset (or destroyed) meanwhile: its WQEs are gone
        qp.sq.extend(ready)
        if qp.qp_state == e.IBV_QPS_ERR:
            qp.flush()
        else:
            requester.send_queued(qp)

    # ------------------------------------------------------------------ completions
    def complete(self, qp: Any, cq: Any, wc: Any, solicited: bool) -> None:
        """A CQE for ``wc`` is DMA-written to ``cq``; ``poll`` sees it once it has landed (CQEs of one CQ
        land in order)."""
        m = self.model
        carrier = self.dev.carrier
        self.stats["cqes"] += 1
        t = self.work(carrier.now_ns, m.pu_dma_ns)
        landed = self.dma_write(t, m.cqe_bytes)
        key = id(cq)
        last = self._cq_last.get(key, 0.0)
        if landed < last:
            landed = last
        self._cq_last[key] = landed
        carrier.call_at(int(-(-landed // 1)), self._land, (qp, cq, wc, solicited))

    @staticmethod
    def _land(arg: tuple[Any, Any, Any, bool]) -> None:
        qp, cq, wc, solicited = arg
        if not cq.push(wc, solicited) and qp.qp_state != e.IBV_QPS_ERR:
            qp.to_error()  # CQ overflow (class G), as QPCore._push

    # ------------------------------------------------------------------ the wire (the simulated fabric)
    def tx(self, t: float, code: int, nbytes: int, count: int, qpn: int) -> float:
        """A response (ACK, READ response, atomic ACK) leaves this NIC from ``t``: its PU work and, for READ
        response data, the DMA read of it.  When it may go on the link (requests were charged at post)."""
        kind = _KIND.get(code, _NONE)
        if not kind[4]:
            return t
        m = self.model
        if nbytes:
            t = self.dma_read(self.work(t, m.pu_dma_ns, qpn), nbytes)
        return self.work(t, count * m.pu_packet_ns, qpn)

    def rx(self, t: float, code: int, nbytes: int, count: int, qpn: int,
           reth: tuple[int, int, int] | None) -> float:
        """``count`` packets of opcode ``code`` with ``nbytes`` of payload arrive at ``t`` for QP ``qpn``
        (a WRITE's or READ's RETH as (va, rkey, length)): PU, lookups, a SEND's receive WQE, the payload
        written to memory, an atomic's read-modify-write.  When the responder or completer may see it."""
        m = self.model
        self.stats["packets_in"] += count
        send_start, places, read_req, atomic, _ = _KIND.get(code, _NONE)
        mem = (reth[1], reth[0], reth[2]) if reth is not None else None
        t = self.work(t, count * m.pu_packet_ns, qpn, mem)
        if read_req:
            return t  # (its data is read when the response leaves, see tx)
        if send_start:
            t = self.dma_read(self.work(t, m.pu_dma_ns, qpn), m.wqe_bytes)  # the receive WQE
        if atomic:
            t = self.dma_write(self.dma_read(self.work(t, 2 * m.pu_dma_ns, qpn), 8), 8)
        elif places and nbytes:
            t = self.dma_write(self.work(t, m.pu_dma_ns), nbytes)
        return t


def attach(dev: Any, model: NicModel | None) -> Nic | None:
    """Give soft device ``dev`` a NIC under ``model`` (None: take it away, the engine is as without one)."""
    if model is not None and not isinstance(model, NicModel):
        raise TypeError(f"a NIC model is a NicModel (NicModel.connectx3()), not {model!r}")
    nic = None if model is None else Nic(model, dev)
    dev.nic = nic
    told = getattr(dev.carrier, "nic_attached", None)  # (the simulated fabric times the wire for NICs)
    if told is not None:
        told()
    return nic


#: the named models (``rdmalab perftest --nic NAME``)
MODELS = {"connectx3": NicModel.connectx3}


def by_name(name: str) -> NicModel:
    """The named model (``connectx3``); an unknown name is an error naming the known ones."""
    try:
        return MODELS[name.lower().replace("-", "")]()
    except KeyError:
        raise ValueError(f"unknown NIC model {name!r}: known are {', '.join(MODELS)}") from None
