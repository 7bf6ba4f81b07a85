"""``pyverbs.mem_alloc``: ``posix_memalign``, ``malloc`` and ``free`` returning raw addresses.

The memory is Python-owned (a ctypes buffer kept alive until ``free``); the address is real, so
``MR(pd, length, access, address=...)`` on real pyverbs would accept it.  The soft engine's MR takes
buffer objects, not addresses: use :func:`buffer_at` to get the buffer behind an address.
``mmap``/``munmap`` map anonymous memory with Python's :mod:`mmap` (``MAP_*_`` flags as in pyverbs).
The other helpers of pyverbs.mem_alloc (read64, writebe32...) are not provided.
"""

from __future__ import annotations

import ctypes
import errno
import mmap as _mmap
from typing import Any

from rdmalab.verbs.pyverbs_error import PyverbsRDMAError

_live: dict[int, tuple[Any, memoryview]] = {}
MAP_ANONYMOUS_ = _mmap.MAP_ANONYMOUS
MAP_PRIVATE_ = _mmap.MAP_PRIVATE
MAP_SHARED_ = _mmap.MAP_SHARED
MAP_HUGETLB_ = 0x40000  # <linux/mman.h>
PROT_READ_ = _mmap.PROT_READ
PROT_WRITE_ = _mmap.PROT_WRITE


def posix_memalign(size: int, alignment: int = 8) -> int:
    """``size`` zeroed bytes at an address that is a multiple of ``alignment`` (a power of two)."""
    if alignment <= 0 or alignment & (alignment - 1) or alignment % ctypes.sizeof(ctypes.c_void_p):
        raise PyverbsRDMAError(f"Failed to allocate memory: alignment {alignment}", errno.EINVAL)
    raw = ctypes.create_string_buffer(size + alignment)
    base = ctypes.addressof(raw)
    off = (-base) % alignment
    addr = base + off
    _live[addr] = (raw, memoryview(raw).cast("B")[off:off + size])
    return addr


def malloc(size: int) -> int:
    return posix_memalign(size, 16)


def free(ptr: int) -> None:
    if _live.pop(ptr, None) is None:
        raise PyverbsRDMAError(f"free: {ptr:#x} was not allocated here", errno.EINVAL)


def buffer_at(ptr: int) -> memoryview:
    """The writable buffer :func:`posix_memalign` returned ``ptr`` for."""
    try:
        return _live[ptr][1]
    except KeyError:
        raise PyverbsRDMAError(f"{ptr:#x} was not allocated by rdmalab.verbs.mem_alloc", errno.EINVAL) from None


def mmap(addr: int = 0, length: int = 0, prot: int = PROT_READ_ | PROT_WRITE_,
         flags: int = MAP_PRIVATE_ | MAP_ANONYMOUS_, fd: int = -1, offset: int = 0) -> int:
    """Map ``length`` bytes (anonymous unless ``fd`` is given); returns the address."""
    try:
        m = _mmap.mmap(fd if not flags & MAP_ANONYMOUS_ else -1, length, flags=flags & ~MAP_ANONYMOUS_
                       if fd >= 0 else flags, prot=prot, offset=offset)
    except (OSError, ValueError) as ex:
        raise PyverbsRDMAError(f"Failed to mmap {length} bytes", getattr(ex, "errno", None) or errno.EINVAL) from ex
    view = memoryview(m).cast("B")
    addr = ctypes.addressof(ctypes.c_char.from_buffer(m)) if length else 0
    _live[addr] = (m, view)
    return addr


def munmap(addr: int, length: int) -> None:
    entry = _live.pop(addr, None)
    if entry is None:
        raise PyverbsRDMAError(f"munmap: {addr:#x} was not mapped here", errno.EINVAL)
    entry[1].release()
