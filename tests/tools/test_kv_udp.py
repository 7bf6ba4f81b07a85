"""The key-value store over RoCEv2/UDP: server and client as two processes (``python -m rdmalab.tools.kvnet``)
in two network namespaces joined by a veth pair, each the soft engine on its own UDP socket.

Needs root (``ip netns``, raw sockets); skips, saying so, elsewhere.  The kernel's rxe as the client is the
live test (tests/live/test_kv_rxe.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from netns_util import veth_namespaces

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def namespaces() -> Iterator[tuple[str, str]]:
    with veth_namespaces("kv", "10.97.0") as pair:
        yield pair


def test_kv_over_udp_between_two_engines(namespaces: tuple[str, str]) -> None:
    """40 PUTs by RPC, then every key by READs and by RPC (both right); the absent key absent both ways; 100
    GETs by READs of a key the server's CPU rewrites in two halves: unchecked, some return a value never
    stored; checked, none does, and the checks retried."""
    a, b = namespaces
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    mod = [sys.executable, "-m", "rdmalab.tools.kvnet"]
    srv = subprocess.Popen(["ip", "netns", "exec", a, *mod, "serve", "--ip", "10.97.0.1", "--hot", "hot",
                            "--split-us", "300", "--churn-us", "1500", "--timeout", "60"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    time.sleep(0.3)
    cli = subprocess.run(["ip", "netns", "exec", b, *mod, "client", "10.97.0.1", "--ip", "10.97.0.2", "--hot", "hot",
                          "--puts", "40", "--reads", "100", "--timeout", "60"],
                         capture_output=True, text=True, timeout=120, env=env)
    s_out, _ = srv.communicate(timeout=120)
    assert cli.returncode == 0 and srv.returncode == 0, cli.stdout + cli.stderr + "\n---\n" + s_out
    got = json.loads(cli.stdout.strip().splitlines()[-1])
    assert got["puts"] == 40 and got["wrong"] == [] and got["absent"] == [None, None]
    keys = len(got["read_round_trips"])  # the distinct keys of the 40 PUTs (drawn from 20)
    assert 1 < keys <= 20 and min(got["read_round_trips"]) == 1
    served = got["server"]["served"]
    assert served["put"] == 40 and served["get"] == keys + 1  # an RPC GET of each key, and of the absent one
    assert got["server"]["hot_puts"] > 0
    unchecked, checked = got["hot_unchecked"], got["hot_checked"]
    assert unchecked["retries"] == 0 and unchecked["torn_returned"] > 0, unchecked
    assert checked["torn_returned"] == 0 and checked["retries"] > 0, checked


#: runs tests/live/kv_rxe_client.py (written for pyverbs on rxe) on the soft engine: pyverbs imports answered
#: by rdmalab.verbs (rdmalab.verbs.pyverbs_alias), its "rxe0" a soft device on UDP
_AS_PYVERBS = """
import runpy, sys
import rdmalab.verbs.pyverbs_alias as alias
alias.install()
from rdmalab.fabric.udp import UdpFabric
from rdmalab.verbs.device import set_default_devices
fab = UdpFabric(ip="10.97.0.2", name="rxe0", poll_wait=0.002)
set_default_devices(lambda: fab)
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def test_the_live_tests_pyverbs_client_against_the_server(namespaces: tuple[str, str]) -> None:
    """The live test's client (its own implementation of the formats, for pyverbs on rxe), run here through the
    pyverbs alias: it agrees with the server on every value, and sees torn values only without the check."""
    a, b = namespaces
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    srv = subprocess.Popen(["ip", "netns", "exec", a, sys.executable, "-m", "rdmalab.tools.kvnet", "serve", "--ip",
                            "10.97.0.1", "--hot", "hot", "--split-us", "300", "--churn-us", "1500", "--timeout", "60"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    time.sleep(0.3)
    cli = subprocess.run(["ip", "netns", "exec", b, sys.executable, "-c", _AS_PYVERBS,
                          str(ROOT / "tests" / "live" / "kv_rxe_client.py"), "10.97.0.1", "hot"],
                         capture_output=True, text=True, timeout=120, env=env)
    s_out, _ = srv.communicate(timeout=120)
    assert cli.returncode == 0 and srv.returncode == 0, cli.stdout + cli.stderr + "\n---\n" + s_out
    got = json.loads(cli.stdout.strip().splitlines()[-1])
    assert got["wrong"] == [] and got["absent"] == [None, 1] and len(got["reads"]) == 12
    assert got["server"]["served"]["put"] == 20 and got["server"]["served"]["get"] == 13
    assert got["hot_unchecked"]["torn_returned"] > 0 and got["hot_checked"]["torn_returned"] == 0
    assert got["hot_checked"]["retries"] > 0
    assert min(got["hot_unchecked"]["reads"], got["hot_checked"]["reads"]) >= 100
