"""Kernels for test_unwritten.py and unwritten_script.py: grids that do not
cover their outputs, padding declared, in-place updates, stores into inputs."""

from __future__ import annotations

import jaxptx.jax
from jaxptx import Layout, Tile, kernel, ptx, smem
from jaxptx.types import f32, s32

BLOCK = 128


def _offset():
    return ptx.mul.wide.u32(ptx.special.ctaid.x() * BLOCK + ptx.special.tid.x(), 4)


def _plus_one(x, y):
    off = _offset()
    ptx.st.global_.f32(y.ptr + off, ptx.ld.global_.f32(x.ptr + off) + 1.0)


SHORT = dict(in_specs=(Tile("N", f32),), out_specs=(Tile("N", f32),),
             grid=lambda N: (N // BLOCK, 1, 1), block=(BLOCK, 1, 1), arch="sm_90a")

# grid = N // 128 leaves the tail of the output unwritten when 128 does not divide N.
short_grid = kernel(**SHORT, name="short_grid")(_plus_one)
short_grid_shardable = kernel(**SHORT, shardable=("N",), name="short_grid_shardable")(_plus_one)
padded = jaxptx.jax.allow_unwritten("y")(kernel(**SHORT, name="padded")(_plus_one))


@jaxptx.jax.in_place(y="x")
@kernel(**SHORT)
def add_one_in_place(x, y):
    """y = x + 1 in x's buffer: reads and writes through y only."""
    off = _offset()
    ptx.st.global_.f32(y.ptr + off, ptx.ld.global_.f32(y.ptr + off) + 1.0)


@kernel(in_specs=(Tile("N", s32),), out_specs=(Tile("N", s32),),
        grid=lambda N: (N // BLOCK, 1, 1), block=(BLOCK, 1, 1), arch="sm_90a")
def sentinel_writer(x, y):
    """Writes 0xA5A5A5A5 everywhere: the first sentinel's bytes, all written."""
    ptx.st.global_.s32(y.ptr + _offset(), -0x5A5A5A5B)


@kernel(in_specs=(Tile("N", f32), Tile("N", f32)), out_specs=(Tile("N", f32),),
        grid=(1, 1, 1), block=(BLOCK, 1, 1), arch="sm_90a")
def leak_pointer(p, x, y):
    """Stores x's address as data (into 2N floats' worth of y): x may be
    written anywhere later."""
    ptx.st.global_.u64(y.ptr + ptx.mul.wide.u32(ptx.special.tid.x(), 8), x.ptr)


@jaxptx.jax.in_place(y="x")
@kernel(in_specs=(Tile("N", f32),), out_specs=(Tile("N", f32), Tile("N", s32)),
        grid=lambda N: (N // BLOCK, 1, 1), block=(BLOCK, 1, 1), arch="sm_90a")
def add_one_and_mark(x, y, z):
    """y = x + 1 in place, and z = 0xA5A5A5A5 by an atomic exchange (the
    first sentinel, written by no plain store: the CPU handler launches
    twice to tell it from unwritten bytes)."""
    off = _offset()
    ptx.st.global_.f32(y.ptr + off, ptx.ld.global_.f32(y.ptr + off) + 1.0)
    ptx.atom.global_.exch.b32(z.ptr + off, -0x5A5A5A5B)


@kernel(in_specs=(Tile("M", "N", f32, Layout.TMA_128B, tma_box=(32, 32)),),
        out_specs=(Tile("M", "N", f32),), grid=(1, 1, 1), block=(BLOCK, 1, 1), arch="sm_90a")
def tma_store_into_input(x, y):
    """A TMA store whose descriptor describes the input x (lowered, never run)."""
    tile = smem.alloc(f32, (32, 32), align=1024)
    with ptx.if_(ptx.special.tid.x() == 0):
        ptx.cp.async_.bulk.tensor._2d.global_.shared__cta.tile.bulk_group(
            ptx.addr(x.tma_desc(), coords=(0, 0)), tile)
        ptx.cp.async_.bulk.commit_group()
        ptx.cp.async_.bulk.wait_group.read(0)
