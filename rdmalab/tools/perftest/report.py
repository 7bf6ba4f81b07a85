"""perftest's report: the BW table's lines (``RESULT_LINE``, ``RESULT_FMT``, ``REPORT_FMT`` and
``REPORT_FMT_EXT`` in ``src/perftest_parameters.h``), the figures of one run (:class:`BwReport`,
``print_report_bw`` in ``src/perftest_parameters.c``) and ``-D``'s sample window
(``catch_alarm`` in ``src/perftest_resources.c``).

BW in MB/sec is bytes / 2^20 per second, in Gb/sec bits / 10^9 (``format_factor``); the peak is
perftest's: the shortest time per message over any run of completed messages (``print_report_bw``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

RESULT_LINE = "-" * 87 + "\n"
RESULT_FMT = " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]"
RESULT_FMT_G = " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]"


@dataclass
class BwReport:
    size: int
    iters: int
    bw_peak: float
    bw_avg: float
    msg_rate: float


@dataclass
class PerftestResult:
    reports: list[BwReport] = field(default_factory=list)
    remote_reports: list[BwReport] = field(default_factory=list)
    completions: int = 0
    errors: int = 0


def _c_hex(v: int, width: int) -> str:
    """C's ``%#0<width>x``: ``0x``-prefixed and zero-padded, but a plain zero for 0."""
    return "0" * width if v == 0 else f"{v:#0{width}x}"


def report_line(r: BwReport, gbits: bool) -> str:
    if gbits and r.bw_avg < 0.1:  # inc_accuracy: REPORT_FMT_EXT
        return f" {r.size:<7d}    {r.iters}           {r.bw_peak:<7.6f}            {r.bw_avg:<7.6f}            {r.msg_rate:<7.6f}\n"
    return f" {r.size:<7d}    {r.iters:<10d}       {r.bw_peak:<7.2f}            {r.bw_avg:<7.2f}\t\t   {r.msg_rate:<7.6f}\n"


def sample_window(duration: float) -> tuple[float, float]:
    """perftest's ``-D``: the run goes START -> SAMPLE after the margin -> STOP_SAMPLE at duration -
    margin -> END at duration (perftest_resources.c ``catch_alarm``); the margin is duration / 4 in
    whole seconds (perftest_parameters.c, DEF_INIT_MARGIN).  Seconds from the start."""
    margin = int(duration) // 4
    return float(margin), duration - margin


def duration_report(size: int, iters: int, window: float, gbits: bool) -> BwReport:
    """``print_report_bw`` for ``-D``: no peak (noPeak is forced on), the completions of the sample window."""
    factor = 125_000_000 if gbits else 0x100000
    if window <= 0:
        return BwReport(size, iters, 0.0, 0.0, 0.0)
    return BwReport(size, iters, 0.0, size * iters / window / factor, iters / window / 1e6)


def compute_report(size: int, posted: list[float], completed: list[float], cq_mod: int, gbits: bool, *,
                   peak: bool = True, count: int | None = None) -> BwReport:
    """perftest's ``print_report_bw`` from per-message post times and completion times (seconds).

    ``peak=False`` is perftest's noPeak (the peak prints as 0; the average runs from the first post
    to the last completion); ``count`` is the number of messages when the lists hold only those two."""
    n = len(completed) if count is None else count
    factor = 125_000_000 if gbits else 0x100000
    total = completed[-1] - posted[0] if n else 0.0
    if n == 0 or total <= 0:
        return BwReport(size, n, 0.0, 0.0, 0.0)
    if not peak:
        return BwReport(size, n, 0.0, size * n / total / factor, n / total / 1e6)
    opt = total
    for i in range(n):
        j = ((i + cq_mod) // cq_mod) * cq_mod - 1  # ROUND_UP(i + 1, cq_mod) - 1
        while j < n:
            t = (completed[j] - posted[i]) / (j - i + 1)
            if 0 < t < opt:
                opt = t
            j += cq_mod
        if n % cq_mod:
            t = (completed[n - 1] - posted[i]) / (n - i)
            if 0 < t < opt:
                opt = t
    return BwReport(size, n, size / opt / factor, size * n / total / factor, n / total / 1e6)
