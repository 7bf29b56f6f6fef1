"""Launching a kernel on CUDA tensors through the shim's CUDA handler.

The kernel is lowered for CUDA once per shape (``jax.jit(...).lower(
lowering_platforms=("cuda",))``, which needs no GPU) and its custom call read
back (:func:`jaxptx.runtime.cuda_calls`). Each launch hands that
call to the same handler XLA runs (``jaxptx_launch_v2``), with a call frame
whose buffers are the tensors' device pointers, on torch's current stream;
scratch memory (private copies of inputs a kernel may write) comes from
torch's caching allocator. The module image is registered once per kernel:
a cubin, or PTX for the driver's JIT when the compiler is newer than the
driver (:func:`jaxptx.runtime.module_image`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .. import _ffi
from ..errors import SpecError
from ..runtime import XLA_DTYPES, CudaCall

__all__ = ["Buffer", "TorchScratch", "launch", "register_image", "frames"]

# (XLA_FFI_DataType code, device address, dims), as call_cuda_handler takes them.
Buffer = tuple[int, int, tuple[int, ...]]


def _code(dtype: Any) -> int:
    name = np.dtype(dtype).name
    if name not in XLA_DTYPES:
        raise SpecError(f"jaxptx.torch: no XLA buffer type for {name}")
    return XLA_DTYPES[name]


def frames(call: CudaCall, inputs: Sequence[int], outputs: Sequence[int]) -> tuple[list[Buffer], list[Buffer]]:
    """The call frame's buffers: each input and output address with the
    call's dtype code and dims. An in-place output (``call.aliases``) must
    be given the same address as its input."""
    if len(inputs) != len(call.inputs) or len(outputs) != len(call.outputs):
        raise SpecError(f"jaxptx.torch: the call takes {len(call.inputs)} inputs and "
                        f"{len(call.outputs)} outputs, got {len(inputs)} and {len(outputs)}")
    for j, i in call.aliases:
        if outputs[j] != inputs[i]:
            raise SpecError(f"jaxptx.torch: in-place output {j} must share input {i}'s buffer")
    frame_in = [(_code(d), int(p), tuple(s)) for (s, d), p in zip(call.inputs, inputs)]
    frame_out = [(_code(d), int(p), tuple(s)) for (s, d), p in zip(call.outputs, outputs)]
    return frame_in, frame_out


def launch(call: CudaCall, inputs: Sequence[int], outputs: Sequence[int], stream: int,
           scratch: Any) -> None:
    """Run the CUDA handler on one call: device addresses of the inputs and
    outputs, the stream (0: the current context's default), and an object
    with ``alloc(size, alignment) -> address`` / ``free(address, size)``.

    Raises:
        RuntimeError: the handler failed (its message says why).
    """
    frame_in, frame_out = frames(call, inputs, outputs)
    code, message = _ffi.call_cuda_handler(frame_in, frame_out, list(call.attributes),
                                           int(stream), scratch)
    if code:
        raise RuntimeError(f"jaxptx.torch: {message}")


def register_image(call: CudaCall, arch: str,
                   image: Callable[[str, str], bytes] | None = None) -> None:
    """Register the call's module image for ``arch`` with the handler, once
    per kernel id (``image(ptx, arch)``; default
    :func:`jaxptx.runtime.module_image`). Unregistered, the handler would
    JIT-compile the PTX on each context's first launch."""
    kernel_id = call["kernel_id"]
    if _ffi.cuda_registered(kernel_id):
        return
    if image is None:
        from ..runtime import module_image as image
    ptx = call["ptx"].decode()
    _ffi.cuda_register(kernel_id, image(ptx, arch), ptx, call["entry"].decode(),
                       len(call.inputs) + len(call.outputs))


class TorchScratch:
    """Scratch memory for the handler from torch's caching allocator, on
    ``device``. Freed blocks return to torch's pool in stream order, so a
    block the launch still reads is not handed out before it runs."""

    def __init__(self, device: Any) -> None:
        self.device = device
        self._blocks: dict[int, Any] = {}

    def alloc(self, size: int, alignment: int) -> int:
        """``size`` bytes aligned to ``alignment``; their address."""
        import torch

        block = torch.empty(size + alignment, dtype=torch.uint8, device=self.device)
        address = block.data_ptr()
        address += (-address) % alignment
        self._blocks[address] = block
        return address

    def free(self, address: int, size: int) -> None:
        """Give a block back."""
        self._blocks.pop(address, None)
