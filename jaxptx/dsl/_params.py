"""Kernel parameters inside a trace: tensor arguments, raw scalar params,
TMA descriptor params, and comments."""

from __future__ import annotations

from typing import Any

from .. import ir
from ..errors import SpecError, TraceError
from ..types import PtxType
from ._core import Reg, emit_instruction
from ._specs import Tile
from ._trace import current

__all__ = ["TensorArg", "UnboundDim", "param", "global_ptrs", "comment"]


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
    """

    def __init__(self, name: str, spec: Tile | None, shape: tuple[Any, ...],
                 dtype: PtxType | None) -> None:
        self.name = name
        self.spec = spec
        self.shape = shape
        self.dtype = dtype

    def __ptx_symbol__(self) -> str:
        return self.name

    @property
    def ptr(self) -> Reg:
        """The tensor's global address in a u64 register (loaded once)."""
        trace = current()
        key = ("ptr", self.name)
        if key not in trace.cache:
            raw = emit_instruction("ld", ("param", "u64"), (self.name,))
            trace.cache[key] = emit_instruction("cvta", ("to", "global", "u64"), (raw,))
        return trace.cache[key]

    def tma_desc(self) -> Reg:
        """Address of this tensor's TMA descriptor (a ``<name>_tma`` param).

        The runtime builds the ``CUtensorMap`` from the spec's ``tma_box``
        and layout and passes its device address.
        """
        trace = current()
        key = ("tma", self.name)
        if key not in trace.cache:
            symbol = trace.new_symbol(f"{self.name}_tma")
            trace.params.append(ir.VarDecl("param", "u64", symbol))
            trace.cache[key] = emit_instruction("ld", ("param", "u64"), (symbol,))
        return trace.cache[key]

    def __repr__(self) -> str:
        return f"TensorArg({self.name!r}, shape={self.shape}, dtype={self.dtype})"


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
    key = ("param", name)
    if key not in trace.cache:
        trace.cache[key] = emit_instruction("ld", ("param", declared[name].name), (name,))
    return trace.cache[key]


def global_ptrs(*tensors: TensorArg) -> tuple[Reg, ...]:
    """Global addresses of several tensor arguments (``A.ptr`` for each)."""
    for t in tensors:
        if not isinstance(t, TensorArg):
            raise TraceError(f"ptx.global_ptrs: expected tensor arguments, got {t!r}")
    return tuple(t.ptr for t in tensors)


def comment(text: str) -> None:
    """Emit ``// text`` at this point of the kernel."""
    if "\n" in text:
        raise TraceError("ptx.comment: text must be one line")
    current().append(ir.Comment(" " + text))

