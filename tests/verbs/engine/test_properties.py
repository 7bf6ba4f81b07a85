"""Property-based stateful tests: random RC operation mixes on a faulty fabric end like a simple model.

The model is sequential: the responder executes requests in PSN order exactly once, so the
remote memory after a run equals the result of applying the posted operations one after the
other, and each READ/atomic returns the value the model had at that point.  Local buffers are
split so that no local byte is both a source and a destination (IBA gives no ordering between
READ data placement and later WRITE source reads without a fence).

A retried READ is re-executed by the responder (rxe ``duplicate_request``), so it can see a
WRITE posted after it.  Like a correct program, the model fences a WRITE or atomic that touches
bytes an unfinished READ reads (``IBV_SEND_FENCE``), which makes the sequential model exact.
"""

from __future__ import annotations

import random
import struct
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import rdmalab.verbs.enums as e
from rdmalab.fabric import Fabric
from rdmalab.fabric.harness import EndpointPair

REMOTE = 1 << 15  # B's memory under test: [0, REMOTE)
ATOMIC_BASE = REMOTE - 256  # atomics within the last 256 bytes (8-byte aligned)
SRC = 1 << 15  # A's source bytes: [0, SRC)
DEST = 1 << 15  # A's READ/atomic landing slots: [SRC, SRC + DEST)
RECV_BASE = 1 << 15  # B's receive slots: [RECV_BASE, RECV_BASE + 16K)
M64 = 2**64 - 1


class RCUnderFaults(RuleBasedStateMachine):
    @initialize(seed=st.integers(0, 2**16), loss=st.sampled_from([0.0, 0.05, 0.2]),
                dup=st.sampled_from([0.0, 0.1]), reorder=st.sampled_from([0.0, 0.1, 0.3]),
                mtu=st.sampled_from([e.IBV_MTU_256, e.IBV_MTU_1024]))
    def setup(self, seed: int, loss: float, dup: float, reorder: float, mtu: int) -> None:
        fab = Fabric(seed=seed, mtu=4096, trace=False)
        fab.set_faults(loss=loss, duplicate=dup, reorder=reorder)
        self.p = EndpointPair(fab, size=1 << 16, path_mtu=mtu, timeout=8, retry_cnt=7, rnr_retry=7, min_rnr_timer=1,
                      max_rd_atomic=4, max_dest_rd_atomic=4)
        rng = random.Random(seed)
        src = bytes(rng.getrandbits(8) for _ in range(SRC))
        self.p.a.mr.write(src, SRC)
        init = bytes(rng.getrandbits(8) for _ in range(REMOTE))
        self.p.b.mr.write(init, REMOTE)
        self.remote = bytearray(init)
        self.src = src
        self.expect_local: dict[int, bytes] = {}  # A's landing offset -> expected bytes
        self.expect_recv: list[tuple[int, bytes]] = []
        self.next_slot = SRC
        self.next_recv = RECV_BASE
        self.posted = 0
        self.atomics = 0
        self.reads: list[tuple[int, int]] = []  # remote ranges READ since the last fence

    def _slot(self, n: int) -> int | None:
        if self.next_slot + n > SRC + DEST:
            return None
        at = self.next_slot
        self.next_slot += (n + 7) & ~7
        return at

    def _post(self, op: int, **kw: Any) -> None:
        self.posted += 1
        self.p.send(self.p.a, op, wr_id=self.posted, **kw)

    def _fence(self, start: int, n: int) -> int:
        if any(s < start + n and start < end for s, end in self.reads):
            self.reads.clear()
            return e.IBV_SEND_SIGNALED | e.IBV_SEND_FENCE
        return e.IBV_SEND_SIGNALED

    @rule(off=st.integers(0, SRC - 1), dst=st.integers(0, ATOMIC_BASE - 1), n=st.integers(0, 6000))
    def write(self, off: int, dst: int, n: int) -> None:
        n = min(n, SRC - off, ATOMIC_BASE - dst)
        self.remote[dst:dst + n] = self.src[off:off + n]
        self._post(e.IBV_WR_RDMA_WRITE, offset=off, length=n, remote=dst, flags=self._fence(dst, n))

    @rule(src=st.integers(0, REMOTE - 1), n=st.integers(0, 6000))
    def read(self, src: int, n: int) -> None:
        n = min(n, REMOTE - src)
        at = self._slot(n)
        if at is None:
            return
        self.expect_local[at] = bytes(self.remote[src:src + n])
        self.reads.append((src, src + n))
        self._post(e.IBV_WR_RDMA_READ, offset=at, length=n, remote=src)

    @rule(word=st.integers(0, 31), add=st.integers(0, M64))
    def fetch_add(self, word: int, add: int) -> None:
        at = self._slot(8)
        if at is None:
            return
        va = ATOMIC_BASE + 8 * word
        (old,) = struct.unpack("=Q", self.remote[va:va + 8])
        self.expect_local[at] = struct.pack("=Q", old)
        self.remote[va:va + 8] = struct.pack("=Q", (old + add) & M64)
        self.atomics += 1
        self._post(e.IBV_WR_ATOMIC_FETCH_AND_ADD, offset=at, length=8, remote=va, compare_add=add,
                   flags=self._fence(va, 8))

    @rule(word=st.integers(0, 31), hit=st.booleans(), swap=st.integers(0, M64))
    def cmp_swap(self, word: int, hit: bool, swap: int) -> None:
        at = self._slot(8)
        if at is None:
            return
        va = ATOMIC_BASE + 8 * word
        (old,) = struct.unpack("=Q", self.remote[va:va + 8])
        compare = old if hit else (old ^ 1)
        self.expect_local[at] = struct.pack("=Q", old)
        if old == compare:
            self.remote[va:va + 8] = struct.pack("=Q", swap)
        self.atomics += 1
        self._post(e.IBV_WR_ATOMIC_CMP_AND_SWP, offset=at, length=8, remote=va, compare_add=compare, swap=swap,
                   flags=self._fence(va, 8))

    @precondition(lambda self: self.next_recv < RECV_BASE + (1 << 14) - 3000)
    @rule(off=st.integers(0, SRC - 3000), n=st.integers(0, 3000), post_late=st.booleans())
    def send(self, off: int, n: int, post_late: bool) -> None:
        at = self.next_recv
        self.next_recv += (n + 7) & ~7 or 8
        self.expect_recv.append((at, self.src[off:off + n]))
        if not post_late:
            self.p.b.recv(offset=at, length=n)
        self._post(e.IBV_WR_SEND, offset=off, length=n)
        if post_late:  # the receive comes late: RNR NAKs and retries first
            self.p.fabric.advance(3000)
            self.p.b.recv(offset=at, length=n)

    @rule(ns=st.integers(0, 200_000))
    def let_time_pass(self, ns: int) -> None:
        self.p.fabric.advance(ns)

    @invariant()
    def never_an_error(self) -> None:
        if hasattr(self, "p"):
            assert self.p.a.qp.qp_state == e.IBV_QPS_RTS and self.p.b.qp.qp_state == e.IBV_QPS_RTS

    def teardown(self) -> None:
        if not hasattr(self, "p"):
            return
        p = self.p
        wcs = p.wait(p.a.cq, self.posted, max_steps=2_000_000)
        assert [w.status for w in wcs] == [e.IBV_WC_SUCCESS] * self.posted
        assert [w.wr_id for w in wcs] == list(range(1, self.posted + 1))  # in order
        recvs = p.wait(p.b.cq, len(self.expect_recv), max_steps=2_000_000)
        assert [w.status for w in recvs] == [0] * len(self.expect_recv)
        assert p.b.mr.read(REMOTE, 0) == bytes(self.remote)
        for at, data in self.expect_local.items():
            assert p.a.mr.read(len(data), at) == data
        for (at, data), wc in zip(self.expect_recv, recvs, strict=True):
            assert wc.byte_len == len(data) and p.b.mr.read(len(data), at) == data
        assert p.b.qp.engine.resp.atomics_executed == self.atomics  # no atomic executed twice


RCUnderFaults.TestCase.settings = settings(max_examples=150, stateful_step_count=30, deadline=None)
TestRCUnderFaults = RCUnderFaults.TestCase
