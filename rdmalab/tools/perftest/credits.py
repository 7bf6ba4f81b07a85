"""``ib_send_bw``'s receive credits on iWARP (:class:`_Credits`; ``send_rcredit`` in ``src/send_bw.c``,
``ctx_alloc_credit``, ``ctx_set_credit_wqes``, ``clean_scq_credit`` in ``src/perftest_resources.c``).
"""

from __future__ import annotations

import struct
import time
from typing import Any

from rdmalab.tools.oob import PerfDest
from rdmalab.tools.perftest.options import PerftestError, PerftestOptions
from rdmalab.verbs import enums as e
from rdmalab.verbs.mr import MR
from rdmalab.verbs.wr import SGE, SendWR

CREDIT_WRID = 0xC4ED17  # the work request id of a credit RDMA WRITE (perftest uses the QP index)


class _Credits:
    """``ib_send_bw``'s receive credits on iWARP (send_bw.c ``send_rcredit``; perftest_resources.c
    ``ctx_alloc_credit``, ``ctx_set_credit_wqes``, ``run_iter_bw``, ``run_iter_bw_server``).

    iWARP has no RNR: a SEND that finds no receive posted ends the connection with a TERMINATE, so
    perftest paces its sender by credits.  Each side registers 8 bytes (LOCAL_WRITE | REMOTE_WRITE):
    word 0 is the count it writes, word 1 the credit word the peer writes into, whose address and
    rkey go in the first key record in place of the data buffer's.  The receiver RDMA WRITEs its
    receive count (4 bytes, host order: little-endian on x86, as the stock program) into the
    sender's word every ``rx_depth // 3`` receives; the sender posts SEND number ``n`` only while
    ``n + 1 - credit < rx_depth``.  The word is zeroed before each size's run."""

    def __init__(self, pd: Any, rx_depth: int, tx_depth: int) -> None:
        self.mr = MR(pd, 8, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE)
        self.mr.write(bytes(8), 8)
        self.every = max(1, rx_depth // 3)
        self.rx_depth, self.tx_depth = rx_depth, tx_depth
        self.remote: PerfDest | None = None
        self.outstanding = 0          # credit WRITEs posted and not completed
        self.stash: list[Any] = []    # receive completions polled while waiting for a credit WRITE's
        self.written = 0              # credit WRITEs posted in all

    @property
    def addr(self) -> int:
        return self.mr.buf + 4

    def received(self) -> int:
        return int(struct.unpack("<I", bytes(self.mr.read(4, 4)))[0])

    def reset(self) -> None:
        self.mr.write(bytes(4), 4, 4)

    def may_send(self, scnt: int, rx_depth: int) -> bool:
        return scnt + 1 - self.received() < rx_depth

    def take_stash(self) -> list[Any]:
        out, self.stash = self.stash, []
        return out

    def after_receive(self, qp: Any, cq: Any, rcnt: int, opts: PerftestOptions, fab: Any) -> None:
        if (rcnt % self.rx_depth) % self.every:
            return
        if self.remote is None:
            raise PerftestError("a credit is due but the peer's credit word is unknown (no key record yet)")
        while self.outstanding >= self.tx_depth:
            self._poll_credit(cq, opts, fab, "a free send slot for the next credit")
        self.mr.write(struct.pack("<I", rcnt & 0xFFFFFFFF), 4)
        wr = SendWR(wr_id=CREDIT_WRID, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(self.mr.buf, 4, self.mr.lkey)],
                    send_flags=e.IBV_SEND_SIGNALED)
        wr.set_wr_rdma(self.remote.rkey, self.remote.vaddr)
        qp.post_send(wr)
        self.outstanding += 1
        self.written += 1

    def _poll_credit(self, cq: Any, opts: PerftestOptions, fab: Any, what: str) -> None:
        start = time.monotonic()
        while True:
            n, wcs = cq.poll(16)
            for wc in wcs[:n]:
                if wc.wr_id != CREDIT_WRID:
                    self.stash.append(wc)
                    continue
                if wc.status != e.IBV_WC_SUCCESS:
                    raise PerftestError(f"Poll send CQ error status={wc.status} ({e.ibv_wc_status_str(wc.status)}) "
                                        "on a credit RDMA WRITE")
                self.outstanding -= 1
            if n:
                return
            if time.monotonic() - start > opts.timeout:
                raise PerftestError(f"no completion of a credit RDMA WRITE for {opts.timeout:.0f} s while waiting for {what}")
            fab.step(0.01)

    def drain(self, cq: Any, opts: PerftestOptions, fab: Any) -> None:
        """clean_scq_credit: the credit WRITEs still outstanding complete before the report."""
        while self.outstanding > 0:
            self._poll_credit(cq, opts, fab, "the last credit WRITEs (clean_scq_credit)")
