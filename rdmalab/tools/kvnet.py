"""The key-value store (:mod:`rdmalab.tools.kv`) over UDP: a server and a client in two processes.

``python -m rdmalab.tools.kvnet serve --ip 10.0.0.1`` runs a :class:`~rdmalab.tools.kv.KvServer` on the
soft engine over RoCEv2/UDP (:class:`~rdmalab.fabric.udp.UdpFabric`: needs the raw socket of root), and
``python -m rdmalab.tools.kvnet client 10.0.0.1 --ip 10.0.0.2`` a :class:`~rdmalab.tools.kv.KvClient`
that runs a workload against it and prints one JSON line of results.  The peer of either may be any RoCEv2
device that speaks the same out-of-band exchange and layout (the live test's client is pyverbs on the
kernel's rxe: ``tests/live/kv_rxe_client.py``).

The out-of-band exchange, over TCP, one JSON object per line: the client sends its address
(``gid`` as text, ``rc_qpn``, ``psn``, ``ud_qpn``), the server answers with :meth:`KvServer.accept`'s
(``gid`` as text); the client ends with ``{"done": true}`` and the server answers with its counters.

A concurrent writer: ``serve --hot KEY --churn-us P --split-us S`` makes the server's CPU rewrite ``KEY``
every ``P`` µs (wall clock), its value alternately ``A`` and ``B`` bytes filling the value, each bucket
written in two halves ``S`` µs apart, so that READs of it can be torn.
"""

from __future__ import annotations

import argparse
import json
import random
import select
import socket
import sys
import time
from statistics import mean
from typing import Any

from rdmalab.fabric.udp import UdpFabric
from rdmalab.tools.kv import KvClient, KvError, KvServer, Layout
from rdmalab.tools.oob import OOBError, open_listener
from rdmalab.verbs.addr import GID
from rdmalab.verbs.device import Context

PORT = 18750


def _to_json(info: dict[str, Any]) -> bytes:
    out = {k: (v.gid if isinstance(v, GID) else v) for k, v in info.items()}
    return json.dumps(out).encode() + b"\n"


def _from_json(line: bytes, where: str) -> dict[str, Any]:
    try:
        info = json.loads(line)
    except ValueError:
        raise OOBError(f"{where}: not a JSON line: {line[:80]!r}") from None
    if not isinstance(info, dict):
        raise OOBError(f"{where}: a JSON {type(info).__name__}, not an object")
    if "gid" in info:
        info["gid"] = GID(info["gid"])
    return info


def _readline(f: Any, where: str) -> bytes:
    line: bytes = f.readline()
    if not line:
        raise OOBError(f"{where}: the peer closed the connection")
    return line


def hot_values(layout: Layout) -> tuple[bytes, bytes]:
    """The two values the concurrent writer alternates."""
    return b"A" * layout.value_size, b"B" * layout.value_size


def serve(args: argparse.Namespace) -> dict[str, Any]:
    fab = UdpFabric(ip=args.ip, poll_wait=0.002)
    server = KvServer(Context(name=fab.device.name, fabric=fab), Layout(args.buckets, args.value_size),
                      poll_ns=args.poll_us * 1000, service_ns=0)
    lsock = open_listener(args.port, family=socket.AF_INET)
    print(f"kv server on {args.ip}, waiting on TCP port {args.port}", flush=True)
    lsock.settimeout(args.timeout)
    conn, _ = lsock.accept()
    f = conn.makefile("rwb")
    info = server.accept(_from_json(_readline(f, "the client's address"), "the client's address"))
    f.write(_to_json(info))
    f.flush()
    server.start()
    churn = {"puts": 0}
    if args.hot:
        hot = args.hot.encode()
        a, b = hot_values(server.layout)
        server.put_local(hot, a)

        def rewrite(_: Any) -> None:
            server.put_local(hot, b if churn["puts"] % 2 == 0 else a, split_ns=args.split_us * 1000)
            churn["puts"] += 1
            fab.call_later(args.churn_us * 1000, rewrite)

        fab.call_later(args.churn_us * 1000, rewrite)
    deadline = time.monotonic() + args.timeout
    done = False
    while not done:
        if time.monotonic() > deadline:
            raise KvError(f"kv server: no 'done' from the client within {args.timeout} s")
        fab.step(0.005)
        ready, _, _ = select.select([conn], [], [], 0)
        if ready:
            done = bool(_from_json(_readline(f, "the client's 'done'"), "the client's 'done'").get("done"))
    server.stop()
    result = {"served": server.served, "hot_puts": churn["puts"]}
    f.write(json.dumps(result).encode() + b"\n")
    f.flush()
    conn.close()
    fab.close()
    return result


def run_client(args: argparse.Namespace) -> dict[str, Any]:
    fab = UdpFabric(ip=args.ip, poll_wait=0.002)
    client = KvClient(Context(name=fab.device.name, fabric=fab), window=args.window, max_retries=args.max_retries)
    deadline = time.monotonic() + args.timeout
    while True:
        try:
            conn = socket.create_connection((args.server, args.port), timeout=args.timeout)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    f = conn.makefile("rwb")
    f.write(_to_json(client.address()))
    f.flush()
    client.attach(_from_json(_readline(f, "the server's answer"), "the server's answer"))
    r = random.Random(args.seed)
    want: dict[bytes, bytes] = {}
    out: dict[str, Any] = {"puts": 0, "wrong": [], "read_round_trips": [], "read_us": [], "rpc_us": []}
    for _ in range(args.puts):
        k = b"key%d" % r.randrange(max(1, args.puts // 2))
        v = bytes(r.randrange(0x21, 0x7F) for _ in range(r.randrange(1, client.layout.value_size + 1)))
        client.put_rpc(k, v)
        want[k] = v
        out["puts"] += 1
    for k, v in want.items():
        g, rp = client.get_read(k), client.get_rpc(k)
        if g.value != v or rp.value != v:
            out["wrong"].append([k.decode(), v.decode(), None if g.value is None else g.value.decode(),
                                 None if rp.value is None else rp.value.decode()])
        out["read_round_trips"].append(g.round_trips)
        out["read_us"].append(g.ns / 1000)
        out["rpc_us"].append(rp.ns / 1000)
    out["absent"] = [client.get_read(b"absent").value, client.get_rpc(b"absent").value]
    if args.hot:
        hot = args.hot.encode()
        whole = hot_values(client.layout)
        for verify in (False, True):
            torn = retries = 0
            for _ in range(args.reads):
                g = client.get_read(hot, verify=verify)
                torn += g.value not in whole
                retries += g.retries
            out[f"hot_{'checked' if verify else 'unchecked'}"] = {"reads": args.reads, "torn_returned": torn,
                                                                    "retries": retries}
    f.write(b'{"done": true}\n')
    f.flush()
    out["server"] = json.loads(_readline(f, "the server's counters"))
    conn.close()
    fab.close()
    for key in ("read_us", "rpc_us"):
        out[key] = round(mean(out[key]), 1) if out[key] else None
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m rdmalab.tools.kvnet", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="role", required=True)
    s = sub.add_parser("serve", help="run the store's server")
    c = sub.add_parser("client", help="run a workload against a server, print one JSON line")
    c.add_argument("server", help="the server's IPv4 address (TCP, for the exchange)")
    for q in (s, c):
        q.add_argument("--ip", required=True, help="this side's IPv4 address (its RoCEv2 device)")
        q.add_argument("-p", "--port", type=int, default=PORT, help=f"TCP port of the exchange (default {PORT})")
        q.add_argument("--hot", default="", help="the key a concurrent writer rewrites (both sides must agree)")
        q.add_argument("--timeout", type=float, default=60.0, help="seconds before giving up")
    s.add_argument("--buckets", type=int, default=256)
    s.add_argument("--value-size", type=int, default=36)
    s.add_argument("--poll-us", type=int, default=20, help="the server CPU's polling period (µs)")
    s.add_argument("--churn-us", type=int, default=1500, help="the concurrent writer's period (µs)")
    s.add_argument("--split-us", type=int, default=300, help="time between a rewrite's two halves (µs)")
    c.add_argument("--puts", type=int, default=40, help="PUTs by RPC of random keys, then GETs of each both ways")
    c.add_argument("--reads", type=int, default=100, help="GETs by READs of the hot key, unchecked and checked")
    c.add_argument("--window", type=int, default=1, help="buckets per READ")
    c.add_argument("--seed", type=int, default=1)
    c.add_argument("--max-retries", type=int, default=10_000,
                   help="READs of a torn bucket in a row before giving up (a torn bucket lasts --split-us)")
    args = p.parse_args(argv)
    if args.role == "serve" and args.hot and args.churn_us <= args.split_us:
        p.error(f"--churn-us {args.churn_us} must exceed --split-us {args.split_us}")
    try:
        result = serve(args) if args.role == "serve" else run_client(args)
    except (KvError, OOBError, OSError) as exc:
        print(f"kv {args.role}: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
