"""DCQCN's reaction point: the per-QP rate limiter a RoCEv2 NIC runs when CNPs arrive.

The algorithm is DCQCN's (Zhu et al., SIGCOMM 2015, section 3.3) in the form NVIDIA's NICs
implement and HPCC's simulator models (alibaba-edu/High-Precision-Congestion-Control,
``simulation/src/point-to-point/model/rdma-hw.cc``, the ``*Mlx`` functions), with the mlx5
parameter names and defaults of NVIDIA's "DCQCN CC Parameters" (DOCA documentation).  Per QP:

* **Before the first CNP** the QP sends at line rate and no timer runs.
* **First CNP**: alpha <- ``initial_alpha_value``/1024; rate <- ``rate_to_set_on_first_cnp``
  (if non-zero); the alpha and increase timers start.
* **Alpha**, every ``dce_tcp_rtt`` us: alpha <- (1-g) alpha + g if a CNP arrived during the
  period, else alpha <- (1-g) alpha, with g = (1024 - ``dce_tcp_g``)/1024.
* **Rate decrease**, on a CNP, at most once per ``rate_reduce_monitor_period`` us:
  target <- current if ``clamp_tgt_rate`` is set, or if the rate was increased since the last cut
  and ``clamp_tgt_rate_after_time_inc`` is set (rdma-hw.cc keeps the target when the stage is 0), current <- current (1 - alpha/2), no lower than ``rpg_min_dec_fac`` % of
  what it was nor ``rpg_min_rate``; the timer and byte counters restart.
* **Rate increase**, each time the timer (``rpg_time_reset`` us) or the byte counter
  (``rpg_byte_reset`` bytes sent; 0 disables it) expires, counted in stages T and BC against
  F = ``rpg_threshold``: fast recovery while both are below F; hyper increase (target +=
  ``rpg_hai_rate``) once both exceed F; otherwise additive (target += ``rpg_ai_rate``); then
  current <- (target + current)/2.  With the byte counter disabled the stage is T alone
  (< F fast, == F additive, > F hyper, as rdma-hw.cc's timer-only ``RateIncEventTimerMlx``).
* Once current and target are back at the maximum rate, the limiter goes idle again.

Two profiles: ``PAPER`` (the SIGCOMM'15 constants as the DCQCN author's ns3-rdma sample
config and htsim use them: g = 1/256, 55 us alpha period and timer, F = 5, byte counter 10 MB,
R_AI 40 Mb/s, R_HAI 200 Mb/s, CNPs every 50 us) and ``MLX5`` (ConnectX firmware defaults, an
``mlxconfig -q`` dump: g = 5/1024, alpha every 1 us, timer 300 us, byte counter 32767 B, F = 1,
R_AI 5 Mb/s, R_HAI 50 Mb/s, decrease at most every 4 us, CNPs every 4 us).

The limiter is sans-I/O: it is given the time in each call and a ``schedule(delay_ns, fn)``
to arm its timers; rates are in Gb/s (bits per ns), times in ns.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class DcqcnParams:
    """DCQCN parameters under their mlx5 names (OFED sysfs ``ecn/roce_rp`` and ``roce_np``).

    Units as in the firmware: us, bytes, Mb/s, and fixed point /1024 for g and alpha.
    """

    rpg_time_reset: float = 300.0  # us between timer-driven increases
    rpg_byte_reset: int = 32767  # bytes sent between byte-counter increases (0: off)
    rpg_threshold: int = 1  # F, stages of fast recovery
    rpg_max_rate: float = 0.0  # Mb/s, 0 = line rate
    rpg_ai_rate: float = 5.0  # Mb/s
    rpg_hai_rate: float = 50.0  # Mb/s
    rpg_min_dec_fac: float = 50.0  # %: one cut keeps at least this share of the rate
    rpg_min_rate: float = 1.0  # Mb/s
    rate_to_set_on_first_cnp: float = 0.0  # Mb/s, 0 = keep the current rate
    dce_tcp_g: int = 1019  # g = (1024 - dce_tcp_g) / 1024
    dce_tcp_rtt: float = 1.0  # us, alpha update period
    rate_reduce_monitor_period: float = 4.0  # us, minimum time between cuts
    initial_alpha_value: int = 1023  # /1024, alpha at the first CNP
    clamp_tgt_rate: int = 0
    clamp_tgt_rate_after_time_inc: int = 1
    min_time_between_cnps: float = 4.0  # us, notification point (rdmalab.verbs.engine.cnp)

    @property
    def g(self) -> float:
        return (1024 - self.dce_tcp_g) / 1024

    def replace(self, **changes: Any) -> DcqcnParams:
        return dataclasses.replace(self, **changes)

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))

    def with_settings(self, settings: dict[str, str]) -> DcqcnParams:
        """These parameters with ``NAME=VALUE`` strings applied; unknown names raise KeyError."""
        known = {f.name: f.type for f in dataclasses.fields(self)}
        bad = sorted(set(settings) - set(known))
        if bad:
            raise KeyError(", ".join(bad))
        out: dict[str, Any] = {}
        for k, v in settings.items():
            is_int = known[k] in (int, "int")
            try:
                out[k] = int(v, 0) if is_int else float(v)
            except ValueError:
                raise ValueError(f"{k}={v}: not {'an integer' if is_int else 'a number'}") from None
        return self.replace(**out)


#: The DCQCN paper's constants (reference A1 and A2.1: ns3-rdma mix/config.txt, htsim dcqcn.cpp).
PAPER = DcqcnParams(
    rpg_time_reset=55.0, rpg_byte_reset=10_000_000, rpg_threshold=5, rpg_ai_rate=40.0, rpg_hai_rate=200.0,
    rpg_min_dec_fac=0.0, rpg_min_rate=10.0, dce_tcp_g=1020, dce_tcp_rtt=55.0, rate_reduce_monitor_period=0.0,
    initial_alpha_value=1024, clamp_tgt_rate=1, min_time_between_cnps=50.0,
)
#: ConnectX firmware defaults (reference A1b, the ``mlxconfig -q`` dump).
MLX5 = DcqcnParams()
PROFILES = {"paper": PAPER, "mlx5": MLX5}


class RateLimiter:
    """The DCQCN state of one QP.  ``rate`` is what the requester paces at (Gb/s)."""

    __slots__ = ("p", "line", "max_rate", "rate", "target", "alpha", "active", "t_stage", "b_stage",
                 "bytes", "cnp_in_period", "last_cut", "increased", "_sched", "_alpha_gen", "_inc_gen",
                 "_g", "_ai", "_hai", "_min", "_byte_reset", "_t_inc", "_t_alpha", "_t_cut", "cnps", "cuts",
                 "on_change")

    def __init__(self, params: DcqcnParams, line_gbps: float,
                 schedule: Callable[[int, Callable[[Any], None], Any], None]) -> None:
        self.p = params
        self.line = line_gbps
        self.max_rate = params.rpg_max_rate / 1000 if params.rpg_max_rate else line_gbps
        self.rate = self.max_rate
        self.target = self.max_rate
        self.alpha = 1.0
        self.active = False
        self.t_stage = self.b_stage = 0
        self.bytes = 0
        self.cnp_in_period = False
        self.last_cut = -(10**18)
        self.increased = False
        self.cnps = self.cuts = 0
        self._sched = schedule
        self._alpha_gen = self._inc_gen = 0
        self._g = params.g
        self._ai = params.rpg_ai_rate / 1000
        self._hai = params.rpg_hai_rate / 1000
        self._min = params.rpg_min_rate / 1000
        self._byte_reset = params.rpg_byte_reset
        self._t_inc = max(1, round(params.rpg_time_reset * 1000))
        self._t_alpha = max(1, round(params.dce_tcp_rtt * 1000))
        self._t_cut = round(params.rate_reduce_monitor_period * 1000)
        self.on_change: Callable[[float], None] | None = None

    # ------------------------------------------------------------------ inputs
    def on_cnp(self, now: int) -> None:
        """A CNP for this QP arrived."""
        self.cnps += 1
        self.cnp_in_period = True
        if not self.active:
            self.active = True
            self.alpha = self.p.initial_alpha_value / 1024
            if self.p.rate_to_set_on_first_cnp:
                self.rate = min(self.max_rate, self.p.rate_to_set_on_first_cnp / 1000)
            self._alpha_gen += 1
            self._sched(self._t_alpha, self._alpha_timer, self._alpha_gen)
            self.cnp_in_period = False  # the first CNP sets alpha; later ones raise it
        if now - self.last_cut >= self._t_cut:
            self._cut(now)

    def on_sent(self, nbytes: int) -> None:
        """The requester sent ``nbytes`` on this QP (drives the byte counter)."""
        if not self.active or not self._byte_reset:
            return
        self.bytes += nbytes
        if self.bytes >= self._byte_reset:
            self.bytes -= self._byte_reset
            self.b_stage += 1
            self._increase()

    # ------------------------------------------------------------------ internals
    def _cut(self, now: int) -> None:
        self.last_cut = now
        self.cuts += 1
        if self.p.clamp_tgt_rate or (self.increased and self.p.clamp_tgt_rate_after_time_inc):
            self.target = self.rate
        floor = max(self._min, self.rate * self.p.rpg_min_dec_fac / 100)
        self.rate = max(floor, self.rate * (1 - self.alpha / 2))
        self.t_stage = self.b_stage = 0
        self.bytes = 0
        self.increased = False
        self._inc_gen += 1
        self._sched(self._t_inc, self._inc_timer, self._inc_gen)
        if self.on_change is not None:
            self.on_change(self.rate)

    def _alpha_timer(self, gen: int) -> None:
        if gen != self._alpha_gen or not self.active:
            return
        g = self._g
        self.alpha = (1 - g) * self.alpha + (g if self.cnp_in_period else 0.0)
        self.cnp_in_period = False
        self._sched(self._t_alpha, self._alpha_timer, gen)

    def _inc_timer(self, gen: int) -> None:
        if gen != self._inc_gen or not self.active:
            return
        self.t_stage += 1
        self._increase()
        if self.active:
            self._sched(self._t_inc, self._inc_timer, gen)

    def _increase(self) -> None:
        f = self.p.rpg_threshold
        t = self.t_stage
        if self._byte_reset:
            b = self.b_stage
            if max(t, b) < f:
                stage = 0
            elif min(t, b) > f:
                stage = 2
            else:
                stage = 1
        else:
            stage = 0 if t < f else (1 if t == f else 2)
        if stage == 1:
            self.target = min(self.max_rate, self.target + self._ai)
        elif stage == 2:
            self.target = min(self.max_rate, self.target + self._hai)
        self.rate = min(self.max_rate, (self.target + self.rate) / 2)
        self.increased = True
        if self.rate >= self.max_rate * 0.999999 and self.target >= self.max_rate * 0.999999:
            self.rate = self.target = self.max_rate
            self.active = False  # back at full speed: idle until the next CNP
        if self.on_change is not None:
            self.on_change(self.rate)


# ---------------------------------------------------------------------------- the requester's hooks
# A QP gets a limiter with :func:`attach`; the requester then asks :func:`wait` before each
# request packet (True: not yet, a timer on the carrier's clock resumes it), reports it with
# :func:`sent` (ECT(0), the pacing time, the byte counter), and the CNP path
# (``SoftDevice.receive`` -> :func:`rdmalab.verbs.engine.cnp.on_cnp`) feeds it CNPs.


def attach(qp: Any, params: DcqcnParams, line_gbps: float = 100.0) -> RateLimiter:
    """Give ``qp`` (a verbs QP or its engine QP) a DCQCN reaction point: its requests go ECT(0), paced."""
    qp = getattr(qp, "engine", qp)
    carrier = qp.dev.carrier
    lim = RateLimiter(params, line_gbps, lambda delay, fn, arg: carrier.call_later(max(1, int(delay)), fn, arg))
    qp.dcqcn = lim
    qp.dcqcn_next_ns = 0.0
    qp.dcqcn_armed = False
    return lim


def ecn_only(qp: Any) -> None:
    """Send ``qp``'s requests ECT(0) without a reaction point (CNPs arrive and change nothing)."""
    getattr(qp, "engine", qp).ecn_capable = True


def wait(qp: Any) -> bool:
    """Before the requester builds a packet: True if the QP's rate says not yet (a timer resumes it)."""
    lim: RateLimiter | None = getattr(qp, "dcqcn", None)
    if lim is None:
        return False
    now = qp.dev.now
    if qp.dcqcn_next_ns <= now:
        return False
    if not qp.dcqcn_armed:
        qp.dcqcn_armed = True
        qp.dev.carrier.call_later(max(1, int(qp.dcqcn_next_ns - now + 0.999)), _resume, qp)
    return True


def sent(qp: Any, p: Any) -> None:
    """Request packet ``p`` goes out: mark it ECT(0), and count it against the rate and byte counter."""
    lim: RateLimiter | None = getattr(qp, "dcqcn", None)
    if lim is None:
        if getattr(qp, "ecn_capable", False):
            p.ecn = 0b10
        return
    size = p.wire_size
    p.ecn = 0b10  # ECT(0): a DCQCN sender's packets may be marked (RFC 3168)
    qp.dcqcn_next_ns = max(float(qp.dev.now), qp.dcqcn_next_ns) + size * 8 / lim.rate
    lim.on_sent(size)


def _resume(qp: Any) -> None:
    qp.dcqcn_armed = False
    qp.kick()  # the requester goes on where the pacing stopped it
