"""Planted sanitizer bugs, each with a correct twin (issue 12).

Every case is one small hand-written PTX kernel whose body holds the bug and
its fix side by side: ``[[bug||fix]]`` spans are resolved to one side or the
other (:func:`variant`), so the twin differs from the bug by exactly those
spans. ``//@L`` marks the line the finding must name and ``//@O`` the other
access it must name (races, async conflicts). The kernels take ``out`` and
``inp`` (u32 arrays, one word per global thread unless the case says
otherwise); the prologue (:data:`PROLOGUE`) sets up the registers every body
uses:

=========  =============================================
``%r1``    ``%tid.x``            ``%r2``  ``%ctaid.x``
``%r3``    ``%ntid.x``           ``%r4``  global thread index
``%r5``    ``%tid.x * 4``        ``%r6``  ``%tid.x % 32`` (lane)
``%r7``    ``%tid.x / 32`` (warp)
``%rd1``   ``out``               ``%rd2`` ``inp``
``%rd4``   ``&out[gid]``         ``%rd5`` ``&inp[gid]``
``%p1``    ``%tid.x == 0``
``%r10``   ``buf`` (1 KiB of shared memory every kernel declares)
``%r11``   ``buf + %tid.x * 4``
=========  =============================================

The cases are split by family: :mod:`sanitizer_cases_races` (races,
atomics, clusters), :mod:`sanitizer_cases_checks` (uninitialised data,
divergence and member masks, global memory), :mod:`sanitizer_cases_copies`
(mbarriers, cp.async, bulk copies, the async proxy) and
:mod:`sanitizer_cases_mma` (wgmma, tcgen05).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable

import numpy as np

__all__ = ["Case", "HEAD", "PROLOGUE", "variant", "kernel_text", "marked_line", "marked_lines", "gid",
           "const", "halves"]

HEAD = {"sm_90a": ".version 8.5\n.target sm_90a\n.address_size 64\n",
        "sm_100a": ".version 8.7\n.target sm_100a\n.address_size 64\n"}

PROLOGUE = """    .reg .pred %p<10>;
    .reg .b16 %rs<8>;
    .reg .b32 %r<64>;
    .reg .b64 %rd<24>;
    .reg .f32 %f<40>;
    ld.param.u64 %rd1, [out];
    ld.param.u64 %rd2, [inp];
    mov.u32 %r1, %tid.x;
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mad.lo.u32 %r4, %r2, %r3, %r1;
    shl.b32 %r5, %r1, 2;
    and.b32 %r6, %r1, 31;
    shr.u32 %r7, %r1, 5;
    mul.wide.u32 %rd3, %r4, 4;
    add.u64 %rd4, %rd1, %rd3;
    add.u64 %rd5, %rd2, %rd3;
    setp.eq.u32 %p1, %r1, 0;
    mov.u32 %r10, buf;
    add.u32 %r11, %r10, %r5;
"""

_SPAN = re.compile(r"\[\[(.*?)\|\|(.*?)\]\]", re.S)


@dataclasses.dataclass
class Case:
    """One planted bug and its twin.

    Attributes:
        name: the test id.
        body: PTX after the prologue, with ``[[bug||fix]]`` spans and
            ``//@L`` / ``//@O`` line markers.
        kind: the finding's kind (``race``, ``uninitialised``, ``async``,
            ``proxy``, ``divergence``; ``a|b``: either); ``sim`` accepts a
            ``SimError`` from the emulator too (tensor memory misuse, hangs).
        expect: the twin's ``out`` from ``(inp, grid, block)`` (None: not
            checked beyond running clean).
        decls: declarations before the prologue (shared, local variables).
        block, grid, cluster: launch shape (x only).
        arch: ``sm_90a`` or ``sm_100a``.
        mode: the check mode that must find the bug.
        words: u32 words of ``out``/``inp`` (default one per thread).
        inp: ``inp``'s contents from its word count (default: ``3 * i + 1``).
        bug_xfail, twin_xfail: why the sanitizer misses the bug / flags the
            twin today (the test is a strict xfail until it is fixed).
    """

    name: str
    body: str
    kind: str
    expect: Callable[[np.ndarray, int, int], np.ndarray] | None
    decls: str = ""
    block: int = 64
    grid: int = 1
    cluster: int = 1
    arch: str = "sm_90a"
    mode: object = True
    words: int | None = None
    inp: Callable[[int], np.ndarray] | None = None
    bug_xfail: str | None = None
    twin_xfail: str | None = None

    def nwords(self) -> int:
        """Words of ``out`` and ``inp``."""
        return self.words if self.words is not None else self.block * self.grid

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """Fresh ``out`` (zeros) and ``inp``."""
        n = self.nwords()
        inp = self.inp(n) if self.inp is not None else (3 * np.arange(n) + 1).astype(np.uint32)
        return np.zeros(n, np.uint32), np.asarray(inp, np.uint32)


def variant(body: str, bug: bool) -> str:
    """The bug's (or the twin's) side of every ``[[bug||fix]]`` span."""
    return _SPAN.sub(lambda m: m.group(1) if bug else m.group(2), body)


def kernel_text(case: Case, bug: bool) -> str:
    """The whole PTX module of the bug or its twin."""
    return (HEAD[case.arch] + ".visible .entry k(.param .u64 out, .param .u64 inp)\n{\n"
            + "    .shared .align 16 .b8 buf[1024];\n" + case.decls + PROLOGUE
            + variant(case.body, bug) + "\n    ret;\n}\n")


def marked_lines(text: str, marker: str) -> list[int]:
    """The 1-based lines of ``text`` carrying ``marker`` (``//@L`` also
    matches ``//@L2``: a finding may name either)."""
    return [n for n, line in enumerate(text.splitlines(), 1) if marker in line]


def marked_line(text: str, marker: str) -> int | None:
    """The first 1-based line of ``text`` carrying ``marker`` (``//@L``/``//@O``)."""
    lines = marked_lines(text, marker)
    return lines[0] if lines else None


# --- expected outputs of the twins ------------------------------------------------------------

def gid(inp: np.ndarray, grid: int, block: int) -> np.ndarray:
    """``out`` = the global thread index."""
    return np.arange(grid * block, dtype=np.uint32)


def const(value: int, first: int | None = None) -> Callable[[np.ndarray, int, int], np.ndarray]:
    """``out`` = ``value`` in every word (or the first ``first`` words, the rest 0)."""
    def expect(inp: np.ndarray, grid: int, block: int) -> np.ndarray:
        out = np.zeros(grid * block, np.uint32)
        out[:first] = value
        return out
    return expect


def halves(lo: Callable[[np.ndarray], np.ndarray],
           hi: Callable[[np.ndarray], np.ndarray]) -> Callable[[np.ndarray, int, int], np.ndarray]:
    """``out`` of warps 0 and 1 (64 threads) from two functions of the lane."""
    def expect(inp: np.ndarray, grid: int, block: int) -> np.ndarray:
        lane = np.arange(32, dtype=np.uint32)
        return np.concatenate([lo(lane), hi(lane)]).astype(np.uint32)
    return expect
