"""``pyverbs.cq``: completion queues, work completions and completion channels.

``CQ.poll`` is where a program waits, so it is also where the engine moves: when the CQ is
empty, ``poll`` asks the scheduler of the device's carrier to make progress (on the simulated
fabric, virtual time passes) until a completion arrives or a bounded number of steps has run.
A busy-poll loop written for hardware therefore works unchanged, and no threads are needed.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from rdmalab.verbs import enums as e
from rdmalab.verbs.pyverbs_error import EINVAL, PyverbsRDMAError

WC_OPCODE_NAMES = {0: "SEND", 1: "RDMA_WRITE", 2: "RDMA_READ", 3: "COMP_SWAP", 4: "FETCH_ADD", 5: "BIND_MW",
                   6: "LOCAL_INV", 128: "RECV", 129: "RECV_RDMA_WITH_IMM"}


class WC:
    """A work completion, with pyverbs' fields."""

    def __init__(self, wr_id: int = 0, status: int = 0, opcode: int = 0, vendor_err: int = 0, byte_len: int = 0,
                 qp_num: int = 0, src_qp: int = 0, imm_data: int = 0, wc_flags: int = 0, pkey_index: int = 0,
                 slid: int = 0, sl: int = 0, dlid_path_bits: int = 0) -> None:
        self.wr_id = wr_id
        self.status = status
        self.opcode = opcode
        self.vendor_err = vendor_err
        self.byte_len = byte_len
        self.qp_num = qp_num
        self.src_qp = src_qp
        self.imm_data = imm_data
        self.wc_flags = wc_flags
        self.pkey_index = pkey_index
        self.slid = slid
        self.sl = sl
        self.dlid_path_bits = dlid_path_bits
        self._sgid: int | None = None  # UD receives: the sender's GID (for AH(pd, wc=...))
        self._dgid: int | None = None

    @property
    def invalidated_rkey(self) -> int:
        return self.imm_data

    def __str__(self) -> str:
        return (f"WC(wr_id={self.wr_id}, status={e.ibv_wc_status_str(self.status)}, "
                f"opcode={WC_OPCODE_NAMES.get(self.opcode, self.opcode)}, byte_len={self.byte_len}, "
                f"qp_num={self.qp_num:#x}, src_qp={self.src_qp:#x}, imm_data={self.imm_data:#x}, "
                f"wc_flags={self.wc_flags:#x})")

    __repr__ = __str__


class CompChannel:
    """``CompChannel(ctx)``: where armed CQs report completion events."""

    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx
        self.events: deque[Any] = deque()

    def get_cq_event(self, cq: Any) -> None:
        """Wait (running the device's scheduler) for an event on ``cq``; pyverbs blocks here."""
        self.ctx.device.scheduler.progress(lambda: bool(self.events))
        if not self.events:
            raise PyverbsRDMAError("Failed to get CQ event: no event will ever come (the carrier is idle)", EINVAL)
        got = self.events.popleft()
        if got is not cq:
            raise PyverbsRDMAError("Failed to get CQ event: the event is for another CQ", EINVAL)

    def close(self) -> None:
        pass


class CQ:
    """``CQ(ctx, cqe, cq_context=None, channel=None, comp_vector=0)``."""

    def __init__(self, ctx: Any, cqe: int, cq_context: Any = None, channel: CompChannel | None = None,
                 comp_vector: int = 0) -> None:
        if cqe < 1 or cqe > 1 << 20:
            raise PyverbsRDMAError(f"Failed to create CQ with {cqe} entries", EINVAL)
        self.ctx = ctx
        self.cqe = cqe
        self.cq_context = cq_context
        self.channel = channel
        self.comp_vector = comp_vector
        self._q: deque[WC] = deque()
        self._armed = 0  # 0 not armed, 1 any completion, 2 solicited only
        self.overflowed = False
        self.events_acked = 0

    # ------------------------------------------------------------------ the verbs
    def poll(self, num_entries: int = 1) -> tuple[int, list[WC]]:
        """Up to ``num_entries`` completions as ``(count, [WC, ...])``; runs the scheduler if empty."""
        q = self._q
        if not q:
            self.ctx.device.scheduler.progress(lambda: bool(q))
        out = [q.popleft() for _ in range(min(num_entries, len(q)))]
        return len(out), out

    def req_notify(self, solicited_only: bool = False) -> None:
        self._armed = 2 if solicited_only else 1

    def ack_events(self, num_events: int) -> None:
        self.events_acked += num_events

    def close(self) -> None:
        self._q.clear()

    def __len__(self) -> int:
        return len(self._q)

    # ------------------------------------------------------------------ engine side
    def push(self, wc: WC, solicited: bool = False) -> bool:
        """Add a completion; False (and nothing added) if the CQ is full (an overflow)."""
        if len(self._q) >= self.cqe:
            self.overflowed = True
            return False
        self._q.append(wc)
        if self._armed and (self._armed == 1 or solicited or wc.status != e.IBV_WC_SUCCESS):
            self._armed = 0
            if self.channel is not None:
                self.channel.events.append(self)
        return True
