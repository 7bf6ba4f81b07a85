"""The verbs layer takes its MTU codes and its iWARP test from one place each."""

from __future__ import annotations

import pytest

import rdmalab.verbs.enums as e
from rdmalab.verbs.device import is_iwarp
from rdmalab.verbs.engine.iwdevice import IwDevice
from rdmalab.verbs.engine.node import SoftDevice
from rdmalab.verbs.libibverbs_enums import IBV_TRANSPORT_IB, IBV_TRANSPORT_IWARP


def test_the_verbs_mtu_helpers_are_the_wire_ones() -> None:
    assert [e.mtu_to_bytes(c) for c in (e.IBV_MTU_256, e.IBV_MTU_1024, e.IBV_MTU_4096)] == [256, 1024, 4096]
    assert e.bytes_to_mtu(2048) == e.IBV_MTU_2048
    with pytest.raises(ValueError, match="MTU code 6 is not an IB MTU code"):
        e.mtu_to_bytes(6)  # (once 256 << 5 = 8192, no IB MTU)
    with pytest.raises(ValueError, match="1500 bytes is not an IB MTU"):
        e.bytes_to_mtu(1500)


class _Entry:  # an entry of get_device_list as pyverbs gives it: only transport_type says the transport
    def __init__(self, transport_type: int) -> None:
        self.transport_type = transport_type


def test_is_iwarp_reads_the_libibverbs_transport_type() -> None:
    assert IwDevice.transport_type == IBV_TRANSPORT_IWARP and is_iwarp(IwDevice)
    assert not is_iwarp(SoftDevice)  # a soft RoCE device has no transport_type: InfiniBand's transport
    assert is_iwarp(_Entry(int(IBV_TRANSPORT_IWARP)))
    assert not is_iwarp(_Entry(int(IBV_TRANSPORT_IB)))
    assert not is_iwarp(None)
