"""``triton.tools.tensor_descriptor.TensorDescriptor``: a host-side tensor descriptor. dvmlang kernels take no
descriptor arguments yet: creating one raises, pointing at the in-kernel ``tl.make_tensor_descriptor``."""

from __future__ import annotations

from ...errors import ArgumentError


class TensorDescriptor:
    def __init__(self, base=None, shape=None, strides=None, block_shape=None, padding="zero"):
        raise ArgumentError("host TensorDescriptor arguments are not supported by dvmlang launches yet; create the "
                            "descriptor inside the kernel with tl.make_tensor_descriptor(ptr, shape, strides, "
                            "block_shape)")

    @staticmethod
    def from_tensor(tensor, block_shape, padding="zero"):
        return TensorDescriptor(tensor, tensor.shape, None, block_shape, padding)


__all__ = ["TensorDescriptor"]
