"""iWARP capture decoding speed: the FPDU stream reassembly on a long real siw stream, in order and with gaps.

Builds a capture from the real ``captures/siw_crc_write_bw.pcap`` (MPA with CRC32c): its TCP
handshake and MPA Request/Reply, then the data connection's FPDU segments (RDMA Writes of
1442/1442/1254-byte ULPDUs, some split 1444 + 4) repeated with advancing sequence numbers until
``--packets`` frames, so that the stream stays one valid MPA stream.  A second file drops one
data segment in ``--gap-every`` (a capture that missed segments): every drop is a hole the
decoder must resynchronise after.  It then times, in this process:

* :class:`rdmalab.capture.iwarp.IwarpTracker` alone over the segments (PDUs/s);
* ``rdmalab decode -r FILE`` (summary lines) and ``-T fields -e iwarp_mpa.ulpdulength`` as whole
  processes, with tshark (``-d tcp.port==18515,iwarp_mpa`` is not needed: it sees the handshake)
  beside them unless ``--no-tshark``.

    python benchmarks/bench_iwarp_decode.py [--packets N] [--gap-every N] [--no-tshark]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:  # run from a checkout without installing
    sys.path.insert(0, _ROOT)

SOURCE = os.path.join(_ROOT, "captures", "siw_crc_write_bw.pcap")
DATA_PORT = 38470  # the data connection's initiator port in siw_crc_write_bw.pcap


def build(path: str, n: int, gap_every: int = 0) -> tuple[int, int]:
    """Write the repeated stream; return (frames written, data segments dropped)."""
    import dpkt

    from rdmalab.capture.pcapwriter import CaptureWriter

    with open(SOURCE, "rb") as fh:
        frames = [(ts, bytes(buf)) for ts, buf in dpkt.pcap.Reader(fh)]
    head: list[bytes] = []
    data: list[tuple[dpkt.ethernet.Ethernet, int]] = []
    for _, buf in frames:
        eth = dpkt.ethernet.Ethernet(buf)
        tcp = getattr(eth.data, "data", None)
        if not isinstance(tcp, dpkt.tcp.TCP) or DATA_PORT not in (tcp.sport, tcp.dport):
            continue
        if tcp.sport == DATA_PORT and len(tcp.data) and not tcp.data.startswith(b"MPA ID"):
            data.append((eth, tcp.seq))
        elif not data:
            head.append(buf)
    first = data[0][1]
    span = data[-1][1] + len(data[-1][0].data.data.data) - first
    written = dropped = k = 0
    with CaptureWriter(path, nano=True) as w:
        t = 1_800_000_000_000_000_000
        for buf in head:
            w.write(buf, t)
            t += 1000
            written += 1
        rep = 0
        while written < n:
            for eth, seq in data:
                k += 1
                if gap_every and k % gap_every == 0:
                    dropped += 1
                    continue
                eth.data.data.seq = (seq + rep * span) % (1 << 32)
                w.write(bytes(eth), t)
                t += 1000
                written += 1
                if written >= n:
                    break
            rep += 1
    return written, dropped


def tracker_rate(path: str) -> tuple[float, int]:
    """Seconds the tracker takes over every frame of ``path``, and the PDUs it returns."""
    from rdmalab.capture.iwarp import IwarpTracker
    from rdmalab.capture.pcapio import record_blocks
    from rdmalab.wire.frame import decode_ethernet

    pkts = [decode_ethernet(blk.buf[off:off + cap]) for blk in record_blocks(path)
            for off, cap in zip(blk.offset.tolist(), blk.caplen.tolist(), strict=True)]
    tr = IwarpTracker()
    t = time.perf_counter()
    got = 0
    for i, p in enumerate(pkts, start=1):
        got += len(tr.process(i, p))
    return time.perf_counter() - t, got


def timed(cmd: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--packets", type=int, default=100_000)
    ap.add_argument("--gap-every", type=int, default=50)
    ap.add_argument("--no-tshark", action="store_true")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="rdmalab-bench-iwarp-")
    try:
        for label, every in (("in order", 0), (f"1 segment in {args.gap_every} missing", args.gap_every)):
            path = os.path.join(tmp, f"siw_{every}.pcap")
            n, dropped = build(path, args.packets, every)
            dt, pdus = tracker_rate(path)
            print(f"{label}: {n:,} frames ({dropped:,} data segments dropped), {os.path.getsize(path) / 2**20:.1f} MiB")
            print(f"  IwarpTracker            : {pdus:,} PDUs in {dt:6.2f} s = {pdus / dt:10,.0f} PDUs/s, "
                  f"{n / dt:10,.0f} frames/s")
            py = [sys.executable, "-m", "rdmalab", "decode", "-r", path]
            print(f"  rdmalab decode          : {timed(py):6.2f} s")
            print(f"  rdmalab -T fields       : {timed([*py, '-T', 'fields', '-e', 'iwarp_mpa.ulpdulength']):6.2f} s")
            tshark = shutil.which("tshark")
            if tshark and not args.no_tshark:
                print(f"  tshark                  : {timed([tshark, '-n', '-r', path]):6.2f} s")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
