"""A pre-norm transformer block built from :mod:`jaxptx.kernels`, the block a
new user writes first, against the same block in plain ``jnp``.

The forward pass, on ``x`` of shape (B, S, D) float32 (the residual stream):

1. ``layer_norm`` (f32 kernel) → bf16;
2. ``matmul`` by ``w_qkv`` (D, 3D), bf16 out, split into q, k, v of
   (B, S, H, D/H);
3. causal ``flash_attention`` (bf16);
4. ``matmul`` by ``w_out`` (D, D), f32 out, added to ``x``;
5. ``layer_norm`` → bf16; ``matmul`` by ``w_gate`` and ``w_up`` (D, F) in
   one launch (the two stacked as (D, 2F)), bf16 out; ``swiglu``;
6. ``matmul`` by ``w_down`` (F, D), f32 out, added to the stream.

Every op is one jaxptx kernel launch (eight in all); the glue (casts,
reshapes, the residual adds) is XLA's. :func:`block_reference` is the same
computation in ``jnp`` with the casts at the same places, so the two agree
to bf16 rounding. Without a GPU each kernel runs on the CPU emulator.

    python benchmarks/transformer_block.py [--batch 4 --seq 512 --dim 512] [--repeat 3] [--arch auto]
    python benchmarks/transformer_block.py --smoke    # CI: B=1, S=128, D=128, one call

Prints the compile-and-first-call time, the best of ``--repeat`` calls of the
jitted block, the jnp block's time, and a ``self-check:`` line (exit status 1
when the two differ by more than :data:`TOLERANCE`).
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import numpy as np

# Largest |jaxptx - jnp| allowed, as a fraction of the jnp block's largest |output|:
# both round q, k, v, the attention output, the norms' outputs and the MLP's
# hidden layer to bf16, but sum in orders of their own, so a value near a bf16
# rounding boundary may land one bf16 ulp (2**-8 relative) apart and carry it on.
TOLERANCE = 2e-2

HEAD_DIM = 64


def init_params(dim: int, hidden: int, seed: int = 0) -> dict[str, Any]:
    """Random weights of a block of model width ``dim`` and MLP width ``hidden``.

    Args:
        dim: the model width D (a multiple of :data:`HEAD_DIM`).
        hidden: the MLP's hidden width F.
        seed: the numpy seed.

    Returns:
        ``ln1_w``, ``ln1_b``, ``ln2_w``, ``ln2_b`` (D,) float32; ``w_qkv`` (D, 3D),
        ``w_out`` (D, D), ``w_gate_up`` (D, 2F) (gate columns first) and
        ``w_down`` (F, D), bfloat16, each scaled by 1/sqrt(fan-in).
    """
    import jax.numpy as jnp

    rng = np.random.default_rng(seed)

    def weight(fan_in: int, fan_out: int) -> Any:
        w = rng.standard_normal((fan_in, fan_out), dtype=np.float32) / np.sqrt(fan_in)
        return jnp.asarray(w, jnp.bfloat16)

    def vec(mean: float) -> Any:
        return jnp.asarray(mean + 0.1 * rng.standard_normal(dim, dtype=np.float32))

    return {"ln1_w": vec(1.0), "ln1_b": vec(0.0), "ln2_w": vec(1.0), "ln2_b": vec(0.0),
            "w_qkv": weight(dim, 3 * dim), "w_out": weight(dim, dim),
            "w_gate_up": weight(dim, 2 * hidden), "w_down": weight(hidden, dim)}


def block_jaxptx(x: Any, params: dict[str, Any], *, arch: str = "auto") -> Any:
    """The block's forward pass from :mod:`jaxptx.kernels` ops (module docstring).

    Args:
        x: (B, S, D) float32, D a multiple of :data:`HEAD_DIM`.
        params: as :func:`init_params` returns.
        arch: the kernels' variant: ``"auto"``, ``"sm_80"``, ``"sm_90a"`` or ``"sm_100a"``.

    Returns:
        (B, S, D) float32.
    """
    import jax.numpy as jnp

    from jaxptx import kernels

    b, s, d = x.shape
    heads = d // HEAD_DIM
    hidden = params["w_down"].shape[0]
    rows = x.reshape(b * s, d)
    h = kernels.layer_norm(rows, params["ln1_w"], params["ln1_b"], arch=arch).astype(jnp.bfloat16)
    qkv = kernels.matmul(h, params["w_qkv"], preferred_element_type=jnp.bfloat16, arch=arch)
    q, k, v = (t.reshape(b, s, heads, HEAD_DIM) for t in jnp.split(qkv, 3, axis=1))
    o = kernels.flash_attention(q, k, v, causal=True, arch=arch).reshape(b * s, d)
    rows = rows + kernels.matmul(o, params["w_out"], arch=arch)
    h = kernels.layer_norm(rows, params["ln2_w"], params["ln2_b"], arch=arch).astype(jnp.bfloat16)
    gate_up = kernels.matmul(h, params["w_gate_up"], preferred_element_type=jnp.bfloat16, arch=arch)
    act = kernels.swiglu(gate_up[:, :hidden], gate_up[:, hidden:], arch=arch)
    rows = rows + kernels.matmul(act, params["w_down"], arch=arch)
    return rows.reshape(b, s, d)


def block_reference(x: Any, params: dict[str, Any]) -> Any:
    """:func:`block_jaxptx` in plain ``jnp`` (XLA), bf16 casts at the same places.

    Args:
        x: (B, S, D) float32.
        params: as :func:`init_params` returns.

    Returns:
        (B, S, D) float32.
    """
    import jax
    import jax.numpy as jnp

    b, s, d = x.shape
    heads = d // HEAD_DIM
    hidden = params["w_down"].shape[0]

    def norm(t: Any, w: Any, bias: Any) -> Any:
        mean = t.mean(-1, keepdims=True)
        var = jnp.square(t - mean).mean(-1, keepdims=True)
        return ((t - mean) * jax.lax.rsqrt(var + 1e-5) * w + bias).astype(jnp.bfloat16)

    def dot(p: Any, w: Any, out: Any = jnp.float32) -> Any:
        return jnp.dot(p, w, preferred_element_type=jnp.float32).astype(out)

    rows = x.reshape(b * s, d)
    qkv = dot(norm(rows, params["ln1_w"], params["ln1_b"]), params["w_qkv"], jnp.bfloat16)
    q, k, v = (t.reshape(b, s, heads, HEAD_DIM) for t in jnp.split(qkv, 3, axis=1))
    o = jax.nn.dot_product_attention(q, k, v, is_causal=True).reshape(b * s, d)
    rows = rows + dot(o, params["w_out"])
    gate_up = dot(norm(rows, params["ln2_w"], params["ln2_b"]), params["w_gate_up"], jnp.bfloat16)
    g, u = gate_up[:, :hidden].astype(jnp.float32), gate_up[:, hidden:].astype(jnp.float32)
    act = (g * jax.nn.sigmoid(g) * u).astype(jnp.bfloat16)
    rows = rows + dot(act, params["w_down"])
    return rows.reshape(b, s, d)


def default_hidden(dim: int) -> int:
    """The MLP width of a SwiGLU block of width ``dim``: 8·dim/3 (the parameter count of a
    4·dim GELU MLP), rounded up to a multiple of 128 as LLaMA does."""
    return -(-8 * dim // 3 // 128) * 128


def make_input(batch: int, seq: int, dim: int, seed: int = 1) -> Any:
    """A random (batch, seq, dim) float32 residual stream."""
    import jax.numpy as jnp

    return jnp.asarray(np.random.default_rng(seed).standard_normal((batch, seq, dim), dtype=np.float32))


def relative_error(got: Any, want: Any) -> float:
    """max |got - want| over max |want| (at least 1)."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.abs(got - want).max() / max(1.0, float(np.abs(want).max())))


def measure(batch: int, seq: int, dim: int, hidden: int, repeat: int,
            arch: str = "auto") -> dict[str, float]:
    """Time the jitted jaxptx block and the jitted jnp block, and compare them.

    Args:
        batch, seq, dim: the input's shape (B, S, D).
        hidden: the MLP's hidden width F.
        repeat: timed calls of each; the best counts.
        arch: the kernels' variant.

    Returns:
        ``first_s`` (trace, compile and the first call of the jaxptx block),
        ``jaxptx_s`` and ``jnp_s`` (best of ``repeat`` blocked calls, the two
        interleaved), ``error`` (:func:`relative_error` of the two outputs).
    """
    import jax

    params = init_params(dim, hidden)
    x = make_input(batch, seq, dim)
    ours = jax.jit(lambda x, p: block_jaxptx(x, p, arch=arch))
    ref = jax.jit(block_reference)
    t0 = time.perf_counter()
    got = ours(x, params).block_until_ready()
    first = time.perf_counter() - t0
    want = ref(x, params).block_until_ready()
    best_ours = best_ref = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        ours(x, params).block_until_ready()
        best_ours = min(best_ours, time.perf_counter() - t0)
        t0 = time.perf_counter()
        ref(x, params).block_until_ready()
        best_ref = min(best_ref, time.perf_counter() - t0)
    return {"first_s": first, "jaxptx_s": best_ours, "jnp_s": best_ref, "error": relative_error(got, want)}


def main(argv: list[str] | None = None) -> int:
    """Print the block's times and its self-check; 1 when the two blocks differ."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=None, help="B (default 4; --smoke: 1)")
    ap.add_argument("--seq", type=int, default=None, help="S (default 512; --smoke: 128)")
    ap.add_argument("--dim", type=int, default=None, help="D, a multiple of 64 (default 512; --smoke: 128)")
    ap.add_argument("--hidden", type=int, default=None,
                    help="the MLP's width F (default 8D/3 rounded up to a multiple of 128, as LLaMA's)")
    ap.add_argument("--repeat", type=int, default=None, help="timed calls, the best counts (default 3)")
    ap.add_argument("--arch", default="auto", help="the kernels' variant (default auto)")
    ap.add_argument("--smoke", action="store_true", help="CI smoke run: B=1, S=128, D=128, one call")
    args = ap.parse_args(argv)
    batch = args.batch or (1 if args.smoke else 4)
    seq = args.seq or (128 if args.smoke else 512)
    dim = args.dim or (128 if args.smoke else 512)
    hidden = args.hidden or default_hidden(dim)
    repeat = args.repeat or (1 if args.smoke else 3)
    r = measure(batch, seq, dim, hidden, repeat, args.arch)
    print(f"transformer block B={batch} S={seq} D={dim} F={hidden} heads={dim // HEAD_DIM} "
          f"(arch={args.arch}), best of {repeat}")
    print(f"  jaxptx kernels under jax.jit: {r['jaxptx_s']:.3f} s (first call, with tracing and "
          f"compiling: {r['first_s']:.3f} s)")
    print(f"  plain jnp under jax.jit:      {r['jnp_s']:.4f} s")
    if r["error"] > TOLERANCE:
        print(f"FAILED: jaxptx block differs from the jnp block: relative error {r['error']:.2e} "
              f"> {TOLERANCE}")
        return 1
    print(f"self-check: the jaxptx block matches the jnp block (relative error {r['error']:.1e} "
          f"<= {TOLERANCE})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
