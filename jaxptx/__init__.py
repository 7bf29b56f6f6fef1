"""jaxptx: hand-written PTX from Python, one call per instruction, every
kernel a JAX primitive.

Example:
    >>> from jaxptx import kernel, reg, ptx
    >>> from jaxptx.types import u32
    >>> @kernel(arch="sm_90a")
    ... def tiny():
    ...     tid = reg.from_(ptx.special.tid.x(), u32)
    ...     ptx.ret()
    >>> "mov.u32 %r2, %r1;" in tiny.ptx()
    True
"""

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _version

from . import errors as errors
from . import ir as ir
from . import isa as isa
from . import specs as specs
from . import types as types
from .dsl import Kernel as Kernel
from .dsl import Layout as Layout
from .dsl import Specialization as Specialization
from .dsl import fragments as fragments
from .dsl import pipeline as pipeline
from .dsl import reduce as reduce
from .dsl import tcgen05 as tcgen05
from .dsl import Tile as Tile
from .dsl import kernel as kernel
from .dsl import ptx as ptx
from .dsl import reg as reg
from .dsl import smem as smem
from .dsl import unify_envs as unify_envs
from .check import Diagnostic as Diagnostic
from .check import check as check
from .emit import emit as emit
from .errors import ParseError as ParseError
from .errors import PtxError as PtxError
from .parse import parse as parse
from . import jax as jax  # kernels as JAX primitives (jax itself loads on first call)
from .jax import custom_vjp as custom_vjp

# Explicit, so that ``from jaxptx import *`` does not bind ``jax`` to the
# jaxptx.jax subpackage over the user's ``import jax``.
__all__ = ["errors", "ir", "isa", "specs", "types", "Kernel", "Layout", "Specialization", "Tile",
           "kernel", "ptx", "reg", "smem", "unify_envs", "fragments", "pipeline", "reduce", "tcgen05", "Diagnostic", "check", "emit",
           "ParseError", "PtxError", "parse", "custom_vjp"]

# Subpackages loaded on first attribute access (PEP 562), so that a plain
# ``import jaxptx`` reaches ``jaxptx.sim`` without paying for the emulator's
# import (~150 ms) in processes that never use it.
_LAZY_SUBPACKAGES = ("sim", "codegen", "runtime", "kernels", "profile", "viz", "torch")


def __getattr__(name: str):
    """``jaxptx.sim``, ``jaxptx.codegen``, ``jaxptx.runtime``, ``jaxptx.kernels``,
    ``jaxptx.profile``, ``jaxptx.viz``, ``jaxptx.torch``: imported on first use."""
    if name in _LAZY_SUBPACKAGES:
        import importlib
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


try:
    __version__ = _version("jaxptx")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0+source"
