"""The norm kernels: one factory per op, one ``@kernel`` per (dtype, arch,
block size, path), cached.

Row kernels (``rms_norm``, ``layer_norm``, ``softmax``) take ``x`` as
``(R, N)`` and run one CTA per row, reduced with
:func:`jaxptx.dsl.reduce.cta_reduce`, or, for rows a warp covers, one warp
per row and several rows per CTA, reduced with
:func:`jaxptx.dsl.reduce.warp_reduce`; statistics are f32. ``swiglu`` is elementwise over a flat
``(T,)`` view, one chunk per thread. Every kernel is declared ``batch="z"``
(``jax.vmap`` is one launch, the batch as grid z) and ``shardable`` along
its rows. The PTX is the same for every ``arch``; each target gets its own
kernel object, traced and compiled for it.
"""

from __future__ import annotations

import functools

from collections.abc import Callable

from ..dsl import Kernel, Reg, TensorArg, Tile, emit_instruction, kernel, ptx, reg
from ..dsl.reduce import cta_reduce, warp_reduce
from ..types import TYPES, f32
from ._norms_rows import ITEMSIZE, MAX_CACHED, ROWS_PER_CTA, Plan, chunks, load, plan, store

__all__ = ["row_kernel", "swiglu_kernel", "ELEMENTWISE_THREADS", "LOG2E"]

LOG2E = 1.4426950408889634
ELEMENTWISE_THREADS = 256


Reduce = Callable[[Reg, str], Reg]


Save = Callable[[list[Reg]], None]


def _each_row(x: TensorArg, tensors: tuple[Reg, ...], p: Plan,
              body: Callable[[Reg, list[Reg], Reduce, Save], None], stats: tuple[Reg, ...] = ()) -> None:
    """Run ``body(lane, rows, reduce, save)`` for this CTA's row(s).

    ``lane`` is the thread's index within its row, ``rows`` the row's address
    in each of ``tensors`` (``(R, N)`` arrays), ``save(values)`` has lane 0
    store the row's f32 ``values`` to ``stats`` (one ``(R,)`` or ``(R, 2)``
    array: the statistics the backward kernels read; called last, so the
    address is computed late), and ``reduce(value, op)``
    reduces over the threads of the row: ``cta_reduce`` for a CTA per row,
    ``warp_reduce`` for a warp per row (rows past ``R`` in the last CTA do
    nothing; the branch is uniform per warp, so the shuffles stay converged).
    """
    tid = ptx.special.tid.x()
    if p.rows == 1:
        lane, row = tid, ptx.special.ctaid.x()
        reduce: Reduce = lambda v, op: cta_reduce(v, op, warps=p.warps)  # noqa: E731
    else:
        lane = tid & 31
        row = ptx.mad.lo.u32(ptx.special.ctaid.x(), p.rows, tid >> 5)
        reduce = warp_reduce
    offset = ptx.mul.wide.u32(row, p.n * ITEMSIZE[p.dtype])
    rows = [t + offset for t in tensors]

    def save(values: list[Reg]) -> None:
        (base,) = stats
        with ptx.if_(lane == 0):
            address = ptx.addr(base + ptx.mul.wide.u32(row, 4 * len(values)))
            if len(values) == 1:
                emit_instruction("st", ("global", "f32"), (address, values[0]))
            else:
                emit_instruction("st", ("global", f"v{len(values)}", "f32"), (address, values))

    if x.shape[0] % p.rows:
        with ptx.if_(row < x.shape[0]):
            body(lane, rows, reduce, save)
    else:
        body(lane, rows, reduce, save)


def _prefetch(p: Plan, vectors: int) -> bool:
    """Whether to load the per-column vectors (``w``, ``b``) with the row, before
    the reductions, so their latency overlaps the shuffles and barriers: when
    the row is in registers and they fit beside it in the register budget."""
    return p.cached and p.rounds * p.vec * (1 + vectors) <= MAX_CACHED


def _row_plan(x: TensorArg, threads: int, cached: bool, max_cached: int) -> Plan:
    p = plan(x.shape[1], x.dtype.name, max_cached=max_cached)
    # The wrapper picks the kernel by plan(); a mismatch is our bug.
    assert (p.threads, p.cached) == (threads, cached), (p, threads, cached)
    return p


def _rms_norm_body(x, w, y, rstd_out, *, eps: float, threads: int, cached: bool,
                   max_cached: int) -> None:
    p = _row_plan(x, threads, cached, max_cached)
    xp, wp, yp, rp = ptx.batch_ptrs(x, w, y, rstd_out)

    def row(lane: Reg, rows: list[Reg], reduce: Reduce, save: Save) -> None:
        x_row, y_row = rows
        acc = reg.scalar(f32, 0.0)
        cache, early = {}, {}
        for k, i, m in chunks(p, lane):
            values = cache[k] = load(p, x_row, i, m)
            if _prefetch(p, 1):
                early[k] = load(p, wp, i, m, nc=True)
            for v in values:
                ptx.fma.rn.f32(acc, v, v, acc)      # masked-off values load as 0
        rstd = ptx.rsqrt.approx.f32(ptx.fma.rn.f32(reduce(acc, "add"), 1.0 / p.n, float(eps)))
        for k, i, m in chunks(p, lane):
            values = cache[k] if k is not None else load(p, x_row, i, m)
            weights = early[k] if k in early else load(p, wp, i, m, nc=True)
            store(p, y_row, i, [v * rstd * g for v, g in zip(values, weights)], m)
        save([rstd])

    _each_row(x, (xp, yp), p, row, (rp,))


def _layer_norm_body(x, w, b, y, stats_out, *, eps: float, threads: int, cached: bool,
                     max_cached: int) -> None:
    p = _row_plan(x, threads, cached, max_cached)
    xp, wp, bp, yp, sp = ptx.batch_ptrs(x, w, b, y, stats_out)

    def row(lane: Reg, rows: list[Reg], reduce: Reduce, save: Save) -> None:
        x_row, y_row = rows
        acc = reg.scalar(f32, 0.0)
        cache, early = {}, {}
        for k, i, m in chunks(p, lane):
            values = cache[k] = load(p, x_row, i, m)
            if _prefetch(p, 2):
                early[k] = load(p, wp, i, m, nc=True), load(p, bp, i, m, nc=True)
            for v in values:
                acc += v
        mean = reduce(acc, "add") * (1.0 / p.n)
        # Two passes (sum, then squared deviations): no cancellation in the variance.
        sq = reg.scalar(f32, 0.0)
        for k, i, m in chunks(p, lane):
            values = cache[k] if k is not None else load(p, x_row, i, m)
            for v in values:
                d = v - mean
                ptx.fma.rn.f32(sq, d, d, sq, pred=m)
        rstd = ptx.rsqrt.approx.f32(ptx.fma.rn.f32(reduce(sq, "add"), 1.0 / p.n, float(eps)))
        for k, i, m in chunks(p, lane):
            values = cache[k] if k is not None else load(p, x_row, i, m)
            if k in early:
                weights, biases = early[k]
            else:
                weights, biases = load(p, wp, i, m, nc=True), load(p, bp, i, m, nc=True)
            out = [ptx.fma.rn.f32((v - mean) * rstd, g, c) for v, g, c in zip(values, weights, biases)]
            store(p, y_row, i, out, m)
        save([mean, rstd])

    _each_row(x, (xp, yp), p, row, (sp,))


def _exp_below(v: Reg, peak: Reg) -> Reg:
    """``exp(v - peak)`` for ``v <= peak``, as ``2^((v - peak) * log2e)``.

    The difference comes first: exact when ``v`` is within a factor 2 of
    ``peak`` (Sterbenz), else rounded by 2^-24 relative (harmless where the
    exponential is not 0) or, for ``v - peak < -FLT_MAX``, -inf (giving 0), so
    any finite row is right. Folding the shift into one
    ``fma(v, log2e, -peak*log2e)`` saves an instruction a value but keeps the
    rounding of ``peak*log2e``: a factor common to the row, which cancels in
    the normalisation until it overflows ``ex2`` (half an ulp is 2^9 at
    ``peak = 1e10``: inf/inf or 0/0 = NaN); ``peak*log2e`` itself overflows
    for ``|peak| > FLT_MAX / log2e``. Non-finite rows follow
    ``jax.nn.softmax``: a +inf or NaN entry, or a row of -inf, makes
    ``inf - inf`` or NaN here and NaN for the whole row; -inf entries give 0.
    """
    return ptx.ex2.approx.f32((v - peak) * LOG2E)


def _softmax_body(x, y, *, threads: int, cached: bool, max_cached: int) -> None:
    p = _row_plan(x, threads, cached, max_cached)
    xp, yp = ptx.batch_ptrs(x, y)

    def row(lane: Reg, rows: list[Reg], reduce: Reduce, save: Save) -> None:
        x_row, y_row = rows
        peak = reg.scalar(f32, float("-inf"))
        cache = {}
        for k, i, m in chunks(p, lane):
            values = cache[k] = load(p, x_row, i, m)
            for v in values:
                ptx.max.f32(peak, peak, v, pred=m)
        peak = reduce(peak, "max")
        total = reg.scalar(f32, 0.0)
        for k, i, m in chunks(p, lane):
            values = cache[k] if k is not None else load(p, x_row, i, m)
            exps = [_exp_below(v, peak) for v in values]
            if k is not None:
                cache[k] = exps
            for e in exps:
                ptx.add.f32(total, total, e, pred=m)
        inv = ptx.rcp.rn.f32(reduce(total, "add"))
        for k, i, m in chunks(p, lane):
            if k is not None:
                exps = cache[k]
            else:
                exps = [_exp_below(v, peak) for v in load(p, x_row, i, m)]
            store(p, y_row, i, [e * inv for e in exps], m)

    _each_row(x, (xp, yp), p, row)


@functools.lru_cache(maxsize=None)
def row_kernel(op: str, dtype: str, arch: str, threads: int, cached: bool = True,
               max_cached: int = MAX_CACHED) -> Kernel:
    """The ``op`` kernel (``rms_norm``/``layer_norm``/``softmax``) for ``dtype``
    and ``arch`` with ``threads`` per row: one CTA per row, or with 32 threads
    (a warp) per row, ``ROWS_PER_CTA`` rows per CTA.

    Outputs: ``y``, then the row statistics the backward kernels read, f32:
    ``rstd`` ``(R,)`` for ``rms_norm``, ``(mean, rstd)`` pairs ``(R, 2)`` for
    ``layer_norm`` (none for ``softmax``, whose backward uses ``y``).

    ``threads`` and ``cached`` must be what :func:`plan` gives for the row
    length (``max_cached`` lowers the register budget: tests use it to reach
    the looping path with short rows).
    """
    t = TYPES[dtype]
    opts = {"threads": threads, "cached": cached, "max_cached": max_cached}
    if op == "rms_norm":
        def rms_norm(x, w, y, rstd, *, eps=1e-6):
            _rms_norm_body(x, w, y, rstd, eps=eps, **opts)
        fn, vectors, stats = rms_norm, 1, (Tile("R", f32),)
    elif op == "layer_norm":
        def layer_norm(x, w, b, y, stats, *, eps=1e-5):
            _layer_norm_body(x, w, b, y, stats, eps=eps, **opts)
        fn, vectors, stats = layer_norm, 2, (Tile("R", 2, f32),)
    else:
        def softmax(x, y):
            _softmax_body(x, y, **opts)
        fn, vectors, stats = softmax, 0, ()
    path = "" if cached else "_loop"
    rows = ROWS_PER_CTA if threads == 32 else 1
    return kernel(in_specs=(Tile("R", "N", t), *[Tile("N", t)] * vectors),
                  out_specs=(Tile("R", "N", t), *stats),
                  grid=lambda R: (-(-R // rows), 1, 1),
                  block=(threads * rows, 1, 1), arch=arch, batch="z", shardable=("R",),
                  # 2048 threads an SM (64 registers a thread): without it ptxas
                  # squeezes 1024-thread kernels to 32 registers (for two CTAs per
                  # SM) and spills, or gives a 512-thread layer_norm 69 (one CTA).
                  raw_directives=[("minnctapersm", (max(1, 1024 // (threads * rows)),))],
                  name=f"{op}_{dtype}_{arch}_t{threads}{path}")(fn)


def _swiglu_body(gate, up, out, *, threads: int) -> None:
    dtype = gate.dtype.name
    p = plan(gate.shape[0], dtype)
    gp, upp, outp = ptx.batch_ptrs(gate, up, out)
    index = ptx.mad.lo.u32(ptx.special.ctaid.x(), threads, ptx.special.tid.x())
    inside = index < p.nchunks
    with ptx.if_(inside):
        g = load(p, gp, index)
        u = load(p, upp, index)
        res = []
        for a, c in zip(g, u):
            # silu(a) = a / (1 + 2^(-a*log2e)); 2^x overflowing to inf gives a * 0.
            e = ptx.ex2.approx.f32(a * -LOG2E)
            res.append(a * ptx.rcp.rn.f32(e + 1.0) * c)
        store(p, outp, index, res)


def _swiglu_grid(T: int, dtype: str) -> tuple[int, int, int]:
    return (max(1, -(-plan(T, dtype).nchunks // ELEMENTWISE_THREADS)), 1, 1)


@functools.lru_cache(maxsize=None)
def swiglu_kernel(dtype: str, arch: str) -> Kernel:
    """``out = silu(gate) * up`` over flat ``(T,)`` arrays of ``dtype`` for ``arch``."""
    t = TYPES[dtype]

    def swiglu(gate, up, out):
        _swiglu_body(gate, up, out, threads=ELEMENTWISE_THREADS)

    return kernel(in_specs=(Tile("T", t), Tile("T", t)), out_specs=(Tile("T", t),),
                  grid=lambda T: _swiglu_grid(T, dtype), block=(ELEMENTWISE_THREADS, 1, 1),
                  arch=arch, batch="z", shardable=("T",), name=f"swiglu_{dtype}_{arch}")(swiglu)

