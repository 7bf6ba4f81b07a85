"""The engine QP with its protocol: :class:`QPCore` driven by the requester, responder and completer.

This is what the pyverbs-shaped :class:`rdmalab.verbs.qp.QP` translates its calls into, and
what a device dispatches arriving packets to (``SoftDevice.receive``): requests go to the
responder, ACKs and responses to the completer; the retransmit timer runs the completer; a QP
entering RTS, a new send WQE and a completed WQE run the requester (rxe's tasks ``req``,
``resp`` and ``comp``, run here to completion one after the other, never concurrently).
"""

from __future__ import annotations

from rdmalab.verbs import enums as e
from rdmalab.verbs.engine import completer, requester, responder
from rdmalab.verbs.engine.packet import Pkt
from rdmalab.verbs.engine.qpcore import QPCore
from rdmalab.verbs.engine.wqe import RecvWQE, SendWQE


class SoftQP(QPCore):
    """An engine QP (see :mod:`rdmalab.verbs.engine.qpcore` for its state)."""

    def kick(self) -> None:
        requester.run(self)

    def on_timeout(self) -> None:
        completer.on_timeout(self)

    # ------------------------------------------------------------------ work requests
    def post_send(self, wqes: list[SendWQE]) -> None:
        """Queue send WQEs (validated by the caller) and let the requester go."""
        self.sq.extend(wqes)
        if self.qp_state == e.IBV_QPS_ERR:
            self.flush()
        else:
            requester.run(self)

    def post_recv(self, wqes: list[RecvWQE]) -> None:
        self.rq.extend(wqes)
        if self.qp_state == e.IBV_QPS_ERR:
            self.flush()

    # ------------------------------------------------------------------ packets in (from SoftDevice)
    def on_request(self, pkt: Pkt) -> None:
        responder.on_request(self, pkt)

    # the responder's fast path for one in-sequence WRITE/SEND packet (SoftDevice.receive_segment);
    # a plain function as a class attribute, so that the call costs no extra frame
    segment = responder.segment

    def on_response(self, pkt: Pkt) -> None:
        completer.on_response(self, pkt)

    def flush_ack(self) -> None:
        responder.flush_ack(self)
