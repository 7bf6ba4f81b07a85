"""``rdmalab top -i`` live in the lab VM (marked ``live``): the stock perftest (``ib_write_bw``) on kernel
rxe (rxe1 on veth2 <-> rxe2 on veth3, 10% netem loss on the client's side so that NAKs and
go-back-N retransmissions happen; ``-n 20``, as captures/rxe_write_bw_loss.pcap was made: a run of
``-n 50`` under that loss ended here once with both sides exiting 1 before their report), ``rdmalab top -i veth2 --once -T json`` watching it, tcpdump on
veth2 (the VM job's capture) at the same time.  The view's final table must give for the RDMA
connection what ``rdmalab analyze`` finds in the tcpdump capture of the same run: packets, payload
and retransmitted bytes, messages, NAKs and retransmissions.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

from rdmalab.capture.analysis import analyze
from rdmalab.live.vm import VM

pytestmark = pytest.mark.live
ROOT = Path(__file__).resolve().parents[2]

GUEST = r"""
export PYTHONPATH="$ROOT${HOST_PYTHONPATH:+:$HOST_PYTHONPATH}"
SD=$KA_DEV; CD=$KB_DEV
"$RDMALAB_PYTHON" -u -m rdmalab top -i $KA_NETDEV --once -T json --interval 0.5 > top.json 2> top.err &
tpid=$!
packet_socket() {  # whether process $1 has an AF_PACKET socket bound to $KA_NETDEV and running
  x=$(cat /sys/class/net/$KA_NETDEV/ifindex)
  for ino in $(ls -l /proc/$1/fd 2>/dev/null | grep -o 'socket:\[[0-9]*\]' | tr -dc '0-9\n'); do
    awk -v i="$ino" -v x="$x" 'NR > 1 && $NF == i && $5 == x && $6 == 1 {f = 1} END {exit !f}' /proc/net/packet \
      && return 0
  done
  return 1
}
for i in $(seq 1 1200); do packet_socket $tpid && break; sleep 0.1; done
packet_socket $tpid || { echo "rdmalab top did not open its socket"; cat top.err; exit 1; }
tc qdisc add dev $KB_NETDEV root netem loss 10%
timeout 180 ib_write_bw -d $SD -x 1 -F -n 20 -s 4096 > server.log 2>&1 &
spid=$!
for i in $(seq 1 300); do ss -ltn 'sport = :18515' | grep -q LISTEN && break; sleep 0.1; done
sleep 0.5
timeout 180 ib_write_bw -d $CD -x 1 -F -n 20 -s 4096 $KA_IP > client.log 2>&1
crc=$?
wait $spid
src=$?
tc qdisc del dev $KB_NETDEV root
sleep 2
kill -TERM $tpid
wait $tpid
trc=$?
echo "server rc=$src client rc=$crc top rc=$trc"
cat server.log client.log top.err
exit $(( src != 0 || crc != 0 || trc != 0 ))
"""


def _run(lab_vm: VM) -> tuple[Any, dict[str, Any]]:
    env = f"ROOT={shlex.quote(str(ROOT))}\nHOST_PYTHONPATH={shlex.quote(os.environ.get('PYTHONPATH', ''))}\n"
    res = None
    for _attempt in (1, 2):  # perftest's clock calibration can fail under TCG on a busy machine: once more
        res = lab_vm.run_job(env + GUEST, capture="veth2", timeout=400, name="top-live")
        if res.rc == 0:
            break
    assert res is not None and res.rc == 0, res.stdout[-3000:] + res.stderr[-1000:] if res else ""
    assert res.pcap_path is not None and res.job_dir is not None
    if res.capture_drops:
        pytest.skip(f"tcpdump dropped {res.capture_drops} packets: the capture is not the whole run")
    doc = json.loads((res.job_dir / "top.json").read_text())
    assert doc["totals"]["dropped"] == 0, "the view's socket dropped frames: it missed packets"
    return res, doc


def _row(doc: dict[str, Any], name: str) -> tuple[Any, ...]:
    rows = [r for r in doc["connections"] if r["name"] == name]
    assert len(rows) == 1, doc["connections"]
    (row,) = rows
    return (row["packets"], row["request_bytes"], row["retransmitted_bytes"], row["messages"], row["nak_seq_err"],
            row["nak_rnr"], row["retransmissions"], row["psn_gaps"])


def _compared(res: Any, doc: dict[str, Any]) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """The view's numbers for the run's connection, and analyze's of the tcpdump capture."""
    a = analyze(res.pcap_path)
    assert len(a.connections) == 1, [c.name for c in a.connections]
    (c,) = a.connections
    print(f"analyze: {c.name}: {c.packets} packets, {a.events('nak_seq_err')} NAKs, "
          f"{a.events('retransmission')} retransmissions; top: {doc['connections']}")
    assert c.summary["messages"].get("WRITE", 0) >= 20
    return (_row(doc, c.name),
            (c.packets, c.request_bytes, c.retransmitted_bytes, c.summary["messages"],
             a.events("nak_seq_err"), a.events("nak_rnr"), a.events("retransmission"), a.events("psn_gap")))


def _replayed(pcap: Path, name: str) -> tuple[Any, ...]:
    """``rdmalab top -r`` of the capture (its frames in the capture's order, as fast as they come)."""
    out = subprocess.run([sys.executable, "-m", "rdmalab", "top", "-r", str(pcap), "--speed", "max", "--once",
                          "-T", "json"], capture_output=True, text=True, check=True).stdout
    return _row(json.loads(out), name)


def _time_backwards(pcap: Path) -> str | None:
    """analyze's finding that the capture's timestamps go back (frames stamped out of their order), if any."""
    found = [f.text for f in analyze(pcap).findings if f.kind == "time_backwards"]
    return found[0] if found else None


def test_top_live_equals_analyze_of_tcpdump(lab_vm: VM) -> None:
    res, doc = _run(lab_vm)
    top, ours = _compared(res, doc)
    if top != ours:
        # The view reads the frames in the order they come; analyze orders them by timestamp (docs/captures.md,
        # "what the view does not reproduce"). In the lab VM (2 vCPUs, netem) tcpdump's timestamps can go back
        # by up to about 10 ms (local CI, 2026-12-03: 32 times; a go-back-N pass stamped before the frames
        # received ahead of it), and then the two differ by a retransmission or two. That case is checked:
        # the view saw the frames of tcpdump's capture in its order (the capture replayed through the view
        # gives the same numbers) and the capture's times go back. Any other difference is said, the run and
        # the view's numbers kept for a reader, and the run made once more.
        keep = ROOT / "build" / "live-artifacts" / "top-live-mismatch"
        keep.mkdir(parents=True, exist_ok=True)
        shutil.copy(res.pcap_path, keep / "capture.pcap")
        shutil.copy(res.job_dir / "top.json", keep / "top.json")
        why = _explained(res, top)
        if why is None:  # (not that case: said, and the run made once more, which must agree or be that case)
            warnings.warn(f"rdmalab top saw {top} where analyze of tcpdump's capture found {ours}, with the capture's "
                          f"times in order or its replay through the view otherwise; kept in {keep}; running once "
                          f"more", stacklevel=1)
            res, doc = _run(lab_vm)
            top, ours = _compared(res, doc)
            why = None if top == ours else _explained(res, top)
            assert top == ours or why is not None, (top, ours)
        if why is not None:
            warnings.warn(f"rdmalab top saw {top} where analyze of tcpdump's capture found {ours}: {why}. Kept in "
                          f"{keep}", stacklevel=1)
        return
    assert top == ours, (top, ours)


def _explained(res: Any, top: tuple[Any, ...]) -> str | None:
    """Why the view's numbers differ from analyze's, when it is the case the view does not reproduce (the
    capture's frames out of time order, which analyze sorts): else None."""
    back = _time_backwards(res.pcap_path)
    if back is None or _replayed(res.pcap_path, analyze(res.pcap_path).connections[0].name) != top:
        return None
    return (f"the capture's frames are out of time order ({back}), which analyze sorts and the view does not; "
            "the capture replayed through the view gives the view's numbers")
