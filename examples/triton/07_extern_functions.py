"""
Libdevice (`tl.extra.libdevice`) function
==============================

Triton's tutorial 07 (python/tutorials/07-extern-functions.py, MIT, (c) the Triton authors: see LICENSE here),
run on dvmlang's simulated NPU. Changed from the tutorial:

* the imports: ``import dvmlang.triton as triton``, ``import dvmlang.triton.language as tl``,
  ``from dvmlang.triton.language.extra import libdevice``.
* ``DEVICE``: unchanged (``get_active_torch_device()`` is ``torch.device("cpu")`` here). The tutorial's
  ``assert x.is_cuda and output_triton.is_cuda`` asserts the tensors are on that device instead: CPU tensors
  are not ``is_cuda``.
* sizes: the tutorial's (98432 elements).
* the statements that run the kernel are in ``run()`` (the gallery's entry point), not at module level;
  ``run()`` also asserts what the tutorial prints (the maximum difference against torch, twice).
* one line: the tutorial's ``else: raise RuntimeError('unknown backend')`` (the target is neither CUDA nor
  HIP: its ``backend`` is ``"npu"``) sets ``extern_libs = {}`` instead. The simulated NPU's libdevice
  functions are built in, so there is no bitcode file to name; the launch still passes ``extern_libs=``,
  which is accepted and has no effect (docs/language.md, launch options).

No other line changed. ``libdevice.asin`` is the device's ``asin`` (C's semantics; docs/triton.md).
The tutorial has no benchmark.
"""

# %%
#  asin Kernel
# ------------

import torch

import dvmlang.triton as triton
import dvmlang.triton.language as tl
import inspect
import os
from dvmlang.triton.language.extra import libdevice

from pathlib import Path

DEVICE = triton.runtime.driver.active.get_active_torch_device()


@triton.jit
def asin_kernel(
    x_ptr,
    y_ptr,
    n_elements,
    BLOCK_SIZE: tl.constexpr,
):
    pid = tl.program_id(axis=0)
    block_start = pid * BLOCK_SIZE
    offsets = block_start + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    x = libdevice.asin(x)
    tl.store(y_ptr + offsets, x, mask=mask)


# %%
#  Using the default libdevice library path
# -----------------------------------------
# We can use the default libdevice library path encoded in `triton/language/math.py`

# %%
#  Customize the libdevice library path
# -------------------------------------
# We can also customize the libdevice library path by passing the path to the `libdevice` library to the `asin` kernel.
def is_cuda():
    return triton.runtime.driver.active.get_current_target().backend == "cuda"


def is_hip():
    return triton.runtime.driver.active.get_current_target().backend == "hip"


def run():
    torch.manual_seed(0)
    size = 98432
    x = torch.rand(size, device=DEVICE)
    output_triton = torch.zeros(size, device=DEVICE)
    output_torch = torch.asin(x)
    assert x.device == DEVICE and output_triton.device == DEVICE  # dvmlang: was x.is_cuda and output_triton.is_cuda
    n_elements = output_torch.numel()
    grid = lambda meta: (triton.cdiv(n_elements, meta['BLOCK_SIZE']), )
    asin_kernel[grid](x, output_triton, n_elements, BLOCK_SIZE=1024)
    print(output_torch)
    print(output_triton)
    print(f'The maximum difference between torch and triton is '
          f'{torch.max(torch.abs(output_torch - output_triton))}')

    assert torch.allclose(output_triton, output_torch, atol=1e-6, rtol=1e-6), "libdevice.asin and torch.asin differ"

    current_file = inspect.getfile(inspect.currentframe())
    current_dir = Path(os.path.dirname(os.path.abspath(current_file)))

    if is_cuda():
        libdir = current_dir.parent.parent / 'third_party/nvidia/backend/lib'
        extern_libs = {'libdevice': str(libdir / 'libdevice.10.bc')}
    elif is_hip():
        libdir = current_dir.parent.parent / 'third_party/amd/backend/lib'
        extern_libs = {}
        libs = ["ocml", "ockl"]
        for lib in libs:
            extern_libs[lib] = str(libdir / f'{lib}.bc')
    else:
        extern_libs = {}  # dvmlang: was raise RuntimeError('unknown backend'); libdevice is built in

    output_triton = torch.empty_like(x)
    asin_kernel[grid](x, output_triton, n_elements, BLOCK_SIZE=1024, extern_libs=extern_libs)
    print(output_torch)
    print(output_triton)
    print(f'The maximum difference between torch and triton is '
          f'{torch.max(torch.abs(output_torch - output_triton))}')

    assert torch.allclose(output_triton, output_torch, atol=1e-6, rtol=1e-6), "libdevice.asin and torch.asin differ"


if __name__ == "__main__":
    run()
