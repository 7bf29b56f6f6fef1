"""Tensor boundary specs: :class:`Tile`, :class:`Layout`, :func:`unify_envs`.

A :class:`Tile` states one tensor argument's shape (ints or symbolic names
such as ``"M"``), PTX dtype, layout and TMA box. :func:`bind_specs` checks real
arrays against the tiles at call time and binds every symbolic name to an int.
"""

from __future__ import annotations

import enum
import operator
from collections.abc import Mapping, Sequence
from typing import Any, Union

import numpy as np

from jaxptx.errors import SpecError
from jaxptx.types import PtxType, from_dtype

__all__ = ["Layout", "Dim", "Tile", "unify_envs", "bind_specs"]

#: One tile dimension: a concrete size (``int``) or a symbolic name (``str``).
Dim = Union[int, str]

_TMA_RANKS = (2, 3, 4, 5)


class Layout(enum.Enum):
    """Memory layout of a tile.

    ``ROW`` row-major (C order), ``COL`` column-major (Fortran order),
    ``TMA_128B`` / ``TMA_64B`` / ``TMA_32B`` TMA swizzle of that many bytes
    (Hopper), ``INTERLEAVED`` CUTLASS interleaved layout.
    """

    ROW = "row"
    COL = "col"
    TMA_128B = "tma_128b"
    TMA_64B = "tma_64b"
    TMA_32B = "tma_32b"
    INTERLEAVED = "interleaved"

    @property
    def swizzle_bytes(self) -> int:
        """Swizzle span in bytes (128, 64 or 32), or 0 for unswizzled layouts."""
        return int(self.value[4:-1]) if self.value.startswith("tma_") else 0

    @classmethod
    def for_swizzle(cls, nbytes: int) -> Layout:
        """Return the layout with a swizzle span of ``nbytes`` (0 gives ``ROW``).

        Raises:
            SpecError: ``nbytes`` is not 0, 32, 64 or 128.
        """
        by_span = {m.swizzle_bytes: m for m in reversed(cls)}  # 0 -> ROW
        if isinstance(nbytes, bool) or nbytes not in by_span:
            raise SpecError(f"swizzle must be 0, 32, 64 or 128 bytes, got {nbytes!r}")
        return by_span[nbytes]


def _check_dim(d: Any, what: str) -> Dim:
    """Validate one dim (``what`` names it in messages) and normalise it."""
    if isinstance(d, str):
        if not d.isidentifier():
            raise SpecError(f"{what}: a symbolic dim must be a non-empty identifier "
                            f"such as 'M', got {d!r}")
        return d
    if isinstance(d, (bool, np.bool_)) or not isinstance(d, (int, np.integer)):
        raise TypeError(f"{what}: expected an int >= 0 or a symbolic name (str), "
                        f"got {d!r} of type {type(d).__name__}")
    if d < 0:
        raise SpecError(f"{what}: expected an int >= 0, got {int(d)}")
    return int(d)


def _is_dtype_like(x: Any) -> bool:
    """True for a PtxType, a numpy dtype or a scalar type such as np.float32."""
    return isinstance(x, (PtxType, np.dtype)) or (
        isinstance(x, type) and (issubclass(x, np.generic) or hasattr(x, "dtype")))


def _dtype_name(x: Any) -> str:
    """Name of an array dtype given as a str, PtxType or numpy-like dtype."""
    if isinstance(x, (str, PtxType)):
        return str(x)
    try:
        return np.dtype(x).name
    except TypeError:
        return str(x)


def _who(arg: str) -> str:
    return f"argument {arg!r}" if arg else "array"


def _fmt_dims(dims: Sequence[Dim]) -> list[str]:
    return [repr(d) if isinstance(d, str) else str(d) for d in dims]


class Tile:
    """A tensor spec: shape, dtype, layout and optional TMA box.

    Positional arguments are the dims (ints, or names bound at call time),
    then the dtype (a :class:`~jaxptx.types.PtxType` or numpy dtype) and/or a
    :class:`Layout`, in either order; ``dtype=`` may replace the positional
    dtype. Tiles are immutable and hashable.

    Args:
        *dims_and_dtype: dims, then dtype and/or layout.
        dtype: the element type, if not given positionally.
        layout: memory layout (``Layout.ROW`` by default).
        tma_box: per-TMA-load box, one dim per tile dim; ``None`` means one
            load reads the whole tensor.
        tma_rank: TMA descriptor rank (2, 3, 4 or 5); 3 selects the
            Hopper-style reshaped descriptor.
        tma_padding: request the padded innermost store box (``tma_rank=3``).

    Raises:
        SpecError: a bad value (negative dim, two dtypes, no dtype, box rank...).
        TypeError: an argument of the wrong kind (e.g. a float dim).

    Example:
        >>> from jaxptx.types import bf16
        >>> t = Tile("M", "K", bf16, Layout.ROW)
        >>> t
        Tile('M', 'K', bf16, Layout.ROW)
        >>> t.rank, t.symbolic_dims, t.resolve_shape({"M": 128, "K": 64})
        (2, ('M', 'K'), (128, 64))
        >>> t.extract_env((128, 64))
        {'M': 128, 'K': 64}
    """

    __slots__ = ("shape", "dtype", "layout", "tma_box", "tma_rank", "tma_padding")
    shape: tuple[Dim, ...]
    dtype: PtxType
    layout: Layout
    tma_box: tuple[Dim, ...] | None
    tma_rank: int
    tma_padding: bool

    def __init__(self, *dims_and_dtype: Dim | PtxType | Layout,
                 dtype: PtxType | None = None, layout: Layout = Layout.ROW,
                 tma_box: tuple[Dim, ...] | None = None, tma_rank: int = 2,
                 tma_padding: bool = False) -> None:
        dims: list[Dim] = []
        dtypes: list[PtxType] = []
        layouts: list[Layout] = []
        for i, a in enumerate(dims_and_dtype):
            if isinstance(a, Layout):
                layouts.append(a)
            elif _is_dtype_like(a):
                dtypes.append(from_dtype(a))
            elif dtypes or layouts:
                raise SpecError(f"Tile: dims must come before the dtype and layout, "
                                f"got dim {a!r} at position {i}")
            else:
                dims.append(_check_dim(a, f"Tile dim {i}"))
        dtypes += [] if dtype is None else [from_dtype(dtype)]
        if len(dtypes) != 1:
            raise SpecError(f"Tile({', '.join(_fmt_dims(dims))}): expected one dtype (e.g. "
                            f"bf16) after the dims or as dtype=, got {[t.name for t in dtypes]}")
        if not isinstance(layout, Layout):
            try:
                layout = Layout(layout)
            except ValueError:
                raise TypeError(f"Tile: layout must be a Layout, got {layout!r}") from None
        if layout is not Layout.ROW and layout not in layouts:
            layouts.append(layout)
        if len(layouts) > 1:
            raise SpecError(f"Tile: expected at most one layout, got "
                            f"{', '.join(f'Layout.{m.name}' for m in layouts)}")
        if tma_box is not None:
            if isinstance(tma_box, (str, bytes)) or not isinstance(tma_box, Sequence):
                raise TypeError(f"Tile: tma_box must be a tuple of dims, got {tma_box!r}")
            if len(tma_box) != len(dims):
                raise SpecError(f"Tile: tma_box must have rank {len(dims)} like the tile, "
                                f"got rank {len(tma_box)}: {tuple(tma_box)!r}")
            tma_box = tuple(_check_dim(d, f"Tile tma_box dim {i}") for i, d in enumerate(tma_box))
        if type(tma_rank) is not int or tma_rank not in _TMA_RANKS:
            raise SpecError(f"Tile: tma_rank must be one of {_TMA_RANKS}, got {tma_rank!r}")
        if not isinstance(tma_padding, (bool, np.bool_)):
            raise TypeError(f"Tile: tma_padding must be a bool, got {tma_padding!r}")
        values = (tuple(dims), dtypes[0], layouts[0] if layouts else Layout.ROW, tma_box,
                  int(tma_rank), bool(tma_padding))
        for name, value in zip(self.__slots__, values):
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"Tile is immutable; cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"Tile is immutable; cannot delete {name!r}")

    def _key(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self.__slots__)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Tile) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_tile, self._key())

    def __repr__(self) -> str:
        parts = _fmt_dims(self.shape) + [self.dtype.name, f"Layout.{self.layout.name}"]
        if self.tma_box is not None:
            box = _fmt_dims(self.tma_box)
            parts.append(f"tma_box=({', '.join(box)}{',' if len(box) == 1 else ''})")
        if self.tma_rank != 2:
            parts.append(f"tma_rank={self.tma_rank}")
        if self.tma_padding:
            parts.append("tma_padding=True")
        return f"Tile({', '.join(parts)})"

    @property
    def rank(self) -> int:
        """Number of dimensions in the tile shape."""
        return len(self.shape)

    @property
    def symbolic_dims(self) -> tuple[str, ...]:
        """The symbolic dim names of the shape, in order of first appearance."""
        return tuple(dict.fromkeys(d for d in self.shape if isinstance(d, str)))

    def resolve_shape(self, env: Mapping[str, int]) -> tuple[int, ...]:
        """Resolve symbolic dims using a ``name -> int`` environment.

        Raises:
            SpecError: a symbolic dim is missing from ``env``.
        """
        for i, d in enumerate(self.shape):
            if isinstance(d, str) and d not in env:
                raise SpecError(f"{self!r} dim {i} ({d!r}): expected a value for {d!r} "
                                f"in env, got {dict(env)!r}")
        return tuple(int(env[d]) if isinstance(d, str) else d for d in self.shape)

    def matches(self, array_shape: Sequence[int], array_dtype_name: str) -> bool:
        """Check rank, concrete dims and dtype of an array against this tile.

        Symbolic dims are not checked here; use :meth:`extract_env` for that.
        ``array_dtype_name`` may be the PTX name (``"bf16"``) or the numpy name
        (``"bfloat16"``); a numpy dtype or PtxType is accepted too.
        """
        if len(array_shape) != self.rank or not self._dtype_ok(array_dtype_name):
            return False
        return all(isinstance(d, str) or d == s for d, s in zip(self.shape, array_shape))

    def extract_env(self, array_shape: Sequence[int]) -> dict[str, int]:
        """Extract the ``{symbolic_dim: int}`` env from an array shape.

        Raises:
            SpecError: wrong rank, a concrete dim differs, or one symbol would be
                bound to two different sizes (``Tile("N", "N")`` on ``(3, 4)``).
        """
        bound: dict[str, tuple[int, str]] = {}
        self._bind(array_shape, "", bound)
        return {k: v[0] for k, v in bound.items()}

    def _dtype_ok(self, dtype: Any) -> bool:
        name, t = _dtype_name(dtype), self.dtype
        return name == t.name or (t.lanes == 1 and name == t.np_name)

    def _check_rank(self, shape: Sequence[Any], arg: str) -> None:
        if len(shape) != self.rank:
            raise SpecError(f"{_who(arg)}: expected rank {self.rank} for {self!r}, "
                            f"got rank {len(shape)} with shape {tuple(shape)!r}")

    def _bind(self, shape: Sequence[Any], arg: str, bound: dict[str, tuple[int, str]]) -> None:
        """Check ``shape`` of argument ``arg`` ("" for a bare array).

        ``bound`` (updated in place) maps each symbol to its size and where it
        was first bound, so that a conflict names both places.
        """
        self._check_rank(shape, arg)
        for i, (d, s) in enumerate(zip(self.shape, shape)):
            where = f"{_who(arg)} dim {i}"
            label = where + (f" ({d!r})" if isinstance(d, str) else "")
            try:
                s = operator.index(s)
            except TypeError:
                raise SpecError(f"{label}: expected a concrete int size, got {s!r}") from None
            if isinstance(d, int) and s != d:
                raise SpecError(f"{label}: expected {d}, got {s}")
            if isinstance(d, str) and bound.setdefault(d, (s, where))[0] != s:
                raise SpecError(f"{label}: expected {bound[d][0]} "
                                f"(bound by {bound[d][1]}), got {s}")

    @classmethod
    def wgmma_a(cls, m: Dim, k: Dim, dtype: PtxType, *, tile_m: Dim | None = None,
                tile_k: Dim | None = None) -> Tile:
        """Tile for a wgmma A operand (row-major MxK, K-major).

        The layout follows the per-load K width in bytes: 128 or more gives
        ``TMA_128B``, 64 ``TMA_64B``, 32 ``TMA_32B``, less (or a symbolic
        width) ``ROW``. The TMA box is ``(tile_m or m, tile_k or k)``::

            Tile.wgmma_a(64, 16, bf16)                             # whole K
            Tile.wgmma_a(64, 64, bf16, tile_k=16)                  # K slices
            Tile.wgmma_a(2048, 64, bf16, tile_m=64, tile_k=16)     # multi-CTA
        """
        t = from_dtype(dtype)
        bm = m if tile_m is None else tile_m
        bk = k if tile_k is None else tile_k
        return cls(m, k, t, layout=_layout_for_width(bk, t), tma_box=(bm, bk))

    @classmethod
    def wgmma_b(cls, k: Dim, n: Dim, dtype: PtxType, *, tile_k: Dim | None = None,
                tile_n: Dim | None = None) -> Tile:
        """Tile for a wgmma B operand (row-major KxN, MN-major).

        Like :meth:`wgmma_a`, with the layout picked from the per-load N width
        and the TMA box ``(tile_k or k, tile_n or n)``.
        """
        t = from_dtype(dtype)
        bk = k if tile_k is None else tile_k
        bn = n if tile_n is None else tile_n
        return cls(k, n, t, layout=_layout_for_width(bn, t), tma_box=(bk, bn))


def _rebuild_tile(shape: tuple[Dim, ...], dtype: PtxType, layout: Layout,
                  *rest: Any) -> Tile:
    """Unpickle a Tile from its ``_key()``."""
    return Tile(*shape, dtype=dtype, layout=layout, tma_box=rest[0], tma_rank=rest[1],
                tma_padding=rest[2])


def _layout_for_width(width: Dim, dtype: PtxType) -> Layout:
    """The widest TMA swizzle a row of ``width`` elements fills (else ROW)."""
    if isinstance(width, str):
        return Layout.ROW
    nbytes = _check_dim(width, "wgmma tile width") * dtype.bits // 8
    return next((Layout.for_swizzle(s) for s in (128, 64, 32) if nbytes >= s), Layout.ROW)


def unify_envs(envs: Sequence[Mapping[str, int]]) -> dict[str, int]:
    """Merge several ``{dim: int}`` envs into one; error on conflicts.

    If ``Tile("M", "K", ...)`` and ``Tile("K", "N", ...)`` are both inputs, K
    must agree between them.

    Raises:
        SpecError: a dim has two different values; the message names the dim
            and both values.

    Example:
        >>> unify_envs([{"M": 128, "K": 64}, {"K": 64, "N": 256}])
        {'M': 128, 'K': 64, 'N': 256}
        >>> unify_envs([{"K": 64}, {"K": 32}])
        Traceback (most recent call last):
        ...
        jaxptx.errors.SpecError: conflicting sizes for dim 'K': 64 and 32
    """
    out: dict[str, int] = {}
    for env in envs:
        for name, value in env.items():
            if out.setdefault(name, value) != value:
                raise SpecError(f"conflicting sizes for dim {name!r}: {out[name]} and {value}")
    return out


def bind_specs(specs: Sequence[Tile], arrays: Sequence[tuple[Sequence[int], Any]],
               names: Sequence[str]) -> dict[str, int]:
    """Check arrays against their tiles and return the unified symbol env.

    Checks the argument count, then each argument's rank, dtype and concrete
    dims, binding symbolic dims across all arguments.

    Args:
        specs: one :class:`Tile` per argument.
        arrays: one ``(shape, dtype)`` per argument; the dtype may be a numpy
            or jax dtype, a PtxType or a dtype name.
        names: the argument names used in error messages.

    Returns:
        ``{symbol: size}`` for every symbolic dim of ``specs``.

    Raises:
        SpecError: on any mismatch, naming the argument, the dim index and
            symbol, what was expected and what came, e.g. ``argument 'x' dim 1
            ('K'): expected 64 (bound by argument 'w' dim 0), got 32``.
    """
    if len(names) != len(specs):
        raise SpecError(f"expected {len(specs)} argument names, got {len(names)}")
    if len(arrays) != len(specs):
        raise SpecError(f"expected {len(specs)} arguments ({', '.join(map(repr, names))}), "
                        f"got {len(arrays)}")
    bound: dict[str, tuple[int, str]] = {}
    for spec, (shape, dtype), name in zip(specs, arrays, names):
        spec._check_rank(shape, name)
        if not spec._dtype_ok(dtype):
            raise SpecError(f"argument {name!r}: expected dtype {spec.dtype.name} "
                            f"for {spec!r}, got {_dtype_name(dtype)}")
        spec._bind(shape, name, bound)
    return {k: v[0] for k, v in bound.items()}
