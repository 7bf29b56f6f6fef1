"""Compile CUTLASS's CuTe DSL Blackwell dense GEMM example for sm_100a on a
machine without a GPU and write the two PTX files
``tests/sim/test_cute_dsl_2cta.py`` runs (into ``build/`` beside this file).

usage (in a venv with ``nvidia-cutlass-dsl``, not jaxptx's)::

    python generate.py --example PATH/TO/dense_gemm.py [--out DIR]

``--example``: ``examples/python/CuTeDSL/cute/blackwell/kernel/dense_gemm/dense_gemm.py``
of a CUTLASS checkout. Both builds: bf16 A (M, K, L) and B (N, K, L)
K-major, f32 C (M, N, L) N-major, f32 accumulate, MMA tile 256 x 128,
``use_2cta_instrs=True``, ``use_tma_store=True``; M, N, K, L dynamic (fake
tensors: no device memory). Cluster (2, 1) gives ``gemm_2cta_sm100a.ptx``,
cluster (2, 2) (A multicast across each N pair) ``gemm_2cta_mcast_sm100a.ptx``.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import pathlib
import tempfile

BUILDS = {"gemm_2cta_sm100a.ptx": (2, 1), "gemm_2cta_mcast_sm100a.ptx": (2, 2)}


def main() -> None:
    """Write each build's PTX."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--example", required=True, type=pathlib.Path, help="CUTLASS's dense_gemm.py")
    parser.add_argument("--out", type=pathlib.Path, default=pathlib.Path(__file__).resolve().parent / "build")
    args = parser.parse_args()
    os.environ.setdefault("CUTE_DSL_ARCH", "sm_100a")
    os.environ["CUTE_DSL_KEEP"] = "ptx"
    os.environ.setdefault("CUTE_DSL_DUMP_DIR", tempfile.mkdtemp())     # must exist, or nothing is kept

    import cutlass
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

    spec = importlib.util.spec_from_file_location("dense_gemm", args.example)
    dense_gemm = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(dense_gemm)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, cluster in BUILDS.items():
        M, N, K, L = (cute.sym_int32() for _ in range(4))
        a = make_fake_compact_tensor(cutlass.BFloat16, (M, K, L), stride_order=(1, 0, 2), assumed_align=16)
        b = make_fake_compact_tensor(cutlass.BFloat16, (N, K, L), stride_order=(1, 0, 2), assumed_align=16)
        c = make_fake_compact_tensor(cutlass.Float32, (M, N, L), stride_order=(1, 0, 2), assumed_align=16)
        gemm = dense_gemm.DenseGemmKernel(cutlass.Float32, True, (256, 128), cluster, True)
        ptx = cute.compile(gemm, a, b, c, make_fake_stream()).__ptx__
        if ptx and not ptx.lstrip().startswith("//") and os.path.exists(ptx):   # some versions give a path
            ptx = pathlib.Path(ptx).read_text()
        (args.out / name).write_text(ptx)
        print(f"{args.out / name}: {len(ptx)} characters")


if __name__ == "__main__":
    main()
