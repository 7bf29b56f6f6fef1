"""Runtime support: the CUDA toolchain (ptxas, nvJitLink, nvdisasm, NVRTC), devices,
which module image (cubin or PTX) the installed driver can load, and the custom
calls of a CUDA lowering as the CUDA handler receives them."""

from ._cache import cache_dir as cache_dir
from ._cache import cache_max_bytes as cache_max_bytes
from ._toolchain import PtxasDiagnostic as PtxasDiagnostic
from ._toolchain import PtxasResult as PtxasResult
from ._toolchain import Resources as Resources
from ._toolchain import arch_from_capability as arch_from_capability
from ._toolchain import compile_cubin as compile_cubin
from ._toolchain import detect_arch as detect_arch
from ._toolchain import find_tool as find_tool
from ._toolchain import parse_ptxas_errors as parse_ptxas_errors
from ._toolchain import ptxas as ptxas
from ._toolchain import resources as resources
from ._toolchain import resources_all as resources_all
from ._toolchain import sass as sass
from ._toolchain import tool_version as tool_version
from ._compat import ModuleImage as ModuleImage
from ._cuda_calls import XLA_DTYPES as XLA_DTYPES
from ._cuda_calls import CudaCall as CudaCall
from ._cuda_calls import cuda_calls as cuda_calls
from ._compat import driver_cuda_version as driver_cuda_version
from ._compat import module_image as module_image
from ._compat import plan_image as plan_image
from ._nvrtc import CudaCompileError as CudaCompileError
from ._nvrtc import compile_cuda as compile_cuda
