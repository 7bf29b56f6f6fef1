"""Tracing: ``@kernel``, ``reg``, ``smem``, ``ptx``, ``Tile``/``Layout``, and
the helpers kernels are built from: ``pipeline`` (full/empty mbarrier
stages, warp roles), ``reduce`` (warp and CTA reductions), ``fragments``
(where each accumulator register lives; swizzles), ``tcgen05`` (sm_100
descriptors, tensor memory)."""

from . import fragments as fragments
from . import pipeline as pipeline
from . import ptx as ptx
from . import reduce as reduce
from . import tcgen05 as tcgen05
from . import reg as reg
from . import smem as smem
from ._kernel import Kernel as Kernel
from ._kernel import Specialization as Specialization
from ._kernel import kernel as kernel
from ._params import TensorArg as TensorArg
from ._specs import Layout as Layout
from ._specs import Tile as Tile
from ._specs import bind_specs as bind_specs
from ._tma import TmaDescriptor as TmaDescriptor
from ._specs import unify_envs as unify_envs
