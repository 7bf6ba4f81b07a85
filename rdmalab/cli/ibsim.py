"""``rdmalab ibsim NETFILE``: an InfiniBand subnet served with ibsim's client protocol (:mod:`rdmalab.fabric.ibsim_server`).

The stock OpenSM and infiniband-diags run against it under ``ibsim-run`` as against ``ibsim -s NETFILE``.
"""

from __future__ import annotations

import argparse
import os
import signal
from typing import TextIO

from rdmalab.cli import Fail

EPILOG = """\
The subnet is up at once (as ibsim -s); it runs until interrupted (Ctrl-C, SIGTERM).
Then, for example:
  SIM_HOST=Hca1 ibsim-run opensm -e -f osm.log -s 0 &
  SIM_HOST=Hca1 ibsim-run ibnetdiscover
Environment: IBSIM_SOCKNAME (the socket base name, default "sim"), IBSIM_SERVER_PORT (the UDP port in remote
mode, default 7070), the same variables the clients read.
"""


def run_ibsim(args: argparse.Namespace, out: TextIO) -> int:
    # lazy: keeps `rdmalab --help` fast (the fabric layer is loaded only by this command)
    from rdmalab.fabric.ibsim_server import CaptureFileError, serve_netfile
    from rdmalab.fabric.ibsubnet_netfile import NetFileError

    port = None
    if args.remote or args.port is not None:
        env_port = os.environ.get("IBSIM_SERVER_PORT")
        try:
            port = args.port if args.port is not None else int(env_port) if env_port else 7070
        except ValueError:
            raise Fail(f"ibsim: IBSIM_SERVER_PORT={env_port!r} is not a port number") from None
        if not 0 < port < 65536 - 11:
            raise Fail(f"ibsim: port {port} is not a UDP port (it and the 10 after it are used)")

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    try:
        return serve_netfile(args.netfile, args.sockname, port, args.verbose, out, capture=args.write)
    except (NetFileError, CaptureFileError) as exc:
        raise Fail(f"ibsim: {exc}") from None
    except OSError as exc:
        raise Fail(f"ibsim: cannot open the sockets: {exc.strerror or exc} (is another ibsim using the same "
                   "IBSIM_SOCKNAME or port?)") from None


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    s = sub.add_parser("ibsim", help="an InfiniBand subnet for OpenSM and infiniband-diags (ibsim's protocol)",
                       description="Serve the subnet of an ibsim net file (ibsim's format) with ibsim's client "
                                   "protocol, so that programs under ibsim-run (OpenSM, ibnetdiscover, smpquery, "
                                   "perfquery ...) manage it.",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    s.add_argument("netfile", help="the topology, in ibsim's net file format")
    s.add_argument("--sockname", metavar="NAME",
                   help="socket base name (default: $IBSIM_SOCKNAME, else \"sim\")")
    s.add_argument("--remote", action="store_true",
                   help="serve UDP (ibsim -r) on $IBSIM_SERVER_PORT or 7070 instead of unix sockets")
    s.add_argument("--port", type=int, metavar="N", help="the UDP port for --remote (implies --remote)")
    s.add_argument("-w", "--write", metavar="FILE",
                   help="write every MAD the programs send and receive to FILE, as native IB packets in ERF "
                        "records (pcapng if FILE ends in .pcapng, else pcap; tshark decodes them)")
    s.add_argument("-v", "--verbose", action="store_true", help="log clients and dropped messages to stderr")
    s.set_defaults(func=run_ibsim)
