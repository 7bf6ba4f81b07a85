"""rdma-core's pyverbs test suite on rdmalab.verbs: every test that passes on kernel rxe passes here.

The suite's files come from Debian's python3-pyverbs (installed in CI by scripts/test.sh); the rxe
outcomes were recorded in a VM by scripts/pyverbs_on_rxe.sh (tests/pyverbs/rxe-6.1-results.json),
and the documented differences are tests/pyverbs/exceptions.json (see docs/pyverbs.md).
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
REPO = HERE.parent.parent
SUITE = Path("/usr/share/doc/rdma-core/tests")
RXE = json.loads((HERE / "rxe-6.1-results.json").read_text())
EXCEPTIONS: dict[str, str] = json.loads((HERE / "exceptions.json").read_text())

needs_suite = pytest.mark.skipif(not SUITE.is_dir(), reason="rdma-core's pyverbs tests are not installed "
                                 "(apt-get install python3-pyverbs)")


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("pyverbs") / "rdmalab-results.json"
    run = subprocess.run([sys.executable, str(REPO / "scripts" / "run_pyverbs_suite.py"), "--out", str(out)],
                         capture_output=True, text=True, timeout=600)
    print(run.stdout)  # the side-by-side table and the count of passing tests
    assert run.returncode == 0, run.stdout + run.stderr
    return json.loads(out.read_text())


def test_baseline_is_a_real_rxe_run() -> None:
    meta = RXE["meta"]
    assert meta["engine"].startswith("kernel rxe") and meta["kernel"].startswith("6.1.")
    assert meta["rdma_core"] and meta["suite_args"] == ["--dev", "rxe0", "--gid", "1"]
    outcomes = [r["outcome"] for r in RXE["tests"].values()]
    assert outcomes.count("pass") >= 80 and "import-error" not in outcomes


def test_exceptions_are_rxe_passes_with_reasons() -> None:
    for tid, why in EXCEPTIONS.items():
        assert RXE["tests"][tid]["outcome"] == "pass", tid
        assert len(why) > 40, tid


@needs_suite
def test_every_rxe_pass_passes_on_rdmalab(results: dict) -> None:
    missing = []
    for tid, rec in sorted(RXE["tests"].items()):
        if rec["outcome"] != "pass" or tid in EXCEPTIONS:
            continue
        mine = results["tests"].get(tid, {"outcome": "not run", "reason": ""})
        if mine["outcome"] != "pass":
            missing.append(f"{tid}: {mine['outcome']} {mine['reason']}")
    assert not missing, "passes on rxe, not on rdmalab:\n" + "\n".join(missing)


@needs_suite
def test_exceptions_still_do_not_pass(results: dict) -> None:
    # An exception that starts passing must leave the list (and docs/pyverbs.md).
    stale = [t for t in EXCEPTIONS if results["tests"].get(t, {}).get("outcome") == "pass"]
    assert not stale, f"these pass now; remove them from tests/pyverbs/exceptions.json: {stale}"


@needs_suite
def test_skips_are_for_missing_features_not_errors(results: dict) -> None:
    # Tests rxe skips must not crash here: a skip or pass, never a failure or an error.
    # (Provider/feature modules rdmalab stands in for may fail to import: those are listed.)
    bad = [f"{t}: {r['outcome']} {r['reason']}" for t, r in results["tests"].items()
           if r["outcome"] in ("fail", "error") and RXE["tests"].get(t, {}).get("outcome") == "skip"]
    assert not bad, "\n".join(bad)


@needs_suite
def test_rxe_skips_skip_here_for_the_same_reason(results: dict) -> None:
    # Where rxe lacks a feature, rdmalab lacks it too and says so the same way (device name aside).
    differ = []
    for tid, rec in sorted(RXE["tests"].items()):
        if rec["outcome"] != "skip":
            continue
        mine = results["tests"].get(tid, {"outcome": "not run", "reason": ""})
        if mine["outcome"] != "skip" or mine["reason"].replace("soft0", "rxe0") != rec["reason"]:
            differ.append(f"{tid}: rxe skips ({rec['reason']}); rdmalab: {mine['outcome']} {mine['reason']}")
    assert not differ, "\n".join(differ)


@pytest.mark.skipif(not (shutil.which("/usr/bin/python3") and os.path.exists("/usr/lib/python3/dist-packages/pyverbs")),
                    reason="Debian's python3-pyverbs is not installed")
def test_enum_tables_match_installed_pyverbs() -> None:
    run = subprocess.run(["/usr/bin/python3", str(HERE / "gen_enums.py"), "--check"], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
