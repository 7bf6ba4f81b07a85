"""The congestion lab's interactive runner: sliders in front of the switched-fabric scenarios.

:func:`congestion_runner` lets a student pick a scenario (``rdmalab simulate``'s, from
:mod:`rdmalab.fabric.congestion_scenarios`), a DCQCN profile and the main switch and DCQCN parameters;
each change runs the scenario on the switched fabric, whose flows are RC QPs of the soft
verbs engine, and redraws :func:`rdmalab.viz.congestion.timeline`.  It lives in ``lab``
because it drives the engine (``viz`` only draws finished runs); it is a thin ipywidgets layer,
and notebook 10 shows the same figures statically.
"""

from __future__ import annotations

from typing import Any

from rdmalab.fabric.congestion_scenarios import SCENARIOS, run_scenario
from rdmalab.viz.congestion import three_figures, timeline
from rdmalab.viz.widgets import StaticView, live_box

__all__ = ["congestion_runner", "runner_settings"]


def runner_settings(kmin: float, kmax: float, pmax: float, ai: float, timer: float) -> dict[str, str]:
    """The runner's slider values as scenario settings, to 3 significant figures: a log slider sits at
    10**1.6 = 39.8107..., and a legend reading "Kmin 39.8107 KB" claims a precision nobody chose."""
    return {k: three_figures(v) for k, v in (("kmin", kmin), ("kmax", kmax), ("pmax", pmax), ("rpg_ai_rate", ai),
                                              ("rpg_time_reset", timer))}


def congestion_runner(scenario: str = "incast") -> Any:
    """Sliders for the scenario's main parameters; each change reruns it and redraws the timeline."""
    import ipywidgets as w  # optional: ipywidgets, IPython (lab extra)


    view = StaticView()  # the static view a saved notebook keeps

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
            view.clear(f"{pick.value}, profile {profile.value}")
            try:
                n = senders.value if pick.value in ("incast", "fairness", "lossy") else None
                res = run_scenario(pick.value, senders=n, duration_ms=dur.value, profile=profile.value, settings=sets)
            except ValueError as err:
                view.print(f"cannot run: {err}")
                return
            view.display(timeline(res, title=f"{pick.value}, {profile.value}"))

    for c in (pick, profile, senders, kmin, kmax, pmax, ai, timer, dur):
        c.observe(redraw, names="value")
    redraw()
    return live_box([w.HBox([pick, profile, senders]), w.HBox([kmin, kmax, pmax]), w.HBox([ai, timer, dur]), out],
                    view)
