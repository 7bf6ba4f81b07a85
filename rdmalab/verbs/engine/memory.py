"""Memory keys and the checks on every access (IBA 10.6; rxe ``rxe_mr.c`` ``lookup_mr``/``mr_check_range``).

A key is ``index << 8 | key byte``.  The lkey and rkey of one MR have the same index and
*different* key bytes, so an rkey used as an lkey (or the other way round) fails the key
comparison and the access ends with ``LOC_PROT_ERR`` (local) or ``REM_ACCESS_ERR`` (remote),
instead of silently working as it can on rxe, where the two keys are equal.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rdmalab.verbs import enums as e
from rdmalab.wire.errors import Picklable

if TYPE_CHECKING:
    from rdmalab.verbs.engine.node import SoftDevice


class AccessError(Picklable, Exception):
    """A failed memory check; ``status`` is the ``IBV_WC_*`` status it ends as."""

    def __init__(self, status: int, why: str) -> None:
        super().__init__(why)
        self.status = status
        self.why = why


def local_view(dev: SoftDevice, pd: Any, addr: int, length: int, lkey: int, write: bool) -> memoryview:
    """The bytes an SGE names, after the lkey, PD, range and LOCAL_WRITE checks."""
    mr = dev.mrs.get(lkey >> 8)
    if mr is None or mr.lkey != lkey or not mr.valid:
        raise AccessError(e.IBV_WC_LOC_PROT_ERR, f"lkey {lkey:#x} is not a valid local key on {dev.name}")
    if mr.pd is not pd:
        raise AccessError(e.IBV_WC_LOC_PROT_ERR, f"lkey {lkey:#x} belongs to another protection domain")
    off = addr - mr.buf
    if off < 0 or off + length > mr.length:
        raise AccessError(e.IBV_WC_LOC_PROT_ERR,
                          f"[{addr:#x}, +{length}) is outside the MR [{mr.buf:#x}, +{mr.length}) of lkey {lkey:#x}")
    if write and not mr.access & e.IBV_ACCESS_LOCAL_WRITE:
        raise AccessError(e.IBV_WC_LOC_PROT_ERR, f"MR of lkey {lkey:#x} lacks IBV_ACCESS_LOCAL_WRITE")
    view: memoryview = mr.view[off:off + length]
    return view


def local_views(dev: SoftDevice, pd: Any, sges: Sequence[Any], write: bool) -> list[memoryview]:
    if len(sges) == 1:  # the usual case, without a list comprehension's frame
        s = sges[0]
        return [local_view(dev, pd, s.addr, s.length, s.lkey, write)]
    return [local_view(dev, pd, s.addr, s.length, s.lkey, write) for s in sges]


def remote_view(dev: SoftDevice, pd: Any, rkey: int, va: int, length: int, access: int) -> memoryview:
    """The target of a remote access, after the rkey, PD, access and range checks (rxe ``check_rkey``)."""
    if length == 0:
        return memoryview(bytearray())
    mr = dev.mrs.get(rkey >> 8)
    if mr is None or mr.rkey != rkey or not mr.valid:
        raise AccessError(e.IBV_WC_REM_ACCESS_ERR, f"rkey {rkey:#x} is not a valid remote key on {dev.name}")
    if mr.pd is not pd:
        raise AccessError(e.IBV_WC_REM_ACCESS_ERR, f"rkey {rkey:#x} belongs to another protection domain")
    if not mr.access & access:
        raise AccessError(e.IBV_WC_REM_ACCESS_ERR, f"MR of rkey {rkey:#x} does not allow this access ({access:#x})")
    off = va - mr.buf
    if off < 0 or off + length > mr.length:
        raise AccessError(e.IBV_WC_REM_ACCESS_ERR,
                          f"[{va:#x}, +{length}) is outside the MR [{mr.buf:#x}, +{mr.length}) of rkey {rkey:#x}")
    view: memoryview = mr.view[off:off + length]
    return view


def gather(views: Sequence[memoryview]) -> memoryview | bytes:
    """One buffer for a list of SGE views: zero-copy for one SGE, a join otherwise."""
    if len(views) == 1:
        return views[0]
    return b"".join(views)


def scatter(views: Sequence[memoryview], offset: int, data: Any) -> None:
    """Write ``data`` at byte ``offset`` of the concatenation of ``views`` (caller checked the room)."""
    n = len(data)
    if n == 0:
        return
    pos = 0
    for v in views:
        size = len(v)
        if offset >= size:
            offset -= size
            continue
        k = min(size - offset, n - pos)
        v[offset:offset + k] = data[pos:pos + k]
        pos += k
        offset = 0
        if pos == n:
            return
    raise AccessError(e.IBV_WC_LOC_LEN_ERR, "scatter list too short")
