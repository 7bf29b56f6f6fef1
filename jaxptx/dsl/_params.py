"""Kernel parameters inside a trace: tensor arguments, raw scalar params,
TMA descriptor params, and comments."""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from .. import ir, isa
from ..errors import PtxError, SpecError, TraceError
from ..types import PtxType
from ._core import Reg, emit_instruction
from ._peers import multimem_ptr, peer_ptr
from ._specs import Tile
from ._tma import describe_tma
from ._trace import Trace, current, user_location, with_location

__all__ = ["TensorArg", "UnboundDim", "tensor_args", "param", "global_ptrs", "batch_ptrs", "comment"]


class UnboundDim:
    """A symbolic dim not given to ``.ptx()``; using it as a number fails clearly."""

    __slots__ = ("name", "kernel")

    def __init__(self, name: str, kernel: str) -> None:
        self.name = name
        self.kernel = kernel

    def _fail(self, *_: Any) -> Any:
        raise SpecError(f"kernel {self.kernel}: dim {self.name!r} is not bound; "
                        f"pass {self.name}=<int> to .ptx()/.module() to specialise it")

    __int__ = __index__ = __add__ = __radd__ = __mul__ = __rmul__ = _fail
    __sub__ = __rsub__ = __floordiv__ = __rfloordiv__ = __mod__ = __lt__ = __gt__ = _fail
    __format__ = __float__ = _fail

    def __repr__(self) -> str:
        return f"UnboundDim({self.name!r})"


class TensorArg:
    """A tensor parameter of a kernel as the body sees it.

    Attributes:
        name: the parameter name (also its ``.param`` symbol).
        spec: its :class:`Tile`, or ``None`` when the kernel has no specs.
        shape: concrete dims where bound, :class:`UnboundDim` elsewhere.
        dtype: element type, or ``None``.
        shared: whether a batched launch (a ``batch="z"`` kernel under
            ``jax.vmap``) shares this one tensor across the batch.
        index: its position among the kernel's tensors (inputs, then outputs).
    """

    def __init__(self, name: str, spec: Tile | None, shape: tuple[Any, ...],
                 dtype: PtxType | None, shared: bool = False, index: int = 0) -> None:
        self.name = name
        self.spec = spec
        self.shape = shape
        self.dtype = dtype
        self.shared = shared
        self.index = index

    @property
    def nbytes(self) -> int:
        """Bytes of one tensor of this shape and dtype.

        Raises:
            SpecError: a dim is unbound, or the kernel has no specs.
        """
        if self.dtype is None:
            raise SpecError(f"tensor {self.name}: its size needs in_specs/out_specs")
        return math.prod(int(d) for d in self.shape) * self.dtype.bits // 8  # packed sub-byte types

    @property
    def batch_stride(self) -> int:
        """Bytes between this tensor's batch elements in a batched launch:
        ``nbytes``, or 0 for an input the batch shares."""
        return 0 if self.shared else self.nbytes

    @property
    def batch_ptr(self) -> Reg:
        """The address of this launch's batch element of the tensor:
        ``ptr + %ctaid.z * batch_stride`` (emitted once, at the kernel's start).

        For kernels declared with ``batch="z"``: under ``jax.vmap`` the batch
        runs as grid z, one problem per z index; called without vmap, the
        grid's z is 1 and this is ``ptr``. A shared input's is its ``ptr``.
        """
        return current().materialise(("batch_ptr", self.name), self._batch_ptr)

    def _batch_ptr(self) -> Reg:
        if self.shared:
            return self.ptr
        z = current().materialise(("ctaid.z",), lambda: emit_instruction("mov", ("u32",), ("%ctaid.z",)))
        if self.batch_stride < 2**32:
            offset = emit_instruction("mul", ("wide", "u32"), (z, self.batch_stride))
        else:  # a batch element of 4 GiB or more: a 64-bit multiply
            z64 = emit_instruction("cvt", ("u64", "u32"), (z,))
            offset = emit_instruction("mul", ("lo", "u64"), (z64, self.batch_stride))
        return emit_instruction("add", ("u64",), (self.ptr, offset))

    def __ptx_symbol__(self) -> str:
        return self.name

    def peer_ptr(self, r: Any) -> Reg:
        """The global address of device ``r``'s copy of this tensor, for a
        tensor the kernel names in ``peers`` (a ``u64`` register; ``r`` an int
        or a 32-bit register holding a rank on the call's mesh axis).
        ``x.peer_ptr(ptx.rank())`` is this device's own copy.

        Raises:
            TraceError: the tensor is not a peer tensor, or ``r`` is an int
                outside the axis.
        """
        return peer_ptr(self.name, r)

    @property
    def multimem_ptr(self) -> Reg:
        """The multicast address of this peer tensor: ``ptx.multimem.*`` at
        it reaches every device's copy (a ``u64`` register).

        Raises:
            TraceError: the tensor is not a peer tensor.
        """
        return multimem_ptr(self.name)

    @property
    def ptr(self) -> Reg:
        """The tensor's global address in a u64 register (loaded once, at the
        kernel's start, so a first use inside runtime control flow is fine)."""
        return current().materialise(("ptr", self.name), self._ptr)

    def _ptr(self) -> Reg:
        raw = emit_instruction("ld", ("param", "u64"), (self.name,))
        return emit_instruction("cvta", ("to", "global", "u64"), (raw,))

    def tma_desc(self) -> Reg:
        """The generic address of this tensor's TMA descriptor, a ``.param
        .align 64 .b8 <name>_tma[128]`` the runtime fills for each call
        (declared, and its address taken, once).

        Built from the spec: its shape and dtype, ``tma_box`` (default the
        whole tensor), the layout's swizzle, ``tma_rank=3`` for the reshaped
        2-d form (see :mod:`jaxptx.dsl._tma`). Use it as the tensor-map
        operand: ``ptx.addr(A.tma_desc(), coords=(x, y))``.

        Raises:
            SpecError: the descriptor cannot be built from the spec.
            PtxTargetError: the target has no TMA (before sm_90).
        """
        return current().materialise(("tma", self.name), self._tma_desc)

    def _tma_desc(self) -> Reg:
        trace = current()
        try:  # a descriptor is only of use to TMA copies: the target must have them
            isa.BY_OPCODE["cp.async.bulk.tensor"][0].requires.check(
                f"{self.name}.tma_desc() (a TMA descriptor)", trace.target, trace.version)
        except PtxError as e:
            raise with_location(e, user_location()) from None
        symbol = trace.new_symbol(f"{self.name}_tma")
        desc = describe_tma(self.name, self.index, self.spec, self.shape, symbol, trace.name)
        trace.params.append(ir.VarDecl("param", "b8", symbol, align=64, dims=(128,)))
        trace.tma.append(desc)
        local = emit_instruction("mov", ("u64",), (symbol,))
        return emit_instruction("cvta", ("param", "u64"), (local,))

    def __repr__(self) -> str:
        return f"TensorArg({self.name!r}, shape={self.shape}, dtype={self.dtype})"


def tensor_args(trace: Trace, kernel: str, names: Sequence[str], specs: Sequence[Tile],
                dims: Mapping[str, int], shared: Collection[str]) -> list[TensorArg]:
    """Declare a ``.u64`` entry parameter per tensor and make the
    :class:`TensorArg` the body receives for each.

    Args:
        trace: the trace (its params are appended to).
        kernel: the kernel's name, for an unbound dim's message.
        names: the tensor parameters, inputs then outputs.
        specs: their Tiles (empty: the kernel has none).
        dims: the bound symbolic dims.
        shared: the inputs a batched launch shares.
    """
    args = []
    for i, pname in enumerate(names):
        trace.params.append(ir.VarDecl("param", "u64", trace.new_symbol(pname)))
        spec = specs[i] if specs else None
        shape = () if spec is None else tuple(
            d if isinstance(d, int) else dims.get(d, UnboundDim(d, kernel)) for d in spec.shape)
        args.append(TensorArg(pname, spec, shape, spec.dtype if spec else None, pname in shared, i))
    return args


def param(name: str) -> Reg:
    """The value of raw scalar parameter ``name`` (declared by ``raw_params``).

    Raises:
        TraceError: the kernel declares no such raw parameter.
    """
    trace = current()
    declared: dict[str, PtxType] = trace.cache.get("raw_params", {})
    if name not in declared:
        raise TraceError(f"ptx.param({name!r}): kernel {trace.name} declares no raw param "
                         f"of that name; raw_params: {sorted(declared) or 'none'}")
    return trace.materialise(("param", name),
                             lambda: emit_instruction("ld", ("param", declared[name].name), (name,)))


def global_ptrs(*tensors: TensorArg) -> tuple[Reg, ...]:
    """Global addresses of several tensor arguments (``A.ptr`` for each)."""
    for t in tensors:
        if not isinstance(t, TensorArg):
            raise TraceError(f"ptx.global_ptrs: expected tensor arguments, got {t!r}")
    return tuple(t.ptr for t in tensors)


def batch_ptrs(*tensors: TensorArg) -> tuple[Reg, ...]:
    """The batch-element addresses of several tensors (``A.batch_ptr`` for each):
    what a ``batch="z"`` kernel indexes from."""
    for t in tensors:
        if not isinstance(t, TensorArg):
            raise TraceError(f"ptx.batch_ptrs: expected tensor arguments, got {t!r}")
    return tuple(t.batch_ptr for t in tensors)


def comment(text: str) -> None:
    """Emit ``// text`` at this point of the kernel."""
    if "\n" in text:
        raise TraceError("ptx.comment: text must be one line")
    current().append(ir.Comment(" " + text))

