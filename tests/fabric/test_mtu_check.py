"""The fabrics refuse a path MTU that is no IB MTU with rdmalab.wire's sentence, naming the value."""

from __future__ import annotations

import pytest

from rdmalab.fabric.sim import Fabric
from rdmalab.fabric.switched import SwitchedFabric


@pytest.mark.parametrize("mtu", [1500, 0, 8192])
def test_the_simulated_fabric_refuses_a_bad_mtu_naming_it(mtu: int) -> None:
    with pytest.raises(ValueError, match=rf"^mtu must be an IB MTU \(256, 512, 1024, 2048 or 4096 bytes\), not {mtu}$"):
        Fabric(mtu=mtu)


def test_the_switched_fabric_refuses_a_bad_payload_naming_it() -> None:
    with pytest.raises(ValueError, match=r"^payload \(the QPs' path MTU\) must be an IB MTU \(.*\), not 1000$"):
        SwitchedFabric(payload=1000)
