"""``frozen_dataclass`` (rdmalab.wire.lazy_dataclass) against ``dataclass(frozen=True, slots=True)``:
the same class, its ``__init__``, ``__repr__``, ``__eq__`` and ``__hash__`` written on first use."""

from __future__ import annotations

import copy
import dataclasses
import importlib
import inspect
import pickle
import subprocess
import sys
import typing
from dataclasses import InitVar, dataclass, field
from typing import Any, ClassVar

import pytest

from rdmalab.wire.lazy_dataclass import frozen_dataclass

WIRE_MODULES = ("rdmalab.wire.ib", "rdmalab.wire.cm", "rdmalab.wire.smp", "rdmalab.wire.sa", "rdmalab.wire.pma",
                "rdmalab.wire.mad", "rdmalab.wire.mpa", "rdmalab.wire.rdmap", "rdmalab.wire.net", "rdmalab.wire.pfc",
                "rdmalab.capture.linktypes", "rdmalab.capture.filter", "rdmalab.capture.columnar_schema")


class _Base:
    __slots__ = ()


@dataclass
class _Unfrozen:
    u: int = 0


def _declare(dec: Any) -> tuple[type, type, type]:
    @dec
    class A(_Base):
        """A doc."""

        x: int
        y: int = 3
        z: list[int] = field(default_factory=list, compare=False)
        w: int = field(init=False, repr=False, default=7)
        v: int = field(init=False, repr=False)
        K: ClassVar[int] = 5

        def __post_init__(self) -> None:
            object.__setattr__(self, "v", self.x * 2)

    @dec
    class B(A):
        q: int = field(default=9, hash=False)

    @dec
    class C(_Base):
        """One that writes its own __eq__ (dataclasses keeps it and adds __hash__) and __repr__."""

        a: int = 0

        def __eq__(self, other: object) -> bool:
            return True

        def __repr__(self) -> str:
            return "C!"

    return A, B, C


STD = _declare(dataclass(frozen=True, slots=True))
LAZY = _declare(frozen_dataclass)


def _behaviour(A: type, B: type, C: type) -> list[Any]:
    a, b = A(1), B(1, 2, [3], 4)
    out: list[Any] = [
        str(inspect.signature(A)), str(inspect.signature(B)), B.__doc__.replace(B.__qualname__, "B"),
        repr(a).split(".")[-1], repr(b).split(".")[-1], a == A(1), a == A(2), a == A(1, 3, [5]), a.__eq__(3),
        hash(a) == hash(A(1, 3, [9])), hash(b) == hash(B(1, 2, [], 5)), b.v, b.w, A.__match_args__, B.__match_args__,
        A.__slots__, B.__slots__, repr(dataclasses.replace(b, q=1)).split(".")[-1], copy.copy(b) == b,
        [f.name for f in dataclasses.fields(B)], repr(A.__dataclass_params__), A.__init__.__annotations__,
        C() == C(1), repr(C()), hash(C(1)) == hash(C(1)), hash(C(1)) == hash(C(2)),
        typing.get_type_hints(B.__init__), B.__init__.__module__, B.__repr__.__module__,
    ]
    for bad in ((), (1, 2, 3, 4)):
        with pytest.raises(TypeError) as err:
            A(*bad)
        out.append(str(err.value).split(".")[-1])
    with pytest.raises(dataclasses.FrozenInstanceError) as frozen:
        a.x = 2  # type: ignore[misc]
    out.append(str(frozen.value))
    with pytest.raises(dataclasses.FrozenInstanceError) as frozen:
        del b.q
    out.append(str(frozen.value))
    for other in (lambda: setattr(a, "other", 1), lambda: delattr(b, "other")):
        with pytest.raises(Exception) as err:
            other()
        out.append(type(err.value))
    out.append(pickle.loads(pickle.dumps(A.__getstate__(a))))
    c = object.__new__(B)
    c.__setstate__(b.__getstate__())
    out.append(repr(c).split(".")[-1])
    return out


def test_same_behaviour_as_dataclasses() -> None:
    assert _behaviour(*LAZY) == _behaviour(*STD)


def test_methods_written_on_first_use() -> None:
    A = _declare(frozen_dataclass)[0]
    assert type(A.__dict__["__init__"]).__name__ == "_Lazy"
    assert "A(x: 'int'" in A.__name__ + str(inspect.signature(A))  # the signature writes __init__ ...
    assert inspect.isfunction(A.__dict__["__init__"]) and A.__init__.__qualname__.endswith("A.__init__")
    assert type(A.__dict__["__repr__"]).__name__ == "_Lazy"  # ... and nothing else
    assert repr(A(1)).endswith("A(x=1, y=3, z=[])")
    assert inspect.isfunction(A.__dict__["__repr__"])


def test_not_covered_goes_to_dataclasses() -> None:
    @frozen_dataclass
    class D:
        """An InitVar: dataclasses writes the class."""

        a: int
        b: InitVar[int] = 0

        def __post_init__(self, b: int) -> None:
            object.__setattr__(self, "a", self.a + b)

    assert inspect.isfunction(D.__dict__["__init__"]) and D(1, 2).a == 3

    with pytest.raises(TypeError, match="cannot inherit frozen dataclass from a non-frozen one"):
        @frozen_dataclass
        class F(_Unfrozen):
            """On an unfrozen dataclass."""

    with pytest.raises(TypeError, match="non-default argument 'b' follows default argument"):
        @frozen_dataclass
        class E:
            """Bad order."""

            a: int = 0
            b: int  # type: ignore[misc]


def test_pickle() -> None:
    from rdmalab.wire.ib import BTH

    h = BTH(opcode=4, destqp=0x11, psn=5)
    assert pickle.loads(pickle.dumps(h)) == h and hash(pickle.loads(pickle.dumps(h))) == hash(h)


def _twin(cls: type) -> type:
    """``cls``'s fields declared again with ``dataclass(frozen=True, slots=True)``."""
    spec = []
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        kw: dict[str, Any] = {"init": f.init, "repr": f.repr, "compare": f.compare, "hash": f.hash}
        if f.default is not dataclasses.MISSING:
            kw["default"] = f.default
        if f.default_factory is not dataclasses.MISSING:
            kw["default_factory"] = f.default_factory
        spec.append((f.name, f.type, field(**kw)))
    ns = {"__post_init__": cls.__post_init__} if hasattr(cls, "__post_init__") else {}
    twin: type = dataclasses.make_dataclass(cls.__name__, spec, frozen=True, slots=True, namespace=ns)
    return twin


def _sample(cls: type) -> dict[str, Any]:
    return {f.name: 1 for f in dataclasses.fields(cls)  # type: ignore[arg-type]
            if f.init and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}


@pytest.mark.parametrize("module", WIRE_MODULES)
def test_every_declared_class_as_dataclasses_writes_it(module: str) -> None:
    """Every frozen slotted dataclass of the modules that declare them with ``frozen_dataclass``:
    signature, default doc, repr, equality and hash as dataclasses writes them for the same fields."""
    mod = importlib.import_module(module)
    classes = [c for c in vars(mod).values() if isinstance(c, type) and c.__module__ == module
               and dataclasses.is_dataclass(c) and c.__dataclass_params__.frozen and "__slots__" in c.__dict__]
    assert classes
    for cls in classes:
        twin = _twin(cls)
        assert str(inspect.signature(cls)) == str(inspect.signature(twin)), cls
        if cls.__doc__.startswith(cls.__name__ + "("):
            assert cls.__doc__ == twin.__doc__
        try:
            a, t = cls(**_sample(cls)), twin(**_sample(cls))
        except Exception:  # noqa: BLE001 - a class whose __post_init__ wants real values: signature only
            continue
        assert repr(a).replace(cls.__qualname__, cls.__name__) == repr(t), cls
        assert a == cls(**_sample(cls)) and hash(a) == hash(cls(**_sample(cls))), cls
        assert (a == 0) is False and a.__eq__(t) is NotImplemented


def test_import_writes_no_header_methods() -> None:
    """Importing the decoders writes none of the four methods of a class nothing built yet."""
    code = ("import rdmalab.wire.cm as cm, rdmalab.wire.smp as smp\n"
            "print(type(cm.CMDrep.__dict__['__init__']).__name__, type(smp.NodeInfo.__dict__['__eq__']).__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["_Lazy", "_Lazy"]
