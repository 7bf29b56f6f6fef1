"""The 32-bit instruction descriptor of ``tcgen05.mma`` (PTX ISA 9.7.16.4.2,
"Instruction descriptor", Tables 42-44) and the shapes it may give (Table 39,
"Various combinations of .kind and shapes").

:func:`decode_idesc` turns one descriptor word into an :class:`InstrDesc`,
refusing every field value the ISA does not define for the instruction's
``.kind`` (a reserved bit set, a type code of another kind, an M or N the
kind and CTA group do not take) with a :class:`~..errors.SimError` that names
the field, what was expected and what came.
"""

from __future__ import annotations

import dataclasses

from ..errors import SimError

__all__ = ["InstrDesc", "decode_idesc", "BLOCK_SCALED", "element_bits"]

# Table 42: atype/btype codes per kind.
_F8F6F4 = {0: "e4m3", 1: "e5m2", 3: "e2m3", 4: "e3m2", 5: "e2m1"}
_TYPES = {
    "kind::f16": {0: "f16", 1: "bf16"},
    "kind::tf32": {2: "tf32"},
    "kind::f8f6f4": _F8F6F4,
    "kind::i8": {0: "u8", 1: "s8"},
    "kind::mxf8f6f4": _F8F6F4,
    "kind::mxf4": {1: "e2m1"},
    "kind::mxf4nvf4": {1: "e2m1"},
}
# dtype codes (bits 4-5) each kind allows.
_DTYPES = {"kind::f16": {0: "f16", 1: "f32"}, "kind::tf32": {1: "f32"},
           "kind::f8f6f4": {0: "f16", 1: "f32"}, "kind::i8": {2: "s32"}}
# Dense K per kind (Table 39); sparse A doubles it.
_K = {"kind::f16": 16, "kind::tf32": 8, "kind::f8f6f4": 32, "kind::i8": 32,
      "kind::mxf8f6f4": 32, "kind::mxf4": 64, "kind::mxf4nvf4": 64}
BLOCK_SCALED = ("kind::mxf8f6f4", "kind::mxf4", "kind::mxf4nvf4")
"""The kinds whose descriptor has the block-scaled layout (Tables 43-44)."""

_ELEMENT_BITS = {"f16": 16, "bf16": 16, "tf32": 32, "e4m3": 8, "e5m2": 8, "e2m3": 6, "e3m2": 6,
                 "e2m1": 4, "u8": 8, "s8": 8}


def element_bits(type_name: str) -> int:
    """Width in bits of one A/B element of ``type_name`` (its own width, not its container's)."""
    return _ELEMENT_BITS[type_name]


@dataclasses.dataclass(frozen=True)
class InstrDesc:
    """The fields of one instruction descriptor.

    Attributes:
        kind: the instruction's ``.kind`` modifier (``kind::f16``...).
        m, n, k: the MMA shape (K implied by the kind and sparsity).
        atype, btype: element types of A and B (``f16``, ``e2m1``, ``s8``...).
        dtype: type of D (``f16``/``f32``/``s32``).
        negate_a, negate_b: the negate bits (13, 14).
        mn_major_a, mn_major_b: the transpose bits (15, 16): MN-major when set.
        saturate: ``.kind::i8`` only: clamp D to the s32 range.
        sparse: the sparsity bit (2); ``sparsity_selector`` bits 0-1.
        max_shift: bits 30-31 of the non-scaled kinds (``.ws`` B reuse): 0, 8, 16 or 32.
        scale_type: block-scaled kinds: ``ue8m0`` or ``ue4m3`` (bit 23).
        sfa_id, sfb_id: block-scaled kinds: scale-factor data IDs (bits 29-30, 4-5).
    """

    kind: str
    m: int
    n: int
    k: int
    atype: str
    btype: str
    dtype: str
    negate_a: bool
    negate_b: bool
    mn_major_a: bool
    mn_major_b: bool
    saturate: bool = False
    sparse: bool = False
    sparsity_selector: int = 0
    max_shift: int = 0
    scale_type: str | None = None
    sfa_id: int = 0
    sfb_id: int = 0


def _bits(word: int, lo: int, count: int) -> int:
    return (word >> lo) & ((1 << count) - 1)


def decode_idesc(word: int, kind: str, *, cta_group: int, ws: bool, what: str) -> InstrDesc:
    """Decode and check instruction descriptor ``word`` of a ``tcgen05.mma``
    of ``.kind`` ``kind`` (``cta_group`` 1 or 2, ``ws`` for ``.ws``).

    Raises:
        SimError: a field holds a value the ISA does not define for this
            instruction; ``what`` (the instruction's name) starts the message.
    """
    word = int(word) & 0xFFFF_FFFF

    def bad(field: str, expected: str, got: int) -> SimError:
        return SimError(f"{what}: instruction descriptor {word:#010x}: {field} must be {expected} "
                        f"for .{kind}, got {got} (PTX ISA 'Instruction descriptor')")

    codes = _TYPES[kind]
    scaled = kind in BLOCK_SCALED
    reserved = (6, 12, 24, 25, 26, 31) if kind in ("kind::mxf4", "kind::mxf4nvf4") else \
        (0, 1, 3, 6, 24, 25, 26, 31) if scaled else (6, 23, 29)
    if kind in ("kind::mxf4", "kind::mxf4nvf4") and _bits(word, 0, 2):
        raise bad("bits 0-1 (reserved)", "0", _bits(word, 0, 2))
    for bit in reserved:
        if bit == 31 and kind in ("kind::mxf4", "kind::mxf4nvf4") and _bits(word, 31, 1):
            raise SimError(f"{what}: instruction descriptor {word:#010x} sets bit 31 (K = 96), which only "
                           "sm_103a runs; the emulator runs sm_100a forms (K = 64)")
        if _bits(word, bit, 1):
            raise bad(f"bit {bit} (reserved)", "0", 1)
    a_code = _bits(word, 7, 3)
    b_code = _bits(word, 10, 2 if kind in ("kind::mxf4", "kind::mxf4nvf4") else 3)
    allowed = "/".join(f"{c} ({t})" for c, t in codes.items())
    if a_code not in codes:
        raise bad("atype (bits 7-9)", allowed, a_code)
    if b_code not in codes:
        raise bad("btype (bits 10-12)", allowed, b_code)
    atype, btype = codes[a_code], codes[b_code]
    if kind == "kind::f16" and atype != btype:
        raise SimError(f"{what}: instruction descriptor {word:#010x}: .kind::f16 needs A and B of one type, "
                       f"got {atype} and {btype}")
    sparse = bool(_bits(word, 2, 1))
    neg_a, neg_b = bool(_bits(word, 13, 1)), bool(_bits(word, 14, 1))
    if kind == "kind::i8" and (neg_a or neg_b):
        raise bad("negate A/B (bits 13-14)", "0", _bits(word, 13, 2))
    mn_a, mn_b = bool(_bits(word, 15, 1)), bool(_bits(word, 16, 1))
    if kind in ("kind::mxf4", "kind::mxf4nvf4") and (mn_a or mn_b):
        raise bad("transpose A/B (bits 15-16)", "0 (no transpose for 4-bit packed kinds)", _bits(word, 15, 2))
    n = _bits(word, 17, 6) << 3
    m = _bits(word, 24, 5) << 4
    fields: dict = {}
    if scaled:
        scale = "ue8m0" if _bits(word, 23, 1) else "ue4m3"
        if scale == "ue4m3" and kind != "kind::mxf4nvf4":
            raise bad("scale type (bit 23)", "1 (ue8m0)", 0)
        fields = dict(scale_type=scale, sfa_id=_bits(word, 29, 2), sfb_id=_bits(word, 4, 2))
        dtype = "f32"
    else:
        d_code = _bits(word, 4, 2)
        if d_code not in _DTYPES[kind]:
            raise bad("dtype (bits 4-5)", "/".join(f"{c} ({t})" for c, t in _DTYPES[kind].items()), d_code)
        dtype = _DTYPES[kind][d_code]
        if _bits(word, 3, 1) and kind != "kind::i8":
            raise bad("saturate (bit 3)", "0", 1)
        shift = _bits(word, 30, 2)
        if shift and not ws:
            raise bad("maximum shift (bits 30-31)", "0 without .ws", shift)
        fields = dict(saturate=bool(_bits(word, 3, 1)), sparsity_selector=_bits(word, 0, 2),
                      max_shift=(0, 8, 16, 32)[shift])
    desc = InstrDesc(kind=kind, m=m, n=n, k=_K[kind] * (2 if sparse else 1), atype=atype, btype=btype,
                     dtype=dtype, negate_a=neg_a, negate_b=neg_b, mn_major_a=mn_a, mn_major_b=mn_b,
                     sparse=sparse, **fields)
    _check_shape(desc, cta_group, ws, what, word)
    return desc


def _check_shape(d: InstrDesc, cta_group: int, ws: bool, what: str, word: int) -> None:
    """Table 39 (M and N per kind, CTA group and ``.ws``) and Table 52 (8-bit transposed B)."""
    scaled = d.kind in BLOCK_SCALED
    if ws:
        ms, ns = (32, 64, 128), ((64, 128) if d.sparse else (64, 128, 256))
        n_text = "/".join(map(str, ns))
        n_ok = d.n in ns
    else:
        if cta_group == 1:
            ms = (128,) if scaled else (64, 128)
        else:
            ms = (256,) if scaled and d.sparse else (128, 256)
        step = 8 * cta_group
        if d.kind == "kind::i8":
            n_ok = (d.n in (8, 16, 24, 32) or (d.n > 32 and d.n % 16 == 0)) if cta_group == 1 else d.n % 32 == 0
            n_text = "8, 16, 24, 32 or a multiple of 16" if cta_group == 1 else "a multiple of 32"
        else:
            n_ok = d.n % step == 0
            n_text = f"a multiple of {step}"
        if d.mn_major_b and element_bits(d.btype) == 8:            # Table 52
            n_ok = n_ok and d.n % (16 * cta_group) == 0
            n_text += f" (and of {16 * cta_group} for a transposed 8-bit B)"
        n_ok = n_ok and 0 < d.n <= 256
        n_text = f"{n_text} in [{step}, 256]"
    if d.m not in ms:
        mode = ".ws" if ws else f".cta_group::{cta_group}"
        raise SimError(f"{what}: instruction descriptor {word:#010x}: M = {d.m} (bits 24-28) is not a shape of "
                       f".{d.kind} with {mode}; expected one of {', '.join(map(str, ms))} (PTX ISA Table 39)")
    if not n_ok:
        raise SimError(f"{what}: instruction descriptor {word:#010x}: N = {d.n} (bits 17-22) is not a shape of "
                       f".{d.kind} here; expected {n_text} (PTX ISA Table 39)")
