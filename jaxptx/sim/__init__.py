"""The CPU emulator: runs PTX thread by thread, all threads of the grid at once.

``launch(ptx_or_module_or_kernel, *arrays, grid=..., block=...)`` runs a
kernel; numpy arrays passed for pointer parameters are updated in place.
"""

from ._launch import launch as launch
from ._program import SimError as SimError
from ._sanitizer import SanitizerError as SanitizerError
from ._step import Step as Step
from ._tensormap import ArgTensorMap as ArgTensorMap
from ._tensormap import Im2col as Im2col
from ._tensormap import tensor_map as tensor_map
