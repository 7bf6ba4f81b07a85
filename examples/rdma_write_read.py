"""Lab: an RC RDMA WRITE and an RDMA READ, with a SEND to exchange the memory keys.

Two nodes, each with its own device context, protection domain, memory, completion queue and
RC queue pair.  Node B tells node A where its buffer is (address and rkey) in a SEND; A then
writes into that buffer with an RDMA WRITE and reads it back with an RDMA READ, without B's
CPU taking part.

It runs as is on rdmalab's soft engine (two soft devices on a simulated fabric).  To run it on
real hardware (Linux rxe/Soft-RoCE or an RNIC) with pyverbs, change only the imports (and drop
``import rdmalab.fabric``, which provides the soft devices):

    import pyverbs.enums as e
    from pyverbs.addr import AHAttr, GlobalRoute
    from pyverbs.cq import CQ, WC
    from pyverbs.device import Context, get_device_list
    from pyverbs.mr import MR
    from pyverbs.pd import PD
    from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
    from pyverbs.wr import SGE, RecvWR, SendWR

``scripts/run_example_on_rxe.sh`` does exactly that in a virtual machine with Linux rxe.
GID index 1 is the IPv4-mapped GID (::ffff:a.b.c.d) on rxe and on the soft devices; with one
rxe device both nodes use it (a loopback run).
"""

import random
import struct

import rdmalab.fabric  # noqa: F401  (soft0 and soft1 are the simulated fabric's; the rxe run drops this line)
import rdmalab.verbs.enums as e
from rdmalab.verbs.addr import AHAttr, GlobalRoute
from rdmalab.verbs.cq import CQ, WC
from rdmalab.verbs.device import Context, get_device_list
from rdmalab.verbs.mr import MR
from rdmalab.verbs.pd import PD
from rdmalab.verbs.qp import QP, QPAttr, QPCap, QPInitAttr
from rdmalab.verbs.wr import SGE, RecvWR, SendWR

PORT, GID_INDEX, SIZE = 1, 1, 8192
ACCESS = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
KEY_MSG = struct.Struct("!QI")  # the remote buffer's address and rkey, in network order


def poll(cq: CQ) -> WC:
    """Busy-poll one completion and check its status."""
    while True:
        n, wcs = cq.poll(1)
        if n:
            wc = wcs[0]
            if wc.status != e.IBV_WC_SUCCESS:
                raise RuntimeError(f"completion {wc.wr_id} failed with status {wc.status}")
            return wc


class Node:
    def __init__(self, dev_name: str) -> None:
        self.ctx = Context(name=dev_name)
        self.pd = PD(self.ctx)
        self.data = MR(self.pd, SIZE, ACCESS)  # the buffer the other node may write and read
        self.msg = MR(self.pd, 64, e.IBV_ACCESS_LOCAL_WRITE)  # for the key exchange
        self.cq = CQ(self.ctx, 16, None, None, 0)
        init = QPInitAttr(qp_type=e.IBV_QPT_RC, scq=self.cq, rcq=self.cq,
                          cap=QPCap(max_send_wr=8, max_recv_wr=8))
        attr = QPAttr(port_num=PORT)
        attr.qp_access_flags = ACCESS  # must be set before QP(): it goes RESET -> INIT here
        self.qp = QP(self.pd, init, attr)
        self.psn = random.getrandbits(24)
        self.gid = self.ctx.query_gid(PORT, GID_INDEX)

    def connect(self, remote: "Node") -> None:
        """INIT -> RTR -> RTS towards ``remote`` (its QPN, PSN and GID would come out of band)."""
        attr = QPAttr(port_num=PORT)
        attr.qp_access_flags = ACCESS
        attr.path_mtu = e.IBV_MTU_1024
        attr.max_dest_rd_atomic = attr.max_rd_atomic = 1
        attr.min_rnr_timer, attr.timeout, attr.retry_cnt, attr.rnr_retry = 12, 14, 7, 7
        attr.ah_attr = AHAttr(port_num=PORT, is_global=1, gr=GlobalRoute(dgid=remote.gid, sgid_index=GID_INDEX))
        attr.dest_qp_num, attr.rq_psn, attr.sq_psn = remote.qp.qp_num, remote.psn, self.psn
        self.qp.to_rts(attr)


def main() -> None:
    names = [d.name.decode() for d in get_device_list()]
    a, b = Node(names[0]), Node(names[-1])
    a.connect(b)
    b.connect(a)

    # 1. B sends A the address and rkey of its buffer (A must post the receive first)
    a.qp.post_recv(RecvWR(wr_id=1, num_sge=1, sg=[SGE(a.msg.buf, a.msg.length, a.msg.lkey)]))
    b.msg.write(KEY_MSG.pack(b.data.buf, b.data.rkey), KEY_MSG.size)
    b.qp.post_send(SendWR(wr_id=2, opcode=e.IBV_WR_SEND, num_sge=1,
                          sg=[SGE(b.msg.buf, KEY_MSG.size, b.msg.lkey)]))
    poll(b.cq)
    poll(a.cq)
    remote_addr, rkey = KEY_MSG.unpack(a.msg.read(KEY_MSG.size, 0))
    print(f"A learned B's buffer: addr={remote_addr:#x} rkey={rkey:#x}")

    # 2. A writes 4 KiB into B's buffer
    text = (b"RDMA WRITE from A; " * 216)[:4096]
    a.data.write(text, len(text))
    wr = SendWR(wr_id=3, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(a.data.buf, len(text), a.data.lkey)])
    wr.set_wr_rdma(rkey, remote_addr)
    a.qp.post_send(wr)
    poll(a.cq)
    assert b.data.read(len(text), 0) == text
    print("RDMA WRITE done: B's buffer holds A's data, and B's CPU did nothing")

    # 3. A reads it back into the second half of its own buffer
    wr = SendWR(wr_id=4, opcode=e.IBV_WR_RDMA_READ, num_sge=1, sg=[SGE(a.data.buf + 4096, 4096, a.data.lkey)])
    wr.set_wr_rdma(rkey, remote_addr)
    a.qp.post_send(wr)
    wc = poll(a.cq)
    assert a.data.read(4096, 4096) == text
    print(f"RDMA READ done: {wc.byte_len} bytes read back, identical")


if __name__ == "__main__":
    main()
