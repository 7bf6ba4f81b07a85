"""``rdmalab perftest write|read|send|atomic``: perftest 4.5's ``ib_*_bw`` with the soft engine on UDP.

The out-of-band exchange, the traffic and the report of ``ib_write_bw``, ``ib_read_bw``,
``ib_send_bw`` and ``ib_atomic_bw`` (perftest v4.5-0.17, Debian 12; ``src/write_bw.c`` and
siblings, ``src/perftest_communication.c``, ``src/perftest_parameters.c``), RC, one QP, TCP
exchange (not ``-R``/``-z``):

1. TCP connection; the client writes first in every exchange, the server reads first.
2. Version strings (16 bytes; the peer must be >= 5.70), page size and cache line (4 bytes each,
   network order, when the peer is >= 5.32), MTU (2 bytes: the ``ibv_mtu`` digit and a NUL; both
   use the smaller).
3. Key records (108 bytes, :class:`rdmalab.tools.oob.PerfDest`): write/read/atomic: one, connect
   the QP, one more (printed as the remote's), one "after RTR"; send: one, connect, one, one.
4. The client runs: up to ``tx_depth`` (128) WRITE/READ/ATOMIC/SEND work requests outstanding,
   one signalled every ``cq_mod`` (100); the server only answers (send: it posts 512 receives
   and counts ``iters`` of them).
5. write/read/atomic: one more key record ("client finished"), then the report fields (size,
   iters, peak, average, message rate; 8 bytes each, big-endian), which the server prints; all
   tools: a last key record, then ``"done"``.

With ``-R`` (:func:`_run_cm`, perftest's rdma_cm mode) the same sequence runs as SENDs on a control
RC QP that rdma_cm connects first (conn_param 0/0, one receive posted again after each message), the
key records as the 56-byte binary ``struct pingpong_dest`` (:data:`DEST`, big-endian fields); after
the MTU, a zeroed record, the data QP's own rdma_cm connection to the same port (out_reads/out_reads
for read and atomic), another zeroed record; no QP is connected by hand, no "done" is written, and
both connections end with a DREQ (``create_rdma_cm_connection``, ``rdma_write_keys``,
``ctx_xchg_data_rdma`` in perftest_communication.c).  perftest disconnects as soon as the closing
exchange is done on its side, so an ACK lost in it is never sent again: the engine takes the
peer's answer, or its DREQ after our closing answer, as the end of the session, and before its own
DREQ it answers the peer's retransmissions until they stop (``_Control._await``, :func:`_linger`).

Over iWARP (``-R`` on an iWARP device: ``transport="iwarp"``, or a linked device whose transport is
iWARP; the peer is ``ib_*_bw -R`` on kernel siw) rdma_cm connects with TCP and MPA instead of CM MADs,
and perftest itself differs in what :class:`PerftestOptions` documents for ``transport``: the read
sink also gets REMOTE_WRITE (``ctx_alloc_mr`` in perftest_resources.c), GID index 0 (siw's only GID),
``Transport type : IW``, and ``ib_send_bw`` runs with receive credits (:class:`_Credits`,
``send_rcredit`` in send_bw.c).  iWARP has no atomics (siw 6.1 refuses opcodes above Terminate), so
``atomic`` is refused by name.

BW in MB/sec is bytes / 2^20 per second, in Gb/sec bits / 10^9 (``format_factor``); the peak is
perftest's: the shortest time per message over any run of completed messages
(``print_report_bw``).

One module per part: :mod:`~rdmalab.tools.perftest.options` (the options, the tests, the errors),
:mod:`~rdmalab.tools.perftest.main` (:func:`run`: the checks, then one of the two exchange methods),
:mod:`~rdmalab.tools.perftest.exchange` (versions, page size, MTU, ``-R``'s key record),
:mod:`~rdmalab.tools.perftest.ethernet` (the TCP exchange's QP, connected by hand),
:mod:`~rdmalab.tools.perftest.rdmacm` (``-R``), :mod:`~rdmalab.tools.perftest.session` (the sequence
both share), :mod:`~rdmalab.tools.perftest.traffic` (the posting and polling loops),
:mod:`~rdmalab.tools.perftest.credits` (iWARP's receive credits) and
:mod:`~rdmalab.tools.perftest.report` (the BW table and ``-D``'s sample window).  This module
re-exports their names.
"""

from __future__ import annotations

from rdmalab.tools.perftest.credits import CREDIT_WRID, _Credits
from rdmalab.tools.perftest.exchange import CACHE_LINE, DEST, GID_INDEX, PAGE, VERSION, decode_dest, encode_dest
from rdmalab.tools.perftest.main import run
from rdmalab.tools.perftest.options import (
    ATOMIC_IWARP,
    MAX_SIZE,
    OUT_READS,
    TEST_NAME,
    VERB_NUM,
    VERBS,
    PerftestError,
    PerftestOptions,
    Rejected,
)
from rdmalab.tools.perftest.rdmacm import CM_RETRIES, _Control, _linger, _run_cm
from rdmalab.tools.perftest.report import (
    RESULT_FMT,
    RESULT_FMT_G,
    RESULT_LINE,
    BwReport,
    PerftestResult,
    compute_report,
    duration_report,
    report_line,
    sample_window,
)
from rdmalab.tools.perftest.traffic import ACCESS, ACCESS_IWARP

__all__ = [
    "ACCESS", "ACCESS_IWARP", "ATOMIC_IWARP", "CACHE_LINE", "CM_RETRIES", "CREDIT_WRID", "DEST", "GID_INDEX",
    "MAX_SIZE", "OUT_READS", "PAGE", "RESULT_FMT", "RESULT_FMT_G", "RESULT_LINE", "TEST_NAME", "VERBS", "VERB_NUM",
    "VERSION", "BwReport", "PerftestError", "PerftestOptions", "PerftestResult", "Rejected", "_Control", "_Credits",
    "_linger", "_run_cm", "compute_report", "decode_dest", "duration_report", "encode_dest", "report_line", "run",
    "sample_window",
]
