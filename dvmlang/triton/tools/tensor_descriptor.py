"""``triton.tools.tensor_descriptor.TensorDescriptor``: a host-side tensor descriptor. dvmlang launches take no
descriptor arguments: creating one raises, pointing at the in-kernel ``tl.make_tensor_descriptor`` (a DMA
descriptor here, with zero padding). Triton's tutorials 06, 08 and 09 create host descriptors only when
``supports_host_descriptor()`` / ``supports_tma()`` hold (CUDA, compute capability 9 or more), so on this device
they take their own paths without them (docs/triton.md, the ``TensorDescriptor`` row)."""

from __future__ import annotations

from ...errors import ArgumentError


class TensorDescriptor:
    def __init__(self, base=None, shape=None, strides=None, block_shape=None, padding="zero"):
        raise ArgumentError("host TensorDescriptor arguments are not supported by dvmlang launches; pass the tensor "
                            "and create the descriptor inside the kernel with tl.make_tensor_descriptor(ptr, shape, "
                            "strides, block_shape) (as Triton's tutorials do when supports_host_descriptor() is "
                            "False)")

    @staticmethod
    def from_tensor(tensor, block_shape, padding="zero"):
        return TensorDescriptor(tensor, tensor.shape, None, block_shape, padding)


__all__ = ["TensorDescriptor"]
