"""``Pair(...)`` is a SoftPair or a LivePair by the backend, and both are Pairs (no fake subclassing)."""

from __future__ import annotations

from typing import Any

import pytest
from rdmalab_modules import rdmalab_modules

import rdmalab.lab.env
from rdmalab.fabric.harness import EndpointPair
from rdmalab.lab.pair import LivePair, Pair, SoftPair


class _Server:
    """What LivePair asks of a verbs server, without a kernel: counts the pairs it is asked for."""

    where = "nowhere (a test double)"
    loss = 0.0

    def __init__(self) -> None:
        self.pairs: list[dict[str, Any]] = []

    def pair(self, **kw: Any) -> tuple[Any, Any, float]:
        self.pairs.append(kw)

        class _End:
            def __init__(self, name: str, qpn: int) -> None:
                self.name = name
                self.qp = type("QP", (), {"qp_num": qpn})()

        return _End("rxe1", 0x11), _End("rxe2", 0x12), 0.0


@pytest.fixture
def rxe_here(monkeypatch: pytest.MonkeyPatch) -> None:
    """The backend check finds rxe (the server is the test double, so nothing else is asked of the machine)."""
    monkeypatch.setattr(rdmalab.lab.env, "rxe_where", lambda: "a test double")


def test_the_soft_backend_makes_a_soft_pair_that_is_a_pair_and_the_harness() -> None:
    p = Pair(backend="soft", mtu=2048)
    assert type(p) is SoftPair and isinstance(p, Pair) and isinstance(p, EndpointPair)
    assert p.backend == "soft" and p.mtu == 2048
    assert repr(p).startswith("Pair(soft0 QP") and repr(p).endswith("backend soft)")


def test_the_rxe_backend_makes_a_live_pair_that_is_a_pair_built_once(rxe_here: None) -> None:
    srv = _Server()
    p = Pair(backend="rxe", server=srv, mtu=4096, max_wr=8)
    assert type(p) is LivePair and isinstance(p, Pair) and not isinstance(p, SoftPair)
    assert len(srv.pairs) == 1  # Python called LivePair.__init__ once, not a second time after __new__
    assert srv.pairs[0]["cqe"] == 32 and p.mtu == 4096
    assert repr(p) == "Pair(rxe1 QP 0x11 <-> rxe2 QP 0x12, MTU 4096, backend rxe on nowhere (a test double))"
    with pytest.raises(AttributeError, match="no engine trace"):
        p.trace  # noqa: B018


def test_the_environment_picks_the_kind_when_no_backend_is_given(rxe_here: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RDMALAB_BACKEND", "rxe")
    assert type(Pair(server=_Server())) is LivePair
    assert type(SoftPair()) is SoftPair  # the checkers' replays stay on the simulator
    # the notebooks say Pair(backend=BACKEND) with BACKEND = "soft"; `rdmalab lab --backend rxe` sets the variable
    srv = _Server()
    assert type(Pair(backend="soft", server=srv)) is LivePair and len(srv.pairs) == 1
    monkeypatch.setenv("RDMALAB_BACKEND", "soft")
    assert type(Pair()) is SoftPair


def test_a_kind_asked_for_the_other_backend_says_so() -> None:
    with pytest.raises(ValueError, match=r"SoftPair runs on the 'soft' backend, not 'rxe'"):
        SoftPair(backend="rxe")
    with pytest.raises(ValueError, match=r"LivePair runs on the 'rxe' backend, not 'soft'"):
        LivePair(backend="soft", server=_Server())


def test_one_class_of_rdmalab_is_called_pair_and_one_module_scenarios_at_most() -> None:
    pairs, scenarios = [], []
    for mod in rdmalab_modules():
        if mod.__name__.rsplit(".", 1)[-1] == "scenarios":
            scenarios.append(mod.__name__)
        pairs += [f"{mod.__name__}.{k}" for k, v in vars(mod).items()
                  if k == "Pair" and isinstance(v, type) and v.__module__ == mod.__name__]
    assert pairs == ["rdmalab.lab.pair.Pair"]
    assert len(scenarios) <= 1, scenarios
