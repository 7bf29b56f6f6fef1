"""``cuda_call``: a CUDA C++ kernel as a JAX primitive, through NVRTC and ``ptx_call``.

The steps, each its own function: check the flags and include directories,
resolve the target (:func:`target_for`), compile the source to PTX with
NVRTC (``jaxptx.runtime._nvrtc``, cached in memory and on disk), lower the
PTX's ``.version`` (:func:`lowered_version`), find the entry, pass negative
integers for NVVM's unsigned parameters as their two's complement, then
bind :func:`~jaxptx.jax._ptx_call.ptx_call` to the entry.

NVRTC writes its own release's PTX ISA (NVRTC 13.5: ``.version 9.5``), newer
than a CUDA 13.0 driver JIT-compiles or its ptxas reads (PTX 9.0), and NVRTC
has no option to choose it. The instructions NVRTC emits are much older, so
:func:`lowered_version` rewrites the ``.version`` directive in the IR to the
oldest of jaxptx's default for the target (PTX 8.5, or the target's first)
and :data:`jaxptx.isa.NEWEST_PTX` (9.0) under which ``jaxptx.check`` finds
nothing it did not find under NVRTC's own (the ISA table knows each
instruction's minimum PTX version); where neither does, the module keeps
NVRTC's. A comment on the line says so.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .. import ir, isa
from ..check import check
from ..dsl import AUTO_FALLBACK_ARCH
from ..emit import emit
from ..errors import SpecError
from ..parse import parse
from ..runtime import compile_cuda, detect_arch
from ._ptx_call import ptx_call
from ._ptx_source import entry_function, parsed

__all__ = ["cuda_call", "lowered_version", "target_for"]

# The unsigned parameter types NVVM gives C++ integers, by width.
_UNSIGNED = {"u8": 8, "u16": 16, "u32": 32, "u64": 64}
# Flags that choose the target, which cuda_call's ``arch`` owns.
_ARCH_FLAGS = ("-arch", "--gpu-architecture")


def cuda_call(source: str, *args: Any, kernel: str | None = None, out_shape: Any, grid: Any,
              block: Any, cluster: Any = (1, 1, 1), smem: int = 0,
              input_output_aliases: Mapping[int, int] | None = None,
              zeroed_outputs: Sequence[int] = (), vmap_grid_z: bool = False,
              arch: str | None = None, options: Sequence[str] = (),
              include_dirs: Sequence[str | os.PathLike] = ()) -> Any:
    """See :func:`jaxptx.jax.cuda_call`."""
    if not isinstance(source, str):
        raise SpecError(f"cuda_call: expected the CUDA C++ source (a str) first, got "
                        f"{type(source).__name__}")
    if kernel is not None and not isinstance(kernel, str):
        raise SpecError(f"cuda_call: kernel: expected a function name (a str), got {kernel!r}")
    flags = _options(options)
    dirs = _include_dirs(include_dirs)
    target = target_for(arch)
    compiled = compile_cuda(source, target.name, name_expression=kernel, options=flags,
                            include_dirs=dirs)
    ptx = lowered_version(compiled.ptx)
    entry = _entry(ptx, compiled.entry)
    args = _twos_complement(entry, args)
    return ptx_call(ptx, *args, kernel=entry.name, out_shape=out_shape, grid=grid, block=block,
                    cluster=cluster, smem=smem, input_output_aliases=input_output_aliases,
                    zeroed_outputs=zeroed_outputs, vmap_grid_z=vmap_grid_z)


def _options(options: Any) -> tuple[str, ...]:
    """The NVRTC flags, checked: strings, none choosing the target."""
    if isinstance(options, str) or not all(isinstance(v, str) for v in options):
        raise SpecError(f"cuda_call: options: expected a sequence of str "
                        f"(('-DN=4', '--use_fast_math'), say), got {options!r}")
    for flag in options:
        if flag.split("=", 1)[0] in _ARCH_FLAGS:
            raise SpecError(f"cuda_call: options: {flag!r} chooses the target, which is "
                            f"cuda_call's arch= (arch='sm_90a', say)")
    return tuple(options)


def _include_dirs(dirs: Any) -> tuple[str, ...]:
    """The include directories as paths, each checked to be a directory."""
    if isinstance(dirs, (str, bytes)) or not all(isinstance(d, (str, os.PathLike)) for d in dirs):
        raise SpecError(f"cuda_call: include_dirs: expected a sequence of directories "
                        f"(str or pathlib.Path), got {dirs!r}")
    paths = tuple(os.fspath(d) for d in dirs)
    for d in paths:
        if not os.path.isdir(d):
            raise SpecError(f"cuda_call: include_dirs: {d!r} is not a directory")
    return paths


def target_for(arch: str | None) -> isa.Target:
    """The target to compile for: ``arch``, else what ``@kernel(arch="auto")``
    resolves to (``JAXPTX_ARCH``, device 0's, or ``sm_90a`` with neither).

    Raises:
        PtxTargetError: ``arch`` is not a target like ``"sm_90a"``.
    """
    return isa.parse_target(arch if arch is not None else detect_arch() or AUTO_FALLBACK_ARCH)


def _entry(ptx: str, lowered: str | None) -> ir.Function:
    """The ``.entry`` the call launches: the kernel's, by its lowered name
    (NVRTC refuses a name expression of a function that is not
    ``__global__``), or without one the module's only entry.

    Raises:
        SpecError: no ``kernel``, and not exactly one kernel in the source.
    """
    module = parsed(ptx)
    if lowered is None:
        entries = [f.name for f in module.functions if f.kind == "entry" and f.body is not None]
        if len(entries) != 1:
            raise SpecError(f"cuda_call: the source defines {len(entries)} kernels "
                            f"({', '.join(entries) or 'none instantiated'}); pick one with "
                            f"kernel='name', a C++ name expression ('scale<float>' instantiates "
                            f"a template)")
    return entry_function(module, lowered)


def _twos_complement(f: ir.Function, args: Sequence[Any]) -> tuple[Any, ...]:
    """``args`` with each negative integer for an unsigned parameter as its
    two's complement (as a numpy unsigned integer of the parameter's width).

    NVVM declares every integer parameter unsigned (``int`` is ``.u32``,
    ``long long`` ``.u64``: PTX parameters are bits), so a negative value
    for a signed C++ parameter would be out of its PTX type's range.
    Argument ``k`` fills parameter ``k`` (outputs without a marker follow
    the arguments); a value past the signed range stays, for ptx_call to refuse.
    """
    out = list(args)
    for k, (p, a) in enumerate(zip(f.params, args)):
        negative = isinstance(a, (int, np.signedinteger)) and not isinstance(a, bool) and a < 0
        if negative and p.type in _UNSIGNED and not p.dims and not p.vector:
            bits = _UNSIGNED[p.type]
            if int(a) >= -(1 << (bits - 1)):
                out[k] = np.dtype(f"uint{bits}").type(int(a) & ((1 << bits) - 1))
    return tuple(out)


@functools.lru_cache(maxsize=128)
def lowered_version(text: str) -> str:
    """``text`` with its ``.version`` lowered to the oldest that its
    instructions allow of jaxptx's default for its target and
    :data:`jaxptx.isa.NEWEST_PTX` (see the module doc); ``text`` itself
    when neither is older than its own or neither allows them."""
    module = parse(text, "<cuda_call>")
    have = module.version
    names = [t for t in module.target if t.startswith("sm_")]
    if have is None or not names:
        return text
    target = isa.parse_target(names[0])
    baseline = _findings(module)
    for version in sorted({isa.default_version(target), isa.NEWEST_PTX}):
        if version >= have:
            break
        candidate = _with_version(module, version)
        if _findings(candidate) == baseline:
            return emit(candidate)
    return text


def _findings(module: ir.Module) -> list[tuple[int, int, str]]:
    return [(d.line, d.column, d.message) for d in check(module)]


def _with_version(module: ir.Module, version: tuple[int, int]) -> ir.Module:
    """``module`` declaring ``.version`` ``version``, with a comment naming the old one."""
    items = []
    for item in module.items:
        if isinstance(item, ir.Directive) and item.name == "version":
            note = (f"  // NVRTC wrote .version {item.args[0]}; jaxptx.jax.cuda_call lowered it "
                    f"(its instructions allow {version[0]}.{version[1]})")
            trivia = item.trivia
            if trivia is not None:
                trivia = (*trivia[:-1], note + trivia[-1])
            item = dataclasses.replace(item, args=(f"{version[0]}.{version[1]}",), trivia=trivia)
        items.append(item)
    return dataclasses.replace(module, items=items)
