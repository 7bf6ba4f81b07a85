"""Decode speed: ``rdmalab decode -T json`` against ``tshark -T json`` on the same file, same run.

Synthesises a RoCEv2 pcap (default 200,000 packets: a mix of SEND, WRITE, READ, ACK, atomics and
UD, with PSNs counting up) with :func:`rdmalab.wire.frame.encode_rocev2`, then runs both tools
with their output thrown away and prints packets per second and peak RSS for each.  Also times
the in-process API (``rdmalab.capture.read`` + ``to_json``) without the process start-up.

    python benchmarks/bench_decode.py [--packets N] [--keep FILE] [--no-tshark]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:  # run from a checkout without installing
    sys.path.insert(0, _ROOT)
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (_ROOT, os.environ.get("PYTHONPATH")) if p)

from rdmalab.capture import read, to_json, write_pcap  # noqa: E402
from rdmalab.wire import AETH, BTH, DETH, RETH, AtomicETH, ImmDt, encode_rocev2  # noqa: E402

_WRAPPER = (
    "import resource, subprocess, sys, time\n"
    "t = time.perf_counter()\n"
    "r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)\n"
    "dt = time.perf_counter() - t\n"
    "u = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
    "print(dt, u.ru_maxrss, r.returncode, u.ru_utime + u.ru_stime)\n"
    "sys.stderr.write(r.stderr.decode(errors='replace')[-500:])\n"
)


def synthesize(path: str, n: int) -> None:
    payload = bytes(range(64))
    templates = [
        lambda psn: encode_rocev2(BTH(opcode=0x04, destqp=0x11, psn=psn, ackreq=1), [], payload),
        lambda psn: encode_rocev2(BTH(opcode=0x0A, destqp=0x11, psn=psn), [RETH(0x7F0000001000, 0x1234, 64)], payload),
        lambda psn: encode_rocev2(BTH(opcode=0x0B, destqp=0x11, psn=psn), [RETH(0x7F0000002000, 0x1234, 64),
                                                                            ImmDt(0xDEADBEEF)], payload),
        lambda psn: encode_rocev2(BTH(opcode=0x0C, destqp=0x11, psn=psn), [RETH(0x7F0000003000, 0x1234, 4096)]),
        lambda psn: encode_rocev2(BTH(opcode=0x10, destqp=0x22, psn=psn), [AETH.ack(psn & 0xFFFFFF)], payload),
        lambda psn: encode_rocev2(BTH(opcode=0x11, destqp=0x22, psn=psn), [AETH.ack(psn & 0xFFFFFF)]),
        lambda psn: encode_rocev2(BTH(opcode=0x14, destqp=0x11, psn=psn), [AtomicETH(0x7F0000004000, 0x1234, 1)]),
        lambda psn: encode_rocev2(BTH(opcode=0x64, destqp=0x33, psn=psn), [DETH(0x11111111, 0, 0x44)], payload),
    ]

    def frames() -> Iterator[tuple[float, bytes]]:
        for i in range(n):
            yield (1.0e9 + i * 1e-6, templates[i % len(templates)](i & 0xFFFFFF))

    write_pcap(path, frames())


def run(cmd: list[str]) -> tuple[float, int, float]:
    """Wall time, peak RSS (KiB) and CPU time of one command, its output discarded."""
    out = subprocess.run([sys.executable, "-c", _WRAPPER, *cmd], capture_output=True, text=True, check=False)
    dt, rss, rc, cpu = out.stdout.split()
    if int(rc) != 0:
        print(f"  ! {cmd[0]} exited {rc}: {out.stderr.strip()}", file=sys.stderr)
    return float(dt), int(rss), float(cpu)


def line(label: str, n: int, r: tuple[float, int, float]) -> str:
    dt, rss, cpu = r
    return (f"{label:<32}: {n / dt:10,.0f} packets/s wall ({dt:.2f} s; CPU {cpu:.2f} s = {n / cpu:,.0f} packets/s), "
            f"peak RSS {rss / 1024:.0f} MB")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--packets", type=int, default=200_000)
    ap.add_argument("--keep", metavar="FILE", help="write the synthetic capture here and keep it")
    ap.add_argument("--no-tshark", action="store_true")
    args = ap.parse_args()

    tmpdir = tempfile.mkdtemp(prefix="rdmalab-bench-")
    path = args.keep or os.path.join(tmpdir, "rocev2_bench.pcap")
    t = time.perf_counter()
    synthesize(path, args.packets)
    size = os.path.getsize(path)
    print(f"synthesised {args.packets} RoCEv2 packets ({size / 1e6:.1f} MB) in {time.perf_counter() - t:.1f} s: {path}")

    t = time.perf_counter()
    n = 0
    for cp in read(path):
        to_json(cp)
        n += 1
    dt = time.perf_counter() - t
    print(f"rdmalab API   read()+to_json()  : {n / dt:10,.0f} packets/s ({dt:.2f} s)")

    rdmalab_cmd = [sys.executable, "-m", "rdmalab", "decode", "-T", "json", "-r", path]
    print(line("rdmalab decode -T json", args.packets, run(rdmalab_cmd)))
    print(line("rdmalab decode (summary lines)", args.packets, run([sys.executable, "-m", "rdmalab", "decode", "-r", path])))

    tshark = shutil.which("tshark")
    if tshark and not args.no_tshark:
        print(line("tshark -T json", args.packets, run([tshark, "-n", "-r", path, "-T", "json"])))
        print(line("tshark (summary lines)", args.packets, run([tshark, "-n", "-r", path])))
    else:
        print("tshark: not run (not installed or --no-tshark)")
    if not args.keep:
        shutil.rmtree(tmpdir, ignore_errors=True)


if __name__ == "__main__":
    main()
