"""TMA im2col copies in the emulator (jaxptx/sim/_sem_hopper_2.py,
_tensormap.py): ``cp.async.bulk.tensor.Nd...im2col`` loads and
``.im2col_no_offs`` stores against a numpy reference that enumerates the
bounding box (PTX ISA, "Tensors: im2col mode"), for 3-d, 4-d and 5-d
tensors, padding (out-of-bounds fill), traversal strides and copies that run
into the next image."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from jaxptx import sim
from jaxptx.sim import Im2col, SimError
from jaxptx.sim.memory.spaces import GLOBAL_SHIFT
from jaxptx.sim.memory.tensormap import decode

HEAD = ".version 8.5\n.target sm_90a\n.address_size 64\n"
PARAMS = ".param .u64 out, .param .u64 inp, .param .align 64 .b8 t[128]"
NTHREADS = 64


def buffer(k: int) -> int:
    return (k + 1) << GLOBAL_SHIFT


def tmap(*args, **kw) -> np.ndarray:
    return np.frombuffer(sim.tensor_map(*args, **kw), np.uint8).copy()


def load_kernel(rank: int, coords: list[int], offsets: list[int], nbytes: int) -> str:
    """Thread 0 issues one im2col load (coordinates and offsets innermost
    first, as PTX writes them); all threads wait on the mbarrier, then copy
    the shared bytes to ``out``. (ptxas 13 accepts it for sm_90a; the map is
    addressed through ``mov.b64 %rd5, t``.)"""
    cs = ", ".join(str(c) for c in coords)
    movs = "\n".join(f"    mov.b16 %h{i}, {o};" for i, o in enumerate(offsets))
    hs = ", ".join(f"%h{i}" for i in range(len(offsets)))
    return HEAD + f""".visible .entry k({PARAMS})
{{
    .reg .b16 %h<4>; .reg .b32 %r<8>; .reg .b64 %rd<8>; .reg .pred %p<4>;
    .shared .align 8 .b64 bar;
    .shared .align 1024 .b8 buf[{nbytes}];
    ld.param.u64 %rd1, [out];
    mov.b64 %rd5, t;
    mov.u32 %r1, %tid.x;
    setp.eq.u32 %p1, %r1, 0;
{movs}
    @%p1 mbarrier.init.shared::cta.b64 [bar], 1;
    bar.sync 0;
    mov.u32 %r2, buf;
    @%p1 mbarrier.arrive.expect_tx.shared::cta.b64 %rd2, [bar], {nbytes};
    @%p1 cp.async.bulk.tensor.{rank}d.shared::cluster.global.im2col.mbarrier::complete_tx::bytes
        [%r2], [%rd5, {{{cs}}}], [bar], {{{hs}}};
WAIT:
    mbarrier.try_wait.parity.shared::cta.b64 %p2, [bar], 0;
    @!%p2 bra WAIT;
COPY:
    setp.ge.u32 %p3, %r1, {nbytes // 4};
    @%p3 bra DONE;
    shl.b32 %r3, %r1, 2;
    add.u32 %r4, %r2, %r3;
    ld.shared.u32 %r5, [%r4];
    cvt.u64.u32 %rd3, %r3;
    add.u64 %rd3, %rd1, %rd3;
    st.global.u32 [%rd3], %r5;
    add.u32 %r1, %r1, {NTHREADS};
    bra COPY;
DONE:
    ret;
}}
"""


def reference(a: np.ndarray, im: Im2col, start: list[int], offsets: list[int],
              strides: list[int] | None = None, fill=0) -> np.ndarray:
    """The im2col read by enumeration (numpy axis order): list every
    (image, filter base) of the bounding boxes, W fastest; take ``pixels``
    of them from the start; read ``base + offsets`` of each, ``channels``
    channels from ``start[-1]``; anything outside the tensor is ``fill``."""
    n_img, *spatial, n_chan = a.shape
    strides = strides or [1] * len(spatial)
    ranges = [range(lo, n + hi, s) for lo, hi, n, s in zip(im.lower, im.upper, spatial, strides)]
    images = range(start[0], start[0] + im.pixels + 1)     # enough images past the start
    walk = [(n, base) for n in images for base in itertools.product(*ranges)]
    first = walk.index((start[0], tuple(start[1:-1])))
    out = np.full((im.pixels, im.channels), fill, dtype=a.dtype)
    for p, (n, base) in enumerate(walk[first:first + im.pixels]):
        loc = [b + o for b, o in zip(base, offsets)]
        for j in range(im.channels):
            c = start[-1] + j
            if 0 <= n < n_img and all(0 <= x < m for x, m in zip(loc, spatial)) and 0 <= c < n_chan:
                out[p, j] = a[(n, *loc, c)]
    return out


def run_load(a: np.ndarray, im: Im2col, start: list[int], offsets: list[int], **kw) -> np.ndarray:
    nbytes = im.pixels * im.channels * a.itemsize
    out = np.zeros(nbytes // a.itemsize, a.dtype)
    text = load_kernel(a.ndim, start[::-1], offsets[::-1], nbytes)
    sim.launch(text, out, a, tmap(buffer(1), a.shape, a.dtype, im2col=im, **kw), block=(NTHREADS, 1, 1))
    return out.reshape(im.pixels, im.channels)


def image(shape: tuple[int, ...]) -> np.ndarray:
    """Each pixel's channels hold 1 + its pixel number, then the channel."""
    pixels = int(np.prod(shape[:-1]))
    return (np.arange(1, pixels + 1, dtype=np.float32)[:, None] * 100
            + np.arange(shape[-1], dtype=np.float32)).reshape(shape)


@pytest.mark.parametrize("lower, start, offsets, want", [
    # 4x4 image, no padding: the 16 pixels in order
    ((0, 0), [0, 0, 0, 0], [0, 0], list(range(1, 17))),
    # one pixel of padding on the top and left: the box starts at (-1, -1)
    ((-1, -1), [0, -1, -1, 0], [0, 0], [0, 0, 0, 0, 0, 1, 2, 3, 0, 5, 6, 7, 0, 9, 10, 11]),
    # the same box with offsets (1, 1) covers the image exactly
    ((-1, -1), [0, -1, -1, 0], [1, 1], list(range(1, 17))),
])
def test_worked_4d_examples(lower, start, offsets, want) -> None:
    a = image((1, 4, 4, 4))
    im = Im2col(lower=lower, upper=lower, channels=4, pixels=16)
    got = run_load(a, im, start, offsets)
    np.testing.assert_array_equal(got[:, 0] // 100, want)
    np.testing.assert_array_equal(got, reference(a, im, start, offsets))


def test_a_column_runs_into_the_next_image() -> None:
    a = image((2, 4, 4, 4))
    im = Im2col(lower=(0, 0), upper=(0, 0), channels=4, pixels=16)
    got = run_load(a, im, [0, 1, 3, 0], [0, 0])
    np.testing.assert_array_equal(got[:, 0] // 100, np.arange(8, 24))


CASES = [
    # shape (numpy order), lower, upper, start (N, spatial..., C), offsets, channels, pixels, strides
    ((2, 9, 8), (-1,), (-2,), [0, -1, 0], [2], 8, 24, None),
    ((3, 7, 16), (-2,), (-1,), [1, 3, 8], [1], 4, 16, None),
    ((2, 5, 6, 8), (-1, -1), (-1, -1), [0, -1, 2, 0], [0, 1], 8, 40, None),
    ((2, 6, 7, 8), (-1, -1), (-2, -2), [1, 3, -1, 4], [2, 2], 4, 32, None),
    ((1, 8, 9, 4), (-1, -1), (-1, -1), [0, 1, 3, 0], [1, 0], 4, 24, [2, 2]),
    ((2, 3, 4, 5, 8), (-1, -1, -1), (-1, -1, -1), [0, -1, 0, 1, 0], [1, 0, 2], 8, 48, None),
    ((1, 4, 3, 4, 4), (0, -1, -2), (-1, 0, 0), [0, 2, -1, 0, 0], [0, 1, 2], 4, 20, [1, 1, 2]),
]


@pytest.mark.parametrize("shape, lower, upper, start, offsets, channels, pixels, strides", CASES,
                         ids=lambda v: str(v) if isinstance(v, tuple) and len(v) > 2 else None)
def test_im2col_loads_match_the_numpy_reference(shape, lower, upper, start, offsets, channels, pixels,
                                                strides) -> None:
    rng = np.random.default_rng(len(shape) * 100 + pixels)
    a = rng.integers(1, 2**31, shape, dtype=np.int64).astype(np.int32)
    im = Im2col(lower=lower, upper=upper, channels=channels, pixels=pixels)
    es = None if strides is None else [1, *strides, 1]
    got = run_load(a, im, start, offsets, element_strides=es)
    np.testing.assert_array_equal(got, reference(a, im, start, offsets, strides))


def test_out_of_bounds_fill_nan_and_channels_past_the_end() -> None:
    a = image((1, 3, 3, 12))
    im = Im2col(lower=(-1, -1), upper=(0, 0), channels=8, pixels=9)
    got = run_load(a, im, [0, -1, -1, 8], [0, 0], oob_fill="nan")
    want = reference(a, im, [0, -1, -1, 8], [0, 0], fill=np.nan)
    np.testing.assert_array_equal(got, want)
    # pixel 5 is (0, 0): channels 8..11 exist, 12..15 lie past the end
    assert np.isnan(got[0]).all() and np.isnan(got[5, 4:]).all() and (got[5, :4] == 108 + np.arange(4)).all()


def store_kernel(coords: list[int], nbytes: int) -> str:
    """Every thread fills shared ``buf`` with its words from ``inp``; thread 0
    stores it with an im2col_no_offs copy."""
    cs = ", ".join(str(c) for c in coords)
    return HEAD + f""".visible .entry k({PARAMS})
{{
    .reg .b32 %r<8>; .reg .b64 %rd<8>; .reg .pred %p<4>;
    .shared .align 1024 .b8 buf[{nbytes}];
    ld.param.u64 %rd1, [out];
    mov.b64 %rd5, t;
    mov.u32 %r1, %tid.x;
    setp.eq.u32 %p1, %r1, 0;
    mov.u32 %r2, buf;
FILL:
    setp.ge.u32 %p3, %r1, {nbytes // 4};
    @%p3 bra FILLED;
    shl.b32 %r3, %r1, 2;
    cvt.u64.u32 %rd3, %r3;
    add.u64 %rd3, %rd1, %rd3;
    ld.global.u32 %r5, [%rd3];
    add.u32 %r4, %r2, %r3;
    st.shared.u32 [%r4], %r5;
    add.u32 %r1, %r1, {NTHREADS};
    bra FILL;
FILLED:
    bar.sync 0;
    fence.proxy.async.shared::cta;
    @%p1 cp.async.bulk.tensor.{len(coords)}d.global.shared::cta.im2col_no_offs.bulk_group [%rd5, {{{cs}}}], [%r2];
    @%p1 cp.async.bulk.commit_group;
    @%p1 cp.async.bulk.wait_group 0;
    ret;
}}
"""


def test_im2col_no_offs_store_writes_the_pixels_it_would_load() -> None:
    shape = (2, 4, 5, 4)
    im = Im2col(lower=(-1, -1), upper=(-1, -1), channels=4, pixels=24)
    start = [0, 1, -1, 0]
    column = np.arange(1, 24 * 4 + 1, dtype=np.int32)
    a = np.zeros(shape, np.int32)
    sim.launch(store_kernel(start[::-1], column.nbytes), column, a,
               tmap(buffer(1), a.shape, a.dtype, im2col=im), block=(NTHREADS, 1, 1))
    # reading back what was stored gives the column wherever it was in bounds
    back = reference(a, im, start, [0, 0], fill=-1).ravel()
    inside = back != -1
    np.testing.assert_array_equal(back[inside], column[inside])
    assert inside.sum() == np.count_nonzero(a) and 0 < inside.sum() < len(column)


def test_im2col_tensor_map_encoding() -> None:
    im = Im2col(lower=(-2, -1, 0), upper=(1, -3, -4), channels=64, pixels=512)
    tm = decode(tmap(0x1000, (2, 6, 7, 8, 64), np.float16, im2col=im, swizzle=128))
    assert (tm.mode, tm.channels, tm.pixels, tm.lower, tm.upper) == (1, 64, 512, (0, -1, -2), (-4, -3, 1))
    assert tm.box_bytes == 512 * 64 * 2 and tm.dims == (64, 8, 7, 6, 2)
    tiled = decode(tmap(0x1000, (4, 64), np.float16, (4, 64)))
    assert (tiled.mode, tiled.lower) == (0, ())


@pytest.mark.parametrize("kw, message", [
    (dict(box=(1, 2, 2, 8)), "give a box .* or im2col"),
    (dict(im2col=Im2col((0,), (0,), 8, 16)), "2 corner entries"),
    (dict(im2col=Im2col((-200, 0), (0, 0), 8, 16)), r"must be in \[-2\^7, 2\^7 - 1\] for a 4-d tensor"),
    (dict(im2col=Im2col((0, 0), (0, 0), 2, 16)), "inner box dimension must be a multiple of 16 bytes, got 8 bytes"),
    (dict(im2col=Im2col((0, 0), (0, 0), 8, 2000)), r"pixels per column must be in 1\.\.1024, got 2000"),
])
def test_bad_im2col_maps(kw, message) -> None:
    im = kw.pop("im2col", Im2col((0, 0), (0, 0), 8, 16))
    with pytest.raises(ValueError, match=message):
        sim.tensor_map(0x1000, (1, 4, 4, 8), np.float32, im2col=im, **kw)


def test_mode_and_bounding_box_errors() -> None:
    a = image((1, 4, 4, 4))
    im = Im2col(lower=(0, 0), upper=(-1, -1), channels=4, pixels=4)
    with pytest.raises(SimError, match=r"filter base \(3, 0\) \(W first\) is not on the bounding box"):
        run_load(a, im, [0, 0, 3, 0], [0, 0])
    with pytest.raises(SimError, match=r"\.im2col copy with a tiled tensor map"):
        sim.launch(load_kernel(4, [0, 0, 0, 0], [0, 0], 64), np.zeros(16, np.float32), a,
                   tmap(buffer(1), a.shape, a.dtype, (1, 1, 4, 4)), block=(NTHREADS, 1, 1))
