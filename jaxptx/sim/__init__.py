"""The CPU emulator: runs PTX thread by thread, all threads of the grid at once.

``launch(ptx_or_module_or_kernel, *arrays, grid=..., block=...)`` runs a
kernel; numpy arrays passed for pointer parameters are updated in place.
:class:`Device` is the driver-shaped form: device memory that persists
between launches, parameters as bytes or numbers (``cuLaunchKernelEx``).
Both refuse, before running, PTX that ptxas would reject or that the
emulator cannot run (:class:`PrecheckError`).
A fault while running (:class:`SimFault`) names the kernel, the access,
the buffer, the CTA and thread, the PTX line and the Python line, the same
way everywhere (:mod:`.faults`); output bytes a traced kernel never writes
are an :class:`UnwrittenOutputError` (:mod:`.unwritten`).
:func:`estimate_memory` states the host memory a launch needs (per thread,
per CTA); a launch over ``JAXPTX_SIM_MAX_MEMORY`` (default: 3/4 of the
host's memory) is refused before anything is allocated
(:class:`SimMemoryError`).
:class:`System` is a node of devices that run grids together, with peer
memory and ``multimem`` multicast objects (:mod:`.system`).
"""

from .launch import launch as launch
from .launch import launch_sequence as launch_sequence
from .device import Device as Device
from .device import ParamInfo as ParamInfo
from .memory_estimate import estimate_memory as estimate_memory
from .memory_model import MemoryEstimate as MemoryEstimate
from .system import System as System
from .multicast import Multicast as Multicast
from .fidelity import Fidelity as Fidelity
from .fidelity import Reach as Reach
from .fidelity import Usage as Usage
from .precheck import PrecheckError as PrecheckError
from .precheck import Problem as Problem
from .errors import SimError as SimError
from .errors import SimLaunchError as SimLaunchError
from .errors import SimMemoryError as SimMemoryError
from .errors import SimFault as SimFault
from .errors import SimDeadlock as SimDeadlock
from .unwritten import UnwrittenOutputError as UnwrittenOutputError
from .core.sanitizer import Finding as Finding
from .core.sanitizer import SanitizerError as SanitizerError
from .checking import checking as checking
from .checking import check_mode as check_mode
from .observing import observing as observing
from .explore import explore as explore
from .explore import Exploration as Exploration
from .core.step import Step as Step
from .core.observers import Observer as Observer
from .core.view import MachineView as MachineView
from .memory.tensormap import ArgTensorMap as ArgTensorMap
from .memory.tensormap import Im2col as Im2col
from .memory.tensormap import tensor_map as tensor_map
