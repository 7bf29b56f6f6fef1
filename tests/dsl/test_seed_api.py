"""Code written to the documented pyptx API runs unchanged apart from the
import name: the examples of the Kernel, specs and README pages."""

from __future__ import annotations

from jaxptx import Layout, Tile, kernel, ptx, reg, smem
from jaxptx.runtime import ptxas
from jaxptx.types import bf16, f32


# pyptx.kernel page: the decorator example, body elided with `...`.
@kernel(
    in_specs=(Tile("M", "K", bf16, Layout.ROW),
              Tile("K", "N", bf16, Layout.COL)),
    out_specs=(Tile("M", "N", f32, Layout.ROW),),
    grid=lambda M, N, K: (M // 128, N // 256),
    block=(128, 1, 1),
    cluster=(2, 1, 1),
    arch="sm_90a",
)
def gemm(A, B, C, *, BM=128, BN=256, BK=64): ...


def test_kernel_page_example() -> None:
    text = gemm.ptx(M=4096, N=4096, K=4096)
    assert ".visible .entry gemm(" in text and ".reqnctapercluster 2, 1, 1" in text
    assert gemm.template_params == {"BM": 128, "BN": 256, "BK": 64}
    assert gemm.in_specs[1].layout is Layout.COL and gemm.cluster == (2, 1, 1)
    assert gemm.specialize(M=4096, N=4096, K=4096).grid == (32, 16, 1)
    ptxas(text, "sm_90a")


# README: "What it looks like".
@kernel(
    in_specs=(Tile("M", "K", bf16), Tile("K", "N", bf16)),
    out_specs=(Tile("M", "N", f32),),
    grid=lambda M, N, K: (N // 64, M // 64),
    block=(128, 1, 1),
    arch="sm_90a",
)
def readme_gemm(A, B, C):
    sA = smem.wgmma_tile(bf16, (64, 16), major="K")
    sB = smem.wgmma_tile(bf16, (16, 64), major="MN")
    acc = reg.array(f32, 32)
    # ... TMA loads + ptx.wgmma.mma_async(...) — each call emits exactly one PTX instruction


def test_readme_example() -> None:
    text = readme_gemm.ptx(M=128, N=128, K=64)
    assert text.count(".align 1024 .b8 wgmma_tile_") == 2
    ptxas(text, "sm_90a")


def test_decorator_without_arguments_and_with_arch() -> None:
    @kernel
    def simple(): ...

    @kernel(arch="sm_100a")
    def blackwell(): ...

    assert simple.arch == "sm_90a" and ".target sm_90a" in simple.ptx()
    assert ".target sm_100a" in blackwell.ptx()


def test_specs_page_example() -> None:
    a = Tile("M", "K", bf16, Layout.ROW)
    assert (a.rank, a.symbolic_dims) == (2, ("M", "K"))
    assert a.resolve_shape({"M": 4, "K": 8}) == (4, 8)
    assert a.extract_env((4, 8)) == {"M": 4, "K": 8}
    assert a.matches((4, 8), "bfloat16")
    assert Tile.wgmma_a(64, 64, bf16, tile_k=16).tma_box == (64, 16)


def test_readme_code_block_runs(capsys) -> None:
    import pathlib
    import re
    readme = (pathlib.Path(__file__).resolve().parents[2] / "README.md").read_text()
    block = re.search(r"```python\n(.*?)```", readme, re.S).group(1)
    exec(compile(block, "README.md", "exec"), {})
    out = capsys.readouterr().out
    assert "ld.global.f32" in out and "Resources(registers=" in out and "LDG" in out
