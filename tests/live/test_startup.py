"""Start-up of the engine's servers beside the stock tools', in the lab VM (marked ``live``; issue 21).

The lab VM (``lab_vm``: TCG when KVM is not there, as in the lab): each server is
started ``ROUNDS`` times and timed from its exec to the moment its TCP port listens, then stopped
(one round by default, ``RDMALAB_STARTUP_ROUNDS`` for more and a median).  Both ends are taken the
same way for every tool: a bash in the tool's network namespace writes ``$EPOCHREALTIME`` and
execs it (so ``ip netns exec``, which the engine needs and the stock tools do not, is outside
the figure; its own cost is printed beside), and a bash loop started in that namespace before it
reads ``/proc/net/tcp`` and ``tcp6`` with builtins every 10 ms (no process per poll competing with
the one timed) and takes the time when port 18515 is in state LISTEN:

* ``rdmalab pingpong rc`` (in the engine's namespace) beside ``ibv_rc_pingpong`` and ``ib_send_lat``
  on rxe0;
* ``rdmalab perftest write`` beside ``ib_write_bw``;
* the interpreter's floor, in the same namespace: ``python -c pass`` (start and exit, ``site``
  included: the lab's venv), a five-line Python TCP listener, and the least a Python program can
  do to listen (``python -I -S``, the C module ``_socket``: socket, bind, listen), with the lab's
  interpreter and with the system's ``/usr/bin/python3`` (start and exit, and that listener).

The servers start from bytecode, as they do for a user: the fixture compiles ``rdmalab`` first
(pip does that when it installs a package; an editable checkout gets it at its first run).

Once each, ``python -X importtime`` of ``python -c pass`` and of both servers up to their listen
(``importtime.*.txt``; the largest imports are printed).

Then one full exchange each way with a server that a stock client reaches the moment it listens
(the engine loads while the client waits in the accept queue), so that listening early is shown
not to break the exchange.  The figures are printed and written to ``startup.txt`` in the job
directory; the issue asks for the engine within twice the stock tool's time.  No timing is
asserted here (timings do not belong in tests): the test checks that every figure was measured
and that the exchanges succeeded.
"""

from __future__ import annotations

import compileall
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
# the command the user types: the `rdmalab` script that pip installed beside this interpreter (`python -m
# rdmalab` adds runpy and what it imports); -m only where there is no such script
RDL="$(dirname "$PY")/rdmalab"; [ -x "$RDL" ] || RDL="$PY -m rdmalab"
echo "$RDL" > "$OUT/rdl"
# the distribution's interpreter (Debian's is built with PGO and LTO, and is not a PIE): the floor measured
# with it too, since a Python program cannot start faster than the fastest interpreter on the machine
SYSPY=/usr/bin/python3; [ -x "$SYSPY" ] || SYSPY="$PY"
echo "$(readlink -f "$PY") $(readlink -f "$SYSPY")" > "$OUT/pythons"
# the least a Python program can do to listen: no site, no environment, the C module _socket only
MINLISTEN="import _socket; s = _socket.socket(_socket.AF_INET6, _socket.SOCK_STREAM); s.bind(('::', 18515)); s.listen(1); s._accept()"
export PYTHONUNBUFFERED=1  # (what -u did: the servers' output is in the files when they are stopped)
ENG="ip netns exec $PEER_NS"
ping -c 1 -W 5 $PEER_IP > /dev/null
nproc > "$OUT/nproc"
T=$(mktemp -d); stat -f -c %T "$T" > "$OUT/tmpfs"  # the time stamps: off the 9p share
mkfifo "$T/nap"; exec 9<> "$T/nap"  # `read -t S -u 9` sleeps S seconds without a process (nobody writes it)
# Waits for a TCP listen on port 18515 (hex 4853) in its own namespace: reads /proc/net/tcp and tcp6 with
# bash's builtins every 10 ms (no process per poll) and writes $EPOCHREALTIME to $1 when it sees it.
# It touches $2 after a first scan that found no listener (a stale one would be timed as 0 s).
POLLER='exec 9<> "$3"
scan() { local f sl l r st rest; for f in /proc/net/tcp /proc/net/tcp6; do
  while read -r sl l r st rest; do [[ $st == 0A && ${l##*:} == 4853 ]] && return 0; done < "$f"; done; return 1; }
scan && exit 2
: > "$2"
for ((i = 0; i < 12000; i++)); do scan && { echo "$EPOCHREALTIME" > "$1"; exit 0; }; read -t 0.01 -u 9; done
exit 1'
# Runs "$@" with $EPOCHREALTIME written to $1 by a bash in the target namespace right before it execs the
# tool: the stock tools and the engine pay the same wrapping, and `ip netns exec` is not in the figure.
STAMP='t0=$1; shift; echo "$EPOCHREALTIME" > "$t0"; exec "$@"'
listen_time() {  # $1 label, $2 "" or "$ENG", then the server command: seconds from its exec to the listen
  local label=$1 ns=$2 poller pid t0 t1; shift 2
  rm -f "$T/t0" "$T/t1" "$T/ready"
  $ns bash -c "$POLLER" _ "$T/t1" "$T/ready" "$T/nap" &
  poller=$!
  until [ -e "$T/ready" ] || ! kill -0 $poller 2> /dev/null; do read -t 0.01 -u 9; done
  $ns bash -c "$STAMP" _ "$T/t0" "$@" > "$OUT/$label.out" 2>&1 &
  pid=$!
  wait $poller
  kill $pid 2> /dev/null; wait $pid 2> /dev/null
  t0=nan; [ -s "$T/t0" ] && read -r t0 < "$T/t0"; t1=nan; [ -s "$T/t1" ] && read -r t1 < "$T/t1"
  echo "$label $t0 $t1" >> "$OUT/startup.raw"
}
for r in $(seq 1 $ROUNDS); do
  t0=$EPOCHREALTIME; $ENG true; echo "netns_exec_true $t0 $EPOCHREALTIME" >> "$OUT/startup.raw"
  echo "python_c_pass $($ENG bash -c 't0=$EPOCHREALTIME; "$@"; echo "$t0 $EPOCHREALTIME"' _ $PY -c pass)" \
    >> "$OUT/startup.raw"
  listen_time python_listener "$ENG" $PY -c "import socket, time; s = socket.socket(socket.AF_INET6); s.bind(('::', 18515)); s.listen(1); time.sleep(600)"
  listen_time python_min_listener "$ENG" $PY -I -S -c "$MINLISTEN"
  echo "system_python_c_pass $($ENG bash -c 't0=$EPOCHREALTIME; "$@"; echo "$t0 $EPOCHREALTIME"' _ $SYSPY -I -S -c pass)" \
    >> "$OUT/startup.raw"
  listen_time system_python_min_listener "$ENG" $SYSPY -I -S -c "$MINLISTEN"
  listen_time ibv_rc_pingpong "" ibv_rc_pingpong -d $RXE0 -g 1 -n 1
  listen_time ib_send_lat "" ib_send_lat -d $RXE0 -x 1 -n 5
  listen_time rdmalab_pingpong "$ENG" $RDL pingpong rc -g 1 -n 1
  listen_time ib_write_bw "" ib_write_bw -d $RXE0 -x 1 -n 5
  listen_time rdmalab_perftest "$ENG" $RDL perftest write -x 1 -n 5
done
# What the servers import before they listen (python -X importtime; the process exits at its bind),
# and the interpreter's own start (site: the venv's .pth files)
UPTO='import os, sys
def at_bind(event, args):  # (an audit hook: the servers listen with _socket; nothing is imported between
    if event == "socket.bind" and args[1][1] == 18515:  # their bind and their listen)
        print("=== listening", file=sys.stderr, flush=True)
        os._exit(0)
sys.addaudithook(at_bind)
from rdmalab.cli import main  # (what the rdmalab script does)
sys.argv[0] = "rdmalab"
sys.exit(main())'
$ENG $PY -X importtime -c pass 2> "$OUT/importtime.pass.txt"
timeout 300 $ENG $PY -X importtime -c "$UPTO" pingpong rc -g 1 -n 1 2> "$OUT/importtime.pingpong.txt"
timeout 300 $ENG $PY -X importtime -c "$UPTO" perftest write -x 1 -n 5 2> "$OUT/importtime.perftest.txt"
wait_port() {  # $1 "" or "$ENG": until port 18515 listens there
  rm -f "$T/t1" "$T/ready"; $1 bash -c "$POLLER" _ "$T/t1" "$T/ready" "$T/nap"
}
timeout 300 $ENG $RDL pingpong rc -g 1 -n 10 -c > "$OUT/pp.rdl_server.out" 2>&1 &
wait_port "$ENG"
timeout 300 ibv_rc_pingpong -d $RXE0 -g 1 -n 10 -c $PEER_IP > "$OUT/pp.stock_client.out" 2>&1
echo $? > "$OUT/pp.stock_client.rc"; wait $!; echo $? > "$OUT/pp.rdl_server.rc"
timeout 300 $ENG $RDL perftest write -x 1 -s 4096 -n 20 > "$OUT/bw.rdl_server.out" 2>&1 &
wait_port "$ENG"
# -F: perftest calibrates its cycle counter against gettimeofday (get_clock.c, sample_get_cpu_mhz); under TCG on a
# busy host it can find "Correlation coefficient r^2: X < 0.9", and without -F it then exits 1 with "Can't produce
# a report" after the traffic, before the closing records (CI saw it); with -F it reports
timeout 300 ib_write_bw -F -d $RXE0 -x 1 -s 4096 -n 20 $PEER_IP > "$OUT/bw.stock_client.out" 2>&1
echo $? > "$OUT/bw.stock_client.rc"; wait $!; echo $? > "$OUT/bw.rdl_server.rc"
echo done > "$OUT/DONE"
"""

LABELS = ("netns_exec_true", "python_c_pass", "system_python_c_pass", "python_listener", "python_min_listener",
          "system_python_min_listener", "ibv_rc_pingpong", "ib_send_lat", "rdmalab_pingpong", "ib_write_bw",
          "rdmalab_perftest")
SERVERS = LABELS[3:]
NOTES = {"netns_exec_true": "`ip netns exec NS true` alone (not in the figures below)",
         "python_c_pass": "python -c pass: start and exit (site included), no listen",
         "system_python_c_pass": "the system's python3 -I -S -c pass: start and exit",
         "python_listener": "five lines of Python: socket, bind, listen",
         "python_min_listener": "python -I -S, _socket only: socket, bind, listen (the least a Python program does)",
         "system_python_min_listener": "the same with the system's python3"}


def importtime(path: Path) -> tuple[list[tuple[str, int]], int, bool]:
    """``python -X importtime``'s report up to the listen: the top-level imports as (module, cumulative
    us; they add up to the total), how many modules were imported, and whether the listen came."""
    top: list[tuple[str, int]] = []
    count = 0
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith("=== listening"):
            return top, count, True
        m = re.match(r"import time:\s+\d+ \|\s+(\d+) \| ( *)(\S+)", line)
        if m:
            count += 1
            if not m.group(2):
                top.append((m.group(3), int(m.group(1))))
    return top, count, False


def import_summary(path: Path, what: str) -> str:
    top, count, _ = importtime(path)
    largest = sorted(top, key=lambda r: -r[1])[:8]
    return (f"  {what}: {count} modules, {sum(us for _, us in top) / 1e6:.2f} s; the largest: "
            + ", ".join(f"{name} {us / 1e3:.0f} ms" for name, us in largest))


@pytest.fixture(scope="module")
def startup_job(lab_vm: object) -> Iterator[Path]:
    for tool, pkg in (("ibv_rc_pingpong", "ibverbs-utils"), ("ib_write_bw", "perftest")):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (apt-get install {pkg})")
    # The servers start from bytecode, as a user's do: pip compiles a package when it installs it, and an
    # editable checkout gets its __pycache__ at its first run on the host.  Without this, a checkout used
    # under PYTHONDONTWRITEBYTECODE (or never run on the host) compiles every module from source at every
    # start in the VM (0.74 s to the listen against 0.65 s from bytecode, measured with Debian's Python and
    # the eight modules loaded then).  (The guest imports ROOT/rdmalab.)
    assert compileall.compile_dir(str(ROOT / "rdmalab"), quiet=1), "rdmalab did not compile"
    script = f"ROOT={shlex.quote(str(ROOT))}\nROUNDS={ROUNDS}\n" + GUEST
    r = lab_vm.run_job(script, timeout=2400, capture=False, name="start-up")  # type: ignore[attr-defined]
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
        times[label].append(float(t1) - float(t0))  # "nan" when a stamp is missing: asserted below
    for label in LABELS:
        assert len(times[label]) == ROUNDS and all(t == t for t in times[label]), (label, times)
        if label not in SERVERS:
            continue
        out = (startup_job / f"{label}.out").read_text(errors="replace")
        assert "Traceback" not in out and "rdmalab:" not in out, out
    for name in ("pass", "pingpong", "perftest"):
        top, _, listened = importtime(startup_job / f"importtime.{name}.txt")
        assert top and (listened or name == "pass"), (name, top)
    med = {label: statistics.median(v) for label, v in times.items()}
    vcpus = (startup_job / "nproc").read_text().strip()
    rows = [f"start-up to the listen in the VM ({(startup_job / 'seconds').read_text().strip()}, {vcpus} vCPUs), "
            f"median of {ROUNDS} (each run in s; the engine's servers run as "
            f"`{(startup_job / 'rdl').read_text().strip()}`), from the exec of the tool (a bash in its namespace takes the time "
            "and execs it) to its listen in /proc/net/tcp* (a bash loop in the namespace, every 10 ms):"]
    for label in LABELS:
        note = f"   {NOTES[label]}" if label in NOTES else ""
        rows.append(f"  {label:<17s} {med[label]:6.2f} s   ({', '.join(f'{x:.2f}' for x in times[label])}){note}")
    rows.append(f"  rdmalab pingpong / ibv_rc_pingpong {med['rdmalab_pingpong'] / med['ibv_rc_pingpong']:.2f}x, "
                f"/ ib_send_lat {med['rdmalab_pingpong'] / med['ib_send_lat']:.2f}x; "
                f"rdmalab perftest / ib_write_bw {med['rdmalab_perftest'] / med['ib_write_bw']:.2f}x "
                "(issue 21 asks <= 2x); python -c pass / ibv_rc_pingpong "
                f"{med['python_c_pass'] / med['ibv_rc_pingpong']:.2f}x")
    pythons = (startup_job / "pythons").read_text().split()
    rows.append(f"  the least a Python listener takes / ibv_rc_pingpong: {pythons[0]} "
                f"{med['python_min_listener'] / med['ibv_rc_pingpong']:.2f}x, {pythons[1]} "
                f"{med['system_python_min_listener'] / med['ibv_rc_pingpong']:.2f}x; / ib_write_bw: "
                f"{med['python_min_listener'] / med['ib_write_bw']:.2f}x, "
                f"{med['system_python_min_listener'] / med['ib_write_bw']:.2f}x")
    rows.append("imports up to the listen (python -X importtime, which slows them, once each in the namespace; "
                "importtime.*.txt):")
    rows += [import_summary(startup_job / "importtime.pass.txt", "python -c pass      "),
             import_summary(startup_job / "importtime.pingpong.txt", "rdmalab pingpong rc "),
             import_summary(startup_job / "importtime.perftest.txt", "rdmalab perftest write")]
    text = "\n".join(rows) + "\n"
    (startup_job / "startup.txt").write_text(text)
    print("\n" + text)


def test_a_client_that_connects_at_the_listen_completes_the_exchange(startup_job: Path) -> None:
    for prefix in ("pp", "bw"):
        # both ends' output in the message: a server's failure is often the client's (and the other way)
        both = "\n".join(f"--- {side}:\n" + (startup_job / f"{prefix}.{side}.out").read_text(errors="replace")
                         for side in ("rdl_server", "stock_client"))
        for side in ("rdl_server", "stock_client"):
            assert (startup_job / f"{prefix}.{side}.rc").read_text().strip() == "0", (side, both)
    assert re.search(r"^\d+ bytes in [\d.]+ seconds", (startup_job / "pp.stock_client.out").read_text(), re.M)
    assert "RDMA_Write BW Test" in (startup_job / "bw.stock_client.out").read_text()
