"""The key-value store with the kernel's rxe beside it (marked ``live``: boots the lab VM; RDMALAB_LIVE=1).

In the VM: the store's server, ``python -m rdmalab.tools.kvnet serve``, on the soft engine over UDP in
namespace ``peer`` (10.0.0.2), with a concurrent writer rewriting the key ``hot`` in two halves; its client
is pyverbs on rxe0 (``tests/live/kv_rxe_client.py``, Debian's python3): PUTs by RPC (an RC WRITE of the
request, a UD SEND back from the engine), GETs both ways, and GETs of ``hot`` by READs with and without the
CRC check, alternating.  The kernel is the client's NIC: its READs, WRITEs and UD receives are rxe's.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from rdmalab.live.vm import VM

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.live

GUEST = r"""
OUT="$RDMALAB_JOB"; PY="$RDMALAB_PYTHON"
export PYTHONPATH="$ROOT"
ENG="ip netns exec $PEER_NS"
# a slow VM (TCG): a READ round trip takes milliseconds, so the writer's halves are 50 ms apart
$ENG timeout 300 $PY -u -m rdmalab.tools.kvnet serve --ip $PEER_IP --hot hot --split-us 50000 --churn-us 150000 \
  --poll-us 200 --timeout 280 > "$OUT/kv.server.out" 2>&1 &
for i in $(seq 1 300); do $ENG ss -ltn | grep -q ":18750 " && break; sleep 0.1; done
timeout 280 /usr/bin/python3 "$ROOT/tests/live/kv_rxe_client.py" $PEER_IP hot > "$OUT/kv.rxe.out" 2>&1
echo $? > "$OUT/kv.rxe.rc"; wait $!; echo $? > "$OUT/kv.server.rc"
"""


def test_pyverbs_on_rxe_gets_and_puts_against_the_engines_store(lab_vm: VM) -> None:
    r = lab_vm.run_job(f"ROOT={shlex.quote(str(ROOT))}\n" + GUEST, timeout=320, capture=False, name="kv rxe")
    out = r.job_dir
    assert out is not None
    text = {n: (out / n).read_text() if (out / n).exists() else "" for n in
            ("kv.rxe.out", "kv.server.out", "kv.rxe.rc", "kv.server.rc")}
    assert text["kv.rxe.rc"].strip() == "0" and text["kv.server.rc"].strip() == "0", text
    got = json.loads(text["kv.rxe.out"].strip().splitlines()[-1])
    assert got["wrong"] == [] and got["absent"] == [None, 1], got  # 1: the RPC's NOT_FOUND status
    assert len(got["reads"]) == 12 and min(got["reads"]) >= 1
    served = got["server"]["served"]
    assert served["put"] == 20 and served["get"] == 12 + 1
    # checked and unchecked READs alternate (kv_rxe_client.py), at least 100 of each
    assert min(got["hot_unchecked"]["reads"], got["hot_checked"]["reads"]) >= 100, got
    assert got["hot_unchecked"]["torn_returned"] > 0 and got["hot_unchecked"]["retries"] == 0, got
    assert got["hot_checked"]["torn_returned"] == 0 and got["hot_checked"]["retries"] > 0, got
