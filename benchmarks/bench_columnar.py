"""Fields extraction speed: ``rdmalab decode -T fields`` against ``tshark -T fields``, same file, same run.

Builds a capture of at least ``--packets`` (default 1,000,000) real rxe packets by repeating the
RoCEv2 packets of the real Soft-RoCE captures in ``captures/rxe_*.pcap`` (each repetition shifted
in time to follow the previous one), in a temporary directory, then runs both programs as whole
processes with the same ``-e`` fields, output discarded, and prints packets per second and peak
RSS (``getrusage`` of the child) side by side.

    python benchmarks/bench_columnar.py [--packets N] [--keep FILE] [--no-tshark] [--filter EXPR]
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

FIELDS = ["frame.time_epoch", "ip.src", "ip.dst", "udp.srcport", "infiniband.bth.opcode", "infiniband.bth.destqp",
          "infiniband.bth.psn", "infiniband.bth.a", "infiniband.reth.va", "infiniband.reth.dmalen",
          "infiniband.aeth.syndrome", "infiniband.aeth.msn"]


def rxe_packets() -> list[tuple[int, bytes]]:
    """(time in ns, frame) of every RoCEv2 packet (UDP port 4791) in the real rxe captures."""
    from rdmalab.capture.columnar import record_blocks

    out: list[tuple[int, bytes]] = []
    for path in sorted(glob.glob(os.path.join(_ROOT, "captures", "rxe_*.pcap"))):
        for blk in record_blocks(path):
            for off, cap, ts in zip(blk.offset.tolist(), blk.caplen.tolist(), blk.ts_ns.tolist(), strict=True):
                frame = blk.buf[off:off + cap]
                if len(frame) > 42 and frame[12:14] == b"\x08\x00" and frame[23] == 17 and \
                        struct.unpack_from(">H", frame, 14 + (frame[14] & 15) * 4 + 2)[0] == 4791:
                    out.append((ts, frame))
    return out


def build(path: str, n: int) -> int:
    from rdmalab.capture.pcapwriter import CaptureWriter

    pkts = rxe_packets()
    if not pkts:
        sys.exit("no rxe RoCEv2 packets found in captures/")
    t0 = pkts[0][0]
    span = max(t for t, _ in pkts) - t0 + 1000
    written = 0
    rep = 0
    with CaptureWriter(path, nano=True) as w:  # nanosecond pcap, Ethernet
        while written < n:
            base = 1_800_000_000_000_000_000 + rep * span
            for t, frame in pkts:
                w.write(frame, base + (t - t0))
                written += 1
                if written >= n:
                    break
            rep += 1
    return written


_WRAPPER = (
    "import resource, subprocess, sys, time\n"
    "t = time.perf_counter()\n"
    "r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)\n"
    "dt = time.perf_counter() - t\n"
    "u = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
    "print(dt, u.ru_maxrss, r.returncode, u.ru_utime + u.ru_stime)\n"
    "sys.stderr.write(r.stderr.decode(errors='replace')[-500:])\n"
)


def run(cmd: list[str]) -> tuple[float, int, float]:
    """Wall time, peak RSS (KiB) and CPU time of one command in its own process, output discarded."""
    out = subprocess.run([sys.executable, "-c", _WRAPPER, *cmd], capture_output=True, text=True, check=False)
    dt, rss, rc, cpu = out.stdout.split()
    if int(rc) != 0:
        print(f"  ! {cmd[0]} exited {rc}: {out.stderr.strip()}", file=sys.stderr)
    return float(dt), int(rss), float(cpu)


def line(label: str, n: int, r: tuple[float, int, float]) -> str:
    dt, rss, cpu = r
    return (f"{label:<34}: {n / dt:12,.0f} packets/s wall ({dt:6.2f} s; CPU {cpu:6.2f} s), "
            f"peak RSS {rss / 1024:6.0f} MiB")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--packets", type=int, default=1_000_000)
    ap.add_argument("--keep", metavar="FILE", help="write the capture here and keep it")
    ap.add_argument("--no-tshark", action="store_true")
    ap.add_argument("--filter", metavar="EXPR", help="also pass -Y EXPR to both")
    args = ap.parse_args()
    if _ROOT not in sys.path:
        sys.path.insert(0, _ROOT)
    tmp = None
    if args.keep:
        path = args.keep
    else:
        tmp = tempfile.mkdtemp(prefix="rdmalab-bench-")
        path = os.path.join(tmp, "rxe_repeated.pcap")
    try:
        t = time.perf_counter()
        n = build(path, args.packets)
        size = os.path.getsize(path)
        print(f"{path}: {n:,} real rxe RoCEv2 packets, {size / 2**20:.1f} MiB (built in {time.perf_counter() - t:.1f} s)")
        print(f"fields: {' '.join(FIELDS)}" + (f"; filter: {args.filter}" if args.filter else ""))
        ef = [a for f in FIELDS for a in ("-e", f)]
        flt = ["-Y", args.filter] if args.filter else []
        load0 = os.getloadavg()[0]
        # where rdmalab's memory goes: the interpreter alone, with numpy, and the whole command on
        # a capture of a few dozen packets (imports, no data to speak of)
        tiny = os.path.join(_ROOT, "captures", "rxe_read_bw.pcap")
        base = [run([sys.executable, "-c", c])[1] for c in ("pass", "import numpy")]
        small = run([sys.executable, "-m", "rdmalab", "decode", "-r", tiny, "-T", "fields", *ef, *flt])[1]
        from rdmalab.capture.columnar import record_blocks  # after sys.path is set (a checkout, not installed)

        tiny_n = sum(len(blk.offset) for blk in record_blocks(tiny))
        rd = [sys.executable, "-m", "rdmalab", "decode", "-r", path, "-T", "fields", *ef, *flt]
        ours = run(rd)
        print(line(f"rdmalab decode -T fields (default -j {max(1, (os.cpu_count() or 1) - 1)})", n, ours))
        one = run([*rd, "-j", "1"])
        print(line("rdmalab decode -T fields -j 1", n, one))
        if not args.no_tshark and shutil.which("tshark"):
            ts = run(["tshark", "-n", "-r", path, "-T", "fields", *ef, *flt])
            print(line("tshark -T fields", n, ts))
            print(f"speed-up: {ts[0] / ours[0]:.1f}x tshark's packets/s ({ts[0] / one[0]:.1f}x with -j 1; CPU time "
                  f"{ts[2] / ours[2]:.1f}x / {ts[2] / one[2]:.1f}x); memory: rdmalab {ours[1] / 1024:.0f} MiB "
                  f"({one[1] / 1024:.0f} MiB with -j 1), tshark {ts[1] / 1024:.0f} MiB")
            print(f"load average (1 min) before / after: {load0:.1f} / {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        elif not args.no_tshark:
            print("tshark is not installed: no comparison")
        print(f"rdmalab's peak RSS: python alone {base[0] / 1024:.0f} MiB, with numpy {base[1] / 1024:.0f} MiB, the "
              f"same command on a {tiny_n}-packet capture {small / 1024:.0f} MiB (imports), on this file "
              f"{ours[1] / 1024:.0f} MiB (+ {(ours[1] - small) / 1024:.0f} MiB of blocks, columns and text)")
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
