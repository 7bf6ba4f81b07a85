from __future__ import annotations

import pytest

import rdmalab.verbs.enums as e
from rdmalab.fabric import Fabric
from rdmalab.fabric.harness import EndpointPair


@pytest.fixture
def fabric() -> Fabric:
    return Fabric(seed=1)


@pytest.fixture(params=[e.IBV_QPT_RC, e.IBV_QPT_UC], ids=["RC", "UC"])
def connected(request: pytest.FixtureRequest) -> EndpointPair:
    return EndpointPair(qp_type=request.param)
