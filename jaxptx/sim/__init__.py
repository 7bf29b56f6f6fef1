"""The CPU emulator: runs PTX thread by thread, all threads of the grid at once.

``launch(ptx_or_module_or_kernel, *arrays, grid=..., block=...)`` runs a
kernel; numpy arrays passed for pointer parameters are updated in place.
"""

from .launch import launch as launch
from .errors import SimError as SimError
from .core.sanitizer import SanitizerError as SanitizerError
from .core.step import Step as Step
from .memory.tensormap import ArgTensorMap as ArgTensorMap
from .memory.tensormap import Im2col as Im2col
from .memory.tensormap import tensor_map as tensor_map
