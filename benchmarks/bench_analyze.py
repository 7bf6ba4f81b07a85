"""`rdmalab analyze` beside `tshark -T fields` on the same files, whole processes, same run.

For each hostile capture (tests/hostile.py builds them) at two or more sizes: wall time and peak RSS
of `rdmalab analyze -q FILE` (text output to /dev/null) and of `tshark -n -r FILE -T fields` with
the fields the analysis reads.  Time and memory should grow no faster than the packet count.

    python benchmarks/bench_analyze.py [--sizes 100000,1000000] [--kinds appended,duplicated,...] [--repeat 2]

The last table puts the sizes side by side (fastest run of each): rdmalab's and tshark's time and
peak RSS, the growth from the smallest size to the largest, and tshark's time over rdmalab's.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import hostile  # noqa: E402  (tests/hostile.py: the hostile captures are test fixtures, not the package's)

CAPTURES = Path(__file__).resolve().parents[1] / "captures"
FIELDS = ["frame.number", "frame.time_epoch", "ip.src", "ip.dst", "infiniband.bth.opcode", "infiniband.bth.psn",
          "infiniband.bth.destqp", "infiniband.aeth.syndrome", "infiniband.aeth.msn"]


def build(kind: str, path: str, n: int) -> int:
    real = CAPTURES / "rxe_write_bw_loss.pcap"
    if kind == "appended":  # the real rxe captures, appended one after the other, then repeated
        base = path + ".base.pcapng"
        subprocess.run(["mergecap", "-a", "-w", base, *map(str, sorted(CAPTURES.glob("rxe_*.pcap")))], check=True)
        got = hostile.appended(base, path, n)
        os.remove(base)
        return got
    if kind == "duplicated":
        return hostile.duplicated(real, path, n)
    if kind == "psn_wrap":
        return hostile.psn_wrap(path, n)
    if kind == "10k_connections":
        return hostile.many_connections(path, n)
    if kind == "reordered":
        return hostile.reordered(real, path, n)
    if kind == "snaplen_60":
        return hostile.snaplen_cut(real, path, n, 60)
    if kind == "truncated_tail":
        return hostile.truncated_tail(real, path, n)
    raise SystemExit(f"unknown kind {kind}")


def run(cmd: list[str]) -> tuple[float, float, int]:
    """(seconds, peak RSS MiB of the child, exit status): each command in its own child of a fresh
    `python -c` so that RUSAGE_CHILDREN is this command's alone."""
    probe = ("import resource,subprocess,sys,time;t=time.perf_counter();"
             "r=subprocess.run(sys.argv[1:],stdout=subprocess.DEVNULL,stderr=subprocess.DEVNULL);"
             "print(time.perf_counter()-t,resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,r.returncode)")
    out = subprocess.run([sys.executable, "-c", probe, *cmd], capture_output=True, text=True, check=True).stdout.split()
    return float(out[0]), int(out[1]) / 1024, int(out[2])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="100000,1000000")
    ap.add_argument("--kinds", default="appended,duplicated,psn_wrap,10k_connections,reordered,snaplen_60,"
                                       "truncated_tail")
    ap.add_argument("--repeat", type=int, default=1,
                    help="run each command this many times, alternating rdmalab and tshark; each run is printed "
                         "and the summary takes the fastest run of each (the largest peak RSS)")
    ap.add_argument("--no-tshark", action="store_true")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"{'capture':<16} {'packets':>9} | {'analyze s':>9} {'MiB':>6} | {'tshark s':>8} {'MiB':>6} | "
          f"{'speed vs tshark':>15} | {'s per 1M pkts':>13} {'MiB per 1M':>10}")
    best: dict[tuple[str, int], tuple[int, float, float, float, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for kind in args.kinds.split(","):
            for n in sizes:
                path = os.path.join(tmp, f"{kind}_{n}.pcap")
                got = build(kind, path, n)
                for _ in range(args.repeat):
                    ta, ma, rc = run([sys.executable, "-m", "rdmalab", "analyze", "-q", path])
                    why = "the capture ends mid-record" if kind == "truncated_tail" else "error"
                    note = "" if rc == 0 else f" (exit {rc}: {why})"
                    if args.no_tshark:
                        tt, mt = float("nan"), float("nan")
                    else:
                        tt, mt, _ = run(["tshark", "-n", "-r", path, "-T", "fields",
                                         *[x for f in FIELDS for x in ("-e", f)]])
                    print(f"{kind:<16} {got:>9} | {ta:>9.2f} {ma:>6.0f} | {tt:>8.2f} {mt:>6.0f} | {tt / ta:>14.2f}x | "
                          f"{ta / got * 1e6:>13.1f} {ma / got * 1e6:>10.0f}{note}", flush=True)
                    b = best.get((kind, n))
                    best[(kind, n)] = (got, ta, ma, tt, mt) if b is None else \
                        (got, min(b[1], ta), max(b[2], ma), min(b[3], tt), max(b[4], mt))
                os.remove(path)
    if len(sizes) < 2:
        return
    # the sizes side by side: time and memory of each size, and how they grew from the smallest
    lo, hi = min(sizes), max(sizes)
    print(f"\nfastest of {args.repeat} run(s); growth = {hi:,}-packet figure / {lo:,}-packet figure "
          f"(packets grew {hi / lo:g}x)")
    print(f"{'capture':<16} | {'rdmalab s':>9} {lo:>9,} {hi:>9,} {'growth':>6} | {'MiB':>5} {lo:>9,} {hi:>9,} "
          f"{'growth':>6} | {'tshark s':>8} {lo:>9,} {hi:>9,} | {'MiB':>3} {lo:>9,} {hi:>9,} | ratio {lo:>9,} {hi:>9,}")
    for kind in args.kinds.split(","):
        a, b = best.get((kind, lo)), best.get((kind, hi))
        if a is None or b is None:
            continue
        print(f"{kind:<16} | {'':>9} {a[1]:>9.2f} {b[1]:>9.2f} {b[1] / a[1]:>5.1f}x | {'':>5} {a[2]:>9.0f} {b[2]:>9.0f} "
              f"{b[2] / a[2]:>5.1f}x | {'':>8} {a[3]:>9.2f} {b[3]:>9.2f} | {'':>3} {a[4]:>9.0f} {b[4]:>9.0f} | "
              f"{'':>5} {a[3] / a[1]:>8.2f}x {b[3] / b[1]:>8.2f}x")


if __name__ == "__main__":
    main()
