"""The one budget knob of the differential generators.

``DVMLANG_FUZZ_SCALE`` multiplies every generator's example count (default 1, the CI budget). Run the
generators 20x longer with ``DVMLANG_FUZZ_SCALE=20 python -m pytest tests/test_diff_*.py``. Seeds are
fixed (``derandomize``) so a CI failure reproduces; a scaled run explores further from the same start.
"""

import contextlib
import os

from hypothesis import HealthCheck, settings

SCALE = max(1, int(os.environ.get("DVMLANG_FUZZ_SCALE", "1")))


def budget(examples: int, **kw) -> settings:
    """Hypothesis settings for a differential generator: ``examples`` at scale 1, times DVMLANG_FUZZ_SCALE."""
    return settings(max_examples=examples * SCALE, deadline=None, database=None, derandomize=True,
                    suppress_health_check=list(HealthCheck), **kw)


@contextlib.contextmanager
def side_by_side():
    """Inside this block a batch's tile computations run on the host's worker threads however small they are
    (the path a large launch takes, ``dvmlang/npu/host.py``), so small random programs exercise it."""
    from dvmlang.npu import host
    saved = host.THREADS, host.MIN_BYTES
    host.THREADS, host.MIN_BYTES = 3, 0
    try:
        yield
    finally:
        host.THREADS, host.MIN_BYTES = saved
