"""The kernel side of the data-integrity and wrong-rkey checks: pyverbs on rxe (Debian's python3-pyverbs).

Run by tests/live/test_interop.py inside the VM, with Debian's /usr/bin/python3 (pyverbs is built
for it), against ``interop_rdl_peer.py`` (the soft engine on UDP in the other namespace).  The
out-of-band exchange is a line of JSON each way over TCP.  Prints ``key=value`` lines.
"""

import hashlib
import json
import os
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
from pyverbs.wr import SGE, SendWR

SIZE = 1 << 16
ACC = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ | e.IBV_ACCESS_REMOTE_ATOMIC


def poll(cq, what, timeout=60.0):
    end = time.time() + timeout
    while time.time() < end:
        n, wcs = cq.poll(1)
        if n:
            return wcs[0]
    raise SystemExit(f"no completion for {what}")


def main():
    server = sys.argv[1]
    ctx = Context(name="rxe0")
    pd = PD(ctx)
    mr = MR(pd, SIZE * 2, ACC)
    cq = CQ(ctx, 64, None, None, 0)
    qps = []
    for _ in range(2):
        init = QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=QPCap(max_send_wr=16, max_recv_wr=16))
        a = QPAttr(port_num=1)
        a.qp_access_flags = ACC & ~e.IBV_ACCESS_LOCAL_WRITE
        qps.append(QP(pd, init, a))
    gid = ctx.query_gid(1, 1).gid
    psns = [int.from_bytes(os.urandom(3), "big") for _ in qps]
    s = socket.create_connection((server, 18600), timeout=60)
    f = s.makefile("rw")
    f.write(json.dumps({"qpns": [q.qp_num for q in qps], "psns": psns, "gid": gid, "rkey": mr.rkey,
                        "addr": mr.buf}) + "\n")
    f.flush()
    peer = json.loads(f.readline())
    for i, q in enumerate(qps):
        a = QPAttr(port_num=1)
        a.qp_access_flags = ACC & ~e.IBV_ACCESS_LOCAL_WRITE
        a.path_mtu = e.IBV_MTU_1024
        a.max_dest_rd_atomic = a.max_rd_atomic = 4
        a.min_rnr_timer, a.timeout, a.retry_cnt, a.rnr_retry = 12, 14, 7, 7
        a.ah_attr = AHAttr(port_num=1, is_global=1, gr=GlobalRoute(dgid=GID(peer["gid"]), sgid_index=1))
        a.dest_qp_num, a.rq_psn, a.sq_psn = peer["qpns"][i], peer["psns"][i], psns[i]
        q.to_rts(a)
    f.write("ready\n")
    f.flush()
    assert f.readline().strip() == "ready"
    qp = qps[0]

    def post(wr_id, opcode, local_off, length, remote_off, rkey=None, cmp=0, swap=0):
        wr = SendWR(wr_id=wr_id, opcode=opcode, num_sge=1, sg=[SGE(mr.buf + local_off, length, mr.lkey)],
                    send_flags=e.IBV_SEND_SIGNALED)
        key = peer["rkey"] if rkey is None else rkey
        if opcode in (e.IBV_WR_ATOMIC_CMP_AND_SWP, e.IBV_WR_ATOMIC_FETCH_AND_ADD):
            wr.set_wr_atomic(key, peer["addr"] + remote_off, cmp, swap)
        else:
            wr.set_wr_rdma(key, peer["addr"] + remote_off)
        qp.post_send(wr, None)
        return poll(cq, f"wr {wr_id}")

    data = os.urandom(SIZE)
    mr.write(data, SIZE, 0)
    w = post(1, e.IBV_WR_RDMA_WRITE, 0, SIZE, 0)
    print(f"write_status={w.status}")
    w = post(2, e.IBV_WR_RDMA_READ, SIZE, SIZE, 0)
    back = mr.read(SIZE, SIZE)
    print(f"read_status={w.status}")
    print("write_sha256=" + hashlib.sha256(data).hexdigest())
    print("readback_sha256=" + hashlib.sha256(back).hexdigest())
    old = int.from_bytes(data[:8], "little")
    w = post(3, e.IBV_WR_ATOMIC_FETCH_AND_ADD, 0, 8, 0, cmp=5)
    got_fa = int.from_bytes(mr.read(8, 0), "little")
    print(f"fetch_add_status={w.status} fetch_add_ok={int(got_fa == old)}")
    swap = 0x1122334455667788
    w = post(4, e.IBV_WR_ATOMIC_CMP_AND_SWP, 8, 8, 0, cmp=(old + 5) & (2**64 - 1), swap=swap)
    got_cs = int.from_bytes(mr.read(8, 8), "little")
    print(f"cmp_swap_status={w.status} cmp_swap_ok={int(got_cs == (old + 5) & (2**64 - 1))}")
    expect = swap.to_bytes(8, "little") + data[8:]
    print("expect_remote_sha256=" + hashlib.sha256(expect).hexdigest())
    # The engine's MR hash, computed on its side.
    f.write(json.dumps({"phase": "ops-done"}) + "\n")
    f.flush()
    theirs = json.loads(f.readline())
    print("remote_says_sha256=" + theirs["sha256"])
    print(f"hashes_match={int(theirs['sha256'] == hashlib.sha256(expect).hexdigest())}")
    # Wrong rkey from rxe: the engine must NAK (remote access error).
    w = post(5, e.IBV_WR_RDMA_WRITE, 0, 64, 0, rkey=peer["rkey"] ^ 0x5A00)
    name = "IBV_WC_REM_ACCESS_ERR" if w.status == e.IBV_WC_REM_ACCESS_ERR else "other"
    print(f"wrong_rkey_status={w.status} ({name})")
    # The other way round: our MR holds `data` at offset 0; the engine reads it, then writes with a wrong rkey.
    mr.write(data, SIZE, 0)
    f.write(json.dumps({"phase": "your-turn", "sha256": hashlib.sha256(data).hexdigest()}) + "\n")
    f.flush()
    print("engine_report=" + f.readline().strip())
    s.close()


if __name__ == "__main__":
    main()
