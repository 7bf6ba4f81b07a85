"""The live tools' ``-m`` refuses a value that is no IB MTU with rdmalab.wire's sentence, naming it, before
anything opens a socket or a device (no VM)."""

from __future__ import annotations

import io

import pytest

from rdmalab.tools import perftest, pingpong


@pytest.mark.parametrize("mtu", [1000, 1500, 8192])
def test_perftest_refuses_an_mtu_that_is_no_ib_mtu(mtu: int) -> None:
    with pytest.raises(perftest.PerftestError, match=rf"^-m \(the MTU\) must be an IB MTU \(256, 512, 1024, 2048 or "
                                                     rf"4096 bytes\), not {mtu}$"):
        perftest.run(perftest.PerftestOptions(mtu=mtu), io.StringIO())


def test_pingpong_refuses_a_path_mtu_that_is_no_ib_mtu() -> None:
    with pytest.raises(pingpong.PingpongError, match=r"^-m \(the path MTU\) must be an IB MTU \(.*\), not 1000$"):
        pingpong.run(pingpong.PingpongOptions(mtu=1000), io.StringIO())
