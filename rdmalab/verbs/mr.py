"""``pyverbs.mr``: memory regions over any writable Python buffer, without copies.

``MR(pd, length, access)`` allocates a zeroed ``bytearray`` as pyverbs allocates memory.
``MR(pd, length, access, address=buf)`` registers an existing writable buffer (``bytearray``,
a C-contiguous numpy array, ``mmap``, a writable ``memoryview``): the engine reads and writes
that very memory.  ``MR.buf`` is the buffer's real address, so SGEs and RETHs carry
addresses as they do on hardware.  (pyverbs takes ``address`` as an int; here it is the
buffer object, since Python cannot safely turn an int back into memory.)

Keys: ``lkey != rkey`` always (see :mod:`rdmalab.verbs.engine.memory`).  As in
``ib_check_mr_access``, REMOTE_WRITE and REMOTE_ATOMIC need LOCAL_WRITE (else ``EINVAL``).
"""

from __future__ import annotations

import ctypes
from typing import Any

from rdmalab.verbs import enums as e
from rdmalab.verbs.pyverbs_error import EINVAL, PyverbsRDMAError, PyverbsUserError

_KNOWN_ACCESS = (e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
                 | e.IBV_ACCESS_REMOTE_ATOMIC | e.IBV_ACCESS_MW_BIND | e.IBV_ACCESS_ZERO_BASED
                 | e.IBV_ACCESS_RELAXED_ORDERING)


def _address_of(view: memoryview) -> int:
    if len(view) == 0:
        return 0
    return ctypes.addressof((ctypes.c_char * len(view)).from_buffer(view))


class MR:
    """``MR(pd, length, access, address=None, implicit=False)``."""

    def __init__(self, pd: Any, length: int, access: int, address: Any = None, implicit: bool = False) -> None:
        if implicit:
            raise PyverbsUserError("implicit (ODP) MRs are not supported by the soft engine")
        if access & ~_KNOWN_ACCESS:
            raise PyverbsRDMAError(f"Failed to register a MR: unsupported access flags {access & ~_KNOWN_ACCESS:#x}",
                                   EINVAL)
        if access & (e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_ATOMIC) and not access & e.IBV_ACCESS_LOCAL_WRITE:
            raise PyverbsRDMAError("Failed to register a MR: REMOTE_WRITE/REMOTE_ATOMIC require LOCAL_WRITE", EINVAL)
        if length < 0:
            raise PyverbsRDMAError(f"Failed to register a MR of length {length}", EINVAL)
        if address is None:
            self._obj: Any = bytearray(length)
        elif isinstance(address, int):
            raise PyverbsUserError("the soft engine registers buffer objects, not raw addresses: pass address=buf")
        else:
            self._obj = address
        view = memoryview(self._obj)
        if view.readonly:
            raise PyverbsRDMAError("Failed to register a MR: the buffer is read-only", EINVAL)
        if not view.c_contiguous:
            raise PyverbsRDMAError("Failed to register a MR: the buffer is not contiguous", EINVAL)
        view = view.cast("B")
        if length > len(view):
            raise PyverbsRDMAError(f"Failed to register a MR: length {length} > buffer size {len(view)}", EINVAL)
        self.view = view[:length]
        self.pd = pd
        self.device = pd.device
        self.length = length
        self.access = access
        self.buf = _address_of(self.view)
        self.lkey, self.rkey = self.device.alloc_mr_keys(self)
        self.valid = True

    def write(self, data: str | bytes | bytearray | memoryview, length: int, offset: int = 0) -> None:
        """Copy ``length`` bytes of ``data`` into the MR at ``offset`` (pyverbs ``MR.write``)."""
        raw = data.encode() if isinstance(data, str) else data
        if offset < 0 or offset + length > self.length or length > len(raw):
            raise PyverbsUserError(f"write of {length} bytes at offset {offset} does not fit the MR ({self.length})")
        self.view[offset:offset + length] = memoryview(raw)[:length]

    def read(self, length: int, offset: int) -> bytes:
        """``length`` bytes from ``offset`` (pyverbs ``MR.read``)."""
        if offset < 0 or offset + length > self.length:
            raise PyverbsUserError(f"read of {length} bytes at offset {offset} does not fit the MR ({self.length})")
        return bytes(self.view[offset:offset + length])

    @property
    def handle(self) -> int:
        return int(self.lkey) >> 8

    def invalidate(self) -> None:
        """What LOCAL_INV and SEND_WITH_INV do: both keys stop working."""
        self.valid = False

    def close(self) -> None:
        if self.valid or self.device.mrs.get(self.lkey >> 8) is self:
            self.device.mrs.pop(self.lkey >> 8, None)
        self.valid = False

    def __enter__(self) -> MR:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<MR buf={self.buf:#x} length={self.length} lkey={self.lkey:#x} rkey={self.rkey:#x}>"
