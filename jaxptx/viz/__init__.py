"""Pictures of PTX layouts, drawn from the emulator's own tables.

Every figure is computed by the same functions :mod:`jaxptx.sim` runs, so a
picture and an emulator run cannot disagree. Each function returns a
matplotlib ``Figure`` with the numbers it draws in ``fig.data``; matplotlib
is imported on the first figure (``pip install matplotlib``, or jaxptx's
``docs`` extra).

* :func:`mma_fragment`, :func:`wgmma_fragment`: which lane and register
  holds which element of an ``mma.sync`` / ``wgmma`` operand;
* :func:`ldmatrix_map`: ``ldmatrix`` / ``stmatrix`` rows, lanes and registers;
* :func:`tcgen05_ld_map`: the tensor-memory lanes and columns of ``tcgen05.ld``;
* :func:`swizzle_pattern`: the 32/64/128-byte swizzles, chunk by chunk;
* :func:`tma_box`: a TMA box over a tensor and the shared tile it fills;
* :func:`record_pipeline` + :func:`pipeline_timeline`: a kernel's mbarrier
  phases and asynchronous issues over time, from an emulator run;
* :class:`NodeRecorder` + :func:`node_timeline`: who stores into which
  device's memory, and when flags are released and acquired, over a
  :class:`jaxptx.sim.System` run (one row per device).

Example:
    >>> from jaxptx import viz
    >>> fig = viz.mma_fragment("m16n8k16", "c", "f32")
    >>> fig.data.shape                    # (lane, element) of a 16 x 8 C
    (2, 16, 8)
    >>> int(fig.data[0, 0, 0]), int(fig.data[1, 8, 1])
    (0, 3)
"""

from .fragments import layout_grid as layout_grid
from .fragments import ldmatrix_map as ldmatrix_map
from .fragments import mma_fragment as mma_fragment
from .fragments import tcgen05_ld_map as tcgen05_ld_map
from .fragments import wgmma_fragment as wgmma_fragment
from .memory import swizzle_chunks as swizzle_chunks
from .memory import swizzle_pattern as swizzle_pattern
from .memory import tma_box as tma_box
from .memory import tma_box_data as tma_box_data
from .node import NODE_KINDS as NODE_KINDS
from .node import NodeRecorder as NodeRecorder
from .node import NodeTrace as NodeTrace
from .node import node_timeline as node_timeline
from .timeline import KIND_CODES as KIND_CODES
from .timeline import PipelineTrace as PipelineTrace
from .timeline import pipeline_timeline as pipeline_timeline
from .timeline import record_pipeline as record_pipeline

__all__ = ["layout_grid", "mma_fragment", "wgmma_fragment", "ldmatrix_map", "tcgen05_ld_map",
           "swizzle_chunks", "swizzle_pattern", "tma_box", "tma_box_data", "KIND_CODES", "PipelineTrace",
           "pipeline_timeline", "record_pipeline", "NODE_KINDS", "NodeRecorder", "NodeTrace", "node_timeline"]
