"""Compiling Triton kernels to PTX on this CPU-only machine, for the tests
that run real compiler output on the emulator (triton must be installed)."""

from __future__ import annotations

import os

import numpy as np

from jaxptx import parse
from jaxptx.runtime._toolchain import find_tool


def compile_ptx(fn, signature: dict, constexprs: dict, capability: int, num_warps: int = 4):
    """``triton.compile`` for ``sm_<capability>``; the result's ``.asm["ptx"]``
    is the PTX."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")   # Triton 3.9 warns when unset
    # Triton's own ptxas would write .version 9.4 for sm_100, which ptxas 13.0 rejects.
    os.environ.setdefault("TRITON_PTXAS_BLACKWELL_PATH", find_tool("ptxas"))
    source = ASTSource(fn=fn, signature=signature, constexprs=constexprs)
    return triton.compile(source, target=GPUTarget("cuda", capability, 32), options={"num_warps": num_warps})


def extra_params(ptx: str, given: int) -> list[np.ndarray]:
    """Arguments for the scratch-pointer params Triton appends (unused here)."""
    count = len(parse(ptx).functions[0].params)
    return [np.zeros(16, np.uint8) for _ in range(count - given)]
