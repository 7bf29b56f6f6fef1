"""Small DSL kernels for the JAX integration tests (each launch runs on the
CPU emulator, so they stay tiny)."""

from __future__ import annotations

from jaxptx import Tile, kernel, ptx
from jaxptx.types import f32, s32

BLOCK = 128


def _index():
    return ptx.special.ctaid.x() * BLOCK + ptx.special.tid.x()


@kernel(in_specs=(Tile("N", f32),), out_specs=(Tile("N", f32),),
        grid=lambda N: (N // BLOCK, 1, 1), block=(BLOCK, 1, 1), arch="sm_90a")
def affine(x, y):
    """y = x * 2 + 1."""
    off = ptx.mul.wide.u32(_index(), 4)
    v = ptx.ld.global_.f32(x.ptr + off)
    ptx.st.global_.f32(y.ptr + off, v * 2.0 + 1.0)


@kernel(in_specs=(Tile("N", f32), Tile("N", f32), Tile("N", f32)), out_specs=(Tile("N", f32),),
        grid=lambda N: (N // BLOCK, 1, 1), block=(BLOCK, 1, 1), arch="sm_90a")
def affine_bwd(x, y, dy, dx):
    """The VJP of ``affine``: dx = dy * 2."""
    off = ptx.mul.wide.u32(_index(), 4)
    g = ptx.ld.global_.f32(dy.ptr + off)
    ptx.st.global_.f32(dx.ptr + off, g * 2.0)


@kernel(in_specs=(Tile("N", f32), Tile("N", f32)), out_specs=(Tile("N", f32), Tile("N", s32)),
        grid=lambda N: (N // BLOCK, 1, 1), block=(BLOCK, 1, 1), arch="sm_90a")
def axpy_index(x, w, y, idx, *, scale=3.0):
    """y = x * scale + w and idx = the global thread index (two outputs, two dtypes)."""
    i = _index()
    off = ptx.mul.wide.u32(i, 4)
    v = ptx.ld.global_.f32(x.ptr + off)
    b = ptx.ld.global_.f32(w.ptr + off)
    ptx.st.global_.f32(y.ptr + off, v * float(scale) + b)
    ptx.st.global_.s32(idx.ptr + off, i)


@kernel(in_specs=(Tile("N", f32),), out_specs=(Tile("N", f32),),
        grid=lambda N: (N // BLOCK, 1, 1), block=(BLOCK, 1, 1), arch="sm_90a")
def clobber(x, y):
    """y = x, then writes zeros over its *input* (a badly behaved kernel)."""
    off = ptx.mul.wide.u32(_index(), 4)
    v = ptx.ld.global_.f32(x.ptr + off)
    ptx.st.global_.f32(y.ptr + off, v)
    ptx.st.global_.f32(x.ptr + off, 0.0)


@kernel(in_specs=(Tile("N", f32),), out_specs=(Tile("N", f32),),
        grid=lambda N: (N // BLOCK, 1, 1), block=(BLOCK, 1, 1), arch="sm_90a")
def wild_load(x, y):
    """Loads far outside any buffer: the emulator faults."""
    off = ptx.mul.wide.u32(_index(), 4)
    v = ptx.ld.global_.f32(x.ptr + off + (1 << 40))
    ptx.st.global_.f32(y.ptr + off, v)


@kernel(in_specs=(Tile("N", f32),), out_specs=(Tile("M", f32),),
        grid=lambda M: (M // BLOCK, 1, 1), block=(BLOCK, 1, 1), arch="sm_90a")
def fill_first(x, y):
    """y[i] = x[0] for i < M: M is bound by a keyword, not by an input."""
    off = ptx.mul.wide.u32(_index(), 4)
    v = ptx.ld.global_.f32(x.ptr)
    ptx.st.global_.f32(y.ptr + off, v)


@kernel(in_specs=(Tile("N", f32),), out_specs=(Tile("N", f32),),
        grid=lambda N: (N // BLOCK, 1, 1), block=(BLOCK, 1, 1), cluster=(2, 1, 1),
        smem=64 * 1024, arch="sm_90a")
def big_smem_cluster(x, y):
    """y = x + 1, launched in clusters of 2 CTAs with 64 KiB of dynamic shared memory."""
    off = ptx.mul.wide.u32(_index(), 4)
    v = ptx.ld.global_.f32(x.ptr + off)
    ptx.st.global_.f32(y.ptr + off, v + 1.0)


@kernel(in_specs=(Tile("N", f32), Tile("N", f32)), out_specs=(Tile("N", f32),),
        grid=lambda N: (N // BLOCK, 1, 1), block=(BLOCK, 1, 1), arch="sm_90a", batch="z")
def axpy_z(x, w, y):
    """y = x * 2 + w; under vmap one launch, the batch as grid z."""
    off = ptx.mul.wide.u32(_index(), 4)
    xp, wp, yp = ptx.batch_ptrs(x, w, y)
    v = ptx.ld.global_.f32(xp + off)
    b = ptx.ld.global_.f32(wp + off)
    ptx.st.global_.f32(yp + off, v * 2.0 + b)


@kernel(in_specs=(Tile("N", f32),), out_specs=(Tile("N", f32),),
        grid=lambda N: (1, 1, 2), block=(BLOCK, 1, 1), arch="sm_90a", batch="z")
def grid_z_taken(x, y):
    """Declares batch='z' but already launches two CTAs along z."""
    ptx.st.global_.f32(y.batch_ptr, 0.0)
