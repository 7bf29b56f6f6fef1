"""The 32-bit instruction descriptor of ``tcgen05.mma``, encode beside
decode (PTX ISA 9.7.16.4.2 "Instruction descriptor", Tables 42-44), and the
shapes an instruction may give it (Table 39, "Various combinations of .kind
and shapes"; Table 52 for a transposed 8-bit B).

Dense kinds (``f16``, ``tf32``, ``f8f6f4``, ``i8``)::

    0-1 sparsity selector   2 sparse   3 saturate (i8)   4-5 D type
    7-9 A type   10-12 B type   13/14 negate A/B   15/16 transpose A/B
    17-22 N >> 3   24-28 M >> 4   30-31 maximum shift (.ws)

Block-scaled kinds (``mxf8f6f4``, ``mxf4``, ``mxf4nvf4``)::

    2 sparse   4-5 B's scale-factor ID   7-9 A type   10-12 B type
    (10-11 for mxf4*)   13/14 negate   15/16 transpose   17-22 N >> 3
    23 scale type (1 ue8m0, 0 ue4m3)   27-28 M >> 7   29-30 A's scale-factor ID

Every other bit is reserved (0). For one ``.kind`` the format is bijective
on the words whose reserved bits are 0: ``decode(encode(d), kind) == d``
and ``encode(decode(w, kind)) == w``.
"""

from __future__ import annotations

import dataclasses

from ...types import TYPES
from ._fields import BitField, EncodingError, check

__all__ = [
    "AB_TYPES",
    "BLOCK_SCALED",
    "DENSE_FIELDS",
    "DENSE_K",
    "D_TYPES",
    "FP4_FIELDS",
    "KINDS",
    "SCALED_FIELDS",
    "InstrDesc",
    "idesc_fields",
]

_F8F6F4 = {0: "e4m3", 1: "e5m2", 3: "e2m3", 4: "e3m2", 5: "e2m1"}
AB_TYPES: dict[str, dict[int, str]] = {
    "kind::f16": {0: "f16", 1: "bf16"}, "kind::tf32": {2: "tf32"}, "kind::f8f6f4": _F8F6F4,
    "kind::i8": {0: "u8", 1: "s8"}, "kind::mxf8f6f4": _F8F6F4, "kind::mxf4": {1: "e2m1"},
    "kind::mxf4nvf4": {1: "e2m1"},
}
"""Table 42: A/B type code -> type, per kind."""
D_TYPES: dict[str, dict[int, str]] = {"kind::f16": {0: "f16", 1: "f32"}, "kind::tf32": {1: "f32"},
                                      "kind::f8f6f4": {0: "f16", 1: "f32"}, "kind::i8": {2: "s32"}}
"""D type code (bits 4-5) -> type, per dense kind (block-scaled kinds accumulate f32)."""
DENSE_K = {"kind::f16": 16, "kind::tf32": 8, "kind::f8f6f4": 32, "kind::i8": 32,
           "kind::mxf8f6f4": 32, "kind::mxf4": 64, "kind::mxf4nvf4": 64}
"""Table 39: K of a dense MMA per kind (a sparse A doubles it)."""
KINDS = tuple(AB_TYPES)
"""Every ``.kind``, spelled as the instruction's modifier."""
BLOCK_SCALED = ("kind::mxf8f6f4", "kind::mxf4", "kind::mxf4nvf4")
"""The kinds whose descriptor has the block-scaled layout (Tables 43-44)."""
_FP4 = ("kind::mxf4", "kind::mxf4nvf4")
_SHIFTS = (0, 8, 16, 32)

_COMMON = (BitField("sparse", 2, 1), BitField("atype", 7, 3), BitField("negate_a", 13, 1),
           BitField("negate_b", 14, 1), BitField("mn_major_a", 15, 1), BitField("mn_major_b", 16, 1),
           BitField("n", 17, 6))
DENSE_FIELDS = _COMMON + (BitField("sparsity_selector", 0, 2), BitField("saturate", 3, 1),
                          BitField("dtype", 4, 2), BitField("btype", 10, 3), BitField("m", 24, 5),
                          BitField("max_shift", 30, 2))
"""The dense kinds' fields (Table 43)."""
SCALED_FIELDS = _COMMON + (BitField("sfb_id", 4, 2), BitField("btype", 10, 3), BitField("scale_type", 23, 1),
                           BitField("m", 27, 2), BitField("sfa_id", 29, 2))
"""``.kind::mxf8f6f4``'s fields (Table 44); M is stored >> 7."""
FP4_FIELDS = SCALED_FIELDS[:-4] + (BitField("btype", 10, 2),) + SCALED_FIELDS[-3:]
"""``.kind::mxf4``/``mxf4nvf4``'s fields: B's type code has two bits."""


def idesc_fields(kind: str) -> dict[str, BitField]:
    """The descriptor's fields for ``kind`` by name."""
    rows = FP4_FIELDS if kind in _FP4 else SCALED_FIELDS if kind in BLOCK_SCALED else DENSE_FIELDS
    return {f.name: f for f in rows}


def _kind(kind: str) -> str:
    full = kind if kind.startswith("kind::") else f"kind::{kind}"
    check(full in AB_TYPES, "kind", f"one of {[k[6:] for k in KINDS]}", repr(kind))
    return full


def _listing(table: dict[int, str]) -> str:
    return "/".join(f"{c} ({t})" for c, t in table.items())


@dataclasses.dataclass(frozen=True)
class InstrDesc:
    """The fields of one instruction descriptor.

    Attributes:
        kind: the instruction's ``.kind`` modifier (``kind::f16``...; ``f16`` is accepted).
        m, n: the MMA shape (K follows from the kind and sparsity: :attr:`k`).
        atype, btype: element types of A and B (``f16``, ``e2m1``, ``s8``...).
        dtype: type of D (``f16``/``f32``/``s32``; ``f32`` for block-scaled kinds).
        negate_a, negate_b: the negate bits (13, 14).
        mn_major_a, mn_major_b: the transpose bits (15, 16): MN-major when set.
        saturate: ``.kind::i8`` only: clamp D to the s32 range.
        sparse: the sparsity bit (2); ``sparsity_selector`` bits 0-1 (dense kinds).
        max_shift: bits 30-31 of the dense kinds (``.ws`` B reuse): 0, 8, 16 or 32.
        scale_type: block-scaled kinds: ``ue8m0`` or ``ue4m3`` (bit 23); else None.
        sfa_id, sfb_id: block-scaled kinds: scale-factor data IDs (bits 29-30, 4-5).
        k: K of the MMA, not stored in the word: the kind's dense K, doubled
            for a sparse A (left out, it is computed; the emulator replaces it
            by the K of the values A stores). Equality ignores it.

    Example:
        >>> hex(InstrDesc("f16", 128, 256, "bf16", "bf16", "f32", mn_major_b=True).encode())
        '0x8410490'
    """

    kind: str
    m: int
    n: int
    atype: str
    btype: str
    dtype: str = "f32"
    negate_a: bool = False
    negate_b: bool = False
    mn_major_a: bool = False
    mn_major_b: bool = False
    saturate: bool = False
    sparse: bool = False
    sparsity_selector: int = 0
    max_shift: int = 0
    scale_type: str | None = None
    sfa_id: int = 0
    sfb_id: int = 0
    k: int = dataclasses.field(default=0, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", _kind(self.kind))
        if self.kind in BLOCK_SCALED and self.scale_type is None:
            object.__setattr__(self, "scale_type", "ue8m0")
        if not self.k:
            object.__setattr__(self, "k", DENSE_K[self.kind] * (2 if self.sparse else 1))

    def encode(self) -> int:
        """The 32-bit word.

        Raises:
            EncodingError: a type the kind lacks, a field the kind does not
                have set, or a value the field cannot hold.
        """
        kind, f = self.kind, idesc_fields(self.kind)
        codes = {t: c for c, t in AB_TYPES[kind].items()}
        for name, t in (("atype", self.atype), ("btype", self.btype)):
            check(t in codes, name, f"one of {list(codes)} for .{kind}", repr(t))
        check(kind != "kind::f16" or self.atype == self.btype, "atype and btype", f"one type for .{kind}",
              f"{self.atype} and {self.btype}")
        check(kind != "kind::i8" or not (self.negate_a or self.negate_b), "negate_a and negate_b",
              f"False for .{kind}", f"{self.negate_a} and {self.negate_b}")
        check(kind not in _FP4 or not (self.mn_major_a or self.mn_major_b), "mn_major_a and mn_major_b",
              f"False for .{kind} (no transpose for 4-bit packed kinds)", f"{self.mn_major_a} and {self.mn_major_b}")
        check(self.m % (128 if kind in BLOCK_SCALED else 16) == 0, "m",
              f"a multiple of {128 if kind in BLOCK_SCALED else 16}", self.m)
        check(self.n % 8 == 0, "n", "a multiple of 8", self.n)
        word = (f["sparse"].put(int(self.sparse)) | f["atype"].put(codes[self.atype])
                | f["btype"].put(codes[self.btype]) | f["negate_a"].put(int(self.negate_a))
                | f["negate_b"].put(int(self.negate_b)) | f["mn_major_a"].put(int(self.mn_major_a))
                | f["mn_major_b"].put(int(self.mn_major_b)) | f["n"].put(self.n >> 3))
        if kind in BLOCK_SCALED:
            return word | self._scaled_bits(f)
        return word | self._dense_bits(f)

    def _dense_bits(self, f: dict[str, BitField]) -> int:
        kind = self.kind
        dcodes = {t: c for c, t in D_TYPES[kind].items()}
        check(self.dtype in dcodes, "dtype", f"one of {list(dcodes)} for .{kind}", repr(self.dtype))
        check(not self.saturate or kind == "kind::i8", "saturate", f"False for .{kind} (a kind::i8 field)",
              self.saturate)
        check(self.max_shift in _SHIFTS, "max_shift", "0, 8, 16 or 32", self.max_shift)
        check(self.scale_type is None and not (self.sfa_id or self.sfb_id), "scale_type, sfa_id and sfb_id",
              f"None, 0 and 0 for .{kind} (block-scaled kinds' fields)", (self.scale_type, self.sfa_id, self.sfb_id))
        return (f["sparsity_selector"].put(self.sparsity_selector) | f["saturate"].put(int(self.saturate))
                | f["dtype"].put(dcodes[self.dtype]) | f["m"].put(self.m >> 4)
                | f["max_shift"].put(_SHIFTS.index(self.max_shift)))

    def _scaled_bits(self, f: dict[str, BitField]) -> int:
        kind = self.kind
        scales = ("ue8m0", "ue4m3") if kind == "kind::mxf4nvf4" else ("ue8m0",)
        check(self.scale_type in scales, "scale_type", f"one of {list(scales)} for .{kind}", repr(self.scale_type))
        check(self.dtype == "f32", "dtype", f"'f32' for .{kind}", repr(self.dtype))
        check(not (self.saturate or self.sparsity_selector or self.max_shift),
              "saturate, sparsity_selector and max_shift", f"False, 0 and 0 for .{kind} (dense kinds' fields)",
              (self.saturate, self.sparsity_selector, self.max_shift))
        return (f["sfb_id"].put(self.sfb_id) | f["scale_type"].put(int(self.scale_type == "ue8m0"))
                | f["m"].put(self.m >> 7) | f["sfa_id"].put(self.sfa_id))

    @classmethod
    def decode(cls, word: int, kind: str) -> InstrDesc:
        """The descriptor ``word`` of a ``tcgen05.mma`` of ``.kind`` ``kind``.

        Raises:
            EncodingError: a reserved bit set, or a field value the ISA does
                not define for the kind.
        """
        kind = _kind(kind)
        word = int(word) & 0xFFFF_FFFF
        f = idesc_fields(kind)
        used = 0
        for field in f.values():
            used |= field.mask
        for bit in range(32):
            if word >> bit & 1 and not used >> bit & 1:
                if bit == 31 and kind in _FP4:
                    raise EncodingError("bit 31", f"0 for .{kind} (1 asks for K = 96, which only sm_103a runs; "
                                        "the emulator runs sm_100a forms, K = 64)", 1)
                raise EncodingError(f"bit {bit} (reserved)", f"0 for .{kind}", 1)
        codes = AB_TYPES[kind]
        a_code, b_code = f["atype"].get(word), f["btype"].get(word)
        check(a_code in codes, "atype (bits 7-9)", f"{_listing(codes)} for .{kind}", a_code)
        check(b_code in codes, f"btype ({f['btype'].bits})", f"{_listing(codes)} for .{kind}", b_code)
        get = {name: field.get(word) for name, field in f.items()}
        neg_a, neg_b = bool(get["negate_a"]), bool(get["negate_b"])
        mn_a, mn_b = bool(get["mn_major_a"]), bool(get["mn_major_b"])
        check(kind != "kind::f16" or a_code == b_code, "atype and btype", f"one type for .{kind}",
              f"{codes[a_code]} and {codes[b_code]}")
        check(kind != "kind::i8" or not (neg_a or neg_b), "negate A/B (bits 13-14)", f"0 for .{kind}",
              get["negate_a"] | get["negate_b"] << 1)
        check(kind not in _FP4 or not (mn_a or mn_b), "transpose A/B (bits 15-16)",
              f"0 (no transpose for 4-bit packed kinds) for .{kind}", get["mn_major_a"] | get["mn_major_b"] << 1)
        common = {"kind": kind, "n": get["n"] << 3, "atype": codes[a_code], "btype": codes[b_code],
                  "negate_a": neg_a, "negate_b": neg_b, "mn_major_a": mn_a, "mn_major_b": mn_b,
                  "sparse": bool(get["sparse"])}
        if kind in BLOCK_SCALED:
            scale = "ue8m0" if get["scale_type"] else "ue4m3"
            check(scale == "ue8m0" or kind == "kind::mxf4nvf4", "scale type (bit 23)", f"1 (ue8m0) for .{kind}", 0)
            return cls(m=get["m"] << 7, dtype="f32", scale_type=scale, sfa_id=get["sfa_id"], sfb_id=get["sfb_id"],
                       **common)
        dcodes = D_TYPES[kind]
        check(get["dtype"] in dcodes, "dtype (bits 4-5)", f"{_listing(dcodes)} for .{kind}", get["dtype"])
        check(not get["saturate"] or kind == "kind::i8", "saturate (bit 3)", f"0 for .{kind}", 1)
        return cls(m=get["m"] << 4, dtype=dcodes[get["dtype"]], saturate=bool(get["saturate"]),
                   sparsity_selector=get["sparsity_selector"], max_shift=_SHIFTS[get["max_shift"]], **common)

    def check_shape(self, cta_group: int, ws: bool) -> None:
        """Refuse a shape (Table 39; Table 52 for a transposed 8-bit B) or
        a maximum shift the instruction does not take.

        Args:
            cta_group: 1 or 2 (``.cta_group::N``).
            ws: the ``.ws`` form.

        Raises:
            EncodingError: naming M, N or the maximum shift and what the
                instruction takes.
        """
        kind, scaled = self.kind, self.kind in BLOCK_SCALED
        form = ".ws" if ws else f".cta_group::{cta_group}"
        check(not self.max_shift or ws, "maximum shift (bits 30-31)", f"0 without .ws for .{kind}",
              _SHIFTS.index(self.max_shift) if self.max_shift in _SHIFTS else self.max_shift)
        if ws:
            ms, ns = (32, 64, 128), ((64, 128) if self.sparse else (64, 128, 256))
            n_text, n_ok = "/".join(map(str, ns)), self.n in ns
        else:
            if cta_group == 1:
                ms = (128,) if scaled else (64, 128)
            else:
                ms = (256,) if scaled and self.sparse else (128, 256)
            step = 8 * cta_group
            if kind == "kind::i8":
                n_ok = (self.n in (8, 16, 24, 32) or (self.n > 32 and self.n % 16 == 0)) if cta_group == 1 \
                    else self.n % 32 == 0
                n_text = "8, 16, 24, 32 or a multiple of 16" if cta_group == 1 else "a multiple of 32"
            else:
                n_ok, n_text = self.n % step == 0, f"a multiple of {step}"
            if self.mn_major_b and TYPES[self.btype].bits == 8:            # Table 52
                n_ok = n_ok and self.n % (16 * cta_group) == 0
                n_text += f" (and of {16 * cta_group} for a transposed 8-bit B)"
            n_ok = n_ok and 0 < self.n <= 256
            n_text = f"{n_text} in [{step}, 256]"
        check(self.m in ms, "M (bits 24-28)", f"one of {', '.join(map(str, ms))} for .{kind} with {form} "
              "(PTX ISA Table 39)", self.m)
        check(n_ok, "N (bits 17-22)", f"{n_text} for .{kind} with {form} (PTX ISA Table 39)", self.n)
