"""Tracing: ``@kernel``, ``reg``, ``smem``, ``ptx``, ``Tile``/``Layout``, and
the helpers kernels are built from: ``pipeline`` (full/empty mbarrier
stages, warp roles), ``reduce`` (warp and CTA reductions), ``fragments``
(where each accumulator register lives; swizzles), ``tcgen05`` (sm_100
descriptors, tensor memory).

The extension points that other packages build on (``jaxptx.pyptx``'s
registers and kernels, the kernel library, the JAX layer) are public here
too: the register and operand values (``Reg``, ``RegArray``, ``NegPred``,
``Addr``, ``Label``), the one emission path (``emit_instruction``,
``new_reg``, ``to_immediate``), the active trace (``current``,
``is_tracing``), and the kernel's seams (``set_call_hook``,
``Kernel.trace_specialization``, ``Kernel.launch_for``,
``static_shared_bytes``)."""

from . import fragments as fragments
from . import pipeline as pipeline
from . import ptx as ptx
from . import reduce as reduce
from . import tcgen05 as tcgen05
from . import reg as reg
from . import smem as smem
from ._assemble import static_shared_bytes as static_shared_bytes
from ._core import Reg as Reg
from ._core import emit_instruction as emit_instruction
from ._core import new_reg as new_reg
from ._core import to_immediate as to_immediate
from ._kernel import AUTO_FALLBACK_ARCH as AUTO_FALLBACK_ARCH
from ._kernel import Kernel as Kernel
from ._kernel import kernel as kernel
from ._kernel import set_call_hook as set_call_hook
from ._params import TensorArg as TensorArg
from ._peers import RANK_PARAM as PEER_RANK_PARAM
from ._peers import TABLE_PARAM as PEER_TABLE_PARAM
from ._specialization import Specialization as Specialization
from ._specs import Dim as Dim
from ._specs import Layout as Layout
from ._specs import Tile as Tile
from ._specs import bind_specs as bind_specs
from ._specs import unify_envs as unify_envs
from ._tma import TmaDescriptor as TmaDescriptor
from ._trace import Trace as Trace
from ._trace import current as current
from ._trace import is_tracing as is_tracing
from ._values import Addr as Addr
from ._values import Label as Label
from ._values import NegPred as NegPred
from ._values import RegArray as RegArray
