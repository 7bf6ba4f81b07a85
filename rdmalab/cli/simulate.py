"""``rdmalab simulate``: run a congestion scenario on the switched fabric and summarise it.

    rdmalab simulate incast|fairness|victim|deadlock|lossy [--senders N] [--rate GBPS] [--duration MS]
                     [--profile paper|mlx5|ns3-rdma] [--set NAME=VALUE ...] [-w FILE] [-T json]

Every flow is an RC QP pair of the soft verbs engine writing RDMA WRITEs.  Prints per flow its
goodput over the second half of the run, the DCQCN rate at the end, marks, CNPs, drops and the
bytes go-back-N resent; per watched egress queue its length statistics and pause time; totals of
marks, CNPs, pauses, drops and resent bytes; for ``lossy`` (PFC off) what the drops cost.  ``-w`` writes the frames of the first watched link to a pcap (slower: every
frame is then built as bytes).  ``--set`` takes DCQCN parameters under their mlx5 names, switch
parameters (kmin, kmax in KB, pmax, buffer in MB, pfc, ecn, pfc_xoff in KB ...) and scenario
knobs (delay_us, cnp_scope, routing ...); ``--set help`` lists them.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, TextIO

from rdmalab.cli import Fail

SCENARIOS = ("incast", "fairness", "victim", "deadlock", "lossy")  # rdmalab.fabric.congestion_scenarios.SCENARIOS


def _settings(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        name, eq, value = item.partition("=")
        if not eq or not name or not value:
            raise Fail(f"--set takes NAME=VALUE, not {item!r}")
        out[name.strip()] = value.strip()
    return out


class _Progress:
    """A one-line progress indicator on stderr for runs that take more than a moment."""

    def __init__(self, stream: TextIO, label: str) -> None:
        self.stream = stream
        self.label = label
        self.last = -1
        self.tty = stream.isatty()

    def __call__(self, frac: float) -> None:
        pct = int(frac * 100)
        if pct == self.last or (not self.tty and pct % 10):
            return
        self.last = pct
        end = "\n" if pct >= 100 or not self.tty else ""
        self.stream.write(f"\r{self.label}: {pct:3d}% of simulated time{end}")
        self.stream.flush()


def run_simulate(args: argparse.Namespace, out: TextIO) -> int:
    from rdmalab.fabric import congestion_scenarios as sc  # lazy: keeps `rdmalab --help` fast
    from rdmalab.verbs.engine.dcqcn import DcqcnParams  # lazy: keeps `rdmalab --help` fast

    settings = _settings(args.set or [])
    if "help" in settings or "help" in (args.set or []):
        out.write("Parameters for --set:\n")
        out.write("  DCQCN (mlx5 names): " + ", ".join(DcqcnParams.names()) + "\n")
        out.write("  switch: " + ", ".join(sc.SWITCH_NAMES) + "\n")
        out.write("  scenario: " + ", ".join(sc.SCENARIO_NAMES) + "\n")
        return 0
    try:
        sc.split_settings(settings, args.scenario)
    except KeyError as err:
        raise Fail(f"unknown --set parameter(s): {err.args[0]} (rdmalab simulate {args.scenario} --set help "
                   "lists the names)") from None
    except ValueError as err:
        raise Fail(f"bad --set value: {err}") from None
    progress = None
    if not args.quiet:
        progress = _Progress(sys.stderr, f"simulate {args.scenario}")
    try:
        res = sc.run_scenario(args.scenario, senders=args.senders, rate=args.rate, duration_ms=args.duration,
                              profile=args.profile, settings=settings, capture=args.write, progress=progress)
    except ValueError as err:
        raise Fail(str(err)) from None
    except OSError as err:
        raise Fail(f"cannot write {args.write}: {err.strerror}") from None
    data = res.to_json()
    if args.T == "json":
        json.dump(data, out, indent=2)
        out.write("\n")
    else:
        _text(data, out)
    return 0


def _text(d: dict[str, Any], out: TextIO) -> None:
    w = out.write
    w(f"{d['scenario']}: {d['duration_ms']:g} ms simulated, profile {d['profile']}, "
      f"{d['events']} events in {d['wall_s']:.2f} s\n")
    w("Flows (goodput over the second half of the run):\n")
    w(f"  {'flow':<28} {'goodput Gb/s':>12} {'rate Gb/s':>10} {'CE marked':>10} {'CNPs':>6} {'drops':>6} "
      f"{'resent KB':>9}\n")
    for f in d["flows"]:
        w(f"  {f['name']:<28} {f['goodput_gbps']:12.3f} {f['rate_gbps']:10.3f} {f['ce_marked']:10d} "
          f"{f['cnps']:6d} {f['drops']:6d} {f['retransmitted_bytes'] / 1024:9.1f}\n")
    w("Egress queues (second half):\n")
    w(f"  {'port':<12} {'mean KB':>9} {'max KB':>9} {'max ever':>9} {'in Kmin..Kmax':>13} {'empty':>6} "
      f"{'marks':>7} {'paused ms':>9}\n")
    for q in d["queues"]:
        w(f"  {q['port']:<12} {q['mean_kb']:9.1f} {q['max_kb']:9.1f} {q['max_all_kb']:9.1f} "
          f"{q['share_in_kmin_kmax']:13.0%} {q['share_empty']:6.0%} {q['marks']:7d} {q['paused_ms']:9.3f}\n")
    w(f"Totals: {d['marks']} ECN marks, {d['cnps']} CNPs, {d['pauses']} PFC pauses, {d['resumes']} resumes, "
      f"{d['drops']} drops, {d['retransmitted_bytes'] / 1024:.1f} KB resent\n")
    if "loss" in d:
        x = d["loss"]
        done = (f"all {x['flows']} flows done at {x['last_done_ms']} ms" if x["last_done_ms"] is not None
                else f"{x['flows_done']} of {x['flows']} flows done")
        w(f"Loss: {x['data_drops']} requests dropped ({x['dropped_kb']:.1f} KB with the rest); go-back-N resent "
          f"{x['retransmitted_packets']} packets ({x['retransmitted_kb']:.1f} KB, {x['retransmitted_share']:.1%} of "
          f"what was sent) after {x['naks']} NAKs and {x['timeouts']} timeouts; {done}, goodput "
          f"{x['goodput_gbps']:.2f} Gb/s; data intact: {'yes' if x['intact'] else 'NO'}\n")
    if "victim" in d:
        v = d["victim"]
        w(f"Victim: F1's DCQCN rate {v['f1_rate_before_gbps']:.2f} Gb/s before the incast, down to "
          f"{v['f1_rate_min_gbps']:.2f}; P1->P2 under 90% of its {v['throughput_before_gbps']:.1f} Gb/s for "
          + (f"{v['underused_ms']} ms" if v["underused_ms"] is not None else "the rest of the run (not recovered)")
          + " (DCQCN-validation reports 16 ms)\n")
    if "deadlock" in d:
        x = d["deadlock"]
        w(f"Deadlock: {'YES' if x['deadlocked'] else 'no'}; ring ports paused with data: "
          f"{', '.join(x['ring_ports_paused_with_data']) or 'none'}; bytes delivered in the last ms: "
          f"{x['bytes_delivered_last_ms']}\n")
    if "captured_frames" in d:
        w(f"Captured {d['captured_frames']} frames\n")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    s = sub.add_parser("simulate", help="run a congestion scenario (ECN, CNPs, DCQCN, PFC) on a switched fabric",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    s.add_argument("scenario", choices=SCENARIOS)
    s.add_argument("--senders", type=int, metavar="N", help="senders (incast/fairness: 2; victim: 15 incast hosts)")
    s.add_argument("--rate", type=float, default=40.0, metavar="GBPS", help="link rate (default 40)")
    s.add_argument("--duration", type=float, metavar="MS", help="simulated time (default per scenario)")
    s.add_argument("--profile", choices=("paper", "mlx5", "ns3-rdma"),
                   help="DCQCN constants (default: ns3-rdma for incast/fairness, paper otherwise)")
    s.add_argument("--set", action="append", metavar="NAME=VALUE", help="a parameter (repeatable; --set help)")
    s.add_argument("-w", "--write", metavar="FILE", help="write the first watched link's frames to a pcap")
    s.add_argument("-T", choices=("text", "json"), default="text", help="output format")
    s.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    s.set_defaults(func=run_simulate)
