"""Start-up of the engine's servers beside the stock tools', in the lab VM (marked ``live``; issue 21).

The lab VM (``lab_vm``: TCG when KVM is not there, as in the lab): each server is
started ``ROUNDS`` times and timed from its launch to the moment its TCP port listens (``ss -ltn``
every 50 ms, the interop matrix's ``wait_port``), then stopped (one round by default,
``RDMALAB_STARTUP_ROUNDS`` for more and a median):

* ``rdmalab pingpong rc`` (in the engine's namespace) beside ``ibv_rc_pingpong`` and ``ib_send_lat``
  on rxe0;
* ``rdmalab perftest write`` beside ``ib_write_bw``;
* the interpreter's floor, in the same namespace: ``python -c pass`` (start and exit, ``site``
  included: the lab's venv) and a five-line Python TCP listener.

Then one full exchange each way with a server that a stock client reaches the moment it listens
(the engine loads while the client waits in the accept queue), so that listening early is shown
not to break the exchange.  The figures are printed and written to ``startup.txt`` in the job
directory; the issue asks for the engine within twice the stock tool's time.  No timing is
asserted here (timings do not belong in tests): the test checks that every figure was measured
and that the exchanges succeeded.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import statistics
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.live

ROOT = Path(__file__).resolve().parents[2]
# one round in the test suite (each round is a minute and a half under TCG); the figures for a
# closing note are taken with RDMALAB_STARTUP_ROUNDS=3 (a median)
ROUNDS = int(os.environ.get("RDMALAB_STARTUP_ROUNDS", "1"))

GUEST = r"""#!/bin/bash
OUT="$RDMALAB_JOB"; PY="$RDMALAB_PYTHON"
export PYTHONPATH="$ROOT"
RDL="$PY -u -m rdmalab"
ENG="ip netns exec $PEER_NS"
ping -c 1 -W 5 $PEER_IP > /dev/null
listen_time() {  # $1 label, $2 "" or "$ENG", then the server command: seconds from launch to the listen
  local label=$1 ns=$2; shift 2
  local t0 t1 pid
  t0=$(date +%s.%N)
  $ns "$@" > "$OUT/$label.out" 2>&1 &
  pid=$!
  for i in $(seq 1 2400); do $ns ss -ltn | grep -q ":18515 " && break; sleep 0.05; done
  t1=$(date +%s.%N)
  kill $pid 2> /dev/null; wait $pid 2> /dev/null
  $ns ss -ltn | grep -q ":18515 " && sleep 1
  echo "$label $t0 $t1" >> "$OUT/startup.raw"
}
for r in $(seq 1 $ROUNDS); do
  t0=$(date +%s.%N); $ENG $PY -c pass; echo "python_c_pass $t0 $(date +%s.%N)" >> "$OUT/startup.raw"
  listen_time python_listener "$ENG" $PY -c "import socket, time; s = socket.socket(socket.AF_INET6); s.bind(('::', 18515)); s.listen(1); time.sleep(600)"
  listen_time ibv_rc_pingpong "" ibv_rc_pingpong -d $RXE0 -g 1 -n 1
  listen_time ib_send_lat "" ib_send_lat -d $RXE0 -x 1 -n 5
  listen_time rdmalab_pingpong "$ENG" $RDL pingpong rc -g 1 -n 1
  listen_time ib_write_bw "" ib_write_bw -d $RXE0 -x 1 -n 5
  listen_time rdmalab_perftest "$ENG" $RDL perftest write -x 1 -n 5
done
wait_port() {
  for i in $(seq 1 2400); do $1 ss -ltn | grep -q ":$2 " && return 0; sleep 0.05; done; return 1
}
timeout 300 $ENG $RDL pingpong rc -g 1 -n 10 -c > "$OUT/pp.rdl_server.out" 2>&1 &
wait_port "$ENG" 18515
timeout 300 ibv_rc_pingpong -d $RXE0 -g 1 -n 10 -c $PEER_IP > "$OUT/pp.stock_client.out" 2>&1
echo $? > "$OUT/pp.stock_client.rc"; wait $!; echo $? > "$OUT/pp.rdl_server.rc"
timeout 300 $ENG $RDL perftest write -x 1 -s 4096 -n 20 > "$OUT/bw.rdl_server.out" 2>&1 &
wait_port "$ENG" 18515
timeout 300 ib_write_bw -d $RXE0 -x 1 -s 4096 -n 20 $PEER_IP > "$OUT/bw.stock_client.out" 2>&1
echo $? > "$OUT/bw.stock_client.rc"; wait $!; echo $? > "$OUT/bw.rdl_server.rc"
echo done > "$OUT/DONE"
"""

LABELS = ("python_c_pass", "python_listener", "ibv_rc_pingpong", "ib_send_lat", "rdmalab_pingpong", "ib_write_bw",
          "rdmalab_perftest")


@pytest.fixture(scope="module")
def startup_job(lab_vm: object) -> Iterator[Path]:
    for tool, pkg in (("ibv_rc_pingpong", "ibverbs-utils"), ("ib_write_bw", "perftest")):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (apt-get install {pkg})")
    script = f"ROOT={shlex.quote(str(ROOT))}\nROUNDS={ROUNDS}\n" + GUEST
    r = lab_vm.run(script, timeout=2400, capture=False, name="start-up")  # type: ignore[attr-defined]
    out = r.job_dir
    assert out is not None
    vm = lab_vm
    (out / "seconds").write_text(f"{'KVM' if vm.kvm else 'TCG'} ({vm.kvm_reason})\n")  # type: ignore[attr-defined]
    assert (out / "DONE").exists(), f"the job did not finish (status {r.rc}):\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
    yield out


def test_servers_listen_and_the_figures_are_printed(startup_job: Path) -> None:
    times: dict[str, list[float]] = {label: [] for label in LABELS}
    for line in (startup_job / "startup.raw").read_text().splitlines():
        label, t0, t1 = line.split()
        times[label].append(float(t1) - float(t0))
    for label in LABELS:
        assert len(times[label]) == ROUNDS, (label, times)
        if label == "python_c_pass":
            continue
        out = (startup_job / f"{label}.out").read_text(errors="replace")
        assert "Traceback" not in out and "rdmalab:" not in out, out
    med = {label: statistics.median(v) for label, v in times.items()}
    rows = [f"start-up to the listen in the VM ({(startup_job / 'seconds').read_text().strip()}), "
            f"median of {ROUNDS} (each run in s):"]
    for label in LABELS:
        rows.append(f"  {label:<17s} {med[label]:6.2f} s   ({', '.join(f'{x:.2f}' for x in times[label])})")
    rows.append(f"  rdmalab pingpong / ibv_rc_pingpong {med['rdmalab_pingpong'] / med['ibv_rc_pingpong']:.2f}x, "
                f"/ ib_send_lat {med['rdmalab_pingpong'] / med['ib_send_lat']:.2f}x; "
                f"rdmalab perftest / ib_write_bw {med['rdmalab_perftest'] / med['ib_write_bw']:.2f}x "
                "(issue 21 asks <= 2x)")
    text = "\n".join(rows) + "\n"
    (startup_job / "startup.txt").write_text(text)
    print("\n" + text)


def test_a_client_that_connects_at_the_listen_completes_the_exchange(startup_job: Path) -> None:
    for prefix in ("pp", "bw"):
        for side in ("rdl_server", "stock_client"):
            text = (startup_job / f"{prefix}.{side}.out").read_text(errors="replace")
            assert (startup_job / f"{prefix}.{side}.rc").read_text().strip() == "0", text
    assert re.search(r"^\d+ bytes in [\d.]+ seconds", (startup_job / "pp.stock_client.out").read_text(), re.M)
    assert "RDMA_Write BW Test" in (startup_job / "bw.stock_client.out").read_text()
