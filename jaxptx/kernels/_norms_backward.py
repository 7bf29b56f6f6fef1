"""The norm backward kernels: ``dx`` per row and the weight gradients, reduced
across rows deterministically in two launches.

Per row, with the forward's saved statistics (``rstd``; ``mean`` for
``layer_norm``), ``xhat = (x - mean) * rstd`` and ``g = dy * w``::

    rms_norm:   dx = rstd * (g - xhat * mean(g * xhat))
    layer_norm: dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
    dw = sum over rows of dy * xhat;  db = sum over rows of dy

**Rows** (:func:`row_backward_kernel`): a fixed number of *workers* (a CTA,
or a warp for rows a warp covers, as in the forward), each taking rows
``worker, worker + W, ...``. A thread reads the same columns of every row
(the forward's :func:`~jaxptx.kernels._norms_rows.chunks`), so it keeps its
columns' ``dy * xhat`` (and ``dy``) sums in registers across its rows and
writes them once, as the worker's row of an f32 ``(W, N)`` scratch array
(``(W, 2, N)`` for ``layer_norm``: ``dw`` then ``db``). Rows too long to
keep in registers loop over the row at run time and accumulate in that
scratch row instead (each thread owns its addresses: no races). A CTA has
up to twice the forward's threads a row (:func:`backward_plan`); short rows
keep ``xhat`` and ``dy * w`` in registers between the two passes (the
reduction, then ``dx``), longer ones read the row again (from L1/L2).

**Columns** (:func:`column_sum_kernel`): ``(W, C)`` f32 → ``(C,)`` in the
weights' dtype. A CTA takes 32 columns; its ``GROUPS`` warps sum rows
``g, g + GROUPS, ...`` of the scratch, then warp 0 adds the ``GROUPS``
partials in order. No atomics: the result depends only on the shapes, so
repeated runs give identical bits.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

from ..dsl import Kernel, Reg, Tile, emit_instruction, kernel, ptx, reg, smem
from ..dsl.reduce import cta_reduce, warp_reduce
from ..types import TYPES, f32, u32
from ._norms_rows import ITEMSIZE, MAX_THREADS, Plan, chunks, load, plan, store

__all__ = ["GROUPS", "MAX_WORKER_CTAS", "BackwardPlan", "backward_plan", "column_sum_kernel",
           "row_backward_kernel", "workers"]

# CTAs of the row kernel at most (about two waves of 132 SMs at one 1024-thread
# CTA each); more rows loop. It bounds the scratch to W x N f32.
MAX_WORKER_CTAS = 256
# Warps (row groups) per CTA of the column sum.
GROUPS = 8
# Registers a thread keeps for addresses, loop state and loads in flight
# (ptxas hoists the unrolled loads of a row), beside the column sums.
_SPARE = 56
# Values per thread the backward aims for: its per-value state (the column
# sums, the loads) is about three times the forward's, so it doubles the
# forward's threads per row (up to 1024) past this.
_TARGET_VALUES = 8
# Registers a thread may spend on keeping xhat and g (and the sums) between
# the two passes over a row; past it the second pass loads the row again.
_KEEP_ROW = 32


@dataclasses.dataclass(frozen=True)
class BackwardPlan:
    """How the row kernel holds its state.

    Attributes:
        rows: the forward's access plan; ``rows.cached`` here means the
            chunks are unrolled and the column sums live in registers (else a
            runtime loop, summing into the scratch row in global memory).
        keep: whether ``xhat`` and ``g`` stay in registers between the two
            passes over a row (else the second pass loads the row again).
    """

    rows: Plan
    keep: bool


def backward_plan(n: int, dtype: str, sums: int, max_cached: int | None = None) -> BackwardPlan:
    """The plan for rows of ``n`` ``dtype`` values with ``sums`` column sums
    (1: ``dw``; 2: ``dw`` and ``db``): the forward's plan (with up to twice
    the threads a row, see ``_TARGET_VALUES``), its column sums in
    registers when they fit the block's register file (``min(255, 65536 /
    block)`` a thread), the row too when that stays small (``_KEEP_ROW``)."""
    p = plan(n, dtype) if max_cached is None else plan(n, dtype, max_cached=max_cached)
    while p.threads > 32 and p.threads < MAX_THREADS and p.rounds * p.vec > _TARGET_VALUES:
        p = dataclasses.replace(p, threads=p.threads * 2)
    values = p.rounds * p.vec
    budget = min(255, 65536 // p.block) - _SPARE
    cached = p.cached and values * sums <= budget
    keep = cached and values * (2 + sums) <= min(budget, _KEEP_ROW)
    return BackwardPlan(dataclasses.replace(p, cached=cached), keep)


def workers(rows: int, bp: BackwardPlan) -> int:
    """Workers (rows of the scratch) for ``rows`` rows: one per row up to
    ``MAX_WORKER_CTAS`` CTAs of ``bp.rows.rows`` workers each."""
    per_cta = bp.rows.rows
    return per_cta * max(1, min(-(-rows // per_cta), MAX_WORKER_CTAS))


def _f32_access(base: Reg, index: Reg, count: int, values: list[Reg] | None = None,
                mask: Reg | None = None) -> list[Reg]:
    """Load (``values`` None) or store ``count`` f32 at element ``index * count``
    of ``base``, as 16-byte vectors (or one narrower access when ``count < 4``)."""
    width = min(4, count)
    address = base + ptx.mul.wide.u32(index, count * 4)
    out = []
    for j in range(0, count, width):
        at = ptx.addr(address + j * 4) if j else ptx.addr(address)
        vector = () if width == 1 else (f"v{width}",)
        if values is None:
            regs = [reg.scalar(f32, 0.0) if mask is not None else reg.scalar(f32) for _ in range(width)]
            emit_instruction("ld", ("global", *vector, "f32"), (regs[0] if width == 1 else regs, at),
                             pred=mask)
            out += regs
        else:
            part = values[j:j + width]
            emit_instruction("st", ("global", *vector, "f32"), (at, part[0] if width == 1 else part),
                             pred=mask)
    return out


Reduce = Callable[[Reg, str], Reg]


def _worker(p: Plan) -> tuple[Reg, Reg, Reduce]:
    """This thread's ``(lane in its row, worker index, row reduction)``."""
    tid = ptx.special.tid.x()
    if p.rows == 1:
        return tid, ptx.special.ctaid.x(), lambda v, op: cta_reduce(v, op, warps=p.warps)
    return tid & 31, ptx.mad.lo.u32(ptx.special.ctaid.x(), p.rows, tid >> 5), warp_reduce


def _backward_body(op: str, bp: BackwardPlan, x, w, stats, dy, dx, part, W: int) -> None:
    """The row kernel's body for ``op``: ``stats`` is ``rstd`` ``(R,)`` for
    ``rms_norm``, ``(mean, rstd)`` pairs ``(R, 2)`` for ``layer_norm``."""
    p = bp.rows
    sums = 1 if op == "rms_norm" else 2            # dw (and db) per column
    xp, wp, dyp, dxp, pp, sp = ptx.batch_ptrs(x, w, dy, dx, part, stats)
    lane, worker, reduce = _worker(p)
    mine = pp + ptx.mul.wide.u32(worker, sums * p.n * 4)       # this worker's scratch row
    span = [mine + s * p.n * 4 for s in range(sums)]
    acc: dict[tuple[int, int], list[Reg]] = {}
    if p.cached:
        for k, _, _ in chunks(p, lane):
            for s in range(sums):
                acc[k, s] = [reg.scalar(f32, 0.0) for _ in range(p.vec)]
    else:
        zeros = [reg.scalar(f32, 0.0) for _ in range(p.vec)]
        for _, i, _ in chunks(p, lane):
            for s in range(sums):
                _f32_access(span[s], i, p.vec, zeros)
    for r in ptx.range_(worker, x.shape[0], W, dtype=u32):
        offset = ptx.mul.wide.u32(r, p.n * ITEMSIZE[p.dtype])
        stat = ptx.addr(sp + ptx.mul.wide.u32(r, 4 * sums))
        if sums == 1:
            mean, rstd = None, emit_instruction("ld", ("global", "f32"), (reg.scalar(f32), stat))
        else:
            mean, rstd = reg.scalar(f32), reg.scalar(f32)
            emit_instruction("ld", ("global", "v2", "f32"), ([mean, rstd], stat))
        row = _Row(bp, xp + offset, dyp + offset, wp, mean, rstd)
        _one_row(row, lane, reduce, dxp + offset, acc, span)
    if p.cached:
        for k, i, m in chunks(p, lane):
            for s in range(sums):
                _f32_access(span[s], i, p.vec, acc[k, s], mask=m)


@dataclasses.dataclass(frozen=True)
class _Row:
    """One row as the backward reads it: its ``x`` and ``dy`` addresses, ``w``,
    and its saved statistics (``mean`` None for ``rms_norm``)."""

    bp: BackwardPlan
    x: Reg
    dy: Reg
    w: Reg
    mean: Reg | None
    rstd: Reg

    def values(self, i: Reg, m: Reg | None) -> tuple[list[Reg], list[Reg], list[Reg]]:
        """``xhat``, ``g = dy * w`` and ``dy`` of chunk ``i`` (``dy`` and ``g``
        zero where masked off)."""
        p = self.bp.rows
        xs, dys = load(p, self.x, i, m), load(p, self.dy, i, m)
        ws = load(p, self.w, i, m, nc=True)
        if self.mean is None:
            xhat = [v * self.rstd for v in xs]
        else:
            xhat = [(v - self.mean) * self.rstd for v in xs]
        return xhat, [d * c for d, c in zip(dys, ws)], dys


def _one_row(row: _Row, lane: Reg, reduce: Reduce, dx_row: Reg,
             acc: dict[tuple[int, int], list[Reg]], span: list[Reg]) -> None:
    """``dx`` of one row, and its ``dy * xhat`` (and ``dy``) added to the
    column sums: ``acc`` (registers) or, on the looping path, ``span`` (this
    worker's scratch row)."""
    bp, p, sums = row.bp, row.bp.rows, len(span)
    dot, total = reg.scalar(f32, 0.0), reg.scalar(f32, 0.0)
    cache = {}
    for k, i, m in chunks(p, lane):
        xhat, g, dys = row.values(i, m)
        if bp.keep:
            cache[k] = xhat, g
        column = [acc[k, s] if p.cached else _f32_access(span[s], i, p.vec, mask=m)
                  for s in range(sums)]
        for j, (v, gv, d) in enumerate(zip(xhat, g, dys)):
            ptx.fma.rn.f32(dot, gv, v, dot)
            ptx.fma.rn.f32(column[0][j], d, v, column[0][j])
            if sums == 2:
                ptx.add.f32(total, total, gv)
                ptx.add.f32(column[1][j], column[1][j], d)
        if not p.cached:
            for s in range(sums):
                _f32_access(span[s], i, p.vec, column[s], mask=m)
    c1 = reduce(dot, "add") * (1.0 / p.n)
    c0 = reduce(total, "add") * (1.0 / p.n) if sums == 2 else None
    for k, i, m in chunks(p, lane):
        xhat, g = cache[k] if k in cache else row.values(i, m)[:2]
        if c0 is None:
            out = [row.rstd * (gv - v * c1) for v, gv in zip(xhat, g)]
        else:
            out = [row.rstd * (gv - c0 - v * c1) for v, gv in zip(xhat, g)]
        store(p, dx_row, i, out, m)


@functools.cache
def row_backward_kernel(op: str, dtype: str, arch: str, n: int, max_cached: int | None = None) -> Kernel:
    """The ``rms_norm``/``layer_norm`` backward row kernel for rows of ``n``
    ``dtype`` values on ``arch`` (see the module doc).

    Inputs ``x, w, stats, dy`` (``stats``: the forward's ``rstd`` ``(R,)``,
    or ``(mean, rstd)`` pairs ``(R, 2)``); outputs ``dx`` and the f32 scratch of
    per-worker column sums, ``(W, N)`` (``rms_norm``) or ``(W, 2, N)``
    (``layer_norm``); ``W`` (from :func:`workers`) is a keyword of the call.
    ``max_cached`` lowers the forward plan's register budget (tests use it to
    reach the looping path with short rows).
    """
    t = TYPES[dtype]
    bp = backward_plan(n, dtype, 1 if op == "rms_norm" else 2, max_cached)
    p = bp.rows
    if op == "rms_norm":
        def rms_norm_bwd(x, w, rstd, dy, dx, part):
            _backward_body(op, bp, x, w, rstd, dy, dx, part, part.shape[0])
        fn, stats, part = rms_norm_bwd, Tile("R", f32), Tile("W", n, f32)
    else:
        def layer_norm_bwd(x, w, stats, dy, dx, part):
            _backward_body(op, bp, x, w, stats, dy, dx, part, part.shape[0])
        fn, stats, part = layer_norm_bwd, Tile("R", 2, f32), Tile("W", 2, n, f32)
    path = ("" if bp.keep else "_reload") if p.cached else "_loop"
    return kernel(in_specs=(Tile("R", n, t), Tile(n, t), stats, Tile("R", n, t)),
                  out_specs=(Tile("R", n, t), part), grid=lambda W: (W // p.rows, 1, 1),
                  block=(p.block, 1, 1), arch=arch, batch="z",
                  raw_directives=[("minnctapersm", (1,))],
                  name=f"{op}_bwd_{dtype}_{arch}_n{n}{path}")(fn)


def _column_sum_body(part, out, *, dtype: str) -> None:
    pp, op_ = ptx.batch_ptrs(part, out)
    rows, cols = part.shape
    tid = ptx.special.tid.x()
    lane, group = tid & 31, tid >> 5
    col = ptx.mad.lo.u32(ptx.special.ctaid.x(), 32, lane)
    acc = reg.scalar(f32, 0.0)
    inside = col < cols
    with ptx.if_(inside):
        column = pp + ptx.mul.wide.u32(col, 4)
        for r in ptx.range_(group, rows, GROUPS, dtype=u32):
            acc += ptx.ld.global_.f32(column + ptx.mul.wide.u32(r, cols * 4))
    partial = smem.alloc(f32, (GROUPS, 32))
    ptx.st.shared.f32(partial[group, lane], acc)
    ptx.bar.sync(0)
    with ptx.if_(group == 0):
        total = ptx.ld.shared.f32(partial[0, lane])
        for g in range(1, GROUPS):                   # a fixed order: deterministic
            total = total + ptx.ld.shared.f32(partial[g, lane])
        one = Plan(cols, dtype, 1, 32, True)
        store(one, op_, col, [total], inside)


@functools.cache
def column_sum_kernel(dtype: str, arch: str) -> Kernel:
    """Column sums of an f32 ``(W, C)`` array as ``(C,)`` of ``dtype`` on
    ``arch`` (rounded once, at the end)."""
    t = TYPES[dtype]

    def column_sum(part, out):
        _column_sum_body(part, out, dtype=dtype)

    return kernel(in_specs=(Tile("W", "C", f32),), out_specs=(Tile("C", t),),
                  grid=lambda C: (-(-C // 32), 1, 1), block=(32 * GROUPS, 1, 1), arch=arch,
                  batch="z", name=f"column_sum_{dtype}_{arch}")(column_sum)
