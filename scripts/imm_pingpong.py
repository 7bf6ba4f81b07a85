#!/usr/bin/python3
"""Tiny RC "with immediate" exchange with pyverbs (python3-pyverbs, rdma-core 44).

perftest 4.5-0.17 and the ibv_*_pingpong examples cannot post *_WITH_IMM work
requests, so this program exists only to put SEND_WITH_IMM and
RDMA_WRITE_WITH_IMM packets on the wire for captures.

    server: imm_pingpong.py -d rxe0 -g GIDIDX
    client: imm_pingpong.py -d rxe0 -g GIDIDX SERVER_IP

Out of band (TCP port 18516), each side sends one ASCII line
"qpn psn rkey addr gid\\n" (qpn/psn/rkey/addr in hex, gid as 8x4 hex words).

Traffic (PSNs random, path MTU 1024):
  1. client -> server  SEND_WITH_IMM        64 B,   imm 0x11223344
  2. client -> server  RDMA_WRITE_WITH_IMM  2500 B, imm 0x55667788 (First/Middle/Last w/ Imm)
  3. client -> server  RDMA_WRITE           8 B     (no imm, Only)
  4. server -> client  SEND_WITH_IMM        32 B,   imm 0xcafef00d
  5. client -> server  SEND (no imm)        16 B    "bye" (server then exits)
"""
import argparse
import random
import socket
import sys
import time

import pyverbs.enums as e
from pyverbs.addr import GID, AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import SGE, RecvWR, SendWR

PORT = 1
SIZE = 8192
ACC = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ


def poll(cq, what, timeout=30.0):
    end = time.time() + timeout
    while time.time() < end:
        n, wcs = cq.poll(1)
        if n:
            wc = wcs[0]
            if wc.status != e.IBV_WC_SUCCESS:
                sys.exit(f"{what}: completion status {wc.status}")
            print(f"{what}: opcode={wc.opcode} len={wc.byte_len} "
                  f"flags={wc.wc_flags} imm=0x{socket.ntohl(wc.imm_data):08x}", flush=True)
            return wc
    sys.exit(f"{what}: timeout")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-d", default="rxe0")
    ap.add_argument("-g", type=int, default=1)
    ap.add_argument("-p", type=int, default=18516)
    ap.add_argument("server", nargs="?")
    a = ap.parse_args()

    ctx = Context(name=a.d)
    pd = PD(ctx)
    mr = MR(pd, SIZE, ACC)
    cq = CQ(ctx, 64, None, None, 0)
    init = QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq,
                      cap=QPCap(max_send_wr=16, max_recv_wr=16))
    qa = QPAttr(port_num=PORT)
    qa.qp_access_flags = ACC
    qp = QP(pd, init, qa)
    psn = random.getrandbits(24)
    gid = ctx.query_gid(PORT, a.g)
    mine = f"{qp.qp_num:x} {psn:x} {mr.rkey:x} {mr.buf:x} {gid.gid}\n".encode()

    if a.server:
        s = socket.create_connection((a.server, a.p))
    else:
        ls = socket.socket()
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind(("0.0.0.0", a.p))
        ls.listen(1)
        s, _ = ls.accept()
    s.sendall(mine)
    f = s.makefile("rb")
    rqpn, rpsn, rrkey, raddr, rgid = f.readline().decode().split()
    rqpn, rpsn, rrkey, raddr = (int(x, 16) for x in (rqpn, rpsn, rrkey, raddr))
    print(f"local qpn 0x{qp.qp_num:x} psn 0x{psn:x}; remote qpn 0x{rqpn:x} psn 0x{rpsn:x}", flush=True)

    # post receives before going to RTR
    for i in range(4):
        qp.post_recv(RecvWR(wr_id=100 + i, num_sge=1, sg=[SGE(mr.buf + 4096, 4096, mr.lkey)]))

    ra = QPAttr(port_num=PORT)
    ra.qp_access_flags = ACC
    ra.path_mtu = e.IBV_MTU_1024
    ra.max_dest_rd_atomic = 1
    ra.max_rd_atomic = 1
    ra.min_rnr_timer = 12
    ra.timeout = 14
    ra.retry_cnt = 7
    ra.rnr_retry = 7
    gr = GlobalRoute(dgid=GID(rgid), sgid_index=a.g, hop_limit=64)
    ra.ah_attr = AHAttr(port_num=PORT, is_global=1, gr=gr)
    ra.dest_qp_num, ra.rq_psn, ra.sq_psn = rqpn, rpsn, psn
    qp.to_rts(ra)

    # sync: both sides are RTS
    s.sendall(b"R")
    assert f.read(1) == b"R"

    def send(opcode, length, imm=0, rdma=False, fill=b"x"):
        mr.write(fill * length, length, 0)
        wr = SendWR(wr_id=opcode, opcode=opcode, num_sge=1,
                    sg=[SGE(mr.buf, length, mr.lkey)], send_flags=e.IBV_SEND_SIGNALED,
                    imm_data=socket.htonl(imm))
        if rdma:
            wr.set_wr_rdma(rrkey, raddr)
        qp.post_send(wr)
        poll(cq, f"send opcode {opcode}")

    if a.server:  # client role
        send(e.IBV_WR_SEND_WITH_IMM, 64, 0x11223344, fill=b"s")
        send(e.IBV_WR_RDMA_WRITE_WITH_IMM, 2500, 0x55667788, rdma=True, fill=b"w")
        send(e.IBV_WR_RDMA_WRITE, 8, rdma=True, fill=b"W")
        poll(cq, "recv")
        send(e.IBV_WR_SEND, 16, fill=b"b")
    else:         # server role
        poll(cq, "recv")
        poll(cq, "recv")
        send(e.IBV_WR_SEND_WITH_IMM, 32, 0xCAFEF00D, fill=b"r")
        poll(cq, "recv")
    s.sendall(b"D")
    f.read(1)
    print("done", flush=True)


if __name__ == "__main__":
    main()
