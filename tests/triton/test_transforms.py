"""What jax-triton cannot do and ``jaxptx.triton`` can: ``jax.vmap``,
``jax.grad`` (with a Triton backward in ``jaxptx.custom_vjp``), eight CPU
devices under ``jax.shard_map``; the CUDA lowering; import isolation."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("triton.language", reason="no triton: pip install -e '.[triton]'")

import jaxptx  # noqa: E402
import jaxptx.triton as jt  # noqa: E402
from triton_kernels import (  # noqa: E402
    add_kernel, axpb_kernel, square_backward_kernel, square_kernel)

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
RNG = np.random.default_rng(2)
X = RNG.standard_normal(300).astype(np.float32)


def f32(*shape):
    return jax.ShapeDtypeStruct(shape, jnp.float32)


def axpb(x, a=2.0, b=1.0):
    return jt.triton_call(x, a=a, b=b, n=x.size, kernel=axpb_kernel, out_type=f32(x.size),
                          grid=(x.size + 127) // 128, BLOCK=128)


def test_vmap_loops_over_the_batch():
    xs = RNG.standard_normal((3, 300)).astype(np.float32)
    f = jax.jit(jax.vmap(axpb))
    np.testing.assert_allclose(f(xs), 2 * xs + 1, rtol=1e-6, atol=1e-6)
    assert "while" in f.lower(xs).as_text()
    # an unbatched operand beside a batched one
    g = jax.jit(jax.vmap(lambda x, y: jt.triton_call(x, y, n=300, kernel=add_kernel,
                                                     out_type=f32(300), grid=3, BLOCK=128),
                         in_axes=(0, None)))
    np.testing.assert_array_equal(g(xs, X), xs + X)


def test_grad_through_custom_vjp_with_a_triton_backward():
    def square(x):
        return jt.triton_call(x, n=x.size, kernel=square_kernel, out_type=f32(x.size), grid=3,
                              BLOCK=128)

    def square_vjp(x, y, dy):
        return jt.triton_call(x, dy, n=x.size, kernel=square_backward_kernel,
                              out_type=f32(x.size), grid=3, BLOCK=128)

    f = jaxptx.custom_vjp(square, square_vjp)
    grad = jax.jit(jax.grad(lambda x: jnp.sum(jnp.sin(f(x)))))(X)
    np.testing.assert_allclose(grad, np.cos(X * X) * 2 * X, rtol=1e-5, atol=1e-6)


def test_a_bare_triton_call_has_no_derivative():
    with pytest.raises(Exception, match=r"ptx_call axpb_kernel has no derivative: .*"
                                        r"jaxptx\.custom_vjp"):
        jax.grad(lambda x: axpb(x).sum())(X)


def test_the_cuda_lowering_is_the_typed_ffi_launch():
    lowered = jax.jit(axpb).trace(X).lower(lowering_platforms=("cuda",))
    text = lowered.as_text()
    m = re.search(r"stablehlo\.custom_call @jaxptx_launch_v2\(%arg0\) \{.*?"
                  r"mhlo\.backend_config = \{(.*?)\}, operand_layouts", text)
    assert m, text[:2000]
    attrs = m.group(1)
    assert 'entry = "axpb_kernel"' in attrs
    assert re.search(r"block = dense<\[128, 1, 1\]>", attrs) and re.search(
        r"grid = dense<\[3, 1, 1\]>", attrs), attrs[:500]
    assert ".version 9.0" in attrs and ".target sm_90a" in attrs     # see _compile's doc
    assert "API_VERSION_TYPED_FFI" in lowered.as_text(dialect="hlo")


def test_the_target_follows_jaxptx_arch(monkeypatch):
    for arch in ("sm_80", "sm_100a"):
        monkeypatch.setenv("JAXPTX_ARCH", arch)
        spec, = jaxptx.jax.kernels_in(jax.jit(lambda x: axpb(x)).lower(X)).values()
        assert f".target {arch}\n" in spec.ptx


def _run(code: str, **env: str) -> str:
    run = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                         text=True, timeout=300, cwd=ROOT,
                         env={**os.environ, "JAX_PLATFORMS": "cpu", **env})
    assert run.returncode == 0, run.stdout + run.stderr
    return run.stdout.strip()


def test_shard_map_on_eight_cpu_devices():
    out = _run(f"""
        import sys
        sys.path.insert(0, {str(HERE)!r})
        import jax, jax.numpy as jnp, numpy as np
        from jax.sharding import AxisType, PartitionSpec as P
        import jaxptx.triton as jt
        from triton_kernels import add_kernel
        assert jax.device_count() == 8, jax.devices()
        mesh = jax.make_mesh((8,), ("d",), axis_types=(AxisType.Auto,))
        def local(x, y):
            n = x.shape[0]
            return jt.triton_call(x, y, n=n, kernel=add_kernel, grid=1, BLOCK=64,
                                  out_type=jax.ShapeDtypeStruct((n,), jnp.float32))
        f = jax.jit(jax.shard_map(local, mesh=mesh, in_specs=(P("d"), P("d")), out_specs=P("d")))
        x = np.arange(512, dtype=np.float32)
        np.testing.assert_array_equal(f(x, 2 * x), 3 * x)
        print("launches", f.lower(x, x).as_text().count("custom_call @jaxptx_cpu_v2"))
        """, XLA_FLAGS="--xla_force_host_platform_device_count=8")
    assert out.endswith("launches 1")        # one call in the body, run per shard


def test_import_jaxptx_never_imports_triton():
    out = _run("""
        import sys, jaxptx, jaxptx.jax
        print(sorted(m for m in sys.modules if m == "triton" or m.startswith("triton.")))
        """)
    assert out == "[]"


def test_without_triton_the_import_names_the_extra():
    out = _run("""
        import sys
        sys.modules["triton"] = None          # as if it were not installed
        try:
            import jaxptx.triton
        except ImportError as e:
            print(e)
        """)
    assert out == ("jaxptx.triton needs Triton, which is not installed: pip install "
                   "'jaxptx[triton]' (Triton 3.3 or later)")


def test_the_docstring_example_runs(tmp_path):
    import doctest
    example = doctest.DocTestParser().get_examples(jt.triton_call.__doc__)
    assert example, "triton_call has no example"
    script = tmp_path / "example.py"                 # @triton.jit reads its source from a file
    lines = ["from jaxptx.triton import triton_call"]
    for ex in example:
        lines.append(ex.source if not ex.want else f"print(repr({ex.source.strip()}))")
    script.write_text("\n".join(lines))
    out = _run(f"exec(compile(open({str(script)!r}).read(), {str(script)!r}, 'exec'))")
    assert out == "\n".join(ex.want.strip() for ex in example if ex.want)
