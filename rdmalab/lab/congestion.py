"""The congestion lab's interactive runner: sliders in front of the switched-fabric scenarios.

:func:`congestion_runner` lets a student pick a scenario (``rdmalab simulate``'s, from
:mod:`rdmalab.fabric.scenarios`), a DCQCN profile and the main switch and DCQCN parameters;
each change runs the scenario on the switched fabric, whose flows are RC QPs of the soft
verbs engine, and redraws :func:`rdmalab.viz.congestion.timeline`.  It lives in ``lab``
because it drives the engine (``viz`` only draws finished runs); it is a thin ipywidgets layer,
and notebook 10 shows the same figures statically.
"""

from __future__ import annotations

from typing import Any

from rdmalab.fabric.scenarios import SCENARIOS, run
from rdmalab.viz.congestion import timeline

__all__ = ["congestion_runner"]


def congestion_runner(scenario: str = "incast") -> Any:
    """Sliders for the scenario's main parameters; each change reruns it and redraws the timeline."""
    import ipywidgets as w  # optional: ipywidgets, IPython (lab extra)
    from IPython import display as ipd

    display: Any = ipd.display

    pick = w.Dropdown(options=list(SCENARIOS), value=scenario, description="scenario")
    profile = w.Dropdown(options=["ns3-rdma", "paper", "mlx5"], value="ns3-rdma", description="profile")
    senders = w.IntSlider(value=2, min=1, max=16, description="senders")
    kmin = w.FloatLogSlider(value=40, base=10, min=0, max=3, description="Kmin KB")
    kmax = w.FloatLogSlider(value=1000, base=10, min=1, max=3.5, description="Kmax KB")
    pmax = w.FloatSlider(value=1.0, min=0.01, max=1.0, step=0.01, description="Pmax")
    ai = w.FloatLogSlider(value=40, base=10, min=0, max=3, description="rpg_ai_rate")
    timer = w.FloatLogSlider(value=60, base=10, min=0.5, max=3, description="rpg_time_reset")
    dur = w.FloatSlider(value=10, min=1, max=40, step=1, description="ms")
    out = w.Output()

    def redraw(_: Any = None) -> None:
        sets = {"kmin": str(kmin.value), "kmax": str(kmax.value), "pmax": str(pmax.value),
                "rpg_ai_rate": str(ai.value), "rpg_time_reset": str(timer.value)}
        with out:
            out.clear_output(wait=True)
            try:
                res = run(pick.value, senders=senders.value if pick.value in ("incast", "fairness", "lossy") else None,
                          duration_ms=dur.value, profile=profile.value, settings=sets)
            except ValueError as err:
                print(f"cannot run: {err}")
                return
            display(timeline(res, title=f"{pick.value}, {profile.value}"))

    for c in (pick, profile, senders, kmin, kmax, pmax, ai, timer, dur):
        c.observe(redraw, names="value")
    redraw()
    return w.VBox([w.HBox([pick, profile, senders]), w.HBox([kmin, kmax, pmax]), w.HBox([ai, timer, dur]), out])
