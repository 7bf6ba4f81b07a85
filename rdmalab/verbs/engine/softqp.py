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
from rdmalab.verbs.engine.qpcore import QPCore
from rdmalab.verbs.engine.wqe import RecvWQE, SendWQE


class SoftQP(QPCore):
    """An engine QP (see :mod:`rdmalab.verbs.engine.qpcore` for its state).

    The protocol's entry points are the plain functions of ``requester``, ``responder`` and
    ``completer`` (each takes the QP first), bound here as methods: a call from a device costs
    no extra frame, and a profile names the protocol function itself."""

    kick = requester.send_queued  # the requester sends what it may
    on_timeout = completer.on_timeout  # the retransmit timer expired
    on_request = responder.on_request  # a request packet arrived (from SoftDevice.receive)
    on_response = completer.on_response  # an ACK, NAK or response arrived
    ack = completer.ack  # the completer's fast path for a plain ACK (SoftDevice.receive_ack)
    takes_acks = completer.takes_acks  # whether it would take one now
    flush_ack = responder.flush_ack  # end of the time step: send the ACK held back
    # the responder's fast path for one in-sequence WRITE/SEND packet (SoftDevice.receive_segment)
    segment = responder.segment

    # ------------------------------------------------------------------ work requests
    def post_send(self, wqes: list[SendWQE]) -> None:
        """Queue send WQEs (validated by the caller) and let the requester go (with a NIC model, the
        NIC fetches them first: ``nicmodel.Nic.post``)."""
        nic = self.dev.nic
        if nic is not None and self.qp_state != e.IBV_QPS_ERR:
            nic.post(self, wqes)
            return
        self.sq.extend(wqes)
        if self.qp_state == e.IBV_QPS_ERR:
            self.flush()
        else:
            requester.send_queued(self)

    def post_recv(self, wqes: list[RecvWQE]) -> None:
        self.rq.extend(wqes)
        if self.qp_state == e.IBV_QPS_ERR:
            self.flush()
