"""Compiling a Triton kernel to PTX ahead of time, without a GPU, cached per specialisation.

``triton.compile(ASTSource(fn, signature, constexprs, attrs),
target=GPUTarget("cuda", capability, 32))`` runs Triton's whole pipeline on
the CPU (its ptxas included, so what it writes assembles); the PTX is
``.asm["ptx"]``, the entry name, shared memory, warps and scratch sizes are
in ``.metadata``. Compiles are cached in memory per kernel (its source's
hash included), specialisation, options and target, and on disk by Triton.

The PTX ISA version: Triton writes the newest its ptxas reads (``.version
9.4`` from Triton 3.9 for sm_90a), newer than a CUDA 13.0 driver loads and
than jaxptx's tools know (:data:`jaxptx.isa.NEWEST_PTX`, 9.0). LLVM emits no
instruction newer than PTX 9.0 either way, so the compile asks Triton for
``ptx_version`` no newer than 9.0 (unless the options name one).
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Mapping
from typing import Any

from .. import isa
from ..errors import SpecError
from ..parse import parse
from ..runtime import detect_arch
from ._specialize import Spec

import triton  # the optional dependency: jaxptx[triton]
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

__all__ = ["Compiled", "compile_kernel", "default_capability", "DEFAULT_CAPABILITY"]

# Without a GPU or $JAXPTX_ARCH: the capability @kernel(arch="auto") and
# cuda_call fall back to (sm_90a), so a program's kernels share one target.
DEFAULT_CAPABILITY = 90
_NEWEST_PTX = isa.NEWEST_PTX[0] * 10 + isa.NEWEST_PTX[1]


@dataclasses.dataclass(frozen=True)
class Compiled:
    """One compiled specialisation.

    Attributes:
        ptx: the PTX text.
        entry: the ``.entry`` name.
        params: the PTX type of each ``.param`` (``"u64"``, ``"u32"``,
            ``"b8[128]"``), in order.
        shared: bytes of (dynamic) shared memory the launch needs.
        num_warps: warps per CTA (warp specialisation may change the number
            asked for).
        num_ctas: CTAs per cluster.
        global_scratch: ``(bytes per CTA, alignment)`` of the global scratch
            buffer Triton's launcher allocates (0 bytes: a null pointer).
        profile_scratch: the same for the profiler's scratch buffer.
        tensordesc_meta: per host-side tensor descriptor, Triton's TMA
            metadata (block size, swizzle, element type); empty without TMA.
    """

    ptx: str
    entry: str
    params: tuple[str, ...]
    shared: int
    num_warps: int
    num_ctas: int
    global_scratch: tuple[int, int]
    profile_scratch: tuple[int, int]
    tensordesc_meta: tuple[Mapping[str, Any], ...]


def default_capability() -> int:
    """The capability to compile for when the call names none: ``$JAXPTX_ARCH``,
    else GPU 0's, else :data:`DEFAULT_CAPABILITY` (see the module doc)."""
    arch = detect_arch()
    m = re.fullmatch(r"sm_(\d+)[af]?", arch or "")
    return int(m.group(1)) if m else DEFAULT_CAPABILITY


def _options(options: Mapping[str, Any], capability: int) -> dict[str, Any]:
    """``options`` with a ``ptx_version`` no newer than jaxptx's newest PTX."""
    out = dict(options)
    if out.get("ptx_version") is None:
        try:   # Triton's own choice: the newest its ptxas for this target reads
            from triton.backends.nvidia.compiler import CUDAOptions, get_ptx_version_from_options
            newest = get_ptx_version_from_options(CUDAOptions(), capability)
        except (ImportError, TypeError, AttributeError):
            newest = _NEWEST_PTX
        out["ptx_version"] = min(newest, _NEWEST_PTX)
    return out


def compile_kernel(fn: Any, spec: Spec, options: Mapping[str, Any], capability: int) -> Compiled:
    """The kernel ``fn`` compiled for ``spec``, ``options`` and ``sm_<capability>``.

    Raises:
        SpecError: the options or a constexpr value cannot key the cache.
        triton.compiler.errors.CompilationError: the kernel does not compile
            (Triton's message points at the kernel's line).
    """
    items = tuple(sorted(_options(options, capability).items()))
    try:
        return _cached(fn, fn.cache_key, spec, items, capability)
    except TypeError as e:
        if "unhashable" not in str(e):
            raise
        return _compile(fn, spec, items, capability)       # a constexpr that cannot key a cache


@functools.lru_cache(maxsize=256)
def _cached(fn: Any, source_key: str, spec: Spec, options: tuple[tuple[str, Any], ...],
            capability: int) -> Compiled:
    del source_key   # keys the cache: the kernel's source and the functions it calls
    return _compile(fn, spec, options, capability)


def _compile(fn: Any, spec: Spec, options: tuple[tuple[str, Any], ...],
             capability: int) -> Compiled:
    source = ASTSource(fn=fn, signature=dict(spec.signature), constexprs=dict(spec.constexprs),
                       attrs=spec.attrs())
    kernel = triton.compile(source, target=GPUTarget("cuda", capability, 32),
                            options=dict(options))
    ptx, md = kernel.asm["ptx"], kernel.metadata
    entry = next(f for f in parse(ptx, f"<triton {md.name}>").functions if f.kind == "entry")
    params = tuple(p.type + "".join(f"[{d}]" for d in p.dims) for p in entry.params)
    return Compiled(ptx, md.name, params, int(md.shared), int(md.num_warps),
                    int(getattr(md, "num_ctas", 1)),
                    (int(getattr(md, "global_scratch_size", 0) or 0),
                     int(getattr(md, "global_scratch_align", 1) or 1)),
                    (int(getattr(md, "profile_scratch_size", 0) or 0),
                     int(getattr(md, "profile_scratch_align", 1) or 1)),
                    tuple(dict(m) for m in (getattr(md, "tensordesc_meta", None) or ())))


def check_capability(capability: Any, where: str) -> int:
    """``capability`` as an int of at least 75 (Triton's oldest NVIDIA target).

    Raises:
        SpecError: anything else.
    """
    if isinstance(capability, bool) or not isinstance(capability, int) or capability < 75:
        raise SpecError(f"{where}: compute_capability: expected an int such as 80, 90 or 100 "
                        f"(sm_80, sm_90a, sm_100a), got {capability!r}")
    return capability
