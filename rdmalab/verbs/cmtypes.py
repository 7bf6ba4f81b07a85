"""The value types of pyverbs' ``pyverbs.cmid`` (rdma-core ``pyverbs/cmid.pyx``): :class:`ConnParam`,
:class:`AddrInfo` (``rdma_getaddrinfo``), :class:`JoinMCAttrEx`, :class:`UDParam`, and the event
channel and its events, :class:`CMEventChannel` (``rdma_create_event_channel``) and :class:`CMEvent`
(``rdma_get_cm_event``), with :func:`event_str` (``rdma_event_str``).

:mod:`rdmalab.verbs.cmid` (the ``CMID``) re-exports them all; the events name their CMID, which this
module does not import (``cmid`` imports this one), so it is typed ``Any`` here.  Waiting on a channel
advances the carriers of its CMIDs' devices (the simulated fabric's virtual clock, or the UDP carrier's
event loop); on the simulated fabric, a wait for an event that nothing left to happen can bring raises
:class:`~rdmalab.verbs.pyverbs_error.PyverbsRDMAError` instead of hanging.
"""

from __future__ import annotations

import errno
from collections import deque
from collections.abc import Callable
from typing import Any

from rdmalab.verbs.addr import AHAttr
from rdmalab.verbs.cm_enums import RAI_PASSIVE, RDMA_PS_IB, RDMA_PS_TCP, RDMA_PS_UDP, rdma_cm_event_type
from rdmalab.verbs.cmroute import _ipv4, _port
from rdmalab.verbs.engine.node import SoftDevice
from rdmalab.verbs.pyverbs_error import PyverbsRDMAError, PyverbsUserError

EV = rdma_cm_event_type


def event_str(event: int) -> str:
    """``rdma_event_str``: the event's name as librdmacm prints it."""
    try:
        return EV(event).name
    except ValueError:
        return "UNKNOWN EVENT"


class ConnParam:
    """``ConnParam(resources=1, depth=1, flow_control=0, retry=5, rnr_retry=5, srq=0, qp_num=0)``."""

    def __init__(self, resources: int = 1, depth: int = 1, flow_control: int = 0, retry: int = 5,
                 rnr_retry: int = 5, srq: int = 0, qp_num: int = 0) -> None:
        self.responder_resources = resources
        self.initiator_depth = depth
        self.flow_control = flow_control
        self.retry_count = retry
        self.rnr_retry_count = rnr_retry
        self.srq = srq
        self.qp_num = qp_num
        self._private = b""

    @property
    def qpn(self) -> int:
        return self.qp_num

    @qpn.setter
    def qpn(self, val: int) -> None:
        self.qp_num = val

    @property
    def private_data(self) -> bytes:
        return self._private

    def set_private_data(self, data: bytes | str, length: int | None = None) -> None:
        raw = data.encode() if isinstance(data, str) else bytes(data)
        self._private = raw if length is None else raw[:length]

    def __str__(self) -> str:
        rows = [("responder resources", self.responder_resources), ("initiator depth", self.initiator_depth),
                ("flow control", self.flow_control), ("retry count", self.retry_count),
                ("rnr retry count", self.rnr_retry_count), ("srq", self.srq), ("qp number", self.qp_num)]
        return "Connection parameters: \n" + "".join(f"{k:<4}: {v:<4}\n" for k, v in rows)


class AddrInfo:
    """``AddrInfo(src=None, dst=None, src_service=None, dst_service=None, port_space=0, flags=0)``
    (``rdma_getaddrinfo``).  The older pyverbs keyword ``service=`` is the destination's port,
    or the source's with ``RAI_PASSIVE``."""

    def __init__(self, src: Any = None, dst: Any = None, src_service: Any = None, dst_service: Any = None,
                 port_space: int = 0, flags: int = 0, service: Any = None) -> None:
        self.flags = flags
        self.port_space = port_space or RDMA_PS_TCP
        if port_space not in (0, RDMA_PS_TCP, RDMA_PS_UDP, RDMA_PS_IB):
            raise PyverbsRDMAError(f"Failed to get Address Info: port space {port_space:#x} is not "
                                   "RDMA_PS_TCP, RDMA_PS_UDP or RDMA_PS_IB", errno.EINVAL)
        passive = bool(flags & RAI_PASSIVE)
        if service is not None:
            if passive:
                src_service = src_service if src_service is not None else service
            else:
                dst_service = dst_service if dst_service is not None else service
        self.src_addr = _ipv4(src, "source") if src is not None else ("0.0.0.0" if passive else None)
        self.src_port = _port(src_service, "source service")
        self.dst_addr = _ipv4(dst, "destination") if dst is not None else None
        self.dst_port = _port(dst_service, "destination service")
        if src is None and dst is None and not passive:
            raise PyverbsRDMAError("Failed to get Address Info: give src, dst, or both "
                                   "(flags=RAI_PASSIVE to listen on any address)", errno.EINVAL)

    @property
    def passive(self) -> bool:
        return bool(self.flags & RAI_PASSIVE)

    def close(self) -> None:
        pass

    def __repr__(self) -> str:
        return f"<AddrInfo {self.src_addr}:{self.src_port} -> {self.dst_addr}:{self.dst_port}>"


class JoinMCAttrEx:
    """``JoinMCAttrEx(addr, comp_mask=0, join_flags=0)``: only an attribute holder; joining fails (no multicast)."""

    def __init__(self, addr: AddrInfo, comp_mask: int = 0, join_flags: int = 0) -> None:
        self.addr, self.comp_mask, self.join_flags = addr, comp_mask, join_flags


class UDParam:
    """``UDParam(event)``: the remote UD QP an ESTABLISHED event of RDMA_PS_UDP names (SIDR_REP)."""

    def __init__(self, cm_event: CMEvent) -> None:
        if cm_event.ud is None:
            raise PyverbsUserError(f"{cm_event.event_str()} carries no UD parameters")
        self.qp_num, self.qkey, self._ah = cm_event.ud

    @property
    def ah_attr(self) -> AHAttr:
        return self._ah


class _Event:
    __slots__ = ("kind", "cmid", "listen", "status", "private_data", "ud", "info")

    def __init__(self, kind: int, cmid: Any, *, listen: Any = None, status: int = 0,
                 private_data: bytes = b"", ud: tuple[int, int, AHAttr] | None = None, **info: Any) -> None:
        self.kind, self.cmid, self.listen, self.status = kind, cmid, listen, status
        self.private_data, self.ud, self.info = private_data, ud, info


class CMEventChannel:
    """``rdma_create_event_channel``: where the events of the CMIDs made on it queue."""

    def __init__(self) -> None:
        self.queue: deque[_Event] = deque()
        self.ids: list[Any] = []  # its CMIDs (rdmalab.verbs.cmid.CMID)
        self.closed = False

    def post(self, ev: _Event) -> None:
        self.queue.append(ev)

    def wait(self, match: Callable[[_Event], bool] | None = None, what: str = "an rdma_cm event",
             timeout_ms: int | None = None) -> _Event:
        """The next event (the first that ``match`` takes), advancing the devices' carriers meanwhile."""
        start: dict[int, int] = {}

        def found() -> bool:
            return any(match is None or match(ev) for ev in self.queue)

        while True:
            for i, ev in enumerate(self.queue):
                if match is None or match(ev):
                    del self.queue[i]
                    return ev
            devs = list({id(c.device): c.device for c in self.ids if c.device is not None}.values())
            if not devs:
                raise PyverbsRDMAError(f"waiting for {what}: no CMID of this channel is bound to a device",
                                       errno.EINVAL)
            scheds = list({id(d.scheduler): d.scheduler for d in devs}.values())
            for dev in devs:
                start.setdefault(id(dev), dev.now)
            for sched in scheds:
                sched.progress(found)  # waits on a real carrier's socket; runs a simulated fabric's clock
            if found():
                continue
            if timeout_ms is not None and any(d.now - start[id(d)] > timeout_ms * 1_000_000 for d in devs):
                raise PyverbsRDMAError(f"waiting for {what}: nothing came within {timeout_ms} ms", errno.ETIMEDOUT)
            if not any(_external(d) for d in devs) and not any(getattr(s, "pending", 0) for s in scheds):
                raise PyverbsRDMAError(f"waiting for {what}: the simulated fabric has nothing left to do, so it "
                                       "will never come (is the other side listening, or was it already consumed?)",
                                       errno.ENODATA)

    def close(self) -> None:
        self.closed = True

    def set_log_level(self, level: int) -> None:
        pass


def _external(dev: SoftDevice) -> bool:
    """Whether traffic can reach the device from outside this process (a carrier with a socket)."""
    return hasattr(dev.carrier, "fileno")


class CMEvent:
    """``CMEvent(channel)``: the next event of the channel (``rdma_get_cm_event``); it waits for one."""

    def __init__(self, channel: CMEventChannel | None, _ev: _Event | None = None) -> None:
        if _ev is None:
            if channel is None:
                raise PyverbsUserError("CMEvent needs the event channel to take the event from")
            _ev = channel.wait()
        self._ev: _Event | None = _ev
        self.event_type = self._ev.kind
        self.status = self._ev.status
        self.ud = self._ev.ud
        self.id = self._ev.cmid
        self.listen_id = self._ev.listen
        self._private = self._ev.private_data

    @classmethod
    def of(cls, ev: _Event) -> CMEvent:
        """The CMEvent of an event already taken off its channel (``cmstate.wait_event``)."""
        return cls(None, ev)

    @property
    def private_data(self) -> bytes:
        return self._private

    def event_str(self) -> str:
        return event_str(self.event_type)

    def ack_cm_event(self) -> None:
        self._ev = None

    def close(self) -> None:
        self._ev = None

    def set_log_level(self, level: int) -> None:
        pass

    def __repr__(self) -> str:
        return f"<CMEvent {self.event_str()} status={self.status}>"

