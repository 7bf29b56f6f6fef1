"""Tests of jaxptx.dsl._specs: Tile, Layout, unify_envs, bind_specs."""

from __future__ import annotations

import copy
import doctest
import pickle

import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from jaxptx.dsl import _specs
from jaxptx.dsl._specs import Dim, Layout, Tile, bind_specs, unify_envs
from jaxptx.errors import SpecError
from jaxptx.types import bf16, bf16x2, e4m3, f16, f32, s8, tf32, u8


def test_module_doctests() -> None:
    result = doctest.testmod(_specs)
    assert result.attempted >= 6
    assert result.failed == 0


# ----------------------------------------------------------------- Layout


def test_layout_values() -> None:
    assert [m.value for m in Layout] == [
        "row", "col", "tma_128b", "tma_64b", "tma_32b", "interleaved"]
    assert Layout("tma_64b") is Layout.TMA_64B


@pytest.mark.parametrize("layout, nbytes", [
    (Layout.TMA_128B, 128), (Layout.TMA_64B, 64), (Layout.TMA_32B, 32),
    (Layout.ROW, 0), (Layout.COL, 0), (Layout.INTERLEAVED, 0)])
def test_layout_swizzle_bytes(layout: Layout, nbytes: int) -> None:
    assert layout.swizzle_bytes == nbytes


def test_layout_for_swizzle() -> None:
    assert Layout.for_swizzle(128) is Layout.TMA_128B
    assert Layout.for_swizzle(64) is Layout.TMA_64B
    assert Layout.for_swizzle(32) is Layout.TMA_32B
    assert Layout.for_swizzle(0) is Layout.ROW
    with pytest.raises(SpecError, match=r"0, 32, 64 or 128 bytes, got 16"):
        Layout.for_swizzle(16)


def test_dim_alias() -> None:
    assert set(Dim.__args__) == {int, str}


# ----------------------------------------------------------- construction


def test_seed_tile() -> None:
    t = Tile("M", "K", bf16, Layout.ROW)
    assert t.shape == ("M", "K")
    assert t.dtype is bf16
    assert t.layout is Layout.ROW
    assert t.tma_box is None and t.tma_rank == 2 and t.tma_padding is False
    assert t.rank == 2
    assert t.symbolic_dims == ("M", "K")
    assert repr(t) == "Tile('M', 'K', bf16, Layout.ROW)"


def test_layout_before_dtype_and_keyword_dtype() -> None:
    assert Tile("K", "N", Layout.COL, bf16) == Tile("K", "N", bf16, Layout.COL)
    assert Tile("K", "N", dtype=bf16, layout=Layout.COL) == Tile("K", "N", bf16, Layout.COL)
    assert Tile(4, dtype=f32).layout is Layout.ROW
    assert Tile(4, f32, layout="col").layout is Layout.COL


@pytest.mark.parametrize("dt, expected", [
    (np.float32, f32), (np.dtype("float16"), f16), (ml_dtypes.bfloat16, bf16),
    (jnp.bfloat16, bf16), (jnp.float32, f32), (np.int8, s8), (np.uint8, u8),
    (ml_dtypes.float8_e4m3fn, e4m3)])
def test_numpy_dtypes_are_converted(dt: object, expected: object) -> None:
    assert Tile("M", dt).dtype is expected
    assert Tile("M", dtype=dt).dtype is expected


def test_numpy_integer_dims_normalised() -> None:
    t = Tile(np.int64(8), "N", f32)
    assert t.shape == (8, "N") and type(t.shape[0]) is int
    assert t == Tile(8, "N", f32)


def test_symbolic_dims_dedup_in_order() -> None:
    assert Tile("N", 4, "M", "N", "K", "M", f32).symbolic_dims == ("N", "M", "K")
    assert Tile(2, 3, f32).symbolic_dims == ()
    assert Tile(f32).rank == 0


def test_repr_with_extras() -> None:
    t = Tile(64, "K", bf16, Layout.TMA_32B, tma_box=(64, 16), tma_rank=3, tma_padding=True)
    assert repr(t) == ("Tile(64, 'K', bf16, Layout.TMA_32B, tma_box=(64, 16), "
                       "tma_rank=3, tma_padding=True)")
    assert repr(Tile(8, f32, tma_box=[4])) == "Tile(8, f32, Layout.ROW, tma_box=(4,))"


@pytest.mark.parametrize("args, kwargs, exc, match", [
    (("M", "K"), {}, SpecError, r"Tile\('M', 'K'\): expected one dtype .*got \[\]"),
    (("M", bf16, f32), {}, SpecError, r"expected one dtype .*got \['bf16', 'f32'\]"),
    (("M", bf16), {"dtype": f32}, SpecError, r"expected one dtype .*\['bf16', 'f32'\]"),
    (("M", 1.5, bf16), {}, TypeError, r"Tile dim 1: expected an int >= 0 or a symbolic "
                                      r"name \(str\), got 1.5 of type float"),
    (("M", True, bf16), {}, TypeError, r"Tile dim 1: .*got True of type bool"),
    ((None, bf16), {}, TypeError, r"Tile dim 0: .*got None of type NoneType"),
    ((-1, bf16), {}, SpecError, r"Tile dim 0: expected an int >= 0, got -1"),
    (("", bf16), {}, SpecError, r"Tile dim 0: .*non-empty identifier .*got ''"),
    (("2K", bf16), {}, SpecError, r"Tile dim 0: .*identifier .*got '2K'"),
    (("M", bf16, "K"), {}, SpecError, r"dims must come before .*got dim 'K' at position 2"),
    (("M", Layout.COL, 4, f32), {}, SpecError, r"got dim 4 at position 2"),
    (("M", bf16, Layout.COL, Layout.ROW), {}, SpecError,
     r"at most one layout, got Layout.COL, Layout.ROW"),
    (("M", bf16, Layout.COL), {"layout": Layout.TMA_64B}, SpecError,
     r"at most one layout, got Layout.COL, Layout.TMA_64B"),
    (("M", bf16), {"layout": "diagonal"}, TypeError, r"layout must be a Layout, got 'diagonal'"),
    (("M", "K", bf16), {"tma_box": (64,)}, SpecError,
     r"tma_box must have rank 2 like the tile, got rank 1: \(64,\)"),
    (("M", bf16), {"tma_box": 64}, TypeError, r"tma_box must be a tuple of dims, got 64"),
    (("M", bf16), {"tma_box": (-4,)}, SpecError, r"tma_box dim 0: expected an int >= 0, got -4"),
    (("M", bf16), {"tma_rank": 1}, SpecError, r"tma_rank must be one of \(2, 3, 4, 5\), got 1"),
    (("M", bf16), {"tma_rank": True}, SpecError, r"tma_rank must be one of .*got True"),
    (("M", bf16), {"tma_rank": 2.0}, SpecError, r"tma_rank must be one of .*got 2.0"),
    (("M", bf16), {"tma_padding": 1}, TypeError, r"tma_padding must be a bool, got 1"),
    (("M", "bf16"), {}, SpecError, r"Tile\('M', 'bf16'\): expected one dtype"),
])
def test_bad_construction(args: tuple, kwargs: dict, exc: type, match: str) -> None:
    with pytest.raises(exc, match=match):
        Tile(*args, **kwargs)


def test_unknown_numpy_dtype_is_type_error() -> None:
    with pytest.raises(TypeError, match="no PTX equivalent"):
        Tile("M", np.complex64)


# ------------------------------------------------ immutability, hashing


def test_equality_and_hash() -> None:
    a = Tile("M", "K", bf16, Layout.ROW)
    b = Tile("M", "K", dtype=bf16)
    assert a == b and hash(a) == hash(b)
    assert len({a, b, Tile("M", "K", f32)}) == 2
    assert a != Tile("M", "K", bf16, Layout.COL)
    assert a != Tile("M", "N", bf16)
    assert a != Tile("M", "K", bf16, tma_box=("M", "K"))
    assert a != Tile("M", "K", bf16, tma_rank=3)
    assert a != ("M", "K")
    assert {a: 1}[b] == 1


def test_immutable() -> None:
    t = Tile("M", bf16)
    with pytest.raises(AttributeError, match="immutable"):
        t.layout = Layout.COL  # type: ignore[misc]
    with pytest.raises(AttributeError, match="immutable"):
        del t.dtype
    with pytest.raises(AttributeError, match="Tile is immutable; cannot set 'extra'"):
        t.extra = 1  # type: ignore[attr-defined]
    assert t.layout is Layout.ROW


def test_pickle_and_copy_roundtrip() -> None:
    t = Tile.wgmma_a(2048, "K", bf16, tile_m=64, tile_k=16)
    for u in (pickle.loads(pickle.dumps(t)), copy.deepcopy(t), copy.copy(t)):
        assert u == t and hash(u) == hash(t) and repr(u) == repr(t)


# ------------------------------------------------------------- wgmma helpers


@pytest.mark.parametrize("tile, shape, layout, box", [
    (Tile.wgmma_a(64, 16, bf16), (64, 16), Layout.TMA_32B, (64, 16)),
    (Tile.wgmma_a(64, 64, bf16, tile_k=16), (64, 64), Layout.TMA_32B, (64, 16)),
    (Tile.wgmma_a(2048, 64, bf16, tile_m=64, tile_k=16), (2048, 64), Layout.TMA_32B, (64, 16)),
    (Tile.wgmma_a(64, 64, bf16), (64, 64), Layout.TMA_128B, (64, 64)),
    (Tile.wgmma_a(64, 32, bf16), (64, 32), Layout.TMA_64B, (64, 32)),
    (Tile.wgmma_a(64, 256, bf16), (64, 256), Layout.TMA_128B, (64, 256)),
    (Tile.wgmma_a(64, 8, bf16), (64, 8), Layout.ROW, (64, 8)),
    (Tile.wgmma_a(64, 32, e4m3), (64, 32), Layout.TMA_32B, (64, 32)),
    (Tile.wgmma_a(64, 32, tf32), (64, 32), Layout.TMA_128B, (64, 32)),
    (Tile.wgmma_a(64, 64, np.float16, tile_k=32), (64, 64), Layout.TMA_64B, (64, 32)),
    (Tile.wgmma_a("M", "K", bf16), ("M", "K"), Layout.ROW, ("M", "K")),
    (Tile.wgmma_a("M", "K", bf16, tile_m=64, tile_k=64), ("M", "K"), Layout.TMA_128B, (64, 64)),
    (Tile.wgmma_a(64, 64, bf16, tile_k="BK"), (64, 64), Layout.ROW, (64, "BK")),
    (Tile.wgmma_b(16, 64, bf16), (16, 64), Layout.TMA_128B, (16, 64)),
    (Tile.wgmma_b(64, 256, bf16, tile_k=16), (64, 256), Layout.TMA_128B, (16, 256)),
    (Tile.wgmma_b(64, 256, bf16, tile_k=16, tile_n=32), (64, 256), Layout.TMA_64B, (16, 32)),
    (Tile.wgmma_b(64, 2048, bf16, tile_n=16), (64, 2048), Layout.TMA_32B, (64, 16)),
    (Tile.wgmma_b(16, 8, bf16), (16, 8), Layout.ROW, (16, 8)),
    (Tile.wgmma_b("K", "N", bf16), ("K", "N"), Layout.ROW, ("K", "N")),
])
def test_wgmma_tiles(tile: Tile, shape: tuple, layout: Layout, box: tuple) -> None:
    assert tile.shape == shape
    assert tile.layout is layout
    assert tile.tma_box == box
    assert tile.tma_rank == 2


def test_wgmma_dtype_and_repr() -> None:
    t = Tile.wgmma_a(64, 64, bf16, tile_k=16)
    assert t.dtype is bf16
    assert repr(t) == "Tile(64, 64, bf16, Layout.TMA_32B, tma_box=(64, 16))"
    with pytest.raises(SpecError, match=r"expected an int >= 0, got -16"):
        Tile.wgmma_a(64, 64, bf16, tile_k=-16)


# ------------------------------------------ resolve_shape / matches / extract


def test_resolve_shape() -> None:
    t = Tile("M", 16, "K", "M", f32)
    assert t.resolve_shape({"M": 128, "K": 64, "unused": 1}) == (128, 16, 64, 128)
    assert Tile(2, 3, f32).resolve_shape({}) == (2, 3)
    with pytest.raises(SpecError, match=r"dim 2 \('K'\): expected a value for 'K' in env, "
                                        r"got \{'M': 128\}"):
        t.resolve_shape({"M": 128})


@pytest.mark.parametrize("shape, dtype, ok", [
    ((128, 64), "bf16", True),
    ((128, 64), "bfloat16", True),
    ((1, 64), "bfloat16", True),
    ((128, 64), np.dtype(ml_dtypes.bfloat16), True),
    ((128, 64), jnp.bfloat16, True),
    ((128, 64), bf16, True),
    ((128, 32), "bf16", False),    # concrete dim differs
    ((128, 64, 1), "bf16", False),  # rank differs
    ((128,), "bf16", False),
    ((128, 64), "float32", False),  # dtype differs
    ((128, 64), "f16", False),
    ((128, 64), "float16", False),
])
def test_matches(shape: tuple, dtype: object, ok: bool) -> None:
    assert Tile("M", 64, bf16).matches(shape, dtype) is ok


def test_matches_dtype_names() -> None:
    assert Tile(4, tf32).matches((4,), "float32")  # tf32 is stored as float32
    assert Tile(4, tf32).matches((4,), "tf32")
    assert not Tile(4, tf32).matches((4,), "f32")
    assert Tile(4, bf16x2).matches((4,), "bf16x2")
    assert not Tile(4, bf16x2).matches((4,), "bfloat16")  # packed: PTX name only
    assert Tile(4, s8).matches((4,), "int8") and not Tile(4, s8).matches((4,), "uint8")


def test_matches_ignores_symbolic_consistency() -> None:
    assert Tile("N", "N", f32).matches((3, 4), "float32")


def test_extract_env() -> None:
    assert Tile("M", "K", bf16).extract_env((128, 64)) == {"M": 128, "K": 64}
    assert Tile("N", 4, "N", f32).extract_env((3, 4, 3)) == {"N": 3}
    assert Tile(2, 3, f32).extract_env((2, 3)) == {}
    assert Tile("M", f32).extract_env((np.int64(7),)) == {"M": 7}


@pytest.mark.parametrize("tile, shape, match", [
    (Tile("N", "N", f32), (3, 4), r"array dim 1 \('N'\): expected 3 \(bound by array dim 0\), got 4"),
    (Tile("M", 64, f32), (3, 32), r"array dim 1: expected 64, got 32"),
    (Tile("M", "K", f32), (3,), r"array: expected rank 2 for Tile\('M', 'K', f32, Layout.ROW\), "
                                r"got rank 1 with shape \(3,\)"),
    (Tile("M", f32), (None,), r"array dim 0 \('M'\): expected a concrete int size, got None"),
])
def test_extract_env_errors(tile: Tile, shape: tuple, match: str) -> None:
    with pytest.raises(SpecError, match=match):
        tile.extract_env(shape)


# ------------------------------------------------------------- unify_envs


def test_unify_envs() -> None:
    assert unify_envs([]) == {}
    assert unify_envs([{"M": 128, "K": 64}, {"K": 64, "N": 256}, {}]) == {
        "M": 128, "K": 64, "N": 256}
    envs = [{"M": 1}, {"M": 1}]
    unify_envs(envs)
    assert envs == [{"M": 1}, {"M": 1}]  # inputs untouched


def test_unify_envs_conflict() -> None:
    with pytest.raises(SpecError, match=r"conflicting sizes for dim 'K': 64 and 32"):
        unify_envs([{"M": 1, "K": 64}, {"N": 2}, {"K": 32}])


def test_unify_envs_is_value_error() -> None:
    with pytest.raises(ValueError, match=r"conflicting sizes for dim 'K': 1 and 2"):
        unify_envs([{"K": 1}, {"K": 2}])


# ------------------------------------------------------------- bind_specs

GEMM = (Tile("M", "K", bf16), Tile("K", "N", bf16), Tile("M", "N", f32))
GEMM_NAMES = ("x", "w", "out")


def test_bind_specs_ok() -> None:
    arrays = [((128, 64), jnp.bfloat16), ((64, 256), np.dtype(ml_dtypes.bfloat16)),
              ((128, 256), "f32")]
    assert bind_specs(GEMM, arrays, GEMM_NAMES) == {"M": 128, "K": 64, "N": 256}
    assert bind_specs([], [], []) == {}
    assert bind_specs([Tile(4, f32)], [((4,), np.float32)], ["a"]) == {}


@pytest.mark.parametrize("specs, arrays, names, match", [
    pytest.param(GEMM, [((128, 64), "bf16"), ((64, 256), "bf16")], GEMM_NAMES,
                 r"expected 3 arguments \('x', 'w', 'out'\), got 2", id="count"),
    pytest.param(GEMM, [((128, 64), "bf16")] * 4, GEMM_NAMES,
                 r"expected 3 arguments .*got 4", id="count-too-many"),
    pytest.param(GEMM, [((128, 64), "bf16")] * 3, ("x", "w"),
                 r"expected 3 argument names, got 2", id="names"),
    pytest.param(GEMM, [((128, 64), "bf16"), ((64, 256, 1), "bf16"), ((128, 256), "f32")],
                 GEMM_NAMES, r"argument 'w': expected rank 2 for Tile\('K', 'N', bf16, "
                             r"Layout.ROW\), got rank 3 with shape \(64, 256, 1\)", id="rank"),
    pytest.param(GEMM, [((128, 64), "bf16"), ((64, 256), np.float32), ((128, 256), "f32")],
                 GEMM_NAMES, r"argument 'w': expected dtype bf16 for Tile\('K', 'N', bf16, "
                             r"Layout.ROW\), got float32", id="dtype"),
    pytest.param(GEMM, [((128, 64), "bf16"), ((32, 256), "bf16"), ((128, 256), "f32")],
                 GEMM_NAMES, r"argument 'w' dim 0 \('K'\): expected 64 \(bound by argument 'x' "
                             r"dim 1\), got 32", id="conflict"),
    pytest.param(GEMM, [((128, 64), "bf16"), ((64, 256), "bf16"), ((128, 255), "f32")],
                 GEMM_NAMES, r"argument 'out' dim 1 \('N'\): expected 256 \(bound by argument "
                             r"'w' dim 1\), got 255", id="conflict-out"),
    pytest.param([Tile("N", "N", f32)], [((3, 4), "f32")], ["sq"],
                 r"argument 'sq' dim 1 \('N'\): expected 3 \(bound by argument 'sq' dim 0\), "
                 r"got 4", id="conflict-same-arg"),
    pytest.param([Tile("M", 64, bf16)], [((8, 32), "bf16")], ["x"],
                 r"argument 'x' dim 1: expected 64, got 32", id="concrete"),
    pytest.param([Tile("M", bf16)], [((1.5,), "bf16")], ["x"],
                 r"argument 'x' dim 0 \('M'\): expected a concrete int size, got 1.5",
                 id="non-int-size"),
])
def test_bind_specs_errors(specs: list, arrays: list, names: list, match: str) -> None:
    with pytest.raises(SpecError, match=match):
        bind_specs(specs, arrays, names)


def test_bind_specs_checks_rank_before_dtype() -> None:
    with pytest.raises(SpecError, match=r"argument 'x': expected rank 1"):
        bind_specs([Tile("M", bf16)], [((1, 2), np.float32)], ["x"])
    with pytest.raises(SpecError, match=r"argument 'x': expected dtype bf16"):
        bind_specs([Tile(4, bf16)], [((5,), np.float32)], ["x"])
