"""The real rxe captures of ``captures/``, made again in the lab VM (``rdmalab capture``).

Each entry is one stock program run as server on ``rxe1`` (veth2, 10.0.1.1) and as client on
``rxe2`` (veth3, 10.0.1.2), with tcpdump on veth2.  The command lines are those of
scripts/captures_guest.sh (which made the committed files between two VMs joined by a qemu
socket); here one VM is enough because rxe1 and rxe2 talk over the veth pair (see agent.sh).
"""

from __future__ import annotations

import datetime as _dt
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rdmalab.capture import read
from rdmalab.live.vm import VM, VMError

SRV = "10.0.1.1"
_D = "-d $KA_DEV"      # server side device
_DC = "-d $KB_DEV"     # client side device
_P = "-x 1 -n 5"


@dataclass(frozen=True)
class CaptureSpec:
    name: str
    ready: str            # "tcp:PORT" or "cm": how to tell the server is listening
    server: str
    client: str
    loss_client: str = ""  # netem loss on the client's egress (veth3), e.g. "10%"


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
    CaptureSpec("rxe_imm", "tcp:18516", "/usr/bin/python3 $REPO/scripts/imm_pingpong.py -d $KA_DEV -g 1",
                f"/usr/bin/python3 $REPO/scripts/imm_pingpong.py -d $KB_DEV -g 1 {SRV}"),
    CaptureSpec("rxe_rping", "cm", f"rping -s -a {SRV} -v -C 3 -S 64", f"rping -c -a {SRV} -v -C 3 -S 64"),
    CaptureSpec("rxe_write_bw_cm", "cm", "ib_write_bw -d $KA_DEV -R -n 5 -s 4096 --report_gbits",
                f"ib_write_bw -d $KB_DEV -R -n 5 -s 4096 --report_gbits {SRV}"),
    CaptureSpec("rxe_udaddy", "cm", f"udaddy -b {SRV} -C 3 -S 64", f"udaddy -s {SRV} -C 3 -S 64"),
    CaptureSpec("rxe_send_bw_loss", "tcp:18515", f"ib_send_bw {_D} -x 1 -n 12 -s 2048",
                f"ib_send_bw {_DC} -x 1 -n 12 -s 2048 {SRV}", loss_client="10%"),
]}


def job_script(spec: CaptureSpec, repo: Path, timeout: int = 120) -> str:
    if spec.ready.startswith("tcp:"):
        port = spec.ready[4:]
        wait = f"ss -ltn 'sport = :{port}' | grep -q LISTEN"
    else:
        wait = "rdma resource show cm_id 2>/dev/null | grep -q LISTEN"
    loss = f"tc qdisc add dev $KB_NETDEV root netem loss {spec.loss_client}\n" if spec.loss_client else ""
    return f"""REPO={repo}
{loss}echo "server: {spec.server}" > commands.txt
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

    made = []
    for n in names:
        spec = CAPTURES[n]
        say(f"{n}: {spec.server}  <->  {spec.client}")
        for attempt in (1, 2):
            res = vm.run(job_script(spec, repo), capture="veth2", timeout=180, name=n)
            if res.rc == 0 and res.pcap_path is not None and not res.capture_drops:
                break
            # under TCG on a busy machine perftest's clock calibration can fail ("Correlation
            # coefficient r^2 < 0.9 ... Can't produce a report"): one more try, then give up
            why = f"tcpdump dropped {res.capture_drops} packets" if res.rc == 0 else f"status {res.rc}"
            if attempt == 2:
                raise VMError(f"{n}: failed twice ({why}):\n{res.stdout[-2500:]}{res.stderr[-1000:]}")
            say(f"{n}: failed ({why}); trying once more")
        assert res.pcap_path is not None
        dest = out_dir / f"{n}.pcap"
        shutil.copyfile(res.pcap_path, dest)
        pkts = list(read(dest))
        roce = sum(1 for p in pkts if p.packet.bth is not None)
        say(f"{n}: {len(pkts)} frames, {roce} RoCEv2 -> {dest}")
        made.append(dest)
        line = (f"| `{n}.pcap` | {_dt.date.today().isoformat()} | {vm.guest_kernel} | {len(pkts)} | {roce} | "
                     f"`{spec.server}` / `{spec.client}`{' (client netem loss ' + spec.loss_client + ')' if spec.loss_client else ''} |")
        if manifest is not None:   # after every capture, so an interrupted run keeps what it made
            update_manifest(manifest, [line])
    return made


HEADER = "## Regenerated with `rdmalab capture`"
TABLE_HEAD = ("| file | date | kernel | frames | RoCEv2 | server / client command |\n"
              "|---|---|---|---|---|---|")


def update_manifest(path: Path, lines: list[str]) -> None:
    """Add or replace one table row per capture in the manifest's ``rdmalab capture`` section."""
    text = path.read_text() if path.exists() else "# Captures\n"
    if HEADER not in text:
        text = text.rstrip("\n") + (
            f"\n\n{HEADER}\n\nOne VM (`rdmalab.live.vm`): server on rxe1 (veth2, 10.0.1.1), client on rxe2 "
            "(veth3, 10.0.1.2), the two veths wired to each other, tcpdump on veth2 "
            "(`tcpdump -s 9216 -B 32768 -U --immediate-mode`, no filter). Rows replace the files' earlier provenance "
            f"above.\n\n{TABLE_HEAD}\n")
    # only rows of this section are replaced: the manifest's other tables name the same files
    at = text.index(HEADER)
    before, section = text[:at], text[at:]
    for line in lines:
        name = re.match(r"\| `([^`]+)`", line)
        assert name is not None
        pat = re.compile(rf"^\| `{re.escape(name.group(1))}` \|.*$", re.M)
        if pat.search(section):
            section = pat.sub(line.replace("\\", "\\\\"), section)
        else:
            head_at = section.index(TABLE_HEAD) + len(TABLE_HEAD)
            section = section[:head_at] + "\n" + line + section[head_at:]
    text = before + section
    path.write_text(text if text.endswith("\n") else text + "\n")
