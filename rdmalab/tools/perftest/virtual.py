"""``rdmalab perftest VERB --nic MODEL``: perftest's bandwidth test in virtual time under a NIC model.

No peer and no network: both sides run in this process on the simulated fabric
(:class:`rdmalab.fabric.sim.Fabric`) whose devices have the named NIC model
(:mod:`rdmalab.verbs.engine.nicmodel`), and the client posts as ``ib_<verb>_bw`` does (``-t`` outstanding,
``-l`` work requests per ``post_send`` chain, one signaled in ``-Q``, inline up to ``-I`` bytes) through
:func:`rdmalab.fabric.nicbench.rate`.  The report has perftest's columns with the fabric's virtual time
(no peak: perftest's ``-N``), and a latency line (one signaled work request at a time, post to
completion).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import IO

from rdmalab.fabric import nicbench
from rdmalab.tools.perftest.options import PerftestError
from rdmalab.tools.perftest.report import RESULT_FMT, RESULT_FMT_G, BwReport, PerftestResult, report_line
from rdmalab.verbs.engine.nicmodel import by_name

VERBS = ("write", "read", "send")


@dataclass
class VirtualOptions:
    verb: str = "write"
    nic: str = "connectx3"
    size: int = 65536
    iters: int = 1000
    all_sizes: bool = False
    inline_size: int = 0  # -I: payloads up to this many bytes go inline
    post_list: int = 1  # -l: work requests per post_send (one doorbell)
    cq_mod: int = 100  # -Q: one signaled work request in this many
    tx_depth: int = 128  # -t
    num_qps: int = 1  # -q
    report_gbits: bool = False


def run_virtual(o: VirtualOptions, out: IO[str]) -> PerftestResult:
    """Run and print the report; a bad option is a :class:`PerftestError` naming it."""
    if o.verb not in VERBS:
        raise PerftestError(f"--nic: {o.verb} runs on real peers only; the NIC model measures write, read and send")
    try:
        model = by_name(o.nic)
    except ValueError as exc:
        raise PerftestError(f"--nic: {exc}") from None
    for name, v in (("-s", o.size), ("-n", o.iters), ("-l", o.post_list), ("-Q", o.cq_mod), ("-t", o.tx_depth),
                    ("-q", o.num_qps)):
        if v < 1:
            raise PerftestError(f"{name} {v}: must be at least 1")
    if o.inline_size > model.max_inline:
        raise PerftestError(f"-I {o.inline_size}: the {model.name} model inlines at most {model.max_inline} bytes")
    signal = min(o.cq_mod, o.iters)
    if signal + o.post_list > o.tx_depth:
        raise PerftestError(f"-Q {o.cq_mod} + -l {o.post_list} > -t {o.tx_depth}: the send queue would fill with "
                            "nothing signaled to free it")
    sizes = [1 << i for i in range(1, 17)] if o.all_sizes else [o.size]
    res = PerftestResult()
    out.write(f"\n RDMA_{o.verb.capitalize()} BW test in virtual time: simulated fabric, NIC model {model.name}, "
              f"link {model.link_gbps:g} Gb/s\n Number of qps : {o.num_qps}  TX depth : {o.tx_depth}  Post list : "
              f"{o.post_list}  CQ moderation : {o.cq_mod}  Inline : {o.inline_size} bytes\n"
              " (no peak: the virtual run has no per-iteration samples; t_avg: one at a time, post to completion)\n")
    out.write((RESULT_FMT_G if o.report_gbits else RESULT_FMT) + "   t_avg[usec]\n")
    for size in sizes:
        inline = size <= o.inline_size
        run = nicbench.rate(model, op=o.verb, size=size, inline=inline, batch=o.post_list, signal_every=signal,
                            qps=o.num_qps, messages=o.iters, depth=o.tx_depth)
        lat = nicbench.latency(model, op=o.verb, size=size, inline=inline, samples=5)
        factor = 125_000_000 if o.report_gbits else 0x100000
        rep = BwReport(size, run.messages, 0.0, size * run.messages / (run.ns / 1e9) / factor, run.mops)
        res.reports.append(rep)
        res.completions += run.messages
        out.write(report_line(rep, o.report_gbits).rstrip("\n") + f"   {lat / 1000:.2f}\n")
    return res
