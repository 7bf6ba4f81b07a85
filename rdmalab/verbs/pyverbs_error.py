"""Exceptions shaped like ``pyverbs.pyverbs_error``.

``PyverbsRDMAError.error_code`` is the errno the kernel or libibverbs would return (for example
``errno.EINVAL`` for a QP transition the state table does not allow), so code that inspects it
behaves the same on the soft engine and on real hardware.
"""

from __future__ import annotations

import errno as _errno
import os

from rdmalab.wire.errors import Picklable


class PyverbsError(Picklable, Exception):
    """Base of pyverbs' exceptions."""

    def __init__(self, msg: str, error_code: int = -1) -> None:
        self.msg = msg
        self.error_code = error_code
        super().__init__(msg)


class PyverbsRDMAError(PyverbsError):
    """A verb failed: ``error_code`` is the errno; the message ends with its strerror.

    As pyverbs (pyverbs_error.py), any code but -1 (none given) is appended, including 0 and the
    negative codes some verbs return (``ibv_query_gid_table``).
    """

    def __init__(self, msg: str, error_code: int = -1) -> None:
        if error_code != -1:
            msg = f"{msg}. Errno: {error_code}, {os.strerror(error_code)}"
        super().__init__(msg, error_code)


class PyverbsUserError(PyverbsError):
    """A misuse detected before any verb is called (bad argument type, missing attribute...)."""


EINVAL = _errno.EINVAL
ENOMEM = _errno.ENOMEM
ENODEV = _errno.ENODEV
EBUSY = _errno.EBUSY
