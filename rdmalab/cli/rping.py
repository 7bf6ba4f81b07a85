"""``rdmalab rping -s|-c [-vVd] [-S size] [-C count] [-I addr] -a addr [-p port]``: rping on the soft engine.

The options are librdmacm's ``rping`` (rdma-core v44).  ``--netdev IFNAME`` makes a soft device on
that interface for this run; without it the device comes from ``rdmalab link`` / ``RDMALAB_LINKS``
(:mod:`rdmalab.tools.rping`, ``docs/interop.md``).
"""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

from rdmalab.cli import Args, Fail, passthrough_parsers

HELP = "librdmacm's rping on the soft engine, connected with its own rdma_cm (a stock rping is the peer)"


def _arguments(s: argparse.ArgumentParser) -> argparse.ArgumentParser:
    s.description = ("rping's ping-pong of RDMA READs and WRITEs over an rdma_cm connection, with the soft "
                     "RoCEv2 engine on real UDP; the peer is the stock rping on kernel rxe or another rdmalab.")
    if not any(a.dest == "help" for a in s._actions):
        s.add_argument("-h", "--help", action="help", help="show this help and exit")
    role = s.add_mutually_exclusive_group()
    role.add_argument("-s", dest="server", action="store_true", help="server side")
    role.add_argument("-c", dest="client", action="store_true", help="client side")
    s.add_argument("-a", dest="addr", help="address (server: to listen on; client: the server's)")
    s.add_argument("-I", dest="source", help="source address to bind to for client")
    s.add_argument("-p", dest="port", type=int, default=7174, help="port (default 7174)")
    s.add_argument("-C", dest="count", type=int, default=0, help="ping count times (default: for ever)")
    s.add_argument("-S", dest="size", type=int, default=64, help="ping data size (default 64)")
    s.add_argument("-v", dest="verbose", action="store_true", help="display ping data to stdout")
    s.add_argument("-V", dest="validate", action="store_true", help="validate ping data")
    s.add_argument("-d", dest="debug", action="store_true", help="debug printfs")
    s.add_argument("-P", dest="persistent", action="store_true",
                   help="persistent server: serve connections one after another")
    s.add_argument("-q", dest="self_qp", action="store_true", help="use self-created, self-modified QP")
    s.add_argument("-t", dest="tos", help=argparse.SUPPRESS)
    s.add_argument("--netdev", help="make a soft device on this network interface for this run "
                                    "(else: the devices of `rdmalab link` / RDMALAB_LINKS)")
    s.add_argument("--transport", choices=["auto", "roce", "iwarp"], default="auto",
                   help="iwarp: connect over TCP and MPA (the peer: rping on kernel siw); auto (default): the "
                        "transport of the device that has the address (a --netdev device is roce unless told)")
    s.add_argument("--mpa-crc", action="store_true",
                   help="iWARP: ask for MPA CRC32c (the C flag of the MPA Request/Reply; siw honours it)")
    s.add_argument("--timeout", type=float, default=120.0,
                   help="seconds without progress before giving up (rping waits for ever; default 120)")
    s.set_defaults(func=run_cli)
    return s


register, parser = passthrough_parsers("rping", HELP, _arguments)


def main_argv(args: Args, out: TextIO) -> int:
    return run_cli(parser().parse_args(list(args.lab_args)), out)


def run_cli(args: argparse.Namespace, out: TextIO) -> int:
    from rdmalab.tools.rping import RpingError, RpingOptions, run
    from rdmalab.verbs.pyverbs_error import PyverbsRDMAError

    if args.tos is not None:
        raise Fail("rping -t (type of service) is not supported by the soft engine: it sends DSCP 0")
    if not (args.server or args.client):
        raise Fail("give -s (server) or -c (client), as rping")
    opts = RpingOptions(server=args.server, addr=args.addr, source=args.source, port=args.port, count=args.count,
                        size=args.size, verbose=args.verbose, validate=args.validate, debug=args.debug,
                        persistent=args.persistent, self_qp=args.self_qp, timeout=args.timeout,
                        transport=args.transport)
    if args.mpa_crc and args.transport == "roce":
        raise Fail("rping: --mpa-crc is an iWARP option (MPA CRC32c); RoCE has the ICRC always")
    if args.mpa_crc and not (args.netdev and args.transport == "iwarp"):
        raise Fail("rping: --mpa-crc goes with the device it makes: --netdev IFNAME --transport iwarp")
    if args.netdev:  # the device a link of type siw (--transport iwarp) or rxe would be, for this run
        from rdmalab.fabric.links import LinkError, use_interface

        siw = args.transport == "iwarp"
        try:
            use_interface(args.netdev, type="siw" if siw else "rxe", poll_wait=0.05,
                          **({"mpa_crc": args.mpa_crc} if siw else {}))
        except LinkError as exc:
            raise Fail(f"rping: {exc}") from None
    try:
        return run(opts, out)
    except (RpingError, PyverbsRDMAError) as exc:
        print(f"rping: {exc}", file=sys.stderr)
        return 1
