"""The congestion scenarios of ``rdmalab simulate`` and notebook 10, and their summaries.

* ``incast``: N senders to one receiver through one switch (a star), all starting at once.
  With 2 senders at 40 Gb/s and the ``ns3-rdma`` profile this is the DCQCN author's sample run
  (bobzhuyb/ns3-rdma ``mix/config.txt`` and ``topology.txt``; reference A2.1).
* ``fairness``: the same star, the senders joining one after another.
* ``victim``: the PFC victim-flow scenario of sc20anonymous/DCQCN-validation (reference A2.2):
  long flows F1 (H1->R1) and F2 (H2->R2) cross the link between two switches; from 3 ms to
  4 ms fifteen hosts (H3..H17, on R2's switch) send to R2.  PFC pauses the inter-switch link,
  so F1, which does not go to R2, is blocked and marked too: a victim.
* ``deadlock``: three switches in a ring, one host each, every flow routed two hops clockwise;
  PFC with DCQCN off builds a cyclic buffer dependency and the ring stops for good.  With
  ``routing=shortest`` the same flows take one hop and nothing deadlocks.
* ``lossy``: DCQCN without PFC.  16 senders each WRITE 2 MB to one receiver, all starting at
  once, through a switch with PFC off and a shallow 500 KB buffer: the first burst overflows
  it, and the engine recovers the drops by go-back-N (NAKs, timeouts, resends), which
  :func:`loss_summary` counts.  ``--set pfc=1`` is the same incast on the lossless fabric.

Every flow is an RC QP pair of the soft verbs engine (:class:`rdmalab.fabric.switched_flows.Flow`),
payload 1024 bytes per packet (the path MTU), 64-packet RDMA WRITEs.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rdmalab.fabric.switched import HEADER_BYTES, SwitchConfig, SwitchedFabric
from rdmalab.verbs.engine.dcqcn import PROFILES, DcqcnParams

#: share of a link's bits that is payload with 1024-byte packets (58 bytes of Ethernet, IPv4, UDP, BTH, ICRC)
HEADER_OVERHEAD = 1024 / (1024 + HEADER_BYTES)
SCENARIOS = ("incast", "fairness", "victim", "deadlock", "lossy")

#: The DCQCN author's ns3-rdma sample (mix/config.txt): the paper's constants with RP_TIMER 60 us
#: and BYTE_COUNTER 300000000.
NS3_RDMA = PROFILES["paper"].replace(rpg_time_reset=60.0, rpg_byte_reset=300_000_000)
ALL_PROFILES: dict[str, DcqcnParams] = {**PROFILES, "ns3-rdma": NS3_RDMA}


@dataclass
class ScenarioConfig:
    """Scenario knobs (``--set`` accepts these names too)."""

    delay_us: float = 1.0  # per link (ns3-rdma topology.txt: 1 us)
    dcqcn: int = 1  # 0 in the deadlock scenario unless set
    cnp_scope: str = "qp"
    payload: int = 1024  # bytes per packet: the QPs' path MTU (ns3-rdma uses 1000, not an IB MTU)
    msg_packets: int = 64  # packets per RDMA WRITE
    qp_timeout: int = 10  # local ACK timeout 4.096 us x 2^10 = 4.2 ms (rxe rounds anything shorter up to 4 ms)
    depth: int = 3  # WRITEs each flow keeps posted
    flow_kb: float = 0.0  # KB each sender writes (0: until the run ends); lossy: 2048
    seed: int = 1
    sample_us: float = 10.0
    routing: str = "clockwise"  # deadlock: clockwise (two hops, a cycle) or shortest
    incast_start_ms: float = 3.0  # victim
    incast_ms: float = 1.0  # victim


SWITCH_NAMES = tuple(f.name for f in dataclasses.fields(SwitchConfig))
SCENARIO_NAMES = tuple(f.name for f in dataclasses.fields(ScenarioConfig))


def parameter_names() -> tuple[str, ...]:
    return DcqcnParams.names() + SWITCH_NAMES + SCENARIO_NAMES


def split_settings(settings: dict[str, str], scenario: str) -> tuple[dict[str, str], SwitchConfig, ScenarioConfig]:
    """Split ``NAME=VALUE`` settings into DCQCN, switch and scenario parts; unknown names raise KeyError."""
    bad = sorted(set(settings) - set(parameter_names()))
    if bad:
        raise KeyError(", ".join(bad))
    sw = _switch_defaults(scenario)
    sc = ScenarioConfig(dcqcn=0 if scenario == "deadlock" else 1, flow_kb=2048.0 if scenario == "lossy" else 0.0)
    dc: dict[str, str] = {}
    for k, v in settings.items():
        if k in SWITCH_NAMES:
            sw_change: dict[str, Any] = {k: _num(k, v, type(getattr(sw, k)))}
            sw = dataclasses.replace(sw, **sw_change)
        elif k in SCENARIO_NAMES:
            cur = getattr(sc, k)
            sc_change: dict[str, Any] = {k: v if isinstance(cur, str) else _num(k, v, type(cur))}
            sc = dataclasses.replace(sc, **sc_change)
        else:
            dc[k] = v
    DcqcnParams().with_settings(dc)  # checks the values
    return dc, sw, sc


def _num(name: str, v: str, kind: type) -> Any:
    try:
        return int(v, 0) if kind is int else float(v)
    except ValueError:
        raise ValueError(f"{name}={v}: not {'an integer' if kind is int else 'a number'}") from None


def _switch_defaults(scenario: str) -> SwitchConfig:
    if scenario == "victim":
        # DCQCN-validation README: Kmin 5 KB, Kmax 100 KB, Pmax 0.01.  It does not give the PFC
        # threshold.  Each incast host is one RC QP of the engine, whose window (128 PSNs, rxe's
        # RXE_MAX_UNACKED_PSNS) puts at most 138 KB in one ingress queue, so the XOFF must be below
        # that for PFC to act at all: we fix it at 64 KB per ingress queue, half a window.
        return SwitchConfig(kmin=5, kmax=100, pmax=0.01, pfc_xoff=64)
    if scenario == "deadlock":
        # Each flow is one RC QP, and the engine's window (128 PSNs unacknowledged, rxe's
        # RXE_MAX_UNACKED_PSNS) keeps at most 138 KB of it in flight: three flows can never fill the
        # dynamic XOFF threshold (about 1.4 MB of a 12 MB buffer).  A fixed XOFF of 40 KB per
        # ingress queue (a shallow-buffered switch) lets the ring's pauses build the cycle.
        return SwitchConfig(pfc_xoff=40)
    if scenario == "lossy":
        # PFC off: the shared buffer is the only limit and a full buffer drops.  500 KB is a shallow
        # buffer (a Trident II has 12 MB for 32 ports): the smallest in which PFC still works here
        # (the headroom of 17 ports takes 290 KB), so that ``--set pfc=1`` compares like with like.
        return SwitchConfig(pfc=0, buffer=0.5)
    return SwitchConfig()  # ns3-rdma mix/config.txt: 40 KB, 1000 KB, 1.0


def default_profile(scenario: str) -> str:
    return {"incast": "ns3-rdma", "fairness": "ns3-rdma", "victim": "paper", "deadlock": "paper",
            "lossy": "ns3-rdma"}[scenario]


def build(scenario: str, *, senders: int | None = None, rate: float = 40.0, duration_ms: float | None = None,
          profile: str | None = None, settings: dict[str, str] | None = None) -> tuple[SwitchedFabric, float]:
    """Build a scenario's fabric and flows; returns it with the duration to run (us)."""
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown scenario {scenario!r}; choose one of {', '.join(SCENARIOS)}")
    dc_set, sw, sc = split_settings(settings or {}, scenario)
    prof = profile or default_profile(scenario)
    if prof not in ALL_PROFILES:
        raise ValueError(f"unknown profile {prof!r}; choose one of {', '.join(ALL_PROFILES)}")
    params = ALL_PROFILES[prof]
    if scenario == "victim" and profile is None:
        params = params.replace(rpg_time_reset=50.0)  # the DCQCN-validation timer: 50 us
    params = params.with_settings(dc_set)
    if rate <= 0:
        raise ValueError(f"--rate must be positive, not {rate}")
    fab = SwitchedFabric(seed=sc.seed, switch=sw, dcqcn=params if sc.dcqcn else None, cnp_scope=sc.cnp_scope,
                         payload=sc.payload, msg_packets=sc.msg_packets, sample_ns=sc.sample_us * 1000,
                         qp_timeout=sc.qp_timeout, depth=sc.depth)
    d = sc.delay_us
    if scenario in ("incast", "fairness", "lossy"):
        n = (16 if scenario == "lossy" else 2) if senders is None else senders
        if n < 1:
            raise ValueError("--senders must be at least 1")
        dur = (20.0 if scenario == "lossy" else 100.0) if duration_ms is None else duration_ms
        s = fab.add_switch("sw")
        r = fab.add_host("recv")
        fab.link(s, r, rate, d)
        for i in range(n):
            h = fab.add_host(f"h{i + 1}")
            fab.link(h, s, rate, d)
            start = i * dur * 1000 / (2 * n) if scenario == "fairness" else 0.0
            size = round(sc.flow_kb * 1024) or None
            fab.add_flow(h, r, start_us=start, size=size, name=f"h{i + 1}->recv")
        fab.watch = [fab.port("sw", "recv")]
    elif scenario == "victim":
        n = 15 if senders is None else senders
        dur = 30.0 if duration_ms is None else duration_ms
        s1, s2 = fab.add_switch("P1"), fab.add_switch("P2")
        fab.link(s1, s2, rate, d)
        for name, sw_ in (("H1", s1), ("H2", s1), ("R1", s2), ("R2", s2)):
            fab.link(fab.add_host(name), sw_, rate, d)
        fab.add_flow("H1", "R1", name="F1 H1->R1 (victim)")
        fab.add_flow("H2", "R2", name="F2 H2->R2")
        t0 = sc.incast_start_ms * 1000
        for i in range(n):
            h = fab.add_host(f"H{i + 3}")
            fab.link(h, s2, rate, d)
            fab.add_flow(h, "R2", start_us=t0, stop_us=t0 + sc.incast_ms * 1000, name=f"H{i + 3}->R2 (incast)")
        fab.watch = [fab.port("P1", "P2"), fab.port("P2", "R2"), fab.port("P2", "R1")]
    else:  # deadlock
        dur = 10.0 if duration_ms is None else duration_ms
        sws = [fab.add_switch(f"S{i}") for i in range(3)]
        for i in range(3):
            fab.link(sws[i], sws[(i + 1) % 3], rate, d)
        hosts = []
        for i in range(3):
            h = fab.add_host(f"H{i}")
            fab.link(h, sws[i], rate, d)
            hosts.append(h)
        for i in range(3):
            via = None if sc.routing == "shortest" else [f"S{i}", f"S{(i + 1) % 3}", f"S{(i + 2) % 3}"]
            if sc.routing not in ("shortest", "clockwise"):
                raise ValueError(f"routing must be clockwise or shortest, not {sc.routing!r}")
            fab.add_flow(hosts[i], hosts[(i + 2) % 3], via=via, name=f"H{i}->H{(i + 2) % 3}", dcqcn=bool(sc.dcqcn))
        fab.watch = [fab.port(f"S{i}", f"S{(i + 1) % 3}") for i in range(3)]
    if dur <= 0:
        raise ValueError(f"--duration must be positive, not {dur}")
    return fab, dur * 1000


@dataclass
class Result:
    scenario: str
    profile: str
    duration_ms: float
    fabric: SwitchedFabric
    wall_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        fab = self.fabric
        return {
            "scenario": self.scenario, "profile": self.profile, "duration_ms": self.duration_ms,
            "flows": flow_table(fab), "queues": queue_table(fab),
            "marks": fab.marks, "cnps": fab.cnps, "pauses": fab.pauses, "resumes": fab.resumes, "drops": fab.drops,
            "retransmitted_bytes": fab.retx_bytes,
            "events": fab.events, "wall_s": round(self.wall_s, 3), **self.extra,
        }


def flow_table(fab: SwitchedFabric) -> list[dict[str, Any]]:
    """Per flow: goodput over the second half of the run, final DCQCN rate, marks, CNPs."""
    n = len(fab.samples)
    half = fab.rx_series[n // 2:]
    span_ns = len(half) * fab.sample_ns
    out = []
    for i, f in enumerate(fab.flows):
        got = sum(row[i] for row in half)
        out.append({
            "name": f.name, "src": f.src.name, "dst": f.dst.name,
            "goodput_gbps": round(got * 8 / span_ns, 4) if span_ns else 0.0,
            "bytes": f.rcvd,
            "rate_gbps": round(f.rate, 4),
            "ce_marked": f.marked, "cnps": f.cnps, "drops": f.drops, "retransmitted_bytes": f.retx_bytes,
            "done_ms": None if f.finish_ns is None else round(f.finish_ns / 1e6, 3),
            "cuts": f.limiter.cuts if f.limiter is not None else 0,
        })
    return out


def queue_table(fab: SwitchedFabric) -> list[dict[str, Any]]:
    """Per watched egress port: mean/max queue (KB) over the second half, and time paused."""
    cfg = fab.cfg
    n = len(fab.samples)
    out = []
    for j, p in enumerate(fab.watch):
        qs = [row[j] for row in fab.queue_series[n // 2:]]
        inside = sum(1 for q in qs if cfg.kmin * 1024 <= q <= cfg.kmax * 1024)
        out.append({
            "port": p.name, "mean_kb": round(sum(qs) / len(qs) / 1024, 2) if qs else 0.0,
            "max_kb": round(max(qs) / 1024, 2) if qs else 0.0,
            "max_all_kb": round(p.qmax / 1024, 2),
            "share_in_kmin_kmax": round(inside / len(qs), 3) if qs else 0.0,
            "share_empty": round(sum(1 for q in qs if q == 0) / len(qs), 3) if qs else 0.0,
            "marks": p.marks, "pauses_received": p.pause_rx,
            "paused_ms": round(fab.paused_time_ns(p) / 1e6, 3),
        })
    return out


def run_scenario(scenario: str, *, senders: int | None = None, rate: float = 40.0, duration_ms: float | None = None,
                 profile: str | None = None, settings: dict[str, str] | None = None, capture: str | None = None,
                 progress: Callable[[float], None] | None = None) -> Result:
    """Build and run a scenario; ``capture`` writes the first watched link's frames to a pcap."""

    fab, dur = build(scenario, senders=senders, rate=rate, duration_ms=duration_ms, profile=profile,
                     settings=settings)
    tap = None
    if capture is not None:
        p = fab.watch[0]
        assert p.peer is not None
        tap = fab.tap(p.node.name, p.peer.node.name, capture)
    t0 = time.perf_counter()
    try:
        fab.run(dur, progress)
    finally:
        if tap is not None:
            tap.close()
    res = Result(scenario, profile or default_profile(scenario), dur / 1000, fab, time.perf_counter() - t0)
    if tap is not None:
        res.extra["captured_frames"] = tap.count
    if scenario == "victim":
        res.extra["victim"] = victim_summary(fab)
    if scenario == "deadlock":
        res.extra["deadlock"] = deadlock_summary(fab)
    if scenario == "lossy" or fab.drops:
        res.extra["loss"] = loss_summary(fab)
    return res


def loss_summary(fab: SwitchedFabric) -> dict[str, Any]:
    """What the drops cost and how the engine recovered: go-back-N resends, NAKs, timeouts, goodput.

    ``retransmitted_kb`` counts request payload sent again (a PSN sent before: go-back-N resends
    every packet from the oldest unacknowledged one: the receiver discarded those that arrived
    after a gap, ``out_of_sequence``, and counts resends of packets it had taken as ``duplicates``);
    ``naks`` the PSN-sequence NAKs the senders got, ``timeouts``
    the retries the local ACK timer started.  For flows of a given size, ``goodput_gbps`` is the
    bytes they wrote over the time the last one took (all of them if all finished, else over the run).
    """
    def count(name: str) -> int:
        return sum(h.device.counters.get(name, 0) for h in fab.hosts)

    naks = count("rcvd_seq_err")
    sent = sum(f.sent for f in fab.flows)
    retx = fab.retx_bytes
    bounded = [f for f in fab.flows if f.size is not None]
    done = [f for f in bounded if f.finish_ns is not None]
    delivered = sum(f.rcvd for f in fab.flows)
    finished = [f.finish_ns for f in done if f.finish_ns is not None]
    span = max(finished, default=0.0) if bounded and len(done) == len(bounded) else fab.now
    return {
        "drops": fab.drops, "data_drops": sum(f.data_drops for f in fab.flows),
        "dropped_kb": round(fab.drop_bytes / 1024, 1),
        "retransmitted_kb": round(retx / 1024, 1), "retransmitted_packets": sum(f.retx_pkts for f in fab.flows),
        "new_kb": round(sent / 1024, 1), "retransmitted_share": round(retx / (retx + sent), 4) if retx + sent else 0.0,
        "naks": naks, "timeouts": count("completer_retry_err") - naks,
        "out_of_sequence": count("out_of_seq_request"), "duplicates": count("duplicate_request"),
        "flows": len(bounded), "flows_done": len(done),
        "last_done_ms": round(span / 1e6, 3) if bounded and len(done) == len(bounded) else None,
        "goodput_gbps": round(delivered * 8 / span, 3) if span else 0.0,
        "intact": all(f.intact() for f in done),
    }


def link_throughput(fab: SwitchedFabric, flows: list[int], window_us: float = 100.0) -> tuple[list[float], list[float]]:
    """Summed goodput (Gb/s) of ``flows`` per window: (times in ms, Gb/s)."""
    k = max(1, round(window_us * 1000 / fab.sample_ns))
    ts, gb = [], []
    for start in range(0, len(fab.rx_series) - k + 1, k):
        rows = fab.rx_series[start:start + k]
        tot = sum(r[i] for r in rows for i in flows)
        ts.append(fab.samples[start] / 1e6)
        gb.append(tot * 8 / (k * fab.sample_ns))
    return ts, gb


def victim_summary(fab: SwitchedFabric) -> dict[str, Any]:
    """F1's DCQCN rate before/after the incast, and how long the P1->P2 link stays under-used."""
    t_inc = next(f.start for f in fab.flows[2:]) if len(fab.flows) > 2 else 0.0
    ts, gb = link_throughput(fab, [0, 1])
    before = [g for t, g in zip(ts, gb, strict=True) if t_inc / 1e6 - 1.0 <= t < t_inc / 1e6]
    base = sum(before) / len(before) if before else 0.0
    under_start = None
    recovered = None
    for t, g in zip(ts, gb, strict=True):
        if t < t_inc / 1e6:
            continue
        if g < 0.9 * base:
            if under_start is None:
                under_start = t
            recovered = None
        elif under_start is not None and recovered is None:
            recovered = t
    i = fab.samples.index(next(s for s in fab.samples if s >= t_inc)) if fab.samples and t_inc <= fab.samples[-1] else 0
    f1_before = fab.rate_series[i - 1][0] if i else 0.0
    f1_min = min((row[0] for row in fab.rate_series[i:]), default=0.0)
    return {
        "link": "P1->P2", "throughput_before_gbps": round(base, 3),
        "underused_from_ms": under_start, "recovered_at_ms": recovered,
        "underused_ms": None if under_start is None or recovered is None else round(recovered - under_start, 3),
        "f1_rate_before_gbps": round(f1_before, 3), "f1_rate_min_gbps": round(f1_min, 3),
        "f1_marked": fab.flows[0].marked, "f1_cnps": fab.flows[0].cnps,
        "p1_p2_paused_ms": round(fab.paused_time_ns(fab.port("P1", "P2")) / 1e6, 3),
    }


def deadlock_summary(fab: SwitchedFabric) -> dict[str, Any]:
    """Did the ring stop?  Paused ring ports holding bytes, and goodput in the last millisecond."""
    ring = fab.watch
    k = max(1, round(1e6 / fab.sample_ns))
    last = fab.rx_series[-k:]
    moved = sum(sum(r) for r in last)
    stuck = [p.name for p in ring if any(p.queues[q] for q in range(8)) and any(pu > fab.now for pu in p.paused_until)]
    return {"ring_ports_paused_with_data": stuck, "bytes_delivered_last_ms": moved,
            "deadlocked": len(stuck) == len(ring) and moved == 0}


def recovery_time(fab: SwitchedFabric, frac: float = 0.9) -> float | None:
    """After the senders' summed DCQCN rate first falls below ``frac`` of the bottleneck, the time
    (ms from the start) at which it first climbs back to it; None if it never does (or never fell)."""
    cap = fab.watch[0].rate if fab.watch else 40.0
    fell = False
    for t, row in zip(fab.samples, fab.rate_series, strict=True):
        total = sum(row)
        if not fell and total < frac * cap:
            fell = True
        elif fell and total >= frac * cap:
            return t / 1e6
    return None


def incast_costs(fab: SwitchedFabric) -> dict[str, float]:
    """What an incast run cost: queue (mean and max KB after recovery), CNPs, goodput, pauses."""
    rec = recovery_time(fab)
    start = 0
    if rec is not None:
        start = next(i for i, s in enumerate(fab.samples) if s / 1e6 >= rec)
    qs = [row[0] / 1024 for row in fab.queue_series[start:]] or [0.0]
    dur_ns = fab.samples[-1] + fab.sample_ns if fab.samples else 1.0
    return {
        "recovery_ms": rec if rec is not None else float("inf"),
        "queue_mean_kb": sum(qs) / len(qs), "queue_max_kb": max(qs),
        "cnps": float(fab.cnps), "pauses": float(fab.pauses),
        "goodput_gbps": sum(f.rcvd for f in fab.flows) * 8 / dur_ns,
    }
