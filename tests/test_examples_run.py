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


def test_node_allgather_runs_on_a_node_of_8(capsys: pytest.CaptureFixture[str]) -> None:
    """The collectives example: a ring all-gather and a one-shot multimem
    all-reduce on ``jaxptx.sim.System(8)``, each checked against numpy."""
    runpy.run_path(str(EXAMPLES / "node_allgather.py"), run_name="__main__")   # SystemExit on a mismatch
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0] == "== ring all-gather on 8 emulated GPUs: every device holds all 8 chunks =="
    assert lines[1].startswith("== one-shot multimem all-reduce on 8 emulated GPUs: matches numpy"), lines


def test_node_allgather_is_clean_under_the_node_sanitizer(monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """Both collectives pass the sanitizer across devices (every launch under
    ``JAXPTX_SIM_CHECK=1`` raises on a finding): their .sys release/acquire
    flags order every peer access."""
    monkeypatch.setenv("JAXPTX_SIM_CHECK", "1")
    runpy.run_path(str(EXAMPLES / "node_allgather.py"), run_name="__main__")
    assert len(capsys.readouterr().out.strip().splitlines()) == 2


def test_the_ring_without_its_flag_waits_is_a_race_between_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    from jaxptx import sim
    monkeypatch.setenv("JAXPTX_SIM_CHECK", "1")
    main = runpy.run_path(str(EXAMPLES / "node_allgather.py"))["main"]
    main.__globals__["ring_allgather"] = ring_without_waits
    with pytest.raises(sim.SanitizerError, match=r"device \d+ CTA .* device \d+ CTA"):
        main()


@kernel(arch="sm_90a", block=(64, 1, 1), raw_params=[("u32", "rank")])
def ring_without_waits(out, next_out, flag, next_flag, *, n):
    """The example's ring all-gather with its flag waits removed: a device
    forwards a slot before the previous device has delivered it."""
    rank = ptx.param("rank")
    tid = ptx.special.tid.x()
    for s in range(n - 1):
        off = ptx.mul.wide.u32(ptx.rem.u32(rank + (n - s), n) * 64 + tid, 4)
        ptx.st.global_.u32(next_out.ptr + off, ptx.ld.global_.u32(out.ptr + off))
        with ptx.if_(tid == 0):
            ptx.st.release.sys.global_.u32(next_flag.ptr, s + 1)


def test_the_ring_without_its_flag_waits_fails_the_check() -> None:
    main = runpy.run_path(str(EXAMPLES / "node_allgather.py"))["main"]
    main.__globals__["ring_allgather"] = ring_without_waits
    with pytest.raises(SystemExit, match="ring all-gather: does not match numpy"):
        main()
