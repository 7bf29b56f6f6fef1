"""jaxptx.profile on traced kernels: tensor-core FLOPs of mma.sync, wgmma
and tcgen05.mma GEMMs (2 M N K, counted from the instructions executed),
PTX and Python lines, occupancy against hand-computed figures, pictures."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from jaxptx.profile.api import profile
from jaxptx.profile.occupancy import LIMITS, occupancy

ROOT = Path(__file__).resolve().parents[2]


def _gemm_inputs(m: int, n: int, k: int):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
    bt = rng.standard_normal((n, k)).astype(ml_dtypes.bfloat16)
    return a, bt, a.astype(np.float64) @ bt.astype(np.float64).T


def _line_of(text: str) -> int:
    """The line of examples/mma_gemm.py that holds ``text``."""
    lines = (ROOT / "examples" / "mma_gemm.py").read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line)


def _profile_mma_gemm():
    sys.path.insert(0, str(ROOT / "examples"))
    from mma_gemm import mma_gemm
    a, bt, want = _gemm_inputs(32, 16, 64)
    c = np.zeros((32, 16), np.float32)
    p = profile(mma_gemm, a, bt, c, resources=False)
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-4)
    return mma_gemm, p


def test_mma_sync_gemm_heatmap_labels_are_source_lines():
    # matplotlib is in the test extra: no skip when it is missing
    import matplotlib
    matplotlib.use("Agg")
    _, p = _profile_mma_gemm()
    fig = p.heatmap(by="source")
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert labels == [f"mma_gemm.py:{_line_of(text)}" for text in
                      ("frag_a = ", "frag_b = ", "ptx.st.global_.v2.f32(out, ", "ptx.st.global_.v2.f32(out + ")]
    import matplotlib.pyplot as plt
    plt.close(fig)


def test_mma_sync_gemm_flops_and_source_lines():
    mma_gemm, p = _profile_mma_gemm()
    assert p.tensor_flops == {"bf16": 2 * 32 * 16 * 64}
    (mma,) = [e for e in p.lines if e["instruction"].startswith("mma.sync")][:1]
    assert mma["source"].endswith(f"mma_gemm.py:{_line_of('ptx.mma.sync')}")
    # each load and store is charged to the Python line that wrote it
    frags = {f"mma_gemm.py:{_line_of(t)}" for t in ("frag_a = ", "frag_b = ")}
    stores = [f"mma_gemm.py:{_line_of(t)}" for t in ("ptx.st.global_.v2.f32(out, ", "ptx.st.global_.v2.f32(out + ")]
    assert {e["source"].rsplit("/", 1)[-1] for e in p.find("ld.global.b32")} == frags
    assert [e["source"].rsplit("/", 1)[-1] for e in p.find("st.global")] == stores
    # the PTX line number points at the instruction in the kernel's text
    text = mma_gemm.ptx(M=32, N=16, K=64).splitlines()
    for e in p.lines:
        assert text[e["line"] - 1].strip() == e["instruction"]
    # fragments are 4-byte loads of rows K*2 bytes apart: 8 rows x 4 lanes,
    # each row's 4 lanes in one 32-byte sector -> 8 sectors per request
    loads = p.find("ld.global.b32")
    assert loads and all(e["sectors_per_request"] == 8 for e in loads)


@pytest.mark.parametrize("name", ["ws_gemm", "tc_gemm"])
def test_wgmma_and_tcgen05_gemm_flops(name):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import gemm_kernels
    k = getattr(gemm_kernels, name)
    n = 128
    a, bt, want = _gemm_inputs(n, n, n)
    c = np.zeros((n, n), np.float32)
    spec = k.specialize(M=n, N=n, K=n)
    p = profile(spec.module, a, bt, c, *gemm_kernels.maps(a.shape, bt.shape), grid=spec.grid, block=spec.block,
                smem=spec.smem, resources=False)
    np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-3)
    assert p.tensor_flops == {"bf16": 2 * n * n * n}
    mmas = [e for e in p.lines if e["class"] == "tensor"]
    if name == "ws_gemm":
        # wgmma.m64n128k16: 2 consumer warpgroups x 2 K-blocks x 4 MMAs, 4 warps each
        assert sum(e["executions"] for e in mmas) == 2 * 2 * 4 * 4
        assert all(e["tensor_flops"] == e["executions"] // 4 * 2 * 64 * 128 * 16 for e in mmas)
    else:
        # tcgen05.mma M = N = 128, K = 16 (kind::f16), one thread issues each
        assert sum(e["predicated_on"] for e in mmas) == 2 * 4
        assert p.kernel["tensor_flops_unknown"] == 0 and not any("tensor_flops_unknown" in e for e in mmas)
    # K-major tiles, 128-byte swizzle: every 8 rows of 16 bytes in 8 bank groups
    assert p.kernel["tensor_smem_bytes"] > 0 and p.kernel["tensor_smem_conflicts"] == 0
    assert p.kernel["tma_bytes"] == 2 * n * n * 2
    est = p.roofline("B200")
    assert est["estimate"] and est["bound_by"] == "tensor cores"


def test_a_tcgen05_descriptor_the_profiler_cannot_decode_is_recorded_with_its_reason(monkeypatch):
    """The profiler reads each tcgen05.mma's instruction descriptor with the
    shared decoder; a word it cannot decode adds no FLOPs and says why on
    its line (the emulator's own decoder is not patched: the launch runs)."""
    from jaxptx.isa.encodings import EncodingError
    from jaxptx.profile import counters

    class Refusing:
        @staticmethod
        def decode(word: int, kind: str):
            raise EncodingError("test field", "readable", word)
    monkeypatch.setattr(counters, "InstrDesc", Refusing)
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import gemm_kernels
    n = 128
    a, bt, want = _gemm_inputs(n, n, n)
    c = np.zeros((n, n), np.float32)
    spec = gemm_kernels.tc_gemm.specialize(M=n, N=n, K=n)
    p = profile(spec.module, a, bt, c, *gemm_kernels.maps(a.shape, bt.shape), grid=spec.grid, block=spec.block,
                smem=spec.smem, resources=False)
    np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-3)
    mmas = [e for e in p.lines if e["class"] == "tensor"]
    assert p.tensor_flops == {} and mmas and p.kernel["tensor_flops_unknown"] == len(mmas)
    for e in mmas:
        assert re.fullmatch(r"instruction descriptor 0x[0-9a-f]{8}: test field must be readable, got \d+",
                            e["tensor_flops_unknown"]), e


# Hand-computed from the limits in occupancy.py's docstring:
#   warps/CTA = ceil(threads / 32); registers/warp = roundup(regs * 32, 256);
#   CTAs by registers = floor(16384 / regs-per-warp) * 4 // warps;
#   CTAs by shared = floor(smem_per_SM / roundup(smem + 1024, 128)).
@pytest.mark.parametrize("arch, threads, regs, smem, ctas, limited", [
    ("sm_90a", 256, 128, 0, 2, "registers"),          # 4096 regs/warp: 4 warps a partition, 16 a SM
    ("sm_80", 128, 32, 48 * 1024, 3, "shared"),       # 50176 B a CTA: 167936 // 50176 = 3
    ("sm_100a", 384, 168, 0, 1, "registers"),         # 5376 regs/warp: 3 warps a partition, 12 a SM
    ("sm_90a", 128, 32, 0, 16, "warps"),              # 64 warps / 4
    ("sm_80", 32, 16, 0, 32, "ctas"),                 # 32 CTAs of 1 warp
    ("sm_90a", 384, 40, 200 * 1024, 1, "shared"),     # 205824 B: one CTA in 233472
    ("sm_90a", 128, 32, 228 * 1024, 0, "shared"),     # more than a CTA may have
])
def test_occupancy_by_hand(arch, threads, regs, smem, ctas, limited):
    o = occupancy(arch, threads, regs, smem)
    assert o["ctas_per_sm"] == ctas
    assert o["limited_by"] == limited
    warps = -(-threads // 32)
    assert o["occupancy"] == ctas * warps / 64


def test_limits_are_written_down():
    for lim in LIMITS.values():
        assert lim.source and lim.max_warps == 64 and lim.registers == 65536
    assert LIMITS["sm_80"].shared_per_sm == 167936 and LIMITS["sm_90a"].shared_per_sm == 233472


def _ptxas_v(ptx_text: str, arch: str, tmp_path: Path) -> dict[str, int]:
    """Registers, static shared memory and spills as ``ptxas -v`` prints them
    (read here, not through jaxptx's own parser)."""
    from jaxptx.errors import ToolchainError
    from jaxptx.runtime import find_tool
    try:
        tool = find_tool("ptxas")
    except ToolchainError as e:
        pytest.skip(f"ptxas not available: {e}")
    src = tmp_path / "k.ptx"
    src.write_text(ptx_text)
    run = subprocess.run([tool, "-v", f"-arch={arch}", "-o", str(tmp_path / "k.cubin"), str(src)],
                         capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stderr
    log = run.stdout + run.stderr
    used = re.search(r"Used (\d+) registers(?:, used \d+ barriers)?(?:, (\d+) bytes smem)?", log)
    spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
    assert used and spills, log
    return {"registers": int(used.group(1)), "shared_bytes": int(used.group(2) or 0),
            "spill_stores": int(spills.group(1)), "spill_loads": int(spills.group(2))}


def _occupancy_sm80(threads: int, registers: int, shared: int) -> tuple[int, str, dict[str, int]]:
    """CTAs per SM on compute capability 8.0 by the CUDA occupancy rules
    (Programming Guide, "Technical Specifications per Compute Capability":
    64 warps, 32 CTAs, 64 K registers and 164 KB of shared memory per SM, 1 KB
    reserved per CTA; the Occupancy Calculator: registers per warp in units of
    256 over 4 sub-partitions of 16 K, shared memory in units of 128 bytes)."""
    warps = -(-threads // 32)
    regs_per_warp = -(-registers * 32 // 256) * 256
    limits = {"warps": 64 // warps, "ctas": 32,
              "registers": (16384 // regs_per_warp) * 4 // warps,
              "shared": 164 * 1024 // (-(-(shared + 1024) // 128) * 128)}
    ctas = min(limits.values())
    return ctas, next(k for k in ("warps", "ctas", "registers", "shared") if limits[k] == ctas), limits


def test_resources_and_occupancy_from_ptxas(tmp_path):
    sys.path.insert(0, str(ROOT / "examples"))
    from mma_gemm import mma_gemm
    a, bt, want_c = _gemm_inputs(16, 8, 32)
    c = np.zeros((16, 8), np.float32)
    want = _ptxas_v(mma_gemm.ptx(M=16, N=8, K=32), "sm_80", tmp_path)
    p = profile(mma_gemm, a, bt, c)
    np.testing.assert_allclose(c, want_c, rtol=1e-5, atol=1e-4)
    for key in ("registers", "shared_bytes", "spill_stores", "spill_loads"):
        assert p.resources[key] == want[key], key
    assert want["spill_stores"] == want["spill_loads"] == 0
    ctas, limited, limits = _occupancy_sm80(32, want["registers"], want["shared_bytes"])
    o = p.occupancy["sm_80"]
    assert (o["ctas_per_sm"], o["limited_by"], o["limits"]) == (ctas, limited, limits)
    assert o["occupancy"] == ctas * 1 / 64          # one warp a CTA, 64 warps an SM
    assert "occupancy" in str(p)


def test_pictures(tmp_path):
    # matplotlib is in the test extra: no skip when it is missing
    import matplotlib
    matplotlib.use("Agg")
    from profile_cases import transpose
    src = np.arange(32 * 32, dtype=np.float32)
    p = profile(transpose(32), src, np.zeros_like(src), block=(32, 32), resources=False)
    fig = p.heatmap()
    fig.savefig(tmp_path / "heat.png")
    fig = p.bank_map("ld.shared")
    fig.savefig(tmp_path / "banks.png")
    sample = p.samples[p.find("ld.shared")[0]["line"]]
    # lane l reads word 32 l: all in bank 0, in pass l
    assert sorted((a["lane"], a["bank"], a["pass"]) for a in sample["accesses"]) == \
        [(lane, 0, lane) for lane in range(32)]
    assert (tmp_path / "banks.png").stat().st_size > 0
