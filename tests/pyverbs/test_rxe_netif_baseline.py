"""The rxe baseline with a net interface (issue 18) holds what docs/pyverbs.md says of it.

tests/pyverbs/rxe-6.1-netif-results.json was recorded by ``NETIF=1 scripts/pyverbs_on_rxe.sh``:
the same suite and options as rxe-6.1-results.json, with rxe0's net interface (veth0,
10.9.0.1) visible where the suite looks for it.  It must differ from the first baseline only in
the rdma-cm tests that needed the interface, and all ten test_rdmacm tests pass on it.
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
BASE = json.loads((HERE / "rxe-6.1-results.json").read_text())
NETIF = json.loads((HERE / "rxe-6.1-netif-results.json").read_text())
NO_NETIF = "Device rxe0 doesn't have net interface"


def test_netif_baseline_is_a_real_rxe_run_with_the_interface() -> None:
    meta = NETIF["meta"]
    assert meta["engine"].startswith("kernel rxe") and meta["kernel"].startswith("6.1.")
    assert meta["suite_args"] == BASE["meta"]["suite_args"] == ["--dev", "rxe0", "--gid", "1"]
    assert meta["rdma_core"] == BASE["meta"]["rdma_core"]
    assert "device/net" in meta["device"] and "10.9.0.1" in meta["device"]
    assert set(NETIF["tests"]) == set(BASE["tests"])


def test_only_the_tests_that_wanted_a_net_interface_changed() -> None:
    changed = {t for t in BASE["tests"]
               if (BASE["tests"][t]["outcome"], BASE["tests"][t]["reason"])
               != (NETIF["tests"][t]["outcome"], NETIF["tests"][t]["reason"])}
    wanted = {t for t, r in BASE["tests"].items() if r["reason"] == NO_NETIF}
    assert changed == wanted and len(wanted) == 11
    assert not any(r["reason"] == NO_NETIF for r in NETIF["tests"].values())


def test_every_test_rdmacm_test_passes_on_rxe_with_the_interface() -> None:
    rdmacm = {t: r["outcome"] for t, r in NETIF["tests"].items() if t.startswith("tests.test_rdmacm.")}
    assert len(rdmacm) == 10 and set(rdmacm.values()) == {"pass"}
    # the mlx5 rdma-cm tests now reach their own device check
    mlx5 = [r["reason"] for t, r in NETIF["tests"].items() if t.startswith("tests.test_mlx5_rdmacm.")]
    assert mlx5 == ["Can not run the test over non MLX5 device"] * 2
