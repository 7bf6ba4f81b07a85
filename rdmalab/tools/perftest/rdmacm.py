"""``-R``: perftest's rdma_cm mode (``create_rdma_cm_connection``, ``rdma_client_connect``,
``rdma_server_connect``, ``ctx_xchg_data_rdma`` in ``src/perftest_communication.c``): the control
connection that carries the exchange (:class:`_Control`), the data QP's own connection, the
device ``-R`` uses (RoCE or iWARP), and the end of both connections (:func:`_linger`,
:func:`_disconnect`).  The package's docstring (:mod:`rdmalab.tools.perftest`) tells the sequence.
"""

from __future__ import annotations

import itertools
import random
import time
from typing import IO, Any

from rdmalab.fabric.links import LinkError, use_interface
from rdmalab.tools.oob import PerfDest
from rdmalab.tools.perftest.credits import _Credits
from rdmalab.tools.perftest.exchange import DEST, GID_INDEX, PAGE, _mtu, _versions, encode_dest
from rdmalab.tools.perftest.options import ATOMIC_IWARP, OUT_READS, PerftestError, PerftestOptions, Rejected
from rdmalab.tools.perftest.report import PerftestResult
from rdmalab.tools.perftest.session import _session
from rdmalab.tools.perftest.traffic import _data_mr
from rdmalab.verbs import enums as e
from rdmalab.verbs.cm_enums import RAI_PASSIVE, rdma_cm_event_type
from rdmalab.verbs.cmid import CMID, AddrInfo, CMEvent, CMEventChannel, ConnParam, event_str, unreachable_text
from rdmalab.verbs.cmstate import CMEventError, owner, rejection_text, wait_event
from rdmalab.verbs.cq import CQ
from rdmalab.verbs.device import _fabric, get_device_list, is_iwarp
from rdmalab.verbs.mr import MR
from rdmalab.verbs.pyverbs_error import PyverbsRDMAError
from rdmalab.verbs.qp import QP, QPCap, QPInitAttr
from rdmalab.verbs.wr import SGE, RecvWR, SendWR
from rdmalab.wire.cm import cm_timeout_seconds
from rdmalab.wire.ib import mtu_bytes as mtu_bytes_of  # (mtu_bytes: the name of a local below)

EV = rdma_cm_event_type
CM_RETRIES = 10  # rdma_cm_client_connection: max_retries, 100 ms apart (the least we try: _connect_data)


class _Control:
    """perftest's control connection with ``-R`` (create_comm_struct, rdma_{client,server}_connect): an RC QP
    of one send and one receive on an rdma_cm connection, every exchange a signalled SEND of exactly
    the field's size, each receive posted again once taken (rdma_read_data/rdma_write_data).  It has
    :class:`rdmalab.tools.oob.Channel`'s ``exchange``, so the TCP mode's sequence runs on it unchanged."""

    RECV, SEND = 0, 1

    def __init__(self, cmid: CMID, timeout: float) -> None:
        assert cmid.ctx is not None and cmid.pd is not None and cmid.device is not None
        self.cmid, self.timeout = cmid, timeout
        self.fab: Any = cmid.device.carrier
        # a CQ each for sends and receives, as perftest's (a SEND verb context has a recv_cq of its own):
        # the peer's next message may complete before the ACK of ours does
        self.scq, self.rcq = CQ(cmid.ctx, 2), CQ(cmid.ctx, 2)
        cmid.create_qp(QPInitAttr(qp_type=e.IBV_QPT_RC, scq=self.scq, rcq=self.rcq,
                                  cap=QPCap(max_send_wr=1, max_recv_wr=1, max_send_sge=1, max_recv_sge=1)))
        assert cmid.qp is not None
        self.qp = cmid.qp
        self.mr = MR(cmid.pd, 2 * DEST.size, e.IBV_ACCESS_LOCAL_WRITE)
        self.pump: Any = None  # what oob.Channel has; the waits here step the engine themselves
        self.last = False  # the exchange under way is the session's last (ctx_close_connection's)
        self._post_recv()

    def _post_recv(self) -> None:
        self.qp.post_recv(RecvWR(wr_id=self.RECV, num_sge=1, sg=[SGE(self.mr.buf, DEST.size, self.mr.lkey)]))

    def peer_left(self) -> bool:
        """Whether the peer has disconnected either connection: the channel is the session's alone,
        and perftest disconnects the data connection first (``destroy_ctx``), the control one at its
        exit; a perftest client waits for the data connection's DISCONNECTED before it exits."""
        ch = self.cmid._channel
        return ch is not None and any(ev.kind == EV.RDMA_CM_EVENT_DISCONNECTED for ev in ch.queue)

    def _await(self, send: str | None, recv: str | None) -> Any:
        """Until our SEND has completed (``send``: what we are doing, in words) and the peer's next
        message has come (``recv``, likewise; its completion returned).  A peer that disconnects
        meanwhile ends the wait with an error, except where only the ACK of our SEND is missing and
        the peer surely had the SEND: its answer came (it answers only what it has received), or ours
        was the session's last message (perftest goes on to ``destroy_ctx`` once it has it, after
        ``ctx_close_connection``).  That ACK was lost; waiting on would only meet the peer's
        timeouts (its DREQ unanswered) or its exit."""
        start = time.monotonic()
        seen = self.fab.io_handled
        got = None
        while True:
            for doing, cq, wr_id in ((send, self.scq, self.SEND), (recv, self.rcq, self.RECV)):
                if doing is None:
                    continue
                n, wcs = cq.poll(1)
                if not n:
                    continue
                wc = wcs[0]
                if wc.status != e.IBV_WC_SUCCESS:
                    raise PerftestError(f"the control connection failed while {doing}: completion status "
                                        f"{wc.status} ({e.ibv_wc_status_str(wc.status)})")
                if wc.wr_id != wr_id:
                    raise PerftestError(f"the control connection: a completion of work request {wc.wr_id} came "
                                        f"while {doing}")
                if wr_id == self.SEND:
                    send = None
                else:
                    recv, got = None, wc
            if send is None and recv is None:
                return got
            doing = send or recv
            if self.peer_left():
                if recv is None and (got is not None or self.last):
                    return got
                raise PerftestError(f"the peer disconnected (its DREQ came) while {doing}")
            if time.monotonic() - start > self.timeout:
                raise PerftestError(f"nothing came from the peer for {self.timeout:.0f} s while {doing}")
            self.fab.step(0.01)
            if self.fab.io_handled != seen:  # the peer is still sending (a long -a run): not idle
                start, seen = time.monotonic(), self.fab.io_handled

    def _post_send(self, data: bytes) -> None:
        self.mr.write(data, len(data), DEST.size)
        self.qp.post_send(SendWR(wr_id=self.SEND, opcode=e.IBV_WR_SEND, num_sge=1,
                                 sg=[SGE(self.mr.buf + DEST.size, len(data), self.mr.lkey)],
                                 send_flags=e.IBV_SEND_SIGNALED))

    def _take(self, wc: Any, size: int, what: str) -> bytes:
        if wc.byte_len != size:
            raise PerftestError(f"the peer sent {wc.byte_len} bytes where perftest's exchange has {what} "
                                f"({size} bytes): is it perftest 4.5 with -R, and the same test?")
        data = bytes(self.mr.read(size, 0))
        self._post_recv()
        return data

    def exchange(self, mine: bytes, size: int, client: bool, what: str) -> bytes:
        """ctx_xchg_data_rdma: the client sends first, the server receives first."""
        if client:
            self._post_send(mine)
            return self._take(self._await(f"sending ours for {what}", f"waiting for {what}"), size, what)
        got = self._take(self._await(None, f"waiting for {what}"), size, what)
        self._post_send(mine)
        self._await(f"answering {what}", None)
        return got

    def close(self) -> None:
        pass


def _is(a: Any, b: Any) -> bool:
    return owner(a) is owner(b)


def _event(ch: CMEventChannel, cmid: CMID | None, kinds: tuple[int, ...], what: str, where: str, timeout: float,
           listen: CMID | None = None) -> Any:
    """The next event of ``cmid`` (or a CONNECT_REQUEST on ``listen``); a failure in words (REJ reason, retries)."""
    try:
        return wait_event(ch, cmid, kinds, what, timeout_ms=int(timeout * 1000), listen=listen,
                          skip=(EV.RDMA_CM_EVENT_TIMEWAIT_EXIT,))
    except CMEventError as exc:
        ev = exc.event
        if ev.kind == EV.RDMA_CM_EVENT_REJECTED:
            raise Rejected(f"{what}: rejected by {where}: {rejection_text(ev.status)}") from None
        if ev.kind == EV.RDMA_CM_EVENT_UNREACHABLE:
            raise PerftestError(f"{what}: {where} is unreachable: {unreachable_text(ev.info)}") from None
        raise PerftestError(f"{what}: got {event_str(ev.kind)} (status {ev.status}) from {where}") from None
    except PyverbsRDMAError as exc:  # its message names what it waited for
        raise PerftestError(str(exc)) from None


def _cm_device(opts: PerftestOptions) -> Any:
    """The soft device rdma_cm will use: one made on ``-d NETDEV`` for this run (iWARP with
    ``transport="iwarp"``: :mod:`rdmalab.fabric.tcpkernel`), else the linked devices."""
    if opts.mpa_crc and not (opts.ifname and opts.transport == "iwarp"):
        raise PerftestError("--mpa-crc goes with the device it makes: -d NETDEV --transport iwarp")
    if opts.ifname:  # the device a link of type siw (transport iwarp) or rxe would be, for this run
        siw = opts.transport == "iwarp"
        extra: dict[str, Any] = {"mpa_crc": opts.mpa_crc} if siw else {"pcap": opts.pcap}
        try:
            return use_interface(opts.ifname, type="siw" if siw else "rxe", poll_wait=0.0,
                                 seed=random.SystemRandom().getrandbits(32), **extra)
        except LinkError as exc:
            raise PerftestError(str(exc)) from None
    try:
        devs = get_device_list()
    except PyverbsRDMAError as exc:
        raise PerftestError(str(exc)) from None
    linked = [d for d in _fabric(None).devices.values() if d.ifname is not None]
    if not linked:
        names = ", ".join(d.name.decode() for d in devs) or "none"
        raise PerftestError(f"-R needs a soft device on a network interface: give -d NETDEV, or link one with "
                            f"`rdmalab link add soft0 netdev IFNAME` (or RDMALAB_LINKS=soft0=IFNAME); devices now: {names}")
    fab = linked[0].carrier
    if opts.transport == "iwarp" and not is_iwarp(fab.device):
        raise PerftestError(f"--transport iwarp: the linked device {fab.device.name} is RoCE; give -d NETDEV to make "
                            "a soft iWARP device on that interface")
    if opts.pcap:
        fab.write_pcap(opts.pcap)
    return fab


def _run_cm(opts: PerftestOptions, out: IO[str], client: bool, sizes: list[int]) -> PerftestResult:
    """``-R``: the exchange on a control rdma_cm connection, the data QP on a second one (both to ``port``)."""
    fab = _cm_device(opts)
    verb = opts.verb
    iwarp = is_iwarp(fab.device)
    if iwarp and verb == "atomic":
        raise PerftestError(ATOMIC_IWARP)
    out_reads = OUT_READS if verb in ("read", "atomic") else 1  # check_link: ctx_set_out_reads, else 1
    ch = CMEventChannel()
    where = f"{opts.server}:{opts.port}" if client else f"port {opts.port}"
    ids: list[CMID] = []
    listener: CMID | None = None
    try:
        # ------------------------------------------------------------ the control connection
        # conn_param 0/0: the exchange's parameters say SEND whatever the test (create_comm_struct)
        ctrl_param = ConnParam(resources=0, depth=0, retry=7, rnr_retry=7)
        if client:
            assert opts.server is not None
            cid = _resolve(ch, opts.server, opts.port, opts.timeout)
            ids.append(cid)
            ctrl = _Control(cid, opts.timeout)
            cid.connect(ctrl_param)
            # no timeout of ours: the CM ends the attempt itself (REJ, or UNREACHABLE after its retries)
            _event(ch, cid, (EV.RDMA_CM_EVENT_ESTABLISHED,), "the control QP's connection", where, 1e9)
        else:
            listener = CMID(ch)
            try:
                listener.bind_addr(AddrInfo(src="0.0.0.0", src_service=opts.port, flags=RAI_PASSIVE))
                listener.listen(1)
            except PyverbsRDMAError as exc:
                raise PerftestError(f"rdma_bind_addr/rdma_listen on port {opts.port}: {exc}") from None
            req = _event(ch, None, (), "the client's control connection", where, 1e9, listen=listener)
            cid = _adopt(ch, req, listener)
            ids.append(cid)
            ctrl = _Control(cid, opts.timeout)
            cid.accept(ctrl_param)  # perftest's server sends the REP and goes on (no wait for the RTU)
        if verb == "write":
            time.sleep(1)  # write_bw.c: sleep(1) after establish_connection
        _versions(ctrl, client)
        curr = _mtu(ctrl, client, opts, fab.device.active_mtu)
        # ------------------------------------------------------------ the data connection
        zero = PerfDest(0, 0, 0, 0, 0, 0, bytes(16))
        ctrl.exchange(encode_dest(zero, 0), DEST.size, client, "the key record before the data connection")
        data_param = ConnParam(resources=out_reads if out_reads > 1 else 0, depth=out_reads if out_reads > 1 else 0,
                               retry=7, rnr_retry=7)
        if client:
            assert opts.server is not None
            did, qp, cq, mr, bufsize = _connect_data(ch, ctrl, opts, sizes, data_param, where, iwarp)
        else:
            assert listener is not None
            req = _event(ch, None, (), "the client's data connection", where, opts.timeout, listen=listener)
            did = _adopt(ch, req, listener)
            qp, cq, mr, bufsize = _data_qp(did, opts, sizes, iwarp)
            did.accept(data_param)
        ids.append(did)
        ctrl.exchange(encode_dest(zero, 0), DEST.size, client, "the key record after the data connection")
        gid_index = 0 if iwarp else GID_INDEX   # siw has one GID, from its MAC; rxe's IPv4 one is index 1
        gid = int(ctrl.cmid.ctx.query_gid(1, gid_index)).to_bytes(16, "big")  # type: ignore[union-attr]
        me = PerfDest(0, out_reads, qp.qp_num, random.SystemRandom().getrandbits(24), mr.rkey, mr.buf + bufsize, gid)
        credits = None
        if iwarp and verb == "send":  # send_bw.c: send_rcredit on iWARP; the record carries the credit word
            assert did.pd is not None
            credits = _Credits(did.pd, opts.rx_depth, opts.tx_depth)
            me.rkey, me.vaddr = credits.mr.rkey, credits.addr
        mtu_bytes = mtu_bytes_of(curr)
        res = _session(opts, out, ctrl, fab, client, sizes, mtu_bytes, qp, cq, mr, bufsize, me, None,
                       iwarp=iwarp, credits=credits)
        if not iwarp:  # iWARP's TCP carries the last ACKs itself
            _linger(ctrl, fab, opts.timeout)
        return res
    finally:
        _disconnect(ch, ids, fab, min(opts.timeout, 5.0))
        if listener is not None:
            listener.close()


def _resolve(ch: CMEventChannel, server: str, port: int, timeout: float) -> CMID:
    cid = CMID(ch)
    where = f"{server}:{port}"
    try:
        cid.resolve_addr(AddrInfo(dst=server, dst_service=port))
    except PyverbsRDMAError as exc:
        raise PerftestError(f"rdma_resolve_addr {where}: {exc}") from None
    _event(ch, cid, (EV.RDMA_CM_EVENT_ADDR_RESOLVED,), "rdma_resolve_addr", where, timeout)
    cid.resolve_route()
    _event(ch, cid, (EV.RDMA_CM_EVENT_ROUTE_RESOLVED,), "rdma_resolve_route", where, timeout)
    return cid


def _adopt(ch: CMEventChannel, req: Any, listener: CMID) -> CMID:
    """``CMID(CMEvent, listen_id)`` for a CONNECT_REQUEST taken out of the queue by :func:`_event`."""
    ch.queue.appendleft(req)
    return CMID(CMEvent(ch), listen_id=listener)


def _data_qp(cid: CMID, opts: PerftestOptions, sizes: list[int], iwarp: bool = False) -> tuple[QP, CQ, MR, int]:
    """create_qp_main under rdma_cm (rdma_create_qp): tx_depth sends, rx_depth receives, one CQ."""
    assert cid.ctx is not None and cid.pd is not None
    bufsize = max(max(sizes), PAGE)
    mr = _data_mr(cid.pd, bufsize, opts.verb, iwarp)
    cq = CQ(cid.ctx, opts.tx_depth + opts.rx_depth + 1)
    cap = QPCap(max_send_wr=opts.tx_depth, max_recv_wr=opts.rx_depth, max_send_sge=1, max_recv_sge=1)
    cid.create_qp(QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=cap))
    assert cid.qp is not None  # INIT with every remote access (CMID.create_qp)
    return cid.qp, cq, mr, bufsize


def _connect_data(ch: CMEventChannel, ctrl: _Control, opts: PerftestOptions, sizes: list[int], param: ConnParam,
                  where: str, iwarp: bool = False) -> tuple[CMID, QP, CQ, MR, int]:
    """rdma_cm_client_connection: resolve, route, QP, connect; a REJ (the server not listening yet) is
    tried again 100 ms later, as perftest does, and for longer than perftest's 10 tries: perftest's
    server listens only once its SEND of the key record before this connection has completed, so
    when our ACK of it is lost it waits one retransmission period of its control QP first (4.096 us
    x 2^timeout, 2.1 s for rdma_cm's 19 on RoCE), during which perftest's own client gives up.  We
    try for two such periods and a second, the engine answering the retransmission meanwhile."""
    assert opts.server is not None
    period = 0.0 if iwarp else cm_timeout_seconds(ctrl.qp.query()[0].timeout)  # (iWARP: TCP's own timers)
    end = time.monotonic() + 2 * period + 1.0
    for attempt in itertools.count(1):
        cid = _resolve(ch, opts.server, opts.port, opts.timeout)
        qp, cq, mr, bufsize = _data_qp(cid, opts, sizes, iwarp)
        cid.connect(param)
        try:
            _event(ch, cid, (EV.RDMA_CM_EVENT_ESTABLISHED,), "the data QP's connection", where, 1e9)
            return cid, qp, cq, mr, bufsize
        except Rejected:
            if attempt >= CM_RETRIES and time.monotonic() >= end:  # (perftest's 10 tries at least)
                raise
            cid.close()
            pause = time.monotonic() + 0.1
            while time.monotonic() < pause:  # (the engine acknowledges what the peer resends meanwhile)
                ctrl.fab.step(0.01)
    raise AssertionError("unreachable")  # (itertools.count never ends)


def _linger(ctrl: _Control, fab: Any, timeout: float) -> None:
    """After the last exchange, before our own ``rdma_disconnect``: wait for the peer's DREQ, the engine
    answering meanwhile, until two of the control QP's retransmission periods (4.096 us x 2^timeout,
    IBA 9.7.6.1.3; 2.1 s for the local ACK timeout 19 that rdma_cm puts in the REQ) have passed
    without a duplicate request from the peer, ``timeout`` at most: the peer's timer, started when
    it sent, fires within one period, and the second leaves room for a guest that runs slowly.
    The ACK of the peer's last SEND may have been lost; perftest disconnects as soon as that SEND
    completes (``destroy_ctx``), so the peer sends its DREQ at once when the ACK arrived, and
    retransmits the SEND when it did not (again if the ACK of the retransmission is lost too).
    Disconnecting first would move our QP to ERR (``rdma_disconnect``) and leave the retransmission
    unanswered: rxe retries a SEND with retry count 7 for ever, so the peer would never end."""
    period = cm_timeout_seconds(ctrl.qp.query()[0].timeout)
    counters = ctrl.cmid.device.counters if ctrl.cmid.device is not None else {}
    dups = counters.get("duplicate_request", 0)
    now = time.monotonic()
    quiet, hard = now + 2 * period, now + timeout
    while now < min(quiet, hard):
        if ctrl.peer_left():
            return
        fab.step(0.01)
        now = time.monotonic()
        if counters.get("duplicate_request", 0) != dups:  # the peer is still retransmitting: answered, wait on
            dups = counters.get("duplicate_request", 0)
            quiet = now + 2 * period


def _disconnect(ch: CMEventChannel, ids: list[CMID], fab: Any, wait: float) -> None:
    """The data connection, then the control one: rdma_disconnect (a DREQ, or the DREP answering the
    peer's), then DISCONNECTED, as perftest's destroy_ctx and its exit do; the engine keeps answering
    meanwhile, so the peer's own DREQs and last ACKs are answered before the process ends."""
    for cid in reversed(ids):
        if cid.conn is None or cid.state in ("rejected", "unreachable", "idle"):
            continue
        try:
            cid.disconnect()
        except PyverbsRDMAError:
            continue
    end = time.monotonic() + wait
    pending = [c for c in ids if c.conn is not None and c.state not in ("rejected", "unreachable", "idle")]
    while pending and time.monotonic() < end:
        for ev in list(ch.queue):
            if ev.kind == EV.RDMA_CM_EVENT_DISCONNECTED:
                pending = [c for c in pending if not _is(ev.cmid, c)]
        fab.step(0.01)
    fab.linger(0.2)
