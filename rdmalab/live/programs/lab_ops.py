"""Lab operations between two RC queue pairs, written once for two verbs implementations.

As written it runs on rdmalab's soft engine.  :func:`rdmalab.live.labruns.pyverbs_source`
rewrites the ``rdmalab.verbs`` imports to ``pyverbs`` and drops the soft-only ``import rdmalab.fabric``
(nothing else changes); the result runs
under Debian's ``/usr/bin/python3`` on kernel rxe devices, on the host or in the lab VM.  So the
program may import only the standard library and the verbs modules.

    python3 lab_ops.py SCENARIO --dev-a rxe1 --dev-b rxe2 [--size N] [--seed S] [--out FILE]

Scenarios: ``write_read`` (A writes random bytes into B's buffer, then reads them back),
``wrong_rkey`` (A writes with a corrupted rkey: the responder refuses, A's completion says why),
``send_recv`` (A sends to a receive B posted), ``atomics`` (fetch-and-add, compare-and-swap).
It prints one JSON object: devices, QPs, keys, every completion and snapshots of both buffers.
"""

import argparse
import hashlib
import json
import random
import sys
import time
from typing import Any

import rdmalab.fabric  # noqa: F401  (soft engine only: the simulated fabric; pyverbs_source drops it)
import rdmalab.verbs.enums as e
from rdmalab.verbs.addr import AHAttr, GlobalRoute
from rdmalab.verbs.cq import CQ
from rdmalab.verbs.device import Context
from rdmalab.verbs.mr import MR
from rdmalab.verbs.pd import PD
from rdmalab.verbs.qp import QP, QPAttr, QPCap, QPInitAttr
from rdmalab.verbs.wr import SGE, RecvWR, SendWR

PORT, GID_INDEX, BUF = 1, 1, 65536
ACCESS = (e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
          | e.IBV_ACCESS_REMOTE_ATOMIC)
STATUS_NAMES = ["IBV_WC_SUCCESS", "IBV_WC_LOC_LEN_ERR", "IBV_WC_LOC_QP_OP_ERR", "IBV_WC_LOC_EEC_OP_ERR",
                "IBV_WC_LOC_PROT_ERR", "IBV_WC_WR_FLUSH_ERR", "IBV_WC_MW_BIND_ERR", "IBV_WC_BAD_RESP_ERR",
                "IBV_WC_LOC_ACCESS_ERR", "IBV_WC_REM_INV_REQ_ERR", "IBV_WC_REM_ACCESS_ERR", "IBV_WC_REM_OP_ERR",
                "IBV_WC_RETRY_EXC_ERR", "IBV_WC_RNR_RETRY_EXC_ERR", "IBV_WC_LOC_RDD_VIOL_ERR",
                "IBV_WC_REM_INV_RD_REQ_ERR", "IBV_WC_REM_ABORT_ERR", "IBV_WC_INV_EECN_ERR",
                "IBV_WC_INV_EEC_STATE_ERR", "IBV_WC_FATAL_ERR", "IBV_WC_RESP_TIMEOUT_ERR", "IBV_WC_GENERAL_ERR"]
OPCODE_NAMES = ["IBV_WC_SEND", "IBV_WC_RDMA_WRITE", "IBV_WC_RDMA_READ", "IBV_WC_COMP_SWAP", "IBV_WC_FETCH_ADD",
                "IBV_WC_RECV", "IBV_WC_RECV_RDMA_WITH_IMM"]
STATE_NAMES = ["IBV_QPS_RESET", "IBV_QPS_INIT", "IBV_QPS_RTR", "IBV_QPS_RTS", "IBV_QPS_SQD", "IBV_QPS_SQE",
               "IBV_QPS_ERR"]


def _name(names: list[str], value: Any) -> str:
    for n in names:
        if int(getattr(e, n, -1)) == int(value):
            return n
    return str(int(value))


def _gid_text(gid: Any) -> str:
    return str(gid)


class Node:
    def __init__(self, dev: str, psn: int) -> None:
        self.dev = dev
        self.ctx = Context(name=dev)
        self.pd = PD(self.ctx)
        self.mr = MR(self.pd, BUF, ACCESS)
        self.cq = CQ(self.ctx, 64, None, None, 0)
        init = QPInitAttr(qp_type=e.IBV_QPT_RC, scq=self.cq, rcq=self.cq, cap=QPCap(max_send_wr=16, max_recv_wr=16))
        attr = QPAttr(port_num=PORT)
        attr.qp_access_flags = ACCESS
        self.qp = QP(self.pd, init, attr)
        self.psn = psn
        self.gid = self.ctx.query_gid(PORT, GID_INDEX)

    def connect(self, peer: "Node") -> None:
        attr = QPAttr(port_num=PORT)
        attr.qp_access_flags = ACCESS
        attr.path_mtu = e.IBV_MTU_1024
        attr.max_dest_rd_atomic = attr.max_rd_atomic = 4
        attr.min_rnr_timer, attr.timeout, attr.retry_cnt, attr.rnr_retry = 12, 14, 7, 7
        attr.ah_attr = AHAttr(port_num=PORT, is_global=1, gr=GlobalRoute(dgid=peer.gid, sgid_index=GID_INDEX))
        attr.dest_qp_num, attr.rq_psn, attr.sq_psn = peer.qp.qp_num, peer.psn, self.psn
        self.qp.to_rts(attr)

    def info(self) -> dict[str, Any]:
        return {"device": self.dev, "qpn": self.qp.qp_num, "psn": self.psn, "gid": _gid_text(self.gid),
                "mr_addr": self.mr.buf, "lkey": self.mr.lkey, "rkey": self.mr.rkey, "length": BUF}

    def state(self) -> str:
        try:
            attr, _ = self.qp.query(e.IBV_QP_STATE)
            return _name(STATE_NAMES, attr.qp_state)
        except Exception as exc:  # a verbs implementation without query: say so, do not guess
            return f"unknown ({type(exc).__name__})"


def poll(node: Node, timeout_s: float = 20.0) -> dict[str, Any]:
    """Busy-poll one completion of ``node``'s CQ (the soft engine advances its fabric meanwhile)."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        n, wcs = node.cq.poll(1)
        if n:
            wc = wcs[0]
            return {"node": node.dev, "wr_id": wc.wr_id, "status": _name(STATUS_NAMES, wc.status),
                    "status_code": int(wc.status), "opcode": _name(OPCODE_NAMES, wc.opcode),
                    "byte_len": wc.byte_len, "qp_num": wc.qp_num, "vendor_err": getattr(wc, "vendor_err", 0)}
    return {"node": node.dev, "status": "NO_COMPLETION", "status_code": -1, "timeout_s": timeout_s}


def snapshot(node: Node, length: int, offset: int = 0) -> dict[str, Any]:
    data = node.mr.read(length, offset)
    return {"node": node.dev, "offset": offset, "length": length, "head_hex": data[:64].hex(),
            "sha256": hashlib.sha256(data).hexdigest()}


def send_wr(node: Node, wr_id: int, opcode: int, length: int, offset: int = 0, rkey: int | None = None,
            remote_addr: int | None = None) -> None:
    wr = SendWR(wr_id=wr_id, opcode=opcode, num_sge=1, sg=[SGE(node.mr.buf + offset, length, node.mr.lkey)])
    if rkey is not None and remote_addr is not None:
        wr.set_wr_rdma(rkey, remote_addr)
    node.qp.post_send(wr)


def run_scenario(scenario: str, dev_a: str, dev_b: str, size: int = 4096, seed: int = 1, iters: int = 1) -> dict[str, Any]:
    rng = random.Random(seed)
    a, b = Node(dev_a, rng.getrandbits(24)), Node(dev_b, rng.getrandbits(24))
    a.connect(b)
    b.connect(a)
    data = random.Random(seed).randbytes(size)
    out: dict[str, Any] = {"scenario": scenario, "size": size, "seed": seed, "iters": iters, "a": a.info(), "b": b.info(),
           "steps": []}
    steps = out["steps"]
    if scenario == "write_read":
        a.mr.write(data, size, 0)
        for i in range(iters):
            if i:  # wipe both targets, so every round has to move the data again
                b.mr.write(bytes(size), size, 0)
                a.mr.write(bytes(size), size, size)
            send_wr(a, 1 + 2 * i, e.IBV_WR_RDMA_WRITE, size, 0, b.mr.rkey, b.mr.buf)
            steps.append({"op": "RDMA_WRITE", "from": "a", "length": size, "rkey": b.mr.rkey,
                          "remote_addr": b.mr.buf, "wc": poll(a), "memory": snapshot(b, size)})
            send_wr(a, 2 + 2 * i, e.IBV_WR_RDMA_READ, size, size, b.mr.rkey, b.mr.buf)
            steps.append({"op": "RDMA_READ", "from": "a", "length": size, "rkey": b.mr.rkey,
                          "remote_addr": b.mr.buf, "wc": poll(a), "memory": snapshot(a, size, size)})
        out["data_sha256"] = hashlib.sha256(data).hexdigest()
        out["ok"] = (all(s["wc"]["status"] == "IBV_WC_SUCCESS" for s in steps)
                     and all(s["memory"]["sha256"] == out["data_sha256"] for s in steps))
    elif scenario == "wrong_rkey":
        a.mr.write(data, size, 0)
        bad = (b.mr.rkey ^ 0x5A5A) & 0xFFFFFFFF
        send_wr(a, 1, e.IBV_WR_RDMA_WRITE, size, 0, bad, b.mr.buf)
        steps.append({"op": "RDMA_WRITE", "from": "a", "length": size, "rkey": bad, "right_rkey": b.mr.rkey,
                      "remote_addr": b.mr.buf, "wc": poll(a), "memory": snapshot(b, size)})
        out["data_sha256"] = hashlib.sha256(data).hexdigest()
        out["ok"] = steps[0]["wc"]["status"] == "IBV_WC_REM_ACCESS_ERR"
    elif scenario == "send_recv":
        b.qp.post_recv(RecvWR(wr_id=7, num_sge=1, sg=[SGE(b.mr.buf, BUF, b.mr.lkey)]))
        a.mr.write(data, size, 0)
        send_wr(a, 1, e.IBV_WR_SEND, size)
        steps.append({"op": "SEND", "from": "a", "length": size, "wc": poll(a)})
        steps.append({"op": "RECV", "from": "b", "length": size, "wc": poll(b), "memory": snapshot(b, size)})
        out["data_sha256"] = hashlib.sha256(data).hexdigest()
        out["ok"] = (all(s["wc"]["status"] == "IBV_WC_SUCCESS" for s in steps)
                     and steps[1]["memory"]["sha256"] == out["data_sha256"])
    elif scenario == "atomics":
        b.mr.write((1000).to_bytes(8, "little"), 8, 0)
        wr = SendWR(wr_id=1, opcode=e.IBV_WR_ATOMIC_FETCH_AND_ADD, num_sge=1, sg=[SGE(a.mr.buf, 8, a.mr.lkey)])
        wr.set_wr_atomic(b.mr.rkey, b.mr.buf, 42, 0)
        a.qp.post_send(wr)
        steps.append({"op": "ATOMIC_FETCH_AND_ADD", "from": "a", "add": 42, "wc": poll(a),
                      "returned": int.from_bytes(a.mr.read(8, 0), "little"),
                      "remote": int.from_bytes(b.mr.read(8, 0), "little")})
        wr = SendWR(wr_id=2, opcode=e.IBV_WR_ATOMIC_CMP_AND_SWP, num_sge=1, sg=[SGE(a.mr.buf + 8, 8, a.mr.lkey)])
        wr.set_wr_atomic(b.mr.rkey, b.mr.buf, 1042, 7)
        a.qp.post_send(wr)
        steps.append({"op": "ATOMIC_CMP_AND_SWP", "from": "a", "compare": 1042, "swap": 7, "wc": poll(a),
                      "returned": int.from_bytes(a.mr.read(8, 8), "little"),
                      "remote": int.from_bytes(b.mr.read(8, 0), "little")})
        out["ok"] = (all(s["wc"]["status"] == "IBV_WC_SUCCESS" for s in steps)
                     and [s["returned"] for s in steps] == [1000, 1042] and steps[1]["remote"] == 7)
    else:
        raise SystemExit(f"lab_ops: unknown scenario {scenario!r} (write_read, wrong_rkey, send_recv, atomics)")
    out["qp_state"] = {"a": a.state(), "b": b.state()}
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(prog="lab_ops.py")
    ap.add_argument("scenario")
    ap.add_argument("--dev-a", required=True)
    ap.add_argument("--dev-b", required=True)
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--iters", type=int, default=1, help="write_read: how many WRITE+READ rounds")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    if not 1 <= args.size <= BUF // 2:
        raise SystemExit(f"lab_ops: --size must be between 1 and {BUF // 2}")
    result = run_scenario(args.scenario, args.dev_a, args.dev_b, args.size, args.seed, args.iters)
    text = json.dumps(result, indent=1)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text + "\n")
    return result


if __name__ == "__main__":
    main()
