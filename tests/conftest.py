import numpy as np
import pytest

import dvmlang


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.fixture
def sequential_device():
    """The one-program-at-a-time reference path of the simulator."""
    return dvmlang.npu.Device(sequential=True)


def pytest_configure(config):
    import dvmlang.npu  # noqa: F401 - make dvmlang.npu importable as an attribute


# Triton's own tests (verbatim inputs of tests/triton_conformance.py) are not tests of this suite
collect_ignore_glob = ["triton_upstream/*"]


@pytest.fixture(autouse=True)
def _own_fused_kernels():
    """Each test's graphs build their own fused kernels: a test counting builds and encodes does not depend on
    which earlier test made the same kernel text (fuser/codegen.py shares a Kernel while it lives)."""
    from dvmlang.fuser import codegen
    codegen._BUILT.clear()
    yield
