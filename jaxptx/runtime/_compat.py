"""Which module image the CUDA driver gets: a cubin, or PTX it JIT-compiles.

jaxptx does not pin the CUDA compiler (ptxas in ``nvidia-cuda-nvcc``,
``nvidia-nvjitlink``): JAX and PyTorch want the newest, and the machine's
driver may be older. So before a cubin is handed to the driver, three
versions are compared:

* the driver's CUDA version (``cuDriverGetVersion``), D;
* the CUDA release that introduced the PTX's ISA version (``.version``), P:
  the driver JIT-compiles PTX only when P <= D;
* the release of the compiler that would build the cubin, T: a cubin from a
  newer compiler than the driver may not load (new CUDA majors need a new
  driver; newer minors may use ELF features the driver lacks), and a
  compiler older than P cannot read the PTX.

:func:`plan_image` decides: a cubin when T is known and P <= T <= D; the PTX
itself, for the driver's JIT, when P <= D but the compiler is newer than the
driver, older than the PTX, or missing; and an error naming what to install
or upgrade when P > D (no image can run there).
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import re
from typing import Literal

from jaxptx.errors import ToolchainError

__all__ = ["ModuleImage", "cuda_for_ptx", "driver_cuda_version", "module_image", "plan_image",
           "ptx_isa_version", "toolchain_cuda_version"]

Version = tuple[int, int]

# PTX ISA version -> the first CUDA release whose driver and ptxas read it
# (PTX ISA release notes). From PTX 9.0 (CUDA 13.0) on, 9.x is CUDA 13.x.
_PTX_TO_CUDA: dict[Version, Version] = {
    (7, 0): (11, 0), (7, 1): (11, 1), (7, 2): (11, 2), (7, 3): (11, 3), (7, 4): (11, 4),
    (7, 5): (11, 5), (7, 6): (11, 6), (7, 7): (11, 7), (7, 8): (11, 8),
    (8, 0): (12, 0), (8, 1): (12, 1), (8, 2): (12, 2), (8, 3): (12, 3), (8, 4): (12, 4),
    (8, 5): (12, 5), (8, 6): (12, 7), (8, 7): (12, 8), (8, 8): (12, 9),
}
_VERSION_RE = re.compile(r"^\s*\.version\s+(\d+)\.(\d+)", re.MULTILINE)
_UPGRADE_TOOLCHAIN = "pip install -U nvidia-cuda-nvcc nvidia-nvjitlink"


def _dotted(v: Version) -> str:
    return f"{v[0]}.{v[1]}"


def ptx_isa_version(ptx: str) -> Version:
    """The ``.version`` of a PTX module, e.g. ``(8, 5)``.

    Raises:
        ValueError: the module has no ``.version`` directive.
    """
    m = _VERSION_RE.search(ptx)
    if not m:
        raise ValueError("the PTX module has no .version directive")
    return int(m.group(1)), int(m.group(2))


def cuda_for_ptx(version: Version) -> Version:
    """The first CUDA release (driver and ptxas) that reads PTX ISA ``version``.

    Raises:
        ValueError: a PTX version older than 7.0 (CUDA 11), which jaxptx never writes.
    """
    if version in _PTX_TO_CUDA:
        return _PTX_TO_CUDA[version]
    if version[0] >= 9:  # 9.x is CUDA 13.x; later majors assumed to follow the same step
        return version[0] + 4, version[1]
    raise ValueError(f"PTX ISA {_dotted(version)}: no CUDA release known for it")


@functools.cache
def driver_cuda_version() -> Version | None:
    """The CUDA version the installed driver supports (``cuDriverGetVersion``,
    which needs no GPU context), or None where ``libcuda.so.1`` does not load."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
        out = ctypes.c_int(0)
        if lib.cuDriverGetVersion(ctypes.byref(out)) != 0 or out.value <= 0:
            return None
    except (OSError, AttributeError):
        return None
    return out.value // 1000, (out.value % 1000) // 10


def toolchain_cuda_version(backend: Literal["auto", "nvjitlink", "ptxas"] = "auto") -> Version | None:
    """The CUDA release of the compiler :func:`~jaxptx.runtime.compile_cubin`
    would use for ``backend``, or None when it is missing."""
    from . import _toolchain

    if backend in ("auto", "nvjitlink"):
        text = _toolchain._nvjitlink_version()
        if text is not None or backend == "nvjitlink":
            return None if text is None else _parse_release(text)
    try:
        return _parse_release(_toolchain.tool_version("ptxas"))
    except ToolchainError:
        return None


def _parse_release(text: str) -> Version:
    major, minor = text.split(".")[:2]
    return int(major), int(minor)


@dataclasses.dataclass(frozen=True)
class ModuleImage:
    """What the driver is given: ``kind`` ``"cubin"`` or ``"ptx"``, and ``why``
    (one line). The bytes come from :func:`module_image`."""

    kind: Literal["cubin", "ptx"]
    why: str


def plan_image(ptx: str, arch: str, *, driver: Version | None,
               toolchain: Version | None) -> ModuleImage:
    """Choose the module image for a driver of CUDA ``driver`` and a compiler
    of CUDA ``toolchain`` (None: missing), as described in the module doc.
    With no driver (``driver=None``) it is a cubin: nothing can be checked.

    Raises:
        ToolchainError: the driver is too old for the PTX; the message names
            the driver release needed and the compiler to install.
    """
    needs = cuda_for_ptx(ptx_isa_version(ptx))
    ptx_text = f"PTX ISA {_dotted(ptx_isa_version(ptx))} (CUDA {_dotted(needs)})"
    if driver is None:
        if toolchain is None:
            raise ToolchainError(f"no CUDA compiler to build the cubin for {arch}; "
                                 f"{_UPGRADE_TOOLCHAIN}")
        return ModuleImage("cubin", "no driver to check against")
    if needs > driver:
        raise ToolchainError(
            f"the NVIDIA driver supports CUDA {_dotted(driver)}, but this {arch} kernel is "
            f"{ptx_text}: neither its PTX nor a cubin built from it can run. Install a driver "
            f"for CUDA {_dotted(needs)} or newer, or pass @kernel(version=...) no newer than "
            f"CUDA {_dotted(driver)} reads, if the kernel's instructions allow")
    if toolchain is None:
        return ModuleImage("ptx", f"no CUDA compiler ({_UPGRADE_TOOLCHAIN}); the driver "
                                  f"JIT-compiles the {ptx_text}")
    if toolchain > driver:
        return ModuleImage("ptx", f"the compiler (CUDA {_dotted(toolchain)}) is newer than the "
                                  f"driver (CUDA {_dotted(driver)}), whose JIT compiles the PTX")
    if toolchain < needs:
        return ModuleImage("ptx", f"the compiler (CUDA {_dotted(toolchain)}) cannot read "
                                  f"{ptx_text} ({_UPGRADE_TOOLCHAIN}); the driver JIT-compiles it")
    return ModuleImage("cubin", f"compiler CUDA {_dotted(toolchain)} <= driver CUDA "
                                f"{_dotted(driver)}")


def module_image(ptx: str, arch: str, *,
                 backend: Literal["auto", "nvjitlink", "ptxas"] = "auto") -> bytes:
    """The module image to hand this machine's driver for ``ptx`` on ``arch``:
    a cubin (:func:`~jaxptx.runtime.compile_cubin`, through the cache) or the
    PTX text itself, by :func:`plan_image` against the installed driver and
    compiler.

    Raises:
        ToolchainError: the driver is too old for the PTX (see :func:`plan_image`).
        PtxasError: the compiler rejected the module.
    """
    from ._toolchain import compile_cubin

    plan = plan_image(ptx, arch, driver=driver_cuda_version(),
                      toolchain=toolchain_cuda_version(backend))
    if plan.kind == "ptx":
        return ptx.encode()
    return compile_cubin(ptx, arch, backend=backend)
