"""Pictures of congestion on the switched fabric: rates, queues, marks, CNPs and pauses in time.

* :func:`timeline`: one figure, one time axis, three panels: each flow's DCQCN rate (what the
  requester paces at), the watched egress queues with Kmin/Kmax, and the ECN marks, CNPs,
  PFC pauses and drops per sample interval.
* :func:`fluid_vs_packets`: the fluid model's rate and queue over the packet simulation's.

They draw a finished run (a scenario's result, or a :class:`~rdmalab.fabric.switched.SwitchedFabric`);
running scenarios is the lab's business (:func:`rdmalab.lab.congestion.congestion_runner` puts
sliders in front of them and redraws :func:`timeline`).
"""

from __future__ import annotations

from typing import Any

from rdmalab.viz.plots import Plot

_COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")


def _fabric(obj: Any) -> Any:
    return getattr(obj, "fabric", obj)


def timeline(result: Any, *, title: str = "", max_flows: int = 8, window_us: float = 50.0,
             goodput: bool = False) -> Plot:
    """Rate per flow, queue length, and marks/CNPs/pauses on one time axis.

    ``goodput=True`` draws each flow's delivered payload rate (per ``window_us``) instead of its
    DCQCN rate: what PFC alone does to a flow shows there, not in a rate limiter.
    """
    from matplotlib.figure import Figure  # optional: matplotlib (lab, analysis extras)

    fab = _fabric(result)
    t = [s / 1e6 for s in fab.samples]
    fig = Figure(figsize=(9.6, 6.4), dpi=100)
    axes = fig.subplots(3, 1, sharex=True, gridspec_kw={"height_ratios": [3, 2, 1.4]})
    ax_r, ax_q, ax_e = axes
    for ax in axes:
        ax.grid(True, color="#eeeeee")
    shown = fab.flows[:max_flows]
    k = max(1, round(window_us * 1000 / fab.sample_ns))
    for i, f in enumerate(shown):
        if goodput:
            xs = [t[j] for j in range(0, len(t), k)]
            ys = [sum(row[i] for row in fab.rx_series[j:j + k]) * 8 / (k * fab.sample_ns) for j in range(0, len(t), k)]
            ax_r.step(xs, ys, where="post", color=_COLORS[i % len(_COLORS)], lw=1.2, label=f.name)
        else:
            ax_r.plot(t, [row[i] for row in fab.rate_series], color=_COLORS[i % len(_COLORS)], lw=1.2, label=f.name)
    if len(fab.flows) > max_flows:
        ax_r.plot([], [], " ", label=f"(+{len(fab.flows) - max_flows} more flows)")
    ax_r.set_ylabel("goodput (Gb/s)" if goodput else "DCQCN rate (Gb/s)")
    ax_r.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, fontsize=7, frameon=False)  # beside the axes: on them it covers the data
    cfg = fab.cfg
    for j, p in enumerate(fab.watch[:4]):
        ax_q.plot(t, [row[j] / 1024 for row in fab.queue_series], lw=1.0, label=f"queue {p.name}",
                  color=("#333333", "#9467bd", "#8c564b", "#17becf")[j])
    if cfg.ecn:
        ax_q.axhline(cfg.kmin, color="#2ca02c", ls="--", lw=0.8, label=f"Kmin {three_figures(cfg.kmin)} KB")
        ax_q.axhline(cfg.kmax, color="#d62728", ls="--", lw=0.8, label=f"Kmax {three_figures(cfg.kmax)} KB")
    ax_q.set_ylabel("queue (KB)")
    ax_q.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, fontsize=7, frameon=False)
    tb = [t[i] for i in range(0, len(t), k)]
    width = k * fab.sample_ns / 1e6

    def binned(series: list[int]) -> list[int]:
        return [sum(series[i:i + k]) for i in range(0, len(series), k)]

    ax_e.bar(tb, binned(fab.mark_series), width=width, align="edge", color="#ff7f0e", alpha=0.7, label="ECN marks")
    ax_e.step(tb, binned(fab.cnp_series), where="post", color="#1f77b4", lw=1.0, label="CNPs")
    pauses = binned(fab.pause_series)
    if any(pauses):
        ax_e.step(tb, pauses, where="post", color="#d62728", lw=1.0, label="PFC pauses sent")
    drops = binned(getattr(fab, "drop_series", []))
    if any(drops):  # PFC off: what the switch dropped, which the engine's go-back-N resends
        ax_e.step(tb, drops, where="post", color="#000000", lw=1.0, label="drops")
    ax_e.set_ylabel(f"per {window_us:g} us")
    ax_e.set_xlabel("time (ms)")
    ax_e.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, fontsize=7, frameon=False)
    if title:
        ax_r.set_title(title)
    fig.tight_layout()
    return Plot(fig)


def fluid_vs_packets(model: Any, result: Any, *, title: str = "") -> Plot:
    """The fluid model's per-flow rate and queue (black) over the packet simulation's."""
    from matplotlib.figure import Figure  # optional: matplotlib (lab, analysis extras)

    fab = _fabric(result)
    t = [s / 1e6 for s in fab.samples]
    fig = Figure(figsize=(8.0, 4.6), dpi=100)
    ax_r, ax_q = fig.subplots(2, 1, sharex=True)
    for ax in (ax_r, ax_q):
        ax.grid(True, color="#eeeeee")
    for i in range(min(len(fab.flows), 8)):
        ax_r.plot(t, [row[i] for row in fab.rate_series], lw=0.8, alpha=0.6, color=_COLORS[i % len(_COLORS)])
    ax_r.plot(model.t_us / 1000, model.rc_gbps, color="black", lw=1.6, label="fluid model RC")
    ax_r.set_ylabel("rate per flow (Gb/s)")
    ax_r.set_ylim(0, max(2.5 * model.capacity_gbps / model.n, 1.0))
    ax_r.legend(loc="upper right", fontsize=8)
    ax_q.plot(t, [row[0] / 1024 for row in fab.queue_series], lw=0.8, color="#9467bd", label="packet simulation")
    ax_q.plot(model.t_us / 1000, model.queue_kb, color="black", lw=1.4, label="fluid model")
    ax_q.set_ylabel("queue (KB)")
    ax_q.set_xlabel("time (ms)")
    ax_q.legend(loc="upper right", fontsize=8)
    ax_r.set_title(title or f"N = {model.n}: fluid model over packets")
    fig.tight_layout()
    return Plot(fig)


def three_figures(value: float) -> str:
    """A number to 3 significant figures, written plainly: 39.8107 -> "39.8", 1000.0 -> "1000", 0.5 -> "0.5"."""
    return f"{float(f'{value:.3g}'):g}"
