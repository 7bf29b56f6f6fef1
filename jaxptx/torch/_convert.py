"""Torch tensors <-> numpy arrays and dtypes, for the emulator path.

torch is imported by the caller (``jaxptx.torch`` loads it on first use).
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from ..errors import SpecError

__all__ = ["numpy_dtype", "torch_dtype", "to_numpy", "from_numpy"]

# torch dtype name -> numpy dtype. Only these reach a kernel.
_NUMPY = {"float32": np.float32, "float64": np.float64, "float16": np.float16,
          "bfloat16": ml_dtypes.bfloat16, "float8_e4m3fn": ml_dtypes.float8_e4m3fn,
          "float8_e5m2": ml_dtypes.float8_e5m2, "int8": np.int8, "int16": np.int16,
          "int32": np.int32, "int64": np.int64, "uint8": np.uint8, "uint16": np.uint16,
          "uint32": np.uint32, "uint64": np.uint64, "bool": np.bool_}
# numpy has no bfloat16/float8: those cross as same-size integers.
_CARRIER = {"bfloat16": "int16", "float8_e4m3fn": "uint8", "float8_e5m2": "uint8"}


def _name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def numpy_dtype(dtype: Any) -> np.dtype:
    """The numpy dtype of a torch dtype.

    Raises:
        SpecError: a dtype no kernel takes (complex, quantized...).
    """
    name = _name(dtype)
    if name not in _NUMPY:
        raise SpecError(f"jaxptx.torch: tensors of {dtype} cannot reach a kernel; "
                        f"use one of {', '.join(sorted(_NUMPY))}")
    return np.dtype(_NUMPY[name])


def torch_dtype(dtype: Any) -> Any:
    """The torch dtype of a numpy (or JAX) dtype.

    Raises:
        SpecError: torch has no such dtype.
    """
    import torch  # optional, heavy

    name = np.dtype(dtype).name
    if name == "bool":
        return torch.bool
    found = getattr(torch, name, None)
    if not isinstance(found, torch.dtype):
        raise SpecError(f"jaxptx.torch: torch has no dtype for {name}")
    return found


def to_numpy(t: Any) -> np.ndarray:
    """A CPU tensor's data as a numpy array (a view where torch allows it)."""
    import torch  # optional, heavy

    name = _name(t.dtype)
    t = t.detach().contiguous()
    if name in _CARRIER:
        return t.view(getattr(torch, _CARRIER[name])).numpy().view(_NUMPY[name])
    return t.numpy()


def from_numpy(a: Any) -> Any:
    """A CPU tensor holding a copy of array ``a``."""
    import torch  # optional, heavy

    a = np.array(a)  # owned and writable
    name = a.dtype.name
    if name in _CARRIER:
        return torch.from_numpy(a.view(_CARRIER[name])).view(torch_dtype(a.dtype))
    return torch.from_numpy(a)
