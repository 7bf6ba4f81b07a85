"""A key-value client on the kernel's rxe (Debian's python3-pyverbs) against ``rdmalab.tools.kvnet serve``.

Run by tests/live/test_kv_rxe.py inside the VM with /usr/bin/python3 (pyverbs is built for it), against the
store's server on the soft engine over UDP in the other namespace.  Written from the store's documented
formats (rdmalab/tools/kv.py and kvnet.py's docstrings), not with its code: the bucket (version u64 | key 16 |
value | CRC32 u32, little endian; empty: version 0), the home bucket (BLAKE2b-64 of the key, little endian,
modulo the buckets), the request slot (op u8 | key 16 | value | seq u32) and the response (seq u32 | status u8
| 3 pad | version u64 | value, after the 40-byte GRH of a UD receive).  Prints one JSON line.
"""

import hashlib
import json
import os
import socket
import struct
import sys
import time
import zlib

import pyverbs.enums as e
from pyverbs.addr import GID, AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import SGE, RecvWR, SendWR

QKEY = 0x4B560001
KEY = 16
GET, PUT = 1, 2
PORT = 18750
RECVS = 16


def poll(cq, what, timeout=60.0):
    end = time.time() + timeout
    while time.time() < end:
        n, wcs = cq.poll(1)
        if n:
            if wcs[0].status != e.IBV_WC_SUCCESS:
                raise SystemExit(f"{what}: completion status {wcs[0].status}")
            return wcs[0]
    raise SystemExit(f"no completion for {what}")


def main():
    server = sys.argv[1]
    hot = sys.argv[2].encode() if len(sys.argv) > 2 else b""
    ctx = Context(name="rxe0")
    pd = PD(ctx)
    cq, rcq = CQ(ctx, 256, None, None, 0), CQ(ctx, 256, None, None, 0)
    init = QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=QPCap(max_send_wr=16, max_recv_wr=16))
    a = QPAttr(port_num=1)
    a.qp_access_flags = e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
    rc = QP(pd, init, a)
    uinit = QPInitAttr(qp_type=e.IBV_QPT_UD, scq=rcq, rcq=rcq, cap=QPCap(max_send_wr=4, max_recv_wr=RECVS))
    ua = QPAttr(port_num=1)
    ua.qkey = QKEY
    ud = QP(pd, uinit, ua)
    psn = int.from_bytes(os.urandom(3), "big")
    s = socket.create_connection((server, PORT), timeout=60)
    f = s.makefile("rw")
    f.write(json.dumps({"gid": ctx.query_gid(1, 1).gid, "rc_qpn": rc.qp_num, "psn": psn, "ud_qpn": ud.qp_num}) + "\n")
    f.flush()
    peer = json.loads(f.readline())
    a = QPAttr(port_num=1)
    a.qp_access_flags = e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
    a.path_mtu = e.IBV_MTU_1024
    a.max_dest_rd_atomic = a.max_rd_atomic = 4
    a.min_rnr_timer, a.timeout, a.retry_cnt, a.rnr_retry = 12, 14, 7, 7
    a.ah_attr = AHAttr(port_num=1, is_global=1, gr=GlobalRoute(dgid=GID(peer["gid"]), sgid_index=1))
    a.dest_qp_num, a.rq_psn, a.sq_psn = peer["rc_qpn"], peer["psn"], psn
    rc.to_rts(a)
    n, vsize = peer["buckets"], peer["value_size"]
    bsize = 8 + KEY + vsize + 4
    req = 1 + KEY + vsize + 4
    resp = 40 + 16 + vsize
    mr = MR(pd, bsize + req + RECVS * resp, e.IBV_ACCESS_LOCAL_WRITE)
    roff = bsize + req

    def post_recv(i):
        ud.post_recv(RecvWR(wr_id=i, num_sge=1, sg=[SGE(mr.buf + roff + i * resp, resp, mr.lkey)]), None)

    for i in range(RECVS):
        post_recv(i)

    def read_bucket(i):
        wr = SendWR(wr_id=100, opcode=e.IBV_WR_RDMA_READ, num_sge=1, sg=[SGE(mr.buf, bsize, mr.lkey)],
                    send_flags=e.IBV_SEND_SIGNALED)
        wr.set_wr_rdma(peer["table_rkey"], peer["table"] + i * bsize)
        rc.post_send(wr, None)
        poll(cq, f"READ of bucket {i}")
        return mr.read(bsize, 0)

    def get_read(key, verify=True):
        home = int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little") % n
        reads = retries = 0
        for j in range(n):
            i = (home + j) % n
            while True:
                raw = read_bucket(i)
                reads += 1
                if not verify or zlib.crc32(raw[:-4]) == struct.unpack("<I", raw[-4:])[0]:
                    break
                retries += 1
            version = struct.unpack("<Q", raw[:8])[0]
            if version == 0:
                return None, reads, retries
            if raw[8:8 + KEY].rstrip(b"\0") == key:
                return raw[8 + KEY:8 + KEY + vsize].rstrip(b"\0"), reads, retries
        return None, reads, retries

    seq = [0]

    def rpc(op, key, value=b""):
        seq[0] += 1
        body = bytes([op]) + key.ljust(KEY, b"\0") + value.ljust(vsize, b"\0") + struct.pack("<I", seq[0])
        mr.write(body, len(body), bsize)
        wr = SendWR(wr_id=200, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(mr.buf + bsize, len(body), mr.lkey)],
                    send_flags=e.IBV_SEND_SIGNALED)
        wr.set_wr_rdma(peer["request_rkey"], peer["request"])
        rc.post_send(wr, None)
        poll(cq, f"request {seq[0]}")
        while True:
            wc = poll(rcq, f"the response to request {seq[0]}")
            r = mr.read(resp, roff + wc.wr_id * resp)[40:]
            post_recv(wc.wr_id)
            if struct.unpack("<I", r[:4])[0] == seq[0]:
                return r[4], struct.unpack("<Q", r[8:16])[0], r[16:16 + vsize].rstrip(b"\0")

    out = {"wrong": [], "reads": []}
    want = {}
    for i in range(20):
        k, v = b"rxe%d" % (i % 12), b"value %d from rxe" % i
        status, _, _ = rpc(PUT, k, v)
        want[k] = v
        if status != 0:
            out["wrong"].append(["put", k.decode(), status])
    for k, v in want.items():
        got, reads, _ = get_read(k)
        status, _, rv = rpc(GET, k)
        out["reads"].append(reads)
        if got != v or status != 0 or rv != v:
            out["wrong"].append([k.decode(), v.decode(), repr(got), status, repr(rv)])
    out["absent"] = [get_read(b"absent")[0], rpc(GET, b"absent")[0]]
    if hot:
        # Unchecked and checked READs of the hot key alternate, so that both kinds meet the same torn windows
        # (the writer's few rewrites: under TCG the guest's clock runs far slower than the host's, and a run
        # of two sequential phases saw one rewrite, torn for the whole unchecked phase and whole for the
        # checked one).  At least 100 of each; more, up to 2000, until each kind has met a torn bucket.
        whole = (b"A" * vsize, b"B" * vsize)
        seen = {False: {"reads": 0, "torn_returned": 0, "retries": 0}, True: {"reads": 0, "torn_returned": 0,
                                                                              "retries": 0}}
        for i in range(4000):
            verify = bool(i % 2)
            v, _, r = get_read(hot, verify)
            g = seen[verify]
            g["reads"] += 1
            g["torn_returned"] += v not in whole
            g["retries"] += r
            if i >= 199 and seen[False]["torn_returned"] and seen[True]["retries"]:
                break
        out["hot_unchecked"], out["hot_checked"] = seen[False], seen[True]
    f.write(json.dumps({"done": True}) + "\n")
    f.flush()
    out["server"] = json.loads(f.readline())
    print(json.dumps(out))


if __name__ == "__main__":
    main()
