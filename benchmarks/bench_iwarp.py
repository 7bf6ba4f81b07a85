"""The engine's iWARP on kernel TCP: ib_write_bw-style throughput against a plain Python TCP loop, same run.

Two soft iWARP devices on loopback addresses (127.0.0.1 and 127.0.0.2), each end a kernel TCP
socket (:class:`rdmalab.fabric.tcpkernel.KernelTcp`), connected with rdma_cm (TCP + MPA).  Device
A posts RDMA WRITEs of ``--size`` bytes, ``--depth`` at a time, and a READ at the end (which
completes only after every WRITE was placed: one TCP stream, in order), so the figure covers the
receiver's placement too.  FPDUs are sized for an Ethernet MSS of 1448 (what siw uses on a
1500-byte link), CRC32c off (siw's default) and on.

The baseline, in the same run and process: a plain loop that moves the *same bytes* (the same
number of octets, in writes of the same FPDU size) through a pair of loopback TCP sockets and
reads them at the other end, with no protocol work at all.  The ratio of the two payload rates
is what the iWARP protocol costs in Python.  Kernel siw, the real peer, is not on this machine
(the lab VM has it: ``ib_write_bw -d siw0`` there, issue 22's live tests), so it is not in this table.

    python benchmarks/bench_iwarp.py [--size BYTES] [--bytes N] [--depth N] [--rounds N]
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:  # run from a checkout without installing
    sys.path.insert(0, _ROOT)


def engine_run(size: int, iters: int, depth: int, crc: bool, port: int) -> tuple[float, float, int]:
    """WRITEs of ``size`` bytes, ``iters`` of them, then one READ; wall and CPU seconds and the FPDUs sent."""
    from rdmalab.fabric.tcpkernel import KernelTcp
    from rdmalab.verbs import enums as e
    from rdmalab.verbs.cm_enums import RAI_PASSIVE
    from rdmalab.verbs.cmid import CMID, AddrInfo, CMEvent, CMEventChannel, ConnParam
    from rdmalab.verbs.device import set_default_devices
    from rdmalab.verbs.mr import MR
    from rdmalab.verbs.qp import QPCap, QPInitAttr
    from rdmalab.wire.mpa import mulpdu

    kt = KernelTcp(poll_wait=0.0)
    kt.add_device("b0", "127.0.0.1")
    kt.add_device("b1", "127.0.0.2", mpa_crc=crc)
    set_default_devices(lambda: kt)
    init = QPInitAttr(qp_type=e.IBV_QPT_RC, cap=QPCap(max_send_wr=depth + 2, max_recv_wr=4), sq_sig_all=0)
    sch, cch = CMEventChannel(), CMEventChannel()
    lid = CMID(sch)
    lid.bind_addr(AddrInfo(src="127.0.0.2", src_service=port, flags=RAI_PASSIVE))
    lid.listen()
    cli = CMID(cch)
    cli.resolve_addr(AddrInfo(dst="127.0.0.2", dst_service=port))
    CMEvent(cch)
    cli.resolve_route()
    CMEvent(cch)
    cli.create_qp(init)
    cli.connect(ConnParam(resources=1, depth=1))
    srv = CMID(CMEvent(sch), listen_id=lid)
    srv.create_qp(init)
    srv.accept(ConnParam(resources=1, depth=1))
    CMEvent(cch)
    assert cli.qp is not None and srv.qp is not None
    for q in (cli.qp.engine, srv.qp.engine):
        q.mulpdu = mulpdu(1448)  # FPDUs as siw cuts them on a 1500-byte Ethernet
    target = MR(srv.pd, size, 7)
    src = cli.reg_read(size)
    src.write(os.urandom(size), size)
    sink = cli.reg_write(size)
    t0, c0 = time.perf_counter(), time.process_time()
    left = iters
    while left:
        burst = min(depth, left)
        for i in range(burst):
            flags = e.IBV_SEND_SIGNALED if i == burst - 1 else 0
            cli.post_write(src, size, target.buf, target.rkey, flags=flags)
        cli.get_send_comp()
        left -= burst
    cli.post_read(sink, size, target.buf, target.rkey, flags=e.IBV_SEND_SIGNALED)
    wc = cli.get_send_comp()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    if wc.status != 0 or sink.read(size, 0) != src.read(size, 0):
        raise SystemExit("the engine's transfer failed")
    fpdus = cli.qp.engine.fpdus_sent
    kt.close()
    set_default_devices(None)
    return wall, cpu, fpdus


def plain_run(total: int, chunk: int, port: int) -> tuple[float, float]:
    """``total`` bytes in writes of ``chunk`` through loopback TCP, read at the other end."""
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.2", port))
    ls.listen(1)
    a = socket.create_connection(("127.0.0.2", port), source_address=("127.0.0.1", 0))
    b, _ = ls.accept()
    for s in (a, b):
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.setblocking(False)
    block = os.urandom(chunk)
    t0, c0 = time.perf_counter(), time.process_time()
    sent = got = 0
    pending = b""
    while got < total:
        if sent < total or pending:
            if not pending:
                pending = block[:min(chunk, total - sent)]
                sent += len(pending)
            try:
                n = a.send(pending)
                pending = pending[n:]
            except BlockingIOError:
                pass
        try:
            data = b.recv(262144)
            got += len(data)
        except BlockingIOError:
            pass
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    for s in (a, b, ls):
        s.close()
    return wall, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=65536)
    ap.add_argument("--bytes", type=int, default=32 << 20)
    ap.add_argument("--depth", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    iters = max(1, args.bytes // args.size)
    total = (iters + 1) * args.size
    print(f"RDMA WRITE x {iters} of {args.size} bytes + 1 READ, FPDUs for MSS 1448, loopback TCP; "
          f"best of {args.rounds}")
    print(f"{'':28} {'wall s':>8} {'CPU s':>8} {'Mbit/s':>9} {'vs plain TCP':>13}")
    port = 21000 + os.getpid() % 20000
    for crc in (False, True):
        best_e = best_p = (float("inf"), float("inf"))
        fpdus = 0
        for r in range(args.rounds):
            w, c, fpdus = engine_run(args.size, iters, args.depth, crc, port + 2 * r + (100 if crc else 0))
            best_e = min(best_e, (w, c))
            chunk = max(1, total // max(1, fpdus))
            best_p = min(best_p, plain_run(total, chunk, port + 2 * r + 1 + (100 if crc else 0)))
        rate_e = total * 8 / best_e[0] / 1e6
        rate_p = total * 8 / best_p[0] / 1e6
        label = f"engine iWARP, CRC {'on' if crc else 'off'}"
        print(f"{label:28} {best_e[0]:8.3f} {best_e[1]:8.3f} {rate_e:9.0f} {rate_e / rate_p:12.2f}x")
        print(f"{'plain TCP, same bytes':28} {best_p[0]:8.3f} {best_p[1]:8.3f} {rate_p:9.0f} {'1.00x':>13}"
              f"   ({fpdus} FPDUs, writes of {total // max(1, fpdus)} bytes)")


if __name__ == "__main__":
    main()
