"""``scaled_matmul``: ``jax.nn.scaled_matmul`` (block-scaled FP8/FP4 GEMM) as
one jaxptx kernel, and its ragged-group form for mixture-of-experts.

Formats, told apart by the operands' and scales' dtypes and the block size
(``K // scales.shape[-1]``):

============ ==================================== ================= =====
format        values                               scales            block
============ ==================================== ================= =====
``mxfp8``     ``float8_e4m3fn`` / ``float8_e5m2``  ``float8_e8m0fnu`` 32
``nvfp4``     ``float4_e2m1fn``                    ``float8_e4m3fn``  16
``mxfp4``     ``float4_e2m1fn``                    ``float8_e8m0fnu`` 32
============ ==================================== ================= =====

Variants (``arch=``): ``"sm_100a"`` runs every format with ``tcgen05.mma``'s
block-scaled kinds, scales staged into tensor memory
(:mod:`jaxptx.kernels._scaled_sm100`); ``"sm_90a"`` runs ``mxfp8`` with FP8
``wgmma`` and the scales applied to each 32-deep partial product in
registers (:mod:`jaxptx.kernels._scaled_sm90`). ``None`` or ``"auto"`` picks
from the target.

The host side only moves bytes: FP8 values are bit cast, FP4 values packed
two a byte (:func:`jaxptx.kernels.pack_fp4`), and the scales laid out as the
kernel reads them (:func:`scale_image` for sm_100a).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..errors import SpecError
from . import _scaled_sm90, _scaled_sm100
from ._arch import variant
from ._fp_pack import fp8_to_bits, pack_fp4

__all__ = ["format_of", "scale_image", "scale_image_f32", "scaled_grouped_matmul", "scaled_matmul"]

_VARIANTS = ("sm_90a", "sm_100a")
_OUTPUT_DTYPES = ("float32", "bfloat16", "float16")
_FP8 = ("float8_e4m3fn", "float8_e5m2")
_PTX_TYPES = {"float8_e4m3fn": "e4m3", "float8_e5m2": "e5m2", "float4_e2m1fn": "e2m1"}
# (value family, scale dtype) -> (format, block)
_FORMATS = {("fp8", "float8_e8m0fnu"): ("mxfp8", 32), ("fp4", "float8_e4m3fn"): ("nvfp4", 16),
            ("fp4", "float8_e8m0fnu"): ("mxfp4", 32)}
_ONE = {"float8_e8m0fnu": 127, "float8_e4m3fn": 0x38}      # the scale 1.0, as a byte
_ROWS = 128                                                 # a kernel tile's rows (M and N)


def _name(x: Any) -> str:
    return jnp.dtype(x.dtype).name


def format_of(lhs: Any, rhs: Any, lhs_scales: Any, rhs_scales: Any, op: str = "scaled_matmul") -> str:
    """The format (``"mxfp8"``, ``"nvfp4"`` or ``"mxfp4"``) of the operands'
    dtypes and block size (module docstring's table).

    Raises:
        SpecError: dtypes or a block size no format has, naming the argument.
    """
    fams = []
    for what, x in (("lhs", lhs), ("rhs", rhs)):
        name = _name(x)
        if name not in _PTX_TYPES:
            raise SpecError(f"{op} {what}: expected float8_e4m3fn, float8_e5m2 or float4_e2m1fn, got {name}")
        fams.append("fp4" if name == "float4_e2m1fn" else "fp8")
    if fams[0] != fams[1]:
        raise SpecError(f"{op}: lhs and rhs must both be FP8 or both FP4, got {_name(lhs)} and {_name(rhs)}")
    if _name(lhs_scales) != _name(rhs_scales):
        raise SpecError(f"{op}: lhs_scales and rhs_scales must have one dtype, got {_name(lhs_scales)} "
                        f"and {_name(rhs_scales)}")
    key = (fams[0], _name(lhs_scales))
    if key not in _FORMATS:
        want = " or ".join(sorted({s for f, s in _FORMATS if f == fams[0]}))
        raise SpecError(f"{op} lhs_scales: expected {want} for {fams[0].upper()} values, got {_name(lhs_scales)}")
    fmt, block = _FORMATS[key]
    k, kb = lhs.shape[-1], lhs_scales.shape[-1]
    got = k // kb if kb and k % kb == 0 else f"K={k} over {kb} scales"
    if got != block:
        raise SpecError(f"{op} lhs_scales: {fmt} takes blocks of {block} values (lhs_scales.shape[-1] == "
                        f"K / {block} = {k // block}), got a block of {got}")
    return fmt


def _check_out(preferred_element_type: Any, op: str) -> str:
    try:
        out = jnp.dtype(preferred_element_type).name
    except TypeError:
        out = None
    if out not in _OUTPUT_DTYPES:
        raise SpecError(f"{op} preferred_element_type: expected float32, bfloat16 or float16, "
                        f"got {preferred_element_type!r}")
    return out


def _pick(arch: str | None, fmt: str, op: str) -> str:
    name = variant("auto" if arch is None else arch, op, _VARIANTS)
    if name not in _VARIANTS:
        raise SpecError(f"{op}: the target's variant is {name}; block-scaled matmul needs sm_90a (mxfp8) "
                        f"or sm_100a; pass arch='sm_90a' or 'sm_100a'")
    if name == "sm_90a" and fmt != "mxfp8":
        raise SpecError(f"{op}: arch='sm_90a' runs mxfp8 only (FP8 wgmma), got {fmt}; use arch='sm_100a'")
    return name


def _bytes(x: jax.Array, align: int = 16) -> jax.Array:
    """FP8 values bit cast, FP4 values packed; the last axis zero-padded to a
    multiple of ``align`` bytes (TMA row strides)."""
    b = pack_fp4(x) if _name(x) == "float4_e2m1fn" else fp8_to_bits(x)
    pad = -b.shape[-1] % align
    return jnp.pad(b, [(0, 0)] * (b.ndim - 1) + [(0, pad)]) if pad else b


def scale_image(scales: Any, fmt: str) -> jax.Array:
    """An operand's scales (G, R, K / block) laid out as the sm_100a kernel
    copies them into tensor memory: (G, R / 128, stages, chunks * 512)
    ``uint8``, R and the blocks padded (with the scale 1) to whole tiles and
    stages (:mod:`jaxptx.kernels._scaled_sm100`: byte ``j`` of word ``c`` of
    row ``l`` of a chunk is the scale of row ``32c + l``, block ``4 chunk + j``).

    Raises:
        SpecError: ``fmt`` not a format of the kernel.
    """
    if fmt not in _scaled_sm100.FORMATS:
        raise SpecError(f"scale_image fmt: expected one of {', '.join(_scaled_sm100.FORMATS)}, got {fmt!r}")
    f = _scaled_sm100.FORMATS[fmt]
    one = _ONE[_name(scales)]
    b = fp8_to_bits(scales)
    g, r, kb = b.shape
    rows, blocks = -r % _ROWS, -kb % f.blocks_per_stage
    if rows or blocks:
        b = jnp.pad(b, ((0, 0), (0, rows), (0, blocks)), constant_values=one)
    rt, ks = b.shape[1] // _ROWS, b.shape[2] // f.blocks_per_stage
    b = b.reshape(g, rt, 4, 32, ks, f.chunks, 4)            # rows (tile, c, l), blocks (stage, chunk, j)
    return b.transpose(0, 1, 4, 5, 3, 2, 6).reshape(g, rt, ks, f.chunks * 512)


def _check_batched(lhs: Any, rhs: Any, lhs_scales: Any, rhs_scales: Any, op: str) -> None:
    for what, x in (("lhs", lhs), ("rhs", rhs), ("lhs_scales", lhs_scales), ("rhs_scales", rhs_scales)):
        if getattr(x, "ndim", None) != 3:
            raise SpecError(f"{op} {what}: expected a 3-d array, got shape {tuple(getattr(x, 'shape', ()))}")
    (b, m, k), (b2, n, k2) = lhs.shape, rhs.shape
    if b != b2 or k != k2:
        raise SpecError(f"{op}: expected lhs (B, M, K) and rhs (B, N, K), got {tuple(lhs.shape)} and "
                        f"{tuple(rhs.shape)}")
    for what, x, rows in (("lhs_scales", lhs_scales, m), ("rhs_scales", rhs_scales, n)):
        if x.shape[:2] != (b, rows):
            raise SpecError(f"{op} {what}: expected shape ({b}, {rows}, K / block), got {tuple(x.shape)}")
    if lhs_scales.shape[2] != rhs_scales.shape[2]:
        raise SpecError(f"{op}: lhs_scales and rhs_scales must have one block count, got "
                        f"{lhs_scales.shape[2]} and {rhs_scales.shape[2]}")


def scaled_matmul(lhs: Any, rhs: Any, lhs_scales: Any, rhs_scales: Any,
                  preferred_element_type: Any = jnp.float32, arch: str | None = None) -> jax.Array:
    """``jax.nn.scaled_matmul``: ``einsum('BMK,BNK->BMN', lhs * sa, rhs * sb)``
    with ``sa``, ``sb`` the scales repeated over their blocks along K, as one
    kernel launch, accumulated in f32.

    Args:
        lhs: (B, M, K) FP8 (``float8_e4m3fn``/``float8_e5m2``) or FP4 (``float4_e2m1fn``).
        rhs: (B, N, K), FP8 with FP8 lhs (the two FP8 types may differ), FP4 with FP4.
        lhs_scales: (B, M, K / block): ``float8_e8m0fnu`` (mxfp8, mxfp4; block
            32) or ``float8_e4m3fn`` (nvfp4; block 16).
        rhs_scales: (B, N, K / block), the dtype of ``lhs_scales``.
        preferred_element_type: ``float32`` (default), ``bfloat16`` or ``float16``.
        arch: ``None``/``"auto"``, ``"sm_90a"`` (mxfp8 only) or ``"sm_100a"``.

    Returns:
        (B, M, N) of ``preferred_element_type``.

    Any M and N; K a multiple of the block (FP4: rows are padded to whole
    16-byte units, a copy, when K is not a multiple of 32).

    Raises:
        SpecError: a shape, dtype, block size or ``arch`` it does not take,
            naming the argument, what was expected and what came.

    Example:
        >>> import jax.numpy as jnp
        >>> a = jnp.ones((1, 8, 32), jnp.float8_e4m3fn)
        >>> s = jnp.full((1, 8, 1), 0.5, jnp.float8_e8m0fnu)
        >>> float(scaled_matmul(a, a, s, s, arch="sm_100a")[0, 0, 0])
        8.0
    """
    op = "scaled_matmul"
    _check_batched(lhs, rhs, lhs_scales, rhs_scales, op)
    fmt = format_of(lhs, rhs, lhs_scales, rhs_scales, op)
    out = _check_out(preferred_element_type, op)
    name = _pick(arch, fmt, op)
    n = rhs.shape[1]
    if name == "sm_100a":
        c = _run_sm100(fmt, lhs, rhs, lhs_scales, rhs_scales)
    else:
        c = _run_sm90(lhs, rhs, lhs_scales, rhs_scales)
    return c[:, :, :n].astype(out)


def _run_sm100(fmt: str, lhs: Any, rhs: Any, lhs_scales: Any, rhs_scales: Any,
               tile_group: Any = None) -> jax.Array:
    """The sm_100a kernel on (G, M, K) / (G, N, K) operands; C's N padded to a multiple of 4."""
    a, b = _bytes(lhs), _bytes(rhs)
    pad_n = -b.shape[1] % 4                     # f32 rows of whole 16-byte units for the TMA store
    if pad_n:
        b = jnp.pad(b, ((0, 0), (0, pad_n), (0, 0)))
    sa, sb = scale_image(lhs_scales, fmt), scale_image(rhs_scales, fmt)
    k = _scaled_sm100.build(fmt, _PTX_TYPES[_name(lhs)], _PTX_TYPES[_name(rhs)], tile_group is not None)
    return k(a, b, sa, sb) if tile_group is None else k(a, b, sa, sb, tile_group)


def scale_image_f32(scales: Any) -> jax.Array:
    """An operand's mxfp8 scales (G, R, K / 32) as the sm_90a kernel reads
    them: (G, R / 128, stages, 4, 128) float32, per 128-row tile and stage
    of 128 values along K the four blocks' scales of the tile's rows; R and
    the blocks padded with 1 to whole tiles and stages."""
    s = jnp.asarray(scales).astype(jnp.float32)
    g, r, kb = s.shape
    rows, blocks = -r % _ROWS, -kb % _scaled_sm90.BLOCKS
    if rows or blocks:
        s = jnp.pad(s, ((0, 0), (0, rows), (0, blocks)), constant_values=1.0)
    rt, ks = s.shape[1] // _ROWS, s.shape[2] // _scaled_sm90.BLOCKS
    return s.reshape(g, rt, _ROWS, ks, _scaled_sm90.BLOCKS).transpose(0, 1, 3, 4, 2)


def _run_sm90(lhs: Any, rhs: Any, lhs_scales: Any, rhs_scales: Any) -> jax.Array:
    """The sm_90a kernel on (G, M, K) / (G, N, K) mxfp8 operands; C's N padded to even."""
    a, b = _bytes(lhs), _bytes(rhs)
    if b.shape[1] % 2:
        b = jnp.pad(b, ((0, 0), (0, 1), (0, 0)))
    k = _scaled_sm90.build(_PTX_TYPES[_name(lhs)], _PTX_TYPES[_name(rhs)])
    return k(a, b, scale_image_f32(lhs_scales), scale_image_f32(rhs_scales))


# ---------------------------------------------------------------- ragged groups

def _check_grouped(lhs: Any, rhs: Any, lhs_scales: Any, rhs_scales: Any, group_sizes: Any, op: str) -> Any:
    for what, x, nd in (("lhs", lhs, 2), ("rhs", rhs, 3), ("lhs_scales", lhs_scales, 2),
                        ("rhs_scales", rhs_scales, 3)):
        if getattr(x, "ndim", None) != nd:
            raise SpecError(f"{op} {what}: expected a {nd}-d array, got shape {tuple(getattr(x, 'shape', ()))}")
    (m, k), (g, n, k2) = lhs.shape, rhs.shape
    if k != k2:
        raise SpecError(f"{op}: expected lhs (M, K) and rhs (G, N, K), got {tuple(lhs.shape)} and {tuple(rhs.shape)}")
    if lhs_scales.shape[0] != m or rhs_scales.shape[:2] != (g, n) or lhs_scales.shape[1] != rhs_scales.shape[2]:
        raise SpecError(f"{op}: expected lhs_scales ({m}, K / block) and rhs_scales ({g}, {n}, K / block), "
                        f"got {tuple(lhs_scales.shape)} and {tuple(rhs_scales.shape)}")
    if not hasattr(group_sizes, "dtype"):
        group_sizes = np.asarray(group_sizes)
    if group_sizes.shape != (g,):
        raise SpecError(f"{op} group_sizes: expected shape ({g},), got {tuple(group_sizes.shape)}")
    if not np.issubdtype(np.dtype(group_sizes.dtype), np.integer):
        raise SpecError(f"{op} group_sizes: expected an integer dtype (int32), got {group_sizes.dtype}")
    if not isinstance(group_sizes, jax.core.Tracer):
        sizes = np.asarray(group_sizes).astype(np.int64)
        if (sizes < 0).any():
            i = int(np.flatnonzero(sizes < 0)[0])
            raise SpecError(f"{op} group_sizes: expected sizes >= 0, got group_sizes[{i}] = {sizes[i]}")
        if sizes.sum() > m:
            raise SpecError(f"{op} group_sizes: expected a sum of at most M = {m} (lhs rows), got {sizes.sum()}")
    return jnp.asarray(group_sizes, jnp.int32)


def _group_layout(sizes: jax.Array, m: int) -> tuple[jax.Array, jax.Array, int]:
    """``(padded row of each lhs row (Mp for rows past the groups), group of
    each 128-row tile (-1: none), Mp)``: each group's rows start at a
    multiple of 128 in a padded (Mp, K) copy, ``Mp`` a static bound."""
    g = sizes.shape[0]
    sizes = jnp.maximum(sizes, 0)
    ends = jnp.cumsum(sizes)
    starts = ends - sizes
    tiles = (sizes + _ROWS - 1) // _ROWS
    tile_end = jnp.cumsum(tiles)
    tile_start = tile_end - tiles
    mt = -(-m // _ROWS) + g
    rows = jnp.arange(m)
    grp = jnp.minimum(jnp.searchsorted(ends, rows, side="right"), g - 1)
    inside = rows < ends[-1]
    prow = jnp.where(inside, tile_start[grp] * _ROWS + rows - starts[grp], mt * _ROWS)
    t = jnp.arange(mt)
    tg = jnp.searchsorted(tile_end, t, side="right")
    tile_group = jnp.where(tg < g, tg, -1).astype(jnp.int32)
    return prow, tile_group, mt * _ROWS


def scaled_grouped_matmul(lhs: Any, rhs: Any, lhs_scales: Any, rhs_scales: Any, group_sizes: Any,
                          preferred_element_type: Any = jnp.float32, arch: str | None = None) -> jax.Array:
    """The block-scaled ragged GEMM of mixture-of-experts: rows
    ``[s_g, s_g + group_sizes[g])`` of ``lhs`` (``s_g`` the sum of the sizes
    before ``g``) times ``rhs[g]ᵀ``, each operand scaled per block along K
    as in :func:`scaled_matmul`; rows past the groups are zero.

    Args:
        lhs: (M, K) FP8 or FP4 values, rows grouped consecutively.
        rhs: (G, N, K), one (N, K) matrix a group.
        lhs_scales: (M, K / block); rhs_scales: (G, N, K / block) (formats as
            :func:`scaled_matmul`).
        group_sizes: (G,) integers, non-negative, summing to at most M
            (checked when concrete; traced negative sizes count as 0).
        preferred_element_type: ``float32``, ``bfloat16`` or ``float16``.
        arch: ``None``/``"auto"`` or ``"sm_100a"`` (the tcgen05 kernel with
            a tile-to-group table; sm_90a has no grouped variant yet).

    Returns:
        (M, N) of ``preferred_element_type``.

    One launch: each group's rows are copied into a padded buffer where
    every group starts at a multiple of 128 rows, so each CTA's row tile
    belongs to one group (a table gives it); the result rows are gathered
    back.

    Raises:
        SpecError: shapes, dtypes, sizes or an ``arch`` it does not take.
    """
    op = "scaled_grouped_matmul"
    sizes = _check_grouped(lhs, rhs, lhs_scales, rhs_scales, group_sizes, op)
    fmt = format_of(lhs, rhs, lhs_scales, rhs_scales, op)
    out = _check_out(preferred_element_type, op)
    name = variant("auto" if arch is None else arch, op, ("sm_100a",))
    if name != "sm_100a":
        raise SpecError(f"{op}: the grouped form runs on sm_100a only, the target's variant is {name}; "
                        f"pass arch='sm_100a'")
    m, n = lhs.shape[0], rhs.shape[1]
    prow, tile_group, mp = _group_layout(sizes, m)
    a = jnp.zeros((mp,) + lhs.shape[1:], lhs.dtype).at[prow].set(lhs, mode="drop")
    one = jnp.asarray(1.0, lhs_scales.dtype)
    sa = jnp.full((mp,) + lhs_scales.shape[1:], one, lhs_scales.dtype).at[prow].set(lhs_scales, mode="drop")
    c = _run_sm100(fmt, a[None], rhs, sa[None], rhs_scales, tile_group)[0]
    rows = c[jnp.minimum(prow, mp - 1), :n]
    return jnp.where((prow < mp)[:, None], rows, 0.0).astype(out)
