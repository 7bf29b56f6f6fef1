"""Blackwell (sm_100a) helpers: ``tcgen05.mma`` descriptors and tensor memory.

Three things every ``tcgen05`` kernel builds, each emitting plain PTX (or, for
the instruction descriptor, a trace-time constant):

* :func:`smem_desc` / :func:`smem_desc_bits`: the 64-bit sm_100 shared-memory
  matrix descriptor of an A or B operand (PTX ISA 9.7.16.4.1 "Shared memory
  descriptor"), with :func:`canonical_strides` giving LBO/SBO for tiles TMA
  writes and :func:`k_offset` the byte offset of the k-th K slice;
* :func:`instr_desc`: the 32-bit instruction descriptor of ``tcgen05.mma``
  (PTX ISA 9.7.16.4.2 "Instruction descriptor", kinds f16, tf32, f8f6f4, i8);
* :class:`TensorMemory`: ``tcgen05.alloc`` into a shared word, the address read
  back, ``relinquish_alloc_permit`` and ``dealloc``.

Example (a whole MMA kernel using them: ``tests/dsl/test_tcgen05_helpers.py``):
    >>> from jaxptx import kernel, ptx, smem
    >>> from jaxptx.types import bf16
    >>> @kernel(arch="sm_100a", block=(128, 1, 1))
    ... def k():
    ...     a = smem.wgmma_tile(bf16, (128, 64), major="K")   # a TMA box, 128B swizzle
    ...     tm = TensorMemory(128)
    ...     with ptx.if_(ptx.special.tid.x() < 32):
    ...         tm.alloc()
    ...     tm.sync_after_alloc()
    ...     taddr = tm.address()
    ...     da = smem_desc(a, offset=k_offset(16, major="K", swizzle=128, dtype=bf16, shape=(128, 64)))
    ...     with ptx.if_(ptx.special.tid.x() < 32):
    ...         tm.dealloc(taddr)
    >>> print(k.ptx().count("tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32"))
    1
"""

from __future__ import annotations

from typing import Any

from ..errors import TraceError
from ..isa.encodings import SWIZZLES, TCGEN05_FIELDS, EncodingError, InstrDesc, SmemDescriptor
from ..isa.encodings import swizzle as swizzle_mode
from ..types import TYPES, PtxType, b32, from_dtype
from ._core import Reg, emit_instruction
from ._trace import user_location, with_location
from .smem import SmemArray, alloc as smem_alloc

__all__ = ["SWIZZLE_CODES", "swizzle_code", "smem_desc_bits", "canonical_strides", "k_offset",
           "smem_desc", "advance", "instr_desc", "TensorMemory"]

SWIZZLE_CODES = {s.name: s.tcgen05 for s in sorted(SWIZZLES, key=lambda s: s.tcgen05 or 0) if s.tcgen05 is not None}
"""Swizzle mode name -> the descriptor's bits 61-63 (PTX ISA, "Shared memory descriptor"), read
from :data:`jaxptx.isa.encodings.SWIZZLES`."""

_FIELD = 1 << (4 + TCGEN05_FIELDS[0].width)     # start, LBO and SBO: 14-bit fields of (bytes >> 4)


def _error(message: str) -> TraceError:
    return with_location(TraceError(message), user_location())


def _elem_bytes(dtype: Any) -> int:
    """Bytes of one element of ``dtype`` (a PTX type name, PtxType or numpy dtype)."""
    t = TYPES[dtype] if isinstance(dtype, str) and dtype in TYPES else from_dtype(dtype)
    return max(t.bits // 8, 1)


def swizzle_code(swizzle: str | int) -> str:
    """The mode name of ``swizzle``: a name of :data:`SWIZZLE_CODES`, or a
    span in bytes (0, 32, 64, 128) as ``smem.wgmma_tile`` records it.

    Raises:
        TraceError: an unknown mode.
    """
    if swizzle in SWIZZLE_CODES or (isinstance(swizzle, int) and not isinstance(swizzle, bool)
                                    and swizzle in (s.span for s in SWIZZLES)):
        return swizzle_mode(swizzle).name
    raise _error(f"tcgen05 swizzle: expected one of {list(SWIZZLE_CODES)} or 0/32/64/128 bytes, "
                 f"got {swizzle!r}")


def smem_desc_bits(*, start: int = 0, lbo: int = 16, sbo: int, swizzle: str | int = "128B",
                   base_offset: int = 0) -> int:
    """The sm_100 shared-memory descriptor as a Python int (PTX ISA
    9.7.16.4.1): :class:`jaxptx.isa.encodings.SmemDescriptor`, whose module
    gives the layout (start, LBO and SBO >> 4, the fixed 0b001 in bits 46-48,
    base offset, swizzle code in bits 61-63).

    Args:
        start: the operand's first byte (usually 0 here, OR-ed with a
            register start by :func:`smem_desc`).
        lbo, sbo: byte offsets (see :func:`canonical_strides`).
        swizzle: a name of :data:`SWIZZLE_CODES` or a span in bytes.
        base_offset: 0..7; non-zero only for a swizzled tile not aligned to
            the pattern's repeat (``(address >> 7) & 7``).

    Raises:
        TraceError: an offset not a multiple of 16 or too large, a bad base
            offset or swizzle.

    Example:
        >>> hex(smem_desc_bits(lbo=16, sbo=1024, swizzle="128B"))
        '0x4000404000010000'
    """
    mode = swizzle_code(swizzle)
    try:
        return SmemDescriptor(start, lbo, sbo, base_offset, mode).encode()
    except EncodingError as e:
        raise _error(f"tcgen05 shared memory descriptor: {e}") from None


def canonical_strides(major: str, swizzle: str | int, dtype: Any, shape: tuple[int, int]) -> tuple[int, int]:
    """``(LBO, SBO)`` in bytes for a swizzled tile as TMA writes it: boxes of
    one swizzle span along the contiguous dim, one after another.

    ``shape`` is the tile as stored, rows by contiguous columns: ``(MN, K)``
    for K-major, ``(K, MN)`` for MN-major. With ``W`` the swizzle span in
    bytes (128 for 128B) and ``T = 16 / element bytes``::

        K-major (MN, K), W = 128:          MN-major (K, MN), W = 128:
              K ->  W bytes                      MN -> W bytes   W bytes
          MN +----------------+ \\            K  +-----------+ +-----------+
          |  | 8 rows x W     |  SBO = 8 W    |  | 8 rows    | | next span |
          v  +----------------+ /            v  +-----------+ |  of MN    |
             | next 8 rows    |                  | SBO = 8 W | |  at LBO = |
             +----------------+                  +-----------+ |  K * W    |
          (LBO unused: 16)                                     +-----------+

    K-major: SBO = 8 W (the next 8 rows), LBO is ignored by the hardware
    for swizzled K-major layouts (16 by convention). A K wider than the
    span lies in further (MN x span) blocks: :func:`k_offset` steps there.
    MN-major: SBO = 8 W (the next 8 K rows), LBO = K * W (the next span of
    MN columns: the next TMA box).

    Raises:
        TraceError: no swizzle (the no-swizzle canonical layout has no TMA
            image; give LBO and SBO yourself), a bad major, or a shape the
            span does not divide.

    Example:
        >>> canonical_strides("K", "128B", "bf16", (128, 64))
        (16, 1024)
        >>> canonical_strides("MN", "128B", "bf16", (64, 128))
        (8192, 1024)
    """
    mode = swizzle_code(swizzle)
    if mode == "none":
        raise _error("tcgen05.canonical_strides: a no-swizzle layout has no single TMA image; "
                     "pass lbo= and sbo= (core matrices of 8 rows x 16 bytes)")
    if major not in ("K", "MN"):
        raise _error(f"tcgen05.canonical_strides: major must be 'K' or 'MN', got {major!r}")
    elem = _elem_bytes(dtype)
    width = swizzle_mode(mode).atom_bytes
    rows, cols = shape
    if (cols * elem) % width and cols * elem > width:
        raise _error(f"tcgen05.canonical_strides: rows of {cols * elem} bytes are not whole "
                     f"{width}-byte swizzle spans")
    if major == "K":
        return 16, 8 * width
    return rows * width, 8 * width


def k_offset(k: int, *, major: str, swizzle: str | int, dtype: Any, shape: tuple[int, int],
             lbo: int | None = None, sbo: int | None = None) -> int:
    """Byte offset of the operand that starts at K index ``k`` of a tile
    (``shape`` and layout as :func:`canonical_strides`; LBO/SBO as given
    for the no-swizzle layout).

    K-major swizzled: ``k`` elements along the row, inside the atom
    (``k * bytes``; the hardware applies the swizzle to the resulting
    address, so the start need not be atom aligned) — past the span, into
    the next (MN x span) block. MN-major: ``k`` must be a multiple of 8:
    ``k / 8`` groups of 8 rows at SBO (swizzled) or LBO (no swizzle).
    K-major without swizzle: ``k * bytes / 16`` core matrices at LBO.

    Raises:
        TraceError: a ``k`` that does not start a core matrix.

    Example:
        >>> [k_offset(k, major="K", swizzle="128B", dtype="bf16", shape=(128, 64)) for k in (0, 16, 32)]
        [0, 32, 64]
        >>> k_offset(16, major="MN", swizzle="128B", dtype="bf16", shape=(64, 128))
        2048
    """
    mode = swizzle_code(swizzle)
    elem = _elem_bytes(dtype)
    width = swizzle_mode(mode).atom_bytes
    if major == "K":
        nbytes = k * elem
        if nbytes % 16:
            raise _error(f"tcgen05.k_offset: K-major k={k} is not a whole 16-byte chunk")
        if mode == "none":
            if lbo is None:
                raise _error("tcgen05.k_offset: a no-swizzle K-major tile needs lbo=")
            return nbytes // 16 * lbo
        return nbytes // width * (shape[0] * width) + nbytes % width
    if k % 8:
        raise _error(f"tcgen05.k_offset: MN-major k={k} is not a multiple of 8 rows")
    if mode == "none":
        if lbo is None:
            raise _error("tcgen05.k_offset: a no-swizzle MN-major tile needs lbo=")
        return k // 8 * lbo
    return k // 8 * (8 * width if sbo is None else sbo)


def smem_desc(tile: SmemArray | Reg, *, major: str | None = None, swizzle: str | int | None = None,
              lbo: int | None = None, sbo: int | None = None, base_offset: int = 0,
              offset: int = 0, dtype: Any = None) -> Reg:
    """The 64-bit shared-memory descriptor of ``tile`` in a ``.b64`` register.

    Emits ``add`` (a register start plus ``offset``), ``and``, ``shr``,
    ``cvt.u64.u32`` and one ``or.b64`` with :func:`smem_desc_bits`. For an
    :class:`~jaxptx.dsl.smem.SmemArray` from ``smem.wgmma_tile`` the major,
    swizzle and dtype come from the tile and LBO/SBO default to
    :func:`canonical_strides`; for a u32 address register give them.

    Args:
        tile: the operand tile, or a u32 register holding its address.
        offset: bytes added to the start (e.g. :func:`k_offset`).

    Raises:
        TraceError: missing layout facts, or a bad field (:func:`smem_desc_bits`).
    """
    if isinstance(tile, SmemArray):
        major = tile.major if major is None else major
        swizzle = tile.swizzle if swizzle is None else swizzle
        dtype = tile.dtype if dtype is None else dtype
        if (lbo is None or sbo is None) and major is not None and swizzle_code(swizzle) != "none":
            d_lbo, d_sbo = canonical_strides(major, swizzle, dtype, tile.shape)
            lbo = d_lbo if lbo is None else lbo
            sbo = d_sbo if sbo is None else sbo
        start: Any = tile.base
    else:
        start = tile
    if swizzle is None or lbo is None or sbo is None:
        raise _error("tcgen05.smem_desc: give swizzle=, lbo= and sbo= (or a swizzled smem.wgmma_tile)")
    const = smem_desc_bits(lbo=lbo, sbo=sbo, swizzle=swizzle, base_offset=base_offset)
    if offset:
        start = emit_instruction("add", ("u32",), (start, offset))
    field = emit_instruction("shr", ("u32",), (emit_instruction("and", ("b32",), (start, _FIELD - 1)), 4))
    wide = emit_instruction("cvt", ("u64", "u32"), (field,))
    return emit_instruction("or", ("b64",), (wide, const))


def advance(desc: Reg, nbytes: int) -> Reg:
    """``desc`` with its start moved ``nbytes`` on (one ``add.u64`` of
    ``nbytes >> 4`` to the start field; the start stays below 256 KB, so the
    14-bit field does not carry into LBO).

    Raises:
        TraceError: ``nbytes`` not a multiple of 16.
    """
    if nbytes % 16:
        raise _error(f"tcgen05.advance: {nbytes} bytes is not a multiple of 16")
    return desc + (nbytes >> 4) if nbytes else desc


# ---------------------------------------------------------------- instruction descriptor

def instr_desc(*, kind: str = "f16", a: str = "bf16", b: str | None = None, d: str | None = None,
               m: int = 128, n: int = 128, a_major: str = "K", b_major: str = "K",
               negate_a: bool = False, negate_b: bool = False, saturate: bool = False,
               cta_group: int = 1) -> int:
    """The 32-bit ``tcgen05.mma`` instruction descriptor (dense, no block
    scaling) as a trace-time int: :class:`jaxptx.isa.encodings.InstrDesc`,
    whose docstring gives the layout (PTX ISA 9.7.16.4.2, Tables 42-43),
    checked against the shapes ``tcgen05.mma.cta_group::N`` takes (Table 39).

    Args:
        kind: ``"f16"``, ``"tf32"``, ``"f8f6f4"`` or ``"i8"``.
        a, b: element types of A and B (B defaults to A).
        d: accumulator type (default f32, s32 for i8).
        m, n: the MMA shape (M for the whole CTA pair with ``cta_group=2``).
        a_major, b_major: ``"K"`` or ``"MN"`` (sets the transpose bit).
        cta_group: 1 or 2, for the shape check.

    Raises:
        TraceError: a type the kind lacks, or a shape the kind and CTA group
            do not take (M 64/128 for one CTA, 128/256 for a pair; N a
            multiple of 8 per CTA up to 256; Table 39's rules for i8).

    Example:
        >>> hex(instr_desc(a="bf16", m=128, n=256, b_major="MN"))
        '0x8410490'
    """
    for name, mj in (("a_major", a_major), ("b_major", b_major)):
        if mj not in ("K", "MN"):
            raise _error(f"tcgen05.instr_desc: {name} must be 'K' or 'MN', got {mj!r}")
    if cta_group not in (1, 2):
        raise _error(f"tcgen05.instr_desc: cta_group must be 1 or 2, got {cta_group!r}")
    d = ("s32" if kind == "i8" else "f32") if d is None else d
    try:
        desc = InstrDesc(kind, m, n, a, a if b is None else b, d, negate_a=negate_a, negate_b=negate_b,
                         mn_major_a=a_major == "MN", mn_major_b=b_major == "MN", saturate=saturate)
        word = desc.encode()
        desc.check_shape(cta_group, ws=False)
    except EncodingError as e:
        raise _error(f"tcgen05.instr_desc: {e}") from None
    return word


# ---------------------------------------------------------------- tensor memory

class TensorMemory:
    """A block of tensor-memory columns: ``tcgen05.alloc`` writes its
    address to a shared word (declared here), every thread reads it back.

    Call :meth:`alloc` from one whole warp (with ``cta_group=2``, one warp
    in each CTA of the pair), then :meth:`sync_after_alloc` from every
    thread (fence, ``bar.sync``, fence), then :meth:`address`. At the end,
    after every ``tcgen05.ld`` is waited for and a ``bar.sync``, the
    allocating warp calls :meth:`dealloc` and :meth:`relinquish`.

    The PTX it emits::

        tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [slot], ncols;
        tcgen05.fence::before_thread_sync; bar.sync 0; tcgen05.fence::after_thread_sync;
        ld.shared.b32 taddr, [slot];          // lane 0 (bits 31-16), first column (15-0)
        ...
        tcgen05.dealloc.cta_group::1.sync.aligned.b32 taddr, ncols;
        tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;

    Args:
        ncols: columns, a power of two from 32 to 512 (checked).
        cta_group: 1, or 2 for a CTA pair's common allocation.

    Raises:
        TraceError: a bad column count or CTA group.
    """

    def __init__(self, ncols: int, *, cta_group: int = 1) -> None:
        if not isinstance(ncols, int) or isinstance(ncols, bool) or not 32 <= ncols <= 512 \
                or ncols & (ncols - 1):
            raise _error(f"tcgen05.TensorMemory: ncols must be a power of two from 32 to 512, got {ncols!r}")
        if cta_group not in (1, 2):
            raise _error(f"tcgen05.TensorMemory: cta_group must be 1 or 2, got {cta_group!r}")
        self.ncols = ncols
        self.cta_group = cta_group
        self.slot = smem_alloc(b32, (1,), align=4)

    @property
    def _group(self) -> str:
        return f"cta_group::{self.cta_group}"

    def alloc(self) -> None:
        """``tcgen05.alloc`` (one whole warp)."""
        emit_instruction("tcgen05.alloc", (self._group, "sync", "aligned", "shared::cta", "b32"),
                         (self.slot[0], self.ncols))

    def sync_after_alloc(self) -> None:
        """Make the allocation visible: ``tcgen05.fence::before_thread_sync``,
        ``bar.sync 0``, ``tcgen05.fence::after_thread_sync`` (every thread)."""
        emit_instruction("tcgen05", ("fence::before_thread_sync",), ())
        emit_instruction("bar", ("sync",), (0,))
        emit_instruction("tcgen05", ("fence::after_thread_sync",), ())

    def address(self, dtype: PtxType = b32) -> Reg:
        """The allocated address (``ld.shared.b32`` from the slot)."""
        return emit_instruction("ld", ("shared", dtype.name), (self.slot[0],))

    def relinquish(self) -> None:
        """``tcgen05.relinquish_alloc_permit`` (the allocating warp): this
        CTA allocates no more, which lets other CTAs on the SM go ahead."""
        emit_instruction("tcgen05.relinquish_alloc_permit", (self._group, "sync", "aligned"), ())

    def dealloc(self, taddr: Reg) -> None:
        """``tcgen05.dealloc`` of the block at ``taddr`` (the allocating warp)."""
        emit_instruction("tcgen05.dealloc", (self._group, "sync", "aligned", "b32"), (taddr, self.ncols))
