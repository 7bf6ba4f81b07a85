"""iWARP against kernel siw: rping and perftest ``-R``, both roles, CRC off and on, in the lab VM (``live``).

In the session's lab VM (``lab_vm``), Soft-iWARP loaded by :meth:`rdmalab.live.vm.VM.load_siw`:
``siw0`` on veth4 (10.0.2.1) in the initial namespace, the engine in namespace ``peer`` on veth5
(10.0.2.2) with a soft iWARP device made on it (``--netdev veth5 --transport iwarp``, perftest's
``-d veth5 --transport iwarp``); ``siw1`` (veth6) and ``siw2`` (veth7) are a kernel pair for the
stock tools' own baseline.  Three CRC modes, each one guest job with tcpdump on veth4:

* ``off``: stock siw, the engine asks for nothing: no C flag anywhere, the CRC field zero;
* ``engine``: stock siw, the engine asks for CRC32c (``--mpa-crc``: the C flag in its MPA
  Request or Reply); siw honours it (siw_cm.c ``siw_proc_mpareq``/``siw_proc_mpareply``);
* ``siw``: ``siw_crc.ko`` (siw built with ``mpa_crc_required = true``, :mod:`rdmalab.live.siw`)
  asks; the engine does not, and must honour it.

Checked for each pairing run: both programs' exit status 0; rping's ``-v -V -C 10 -S 64`` data on
both sides, cycle by cycle, against rping's own pattern; perftest's report line on both sides. For
each capture: the MPA Request/Reply of every connection with the mode's C flags, every FPDU's
CRC32c good where negotiated, and ``rdmalab crosscheck`` (tshark field by field) with 0 unexplained
differences.
"""

from __future__ import annotations

import re
import shlex
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from rdmalab.capture import read
from rdmalab.live.vm import VM, VMError

pytestmark = pytest.mark.live

ROOT = Path(__file__).resolve().parents[2]
COUNT = 10
ITERS = 20
#: what each CRC mode runs (the whole matrix would not fit the CI time: see the module docstring of
#: the closing note); every pairing in both roles
MODES: dict[str, tuple[str, ...]] = {
    "off": ("rping", "write", "read", "send"),
    "engine": ("rping", "write", "read", "send"),
    "siw": ("rping", "write", "read", "send"),
}

GUEST = r"""
OUT="$RDMALAB_JOB"; PY="$RDMALAB_PYTHON"
export PYTHONPATH="$ROOT"
RDL="$PY -u -m rdmalab"
NS="ip netns exec $PEER_NS"
log() { echo "== $* $(date +%T.%N)" >> "$OUT/guest.log"; }
listening() {  # $1 port, $2 "ns" for the engine's namespace: up to 90 s (the engine's start-up under TCG)
  for i in $(seq 1 180); do
    if [ "$2" = ns ]; then $NS ss -ltn "sport = :$1" | grep -q LISTEN && return 0
    else ss -ltn "sport = :$1" | grep -q LISTEN && return 0; fi
    sleep 0.5
  done; return 1
}
tcpdump -i $IW_NETDEV -s 9216 -B 32768 -U --immediate-mode -w "$OUT/iw.pcap" tcp 2> "$OUT/tcpdump.log" &
TD=$!
for i in $(seq 1 50); do grep -q listening "$OUT/tcpdump.log" && break; sleep 0.1; done
if [ -n "$BASELINE" ]; then
  log "baseline: stock rping and ib_write_bw -R, siw1 <-> siw2"
  timeout 60 rping -s -a $IWA_IP -v -V -C $COUNT -S 64 > "$OUT/base.rping_server.out" 2>&1 &
  listening 7174; timeout 60 rping -c -a $IWA_IP -v -V -C $COUNT -S 64 > "$OUT/base.rping_client.out" 2>&1
  echo $? > "$OUT/base.rping_client.rc"; wait $!; echo $? > "$OUT/base.rping_server.rc"
  timeout 60 ib_write_bw -d $IWA_DEV -R -n $ITERS -s 4096 > "$OUT/base.write_server.out" 2>&1 &
  listening 18515; timeout 60 ib_write_bw -d $IWB_DEV -R -n $ITERS -s 4096 $IWA_IP > "$OUT/base.write_client.out" 2>&1
  echo $? > "$OUT/base.write_client.rc"; wait $!; echo $? > "$OUT/base.write_server.rc"
fi
for what in $PAIRINGS; do
  if [ $what = rping ]; then
    STOCK="rping -v -V -C $COUNT -S 64"; RDLCMD="rping -v -V -C $COUNT -S 64 --netdev $IW_PEER_NETDEV --transport iwarp $ENGOPT"
    port=7174; SRV="-s -a"; CLI="-c -a"; SARG=""; CARG=""
  else
    STOCK="ib_${what}_bw -d $IW_DEV -R -n $ITERS -s 4096"; RDLCMD="perftest $what -R -n $ITERS -s 4096 -d $IW_PEER_NETDEV --transport iwarp $ENGOPT"
    port=18515
  fi
  log "$what: stock server on siw0, rdmalab client"
  if [ $what = rping ]; then timeout 200 $STOCK -s -a $IW_IP > "$OUT/$what.stock_server.out" 2>&1 &
  else timeout 200 $STOCK > "$OUT/$what.stock_server.out" 2>&1 & fi
  srv=$!; listening $port
  if [ $what = rping ]; then timeout 200 $NS $RDL $RDLCMD -c -a $IW_IP > "$OUT/$what.rdl_client.out" 2>&1
  else timeout 200 $NS $RDL $RDLCMD $IW_IP > "$OUT/$what.rdl_client.out" 2>&1; fi
  echo $? > "$OUT/$what.rdl_client.rc"; wait $srv; echo $? > "$OUT/$what.stock_server.rc"
  log "$what: rdmalab server, stock client on siw0"
  if [ $what = rping ]; then timeout 200 $NS $RDL $RDLCMD -s -a $IW_PEER_IP > "$OUT/$what.rdl_server.out" 2>&1 &
  else timeout 200 $NS $RDL $RDLCMD > "$OUT/$what.rdl_server.out" 2>&1 & fi
  srv=$!; listening $port ns; sleep 0.5
  if [ $what = rping ]; then timeout 200 $STOCK -c -a $IW_PEER_IP > "$OUT/$what.stock_client.out" 2>&1
  else timeout 200 $STOCK $IW_PEER_IP > "$OUT/$what.stock_client.out" 2>&1; fi
  echo $? > "$OUT/$what.stock_client.rc"; wait $srv; echo $? > "$OUT/$what.rdl_server.rc"
done
sleep 1; kill -INT $TD; wait $TD 2>/dev/null
dmesg | grep -i siw | tail -20 > "$OUT/dmesg.txt"
log done
echo done > "$OUT/DONE"
"""


@pytest.fixture(scope="module")
def iw_jobs(lab_vm: VM) -> Iterator[dict[str, Path]]:
    """One guest job per CRC mode (:data:`MODES`); the VM is left with stock siw loaded."""
    for tool in ("rping", "tcpdump", "ib_write_bw"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (apt-get install rdmacm-utils perftest tcpdump)")
    out: dict[str, Path] = {}
    loaded = ""
    try:
        for mode, pairings in MODES.items():
            want = "siw_crc" if mode == "siw" else "siw"
            if want != loaded:
                lab_vm.load_siw(crc=want == "siw_crc")
                loaded = want
            script = (f"ROOT={shlex.quote(str(ROOT))}\nCOUNT={COUNT}\nITERS={ITERS}\n"
                      f"PAIRINGS={shlex.quote(' '.join(pairings))}\n"
                      f"ENGOPT={'--mpa-crc' if mode == 'engine' else ''}\n"
                      f"BASELINE={'1' if mode == 'off' else ''}\n" + GUEST)
            r = lab_vm.run(script, timeout=1200, capture=False, name=f"iwarp interop crc={mode}")
            assert r.job_dir is not None
            assert (r.job_dir / "DONE").exists(), (f"the iWARP matrix ({mode}) did not finish (status {r.rc}):\n"
                                                   f"{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
            out[mode] = r.job_dir
        yield out
    finally:
        if loaded == "siw_crc" and lab_vm.running:
            try:
                lab_vm.load_siw(crc=False)  # the next modules expect stock siw (or none)
            except VMError:
                pass


def _read(out: Path, name: str) -> str:
    try:
        return (out / name).read_text(errors="replace")
    except OSError:
        return f"({name} is missing)"


def _rc(out: Path, name: str) -> int:
    text = _read(out, name + ".rc").strip()
    return int(text) if text.lstrip("-").isdigit() else -1


def _ping_lines(text: str, prefix: str) -> list[str]:
    return re.findall(rf"^{prefix}ping data: (rdma-ping-\d+: .*)$", text, re.M)


def _expected(n: int) -> list[str]:
    from rdmalab.live.rping import ping_text

    out, start = [], 65
    for i in range(n):
        out.append(ping_text(i, start, 64).rstrip(b"\0").decode())
        start = 65 if start + 1 > 122 else start + 1
    return out


def _pairs() -> list[tuple[str, str]]:
    return [(mode, what) for mode, whats in MODES.items() for what in whats]


def test_the_stock_tools_run_between_two_kernel_siw_devices(iw_jobs: dict[str, Path]) -> None:
    """The oracle's own baseline (siw1 <-> siw2): what the engine is held to works on this VM."""
    out = iw_jobs["off"]
    for name in ("base.rping_server", "base.rping_client", "base.write_server", "base.write_client"):
        assert _rc(out, name) == 0, _read(out, name + ".out")
    assert _ping_lines(_read(out, "base.rping_client.out"), "") == _expected(COUNT)
    assert "Transport type : IW" in _read(out, "base.write_client.out")


@pytest.mark.parametrize(("mode", "what"), _pairs())
def test_both_roles_against_the_stock_program_on_siw(iw_jobs: dict[str, Path], mode: str, what: str) -> None:
    out = iw_jobs[mode]
    for stock, ours in (("stock_server", "rdl_client"), ("stock_client", "rdl_server")):
        s, o = _read(out, f"{what}.{stock}.out"), _read(out, f"{what}.{ours}.out")
        assert _rc(out, f"{what}.{ours}") == 0, f"rdmalab {ours} (crc {mode}):\n{o}\n--- stock {stock}:\n{s}"
        assert _rc(out, f"{what}.{stock}") == 0, f"stock {stock} (crc {mode}):\n{s}\n--- rdmalab {ours}:\n{o}"
        if what == "rping":
            client, server = (o, s) if ours == "rdl_client" else (s, o)
            assert _ping_lines(client, "") == _expected(COUNT), client
            assert _ping_lines(server, "server ") == _expected(COUNT), server
        else:
            line = re.compile(rf"^ 4096\s+{ITERS}\s+[\d.]+\s+[\d.]+\s+([\d.]+)\s*$", re.M)
            for who, text in ((stock, s), (ours, o)):
                m = line.search(text)
                assert m and float(m.group(1)) > 0, f"{who}: no report line:\n{text}"
                assert "Transport type : IW" in text, f"{who}:\n{text}"


def _mpa_frames(pcap: Path) -> list[tuple[int, str, int]]:
    """(frame, "Request"/"Reply", C flag) of every MPA Request/Reply in the capture."""
    out = []
    for cp in read(pcap):
        for p in cp.pdus or []:
            head = p.layers[0].header if p.layers else None
            if type(head).__name__ == "MPAReqRep":
                out.append((cp.frame_number, "Reply" if "Reply" in (p.info or "") else "Request", head.crc_flag))
    return out


@pytest.mark.parametrize("mode", list(MODES))
def test_each_connection_negotiated_the_modes_crc_and_every_fpdu_checks(iw_jobs: dict[str, Path], mode: str) -> None:
    pcap = iw_jobs[mode] / "iw.pcap"
    frames = _mpa_frames(pcap)
    # rping: one connection per role; perftest -R: two (control, data) per role
    conns = sum(2 if w == "rping" else 4 for w in MODES[mode])
    assert [k for _, k, _ in frames].count("Request") == conns, frames
    assert [k for _, k, _ in frames].count("Reply") == conns, frames
    flags = {c for _, _, c in frames}
    if mode == "off":
        assert flags == {0}, frames
    elif mode == "siw":
        assert flags == {1}, frames   # siw_crc.ko sets C in its Requests and in its Replies
    else:
        # the engine sets C in its own frames; stock siw echoes C in its Reply, and its Request has none
        assert {c for _, k, c in frames if k == "Reply"} == {1}, frames
    verdicts = [p.crc == p.crc_expected for cp in read(pcap) for p in (cp.pdus or []) if p.crc_kind == "crc32c"]
    if mode == "off":
        assert not verdicts, "CRC32c checked where none was negotiated"
    else:
        assert verdicts and all(verdicts), f"{verdicts.count(False)} bad CRC32c of {len(verdicts)}"


@pytest.mark.parametrize("mode", list(MODES))
def test_tshark_reads_the_captured_pairings_as_rdmalab_does(iw_jobs: dict[str, Path], mode: str) -> None:
    if shutil.which("tshark") is None:
        pytest.skip("tshark is not installed")
    from rdmalab.capture.crosscheck import crosscheck

    report = crosscheck(iw_jobs[mode] / "iw.pcap")
    (iw_jobs[mode] / "crosscheck.txt").write_text(report.text(verbose=True) + "\n")
    assert report.fields_compared > 0
    assert not report.unexplained, report.text(verbose=True)
    if mode != "off":
        assert report.crc_compared > 0, report.text()
