"""The JAX integration: every kernel is a JAX primitive.

Calling a :class:`~jaxptx.Kernel` on arrays binds its primitive (one per
kernel, named after it): shapes and dtypes are checked against the kernel's
``Tile`` specs, and the outputs come from ``out_specs``. The primitive lowers
to a typed-FFI custom call: ``jaxptx_launch_v2`` on CUDA (the PTX launched
on XLA's stream by the ``jaxptx._ffi`` shim) and ``jaxptx_cpu_v2`` on the CPU
(the kernel run on the emulator, ``jaxptx.sim``). Each call carries its
kernel's PTX and launch (one ``launch`` attribute: grid, block, cluster and
dynamic shared memory), and a kernel id derived from them that the handlers
check before running anything. On the CPU, output bytes a kernel never
writes are an error (:func:`allow_unwritten` declares padding);
:func:`in_place` declares outputs that update an input. It batches under ``jax.vmap``
(a loop over the batch), runs per shard inside ``jax.shard_map`` (a kernel
declared with ``peers=`` runs on every device of a mesh axis together,
called as ``k(x, axis_name="d")``: on the CPU the shards meet and run on one
emulated node, ``_peer_cpu``), and
:func:`custom_vjp` pairs a forward kernel with its backward for ``jax.grad``.
:func:`ptx_call` makes any PTX entry (Triton's, nvcc's, hand-written) the
same kind of primitive, its ``.param`` list filled by arrays, numbers,
:class:`Output`, :class:`Scratch` and :class:`TensorMap` arguments;
:func:`cuda_call` does the same for CUDA C++ source, compiled by NVRTC.

Importing this package is cheap: jax itself loads on the first kernel call.

Example:
    >>> import jax, numpy as np
    >>> from jaxptx import Tile, kernel, ptx
    >>> from jaxptx.types import f32
    >>> @kernel(in_specs=(Tile("N", f32),), out_specs=(Tile("N", f32),),
    ...         grid=lambda N: (N // 32, 1, 1), block=(32, 1, 1))
    ... def double(x, y):
    ...     i = ptx.special.ctaid.x() * 32 + ptx.special.tid.x()
    ...     off = ptx.mul.wide.u32(i, 4)
    ...     v = ptx.ld.global_.f32(x.ptr + off)
    ...     ptx.st.global_.f32(y.ptr + off, v + v)
    >>> jax.jit(double)(np.arange(64, dtype=np.float32))[:4]
    Array([0., 2., 4., 6.], dtype=float32)
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from typing import Any

from ..dsl import Kernel, set_call_hook
from ..dsl.declarations import allow_unwritten as allow_unwritten
from ..dsl.declarations import in_place as in_place
from ..runtime import CudaCompileError as CudaCompileError
from ._ptx_args import Output as Output
from ._ptx_args import Scratch as Scratch
from ._ptx_args import TensorMap as TensorMap

__all__ = ["custom_vjp", "primitive", "kernels_in", "register_ffi_targets", "disabled_checks",
           "deserialize", "allow_unwritten", "in_place", "ptx_call", "Output", "Scratch",
           "TensorMap", "cuda_call", "CudaCompileError"]


def _call(kernel: Kernel, args: tuple, kwargs: dict) -> Any:
    from ._primitive import call  # jax (heavy) loads on the first kernel call
    return call(kernel, args, kwargs)


def primitive(kernel: Kernel) -> Any:
    """The ``jax.extend.core.Primitive`` of ``kernel`` (created on first use).

    Its parameters are ``template`` and ``sizes`` (sorted ``(name, value)``
    pairs) and ``grid``; it has multiple results, one per ``out_specs`` entry.
    """
    from ._primitive import primitive as get  # jax (heavy) loads here
    return get(kernel)


def custom_vjp(forward: Any, backward: Any = None) -> Any:
    """Pair a forward kernel (or JAX function) with its backward as a ``jax.custom_vjp``.

    ``backward`` is called as ``backward(*inputs, *outputs, *cotangents,
    **template)`` — the forward's inputs, its outputs and one cotangent per
    output — and returns one cotangent per input (a tuple, or a single array
    when the forward has one input; ``None`` for a zero cotangent). It may be
    a kernel (its ``in_specs`` take those tensors, its ``out_specs`` give the
    input cotangents) or any JAX function. Template keywords reach
    ``backward`` where it accepts them. Without ``backward``, returns a
    decorator that takes it.

    Args:
        forward: the forward computation, called as ``forward(*inputs, **template)``.
        backward: the backward computation (see above).

    Returns:
        A function ``f(*inputs, **template)`` that ``jax.grad``, ``jax.jit``
        and ``jax.vmap`` accept; template values are static.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> f = custom_vjp(jnp.sin, lambda x, y, dy: dy * jnp.cos(x))
        >>> float(jax.grad(f)(0.0))
        1.0
    """
    from ._vjp import custom_vjp as make  # jax (heavy) loads here
    return make(forward, backward)


def ptx_call(ptx: str, *args: Any, kernel: str | None = None, out_shape: Any, grid: Any,
             block: Any, cluster: Any = (1, 1, 1), smem: int = 0,
             input_output_aliases: Mapping[int, int] | None = None,
             zeroed_outputs: Sequence[int] = (), vmap_grid_z: bool = False) -> Any:
    """Call a PTX entry (from Triton, nvcc, the CuTe DSL, or written by hand) as a JAX primitive.

    The call is a primitive like a ``@kernel``'s: ``jax.jit`` lowers it to
    the same typed-FFI custom call (``jaxptx_launch_v2`` on CUDA, the PTX
    compiled by ptxas through the cubin cache where the GPUs are;
    ``jaxptx_cpu_v2`` on the CPU, where it runs on the emulator, so
    ``jaxptx.sim.checking()``, ``jaxptx.profile.profiling()`` and
    ``JAXPTX_CAPTURE_DIR`` see it), with a kernel id bound to its content.
    It works under ``jax.vmap``, ``jax.shard_map`` (a launch per shard),
    ``jax.export`` (with :func:`disabled_checks`) and, wrapped with its
    backward in :func:`custom_vjp`, ``jax.grad``.

    The positional ``args`` fill the entry's ``.param`` list in order:

    * an array: a pointer to that input (a ``.u64``/``.b64``/``.s64`` param);
    * :class:`Output` ``(i)``: a pointer to output ``i``; without any
      ``Output``, the outputs' pointers follow all the arguments;
    * a Python or numpy number: the static value of a scalar param, in its
      PTX type (range-checked; a 64-bit param takes a numpy integer, since a
      Python int there is more often a missing array);
    * :class:`Scratch` ``(nbytes)``: a pointer to a zero-filled scratch buffer;
    * :class:`TensorMap` ``(array, box=..., swizzle=...)``: a 128-byte tensor
      map (``.param .align 64 .b8 name[128]``) of an input (or output).

    The custom call passes buffer pointers first (inputs, then outputs), then
    the scalars, then the tensor maps; the PTX it carries has the entry's
    ``.param`` list reordered that way (the body is unchanged, the line
    numbers too), with an unused pointer param for a buffer that has none.

    Args:
        ptx: the PTX module's text. It is parsed and checked once per text:
            text that does not parse, or that ``jaxptx.check`` finds ptxas
            would reject, is an error naming the line when the call is traced.
        *args: what fills each ``.param`` (above).
        kernel: the ``.entry`` to call when the module has several.
        out_shape: a ``jax.ShapeDtypeStruct`` or a pytree of them; the result
            has its structure.
        grid, block, cluster: the launch shape (an int or 1 to 3 ints each).
        smem: bytes of dynamic shared memory.
        input_output_aliases: ``{argument position: output index}``: the
            output is the input's buffer, updated in place (as in
            ``jax.ffi.ffi_call``; the argument must be an array of the
            output's shape and dtype).
        zeroed_outputs: outputs that start as zeros (atomics accumulate into
            them); other outputs start as garbage, and on the CPU, bytes of
            them the kernel leaves unwritten are an error.
        vmap_grid_z: under ``jax.vmap``, launch once with the batch as grid
            z rather than once per element: every array argument, output and
            Scratch gets the batch as its leading dim (unbatched arguments
            are broadcast), and the kernel offsets each pointer by
            ``%ctaid.z`` times one element's bytes. Such a kernel also runs
            right with grid z = 1. Needs grid z = 1; calls with tensor maps
            and batches past 65535 loop instead.

    Returns:
        The outputs, in ``out_shape``'s structure (Scratch buffers dropped).

    Raises:
        ParseError: the PTX does not parse.
        jaxptx.sim.PrecheckError: ptxas would reject the PTX (``jaxptx.check``).
        SpecError: an argument that does not fit its ``.param`` (count,
            pointer against scalar, a value out of its type's range, a
            parameter kind ptx_call cannot fill), naming the param's index,
            name and PTX type and what came; bad aliases or zeroed outputs.
        LaunchError: a launch outside CUDA's limits for the PTX's target.

    Example:
        >>> import jax, numpy as np
        >>> scale = '''.version 8.0
        ... .target sm_80
        ... .address_size 64
        ... .visible .entry scale(.param .u64 x, .param .f32 a, .param .u64 y)
        ... {
        ...     .reg .b32 %r<2>;
        ...     .reg .b64 %rd<5>;
        ...     .reg .f32 %f<3>;
        ...     ld.param.u64 %rd1, [x];
        ...     ld.param.u64 %rd2, [y];
        ...     ld.param.f32 %f1, [a];
        ...     mov.u32 %r1, %tid.x;
        ...     mul.wide.u32 %rd3, %r1, 4;
        ...     add.s64 %rd4, %rd1, %rd3;
        ...     ld.global.f32 %f2, [%rd4];
        ...     mul.f32 %f2, %f2, %f1;
        ...     add.s64 %rd4, %rd2, %rd3;
        ...     st.global.f32 [%rd4], %f2;
        ...     ret;
        ... }'''
        >>> x = np.arange(32, dtype=np.float32)
        >>> f = jax.jit(lambda x: ptx_call(scale, x, 3.0, grid=1, block=32,
        ...                                out_shape=jax.ShapeDtypeStruct((32,), np.float32)))
        >>> f(x)[:4]
        Array([0., 3., 6., 9.], dtype=float32)
    """
    from ._ptx_call import ptx_call as call  # jax (heavy) loads here
    return call(ptx, *args, kernel=kernel, out_shape=out_shape, grid=grid, block=block,
                cluster=cluster, smem=smem, input_output_aliases=input_output_aliases,
                zeroed_outputs=zeroed_outputs, vmap_grid_z=vmap_grid_z)


def cuda_call(source: str, *args: Any, kernel: str | None = None, out_shape: Any, grid: Any,
              block: Any, cluster: Any = (1, 1, 1), smem: int = 0,
              input_output_aliases: Mapping[int, int] | None = None,
              zeroed_outputs: Sequence[int] = (), vmap_grid_z: bool = False,
              arch: str | None = None, options: Sequence[str] = (),
              include_dirs: Sequence[Any] = ()) -> Any:
    """Call a CUDA C++ ``__global__`` function as a JAX primitive, compiled by NVRTC.

    NVRTC (``cuda.bindings.nvrtc``; ``pip install 'jaxptx[nvrtc]'``)
    compiles ``source`` to PTX for ``arch`` in this process, with no GPU
    needed, and the PTX goes through :func:`ptx_call`: the same primitive,
    lowerings (the emulator on the CPU, a launch on CUDA), transformations
    and arguments (arrays, numbers, :class:`Output`, :class:`Scratch`,
    :class:`TensorMap`, filling the kernel's parameters in order). A
    pointer is a ``.u64`` param, a ``const __grid_constant__ CUtensorMap``
    a tensor map; NVVM declares integers unsigned (``int`` is ``.u32``,
    ``long long`` ``.u64``), so a negative number passes as its two's
    complement. Structs passed by value are refused.

    CUB, Thrust's device headers, libcu++ (``<cuda/std/...>``) and
    cooperative groups are on the include path (the ``nvidia-cuda-cccl`` and
    ``nvidia-cuda-runtime`` wheels), after ``include_dirs``. NVRTC's
    defaults hold otherwise: C++17, no fast math, no line info.

    The PTX is cached by content (the source, kernel, target, options,
    include directories with a stamp of their files, NVRTC's version) in
    memory and on disk beside the cubin cache (``$JAXPTX_CACHE_DIR``), so a
    second call or process does not compile again. NVRTC writes its own
    release's PTX version (NVRTC 13.5: ``.version 9.5``), which a CUDA 13.0
    driver cannot read; the call lowers the ``.version`` to jaxptx's default
    for the target (8.5) or 9.0 when ``jaxptx.check`` finds the instructions
    allow it, and says so in a comment on that line.

    Args:
        source: the CUDA C++ program's text.
        *args: what fills each of the kernel's parameters (see :func:`ptx_call`).
        kernel: the ``__global__`` function: an ``extern "C"`` name, or any
            C++ name expression (``"scale<float>"``, ``"ns::step<4>"``) that
            NVRTC instantiates and maps to its mangled entry. Without it,
            the program's only kernel.
        out_shape: as for :func:`ptx_call`; so are ``grid``, ``block``,
            ``cluster``, ``smem``, ``input_output_aliases``,
            ``zeroed_outputs`` and ``vmap_grid_z``.
        arch: the target (``"sm_80"``, ``"sm_90a"``); by default what
            ``@kernel(arch="auto")`` resolves to: ``$JAXPTX_ARCH``, GPU 0's,
            else ``"sm_90a"``. NVRTC compiles for its virtual
            ``compute_XX``.
        options: more NVRTC flags (``("-DN=4", "--use_fast_math")``); the
            target is ``arch``'s, not a flag's.
        include_dirs: header directories (str or ``pathlib.Path``),
            searched first. Their files' paths, sizes and modification
            times key the cache (headers reached through an ``-I`` in
            ``options`` do not).

    Returns:
        The outputs, in ``out_shape``'s structure.

    Raises:
        CudaCompileError: NVRTC rejected the program (or a ``kernel`` that
            names no ``__global__`` function); the message shows each
            error's ``file(line)`` with the source line under it (``.log``
            holds NVRTC's whole log).
        ToolchainError: NVRTC is not installed.
        SpecError: no ``kernel`` and not one kernel in the source, a flag
            that chooses the target, an include directory that is none, or
            an argument that does not fit (see :func:`ptx_call`).
        PtxTargetError: ``arch`` is not a target like ``"sm_90a"``.

    Example:
        >>> import jax, numpy as np
        >>> src = r'''
        ... extern "C" __global__ void scale(const float* x, float a, float* y, int n) {
        ...     int i = blockIdx.x * blockDim.x + threadIdx.x;
        ...     if (i < n) y[i] = a * x[i];
        ... }'''
        >>> x = np.arange(64, dtype=np.float32)
        >>> f = jax.jit(lambda x: cuda_call(src, x, 3.0, Output(0), 64, grid=2, block=32,
        ...                                 out_shape=jax.ShapeDtypeStruct((64,), np.float32)))
        >>> f(x)[:4]
        Array([0., 3., 6., 9.], dtype=float32)
    """
    from ._cuda_call import cuda_call as call  # jax (heavy) loads here
    return call(source, *args, kernel=kernel, out_shape=out_shape, grid=grid, block=block,
                cluster=cluster, smem=smem, input_output_aliases=input_output_aliases,
                zeroed_outputs=zeroed_outputs, vmap_grid_z=vmap_grid_z, arch=arch,
                options=options, include_dirs=include_dirs)


def kernels_in(lowered: Any) -> dict[int, Any]:
    """The kernels a lowered function calls, as ``{kernel_id: Specialization}``.

    ``lowered`` is a ``jax.stages.Lowered`` (``jax.jit(f).lower(...)``) or its
    StableHLO text (``.as_text()``); each specialisation carries its PTX
    (``.ptx``) and launch shape.

    Raises:
        TypeError: ``lowered`` is neither (text that is not StableHLO, say).
        KeyError: a call's kernel was not lowered in this process.
    """
    from ._registry import kernels_in as find  # the registry loads the emulator (~0.3 s)
    return find(lowered)


def register_ffi_targets() -> None:
    """Register jaxptx's FFI targets (``jaxptx_cpu_v2``, ``jaxptx_launch_v2``) with JAX.

    The first kernel call does this; a process that only runs a deserialised
    :mod:`jax.export` artifact calls no kernel, so it calls this first (or
    loads the artifact with :func:`deserialize`, which does). Without it, XLA
    refuses the artifact's calls with "No FFI handler registered for
    jaxptx_cpu_v2" (or ``jaxptx_launch_v2``). Each custom call carries its
    kernel's PTX, entry and launch shape, so nothing else of the exporting
    process is needed. Idempotent.

    The version-1 targets (``jaxptx_cpu_v1``, ``jaxptx_launch_v1``, whose
    calls carried grid, block, cluster and smem as four attributes) are
    registered too, with handlers that refuse each call with an error naming
    the version and the fix: lower and export the function again with this
    jaxptx, or run the artifact with the jaxptx that exported it.
    """
    from . import _lowering  # registers on import; loads jax (heavy)
    del _lowering


def disabled_checks() -> list[Any]:
    """The ``disabled_checks`` that ``jax.export.export`` needs for jaxptx kernels.

    ``jax.export`` refuses custom calls without a compatibility guarantee
    (only JAX's own targets have one). jaxptx's calls are self-contained (the
    PTX travels in the call), so an artifact keeps working as long as the
    loading process has a jaxptx whose shim takes the same attributes.

    Use as ``export.export(jax.jit(f), platforms=("cuda",),
    disabled_checks=jaxptx.jax.disabled_checks())(*args)``.

    Example:
        >>> [str(check) for check in disabled_checks()]
        ['custom_call:jaxptx_launch_v2', 'custom_call:jaxptx_cpu_v2']
    """
    from jax import export      # jax (heavy) loads here
    from ._lowering import CPU_TARGET, CUDA_TARGET
    return [export.DisabledSafetyCheck.custom_call(t) for t in (CUDA_TARGET, CPU_TARGET)]


def deserialize(data: bytes | bytearray) -> Any:
    """Load a :mod:`jax.export` artifact that calls jaxptx kernels, ready to run.

    ``jax.export.deserialize(data)`` after :func:`register_ffi_targets`, with
    a clear error for bytes that are not a whole artifact.

    Args:
        data: what ``Exported.serialize()`` wrote.

    Returns:
        The ``jax.export.Exported``; ``.call(*args)`` runs it.

    Raises:
        TypeError: ``data`` is not bytes.
        ValueError: ``data`` is not a complete artifact (truncated, or not
            one at all).

    Example:
        >>> deserialize(b"garbage")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: jaxptx.jax.deserialize: 7 bytes that are not a complete jax.export artifact ...
    """
    from jax import export      # jax (heavy) loads here
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"jaxptx.jax.deserialize: expected the bytes of Exported.serialize(), "
                        f"got {type(data).__name__}")
    register_ffi_targets()
    try:
        return export.deserialize(bytearray(data))
    except (struct.error, IndexError, UnicodeDecodeError) as e:
        kind = type(e).__name__
        if type(e).__module__ != "builtins":
            kind = f"{type(e).__module__}.{kind}"        # struct.error
        raise ValueError(f"jaxptx.jax.deserialize: {len(data)} bytes that are not a complete "
                         f"jax.export artifact (truncated, or another file?): reading them "
                         f"failed with {kind}: {e}") from None


set_call_hook(_call)
