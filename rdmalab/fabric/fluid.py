"""The DCQCN fluid model (Zhu et al., "ECN or Delay", CoNEXT 2016, eq. (1)-(5)), integrated.

N identical flows share one bottleneck of capacity C.  Rates are in packets per second, the
queue in packets; p is the RED marking probability of the queue seen ``tau_star`` earlier (the
feedback delay), RC(t - tau_star) the rate the CNPs refer to:

    p(t)    = 0 if q <= Kmin;  Pmax (q - Kmin)/(Kmax - Kmin) if q <= Kmax;  1 above
    dq/dt   = N RC - C                                              (q >= 0)
    a       = 1 - (1 - p)^(tau RC*)          chance of >= 1 CNP per CNP interval tau
    b       = p / ((1 - p)^(-B) - 1)         byte-counter expiries per packet
    c       = b (1 - p)^(F B)                ... past fast recovery
    d       = p / ((1 - p)^(-T RC*) - 1)     timer expiries per packet
    e       = d (1 - p)^(F T RC*)            ... past fast recovery
    dalpha/dt = g/tau' ((1 - (1 - p)^(tau' RC*)) - alpha)
    dRT/dt  = -(RT - RC) a / tau + R_AI RC* (c + e)
    dRC/dt  = -RC alpha a / (2 tau) + (RT - RC) RC* (b + d) / 2

(with p -> 0 the expiry rates tend to 1/B and 1/(T RC*)).  This is the model's own form:
hyper increase is not in it, and every flow is the same flow.  We integrate it with a fixed
step (forward Euler, delay line of RC and q), which is enough at a 0.1 us step for these
time scales.  The variable names follow the paper; the parameters come from a
:class:`~rdmalab.verbs.engine.dcqcn.DcqcnParams` (tau = ``min_time_between_cnps``, tau' =
``dce_tcp_rtt``, T = ``rpg_time_reset``, B = ``rpg_byte_reset``, F = ``rpg_threshold``, R_AI =
``rpg_ai_rate``, g).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from rdmalab.verbs.engine.dcqcn import DcqcnParams


@dataclass
class FluidResult:
    t_us: np.ndarray
    rc_gbps: np.ndarray  # one flow's current rate
    rt_gbps: np.ndarray
    alpha: np.ndarray
    queue_kb: np.ndarray
    n: int
    capacity_gbps: float

    def settled(self, frac: float = 0.5) -> tuple[float, float, float]:
        """Mean rate (Gb/s), mean queue (KB) and queue standard deviation (KB) over the last ``frac``."""
        k = int(len(self.t_us) * (1 - frac))
        return float(self.rc_gbps[k:].mean()), float(self.queue_kb[k:].mean()), float(self.queue_kb[k:].std())

    def oscillation(self, frac: float = 0.5) -> float:
        """Peak-to-peak queue (KB) over the last ``frac``: ~0 when the fixed point is stable."""
        k = int(len(self.t_us) * (1 - frac))
        q = self.queue_kb[k:]
        return float(q.max() - q.min())


def simulate(params: DcqcnParams, *, n: int, capacity_gbps: float = 40.0, kmin_kb: float = 40.0,
             kmax_kb: float = 1000.0, pmax: float = 1.0, tau_star_us: float = 4.0, packet_bytes: int = 1082,
             duration_ms: float = 50.0, dt_us: float = 0.1, record_every: int = 10,
             start_gbps: float | None = None) -> FluidResult:
    """Integrate the model for ``n`` flows starting at ``start_gbps`` (default: line rate)."""
    if n < 1:
        raise ValueError("n must be at least 1")
    pkt_bits = packet_bytes * 8
    to_pps = 1e9 / pkt_bits  # Gb/s -> packets/s
    C = capacity_gbps * to_pps
    kmin = kmin_kb * 1024 / packet_bytes
    kmax = kmax_kb * 1024 / packet_bytes
    tau = max(params.min_time_between_cnps, dt_us) * 1e-6
    tau_p = max(params.dce_tcp_rtt, dt_us) * 1e-6
    T = params.rpg_time_reset * 1e-6
    B = params.rpg_byte_reset / packet_bytes if params.rpg_byte_reset else float("inf")
    F = params.rpg_threshold
    r_ai = params.rpg_ai_rate * 1e6 / pkt_bits
    g = params.g
    dt = dt_us * 1e-6
    steps = int(duration_ms * 1000 / dt_us)
    lag = max(1, round(tau_star_us / dt_us))
    rc = rt = (capacity_gbps if start_gbps is None else start_gbps) * to_pps
    alpha = 1.0
    q = 0.0
    hist_rc = [rc] * lag
    hist_q = [0.0] * lag
    out_n = steps // record_every + 1
    t_out = np.empty(out_n)
    rc_out = np.empty(out_n)
    rt_out = np.empty(out_n)
    a_out = np.empty(out_n)
    q_out = np.empty(out_n)
    j = 0
    span = kmax - kmin
    for i in range(steps + 1):
        if i % record_every == 0 and j < out_n:
            t_out[j], rc_out[j], rt_out[j], a_out[j], q_out[j] = i * dt_us, rc, rt, alpha, q
            j += 1
        slot = i % lag
        rc_d = hist_rc[slot]
        q_d = hist_q[slot]
        hist_rc[slot] = rc
        hist_q[slot] = q
        if q_d <= kmin:
            p = 0.0
        elif q_d <= kmax:
            p = pmax * (q_d - kmin) / span
        else:
            p = 1.0
        if p <= 0.0:
            a = 0.0
            b = 0.0 if B == float("inf") else 1 / B
            c = b
            d = 1 / (T * rc_d) if rc_d > 0 else 0.0
            e = d
            a_alpha = 0.0
        elif p >= 1.0:
            a = a_alpha = 1.0
            b = c = d = e = 0.0
        else:
            lq = math.log1p(-p)
            a = -math.expm1(tau * rc_d * lq)
            a_alpha = -math.expm1(tau_p * rc_d * lq)
            xb = -B * lq
            b = 0.0 if xb > 700 else p / math.expm1(xb)  # (1-p)^-B overflows: no expiry in practice
            c = b * math.exp(F * B * lq) if b else 0.0
            x = -T * rc_d * lq
            if x > 700:
                d = 0.0
            elif x > 1e-12:
                d = p / math.expm1(x)
            else:
                d = 1 / (T * rc_d) if rc_d > 0 else 0.0
            e = d * math.exp(F * T * rc_d * lq)
        d_alpha = g / tau_p * (a_alpha - alpha)
        d_rt = -(rt - rc) * a / tau + r_ai * rc_d * (c + e)
        d_rc = -rc * alpha * a / (2 * tau) + (rt - rc) * rc_d * (b + d) / 2
        d_q = n * rc - C
        alpha += d_alpha * dt
        rt = min(rt + d_rt * dt, C)
        rc = min(max(rc + d_rc * dt, 0.0), C)
        q = max(q + d_q * dt, 0.0)
    to_g = 1 / to_pps
    return FluidResult(t_out[:j], rc_out[:j] * to_g, rt_out[:j] * to_g, a_out[:j], q_out[:j] * packet_bytes / 1024,
                       n, capacity_gbps)
