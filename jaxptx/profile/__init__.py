"""``jaxptx.profile``: kernel performance without a GPU.

``jaxptx.profile(kernel_or_ptx, *args, ...)`` runs a kernel on the CPU
emulator and returns a :class:`Profile` whose counts are exact for that
execution, since the emulator runs every thread's every access: global
requests and the 32-byte sectors they touch, shared-memory wavefronts and
bank conflicts (per ``ld``/``st``/``ldmatrix``/``stmatrix``/``cp.async`` of
every width; a core-matrix model for ``wgmma``/``tcgen05`` descriptor
reads), the instruction mix with tensor-core FLOPs, divergence and
synchronisation, per PTX line (and Python line for traced kernels). It adds
ptxas's registers / shared memory / spills with the occupancy they allow
(sm_80, sm_90a, sm_100a) and a roofline *estimate* for A100 / H100 / B200.

``print(profile)`` shows a summary and the worst lines; ``profile.to_json()``
everything; ``profile.heatmap()`` and ``profile.bank_map(line)`` draw
pictures (matplotlib, optional). ``sim.launch(..., profile=True)`` and
``sim.Device.launch(..., profile=True)`` return the same :class:`Profile`
(without ptxas's figures).

The module itself is callable: ``jaxptx.profile(...)`` is
:func:`jaxptx.profile.profile`.
"""

from __future__ import annotations

import sys
import types
from typing import Any

from . import counters as _counters  # registers the emulator's profiler (sim.device.PROFILER)
from .api import attach_resources, occupancy_table, profile
from .collect import Profiling, profiling
from .occupancy import LIMITS, occupancy
from .report import Profile
from .roofline import GPUS, estimate

__all__ = ["profile", "Profile", "occupancy", "occupancy_table", "LIMITS", "GPUS", "estimate",
           "attach_resources", "profiling", "Profiling"]


class _CallableModule(types.ModuleType):
    """``jaxptx.profile`` is both this package and the function
    :func:`profile`: calling the module runs the function."""

    def __call__(self, *args: Any, **kwargs: Any) -> Profile:
        """:func:`jaxptx.profile.profile`."""
        return profile(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
