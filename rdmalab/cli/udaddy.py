"""``rdmalab udaddy [-s server] [-b bind] [-C count] [-S size] [-p port]``: udaddy on the soft engine.

librdmacm's ``udaddy`` options (``-c``, ``-t``, ``-f``, ``-P ipoib`` are refused by name); ``--netdev
IFNAME`` makes a soft device on that interface for this run, else ``rdmalab link`` / ``RDMALAB_LINKS``
give it (:mod:`rdmalab.tools.udaddy`).
"""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

from rdmalab.cli import Args, Fail, passthrough_parsers

HELP = "librdmacm's udaddy (SIDR, then UD SENDs with immediate) on the soft engine"


def _arguments(s: argparse.ArgumentParser) -> argparse.ArgumentParser:
    s.description = ("udaddy's service ID resolution (SIDR) and UD SENDs with immediate over the soft RoCEv2 "
                     "engine on real UDP; the peer is the stock udaddy on kernel rxe or another rdmalab.")
    if not any(a.dest == "help" for a in s._actions):
        s.add_argument("-h", "--help", action="help", help="show this help and exit")
    s.add_argument("-s", dest="server", help="server address (the client's target); without it: be the server")
    s.add_argument("-b", dest="bind", help="bind address")
    s.add_argument("-C", dest="count", type=int, default=10, help="message count (default 10)")
    s.add_argument("-S", dest="size", type=int, default=100, help="message size (default 100)")
    s.add_argument("--port", type=int, default=7174, help="port (udaddy's is fixed: 7174)")
    for flag in ("-c", "-t", "-f", "-P", "-p"):
        s.add_argument(flag, dest=f"unsupported_{flag[1]}", help=argparse.SUPPRESS)
    s.add_argument("--check", action="store_true", help="fill the messages with a pattern and compare what arrives")
    s.add_argument("--netdev", help="make a soft device on this network interface for this run")
    s.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the messages (default 60)")
    s.set_defaults(func=run_cli)
    return s


register, parser = passthrough_parsers("udaddy", HELP, _arguments)


def main_argv(args: Args, out: TextIO) -> int:
    return run_cli(parser().parse_args(list(args.lab_args)), out)


_WHY = {"c": "several connections", "t": "a type of service", "f": "address formats other than IP",
        "P": "port spaces other than UDP", "p": "port spaces other than UDP"}


def run_cli(args: argparse.Namespace, out: TextIO) -> int:
    from rdmalab.tools.udaddy import UdaddyError, UdaddyOptions, run
    from rdmalab.verbs.pyverbs_error import PyverbsRDMAError

    for flag, why in _WHY.items():
        value = getattr(args, f"unsupported_{flag}")
        if value is not None and not (flag == "P" and value.lower() == "udp") and not (flag == "c" and value == "1"):
            raise Fail(f"udaddy -{flag} ({why}) is not supported by rdmalab's udaddy")
    if args.netdev:
        from rdmalab.fabric.links import LinkError, use_interface

        try:
            use_interface(args.netdev, poll_wait=0.05)
        except LinkError as exc:
            raise Fail(str(exc)) from None
    opts = UdaddyOptions(server_addr=args.server, bind_addr=args.bind, port=args.port, count=args.count,
                         size=args.size, check=args.check, timeout=args.timeout)
    try:
        return run(opts, out)
    except (UdaddyError, PyverbsRDMAError) as exc:
        print(f"udaddy: {exc}", file=sys.stderr)
        return 1
