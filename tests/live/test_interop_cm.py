"""rdma_cm against the kernel: rping and a pyverbs program, both roles, on rxe in the lab VM (marked ``live``).

In the session's lab VM (``lab_vm``): rxe0 on veth0 (10.0.0.1) in the initial namespace, the engine
in namespace ``peer`` on veth1 (10.0.0.2).  The engine's side finds its device as a pyverbs program
would: ``RDMALAB_LINKS=soft0=veth1`` (rdmalab.verbs.providers), except one rping run that uses
``--netdev``.  Checked:

* stock ``rping -s`` / ``rdmalab rping -c -V``, and ``rdmalab rping -s`` / stock ``rping -c -V``:
  every cycle's data on both sides, exit status 0, the REQ/REP/RTU and DREQ/DREP in the capture,
  the engine's CM frames field by field as tshark reads them;
* the same two pairings under 2 % netem loss on both veths (CM retries included), with ``-C 20``;
* stock ``udaddy`` / ``rdmalab udaddy``, both roles: SIDR, ten UD SENDs with immediate each way;
* a REJ both ways: the engine to a kernel port where nothing listens (reason 8 in words, within
  the time the stock rping takes for the same), and the stock rping to an engine port where
  nothing listens;
* ``tests/live/cm_pyverbs_prog.py``, a pyverbs program (``pyverbs.cmid`` endpoints), under Debian's
  pyverbs on rxe and, unchanged, under rdmalab with the pyverbs alias: both roles, data hashed.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from rdmalab.capture.reader import records
from rdmalab.verbs.engine.ibcm_table import req_timeout_ms
from rdmalab.wire.cm import CMMessage
from rdmalab.wire.frame import decode_ethernet
from rdmalab.wire.net import IPv4

pytestmark = pytest.mark.live

ROOT = Path(__file__).resolve().parents[2]
COUNT = 10
LOSS_COUNT = 20

GUEST = r"""
OUT="$RDMALAB_JOB"; PY="$RDMALAB_PYTHON"
export PYTHONPATH="$ROOT"
RDL="$PY -u -m rdmalab"
ENG="ip netns exec $PEER_NS env RDMALAB_LINKS=soft0=$PEER_NETDEV"
ALIAS="import rdmalab.verbs.pyverbs_alias as a, runpy, sys; a.install(); sys.argv=['prog']+sys.argv[1:]; runpy.run_path('$ROOT/tests/live/cm_pyverbs_prog.py', run_name='__main__')"
log() { echo "== $* $(date +%T.%N)" >> "$OUT/guest.log"; }
tcpdump -i $RXE0_NETDEV -U --immediate-mode -B 8192 -w "$OUT/cm.pcap" udp port 4791 2> /dev/null &
TD=$!; sleep 1
rping_pair() {  # $1 tag, $2 count, $3 extra options of the engine's rping
  local tag=$1 n=$2 extra=$3
  log "$tag: stock rping server, rdmalab client"
  timeout 200 rping -s -a $RXE0_IP -v -C $n -S 64 > "$OUT/$tag.stock_server.out" 2>&1 &
  sleep 1
  timeout 200 $ENG $RDL rping -c -a $RXE0_IP -v -V -C $n -S 64 $extra > "$OUT/$tag.rdl_client.out" 2>&1
  echo $? > "$OUT/$tag.rdl_client.rc"; wait $!; echo $? > "$OUT/$tag.stock_server.rc"
  log "$tag: rdmalab rping server, stock client"
  timeout 200 $ENG $RDL rping -s -a $PEER_IP -v -S 64 $extra > "$OUT/$tag.rdl_server.out" 2>&1 &
  sleep 8  # the engine's start-up in the TCG VM (the stock client would fail at once with nobody listening)
  timeout 200 rping -c -a $PEER_IP -v -V -C $n -S 64 > "$OUT/$tag.stock_client.out" 2>&1
  echo $? > "$OUT/$tag.stock_client.rc"; wait $!; echo $? > "$OUT/$tag.rdl_server.rc"
}
rping_pair rping COUNT ""
rping_pair rping_netdev 3 "--netdev $PEER_NETDEV"
log "udaddy: stock server, rdmalab client"
timeout 120 udaddy -b $RXE0_IP -C 10 -S 100 > "$OUT/ud.stock_server.out" 2>&1 &
sleep 1
timeout 120 $ENG $RDL udaddy -s $RXE0_IP -C 10 -S 100 > "$OUT/ud.rdl_client.out" 2>&1
echo $? > "$OUT/ud.rdl_client.rc"; wait $!; echo $? > "$OUT/ud.stock_server.rc"
log "udaddy: rdmalab server, stock client"
timeout 120 $ENG $RDL udaddy -b $PEER_IP -C 10 -S 100 > "$OUT/ud.rdl_server.out" 2>&1 &
sleep 8
timeout 120 udaddy -s $PEER_IP -C 10 -S 100 > "$OUT/ud.stock_client.out" 2>&1
echo $? > "$OUT/ud.stock_client.rc"; wait $!; echo $? > "$OUT/ud.rdl_server.rc"
log "REJ: the engine to a kernel port where nothing listens; then the stock rping for the same"
s=$(date +%s.%N); timeout 120 $ENG $RDL rping -c -a $RXE0_IP -p 9999 -C 1 > "$OUT/rej.rdl_client.out" 2>&1
echo $? > "$OUT/rej.rdl_client.rc"; e=$(date +%s.%N); echo "$s $e" > "$OUT/rej.rdl_client.time"
timeout 200 $ENG $RDL rping -s -a $PEER_IP -p 7174 > "$OUT/rej.rdl_server.out" 2>&1 &
sleep 8
s=$(date +%s.%N); timeout 120 rping -c -a $PEER_IP -p 9999 -C 1 > "$OUT/rej.stock_client.out" 2>&1
echo $? > "$OUT/rej.stock_client.rc"; e=$(date +%s.%N); echo "$s $e" > "$OUT/rej.stock_client.time"
kill %2 2>/dev/null; wait %2 2>/dev/null
s=$(date +%s.%N); ip netns exec $PEER_NS timeout 120 rping -c -a $RXE0_IP -p 9999 -C 1 > /dev/null 2>&1; e=$(date +%s.%N)
echo "$s $e" > "$OUT/rej.stock_to_stock.time"
sleep 0.5
log "pyverbs program: real pyverbs on rxe as server, the same program on rdmalab as client"
timeout 120 /usr/bin/python3 "$ROOT/tests/live/cm_pyverbs_prog.py" server $RXE0_IP 7471 > "$OUT/pv.rxe_server.out" 2>&1 &
sleep 2
timeout 120 $ENG $PY -c "$ALIAS" client $RXE0_IP 7471 > "$OUT/pv.rdl_client.out" 2>&1
echo $? > "$OUT/pv.rdl_client.rc"; wait $!; echo $? > "$OUT/pv.rxe_server.rc"
log "pyverbs program: rdmalab as server, real pyverbs on rxe as client"
timeout 120 $ENG $PY -c "$ALIAS" server $PEER_IP 7471 > "$OUT/pv.rdl_server.out" 2>&1 &
sleep 8
timeout 120 /usr/bin/python3 "$ROOT/tests/live/cm_pyverbs_prog.py" client $PEER_IP 7471 > "$OUT/pv.rxe_client.out" 2>&1
echo $? > "$OUT/pv.rxe_client.rc"; wait $!; echo $? > "$OUT/pv.rdl_server.rc"
sleep 1; kill $TD; wait $TD 2>/dev/null  # immediate mode: no frame waits in a ring block when tcpdump stops
for c in cm_tx_msgs cm_tx_retries cm_rx_msgs cm_rx_duplicates; do
  for m in req rep rtu dreq drep rej mra; do
    v=$(cat /sys/class/infiniband/$RXE0/ports/1/cm_$c/$m 2>/dev/null || cat /sys/class/infiniband/$RXE0/ports/1/$c/$m 2>/dev/null)
    echo "$c $m $v" >> "$OUT/cm_counters"
  done
done
log "2% loss on both veths"
# 2 % of what leaves each veth is lost, but for the CM's DREQ and DREP (MAD attribute ID 0x0015/0x0016,
# offset 64 of a UDP/4791 datagram: IPv4 20 + UDP 8 + BTH 12 + DETH 8, then 16 into the MAD header),
# which a prio qdisc steers past netem.  A program that disconnects and exits sends its DREQ once (the
# kernel cancels the MAD when the cm_id is destroyed), so a lost one leaves the peer waiting for a
# message that never comes: the stock rping server waits for ever, the engine's gives up after its
# --timeout (120 s) with status 1.  Seen once in CI: the kernel's DREQ (QP1 PSN 28) missing from the
# capture, the engine's server at its timeout.  REQ, REP and RTU still meet the loss (CM retries).
lossy() {  # $1 "" or the netns prefix, $2 the netdev
  $1 tc qdisc add dev $2 root handle 1: prio bands 2 priomap 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1
  $1 tc qdisc add dev $2 parent 1:2 handle 20: netem loss 2%
  for attr in 0x0015 0x0016; do
    $1 tc filter add dev $2 parent 1: protocol ip prio 1 u32 match ip protocol 17 0xff match ip dport 4791 0xffff \
      match u16 $attr 0xffff at 64 flowid 1:1
  done
}
lossy "" $RXE0_NETDEV
lossy "ip netns exec $PEER_NS" $PEER_NETDEV
tcpdump -i $RXE0_NETDEV -U --immediate-mode -B 8192 -w "$OUT/loss.pcap" udp port 4791 2> /dev/null &
TD=$!; sleep 1
rping_pair loss LOSS_COUNT ""
sleep 1; kill $TD; wait $TD 2>/dev/null  # immediate mode: no frame waits in a ring block when tcpdump stops
tc -s class show dev $RXE0_NETDEV > "$OUT/loss.classes"; ip netns exec $PEER_NS tc -s class show dev $PEER_NETDEV >> "$OUT/loss.classes"
tc qdisc del dev $RXE0_NETDEV root; ip netns exec $PEER_NS tc qdisc del dev $PEER_NETDEV root
echo done > "$OUT/DONE"
"""


@pytest.fixture(scope="module")
def cm_job(lab_vm: object) -> Iterator[Path]:
    for tool in ("rping", "tcpdump"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (apt-get install rdmacm-utils tcpdump)")
    script = (f"ROOT={shlex.quote(str(ROOT))}\n"
              + GUEST.replace("rping_pair rping COUNT", f"rping_pair rping {COUNT}")
              .replace("rping_pair loss LOSS_COUNT", f"rping_pair loss {LOSS_COUNT}"))
    r = lab_vm.run_job(script, timeout=1200, capture=False, name="rdma_cm interop")  # type: ignore[attr-defined]
    out = r.job_dir
    assert out is not None
    assert (out / "DONE").exists(), f"the CM matrix did not finish (status {r.rc}):\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
    yield out


def _read(out: Path, name: str) -> str:
    return (out / name).read_text(errors="replace")


def _rc(out: Path, name: str) -> int:
    return int(_read(out, name + ".rc").strip())


def _ping_lines(text: str, prefix: str) -> list[str]:
    return re.findall(rf"^{prefix}ping data: (rdma-ping-\d+: .*)$", text, re.M)


def _expected(n: int) -> list[str]:
    from rdmalab.tools.rping import ping_text

    out, start = [], 65
    for i in range(n):
        out.append(ping_text(i, start, 64).rstrip(b"\0").decode())
        start = 65 if start + 1 > 122 else start + 1
    return out


def _check_rping(out: Path, tag: str, n: int) -> None:
    for stock, ours in (("stock_server", "rdl_client"), ("stock_client", "rdl_server")):
        s, o = _read(out, f"{tag}.{stock}.out"), _read(out, f"{tag}.{ours}.out")
        assert _rc(out, f"{tag}.{stock}") == 0, s
        assert _rc(out, f"{tag}.{ours}") == 0, o
        client, server = (o, s) if ours == "rdl_client" else (s, o)
        assert _ping_lines(client, "") == _expected(n), client
        assert _ping_lines(server, "server ") == _expected(n), server
        assert "data mismatch" not in client


def test_rping_both_roles_against_the_stock_rping(cm_job: Path) -> None:
    _check_rping(cm_job, "rping", COUNT)
    _check_rping(cm_job, "rping_netdev", 3)


def test_rping_both_roles_under_two_percent_loss(cm_job: Path) -> None:
    _check_rping(cm_job, "loss", LOSS_COUNT)
    # the DREQs and DREPs went by the band without loss (class 1:1) on both veths: two each side
    classes = _read(cm_job, "loss.classes")
    passed = [int(m) for m in re.findall(r"class prio 1:1 .*\n\s*Sent \d+ bytes (\d+) pkt", classes)]
    assert len(passed) == 2 and all(p >= 2 for p in passed), classes


def _cm_frames(pcap: Path) -> list[tuple[str, str]]:
    out = []
    for rec in records(pcap):
        pkt = decode_ethernet(rec.data)
        msg = CMMessage.from_packet(pkt)
        ip = pkt.get(IPv4)
        if msg is not None and ip is not None:
            out.append((_ip(ip.src), msg.name))
    return out


def _ip(v: int) -> str:
    return ".".join(str((v >> s) & 0xFF) for s in (24, 16, 8, 0))


def test_the_handshakes_are_on_the_wire_and_tshark_reads_the_engines_cm_as_we_do(cm_job: Path) -> None:
    frames = _cm_frames(cm_job / "cm.pcap")
    engine = [name for src, name in frames if src == "10.0.0.2"]
    kernel = [name for src, name in frames if src == "10.0.0.1"]
    counters = _read(cm_job, "cm_counters")  # the kernel's own count, to tell a lost capture from a lost message
    assert engine.count("REQ") >= 3 and engine.count("RTU") >= 3 and engine.count("REP") >= 3, (frames, counters)
    assert kernel.count("REP") >= 3 and kernel.count("REQ") >= 3, frames
    assert "DREQ" in engine and "DREP" in engine and "DREQ" in kernel and "DREP" in kernel, frames
    if shutil.which("tshark") is None:
        pytest.skip("tshark is not installed")
    r = subprocess.run([sys.executable, "-m", "rdmalab", "crosscheck", str(cm_job / "cm.pcap")],
                       capture_output=True, text=True, cwd=ROOT)
    assert " 0 unexplained" in r.stdout, r.stdout + r.stderr


def test_a_connect_where_nothing_listens_is_rejected_in_words_both_ways(cm_job: Path) -> None:
    o = _read(cm_job, "rej.rdl_client.out")
    assert _rc(cm_job, "rej.rdl_client") == 1
    assert "rejected by 10.0.0.1:9999: reason 8 (Invalid Service ID)" in o, o
    # How long the answer took: from the engine's REQ for port 9999 to the kernel's REJ (the capture),
    # and from the REJ to the command's end.  The command's whole time also holds the interpreter's
    # start-up in the TCG VM (issue 21's subject), measured beside the stock rping's: figures for the
    # notes, not bounds (how fast a TCG VM runs is not the subject).  What is checked is what the REJ
    # did: the engine sent its REQ once (a client that missed the REJ sends it again when its response
    # timer runs out, ibcm_table.req_timeout_ms) and the command ended before that timer would have.
    req_t = rej_t = None
    comm_id = None
    retry_s = 0.0
    sent = 0
    for rec in records(cm_job / "cm.pcap"):
        msg = CMMessage.from_packet(decode_ethernet(rec.data), lenient=True)
        if msg is not None and msg.name == "REQ" and msg.dst_port == 9999 and req_t is None:
            req_t, comm_id = rec.timestamp, msg.body.local_comm_id
            retry_s = req_timeout_ms(msg.body.remote_cm_response_timeout) / 1000  # as ibcm_actions sets it
        elif msg is not None and msg.name == "REJ" and req_t is not None and rej_t is None:
            rej_t = rec.timestamp
        if msg is not None and msg.name == "REQ" and comm_id is not None and msg.body.local_comm_id == comm_id:
            sent += 1
    assert req_t is not None and rej_t is not None
    t0, t1 = (float(x) for x in _read(cm_job, "rej.rdl_client.time").split())
    s0, s1 = (float(x) for x in _read(cm_job, "rej.stock_to_stock.time").split())
    (cm_job / "rej.times").write_text(
        f"REQ -> REJ {1000 * (rej_t - req_t):.1f} ms; REJ -> rdmalab's message and exit {1000 * (t1 - rej_t):.0f} ms; "
        f"rdmalab rping in all {t1 - t0:.2f} s (start-up included), stock rping in all {s1 - s0:.2f} s\n")
    assert sent == 1, f"the engine sent its REQ {sent} times: the REJ did not end the connect"
    assert t1 - rej_t < retry_s, f"the command ended {t1 - rej_t:.1f} s after the REJ, past the REQ's response timer"
    stock = _read(cm_job, "rej.stock_client.out")
    assert _rc(cm_job, "rej.stock_client") != 0, stock
    assert "RDMA_CM_EVENT_REJECTED, error 8" in stock, stock


def test_udaddy_both_roles_against_the_stock_udaddy(cm_job: Path) -> None:
    for stock, ours in (("stock_server", "rdl_client"), ("stock_client", "rdl_server")):
        s, o = _read(cm_job, f"ud.{stock}.out"), _read(cm_job, f"ud.{ours}.out")
        assert _rc(cm_job, f"ud.{stock}") == 0 and _rc(cm_job, f"ud.{ours}") == 0, s + o
        for text in (s, o):
            assert "data transfers complete" in text and "return status 0" in text, text
    frames = [name for _, name in _cm_frames(cm_job / "cm.pcap")]
    assert frames.count("SIDR_REQ") >= 2 and frames.count("SIDR_REP") >= 2, frames


def _kv(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def test_a_pyverbs_program_with_only_its_imports_changed_talks_rdma_cm_to_kernel_rxe(cm_job: Path) -> None:
    for server, client in (("rxe_server", "rdl_client"), ("rdl_server", "rxe_client")):
        s, c = _read(cm_job, f"pv.{server}.out"), _read(cm_job, f"pv.{client}.out")
        assert _rc(cm_job, f"pv.{server}") == 0 and _rc(cm_job, f"pv.{client}") == 0, s + c
        ks, kc = _kv(s), _kv(c)
        assert ks.get("done") == kc.get("done") == "1", s + c
        assert ks["sha256"] == kc["sha256"], s + c
        assert kc["echo_matches"] == "True" and ks["recv_status"].startswith("0"), s + c
