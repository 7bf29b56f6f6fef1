"""Raw PTX for :func:`jaxptx.jax.ptx_call`: its entry, its parameters, and the arguments bound to them.

The text is parsed and checked once (:func:`parsed`): PTX that does not
parse is a ``ParseError``, PTX that ``jaxptx.check`` finds ptxas would
reject is a ``PrecheckError``, each naming its line, when the call is
traced rather than when it runs. :func:`bind` matches the call's arguments
to the entry's ``.param`` list, in order, and says what the custom call
carries.

The shim passes a launch's parameters in one order: the buffer pointers
(inputs, then outputs), the scalar values, then the tensor maps. A PTX
entry may declare them in any order, so the call carries the PTX with the
entry's parameter list reordered into that one (kernels read parameters by
name, never by position, so the body is unchanged), with an unused
``.u64`` parameter for each buffer that has none (the zeros that start a
zeroed output, a tensor only a TensorMap reads). The header keeps its line
breaks and comments, so the carried PTX has the same line numbers as the
user's; PTX already in launch order travels as it came.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .. import ir
from ..dsl import TmaDescriptor, static_shared_bytes
from ..errors import SpecError
from ..types import TYPES, from_dtype
from . import _tma
from ._primitive import scalar_value
from ._ptx_args import Output, Scratch, TensorMap
from ._ptx_text import carried_ptx, entry_function, parsed

__all__ = ["Binding", "parsed", "entry_function", "bind", "carried_ptx"]   # the last three: ._ptx_text's

# Types of a parameter that may hold a device pointer (8 bytes).
POINTER_TYPES = frozenset(["u64", "b64", "s64"])
# A CUtensorMap passed by value.
TENSOR_MAP_BYTES = 128
_SM = re.compile(r"^sm_\d+[af]?$")

BufferType = tuple[tuple[int, ...], np.dtype]


def _ptx_type(p: ir.VarDecl) -> str:
    dims = "".join(f"[{d}]" if d >= 0 else "[]" for d in p.dims)
    vector = f".v{p.vector}" if p.vector else ""
    return f"{vector}.{p.type}{dims}"


def _kind(p: ir.VarDecl) -> str:
    """``pointer`` (8 bytes: a buffer, or a 64-bit number), ``tensor_map``,
    ``scalar`` or ``other`` (what ptx_call cannot fill)."""
    if p.vector:
        return "other"
    if p.dims:
        return "tensor_map" if p.type == "b8" and p.dims == (TENSOR_MAP_BYTES,) else "other"
    if p.type in POINTER_TYPES:
        return "pointer"
    t = TYPES.get(p.type)
    return "scalar" if t is not None and t.lanes == 1 and t.bits in (8, 16, 32, 64) else "other"


def is_array(a: Any) -> bool:
    """An array argument (numpy, JAX, a tracer): it has a shape and a dtype
    and is not a numpy scalar."""
    return hasattr(a, "shape") and hasattr(a, "dtype") and not isinstance(a, np.generic)


def _is_number(a: Any) -> bool:
    return isinstance(a, (bool, int, float, np.number, np.bool_))


def buffer_type(a: Any) -> BufferType:
    """``(shape, numpy dtype)`` of an array or ``ShapeDtypeStruct``."""
    return tuple(int(d) for d in a.shape), np.dtype(a.dtype)


def _shown(t: BufferType) -> str:
    shape, dtype = t
    return f"an array {dtype}{list(shape)}"


def _came(a: Any) -> str:
    """What an argument is, for messages."""
    if is_array(a):
        return _shown(buffer_type(a))
    if isinstance(a, (Output, Scratch, TensorMap)):
        return repr(a)
    if _is_number(a):
        module = "" if type(a).__module__ == "builtins" else type(a).__module__ + "."
        return f"the {module}{type(a).__name__} {a!r}"
    return f"a {type(a).__name__}"


@dataclasses.dataclass(frozen=True)
class Binding:
    """How one call's arguments fill its entry's parameters.

    Attributes:
        entry: the ``.entry`` name.
        ptx: the PTX the call carries (parameters in launch order).
        target: the module's ``.target`` (``"sm_90a"``).
        static_smem: bytes of the module's static shared memory.
        operands: per input buffer, the index of the argument it comes from
            (an array, or a TensorMap's array).
        zeros: per zero-filled input (after the operands), the output it
            starts (outputs of ``out_shape``, then the Scratch buffers).
        scratch: the byte size of each Scratch buffer.
        aliases: ``(input buffer, output)`` pairs of ``input_output_aliases``.
        scalars: a ``(bytes, bits)`` pair per scalar parameter, in order.
        tma: the tensor maps' descriptors (buffer indices: inputs, zeros,
            outputs).
        names: a name per buffer (inputs, zeros, outputs), for messages.
    """

    entry: str
    ptx: str
    target: str
    static_smem: int
    operands: tuple[int, ...]
    zeros: tuple[int, ...]
    scratch: tuple[int, ...]
    aliases: tuple[tuple[int, int], ...]
    scalars: tuple[int, ...]
    tma: tuple[TmaDescriptor, ...]
    names: tuple[str, ...]


class _Params:
    """What the arguments gave each kind of parameter, as :func:`bind` walks them."""

    def __init__(self, where: str, n_out: int) -> None:
        self.where, self.n_out = where, n_out
        self.inputs: list[tuple[int, str | None]] = []       # (argument, pointer param)
        self.outputs: dict[int, str] = {}
        self.scratch: list[tuple[int, str]] = []             # (bytes, param)
        self.scalars: list[tuple[str, int, int]] = []        # (param, bytes, bits)
        self.maps: list[tuple[str, int, TensorMap]] = []     # (param, argument, map)

    def output(self, j: int, what: str) -> None:
        if j >= self.n_out:
            raise SpecError(f"{what}: Output({j}), but out_shape has {self.n_out} output(s)")
        if j in self.outputs:
            raise SpecError(f"{what}: Output({j}) is already param {self.outputs[j]}; each "
                            "output's pointer goes to one parameter")


def bind(text: str, kernel: str | None, args: Sequence[Any], outs: Sequence[BufferType],
         aliases: Mapping[int, int] | None, zeroed: Sequence[int]) -> Binding:
    """Match ``args`` (and the outputs ``outs``) to the entry's parameters.

    Raises:
        ParseError, PrecheckError: see :func:`parsed`.
        SpecError: an argument that does not fit its parameter, a count
            mismatch, or bad aliases or zeroed outputs; naming the
            parameter (index, name, PTX type) and what came.
    """
    module = parsed(text)
    f = entry_function(module, kernel)
    where = f"ptx_call {f.name}"
    explicit = any(isinstance(a, Output) for a in args)
    full = list(args) if explicit else [*args, *map(Output, range(len(outs)))]
    if not explicit and len(full) != len(f.params) and aliases:
        # An in-place kernel has no parameter for an output that is its input's buffer.
        fresh = [Output(j) for j in range(len(outs)) if j not in dict(aliases).values()]
        if len(args) + len(fresh) == len(f.params):
            full = [*args, *fresh]
    if len(full) != len(f.params):
        raise SpecError(_count_message(where, f, args, len(outs), explicit))
    got = _Params(where, len(outs))
    for k, (p, a) in enumerate(zip(f.params, full)):
        _bind_one(got, k, p, a)
    alias_pairs, zeros = _aliases(where, args, got, outs, aliases, zeroed)
    return _binding(text, module, f, got, alias_pairs, zeros, outs, args)


def _bind_one(got: _Params, k: int, p: ir.VarDecl, a: Any) -> None:
    """Check argument ``a`` against parameter ``k`` and record it."""
    kind = _kind(p)
    what = f"{got.where}: param {k} {p.name} ({_ptx_type(p)})"
    if kind == "other":
        raise SpecError(f"{what}: ptx_call cannot fill this parameter; it passes pointers "
                        f"(.u64/.b64/.s64), numbers of 1 to 8 bytes and 128-byte tensor maps "
                        f"(.b8 {p.name}[128]); got {_came(a)}")
    if isinstance(a, TensorMap):
        if kind != "tensor_map":
            raise SpecError(f"{what}: got {a!r}, but a TensorMap fills a 128-byte by-value "
                            f"parameter (.param .align 64 .b8 {p.name}[128])")
        if isinstance(a.tensor, Output) and a.tensor.index >= got.n_out:
            raise SpecError(f"{what}: {a!r}, but out_shape has {got.n_out} output(s)")
        got.maps.append((p.name, k, a))
        if not isinstance(a.tensor, Output):
            got.inputs.append((k, None))
        return
    if kind == "tensor_map":
        raise SpecError(f"{what}: a 128-byte tensor map passed by value; expected "
                        f"jaxptx.jax.TensorMap(array, box=...), got {_came(a)}")
    if isinstance(a, (Output, Scratch)) or is_array(a):
        if kind != "pointer":
            raise SpecError(f"{what}: expected a .{p.type} value (a Python or numpy number: scalar "
                            f"parameters are static), got {_came(a)}")
        if isinstance(a, Output):
            got.output(a.index, what)
            got.outputs[a.index] = p.name
        elif isinstance(a, Scratch):
            got.scratch.append((a.nbytes, p.name))
        else:
            got.inputs.append((k, p.name))
        return
    if not _is_number(a):
        raise SpecError(f"{what}: expected an array, a number, Output(i), Scratch(nbytes) or "
                        f"TensorMap(...), got {_came(a)}")
    if kind == "pointer" and not isinstance(a, np.integer):
        raise SpecError(f"{what}: a 64-bit parameter, the size of a pointer, got {_came(a)}; "
                        f"pass an array for a pointer, or a numpy integer (np.uint64({a!r}) or "
                        f"np.int64({a!r})) for a 64-bit value")
    got.scalars.append((p.name, *_scalar_bits(p, a, what)))


def _scalar_bits(p: ir.VarDecl, value: Any, what: str) -> tuple[int, int]:
    """``(bytes, bits)`` of a static value for parameter ``p``: the value's
    bits, little-endian in the low bytes (the shim's ``scalars`` record)."""
    ptype = TYPES[p.type]
    number = scalar_value(ptype, value, what.rsplit(" (", 1)[0])
    if ptype.kind != "f":
        return ptype.bits // 8, int(number) & ((1 << ptype.bits) - 1)
    with np.errstate(over="ignore"):
        encoded = np.array(number, dtype=ptype.np_dtype)
    if np.isfinite(number) and not np.isfinite(encoded.astype(np.float64)):
        raise SpecError(f"{what}: {number!r} is outside the range of .{ptype.name}")
    return ptype.bits // 8, int.from_bytes(encoded.tobytes(), "little")


def _aliases(where: str, args: Sequence[Any], got: _Params, outs: Sequence[BufferType],
             aliases: Mapping[int, int] | None, zeroed: Sequence[int]
             ) -> tuple[list[tuple[int, int]], list[int]]:
    """``(input buffer, output)`` pairs of ``input_output_aliases`` (keys are
    argument positions) and the outputs that start as zeros."""
    operand = {k: i for i, (k, _) in enumerate(got.inputs)}
    pairs, taken = [], {}
    for i, j in dict(aliases or {}).items():
        what = f"{where}: input_output_aliases {{{i}: {j}}}"
        if not isinstance(i, int) or not 0 <= i < len(args) or not is_array(args[i]) or \
                i not in operand:
            raise SpecError(f"{what}: a key is the position of an array argument "
                            f"(0..{len(args) - 1}); argument {i} is "
                            f"{_came(args[i]) if isinstance(i, int) and 0 <= i < len(args) else 'absent'}")
        if not isinstance(j, int) or not 0 <= j < len(outs):
            raise SpecError(f"{what}: a value is an output index (0..{len(outs) - 1})")
        if j in taken:
            raise SpecError(f"{what}: output {j} is already aliased to argument {taken[j]}")
        if buffer_type(args[i]) != outs[j]:
            raise SpecError(f"{what}: argument {i} is {_shown(buffer_type(args[i]))} but output "
                            f"{j} is {_shown(outs[j])}; an aliased output has its input's "
                            "shape and dtype")
        taken[j] = i
        pairs.append((operand[i], j))
    zeros = []
    for j in zeroed:
        if not isinstance(j, int) or not 0 <= j < len(outs) or j in zeros:
            raise SpecError(f"{where}: zeroed_outputs: expected distinct output indices "
                            f"(0..{len(outs) - 1}), got {tuple(zeroed)!r}")
        if j in taken:
            raise SpecError(f"{where}: zeroed_outputs: output {j} is aliased to argument "
                            f"{taken[j]} (it starts as that input), so it cannot start as zeros")
        zeros.append(j)
    maps_out = {m.tensor.index for _, _, m in got.maps if isinstance(m.tensor, Output)}
    for j in range(len(outs)):
        if j not in got.outputs and j not in taken and j not in zeros and j not in maps_out:
            raise SpecError(f"{where}: output {j} ({_shown(outs[j])}) has no parameter, so the "
                            f"kernel could never write it; pass Output({j}) where its pointer goes")
    return pairs, zeros


def _binding(text: str, module: ir.Module, f: ir.Function, got: _Params,
             pairs: list[tuple[int, int]], zeroed: list[int], outs: Sequence[BufferType],
             args: Sequence[Any]) -> Binding:
    """The binding's buffers (inputs, zeros, outputs) and the parameter order."""
    n_out = len(outs)
    zeros = [*zeroed, *range(n_out, n_out + len(got.scratch))]
    n_in = len(got.inputs) + len(zeros)
    buffer_params = ([p for _, p in got.inputs] + [None] * len(zeros)
                     + [got.outputs.get(j) for j in range(n_out)] + [p for _, p in got.scratch])
    names = ([p or f"the tensor of TensorMap {_map_of(got, k)}" for k, p in got.inputs]
             + [f"zeros for output {j}" for j in zeros]
             + [got.outputs.get(j) or f"output {j}" for j in range(n_out)]
             + [p for _, p in got.scratch])
    index = {p.name: i for i, p in enumerate(f.params)}
    order = tuple([index[p] if p is not None else None for p in buffer_params]
                  + [index[p] for p, _, _ in got.scalars] + [index[p] for p, _, _ in got.maps])
    types = ([buffer_type(_tensor(args[k])) for k, _ in got.inputs]
             + [outs[j] if j < n_out else _scratch_type(got, j - n_out) for j in zeros]
             + list(outs) + [_scratch_type(got, s) for s in range(len(got.scratch))])
    operand = {k: i for i, (k, _) in enumerate(got.inputs)}
    tma = tuple(_descriptor(got.where, p, operand[k] if not isinstance(m.tensor, Output)
                            else n_in + m.tensor.index, types, m) for p, k, m in got.maps)
    _tma.records(tma, f.name, types)   # the driver's rules, checked at trace time
    target = next((t for t in module.target if _SM.match(t)), None)
    return Binding(f.name, carried_ptx(text, f.name, order), target or "sm_90a",
                   static_shared_bytes(module), tuple(k for k, _ in got.inputs), tuple(zeros),
                   tuple(n for n, _ in got.scratch), tuple(pairs),
                   tuple(v for _, nbytes, bits in got.scalars for v in (nbytes, bits)), tma,
                   tuple(names))


def _tensor(a: Any) -> Any:
    return a.tensor if isinstance(a, TensorMap) else a


def _map_of(got: _Params, k: int) -> str:
    return next(p for p, arg, _ in got.maps if arg == k)


def _scratch_type(got: _Params, s: int) -> BufferType:
    return (got.scratch[s][0],), np.dtype(np.uint8)


def _descriptor(where: str, param: str, tensor: int, types: Sequence[BufferType],
                m: TensorMap) -> TmaDescriptor:
    """A TensorMap as the descriptor of a whole dense row-major tensor."""
    shape, dtype = types[tensor]
    what = f"{where}: TensorMap {param}"
    if len(m.box) != len(shape):
        raise SpecError(f"{what}: box {m.box} has {len(m.box)} dims, the tensor "
                        f"{_shown(types[tensor])} has {len(shape)}")
    try:
        t = from_dtype(dtype)
    except TypeError:
        t = None
    if t is None or t.bits < 8 or t.lanes != 1:
        raise SpecError(f"{what}: TMA copies elements of 8 bits or more, got {dtype}")
    strides = [dtype.itemsize] * len(shape)
    for k in range(len(shape) - 2, -1, -1):
        strides[k] = strides[k + 1] * shape[k + 1]
    return TmaDescriptor(param, tensor, t.name, tuple(shape), tuple(strides), m.box, m.swizzle)


def _count_message(where: str, f: ir.Function, args: Sequence[Any], n_out: int,
                   explicit: bool) -> str:
    declared = ", ".join(f"{p.name} ({_ptx_type(p)})" for p in f.params) or "none"
    came = f"{len(args)} argument(s)"
    if not explicit:
        came += (f" and {n_out} output pointer(s) after them (no argument is an Output, so the "
                 f"outputs follow the arguments; mark where they go with Output(i))")
    return (f"{where}: the entry declares {len(f.params)} parameter(s) ({declared}), but the "
            f"call passes {came}: {len(args) + (0 if explicit else n_out)} in all")
