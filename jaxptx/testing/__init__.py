"""The testing layer: test doubles that run the product's compiled code with
no GPU. It sits above every other layer, and nothing in the product imports
it (tests/test_layers.py holds both).

:mod:`jaxptx.testing.standin` is a stand-in CUDA driver on the emulator
(its C half is this package's own extension, ``jaxptx.testing._standin``,
built beside ``jaxptx._ffi`` but never part of it), on which the CUDA
launch handler runs as XLA would call it.
"""

from .standin import CUDA_ERROR_INVALID_CONTEXT as CUDA_ERROR_INVALID_CONTEXT
from .standin import CUDA_ERROR_INVALID_HANDLE as CUDA_ERROR_INVALID_HANDLE
from .standin import CUDA_ERROR_INVALID_PTX as CUDA_ERROR_INVALID_PTX
from .standin import CUDA_ERROR_INVALID_VALUE as CUDA_ERROR_INVALID_VALUE
from .standin import CUDA_ERROR_LAUNCH_FAILED as CUDA_ERROR_LAUNCH_FAILED
from .standin import CUDA_ERROR_NOT_FOUND as CUDA_ERROR_NOT_FOUND
from .standin import CUDA_ERROR_NOT_SUPPORTED as CUDA_ERROR_NOT_SUPPORTED
from .standin import DriverError as DriverError
from .standin import HandlerError as HandlerError
from .standin import Ran as Ran
from .standin import StandInDriver as StandInDriver
from .standin import installed as installed
from ._standin_peers import StandInNode as StandInNode
