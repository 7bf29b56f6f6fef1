"""Instruction table entries: the Blackwell tensor-memory family (tcgen05).

PTX ISA section "TensorCore 5th Generation Family Instructions": tensor
memory allocation, moves between registers, shared memory and tensor
memory, ``tcgen05.mma`` (dense, sparse, warp-specialised, block-scaled) and
the fences, waits and commits that order them.

Target facts checked with ptxas 13.0: the whole family needs an sm_100
family-specific or arch-specific target and PTX 8.6; ``.kind::i8`` exists
only on sm_100a/sm_101a/sm_110a; ``.scale_vec::NX`` only on the ``a``
targets (``f`` targets spell it ``.block16``/``.block32``, PTX 8.8); the
``scale-input-d`` operand only on sm_100a/f and sm_103a/f; ``tcgen05.shift``
only on the ``a`` targets.

Tensor-memory addresses of ``tcgen05.mma`` must be ``.b32`` registers
(ptxas rejects ``.u32`` there, while ``tcgen05.ld/st/cp/shift`` take any
32-bit register); their generated examples reuse the ``idesc`` register.
"""

from __future__ import annotations

from collections.abc import Mapping

from ._schema import Inst, Operand, Rule, op, slot
from ._targets import SM100_FAMILY, Requires
from ._fidelity import FLOAT_MMA, reading

_SEC = "9.7.16 TensorCore 5th Generation Family Instructions: "
TC05 = Requires(ptx=(8, 6), only=SM100_FAMILY)
A_TARGETS = ("sm_100a", "sm_101a", "sm_103a", "sm_110a")
I8_TARGETS = ("sm_100a", "sm_101a", "sm_110a")
SCALE_D = Requires(ptx=(8, 6), only=("sm_100a", "sm_100f", "sm_103a", "sm_103f"))
PTX87 = Requires(ptx=(8, 7))
PTX88 = Requires(ptx=(8, 8))
ONLY_A = Requires(only=A_TARGETS)
ONLY_I8 = Requires(only=I8_TARGETS)
TC05_A = Requires(ptx=(8, 6), only=A_TARGETS)
TC05_PTX88 = Requires(ptx=(8, 8), only=SM100_FAMILY)

CTA = slot("cta_group", "cta_group::1 cta_group::2")
SYNC = (slot("sync", "sync"), slot("aligned", "aligned"))
NUM = "x1 x2 x4 x8 x16 x32 x64 x128"
NUM_RULES = (
    Rule("shape", "num", ("16x128b",), tuple("x1 x2 x4 x8 x16 x32 x64".split())),
    Rule("shape", "num", ("16x256b",), tuple("x1 x2 x4 x8 x16 x32".split())),
)
TADDR = op("taddr", "mem", "u32")
HALF_SPLIT = op("immHalfSplitoff", "imm")


def _tcgen05_regs(values: Mapping[str, str]) -> int:
    """32-bit registers per thread of ``tcgen05.ld/st``: shape width × ``.num``."""
    per_x1 = {"16x128b": 2, "16x256b": 4}.get(values.get("shape", ""), 1)
    return per_x1 * int(values.get("num", "x1")[1:])


def _tcgen05_lanes(values: Mapping[str, str]) -> int:
    """Length of the ``disable-output-lane`` vector: 4 words per CTA."""
    return 4 if values.get("cta_group") == "cta_group::1" else 8


COUNTS = {"tcgen05_regs": _tcgen05_regs, "tcgen05_lanes": _tcgen05_lanes}

# ---------------------------------------------------------------- tcgen05.mma

MMA_KIND = slot("kind", "kind::f16 kind::tf32 kind::f8f6f4 kind::i8",
                requires={"kind::i8": ONLY_I8})
SCALED_KIND = slot("kind", "kind::f16 kind::tf32")
UNSCALED_KIND = slot("kind", "kind::f8f6f4 kind::i8", requires={"kind::i8": ONLY_I8})
COLLECTOR_A = slot("collector", "collector::a::fill collector::a::use collector::a::lastuse "
                   "collector::a::discard", optional=True)
COLLECTOR_B = slot("collector", " ".join(f"collector::b{i}::{u}" for i in range(4)
                                         for u in ("fill", "use", "lastuse", "discard")),
                   optional=True)
# .ashift shifts the rows of A (in tensor memory) down by one after the MMA; it cannot fill or use the collector.
ASHIFT_COLLECTOR = slot("collector", "collector::a::lastuse collector::a::discard", optional=True)
BLOCK_SCALE = slot("block_scale", "block_scale")
SCALE_VEC = slot("scale", "scale_vec::1X scale_vec::2X scale_vec::4X block16 block32",
                 requires={"scale_vec::1X": ONLY_A, "scale_vec::2X": ONLY_A,
                           "scale_vec::4X": ONLY_A, "block16": PTX88, "block32": PTX88})
# Which scale-vector sizes each block-scaled kind takes (ptxas 13.0).
SCALE_RULES = (
    Rule("kind", "scale", ("kind::mxf8f6f4",), ("scale_vec::1X", "block32")),
    Rule("kind", "scale", ("kind::mxf4",), ("scale_vec::2X", "block32")),
    Rule("kind", "scale", ("kind::mxf4nvf4",),
         ("scale_vec::2X", "scale_vec::4X", "block16", "block32")),
)

# The form resolver tells forms apart by modifiers and operand count only, so
# positions where PTX allows either of two operand kinds at the same count
# take one operand accepting both: A is a shared-memory descriptor or a
# [tensor-memory] address, and six operands of an f16/tf32 MMA end either in
# (disable-output-lane, enable-input-d) or in (enable-input-d, scale-input-d).
A_EITHER = op("a", "reg imm mem", "b64")
B_DESC = op("b_desc", "reg imm", "b64")
IDESC = op("idesc", "reg imm", "b32")
DISABLE_LANE = op("disable_output_lane", "vec", "b32", count="tcgen05_lanes")
ENABLE_D = op("enable_input_d", "pred", neg=True)
SCALE_D_OP = op("scale_input_d", "imm")
LANES_OR_ENABLE = op("lanes_or_enable_d", "vec pred", "b32", count="tcgen05_lanes", neg=True)
ENABLE_OR_SCALE = op("enable_d_or_scale", "pred imm", neg=True)
TAILS = (
    (MMA_KIND, (ENABLE_D,), TC05, ""),
    (UNSCALED_KIND, (DISABLE_LANE, ENABLE_D), TC05, ", masking output lanes"),
    (SCALED_KIND, (LANES_OR_ENABLE, ENABLE_OR_SCALE), TC05,
     ", masking output lanes or scaling D (scaling: sm_100/sm_103 only)"),
    (SCALED_KIND, (DISABLE_LANE, ENABLE_D, SCALE_D_OP), SCALE_D,
     ", masking output lanes and scaling D"),
)


# Where the emulator follows its own reading (jaxptx.sim.semantics.tcgen05_mma has the details).
_FLOAT_KINDS = "kind::f16 kind::tf32 kind::f8f6f4 kind::mxf8f6f4 kind::mxf4 kind::mxf4nvf4"
FLOAT_SUMS = reading(FLOAT_MMA, when={"kind": _FLOAT_KINDS})
SPARSE_METADATA = reading(
    "the PTX ISA draws the sparse metadata's place in tensor memory only in figures (9.7.16.10.8.4); the "
    "emulator follows the layout CUTLASS's sm_100 sparse kernels use")
ASHIFT = reading(
    "the PTX ISA does not say whether .ashift shifts A before or after the MMA, nor over which lanes; the "
    "emulator's MMA reads A unshifted, then moves its rows down one lane over each CTA's 128 lanes (a "
    "hardware report, unconfirmed, has it shift within each 32-lane block)")


def _fidelity(sparse: bool, ashift: bool = False) -> tuple:
    """The readings a tcgen05.mma form follows."""
    return (FLOAT_SUMS, *((SPARSE_METADATA,) if sparse else ()), *((ASHIFT,) if ashift else ()))


def _tmem(name: str) -> Operand:
    """A ``[tensor-memory]`` operand of tcgen05.mma: ptxas wants a ``.b32``
    address register (``.u32`` fails with "Arguments mismatch")."""
    return op(name, "mem", "b32")


def _mma_head(a_tmem: bool, sparse: bool) -> tuple[Operand, ...]:
    """``[d-tmem], a-desc|[a-tmem], b-desc{, [sp-meta-tmem]}, idesc``."""
    a = _tmem("a_tmem") if a_tmem else A_EITHER
    meta = (_tmem("sp_meta_tmem"),) if sparse else ()
    return (_tmem("d_tmem"), a, B_DESC, *meta, IDESC)


def _mma_forms(opcode: str, sparse: bool) -> tuple[Inst, ...]:
    """tcgen05.mma / tcgen05.mma.sp: dense kinds (A from a descriptor or
    tensor memory; ``.ashift`` with A in tensor memory only) and
    block-scaled kinds."""
    what = "sparse " if sparse else ""
    sec = _SEC + opcode
    sim = "tcgen05_mma_sp" if sparse else "tcgen05_mma"
    # Block-scaled sparse MMA on fp4 data exists only on the ``a`` targets.
    sp_kinds = {"kind::mxf4": ONLY_A, "kind::mxf4nvf4": Requires(ptx=(8, 7), only=A_TARGETS)}
    bs_kind = slot("kind", "kind::mxf8f6f4 kind::mxf4 kind::mxf4nvf4",
                   requires=sp_kinds if sparse else {"kind::mxf4nvf4": PTX87})
    bs_default_kind = slot("kind", "kind::mxf8f6f4 kind::mxf4",
                           requires={"kind::mxf4": ONLY_A} if sparse else None)
    head = _mma_head(False, sparse)
    scale_tmem = (_tmem("scale_a_tmem"), _tmem("scale_b_tmem"))
    out: list[Inst] = []
    for ashift in (False, True):
        shift = (slot("ashift", "ashift"), ASHIFT_COLLECTOR) if ashift else (COLLECTOR_A,)
        src = "A in tensor memory, rows shifted" if ashift else "A by descriptor or in TMEM"
        for kind, tail, req, note in TAILS:
            out.append(Inst(opcode, (CTA, kind, *shift), (*_mma_head(ashift, sparse), *tail),
                            requires=req, section=sec, sim="tcgen05_mma_ashift" if ashift else sim,
                            summary=f"{what}tensor-core MMA into tensor memory, {src}{note}",
                            fidelity=_fidelity(sparse, ashift)))
    out.append(Inst(opcode, (CTA, bs_kind, BLOCK_SCALE, SCALE_VEC, COLLECTOR_A),
                    (*head, *scale_tmem, ENABLE_D), requires=TC05, rules=SCALE_RULES,
                    section=sec, sim=sim,
                    summary=f"block-scaled {what}MMA into tensor memory", fidelity=_fidelity(sparse)))
    out.append(Inst(opcode, (CTA, bs_default_kind, BLOCK_SCALE, COLLECTOR_A),
                    (*head, *scale_tmem, ENABLE_D), requires=TC05_PTX88,
                    section=sec, sim=sim,
                    summary=f"block-scaled {what}MMA, default 32-element scale blocks",
                    fidelity=_fidelity(sparse)))
    return tuple(out)


def _mma_ws(opcode: str, sparse: bool) -> Inst:
    """tcgen05.mma.ws / tcgen05.mma.ws.sp: one CTA, B-collector buffers."""
    return Inst(opcode, (slot("cta_group", "cta_group::1"), MMA_KIND, COLLECTOR_B),
                (*_mma_head(False, sparse), ENABLE_D,
                 op("zero_column_mask_desc", "reg imm", "b64", optional=True)),
                requires=TC05, section=_SEC + opcode, sim="tcgen05_mma_sp" if sparse else "tcgen05_mma",
                summary=f"warp-specialised {'sparse ' if sparse else ''}MMA into tensor memory",
                fidelity=_fidelity(sparse))


# ---------------------------------------------------------------- the table

ENTRIES: tuple[Inst, ...] = (
    Inst("tcgen05.alloc", (CTA, *SYNC, slot("space", "shared::cta", optional=True),
                           slot("type", "b32")),
         (op("dst", "mem"), op("nCols", "reg imm", "u32")),
         requires=TC05, section=_SEC + "tcgen05.alloc", sim="tcgen05_alloc",
         summary="allocate nCols tensor-memory columns, writing the address to [dst]"),
    Inst("tcgen05.dealloc", (CTA, *SYNC, slot("type", "b32")),
         (op("taddr", "reg", "b32"), op("nCols", "reg imm", "u32")),
         requires=TC05, section=_SEC + "tcgen05.dealloc", sim="tcgen05_dealloc",
         summary="free tensor-memory columns allocated by tcgen05.alloc"),
    Inst("tcgen05.relinquish_alloc_permit", (CTA, *SYNC), (),
         requires=TC05, section=_SEC + "tcgen05.relinquish_alloc_permit",
         sim="tcgen05_relinquish", summary="give up the right to allocate tensor memory"),
    Inst("tcgen05.ld", (*SYNC, slot("shape", "16x64b 16x128b 16x256b 32x32b"), slot("num", NUM),
                        slot("pack", "pack::16b", optional=True), slot("type", "b32")),
         (op("r", "vec", "$type", out=True, count="tcgen05_regs"), TADDR),
         requires=TC05, rules=NUM_RULES, section=_SEC + "tcgen05.ld", sim="tcgen05_ld",
         summary="load a warp's slice of tensor memory into registers"),
    Inst("tcgen05.ld", (*SYNC, slot("shape", "16x32bx2"), slot("num", NUM),
                        slot("pack", "pack::16b", optional=True), slot("type", "b32")),
         (op("r", "vec", "$type", out=True, count="tcgen05_regs"), TADDR, HALF_SPLIT),
         requires=TC05, section=_SEC + "tcgen05.ld", sim="tcgen05_ld",
         summary="load two 16-lane halves of tensor memory into registers"),
    Inst("tcgen05.st", (*SYNC, slot("shape", "16x64b 16x128b 16x256b 32x32b"), slot("num", NUM),
                        slot("unpack", "unpack::16b", optional=True), slot("type", "b32")),
         (TADDR, op("r", "vec", "$type", count="tcgen05_regs")),
         requires=TC05, rules=NUM_RULES, section=_SEC + "tcgen05.st", sim="tcgen05_st",
         summary="store registers into a warp's slice of tensor memory"),
    Inst("tcgen05.st", (*SYNC, slot("shape", "16x32bx2"), slot("num", NUM),
                        slot("unpack", "unpack::16b", optional=True), slot("type", "b32")),
         (TADDR, HALF_SPLIT, op("r", "vec", "$type", count="tcgen05_regs")),
         requires=TC05, section=_SEC + "tcgen05.st", sim="tcgen05_st",
         summary="store registers into two 16-lane halves of tensor memory"),
    Inst("tcgen05", (slot("op", "wait::ld wait::st"), *SYNC), (),
         requires=TC05, section=_SEC + "tcgen05.wait", sim="tcgen05_wait",
         summary="wait for this thread's tcgen05.ld or tcgen05.st to complete"),
    Inst("tcgen05", (slot("op", "fence::before_thread_sync fence::after_thread_sync"),), (),
         requires=TC05, section=_SEC + "tcgen05.fence", sim="tcgen05_fence",
         summary="order asynchronous tcgen05 operations around a thread synchronisation"),
    Inst("tcgen05.commit", (CTA, slot("completion", "mbarrier::arrive::one"),
                            slot("space", "shared::cluster", optional=True),
                            slot("multicast", "multicast::cluster", optional=True),
                            slot("type", "b64")),
         (op("mbar", "mem"), op("ctaMask", "reg", "b16", when="multicast")),
         requires=TC05, section=_SEC + "tcgen05.commit", sim="tcgen05_commit",
         summary="arrive on an mbarrier once this thread's prior tcgen05 operations complete"),
    Inst("tcgen05.cp", (CTA, slot("shape", "128x256b 4x256b 128x128b 64x128b 32x128b"),
                        slot("multicast", "warpx2::02_13 warpx2::01_23 warpx4", optional=True),
                        slot("dst_fmt", "b8x16", optional=True),
                        slot("src_fmt", "b6x16_p32 b4x16_p64", optional=True)),
         (TADDR, op("s_desc", "reg imm", "b64")),
         requires=TC05, section=_SEC + "tcgen05.cp", sim="tcgen05_cp",
         rules=(Rule("shape", "multicast", ("64x128b",), ("warpx2::02_13", "warpx2::01_23")),
                Rule("shape", "multicast", ("32x128b",), ("warpx4",)),
                Rule("shape", "multicast", ("128x256b", "4x256b", "128x128b"), absent=True),
                Rule("dst_fmt", "src_fmt"), Rule("src_fmt", "dst_fmt")),
         summary="copy a shared-memory matrix (by descriptor) into tensor memory"),
    Inst("tcgen05.shift", (CTA, slot("dir", "down")), (TADDR,),
         requires=TC05_A, section=_SEC + "tcgen05.shift", sim="tcgen05_shift",
         summary="shift 32-byte tensor-memory rows down by one lane"),
    *_mma_forms("tcgen05.mma", sparse=False),
    *_mma_forms("tcgen05.mma.sp", sparse=True),
    _mma_ws("tcgen05.mma.ws", sparse=False),
    _mma_ws("tcgen05.mma.ws.sp", sparse=True),
)
