"""One perftest session from the first key record to the last (:func:`_session`), the same with both
exchange methods: the test's header (``ctx_print_test_info``), the key records and the QP printout
(``ctx_hand_shake``, ``ctx_print_pingpong_data``), the traffic, the client's figures sent to the
server, and the closing record (``ctx_close_connection``); ``src/write_bw.c`` and siblings,
``src/perftest_communication.c``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import IO, Any

from rdmalab.tools.oob import PERF_RECORD, PerfDest
from rdmalab.tools.perftest.credits import _Credits
from rdmalab.tools.perftest.exchange import DEST, decode_dest, encode_dest
from rdmalab.tools.perftest.options import OUT_READS, TEST_NAME, VERB_NUM, PerftestOptions
from rdmalab.tools.perftest.report import (
    RESULT_FMT,
    RESULT_FMT_G,
    RESULT_LINE,
    BwReport,
    PerftestResult,
    _c_hex,
    report_line,
)
from rdmalab.tools.perftest.traffic import _run_client, _serve_sends
from rdmalab.verbs.wr import SGE, RecvWR


def _session(opts: PerftestOptions, out: IO[str], chan: Any, fab: Any, client: bool, sizes: list[int],
             mtu_bytes: int, qp: Any, cq: Any, mr: Any, bufsize: int, me: PerfDest,
             connect_qp: Callable[[PerfDest], None] | None, iwarp: bool = False,
             credits: _Credits | None = None) -> PerftestResult:
    """From the first key exchange to the end: the part both exchange methods share.  ``connect_qp``
    is None with ``-R`` (rdma_cm connected the QP; the key records are 56-byte binary
    ``struct pingpong_dest`` over the control QP, and no "done" is written at the end)."""
    verb = opts.verb
    cm = connect_qp is None
    assert opts.iters is not None

    def pump() -> bool:
        # True if the peer's traffic arrived: the out-of-band wait is idle only when it did not
        before = fab.io_handled
        fab.step(0.005)
        return bool(fab.io_handled > before)

    def handshake(last: bool = False) -> PerfDest:
        # The engine keeps answering the peer while we wait for its next record.
        chan.pump = pump
        try:
            if cm:
                chan.last = last  # ctx_close_connection's: the peer disconnects once it has ours
                return decode_dest(chan.exchange(encode_dest(me), DEST.size, client, "its key record"))
            return PerfDest.decode(chan.exchange(me.encode(), PERF_RECORD, client, "its key record"))
        finally:
            chan.pump = None

    def print_dest(d: PerfDest, side: str) -> None:
        line = f" {side} address: LID {_c_hex(d.lid, 4)} QPN {_c_hex(d.qpn, 6)} PSN {_c_hex(d.psn, 6)}"
        # with -R the exchange's own parameters print them, and those say SEND (create_comm_struct)
        if VERB_NUM[verb] == 2 and not cm:
            line += f" OUT {_c_hex(d.out_reads, 4)}"
        if VERB_NUM[verb] in (1, 2) and not cm:
            line += f" RKey {_c_hex(d.rkey, 8)} VAddr {_c_hex(d.vaddr, 16)}"
        out.write(line + "\n")
        out.write(" GID: " + ":".join(f"{b:02d}" for b in d.gid) + "\n")

    def header() -> None:
        out.write(RESULT_LINE)
        title = TEST_NAME[verb] + " " + (opts.atomic_type + " " if verb == "atomic" else "") + "BW Test"
        out.write(" " * 20 + title + "\n")
        out.write(f" Dual-port       : OFF\t\tDevice         : {fab.device.name} ({fab.ifname})\n")
        out.write(f" Number of qps   : 1\t\tTransport type : {'IW' if iwarp else 'IB'}\n")
        out.write(" Connection type : RC\t\tUsing SRQ      : OFF\n")
        out.write(" PCIe relax order: Unsupported\n")
        out.write(" ibv_wr* API     : OFF\n")
        if client:
            out.write(f" TX depth        : {opts.tx_depth}\n")
        if verb == "send" and not client:
            out.write(f" RX depth        : {opts.rx_depth}\n")
        out.write(f" CQ Moderation   : {min(opts.cq_mod, opts.iters or 1)}\n")
        out.write(f" Mtu             : {mtu_bytes}[B]\n")
        out.write(" Link type       : Ethernet\n")
        out.write(f" GID index       : {0 if iwarp else 1}\n")
        if verb in ("read", "atomic"):
            out.write(f" Outstand reads  : {OUT_READS}\n")
        else:
            out.write(" Max inline data : 0[B]\n")
        if cm:
            out.write(" rdma_cm QPs\t : ON\n")
            out.write(" Data ex. method : rdma_cm")
            if not client:  # ctx_print_test_info, work_rdma_cm on the server
                out.write("\n" + RESULT_LINE + " Waiting for client rdma_cm QP to connect\n"
                          " Please run the same command with the IB/RoCE interface IP")
            out.write("\n")
        else:
            out.write(" rdma_cm QPs\t : OFF\n")
            out.write(" Data ex. method : Ethernet\n")
        out.write(RESULT_LINE)
        out.flush()

    header()
    rem = handshake()
    if connect_qp is not None:
        connect_qp(rem)
    if verb == "send":
        handshake()
        print_dest(me, "local")
        rem2 = handshake()
        print_dest(rem2, "remote")
    else:
        print_dest(me, "local")
        rem2 = handshake()
        print_dest(rem2, "remote")
        handshake()  # "an additional handshake is required after moving qp to RTR"
    out.write(RESULT_LINE)
    out.write((RESULT_FMT_G if opts.report_gbits else RESULT_FMT) + "\n")
    out.flush()
    res = PerftestResult()

    def post_recvs(n: int) -> None:
        for _ in range(n):
            qp.post_recv(RecvWR(wr_id=0, num_sge=1, sg=[SGE(mr.buf + bufsize, bufsize, mr.lkey)]))

    if credits is not None:
        credits.remote = rem  # ctx_set_credit_wqes: the peer's credit word, from the first record
    if not client:
        if verb == "send":
            post_recvs(opts.rx_depth)
            for size in sizes:
                handshake()
                if credits is not None:
                    credits.reset()
                rep = _serve_sends(opts, fab, cq, post_recvs, size, res, qp, credits)
                res.reports.append(rep)
                out.write(report_line(rep, opts.report_gbits))
            out.write(RESULT_LINE)
        else:
            handshake()  # the client finished
            chan.pump = pump
            try:
                for _ in sizes[:1]:
                    fields = [chan.exchange(bytes(8), 8, False, "its report") for _ in range(5)]
            finally:
                chan.pump = None
            size, iters = struct.unpack(">Q", fields[0])[0], struct.unpack(">Q", fields[1])[0]
            peak, avg, rate = (struct.unpack(">d", f)[0] for f in fields[2:])
            rr = BwReport(size, iters, peak, avg, rate)
            res.remote_reports.append(rr)
            out.write(report_line(rr, opts.report_gbits))
        handshake(last=True)  # ctx_close_connection
        if not cm:
            chan.send(b"done\0")
        if verb != "send":
            out.write(RESULT_LINE)
        out.flush()
        return res

    # ----------------------------------------------------------------- the client runs
    for size in sizes:
        if verb == "send":
            handshake()
            if credits is not None:
                credits.reset()
        rep = _run_client(opts, fab, qp, cq, mr, bufsize, rem, size, res, credits)
        res.reports.append(rep)
        out.write(report_line(rep, opts.report_gbits))
        out.flush()
    out.write(RESULT_LINE)
    if verb != "send":
        handshake()  # "client finished"
        last = res.reports[-1]
        for x in (struct.pack(">Q", last.size), struct.pack(">Q", last.iters), struct.pack(">d", last.bw_peak),
                  struct.pack(">d", last.bw_avg), struct.pack(">d", last.msg_rate)):
            chan.exchange(x, 8, True, "its report")
    handshake(last=True)  # ctx_close_connection
    if not cm:
        chan.send(b"done\0")
    out.flush()
    return res
