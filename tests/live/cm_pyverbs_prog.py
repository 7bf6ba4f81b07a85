"""A pyverbs program that connects with rdma_cm (pyverbs.cmid's synchronous endpoint API) and echoes a message.

It imports only pyverbs.  In the VM it runs unchanged under Debian's pyverbs on kernel rxe, and
under rdmalab with ``rdmalab.verbs.pyverbs_alias`` installed and ``RDMALAB_LINKS=soft0=veth1``
(tests/live/test_interop_cm.py): the promise that a pyverbs program needs only its imports changed.

    cm_pyverbs_prog.py server ADDR PORT | client ADDR PORT
Prints ``key=value`` lines.
"""

import hashlib
import os
import sys

import pyverbs.cm_enums as ce
import pyverbs.enums as e
from pyverbs.cmid import CMID, AddrInfo
from pyverbs.qp import QPCap, QPInitAttr

SIZE = 4000


def main():
    role, addr, port = sys.argv[1], sys.argv[2], sys.argv[3]
    init = QPInitAttr(qp_type=e.IBV_QPT_RC, cap=QPCap(max_send_wr=4, max_recv_wr=4))
    if role == "server":
        lid = CMID(creator=AddrInfo(src=addr, src_service=port, port_space=ce.RDMA_PS_TCP, flags=ce.RAI_PASSIVE),
                   qp_init_attr=init)
        lid.listen()
        cid = lid.get_request()
        mr = cid.reg_msgs(SIZE)
        cid.post_recv(mr)
        cid.accept()
        wc = cid.get_recv_comp()
        print(f"recv_status={wc.status} byte_len={wc.byte_len}", flush=True)
        data = mr.read(SIZE, 0)
        print(f"sha256={hashlib.sha256(data).hexdigest()}", flush=True)
        cid.post_send(mr)  # echo it back
        wc = cid.get_send_comp()
        print(f"send_status={wc.status}", flush=True)
        cid.disconnect()
    else:
        cid = CMID(creator=AddrInfo(dst=addr, dst_service=port, port_space=ce.RDMA_PS_TCP), qp_init_attr=init)
        out = cid.reg_msgs(SIZE)
        back = cid.reg_msgs(SIZE)
        payload = os.urandom(SIZE)
        out.write(payload, SIZE)
        cid.post_recv(back)
        cid.connect()
        cid.post_send(out)
        wc = cid.get_send_comp()
        print(f"send_status={wc.status}", flush=True)
        wc = cid.get_recv_comp()
        print(f"recv_status={wc.status} byte_len={wc.byte_len}", flush=True)
        print(f"sha256={hashlib.sha256(payload).hexdigest()}", flush=True)
        print(f"echo_matches={back.read(SIZE, 0) == payload}", flush=True)
        cid.disconnect()
    print("done=1", flush=True)


if __name__ == "__main__":
    main()
