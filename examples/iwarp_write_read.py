"""Lab: RDMA WRITE and READ over iWARP, connected with rdma_cm (pyverbs.cmid), on two soft iWARP devices.

The same program as a RoCE one: a CMID listens, another connects, a SEND tells the client
where the server's buffer is (address and STag), the client WRITEs into it and READs it back.
Underneath, the devices are soft iWARP devices (``siw0`` 10.0.0.1 and ``siw1`` 10.0.0.2 on a
simulated fabric): rdma_cm opens a TCP connection to the rdma_cm port and exchanges the MPA
Request and Reply; every message then travels as MPA FPDUs (DDP/RDMAP) on TCP.

    python examples/iwarp_write_read.py [capture.pcap]

With a file name, every TCP segment is written to it (``tshark -r capture.pcap`` dissects MPA,
DDP and RDMAP; ``rdmalab decode capture.pcap`` too).
"""

import struct
import sys

import rdmalab.verbs.enums as e
from rdmalab.fabric import reset_default_fabric
from rdmalab.fabric.simtcp import iwarp_fabric
from rdmalab.verbs.cm_enums import RAI_PASSIVE
from rdmalab.verbs.cm_enums import rdma_cm_event_type as EV
from rdmalab.verbs.cmid import CMID, AddrInfo, CMEvent, CMEventChannel, ConnParam
from rdmalab.verbs.qp import QPCap, QPInitAttr

PORT = 7174  # rping's port; on iWARP it is the TCP port too
SIZE = 4096


def expect(ch: CMEventChannel, kind: int) -> CMEvent:
    ev = CMEvent(ch)
    if ev.event_type != kind:
        raise SystemExit(f"expected {EV(kind).name}, got {ev.event_str()} (status {ev.status})")
    return ev


def main(pcap: str | None = None) -> None:
    fab = reset_default_fabric(iwarp_fabric(seed=7))
    tap = fab.write_pcap(pcap) if pcap else None
    # one CQ per CMID for sends and receives: only the WRITE and READ are signaled
    attr = QPInitAttr(qp_type=e.IBV_QPT_RC, cap=QPCap(max_send_wr=4, max_recv_wr=4), sq_sig_all=0)

    # server: listen on 10.0.0.2:7174 (a TCP listener)
    sch = CMEventChannel()
    server = CMID(sch)
    server.bind_addr(AddrInfo(src="10.0.0.2", src_service=PORT, flags=RAI_PASSIVE))
    server.listen()

    # client: resolve, make the QP, connect (TCP connect + MPA Request)
    cch = CMEventChannel()
    client = CMID(cch)
    client.resolve_addr(AddrInfo(dst="10.0.0.2", dst_service=PORT))
    expect(cch, EV.RDMA_CM_EVENT_ADDR_RESOLVED)
    client.resolve_route()
    expect(cch, EV.RDMA_CM_EVENT_ROUTE_RESOLVED)
    client.create_qp(attr)
    param = ConnParam(resources=1, depth=1)  # IRD/ORD 1, as rping asks
    client.connect(param)

    # server: CONNECT_REQUEST (the MPA Request arrived), QP, a receive, accept (the MPA Reply)
    req = expect(sch, EV.RDMA_CM_EVENT_CONNECT_REQUEST)
    conn = CMID(req, listen_id=server)
    conn.create_qp(attr)
    target = conn.reg_write(SIZE)  # REMOTE_WRITE
    readable = conn.reg_read(SIZE)  # REMOTE_READ
    readable.write(b"iWARP!" * (SIZE // 6), SIZE // 6 * 6)
    conn.accept(ConnParam(resources=1, depth=1))
    expect(sch, EV.RDMA_CM_EVENT_ESTABLISHED)
    expect(cch, EV.RDMA_CM_EVENT_ESTABLISHED)

    # the client receives the server's buffers in a SEND (RFC 5044: the initiator speaks first, so
    # the client posts a small SEND to the server before the server answers with its keys)
    hello = client.reg_msgs(16)
    srv_rx = conn.reg_msgs(16)
    conn.post_recv(srv_rx)
    keys = client.reg_msgs(32)
    client.post_recv(keys)
    client.post_send(hello, flags=0)
    conn.get_recv_comp()
    info = conn.reg_msgs(32)
    info.write(struct.pack("!QIQI", target.buf, target.rkey, readable.buf, readable.rkey), 24)
    conn.post_send(info, flags=0, length=24)
    client.get_recv_comp()
    t_addr, t_stag, r_addr, r_stag = struct.unpack("!QIQI", keys.read(24, 0))

    # WRITE into the server's buffer, then READ the server's other buffer
    src = client.reg_read(SIZE)
    src.write(bytes(range(256)) * (SIZE // 256), SIZE)
    client.post_write(src, SIZE, t_addr, t_stag, flags=e.IBV_SEND_SIGNALED)
    wc = client.get_send_comp()
    print(f"WRITE {SIZE} bytes: {e.ibv_wc_status_str(wc.status)}")
    sink = client.reg_write(SIZE)
    client.post_read(sink, SIZE, r_addr, r_stag, flags=e.IBV_SEND_SIGNALED)
    wc = client.get_send_comp()
    print(f"READ {SIZE} bytes: {e.ibv_wc_status_str(wc.status)}, data {'matches' if sink.read(SIZE, 0) == readable.read(SIZE, 0) else 'DIFFERS'}")
    # the READ completed after the WRITE's data: iWARP keeps one TCP stream, in order
    print(f"WRITE placed: {'yes' if target.read(SIZE, 0) == src.read(SIZE, 0) else 'NO'}")

    client.disconnect()
    expect(cch, EV.RDMA_CM_EVENT_DISCONNECTED)
    expect(sch, EV.RDMA_CM_EVENT_DISCONNECTED)
    fab.run()
    if tap is not None:
        tap.close()
        print(f"{tap.count} frames written to {pcap}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
