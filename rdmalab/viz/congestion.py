"""Pictures of congestion on the switched fabric: rates, queues, marks, CNPs and pauses in time.

* :func:`timeline`: one figure, one time axis, three panels: each flow's DCQCN rate (what the
  requester paces at), the watched egress queues with Kmin/Kmax, and the ECN marks, CNPs and
  PFC pauses per sample interval.
* :func:`fluid_vs_packets`: the fluid model's rate and queue over the packet simulation's.
* :func:`congestion_runner`: sliders and a scenario picker; each change runs the scenario and
  redraws :func:`timeline` (a thin ipywidgets layer; the notebooks show the same figure
  statically).
"""

from __future__ import annotations

from typing import Any

from rdmalab.fabric.scenarios import SCENARIOS, run
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
    fig = Figure(figsize=(8.0, 6.4), dpi=100)
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
    ax_r.legend(loc="upper right", fontsize=7, ncol=2)
    cfg = fab.cfg
    for j, p in enumerate(fab.watch[:4]):
        ax_q.plot(t, [row[j] / 1024 for row in fab.queue_series], lw=1.0, label=f"queue {p.name}",
                  color=("#333333", "#9467bd", "#8c564b", "#17becf")[j])
    if cfg.ecn:
        ax_q.axhline(cfg.kmin, color="#2ca02c", ls="--", lw=0.8, label=f"Kmin {three_figures(cfg.kmin)} KB")
        ax_q.axhline(cfg.kmax, color="#d62728", ls="--", lw=0.8, label=f"Kmax {three_figures(cfg.kmax)} KB")
    ax_q.set_ylabel("queue (KB)")
    ax_q.legend(loc="upper right", fontsize=7)
    tb = [t[i] for i in range(0, len(t), k)]
    width = k * fab.sample_ns / 1e6

    def binned(series: list[int]) -> list[int]:
        return [sum(series[i:i + k]) for i in range(0, len(series), k)]

    ax_e.bar(tb, binned(fab.mark_series), width=width, align="edge", color="#ff7f0e", alpha=0.7, label="ECN marks")
    ax_e.step(tb, binned(fab.cnp_series), where="post", color="#1f77b4", lw=1.0, label="CNPs")
    pauses = binned(fab.pause_series)
    if any(pauses):
        ax_e.step(tb, pauses, where="post", color="#d62728", lw=1.0, label="PFC pauses sent")
    ax_e.set_ylabel(f"per {window_us:g} us")
    ax_e.set_xlabel("time (ms)")
    ax_e.legend(loc="upper right", fontsize=7, ncol=3)
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


def runner_settings(kmin: float, kmax: float, pmax: float, ai: float, timer: float) -> dict[str, str]:
    """The runner's slider values as scenario settings, to 3 significant figures: a log slider sits at
    10**1.6 = 39.8107..., and a legend reading "Kmin 39.8107 KB" claims a precision nobody chose."""
    return {k: three_figures(v) for k, v in (("kmin", kmin), ("kmax", kmax), ("pmax", pmax), ("rpg_ai_rate", ai),
                                        ("rpg_time_reset", timer))}


def congestion_runner(scenario: str = "incast") -> Any:
    """Sliders for the scenario's main parameters; each change reruns it and redraws the timeline."""
    import ipywidgets as w  # optional: ipywidgets, IPython (lab extra)
    from IPython import display as ipd

    display: Any = ipd.display


    # the descriptions are parameter names ("rpg_time_reset"): a fixed width wide enough for the longest,
    # not ipywidgets' default, which cuts them ("rpg_time_...")
    style = {"description_width": "105px"}
    log = {"base": 10, "readout_format": ".3g", "style": style}
    pick = w.Dropdown(options=list(SCENARIOS), value=scenario, description="scenario", style=style)
    profile = w.Dropdown(options=["ns3-rdma", "paper", "mlx5"], value="ns3-rdma", description="profile", style=style)
    senders = w.IntSlider(value=2, min=1, max=16, description="senders", style=style)
    kmin = w.FloatLogSlider(value=40, min=0, max=3, description="Kmin KB", **log)
    kmax = w.FloatLogSlider(value=1000, min=1, max=3.5, description="Kmax KB", **log)
    pmax = w.FloatSlider(value=1.0, min=0.01, max=1.0, step=0.01, description="Pmax", style=style)
    ai = w.FloatLogSlider(value=40, min=0, max=3, description="rpg_ai_rate", **log)
    timer = w.FloatLogSlider(value=60, min=0.5, max=3, description="rpg_time_reset", **log)
    dur = w.FloatSlider(value=10, min=1, max=40, step=1, description="ms", style=style)
    out = w.Output()

    def redraw(_: Any = None) -> None:
        sets = runner_settings(kmin.value, kmax.value, pmax.value, ai.value, timer.value)
        with out:
            out.clear_output(wait=True)
            try:
                res = run(pick.value, senders=senders.value if pick.value in ("incast", "fairness") else None,
                          duration_ms=dur.value, profile=profile.value, settings=sets)
            except ValueError as err:
                print(f"cannot run: {err}")
                return
            display(timeline(res, title=f"{pick.value}, {profile.value}"))

    for c in (pick, profile, senders, kmin, kmax, pmax, ai, timer, dur):
        c.observe(redraw, names="value")
    redraw()
    return w.VBox([w.HBox([pick, profile, senders]), w.HBox([kmin, kmax, pmax]), w.HBox([ai, timer, dur]), out])
