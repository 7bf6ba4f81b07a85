"""The real rxe and siw captures of ``captures/``, made again in the lab VM (``rdmalab capture``).

Each entry is one stock program run as server on the veth2 side (10.0.1.1) and as client on the
veth3 side (10.0.1.2), with tcpdump on veth2.  The command lines are those of
scripts/captures_guest.sh (which made the committed files between two VMs joined by a qemu
socket); here one VM is enough because the two sides talk over the veth pair (see agent.sh).

Drivers (:data:`DRIVERS`), switched by a job between captures, in the order rxe, siw, siw_crc:

* ``rxe``: ``rxe1`` on veth2 (server) and ``rxe2`` on veth3 (client), set up by agent.sh;
* ``siw``: the rxe links on veth2/veth3 are deleted (rdma_cm would otherwise have two devices on
  one netdev to choose from), ``siw.ko`` (:func:`rdmalab.live.siw.siw_module`) is loaded and
  ``siw0`` / ``siw1`` are attached to veth2 / veth3;
* ``siw_crc``: the same with ``siw_crc.ko``, the siw build patched to require MPA CRC32c.

Before and after every run the job dumps both devices' counters (``rdma statistic show link``,
``/sys/class/infiniband/DEV/ports/1/hw_counters/*``), the veths' packet counters and the netem
qdisc's statistics; they are stored next to the capture as ``NAME.counters.json``
(:func:`counters_json`), which ``rdmalab analyze --counters FILE.counters.json`` compares with
what the capture shows.
"""

from __future__ import annotations

import datetime as _dt
import json
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from rdmalab.capture import read, write_pcap
from rdmalab.capture.crosscheck import crosscheck
from rdmalab.live.siw import siw_module
from rdmalab.live.vm import VM, VMError

SRV = "10.0.1.1"
_D = "-d $SD"      # server side device (rxe1, or siw0)
_DC = "-d $CD"     # client side device (rxe2, or siw1)
_P = "-x 1 -n 5"

#: driver -> (server device, client device); the order is the order captures are made in
DRIVERS: dict[str, tuple[str, str]] = {"rxe": ("rxe1", "rxe2"), "siw": ("siw0", "siw1"), "siw_crc": ("siw0", "siw1")}


@dataclass(frozen=True)
class CaptureSpec:
    name: str
    ready: str            # "tcp:PORT" or "cm": how to tell the server is listening
    server: str
    client: str
    loss_client: str = ""  # netem loss on the client's egress (veth3), e.g. "10%"
    driver: str = "rxe"    # a key of DRIVERS
    cut_at_write: int = 0  # >0: keep the capture from the frame of the Nth RDMA Write FPDU on (mid-stream)
    note: str = ""         # shown in the manifest row


def _siw(name: str, server: str, client: str, driver: str = "siw", **kw: object) -> CaptureSpec:
    return CaptureSpec(name, "cm", server, client, driver=driver, **kw)  # type: ignore[arg-type]


def _siw_set(prefix: str, driver: str) -> list[CaptureSpec]:
    return [
        _siw(f"{prefix}_rping", f"rping -s -a {SRV} -v -C 3 -S 64", f"rping -c -a {SRV} -v -C 3 -S 64", driver),
        *(_siw(f"{prefix}_{op}_bw", f"ib_{op}_bw {_D} -R -n 5 -s 4096", f"ib_{op}_bw {_DC} -R -n 5 -s 4096 {SRV}",
               driver) for op in ("write", "read", "send")),
    ]


def _pp(tool: str, n: str) -> CaptureSpec:
    return CaptureSpec(f"rxe_{tool}_pingpong", "tcp:18515", f"ibv_{tool}_pingpong {_D} -g 1 {n}",
                       f"ibv_{tool}_pingpong {_DC} -g 1 {n} {SRV}")


def _pt(name: str, cmd: str) -> CaptureSpec:
    prog, rest = cmd.split(" ", 1)
    return CaptureSpec(name, "tcp:18515", f"{prog} {_D} {_P} {rest}", f"{prog} {_DC} {_P} {rest} {SRV}")


CAPTURES: dict[str, CaptureSpec] = {c.name: c for c in [
    _pp("rc", "-n 5 -s 4096"),
    _pp("uc", "-n 5 -s 4096"),
    _pp("ud", "-n 5 -s 512"),
    _pp("srq", "-n 5 -q 2 -s 1024"),
    _pt("rxe_write_bw", "ib_write_bw -s 4096"),
    _pt("rxe_read_bw", "ib_read_bw -s 4096"),
    _pt("rxe_send_bw", "ib_send_bw -s 4096"),
    _pt("rxe_uc_write_bw", "ib_write_bw -s 2048 -c UC"),
    _pt("rxe_ud_send_bw", "ib_send_bw -s 512 -c UD"),
    _pt("rxe_atomic_fadd", "ib_atomic_bw -A FETCH_AND_ADD"),
    _pt("rxe_atomic_cswap", "ib_atomic_bw -A CMP_AND_SWAP"),
    _pt("rxe_write_lat", "ib_write_lat -s 64"),
    _pt("rxe_send_lat", "ib_send_lat -s 64"),
    _pt("rxe_read_lat", "ib_read_lat -s 64"),
    CaptureSpec("rxe_imm", "tcp:18516", "/usr/bin/python3 $REPO/scripts/imm_pingpong.py -d $SD -g 1",
                f"/usr/bin/python3 $REPO/scripts/imm_pingpong.py -d $CD -g 1 {SRV}"),
    CaptureSpec("rxe_rping", "cm", f"rping -s -a {SRV} -v -C 3 -S 64", f"rping -c -a {SRV} -v -C 3 -S 64"),
    CaptureSpec("rxe_write_bw_cm", "cm", "ib_write_bw -d $SD -R -n 5 -s 4096 --report_gbits",
                f"ib_write_bw -d $CD -R -n 5 -s 4096 --report_gbits {SRV}"),
    CaptureSpec("rxe_udaddy", "cm", f"udaddy -b {SRV} -C 3 -S 64", f"udaddy -s {SRV} -C 3 -S 64"),
    CaptureSpec("rxe_send_bw_loss", "tcp:18515", f"ib_send_bw {_D} -x 1 -n 12 -s 2048",
                f"ib_send_bw {_DC} -x 1 -n 12 -s 2048 {SRV}", loss_client="10%"),
    # a longer lossy run whose counters.json is committed with it (the analysis is checked against it)
    CaptureSpec("rxe_write_bw_loss", "tcp:18515", f"ib_write_bw {_D} -x 1 -n 20 -s 4096",
                f"ib_write_bw {_DC} -x 1 -n 20 -s 4096 {SRV}", loss_client="10%"),
    *_siw_set("siw", "siw"),
    _siw("siw_write_bw_midstream", f"ib_write_bw {_D} -R -n 10 -s 16384", f"ib_write_bw {_DC} -R -n 10 -s 16384 {SRV}",
         cut_at_write=6, note="cut: from the frame of the 6th RDMA Write FPDU on"),
    *_siw_set("siw_crc", "siw_crc"),
]}


def _calm(cmd: str) -> str:
    """A perftest command (``ib_*``) with ``-F``: perftest calibrates its cycle counter against
    gettimeofday (get_clock.c, sample_get_cpu_mhz) and in the TCG VM on a busy host can find
    "Correlation coefficient r^2: X < 0.9"; without -F it then exits 1 with "Can't produce a report"
    after the traffic (a local CI run saw it twice running, under load), with -F it reports.  -F changes
    nothing on the wire."""
    prog, sep, rest = cmd.partition(" ")
    return f"{prog} -F{sep}{rest}" if prog.startswith("ib_") else cmd


CAPTURES = {name: replace(c, server=_calm(c.server), client=_calm(c.client)) for name, c in CAPTURES.items()}


def driver_script(driver: str, ko: str) -> str:
    """The job that makes ``driver``'s two devices the only ones on veth2/veth3."""
    sd, cd = DRIVERS[driver]
    common = """for d in rxe1 rxe2 siw0 siw1 siw2; do [ -e /sys/class/infiniband/$d ] && rdma link delete $d; done
if grep -q '^siw ' /proc/modules; then rmmod siw || { echo "rmmod siw failed"; exit 1; }; fi
"""
    if driver == "rxe":
        up = f"rdma link add {sd} type rxe netdev $KA_NETDEV && rdma link add {cd} type rxe netdev $KB_NETDEV || exit 1\n"
    else:
        load = "modprobe siw" if ko == "modprobe" else f"insmod {ko}"
        up = (f"modprobe ib_core; modprobe iw_cm; modprobe libcrc32c; modprobe rdma_cm\n{load} || exit 1\n"
              f"rdma link add {sd} type siw netdev $KA_NETDEV && rdma link add {cd} type siw netdev $KB_NETDEV || exit 1\n"
              "dmesg | grep SoftiWARP | tail -1\n")
    return common + up + "rdma link show\n"



def job_script(spec: CaptureSpec, repo: Path, timeout: int = 120) -> str:
    if spec.ready.startswith("tcp:"):
        port = spec.ready[4:]
        wait = f"ss -ltn 'sport = :{port}' | grep -q LISTEN"
    else:
        wait = "rdma resource show cm_id 2>/dev/null | grep -q LISTEN"
    loss = f"tc qdisc add dev $KB_NETDEV root netem loss {spec.loss_client}\n" if spec.loss_client else ""
    sd, cd = DRIVERS[spec.driver]
    return f"""REPO={repo}
SD={sd}; CD={cd}
counters() {{  # counters WHEN: both devices' counters, the veths' packet counters, the qdiscs
  for d in $SD $CD; do
    echo "## rdma $d"; rdma statistic show link $d/1 2>&1
    for f in /sys/class/infiniband/$d/ports/1/hw_counters/*; do [ -f "$f" ] && echo "hw $d $(basename $f) $(cat $f)"; done
  done
  for n in $KA_NETDEV $KB_NETDEV; do
    for c in tx_packets rx_packets tx_dropped rx_dropped; do echo "net $n $c $(cat /sys/class/net/$n/statistics/$c)"; done
    echo "## tc $n"; tc -s qdisc show dev $n
  done
}} > counters.$1.txt
{loss}counters before
echo "server: {spec.server}" > commands.txt
echo "client: {spec.client}" >> commands.txt
timeout {timeout} {spec.server} > server.log 2>&1 &
spid=$!
for i in $(seq 1 200); do {wait} && break; sleep 0.1; done
sleep 0.5
timeout {timeout} {spec.client} > client.log 2>&1
crc=$?
wait $spid
src=$?
sleep 1
counters after
echo "server rc=$src client rc=$crc"
cat server.log client.log
exit $(( src != 0 || crc != 0 ))
"""


def make(names: list[str], out_dir: Path, *, vm: VM, repo: Path,
         say: Callable[[str], None] = print, manifest: Path | None = None) -> list[Path]:
    """Make the named captures in ``vm``; write ``out_dir/NAME.pcap`` and the manifest lines."""
    unknown = [n for n in names if n not in CAPTURES]
    if unknown:
        raise VMError(f"unknown capture(s) {', '.join(unknown)}; known: {', '.join(CAPTURES)}")

    order = list(DRIVERS)
    names = sorted(dict.fromkeys(names), key=lambda n: order.index(CAPTURES[n].driver))  # stable within a driver
    made: list[Path] = []
    driver = "rxe"   # what agent.sh sets up
    try:
        for n in names:
            spec = CAPTURES[n]
            if spec.driver != driver:
                switch_driver(vm, spec.driver, say)
                driver = spec.driver
            made.append(_make_one(spec, out_dir, vm=vm, repo=repo, say=say, manifest=manifest))
    finally:
        if driver != "rxe" and vm.running:   # leave the VM as agent.sh set it up (rxe1, rxe2)
            switch_driver(vm, "rxe", say)
    return made


def switch_driver(vm: VM, driver: str, say: Callable[[str], None] = print) -> None:
    """Make ``driver``'s devices the ones on veth2/veth3 (see :data:`DRIVERS`)."""
    ko = "" if driver == "rxe" else str(siw_module(vm.kernel or "", crc=driver == "siw_crc", say=say))
    say(f"switching to {driver}" + (f" ({ko})" if ko else ""))
    sw = vm.run_job(driver_script(driver, ko), capture=False, timeout=60, name=f"driver-{driver}")
    if sw.rc != 0:
        raise VMError(f"could not switch the VM to {driver}:\n{sw.stdout[-2000:]}{sw.stderr[-1000:]}")
    loaded = " ".join(ln for ln in sw.stdout.splitlines() if "SoftiWARP" in ln)
    if loaded:
        say(f"{driver}: {loaded}")


def _make_one(spec: CaptureSpec, out_dir: Path, *, vm: VM, repo: Path, say: Callable[[str], None],
              manifest: Path | None) -> Path:
    n = spec.name
    say(f"{n}: {spec.server}  <->  {spec.client}")
    for attempt in (1, 2):
        res = vm.run_job(job_script(spec, repo), capture="veth2", timeout=180, name=n)
        if res.rc == 0 and res.pcap_path is not None and not res.capture_drops:
            break
        # under TCG on a busy machine perftest's clock calibration can fail ("Correlation
        # coefficient r^2 < 0.9 ... Can't produce a report"): one more try, then give up
        why = f"tcpdump dropped {res.capture_drops} packets" if res.rc == 0 else f"status {res.rc}"
        if attempt == 2:
            raise VMError(f"{n}: failed twice ({why}):\n{res.stdout[-2500:]}{res.stderr[-1000:]}")
        say(f"{n}: failed ({why}); trying once more")
    assert res.pcap_path is not None and res.job_dir is not None
    dest = out_dir / f"{n}.pcap"
    if spec.cut_at_write:
        first = cut_from_nth_write(res.pcap_path, dest, spec.cut_at_write)
        say(f"{n}: cut at frame {first} (RDMA Write FPDU #{spec.cut_at_write})")
    else:
        shutil.copyfile(res.pcap_path, dest)
    ctr = counters_json(res.job_dir, spec, vm.guest_kernel)
    (out_dir / f"{n}.counters.json").write_text(json.dumps(ctr, indent=1, sort_keys=True) + "\n")
    pkts = list(read(dest))
    rdma = sum(1 for p in pkts if p.packet.bth is not None or p.pdus)
    kind = "RoCEv2" if spec.driver == "rxe" else "iWARP"
    say(f"{n}: {len(pkts)} frames, {rdma} {kind} -> {dest} (+ {n}.counters.json)")
    extra = [f"client netem loss {spec.loss_client}"] if spec.loss_client else []
    extra += [spec.note] if spec.note else []
    line = (f"| `{n}.pcap` | {_dt.date.today().isoformat()} | {vm.guest_kernel} | {spec.driver} | {len(pkts)} | "
            f"{rdma} | `{_shown(spec.server, spec.driver)}` / `{_shown(spec.client, spec.driver)}`"
            f"{' (' + '; '.join(extra) + ')' if extra else ''} |")
    if manifest is not None:   # after every capture, so an interrupted run keeps what it made
        update_manifest(manifest, [line])
    return dest


def _shown(cmd: str, driver: str) -> str:
    sd, cd = DRIVERS[driver]
    return cmd.replace("$SD", sd).replace("$CD", cd).replace("$REPO/", "")


def _rdmap_write(pkt: object) -> bool:
    return any(type(layer.header).__name__ == "RDMAPControl" and getattr(layer.header, "opcode", None) == 0
               for layer in getattr(pkt, "layers", ()))


def cut_from_nth_write(src: Path, dest: Path, nth: int) -> int:
    """Write ``src`` from the frame that completes its ``nth`` RDMA Write FPDU on (a capture that
    starts mid-stream, made by cutting rather than by starting tcpdump late); returns that frame."""
    frames = [cp.frame_number for cp in read(src) for p in cp.pdus if _rdmap_write(p)]
    if len(frames) < nth:
        raise VMError(f"{src}: only {len(frames)} RDMA Write FPDUs, cannot cut at the {nth}th")
    first = frames[nth - 1]
    write_pcap(dest, (cp for cp in read(src) if cp.frame_number >= first))
    return first


_HW = re.compile(r"^hw (\S+) (\S+) (\d+)$", re.M)
_NET = re.compile(r"^net (\S+) (\S+) (\d+)$", re.M)
_TC = re.compile(r"^## tc (\S+)\n(.*?)(?=^## |^net |\Z)", re.M | re.S)
_NETEM = re.compile(r"qdisc netem [^\n]*\n\s*Sent (\d+) bytes (\d+) pkt \(dropped (\d+)")


def counters_json(job_dir: Path, spec: CaptureSpec, kernel: str) -> dict[str, object]:
    """The counters the job dumped before and after the run (``counters.{before,after}.txt``)."""
    out: dict[str, object] = {"scenario": spec.name, "kernel": kernel, "driver": spec.driver,
                              "server": {"device": DRIVERS[spec.driver][0], "netdev": "veth2", "ip": SRV},
                              "client": {"device": DRIVERS[spec.driver][1], "netdev": "veth3", "ip": "10.0.1.2"},
                              "capture_on": "veth2 (the server's side of the veth pair)",
                              "netem_loss_on_client_egress": spec.loss_client or None}
    for when in ("before", "after"):
        f = job_dir / f"counters.{when}.txt"
        text = f.read_text(errors="replace") if f.exists() else ""
        hw: dict[str, dict[str, int]] = {}
        for dev, name, val in _HW.findall(text):
            hw.setdefault(dev, {})[name] = int(val)
        net: dict[str, dict[str, int]] = {}
        for dev, name, val in _NET.findall(text):
            net.setdefault(dev, {})[name] = int(val)
        netem = {}
        for m in _TC.finditer(text):
            q = _NETEM.search(m.group(2))
            if q:
                netem[m.group(1)] = {"sent_pkts": int(q.group(2)), "dropped": int(q.group(3))}
        stat = "\n".join(ln for ln in text.splitlines() if ln.startswith("link "))
        out[when] = {"hw_counters": hw, "netdev": net, "netem": netem, "rdma_statistic": stat}
    return out


@dataclass
class CaptureCheck:
    """One capture checked as tests/capture/test_parity.py checks the committed ones."""

    path: Path
    packets: int = 0
    tshark_packets: int = 0
    fields_compared: int = 0
    unexplained: int = 0
    explained: int = 0
    crc: dict[str, int] | None = None   # rdmalab CRC verdicts: ICRC (rxe) or MPA CRC32c (siw) -> count
    unchecked_icrc: int = 0             # RoCE packets whose ICRC was not checked (must be 0)
    report: str = ""

    @property
    def ok(self) -> bool:
        return (self.unexplained == 0 and self.packets == self.tshark_packets and self.fields_compared > 0
                and self.unchecked_icrc == 0 and not (self.crc or {}).get("bad"))

    def line(self) -> str:
        crc = ", ".join(f"{k} {v}" for k, v in sorted((self.crc or {}).items()))
        return (f"{self.path.name}: {self.packets} packets (tshark {self.tshark_packets}), {self.fields_compared} "
                f"fields compared, {self.unexplained} unexplained differences ({self.explained} explained by known "
                f"Wireshark defects or tshark's choice of dissector); CRC: {crc or 'none'}{'' if self.ok else '  FAILED'}")


def check_capture(path: Path) -> CaptureCheck:
    """rdmalab's decoding against tshark's, field by field, and every ICRC / CRC32c verified."""
    from collections import Counter


    r = crosscheck(path)
    out = CaptureCheck(path, r.packets, r.wireshark_packets, r.fields_compared, len(r.unexplained),
                       len(r.explained), report=r.text())
    crc: Counter[str] = Counter()
    for cp in read(path):
        for pkt in [cp.packet, *cp.pdus]:
            if pkt.encap in ("rocev1", "rocev2", "ib") and pkt.crc_status is None:
                out.unchecked_icrc += 1
            if pkt.crc_status is not None:
                crc[str(pkt.crc_status)] += 1
    out.crc = dict(crc)
    return out


HEADER = "## Regenerated with `rdmalab capture`"
TABLE_HEAD = ("| file | date | kernel | driver | frames | RDMA | server / client command |\n"
              "|---|---|---|---|---|---|---|")


def update_manifest(path: Path, lines: list[str]) -> None:
    """Add or replace one table row per capture in the manifest's ``rdmalab capture`` section."""
    text = path.read_text() if path.exists() else "# Captures\n"
    if HEADER not in text:
        text = text.rstrip("\n") + (
            f"\n\n{HEADER}\n\nOne VM (`rdmalab.live.vm`): server on rxe1 or siw0 (veth2, 10.0.1.1), client on rxe2 "
            "or siw1 (veth3, 10.0.1.2), the two veths wired to each other, tcpdump on veth2 "
            "(`tcpdump -s 9216 -B 32768 -U --immediate-mode`, no filter). siw is built from linux-source "
            "(`rdmalab.live.siw`), siw_crc is the same build with `mpa_crc_required = true`. "
            "RDMA = frames with a BTH (rxe) or completing an MPA/DDP PDU (siw). "
            "`NAME.counters.json` holds both devices' counters dumped before and after the run. "
            f"Rows replace the files' earlier provenance above.\n\n{TABLE_HEAD}\n")
    # only rows of this section are replaced: the manifest's other tables name the same files
    at = text.index(HEADER)
    before, section = text[:at], text[at:]
    for line in lines:
        name = re.match(r"\| `([^`]+)`", line)
        assert name is not None
        pat = re.compile(rf"^\| `{re.escape(name.group(1))}` \|.*$", re.M)
        if pat.search(section):
            section = pat.sub(line.replace("\\", "\\\\"), section)
        else:   # append to the table: after its last row
            end = section.index(TABLE_HEAD) + len(TABLE_HEAD)
            while section.startswith("\n|", end):
                nl = section.find("\n", end + 1)
                end = len(section) if nl < 0 else nl
            section = section[:end] + "\n" + line + section[end:]
    text = before + section
    path.write_text(text if text.endswith("\n") else text + "\n")
