"""``jaxptx.pyptx``: pyptx's authoring API on jaxptx, for code written to pyptx.

Change ``pyptx`` to ``jaxptx.pyptx`` in the imports and a pyptx kernel
traces through jaxptx's instruction table (every instruction validated,
deterministic names, errors at the user's line) into a jaxptx
:class:`~jaxptx.Kernel`: a JAX primitive that runs on the GPU or on the
CPU emulator. The modules mirror pyptx's: ``kernel``, ``reg``, ``smem``,
``ptx``, ``specs`` (``Tile``, ``Layout``), ``types``, ``intrinsic``,
``detect_arch``. See ``docs/coming_from_pyptx.md`` for what differs.

Example:
    >>> from jaxptx.pyptx import kernel, reg, ptx, Tile
    >>> from jaxptx.pyptx.types import f32, u32
    >>> @kernel(in_specs=(Tile(4, 32, f32),), out_specs=(Tile(4, 32, f32),),
    ...         grid=(4, 1, 1), block=(32, 1, 1), arch="sm_80")
    ... def copy(X, Y):
    ...     px, py = ptx.global_ptrs(X, Y)
    ...     off = (reg.from_(ptx.special.ctaid.x(), u32) * 32 + ptx.special.tid.x()) * 4
    ...     v = reg.scalar(f32)
    ...     ptx.inst.ld.global_.f32(v, ptx.addr(px + off))
    ...     ptx.inst.st.global_.f32(ptx.addr(py + off), v)
    ...     ptx.ret()
    >>> "add.s64" in copy.ptx()
    True
"""

from . import ptx as ptx
from . import reg as reg
from . import smem as smem
from . import specs as specs
from . import types as types
from ._arch import detect_arch as detect_arch
from .kernel import Kernel as Kernel
from .kernel import kernel as kernel
from .ptx import intrinsic as intrinsic
from .specs import Layout as Layout
from .specs import Tile as Tile

__version__ = "0.1.1"   # the pyptx API version mirrored

__all__ = ["kernel", "reg", "smem", "ptx", "intrinsic", "Tile", "Layout", "detect_arch", "specs",
           "types", "Kernel"]
