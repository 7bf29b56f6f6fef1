"""The teaching examples run as ``python examples/<name>.py`` runs them: each
prints its PTX summary (the instructions its design names, ptxas with no
spills), runs on the CPU emulator under ``jax.jit`` and passes its own check
against numpy; and that check fails on a wrong kernel."""

from __future__ import annotations

import pathlib
import runpy

import pytest

from jaxptx import Tile, kernel, ptx
from jaxptx.types import u32

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"

# Each example and the opcode families its module docstring promises.
DESIGNS = {
    "tiny": ("ld", "st"),
    "ampere_gemm": ("cp.async", "cp.async.wait_group", "ldmatrix", "mma"),
    "hopper_gemm": ("cp.async.bulk.tensor", "mbarrier.try_wait.parity", "mbarrier.arrive", "wgmma.mma_async"),
    "blackwell_gemm": ("cp.async.bulk.tensor", "tcgen05.alloc", "tcgen05.mma", "tcgen05.commit", "tcgen05.ld"),
}


@pytest.fixture(autouse=True)
def _examples_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    """As ``python examples/x.py`` does: the script's folder on ``sys.path``
    (the GEMM examples import ``summary`` from ``tiny``)."""
    monkeypatch.syspath_prepend(str(EXAMPLES))


@pytest.mark.parametrize("name", sorted(DESIGNS))
def test_example_runs_and_checks_itself(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    runpy.run_path(str(EXAMPLES / f"{name}.py"), run_name="__main__")   # SystemExit on a mismatch
    out = capsys.readouterr().out
    assert "spills 0 stores / 0 loads, stack 0 B" in out, out
    families = out.split("PTX: ", 1)[1].split("ptxas:", 1)[0]
    for op in DESIGNS[name]:
        assert f" {op} " in families.replace(",", " "), f"{name}: no {op} in {families}"
    last = out.strip().splitlines()[-1]
    assert last.startswith(f"== jax.jit({name}) on ") and ("matches" in last or "max error" in last), last


@kernel(in_specs=(Tile("N", u32),), out_specs=(Tile("N", u32),),
        grid=lambda N: (N // 128, 1, 1), block=(128, 1, 1), arch="sm_90a")
def off_by_one(x, y):
    """``y[i] = x[i] + i + 1``: what ``tiny`` must not compute."""
    i = ptx.special.ctaid.x() * 128 + ptx.special.tid.x()
    off = ptx.mul.wide.u32(i, 4)
    ptx.st.global_.u32(y.ptr + off, ptx.ld.global_.u32(x.ptr + off) + i + 1)


def test_a_wrong_kernel_fails_the_check() -> None:
    main = runpy.run_path(str(EXAMPLES / "tiny.py"))["main"]
    main.__globals__["tiny"] = off_by_one
    with pytest.raises(SystemExit, match="does not match numpy"):
        main()
