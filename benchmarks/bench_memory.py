"""How much a pyverbs program that loops grows: 200,000 64-byte SENDs on the default devices.

Not a test: it prints figures.  The program is an ordinary pyverbs program (only ``rdmalab.verbs``
imports: ``get_device_list()``, ``Context(name=...)`` without a fabric, so it runs on the default
devices ``soft0`` and ``soft1`` with their default trace), RC, path MTU 4096: receives posted 256 at
a time, then 256 SENDs of 64 bytes (the last one signalled), then the 256 receive completions
polled, again and again.  The figure is the growth of the process's resident set (``VmRSS`` in
``/proc/self/status``) from after the first batch to the end, and its peak (``VmHWM``), with how many
trace events the default devices kept and let go.

The previous release runs in the same run from a git worktree (``--prev``, default ``/tmp/base-trace``;
make it with ``git worktree add --detach /tmp/base-trace a9b1faf``): each run is a fresh interpreter
with ``PYTHONPATH`` set to the tree it measures.

    python benchmarks/bench_memory.py [--prev DIR] [--messages N]

:class:`ApiPair` is also what ``bench_engine.py`` measures through the pyverbs API.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from typing import Any

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BATCH = 256


class ApiSide:
    """One node of a pyverbs program: context, PD, one MR, one CQ, one RC QP (what ``bench_engine``
    needs of a side: ``qp``, ``cq``, ``mr`` and ``sge``)."""

    def __init__(self, name: str, size: int) -> None:
        import rdmalab.verbs.enums as e
        from rdmalab.verbs.cq import CQ
        from rdmalab.verbs.device import Context
        from rdmalab.verbs.mr import MR
        from rdmalab.verbs.pd import PD
        from rdmalab.verbs.qp import QP, QPAttr, QPCap, QPInitAttr

        access = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
        self.ctx = Context(name=name)
        self.pd = PD(self.ctx)
        self.mr = MR(self.pd, size, access)
        self.cq = CQ(self.ctx, 4 * BATCH, None, None, 0)
        init = QPInitAttr(qp_type=e.IBV_QPT_RC, scq=self.cq, rcq=self.cq, sq_sig_all=0,  # (pyverbs' default: 1)
                          cap=QPCap(max_send_wr=2 * BATCH, max_recv_wr=2 * BATCH))
        attr = QPAttr(port_num=1)
        attr.qp_access_flags = access
        self.qp = QP(self.pd, init, attr)
        self.psn = 0x1000
        self.gid = self.ctx.query_gid(1, 1)
        self.access = access

    def connect(self, remote: ApiSide) -> None:
        import rdmalab.verbs.enums as e
        from rdmalab.verbs.addr import AHAttr, GlobalRoute
        from rdmalab.verbs.qp import QPAttr

        attr = QPAttr(port_num=1)
        attr.qp_access_flags = self.access
        attr.path_mtu = e.IBV_MTU_4096
        attr.max_dest_rd_atomic = attr.max_rd_atomic = 16
        attr.min_rnr_timer, attr.timeout, attr.retry_cnt, attr.rnr_retry = 12, 14, 7, 7
        attr.ah_attr = AHAttr(port_num=1, is_global=1, gr=GlobalRoute(dgid=remote.gid, sgid_index=1))
        attr.dest_qp_num, attr.rq_psn, attr.sq_psn = remote.qp.qp_num, remote.psn, self.psn
        self.qp.to_rts(attr)

    def sge(self, offset: int, length: int) -> Any:
        from rdmalab.verbs.wr import SGE

        return SGE(self.mr.buf + offset, length, self.mr.lkey)


class ApiPair:
    """Two nodes on the first two devices ``get_device_list()`` offers, connected to each other."""

    def __init__(self, size: int) -> None:
        from rdmalab.verbs.device import get_device_list

        names = [d.name.decode() for d in get_device_list()]
        self.a, self.b = ApiSide(names[0], size), ApiSide(names[1], size)
        self.a.connect(self.b)
        self.b.connect(self.a)


def sends(pair: Any, messages: int) -> int:
    """``messages`` (rounded up to whole batches of :data:`BATCH`) 64-byte SENDs from a to b; returns how many."""
    import rdmalab.verbs.enums as e
    from rdmalab.verbs.wr import RecvWR, SendWR

    a, b = pair.a, pair.b
    send_wrs = [SendWR(wr_id=i, opcode=e.IBV_WR_SEND, num_sge=1, sg=[a.sge(64 * i, 64)],
                       send_flags=e.IBV_SEND_SIGNALED if i == BATCH - 1 else 0) for i in range(BATCH)]
    recv_wrs = [RecvWR(wr_id=i, num_sge=1, sg=[b.sge(64 * i, 64)]) for i in range(BATCH)]
    done = 0
    while done < messages:
        for rwr in recv_wrs:
            b.qp.post_recv(rwr)
        for wr in send_wrs:
            a.qp.post_send(wr)
        got = 0
        while got < BATCH:
            n, wcs = b.cq.poll(BATCH - got)
            if not n:
                raise SystemExit("the receiver's completions stopped coming")
            if any(wc.status for wc in wcs):
                raise SystemExit(f"completion error: {wcs}")
            got += n
        n, wcs = a.cq.poll(1)
        if n != 1 or wcs[0].status:
            raise SystemExit(f"the sender's completion did not come: {wcs}")
        done += BATCH
    return done


def _status(field: str) -> int:
    """A ``/proc/self/status`` figure in bytes (``VmRSS``, ``VmHWM``)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise SystemExit(f"/proc/self/status has no {field}")


def worker(messages: int) -> None:
    import rdmalab

    pair = ApiPair(64 * BATCH)
    sends(pair, BATCH)  # the first batch: imports, first allocations
    before = _status("VmRSS")
    done = sends(pair, messages)
    after, peak = _status("VmRSS"), _status("VmHWM")
    from rdmalab.fabric import default_fabric  # (only to read what the trace kept)

    trace = default_fabric().trace
    print(json.dumps({"rdmalab": os.path.dirname(os.path.dirname(os.path.abspath(rdmalab.__file__))),
                      "messages": done, "before": before, "after": after, "peak": peak,
                      "kept": len(trace), "dropped": getattr(trace, "dropped", 0)}))


def measure(tree: str, messages: int) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=tree)
    env.pop("RDMALAB_LINKS", None)
    env["RDMALAB_LINK_FILE"] = "/nonexistent/rdmalab-links.json"  # the simulated default devices, whatever is linked
    res = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", "--messages", str(messages)],
                         cwd=tree, env=env, capture_output=True, text=True, check=False)
    if res.returncode:
        raise SystemExit(f"the run in {tree} failed:\n{res.stderr}")
    got: dict[str, Any] = json.loads(res.stdout.splitlines()[-1])
    if os.path.realpath(str(got.pop("rdmalab"))) != os.path.realpath(tree):
        raise SystemExit(f"the run in {tree} imported another rdmalab")
    return got


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prev", default="/tmp/base-trace", help="a worktree of the previous release")
    ap.add_argument("--messages", type=int, default=200_000, help="64-byte SENDs after the first batch")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.messages)
        return 0
    trees = [("new", _ROOT)]
    if os.path.isdir(os.path.join(args.prev, "rdmalab")):
        trees.insert(0, ("previous", args.prev))
    else:
        print(f"no previous release at {args.prev} (git worktree add --detach {args.prev} <commit>): "
              "this tree only", file=sys.stderr)
    mib = 1 << 20
    print(f"A pyverbs program on the default devices: {args.messages:,} SENDs of 64 B (after a first batch)")
    print(f"  {'tree':<9s} {'RSS growth':>11s} {'per message':>12s} {'peak RSS':>10s} | trace events kept, let go")
    for label, tree in trees:
        r = measure(tree, args.messages)
        grew = r["after"] - r["before"]
        print(f"  {label:<9s} {grew / mib:7.1f} MiB {grew / r['messages']:8.0f} B   {r['peak'] / mib:6.1f} MiB | "
              f"{r['kept']:,}, {r['dropped']:,}   ({tree})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
