"""The smallest useful kernel: ``y = x + i`` for element ``i`` of a vector.

A ``@kernel`` function runs in Python once, at trace time: each ``ptx.*``
call appends one PTX instruction, ``reg.*`` declares registers, and Python
arithmetic on registers emits the instruction it names. The output is PTX
text (``tiny.ptx(N=...)``), the real artifact; ``jax.jit(tiny)`` calls it as
one JAX primitive (on a GPU, a custom call; here, the CPU emulator).

:func:`summary` is the report every later example prints: instruction
counts per PTX opcode family, read from the traced module, and what ptxas
made of the kernel (registers, shared memory, spills).

    python examples/tiny.py
"""

from __future__ import annotations

from collections import Counter

from jaxptx import Kernel, Tile, ir, kernel, ptx
from jaxptx.types import u32

THREADS = 128


@kernel(in_specs=(Tile("N", u32),), out_specs=(Tile("N", u32),),
        grid=lambda N: (N // THREADS, 1, 1), block=(THREADS, 1, 1), arch="sm_90a")
def tiny(x, y):
    """``y[i] = x[i] + i`` for ``N`` a multiple of 128, one thread per element."""
    i = ptx.special.ctaid.x() * THREADS + ptx.special.tid.x()    # mov, mul.lo.u32, mov, add.u32
    offset = ptx.mul.wide.u32(i, 4)                                            # byte offset, u64
    v = ptx.ld.global_.u32(x.ptr + offset)
    ptx.st.global_.u32(y.ptr + offset, v + i)
    ptx.ret()


def _instructions(body: list) -> list[ir.Instruction]:
    out: list[ir.Instruction] = []
    for s in body:
        if isinstance(s, ir.Block):
            out += _instructions(s.body)
        elif isinstance(s, ir.Instruction):
            out.append(s)
    return out


def summary(k: Kernel, **dims: int) -> str:
    """A few lines about ``k`` specialised for ``dims``: launch shape,
    instruction counts by opcode family (``ld.global.u32`` and
    ``ld.shared.b32`` both count as ``ld``), and ptxas's report.

    Args:
        k: a jaxptx kernel.
        dims: its dimension (and template) values, as for ``k.ptx``.

    Returns:
        The report, lines joined by newlines.
    """
    spec = k.specialize(**dims)
    fn = next(i for i in k.module(**dims).items if isinstance(i, ir.Function))
    counts = Counter(i.opcode for i in _instructions(fn.body))
    res = k.resources(**dims)
    shape = ", ".join(f"{n}={v}" for n, v in dims.items())
    lines = [f"== {k.name} ({shape}) for {spec.target.name}: grid {spec.grid} x block {spec.block}"
             f"{f', cluster {spec.cluster}' if spec.cluster != (1, 1, 1) else ''} ==",
             f"PTX: {sum(counts.values())} instructions, {len(spec.ptx.splitlines())} lines"]
    top = [f"{op} {n}" for op, n in counts.most_common()]
    lines += ["  " + ", ".join(top[i:i + 8]) for i in range(0, len(top), 8)]
    lines.append(f"ptxas: {res.registers} registers/thread, {res.shared_bytes + spec.smem} B shared "
                 f"({spec.smem} dynamic), spills {res.spill_stores} stores / {res.spill_loads} loads, "
                 f"stack {res.stack_frame} B")
    return "\n".join(lines)


def main() -> None:
    """Print tiny's PTX and summary, run ``jax.jit(tiny)`` and check it."""
    import jax
    import numpy as np

    print(tiny.ptx(N=256))
    print(summary(tiny, N=256))
    x = np.arange(256, dtype=np.uint32) * 3
    y = np.asarray(jax.jit(tiny)(x))
    ok = np.array_equal(y, x + np.arange(256, dtype=np.uint32))
    print(f"== jax.jit(tiny) on {jax.devices()[0].platform}: {'matches' if ok else 'DIFFERS FROM'} numpy ==")
    if not ok:
        raise SystemExit("tiny: the emulator's result does not match numpy")


if __name__ == "__main__":
    main()
