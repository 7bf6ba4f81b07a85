"""Trace the rdma-cm calls rdma-core's test_rdmacm.py makes, with the values the kernel returns.

A diagnostic for issue 18, not a test: it runs each ``tests.test_rdmacm`` test once, unchanged,
with ``pyverbs.cmid``'s classes replaced by subclasses that log every call the suite makes on
them (arguments, results, events, UD parameters, QP attributes), one line per call, from both
of the suite's processes (passive and active are forked children).  Run inside the rxe VM by
``scripts/pyverbs_on_rxe.sh`` with ``NETIF=1 TRACE=1``; the log shows, on kernel rxe, what an
implementation of ``pyverbs.cmid`` must answer at each step (event order, QPNs, Q_Keys, address
handles, the QP attributes ``init_qp_attr`` hands out, the ACK timeout set by ``set_option``).

Standard library plus the real pyverbs (Debian's python3-pyverbs); runs under /usr/bin/python3::

    rdmacm_trace.py --suite DIR/tests --out trace.txt [--only test_rdmacm_sync_traffic,...] -- --dev rxe0 --gid 1

The subclasses call the original methods and return their results untouched; the test's outcome
is printed next to its trace (a test that passes here also passes in the untraced run).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import unittest
from typing import Any

_LOG = ""
_T0 = time.monotonic()


def _log(*parts: Any) -> None:
    line = " ".join(str(p) for p in parts)
    test = os.environ.get("RDMACM_TRACE_TEST", "?")
    with open(_LOG, "a", encoding="utf-8") as fh:
        fh.write(f"{time.monotonic() - _T0:8.3f} pid={os.getpid()} {test}: {line}\n")


def _ah_attr(a: Any) -> str:
    """The fields of an AHAttr a peer implementation must match."""
    try:
        gr = f" dgid={a.dgid} sgid_index={a.sgid_index} hop_limit={a.hop_limit} traffic_class={a.traffic_class} flow_label={a.flow_label}" if a.is_global else ""
        return f"AHAttr(port_num={a.port_num} is_global={a.is_global} dlid={a.dlid} sl={a.sl} static_rate={a.static_rate}{gr})"
    except Exception as ex:  # noqa: BLE001 - diagnostic output only
        return f"AHAttr(<{ex!r}>)"


def _qp_attr(a: Any) -> str:
    fields = ["qp_state", "cur_qp_state", "path_mtu", "qkey", "rq_psn", "sq_psn", "dest_qp_num",
              "qp_access_flags", "pkey_index", "port_num", "timeout", "retry_cnt", "rnr_retry",
              "min_rnr_timer", "max_rd_atomic", "max_dest_rd_atomic"]
    out = []
    for f in fields:
        try:
            out.append(f"{f}={getattr(a, f)}")
        except Exception:  # noqa: BLE001
            pass
    try:
        out.append("ah_attr=" + _ah_attr(a.ah_attr))
    except Exception:  # noqa: BLE001
        pass
    return "QPAttr(" + " ".join(out) + ")"


def _wc(wc: Any) -> str:
    if wc is None:
        return "None"
    return (f"WC(status={wc.status} opcode={wc.opcode} byte_len={wc.byte_len} qp_num={wc.qp_num} "
            f"src_qp={wc.src_qp} wc_flags={wc.wc_flags} pkey_index={wc.pkey_index} slid={wc.slid} sl={wc.sl})")


def install(cm: Any) -> None:
    """Replace pyverbs.cmid's classes by logging subclasses (before the suite imports them)."""
    import pyverbs.cm_enums as ce

    addr_desc: dict[int, str] = {}

    class AddrInfo(cm.AddrInfo):
        def __init__(self, *a: Any, **k: Any) -> None:
            super().__init__(*a, **k)
            addr_desc[id(self)] = f"AddrInfo({', '.join([repr(x) for x in a] + [f'{n}={v!r}' for n, v in k.items()])})"
            _log("new", addr_desc[id(self)])

    def _desc(x: Any) -> str:
        if isinstance(x, cm.AddrInfo):
            return addr_desc.get(id(x), "AddrInfo(?)")
        if isinstance(x, cm.ConnParam):
            return f"ConnParam(qpn={x.qpn} private_data={x.private_data!r})"
        if isinstance(x, cm.JoinMCAttrEx):
            return f"JoinMCAttrEx(comp_mask={x.comp_mask} join_flags={x.join_flags})"
        return type(x).__name__ if not isinstance(x, (int, str, bytes, type(None))) else repr(x)

    class CMID(cm.CMID):
        def __init__(self, creator: Any = None, qp_init_attr: Any = None, pd: Any = None,
                     port_space: int = ce.RDMA_PS_TCP, listen_id: Any = None) -> None:
            super().__init__(creator=creator, qp_init_attr=qp_init_attr, pd=pd, port_space=port_space,
                             listen_id=listen_id)
            qpi = ""
            if qp_init_attr is not None:
                c = qp_init_attr.cap
                qpi = (f" qp_init_attr=(qp_type={qp_init_attr.qp_type} max_send_wr={c.max_send_wr} "
                       f"max_recv_wr={c.max_recv_wr} max_send_sge={c.max_send_sge} max_recv_sge={c.max_recv_sge} "
                       f"max_inline_data={c.max_inline_data})")
            # port_space counts only for an id made on a channel (rdma_create_id); an AddrInfo's
            # id takes the AddrInfo's, and a CMEvent's (connect request) the listener's.
            ps = f", port_space={port_space:#x}" if isinstance(creator, cm.CMEventChannel) else ""
            _log("new CMID(creator=" + _desc(creator) + ps + qpi +
                 (", listen_id=CMID" if listen_id is not None else "") + f") qpn={self.qpn}")

    wrapped: dict[str, Any] = {}

    class Child:
        """get_request's new CMID (made inside pyverbs, so not of the subclass): logged by a proxy."""

        def __init__(self, real: Any) -> None:
            self._real = real

        def __getattr__(self, name: str) -> Any:
            if name in wrapped:
                return lambda *a, **k: wrapped[name](self._real, *a, **k)
            return getattr(self._real, name)

    def wrap(name: str) -> None:
        orig = getattr(cm.CMID, name)

        def call(self: Any, *a: Any, **k: Any) -> Any:
            args = ", ".join([_desc(x) for x in a] + [f"{n}={_desc(v)}" for n, v in k.items()])
            try:
                r = orig(self, *a, **k)
            except Exception as ex:
                _log(f"cmid.{name}({args}) raised {ex!r}")
                raise
            shown: str
            if name in ("get_send_comp", "get_recv_comp"):
                shown = _wc(r)
            elif name == "query_qp":
                shown = _qp_attr(r[0])
            elif name == "init_qp_attr":
                shown = f"({_qp_attr(r[0])}, mask={r[1]:#x})"
            elif name in ("reg_msgs", "reg_read", "reg_write"):
                shown = f"MR(length={r.length} lkey={r.lkey:#x} rkey={r.rkey:#x})"
            elif name == "get_remote_ece":
                shown = f"ECE(vendor_id={r.vendor_id} options={r.options} comp_mask={r.comp_mask})"
            else:
                shown = _desc(r)
            extra = ""
            if name in ("bind_addr", "resolve_route", "create_qp", "listen", "accept", "connect"):
                try:
                    extra = f" [dev_name={self.dev_name} port_num={self.port_num} qpn={self.qpn}]"
                except Exception:  # noqa: BLE001
                    extra = f" [qpn={self.qpn}]"
            _log(f"cmid.{name}({args}) -> {shown}{extra}")
            if name == "get_request":
                return Child(r)
            return r

        setattr(CMID, name, call)
        wrapped[name] = call

    for n in ("accept", "bind_addr", "connect", "create_qp", "disconnect", "establish", "get_recv_comp",
              "get_remote_ece", "get_request", "get_send_comp", "init_qp_attr", "join_multicast",
              "leave_multicast", "listen", "post_read", "post_recv", "post_send", "post_ud_send",
              "post_write", "query_qp", "reg_msgs", "reg_read", "reg_write", "reject", "resolve_addr",
              "resolve_route", "set_local_ece", "set_option"):
        wrap(n)

    class CMEvent(cm.CMEvent):
        def __init__(self, channel: Any) -> None:
            super().__init__(channel)
            pd = b""
            try:
                pd = self.private_data
            except Exception:  # noqa: BLE001
                pass
            _log(f"CMEvent -> {self.event_str()} (type {self.event_type}) private_data[{len(pd)}]={pd[:32]!r}")

    class UDParam(cm.UDParam):
        def __init__(self, cm_event: Any) -> None:
            super().__init__(cm_event)
            _log(f"UDParam(event) -> qp_num={self.qp_num:#x} qkey={self.qkey:#x} ah_attr={_ah_attr(self.ah_attr)}")

    class ConnParam(cm.ConnParam):
        def __init__(self, *a: Any, **k: Any) -> None:
            super().__init__(*a, **k)
            _log(f"new ConnParam({', '.join([repr(x) for x in a] + [f'{n}={v!r}' for n, v in k.items()])})")

    cm.AddrInfo, cm.CMID, cm.CMEvent, cm.UDParam, cm.ConnParam = AddrInfo, CMID, CMEvent, UDParam, ConnParam


def main(argv: list[str] | None = None) -> int:
    global _LOG
    argv = sys.argv[1:] if argv is None else argv
    if "--" in argv:
        i = argv.index("--")
        argv, suite_args = argv[:i], argv[i + 1:]
    else:
        suite_args = []
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--suite", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="")
    a = ap.parse_args(argv)
    _LOG = os.path.abspath(a.out)
    open(_LOG, "w").close()
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import collect  # the same suite loader the result runs use

    collect.load_suite_package(a.suite)
    saved = sys.argv[:]
    sys.argv = [saved[0]] + suite_args
    from args_parser import parser

    parser.parse_args()
    sys.argv = saved
    import importlib

    # Every pyverbs extension module that cimports pyverbs.cmid looks its type up in the module
    # at import time: load them (tests.utils pulls in the providers) before the names change.
    importlib.import_module("tests.utils")
    import pyverbs.cmid as cm

    install(cm)

    mod = importlib.import_module("tests.test_rdmacm")
    ru = importlib.import_module("tests.rdmacm_utils")
    real_ah = ru.AH

    def ah(*x: Any, **k: Any) -> Any:
        r = real_ah(*x, **k)
        how = "wc=WC, grh=buf" if k.get("wc") is not None else "attr=" + _ah_attr(k.get("attr"))
        _log(f"AH(pd, {how}, port_num={k.get('port_num', 1)})")
        return r

    ru.AH = ah
    bm = importlib.import_module("tests.base_rdmacm")

    class QP(bm.QP):  # the external QP of test_rdmacm_async_traffic_external_qp
        def query_ece(self) -> Any:
            try:
                r = super().query_ece()
            except Exception as ex:
                _log(f"qp.query_ece() raised {ex!r}")
                raise
            _log(f"qp.query_ece() -> ECE(vendor_id={r.vendor_id} options={r.options})")
            return r

        def set_ece(self, ece: Any) -> Any:
            try:
                r = super().set_ece(ece)
            except Exception as ex:
                _log(f"qp.set_ece(ECE(vendor_id={ece.vendor_id})) raised {ex!r}")
                raise
            _log(f"qp.set_ece(ECE(vendor_id={ece.vendor_id})) -> {r!r}")
            return r

        def modify(self, attr: Any, mask: int) -> Any:
            r = super().modify(attr, mask)
            _log(f"qp.modify({_qp_attr(attr)}, mask={mask:#x}) -> qp_num={self.qp_num}")
            return r

    bm.QP = QP
    for cls in (ru.CMAsyncConnection, ru.CMSyncConnection):
        orig_init = cls.__init__

        def init(self: Any, *x: Any, _o: Any = orig_init, _c: Any = cls, **k: Any) -> None:
            _log(f"{_c.__name__}(passive={k.get('passive')}, "
                 f"{', '.join(f'{n}={v!r}' for n, v in k.items() if n not in ('syncer', 'notifier', 'passive'))})")
            _o(self, *x, **k)

        cls.__init__ = init
    only = [x for x in a.only.split(",") if x]
    loader = unittest.TestLoader()
    names = loader.getTestCaseNames(mod.CMTestCase)
    for name in names:
        if only and name not in only:
            continue
        os.environ["RDMACM_TRACE_TEST"] = name
        res = unittest.TestResult()
        mod.CMTestCase(name).run(res)
        outcome = ("error: " + res.errors[0][1].strip().splitlines()[-1] if res.errors else
                   "fail: " + res.failures[0][1].strip().splitlines()[-1] if res.failures else
                   "skip: " + res.skipped[0][1] if res.skipped else "pass")
        _log(f"== outcome: {outcome}")
        print(f"{name}: {outcome}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
