"""The custom calls of a CUDA lowering as XLA would hand them to the
``jaxptx_launch_v2`` handler: what :mod:`jaxptx.torch` launches through the
handler's call frame (``jaxptx._ffi.call_cuda_handler``), and what
:mod:`jaxptx.testing.standin` runs on the emulator."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from typing import Any

import ml_dtypes
import numpy as np

from .. import _ffi
from ..launch import Launch, launch_integers

__all__ = ["CudaCall", "cuda_calls", "XLA_DTYPES"]

# numpy dtype name -> XLA_FFI_DataType (xla/ffi/api/c_api.h): the dtype codes
# of a call frame's buffers and of a capture's.
XLA_DTYPES = {"bool": 1, "int8": 2, "int16": 3, "int32": 4, "int64": 5, "uint8": 6, "uint16": 7,
              "uint32": 8, "uint64": 9, "float16": 10, "float32": 11, "float64": 12,
              "bfloat16": 16, "float8_e5m2": 19, "float8_e4m3fn": 20}

# MLIR element type -> numpy dtype.
_MLIR_DTYPES = {"i1": np.bool_, "i8": np.int8, "i16": np.int16, "i32": np.int32, "i64": np.int64,
                "ui8": np.uint8, "ui16": np.uint16, "ui32": np.uint32, "ui64": np.uint64,
                "f16": np.float16, "f32": np.float32, "f64": np.float64,
                "bf16": ml_dtypes.bfloat16, "f8E5M2": ml_dtypes.float8_e5m2,
                "f8E4M3FN": ml_dtypes.float8_e4m3fn}


@dataclasses.dataclass(frozen=True)
class CudaCall:
    """One ``jaxptx_launch_v2`` custom call, as XLA would hand it to the
    handler: its attributes ``(name, kind, value)`` (kind ``"i64"``,
    ``"str"``, ``"i32[]"``, ``"i64[]"`` or ``"dict"``; the value an int,
    bytes, a tuple of ints, or for a dictionary (the ``launch``) a tuple of
    such triples), the ``(shape, dtype)`` of each input and output, and the
    in-place outputs as ``(output, input)`` pairs.

    ``call["launch"]`` is the launch dictionary as ``{member: value}``;
    :attr:`launch` the :class:`~jaxptx.launch.Launch` it describes."""

    attributes: tuple[tuple[str, str, Any], ...]
    inputs: tuple[tuple[tuple[int, ...], np.dtype], ...]
    outputs: tuple[tuple[tuple[int, ...], np.dtype], ...]
    aliases: tuple[tuple[int, int], ...] = ()

    def __getitem__(self, name: str) -> Any:
        for n, kind, value in self.attributes:
            if n == name:
                return {m: v for m, _, v in value} if kind == "dict" else value
        raise KeyError(name)

    @property
    def launch(self) -> Launch:
        """The launch the ``launch`` attribute describes (validated)."""
        return Launch.from_attributes(**self["launch"], where="launch attribute")

    def replace(self, *, inputs: Sequence | None = None, outputs: Sequence | None = None,
                rehash: bool = True, **attributes: Any) -> CudaCall:
        """The call with other buffers or attribute values; with ``rehash``
        (unless ``kernel_id`` is given) its kernel id is derived again from
        the new content, as a lowering would, so the handler's id check
        passes and what follows it is tested.

        A dictionary attribute takes a mapping of the members to change (a
        value of None removes one; a new member's kind comes from its value,
        or give ``(kind, value)``), or a :class:`~jaxptx.launch.Launch` for
        ``launch``. Rehashing needs a launch the id can be derived from: one
        with the four members, each of 3 ints (or smem an int); otherwise
        give ``rehash=False``.
        """
        kinds = {n: k for n, k, _ in self.attributes}
        unknown = set(attributes) - set(kinds)
        if unknown:
            raise KeyError(f"no attribute {sorted(unknown)}")
        attrs = tuple((n, k, _canonical(k, attributes[n], v) if n in attributes else v)
                      for n, k, v in self.attributes)
        call = dataclasses.replace(self, attributes=attrs,
                                   inputs=self.inputs if inputs is None else tuple(inputs),
                                   outputs=self.outputs if outputs is None else tuple(outputs))
        if rehash and "kernel_id" not in attributes:
            return call.replace(kernel_id=call.content_id(), rehash=False)
        return call

    def content_id(self) -> int:
        """The id the handler derives from this call's content."""
        nbytes = [int(np.prod(s, dtype=np.int64)) * np.dtype(d).itemsize
                  for s, d in self.inputs + self.outputs]
        members = self["launch"]
        launch = launch_integers(_Members(**{m: members[m] for m in _LAUNCH_MEMBERS}),
                                 nbytes[:len(self.inputs)], nbytes[len(self.inputs):], self["tma"])
        return _ffi.content_id(self["ptx"], self["entry"].decode(), launch)


_LAUNCH_MEMBERS = ("grid", "block", "cluster", "smem")


@dataclasses.dataclass(frozen=True)
class _Members:
    """A launch's members as given, unvalidated (an edited call's id is
    derived as a lowering would derive it, whatever its values)."""

    grid: tuple[int, ...]
    block: tuple[int, ...]
    cluster: tuple[int, ...]
    smem: int


def _canonical(kind: str, value: Any, old: Any = None) -> Any:
    if kind == "i64":
        return int(value)
    if kind == "str":
        return value.encode() if isinstance(value, str) else bytes(value)
    if kind == "dict":
        if isinstance(value, Launch):
            value = value.attributes()
        if not isinstance(value, Mapping):
            raise TypeError(f"a dictionary attribute takes a mapping of its members, got {value!r}")
        members = {m: (k, v) for m, k, v in old or ()}
        for m, v in value.items():
            if v is None:
                members.pop(m, None)
                continue
            k, v = v if isinstance(v, tuple) and len(v) == 2 and isinstance(v[0], str) else \
                (members[m][0] if m in members else _kind_of(v), v)
            members[m] = (k, _canonical(k, v))
        return tuple((m, k, v) for m, (k, v) in sorted(members.items()))
    return tuple(int(v) for v in np.asarray(value).reshape(-1))


def _kind_of(value: Any) -> str:
    if isinstance(value, (int, np.integer)):
        return "i64"
    if isinstance(value, (str, bytes)):
        return "str"
    if isinstance(value, Mapping):
        return "dict"
    return "i64[]" if np.asarray(value).dtype == np.int64 else "i32[]"


def cuda_calls(lowered: Any) -> list[CudaCall]:
    """The ``jaxptx_launch_v2`` custom calls of a function lowered for CUDA
    (``jax.jit(f).trace(...).lower(lowering_platforms=("cuda",))``), read
    from its StableHLO as XLA reads them."""
    from jax.interpreters.mlir import ir

    def walk(op: Any):
        for region in op.regions:
            for block in region.blocks:
                for inner in block.operations:
                    yield inner
                    yield from walk(inner)

    label = _ffi.target_names()[1]  # the CUDA handler's versioned name
    calls = []
    for op in walk(lowered.compiler_ir("stablehlo").operation):
        if op.name != "stablehlo.custom_call" or \
                ir.StringAttr(op.attributes["call_target_name"]).value.split(" ")[0] != label:
            continue
        attributes = []
        for named in ir.DictAttr(op.attributes["mhlo.backend_config"]):
            attributes.append((named.name, *_attribute(named.attr)))
        aliases = []
        if "output_operand_aliases" in op.attributes:
            for text in re.findall(r"output_tuple_indices = \[(\d*)\], operand_index = (\d+)",
                                   str(op.attributes["output_operand_aliases"])):
                aliases.append((int(text[0] or 0), int(text[1])))
        calls.append(CudaCall(tuple(attributes), tuple(_buffer_type(v.type) for v in op.operands),
                              tuple(_buffer_type(r.type) for r in op.results), tuple(aliases)))
    return calls


def _attribute(attr: Any) -> tuple[str, Any]:
    from jax.interpreters.mlir import ir
    if isinstance(attr, ir.IntegerAttr):
        return "i64", int(attr.value)
    if isinstance(attr, ir.StringAttr):
        return "str", bytes(attr.value_bytes)
    if isinstance(attr, ir.DictAttr):
        return "dict", tuple(sorted((n.name, *_attribute(n.attr)) for n in attr))
    if isinstance(attr, ir.DenseIntElementsAttr):
        width = ir.IntegerType(ir.ShapedType(attr.type).element_type).width
        count = int(np.prod(ir.ShapedType(attr.type).shape, dtype=np.int64))
        values = [int(attr[0])] * count if attr.is_splat else [int(v) for v in attr]
        return f"i{width}[]", tuple(values)
    raise TypeError(f"cuda_calls: an attribute XLA would not pass to a typed FFI handler: {attr}")


def _buffer_type(t: Any) -> tuple[tuple[int, ...], np.dtype]:
    from jax.interpreters.mlir import ir
    shaped = ir.RankedTensorType(t)
    return tuple(shaped.shape), np.dtype(_MLIR_DTYPES[str(shaped.element_type)])
