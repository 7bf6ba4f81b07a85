"""A verbs server on kernel rxe devices, driven call by call from the host (``rdmalab.live.remote``).

The notebooks' ``Pair(backend="rxe")`` posts work requests, polls completions and reads memory
one call at a time, as on the soft engine.  pyverbs imports only under Debian's
``/usr/bin/python3`` and the devices live in the lab VM, so this program runs there (a long VM
job) and owns the real objects: contexts on two rxe devices, PDs, CQs, MRs and RC QPs.  The host
sends one JSON request per file and reads one JSON answer per file, through the job directory
the VM shares with the host::

    DIR/req/000001.json   {"op": "post_send", "qp": 7, "wr": {...}}
    DIR/resp/000001.json  {"ok": true, ...}   or   {"ok": false, "error": "...", "type": "PyverbsRDMAError"}

Operations: ``pair`` (two endpoints, connected to RTS with the given attributes), ``pd``,
``mr``, ``post_send``, ``post_recv``, ``poll``, ``mr_read``, ``mr_write``, ``qp_state``,
``loss`` (netem on both veths), ``capture`` (a consistent copy of the running tcpdump's pcap),
``sleep``, ``stop``.  The program imports only the standard library and pyverbs.

    python3 verbs_server.py DIR --dev-a rxe1 --dev-b rxe2 [--netdev-a veth2 --netdev-b veth3] [--capture veth2]
"""

import argparse
import json
import os
import struct
import subprocess
import sys
import time
import traceback
from typing import Any

import pyverbs.enums as e
from pyverbs.addr import AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import SGE, RecvWR, SendWR

PORT, GID_INDEX = 1, 1          # index 1: the IPv4-mapped GID (::ffff:a.b.c.d), as the lab VM lays it out


class Server:
    def __init__(self, args: argparse.Namespace) -> None:
        self.dir = args.dir
        self.dev_a, self.dev_b = args.dev_a, args.dev_b
        self.netdevs = [d for d in (args.netdev_a, args.netdev_b) if d]
        self.mtus: dict[str, str] = {}   # netdev -> its MTU before _jumbo() raised it
        self.objs: dict[int, Any] = {}
        self.kind: dict[int, str] = {}
        self.next_id = 1
        self.ctx = {name: Context(name=name) for name in (self.dev_a, self.dev_b)}
        for c in self.ctx.values():
            self._add(c, "ctx")
        self.pcap = os.path.join(self.dir, "live.pcap")
        self.tcpdump = None
        if args.capture:
            log = open(os.path.join(self.dir, "tcpdump.log"), "w")
            # immediate mode and a 9216-byte snaplen: see agent.sh (nothing waits in a ring block)
            self.tcpdump = subprocess.Popen(["tcpdump", "-i", args.capture, "-s", "9216", "-B", "32768", "-U",
                                             "--immediate-mode", "-Z", "root", "-w", self.pcap, "udp port 4791"],
                                            stdout=log, stderr=log)
            for _ in range(100):
                if "listening" in open(os.path.join(self.dir, "tcpdump.log")).read():
                    break
                time.sleep(0.1)

    def _add(self, obj: Any, kind: str) -> int:
        i = self.next_id
        self.next_id += 1
        self.objs[i] = obj
        self.kind[i] = kind
        return i

    def _get(self, i: Any, kind: str) -> Any:
        if not isinstance(i, int) or self.kind.get(i) != kind:
            raise LookupError(f"no {kind} with id {i!r} in the verbs server")
        return self.objs[i]

    def _jumbo(self) -> None:
        """Jumbo frames on the veths, so that a 2048- or 4096-byte path MTU fits in one frame.

        rxe accepts a path MTU above its netdev's (1500 bytes: active MTU 1024) and its packets
        are then dropped on the way, since DF is set.  rxe follows the change (NETDEV_CHANGEMTU in
        rxe_net.c); close() puts the old MTU back.  Only pairs that need it pay for it.
        """
        for dev in self.netdevs:
            if dev in self.mtus:
                continue
            with open(f"/sys/class/net/{dev}/mtu") as f:
                self.mtus[dev] = f.read().strip()
            subprocess.run(["ip", "link", "set", "dev", dev, "mtu", "9000"], check=True)

    # ------------------------------------------------------------------ objects
    def op_pair(self, r: dict[str, Any]) -> dict[str, Any]:
        access = int(r["access"])
        if int(r["path_mtu"]) > e.IBV_MTU_1024:
            self._jumbo()
        ends = []
        for dev, psn in zip((self.dev_a, self.dev_b), r["psn"], strict=True):
            ctx = self.ctx[dev]
            pd = PD(ctx)
            cq = CQ(ctx, int(r["cqe"]), None, None, 0)
            mr = MR(pd, int(r["size"]), access)
            init = QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, sq_sig_all=int(r["sq_sig_all"]),
                              cap=QPCap(max_send_wr=int(r["max_wr"]), max_recv_wr=int(r["max_wr"]),
                                        max_send_sge=4, max_recv_sge=4))
            attr = QPAttr(port_num=PORT)
            attr.qp_access_flags = int(r["qp_access"])
            qp = QP(pd, init, attr)
            gid = ctx.query_gid(PORT, GID_INDEX)
            ends.append({"dev": dev, "ctx": [k for k, v in self.objs.items() if v is ctx][0],
                         "pd": self._add(pd, "pd"), "cq": self._add(cq, "cq"), "mr": self._add(mr, "mr"),
                         "qp": self._add(qp, "qp"), "qpn": qp.qp_num, "psn": int(psn), "gid": str(gid),
                         "mr_info": self._mr_info(mr, int(r["size"])), "_qp": qp, "_gid": gid})
        for x, y in ((ends[0], ends[1]), (ends[1], ends[0])):
            attr = QPAttr(port_num=PORT)
            attr.qp_access_flags = int(r["qp_access"])
            attr.path_mtu = int(r["path_mtu"])
            attr.max_dest_rd_atomic = attr.max_rd_atomic = int(r["max_rd_atomic"])
            attr.min_rnr_timer, attr.timeout = int(r["min_rnr_timer"]), int(r["timeout"])
            attr.retry_cnt, attr.rnr_retry = int(r["retry_cnt"]), int(r["rnr_retry"])
            attr.ah_attr = AHAttr(port_num=PORT, is_global=1, gr=GlobalRoute(dgid=y["_gid"], sgid_index=GID_INDEX))
            attr.dest_qp_num, attr.rq_psn, attr.sq_psn = y["qpn"], y["psn"], x["psn"]
            x["_qp"].to_rts(attr)
        for x in ends:
            del x["_qp"], x["_gid"]
        return {"a": ends[0], "b": ends[1], "t": time.time()}

    @staticmethod
    def _mr_info(mr: Any, length: int) -> dict[str, Any]:
        return {"buf": mr.buf, "lkey": mr.lkey, "rkey": mr.rkey, "length": length}

    def op_pd(self, r: dict[str, Any]) -> dict[str, Any]:
        return {"pd": self._add(PD(self._get(r["ctx"], "ctx")), "pd")}

    def op_mr(self, r: dict[str, Any]) -> dict[str, Any]:
        mr = MR(self._get(r["pd"], "pd"), int(r["length"]), int(r["access"]))
        return {"mr": self._add(mr, "mr"), "mr_info": self._mr_info(mr, int(r["length"]))}

    # ------------------------------------------------------------------ data path
    @staticmethod
    def _sges(items: list[Any]) -> list[Any]:
        return [SGE(int(s["addr"]), int(s["length"]), int(s["lkey"])) for s in items]

    def op_post_send(self, r: dict[str, Any]) -> dict[str, Any]:
        qp = self._get(r["qp"], "qp")
        w = r["wr"]
        sg = self._sges(w["sg"])
        wr = SendWR(wr_id=int(w["wr_id"]), opcode=int(w["opcode"]), num_sge=len(sg) or 1, sg=sg or [SGE(0, 0, 0)],
                    send_flags=int(w["send_flags"]), imm_data=int(w["imm_data"]))
        wr.num_sge = len(sg)   # pyverbs' constructor refuses 0 SGEs; the verb itself takes them (see op_post_recv)
        if int(w["opcode"]) in (e.IBV_WR_ATOMIC_CMP_AND_SWP, e.IBV_WR_ATOMIC_FETCH_AND_ADD):
            wr.set_wr_atomic(int(w["rkey"]), int(w["remote_addr"]), int(w["compare_add"]), int(w["swap"]))
        elif int(w["opcode"]) in (e.IBV_WR_RDMA_WRITE, e.IBV_WR_RDMA_WRITE_WITH_IMM, e.IBV_WR_RDMA_READ):
            wr.set_wr_rdma(int(w["rkey"]), int(w["remote_addr"]))
        qp.post_send(wr)
        return {}

    def op_post_recv(self, r: dict[str, Any]) -> dict[str, Any]:
        qp = self._get(r["qp"], "qp")
        w = r["wr"]
        sg = self._sges(w["sg"])
        wr = RecvWR(wr_id=int(w["wr_id"]), num_sge=len(sg) or 1, sg=sg or [SGE(0, 0, 0)])
        # pyverbs' constructor refuses a WR without SGEs, but ibv_post_recv takes num_sge = 0 (a
        # receive that only consumes a WQE, e.g. for WRITE with immediate): set it after building
        wr.num_sge = len(sg)
        qp.post_recv(wr)
        return {}

    def op_poll(self, r: dict[str, Any]) -> dict[str, Any]:
        """Up to ``n`` completions, waiting at most ``timeout`` s for them."""
        cq = self._get(r["cq"], "cq")
        n = int(r.get("n", 1))
        out: list[dict[str, Any]] = []
        end = time.monotonic() + float(r.get("timeout", 5.0))
        while len(out) < n:
            k, wcs = cq.poll(n - len(out))
            for wc in wcs[:k]:
                out.append({"wr_id": wc.wr_id, "status": wc.status, "opcode": wc.opcode, "vendor_err": wc.vendor_err,
                            "byte_len": wc.byte_len, "qp_num": wc.qp_num, "src_qp": wc.src_qp,
                            "imm_data": wc.imm_data, "wc_flags": wc.wc_flags})
            if not k:
                if time.monotonic() > end:
                    break
                time.sleep(0.001)
        return {"wcs": out}

    def op_mr_read(self, r: dict[str, Any]) -> dict[str, Any]:
        return {"hex": self._get(r["mr"], "mr").read(int(r["length"]), int(r["offset"])).hex()}

    def op_mr_write(self, r: dict[str, Any]) -> dict[str, Any]:
        data = bytes.fromhex(r["hex"])
        self._get(r["mr"], "mr").write(data, int(r["length"]), int(r["offset"]))
        return {}

    def op_qp_state(self, r: dict[str, Any]) -> dict[str, Any]:
        attr, _ = self._get(r["qp"], "qp").query(e.IBV_QP_STATE)
        return {"state": int(attr.qp_state)}

    def op_sleep(self, r: dict[str, Any]) -> dict[str, Any]:
        time.sleep(float(r["seconds"]))
        return {}

    # ------------------------------------------------------------------ the wire
    def op_loss(self, r: dict[str, Any]) -> dict[str, Any]:
        """netem loss on both veths' egress: each direction loses ``percent`` of its packets.

        netem drops before the capture tap (tcpdump sees a packet after the egress qdisc), so a
        lost packet never shows in the capture; its retransmission does.
        """
        pct = float(r["percent"])
        for dev in self.netdevs:
            subprocess.run(["tc", "qdisc", "del", "dev", dev, "root"], capture_output=True)
            if pct > 0:
                p = subprocess.run(["tc", "qdisc", "add", "dev", dev, "root", "netem", "loss", f"{pct:g}%"],
                                   capture_output=True, text=True)
                if p.returncode:
                    raise RuntimeError(f"tc netem on {dev} failed: {p.stderr.strip()}")
        return {}

    def op_capture(self, r: dict[str, Any]) -> dict[str, Any]:
        """Copy the complete records of the running capture to ``capture-N.pcap`` once it stops growing."""
        if self.tcpdump is None:
            return {"path": None}
        time.sleep(float(r.get("settle", 0.3)))
        last, stable = -1, 0
        while stable < 3:                       # tcpdump under emulation can lag the completions
            size = os.path.getsize(self.pcap) if os.path.exists(self.pcap) else 0
            stable = stable + 1 if size == last else 0
            last = size
            time.sleep(0.1)
        with open(self.pcap, "rb") as f:
            data = f.read()
        end = 24
        if len(data) < 24:
            data, end = b"", 0
        else:
            little = data[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1")
            while end + 16 <= len(data):
                incl = struct.unpack("<I" if little else ">I", data[end + 8:end + 12])[0]
                if end + 16 + incl > len(data):
                    break
                end += 16 + incl
        out = os.path.join(self.dir, f"capture-{r['seq']}.pcap")
        with open(out, "wb") as f:
            f.write(data[:end])
        return {"path": os.path.basename(out)}

    def close(self) -> None:
        for dev in self.netdevs:
            subprocess.run(["tc", "qdisc", "del", "dev", dev, "root"], capture_output=True)
            if dev in self.mtus:
                subprocess.run(["ip", "link", "set", "dev", dev, "mtu", self.mtus[dev]], capture_output=True)
        if self.tcpdump is not None:
            self.tcpdump.send_signal(2)
            self.tcpdump.wait(timeout=10)


def serve(args: argparse.Namespace) -> None:
    req_dir, resp_dir = os.path.join(args.dir, "req"), os.path.join(args.dir, "resp")
    os.makedirs(req_dir, exist_ok=True)
    os.makedirs(resp_dir, exist_ok=True)
    server = Server(args)
    info = {"pid": os.getpid(), "devices": [server.dev_a, server.dev_b], "capture": args.capture,
            "ctx": {n: [k for k, v in server.objs.items() if v is c][0] for n, c in server.ctx.items()}}
    with open(os.path.join(args.dir, "server.tmp"), "w") as f:
        json.dump(info, f)
    os.rename(os.path.join(args.dir, "server.tmp"), os.path.join(args.dir, "server.ready"))
    seq = 1
    idle_since = time.monotonic()
    try:
        while True:
            path = os.path.join(req_dir, f"{seq:06d}.json")
            if not os.path.exists(path):
                if time.monotonic() - idle_since > args.idle_timeout:
                    print(f"verbs_server: no request for {args.idle_timeout:.0f} s, stopping", file=sys.stderr)
                    return
                time.sleep(0.005)
                continue
            with open(path) as f:
                req = json.load(f)
            op = req.get("op")
            if op == "stop":
                answer: dict[str, Any] = {"ok": True}
            else:
                try:
                    fn = getattr(server, f"op_{op}", None)
                    if fn is None:
                        raise LookupError(f"unknown operation {op!r}")
                    req["seq"] = seq
                    answer = {"ok": True, **fn(req)}
                except Exception as exc:  # the host re-raises it with this text; the server carries on
                    answer = {"ok": False, "type": type(exc).__name__, "error": str(exc),
                              "trace": traceback.format_exc(limit=3)}
            tmp = os.path.join(resp_dir, f"{seq:06d}.tmp")
            with open(tmp, "w") as f:
                json.dump(answer, f)
            os.rename(tmp, os.path.join(resp_dir, f"{seq:06d}.json"))
            seq += 1
            idle_since = time.monotonic()
            if op == "stop":
                return
    finally:
        server.close()


def main(argv: list[Any] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="verbs_server.py")
    ap.add_argument("dir")
    ap.add_argument("--dev-a", required=True)
    ap.add_argument("--dev-b", required=True)
    ap.add_argument("--netdev-a", default="", help="A's network device (loss is netem on it)")
    ap.add_argument("--netdev-b", default="", help="B's network device (loss is netem on it)")
    ap.add_argument("--capture", default="", help="interface to run tcpdump on for the server's lifetime")
    ap.add_argument("--idle-timeout", type=float, default=6 * 3600.0)
    serve(ap.parse_args(argv))


if __name__ == "__main__":
    main()
