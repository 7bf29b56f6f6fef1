"""Kernels the jaxptx.torch tests call on torch tensors (no torch needed here)."""

from __future__ import annotations

from jaxptx import Tile, kernel, ptx
from jaxptx.jax import in_place
from jaxptx.types import bf16, f32, s32, u32

BLOCK = 32


@kernel(in_specs=(Tile("B", "N", f32),), out_specs=(Tile("B", "N", f32),),
        grid=lambda B: (B, 1, 1), block=(BLOCK, 1, 1), arch="sm_80")
def scale_rows(x, y, *, factor=2.0):
    """``y = x * factor`` (a template value: one PTX per factor), a CTA per
    row, any row length."""
    tid = ptx.special.tid.x()
    row = ptx.mul.wide.u32(ptx.special.ctaid.x(), x.shape[1] * 4)
    for i in ptx.range_(tid, x.shape[1], BLOCK, dtype=u32):
        off = row + ptx.mul.wide.u32(i, 4)
        ptx.st.global_.f32(y.ptr + off, ptx.ld.global_.f32(x.ptr + off) * factor)


@kernel(in_specs=(Tile("N", f32),), out_specs=(Tile("N", f32), Tile("N", s32)),
        raw_params=[("f32", "alpha")], grid=lambda N: (N // BLOCK, 1, 1),
        block=(BLOCK, 1, 1), arch="sm_80")
def axpy_index(x, y, z):
    """``y = x * alpha + 1`` (``alpha`` a raw scalar param) and ``z = index``;
    N a multiple of 32."""
    i = ptx.special.ctaid.x() * BLOCK + ptx.special.tid.x()
    off = ptx.mul.wide.u32(i, 4)
    v = ptx.ld.global_.f32(x.ptr + off)
    ptx.st.global_.f32(y.ptr + off, ptx.fma.rn.f32(v, ptx.param("alpha"), 1.0))
    ptx.st.global_.s32(z.ptr + off, i)


@kernel(in_specs=(Tile("N", bf16),), out_specs=(Tile("N", bf16),),
        grid=lambda N: (N // BLOCK, 1, 1), block=(BLOCK, 1, 1), arch="sm_80")
def negate_bf16(x, y):
    """``y = -x`` on bf16 bits (the sign bit flipped); N a multiple of 32."""
    off = ptx.mul.wide.u32(ptx.special.ctaid.x() * BLOCK + ptx.special.tid.x(), 2)
    v = ptx.ld.global_.b16(x.ptr + off)
    ptx.st.global_.b16(y.ptr + off, ptx.xor.b16(v, 0x8000))


@in_place(y="x")
@kernel(in_specs=(Tile("N", f32),), out_specs=(Tile("N", f32),),
        grid=lambda N: (N // BLOCK, 1, 1), block=(BLOCK, 1, 1), arch="sm_80")
def add_one_in_place(x, y):
    """``x += 1`` in x's buffer; N a multiple of 32."""
    off = ptx.mul.wide.u32(ptx.special.ctaid.x() * BLOCK + ptx.special.tid.x(), 4)
    ptx.st.global_.f32(y.ptr + off, ptx.ld.global_.f32(y.ptr + off) + 1.0)


@kernel(in_specs=(Tile("N", s32),), out_specs=(Tile("N", s32),),
        grid=lambda N: (N // BLOCK, 1, 1), block=(BLOCK, 1, 1), arch="sm_80")
def increment_s32(x, y):
    """``y = x + 1`` on .s32 values; N a multiple of 32."""
    off = ptx.mul.wide.u32(ptx.special.ctaid.x() * BLOCK + ptx.special.tid.x(), 4)
    ptx.st.global_.s32(y.ptr + off, ptx.ld.global_.s32(x.ptr + off) + 1)


__all__ = ["scale_rows", "axpy_index", "negate_bf16", "add_one_in_place", "increment_s32"]
