"""A transfer of a replayed launch (npu/replay.py) as one view of its tensor: which boxes of a batch's programs are
one slice (or one strided view) of the tensor, worked out once from the step's descriptor, and the padding a box
smaller than its tile is put in. The replay reads and writes the view itself, as ``dma.dma_read`` and
``dma.dma_write`` read and write it."""

from __future__ import annotations

import numpy as np

from .boxview import _contiguous, _overlapping, _padded
from .dma import Desc, _uniform_desc


def direct_plan(desc: Desc, n: int, shape, write: bool):
    """What a replay (npu/replay.py) writes a transfer of a batch of ``n`` programs as, when their boxes are one view
    of the tensor of the size ``desc`` was checked against: (start element, the view's shape and strides in
    elements, its size when it is row-major contiguous and inside the tensor, else None, the box's slices in the
    tile). That is when the descriptor is the same for every program, its bases step uniformly and its box is not
    empty; for a read, ``dma_read``'s first way (its view, or a box of it put in the padding: the caller tells which
    from the box); for a write, the programs' boxes do not overlap and are one row each (``dma_write``'s first way,
    without its loop). None otherwise."""
    u = _uniform_desc(desc, n)
    if u is None or u.prog is None or u.empty or desc.checked < 0:
        return None
    first, step = u.prog
    if write:
        if not (n == 1 or desc.base.ndim) or _overlapping(step, u.st, u.ext, n):
            return None
        rows = n
    else:
        rows = n if (n == 1 or step != 0 or desc.base.ndim) else 1
    vshape, strides = (rows,) + u.ext, (step,) + u.st
    start = first + u.offset
    size = _contiguous(vshape, strides)
    if size is not None and not (0 <= start and start + size <= desc.checked):
        size = None
    return start, vshape, strides, size, u.box


def padding(rows: int, shape, npdt, pad) -> np.ndarray:
    """A tile of ``rows`` rows full of one padding value, as ``_padded`` makes it (a replay copies it, then puts
    the box in)."""
    return _padded(rows, shape, npdt, pad)
