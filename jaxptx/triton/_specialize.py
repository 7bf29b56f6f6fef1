"""What Triton compiles a kernel for: the signature, constexprs and attributes of one call.

Triton's launcher specialises each call on its arguments before compiling
(Triton 3.9, ``native_specialize_impl``), and :func:`specialize` applies the
same rules to what :func:`~jaxptx.triton.triton_call` passes:

* an array is a pointer ``*<type>`` (``*k<type>`` for a ``const``-annotated
  parameter), assumed 16-byte aligned (XLA's buffers are), so it carries
  ``tt.divisibility = 16``;
* a Python int equal to 1 becomes a constexpr (the kernel has no parameter
  for it); other ints are ``i32`` (``-2**31 <= v < 2**31``), ``u64``
  (``2**63 <= v < 2**64``) or ``i64``, with ``tt.divisibility = 16`` when
  the value is a multiple of 16;
* a Python float is ``fp32``, a bool ``u1``, neither specialised; ``None``
  is a constexpr;
* a numpy scalar keeps its own type (Triton itself refuses them), and a
  numpy integer that is a multiple of 16 gets the divisibility attribute;
* a parameter annotated with a type (``n: tl.int64``) keeps that type, and
  ``do_not_specialize`` / ``do_not_specialize_on_alignment`` turn the value
  rules off, as in Triton.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import SpecError

__all__ = ["TRITON_TYPES", "Spec", "specialize", "scalar_key", "pointer_type"]

# numpy dtype name -> Triton's type name (triton.language's canonical names).
TRITON_TYPES = {
    "bool": "i1", "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64",
    "uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64",
    "float16": "fp16", "bfloat16": "bf16", "float32": "fp32", "float64": "fp64",
    "float8_e4m3fn": "fp8e4nv", "float8_e5m2": "fp8e5", "float8_e4m3fnuz": "fp8e4b8",
    "float8_e5m2fnuz": "fp8e5b16",
}
DIVISIBILITY = [["tt.divisibility", 16]]


@dataclasses.dataclass(frozen=True)
class Spec:
    """One specialisation of a kernel: what ``triton.compile`` takes.

    Attributes:
        signature: ``(name, type)`` per parameter, in order: ``"*fp32"``,
            ``"i32"``, ``"constexpr"``.
        constexprs: ``(name, value)`` per constexpr (the kernel's
            ``tl.constexpr`` parameters, ints equal to 1, ``None``).
        divisible: positions of the parameters known to be multiples of 16.
    """

    signature: tuple[tuple[str, str], ...]
    constexprs: tuple[tuple[str, Any], ...]
    divisible: tuple[int, ...]

    def attrs(self) -> dict[tuple[int, ...], list[list[Any]]]:
        """``ASTSource``'s ``attrs``: the divisibility hint per position."""
        return {(i,): DIVISIBILITY for i in self.divisible}


def pointer_type(dtype: Any, where: str, const: bool = False) -> str:
    """``*fp32`` for a float32 buffer (``*kfp32`` for a const parameter).

    Raises:
        SpecError: a dtype Triton has no type for.
    """
    name = np.dtype(dtype).name
    if name not in TRITON_TYPES:
        raise SpecError(f"{where}: expected an array of a type Triton knows "
                        f"({', '.join(TRITON_TYPES)}), got {name}")
    return ("*k" if const else "*") + TRITON_TYPES[name]


def _int_type(value: int, where: str) -> str:
    if -(1 << 31) <= value < (1 << 31):
        return "i32"
    if -(1 << 63) <= value < (1 << 63):
        return "i64"
    if (1 << 63) <= value < (1 << 64):
        return "u64"
    raise SpecError(f"{where}: {value} fits no Triton integer type (-2**63 .. 2**64 - 1)")


def scalar_key(value: Any, where: str, *, specialize: bool = True,
               align: bool = True) -> tuple[str, Any]:
    """Triton's ``(type, specialisation)`` of a scalar argument.

    The specialisation is ``"D"`` (a multiple of 16), ``""`` (none) or
    ``None`` (not specialised: floats, bools, ``do_not_specialize``); the
    type ``"constexpr"`` means the value is compiled in: ``("constexpr", 1)``
    for the int 1, ``("constexpr", None)`` for None.

    Raises:
        SpecError: a value that is no number, or an int too wide.
    """
    if value is None:
        return "constexpr", None
    if isinstance(value, (bool, np.bool_)):
        return "u1", None
    if isinstance(value, int):
        if specialize and value == 1:
            return "constexpr", 1
        kind = _int_type(value, where)
        if not specialize:
            return kind, None
        return kind, "D" if align and value % 16 == 0 else ""
    if isinstance(value, float):
        return "fp32", None
    if isinstance(value, np.generic) and value.dtype.name in TRITON_TYPES:
        kind = TRITON_TYPES[value.dtype.name]
        if isinstance(value, np.integer) and specialize:
            return kind, "D" if align and int(value) % 16 == 0 else ""
        return kind, None
    raise SpecError(f"{where}: expected an array, a Python or numpy number, None or a "
                    f"jaxptx.triton.TensorDescriptor, got {type(value).__name__} {value!r:.60}")


def specialize(params: Sequence[Any], values: Mapping[str, Any], kinds: Mapping[str, str],
               where: str) -> Spec:
    """The specialisation of a call.

    Args:
        params: the kernel's ``triton.runtime.jit.KernelParam`` list.
        values: per parameter name, the scalar value or the constexpr value
            (arrays, outputs and descriptors are in ``kinds`` instead).
        kinds: per buffer or descriptor parameter, its Triton type
            (``"*fp32"``, ``"tensordesc<fp16[64, 64]>"``).
        where: the call, for messages.
    """
    signature, constexprs, divisible = [], [], []
    for i, p in enumerate(params):
        what = f"{where}: param {p.name}"
        if p.is_constexpr:
            signature.append((p.name, "constexpr"))
            constexprs.append((p.name, values[p.name]))
            continue
        if p.name in kinds:
            kind = kinds[p.name]
            if kind.startswith("*") and p.is_const and not kind.startswith("*k"):
                kind = "*k" + kind[1:]
            signature.append((p.name, kind))
            if kind.startswith("*") and not p.do_not_specialize_on_alignment:
                divisible.append(i)
            continue
        value = values[p.name]
        kind, key = scalar_key(value, what, specialize=not p.do_not_specialize,
                               align=not p.do_not_specialize_on_alignment)
        annotated = _annotation(p)
        if annotated and kind != "constexpr":
            kind, key = annotated, (None if annotated == "u1" or annotated[:2] in ("fp", "bf")
                                    else key)
        elif annotated and value is not None:          # Triton keeps the annotated type for 1
            kind, key = annotated, ""
        signature.append((p.name, kind))
        if kind == "constexpr":
            constexprs.append((p.name, value))
        elif key == "D":
            divisible.append(i)
    return Spec(tuple(signature), tuple(constexprs), tuple(divisible))


def _annotation(p: Any) -> str:
    """The type a parameter is annotated with (``n: tl.int64``), or ``""``."""
    kind = getattr(p, "annotation_type", "")
    return kind if isinstance(kind, str) and not kind.startswith("*") else ""
