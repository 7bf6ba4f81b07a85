"""``rdmalab link``: soft devices on real network interfaces, in the shape of iproute2's ``rdma link``.

::

    rdmalab link add soft0 netdev veth1     # as: rdma link add rxe0 type rxe netdev veth0
    rdmalab link show                       # link soft0 netdev veth1 ip 10.77.0.2 (state file: ...)
    rdmalab link delete soft0

A pyverbs program (imports changed, :mod:`rdmalab.verbs.pyverbs_alias`) then finds ``soft0`` with
``get_device_list()`` and runs on the engine over real UDP (:mod:`rdmalab.fabric.links`).
"""

from __future__ import annotations

import argparse
import os
from typing import TextIO

from rdmalab.cli import Fail


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("link", help="bind a soft device to a network interface (as `rdma link add ... netdev ...`)",
                       description="Bind a soft verbs device to a real network interface, so that pyverbs programs "
                                   "find it with get_device_list() and run on the engine over RoCEv2/UDP.")
    s = p.add_subparsers(dest="link_command", metavar="add|show|delete")
    a = s.add_parser("add", help="rdmalab link add NAME netdev IFNAME")
    a.add_argument("name")
    a.add_argument("netdev_kw", metavar="netdev", choices=["netdev"])
    a.add_argument("netdev")
    s.add_parser("show", help="list the links")
    d = s.add_parser("delete", help="rdmalab link delete NAME")
    d.add_argument("name")
    p.set_defaults(func=run_link)


def run_link(args: argparse.Namespace, out: TextIO) -> int:
    from rdmalab.fabric import links
    from rdmalab.fabric.udp import CarrierError, interface_ipv4

    cmd = getattr(args, "link_command", None) or "show"
    try:
        if cmd == "add":
            ip = links.add_link(args.name, args.netdev)
            out.write(f"link {args.name} netdev {args.netdev} ip {ip}\n")
        elif cmd == "delete":
            links.delete_link(args.name)
        else:
            configured = links.read_links()
            for name, netdev in configured.items():
                try:
                    ip = interface_ipv4(netdev)
                except CarrierError as exc:
                    ip = f"? ({exc})"
                out.write(f"link {name} netdev {netdev} ip {ip}\n")
            src = "RDMALAB_LINKS" if "RDMALAB_LINKS" in os.environ else str(links.link_file())
            out.write(f"({len(configured)} link{'s' if len(configured) != 1 else ''}; from {src})\n")
    except links.LinkError as exc:
        raise Fail(str(exc)) from None
    return 0
