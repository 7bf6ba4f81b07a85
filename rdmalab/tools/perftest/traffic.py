"""perftest's traffic: the data buffer (``ctx_alloc_mr`` in ``src/perftest_resources.c``), the client's
posting and polling loop (:func:`_run_client`, ``run_iter_bw``) and the SEND server's receive loop
(:func:`_serve_sends`, ``run_iter_bw_server``), with ``-n`` iterations or ``-D`` seconds.
"""

from __future__ import annotations

import random
import time
from typing import Any

from rdmalab.tools.oob import PerfDest
from rdmalab.tools.perftest.credits import CREDIT_WRID, _Credits
from rdmalab.tools.perftest.options import PerftestError, PerftestOptions
from rdmalab.tools.perftest.report import BwReport, PerftestResult, compute_report, duration_report, sample_window
from rdmalab.verbs import enums as e
from rdmalab.verbs.mr import MR
from rdmalab.verbs.wr import SGE, SendWR

ACCESS = (e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
          | e.IBV_ACCESS_REMOTE_ATOMIC)
#: ctx_alloc_mr's flags on iWARP (perftest_resources.c): the read sink also takes REMOTE_WRITE there
ACCESS_IWARP = {"write": e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE,
                "read": e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_READ | e.IBV_ACCESS_REMOTE_WRITE,
                "send": e.IBV_ACCESS_LOCAL_WRITE}


def _data_mr(pd: Any, bufsize: int, verb: str, iwarp: bool = False) -> MR:
    """perftest's data buffer: the sending half, then the receiving half the peer is told about."""
    mr = MR(pd, 2 * bufsize, ACCESS_IWARP[verb] if iwarp else ACCESS)
    mr.write(random.randbytes(2 * bufsize) if verb != "atomic" else bytes(2 * bufsize), 2 * bufsize)
    return mr


def _run_client(opts: PerftestOptions, fab: Any, qp: Any, cq: Any, mr: Any, bufsize: int, rem: PerfDest, size: int,
                res: PerftestResult, credits: _Credits | None = None) -> BwReport:
    verb = opts.verb
    assert opts.iters is not None
    iters = opts.iters
    cq_mod = max(1, min(opts.cq_mod, iters))
    opcode = {"write": e.IBV_WR_RDMA_WRITE, "read": e.IBV_WR_RDMA_READ, "send": e.IBV_WR_SEND,
              "atomic": (e.IBV_WR_ATOMIC_FETCH_AND_ADD if opts.atomic_type == "FETCH_AND_ADD"
                         else e.IBV_WR_ATOMIC_CMP_AND_SWP)}[verb]
    posted: list[float] = []
    completed: list[float] = []
    done = 0
    start = time.monotonic()
    deadline = start + opts.duration if opts.duration else None
    sample_from, sample_to = (start + t for t in sample_window(opts.duration or 0.0))
    sampled = 0   # -D: completions polled while perftest's state is SAMPLE_STATE
    last_progress = start
    i = 0
    last_signalled = True

    def post(signal: bool) -> None:
        wr = SendWR(wr_id=len(posted), opcode=opcode, num_sge=1, sg=[SGE(mr.buf, size, mr.lkey)],
                    send_flags=e.IBV_SEND_SIGNALED if signal else 0)
        if verb == "atomic":
            if opcode == e.IBV_WR_ATOMIC_FETCH_AND_ADD:
                wr.set_wr_atomic(rem.rkey, rem.vaddr, 1, 0)
            else:
                wr.set_wr_atomic(rem.rkey, rem.vaddr, 0, 0)
        elif verb != "send":
            wr.set_wr_rdma(rem.rkey, rem.vaddr)
        posted.append(time.monotonic())
        qp.post_send(wr)

    while True:
        if deadline is None:
            while i < iters and i - done < opts.tx_depth and (credits is None or credits.may_send(i, opts.rx_depth)):
                last_signalled = (i + 1) % cq_mod == 0 or i + 1 == iters
                post(last_signalled)
                i += 1
        elif time.monotonic() < deadline:
            while i - done < opts.tx_depth and (credits is None or credits.may_send(i, opts.rx_depth)):
                last_signalled = (i + 1) % cq_mod == 0
                post(last_signalled)
                i += 1
        elif not last_signalled and i - done < opts.tx_depth and (credits is None or credits.may_send(i, opts.rx_depth)):
            # -D: the run ends after the deadline with one more, signalled, work request
            post(True)
            i += 1
            last_signalled = True
        # (with -n, all posted: a sender held back by iWARP receive credits has i < iters meanwhile)
        if done >= i and (i >= iters if deadline is None else time.monotonic() >= deadline):
            break
        n, wcs = cq.poll(16)
        if n == 0:
            # the CQ was just looked at, so a completion that came during the last step counts
            if time.monotonic() - last_progress > opts.timeout:
                if credits is not None and done >= i:
                    raise PerftestError(f"no receive credit for {opts.timeout:.0f} s ({done} sent, the peer's credit "
                                        f"says {credits.received()} received; the window is {opts.rx_depth})")
                raise PerftestError(f"no completion for {opts.timeout:.0f} s ({done} of {i} done): is the peer still "
                                    f"running, and can it reach {fab.ip} on UDP 4791?")
            fab.step(0.01)
            continue
        last_progress = time.monotonic()
        for wc in wcs:
            if wc.status != e.IBV_WC_SUCCESS:
                res.errors += 1
                raise PerftestError(f"Completion with error at client: Failed status {wc.status}: "
                                    f"{e.ibv_wc_status_str(wc.status)} (wr_id {wc.wr_id})")
            k = wc.wr_id + 1
            completed.extend([last_progress] * (k - done))
            res.completions += k - done
            if deadline is not None and sample_from <= last_progress < sample_to:
                sampled += k - done
            done = k
    if deadline is not None:
        return duration_report(size, sampled, sample_to - sample_from, opts.report_gbits)
    # perftest turns the peak off for long runs (perftest_parameters.c: ITERATIONS, iters > 20000, BW)
    return compute_report(size, posted[:len(completed)], completed, cq_mod, opts.report_gbits,
                          peak=iters <= 20000)


def _serve_sends(opts: PerftestOptions, fab: Any, cq: Any, post_recvs: Any, size: int, res: PerftestResult,
                 qp: Any = None, credits: _Credits | None = None) -> BwReport:
    """perftest's ``run_iter_bw_server``: receive ``iters`` SENDs, or with ``-D`` receive for the duration
    from the first one (``set_on_first_rx_packet``), counting those completed in the sample window.  The
    receive queue is kept full to the end, so the client's last SENDs still complete after the server
    stops counting (it answers them while it waits for the closing handshake).  With ``credits``
    (iWARP) every ``rx_depth // 3``-th receive is answered by a credit RDMA WRITE of the count."""
    assert opts.iters is not None
    rcnt = 0
    first: float | None = None
    last = 0.0
    sampled = 0
    window = sample_window(opts.duration or 0.0)
    last_progress = time.monotonic()
    outstanding = opts.rx_depth
    while rcnt < opts.iters if opts.duration is None else (first is None or time.monotonic() < first + opts.duration):
        wcs = credits.take_stash() if credits is not None else []
        n = len(wcs)
        if not n:
            n, wcs = cq.poll(32)
        if n == 0:
            # the CQ was just looked at, so a completion that came during the last step counts
            if time.monotonic() - last_progress > opts.timeout:
                goal = f"of {opts.iters} " if opts.duration is None else ""
                raise PerftestError(f"no completion for {opts.timeout:.0f} s ({rcnt} {goal}received)")
            fab.step(0.01)
            continue
        last = last_progress = time.monotonic()
        if first is None:
            first = last_progress
        for wc in wcs:
            if wc.status != e.IBV_WC_SUCCESS:
                what = "a credit RDMA WRITE" if wc.wr_id == CREDIT_WRID else "a receive"
                raise PerftestError(f"Completion with error at server ({what}): Failed status {wc.status}: "
                                    f"{e.ibv_wc_status_str(wc.status)}")
            if wc.wr_id == CREDIT_WRID:
                assert credits is not None
                credits.outstanding -= 1
                continue
            rcnt += 1
            if credits is not None:
                credits.after_receive(qp, cq, rcnt, opts, fab)
            if first + window[0] <= last_progress < first + window[1]:
                sampled += 1
            outstanding -= 1
        # as perftest does, every receive completed is posted again at once (it refills per completion)
        if outstanding < opts.rx_depth and (opts.duration is not None or rcnt < opts.iters):
            post_recvs(opts.rx_depth - outstanding)
            outstanding = opts.rx_depth
    if opts.duration is None:
        # run_iter_bw_server takes tcompleted after its loop (get_cycles), not at the last poll: all the
        # receives may come in one poll (a slow machine), and the time is still not zero
        last = time.monotonic()
    res.completions += rcnt
    if credits is not None:
        credits.drain(cq, opts, fab)
    if opts.duration is not None:
        return duration_report(size, sampled, window[1] - window[0], opts.report_gbits)
    # a SEND server has no peak (perftest_parameters.c: noPeak for SEND, BW, SERVER); its time runs
    # from the first receive (set_on_first_rx_packet) to the last
    assert first is not None
    return compute_report(size, [first], [last], 1, opts.report_gbits, peak=False, count=rcnt)
