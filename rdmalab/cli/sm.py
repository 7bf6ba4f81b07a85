"""``rdmalab sm``: our own subnet manager, run against an ibsim-protocol simulator.

::

    tail -f /dev/null | ibsim -s net &              # or: rdmalab ibsim net &
    rdmalab sm                                       # as SIM_HOST (default: the simulator's first node)
    rdmalab sm --node Hca1 -w sweep.pcap --ladder   # every SMP in a capture, and listed
    rdmalab sm --serve 60                            # then answer sminfo and saquery for a minute

It sweeps the subnet (:mod:`rdmalab.fabric.ibsm`), prints each port's LID and each switch's linear
forwarding table, and with ``--serve`` stays on as master, answering SMInfo and PathRecord queries
(:mod:`rdmalab.fabric.ibsm_sa`).  The simulator is found as ``ibsim-run`` programs find it:
``IBSIM_SOCKNAME`` (or ``--sockname``), ``IBSIM_SERVER_NAME``/``IBSIM_SERVER_PORT``.
"""

from __future__ import annotations

import argparse
import threading
from typing import TextIO

from rdmalab.cli import Fail


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("sm", help="run rdmalab's own subnet manager against ibsim (LIDs, forwarding tables)",
                       description="Sweep a simulated InfiniBand subnet (stock `ibsim -s NETFILE` or `rdmalab ibsim`) "
                                   "with directed-route SMPs, assign LIDs, compute min-hop forwarding tables, "
                                   "program the switches, bring the ports to Active, and print the result.")
    p.add_argument("--node", default=None, help="the node the SM runs on (default: SIM_HOST, else the simulator's "
                                                "first node)")
    p.add_argument("--sockname", default=None, help="the simulator's socket base name (default: IBSIM_SOCKNAME or sim)")
    p.add_argument("--timeout", type=float, default=2.0, help="seconds to wait for each answer (default 2)")
    p.add_argument("-w", "--write", metavar="FILE", help="write every SMP (and SA MAD) to this capture (ERF records of "
                                                        "native InfiniBand; tshark decodes them)")
    p.add_argument("--ladder", action="store_true", help="list every MAD: step, from, to, what")
    p.add_argument("--serve", type=float, default=0.0, metavar="SECONDS",
                   help="stay master this long, answering SMInfo and PathRecord queries")
    p.set_defaults(func=run_sm)


def run_sm(args: argparse.Namespace, out: TextIO) -> int:
    # the fabric is imported when the command runs (the cli package's rule: `rdmalab --help` loads no layer)
    from rdmalab.fabric.ibsim_client import IBSimClient, IBSimError
    from rdmalab.fabric.ibsm import SMError, SubnetManager
    from rdmalab.fabric.ibsm_sa import serve

    if args.timeout <= 0:
        raise Fail(f"sm: --timeout must be a positive number of seconds, not {args.timeout}")
    try:
        client = IBSimClient(args.node, sockname=args.sockname, issm=True, timeout=args.timeout)
    except IBSimError as err:
        raise Fail(f"sm: {err}") from None
    with client:
        sm = SubnetManager(client)
        try:
            sm.run()
        except SMError as err:
            raise Fail(f"sm: {err}") from None
        assert sm.sm_port is not None
        if sm.masters:
            out.write(f"SM on {client.node} port {sm.sm_port.num}: {sm.state_name}, {len(sm.nodes)} nodes, "
                      f"{len(sm.events)} SMPs; the master is already port GUID "
                      f"{', '.join(f'0x{g:016x}' for g in sm.masters)}: nothing changed\n")
            return 0
        out.write(f"SM on {client.node} port {sm.sm_port.num}, LID {sm.sm_port.lid}: {sm.state_name}, "
                  f"{len(sm.nodes)} nodes, {len(sm.events)} SMPs\n\nLIDs\n")
        for lid, port in sorted(sm.lids.items()):
            node = sm.nodes[port.node_guid]
            out.write(f"  {lid:5d}  {'Switch' if node.is_switch else 'CA':6s}  port GUID 0x{port.guid:016x}  "
                      f"{node.name}/{port.num}\n")
        for node in sm.nodes.values():
            if node.is_switch:
                out.write(f"\nLinear forwarding table of {node.name} (LID {node.lid})\n")
                for lid, out_port, dest in sm.lft_table(node):
                    out.write(f"  LID {lid:5d} -> port {out_port:3d}   {dest}\n")
        if args.serve > 0:
            stop = threading.Event()
            timer = threading.Timer(args.serve, stop.set)
            timer.start()
            try:
                answered = serve(sm, client, stop)
            except KeyboardInterrupt:
                answered = 0
            finally:
                stop.set()
                timer.cancel()
            out.write(f"\nanswered {answered} requests\n")
        if args.ladder:
            out.write("\n")
            for step, src, dst, what in sm.ladder():
                out.write(f"  {step:5d}  {src:>12s} -> {dst:<12s} {what}\n")
        if args.write:
            try:
                n = sm.write_capture(args.write)
            except OSError as err:
                raise Fail(f"sm: cannot write {args.write}: {err.strerror or err}") from None
            out.write(f"\n{n} packets written to {args.write}\n")
    return 0
