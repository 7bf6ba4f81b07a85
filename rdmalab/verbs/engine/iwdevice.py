"""A soft iWARP device (an RNIC, like Linux siw): the same verbs, QPs on the iWARP transport, and a TCP stack.

An :class:`IwDevice` is a :class:`~rdmalab.verbs.engine.node.SoftDevice` (memory regions,
keys, the clock and timers of its carrier) whose QPs are
:class:`~rdmalab.verbs.engine.iwarp.IwQP` and whose connections are TCP connections from its
:class:`TcpStack`: ``rdma_cm`` on it (:mod:`rdmalab.verbs.cmid_iwarp`) listens and connects on TCP and
runs MPA instead of sending CM MADs.  ``get_device_list`` shows it as node type RNIC, transport
iWARP, as libibverbs shows siw.  Two stacks exist: the simulated fabric's TCP model
(:mod:`rdmalab.fabric.simtcp`) and the kernel's TCP (:mod:`rdmalab.fabric.tcpkernel`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from rdmalab.verbs import libibverbs_enums as lib
from rdmalab.verbs.engine.carrier import Carrier
from rdmalab.verbs.engine.iwarp import IwQP, Stream
from rdmalab.verbs.engine.node import SoftDevice

#: ``on_result(stream, None)`` when connected, ``on_result(None, why)`` when not (refused, unreachable)
ConnectResult = Callable[[Stream | None, str | None], None]


class TcpStack(Protocol):
    """What an iWARP device needs from TCP: listen, connect, and streams (``Stream``) with addresses.

    A stream made here has ``local`` and ``peer`` as ``(ip, port)`` strings/ints besides the
    ``Stream`` methods.  Callbacks run from the carrier's scheduler, never from inside a call."""

    def listen(self, ip: str, port: int, on_accept: Callable[[Any], None]) -> None:
        """Accept connections to ``ip:port`` (``0.0.0.0``: any address of the stack's devices);
        ``on_accept(stream)`` for each.  Raises ``OSError`` (EADDRINUSE) if taken."""

    def unlisten(self, ip: str, port: int) -> None: ...

    def connect(self, src: tuple[str, int], dst: tuple[str, int], on_result: ConnectResult) -> None:
        """Open a connection from ``src`` to ``dst`` (TCP_NODELAY, as siw sets it)."""


class IwDevice(SoftDevice):
    """A soft iWARP device on ``carrier`` (its clock and scheduler) with TCP from ``tcp``.

    ``mpa_crc`` makes its MPA frames ask for CRC32c (the C flag); siw never asks, but honours it."""

    transport = "iwarp"
    node_type = int(lib.IBV_NODE_RNIC)
    transport_type = int(lib.IBV_TRANSPORT_IWARP)
    qp_engine = IwQP

    def __init__(self, name: str, ipv4: int, mac: int, carrier: Carrier, tcp: TcpStack, seed: int = 0,
                 mpa_crc: bool = False) -> None:
        super().__init__(name, ipv4, mac, carrier, seed)
        self.tcp = tcp
        self.mpa_crc = mpa_crc

    def receive(self, pkt: Any) -> None:
        self.drop(pkt, "an iWARP device takes no RoCE packets")

    def receive_segment(self, *args: Any, **kw: Any) -> bool:
        return False
