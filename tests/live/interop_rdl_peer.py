"""The soft engine's side of the data-integrity and wrong-rkey checks (see interop_rxe_peer.py).

Runs in the engine's network namespace: an RC QP pair on ``rdmalab.fabric.udp.UdpFabric``, an MR
the kernel side writes, reads and runs atomics on; then it reads the kernel's MR and writes to it
with a wrong rkey.  Prints ``key=value`` lines.
"""

import hashlib
import json
import os
import socket
import sys
import time

from rdmalab.fabric.udp import UdpFabric
from rdmalab.verbs import enums as e
from rdmalab.verbs.addr import GID, AHAttr, GlobalRoute
from rdmalab.verbs.cq import CQ
from rdmalab.verbs.device import Context
from rdmalab.verbs.mr import MR
from rdmalab.verbs.pd import PD
from rdmalab.verbs.qp import QP, QPAttr, QPCap, QPInitAttr
from rdmalab.verbs.wr import SGE, SendWR

SIZE = 1 << 16
ACC = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ | e.IBV_ACCESS_REMOTE_ATOMIC


def main():
    fab = UdpFabric(sys.argv[1], poll_wait=0.0, pcap=sys.argv[2] if len(sys.argv) > 2 else None)
    ctx = Context(name=fab.device.name, fabric=fab)
    pd = PD(ctx)
    mr = MR(pd, SIZE * 2, ACC)
    cq = CQ(ctx, 64)
    qps = []
    for _ in range(2):
        init = QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=QPCap(max_send_wr=16, max_recv_wr=16))
        a = QPAttr(port_num=1)
        a.qp_access_flags = ACC & ~e.IBV_ACCESS_LOCAL_WRITE
        qps.append(QP(pd, init, a))
    psns = [int.from_bytes(os.urandom(3), "big") for _ in qps]
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", 18600))
    srv.listen(1)
    conn, _ = srv.accept()
    conn.setblocking(True)
    f = conn.makefile("rw")
    peer = json.loads(f.readline())
    f.write(json.dumps({"qpns": [q.qp_num for q in qps], "psns": psns, "gid": ctx.query_gid(1, 1).gid,
                        "rkey": mr.rkey, "addr": mr.buf}) + "\n")
    f.flush()
    for i, q in enumerate(qps):
        a = QPAttr(port_num=1, path_mtu=e.IBV_MTU_1024)
        a.qp_access_flags = ACC & ~e.IBV_ACCESS_LOCAL_WRITE
        a.max_dest_rd_atomic = a.max_rd_atomic = 4
        a.min_rnr_timer, a.timeout, a.retry_cnt, a.rnr_retry = 12, 14, 7, 7
        a.ah_attr = AHAttr(port_num=1, is_global=1, gr=GlobalRoute(dgid=GID(peer["gid"]), sgid_index=1))
        a.dest_qp_num, a.rq_psn, a.sq_psn = peer["qpns"][i], peer["psns"][i], psns[i]
        q.to_rts(a)
    assert f.readline().strip() == "ready"
    f.write("ready\n")
    f.flush()

    def serve_until_line():
        # The engine answers the kernel's requests from its event loop while we wait for the next line.
        buf = b""
        conn.setblocking(False)
        while not buf.endswith(b"\n"):
            fab.step(0.01)
            try:
                chunk = conn.recv(4096)
                if not chunk:
                    raise SystemExit("peer closed")
                buf += chunk
            except BlockingIOError:
                pass
        conn.setblocking(True)
        return json.loads(buf)

    msg = serve_until_line()
    assert msg["phase"] == "ops-done"
    mine = hashlib.sha256(mr.read(SIZE, 0)).hexdigest()
    print("mr_sha256=" + mine)
    f.write(json.dumps({"sha256": mine}) + "\n")
    f.flush()
    msg = serve_until_line()  # rxe's wrong-rkey WRITE arrives meanwhile and gets our NAK
    assert msg["phase"] == "your-turn"
    print("nak_counters=" + json.dumps({k: v for k, v in fab.stats.items()}))
    qp = qps[1]

    def post(wr_id, opcode, length, rkey):
        wr = SendWR(wr_id=wr_id, opcode=opcode, num_sge=1, sg=[SGE(mr.buf + SIZE, length, mr.lkey)],
                    send_flags=e.IBV_SEND_SIGNALED)
        wr.set_wr_rdma(rkey, peer["addr"])
        qp.post_send(wr)
        end = time.time() + 60
        while time.time() < end:
            n, wcs = cq.poll(1)
            if n:
                return wcs[0]
            fab.step(0.01)
        raise SystemExit("no completion")

    w = post(11, e.IBV_WR_RDMA_READ, SIZE, peer["rkey"])
    got = hashlib.sha256(mr.read(SIZE, SIZE)).hexdigest()
    w2 = post(12, e.IBV_WR_RDMA_WRITE, 64, peer["rkey"] ^ 0x5A00)
    report = {"read_status": w.status, "read_sha256_match": got == msg["sha256"], "wrong_rkey_status": w2.status,
              "wrong_rkey_is_rem_access_err": w2.status == e.IBV_WC_REM_ACCESS_ERR}
    print("report=" + json.dumps(report))
    f.write(json.dumps(report) + "\n")
    f.flush()
    time.sleep(0.5)
    conn.close()
    fab.close()


if __name__ == "__main__":
    main()
