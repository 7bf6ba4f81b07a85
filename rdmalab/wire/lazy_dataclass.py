"""``@frozen_dataclass``: ``@dataclass(frozen=True, slots=True)`` whose methods are written on first use.

The wire modules declare about a hundred frozen, slotted dataclasses (every header, CM message and
MAD attribute).  For each, :func:`dataclasses.dataclass` writes the source of ``__init__``,
``__repr__``, ``__eq__``, ``__hash__``, ``__setattr__`` and ``__delattr__`` and compiles each one
with its own ``exec`` when the module is imported: about 580 compiles, two thirds of the time it took
to import the decoders, although a command such as ``rdmalab decode -T fields`` builds few of these
objects or none.  Here the class is made by :func:`dataclasses.dataclass` itself (fields,
``__dataclass_fields__``, slots, ``__match_args__``: everything :mod:`dataclasses` and
``dataclasses.replace`` read), the frozen ``__setattr__``/``__delattr__`` and the pickling state are
functions made without a compile, and the other four methods are written the first time one is
called (or its signature asked for, ``inspect.signature``), with the bodies :mod:`dataclasses`
(Python 3.11) gives them:

* ``__init__(self, <init fields, defaults as declared>)``: each field set through its slot,
  a ``default_factory`` called for each instance, ``__post_init__()`` last when the class has one;
* ``__repr__``: ``Name(field=value!r, ...)`` over the fields with ``repr=True``;
* ``__eq__``: the tuples of the ``compare=True`` fields, for two objects of the same class,
  else ``NotImplemented``;
* ``__hash__``: the hash of that tuple (of the fields with ``hash=True``, or ``hash=None`` and
  ``compare=True``).

A method the class body defines itself is kept, as :mod:`dataclasses` keeps it; a class without a
docstring gets the one :mod:`dataclasses` writes (its name and signature).  A class this subset
does not cover (an ``InitVar``, a keyword-only field) is handed to :func:`dataclasses.dataclass` whole.
``tests/wire/test_lazy_dataclass.py`` holds each written method to the one dataclasses writes.
"""

from __future__ import annotations

import dataclasses
import inspect  # (loaded by dataclasses already)
import reprlib
import sys
import types
from collections.abc import Callable
from typing import Any, TypeVar, dataclass_transform

_T = TypeVar("_T")

_LAZY = ("__init__", "__repr__", "__eq__", "__hash__")


@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field, dataclasses.Field))
def frozen_dataclass(cls: type[_T]) -> type[_T]:
    """``@dataclass(frozen=True, slots=True)``, with ``__init__``, ``__repr__``, ``__eq__`` and
    ``__hash__`` written when first used (see the module's docstring)."""
    own = cls.__dict__
    bases = [p for p in (getattr(b, "__dataclass_params__", None) for b in cls.__mro__[1:]) if p is not None]
    if (not _covered(cls) or "__setattr__" in own or "__delattr__" in own
            or (bases and not any(p.frozen for p in bases))):  # (dataclasses raises its errors for these)
        return dataclasses.dataclass(frozen=True, slots=True)(cls)
    docless = not own.get("__doc__")
    if docless:
        cls.__doc__ = "(written below)"  # (not from the signature of an __init__ not written yet)
    explicit_hash = own.get("__hash__", dataclasses.MISSING)
    keep_hash = not (explicit_hash is dataclasses.MISSING or (explicit_hash is None and "__eq__" in own))
    keep = {name for name in ("__init__", "__repr__", "__eq__") if name in own}
    # made unfrozen, then frozen here with the methods dataclasses would compile (closures: no compile);
    # dataclasses refuses an unfrozen class on frozen bases, so theirs read unfrozen meanwhile
    bases = [p for p in bases if p.frozen]
    for p in bases:
        p.frozen = False
    try:
        made: Any = dataclasses.dataclass(slots=True, init=False, repr=False, eq=False)(cls)
    finally:
        for p in bases:
            p.frozen = True
    fields = dataclasses.fields(made)
    for fn in _frozen_methods(cls, tuple(f.name for f in fields)):
        fn.__qualname__ = f"{made.__qualname__}.{fn.__name__}"
        setattr(made, fn.__name__, fn)
    made.__getstate__ = dataclasses._dataclass_getstate  # type: ignore[attr-defined]  # (pickling, as
    made.__setstate__ = dataclasses._dataclass_setstate  # type: ignore[attr-defined]  # dataclasses' slots)
    params = made.__dataclass_params__  # what the class is, as dataclasses would record it
    params.init = params.repr = params.eq = params.frozen = True
    seen_default = None
    for f in fields:  # the error dataclasses raises at the declaration, not at the first instance
        if not f.init:
            continue
        if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING:
            seen_default = f
        elif seen_default is not None:
            raise TypeError(f"non-default argument {f.name!r} follows default argument")
    if docless:  # dataclasses' doc for a class without one: its name and __init__'s signature
        made.__doc__ = made.__name__ + str(_signature(fields)).replace(" -> None", "")
    for name, build in zip(_LAZY, (_init_fn, _repr_fn, _eq_fn, _hash_fn), strict=True):
        if name in keep or (name == "__hash__" and keep_hash):
            continue
        setattr(made, name, _Lazy(made, name, build))
    result: type[_T] = made
    return result


def _frozen_methods(declared: type[Any], names: tuple[str, ...]) -> tuple[Callable[..., None], Callable[..., None]]:
    """``__setattr__`` and ``__delattr__`` of a frozen dataclass, as dataclasses writes them (Python 3.11:
    ``declared`` is the class as declared, before it is made again with slots)."""
    error = dataclasses.FrozenInstanceError

    def __setattr__(self: Any, name: str, value: Any) -> None:
        if type(self) is declared or name in names:
            raise error(f"cannot assign to field {name!r}")
        super(declared, self).__setattr__(name, value)

    def __delattr__(self: Any, name: str) -> None:
        if type(self) is declared or name in names:
            raise error(f"cannot delete field {name!r}")
        super(declared, self).__delattr__(name)

    return __setattr__, __delattr__


def _covered(cls: type) -> bool:
    """Whether the methods written here are the ones dataclasses would write for ``cls``: no
    ``InitVar`` or keyword-only field (declared here or inherited), no field named ``self``."""
    own = cls.__dict__
    ann = own.get("__annotations__", {})
    text = " ".join(map(str, ann.values()))
    if "self" in ann or "InitVar" in text or "KW_ONLY" in text:
        return False
    if any(isinstance(v, dataclasses.Field) and v.kw_only is True for v in own.values()):
        return False
    initvar = dataclasses._FIELD_INITVAR  # type: ignore[attr-defined]  # (fields() leaves InitVars out)
    return not any(f._field_type is initvar or f.kw_only is True
                   for base in cls.__mro__[1:] for f in getattr(base, "__dataclass_fields__", {}).values())


class _Lazy:
    """A method of ``cls`` still to be written: the first call (or ``__signature__``) writes it with
    ``build(cls)``, puts it on the class in this object's place and runs it."""

    __slots__ = ("cls", "name", "build")

    def __init__(self, cls: type, name: str, build: Callable[[type], Callable[..., Any]]) -> None:
        self.cls, self.name, self.build = cls, name, build

    def method(self) -> Callable[..., Any]:
        fn = self.cls.__dict__.get(self.name)
        if fn is self:  # (not written yet: a concurrent first call may have done it meanwhile)
            fn = self.build(self.cls)
            fn.__qualname__ = f"{self.cls.__qualname__}.{self.name}"
            setattr(self.cls, self.name, fn)
        assert callable(fn)
        written: Callable[..., Any] = fn
        return written

    def __get__(self, obj: object, owner: type | None = None) -> Any:
        if obj is None:
            return self
        return types.MethodType(self, obj)

    def __call__(self, obj: object, *args: Any, **kwargs: Any) -> Any:
        return self.method()(obj, *args, **kwargs)

    @property
    def __signature__(self) -> inspect.Signature:
        return inspect.signature(self.method())


def _signature(fields: tuple[dataclasses.Field[Any], ...]) -> inspect.Signature:
    """The signature of the class (``__init__``'s without ``self``), without writing ``__init__``."""
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    params = [inspect.Parameter(f.name, kind, annotation=f.type,
                                default=(_HAS_FACTORY if f.default_factory is not dataclasses.MISSING
                                         else inspect.Parameter.empty if f.default is dataclasses.MISSING
                                         else f.default))
              for f in fields if f.init]
    return inspect.Signature(params, return_annotation=None)


def _compile(cls: type, name: str, source: str, ns: dict[str, Any]) -> Callable[..., Any]:
    """The function ``name`` of ``source``, as dataclasses makes it: defined inside a function whose
    parameters are ``ns`` (the values the source uses), with the class's module as its globals (where
    ``typing.get_type_hints`` looks up the annotations)."""
    module = sys.modules.get(cls.__module__)
    glb = module.__dict__ if module is not None else {}
    inner = "".join(f"  {line}\n" for line in source.splitlines())
    local: dict[str, Any] = {}
    exec(f"def __create_fn__({', '.join(ns)}):\n{inner}  return {name}\n", glb, local)  # noqa: S102 - source
    fn: Callable[..., Any] = local["__create_fn__"](**ns)  # built from the class's own field declarations
    return fn


def _init_fn(cls: type) -> Callable[..., Any]:
    fields = dataclasses.fields(cls)
    ns: dict[str, Any] = {"__dc_object_setattr": object.__setattr__, "__dc_HAS_FACTORY": _HAS_FACTORY}
    params, body = ["self"], []
    for i, f in enumerate(fields):
        slot = getattr(cls, f.name, None)
        if isinstance(slot, types.MemberDescriptorType):
            ns[f"__dc_set{i}"] = slot.__set__  # the slot's own descriptor, as object.__setattr__ would reach it
            setter = f"__dc_set{i}(self, {{}})"
        else:
            setter = f"__dc_object_setattr(self, {f.name!r}, {{}})"
        factory = f.default_factory is not dataclasses.MISSING
        if factory:
            ns[f"__dc_factory{i}"] = f.default_factory
        if f.init:
            if factory:
                params.append(f"{f.name}=__dc_HAS_FACTORY")
                value = f"__dc_factory{i}() if {f.name} is __dc_HAS_FACTORY else {f.name}"
            elif f.default is not dataclasses.MISSING:
                ns[f"__dc_default{i}"] = f.default
                params.append(f"{f.name}=__dc_default{i}")
                value = f.name
            else:
                params.append(f.name)
                value = f.name
        elif factory:
            value = f"__dc_factory{i}()"
        elif f.default is not dataclasses.MISSING:
            ns[f"__dc_default{i}"] = f.default
            value = f"__dc_default{i}"
        else:
            continue  # init=False and no default: left unset, as dataclasses leaves it
        body.append("    " + setter.format(value))
    if hasattr(cls, "__post_init__"):
        body.append("    self.__post_init__()")
    source = f"def __init__({', '.join(params)}):\n" + ("\n".join(body) or "    pass") + "\n"
    fn = _compile(cls, "__init__", source, ns)
    fn.__annotations__ = {f.name: f.type for f in fields if f.init} | {"return": None}
    return fn


def _repr_fn(cls: type) -> Callable[..., Any]:
    parts = ", ".join(f"{f.name}={{self.{f.name}!r}}" for f in dataclasses.fields(cls) if f.repr)
    fn = _compile(cls, "__repr__", f"def __repr__(self):\n"
                                    f"    return self.__class__.__qualname__ + f'({parts})'\n", {})
    return reprlib.recursive_repr()(fn)  # "..." for an object met again inside its own repr, as dataclasses


def _compared(cls: type, which: str) -> str:
    names = [f"{which}.{f.name}," for f in dataclasses.fields(cls) if f.compare]
    return f"({''.join(names)})"


def _eq_fn(cls: type) -> Callable[..., Any]:
    return _compile(cls, "__eq__", "def __eq__(self, other):\n"
                                   "    if other.__class__ is self.__class__:\n"
                                   f"        return {_compared(cls, 'self')} == {_compared(cls, 'other')}\n"
                                   "    return NotImplemented\n", {})


def _hash_fn(cls: type) -> Callable[..., Any]:
    names = [f"self.{f.name}," for f in dataclasses.fields(cls)
             if (f.compare if f.hash is None else f.hash)]
    return _compile(cls, "__hash__", f"def __hash__(self):\n    return hash(({''.join(names)}))\n", {})


class _HasFactory:
    """The default of a parameter whose field has a ``default_factory`` (dataclasses' own sentinel is private)."""

    def __repr__(self) -> str:
        return "<factory>"


_HAS_FACTORY = _HasFactory()
