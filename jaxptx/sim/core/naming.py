"""How the emulator names threads and instructions in its messages: PTX
(or Python) lines, thread ranges, the first of a group of threads.

Every hang, fault, progress report and endless-loop message words its
threads and lines through these, so they read the same everywhere.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ... import ir
from ..errors import SimError

if TYPE_CHECKING:
    from .view import MachineView

__all__ = ["first_thread", "instruction_at", "located", "ranges", "source_lines", "thread_ranges", "where"]


def where(ins: ir.Instruction) -> str:
    """`` [PTX line N]`` for parsed PTX, `` [file:line]`` for a traced kernel
    (the full path: tests and tools match on it)."""
    if ir.ptx_line(ins.loc) is not None:
        return f" [{ins.loc}]"
    where = ir.python_location(ins.loc)
    return f" [{where.file}:{where.line}]" if where is not None else ""


def ranges(values: Any) -> str:
    """``0-31, 64, 96-127`` for sorted distinct ints."""
    out, v = [], [int(x) for x in values]
    i = 0
    while i < len(v):
        j = i
        while j + 1 < len(v) and v[j + 1] == v[j] + 1:
            j += 1
        out.append(str(v[i]) if i == j else f"{v[i]}-{v[j]}")
        i = j + 1
    return ", ".join(out)


def thread_ranges(m: "MachineView", threads: np.ndarray) -> str:
    """Threads as ``CTA 0 threads 0-31, 64-95; CTAs 1-3 threads 0-127``
    (linear CTA index in the grid, linear thread index in the CTA)."""
    threads = np.unique(np.asarray(threads, dtype=np.int64))
    cta, tid = np.divmod(threads, m.ntid)
    by: dict[str, list[int]] = {}
    for c in np.unique(cta):
        by.setdefault(ranges(tid[cta == c]), []).append(int(c))
    parts = [f"CTA{'s' if len(ctas) > 1 else ''} {ranges(ctas)} thread{'s' if ',' in t or '-' in t else ''} {t}"
             for t, ctas in by.items()]
    if len(parts) > 4:
        parts = parts[:4] + [f"... ({len(parts) - 4} more CTA groups)"]
    return f"{len(threads)} thread{'s' if len(threads) > 1 else ''} ({'; '.join(parts)})"


def source_lines(m: "MachineView", pcs: Any) -> str:
    """The source lines of ``pcs`` (a loop's instructions) as ranges."""
    ptx, py = [], []
    for pc in sorted(set(int(p) for p in pcs)):
        loc = m.program.code[pc].loc if pc < len(m.program.code) else None
        if loc and len(loc) == 3:
            ptx.append(int(loc[1]))
        elif loc and len(loc) == 2:
            py.append(f"{loc[0]}:{loc[1]}")
    if ptx:
        return f"PTX line{'s' if len(set(ptx)) > 1 else ''} {ranges(sorted(set(ptx)))}"
    return ", ".join(dict.fromkeys(py)) or "no line information"


def instruction_at(m: "MachineView", pc: int) -> str:
    """``bar.sync (PTX line 10)``: the instruction at ``pc`` and its line."""
    if not 0 <= pc < len(m.program.code):
        return f"PC {pc}"
    ins = m.program.code[pc]
    return f"{ins.name} ({where(ins)[2:-1]})" if where(ins) else ins.name


def first_thread(m: "MachineView", threads: np.ndarray) -> str:
    """``thread (x, y, z) of CTA (x, y, z)`` for the first of ``threads``, and
    how many others."""
    t = int(threads[0])
    cta, tid = divmod(t, m.ntid)
    bx, by, _ = m.block
    gx, gy, _ = m.grid
    at = (f"thread ({tid % bx}, {tid // bx % by}, {tid // (bx * by)}) of CTA "
          f"({cta % gx}, {cta // gx % gy}, {cta // (gx * gy)})")
    return at + (f" and {len(threads) - 1} other threads" if len(threads) > 1 else "")


def located(e: SimError, ins: ir.Instruction) -> SimError:
    """The same error with the instruction's PTX line appended (once)."""
    if "PTX line" in str(e) or ir.ptx_line(ins.loc) is None:
        return e
    return type(e)(f"{e} [{ins.loc}]")
