"""Every exception rdmalab defines survives pickling with its message and attributes.

Worker processes (``decode -j``, ``convert -j``, the parallel column reader) send their errors back
pickled.  An exception whose ``__init__`` takes other arguments than its message unpickles only if
it says how (rdmalab.wire.errors.Picklable); otherwise the parent fails to read the error (a
``multiprocessing.Pool`` then waited forever)."""

from __future__ import annotations

import inspect
import pickle
from typing import Any

import pytest
from rdmalab_modules import rdmalab_modules

from rdmalab.wire.errors import Picklable


def _exception_classes() -> list[type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for module in rdmalab_modules():
        for obj in vars(module).values():
            if (inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == module.__name__):
                found[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return [found[k] for k in sorted(found)]


CLASSES = _exception_classes()


def test_the_walk_finds_the_errors() -> None:
    names = {c.__name__ for c in CLASSES}
    assert {"DecodeError", "CaptureError", "FilterError", "PyverbsRDMAError", "MPAError"} <= names


@pytest.mark.parametrize("cls", CLASSES, ids=[c.__qualname__ for c in CLASSES])
def test_an_exception_with_its_own_init_says_how_to_pickle_it(cls: type[BaseException]) -> None:
    own_init = any("__init__" in vars(k) for k in cls.__mro__ if k.__module__.startswith("rdmalab"))
    if own_init:
        assert issubclass(cls, Picklable), f"{cls.__qualname__} has its own __init__ but is not Picklable"


def _samples() -> list[BaseException]:
    from rdmalab.capture.filter import FilterError
    from rdmalab.capture.pcapio import CaptureError
    from rdmalab.fabric.udp_setup import CarrierError
    from rdmalab.lab.core import Wrong
    from rdmalab.verbs.engine.memory import AccessError
    from rdmalab.verbs.engine.mpacm import MPAError
    from rdmalab.verbs.pyverbs_error import PyverbsRDMAError, PyverbsUserError
    from rdmalab.wire.errors import EncodeError, MalformedError, TruncatedError

    return [
        MalformedError("BTH", "opcode", 7, 0x1F, "a defined opcode", detail="frame 3"),
        TruncatedError("RETH", None, 12, b"\x01\x02", "16 bytes"),
        EncodeError("BTH", "psn", 1 << 24, "24 bits"),
        CaptureError("x.pcap", "is damaged", offset=1234, frames_read=5),
        FilterError("bth.psn ==", "a value is missing", 9),
        CarrierError(1, "no raw socket"),
        Wrong("the PSN is wrong", field="psn", offset=8),
        AccessError(10, "rkey does not match"),
        MPAError("bad key", terminate=(1, 2, 3), reject=True),
        PyverbsRDMAError("Failed to create QP", 22),
        PyverbsUserError("not supported"),
    ]


@pytest.mark.parametrize("err", _samples(), ids=lambda e: type(e).__name__)
def test_an_error_comes_back_from_pickle_whole(err: BaseException) -> None:
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is type(err)
    assert str(back) == str(err) and back.args == err.args
    assert vars(back) == vars(err)


def test_a_pickled_error_is_not_initialised_twice() -> None:
    """The attributes come back as they were; the message is not made again from them."""
    from rdmalab.capture.filter import FilterError

    err: Any = FilterError("a == 1", "no such field", 0)
    back: Any = pickle.loads(pickle.dumps(err))
    assert str(back) == str(err) and back.args == (str(err),)
