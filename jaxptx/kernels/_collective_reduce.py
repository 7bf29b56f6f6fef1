"""The all-reduce kernels: one-shot, two-shot and multimem.

Each sums a flat vector ``x`` of ``N`` elements (f32, bf16 or f16; ``N`` a
multiple of ``world * vec``, ``vec`` = 16 bytes of elements: the wrapper
pads) over the devices of a mesh axis into ``y``, in f32 with one rounding
at the end. Work is split in 16-byte *chunks*; ``F`` CTAs of ``THREADS``
threads walk them grid-stride, and CTA ``c`` meets CTA ``c`` of every
device at the flag barriers of :mod:`._collective_sync` (slot ``c``).

* ``one_shot``: barrier 1 (every device's ``x`` is ready to read), each
  device reads every device's ``x`` (ranks in order 0, 1, ...: every device
  gets the same bits) and writes its own ``y``; barrier 2 (nobody is still
  reading my ``x`` when I return it to XLA). ``W`` reads per element.
* ``two_shot``: barrier 1; device ``r`` sums slice ``r`` (``N / W``
  elements) over all devices and stores it to slice ``r`` of every
  device's ``y`` (a reduce-scatter, then an all-gather by push); barrier 2
  (every slice has arrived, and no one reads my ``x`` any more). One read and
  ``W`` writes per element of the slice: less traffic per device for large ``N``.
* ``multimem``: as two-shot, but the sum is one ``multimem.ld_reduce``
  (the switch reads and adds every device's copy) and the push one
  ``multimem.st`` over the multicast addresses; the barriers arrive with
  ``multimem.red``. Needs sm_90 and a multicast object.
"""

from __future__ import annotations

import functools

from ..dsl import Kernel, TensorArg, Tile, kernel, ptx, reg
from ..types import b32, bf16, f16, f32, u32
from ._collective_sync import arrive_and_wait
from ._norms_rows import Plan, load, store

__all__ = ["MAX_CTAS", "METHODS", "THREADS", "ctas_for", "reduce_kernel", "vec_of"]

METHODS = ("one_shot", "two_shot", "multimem")
THREADS = 256
# CTAs per device at most: every CTA waits for its peers, so all must be
# resident at once (well under any GPU's SM count).
MAX_CTAS = 32
_TYPES = {"f32": f32, "bf16": bf16, "f16": f16}
_ITEMSIZE = {"f32": 4, "bf16": 2, "f16": 2}


def vec_of(dtype: str) -> int:
    """Elements in one 16-byte chunk."""
    return 16 // _ITEMSIZE[dtype]


def ctas_for(method: str, n: int, dtype: str, world: int) -> int:
    """CTAs per device: enough for one chunk per thread of the work one
    device does (all of ``x`` for one-shot, a slice otherwise), at most
    ``MAX_CTAS``."""
    chunks = n // vec_of(dtype) // (1 if method == "one_shot" else world)
    return max(1, min(MAX_CTAS, -(-chunks // THREADS)))


def _plan(n: int, dtype: str) -> Plan:
    return Plan(n, dtype, vec_of(dtype), THREADS, cached=False)


def _one_shot(x: TensorArg, flag: TensorArg, y: TensorArg, dtype: str) -> None:
    n, ctas = x.shape[0], flag.shape[0]
    world, p = ptx.world_size(), _plan(x.shape[0], dtype)
    cta = ptx.special.ctaid.x()
    arrive_and_wait(flag, cta, 1, world)
    for idx in ptx.range_(cta * THREADS + ptx.special.tid.x(), n // p.vec, ctas * THREADS, dtype=u32):
        acc = load(p, x.peer_ptr(0), idx)
        for r in range(1, world):
            acc = [a + b for a, b in zip(acc, load(p, x.peer_ptr(r), idx))]
        store(p, y.ptr, idx, acc)
    arrive_and_wait(flag, cta, 2, world)


def _two_shot(x: TensorArg, flag: TensorArg, y: TensorArg, dtype: str) -> None:
    n, ctas = x.shape[0], flag.shape[0]
    world, p = ptx.world_size(), _plan(x.shape[0], dtype)
    per_slice = n // p.vec // world
    cta = ptx.special.ctaid.x()
    first = ptx.rank() * per_slice
    arrive_and_wait(flag, cta, 1, world)
    for idx in ptx.range_(cta * THREADS + ptx.special.tid.x(), per_slice, ctas * THREADS, dtype=u32):
        chunk = first + idx
        acc = load(p, x.peer_ptr(0), chunk)
        for r in range(1, world):
            acc = [a + b for a, b in zip(acc, load(p, x.peer_ptr(r), chunk))]
        for r in range(world):
            store(p, y.peer_ptr(r), chunk, acc)
    arrive_and_wait(flag, cta, 2, world)


def _multimem(x: TensorArg, flag: TensorArg, y: TensorArg, dtype: str) -> None:
    n, ctas = x.shape[0], flag.shape[0]
    world, vec = ptx.world_size(), vec_of(dtype)
    per_slice = n // vec // world
    cta = ptx.special.ctaid.x()
    first = ptx.rank() * per_slice
    if dtype == "f32":
        values, ld, st = reg.array(f32, 4), ptx.multimem.ld_reduce.relaxed.sys.global_.add.v4.f32, \
            ptx.multimem.st.relaxed.sys.global_.v4.f32
    else:   # eight halves as four packed pairs, summed in f32 by the switch
        values = reg.array(b32, 4)
        ld = getattr(ptx.multimem.ld_reduce.relaxed.sys.global_.add.acc__f32.v4, f"{dtype}x2")
        st = getattr(ptx.multimem.st.relaxed.sys.global_.v4, f"{dtype}x2")
    arrive_and_wait(flag, cta, 1, world, multimem=True)
    for idx in ptx.range_(cta * THREADS + ptx.special.tid.x(), per_slice, ctas * THREADS, dtype=u32):
        offset = ptx.mul.wide.u32(first + idx, 16)
        ld(values, ptx.addr(x.multimem_ptr + offset))
        st(ptx.addr(y.multimem_ptr + offset), values)
    arrive_and_wait(flag, cta, 2, world, multimem=True)


_BODIES = {"one_shot": _one_shot, "two_shot": _two_shot, "multimem": _multimem}
_PEERS = {"one_shot": ("x", "flag"), "two_shot": ("x", "flag", "y"), "multimem": ("x", "flag", "y")}


@functools.cache
def reduce_kernel(method: str, dtype: str, arch: str) -> Kernel:
    """The all-reduce kernel of ``method`` for ``dtype`` ("f32", "bf16",
    "f16") traced for ``arch``: ``(x (N,), flag (F,) u32) -> y (N,)``, ``F``
    CTAs; called as ``k(x, flag, axis_name=...)`` inside ``jax.shard_map``."""
    t, body = _TYPES[dtype], _BODIES[method]

    def fn(x: TensorArg, flag: TensorArg, y: TensorArg) -> None:
        body(x, flag, y, dtype)
    fn.__name__ = fn.__qualname__ = f"all_reduce_{method}_{dtype}"
    fn.__doc__ = f"All-reduce (sum) of ``x`` over the call's mesh axis, {method} (module docstring)."
    return kernel(fn, in_specs=(Tile("N", t), Tile("F", u32)), out_specs=(Tile("N", t),),
                  grid=_grid, block=(THREADS, 1, 1), arch=arch, peers=_PEERS[method])


def _grid(N: int, F: int) -> tuple[int, int, int]:
    return (F, 1, 1)

