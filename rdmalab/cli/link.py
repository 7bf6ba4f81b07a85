"""``rdmalab link``: soft devices on real network interfaces, in the shape of iproute2's ``rdma link``.

::

    rdmalab link add soft0 netdev veth1            # RoCE, as: rdma link add rxe0 type rxe netdev veth0
    rdmalab link add soft0 type rxe netdev veth1   # the same, the type said
    rdmalab link add siw0 type siw netdev veth4    # iWARP, as: rdma link add siw0 type siw netdev veth4
    rdmalab link show                              # link soft0 type rxe netdev veth1 ip 10.77.0.2 ...
    rdmalab link delete siw0

A pyverbs program (imports changed, :mod:`rdmalab.verbs.pyverbs_alias`) then finds ``soft0`` and
``siw0`` with ``get_device_list()`` (and rdma_cm by their addresses) and runs on the engine over real
UDP (rxe) or the kernel's TCP (siw) (:mod:`rdmalab.fabric.links`).
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
    a = s.add_parser("add", help="rdmalab link add NAME [type rxe|siw] netdev IFNAME",
                     description="Make soft device NAME on interface IFNAME: type rxe (the default) speaks RoCEv2 "
                                 "on UDP, as kernel rxe; type siw speaks iWARP on the kernel's TCP, as kernel siw.")
    a.add_argument("name")
    a.add_argument("words", nargs="+", metavar="type TYPE | netdev IFNAME",
                   help="the keywords and their values, as iproute2's rdma link add")
    s.add_parser("show", help="list the links")
    d = s.add_parser("delete", help="rdmalab link delete NAME")
    d.add_argument("name")
    p.set_defaults(func=run_link)


_USAGE = "rdmalab link add NAME [type rxe|siw] netdev IFNAME"


def add_words(words: list[str]) -> dict[str, str]:
    """``type TYPE netdev IFNAME`` (iproute2's order; either order is taken) as ``{"type": ..., "netdev": ...}``;
    the type defaults to rxe.  :class:`Fail` names what is wrong."""
    got: dict[str, str] = {}
    rest = list(words)
    while rest:
        key = rest.pop(0)
        if key not in ("type", "netdev"):
            raise Fail(f"link add: {key!r} is not a keyword of {_USAGE}")
        if key in got:
            raise Fail(f"link add: {key} given twice ({_USAGE})")
        if not rest:
            raise Fail(f"link add: {key} needs a value ({_USAGE})")
        got[key] = rest.pop(0)
    if "netdev" not in got:
        raise Fail(f"link add: which interface? {_USAGE}")
    got.setdefault("type", "rxe")
    return got


def run_link(args: argparse.Namespace, out: TextIO) -> int:
    from rdmalab.fabric import links
    from rdmalab.fabric.udp import CarrierError, interface_ipv4

    cmd = getattr(args, "link_command", None) or "show"
    try:
        if cmd == "add":
            words = add_words(args.words)
            ip = links.add_link(args.name, words["netdev"], words["type"])
            out.write(f"link {args.name} type {words['type']} netdev {words['netdev']} ip {ip}\n")
        elif cmd == "delete":
            links.delete_link(args.name)
        else:
            configured = links.configured()
            for name, link in configured.items():
                try:
                    ip = interface_ipv4(link.netdev)
                except CarrierError as exc:
                    ip = f"? ({exc})"
                out.write(f"link {name} type {link.type} netdev {link.netdev} ip {ip}\n")
            src = "RDMALAB_LINKS" if "RDMALAB_LINKS" in os.environ else str(links.link_file())
            out.write(f"({len(configured)} link{'s' if len(configured) != 1 else ''}; from {src})\n")
    except links.LinkError as exc:
        raise Fail(str(exc)) from None
    return 0
