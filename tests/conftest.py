import os

import numpy as np
import pytest

# the suite's builds stay in memory: a developer's cache on disk neither serves nor receives them (the disk cache's
# own tests point DVMLANG_CACHE_DIR at a folder of their own)
os.environ["DVMLANG_CACHE_DIR"] = "off"
# every template the fuser composes meets the validator here (a user's process decodes them without its pass:
# fuser/build.trusted); tests of the trusted path set it back themselves
os.environ["DVMLANG_VALIDATE"] = "always"

import dvmlang  # noqa: E402


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
    which earlier test made the same kernel (fuser/build.py shares builds by structure, fuser/codegen.py a
    Kernel by its text)."""
    from dvmlang.fuser import build, codegen
    build.settle()  # (an earlier test's builds ahead land before the table is emptied, not after)
    codegen._BUILT.clear()
    build.forget()
    yield


@pytest.fixture(autouse=True, scope="module")
def _fresh_per_module():
    """After each test module: dynamo starts afresh (``torch._dynamo.reset()``, as a new process would) and the
    torch backend's latest launch records go; then what is still alive is moved out of the cycle collector's
    generations (``gc.freeze()``). The suite's process keeps what its modules' kernels, models and torch itself hold
    (a training graph's autograd function stays referenced from ``transformers``' modules, with its programs and the
    simulator's steps for them: millions of objects after the torch tests), and every full collection walked all of
    them again: a test after ``test_torch_zoo.py`` ran 3-5x slower than alone. Frozen objects are still freed by
    reference counting; a cycle among them is not collected (memory, not results)."""
    yield
    import gc
    import sys
    if "torch._dynamo" in sys.modules:
        sys.modules["torch._dynamo"].reset()
    if "dvmlang.torch.stats" in sys.modules:
        sys.modules["dvmlang.torch.stats"].LAST_LAUNCHES.clear()
    gc.collect()
    gc.freeze()
