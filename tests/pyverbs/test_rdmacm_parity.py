"""rdma-core's rdma-cm tests on rdmalab, with a device that has a net interface and an address, beside rxe 6.1's.

scripts/pyverbs_in_netns.sh gives soft0 (linked to veth0, 10.9.0.1) the sysfs layout the suite reads
(docs/rdmacm-tests.md) in new user, mount and network namespaces, and runs the suite's
test_rdmacm.py unchanged: two processes forked from one, both on soft0's one address.  The rxe
baseline for the same layout is tests/pyverbs/rxe-6.1-netif-results.json; the differences allowed
are tests/pyverbs/exceptions-netif.json.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
RXE = json.loads((HERE / "rxe-6.1-netif-results.json").read_text())
EXCEPTIONS: dict[str, str] = json.loads((HERE / "exceptions-netif.json").read_text())
SUITE = "/usr/share/doc/rdma-core/tests"


def _why_not() -> str | None:
    if not os.path.isdir(SUITE):
        return "rdma-core's pyverbs test suite is not installed (apt-get install python3-pyverbs)"
    for tool in ("unshare", "ip"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    userns = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]  # as scripts/pyverbs_in_netns.sh does
    r = subprocess.run(["unshare", *userns, "--mount", "--net", "true"], capture_output=True)
    if r.returncode != 0:
        return f"mount and network namespaces are not available here: {r.stderr.decode().strip()}"
    return None


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict:
    why = _why_not()
    if why:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must run the rdma-cm tests: {why}")
        pytest.skip(why)
    out = tmp_path_factory.mktemp("rdmacm") / "results.json"
    r = subprocess.run(["bash", str(ROOT / "scripts" / "pyverbs_in_netns.sh"), "--only", "test_rdmacm", "--out", str(out),
                        "--rxe", str(HERE / "rxe-6.1-netif-results.json"),
                        "--exceptions", str(HERE / "exceptions-netif.json")],
                       capture_output=True, text=True, cwd=ROOT, timeout=600,
                       env={**os.environ, "PYTHON": sys.executable})
    assert out.exists(), r.stdout + r.stderr
    return json.loads(out.read_text())


def test_the_baseline_is_rxe_with_its_interface() -> None:
    rdmacm = {k: v for k, v in RXE["tests"].items() if ".test_rdmacm." in k}
    assert len(rdmacm) == 10 and all(v["outcome"] == "pass" for v in rdmacm.values())


def test_exceptions_are_rxe_passes_with_reasons() -> None:
    for tid, why in EXCEPTIONS.items():
        assert RXE["tests"][tid]["outcome"] == "pass", tid
        assert len(why) > 40, tid


def test_every_rdmacm_test_that_passes_on_rxe_passes_on_rdmalab(results: dict) -> None:
    missing = []
    for tid, rec in sorted(RXE["tests"].items()):
        if ".test_rdmacm." not in tid or rec["outcome"] != "pass" or tid in EXCEPTIONS:
            continue
        mine = results["tests"].get(tid, {"outcome": "not run", "reason": ""})
        if mine["outcome"] != "pass":
            missing.append(f"{tid}: {mine['outcome']} {mine['reason']}")
    assert not missing, "passes on rxe, not on rdmalab:\n" + "\n".join(missing)


def test_the_exceptions_still_do_not_pass(results: dict) -> None:
    stale = [t for t in EXCEPTIONS if results["tests"].get(t, {}).get("outcome") == "pass"]
    assert not stale, f"these pass now; remove them from tests/pyverbs/exceptions-netif.json: {stale}"
