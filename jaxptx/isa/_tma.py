"""Instruction table entries: Hopper's bulk and tensor copies (TMA) and the
tensor-map instructions.

PTX ISA sections "Data Movement and Conversion Instructions: cp.async.bulk /
cp.async.bulk.prefetch / cp.async.bulk.tensor / cp.async.bulk.commit_group /
wait_group" and "tensormap.replace", "tensormap.cp_fenceproxy".
"""

from __future__ import annotations

from ._schema import Inst, Operand, Rule, op, slot
from ._targets import SM100_FAMILY, Requires
from ._common import SM90_PTX83, SM90_PTX80
from ._hopper import SYNC

# --- bulk and tensor copies (TMA) -----------------------------------------------

_BULK_SEC = "9.7.9 Data Movement and Conversion Instructions: cp.async.bulk"
_BULK_PREFETCH_SEC = "9.7.9 Data Movement and Conversion Instructions: cp.async.bulk.prefetch"
_TENSOR_SEC = "9.7.9 Data Movement and Conversion Instructions: cp.async.bulk.tensor"
_BULK_GROUP_SEC = ("9.7.9 Data Movement and Conversion Instructions: "
                   "cp.async.bulk.commit_group / cp.async.bulk.wait_group")

_COMPLETE_TX = slot("completion", "mbarrier::complete_tx::bytes")
_BULK_GROUP = slot("completion", "bulk_group")
_MULTICAST = slot("multicast", "multicast::cluster", optional=True)
_HINT = slot("hint", "L2::cache_hint", optional=True)
_CTA_GROUP = slot("cta_group", "cta_group::1 cta_group::2", optional=True,
                  requires={v: Requires(sm=100, ptx=(8, 6), only=SM100_FAMILY)
                            for v in ("cta_group::1", "cta_group::2")})
# Copies into shared::cta (rather than the cluster window) arrived with PTX 8.6.
_LOAD_DST = slot("dst", "shared::cluster shared::cta",
                 requires={"shared::cta": Requires(sm=90, ptx=(8, 6))})
_NO_MULTICAST_TO_CTA = (Rule("dst", "multicast", ("shared::cta",), absent=True),)
_SIZE = op("size", "reg imm", "u32")
_MBAR = op("mbar", "mem")
_CTA_MASK = op("cta_mask", "reg imm", "u16", when="multicast")
_POLICY = op("cache_policy", "reg", "b64", when="hint")
_DIMS = (1, 2, 3, 4, 5)


def _tensor_operand(dims: int) -> Operand:
    """``[tensorMap, {c0, ...}]``: the tensor map's generic address and the
    coordinates (.s32 registers or immediates)."""
    coords = ", ".join("%{s32}" if i % 2 else "0" for i in range(dims))
    return op("tensor", "mem", count=dims, example=f"[%{{u64}}, {{{coords}}}]")


def _tensor_load(dims: int, mode: str) -> Inst:
    extra: tuple[Operand, ...] = ()
    mode_slot = slot("load_mode", "tile", optional=True)
    if mode == "im2col":
        mode_slot = slot("load_mode", "im2col")
        # one offset (3-d) may be written {%h0}, which reads as a plain register
        extra = (op("im2col_offsets", "vec reg" if dims == 3 else "vec", "u16", count=dims - 2),)
    return Inst(
        "cp.async.bulk.tensor",
        (slot("dim", f"{dims}d"), _LOAD_DST, slot("src", "global"), mode_slot, _COMPLETE_TX,
         _MULTICAST, _CTA_GROUP, _HINT),
        (op("dst", "mem"), _tensor_operand(dims), _MBAR, *extra, _CTA_MASK, _POLICY),
        requires=SM90_PTX80, rules=_NO_MULTICAST_TO_CTA, section=_TENSOR_SEC,
        sim="cp_async_bulk_tensor",
        summary=f"asynchronous {dims}-D tensor copy from global to shared memory ({mode})")


def _tensor_store(dims: int) -> Inst:
    modes = "tile im2col_no_offs" if dims >= 3 else "tile"
    return Inst(
        "cp.async.bulk.tensor",
        (slot("dim", f"{dims}d"), slot("dst", "global"), slot("src", "shared::cta"),
         slot("load_mode", modes, optional=True), _BULK_GROUP, _HINT),
        (_tensor_operand(dims), op("src", "mem"), _POLICY),
        requires=SM90_PTX80, section=_TENSOR_SEC, sim="cp_async_bulk_tensor",
        summary=f"asynchronous {dims}-D tensor copy from shared to global memory")


_TMA = (
    Inst("cp.async.bulk",
         (_LOAD_DST, slot("src", "global"), _COMPLETE_TX, _MULTICAST, _HINT),
         (op("dst", "mem"), op("src", "mem"), _SIZE, _MBAR, _CTA_MASK, _POLICY),
         requires=SM90_PTX80, rules=_NO_MULTICAST_TO_CTA, section=_BULK_SEC,
         sim="cp_async_bulk", summary="asynchronous bulk copy from global to shared memory"),
    Inst("cp.async.bulk",
         (slot("dst", "shared::cluster"), slot("src", "shared::cta"), _COMPLETE_TX),
         (op("dst", "mem"), op("src", "mem"), _SIZE, _MBAR), requires=SM90_PTX80,
         section=_BULK_SEC, sim="cp_async_bulk",
         summary="asynchronous bulk copy to the shared memory of another CTA in the cluster"),
    Inst("cp.async.bulk",
         (slot("dst", "global"), slot("src", "shared::cta"), _BULK_GROUP, _HINT,
          slot("cp_mask", "cp_mask", optional=True,
               requires={"cp_mask": Requires(sm=100, ptx=(8, 6))})),
         (op("dst", "mem"), op("src", "mem"), _SIZE, _POLICY,
          op("byte_mask", "reg imm", "b16", when="cp_mask")),
         requires=SM90_PTX80, section=_BULK_SEC, sim="cp_async_bulk",
         summary="asynchronous bulk copy from shared to global memory"),
    Inst("cp.async.bulk.prefetch", (slot("level", "L2"), slot("src", "global"), _HINT),
         (op("src", "mem"), _SIZE, _POLICY), requires=SM90_PTX80, section=_BULK_PREFETCH_SEC,
         sim="cp_async_bulk_prefetch", summary="prefetch a global memory range into L2"),
    *(_tensor_load(d, "tile") for d in _DIMS),
    *(_tensor_load(d, "im2col") for d in _DIMS if d >= 3),
    *(_tensor_store(d) for d in _DIMS),
    Inst("cp.async.bulk.commit_group", requires=SM90_PTX80, section=_BULK_GROUP_SEC,
         sim="cp_async_bulk_commit_group",
         summary="commit pending bulk_group copies as a bulk async-group"),
    Inst("cp.async.bulk.wait_group", (slot("read", "read", optional=True),),
         (op("n", "imm", "u32", example="0"),), requires=SM90_PTX80, section=_BULK_GROUP_SEC,
         sim="cp_async_bulk_wait_group",
         summary="wait until at most n bulk async-groups are pending (.read: their sources)"),
)

_TENSORMAP_SEC = "9.7.9.26 Data Movement and Conversion Instructions: tensormap.replace"
_TENSORMAP_REQ = Requires(sm=90, ptx=(8, 3), only=("sm_90a", *SM100_FAMILY, "sm_120a", "sm_121a",
                                                   "sm_120f", "sm_121f"))
_TMAP_ADDR = op("addr", "mem")


def _tensormap(fields: str, type_: str, ordinal: bool, enum: bool = False,
               requires: dict[str, Requires] | None = None) -> Inst:
    # Enumerated fields (element type, swizzle mode...) take an immediate code.
    new_val = op("new_val", "imm", "$type", example="1") if enum else op("new_val", "reg imm", "$type")
    operands = (_TMAP_ADDR, *((op("ord", "imm", "b32", example="0"),) if ordinal else ()), new_val)
    return Inst("tensormap.replace", (slot("mode", "tile"), slot("field", fields, requires=requires),
                                      slot("space", "shared::cta global", optional=True),
                                      slot("size", "b1024"), slot("type", type_)),
                operands, requires=_TENSORMAP_REQ, section=_TENSORMAP_SEC, sim="tensormap_replace",
                summary="rewrite one field of a tensor map in memory")


_TENSORMAP = (
    Inst("tensormap.cp_fenceproxy", (slot("dst", "global"), slot("src", "shared::cta"),
                                     slot("proxy", "tensormap::generic"), slot("sem", "release"),
                                     slot("scope", "cta cluster gpu sys"), *SYNC),
         (op("dst", "mem"), op("src", "mem"), op("size", "imm", "u32", example="128")),
         requires=SM90_PTX83, section="9.7.9.27 tensormap.cp_fenceproxy", sim="tensormap_cp_fenceproxy",
         summary="copy a tensor map to global memory and release it to the tensormap proxy"),
    _tensormap("global_address", "b64", False),
    _tensormap("rank", "b32", False),
    _tensormap("box_dim global_dim element_stride", "b32", True),
    _tensormap("global_stride", "b64", True),
    _tensormap("elemtype interleave_layout swizzle_mode swizzle_atomicity fill_mode", "b32", False,
               enum=True, requires={"swizzle_atomicity": Requires(sm=100, ptx=(8, 6), only=SM100_FAMILY)}),
)


ENTRIES: tuple[Inst, ...] = (
    *_TMA,
    *_TENSORMAP,
)
