"""Fragment layouts as data: which thread and register of a warp (or
warpgroup) holds which element of a matrix.

One :class:`FragmentLayout` describes one fragment — an ``mma.sync`` or
``wgmma`` operand, a ``tcgen05.ld``/``st`` shape, an ``ldmatrix`` /
``stmatrix`` form, the emulator's ``wmma`` fragments. The DSL's epilogue
helpers (:mod:`jaxptx.dsl.fragments`), the emulator's semantics and the
:mod:`jaxptx.viz` pictures all read these objects, so they cannot disagree.

A layout is a few mixed-radix *digits*, in the manner of CuTe's
``shape:stride`` layouts and Mosaic GPU's tiled layouts: the thread index,
the register index and the element within a register are each split into
digits, lowest first, and each digit moves the (group, row, column) of the
matrix cell by its stride per step. ``mma.sync.m16n8k16``'s f32 accumulator
is::

    thread   = (4 : col 2) (8 : row 1)        # threadID_in_group, groupID
    register = (2 : col 1) (2 : row 8)

so lane ``l``'s register ``j`` is row ``l // 4 + 8 (j // 2)``, column
``2 (l % 4) + j % 2`` (PTX ISA "Matrix Fragments for mma.m16n8k16"). The
cell of a (thread, register, element) is the sum of what the thread's
digits give (:meth:`FragmentLayout.thread_offset`, the part an epilogue
computes once in registers) and what the register's and element's digits
give (:meth:`FragmentLayout.register_offset`, compile-time constants).

The constructors (:func:`mma`, :func:`wgmma_a`, :func:`wgmma_d`,
:func:`tcgen05`, :func:`ldmatrix`, :func:`wmma`) are cached: the same
arguments give the same object, whose index arrays are computed once.

Example:
    >>> from jaxptx.isa import fragments
    >>> c = fragments.mma("m16n8k16", "c", "f32")
    >>> c.registers, c.coords(5, 3)[1:]       # lane 5's c3: row 1 + 8, column 2 + 1
    (4, (9, 3))
    >>> c.flat[1].shape                        # rows of every (lane, element), for the emulator
    (32, 4)
"""

from ._layout import ELEMENT_BITS as ELEMENT_BITS
from ._layout import Digit as Digit
from ._layout import FragmentLayout as FragmentLayout
from ._layout import shape_dims as shape_dims
from ._matmul import mma as mma
from ._matmul import wgmma_a as wgmma_a
from ._matmul import wgmma_d as wgmma_d
from ._matmul import wmma as wmma
from ._moves import LDMATRIX_SHAPES as LDMATRIX_SHAPES
from ._moves import TCGEN05_SHAPES as TCGEN05_SHAPES
from ._moves import ldmatrix as ldmatrix
from ._moves import tcgen05 as tcgen05

__all__ = [
           "ELEMENT_BITS",
           "LDMATRIX_SHAPES",
           "TCGEN05_SHAPES",
           "Digit",
           "FragmentLayout",
           "ldmatrix",
           "mma",
           "shape_dims",
           "tcgen05",
           "wgmma_a",
           "wgmma_d",
           "wmma",
]
